//===- FP8.cpp - FP8 and E8M0 encode/decode -------------------------------===//
//
// Integer bit manipulation on the FP32 pattern: no loops over codes and no
// floating-point rounding steps, so the result is one round-to-nearest-even
// from the exact FP32 value. docs/NUMERICS-CONTRACT.md states the rules.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/FP8.h"

#include <cassert>
#include <cstring>
#include <limits>

using namespace moss::numerics;

namespace {

/// The shape of one FP8 format. Both formats share the OCP layout
/// S.E...E.M...M; they differ in field widths and in what the top codes mean.
struct Fp8Params {
  /// Stored mantissa bits (3 for E4M3, 2 for E5M2).
  int mantBits;
  /// Exponent bias (7 for E4M3, 15 for E5M2); the smallest normal is
  /// 2^(1 - bias).
  int bias;
  /// Code of the largest finite magnitude (0x7E = 448, 0x7B = 57344).
  uint32_t maxCode;
};

constexpr Fp8Params paramsOf(Fp8Format format) {
  return format == Fp8Format::E4M3 ? Fp8Params{3, 7, 0x7E}
                                   : Fp8Params{2, 15, 0x7B};
}

uint32_t floatBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

float bitsToFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

/// Shifts `value` right by `shift` (>= 1) bits, rounding to nearest with
/// ties to even.
uint32_t shiftRightRne(uint32_t value, int shift) {
  uint32_t lsb = (value >> shift) & 1;
  return (value + ((1u << (shift - 1)) - 1) + lsb) >> shift;
}

} // namespace

float moss::numerics::fp8MaxFinite(Fp8Format format) {
  return format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
}

int moss::numerics::fp8MaxExponent(Fp8Format format) {
  return format == Fp8Format::E4M3 ? 8 : 15;
}

Fp8Encoded moss::numerics::encodeFp8(float x, Fp8Format format) {
  const Fp8Params p = paramsOf(format);
  uint32_t bits = floatBits(x);
  uint32_t sign = (bits >> 24) & 0x80;
  uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u)
    return {kFp8NaNCode, false};
  if (abs == 0x7F800000u)
    return {uint8_t(sign | p.maxCode), false};

  uint32_t code;
  const int minNormalExp = 1 - p.bias;
  if (abs >= uint32_t(minNormalExp + 127) << 23) {
    // Normal in FP8: round the FP32 exponent+mantissa field to mantBits
    // mantissa bits. A mantissa carry correctly bumps the exponent, and
    // re-biasing the exponent is one subtraction on the code.
    code = shiftRightRne(abs, 23 - p.mantBits) -
           (uint32_t(127 - p.bias) << p.mantBits);
    // Anything above maxCode (E4M3's 0x7F NaN pattern, E5M2's infinity and
    // beyond) is a result beyond the largest finite value.
    if (code > p.maxCode)
      return {uint8_t(sign | p.maxCode), true};
  } else {
    // Subnormal in FP8 (or rounding up to the smallest normal): count the
    // value in units of the smallest subnormal 2^(minNormalExp - mantBits)
    // and round to an integer. The integer is the code; 2^mantBits is the
    // smallest normal's code, so no special case is needed.
    uint32_t exp = abs >> 23;
    uint32_t mant = abs & 0x7FFFFFu;
    if (exp != 0)
      mant |= 0x800000u;
    else
      exp = 1; // FP32 subnormal: same scale as exponent field 1.
    // value = mant * 2^(exp - 150); units = value * 2^(mantBits -
    // minNormalExp).
    int shift = 150 - int(exp) + minNormalExp - p.mantBits;
    // mant < 2^24, so shift >= 25 leaves less than half a unit: zero.
    code = shift >= 25 ? 0 : shiftRightRne(mant, shift);
  }
  return {uint8_t(sign | code), false};
}

float moss::numerics::decodeFp8(uint8_t code, Fp8Format format) {
  const Fp8Params p = paramsOf(format);
  const int expBits = 7 - p.mantBits;
  uint32_t sign = uint32_t(code & 0x80) << 24;
  uint32_t exp = (code >> p.mantBits) & ((1u << expBits) - 1);
  uint32_t mant = code & ((1u << p.mantBits) - 1);
  if (format == Fp8Format::E4M3 && (code & 0x7F) == 0x7F)
    return std::numeric_limits<float>::quiet_NaN();
  if (format == Fp8Format::E5M2 && exp == 31) {
    if (mant != 0)
      return std::numeric_limits<float>::quiet_NaN();
    return bitsToFloat(sign | 0x7F800000u);
  }
  if (exp == 0) {
    // mant * 2^(1 - bias - mantBits): a small integer times a power of two,
    // exact in FP32.
    float magnitude =
        float(mant) *
        bitsToFloat(uint32_t(127 + 1 - p.bias - p.mantBits) << 23);
    return bitsToFloat(sign | floatBits(magnitude));
  }
  uint32_t fp32Exp = exp - p.bias + 127;
  return bitsToFloat(sign | (fp32Exp << 23) | (mant << (23 - p.mantBits)));
}

uint8_t moss::numerics::encodeE8M0(int exponent) {
  assert(exponent >= kE8M0MinExponent && exponent <= kE8M0MaxExponent &&
         "E8M0 exponent out of range");
  return uint8_t(exponent + 127);
}

int moss::numerics::e8m0Exponent(uint8_t code) { return int(code) - 127; }

float moss::numerics::decodeE8M0(uint8_t code) {
  if (code == kE8M0NaNCode)
    return std::numeric_limits<float>::quiet_NaN();
  // Code 0 is 2^-127, the FP32 subnormal with only mantissa bit 22 set.
  return bitsToFloat(code == 0 ? 0x00400000u : uint32_t(code) << 23);
}
