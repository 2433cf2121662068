//===- GemmSourceTest.cpp - One writer of the GEMM kernel's source --------===//
//
// generateGemmSource (what the runtime compiles, without MLIR) writes, for
// every plan, the translation unit the moss.gemm pass pipeline emits
// (compileGemm(plan): moss-specialize-shapes, moss-select-tiling,
// moss-convert-gemm-to-emitc and MLIR's C++ emitter), character for
// character, with the same kernel name, tiling and launch geometry.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSource.h"

#include "GemmSpecs.h"

#include "gtest/gtest.h"

#include <vector>

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::BlockScaleFold;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

struct Case {
  GemmSpec spec;
  GemmPlanOptions options;
};

std::vector<Case> cases() {
  const ScalingScheme a[] = {ScalingScheme::perTensor(),
                             ScalingScheme::perRow(),
                             ScalingScheme::perGroup(1, 128),
                             ScalingScheme::mxfp8(),
                             ScalingScheme::twoLevel(GlobalScope::Row, 32),
                             ScalingScheme::twoLevel(GlobalScope::Tensor, 64)};
  const ScalingScheme b[] = {ScalingScheme::perTensor(),
                             ScalingScheme::perGroup(128, 128),
                             ScalingScheme::mxfp8()};
  std::vector<Case> all;
  int i = 0;
  for (const ScalingScheme &sa : a)
    for (const ScalingScheme &sb : b) {
      // Vary the rest with the index, so that every option is met.
      Case c;
      c.spec = makeSpec(i % 3 == 0 ? GemmSpec::kDynamic : 37 + 500 * i,
                        i % 2 ? 4096 : 1000, i % 4 == 3 ? 1024 : 2048, sa, sb,
                        i % 5 == 4 ? FloatType::F32 : FloatType::BF16);
      c.spec.fold.reset();
      c.spec.b = i % 3 == 1 ? numerics::Fp8Format::E5M2
                            : numerics::Fp8Format::E4M3;
      if (i % 2)
        c.spec.bias = FloatType::F16;
      if (i % 3 == 2) {
        c.spec.accumulate = c.spec.out;
        c.spec.beta = 0.5f;
      }
      c.spec.amax = i % 4 == 1;
      c.options.rows = i % 3 == 0 ? 64 + 700 * i : GemmSpec::kDynamic;
      c.options.quickCompile = i % 4 == 2;
      c.options.foldAInKernel = i % 5 == 1;
      all.push_back(c);
      ++i;
    }
  // Forced promotion, and the f16 MMA with a bf16 output.
  Case promote{makeSpec(GemmSpec::kDynamic, 4096, 4096,
                        ScalingScheme::perRow(), ScalingScheme::perTensor()),
               {}};
  promote.spec.promoteK = 64;
  promote.spec.a = numerics::Fp8Format::E5M2;
  all.push_back(promote);
  Case f16{makeSpec(GemmSpec::kDynamic, 4096, 4096,
                    ScalingScheme::perTensor(), ScalingScheme::perTensor()),
           {}};
  f16.spec.mma = MmaType::F16;
  all.push_back(f16);
  // A given tiling with a cluster, and one with split-K.
  Case cluster{mossForward(8192), {}};
  cluster.spec.fold.reset(); // the row fold: a per-row kernel
  TileConfig t;
  t.tileM = 128;
  t.tileN = 256;
  t.stages = 4;
  t.clusterM = 2;
  t.raster = RasterOrder::AlongN;
  cluster.options.tiling = t;
  all.push_back(cluster);
  Case split{makeSpec(16, 4096, 4096, ScalingScheme::perTensor(),
                      ScalingScheme::perTensor()),
             {}};
  TileConfig s;
  s.tileM = 64;
  s.tileN = 128;
  s.stages = 6;
  s.splitK = 4;
  split.options.tiling = s;
  all.push_back(split);
  // m-grouped GEMMs (moss.grouped_gemm): contiguous with the row fold, a
  // bias and per-row B globals; masked with per-group scales.
  Case grouped{mossForward(), {}};
  grouped.spec.fold.reset();
  grouped.spec.groups = 8;
  grouped.spec.bScaling = ScalingScheme::perRow();
  grouped.spec.bias = FloatType::BF16;
  grouped.options.rows = 8192;
  all.push_back(grouped);
  Case masked{makeSpec(GemmSpec::kDynamic, 2048, 7168,
                       ScalingScheme::perGroup(1, 128),
                       ScalingScheme::perGroup(128, 128), FloatType::F32),
              {}};
  masked.spec.groups = 64;
  masked.spec.maskedGroups = true;
  masked.options.quickCompile = true;
  all.push_back(masked);
  // k-grouped GEMMs (moss.k_grouped_gemm): MOSS weight gradients with C,
  // and per-row ones in their quick-compile variant.
  const ScalingScheme moss = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  Case alongK{
      makeSpec(2048, 7168, GemmSpec::kDynamic, moss, moss, FloatType::F32), {}};
  alongK.spec.groups = 16;
  alongK.spec.groupedK = true;
  alongK.spec.accumulate = FloatType::F32;
  alongK.spec.beta = 1.0f;
  all.push_back(alongK);
  Case alongKQuick{makeSpec(4096, 1536, GemmSpec::kDynamic,
                            ScalingScheme::perRow(), ScalingScheme::perRow()),
                   {}};
  alongKQuick.spec.groups = 64;
  alongKQuick.spec.groupedK = true;
  alongKQuick.options.quickCompile = true;
  all.push_back(alongKQuick);
  return all;
}

