//===- MOSSOps.cpp - moss operations --------------------------------------===//

#include "moss/Dialect/MOSS/IR/MOSSOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::moss;

/// FP8 formats Hopper's FP8 MMA (wgmma .e4m3/.e5m2) takes, in any pairing.
static bool isMmaFp8(Type type) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(type);
}

/// Checks one optional scale value against the type its scheme expects.
/// `what` names it in messages, e.g. "local scales of operand A".
static LogicalResult verifyScale(Operation *op, StringRef what,
                                 ScalingAttr scaling, Type actual,
                                 RankedTensorType expected) {
  if (!expected && !actual)
    return success();
  if (!expected)
    return op->emitOpError() << scaling << " has no " << what
                             << ", but one of type " << actual
                             << " was given";
  if (!actual)
    return op->emitOpError() << scaling << " needs " << what << " of type "
                             << expected;
  auto actualTensor = cast<RankedTensorType>(actual);
  if (actualTensor.getElementType() != expected.getElementType() ||
      failed(verifyCompatibleShape(actualTensor, expected)))
    return op->emitOpError() << "expected " << what << " of type " << expected
                             << " for " << scaling << ", got " << actual;
  return success();
}

/// Checks the scales of a K-major operand [rows, k] under `scaling`; with
/// `groups` > 0, of `groups` such operands stacked (a grouped GEMM's B):
/// block scales [groups, ...] of one's shape, and one global per operand
/// ([groups]) or per row ([groups, rows]).
static LogicalResult verifyOperandScales(Operation *op, StringRef operand,
                                         ScalingAttr scaling, int64_t rows,
                                         int64_t k, Type local, Type global,
                                         int64_t groups = 0) {
  int64_t block = scaling.getKGranularity();
  if (!ShapedType::isDynamic(k) && k % block != 0)
    return op->emitOpError() << "K=" << k << " of " << operand
                             << " is not a multiple of the scaling block "
                             << block << " of " << scaling;
  RankedTensorType expectedLocal = scaling.getLocalScaleType(rows, k);
  RankedTensorType expectedGlobal = scaling.getGlobalScaleType(rows);
  auto stacked = [&](RankedTensorType type, ArrayRef<int64_t> shape) {
    return type ? RankedTensorType::get(shape, type.getElementType()) : type;
  };
  if (groups > 0) {
    SmallVector<int64_t> shape = {groups};
    if (expectedLocal)
      llvm::append_range(shape, expectedLocal.getShape());
    expectedLocal = stacked(expectedLocal, shape);
    const bool perRow = scaling.getKind() == ScalingKind::PerRow ||
                        (scaling.getKind() == ScalingKind::TwoLevel &&
                         scaling.getGlobal() == GlobalScope::Row);
    expectedGlobal = perRow ? stacked(expectedGlobal, {groups, rows})
                            : stacked(expectedGlobal, {groups});
  }
  if (failed(verifyScale(op, ("local scales of " + operand).str(), scaling,
                         local, expectedLocal)))
    return failure();
  return verifyScale(op, ("global scales of " + operand).str(), scaling, global,
                     expectedGlobal);
}

static Type typeOrNull(Value value) { return value ? value.getType() : Type(); }

static bool isOutputFloat(Type type) {
  return type.isF32() || type.isBF16() || type.isF16();
}

//===----------------------------------------------------------------------===//
// QuantizeOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizeOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto codes = cast<RankedTensorType>(getCodes().getType());
  if (input.getRank() != 2)
    return emitOpError() << "expected a 2-D input [rows, K], got " << input;
  Type inputElement = input.getElementType();
  if (!inputElement.isF32() && !inputElement.isBF16() && !inputElement.isF16())
    return emitOpError() << "input element type must be f32, bf16 or f16, got "
                         << inputElement;
  if (!isMmaFp8(codes.getElementType()))
    return emitOpError() << "codes must be f8E4M3FN or f8E5M2, got "
                         << codes.getElementType();

  // The quantized operand is K-major: [rows, K], or [K, rows] of the input
  // when transposed.
  SmallVector<int64_t, 2> expectedShape(input.getShape());
  if (getTranspose())
    std::swap(expectedShape[0], expectedShape[1]);
  auto expectedCodes =
      RankedTensorType::get(expectedShape, codes.getElementType());
  if (failed(verifyCompatibleShape(codes, expectedCodes)))
    return emitOpError() << "expected codes of type " << expectedCodes
                         << (getTranspose() ? " (transposed input)" : "")
                         << ", got " << codes;

  return verifyOperandScales(*this, "the codes", getScaling(), expectedShape[0],
                             expectedShape[1], typeOrNull(getLocal()),
                             typeOrNull(getGlobal()));
}

