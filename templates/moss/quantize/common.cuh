// moss/quantize/common.cuh - what every quantizer kernel shares: the launch
// arguments, the per-block scale rule of each scheme, and the reductions.
#pragma once

#include "moss/common/fp8.cuh"
#include "moss/quantize/args.cuh"
#include "moss/quantize/geometry.cuh"

namespace moss::quantize {

/// Scaling schemes, numbered as moss::numerics::ScalingKind.
enum SchemeKind : int {
  kPerTensor = 0,
  kPerRow = 1,
  kPerGroup = 2,
  kMXFP8 = 3,
  kTwoLevel = 4
};

/// Where a quantize pass takes its global scale from.
enum GlobalSource : int {
  /// The scheme has none (per-group, MXFP8).
  kNoGlobal = 0,
  /// Computed inside the CTA from the rows it owns (one-pass per-row).
  kGlobalInCta = 1,
  /// Max bits left by a reduce pass in Args::globalBits.
  kGlobalFromBits = 2,
  /// An FP32 scale given by the caller (auto-scaled weights).
  kGlobalFromScale = 3,
  /// One global per row from a reduce pass's max bits per row in
  /// Args::globalBits (row-wise rows cut into segments).
  kGlobalFromRowBits = 4
};

/// Kernel passes.
enum Pass : int { kReducePass = 0, kQuantizePass = 1 };

/// How one block is scaled: codes are encode((x * up) / divisor).
struct BlockScale {
  /// An exact power of two (two-level), else 1.
  float up;
  /// The FP32 divisor; NaN for non-finite blocks, which makes every code the
  /// NaN code.
  float divisor;
  /// The E8M0 code (MXFP8, two-level).
  uint32_t e8m0;
  /// 1 / divisor: correctly rounded in FP32, and to about 2^-50 in FP64.
  float recip;
  double recip64;
  /// Whether the divisor lies where the quotient's fast route is exact.
  bool fast;
  /// Whether any value of the block can reach the saturation threshold.
  bool maySaturate;
};

/// The quiet NaN the host reference writes for non-finite scales.
__device__ __forceinline__ float quietNaN() { return bitsFloat(0x7FC00000u); }

/// A global scale with its reciprocals, computed once per row or tensor.
struct GlobalScale {
  float value;
  double recip64;
  float recip;
};

__device__ __forceinline__ GlobalScale makeGlobal(float value) {
  double recip64 = reciprocal64(double(value));
  return {value, recip64, divRn(1.0f, value, recip64)};
}

/// Sets the reciprocals of `s` and whether the fast quotient holds: divisors
/// in [2^-60, 2^100] keep every intermediate of quotient() exact (NaN
/// divisors too: they give NaN on every route).
__device__ __forceinline__ void setReciprocal(BlockScale &s, double recip64,
                                              float recip) {
  s.recip64 = recip64;
  s.recip = recip;
  uint32_t d = absBits(s.divisor);
  s.fast = d > kInfBits || (d >= 0x21800000u && d <= 0x71800000u);
}

/// A block's scale in at most two words, so that one lane can compute it
/// and shuffle it to the lanes that hold the block. Per-group: `a` holds the
/// FP32 divisor's bits and `b` its reciprocal's; every other scheme: `a`
/// holds the E8M0 code (0xFF where there is none, or for a non-finite
/// block). `a` also carries maySaturate (kMaySaturateBit).
struct ScaleCode {
  uint32_t a, b;
};

/// Where ScaleCode::a keeps maySaturate: the divisor's sign bit (divisors
/// are positive or a positive NaN), else the bit above the E8M0 code.
template <int Kind>
constexpr uint32_t kMaySaturateBit = Kind == kPerGroup ? 1u << 31 : 1u << 8;

/// The BlockScale a code stands for, under the row's or tensor's `global`.
template <int Kind, int Fmt>
__device__ __forceinline__ BlockScale expandScale(ScaleCode c,
                                                  const GlobalScale &global) {
  BlockScale s{1.0f, global.value, 0xFFu, 0.0f, 0.0, false, false};
  s.maySaturate = (c.a & kMaySaturateBit<Kind>) != 0;
  if constexpr (Kind == kPerGroup) {
    s.divisor = bitsFloat(c.a & ~kMaySaturateBit<Kind>);
    setReciprocal(s, 0.0, bitsFloat(c.b));
    // Only the exact route (divisors outside the fast range) needs it.
    if (!s.fast)
      s.recip64 = reciprocal64(double(s.divisor));
  } else {
    s.e8m0 = c.a & 0xFFu;
    const bool finite = s.e8m0 != 0xFFu;
    if constexpr (Kind == kMXFP8) {
      s.divisor = finite ? exp2i(int(s.e8m0) - 127) : quietNaN();
      // 2^-k is exact (and 2^127 representable), so is x * 2^-k.
      float recip = finite ? exp2i(127 - int(s.e8m0)) : quietNaN();
      setReciprocal(s, double(recip), recip);
    } else {
      if constexpr (Kind == kTwoLevel) {
        if (finite)
          s.up = exp2i(127 - int(s.e8m0));
        else
          s.divisor = quietNaN();
      }
      // Per-tensor, per-row and two-level divide by the global scale.
      setReciprocal(s, global.recip64, global.recip);
    }
  }
  return s;
}

/// The scale code of a block with magnitude max bits `amaxBits` (NaN/Inf
/// patterns mark a non-finite block) under scheme `Kind`, without
/// maySaturate. `global` is the tensor's or row's FP32 global scale
/// (per-tensor, per-row, two-level).
template <int Kind, int Fmt>
__device__ __forceinline__ ScaleCode scaleCodeOf(uint32_t amaxBits,
                                                 const GlobalScale &global) {
  bool finite = amaxBits < kInfBits;
  float amax = bitsFloat(amaxBits);
  ScaleCode c{0xFFu, 0u};
  if constexpr (Kind == kPerGroup) {
    float divisor = finite ? fp32Scale<Fmt>(amax) : quietNaN();
    c.a = floatBits(divisor);
    c.b = floatBits(divRn(1.0f, divisor, reciprocal64(double(divisor))));
  } else if constexpr (Kind == kMXFP8) {
    if (finite) {
      int k = amax == 0.0f ? -127
                           : floorLog2(amax) - Fp8Traits<Fmt>::kMaxExponent;
      k = k < -127 ? -127 : (k > 127 ? 127 : k);
      c.a = uint32_t(k + 127);
    }
  } else if constexpr (Kind == kTwoLevel) {
    if (finite) {
      // r = RN(RN(amax / max) / global) decides e only through which
      // powers of two it lies between. Two products give it within 4
      // steps; only near a power of two (or for tiny r) do the exact
      // divisions run.
      constexpr float kInverseMax = 1.0f / Fp8Traits<Fmt>::kMax;
      float r = mulRn(mulRn(amax, kInverseMax), global.recip);
      uint32_t rb = floatBits(r), mantissa = rb & 0x7FFFFFu;
      if (rb < 0x00800000u || mantissa - 8u > 0x7FFFEFu) {
        constexpr double kInverseMax64 = 1.0 / double(Fp8Traits<Fmt>::kMax);
        float blockScale = divRn(amax, Fp8Traits<Fmt>::kMax, kInverseMax64);
        r = divRn(blockScale, global.value, global.recip64);
      }
      int e = r == 0.0f ? -127 : ceilLog2(r);
      e = e < -127 ? -127 : (e > 0 ? 0 : e);
      c.a = uint32_t(e + 127);
    }
  }
  return c;
}

/// Whether a value of the block with magnitude max bits `amaxBits` may
/// saturate under its scale `s`, so that its encoding must check.
template <int Fmt>
__device__ __forceinline__ bool maySaturate(uint32_t amaxBits,
                                            const BlockScale &s) {
  // Every quotient |x * up| / divisor is at most amax * up / divisor <=
  // B * (1 + 2^-22) with B = RN(RN(amax * up) * recip): amax * up is exact
  // (up a power of two, or inf), recip correctly rounded (a subnormal recip
  // means a divisor above 2^126, whose quotients stay below 4). Its FP32
  // rounding adds one more ulp, so below these B no value reaches E4M3's
  // saturation (above 464) or E5M2's (from 61440 on). Two-level, per-group
  // and per-tensor blocks end at 448 or 57344, so only MXFP8 blocks, casts
  // and NaN (a NaN in a cast's input) take the checking route.
  constexpr float kCheckFrom = Fmt == kE4M3 ? 463.0f : 61400.0f;
  return !(mulRn(mulRn(bitsFloat(amaxBits), s.up), s.recip) < kCheckFrom);
}

/// scaleCodeOf with maySaturate in its kMaySaturateBit: what one lane
/// computes for the lanes it shuffles the code to.
template <int Kind, int Fmt>
__device__ __forceinline__ ScaleCode blockScaleCode(uint32_t amaxBits,
                                                    const GlobalScale &global) {
  ScaleCode c = scaleCodeOf<Kind, Fmt>(amaxBits, global);
  if (maySaturate<Fmt>(amaxBits, expandScale<Kind, Fmt>(c, global)))
    c.a |= kMaySaturateBit<Kind>;
  return c;
}

/// The scale of a block with magnitude max bits `amaxBits` (see
/// scaleCodeOf), expanded once.
template <int Kind, int Fmt>
__device__ __forceinline__ BlockScale blockScale(uint32_t amaxBits,
                                                 const GlobalScale &global) {
  BlockScale s =
      expandScale<Kind, Fmt>(scaleCodeOf<Kind, Fmt>(amaxBits, global), global);
  s.maySaturate = maySaturate<Fmt>(amaxBits, s);
  return s;
}

/// The global scale from a reduce pass's max bits: per-tensor and per-row
/// take the group's amax (NaN for a non-finite group); two-level takes the
/// max over finite blocks (1 when that is zero).
template <int Kind, int Fmt>
__device__ __forceinline__ float globalFromBits(uint32_t bits) {
  if (Kind != kTwoLevel && bits >= kInfBits)
    return quietNaN();
  return fp32Scale<Fmt>(bitsFloat(bits));
}

/// The bits a block contributes to a global reduction: two-level counts only
/// finite blocks (so does MXFP8's, whose reduction finds a fold's reference);
/// per-tensor and per-row let NaN/Inf through to mark the group non-finite.
template <int Kind>
__device__ __forceinline__ uint32_t globalContribution(uint32_t blockBits) {
  if (Kind == kTwoLevel || Kind == kMXFP8)
    return blockBits < kInfBits ? blockBits : 0u;
  return blockBits;
}

/// RN32(xs / s.divisor) on the fast route (s.fast), without a division
/// (which would make the quantizers compute-bound): with recip the correctly
/// rounded 1/d, q0 = RN(xs * recip) is within an ulp of xs / d, the residual
/// xs - d * q0 is exact in one FMA, and RN(q0 + residual * recip) is the
/// correctly rounded quotient (Markstein's theorem), provided nothing
/// underflows or overflows: setReciprocal admits only divisors for which
/// that holds where it matters (quotients far below the FP8 range may be off
/// by an ulp and still encode to zero). Infinite xs, possible only in a cast
/// with the caller's scale, keep inf.
template <bool MayBeInfinite>
__device__ __forceinline__ float fastQuotient(float xs, const BlockScale &s) {
  float q0 = mulRn(xs, s.recip);
  float residual = fmaRn(-s.divisor, q0, xs);
  float q1 = fmaRn(residual, s.recip, q0);
  if constexpr (MayBeInfinite)
    return absBits(xs) == kInfBits ? q0 : q1;
  return q1;
}

/// The codes of N values (a multiple of 4) scaled by `s`, four to a word:
/// value 4w + k in bits 8k .. 8k + 7 of codes[w]. Values from `valid` on
/// are padding: encoded, but not counted when they saturate. The common
/// case (the fast route, nothing near saturation) branches once for all N
/// values and keeps no quotient past its conversion; other blocks take the
/// route per value and count saturation.
template <int Fmt, bool Scaled, bool MayBeInfinite = false, int N>
__device__ __forceinline__ void encodeValues(const float (&x)[N],
                                             const BlockScale &s,
                                             uint32_t (&codes)[N / 4],
                                             uint32_t &saturated,
                                             int valid = N) {
  static_assert(N % 4 == 0, "whole words");
  auto scaled = [&](int i) { return Scaled ? mulRn(x[i], s.up) : x[i]; };
  if (s.fast && !s.maySaturate) {
#pragma unroll
    for (int w = 0; w < N / 4; ++w) {
      float y[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        y[k] = fastQuotient<MayBeInfinite>(scaled(4 * w + k), s);
      codes[w] = encodeFp8x2<Fmt>(y[1], y[0]) | encodeFp8x2<Fmt>(y[3], y[2])
                                                    << 16;
    }
    return;
  }
#pragma unroll
  for (int w = 0; w < N / 4; ++w) {
    float y[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float xs = scaled(4 * w + k);
      y[k] = s.fast ? fastQuotient<MayBeInfinite>(xs, s)
                    : divRn(xs, s.divisor, s.recip64);
      saturated += s.maySaturate && 4 * w + k < valid && saturates<Fmt>(y[k]);
    }
    codes[w] =
        encodeFp8x2<Fmt>(y[1], y[0]) | encodeFp8x2<Fmt>(y[3], y[2]) << 16;
  }
}

/// Per 16-bit half, the larger of a and b as unsigned integers.
__device__ __forceinline__ uint32_t maxU16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/// The largest magnitude bits (absBits) of a BF16 word's two elements,
/// each as FP32 bits, from a word of per-half maxima.
__device__ __forceinline__ uint32_t bf16PairMaxBits(uint32_t halves) {
  const uint32_t lo = halves << 16, hi = halves & 0xFFFF0000u;
  return lo > hi ? lo : hi;
}

/// The largest absBits of a 16-byte vector's elements. BF16 magnitudes
/// order like their 16-bit patterns, so pairs reduce in one instruction.
template <int In>
__device__ __forceinline__ uint32_t vectorMaxBits(const Vec16 &v) {
  if constexpr (In == kInBF16) {
    constexpr uint32_t kMagnitude = 0x7FFF7FFFu;
    return bf16PairMaxBits(
        maxU16x2(maxU16x2(v.w[0] & kMagnitude, v.w[1] & kMagnitude),
                 maxU16x2(v.w[2] & kMagnitude, v.w[3] & kMagnitude)));
  } else {
    uint32_t m = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t b = absBits(bitsFloat(v.w[e]));
      m = b > m ? b : m;
    }
    return m;
  }
}

/// The larger magnitude bits of `a` and of input word `w`'s elements, per
/// element: two BF16 halves, or one FP32 word (absBits order NaN above
/// infinity above every finite value).
template <int In>
__device__ __forceinline__ uint32_t wordMagnitudeMax(uint32_t a, uint32_t w) {
  if constexpr (In == kInBF16) {
    return maxU16x2(a, w & 0x7FFF7FFFu);
  } else {
    const uint32_t b = absBits(bitsFloat(w));
    return b > a ? b : a;
  }
}

/// Max of `v` over groups of `Lanes` adjacent lanes (a power of two <= 32).
template <int Lanes>
__device__ __forceinline__ uint32_t groupMax(uint32_t v) {
#pragma unroll
  for (int offset = Lanes / 2; offset > 0; offset /= 2) {
    uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    v = v > other ? v : other;
  }
  return v;
}

/// Sum over the warp.
__device__ __forceinline__ uint32_t warpSum(uint32_t v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

/// Adds a per-thread count to a device counter with one atomic per warp.
__device__ __forceinline__ void addCount(uint64_t *counter, uint32_t count) {
  count = warpSum(count);
  if ((threadIdx.x & 31) == 0 && count != 0)
    atomicAdd(counter, uint64_t(count));
}

/// Max over the CTA; every thread gets the result. `scratch` holds one word
/// per warp. Contains __syncthreads().
template <int Threads>
__device__ __forceinline__ uint32_t ctaMax(uint32_t v, uint32_t *scratch) {
  v = groupMax<32>(v);
  int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0)
    scratch[warp] = v;
  __syncthreads();
  uint32_t m = 0;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w)
    m = scratch[w] > m ? scratch[w] : m;
  __syncthreads();
  return m;
}

/// Max over the CTA with a single barrier; every thread gets the result.
/// Calls alternate between the halves of `scratch` (two words per warp),
/// counted by `calls`: a half is written again only after the next call's
/// barrier, which every thread reaches once it has read the half.
template <int Threads>
__device__ __forceinline__ uint32_t
ctaMaxOneBarrier(uint32_t v, uint32_t (*scratch)[Threads / 32], int &calls) {
  v = groupMax<32>(v);
  uint32_t *half = scratch[calls & 1];
  ++calls;
  if ((threadIdx.x & 31) == 0)
    half[threadIdx.x / 32] = v;
  __syncthreads();
  uint32_t m = 0;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w)
    m = half[w] > m ? half[w] : m;
  return m;
}

/// An 8-byte store of two words (lo at the lower address).
__device__ __forceinline__ void store8(void *p, uint32_t lo, uint32_t hi) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(lo), "r"(hi)
               : "memory");
}

} // namespace moss::quantize
