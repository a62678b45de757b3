# Lays out the Python package in the build tree (called by
# python/CMakeLists.txt at every build):
#   cmake -DSRC=python/kolo -DDST=build/python/kolo -DLIBKOLO=<libkolo path>
#         -DLIBKOLO_SONAME=libkolo.so.0 -P link_package.cmake
# Every *.py under SRC becomes a symbolic link under DST (same relative
# path); DST/<soname> links to libkolo.
file(GLOB_RECURSE sources RELATIVE ${SRC} ${SRC}/*.py)
foreach(rel ${sources})
  if(rel MATCHES "__pycache__")
    continue()
  endif()
  get_filename_component(dir ${DST}/${rel} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  if(NOT IS_SYMLINK ${DST}/${rel})
    file(REMOVE ${DST}/${rel})
    file(CREATE_LINK ${SRC}/${rel} ${DST}/${rel} SYMBOLIC)
  endif()
endforeach()
if(NOT IS_SYMLINK ${DST}/${LIBKOLO_SONAME})
  file(CREATE_LINK ${LIBKOLO} ${DST}/${LIBKOLO_SONAME} SYMBOLIC)
endif()
