// RUN: moss-opt %s -moss-select-tiling | FileCheck %s --check-prefix=TILING
// RUN: moss-opt %s -moss-select-tiling -moss-convert-gemm-to-emitc | FileCheck %s

// moss.k_grouped_gemm through the passes: moss-select-tiling plans the
// k-grouped kernel (the heuristic's tiling of the experts' stacked outputs,
// no split-K, no clusters), and moss-convert-gemm-to-emitc writes the Config
// with a dynamic K and GroupedK as its last parameter, as the runtime's
// source writer does (GemmSourceTest).

// TILING-LABEL: func.func @weight_gradient
// TILING: moss.k_grouped_gemm {{.*}} offsets(%{{.*}}) {tiling = #moss.tiling<tile_m = 128, tile_n = 256, stages = 4, raster = along_n, swizzle = 8, source = heuristic>}
// CHECK: emitc.file "[[NAME:moss_gemm_[0-9a-f]{16}]]"
// CHECK: verbatim "    /*M=*/4096, /*N=*/7168, /*K=*/-1,"
// CHECK: verbatim "    /*RasterAlongN=*/true, /*Swizzle=*/8, /*SplitK=*/1, /*ForcePromoteK=*/0, /*QuickCompile=*/false, /*F16Mma=*/false, /*FoldA=*/false, /*Groups=*/8, /*MaskedGroups=*/false, /*GroupedK=*/true>;"
// CHECK: func @[[NAME]]
func.func @weight_gradient(%dy: tensor<4096x?xf8E4M3FN>, %dyg: tensor<4096xf32>,
                           %x: tensor<7168x?xf8E4M3FN>, %xg: tensor<7168xf32>, %o: tensor<9xi32>) -> tensor<8x4096x7168xbf16> {
  %dw = moss.k_grouped_gemm %dy scaling<per_row> global(%dyg),
                            %x scaling<per_row> global(%xg) offsets(%o)
      : (tensor<4096x?xf8E4M3FN>, tensor<4096xf32>, tensor<7168x?xf8E4M3FN>, tensor<7168xf32>, tensor<9xi32>) -> tensor<8x4096x7168xbf16>
  return %dw : tensor<8x4096x7168xbf16>
}
