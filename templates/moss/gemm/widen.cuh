// moss/gemm/widen.cuh - the f16 MMA's widening of FP8 codes (f16Mma).
//
// An f16 wgmma takes A from registers or shared memory and B from shared
// memory only. So the consumers widen A's codes into registers as they
// issue each k16 wgmma (ldmatrix, then one conversion per two codes), and
// rewrite B's stage as f16 in one of two slots before multiplying it: both
// consumer warpgroups (256 threads) widen the stage's B tile together. The
// slots alternate with the stages (Stages is even; slot = stage % 2):
// while one slot's wgmmas run, the next stage's B is widened into the
// other. A slot is freed (its "slot empty" barrier) with its FP8 stage
// (every consumer thread, once its wgmmas on it completed).
//
// Each FP8 row of 128 codes (128 bytes, eight 16-byte chunks, 128-byte
// swizzled by TMA: chunk c of row r sits at chunk c ^ (r % 8)) becomes two
// f16 rows of 64 elements, one in each K half of the slot, swizzled the
// same way, which is the layout the f16 wgmma descriptors describe.
//
// Inside each k16 step the codes are permuted, in A and B alike, which
// leaves every product and the promotion blocks as they were: ldmatrix
// gives a thread four consecutive codes 4q .. 4q+3 of a row, and the A
// fragment wants two pairs 8 apart. So MMA positions 2q, 2q+1 hold codes
// 4q, 4q+1 and positions 2q+8, 2q+9 codes 4q+2, 4q+3. In the second K half
// the two groups of 8 positions trade places as well, so that the 8 lanes
// of a quarter-warp (one B row, chunks c = 0..7) store to 8 different bank
// groups (the halves' rows alias in the banks).
#pragma once

#include "moss/gemm/pipeline.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/sync.cuh"

namespace moss::gemm_kernel::detail {

/// Consumer threads that widen a stage's B (both consumer warpgroups).
constexpr int kWideningThreads = 256;
/// The named barrier (bar.sync id) the widening threads meet at; 0 is
/// __syncthreads'.
constexpr int kWidenedBarrier = 1;

/// The f16 slot of FP8 stage `stage`, and the parity of the slot's current
/// use for the stage ring at (stage, phase): the ring's position counted
/// in pairs of stages.
template <class Cfg> __device__ __forceinline__ u32 slotOf(u32 stage) {
  return stage & 1;
}
template <class Cfg>
__device__ __forceinline__ u32 slotPhase(u32 stage, u32 phase) {
  return ((Cfg::Stages / 2) % 2 == 1 ? phase : 0u) ^ ((stage >> 1) & 1);
}

/// Two f16 of four FP8 codes (a word): codes 0 and 1 (`high` false) or 2
/// and 3.
template <int kFormat>
__device__ __forceinline__ u32 widenPair(u32 word, bool high) {
  return ptx::fp8x2ToF16x2<kFormat>(high ? word >> 16 : word);
}

/// Widens B's FP8 tile of kRows x 128 codes at `src` into two K halves of
/// kRows x 64 f16 at `dst` (the second kRows * 128 bytes after the first).
/// `thread` (0..255) takes chunks thread + 256 i: row (thread + 256 i) / 8,
/// column chunk thread % 8, which goes to K half c / 4, f16 chunks 2(c % 4)
/// (MMA positions 0-7 of k16 step c) and the next. All loads go out before
/// the first store (volatile asm statements keep their order), at the same
/// speed as chunk by chunk (docs/PERFORMANCE.md, "Design measurements
/// behind the code").
template <int kRows, int kFormat>
__device__ __forceinline__ void widenTile(u32 src, u32 dst, int thread) {
  static_assert(kRows * 8 % kWideningThreads == 0, "whole chunks per thread");
  constexpr int kCount = kRows * 8 / kWideningThreads;
  const int c = thread & 7, half = c >> 2, first = 2 * (c & 3);
  u32 codes[kCount][4];
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const int r = (thread + i * kWideningThreads) >> 3;
    ptx::loadShared128(src + r * 128 + ((c ^ (r & 7)) << 4), codes[i]);
  }
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const int r = (thread + i * kWideningThreads) >> 3, swz = r & 7;
    u32 low[4], high[4]; // MMA positions 0-7 and 8-15 in the first K half
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      low[w] = widenPair<kFormat>(codes[i][w], false);
      high[w] = widenPair<kFormat>(codes[i][w], true);
    }
    const u32 out = dst + half * kRows * 128 + r * 128;
    ptx::storeShared128(out + (((first + half) ^ swz) << 4), low);
    ptx::storeShared128(out + (((first + 1 - half) ^ swz) << 4), high);
  }
}

/// Waits for FP8 stage `stage` (ring parity `phase`) and for its f16 slot,
/// widens the stage's B into the slot and meets the other widening
/// threads, after which the slot is ready for the f16 wgmma (fenced for
/// the async proxy).
template <class Cfg>
__device__ __forceinline__ void widenStage(const SharedStorage<Cfg> &smem,
                                           u32 stage, u32 phase, int thread) {
  ptx::mbarrierWait(smem.full(stage), phase);
  ptx::mbarrierWait(smem.slotEmpty(slotOf<Cfg>(stage)),
                    slotPhase<Cfg>(stage, phase) ^ 1);
  widenTile<Cfg::TileN, Cfg::ElemB>(smem.tileB(stage),
                                    smem.slotB(slotOf<Cfg>(stage)), thread);
  ptx::fenceProxyAsyncShared();
  ptx::namedBarrierSync<kWidenedBarrier, kWideningThreads>();
}

/// The A fragments (WgmmaF16) of k16 steps 2s and 2s + 1 of an FP8 stage
/// for one m64 tile whose rows start at `tile` (128-byte swizzled rows), as
/// the warp `warp` (0..3) of a warpgroup holds them.
template <class Cfg>
__device__ __forceinline__ void widenA(u32 tile, int s, int warp, int lane,
                                       u32 (&a)[2][4]) {
  // Lanes 0-7: rows 0-7 of the warp's 16, chunk 2s; 8-15: rows 8-15; 16-31
  // the same rows at chunk 2s + 1.
  const int row = warp * 16 + (lane & 15), chunk = 2 * s + (lane >> 4);
  u32 r[4];
  ptx::loadMatrixX4(tile + row * 128 + ((chunk ^ (row & 7)) << 4), r);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const bool swap = 2 * s + j >= 4; // the second K half
    a[j][0] = widenPair<Cfg::ElemA>(r[2 * j], swap);
    a[j][1] = widenPair<Cfg::ElemA>(r[2 * j + 1], swap);
    a[j][2] = widenPair<Cfg::ElemA>(r[2 * j], !swap);
    a[j][3] = widenPair<Cfg::ElemA>(r[2 * j + 1], !swap);
  }
}

} // namespace moss::gemm_kernel::detail