TEST(GemmSourceTest, WritesWhatThePassPipelineEmits) {
  const TargetInfo target = TargetInfo::h200();
  int compared = 0;
  for (const Case &c : cases()) {
    llvm::Expected<GemmPlan> plan = planGemm(c.spec, target, c.options);
    ASSERT_TRUE(bool(plan)) << c.spec.str() << ": "
                            << llvm::toString(plan.takeError());
    llvm::Expected<KernelSource> piped = compileGemm(*plan, target);
    ASSERT_TRUE(bool(piped)) << c.spec.str() << ": "
                             << llvm::toString(piped.takeError());
    const KernelSource written = generateGemmSource(*plan, target);
    EXPECT_EQ(written.source, piped->source) << plan->kernel.str();
    EXPECT_EQ(written.kernelName, piped->kernelName) << plan->kernel.str();
    EXPECT_EQ(written.tiling, piped->tiling) << plan->kernel.str();
    EXPECT_EQ(written.spec.str(), piped->spec.str());
    EXPECT_EQ(written.quickCompile, piped->quickCompile);
    EXPECT_EQ(written.launch.threads, piped->launch.threads);
    EXPECT_EQ(written.launch.sharedBytes, piped->launch.sharedBytes);
    EXPECT_EQ(written.launch.cluster[0], piped->launch.cluster[0]);
    ++compared;
  }
  EXPECT_GE(compared, 20);
}

TEST(GemmSourceTest, TheKernelNameIsAHashOfTheConfiguration) {
  gemm_kernel::Params p;
  p.n = 4096;
  p.k = 4096;
  const GemmTranslationUnit first = generateGemmTranslationUnit(p);
  EXPECT_EQ(first.kernelName.rfind("moss_gemm_", 0), 0u);
  EXPECT_EQ(first.kernelName.size(), 10u + 16u);
  EXPECT_NE(first.source.find(first.kernelName + "("), std::string::npos);
  EXPECT_EQ(generateGemmTranslationUnit(p).kernelName, first.kernelName);
  // Each optional parameter, once set, changes the text and the name.
  const char *const written[] = {"/*ForcePromoteK=*/64",
                                 "/*QuickCompile=*/true", "/*F16Mma=*/true",
                                 "/*FoldA=*/true", "/*Groups=*/8>;"};
  for (int i = 0; i < 5; ++i) {
    gemm_kernel::Params q = p;
    switch (i) {
    case 0:
      q.forcePromoteK = 64;
      break;
    case 1:
      q.quickCompile = true;
      break;
    case 2:
      q.f16Mma = true;
      break;
    case 3:
      q.foldA = true;
      break;
    default:
      q.groups = 8;
    }
    const GemmTranslationUnit other = generateGemmTranslationUnit(q);
    EXPECT_NE(other.kernelName, first.kernelName) << i;
    EXPECT_NE(other.source.find(written[i]), std::string::npos)
        << other.source;
  }
}

} // namespace
