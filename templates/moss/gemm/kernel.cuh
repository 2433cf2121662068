// moss/gemm/kernel.cuh - the block-scaled FP8 GEMM for Hopper (sm_90a).
//
// The translation unit of docs/GEMM-KERNEL-ABI.md includes this header,
// names a Config and calls moss::gemm_kernel::run<Config>() from its one
// kernel. The design (docs/GEMM-KERNEL.md):
//  - a persistent grid; each CTA walks tiles in a grouped (L2-friendly) order,
//    or with SplitK > 1 slices of tiles' K, summed in a workspace
//    (split_k.cuh); with TileM = 64 both consumer warpgroups take the tile's
//    rows over alternate K stages, their sums meeting the same way;
//  - warpgroup 0 produces: one thread issues TMA loads into a ring of Stages
//    shared-memory stages (128 of K each) and, with block scales, all 128
//    threads turn them into per-stage FP32 factor tables; it runs with 40
//    registers per thread;
//  - warpgroups 1 and 2 consume (232 registers): each computes half the
//    tile's rows with FP8 wgmma (m64nNk32), promotes block partial sums into
//    FP32 accumulators when the scheme has block scales (mainloop.cuh), or
//    with the f16 MMA widen each stage to f16 first (widen.cuh), or with
//    FoldA fold A's block factors into its codes (consumer_fold.cuh), and
//    runs the epilogue (epilogue.cuh), storing through shared memory and
//    TMA where the output allows.
// Host code may include config.cuh alone; this header needs NVRTC or nvcc.
#pragma once

#include "moss/gemm/config.cuh"

#if defined(__CUDACC__)

#include "moss/gemm/epilogue.cuh"
#include "moss/gemm/mainloop.cuh"
#include "moss/gemm/pipeline.cuh"
#include "moss/gemm/producer.cuh"
#include "moss/gemm/split_k.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/sync.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::gemm_kernel {

namespace detail {

/// Registers per thread after the producer gives some back: 128 * 40 +
/// 256 * 232 = 64512 <= 65536.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

/// The end of a work unit: the epilogue, once a tile's slices (split-K,
/// split warpgroups) are all summed, by each warp whose part of the tile
/// was finished last here.
template <class Cfg>
__device__ __forceinline__ void
finishUnit(const TileOrder<Cfg> &order, int unit, const Args &args, int m,
           int m0, int n0, Fragment<Cfg> &acc, const ConsumerPosition &pos,
           const SharedStorage<Cfg> &smem, const CUtensorMap &tmaD,
           const ConsumerFold<Cfg> &fold) {
  if constexpr (Cfg::kSlicedAccumulators)
    if (!sumSlices<Cfg>(args, m, m0, order.tile(unit), order.slice(unit), acc,
                        pos))
      return;
  epilogue<Cfg>(args, m, m0, n0, acc, pos, smem, tmaD, fold);
}

/// The launch arguments as expert `group` of a grouped GEMM sees them:
/// m-grouped, its B global scales and its bias (the rest is indexed by the
/// output's row and column); k-grouped, A's per-row globals shifted to the
/// rows of its output, g * M on (the epilogue indexes them by output row);
/// `args` itself for a plain GEMM.
template <class Cfg>
__device__ __forceinline__ Args expertArgs(const Args &args, int group) {
  Args expert = args;
  if constexpr (Cfg::kGroupedK) {
    if constexpr (Cfg::kGlobalRowA)
      expert.aGlobal -= group * Cfg::M;
  } else if constexpr (Cfg::kGroups > 0) {
    if constexpr (Cfg::kHasGlobalB)
      expert.bGlobal += group * (Cfg::kGlobalRowB ? Cfg::N : 1);
    if constexpr (Cfg::Bias != kNone)
      expert.bias = static_cast<const u8 *>(args.bias) +
                    static_cast<long long>(group) * Cfg::N *
                        elementBytes(Cfg::Bias);
  }
  return expert;
}

/// A consumer warpgroup: all work units of this CTA, main loop then
/// epilogue. With split warpgroups the two take alternate stages; after a
/// unit with an odd stage count the other one takes the next unit's first.
template <class Cfg, class Loop>
__device__ __forceinline__ void
consumeUnits(Loop &loop, const Args &args, int m, u32 rank, Fragment<Cfg> &acc,
             const ConsumerPosition &pos, const CUtensorMap &tmaD) {
  ConsumerRing<Cfg> ring;
  bool leads = pos.warpgroup == 0;
  if constexpr (Cfg::kSplitWarpgroups)
    if (!leads)
      ring.step();
  TileOrder<Cfg> order(m, rank, args);
  for (int t = order.first; t < order.total; t += order.stride) {
    const Unit unit = order.unit(t);
    if constexpr (Cfg::kFoldA)
      loop.fold.beginUnit(order, t, t == order.first);
    loop.run(ring, warpgroupStages<Cfg>(leads, unit));
    if constexpr (Cfg::kSplitWarpgroups && Cfg::kUnitFullKStages % 2 != 0)
      leads = !leads;
    // The output's rows end at the unit's (its expert's, if grouped); a
    // k-grouped expert's output rows start at group * M.
    const int outRow0 = Cfg::kGroupedK ? unit.group * Cfg::M : 0;
    finishUnit<Cfg>(order, t, expertArgs<Cfg>(args, unit.group),
                    outRow0 + unit.rowEnd, outRow0 + unit.m0, unit.n0, acc, pos,
                    loop.smem, tmaD, loop.fold);
  }
  // The output is complete when the kernel ends: no TMA store may still
  // be running.
  if constexpr (Cfg::kUsesTmaD)
    if (pos.lane == 0)
      ptx::bulkWaitGroupAll();
}

template <class Cfg>
__device__ __forceinline__ void consumeTiles(const SharedStorage<Cfg> &smem,
                                             const Args &args, int m, u32 rank,
                                             const CUtensorMap &tmaD) {
  ConsumerPosition pos;
  // Broadcast from lane 0: ptxas then knows the indices are warp-uniform
  // and keeps what derives from them (A's wgmma descriptors, the factor
  // table offsets) in uniform registers instead of redoing 64-bit vector
  // arithmetic before every wgmma (8192^3 MOSS 2.36 -> 2.31 M cycles).
  pos.warpgroup = static_cast<int>(ptx::shuffleIdx(threadIdx.x / 128, 0)) - 1;
  pos.warp = static_cast<int>(ptx::shuffleIdx(threadIdx.x / 32, 0)) % 4;
  pos.lane = static_cast<int>(threadIdx.x % 32);
  Fragment<Cfg> acc;
  const ConsumerFold<Cfg> fold(args, m, pos.warpgroup, pos.warp, pos.lane);
  if constexpr (Cfg::kFactorMode == kFactorDirect) {
    DirectLoop<Cfg> loop{smem, pos, acc, fold};
    consumeUnits<Cfg>(loop, args, m, rank, acc, pos, tmaD);
  } else {
    Fragment<Cfg> part[Cfg::kPartialSets];
    PromotedLoop<Cfg> loop{smem, pos, acc, part, fold};
    consumeUnits<Cfg>(loop, args, m, rank, acc, pos, tmaD);
  }
}

} // namespace detail

