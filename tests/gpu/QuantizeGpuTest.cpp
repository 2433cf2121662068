//===- QuantizeGpuTest.cpp - GPU quantizers against the host reference ----===//
//
// Every scheme x format x input type x orientation, on fresh random,
// heavy-tailed and outlier data with zero rows and NaN/Inf blocks, on shapes
// that are not multiples of the tiles: the GPU's codes, scales and counters
// must equal the host reference bit for bit. Outputs are poisoned before
// each launch. Skips with the reason when there is no GPU.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/AutoScale.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "QuantizerTestSupport.h"

#include "llvm/ADT/ScopeExit.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::quantizetest;
using namespace moss::compiler;

namespace {

enum class Data { Gaussian, HeavyTailed, Outliers, Boundaries };

/// Values whose scaled quotients land on or within a few FP32 steps of FP8
/// rounding boundaries (midpoints between codes, and the saturation
/// thresholds), where the kernels' fast quotient defers to the exact one.
std::vector<float> boundarySample(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(size_t(rows * cols));
  // Every FP8 midpoint of both formats, in the normal and subnormal ranges.
  std::vector<float> midpoints;
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int code = 0; code < 0x7E; ++code) {
      float a = decodeFp8(uint8_t(code), f), b = decodeFp8(uint8_t(code + 1), f);
      if (std::isfinite(a) && std::isfinite(b))
        midpoints.push_back((a + b) / 2);
    }
  midpoints.push_back(464.0f);
  midpoints.push_back(61440.0f);
  for (int64_t r = 0; r < rows; ++r) {
    // A power-of-two row scale keeps many quotients exactly on midpoints;
    // an odd one makes them land a rounding away.
    float scale = std::ldexp(1.0f, int(rng() % 40) - 20) *
                  ((rng() & 1) ? 1.0f : 1.0f + float(rng() % 1000) * 1e-4f);
    for (int64_t c = 0; c < cols; ++c) {
      float m = midpoints[rng() % midpoints.size()] * scale;
      uint32_t bits;
      std::memcpy(&bits, &m, 4);
      bits += uint32_t(int(rng() % 9) - 4); // within 4 steps
      std::memcpy(&m, &bits, 4);
      x[size_t(r * cols + c)] = (rng() & 1) ? m : -m;
    }
    // The block maximum decides the scale: put 448 (or 57344) times the row
    // scale at the start of every 32-element block.
    for (int64_t c = 0; c < cols; c += 32)
      x[size_t(r * cols + c)] = ((rng() & 1) ? 448.0f : 57344.0f) * scale;
  }
  return x;
}

/// Input data with the edge cases every run must survive: a zero row, a NaN
/// and an Inf inside blocks, values near the top of the range.
std::vector<float> makeInput(Data data, int64_t rows, int64_t cols,
                             uint64_t seed) {
  std::vector<float> x;
  switch (data) {
  case Data::Gaussian:
    x = gaussianSample(rows, cols, seed);
    break;
  case Data::HeavyTailed:
    x = studentTSample(rows, cols, 3.0, seed);
    break;
  case Data::Outliers:
    x = llmActivationSample(rows, cols, seed);
    break;
  case Data::Boundaries:
    x = boundarySample(rows, cols, seed);
    break;
  }
  std::mt19937_64 rng(seed ^ 0x5eed);
  auto at = [&](int64_t r, int64_t c) -> float & { return x[r * cols + c]; };
  int64_t zeroRow = int64_t(rng() % uint64_t(rows));
  for (int64_t c = 0; c < cols; ++c)
    at(zeroRow, c) = 0.0f;
  at(int64_t(rng() % uint64_t(rows)), int64_t(rng() % uint64_t(cols))) = NAN;
  at(int64_t(rng() % uint64_t(rows)), int64_t(rng() % uint64_t(cols))) =
      -INFINITY;
  // Tiny values, for the subnormal range of the codes.
  at(int64_t(rng() % uint64_t(rows)), int64_t(rng() % uint64_t(cols))) = 1e-30f;
  return x;
}

/// BF16 by round-to-nearest-even of the FP32 bits (NaN kept NaN).
std::vector<uint16_t> toBf16(std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    if (std::isnan(x[i]))
      bits = 0x7FC00000u;
    else
      bits += 0x7FFFu + ((bits >> 16) & 1);
    out[i] = uint16_t(bits >> 16);
    bits = uint32_t(out[i]) << 16;
    std::memcpy(&x[i], &bits, 4);
  }
  return out;
}

template <typename T>
void expectBitsEqual(const std::vector<T> &gpu, const std::vector<T> &ref,
                     int64_t cols, const char *what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  int64_t mismatches = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &ref[i], sizeof(T)) == 0)
      continue;
    if (mismatches++ < 5)
      ADD_FAILURE() << what << " differ at [" << int64_t(i) / cols << ", "
                    << int64_t(i) % cols << "]: gpu " << double(gpu[i])
                    << " reference " << double(ref[i]);
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of "
                           << gpu.size() << " differ";
}

std::string describe(const QuantizeSpec &spec, Data data, uint64_t seed) {
  return spec.options.scheme.str() + (spec.options.transpose ? " T" : "") +
         (spec.bothLayouts ? " both layouts" : "") +
         (spec.options.format == Fp8Format::E4M3 ? " e4m3" : " e5m2") +
         (spec.input == InputType::BF16 ? " bf16" : " f32") + " [" +
         std::to_string(spec.rows) + "x" + std::to_string(spec.cols) +
         "] data " + std::to_string(int(data)) + " seed " +
         std::to_string(seed);
}

/// A fresh input on the host (its exact values, BF16-rounded for BF16
/// input) and on the device.
struct Input {
  Input(const QuantizeSpec &spec, Data data, uint64_t seed)
      : x(makeInput(data, spec.rows, spec.cols, seed)),
        device(x.size() * (spec.input == InputType::F32 ? 4 : 2)) {
    if (spec.input == InputType::F32) {
      device.upload(x.data());
    } else {
      std::vector<uint16_t> bf16 = toBf16(x); // x now holds the BF16 values
      device.upload(bf16.data());
    }
  }
  std::vector<float> x;
  DeviceBuffer device;
};

