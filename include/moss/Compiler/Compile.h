//===- Compile.h - GEMM spec to kernel source -------------------*- C++ -*-===//
//
// The compiler's entry point for callers without MLIR: compileGemm() builds
// the `moss.gemm` of a GemmSpec, runs the pipeline of Pipelines.h on it and
// translates the result to CUDA C++. No MLIR types in this header.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_COMPILE_H
#define MOSS_COMPILER_COMPILE_H

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/KernelSource.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Compiler/TuningDatabase.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <optional>

namespace moss::compiler {

/// Stage names given to CompileOptions::onStage, in pipeline order. Between
/// the first and the last come the passes, named by their arguments:
/// "moss-specialize-shapes", "moss-select-tiling",
/// "moss-convert-gemm-to-emitc" (the IR after each).
constexpr llvm::StringLiteral kStageInput = "moss"; ///< the built moss.gemm IR
constexpr llvm::StringLiteral kStageCuda = "cuda";  ///< the C++ text

/// Called with each stage's name and its text (IR or C++).
using StageCallback =
    std::function<void(llvm::StringRef stage, llvm::StringRef text)>;

/// Options of compileGemm().
struct CompileOptions {
  /// A tile configuration to use instead of the heuristic's (the runtime's
  /// chooseTiling, the tuner). It is checked against the target's limits.
  std::optional<TileConfig> tiling;
  /// The M the heuristic plans for when the spec's M is dynamic.
  int64_t assumedM = kAssumedM;
  /// Whether the heuristic may split K.
  bool allowSplitK = false;
  /// The quick-compile variant of the kernel (the first kernel of
  /// GemmRunner's tiered compile): the same arithmetic in shorter
  /// straight-line promotion groups, with each stage's scales loaded on
  /// their own, on tiles narrowed by getQuickCompileTiling (of the given
  /// tiling, else of the heuristic's). Kernels that do not promote are the
  /// same but for the flag.
  bool quickCompile = false;
  /// Called with each stage's name and its text (IR or C++), for
  /// `moss-jit compile --emit`.
  StageCallback onStage;
};

/// Compiles one GEMM for `target`, as its schemes say: callers whose spec
/// folds (GemmSpec::getFold) compile spec.getKernelSpec(), the GEMM of the
/// folded operands. The moss.gemm from `spec` (M dynamic in
/// the IR, then specialized by moss-specialize-shapes when `spec.m` is
/// static), the pipeline (buildGemmPipeline), and the C++ emitter. Errors
/// carry the compiler's diagnostics, e.g. "K=100 of operand A is not a
/// multiple of the scaling block 32 of #moss.scaling<two_level 32, ...>".
llvm::Expected<KernelSource> compileGemm(const GemmSpec &spec,
                                         const TargetInfo &target,
                                         const CompileOptions &options = {});

/// Compiles the kernel of `plan` (planGemm): the moss.gemm of
/// `plan.kernel` on `plan.tiling`, through the same pipeline. The
/// runtime's path; it decides nothing the plan has decided.
llvm::Expected<KernelSource> compileGemm(const GemmPlan &plan,
                                         const TargetInfo &target,
                                         const StageCallback &onStage = {});

} // namespace moss::compiler

#endif // MOSS_COMPILER_COMPILE_H
