// moss/common/fp8.cuh - the device side of docs/NUMERICS-CONTRACT.md.
//
// The host reference (runtime/numerics) and these functions must produce the
// same bits; tests/gpu/QuantizeGpuTest holds them to it. Every rounding step
// is spelled out in PTX so that no compiler flag (fast math, FMA contraction,
// flush-to-zero) can change it.
#pragma once

#include "moss/common/types.cuh"

namespace moss {

/// FP8 formats, numbered as in moss::numerics::Fp8Format.
enum Fp8Kind : int { kE4M3 = 0, kE5M2 = 1 };

template <int Fmt> struct Fp8Traits;
template <> struct Fp8Traits<kE4M3> {
  /// The largest finite value, as the FP32 divisor of amax.
  static constexpr float kMax = 448.0f;
  /// emax_elem of the OCP MX scale rule.
  static constexpr int kMaxExponent = 8;
};
template <> struct Fp8Traits<kE5M2> {
  static constexpr float kMax = 57344.0f;
  static constexpr int kMaxExponent = 15;
};

/// 1 / d in FP64 to about 2^-50 relative: the hardware estimate refined by
/// two Newton steps.
__device__ __forceinline__ double reciprocal64(double d) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(d));
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    double e;
    asm("fma.rn.f64 %0, %1, %2, 1.0;" : "=d"(e) : "d"(-d), "d"(r));
    asm("fma.rn.f64 %0, %1, %2, %1;" : "=d"(r) : "d"(r), "d"(e));
  }
  return r;
}

__device__ __forceinline__ double mul64(double a, double b) {
  double d;
  asm("mul.rn.f64 %0, %1, %2;" : "=d"(d) : "d"(a), "d"(b));
  return d;
}

__device__ __forceinline__ float toFloat(double a) {
  float f;
  asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(a));
  return f;
}

/// FP32 division a / b, correctly rounded, for finite a and finite b > 0
/// (NaN b gives NaN), given recipB ~ 1 / b to about 2^-50 (reciprocal64).
/// div.rn.f32 would do, but it compiles to a subroutine call, and calls cost
/// these kernels a stack frame. The FP64 quotient is within 2^-49 of a / b,
/// so rounding it to FP32 is right unless it lies that close to the midpoint
/// between two floats; then the midpoint (25 bits) times b (24 bits), exact
/// in FP64, is compared with a.
__device__ __forceinline__ float divRn(float a, float b, double recipB) {
  double q = mul64(double(a), recipB);
  float f = toFloat(q);
  double fd = double(f);
  if (f == 0.0f || fd != fd || fd == q)
    return f;
  // The float on q's other side of f, and the midpoint between them.
  uint32_t fb = floatBits(f);
  bool towardZero = (q < fd) == (f > 0.0f);
  float g = bitsFloat(towardZero ? fb - 1 : fb + 1);
  double mid = (fd + double(g)) * 0.5;
  double gap = q - mid;
  double slack = q * 0x1p-47;
  if (gap * gap > slack * slack)
    return f;
  double product = mul64(mid, double(b));
  double aa = double(a);
  if (aa == product) // a tie: the even one
    return (fb & 1u) ? g : f;
  // a / b lies on the side of mid where a lies relative to mid * b.
  bool aboveMid = aa > product;
  bool fAbove = fd > mid;
  return aboveMid == fAbove ? f : g;
}

__device__ __forceinline__ float divRn(float a, float b) {
  return divRn(a, b, reciprocal64(double(b)));
}

