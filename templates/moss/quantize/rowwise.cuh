// moss/quantize/rowwise.cuh - row-wise quantization (blocks along K, the
// contiguous axis) for every scheme but 2-D per-group blocks.
//
// A CTA owns whole rows, and keeps Args::stages of them in flight: one
// thread copies each row into a shared-memory stage with a bulk copy (TMA)
// while the CTA works on an earlier one, so the loads never wait on the
// arithmetic. Each thread takes VecsPerThread 16-byte vectors of the row
// from its stage into registers (vector v = threadIdx.x + i * Threads), the
// lanes holding one block reduce its amax with shuffles, and a per-row
// global scale is a CTA reduction over the row held in registers: the input
// is read once and the codes written once. A
// per-tensor global scale needs the whole tensor first: a reduce pass leaves
// the max in Args::globalBits and the quantize pass reads it (two passes).
//
// Fold (two-level and MXFP8, docs/NUMERICS-CONTRACT.md section 8): the
// codes are rescaled to the largest block factor of their row (2) or of
// their 128-wide K group (1) as they are written, and the FP32 factors
// g * 2^E go to Args::global ([rows]) or Args::local ([rows, K / 128]); the
// E8M0 factors are not written. moss::numerics::quantize with
// QuantizeOptions::fold writes the same bits.
//
// Gather makes output row r the quantization of input row Args::gatherRows[r]
// (a mixture-of-experts dispatch reads each token's row for each of its
// experts): only the staging copy's source changes.
//
// Column maxima (the first kernel of a dual-layout quantize in two kernels,
// columnmax.cuh): a thread's vectors hold the same columns in every row it
// takes, so it keeps their largest magnitudes in registers and writes them
// once, as its CTA's row of Args::columnMax.
//
// K = 0 compiles a kernel for any K (Args::cols) up to Seg, a whole
// number of vectors: one variant per (threads, scheme) serves every K that
// needs that many threads, so it can be compiled before K is known (the
// first call of a new K loads it instead of compiling). Its rows are one
// segment, the vectors past K masked as a short last segment's are.
//
// Rows longer than a CTA holds in registers are cut into segments of Seg
// values (the last one may be shorter), each a whole number of blocks and
// 128 fold groups, and a CTA takes segments as it takes rows. What spans the
// whole row then comes from a reduce pass: the row's global
// (kGlobalFromRowBits, Args::globalBits per row) or, for a row fold without
// one, the row's largest finite block (Args::foldBits per row).
#pragma once

#include "moss/quantize/common.cuh"
#include "moss/quantize/fold.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::quantize {

/// The row-wise kernel's compile-time shape. `Block` is the block length
/// along K for block schemes and ignored (pass K, or Seg) for
/// per-tensor/per-row. K = 0: any K up to Seg, read from Args::cols.
template <int In_, int Kind_, int Fmt_, int Block_, int K_, int Threads_,
          int Source_, int Fold_ = 0, int Seg_ = K_, bool Gather_ = false,
          bool ColumnMax_ = false>
