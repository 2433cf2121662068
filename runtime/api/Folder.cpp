//===- Folder.cpp - Folding E8M0 block factors on the GPU -----------------===//

#include "moss/Runtime/Api/Folder.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>

using namespace llvm;
using namespace moss::numerics;

namespace moss::runtime {

/// The template's FoldGlobal for a scheme.
static int getGlobalKind(const ScalingScheme &scheme) {
  if (!scheme.hasGlobalScales())
    return 0;
  return scheme.globalPerRow() ? 2 : 1;
}

int64_t getFoldFactorCount(const FoldSpec &spec) {
  return spec.fold == BlockScaleFold::Row
             ? spec.rows
             : spec.rows * (spec.cols / kFoldGroupCols);
}

Error checkFoldSpec(const FoldSpec &spec) {
  if (Error e = checkFold(spec.scheme, spec.cols, spec.fold))
    return e;
  if (spec.fold == BlockScaleFold::None)
    return invalidArgument("a fold of none has nothing to run");
  if (spec.rows < 0 || spec.cols <= 0 || spec.rows > INT_MAX ||
      spec.cols > INT_MAX)
    return invalidArgument(
        "the fold's shape [" + Twine(spec.rows) + ", " + Twine(spec.cols) +
        "] is out of range; expected 0 <= rows, 0 < cols < 2^31");
  if (spec.scheme.blockCols < 16 || spec.cols % spec.scheme.blockCols != 0)
    return invalidArgument("K=" + Twine(spec.cols) + " is not a multiple of " +
                           spec.scheme.str() + "'s blocks");
  return Error::success();
}

std::string generateFoldSource(const FoldSpec &spec) {
  return formatv("#include \"moss/quantize/fold.cuh\"\n\n"
                 // (A minimum of one CTA per SM: with the maximum alone, ptxas
                 // 13.0 spilled the E4M3 row fold at 48 registers.)
                 "extern \"C\" __global__ void __launch_bounds__({4}, 1)\n"
                 "moss_fold(const moss::quantize::FoldArgs args) {{\n"
                 "  moss::quantize::fold<{0}, {1}, {2}, {3}, {4}>(args);\n"
                 "}\n",
                 spec.format == Fp8Format::E4M3 ? 0 : 1, spec.scheme.blockCols,
                 int(spec.fold), getGlobalKind(spec.scheme), kFoldThreads)
      .str();
}

struct GpuFolder::Plan {
  std::shared_ptr<const KernelEntry> entry;
  CUfunction function = nullptr;
};

GpuFolder::GpuFolder(KernelCache &cache, int smCount)
    : cache(cache), smCount(smCount) {}

GpuFolder::~GpuFolder() = default;

static Error checkPointer(CUdeviceptr pointer, bool needed, unsigned alignment,
                          const Twine &name) {
  if (needed && !pointer)
    return invalidArgument(name + " is null");
  if (!needed && pointer)
    return invalidArgument(name + " is given, but the scheme has none");
  if (pointer % alignment != 0)
    return invalidArgument(name + " must be " + Twine(alignment) +
                           "-byte aligned, got 0x" + Twine::utohexstr(pointer));
  return Error::success();
}

Expected<std::shared_ptr<const KernelEntry>>
compileFoldKernel(KernelCache &cache, const FoldSpec &spec) {
  if (Error e = checkFoldSpec(spec))
    return std::move(e);
  return cache.getOrCompile(generateFoldSource(spec), CompileOptions());
}

Expected<const GpuFolder::Plan *> GpuFolder::getPlan(const FoldSpec &spec) {
  // The plans' functions belong to one context.
  if (Error e = context.check("this GpuFolder"))
    return std::move(e);
  uint64_t key = uint64_t(spec.format) | uint64_t(spec.fold) << 1 |
                 uint64_t(getGlobalKind(spec.scheme)) << 3 |
                 uint64_t(spec.scheme.blockCols) << 8;
  if (auto it = plans.find(key); it != plans.end())
    return it->second.get();
  Expected<std::shared_ptr<const KernelEntry>> entry =
      compileFoldKernel(cache, spec);
  if (!entry)
    return entry.takeError();
  Expected<CUfunction> function = (*entry)->getFunction("moss_fold");
  if (!function)
    return function.takeError();
  auto plan = std::make_unique<Plan>();
  plan->entry = *entry;
  plan->function = *function;
  return (plans[key] = std::move(plan)).get();
}

Error GpuFolder::prepare(const FoldSpec &spec) {
  if (Error e = checkFoldSpec(spec))
    return e;
  return getPlan(spec).takeError();
}

Error GpuFolder::fold(const FoldSpec &spec, const FoldBuffers &buffers,
                      CUstream stream) {
  if (Error e = checkFoldSpec(spec))
    return e;
  if (Error e = checkPointer(buffers.codes, true, 16, "the codes"))
    return e;
  if (Error e = checkPointer(buffers.e8m0, true, 1, "the E8M0 factors"))
    return e;
  if (Error e = checkPointer(buffers.global, spec.scheme.hasGlobalScales(), 4,
                             "the global scales"))
    return e;
  if (Error e = checkPointer(buffers.outCodes, true, 16, "the folded codes"))
    return e;
  if (Error e = checkPointer(buffers.outFactors, true, 4, "the folded factors"))
    return e;
  if (buffers.outCodes == buffers.codes)
    return invalidArgument(
        "the folded codes must not overwrite the codes they fold");
  if (spec.rows == 0)
    return Error::success();

  Expected<const Plan *> plan = getPlan(spec);
  if (!plan)
    return plan.takeError();

  struct KernelArgs {
    CUdeviceptr codes, e8m0, global;
    int rows, cols;
    CUdeviceptr outCodes, outFactors;
  } args{buffers.codes,  buffers.e8m0,     buffers.global,    int(spec.rows),
         int(spec.cols), buffers.outCodes, buffers.outFactors};
  void *params[] = {&args};
  LaunchConfig launch;
  launch.stream = stream;
  launch.block[0] = kFoldThreads;
  // One warp per row; enough CTAs to fill the GPU, each reusing its table.
  int64_t warps = kFoldThreads / 32;
  int64_t resident = int64_t(std::max(1, smCount)) * (2048 / kFoldThreads);
  launch.grid[0] =
      unsigned(std::min<int64_t>(divideCeil(spec.rows, warps), resident));
  return launchKernel((*plan)->function, launch, params);
}

} // namespace moss::runtime
