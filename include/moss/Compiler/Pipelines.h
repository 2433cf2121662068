//===- Pipelines.h - The moss compiler pipeline ------------------*- C++
//-*-===//
//
// The whole GEMM pipeline in one place:
//
//   moss.gemm (M maybe dynamic)
//     -> moss-specialize-shapes   unify M/N/K, fix M (m=...), N and K static
//     -> moss-select-tiling       #moss.tiling from the heuristic (or kept)
//     -> moss-convert-gemm-to-emitc   emitc.file per kernel function
//     -> translateToCudaUnits     CUDA C++ text (MLIR's C++ emitter)
//
// NVRTC (PTX, cubin) follows in the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_PIPELINES_H
#define MOSS_COMPILER_PIPELINES_H

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/PlannedRows.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::moss {

/// Options of the GEMM pipeline (also `moss-opt --moss-gemm-pipeline="..."`).
struct GemmPipelineOptions : public PassPipelineOptions<GemmPipelineOptions> {
  PassOptions::Option<int64_t> m{
      *this, "m",
      llvm::cl::desc("Specialize a dynamic M to this value (0: keep it)"),
      llvm::cl::init(0)};
  PassOptions::Option<unsigned> smCount{
      *this, "sm-count", llvm::cl::desc("SMs of the target (H200: 132)"),
      llvm::cl::init(132)};
  PassOptions::Option<unsigned> sharedMemoryBytes{
      *this, "shared-memory-bytes",
      llvm::cl::desc("Shared memory per block (H200: 227 KiB)"),
      llvm::cl::init(232448)};
  PassOptions::Option<int64_t> assumedM{
      *this, "assumed-m",
      llvm::cl::desc("The M the tiling heuristic plans for when M is dynamic"),
      llvm::cl::init(::moss::compiler::kAssumedM)};
  PassOptions::Option<bool> allowSplitK{
      *this, "allow-split-k",
      llvm::cl::desc("Let the tiling heuristic split K"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> foldAInKernel{
      *this, "fold-a-in-kernel",
      llvm::cl::desc("Compile an op that folds A by rows to the kernel that "
                     "folds A itself, where it can"),
      llvm::cl::init(false)};
  PassOptions::Option<std::string> tuningDatabase{
      *this, "tuning-db",
      llvm::cl::desc("A tuning database (JSON) consulted before the "
                     "heuristic (docs/TUNING.md)"),
      llvm::cl::init("")};
  PassOptions::Option<std::string> arch{
      *this, "arch",
      llvm::cl::desc("CUDA arch of the target, for the tuning database"),
      llvm::cl::init("sm_90a")};
  PassOptions::Option<bool> quickCompile{
      *this, "quick-compile",
      llvm::cl::desc("Lower to the quick-compile variant of the kernel "
                     "(moss-convert-gemm-to-emitc)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> lowerQuantize{
      *this, "lower-quantize",
      llvm::cl::desc("Also lower moss.quantize kernel functions "
                     "(moss-convert-quantize-to-emitc)"),
      llvm::cl::init(true)};
};

/// Adds the GEMM pipeline to `pm`, which must run on builtin.module.
void buildGemmPipeline(OpPassManager &pm, const GemmPipelineOptions &options);

/// Registers `moss-gemm-pipeline` with the pass pipeline registry.
void registerGemmPipeline();

} // namespace mlir::moss

#endif // MOSS_COMPILER_PIPELINES_H
