//===- Pipelines.cpp - The moss compiler pipeline -------------------------===//
//
// Every stage from a GemmSpec to CUDA C++ is in this file: buildGemmPipeline
// lists the passes, compileGemm builds the input and runs them, then the C++
// emitter. PTX and cubin come after, in the runtime (NVRTC).
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Pipelines.h"

#include "moss/Conversion/Passes.h"
#include "moss/Dialect/MOSS/IR/MOSSDialect.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"
#include "moss/Dialect/MOSS/Transforms/Passes.h"
#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"
#include "moss/Target/Cuda/TranslateToCuda.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::moss;

namespace compiler = ::moss::compiler;

//===----------------------------------------------------------------------===//
// The pipeline
//===----------------------------------------------------------------------===//

void mlir::moss::buildGemmPipeline(OpPassManager &pm,
                                   const GemmPipelineOptions &options) {
  // 1. Shapes: unify M, N and K; fix M when asked; N and K must be static.
  pm.addPass(createSpecializeShapes(SpecializeShapesOptions{options.m}));
  // 2. Tiling: the heuristic's #moss.tiling unless one is given.
  SelectTilingOptions tiling;
  tiling.smCount = options.smCount;
  tiling.sharedMemoryBytes = options.sharedMemoryBytes;
  tiling.assumedM = options.assumedM;
  tiling.allowSplitK = options.allowSplitK;
  tiling.foldAInKernel = options.foldAInKernel;
  tiling.tuningDatabase = options.tuningDatabase;
  tiling.arch = options.arch;
  pm.addPass(createSelectTiling(tiling));
  // 3. Lowering: each kernel function becomes an emitc.file.
  pm.addPass(createConvertGemmToEmitC(
      ConvertGemmToEmitCOptions{options.quickCompile, options.foldAInKernel}));
  if (options.lowerQuantize)
    pm.addPass(createConvertQuantizeToEmitC());
  // 4. (translateToCudaUnits) MLIR's C++ emitter prints the files.
}

void mlir::moss::registerGemmPipeline() {
  PassPipelineRegistration<GemmPipelineOptions>(
      "moss-gemm-pipeline",
      "Specialize, tile and lower moss.gemm kernels to EmitC (then "
      "moss-translate --moss-to-cuda)",
      buildGemmPipeline);
}

//===----------------------------------------------------------------------===//
// compileGemm
//===----------------------------------------------------------------------===//

namespace {

/// Hands the IR after each pass to a stage callback.
class StageInstrumentation : public PassInstrumentation {
public:
  using Callback = std::function<void(llvm::StringRef, llvm::StringRef)>;
  explicit StageInstrumentation(Callback callback)
      : callback(std::move(callback)) {}

  void runAfterPass(Pass *pass, Operation *op) override {
    std::string text;
    llvm::raw_string_ostream os(text);
    op->print(os);
    callback(pass->getArgument(), text);
  }

private:
  Callback callback;
};

} // namespace

