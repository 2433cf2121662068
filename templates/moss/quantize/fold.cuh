// moss/quantize/fold.cuh - folds E8M0 block factors into the FP8 codes
// (docs/NUMERICS-CONTRACT.md section 8; the host rule is
// moss::numerics::foldBlockScales).
//
// One warp per row. Each code becomes RNE(code * 2^-(E - e)), E the largest
// exponent of its row (kFoldRow) or of its 128-wide K group (kFold128), e its
// block's: widened to f16, multiplied by 2^-(E - e) there and converted back
// (foldWord), which rounds every code as the host rule does (FoldGpuTest
// checks every code at every shift).
#pragma once

#include "moss/common/fp8.cuh"
#include "moss/ptx/convert.cuh"

namespace moss::quantize {

/// Launch arguments of the fold kernel (device pointers).
struct FoldArgs {
  /// Codes [rows, cols] and E8M0 factors [rows, cols / Block] to fold.
  const uint8_t *codes;
  const uint8_t *e8m0;
  /// FP32 global scales ([1] or [rows]) when the scheme has them.
  const float *global;
  int rows;
  int cols;
  /// Folded codes [rows, cols] and FP32 factors [rows] (row fold) or
  /// [rows, cols / 128].
  uint8_t *outCodes;
  float *outFactors;
};

/// Fold modes, numbered as moss::numerics::BlockScaleFold.
enum FoldMode : int { kFoldNone = 0, kFold128 = 1, kFoldRow = 2 };

/// The K extent of the 128 fold's groups (moss::numerics::kFoldGroupCols).
constexpr int kFoldGroupCols = 128;

/// Where the global scale comes from.
enum FoldGlobal : int { kFoldNoGlobal = 0, kFoldTensorGlobal = 1,
                        kFoldRowGlobal = 2 };

/// The smallest shift at which every finite code rounds to zero
/// (moss::numerics::getFoldShiftLimit).
template <int Fmt> constexpr int kFoldShiftLimit = Fmt == kE4M3 ? 19 : 33;

/// The factors of a fold by `shift` (0 <= shift <= the format's limit; 0
/// multiplies by 1, which keeps every code) as f16 pairs: codes are
/// multiplied by `first`, then (E5M2, whose shifts reach 33, past f16's
/// 2^-24) by `second`, with first * second = 2^-shift.
struct FoldFactors {
  uint32_t first, second;
};

/// 2^-n (0 <= n <= 24) as an f16 in both halves of a word (subnormal from
/// n = 15 on).
__device__ __forceinline__ uint32_t f16x2Pow2(int n) {
  const uint32_t h = n <= 14 ? uint32_t(15 - n) << 10 : 1u << (24 - n);
  return h * 0x00010001u;
}

template <int Fmt>
__device__ __forceinline__ FoldFactors foldFactors(int shift) {
  if constexpr (Fmt == kE4M3)
    return {f16x2Pow2(shift), 0u};
  const int first = min(shift, 24);
  return {f16x2Pow2(first), f16x2Pow2(shift - first)};
}

/// Two codes (the low 16 bits of `pair`) times the fold's factors, as f16.
template <int Fmt>
__device__ __forceinline__ uint32_t foldedPairF16(uint32_t pair,
                                                  const FoldFactors &f) {
  uint32_t h = ptx::fp8x2ToF16x2<Fmt>(pair);
  asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(h) : "r"(f.first));
  if constexpr (Fmt == kE5M2)
    asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(h) : "r"(f.second));
  return h;
}

/// The four codes of `w` folded: each becomes RNE(code * 2^-shift), the
/// host rule moss::numerics::foldCode, in three steps the hardware rounds
/// exactly as that rule does. Every code is an f16 exactly (E4M3 and E5M2
/// lie in f16's range and precision). Its product by 2^-shift is exact in
/// f16 wherever the result can round to a nonzero code: such a result is at
/// least half the smallest subnormal (2^-10, 2^-17) with 4 (3) significant
/// bits, which f16 holds down to 2^-14 (2^-21); smaller products round in
/// f16 and still encode to a signed zero. E5M2's first product by 2^-24 is
/// exact for codes of 4 and up, and smaller ones end far below 2^-17.
/// The one rounding to FP8 is the conversion's RNE. Non-finite codes
/// (`kMayHoldNonFinite`: codes a caller passed in) keep their bits, as the
/// host rule keeps them; a quantizer's finite blocks hold none.
template <int Fmt, bool kMayHoldNonFinite>
__device__ __forceinline__ uint32_t foldWord(uint32_t w, const FoldFactors &f) {
  const uint32_t lo = foldedPairF16<Fmt>(w, f);
  const uint32_t hi = foldedPairF16<Fmt>(w >> 16, f);
  const uint32_t out = uint32_t(encodeFp8x2FromF16x2<Fmt>(lo)) |
                       uint32_t(encodeFp8x2FromF16x2<Fmt>(hi)) << 16;
  if constexpr (!kMayHoldNonFinite)
    return out;
  // Bit 7 of each byte whose code is NaN (E4M3 S.1111.111) or, in E5M2,
  // NaN or infinite (S.11111.xx); no carry crosses a byte.
  const uint32_t magnitudes = w & 0x7F7F7F7Fu;
  const uint32_t nonFinite =
      Fmt == kE4M3 ? ~((magnitudes ^ 0x7F7F7F7Fu) + 0x7F7F7F7Fu) & 0x80808080u
                   : (magnitudes + 0x04040404u) & 0x80808080u;
  const uint32_t keep = (nonFinite >> 7) * 0xFFu;
  return (out & ~keep) | (w & keep);
}

