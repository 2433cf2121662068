//===- Quantize.cpp - Reference quantizers --------------------------------===//
//
// The host reference for every scaling scheme. Each function below is the
// arithmetic of docs/NUMERICS-CONTRACT.md, step for step: the GPU quantizers
// must reproduce these bits, so do not "simplify" a division into a
// multiplication by a reciprocal or reorder the two-level scaling.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/Quantize.h"

#include "moss/Numerics/Fold.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

using namespace moss::numerics;

//===----------------------------------------------------------------------===//
// ScalingScheme
//===----------------------------------------------------------------------===//

ScalingScheme ScalingScheme::perTensor() { return ScalingScheme(); }

ScalingScheme ScalingScheme::perRow() {
  ScalingScheme s;
  s.kind = ScalingKind::PerRow;
  return s;
}

ScalingScheme ScalingScheme::perGroup(int64_t blockRows, int64_t blockCols) {
  ScalingScheme s;
  s.kind = ScalingKind::PerGroup;
  s.blockRows = blockRows;
  s.blockCols = blockCols;
  return s;
}

ScalingScheme ScalingScheme::mxfp8() {
  ScalingScheme s;
  s.kind = ScalingKind::MXFP8;
  s.blockCols = getDefaultBlockCols(ScalingKind::MXFP8);
  return s;
}

ScalingScheme ScalingScheme::twoLevel(GlobalScope global, int64_t block) {
  ScalingScheme s;
  s.kind = ScalingKind::TwoLevel;
  s.blockCols = block;
  s.global = global;
  return s;
}

bool ScalingScheme::hasLocalScales() const {
  return kind == ScalingKind::PerGroup || kind == ScalingKind::MXFP8 ||
         kind == ScalingKind::TwoLevel;
}

bool ScalingScheme::localScalesAreE8M0() const {
  return kind == ScalingKind::MXFP8 || kind == ScalingKind::TwoLevel;
}

bool ScalingScheme::hasGlobalScales() const {
  return kind == ScalingKind::PerTensor || kind == ScalingKind::PerRow ||
         kind == ScalingKind::TwoLevel;
}

bool ScalingScheme::globalPerRow() const {
  return kind == ScalingKind::PerRow ||
         (kind == ScalingKind::TwoLevel && global == GlobalScope::Row);
}

std::string ScalingScheme::str() const {
  switch (kind) {
  case ScalingKind::PerTensor:
    return "per-tensor";
  case ScalingKind::PerRow:
    return "per-row";
  case ScalingKind::PerGroup:
    return "per-group(" + std::to_string(blockRows) + "x" +
           std::to_string(blockCols) + ")";
  case ScalingKind::MXFP8:
    return "mxfp8";
  case ScalingKind::TwoLevel:
    return std::string("two-level(") +
           (global == GlobalScope::Tensor ? "tensor" : "row") + ", " +
           std::to_string(blockCols) + ")";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

static llvm::Error makeError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                 message.c_str());
}

