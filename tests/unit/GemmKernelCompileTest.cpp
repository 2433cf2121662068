//===- GemmKernelCompileTest.cpp - The FP8 GEMM kernel compiles clean -----===//
//
// Every kernel variant the GEMM templates support compiles through the
// project's NVRTC wrapper for sm_90a; its PTX holds the Hopper instructions
// (wgmma, TMA, setmaxnreg); ptxas reports no local memory, no spills, no
// serialized wgmma and no ignored setmaxnreg. Needs NVRTC, not a GPU
// (skipped with the reason without it). The variants compile once, two at a
// time, and every test reads the shared results.
//
// Also: moss::gemm_kernel::validate() and the Config static_assert agree, and
// the plan of the main schemes is what the design says (docs/GEMM-KERNEL.md).
//
//===----------------------------------------------------------------------===//

#include "GemmKernelParams.h"

#include "moss/Compiler/TemplateParams.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace moss::gemm_kernel;
using namespace moss::gemmtest;
using namespace moss::runtime;

namespace {

struct Variant {
  std::string name;
  Params params;
};

Params twoLevel(Params p, bool rowA) {
  p.scaleA = kTwoLevel;
  p.blockA = 32;
  p.globalRowA = rowA;
  return p;
}

/// DeepSeek-style per-group scales: A 1x128, B 128x128.
Params perGroup(Params p) {
  p.scaleA = kPerGroup;
  p.blockRowsA = 1;
  p.blockA = 128;
  p.scaleB = kPerGroup;
  p.blockRowsB = 128;
  p.blockB = 128;
  return p;
}

/// The variants CI compiles: every scheme combination the kernel has a
/// distinct code path for, every Out type, every epilogue option, tails.
std::vector<Variant> variants() {
  std::vector<Variant> v;
  Params base;
  base.n = 4096;
  base.k = 4096;

  Params p = base;
  v.push_back({"tensor_x_tensor_bf16", withDefaultTiling(p)});

  p = base;
  p.out = kF32;
  p.tileM = 256;
  p.tileN = 128;
  p.stages = 4;
  v.push_back({"tensor_x_tensor_f32_256x128", p});

  p = twoLevel(base, /*rowA=*/true);
  v.push_back({"moss_forward_row_bf16", withDefaultTiling(p)});

  p = twoLevel(base, /*rowA=*/false);
  p.out = kF32;
  p.bias = kF32;
  p.accum = kF32;
  p.amax = true;
  v.push_back({"moss_forward_tensor_f32_bias_c_amax", withDefaultTiling(p)});

  v.push_back({"group1x128_x_group128x128_bf16",
               withDefaultTiling(perGroup(base))});

  p = twoLevel(base, /*rowA=*/true);
  p.scaleB = kTwoLevel;
  p.blockB = 32;
  p.globalRowB = false;
  p.out = kF16;
  v.push_back({"twolevel_x_twolevel_f16", withDefaultTiling(p)});

  p = base;
  p.scaleA = kPerRow;
  p.scaleB = kPerRow;
  p.out = kF32;
  p.bias = kBF16;
  v.push_back({"row_x_row_f32_bias", withDefaultTiling(p)});

  p = twoLevel(base, /*rowA=*/true);
  p.elemA = kE5M2;
  v.push_back({"moss_forward_e5m2_x_e4m3", withDefaultTiling(p)});

  p = twoLevel(base, /*rowA=*/true);
  p.n = 257;
  p.k = 96;
  p.elemB = kE5M2;
  p.bias = kBF16;
  p.accum = kBF16;
  p.amax = true;
  v.push_back({"moss_forward_tail_n257_k96", withDefaultTiling(p)});

  p = base;
  p.scaleA = kMXFP8;
  p.scaleB = kMXFP8;
  v.push_back({"mx_x_mx_bf16", withDefaultTiling(p)});

  p = base;
  p.forcePromoteK = 128;
  p.out = kF32;
  v.push_back({"tensor_x_tensor_promote128_f32", withDefaultTiling(p)});

  p = base;
  p.n = 257;
  p.k = 96;
  p.bias = kF16;
  p.accum = kF16;
  p.out = kF16;
  p.amax = true;
  p.rasterAlongN = true;
  v.push_back({"tensor_x_tensor_tail_n257_k96_f16", withDefaultTiling(p)});

  p = twoLevel(base, /*rowA=*/true);
  p.m = 1000;
  p.n = 3000;
  p.k = 2048;
  v.push_back({"moss_forward_static_m", withDefaultTiling(p)});

  // Other tilings moss-select-tiling may pick.
  p = base;
  p.tileN = 160;
  p.stages = 5;
  v.push_back({"tensor_x_tensor_128x160", p});
  p = base;
  p.tileM = 256;
  p.tileN = 96;
  v.push_back({"tensor_x_tensor_256x96", p});
  p = twoLevel(base, /*rowA=*/true);
  p.tileN = 96;
  p.stages = 7;
  v.push_back({"moss_forward_128x96", p});
  p = twoLevel(base, /*rowA=*/true);
  p.tileM = 256;
  p.tileN = 64;
  p.stages = 5;
  v.push_back({"moss_forward_256x64", p});
  p = twoLevel(base, /*rowA=*/true);
  p.tileN = 32;
  p.stages = 8;
  v.push_back({"moss_forward_128x32", p});
  // Wider than two partial sets allow: one set.
  p = twoLevel(base, /*rowA=*/true);
  p.tileN = 192;
  p.stages = 5;
  v.push_back({"moss_forward_128x192", p});
  // Per-group B whose 128-row blocks do not cover whole tiles: a column table.
  p = perGroup(base);
  p.tileN = 192;
  p.stages = 5;
  v.push_back({"group1x128_x_group128x128_128x192", p});

  // K = 11008 (86 stages): scale rows not in 16-byte chunks, so the
  // producer loads each stage's scales on its own.
  p = perGroup(base);
  p.k = 11008;
  v.push_back({"group1x128_x_group128x128_k11008", withDefaultTiling(p)});
  p = twoLevel(base, /*rowA=*/true);
  p.k = 11008;
  p.tileM = 256;
  p.tileN = 64;
  p.stages = 5;
  v.push_back({"moss_forward_256x64_k11008", p});

  // A's E8M0 factors folded by the consumers (FoldA): the widest tiles, 256
  // rows (two m64 tiles per warpgroup), E5M2, MXFP8, a B cluster, K = 11008.
  p = twoLevel(base, /*rowA=*/true);
  p.foldA = true;
  v.push_back({"moss_forward_fold_a", withDefaultTiling(p)});
  p.tileM = 256;
  p.tileN = 96;
  p.stages = 5;
  p.elemA = kE5M2;
  p.globalRowA = false;
  v.push_back({"moss_forward_fold_a_e5m2_256x96", p});
  p = base;
  p.scaleA = kMXFP8;
  p.scaleB = kPerRow;
  p.k = 11008;
  p.foldA = true;
  p = withDefaultTiling(p);
  p.clusterM = 2;
  v.push_back({"mx_fold_a_x_row_cluster2x1_k11008", p});

  // 2-CTA clusters with TMA multicast.
  p = withDefaultTiling(base);
  p.clusterM = 2;
  v.push_back({"tensor_x_tensor_cluster2x1", p});
  p = withDefaultTiling(base);
  p.clusterN = 2;
  v.push_back({"tensor_x_tensor_cluster1x2", p});
  p = withDefaultTiling(twoLevel(base, /*rowA=*/true));
  p.clusterM = 2;
  v.push_back({"moss_forward_cluster2x1", p});
  p = withDefaultTiling(perGroup(base));
  p.clusterM = 2;
  v.push_back({"group_cluster2x1", p});

  // Split-K: slices of K summed in a workspace, direct and promoted loops.
  p = withDefaultTiling(base);
  p.splitK = 4;
  v.push_back({"tensor_x_tensor_split4", p});
  p = twoLevel(base, /*rowA=*/true);
  p.amax = true;
  p.splitK = 2;
  v.push_back({"moss_forward_amax_split2", withDefaultTiling(p)});
  p = perGroup(base);
  p.tileN = 64;
  p.stages = 8;
  p.splitK = 8;
  v.push_back({"group1x128_x_group128x128_128x64_split8", p});

  // 64-row tiles: both consumer warpgroups on the same rows over alternate
  // K stages (an odd stage count per unit: 4224 / 128 = 33).
  p = twoLevel(base, /*rowA=*/true);
  p.tileM = 64;
  p.tileN = 64;
  p.stages = 8;
  p.splitK = 2;
  v.push_back({"moss_forward_64x64_split2", p});
  p.tileN = 32;
  p.splitK = 1;
  p.k = 4224;
  v.push_back({"moss_forward_64x32_odd_stages", p});
  p = perGroup(base);
  p.tileM = 64;
  p.tileN = 128;
  p.stages = 8;
  v.push_back({"group1x128_x_group128x128_64x128", p});
  p = withDefaultTiling(base);
  p.tileM = 64;
  p.tileN = 64;
  p.stages = 8;
  p.amax = true;
  v.push_back({"tensor_x_tensor_64x64_amax", p});

  p = twoLevel(base, /*rowA=*/false);
  p.blockA = 64;
  p.scaleB = kPerGroup;
  p.blockRowsB = 128;
  p.blockB = 128;
  v.push_back({"twolevel64_x_group128x128", withDefaultTiling(p)});

  // The f16 MMA: each stage widened into f16 slots (TileM 128), promoted
  // per 32 and per 128 (a column table at 96 wide), direct with clusters,
  // factors on both sides with split K and a K tail.
  p = twoLevel(base, /*rowA=*/true);
  p.out = kF32;
  p.f16Mma = true;
  v.push_back({"moss_forward_f16mma", withDefaultTiling(p)});
  p = perGroup(base);
  p.out = kF32;
  p.f16Mma = true;
  p.tileN = 96;
  p.stages = 4;
  v.push_back({"group1x128_x_group128x128_f16mma_128x96", p});
  p = base;
  p.elemB = kE5M2;
  p.out = kF32;
  p.f16Mma = true;
  p = withDefaultTiling(p);
  p.clusterM = 2;
  v.push_back({"tensor_x_e5m2_f16mma_cluster2x1", p});
  p = twoLevel(base, /*rowA=*/false);
  p.scaleB = kTwoLevel;
  p.blockB = 32;
  p.out = kF32;
  p.bias = kF32;
  p.accum = kF32;
  p.amax = true;
  p.f16Mma = true;
  p.tileN = 64;
  p.stages = 4;
  p.splitK = 2;
  v.push_back({"twolevel_x_twolevel_f16mma_128x64_split2", p});
  p.k = 4096 + 32;
  p.splitK = 1;
  v.push_back({"twolevel_x_twolevel_f16mma_128x64_k_tail", p});

  // m-grouped GEMMs (mixture-of-experts layers): the row-folded MOSS
  // forward, DeepSeek's per-group scales, and block-scaled B with the
  // epilogue's per-expert bias and B globals.
  p = base;
  p.scaleA = kPerRow;
  p.groups = 8;
  p.tileN = 256;
  p.stages = 4;
  v.push_back({"row_x_tensor_grouped8", p});
  p = perGroup(base);
  p.groups = 64;
  p.tileN = 128;
  p.stages = 6;
  v.push_back({"group1x128_x_group128x128_grouped64", p});
  p.maskedGroups = true;
  v.push_back({"group1x128_x_group128x128_masked64", p});
  p = twoLevel(base, /*rowA=*/false);
  p.scaleB = kTwoLevel;
  p.blockB = 32;
  p.globalRowB = true;
  p.out = kF32;
  p.bias = kF32;
  p.accum = kF32;
  p.amax = true;
  p.groups = 16;
  p.tileN = 64;
  p.stages = 6;
  v.push_back({"twolevel_x_twolevel_f32_bias_c_amax_grouped16", p});

  // k-grouped GEMMs (a mixture-of-experts weight gradient, K the tokens):
  // MOSS on both sides (promoted by row and column), per-tensor (direct),
  // and per-row with f32 outputs accumulated into C.
  for (Params k : {twoLevel(base, /*rowA=*/true), base}) {
    k.m = 4096;
    k.k = -1;
    k.groups = 64;
    k.groupedK = true;
    k.tileN = 128;
    k.stages = 5;
    if (k.scaleA == kTwoLevel) {
      k.scaleB = kTwoLevel;
      k.blockB = 32;
      k.globalRowB = true;
    }
    v.push_back({k.scaleA == kTwoLevel ? "twolevel_x_twolevel_k_grouped64"
                                       : "tensor_x_tensor_k_grouped64",
                 k});
  }
  p = base;
  p.m = 1536;
  p.k = -1;
  p.scaleA = kPerRow;
  p.scaleB = kPerRow;
  p.out = kF32;
  p.accum = kF32;
  p.groups = 8;
  p.groupedK = true;
  p.tileM = 256;
  p.tileN = 64;
  v.push_back({"row_x_row_f32_c_k_grouped8", p});
  p.m = 1000; // part tiles: stores from registers
  p.tileM = 128;
  p.tileN = 128;
  p.stages = 4;
  p.f16Mma = true;
  v.push_back({"row_x_row_f32_c_f16mma_k_grouped8", p});

  // Quick-compile variants (the first kernel of a tiered compile), on the
  // tiles the compiler narrows them to: shorter promotion groups, per 32
  // and per 128, whole K and split.
  for (const char *name : {"moss_forward_cluster2x1", "group_cluster2x1",
                           "moss_forward_amax_split2",
                           "group1x128_x_group128x128_128x64_split8",
                           "group1x128_x_group128x128_grouped64"}) {
    auto it = std::find_if(v.begin(), v.end(),
                           [&](const Variant &x) { return x.name == name; });
    v.push_back({std::string(name) + "_quick", quickCompileParams(it->params)});
  }
  return v;
}

struct Compiled {
  std::optional<CompileResult> result;
  std::string error;
};

/// Compiles every variant once (two at a time) and keeps the results.
class GemmKernelCompileTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    if (!isNvrtcAvailable())
      return;
    std::vector<Variant> all = variants();
    std::vector<std::future<void>> running;
    std::mutex mutex;
    auto compileOne = [&](const Variant &variant) {
      CompileOptions options;
      options.arch = "sm_90a";
      options.flags = {"--ptxas-options=-v"};
      options.programName = variant.name + ".cu";
      llvm::Expected<CompileResult> result =
          compileCuda(kernelSource(variant.params), options);
      Compiled c;
      if (result)
        c.result = std::move(*result);
      else
        c.error = llvm::toString(result.takeError());
      std::lock_guard<std::mutex> lock(mutex);
      (*results)[variant.name] = std::move(c);
    };
    results = new std::map<std::string, Compiled>();
    size_t next = 0;
    while (next < all.size()) {
      running.clear();
      for (int t = 0; t < 2 && next < all.size(); ++t)
        running.push_back(
            std::async(std::launch::async, compileOne, all[next++]));
      for (std::future<void> &f : running)
        f.get();
    }
  }
  static void TearDownTestSuite() {
    delete results;
    results = nullptr;
  }
  static std::map<std::string, Compiled> *results;
};

