// The dialect and passes loaded into Debian's mlir-opt-22 as a plugin
// (compiler/Plugin). Pass flags are parsed before plugins load, so the
// passes go through --pass-pipeline. The plugin's pipeline emits what
// moss-opt's does.
// RUN: %mlir-opt --load-dialect-plugin=%moss_plugin --load-pass-plugin=%moss_plugin %s --pass-pipeline="builtin.module(moss-select-tiling)" | FileCheck %s --check-prefix=TILED
// RUN: %mlir-opt --load-dialect-plugin=%moss_plugin --load-pass-plugin=%moss_plugin %s --pass-pipeline="builtin.module(moss-gemm-pipeline)" > %t.plugin
// RUN: moss-opt %s --moss-gemm-pipeline > %t.moss
// RUN: diff %t.moss %t.plugin
// RUN: FileCheck %s --check-prefix=EMITC < %t.plugin
// Without the dialect plugin the program does not parse.
// RUN: not %mlir-opt %s 2>&1 | FileCheck %s --check-prefix=UNREGISTERED

// TILED: moss.gemm {{.*}} {tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 2, source = heuristic>}
// EMITC: emitc.file "moss_gemm_{{[0-9a-f]+}}"
// EMITC: include "moss/gemm/kernel.cuh"
// UNREGISTERED: Dialect `moss' not found for custom op 'moss.gemm'
func.func @forward(%a: tensor<256x4096xf8E4M3FN>, %al: tensor<256x128xf8E8M0FNU>,
                   %ag: tensor<256xf32>, %b: tensor<11008x4096xf8E4M3FN>,
                   %bg: tensor<1xf32>) -> tensor<256x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<256x4096xf8E4M3FN>, tensor<256x128xf8E8M0FNU>, tensor<256xf32>,
         tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<256x11008xbf16>
  return %c : tensor<256x11008xbf16>
}
