//===- GemmToEmitC.cpp - moss-convert-gemm-to-emitc -----------------------===//
//
// Lowers each moss.gemm kernel function to the EmitC form of the CUDA C++
// translation unit of docs/GEMM-KERNEL-ABI.md:
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

/// The header every GEMM translation unit includes.
static constexpr llvm::StringLiteral kKernelHeader = "moss/gemm/kernel.cuh";
/// The alias of the configuration inside the unit.
static constexpr llvm::StringLiteral kConfigAlias = "MossGemmConfig";

namespace gemm_kernel = ::moss::gemm_kernel;

static const char *getFormatConstant(int format) {
  return format == gemm_kernel::kE5M2 ? "moss::gemm_kernel::kE5M2"
                                      : "moss::gemm_kernel::kE4M3";
}

static const char *getScaleConstant(int scale) {
  switch (scale) {
  case gemm_kernel::kPerTensor:
    return "moss::gemm_kernel::kPerTensor";
  case gemm_kernel::kPerRow:
    return "moss::gemm_kernel::kPerRow";
  case gemm_kernel::kPerGroup:
    return "moss::gemm_kernel::kPerGroup";
  case gemm_kernel::kMXFP8:
    return "moss::gemm_kernel::kMXFP8";
  case gemm_kernel::kTwoLevel:
    return "moss::gemm_kernel::kTwoLevel";
  }
  llvm_unreachable("unknown scaling kind");
}

static const char *getTypeConstant(int type) {
  switch (type) {
  case gemm_kernel::kBF16:
    return "moss::gemm_kernel::kBF16";
  case gemm_kernel::kF16:
    return "moss::gemm_kernel::kF16";
  case gemm_kernel::kF32:
    return "moss::gemm_kernel::kF32";
  case gemm_kernel::kNone:
    return "moss::gemm_kernel::kNone";
  }
  llvm_unreachable("unknown float type");
}

static const char *getBool(bool value) { return value ? "true" : "false"; }

/// The optional 26th to 29th parameters (ForcePromoteK, QuickCompile,
/// F16Mma, FoldA), up to the last one that is set; "" when none is.
static std::string getOptionalArguments(const gemm_kernel::Params &p) {
  const std::string values[] = {
      llvm::formatv(", /*ForcePromoteK=*/{0}", p.forcePromoteK).str(),
      std::string(", /*QuickCompile=*/") + getBool(p.quickCompile),
      std::string(", /*F16Mma=*/") + getBool(p.f16Mma),
      std::string(", /*FoldA=*/") + getBool(p.foldA)};
  const bool set[] = {p.forcePromoteK != 0, p.quickCompile, p.f16Mma, p.foldA};
  int last = -1;
  for (int i = 0; i < 4; ++i)
    if (set[i])
      last = i;
  std::string text;
  for (int i = 0; i <= last; ++i)
    text += values[i];
  return text;
}

/// The template arguments of moss::gemm_kernel::Config, one source line each as
/// docs/GEMM-KERNEL-ABI.md lays them out, the last closing the list: the
/// parameters of compiler::getTemplateParams, the mapping the runtime's
/// launch plan reads too.
static SmallVector<std::string>
getConfigArguments(const compiler::GemmSpec &spec,
                   const compiler::TileConfig &tiling, bool quickCompile) {
  const gemm_kernel::Params p =
      compiler::getTemplateParams(spec, tiling, quickCompile);
  auto operand = [](char name, int scale, int blockRows, int block,
                    bool globalRow) {
    return llvm::formatv("    /*Scale{0}=*/{1}, /*BlockRows{0}=*/{2}, "
                         "/*Block{0}=*/{3}, /*GlobalRow{0}=*/{4},",
                         name, getScaleConstant(scale), blockRows, block,
                         getBool(globalRow))
        .str();
  };
  return {llvm::formatv("    /*M=*/{0}, /*N=*/{1}, /*K=*/{2},", p.m, p.n, p.k),
          llvm::formatv("    /*ElemA=*/{0}, /*ElemB=*/{1},",
                        getFormatConstant(p.elemA), getFormatConstant(p.elemB)),
          operand('A', p.scaleA, p.blockRowsA, p.blockA, p.globalRowA),
          operand('B', p.scaleB, p.blockRowsB, p.blockB, p.globalRowB),
          llvm::formatv("    /*Out=*/{0}, /*Bias=*/{1}, /*Accum=*/{2},",
                        getTypeConstant(p.out), getTypeConstant(p.bias),
                        getTypeConstant(p.accum)),
          llvm::formatv("    /*Amax=*/{0},", getBool(p.amax)),
          llvm::formatv("    /*TileM=*/{0}, /*TileN=*/{1}, /*Stages=*/{2}, "
                        "/*ClusterM=*/{3}, /*ClusterN=*/{4},",
                        p.tileM, p.tileN, p.stages, p.clusterM, p.clusterN),
          llvm::formatv(
              "    /*RasterAlongN=*/{0}, /*Swizzle=*/{1}, /*SplitK=*/{2}{3}>;",
              getBool(p.rasterAlongN), p.swizzle, p.splitK,
              getOptionalArguments(p))};
}

