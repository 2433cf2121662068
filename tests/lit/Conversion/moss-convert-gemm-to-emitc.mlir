// RUN: moss-opt %s -split-input-file -moss-convert-gemm-to-emitc -verify-diagnostics | FileCheck %s
// RUN: moss-opt %s -split-input-file -moss-convert-gemm-to-emitc="quick-compile=true" -verify-diagnostics | FileCheck %s --check-prefix=QUICK
// RUN: moss-opt %s -split-input-file -moss-convert-gemm-to-emitc="fold-a-in-kernel=true" -verify-diagnostics | FileCheck %s --check-prefix=KERNELFOLD

// quick-compile sets the Config's QuickCompile (after ForcePromoteK, 0 here),
// which changes the configuration text and so the kernel's name.
// QUICK: emitc.file "[[QNAME:moss_gemm_[0-9a-f]{16}]]"
// QUICK: verbatim "    /*RasterAlongN=*/false, /*Swizzle=*/8, /*SplitK=*/1, /*ForcePromoteK=*/0, /*QuickCompile=*/true>;"
// QUICK: func @[[QNAME]]

// The MOSS forward GEMM (M dynamic) becomes one emitc.file: the template
// header, the Config alias line by line, and the extern "C" kernel.
// CHECK-LABEL: module
// CHECK-NOT: func.func
// CHECK: emitc.file "[[NAME:moss_gemm_[0-9a-f]{16}]]" attributes {moss.tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, swizzle = 8, source = heuristic>} {
// CHECK-NEXT: include "moss/gemm/kernel.cuh"
// CHECK-NEXT: verbatim ""
// CHECK-NEXT: verbatim "using MossGemmConfig = moss::gemm_kernel::Config<"
// CHECK-NEXT: verbatim "    /*M=*/-1, /*N=*/11008, /*K=*/4096,"
// CHECK-NEXT: verbatim "    /*ElemA=*/moss::gemm_kernel::kE4M3, /*ElemB=*/moss::gemm_kernel::kE4M3,"
// CHECK-NEXT: verbatim "    /*ScaleA=*/moss::gemm_kernel::kTwoLevel, /*BlockRowsA=*/1, /*BlockA=*/32, /*GlobalRowA=*/true,"
// CHECK-NEXT: verbatim "    /*ScaleB=*/moss::gemm_kernel::kPerTensor, /*BlockRowsB=*/1, /*BlockB=*/0, /*GlobalRowB=*/false,"
// CHECK-NEXT: verbatim "    /*Out=*/moss::gemm_kernel::kBF16, /*Bias=*/moss::gemm_kernel::kNone, /*Accum=*/moss::gemm_kernel::kNone,"
// CHECK-NEXT: verbatim "    /*Amax=*/false,"
// CHECK-NEXT: verbatim "    /*TileM=*/128, /*TileN=*/128, /*Stages=*/4, /*ClusterM=*/1, /*ClusterN=*/1,"
// CHECK-NEXT: verbatim "    /*RasterAlongN=*/false, /*Swizzle=*/8, /*SplitK=*/1>;"
// CHECK-NEXT: verbatim ""
// CHECK-NEXT: func @[[NAME]](%{{.*}}: !emitc.opaque<"const __grid_constant__ CUtensorMap">, %{{.*}}: !emitc.opaque<"const __grid_constant__ CUtensorMap">, %{{.*}}: !emitc.opaque<"const __grid_constant__ CUtensorMap">, %{{.*}}: !emitc.opaque<"const moss::gemm_kernel::Args">) attributes {specifiers = ["extern \22C\22", "__global__", "__launch_bounds__(MossGemmConfig::kThreads, 1)"]} {
// CHECK-NEXT: call_opaque "moss::gemm_kernel::run"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {template_args = [#emitc.opaque<"MossGemmConfig">]}
// CHECK-NEXT: return
func.func @moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                        %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      {fold = #moss.fold<none>, tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, swizzle = 8, source = heuristic>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// -----

// Every other Config value: static M, E5M2 x E4M3, per-group NxN, MXFP8,
// per-row, bias, accumulate, f32 output (with the FP8 MMA asked for, so
// no F16Mma), amax, and the other tile fields.
// Two equal GEMMs share one translation unit; a different one gets its own.
// CHECK-LABEL: module
// CHECK: emitc.file "[[FIRST:moss_gemm_[0-9a-f]{16}]]"
// CHECK: verbatim "    /*M=*/128, /*N=*/512, /*K=*/256,"
// CHECK-NEXT: verbatim "    /*ElemA=*/moss::gemm_kernel::kE5M2, /*ElemB=*/moss::gemm_kernel::kE4M3,"
// CHECK-NEXT: verbatim "    /*ScaleA=*/moss::gemm_kernel::kMXFP8, /*BlockRowsA=*/1, /*BlockA=*/32, /*GlobalRowA=*/false,"
// CHECK-NEXT: verbatim "    /*ScaleB=*/moss::gemm_kernel::kPerGroup, /*BlockRowsB=*/128, /*BlockB=*/128, /*GlobalRowB=*/false,"
// CHECK-NEXT: verbatim "    /*Out=*/moss::gemm_kernel::kF32, /*Bias=*/moss::gemm_kernel::kF16, /*Accum=*/moss::gemm_kernel::kF32,"
// CHECK-NEXT: verbatim "    /*Amax=*/true,"
// CHECK-NEXT: verbatim "    /*TileM=*/256, /*TileN=*/64, /*Stages=*/3, /*ClusterM=*/2, /*ClusterN=*/1,"
// CHECK-NEXT: verbatim "    /*RasterAlongN=*/true, /*Swizzle=*/4, /*SplitK=*/2>;"
// CHECK: func @[[FIRST]](
// CHECK: emitc.file "[[SECOND:moss_gemm_[0-9a-f]{16}]]"
// CHECK: verbatim "    /*ScaleA=*/moss::gemm_kernel::kPerTensor, /*BlockRowsA=*/1, /*BlockA=*/0, /*GlobalRowA=*/false,"
// CHECK-NEXT: verbatim "    /*ScaleB=*/moss::gemm_kernel::kPerRow, /*BlockRowsB=*/1, /*BlockB=*/0, /*GlobalRowB=*/true,"
// CHECK: func @[[SECOND]](
// CHECK-NOT: emitc.file
// CHECK-NOT: func.func
func.func @all_fields(%a: tensor<128x256xf8E5M2>, %al: tensor<128x8xf8E8M0FNU>, %b: tensor<512x256xf8E4M3FN>, %bl: tensor<4x2xf32>,
                      %bias: tensor<512xf16>, %acc: tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>) {
  %c, %amax = moss.gemm %a scaling<mxfp8> local(%al), %b scaling<per_group 128x128> local(%bl)
                        bias(%bias) accumulate(%acc) beta(0.5)
      {fold = #moss.fold<none>, mma = #moss.mma<fp8>, tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 3, cluster_m = 2, raster = along_n, swizzle = 4, split_k = 2>}
      : (tensor<128x256xf8E5M2>, tensor<128x8xf8E8M0FNU>, tensor<512x256xf8E4M3FN>, tensor<4x2xf32>, tensor<512xf16>, tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>)
  return %c, %amax : tensor<128x512xf32>, tensor<1xf32>
}
func.func @all_fields_again(%a: tensor<128x256xf8E5M2>, %al: tensor<128x8xf8E8M0FNU>, %b: tensor<512x256xf8E4M3FN>, %bl: tensor<4x2xf32>,
                            %bias: tensor<512xf16>, %acc: tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>) {
  %c, %amax = moss.gemm %a scaling<mxfp8> local(%al), %b scaling<per_group 128x128> local(%bl)
                        bias(%bias) accumulate(%acc) beta(0.5)
      {fold = #moss.fold<none>, mma = #moss.mma<fp8>, tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 3, cluster_m = 2, raster = along_n, swizzle = 4, split_k = 2>}
      : (tensor<128x256xf8E5M2>, tensor<128x8xf8E8M0FNU>, tensor<512x256xf8E4M3FN>, tensor<4x2xf32>, tensor<512xf16>, tensor<128x512xf32>) -> (tensor<128x512xf32>, tensor<1xf32>)
  return %c, %amax : tensor<128x512xf32>, tensor<1xf32>
}
func.func @per_row(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<4096xf32>) -> tensor<?x4096xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_row> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<4096xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

// -----

// An f32 result multiplies in f16 unless the op asks for FP8; F16Mma comes
// after ForcePromoteK and QuickCompile, written out.
// CHECK-LABEL: module
// CHECK: verbatim "    /*RasterAlongN=*/false, /*Swizzle=*/8, /*SplitK=*/1, /*ForcePromoteK=*/0, /*QuickCompile=*/false, /*F16Mma=*/true>;"
func.func @f16_mma(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x4096xf32> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 2, swizzle = 8>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xf32>
  return %c : tensor<?x4096xf32>
}

// -----

func.func @no_tiling(%a: tensor<?x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op has no tiling attribute; expected a #moss.tiling (run moss-select-tiling first)}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

func.func @dynamic_k(%a: tensor<?x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x?xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a dynamic K (operand A is 'tensor<?x?xf8E4M3FN>', operand B 'tensor<64x?xf8E4M3FN>'); moss-convert-gemm-to-emitc needs a static K: give A or B a static number of columns}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 4>}
      : (tensor<?x?xf8E4M3FN>, tensor<1xf32>, tensor<64x?xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

func.func @not_alone(%a: tensor<?x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op shares its function with 'moss.gemm'; expected a function holding only the moss.gemm and a return (each becomes one kernel)}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 4>}
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  // expected-note @+1 {{other op here}}
  %d = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 4>}
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

// A GEMM that folds lowers to the kernel of its folded operands: A per-row
// for the row fold. With fold-a-in-kernel, to the kernel that folds A
// itself: A stays two-level, and FoldA is set.
// CHECK-LABEL: module
// CHECK: verbatim "    /*ScaleA=*/moss::gemm_kernel::kPerRow, /*BlockRowsA=*/1, /*BlockA=*/0, /*GlobalRowA=*/true,"
// KERNELFOLD: verbatim "    /*ScaleA=*/moss::gemm_kernel::kTwoLevel, /*BlockRowsA=*/1, /*BlockA=*/32, /*GlobalRowA=*/false,"
// KERNELFOLD: /*F16Mma=*/false, /*FoldA=*/true>;
func.func @moss_forward_row_fold(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<1xf32>,
                                 %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<row>, tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, swizzle = 8>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<1xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
