//===- MOSSOps.td - moss operations ------------------------*- tablegen -*-===//

#ifndef MOSS_OPS_TD
#define MOSS_OPS_TD

include "moss/Dialect/MOSS/IR/MOSSAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MOSS_QuantizeOp : MOSS_Op<"quantize", [Pure, AttrSizedResultSegments]> {
  let summary = "Quantizes a matrix to FP8 with a scaling scheme";
  let description = [{
    Quantizes `input` [rows, K] to FP8 codes with the given scheme, blocks
    running along K. With `transpose`, it quantizes the transpose of the
    input instead: `codes` is [K, rows] and the blocks run along `rows`, the
    layout a backward GEMM needs for a K-major operand.

    Results: the codes, the block scales (`local`) where the scheme has them,
    and the FP32 global scales (`global`) where it has them.

    ```mlir
    %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor>
        : tensor<?x4096xbf16> -> tensor<?x4096xf8E4M3FN>
          local tensor<?x128xf8E8M0FNU> global tensor<1xf32>
    ```
  }];
  let arguments = (ins
    AnyRankedTensor:$input,
    MOSS_ScalingAttr:$scaling,
    UnitAttr:$transpose
  );
  let results = (outs
    AnyRankedTensor:$codes,
    Optional<AnyRankedTensor>:$local,
    Optional<AnyRankedTensor>:$global
  );
  let assemblyFormat = [{
    $input `scaling` `` $scaling (`transpose` $transpose^)? attr-dict `:` type($input)
    `->` type($codes) (`local` type($local)^)? (`global` type($global)^)?
  }];
  let hasVerifier = 1;
}

