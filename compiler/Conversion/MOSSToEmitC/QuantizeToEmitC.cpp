//===- QuantizeToEmitC.cpp - moss-convert-quantize-to-emitc ---------------===//
//
// Lowers each moss.quantize kernel function to the EmitC form of its
// quantizer source (moss/Compiler/QuantizerSource.h, which the runtime
// compiles too):
//
//   emitc.file "moss_quantize_<hash>" {
//     emitc.verbatim "#include \"moss/quantize/rowwise.cuh\""
//     emitc.verbatim "using Config = moss::quantize::RowwiseConfig<...>;"
//     ...                        (one verbatim per line of the source)
//   }
//
// The text is moss::compiler::generateQuantizerSource's, so what the passes
// emit and what GpuQuantizer compiles are one source.
//
//===----------------------------------------------------------------------===//

#include "KernelFunction.h"

#include "moss/Compiler/QuantizerSource.h"
#include "moss/Conversion/Passes.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"
#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/xxhash.h"

namespace mlir::moss {
#define GEN_PASS_DEF_CONVERTQUANTIZETOEMITC
#include "moss/Conversion/Passes.h.inc"
} // namespace mlir::moss

using namespace mlir;
using namespace mlir::moss;

namespace numerics = ::moss::numerics;
namespace compiler = ::moss::compiler;

/// The quantizer description of `op`; an error on `op` for what the GPU
/// quantizers do not take.
static FailureOr<compiler::QuantizeSpec> getQuantizeSpec(QuantizeOp op) {
  auto input = cast<RankedTensorType>(op.getInput().getType());
  compiler::QuantizeSpec spec;
  Type element = input.getElementType();
  if (element.isF32())
    spec.input = compiler::InputType::F32;
  else if (element.isBF16())
    spec.input = compiler::InputType::BF16;
  else
    return op.emitOpError() << "has " << element
                            << " input; the GPU quantizers take f32 or bf16";
  spec.options.scheme = getScalingScheme(op.getScaling());
  spec.options.format = getFp8Format(op.getCodes());
  spec.options.transpose = op.getTranspose();
  // K is compiled into the row-wise kernel, and a transposed input's rows
  // are its K. The other extent is a launch argument: any size the checks
  // accept stands in for a dynamic one.
  const int64_t kAxis = spec.options.transpose ? 0 : 1;
  if (input.isDynamicDim(kAxis))
    return op.emitOpError()
           << "needs a static K (the input's "
           << (spec.options.transpose ? "rows, as it is transposed"
                                      : "columns")
           << ") to lower to a quantizer kernel";
  auto extent = [&](unsigned dim) {
    return input.isDynamicDim(dim) ? std::max<int64_t>(
                                         1, spec.options.scheme.blockRows)
                                   : input.getDimSize(dim);
  };
  spec.rows = extent(0);
  spec.cols = extent(1);
  return spec;
}

namespace {

class ConvertQuantizeToEmitCPass
    : public mlir::moss::impl::ConvertQuantizeToEmitCBase<
          ConvertQuantizeToEmitCPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    SmallVector<QuantizeOp> ops;
    getOperation().walk([&](QuantizeOp op) { ops.push_back(op); });

    // Check every op and build every source before rewriting any.
    struct Unit {
      Operation *func;
      Location loc;
      std::string name, source;
    };
    SmallVector<Unit> units;
    for (QuantizeOp op : ops) {
      FailureOr<FunctionOpInterface> func = getKernelFunction(op);
      if (failed(func))
        return signalPassFailure();
      FailureOr<compiler::QuantizeSpec> spec = getQuantizeSpec(op);
      if (failed(spec))
        return signalPassFailure();
      // Named by the hash of the source with the runtime's kernel names.
      llvm::Expected<compiler::QuantizerSource> plain =
          compiler::generateQuantizerSource(*spec);
      if (!plain) {
        op.emitOpError() << llvm::toString(plain.takeError());
        return signalPassFailure();
      }
      std::string name =
          "moss_quantize_" +
          llvm::utohexstr(llvm::xxh3_64bits(llvm::StringRef(plain->source)),
                          /*LowerCase=*/true, 16);
      llvm::Expected<compiler::QuantizerSource> named =
          compiler::generateQuantizerSource(*spec, /*withScale=*/false, name);
      if (!named) {
        op.emitOpError() << llvm::toString(named.takeError());
        return signalPassFailure();
      }
      units.push_back({func->getOperation(), op.getLoc(), name,
                       std::move(named->source)});
    }

    OpBuilder builder(&getContext());
    llvm::StringSet<> emitted;
    for (Unit &unit : units) {
      if (emitted.insert(unit.name).second) {
        builder.setInsertionPoint(unit.func);
        auto file = emitc::FileOp::create(builder, unit.loc, unit.name);
        builder.setInsertionPointToStart(&file.getBodyRegion().front());
        SmallVector<StringRef> lines;
        StringRef(unit.source).rtrim('\n').split(lines, '\n');
        for (StringRef line : lines)
          emitc::VerbatimOp::create(builder, unit.loc, line);
      }
      unit.func->erase();
    }
  }
};

} // namespace
