//===- CApiFuzzer.cpp - libFuzzer target: the C API's argument checks -----===//
//
// Fuzz bytes become the structs of moss.h and go to the calls that check
// them without a GPU:
//
//   byte 0     the call (CallKind, modulo its count)
//   byte 1     bit 0: pass NULL for the spec or options; bit 1: for the
//              buffers or output
//   then       the call's structs as raw bytes, zero-filled when short:
//     GemmCheck          moss_gemm_spec_t, int64_t m, moss_gemm_buffers_t
//     Quantize           moss_quantize_spec_t, then the input values
//     ContextCreate      moss_context_options_t (cache_directory: NULL)
//     WeightScalerCreate moss_weight_scaler_options_t (context: NULL)
//
// A struct that begins with struct_size is passed in an allocation of
// struct_size bytes, so that AddressSanitizer catches a read past what an
// older caller's header has. Every failure is MOSS_ERROR_INVALID_ARGUMENT
// with a message; creating a context may also find no device, which is all
// it can find: CUDA_VISIBLE_DEVICES is emptied, so no GPU is opened. A
// quantization spec that moss_quantize_layout takes is quantized on the
// host into buffers of exactly the layout's sizes.
//
// MOSS_FUZZ_WRITE_SEEDS=DIR makes the target write its seed inputs (calls
// that pass every check) to DIR and exit.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "moss/moss.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using moss::fuzz::check;

namespace {

enum class CallKind : uint8_t {
  GemmCheck,
  Quantize,
  ContextCreate,
  WeightScalerCreate,
};
constexpr unsigned kCallKinds = 4;

enum : uint8_t { kNullSpec = 1, kNullOut = 2 };

/// The largest quantization run on the host, in elements.
constexpr int64_t kMaxHostElements = 1 << 14;
/// The largest struct_size allocated (a newer caller's bigger struct).
constexpr size_t kMaxStructBytes = 256;

/// Reads the input front to back; bytes past its end are zeros.
class InputReader {
public:
  explicit InputReader(llvm::ArrayRef<uint8_t> bytes) : bytes(bytes) {}

