// moss/quantize/columnwise.cuh - transposed (column-wise) quantization with
// 1-D blocks: the output is the quantization of X^T, so its rows are X's
// columns and its blocks run down X's columns.
//
// A CTA of four warps stages a tile of 128 X rows by 128 bytes of X columns
// (64 BF16 or 32 FP32 columns) in shared memory with 16-byte loads. Warp w
// then owns the tile's rows 32w .. 32w + 31, and each lane one 32-bit word
// of every such row: two BF16 columns or one FP32 column. Reading those
// words down the rows hits 32 consecutive banks, and each column's 32 rows
// become 32 code bytes of its output row: two 16-byte stores. Blocks of 16
// and 32 rows are a lane's own; blocks of 64 and 128 rows combine the warps'
// maxima through shared memory. Global scales need the whole output row or
// tensor, so schemes with one take two passes (reduce, then quantize).
#pragma once

#include "moss/quantize/common.cuh"

namespace moss::quantize {

template <int In_, int Kind_, int Fmt_, int Block_, int Source_>
struct ColumnwiseConfig {
  static constexpr int In = In_, Kind = Kind_, Fmt = Fmt_, Block = Block_,
                       Source = Source_;
  static constexpr bool kBlocks =
      Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel;
  static constexpr int Threads = 128;
  static constexpr int kWarps = Threads / 32;
  /// Tile rows: 32 per warp.
  static constexpr int TileR = 32 * kWarps;
  /// X columns per lane (one 32-bit word), and per tile.
  static constexpr int kLaneCols = In == kInF32 ? 1 : 2;
  static constexpr int TileC = 32 * kLaneCols;
  /// 16-byte vectors of one tile row.
  static constexpr int kRowVecs = 128 / 16;
  /// Rows of a lane's part of one block (16 or 32), and warps per block.
  static constexpr int kLaneBlockRows = kBlocks && Block < 32 ? Block : 32;
  static constexpr int kWarpsPerBlock = kBlocks && Block > 32 ? Block / 32 : 1;
  static_assert(!kBlocks || (Block >= 16 && Block <= TileR &&
                             (Block & (Block - 1)) == 0),
                "blocks of 16 to 128 rows");
  /// Whether the global scale is per output row (else per tensor).
  static constexpr bool kGlobalPerRow = Kind == kPerRow;
};

/// The 16 bytes of X at (row, col .. col + 16 / bytes - 1), zero outside X.
/// `vectors`: whether X's rows are whole 16-byte vectors (cols a multiple of
/// 16 / bytes), so that one aligned load reads them.
template <int In>
__device__ __forceinline__ Vec16 loadTileVector(const Args &args, int row,
                                                int col, bool vectors) {
  constexpr int kBytes = InputTraits<In>::kBytes, kElems = 16 / kBytes;
  Vec16 v{{0u, 0u, 0u, 0u}};
  if (row >= args.rows || col >= args.cols)
    return v;
  const char *base = static_cast<const char *>(args.x) +
                     (size_t(row) * args.cols + col) * kBytes;
  if (vectors) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(base));
    return v;
  }
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    if (col + e >= args.cols)
      break;
    uint32_t bits;
    if constexpr (kBytes == 4) {
      asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(bits) : "l"(base + 4 * e));
      v.w[e] = bits;
    } else {
      unsigned short h;
      asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(base + 2 * e));
      v.w[e / 2] |= uint32_t(h) << (16 * (e & 1));
    }
  }
  return v;
}

/// X element `c` (0 or 1) of a lane's tile word, as FP32.
template <int In>
__device__ __forceinline__ float wordElement(uint32_t word, int c) {
  if constexpr (In == kInF32)
    return bitsFloat(word);
  else
    return bitsFloat(c ? (word & 0xFFFF0000u) : (word << 16));
}

