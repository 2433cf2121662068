//===- CApiFuzzer.cpp - libFuzzer target: the C API's argument checks -----===//
//
// Fuzz bytes (CApiInput.h) become the structs of moss.h and go to the calls
// that check them without a GPU. A struct that begins with struct_size is
// passed in an allocation of struct_size bytes, so that AddressSanitizer
// catches a read past what an older caller's header has. Every failure is
// MOSS_ERROR_INVALID_ARGUMENT with a message; creating a context may also
// find no device, which is all it can find: CUDA_VISIBLE_DEVICES is
// emptied, so no GPU is opened. A quantization spec that
// moss_quantize_layout takes is quantized on the host into buffers of
// exactly the layout's sizes.
//
// MOSS_FUZZ_WRITE_SEEDS=DIR makes the target write its seed inputs
// (CApiSeeds.cpp) to DIR and exit.
//
//===----------------------------------------------------------------------===//

#include "CApiInput.h"
#include "FuzzCheck.h"

#include "moss/moss.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace moss::fuzz;

namespace {

/// The largest quantization run on the host, in elements.
constexpr int64_t kMaxHostElements = 1 << 14;
/// The largest struct_size allocated (a newer caller's bigger struct).
constexpr size_t kMaxStructBytes = 256;

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
  SizedStruct<moss_quantize_spec_t> sized(spec);
  moss_quantize_layout_t layout;
  moss_error_t error =
      moss_quantize_layout(flags & kNullSpec ? nullptr : sized.get(),
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
  // The experts' scalers take the same options.
  moss_expert_scalers_t experts = nullptr;
  error = moss_expert_scalers_create(
      nullptr, flags & kNullSpec ? nullptr : sized.get(), in.read<uint16_t>(),
      flags & kNullOut ? nullptr : &experts);
  check(error != nullptr && !experts,
        "moss_expert_scalers_create succeeded without a context");
  expectInvalidOrNone(error, "moss_expert_scalers_create");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  if (const char *dir = std::getenv("MOSS_FUZZ_WRITE_SEEDS"))
    std::exit(writeCApiSeeds(dir));
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
