// RUN: moss-opt %s -split-input-file -moss-select-tiling -verify-diagnostics

func.func @b_not_stacked(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x256xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected A [M, K] and the experts' B [G, N, K], got 'tensor<?x256xf8E4M3FN>' and 'tensor<64x256xf8E4M3FN>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<64x256xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @dynamic_experts(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<?x64x256xf8E4M3FN>, %bg: tensor<?xf32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{expected a static number of experts G >= 1}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<?x64x256xf8E4M3FN>, tensor<?xf32>, tensor<?xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @no_rows(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>) {
  // expected-error @+1 {{expected either offsets(...) (G + 1 row offsets, the contiguous layout) or counts(...) (G row counts, the masked layout)}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @both_rows(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %o: tensor<5xi32>, %n: tensor<4xi32>) {
  // expected-error @+1 {{expected either offsets(...)}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o) counts(%n)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<5xi32>, tensor<4xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @offsets_of_the_wrong_count(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{expected offsets of type 'tensor<5xi32>', got 'tensor<4xi32>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<4xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @counts_of_i64(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %n: tensor<4xi64>) {
  // expected-error @+1 {{expected counts of type 'tensor<4xi32>', got 'tensor<4xi64>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) counts(%n)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<4xi64>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @masked_rows_not_a_multiple(%a: tensor<10x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %n: tensor<4xi32>) {
  // expected-error @+1 {{M=10 is not a multiple of the 4 experts of the masked layout (M / G rows each)}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) counts(%n)
      : (tensor<10x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<4xi32>) -> tensor<10x64xbf16>
  return
}

// -----

func.func @one_global_for_all_experts(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<1xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected global scales of operand B of type 'tensor<4xf32>' for #moss.scaling<per_tensor>, got 'tensor<1xf32>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<1xf32>, tensor<5xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @unstacked_block_scales(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x256x256xf8E4M3FN>, %bl: tensor<2x2xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected local scales of operand B of type 'tensor<4x2x2xf32>' for #moss.scaling<per_group 128x128>, got 'tensor<2x2xf32>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_group 128x128> local(%bl) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x256x256xf8E4M3FN>, tensor<2x2xf32>, tensor<5xi32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @a_blocks_span_rows(%a: tensor<?x256xf8E4M3FN>, %al: tensor<?x2xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{A's blocks of #moss.scaling<per_group 128x128> span several rows, which may belong to different experts; expected blocks of one row}}
  %d = moss.grouped_gemm %a scaling<per_group 128x128> local(%al), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<5xi32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @bias_not_per_expert(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4x64x256xf8E4M3FN>, %bg: tensor<4xf32>, %o: tensor<5xi32>, %bias: tensor<64xf32>) {
  // expected-error @+1 {{expected a bias of type tensor<4x64xf32> (or bf16, f16), got 'tensor<64xf32>'}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o) bias(%bias)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<4x64x256xf8E4M3FN>, tensor<4xf32>, tensor<5xi32>, tensor<64xf32>) -> tensor<?x64xbf16>
  return
}

// -----

// The verifier takes any number of experts; the kernel at most 4096.
func.func @too_many_experts(%a: tensor<?x256xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<5000x64x256xf8E4M3FN>, %bg: tensor<5000xf32>, %o: tensor<5001xi32>) {
  // expected-error @+1 {{groups=5000 is not a valid expert count; expected 0 (a plain GEMM) to 4096}}
  %d = moss.grouped_gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) offsets(%o)
      : (tensor<?x256xf8E4M3FN>, tensor<1xf32>, tensor<5000x64x256xf8E4M3FN>, tensor<5000xf32>, tensor<5001xi32>) -> tensor<?x64xbf16>
  return
}