/// `globalPerRow` is a runtime flag for two-level (global = row); per-row
/// always has one per output row.
template <class Config>
__device__ void columnwise(const Args &args, int pass, bool globalPerRow) {
  constexpr int In = Config::In, Kind = Config::Kind, Fmt = Config::Fmt;
  constexpr int TileR = Config::TileR, TileC = Config::TileC;
  constexpr int LaneCols = Config::kLaneCols, Warps = Config::kWarps;
  constexpr int LaneBlockRows = Config::kLaneBlockRows;
  constexpr int LaneBlocks = 32 / LaneBlockRows;
  __shared__ __align__(16) uint32_t tile[TileR][32];
  // A warp's column maxima, for blocks across warps and the reduce pass.
  __shared__ uint32_t warpMax[Warps][TileC];
  __shared__ uint32_t scratch[Config::Threads / 32];
  globalPerRow = globalPerRow || Config::kGlobalPerRow;

  const int r0 = blockIdx.y * TileR, c0 = blockIdx.x * TileC;
  const bool vectors = args.cols % (16 / InputTraits<In>::kBytes) == 0;
#pragma unroll
  for (int i = 0; i < TileR * Config::kRowVecs / Config::Threads; ++i) {
    const int q = threadIdx.x + i * Config::Threads;
    const int r = q / Config::kRowVecs, chunk = q % Config::kRowVecs;
    Vec16 v = loadTileVector<In>(
        args, r0 + r, c0 + chunk * (16 / InputTraits<In>::kBytes), vectors);
    *reinterpret_cast<Vec16 *>(&tile[r][4 * chunk]) = v;
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const uint32_t *words = &tile[32 * warp][lane];
  // Maxima of each column over each of the lane's blocks.
  uint32_t bits[LaneCols][LaneBlocks] = {};
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const uint32_t w = words[32 * j];
#pragma unroll
    for (int c = 0; c < LaneCols; ++c) {
      uint32_t b = absBits(wordElement<In>(w, c));
      uint32_t &m = bits[c][j / LaneBlockRows];
      m = b > m ? b : m;
    }
  }
  // Blocks of 64 and 128 rows combine the warps' maxima (a lane then holds
  // one part of one block per column).
  constexpr bool kAcrossWarps = Config::kWarpsPerBlock > 1;
  if constexpr (kAcrossWarps) {
#pragma unroll
    for (int c = 0; c < LaneCols; ++c)
      warpMax[warp][LaneCols * lane + c] = bits[c][0];
    __syncthreads();
    const int first = warp / Config::kWarpsPerBlock * Config::kWarpsPerBlock;
#pragma unroll
    for (int c = 0; c < LaneCols; ++c) {
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < Config::kWarpsPerBlock; ++w)
        m = warpMax[first + w][LaneCols * lane + c] > m
                ? warpMax[first + w][LaneCols * lane + c]
                : m;
      bits[c][0] = m;
    }
  }

  if (pass == kReducePass) {
    // Each whole block's contribution (two-level skips non-finite blocks),
    // then the column maxima over the warps. Columns past X's end staged
    // zeros and contribute nothing.
    if constexpr (kAcrossWarps)
      __syncthreads(); // warpMax is read above
#pragma unroll
    for (int c = 0; c < LaneCols; ++c) {
      uint32_t m = 0;
#pragma unroll
      for (int h = 0; h < LaneBlocks; ++h) {
        uint32_t b = globalContribution<Kind>(bits[c][h]);
        m = b > m ? b : m;
      }
      warpMax[warp][LaneCols * lane + c] = m;
    }
    __syncthreads();
    if (globalPerRow) {
      for (int col = threadIdx.x; col < TileC; col += Config::Threads) {
        uint32_t m = 0;
#pragma unroll
        for (int w = 0; w < Warps; ++w)
          m = warpMax[w][col] > m ? warpMax[w][col] : m;
        if (m != 0)
          atomicMax(args.globalBits + c0 + col, m);
      }
    } else {
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < Warps; ++w)
        for (int c = 0; c < LaneCols; ++c) {
          uint32_t b = warpMax[w][LaneCols * lane + c];
          m = b > m ? b : m;
        }
      m = ctaMax<Config::Threads>(m, scratch);
      if (threadIdx.x == 0 && m != 0)
        atomicMax(args.globalBits, m);
    }
    return;
  }

  uint32_t saturated = 0, nonFinite = 0;
  const int rowBase = r0 + 32 * warp;
  // Whole 16-byte stores: the output rows are 16-byte multiples.
  const bool storeVectors = args.rows % 16 == 0 && rowBase + 32 <= args.rows;
  // (Not unrolled: one column's encoding is code enough for NVRTC.)
