// moss/gemm/consumer_fold.cuh - FoldA: each consumer warpgroup folds A's
// E8M0 block factors into the codes of its own rows, stage by stage.
//
// The row fold of docs/NUMERICS-CONTRACT.md section 8, bit for bit the fold
// pass's (moss/quantize/fold.cuh, whose word rule it calls): each code of a
// block with factor 2^e becomes RNE(code * 2^-(E - e)), E the largest
// exponent of the row's factors that are not NaN; a NaN factor's codes
// become NaN. The tensor cores then sum all of K as for a per-row A, and the
// epilogue applies 2^E times A's global (RowInputs).
//
// A warpgroup's wgmmas read only its own rows of A, so each warpgroup folds
// them once the stage's TMA bytes are in, meets at its own named barrier
// and issues its wgmmas; its previous stage's wgmmas run on the tensor
// cores meanwhile. It is slower than the fold pass before the per-row
// kernel (docs/PERFORMANCE.md, "Folded block factors"), so it runs only
// when asked for; docs/GEMM-KERNEL.md, "Folding A in the kernel", has the
// designs and what limits them.
//
// Each warp folds the rows its accumulator fragments hold, so that the
// epilogue's 2^E comes by shuffle: with one m64 tile per warpgroup (TileM
// 128) lanes 2j and 2j + 1 take row j of the warp's 16, chunks 0-3 and 4-7
// of each 128-byte stage row; with two (TileM 256) lane l takes row l % 16
// of m64 tile l / 16, all eight chunks. A row's four E8M0 codes of a stage
// are one word of its scales (K is a multiple of 128, blocks are 32); each
// lane loads its blocks' codes a stage ahead, and the next work unit's E
// is gathered on the way, one word of each of its rows per stage. Only the
// first unit's E is read up front, while the first stage loads.
#pragma once

#include "moss/gemm/pipeline.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/sync.cuh"
#include "moss/quantize/fold.cuh"

