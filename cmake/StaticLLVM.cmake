# Link LLVM and MLIR statically.
#
# Debian's MLIR CMake targets link the libLLVM shared library ("LLVM" in their
# INTERFACE_LINK_LIBRARIES). Our tools must run on machines with no LLVM
# installed (the GPU machines), so every imported MLIR target gets the static
# LLVM component libraries instead, and LLVMSupport's own system dependencies
# are pinned to static zlib/zstd. The result needs only libc, libstdc++ and
# libm (checked by tests/lit/tools/static-link.test).

# MLIR 22 also needs the remarks library (MLIRRemarkStreamer).
llvm_map_components_to_libnames(MOSS_LLVM_STATIC_LIBS support demangle remarks)

find_library(MOSS_ZLIB_STATIC NAMES libz.a)
find_library(MOSS_ZSTD_STATIC NAMES libzstd.a)
if(NOT MOSS_ZLIB_STATIC OR NOT MOSS_ZSTD_STATIC)
  message(FATAL_ERROR
    "Static zlib and zstd are needed to link LLVM statically: install the "
    "Debian packages zlib1g-dev and libzstd-dev.")
endif()
find_package(Threads REQUIRED)

# LLVMSupport's exported interface names shared libz, libzstd and libz3;
# nothing of ours uses Z3, and the compression code links from the archives.
set_target_properties(LLVMSupport PROPERTIES INTERFACE_LINK_LIBRARIES
  "LLVMDemangle;${MOSS_ZLIB_STATIC};${MOSS_ZSTD_STATIC};Threads::Threads;rt;dl;m")

get_directory_property(_moss_imported IMPORTED_TARGETS)
foreach(_target IN LISTS _moss_imported)
  if(NOT _target MATCHES "^MLIR")
    continue()
  endif()
  get_target_property(_libs ${_target} INTERFACE_LINK_LIBRARIES)
  if(NOT _libs)
    continue()
  endif()
  list(FIND _libs LLVM _index)
  if(_index EQUAL -1)
    continue()
  endif()
  list(REMOVE_ITEM _libs LLVM)
  list(APPEND _libs ${MOSS_LLVM_STATIC_LIBS})
  set_target_properties(${_target} PROPERTIES INTERFACE_LINK_LIBRARIES "${_libs}")
endforeach()
