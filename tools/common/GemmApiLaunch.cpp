//===- GemmApiLaunch.cpp - Parameter sets through moss::GemmRunner --------===//

#include "GemmApiLaunch.h"

#include "moss/Gemm/Gemm.h"

#include <memory>

using namespace moss;

static llvm::Expected<GemmRunner &> getRunner() {
  static std::unique_ptr<GemmRunner> runner;
  if (!runner) {
    llvm::Expected<std::unique_ptr<GemmRunner>> created =
        GemmRunner::create(runtime::getDefaultKernelCache());
    if (!created)
      return created.takeError();
    runner = std::move(*created);
  }
  return *runner;
}

static GemmOptions getOptions(const std::optional<compiler::TileConfig> &tiling,
                              bool quick, bool foldAInKernel) {
  GemmOptions options;
  options.tiling = tiling;
  options.compileMode = quick ? GemmCompileMode::Quick : GemmCompileMode::Full;
  options.foldAInKernel = foldAInKernel;
  return options;
}

llvm::Error
gemmtest::prepareThroughApi(const compiler::GemmSpec &spec, int64_t m,
                            const std::optional<compiler::TileConfig> &tiling,
                            bool quick, std::string &description,
                            compiler::TileConfig &planned, bool foldAInKernel) {
  llvm::Expected<GemmRunner &> runner = getRunner();
  if (!runner)
    return runner.takeError();
  llvm::Expected<const GemmKernelInfo *> info =
      runner->prepare(spec, m, getOptions(tiling, quick, foldAInKernel));
  if (!info)
    return info.takeError();
  description = (*info)->kernelName + " " + (*info)->tiling.str();
  planned = (*info)->tiling;
  return llvm::Error::success();
}

llvm::Error
gemmtest::runThroughApi(const compiler::GemmSpec &spec, int64_t m,
                        const std::optional<compiler::TileConfig> &tiling,
                        bool quick, const ApiBuffers &b, CUstream stream,
                        bool foldAInKernel) {
  llvm::Expected<GemmRunner &> runner = getRunner();
  if (!runner)
    return runner.takeError();
  GemmBuffers buffers;
  buffers.a = {b.aCodes, b.aLocal, b.aLocalCount, b.aGlobal, b.aGlobalCount};
  buffers.b = {b.bCodes, b.bLocal, b.bLocalCount, b.bGlobal, b.bGlobalCount};
  buffers.d = b.d;
  buffers.bias = b.bias;
  buffers.c = b.c;
  buffers.amax = b.amax;
  return runner->run(spec, m, buffers, stream,
                     getOptions(tiling, quick, foldAInKernel));
}
