// The tuning database is looked up before the heuristic (docs/TUNING.md).
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%S/Inputs/tuning-db.json" | FileCheck %s --check-prefix=DB
// A dynamic M is looked up at the bucket of assumed-m.
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%S/Inputs/tuning-db.json assumed-m=9" | FileCheck %s --check-prefix=M9
// Another SM count: no entry matches; the remarks say why.
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%S/Inputs/tuning-db.json sm-count=114 verbose-tuning=true" 2>/dev/null | FileCheck %s --check-prefix=H100
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%S/Inputs/tuning-db.json verbose-tuning=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=NOTE114
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%S/Inputs/tuning-db.json sm-count=114 verbose-tuning=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=NOTE132
// A corrupt or wrong-version database is reported and ignored.
// RUN: printf '{"format": "moss-tuning-db", "version": 1, "entries": [' > %t.corrupt.json
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.corrupt.json" 2>&1 >/dev/null | FileCheck %s --check-prefix=CORRUPT
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.corrupt.json" 2>/dev/null | FileCheck %s --check-prefix=HEURISTIC
// RUN: printf '{"format": "moss-tuning-db", "version": 7, "entries": []}' > %t.v7.json
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.v7.json" 2>&1 >/dev/null | FileCheck %s --check-prefix=VERSION
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.missing.json" 2>&1 >/dev/null | FileCheck %s --check-prefix=MISSING
// An entry whose swizzle the kernel lacks (3, 16) is passed over, with a
// remark, for the heuristic.
// RUN: sed '0,/"swizzle": 4/s//"swizzle": 3/' %S/Inputs/tuning-db.json > %t.swizzle3.json
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.swizzle3.json verbose-tuning=true" 2>&1 | FileCheck %s --check-prefix=SWIZZLE3
// RUN: sed '0,/"swizzle": 4/s//"swizzle": 16/' %S/Inputs/tuning-db.json > %t.swizzle16.json
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.swizzle16.json verbose-tuning=true" 2>&1 | FileCheck %s --check-prefix=SWIZZLE16

// DB-LABEL: func.func @moss_forward
// DB: tiling = #moss.tiling<tile_m = 256, tile_n = 64, stages = 5, cluster_m = 2, raster = along_n, swizzle = 4, source = db>
// M9-LABEL: func.func @moss_forward
// M9: tiling = #moss.tiling<tile_m = 128, tile_n = 96, stages = 7, source = db>
// H100-LABEL: func.func @moss_forward
// H100: source = heuristic
// NOTE132: remark: no tuning database entry for sm_90a/114 SMs: e4m3 two-level(row, 32) x e4m3 per-tensor -> bf16, N=11008 K=4096 M<=4096; using the heuristic
// CORRUPT: warning: ignoring the tuning database: tuning database '{{.*}}corrupt.json': not valid JSON
// HEURISTIC-LABEL: func.func @moss_forward
// HEURISTIC: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>
// VERSION: warning: ignoring the tuning database: tuning database '{{.*}}v7.json': format version 7; this build reads versions 1 to 2
// MISSING: warning: ignoring the tuning database: cannot read the tuning database '{{.*}}missing.json'
// SWIZZLE3: remark: tuning database entry ignored: {{.*}}swizzle must be 1, 2, 4 or 8, got 3
// SWIZZLE3: tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, cluster_m = 2, swizzle = 8, source = heuristic>
// SWIZZLE16: remark: tuning database entry ignored: {{.*}}swizzle must be 1, 2, 4 or 8, got 16
// SWIZZLE16: source = heuristic
func.func @moss_forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                        %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) {fold = #moss.fold<none>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// -----

// A static M is looked up at its own bucket; this entry was measured with 114
// SMs, so on 132 it is ignored (with a remark when verbose) and on 114 used.
// DB-LABEL: func.func @one_row
// DB: tiling = #moss.tiling<tile_m = 128, tile_n = 32, stages = 8, source = heuristic>
// NOTE114: remark: tuning database entry ignored: it was measured on sm_90a with 114 SMs; this GPU is sm_90a with 132 SMs
// NOTE114: remark: no tuning database entry for sm_90a/132 SMs: e4m3 per-tensor x e4m3 per-tensor -> bf16, N=4096 K=4096 M<=1
// H100-LABEL: func.func @one_row
// H100: tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 4, source = db>
func.func @one_row(%a: tensor<1x4096xf8E4M3FN>, %ag: tensor<1xf32>, %b: tensor<4096x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<1x4096xbf16> {
  %c = moss.gemm %a scaling<per_tensor> global(%ag), %b scaling<per_tensor> global(%bg)
      : (tensor<1x4096xf8E4M3FN>, tensor<1xf32>, tensor<4096x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<1x4096xbf16>
  return %c : tensor<1x4096xbf16>
}

// -----

// A tiling given beforehand wins over the database.
// DB-LABEL: func.func @given
// DB: tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 3, source = heuristic>
func.func @given(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>, %ag: tensor<?xf32>,
                 %b: tensor<11008x4096xf8E4M3FN>, %bg: tensor<1xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      {fold = #moss.fold<none>, tiling = #moss.tiling<tile_m = 128, tile_n = 64, stages = 3, source = heuristic>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>, tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}

// -----

// A database nested deeper than any real one is ignored with a warning (the
// JSON parser recurses; it never sees it).
// RUN: %python -c "print('[' * 50000 + ']' * 50000)" > %t.deep.json
// RUN: moss-opt %s -split-input-file -moss-select-tiling="tuning-db=%t.deep.json" 2>&1 | FileCheck %s --check-prefix=DEEP
// DEEP: JSON nested deeper than 64 levels
