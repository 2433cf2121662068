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
#include "moss/Runtime/Device.h"
#include "moss/Runtime/Driver.h"
#include "moss/Runtime/Quantizer.h"

#include "QuantizerTestSupport.h"

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

/// Runs one spec on the GPU and compares every output with the reference.
void checkAgainstReference(const QuantizeSpec &spec, Data data,
                           uint64_t seed) {
  SCOPED_TRACE(spec.options.scheme.str() + (spec.options.transpose ? " T" : "") +
               (spec.options.format == Fp8Format::E4M3 ? " e4m3" : " e5m2") +
               (spec.input == InputType::BF16 ? " bf16" : " f32") + " [" +
               std::to_string(spec.rows) + "x" + std::to_string(spec.cols) +
               "] data " + std::to_string(int(data)) + " seed " +
               std::to_string(seed));
  std::vector<float> x = makeInput(data, spec.rows, spec.cols, seed);
  std::vector<uint16_t> bf16;
  if (spec.input == InputType::BF16)
    bf16 = toBf16(x); // x now holds the exact BF16 values
  llvm::Expected<QuantizedTensor> ref =
      quantize(x, spec.rows, spec.cols, spec.options);
  ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());

  QuantizeLayout layout = getQuantizeLayout(spec);
  size_t inBytes = x.size() * (spec.input == InputType::F32 ? 4 : 2);
  DeviceBuffer dx(inBytes), dq(size_t(layout.codeRows * layout.codeCols)),
      dlocal(size_t(layout.localRows * layout.localCols *
                    layout.localElementBytes)),
      dglobal(size_t(layout.globalCount) * 4), dcounters(16);
  if (spec.input == InputType::F32)
    dx.upload(x.data());
  else
    dx.upload(bf16.data());
  dq.poison();
  if (dlocal.get())
    dlocal.poison();
  if (dglobal.get())
    dglobal.poison();
  // The kernels add to the counters: start them away from zero, so that a
  // count that is overwritten, or never made, shows.
  const std::vector<uint64_t> counterStart = {1000003, 2000029};
  dcounters.upload(counterStart.data());

  QuantizeBuffers buffers{dx.get(), dq.get(), dlocal.get(), dglobal.get(),
                          dcounters.get()};
  llvm::Error error = gpu().quantizer->quantize(spec, buffers, nullptr);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

  expectBitsEqual(dq.download<uint8_t>(), ref->codes, ref->cols, "codes");
  if (ref->scheme.localScalesAreE8M0())
    expectBitsEqual(dlocal.download<uint8_t>(), ref->localE8M0, ref->localCols,
                    "E8M0 scales");
  else if (ref->scheme.hasLocalScales())
    expectBitsEqual(dlocal.download<float>(), ref->localF32, ref->localCols,
                    "FP32 block scales");
  if (ref->scheme.hasGlobalScales())
    expectBitsEqual(dglobal.download<float>(), ref->global, 1,
                    "global scales");
  std::vector<uint64_t> counters = dcounters.download<uint64_t>();
  EXPECT_EQ(counters[0] - counterStart[0], uint64_t(ref->stats.saturated))
      << "saturated";
  EXPECT_EQ(counters[1] - counterStart[1], uint64_t(ref->stats.nonFiniteBlocks))
      << "non-finite";
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

} // namespace
