// moss/gemm/split_k.cuh - summing the K slices of a split-K tile.
//
// With SplitK = S > 1 each tile's K is cut into S slices of whole stages,
// each a work unit of its own, so S CTAs share the tile's chain of K
// stages (at small M that chain's latency, not bandwidth, bounds a tile).
// With TileM = 64 (split warpgroups) the two consumer warpgroups of a CTA
// take alternate stages of a unit for the same 64 rows: 2S slices.
// Each consumer warp writes its FP32 accumulators (16 rows of the tile) to
// the workspace and counts itself in on its counter of the tile. The warp
// that comes last sums the slices in slice order, so the result does not
// depend on which came last; it sets the counter back to zero for the next
// launch and runs the epilogue of its rows. Warps work alone (the epilogue
// is per warp too): no barrier between them. Only rows below M are written
// and read.
//
// Workspace (Args::workspace): u32 counters[tiles][8], zero between
// launches, padded to workspaceCounterBytes; then
// float partials[tiles][slices][warps][R][32 lanes]: 8 warps, or 4 rows of
// warps with split warpgroups; R = kWgM * TileN / 2 accumulators per
// thread (coalesced: consecutive lanes, consecutive words).
#pragma once

#include "moss/gemm/mainloop.cuh"
#include "moss/ptx/sync.cuh"

namespace moss::gemm_kernel::detail {

/// Adds this warp's slice `slice` of `tile` to the workspace; returns true,
/// with `acc` holding the sum of all slices, in the warp that completes its
/// part of the tile, false in the others.
template <class Cfg>
__device__ __forceinline__ bool
sumSlices(const Args &args, int m, int m0, int tile, int slice,
          Fragment<Cfg> &acc, const ConsumerPosition &pos) {
  // With split warpgroups each K slice is two: one per warpgroup, whose
  // warps hold the same rows.
  constexpr bool kSplit = Cfg::kSplitWarpgroups;
  constexpr int kSlices = Cfg::SplitK * (kSplit ? 2 : 1);
  constexpr int kWarps = kSplit ? 4 : 8; // warps holding different rows
  constexpr int kRegs = Cfg::kWgM * (Cfg::TileN / 2);
  const int warp = kSplit ? pos.warp : pos.warpgroup * 4 + pos.warp;
  if constexpr (kSplit)
    slice = 2 * slice + pos.warpgroup;
  u8 *workspace = static_cast<u8 *>(args.workspace);
  u32 *counter = reinterpret_cast<u32 *>(workspace) + 8 * tile + warp;
  float *partials = reinterpret_cast<float *>(
                        workspace + workspaceCounterBytes(Cfg::kParams, m)) +
                    pos.lane;
  // This warp's part of slice s, at this thread's lane.
  auto part = [&](int s) {
    return partials +
           static_cast<long long>((tile * kSlices + s) * kWarps + warp) *
               kRegs * 32;
  };
  bool rowValid[Cfg::kWgM][2];
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rowValid[mm][h] = m0 + fragmentRow<Cfg>(pos, mm, h) < m;

  float *own = part(slice);
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int i = 0; i < Cfg::TileN / 2; ++i)
      if (rowValid[mm][(i >> 1) & 1])
        own[(mm * (Cfg::TileN / 2) + i) * 32] = acc[mm][i];
  // Publish the slice (every lane fences), then count it in (lane 0).
  ptx::fenceGpu();
  ptx::syncWarp();
  u32 last = 0;
  if (pos.lane == 0) {
    last = ptx::atomicAddU32(counter, 1) == kSlices - 1;
    if (last)
      ptx::storeRelaxedU32(counter, 0);
  }
  if (!ptx::shuffleIdx(last, 0))
    return false;
  ptx::fenceGpu();
  // Slice by slice, in slice order: acc = ((0 + p0) + p1) + ... The slice
  // loop stays rolled: unrolled it tripled the compile time of 4 slices.
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int i = 0; i < Cfg::TileN / 2; ++i)
      acc[mm][i] = 0.0f;
#pragma unroll 1
  for (int s = 0; s < kSlices; ++s) {
    const float *slicePart = part(s);
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int i = 0; i < Cfg::TileN / 2; ++i)
        if (rowValid[mm][(i >> 1) & 1])
          acc[mm][i] += ptx::loadGlobalL2(slicePart +
                                          (mm * (Cfg::TileN / 2) + i) * 32);
  }
  return true;
}

} // namespace moss::gemm_kernel::detail
