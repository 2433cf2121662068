// RUN: moss-opt %s -split-input-file -moss-select-tiling -verify-diagnostics | FileCheck %s

// The MOSS forward GEMM, M dynamic (planned as 4096): 128x128 tiles, as many
// stages as fit in 227 KiB, walked along M (32 M tiles < 86 N tiles), whose
// 32 M tiles pair up: 2x1 clusters.
// CHECK-LABEL: func.func @moss_forward
// CHECK: moss.gemm
// CHECK-SAME: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>
func.func @moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                        %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// -----

// 8192^3 per-tensor (no promotion, one accumulator set). Of the tiles that
// store through TMA and are at least 128x128, 128x192 asks the least of one
// SM: 21 waves of 128x192 against 16 of 128x256 and 11 of 256x192; as many
// stages as fit beside a set of staging buffers; M tiles outnumber N tiles:
// raster along N; a static M whose tiles pair up: 2x1 clusters.
// CHECK-LABEL: func.func @per_tensor_8192
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 192, stages = 5, cluster_m = 2, raster = along_n, swizzle = 8, source = heuristic>
func.func @per_tensor_8192(%a: tensor<8192x8192xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<8192x8192xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<8192x8192xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<8192x8192xf8E4M3FN>, tensor<1xf32>, tensor<8192x8192xf8E4M3FN>, tensor<1xf32>) -> tensor<8192x8192xbf16>
  return %c : tensor<8192x8192xbf16>
}

// -----

// One row (decode): 64x64 tiles give 128 tiles, one wave at 97%, and a
// promoted scheme's two consumer warpgroups split K over the 64 rows; the
// swizzle band is 1 with a single M tile.
// CHECK-LABEL: func.func @one_row
// CHECK: tiling = #moss.tiling<tile_m = 64, tile_n = 64, stages = 8, source = heuristic>
func.func @one_row(%a: tensor<1x8192xf8E4M3FN>, %al: tensor<1x256xf8E8M0FNU>, %ag: tensor<1xf32>, %b: tensor<8192x8192xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<1x8192xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<1x8192xf8E4M3FN>, tensor<1x256xf8E8M0FNU>, tensor<1xf32>, tensor<8192x8192xf8E4M3FN>, tensor<1xf32>) -> tensor<1x8192xbf16>
  return %c : tensor<1x8192xbf16>
}

// -----

// Per-group 128x128 weights: tile_n must divide 128.
// CHECK-LABEL: func.func @per_group
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>
func.func @per_group(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x32xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bl: tensor<32x32xf32>) -> tensor<?x4096xf16> {
  %c = moss.gemm %a scaling<per_group 1x128> local(%al), %b scaling<per_group 128x128> local(%bl)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x32xf32>, tensor<4096x4096xf8E4M3FN>, tensor<32x32xf32>) -> tensor<?x4096xf16>
  return %c : tensor<?x4096xf16>
}

// -----

// A tiling given beforehand (the tuning database) is kept.
// CHECK-LABEL: func.func @given
// CHECK: tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 3, raster = along_n, swizzle = 4, source = db>
func.func @given(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 3, raster = along_n, swizzle = 4, source = db>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

// -----

func.func @given_too_big(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a tiling that does not fit the target (132 SMs, 232448 bytes of shared memory): tiling 256x256, stages 4, cluster 1x1, along_m, swizzle 1, split_k 1: needs 256 accumulator registers per consumer thread; at most 192 fit}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 256, tile_n = 256, stages = 4>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

// -----

func.func @dynamic_n(%a: tensor<?x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<?x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x?xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a dynamic N (operand B is 'tensor<?x64xf8E4M3FN>', the result 'tensor<?x?xbf16>'); moss-select-tiling needs a static N: give B a static number of rows}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<?x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x?xbf16>
  return %c : tensor<?x?xbf16>
}

// -----

func.func @block_too_long(%a: tensor<?x512xf8E4M3FN>, %al: tensor<?x2xf8E8M0FNU>, %ag: tensor<1xf32>, %b: tensor<64x512xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op cannot be tiled for ?x64x512 e4m3 two-level(tensor, 256) x e4m3 per-tensor -> bf16: operand A is scaled two-level(tensor, 256); the Hopper GEMM kernel takes scaling blocks of 32, 64 or 128 along K}}
  %c = moss.gemm %a scaling<two_level 256, global = tensor> local(%al) global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x512xf8E4M3FN>, tensor<?x2xf8E8M0FNU>, tensor<1xf32>, tensor<64x512xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

// An f32 result multiplies in f16 by default. The f16 MMA: 128-row tiles
// only, one partial set (so tile_n up to 192), and an even number of stages
// beside its two f16 slots. Of the tiles that leave room for the epilogue's
// TMA stores, 128x128 asks the least of one SM at the planned M of 4096 (21
// waves of 32 x 86 tiles, against 17 waves of 128x160 and 15 of 128x192),
// with 4 stages of 34 KiB beside 64 KiB of slots.
// CHECK-LABEL: func.func @moss_forward_f16_mma
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, cluster_m = 2, swizzle = 8, source = heuristic>
func.func @moss_forward_f16_mma(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                                %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xf32> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xf32>
  return %c : tensor<?x11008xf32>
}

// -----

// The same GEMM asking for the FP8 MMA: the FP8 kernel's six stages.
// CHECK-LABEL: func.func @moss_forward_f32_fp8
// CHECK: {fold = #moss.fold<none>, mma = #moss.mma<fp8>, tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>}
func.func @moss_forward_f32_fp8(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                                %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xf32> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>, mma = #moss.mma<fp8>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xf32>
  return %c : tensor<?x11008xf32>
}

// -----

// Without a fold attribute a bf16 MOSS GEMM folds A's block factors into its
// codes (GemmSpec::getFold): it is tiled as the per-row kernel it lowers to.
// CHECK-LABEL: func.func @moss_forward_folds
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>
func.func @moss_forward_folds(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                              %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
