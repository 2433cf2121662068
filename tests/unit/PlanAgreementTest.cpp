//===- PlanAgreementTest.cpp - Three callers, one GEMM plan ---------------===//
//
// The runtime (GemmRunner::getPlan), the pass pipeline (compileGemm, what
// moss-opt and the MLIR plugin run) and moss-tune (its shapes and the
// heuristic candidates it always keeps) ask planGemm and nothing else, so
// for every spec and launch rows of a table they plan the same kernel spec
// and tiling. No tuning database, so the tilings are the heuristic's; no
// GPU.
//
//===----------------------------------------------------------------------===//

#include "Candidates.h"
#include "Shapes.h"

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/GemmPlan.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cache/KernelCache.h"

#include "GemmSpecs.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::BlockScaleFold;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

struct Case {
  const char *name;
  GemmSpec spec;
};

/// Specs whose fold, kernel spec and tiling differ: the default fold of a
/// MOSS GEMM (by rows from 1024 rows on, none below or for f32 out), the
/// 128 fold, per-tensor, 1x128 x 128x128 groups and MXFP8.
std::vector<Case> getCases() {
  const ScalingScheme moss = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  GemmSpec mossDefault = mossForward();
  mossDefault.fold.reset();
  GemmSpec mossF32 = makeSpec(GemmSpec::kDynamic, 4096, 11008, moss,
                              ScalingScheme::perTensor(), FloatType::F32);
  mossF32.fold.reset();
  GemmSpec moss128 =
      makeSpec(GemmSpec::kDynamic, 7168, 2048, moss, ScalingScheme::mxfp8());
  moss128.fold = BlockScaleFold::K128;
  return {
      {"moss_default_fold", mossDefault},
      {"moss_f32_out", mossF32},
      {"moss_x_mxfp8_fold128", moss128},
      {"per_tensor",
       makeSpec(GemmSpec::kDynamic, 4096, 4096, ScalingScheme::perTensor(),
                ScalingScheme::perTensor())},
      {"groups_1x128_x_128x128",
       makeSpec(GemmSpec::kDynamic, 2048, 7168, ScalingScheme::perGroup(1, 128),
                ScalingScheme::perGroup(128, 128))},
      {"mxfp8", makeSpec(GemmSpec::kDynamic, 14336, 4096,
                         ScalingScheme::mxfp8(), ScalingScheme::mxfp8())},
  };
}

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

constexpr int64_t kRows[] = {1, 96, 512, 1024, 4096, 16384};

GemmPlan planOrDie(const GemmSpec &spec, const GemmPlanOptions &options) {
  llvm::Expected<GemmPlan> plan = planGemm(spec, TargetInfo::h200(), options);
  if (!plan) {
    ADD_FAILURE() << llvm::toString(plan.takeError());
    return GemmPlan();
  }
  return *plan;
}

/// moss-tune's shape of `spec` at `m` rows, as `--shape MxNxK` with the
/// spec's schemes and output as defaults.
tune::TuneShape getTuneShape(const GemmSpec &spec, int64_t m) {
  tune::ShapeDefaults defaults;
  defaults.a = {spec.a, spec.aScaling};
  defaults.b = {spec.b, spec.bScaling};
  defaults.out = spec.out;
  defaults.mma = spec.mma;
  defaults.fold = spec.fold;
  std::string text = std::to_string(m) + "x" + std::to_string(spec.n) + "x" +
                     std::to_string(spec.k);
  llvm::Expected<tune::TuneShape> shape = tune::parseShapeFlag(text, defaults);
  if (!shape) {
    ADD_FAILURE() << llvm::toString(shape.takeError());
    return tune::TuneShape();
  }
  return *shape;
}

class PlanAgreementTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanAgreementTest, RuntimePipelineAndTunerPlanAlike) {
  const GemmSpec &asked = GetParam().spec;
  runtime::KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  runtime::KernelCache cache(cacheOptions);
  std::unique_ptr<GemmRunner> runner =
      GemmRunner::createForTarget(cache, TargetInfo::h200());
  GemmOptions options;
  options.tuningDatabase = ""; // none: the heuristic

  for (int64_t rows : kRows) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    GemmPlanOptions atLaunch;
    atLaunch.rows = rows;
    const GemmPlan plan = planOrDie(asked, atLaunch);

    // The runtime plans a launch of `rows`.
    llvm::Expected<GemmPlan> runtimePlan =
        runner->getPlan(asked, rows, options);
    ASSERT_TRUE(bool(runtimePlan)) << llvm::toString(runtimePlan.takeError());
    EXPECT_EQ(runtimePlan->kernel.str(), plan.kernel.str());
    EXPECT_EQ(runtimePlan->tiling, plan.tiling);
    EXPECT_EQ(runtimePlan->passFoldsA, plan.passFoldsA);
    EXPECT_EQ(runtimePlan->passFoldsB, plan.passFoldsB);

    // moss-tune tunes the kernel the runtime launches, and keeps the
    // runtime's tiling and the pipeline's for a kernel of any M among its
    // candidates.
    const tune::TuneShape shape = getTuneShape(asked, rows);
    EXPECT_EQ(shape.spec.str(), plan.kernel.str());
    llvm::Expected<tune::ShapeCandidates> candidates =
        tune::enumerateCandidates(shape.spec, rows, TargetInfo::h200(), 8);
    ASSERT_TRUE(bool(candidates)) << llvm::toString(candidates.takeError());
    EXPECT_TRUE(tune::sameKernel(candidates->heuristic, plan.tiling))
        << tune::getShortName(candidates->heuristic) << " vs "
        << tune::getShortName(plan.tiling);

    // The pipeline compiles a kernel of any M planned for `rows` rows: the
    // tiling planGemm gives that kernel, which moss-tune keeps too.
    GemmPlanOptions anyM;
    anyM.heuristic.assumedM = rows;
    const GemmPlan anyMPlan = planOrDie(plan.kernel, anyM);
    CompileOptions compileOptions;
    compileOptions.assumedM = rows;
    llvm::Expected<KernelSource> compiled =
        compileGemm(plan.kernel, TargetInfo::h200(), compileOptions);
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    EXPECT_EQ(compiled->spec.str(), anyMPlan.kernel.str());
    EXPECT_EQ(compiled->tiling, anyMPlan.tiling);
    EXPECT_TRUE(tune::sameKernel(candidates->heuristicAtM, anyMPlan.tiling));
    EXPECT_TRUE(std::any_of(
        candidates->tilings.begin(), candidates->tilings.end(),
        [&](const TileConfig &t) { return tune::sameKernel(t, plan.tiling); }));
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, PlanAgreementTest,
                         ::testing::ValuesIn(getCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return std::string(info.param.name);
                         });

} // namespace
