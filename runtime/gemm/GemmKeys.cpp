//===- GemmKeys.cpp - The keys of a runner's plans and kernels ------------===//
//
// What tells two GEMMs' plans (GemmRunner::getPlanned) and kernels
// (GemmRunner::compileKernel) apart, packed into GemmRunner::Key.
//
//===----------------------------------------------------------------------===//

#include "GemmRunnerState.h"

#include "moss/Compiler/TuningDatabase.h"

#include "llvm/Support/MathExtras.h"

#include <functional>

using namespace llvm;
using namespace moss;
using compiler::FloatType;
using compiler::GemmPlan;
using compiler::GemmSpec;
using numerics::ScalingScheme;

size_t GemmRunner::KeyHash::operator()(const Key &key) const {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t word : key.words)
    h = (h ^ uint64_t(word)) * 0xBF58476D1CE4E5B9ull;
  return size_t(h ^ (h >> 31));
}

/// Packs an operand's format and scheme into 24 bits.
static uint64_t packOperand(numerics::Fp8Format format,
                            const ScalingScheme &s) {
  return uint64_t(format) | uint64_t(s.kind) << 1 |
         uint64_t(s.globalPerRow()) << 4 | uint64_t(s.blockRows & 0xFF) << 8 |
         uint64_t(s.blockCols & 0xFF) << 16;
}

static uint64_t packType(std::optional<FloatType> type) {
  return type ? uint64_t(*type) + 1 : 0;
}

/// The words of a checked spec that change its kernel (block sizes < 256,
/// N and K < 2^31; M only when static, K only when static; not beta, a
/// launch argument, nor the fold, which planGemm resolves per launch).
static void packSpec(const GemmSpec &spec, GemmRunner::Key &key) {
  key.words[0] = spec.m;
  key.words[1] = spec.n << 32 | uint32_t(spec.k);
  key.words[2] =
      int64_t(packOperand(spec.a, spec.aScaling) |
              packOperand(spec.b, spec.bScaling) << 24 |
              uint64_t(spec.out) << 48 | packType(spec.bias) << 50 |
              packType(spec.accumulate) << 52 | uint64_t(spec.amax) << 54 |
              uint64_t(spec.promoteK >> 5) << 55 | // 0, 1, 2 or 4
              uint64_t(spec.multipliesInF16()) << 59 |
              uint64_t(spec.kernelFoldsA) << 60);
}

static int64_t packTiling(const compiler::TileConfig &t) {
  return int64_t(1 | uint64_t(t.tileM) << 1 | uint64_t(t.tileN) << 10 |
                 uint64_t(t.stages) << 19 | uint64_t(t.clusterM) << 24 |
                 uint64_t(t.clusterN) << 27 | uint64_t(t.raster) << 30 |
                 uint64_t(t.swizzle) << 31 | uint64_t(t.splitK) << 40 |
                 uint64_t(t.source ? int(*t.source) + 1 : 0) << 48);
}

GemmRunner::Key moss::detail::makeKernelKey(const GemmPlan &plan) {
  GemmRunner::Key key;
  packSpec(plan.kernel, key);
  key.words[3] = packTiling(plan.tiling);
  key.words[4] = plan.quickCompile;
  key.words[5] = plan.kernel.groups | int64_t(plan.kernel.maskedGroups) << 32 |
                 int64_t(plan.kernel.groupedK) << 33;
  return key;
}

GemmRunner::Key moss::detail::makePlanKey(const GemmSpec &spec, int64_t m,
                                          const GemmOptions &options) {
  GemmRunner::Key key;
  packSpec(spec, key);
  uint64_t bucket =
      Log2_64(uint64_t(compiler::getRowsBucket(compiler::getTuningM(spec, m))));
  // The database: the default (0), none (1) or a path given (2, hashed).
  uint64_t database = 0;
  if (const std::optional<std::string> &path = options.tuningDatabase)
    database =
        path->empty() ? 1 : 2 | uint64_t(std::hash<std::string>()(*path)) << 2;
  key.words[3] =
      int64_t(uint64_t(spec.getFold(m)) | bucket << 2 |
              uint64_t(options.foldAInKernel) << 8 |
              uint64_t(options.compileMode == GemmCompileMode::Quick) << 9 |
              database << 10);
  key.words[4] = options.tiling ? packTiling(*options.tiling) : 0;
  key.words[5] = spec.groups | int64_t(spec.maskedGroups) << 32 |
                 int64_t(spec.groupedK) << 33;
  return key;
}
