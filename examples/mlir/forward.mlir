// A MOSS forward GEMM (A two-level with per-row global scales, B per-tensor,
// bf16 out) for an MLIR 22 tool that loads the moss plugin:
//
//   mlir-opt-22 --load-dialect-plugin=PREFIX/lib/libMOSSPlugin.so \
//     --load-pass-plugin=PREFIX/lib/libMOSSPlugin.so forward.mlir \
//     --pass-pipeline="builtin.module(moss-gemm-pipeline)"
//
// prints the kernel as EmitC (moss-translate --moss-to-cuda turns it into
// the CUDA C++ that the runtime compiles).
func.func @forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>,
                   %ag: tensor<?xf32>, %b: tensor<11008x4096xf8E4M3FN>,
                   %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>,
         tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
