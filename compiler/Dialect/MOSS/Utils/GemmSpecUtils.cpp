//===- GemmSpecUtils.cpp - moss.gemm, moss.grouped_gemm <-> GemmSpec -----===//

#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace mlir::moss;

namespace numerics = ::moss::numerics;
namespace compiler = ::moss::compiler;

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

/// Dimension `dim` of `value`'s ranked tensor type, or kDynamic.
static int64_t dimOf(Value value, unsigned dim) {
  if (!value)
    return ShapedType::kDynamic;
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() <= dim)
    return ShapedType::kDynamic;
  return type.getDimSize(dim);
}

/// The first static size among `sizes`.
static int64_t firstStatic(ArrayRef<int64_t> sizes) {
  for (int64_t size : sizes)
    if (!ShapedType::isDynamic(size))
      return size;
  return ShapedType::kDynamic;
}

/// Whether the global scales of `scaling` have one entry per operand row.
static bool globalPerRow(ScalingAttr scaling) {
  return scaling.getKind() == ScalingKind::PerRow ||
         (scaling.getKind() == ScalingKind::TwoLevel &&
          scaling.getGlobal() == GlobalScope::Row);
}

/// The operand rows its scales state: row-wise block scales (1xB) and
/// per-row global scales have one entry per row.
static SmallVector<int64_t> rowsFromScales(ScalingAttr scaling, Value local,
                                           Value global) {
  SmallVector<int64_t> rows;
  if (local && scaling.getBlockRows() == 1)
    rows.push_back(dimOf(local, 0));
  if (global && globalPerRow(scaling))
    rows.push_back(dimOf(global, 0));
  return rows;
}

/// K as block scales state it: their K/B columns times the block B.
static int64_t kFromScales(ScalingAttr scaling, Value local) {
  int64_t cols = dimOf(local, 1);
  if (!local || ShapedType::isDynamic(cols) || !scaling.hasLocalScales())
    return ShapedType::kDynamic;
  return cols * scaling.getBlockCols();
}

GemmShape mlir::moss::getGemmShape(GemmOp op) {
  SmallVector<int64_t> ms = {dimOf(op.getA(), 0), dimOf(op.getResult(), 0),
                             dimOf(op.getC(), 0)};
  llvm::append_range(
      ms, rowsFromScales(op.getAScaling(), op.getALocal(), op.getAGlobal()));
  SmallVector<int64_t> ns = {dimOf(op.getB(), 0), dimOf(op.getResult(), 1),
                             dimOf(op.getC(), 1), dimOf(op.getBias(), 0)};
  llvm::append_range(
      ns, rowsFromScales(op.getBScaling(), op.getBLocal(), op.getBGlobal()));
  SmallVector<int64_t> ks = {dimOf(op.getA(), 1), dimOf(op.getB(), 1),
                             kFromScales(op.getAScaling(), op.getALocal()),
                             kFromScales(op.getBScaling(), op.getBLocal())};
  return {firstStatic(ms), firstStatic(ns), firstStatic(ks)};
}

GemmShape mlir::moss::getGemmShape(GroupedGemmOp op) {
  SmallVector<int64_t> ms = {dimOf(op.getA(), 0), dimOf(op.getResult(), 0),
                             dimOf(op.getC(), 0)};
  llvm::append_range(
      ms, rowsFromScales(op.getAScaling(), op.getALocal(), op.getAGlobal()));
  SmallVector<int64_t> ns = {dimOf(op.getB(), 1), dimOf(op.getResult(), 1),
                             dimOf(op.getC(), 1), dimOf(op.getBias(), 1)};
  SmallVector<int64_t> ks = {dimOf(op.getA(), 1), dimOf(op.getB(), 2),
                             kFromScales(op.getAScaling(), op.getALocal())};
  GemmShape shape{firstStatic(ms), firstStatic(ns), firstStatic(ks)};
  // The verifier holds B's first dimension static.
  shape.groups = dimOf(op.getB(), 0);
  return shape;
}

GemmShape mlir::moss::getGemmShape(KGroupedGemmOp op) {
  GemmShape shape;
  shape.m = dimOf(op.getA(), 0);
  shape.n = dimOf(op.getB(), 0);
  SmallVector<int64_t> ks = {dimOf(op.getA(), 1), dimOf(op.getB(), 1)};
  shape.k = firstStatic(ks);
  // The verifier holds the offsets [G + 1] static.
  shape.groups = dimOf(op.getOffsets(), 0) - 1;
  return shape;
}