struct RowwiseConfig {
  static constexpr int In = In_, Kind = Kind_, Fmt = Fmt_, Block = Block_,
                       K = K_, Threads = Threads_, Source = Source_,
                       Fold = Fold_, Seg = Seg_;
  /// Whether K is only known at run time (one segment of at most Seg).
  static constexpr bool kAnyK = K == 0;
  /// Whether output rows read input rows by Args::gatherRows (a variant of
  /// its own: the index costs the other kernels registers).
  static constexpr bool Gather = Gather_;
  /// Whether each CTA also writes its column maxima (Args::columnMax).
  static constexpr bool ColumnMax = ColumnMax_;
  /// Lanes that hold one 128-wide K group of the 128 fold.
  static constexpr int kGroupLanes = kFoldGroupCols / kVecElements<In>;
  static constexpr int kVecElems = kVecElements<In>;
  /// Segments per row, and the values of the last one (any K: at most).
  static constexpr int kSegments = kAnyK ? 1 : (K + Seg - 1) / Seg;
  static constexpr int kLastSeg = kAnyK ? Seg : K - (kSegments - 1) * Seg;
  /// Vectors of a (whole) segment.
  static constexpr int kVecs = Seg / kVecElems;
  static constexpr int kVecsPerThread = (kVecs + Threads - 1) / Threads;
  /// Whether every thread's vectors all lie in every segment.
  static constexpr bool kWholeRows =
      !kAnyK && kVecs % Threads == 0 && kLastSeg == Seg;
  static constexpr bool kBlocks =
      Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel;
  /// Whether a reduce pass leaves one word per row: the row's global, or a
  /// segmented row fold's largest finite block.
  static constexpr bool kReducesRows =
      Source == kGlobalFromRowBits || (kSegments > 1 && Fold == kFoldRow);
  static constexpr bool kHasReducePass =
      Source == kGlobalFromBits || kReducesRows;
  /// Lanes that hold one block (the whole warp for groups wider than it).
  static constexpr int kBlockLanes =
      (Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel)
          ? Block / kVecElems
          : 32;
  static_assert(K % kVecElems == 0 && Seg % kVecElems == 0 &&
                    (kAnyK || Seg <= K),
                "K and its segments must be whole numbers of vectors");
  static_assert(kSegments == 1 ||
                    ((!kBlocks || Seg % Block == 0) &&
                     (Fold != kFold128 || Seg % kFoldGroupCols == 0) &&
                     Source != kGlobalInCta),
                "segments hold whole blocks and fold groups, and take a "
                "row's global from the reduce pass");
  static_assert(kBlockLanes >= 1 && kBlockLanes <= 32 &&
                    (kBlockLanes & (kBlockLanes - 1)) == 0,
                "a block must span 1 to 32 lanes");
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps");
  static_assert(Fold == 0 || Kind == kMXFP8 || Kind == kTwoLevel,
                "only E8M0 block factors fold");
  static_assert(!ColumnMax ||
                    (kSegments == 1 && !Gather && Source != kGlobalFromBits &&
                     Source != kGlobalFromRowBits),
                "column maxima of whole rows, in a kernel without a reduce "
                "pass");
};

/// The codes of one 16-byte input vector, packed little-endian (element 0
/// in the lowest byte): 4 bytes for FP32 input, 8 for BF16.
template <int In, int Fmt, bool Scaled, bool MayBeInfinite>
__device__ __forceinline__ void encodeVector(const Vec16 &v,
                                             const BlockScale &s,
                                             uint32_t (&codes)[2],
                                             uint32_t &saturated) {
  constexpr int n = kVecElements<In>;
  float x[n];
#pragma unroll
  for (int e = 0; e < n; ++e)
    x[e] = vecElement<In>(v, e);
  uint32_t words[n / 4];
  encodeValues<Fmt, Scaled, MayBeInfinite>(x, s, words, saturated);
#pragma unroll
  for (int w = 0; w < n / 4; ++w)
    codes[w] = words[w];
}

