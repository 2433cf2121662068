//===- GemmToEmitC.cpp - moss-convert-gemm-to-emitc -----------------------===//
//
// Lowers each moss.gemm and moss.grouped_gemm kernel function to the EmitC
// form of the CUDA C++ translation unit of docs/GEMM-KERNEL-ABI.md:
//
//   emitc.file "moss_gemm_<hash>" attributes {moss.tiling = #moss.tiling<..>} {
//     emitc.include "moss/gemm/kernel.cuh"
//     emitc.verbatim "using MossGemmConfig = moss::gemm_kernel::Config<"
//     emitc.verbatim "    /*M=*/-1, /*N=*/11008, /*K=*/4096,"   (one per line)
//     ...
//     emitc.func @moss_gemm_<hash>(%tmaA: !emitc.opaque<"const
//         __grid_constant__ CUtensorMap">, ..., %args: !emitc.opaque<"const
//         moss::gemm_kernel::Args">) attributes {specifiers = ["extern \"C\"",
//         "__global__", "__launch_bounds__(MossGemmConfig::kThreads, 1)"]} {
//       emitc.call_opaque "moss::gemm_kernel::run"(...) {template_args =
//           [#emitc.opaque<"MossGemmConfig">]}
//       emitc.return
//     }
//   }
//
// EmitC has no op for a template alias or a CUDA qualifier, so those are
// verbatim lines and function specifiers; everything else is structured.
//
//===----------------------------------------------------------------------===//

#include "KernelFunction.h"

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSource.h"
#include "moss/Compiler/TemplateParams.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Conversion/Passes.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"
#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

namespace mlir::moss {
#define GEN_PASS_DEF_CONVERTGEMMTOEMITC
#include "moss/Conversion/Passes.h.inc"
} // namespace mlir::moss

using namespace mlir;
using namespace mlir::moss;

namespace compiler = ::moss::compiler;

/// Builds the emitc.file of `op` before `func`, or reuses an equal one.
static void buildTranslationUnit(OpBuilder &builder, Operation *op,
                                 const compiler::GemmSpec &spec,
                                 TilingAttr tilingAttr, bool quickCompile,
                                 Operation *func, llvm::StringSet<> &emitted) {
  compiler::TileConfig tiling = getTileConfig(tilingAttr);
  SmallVector<std::string> arguments = compiler::getGemmConfigArguments(
      compiler::getTemplateParams(spec, tiling, quickCompile));
  std::string name = compiler::getGemmKernelName(arguments);
  if (!emitted.insert(name).second)
    return;

  MLIRContext *context = builder.getContext();
  Location loc = op->getLoc();
  builder.setInsertionPoint(func);
  auto file = emitc::FileOp::create(builder, loc, name);
  file->setAttr("moss.tiling", tilingAttr);
  builder.setInsertionPointToStart(&file.getBodyRegion().front());

  emitc::IncludeOp::create(builder, loc, compiler::kGemmKernelHeader);
  emitc::VerbatimOp::create(builder, loc, "");
  emitc::VerbatimOp::create(
      builder, loc,
      (llvm::Twine("using ") + compiler::kGemmConfigAlias +
       " = moss::gemm_kernel::Config<")
          .str());
  for (const std::string &line : arguments)
    emitc::VerbatimOp::create(builder, loc, line);
  emitc::VerbatimOp::create(builder, loc, "");

  // extern "C" __global__ void __launch_bounds__(...) name(
  //     const __grid_constant__ CUtensorMap tmaA, ... tmaB, ... tmaD,
  //     const moss::gemm_kernel::Args args)
  Type tensorMap =
      emitc::OpaqueType::get(context, "const __grid_constant__ CUtensorMap");
  Type args = emitc::OpaqueType::get(context, "const moss::gemm_kernel::Args");
  auto kernel = emitc::FuncOp::create(
      builder, loc, name,
      FunctionType::get(context, {tensorMap, tensorMap, tensorMap, args}, {}));
  kernel.setSpecifiersAttr(builder.getStrArrayAttr(
      {"extern \"C\"", "__global__",
       (llvm::Twine("__launch_bounds__(") + compiler::kGemmConfigAlias +
        "::kThreads, 1)")
           .str()}));
  Block *body = kernel.addEntryBlock();
  builder.setInsertionPointToStart(body);
  emitc::CallOpaqueOp::create(
      builder, loc, TypeRange(), "moss::gemm_kernel::run", body->getArguments(),
      /*args=*/ArrayAttr(),
      builder.getArrayAttr(
          {emitc::OpaqueAttr::get(context, compiler::kGemmConfigAlias)}));
  emitc::ReturnOp::create(builder, loc, Value());
}

namespace {

class ConvertGemmToEmitCPass
    : public mlir::moss::impl::ConvertGemmToEmitCBase<ConvertGemmToEmitCPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    // Check every op before rewriting any.
    SmallVector<Kernel> kernels;
    WalkResult walk = getOperation().walk([&](Operation *op) {
      LogicalResult checked = success();
      if (auto gemm = dyn_cast<GemmOp>(op))
        checked = check(gemm, kernels);
      else if (auto grouped = dyn_cast<GroupedGemmOp>(op))
        checked = check(grouped, kernels);
      else if (auto alongK = dyn_cast<KGroupedGemmOp>(op))
        checked = check(alongK, kernels);
      return failed(checked) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    OpBuilder builder(&getContext());
    llvm::StringSet<> emitted;
    for (const Kernel &kernel : kernels) {
      buildTranslationUnit(builder, kernel.op, kernel.spec, kernel.tiling,
                           quickCompile, kernel.func, emitted);
      kernel.func->erase();
    }
  }

private:
  /// A GEMM op checked, with what its translation unit needs.
  struct Kernel {
    Operation *op;
    Operation *func;
    compiler::GemmSpec spec;
    TilingAttr tiling;
  };

  template <class OpT>
  LogicalResult check(OpT op, SmallVectorImpl<Kernel> &kernels) {
    FailureOr<FunctionOpInterface> func = getKernelFunction(op);
    if (failed(func))
      return failure();
    GemmShape shape = getGemmShape(op);
    if (failed(checkStaticNK(op, shape, "moss-convert-gemm-to-emitc")))
      return failure();
    if (!op.getTilingAttr())
      return op.emitOpError() << "has no tiling attribute; expected a "
                                 "#moss.tiling (run moss-select-tiling first)";
    // The kernel of the folded operands, when the op folds (with
    // fold-a-in-kernel, the kernel that folds A itself where it can).
    const compiler::GemmSpec spec = compiler::getPlannedKernelSpec(
        getGemmSpec(op, shape), compiler::GemmSpec::kDynamic, foldAInKernel);
    kernels.push_back({op, func->getOperation(), spec, op.getTilingAttr()});
    return success();
  }
};

} // namespace
