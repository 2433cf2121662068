//===- TemplatePlan.h - Launch geometry from the GEMM templates -*- C++ -*-===//
//
// The launch geometry of a compiled GEMM as the device templates compute it
// (moss/gemm/config.cuh compiled as host C++, namespace moss::gemm_kernel).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_GEMM_TEMPLATEPLAN_H
#define MOSS_RUNTIME_GEMM_TEMPLATEPLAN_H

#include "moss/Compiler/KernelSource.h"

#include "llvm/Support/Error.h"

#include <cstddef>

namespace moss::detail {

/// What a launch needs from `moss::gemm_kernel::plan` of a kernel's parameters.
struct TemplatePlan {
  unsigned threads = 0;
  unsigned sharedBytes = 0;
  unsigned clusterSize = 1;
  /// Rows of B's TMA box (docs/GEMM-KERNEL-ABI.md); A's depend on m
  /// (getBoxRowsA).
  int boxRowsB = 0;
  /// Whether launches need a workspace (split-K or 64-row tiles).
  bool slicedAccumulators = false;
  /// Whether the epilogue stores through D's tensor map, and its box
  /// {columns, rows} (docs/GEMM-KERNEL-ABI.md).
  bool usesTmaD = false;
  int boxD[2] = {0, 0};
  /// Promotion blocks per group of straight-line code (0: no promotion);
  /// the quick-compile variant differs from the full kernel exactly when
  /// this does.
  int groupBlocks = 0;
  /// The parameters gridSize() and the workspace size read.
  int n = 0, tileM = 0, tileN = 0, clusterM = 1, clusterN = 1, splitK = 1;
  /// Experts of a grouped GEMM (0: a plain one).
  int groups = 0;
  /// A static M (-1: dynamic), and whether the experts split K (then M is
  /// static and each expert has M x N tiles).
  int m = -1;
  bool groupedK = false;
};

/// The kernel's run-time argument struct, `moss::gemm_kernel::Args`
/// (TemplatePlan.cpp checks that the layouts agree field by field).
struct KernelArgs {
  int m;
  void *d;
  const void *aLocal;
  const float *aGlobal;
  const void *bLocal;
  const float *bGlobal;
  const void *bias;
  const void *c;
  float beta;
  float *amax;
  void *workspace;
  const int *groupOffsets;
  int k;
};

/// The templates' plan for `source`; an error when the templates reject its
/// configuration (`moss::gemm_kernel::validate`).
llvm::Expected<TemplatePlan>
planFromTemplates(const compiler::KernelSource &source);

/// `moss::gemm_kernel::gridSize` for `m` rows on `smCount` SMs.
unsigned getGridSize(const TemplatePlan &plan, int m, int smCount);

/// `moss::gemm_kernel::boxRowsA`: rows of A's TMA box for `m` rows.
int getBoxRowsA(const TemplatePlan &plan, int m);

/// The workspace of a launch of `m` rows (plan.slicedAccumulators): its
/// size, and how much of its start must be zero before the first launch.
struct WorkspaceSize {
  size_t bytes = 0;
  size_t zeroBytes = 0;
};
WorkspaceSize getWorkspaceSize(const TemplatePlan &plan, int m);

} // namespace moss::detail

#endif // MOSS_RUNTIME_GEMM_TEMPLATEPLAN_H
