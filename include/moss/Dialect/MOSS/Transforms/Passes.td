//===- Passes.td - moss dialect passes ---------------------*- tablegen -*-===//

#ifndef MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_TD
#define MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SpecializeShapes : Pass<"moss-specialize-shapes", "::mlir::ModuleOp"> {
  let summary = "Refine the shapes of moss.gemm ops, optionally fixing M";
  let description = [{
    Unifies the M, N and K each `moss.gemm` states through its operands and
    result (A, its scales, B, its scales, bias, C, the result) and gives
    every one of those values the fully known type. With `m=<value>`, a
    dynamic M becomes that value, so the kernel is specialized to it.

    Function arguments are refined in place, results flow into the
    function's result types, and results of other moss ops (whose verifiers
    accept any compatible shape) are refined too.

    Code generation needs static N and K: a dynamic N or K that no operand
    fixes is an error naming it. Giving `m` for a GEMM whose M is already a
    different static value is an error too.

    ```mlir
    // moss-opt --moss-specialize-shapes="m=4096"
    %c = moss.gemm %a ... : (tensor<?x4096xf8E4M3FN>, ...) -> tensor<?x11008xbf16>
    // becomes
    %c = moss.gemm %a ... : (tensor<4096x4096xf8E4M3FN>, ...) -> tensor<4096x11008xbf16>
    ```
  }];
  let options = [
    Option<"m", "m", "int64_t", /*default=*/"0",
           "Specialize a dynamic M to this value (0 keeps it dynamic)">
  ];
}

def SelectTiling : Pass<"moss-select-tiling"> {
  let summary = "Choose a #moss.tiling for each moss.gemm";
  let description = [{
    Gives each `moss.gemm` without a `tiling` attribute the tile
    configuration of the heuristic in `moss/Compiler/Tiling.h`: fewest waves
    over `sm-count` SMs, then the fullest last wave, within
    `shared-memory-bytes` of shared memory per block and the register file.
    A dynamic M is planned as `assumed-m`. An op that already has a tiling
    (for example from the tuning database) keeps it, after a check that it
    fits the same limits. N and K must be static.

    With `tuning-db=<path>`, the tuning database (docs/TUNING.md) is looked
    up first: an entry for this GEMM on this GPU (`arch`, `sm-count`) at the
    M bucket of a static M, or of `assumed-m` for a dynamic M, gives the
    tiling (`source = db`); otherwise the heuristic does. A database that
    cannot be read or fails its checks is reported as a warning and ignored.
    With `verbose-tuning`, a remark says why an entry was ignored (another
    arch or SM count, a tiling that does not fit) or that none matched.
  }];
  let options = [
    Option<"smCount", "sm-count", "unsigned", /*default=*/"132",
           "Streaming multiprocessors of the target (H200: 132)">,
    Option<"sharedMemoryBytes", "shared-memory-bytes", "unsigned",
           /*default=*/"232448",
           "Shared memory one thread block may use (H200: 227 KiB)">,
    Option<"assumedM", "assumed-m", "int64_t",
           /*default=*/"::moss::compiler::kAssumedM",
           "The M to plan for when M is dynamic">,
    Option<"allowSplitK", "allow-split-k", "bool", /*default=*/"false",
           "Consider splitting K (f32 outputs without amax only)">,
    Option<"tuningDatabase", "tuning-db", "std::string", /*default=*/"",
           "A tuning database (JSON) to look tilings up in first">,
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "CUDA arch of the target, matched against database entries">,
    Option<"verboseTuning", "verbose-tuning", "bool", /*default=*/"false",
           "Remark on each database lookup that gives no tiling">,
    Option<"foldAInKernel", "fold-a-in-kernel", "bool", /*default=*/"false",
           "Tile an op that folds A by rows for the kernel that folds A "
           "itself (GemmSpec::getFoldingKernelSpec) where it can">
  ];
}

#endif // MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_TD
