//===- GemmCompile.cpp - A runner's kernels: compile, load, tiers ---------===//
//
// A plan's kernel written by compiler::generateGemmSource, compiled through
// the kernel cache (NVRTC or the disk) and loaded with its launch geometry;
// the tiered compile, whose quick variant runs while the full kernel
// compiles on a background thread (docs/COMPILER.md).
//
//===----------------------------------------------------------------------===//

#include "GemmRunnerState.h"

#include "moss/Compiler/GemmSource.h"
#include "moss/Runtime/Cuda/Module.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

using namespace llvm;
using namespace moss;
using compiler::GemmPlan;
using compiler::GemmSpec;

/// The kernel of `plan` built into `cache` (or found there).
static Expected<GemmRunner::BuiltKernel>
buildPlanned(runtime::KernelCache &cache, const GemmPlan &plan,
             const compiler::TargetInfo &target) {
  compiler::KernelSource source = compiler::generateGemmSource(plan, target);
  runtime::CompileOptions nvrtc;
  nvrtc.arch = target.arch;
  Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
      cache.getOrCompile(source.source, nvrtc);
  if (!entry)
    return entry.takeError();
  return GemmRunner::BuiltKernel{std::move(source), std::move(*entry)};
}

Expected<GemmRunner::BuiltKernel>
GemmRunner::build(const GemmSpec &spec, int64_t m, const GemmOptions &options) {
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return buildPlanned(cache, *plan, target);
}

Expected<unsigned> GemmRunner::warm(const GemmSpec &spec, int64_t m,
                                    const GemmOptions &options) {
  uint64_t compilesBefore = cache.stats().compiles;
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  if (Error e = buildPlanned(cache, *plan, target).takeError())
    return std::move(e);
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold =
            moss::detail::getFoldSpec(*plan, operandB, m))
      if (Error e = runtime::compileFoldKernel(cache, *fold).takeError())
        return std::move(e);
  return unsigned(cache.stats().compiles - compilesBefore);
}

/// `mode`, except that $MOSS_TIERED_COMPILE=0 turns Tiered into Full (no
/// background thread). Tiered and Full kernels share their keys.
static GemmCompileMode resolveCompileMode(GemmCompileMode mode) {
  const char *env = std::getenv("MOSS_TIERED_COMPILE");
  return mode == GemmCompileMode::Tiered && env && StringRef(env) == "0"
             ? GemmCompileMode::Full
             : mode;
}

Expected<GemmRunner::Kernel *>
GemmRunner::compileKernel(const GemmPlan &plan, const std::string &database,
                          GemmCompileMode mode) {
  Key key = moss::detail::makeKernelKey(plan);
  if (auto it = kernels.find(key); it != kernels.end())
    return it->second.get();
  mode = resolveCompileMode(mode);

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::optional<compiler::KernelSource> source =
      compiler::generateGemmSource(plan, target);
  runtime::CompileOptions nvrtc;
  nvrtc.arch = target.arch;

  // A tiered compile starts with the quick variant when the full kernel is
  // not cached and the variant differs from it (kernels that promote;
  // docs/COMPILER.md).
  std::optional<compiler::KernelSource> quick;
  if (mode == GemmCompileMode::Tiered) {
    Expected<std::shared_ptr<const runtime::KernelEntry>> cached =
        cache.find(source->source, nvrtc);
    if (!cached)
      return cached.takeError();
    if (!*cached) {
      Expected<GemmPlan> quickPlan =
          compiler::getQuickCompilePlan(plan, target);
      if (!quickPlan)
        return quickPlan.takeError();
      std::optional<compiler::KernelSource> variant =
          compiler::generateGemmSource(*quickPlan, target);
      Expected<detail::TemplatePlan> fullGeometry =
          detail::planFromTemplates(*source);
      Expected<detail::TemplatePlan> quickGeometry =
          detail::planFromTemplates(*variant);
      if (!fullGeometry)
        return fullGeometry.takeError();
      if (!quickGeometry)
        return quickGeometry.takeError();
      if (quickGeometry->groupBlocks != fullGeometry->groupBlocks ||
          variant->tiling != source->tiling)
        quick = std::move(*variant);
    }
  }
  const compiler::KernelSource &first = quick ? *quick : *source;
  auto t1 = Clock::now();
  Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
      cache.getOrCompile(first.source, nvrtc);
  if (!entry)
    return entry.takeError();

  auto kernel = std::make_unique<Kernel>();
  std::memset(&kernel->mapD, 0, sizeof(kernel->mapD));
  if (Error e = loadKernel(*kernel, first, std::move(*entry)))
    return std::move(e);
  GemmKernelInfo &info = kernel->info;
  info.tuningDatabase = database;
  info.quickCompile = first.quickCompile;
  info.pipelineSeconds = std::chrono::duration<double>(t1 - t0).count();
  info.cacheSeconds = std::chrono::duration<double>(Clock::now() - t1).count();
  if (quick) {
    // NVRTC and the disk cache only: the module is loaded on the caller's
    // thread, in its context, when the runner switches (switchToFullKernel).
    info.fullCompilePending = true;
    kernel->fullSource = std::move(*source);
    kernel->fullCompile = std::async(
        std::launch::async,
        [&cache = cache, text = kernel->fullSource->source, nvrtc] {
          auto start = Clock::now();
          Expected<std::shared_ptr<const runtime::KernelEntry>> compiled =
              cache.getOrCompile(text, nvrtc);
          detail::FullCompile result;
          if (compiled)
            result.entry = std::move(*compiled);
          else
            result.error = toString(compiled.takeError());
          result.seconds =
              std::chrono::duration<double>(Clock::now() - start).count();
          return result;
        });
  }
  return (kernels[key] = std::move(kernel)).get();
}

