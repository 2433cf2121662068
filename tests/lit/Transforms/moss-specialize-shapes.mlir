// RUN: moss-opt %s -split-input-file -allow-unregistered-dialect -moss-specialize-shapes="m=4096" -verify-diagnostics | FileCheck %s

// The MOSS forward GEMM with a dynamic M: M becomes 4096 in A, its scales,
// the result and the function's signature.
// CHECK-LABEL: func.func @moss_forward
// CHECK-SAME: (%{{.*}}: tensor<4096x4096xf8E4M3FN>, %{{.*}}: tensor<4096x128xf8E8M0FNU>, %{{.*}}: tensor<4096xf32>, %{{.*}}: tensor<11008x4096xf8E4M3FN>, %{{.*}}: tensor<1xf32>) -> tensor<4096x11008xbf16>
// CHECK: moss.gemm
// CHECK-SAME: (tensor<4096x4096xf8E4M3FN>, tensor<4096x128xf8E8M0FNU>, tensor<4096xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<4096x11008xbf16>
// CHECK: return %{{.*}} : tensor<4096x11008xbf16>
func.func @moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                        %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// -----

// N comes from the result, K from A: B, its scales, the bias, C and the
// result all get the unified shape.
// CHECK-LABEL: func.func @unify
// CHECK-SAME: (%{{.*}}: tensor<4096x256xf8E5M2>, %{{.*}}: tensor<4096x8xf8E8M0FNU>, %{{.*}}: tensor<1xf32>, %{{.*}}: tensor<512x256xf8E4M3FN>, %{{.*}}: tensor<512x8xf8E8M0FNU>, %{{.*}}: tensor<1xf32>, %{{.*}}: tensor<512xf32>, %{{.*}}: tensor<4096x512xf32>) -> (tensor<4096x512xf32>, tensor<1xf32>)
// CHECK: moss.gemm
// CHECK-SAME: -> (tensor<4096x512xf32>, tensor<1xf32>)
func.func @unify(%a: tensor<?x256xf8E5M2>, %al: tensor<?x8xf8E8M0FNU>, %ag: tensor<1xf32>,
                 %b: tensor<?x?xf8E4M3FN>, %bl: tensor<?x?xf8E8M0FNU>, %bg: tensor<1xf32>,
                 %bias: tensor<?xf32>, %acc: tensor<?x?xf32>) -> (tensor<?x512xf32>, tensor<1xf32>) {
  %c, %amax = moss.gemm %a scaling<two_level 32, global = tensor> local(%al) global(%ag),
                        %b scaling<two_level 32, global = tensor> local(%bl) global(%bg)
                        bias(%bias) accumulate(%acc) beta(0.5)
      : (tensor<?x256xf8E5M2>, tensor<?x8xf8E8M0FNU>, tensor<1xf32>, tensor<?x?xf8E4M3FN>, tensor<?x?xf8E8M0FNU>, tensor<1xf32>, tensor<?xf32>, tensor<?x?xf32>) -> (tensor<?x512xf32>, tensor<1xf32>)
  return %c, %amax : tensor<?x512xf32>, tensor<1xf32>
}

// -----

// A produced by moss.quantize in the same function: its result is refined.
// CHECK-LABEL: func.func @quantized_operand
// CHECK-SAME: (%{{.*}}: tensor<?x4096xbf16>, %{{.*}}: tensor<4096x4096xf8E4M3FN>, %{{.*}}: tensor<1xf32>) -> tensor<4096x4096xbf16>
// CHECK: moss.quantize %{{.*}} : tensor<?x4096xbf16> -> tensor<4096x4096xf8E4M3FN> local tensor<4096x128xf8E8M0FNU> global tensor<1xf32>
// CHECK: moss.gemm
// CHECK-SAME: -> tensor<4096x4096xbf16>
func.func @quantized_operand(%x: tensor<?x4096xbf16>, %w: tensor<4096x4096xf8E4M3FN>, %wg: tensor<1xf32>) -> tensor<?x4096xbf16> {
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor> : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN> local tensor<?x128xf8E8M0FNU> global tensor<1xf32>
  %c = moss.gemm %q scaling<two_level 32, global = tensor> local(%l) global(%g), %w scaling<per_tensor> global(%wg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x4096xbf16>
  return %c : tensor<?x4096xbf16>
}

// -----

// Already static with the requested M: unchanged.
// CHECK-LABEL: func.func @already_static
// CHECK: moss.gemm
// CHECK-SAME: -> tensor<4096x64xbf16>
func.func @already_static(%a: tensor<4096x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<4096x64xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<4096x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<4096x64xbf16>
  return %c : tensor<4096x64xbf16>
}

// -----

func.func @dynamic_n(%a: tensor<?x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<?x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x?xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a dynamic N (operand B is 'tensor<?x64xf8E4M3FN>', the result 'tensor<?x?xbf16>'); code generation needs a static N: give B a static number of rows}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<?x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x?xbf16>
  return %c : tensor<?x?xbf16>
}

// -----

func.func @dynamic_k(%a: tensor<?x?xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x?xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a dynamic K (operand A is 'tensor<?x?xf8E4M3FN>', operand B 'tensor<64x?xf8E4M3FN>'); code generation needs a static K: give A or B a static number of columns}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x?xf8E4M3FN>, tensor<1xf32>, tensor<64x?xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

func.func @m_conflict(%a: tensor<128x64xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<128x64xbf16> {
  // expected-error @+1 {{'moss.gemm' op has a static M=128 that differs from the requested m=4096; expected a dynamic M or M=4096}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<128x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<128x64xbf16>
  return %c : tensor<128x64xbf16>
}

// -----

func.func @foreign_producer(%ag: tensor<1xf32>, %b: tensor<64x64xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x64xbf16> {
  %a = "test.source"() : () -> tensor<?x64xf8E4M3FN>
  // expected-error @+1 {{'moss.gemm' op cannot refine operand A from 'tensor<?x64xf8E4M3FN>' to 'tensor<4096x64xf8E4M3FN>': it is defined by 'test.source'; expected a function argument or the result of a moss op}}
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<?x64xf8E4M3FN>, tensor<1xf32>, tensor<64x64xf8E4M3FN>, tensor<1xf32>) -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}
