//===- CApiTest.cpp - The C API (moss.h) ----------------------------------===//
//
// Everything goes through moss.h. The GPU test also uses the driver table to
// allocate memory and the host reference (moss::numerics::quantize) to
// compare with; it skips without a GPU.
//
//===----------------------------------------------------------------------===//

#include "moss/moss.h"

#include "../../runtime/api/CApiInternal.h"

#include "moss/Numerics/AdamW.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

/// Owns an error object in a test.
struct ErrorDeleter {
  void operator()(moss_error *error) const { moss_error_destroy(error); }
};
using ErrorPtr = std::unique_ptr<moss_error, ErrorDeleter>;

moss_quantize_spec_t makeSpec(int64_t rows, int64_t cols, moss_scheme_t scheme,
                              int64_t blockRows = 1, int64_t blockCols = 0) {
  moss_quantize_spec_t spec;
  moss_quantize_spec_init(&spec);
  spec.rows = rows;
  spec.cols = cols;
  spec.input = MOSS_INPUT_F32;
  spec.scheme = scheme;
  spec.block_rows = blockRows;
  spec.block_cols = blockCols;
  spec.global_scope = MOSS_GLOBAL_TENSOR;
  spec.format = MOSS_FORMAT_E4M3;
  return spec;
}

/// The layout of `spec`, expecting success.
moss_quantize_layout_t layoutOf(const moss_quantize_spec_t &spec) {
  moss_quantize_layout_t layout;
  std::memset(&layout, 0xFF, sizeof(layout));
  ErrorPtr error(moss_quantize_layout(&spec, &layout));
  EXPECT_EQ(error, nullptr) << moss_error_message(error.get());
  return layout;
}

/// Expects `error` to have `code` and a message containing `text`.
void expectError(moss_error_t raw, moss_error_code_t code,
                 const std::string &text) {
  ErrorPtr error(raw);
  ASSERT_NE(error, nullptr) << "expected an error containing: " << text;
  EXPECT_EQ(moss_error_code(error.get()), code) << moss_error_message(raw);
  EXPECT_NE(std::string(moss_error_message(error.get())).find(text),
            std::string::npos)
      << moss_error_message(error.get());
}

TEST(CApiTest, Version) {
  EXPECT_EQ(MOSS_API_VERSION, 2);
  EXPECT_EQ(moss_api_version(), MOSS_API_VERSION);
}

TEST(CApiTest, NullErrorIsSuccess) {
  EXPECT_EQ(moss_error_code(nullptr), MOSS_ERROR_NONE);
  EXPECT_STREQ(moss_error_message(nullptr), "");
  moss_error_destroy(nullptr);
  moss_context_destroy(nullptr);
}

TEST(CApiTest, LayoutPerGroupSquare) {
  moss_quantize_layout_t l =
      layoutOf(makeSpec(300, 512, MOSS_SCHEME_PER_GROUP, 128, 128));
  EXPECT_EQ(l.code_rows, 300);
  EXPECT_EQ(l.code_cols, 512);
  EXPECT_EQ(l.local_rows, 3);
  EXPECT_EQ(l.local_cols, 4);
  EXPECT_EQ(l.local_element_bytes, 4);
  EXPECT_EQ(l.global_count, 0);
}

TEST(CApiTest, LayoutPerTensorAndPerRow) {
  moss_quantize_layout_t t = layoutOf(makeSpec(7, 64, MOSS_SCHEME_PER_TENSOR));
  EXPECT_EQ(t.code_rows, 7);
  EXPECT_EQ(t.code_cols, 64);
  EXPECT_EQ(t.local_rows, 0);
  EXPECT_EQ(t.local_cols, 0);
  EXPECT_EQ(t.local_element_bytes, 0);
  EXPECT_EQ(t.global_count, 1);

  moss_quantize_layout_t r = layoutOf(makeSpec(7, 64, MOSS_SCHEME_PER_ROW));
  EXPECT_EQ(r.global_count, 7);
  EXPECT_EQ(r.local_cols, 0);
}

TEST(CApiTest, LayoutMxfp8AndTwoLevel) {
  moss_quantize_layout_t m =
      layoutOf(makeSpec(16, 256, MOSS_SCHEME_MXFP8, 1, 32));
  EXPECT_EQ(m.local_rows, 16);
  EXPECT_EQ(m.local_cols, 8);
  EXPECT_EQ(m.local_element_bytes, 1);
  EXPECT_EQ(m.global_count, 0);

  moss_quantize_spec_t spec = makeSpec(16, 256, MOSS_SCHEME_TWO_LEVEL, 0, 32);
  spec.global_scope = MOSS_GLOBAL_ROW;
  moss_quantize_layout_t row = layoutOf(spec);
  EXPECT_EQ(row.local_rows, 16);
  EXPECT_EQ(row.local_cols, 8);
  EXPECT_EQ(row.local_element_bytes, 1);
  EXPECT_EQ(row.global_count, 16);

  // Transposed: codes [cols, rows], blocks along the input's rows.
  spec = makeSpec(64, 48, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  spec.transpose = 1;
  moss_quantize_layout_t tr = layoutOf(spec);
  EXPECT_EQ(tr.code_rows, 48);
  EXPECT_EQ(tr.code_cols, 64);
  EXPECT_EQ(tr.local_rows, 48);
  EXPECT_EQ(tr.local_cols, 2);
  EXPECT_EQ(tr.global_count, 1);
}

TEST(CApiTest, LayoutOfQuantizationsThatFold) {
  moss_quantize_spec_t spec = makeSpec(16, 256, MOSS_SCHEME_TWO_LEVEL, 0, 32);
  spec.fold = MOSS_FOLD_ROW;
  moss_quantize_layout_t row = layoutOf(spec);
  EXPECT_EQ(row.local_rows, 0) << "no E8M0 factors";
  EXPECT_EQ(row.global_count, 16) << "one FP32 factor per row";
  spec.fold = MOSS_FOLD_128;
  moss_quantize_layout_t group = layoutOf(spec);
  EXPECT_EQ(group.local_rows, 16);
  EXPECT_EQ(group.local_cols, 2);
  EXPECT_EQ(group.local_element_bytes, 4);
  EXPECT_EQ(group.global_count, 0);

  moss_quantize_layout_t out;
  spec.fold = 9;
  moss_error_t error = moss_quantize_layout(&spec, &out);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(moss_error_message(error)).find("spec->fold=9"),
            std::string::npos);
  moss_error_destroy(error);
  spec = makeSpec(16, 256, MOSS_SCHEME_PER_TENSOR, 0, 0);
  spec.fold = MOSS_FOLD_ROW;
  error = moss_quantize_layout(&spec, &out);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(moss_error_message(error)).find("has none"),
            std::string::npos);
  moss_error_destroy(error);
}

