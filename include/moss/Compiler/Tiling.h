//===- Tiling.h - GEMM tile configurations and their heuristic --*- C++ -*-===//
//
// The tile configuration of a GEMM kernel as a plain struct (the C++ twin of
// `#moss.tiling`), the resource model that says what a configuration costs
// in threads, registers and shared memory, and the heuristic that picks one:
// fewest waves over the SMs, then the fullest last wave, within the limits.
// Plain C++ without MLIR, so the runtime and the tuner can call it.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_TILING_H
#define MOSS_COMPILER_TILING_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/PlannedRows.h"
#include "moss/Compiler/TilingLimits.h"
#include "moss/Numerics/TensorCoreModel.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moss::compiler {

/// The order in which the persistent scheduler walks output tiles: along M
/// means consecutive tiles share a column of B tiles.
enum class RasterOrder : uint8_t { AlongM = 0, AlongN = 1 };

/// Who chose a tile configuration.
enum class TilingSource : uint8_t { Heuristic = 0, Database = 1 };

/// "heuristic" or "db" (the `#moss.tiling` keywords).
const char *getName(TilingSource source);

/// One tile configuration: the TileM ... SplitK parameters of
/// `moss::gemm_kernel::Config` (docs/GEMM-KERNEL-ABI.md).
struct TileConfig {
  /// Output tile of one thread block: 64, 128 or 256 rows, a multiple of 8
  /// up to 256 columns.
  int64_t tileM = 128;
  int64_t tileN = 128;
  /// Depth of the shared-memory pipeline (K steps of kBlockK in flight).
  int64_t stages = 4;
  /// Thread block cluster shape (TMA multicast of B along M, A along N).
  int64_t clusterM = 1;
  int64_t clusterN = 1;
  /// Tile walk order and band width of the persistent scheduler.
  RasterOrder raster = RasterOrder::AlongM;
  int64_t swizzle = 1;
  /// Slices of K reduced into the output (1: none).
  int64_t splitK = 1;
  /// Who chose it; unset for a hand-written configuration.
  std::optional<TilingSource> source;

  /// Like `#moss.tiling`: "128x160, stages 5, cluster 2x1, along_m, swizzle
  /// 8, split_k 1 (heuristic)".
  std::string str() const;
};

/// Field-by-field equality (source included).
bool operator==(const TileConfig &lhs, const TileConfig &rhs);
inline bool operator!=(const TileConfig &lhs, const TileConfig &rhs) {
  return !(lhs == rhs);
}

/// K elements (= bytes of FP8) each pipeline stage loads per row of A and B:
/// one 128-byte swizzled TMA row (`Config::kStageK`).
constexpr int64_t kBlockK = 128;
/// The most rows (planned M) at which the heuristic, and moss-tune, slice K:
/// above one row of 128-row tiles splitting measured no gain.
constexpr int64_t kSplitKMaxRows = 128;

/// What a configuration needs from the SM, as the templates' plan
/// (templates/moss/gemm/config.cuh, through getTemplateParams) computes it,
/// with the register budget of the target: one
/// producer warpgroup (TMA, scale tables; 40 registers) and two consumer
/// warpgroups (232 registers) that split the tile's rows into m64 wgmma
/// tiles. A scheme with block scales promotes partial sums into the FP32
/// accumulators, which takes three accumulator sets (the sum and two
/// partials, ping-ponged) or two (see partialSets); the per-stage factor
/// tables hold one FP32 factor per tile row (A's scales) and per tile
/// column (B's 1xB scales, or per-group NxN ones whose blocks do not cover
/// whole tiles) for each promotion block of the stage. The epilogue stages
/// its output in shared memory for TMA stores where the output and the room
/// allow (storeBuffers).
struct ResourceUsage {
  /// Threads per block (`Config::kThreads`): 128 * (1 + 2).
  unsigned threads = 0;
  unsigned consumerWarpgroups = 0;
  /// FP32 accumulator registers per consumer thread.
  unsigned accumulatorRegisters = 0;
  /// Registers a consumer thread may spend on accumulators: its 232 after
  /// setmaxnreg, less kRegisterReserve; with the f16 MMA at most 152 less
  /// the codes it holds while widening B (TileN / 8).
  unsigned accumulatorRegisterLimit = 0;
  /// Partial accumulator sets (`Config::kPartialSets`; 0 without
  /// promotion): two, or one with factors on both sides or when two do not
  /// fit (`partialSetsNarrowed`: the promotion then waits for its wgmma).
  unsigned partialSets = 0;
  bool partialSetsNarrowed = false;
  /// The epilogue's staging buffers per consumer warp for TMA stores
  /// (`Config::kStoreBuffers`): 2 or 1 as fit in the 227 KiB a block may
  /// have, 0 when the output or the tile does not allow TMA stores.
  unsigned storeBuffers = 0;
  /// Whether the output and the tile allow TMA stores (16-byte output rows,
  /// tiles of whole 128-byte chunks).
  bool storable = false;
  /// Dynamic shared memory of the block (`Config::kSharedBytes`): the
  /// stages, the f16 slots, the staging buffers, two mbarriers per stage
  /// (and one per slot), and 1 KiB to align the base.
  unsigned sharedBytes = 0;
};

