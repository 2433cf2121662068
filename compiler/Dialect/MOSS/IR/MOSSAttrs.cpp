//===- MOSSAttrs.cpp - moss attributes ------------------------------------===//

#include "moss/Dialect/MOSS/IR/MOSSAttrs.h"
#include "moss/Dialect/MOSS/IR/MOSSDialect.h"

#include "moss/Compiler/TilingLimits.h"
#include "moss/Numerics/Quantize.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::moss;

#include "moss/Dialect/MOSS/IR/MOSSEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moss/Dialect/MOSS/IR/MOSSAttrs.cpp.inc"

void MOSSDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moss/Dialect/MOSS/IR/MOSSAttrs.cpp.inc"
      >();
}

// Syntax: none | 128 | row (128 is the K extent of the fold's groups, as
// the CLIs and the C API spell it).
Attribute FoldAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess())
    return {};
  BlockScaleFold value;
  int64_t group = 0;
  StringRef keyword;
  OptionalParseResult integer = parser.parseOptionalInteger(group);
  if (integer.has_value()) {
    if (failed(*integer))
      return {};
    if (group != 128) {
      parser.emitError(loc, "expected a fold of none, 128 or row, got ")
          << group;
      return {};
    }
    value = BlockScaleFold::K128;
  } else if (succeeded(parser.parseOptionalKeyword(&keyword)) &&
             (keyword == "none" || keyword == "row")) {
    value = keyword == "none" ? BlockScaleFold::None : BlockScaleFold::Row;
  } else {
    parser.emitError(loc, "expected a fold of none, 128 or row");
    return {};
  }
  if (parser.parseGreater())
    return {};
  return FoldAttr::get(parser.getContext(), value);
}

void FoldAttr::print(AsmPrinter &printer) const {
  printer << '<';
  switch (getValue()) {
  case BlockScaleFold::None:
    printer << "none";
    break;
  case BlockScaleFold::K128:
    printer << "128";
    break;
  case BlockScaleFold::Row:
    printer << "row";
    break;
  }
  printer << '>';
}

// Syntax:
//   per_tensor | per_row | per_group RxB | mxfp8 [32]
//   | two_level [B] [, global = tensor|row]
// `moss` is read as two_level, the name the CLIs and the C API use.
Attribute ScalingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<ScalingKind> kind =
      keyword == "moss" ? ScalingKind::TwoLevel : symbolizeScalingKind(keyword);
  if (!kind) {
    parser.emitError(loc, "expected a scaling kind (per_tensor, per_row, "
                          "per_group, mxfp8, two_level or moss), got '")
        << keyword << "'";
    return {};
  }

  int64_t blockRows = 1;
  int64_t blockCols = 0;
  GlobalScope global = GlobalScope::Tensor;
  switch (*kind) {
  case ScalingKind::PerTensor:
  case ScalingKind::PerRow:
    break;
  case ScalingKind::PerGroup: {
    SmallVector<int64_t, 2> shape;
    SMLoc shapeLoc = parser.getCurrentLocation();
    if (parser.parseDimensionList(shape, /*allowDynamic=*/false,
                                  /*withTrailingX=*/false))
      return {};
    if (shape.size() != 2) {
      parser.emitError(shapeLoc, "expected a per_group block shape RxB, "
                                 "such as 1x128 or 128x128");
      return {};
    }
    blockRows = shape[0];
    blockCols = shape[1];
    break;
  }
  case ScalingKind::MXFP8:
  case ScalingKind::TwoLevel: {
    blockCols = ::moss::numerics::getDefaultBlockCols(
        *kind == ScalingKind::MXFP8 ? ::moss::numerics::ScalingKind::MXFP8
                                    : ::moss::numerics::ScalingKind::TwoLevel);
    OptionalParseResult block = parser.parseOptionalInteger(blockCols);
    if (block.has_value() && failed(*block))
      return {};
    if (*kind == ScalingKind::TwoLevel && succeeded(parser.parseOptionalComma())) {
      StringRef scope;
      SMLoc scopeLoc = parser.getCurrentLocation();
      if (parser.parseKeyword("global") || parser.parseEqual() ||
          parser.parseKeyword(&scope))
        return {};
      std::optional<GlobalScope> parsed = symbolizeGlobalScope(scope);
      if (!parsed) {
        parser.emitError(scopeLoc, "expected global = tensor or row, got '")
            << scope << "'";
        return {};
      }
      global = *parsed;
    }
    break;
  }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ScalingAttr>(loc, parser.getContext(), *kind,
                                        blockRows, blockCols, global);
}

void ScalingAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyScalingKind(getKind());
  switch (getKind()) {
  case ScalingKind::PerTensor:
  case ScalingKind::PerRow:
  case ScalingKind::MXFP8:
    break;
  case ScalingKind::PerGroup:
    printer << ' ' << getBlockRows() << 'x' << getBlockCols();
    break;
  case ScalingKind::TwoLevel:
    printer << ' ' << getBlockCols()
            << ", global = " << stringifyGlobalScope(getGlobal());
    break;
  }
  printer << '>';
}

