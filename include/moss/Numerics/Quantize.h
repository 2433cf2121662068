//===- Quantize.h - Reference quantizers ------------------------*- C++ -*-===//
//
// The exact host reference for every scaling scheme of docs/METHOD.md
// section 1. The arithmetic here is the contract the GPU quantizers must match
// bit for bit; docs/NUMERICS-CONTRACT.md states it in prose.
//
// Layout: an operand is a row-major [rows, cols] matrix whose cols axis is the
// GEMM reduction axis K. Blocks run along K. A transposed quantization is
// exactly the quantization of the transposed input: codes are [cols, rows]
// and the blocks run along the input's rows axis.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_QUANTIZE_H
#define MOSS_NUMERICS_QUANTIZE_H

#include "moss/Numerics/FP8.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moss::numerics {

/// The scaling schemes of docs/METHOD.md section 1.
enum class ScalingKind : uint8_t {
  PerTensor,
  PerRow,
  PerGroup,
  MXFP8,
  TwoLevel
};

/// A scheme's block extent along K where none is given: 128 for per-group
/// (1x128 activations, 128x128 weights), 32 for MXFP8 (OCP MX v1.0, its only
/// size) and two-level (docs/METHOD.md); 0 for schemes without blocks.
constexpr int64_t getDefaultBlockCols(ScalingKind kind) {
  switch (kind) {
  case ScalingKind::PerGroup:
    return 128;
  case ScalingKind::MXFP8:
  case ScalingKind::TwoLevel:
    return 32;
  default:
    return 0;
  }
}

/// Granularity of the FP32 global scale of the two-level scheme.
enum class GlobalScope : uint8_t { Tensor, Row };

/// A scaling scheme with its block geometry.
struct ScalingScheme {
  ScalingKind kind = ScalingKind::PerTensor;
  /// Block extent along K (per-group, MXFP8, two-level). MXFP8 is always 32.
  int64_t blockCols = 0;
  /// Block extent across rows: 1 for 1xB groups, B for BxB (weights).
  /// Only per-group uses more than 1.
  int64_t blockRows = 1;
  /// Two-level only: one global scale per tensor or per row.
  GlobalScope global = GlobalScope::Tensor;

  static ScalingScheme perTensor();
  static ScalingScheme perRow();
  static ScalingScheme perGroup(int64_t blockRows, int64_t blockCols);
  static ScalingScheme mxfp8();
  static ScalingScheme
  twoLevel(GlobalScope global,
           int64_t block = getDefaultBlockCols(ScalingKind::TwoLevel));

  /// Whether the scheme has block (local) scales, and whether they are E8M0.
  bool hasLocalScales() const;
  bool localScalesAreE8M0() const;
  /// Whether the scheme has FP32 global scales (per-tensor, per-row,
  /// two-level).
  bool hasGlobalScales() const;
  /// Whether the global scales are one per row (per-row, two-level per row).
  bool globalPerRow() const;

  /// Human-readable name, e.g. "two-level(row, 32)", "per-group(128x128)".
  std::string str() const;
};

/// Where E8M0 block factors go before a GEMM.
enum class BlockScaleFold : uint8_t {
  /// Each 32-of-K partial sum is promoted with its factors (exact, slow).
  None = 0,
  /// Codes refer to the largest factor of their 128-wide K group: the
  /// operand becomes per-group 1x128 (one promotion per 128 of K).
  K128 = 1,
  /// Codes refer to the largest factor of their row: the operand becomes
  /// per-row (no promotion in the main loop).
  Row = 2,
};

/// The K extent of a 128 fold's groups.
constexpr int64_t kFoldGroupCols = 128;

struct QuantizeOptions {
  ScalingScheme scheme;
  Fp8Format format = Fp8Format::E4M3;
  /// Quantize the transpose of the input (column-wise output).
  bool transpose = false;
  /// Fold a two-level or MXFP8 result's block factors as a GEMM would
  /// (foldBlockScales in Fold.h): the result is per-row or per-group 1x128,
  /// ready for a GEMM with no per-32 promotion. Not with `transpose`.
  BlockScaleFold fold = BlockScaleFold::None;
};

/// What a quantization reports besides its data.
struct QuantizeStats {
  /// Finite elements whose scaled value rounded beyond +-max and was clamped.
  int64_t saturated = 0;
  /// Blocks (or groups, rows, the tensor) that held NaN or Inf. Their scale is
  /// the NaN scale and all their codes are kFp8NaNCode.
  int64_t nonFiniteBlocks = 0;
};

/// A quantized K-major operand.
struct QuantizedTensor {
  ScalingScheme scheme;
  Fp8Format format = Fp8Format::E4M3;
  /// Shape of `codes`: [cols, rows] of the input when transposed.
  int64_t rows = 0;
  int64_t cols = 0;
  /// True when this is the quantization of the input's transpose
  /// (QuantizeOptions::transpose); measureFidelity uses it to line the input
  /// up with the codes.
  bool transposed = false;
  std::vector<uint8_t> codes;
  /// Block scales, row-major [localRows, localCols]: E8M0 codes for MXFP8 and
  /// two-level, FP32 for per-group. Empty for other schemes.
  int64_t localRows = 0;
  int64_t localCols = 0;
  std::vector<uint8_t> localE8M0;
  std::vector<float> localF32;
  /// FP32 global scales: one per tensor ([1]) or one per row ([rows]).
  std::vector<float> global;
  QuantizeStats stats;
};

/// Checks that a [rows, cols] input can be quantized with these options.
/// The error names the bad value and what was expected.
llvm::Error checkQuantizeOptions(int64_t rows, int64_t cols,
                                 const QuantizeOptions &options);

/// Quantizes a row-major [rows, cols] FP32 matrix.
llvm::Expected<QuantizedTensor> quantize(llvm::ArrayRef<float> x, int64_t rows,
                                         int64_t cols,
                                         const QuantizeOptions &options);

/// The dequantized values q * scale as FP64 (exact), row-major
/// [q.rows, q.cols]. Non-finite blocks dequantize to NaN.
std::vector<double> dequantize(const QuantizedTensor &q);

/// Row `row` of dequantize(q), written to `out` (q.cols values), without
/// building the whole tensor.
void dequantizeRow(const QuantizedTensor &q, int64_t row,
                   llvm::MutableArrayRef<double> out);

/// Row-major transpose of a [rows, cols] matrix.
template <typename T>
std::vector<T> transposed(llvm::ArrayRef<T> x, int64_t rows, int64_t cols) {
  std::vector<T> out(x.size());
  // 32x32 tiles keep both the reads and the strided writes in cache; a
  // plain double loop is several times slower on large tensors.
  const int64_t tile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += tile)
    for (int64_t c0 = 0; c0 < cols; c0 += tile) {
      int64_t r1 = r0 + tile < rows ? r0 + tile : rows;
      int64_t c1 = c0 + tile < cols ? c0 + tile : cols;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          out[c * rows + r] = x[r * cols + c];
    }
  return out;
}

} // namespace moss::numerics

#endif // MOSS_NUMERICS_QUANTIZE_H
