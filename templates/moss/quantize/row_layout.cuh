// moss/quantize/row_layout.cuh - the row-major half of the dual-layout
// quantize: the transposed kernel (columnwise.cuh) also encodes each staged
// tile along its rows, so one read of X gives both layouts.
//
// A tile row is 128 bytes of X: 8 16-byte vectors, one per lane of 8
// adjacent lanes, so a warp reads 4 whole rows from shared memory without a
// bank conflict and a block of 32 values is 4 (BF16) or 8 (FP32) lanes,
// reduced with shuffles as in the row-wise kernel. A block must lie within
// a tile row: at most 64 BF16 or 32 FP32 values (the host checks).
//
// Scales that span a whole row (a per-row global, a row fold's reference)
// or the tensor come from the reduce pass, which leaves them in
// Args::row.globalBits and Args::row.foldBits; a two-level tensor global
// counts only the finite blocks of this layout, which differ from the
// transposed layout's where X holds NaN or Inf. The codes equal
// moss::numerics::quantize of X, bit for bit.
#pragma once

#include "moss/ptx/shared.cuh"
#include "moss/quantize/common.cuh"
#include "moss/quantize/fold.cuh"

namespace moss::quantize {

template <int In, int Kind, int Block, int Threads, int TileR>
struct RowLayoutShape {
  static constexpr int kVecElems = kVecElements<In>;
  /// Lanes per tile row (128 bytes), and per block.
  static constexpr int kRowLanes = 128 / 16;
  static constexpr bool kBlocks =
      Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel;
  static constexpr int kBlockLanes = kBlocks ? Block / kVecElems : 1;
  static_assert(!kBlocks || (kBlockLanes >= 1 && kBlockLanes <= kRowLanes),
                "a block lies within one tile row");
  /// Each thread's vectors of one tile.
  static constexpr int kSteps = TileR * kRowLanes / Threads;
  static_assert(kSteps * Threads == TileR * kRowLanes, "whole tiles");
};

/// The row-major scales of a tile's rows, computed once per tile (by one
/// thread each) where they differ by row: a per-row global, or a row fold's
/// reference. Steps read them from here instead of each recomputing a
/// global's reciprocals behind a dependent load.
template <int TileR> struct RowScales {
  double recip64[TileR];
  float value[TileR];
  float recip[TileR];
  int reference[TileR];
};

/// Stages the scales of rows r0 .. r0 + TileR - 1 into `out` (threads 0 ..
/// TileR - 1, one row each); the caller synchronizes before they are read.
template <int Kind, int Fmt, int Source, int Fold, int TileR>
__device__ __forceinline__ void
stageRowScales(const Args &args, int r0, bool globalPerRow,
               const GlobalScale &tensorScale, RowScales<TileR> &out) {
  const int t = threadIdx.x;
  if (t >= TileR)
    return;
  const int row = min(r0 + t, args.rows - 1);
  GlobalScale g = tensorScale;
  if (globalPerRow && Source == kGlobalFromBits)
    g = makeGlobal(globalFromBits<Kind, Fmt>(args.row.globalBits[row]));
  int reference = 0;
  if constexpr (Fold == kFoldRow)
    reference =
        int(blockScale<Kind, Fmt>(globalPerRow ? args.row.globalBits[row]
                                               : args.row.foldBits[row],
                                  g)
                .e8m0) -
        127;
  out.recip64[t] = g.recip64;
  out.value[t] = g.value;
  out.recip[t] = g.recip;
  out.reference[t] = reference;
}

/// The vector `step` of this thread in a tile: tile row and lane of the row.
template <int Threads, int RowLanes>
__device__ __forceinline__ void rowLayoutVector(int step, int &tileRow,
                                                int &vec) {
  const int q = int(threadIdx.x) + step * Threads;
  tileRow = q / RowLanes;
  vec = q % RowLanes;
}

/// The largest magnitude bits of this lane's block (or, without blocks, its
/// own vector) from a 16-byte vector of the tile.
template <int In, int Lanes, bool Blocks>
__device__ __forceinline__ uint32_t rowBlockBits(const Vec16 &v) {
  const uint32_t bits = vectorMaxBits<In>(v);
  return Blocks ? groupMax<Lanes>(bits) : bits;
}

/// Reduce pass over one tile: each row's largest contribution goes to
/// Args::row.globalBits (per row) and Args::row.foldBits (a row fold with
/// a tensor global); `tensorBits` keeps this thread's tensor maximum.
template <int In, int Kind, int Block, int Threads, int TileR>
__device__ __forceinline__ void
reduceRowLayout(const Args &args, const uint32_t (*tile)[32], int r0,
                bool globalPerRow, bool rowFold, uint32_t &tensorBits) {
  using Shape = RowLayoutShape<In, Kind, Block, Threads, TileR>;
#pragma unroll
  for (int step = 0; step < Shape::kSteps; ++step) {
    int tileRow, vec;
    rowLayoutVector<Threads, Shape::kRowLanes>(step, tileRow, vec);
    Vec16 v;
    ptx::loadShared128(ptx::smemAddress(&tile[tileRow][4 * vec]), v.w);
    // Rows and columns past X's end were staged as zeros: they add nothing.
    uint32_t c = globalContribution<Kind>(
        rowBlockBits<In, Shape::kBlockLanes, Shape::kBlocks>(v));
    tensorBits = c > tensorBits ? c : tensorBits;
    if (globalPerRow || rowFold) {
      c = groupMax<Shape::kRowLanes>(c);
      const int row = r0 + tileRow;
      if (vec == 0 && c != 0 && row < args.rows) {
        if (globalPerRow)
          atomicMax(args.row.globalBits + row, c);
        else
          atomicMax(args.row.foldBits + row, c);
      }
    }
  }
}

/// Quantize pass over one tile: the row-major codes of its rows (X's
/// columns c0 .. c0 + 127 / bytes), their block scales, and, from CTAs of
/// the first column strip, the rows' global scales. `tensorScale` is the
/// layout's global when it is per tensor; `scales` (staged) hold the rows'
/// own when `perRowScales`.
template <int In, int Kind, int Fmt, int Block, int Source, int Fold,
          int Threads, int TileR>
__device__ __forceinline__ void quantizeRowLayout(
    const Args &args, const uint32_t (*tile)[32], int r0, int c0,
    bool globalPerRow, bool perRowScales, const GlobalScale &tensorScale,
    const RowScales<TileR> &scales, uint32_t &saturated, uint32_t &nonFinite) {
  using Shape = RowLayoutShape<In, Kind, Block, Threads, TileR>;
  constexpr int kVecElems = Shape::kVecElems, Lanes = Shape::kBlockLanes;
  const int lane = threadIdx.x & 31;
  const bool vectorRows = args.cols % kVecElems == 0;
  // (Two steps at a time: their loads and shuffles overlap.)
#pragma unroll 2
  for (int step = 0; step < Shape::kSteps; ++step) {
    int tileRow, vec;
    rowLayoutVector<Threads, Shape::kRowLanes>(step, tileRow, vec);
    const int row = r0 + tileRow, col = c0 + vec * kVecElems;
    // (Every lane takes part in the shuffles; only those inside X write.)
    const bool inside = row < args.rows && col < args.cols;
    Vec16 v;
    ptx::loadShared128(ptx::smemAddress(&tile[tileRow][4 * vec]), v.w);
    const uint32_t blockBits = rowBlockBits<In, Lanes, Shape::kBlocks>(v);

    GlobalScale g = tensorScale;
    int reference = 0;
    if (perRowScales) {
      g = {scales.value[tileRow], scales.recip64[tileRow],
           scales.recip[tileRow]};
      reference = scales.reference[tileRow];
    }
    const float global = g.value;
    const BlockScale s = blockScale<Kind, Fmt>(blockBits, g);

    float x[kVecElems];
#pragma unroll
    for (int e = 0; e < kVecElems; ++e)
      x[e] = vecElement<In>(v, e);
    uint32_t codes[kVecElems / 4];
    encodeValues<Fmt, Kind == kTwoLevel, Source == kGlobalFromScale>(
        x, s, codes, saturated);
    if constexpr (Fold != kFoldNone)
      foldBlockWords<Fmt, kVecElems / 4>(codes, reference, s.e8m0);
    if (!inside)
      continue;

    uint8_t *dst = args.row.q + size_t(row) * args.cols + col;
    if (vectorRows) {
      if constexpr (kVecElems == 4)
        *reinterpret_cast<uint32_t *>(dst) = codes[0];
      else
        store8(dst, codes[0], codes[1]);
    } else {
      // (A vector that runs past the row's end was staged with zeros.)
#pragma unroll
      for (int k = 0; k < kVecElems; ++k)
        if (col + k < args.cols)
          dst[k] = uint8_t(codes[k / 4] >> (8 * (k % 4)));
    }
    if constexpr (Shape::kBlocks) {
      // The first lane of each block writes its scale and counts it.
      if ((lane & (Lanes - 1)) == 0) {
        const size_t blockIndex =
            size_t(row) * (args.cols / Block) + col / Block;
        if constexpr (Kind == kPerGroup)
          static_cast<float *>(args.row.local)[blockIndex] = s.divisor;
        else if constexpr (Fold == kFoldNone)
          static_cast<uint8_t *>(args.row.local)[blockIndex] = uint8_t(s.e8m0);
        nonFinite += blockBits >= kInfBits;
      }
    }
    // Each row's scale: once, from the first column strip.
    if (blockIdx.x == 0 && vec == 0) {
      if constexpr (Fold == kFoldRow) {
        args.row.global[row] = mulRn(global, exp2i(reference));
      } else if (Kind != kPerTensor && globalPerRow &&
                 Source == kGlobalFromBits) {
        args.row.global[row] = global;
        if (Kind == kPerRow)
          nonFinite += args.row.globalBits[row] >= kInfBits;
      }
    }
  }
}

} // namespace moss::quantize
