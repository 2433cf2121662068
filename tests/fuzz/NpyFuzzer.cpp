//===- NpyFuzzer.cpp - libFuzzer target: the .npy reader ------------------===//
//
// Any bytes give a matrix or an error that says what is wrong. A matrix
// holds rows x cols values, and written back as float32 it reads back bit
// for bit. Both settings of the BF16 option are tried.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "moss/Support/Npy.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

using namespace moss;
using moss::fuzz::check;

static void readOnce(llvm::StringRef bytes, bool uint16AsBf16) {
  NpyReadOptions options;
  options.uint16AsBf16 = uint16AsBf16;
  llvm::Expected<NpyMatrix> matrix = parseNpyMatrix(bytes, options);
  if (!matrix) {
    fuzz::checkMessage(matrix.takeError(), "a .npy error without a message");
    return;
  }
  check(matrix->rows > 0 && matrix->cols > 0, "a matrix with an empty axis");
  check(uint64_t(matrix->rows) * uint64_t(matrix->cols) == matrix->data.size(),
        "rows x cols differs from the number of values");
  bool isBf16 = matrix->source == NpyElementType::BF16;
  check(!isBf16 || uint16AsBf16, "BF16 read without the option");
  check(matrix->bf16.size() == (isBf16 ? matrix->data.size() : 0),
        "BF16 bit patterns missing or left over");

  std::vector<char> written =
      serializeNpy({matrix->rows, matrix->cols}, matrix->data);
  llvm::Expected<NpyMatrix> again =
      parseNpyMatrix(llvm::StringRef(written.data(), written.size()));
  check(bool(again), "serializeNpy wrote a file parseNpyMatrix refuses");
  check(again->rows == matrix->rows && again->cols == matrix->cols &&
            std::memcmp(again->data.data(), matrix->data.data(),
                        matrix->data.size() * sizeof(float)) == 0,
        "a matrix written and read back differs");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  readOnce(bytes, /*uint16AsBf16=*/false);
  readOnce(bytes, /*uint16AsBf16=*/true);
  return 0;
}
