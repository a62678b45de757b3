# The include check of one layer (cmake/layers.cmake), run at build time:
#   cmake -DCONFIG=<build>/layers/<layer>/check.cmake -P cmake/check_layer.cmake
# CONFIG sets LAYER, LAYER_CLOSURE (the layer and those it may use),
# LAYER_HEADERS (the public headers it may include), LAYER_FILES (its files
# under src/<layer>/ and its public headers) and OWNERS (each public
# header's layer, KOLO_OWNER_<header>, and KOLO_ALL_LAYERS).
#
# An include is checked when it names a public header (kolo/<header>) or an
# internal one of a layer ("<layer>/..."); any other (system, libtorch) is
# not kolo's. Every wrong include is reported, then the check fails.
cmake_minimum_required(VERSION 3.20)
include(${CONFIG})
include(${OWNERS})

set(errors "")
foreach(file ${LAYER_FILES})
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  file(READ ${file} content)
  foreach(line ${lines})
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
      continue()
    endif()
    set(path ${CMAKE_MATCH_1})
    set(owner "")
    if(path MATCHES "^kolo/([^/]+)$")
      set(header ${CMAKE_MATCH_1})
      if(header IN_LIST LAYER_HEADERS)
        continue()
      endif()
      set(owner "${KOLO_OWNER_${header}}")
      if(NOT owner)
        set(owner "no layer (not a public header)")
      else()
        set(owner "layer '${owner}'")
      endif()
    elseif(path MATCHES "^([a-z_]+)/")
      set(layer ${CMAKE_MATCH_1})
      if(NOT layer IN_LIST KOLO_ALL_LAYERS OR layer IN_LIST LAYER_CLOSURE)
        continue()
      endif()
      set(owner "layer '${layer}'")
    else()
      continue()
    endif()
    # The line number, for the message: newlines before the line, plus one.
    string(FIND "${content}" "${line}" at)
    string(SUBSTRING "${content}" 0 ${at} before)
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines number)
    math(EXPR number "${number} + 1")
    file(RELATIVE_PATH shown ${SOURCE_DIR} ${file})
    string(APPEND errors "  ${shown}:${number}: includes <${path}>, of ${owner}\n")
  endforeach()
endforeach()

if(errors)
  list(REMOVE_ITEM LAYER_CLOSURE ${LAYER})
  if(NOT LAYER_CLOSURE)
    set(LAYER_CLOSURE "none")
  endif()
  string(REPLACE ";" " " below "${LAYER_CLOSURE}")
  message(FATAL_ERROR
    "kolo layer check: layer '${LAYER}' includes what it does not depend on:\n"
    "${errors}"
    "Layer '${LAYER}' may include only its own headers and those of the layers it "
    "depends on (${below}), internal (\"<layer>/...\") and public (<kolo/...>). "
    "Move the code, or declare the dependency in its kolo_layer(... DEPENDS ...) if "
    "the layers allow it (docs/runtime.md, \"Layers in the build\").")
endif()
