// moss/quantize/columnwise.cuh - transposed (column-wise) quantization with
// 1-D blocks: the output is the quantization of X^T, so its rows are X's
// columns and its blocks run down X's columns.
//
// A CTA of four warps owns a strip of 128 bytes of X columns (64 BF16 or 32
// FP32 columns) and walks down it one tile of 128 rows at a time: tiles
// blockIdx.y, blockIdx.y + gridDim.y, ... Each tile is staged in shared
// memory by every thread's 16-byte asynchronous copies, one tile ahead of
// the one being encoded, so the loads never wait on the arithmetic. Warp w
// then owns the tile's rows 32w .. 32w + 31, and each lane one 32-bit word
// of every such row: two BF16 columns or one FP32 column. Reading those
// words down the rows hits 32 consecutive banks, and each column's 32 rows
// become 32 code bytes of its output row. Those go to a shared output tile
// first, from where 8 threads write each output row's 128 codes: whole
// sectors (a lane's own 32 bytes, written as two 16-byte stores, would be
// half sectors in flight, doubling the L2 traffic). Blocks of 16
// and 32 rows are a lane's own; blocks of 64 and 128 rows combine the warps'
// maxima through shared memory. A lane's columns are the same in every tile,
// so their global scales are computed once per CTA.
//
// Global scales need the whole output row or tensor, so schemes with one
// take two passes (reduce, then quantize); the quantize pass walks the tiles
// backwards, to find the last ones the reduce pass read still in L2.
//
// Fold (two-level and MXFP8, docs/NUMERICS-CONTRACT.md section 8). The row
// fold's reference exponent is the code of its output row's largest finite
// block (codes grow with a block's amax), which the reduce pass leaves in
// Args::foldBits; the 128 fold's groups are the tiles' 128 rows, so its
// reference is the tile's. The codes move as the row-wise kernel's do, and
// the FP32 factors go to Args::global ([cols]) or Args::local ([cols,
// rows / 128]): moss::numerics::foldBlockScales of the transposed
// quantization, bit for bit.
//
// Dual layout (Config::Dual): each staged tile is also encoded along its
// rows (row_layout.cuh), so one read of X writes the row-major
// quantization to Args::row as well.
//
// Gather (Config::Gather): X's row r is row Args::gatherRows[r] of the
// input, or zeros for an index outside it: the tokens of a mixture-of-experts
// layer, each expert's padded to whole blocks, quantized K-major over the
// tokens for its k-grouped weight gradient without a padded copy.
#pragma once

#include "moss/ptx/async_copy.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/quantize/common.cuh"
#include "moss/quantize/fold.cuh"
#include "moss/quantize/row_layout.cuh"

