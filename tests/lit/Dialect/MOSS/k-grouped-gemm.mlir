// RUN: moss-opt %s -split-input-file | moss-opt -split-input-file | FileCheck %s
// RUN: moss-opt %s -split-input-file --mlir-print-op-generic | moss-opt -split-input-file | FileCheck %s

// moss.k_grouped_gemm prints as it parses: a weight gradient of 8 experts
// over a dynamic K (the tokens), per-row operands.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: moss.k_grouped_gemm %{{.*}} scaling<per_row> global(%{{.*}}), %{{.*}} scaling<per_row> global(%{{.*}}) offsets(%{{.*}}) : (tensor<4096x?xf8E4M3FN>, tensor<4096xf32>, tensor<7168x?xf8E4M3FN>, tensor<7168xf32>, tensor<9xi32>) -> tensor<8x4096x7168xbf16>
func.func @weight_gradient(%dy: tensor<4096x?xf8E4M3FN>, %dyg: tensor<4096xf32>,
                           %x: tensor<7168x?xf8E4M3FN>, %xg: tensor<7168xf32>, %o: tensor<9xi32>) -> tensor<8x4096x7168xbf16> {
  %dw = moss.k_grouped_gemm %dy scaling<per_row> global(%dyg),
                            %x scaling<per_row> global(%xg) offsets(%o)
      : (tensor<4096x?xf8E4M3FN>, tensor<4096xf32>, tensor<7168x?xf8E4M3FN>, tensor<7168xf32>, tensor<9xi32>) -> tensor<8x4096x7168xbf16>
  return %dw : tensor<8x4096x7168xbf16>
}

// -----

// MOSS operands with their block scales, C per expert, beta, amax and the
// attributes.
// CHECK-LABEL: func.func @moss_accumulate
// CHECK: moss.k_grouped_gemm %{{.*}} scaling<two_level 32, global = row> local(%{{.*}}) global(%{{.*}}), %{{.*}} scaling<two_level 32, global = row> local(%{{.*}}) global(%{{.*}}) offsets(%{{.*}}) accumulate(%{{.*}}) beta(5.000000e-01) {mma = #moss.mma<fp8>, promoteK = 32 : i64}
func.func @moss_accumulate(%a: tensor<256x1024xf8E4M3FN>, %al: tensor<256x32xf8E8M0FNU>, %ag: tensor<256xf32>,
                           %b: tensor<512x1024xf8E4M3FN>, %bl: tensor<512x32xf8E8M0FNU>, %bg: tensor<512xf32>,
                           %o: tensor<5xi32>, %c: tensor<4x256x512xf32>) -> (tensor<4x256x512xf32>, tensor<1xf32>) {
  %d, %amax = moss.k_grouped_gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                                  %b scaling<two_level 32, global = row> local(%bl) global(%bg) offsets(%o)
                                  accumulate(%c) beta(0.5) {mma = #moss.mma<fp8>, promoteK = 32}
      : (tensor<256x1024xf8E4M3FN>, tensor<256x32xf8E8M0FNU>, tensor<256xf32>, tensor<512x1024xf8E4M3FN>, tensor<512x32xf8E8M0FNU>, tensor<512xf32>, tensor<5xi32>, tensor<4x256x512xf32>) -> (tensor<4x256x512xf32>, tensor<1xf32>)
  return %d, %amax : tensor<4x256x512xf32>, tensor<1xf32>
}
