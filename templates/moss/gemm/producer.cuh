// moss/gemm/producer.cuh - the producer warpgroup: TMA loads and the
// per-stage scale-factor tables.
#pragma once

#include "moss/gemm/pipeline.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/sync.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::gemm_kernel::detail {

/// Loads stage `stage` (K offset k0 of the tile at A's row m0 and B's row
/// n0, which for an m-grouped GEMM includes its expert's group * N,
/// TileOrder::rowB): arms
/// its "full" barrier with the stage's bytes and issues A's [TileM x 128]
/// and B's [TileN x 128] boxes into it (A's box stops at M when all of M fits
/// in fewer rows: boxRowsA). Rows past M or N and columns past K arrive as
/// zeros (the box is always complete, so the expected byte count is the
/// same for every stage). In a 2-CTA cluster the shared operand is loaded
/// in halves, each CTA multicasting its half to both.
template <class Cfg>
__device__ __forceinline__ void
loadStage(const SharedStorage<Cfg> &smem, const CUtensorMap &tmaA,
          const CUtensorMap &tmaB, u32 stage, u32 txBytes, int k0, int m0,
          int n0, u32 rank) {
  constexpr int kHalfA = Cfg::TileM / 2, kHalfB = Cfg::TileN / 2;
  const u32 full = smem.full(stage);
  ptx::mbarrierArriveExpectTx(full, txBytes);
  if constexpr (Cfg::kMulticastA)
    ptx::tmaLoad2dMulticast(smem.tileA(stage) + rank * kHalfA * 128, tmaA, k0,
                            m0 + static_cast<int>(rank) * kHalfA, full, 0x3);
  else
    ptx::tmaLoad2d(smem.tileA(stage), tmaA, k0, m0, full);
  if constexpr (Cfg::kMulticastB)
    ptx::tmaLoad2dMulticast(smem.tileB(stage) + rank * kHalfB * 128, tmaB, k0,
                            n0 + static_cast<int>(rank) * kHalfB, full, 0x3);
  else
    ptx::tmaLoad2d(smem.tileB(stage), tmaB, k0, n0, full);
}

/// In a cluster, peers arrive on this CTA's "empty" barriers and multicast
/// into its stages until every stage has been released: the loading thread
/// waits for that before its CTA may exit.
template <class Cfg>
__device__ __forceinline__ void drainRing(const SharedStorage<Cfg> &smem,
                                          Ring<Cfg::Stages> ring) {
  if constexpr (Cfg::kClusterSize > 1) {
    for (int s = 0; s < Cfg::Stages; ++s) {
      ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
      ring.advance();
    }
  }
}

