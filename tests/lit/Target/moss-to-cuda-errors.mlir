// RUN: moss-translate %s --moss-to-cuda -split-input-file -verify-diagnostics

// The passes have not run: there is no translation unit yet.
func.func @not_lowered(%a: tensor<?x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op is still in the module; expected only EmitC translation units (run moss-gemm-pipeline, or the moss passes up to moss-convert-gemm-to-emitc and moss-convert-quantize-to-emitc, first)}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

// expected-error @+1 {{holds no kernel to emit; expected emitc.file translation units from moss-convert-gemm-to-emitc or moss-convert-quantize-to-emitc}}
module {
}

// -----

// Not lowered, a moss.quantize is no kernel either.
func.func @quantize(%x: tensor<64x256xbf16>) -> (tensor<64x256xf8E5M2>, tensor<64xf32>) {
  // expected-error @+1 {{'moss.quantize' op is still in the module; expected only EmitC translation units}}
  %q, %g = moss.quantize %x scaling<per_row> : tensor<64x256xbf16> -> tensor<64x256xf8E5M2> global tensor<64xf32>
  return %q, %g : tensor<64x256xf8E5M2>, tensor<64xf32>
}
