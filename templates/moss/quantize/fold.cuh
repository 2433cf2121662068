// moss/quantize/fold.cuh - folds E8M0 block factors into the FP8 codes
// (docs/NUMERICS-CONTRACT.md section 8; the host rule is
// moss::numerics::foldBlockScales).
//
// One warp per row. Each code becomes RNE(code * 2^-(E - e)), E the largest
// exponent of its row (kFoldRow) or of its 128-wide K group (kFold128), e its
// block's.
// Codes whose result stays normal only lose `shift` from their exponent
// field, four at a time in a 32-bit word; other words go through a table of
// the rounding for every code and every shift below the format's limit
// (from there on every finite code rounds to zero). The generated source
// holds that table, made by the host rule (moss::numerics::foldCode), so the
// rounding is defined once; each CTA copies it into shared memory.
#pragma once

#include "moss/common/fp8.cuh"

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

/// Field layout of a format's codes, four to a 32-bit word.
template <int Fmt> struct FoldFields;
template <> struct FoldFields<kE4M3> {
  static constexpr int kMantissaBits = 3;
  static constexpr uint32_t kExponentMask = 0x78787878u;
};
template <> struct FoldFields<kE5M2> {
  static constexpr int kMantissaBits = 2;
  static constexpr uint32_t kExponentMask = 0x7C7C7C7Cu;
};

/// The four codes of `w` times 2^-shift (0 < shift <= 34) when each stays
/// normal and none is NaN or infinite: then only the exponent fields drop
/// by `shift`, with no borrow between bytes. Returns false otherwise.
template <int Fmt>
__device__ __forceinline__ bool foldWordExactly(uint32_t w, int shift,
                                                uint32_t &out) {
  using F = FoldFields<Fmt>;
  const uint32_t exponents = (w & F::kExponentMask) >> F::kMantissaBits;
  // Every byte's exponent above `shift`: bit 7 of exponent + 128 - shift - 1.
  const uint32_t above =
      (exponents + uint32_t(127 - shift) * 0x01010101u) & 0x80808080u;
  // No NaN or infinity: E4M3's S.1111.111, E5M2's S.11111.xx.
  uint32_t nonFinite;
  if constexpr (Fmt == kE4M3) {
    const uint32_t t = (w & 0x7F7F7F7Fu) ^ 0x7F7F7F7Fu; // zero byte: NaN
    nonFinite = (t - 0x01010101u) & ~t & 0x80808080u;
  } else {
    nonFinite = ((exponents + 0x61616161u) & 0x80808080u); // exponent 31
  }
  out = w - uint32_t(shift << F::kMantissaBits) * 0x01010101u;
  return above == 0x80808080u && nonFinite == 0;
}

/// Four codes of one block folded by `shift` (0 < shift <= the limit);
/// `table` is the shift's row of the fold table (256 codes).
template <int Fmt>
__device__ __forceinline__ uint32_t foldWord(uint32_t w, int shift,
                                             const uint8_t *table) {
  uint32_t out;
  if (foldWordExactly<Fmt>(w, shift, out))
    return out;
  return uint32_t(table[w & 0xFFu]) | uint32_t(table[(w >> 8) & 0xFFu]) << 8 |
         uint32_t(table[(w >> 16) & 0xFFu]) << 16 |
         uint32_t(table[w >> 24]) << 24;
}

/// The fold table in shared memory: `kVecs` 16-byte vectors, copied from
/// the generated source's table by the whole CTA.
template <int Fmt> struct FoldTable {
  static constexpr int kVecs = (kFoldShiftLimit<Fmt> + 1) * 256 / 16;
  Vec16 vecs[kVecs];

  template <int Threads>
  __device__ __forceinline__ void load(const Vec16 *table) {
    for (int i = threadIdx.x; i < kVecs; i += Threads)
      vecs[i] = table[i];
    __syncthreads();
  }
  /// The row of codes folded by `shift`.
  __device__ __forceinline__ const uint8_t *row(int shift) const {
    return reinterpret_cast<const uint8_t *>(vecs) + shift * 256;
  }
};

/// Folds `Words` words of one block's codes, whose factor has E8M0 code
/// `e8m0`, to the reference exponent `reference`. A NaN block's codes are
/// NaN already; the others move by E - e (capped where every code rounds to
/// zero).
template <int Fmt, int Words>
__device__ __forceinline__ void foldBlockWords(uint32_t *codes, int reference,
                                               uint32_t e8m0,
                                               const FoldTable<Fmt> &table) {
  const int shift = min(reference - (int(e8m0) - 127), kFoldShiftLimit<Fmt>);
  if (e8m0 == 0xFFu || shift <= 0)
    return;
#pragma unroll
  for (int w = 0; w < Words; ++w)
    codes[w] = foldWord<Fmt>(codes[w], shift, table.row(shift));
}

/// One 16-byte chunk of codes of one block, folded by `shift` (> 0).
template <int Fmt>
__device__ __forceinline__ Vec16 foldChunk(const uint8_t *table,
                                           const Vec16 &v, int shift) {
  Vec16 r;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    r.w[i] = foldWord<Fmt>(v.w[i], shift, table);
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

/// `table`: the folded code of every code c at every shift d <= the limit,
/// at d * 256 + c (made by the host, moss::numerics::foldCode).
template <int Fmt, int Block, int Fold, int Global, int Threads>
__device__ __forceinline__ void fold(const FoldArgs &args,
                                     const Vec16 *table) {
  static_assert(Fold == kFold128 || Fold == kFoldRow, "a fold to run");
  constexpr int Group = kFoldGroupCols;
  constexpr int kLimit = kFoldShiftLimit<Fmt>;
  constexpr int kWarps = Threads / 32;
  constexpr int kUnroll = 4;
  __shared__ FoldTable<Fmt> tables;
  tables.load<Threads>(table);

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
          int shift = min(reference - (blockCode - 127), kLimit);
          if (shift != 0)
            r = foldChunk<Fmt>(tables.row(shift), v[u], shift);
        }
        out[chunk] = r;
      }
    }
  }
}

} // namespace moss::quantize
