//===- Fold.cpp - Folding E8M0 block factors into FP8 codes ---------------===//

#include "moss/Numerics/Fold.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cmath>

using namespace llvm;
using namespace moss::numerics;

const char *moss::numerics::getName(BlockScaleFold fold) {
  switch (fold) {
  case BlockScaleFold::None:
    return "none";
  case BlockScaleFold::K128:
    return "128";
  case BlockScaleFold::Row:
    return "row";
  }
  return "?";
}

std::optional<BlockScaleFold>
moss::numerics::parseBlockScaleFold(StringRef text) {
  for (BlockScaleFold fold :
       {BlockScaleFold::None, BlockScaleFold::K128, BlockScaleFold::Row})
    if (text == getName(fold))
      return fold;
  return std::nullopt;
}

bool moss::numerics::isFoldable(const ScalingScheme &scheme) {
  return scheme.localScalesAreE8M0();
}

ScalingScheme moss::numerics::getFoldedScheme(const ScalingScheme &scheme,
                                              BlockScaleFold fold) {
  if (!isFoldable(scheme) || fold == BlockScaleFold::None)
    return scheme;
  return fold == BlockScaleFold::Row
             ? ScalingScheme::perRow()
             : ScalingScheme::perGroup(1, kFoldGroupCols);
}

Error moss::numerics::checkFold(const ScalingScheme &scheme, int64_t cols,
                                BlockScaleFold fold) {
  if (fold == BlockScaleFold::None)
    return Error::success();
  if (!isFoldable(scheme))
    return createStringError("a fold moves E8M0 block factors; " +
                             scheme.str() + " has none");
  if (fold == BlockScaleFold::K128) {
    if (kFoldGroupCols % scheme.blockCols != 0)
      return createStringError("the 128 fold needs blocks that divide 128; " +
                               scheme.str() + " has blocks of " +
                               Twine(scheme.blockCols));
    if (cols % kFoldGroupCols != 0)
      return createStringError("the 128 fold needs K to be a multiple of "
                               "128; K=" +
                               Twine(cols));
  }
  return Error::success();
}

static bool isNonFiniteCode(uint8_t code, Fp8Format format) {
  uint8_t magnitude = code & 0x7F;
  return format == Fp8Format::E4M3 ? magnitude == 0x7F : magnitude >= 0x7C;
}

uint8_t moss::numerics::foldCode(uint8_t code, int shift, Fp8Format format) {
  if (isNonFiniteCode(code, format))
    return code;
  // The product is exact in FP32 while it is normal; below that it is far
  // under half the format's smallest subnormal (2^-10, 2^-17), where any
  // FP32 rounding still gives a zero code. One RNE to FP8 follows.
  float value = std::ldexp(decodeFp8(code, format), -std::min(shift, 64));
  return encodeFp8(value, format).code;
}

int moss::numerics::getFoldShiftLimit(Fp8Format format) {
  // 448 * 2^-19 < 2^-10 and 57344 * 2^-33 < 2^-17: every finite code rounds
  // to zero from these shifts on (FoldTest checks each boundary).
  return format == Fp8Format::E4M3 ? 19 : 33;
}

Expected<QuantizedTensor>
moss::numerics::foldBlockScales(const QuantizedTensor &q, BlockScaleFold fold) {
  if (Error e = checkFold(q.scheme, q.cols, fold))
    return std::move(e);
  if (fold == BlockScaleFold::None)
    return q;
  const int64_t block = q.scheme.blockCols;
  const int64_t groupCols =
      fold == BlockScaleFold::Row ? q.cols : kFoldGroupCols;
  const int64_t groups = q.cols / groupCols;
  const int64_t blocksPerGroup = groupCols / block;
  const bool hasGlobal = q.scheme.hasGlobalScales();
  const bool globalPerRow = q.scheme.globalPerRow();

  QuantizedTensor out;
  out.scheme = getFoldedScheme(q.scheme, fold);
  out.format = q.format;
  out.rows = q.rows;
  out.cols = q.cols;
  out.transposed = q.transposed;
  out.stats = q.stats;
  out.codes.resize(q.codes.size());
  std::vector<float> factors(q.rows * groups);
  for (int64_t r = 0; r < q.rows; ++r) {
    const uint8_t *e8m0 = &q.localE8M0[r * q.localCols];
    float global = hasGlobal ? q.global[globalPerRow ? r : 0] : 1.0f;
    for (int64_t g = 0; g < groups; ++g) {
      int reference = kE8M0MinExponent;
      for (int64_t b = g * blocksPerGroup; b < (g + 1) * blocksPerGroup; ++b)
        if (e8m0[b] != kE8M0NaNCode)
          reference = std::max(reference, e8m0Exponent(e8m0[b]));
      factors[r * groups + g] = global * decodeE8M0(encodeE8M0(reference));
      for (int64_t b = g * blocksPerGroup; b < (g + 1) * blocksPerGroup; ++b)
        for (int64_t c = b * block; c < (b + 1) * block; ++c) {
          uint8_t code = q.codes[r * q.cols + c];
          out.codes[r * q.cols + c] =
              e8m0[b] == kE8M0NaNCode
                  ? kFp8NaNCode
                  : foldCode(code, reference - e8m0Exponent(e8m0[b]), q.format);
        }
    }
  }
  if (fold == BlockScaleFold::Row) {
    out.global = std::move(factors);
  } else {
    out.localRows = q.rows;
    out.localCols = groups;
    out.localF32 = std::move(factors);
  }
  return out;
}
