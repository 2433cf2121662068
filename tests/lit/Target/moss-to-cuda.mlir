// RUN: moss-opt %s --moss-gemm-pipeline | moss-translate --moss-to-cuda | FileCheck %s
// RUN: moss-opt %s --moss-gemm-pipeline="m=16384" | moss-translate --moss-to-cuda | FileCheck %s --check-prefix=M16384

// The MOSS forward GEMM through the whole pipeline to the CUDA C++ unit of
// docs/GEMM-KERNEL-ABI.md, printed by MLIR's C++ emitter.

// CHECK: #include "moss/gemm/kernel.cuh"
// CHECK-EMPTY:
// CHECK-NEXT: using MossGemmConfig = moss::gemm_kernel::Config<
// CHECK-NEXT:     /*M=*/-1, /*N=*/11008, /*K=*/4096,
// CHECK-NEXT:     /*ElemA=*/moss::gemm_kernel::kE4M3, /*ElemB=*/moss::gemm_kernel::kE4M3,
// CHECK-NEXT:     /*ScaleA=*/moss::gemm_kernel::kTwoLevel, /*BlockRowsA=*/1, /*BlockA=*/32, /*GlobalRowA=*/true,
// CHECK-NEXT:     /*ScaleB=*/moss::gemm_kernel::kPerTensor, /*BlockRowsB=*/1, /*BlockB=*/0, /*GlobalRowB=*/false,
// CHECK-NEXT:     /*Out=*/moss::gemm_kernel::kBF16, /*Bias=*/moss::gemm_kernel::kNone, /*Accum=*/moss::gemm_kernel::kNone,
// CHECK-NEXT:     /*Amax=*/false,
// CHECK-NEXT:     /*TileM=*/128, /*TileN=*/128, /*Stages=*/6, /*ClusterM=*/2, /*ClusterN=*/1,
// CHECK-NEXT:     /*RasterAlongN=*/false, /*Swizzle=*/8, /*SplitK=*/1>;
// CHECK-EMPTY:
// CHECK-NEXT: extern "C" __global__ __launch_bounds__(MossGemmConfig::kThreads, 1) void [[NAME:moss_gemm_[0-9a-f]{16}]](const __grid_constant__ CUtensorMap [[A:v[0-9]+]], const __grid_constant__ CUtensorMap [[B:v[0-9]+]], const __grid_constant__ CUtensorMap [[D:v[0-9]+]], const moss::gemm_kernel::Args [[ARGS:v[0-9]+]]) {
// CHECK-NEXT:   moss::gemm_kernel::run<MossGemmConfig>([[A]], [[B]], [[D]], [[ARGS]]);
// CHECK-NEXT:   return;
// CHECK-NEXT: }

// Specialized to M = 16384 (128 M tiles > 86 N tiles: raster along N; the
// M tiles pair up in 2x1 clusters).
// M16384: /*M=*/16384, /*N=*/11008, /*K=*/4096,
// M16384: /*TileM=*/128, /*TileN=*/128, /*Stages=*/6, /*ClusterM=*/2, /*ClusterN=*/1,
// M16384-NEXT: /*RasterAlongN=*/true, /*Swizzle=*/8, /*SplitK=*/1>;
// M16384: extern "C" __global__ __launch_bounds__(MossGemmConfig::kThreads, 1) void moss_gemm_{{[0-9a-f]+}}(

func.func @moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                        %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