def MOSS_GemmOp : MOSS_Op<"gemm", [Pure, AttrSizedOperandSegments]> {
  let summary = "Block-scaled FP8 GEMM with a fused epilogue";
  let description = [{
    `result[m, n] = epilogue(sum_k dqA[m, k] * dqB[n, k])` where `dqA` and
    `dqB` are the dequantized operands: `a` [M, K] and `b` [N, K] are both
    K-major FP8 (f8E4M3FN or f8E5M2, any pairing Hopper's FP8 MMA takes),
    each with its scaling scheme and scale operands. The epilogue adds the
    optional `bias` [N], adds `beta * c` for an optional `c` [M, N], casts to
    the result element type (bf16, f16 or f32) and, when the `amax` result
    is present, also returns max |result| as tensor<1xf32> for quantizing
    the next layer.

    The optional `tiling` attribute (`#moss.tiling`, set by
    moss-select-tiling or a tuning database) fixes the kernel's tile
    configuration; it is printed in the attribute dictionary.

    The optional `promoteK` (32, 64 or 128, at most the schemes' own
    scaling block along K) makes the kernel promote the tensor cores'
    partial sums into FP32 every `promoteK` elements of K even where the
    schemes need no promotion (per-tensor, per-row): more accurate
    (docs/NUMERICS-CONTRACT.md section 7), somewhat slower.

    The optional `mma` says what the tensor cores multiply.
    `#moss.mma<fp8>`: the FP8 codes, at full speed; a 32-element block's
    sum inside the tensor cores loses about 2^-14 of its size, so f32
    results are within about 1e-4 of the FP64 reference.
    `#moss.mma<f16>`: every FP8 code widened exactly to f16 on chip, so the
    products are exact and summed in FP32: within 1e-5, at about a third of
    the speed (docs/NUMERICS-CONTRACT.md section 7.4). Without the attribute,
    f16 for an f32 result and fp8 otherwise.

    The optional `fold` (`#moss.fold<none|128|row>`) says where the E8M0
    block factors of two-level and MXFP8 operands go; without it, row for
    bf16 and f16 results of at least 1024 rows (a dynamic M counts as 4096)
    and none otherwise. A fold other than none lowers to
    the kernel of the folded operands (per-row, or per-group 1x128 for 128):
    whoever launches it folds the operands first (the runtime's
    GpuFolder, docs/NUMERICS-CONTRACT.md section 8).

    ```mlir
    %c = moss.gemm %a scaling<two_level 32, global = row>
             local(%al) global(%ag),
           %b scaling<per_tensor> global(%bg)
        : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>,
           tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<?x11008xbf16>
    ```
  }];
  let arguments = (ins
    AnyRankedTensor:$a,
    MOSS_ScalingAttr:$aScaling,
    Optional<AnyRankedTensor>:$aLocal,
    Optional<AnyRankedTensor>:$aGlobal,
    AnyRankedTensor:$b,
    MOSS_ScalingAttr:$bScaling,
    Optional<AnyRankedTensor>:$bLocal,
    Optional<AnyRankedTensor>:$bGlobal,
    Optional<AnyRankedTensor>:$bias,
    Optional<AnyRankedTensor>:$c,
    OptionalAttr<F32Attr>:$beta,
    OptionalAttr<MOSS_TilingAttr>:$tiling,
    OptionalAttr<I64Attr>:$promoteK,
    OptionalAttr<MOSS_MmaTypeAttr>:$mma,
    OptionalAttr<MOSS_FoldAttr>:$fold
  );
  let results = (outs
    AnyRankedTensor:$result,
    Optional<AnyRankedTensor>:$amax
  );
  let assemblyFormat = [{
    $a `scaling` `` $aScaling (`local` `(` $aLocal^ `)`)? (`global` `(` $aGlobal^ `)`)? `,`
    $b `scaling` `` $bScaling (`local` `(` $bLocal^ `)`)? (`global` `(` $bGlobal^ `)`)?
    (`bias` `(` $bias^ `)`)? (`accumulate` `(` $c^ `)`)?
    (`beta` `(` $beta^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MOSS_GroupedGemmOp
    : MOSS_Op<"grouped_gemm", [Pure, AttrSizedOperandSegments]> {
  let summary = "m-grouped block-scaled FP8 GEMM (a mixture-of-experts layer)";
  let description = [{
    G GEMMs that share N, K, the schemes and the epilogue: expert g
    multiplies its rows of `a` [M, K] by its own weight `b[g]` [N, K] (`b`
    is [G, N, K]) into the same rows of the result [M, N], with its own
    `bias[g]` ([G, N]) and B scales (block scales [G, ...] of one expert's
    shape, globals [G] for a per-tensor scope or [G, N] per row). A's scales
    and `c` are those of a plain `moss.gemm` over all M rows. Which rows
    belong to which expert is read on the device, so M is known only at the
    launch and any expert may have none:
    - `offsets(%o)`, tensor<(G+1)xi32>: the experts' rows back to back,
      expert g's being [o[g], o[g + 1]) (contiguous layout);
    - `counts(%c)`, tensor<Gxi32>: M / G rows per expert (A a [G, M / G, K]
      batch), of which expert g uses the first c[g]; the result's other rows
      are undefined (masked layout: decoding, CUDA graphs).
    Exactly one of them is given. Rows of A must be quantized row by row
    (A's blocks span one row). `tiling`, `promoteK`, `mma` and `fold` are
    those of `moss.gemm`; the fold runs over all M rows, and a B with one
    global per expert takes none. The kernel keeps M dynamic.

    ```mlir
    %d = moss.grouped_gemm %a scaling<two_level 32, global = row>
             local(%al) global(%ag),
           %b scaling<per_tensor> global(%bg) offsets(%o)
        : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>,
           tensor<8x1536x4096xf8E4M3FN>, tensor<8xf32>, tensor<9xi32>)
          -> tensor<?x1536xbf16>
    ```
  }];
  let arguments = (ins
    AnyRankedTensor:$a,
    MOSS_ScalingAttr:$aScaling,
    Optional<AnyRankedTensor>:$aLocal,
    Optional<AnyRankedTensor>:$aGlobal,
    AnyRankedTensor:$b,
    MOSS_ScalingAttr:$bScaling,
    Optional<AnyRankedTensor>:$bLocal,
    Optional<AnyRankedTensor>:$bGlobal,
    Optional<AnyRankedTensor>:$offsets,
    Optional<AnyRankedTensor>:$counts,
    Optional<AnyRankedTensor>:$bias,
    Optional<AnyRankedTensor>:$c,
    OptionalAttr<F32Attr>:$beta,
    OptionalAttr<MOSS_TilingAttr>:$tiling,
    OptionalAttr<I64Attr>:$promoteK,
    OptionalAttr<MOSS_MmaTypeAttr>:$mma,
    OptionalAttr<MOSS_FoldAttr>:$fold
  );
  let results = (outs
    AnyRankedTensor:$result,
    Optional<AnyRankedTensor>:$amax
  );
  let assemblyFormat = [{
    $a `scaling` `` $aScaling (`local` `(` $aLocal^ `)`)? (`global` `(` $aGlobal^ `)`)? `,`
    $b `scaling` `` $bScaling (`local` `(` $bLocal^ `)`)? (`global` `(` $bGlobal^ `)`)?
    (`offsets` `(` $offsets^ `)`)? (`counts` `(` $counts^ `)`)?
    (`bias` `(` $bias^ `)`)? (`accumulate` `(` $c^ `)`)?
    (`beta` `(` $beta^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MOSS_KGroupedGemmOp
    : MOSS_Op<"k_grouped_gemm", [Pure, AttrSizedOperandSegments]> {
  let summary = "k-grouped block-scaled FP8 GEMM (a mixture-of-experts "
                "weight gradient)";
  let description = [{
    G GEMMs that share A [M, K] and B [N, K], K being the tokens of all
    experts sorted by expert: expert g multiplies their columns [o[g],
    o[g + 1]) (`offsets(%o)`, tensor<(G+1)xi32>, read on the device,
    multiples of 128; columns past o[G] are no expert's) into its own
    result[g] [M, N], plus `beta` times c[g] when `accumulate(%c)` gives C
    [G, M, N]. An expert without columns gets the epilogue of zero sums.
    M and N are static; K may be dynamic, and the kernel serves any K that
    is a multiple of 128. No bias and no fold: block-scaled operands keep
    their factors. `tiling`, `promoteK` and `mma` are those of `moss.gemm`.

    ```mlir
    %dw = moss.k_grouped_gemm %dy scaling<per_row> global(%dyg),
            %x scaling<per_row> global(%xg) offsets(%o)
        : (tensor<4096x?xf8E4M3FN>, tensor<4096xf32>,
           tensor<7168x?xf8E4M3FN>, tensor<7168xf32>, tensor<9xi32>)
          -> tensor<8x4096x7168xbf16>
    ```
  }];
  let arguments = (ins
    AnyRankedTensor:$a,
    MOSS_ScalingAttr:$aScaling,
    Optional<AnyRankedTensor>:$aLocal,
    Optional<AnyRankedTensor>:$aGlobal,
    AnyRankedTensor:$b,
    MOSS_ScalingAttr:$bScaling,
    Optional<AnyRankedTensor>:$bLocal,
    Optional<AnyRankedTensor>:$bGlobal,
    AnyRankedTensor:$offsets,
    Optional<AnyRankedTensor>:$c,
    OptionalAttr<F32Attr>:$beta,
    OptionalAttr<MOSS_TilingAttr>:$tiling,
    OptionalAttr<I64Attr>:$promoteK,
    OptionalAttr<MOSS_MmaTypeAttr>:$mma
  );
  let results = (outs
    AnyRankedTensor:$result,
    Optional<AnyRankedTensor>:$amax
  );
  let assemblyFormat = [{
    $a `scaling` `` $aScaling (`local` `(` $aLocal^ `)`)? (`global` `(` $aGlobal^ `)`)? `,`
    $b `scaling` `` $bScaling (`local` `(` $bLocal^ `)`)? (`global` `(` $bGlobal^ `)`)?
    `offsets` `(` $offsets `)` (`accumulate` `(` $c^ `)`)?
    (`beta` `(` $beta^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // MOSS_OPS_TD