/// The kernel body for `Cfg`: launch with Cfg::kThreads threads,
/// Cfg::kSharedBytes dynamic shared memory and gridSize<Cfg>(m, SMs) blocks.
template <class Cfg>
__device__ __forceinline__ void run(const CUtensorMap &tmaA,
                                    const CUtensorMap &tmaB,
                                    const CUtensorMap &tmaD, const Args &args) {
  using namespace detail;
  extern __shared__ u8 mossGemmSharedRaw[];
  const u32 raw = ptx::smemAddress(mossGemmSharedRaw);
  const u32 pad = (1024 - (raw & 1023)) & 1023;
  const SharedStorage<Cfg> smem{raw + pad, mossGemmSharedRaw + pad};
  const int m = Cfg::M > 0 ? Cfg::M : args.m;

  const u32 rank = Cfg::kClusterSize > 1 ? ptx::clusterRank() : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::Stages; ++s) {
      ptx::mbarrierInit(smem.full(s),
                        1 + (Cfg::kHasTables ? Cfg::kLoaderThreads : 0));
      ptx::mbarrierInit(smem.empty(s), Cfg::kEmptyArrivals);
    }
    if constexpr (Cfg::kF16Mma)
      for (int s = 0; s < 2; ++s)
        ptx::mbarrierInit(smem.slotEmpty(s), kWideningThreads);
    ptx::fenceBarrierInit();
  } else if (threadIdx.x == 32) {
    ptx::prefetchTensorMap(tmaA);
    ptx::prefetchTensorMap(tmaB);
    if constexpr (Cfg::kUsesTmaD)
      ptx::prefetchTensorMap(tmaD);
  }
  // Peers arrive on this CTA's barriers and multicast into its stages: the
  // whole cluster must see them initialized.
  if constexpr (Cfg::kClusterSize > 1)
    ptx::clusterSync();
  else
    __syncthreads();

  if (threadIdx.x < 128) {
    ptx::setMaxRegistersDecrease<kProducerRegisters>();
    if constexpr (Cfg::kHasTables)
      produceTables<Cfg>(smem, tmaA, tmaB, args, m,
                         static_cast<int>(threadIdx.x), rank);
    else if (threadIdx.x == 0)
      produceTiles<Cfg>(smem, tmaA, tmaB, args, m, rank);
  } else {
    ptx::setMaxRegistersIncrease<kConsumerRegisters>();
    consumeTiles<Cfg>(smem, args, m, rank, tmaD);
  }
}

} // namespace moss::gemm_kernel

#endif // defined(__CUDACC__)
