//===- GemmRunnerState.h - What a GemmRunner keeps --------------*- C++ -*-===//
//
// The runner's loaded kernels and plans (shared by Gemm.cpp, which plans
// and launches, GemmCompile.cpp, which compiles and loads, and
// GemmFold.cpp, which runs the fold passes), and the keys that find them
// (GemmKeys.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_GEMM_GEMMRUNNERSTATE_H
#define MOSS_RUNTIME_GEMM_GEMMRUNNERSTATE_H

#include "TemplatePlan.h"

#include "moss/Compiler/GemmPlan.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Cache/KernelCache.h"

#include <future>
#include <memory>
#include <optional>
#include <string>

namespace moss {

namespace detail {
/// A background compile of a tiered compile's full kernel.
struct FullCompile {
  std::shared_ptr<const runtime::KernelEntry> entry;
  std::string error;
  double seconds = 0;
};
} // namespace detail

/// A loaded kernel and the tensor maps of its last launch.
struct GemmRunner::Kernel {
  GemmKernelInfo info;
  std::shared_ptr<const runtime::KernelEntry> entry;
  CUfunction function = nullptr;
  detail::TemplatePlan plan;
  /// While `function` is the quick-compile variant of a tiered compile: the
  /// full kernel's source and its compile (whose future's destructor waits
  /// for it, so the thread never outlives the runner and its cache).
  std::optional<compiler::KernelSource> fullSource;
  std::future<detail::FullCompile> fullCompile;
  /// The maps are reused while their pointer and row count are the same
  /// (mapD is all zeros, unused, unless plan.usesTmaD).
  CUtensorMap mapA, mapB, mapD;
  CUdeviceptr mapACodes = 0, mapBCodes = 0, mapDPointer = 0;
  int64_t mapARows = -1, mapDRows = -1;
  /// K of A's and B's maps (a k-grouped GEMM's changes per launch).
  int64_t mapK = -1;
  /// Thread blocks that run at once: the SMs, or for clusters the clusters
  /// that fit at once times their size (the persistent grid's limit).
  int slots = 0;
};

/// A plan and the kernel that runs it.
struct GemmRunner::Planned {
  compiler::GemmPlan plan;
  Kernel *kernel = nullptr;
};

namespace detail {
/// The key of a compiled kernel: the plan's kernel spec, tiling and
/// variant.
GemmRunner::Key makeKernelKey(const compiler::GemmPlan &plan);

/// The key of the plan of an m-row launch of `spec`: everything planGemm
/// reads that can differ between calls. The fold at m (a dynamic M folds by
/// default from kMinRowsToFold rows) and the M bucket (the database may
/// hold a tiling per bucket; the heuristic plans for the first launch's M
/// in it), which database, and the options that change the plan.
GemmRunner::Key makePlanKey(const compiler::GemmSpec &spec, int64_t m,
                            const GemmOptions &options);

/// The fold pass of one operand of an m-row launch of `plan`, or none.
std::optional<runtime::FoldSpec> getFoldSpec(const compiler::GemmPlan &plan,
                                             bool operandB, int64_t m);
} // namespace detail

} // namespace moss

#endif // MOSS_RUNTIME_GEMM_GEMMRUNNERSTATE_H
