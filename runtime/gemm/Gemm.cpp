//===- Gemm.cpp - Block-scaled FP8 GEMMs on the GPU -----------------------===//
//
// The one place (with moss-jit) where the compiler and the runtime meet: a
// GemmSpec is planned once per spec and M bucket (compiler::planGemm), its
// plan's kernel is written by compiler::generateGemmSource (the text the
// moss.gemm pipeline emits, without building IR: docs/ARCHITECTURE.md),
// compiled through the kernel cache to a cubin, and launched with the tensor
// maps and arguments of docs/GEMM-KERNEL-ABI.md. The launch geometry comes
// from the templates' own host-side plan (moss/gemm/config.cuh), the same
// formulas the kernel is compiled with. The checks live in GemmChecks.cpp,
// the keys of plans and kernels in GemmKeys.cpp, the compiles and the
// tiered compile in GemmCompile.cpp, the fold passes in GemmFold.cpp, the
// workspaces in GemmWorkspaces.cpp, the tuning database files in
// TuningDatabaseFiles.cpp.
//
//===----------------------------------------------------------------------===//

#include "moss/Gemm/Gemm.h"

#include "GemmChecks.h"
#include "GemmRunnerState.h"
#include "GemmWorkspaces.h"
#include "TuningDatabaseFiles.h"

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSource.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Cuda/TensorMaps.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace llvm;
using namespace moss;
using compiler::FloatType;
using compiler::GemmPlan;
using compiler::GemmSpec;
using numerics::ScalingScheme;

//===----------------------------------------------------------------------===//
// Planning and launching
//===----------------------------------------------------------------------===//

GemmRunner::GemmRunner(runtime::KernelCache &cache, compiler::TargetInfo target)
    : cache(cache), target(std::move(target)),
      tuningFiles(std::make_unique<detail::TuningDatabaseFiles>()),
      workspaces(std::make_unique<Workspaces>()),
      folder(std::make_unique<runtime::GpuFolder>(cache,
                                                  int(this->target.smCount))),
      foldWorkspaces(std::make_unique<Workspaces>()) {}

GemmRunner::~GemmRunner() = default;

std::unique_ptr<GemmRunner>
GemmRunner::createForTarget(runtime::KernelCache &cache,
                            compiler::TargetInfo target) {
  return std::unique_ptr<GemmRunner>(new GemmRunner(cache, std::move(target)));
}

Expected<std::unique_ptr<GemmRunner>>
GemmRunner::create(runtime::KernelCache &cache) {
  Expected<runtime::DeviceProperties> device =
      runtime::queryCurrentDeviceProperties();
  if (!device)
    return device.takeError();
  if (device->ccMajor != 9)
    return runtime::invalidArgument(
        "the GEMM kernels need a Hopper GPU (sm_90a); this one "
        "is compute capability " +
        Twine(device->ccMajor) + "." + Twine(device->ccMinor));
  compiler::TargetInfo target;
  target.smCount = unsigned(device->smCount);
  target.sharedMemoryPerBlock = unsigned(device->maxSharedOptin);
  target.arch = device->arch;
  return std::unique_ptr<GemmRunner>(new GemmRunner(cache, std::move(target)));
}

static bool isVerbose(const GemmOptions &options) {
  if (options.verbose)
    return true;
  const char *env = std::getenv("MOSS_VERBOSE");
  return env && *env && StringRef(env) != "0";
}

Expected<std::pair<GemmPlan, std::string>>
GemmRunner::makePlan(const GemmSpec &spec, int64_t m,
                     const GemmOptions &options) {
  compiler::GemmPlanOptions planOptions;
  planOptions.rows = m;
  planOptions.tiling = options.tiling;
  planOptions.foldAInKernel = options.foldAInKernel;
  planOptions.quickCompile = options.compileMode == GemmCompileMode::Quick;
  std::string path;
  std::shared_ptr<const compiler::TuningDatabase> database;
  const bool verbose = isVerbose(options);
  if (!options.tiling) {
    path = options.tuningDatabase ? *options.tuningDatabase
                                  : getDefaultTuningDatabasePath(cache);
    if (!path.empty())
      database = tuningFiles->get(path, spec, verbose);
  }
  planOptions.database = database.get();
  auto note = [&](const Twine &text) {
    if (verbose)
      errs() << "moss: note: " << path << ": " << text << "\n";
  };
  planOptions.onNote = note;
  Expected<GemmPlan> plan = compiler::planGemm(spec, target, planOptions);
  if (!plan)
    return plan.takeError();
  return std::pair{std::move(*plan), std::move(path)};
}

