//===- Passes.td - moss conversions ------------------------*- tablegen -*-===//
//
// Every conversion out of the moss dialect, in one file.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_CONVERSION_PASSES_TD
#define MOSS_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertGemmToEmitC
    : Pass<"moss-convert-gemm-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower each moss.gemm kernel function to an EmitC translation unit";
  let description = [{
    Replaces each function that holds one `moss.gemm` (and its return) with
    an `emitc.file` whose body is the CUDA C++ translation unit of
    docs/GEMM-KERNEL-ABI.md: the template header's `emitc.include`, the
    `moss::gemm::Config<...>` using-declaration with every constant of the
    op and its `#moss.tiling`, and the `extern "C" __global__` kernel (an
    `emitc.func` with `__launch_bounds__` among its specifiers and
    `__grid_constant__ CUtensorMap` parameters) that calls
    `moss::gemm::run<MossGemmConfig>`.

    The file and the kernel are named `moss_gemm_<hash>`, the hash of the
    configuration text, so equal GEMMs get equal names in every process.
    The file carries the op's tiling as `moss.tiling`. The C++ text comes
    from the EmitC emitter (`moss-translate --moss-to-cuda`).

    Needs static N and K and a `tiling` attribute (moss-specialize-shapes,
    moss-select-tiling). With `quick-compile` the unit sets the
    configuration's QuickCompile (kernels that promote partial sums get
    shorter straight-line groups; others are unchanged but for the flag).
  }];
  let options = [
    Option<"quickCompile", "quick-compile", "bool", /*default=*/"false",
           "Lower to the kernel's quick-compile variant (shorter "
           "promotion groups, per-stage scale loads), which NVRTC compiles "
           "about 30% faster; compileGemm also narrows its tiles (the "
           "runtime's first kernel of a tiered compile)">
  ];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // MOSS_CONVERSION_PASSES_TD