//===----------------------------------------------------------------------===//
// GemmOp
//===----------------------------------------------------------------------===//

/// The K step of one FP8 wgmma instruction.
static constexpr int64_t kMmaK = 32;

/// The fold and promoteK of a GEMM whose operands are scaled by `aScaling`
/// and `bScaling` over K = `k`.
static LogicalResult verifyFoldAndPromotion(Operation *op, ScalingAttr aScaling,
                                            ScalingAttr bScaling, FoldAttr fold,
                                            std::optional<int64_t> promoteK,
                                            int64_t k) {
  // Block factors a fold moves (two-level, MXFP8), and whether this op
  // folds them: an explicit fold other than none, or none given (the
  // default, GemmSpec::getFold, folds all but f32 results).
  auto foldable = [](ScalingAttr scaling) {
    return scaling.getKind() == ScalingKind::TwoLevel ||
           scaling.getKind() == ScalingKind::MXFP8;
  };
  if (fold && fold.getValue() != BlockScaleFold::None) {
    if (!foldable(aScaling) && !foldable(bScaling))
      return op->emitOpError()
             << "fold " << fold
             << " moves E8M0 block factors, but neither operand "
                "has them (two_level or mxfp8)";
    if (fold.getValue() == BlockScaleFold::K128) {
      if (!ShapedType::isDynamic(k) && k % 128 != 0)
        return op->emitOpError() << "K=" << k
                                 << " is not a multiple of 128, the 128 fold's "
                                    "group";
      for (auto [name, scaling] :
           {std::pair{"A", aScaling}, std::pair{"B", bScaling}})
        if (foldable(scaling) && 128 % scaling.getBlockCols() != 0)
          return op->emitOpError() << "operand " << name << "'s blocks of "
                                   << scaling.getBlockCols()
                                   << " do not divide the 128 fold's group";
    }
  }
  const bool mayFold = !fold || fold.getValue() != BlockScaleFold::None;

  if (std::optional<int64_t> promote = promoteK) {
    if (*promote != 32 && *promote != 64 && *promote != 128)
      return op->emitOpError()
             << "promoteK=" << *promote
             << " is not a promotion interval; expected 32, 64 "
                "or 128";
    if (!ShapedType::isDynamic(k) && k % *promote != 0)
      return op->emitOpError()
             << "K=" << k << " is not a multiple of promoteK=" << *promote;
    for (auto [name, scaling] :
         {std::pair{"A", aScaling}, std::pair{"B", bScaling}}) {
      int64_t block = scaling.getBlockCols();
      // A folded operand's blocks are those of its folded scheme.
      if (mayFold && foldable(scaling))
        continue;
      if (scaling.hasLocalScales() && block < *promote)
        return op->emitOpError()
               << "promoteK=" << *promote << " is coarser than operand " << name
               << "'s scaling block " << block
               << "; the kernel already promotes every " << block;
    }
  }
  return success();
}

