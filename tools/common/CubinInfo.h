//===- CubinInfo.h - What a cubin says about its kernels --------*- C++ -*-===//
//
// Reads a kernel's register count out of a cubin (an ELF file) without a GPU:
// ptxas records it in the `.nv.info` section as an EIATTR_REGCOUNT attribute
// of the kernel's symbol. The driver reports the same number
// (CU_FUNC_ATTRIBUTE_NUM_REGS) once the cubin is loaded.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_CUBININFO_H
#define MOSS_TOOLS_COMMON_CUBININFO_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace moss::jit {

/// The registers per thread of `kernel` in `cubin`; an error when the bytes
/// are not an ELF cubin or do not name the kernel's register count.
llvm::Expected<int> getCubinRegisterCount(llvm::StringRef cubin,
                                          llvm::StringRef kernel);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_CUBININFO_H
