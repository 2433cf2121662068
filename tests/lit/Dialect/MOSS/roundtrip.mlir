// RUN: moss-opt %s | moss-opt | FileCheck %s
// RUN: moss-opt %s --mlir-print-op-generic | moss-opt | FileCheck %s

// Every scaling scheme and both FP8 formats through the quantizer.

// CHECK-LABEL: func.func @quantize_per_tensor
// CHECK: moss.quantize %{{.*}} scaling<per_tensor> : tensor<?x4096xf32> -> tensor<?x4096xf8E4M3FN> global tensor<1xf32>
func.func @quantize_per_tensor(%x: tensor<?x4096xf32>) -> (tensor<?x4096xf8E4M3FN>, tensor<1xf32>) {
  %q, %g = moss.quantize %x scaling<per_tensor> : tensor<?x4096xf32> -> tensor<?x4096xf8E4M3FN> global tensor<1xf32>
  return %q, %g : tensor<?x4096xf8E4M3FN>, tensor<1xf32>
}

// CHECK-LABEL: func.func @quantize_per_row_e5m2
// CHECK: moss.quantize %{{.*}} scaling<per_row> : tensor<64x256xbf16> -> tensor<64x256xf8E5M2> global tensor<64xf32>
func.func @quantize_per_row_e5m2(%x: tensor<64x256xbf16>) -> (tensor<64x256xf8E5M2>, tensor<64xf32>) {
  %q, %g = moss.quantize %x scaling<per_row> : tensor<64x256xbf16> -> tensor<64x256xf8E5M2> global tensor<64xf32>
  return %q, %g : tensor<64x256xf8E5M2>, tensor<64xf32>
}

// CHECK-LABEL: func.func @quantize_per_group
// CHECK: moss.quantize %{{.*}} scaling<per_group 1x128> : tensor<?x512xbf16> -> tensor<?x512xf8E4M3FN> local tensor<?x4xf32>
// CHECK: moss.quantize %{{.*}} scaling<per_group 128x128> : tensor<300x512xf32> -> tensor<300x512xf8E4M3FN> local tensor<3x4xf32>
func.func @quantize_per_group(%x: tensor<?x512xbf16>, %w: tensor<300x512xf32>) -> (tensor<?x512xf8E4M3FN>, tensor<?x4xf32>, tensor<300x512xf8E4M3FN>, tensor<3x4xf32>) {
  %q, %l = moss.quantize %x scaling<per_group 1x128> : tensor<?x512xbf16> -> tensor<?x512xf8E4M3FN> local tensor<?x4xf32>
  %qw, %lw = moss.quantize %w scaling<per_group 128x128> : tensor<300x512xf32> -> tensor<300x512xf8E4M3FN> local tensor<3x4xf32>
  return %q, %l, %qw, %lw : tensor<?x512xf8E4M3FN>, tensor<?x4xf32>, tensor<300x512xf8E4M3FN>, tensor<3x4xf32>
}

// CHECK-LABEL: func.func @quantize_mxfp8
// CHECK: moss.quantize %{{.*}} scaling<mxfp8> : tensor<16x64xf32> -> tensor<16x64xf8E4M3FN> local tensor<16x2xf8E8M0FNU>
func.func @quantize_mxfp8(%x: tensor<16x64xf32>) -> (tensor<16x64xf8E4M3FN>, tensor<16x2xf8E8M0FNU>) {
  %q, %l = moss.quantize %x scaling<mxfp8 32> : tensor<16x64xf32> -> tensor<16x64xf8E4M3FN> local tensor<16x2xf8E8M0FNU>
  return %q, %l : tensor<16x64xf8E4M3FN>, tensor<16x2xf8E8M0FNU>
}

