// moss/quantize/fold.cuh - folds E8M0 block factors into the FP8 codes
// (docs/NUMERICS-CONTRACT.md section 8; the host rule is
// moss::numerics::foldBlockScales).
//
// One warp per row. Each code becomes RNE(code * 2^-(E - e)), E the largest
// exponent of its row (Group = 0) or of its 128-wide K group, e its block's.
// The CTA first tabulates that rounding for every code and every shift below
// the format's limit (from there on every finite code rounds to zero), so
// the main loop is one shared-memory lookup per byte.
#pragma once

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

/// Where the global scale comes from.
enum FoldGlobal : int { kFoldNoGlobal = 0, kFoldTensorGlobal = 1,
                        kFoldRowGlobal = 2 };

/// The smallest shift at which every finite code rounds to zero
/// (moss::numerics::getFoldShiftLimit).
template <int Fmt> constexpr int kFoldShiftLimit = Fmt == kE4M3 ? 19 : 33;

template <int Fmt> __device__ __forceinline__ bool isNonFiniteCode(uint32_t c) {
  uint32_t magnitude = c & 0x7Fu;
  return Fmt == kE4M3 ? magnitude == 0x7Fu : magnitude >= 0x7Cu;
}

/// RNE(code * 2^-shift); non-finite codes stay as they are. The product is
/// exact in FP32 (it stays far above FP32's subnormals for shift <= 33).
template <int Fmt>
__device__ __forceinline__ uint32_t foldCode(uint32_t code, int shift) {
  if (isNonFiniteCode<Fmt>(code))
    return code;
  float value = ptx::f16ToFloat(
      static_cast<ptx::u16>(ptx::fp8x2ToF16x2<Fmt>(code) & 0xFFFFu));
  return encodeFp8x2<Fmt>(0.0f, mulRn(value, exp2i(-shift))) & 0xFFu;
}

/// One 16-byte chunk of codes through the shift's table.
__device__ __forceinline__ Vec16 lookUp(const uint8_t *table, const Vec16 &v) {
  Vec16 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t w = v.w[i];
    r.w[i] = uint32_t(table[w & 0xFFu]) | uint32_t(table[(w >> 8) & 0xFFu]) << 8 |
             uint32_t(table[(w >> 16) & 0xFFu]) << 16 |
             uint32_t(table[w >> 24]) << 24;
  }
  return r;
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

template <int Fmt, int Block, int Group, int Global, int Threads>
__device__ __forceinline__ void fold(const FoldArgs &args) {
  constexpr int kLimit = kFoldShiftLimit<Fmt>;
  constexpr int kWarps = Threads / 32;
  constexpr int kUnroll = 4;
  __shared__ uint8_t tables[(kLimit + 1) * 256];
  for (int i = threadIdx.x; i < (kLimit + 1) * 256; i += Threads)
    tables[i] = uint8_t(foldCode<Fmt>(uint32_t(i & 0xFF), i >> 8));
  __syncthreads();

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
    if constexpr (Group == 0) {
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
          break;
        int reference = rowReference;
        if constexpr (Group != 0) {
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
          int shift = min(reference - (blockCode - 127), kLimit);
          if (shift != 0)
            r = lookUp(tables + shift * 256, v[u]);
        }
        out[chunk] = r;
      }
    }
  }
}

} // namespace moss::quantize