/// The result [m, n], the bias of shape `biasShape`, C [m, n], beta and
/// amax of a GEMM.
static LogicalResult verifyEpilogue(Operation *op, ArrayRef<int64_t> shape,
                                    Value result, Value bias,
                                    ArrayRef<int64_t> biasShape, Value c,
                                    bool beta, Value amax) {
  auto resultType = cast<RankedTensorType>(result.getType());
  Type out = resultType.getElementType();
  if (!isOutputFloat(out))
    return op->emitOpError() << "result element type must be bf16, f16 or f32, "
                                "got "
                             << out;
  auto expectedResult = RankedTensorType::get(shape, out);
  if (failed(verifyCompatibleShape(resultType, expectedResult)))
    return op->emitOpError() << "expected a result of type " << expectedResult
                             << ", got " << resultType;

  if (bias) {
    auto biasType = cast<RankedTensorType>(bias.getType());
    auto expected = RankedTensorType::get(biasShape, biasType.getElementType());
    if (!isOutputFloat(biasType.getElementType()) ||
        failed(verifyCompatibleShape(biasType, expected))) {
      InFlightDiagnostic diag = op->emitOpError()
                                << "expected a bias of type tensor<";
      for (int64_t size : biasShape)
        diag << size << "x";
      return diag << "f32> (or bf16, f16), got " << biasType;
    }
  }
  if (c) {
    auto cType = cast<RankedTensorType>(c.getType());
    Type element = cType.getElementType();
    auto expected = RankedTensorType::get(shape, element);
    if ((!element.isF32() && element != out) ||
        failed(verifyCompatibleShape(cType, expected)))
      return op->emitOpError() << "expected an accumulate operand of type "
                               << RankedTensorType::get(shape, out)
                               << " or with f32 elements, got " << cType;
  } else if (beta) {
    return op->emitOpError() << "beta needs an accumulate(...) operand";
  }
  if (amax) {
    auto expected =
        RankedTensorType::get({1}, Float32Type::get(op->getContext()));
    if (amax.getType() != expected)
      return op->emitOpError() << "expected the amax result to be " << expected
                               << ", got " << amax.getType();
  }
  return success();
}

/// The FP8 element types of A and B, and their K: A's, else B's `kB`,
/// which must agree and be a multiple of the MMA's K step.
static FailureOr<int64_t> verifyFp8Operands(Operation *op, RankedTensorType a,
                                            RankedTensorType b, int64_t kB) {
  for (auto [name, type] : {std::pair{"A", a}, std::pair{"B", b}})
    if (!isMmaFp8(type.getElementType()))
      return op->emitOpError() << "operand " << name << " has element type "
                               << type.getElementType()
                               << "; Hopper FP8 MMA takes f8E4M3FN or f8E5M2";
  int64_t k = a.getDimSize(1);
  if (!ShapedType::isDynamic(k) && !ShapedType::isDynamic(kB) && k != kB)
    return op->emitOpError()
           << "K of A (" << k << ") and of B (" << kB << ") differ";
  if (ShapedType::isDynamic(k))
    k = kB;
  if (!ShapedType::isDynamic(k) && k % kMmaK != 0)
    return op->emitOpError() << "K=" << k << " is not a multiple of " << kMmaK
                             << ", the K step of the FP8 MMA";
  return k;
}

/// The scales of A [M, K] and B [N, K] (B's stacked per expert when
/// `bGroups` > 0), and the fold and promotion, of a GEMM op.
template <class OpT>
static LogicalResult verifyGemmScales(OpT op, int64_t m, int64_t n, int64_t k,
                                      FoldAttr fold, int64_t bGroups = 0) {
  if (failed(verifyOperandScales(op, "operand A", op.getAScaling(), m, k,
                                 typeOrNull(op.getALocal()),
                                 typeOrNull(op.getAGlobal()))) ||
      failed(verifyOperandScales(op, "operand B", op.getBScaling(), n, k,
                                 typeOrNull(op.getBLocal()),
                                 typeOrNull(op.getBGlobal()), bGroups)))
    return failure();
  return verifyFoldAndPromotion(op, op.getAScaling(), op.getBScaling(), fold,
                                op.getPromoteK(), k);
}

LogicalResult GemmOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOpError() << "expected 2-D K-major operands A [M, K] and "
                            "B [N, K], got "
                         << a << " and " << b;
  FailureOr<int64_t> checkedK = verifyFp8Operands(*this, a, b, b.getDimSize(1));
  if (failed(checkedK))
    return failure();
  const int64_t m = a.getDimSize(0), n = b.getDimSize(0), k = *checkedK;

  if (failed(verifyGemmScales(*this, m, n, k, getFoldAttr())))
    return failure();
  return verifyEpilogue(*this, {m, n}, getResult(), getBias(), {n}, getC(),
                        getBeta().has_value(), getAmax());
}

//===----------------------------------------------------------------------===//
// GroupedGemmOp
//===----------------------------------------------------------------------===//

