// moss/gemm/Producer.cuh - the producer warpgroup: TMA loads (warp 0) and
// the per-stage scale-factor tables (warps 1..3).
#pragma once

#include "moss/gemm/Pipeline.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::gemm::detail {

/// One thread of warp 0: for every tile and K stage, waits for the stage to
/// be free, then loads A's [TileM x 128] and B's [TileN x 128] boxes into it
/// (A's box stops at M when all of M fits in fewer rows: boxRowsA). Rows
/// past M or N and columns past K arrive as zeros (the box is always
/// complete, so the expected byte count is the same for every stage). In a
/// 2-CTA cluster the shared operand is loaded in halves, each CTA multicasting
/// its half to both; a stage is then free once the consumers of both CTAs
/// released it, and before exiting the thread waits until every stage has been
/// released (peers arrive on this CTA's barriers until then).
template <class Cfg>
__device__ __forceinline__ void
produceTiles(const SharedStorage<Cfg> &smem, const CUtensorMap &tmaA,
             const CUtensorMap &tmaB, int m, u32 rank) {
  Ring<Cfg::Stages> ring;
  TileOrder<Cfg> order(m, rank);
  constexpr int kHalfA = Cfg::TileM / 2, kHalfB = Cfg::TileN / 2;
  const u32 txBytes = static_cast<u32>(stageTxBytes(Cfg::kParams, m));
  for (int t = order.first; t < order.total; t += order.stride) {
    int m0, n0;
    order.coords(t, m0, n0);
    const int kBegin = order.kBegin(t);
    for (int ks = 0; ks < Cfg::kUnitKStages; ++ks) {
      const int k0 = kBegin + ks * Cfg::kStageK;
      ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
      const u32 full = smem.full(ring.stage);
      ptx::mbarrierArriveExpectTx(full, txBytes);
      if constexpr (Cfg::kMulticastA)
        ptx::tmaLoad2dMulticast(smem.tileA(ring.stage) + rank * kHalfA * 128,
                                tmaA, k0, m0 + static_cast<int>(rank) * kHalfA,
                                full, 0x3);
      else
        ptx::tmaLoad2d(smem.tileA(ring.stage), tmaA, k0, m0, full);
      if constexpr (Cfg::kMulticastB)
        ptx::tmaLoad2dMulticast(smem.tileB(ring.stage) + rank * kHalfB * 128,
                                tmaB, k0, n0 + static_cast<int>(rank) * kHalfB,
                                full, 0x3);
      else
        ptx::tmaLoad2d(smem.tileB(ring.stage), tmaB, k0, n0, full);
      ring.advance();
    }
  }
  if constexpr (Cfg::kClusterSize > 1) {
    for (int s = 0; s < Cfg::Stages; ++s) {
      ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
      ring.advance();
    }
  }
}

/// A local scale as a float: E8M0 codes decoded exactly, FP32 as stored.
template <bool kE8M0> __device__ __forceinline__ float decodeScale(u32 raw) {
  if constexpr (kE8M0)
    return ptx::decodeE8M0(raw);
  else
    return ptx::bitsFloat(raw);
}

/// The raw bits of local scale `index` (an E8M0 code or FP32 bits).
template <bool kE8M0>
__device__ __forceinline__ u32 loadScaleBits(const void *scales, u32 index) {
  if constexpr (kE8M0)
    return static_cast<const u8 *>(scales)[index];
  else
    return static_cast<const u32 *>(scales)[index];
}

/// Sixteen bytes, for one vector load.
struct alignas(16) Word4 {
  u32 x, y, z, w;
};

/// Whether `p` is 16-byte aligned (block scales only need their element
/// alignment; the vector loads below are taken when they can be).
__device__ __forceinline__ bool isAligned16(const void *p) {
  return (reinterpret_cast<u64>(p) & 15) == 0;
}

