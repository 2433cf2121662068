//===- ExpertRouting.h - Rows per expert of the tools' GEMMs ----*- C++ -*-===//
//
// The rows per expert that moss-jit run/bench, moss-tune and the grouped
// benchmarks and tests give an m-grouped GEMM (and, in blocks of 128, the
// columns of a k-grouped one).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_EXPERTROUTING_H
#define MOSS_TOOLS_COMMON_EXPERTROUTING_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <random>
#include <vector>

namespace moss::jit {

/// Rows per expert drawn for `groups` experts around `meanRows`: "random"
/// (0 to 2 * mean each), "skewed" (one expert half of all), "sparse" (most
/// experts empty). With three experts or more, the first has no rows, the
/// second one, and the third an odd count.
llvm::Expected<std::vector<int64_t>> routeRows(int64_t groups, int64_t meanRows,
                                               llvm::StringRef routing,
                                               std::mt19937_64 &rng);

/// Whether `routing` names one of routeTotalRows's routings.
bool isTotalRouting(llvm::StringRef routing);

/// Rows per expert that add up to exactly `totalRows` (what moss-tune's
/// shapes give: a tuning entry is keyed by the launch's rows): "uniform"
/// (totalRows / groups each, one more for the first totalRows % groups),
/// or routeRows's routing around the mean, its experts of 0 and 1 rows kept
/// and a skewed routing's large one at half of all rows, the others scaled
/// to the rest. Below 4 rows per expert every routing is uniform.
llvm::Expected<std::vector<int64_t>> routeTotalRows(int64_t groups,
                                                    int64_t totalRows,
                                                    llvm::StringRef routing,
                                                    std::mt19937_64 &rng);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_EXPERTROUTING_H