template <class OpT>
static LogicalResult checkStaticNKOf(OpT op, GemmShape shape, StringRef stage) {
  if (ShapedType::isDynamic(shape.n))
    return op.emitOpError()
           << "has a dynamic N (operand B is " << op.getB().getType()
           << ", the result " << op.getResult().getType() << "); " << stage
           << " needs a static N: give B a static number of rows";
  if (ShapedType::isDynamic(shape.k))
    return op.emitOpError()
           << "has a dynamic K (operand A is " << op.getA().getType()
           << ", operand B " << op.getB().getType() << "); " << stage
           << " needs a static K: give A or B a static number of columns";
  return success();
}

LogicalResult mlir::moss::checkStaticNK(GemmOp op, GemmShape shape,
                                        StringRef stage) {
  return checkStaticNKOf(op, shape, stage);
}

LogicalResult mlir::moss::checkStaticNK(GroupedGemmOp op, GemmShape shape,
                                        StringRef stage) {
  return checkStaticNKOf(op, shape, stage);
}

LogicalResult mlir::moss::checkStaticNK(KGroupedGemmOp op, GemmShape shape,
                                        StringRef stage) {
  if (ShapedType::isDynamic(shape.n))
    return op.emitOpError()
           << "has a dynamic N (operand B is " << op.getB().getType() << "); "
           << stage << " needs a static N";
  return success();
}

//===----------------------------------------------------------------------===//
// Op -> spec
//===----------------------------------------------------------------------===//

numerics::Fp8Format mlir::moss::getFp8Format(Value operand) {
  Type element = cast<RankedTensorType>(operand.getType()).getElementType();
  return isa<Float8E5M2Type>(element) ? numerics::Fp8Format::E5M2
                                      : numerics::Fp8Format::E4M3;
}

numerics::ScalingScheme mlir::moss::getScalingScheme(ScalingAttr scaling) {
  numerics::ScalingScheme scheme;
  switch (scaling.getKind()) {
  case ScalingKind::PerTensor:
    scheme.kind = numerics::ScalingKind::PerTensor;
    break;
  case ScalingKind::PerRow:
    scheme.kind = numerics::ScalingKind::PerRow;
    break;
  case ScalingKind::PerGroup:
    scheme.kind = numerics::ScalingKind::PerGroup;
    break;
  case ScalingKind::MXFP8:
    scheme.kind = numerics::ScalingKind::MXFP8;
    break;
  case ScalingKind::TwoLevel:
    scheme.kind = numerics::ScalingKind::TwoLevel;
    break;
  }
  scheme.blockRows = scaling.getBlockRows();
  scheme.blockCols = scaling.getBlockCols();
  scheme.global = scaling.getGlobal() == GlobalScope::Row
                      ? numerics::GlobalScope::Row
                      : numerics::GlobalScope::Tensor;
  return scheme;
}

static compiler::FloatType getFloatType(Type type) {
  if (type.isF32())
    return compiler::FloatType::F32;
  if (type.isF16())
    return compiler::FloatType::F16;
  return compiler::FloatType::BF16;
}

static std::optional<compiler::FloatType> getElementFloatType(Value value) {
  if (!value)
    return std::nullopt;
  return getFloatType(cast<RankedTensorType>(value.getType()).getElementType());
}

/// The spec's fold for the attribute's value, and back.
static numerics::BlockScaleFold getBlockScaleFold(BlockScaleFold value) {
  switch (value) {
  case BlockScaleFold::None:
    return numerics::BlockScaleFold::None;
  case BlockScaleFold::K128:
    return numerics::BlockScaleFold::K128;
  case BlockScaleFold::Row:
    return numerics::BlockScaleFold::Row;
  }
  return numerics::BlockScaleFold::None;
}

/// The op's `fold` attribute for the spec's fold: none when unset, or
/// when no operand has block factors to fold. A spec whose kernel folds A
/// is the op that folds by rows (its getFoldingKernelSpec gives it back).
static FoldAttr getFoldAttr(MLIRContext *context,
                            const compiler::GemmSpec &spec) {
  const std::optional<numerics::BlockScaleFold> fold =
      spec.kernelFoldsA ? numerics::BlockScaleFold::Row : spec.fold;
  if (!fold || (!numerics::isFoldable(spec.aScaling) &&
                !numerics::isFoldable(spec.bScaling)))
    return FoldAttr();
  switch (*fold) {
  case numerics::BlockScaleFold::None:
    return FoldAttr::get(context, BlockScaleFold::None);
  case numerics::BlockScaleFold::K128:
    return FoldAttr::get(context, BlockScaleFold::K128);
  case numerics::BlockScaleFold::Row:
    return FoldAttr::get(context, BlockScaleFold::Row);
  }
  return FoldAttr();
}

