// moss/gemm/mainloop.cuh - the consumer warpgroups' K loop.
//
// Each of the two consumer warpgroups computes TileM/2 rows of the tile
// (kWgM m64 wgmma tiles) times all TileN columns. Without block scales the
// wgmma accumulates the whole of K in its FP32 registers (kFactorDirect).
// With block scales, every promotion block (kPromoteK of K: 32 for MOSS
// two-level and MXFP8, 128 for per-group) is computed into a fresh partial
// accumulator set (wgmma with scale-d = 0) and then added to the FP32
// accumulators by CUDA cores, times the block's factor:
//
//   acc += f * partial        f = 2^(eA + eB) (exact), or an FP32 scale
//
// Two partial sets alternate: block b+1's wgmma is issued before block b's
// promotion, so the tensor cores work while the FFMAs run (and the other
// warpgroup's wgmmas fill any gap). One FFMA per accumulator per block
// (kFactorRow, kFactorCol), plus one FMUL when both operands have
// per-element factors (kFactorRowCol).
//
// With the f16 MMA (kF16Mma) acquiring a stage also widens its B into the
// stage's f16 slot, each k32 step widens A into registers and issues two
// k16 wgmmas, and releasing a stage frees its slot too (widen.cuh).
#pragma once

#include "moss/gemm/consumer_fold.cuh"
#include "moss/gemm/pipeline.cuh"
#include "moss/gemm/widen.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/sync.cuh"
#include "moss/ptx/wgmma.cuh"

namespace moss::gemm_kernel::detail {

/// Accumulators of one consumer thread: kWgM m64 tiles of TileN/2 floats.
template <class Cfg> using Fragment = float[Cfg::kWgM][Cfg::TileN / 2];

/// A consumer warpgroup's walk of the stage ring: every stage, or with split
/// warpgroups every other one.
template <class Cfg>
using ConsumerRing = Ring<Cfg::Stages, Cfg::kSplitWarpgroups ? 2 : 1>;

/// The first m64 tile of this warpgroup's rows: the warpgroups split the
/// tile's rows, or with split warpgroups both take all 64.
template <class Cfg> __device__ __forceinline__ int firstM64(int warpgroup) {
  return Cfg::kSplitWarpgroups ? 0 : warpgroup * Cfg::kWgM;
}

/// Where this consumer thread sits in the tile.
struct ConsumerPosition {
  int warpgroup; ///< 0 or 1
  int warp;      ///< 0..3 within the warpgroup
  int lane;
  /// 0..255 over both consumer warpgroups.
  __device__ __forceinline__ int thread() const {
    return warpgroup * 128 + warp * 32 + lane;
  }
};

template <class Cfg>
__device__ __forceinline__ void fenceFragment(Fragment<Cfg> &d) {
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int i = 0; i < Cfg::TileN / 2; ++i)
      ptx::fenceOperand(d[mm][i]);
}

/// Descriptors of this warpgroup's first A rows and of B in a stage (with
/// the f16 MMA, B's in the stage's f16 slot): stage 0's plus the stage's
/// offset (in the descriptor's 16-byte units; shared addresses stay below
/// 2^18, so the start-address field cannot carry).
/// Stage 0's is loop-invariant, which saves the consumers about six
/// uniform instructions per stage against building each stage's from its
/// address (MOSS 2.265 -> 2.226 M cycles at 8192^3, per-group 1.251 ->
/// 1.238 M).
template <class Cfg>
__device__ __forceinline__ u64 descriptorA(const SharedStorage<Cfg> &smem,
                                           u32 stage, int warpgroup) {
  // 64 rows of 128 bytes per m64 tile: 8192 bytes = 512 in units of 16.
  return ptx::makeSmemDescriptorSw128(smem.tileA(0)) +
         static_cast<u64>(firstM64<Cfg>(warpgroup) * 512) +
         static_cast<u64>(stage * (Cfg::kStageABytes >> 4));
}
template <class Cfg>
__device__ __forceinline__ u64 descriptorB(const SharedStorage<Cfg> &smem,
                                           u32 stage) {
  if constexpr (Cfg::kF16Mma)
    return ptx::makeSmemDescriptorSw128(smem.slotB(0)) +
           static_cast<u64>(slotOf<Cfg>(stage) * (Cfg::kSlotBytes >> 4));
  else
    return ptx::makeSmemDescriptorSw128(smem.tileB(0)) +
           static_cast<u64>(stage * (Cfg::kStageBBytes >> 4));
}

