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
#pragma once

#include "moss/quantize/common.cuh"
#include "moss/quantize/fold.cuh"
#include "moss/ptx/mbarrier.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::quantize {

/// The row-wise kernel's compile-time shape. `Block` is the block length
/// along K for block schemes and ignored (pass K) for per-tensor/per-row.
template <int In_, int Kind_, int Fmt_, int Block_, int K_, int Threads_,
          int Source_, int Fold_ = 0>
struct RowwiseConfig {
  static constexpr int In = In_, Kind = Kind_, Fmt = Fmt_, Block = Block_,
                       K = K_, Threads = Threads_, Source = Source_,
                       Fold = Fold_;
  /// Lanes that hold one 128-wide K group of the 128 fold.
  static constexpr int kGroupLanes = kFoldGroupCols / kVecElements<In>;
  static constexpr int kVecElems = kVecElements<In>;
  static constexpr int kVecs = K / kVecElems;
  static constexpr int kVecsPerThread = (kVecs + Threads - 1) / Threads;
  /// Whether every thread's vectors all lie in the row.
  static constexpr bool kWholeRows = kVecs % Threads == 0;
  /// Lanes that hold one block (the whole warp for groups wider than it).
  static constexpr int kBlockLanes =
      (Kind == kPerGroup || Kind == kMXFP8 || Kind == kTwoLevel)
          ? Block / kVecElems
          : 32;
  static_assert(K % kVecElems == 0, "K must be a whole number of vectors");
  static_assert(kBlockLanes >= 1 && kBlockLanes <= 32 &&
                    (kBlockLanes & (kBlockLanes - 1)) == 0,
                "a block must span 1 to 32 lanes");
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps");
  static_assert(Fold == 0 || Kind == kMXFP8 || Kind == kTwoLevel,
                "only E8M0 block factors fold");
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
  constexpr int Fold = Config::Fold;
  constexpr bool kBlocks = Kind == kPerGroup || Kind == kMXFP8 ||
                           Kind == kTwoLevel;
  __shared__ uint32_t scratch[Threads / 32];

  const int lane = threadIdx.x & 31;
  uint32_t saturated = 0, nonFinite = 0;
  uint32_t reduced = 0; // reduce pass: this thread's contribution

