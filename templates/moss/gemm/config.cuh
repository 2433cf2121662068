// moss/gemm/config.cuh - the GEMM configuration, its arguments and launch
// geometry (docs/GEMM-KERNEL-ABI.md).
//
// This header compiles as plain host C++ too (no CUDA keywords outside
// MOSS_GEMM_HD). The derived quantities (promotion block, shared-memory
// layout, TMA boxes, launch geometry) are constexpr functions of a plain
// `Params` struct, so the host computes them from run-time values with the
// same formulas the kernel is compiled with: `plan(params)`,
// `validate(params)`, `gridSize(params, m, smCount)`.
#pragma once

#if defined(__CUDACC__)
#define MOSS_GEMM_HD __host__ __device__
#else
#define MOSS_GEMM_HD
#endif

// The GEMM kernel's templates live in moss::gemm_kernel; moss::gemm is the
// runtime's host function (moss/Gemm/Gemm.h), and the two meet in the
// compiler and runtime sources that include this header.
namespace moss::gemm_kernel {

/// Operand formats.
enum : int { kE4M3 = 0, kE5M2 = 1 };
/// Scaling schemes (the values of #moss.scaling).
enum : int {
  kPerTensor = 0,
  kPerRow = 1,
  kPerGroup = 2,
  kMXFP8 = 3,
  kTwoLevel = 4
};
/// Output / bias / accumulator element types; kNone: no bias or no C.
enum : int { kBF16 = 0, kF16 = 1, kF32 = 2, kNone = -1 };

/// How the per-block factor of a promotion is built (see mainloop.cuh).
enum : int {
  kFactorDirect = 0, ///< no promotion: wgmma accumulates all of K
  kFactorUnit = 1,   ///< acc += partial (forced promotion, no local scales)
  kFactorRow = 2,    ///< acc += f[row] * partial
  kFactorCol = 3,    ///< acc += f[col] * partial
  kFactorRowCol = 4  ///< acc += (f[row] * f[col]) * partial
};

/// Run-time arguments (one struct, passed by value).
struct Args {
  int m;                ///< rows of A and of the output
  void *d;              ///< output [m, N], row-major, Out type
  const void *aLocal;   ///< A's block scales (E8M0 bytes or FP32), or null
  const float *aGlobal; ///< A's FP32 global scales ([1] or [m]), or null
  const void *bLocal;   ///< B's block scales, or null
  const float *bGlobal; ///< B's FP32 global scales ([1] or [N]), or null
  const void *bias;     ///< [N] of the Bias type, or null
  const void *c;        ///< [m, N] of the Accum type, or null
  float beta;           ///< multiplies c
  float *amax;          ///< max |output| (atomic max, caller zeroes), or null
  /// With sliced accumulators (SplitK > 1 or TileM = 64):
  /// workspaceBytes(params, m) bytes whose first workspaceCounterBytes are
  /// zero before the first launch (each launch leaves them zero again);
  /// else null.
  void *workspace;
  /// With Groups > 0 (an m-grouped GEMM), contiguous: [Groups + 1] int32
  /// row offsets, expert g's rows of A and the output being [offsets[g],
  /// offsets[g + 1]) (clamped to [0, m]). Masked (Params::maskedGroups):
  /// [Groups] int32 row counts, expert g's rows being the first counts[g]
  /// (clamped to [0, m / Groups]) of its m / Groups. K-grouped
  /// (Params::groupedK): [Groups + 1] int32 offsets along K, expert g's
  /// columns of A and B being [offsets[g], offsets[g + 1]) (offsets[0]
  /// taken as 0, each clamped to [0, k] and rounded down to a multiple of
  /// 128). Else null.
  const int *groupOffsets;
  /// A k-grouped GEMM's K (Params::k is -1): all experts' columns, a
  /// multiple of 128. Unused otherwise.
  int k;
};

/// The template parameters of Config as a plain struct (ABI order).
struct Params {
  int m = -1; ///< -1: dynamic (Args::m)
  int n = 0;
  int k = 0;
  int elemA = kE4M3;
  int elemB = kE4M3;
  int scaleA = kPerTensor;
  int blockRowsA = 1;
  int blockA = 0;
  bool globalRowA = false;
  int scaleB = kPerTensor;
  int blockRowsB = 1;
  int blockB = 0;
  bool globalRowB = false;
  int out = kBF16;
  int bias = kNone;
  int accum = kNone;
  bool amax = false;
  int tileM = 128;
  int tileN = 128;
  int stages = 4;
  int clusterM = 1;
  int clusterN = 1;
  bool rasterAlongN = false;
  int swizzle = 8;
  int splitK = 1;
  /// Not in the ABI (default 0): promote partial sums every forcePromoteK
  /// elements of K even without block scales (32, 64 or 128).
  int forcePromoteK = 0;
  /// Optional (default false): the quick-compile variant, the same
  /// arithmetic in shorter promotion groups (Plan::groupBlocks) with
  /// per-stage scale loads, for a faster NVRTC compile.
  bool quickCompile = false;
  /// Optional (default false): the tensor cores multiply in f16 instead of
  /// FP8. The consumers widen the FP8 codes to f16 (exact for E4M3 and
  /// E5M2): A's in registers, each stage's B into one of two shared-memory
  /// slots; the products are then exact and summed in FP32 at the f16 rate
  /// (half FP8's), for FP32 outputs within 1e-5
  /// (docs/NUMERICS-CONTRACT.md section 7.4).
  bool f16Mma = false;
  /// Optional (default false): A is two-level or MXFP8, and each consumer
  /// warpgroup folds the E8M0 block factors of its rows into each stage's
  /// codes against the row's largest exponent E (docs/NUMERICS-CONTRACT.md
  /// section 8, the row fold) before it multiplies them; the epilogue
  /// applies 2^E times A's global. The tensor cores then sum all of K, as
  /// for a per-row A (consumer_fold.cuh).
  bool foldA = false;
  /// Optional (default 0): an m-grouped GEMM of this many experts. B is
  /// [Groups * N, K] (expert g's [N, K] at row g * N; its block scales
  /// likewise, its global scales [Groups] or [Groups * N]), the bias is
  /// [Groups, N], and A's and the output's rows are sorted by expert,
  /// Args::groupOffsets giving where each expert's start. Tiles never
  /// straddle two experts; M is dynamic.
  int groups = 0;
  /// Optional (default false), with groups > 0: the masked layout. A and
  /// the output hold m / Groups rows per expert (a [Groups, m / Groups, K]
  /// batch), of which expert g uses its first Args::groupOffsets[g]; the
  /// output's other rows are not written.
  bool maskedGroups = false;
  /// Optional (default false), with groups > 0: k-grouped instead of
  /// m-grouped (a mixture-of-experts weight gradient). A [M, K] and B
  /// [N, K] are shared; expert g multiplies their columns [offsets[g],
  /// offsets[g + 1]) (Args::groupOffsets, multiples of 128, the last at
  /// most K) into its own output D_g [M, N], rows g * M on of the
  /// [Groups * M, N] output (and of C). M and N are static and K is
  /// dynamic (K = -1, Args::k); an expert without columns gets zeros (times
  /// the epilogue). The output stores through TMA where TileM divides M.
  bool groupedK = false;
};

/// Bytes of an Out / Bias / Accum element.
constexpr MOSS_GEMM_HD int elementBytes(int kind) {
  return kind == kF32 ? 4 : kind == kNone ? 0 : 2;
}

/// Everything derived from Params.
struct Plan {
  // Scaling, resolved.
  bool hasLocalA, hasLocalB;   ///< block scales (per-group, MXFP8, 2-level)
  bool localAE8M0, localBE8M0; ///< ... stored as E8M0 codes (else FP32)
  int blockA, blockB;          ///< their extent along K (0 without)
  int blockRowsA, blockRowsB;  ///< rows sharing one (per-group NxN: N)
  bool hasGlobalA, hasGlobalB; ///< FP32 global scales (epilogue)
  bool globalRowA, globalRowB; ///< ... one per row (else one per tensor)
  int promoteK;                ///< K between promotions into FP32 (0: none)
  bool rowFactor;  ///< per-row factor table (A's, B's uniform folded in)
  bool colFactor;  ///< per-column factor table (B's, one per B row)
  int factorMode;  ///< kFactor*
  bool hasTables;  ///< rowFactor || colFactor
  bool foldA;      ///< Params::foldA: A promotes nothing
  int partialSets; ///< partial accumulator sets when promoting
  /// Promotion blocks per group of straight-line code in the consumers'
  /// loop (mainloop.cuh PromotedLoop; 0 without promotion).
  int groupBlocks;
  // Geometry.
  int threads; ///< 3 warpgroups: producer + 2 consumers
  int consumerWarpgroups;
  int wgM;    ///< m64 wgmma tiles per consumer warpgroup
  /// TileM = 64: both consumer warpgroups compute the tile's 64 rows, over
  /// alternate K stages, and their sums meet in the workspace.
  bool splitWarpgroups;
  /// Accumulators summed across CTAs or warpgroups in Args::workspace
  /// (SplitK > 1 or splitWarpgroups; split_k.cuh).
  bool slicedAccumulators;
  int stageK; ///< K per pipeline stage (128: one swizzle row)
  int fullKStages, tailSteps, kStages;
  /// Stages of one work unit: all of K, or one of SplitK slices of it.
  int unitFullKStages, unitKStages;
  int stepsPerPromote; ///< k32 steps per promotion block
  int promotesPerStage;
  /// f16 MMA (Params::f16Mma): bytes of one f16 slot (a stage's B widened,
  /// two K halves of 64 f16 in 128-byte swizzled rows), 0 without.
  int slotBytes;
  int loaderThreads; ///< the producer warpgroup (tables)
  int clusterSize;   ///< CTAs per cluster (ClusterM * ClusterN, 1 or 2)
  bool multicastA;   ///< ClusterN == 2: the two CTAs share A's tile
  bool multicastB;   ///< ClusterM == 2: the two CTAs share B's tile
  int emptyArrivals; ///< consumer threads of the cluster releasing a stage
  /// TMA boxes {inner (K or N), rows}; fewer rows of A when M is smaller
  /// than a tile (boxRowsA). D's box is one 128-byte wide chunk of a
  /// consumer warp's 16 rows.
  int boxA[2], boxB[2], boxD[2];
  /// Whether the output and the tile allow TMA stores: 16-byte output rows,
  /// tiles of whole 128-byte chunks.
  bool storable;
  /// The epilogue stages each warp's output through shared memory and
  /// stores it with TMA (usesTmaD), or stores from registers.
  bool usesTmaD;
  int storeBuffers; ///< 2 KiB staging buffers per consumer warp (usesTmaD)
  // Shared memory (from a 1024-byte aligned base).
  int stageABytes, stageBBytes;
  int rowTableBytes, colTableBytes;
  int offsetA, offsetB, offsetRowTable, offsetColTable, offsetSlots,
      offsetStaging, offsetBarriers;
  int sharedBytes; ///< dynamic shared memory to launch with
  /// Accumulator registers per consumer thread (checked against a budget).
  int accumulatorRegisters;
};

namespace detail {
/// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b
/// near INT_MAX.
constexpr MOSS_GEMM_HD int ceilDiv(int a, int b) {
  return a == 0 ? 0 : (a - 1) / b + 1;
}
constexpr MOSS_GEMM_HD bool hasLocal(int s) {
  return s == kPerGroup || s == kMXFP8 || s == kTwoLevel;
}
constexpr MOSS_GEMM_HD int minPositive(int a, int b) {
  return a == 0 ? b : b == 0 ? a : (a < b ? a : b);
}
} // namespace detail

/// The largest dynamic shared memory of an sm_90 block (227 KiB).
constexpr int kMaxSharedBytes = 232448;
/// Accumulator registers a consumer thread may hold (of 232).
constexpr int kMaxAccumulatorRegisters = 192;
/// With the f16 MMA, the accumulators plus the B codes a thread holds while
/// it widens them (TileN / 8). ptxas spilled above it: 128x256 without
/// block scales (160), 128x192 with them (180 and up).
constexpr int kMaxF16MmaRegisters = 152;
/// A consumer warp's staging buffer for TMA stores: 16 rows of 128 bytes.
constexpr int kStoreBufferBytes = 2048;
/// Consumer warps of the kernel, each with its own staging buffers.
constexpr int kConsumerWarps = 8;

/// Derives the kernel's plan from its parameters.
constexpr MOSS_GEMM_HD Plan plan(const Params &p) {
  Plan q{};
  q.hasLocalA = detail::hasLocal(p.scaleA);
  q.hasLocalB = detail::hasLocal(p.scaleB);
  q.localAE8M0 = p.scaleA == kMXFP8 || p.scaleA == kTwoLevel;
  q.localBE8M0 = p.scaleB == kMXFP8 || p.scaleB == kTwoLevel;
  q.blockA = !q.hasLocalA ? 0 : p.scaleA == kMXFP8 ? 32 : p.blockA;
  q.blockB = !q.hasLocalB ? 0 : p.scaleB == kMXFP8 ? 32 : p.blockB;
  q.blockRowsA = p.scaleA == kPerGroup ? p.blockRowsA : 1;
  q.blockRowsB = p.scaleB == kPerGroup ? p.blockRowsB : 1;
  q.hasGlobalA =
      p.scaleA == kPerTensor || p.scaleA == kPerRow || p.scaleA == kTwoLevel;
  q.hasGlobalB =
      p.scaleB == kPerTensor || p.scaleB == kPerRow || p.scaleB == kTwoLevel;
  q.globalRowA = p.scaleA == kPerRow || (p.scaleA == kTwoLevel && p.globalRowA);
  q.globalRowB = p.scaleB == kPerRow || (p.scaleB == kTwoLevel && p.globalRowB);
  q.foldA = p.foldA;
  // A's folded block factors are in its codes.
  q.promoteK = detail::minPositive(
      detail::minPositive(q.foldA ? 0 : q.blockA, q.blockB), p.forcePromoteK);
  // B's scales vary along the tile's columns unless one NxN block of a
  // per-group B covers the whole tile (TileN divides N's block rows).
  q.colFactor =
      q.hasLocalB && (q.blockRowsB == 1 || q.blockRowsB % p.tileN != 0);
  q.rowFactor = q.promoteK > 0 &&
                ((q.hasLocalA && !q.foldA) || (q.hasLocalB && !q.colFactor));
  q.factorMode = q.promoteK == 0                ? kFactorDirect
                 : (q.rowFactor && q.colFactor) ? kFactorRowCol
                 : q.rowFactor                  ? kFactorRow
                 : q.colFactor                  ? kFactorCol
                                                : kFactorUnit;
  q.hasTables = q.rowFactor || q.colFactor;
  q.consumerWarpgroups = 2;
  q.threads = 128 * (1 + q.consumerWarpgroups);
  q.splitWarpgroups = p.tileM == 64;
  q.slicedAccumulators = p.splitK > 1 || q.splitWarpgroups;
  q.wgM = q.splitWarpgroups ? 1 : p.tileM / (64 * q.consumerWarpgroups);
  // Two partial sets let a warpgroup's next wgmma run while it promotes.
  // With per-element factors on both sides (two FP32 ops per accumulator,
  // issue-bound anyway) one set leaves room for the column factors; tiles
  // too wide for three sets (TileN > 128) take one and rely on the other
  // warpgroup's wgmmas to keep the tensor cores busy while one promotes.
  // The f16 MMA takes one set too: its wgmmas read A from registers, which
  // the next block's may only overwrite once they completed (mainloop.cuh),
  // and with two sets its widening spilled (MOSS; per-group with bias and C).
  q.partialSets = p.f16Mma || q.factorMode == kFactorRowCol ||
                          3 * q.wgM * (p.tileN / 2) > kMaxAccumulatorRegisters
                      ? 1
                      : 2;
  q.stageK = 128;
  // A k-grouped GEMM's stages are its experts' (run time).
  const int staticK = p.k > 0 ? p.k : 0;
  q.fullKStages = staticK / q.stageK;
  q.tailSteps = (staticK % q.stageK) / 32;
  q.kStages = q.fullKStages + (q.tailSteps > 0 ? 1 : 0);
  q.unitFullKStages = q.fullKStages / p.splitK;
  q.unitKStages = q.kStages / p.splitK;
  q.stepsPerPromote = q.promoteK / 32;
  q.promotesPerStage = q.promoteK > 0 ? q.stageK / q.promoteK : 1;
  // The last block of a group is promoted with none of the warpgroup's own
  // wgmmas in flight, and longer groups cost compile time: halving a group
  // (MOSS 4 blocks instead of 8 with two partial sets, per-128 2 instead of
  // 4) compiles about 30% faster and runs a few percent slower
  // (docs/PERFORMANCE.md, "Design measurements behind the code").
  // quickCompile takes the shorter groups (a group is at least one stage),
  // except with split warpgroups, whose run-time share of the stages
  // already compiles a one-stage group and gains nothing from them.
  {
    const int per = q.promotesPerStage;
    const bool longPer128 = q.partialSets == 2 && !q.splitWarpgroups;
    const int full = per == 1             ? (longPer128 ? 4 : 2)
                     : q.partialSets == 1 ? 4
                                          : 8;
    const int quick = full / 2 > per ? full / 2 : per;
    q.groupBlocks = q.promoteK == 0                        ? 0
                    : p.quickCompile && !q.splitWarpgroups ? quick
                                                           : full;
  }
  q.loaderThreads = 128;
  q.clusterSize = p.clusterM * p.clusterN;
  q.multicastA = p.clusterN == 2;
  q.multicastB = p.clusterM == 2;
  // Each stage is consumed by both consumer warpgroups, or by one of them
  // with split warpgroups.
  q.emptyArrivals =
      128 * (q.splitWarpgroups ? 1 : q.consumerWarpgroups) * q.clusterSize;
  // A multicast operand is loaded in halves, one per CTA of the pair.
  q.boxA[0] = q.stageK;
  q.boxA[1] = q.multicastA ? p.tileM / 2 : p.tileM;
  q.boxB[0] = q.stageK;
  q.boxB[1] = q.multicastB ? p.tileN / 2 : p.tileN;
  q.boxD[0] = 128 / elementBytes(p.out);
  q.boxD[1] = 16;

  q.stageABytes = p.tileM * q.stageK;
  q.stageBBytes = p.tileN * q.stageK;
  q.rowTableBytes = q.rowFactor ? p.tileM * q.promotesPerStage * 4 : 0;
  q.colTableBytes = q.colFactor ? p.tileN * q.promotesPerStage * 4 : 0;
  q.offsetA = 0;
  q.offsetB = q.offsetA + p.stages * q.stageABytes;
  q.offsetRowTable = q.offsetB + p.stages * q.stageBBytes;
  q.offsetColTable = q.offsetRowTable + p.stages * q.rowTableBytes;
  // f16 slots start at a 1024-byte boundary (128-byte swizzle atoms).
  q.slotBytes = p.f16Mma ? (256 * p.tileN + 1023) / 1024 * 1024 : 0;
  q.offsetSlots =
      (q.offsetColTable + p.stages * q.colTableBytes + 1023) / 1024 * 1024;
  const int tablesEnd = p.f16Mma
                            ? q.offsetSlots + 2 * q.slotBytes
                            : q.offsetColTable + p.stages * q.colTableBytes;
  // Two barriers per stage (and one per f16 slot), and 1 KiB to align the
  // base to 1024 bytes.
  const int fixedBytes = (2 * p.stages + (p.f16Mma ? 2 : 0)) * 8 + 1024;
  // TMA stores need 16-byte aligned output rows and tiles of whole 128-byte
  // chunks. Two staging buffers per warp when they fit, else one (each
  // store then has to read its buffer before the next chunk is written),
  // else the epilogue stores from registers. 128-byte swizzled buffers
  // start at a 1024-byte boundary.
  q.offsetStaging = (tablesEnd + 1023) / 1024 * 1024;
  const int bufferSet = kConsumerWarps * kStoreBufferBytes;
  // An m-grouped tile may end inside the output (at its expert's last
  // row), where a TMA box cannot stop: it stores from registers. So does a
  // k-grouped one unless TileM divides M (its experts' outputs are whole
  // tiles).
  q.storable = (p.n % 16 * elementBytes(p.out)) % 16 == 0 &&
               (p.tileN * elementBytes(p.out)) % 128 == 0 &&
               (p.groups == 0 || (p.groupedK && p.m % p.tileM == 0));
  const int room = kMaxSharedBytes - q.offsetStaging - fixedBytes;
  q.storeBuffers = !q.storable || room < bufferSet ? 0
                   : room >= 2 * bufferSet         ? 2
                                                   : 1;
  q.usesTmaD = q.storeBuffers > 0;
  q.offsetBarriers = q.usesTmaD ? q.offsetStaging + q.storeBuffers * bufferSet
                                : (tablesEnd + 7) / 8 * 8;
  q.sharedBytes = q.offsetBarriers + fixedBytes;
  q.accumulatorRegisters =
      q.wgM * (p.tileN / 2) * (q.promoteK > 0 ? 1 + q.partialSets : 1);
  return q;
}

/// nullptr when `p` is a configuration the kernel implements, else what is
/// wrong. Config<...> fails to compile exactly when this is not null.
constexpr MOSS_GEMM_HD const char *validate(const Params &p) {
  const bool scaleAOk = p.scaleA >= kPerTensor && p.scaleA <= kTwoLevel;
  const bool scaleBOk = p.scaleB >= kPerTensor && p.scaleB <= kTwoLevel;
  if (!scaleAOk || !scaleBOk)
    return "ScaleA and ScaleB must be kPerTensor..kTwoLevel";
  const Plan q = plan(p);
  if (p.n <= 0 || (p.k <= 0 && !(p.groupedK && p.k == -1)))
    return "N and K must be positive (K -1 when k-grouped)";
  if (p.m != -1 && p.m <= 0)
    return "M must be -1 (dynamic) or positive";
  if (p.groupedK && (p.groups <= 0 || p.maskedGroups || p.k != -1 || p.m <= 0 ||
                     p.bias != kNone || p.tileM == 64 || p.splitK != 1 ||
                     p.clusterM * p.clusterN != 1 || p.foldA))
    return "a k-grouped GEMM (GroupedK) needs Groups > 0, the contiguous "
           "layout, a dynamic K (-1), a static M, no bias, TileM 128 or 256, "
           "SplitK 1, 1x1 clusters and no FoldA";
  if (p.k % 32 != 0 && !p.groupedK)
    return "K must be a multiple of 32";
  if ((p.elemA != kE4M3 && p.elemA != kE5M2) ||
      (p.elemB != kE4M3 && p.elemB != kE5M2))
    return "ElemA and ElemB must be kE4M3 or kE5M2";
  if ((q.hasLocalA && q.blockA != 32 && q.blockA != 64 && q.blockA != 128) ||
      (q.hasLocalB && q.blockB != 32 && q.blockB != 64 && q.blockB != 128))
    return "a scaling block along K must be 32, 64 or 128";
  if (q.blockRowsA < 1 || q.blockRowsB < 1)
    return "BlockRows must be at least 1";
  if (p.forcePromoteK != 0 && p.forcePromoteK != 32 && p.forcePromoteK != 64 &&
      p.forcePromoteK != 128)
    return "ForcePromoteK must be 0, 32, 64 or 128";
  if (q.promoteK != 0 && !p.groupedK && p.k % q.promoteK != 0)
    return "K must be a multiple of the scaling block";
  if (p.tileM != 64 && p.tileM != 128 && p.tileM != 256)
    return "TileM must be 64, 128 or 256";
  if (p.tileM == 64 &&
      (p.clusterM * p.clusterN != 1 || q.tailSteps != 0 || q.unitKStages < 2))
    return "TileM = 64 needs 1x1 clusters, K a multiple of 128 and at least "
           "two stages per work unit";
  if (p.tileN % 32 != 0 || p.tileN < 32 || p.tileN > 256)
    return "TileN must be a multiple of 32 in [32, 256]";
  if (q.accumulatorRegisters > kMaxAccumulatorRegisters)
    return "accumulators exceed the consumer register budget (with block "
           "scales, TileM x TileN must be at most 128 x 192)";
  if (p.f16Mma && q.accumulatorRegisters + p.tileN / 8 > kMaxF16MmaRegisters)
    return "the f16 MMA's accumulators exceed its register budget (TileN at "
           "most 224, or 128 with block scales)";
  if (p.stages < 2)
    return "Stages must be at least 2";
  if (p.f16Mma && (p.tileM != 128 || p.stages % 2 != 0))
    return "the f16 MMA needs TileM = 128 and an even number of Stages";
  // consumer_fold.cuh takes a stage's four E8M0 codes of a row as a word.
  if (p.foldA &&
      (!q.localAE8M0 || q.blockA != 32 || q.hasLocalB || p.forcePromoteK != 0 ||
       p.f16Mma || p.tileM == 64 || p.splitK != 1 || q.tailSteps != 0))
    return "FoldA needs an A with E8M0 factors of 32-element blocks, a B "
           "without block scales, no forced promotion, the FP8 MMA, TileM 128 "
           "or 256, SplitK 1 and K a multiple of 128";
  if (q.sharedBytes > kMaxSharedBytes)
    return "shared memory exceeds 227 KiB: lower Stages";
  if (p.clusterM < 1 || p.clusterN < 1 || p.clusterM * p.clusterN > 2)
    return "clusters are 1x1, 2x1 (B shared) or 1x2 (A shared)";
  if (p.splitK < 1)
    return "SplitK must be at least 1";
  if (p.splitK > 1 && p.k % (q.stageK * p.splitK) != 0)
    return "SplitK > 1 needs K to be a multiple of 128 * SplitK";
  if (p.splitK > 1 && p.clusterM * p.clusterN != 1)
    return "SplitK > 1 needs 1x1 clusters";
  if (p.groups < 0)
    return "Groups must be 0 (a plain GEMM) or the number of experts";
  if (p.maskedGroups && p.groups == 0)
    return "MaskedGroups needs Groups > 0";
  if (p.groups > 0 && !p.groupedK &&
      (p.m != -1 || p.tileM == 64 || p.splitK != 1 ||
       p.clusterM * p.clusterN != 1 || p.foldA ||
       (q.hasLocalB && p.n % q.blockRowsB != 0)))
    return "an m-grouped GEMM (Groups > 0) needs a dynamic M, TileM 128 or "
           "256, SplitK 1, 1x1 clusters, no FoldA, and N a multiple of B's "
           "block rows";
  if (p.out != kBF16 && p.out != kF16 && p.out != kF32)
    return "Out must be kBF16, kF16 or kF32";
  if ((p.bias != kNone && p.bias != kBF16 && p.bias != kF16 &&
       p.bias != kF32) ||
      (p.accum != kNone && p.accum != kBF16 && p.accum != kF16 &&
       p.accum != kF32))
    return "Bias and Accum must be kNone, kBF16, kF16 or kF32";
  return nullptr;
}

/// Cluster tiles of an m-row problem: ClusterM x ClusterN output tiles each
/// (the tile count when there are no clusters); of one expert's m rows for
/// an m-grouped GEMM.
constexpr MOSS_GEMM_HD int numTiles(Params p, int m) {
  const int tilesM = detail::ceilDiv(m, p.tileM);
  const int tilesN = detail::ceilDiv(p.n, p.tileN);
  return detail::ceilDiv(tilesM, p.clusterM) *
         detail::ceilDiv(tilesN, p.clusterN);
}

/// The first row and column of the output tile CTA `rank` of a cluster
/// computes for cluster tile `t` (0 <= t < numTiles(p, m)): the persistent
/// tile order. Along M (rasterAlongN false): bands of `swizzle` cluster-tile
/// rows; inside a band the M index moves fastest, so consecutive tiles share
/// a column of B tiles. Along N: M and N exchanged. Rank r takes tile
/// (r % clusterM, r / clusterM) of the cluster tile; it may lie past M or N
/// when the tile counts are odd.
constexpr MOSS_GEMM_HD void tileOrigin(Params p, int m, int t, int rank,
                                       int &m0, int &n0) {
  const int tilesM = detail::ceilDiv(detail::ceilDiv(m, p.tileM), p.clusterM);
  const int tilesN = detail::ceilDiv(detail::ceilDiv(p.n, p.tileN), p.clusterN);
  const int swizzle = p.swizzle > 0 ? p.swizzle : 1;
  // Walk (slow, fast) = (N, M) along M, (M, N) along N.
  const int fastCount = p.rasterAlongN ? tilesN : tilesM;
  const int slowCount = p.rasterAlongN ? tilesM : tilesN;
  const int bandTiles = swizzle * slowCount;
  const int band = t / bandTiles;
  const int start = band * swizzle;
  const int width = fastCount - start < swizzle ? fastCount - start : swizzle;
  const int r = t - band * bandTiles;
  const int fast = start + r % width;
  const int slow = r / width;
  const int mt = p.rasterAlongN ? slow : fast;
  const int nt = p.rasterAlongN ? fast : slow;
  m0 = (mt * p.clusterM + rank % p.clusterM) * p.tileM;
  n0 = (nt * p.clusterN + rank / p.clusterM) * p.tileN;
}

/// Where a work unit's tile lies: its first row of A and of the output, its
/// first column, the row its rows end before (m, or its expert's last row +
/// 1), and its expert (0 for a plain GEMM), whose B starts at row
/// group * N. A k-grouped GEMM's unit also has its expert's first column
/// of A and B, k0, and its 128-wide stages; its rows are of A and of the
/// expert's output D_g.
struct Unit {
  int m0, n0, rowEnd, group;
  int k0 = 0, kStages = 0;
};

/// The experts of an m-grouped GEMM (Params::groups > 0) as the kernel walks
/// them: expert g's tiles are ceil(M_g / TileM) x ceil(N / TileN), ordered
/// by tileOrigin as a plain GEMM of its M_g rows, and follow those of the
/// experts before it. A cursor over the experts finds a unit's expert;
/// units asked for in increasing order only move it forward.
struct GroupWalk {
  /// Args::groupOffsets (device memory): [groups + 1] row offsets, or
  /// [groups] row counts when masked.
  const int *offsets;
  int m;          ///< all experts' rows
  int k;          ///< k-grouped: all experts' columns (Args::k)
  int group = 0;  ///< the cursor's expert ...
  int before = 0; ///< ... and the units of the experts before it

