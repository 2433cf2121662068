// moss/quantize/columnwise.cuh - transposed (column-wise) quantization with
// 1-D blocks: the output is the quantization of X^T, so its rows are X's
// columns and its blocks run down X's columns.
//
// A CTA stages a [TileR, TileC] tile of X in shared memory with coalesced
// loads; then each output row (an X column) of the tile is handled by
// kSub adjacent lanes, which reduce the block amax with shuffles and write
// contiguous code bytes. Global scales need the whole output row or tensor,
// so schemes with one take two passes (reduce, then quantize).
#pragma once

#include "moss/quantize/common.cuh"

namespace moss::quantize {

template <int In_, int Kind_, int Fmt_, int Block_, int Source_>
struct ColumnwiseConfig {
  static constexpr int In = In_, Kind = Kind_, Fmt = Fmt_, Block = Block_,
                       Source = Source_;
  static constexpr bool kBlocks =
      Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel;
  /// Tile rows: one block of the output, or 32 rows of a larger group.
  static constexpr int TileR = kBlocks ? Block : 32;
  static constexpr int TileC = 64;
  static constexpr int Threads = 256;
  /// Lanes per output row of the tile.
  static constexpr int kSub = Threads / TileC;
  static constexpr int kRowsPerSub = TileR / kSub;
  static_assert(TileR % kSub == 0 && kRowsPerSub % 4 == 0,
                "each lane encodes whole words");
  /// Whether the global scale is per output row (else per tensor).
  static constexpr bool kGlobalPerRow = Kind == kPerRow;
};

/// Element i of X as FP32, or 0 outside it.
template <int In>
__device__ __forceinline__ float loadElement(const void *x, size_t i) {
  if constexpr (In == kInF32) {
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];"
                 : "=f"(v)
                 : "l"(static_cast<const float *>(x) + i));
    return v;
  } else {
    unsigned short h;
    asm volatile("ld.global.nc.u16 %0, [%1];"
                 : "=h"(h)
                 : "l"(static_cast<const uint16_t *>(x) + i));
    return bitsFloat(uint32_t(h) << 16);
  }
}

/// `globalPerRow` is a runtime flag for two-level (global = row); per-row
/// always has one per output row.
template <class Config>
__device__ void columnwise(const Args &args, int pass, bool globalPerRow) {
  constexpr int In = Config::In, Kind = Config::Kind, Fmt = Config::Fmt;
  constexpr int TileR = Config::TileR, TileC = Config::TileC;
  constexpr int Sub = Config::kSub, RowsPerSub = Config::kRowsPerSub;
  __shared__ float tile[TileR][TileC + 1]; // +1: column reads hit all banks
  __shared__ uint32_t scratch[Config::Threads / 32];
  globalPerRow = globalPerRow || Config::kGlobalPerRow;

  const int r0 = blockIdx.y * TileR, c0 = blockIdx.x * TileC;
  for (int idx = threadIdx.x; idx < TileR * TileC; idx += Config::Threads) {
    int r = idx / TileC, c = idx % TileC;
    bool inside = r0 + r < args.rows && c0 + c < args.cols;
    tile[r][c] = inside ? loadElement<In>(args.x, size_t(r0 + r) * args.cols +
                                                      (c0 + c))
                        : 0.0f;
  }
  __syncthreads();

  const int col = threadIdx.x / Sub, sub = threadIdx.x % Sub;
  const int outRow = c0 + col;
  const bool active = outRow < args.cols;
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < RowsPerSub; ++j) {
    uint32_t b = absBits(tile[sub * RowsPerSub + j][col]);
    bits = b > bits ? b : bits;
  }
  bits = groupMax<Sub>(bits);

  if (pass == kReducePass) {
    uint32_t c = active ? globalContribution<Kind>(bits) : 0u;
    if (globalPerRow) {
      if (active && sub == 0 && c != 0)
        atomicMax(args.globalBits + outRow, c);
    } else {
      c = ctaMax<Config::Threads>(c, scratch);
      if (threadIdx.x == 0 && c != 0)
        atomicMax(args.globalBits, c);
    }
    return;
  }

  float global = 1.0f;
  if constexpr (Config::Source == kGlobalFromBits)
    global = globalFromBits<Kind, Fmt>(
        args.globalBits[globalPerRow && active ? outRow : 0]);
  else if constexpr (Config::Source == kGlobalFromScale)
    global = *args.scaleIn;

  uint32_t saturated = 0, nonFinite = 0;
  if (active) {
    BlockScale s = blockScale<Kind, Fmt>(bits, makeGlobal(global));
    uint8_t *dst = args.q + size_t(outRow) * args.rows;
    const int rowBase = r0 + sub * RowsPerSub;
#pragma unroll
    for (int j = 0; j < RowsPerSub; j += 4) {
      uint32_t word = 0;
#pragma unroll
      for (int k = 0; k < 4; k += 2) {
        // Rows past the end were staged as 0 and are not written.
        int row = rowBase + j + k;
        word |= encodePair<Fmt, Kind == kTwoLevel>(
                    tile[sub * RowsPerSub + j + k][col],
                    tile[sub * RowsPerSub + j + k + 1][col], s, saturated,
                    row < args.rows, row + 1 < args.rows)
                << (8 * k);
      }
      int row = rowBase + j;
      if (row + 4 <= args.rows && (args.rows & 3) == 0) {
        *reinterpret_cast<uint32_t *>(dst + row) = word;
      } else {
        for (int k = 0; k < 4 && row + k < args.rows; ++k)
          dst[row + k] = uint8_t(word >> (8 * k));
      }
    }
    if (sub == 0) {
      if constexpr (Config::kBlocks) {
        size_t blockIndex = size_t(outRow) * (args.rows / Config::Block) +
                            r0 / Config::Block;
        if constexpr (Kind == kPerGroup)
          static_cast<float *>(args.local)[blockIndex] = s.divisor;
        else
          static_cast<uint8_t *>(args.local)[blockIndex] = uint8_t(s.e8m0);
        nonFinite += bits >= kInfBits;
      }
      // Per-row (per output row) globals are written, and non-finite rows
      // counted, by the first row tile.
      if (Kind != kPerTensor && globalPerRow && blockIdx.y == 0 &&
          Config::Source != kNoGlobal) {
        args.global[outRow] = global;
        if (Kind == kPerRow)
          nonFinite += args.globalBits[outRow] >= kInfBits;
      }
    }
  }
  if (!globalPerRow && Config::Source != kNoGlobal && blockIdx.x == 0 &&
      blockIdx.y == 0 && threadIdx.x == 0) {
    if (args.global)
      args.global[0] = global;
    if (Kind == kPerTensor && Config::Source == kGlobalFromBits)
      nonFinite += *args.globalBits >= kInfBits;
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, nonFinite);
}

} // namespace moss::quantize
