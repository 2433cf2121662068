//===- Quantizer.cpp - The quantizers on the GPU --------------------------===//

#include "moss/Runtime/Api/Quantizer.h"

#include "moss/Numerics/Fold.h"
#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/quantize/args.cuh"
#include "moss/quantize/geometry.cuh"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <climits>
#include <future>
#include <optional>

using namespace llvm;
using namespace moss::numerics;
using namespace moss::compiler;

namespace moss::runtime {

namespace {
using Family = QuantizerVariant::Family;
/// The most CTAs down one column strip (a grid's y extent).
constexpr int64_t kMaxGridY = 65535;
} // namespace

//===----------------------------------------------------------------------===//
// GpuQuantizer
//===----------------------------------------------------------------------===//

struct GpuQuantizer::Plan {
  /// The quantize pass's program, and the reduce pass's (null without one).
  std::shared_ptr<const KernelEntry> entry, reduceEntry;
  CUfunction reduce = nullptr;
  CUfunction quantize = nullptr;
  /// The column pass (QuantizerVariant::columnMax).
  CUfunction columns = nullptr;
  QuantizerVariant variant;
  /// Dynamic shared memory per CTA: the row-wise kernel's staged rows, the
  /// square-block kernel's block.
  unsigned sharedBytes = 0;
  /// Row-wise kernel: rows in flight per CTA. Row-wise and transposed
  /// kernels: CTAs resident per SM.
  int stages = 1;
  int ctasPerSm = 1;
};

struct GpuQuantizer::Batch {
  quantize::BatchStrides strides;
  /// The casts (the grid's z).
  int64_t count;
};

/// Shared memory of an SM given to the row-wise kernel's staged rows: of
/// sm_90's 228 KiB, the rest holds the static tables (fold) and scratch.
constexpr int64_t kRowStageBudget = 192 * 1024;

/// Sizes the row-wise kernel's stages: as many CTAs per SM as its registers
/// allow while each keeps two rows in flight, then as many stages as the
/// budget gives each.
static Error planRowStages(GpuQuantizer::Plan &plan, const QuantizeSpec &spec) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  const int threads = plan.variant.threads;
  // A stage holds one row segment (the whole row unless it is too long).
  const int64_t rowBytes =
      plan.variant.segment * (spec.input == InputType::F32 ? 4 : 2);
  int byRegisters = 0;
  if (Error e = checkCuda(api->occupancyMaxActiveBlocksPerMultiprocessor(
                              &byRegisters, plan.quantize, threads, 0),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    return e;
  int64_t ctas = std::clamp<int64_t>(
      std::min<int64_t>(byRegisters, kRowStageBudget / (2 * rowBytes)), 1,
      32);
  plan.stages = int(std::clamp<int64_t>(kRowStageBudget / (ctas * rowBytes),
                                        1, quantize::kMaxRowStages));
  plan.sharedBytes = unsigned(plan.stages * rowBytes);
  for (CUfunction function : {plan.reduce, plan.quantize})
    if (function)
      if (Error e = setSharedMemoryLimit(function, plan.sharedBytes))
        return e;
  int resident = 0;
  if (Error e = checkCuda(api->occupancyMaxActiveBlocksPerMultiprocessor(
                              &resident, plan.quantize, threads,
                              plan.sharedBytes),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    return e;
  if (resident < 1)
    return invalidArgument("the row-wise quantizer of K=" + Twine(spec.cols) +
                           " does not fit an SM (" + Twine(plan.sharedBytes) +
                           " bytes of shared memory)");
  plan.ctasPerSm = resident;
  return Error::success();
}

GpuQuantizer::GpuQuantizer(KernelCache &cache, int smCount)
    : cache(cache), smCount(smCount) {}

GpuQuantizer::~GpuQuantizer() = default;

Expected<CompiledQuantizer>
compileQuantizer(KernelCache &cache, const QuantizeSpec &spec, bool withScale) {
  Expected<QuantizerSource> source = generateQuantizerSource(spec, withScale);
  if (!source)
    return source.takeError();
  // NVRTC compiles the reduce pass's program, the quantize pass's and, for
  // a dual layout in two kernels, the transposed spec's in parallel: a
  // first call waits for the longest of them, not for their sum.
  std::future<Error> transposed;
  if (chooseQuantizerVariant(spec, withScale).columnMax)
    transposed =
        std::async(std::launch::async, [&cache, t = getTransposedSpec(spec)] {
          return compileQuantizer(cache, t, false).takeError();
        });
  using EntryOrError = Expected<std::shared_ptr<const KernelEntry>>;
  std::future<EntryOrError> reduce;
  if (!source->reduceSource.empty())
    reduce =
        std::async(std::launch::async, [&cache, &text = source->reduceSource] {
          return cache.getOrCompile(text, CompileOptions());
        });
  EntryOrError entry =
      cache.getOrCompile(source->quantizeSource, CompileOptions());
  // Every compile finished (they read `source`) before any return.
  Error errors = entry ? Error::success() : entry.takeError();
  std::shared_ptr<const KernelEntry> reduceEntry;
  if (reduce.valid()) {
    EntryOrError reduced = reduce.get();
    if (reduced)
      reduceEntry = std::move(*reduced);
    else
      errors = joinErrors(std::move(errors), reduced.takeError());
  }
  if (transposed.valid())
    errors = joinErrors(std::move(errors), transposed.get());
  if (errors)
    return std::move(errors);
  return CompiledQuantizer{std::move(*source), std::move(*entry),
                           std::move(reduceEntry)};
}

/// Whether `cache` holds every program of `spec`'s own source.
static Expected<bool> isCached(KernelCache &cache, const QuantizeSpec &spec,
                               bool withScale) {
  Expected<QuantizerSource> source = generateQuantizerSource(spec, withScale);
  if (!source)
    return source.takeError();
  for (const std::string *program :
       {&source->quantizeSource, &source->reduceSource}) {
    if (program->empty())
      continue;
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.find(*program, CompileOptions());
    if (!entry)
      return entry.takeError();
    if (!*entry)
      return false;
  }
  return true;
}

Expected<QuantizeSpec> selectCompiledSpec(KernelCache &cache,
                                          const QuantizeSpec &spec,
                                          bool withScale) {
  QuantizeSpec anyK = spec;
  anyK.anyK = true;
  if (spec.anyK || !chooseQuantizerVariant(anyK, withScale).anyK)
    return spec;
  Expected<bool> own = isCached(cache, spec, withScale);
  if (!own)
    return own.takeError();
  if (*own)
    return spec;
  Expected<bool> twin = isCached(cache, anyK, withScale);
  if (!twin)
    return twin.takeError();
  return *twin ? anyK : spec;
}

/// The plan key packs everything but K into one word, so a launch looks up a
/// small struct instead of hashing source text.
static GpuQuantizer::PlanKey makePlanKey(const QuantizeSpec &spec,
                                         bool withScale) {
  const ScalingScheme &scheme = spec.options.scheme;
  uint64_t bits =
      uint64_t(scheme.kind) | uint64_t(scheme.global) << 4 |
      uint64_t(spec.options.format) << 5 | uint64_t(spec.input) << 6 |
      uint64_t(spec.options.transpose) << 7 | uint64_t(withScale) << 8 |
      uint64_t(spec.options.fold) << 9 | uint64_t(spec.bothLayouts) << 12 |
      uint64_t(spec.gather) << 13 | uint64_t(spec.anyK) << 14 |
      uint64_t(spec.batched) << 15 | uint64_t(scheme.blockRows & 0xFFFF) << 16 |
      uint64_t(scheme.blockCols & 0xFFFF) << 32 | uint64_t(spec.adamw) << 48;
  // Only the row-wise kernel has K compiled in (a dual-layout spec's too,
  // where it takes that kernel: QuantizerVariant::columnMax). An any-K
  // kernel's plans differ by K in their stages, not their source, which
  // the kernel cache holds once.
  bool rowwise = !spec.options.transpose && !isSquareGroup(scheme);
  return {bits, rowwise ? spec.cols : 0};
}

Expected<const GpuQuantizer::Plan *>
GpuQuantizer::getPlan(const QuantizeSpec &spec, bool withScale) {
  // The plans' functions and the workspace belong to one context.
  if (Error e = context.check("this GpuQuantizer"))
    return std::move(e);
  PlanKey key = makePlanKey(spec, withScale);
  auto it = plans.find(key);
  if (it != plans.end())
    return it->second.get();

  Expected<QuantizeSpec> chosen = selectCompiledSpec(cache, spec, withScale);
  if (!chosen)
    return chosen.takeError();
  Expected<CompiledQuantizer> compiled =
      compileQuantizer(cache, *chosen, withScale);
  if (!compiled)
    return compiled.takeError();
  const QuantizerSource &source = compiled->source;
  auto plan = std::make_unique<Plan>();
  plan->entry = compiled->entry;
  plan->reduceEntry = compiled->reduceEntry;
  plan->variant = chooseQuantizerVariant(*chosen, withScale);
  Expected<CUfunction> quantize =
      plan->entry->getFunction(source.quantizeKernel);
  if (!quantize)
    return quantize.takeError();
  plan->quantize = *quantize;
  if (!source.reduceKernel.empty()) {
    Expected<CUfunction> reduce =
        plan->reduceEntry->getFunction(source.reduceKernel);
    if (!reduce)
      return reduce.takeError();
    plan->reduce = *reduce;
  }
  if (!source.columnKernel.empty()) {
    Expected<CUfunction> columns =
        plan->entry->getFunction(source.columnKernel);
    if (!columns)
      return columns.takeError();
    plan->columns = *columns;
  }
  if (plan->variant.family == Family::Rowwise) {
    if (Error e = planRowStages(*plan, spec))
      return std::move(e);
  } else if (plan->variant.family == Family::Columnwise ||
             plan->variant.family == Family::AdamW) {
    Expected<const DriverApi &> api = getDriverApi();
    if (!api)
      return api.takeError();
    if (Error e = checkCuda(
            api->occupancyMaxActiveBlocksPerMultiprocessor(
                &plan->ctasPerSm, plan->quantize, plan->variant.threads, 0),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
      return std::move(e);
    plan->ctasPerSm = std::max(plan->ctasPerSm, 1);
  } else if (plan->variant.family == Family::Tile2d) {
    plan->sharedBytes = unsigned(plan->variant.block * plan->variant.block *
                                 (spec.input == InputType::F32 ? 4 : 2));
    if (Error e = setSharedMemoryLimit(plan->quantize, plan->sharedBytes))
      return std::move(e);
  }
  return (plans[key] = std::move(plan)).get();
}

Expected<CUdeviceptr> GpuQuantizer::getWorkspace(int64_t globalWords,
                                                 CUstream stream) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  // Two uint64 counters, then the words.
  Expected<StreamWorkspaces::Workspace &> w =
      workspaces.get(*api, stream, size_t(4 + globalWords) * 4);
  if (!w)
    return w.takeError();
  return w->pointer;
}

/// Checks one device pointer: present exactly when needed, and aligned.
static Error checkPointer(CUdeviceptr ptr, bool needed, unsigned alignment,
                          const Twine &name, const ScalingScheme &scheme) {
  if (needed && !ptr)
    return invalidArgument(name + " is null; " + scheme.str() + " needs it");
  if (!needed && ptr)
    return invalidArgument(name + " is given, but " + scheme.str() +
                           " has none");
  if (ptr % alignment != 0)
    return invalidArgument(name + " must be " + Twine(alignment) +
                           "-byte aligned, got 0x" + Twine::utohexstr(ptr));
  return Error::success();
}

/// Checks the outputs of one layout; `of` names it in a dual-layout
/// quantize (" of the ... layout", else empty). The names are only built
/// into a message on an error: this runs on every launch.
static Error checkOutputs(const QuantizeBuffers &buffers,
                          const ScalingScheme &scheme, const char *of) {
  if (Error e = checkPointer(buffers.q, true, 16, Twine("the codes q") + of,
                             scheme))
    return e;
  if (Error e = checkPointer(buffers.local, scheme.hasLocalScales(), 4,
                             Twine("the block scales (local)") + of, scheme))
    return e;
  if (Error e = checkPointer(buffers.global, scheme.hasGlobalScales(), 4,
                             Twine("the global scales") + of, scheme))
    return e;
  if (buffers.counters % 8 != 0)
    return invalidArgument(Twine("the counters") + of +
                           " must be 8-byte aligned");
  return Error::success();
}

/// Counter `which` (0 saturated, 1 non-finite) of `buffers`. Without the
/// caller's counters the kernels add to the workspace's, which nobody
/// reads: they need no zeroing.
static unsigned long long *getCounter(const QuantizeBuffers &buffers, int which,
                                      CUdeviceptr workspace) {
  CUdeviceptr base = buffers.counters ? buffers.counters : workspace;
  return reinterpret_cast<unsigned long long *>(base + 8 * which);
}

/// A kernel's arguments for one layout's buffers: the input, the outputs,
/// the counters and the plan's stages; the reduce words are the caller's.
static quantize::Args makeArgs(const QuantizeSpec &spec,
                               const QuantizeBuffers &buffers,
                               const GpuQuantizer::Plan &plan,
                               CUdeviceptr workspace) {
  quantize::Args args{};
  args.x = reinterpret_cast<const void *>(buffers.x);
  args.rows = int(spec.rows);
  args.cols = int(spec.cols);
  args.q = reinterpret_cast<unsigned char *>(buffers.q);
  args.local = reinterpret_cast<void *>(buffers.local);
  args.global = reinterpret_cast<float *>(buffers.global);
  args.saturated = getCounter(buffers, 0, workspace);
  args.nonFinite = getCounter(buffers, 1, workspace);
  args.stages = plan.stages;
  args.gatherRows = reinterpret_cast<const int *>(buffers.gatherRows);
  args.gatherSourceRows = int(buffers.gatherSourceRows);
  return args;
}

/// The grid of `plan`'s kernels for `spec` on `smCount` SMs; a batched
/// launch's `batchCount` casts (its z) share the resident CTAs.
static LaunchConfig makeLaunch(const QuantizeSpec &spec,
                               const GpuQuantizer::Plan &plan, int smCount,
                               CUstream stream, int64_t batchCount = 1) {
  const QuantizerVariant &v = plan.variant;
  LaunchConfig launch;
  launch.stream = stream;
  launch.block[0] = unsigned(v.threads);
  launch.grid[2] = unsigned(batchCount);
  const int64_t resident =
      std::max<int64_t>(1, int64_t(smCount) * plan.ctasPerSm / batchCount);
  switch (v.family) {
  case Family::Rowwise: {
    // CTAs take row segments (rows, unless they are too long) in turn.
    launch.grid[0] = unsigned(
        std::min<int64_t>(spec.rows * v.getRowSegments(spec.cols), resident));
    launch.sharedMemoryBytes = plan.sharedBytes;
    launch.sharedMemoryLimitSet = true;
    break;
  }
  case Family::Columnwise: {
    // As many CTAs down each column strip as fill the GPU once without a
    // second wave; each walks its strip's tiles in turn. (Rounding up
    // leaves a few CTAs to run alone after the first wave, with most SMs
    // idle: docs/PERFORMANCE.md, "Design measurements behind the code".)
    int64_t strips =
        llvm::divideCeil(spec.cols * (spec.input == InputType::F32 ? 4 : 2),
                         quantize::kColumnwiseTileBytes);
    int64_t tiles = llvm::divideCeil(spec.rows, quantize::kColumnwiseTileRows);
    launch.grid[0] = unsigned(strips);
    launch.grid[1] = unsigned(
        std::clamp<int64_t>(resident / strips, 1, std::min(tiles, kMaxGridY)));
    break;
  }
  case Family::AdamW: {
    // One wave: the CTAs down each strip of columns take its tiles in turn.
    int64_t strips = llvm::divideCeil(spec.cols, quantize::kAdamWTileCols);
    int64_t tiles = llvm::divideCeil(spec.rows, quantize::kAdamWTileRows);
    launch.grid[0] = unsigned(strips);
    launch.grid[1] = unsigned(
        std::clamp<int64_t>(resident / strips, 1, std::min(tiles, kMaxGridY)));
    break;
  }
  case Family::Tile2d:
    launch.grid[0] = unsigned(llvm::divideCeil(spec.cols, v.block));
    launch.grid[1] = unsigned(llvm::divideCeil(spec.rows, v.block));
    launch.sharedMemoryBytes = plan.sharedBytes;
    launch.sharedMemoryLimitSet = true;
    break;
  }
  return launch;
}

Error checkAdamWBuffers(const AdamWBuffers &state) {
  for (auto [pointer, name] : {std::pair{state.grad, "gradient"},
                               std::pair{state.expAvg, "first moment"},
                               std::pair{state.expAvgSq, "second moment"}}) {
    if (!pointer)
      return invalidArgument(Twine("the AdamW step's ") + name +
                             " pointer is null");
    if (pointer % 16 != 0)
      return invalidArgument(Twine("the AdamW step's ") + name +
                             " must be 16-byte aligned, got 0x" +
                             Twine::utohexstr(pointer));
  }
  return Error::success();
}

Error GpuQuantizer::run(const QuantizeSpec &spec,
                        const QuantizeBuffers &buffers,
                        const QuantizeBuffers *rowMajor, CUdeviceptr scale,
                        CUstream stream, const Batch *batch,
                        const AdamWUpdate *adamw) {
  if (spec.batched != (batch != nullptr))
    return invalidArgument(spec.batched ? "a batched spec is launched by "
                                          "castWithScales"
                                        : "batch strides for a spec that is "
                                          "not batched");
  if (spec.adamw != (adamw != nullptr))
    return invalidArgument(spec.adamw ? "a fused AdamW spec needs the step's "
                                        "state (castWithScales)"
                                      : "an AdamW step for a spec without "
                                        "QuantizeSpec::adamw");
  if (adamw) {
    if (adamw->state.empty())
      return invalidArgument("the AdamW step has no state");
    if (Error e = checkAdamWBuffers(adamw->state[0]))
      return e;
  }
  // The scales written: the folded scheme's, for a quantization that folds.
  const ScalingScheme scheme =
      getFoldedScheme(spec.options.scheme, spec.options.fold);
  if (Error e = checkPointer(buffers.x, true, 16, "the input x", scheme))
    return e;
  if (Error e = checkOutputs(buffers, scheme,
                             rowMajor ? " of the transposed layout" : ""))
    return e;
  if (rowMajor)
    if (Error e = checkOutputs(*rowMajor, scheme, " of the row-major layout"))
      return e;
  for (const QuantizeBuffers *b : {&buffers, rowMajor}) {
    if (!b || !b->amax)
      continue;
    // Only a per-tensor reduce pass leaves one amax behind.
    if (scheme.kind != ScalingKind::PerTensor || scale) {
      std::string what = scale ? "a cast with a given scale" : scheme.str();
      return invalidArgument("the amax output is given, but only a per-tensor "
                             "quantize finds an amax, not " +
                             what);
    }
    if (b->amax % 4 != 0)
      return invalidArgument("the amax output must be 4-byte aligned, got 0x" +
                             Twine::utohexstr(b->amax));
  }
  if (spec.gather != (buffers.gatherRows != 0))
    return invalidArgument(spec.gather
                               ? "a gathering spec needs the gathered rows' "
                                 "indices (gatherRows)"
                               : "gathered rows' indices are given for a spec "
                                 "without gather");
  if (spec.gather) {
    if (buffers.gatherRows % 4 != 0)
      return invalidArgument("the gathered rows' indices must be 4-byte "
                             "aligned, got 0x" +
                             Twine::utohexstr(buffers.gatherRows));
    if (buffers.gatherSourceRows < 1 || buffers.gatherSourceRows > INT_MAX)
      return invalidArgument("the gather's input has " +
                             Twine(buffers.gatherSourceRows) +
                             " rows; expected 1 to 2^31 - 1");
  } else if (buffers.gatherSourceRows) {
    return invalidArgument("the gather's input rows are given without its "
                           "indices (gatherRows)");
  }
  Expected<const Plan *> plan = getPlan(spec, scale != 0);
  if (!plan)
    return plan.takeError();
  if ((*plan)->variant.columnMax)
    return runInTwoKernels(spec, **plan, buffers, *rowMajor, stream);
  const QuantizerVariant &v = (*plan)->variant;

  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  const int64_t outputRows =
      v.family == Family::Columnwise ? spec.cols : spec.rows;
  int64_t globalWords = v.globalPerRow ? outputRows : 1;
  // A row fold's references share the globals' words when those are per
  // output row, else follow them.
  int64_t foldWords = v.foldReference && !v.globalPerRow ? outputRows : 0;
  // A dual-layout quantize's row-major globals and references: per input
  // row where the transposed ones are per column.
  int64_t rowGlobalWords = rowMajor ? (v.globalPerRow ? spec.rows : 1) : 0;
  int64_t rowFoldWords = rowMajor && foldWords ? spec.rows : 0;
  int64_t reduceWords = globalWords + foldWords + rowGlobalWords + rowFoldWords;
  Expected<CUdeviceptr> workspace = getWorkspace(reduceWords, stream);
  if (!workspace)
    return workspace.takeError();
  CUdeviceptr globalBits = *workspace + 16;
  CUdeviceptr foldBits = globalBits + 4 * globalWords;
  CUdeviceptr rowGlobalBits = foldBits + 4 * foldWords;
  CUdeviceptr rowFoldBits = rowGlobalBits + 4 * rowGlobalWords;
  if (v.hasReducePass())
    if (Error error = checkCuda(
            api->memsetD8Async(globalBits, 0, reduceWords * 4, stream),
            "cuMemsetD8Async(quantizer workspace)"))
      return error;

  auto words = [](CUdeviceptr p) { return reinterpret_cast<unsigned *>(p); };
  quantize::Args args = makeArgs(spec, buffers, **plan, *workspace);
  args.globalBits = words(globalBits);
  // (With globals per output row, those hold the row fold's references.)
  args.foldBits = words(foldWords ? foldBits : globalBits);
  args.scaleIn = reinterpret_cast<const float *>(scale);
  if (batch)
    args.batch = batch->strides;
  if (adamw) {
    const AdamWCoefficients &c = adamw->coefficients;
    const AdamWBuffers &state = adamw->state[0];
    args.adamw.grad = reinterpret_cast<const float *>(state.grad);
    args.adamw.expAvg = reinterpret_cast<float *>(state.expAvg);
    args.adamw.expAvgSq = reinterpret_cast<float *>(state.expAvgSq);
    args.adamw.decay = c.decay;
    args.adamw.oneMinusBeta1 = c.oneMinusBeta1;
    args.adamw.oneMinusBeta2 = c.oneMinusBeta2;
    args.adamw.beta2 = c.beta2;
    args.adamw.negStepSize = c.negStepSize;
    args.adamw.bias2Sqrt = c.bias2Sqrt;
    args.adamw.eps = c.eps;
  }
  if (rowMajor) {
    args.row.q = reinterpret_cast<unsigned char *>(rowMajor->q);
    args.row.local = reinterpret_cast<void *>(rowMajor->local);
    args.row.global = reinterpret_cast<float *>(rowMajor->global);
    args.row.globalBits = words(rowGlobalBits);
    args.row.foldBits = words(rowFoldWords ? rowFoldBits : rowGlobalBits);
    args.row.saturated = getCounter(*rowMajor, 0, *workspace);
    args.row.nonFinite = getCounter(*rowMajor, 1, *workspace);
  }
  void *params[] = {&args};
  const LaunchConfig launch =
      makeLaunch(spec, **plan, smCount, stream, batch ? batch->count : 1);
  if ((*plan)->reduce)
    if (Error error = launchKernel((*plan)->reduce, launch, params))
      return error;
  if (Error error = launchKernel((*plan)->quantize, launch, params))
    return error;
  // The reduce pass's max magnitude bits are the amax itself, as an FP32
  // bit pattern (absolute values order like their bits).
  for (const QuantizeBuffers *b : {&buffers, rowMajor})
    if (b && b->amax)
      if (Error error =
              checkCuda(api->memcpyDtoDAsync(b->amax, globalBits, 4, stream),
                        "cuMemcpyDtoDAsync(amax)"))
        return error;
  return Error::success();
}

Error GpuQuantizer::runInTwoKernels(const QuantizeSpec &spec, const Plan &plan,
                                    const QuantizeBuffers &transposed,
                                    const QuantizeBuffers &rowMajor,
                                    CUstream stream) {
  const QuantizeSpec transposedSpec = getTransposedSpec(spec);
  Expected<const Plan *> transposedPlan = getPlan(transposedSpec, false);
  if (!transposedPlan)
    return transposedPlan.takeError();
  // The workspace: the transposed pass's word per column (the column pass
  // writes every one), then one row of column maxima per row-wise CTA, 16
  // bytes aligned.
  const LaunchConfig rowLaunch = makeLaunch(spec, plan, smCount, stream);
  const int64_t parts = rowLaunch.grid[0];
  const int64_t rowWords =
      spec.cols * (spec.input == InputType::F32 ? 4 : 2) / 4;
  const int64_t columnWords = llvm::alignTo(spec.cols, 4);
  Expected<CUdeviceptr> workspace =
      getWorkspace(columnWords + parts * rowWords, stream);
  if (!workspace)
    return workspace.takeError();
  const CUdeviceptr columnBits = *workspace + 16;
  auto words = [](CUdeviceptr p) { return reinterpret_cast<unsigned *>(p); };

  quantize::Args args = makeArgs(spec, rowMajor, plan, *workspace);
  args.columnMax = words(columnBits + 4 * columnWords);
  args.columnMaxParts = int(parts);
  void *params[] = {&args};
  if (Error error = launchKernel(plan.quantize, rowLaunch, params))
    return error;

  args.globalBits = words(columnBits);
  LaunchConfig columnLaunch;
  columnLaunch.stream = stream;
  columnLaunch.block[0] = quantize::kColumnMaxThreads;
  columnLaunch.grid[0] =
      unsigned(llvm::divideCeil(rowWords, quantize::kColumnMaxWords));
  if (Error error = launchKernel(plan.columns, columnLaunch, params))
    return error;

  // (With globals per column, those words are the row fold's references
  // too; without, they are only those.)
  quantize::Args t =
      makeArgs(transposedSpec, transposed, **transposedPlan, *workspace);
  t.globalBits = t.foldBits = words(columnBits);
  void *transposedParams[] = {&t};
  return launchKernel(
      (*transposedPlan)->quantize,
      makeLaunch(transposedSpec, **transposedPlan, smCount, stream),
      transposedParams);
}

Error GpuQuantizer::quantize(const QuantizeSpec &spec,
                             const QuantizeBuffers &buffers, CUstream stream) {
  if (spec.bothLayouts)
    return invalidArgument("a dual-layout spec has two sets of outputs: "
                           "quantize it with quantizeBothLayouts");
  return run(spec, buffers, /*rowMajor=*/nullptr, /*scale=*/0, stream);
}

Error GpuQuantizer::prepare(const QuantizeSpec &spec) {
  if (spec.bothLayouts)
    return invalidArgument("a dual-layout spec has two sets of outputs: "
                           "quantize it with quantizeBothLayouts");
  if (Expected<const Plan *> plan = getPlan(spec, /*withScale=*/false); !plan)
    return plan.takeError();
  return Error::success();
}

Error GpuQuantizer::castWithScale(const QuantizeSpec &spec, CUdeviceptr scale,
                                  const QuantizeBuffers &buffers,
                                  CUstream stream) {
  if (!scale)
    return invalidArgument("the scale pointer is null");
  if (scale % 4 != 0)
    return invalidArgument("the scale pointer must be 4-byte aligned");
  if (spec.bothLayouts)
    return invalidArgument("a dual-layout spec has two sets of outputs: "
                           "cast it with quantizeBothLayouts");
  return run(spec, buffers, /*rowMajor=*/nullptr, scale, stream);
}

/// A dual-layout quantize's transposed buffers with the row-major layout's
/// input: both layouts come from one read of one x (transposed.x is 0 or
/// the same).
static Expected<QuantizeBuffers>
withRowMajorInput(const QuantizeBuffers &rowMajor,
                  const QuantizeBuffers &transposed) {
  if (transposed.x && transposed.x != rowMajor.x)
    return invalidArgument("the transposed layout's input differs from the "
                           "row-major layout's: both come from one read of "
                           "one x");
  QuantizeBuffers t = transposed;
  t.x = rowMajor.x;
  return t;
}

Error GpuQuantizer::quantizeBothLayouts(const QuantizeSpec &spec,
                                        const QuantizeBuffers &rowMajor,
                                        const QuantizeBuffers &transposed,
                                        CUstream stream, CUdeviceptr scale) {
  if (!spec.bothLayouts)
    return invalidArgument("quantizeBothLayouts takes a dual-layout spec "
                           "(QuantizeSpec::bothLayouts)");
  Expected<QuantizeBuffers> t = withRowMajorInput(rowMajor, transposed);
  if (!t)
    return t.takeError();
  if (scale % 4 != 0)
    return invalidArgument("the scale pointer must be 4-byte aligned");
  return run(spec, *t, &rowMajor, scale, stream);
}

namespace {
/// The byte stride of field `f` over `buffers`: the step from the first
/// cast's address to the second's, when every address takes it; nullopt
/// when they do not.
template <class Buffers, class Field>
std::optional<long long> uniformStride(ArrayRef<Buffers> buffers, Field f) {
  const uint64_t first = f(buffers[0]);
  const uint64_t step = f(buffers[1]) - first;
  for (size_t g = 2; g < buffers.size(); ++g)
    if (f(buffers[g]) != first + g * step)
      return std::nullopt;
  return static_cast<long long>(step);
}

/// The strides of castWithScales's one launch of these casts: the input's
/// and each output's, where every cast's address steps by one stride from
/// the last's, the casts' outputs do not overlap and every cast's pointers
/// keep the first's alignment; nullopt otherwise.
std::optional<quantize::BatchStrides>
getBatchStrides(const QuantizeSpec &spec, ArrayRef<QuantizeBuffers> rowMajor,
                ArrayRef<QuantizeBuffers> transposed,
                ArrayRef<AdamWBuffers> adamw) {
  const size_t count = rowMajor.size();
  if (count < 2 || count > uint64_t(kMaxGridY) ||
      transposed.size() != (spec.bothLayouts ? count : 0) ||
      adamw.size() != (spec.adamw ? count : 0))
    return std::nullopt;
  // Transposed inputs are the row-major ones (or unset), and what run()
  // checks of the first cast's buffers alone holds for every cast.
  for (size_t g = 0; g < transposed.size(); ++g)
    if (transposed[g].x && transposed[g].x != rowMajor[g].x)
      return std::nullopt;
  for (ArrayRef<QuantizeBuffers> layout : {rowMajor, transposed})
    for (const QuantizeBuffers &b : layout)
      if (b.local != layout[0].local || b.amax != layout[0].amax ||
          b.gatherRows != layout[0].gatherRows ||
          b.gatherSourceRows != layout[0].gatherSourceRows)
        return std::nullopt;
  ArrayRef<QuantizeBuffers> out = spec.bothLayouts ? transposed : rowMajor;
  auto x = uniformStride(rowMajor, [](auto &b) { return b.x; });
  auto q = uniformStride(out, [](auto &b) { return b.q; });
  auto global = uniformStride(out, [](auto &b) { return b.global; });
  auto counters = uniformStride(out, [](auto &b) { return b.counters; });
  std::optional<long long> rowQ = 0, rowGlobal = 0, rowCounters = 0;
  if (spec.bothLayouts) {
    rowQ = uniformStride(rowMajor, [](auto &b) { return b.q; });
    rowGlobal = uniformStride(rowMajor, [](auto &b) { return b.global; });
    rowCounters = uniformStride(rowMajor, [](auto &b) { return b.counters; });
  }
  if (!x || !q || !global || !counters || !rowQ || !rowGlobal || !rowCounters)
    return std::nullopt;
  // Casts whose codes or globals overlap would write them at once (the
  // counters add atomically, and may be shared).
  const long long codes = spec.rows * spec.cols;
  auto apart = [](long long stride, long long bytes) {
    return stride >= bytes || stride <= -bytes;
  };
  // A fused AdamW step writes the weights and the moments too.
  std::optional<long long> grad = 0, expAvg = 0, expAvgSq = 0;
  if (spec.adamw) {
    grad = uniformStride(adamw, [](auto &b) { return b.grad; });
    expAvg = uniformStride(adamw, [](auto &b) { return b.expAvg; });
    expAvgSq = uniformStride(adamw, [](auto &b) { return b.expAvgSq; });
    const long long bytes = codes * 4;
    if (!grad || !expAvg || !expAvgSq || *grad % 16 != 0 ||
        *expAvg % 16 != 0 || *expAvgSq % 16 != 0 || !apart(*x, bytes) ||
        !apart(*expAvg, bytes) || !apart(*expAvgSq, bytes))
      return std::nullopt;
  }
  const bool written =
      apart(*q, codes) && (!out[0].global || apart(*global, 4)) &&
      (!spec.bothLayouts ||
       (apart(*rowQ, codes) && (!rowMajor[0].global || apart(*rowGlobal, 4))));
  const bool aligned = *x % 16 == 0 && *q % 16 == 0 && *global % 4 == 0 &&
                       *counters % 8 == 0 && *rowQ % 16 == 0 &&
                       *rowGlobal % 4 == 0 && *rowCounters % 8 == 0;
  if (!written || !aligned)
    return std::nullopt;
  return quantize::BatchStrides{*x,        *q,      *global,    4,
                                *counters, *rowQ,   *rowGlobal, *rowCounters,
                                *grad,     *expAvg, *expAvgSq};
}
} // namespace

bool castsShareOneLaunch(const QuantizeSpec &spec,
                         ArrayRef<QuantizeBuffers> rowMajor,
                         ArrayRef<QuantizeBuffers> transposed,
                         ArrayRef<AdamWBuffers> adamw) {
  return getBatchStrides(spec, rowMajor, transposed, adamw).has_value();
}

Error GpuQuantizer::castWithScales(const QuantizeSpec &spec, CUdeviceptr scales,
                                   ArrayRef<QuantizeBuffers> rowMajor,
                                   ArrayRef<QuantizeBuffers> transposed,
                                   CUstream stream, const AdamWUpdate *adamw) {
  if (spec.batched)
    return invalidArgument("castWithScales takes the spec of one cast; it "
                           "batches the casts itself");
  if (rowMajor.empty() && transposed.empty())
    return Error::success();
  if (spec.bothLayouts != !transposed.empty() ||
      (spec.bothLayouts && transposed.size() != rowMajor.size()))
    return invalidArgument(
        spec.bothLayouts
            ? "a dual-layout cast needs one transposed layout per cast"
            : "transposed layouts are given for a single-layout spec");
  if (!scales)
    return invalidArgument("the scales pointer is null");
  if (scales % 4 != 0)
    return invalidArgument("the scales pointer must be 4-byte aligned");
  const size_t count = rowMajor.size();
  if (spec.adamw != (adamw != nullptr) ||
      (adamw && adamw->state.size() != count))
    return invalidArgument(
        spec.adamw ? "a fused AdamW spec needs one AdamW state per cast"
                   : "an AdamW step for a spec without QuantizeSpec::adamw");
  auto castOne = [&](size_t g) -> Error {
    const CUdeviceptr scale = scales + 4 * g;
    if (!adamw)
      return spec.bothLayouts
                 ? quantizeBothLayouts(spec, rowMajor[g], transposed[g], stream,
                                       scale)
                 : castWithScale(spec, scale, rowMajor[g], stream);
    const AdamWUpdate one{adamw->coefficients, adamw->state.slice(g, 1)};
    if (!spec.bothLayouts)
      return run(spec, rowMajor[g], nullptr, scale, stream, nullptr, &one);
    Expected<QuantizeBuffers> t = withRowMajorInput(rowMajor[g], transposed[g]);
    if (!t)
      return t.takeError();
    return run(spec, *t, &rowMajor[g], scale, stream, nullptr, &one);
  };
  std::optional<quantize::BatchStrides> strides =
      getBatchStrides(spec, rowMajor, transposed,
                      adamw ? adamw->state : ArrayRef<AdamWBuffers>());
  if (!strides) {
    for (size_t g = 0; g < count; ++g)
      if (Error error = castOne(g))
        return error;
    return Error::success();
  }
  QuantizeSpec batched = spec;
  batched.batched = true;
  const Batch batch{*strides, int64_t(count)};
  if (!spec.bothLayouts)
    return run(batched, rowMajor[0], nullptr, scales, stream, &batch, adamw);
  QuantizeBuffers t = transposed[0];
  t.x = rowMajor[0].x;
  return run(batched, t, &rowMajor[0], scales, stream, &batch, adamw);
}

} // namespace moss::runtime