std::map<std::string, Compiled> *GemmKernelCompileTest::results = nullptr;

#define SKIP_WITHOUT_NVRTC()                                                   \
  do {                                                                         \
    if (!isNvrtcAvailable())                                                   \
      GTEST_SKIP() << llvm::toString(getNvrtcVersion().takeError());           \
  } while (false)

TEST_F(GemmKernelCompileTest, EveryVariantCompilesWithHopperInstructions) {
  SKIP_WITHOUT_NVRTC();
  for (const Variant &variant : variants()) {
    SCOPED_TRACE(variant.name + ": " + describe(variant.params));
    const Compiled &c = results->at(variant.name);
    ASSERT_TRUE(c.result.has_value()) << c.error;
    const CompileResult &r = *c.result;
    EXPECT_FALSE(r.cubin.empty());
    EXPECT_NE(r.ptx.find(".entry moss_gemm"), std::string::npos);
    EXPECT_NE(r.ptx.find("wgmma.mma_async.sync.aligned.m64n"),
              std::string::npos);
    EXPECT_NE(r.ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
    EXPECT_NE(r.ptx.find("mbarrier.try_wait.parity"), std::string::npos);
    EXPECT_NE(r.ptx.find("setmaxnreg.inc.sync.aligned.u32"), std::string::npos);
    EXPECT_NE(r.ptx.find("setmaxnreg.dec.sync.aligned.u32"), std::string::npos);
    // The f16 MMA: FP8 codes widened on chip, f16 wgmma, no FP8 wgmma.
    // FoldA widens codes too, to fold them in f16 (and converts them back).
    EXPECT_EQ(r.ptx.find("k16.f32.f16.f16") != std::string::npos,
              variant.params.f16Mma);
    EXPECT_EQ(r.ptx.find("cvt.rn.f16x2.e") != std::string::npos,
              variant.params.f16Mma || variant.params.foldA);
    EXPECT_EQ(r.ptx.find("cvt.rn.satfinite.e") != std::string::npos,
              variant.params.foldA);
    EXPECT_EQ(r.ptx.find("k32.f32.e") != std::string::npos,
              !variant.params.f16Mma);
    // The epilogue stores through TMA exactly when the plan says so.
    EXPECT_EQ(r.ptx.find("cp.async.bulk.tensor.2d.global.shared::cta") !=
                  std::string::npos,
              plan(variant.params).usesTmaD);
  }
}

TEST_F(GemmKernelCompileTest, NoLocalMemoryNoSpillsNoSerialization) {
  SKIP_WITHOUT_NVRTC();
  std::printf("%-40s %5s %7s %6s %7s\n", "variant", "regs", "smem", "stack",
              "nvrtc_s");
  for (const Variant &variant : variants()) {
    SCOPED_TRACE(variant.name + ": " + describe(variant.params));
    const Compiled &c = results->at(variant.name);
    ASSERT_TRUE(c.result.has_value()) << c.error;
    const std::string &log = c.result->log;
    ResourceUsage usage = parsePtxasLog(log);
    ASSERT_TRUE(usage.parsed) << "no ptxas -v report in the log:\n" << log;
    EXPECT_EQ(usage.stackBytes, 0) << log;
    EXPECT_EQ(usage.spillStoreBytes, 0) << log;
    EXPECT_EQ(usage.spillLoadBytes, 0) << log;
    // 65536 / 384 rounded down to 8: the entry count setmaxnreg works from.
    EXPECT_EQ(usage.registers, 168) << log;
    // C7514/C7515: wgmma serialized; C7517: a wait inserted; C7508:
    // setmaxnreg ignored. Any of them is a large slowdown.
    EXPECT_EQ(log.find("Potential Performance Loss"), std::string::npos) << log;
    EXPECT_EQ(log.find("is injected"), std::string::npos) << log;
    EXPECT_EQ(log.find("C7508"), std::string::npos) << log;
    EXPECT_EQ(log.find("lmem"), std::string::npos) << log;
    std::printf("%-40s %5d %7d %6d %7.2f\n", variant.name.c_str(),
                usage.registers, plan(variant.params).sharedBytes,
                usage.stackBytes, c.result->seconds);
  }
}

TEST(GemmKernelPlanTest, ValidateAcceptsTheVariants) {
  for (const Variant &variant : variants()) {
    const char *error = validate(variant.params);
    EXPECT_EQ(error, nullptr) << variant.name << ": " << error;
    EXPECT_LE(plan(variant.params).sharedBytes, kMaxSharedBytes);
  }
}

/// Quick compiles shorten only the promotion groups: to half, but never
/// below one stage; a kernel without promotion has none to shorten, and
/// split warpgroups keep theirs.
TEST(GemmKernelPlanTest, QuickCompileShortensOnlyPromotionGroups) {
  for (const Variant &variant : variants()) {
    SCOPED_TRACE(variant.name);
    Params fullParams = variant.params, quickParams = variant.params;
    fullParams.quickCompile = false;
    quickParams.quickCompile = true;
    Plan full = plan(fullParams), quick = plan(quickParams);
    EXPECT_EQ(quick.sharedBytes, full.sharedBytes);
    EXPECT_EQ(quick.partialSets, full.partialSets);
    if (full.promoteK == 0) {
      EXPECT_EQ(full.groupBlocks, 0);
      EXPECT_EQ(quick.groupBlocks, 0);
      continue;
    }
    EXPECT_EQ(full.groupBlocks % full.promotesPerStage, 0);
    EXPECT_EQ(quick.groupBlocks % quick.promotesPerStage, 0);
    if (full.groupBlocks > full.promotesPerStage && !full.splitWarpgroups)
      EXPECT_EQ(quick.groupBlocks,
                std::max(full.groupBlocks / 2, full.promotesPerStage));
    else
      EXPECT_EQ(quick.groupBlocks, full.groupBlocks);
  }
  // MOSS on 128x128 tiles (two partial sets): groups of two stages.
  Params moss;
  moss.n = moss.k = 4096;
  moss = twoLevel(moss, /*rowA=*/true);
  EXPECT_EQ(plan(moss).groupBlocks, 8);
  moss.quickCompile = true;
  EXPECT_EQ(plan(moss).groupBlocks, 4);
}

TEST(GemmKernelPlanTest, ValidateNamesWhatIsWrong) {
  Params p;
  p.n = 4096;
  p.k = 100;
  EXPECT_STREQ(validate(p), "K must be a multiple of 32");
  p.k = 4096;
  p.scaleA = kTwoLevel;
  p.blockA = 32;
  p.tileN = 256;
  EXPECT_NE(std::string(validate(p)).find("register budget"),
            std::string::npos);
  p.tileN = 128;
  p.stages = 7;
  EXPECT_NE(std::string(validate(p)).find("227 KiB"), std::string::npos);
  p.stages = 6;
  EXPECT_EQ(validate(p), nullptr);
  p.clusterM = 2;
  p.clusterN = 2;
  EXPECT_NE(std::string(validate(p)).find("clusters"), std::string::npos);
  p.clusterM = 1;
  p.clusterN = 1;
  p.k = 4096 + 32;
  p.scaleA = kPerGroup;
  p.blockA = 128;
  EXPECT_STREQ(validate(p), "K must be a multiple of the scaling block");
  p.k = 4096;
  p.f16Mma = true;
  p.tileM = 256;
  p.tileN = 64;
  p.stages = 2;
  EXPECT_STREQ(validate(p),
               "the f16 MMA needs TileM = 128 and an even number of Stages");
  p.tileM = 128;
  p.tileN = 128;
  p.stages = 3;
  EXPECT_STREQ(validate(p),
               "the f16 MMA needs TileM = 128 and an even number of Stages");
  p.stages = 6;
  EXPECT_NE(std::string(validate(p)).find("227 KiB"), std::string::npos);
  p.stages = 4;
  EXPECT_EQ(validate(p), nullptr);

  // An m-grouped GEMM's tiles never straddle two experts.
  Params grouped;
  grouped.n = 4096;
  grouped.k = 4096;
  grouped.groups = 8;
  EXPECT_EQ(validate(grouped), nullptr);
  EXPECT_FALSE(plan(grouped).usesTmaD); // its tiles end at any row
  for (int i = 0; i < 5; ++i) {
    Params bad = grouped;
    switch (i) {
    case 0:
      bad.m = 4096;
      break;
    case 1:
      bad.tileM = 64;
      break;
    case 2:
      bad.clusterM = 2;
      break;
    case 3: // an expert's B blocks would straddle the next expert
      bad.scaleB = kPerGroup;
      bad.blockRowsB = 128;
      bad.blockB = 128;
      bad.n = 4096 + 64;
      break;
    default:
      bad.splitK = 2;
    }
    const char *error = validate(bad);
    ASSERT_NE(error, nullptr) << i;
    EXPECT_NE(std::string(error).find("m-grouped"), std::string::npos)
        << i << ": " << error;
  }
  Params maskedPlain;
  maskedPlain.n = 4096;
  maskedPlain.k = 4096;
  maskedPlain.maskedGroups = true;
  EXPECT_STREQ(validate(maskedPlain), "MaskedGroups needs Groups > 0");
  // The persistent grid covers any offsets: each expert may add a partial
  // row of tiles.
  EXPECT_EQ(numUnits(grouped, 1000), (8 + 8) * 32);
  EXPECT_EQ(gridSize(grouped, 1000, 132), 132);
  EXPECT_EQ(boxRowsA(grouped, 16), 128);

  // A k-grouped GEMM: static M, dynamic K, each expert's output its own.
  Params alongK = grouped;
  alongK.m = 2048;
  alongK.k = -1;
  alongK.groupedK = true;
  EXPECT_EQ(validate(alongK), nullptr);
  // Its experts' outputs are whole tiles where TileM divides M.
  EXPECT_TRUE(plan(alongK).usesTmaD);
  Params partTiles = alongK;
  partTiles.m = 2000;
  EXPECT_FALSE(plan(partTiles).usesTmaD);
  EXPECT_EQ(plan(alongK).kStages, 0); // its experts' stages are run time
  EXPECT_EQ(numUnits(alongK, 2048), 8 * 16 * 32);
  for (int i = 0; i < 8; ++i) {
    Params bad = alongK;
    switch (i) {
    case 0:
      bad.m = -1;
      break;
    case 1:
      bad.k = 4096;
      break;
    case 2:
      bad.maskedGroups = true;
      break;
    case 3:
      bad.bias = kBF16;
      break;
    case 4:
      bad.tileM = 64;
      break;
    case 5:
      bad.clusterN = 2;
      break;
    case 6:
      bad.groups = 0;
      break;
    default:
      bad.splitK = 2;
    }
    const char *error = validate(bad);
    ASSERT_NE(error, nullptr) << i;
    EXPECT_NE(std::string(error).find("k-grouped"), std::string::npos)
        << i << ": " << error;
  }
}

/// The epilogue's staging buffers: TMA stores need 16-byte output rows and
/// tiles of whole 128-byte chunks, and take two buffer sets where they fit,
/// else one, else none.
TEST(GemmKernelPlanTest, StagingBuffersFollowTheOutputAndTheRoom) {
  Params p;
  p.n = 8192;
  p.k = 8192;
  p.tileM = 128;
  p.tileN = 256;
  p.stages = 4;
  Plan q = plan(p);
  EXPECT_TRUE(q.usesTmaD);
  EXPECT_EQ(q.storeBuffers, 2);
  EXPECT_EQ(q.boxD[0], 64); // 128 bytes of bf16
  EXPECT_EQ(q.boxD[1], 16);
  EXPECT_EQ(q.offsetStaging % 1024, 0);
  EXPECT_EQ(q.offsetBarriers, q.offsetStaging + 2 * 8 * 2048);
  // f32 out: 32 columns per chunk.
  Params f32 = p;
  f32.out = kF32;
  EXPECT_EQ(plan(f32).boxD[0], 32);
  // No room beside four 256x192 stages: direct stores; three leave room
  // for both sets. 128x128 with MOSS's tables and six stages: one set.
  Params wide = p;
  wide.tileM = 256;
  wide.tileN = 192;
  EXPECT_EQ(plan(wide).storeBuffers, 0);
  EXPECT_FALSE(plan(wide).usesTmaD);
  wide.stages = 3;
  EXPECT_EQ(plan(wide).storeBuffers, 2);
  Params moss = twoLevel(p, true);
  moss.tileN = 128;
  moss.stages = 6;
  EXPECT_EQ(plan(moss).storeBuffers, 1);
  // Output rows not 16-byte aligned, or tiles not whole 128-byte chunks.
  Params odd = p;
  odd.n = 8196; // 16392 bytes of bf16 per row
  EXPECT_FALSE(plan(odd).usesTmaD);
  Params narrow = p;
  narrow.tileN = 96; // 192 bytes of bf16
  EXPECT_FALSE(plan(narrow).usesTmaD);
  narrow.out = kF32; // 384 bytes
  EXPECT_TRUE(plan(narrow).usesTmaD);
  // Without staging the barriers follow the tables as before.
  EXPECT_EQ(plan(odd).offsetBarriers, plan(odd).offsetStaging);
}

/// Every field of `a` and `b`.
void expectSameParams(const Params &a, const Params &b) {
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.elemA, b.elemA);
  EXPECT_EQ(a.elemB, b.elemB);
  EXPECT_EQ(a.scaleA, b.scaleA);
  EXPECT_EQ(a.blockRowsA, b.blockRowsA);
  EXPECT_EQ(a.blockA, b.blockA);
  EXPECT_EQ(a.globalRowA, b.globalRowA);
  EXPECT_EQ(a.scaleB, b.scaleB);
  EXPECT_EQ(a.blockRowsB, b.blockRowsB);
  EXPECT_EQ(a.blockB, b.blockB);
  EXPECT_EQ(a.globalRowB, b.globalRowB);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.accum, b.accum);
  EXPECT_EQ(a.amax, b.amax);
  EXPECT_EQ(a.tileM, b.tileM);
  EXPECT_EQ(a.tileN, b.tileN);
  EXPECT_EQ(a.stages, b.stages);
  EXPECT_EQ(a.clusterM, b.clusterM);
  EXPECT_EQ(a.clusterN, b.clusterN);
  EXPECT_EQ(a.rasterAlongN, b.rasterAlongN);
  EXPECT_EQ(a.swizzle, b.swizzle);
  EXPECT_EQ(a.splitK, b.splitK);
  EXPECT_EQ(a.forcePromoteK, b.forcePromoteK);
  EXPECT_EQ(a.quickCompile, b.quickCompile);
  EXPECT_EQ(a.f16Mma, b.f16Mma);
  EXPECT_EQ(a.foldA, b.foldA);
}