/// Registers a consumer thread keeps for addresses, scales and the epilogue
/// besides its accumulators.
constexpr unsigned kRegisterReserve = 40;

/// Whether the kernel can run `spec` at all (M, N and K below 2^31, scaling
/// blocks of 32, 64 or 128 along K and 1 to 2^31 - 1 rows); the error names
/// the operand and the block.
llvm::Error checkKernelSupport(const GemmSpec &spec);

/// The resource model for `spec` tiled by `tiling` on `target`.
ResourceUsage estimateResources(const GemmSpec &spec, const TileConfig &tiling,
                                const TargetInfo &target);

/// K elements between the kernel's promotions into FP32
/// (`Config::kPromoteK`): the smallest of the operands' local blocks along K
/// and the spec's promoteK, 0 when none is set.
int64_t getPromoteK(const GemmSpec &spec);

/// The running tensor-core sums of an unpromoted kernel of `spec` tiled by
/// `tiling` (the tensor-core model's chains): one per work unit's K slice,
/// and with split warpgroups (64-row tiles) one per warpgroup of each
/// slice, taking alternate stages. The slices, the stage width and the
/// split come from the templates' plan, as the kernel walks them
/// (kernel.cuh consumeUnits, mainloop.cuh DirectLoop).
std::vector<numerics::MmaChain> getTensorCoreChains(const GemmSpec &spec,
                                                    const TileConfig &tiling);

/// How the kernel of `spec` tiled by `tiling` cuts K into tensor-core sums:
/// its promotion interval, or (unpromoted) getTensorCoreChains.
numerics::MmaSchedule getMmaSchedule(const GemmSpec &spec,
                                     const TileConfig &tiling);

/// The tiling of `tiling`'s quick-compile variant (CompileOptions::
/// quickCompile): tiles of at most kQuickCompileTileM rows, and of at most
/// kQuickCompileTileN columns for a kernel that promotes partial sums
/// (NVRTC: 0.30 -> 0.21 s for the 8192^3 MOSS unit on a 2-core VM) or
/// kQuickCompileDirectTileN for one that does not (128x256 -> 128x192: 0.38
/// -> 0.32 s; narrower saves little more), or kQuickCompileF16DirectTileN
/// for one that does not and multiplies in f16 (per-tensor 8192^3 units:
/// 128x224 0.57 s, 128x192 0.49 s, 128x128 0.35 s), with as many stages as
/// fit, up to 8 (even for the f16 MMA); the rest stays. Every output entry is
/// computed as by `tiling`: a tile's extent does not enter an entry's sums
/// (64-row tiles, whose warpgroups split K, are kept). Unchanged where nothing
/// would change or the smaller tile does not fit.
constexpr int64_t kQuickCompileTileM = 128;
constexpr int64_t kQuickCompileTileN = 64;
constexpr int64_t kQuickCompileDirectTileN = 192;
constexpr int64_t kQuickCompileF16DirectTileN = 128;
TileConfig getQuickCompileTiling(const GemmSpec &spec, const TileConfig &tiling,
                                 const TargetInfo &target);

/// The most pipeline stages of `tiling` (its own stage count aside) whose
/// shared memory, as the templates plan it, fits in `target`'s (the
/// epilogue's staging buffers take what the stages leave); 0 when not one
/// does.
int64_t getStagesThatFit(const GemmSpec &spec, TileConfig tiling,
                         const TargetInfo &target);

