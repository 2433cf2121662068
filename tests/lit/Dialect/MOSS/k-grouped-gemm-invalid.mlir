// RUN: moss-opt %s -split-input-file -verify-diagnostics

func.func @b_stacked(%a: tensor<64x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x32x256xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected A [M, K] and B [N, K] (K the tokens of all experts)}}
  %d = moss.k_grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<64x?xf8E4M3FN>, tensor<1xf32>, tensor<4x32x256xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<4x64x32xbf16>
  return
}

// -----

func.func @dynamic_m(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x256xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected a static M and N}}
  %d = moss.k_grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<32x256xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<4x?x32xbf16>
  return
}

// -----

func.func @k_not_whole_stages(%a: tensor<64x96xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x96xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{K=96 is not a multiple of 128}}
  %d = moss.k_grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<64x96xf8E4M3FN>, tensor<1xf32>, tensor<32x96xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<4x64x32xbf16>
  return
}

// -----

func.func @dynamic_experts(%a: tensor<64x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x?xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{expected offsets of type tensor<(G+1)xi32> with a static G >= 1}}
  %d = moss.k_grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<64x?xf8E4M3FN>, tensor<1xf32>, tensor<32x?xf8E4M3FN>, tensor<1xf32>, tensor<?xi32>) -> tensor<4x64x32xbf16>
  return
}

// -----

func.func @result_not_per_expert(%a: tensor<64x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x?xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected a result of type 'tensor<4x64x32xbf16>'}}
  %d = moss.k_grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<64x?xf8E4M3FN>, tensor<1xf32>, tensor<32x?xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<64x32xbf16>
  return
}

// -----

func.func @a_scales_per_row(%a: tensor<64x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x?xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{operand A}}
  %d = moss.k_grouped_gemm %a scaling<per_row> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<64x?xf8E4M3FN>, tensor<1xf32>, tensor<32x?xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<4x64x32xbf16>
  return
}