llvm::Error
moss::numerics::checkQuantizeOptions(int64_t rows, int64_t cols,
                                     const QuantizeOptions &options) {
  const ScalingScheme &scheme = options.scheme;
  if (rows <= 0 || cols <= 0)
    return makeError("the input shape [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] must have positive extents");
  bool blocked = scheme.kind == ScalingKind::PerGroup ||
                 scheme.kind == ScalingKind::MXFP8 ||
                 scheme.kind == ScalingKind::TwoLevel;
  int64_t b = scheme.blockCols;
  int64_t br = scheme.blockRows;
  if (!blocked) {
    if (br != 1)
      return makeError(scheme.str() + " takes blockRows=1, got " +
                       std::to_string(br));
    if (options.fold != BlockScaleFold::None)
      return checkFold(scheme, cols, options.fold);
    return llvm::Error::success();
  }
  if (b <= 0)
    return makeError("the scaling block " + std::to_string(b) +
                     " must be positive");
  if (scheme.kind == ScalingKind::MXFP8 && b != 32)
    return makeError("MXFP8 scales blocks of 32 elements, got block " +
                     std::to_string(b));
  if (scheme.kind == ScalingKind::PerGroup && br != 1 && br != b)
    return makeError("per-group blockRows=" + std::to_string(br) +
                     " must be 1 or the block size " + std::to_string(b));
  if (scheme.kind != ScalingKind::PerGroup && br != 1)
    return makeError(scheme.str() + " takes blockRows=1, got " +
                     std::to_string(br));
  // The blocked axis is K of the operand being quantized: the input's rows
  // when the output is transposed.
  int64_t k = options.transpose ? rows : cols;
  if (k % b != 0)
    return makeError("K=" + std::to_string(k) +
                     " is not a multiple of the scaling block " +
                     std::to_string(b) +
                     (options.transpose ? " (K is the input's rows axis of a "
                                          "transposed quantization)"
                                        : ""));
  if (options.fold != BlockScaleFold::None)
    if (llvm::Error e = checkFold(scheme, k, options.fold))
      return e;
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Helpers shared by the schemes
//===----------------------------------------------------------------------===//

namespace {

/// Running max of |x| over a set of elements. It compares the magnitude bit
/// patterns as integers: for non-negative floats the integer order is the
/// float order, and NaN and Inf patterns are the largest, so one pass yields
/// both the amax and whether everything was finite.
struct AbsMax {
  uint32_t bits = 0;

  void add(const float *x, int64_t n) {
    uint32_t m = bits;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, &x[i], sizeof(b));
      m = std::max(m, b & 0x7FFFFFFFu);
    }
    bits = m;
  }
  bool finite() const { return bits < 0x7F800000u; }
  float value() const {
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// An FP32 scale amax / fp8max; 1 when that is zero (zero data, or an amax
/// so small that the quotient underflows), so that x / s stays defined.
float fp32Scale(float amax, Fp8Format format) {
  float s = amax / fp8MaxFinite(format);
  return s == 0.0f ? 1.0f : s;
}

/// codes = encode(x / s), one FP32 division per element.
void encodeDivided(const float *x, uint8_t *codes, int64_t n, float s,
                   Fp8Format format, QuantizeStats &stats) {
  int64_t saturated = 0;
  for (int64_t i = 0; i < n; ++i) {
    Fp8Encoded e = encodeFp8(x[i] / s, format);
    codes[i] = e.code;
    saturated += e.saturated;
  }
  stats.saturated += saturated;
}

/// codes = encode((x * up) / s): `up` is a power of two >= 1, so the product
/// is exact and the division is the only rounding.
void encodeScaledDivided(const float *x, uint8_t *codes, int64_t n, float up,
                         float s, Fp8Format format, QuantizeStats &stats) {
  int64_t saturated = 0;
  for (int64_t i = 0; i < n; ++i) {
    Fp8Encoded e = encodeFp8((x[i] * up) / s, format);
    codes[i] = e.code;
    saturated += e.saturated;
  }
  stats.saturated += saturated;
}

void fillNaN(uint8_t *codes, int64_t n) {
  std::fill(codes, codes + n, kFp8NaNCode);
}

/// 2^e as FP32 for e in [-126, 127], built from the exponent field.
float powerOfTwo(int e) {
  assert(e >= -126 && e <= 127);
  uint32_t bits = uint32_t(e + 127) << 23;
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

/// MXFP8 scale exponent: floor(log2 amax) - emax_elem, clamped to E8M0's
/// range; -127 for a zero block. frexp gives amax = m * 2^E with m in
/// [0.5, 1) (also for subnormal amax), so floor(log2 amax) = E - 1.
int mxScaleExponent(float amax, Fp8Format format) {
  if (amax == 0.0f)
    return kE8M0MinExponent;
  int e;
  std::frexp(amax, &e);
  int k = (e - 1) - fp8MaxExponent(format);
  return std::clamp(k, kE8M0MinExponent, kE8M0MaxExponent);
}

/// Two-level local exponent: the smallest e with 2^e >= r, clamped to
/// [-127, 0]; -127 for r == 0. Exact exponent arithmetic, no log2: with
/// r = m * 2^E, m in [0.5, 1), r is a power of two exactly when m == 0.5.
int twoLevelExponent(float r) {
  if (r == 0.0f)
    return kE8M0MinExponent;
  int e;
  float m = std::frexp(r, &e);
  int c = m == 0.5f ? e - 1 : e;
  return std::clamp(c, kE8M0MinExponent, 0);
}

/// Quantizes a row-major [rows, cols] input along its cols axis.
class RowwiseQuantizer {
public:
  RowwiseQuantizer(llvm::ArrayRef<float> x, int64_t rows, int64_t cols,
                   const QuantizeOptions &options, QuantizedTensor &q)
      : x(x.data()), rows(rows), cols(cols), format(options.format), q(q) {}

  void perTensor();
  void perRow();
  void perGroup(int64_t blockRows, int64_t blockCols);
  void mxfp8();
  void twoLevel(int64_t block, GlobalScope scope);

private:
  const float *x;
  int64_t rows, cols;
  Fp8Format format;
  QuantizedTensor &q;
};

} // namespace

void RowwiseQuantizer::perTensor() {
  AbsMax amax;
  amax.add(x, rows * cols);
  if (!amax.finite()) {
    q.global = {kNaN};
    fillNaN(q.codes.data(), rows * cols);
    q.stats.nonFiniteBlocks = 1;
    return;
  }
  float s = fp32Scale(amax.value(), format);
  q.global = {s};
  encodeDivided(x, q.codes.data(), rows * cols, s, format, q.stats);
}

void RowwiseQuantizer::perRow() {
  q.global.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * cols;
    uint8_t *out = q.codes.data() + r * cols;
    AbsMax amax;
    amax.add(row, cols);
    if (!amax.finite()) {
      q.global[r] = kNaN;
      fillNaN(out, cols);
      ++q.stats.nonFiniteBlocks;
      continue;
    }
    q.global[r] = fp32Scale(amax.value(), format);
    encodeDivided(row, out, cols, q.global[r], format, q.stats);
  }
}

void RowwiseQuantizer::perGroup(int64_t blockRows, int64_t blockCols) {
  // The row axis may be ragged: the last group row holds fewer rows.
  q.localRows = (rows + blockRows - 1) / blockRows;
  q.localCols = cols / blockCols;
  q.localF32.resize(q.localRows * q.localCols);
  for (int64_t gr = 0; gr < q.localRows; ++gr) {
    int64_t r0 = gr * blockRows;
    int64_t r1 = std::min(rows, r0 + blockRows);
    for (int64_t gc = 0; gc < q.localCols; ++gc) {
      int64_t c0 = gc * blockCols;
      AbsMax amax;
      for (int64_t r = r0; r < r1; ++r)
        amax.add(x + r * cols + c0, blockCols);
      float &scale = q.localF32[gr * q.localCols + gc];
      if (!amax.finite()) {
        scale = kNaN;
        for (int64_t r = r0; r < r1; ++r)
          fillNaN(q.codes.data() + r * cols + c0, blockCols);
        ++q.stats.nonFiniteBlocks;
        continue;
      }
      scale = fp32Scale(amax.value(), format);
      for (int64_t r = r0; r < r1; ++r)
        encodeDivided(x + r * cols + c0, q.codes.data() + r * cols + c0,
                      blockCols, scale, format, q.stats);
    }
  }
}

void RowwiseQuantizer::mxfp8() {
  const int64_t block = 32;
  q.localRows = rows;
  q.localCols = cols / block;
  q.localE8M0.resize(rows * q.localCols);
  for (int64_t i = 0; i < rows * q.localCols; ++i) {
    // Blocks are consecutive in memory: block i covers [i*32, i*32+32).
    const float *in = x + i * block;
    uint8_t *out = q.codes.data() + i * block;
    AbsMax amax;
    amax.add(in, block);
    if (!amax.finite()) {
      q.localE8M0[i] = kE8M0NaNCode;
      fillNaN(out, block);
      ++q.stats.nonFiniteBlocks;
      continue;
    }
    int k = mxScaleExponent(amax.value(), format);
    q.localE8M0[i] = encodeE8M0(k);
    // X = 2^k exactly, also 2^-127 (decodeE8M0 builds the subnormal).
    encodeDivided(in, out, block, decodeE8M0(q.localE8M0[i]), format, q.stats);
  }
}

void RowwiseQuantizer::twoLevel(int64_t block, GlobalScope scope) {
  const int64_t perRow = cols / block;
  const int64_t numBlocks = rows * perRow;
  q.localRows = rows;
  q.localCols = perRow;
  q.localE8M0.resize(numBlocks);

  // Pass 1: s_i per block (NaN marks a non-finite block), then the global
  // scale(s) as the max over the finite blocks of the tensor or the row.
  std::vector<float> blockScale(numBlocks);
  for (int64_t i = 0; i < numBlocks; ++i) {
    AbsMax amax;
    amax.add(x + i * block, block);
    blockScale[i] = amax.finite() ? amax.value() / fp8MaxFinite(format) : kNaN;
  }
  auto maxFinite = [&](int64_t begin, int64_t end) {
    float s = 0.0f;
    for (int64_t i = begin; i < end; ++i)
      if (!std::isnan(blockScale[i]))
        s = std::max(s, blockScale[i]);
    // All-zero (or all non-finite) scope: s = 1.
    return s == 0.0f ? 1.0f : s;
  };
  if (scope == GlobalScope::Tensor) {
    q.global = {maxFinite(0, numBlocks)};
  } else {
    q.global.resize(rows);
    for (int64_t r = 0; r < rows; ++r)
      q.global[r] = maxFinite(r * perRow, (r + 1) * perRow);
  }

  // Pass 2: local power of two and codes, block by block.
  for (int64_t i = 0; i < numBlocks; ++i) {
    uint8_t *out = q.codes.data() + i * block;
    if (std::isnan(blockScale[i])) {
      q.localE8M0[i] = kE8M0NaNCode;
      fillNaN(out, block);
      ++q.stats.nonFiniteBlocks;
      continue;
    }
    float s = q.global[scope == GlobalScope::Tensor ? 0 : i / perRow];
    float r = blockScale[i] / s;
    int e = twoLevelExponent(r);
    q.localE8M0[i] = encodeE8M0(e);
    // x * 2^-e (exact, 2^-e <= 2^127) then one division by s: the correctly
    // rounded x / (s * 2^e) without forming s * 2^e, which could underflow.
    encodeScaledDivided(x + i * block, out, block, powerOfTwo(-e), s, format,
                        q.stats);
  }
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Expected<QuantizedTensor>
moss::numerics::quantize(llvm::ArrayRef<float> x, int64_t rows, int64_t cols,
                         const QuantizeOptions &options) {
  if (llvm::Error err = checkQuantizeOptions(rows, cols, options))
    return err;
  if (int64_t(x.size()) != rows * cols)
    return makeError("the input holds " + std::to_string(x.size()) +
                     " elements, expected rows*cols = " + std::to_string(rows) +
                     "*" + std::to_string(cols) + " = " +
                     std::to_string(rows * cols));

  // A transposed quantization is by definition the quantization of the
  // transposed input; transposing first keeps one code path.
  std::vector<float> xt;
  llvm::ArrayRef<float> in = x;
  int64_t qRows = rows, qCols = cols;
  if (options.transpose) {
    xt = transposed(x, rows, cols);
    in = xt;
    std::swap(qRows, qCols);
  }

  QuantizedTensor q;
  q.scheme = options.scheme;
  q.format = options.format;
  q.rows = qRows;
  q.cols = qCols;
  q.transposed = options.transpose;
  q.codes.resize(qRows * qCols);

  RowwiseQuantizer quantizer(in, qRows, qCols, options, q);
  const ScalingScheme &scheme = options.scheme;
  switch (scheme.kind) {
  case ScalingKind::PerTensor:
    quantizer.perTensor();
    break;
  case ScalingKind::PerRow:
    quantizer.perRow();
    break;
  case ScalingKind::PerGroup:
    quantizer.perGroup(scheme.blockRows, scheme.blockCols);
    break;
  case ScalingKind::MXFP8:
    quantizer.mxfp8();
    break;
  case ScalingKind::TwoLevel:
    quantizer.twoLevel(scheme.blockCols, scheme.global);
    break;
  }
  if (options.fold != BlockScaleFold::None)
    return foldBlockScales(q, options.fold);
  return q;
}

void moss::numerics::dequantizeRow(const QuantizedTensor &q, int64_t r,
                                   llvm::MutableArrayRef<double> out) {
  assert(r >= 0 && r < q.rows && int64_t(out.size()) == q.cols &&
         "dequantizeRow needs a row index and q.cols outputs");
  const ScalingScheme &scheme = q.scheme;
  bool perRow = scheme.globalPerRow();
  bool hasGlobal = scheme.hasGlobalScales();
  bool hasLocal = scheme.hasLocalScales();
  bool e8m0 = scheme.localScalesAreE8M0();
  // FP32 scales are exact in FP64, and every product below is exact: a
  // 4-bit FP8 significand times a 24-bit one, times powers of two.
  double global = hasGlobal ? double(q.global[perRow ? r : 0]) : 1.0;
  int64_t localRow = hasLocal ? (r / scheme.blockRows) * q.localCols : 0;
  for (int64_t c = 0; c < q.cols; ++c) {
    double scale = global;
    if (hasLocal) {
      int64_t li = localRow + c / scheme.blockCols;
      if (e8m0) {
        uint8_t code = q.localE8M0[li];
        scale = code == kE8M0NaNCode ? std::numeric_limits<double>::quiet_NaN()
                                     : std::ldexp(scale, e8m0Exponent(code));
      } else {
        scale *= double(q.localF32[li]);
      }
    }
    out[c] = double(decodeFp8(q.codes[r * q.cols + c], q.format)) * scale;
  }
}

std::vector<double> moss::numerics::dequantize(const QuantizedTensor &q) {
  std::vector<double> out(q.rows * q.cols);
  for (int64_t r = 0; r < q.rows; ++r)
    dequantizeRow(q, r,
                  llvm::MutableArrayRef<double>(out.data() + r * q.cols,
                                                q.cols));
  return out;
}
