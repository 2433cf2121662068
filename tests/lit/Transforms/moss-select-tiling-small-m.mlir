// RUN: moss-opt %s -split-input-file -moss-select-tiling="assumed-m=16 allow-split-k=1" | FileCheck %s
// RUN: moss-opt %s -split-input-file -moss-select-tiling="assumed-m=16" | FileCheck %s --check-prefix=NOSPLIT

// A dynamic M planned for a decode batch (16 rows) with split-K allowed, as
// the runtime plans its small M buckets: a promoted scheme gets 64-row tiles
// (both consumer warpgroups on the rows, over alternate K stages) and two K
// slices, 64 N tiles x 2 = 128 units for the 132 SMs.
// CHECK-LABEL: func.func @moss_ffn_down
// CHECK: tiling = #moss.tiling<tile_m = 64, tile_n = 64, stages = 8, split_k = 2, source = heuristic>
// Without split-K: the 64-row tiles alone.
// NOSPLIT-LABEL: func.func @moss_ffn_down
// NOSPLIT: tiling = #moss.tiling<tile_m = 64, tile_n = 32, stages = 8, source = heuristic>
func.func @moss_ffn_down(%a: tensor<?x11008xf8E4M3FN>, %al: tensor<?x344xf8E8M0FNU>, %ag: tensor<?xf32>,
                         %b: tensor<4096x11008xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x11008xf8E4M3FN>, tensor<?x344xf8E8M0FNU>, tensor<?xf32>, tensor<4096x11008xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

// -----

// Per-tensor at the same batch over K = 4096: no split (measured slower
// there) and 128-row tiles (the 64-row ones pay only for promoted schemes).
// CHECK-LABEL: func.func @tensor_attn_out
// CHECK: tiling = #moss.tiling<tile_m = 128, tile_n = 32, stages = 8, source = heuristic>
func.func @tensor_attn_out(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>,
                           %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}
