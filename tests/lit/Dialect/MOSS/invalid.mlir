// RUN: moss-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{expected a scaling kind (per_tensor, per_row, per_group, mxfp8, two_level or moss), got 'per_block'}}
func.func @bad_kind() attributes {s = #moss.scaling<per_block>} { return }

// -----

// expected-error @+1 {{block length along K must be a power of two of at least 32, got 48}}
func.func @bad_block() attributes {s = #moss.scaling<two_level 48>} { return }

// -----

// expected-error @+1 {{mxfp8 blocks are 32 elements long (OCP MX v1.0), got 64}}
func.func @bad_mxfp8_block() attributes {s = #moss.scaling<mxfp8 64>} { return }

// -----

// expected-error @+1 {{per_group blocks are 1x128 or 128x128, got 64x128}}
func.func @bad_group_shape() attributes {s = #moss.scaling<per_group 64x128>} { return }

// -----

// expected-error @+1 {{expected global = tensor or row, got 'column'}}
func.func @bad_global() attributes {s = #moss.scaling<two_level 32, global = column>} { return }

// -----

func.func @quantize_k_not_multiple(%x: tensor<4x100xf32>) {
  // expected-error @+1 {{K=100 of the codes is not a multiple of the scaling block 32 of #moss.scaling<two_level 32, global = tensor>}}
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor> : tensor<4x100xf32> -> tensor<4x100xf8E4M3FN> local tensor<4x3xf8E8M0FNU> global tensor<1xf32>
  return
}

// -----

func.func @quantize_transposed_blocks_run_along_rows(%x: tensor<48x64xf32>) {
  // expected-error @+1 {{K=48 of the codes is not a multiple of the scaling block 32}}
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor> transpose : tensor<48x64xf32> -> tensor<64x48xf8E4M3FN> local tensor<64x2xf8E8M0FNU> global tensor<1xf32>
  return
}

// -----

func.func @quantize_wrong_local_shape(%x: tensor<8x256xf32>) {
  // expected-error @+1 {{expected local scales of the codes of type 'tensor<8x8xf8E8M0FNU>' for #moss.scaling<two_level 32, global = tensor>, got 'tensor<8x4xf8E8M0FNU>'}}
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor> : tensor<8x256xf32> -> tensor<8x256xf8E4M3FN> local tensor<8x4xf8E8M0FNU> global tensor<1xf32>
  return
}

// -----

func.func @quantize_wrong_local_type(%x: tensor<8x256xf32>) {
  // expected-error @+1 {{expected local scales of the codes of type 'tensor<8x2xf32>' for #moss.scaling<per_group 1x128>, got 'tensor<8x2xf8E8M0FNU>'}}
  %q, %l = moss.quantize %x scaling<per_group 1x128> : tensor<8x256xf32> -> tensor<8x256xf8E4M3FN> local tensor<8x2xf8E8M0FNU>
  return
}

// -----

func.func @quantize_missing_global(%x: tensor<8x256xf32>) {
  // expected-error @+1 {{#moss.scaling<two_level 32, global = row> needs global scales of the codes of type 'tensor<8xf32>'}}
  %q, %l = moss.quantize %x scaling<two_level 32, global = row> : tensor<8x256xf32> -> tensor<8x256xf8E4M3FN> local tensor<8x8xf8E8M0FNU>
  return
}

// -----

func.func @quantize_extra_local(%x: tensor<8x256xf32>) {
  // expected-error @+1 {{#moss.scaling<per_tensor> has no local scales of the codes, but one of type 'tensor<8x8xf32>' was given}}
  %q, %l, %g = moss.quantize %x scaling<per_tensor> : tensor<8x256xf32> -> tensor<8x256xf8E4M3FN> local tensor<8x8xf32> global tensor<1xf32>
  return
}

// -----

func.func @quantize_wrong_per_row_global(%x: tensor<8x256xf32>) {
  // expected-error @+1 {{expected global scales of the codes of type 'tensor<8xf32>' for #moss.scaling<per_row>, got 'tensor<1xf32>'}}
  %q, %g = moss.quantize %x scaling<per_row> : tensor<8x256xf32> -> tensor<8x256xf8E4M3FN> global tensor<1xf32>
  return
}

// -----

func.func @quantize_codes_not_transposed(%x: tensor<64x128xf32>) {
  // expected-error @+1 {{expected codes of type 'tensor<128x64xf8E4M3FN>' (transposed input), got 'tensor<64x128xf8E4M3FN>'}}
  %q, %g = moss.quantize %x scaling<per_tensor> transpose : tensor<64x128xf32> -> tensor<64x128xf8E4M3FN> global tensor<1xf32>
  return
}

// -----

func.func @quantize_bad_code_type(%x: tensor<64x128xf32>) {
  // expected-error @+1 {{codes must be f8E4M3FN or f8E5M2, got 'f8E4M3FNUZ'}}
  %q, %g = moss.quantize %x scaling<per_tensor> : tensor<64x128xf32> -> tensor<64x128xf8E4M3FNUZ> global tensor<1xf32>
  return
}

// -----

func.func @quantize_bad_input(%x: tensor<64x128xi8>) {
  // expected-error @+1 {{input element type must be f32, bf16 or f16, got 'i8'}}
  %q, %g = moss.quantize %x scaling<per_tensor> : tensor<64x128xi8> -> tensor<64x128xf8E4M3FN> global tensor<1xf32>
  return
}

// -----

func.func @gemm_k_not_multiple_of_mma(%a: tensor<16x80xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x80xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{K=80 is not a multiple of 32, the K step of the FP8 MMA}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x80xf8E4M3FN>, tensor<1xf32>, tensor<32x80xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_k_not_multiple_of_block(%a: tensor<16x96xf8E4M3FN>, %al: tensor<16x1xf32>, %b: tensor<32x96xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{K=96 of operand A is not a multiple of the scaling block 128 of #moss.scaling<per_group 1x128>}}
  %c = moss.gemm %a scaling<per_group 1x128> local(%al), %b scaling<per_tensor> global(%bg)
      : (tensor<16x96xf8E4M3FN>, tensor<16x1xf32>, tensor<32x96xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_k_mismatch(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x128xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{K of A (64) and of B (128) differ}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x128xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_not_fp8(%a: tensor<16x64xbf16>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{operand A has element type 'bf16'; Hopper FP8 MMA takes f8E4M3FN or f8E5M2}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xbf16>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_fnuz_not_supported(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E5M2FNUZ>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{operand B has element type 'f8E5M2FNUZ'; Hopper FP8 MMA takes f8E4M3FN or f8E5M2}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E5M2FNUZ>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_wrong_scale_shape(%a: tensor<16x64xf8E4M3FN>, %al: tensor<16x2xf8E8M0FNU>, %ag: tensor<16xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{expected global scales of operand A of type 'tensor<1xf32>' for #moss.scaling<two_level 32, global = tensor>, got 'tensor<16xf32>'}}
  %c = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<16x2xf8E8M0FNU>, tensor<16xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_wrong_group_scales(%a: tensor<16x256xf8E4M3FN>, %al: tensor<16x2xf32>, %b: tensor<300x256xf8E4M3FN>, %bl: tensor<2x2xf32>) {
  // expected-error @+1 {{expected local scales of operand B of type 'tensor<3x2xf32>' for #moss.scaling<per_group 128x128>, got 'tensor<2x2xf32>'}}
  %c = moss.gemm %a scaling<per_group 1x128> local(%al), %b scaling<per_group 128x128> local(%bl)
      : (tensor<16x256xf8E4M3FN>, tensor<16x2xf32>, tensor<300x256xf8E4M3FN>, tensor<2x2xf32>) -> tensor<16x300xbf16>
  return
}

// -----

func.func @gemm_bad_output(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{result element type must be bf16, f16 or f32, got 'f8E4M3FN'}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xf8E4M3FN>
  return
}

// -----

func.func @gemm_bad_result_shape(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{expected a result of type 'tensor<16x32xbf16>', got 'tensor<32x16xbf16>'}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> tensor<32x16xbf16>
  return
}

// -----

func.func @gemm_bad_bias(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>, %bias: tensor<16xf32>) {
  // expected-error @+1 {{expected a bias of type tensor<32xf32> (or bf16, f16), got 'tensor<16xf32>'}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) bias(%bias)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>, tensor<16xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_bad_accumulate(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>, %acc: tensor<16x32xf16>) {
  // expected-error @+1 {{expected an accumulate operand of type 'tensor<16x32xbf16>' or with f32 elements, got 'tensor<16x32xf16>'}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) accumulate(%acc)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>, tensor<16x32xf16>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_beta_without_c(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{beta needs an accumulate(...) operand}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) beta(2.0)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> tensor<16x32xbf16>
  return
}

// -----

func.func @gemm_bad_amax(%a: tensor<16x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<32x64xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{expected the amax result to be 'tensor<1xf32>', got 'tensor<16xf32>'}}
  %c, %m = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<16x64xf8E4M3FN>, tensor<1xf32>, tensor<32x64xf8E4M3FN>, tensor<1xf32>) -> (tensor<16x32xbf16>, tensor<16xf32>)
  return
}

// -----

// expected-error @+1 {{tile_m must be 64, 128 or 256 (whole 64-row wgmma tiles for one or two consumer warpgroups), got 96}}
func.func @bad_tile_m() attributes {t = #moss.tiling<tile_m = 96, tile_n = 128, stages = 4>} { return }

// -----

// expected-error @+1 {{tile_n must be a multiple of 8 from 8 to 256 (the wgmma N extent), got 300}}
func.func @bad_tile_n() attributes {t = #moss.tiling<tile_m = 128, tile_n = 300, stages = 4>} { return }

// -----

// expected-error @+1 {{stages must be from 1 to 64, got 0}}
func.func @bad_stages() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 0>} { return }

// -----

// expected-error @+1 {{cluster_m and cluster_n must be powers of two with at most 8 blocks per cluster (the portable cluster size), got 4x4}}
func.func @bad_cluster() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, cluster_m = 4, cluster_n = 4>} { return }

// -----

// expected-error @+1 {{swizzle must be 1, 2, 4 or 8, got 3}}
func.func @bad_swizzle() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, swizzle = 3>} { return }

// -----

// expected-error @+1 {{split_k must be from 1 to 64, got 0}}
func.func @bad_split_k() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, split_k = 0>} { return }

// -----

// expected-error @+2 {{expected one of [heuristic, db] for where a GEMM's tile configuration came from, got: guess}}
// expected-error @+1 {{failed to parse MOSS_TilingAttr parameter 'source'}}
func.func @bad_source() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, source = guess>} { return }

// -----

// expected-error @+1 {{struct is missing required parameter: stages}}
func.func @missing_stages() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128>} { return }

// -----

func.func @bad_promote(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{'moss.gemm' op promoteK=48 is not a promotion interval; expected 32, 64 or 128}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) {promoteK = 48 : i64}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// -----

func.func @promote_k_tail(%a: tensor<?x96xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x96xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{'moss.gemm' op K=96 is not a multiple of promoteK=64}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) {promoteK = 64 : i64}
      : (tensor<?x96xf8E4M3FN>, tensor<1xf32>, tensor<64x96xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @promote_coarser(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{'moss.gemm' op promoteK=128 is coarser than operand A's scaling block 32; the kernel already promotes every 32}}
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>, promoteK = 128 : i64}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// -----

func.func @fold_without_block_factors(%a: tensor<?x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{'moss.gemm' op fold #moss.fold<row> moves E8M0 block factors, but neither operand has them (two_level or mxfp8)}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<row>}
      : (tensor<?x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// -----

func.func @fold_128_needs_whole_groups(%a: tensor<?x4064xf8E4M3FN>, %al: tensor<?x127xf8E8M0FNU>, %ag: tensor<1xf32>, %b: tensor<4096x4064xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{'moss.gemm' op K=4064 is not a multiple of 128, the 128 fold's group}}
  %c = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<128>}
      : (tensor<?x4064xf8E4M3FN>, tensor<?x127xf8E8M0FNU>, tensor<1xf32>, tensor<4096x4064xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// -----

func.func @fold_bad_group(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) {
  // expected-error @+1 {{expected a fold of none, 128 or row, got 64}}
  %c = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag), %b scaling<per_tensor> global(%bg) {fold = #moss.fold<64>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return
}

// -----

// Cluster sizes are bounded one by one, so that their product cannot wrap.
// expected-error @+1 {{cluster_m and cluster_n must be powers of two with at most 8 blocks per cluster}}
func.func private @tiling_huge_clusters() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, cluster_m = 4294967296, cluster_n = 4294967296>}

// -----

// expected-error @+1 {{split_k must be from 1 to 64, got 144115188075855872}}
func.func private @tiling_huge_split() attributes {t = #moss.tiling<tile_m = 128, tile_n = 128, stages = 4, split_k = 144115188075855872>}