  // The quantize pass after a reduce pass walks the rows backwards: the rows
  // the reduce pass read last are still in L2.
  const bool reversed =
      pass == kQuantizePass && Config::Source == kGlobalFromBits;
  constexpr uint32_t kRowBytes = Config::K * InputTraits<In>::kBytes;
  extern __shared__ __align__(128) unsigned char rowStages[];
  __shared__ uint64_t stageFull[kMaxRowStages];
  const int stages = args.stages;
  const uint32_t stageBase = ptx::smemAddress(rowStages);
  const uint32_t fullBase = ptx::smemAddress(stageFull);
  // Rows of this CTA: blockIdx.x, blockIdx.x + gridDim.x, ...
  const int myRows =
      blockIdx.x < args.rows
          ? (args.rows - 1 - int(blockIdx.x)) / int(gridDim.x) + 1
          : 0;
  auto rowOf = [&](int j) {
    int step = int(blockIdx.x) + j * int(gridDim.x);
    return reversed ? args.rows - 1 - step : step;
  };
  // Thread 0 fills stage j % stages with the CTA's row j. A reduce pass
  // leaves what it read in L2 for the quantize pass; other reads are the
  // last of their bytes.
  const bool keepInL2 = pass == kReducePass;
  auto stageRow = [&](int j) {
    const uint32_t full = fullBase + 8u * uint32_t(j % stages);
    const uint32_t dst = stageBase + uint32_t(j % stages) * kRowBytes;
    const char *src =
        static_cast<const char *>(args.x) + size_t(rowOf(j)) * kRowBytes;
    ptx::mbarrierArriveExpectTx(full, kRowBytes);
    if (keepInL2)
      ptx::bulkLoad1d<false>(dst, src, kRowBytes, full);
    else
      ptx::bulkLoad1d<true>(dst, src, kRowBytes, full);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s)
      ptx::mbarrierInit(fullBase + 8u * uint32_t(s), 1);
    ptx::fenceBarrierInit();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int j = 0; j < stages && j < myRows; ++j)
      stageRow(j);

  for (int j = 0; j < myRows; ++j) {
    const int row = rowOf(j);
    const uint32_t stage = stageBase + uint32_t(j % stages) * kRowBytes;
    ptx::mbarrierWait(fullBase + 8u * uint32_t(j % stages),
                      uint32_t(j / stages) & 1u);
    Vec16 v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      if (Config::kWholeRows || vec < Config::kVecs)
        ptx::loadShared128(stage + uint32_t(vec) * 16u, v[i].w);
    }
    // Every thread has its part of the row: the stage takes row j + stages.
    __syncthreads();
    if (threadIdx.x == 0 && j + stages < myRows)
      stageRow(j + stages);

    uint32_t blockBits[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      uint32_t bits = 0;
      if (Config::kWholeRows || vec < Config::kVecs)
        bits = vectorMaxBits<In>(v[i]);
      // Lanes past the row end hold 0 and form whole blocks of their own.
      // Without blocks a thread's own maximum is enough: it bounds its
      // quotients, and the row's and tensor's reductions take it.
      blockBits[i] = kBlocks ? groupMax<Lanes>(bits) : bits;
    }

    if (pass == kReducePass) {
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        uint32_t c = globalContribution<Kind>(blockBits[i]);
        reduced = c > reduced ? c : reduced;
      }
      continue;
    }

    // The global scale of this row.
    float global = 1.0f;
    uint32_t rowBits = 0; // kGlobalInCta: the row's largest contribution
    if constexpr (Config::Source == kGlobalInCta) {
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        uint32_t c = globalContribution<Kind>(blockBits[i]);
        rowBits = c > rowBits ? c : rowBits;
      }
      rowBits = ctaMax<Threads>(rowBits, scratch);
      global = globalFromBits<Kind, Fmt>(rowBits);
      if (threadIdx.x == 0) {
        if constexpr (Fold == kFoldNone)
          args.global[row] = global;
        if (Kind == kPerRow && rowBits >= kInfBits)
          ++nonFinite;
      }
    } else if constexpr (Config::Source == kGlobalFromBits) {
      global = globalFromBits<Kind, Fmt>(*args.globalBits);
    } else if constexpr (Config::Source == kGlobalFromScale) {
      global = *args.scaleIn;
    }
    const GlobalScale g = makeGlobal(global);

    // The fold's reference exponents: the largest E8M0 code of the row, or
    // of each vector's 128-wide group, over the blocks that are not NaN
    // (code 0 = 2^-127 where there are none).
    // The block scales are computed once, before the reference is known.
    int reference[VPT];
    BlockScale scales[Fold != kFoldNone ? VPT : 1];
    if constexpr (Fold != kFoldNone) {
      uint32_t rowCode = 0;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        scales[i] = blockScale<Kind, Fmt>(blockBits[i], g);
        int vec = threadIdx.x + i * Threads;
        uint32_t code = Config::kWholeRows || vec < Config::kVecs
                            ? scales[i].e8m0
                            : 0u;
        code = code == 0xFFu ? 0u : code;
        if constexpr (Fold == kFold128)
          reference[i] = int(groupMax<Config::kGroupLanes>(code)) - 127;
        rowCode = code > rowCode ? code : rowCode;
      }
      if constexpr (Fold == kFoldRow) {
        // With the row's global computed here, its largest finite block is
        // known: codes grow with a block's amax, so that block's code is the
        // reference, and no second reduction is needed.
        const int rowReference =
            Config::Source == kGlobalInCta
                ? int(blockScale<Kind, Fmt>(rowBits, g).e8m0) - 127
                : int(ctaMax<Threads>(rowCode, scratch)) - 127;
#pragma unroll
        for (int i = 0; i < VPT; ++i)
          reference[i] = rowReference;
        if (threadIdx.x == 0)
          args.global[row] = mulRn(global, exp2i(rowReference));
      }
    }

    uint8_t *dst = args.q + size_t(row) * Config::K;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int vec = threadIdx.x + i * Threads;
      if (!Config::kWholeRows && vec >= Config::kVecs)
        continue;
      BlockScale s;
      if constexpr (Fold != kFoldNone)
        s = scales[i];
      else
        s = blockScale<Kind, Fmt>(blockBits[i], g);
      uint32_t codes[2];
      encodeVector<In, Fmt, Kind == kTwoLevel,
                   Config::Source == kGlobalFromScale>(v[i], s, codes,
                                                       saturated);
      if constexpr (Fold != kFoldNone) {
        foldBlockWords<Fmt, Config::kVecElems / 4>(codes, reference[i], s.e8m0);
        if constexpr (Fold == kFold128)
          if ((lane & (Config::kGroupLanes - 1)) == 0)
            static_cast<float *>(args.local)[size_t(row) * (Config::K /
                                                            kFoldGroupCols) +
                                             size_t(vec) /
                                                 Config::kGroupLanes] =
                mulRn(global, exp2i(reference[i]));
      }
      uint8_t *out = dst + vec * Config::kVecElems;
      if constexpr (Config::kVecElems == 4)
        *reinterpret_cast<uint32_t *>(out) = codes[0];
      else
        store8(out, codes[0], codes[1]);
      if constexpr (kBlocks) {
        // The first lane of each block writes its scale and counts it.
        if ((lane & (Lanes - 1)) == 0) {
          size_t blockIndex = size_t(row) * (Config::K / Config::Block) +
                              size_t(vec) / Lanes;
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
    reduced = ctaMax<Threads>(reduced, scratch);
    if (threadIdx.x == 0 && reduced != 0)
      atomicMax(args.globalBits, reduced);
    return;
  }
  // A per-tensor scale is written, and a non-finite tensor counted, once.
  if constexpr (Config::Source == kGlobalFromBits ||
                Config::Source == kGlobalFromScale) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      float global = Config::Source == kGlobalFromBits
                         ? globalFromBits<Kind, Fmt>(*args.globalBits)
                         : *args.scaleIn;
      if (args.global && Fold == kFoldNone)
        args.global[0] = global;
      if (Kind == kPerTensor && Config::Source == kGlobalFromBits &&
          *args.globalBits >= kInfBits)
        ++nonFinite;
    }
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, nonFinite);
}

} // namespace moss::quantize
