//===- GemmProblem.h - A GEMM's operands on the GPU, for run/bench -*- C++
//-*-===//
//
// Host matrices quantized with the reference quantizers (the GPU's give the
// same bits), uploaded with the bias and C the spec asks for, and the
// moss::GemmBuffers that point at them. The device memory is freed with the
// problem.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_GEMMPROBLEM_H
#define MOSS_TOOLS_COMMON_GEMMPROBLEM_H

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Quantize.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace moss::jit {

class GemmProblem {
public:
  /// The operands as quantized, and as the kernel multiplies them: folded
  /// when the spec folds (GemmSpec::getKernelSpec), else the same. Host work
  /// only: callers may make several at once on threads of their own.
  struct Operands {
    numerics::QuantizedTensor qa, qb;
    numerics::QuantizedTensor kernelA, kernelB;
  };
  /// Quantizes `a` [m, K] and `b` [N, K] by the spec's schemes.
  static llvm::Expected<Operands>
  quantizeOperands(const compiler::GemmSpec &spec, int64_t m,
                   const std::vector<float> &a, const std::vector<float> &b);

  /// Quantizes `a` [m, K] and `b` [N, K] by the spec's schemes and uploads
  /// them; bias and C (when the spec has them) are random values exact in
  /// every output type, from `seed`. The output is allocated, not set.
  static llvm::Expected<std::unique_ptr<GemmProblem>>
  create(const compiler::GemmSpec &spec, int64_t m, const std::vector<float> &a,
         const std::vector<float> &b, uint64_t seed);
  /// create() of operands already quantized (quantizeOperands).
  static llvm::Expected<std::unique_ptr<GemmProblem>>
  create(const compiler::GemmSpec &spec, int64_t m, Operands operands,
         uint64_t seed);
  ~GemmProblem();

  /// Fills the output with 0xFF bytes (NaN in every output type) and zeroes
  /// amax, on `stream`.
  llvm::Error poison(CUstream stream) const;

  /// The output as floats (synchronous).
  llvm::Expected<std::vector<float>> downloadOutput() const;
  /// The amax output (synchronous); 0 without one.
  llvm::Expected<float> downloadAmax() const;

  compiler::GemmSpec spec;
  int64_t m = 0;
  /// The operands as quantized (uploaded), and as the kernel multiplies
  /// them: folded when the spec folds (GemmSpec::getKernelSpec), else the
  /// same.
  numerics::QuantizedTensor qa, qb;
  numerics::QuantizedTensor kernelA, kernelB;
  std::vector<float> bias, c;
  GemmBuffers buffers;

private:
  GemmProblem() = default;
  llvm::Expected<CUdeviceptr> upload(const void *data, size_t bytes);
  llvm::Expected<CUdeviceptr> allocate(size_t bytes);
  std::vector<CUdeviceptr> allocations;
};

/// One element of an output of `type` (bf16, f16 or f32 bytes) as a float.
float decodeOutputElement(const uint8_t *bytes, compiler::FloatType type);

/// The K elements P the tensor cores sum before each promotion into FP32
/// for `spec` (docs/NUMERICS-CONTRACT.md section 7): compiler::getPromoteK,
/// at most K, or all of K without promotion.
int64_t getPromotionInterval(const compiler::GemmSpec &spec);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_GEMMPROBLEM_H
