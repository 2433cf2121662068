//===- QuantizerSource.h - The GPU quantizers' kernel source ----*- C++ -*-===//
//
// What a quantization compiles to, without CUDA or MLIR: the spec and its
// output layout, the checks against what the kernels take, and the CUDA
// source of its kernels built from templates/moss/quantize. GpuQuantizer
// compiles and launches that source; the compiler lowers `moss.quantize`
// to the same text.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_QUANTIZERSOURCE_H
#define MOSS_COMPILER_QUANTIZERSOURCE_H

#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace moss::compiler {

/// Element type of the input matrix.
enum class InputType : uint8_t { F32, BF16 };

/// A quantization: a row-major [rows, cols] device matrix and the options.
struct QuantizeSpec {
  int64_t rows = 0;
  int64_t cols = 0;
  InputType input = InputType::F32;
  numerics::QuantizeOptions options;
  /// Both layouts from one read of the input: the row-major quantization
  /// these options describe (options.transpose off) and the transposed one
  /// (getTransposedSpec), as GpuQuantizer::quantizeBothLayouts writes them.
  bool bothLayouts = false;
  /// The quantized matrix's row r is input row gatherRows[r] (an index on
  /// the device; Args::gatherRows): row-wise and transposed quantizations,
  /// not square blocks, not both layouts.
  bool gather = false;
  /// Row-wise quantizations of rows of one segment (and the row-wise kernel
  /// of a dual layout in two kernels): a kernel that reads K at run time
  /// (QuantizerVariant::anyK), one per thread count, which serves every K
  /// needing that many threads; ignored where the row-wise kernel does not
  /// take the spec or cuts its rows.
  bool anyK = false;
  /// G casts of this shape with a given scale each in one launch (a mixture
  /// of experts' weights, GpuQuantizer::castWithScales): the grid's z is the
  /// cast, whose pointers are Args's plus z times Args::batch's strides.
  /// Casts with a given scale only (a reduce pass's words are not sliced),
  /// without gathered rows.
  bool batched = false;
  /// An AdamW step updates the FP32 input (a weight, in place) before its
  /// cast with a given scale, in the same read (numerics::adamwUpdate; the
  /// fused optimizer step of the weight scalers): per-tensor, row-major or
  /// both layouts, batched or not.
  bool adamw = false;
};

/// The transposed half of a dual-layout spec: the same options with
/// transpose on, as a quantization of its own.
QuantizeSpec getTransposedSpec(const QuantizeSpec &spec);

/// Shapes of the outputs of a spec.
struct QuantizeLayout {
  /// Codes [codeRows, codeCols] (transposed when the options say so).
  int64_t codeRows = 0;
  int64_t codeCols = 0;
  /// Block scales [localRows, localCols] of localElementBytes (1 for E8M0,
  /// 4 for FP32); 0 when the scheme has none.
  int64_t localRows = 0;
  int64_t localCols = 0;
  int64_t localElementBytes = 0;
  /// FP32 global scales; 0 when the scheme has none.
  int64_t globalCount = 0;
};

/// The output shapes of `spec` (no validation); of its row-major half for
/// a dual-layout spec.
QuantizeLayout getQuantizeLayout(const QuantizeSpec &spec);

/// The generated source of the kernels for one spec, and how to launch them.
struct QuantizerSource {
  /// Every kernel of the spec, one translation unit (what `moss.quantize`
  /// lowers to).
  std::string source;
  /// The same kernels as two programs, which the runtime compiles in
  /// parallel: the reduce pass alone (empty when there is none), and the
  /// rest (the quantize pass and a column pass).
  std::string reduceSource;
  std::string quantizeSource;
  /// Empty when the spec needs no reduce pass.
  std::string reduceKernel;
  std::string quantizeKernel;
  /// The column pass of a dual-layout quantize in two kernels
  /// (QuantizerVariant::columnMax); empty otherwise.
  std::string columnKernel;
  unsigned threads = 0;
};

/// Checks a spec against what the GPU kernels support; the error names the
/// bad value.
llvm::Error checkGpuQuantizeSpec(const QuantizeSpec &spec);

/// The CUDA source for a spec (validated). `withScale` generates the
/// per-tensor cast with a caller's scale (GpuQuantizer::castWithScale); a
/// batched spec needs it.
/// The kernels are `kernelName` and, with a reduce pass, `kernelName` +
/// "_reduce"; with column maxima, the column pass `kernelName` +
/// "_columns".
llvm::Expected<QuantizerSource>
generateQuantizerSource(const QuantizeSpec &spec, bool withScale = false,
                        llvm::StringRef kernelName = "moss_quantize");

/// Where a kernel takes its global scale from (GlobalSource of
/// templates/moss/quantize/common.cuh, numbered alike).
enum class QuantizerGlobal {
  None = 0,
  InCta = 1,
  FromBits = 2,
  FromScale = 3,
  FromRowBits = 4
};

/// Which kernel template a spec uses, and its launch parameters.
struct QuantizerVariant {
  enum class Family { Rowwise, Columnwise, Tile2d, AdamW };
  Family family = Family::Rowwise;
  QuantizerGlobal source = QuantizerGlobal::None;
  /// Columnwise, and row-wise in segments: the reduce pass leaves one global
  /// per output row (per-row, two-level row).
  bool globalPerRow = false;
  /// Columnwise row fold, and row-wise in segments: the reduce pass finds
  /// each output row's largest block, in its own words unless the globals
  /// per row hold it.
  bool foldReference = false;
  /// Columnwise: the row-major layout is written too (a dual-layout spec).
  bool bothLayouts = false;
  /// Row-wise, for a dual-layout spec in two kernels: the row-wise kernel
  /// writes the row-major layout and its CTAs' column maxima, a column pass
  /// turns those into the transposed layout's reduce words, and the
  /// transposed spec's quantize pass follows without its reduce pass (X is
  /// read twice, not three times). Taken where the row-major layout needs no
  /// reduce pass of its own and the transposed one does (a global or a row
  /// fold per column).
  bool columnMax = false;
  /// Row-wise: K is read at run time, up to `segment` (QuantizeSpec::anyK).
  bool anyK = false;
  int block = 0;
  int threads = 256;
  /// Row-wise: the values of a row segment (a CTA holds one at a time); K
  /// itself unless the row is too long for one.
  int64_t segment = 0;
  int64_t getRowSegments(int64_t cols) const {
    return (cols + segment - 1) / segment;
  }
  /// Whether a reduce pass runs before the quantize pass.
  bool hasReducePass() const {
    return source == QuantizerGlobal::FromBits ||
           source == QuantizerGlobal::FromRowBits || foldReference;
  }
};
QuantizerVariant chooseQuantizerVariant(const QuantizeSpec &spec,
                                        bool withScale);

/// Whether `scheme` has square (NxN) per-group blocks: the square-block
/// kernel's, in both orientations.
bool isSquareGroup(const numerics::ScalingScheme &scheme);

} // namespace moss::compiler

#endif // MOSS_COMPILER_QUANTIZERSOURCE_H