/// Issues kSteps k32 steps starting at step `first` of stage `stage` into
/// `d` (all kWgM m64 tiles), as one commit group. With kZero the first
/// step overwrites d instead of accumulating into it. With the f16 MMA a
/// k32 step is two k16 wgmmas on A widened into registers and B in the
/// slot's K half `step / 2`.
template <class Cfg, int kSteps, bool kZero>
__device__ __forceinline__ void
issueSteps(Fragment<Cfg> &d, const SharedStorage<Cfg> &smem, u32 stage,
           const ConsumerPosition &pos, int first) {
  const u64 descA = descriptorA<Cfg>(smem, stage, pos.warpgroup);
  const u64 descB = descriptorB<Cfg>(smem, stage);
  if constexpr (Cfg::kF16Mma) {
    // Every A fragment before the fence: a register a wgmma reads that is
    // written after the fence makes ptxas serialize the wgmmas (C7520).
    u32 a[kSteps][Cfg::kWgM][2][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int mm = 0; mm < Cfg::kWgM; ++mm)
        widenA<Cfg>(smem.tileA(stage) +
                        (firstM64<Cfg>(pos.warpgroup) + mm) * 64 * 128,
                    first + s, pos.warp, pos.lane, a[s][mm]);
    ptx::wgmmaFence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int mm = 0; mm < Cfg::kWgM; ++mm) {
        // 64 bytes of K per step (4 descriptor units) in K halves of TileN
        // rows of 128 bytes.
        const int step = first + s;
        const u64 b = descB + static_cast<u64>((step >> 1) * (Cfg::TileN * 8) +
                                               (step & 1) * 4);
        using Mma = ptx::WgmmaF16<Cfg::TileN>;
        Mma::mma(d[mm], a[s][mm][0], b, (kZero && s == 0) ? 0u : 1u);
        Mma::mma(d[mm], a[s][mm][1], b + 2, 1u);
      }
  } else {
    ptx::wgmmaFence();
    // 32 bytes of K per step: 2 in descriptor units.
    const u64 k = static_cast<u64>(2 * first);
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int mm = 0; mm < Cfg::kWgM; ++mm)
        ptx::WgmmaFp8<Cfg::TileN>::template mma<Cfg::ElemA, Cfg::ElemB>(
            d[mm], descA + static_cast<u64>(mm * 512) + k + 2 * s,
            descB + k + 2 * s, (kZero && s == 0) ? 0u : 1u);
  }
  ptx::wgmmaCommit();
}

/// Frees an FP8 stage: every consumer thread arrives once it is done with
/// the stage, on the stage's "empty" barrier of every CTA of the cluster
/// (their producers multicast into this CTA's stage). One arrival per warp
/// after a warp barrier would be as correct under the PTX memory model,
/// but compute-sanitizer's racecheck does not follow it, and per-thread
/// arrivals run at the same speed (docs/PERFORMANCE.md, "Design
/// measurements behind the code").
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

/// Frees a stage (and its f16 slot) once this thread is done with it: its
/// wgmmas completed, its table reads consumed.
template <class Cfg>
__device__ __forceinline__ void releaseStage(const SharedStorage<Cfg> &smem,
                                             u32 stage) {
  if constexpr (Cfg::kF16Mma)
    ptx::mbarrierArrive(smem.slotEmpty(slotOf<Cfg>(stage)));
  releaseFp8Stage<Cfg>(smem, stage);
}

/// Waits until the stage `ring` is at can be multiplied; with the f16 MMA,
/// widens its B into its f16 slot first.
template <class Cfg>
__device__ __forceinline__ void acquireStage(const SharedStorage<Cfg> &smem,
                                             const ConsumerRing<Cfg> &ring,
                                             const ConsumerPosition &pos) {
  if constexpr (Cfg::kF16Mma)
    widenStage<Cfg>(smem, ring.stage, ring.phase, pos.thread());
  else
    ptx::mbarrierWait(smem.full(ring.stage), ring.phase);
}

/// Row of the tile held in d[mm][i] with (i >> 1) & 1 == h.
template <class Cfg>
__device__ __forceinline__ int fragmentRow(const ConsumerPosition &pos, int mm,
                                           int h) {
  return (firstM64<Cfg>(pos.warpgroup) + mm) * 64 + pos.warp * 16 +
         (pos.lane >> 2) + 8 * h;
}

/// Two floats, for one 64-bit shared load.
struct alignas(8) Float2 {
  float x, y;
};