/// The compiler's one mapping to the templates' parameters
/// (getTemplateParams, behind the emitted configuration, the resource model
/// and the runtime's launch plan) gives back the parameters of the GEMM the
/// tests describe (specOf, tilingOfParams), and so the templates' shared
/// memory.
TEST(GemmKernelPlanTest, TemplateParamsGiveBackTheKernelsParameters) {
  Params base;
  base.k = 4096;
  Params both = twoLevel(base, /*rowA=*/false);
  both.scaleB = kTwoLevel;
  both.blockB = 32;
  both.globalRowB = true;
  Params foldA = twoLevel(base, /*rowA=*/true);
  foldA.foldA = true;
  const Params schemes[] = {base, twoLevel(base, /*rowA=*/true), perGroup(base),
                            both, foldA};
  moss::compiler::TargetInfo target;
  int compared = 0;
  for (bool f16Mma : {false, true})
    for (Params p : schemes)
      for (int n : {257, 264, 3000, 8192})
        for (int out : {kBF16, kF32})
          for (int tileM : {64, 128, 256})
            for (int tileN = 32; tileN <= 256; tileN += 32)
              for (int stages = 2; stages <= 8; ++stages) {
                p.n = n;
                p.out = out;
                p.tileM = tileM;
                p.tileN = tileN;
                p.stages = stages;
                p.f16Mma = f16Mma;
                if (validate(p) != nullptr)
                  continue;
                SCOPED_TRACE(describe(p));
                expectSameParams(moss::compiler::getTemplateParams(
                                     specOf(p), tilingOfParams(p)),
                                 p);
                moss::compiler::ResourceUsage usage =
                    moss::compiler::estimateResources(
                        specOf(p), tilingOfParams(p), target);
                EXPECT_EQ(usage.sharedBytes,
                          static_cast<unsigned>(plan(p).sharedBytes));
                EXPECT_EQ(usage.storeBuffers,
                          static_cast<unsigned>(plan(p).storeBuffers));
                ++compared;
              }
  EXPECT_GT(compared, 1100);
}