  /// Contiguous: offsets[g] with offsets[0] taken as 0 and offsets[groups]
  /// as m, kept in [0, m]: an expert that does not end past its start is
  /// empty, and bad offsets never reach rows outside A.
  MOSS_GEMM_HD int row(Params p, int g) const {
    const int r = g <= 0 ? 0 : g >= p.groups ? m : offsets[g];
    return r < 0 ? 0 : r > m ? m : r;
  }
  /// Expert g's first row.
  MOSS_GEMM_HD int start(Params p, int g) const {
    return p.maskedGroups ? g * (m / p.groups) : row(p, g);
  }
  /// The row after expert g's last: masked, its count kept in [0, m /
  /// groups], so that an expert never reaches the next one's rows.
  MOSS_GEMM_HD int end(Params p, int g) const {
    if (!p.maskedGroups)
      return row(p, g + 1);
    const int capacity = m / p.groups, count = offsets[g];
    return start(p, g) + (count < 0 ? 0 : count > capacity ? capacity : count);
  }
  /// Expert g's tiles; a huge count past the last expert, which stops the
  /// cursor there.
  MOSS_GEMM_HD int tiles(Params p, int g) const {
    if (g >= p.groups)
      return 1 << 30;
    const int first = start(p, g), last = end(p, g);
    return last > first ? numTiles(p, last - first) : 0;
  }
  /// The tiles of all experts.
  MOSS_GEMM_HD int total(Params p) const {
    if (p.groupedK)
      return p.groups * numTiles(p, p.m);
    int count = 0;
    for (int g = 0; g < p.groups; ++g)
      count += tiles(p, g);
    return count;
  }
  /// Unit u's tile (0 <= u < total(p); 1x1 clusters, no split-K).
  MOSS_GEMM_HD Unit unit(Params p, int u) {
    if (p.groupedK)
      return unitAlongK(p, u);
    if (u < before)
      group = before = 0;
    for (int t = tiles(p, group); u >= before + t; t = tiles(p, group)) {
      before += t;
      ++group;
    }
    Unit r{0, 0, end(p, group), group};
    const int first = start(p, group);
    tileOrigin(p, r.rowEnd - first, u - before, 0, r.m0, r.n0);
    r.m0 += first;
    return r;
  }

