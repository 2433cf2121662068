//===- CApiSeeds.cpp - CApiFuzzer's seed inputs ---------------------------===//
//
// Calls that pass the C API's checks, built with the header's own structs
// and initializers, so that the seeds follow moss.h as it changes: the GEMMs
// of moss_gemm_spec_init and the other scheme pairs the kernel takes, a
// quantization per scheme, and the default context and scaler options.
//
//===----------------------------------------------------------------------===//

#include "CApiInput.h"

#include "moss/moss.h"

#include <cstdio>
#include <string>
#include <vector>

using namespace moss::fuzz;

namespace {

/// One seed input: the call, no NULLs, then the structs.
class Seed {
public:
  explicit Seed(CallKind call) : bytes{uint8_t(call), 0} {}
  template <typename T> Seed &add(const T &value) {
    const auto *raw = reinterpret_cast<const uint8_t *>(&value);
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
    return *this;
  }
  const std::vector<uint8_t> &get() const { return bytes; }

private:
  std::vector<uint8_t> bytes;
};

moss_gemm_operand_spec_t operand(int32_t scheme, int64_t blockRows,
                                 int64_t blockCols, int32_t scope) {
  return {MOSS_FORMAT_E4M3, scheme, blockRows, blockCols, scope, 0};
}

/// A GEMM call with buffers whose scale counts fit: `aLocal`, `aGlobal`,
/// `bLocal`, `bGlobal` are the counts the schemes need.
Seed gemmSeed(const moss_gemm_spec_t &spec, int64_t m, int64_t aLocal,
              int64_t aGlobal, int64_t bLocal, int64_t bGlobal) {
  moss_gemm_buffers_t buffers{};
  auto address = [](int i) { return uint64_t(0x100000) * uint64_t(i + 1); };
  buffers.a = {address(0), aLocal ? address(1) : 0, aLocal,
               aGlobal ? address(2) : 0, aGlobal};
  buffers.b = {address(3), bLocal ? address(4) : 0, bLocal,
               bGlobal ? address(5) : 0, bGlobal};
  buffers.d = address(6);
  buffers.bias = spec.bias != MOSS_TYPE_NONE ? address(7) : 0;
  buffers.c = spec.accumulate != MOSS_TYPE_NONE ? address(8) : 0;
  buffers.amax = spec.amax ? address(9) : 0;
  return Seed(CallKind::GemmCheck).add(spec).add(m).add(buffers);
}

std::vector<Seed> getGemmSeeds() {
  const int64_t m = 256, n = 512, k = 1024;
  std::vector<Seed> seeds;
  moss_gemm_spec_t spec;
  // The default: A MOSS two-level (per-row global, per 32), B per tensor.
  moss_gemm_spec_init(&spec);
  spec.n = n;
  spec.k = k;
  seeds.push_back(gemmSeed(spec, m, m * k / 32, m, 0, 1));
  spec.fold = MOSS_FOLD_ROW;
  seeds.push_back(gemmSeed(spec, m, m * k / 32, m, 0, 1));
  // f32 out with bias, C, beta and amax; the f16 MMA; a static M.
  moss_gemm_spec_init(&spec);
  spec.m = m;
  spec.n = n;
  spec.k = k;
  spec.a = spec.b = operand(MOSS_SCHEME_PER_TENSOR, 1, 0, MOSS_GLOBAL_TENSOR);
  spec.out = MOSS_TYPE_F32;
  spec.bias = MOSS_TYPE_F32;
  spec.accumulate = MOSS_TYPE_BF16;
  spec.beta = 0.5f;
  spec.amax = 1;
  spec.mma = MOSS_MMA_F16;
  seeds.push_back(gemmSeed(spec, m, 0, 1, 0, 1));
  // MXFP8 x MXFP8; per-row x per-row in f16, promoted every 64 of K.
  moss_gemm_spec_init(&spec);
  spec.n = n;
  spec.k = k;
  spec.a = spec.b = operand(MOSS_SCHEME_MXFP8, 1, 32, MOSS_GLOBAL_TENSOR);
  seeds.push_back(gemmSeed(spec, m, m * k / 32, 0, n * k / 32, 0));
  spec.a = spec.b = operand(MOSS_SCHEME_PER_ROW, 1, 0, MOSS_GLOBAL_TENSOR);
  spec.promote_k = 64;
  spec.out = MOSS_TYPE_F16;
  seeds.push_back(gemmSeed(spec, m, 0, m, 0, n));
  spec.promote_k = 0;
  // DeepSeek-style per-group: activations 1x128, weights 128x128.
  spec.a = operand(MOSS_SCHEME_PER_GROUP, 1, 128, MOSS_GLOBAL_TENSOR);
  spec.b = operand(MOSS_SCHEME_PER_GROUP, 128, 128, MOSS_GLOBAL_TENSOR);
  spec.out = MOSS_TYPE_BF16;
  seeds.push_back(gemmSeed(spec, m, m * k / 128, 0, (n / 128) * (k / 128), 0));
  // Two-level with a per-tensor global on both sides, E5M2 A.
  spec.a = operand(MOSS_SCHEME_TWO_LEVEL, 1, 32, MOSS_GLOBAL_TENSOR);
  spec.a.format = MOSS_FORMAT_E5M2;
  spec.b = operand(MOSS_SCHEME_TWO_LEVEL, 1, 32, MOSS_GLOBAL_TENSOR);
  seeds.push_back(gemmSeed(spec, m, m * k / 32, 1, n * k / 32, 1));
  return seeds;
}

std::vector<Seed> getQuantizeSeeds() {
  std::vector<uint8_t> values(4 * 64 * 4);
  for (size_t i = 0; i < values.size() / 4; ++i) {
    float value = float(int(i % 37) - 18) * 0.375f;
    std::memcpy(&values[4 * i], &value, 4);
  }
  auto make = [&](int32_t scheme, int64_t blockRows, int64_t blockCols,
                  int32_t scope, int32_t transpose, int32_t fold,
                  int32_t input = MOSS_INPUT_F32) {
    moss_quantize_spec_t spec;
    moss_quantize_spec_init(&spec);
    // Blocks run along the input's rows when it is transposed.
    spec.rows = transpose ? 64 : 4;
    spec.cols = transpose ? 4 : 64;
    spec.input = input;
    spec.scheme = scheme;
    spec.block_rows = blockRows;
    spec.block_cols = blockCols;
    spec.global_scope = scope;
    spec.format = MOSS_FORMAT_E4M3;
    spec.transpose = transpose;
    spec.fold = fold;
    Seed seed(CallKind::Quantize);
    seed.add(spec);
    for (uint8_t byte : values)
      seed.add(byte);
    return seed;
  };
  return {
      make(MOSS_SCHEME_PER_TENSOR, 1, 0, MOSS_GLOBAL_TENSOR, 0, 0),
      make(MOSS_SCHEME_PER_ROW, 1, 0, MOSS_GLOBAL_TENSOR, 0, 0),
      make(MOSS_SCHEME_PER_GROUP, 1, 32, MOSS_GLOBAL_TENSOR, 0, 0),
      make(MOSS_SCHEME_PER_GROUP, 32, 32, MOSS_GLOBAL_TENSOR, 0, 0),
      make(MOSS_SCHEME_MXFP8, 1, 32, MOSS_GLOBAL_TENSOR, 0, 0, MOSS_INPUT_BF16),
      make(MOSS_SCHEME_TWO_LEVEL, 1, 32, MOSS_GLOBAL_ROW, 0, 0),
      make(MOSS_SCHEME_TWO_LEVEL, 1, 32, MOSS_GLOBAL_TENSOR, 0, MOSS_FOLD_ROW),
      make(MOSS_SCHEME_TWO_LEVEL, 1, 32, MOSS_GLOBAL_ROW, 1, 0),
  };
}

std::vector<Seed> getOptionSeeds() {
  std::vector<Seed> seeds;
  moss_context_options_t context;
  moss_context_options_init(&context);
  seeds.push_back(Seed(CallKind::ContextCreate).add(context));
  moss_weight_scaler_options_t scaler;
  moss_weight_scaler_options_init(&scaler);
  seeds.push_back(Seed(CallKind::WeightScalerCreate).add(scaler));
  scaler.bound = MOSS_ADAM_BOUND_PROVABLE;
  scaler.interval = 1;
  seeds.push_back(Seed(CallKind::WeightScalerCreate).add(scaler));
  return seeds;
}

} // namespace