TEST(GemmKernelPlanTest, PlansFollowTheSchemes) {
  Params p;
  p.n = 4096;
  p.k = 4096;
  Plan q = plan(withDefaultTiling(p));
  EXPECT_EQ(q.factorMode, kFactorDirect);
  EXPECT_EQ(q.promoteK, 0);
  EXPECT_FALSE(q.hasTables);
  EXPECT_EQ(q.threads, 384);

  // MOSS forward: A's E8M0 per 32 along rows, B per tensor.
  Params moss = withDefaultTiling(twoLevel(p, true));
  q = plan(moss);
  EXPECT_EQ(q.promoteK, 32);
  EXPECT_EQ(q.factorMode, kFactorRow);
  EXPECT_TRUE(q.rowFactor);
  EXPECT_FALSE(q.colFactor);
  EXPECT_TRUE(q.globalRowA);
  EXPECT_EQ(q.promotesPerStage, 4);
  EXPECT_EQ(q.accumulatorRegisters, 192);

  // Per-group: B's 128x128 scale is uniform over a 128-wide tile and is
  // folded into the row table.
  Params group = p;
  group.scaleA = kPerGroup;
  group.blockA = 128;
  group.scaleB = kPerGroup;
  group.blockRowsB = 128;
  group.blockB = 128;
  q = plan(withDefaultTiling(group));
  EXPECT_EQ(q.promoteK, 128);
  EXPECT_EQ(q.factorMode, kFactorRow);
  EXPECT_FALSE(q.colFactor);
  EXPECT_FALSE(q.hasGlobalA);
  EXPECT_EQ(q.partialSets, 2);
  // ... but not over a 192-wide one: a column table, one partial set.
  group.tileN = 192;
  group.stages = 5;
  q = plan(group);
  EXPECT_EQ(q.factorMode, kFactorRowCol);
  EXPECT_TRUE(q.colFactor);
  EXPECT_EQ(q.partialSets, 1);
  EXPECT_EQ(q.accumulatorRegisters, 192);

  // Three 96-register sets do not fit: one partial set.
  moss.tileN = 192;
  moss.stages = 5;
  q = plan(moss);
  EXPECT_EQ(q.factorMode, kFactorRow);
  EXPECT_EQ(q.partialSets, 1);
  EXPECT_EQ(q.accumulatorRegisters, 192);
  moss.tileN = 128;
  moss.stages = 6;

  Params both = twoLevel(p, false);
  both.scaleB = kTwoLevel;
  both.blockB = 32;
  q = plan(withDefaultTiling(both));
  EXPECT_EQ(q.factorMode, kFactorRowCol);

  Params forced = p;
  forced.forcePromoteK = 64;
  q = plan(withDefaultTiling(forced));
  EXPECT_EQ(q.factorMode, kFactorUnit);
  EXPECT_EQ(q.promotesPerStage, 2);

  // K tails: 96 = no full stage and a 3-step tail.
  Params tail = moss;
  tail.k = 96;
  q = plan(tail);
  EXPECT_EQ(q.fullKStages, 0);
  EXPECT_EQ(q.tailSteps, 3);
  EXPECT_EQ(q.kStages, 1);

  EXPECT_EQ(gridSize(moss, 8192, 132), 132);
  EXPECT_EQ(gridSize(moss, 1, 132), 32); // one row of 32 N tiles
  EXPECT_EQ(gridSize(moss, 0, 132), 0);

  // A 2x1 cluster shares B: B's box is half a tile; grids are even.
  Params pair = moss;
  pair.clusterM = 2;
  q = plan(pair);
  EXPECT_EQ(q.clusterSize, 2);
  EXPECT_TRUE(q.multicastB);
  EXPECT_FALSE(q.multicastA);
  EXPECT_EQ(q.boxB[1], 64);
  EXPECT_EQ(q.boxA[1], 128);
  EXPECT_EQ(q.emptyArrivals, 512); // 256 consumer threads per CTA
  EXPECT_EQ(gridSize(pair, 8192, 132), 132);
  EXPECT_EQ(gridSize(pair, 8192, 131), 130);
  EXPECT_EQ(gridSize(pair, 1, 132), 64); // 32 clusters of a real and an
                                         // empty M tile

  // A's box stops at M (rounded up to 8 rows) when M is below a tile, and
  // the stage's byte count follows it; a shared A stays in halves.
  EXPECT_EQ(boxRowsA(moss, 1), 8);
  EXPECT_EQ(boxRowsA(moss, 37), 40);
  EXPECT_EQ(boxRowsA(moss, 128), 128);
  EXPECT_EQ(boxRowsA(moss, 5000), 128);
  EXPECT_EQ(stageTxBytes(moss, 1), (8 + 128) * 128);
  EXPECT_EQ(stageTxBytes(moss, 8192), (128 + 128) * 128);
  Params tall = moss;
  tall.tileM = 256;
  EXPECT_EQ(boxRowsA(tall, 129), 136);
  Params sharedA = moss;
  sharedA.clusterN = 2;
  EXPECT_EQ(boxRowsA(sharedA, 1), 64);
  EXPECT_EQ(stageTxBytes(sharedA, 1), (128 + 128) * 128);

  // Split-K: units are tiles times slices; the workspace holds a counter
  // per consumer warp and tile (256-byte padded), then FP32 partial tiles.
  Params split = moss;
  split.tileN = 64;
  split.splitK = 2;
  EXPECT_EQ(gridSize(split, 1, 132), 128); // 64 N tiles x 2 slices
  EXPECT_EQ(plan(split).unitKStages, 32 / 2);
  EXPECT_EQ(workspaceCounterBytes(split, 1), 64 * 8 * 4);
  EXPECT_EQ(workspaceBytes(split, 1), 64 * 8 * 4 + 64LL * 2 * 128 * 64 * 4);
  EXPECT_EQ(workspaceCounterBytes(split, 200), 2 * 64 * 8 * 4);
  EXPECT_EQ(workspaceBytes(moss, 1), 0);
  split.k = 4096 + 128; // 33 stages do not split in two
  EXPECT_NE(validate(split), nullptr);

  // 64-row tiles: one m64 tile per warpgroup, each stage released by one
  // warpgroup, and a workspace even without split-K (the warpgroups' sums).
  Params rows64 = moss;
  rows64.tileM = 64;
  q = plan(rows64);
  EXPECT_TRUE(q.splitWarpgroups);
  EXPECT_EQ(q.wgM, 1);
  EXPECT_EQ(q.emptyArrivals, 128);
  EXPECT_EQ(boxRowsA(rows64, 1000), 64);
  // 32 tiles x 8 counters; 256 threads x 64 accumulators per tile.
  EXPECT_EQ(workspaceCounterBytes(rows64, 1), 32 * 8 * 4);
  EXPECT_EQ(workspaceBytes(rows64, 1), 32 * 8 * 4 + 32LL * 256 * 64 * 4);
  rows64.k = 96; // a K tail
  EXPECT_NE(validate(rows64), nullptr);
  rows64.k = 4096;
  rows64.clusterM = 2;
  EXPECT_NE(validate(rows64), nullptr);
}

