//===- ExpertRouting.cpp - Rows per expert of the tools' GEMMs ------------===//

#include "ExpertRouting.h"

#include <algorithm>
#include <numeric>

using namespace llvm;
using namespace moss;

Expected<std::vector<int64_t>> jit::routeRows(int64_t groups, int64_t meanRows,
                                              StringRef routing,
                                              std::mt19937_64 &rng) {
  if (routing != "random" && routing != "skewed" && routing != "sparse")
    return createStringError("routing '" + routing +
                             "' is not random, skewed or sparse");
  std::vector<int64_t> rows(static_cast<size_t>(groups));
  std::uniform_int_distribution<int64_t> around(0, 2 * meanRows);
  for (int64_t &r : rows)
    r = routing == "sparse" ? (rng() % 8 == 0 ? around(rng) : 0) : around(rng);
  if (routing == "skewed")
    rows[rng() % groups] = meanRows * groups / 2;
  if (groups >= 3) {
    rows[0] = 0;
    rows[1] = 1;
    rows[2] |= 1;
  }
  return rows;
}

bool jit::isTotalRouting(StringRef routing) {
  return routing == "uniform" || routing == "random" || routing == "skewed" ||
         routing == "sparse";
}

Expected<std::vector<int64_t>> jit::routeTotalRows(int64_t groups,
                                                   int64_t totalRows,
                                                   StringRef routing,
                                                   std::mt19937_64 &rng) {
  if (!isTotalRouting(routing))
    return createStringError("routing '" + routing +
                             "' is not uniform, random, skewed or sparse");
  if (groups < 1 || totalRows < 0)
    return createStringError("routing needs experts and rows");
  if (routing == "uniform") {
    std::vector<int64_t> rows(size_t(groups), totalRows / groups);
    for (int64_t g = 0; g < totalRows % groups; ++g)
      ++rows[size_t(g)];
    return rows;
  }
  // Too few rows to draw a shape from.
  if (groups == 1 || totalRows < 4 * groups)
    return routeTotalRows(groups, totalRows, "uniform", rng);
  Expected<std::vector<int64_t>> drawn =
      routeRows(groups, totalRows / groups, routing, rng);
  if (!drawn)
    return drawn.takeError();
  std::vector<int64_t> &rows = *drawn;
  // Kept as drawn: the experts of 0 and 1 rows, and a skewed routing's
  // large expert at exactly half of all rows. The others are scaled to the
  // rows left (rounded down, the rest one row each to the first of them).
  const size_t heavy =
      routing == "skewed"
          ? size_t(std::max_element(rows.begin(), rows.end()) - rows.begin())
          : rows.size();
  if (heavy < rows.size())
    rows[heavy] = totalRows / 2;
  std::vector<size_t> scaled;
  int64_t kept = 0, drawnRows = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    if (g == heavy || rows[g] <= 1) {
      kept += rows[g];
    } else {
      scaled.push_back(g);
      drawnRows += rows[g];
    }
  }
  const int64_t left = totalRows - kept;
  if (scaled.empty() || drawnRows == 0 || left < 0)
    return routeTotalRows(groups, totalRows, "uniform", rng);
  int64_t given = 0;
  for (size_t g : scaled) {
    rows[g] = int64_t(double(rows[g]) * double(left) / double(drawnRows));
    given += rows[g];
  }
  for (size_t i = 0; given < left; i = (i + 1) % scaled.size(), ++given)
    ++rows[scaled[i]];
  for (size_t i = 0; given > left; i = (i + 1) % scaled.size())
    if (rows[scaled[i]] > 0) {
      --rows[scaled[i]];
      --given;
    }
  return std::move(rows);
}
