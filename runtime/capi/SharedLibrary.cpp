//===- SharedLibrary.cpp - libmoss.so's own translation unit --------------===//
//
// libmoss.so links the runtime and GEMM archives whole; the C API's
// definitions come from there (runtime/api/CApi.cpp, runtime/gemm/
// GemmCApi.cpp). This file only gives the target a source and pins the
// header it exports.
//
//===----------------------------------------------------------------------===//

#include "moss/moss.h"

static_assert(MOSS_API_VERSION == 2,
              "libmoss.so's SOVERSION follows MOSS_API_VERSION: bump both");