/// Loads `entry`, the cubin of `source`, as `kernel`'s function and fills in
/// its plan, persistent grid limit and info (all but the timings).
Error GemmRunner::loadKernel(
    Kernel &kernel, const compiler::KernelSource &source,
    std::shared_ptr<const runtime::KernelEntry> entry) {
  Expected<CUfunction> function = entry->getFunction(source.kernelName);
  if (!function)
    return function.takeError();
  Expected<detail::TemplatePlan> plan = detail::planFromTemplates(source);
  if (!plan)
    return plan.takeError();
  if (Error e = runtime::setSharedMemoryLimit(*function, plan->sharedBytes))
    return e;
  runtime::LaunchConfig config;
  config.block[0] = plan->threads;
  config.cluster[0] = plan->clusterSize;
  config.sharedMemoryBytes = plan->sharedBytes;
  Expected<int> slots =
      runtime::getPersistentSlots(*function, config, int(target.smCount));
  if (!slots)
    return slots.takeError();
  kernel.entry = std::move(entry);
  kernel.function = *function;
  kernel.plan = *plan;
  kernel.slots = *slots;
  GemmKernelInfo &info = kernel.info;
  info.kernelName = source.kernelName;
  info.tiling = source.tiling;
  info.threads = plan->threads;
  info.sharedBytes = plan->sharedBytes;
  info.clusterSize = plan->clusterSize;
  return Error::success();
}

/// Switches a tiered compile's kernel to the full one once its background
/// compile is done, or waits for it (`wait`). If that compile failed, the
/// quick variant (the same arithmetic) stays, with a warning.
Error GemmRunner::switchToFullKernel(Kernel &kernel, bool wait) {
  if (!kernel.fullCompile.valid() ||
      (!wait && kernel.fullCompile.wait_for(std::chrono::seconds(0)) !=
                    std::future_status::ready))
    return Error::success();
  detail::FullCompile done = kernel.fullCompile.get();
  compiler::KernelSource source = std::move(*kernel.fullSource);
  kernel.fullSource.reset();
  kernel.info.fullCompilePending = false;
  if (!done.entry) {
    errs() << "moss: warning: keeping the quick-compile kernel "
           << kernel.info.kernelName
           << ": its full kernel failed to compile: " << done.error << "\n";
    return Error::success();
  }
  // The variant's tiles may be narrower: the next launch encodes the
  // tensor maps for the full kernel's boxes.
  if (Error e = loadKernel(kernel, source, std::move(done.entry)))
    return e;
  kernel.mapACodes = kernel.mapBCodes = kernel.mapDPointer = 0;
  kernel.info.quickCompile = false;
  kernel.info.fullCompileSeconds = done.seconds;
  return Error::success();
}
