//===- GemmSpecs.h - GEMM specs the compiler unit tests share ---*- C++ -*-===//
//
// The specs the tiling, compile and tuning-database tests build their cases
// from, so that "the MOSS forward GEMM" is one thing in all of them.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_UNIT_GEMMSPECS_H
#define MOSS_TESTS_UNIT_GEMMSPECS_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

namespace moss::compiler::test {

/// An M x N x K GEMM of the given schemes (M = GemmSpec::kDynamic: dynamic).
inline GemmSpec makeSpec(int64_t m, int64_t n, int64_t k,
                         numerics::ScalingScheme a, numerics::ScalingScheme b,
                         FloatType out = FloatType::BF16) {
  GemmSpec spec;
  spec.m = m;
  spec.n = n;
  spec.k = k;
  spec.aScaling = a;
  spec.bScaling = b;
  spec.out = out;
  // The kernels as the schemes say: the exact promotion of block factors
  // (CompileGemmTest checks the default fold separately).
  spec.fold = numerics::BlockScaleFold::None;
  return spec;
}

/// The LLaMA FFN-up MOSS forward GEMM: A two-level (row global, per 32) x
/// B per-tensor, N = 11008, K = 4096, bf16 out.
inline GemmSpec mossForward(int64_t m = GemmSpec::kDynamic) {
  return makeSpec(
      m, 11008, 4096,
      numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32),
      numerics::ScalingScheme::perTensor());
}

/// A tiling of tile_m x tile_n in `stages` stages, the rest at defaults.
inline TileConfig makeTiling(int64_t tileM, int64_t tileN, int64_t stages) {
  TileConfig tiling;
  tiling.tileM = tileM;
  tiling.tileN = tileN;
  tiling.stages = stages;
  return tiling;
}

} // namespace moss::compiler::test

#endif // MOSS_TESTS_UNIT_GEMMSPECS_H