  /// K-grouped: expert g's first column (g = groups: the last expert's
  /// end), offsets[g] with offsets[0] taken as 0, kept in [0, k] and
  /// rounded down to a whole stage (bad offsets give wrong sums, never
  /// reads outside A or B). The columns past offsets[groups] are no
  /// expert's: a caller may pad K past them.
  MOSS_GEMM_HD int column(Params p, int g) const {
    const int c = g <= 0 ? 0 : offsets[g < p.groups ? g : p.groups];
    return (c < 0 ? 0 : c > k ? k : c) / 128 * 128;
  }
  /// K-grouped: every expert has the same tiles, M x N, in tileOrigin's
  /// order; expert g's follow those of the experts before it.
  MOSS_GEMM_HD Unit unitAlongK(Params p, int u) const {
    const int perExpert = numTiles(p, p.m), g = u / perExpert;
    Unit r{0, 0, p.m, g};
    tileOrigin(p, p.m, u - g * perExpert, 0, r.m0, r.n0);
    const int first = column(p, g), last = column(p, g + 1);
    r.k0 = first;
    r.kStages = last > first ? (last - first) / 128 : 0;
    return r;
  }
};

namespace detail {
/// The workspace's counters for `tiles` tiles: [tiles][8] u32, one per
/// consumer warp, rounded up to 256 bytes.
constexpr MOSS_GEMM_HD long long counterBytes(int tiles) {
  return (tiles * 32LL + 255) / 256 * 256;
}
} // namespace detail

/// With sliced accumulators (SplitK > 1 or TileM = 64): the workspace's
/// tile counters; the slices' partial sums follow them (split_k.cuh). 0
/// without.
constexpr MOSS_GEMM_HD long long workspaceCounterBytes(Params p, int m) {
  return plan(p).slicedAccumulators ? detail::counterBytes(numTiles(p, m)) : 0;
}

/// The workspace an m-row launch needs (Args::workspace): the counters and,
/// per tile and K slice, every consumer thread's FP32 accumulators. 0
/// without sliced accumulators.
constexpr MOSS_GEMM_HD long long workspaceBytes(Params p, int m) {
  const Plan q = plan(p);
  if (!q.slicedAccumulators)
    return 0;
  const int tiles = numTiles(p, m);
  return detail::counterBytes(tiles) + 4LL * tiles * p.splitK * 128 *
                                           q.consumerWarpgroups * q.wgM *
                                           (p.tileN / 2);
}

/// Rows of A's TMA box for an m-row launch. A tile of TileM rows is loaded
/// whole (half of it per CTA with ClusterN = 2), except when all of M fits
/// in fewer rows: then the box stops at m rounded up to the 8-row swizzle
/// atom. TMA fills the rows past M with zeros, and on the H200 that fill
/// cost as much as reading the rows (M = 1 ran slower than M = 128); the
/// rows the box leaves out only feed output rows past M, which are never
/// stored.
constexpr MOSS_GEMM_HD int boxRowsA(Params p, int m) {
  if (p.clusterN == 2)
    return p.tileM / 2;
  // An expert's tile starts at any row.
  if (p.groups > 0)
    return p.tileM;
  return m < p.tileM ? (m + 7) / 8 * 8 : p.tileM;
}

/// Bytes the TMA loads into one stage of an m-row launch (the "full"
/// barrier's transaction count): A's box (both halves when multicast) and B.
constexpr MOSS_GEMM_HD int stageTxBytes(Params p, int m) {
  const int rowsA = p.clusterN == 2 ? p.tileM : boxRowsA(p, m);
  return (rowsA + p.tileN) * 128;
}

/// Work units of an m-row problem: each cluster tile, or each of its
/// SplitK slices of K. For an m-grouped GEMM, the most its m rows can take
/// whatever the offsets (each expert may add one partial tile row); the
/// kernel counts those of the actual offsets (TileOrder).
constexpr MOSS_GEMM_HD int numUnits(Params p, int m) {
  if (p.groupedK)
    return p.groups * numTiles(p, p.m);
  if (p.groups > 0)
    return (detail::ceilDiv(m, p.tileM) + p.groups) *
           detail::ceilDiv(p.n, p.tileN);
  return numTiles(p, m) * p.splitK;
}

/// The persistent grid (x; y = z = 1): one CTA per SM, fewer when there are
/// fewer work units, a multiple of the cluster size (launch with cluster
/// dims (ClusterM * ClusterN, 1, 1)). 0 when m == 0 (nothing to launch).
constexpr MOSS_GEMM_HD int gridSize(Params p, int m, int smCount) {
  const int size = p.clusterM * p.clusterN;
  const int slots = smCount / size;
  return (numUnits(p, m) < slots ? numUnits(p, m) : slots) * size;
}

/// The full GEMM configuration (docs/GEMM-KERNEL-ABI.md). The first 25
/// parameters are the ABI's; ForcePromoteK_, QuickCompile_, F16Mma_, FoldA_,
/// Groups_, MaskedGroups_ and GroupedK_ (emitted up to the last one set) are
/// Params::forcePromoteK, ::quickCompile, ::f16Mma, ::foldA, ::groups,
/// ::maskedGroups and ::groupedK. Every k* constant is the
/// field of plan().
template <int M_, int N_, int K_, int ElemA_, int ElemB_, int ScaleA_,
          int BlockRowsA_, int BlockA_, bool GlobalRowA_, int ScaleB_,
          int BlockRowsB_, int BlockB_, bool GlobalRowB_, int Out_, int Bias_,
          int Accum_, bool Amax_, int TileM_, int TileN_, int Stages_,
          int ClusterM_, int ClusterN_, bool RasterAlongN_, int Swizzle_,
          int SplitK_, int ForcePromoteK_ = 0, bool QuickCompile_ = false,
          bool F16Mma_ = false, bool FoldA_ = false, int Groups_ = 0,
          bool MaskedGroups_ = false, bool GroupedK_ = false>
struct Config {
  static constexpr Params kParams = {M_,
                                     N_,
                                     K_,
                                     ElemA_,
                                     ElemB_,
                                     ScaleA_,
                                     BlockRowsA_,
                                     BlockA_,
                                     GlobalRowA_,
                                     ScaleB_,
                                     BlockRowsB_,
                                     BlockB_,
                                     GlobalRowB_,
                                     Out_,
                                     Bias_,
                                     Accum_,
                                     Amax_,
                                     TileM_,
                                     TileN_,
                                     Stages_,
                                     ClusterM_,
                                     ClusterN_,
                                     RasterAlongN_,
                                     Swizzle_,
                                     SplitK_,
                                     ForcePromoteK_,
                                     QuickCompile_,
                                     F16Mma_,
                                     FoldA_,
                                     Groups_,
                                     MaskedGroups_,
                                     GroupedK_};
  static_assert(
      validate(kParams) == nullptr,
      "invalid moss::gemm_kernel::Config: moss::gemm_kernel::validate(params) "
      "(config.cuh, callable from host code) says why");
  static constexpr Plan kPlan = plan(kParams);