template <class Config> __device__ void rowwise(const Args &args, int pass) {
  constexpr int In = Config::In, Kind = Config::Kind, Fmt = Config::Fmt;
  constexpr int Threads = Config::Threads, VPT = Config::kVecsPerThread;
  constexpr int Lanes = Config::kBlockLanes;
  constexpr int Fold = Config::Fold, Segments = Config::kSegments;
  constexpr bool kBlocks = Config::kBlocks;
  constexpr bool kRowGlobal =
      Config::Source == kGlobalInCta || Config::Source == kGlobalFromRowBits;
  // Blocks of one vector step of a warp. Where all a warp's blocks fit its
  // lanes, lane L computes the scale of its block L once and shuffles it to
  // the lanes that hold the block (the scale costs as much as encoding a
  // vector).
  constexpr int kStepBlocks = kBlocks ? 32 / Lanes : 1;
  constexpr bool kOwnScales = kBlocks && VPT * kStepBlocks <= 32;
  __shared__ uint32_t scratch[2][Threads / 32];
  int reductions = 0;

  const int lane = threadIdx.x & 31;
  uint32_t saturated = 0, nonFinite = 0;
  uint32_t reduced = 0; // reduce pass: this thread's contribution

  // The quantize pass after a reduce pass walks the rows backwards: the rows
  // the reduce pass read last are still in L2.
  const bool reversed = pass == kQuantizePass && Config::kHasReducePass;
  constexpr uint32_t kElemBytes = InputTraits<In>::kBytes;
  constexpr uint32_t kSegBytes = Config::Seg * kElemBytes;
  extern __shared__ __align__(128) unsigned char rowStages[];
  __shared__ uint64_t stageFull[kMaxRowStages];
  const int stages = args.stages;
  const uint32_t stageBase = ptx::smemAddress(rowStages);
  const uint32_t fullBase = ptx::smemAddress(stageFull);
  // Segments of this CTA (rows when unsegmented): blockIdx.x, blockIdx.x +
  // gridDim.x, ...; the host keeps rows * Segments within an int.
  const int units = args.rows * Segments;
  const int myRows = int(blockIdx.x) < units
                         ? (units - 1 - int(blockIdx.x)) / int(gridDim.x) + 1
                         : 0;
  auto unitOf = [&](int j) {
    int step = int(blockIdx.x) + j * int(gridDim.x);
    return reversed ? units - 1 - step : step;
  };
  // The row's values, and the vectors of a segment (a short last one
  // fewer), whose bytes a stage copies.
  const int rowValues = Config::kAnyK ? args.cols : Config::K;
  auto vecsOf = [&](int seg) {
    return Config::kAnyK ? args.cols / Config::kVecElems
           : Segments > 1 && seg == Segments - 1
               ? Config::kLastSeg / Config::kVecElems
               : Config::kVecs;
  };
  // Where segment `seg` of `row` starts, in values.
  auto startOf = [&](int row, int seg) {
    return size_t(row) * rowValues + size_t(seg) * Config::Seg;
  };
  // Thread 0 fills stage `stage` with the CTA's row j. A reduce pass leaves
  // what it read in L2 for the quantize pass; other reads are the last of
  // their bytes.
  const bool keepInL2 = pass == kReducePass;
  auto stageRow = [&](int j, int stage) {
    const uint32_t full = fullBase + 8u * uint32_t(stage);
    const uint32_t dst = stageBase + uint32_t(stage) * kSegBytes;
    const int unit = unitOf(j), seg = unit % Segments;
    const uint32_t bytes = uint32_t(vecsOf(seg)) * 16u;
    // The input row of this output row (a gather reads it from the index).
    int source = unit / Segments;
    if constexpr (Config::Gather) {
      source = args.gatherRows[source];
      source = source < 0                        ? 0
               : source >= args.gatherSourceRows ? args.gatherSourceRows - 1
                                                 : source;
    }
    const char *src =
        static_cast<const char *>(args.x) + startOf(source, seg) * kElemBytes;
    ptx::mbarrierArriveExpectTx(full, bytes);
    if (keepInL2)
      ptx::bulkLoad1d<false>(dst, src, bytes, full);
    else
      ptx::bulkLoad1d<true>(dst, src, bytes, full);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s)
      ptx::mbarrierInit(fullBase + 8u * uint32_t(s), 1);
    ptx::fenceBarrierInit();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int j = 0; j < stages && j < myRows; ++j)
      stageRow(j, j);

  // A global per tensor (or none) is the same for every row.
  GlobalScale tensorScale = makeGlobal(1.0f);
  if (pass == kQuantizePass) {
    if constexpr (Config::Source == kGlobalFromBits)
      tensorScale = makeGlobal(globalFromBits<Kind, Fmt>(*args.globalBits));
    else if constexpr (Config::Source == kGlobalFromScale)
      tensorScale = makeGlobal(*args.scaleIn);
  }

  // Row j sits in stage j % stages, filled for the (j / stages)-th time.
  int stage = 0;
  uint32_t phase = 0;
  // Column maxima: per word of each of this thread's vectors.
  uint32_t columnBits[Config::ColumnMax ? VPT : 1][4] = {};
  for (int j = 0; j < myRows; ++j) {
    const int unit = unitOf(j);
    const int row = unit / Segments, seg = unit % Segments;
    const size_t start = startOf(row, seg);
    const int segVecs = vecsOf(seg);
    auto inSegment = [&](int vec) {
      return Config::kWholeRows || vec < segVecs;
    };
    const uint32_t stageAddress = stageBase + uint32_t(stage) * kSegBytes;
    ptx::mbarrierWait(fullBase + 8u * uint32_t(stage), phase);
    Vec16 v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      if (inSegment(vec))
        ptx::loadShared128(stageAddress + uint32_t(vec) * 16u, v[i].w);
    }
    if constexpr (Config::ColumnMax) {
#pragma unroll
      for (int i = 0; i < VPT; ++i)
        if (inSegment(threadIdx.x + i * Threads))
#pragma unroll
          for (int w = 0; w < 4; ++w)
            columnBits[i][w] =
                wordMagnitudeMax<In>(columnBits[i][w], v[i].w[w]);
    }

    uint32_t blockBits[VPT];
    // This thread's largest contribution to the row's (or tensor's) global.
    uint32_t unitBits = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      uint32_t bits = 0;
      if (inSegment(vec))
        bits = vectorMaxBits<In>(v[i]);
      // Lanes past the segment's end hold 0 and form whole blocks of their own.
      // Without blocks a thread's own maximum is enough: it bounds its
      // quotients, and the row's and tensor's reductions take it.
      blockBits[i] = kBlocks ? groupMax<Lanes>(bits) : bits;
      uint32_t c = globalContribution<Kind>(blockBits[i]);
      unitBits = c > unitBits ? c : unitBits;
    }

    // Every thread has its part of the segment: the barrier that lets the
    // stage take segment j + stages is also the row's reduction, where there
    // is one: a reduce pass's word per row (its global's contribution, or
    // its largest finite block), or a global computed in the CTA.
    const bool reduceRow = pass == kReducePass
                               ? Config::kReducesRows
                               : Config::Source == kGlobalInCta;
    uint32_t rowBits = unitBits;
    if (reduceRow)
      rowBits = ctaMaxOneBarrier<Threads>(unitBits, scratch, reductions);
    else
      __syncthreads();
    if (threadIdx.x == 0 && j + stages < myRows)
      stageRow(j + stages, stage);
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }

    if (pass == kReducePass) {
      reduced = rowBits > reduced ? rowBits : reduced;
      if constexpr (Config::kReducesRows) {
        unsigned *rowWords = Config::Source == kGlobalFromRowBits
                                 ? args.globalBits
                                 : args.foldBits;
        if (threadIdx.x == 0 && rowBits != 0)
          atomicMax(rowWords + row, rowBits);
      }
      continue;
    }

    // The global scale of this row.
    GlobalScale g = tensorScale;
    if constexpr (kRowGlobal) {
      if constexpr (Config::Source == kGlobalFromRowBits)
        rowBits = args.globalBits[row];
      const float global = globalFromBits<Kind, Fmt>(rowBits);
      g = makeGlobal(global);
      // A row's first segment writes its global and counts it.
      if (threadIdx.x == 0 && seg == 0) {
        if constexpr (Fold == kFoldNone)
          args.global[row] = global;
        if (Kind == kPerRow && rowBits >= kInfBits)
          ++nonFinite;
      }
    }

    // The scale codes of this thread's vectors.
    ScaleCode scaleCodes[VPT];
    if constexpr (kOwnScales) {
      // Lane L takes block L % kStepBlocks of step L / kStepBlocks.
      const int ownStep = lane / kStepBlocks;
      const int ownLane = (lane % kStepBlocks) * Lanes;
      uint32_t ownBits = 0;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        uint32_t bits = __shfl_sync(0xFFFFFFFFu, blockBits[i], ownLane);
        ownBits = i == ownStep ? bits : ownBits;
      }
      const ScaleCode own = blockScaleCode<Kind, Fmt>(ownBits, g);
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const int from = i * kStepBlocks + lane / Lanes;
        scaleCodes[i].a = __shfl_sync(0xFFFFFFFFu, own.a, from);
        scaleCodes[i].b =
            Kind == kPerGroup ? __shfl_sync(0xFFFFFFFFu, own.b, from) : 0u;
      }
      // The block's scale, written and counted once.
      const int ownVec = (threadIdx.x & ~31) + ownLane + ownStep * Threads;
      if (ownStep < VPT && inSegment(ownVec)) {
        const size_t blockIndex = start / Config::Block + size_t(ownVec) / Lanes;
        if constexpr (Kind == kPerGroup)
          static_cast<float *>(args.local)[blockIndex] =
              bitsFloat(own.a & ~kMaySaturateBit<Kind>);
        else if constexpr (Fold == kFoldNone)
          static_cast<uint8_t *>(args.local)[blockIndex] = uint8_t(own.a);
        nonFinite += ownBits >= kInfBits;
      }
    } else {
#pragma unroll
      for (int i = 0; i < VPT; ++i)
        scaleCodes[i] = blockScaleCode<Kind, Fmt>(blockBits[i], g);
    }

    // The fold's reference exponents: the largest E8M0 code of the row, or
    // of each vector's 128-wide group, over the blocks that are not NaN
    // (code 0 = 2^-127 where there are none).
    int reference[VPT];
    if constexpr (Fold != kFoldNone) {
      uint32_t rowCode = 0;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        int vec = threadIdx.x + i * Threads;
        uint32_t code = inSegment(vec) ? scaleCodes[i].a & 0xFFu : 0u;
        code = code == 0xFFu ? 0u : code;
        if constexpr (Fold == kFold128)
          reference[i] = int(groupMax<Config::kGroupLanes>(code)) - 127;
        rowCode = code > rowCode ? code : rowCode;
      }
      if constexpr (Fold == kFoldRow) {
        // Where the row's largest finite block is known (a global per row,
        // or a segmented row's reduce pass), so is the reference: codes grow
        // with a block's amax, so that block's code is the largest, and no
        // second reduction is needed.
        uint32_t rowE8m0;
        if constexpr (kRowGlobal)
          rowE8m0 = scaleCodeOf<Kind, Fmt>(rowBits, g).a & 0xFFu;
        else if constexpr (Segments > 1)
          rowE8m0 = scaleCodeOf<Kind, Fmt>(args.foldBits[row], g).a & 0xFFu;
        else
          rowE8m0 = ctaMaxOneBarrier<Threads>(rowCode, scratch, reductions);
        const int rowReference = int(rowE8m0) - 127;
#pragma unroll
        for (int i = 0; i < VPT; ++i)
          reference[i] = rowReference;
        if (threadIdx.x == 0 && seg == 0)
          args.global[row] = mulRn(g.value, exp2i(rowReference));
      }
    }

    uint8_t *dst = args.q + start;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      if (!inSegment(vec))
        continue;
      const BlockScale s = expandScale<Kind, Fmt>(scaleCodes[i], g);
      uint32_t codes[2];
      encodeVector<In, Fmt, Kind == kTwoLevel,
                   Config::Source == kGlobalFromScale>(v[i], s, codes,
                                                       saturated);
      if constexpr (Fold != kFoldNone) {
        foldBlockWords<Fmt, Config::kVecElems / 4>(codes, reference[i], s.e8m0);
        if constexpr (Fold == kFold128)
          if ((lane & (Config::kGroupLanes - 1)) == 0)
            static_cast<float *>(
                args.local)[start / kFoldGroupCols +
                            size_t(vec) / Config::kGroupLanes] =
                mulRn(g.value, exp2i(reference[i]));
      }
      uint8_t *out = dst + vec * Config::kVecElems;
      if constexpr (Config::kVecElems == 4)
        *reinterpret_cast<uint32_t *>(out) = codes[0];
      else
        store8(out, codes[0], codes[1]);
      if constexpr (kBlocks && !kOwnScales) {
        // The first lane of each block writes its scale and counts it.
        if ((lane & (Lanes - 1)) == 0) {
          size_t blockIndex = start / Config::Block + size_t(vec) / Lanes;
          if constexpr (Kind == kPerGroup)
            static_cast<float *>(args.local)[blockIndex] = s.divisor;
          else if constexpr (Fold == kFoldNone)
            static_cast<uint8_t *>(args.local)[blockIndex] = uint8_t(s.e8m0);
          nonFinite += blockBits[i] >= kInfBits;
        }
      }
    }
  }

  if (pass == kReducePass) {
    if constexpr (Config::Source == kGlobalFromBits) {
      reduced = ctaMaxOneBarrier<Threads>(reduced, scratch, reductions);
      if (threadIdx.x == 0 && reduced != 0)
        atomicMax(args.globalBits, reduced);
    }
    return;
  }
  if constexpr (Config::ColumnMax) {
    uint32_t *part =
        args.columnMax + size_t(blockIdx.x) * (rowValues * kElemBytes / 4);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int vec = threadIdx.x + i * Threads;
      if (Config::kWholeRows || vec < vecsOf(0))
        asm volatile(
            "st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(part + 4 * vec),
            "r"(columnBits[i][0]), "r"(columnBits[i][1]), "r"(columnBits[i][2]),
            "r"(columnBits[i][3])
            : "memory");
    }
  }
  // A per-tensor scale is written, and a non-finite tensor counted, once.
  if constexpr (Config::Source == kGlobalFromBits ||
                Config::Source == kGlobalFromScale) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      if (args.global && Fold == kFoldNone)
        args.global[0] = tensorScale.value;
      if (Kind == kPerTensor && Config::Source == kGlobalFromBits &&
          *args.globalBits >= kInfBits)
        ++nonFinite;
    }
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, nonFinite);
}

} // namespace moss::quantize
