// RUN: moss-opt %s -moss-select-tiling | FileCheck %s --check-prefix=TILING
// RUN: moss-opt %s -moss-select-tiling -moss-convert-gemm-to-emitc | FileCheck %s

// moss.grouped_gemm through the passes: moss-select-tiling plans the grouped
// kernel (128- or 256-row tiles, no split-K, no clusters: no tile straddles
// two experts), and moss-convert-gemm-to-emitc writes the Config with the
// experts (and the masked layout) as its last parameters, as the runtime's
// source writer does (GemmSourceTest).

// TILING-LABEL: func.func @contiguous
// TILING: moss.grouped_gemm {{.*}} offsets(%{{.*}}) {tiling = #moss.tiling<tile_m = 256, tile_n = 192, stages = 4, raster = along_n, swizzle = 8, source = heuristic>}
// CHECK: emitc.file "[[NAME:moss_gemm_[0-9a-f]{16}]]"
// CHECK: verbatim "    /*M=*/-1, /*N=*/1536, /*K=*/4096,"
// CHECK: verbatim "    /*ScaleB=*/moss::gemm_kernel::kPerRow, /*BlockRowsB=*/1, /*BlockB=*/0, /*GlobalRowB=*/true,"
// CHECK: verbatim "    /*RasterAlongN=*/true, /*Swizzle=*/8, /*SplitK=*/1, /*ForcePromoteK=*/0, /*QuickCompile=*/false, /*F16Mma=*/false, /*FoldA=*/false, /*Groups=*/8>;"
// CHECK: func @[[NAME]]
func.func @contiguous(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                      %b: tensor<8x1536x4096xf8E4M3FN>, %bg: tensor<8x1536xf32>, %o: tensor<9xi32>) -> tensor<?x1536xbf16> {
  %d = moss.grouped_gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                         %b scaling<per_row> global(%bg) offsets(%o)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<8x1536x4096xf8E4M3FN>, tensor<8x1536xf32>, tensor<9xi32>) -> tensor<?x1536xbf16>
  return %d : tensor<?x1536xbf16>
}

// The masked layout; the kernel keeps M dynamic whatever the types say.
// TILING-LABEL: func.func @masked
// TILING: counts(%{{.*}}) {tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 4, raster = along_n, swizzle = 4, source = heuristic>}
// CHECK: emitc.file "[[MASKED:moss_gemm_[0-9a-f]{16}]]"
// CHECK: verbatim "    /*M=*/-1, /*N=*/256, /*K=*/512,"
// CHECK: verbatim "    /*RasterAlongN=*/true, /*Swizzle=*/4, /*SplitK=*/1, /*ForcePromoteK=*/0, /*QuickCompile=*/false, /*F16Mma=*/true, /*FoldA=*/false, /*Groups=*/16, /*MaskedGroups=*/true>;"
// CHECK: func @[[MASKED]]
func.func @masked(%a: tensor<1024x512xf8E4M3FN>, %al: tensor<1024x4xf32>,
                  %b: tensor<16x256x512xf8E4M3FN>, %bl: tensor<16x2x4xf32>, %n: tensor<16xi32>) -> tensor<1024x256xf32> {
  %d = moss.grouped_gemm %a scaling<per_group 1x128> local(%al), %b scaling<per_group 128x128> local(%bl) counts(%n)
      : (tensor<1024x512xf8E4M3FN>, tensor<1024x4xf32>, tensor<16x256x512xf8E4M3FN>, tensor<16x2x4xf32>, tensor<16xi32>) -> tensor<1024x256xf32>
  return %d : tensor<1024x256xf32>
}