/// The local scales of one operand row for the kPer promotion blocks of a
/// stage, as raw bits. Row `row` of a [rows / kBlockRows, K / kBlock]
/// scale array; promotion block j of the stage at K offset k0 uses scale
/// (k0 + j * kPromoteK) / kBlock. Blocks at or past K are not read.
///
/// A stage's scales are 32 bits of a row when they are four E8M0 codes of
/// 32-element blocks or one FP32 scale of a 128 block (kWord). The stage's
/// rows are then 128 words a row-length apart: a 32-byte sector each. So
/// when rows are 16-byte aligned, the word of four stages comes in one
/// 16-byte load (kChunked), at stages 0, 4, 8, ... of a tile, and the next
/// three stages take theirs from registers: a quarter of the sectors (a
/// work unit's stages come in whole chunks: kUnitKStages % 4 == 0). (On
/// the H200, per-group at 8192^3 measured 0-3% faster with it, MOSS the
/// same: within the noise.)
/// kMayChunk: whether this operand's rows can afford the three registers
/// (the producer has 40).
template <class Cfg, bool kE8M0, int kBlock, int kBlockRows, bool kMayChunk>
struct ScaleRow {
  static constexpr int kPer = Cfg::kPromotesPerStage;
  static constexpr int kPerRow = Cfg::K / kBlock; // scales per row
  static constexpr int kCodeBytes = kE8M0 ? 1 : 4;
  static constexpr bool kWord =
      kBlock == Cfg::kPromoteK && kPer * kCodeBytes == 4 && kPerRow % kPer == 0;
  static constexpr bool kChunked =
      kMayChunk && kWord && (kPerRow * kCodeBytes) % 16 == 0 &&
      Cfg::kTailSteps == 0 && Cfg::kUnitKStages % 4 == 0;
  u32 bits[kWord ? 1 : kPer];
  u32 ahead[kChunked ? 3 : 1]; ///< the words of the chunk's next stages

  /// Loads stage `ks` of a work unit (at K offset k0) of `row`; `aligned`:
  /// the scales pointer is 16-byte aligned.
  __device__ __forceinline__ void load(const void *scales, int row, int ks,
                                       int k0, bool aligned) {
    const u32 base = static_cast<u32>(row / kBlockRows) * kPerRow;
    if constexpr (kChunked) {
      if (aligned) {
        if (ks % 4 == 0) {
          const Word4 chunk = *reinterpret_cast<const Word4 *>(
              static_cast<const u8 *>(scales) +
              (base + k0 / kBlock) * kCodeBytes);
          bits[0] = chunk.x;
          ahead[0] = chunk.y;
          ahead[1] = chunk.z;
          ahead[2] = chunk.w;
        } else {
          bits[0] = ahead[0];
          ahead[0] = ahead[1];
          ahead[1] = ahead[2];
        }
        return;
      }
    }
    if constexpr (kWord) {
      bits[0] = *reinterpret_cast<const u32 *>(
          static_cast<const u8 *>(scales) + (base + k0 / kBlock) * kCodeBytes);
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int k = k0 + j * Cfg::kPromoteK;
        bits[j] =
            k < Cfg::K ? loadScaleBits<kE8M0>(scales, base + k / kBlock) : 0u;
      }
    }
  }
  __device__ __forceinline__ float factor(int j) const {
    if constexpr (kWord && kE8M0)
      return decodeScale<kE8M0>((bits[0] >> (8 * j)) & 0xFF);
    else if constexpr (kWord)
      return decodeScale<kE8M0>(bits[0]);
    else
      return decodeScale<kE8M0>(bits[j]);
  }
};

