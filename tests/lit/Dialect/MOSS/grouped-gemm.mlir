// RUN: moss-opt %s -split-input-file | moss-opt -split-input-file | FileCheck %s
// RUN: moss-opt %s -split-input-file --mlir-print-op-generic | moss-opt -split-input-file | FileCheck %s

// moss.grouped_gemm prints as it parses: the contiguous layout (G + 1 row
// offsets) with the MOSS forward's A and per-tensor experts.
// CHECK-LABEL: func.func @contiguous
// CHECK: moss.grouped_gemm %{{.*}} scaling<two_level 32, global = row> local(%{{.*}}) global(%{{.*}}), %{{.*}} scaling<per_tensor> global(%{{.*}}) offsets(%{{.*}}) : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<8x1536x4096xf8E4M3FN>, tensor<8xf32>, tensor<9xi32>) -> tensor<?x1536xbf16>
func.func @contiguous(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                      %b: tensor<8x1536x4096xf8E4M3FN>, %bg: tensor<8xf32>, %o: tensor<9xi32>) -> tensor<?x1536xbf16> {
  %d = moss.grouped_gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                         %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<8x1536x4096xf8E4M3FN>, tensor<8xf32>, tensor<9xi32>) -> tensor<?x1536xbf16>
  return %d : tensor<?x1536xbf16>
}

// -----

// The masked layout (G row counts over M / G rows each), per-group scales
// stacked per expert, a bias per expert, C, amax and the attributes.
// CHECK-LABEL: func.func @masked
// CHECK: moss.grouped_gemm %{{.*}} scaling<per_group 1x128> local(%{{.*}}), %{{.*}} scaling<per_group 128x128> local(%{{.*}}) counts(%{{.*}}) bias(%{{.*}}) accumulate(%{{.*}}) beta(5.000000e-01) {fold = #moss.fold<none>, promoteK = 128 : i64, tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, swizzle = 8>}
func.func @masked(%a: tensor<1024x512xf8E4M3FN>, %al: tensor<1024x4xf32>,
                  %b: tensor<16x256x512xf8E4M3FN>, %bl: tensor<16x2x4xf32>, %n: tensor<16xi32>,
                  %bias: tensor<16x256xf32>, %c: tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1xf32>) {
  %d, %amax = moss.grouped_gemm %a scaling<per_group 1x128> local(%al),
                                %b scaling<per_group 128x128> local(%bl) counts(%n)
                                bias(%bias) accumulate(%c) beta(0.5)
      {fold = #moss.fold<none>, promoteK = 128, tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, swizzle = 8>}
      : (tensor<1024x512xf8E4M3FN>, tensor<1024x4xf32>, tensor<16x256x512xf8E4M3FN>, tensor<16x2x4xf32>, tensor<16xi32>, tensor<16x256xf32>, tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1xf32>)
  return %d, %amax : tensor<1024x256xf32>, tensor<1xf32>
}

// -----

// Per-row experts: one global per row of each expert.
// CHECK-LABEL: func.func @per_row_experts
// CHECK: scaling<per_row> global(%{{.*}}) offsets(%{{.*}}) : (tensor<?x256xf8E5M2>, tensor<?xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4x64xf32>, tensor<5xi32>) -> tensor<?x64xf16>
func.func @per_row_experts(%a: tensor<?x256xf8E5M2>, %ag: tensor<?xf32>, %b: tensor<4x64x256xf8E4M3FN>,
                           %bg: tensor<4x64xf32>, %o: tensor<5xi32>) -> tensor<?x64xf16> {
  %d = moss.grouped_gemm %a scaling<per_row> global(%ag), %b scaling<per_row> global(%bg) offsets(%o)
      : (tensor<?x256xf8E5M2>, tensor<?xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4x64xf32>, tensor<5xi32>) -> tensor<?x64xf16>
  return %d : tensor<?x64xf16>
}