/// FP32 multiplication, correctly rounded, never contracted into an FMA.
__device__ __forceinline__ float mulRn(float a, float b) {
  float d;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

/// FP32 addition and subtraction, correctly rounded, never contracted.
__device__ __forceinline__ float addRn(float a, float b) {
  float d;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

__device__ __forceinline__ float subRn(float a, float b) {
  float d;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

/// Two FP32 values to FP8 codes with one round-to-nearest-even each,
/// saturating finite values and infinities to +-max, NaN to 0x7F. `hi` lands
/// in bits 15..8, `lo` in bits 7..0.
template <int Fmt>
__device__ __forceinline__ uint32_t encodeFp8x2(float hi, float lo) {
  unsigned short d;
  if constexpr (Fmt == kE4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

/// The FP8 codes of an f16 pair (low half in the low byte), each rounded to
/// nearest even; no f16 value the fold makes lies past the format's range.
template <int Fmt>
__device__ __forceinline__ uint32_t encodeFp8x2FromF16x2(uint32_t pair) {
  unsigned short d;
  if constexpr (Fmt == kE4M3)
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(d) : "r"(pair));
  else
    asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(d) : "r"(pair));
  return d;
}

/// The magnitude bits of x: for non-negative floats the integer order is the
/// float order, and NaN/Inf patterns are the largest, so a max over these
/// gives both the amax and whether all were finite.
__device__ __forceinline__ uint32_t absBits(float x) {
  return floatBits(x) & 0x7FFFFFFFu;
}

constexpr uint32_t kInfBits = 0x7F800000u;

/// Whether a finite scaled value rounds beyond the format's max: E4M3 above
/// 464 (464 itself is a tie that goes to the even 448); E5M2 from 61440 on
/// (a tie that goes to the even 65536, out of range).
template <int Fmt> __device__ __forceinline__ bool saturates(float y) {
  uint32_t a = absBits(y);
  if (a >= kInfBits)
    return false;
  return Fmt == kE4M3 ? a > 0x43E80000u /* 464 */
                      : a >= 0x47700000u /* 61440 */;
}

/// Smallest e with 2^e >= r, for finite r > 0, from the exponent field (as
/// frexp would give it), subnormals included.
__device__ __forceinline__ int ceilLog2(float r) {
  uint32_t bits = floatBits(r);
  int exponent = int(bits >> 23);
  uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0) {
    // r = mantissa * 2^-149; floor(log2 mantissa) = 31 - clz.
    int floorLog = 31 - countLeadingZeros(mantissa) - 149;
    return (mantissa & (mantissa - 1)) == 0 ? floorLog : floorLog + 1;
  }
  return mantissa == 0 ? exponent - 127 : exponent - 126;
}

/// floor(log2 a) for finite a > 0, subnormals included.
__device__ __forceinline__ int floorLog2(float a) {
  uint32_t bits = floatBits(a);
  int exponent = int(bits >> 23);
  if (exponent == 0)
    return 31 - countLeadingZeros(bits & 0x7FFFFFu) - 149;
  return exponent - 127;
}

/// 2^(code - 127) for an E8M0 scale code, exactly: code 0 is the FP32
/// subnormal 2^-127, 0xFF (the NaN scale) is a quiet NaN.
__device__ __forceinline__ float decodeE8M0(uint32_t code) {
  uint32_t bits = code == 0 ? 0x00400000u : code << 23;
  return bitsFloat(code == 0xFF ? 0x7FC00000u : bits);
}

/// 2^e as FP32 for e in [-127, 127] (2^-127 is a subnormal).
__device__ __forceinline__ float exp2i(int e) {
  return e == -127 ? bitsFloat(0x00400000u)
                   : bitsFloat(uint32_t(e + 127) << 23);
}

/// FP32 fused multiply-add, rounded once to nearest even.
__device__ __forceinline__ float fmaRn(float a, float b, float c) {
  float d;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

/// An FP32 scale amax / max (amax >= 0), correctly rounded; 1 when the
/// quotient is zero. For amax in [2^-100, FLT_MAX] Markstein's quotient
/// (q0 = RN(amax * y) with y = RN(1 / max), then RN(q0 + (amax - max * q0)
/// * y)) is the correctly rounded one (ScaleQuotientTest checks every such
/// float against IEEE division, for both formats' max); smaller, infinite and
/// NaN amax take the FP64 route.
template <int Fmt> __device__ __forceinline__ float fp32Scale(float amax) {
  constexpr float kMax = Fp8Traits<Fmt>::kMax;
  constexpr float kInverse = 1.0f / kMax;
  constexpr uint32_t kFastFrom = 0x0D800000u; // 2^-100
  float s;
  if (floatBits(amax) - kFastFrom < 0x7F800000u - kFastFrom) {
    const float q0 = mulRn(amax, kInverse);
    s = fmaRn(fmaRn(-kMax, q0, amax), kInverse, q0);
  } else {
    constexpr double kInverseMax = 1.0 / double(kMax);
    s = divRn(amax, kMax, kInverseMax);
  }
  return s == 0.0f ? 1.0f : s;
}

} // namespace moss