namespace moss::quantize {

template <int In_, int Kind_, int Fmt_, int Block_, int Source_, int Fold_ = 0,
          bool Dual_ = false, bool Gather_ = false>
struct ColumnwiseConfig {
  static constexpr int In = In_, Kind = Kind_, Fmt = Fmt_, Block = Block_,
                       Source = Source_, Fold = Fold_;
  /// Whether the row-major layout is written too (Args::row).
  static constexpr bool Dual = Dual_;
  /// Whether X's rows are gathered (sourceRow).
  static constexpr bool Gather = Gather_;
  static_assert(!(Dual && Gather),
                "a gather writes the transposed layout only");
  static constexpr bool kBlocks =
      Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel;
  static constexpr int Threads = kColumnwiseThreads;
  static constexpr int kWarps = Threads / 32;
  /// Tile rows: 32 per warp.
  static constexpr int TileR = kColumnwiseTileRows;
  static_assert(TileR == 32 * kWarps, "32 tile rows per warp");
  /// X columns per lane (one 32-bit word), and per tile.
  static constexpr int kLaneCols = In == kInF32 ? 1 : 2;
  static constexpr int TileC = 32 * kLaneCols;
  static_assert(TileC * InputTraits<In>::kBytes == kColumnwiseTileBytes,
                "a lane's word per tile row");
  /// 16-byte vectors of one tile row.
  static constexpr int kRowVecs = 128 / 16;
  /// Tiles staged at once: the one encoded and the one arriving.
  static constexpr int kStages = 2;
  /// Bytes per row of the shared output tile: TileR codes and 16 bytes of
  /// padding, so that the 16-byte stores of 8 lanes to 8 rows hit all 32
  /// banks once.
  static constexpr int kOutRowBytes = TileR + 16;
  /// Rows of a lane's part of one block (16 or 32), and warps per block.
  static constexpr int kLaneBlockRows = kBlocks && Block < 32 ? Block : 32;
  static constexpr int kWarpsPerBlock = kBlocks && Block > 32 ? Block / 32 : 1;
  static_assert(!kBlocks || (Block >= 16 && Block <= TileR &&
                             (Block & (Block - 1)) == 0),
                "blocks of 16 to 128 rows");
  /// Whether the global scale is per output row (else per tensor).
  static constexpr bool kGlobalPerRow = Kind == kPerRow;
  static_assert(Fold == kFoldNone || Kind == kMXFP8 || Kind == kTwoLevel,
                "only E8M0 block factors fold");
  static_assert(TileR == kFoldGroupCols, "a tile is one 128 fold group");
  static_assert(!Dual || Fold != kFold128,
                "a row-major 128 fold group spans several column strips");
};

/// The row of the input at args.x that X's row `row` reads, or -1 for a
/// row of zeros: rows past X's; with a gather (Args::gatherRows), every
/// index outside [0, gatherSourceRows), -1 for the padding of an expert's
/// tokens to a whole block.
template <bool Gather>
__device__ __forceinline__ int sourceRow(const Args &args, int row) {
  if (row >= args.rows)
    return -1;
  if constexpr (Gather) {
    const int source = __ldg(args.gatherRows + row);
    return source >= 0 && source < args.gatherSourceRows ? source : -1;
  }
  return row;
}

/// The 16 bytes of X at (row, col .. col + 16 / bytes - 1), zero outside X,
/// loaded element by element: for X whose rows are not whole 16-byte vectors.
template <int In, bool Gather>
__device__ __forceinline__ Vec16 loadTileElements(const Args &args, int row,
                                                  int col) {
  constexpr int kBytes = InputTraits<In>::kBytes, kElems = 16 / kBytes;
  Vec16 v{{0u, 0u, 0u, 0u}};
  row = sourceRow<Gather>(args, row);
  if (row < 0)
    return v;
  const char *base = static_cast<const char *>(args.x) +
                     (size_t(row) * args.cols + col) * kBytes;
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

/// Stages the tile of `Rows` x `RowBytes` of X at (r0, c0) into shared
/// memory at `tile` (row-major), zeros outside X. `vectors`: whether X's
/// rows are whole 16-byte vectors (cols a multiple of 16 / bytes); then
/// every thread's copies are asynchronous and complete with its next commit
/// group, else they are plain loads, done when this returns. `Gather`:
/// X's rows are read through Args::gatherRows (sourceRow).
template <int In, int Rows, int RowBytes, int Threads, bool Gather = false>
__device__ __forceinline__ void stageTile(const Args &args, int r0, int c0,
                                          unsigned char *tile, bool vectors) {
  constexpr int kElems = 16 / InputTraits<In>::kBytes;
  constexpr int kRowVecs = RowBytes / 16;
  constexpr int kVecs = Rows * kRowVecs;
  if (vectors) {
#pragma unroll
    for (int i = 0; i < (kVecs + Threads - 1) / Threads; ++i) {
      const int q = threadIdx.x + i * Threads;
      if (kVecs % Threads != 0 && q >= kVecs)
        break;
      const int row = sourceRow<Gather>(args, r0 + q / kRowVecs);
      const int col = c0 + q % kRowVecs * kElems;
      const bool inside = row >= 0 && col < args.cols;
      const char *src =
          inside ? static_cast<const char *>(args.x) +
                       (size_t(row) * args.cols + col) *
                           InputTraits<In>::kBytes
                 : static_cast<const char *>(args.x);
      ptx::copyAsync16(ptx::smemAddress(tile + 16 * q), src, inside);
    }
    return;
  }
  for (int q = threadIdx.x; q < kVecs; q += Threads)
    *reinterpret_cast<Vec16 *>(tile + 16 * q) = loadTileElements<In, Gather>(
        args, r0 + q / kRowVecs, c0 + q % kRowVecs * kElems);
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
  constexpr int Stages = Config::kStages, Fold = Config::Fold;
  __shared__ __align__(16) uint32_t tiles[Stages][TileR][32];
  // A warp's column maxima, for blocks across warps and the reduce pass,
  // and its largest block codes per column, for the 128 fold.
  __shared__ uint32_t warpMax[Warps][TileC];
  __shared__ uint32_t warpCodes[Fold == kFold128 ? Warps : 1][TileC];
  __shared__ uint32_t scratch[Config::Threads / 32];
  __shared__ __align__(16) uint8_t outTile[TileC][Config::kOutRowBytes];
  // The row-major layout's scales of the tile's rows (dual layout only).
  __shared__ RowScales<Config::Dual ? TileR : 1> rowScales;
  globalPerRow = globalPerRow || Config::kGlobalPerRow;

  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int c0 = blockIdx.x * TileC;
  const int rowTiles = (args.rows + TileR - 1) / TileR;
  const int myTiles =
      int(blockIdx.y) < rowTiles
          ? (rowTiles - 1 - int(blockIdx.y)) / int(gridDim.y) + 1
          : 0;
  const bool reversed =
      pass == kQuantizePass && (Config::Source == kGlobalFromBits ||
                                Fold == kFoldRow);
  auto tileRow = [&](int j) {
    return (int(blockIdx.y) + (reversed ? myTiles - 1 - j : j) *
                                  int(gridDim.y)) *
           TileR;
  };
  const bool vectors = args.cols % (16 / InputTraits<In>::kBytes) == 0;
  auto stage = [&](int j) {
    if (j < myTiles)
      stageTile<In, TileR, 128, Config::Threads, Config::Gather>(
          args, tileRow(j), c0,
          reinterpret_cast<unsigned char *>(&tiles[j % Stages][0][0]), vectors);
    // (Always a group, so that waiting for all but the newest is uniform.)
    ptx::copyAsyncCommit();
  };
#pragma unroll
  for (int j = 0; j < Stages - 1; ++j)
    stage(j);

  // The lane's output rows (X columns), their global scales and row fold
  // references, the same in every tile.
  float global[LaneCols];
  GlobalScale g[LaneCols];
  int rowReference[LaneCols];
#pragma unroll
  for (int c = 0; c < LaneCols; ++c) {
    const int outRow = min(c0 + LaneCols * lane + c, args.cols - 1);
    global[c] = 1.0f;
    if (pass == kQuantizePass) {
      if constexpr (Config::Source == kGlobalFromBits)
        global[c] = globalFromBits<Kind, Fmt>(
            args.globalBits[globalPerRow ? outRow : 0]);
      else if constexpr (Config::Source == kGlobalFromScale)
        global[c] = *args.scaleIn;
    }
    g[c] = makeGlobal(global[c]);
    rowReference[c] = 0;
    if constexpr (Fold == kFoldRow)
      if (pass == kQuantizePass)
        rowReference[c] =
            int(blockScale<Kind, Fmt>(args.foldBits[outRow], g[c]).e8m0) -
            127;
  }

  uint32_t saturated = 0, nonFinite = 0;
  uint32_t reduced[LaneCols] = {}; // reduce pass: each column's maximum

  // The row-major layout's counts, tensor maximum (reduce pass) and tensor
  // global scale (quantize pass).
  uint32_t rowSaturated = 0, rowNonFinite = 0, rowTensorBits = 0;
  float rowTensorGlobal = 1.0f;
  if (Config::Dual && pass == kQuantizePass && !globalPerRow) {
    if constexpr (Config::Source == kGlobalFromBits)
      rowTensorGlobal = globalFromBits<Kind, Fmt>(*args.row.globalBits);
    else if constexpr (Config::Source == kGlobalFromScale)
      rowTensorGlobal = *args.scaleIn;
  }
  const GlobalScale rowTensorScale = makeGlobal(rowTensorGlobal);
  const bool rowScalesPerRow = globalPerRow || Fold == kFoldRow;
  for (int j = 0; j < myTiles; ++j) {
    // Tile j has landed for this thread, and every thread is done with
    // tile j - 1, whose stage now takes tile j + Stages - 1.
    ptx::copyAsyncWait<Stages - 2>();
    __syncthreads();
    stage(j + Stages - 1);
    const int r0 = tileRow(j);
    const uint32_t *words = &tiles[j % Stages][32 * warp][lane];

    // Maxima of each column over each of the lane's blocks (a BF16 word's
    // two columns at once, as 16-bit magnitudes).
    uint32_t bits[LaneCols][LaneBlocks] = {};
#pragma unroll
    for (int h = 0; h < LaneBlocks; ++h) {
      uint32_t m = 0;
#pragma unroll
      for (int r = h * LaneBlockRows; r < (h + 1) * LaneBlockRows; ++r)
        m = wordMagnitudeMax<In>(m, words[32 * r]);
      if constexpr (In == kInBF16) {
        bits[0][h] = m << 16;
        bits[LaneCols - 1][h] = m & 0xFFFF0000u;
      } else {
        bits[0][h] = m;
      }
    }
    // Blocks of 64 and 128 rows combine the warps' maxima (a lane then
    // holds one part of one block per column).
    if constexpr (Config::kWarpsPerBlock > 1) {
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
      if constexpr (Config::Dual)
        reduceRowLayout<In, Kind, Config::Block, Config::Threads, TileR>(
            args, tiles[j % Stages], r0, globalPerRow, Fold == kFoldRow,
            rowTensorBits);
        // Each whole block's contribution; rows and columns past X's end
        // staged zeros and contribute nothing.
#pragma unroll
      for (int c = 0; c < LaneCols; ++c)
#pragma unroll
        for (int h = 0; h < LaneBlocks; ++h) {
          uint32_t b = globalContribution<Kind>(bits[c][h]);
          reduced[c] = b > reduced[c] ? b : reduced[c];
        }
      continue;
    }

    // The 128 fold's references: the largest code of the tile's blocks
    // per column, over the blocks that are not NaN.
    int groupReference[LaneCols];
    if constexpr (Fold == kFold128) {
#pragma unroll
      for (int c = 0; c < LaneCols; ++c) {
        uint32_t m = 0;
#pragma unroll
        for (int h = 0; h < LaneBlocks; ++h) {
          uint32_t code = blockScale<Kind, Fmt>(bits[c][h], g[c]).e8m0;
          code = code == 0xFFu ? 0u : code;
          m = code > m ? code : m;
        }
        warpCodes[warp][LaneCols * lane + c] = m;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < LaneCols; ++c) {
        uint32_t m = 0;
#pragma unroll
        for (int w = 0; w < Warps; ++w)
          m = warpCodes[w][LaneCols * lane + c] > m
                  ? warpCodes[w][LaneCols * lane + c]
                  : m;
        groupReference[c] = int(m) - 127;
      }
    }

    // The row-major layout's per-row scales, read after the barrier that
    // precedes the output tile's stores.
    if constexpr (Config::Dual)
      if (rowScalesPerRow)
        stageRowScales<Kind, Fmt, Config::Source, Fold, TileR>(
            args, r0, globalPerRow, rowTensorScale, rowScales);

    const int rowBase = r0 + 32 * warp;
    // (Not unrolled: one column's encoding is code enough for NVRTC.)
#pragma unroll 1
    for (int c = 0; c < LaneCols; ++c) {
      const int outRow = c0 + LaneCols * lane + c;
      if (outRow >= args.cols)
        continue;
      // (c is not unrolled: select, so that the arrays stay in registers.)
      const bool first = c == 0;
      const GlobalScale gc = first ? g[0] : g[LaneCols - 1];
      int reference = first ? rowReference[0] : rowReference[LaneCols - 1];
      if constexpr (Fold == kFold128) {
        reference = first ? groupReference[0] : groupReference[LaneCols - 1];
        if (warp == 0)
          static_cast<float *>(args.local)[size_t(outRow) *
                                               (args.rows / kFoldGroupCols) +
                                           r0 / kFoldGroupCols] =
              mulRn(first ? global[0] : global[LaneCols - 1],
                    exp2i(reference));
      }
      uint32_t codes[8];
#pragma unroll
      for (int h = 0; h < LaneBlocks; ++h) {
        const uint32_t blockBits = first ? bits[0][h] : bits[LaneCols - 1][h];
        const BlockScale s = blockScale<Kind, Fmt>(blockBits, gc);
#pragma unroll
        for (int r = h * LaneBlockRows; r < (h + 1) * LaneBlockRows; r += 8) {
          // Rows past the end were staged as 0 and are not written.
          float x[8];
#pragma unroll
          for (int k = 0; k < 8; ++k)
            x[k] = wordElement<In>(words[32 * (r + k)], c);
          uint32_t pair[2];
          encodeValues<Fmt, Kind == kTwoLevel,
                       Config::Source == kGlobalFromScale>(
              x, s, pair, saturated, args.rows - (rowBase + r));
          codes[r / 4] = pair[0];
          codes[r / 4 + 1] = pair[1];
        }
        if constexpr (Fold != kFoldNone) {
          foldBlockWords<Fmt, LaneBlockRows / 4>(codes + h * LaneBlockRows / 4,
                                                 reference, s.e8m0);
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
            else if constexpr (Fold == kFoldNone)
              static_cast<uint8_t *>(args.local)[blockIndex] = uint8_t(s.e8m0);
            nonFinite += blockBits >= kInfBits;
          }
        }
      }
      // Row c * 32 + lane of the output tile: adjacent lanes, adjacent rows.
      const uint32_t out = ptx::smemAddress(&outTile[32 * c + lane][32 * warp]);
      ptx::storeShared128(out, {codes[0], codes[1], codes[2], codes[3]});
      ptx::storeShared128(out + 16, {codes[4], codes[5], codes[6], codes[7]});
    }

    // The tile's output rows, 16 codes per thread and step; rows past X's
    // end (staged as zeros) are not written.
    __syncthreads();
    constexpr int kChunks = TileR / 16;
    const bool storeVectors = args.rows % 16 == 0; // 16-byte aligned rows
#pragma unroll
    for (int i = 0; i < TileC * kChunks / Config::Threads; ++i) {
      const int q = threadIdx.x + i * Config::Threads;
      const int tileRow = q / kChunks, col = r0 + 16 * (q % kChunks);
      const int outRow = c0 + LaneCols * (tileRow % 32) + tileRow / 32;
      if (outRow >= args.cols || col >= args.rows)
        continue;
      const Vec16 v = *reinterpret_cast<const Vec16 *>(
          &outTile[tileRow][16 * (q % kChunks)]);
      uint8_t *dst = args.q + size_t(outRow) * args.rows + col;
      if (storeVectors) {
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst),
                     "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                     : "memory");
      } else {
#pragma unroll
        for (int k = 0; k < 16; ++k)
          if (col + k < args.rows)
            dst[k] = uint8_t(v.w[k / 4] >> (8 * (k % 4)));
      }
    }
    if constexpr (Config::Dual)
      quantizeRowLayout<In, Kind, Fmt, Config::Block, Config::Source, Fold,
                        Config::Threads, TileR>(
          args, tiles[j % Stages], r0, c0, globalPerRow, rowScalesPerRow,
          rowTensorScale, rowScales, rowSaturated, rowNonFinite);
  }

