//===- MustQuantize.h - Host quantize, failing the test on error -*- C++ -*-===//
//
// The numerics unit tests quantize with the host reference where an error
// means the test itself is wrong: this records the failure and goes on with
// an empty tensor.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_UNIT_MUSTQUANTIZE_H
#define MOSS_TESTS_UNIT_MUSTQUANTIZE_H

#include "moss/Numerics/Quantize.h"

#include "gtest/gtest.h"

namespace moss::numerics::test {

inline QuantizedTensor mustQuantize(const std::vector<float> &x, int64_t rows,
                                    int64_t cols,
                                    const QuantizeOptions &options) {
  llvm::Expected<QuantizedTensor> q = quantize(x, rows, cols, options);
  if (!q) {
    ADD_FAILURE() << llvm::toString(q.takeError());
    return QuantizedTensor();
  }
  return std::move(*q);
}

} // namespace moss::numerics::test

#endif // MOSS_TESTS_UNIT_MUSTQUANTIZE_H
