//===- BatchedCastTest.cpp - G casts with given scales in one launch -----===//
//
// No GPU needed: which casts GpuQuantizer::castWithScales batches into one
// launch (castsShareOneLaunch, from the buffers' addresses alone), the
// batched kernels' source and its checks, and that every batched variant
// compiles with NVRTC for sm_90a without local memory. QuantizeGpuTest
// checks the batched casts' bits against the host reference on a GPU.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Nvrtc/Resources.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::compiler;

namespace {

QuantizeSpec weightCast(bool bothLayouts, InputType input = InputType::F32) {
  QuantizeSpec spec;
  spec.rows = 333;
  spec.cols = 1008;
  spec.input = input;
  spec.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false};
  spec.bothLayouts = bothLayouts;
  return spec;
}

/// G casts of `spec`'s [rows, cols] FP32 matrices laid out as one [G, rows,
/// cols] array each (the codes at 1 byte, the scales and counters per cast):
/// the row-major layout's buffers.
std::vector<QuantizeBuffers> arrays(const QuantizeSpec &spec, size_t casts) {
  const uint64_t values = uint64_t(spec.rows * spec.cols);
  std::vector<QuantizeBuffers> buffers(casts);
  for (size_t g = 0; g < casts; ++g) {
    buffers[g].x = 0x100000000ull + g * values * 4;
    buffers[g].q = 0x200000000ull + g * values;
    buffers[g].global = 0x300000000ull + g * 4;
    buffers[g].counters = 0x400000000ull + g * 16;
  }
  return buffers;
}

/// The transposed layout's buffers of the same casts: their own codes and
/// globals, the quantizer's counters.
std::vector<QuantizeBuffers> transposedArrays(const QuantizeSpec &spec,
                                              size_t casts) {
  std::vector<QuantizeBuffers> buffers = arrays(spec, casts);
  for (QuantizeBuffers &b : buffers) {
    b.x = 0;
    b.q += 0x800000000ull;
    b.global += 0x800000000ull;
    b.counters = 0;
  }
  return buffers;
}

TEST(BatchedCastTest, CastsOfOneArrayShareOneLaunch) {
  for (bool both : {false, true}) {
    SCOPED_TRACE(both ? "both layouts" : "row-major");
    QuantizeSpec spec = weightCast(both);
    std::vector<QuantizeBuffers> rows = arrays(spec, 5);
    std::vector<QuantizeBuffers> t =
        both ? transposedArrays(spec, 5) : std::vector<QuantizeBuffers>();
    EXPECT_TRUE(castsShareOneLaunch(spec, rows, t));
    // One cast is a launch of its own; none is none.
    EXPECT_FALSE(
        castsShareOneLaunch(spec, llvm::ArrayRef(rows).take_front(1),
                            llvm::ArrayRef(t).take_front(both ? 1 : 0)));
    // The casts in reverse order: a negative stride is a stride.
    std::vector<QuantizeBuffers> reversedRows(rows.rbegin(), rows.rend());
    std::vector<QuantizeBuffers> reversedT(t.rbegin(), t.rend());
    EXPECT_TRUE(castsShareOneLaunch(spec, reversedRows, reversedT));
  }
}

