// moss/gemm/pipeline.cuh - shared-memory layout, the stage ring and the
// persistent tile order of the GEMM kernel.
#pragma once

#include "moss/gemm/config.cuh"
#include "moss/ptx/types.cuh"

namespace moss::gemm_kernel::detail {

using ptx::u32;
using ptx::u64;
using ptx::u8;

/// The kernel's shared memory (Config's layout) from a 1024-byte aligned
/// base: per stage an A tile [TileM][128 B], a B tile [TileN][128 B] (both
/// 128-byte swizzled by TMA), the factor tables, then the barriers.
template <class Cfg> struct SharedStorage {
  u32 base;  ///< shared-state-space address
  u8 *bytes; ///< the same, as a generic pointer

  __device__ __forceinline__ u32 tileA(u32 stage) const {
    return base + Cfg::kOffsetA + stage * Cfg::kStageABytes;
  }
  __device__ __forceinline__ u32 tileB(u32 stage) const {
    return base + Cfg::kOffsetB + stage * Cfg::kStageBBytes;
  }
  /// Per-row factors of a stage: [TileM][kPromotesPerStage] floats.
  __device__ __forceinline__ float *rowTable(u32 stage) const {
    return reinterpret_cast<float *>(bytes + Cfg::kOffsetRowTable +
                                     stage * Cfg::kRowTableBytes);
  }
  /// Per-column factors of a stage: [kPromotesPerStage][TileN] floats.
  __device__ __forceinline__ float *colTable(u32 stage) const {
    return reinterpret_cast<float *>(bytes + Cfg::kOffsetColTable +
                                     stage * Cfg::kColTableBytes);
  }
  /// f16 slot `slot` (0 or 1, f16 MMA only): a stage's B widened to f16 as
  /// two K halves [TileN][64 f16] of 128-byte swizzled rows.
  __device__ __forceinline__ u32 slotB(u32 slot) const {
    return base + Cfg::kOffsetSlots + slot * Cfg::kSlotBytes;
  }
  /// Staging buffer `buffer` of consumer warp `warp` (0..7) for the
  /// epilogue's TMA stores: 16 rows of 128 bytes, 128-byte swizzled.
  __device__ __forceinline__ u32 staging(int warp, int buffer) const {
    return base + Cfg::kOffsetStaging +
           (warp * Cfg::kStoreBuffers + buffer) * kStoreBufferBytes;
  }
  /// "Stage filled": TMA bytes plus one arrival per table loader thread.
  __device__ __forceinline__ u32 full(u32 stage) const {
    return base + Cfg::kOffsetBarriers + stage * 8;
  }
  /// "Stage free": one arrival per consumer thread of the cluster.
  __device__ __forceinline__ u32 empty(u32 stage) const {
    return base + Cfg::kOffsetBarriers + (Cfg::Stages + stage) * 8;
  }
  /// "f16 slot free": one arrival per consumer thread of this CTA.
  __device__ __forceinline__ u32 slotEmpty(u32 slot) const {
    return base + Cfg::kOffsetBarriers + (2 * Cfg::Stages + slot) * 8;
  }
};

/// A position in the ring of Stages buffers: the stage index and the parity
/// of its barriers' current phase. Every role walks the same sequence; a
/// consumer warpgroup of split warpgroups (TileM = 64) takes every other
/// stage of it (kStride 2, starting at its own).
template <int kStages, int kStride = 1> struct Ring {
  u32 stage = 0;
  u32 phase = 0;
  /// One stage on.
  __device__ __forceinline__ void step() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  /// To this role's next stage.
  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int i = 0; i < kStride; ++i)
      step();
  }
  __device__ __forceinline__ Ring next() const {
    Ring r = *this;
    r.advance();
    return r;
  }
};

/// The persistent order of work units (moss::gemm_kernel::tileOrigin): cluster
/// c walks units c, c + clusters, ...; unit u is slice u % SplitK of K of
/// cluster tile u / SplitK, so a tile's slices run side by side. A tile
/// past the edge (odd tile counts) is still walked: its loads are zeros and
/// its stores are predicated off, and its multicast partner needs its half.
/// An m-grouped GEMM's units are its experts' tiles (GroupWalk); every
/// thread counts them from the offsets once (Groups loads). A k-grouped
/// GEMM's are every expert's M x N tiles, each over its expert's stages.
template <class Cfg> struct TileOrder {
  int m;
  int total;
  int first;  ///< this CTA's cluster index
  int stride; ///< clusters in the grid
  int rank;
  GroupWalk walk; ///< Groups > 0

  __device__ __forceinline__ TileOrder(int m, u32 rank, const Args &args)
      : m(m), total(numUnits(Cfg::kParams, m)),
        first(static_cast<int>(blockIdx.x) / Cfg::kClusterSize),
        stride(static_cast<int>(gridDim.x) / Cfg::kClusterSize),
        rank(static_cast<int>(rank)), walk{args.groupOffsets, m,
                                           Cfg::kGroupedK ? args.k : Cfg::K} {
    if constexpr (Cfg::kGroups > 0)
      total = walk.total(Cfg::kParams);
  }

  __device__ __forceinline__ int tile(int u) const { return u / Cfg::SplitK; }
  __device__ __forceinline__ int slice(int u) const { return u % Cfg::SplitK; }
  /// Where unit `u`'s slice of K starts (`unit`: unit u's tile).
  __device__ __forceinline__ int kBegin(int u, const Unit &unit) const {
    if constexpr (Cfg::kGroupedK)
      return unit.k0;
    else
      return slice(u) * Cfg::kUnitKStages * Cfg::kStageK;
  }
  /// The K stages of a unit: its expert's (k-grouped) or kUnitKStages.
  static __device__ __forceinline__ int kStages(const Unit &unit) {
    if constexpr (Cfg::kGroupedK)
      return unit.kStages;
    else
      return Cfg::kUnitKStages;
  }
  /// The unit's first row of B: an m-grouped expert's B starts at row
  /// group * N; a k-grouped GEMM's experts share B.
  static __device__ __forceinline__ int rowB(const Unit &unit) {
    if constexpr (Cfg::kGroups > 0 && !Cfg::kGroupedK)
      return unit.group * Cfg::N + unit.n0;
    else
      return unit.n0;
  }

  /// The first row and column of this CTA's tile in unit `u` (a plain
  /// GEMM).
  __device__ __forceinline__ void coords(int u, int &m0, int &n0) const {
    tileOrigin(Cfg::kParams, m, tile(u), rank, m0, n0);
  }

  /// Unit `u`'s tile.
  __device__ __forceinline__ Unit unit(int u) {
    if constexpr (Cfg::kGroups > 0) {
      return walk.unit(Cfg::kParams, u);
    } else {
      Unit r{0, 0, m, 0};
      coords(u, r.m0, r.n0);
      return r;
    }
  }
};

} // namespace moss::gemm_kernel::detail