/// The persistent tile order visits every output tile exactly once, for
/// every raster order, swizzle band and cluster shape (tiles past the edges
/// only as a cluster's partner tiles).
TEST(GemmKernelPlanTest, TileOrderCoversEveryTileOnce) {
  for (int m : {1, 129, 1000, 4096})
    for (int n : {96, 257, 3000})
      for (bool alongN : {false, true})
        for (int swizzle : {1, 3, 8})
          for (auto [clusterM, clusterN] :
               {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
            Params p;
            p.n = n;
            p.k = 128;
            p.tileM = 128;
            p.tileN = 128;
            p.rasterAlongN = alongN;
            p.swizzle = swizzle;
            p.clusterM = clusterM;
            p.clusterN = clusterN;
            SCOPED_TRACE(describe(p) + " m=" + std::to_string(m) +
                         " swizzle=" + std::to_string(swizzle) +
                         (alongN ? " along N" : " along M") + " cluster " +
                         std::to_string(clusterM) + "x" +
                         std::to_string(clusterN));
            const int tilesM = (m + 127) / 128, tilesN = (n + 127) / 128;
            std::vector<int> seen(tilesM * tilesN, 0);
            int outside = 0;
            for (int t = 0; t < numTiles(p, m); ++t)
              for (int rank = 0; rank < clusterM * clusterN; ++rank) {
                int m0 = -1, n0 = -1;
                tileOrigin(p, m, t, rank, m0, n0);
                ASSERT_EQ(m0 % 128, 0);
                ASSERT_EQ(n0 % 128, 0);
                if (m0 >= m || n0 >= n) {
                  ++outside;
                  continue;
                }
                ++seen[(m0 / 128) * tilesN + n0 / 128];
              }
            for (int i = 0; i < tilesM * tilesN; ++i)
              ASSERT_EQ(seen[i], 1)
                  << "tile " << i / tilesN << ", " << i % tilesN;
            EXPECT_LT(outside, clusterM * clusterN * numTiles(p, m));
          }
}

/// A grouped GEMM's random tiling over at most `maxGroups` experts.
Params randomGroupedParams(std::mt19937 &rng, int maxGroups) {
  Params p;
  p.n = 64 + int(rng() % 600);
  p.k = 128;
  p.tileM = rng() % 2 ? 128 : 256;
  p.tileN = 32 * (1 + int(rng() % 8));
  p.rasterAlongN = rng() % 2;
  p.swizzle = 1 + int(rng() % 8);
  p.groups = 1 + int(rng() % maxGroups);
  return p;
}

/// Walks the `total` units of a GroupWalk over `values` from a random
/// number of CTAs (each with its own cursor: units first, first + stride,
/// ...) and checks that they cover expert g's rows [starts[g], ends[g]) x
/// [0, N) in tiles, each once, and nothing else.
void expectEachExpertTileOnce(const Params &p, const std::vector<int> &values,
                              int m, int total, const std::vector<int> &starts,
                              const std::vector<int> &ends, std::mt19937 &rng) {
  std::map<std::tuple<int, int, int>, int> seen;
  const int ctas = 1 + int(rng() % 140);
  for (int cta = 0; cta < ctas; ++cta) {
    GroupWalk walk{values.data(), m};
    for (int u = cta; u < total; u += ctas) {
      Unit unit = walk.unit(p, u);
      ASSERT_GE(unit.group, 0);
      ASSERT_LT(unit.group, p.groups);
      ASSERT_EQ(unit.rowEnd, ends[unit.group]);
      const int start = starts[unit.group];
      ASSERT_GE(unit.m0, start);
      ASSERT_LT(unit.m0, unit.rowEnd);
      ASSERT_EQ((unit.m0 - start) % p.tileM, 0);
      ASSERT_LT(unit.n0, p.n);
      ASSERT_EQ(unit.n0 % p.tileN, 0);
      ++seen[{unit.group, unit.m0, unit.n0}];
    }
  }
  int expected = 0;
  for (int g = 0; g < p.groups; ++g)
    for (int r = starts[g]; r < ends[g]; r += p.tileM)
      for (int c = 0; c < p.n; c += p.tileN) {
        ++expected;
        ASSERT_EQ((seen[{g, r, c}]), 1)
            << "expert " << g << " tile (" << r << ", " << c << ")";
      }
  EXPECT_EQ(expected, total);
  EXPECT_EQ(int(seen.size()), total);
}

// An m-grouped GEMM's units cover each expert's tiles once, whichever CTA
// walks them, inside the expert's rows; bad offsets are read as empty
// experts.
TEST(GemmKernelPlanTest, GroupWalkCoversEveryExpertTileOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    Params p = randomGroupedParams(rng, trial % 4 == 0 ? 300 : 12);
    std::vector<int> offsets(p.groups + 1, 0);
    for (int g = 0; g < p.groups; ++g) {
      const int r = int(rng() % 5);
      offsets[g + 1] = offsets[g] + (r == 0 ? 0 : r == 1 ? 1
                                     : int(rng() % 700));
    }
    const int m = offsets.back();
    const bool scrambled = trial % 7 == 3;
    if (scrambled) // non-monotone and out of range: still inside [0, m]
      for (int g = 1; g < p.groups; ++g)
        offsets[g] = int(rng() % (m + 200)) - 100;
    SCOPED_TRACE(describe(p) + " m=" + std::to_string(m) + " trial " +
                 std::to_string(trial));

    GroupWalk counter{offsets.data(), m};
    const int total = counter.total(p);
    // The grid's bound holds for offsets that keep the rules (overlapping
    // experts may take more units; the persistent grid walks them all).
    if (!scrambled) {
      EXPECT_LE(total, numUnits(p, m));
    }
    std::vector<int> starts(p.groups), ends(p.groups);
    for (int g = 0; g < p.groups; ++g) {
      starts[g] = counter.row(p, g);
      ends[g] = counter.row(p, g + 1);
      if (scrambled)
        ASSERT_TRUE(starts[g] >= 0 && starts[g] <= m && ends[g] >= 0 &&
                    ends[g] <= m);
      else
        ASSERT_TRUE(starts[g] == offsets[g] && ends[g] == offsets[g + 1]);
    }
    expectEachExpertTileOnce(p, offsets, m, total, starts, ends, rng);
    if (HasFatalFailure())
      return;
  }
}