  void read(void *out, size_t size) {
    size_t available = std::min(size, bytes.size());
    std::memcpy(out, bytes.data(), available);
    std::memset(static_cast<char *>(out) + available, 0, size - available);
    bytes = bytes.drop_front(available);
  }
  template <typename T> T read() {
    T value;
    read(&value, sizeof(T));
    return value;
  }
  llvm::ArrayRef<uint8_t> rest() const { return bytes; }

private:
  llvm::ArrayRef<uint8_t> bytes;
};

/// `value` (a struct beginning with struct_size) copied into an allocation
/// of value.struct_size bytes, clamped to [sizeof(size_t), kMaxStructBytes].
template <typename T> class SizedStruct {
public:
  explicit SizedStruct(const T &value) {
    size_t size =
        std::clamp<size_t>(value.struct_size, sizeof(size_t), kMaxStructBytes);
    storage.reset(new char[size]());
    std::memcpy(storage.get(), &value, std::min(size, sizeof(T)));
  }
  const T *get() const { return reinterpret_cast<const T *>(storage.get()); }

private:
  std::unique_ptr<char[]> storage;
};

/// Checks and frees the error of a call that checks its arguments.
void expectInvalidOrNone(moss_error_t error, llvm::StringRef call,
                         bool noDeviceToo = false) {
  if (!error)
    return;
  moss_error_code_t code = moss_error_code(error);
  std::string message = moss_error_message(error);
  moss_error_destroy(error);
  check(!message.empty(), (call + " failed without a message").str());
  check(code == MOSS_ERROR_INVALID_ARGUMENT ||
            (noDeviceToo && code == MOSS_ERROR_NO_DEVICE),
        (call + " failed with code " + llvm::Twine(int(code)) + ": " + message)
            .str());
}

void fuzzGemmCheck(InputReader &in, uint8_t flags) {
  auto spec = in.read<moss_gemm_spec_t>();
  auto m = in.read<int64_t>();
  auto buffers = in.read<moss_gemm_buffers_t>();
  SizedStruct<moss_gemm_spec_t> sized(spec);
  expectInvalidOrNone(moss_gemm_check(flags & kNullSpec ? nullptr : sized.get(),
                                      m, flags & kNullOut ? nullptr : &buffers),
                      "moss_gemm_check");
}

/// Quantizes `spec` on the host into buffers of exactly `layout`'s sizes.
void quantizeOnHost(const moss_quantize_spec_t &spec,
                    const moss_quantize_layout_t &layout,
                    llvm::ArrayRef<uint8_t> values) {
  size_t elementBytes = spec.input == MOSS_INPUT_BF16 ? 2 : 4;
  size_t inputBytes = size_t(spec.rows) * size_t(spec.cols) * elementBytes;
  std::vector<uint8_t> x(inputBytes);
  for (size_t i = 0; i < inputBytes && !values.empty(); ++i)
    x[i] = values[i % values.size()];
  std::vector<uint8_t> q(size_t(layout.code_rows * layout.code_cols));
  std::vector<uint8_t> local(size_t(layout.local_rows * layout.local_cols *
                                    layout.local_element_bytes));
  std::vector<float> global(size_t(layout.global_count));
  uint64_t counters[2] = {0, 0};
  moss_quantize_host_buffers_t buffers{
      x.data(), q.data(), local.empty() ? nullptr : local.data(),
      global.empty() ? nullptr : global.data(), counters};
  moss_error_t error = moss_quantize_host(&spec, &buffers);
  if (!error)
    return;
  std::string message = moss_error_message(error);
  moss_error_destroy(error);
  check(false, "moss_quantize_host refuses what moss_quantize_layout takes: " +
                   message);
}

void fuzzQuantize(InputReader &in, uint8_t flags) {
  auto spec = in.read<moss_quantize_spec_t>();
  moss_quantize_layout_t layout;
  moss_error_t error =
      moss_quantize_layout(flags & kNullSpec ? nullptr : &spec,
                           flags & kNullOut ? nullptr : &layout);
  if (error || (flags & (kNullSpec | kNullOut))) {
    expectInvalidOrNone(error, "moss_quantize_layout");
    return;
  }
  int64_t elements = 0, codes = 0;
  bool large =
      __builtin_mul_overflow(spec.rows, spec.cols, &elements) ||
      __builtin_mul_overflow(layout.code_rows, layout.code_cols, &codes);
  check(!large && codes == elements,
        "a layout with another number of codes than input values");
  if (elements <= kMaxHostElements)
    quantizeOnHost(spec, layout, in.rest());
}

void fuzzContextCreate(InputReader &in, uint8_t flags) {
  auto options = in.read<moss_context_options_t>();
  options.cache_directory = nullptr;
  SizedStruct<moss_context_options_t> sized(options);
  moss_context_t context = nullptr;
  moss_error_t error =
      moss_context_create(flags & kNullSpec ? nullptr : sized.get(),
                          flags & kNullOut ? nullptr : &context);
  check(!error || !context, "moss_context_create failed with a context");
  check(error != nullptr, "moss_context_create opened a GPU");
  expectInvalidOrNone(error, "moss_context_create", /*noDeviceToo=*/true);
}

void fuzzWeightScalerCreate(InputReader &in, uint8_t flags) {
  auto options = in.read<moss_weight_scaler_options_t>();
  SizedStruct<moss_weight_scaler_options_t> sized(options);
  moss_weight_scaler_t scaler = nullptr;
  moss_error_t error = moss_weight_scaler_create(
      nullptr, flags & kNullSpec ? nullptr : sized.get(),
      flags & kNullOut ? nullptr : &scaler);
  check(error != nullptr && !scaler,
        "moss_weight_scaler_create succeeded without a context");
  expectInvalidOrNone(error, "moss_weight_scaler_create");
}

//===----------------------------------------------------------------------===//
// Seeds
//===----------------------------------------------------------------------===//

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
    moss_quantize_spec_t spec{};
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

/// Writes the seeds to `dir`; fails when a GEMM or quantization seed does
/// not pass its checks (the seeds would no longer reach past them).
int writeSeeds(const char *dir) {
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

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  if (const char *dir = std::getenv("MOSS_FUZZ_WRITE_SEEDS"))
    std::exit(writeSeeds(dir));
  // No GPU is opened, wherever this runs: moss_context_create finds none.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  InputReader in(llvm::ArrayRef(data, size));
  auto call = CallKind(in.read<uint8_t>() % kCallKinds);
  auto flags = in.read<uint8_t>();
  switch (call) {
  case CallKind::GemmCheck:
    fuzzGemmCheck(in, flags);
    break;
  case CallKind::Quantize:
    fuzzQuantize(in, flags);
    break;
  case CallKind::ContextCreate:
    fuzzContextCreate(in, flags);
    break;
  case CallKind::WeightScalerCreate:
    fuzzWeightScalerCreate(in, flags);
    break;
  }
  return 0;
}
