// RUN: moss-opt %s -moss-specialize-shapes | FileCheck %s

// Without m=..., M stays dynamic while N and K are unified (here B's K
// comes from A).
// CHECK-LABEL: func.func @keep_m
// CHECK-SAME: (%{{.*}}: tensor<?x4096xf8E4M3FN>, %{{.*}}: tensor<?x128xf8E8M0FNU>, %{{.*}}: tensor<?xf32>, %{{.*}}: tensor<11008x4096xf8E4M3FN>, %{{.*}}: tensor<1xf32>) -> tensor<?x11008xbf16>
func.func @keep_m(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                  %b: tensor<11008x?xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x?xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
