//===- CublasLtBaseline.h - cuBLASLt GEMM baselines -------------*- C++ -*-===//
//
// cuBLASLt GEMMs timed in the benchmark's own process, so that MOSS-JIT's
// kernel is compared with the vendor library on the same GPU, clocks and
// driver. Each GEMM has its own random operands (never zeros). A prepared
// GEMM (prepareCublasLt*) runs one cublasLtMatmul per run(), so a benchmark
// can time it round-robin with its own kernels (under the power cap the
// clocks depend on what ran just before); timeCublasLt times back-to-back
// calls with CUDA events (moss::runtime::timeWithEvents) and returns the
// median in milliseconds. Everything is released with the prepared GEMM.
//
// Operands follow the MOSS GEMM convention: A is [M, K] row-major, B is
// [N, K] row-major (both K-major), D = A * B^T is [M, N] row-major bf16.
//
// Any failure -- cuBLASLt not installed (it is opened at run time, see
// MOSS_CUBLASLT_PATH), no algorithm from the heuristic, a status other than
// CUBLAS_STATUS_SUCCESS, an allocation failure -- comes back as an error
// whose message says why, and the caller prints "unsupported: <reason>".
//
// Users: moss-bench-gemm, moss-tune (--cublaslt) and moss-jit demo.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_BENCH_CUBLASLTBASELINE_H
#define MOSS_BENCH_CUBLASLTBASELINE_H

#include "llvm/Support/Error.h"

#include <cuda.h>

#include <cstdint>
#include <memory>

namespace moss::bench {

/// One problem: D[M,N] = A[M,K] * B[N,K]^T, timed `repeat` times after
/// `warmup` untimed runs on `stream` (in the current CUDA context).
struct CublasLtProblem {
  int m = 8192;
  int n = 8192;
  int k = 8192;
  int warmup = 3;
  int repeat = 20;
  CUstream stream = nullptr;
  uint64_t seed = 42;
};

/// One baseline GEMM with its operands, ready to run.
class CublasLtGemm {
public:
  virtual ~CublasLtGemm();
  /// Enqueues one cublasLtMatmul on the problem's stream.
  virtual llvm::Error run() = 0;
};

/// BF16 A and B, FP32 compute, BF16 D.
llvm::Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtBf16(const CublasLtProblem &problem);

/// E4M3 A and B with one FP32 scale each (device scalars through
/// CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER), FP32 compute, BF16 D; the
/// library's default mode, which promotes the tensor cores' sums into FP32
/// along K.
llvm::Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8PerTensor(const CublasLtProblem &problem);

/// The same with CUBLASLT_MATMUL_DESC_FAST_ACCUM: the FP8 products are
/// summed in the tensor cores over all of K, never promoted (the accuracy
/// class of MOSS-JIT's unpromoted kernels).
llvm::Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8PerTensorFastAccum(const CublasLtProblem &problem);

/// E4M3 A and B, A scaled per 1x128 block along K and B per 128x128 block
/// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / _BLK128x128_32F, CUDA 12.9+),
/// FP32 compute, BF16 D. K must be a multiple of 128.
llvm::Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8BlockScaled(const CublasLtProblem &problem);

/// The median time in milliseconds of `problem.repeat` runs of `gemm` (a
/// prepareCublasLt* result; its error passes through) after
/// `problem.warmup` untimed ones.
llvm::Expected<double>
timeCublasLt(const CublasLtProblem &problem,
             llvm::Expected<std::unique_ptr<CublasLtGemm>> gemm);

} // namespace moss::bench

#endif // MOSS_BENCH_CUBLASLTBASELINE_H