/// acc += factor * part for one promotion block `block` of the stage whose
/// tables are `rowTable` / `colTable`; `rowF` holds this thread's row
/// factors of that block.
template <class Cfg>
__device__ __forceinline__ void
promote(Fragment<Cfg> &acc, const Fragment<Cfg> &part,
        const float (&rowF)[Cfg::kWgM][2], const float *colTable, int block,
        const ConsumerPosition &pos) {
  constexpr int kMode = Cfg::kFactorMode;
  if constexpr (kMode == kFactorUnit || kMode == kFactorRow) {
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int i = 0; i < Cfg::TileN / 2; ++i) {
        if constexpr (kMode == kFactorUnit)
          acc[mm][i] += part[mm][i];
        else
          acc[mm][i] =
              __fmaf_rn(part[mm][i], rowF[mm][(i >> 1) & 1], acc[mm][i]);
      }
  } else {
    // Columns 8j + 2(lane % 4) + {0, 1}: one 8-byte load per j.
    const float *cols = colTable + block * Cfg::TileN + 2 * (pos.lane & 3);
#pragma unroll
    for (int j = 0; j < Cfg::TileN / 8; ++j) {
      // Keep the compiler from hoisting all TileN/4 factor loads to the top
      // (register pressure next to the accumulator sets).
      if (j % 2 == 0)
        asm volatile("" ::: "memory");
      Float2 c = *reinterpret_cast<const Float2 *>(cols + 8 * j);
#pragma unroll
      for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float f0 = c.x, f1 = c.y;
          if constexpr (kMode == kFactorRowCol) {
            f0 *= rowF[mm][h]; // powers of two: exact unless it underflows
            f1 *= rowF[mm][h];
          }
          acc[mm][4 * j + 2 * h] =
              __fmaf_rn(part[mm][4 * j + 2 * h], f0, acc[mm][4 * j + 2 * h]);
          acc[mm][4 * j + 2 * h + 1] = __fmaf_rn(
              part[mm][4 * j + 2 * h + 1], f1, acc[mm][4 * j + 2 * h + 1]);
        }
    }
  }
}

/// Full K stages of a work unit that a consumer warpgroup walks: all of
/// them, or with split warpgroups its share of the alternating stages (the
/// warpgroup that takes the unit's first stage, `leads`, takes the odd one).
/// A k-grouped unit's are its expert's (`unit`).
template <class Cfg>
__device__ __forceinline__ int warpgroupStages(bool leads, const Unit &unit) {
  if constexpr (Cfg::kGroupedK)
    return unit.kStages;
  else if constexpr (Cfg::kSplitWarpgroups)
    return (Cfg::kUnitFullKStages + (leads ? 1 : 0)) / 2;
  else
    return Cfg::kUnitFullKStages;
}

/// Zeroes the accumulators.
template <class Cfg>
__device__ __forceinline__ void zeroFragment(Fragment<Cfg> &acc) {
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int i = 0; i < Cfg::TileN / 2; ++i)
      acc[mm][i] = 0.0f;
}