  if (pass == kReducePass) {
    // The column maxima over the warps: per output row (a global per row,
    // the row fold's references), and over the CTA (a per-tensor global).
    __syncthreads(); // warpMax may still be read for the last tile
#pragma unroll
    for (int c = 0; c < LaneCols; ++c)
      warpMax[warp][LaneCols * lane + c] = reduced[c];
    __syncthreads();
    if (globalPerRow || Fold == kFoldRow) {
      uint32_t *columnBits = globalPerRow ? args.globalBits : args.foldBits;
      for (int col = threadIdx.x; col < TileC; col += Config::Threads) {
        uint32_t m = 0;
#pragma unroll
        for (int w = 0; w < Warps; ++w)
          m = warpMax[w][col] > m ? warpMax[w][col] : m;
        if (m != 0 && c0 + col < args.cols)
          atomicMax(columnBits + c0 + col, m);
      }
    }
    if (!globalPerRow && Config::Source == kGlobalFromBits) {
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
    if constexpr (Config::Dual) {
      if (!globalPerRow && Config::Source == kGlobalFromBits) {
        const uint32_t m = ctaMax<Config::Threads>(rowTensorBits, scratch);
        if (threadIdx.x == 0 && m != 0)
          atomicMax(args.row.globalBits, m);
      }
    }
    return;
  }

  // The scales of whole output rows: written, and non-finite rows counted,
  // by the first CTA of each strip.
  if (blockIdx.y == 0 && warp == 0) {
#pragma unroll
    for (int c = 0; c < LaneCols; ++c) {
      const int outRow = c0 + LaneCols * lane + c;
      if (outRow >= args.cols)
        continue;
      if constexpr (Fold == kFoldRow) {
        args.global[outRow] = mulRn(global[c], exp2i(rowReference[c]));
      } else if (Fold == kFoldNone && Kind != kPerTensor && globalPerRow &&
                 Config::Source != kNoGlobal) {
        args.global[outRow] = global[c];
        if (Kind == kPerRow)
          nonFinite += args.globalBits[outRow] >= kInfBits;
      }
    }
  }
  if (!globalPerRow && Config::Source != kNoGlobal && blockIdx.x == 0 &&
      blockIdx.y == 0 && threadIdx.x == 0) {
    if (args.global && Fold == kFoldNone)
      args.global[0] = global[0];
    if (Kind == kPerTensor && Config::Source == kGlobalFromBits)
      nonFinite += *args.globalBits >= kInfBits;
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, nonFinite);
  if constexpr (Config::Dual) {
    if (!globalPerRow && Config::Source != kNoGlobal && blockIdx.x == 0 &&
        blockIdx.y == 0 && threadIdx.x == 0) {
      if (args.row.global && Fold == kFoldNone)
        args.row.global[0] = rowTensorGlobal;
      if (Kind == kPerTensor && Config::Source == kGlobalFromBits)
        rowNonFinite += *args.row.globalBits >= kInfBits;
    }
    addCount(args.row.saturated, rowSaturated);
    addCount(args.row.nonFinite, rowNonFinite);
  }
}

} // namespace moss::quantize