  // --- the parameters -------------------------------------------------------
  static constexpr int M = M_; ///< -1: dynamic (Args::m)
  static constexpr int N = N_;
  static constexpr int K = K_;
  static constexpr int ElemA = ElemA_, ElemB = ElemB_;
  static constexpr int ScaleA = ScaleA_, ScaleB = ScaleB_;
  static constexpr int Out = Out_, Bias = Bias_, Accum = Accum_;
  static constexpr bool Amax = Amax_;
  static constexpr int TileM = TileM_, TileN = TileN_, Stages = Stages_;
  static constexpr bool RasterAlongN = RasterAlongN_;
  static constexpr int Swizzle = Swizzle_ > 0 ? Swizzle_ : 1;

  // --- the plan -------------------------------------------------------------
  static constexpr bool kHasLocalA = kPlan.hasLocalA;
  static constexpr bool kHasLocalB = kPlan.hasLocalB;
  static constexpr bool kLocalAE8M0 = kPlan.localAE8M0;
  static constexpr bool kLocalBE8M0 = kPlan.localBE8M0;
  static constexpr int kBlockA = kPlan.blockA;
  static constexpr int kBlockB = kPlan.blockB;
  static constexpr int kBlockRowsA = kPlan.blockRowsA;
  static constexpr int kBlockRowsB = kPlan.blockRowsB;
  static constexpr bool kHasGlobalA = kPlan.hasGlobalA;
  static constexpr bool kHasGlobalB = kPlan.hasGlobalB;
  static constexpr bool kGlobalRowA = kPlan.globalRowA;
  static constexpr bool kGlobalRowB = kPlan.globalRowB;
  static constexpr int kPromoteK = kPlan.promoteK;
  static constexpr bool kRowFactor = kPlan.rowFactor;
  static constexpr bool kColFactor = kPlan.colFactor;
  static constexpr int kFactorMode = kPlan.factorMode;
  static constexpr bool kHasTables = kPlan.hasTables;
  static constexpr bool kFoldA = kPlan.foldA;
  static constexpr int kPartialSets = kPlan.partialSets;
  static constexpr int kGroupBlocks = kPlan.groupBlocks;
  static constexpr bool kQuickCompile = QuickCompile_;
  static constexpr bool kF16Mma = F16Mma_;
  /// Experts of an m-grouped GEMM; 0 for a plain one.
  static constexpr int kGroups = Groups_;
  /// Whether the experts split K instead of M (Params::groupedK).
  static constexpr bool kGroupedK = GroupedK_;
  static constexpr int kSlotBytes = kPlan.slotBytes;
  static constexpr int kThreads = kPlan.threads;
  static constexpr int kConsumerWarpgroups = kPlan.consumerWarpgroups;
  static constexpr int kWgM = kPlan.wgM;
  static constexpr bool kSplitWarpgroups = kPlan.splitWarpgroups;
  static constexpr bool kSlicedAccumulators = kPlan.slicedAccumulators;
  static constexpr int kStageK = kPlan.stageK;
  static constexpr int kFullKStages = kPlan.fullKStages;
  static constexpr int kTailSteps = kPlan.tailSteps;
  static constexpr int kKStages = kPlan.kStages;
  static constexpr int SplitK = SplitK_;
  static constexpr int kUnitFullKStages = kPlan.unitFullKStages;
  static constexpr int kUnitKStages = kPlan.unitKStages;
  static constexpr int kStepsPerPromote = kPlan.stepsPerPromote;
  static constexpr int kPromotesPerStage = kPlan.promotesPerStage;
  static constexpr int kLoaderThreads = kPlan.loaderThreads;
  static constexpr int ClusterM = ClusterM_, ClusterN = ClusterN_;
  static constexpr int kClusterSize = kPlan.clusterSize;
  static constexpr bool kMulticastA = kPlan.multicastA;
  static constexpr bool kMulticastB = kPlan.multicastB;
  static constexpr int kEmptyArrivals = kPlan.emptyArrivals;
  static constexpr bool kUsesTmaD = kPlan.usesTmaD;
  static constexpr int kStoreBuffers = kPlan.storeBuffers;
  /// TMA boxes {inner elements, rows} for the host's tensor maps.
  static constexpr int kBoxA[2] = {kPlan.boxA[0], kPlan.boxA[1]};
  static constexpr int kBoxB[2] = {kPlan.boxB[0], kPlan.boxB[1]};
  static constexpr int kBoxD[2] = {kPlan.boxD[0], kPlan.boxD[1]};
  static constexpr int kStageABytes = kPlan.stageABytes;
  static constexpr int kStageBBytes = kPlan.stageBBytes;
  static constexpr int kRowTableBytes = kPlan.rowTableBytes;
  static constexpr int kColTableBytes = kPlan.colTableBytes;
  static constexpr int kOffsetA = kPlan.offsetA;
  static constexpr int kOffsetB = kPlan.offsetB;
  static constexpr int kOffsetRowTable = kPlan.offsetRowTable;
  static constexpr int kOffsetColTable = kPlan.offsetColTable;
  static constexpr int kOffsetSlots = kPlan.offsetSlots;
  static constexpr int kOffsetStaging = kPlan.offsetStaging;
  static constexpr int kOffsetBarriers = kPlan.offsetBarriers;
  static constexpr int kSharedBytes = kPlan.sharedBytes;
};

/// The grid for a Config (see gridSize(Params, ...)).
template <class Cfg> constexpr MOSS_GEMM_HD int gridSize(int m, int smCount) {
  return gridSize(Cfg::kParams, m, smCount);
}

} // namespace moss::gemm_kernel
