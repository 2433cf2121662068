//===- GemmSource.cpp - The GEMM kernel's translation unit ----------------===//

#include "moss/Compiler/GemmSource.h"

#include "moss/Compiler/TemplateParams.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

using namespace moss;
using namespace moss::compiler;

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
  return "/*unknown scaling*/-1";
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
  return "/*unknown type*/-1";
}

static const char *getBool(bool value) { return value ? "true" : "false"; }

/// The optional 26th to 32nd parameters (ForcePromoteK, QuickCompile,
/// F16Mma, FoldA, Groups, MaskedGroups, GroupedK), up to the last one that
/// is set; "" when none is.
static std::string getOptionalArguments(const gemm_kernel::Params &p) {
  const std::string values[] = {
      llvm::formatv(", /*ForcePromoteK=*/{0}", p.forcePromoteK).str(),
      std::string(", /*QuickCompile=*/") + getBool(p.quickCompile),
      std::string(", /*F16Mma=*/") + getBool(p.f16Mma),
      std::string(", /*FoldA=*/") + getBool(p.foldA),
      llvm::formatv(", /*Groups=*/{0}", p.groups).str(),
      std::string(", /*MaskedGroups=*/") + getBool(p.maskedGroups),
      std::string(", /*GroupedK=*/") + getBool(p.groupedK)};
  const bool set[] = {p.forcePromoteK != 0, p.quickCompile, p.f16Mma,  p.foldA,
                      p.groups != 0,        p.maskedGroups, p.groupedK};
  int last = -1;
  for (int i = 0; i < 7; ++i)
    if (set[i])
      last = i;
  std::string text;
  for (int i = 0; i <= last; ++i)
    text += values[i];
  return text;
}

llvm::SmallVector<std::string>
compiler::getGemmConfigArguments(const gemm_kernel::Params &p) {
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

std::string
compiler::getGemmKernelName(llvm::ArrayRef<std::string> configArguments) {
  std::string text = llvm::join(configArguments, "\n");
  uint64_t hash = llvm::xxh3_64bits(llvm::StringRef(text));
  return "moss_gemm_" + llvm::utohexstr(hash, /*LowerCase=*/true, 16);
}

GemmTranslationUnit
compiler::generateGemmTranslationUnit(const gemm_kernel::Params &p) {
  llvm::SmallVector<std::string> arguments = getGemmConfigArguments(p);
  GemmTranslationUnit unit;
  unit.kernelName = getGemmKernelName(arguments);
  // The text MLIR's C++ emitter prints for moss-convert-gemm-to-emitc's
  // emitc.file (GemmSourceTest holds the two equal).
  std::string &s = unit.source;
  s += std::string("#include \"") + kGemmKernelHeader + "\"\n\n";
  s += std::string("using ") + kGemmConfigAlias +
       " = moss::gemm_kernel::Config<\n";
  for (const std::string &line : arguments)
    s += line + "\n";
  s += "\n";
  s += std::string("extern \"C\" __global__ __launch_bounds__(") +
       kGemmConfigAlias + "::kThreads, 1) void " + unit.kernelName +
       "(const __grid_constant__ CUtensorMap v1, const __grid_constant__ "
       "CUtensorMap v2, const __grid_constant__ CUtensorMap v3, const "
       "moss::gemm_kernel::Args v4) {\n";
  s += std::string("  moss::gemm_kernel::run<") + kGemmConfigAlias +
       ">(v1, v2, v3, v4);\n";
  s += "  return;\n}\n\n";
  return unit;
}

KernelSource compiler::generateGemmSource(const GemmPlan &plan,
                                          const TargetInfo &target) {
  GemmTranslationUnit unit = generateGemmTranslationUnit(
      getTemplateParams(plan.kernel, plan.tiling, plan.quickCompile));
  KernelSource kernel;
  kernel.source = std::move(unit.source);
  kernel.kernelName = std::move(unit.kernelName);
  kernel.tiling = plan.tiling;
  kernel.spec = plan.kernel;
  kernel.quickCompile = plan.quickCompile;
  ResourceUsage usage = estimateResources(plan.kernel, plan.tiling, target);
  kernel.launch.threads = usage.threads;
  kernel.launch.sharedBytes = usage.sharedBytes;
  kernel.launch.cluster[0] =
      static_cast<unsigned>(plan.tiling.clusterM * plan.tiling.clusterN);
  return kernel;
}