// The masked layout's units cover the first counts[g] rows of each expert's
// m / groups, once each, and nothing past them; counts outside [0, m /
// groups] are kept inside it.
TEST(GemmKernelPlanTest, MaskedGroupWalkCoversEachExpertsCountedRowsOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    Params p = randomGroupedParams(rng, trial % 4 == 0 ? 256 : 12);
    p.maskedGroups = true;
    const int capacity = 1 + int(rng() % 400), m = p.groups * capacity;
    std::vector<int> counts(p.groups);
    for (int &c : counts) {
      const int r = int(rng() % 6);
      c = r == 0   ? 0
          : r == 1 ? 1
          : r == 2 ? capacity
          : r == 3 ? int(rng() % 1000) - 500 // out of range either way
                   : int(rng() % (capacity + 1));
    }
    SCOPED_TRACE(describe(p) + " capacity=" + std::to_string(capacity) +
                 " trial " + std::to_string(trial));

    GroupWalk counter{counts.data(), m};
    const int total = counter.total(p);
    EXPECT_LE(total, numUnits(p, m));
    std::vector<int> starts(p.groups), ends(p.groups);
    for (int g = 0; g < p.groups; ++g) {
      starts[g] = g * capacity;
      ends[g] = starts[g] + std::clamp(counts[g], 0, capacity);
    }
    expectEachExpertTileOnce(p, counts, m, total, starts, ends, rng);
    if (HasFatalFailure())
      return;
  }
}