/// The outputs of one quantization on the device, poisoned, with counters
/// that start away from zero, so that a count that is overwritten, or never
/// made, shows.
struct DeviceOutputs {
  explicit DeviceOutputs(const QuantizeLayout &layout)
      : q(size_t(layout.codeRows * layout.codeCols)),
        local(size_t(layout.localRows * layout.localCols *
                     layout.localElementBytes)),
        global(size_t(layout.globalCount) * 4), counters(16) {
    reset();
  }
  QuantizeBuffers buffers(CUdeviceptr x) const {
    return {x, q.get(), local.get(), global.get(), counters.get()};
  }
  /// Poisons the outputs and restarts the counters, as at construction.
  void reset() {
    q.poison();
    if (local.get())
      local.poison();
    if (global.get())
      global.poison();
    counters.upload(kCounterStart);
  }
  /// Every output against the reference, bit for bit.
  void expectEqual(const QuantizedTensor &ref) const {
    expectBitsEqual(q.download<uint8_t>(), ref.codes, ref.cols, "codes");
    if (ref.scheme.localScalesAreE8M0())
      expectBitsEqual(local.download<uint8_t>(), ref.localE8M0, ref.localCols,
                      "E8M0 scales");
    else if (ref.scheme.hasLocalScales())
      expectBitsEqual(local.download<float>(), ref.localF32, ref.localCols,
                      "FP32 block scales");
    if (ref.scheme.hasGlobalScales())
      expectBitsEqual(global.download<float>(), ref.global, 1, "global scales");
    std::vector<uint64_t> count = counters.download<uint64_t>();
    EXPECT_EQ(count[0] - kCounterStart[0], uint64_t(ref.stats.saturated))
        << "saturated";
    EXPECT_EQ(count[1] - kCounterStart[1], uint64_t(ref.stats.nonFiniteBlocks))
        << "non-finite";
  }
  static constexpr uint64_t kCounterStart[2] = {1000003, 2000029};
  DeviceBuffer q, local, global, counters;
};

/// Runs one spec on the GPU and compares every output with the reference.
void checkAgainstReference(const QuantizeSpec &spec, Data data,
                           uint64_t seed) {
  SCOPED_TRACE(describe(spec, data, seed));
  Input input(spec, data, seed);
  llvm::Expected<QuantizedTensor> ref =
      quantize(input.x, spec.rows, spec.cols, spec.options);
  ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
  DeviceOutputs out(getQuantizeLayout(spec));
  llvm::Error error =
      gpu().quantizer->quantize(spec, out.buffers(input.device.get()), nullptr);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
  out.expectEqual(*ref);
}

/// Runs a dual-layout spec on the GPU: each layout must equal the host's
/// quantization in that orientation, bit for bit.
void checkBothLayoutsAgainstReference(const QuantizeSpec &spec, Data data,
                                      uint64_t seed) {
  SCOPED_TRACE(describe(spec, data, seed));
  Input input(spec, data, seed);
  const QuantizeSpec transposed = getTransposedSpec(spec);
  llvm::Expected<QuantizedTensor> rowRef =
      quantize(input.x, spec.rows, spec.cols, spec.options);
  ASSERT_TRUE(bool(rowRef)) << llvm::toString(rowRef.takeError());
  llvm::Expected<QuantizedTensor> tRef =
      quantize(input.x, spec.rows, spec.cols, transposed.options);
  ASSERT_TRUE(bool(tRef)) << llvm::toString(tRef.takeError());
  DeviceOutputs rowOut(getQuantizeLayout(spec)),
      tOut(getQuantizeLayout(transposed));
  llvm::Error error = gpu().quantizer->quantizeBothLayouts(
      spec, rowOut.buffers(input.device.get()), tOut.buffers(0), nullptr);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
  {
    SCOPED_TRACE("row-major layout");
    rowOut.expectEqual(*rowRef);
  }
  SCOPED_TRACE("transposed layout");
  tOut.expectEqual(*tRef);
}

std::vector<ScalingScheme> allSchemes() {
  std::vector<ScalingScheme> v = {ScalingScheme::perTensor(),
                                  ScalingScheme::perRow(),
                                  ScalingScheme::mxfp8()};
  for (int block : {32, 64, 128}) {
    v.push_back(ScalingScheme::perGroup(1, block));
    v.push_back(ScalingScheme::twoLevel(GlobalScope::Tensor, block));
    v.push_back(ScalingScheme::twoLevel(GlobalScope::Row, block));
  }
  v.push_back(ScalingScheme::perGroup(128, 128));
  v.push_back(ScalingScheme::perGroup(32, 32));
  return v;
}

uint64_t freshSeed() { return std::random_device()() | 1; }

TEST(QuantizeGpuTest, EverySchemeMatchesTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  for (const ScalingScheme &scheme : allSchemes())
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (InputType input : {InputType::F32, InputType::BF16})
        for (bool transpose : {false, true})
          for (Data data : {Data::Gaussian, Data::HeavyTailed, Data::Outliers,
                            Data::Boundaries}) {
            QuantizeSpec spec;
            // Rows and columns that are not multiples of any tile; the
            // blocked axis a multiple of the block.
            spec.rows = transpose ? 384 : 257;
            spec.cols = transpose ? 1000 : 2048;
            spec.input = input;
            spec.options = {scheme, format, transpose};
            checkAgainstReference(spec, data, seed++);
          }
}

// The smallest shapes: one row of one block, and its transpose.
TEST(QuantizeGpuTest, OneBlockMatchesTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  for (const ScalingScheme &scheme : allSchemes())
    for (bool transpose : {false, true}) {
      if (scheme.blockRows > 1)
        continue; // square blocks take whole blocks on both axes
      const int64_t k = std::max<int64_t>(32, scheme.blockCols);
      QuantizeSpec spec;
      spec.rows = transpose ? k : 1;
      spec.cols = transpose ? 1 : k;
      spec.input = InputType::BF16;
      spec.options = {scheme, Fp8Format::E4M3, transpose};
      checkAgainstReference(spec, Data::Outliers, seed++);
    }
}

// Per-tensor and per-row take any K: transposed with 333 input rows, the
// output rows are not 16-byte multiples and take byte stores.
TEST(QuantizeGpuTest, TransposedOddKMatchesTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  for (const ScalingScheme &scheme :
       {ScalingScheme::perTensor(), ScalingScheme::perRow()})
    for (InputType input : {InputType::F32, InputType::BF16}) {
      QuantizeSpec spec;
      spec.rows = 333;
      spec.cols = 100;
      spec.input = input;
      spec.options = {scheme, Fp8Format::E4M3, true};
      checkAgainstReference(spec, Data::HeavyTailed, seed++);
    }
}

