//===- KGroupedGemmProblem.h - A k-grouped GEMM's operands on the GPU -----===//
//
// A k-grouped GEMM (GemmSpec::groupedK: a mixture-of-experts weight
// gradient) made of one GemmProblem per expert with columns: expert g's
// slices A_g [M, K_g] and B_g [N, K_g] are quantized with the host reference
// quantizers and laid side by side into the shared A [M, K] and B [N, K].
// Every slice holds its whole row's largest magnitude, so the slices'
// global scales are the whole operand's and the stacked codes and scales
// are exactly those of quantizing A and B whole. check() holds each
// expert's output D_g against its own reference (checkGemmOutput); an
// expert without columns must hold the epilogue of zero sums: 0, or beta
// times its C (1.0 everywhere).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_KGROUPEDGEMMPROBLEM_H
#define MOSS_TOOLS_COMMON_KGROUPEDGEMMPROBLEM_H

#include "GroupedGemmProblem.h"

namespace moss::jit {

class KGroupedGemmProblem {
public:
  /// The operands of `spec` (groupedK) with `cols[g]` columns (a multiple
  /// of 128, 0 allowed) for expert g, from `seed`.
  static llvm::Expected<std::unique_ptr<KGroupedGemmProblem>>
  create(const compiler::GemmSpec &spec, llvm::ArrayRef<int64_t> cols,
         uint64_t seed);
  ~KGroupedGemmProblem();

  /// Fills the output (and the rows past it) with 0xFF bytes and zeroes
  /// amax (synchronous).
  llvm::Error poison() const;

  /// Checks the output after the caller's launch has finished: each
  /// expert's D_g against its reference (`options` with a seed per expert),
  /// an empty expert's against the epilogue of zeros, and the rows past
  /// the output against the poison.
  llvm::Expected<GroupedGemmCheckResult>
  check(const GemmCheckOptions &options) const;

  compiler::GemmSpec spec;
  /// All experts' columns: the launch's K.
  int64_t k = 0;
  std::vector<int64_t> cols;
  /// What the launch reads on the device: [groups + 1] column offsets.
  std::vector<int32_t> offsets;
  /// One problem per expert with columns; null for an empty one.
  std::vector<std::unique_ptr<GemmProblem>> experts;
  GemmBuffers buffers;

private:
  KGroupedGemmProblem() = default;
  DeviceAllocations memory;
  size_t outputBytes = 0;
};

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_KGROUPEDGEMMPROBLEM_H