/// The shift of a block whose factor has E8M0 code `e8m0` against the
/// reference exponent `reference`, capped where every code rounds to zero;
/// 0 (nothing to do) for the NaN factor, whose codes are NaN already.
template <int Fmt>
__device__ __forceinline__ int foldShift(int reference, uint32_t e8m0) {
  if (e8m0 == 0xFFu)
    return 0;
  return min(reference - (int(e8m0) - 127), kFoldShiftLimit<Fmt>);
}

/// Folds `Words` words of one block's quantizer-written codes, whose
/// factor has E8M0 code `e8m0`, to the reference exponent `reference`.
template <int Fmt, int Words>
__device__ __forceinline__ void foldBlockWords(uint32_t *codes, int reference,
                                               uint32_t e8m0) {
  const int shift = foldShift<Fmt>(reference, e8m0);
  if (shift <= 0)
    return;
  const FoldFactors f = foldFactors<Fmt>(shift);
#pragma unroll
  for (int w = 0; w < Words; ++w)
    codes[w] = foldWord<Fmt, false>(codes[w], f);
}

/// The largest exponent of the E8M0 factors [first, first + count) that are
/// not NaN; -127 when all are.
__device__ __forceinline__ int referenceExponent(const uint8_t *e8m0, int first,
                                                 int count) {
  int e = -127;
  for (int b = first; b < first + count; ++b) {
    int code = e8m0[b];
    if (code != 0xFF)
      e = max(e, code - 127);
  }
  return e;
}

/// The fold pass: codes a caller passed in, so non-finite codes keep their
/// bits.
template <int Fmt, int Block, int Fold, int Global, int Threads>
__device__ __forceinline__ void fold(const FoldArgs &args) {
  static_assert(Fold == kFold128 || Fold == kFoldRow, "a fold to run");
  constexpr int Group = kFoldGroupCols;
  constexpr int kWarps = Threads / 32;
  constexpr int kUnroll = 4;

  const int lane = threadIdx.x & 31;
  const int blocks = args.cols / Block;
  const int chunks = args.cols / 16;
  for (int row = blockIdx.x * kWarps + threadIdx.x / 32; row < args.rows;
       row += gridDim.x * kWarps) {
    const uint8_t *e8m0 = args.e8m0 + int64_t(row) * blocks;
    const float global =
        Global == kFoldNoGlobal
            ? 1.0f
            : args.global[Global == kFoldRowGlobal ? row : 0];
    int rowReference = -127;
    if constexpr (Fold == kFoldRow) {
      for (int b = lane; b < blocks; b += 32) {
        int code = e8m0[b];
        if (code != 0xFF)
          rowReference = max(rowReference, code - 127);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        rowReference =
            max(rowReference, __shfl_xor_sync(0xFFFFFFFFu, rowReference, offset));
      if (lane == 0)
        args.outFactors[row] = mulRn(global, exp2i(rowReference));
    }
    const Vec16 *in =
        reinterpret_cast<const Vec16 *>(args.codes + int64_t(row) * args.cols);
    Vec16 *out = reinterpret_cast<Vec16 *>(args.outCodes +
                                           int64_t(row) * args.cols);
    for (int base = lane; base < chunks; base += 32 * kUnroll) {
      // All loads first, so that each lane has kUnroll in flight.
      Vec16 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (base + 32 * u < chunks)
          v[u] = in[base + 32 * u];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int chunk = base + 32 * u;
        if (chunk >= chunks)
          continue;
        int reference = rowReference;
        if constexpr (Fold == kFold128) {
          constexpr int kGroupChunks = Group / 16;
          reference = referenceExponent(e8m0, chunk / kGroupChunks *
                                                  (Group / Block),
                                        Group / Block);
          if (chunk % kGroupChunks == 0)
            args.outFactors[int64_t(row) * (args.cols / Group) +
                            chunk / kGroupChunks] =
                mulRn(global, exp2i(reference));
        }
        const int blockCode = e8m0[chunk * 16 / Block];
        Vec16 r = v[u];
        if (blockCode == 0xFF) {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            r.w[i] = 0x7F7F7F7Fu;
        } else {
          const int shift = foldShift<Fmt>(reference, blockCode);
          if (shift != 0) {
            const FoldFactors f = foldFactors<Fmt>(shift);
#pragma unroll
            for (int i = 0; i < 4; ++i)
              r.w[i] = foldWord<Fmt, true>(v[u].w[i], f);
          }
        }
        out[chunk] = r;
      }
    }
  }
}

} // namespace moss::quantize