// One read of X, both layouts: every scheme whose row-major blocks fit the
// transposed kernel's tile rows, unfolded and row-folded, on shapes that
// are not multiples of the tiles (odd K included where the scheme has no
// blocks), and one large enough that each CTA walks many tiles.
// Quantizations issued to two streams at once, each with a reduce pass or
// column maxima in its workspace: every output still equals the host's
// (one shared workspace would let one stream's words overwrite the other's).
TEST(QuantizeGpuTest, TwoStreamsDoNotShareAWorkspace) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  const DriverApi &api = DeviceBuffer::api();
  CUstream streams[2] = {nullptr, nullptr};
  for (CUstream &stream : streams)
    ASSERT_EQ(api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  llvm::scope_exit destroy([&] {
    for (CUstream stream : streams)
      api.streamDestroy(stream);
  });
  // A dual layout in two kernels (column maxima) and a transposed quantize
  // with a reduce pass, on inputs of different sizes and data.
  QuantizeSpec specs[2];
  specs[0].rows = 4096;
  specs[0].cols = 4096;
  specs[0].input = InputType::BF16;
  specs[0].options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                      Fp8Format::E4M3, false, BlockScaleFold::Row};
  specs[0].bothLayouts = true;
  specs[1].rows = 2048;
  specs[1].cols = 6144;
  specs[1].input = InputType::BF16;
  specs[1].options = {ScalingScheme::twoLevel(GlobalScope::Tensor, 32),
                      Fp8Format::E4M3, true, BlockScaleFold::Row};
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + " seed " +
                 std::to_string(seed));
    Input inputs[2] = {Input(specs[0], Data::Outliers, seed),
                       Input(specs[1], Data::Gaussian, seed + 1)};
    seed += 2;
    DeviceOutputs rowOut(getQuantizeLayout(specs[0])),
        tOut(getQuantizeLayout(getTransposedSpec(specs[0]))),
        out(getQuantizeLayout(specs[1]));
    llvm::Error first = gpu().quantizer->quantizeBothLayouts(
        specs[0], rowOut.buffers(inputs[0].device.get()), tOut.buffers(0),
        streams[0]);
    ASSERT_FALSE(bool(first)) << llvm::toString(std::move(first));
    llvm::Error second = gpu().quantizer->quantize(
        specs[1], out.buffers(inputs[1].device.get()), streams[1]);
    ASSERT_FALSE(bool(second)) << llvm::toString(std::move(second));
    for (CUstream stream : streams)
      ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    for (int i = 0; i < 2; ++i) {
      llvm::Expected<QuantizedTensor> ref =
          quantize(inputs[i].x, specs[i].rows, specs[i].cols, specs[i].options);
      ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
      if (i == 1) {
        out.expectEqual(*ref);
        continue;
      }
      rowOut.expectEqual(*ref);
      llvm::Expected<QuantizedTensor> tRef =
          quantize(inputs[0].x, specs[0].rows, specs[0].cols,
                   getTransposedSpec(specs[0]).options);
      ASSERT_TRUE(bool(tRef)) << llvm::toString(tRef.takeError());
      tOut.expectEqual(*tRef);
    }
  }
}

// Quantizations captured into a CUDA graph in global mode, on a stream that
// has no workspace yet: the capture gets its own (cuMemAlloc with the
// capture mode relaxed), a larger second quantization outgrows it within
// the capture, and every replay, with new data in the same input buffers,
// equals the host reference, also after eager work on the same stream grew
// that stream's workspace in between.
TEST(QuantizeGpuTest, CapturedInACudaGraphAndReplayed) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  const DriverApi &api = DeviceBuffer::api();
  CUstream stream = nullptr;
  ASSERT_EQ(api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  llvm::scope_exit destroyStream([&] { api.streamDestroy(stream); });
  // A transposed quantization with a reduce pass (a word per column), then
  // a dual layout in two kernels, whose column maxima (a row of them per
  // row-wise CTA) need a larger workspace.
  QuantizeSpec dual;
  dual.rows = 512;
  dual.cols = 4096;
  dual.input = InputType::BF16;
  dual.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, false, BlockScaleFold::Row};
  dual.bothLayouts = true;
  QuantizeSpec wide;
  wide.rows = 1024;
  wide.cols = 2048;
  wide.input = InputType::F32;
  wide.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, true, BlockScaleFold::Row};
  // Compiled before the capture: a capture records launches, not compiles.
  for (const QuantizeSpec &spec : {dual, wide}) {
    Input warm(spec, Data::Gaussian, seed);
    DeviceOutputs out(getQuantizeLayout(spec)),
        transposed(getQuantizeLayout(getTransposedSpec(spec)));
    llvm::Error error =
        spec.bothLayouts ? gpu().quantizer->quantizeBothLayouts(
                               spec, out.buffers(warm.device.get()),
                               transposed.buffers(0), nullptr)
                         : gpu().quantizer->quantize(
                               spec, out.buffers(warm.device.get()), nullptr);
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
  }

  Input dualIn(dual, Data::Outliers, seed + 1),
      wideIn(wide, Data::Gaussian, seed + 2);
  DeviceOutputs rowOut(getQuantizeLayout(dual)),
      tOut(getQuantizeLayout(getTransposedSpec(dual))),
      wideOut(getQuantizeLayout(wide));
  ASSERT_EQ(api.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS);
  llvm::Error first = gpu().quantizer->quantize(
      wide, wideOut.buffers(wideIn.device.get()), stream);
  llvm::Error second = gpu().quantizer->quantizeBothLayouts(
      dual, rowOut.buffers(dualIn.device.get()), tOut.buffers(0), stream);
  CUgraph graph = nullptr;
  ASSERT_EQ(api.streamEndCapture(stream, &graph), CUDA_SUCCESS);
  llvm::scope_exit destroyGraph([&] { api.graphDestroy(graph); });
  ASSERT_FALSE(bool(first)) << llvm::toString(std::move(first));
  ASSERT_FALSE(bool(second)) << llvm::toString(std::move(second));
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.graphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  llvm::scope_exit destroyExec([&] { api.graphExecDestroy(exec); });

  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + " seed " +
                 std::to_string(seed));
    if (replay > 0) {
      // New data in the graph's input buffers, poisoned outputs.
      dualIn.x =
          makeInput(Data::Gaussian, dual.rows, dual.cols, seed + 3 * replay);
      std::vector<uint16_t> bf16 = toBf16(dualIn.x);
      dualIn.device.upload(bf16.data());
      wideIn.x = makeInput(Data::Outliers, wide.rows, wide.cols,
                           seed + 3 * replay + 1);
      wideIn.device.upload(wideIn.x.data());
      for (DeviceOutputs *out : {&rowOut, &tOut, &wideOut})
        out->reset();
    }
    if (replay == 2) {
      // Eager work on the capture's stream, larger than anything before.
      QuantizeSpec eager = wide;
      eager.rows = 2048;
      eager.cols = 16384;
      Input in(eager, Data::Gaussian, seed + 100);
      DeviceOutputs out(getQuantizeLayout(eager));
      llvm::Error error = gpu().quantizer->quantize(
          eager, out.buffers(in.device.get()), stream);
      ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
      ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    }
    ASSERT_EQ(api.graphLaunch(exec, stream), CUDA_SUCCESS);
    ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    llvm::Expected<QuantizedTensor> rowRef =
        quantize(dualIn.x, dual.rows, dual.cols, dual.options);
    llvm::Expected<QuantizedTensor> tRef = quantize(
        dualIn.x, dual.rows, dual.cols, getTransposedSpec(dual).options);
    llvm::Expected<QuantizedTensor> wideRef =
        quantize(wideIn.x, wide.rows, wide.cols, wide.options);
    ASSERT_TRUE(rowRef && tRef && wideRef);
    rowOut.expectEqual(*rowRef);
    tOut.expectEqual(*tRef);
    wideOut.expectEqual(*wideRef);
  }
}