/// The kernel of a moss.gemm (moss.grouped_gemm for a spec with groups)
/// built from `spec` (a spec whose kernel folds A
/// becomes an op that folds by rows, which getFoldingKernelSpec gives back)
/// on the tiling `getTiling` gives once the op has verified (its errors say
/// more than the planner's), through the pipeline and the C++ emitter.
static llvm::Expected<compiler::KernelSource> compileGemmOp(
    const compiler::GemmSpec &spec,
    llvm::function_ref<llvm::Expected<compiler::TileConfig>()> getTiling,
    bool quickCompile, const compiler::TargetInfo &target,
    const compiler::StageCallback &onStage) {
  DialectRegistry registry;
  registry.insert<MOSSDialect, func::FuncDialect, emitc::EmitCDialect>();
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  // The errors name the op; its generic form would only add noise.
  context.printOpOnDiagnostic(false);

  // Diagnostics become the error's message.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Error)
      return success();
    if (!diagnostics.empty())
      diagnostics += "\n";
    diagnostics += diag.str();
    for (const Diagnostic &note : diag.getNotes())
      diagnostics += "\n  note: " + note.str();
    return success();
  });
  auto fail = [&](llvm::StringRef what) {
    return llvm::createStringError(
        "cannot compile the GEMM " + spec.str() + ": " +
        (diagnostics.empty() ? what.str() : diagnostics));
  };

  // The input: one function holding the moss.gemm, M dynamic, with the
  // plan's tiling (moss-select-tiling keeps it).
  Location loc = UnknownLoc::get(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder builder(&context);
  builder.setInsertionPointToEnd(module->getBody());
  FailureOr<func::FuncOp> func =
      buildGemmFunction(builder, loc, spec, "moss_gemm", /*dynamicM=*/true);
  if (failed(func))
    return fail("invalid scaling scheme");
  if (failed(verify(*module)))
    return fail("the built moss.gemm does not verify");
  llvm::Expected<compiler::TileConfig> tiling = getTiling();
  if (!tiling)
    return fail(llvm::toString(tiling.takeError()));
  TilingAttr tilingAttr = getTilingAttr(&context, *tiling);
  func->walk([&](GemmOp op) { op.setTilingAttr(tilingAttr); });
  func->walk([&](GroupedGemmOp op) { op.setTilingAttr(tilingAttr); });
  func->walk([&](KGroupedGemmOp op) { op.setTilingAttr(tilingAttr); });
  if (onStage) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    onStage(compiler::kStageInput, text);
  }

  // The passes.
  GemmPipelineOptions pipeline;
  pipeline.m = spec.isDynamicM() ? 0 : spec.m;
  pipeline.smCount = target.smCount;
  pipeline.sharedMemoryBytes = target.sharedMemoryPerBlock;
  pipeline.quickCompile = quickCompile;
  // A spec whose kernel folds A becomes an op that folds by rows (its
  // getFoldingKernelSpec gives the spec back).
  pipeline.foldAInKernel = spec.kernelFoldsA;
  pipeline.lowerQuantize = false; // the module holds one moss.gemm
  PassManager pm = PassManager::on<ModuleOp>(&context);
  buildGemmPipeline(pm, pipeline);
  if (onStage)
    pm.addInstrumentation(std::make_unique<StageInstrumentation>(onStage));
  if (failed(pm.run(*module)))
    return fail("the GEMM pipeline failed");

  // The C++ text.
  FailureOr<SmallVector<CudaTranslationUnit>> units =
      translateToCudaUnits(*module);
  if (failed(units))
    return fail("the C++ emitter failed");
  if (units->size() != 1 || !units->front().tiling)
    return fail("expected one translation unit with a tiling");

  compiler::KernelSource kernel;
  kernel.source = std::move(units->front().source);
  kernel.kernelName = std::move(units->front().kernelName);
  kernel.tiling = getTileConfig(units->front().tiling);
  kernel.spec = spec;
  kernel.quickCompile = quickCompile;
  compiler::ResourceUsage usage = compiler::estimateResources(spec, kernel.tiling, target);
  kernel.launch.threads = usage.threads;
  kernel.launch.sharedBytes = usage.sharedBytes;
  kernel.launch.cluster[0] =
      static_cast<unsigned>(kernel.tiling.clusterM * kernel.tiling.clusterN);
  if (onStage)
    onStage(compiler::kStageCuda, kernel.source);
  return kernel;
}

llvm::Expected<compiler::KernelSource>
compiler::compileGemm(const GemmPlan &plan, const TargetInfo &target,
                      const StageCallback &onStage) {
  return compileGemmOp(
      plan.kernel, [&] { return llvm::Expected<TileConfig>(plan.tiling); },
      plan.quickCompile, target, onStage);
}

llvm::Expected<compiler::KernelSource>
compiler::compileGemm(const GemmSpec &spec, const TargetInfo &target,
                      const CompileOptions &options) {
  if (llvm::Error error = checkShapes(spec))
    return std::move(error);
  // The tiling is decided here, once (the pass keeps it); the op is the
  // spec as asked (its fold, if any, is the passes' to apply).
  auto plan = [&]() -> llvm::Expected<TileConfig> {
    GemmPlanOptions planOptions;
    planOptions.tiling = options.tiling;
    planOptions.quickCompile = options.quickCompile;
    planOptions.heuristic.assumedM = options.assumedM;
    planOptions.heuristic.allowSplitK = options.allowSplitK;
    llvm::Expected<GemmPlan> planned = planGemm(spec, target, planOptions);
    if (!planned)
      return planned.takeError();
    return planned->tiling;
  };
  return compileGemmOp(spec, plan, options.quickCompile, target,
                       options.onStage);
}