/// The op's `mma` attribute for `type`; none for Auto.
static MmaTypeAttr getMmaTypeAttr(MLIRContext *context,
                                  compiler::MmaType type) {
  switch (type) {
  case compiler::MmaType::Auto:
    return MmaTypeAttr();
  case compiler::MmaType::FP8:
    return MmaTypeAttr::get(context, MmaType::FP8);
  case compiler::MmaType::F16:
    return MmaTypeAttr::get(context, MmaType::F16);
  }
  return MmaTypeAttr();
}

/// What moss.gemm and moss.grouped_gemm state alike.
template <class OpT>
static compiler::GemmSpec getSpecOf(OpT op, GemmShape shape) {
  compiler::GemmSpec spec;
  spec.m =
      ShapedType::isDynamic(shape.m) ? compiler::GemmSpec::kDynamic : shape.m;
  spec.n = shape.n;
  spec.k = shape.k;
  spec.a = getFp8Format(op.getA());
  spec.b = getFp8Format(op.getB());
  spec.aScaling = getScalingScheme(op.getAScaling());
  spec.bScaling = getScalingScheme(op.getBScaling());
  spec.out = getFloatType(
      cast<RankedTensorType>(op.getResult().getType()).getElementType());
  if constexpr (!std::is_same_v<OpT, KGroupedGemmOp>)
    spec.bias = getElementFloatType(op.getBias());
  spec.accumulate = getElementFloatType(op.getC());
  if (std::optional<APFloat> beta = op.getBeta())
    spec.beta = beta->convertToFloat();
  spec.amax = static_cast<bool>(op.getAmax());
  spec.promoteK = op.getPromoteK().value_or(0);
  if (std::optional<MmaType> mma = op.getMma())
    spec.mma =
        *mma == MmaType::F16 ? compiler::MmaType::F16 : compiler::MmaType::FP8;
  if constexpr (!std::is_same_v<OpT, KGroupedGemmOp>)
    if (FoldAttr fold = op.getFoldAttr())
      spec.fold = getBlockScaleFold(fold.getValue());
  return spec;
}

compiler::GemmSpec mlir::moss::getGemmSpec(GemmOp op, GemmShape shape) {
  return getSpecOf(op, shape);
}

compiler::GemmSpec mlir::moss::getGemmSpec(GroupedGemmOp op, GemmShape shape) {
  compiler::GemmSpec spec = getSpecOf(op, shape);
  spec.m = compiler::GemmSpec::kDynamic;
  spec.groups = shape.groups;
  spec.maskedGroups = static_cast<bool>(op.getCounts());
  return spec;
}

compiler::GemmSpec mlir::moss::getGemmSpec(KGroupedGemmOp op, GemmShape shape) {
  compiler::GemmSpec spec = getSpecOf(op, shape);
  spec.k = compiler::GemmSpec::kDynamic;
  spec.groups = shape.groups;
  spec.groupedK = true;
  return spec;
}

//===----------------------------------------------------------------------===//
// Tiling
//===----------------------------------------------------------------------===//

compiler::TileConfig mlir::moss::getTileConfig(TilingAttr attr) {
  compiler::TileConfig tiling;
  tiling.tileM = attr.getTileM();
  tiling.tileN = attr.getTileN();
  tiling.stages = attr.getStages();
  tiling.clusterM = attr.getClusterM();
  tiling.clusterN = attr.getClusterN();
  tiling.raster = attr.getRaster() == RasterOrder::AlongN
                      ? compiler::RasterOrder::AlongN
                      : compiler::RasterOrder::AlongM;
  tiling.swizzle = attr.getSwizzle();
  tiling.splitK = attr.getSplitK();
  if (std::optional<TilingSource> source = attr.getSource())
    tiling.source = *source == TilingSource::Database
                        ? compiler::TilingSource::Database
                        : compiler::TilingSource::Heuristic;
  return tiling;
}

TilingAttr mlir::moss::getTilingAttr(MLIRContext *context,
                                     const compiler::TileConfig &tiling) {
  std::optional<TilingSource> source;
  if (tiling.source)
    source = *tiling.source == compiler::TilingSource::Database
                 ? TilingSource::Database
                 : TilingSource::Heuristic;
  return TilingAttr::get(context, tiling.tileM, tiling.tileN, tiling.stages,
                         tiling.clusterM, tiling.clusterN,
                         tiling.raster == compiler::RasterOrder::AlongN
                             ? RasterOrder::AlongN
                             : RasterOrder::AlongM,
                         tiling.swizzle, tiling.splitK, source);
}