TEST(QuantizeGpuTest, BothLayoutsMatchTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  std::vector<ScalingScheme> schemes = {
      ScalingScheme::perTensor(), ScalingScheme::perRow(),
      ScalingScheme::mxfp8(), ScalingScheme::perGroup(1, 32),
      ScalingScheme::perGroup(1, 16)};
  for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
    for (int block : {16, 32})
      schemes.push_back(ScalingScheme::twoLevel(scope, block));
  for (const ScalingScheme &scheme : schemes)
    for (BlockScaleFold fold : {BlockScaleFold::None, BlockScaleFold::Row}) {
      if (fold != BlockScaleFold::None && !scheme.localScalesAreE8M0())
        continue;
      for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
        for (InputType input : {InputType::F32, InputType::BF16})
          for (Data data : {Data::Gaussian, Data::Outliers, Data::Boundaries}) {
            QuantizeSpec spec;
            // Both blocked axes multiples of the block; the columns not a
            // multiple of the tile's (1056 = 16.5 BF16 strips).
            spec.rows = 384;
            spec.cols = 1056;
            spec.input = input;
            spec.options = {scheme, format, false, fold};
            spec.bothLayouts = true;
            checkBothLayoutsAgainstReference(spec, data, seed++);
          }
    }
  // BF16 blocks of 64 fill a tile row.
  for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row}) {
    QuantizeSpec spec;
    spec.rows = 256;
    spec.cols = 1024;
    spec.input = InputType::BF16;
    spec.options = {ScalingScheme::twoLevel(scope, 64), Fp8Format::E4M3, false};
    spec.bothLayouts = true;
    checkBothLayoutsAgainstReference(spec, Data::Outliers, seed++);
  }
  // No blocks: any shape, 333 rows and 100 columns (neither layout's rows
  // are whole 16-byte vectors).
  for (const ScalingScheme &scheme :
       {ScalingScheme::perTensor(), ScalingScheme::perRow()})
    for (InputType input : {InputType::F32, InputType::BF16}) {
      QuantizeSpec spec;
      spec.rows = 333;
      spec.cols = 100;
      spec.input = input;
      spec.options = {scheme, Fp8Format::E4M3, false};
      spec.bothLayouts = true;
      checkBothLayoutsAgainstReference(spec, Data::HeavyTailed, seed++);
    }
  for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
    for (BlockScaleFold fold : {BlockScaleFold::None, BlockScaleFold::Row}) {
      QuantizeSpec spec;
      spec.rows = 2048;
      spec.cols = 11008;
      spec.input = InputType::BF16;
      spec.options = {ScalingScheme::twoLevel(scope, 32), Fp8Format::E4M3,
                      false, fold};
      spec.bothLayouts = true;
      checkBothLayoutsAgainstReference(spec, Data::Outliers, seed++);
    }
}

// The quantizers that fold their E8M0 factors as they write (the codes
// rescaled to the row's or the 128-group's largest factor, FP32 factors
// out): the same bits as the host's quantize with QuantizeOptions::fold.
TEST(QuantizeGpuTest, FoldingQuantizationsMatchTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  std::vector<ScalingScheme> schemes = {ScalingScheme::mxfp8()};
  for (int block : {32, 64, 128})
    for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
      schemes.push_back(ScalingScheme::twoLevel(scope, block));
  for (const ScalingScheme &scheme : schemes)
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (InputType input : {InputType::F32, InputType::BF16})
        for (BlockScaleFold fold : {BlockScaleFold::Row, BlockScaleFold::K128})
          for (bool transpose : {false, true})
            for (Data data :
                 {Data::Gaussian, Data::Outliers, Data::Boundaries}) {
              QuantizeSpec spec;
              // Transposed: K (the input's rows) a multiple of 128, output
              // rows (1000) not a multiple of the tile's columns.
              spec.rows = transpose ? 384 : 257;
              spec.cols = transpose ? 1000 : 2048;
              spec.input = input;
              spec.options = {scheme, format, transpose, fold};
              checkAgainstReference(spec, data, seed++);
            }
  // One row; K = 11008 (86 groups of 128); the widest rows (1024 threads).
  for (auto [rows, cols, input] :
       {std::tuple{int64_t(1), int64_t(4096), InputType::BF16},
        std::tuple{int64_t(7), int64_t(11008), InputType::BF16},
        std::tuple{int64_t(3), int64_t(16384), InputType::F32},
        std::tuple{int64_t(2), int64_t(32768), InputType::BF16}})
    for (BlockScaleFold fold : {BlockScaleFold::Row, BlockScaleFold::K128}) {
      QuantizeSpec spec;
      spec.rows = rows;
      spec.cols = cols;
      spec.input = input;
      spec.options = {ScalingScheme::twoLevel(GlobalScope::Tensor),
                      Fp8Format::E4M3, false, fold};
      checkAgainstReference(spec, Data::Outliers, seed++);
    }
}

