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

/// Checks the scales of a K-major operand [rows, k] under `scaling`.
static LogicalResult verifyOperandScales(Operation *op, StringRef operand,
                                         ScalingAttr scaling, int64_t rows,
                                         int64_t k, Type local, Type global) {
  int64_t block = scaling.getKGranularity();
  if (!ShapedType::isDynamic(k) && k % block != 0)
    return op->emitOpError() << "K=" << k << " of " << operand
                             << " is not a multiple of the scaling block "
                             << block << " of " << scaling;
  if (failed(verifyScale(op, ("local scales of " + operand).str(), scaling,
                         local, scaling.getLocalScaleType(rows, k))))
    return failure();
  return verifyScale(op, ("global scales of " + operand).str(), scaling,
                     global, scaling.getGlobalScaleType(rows));
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

LogicalResult GemmOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOpError() << "expected 2-D K-major operands A [M, K] and "
                            "B [N, K], got "
                         << a << " and " << b;
  for (auto [name, type] : {std::pair{"A", a}, std::pair{"B", b}})
    if (!isMmaFp8(type.getElementType()))
      return emitOpError() << "operand " << name << " has element type "
                           << type.getElementType()
                           << "; Hopper FP8 MMA takes f8E4M3FN or f8E5M2";

  int64_t m = a.getDimSize(0), n = b.getDimSize(0);
  int64_t k = a.getDimSize(1), kB = b.getDimSize(1);
  if (!ShapedType::isDynamic(k) && !ShapedType::isDynamic(kB) && k != kB)
    return emitOpError() << "K of A (" << k << ") and of B (" << kB
                         << ") differ";
  if (ShapedType::isDynamic(k))
    k = kB;
  if (!ShapedType::isDynamic(k) && k % kMmaK != 0)
    return emitOpError() << "K=" << k << " is not a multiple of " << kMmaK
                         << ", the K step of the FP8 MMA";

  if (failed(verifyOperandScales(*this, "operand A", getAScaling(), m, k,
                                 typeOrNull(getALocal()),
                                 typeOrNull(getAGlobal()))) ||
      failed(verifyOperandScales(*this, "operand B", getBScaling(), n, k,
                                 typeOrNull(getBLocal()),
                                 typeOrNull(getBGlobal()))))
    return failure();

  // Block factors a fold moves (two-level, MXFP8), and whether this op
  // folds them: an explicit fold other than none, or none given (the
  // default, GemmSpec::getFold, folds all but f32 results).
  auto foldable = [](ScalingAttr scaling) {
    return scaling.getKind() == ScalingKind::TwoLevel ||
           scaling.getKind() == ScalingKind::MXFP8;
  };
  FoldAttr fold = getFoldAttr();
  if (fold && fold.getValue() != BlockScaleFold::None) {
    if (!foldable(getAScaling()) && !foldable(getBScaling()))
      return emitOpError() << "fold " << fold
                           << " moves E8M0 block factors, but neither operand "
                              "has them (two_level or mxfp8)";
    if (fold.getValue() == BlockScaleFold::K128) {
      if (!ShapedType::isDynamic(k) && k % 128 != 0)
        return emitOpError() << "K=" << k
                             << " is not a multiple of 128, the 128 fold's "
                                "group";
      for (auto [name, scaling] : {std::pair{"A", getAScaling()},
                                   std::pair{"B", getBScaling()}})
        if (foldable(scaling) && 128 % scaling.getBlockCols() != 0)
          return emitOpError() << "operand " << name << "'s blocks of "
                               << scaling.getBlockCols()
                               << " do not divide the 128 fold's group";
    }
  }
  const bool mayFold = !fold || fold.getValue() != BlockScaleFold::None;

  if (std::optional<int64_t> promote = getPromoteK()) {
    if (*promote != 32 && *promote != 64 && *promote != 128)
      return emitOpError() << "promoteK=" << *promote
                           << " is not a promotion interval; expected 32, 64 "
                              "or 128";
    if (!ShapedType::isDynamic(k) && k % *promote != 0)
      return emitOpError() << "K=" << k << " is not a multiple of promoteK="
                           << *promote;
    for (auto [name, scaling] : {std::pair{"A", getAScaling()},
                                 std::pair{"B", getBScaling()}}) {
      int64_t block = scaling.getBlockCols();
      // A folded operand's blocks are those of its folded scheme.
      if (mayFold && foldable(scaling))
        continue;
      if (scaling.hasLocalScales() && block < *promote)
        return emitOpError()
               << "promoteK=" << *promote << " is coarser than operand "
               << name << "'s scaling block " << block
               << "; the kernel already promotes every " << block;
    }
  }

  auto result = cast<RankedTensorType>(getResult().getType());
  Type out = result.getElementType();
  if (!isOutputFloat(out))
    return emitOpError() << "result element type must be bf16, f16 or f32, "
                            "got "
                         << out;
  auto expectedResult = RankedTensorType::get({m, n}, out);
  if (failed(verifyCompatibleShape(result, expectedResult)))
    return emitOpError() << "expected a result of type " << expectedResult
                         << ", got " << result;

  if (Value bias = getBias()) {
    auto biasType = cast<RankedTensorType>(bias.getType());
    auto expected = RankedTensorType::get({n}, biasType.getElementType());
    if (!isOutputFloat(biasType.getElementType()) ||
        failed(verifyCompatibleShape(biasType, expected)))
      return emitOpError() << "expected a bias of type tensor<" << n
                           << "xf32> (or bf16, f16), got " << biasType;
  }
  if (Value c = getC()) {
    auto cType = cast<RankedTensorType>(c.getType());
    Type element = cType.getElementType();
    auto expected = RankedTensorType::get({m, n}, element);
    if ((!element.isF32() && element != out) ||
        failed(verifyCompatibleShape(cType, expected)))
      return emitOpError() << "expected an accumulate operand of type "
                           << RankedTensorType::get({m, n}, out)
                           << " or with f32 elements, got " << cType;
  } else if (getBeta()) {
    return emitOpError() << "beta needs an accumulate(...) operand";
  }
  if (Value amax = getAmax()) {
    auto expected = RankedTensorType::get({1}, Float32Type::get(getContext()));
    if (amax.getType() != expected)
      return emitOpError() << "expected the amax result to be " << expected
                           << ", got " << amax.getType();
  }
  return success();
}

#define GET_OP_CLASSES
#include "moss/Dialect/MOSS/IR/MOSSOps.cpp.inc"
