// moss/gemm/Widen.cuh - the f16 MMA's widening of FP8 stages (f16Mma).
//
// wgmma reads B only from shared memory, so for an f16 MMA the consumers
// rewrite each FP8 stage as f16 before multiplying it: both consumer
// warpgroups (256 threads) widen the stage's A and B tiles, and copy its
// factor tables, into one of two f16 slots, then free the FP8 stage at
// once. The slots alternate: while one slot's wgmmas run, the next stage
// is widened into the other. A slot is freed (its "slot empty" barrier)
// where an FP8 stage is freed without f16 (every consumer thread, once its
// wgmmas on the slot completed and its table reads are done).
//
// Each FP8 row of 128 codes (128 bytes, eight 16-byte chunks, 128-byte
// swizzled by TMA: chunk c of row r sits at chunk c ^ (r % 8)) becomes two
// f16 rows of 64 elements, one in each K half of the slot, swizzled the
// same way, which is the layout the f16 wgmma descriptors describe.
#pragma once

#include "moss/gemm/Pipeline.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/sync.cuh"

namespace moss::gemm::detail {

/// Consumer threads that widen a stage (both consumer warpgroups).
constexpr int kWideningThreads = 256;
/// The named barrier (bar.sync id) the widening threads meet at; 0 is
/// __syncthreads'.
constexpr int kWidenedBarrier = 1;

/// An FP8 tile of kRows x 128 codes as this thread's share of 16-byte
/// chunks: chunk i is row (thread + 256 i) / 8, column chunk thread % 8.
template <int kRows> struct TileChunks {
  static_assert(kRows * 8 % kWideningThreads == 0, "whole chunks per thread");
  static constexpr int kCount = kRows * 8 / kWideningThreads;
  u32 codes[kCount][4];

  __device__ __forceinline__ static int row(int thread, int i) {
    return (thread + i * kWideningThreads) >> 3;
  }

  /// Loads the chunks from the tile at `src` (128-byte swizzled rows).
  __device__ __forceinline__ void load(u32 src, int thread) {
    const int c = thread & 7;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int r = row(thread, i);
      ptx::loadShared128(src + r * 128 + ((c ^ (r & 7)) << 4), codes[i]);
    }
  }

  /// Stores the chunks widened to f16 into two K halves of kRows x 64 at
  /// `dst` (the second half kRows * 128 bytes after the first): codes
  /// 16c .. 16c+15 go to K half c / 4, f16 chunks 2(c % 4) and the next,
  /// which one k16 wgmma reads. In the second half the first 8 codes go to
  /// the odd chunk and the last 8 to the even one: the 8 lanes of a
  /// quarter-warp (one row, c = 0..7) then store to 8 different bank
  /// groups. That permutes K inside a k16 step, in A and B alike, which
  /// leaves every product and the promotion blocks as they were.
  template <int kFormat>
  __device__ __forceinline__ void storeWidened(u32 dst, int thread) const {
    const int c = thread & 7, half = c >> 2, first = 2 * (c & 3);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int r = row(thread, i), swz = r & 7;
      u32 lo[4], hi[4];
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        lo[2 * w] = ptx::fp8x2ToF16x2<kFormat>(codes[i][w]);
        lo[2 * w + 1] = ptx::fp8x2ToF16x2<kFormat>(codes[i][w] >> 16);
        hi[2 * w] = ptx::fp8x2ToF16x2<kFormat>(codes[i][w + 2]);
        hi[2 * w + 1] = ptx::fp8x2ToF16x2<kFormat>(codes[i][w + 2] >> 16);
      }
      const u32 out = dst + half * kRows * 128 + r * 128;
      ptx::storeShared128(out + (((first + half) ^ swz) << 4), lo);
      ptx::storeShared128(out + (((first + 1 - half) ^ swz) << 4), hi);
    }
  }
};

/// Copies kCount floats from `src` to `dst` (shared memory), spread over
/// the widening threads.
template <int kCount>
__device__ __forceinline__ void copyTable(const float *src, float *dst,
                                          int thread) {
#pragma unroll
  for (int i = thread; i < kCount; i += kWideningThreads)
    dst[i] = src[i];
}

/// Frees an FP8 stage: every consumer thread arrives once it is done with
/// the stage, on the stage's "empty" barrier of every CTA of the cluster
/// (their producers multicast into this CTA's stage). One arrival per warp
/// after a warp barrier would be as correct under the PTX memory model,
/// but compute-sanitizer's racecheck does not follow it; on the H200
/// per-thread arrivals measured the same speed at 8192^3
/// (docs/PERFORMANCE.md, fourth session).
template <class Cfg>
__device__ __forceinline__ void releaseFp8Stage(const SharedStorage<Cfg> &smem,
                                                u32 stage) {
  if constexpr (Cfg::kClusterSize == 1) {
    ptx::mbarrierArrive(smem.empty(stage));
  } else {
#pragma unroll
    for (int cta = 0; cta < Cfg::kClusterSize; ++cta)
      ptx::mbarrierArriveCluster(smem.empty(stage), cta);
  }
}

/// Waits for FP8 stage `stage` and for f16 slot `slot` (free in the phase
/// before `slotPhase`), widens the stage into the slot, frees the stage and
/// meets the other widening threads, after which the slot is ready for the
/// f16 wgmma (fenced for the async proxy).
template <class Cfg>
__device__ __forceinline__ void widenStage(const SharedStorage<Cfg> &smem,
                                           u32 stage, u32 stagePhase, u32 slot,
                                           u32 slotPhase, int thread) {
  ptx::mbarrierWait(smem.full(stage), stagePhase);
  ptx::mbarrierWait(smem.slotEmpty(slot), slotPhase ^ 1);
  // All loads before the first store (volatile asm statements keep their
  // order): the same speed as chunk by chunk on the H200, and the stall on
  // shared memory the ncu report blamed was the stores' bank conflicts
  // (twelfth session, docs/PERFORMANCE.md).
  TileChunks<Cfg::TileM> a;
  TileChunks<Cfg::TileN> b;
  a.load(smem.tileA(stage), thread);
  b.load(smem.tileB(stage), thread);
  a.template storeWidened<Cfg::ElemA>(smem.slotA(slot), thread);
  b.template storeWidened<Cfg::ElemB>(smem.slotB(slot), thread);
  if constexpr (Cfg::kRowFactor)
    copyTable<Cfg::kRowTableBytes / 4>(smem.rowTable(stage),
                                       smem.slotRowTable(slot), thread);
  if constexpr (Cfg::kColFactor)
    copyTable<Cfg::kColTableBytes / 4>(smem.colTable(stage),
                                       smem.slotColTable(slot), thread);
  releaseFp8Stage<Cfg>(smem, stage);
  ptx::fenceProxyAsyncShared();
  ptx::namedBarrierSync<kWidenedBarrier, kWideningThreads>();
}

} // namespace moss::gemm::detail