// A k-grouped GEMM's units are each expert's M x N tiles once, over its
// columns [offsets[g], offsets[g + 1]) in whole stages; offsets outside
// [0, k] are kept inside it and a part stage is left out, so an expert
// never reads past A's and B's columns.
TEST(GemmKernelPlanTest, KGroupedWalkGivesEachExpertItsStages) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    Params p = randomGroupedParams(rng, trial % 4 == 0 ? 300 : 12);
    p.m = 64 + int(rng() % 900);
    p.k = -1;
    p.groupedK = true;
    std::vector<int> offsets(p.groups + 1, 0);
    for (int g = 0; g < p.groups; ++g) {
      const int r = int(rng() % 4);
      offsets[g + 1] = offsets[g] + 128 * (r == 0 ? 0 : int(rng() % 20));
    }
    // K may run past the last expert's end (padding no expert reads).
    const int k = offsets.back() + (trial % 3 == 1 ? 128 * int(rng() % 4) : 0);
    const bool scrambled = trial % 7 == 3;
    if (scrambled) // unaligned, non-monotone and out of range
      for (int g = 1; g <= p.groups; ++g)
        offsets[g] = int(rng() % (k + 400)) - 200;
    SCOPED_TRACE(describe(p) + " k=" + std::to_string(k) + " trial " +
                 std::to_string(trial));

    GroupWalk counter{offsets.data(), p.m, k};
    const int perExpert = numTiles(p, p.m);
    ASSERT_EQ(counter.total(p), p.groups * perExpert);
    ASSERT_EQ(numUnits(p, p.m), p.groups * perExpert);
    std::map<std::tuple<int, int, int>, int> seen;
    const int ctas = 1 + int(rng() % 140);
    for (int cta = 0; cta < ctas; ++cta) {
      GroupWalk walk{offsets.data(), p.m, k};
      for (int u = cta; u < walk.total(p); u += ctas) {
        const Unit unit = walk.unit(p, u);
        ASSERT_TRUE(unit.group >= 0 && unit.group < p.groups);
        ASSERT_EQ(unit.rowEnd, p.m);
        ASSERT_TRUE(unit.m0 >= 0 && unit.m0 < p.m && unit.m0 % p.tileM == 0);
        ASSERT_TRUE(unit.n0 >= 0 && unit.n0 < p.n && unit.n0 % p.tileN == 0);
        ASSERT_EQ(unit.k0 % 128, 0);
        ASSERT_TRUE(unit.k0 >= 0 && unit.kStages >= 0 &&
                    unit.k0 + 128 * unit.kStages <= k);
        if (!scrambled) {
          ASSERT_EQ(unit.k0, offsets[unit.group]);
          ASSERT_EQ(unit.k0 + 128 * unit.kStages, offsets[unit.group + 1]);
        }
        ++seen[{unit.group, unit.m0, unit.n0}];
      }
    }
    ASSERT_EQ(int(seen.size()), p.groups * perExpert);
    for (const auto &[tile, count] : seen)
      ASSERT_EQ(count, 1);
  }
}