// Rows longer than 1024 threads hold (32768 BF16 or 16384 FP32 values) are
// cut into segments: every row-wise scheme and fold, K that splits evenly
// and K of 1031 blocks (a prime, so the last segment is shorter), enough
// rows that one row's segments run on different CTAs.
TEST(QuantizeGpuTest, LongRowsInSegmentsMatchTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  for (auto [rows, cols, input] :
       {std::tuple{int64_t(37), int64_t(40960), InputType::BF16},
        std::tuple{int64_t(300), int64_t(32 * 1031), InputType::BF16},
        std::tuple{int64_t(37), int64_t(20480 + 32), InputType::F32}})
    for (const ScalingScheme &scheme : allSchemes())
      for (BlockScaleFold fold :
           {BlockScaleFold::None, BlockScaleFold::Row, BlockScaleFold::K128}) {
        if (isSquareGroup(scheme) ||
            (fold != BlockScaleFold::None && !scheme.localScalesAreE8M0()) ||
            cols % std::max<int64_t>(scheme.blockCols, 1) != 0 ||
            (fold == BlockScaleFold::K128 && cols % 128 != 0))
          continue;
        for (Data data : {Data::Outliers, Data::Boundaries}) {
          QuantizeSpec spec;
          spec.rows = rows;
          spec.cols = cols;
          spec.input = input;
          spec.options = {scheme, Fp8Format::E4M3, false, fold};
          checkAgainstReference(spec, data, seed++);
        }
      }
  // E5M2, and a row of several segments.
  QuantizeSpec spec;
  spec.rows = 3;
  spec.cols = 131072 + 256;
  spec.input = InputType::BF16;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row), Fp8Format::E5M2,
                  false, BlockScaleFold::Row};
  checkAgainstReference(spec, Data::Outliers, seed++);
}

TEST(QuantizeGpuTest, LargeActivationsMatchTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  // Transposed, each CTA walks many tiles down its column strip.
  for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
    for (bool transpose : {false, true})
      for (BlockScaleFold fold : {BlockScaleFold::None, BlockScaleFold::Row}) {
        QuantizeSpec spec;
        spec.rows = 2048;
        spec.cols = 11008;
        spec.input = InputType::BF16;
        spec.options = {ScalingScheme::twoLevel(scope, 32), Fp8Format::E4M3,
                        transpose, fold};
        checkAgainstReference(spec, Data::Outliers, seed++);
      }
}

TEST(QuantizeGpuTest, CastWithAGivenScale) {
  REQUIRE_GPU();
  const int64_t rows = 333, cols = 1024;
  std::vector<float> x = makeInput(Data::HeavyTailed, rows, cols, freshSeed());
  // Non-finite values are encoded one by one (NaN code, +-max), uncounted.
  x[5] = NAN;
  x[cols + 7] = INFINITY;
  x[x.size() - 1] = -INFINITY;
  // A scale below amax/448, so some values saturate and are counted.
  const float scale = 0.004f;
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false};
  DeviceBuffer dx(x.size() * 4), dq(x.size()), dglobal(4), dscale(4),
      dcounters(16);
  dx.upload(x.data());
  dscale.upload(&scale);
  dq.poison();
  ASSERT_EQ(DeviceBuffer::api().memsetD8(dcounters.get(), 0, 16), CUDA_SUCCESS);
  QuantizeBuffers buffers{dx.get(), dq.get(), 0, dglobal.get(), dcounters.get()};
  llvm::Error error =
      gpu().quantizer->castWithScale(spec, dscale.get(), buffers, nullptr);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

  QuantizedTensor expected = llvm::cantFail(
      quantizeWithScale(x, rows, cols, scale, Fp8Format::E4M3));
  expectBitsEqual(dq.download<uint8_t>(), expected.codes, cols, "codes");
  EXPECT_GT(expected.stats.saturated, 0);
  std::vector<uint64_t> counters = dcounters.download<uint64_t>();
  EXPECT_EQ(counters[0], uint64_t(expected.stats.saturated));
  EXPECT_EQ(counters[1], uint64_t(expected.stats.nonFiniteBlocks));
  EXPECT_EQ(expected.global, std::vector<float>{scale});
  EXPECT_EQ(dglobal.download<float>()[0], scale);
}

/// The per-tensor E4M3 cast of [rows, cols] weights, in both layouts where
/// `bothLayouts`.
QuantizeSpec weightCastSpec(int64_t rows, int64_t cols, InputType input,
                            bool bothLayouts) {
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.input = input;
  spec.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false};
  spec.bothLayouts = bothLayouts;
  return spec;
}

