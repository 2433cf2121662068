// RUN: moss-opt %s --moss-gemm-pipeline | moss-translate --moss-to-cuda | FileCheck %s

// Two kernels in one module: one translation unit each, in order, each
// headed by its kernel name.
// CHECK: // ----- [[FIRST:moss_gemm_[0-9a-f]{16}]]
// CHECK-NEXT: #include "moss/gemm/kernel.cuh"
// CHECK: /*M=*/-1, /*N=*/4096, /*K=*/4096,
// CHECK: void [[FIRST]](
// CHECK: // ----- [[SECOND:moss_gemm_[0-9a-f]{16}]]
// CHECK-NEXT: #include "moss/gemm/kernel.cuh"
// CHECK: /*M=*/-1, /*N=*/1024, /*K=*/4096,
// CHECK: void [[SECOND]](

func.func @up(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

func.func @down(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<1024x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x1024xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<1024x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x1024xbf16>
  return %c : tensor<?x1024xbf16>
}