/// Warps 1..3 (thread `tid` in [0, 96)): for every tile and K stage, read
/// the local scales the stage's promotion blocks need, decode them to FP32
/// factors, and write the stage's tables once it is free; then each thread
/// arrives on its "full" barrier. The global loads of a stage are issued before
/// waiting for it to be free, so their latency hides behind the consumers'
/// work. Thread t handles table rows t, t + 96, ...: one row of A (all the
/// stage's blocks of it) and one column of B.
///
/// Row table [TileM][kPer]: A's factor times B's tile-uniform one (per-group
/// NxN B), 0 for rows past M. Column table [kPer][TileN]: B's factor, 0 for
/// columns past N. Blocks past K (the tail stage) are never read.
template <class Cfg>
__device__ __forceinline__ void produceTables(const SharedStorage<Cfg> &smem,
                                              const Args &args, int m, int tid,
                                              u32 rank) {
  constexpr int kPer = Cfg::kPromotesPerStage;
  constexpr int kThreads = Cfg::kLoaderThreads;
  constexpr int kRowIters =
      Cfg::kRowFactor ? (Cfg::TileM + kThreads - 1) / kThreads : 0;
  constexpr int kColIters =
      Cfg::kColFactor ? (Cfg::TileN + kThreads - 1) / kThreads : 0;
  constexpr bool kUniformB = Cfg::kHasLocalB && !Cfg::kColFactor;
  // Chunked loads for the one table of one-sided factors (with both, the
  // registers spill); a uniform B is one broadcast load per warp anyway.
  constexpr int kBlockA = Cfg::kBlockA > 0 ? Cfg::kBlockA : 32;
  constexpr int kBlockB = Cfg::kBlockB > 0 ? Cfg::kBlockB : 32;
  constexpr bool kOneTable = !(Cfg::kRowFactor && Cfg::kColFactor);
  using RowA =
      ScaleRow<Cfg, Cfg::kLocalAE8M0, kBlockA, Cfg::kBlockRowsA, kOneTable>;
  using ColB =
      ScaleRow<Cfg, Cfg::kLocalBE8M0, kBlockB, Cfg::kBlockRowsB, kOneTable>;
  using UniformB =
      ScaleRow<Cfg, Cfg::kLocalBE8M0, kBlockB, Cfg::kBlockRowsB, false>;
  const bool alignedA = isAligned16(args.aLocal);
  const bool alignedB = isAligned16(args.bLocal);
  Ring<Cfg::Stages> ring;
  TileOrder<Cfg> order(m, rank);
  // Kept across stages: chunked loads serve four.
  RowA rowsA[kRowIters > 0 ? kRowIters : 1];
  UniformB uniformB;
  ColB colsB[kColIters > 0 ? kColIters : 1];
  for (int t = order.first; t < order.total; t += order.stride) {
    int m0, n0;
    order.coords(t, m0, n0);
    const int kBegin = order.kBegin(t);
    for (int ks = 0; ks < Cfg::kUnitKStages; ++ks) {
      const int k0 = kBegin + ks * Cfg::kStageK;
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        const int r = tid + i * kThreads;
        if constexpr (Cfg::kHasLocalA)
          if (r < Cfg::TileM && m0 + r < m)
            rowsA[i].load(args.aLocal, m0 + r, ks, k0, alignedA);
      }
      if constexpr (kUniformB)
        if (n0 < Cfg::N) // a cluster's edge tile may lie past N
          uniformB.load(args.bLocal, n0, ks, k0, alignedB);
#pragma unroll
      for (int i = 0; i < kColIters; ++i) {
        const int c = tid + i * kThreads;
        if (c < Cfg::TileN && n0 + c < Cfg::N)
          colsB[i].load(args.bLocal, n0 + c, ks, k0, alignedB);
      }

      ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
      float *rowTable = smem.rowTable(ring.stage);
      float *colTable = smem.colTable(ring.stage);
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        const int r = tid + i * kThreads;
        if (r < Cfg::TileM) {
          const bool valid = m0 + r < m;
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            float f = 1.0f;
            if constexpr (Cfg::kHasLocalA)
              f = rowsA[i].factor(j);
            if constexpr (kUniformB)
              f *= uniformB.factor(j);
            rowTable[r * kPer + j] = valid ? f : 0.0f;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kColIters; ++i) {
        const int c = tid + i * kThreads;
        if (c < Cfg::TileN) {
          const bool valid = n0 + c < Cfg::N;
#pragma unroll
          for (int j = 0; j < kPer; ++j)
            colTable[j * Cfg::TileN + c] = valid ? colsB[i].factor(j) : 0.0f;
        }
      }
      // Every thread arrives after its own writes. (One arrival per warp
      // after a warp barrier is as correct under the PTX memory model and
      // measured within the noise, but compute-sanitizer's racecheck does
      // not follow it and reports the table writes as races.)
      ptx::mbarrierArrive(smem.full(ring.stage));
      ring.advance();
    }
  }
}

} // namespace moss::gemm::detail