/// "moss_gemm_" and 16 hex digits of the XXH3 hash of the configuration
/// text: a function of the op's content only, the same in every process.
static std::string getKernelName(ArrayRef<std::string> configArguments) {
  std::string text = llvm::join(configArguments, "\n");
  uint64_t hash = llvm::xxh3_64bits(llvm::StringRef(text));
  return "moss_gemm_" + llvm::utohexstr(hash, /*LowerCase=*/true, 16);
}

/// Builds the emitc.file of `op` before `func`, or reuses an equal one.
static void buildTranslationUnit(OpBuilder &builder, GemmOp op,
                                 const compiler::GemmSpec &spec,
                                 TilingAttr tilingAttr, bool quickCompile,
                                 Operation *func, llvm::StringSet<> &emitted) {
  compiler::TileConfig tiling = getTileConfig(tilingAttr);
  SmallVector<std::string> arguments =
      getConfigArguments(spec, tiling, quickCompile);
  std::string name = getKernelName(arguments);
  if (!emitted.insert(name).second)
    return;

  MLIRContext *context = builder.getContext();
  Location loc = op.getLoc();
  builder.setInsertionPoint(func);
  auto file = emitc::FileOp::create(builder, loc, name);
  file->setAttr("moss.tiling", tilingAttr);
  builder.setInsertionPointToStart(&file.getBodyRegion().front());

  emitc::IncludeOp::create(builder, loc, kKernelHeader);
  emitc::VerbatimOp::create(builder, loc, "");
  emitc::VerbatimOp::create(
      builder, loc,
      (llvm::Twine("using ") + kConfigAlias + " = moss::gemm_kernel::Config<")
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
       (llvm::Twine("__launch_bounds__(") + kConfigAlias + "::kThreads, 1)")
           .str()}));
  Block *body = kernel.addEntryBlock();
  builder.setInsertionPointToStart(body);
  emitc::CallOpaqueOp::create(
      builder, loc, TypeRange(), "moss::gemm_kernel::run", body->getArguments(),
      /*args=*/ArrayAttr(),
      builder.getArrayAttr({emitc::OpaqueAttr::get(context, kConfigAlias)}));
  emitc::ReturnOp::create(builder, loc, Value());
}

namespace {

class ConvertGemmToEmitCPass
    : public mlir::moss::impl::ConvertGemmToEmitCBase<ConvertGemmToEmitCPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<GemmOp> gemms;
    module.walk([&](GemmOp op) { gemms.push_back(op); });

    // Check every op before rewriting any.
    SmallVector<std::pair<GemmOp, Operation *>> kernels;
    for (GemmOp op : gemms) {
      FailureOr<FunctionOpInterface> func = getKernelFunction(op);
      if (failed(func))
        return signalPassFailure();
      if (failed(checkStaticNK(op, getGemmShape(op),
                               "moss-convert-gemm-to-emitc")))
        return signalPassFailure();
      if (!op.getTilingAttr()) {
        op.emitOpError() << "has no tiling attribute; expected a "
                            "#moss.tiling (run moss-select-tiling first)";
        return signalPassFailure();
      }
      kernels.push_back({op, func->getOperation()});
    }

    OpBuilder builder(&getContext());
    llvm::StringSet<> emitted;
    for (auto [op, func] : kernels) {
      // The kernel of the folded operands, when the op folds (with
      // fold-a-in-kernel, the kernel that folds A itself where it can).
      const compiler::GemmSpec asked = getGemmSpec(op, getGemmShape(op));
      const compiler::GemmSpec spec = compiler::getPlannedKernelSpec(
          asked, compiler::GemmSpec::kDynamic, foldAInKernel);
      buildTranslationUnit(builder, op, spec, op.getTilingAttr(), quickCompile,
                           func, emitted);
      func->erase();
    }
  }
};

} // namespace
