//===- GpuQuantize.h - moss-jit's path to the GPU quantizers ----*- C++ -*-===//

#ifndef MOSS_TOOLS_MOSSJIT_GPUQUANTIZE_H
#define MOSS_TOOLS_MOSSJIT_GPUQUANTIZE_H

#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace moss::jit {

/// Quantizes a row-major [rows, cols] matrix on GPU 0 and returns what the
/// host reference returns for `x` (the same bits): `x` itself as FP32, or,
/// when `bf16` holds its BF16 bit patterns, those as BF16 (the kernels' BF16
/// input). With `bothLayouts`, one read gives two results: the row-major
/// quantization `options` describe, then the transposed one. The caller
/// checks `options` with checkQuantizeOptions first.
llvm::Expected<std::vector<numerics::QuantizedTensor>>
quantizeOnGpu(llvm::ArrayRef<float> x, llvm::ArrayRef<uint16_t> bf16,
              int64_t rows, int64_t cols,
              const numerics::QuantizeOptions &options, bool bothLayouts);

} // namespace moss::jit

#endif // MOSS_TOOLS_MOSSJIT_GPUQUANTIZE_H
