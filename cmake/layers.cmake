# The layers of docs/design (DESIGN.md, "Layers") as build rules.
#
# kolo_layer(TARGET <target> LAYER <dir under src/> [DEPENDS <layers>...]
#            [PRIVATE_PUBLIC_HEADERS])
#
# A layer's sources include internal headers as "<layer>/<header>.h". Each
# layer target sees, besides include/ and the generated config, only the
# directories of its own layer and of the layers it depends on (DEPENDS,
# and theirs, transitively): build/layers/<layer>/ holds a symbolic link to
# each of them and is the target's only path into src/. An include of a
# layer that is not a dependency fails to compile ("No such file"). A layer
# must be declared after the layers it depends on. include/ and the
# generated config are PUBLIC, unless PRIVATE_PUBLIC_HEADERS (the target
# states its interface itself).
function(kolo_layer)
  cmake_parse_arguments(L "PRIVATE_PUBLIC_HEADERS" "TARGET;LAYER" "DEPENDS" ${ARGN})
  set(closure ${L_LAYER})
  foreach(dep ${L_DEPENDS})
    get_property(depClosure GLOBAL PROPERTY KOLO_LAYER_CLOSURE_${dep})
    if(NOT depClosure)
      message(FATAL_ERROR "kolo_layer(${L_LAYER}): layer '${dep}' is not declared (yet)")
    endif()
    list(APPEND closure ${depClosure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set_property(GLOBAL PROPERTY KOLO_LAYER_CLOSURE_${L_LAYER} ${closure})

  set(dir ${CMAKE_BINARY_DIR}/layers/${L_LAYER})
  file(MAKE_DIRECTORY ${dir})
  # Links only (file(REMOVE) removes a link, never what it points to).
  file(GLOB stale LIST_DIRECTORIES true ${dir}/*)
  foreach(entry ${stale})
    file(REMOVE ${entry})
  endforeach()
  foreach(layer ${closure})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${dir}/${layer} SYMBOLIC)
  endforeach()
  target_include_directories(${L_TARGET} PRIVATE ${dir})
  if(L_PRIVATE_PUBLIC_HEADERS)
    set(scope PRIVATE)  # the target states its interface itself
  else()
    set(scope PUBLIC)
  endif()
  target_include_directories(${L_TARGET} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/generated>)
endfunction()
