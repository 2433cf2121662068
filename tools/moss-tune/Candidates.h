//===- Candidates.h - The tile configurations moss-tune tries ---*- C++ -*-===//
//
// The search space of one shape: tile_m {64, 128, 256} x tile_n {32, 64,
// ..., 256} x stages {2..8} x cluster {1x1, 2x1, 1x2} x raster {along M,
// along N} x swizzle {1, 2, 4, 8}, and at M up to 128 split_k {1, 2, 4, 8}.
// Stream-K and the number of consumer warpgroups are not searched (two are
// fixed). Pruned before compiling:
//   - resources: the tiling does not fit the registers or shared memory,
//     or the kernel does not take it (compiler::checkTiling: K slices, no
//     cluster with split-K or tile_m 64), or B's per-group scales rule out
//     tile_n;
//   - idle SMs: the tile shape's waves keep fewer than half the SMs busy on
//     average, while another tile shape keeps at least half busy;
//   - redundant: a variant that runs exactly like another one (a swizzle
//     band wider than the tiles, a 2-block cluster along a dimension with one
//     tile, more stages than K steps);
//   - padding: tile_m 256 where 128 gives the same number of M tiles;
//   - the cap: the rest are ranked (the heuristic's score of the tile shape,
//     then closeness to the heuristic's own settings) and the best
//     `maxCandidates` are kept.
// The heuristic's choices (the runtime's, selectTilingForLaunch: planned for
// the M bucket below 4096, else for 4096, when M is dynamic; and the
// heuristic planned for this shape's M) are always kept.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSTUNE_CANDIDATES_H
#define MOSS_TOOLS_MOSSTUNE_CANDIDATES_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace moss::tune {

/// How many configurations each step removed.
struct CandidateCounts {
  int64_t space = 0;
  int64_t resources = 0;
  int64_t idleSms = 0;
  int64_t redundant = 0;
  int64_t padding = 0;
  int64_t overCap = 0;
  int64_t kept = 0;

  CandidateCounts &operator+=(const CandidateCounts &other);
  int64_t pruned() const {
    return resources + idleSms + redundant + padding + overCap;
  }
};

/// The candidates of one shape, best-ranked first.
struct ShapeCandidates {
  std::vector<compiler::TileConfig> tilings;
  /// What planGemm picks without a database: for a launch of this M (the
  /// runtime's), and for a kernel of any M planned for it (the pipeline's,
  /// compileGemm with assumedM). Both are in `tilings`.
  compiler::TileConfig heuristic;
  compiler::TileConfig heuristicAtM;
  CandidateCounts counts;
};

/// Enumerates and prunes the configurations of `spec` (dynamic M) launched
/// with `m` rows on `target`, keeping at most `maxCandidates` (and always
/// the two heuristic choices).
llvm::Expected<ShapeCandidates>
enumerateCandidates(const compiler::GemmSpec &spec, int64_t m,
                    const compiler::TargetInfo &target, unsigned maxCandidates);

/// Whether two tilings make the same kernel (the source is ignored).
bool sameKernel(const compiler::TileConfig &lhs,
                const compiler::TileConfig &rhs);

/// A short form for tables: "128x128 s6 c1x1 m/8".
std::string getShortName(const compiler::TileConfig &tiling);

} // namespace moss::tune

#endif // MOSS_TOOLS_MOSSTUNE_CANDIDATES_H
