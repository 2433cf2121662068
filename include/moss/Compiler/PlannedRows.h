//===- PlannedRows.h - The rows a GEMM kernel is planned for ----*- C++ -*-===//
//
// The one home of two planning rules: the M a kernel of dynamic M is planned
// for, and the power-of-two bucket of M rows that plans, tuning-database
// entries and the runtime's plan keys share.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_PLANNEDROWS_H
#define MOSS_COMPILER_PLANNEDROWS_H

#include "llvm/ADT/bit.h"

#include <cstdint>

namespace moss::compiler {

/// The M that the tiling heuristic, the default fold and the runtime's
/// prepared plans assume for a spec whose M is dynamic (TilingOptions::
/// assumedM, the passes' `assumed-m`).
constexpr int64_t kAssumedM = 4096;

/// The bucket of `m` rows: the smallest power of two >= max(m, 1), so
/// bucket B holds the M in (B / 2, B] (bucket 1 holds M = 1).
constexpr int64_t getRowsBucket(int64_t m) {
  return m <= 1 ? 1 : static_cast<int64_t>(llvm::bit_ceil(uint64_t(m)));
}

} // namespace moss::compiler

#endif // MOSS_COMPILER_PLANNEDROWS_H
