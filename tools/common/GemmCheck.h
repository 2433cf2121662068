//===- GemmCheck.h - A GEMM output against the contract -------*- C++ -*-===//
//
// Compares sampled entries of a GemmProblem's output on the GPU under the
// accuracy contract (docs/NUMERICS-CONTRACT.md section 7): an entry may
// differ from the tensor-core model (numerics/TensorCoreModel.h) by the
// output's rounding and FP32's. An unpromoted kernel's model needs its
// tiling; without one its entries are held to the FP64 reference over the
// dequantized operands, to the output's rounding plus the tensor cores'
// typical share (numerics::gemmEntryAllowance). The relative Frobenius
// error is against the FP64 reference. Only the sampled rows are downloaded, so
// checking a 16384-row output costs little; every entry of those rows must have
// been written (the output is poisoned beforehand).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_GEMMCHECK_H
#define MOSS_TOOLS_COMMON_GEMMCHECK_H

#include "GemmProblem.h"

#include "moss/Compiler/Tiling.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace moss::jit {

/// How many entries the check looks at.
struct GemmCheckOptions {
  /// Rows downloaded and scanned for unwritten (NaN) entries: spread evenly
  /// over M with the first and the last.
  unsigned scanRows = 128;
  /// Of those, rows and columns compared with the reference.
  unsigned compareRows = 16;
  unsigned compareCols = 48;
  uint64_t seed = 1;
  /// The kernel's tiling (where an unpromoted kernel's tensor-core sums
  /// restart).
  std::optional<compiler::TileConfig> tiling;
};

/// The outcome of a check.
struct GemmCheckResult {
  int64_t compared = 0;
  /// Compared entries beyond their allowance.
  int64_t bad = 0;
  /// NaN entries in the scanned rows.
  int64_t unwritten = 0;
  /// The largest error as a fraction of its allowance.
  double worst = 0;
  /// Whether entries were held to the tensor-core model rather than the
  /// FP64 reference.
  bool againstModel = false;
  /// The relative Frobenius error over the compared entries.
  double relFrobenius = 0;

  bool ok() const { return bad == 0 && unwritten == 0; }
};

/// Checks the first `m` rows of `problem`'s output (m <= problem.m), read
/// synchronously after the caller's launch has finished.
llvm::Expected<GemmCheckResult>
checkGemmOutput(const GemmProblem &problem, int64_t m,
                const GemmCheckOptions &options);

/// Poisons `problem`'s output, runs the GEMM through `runner` on the
/// default stream, waits for it and checks the first `m` rows.
llvm::Expected<GemmCheckResult>
runAndCheckGemm(GemmRunner &runner, const compiler::GemmSpec &spec, int64_t m,
                const GemmProblem &problem, const GemmOptions &runOptions,
                const GemmCheckOptions &options);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_GEMMCHECK_H
