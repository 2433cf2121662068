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
    `moss::gemm_kernel::Config<...>` using-declaration with every constant of the
    op and its `#moss.tiling`, and the `extern "C" __global__` kernel (an
    `emitc.func` with `__launch_bounds__` among its specifiers and
    `__grid_constant__ CUtensorMap` parameters) that calls
    `moss::gemm_kernel::run<MossGemmConfig>`.

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
           "runtime's first kernel of a tiered compile)">,
    Option<"foldAInKernel", "fold-a-in-kernel", "bool", /*default=*/"false",
           "Lower an op that folds A by rows to the kernel that folds A "
           "itself (FoldA; GemmSpec::getFoldingKernelSpec) where it can, "
           "instead of the kernel of the folded operands">
  ];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

def ConvertQuantizeToEmitC
    : Pass<"moss-convert-quantize-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower each moss.quantize kernel function to an EmitC translation unit";
  let description = [{
    Replaces each function that holds one `moss.quantize` (and its return)
    with an `emitc.file` holding the CUDA C++ of the runtime's quantizer for
    that scheme, format, input type, orientation and K:
    `moss::runtime::generateQuantizerSource`, the text `GpuQuantizer`
    compiles, one `emitc.verbatim` per line. Its kernels are
    `moss_quantize_<hash>` and, for schemes that reduce first (a per-tensor
    global, a transposed global), `moss_quantize_<hash>_reduce`, launched
    with `moss::quantize::Args` as docs/RUNTIME.md describes. The file is
    named `moss_quantize_<hash>`, the hash of the source.

    Needs f32 or bf16 input, a static K (the input's columns, or its rows
    when transposed) and a scheme the GPU quantizers take.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // MOSS_CONVERSION_PASSES_TD