Expected<GemmRunner::Planned *>
GemmRunner::getPlanned(const GemmSpec &spec, int64_t m,
                       const GemmOptions &options) {
  Key key = moss::detail::makePlanKey(spec, m, options);
  if (auto it = plans.find(key); it != plans.end())
    return it->second.get();
  // First time for this spec, fold and M bucket.
  Expected<std::pair<GemmPlan, std::string>> plan = makePlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  Expected<Kernel *> kernel =
      compileKernel(plan->first, plan->second, options.compileMode);
  if (!kernel)
    return kernel.takeError();
  auto planned = std::make_unique<Planned>();
  planned->plan = std::move(plan->first);
  planned->kernel = *kernel;
  return (plans[key] = std::move(planned)).get();
}

Expected<GemmPlan> GemmRunner::getPlan(const GemmSpec &spec, int64_t m,
                                       const GemmOptions &options) {
  // The checks of a launch of m rows, buffers aside.
  if (Error e = detail::checkGemmRows(spec, m))
    return std::move(e);
  Expected<std::pair<GemmPlan, std::string>> plan = makePlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return std::move(plan->first);
}

Expected<compiler::KernelSource>
GemmRunner::getSource(const GemmSpec &spec, int64_t m,
                      const GemmOptions &options) {
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return compiler::generateGemmSource(*plan, target);
}

Expected<const GemmKernelInfo *>
GemmRunner::prepare(const GemmSpec &spec, int64_t m,
                    const GemmOptions &options) {
  if (Error e = checkGemmSpec(spec))
    return std::move(e);
  Expected<Planned *> planned = getPlanned(spec, m, options);
  if (!planned)
    return planned.takeError();
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold = moss::detail::getFoldSpec(
            (*planned)->plan, operandB, std::max<int64_t>(m, 1)))
      if (Error e = folder->prepare(*fold))
        return std::move(e);
  Kernel &kernel = *(*planned)->kernel;
  if (Error e = switchToFullKernel(kernel, options.compileMode ==
                                               GemmCompileMode::Full))
    return std::move(e);
  return &kernel.info;
}

Expected<const GemmKernelInfo *>
GemmRunner::prepare(const GemmSpec &spec, const GemmOptions &options) {
  // A k-grouped GEMM's plan is the same at every K (its launch extent).
  return prepare(
      spec, spec.groupedK ? 0 : compiler::getTuningM(spec, compiler::kAssumedM),
      options);
}

Error GemmRunner::run(const GemmSpec &asked, int64_t m,
                      const GemmBuffers &given, CUstream stream,
                      const GemmOptions &options) {
  if (Error e = checkGemmLaunch(asked, m, given))
    return e;
  return launchChecked(asked, m, given, stream, options);
}