/// The state of one consumer thread's promoted main loop.
///
/// K is walked in groups of kGroupStages stages. Inside a group the block
/// sequence is straight-line code: block g+1 is issued (after waiting for
/// its stage when it starts one) before block g is promoted. At the end of
/// a group the last block is promoted with nothing of this warpgroup in
/// flight (the other warpgroup's wgmmas keep the tensor cores busy).
///
/// Why so rigid: ptxas serializes every wgmma of the kernel (C7514, or
/// C7512 with spills) when a wgmma is in flight across a loop back-edge
/// while other accumulators are read, and when a control-flow join makes
/// the compiler copy registers an in-flight wgmma writes. So the code
/// between a wgmma and its wait has no loop back-edge and no branch: the
/// group is unrolled by templates, barrier waits loop inside their asm
/// statement, and every thread arrives to release a stage (no branch).
template <class Cfg> struct PromotedLoop {
  // With one partial set every wgmma has completed before the next block's
  // A is widened into registers (the f16 MMA: see DirectLoop::nextStage).
  static_assert(!Cfg::kF16Mma || Cfg::kPartialSets == 1,
                "the f16 MMA's wgmmas read A from registers");
  static constexpr int kPer = Cfg::kPromotesPerStage;
  /// Promotion blocks per group of straight-line code (config.cuh says
  /// how many and why).
  static constexpr int kGroupBlocks = Cfg::kGroupBlocks;
  static constexpr int kGroupStages = kGroupBlocks / kPer;
  /// Partial accumulator sets (1 or 2, Config::kPartialSets).
  static constexpr int kPartialSets = Cfg::kPartialSets;

  const SharedStorage<Cfg> &smem;
  const ConsumerPosition &pos;
  Fragment<Cfg> &acc;
  Fragment<Cfg> (&part)[Cfg::kPartialSets];
  ConsumerFold<Cfg> fold; ///< unused: a folded A promotes nothing

  /// Issues promotion block `block` of `stage` into part[kParity].
  template <int kParity>
  __device__ __forceinline__ void issue(u32 stage, int block) {
    issueSteps<Cfg, Cfg::kStepsPerPromote, true>(
        part[kParity], smem, stage, pos, block * Cfg::kStepsPerPromote);
  }

  /// This thread's row factors of promotion block `block` of a stage (1
  /// when the scheme has none): two shared loads per m64 tile.
  __device__ __forceinline__ void loadRowFactors(u32 stage, int block,
                                                 float (&f)[Cfg::kWgM][2]) {
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (Cfg::kRowFactor)
          f[mm][h] =
              smem.rowTable(stage)[fragmentRow<Cfg>(pos, mm, h) * kPer + block];
        else
          f[mm][h] = 1.0f;
      }
  }

  /// Block kG of a group of kBlocks blocks; `ring` is at block kG's stage.
  /// With two partial sets, block kG+1 is issued (after waiting for its
  /// stage when it starts one) before block kG is promoted; with one, after.
  template <int kBlocks, int kG>
  __device__ __forceinline__ void step(ConsumerRing<Cfg> &ring) {
    constexpr int kBlock = kG % kPer; // block within the stage
    constexpr int kDone = kPartialSets == 2 ? kG % 2 : 0;
    constexpr int kNext = kPartialSets == 2 ? 1 - kDone : 0;
    if constexpr (kPartialSets == 2 && kG + 1 < kBlocks)
      issueNext<kG, kNext>(ring);
    // The factor loads go out before the wait and land during it.
    float rowF[Cfg::kWgM][2];
    loadRowFactors(ring.stage, kBlock, rowF);
    if constexpr (kPartialSets == 2 && kG + 1 < kBlocks)
      ptx::wgmmaWait<1>();
    else
      ptx::wgmmaWait<0>();
    fenceFragment<Cfg>(part[kDone]);
    promote<Cfg>(acc, part[kDone], rowF, smem.colTable(ring.stage), kBlock,
                 pos);
    if constexpr (kPartialSets == 1 && kG + 1 < kBlocks)
      issueNext<kG, kNext>(ring);
    if constexpr (kBlock == kPer - 1 || kG + 1 == kBlocks) {
      releaseStage<Cfg>(smem, ring.stage);
      ring.advance();
    }
    if constexpr (kG + 1 < kBlocks)
      step<kBlocks, kG + 1>(ring);
  }

  /// Issues block kG+1 into part[kSet]; `ring` is at block kG's stage.
  template <int kG, int kSet>
  __device__ __forceinline__ void issueNext(const ConsumerRing<Cfg> &ring) {
    if constexpr ((kG + 1) % kPer == 0) {
      ConsumerRing<Cfg> next = ring.next();
      acquireStage<Cfg>(smem, next, pos);
      issue<kSet>(next.stage, 0);
    } else {
      issue<kSet>(ring.stage, kG % kPer + 1);
    }
  }

  /// A group of kBlocks consecutive promotion blocks starting at the stage
  /// `ring` is at (the last stage of the group may be a partial K tail).
  template <int kBlocks>
  __device__ __forceinline__ void group(ConsumerRing<Cfg> &ring) {
    acquireStage<Cfg>(smem, ring, pos);
    issue<0>(ring.stage, 0);
    step<kBlocks, 0>(ring);
  }

  /// This warpgroup's share of a work unit's K for one tile: `stages` full
  /// stages (warpgroupStages) and the K tail.
  __device__ __forceinline__ void run(ConsumerRing<Cfg> &ring, int stages) {
    zeroFragment<Cfg>(acc);
    if constexpr (Cfg::kGroupedK) {
      // A run-time count of whole stages (none: zeros): whole groups, then
      // the rest one stage at a time.
#pragma unroll 1
      for (int g = 0; g < stages / kGroupStages; ++g)
        group<kGroupStages * kPer>(ring);
#pragma unroll 1
      for (int s = 0; s < stages % kGroupStages; ++s)
        group<kPer>(ring);
    } else if constexpr (Cfg::kSplitWarpgroups) {
      // A run-time share (no K tail): whole groups, then at most one stage.
      static_assert(kGroupStages <= 2, "one stage left over at most");
#pragma unroll 1
      for (int g = 0; g < stages / kGroupStages; ++g)
        group<kGroupStages * kPer>(ring);
      if constexpr (kGroupStages == 2)
        if (stages % 2 != 0)
          group<kPer>(ring);
    } else {
      constexpr int kGroups = Cfg::kUnitFullKStages / kGroupStages;
      constexpr int kRestBlocks =
          (Cfg::kUnitFullKStages % kGroupStages) * kPer +
          Cfg::kTailSteps / Cfg::kStepsPerPromote;
#pragma unroll 1
      for (int g = 0; g < kGroups; ++g)
        group<kGroupStages * kPer>(ring);
      if constexpr (kRestBlocks > 0)
        group<kRestBlocks>(ring);
    }
  }
};

