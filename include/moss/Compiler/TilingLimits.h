//===- TilingLimits.h - The range of every tiling field ---------*- C++ -*-===//
//
// What any tile configuration may ask for, checked before any arithmetic on
// its fields (compiler::checkTiling, #moss.tiling's verifier): far beyond
// what fits on a GPU, small enough that no product of the fields overflows.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_TILINGLIMITS_H
#define MOSS_COMPILER_TILINGLIMITS_H

#include <cstdint>

namespace moss::compiler {

/// The deepest pipeline a tiling may ask for.
constexpr int64_t kMaxTilingStages = 64;
/// The largest split-K factor a tiling may ask for.
constexpr int64_t kMaxSplitK = 64;

} // namespace moss::compiler

#endif // MOSS_COMPILER_TILINGLIMITS_H
