//===- MOSSAttrs.td - moss attributes ----------------------*- tablegen -*-===//

#ifndef MOSS_ATTRS_TD
#define MOSS_ATTRS_TD

include "moss/Dialect/MOSS/IR/MOSSDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def MOSS_ScalingKind : I32EnumAttr<"ScalingKind", "FP8 scaling scheme", [
  I32EnumAttrCase<"PerTensor", 0, "per_tensor">,
  I32EnumAttrCase<"PerRow", 1, "per_row">,
  I32EnumAttrCase<"PerGroup", 2, "per_group">,
  I32EnumAttrCase<"MXFP8", 3, "mxfp8">,
  I32EnumAttrCase<"TwoLevel", 4, "two_level">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_GlobalScope : I32EnumAttr<"GlobalScope",
    "granularity of a two-level scheme's FP32 global scale", [
  I32EnumAttrCase<"Tensor", 0, "tensor">,
  I32EnumAttrCase<"Row", 1, "row">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_ScalingAttr : AttrDef<MOSS_Dialect, "Scaling"> {
  let mnemonic = "scaling";
  let summary = "How one FP8 operand is scaled";
  let description = [{
    The scaling scheme of one K-major operand [rows, K]:

    - `per_tensor`: one FP32 scale for the tensor (global operand tensor<1xf32>).
    - `per_row`: one FP32 scale per row (global operand tensor<rows x f32>).
    - `per_group RxB`: one FP32 scale per RxB block, R = 1 or R = B
      (local operand tensor<ceildiv(rows,R) x K/B x f32>).
    - `mxfp8`: one E8M0 scale per 32 elements along K (OCP MX v1.0)
      (local operand tensor<rows x K/32 x f8E8M0FNU>).
    - `two_level B, global = tensor|row`: MOSS microscaling, one E8M0 scale
      per B elements along K plus an FP32 global scale per tensor or per row.

    Examples: `#moss.scaling<per_tensor>`, `#moss.scaling<per_group 1x128>`,
    `#moss.scaling<two_level 32, global = row>`.
  }];
  let parameters = (ins
    EnumParameter<MOSS_ScalingKind>:$kind,
    "int64_t":$blockRows,
    "int64_t":$blockCols,
    EnumParameter<MOSS_GlobalScope>:$global
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether the scheme has block scales (a `local` operand).
    bool hasLocalScales() const;
    /// Whether its block scales are E8M0 powers of two (else FP32).
    bool hasE8M0LocalScales() const;
    /// Whether the scheme has FP32 global scales (a `global` operand).
    bool hasGlobalScales() const;
    /// The scale operand types for an operand of shape [rows, k] (either may
    /// be ShapedType::kDynamic). Null where the scheme has no such scales.
    RankedTensorType getLocalScaleType(int64_t rows, int64_t k) const;
    RankedTensorType getGlobalScaleType(int64_t rows) const;
    /// The block length along K that k must be a multiple of (1 when the
    /// scheme has no blocks).
    int64_t getKGranularity() const;
  }];
}

def MOSS_RasterOrder : I32EnumAttr<"RasterOrder",
    "order in which a persistent GEMM walks its output tiles", [
  I32EnumAttrCase<"AlongM", 0, "along_m">,
  I32EnumAttrCase<"AlongN", 1, "along_n">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_TilingSource : I32EnumAttr<"TilingSource",
    "where a GEMM's tile configuration came from", [
  I32EnumAttrCase<"Heuristic", 0, "heuristic">,
  I32EnumAttrCase<"Database", 1, "db">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_MmaType : I32EnumAttr<"MmaType",
    "what a GEMM's tensor cores multiply", [
  I32EnumAttrCase<"FP8", 0, "fp8">,
  I32EnumAttrCase<"F16", 1, "f16">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_MmaTypeAttr : EnumAttr<MOSS_Dialect, MOSS_MmaType, "mma"> {
  let summary = "What a moss.gemm's tensor cores multiply: fp8 or f16";
  let assemblyFormat = "`<` $value `>`";
}

def MOSS_BlockScaleFold : I32EnumAttr<"BlockScaleFold",
    "where a moss.gemm's E8M0 block factors go", [
  I32EnumAttrCase<"None", 0, "none">,
  I32EnumAttrCase<"K128", 1, "k128">,
  I32EnumAttrCase<"Row", 2, "row">
]> {
  let cppNamespace = "::mlir::moss";
  let genSpecializedAttr = 0;
}

def MOSS_FoldAttr : AttrDef<MOSS_Dialect, "Fold"> {
  let mnemonic = "fold";
  let summary = "Where a moss.gemm's E8M0 block factors go: none, 128 or row";
  let description = [{
    `#moss.fold<none>`: every 32-of-K partial sum is promoted with its
    factors (exact). `#moss.fold<128>`: the codes of two-level and MXFP8
    operands are rescaled to the largest factor of their 128-wide K group,
    one promotion per 128 of K. `#moss.fold<row>`: to the largest factor of
    their row, whose factor goes to the epilogue (docs/NUMERICS-CONTRACT.md
    section 8).
  }];
  let parameters = (ins "BlockScaleFold":$value);
  let hasCustomAssemblyFormat = 1;
}

def MOSS_TilingAttr : AttrDef<MOSS_Dialect, "Tiling"> {
  let mnemonic = "tiling";
  let summary = "Tile configuration of a moss.gemm kernel";
  let description = [{
    How the Hopper GEMM kernel covers the [M, N] output: `tile_m` x `tile_n`
    output tiles (one per thread block at a time, K walked in steps of 128
    FP8 elements through a `stages`-deep shared-memory pipeline), thread
    block clusters of `cluster_m` x `cluster_n` blocks (TMA multicast), the
    persistent scheduler's `raster` order with bands of `swizzle` tiles,
    and `split_k` slices of K. `source` records who chose it: the
    `heuristic` of moss-select-tiling or the tuning database (`db`).

    The values become the TileM ... SplitK parameters of
    `moss::gemm_kernel::Config` (docs/GEMM-KERNEL-ABI.md).

    Example (parameters with their default values may be left out):
    `#moss.tiling<tile_m = 128, tile_n = 160, stages = 5, cluster_m = 2,
    swizzle = 8, source = heuristic>`.
  }];
  let parameters = (ins
    "int64_t":$tile_m,
    "int64_t":$tile_n,
    "int64_t":$stages,
    DefaultValuedParameter<"int64_t", "1">:$cluster_m,
    DefaultValuedParameter<"int64_t", "1">:$cluster_n,
    DefaultValuedParameter<"::mlir::moss::RasterOrder",
                           "::mlir::moss::RasterOrder::AlongM">:$raster,
    DefaultValuedParameter<"int64_t", "1">:$swizzle,
    DefaultValuedParameter<"int64_t", "1">:$split_k,
    OptionalParameter<"std::optional<::mlir::moss::TilingSource>">:$source
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // MOSS_ATTRS_TD
