//===- Folder.h - Folding E8M0 block factors on the GPU ---------*- C++ -*-===//
//
// moss::numerics::foldBlockScales on the GPU: a memory-bound pass that turns
// a two-level or MXFP8 operand into a per-row or per-group 1x128 one, the
// same bits as the host rule. The GEMM runs it on an operand whose spec asks
// for a fold (GemmSpec::fold); callers that use one operand many times
// (weights) can fold it once themselves and hand the GEMM the result.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_FOLDER_H
#define MOSS_RUNTIME_API_FOLDER_H

#include "moss/Compiler/QuantizerSource.h"
#include "moss/Numerics/Fold.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cuda.h>
#include <memory>
#include <string>
#include <unordered_map>

namespace moss::runtime {

/// One operand to fold: codes [rows, cols] of `format`, scaled by `scheme`
/// (two-level or MXFP8) with blocks along cols.
struct FoldSpec {
  int64_t rows = 0;
  int64_t cols = 0;
  numerics::Fp8Format format = numerics::Fp8Format::E4M3;
  numerics::ScalingScheme scheme;
  /// K128 or Row.
  numerics::BlockScaleFold fold = numerics::BlockScaleFold::Row;
};

/// Device buffers of one fold.
struct FoldBuffers {
  /// Codes and E8M0 factors to fold; codes 16-byte aligned.
  CUdeviceptr codes = 0;
  CUdeviceptr e8m0 = 0;
  /// FP32 global scales, exactly when the scheme has them; 4-byte aligned.
  CUdeviceptr global = 0;
  /// The folded codes [rows, cols] (16-byte aligned; not `codes`) and FP32
  /// factors: [rows] for Row, [rows, cols / 128] for K128.
  CUdeviceptr outCodes = 0;
  CUdeviceptr outFactors = 0;
};

/// Elements of FoldBuffers::outFactors for `spec`.
int64_t getFoldFactorCount(const FoldSpec &spec);

/// Checks a spec (numerics::checkFold, and the kernel's limits).
llvm::Error checkFoldSpec(const FoldSpec &spec);

/// The CUDA source of the kernel `moss_fold` for a checked spec, and its
/// block size.
std::string generateFoldSource(const FoldSpec &spec);
constexpr unsigned kFoldThreads = 256;

/// Builds the fold kernel of a spec into `cache` (or finds it there), with
/// no GPU; what GpuFolder launches for it.
llvm::Expected<std::shared_ptr<const KernelEntry>>
compileFoldKernel(KernelCache &cache, const FoldSpec &spec);

/// Runs folds in one CUDA context: the one current at its first call (a
/// call from another context is an error). Not thread-safe: use one per
/// thread.
class GpuFolder {
public:
  GpuFolder(KernelCache &cache, int smCount);
  ~GpuFolder();
  GpuFolder(const GpuFolder &) = delete;
  GpuFolder &operator=(const GpuFolder &) = delete;

  /// Folds on `stream`. The spec and every pointer are checked before the
  /// launch; the first call for a format, scheme and fold compiles the
  /// kernel (or loads it from the cache).
  llvm::Error fold(const FoldSpec &spec, const FoldBuffers &buffers,
                   CUstream stream);

  /// Compiles (or loads) the kernel fold() launches for `spec`.
  llvm::Error prepare(const FoldSpec &spec);

private:
  KernelCache &cache;
  int smCount;
  struct Plan;
  llvm::Expected<const Plan *> getPlan(const FoldSpec &spec);
  std::unordered_map<uint64_t, std::unique_ptr<Plan>> plans;
  ContextBinding context;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_FOLDER_H