int moss::fuzz::writeCApiSeeds(const char *dir) {
  std::vector<Seed> seeds = getGemmSeeds();
  for (Seed &seed : getQuantizeSeeds())
    seeds.push_back(std::move(seed));
  for (Seed &seed : getOptionSeeds())
    seeds.push_back(std::move(seed));
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::vector<uint8_t> &bytes = seeds[i].get();
    InputReader in(llvm::ArrayRef(bytes).drop_front(2));
    moss_error_t error = nullptr;
    if (CallKind(bytes[0]) == CallKind::GemmCheck) {
      auto spec = in.read<moss_gemm_spec_t>();
      auto m = in.read<int64_t>();
      auto buffers = in.read<moss_gemm_buffers_t>();
      error = moss_gemm_check(&spec, m, &buffers);
    } else if (CallKind(bytes[0]) == CallKind::Quantize) {
      auto spec = in.read<moss_quantize_spec_t>();
      moss_quantize_layout_t layout;
      error = moss_quantize_layout(&spec, &layout);
    }
    if (error) {
      std::fprintf(stderr, "seed %zu fails its checks: %s\n", i,
                   moss_error_message(error));
      moss_error_destroy(error);
      return 1;
    }
    std::string path = std::string(dir) + "/capi-" + std::to_string(i);
    FILE *file = std::fopen(path.c_str(), "wb");
    if (!file ||
        std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() ||
        std::fclose(file) != 0) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir);
  return 0;
}