TEST(CApiTest, LayoutOfBothLayouts) {
  // No blocks: any K, also one the row-wise kernel alone refuses.
  moss_quantize_spec_t spec = makeSpec(333, 100, MOSS_SCHEME_PER_ROW);
  spec.input = MOSS_INPUT_BF16;
  moss_quantize_layout_t row, t;
  {
    ErrorPtr error(moss_quantize_both_layouts_layout(&spec, &row, &t));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  EXPECT_EQ(row.code_rows, 333);
  EXPECT_EQ(row.code_cols, 100);
  EXPECT_EQ(row.global_count, 333);
  EXPECT_EQ(t.code_rows, 100);
  EXPECT_EQ(t.code_cols, 333);
  EXPECT_EQ(t.global_count, 100);
  expectError(moss_quantize_layout(&spec, &row), MOSS_ERROR_INVALID_ARGUMENT,
              "K=100 must be a multiple of 8");

  spec = makeSpec(256, 512, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  {
    ErrorPtr error(moss_quantize_both_layouts_layout(&spec, &row, &t));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  EXPECT_EQ(row.local_rows, 256);
  EXPECT_EQ(row.local_cols, 16);
  EXPECT_EQ(t.local_rows, 512);
  EXPECT_EQ(t.local_cols, 8);
  spec.transpose = 1;
  expectError(moss_quantize_both_layouts_layout(&spec, &row, &t),
              MOSS_ERROR_INVALID_ARGUMENT, "leave transpose off");
  spec.transpose = 0;
  spec.block_cols = 128;
  expectError(moss_quantize_both_layouts_layout(&spec, &row, &t),
              MOSS_ERROR_INVALID_ARGUMENT, "at most 32 along K, got 128");
  expectError(moss_quantize_both_layouts_layout(&spec, &row, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "transposed is NULL");
}

TEST(CApiTest, InvalidSpecs) {
  moss_quantize_layout_t layout;
  moss_quantize_spec_t spec = makeSpec(4, 100, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT,
              "K=100 is not a multiple of the scaling block 32");

  spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.rows = 0;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "must have positive extents");

  spec = makeSpec(4, 64, MOSS_SCHEME_MXFP8, 1, 16);
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "MXFP8 scales blocks of 32");

  spec = makeSpec(4, 64, MOSS_SCHEME_PER_GROUP, 1, -32);
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "must be positive");
}

TEST(CApiTest, BadEnums) {
  moss_quantize_layout_t layout;
  moss_quantize_spec_t spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.scheme = 99;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec->scheme=99");
  spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.scheme = -1;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec->scheme=-1");
  spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.input = 2;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec->input=2");
  spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.global_scope = 7;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec->global_scope=7");
  spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  spec.format = 3;
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec->format=3");
}

TEST(CApiTest, NullArguments) {
  moss_quantize_layout_t layout;
  moss_quantize_spec_t spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  moss_quantize_buffers_t buffers = {16, 16, 0, 16, 0};
  expectError(moss_quantize_layout(nullptr, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "spec is NULL");
  expectError(moss_quantize_layout(&spec, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "out is NULL");
  expectError(moss_quantize(nullptr, &spec, &buffers, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");
  expectError(moss_quantize_gathered(nullptr, &spec, &buffers, 16, 4, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");
  expectError(moss_cast_with_scale(nullptr, &spec, 16, &buffers, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");

  moss_context_t context = reinterpret_cast<moss_context_t>(&spec);
  expectError(moss_context_create(nullptr, &context),
              MOSS_ERROR_INVALID_ARGUMENT, "options is NULL");
  EXPECT_EQ(context, nullptr);
  moss_context_options_t options;
  moss_context_options_init(&options);
  expectError(moss_context_create(&options, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "out is NULL");
  options.struct_size = 4;
  expectError(moss_context_create(&options, &context),
              MOSS_ERROR_INVALID_ARGUMENT, "options->struct_size=4");
  moss_context_options_init(&options);
  options.device_ordinal = -1;
  expectError(moss_context_create(&options, &context),
              MOSS_ERROR_INVALID_ARGUMENT, "options->device_ordinal=-1");
}

TEST(CApiTest, ErrorCodesComeFromTheErrorsTypeNotItsWording) {
  using moss::runtime::ErrorKind;
  using moss::runtime::makeRuntimeError;
  auto codeOf = [](llvm::Error error) {
    ErrorPtr converted(moss::capi::convert(std::move(error)));
    return moss_error_code(converted.get());
  };
  EXPECT_EQ(codeOf(makeRuntimeError(ErrorKind::NoDevice, "x")),
            MOSS_ERROR_NO_DEVICE);
  EXPECT_EQ(codeOf(makeRuntimeError(ErrorKind::Compile, "x")),
            MOSS_ERROR_COMPILE);
  EXPECT_EQ(codeOf(makeRuntimeError(ErrorKind::Cuda, "x")), MOSS_ERROR_CUDA);
  // Words that once decided the code no longer do.
  EXPECT_EQ(codeOf(llvm::createStringError(
                "no CUDA device: cuLaunch failed: NVRTC CUDA_ERROR_")),
            MOSS_ERROR_INTERNAL);
  ErrorPtr joined(moss::capi::convert(llvm::joinErrors(
      makeRuntimeError(ErrorKind::Cuda, "first"),
      llvm::createStringError("second"))));
  EXPECT_EQ(moss_error_code(joined.get()), MOSS_ERROR_CUDA);
  EXPECT_STREQ(moss_error_message(joined.get()), "first\nsecond");
}

TEST(CApiTest, HostQuantizeWritesTheReferenceForBf16Input) {
  // bf16 input (the top halves of FP32 words) quantizes as its exact FP32
  // widening does with the reference, poisoned outputs overwritten.
  const int64_t rows = 5, cols = 64;
  std::vector<uint16_t> bits(rows * cols);
  std::vector<float> widened(bits.size());
  uint32_t state = 12345u;
  for (size_t i = 0; i < bits.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    bits[i] = uint16_t(0x3C00u + (state >> 20) % 0x0800u) |
              uint16_t((state >> 8) & 0x8000u);
    uint32_t word = uint32_t(bits[i]) << 16;
    std::memcpy(&widened[i], &word, 4);
  }
  moss_quantize_spec_t spec = makeSpec(rows, cols, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  spec.input = MOSS_INPUT_BF16;
  spec.global_scope = MOSS_GLOBAL_ROW;
  std::vector<uint8_t> q(rows * cols, 0xAB), local(rows * 2, 0xAB);
  std::vector<float> global(rows, -7.0f);
  uint64_t counters[2] = {3, 4};
  moss_quantize_host_buffers_t buffers{bits.data(), q.data(), local.data(),
                                       global.data(), counters};
  ErrorPtr error(moss_quantize_host(&spec, &buffers));
  ASSERT_EQ(error, nullptr) << moss_error_message(error.get());

  moss::numerics::QuantizeOptions options;
  options.scheme = moss::numerics::ScalingScheme::twoLevel(
      moss::numerics::GlobalScope::Row, 32);
  auto want = moss::numerics::quantize(widened, rows, cols, options);
  ASSERT_TRUE(bool(want));
  EXPECT_EQ(q, want->codes);
  EXPECT_EQ(local, want->localE8M0);
  EXPECT_EQ(global, want->global);
  EXPECT_EQ(counters[0], 3u + uint64_t(want->stats.saturated));
  EXPECT_EQ(counters[1], 4u);
}

TEST(CApiTest, QuantizePlanCallsCheckTheirHandlesFirst) {
  moss_quantize_spec_t spec = makeSpec(4, 64, MOSS_SCHEME_PER_ROW);
  expectError(moss_quantize_plan_create(nullptr, &spec, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "plan is NULL");
  // A failed creation leaves no plan behind, whatever *plan held.
  moss_quantize_plan_t plan =
      reinterpret_cast<moss_quantize_plan_t>(uintptr_t(1));
  expectError(moss_quantize_plan_create(nullptr, &spec, &plan),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");
  EXPECT_EQ(plan, nullptr);
  moss_quantize_buffers_t buffers{};
  expectError(moss_quantize_plan_launch(nullptr, &buffers, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "plan is NULL");
  moss_quantize_plan_destroy(nullptr);
}

TEST(CApiTest, HostQuantizeTakesAnyKWithoutBlocks) {
  // The host reference has no 16-byte row rule: per-tensor takes K=7.
  const int64_t rows = 3, cols = 7;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i) - 10.0f;
  moss_quantize_spec_t spec = makeSpec(rows, cols, MOSS_SCHEME_PER_TENSOR);
  std::vector<uint8_t> q(rows * cols, 0xAB);
  float global = -7.0f;
  moss_quantize_host_buffers_t buffers{x.data(), q.data(), nullptr, &global,
                                       nullptr};
  ErrorPtr error(moss_quantize_host(&spec, &buffers));
  ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  moss::numerics::QuantizeOptions options;
  options.scheme = moss::numerics::ScalingScheme::perTensor();
  auto want = moss::numerics::quantize(x, rows, cols, options);
  ASSERT_TRUE(bool(want));
  EXPECT_EQ(q, want->codes);
  EXPECT_EQ(global, want->global[0]);
  // Its layout says so; the GPU quantizers' layout refuses the shape.
  moss_quantize_layout_t layout;
  error.reset(moss_quantize_host_layout(&spec, &layout));
  ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  EXPECT_EQ(layout.code_rows, rows);
  EXPECT_EQ(layout.code_cols, cols);
  EXPECT_EQ(layout.global_count, 1);
  expectError(moss_quantize_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT, "GPU quantizer");
  // The host's own rules still hold.
  spec = makeSpec(rows, cols, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  expectError(moss_quantize_host(&spec, &buffers), MOSS_ERROR_INVALID_ARGUMENT,
              "K=7 is not a multiple of the scaling block 32");
  expectError(moss_quantize_host_layout(&spec, &layout),
              MOSS_ERROR_INVALID_ARGUMENT,
              "K=7 is not a multiple of the scaling block 32");
}

TEST(CApiTest, HostQuantizeChecksItsBuffers) {
  moss_quantize_spec_t spec = makeSpec(4, 64, MOSS_SCHEME_PER_ROW);
  std::vector<float> x(4 * 64, 1.0f), global(4);
  std::vector<uint8_t> q(4 * 64), local(8);
  moss_quantize_host_buffers_t buffers{x.data(), q.data(), nullptr,
                                       global.data(), nullptr};
  expectError(moss_quantize_host(&spec, nullptr), MOSS_ERROR_INVALID_ARGUMENT,
              "buffers is NULL");
  expectError(moss_quantize_host(nullptr, &buffers),
              MOSS_ERROR_INVALID_ARGUMENT, "spec is NULL");
  buffers.local = local.data();
  expectError(moss_quantize_host(&spec, &buffers), MOSS_ERROR_INVALID_ARGUMENT,
              "buffers->local is given");
  buffers.local = nullptr;
  buffers.global = nullptr;
  expectError(moss_quantize_host(&spec, &buffers), MOSS_ERROR_INVALID_ARGUMENT,
              "buffers->global is 0 (NULL)");
  buffers.global = global.data();
  buffers.x = nullptr;
  expectError(moss_quantize_host(&spec, &buffers), MOSS_ERROR_INVALID_ARGUMENT,
              "buffers->x is 0 (NULL)");
  // The spec is checked as moss_quantize checks it.
  spec.rows = 0;
  buffers.x = x.data();
  expectError(moss_quantize_host(&spec, &buffers), MOSS_ERROR_INVALID_ARGUMENT,
              "must have positive extents");
}

TEST(CApiTest, QuantizeSpecInitGivesMossAndItsSizeIsChecked) {
  moss_quantize_spec_t spec;
  std::memset(&spec, 0xFF, sizeof(spec));
  moss_quantize_spec_init(&spec);
  EXPECT_EQ(spec.struct_size, sizeof(moss_quantize_spec_t));
  EXPECT_EQ(spec.scheme, MOSS_SCHEME_MOSS);
  EXPECT_EQ(spec.block_cols, 32);
  EXPECT_EQ(spec.global_scope, MOSS_GLOBAL_ROW);
  EXPECT_EQ(spec.fold, MOSS_FOLD_NONE);
  spec.rows = 8;
  spec.cols = 256;
  moss_quantize_layout_t layout = layoutOf(spec);
  // One E8M0 byte per 32 values and one global per row.
  EXPECT_EQ(layout.local_cols, 256 / 32);
  EXPECT_EQ(layout.local_element_bytes, 1);
  EXPECT_EQ(layout.global_count, 8);

  // Version 1's spec had no struct_size: its rows land there.
  for (size_t size :
       {size_t(0), size_t(8), sizeof(spec) - 4, sizeof(spec) + 8}) {
    spec.struct_size = size;
    expectError(moss_quantize_layout(&spec, &layout),
                MOSS_ERROR_INVALID_ARGUMENT,
                "spec->struct_size=" + std::to_string(size));
    expectError(moss_quantize_host_layout(&spec, &layout),
                MOSS_ERROR_INVALID_ARGUMENT, "moss_quantize_spec_init");
  }
}

TEST(CApiTest, WeightScalerOptions) {
  moss_weight_scaler_options_t options;
  std::memset(&options, 0xFF, sizeof(options));
  moss_weight_scaler_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(moss_weight_scaler_options_t));
  EXPECT_EQ(options.bound, MOSS_ADAM_BOUND_PAPER);
  EXPECT_EQ(options.reserved, 0);
  EXPECT_EQ(options.beta1, 0.9);
  EXPECT_EQ(options.beta2, 0.999);
  EXPECT_EQ(options.explicit_bound, 0.0);
  EXPECT_EQ(options.interval, 500);
  moss_weight_scaler_options_init(nullptr);
}

// The options are checked before the context, so without a GPU.
TEST(CApiTest, WeightScalerBadArguments) {
  moss_weight_scaler_options_t options;
  moss_weight_scaler_t scaler = reinterpret_cast<moss_weight_scaler_t>(&options);
  expectError(moss_weight_scaler_create(nullptr, nullptr, &scaler),
              MOSS_ERROR_INVALID_ARGUMENT, "options is NULL");
  EXPECT_EQ(scaler, nullptr);
  moss_weight_scaler_options_init(&options);
  expectError(moss_weight_scaler_create(nullptr, &options, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "out is NULL");
  expectError(moss_weight_scaler_create(nullptr, &options, &scaler),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");

  struct Case {
    void (*edit)(moss_weight_scaler_options_t &);
    const char *message;
  };
  Case cases[] = {
      {[](moss_weight_scaler_options_t &o) { o.struct_size = 8; },
       "options->struct_size=8"},
      {[](moss_weight_scaler_options_t &o) { o.bound = 2; },
       "options->bound=2 is not a moss_adam_bound_t"},
      {[](moss_weight_scaler_options_t &o) { o.interval = 0; },
       "the rescale interval 0 must be at least 1 step"},
      {[](moss_weight_scaler_options_t &o) { o.explicit_bound = -1.0; },
       "c=-1 must be finite and positive"},
      {[](moss_weight_scaler_options_t &o) {
         o.bound = MOSS_ADAM_BOUND_PROVABLE;
         o.beta1 = 0.99;
         o.beta2 = 0.9;
       },
       "beta1^2 < beta2"},
  };
  for (const Case &c : cases) {
    moss_weight_scaler_options_init(&options);
    c.edit(options);
    expectError(moss_weight_scaler_create(nullptr, &options, &scaler),
                MOSS_ERROR_INVALID_ARGUMENT, c.message);
    EXPECT_EQ(scaler, nullptr);
  }

  moss_quantize_spec_t spec = makeSpec(4, 64, MOSS_SCHEME_PER_TENSOR);
  moss_quantize_buffers_t buffers = {16, 16, 0, 16, 0};
  expectError(moss_weight_scaler_step(nullptr, 1e-3, &spec, &buffers, nullptr,
                                      nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scaler is NULL");
  moss_quantize_buffers_t transposed = {0, 16, 0, 16, 0};
  expectError(moss_weight_scaler_step_both_layouts(nullptr, 1e-3, &spec,
                                                   &buffers, &transposed,
                                                   nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scaler is NULL");
  expectError(moss_weight_scaler_step_both_layouts(
                  nullptr, 1e-3, &spec, &buffers, nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "transposed is NULL");
  moss_weight_scaler_options_init(&options);
  moss_expert_scalers_t experts =
      reinterpret_cast<moss_expert_scalers_t>(&options);
  expectError(moss_expert_scalers_create(nullptr, nullptr, 2, &experts),
              MOSS_ERROR_INVALID_ARGUMENT, "options is NULL");
  EXPECT_EQ(experts, nullptr);
  expectError(moss_expert_scalers_create(nullptr, &options, 0, &experts),
              MOSS_ERROR_INVALID_ARGUMENT, "experts is 0");
  expectError(moss_expert_scalers_create(nullptr, &options, 2, &experts),
              MOSS_ERROR_INVALID_ARGUMENT, "context is NULL");
  expectError(moss_expert_scalers_step(nullptr, 1e-3, &spec, &buffers, nullptr,
                                       nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scalers is NULL");
  moss_adamw_step_t adamw;
  moss_adamw_step_init(&adamw);
  EXPECT_EQ(adamw.struct_size, sizeof(adamw));
  EXPECT_EQ(adamw.lr, 1e-3);
  EXPECT_EQ(adamw.weight_decay, 0.01);
  EXPECT_EQ(adamw.step, 1);
  expectError(moss_weight_scaler_adamw_step(nullptr, &adamw, &spec, &buffers,
                                            nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scaler is NULL");
  expectError(moss_weight_scaler_adamw_step(nullptr, nullptr, &spec, &buffers,
                                            nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "adamw is NULL");
  expectError(moss_expert_scalers_adamw_step(nullptr, &adamw, &spec, &buffers,
                                             nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scalers is NULL");
  moss_weight_scaler_stats_t expertStats;
  expertStats.struct_size = sizeof(expertStats);
  expectError(moss_expert_scalers_stats(nullptr, 0, &expertStats),
              MOSS_ERROR_INVALID_ARGUMENT, "scalers is NULL");
  moss_expert_scalers_destroy(nullptr);
  moss_weight_scaler_t none[2] = {nullptr, nullptr};
  expectError(moss_weight_scaler_step_experts(nullptr, 2, 1e-3, &spec, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scalers is NULL");
  expectError(moss_weight_scaler_step_experts(none, 0, 1e-3, &spec, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "count is 0");
  expectError(moss_weight_scaler_step_experts(none, 2, 1e-3, nullptr, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "spec is NULL");
  expectError(moss_weight_scaler_step_experts(none, 2, 1e-3, &spec, nullptr,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "buffers is NULL");
  expectError(moss_weight_scaler_step_experts(none, 2, 1e-3, &spec, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "scalers[0] is NULL");
  moss_weight_scaler_stats_t stats;
  stats.struct_size = sizeof(stats);
  expectError(moss_weight_scaler_stats(nullptr, &stats),
              MOSS_ERROR_INVALID_ARGUMENT, "scaler is NULL");
  moss_weight_scaler_destroy(nullptr);
}

bool haveGpu() { return moss::runtime::isDriverAvailable(); }

TEST(CApiTest, NoDevice) {
  if (haveGpu())
    GTEST_SKIP() << "a driver and a GPU are present";
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  ErrorPtr error(moss_context_create(&options, &context));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(moss_error_code(error.get()), MOSS_ERROR_NO_DEVICE);
  std::string message = moss_error_message(error.get());
  EXPECT_EQ(message.rfind("no CUDA d", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(context, nullptr);
}

using ContextPtr = std::unique_ptr<moss_context, void (*)(moss_context_t)>;

/// A context with default options; null (and a test failure) if it cannot
/// be made.
ContextPtr makeContext() {
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  ErrorPtr error(moss_context_create(&options, &context));
  EXPECT_EQ(error, nullptr) << moss_error_message(error.get());
  return ContextPtr(context, moss_context_destroy);
}

/// Device memory freed at scope exit.
struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();
    if (bytes) {
      EXPECT_EQ(api.memAlloc(&ptr, bytes), CUDA_SUCCESS);
    }
  }
  ~DeviceBuffer() {
    if (ptr)
      (*moss::runtime::getDriverApi()).memFree(ptr);
  }
};

TEST(CApiTest, QuantizeOnGpuMatchesReference) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  ContextPtr owned = makeContext();
  ASSERT_NE(owned, nullptr);
  moss_context_t context = owned.get();
  const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();

  const int64_t rows = 48, cols = 256;
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    x[i] = std::sin(0.37f * float(i)) * std::exp2(float(i % 13) - 6.0f);

  moss_quantize_spec_t spec = makeSpec(rows, cols, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  spec.global_scope = MOSS_GLOBAL_ROW;
  moss_quantize_layout_t layout = layoutOf(spec);
  size_t localBytes =
      size_t(layout.local_rows * layout.local_cols * layout.local_element_bytes);
  DeviceBuffer dx(x.size() * 4), dq(x.size()), dlocal(localBytes),
      dglobal(size_t(layout.global_count) * 4), dcounters(16);
  ASSERT_EQ(api.memcpyHtoD(dx.ptr, x.data(), x.size() * 4), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(dcounters.ptr, 0, 16), CUDA_SUCCESS);
  // Poisoned outputs: what the quantizer leaves unwritten shows.
  ASSERT_EQ(api.memsetD8(dq.ptr, 0xA5, x.size()), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(dlocal.ptr, 0xA5, localBytes), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(dglobal.ptr, 0xA5, size_t(layout.global_count) * 4),
            CUDA_SUCCESS);
  moss_quantize_buffers_t buffers = {dx.ptr, dq.ptr, dlocal.ptr, dglobal.ptr,
                                     dcounters.ptr};
  {
    ErrorPtr error(moss_quantize(context, &spec, &buffers, nullptr));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  std::vector<uint8_t> codes(x.size()), local(localBytes);
  std::vector<float> global(size_t(layout.global_count));
  ASSERT_EQ(api.memcpyDtoH(codes.data(), dq.ptr, codes.size()), CUDA_SUCCESS);
  ASSERT_EQ(api.memcpyDtoH(local.data(), dlocal.ptr, localBytes), CUDA_SUCCESS);
  ASSERT_EQ(api.memcpyDtoH(global.data(), dglobal.ptr, global.size() * 4),
            CUDA_SUCCESS);

  moss::numerics::QuantizeOptions reference;
  reference.scheme = moss::numerics::ScalingScheme::twoLevel(
      moss::numerics::GlobalScope::Row, 32);
  llvm::Expected<moss::numerics::QuantizedTensor> q =
      moss::numerics::quantize(x, rows, cols, reference);
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_EQ(codes, q->codes);
  EXPECT_EQ(local, q->localE8M0);
  ASSERT_EQ(global.size(), q->global.size());
  EXPECT_EQ(std::memcmp(global.data(), q->global.data(), global.size() * 4), 0);

  // A prepared plan of the spec writes the same bits into poisoned outputs.
  {
    moss_quantize_plan_t plan = nullptr;
    ErrorPtr error(moss_quantize_plan_create(context, &spec, &plan));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    std::unique_ptr<moss_quantize_plan, void (*)(moss_quantize_plan_t)>
        ownedPlan(plan, moss_quantize_plan_destroy);
    ASSERT_EQ(api.memsetD8(dq.ptr, 0xA5, x.size()), CUDA_SUCCESS);
    ASSERT_EQ(api.memsetD8(dlocal.ptr, 0xA5, localBytes), CUDA_SUCCESS);
    error.reset(moss_quantize_plan_launch(plan, &buffers, nullptr));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    std::vector<uint8_t> planCodes(x.size()), planLocal(localBytes);
    ASSERT_EQ(api.memcpyDtoH(planCodes.data(), dq.ptr, planCodes.size()),
              CUDA_SUCCESS);
    ASSERT_EQ(api.memcpyDtoH(planLocal.data(), dlocal.ptr, localBytes),
              CUDA_SUCCESS);
    EXPECT_EQ(planCodes, codes);
    EXPECT_EQ(planLocal, local);
    moss_quantize_buffers_t missing = buffers;
    missing.local = 0;
    expectError(moss_quantize_plan_launch(plan, &missing, nullptr),
                MOSS_ERROR_INVALID_ARGUMENT, "buffers->local is 0");
  }

  // Wrong buffers are argument errors, caught before any launch.
  moss_quantize_buffers_t missing = buffers;
  missing.local = 0;
  expectError(moss_quantize(context, &spec, &missing, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "buffers->local is 0");
  expectError(moss_cast_with_scale(context, &spec, dglobal.ptr, &buffers,
                                   nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "per-tensor");
}

TEST(CApiTest, QuantizeBothLayoutsOnGpuMatchesReference) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  ContextPtr owned = makeContext();
  ASSERT_NE(owned, nullptr);
  moss_context_t context = owned.get();
  const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();

  const int64_t rows = 96, cols = 160;
  std::vector<float> x(rows * cols);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  for (float &v : x)
    v = normal(rng) * std::exp2(float(int(rng() % 24) - 12));

  moss_quantize_spec_t spec =
      makeSpec(rows, cols, MOSS_SCHEME_TWO_LEVEL, 1, 32);
  spec.global_scope = MOSS_GLOBAL_ROW;
  moss_quantize_spec_t tSpec = spec;
  tSpec.transpose = 1;
  struct Layout {
    moss_quantize_layout_t shape;
    size_t localBytes;
    DeviceBuffer q, local, global, counters;
    explicit Layout(const moss_quantize_layout_t &shape)
        : shape(shape), localBytes(size_t(shape.local_rows * shape.local_cols *
                                          shape.local_element_bytes)),
          q(size_t(shape.code_rows * shape.code_cols)), local(localBytes),
          global(size_t(shape.global_count) * 4), counters(16) {
      const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();
      EXPECT_EQ(
          api.memsetD8(q.ptr, 0xA5, size_t(shape.code_rows * shape.code_cols)),
          CUDA_SUCCESS);
      EXPECT_EQ(api.memsetD8(local.ptr, 0xA5, localBytes), CUDA_SUCCESS);
      EXPECT_EQ(api.memsetD8(global.ptr, 0xA5, size_t(shape.global_count) * 4),
                CUDA_SUCCESS);
      EXPECT_EQ(api.memsetD8(counters.ptr, 0, 16), CUDA_SUCCESS);
    }
    moss_quantize_buffers_t buffers(uint64_t x) const {
      return {x, q.ptr, local.ptr, global.ptr, counters.ptr};
    }
    /// Codes, E8M0 scales and globals against the reference.
    void expectEqual(const moss::numerics::QuantizedTensor &ref) const {
      const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();
      std::vector<uint8_t> codes(ref.codes.size()), e8m0(localBytes);
      std::vector<float> g(size_t(shape.global_count));
      ASSERT_EQ(api.memcpyDtoH(codes.data(), q.ptr, codes.size()),
                CUDA_SUCCESS);
      ASSERT_EQ(api.memcpyDtoH(e8m0.data(), local.ptr, localBytes),
                CUDA_SUCCESS);
      ASSERT_EQ(api.memcpyDtoH(g.data(), global.ptr, g.size() * 4),
                CUDA_SUCCESS);
      EXPECT_EQ(codes, ref.codes);
      EXPECT_EQ(e8m0, ref.localE8M0);
      ASSERT_EQ(g.size(), ref.global.size());
      EXPECT_EQ(std::memcmp(g.data(), ref.global.data(), g.size() * 4), 0);
    }
  };
  Layout row(layoutOf(spec)), t(layoutOf(tSpec));
  DeviceBuffer dx(x.size() * 4);
  ASSERT_EQ(api.memcpyHtoD(dx.ptr, x.data(), x.size() * 4), CUDA_SUCCESS);
  moss_quantize_buffers_t rowBuffers = row.buffers(dx.ptr),
                          tBuffers = t.buffers(0);
  {
    ErrorPtr error(moss_quantize_both_layouts(context, &spec, &rowBuffers,
                                              &tBuffers, 0, nullptr));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  moss::numerics::QuantizeOptions reference;
  reference.scheme = moss::numerics::ScalingScheme::twoLevel(
      moss::numerics::GlobalScope::Row, 32);
  {
    SCOPED_TRACE("row-major");
    row.expectEqual(
        llvm::cantFail(moss::numerics::quantize(x, rows, cols, reference)));
  }
  reference.transpose = true;
  {
    SCOPED_TRACE("transposed");
    t.expectEqual(
        llvm::cantFail(moss::numerics::quantize(x, rows, cols, reference)));
  }

  // Bad arguments are caught before any launch.
  expectError(moss_quantize_both_layouts(context, &tSpec, &rowBuffers,
                                         &tBuffers, 0, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "leave transpose off");
  expectError(moss_quantize_both_layouts(context, &spec, &rowBuffers, nullptr,
                                         0, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "transposed is NULL");
  moss_quantize_buffers_t bad = tBuffers;
  bad.local = 0;
  expectError(
      moss_quantize_both_layouts(context, &spec, &rowBuffers, &bad, 0, nullptr),
      MOSS_ERROR_INVALID_ARGUMENT, "transposed->local is 0");
  bad = tBuffers;
  bad.x = dx.ptr + 16;
  expectError(
      moss_quantize_both_layouts(context, &spec, &rowBuffers, &bad, 0, nullptr),
      MOSS_ERROR_INVALID_ARGUMENT, "transposed->x differs");
  expectError(moss_quantize_both_layouts(context, &spec, &rowBuffers, &tBuffers,
                                         row.global.ptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "per-tensor");
}

TEST(CApiTest, WeightScalerOnGpu) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  ContextPtr owned = makeContext();
  ASSERT_NE(owned, nullptr);
  moss_context_t context = owned.get();
  const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();

  moss_weight_scaler_options_t scalerOptions;
  moss_weight_scaler_options_init(&scalerOptions);
  scalerOptions.interval = 3;
  moss_weight_scaler_t raw = nullptr;
  {
    ErrorPtr error(moss_weight_scaler_create(context, &scalerOptions, &raw));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  std::unique_ptr<moss_weight_scaler, void (*)(moss_weight_scaler_t)> scaler(
      raw, moss_weight_scaler_destroy);

  const int64_t rows = 8, cols = 128;
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    x[i] = std::sin(0.37f * float(i));
  moss_quantize_spec_t spec = makeSpec(rows, cols, MOSS_SCHEME_PER_TENSOR);
  DeviceBuffer dx(x.size() * 4), dq(x.size()), dglobal(4);
  ASSERT_EQ(api.memcpyHtoD(dx.ptr, x.data(), x.size() * 4), CUDA_SUCCESS);
  moss_quantize_buffers_t buffers = {dx.ptr, dq.ptr, 0, dglobal.ptr, 0};

  // Waiting after each step, the decisions are: no anchor, two predicted
  // casts, an interval rescale.
  const int32_t expected[] = {MOSS_RESCALE_NO_ANCHOR, MOSS_RESCALE_NONE,
                              MOSS_RESCALE_NONE, MOSS_RESCALE_INTERVAL};
  for (int t = 0; t < 4; ++t) {
    moss_weight_scale_step_t step;
    ErrorPtr error(moss_weight_scaler_step(scaler.get(), 1e-3, &spec,
                                           &buffers, nullptr, &step));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(step.step, t);
    EXPECT_EQ(step.reason, expected[t]) << "step " << t;
    float global;
    ASSERT_EQ(api.memcpyDtoH(&global, dglobal.ptr, 4), CUDA_SUCCESS);
    if (step.reason == MOSS_RESCALE_NONE) {
      EXPECT_EQ(global, step.scale);
    }
  }
  moss_weight_scaler_stats_t stats;
  stats.struct_size = sizeof(stats);
  {
    ErrorPtr error(moss_weight_scaler_stats(scaler.get(), &stats));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  EXPECT_EQ(stats.steps, 4);
  EXPECT_EQ(stats.rescales, 2);
  EXPECT_EQ(stats.observed_step, 3);
  EXPECT_EQ(stats.anchor_step, 3);
  EXPECT_EQ(stats.saturation_events, 0);

  // Argument errors with a live scaler.
  moss_quantize_buffers_t counted = buffers;
  counted.counters = dglobal.ptr;
  expectError(moss_weight_scaler_step(scaler.get(), 1e-3, &spec, &counted,
                                      nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "buffers->counters must be 0");
  expectError(moss_weight_scaler_step(scaler.get(), -1.0, &spec, &buffers,
                                      nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "lr=-1");
  moss_quantize_spec_t perRow = makeSpec(rows, cols, MOSS_SCHEME_PER_ROW);
  expectError(moss_weight_scaler_step(scaler.get(), 1e-3, &perRow, &buffers,
                                      nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "per-tensor");

  // Both layouts from one read: W^T's codes at the step's scale.
  DeviceBuffer dqt(x.size()), dglobalT(4);
  moss_quantize_buffers_t transposed = {0, dqt.ptr, 0, dglobalT.ptr, 0};
  {
    moss_weight_scale_step_t step;
    ErrorPtr error(moss_weight_scaler_step_both_layouts(
        scaler.get(), 1e-3, &spec, &buffers, &transposed, nullptr, &step));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(step.step, 4);
    float global, globalT;
    ASSERT_EQ(api.memcpyDtoH(&global, dglobal.ptr, 4), CUDA_SUCCESS);
    ASSERT_EQ(api.memcpyDtoH(&globalT, dglobalT.ptr, 4), CUDA_SUCCESS);
    EXPECT_EQ(global, globalT);
    std::vector<uint8_t> q(x.size()), qt(x.size());
    ASSERT_EQ(api.memcpyDtoH(q.data(), dq.ptr, q.size()), CUDA_SUCCESS);
    ASSERT_EQ(api.memcpyDtoH(qt.data(), dqt.ptr, qt.size()), CUDA_SUCCESS);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(qt[size_t(c * rows + r)], q[size_t(r * cols + c)])
            << "row " << r << " column " << c;
  }
  moss_quantize_buffers_t elsewhere = transposed;
  elsewhere.x = dq.ptr;
  expectError(moss_weight_scaler_step_both_layouts(scaler.get(), 1e-3, &spec,
                                                   &buffers, &elsewhere,
                                                   nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "transposed->x differs");
  moss_quantize_buffers_t countedT = transposed;
  countedT.counters = dglobal.ptr;
  expectError(moss_weight_scaler_step_both_layouts(scaler.get(), 1e-3, &spec,
                                                   &buffers, &countedT, nullptr,
                                                   nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "transposed->counters must be 0");
  stats.struct_size = 16;
  expectError(moss_weight_scaler_stats(scaler.get(), &stats),
              MOSS_ERROR_INVALID_ARGUMENT, "out->struct_size=16");
}

// Three experts stacked [3, rows, cols], stepped in one call: every
// expert's codes, transposed codes and scale equal those of the same steps
// one expert at a time (moss_weight_scaler_step_both_layouts with scalers of
// their own), and so do the decisions, step by step through the first
// steps' rescales, an interval rescale and, after expert 1's weight grows
// 64-fold under a small learning rate, the saturation its predicted cast
// reports and the rescale that follows. Outputs are poisoned before each
// step. `grouped`: one moss_expert_scalers_t (else a moss_weight_scaler_t
// per expert through moss_weight_scaler_step_experts).
void checkExpertsStepAsOneAtATime(bool grouped) {
  ContextPtr owned = makeContext();
  ASSERT_NE(owned, nullptr);
  moss_context_t context = owned.get();
  const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();
  using ScalerPtr =
      std::unique_ptr<moss_weight_scaler, void (*)(moss_weight_scaler_t)>;
  moss_weight_scaler_options_t options;
  moss_weight_scaler_options_init(&options);
  options.interval = 3;
  auto makeScaler = [&] {
    moss_weight_scaler_t raw = nullptr;
    ErrorPtr error(moss_weight_scaler_create(context, &options, &raw));
    EXPECT_EQ(error, nullptr) << moss_error_message(error.get());
    return ScalerPtr(raw, moss_weight_scaler_destroy);
  };
  const int groups = 3;
  const int64_t rows = 32, cols = 96, n = rows * cols;
  std::vector<ScalerPtr> together, apart;
  for (int g = 0; g < groups; ++g) {
    together.push_back(makeScaler());
    apart.push_back(makeScaler());
  }
  moss_weight_scaler_t handles[groups] = {together[0].get(), together[1].get(),
                                          together[2].get()};
  std::unique_ptr<moss_expert_scalers, void (*)(moss_expert_scalers_t)> experts(
      nullptr, moss_expert_scalers_destroy);
  {
    moss_expert_scalers_t raw = nullptr;
    ErrorPtr error(moss_expert_scalers_create(context, &options, groups, &raw));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    experts.reset(raw);
  }
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  // Experts of different magnitudes: their scales differ.
  std::vector<float> x(groups * n);
  for (int g = 0; g < groups; ++g)
    for (int64_t i = 0; i < n; ++i)
      x[g * n + i] = normal(rng) * float(1 << (4 * g));
  moss_quantize_spec_t spec = makeSpec(rows, cols, MOSS_SCHEME_PER_TENSOR);
  DeviceBuffer dx(x.size() * 4), dq(x.size()), dqt(x.size()),
      dscale(groups * 4), dq1(n), dqt1(n), dscale1(4);
  const moss_quantize_buffers_t buffers = {dx.ptr, dq.ptr, 0, dscale.ptr, 0};
  const moss_quantize_buffers_t transposed = {0, dqt.ptr, 0, dscale.ptr, 0};
  int saturationRescales = 0;
  for (int t = 0; t < 8; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    if (t == 5)
      for (int64_t i = 0; i < n; ++i)
        x[n + i] *= 64.0f;
    ASSERT_EQ(api.memcpyHtoD(dx.ptr, x.data(), x.size() * 4), CUDA_SUCCESS);
    for (const DeviceBuffer *b : {&dq, &dqt, &dscale})
      ASSERT_EQ(api.memsetD8(b->ptr, 0xA5, b->bytes), CUDA_SUCCESS);
    moss_weight_scale_step_t steps[groups];
    {
      ErrorPtr error(
          grouped
              ? moss_expert_scalers_step(experts.get(), 1e-3, &spec, &buffers,
                                         &transposed, nullptr, steps)
              : moss_weight_scaler_step_experts(handles, groups, 1e-3, &spec,
                                                &buffers, &transposed, nullptr,
                                                steps));
      ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    }
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    std::vector<uint8_t> q(x.size()), qt(x.size());
    std::vector<float> scales(groups);
    ASSERT_EQ(api.memcpyDtoH(q.data(), dq.ptr, q.size()), CUDA_SUCCESS);
    ASSERT_EQ(api.memcpyDtoH(qt.data(), dqt.ptr, qt.size()), CUDA_SUCCESS);
    ASSERT_EQ(api.memcpyDtoH(scales.data(), dscale.ptr, groups * 4),
              CUDA_SUCCESS);
    for (int g = 0; g < groups; ++g) {
      SCOPED_TRACE("expert " + std::to_string(g));
      for (const DeviceBuffer *b : {&dq1, &dqt1, &dscale1})
        ASSERT_EQ(api.memsetD8(b->ptr, 0x5A, b->bytes), CUDA_SUCCESS);
      const moss_quantize_buffers_t one = {dx.ptr + uint64_t(g * n) * 4,
                                           dq1.ptr, 0, dscale1.ptr, 0};
      const moss_quantize_buffers_t oneT = {0, dqt1.ptr, 0, dscale1.ptr, 0};
      moss_weight_scale_step_t want;
      ErrorPtr error(moss_weight_scaler_step_both_layouts(
          apart[g].get(), 1e-3, &spec, &one, &oneT, nullptr, &want));
      ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
      ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
      EXPECT_EQ(steps[g].step, want.step);
      EXPECT_EQ(steps[g].reason, want.reason);
      EXPECT_EQ(steps[g].scale, want.scale);
      saturationRescales += want.reason == MOSS_RESCALE_SATURATION;
      std::vector<uint8_t> q1(n), qt1(n);
      float scale1;
      ASSERT_EQ(api.memcpyDtoH(q1.data(), dq1.ptr, n), CUDA_SUCCESS);
      ASSERT_EQ(api.memcpyDtoH(qt1.data(), dqt1.ptr, n), CUDA_SUCCESS);
      ASSERT_EQ(api.memcpyDtoH(&scale1, dscale1.ptr, 4), CUDA_SUCCESS);
      EXPECT_EQ(scales[g], scale1);
      EXPECT_TRUE(std::equal(q1.begin(), q1.end(), q.begin() + g * n));
      EXPECT_TRUE(std::equal(qt1.begin(), qt1.end(), qt.begin() + g * n));
    }
    if (t > 0) {
      EXPECT_NE(scales[0], scales[2]);
    }
  }
  // The grown expert's saturation was seen and rescaled, in both.
  EXPECT_EQ(saturationRescales, 1);
  moss_weight_scaler_stats_t stats, want;
  stats.struct_size = want.struct_size = sizeof(stats);
  for (int g = 0; g < groups; ++g) {
    ErrorPtr error(grouped ? moss_expert_scalers_stats(experts.get(), g, &stats)
                           : moss_weight_scaler_stats(handles[g], &stats));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    error.reset(moss_weight_scaler_stats(apart[g].get(), &want));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    EXPECT_EQ(stats.steps, 8);
    EXPECT_EQ(stats.rescales, want.rescales);
    EXPECT_EQ(stats.saturation_events, want.saturation_events);
    EXPECT_EQ(stats.saturated_values, want.saturated_values);
    EXPECT_EQ(stats.anchor_amax, want.anchor_amax);
  }
  // Argument errors name the expert and launch nothing.
  moss_weight_scaler_t twice[2] = {handles[0], handles[0]};
  expectError(moss_weight_scaler_step_experts(twice, 2, 1e-3, &spec, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "are one scaler");
  // 33 x 100 codes per expert: expert 1's are not 16-byte aligned.
  moss_quantize_spec_t odd = makeSpec(33, 100, MOSS_SCHEME_PER_TENSOR);
  expectError(moss_weight_scaler_step_experts(handles, 2, 1e-3, &odd, &buffers,
                                              nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "expert 1: ");
  expectError(moss_expert_scalers_step(experts.get(), 1e-3, &odd, &buffers,
                                       nullptr, nullptr, nullptr),
              MOSS_ERROR_INVALID_ARGUMENT, "expert 1: ");
  expectError(moss_expert_scalers_stats(experts.get(), groups, &stats),
              MOSS_ERROR_INVALID_ARGUMENT, "expert 3 of 3 experts");
}

TEST(CApiTest, WeightScalerStepsExpertsAsOneAtATime) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  checkExpertsStepAsOneAtATime(/*grouped=*/false);
}

// The optimizer's step fused into the scaler's (moss_weight_scaler_adamw_step
// and moss_expert_scalers_adamw_step, both layouts) gives what the AdamW
// update (numerics::adamwUpdate on the host) followed by the unfused
// scaler step gives: the same weights and moments, bit for bit, and the
// same codes, scales and decisions, step by step through the first steps'
// rescales, interval rescales and saturation rescales (a bound of 1e-3 lets
// the predictions undershoot the weights' growth). Outputs are poisoned
// before each step.
void checkFusedAdamWSteps(bool experts) {
  ContextPtr owned = makeContext();
  ASSERT_NE(owned, nullptr);
  moss_context_t context = owned.get();
  const moss::runtime::DriverApi &api = *moss::runtime::getDriverApi();
  moss_weight_scaler_options_t options;
  moss_weight_scaler_options_init(&options);
  options.interval = 3;
  options.explicit_bound = 1e-3;
  const int groups = experts ? 3 : 1;
  const int64_t rows = 32, cols = 96, n = rows * cols;
  // Two scalers of one kind: the fused steps', and the steps apart's.
  struct Scalers {
    moss_weight_scaler_t one = nullptr;
    moss_expert_scalers_t many = nullptr;
    ~Scalers() {
      moss_weight_scaler_destroy(one);
      moss_expert_scalers_destroy(many);
    }
  } fused, apart;
  for (Scalers *s : {&fused, &apart}) {
    ErrorPtr error(
        experts
            ? moss_expert_scalers_create(context, &options, groups, &s->many)
            : moss_weight_scaler_create(context, &options, &s->one));
    ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
  }
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> w(groups * n), m(w.size(), 0.0f), v(w.size(), 0.0f),
      g(w.size());
  for (int e = 0; e < groups; ++e)
    for (int64_t i = 0; i < n; ++i)
      w[e * n + i] = 0.02f * normal(rng) * float(1 << (2 * e));
  const size_t bytes = w.size() * 4;
  DeviceBuffer dw(bytes), dg(bytes), dm(bytes), dv(bytes), dwApart(bytes),
      dq(w.size()), dqt(w.size()), dscale(groups * 4), dqA(w.size()),
      dqtA(w.size()), dscaleA(groups * 4);
  ASSERT_EQ(api.memcpyHtoD(dw.ptr, w.data(), bytes), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(dm.ptr, 0, bytes), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(dv.ptr, 0, bytes), CUDA_SUCCESS);
  const moss_quantize_spec_t spec =
      makeSpec(rows, cols, MOSS_SCHEME_PER_TENSOR);
  moss_adamw_step_t adamw;
  moss_adamw_step_init(&adamw);
  adamw.grad = dg.ptr;
  adamw.exp_avg = dm.ptr;
  adamw.exp_avg_sq = dv.ptr;
  adamw.lr = 0.05;
  adamw.weight_decay = 0.1;
  int saturationRescales = 0, predicted = 0;
  for (int t = 0; t < 10; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    for (float &x : g)
      x = 0.01f * normal(rng);
    ASSERT_EQ(api.memcpyHtoD(dg.ptr, g.data(), bytes), CUDA_SUCCESS);
    adamw.step = t + 1;
    const moss::numerics::AdamWCoefficients c =
        llvm::cantFail(moss::numerics::getAdamWCoefficients(
            {adamw.lr, adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay,
             adamw.step}));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = moss::numerics::adamwUpdate(w[i], g[i], m[i], v[i], c);
    for (const DeviceBuffer *b : {&dq, &dqt, &dscale, &dqA, &dqtA, &dscaleA})
      ASSERT_EQ(api.memsetD8(b->ptr, 0xA5, b->bytes), CUDA_SUCCESS);
    const moss_quantize_buffers_t buffers = {dw.ptr, dq.ptr, 0, dscale.ptr, 0};
    const moss_quantize_buffers_t transposed = {0, dqt.ptr, 0, dscale.ptr, 0};
    moss_weight_scale_step_t steps[3], want[3];
    {
      ErrorPtr error(experts ? moss_expert_scalers_adamw_step(
                                   fused.many, &adamw, &spec, &buffers,
                                   &transposed, nullptr, steps)
                             : moss_weight_scaler_adamw_step(
                                   fused.one, &adamw, &spec, &buffers,
                                   &transposed, nullptr, steps));
      ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    }
    // Apart: the host's updated weights, then the scaler step.
    ASSERT_EQ(api.memcpyHtoD(dwApart.ptr, w.data(), bytes), CUDA_SUCCESS);
    const moss_quantize_buffers_t buffersA = {dwApart.ptr, dqA.ptr, 0,
                                              dscaleA.ptr, 0};
    const moss_quantize_buffers_t transposedA = {0, dqtA.ptr, 0, dscaleA.ptr,
                                                 0};
    {
      ErrorPtr error(
          experts
              ? moss_expert_scalers_step(apart.many, adamw.lr, &spec, &buffersA,
                                         &transposedA, nullptr, want)
              : moss_weight_scaler_step_both_layouts(apart.one, adamw.lr, &spec,
                                                     &buffersA, &transposedA,
                                                     nullptr, want));
      ASSERT_EQ(error, nullptr) << moss_error_message(error.get());
    }
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    auto download = [&](const DeviceBuffer &b) {
      std::vector<uint8_t> out(b.bytes);
      EXPECT_EQ(api.memcpyDtoH(out.data(), b.ptr, b.bytes), CUDA_SUCCESS);
      return out;
    };
    auto bytesOf = [](const std::vector<float> &x) {
      std::vector<uint8_t> out(x.size() * 4);
      std::memcpy(out.data(), x.data(), out.size());
      return out;
    };
    EXPECT_EQ(download(dw), bytesOf(w)) << "weights";
    EXPECT_EQ(download(dm), bytesOf(m)) << "first moments";
    EXPECT_EQ(download(dv), bytesOf(v)) << "second moments";
    EXPECT_EQ(download(dq), download(dqA)) << "codes";
    EXPECT_EQ(download(dqt), download(dqtA)) << "transposed codes";
    EXPECT_EQ(download(dscale), download(dscaleA)) << "scales";
    for (int e = 0; e < groups; ++e) {
      EXPECT_EQ(steps[e].step, want[e].step);
      EXPECT_EQ(steps[e].reason, want[e].reason) << "expert " << e;
      EXPECT_EQ(steps[e].scale, want[e].scale) << "expert " << e;
      saturationRescales += want[e].reason == MOSS_RESCALE_SATURATION;
      predicted += want[e].reason == MOSS_RESCALE_NONE;
    }
  }
  EXPECT_GT(saturationRescales, 0);
  EXPECT_GT(predicted, 0);

  // Bad steps fail before anything runs.
  const moss_quantize_buffers_t buffers = {dw.ptr, dq.ptr, 0, dscale.ptr, 0};
  auto step = [&](const moss_adamw_step_t &a) {
    return experts
               ? moss_expert_scalers_adamw_step(fused.many, &a, &spec, &buffers,
                                                nullptr, nullptr, nullptr)
               : moss_weight_scaler_adamw_step(fused.one, &a, &spec, &buffers,
                                               nullptr, nullptr, nullptr);
  };
  moss_adamw_step_t bad = adamw;
  bad.exp_avg = 0;
  expectError(step(bad), MOSS_ERROR_INVALID_ARGUMENT,
              "first moment pointer is null");
  bad = adamw;
  bad.grad += 4;
  expectError(step(bad), MOSS_ERROR_INVALID_ARGUMENT,
              "gradient must be 16-byte aligned");
  bad = adamw;
  bad.beta2 = 1.0;
  expectError(step(bad), MOSS_ERROR_INVALID_ARGUMENT, "betas must lie");
  bad = adamw;
  bad.struct_size = 8;
  expectError(step(bad), MOSS_ERROR_INVALID_ARGUMENT, "adamw->struct_size=8");
  moss_quantize_spec_t bf16 = spec;
  bf16.input = MOSS_INPUT_BF16;
  expectError(
      experts
          ? moss_expert_scalers_adamw_step(fused.many, &adamw, &bf16, &buffers,
                                           nullptr, nullptr, nullptr)
          : moss_weight_scaler_adamw_step(fused.one, &adamw, &bf16, &buffers,
                                          nullptr, nullptr, nullptr),
      MOSS_ERROR_INVALID_ARGUMENT, "updates FP32 weights");
}

TEST(CApiTest, FusedAdamWScalerStepsEqualTheUpdateThenTheStep) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  checkFusedAdamWSteps(/*experts=*/false);
}

TEST(CApiTest, FusedAdamWExpertStepsEqualTheUpdateThenTheStep) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  checkFusedAdamWSteps(/*experts=*/true);
}

TEST(CApiTest, ExpertScalersStepAsOneAtATime) {
  if (!haveGpu())
    GTEST_SKIP() << "needs a CUDA driver and GPU";
  checkExpertsStepAsOneAtATime(/*grouped=*/true);
}

} // namespace
