//===- TemplatePlan.cpp - Launch geometry from the GEMM templates ---------===//

#include "TemplatePlan.h"

#include "moss/Compiler/TemplateParams.h"

#include <cstddef>

using namespace moss;

#define MOSS_SAME_FIELD(field)                                                 \
  static_assert(offsetof(detail::KernelArgs, field) ==                         \
                    offsetof(gemm_kernel::Args, field) &&                      \
                sizeof(detail::KernelArgs::field) ==                           \
                    sizeof(gemm_kernel::Args::field))
MOSS_SAME_FIELD(m);
MOSS_SAME_FIELD(d);
MOSS_SAME_FIELD(aLocal);
MOSS_SAME_FIELD(aGlobal);
MOSS_SAME_FIELD(bLocal);
MOSS_SAME_FIELD(bGlobal);
MOSS_SAME_FIELD(bias);
MOSS_SAME_FIELD(c);
MOSS_SAME_FIELD(beta);
MOSS_SAME_FIELD(amax);
MOSS_SAME_FIELD(workspace);
MOSS_SAME_FIELD(groupOffsets);
MOSS_SAME_FIELD(k);
#undef MOSS_SAME_FIELD
static_assert(sizeof(detail::KernelArgs) == sizeof(gemm_kernel::Args));

llvm::Expected<detail::TemplatePlan>
detail::planFromTemplates(const compiler::KernelSource &source) {
  const gemm_kernel::Params params = compiler::getTemplateParams(
      source.spec, source.tiling, source.quickCompile);
  if (const char *problem = gemm_kernel::validate(params))
    return llvm::createStringError(
        llvm::Twine("internal error: the templates reject the compiled "
                    "configuration: ") +
        problem);
  gemm_kernel::Plan plan = gemm_kernel::plan(params);
  TemplatePlan result;
  result.threads = unsigned(plan.threads);
  result.sharedBytes = unsigned(plan.sharedBytes);
  result.clusterSize = unsigned(plan.clusterSize);
  result.boxRowsB = plan.boxB[1];
  result.slicedAccumulators = plan.slicedAccumulators;
  result.usesTmaD = plan.usesTmaD;
  result.boxD[0] = plan.boxD[0];
  result.boxD[1] = plan.boxD[1];
  result.n = params.n;
  result.tileM = params.tileM;
  result.tileN = params.tileN;
  result.clusterM = params.clusterM;
  result.clusterN = params.clusterN;
  result.splitK = params.splitK;
  result.groups = params.groups;
  result.m = params.m;
  result.groupedK = params.groupedK;
  result.groupBlocks = plan.groupBlocks;
  return result;
}

/// The parameters of `plan` that the launch geometry reads.
static gemm_kernel::Params getGeometry(const detail::TemplatePlan &plan) {
  gemm_kernel::Params p;
  p.n = plan.n;
  p.tileM = plan.tileM;
  p.tileN = plan.tileN;
  p.clusterM = plan.clusterM;
  p.clusterN = plan.clusterN;
  p.splitK = plan.splitK;
  p.groups = plan.groups;
  p.m = plan.m;
  p.groupedK = plan.groupedK;
  return p;
}

unsigned detail::getGridSize(const TemplatePlan &plan, int m, int smCount) {
  return unsigned(gemm_kernel::gridSize(getGeometry(plan), m, smCount));
}

int detail::getBoxRowsA(const TemplatePlan &plan, int m) {
  return gemm_kernel::boxRowsA(getGeometry(plan), m);
}

detail::WorkspaceSize detail::getWorkspaceSize(const TemplatePlan &plan,
                                               int m) {
  gemm_kernel::Params p = getGeometry(plan);
  return {size_t(gemm_kernel::workspaceBytes(p, m)),
          size_t(gemm_kernel::workspaceCounterBytes(p, m))};
}