TEST(BatchedCastTest, CastsThatAreNotOneArrayTakeALaunchEach) {
  for (bool both : {false, true}) {
    SCOPED_TRACE(both ? "both layouts" : "row-major");
    QuantizeSpec spec = weightCast(both);
    const std::vector<QuantizeBuffers> rows = arrays(spec, 5);
    const std::vector<QuantizeBuffers> t =
        both ? transposedArrays(spec, 5) : std::vector<QuantizeBuffers>();
    auto expectApart = [&](const char *what, auto change) {
      SCOPED_TRACE(what);
      std::vector<QuantizeBuffers> r = rows, tt = t;
      change(r, tt);
      EXPECT_FALSE(castsShareOneLaunch(spec, r, tt));
    };
    expectApart("a cast out of step", [](auto &r, auto &) { r[3].x += 64; });
    expectApart("codes out of step",
                [&](auto &r, auto &tt) { (both ? tt : r)[4].q += 16; });
    expectApart("one buffer of codes for every cast", [&](auto &r, auto &tt) {
      for (QuantizeBuffers &b : both ? tt : r)
        b.q = (both ? tt : r)[0].q;
    });
    expectApart("codes that overlap the next cast's", [&](auto &r, auto &tt) {
      auto &layout = both ? tt : r;
      for (size_t g = 0; g < layout.size(); ++g)
        layout[g].q = layout[0].q + 16 * g;
    });
    expectApart("one global for every cast", [&](auto &r, auto &tt) {
      for (QuantizeBuffers &b : both ? tt : r)
        b.global = (both ? tt : r)[0].global;
    });
    expectApart("inputs 8 bytes apart", [](auto &r, auto &) {
      for (size_t g = 0; g < r.size(); ++g)
        r[g].x = r[0].x + 8 * g;
    });
    expectApart("counters 4 bytes apart", [](auto &r, auto &) {
      for (size_t g = 0; g < r.size(); ++g)
        r[g].counters = r[0].counters + 4 * g;
    });
    expectApart("an amax output", [](auto &r, auto &) { r[0].amax = 64; });
    if (both) {
      expectApart("a transposed cast of another input",
                  [](auto &, auto &tt) { tt[2].x = 0x100; });
      expectApart("row-major codes out of step",
                  [](auto &r, auto &) { r[1].q += 16; });
    }
  }
  // A dual-layout spec without its transposed layouts, and the reverse.
  QuantizeSpec spec = weightCast(true);
  EXPECT_FALSE(castsShareOneLaunch(spec, arrays(spec, 4), {}));
  spec.bothLayouts = false;
  EXPECT_FALSE(
      castsShareOneLaunch(spec, arrays(spec, 4), transposedArrays(spec, 4)));
}

/// The fused AdamW state of the casts of arrays(): gradients and moments
/// stacked like the weights.
std::vector<AdamWBuffers> adamwArrays(const QuantizeSpec &spec, size_t casts) {
  const uint64_t bytes = uint64_t(spec.rows * spec.cols) * 4;
  std::vector<AdamWBuffers> state(casts);
  for (size_t g = 0; g < casts; ++g)
    state[g] = {0x1000000000ull + g * bytes, 0x2000000000ull + g * bytes,
                0x3000000000ull + g * bytes};
  return state;
}

TEST(BatchedCastTest, FusedAdamWStepsShareOneLaunchWhenTheirStateSteps) {
  for (bool both : {false, true}) {
    SCOPED_TRACE(both ? "both layouts" : "row-major");
    QuantizeSpec spec = weightCast(both);
    spec.rows = 332; // four-row words of transposed codes
    spec.adamw = true;
    const std::vector<QuantizeBuffers> rows = arrays(spec, 4);
    const std::vector<QuantizeBuffers> t =
        both ? transposedArrays(spec, 4) : std::vector<QuantizeBuffers>();
    const std::vector<AdamWBuffers> state = adamwArrays(spec, 4);
    EXPECT_TRUE(castsShareOneLaunch(spec, rows, t, state));
    // Without each cast's state, or with state out of step or overlapping.
    EXPECT_FALSE(castsShareOneLaunch(spec, rows, t));
    std::vector<AdamWBuffers> bad = state;
    bad[2].grad += 16;
    EXPECT_FALSE(castsShareOneLaunch(spec, rows, t, bad));
    bad = state;
    for (size_t g = 0; g < bad.size(); ++g)
      bad[g].expAvgSq = state[0].expAvgSq + g * 64;
    EXPECT_FALSE(castsShareOneLaunch(spec, rows, t, bad));
    // Weights that overlap are written twice at once.
    std::vector<QuantizeBuffers> overlapping = rows;
    for (size_t g = 0; g < overlapping.size(); ++g)
      overlapping[g].x = rows[0].x + g * 16;
    EXPECT_FALSE(castsShareOneLaunch(spec, overlapping, t, state));
  }
}