// The weights' cast in both layouts (the forward's W and the data
// gradient's W^T) from one read.
TEST(QuantizeGpuTest, CastWithAGivenScaleInBothLayouts) {
  REQUIRE_GPU();
  const int64_t rows = 333, cols = 1000;
  for (InputType input : {InputType::F32, InputType::BF16}) {
    const QuantizeSpec spec = weightCastSpec(rows, cols, input, true);
    Input in(spec, Data::HeavyTailed, freshSeed());
    const float scale = 0.004f; // below amax / 448: some values saturate
    std::vector<float> xt(in.x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        xt[size_t(c * rows + r)] = in.x[size_t(r * cols + c)];
    QuantizedTensor rowRef = llvm::cantFail(
        quantizeWithScale(in.x, rows, cols, scale, Fp8Format::E4M3));
    QuantizedTensor tRef = llvm::cantFail(
        quantizeWithScale(xt, cols, rows, scale, Fp8Format::E4M3));
    EXPECT_GT(rowRef.stats.saturated, 0);
    DeviceBuffer dscale(4);
    dscale.upload(&scale);
    DeviceOutputs rowOut(getQuantizeLayout(spec)),
        tOut(getQuantizeLayout(getTransposedSpec(spec)));
    llvm::Error error = gpu().quantizer->quantizeBothLayouts(
        spec, rowOut.buffers(in.device.get()), tOut.buffers(0), nullptr,
        dscale.get());
    ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
    ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
    rowOut.expectEqual(rowRef);
    tOut.expectEqual(tRef);
  }
}

/// One layout's outputs of G casts, one array per output (codes poisoned,
/// counters at their start values); the cast in slot s writes at s.
struct CastOutputs {
  CastOutputs(size_t casts, size_t values)
      : values(values), q(casts * values), global(casts * 4),
        counters(casts * 16) {
    q.poison();
    global.poison();
    std::vector<uint64_t> start;
    for (size_t g = 0; g < casts; ++g)
      start.insert(start.end(), {DeviceOutputs::kCounterStart[0],
                                 DeviceOutputs::kCounterStart[1]});
    counters.upload(start.data());
  }
  QuantizeBuffers at(size_t slot) const {
    return {0, q.get() + slot * values, 0, global.get() + slot * 4,
            counters.get() + slot * 16};
  }
  size_t values;
  DeviceBuffer q, global, counters;
};

/// Checks slot `slot` of `out` (codes, scale, saturated count and, with
/// `nonFinite`, the non-finite count) against the host's cast of x [rows,
/// cols], or of its transpose, with `scale`. Returns the host's saturated
/// count.
int64_t expectCastMatchesTheHost(const CastOutputs &out, size_t slot,
                                 const std::vector<float> &x, int64_t rows,
                                 int64_t cols, bool transposed, float scale,
                                 bool nonFinite = true) {
  SCOPED_TRACE(transposed ? "transposed" : "row-major");
  std::vector<float> xt(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      xt[size_t(c * rows + r)] = x[size_t(r * cols + c)];
  QuantizedTensor ref = llvm::cantFail(
      transposed ? quantizeWithScale(xt, cols, rows, scale, Fp8Format::E4M3)
                 : quantizeWithScale(x, rows, cols, scale, Fp8Format::E4M3));
  std::vector<uint8_t> q = out.q.download<uint8_t>();
  expectBitsEqual(std::vector<uint8_t>(q.begin() + slot * out.values,
                                       q.begin() + (slot + 1) * out.values),
                  ref.codes, ref.cols, "codes");
  EXPECT_EQ(out.global.download<float>()[slot], scale);
  std::vector<uint64_t> counts = out.counters.download<uint64_t>();
  EXPECT_EQ(counts[2 * slot] - DeviceOutputs::kCounterStart[0],
            uint64_t(ref.stats.saturated));
  if (nonFinite) {
    EXPECT_EQ(counts[2 * slot + 1] - DeviceOutputs::kCounterStart[1],
              uint64_t(ref.stats.nonFiniteBlocks));
  }
  return ref.stats.saturated;
}

// G experts' weights cast with their own scales (castWithScales): each
// cast's codes, scale and counters in each layout equal the host
// reference's of that cast alone, whether the casts' buffers are arrays in
// the casts' order (one launch), in reverse order (one launch, negative
// strides) or in neither (a launch each).
TEST(QuantizeGpuTest, BatchedCastsMatchTheHostReferenceOfEachCast) {
  REQUIRE_GPU();
  const int64_t rows = 333, cols = 1008;
  const size_t casts = 5, values = size_t(rows * cols);
  // Each cast's scale over its amax / 448: below 1 some values saturate.
  const float factors[casts] = {0.25f, 1.0f, 4.0f, 0.5f, 2.0f};
  const std::vector<size_t> orders[3] = {
      {0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}};
  uint64_t seed = freshSeed();
  for (InputType input : {InputType::F32, InputType::BF16})
    for (bool both : {false, true}) {
      const QuantizeSpec spec = weightCastSpec(rows, cols, input, both);
      SCOPED_TRACE(describe(spec, Data::HeavyTailed, seed));
      std::vector<float> x;
      for (size_t g = 0; g < casts; ++g) {
        std::vector<float> slice =
            makeInput(Data::HeavyTailed, rows, cols, seed + g);
        x.insert(x.end(), slice.begin(), slice.end());
      }
      const size_t elementBytes = input == InputType::F32 ? 4 : 2;
      DeviceBuffer dx(x.size() * elementBytes);
      if (input == InputType::F32) {
        dx.upload(x.data());
      } else {
        std::vector<uint16_t> bf16 = toBf16(x); // x now holds the BF16 values
        dx.upload(bf16.data());
      }
      std::vector<float> scales(casts);
      for (size_t g = 0; g < casts; ++g) {
        float amax = 0;
        for (size_t i = 0; i < values; ++i)
          if (std::isfinite(x[g * values + i]))
            amax = std::max(amax, std::fabs(x[g * values + i]));
        scales[g] = amax / 448.0f * factors[g];
      }
      DeviceBuffer dscales(casts * 4);
      dscales.upload(scales.data());

      for (int order = 0; order < 3; ++order) {
        SCOPED_TRACE("order " + std::to_string(order));
        const std::vector<size_t> &slot = orders[order];
        CastOutputs rowOut(casts, values);
        std::optional<CastOutputs> tOut;
        if (both)
          tOut.emplace(casts, values);
        std::vector<QuantizeBuffers> rowBuffers, tBuffers;
        for (size_t g = 0; g < casts; ++g) {
          rowBuffers.push_back(rowOut.at(slot[g]));
          rowBuffers.back().x = dx.get() + g * values * elementBytes;
          if (both)
            tBuffers.push_back(tOut->at(slot[g]));
        }
        EXPECT_EQ(castsShareOneLaunch(spec, rowBuffers, tBuffers), order != 2);
        llvm::Error error = gpu().quantizer->castWithScales(
            spec, dscales.get(), rowBuffers, tBuffers, nullptr);
        ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
        ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

        for (size_t g = 0; g < casts; ++g) {
          SCOPED_TRACE("cast " + std::to_string(g));
          std::vector<float> slice(x.begin() + g * values,
                                   x.begin() + (g + 1) * values);
          for (int layout = 0; layout < (both ? 2 : 1); ++layout) {
            const int64_t saturated = expectCastMatchesTheHost(
                layout ? *tOut : rowOut, slot[g], slice, rows, cols,
                layout == 1, scales[g]);
            if (factors[g] < 1) {
              EXPECT_GT(saturated, 0);
            }
          }
        }
      }
      seed += casts;
    }
}

/// FP32 values equal bit for bit, or both NaN (the GPU's NaN has its own
/// payload).
void expectSameFloats(const std::vector<float> &got,
                      const std::vector<float> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = std::isnan(got[i])
                          ? std::isnan(want[i])
                          : std::memcmp(&got[i], &want[i], 4) == 0;
    if (!same && bad++ == 0)
      first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << got[first]
                     << " against " << want[first];
}

// The fused optimizer step (QuantizeSpec::adamw): each weight's AdamW update
// and its moments equal numerics::adamwUpdate's, bit for bit, and its codes
// in each layout, scale and counters equal the host cast of the updated
// weight with that scale; for one weight, and for G experts in one launch
// or a launch each. The shape leaves partial tiles in both directions; some
// gradients are NaN or infinite, and the scales below 1 saturate.
TEST(QuantizeGpuTest, FusedAdamWStepsMatchTheHostReference) {
  REQUIRE_GPU();
  const int64_t rows = 332, cols = 1004;
  const size_t values = size_t(rows * cols);
  AdamWStep hyper;
  hyper.lr = 2e-3;
  hyper.weightDecay = 0.1;
  hyper.step = 7;
  const AdamWCoefficients coefficients =
      llvm::cantFail(getAdamWCoefficients(hyper));
  const float factors[] = {0.25f, 1.0f, 4.0f};
  uint64_t seed = freshSeed();
  for (bool both : {false, true})
    for (size_t casts : {size_t(1), size_t(3)})
      for (bool shuffled : {false, true}) {
        if (casts == 1 && shuffled)
          continue;
        QuantizeSpec spec = weightCastSpec(rows, cols, InputType::F32, both);
        spec.adamw = true;
        SCOPED_TRACE(describe(spec, Data::Gaussian, seed));
        SCOPED_TRACE(std::to_string(casts) + " casts" +
                     (shuffled ? ", a launch each" : ""));
        std::mt19937_64 rng(seed++);
        std::normal_distribution<float> normal;
        // Weights, gradients and the moments of earlier steps.
        std::vector<float> w(casts * values), g(w.size()), m(w.size()),
            v(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          w[i] = 0.02f * normal(rng);
          g[i] = 1e-3f * normal(rng);
          m[i] = 1e-4f * normal(rng);
          v[i] = 1e-7f * std::fabs(normal(rng));
        }
        g[17] = NAN;
        g[values + 5] = INFINITY;
        // The host reference: the updated weights and moments.
        std::vector<float> wNew = w, mNew = m, vNew = v;
        for (size_t i = 0; i < w.size(); ++i)
          wNew[i] = adamwUpdate(w[i], g[i], mNew[i], vNew[i], coefficients);
        std::vector<float> scales(casts);
        for (size_t c = 0; c < casts; ++c) {
          float amax = 0;
          for (size_t i = 0; i < values; ++i)
            if (std::isfinite(wNew[c * values + i]))
              amax = std::max(amax, std::fabs(wNew[c * values + i]));
          scales[c] = amax / 448.0f * factors[c];
        }
        // Cast c takes the weight, state and outputs in slot[c]: the casts'
        // order, or one no stride steps through (a launch each).
        std::vector<size_t> slot(casts);
        for (size_t c = 0; c < casts; ++c)
          slot[c] = shuffled ? (c * 2) % casts : c;
        DeviceBuffer dw(w.size() * 4), dg(w.size() * 4), dm(w.size() * 4),
            dv(w.size() * 4), dscales(casts * 4);
        dw.upload(w.data());
        dg.upload(g.data());
        dm.upload(m.data());
        dv.upload(v.data());
        CastOutputs rowOut(casts, values);
        std::optional<CastOutputs> tOut;
        if (both)
          tOut.emplace(casts, values);
        std::vector<QuantizeBuffers> rowBuffers, tBuffers;
        std::vector<AdamWBuffers> state;
        for (size_t c = 0; c < casts; ++c) {
          const size_t at = slot[c];
          rowBuffers.push_back(rowOut.at(at));
          rowBuffers.back().x = dw.get() + at * values * 4;
          if (both)
            tBuffers.push_back(tOut->at(at));
          state.push_back({dg.get() + at * values * 4,
                           dm.get() + at * values * 4,
                           dv.get() + at * values * 4});
        }
        // The scales in the casts' order; the checks below walk the slots.
        std::vector<float> castScales(casts);
        for (size_t c = 0; c < casts; ++c)
          castScales[c] = scales[slot[c]];
        dscales.upload(castScales.data());
        EXPECT_EQ(castsShareOneLaunch(spec, rowBuffers, tBuffers, state),
                  casts > 1 && !shuffled);
        const AdamWUpdate update{coefficients, state};
        llvm::Error error = gpu().quantizer->castWithScales(
            spec, dscales.get(), rowBuffers, tBuffers, nullptr, &update);
        ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
        ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

        expectSameFloats(dw.download<float>(), wNew, "weights");
        expectSameFloats(dm.download<float>(), mNew, "first moments");
        expectSameFloats(dv.download<float>(), vNew, "second moments");
        expectSameFloats(dg.download<float>(), g, "gradients (unchanged)");
        for (size_t c = 0; c < casts; ++c) {
          SCOPED_TRACE("weight " + std::to_string(c));
          std::vector<float> slice(wNew.begin() + c * values,
                                   wNew.begin() + (c + 1) * values);
          for (int layout = 0; layout < (both ? 2 : 1); ++layout) {
            const int64_t saturated = expectCastMatchesTheHost(
                layout ? *tOut : rowOut, c, slice, rows, cols, layout == 1,
                scales[c], /*nonFinite=*/false);
            if (factors[c] < 1) {
              EXPECT_GT(saturated, 0);
            }
          }
        }
      }
}

// Bad fused steps fail before anything launches, with the reason.
TEST(QuantizeGpuTest, FusedAdamWStepsCheckTheirState) {
  REQUIRE_GPU();
  QuantizeSpec spec = weightCastSpec(64, 128, InputType::F32, false);
  spec.adamw = true;
  const size_t bytes = 64 * 128 * 4;
  DeviceBuffer w(bytes), q(64 * 128), global(4), scale(4), g(bytes), m(bytes),
      v(bytes);
  const float one = 1.0f;
  scale.upload(&one);
  std::vector<QuantizeBuffers> casts = {{w.get(), q.get(), 0, global.get(), 0}};
  const AdamWCoefficients c = llvm::cantFail(getAdamWCoefficients({}));
  auto errorOf = [&](std::vector<AdamWBuffers> state, bool withUpdate = true) {
    const AdamWUpdate update{c, state};
    return llvm::toString(gpu().quantizer->castWithScales(
        spec, scale.get(), casts, {}, nullptr, withUpdate ? &update : nullptr));
  };
  EXPECT_NE(errorOf({{0, m.get(), v.get()}}).find("gradient pointer is null"),
            std::string::npos);
  EXPECT_NE(errorOf({{g.get(), m.get() + 4, v.get()}})
                .find("first moment must be 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(errorOf({}).find("one AdamW state per cast"), std::string::npos);
  EXPECT_NE(errorOf({}, false).find("one AdamW state per cast"),
            std::string::npos);
  EXPECT_NE(llvm::toString(gpu().quantizer->castWithScale(spec, scale.get(),
                                                          casts[0], nullptr))
                .find("needs the step's state"),
            std::string::npos);
}

// Kernels for any K (QuantizeSpec::anyK): one kernel per thread count
// (128 here) serves K from just past the next smaller count's reach to its
// own, with the bits of the host reference, for every row-wise scheme and
// fold.
TEST(QuantizeGpuTest, AnyKKernelsMatchTheHostReference) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  for (const ScalingScheme &scheme : allSchemes())
    for (InputType input : {InputType::F32, InputType::BF16})
      for (int64_t bf16Cols : {2176, 3072, 4096}) {
        if (isSquareGroup(scheme))
          continue;
        for (BlockScaleFold fold : {BlockScaleFold::None, BlockScaleFold::Row,
                                    BlockScaleFold::K128}) {
          if (fold != BlockScaleFold::None && !scheme.localScalesAreE8M0())
            continue;
          QuantizeSpec spec;
          spec.rows = 300;
          // FP32: 1152, 1536 and 2048 (128 threads take 1025 to 2048).
          spec.cols = input == InputType::F32
                          ? (bf16Cols == 2176 ? 1152 : bf16Cols / 2)
                          : bf16Cols;
          spec.input = input;
          spec.options = {scheme, Fp8Format::E4M3, false, fold};
          spec.anyK = true;
          ASSERT_TRUE(chooseQuantizerVariant(spec, false).anyK);
          checkAgainstReference(spec, Data::Outliers, seed++);
        }
      }
  // Both layouts in two kernels: the row-wise one with column maxima.
  for (int64_t cols : {2176, 4096}) {
    QuantizeSpec spec;
    spec.rows = 256;
    spec.cols = cols;
    spec.input = InputType::BF16;
    spec.options = {ScalingScheme::twoLevel(GlobalScope::Row), Fp8Format::E4M3,
                    false, BlockScaleFold::Row};
    spec.bothLayouts = true;
    spec.anyK = true;
    ASSERT_TRUE(chooseQuantizerVariant(spec, false).anyK);
    checkBothLayoutsAgainstReference(spec, Data::Outliers, seed++);
  }
}

/// A mixture-of-experts layer's gather: each of `experts` experts takes a
/// random number of random rows of `sourceRows` (none, one, a few hundred),
/// in expert order. With `padding`, each expert's rows are padded to a
/// multiple of 128 by indices outside the source: mostly -1, some past its
/// end or far below zero (all rows of zeros to the transposed kernel).
std::vector<int32_t> makeGather(int64_t sourceRows, int experts, bool padding,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> index;
  for (int g = 0; g < experts; ++g) {
    const int rows = g == 0 ? 0 : g == 1 ? 1 : int(rng() % 300);
    for (int r = 0; r < rows; ++r)
      index.push_back(int32_t(rng() % uint64_t(sourceRows)));
    while (padding && index.size() % 128 != 0) {
      const uint64_t kind = rng() % 8;
      index.push_back(kind == 0   ? int32_t(sourceRows)
                      : kind == 1 ? INT32_MIN
                                  : -1);
    }
  }
  return index;
}

// A gathered quantization against the host's quantization of the gathered
// copy, bit for bit: row-major (the experts' rows, every index valid) and
// transposed (K-major over the experts' rows, each expert's padded to whole
// 128-row tiles by indices outside the input, which read as zeros), with
// every scheme either kernel takes, folded where its factors fold.
TEST(QuantizeGpuTest, GatheredRowsMatchTheHostReferenceOfTheGatheredCopy) {
  REQUIRE_GPU();
  uint64_t seed = freshSeed();
  const int64_t sourceRows = 700;
  for (const ScalingScheme &scheme : allSchemes())
    for (InputType input : {InputType::F32, InputType::BF16})
      for (bool transpose : {false, true}) {
        if (isSquareGroup(scheme))
          continue;
        QuantizeSpec source;
        source.rows = sourceRows;
        source.cols = transpose ? 1000 : 2048;
        source.input = input;
        Input in(source, Data::Outliers, seed);
        std::vector<int32_t> index = makeGather(sourceRows, 9, transpose, seed);
        QuantizeSpec spec = source;
        spec.rows = int64_t(index.size());
        spec.gather = true;
        spec.options = {scheme, Fp8Format::E4M3, transpose,
                        scheme.localScalesAreE8M0() ? BlockScaleFold::Row
                                                    : BlockScaleFold::None};
        SCOPED_TRACE(describe(spec, Data::Outliers, seed++) + " gathered");
        std::vector<float> gathered(size_t(spec.rows * spec.cols), 0.0f);
        for (int64_t r = 0; r < spec.rows; ++r)
          if (index[r] >= 0 && index[r] < sourceRows)
            std::copy_n(in.x.begin() + index[r] * spec.cols, spec.cols,
                        gathered.begin() + r * spec.cols);
        llvm::Expected<QuantizedTensor> ref =
            quantize(gathered, spec.rows, spec.cols, spec.options);
        ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
        DeviceBuffer deviceIndex(index.size() * 4);
        deviceIndex.upload(index.data());
        DeviceOutputs out(getQuantizeLayout(spec));
        QuantizeBuffers buffers = out.buffers(in.device.get());
        buffers.gatherRows = deviceIndex.get();
        buffers.gatherSourceRows = sourceRows;
        llvm::Error error = gpu().quantizer->quantize(spec, buffers, nullptr);
        ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
        ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
        out.expectEqual(*ref);
      }
}

} // namespace