/// Without block scales, one thread of the producer warpgroup: for every
/// tile and K stage, waits for the stage to be free and loads it.
template <class Cfg>
__device__ __forceinline__ void
produceTiles(const SharedStorage<Cfg> &smem, const CUtensorMap &tmaA,
             const CUtensorMap &tmaB, const Args &args, int m, u32 rank) {
  Ring<Cfg::Stages> ring;
  TileOrder<Cfg> order(m, rank, args);
  const u32 txBytes = static_cast<u32>(stageTxBytes(Cfg::kParams, m));
  for (int t = order.first; t < order.total; t += order.stride) {
    const Unit unit = order.unit(t);
    const int kBegin = order.kBegin(t, unit), stages = order.kStages(unit);
    for (int ks = 0; ks < stages; ++ks) {
      ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
      loadStage<Cfg>(smem, tmaA, tmaB, ring.stage, txBytes,
                     kBegin + ks * Cfg::kStageK, unit.m0,
                     TileOrder<Cfg>::rowB(unit), rank);
      ring.advance();
    }
  }
  drainRing<Cfg>(smem, ring);
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

/// A row table's row: the row's factors of a stage's kPer promotion blocks
/// (16, 8 or 4 bytes, at a multiple of its size), for one vector store.
template <int kPer> struct alignas(4 * kPer) TableRow { float f[kPer]; };

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
/// when rows are 16-byte aligned, the words of four stages (a chunk) come
/// in one 16-byte load (kChunked; a work unit's stages come in whole
/// chunks: kUnitKStages % 4 == 0), a quarter of the sectors, and each
/// chunk is fetched while the one before it is used (produceTables).
/// Otherwise each stage loads its own scales.
/// kMayChunk: whether this operand's rows can afford the eight registers
/// (the producer has 40).
///
/// A k-grouped GEMM's rows are Args::k long (a multiple of 128, so of
/// every block and stage): its scales per row are a run-time `perRow`, and
/// its units' stage counts too, so it takes no chunks.
template <class Cfg, bool kE8M0, int kBlock, int kBlockRows, bool kMayChunk>
struct ScaleRow {
  static constexpr int kPer = Cfg::kPromotesPerStage;
  static constexpr int kPerRow = Cfg::K / kBlock; // scales per row
  static constexpr int kCodeBytes = kE8M0 ? 1 : 4;
  static constexpr bool kWord = kBlock == Cfg::kPromoteK &&
                                kPer * kCodeBytes == 4 &&
                                (Cfg::kGroupedK || kPerRow % kPer == 0);
  static constexpr bool kChunked = kMayChunk && kWord && !Cfg::kGroupedK &&
                                   (kPerRow * kCodeBytes) % 16 == 0 &&
                                   Cfg::kTailSteps == 0 &&
                                   Cfg::kUnitKStages % 4 == 0;
  static constexpr int kChunkWords = kChunked ? 4 : 1;
  u32 bits[kWord ? 1 : kPer] = {}; ///< the stage's
  u32 chunk[kChunkWords] = {};     ///< the current chunk's four stages
  u32 next[kChunkWords] = {};      ///< the next chunk, on its way

  /// Where `row`'s scales for the stage at K offset k0 start, in codes
  /// (`perRow`: scales per row, kPerRow unless k-grouped).
  static __device__ __forceinline__ u32 index(int row, int k0, int perRow) {
    return static_cast<u32>(row / kBlockRows) * static_cast<u32>(perRow) +
           k0 / kBlock;
  }

  /// Loads the stage at K offset k0 of `row` into `bits`.
  __device__ __forceinline__ void load(const void *scales, int row, int k0,
                                       int perRow) {
    if constexpr (kWord) {
      bits[0] =
          *reinterpret_cast<const u32 *>(static_cast<const u8 *>(scales) +
                                         index(row, k0, perRow) * kCodeBytes);
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int k = k0 + j * Cfg::kPromoteK;
        // A k-grouped GEMM has no tail stage.
        bits[j] = Cfg::kGroupedK || k < Cfg::K
                      ? loadScaleBits<kE8M0>(scales, index(row, k, perRow))
                      : 0u;
      }
    }
  }

  /// Issues the load of the chunk whose first stage is at K offset k0 into
  /// `next` (kChunked only; the scales must be 16-byte aligned).
  __device__ __forceinline__ void fetchChunk(const void *scales, int row,
                                             int k0) {
    if constexpr (kChunked) {
      const Word4 words = *reinterpret_cast<const Word4 *>(
          static_cast<const u8 *>(scales) +
          index(row, k0, kPerRow) * kCodeBytes);
      next[0] = words.x;
      next[1] = words.y;
      next[2] = words.z;
      next[3] = words.w;
    }
  }

  /// At a chunk's first stage: the fetched chunk becomes the current one.
  __device__ __forceinline__ void takeChunk() {
#pragma unroll
    for (int i = 0; i < kChunkWords; ++i)
      chunk[i] = next[i];
  }

  /// Stage j (0..3) of the current chunk into `bits`. Called with a
  /// constant j (an unrolled loop), so the chunk stays in registers and
  /// each word dies once used.
  __device__ __forceinline__ void pickStage(int j) {
    if constexpr (kChunked)
      bits[0] = chunk[j];
  }

  __device__ __forceinline__ float factor(int j) const {
    if constexpr (kWord && kE8M0)
      return decodeScale<kE8M0>((bits[0] >> (8 * j)) & 0xFF);
    else if constexpr (kWord)
      return decodeScale<kE8M0>(bits[0]);
    else
      return decodeScale<kE8M0>(bits[j]);
  }

  /// The stage's kPer factors. A word of four E8M0 codes decodes by shifts
  /// alone (code c is the float bits c << 23) unless a code is 0 (2^-127,
  /// subnormal) or 255 (NaN); the warp takes the exact decode only when one
  /// of its rows has such a code. Every producer instruction slows the
  /// FFMAs beside it: 2.28-2.29 -> 2.25 M cycles for MOSS at 8192^3.
  __device__ __forceinline__ void factors(float (&f)[kPer]) const {
    if constexpr (kWord && kE8M0) {
      const u32 w = bits[0];
      if (!ptx::anyActiveLane(hasSpecialCode(w))) {
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          f[j] = ptx::bitsFloat((j < 3 ? w << (23 - 8 * j) : w >> 1) &
                                0x7F800000u);
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      f[j] = factor(j);
  }

  /// Whether a byte of `w` is 0x00 or 0xFF. (x - 0x01010101) & ~x &
  /// 0x80808080 is nonzero exactly when a byte of x is zero; here for x = w
  /// and for x = ~w (0xFEFEFEFE - w is ~w - 0x01010101).
  static __device__ __forceinline__ bool hasSpecialCode(u32 w) {
    const u32 zeroByte = (w - 0x01010101u) & ~w;
    const u32 onesByte = (0xFEFEFEFEu - w) & w;
    return ((zeroByte | onesByte) & 0x80808080u) != 0;
  }
};

/// With block scales, the whole producer warpgroup (thread `tid` in
/// [0, 128)): for every tile and K stage, read the local scales the stage's
/// promotion blocks need, decode them to FP32 factors, and once the stage is
/// free write its tables; then each thread arrives on its "full" barrier.
/// Thread 0 also loads the stage (loadStage) as soon as it is free. Thread
/// t handles table rows t, t + 128, ...: one row of A (all the stage's
/// blocks of it) and one column of B.
///
/// The scale loads must not pace the stages: a load issued right before
/// its stage's table is written puts its whole latency between two stages
/// whenever the consumers already freed the next one. So chunked scales
/// are fetched three stages ahead, across work units too; the per-stage
/// loads of the other cases go out before waiting for the stage to be
/// free, which hides their latency only while the ring is full.
///
/// Row table [TileM][kPer]: A's factor times B's tile-uniform one (per-group
/// NxN B), 0 for rows past M. Column table [kPer][TileN]: B's factor, 0 for
/// columns past N. Blocks past K (the tail stage) are never read.
template <class Cfg>
__device__ __forceinline__ void
produceTables(const SharedStorage<Cfg> &smem, const CUtensorMap &tmaA,
              const CUtensorMap &tmaB, const Args &args, int m, int tid,
              u32 rank) {
  constexpr int kPer = Cfg::kPromotesPerStage;
  constexpr int kThreads = Cfg::kLoaderThreads;
  constexpr int kRowIters =
      Cfg::kRowFactor ? (Cfg::TileM + kThreads - 1) / kThreads : 0;
  constexpr int kColIters =
      Cfg::kColFactor ? (Cfg::TileN + kThreads - 1) / kThreads : 0;
  constexpr bool kRowsA = Cfg::kHasLocalA && kRowIters > 0;
  constexpr bool kUniformB = Cfg::kHasLocalB && !Cfg::kColFactor;
  // Chunks for the one table of one-sided factors (with both, the
  // registers spill), not in a quick compile (the chunked path is a fifth
  // of the kernel's compile time there).
  constexpr int kBlockA = Cfg::kBlockA > 0 ? Cfg::kBlockA : 32;
  constexpr int kBlockB = Cfg::kBlockB > 0 ? Cfg::kBlockB : 32;
  constexpr bool kOneTable = !(Cfg::kRowFactor && Cfg::kColFactor);
  constexpr bool kMayChunk = kOneTable && !Cfg::kQuickCompile;
  using RowA =
      ScaleRow<Cfg, Cfg::kLocalAE8M0, kBlockA, Cfg::kBlockRowsA, kMayChunk>;
  // B's scale rows: one per output column, or the tile's uniform one.
  using ColB =
      ScaleRow<Cfg, Cfg::kLocalBE8M0, kBlockB, Cfg::kBlockRowsB, kMayChunk>;
  // Every scale this thread reads comes in chunks, or none does.
  constexpr bool kChunks = (!kRowsA || RowA::kChunked) &&
                           ((!kUniformB && kColIters == 0) || ColB::kChunked);
  const bool chunked =
      kChunks && (!kRowsA || isAligned16(args.aLocal)) &&
      ((!kUniformB && kColIters == 0) || isAligned16(args.bLocal));
  Ring<Cfg::Stages> ring;
  TileOrder<Cfg> order(m, rank, args);
  const u32 txBytes = static_cast<u32>(stageTxBytes(Cfg::kParams, m));
  // Scales per row of A and of B.
  const int perRowA = Cfg::kGroupedK ? args.k / kBlockA : RowA::kPerRow;
  const int perRowB = Cfg::kGroupedK ? args.k / kBlockB : ColB::kPerRow;
  RowA rowsA[kRowIters > 0 ? kRowIters : 1];
  ColB uniformB;
  ColB colsB[kColIters > 0 ? kColIters : 1];

  // The scales of unit u from its stage ks: the chunk into `next` (fetch),
  // or the one stage into `bits`. Rows past M (an m-grouped GEMM: past the
  // expert's) and columns past N (a cluster's edge tile may lie wholly past
  // N) are not read. An m-grouped expert's B scale rows start at row
  // group * N (TileOrder::rowB).
  auto loadScales = [&](int u, int ks, bool fetch) {
    const Unit unit = order.unit(u);
    const int m0 = unit.m0, n0 = unit.n0, rowB = TileOrder<Cfg>::rowB(unit);
    const int k0 = order.kBegin(u, unit) + ks * Cfg::kStageK;
#pragma unroll
    for (int i = 0; i < kRowIters; ++i) {
      const int r = tid + i * kThreads;
      if constexpr (kRowsA)
        if (r < Cfg::TileM && m0 + r < unit.rowEnd) {
          if (fetch)
            rowsA[i].fetchChunk(args.aLocal, m0 + r, k0);
          else
            rowsA[i].load(args.aLocal, m0 + r, k0, perRowA);
        }
    }
    if constexpr (kUniformB)
      if (n0 < Cfg::N) {
        if (fetch)
          uniformB.fetchChunk(args.bLocal, rowB, k0);
        else
          uniformB.load(args.bLocal, rowB, k0, perRowB);
      }
#pragma unroll
    for (int i = 0; i < kColIters; ++i) {
      const int c = tid + i * kThreads;
      if (c < Cfg::TileN && n0 + c < Cfg::N) {
        if (fetch)
          colsB[i].fetchChunk(args.bLocal, rowB + c, k0);
        else
          colsB[i].load(args.bLocal, rowB + c, k0, perRowB);
      }
    }
  };
  // Once the ring's stage is free: loads it (thread 0), writes its tables
  // for the unit's tile from the loaded scales and arrives.
  auto writeStage = [&](const Unit &unit, int k0) {
    const int m0 = unit.m0, n0 = unit.n0;
    ptx::mbarrierWait(smem.empty(ring.stage), ring.phase ^ 1);
    if (tid == 0)
      loadStage<Cfg>(smem, tmaA, tmaB, ring.stage, txBytes, k0, m0,
                     TileOrder<Cfg>::rowB(unit), rank);
    float *rowTable = smem.rowTable(ring.stage);
    float *colTable = smem.colTable(ring.stage);
#pragma unroll
    for (int i = 0; i < kRowIters; ++i) {
      const int r = tid + i * kThreads;
      if (r < Cfg::TileM) {
        const bool valid = m0 + r < unit.rowEnd;
        float fa[kPer];
        if constexpr (Cfg::kHasLocalA)
          rowsA[i].factors(fa);
        TableRow<kPer> row; // one vector store
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          float f = Cfg::kHasLocalA ? fa[j] : 1.0f;
          if constexpr (kUniformB)
            f *= uniformB.factor(j);
          row.f[j] = valid ? f : 0.0f;
        }
        reinterpret_cast<TableRow<kPer> *>(rowTable)[r] = row;
      }
    }
#pragma unroll
    for (int i = 0; i < kColIters; ++i) {
      const int c = tid + i * kThreads;
      if (c < Cfg::TileN) {
        const bool valid = n0 + c < Cfg::N;
        float fb[kPer];
        colsB[i].factors(fb);
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          colTable[j * Cfg::TileN + c] = valid ? fb[j] : 0.0f;
      }
    }
    // Every thread arrives after its own writes. (One arrival per warp
    // after a warp barrier is as correct under the PTX memory model and
    // measured within the noise, but compute-sanitizer's racecheck does
    // not follow it and reports the table writes as races.)
    ptx::mbarrierArrive(smem.full(ring.stage));
    ring.advance();
  };

  if (chunked && order.first < order.total)
    loadScales(order.first, 0, true);
  for (int t = order.first; t < order.total; t += order.stride) {
    const Unit unit = order.unit(t);
    const int kBegin = order.kBegin(t, unit);
    if (chunked) {
      for (int ks = 0; ks < Cfg::kUnitKStages; ks += 4) {
        // Unrolled, so each stage's words are registers that die once
        // written: the next chunk is fetched at the chunk's second stage
        // (three stages ahead; at the first, eight words per row would be
        // live and the producer's 40 registers spill).
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (j == 0) {
#pragma unroll
            for (int i = 0; i < kRowIters; ++i)
              rowsA[i].takeChunk();
            uniformB.takeChunk();
#pragma unroll
            for (int i = 0; i < kColIters; ++i)
              colsB[i].takeChunk();
          }
          if (j == 1) {
            if (ks + 4 < Cfg::kUnitKStages)
              loadScales(t, ks + 4, true);
            else if (t + order.stride < order.total)
              loadScales(t + order.stride, 0, true);
          }
#pragma unroll
          for (int i = 0; i < kRowIters; ++i)
            rowsA[i].pickStage(j);
          uniformB.pickStage(j);
#pragma unroll
          for (int i = 0; i < kColIters; ++i)
            colsB[i].pickStage(j);
          writeStage(unit, kBegin + (ks + j) * Cfg::kStageK);
        }
      }
    } else {
      for (int ks = 0; ks < order.kStages(unit); ++ks) {
        loadScales(t, ks, false);
        writeStage(unit, kBegin + ks * Cfg::kStageK);
      }
    }
  }
  if (tid == 0)
    drainRing<Cfg>(smem, ring);
}

} // namespace moss::gemm_kernel::detail