/// Checks `tiling` against `target`'s limits (shared memory, registers) and
/// the kernel's structural rules; the error says what does not fit and
/// what the limit is.
llvm::Error checkTiling(const GemmSpec &spec, const TileConfig &tiling,
                        const TargetInfo &target);

/// Knobs of the heuristic.
struct TilingOptions {
  /// The M the heuristic plans for when `spec.m` is dynamic.
  int64_t assumedM = kAssumedM;
  /// Whether to consider split-K (only for f32 outputs without amax, where
  /// the slices can be summed with atomics). The kernel does not implement
  /// split-K yet.
  bool allowSplitK = false;
  /// Whether to pair blocks in 2x1 clusters (TMA multicast of B) when the
  /// planned M's tiles pair up and fill at least a wave (a dynamic M is
  /// planned as assumedM, or by the runtime for the launch's bucket): each
  /// kernel alone at the power cap runs as fast as with 1x1 or faster
  /// (docs/PERFORMANCE.md, "Design measurements behind the code").
  bool allowClusters = true;
  /// Pipeline depth bounds.
  int64_t minStages = 3;
  int64_t maxStages = 8;
};

/// How good a configuration is on `target`, in the heuristic's terms.
struct TilingScore {
  int64_t tiles = 0;
  /// Thread blocks that run at once: SMs rounded down to whole clusters.
  int64_t slots = 0;
  int64_t waves = 0;
  /// Busy fraction of the slots in the last wave, in (0, 1].
  double lastWaveUtilization = 0;
  /// Output elements computed beyond [M, N] because of partial tiles.
  int64_t paddedElements = 0;
};

/// Scores `tiling` for `spec` on `target` (dynamic M counts as
/// `options.assumedM`).
TilingScore scoreTiling(const GemmSpec &spec, const TileConfig &tiling,
                        const TargetInfo &target,
                        const TilingOptions &options = {});

/// The heuristic: among tile shapes {128, 256} x {32, 64, 96, ..., 256}
/// (64-row tiles too for a promoted scheme at M up to 64, and split-K slices
/// when allowed) that the kernel takes, that fit the
/// registers and leave room for `minStages` stages (fewer when K has fewer
/// steps, never under 2) in shared memory, pick the one with the fewest
/// waves over `target.smCount` SMs, then the fullest last wave, then the
/// least padding, the shorter chain of K stages per work unit (between
/// different K slicings, which are scored only for M up to 128 and
/// promoted schemes or a K of at least 8192), the larger tile, the deeper
/// pipeline;
/// give it as many stages as fit (up to `maxStages` and the number of K
/// steps), the raster order along the dimension with fewer tiles, a
/// swizzle band of up to 8 tiles, and (when allowed) a 2x1 cluster when M
/// is static, the M tiles pair up and there is at least a full wave. Fails
/// when nothing fits, naming the smallest need and the limit. The result's
/// source is TilingSource::Heuristic.
llvm::Expected<TileConfig> selectTiling(const GemmSpec &spec,
                                        const TargetInfo &target,
                                        const TilingOptions &options = {});

/// Sets `tiling`'s tile order as the heuristic sets it for an output of
/// `rows` x `n`: the raster along the dimension with fewer tiles, and a
/// swizzle band of up to 8 tiles (the largest power of two within both
/// counts). A tiling given without an order (moss-jit's --tiling) takes it.
void setTileOrder(TileConfig &tiling, int64_t rows, int64_t n);

/// The heuristic's tiling for a kernel with a dynamic M that is launched at
/// `m` rows (what the runtime uses without a tuning database entry): planned
/// for m's power-of-two bucket when that is below `options.assumedM`, else
/// for assumedM. Small batches get narrower tiles that fill the SMs; large
/// ones keep the assumedM plan, which is faster there (docs/PERFORMANCE.md,
/// "Design measurements behind the code"). A static M is planned as is.
/// Split-K is allowed (the runtime provides its workspace).
llvm::Expected<TileConfig> selectTilingForLaunch(const GemmSpec &spec,
                                                 int64_t m,
                                                 const TargetInfo &target,
                                                 TilingOptions options = {});

} // namespace moss::compiler

#endif // MOSS_COMPILER_TILING_H