/// What moss-select-tiling picks for the main GEMMs is a configuration the
/// kernel implements, with the shared memory the compiler's resource model
/// (include/moss/Compiler/Tiling.h) predicts, and it compiles clean.
TEST(GemmKernelPlanTest, HeuristicTilingsCompileClean) {
  SKIP_WITHOUT_NVRTC();
  namespace nm = moss::numerics;
  using nm::GlobalScope;
  using nm::ScalingScheme;
  struct Spec {
    int64_t m, n, k;
    ScalingScheme a, b;
    bool f16Mma = false;
  };
  const Spec specs[] = {
      {-1, 4096, 4096, ScalingScheme::perTensor(), ScalingScheme::perTensor()},
      {8192, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Row, 32),
       ScalingScheme::perTensor()},
      {-1, 11008, 4096, ScalingScheme::perGroup(1, 128),
       ScalingScheme::perGroup(128, 128)},
      {1000, 3000, 2048, ScalingScheme::twoLevel(GlobalScope::Row, 32),
       ScalingScheme::twoLevel(GlobalScope::Tensor, 32)},
      {129, 257, 96, ScalingScheme::twoLevel(GlobalScope::Tensor, 32),
       ScalingScheme::perRow()},
      {-1, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Row, 32),
       ScalingScheme::perTensor(), true},
      {16, 4096, 4096, ScalingScheme::perGroup(1, 128),
       ScalingScheme::perGroup(128, 128), true},
      // A large static M, where the f16 MMA's widest tiles tempt: they
      // spilled with block scales (128x192) and without (128x256).
      {8192, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Row, 32),
       ScalingScheme::perTensor(), true},
      {8192, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Tensor, 32),
       ScalingScheme::twoLevel(GlobalScope::Tensor, 32), true},
      {8192, 8192, 8192, ScalingScheme::perTensor(), ScalingScheme::perTensor(),
       true},
  };
  for (const Spec &s : specs) {
    moss::compiler::GemmSpec spec;
    spec.m = s.m;
    spec.n = s.n;
    spec.k = s.k;
    spec.aScaling = s.a;
    spec.bScaling = s.b;
    spec.mma =
        s.f16Mma ? moss::compiler::MmaType::F16 : moss::compiler::MmaType::Auto;
    moss::compiler::TargetInfo target;
    llvm::Expected<moss::compiler::TileConfig> tiling =
        moss::compiler::selectTiling(spec, target);
    ASSERT_TRUE(bool(tiling)) << llvm::toString(tiling.takeError());
    Params p;
    p.m = static_cast<int>(s.m);
    p.n = static_cast<int>(s.n);
    p.k = static_cast<int>(s.k);
    auto side = [](const ScalingScheme &scheme, int &kind, int &blockRows,
                   int &block, bool &globalRow) {
      kind = static_cast<int>(scheme.kind);
      blockRows = static_cast<int>(scheme.blockRows);
      block = static_cast<int>(scheme.blockCols);
      globalRow = scheme.globalPerRow();
    };
    side(s.a, p.scaleA, p.blockRowsA, p.blockA, p.globalRowA);
    side(s.b, p.scaleB, p.blockRowsB, p.blockB, p.globalRowB);
    p.f16Mma = s.f16Mma;
    p = withTiling(p, *tiling);
    SCOPED_TRACE(tiling->str() + ": " + describe(p));
    const char *error = validate(p);
    ASSERT_EQ(error, nullptr) << error;
    EXPECT_EQ(
        moss::compiler::estimateResources(spec, *tiling, target).sharedBytes,
        static_cast<unsigned>(plan(p).sharedBytes));
    CompileOptions options;
    options.arch = "sm_90a";
    options.flags = {"--ptxas-options=-v"};
    llvm::Expected<CompileResult> result =
        compileCuda(kernelSource(p), options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    ResourceUsage usage = parsePtxasLog(result->log);
    EXPECT_TRUE(usage.parsed) << result->log;
    EXPECT_EQ(usage.stackBytes, 0) << result->log;
    EXPECT_EQ(usage.spillStoreBytes, 0) << result->log;
    EXPECT_EQ(result->log.find("Potential Performance Loss"), std::string::npos)
        << result->log;
  }
}

TEST(GemmKernelPlanTest, InvalidConfigFailsToCompile) {
  SKIP_WITHOUT_NVRTC();
  Params p;
  p.n = 4096;
  p.k = 4096;
  p.scaleA = kTwoLevel;
  p.blockA = 32;
  p.tileN = 256; // too many accumulators with promotion
  p.stages = 4;
  ASSERT_NE(validate(p), nullptr);
  CompileOptions options;
  options.arch = "sm_90a";
  llvm::Expected<CompileResult> result = compileCuda(kernelSource(p), options);
  ASSERT_FALSE(bool(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_NE(message.find("invalid moss::gemm_kernel::Config"),
            std::string::npos)
      << message;
}

} // namespace
