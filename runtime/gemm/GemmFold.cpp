//===- GemmFold.cpp - The fold passes before a runner's GEMM --------------===//
//
// Where a plan folds an operand's E8M0 block factors in a pass
// (GemmPlan::passFoldsA, passFoldsB), the pass's spec and its run into a
// workspace kept per stream, whose buffers the kernel then reads.
//
//===----------------------------------------------------------------------===//

#include "GemmRunnerState.h"
#include "GemmWorkspaces.h"

#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/MathExtras.h"

using namespace llvm;
using namespace moss;
using compiler::GemmPlan;
using compiler::GemmSpec;

std::optional<runtime::FoldSpec>
moss::detail::getFoldSpec(const GemmPlan &plan, bool operandB, int64_t m) {
  if (!(operandB ? plan.passFoldsB : plan.passFoldsA))
    return std::nullopt;
  const GemmSpec &spec = plan.asked;
  runtime::FoldSpec fold;
  fold.rows = operandB ? getGemmRowsB(spec) : m;
  fold.cols = spec.k;
  fold.format = operandB ? spec.b : spec.a;
  fold.scheme = operandB ? spec.bScaling : spec.aScaling;
  fold.fold = plan.fold;
  return fold;
}

Expected<GemmBuffers> GemmRunner::foldOperands(const GemmPlan &plan, int64_t m,
                                               const GemmBuffers &buffers,
                                               CUstream stream) {
  std::optional<runtime::FoldSpec> folds[2] = {
      moss::detail::getFoldSpec(plan, false, m),
      moss::detail::getFoldSpec(plan, true, m)};
  if (!folds[0] && !folds[1])
    return buffers;
  // Codes, then factors, of each folded operand, 256-byte aligned.
  size_t offsets[2][2] = {}, bytes = 0;
  for (int i = 0; i < 2; ++i)
    if (folds[i]) {
      offsets[i][0] = bytes;
      bytes += alignTo(size_t(folds[i]->rows * folds[i]->cols), 256);
      offsets[i][1] = bytes;
      bytes += alignTo(size_t(runtime::getFoldFactorCount(*folds[i])) * 4, 256);
    }
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  Expected<CUdeviceptr> workspace =
      foldWorkspaces->get(*api, stream, bytes, /*counterBytes=*/0);
  if (!workspace)
    return workspace.takeError();
  GemmBuffers folded = buffers;
  for (int i = 0; i < 2; ++i) {
    if (!folds[i])
      continue;
    const GemmOperand &given = i ? buffers.b : buffers.a;
    runtime::FoldBuffers fb;
    fb.codes = given.codes;
    fb.e8m0 = given.localScales;
    fb.global = given.globalScales;
    fb.outCodes = *workspace + offsets[i][0];
    fb.outFactors = *workspace + offsets[i][1];
    if (Error e = folder->fold(*folds[i], fb, stream))
      return std::move(e);
    GemmOperand &operand = i ? folded.b : folded.a;
    operand = GemmOperand();
    operand.codes = fb.outCodes;
    int64_t count = runtime::getFoldFactorCount(*folds[i]);
    if (folds[i]->fold == numerics::BlockScaleFold::Row) {
      operand.globalScales = fb.outFactors;
      operand.globalScaleCount = count;
    } else {
      operand.localScales = fb.outFactors;
      operand.localScaleCount = count;
    }
  }
  return folded;
}
