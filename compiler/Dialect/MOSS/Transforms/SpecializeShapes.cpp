//===- SpecializeShapes.cpp - moss-specialize-shapes ----------------------===//
//
// Gives every value a moss.gemm touches the type its unified M, N and K
// call for, with M optionally fixed by the `m` option.
//
//===----------------------------------------------------------------------===//

#include "moss/Dialect/MOSS/IR/MOSSOps.h"
#include "moss/Dialect/MOSS/Transforms/Passes.h"
#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::moss {
#define GEN_PASS_DEF_SPECIALIZESHAPES
#include "moss/Dialect/MOSS/Transforms/Passes.h.inc"
} // namespace mlir::moss

using namespace mlir;
using namespace mlir::moss;

namespace {

/// One operand or result of a moss.gemm, its name for messages and the type
/// the unified shape gives it.
struct Refinement {
  Value value;
  StringRef what;
  RankedTensorType type;
};

class SpecializeShapesPass
    : public mlir::moss::impl::SpecializeShapesBase<SpecializeShapesPass> {
public:
  using SpecializeShapesBase::SpecializeShapesBase;

  void runOnOperation() override;

private:
  LogicalResult specialize(GemmOp op,
                           llvm::SetVector<FunctionOpInterface> &changed);
};

} // namespace

/// `type` with the shape `shape`.
static RankedTensorType withShape(Value value, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(value.getType());
  return RankedTensorType::get(shape, type.getElementType(),
                               type.getEncoding());
}

/// The function whose signature holds `value`, when `value` is an argument
/// of a function's entry block.
static FunctionOpInterface getArgumentOwner(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg)
    return {};
  auto func =
      dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!func || func.isExternal() ||
      arg.getOwner() != &func.getFunctionBody().front())
    return {};
  return func;
}

/// Whether `value`'s type may be replaced by a more static one: a function
/// argument (the signature follows), or a result of a moss op (whose
/// verifiers accept any compatible shape).
static bool isRefinable(Value value) {
  if (getArgumentOwner(value))
    return true;
  Operation *def = value.getDefiningOp();
  return def && isa_and_nonnull<MOSSDialect>(def->getDialect());
}

LogicalResult SpecializeShapesPass::specialize(
    GemmOp op, llvm::SetVector<FunctionOpInterface> &changed) {
  GemmShape shape = getGemmShape(op);
  int64_t m = this->m.getValue();
  if (m != 0) {
    if (m < 0)
      return op.emitOpError() << "cannot specialize M to m=" << m
                              << "; expected a positive row count";
    if (!ShapedType::isDynamic(shape.m) && shape.m != m)
      return op.emitOpError() << "has a static M=" << shape.m
                              << " that differs from the requested m=" << m
                              << "; expected a dynamic M or M=" << m;
    shape.m = m;
  }
  if (failed(checkStaticNK(op, shape, "code generation")))
    return failure();

  int64_t mm = shape.m, n = shape.n, k = shape.k;
  ScalingAttr aScaling = op.getAScaling(), bScaling = op.getBScaling();
  SmallVector<Refinement> refinements = {
      {op.getA(), "operand A", withShape(op.getA(), {mm, k})},
      {op.getB(), "operand B", withShape(op.getB(), {n, k})}};
  auto addScale = [&](Value value, StringRef what, RankedTensorType type) {
    if (value && type)
      refinements.push_back({value, what, type});
  };
  addScale(op.getALocal(), "the local scales of A",
           aScaling.getLocalScaleType(mm, k));
  addScale(op.getAGlobal(), "the global scales of A",
           aScaling.getGlobalScaleType(mm));
  addScale(op.getBLocal(), "the local scales of B",
           bScaling.getLocalScaleType(n, k));
  addScale(op.getBGlobal(), "the global scales of B",
           bScaling.getGlobalScaleType(n));
  if (Value bias = op.getBias())
    refinements.push_back({bias, "the bias", withShape(bias, {n})});
  if (Value c = op.getC())
    refinements.push_back({c, "the accumulate operand", withShape(c, {mm, n})});

  // Check every operand before changing any.
  for (Refinement &refinement : refinements) {
    if (refinement.value.getType() == refinement.type)
      continue;
    if (isRefinable(refinement.value))
      continue;
    InFlightDiagnostic diag = op.emitOpError()
                              << "cannot refine " << refinement.what << " from "
                              << refinement.value.getType() << " to "
                              << refinement.type << ": it is ";
    if (Operation *def = refinement.value.getDefiningOp())
      diag << "defined by '" << def->getName() << "'";
    else
      diag << "an argument of a block that is not a function's entry block";
    return diag << "; expected a function argument or the result of a moss op";
  }
  for (Refinement &refinement : refinements) {
    if (refinement.value.getType() == refinement.type)
      continue;
    if (FunctionOpInterface func = getArgumentOwner(refinement.value))
      changed.insert(func);
    refinement.value.setType(refinement.type);
  }

  // The result; its users see the refined type (moss ops and returns accept
  // it; the function's result types follow below).
  Value result = op.getResult();
  RankedTensorType resultType = withShape(result, {mm, n});
  if (result.getType() != resultType) {
    result.setType(resultType);
    if (auto func = op->getParentOfType<FunctionOpInterface>())
      changed.insert(func);
  }
  return success();
}

/// Rewrites `func`'s type from its entry block arguments and the operands
/// of its return.
static void updateFunctionType(FunctionOpInterface func) {
  if (func.isExternal())
    return;
  Block &entry = func.getFunctionBody().front();
  SmallVector<Type> inputs(entry.getArgumentTypes());
  SmallVector<Type> results(func.getResultTypes());
  Region &body = func.getFunctionBody();
  if (body.hasOneBlock()) {
    Operation *terminator = body.front().getTerminator();
    if (terminator && terminator->hasTrait<OpTrait::ReturnLike>() &&
        terminator->getNumOperands() == results.size())
      results = llvm::to_vector(terminator->getOperandTypes());
  }
  func.setType(func.cloneTypeWith(inputs, results));
}

void SpecializeShapesPass::runOnOperation() {
  llvm::SetVector<FunctionOpInterface> changed;
  WalkResult walk = getOperation().walk([&](GemmOp op) {
    return failed(specialize(op, changed)) ? WalkResult::interrupt()
                                           : WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return signalPassFailure();
  for (FunctionOpInterface func : changed)
    updateFunctionType(func);
}