//===----------------------------------------------------------------------===//
// Spec -> op
//===----------------------------------------------------------------------===//

static Type getFp8Type(MLIRContext *context, numerics::Fp8Format format) {
  if (format == numerics::Fp8Format::E5M2)
    return Float8E5M2Type::get(context);
  return Float8E4M3FNType::get(context);
}

static Type getType(MLIRContext *context, compiler::FloatType type) {
  switch (type) {
  case compiler::FloatType::BF16:
    return BFloat16Type::get(context);
  case compiler::FloatType::F16:
    return Float16Type::get(context);
  case compiler::FloatType::F32:
    return Float32Type::get(context);
  }
  return Float32Type::get(context);
}

static ScalingAttr getScalingAttr(Location loc,
                                  const numerics::ScalingScheme &scheme) {
  ScalingKind kind = ScalingKind::PerTensor;
  switch (scheme.kind) {
  case numerics::ScalingKind::PerTensor:
    kind = ScalingKind::PerTensor;
    break;
  case numerics::ScalingKind::PerRow:
    kind = ScalingKind::PerRow;
    break;
  case numerics::ScalingKind::PerGroup:
    kind = ScalingKind::PerGroup;
    break;
  case numerics::ScalingKind::MXFP8:
    kind = ScalingKind::MXFP8;
    break;
  case numerics::ScalingKind::TwoLevel:
    kind = ScalingKind::TwoLevel;
    break;
  }
  GlobalScope global = scheme.global == numerics::GlobalScope::Row
                           ? GlobalScope::Row
                           : GlobalScope::Tensor;
  return ScalingAttr::getChecked(loc, loc.getContext(), kind, scheme.blockRows,
                                 scheme.blockCols, global);
}

/// buildGemmFunction of a k-grouped spec: A [M, ?], B [N, ?] (K is the
/// launch's), the offsets [G + 1], C and the result [G, M, N].
static func::FuncOp buildKGroupedGemmFunction(OpBuilder &builder, Location loc,
                                              const compiler::GemmSpec &spec,
                                              StringRef name,
                                              ScalingAttr aScaling,
                                              ScalingAttr bScaling) {
  MLIRContext *context = builder.getContext();
  const int64_t k = ShapedType::kDynamic, groups = spec.groups;
  SmallVector<Type> inputs;
  auto add = [&](Type type) {
    if (type)
      inputs.push_back(type);
  };
  for (auto [rows, format, scaling] : {std::tuple{spec.m, spec.a, aScaling},
                                       std::tuple{spec.n, spec.b, bScaling}}) {
    add(RankedTensorType::get({rows, k}, getFp8Type(context, format)));
    add(scaling.getLocalScaleType(rows, k));
    add(scaling.getGlobalScaleType(rows));
  }
  add(RankedTensorType::get({groups + 1}, builder.getI32Type()));
  if (spec.accumulate)
    add(RankedTensorType::get({groups, spec.m, spec.n},
                              getType(context, *spec.accumulate)));
  SmallVector<Type> results = {RankedTensorType::get(
      {groups, spec.m, spec.n}, getType(context, spec.out))};
  if (spec.amax)
    results.push_back(RankedTensorType::get({1}, Float32Type::get(context)));

  auto func = func::FuncOp::create(builder, loc, name,
                                   builder.getFunctionType(inputs, results));
  Block *body = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(body);
  unsigned next = 0;
  auto arg = [&](bool present) -> Value {
    return present ? body->getArgument(next++) : Value();
  };
  Value a = arg(true), aLocal = arg(aScaling.hasLocalScales()),
        aGlobal = arg(aScaling.hasGlobalScales());
  Value b = arg(true), bLocal = arg(bScaling.hasLocalScales()),
        bGlobal = arg(bScaling.hasGlobalScales());
  Value offsets = arg(true), c = arg(spec.accumulate.has_value());
  FloatAttr beta =
      spec.beta ? builder.getF32FloatAttr(*spec.beta) : FloatAttr();
  IntegerAttr promoteK =
      spec.promoteK ? builder.getI64IntegerAttr(spec.promoteK) : IntegerAttr();
  auto gemm = KGroupedGemmOp::create(
      builder, loc, results, a, aScaling, aLocal, aGlobal, b, bScaling, bLocal,
      bGlobal, offsets, c, beta, /*tiling=*/TilingAttr(), promoteK,
      getMmaTypeAttr(context, spec.mma));
  func::ReturnOp::create(builder, loc, gemm->getResults());
  return func;
}

