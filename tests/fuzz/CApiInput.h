//===- CApiInput.h - What CApiFuzzer's bytes mean ---------------*- C++ -*-===//
//
// Fuzz bytes become the structs of moss.h:
//
//   byte 0     the call (CallKind, modulo kCallKinds)
//   byte 1     bit 0 (kNullSpec): pass NULL for the spec or options;
//              bit 1 (kNullOut): for the buffers or output
//   then       the call's structs as raw bytes, zero-filled when short:
//     GemmCheck          moss_gemm_spec_t, int64_t m, moss_gemm_buffers_t
//     Quantize           moss_quantize_spec_t, then the input values
//     ContextCreate      moss_context_options_t (cache_directory: NULL)
//     WeightScalerCreate moss_weight_scaler_options_t (context: NULL)
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_FUZZ_CAPIINPUT_H
#define MOSS_TESTS_FUZZ_CAPIINPUT_H

#include "llvm/ADT/ArrayRef.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace moss::fuzz {

enum class CallKind : uint8_t {
  GemmCheck,
  Quantize,
  ContextCreate,
  WeightScalerCreate,
};
constexpr unsigned kCallKinds = 4;

enum : uint8_t { kNullSpec = 1, kNullOut = 2 };

/// Reads an input front to back; bytes past its end are zeros.
class InputReader {
public:
  explicit InputReader(llvm::ArrayRef<uint8_t> bytes) : bytes(bytes) {}

  void read(void *out, size_t size) {
    size_t available = std::min(size, bytes.size());
    if (available)
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

/// Writes the seed inputs (calls that pass every check) to the directory
/// `dir` as capi-<n>; returns a process exit status. Fails, saying which,
/// when a GEMM or quantization seed does not pass its checks: it would no
/// longer reach past them.
int writeCApiSeeds(const char *dir);

} // namespace moss::fuzz

#endif // MOSS_TESTS_FUZZ_CAPIINPUT_H
