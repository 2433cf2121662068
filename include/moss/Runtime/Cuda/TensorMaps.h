//===- TensorMaps.h - TMA tensor maps of the GEMM kernel --------*- C++ -*-===//
//
// The tensor maps a GEMM kernel takes (docs/GEMM-KERNEL-ABI.md), encoded
// with cuTensorMapEncodeTiled: the K-major FP8 operands and, for kernels
// whose epilogue stores through TMA, the output.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CUDA_TENSORMAPS_H
#define MOSS_RUNTIME_CUDA_TENSORMAPS_H

#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace moss::runtime {

/// A K-major FP8 operand: [rows, k] bytes, box {128, boxRows}, 128-byte
/// swizzle, zeros out of bounds. `name` labels the error.
llvm::Error encodeOperandMap(const DriverApi &api, CUtensorMap &map,
                             CUdeviceptr codes, int64_t rows, int64_t k,
                             int boxRows, const char *name);

/// The output: [rows, n] elements of `elementBytes` (2 or 4), box
/// {boxColumns, boxRows} of 128-byte rows, 128-byte swizzle (the layout of
/// the epilogue's staging buffers).
llvm::Error encodeOutputMap(const DriverApi &api, CUtensorMap &map,
                            CUdeviceptr d, int64_t rows, int64_t n,
                            unsigned elementBytes, int boxColumns, int boxRows);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_TENSORMAPS_H