#pragma unroll 1
  for (int c = 0; c < LaneCols; ++c) {
    const int outRow = c0 + LaneCols * lane + c;
    if (outRow >= args.cols)
      continue;
    float global = 1.0f;
    if constexpr (Config::Source == kGlobalFromBits)
      global = globalFromBits<Kind, Fmt>(
          args.globalBits[globalPerRow ? outRow : 0]);
    else if constexpr (Config::Source == kGlobalFromScale)
      global = *args.scaleIn;
    const GlobalScale g = makeGlobal(global);
    uint8_t *dst = args.q + size_t(outRow) * args.rows + rowBase;
    uint32_t codes[8];
#pragma unroll
    for (int h = 0; h < LaneBlocks; ++h) {
      // (c is not unrolled: select, so that bits stays in registers.)
      const uint32_t blockBits = c == 0 ? bits[0][h] : bits[LaneCols - 1][h];
      const BlockScale s = blockScale<Kind, Fmt>(blockBits, g);
#pragma unroll
      for (int j = h * LaneBlockRows; j < (h + 1) * LaneBlockRows; j += 8) {
        // Rows past the end were staged as 0 and are not written.
        float x[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
          x[k] = wordElement<In>(words[32 * (j + k)], c);
        uint32_t pair[2];
        encodeValues<Fmt, Kind == kTwoLevel>(x, s, pair, saturated,
                                             args.rows - (rowBase + j));
        codes[j / 4] = pair[0];
        codes[j / 4 + 1] = pair[1];
      }
      if constexpr (Config::kBlocks) {
        // The block's first lane part writes its scale and counts it.
        const int blockRow = rowBase + h * LaneBlockRows;
        if (blockRow % Config::Block == 0 && blockRow < args.rows) {
          const size_t blockIndex =
              size_t(outRow) * (args.rows / Config::Block) +
              blockRow / Config::Block;
          if constexpr (Kind == kPerGroup)
            static_cast<float *>(args.local)[blockIndex] = s.divisor;
          else
            static_cast<uint8_t *>(args.local)[blockIndex] = uint8_t(s.e8m0);
          nonFinite += blockBits >= kInfBits;
        }
      }
    }
    if (storeVectors) {
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst),
                   "r"(codes[0]), "r"(codes[1]), "r"(codes[2]), "r"(codes[3])
                   : "memory");
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst + 16),
                   "r"(codes[4]), "r"(codes[5]), "r"(codes[6]), "r"(codes[7])
                   : "memory");
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j)
        if (rowBase + j < args.rows)
          dst[j] = uint8_t(codes[j / 4] >> (8 * (j % 4)));
    }
    // Per-row (per output row) globals are written, and non-finite rows
    // counted, by the first row tile.
    if (Kind != kPerTensor && globalPerRow && blockIdx.y == 0 && warp == 0 &&
        Config::Source != kNoGlobal) {
      args.global[outRow] = global;
      if (Kind == kPerRow)
        nonFinite += args.globalBits[outRow] >= kInfBits;
    }
  }
  if (!globalPerRow && Config::Source != kNoGlobal && blockIdx.x == 0 &&
      blockIdx.y == 0 && threadIdx.x == 0) {
    const float global = Config::Source == kGlobalFromBits
                             ? globalFromBits<Kind, Fmt>(*args.globalBits)
                             : *args.scaleIn;
    if (args.global)
      args.global[0] = global;
    if (Kind == kPerTensor && Config::Source == kGlobalFromBits)
      nonFinite += *args.globalBits >= kInfBits;
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, nonFinite);
}

} // namespace moss::quantize
