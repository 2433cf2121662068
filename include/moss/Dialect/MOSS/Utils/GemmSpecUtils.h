//===- GemmSpecUtils.h - moss.gemm <-> GemmSpec -----------------*- C++ -*-===//
//
// The bridge between the `moss.gemm`, `moss.grouped_gemm` and
// `moss.k_grouped_gemm` ops and the
// plain structs of moss/Compiler (GemmSpec, TileConfig): reading an op's
// shapes and configuration, and building an op from a spec.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_DIALECT_MOSS_UTILS_GEMMSPECUTILS_H
#define MOSS_DIALECT_MOSS_UTILS_GEMMSPECUTILS_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::moss {

/// The M, N and K of a GEMM: for each, the static size any of its operands
/// or results states (ShapedType::kDynamic when none does). K also follows
/// from a scale operand's K/B blocks, since K is a multiple of the block B.
/// A grouped GEMM's N and K are one expert's, and `groups` its experts (0
/// for a plain GEMM).
struct GemmShape {
  int64_t m = ShapedType::kDynamic;
  int64_t n = ShapedType::kDynamic;
  int64_t k = ShapedType::kDynamic;
  int64_t groups = 0;
};
GemmShape getGemmShape(GemmOp op);
GemmShape getGemmShape(GroupedGemmOp op);
GemmShape getGemmShape(KGroupedGemmOp op);

/// Emits an error on `op` naming a dynamic N or K and saying that `stage`
/// needs them static; fails then.
LogicalResult checkStaticNK(GemmOp op, GemmShape shape, StringRef stage);
LogicalResult checkStaticNK(GroupedGemmOp op, GemmShape shape, StringRef stage);
/// A k-grouped GEMM's K is the launch's: only its N must be static (the
/// verifier holds M static).
LogicalResult checkStaticNK(KGroupedGemmOp op, GemmShape shape,
                            StringRef stage);

/// The plain scheme of a scaling attribute, and the FP8 format of a tensor
/// of FP8 codes.
::moss::numerics::ScalingScheme getScalingScheme(ScalingAttr scaling);
::moss::numerics::Fp8Format getFp8Format(Value codes);

/// The plain description of `op` (whose N and K must be static; M may be
/// dynamic; a grouped GEMM's M is dynamic whatever its types say, since its
/// kernel takes any rows).
::moss::compiler::GemmSpec getGemmSpec(GemmOp op, GemmShape shape);
::moss::compiler::GemmSpec getGemmSpec(GroupedGemmOp op, GemmShape shape);
/// A k-grouped op's spec (GemmSpec::groupedK): its K is dynamic whatever its
/// types say.
::moss::compiler::GemmSpec getGemmSpec(KGroupedGemmOp op, GemmShape shape);

/// The plain twin of a tiling attribute, and back.
::moss::compiler::TileConfig getTileConfig(TilingAttr attr);
TilingAttr getTilingAttr(MLIRContext *context,
                         const ::moss::compiler::TileConfig &tiling);

/// Builds, at `builder`'s insertion point, a function `name` whose
/// arguments are the operands `spec` calls for (A, its scales, B, its
/// scales, for a grouped spec the offsets or counts, bias, C), holding one
/// `moss.gemm` (`moss.grouped_gemm` for a spec with groups,
/// `moss.k_grouped_gemm` for a k-grouped one: A [M, ?], B [N, ?], the
/// offsets, C and the result [G, M, N]) and returning
/// its results. A static `spec.m` is written into the types unless
/// `dynamicM` is set.
/// Attributes that do not verify (a bad block shape) are reported through
/// the context's diagnostics, and the function fails.
FailureOr<func::FuncOp>
buildGemmFunction(OpBuilder &builder, Location loc,
                  const ::moss::compiler::GemmSpec &spec, StringRef name,
                  bool dynamicM);

} // namespace mlir::moss

#endif // MOSS_DIALECT_MOSS_UTILS_GEMMSPECUTILS_H