// The two-level scheme, global per tensor and per row, and the transposed
// (column-wise) output: codes [K, rows], blocks along the input's rows.
// CHECK-LABEL: func.func @quantize_two_level
// CHECK: moss.quantize %{{.*}} scaling<two_level 32, global = tensor> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<1xf32>
// CHECK: moss.quantize %{{.*}} scaling<two_level 64, global = row> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x64xf8E8M0FNU> global tensor<?xf32>
// CHECK: moss.quantize %{{.*}} scaling<two_level 32, global = tensor> transpose : tensor<128x4096xbf16> -> tensor<4096x128xf8E5M2> local tensor<4096x4xf8E8M0FNU> global tensor<1xf32>
func.func @quantize_two_level(%x: tensor<?x4096xbf16>, %y: tensor<128x4096xbf16>) {
  %q0, %l0, %g0 = moss.quantize %x scaling<two_level> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<1xf32>
  %q1, %l1, %g1 = moss.quantize %x scaling<two_level 64, global = row> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x64xf8E8M0FNU> global tensor<?xf32>
  %q2, %l2, %g2 = moss.quantize %y scaling<two_level 32, global = tensor> transpose : tensor<128x4096xbf16> -> tensor<4096x128xf8E5M2> local tensor<4096x4xf8E8M0FNU> global tensor<1xf32>
  return
}

// `moss` is an alias of two_level; it prints as two_level.
// CHECK-LABEL: func.func @quantize_moss_alias
// CHECK: moss.quantize %{{.*}} scaling<two_level 32, global = row> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<?xf32>
func.func @quantize_moss_alias(%x: tensor<?x4096xbf16>) {
  %q, %l, %g = moss.quantize %x scaling<moss 32, global = row> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<?xf32>
  return
}

// The MOSS forward GEMM: A two-level with a per-row global, B per-tensor.
// CHECK-LABEL: func.func @gemm_moss_forward
// CHECK: moss.gemm %{{.*}} scaling<two_level 32, global = row> local(%{{.*}}) global(%{{.*}}), %{{.*}} scaling<per_tensor> global(%{{.*}}) : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
func.func @gemm_moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                             %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// Both operands two-level, E5M2 x E4M3, with every epilogue option: bias,
// beta * C into an f32 buffer, f32 output and the output amax.
// CHECK-LABEL: func.func @gemm_two_level_epilogue
// CHECK: moss.gemm %{{.*}} scaling<two_level 32, global = tensor> local(%{{.*}}) global(%{{.*}}), %{{.*}} scaling<two_level 32, global = tensor> local(%{{.*}}) global(%{{.*}}) bias(%{{.*}}) accumulate(%{{.*}}) beta(5.000000e-01) : (tensor<128x256xf8E5M2>, tensor<128x8xf8E8M0FNU>, tensor<1xf32>, tensor<512x256xf8E4M3FN>, tensor<512x8xf8E8M0FNU>, tensor<1xf32>, tensor<512xf32>, tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>)
func.func @gemm_two_level_epilogue(%a: tensor<128x256xf8E5M2>, %al: tensor<128x8xf8E8M0FNU>, %ag: tensor<1xf32>,
                                   %b: tensor<512x256xf8E4M3FN>, %bl: tensor<512x8xf8E8M0FNU>, %bg: tensor<1xf32>,
                                   %bias: tensor<512xf32>, %acc: tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>) {
  %c, %amax = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag),
                        %b scaling<two_level 32, global = tensor> local(%bl) global(%bg)
                        bias(%bias) accumulate(%acc) beta(0.5)
      : (tensor<128x256xf8E5M2>, tensor<128x8xf8E8M0FNU>, tensor<1xf32>, tensor<512x256xf8E4M3FN>, tensor<512x8xf8E8M0FNU>, tensor<1xf32>, tensor<512xf32>, tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>)
  return %c, %amax : tensor<128x512xf32>, tensor<1xf32>
}

// DeepSeek-style per-group: A 1x128, B 128x128, f16 output.
// CHECK-LABEL: func.func @gemm_per_group
// CHECK: moss.gemm %{{.*}} scaling<per_group 1x128> local(%{{.*}}), %{{.*}} scaling<per_group 128x128> local(%{{.*}}) : (tensor<?x4096xf8E4M3FN>, tensor<?x32xf32>, tensor<4096x4096xf8E4M3FN>, tensor<32x32xf32>) -> tensor<?x4096xf16>
func.func @gemm_per_group(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x32xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bl: tensor<32x32xf32>) -> tensor<?x4096xf16> {
  %c = moss.gemm %a scaling<per_group 1x128> local(%al), %b scaling<per_group 128x128> local(%bl)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x32xf32>, tensor<4096x4096xf8E4M3FN>, tensor<32x32xf32>) -> tensor<?x4096xf16>
  return %c : tensor<?x4096xf16>
}