LogicalResult
ScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                    ScalingKind kind, int64_t blockRows, int64_t blockCols,
                    GlobalScope global) {
  // Every block length must be a whole number of FP8 MMA K steps (32), so
  // that the GEMM can apply block scales between MMAs.
  auto verifyBlockCols = [&]() -> LogicalResult {
    if (blockCols < 32 || !llvm::isPowerOf2_64(blockCols))
      return emitError() << "block length along K must be a power of two of "
                            "at least 32, got "
                         << blockCols;
    return success();
  };
  switch (kind) {
  case ScalingKind::PerTensor:
  case ScalingKind::PerRow:
    if (blockRows != 1 || blockCols != 0 || global != GlobalScope::Tensor)
      return emitError() << stringifyScalingKind(kind)
                         << " takes no block shape or global scope";
    return success();
  case ScalingKind::PerGroup:
    if (failed(verifyBlockCols()))
      return failure();
    if (blockRows != 1 && blockRows != blockCols)
      return emitError() << "per_group blocks are 1x" << blockCols << " or "
                         << blockCols << "x" << blockCols << ", got "
                         << blockRows << "x" << blockCols;
    return success();
  case ScalingKind::MXFP8:
    if (blockCols != 32)
      return emitError() << "mxfp8 blocks are 32 elements long (OCP MX "
                            "v1.0), got "
                         << blockCols;
    return success();
  case ScalingKind::TwoLevel:
    return verifyBlockCols();
  }
  llvm_unreachable("unknown scaling kind");
}

bool ScalingAttr::hasLocalScales() const {
  ScalingKind kind = getKind();
  return kind == ScalingKind::PerGroup || kind == ScalingKind::MXFP8 ||
         kind == ScalingKind::TwoLevel;
}

bool ScalingAttr::hasE8M0LocalScales() const {
  return getKind() == ScalingKind::MXFP8 || getKind() == ScalingKind::TwoLevel;
}

bool ScalingAttr::hasGlobalScales() const {
  ScalingKind kind = getKind();
  return kind == ScalingKind::PerTensor || kind == ScalingKind::PerRow ||
         kind == ScalingKind::TwoLevel;
}

int64_t ScalingAttr::getKGranularity() const {
  return hasLocalScales() ? getBlockCols() : 1;
}

/// `size / block`, rounded up, keeping dynamic sizes dynamic.
static int64_t ceilDivDim(int64_t size, int64_t block) {
  return ShapedType::isDynamic(size) ? ShapedType::kDynamic
                                     : llvm::divideCeil(size, block);
}

RankedTensorType ScalingAttr::getLocalScaleType(int64_t rows, int64_t k) const {
  if (!hasLocalScales())
    return {};
  MLIRContext *ctx = getContext();
  Type element = hasE8M0LocalScales() ? Type(Float8E8M0FNUType::get(ctx))
                                      : Type(Float32Type::get(ctx));
  return RankedTensorType::get(
      {ceilDivDim(rows, getBlockRows()), ceilDivDim(k, getBlockCols())},
      element);
}

RankedTensorType ScalingAttr::getGlobalScaleType(int64_t rows) const {
  if (!hasGlobalScales())
    return {};
  bool perRow = getKind() == ScalingKind::PerRow ||
                (getKind() == ScalingKind::TwoLevel &&
                 getGlobal() == GlobalScope::Row);
  return RankedTensorType::get({perRow ? rows : 1},
                               Float32Type::get(getContext()));
}

//===----------------------------------------------------------------------===//
// TilingAttr
//===----------------------------------------------------------------------===//

LogicalResult TilingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t tileM, int64_t tileN, int64_t stages,
                                 int64_t clusterM, int64_t clusterN,
                                 RasterOrder raster, int64_t swizzle,
                                 int64_t splitK,
                                 std::optional<TilingSource> source) {
  // A thread block's tile is covered by 64-row wgmma instructions, one or
  // two consumer warpgroups; the wgmma N extent is a multiple of 8 up to 256.
  if (tileM != 64 && tileM != 128 && tileM != 256)
    return emitError() << "tile_m must be 64, 128 or 256 (whole 64-row "
                          "wgmma tiles for one or two consumer warpgroups), "
                          "got "
                       << tileM;
  if (tileN < 8 || tileN > 256 || tileN % 8 != 0)
    return emitError() << "tile_n must be a multiple of 8 from 8 to 256 (the "
                          "wgmma N extent), got "
                       << tileN;
  if (stages < 1 || stages > ::moss::compiler::kMaxTilingStages)
    return emitError() << "stages must be from 1 to "
                       << ::moss::compiler::kMaxTilingStages << ", got "
                       << stages;
  // Each size bounded first, so that their product cannot overflow.
  if (clusterM < 1 || clusterM > 8 || !llvm::isPowerOf2_64(clusterM) ||
      clusterN < 1 || clusterN > 8 || !llvm::isPowerOf2_64(clusterN) ||
      clusterM * clusterN > 8)
    return emitError() << "cluster_m and cluster_n must be powers of two "
                          "with at most 8 blocks per cluster (the portable "
                          "cluster size), got "
                       << clusterM << "x" << clusterN;
  if (swizzle < 1 || swizzle > 8 || !llvm::isPowerOf2_64(swizzle))
    return emitError() << "swizzle must be 1, 2, 4 or 8, got " << swizzle;
  if (splitK < 1 || splitK > ::moss::compiler::kMaxSplitK)
    return emitError() << "split_k must be from 1 to "
                       << ::moss::compiler::kMaxSplitK << ", got " << splitK;
  return success();
}