LogicalResult GroupedGemmOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  if (a.getRank() != 2 || b.getRank() != 3)
    return emitOpError() << "expected A [M, K] and the experts' B [G, N, K], "
                            "got "
                         << a << " and " << b;
  FailureOr<int64_t> checkedK = verifyFp8Operands(*this, a, b, b.getDimSize(2));
  if (failed(checkedK))
    return failure();
  const int64_t m = a.getDimSize(0), n = b.getDimSize(1), k = *checkedK;
  const int64_t groups = b.getDimSize(0);
  if (ShapedType::isDynamic(groups) || groups < 1)
    return emitOpError() << "expected a static number of experts G >= 1 "
                            "(B's first dimension), got "
                         << b;
  // Each row belongs to one expert, so A's blocks span one row.
  if (getAScaling().hasLocalScales() && getAScaling().getBlockRows() != 1)
    return emitOpError() << "A's blocks of " << getAScaling()
                         << " span several rows, which may belong to "
                            "different experts; expected blocks of one row";

  // The rows of the experts: G + 1 offsets or G counts.
  Value offsets = getOffsets(), counts = getCounts();
  if (!offsets == !counts)
    return emitOpError() << "expected either offsets(...) (G + 1 row offsets, "
                            "the contiguous layout) or counts(...) (G row "
                            "counts, the masked layout)";
  const int64_t rowValues = offsets ? groups + 1 : groups;
  auto expectedRows =
      RankedTensorType::get({rowValues}, IntegerType::get(getContext(), 32));
  Value rows = offsets ? offsets : counts;
  if (failed(verifyCompatibleShape(rows.getType(), expectedRows)) ||
      cast<RankedTensorType>(rows.getType()).getElementType() !=
          expectedRows.getElementType())
    return emitOpError() << "expected " << (offsets ? "offsets" : "counts")
                         << " of type " << expectedRows << ", got "
                         << rows.getType();
  if (counts && !ShapedType::isDynamic(m) && m % groups != 0)
    return emitOpError() << "M=" << m << " is not a multiple of the " << groups
                         << " experts of the masked layout (M / G rows each)";

  if (failed(verifyGemmScales(*this, m, n, k, getFoldAttr(), groups)))
    return failure();
  return verifyEpilogue(*this, {m, n}, getResult(), getBias(), {groups, n},
                        getC(), getBeta().has_value(), getAmax());
}

//===----------------------------------------------------------------------===//
// KGroupedGemmOp
//===----------------------------------------------------------------------===//

LogicalResult KGroupedGemmOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOpError() << "expected A [M, K] and B [N, K] (K the tokens of "
                            "all experts), got "
                         << a << " and " << b;
  FailureOr<int64_t> checkedK = verifyFp8Operands(*this, a, b, b.getDimSize(1));
  if (failed(checkedK))
    return failure();
  const int64_t m = a.getDimSize(0), n = b.getDimSize(0), k = *checkedK;
  if (ShapedType::isDynamic(m) || ShapedType::isDynamic(n))
    return emitOpError() << "expected a static M and N (each expert's result "
                            "is [M, N]), got "
                         << a << " and " << b;
  if (!ShapedType::isDynamic(k) && k % 128 != 0)
    return emitOpError() << "K=" << k
                         << " is not a multiple of 128 (each expert's "
                            "columns are whole 128-wide stages)";
  auto offsets = cast<RankedTensorType>(getOffsets().getType());
  const int64_t values = offsets.getRank() == 1 ? offsets.getDimSize(0) : 0;
  if (ShapedType::isDynamic(values) || values < 2 ||
      !offsets.getElementType().isInteger(32))
    return emitOpError() << "expected offsets of type tensor<(G+1)xi32> with "
                            "a static G >= 1, got "
                         << offsets;
  const int64_t groups = values - 1;
  // No fold: its pass takes whole rows of a static K.
  if (failed(verifyGemmScales(*this, m, n, k, FoldAttr())))
    return failure();
  return verifyEpilogue(*this, {groups, m, n}, getResult(), Value(), {}, getC(),
                        getBeta().has_value(), getAmax());
}

#define GET_OP_CLASSES
#include "moss/Dialect/MOSS/IR/MOSSOps.cpp.inc"