// Per-tensor x per-row, and MXFP8 on both sides.
// CHECK-LABEL: func.func @gemm_per_tensor_per_row_mxfp8
// CHECK: moss.gemm %{{.*}} scaling<per_tensor> global(%{{.*}}), %{{.*}} scaling<per_row> global(%{{.*}}) : (tensor<1x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<4096xf32>) -> tensor<1x4096xbf16>
// CHECK: moss.gemm %{{.*}} scaling<mxfp8> local(%{{.*}}), %{{.*}} scaling<mxfp8> local(%{{.*}}) : (tensor<?x96xf8E5M2>, tensor<?x3xf8E8M0FNU>, tensor<257x96xf8E5M2>, tensor<257x3xf8E8M0FNU>) -> tensor<?x257xbf16>
func.func @gemm_per_tensor_per_row_mxfp8(%a: tensor<1x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<4096xf32>,
                                         %x: tensor<?x96xf8E5M2>, %xl: tensor<?x3xf8E8M0FNU>, %y: tensor<257x96xf8E5M2>, %yl: tensor<257x3xf8E8M0FNU>) {
  %c0 = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_row> global(%bg)
      : (tensor<1x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<4096xf32>) -> tensor<1x4096xbf16>
  %c1 = moss.gemm %x scaling<mxfp8> local(%xl), %y scaling<mxfp8> local(%yl)
      : (tensor<?x96xf8E5M2>, tensor<?x3xf8E8M0FNU>, tensor<257x96xf8E5M2>, tensor<257x3xf8E8M0FNU>) -> tensor<?x257xbf16>
  return
}

// A GEMM with its tile configuration: parameters with default values
// (cluster 1x1, raster along M, swizzle 1, split_k 1) print elided, and
// source is optional.
// CHECK-LABEL: func.func @gemm_tiling
// CHECK: moss.gemm %{{.*}} scaling<per_tensor> global(%{{.*}}), %{{.*}} scaling<per_tensor> global(%{{.*}}) {tiling = #moss.tiling<tile_m = 128, tile_n = 160, stages = 5, swizzle = 8, source = heuristic>}
// CHECK: moss.gemm %{{.*}} {tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 3, cluster_m = 2, cluster_n = 2, raster = along_n, swizzle = 4, split_k = 2, source = db>}
// CHECK: moss.gemm %{{.*}} {tiling = #moss.tiling<tile_m = 64, tile_n = 8, stages = 1>}
func.func @gemm_tiling(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  %c0 = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 160, stages = 5, cluster_m = 1, swizzle = 8, source = heuristic>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c1 = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<source = db, split_k = 2, swizzle = 4, raster = along_n, cluster_n = 2, cluster_m = 2, stages = 3, tile_n = 64, tile_m = 256>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c2 = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 64, tile_n = 8, stages = 1>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// promoteK: the accuracy knob, kept through a round trip.
// CHECK-LABEL: func.func @gemm_promote
// CHECK: moss.gemm {{.*}} {promoteK = 128 : i64}
// CHECK: moss.gemm {{.*}} {promoteK = 32 : i64}
func.func @gemm_promote(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %al: tensor<?x128xf8E8M0FNU>, %agr: tensor<?xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  %c0 = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {promoteK = 128 : i64}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c1 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {promoteK = 32 : i64}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// mma: what the tensor cores multiply, kept through a round trip (without
// it the op means f16 for an f32 result and FP8 otherwise).
// CHECK-LABEL: func.func @gemm_mma
// CHECK: moss.gemm {{.*}} {mma = #moss.mma<f16>}
// CHECK: moss.gemm {{.*}} {mma = #moss.mma<fp8>}
func.func @gemm_mma(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %agr: tensor<?xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  %c0 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {mma = #moss.mma<f16>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c1 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {mma = #moss.mma<fp8>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xf32>
  return
}

// fold: where the E8M0 block factors go, kept through a round trip.
// CHECK-LABEL: func.func @gemm_fold
// CHECK: moss.gemm {{.*}} {fold = #moss.fold<none>}
// CHECK: moss.gemm {{.*}} {fold = #moss.fold<128>}
// CHECK: moss.gemm {{.*}} {fold = #moss.fold<row>}
func.func @gemm_fold(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %agr: tensor<?xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  %c0 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {fold = #moss.fold<none>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c1 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {fold = #moss.fold<128>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  %c2 = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%agr), %b scaling<per_tensor> global(%bg)
      {fold = #moss.fold<row>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}
