//===- FP8.h - FP8 and E8M0 encode/decode ----------------------*- C++ -*-===//
//
// The host-side rounding rules for the formats MOSS stores: OCP FP8 E4M3
// (the "FN" variant: no infinities, NaN = S.1111.111) and E5M2 (IEEE-like),
// and the E8M0 power-of-two scale format. The device templates in
// templates/moss/common/ implement the same rules; tests hold them
// bit-identical.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_FP8_H
#define MOSS_NUMERICS_FP8_H

#include <cstdint>

namespace moss::numerics {

/// The two FP8 data formats Hopper's tensor cores take.
enum class Fp8Format : uint8_t { E4M3, E5M2 };

/// Largest finite magnitude: 448 for E4M3, 57344 for E5M2.
float fp8MaxFinite(Fp8Format format);

/// The NaN code every encoder writes (both formats): 0x7F.
constexpr uint8_t kFp8NaNCode = 0x7F;

/// Largest normal exponent of the format (8 for E4M3, 15 for E5M2); this is
/// `emax_elem` in the OCP MX scale rule.
int fp8MaxExponent(Fp8Format format);

/// Result of rounding one FP32 value to FP8.
struct Fp8Encoded {
  uint8_t code;
  /// True when the finite input's round-to-nearest-even result lies beyond
  /// the largest finite value and was clamped to +-max. False for +-Inf
  /// inputs (they also become +-max) and for NaN.
  bool saturated;
};

/// Rounds `x` to the nearest FP8 value, ties to even, with subnormals.
/// Saturating: finite values whose rounded result is beyond the range become
/// +-max (E4M3: |x| > 464, E5M2: |x| >= 61440), and so do +-Inf (E5M2's
/// infinity codes are never produced). NaN becomes kFp8NaNCode. The sign of
/// zero is kept (-0 -> 0x80). A single rounding from the exact FP32 value (no
/// double rounding).
Fp8Encoded encodeFp8(float x, Fp8Format format);

/// Exact value of an FP8 code as FP32 (NaN codes give a quiet NaN, E5M2
/// infinity codes give +-inf).
float decodeFp8(uint8_t code, Fp8Format format);

/// E8M0 scale codes: code = exponent + 127 for exponent in [-127, 127];
/// 0xFF is NaN.
constexpr uint8_t kE8M0NaNCode = 0xFF;
constexpr int kE8M0MinExponent = -127;
constexpr int kE8M0MaxExponent = 127;

/// Encodes 2^exponent. The exponent must be in [-127, 127].
uint8_t encodeE8M0(int exponent);

/// The exponent of an E8M0 code (code - 127); the NaN code has no exponent
/// and must be checked by the caller.
int e8m0Exponent(uint8_t code);

/// 2^(code-127) as FP32 (2^-127 is an FP32 subnormal, representable
/// exactly); NaN for 0xFF.
float decodeE8M0(uint8_t code);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_FP8_H
