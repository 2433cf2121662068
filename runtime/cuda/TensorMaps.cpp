//===- TensorMaps.cpp - TMA tensor maps of the GEMM kernel ----------------===//

#include "moss/Runtime/Cuda/TensorMaps.h"

#include <cstring>

using namespace moss;
using namespace moss::runtime;

llvm::Error runtime::encodeOperandMap(const DriverApi &api, CUtensorMap &map,
                                      CUdeviceptr codes, int64_t rows,
                                      int64_t k, int boxRows,
                                      const char *name) {
  std::memset(&map, 0, sizeof(map));
  cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  cuuint64_t strides[1] = {cuuint64_t(k)};
  cuuint32_t box[2] = {128, cuuint32_t(boxRows)};
  cuuint32_t elementStrides[2] = {1, 1};
  return checkCuda(
      api.tensorMapEncodeTiled(
          &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
          reinterpret_cast<void *>(codes), dims, strides, box, elementStrides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      llvm::Twine("cuTensorMapEncodeTiled (operand ") + name + ")");
}

llvm::Error runtime::encodeOutputMap(const DriverApi &api, CUtensorMap &map,
                                     CUdeviceptr d, int64_t rows, int64_t n,
                                     unsigned elementBytes, int boxColumns,
                                     int boxRows) {
  std::memset(&map, 0, sizeof(map));
  cuuint64_t dims[2] = {cuuint64_t(n), cuuint64_t(rows)};
  cuuint64_t strides[1] = {cuuint64_t(n) * elementBytes};
  cuuint32_t box[2] = {cuuint32_t(boxColumns), cuuint32_t(boxRows)};
  cuuint32_t elementStrides[2] = {1, 1};
  return checkCuda(
      api.tensorMapEncodeTiled(
          &map,
          elementBytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                            : CU_TENSOR_MAP_DATA_TYPE_UINT16,
          2, reinterpret_cast<void *>(d), dims, strides, box, elementStrides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      "cuTensorMapEncodeTiled (output)");
}