namespace moss::gemm_kernel::detail {

/// Gathers E8M0 codes (the low `kCodes` bytes of `word`) into a running
/// reference: the largest code + 1 (mod 256), which puts the NaN code 255
/// below every other code.
template <int kCodes>
__device__ __forceinline__ u32 gatherReference(u32 running, u32 word) {
#pragma unroll
  for (int j = 0; j < kCodes; ++j)
    running = max(running, ((word >> (8 * j)) + 1u) & 0xFFu);
  return running;
}

/// The reference exponent E of a gathered row: -127 (the smallest E8M0
/// exponent) when every code was NaN, as the host rule starts from.
__device__ __forceinline__ int referenceOf(u32 gathered) {
  return gathered == 0 ? -127 : int(gathered) - 128;
}

/// The named barriers (bar.sync ids) of the two consumer warpgroups'
/// folds: 2 and 3 (0 is __syncthreads', 1 the f16 MMA's widening).
constexpr int kFoldBarrierBase = 2;

/// One consumer thread's part of FoldA: the rows it folds, their E and the
/// codes of the stage to fold.
template <class Cfg> struct ConsumerFold {
  /// Lanes per folded row, the 16-byte chunks of a stage row each folds,
  /// and its 32-element blocks.
  static constexpr int kLanesPerRow = Cfg::kWgM == 1 ? 2 : 1;
  static constexpr int kChunks = 8 / kLanesPerRow;
  static constexpr int kCodes = kChunks / 2;
  static constexpr int kScalesPerRow = Cfg::K / 32;

  const u8 *e8m0;
  bool aligned; ///< 4-byte aligned scales: word loads
  int m;
  int lane;
  int row;        ///< the tile row this lane folds
  int firstBlock; ///< its first block of a stage (0 or 2)
  int reference = -127;
  int scaleRow = -1;     ///< the unit's row of A (-1: past M)
  int nextScaleRow = -1; ///< the next unit's (-1: none, or past M)
  u32 gathered = 0;      ///< the next unit's reference, this lane's part
  u32 pending = 0;       ///< the next unit's codes loaded last, not gathered
  u32 codes = 0;         ///< the E8M0 codes of the stage to fold

  __device__ __forceinline__ ConsumerFold(const Args &args, int m,
                                          int warpgroup, int warp, int lane)
      : e8m0(static_cast<const u8 *>(args.aLocal)),
        aligned((reinterpret_cast<u64>(args.aLocal) & 3) == 0), m(m),
        lane(lane) {
    const int m64 = warpgroup * Cfg::kWgM + (kLanesPerRow == 2 ? 0 : lane / 16);
    row = m64 * 64 + warp * 16 + (kLanesPerRow == 2 ? lane / 2 : lane % 16);
    firstBlock = kLanesPerRow == 2 ? 2 * (lane & 1) : 0;
  }

  /// This lane's codes of the stage at K offset k0 of A's row `r`.
  __device__ __forceinline__ u32 load(int r, int k0) const {
    const u8 *p =
        e8m0 + static_cast<long long>(r) * kScalesPerRow + k0 / 32 + firstBlock;
    if constexpr (kCodes == 4) {
      if (aligned)
        return *reinterpret_cast<const u32 *>(p);
      return u32(p[0]) | u32(p[1]) << 8 | u32(p[2]) << 16 | u32(p[3]) << 24;
    } else {
      if (aligned)
        return *reinterpret_cast<const unsigned short *>(p);
      return u32(p[0]) | u32(p[1]) << 8;
    }
  }

  /// E of the gathered parts of the row (both lanes of it, when two).
  __device__ __forceinline__ int combine(u32 part) const {
    if constexpr (kLanesPerRow == 2)
      part = max(part, ptx::shuffleXor(part, 1));
    return referenceOf(part);
  }

  /// At the start of work unit `u`: its E (read whole for the first unit,
  /// else gathered during the one before) and its first stage's codes.
  __device__ __forceinline__ void beginUnit(const TileOrder<Cfg> &order, int u,
                                            bool first) {
    int m0, n0;
    order.coords(u, m0, n0);
    scaleRow = m0 + row < m ? m0 + row : -1;
    if (first) {
      u32 part = 0;
      if (scaleRow >= 0)
        for (int ks = 0; ks < Cfg::kUnitKStages; ks += 8) {
          u32 words[8];
#pragma unroll
          for (int i = 0; i < 8; ++i)
            words[i] = ks + i < Cfg::kUnitKStages
                           ? load(scaleRow, (ks + i) * Cfg::kStageK)
                           : 0u;
#pragma unroll
          for (int i = 0; i < 8; ++i)
            part = gatherReference<kCodes>(part, words[i]);
        }
      reference = combine(part);
      codes = scaleRow >= 0 ? load(scaleRow, 0) : 0u;
    } else {
      reference = combine(gatherReference<kCodes>(gathered, pending));
    }
    gathered = 0;
    pending = 0; // gathers as code 0, which moves no reference
    nextScaleRow = -1;
    if (u + order.stride < order.total) {
      order.coords(u + order.stride, m0, n0);
      if (m0 + row < m)
        nextScaleRow = m0 + row;
    }
  }

  /// Folds this lane's chunks of the stage's A tile at `tile` (rows past M
  /// are left: those past A's box were not loaded, and they only feed
  /// output rows that are never stored). Without branches, so that the
  /// conversions of all its chunks overlap: a shift of 0 multiplies by 1,
  /// which leaves every code as it is.
  __device__ __forceinline__ void foldStage(u32 tile) const {
    if (scaleRow < 0)
      return;
    const u32 base = tile + row * 128;
    u32 words[kChunks][4];
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      ptx::loadShared128(base + (((2 * firstBlock + c) ^ (row & 7)) << 4),
                         words[c]);
#pragma unroll
    for (int j = 0; j < kCodes; ++j) {
      const u32 code = (codes >> (8 * j)) & 0xFFu;
      const quantize::FoldFactors f = quantize::foldFactors<Cfg::ElemA>(
          quantize::foldShift<Cfg::ElemA>(reference, code));
#pragma unroll
      for (int c = 2 * j; c < 2 * j + 2; ++c)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const u32 folded =
              quantize::foldWord<Cfg::ElemA, true>(words[c][w], f);
          words[c][w] = code == 0xFFu ? 0x7F7F7F7Fu : folded;
        }
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      ptx::storeShared128(base + (((2 * firstBlock + c) ^ (row & 7)) << 4),
                          words[c]);
  }

  /// After stage `ks` of the unit was folded and issued: the next stage's
  /// codes (the next unit's first after the last), and the next unit's
  /// codes of stage ks towards its E, gathered a stage later so that no
  /// load's latency stalls the warp.
  __device__ __forceinline__ void prefetch(int ks) {
    const int k0 = ks * Cfg::kStageK;
    if (ks + 1 < Cfg::kUnitKStages)
      codes = scaleRow >= 0 ? load(scaleRow, k0 + Cfg::kStageK) : 0u;
    else
      codes = nextScaleRow >= 0 ? load(nextScaleRow, 0) : 0u;
    gathered = gatherReference<kCodes>(gathered, pending);
    pending = nextScaleRow >= 0 ? load(nextScaleRow, k0) : 0u;
  }

  /// 2^E of the fragment's row (mm, h) (RowInputs): from the lane that
  /// folds it. Every lane of the warp calls it.
  __device__ __forceinline__ float rowScale(int mm, int h) const {
    const int j = (lane >> 2) + 8 * h; // the row within the warp's 16
    const int source = kLanesPerRow == 2 ? 2 * j : mm * 16 + j;
    const u32 code = ptx::shuffleIdx(static_cast<u32>(reference + 127), source);
    return decodeE8M0(code);
  }
};

/// Folds the warpgroup's rows of the stage's A tile (FoldA) and meets the
/// warpgroup's other threads: then its wgmmas may read them.
template <class Cfg>
__device__ __forceinline__ void foldWarpgroupRows(const ConsumerFold<Cfg> &fold,
                                                  u32 tileA, int warpgroup) {
  fold.foldStage(tileA);
  ptx::fenceProxyAsyncShared();
  // Constant ids: a run-time one makes ptxas reserve all 16 barriers.
  if (warpgroup == 0)
    ptx::namedBarrierSync<kFoldBarrierBase, 128>();
  else
    ptx::namedBarrierSync<kFoldBarrierBase + 1, 128>();
}

} // namespace moss::gemm_kernel::detail
