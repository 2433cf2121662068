//===- GemmSource.h - The GEMM kernel's translation unit --------*- C++ -*-===//
//
// The one writer of a GEMM kernel's CUDA C++ (docs/GEMM-KERNEL-ABI.md): the
// `moss::gemm_kernel::Config<...>` arguments of a parameter set, the
// kernel's name (a hash of them) and the translation unit around them.
// moss-convert-gemm-to-emitc writes the same lines into its emitc.file;
// the runtime, the tests and the bench take the text from here. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_GEMMSOURCE_H
#define MOSS_COMPILER_GEMMSOURCE_H

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/KernelSource.h"

#include "moss/gemm/config.cuh"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace moss::compiler {

/// The header every GEMM translation unit includes.
inline constexpr const char *kGemmKernelHeader = "moss/gemm/kernel.cuh";
/// The alias of the configuration inside the unit.
inline constexpr const char *kGemmConfigAlias = "MossGemmConfig";

/// The template arguments of `moss::gemm_kernel::Config` for `p`, one source
/// line each as docs/GEMM-KERNEL-ABI.md lays them out, the last closing the
/// list (the optional parameters only up to the last one set).
llvm::SmallVector<std::string>
getGemmConfigArguments(const gemm_kernel::Params &p);

/// "moss_gemm_" and 16 hex digits of the XXH3 hash of the argument lines:
/// a function of the configuration only, the same in every process.
std::string getGemmKernelName(llvm::ArrayRef<std::string> configArguments);

/// A GEMM kernel's translation unit and its `extern "C"` kernel.
struct GemmTranslationUnit {
  std::string source;
  std::string kernelName;
};

/// The translation unit of the kernel of `p`: the header, the Config alias
/// and the kernel that calls `moss::gemm_kernel::run`.
GemmTranslationUnit generateGemmTranslationUnit(const gemm_kernel::Params &p);

/// The kernel of `plan` (its kernel spec on its tiling) ready for NVRTC: the
/// text compileGemm(plan) produces through the pass pipeline, without MLIR,
/// and its launch geometry from the compiler's resource model.
KernelSource generateGemmSource(const GemmPlan &plan, const TargetInfo &target);

} // namespace moss::compiler

#endif // MOSS_COMPILER_GEMMSOURCE_H