FailureOr<func::FuncOp>
mlir::moss::buildGemmFunction(OpBuilder &builder, Location loc,
                              const compiler::GemmSpec &spec, StringRef name,
                              bool dynamicM) {
  MLIRContext *context = builder.getContext();
  ScalingAttr aScaling = getScalingAttr(loc, spec.aScaling);
  ScalingAttr bScaling = getScalingAttr(loc, spec.bScaling);
  if (!aScaling || !bScaling)
    return failure();

  if (spec.groupedK)
    return buildKGroupedGemmFunction(builder, loc, spec, name, aScaling,
                                     bScaling);
  int64_t m = dynamicM || spec.isDynamicM() ? ShapedType::kDynamic : spec.m;
  Type out = getType(context, spec.out);
  SmallVector<Type> inputs;
  auto add = [&](Type type) { inputs.push_back(type); };
  // A grouped GEMM's B and its scales are [groups, ...] of one expert's,
  // one global per expert or per row ([groups] or [groups, N]), and its
  // bias [groups, N].
  const int64_t groups = spec.groups;
  auto perExpert = [&](RankedTensorType type, bool perRow = true) {
    if (!groups || !type)
      return type;
    SmallVector<int64_t> shape = {groups};
    if (perRow)
      llvm::append_range(shape, type.getShape());
    return RankedTensorType::get(shape, type.getElementType());
  };
  // Operand order of the op: a, aLocal, aGlobal, b, bLocal, bGlobal,
  // (offsets or counts,) bias, c.
  add(RankedTensorType::get({m, spec.k}, getFp8Type(context, spec.a)));
  if (RankedTensorType local = aScaling.getLocalScaleType(m, spec.k))
    add(local);
  if (RankedTensorType global = aScaling.getGlobalScaleType(m))
    add(global);
  add(perExpert(
      RankedTensorType::get({spec.n, spec.k}, getFp8Type(context, spec.b))));
  if (RankedTensorType local = bScaling.getLocalScaleType(spec.n, spec.k))
    add(perExpert(local));
  if (RankedTensorType global = bScaling.getGlobalScaleType(spec.n))
    add(perExpert(global, spec.bScaling.globalPerRow()));
  if (groups)
    add(RankedTensorType::get({spec.maskedGroups ? groups : groups + 1},
                              builder.getI32Type()));
  if (spec.bias)
    add(perExpert(
        RankedTensorType::get({spec.n}, getType(context, *spec.bias))));
  if (spec.accumulate)
    add(RankedTensorType::get({m, spec.n}, getType(context, *spec.accumulate)));

  SmallVector<Type> results = {RankedTensorType::get({m, spec.n}, out)};
  if (spec.amax)
    results.push_back(RankedTensorType::get({1}, Float32Type::get(context)));

  auto func = func::FuncOp::create(builder, loc, name,
                                   builder.getFunctionType(inputs, results));
  Block *body = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(body);

  unsigned next = 0;
  auto arg = [&]() -> Value { return body->getArgument(next++); };
  Value a = arg();
  Value aLocal = aScaling.hasLocalScales() ? arg() : Value();
  Value aGlobal = aScaling.hasGlobalScales() ? arg() : Value();
  Value b = arg();
  Value bLocal = bScaling.hasLocalScales() ? arg() : Value();
  Value bGlobal = bScaling.hasGlobalScales() ? arg() : Value();
  Value rows = groups ? arg() : Value();
  Value bias = spec.bias ? arg() : Value();
  Value c = spec.accumulate ? arg() : Value();
  FloatAttr beta =
      spec.beta ? builder.getF32FloatAttr(*spec.beta) : FloatAttr();
  IntegerAttr promoteK =
      spec.promoteK ? builder.getI64IntegerAttr(spec.promoteK) : IntegerAttr();
  MmaTypeAttr mma = getMmaTypeAttr(context, spec.mma);
  FoldAttr fold = getFoldAttr(context, spec);

  Operation *gemm;
  if (groups)
    gemm = GroupedGemmOp::create(
        builder, loc, results, a, aScaling, aLocal, aGlobal, b, bScaling,
        bLocal, bGlobal, spec.maskedGroups ? Value() : rows,
        spec.maskedGroups ? rows : Value(), bias, c, beta,
        /*tiling=*/TilingAttr(), promoteK, mma, fold);
  else
    gemm = GemmOp::create(builder, loc, results, a, aScaling, aLocal, aGlobal,
                          b, bScaling, bLocal, bGlobal, bias, c, beta,
                          /*tiling=*/TilingAttr(), promoteK, mma, fold);
  func::ReturnOp::create(builder, loc, gemm->getResults());
  return func;
}