/// The direct main loop (no block scales): the wgmma accumulates all of K.
/// Each stage's steps form one commit group; a stage is freed once the next
/// one's group is issued and its own has completed. The first stage (which
/// overwrites the accumulators) is peeled, so no branch joins while
/// accumulators are in flight.
template <class Cfg> struct DirectLoop {
  const SharedStorage<Cfg> &smem;
  const ConsumerPosition &pos;
  Fragment<Cfg> &acc;
  ConsumerFold<Cfg> fold; ///< FoldA's, of the current unit

  /// Waits for the stage at `ring` (the unit's stage ks), folds its A with
  /// FoldA, and issues its kSteps steps.
  template <int kSteps, bool kFirst>
  __device__ __forceinline__ void issueStage(const ConsumerRing<Cfg> &ring,
                                             int ks) {
    acquireStage<Cfg>(smem, ring, pos);
    if constexpr (Cfg::kFoldA)
      foldWarpgroupRows<Cfg>(fold, smem.tileA(ring.stage), pos.warpgroup);
    issueSteps<Cfg, kSteps, kFirst>(acc, smem, ring.stage, pos, 0);
    if constexpr (Cfg::kFoldA)
      fold.prefetch(ks);
  }

  /// A stage after the first: issue it, then free the previous one. With
  /// the f16 MMA the previous stage's wgmmas complete before this stage's
  /// A is widened: they read their A from registers, which the compiler
  /// would otherwise reuse while they run (two launches of 4-stage direct
  /// kernels disagreed on the H200). B is widened while they run.
  template <int kSteps>
  __device__ __forceinline__ void nextStage(ConsumerRing<Cfg> &ring,
                                            u32 &previous, int ks) {
    if constexpr (Cfg::kF16Mma) {
      acquireStage<Cfg>(smem, ring, pos);
      ptx::wgmmaWait<0>();
      releaseStage<Cfg>(smem, previous);
      issueSteps<Cfg, kSteps, false>(acc, smem, ring.stage, pos, 0);
    } else {
      issueStage<kSteps, false>(ring, ks);
      ptx::wgmmaWait<1>();
      releaseStage<Cfg>(smem, previous);
    }
    previous = ring.stage;
    ring.advance();
  }

  /// This warpgroup's share of a work unit's K for one tile: `stages` full
  /// stages (warpgroupStages, at least 1 when the unit has any) and the K
  /// tail.
  __device__ __forceinline__ void run(ConsumerRing<Cfg> &ring, int stages) {
    constexpr int kTail = Cfg::kTailSteps;
    // A k-grouped expert without columns: zeros, and no stage to free.
    if constexpr (Cfg::kGroupedK)
      if (stages == 0) {
        zeroFragment<Cfg>(acc);
        return;
      }
    u32 previous = ring.stage;
    if constexpr (Cfg::kUnitFullKStages > 0 || Cfg::kGroupedK) {
      issueStage<4, true>(ring, 0);
      ring.advance();
#pragma unroll 1
      for (int ks = 1; ks < stages; ++ks)
        nextStage<4>(ring, previous, ks);
      if constexpr (kTail > 0)
        nextStage<kTail>(ring, previous, stages);
    } else {
      issueStage<kTail, true>(ring, 0);
      ring.advance();
    }
    ptx::wgmmaWait<0>();
    fenceFragment<Cfg>(acc);
    releaseStage<Cfg>(smem, previous);
  }
};

} // namespace moss::gemm_kernel::detail
