// RUN: moss-opt %s -split-input-file -moss-convert-quantize-to-emitc -verify-diagnostics | FileCheck %s

// MOSS activations (two-level, a global per row, dynamic rows): the row-wise
// kernel with K compiled in, one pass, one verbatim per line of the
// runtime's source (QuantizeLoweringTest compares the text).
// CHECK-LABEL: module
// CHECK-NOT: func.func
// CHECK: emitc.file "[[NAME:moss_quantize_[0-9a-f]{16}]]" {
// CHECK-NEXT: verbatim "#include \22moss/quantize/rowwise.cuh\22"
// CHECK-NEXT: verbatim ""
// CHECK-NEXT: verbatim "using Config = moss::quantize::RowwiseConfig<1, 4, 0, 32, 4096, 128, 1, 0, 4096>;"
// CHECK: verbatim "[[NAME]](const moss::quantize::Args args) {"
// CHECK-NEXT: verbatim "  moss::quantize::rowwise<Config>(args, moss::quantize::kQuantizePass);"
// CHECK-NOT: _reduce
func.func @activations(%x: tensor<?x4096xbf16>) -> (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>) {
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = row>
      : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<?xf32>
  return %q, %l, %g : tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>
}

// -----

// Transposed with a per-tensor global (E5M2 gradients): the transposed
// kernel and its reduce pass, both named after the file. Two equal ops
// share one translation unit.
// CHECK-LABEL: module
// CHECK: emitc.file "[[T:moss_quantize_[0-9a-f]{16}]]" {
// CHECK-NEXT: verbatim "#include \22moss/quantize/columnwise.cuh\22"
// CHECK: verbatim "using Config = moss::quantize::ColumnwiseConfig<0, 4, 1, 32, 2, 0>;"
// CHECK: verbatim "[[T]]_reduce(const moss::quantize::Args args) {"
// CHECK: verbatim "[[T]](const moss::quantize::Args args) {"
// CHECK-NOT: emitc.file
func.func @gradients_t(%dy: tensor<8192x?xf32>) -> (tensor<?x8192xf8E5M2>, tensor<?x256xf8E8M0FNU>, tensor<1xf32>) {
  %q, %l, %g = moss.quantize %dy scaling<two_level 32, global = tensor> transpose
      : tensor<8192x?xf32> -> tensor<?x8192xf8E5M2> local tensor<?x256xf8E8M0FNU> global tensor<1xf32>
  return %q, %l, %g : tensor<?x8192xf8E5M2>, tensor<?x256xf8E8M0FNU>, tensor<1xf32>
}
func.func @gradients_t_again(%dy: tensor<8192x?xf32>) -> (tensor<?x8192xf8E5M2>, tensor<?x256xf8E8M0FNU>, tensor<1xf32>) {
  %q, %l, %g = moss.quantize %dy scaling<two_level 32, global = tensor> transpose
      : tensor<8192x?xf32> -> tensor<?x8192xf8E5M2> local tensor<?x256xf8E8M0FNU> global tensor<1xf32>
  return %q, %l, %g : tensor<?x8192xf8E5M2>, tensor<?x256xf8E8M0FNU>, tensor<1xf32>
}

// -----

// Weights, per-group 128x128: the square-block kernel.
// CHECK-LABEL: module
// CHECK: emitc.file "moss_quantize_{{[0-9a-f]+}}" {
// CHECK-NEXT: verbatim "#include \22moss/quantize/tile2d.cuh\22"
// CHECK: verbatim "using Config = moss::quantize::Tile2dConfig<0, 0, 128, false>;"
func.func @weights(%w: tensor<11008x4096xf32>) -> (tensor<11008x4096xf8E4M3FN>, tensor<86x32xf32>) {
  %q, %l = moss.quantize %w scaling<per_group 128x128>
      : tensor<11008x4096xf32> -> tensor<11008x4096xf8E4M3FN> local tensor<86x32xf32>
  return %q, %l : tensor<11008x4096xf8E4M3FN>, tensor<86x32xf32>
}

// -----

func.func @f16_input(%x: tensor<64x256xf16>) -> (tensor<64x256xf8E4M3FN>, tensor<64xf32>) {
  // expected-error @+1 {{'moss.quantize' op has 'f16' input; the GPU quantizers take f32 or bf16}}
  %q, %g = moss.quantize %x scaling<per_row> : tensor<64x256xf16> -> tensor<64x256xf8E4M3FN> global tensor<64xf32>
  return %q, %g : tensor<64x256xf8E4M3FN>, tensor<64xf32>
}

// -----

func.func @dynamic_k(%x: tensor<64x?xbf16>) -> (tensor<64x?xf8E4M3FN>, tensor<64xf32>) {
  // expected-error @+1 {{'moss.quantize' op needs a static K (the input's columns) to lower to a quantizer kernel}}
  %q, %g = moss.quantize %x scaling<per_row> : tensor<64x?xbf16> -> tensor<64x?xf8E4M3FN> global tensor<64xf32>
  return %q, %g : tensor<64x?xf8E4M3FN>, tensor<64xf32>
}

// -----

func.func @shared(%x: tensor<64x256xbf16>) -> (tensor<64x256xf8E4M3FN>, tensor<64xf32>) {
  // expected-error @+1 {{'moss.quantize' op shares its function with 'moss.quantize'; expected a function holding only the moss.quantize and a return (each becomes one kernel)}}
  %q, %g = moss.quantize %x scaling<per_row> : tensor<64x256xbf16> -> tensor<64x256xf8E4M3FN> global tensor<64xf32>
  // expected-note @+1 {{other op here}}
  %q2, %g2 = moss.quantize %x scaling<per_row> : tensor<64x256xbf16> -> tensor<64x256xf8E4M3FN> global tensor<64xf32>
  return %q, %g : tensor<64x256xf8E4M3FN>, tensor<64xf32>
}