TEST(BatchedCastTest, FusedAdamWSpecsAreFP32PerTensorCasts) {
  QuantizeSpec spec = weightCast(true);
  spec.rows = 332;
  spec.adamw = true;
  auto errorOf = [](const QuantizeSpec &s, bool withScale = true) {
    llvm::Expected<QuantizerSource> source =
        generateQuantizerSource(s, withScale);
    return source ? std::string() : llvm::toString(source.takeError());
  };
  EXPECT_EQ(errorOf(spec), "");
  EXPECT_NE(errorOf(spec, false).find("casts with a given scale"),
            std::string::npos);
  QuantizeSpec s = spec;
  s.input = InputType::BF16;
  EXPECT_NE(errorOf(s).find("updates FP32 weights"), std::string::npos);
  s = spec;
  s.options.scheme = ScalingScheme::perRow();
  EXPECT_NE(errorOf(s).find("casts per tensor"), std::string::npos);
  s = spec;
  s.rows = 333;
  EXPECT_NE(errorOf(s).find("333 rows are not a multiple of 4"),
            std::string::npos);
  s.bothLayouts = false; // row-major codes take any row count
  EXPECT_EQ(errorOf(s), "");
  s = spec;
  s.cols = 1006;
  EXPECT_NE(errorOf(s).find("K=1006 is not a multiple of 4"),
            std::string::npos);
  s = spec;
  s.bothLayouts = false;
  s.options.transpose = true;
  EXPECT_NE(errorOf(s).find("not a transposed one"), std::string::npos);
}

TEST(BatchedCastTest, OnlyCastsWithAGivenScaleAreBatched) {
  QuantizeSpec spec = weightCast(false);
  spec.batched = true;
  llvm::Expected<QuantizerSource> source = generateQuantizerSource(spec, false);
  ASSERT_FALSE(bool(source));
  EXPECT_NE(llvm::toString(source.takeError())
                .find("a batched quantize is a "
                      "cast with a given scale"),
            std::string::npos);
  spec.gather = true;
  llvm::Error error = checkGpuQuantizeSpec(spec);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("not gathered rows"),
            std::string::npos);
}

// The batched kernel is the cast's own with its slice's arguments: the
// unbatched source is unchanged (its cache key too), and every batched
// variant compiles without local memory.
TEST(BatchedCastTest, BatchedCastsCompileWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (InputType input : {InputType::F32, InputType::BF16})
    for (int layout = 0; layout < 3; ++layout) {
      QuantizeSpec spec = weightCast(layout == 2, input);
      spec.options.transpose = layout == 1;
      SCOPED_TRACE(std::string(input == InputType::F32 ? "f32" : "bf16") +
                   (layout == 0   ? " row-major"
                    : layout == 1 ? " transposed"
                                  : " both layouts"));
      llvm::Expected<QuantizerSource> single =
          generateQuantizerSource(spec, true);
      ASSERT_TRUE(bool(single)) << llvm::toString(single.takeError());
      EXPECT_EQ(single->source.find("batch"), std::string::npos);
      spec.batched = true;
      llvm::Expected<QuantizerSource> batched =
          generateQuantizerSource(spec, true);
      ASSERT_TRUE(bool(batched)) << llvm::toString(batched.takeError());
      EXPECT_NE(batched->source.find("batchSlice(args)"), std::string::npos)
          << batched->source;
      EXPECT_TRUE(batched->reduceKernel.empty());
      CompileOptions options;
      options.arch = "sm_90a";
      options.flags.push_back(kPtxasVerboseFlag);
      llvm::Expected<CompileResult> result =
          compileCuda(batched->source, options);
      ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
      std::vector<KernelResources> kernels = parsePtxasResources(result->log);
      ASSERT_EQ(kernels.size(), 1u) << result->log;
      EXPECT_FALSE(kernels[0].usesLocalMemory())
          << kernels[0].stackFrameBytes << " bytes stack, "
          << kernels[0].spillStoreBytes << " bytes spilled";
    }
}

} // namespace
