// moss/quantize/tile2d.cuh - per-group quantization with square BxB blocks
// (weights), row-wise or transposed. A CTA owns one block: it stages the
// block in dynamic shared memory with 16-byte asynchronous copies, reduces
// its amax there, then encodes from shared memory, writing 16 contiguous
// codes per thread and step along the output's rows.
#pragma once

#include "moss/quantize/columnwise.cuh"

namespace moss::quantize {

template <int In_, int Fmt_, int Block_, bool Transpose_> struct Tile2dConfig {
  static constexpr int In = In_, Fmt = Fmt_, Block = Block_;
  static constexpr bool Transpose = Transpose_;
  static constexpr int Threads = 256;
  static constexpr int kElems = kVecElements<In>;
  /// 16-byte vectors of one block row, and of the block.
  static constexpr int kRowVecs = Block / kElems;
  static constexpr int kVecs = Block * kRowVecs;
  /// Dynamic shared memory: the block.
  static constexpr int kBytes = Block * Block * InputTraits<In>::kBytes;
  static_assert(kVecs % Threads == 0 || Threads % kVecs == 0,
                "whole vectors per thread");
};

/// Element (r, c) of the staged block as FP32.
template <int In, int B>
__device__ __forceinline__ float stagedElement(const unsigned char *block,
                                               int r, int c) {
  if constexpr (In == kInF32)
    return reinterpret_cast<const float *>(block)[r * B + c];
  else
    return bitsFloat(
        uint32_t(reinterpret_cast<const uint16_t *>(block)[r * B + c]) << 16);
}

template <class Config> __device__ void tile2d(const Args &args) {
  constexpr int In = Config::In, Fmt = Config::Fmt, B = Config::Block;
  constexpr int Elems = Config::kElems, RowVecs = Config::kRowVecs;
  extern __shared__ __align__(16) unsigned char block[];
  __shared__ uint32_t scratch[Config::Threads / 32];
  const int r0 = blockIdx.y * B, c0 = blockIdx.x * B;
  const bool vectors = args.cols % Elems == 0;

  stageTile<In, B, B * InputTraits<In>::kBytes, Config::Threads>(
      args, r0, c0, block, vectors);
  ptx::copyAsyncCommit();
  ptx::copyAsyncWait<0>();
  __syncthreads();
  uint32_t bits = 0;
#pragma unroll 4
  for (int q = threadIdx.x; q < Config::kVecs; q += Config::Threads) {
    const uint32_t b =
        vectorMaxBits<In>(*reinterpret_cast<const Vec16 *>(block + 16 * q));
    bits = b > bits ? b : bits;
  }
  bits = ctaMax<Config::Threads>(bits, scratch);
  BlockScale s = blockScale<kPerGroup, Fmt>(bits, GlobalScale{1.0f, 1.0});

  uint32_t saturated = 0;
  if constexpr (!Config::Transpose) {
    // A staged vector's codes go to the same place in the output.
#pragma unroll 4
    for (int q = threadIdx.x; q < Config::kVecs; q += Config::Threads) {
      const int r = q / RowVecs, chunk = q % RowVecs;
      const int row = r0 + r, col = c0 + chunk * Elems;
      const Vec16 v = *reinterpret_cast<const Vec16 *>(block + 16 * q);
      float x[Elems];
#pragma unroll
      for (int e = 0; e < Elems; ++e)
        x[e] = vecElement<In>(v, e);
      uint32_t codes[2] = {0u, 0u};
      uint32_t words[Elems / 4];
      encodeValues<Fmt, false>(x, s, words, saturated,
                               row < args.rows ? args.cols - col : 0);
#pragma unroll
      for (int w = 0; w < Elems / 4; ++w)
        codes[w] = words[w];
      if (row >= args.rows || col >= args.cols)
        continue;
      uint8_t *dst = args.q + size_t(row) * args.cols + col;
      if (vectors && Elems == 8) {
        store8(dst, codes[0], codes[1]);
      } else if (vectors) {
        *reinterpret_cast<uint32_t *>(dst) = codes[0];
      } else {
#pragma unroll
        for (int e = 0; e < Elems; ++e)
          if (col + e < args.cols)
            dst[e] = uint8_t(codes[e / 4] >> (8 * (e % 4)));
      }
    }
  } else {
    // Output row c (an X column): 16 codes down the block's rows per step;
    // adjacent lanes take adjacent columns, so the staged reads are
    // contiguous.
    const bool storeVectors = args.rows % 16 == 0;
#pragma unroll 2
    for (int item = threadIdx.x; item < B * (B / 16); item += Config::Threads) {
      const int c = item % B, r = 16 * (item / B);
      const int outRow = c0 + c, outCol = r0 + r;
      float x[16];
#pragma unroll
      for (int j = 0; j < 16; ++j)
        x[j] = stagedElement<In, B>(block, r + j, c);
      uint32_t codes[4];
      encodeValues<Fmt, false>(x, s, codes, saturated,
                               outRow < args.cols ? args.rows - outCol : 0);
      if (outRow >= args.cols || outCol >= args.rows)
        continue;
      uint8_t *dst = args.q + size_t(outRow) * args.rows + outCol;
      if (storeVectors) {
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst),
                     "r"(codes[0]), "r"(codes[1]), "r"(codes[2]),
                     "r"(codes[3])
                     : "memory");
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j)
          if (outCol + j < args.rows)
            dst[j] = uint8_t(codes[j / 4] >> (8 * (j % 4)));
      }
    }
  }
  if (threadIdx.x == 0) {
    size_t blockIndex =
        Config::Transpose
            ? size_t(blockIdx.x) * (args.rows / B) + blockIdx.y
            : size_t(blockIdx.y) * (args.cols / B) + blockIdx.x;
    static_cast<float *>(args.local)[blockIndex] = s.divisor;
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, threadIdx.x == 0 && bits >= kInfBits);
}

} // namespace moss::quantize
