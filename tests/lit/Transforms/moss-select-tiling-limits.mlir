// RUN: moss-opt %s -moss-select-tiling="sm-count=66 shared-memory-bytes=100000" | FileCheck %s
// RUN: moss-opt %s -moss-select-tiling="shared-memory-bytes=60000" -verify-diagnostics -o /dev/null

// Half the SMs and 100000 bytes of shared memory: smaller tiles, 3 stages.
// 128x128 does not fit: with bf16 out its epilogue takes the templates'
// TMA-store staging buffers (two sets of 16 KiB where an sm_90 block has
// room) on top of its stages.
// CHECK-LABEL: func.func @limits
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 96, stages = 3, cluster_m = 2, swizzle = 8, source = heuristic>
func.func @limits(%a: tensor<8192x8192xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<8192x8192xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<8192x8192xbf16> {
  // expected-error @+1 {{'moss.gemm' op cannot be tiled for 8192x8192x8192 e4m3 per-tensor x e4m3 per-tensor -> bf16: no tile configuration fits in 60000 bytes of shared memory per block; the smallest, 128x32 with 3 stages, needs 62512 bytes}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<8192x8192xf8E4M3FN>, tensor<1xf32>, tensor<8192x8192xf8E4M3FN>, tensor<1xf32>) -> tensor<8192x8192xbf16>
  return %c : tensor<8192x8192xbf16>
}