Error GemmRunner::launchChecked(const GemmSpec &asked, int64_t m,
                                const GemmBuffers &given, CUstream stream,
                                const GemmOptions &options) {
  Expected<Planned *> planned = getPlanned(asked, m, options);
  if (!planned)
    return planned.takeError();
  const GemmPlan &plan = (*planned)->plan;
  Kernel &kernel = *(*planned)->kernel;
  if (Error e = switchToFullKernel(kernel, options.compileMode ==
                                               GemmCompileMode::Full))
    return e;
  // From here on, the GEMM the kernel computes (folded operands, if any).
  // A k-grouped launch gives K (`m`), and its M is the spec's.
  const GemmSpec &spec = plan.kernel;
  const int64_t k = spec.groupedK ? m : spec.k;
  // With K = 0 every expert has no stages and no map is read, but a map
  // needs a size of at least 1.
  const int64_t mapK = std::max<int64_t>(k, 128);
  if (spec.groupedK)
    m = spec.m;
  if (m == 0)
    return Error::success();
  GemmBuffers buffers = given;
  if (plan.passFoldsA || plan.passFoldsB) {
    Expected<GemmBuffers> folded = foldOperands(plan, m, given, stream);
    if (!folded)
      return folded.takeError();
    buffers = *folded;
  }

  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  const bool newK = kernel.mapK != mapK;
  kernel.mapK = mapK;
  if (kernel.mapACodes != buffers.a.codes || kernel.mapARows != m || newK) {
    kernel.mapACodes = 0;
    if (Error e = runtime::encodeOperandMap(
            *api, kernel.mapA, buffers.a.codes, m, mapK,
            detail::getBoxRowsA(kernel.plan, int(m)), "A"))
      return e;
    kernel.mapACodes = buffers.a.codes;
    kernel.mapARows = m;
  }
  if (kernel.mapBCodes != buffers.b.codes || newK) {
    kernel.mapBCodes = 0;
    if (Error e = runtime::encodeOperandMap(*api, kernel.mapB, buffers.b.codes,
                                            getGemmRowsB(spec), mapK,
                                            kernel.plan.boxRowsB, "B"))
      return e;
    kernel.mapBCodes = buffers.b.codes;
  }
  // A k-grouped output holds every expert's M rows.
  const int64_t rowsD = getGemmRowsD(spec, m);
  if (kernel.plan.usesTmaD &&
      (kernel.mapDPointer != buffers.d || kernel.mapDRows != rowsD)) {
    kernel.mapDPointer = 0;
    if (Error e =
            runtime::encodeOutputMap(*api, kernel.mapD, buffers.d, rowsD,
                                     spec.n, compiler::getByteWidth(spec.out),
                                     kernel.plan.boxD[0], kernel.plan.boxD[1]))
      return e;
    kernel.mapDPointer = buffers.d;
    kernel.mapDRows = rowsD;
  }

  auto pointer = [](CUdeviceptr p) { return reinterpret_cast<void *>(p); };
  detail::KernelArgs args{};
  args.m = int(m);
  args.d = pointer(buffers.d);
  args.aLocal = pointer(buffers.a.localScales);
  args.aGlobal = static_cast<const float *>(pointer(buffers.a.globalScales));
  args.bLocal = pointer(buffers.b.localScales);
  args.bGlobal = static_cast<const float *>(pointer(buffers.b.globalScales));
  args.bias = pointer(buffers.bias);
  args.c = pointer(buffers.c);
  // The call's own: plans are shared by specs that differ only in beta.
  args.beta = asked.beta.value_or(1.0f);
  args.amax = static_cast<float *>(pointer(buffers.amax));
  args.groupOffsets = static_cast<const int *>(pointer(buffers.groupOffsets));
  args.k = int(k);
  if (kernel.plan.slicedAccumulators) {
    detail::WorkspaceSize size = detail::getWorkspaceSize(kernel.plan, int(m));
    Expected<CUdeviceptr> workspace =
        workspaces->get(*api, stream, size.bytes, size.zeroBytes);
    if (!workspace)
      return workspace.takeError();
    args.workspace = pointer(*workspace);
  }

  runtime::LaunchConfig launch;
  launch.grid[0] = detail::getGridSize(kernel.plan, int(m), kernel.slots);
  launch.block[0] = kernel.info.threads;
  launch.sharedMemoryBytes = kernel.info.sharedBytes;
  launch.cluster[0] = kernel.info.clusterSize;
  launch.sharedMemoryLimitSet = true;
  launch.stream = stream;
  void *params[] = {&kernel.mapA, &kernel.mapB, &kernel.mapD, &args};
  return runtime::launchKernel(kernel.function, launch, params);
}

Error moss::gemm(const GemmSpec &spec, int64_t m, const GemmBuffers &buffers,
                 CUstream stream, const GemmOptions &options) {
  Expected<runtime::CurrentContext> context = runtime::getCurrentContext();
  if (!context)
    return context.takeError();
  // By context ID: a destroyed context's handle can come back for a new one.
  thread_local std::unordered_map<unsigned long long,
                                  std::unique_ptr<GemmRunner>>
      runners;
  std::unique_ptr<GemmRunner> &runner = runners[context->id];
  if (!runner) {
    Expected<std::unique_ptr<GemmRunner>> created =
        GemmRunner::create(runtime::getDefaultKernelCache());
    if (!created) {
      runners.erase(context->id);
      return created.takeError();
    }
    runner = std::move(*created);
  }
  return runner->run(spec, m, buffers, stream, options);
}
