//===- GemmCApi.cpp - The C API of the GEMM -------------------------------===//
//
// moss_gemm_spec_t -> compiler::GemmSpec (every enum checked), and a
// GemmRunner per context, kept in the context's extension slot so that it
// lives and dies with the context.
//
//===----------------------------------------------------------------------===//

#include "../api/CApiInternal.h"

#include "moss/Gemm/Gemm.h"

#include "llvm/ADT/Twine.h"

#include <cmath>
#include <cstddef>

using namespace llvm;
using namespace moss;
using moss::capi::convert;
using moss::capi::invalid;
using numerics::ScalingKind;
using numerics::ScalingScheme;

namespace {

moss_error_t convertOperand(const moss_gemm_operand_spec_t &in, char name,
                            numerics::Fp8Format &format,
                            ScalingScheme &scheme) {
  std::string field = std::string("spec->") + char(name - 'A' + 'a') + ".";
  capi::SchemeFields fields;
  if (moss_error_t e = capi::convertSchemeFields(in.scheme, in.global_scope,
                                                 in.format, field, fields))
    return e;
  format = fields.format;
  auto global = fields.scope;
  int64_t rows = in.block_rows == 0 ? 1 : in.block_rows;
  int64_t cols = in.block_cols == 0 ? numerics::getDefaultBlockCols(fields.kind)
                                    : in.block_cols;
  switch (fields.kind) {
  case ScalingKind::PerTensor:
    scheme = ScalingScheme::perTensor();
    break;
  case ScalingKind::PerRow:
    scheme = ScalingScheme::perRow();
    break;
  case ScalingKind::PerGroup:
    scheme = ScalingScheme::perGroup(rows, cols);
    break;
  case ScalingKind::MXFP8:
    scheme = ScalingScheme::mxfp8();
    break;
  case ScalingKind::TwoLevel:
    scheme = ScalingScheme::twoLevel(global, cols);
    break;
  }
  return nullptr;
}

moss_error_t convertType(int32_t value, const char *field, bool optional,
                         std::optional<compiler::FloatType> &out) {
  if (value == MOSS_TYPE_NONE && optional) {
    out.reset();
    return nullptr;
  }
  if (value < MOSS_TYPE_BF16 || value > MOSS_TYPE_F32)
    return invalid(Twine("spec->") + field + "=" + Twine(value) +
                   " is not a moss_float_type_t (expected " +
                   (optional ? "-1..2" : "0..2") + ")");
  out = compiler::FloatType(value);
  return nullptr;
}

moss_error_t convertSpec(const moss_gemm_spec_t *spec,
                         compiler::GemmSpec &out) {
  if (!spec)
    return invalid("spec is NULL");
  // Version 1 ends before mma; a caller built against it has none.
  constexpr size_t kVersion1Size = offsetof(moss_gemm_spec_t, mma);
  if (spec->struct_size < kVersion1Size)
    return invalid("spec->struct_size=" + Twine(uint64_t(spec->struct_size)) +
                   " is smaller than version 1's " +
                   Twine(uint64_t(kVersion1Size)) +
                   " (call moss_gemm_spec_init first)");
  if (spec->struct_size > sizeof(moss_gemm_spec_t))
    return invalid("spec->struct_size=" + Twine(uint64_t(spec->struct_size)) +
                   " is larger than this library's moss_gemm_spec_t (" +
                   Twine(uint64_t(sizeof(moss_gemm_spec_t))) +
                   " bytes): built against a newer moss.h?");
  if (spec->a.reserved != 0 || spec->b.reserved != 0)
    return invalid(std::string("spec->") + (spec->a.reserved ? "a" : "b") +
                   ".reserved must be 0");
  compiler::GemmSpec result;
  result.m = spec->m == MOSS_DYNAMIC ? compiler::GemmSpec::kDynamic : spec->m;
  result.n = spec->n;
  result.k = spec->k;
  if (moss_error_t e = convertOperand(spec->a, 'A', result.a, result.aScaling))
    return e;
  if (moss_error_t e = convertOperand(spec->b, 'B', result.b, result.bScaling))
    return e;
  std::optional<compiler::FloatType> outType;
  if (moss_error_t e = convertType(spec->out, "out", false, outType))
    return e;
  result.out = *outType;
  if (moss_error_t e = convertType(spec->bias, "bias", true, result.bias))
    return e;
  if (moss_error_t e =
          convertType(spec->accumulate, "accumulate", true, result.accumulate))
    return e;
  result.amax = spec->amax != 0;
  result.promoteK = spec->promote_k;
  if (spec->struct_size >= offsetof(moss_gemm_spec_t, mma) + sizeof(spec->mma))
    switch (spec->mma) {
    case MOSS_MMA_AUTO:
      break;
    case MOSS_MMA_FP8:
      result.mma = compiler::MmaType::FP8;
      break;
    case MOSS_MMA_F16:
      result.mma = compiler::MmaType::F16;
      break;
    default:
      return invalid("spec->mma=" + Twine(spec->mma) +
                     " is not a moss_mma_type_t (MOSS_MMA_AUTO, "
                     "MOSS_MMA_FP8 or MOSS_MMA_F16)");
    }
  if (spec->struct_size >=
      offsetof(moss_gemm_spec_t, fold) + sizeof(spec->fold))
    if (moss_error_t e = moss::capi::convertFold(spec->fold, "spec->",
                                                 result.fold))
      return e;
  if (spec->struct_size >=
      offsetof(moss_gemm_spec_t, groups) + sizeof(spec->groups))
    result.groups = spec->groups;
  if (spec->struct_size >=
      offsetof(moss_gemm_spec_t, group_layout) + sizeof(spec->group_layout)) {
    if (spec->group_layout != MOSS_GROUPS_CONTIGUOUS &&
        spec->group_layout != MOSS_GROUPS_MASKED &&
        spec->group_layout != MOSS_GROUPS_ALONG_K)
      return invalid("spec->group_layout=" + Twine(spec->group_layout) +
                     " is not a moss_group_layout_t (MOSS_GROUPS_CONTIGUOUS, "
                     "MOSS_GROUPS_MASKED or MOSS_GROUPS_ALONG_K)");
    result.maskedGroups = spec->group_layout == MOSS_GROUPS_MASKED;
    result.groupedK = spec->group_layout == MOSS_GROUPS_ALONG_K;
  }
  if (result.accumulate) {
    if (!std::isfinite(spec->beta))
      return invalid("spec->beta=" + Twine(std::to_string(spec->beta)) +
                     " is not finite");
    result.beta = spec->beta;
  }
  out = result;
  return nullptr;
}

GemmOperand convertOperand(const moss_gemm_operand_t &in) {
  return {in.codes, in.local_scales, in.local_scale_count, in.global_scales,
          in.global_scale_count};
}

moss_error_t convertBuffers(const moss_gemm_buffers_t *buffers,
                            GemmBuffers &out) {
  if (!buffers)
    return invalid("buffers is NULL");
  out.a = convertOperand(buffers->a);
  out.b = convertOperand(buffers->b);
  out.d = buffers->d;
  out.bias = buffers->bias;
  out.c = buffers->c;
  out.amax = buffers->amax;
  return nullptr;
}

/// The error of a grouped spec given to a call that takes no row offsets.
moss_error_t needsOffsets(const compiler::GemmSpec &spec) {
  return invalid("spec->groups=" + Twine(spec.groups) +
                 ": a grouped GEMM launches through a plan, with its "
                 "offsets (moss_gemm_plan_launch_grouped)");
}

moss_error_t convertCall(const moss_gemm_spec_t *spec, int64_t m,
                         const moss_gemm_buffers_t *buffers,
                         compiler::GemmSpec &outSpec, GemmBuffers &outBuffers) {
  if (moss_error_t e = convertSpec(spec, outSpec))
    return e;
  if (outSpec.groups)
    return needsOffsets(outSpec);
  if (moss_error_t e = convertBuffers(buffers, outBuffers))
    return e;
  return convert(checkGemmLaunch(outSpec, m, outBuffers),
                 MOSS_ERROR_INVALID_ARGUMENT);
}

/// The context's GEMM runner (created on first use), with the context's
/// device current.
moss_error_t getRunner(moss_context_t context, GemmRunner *&runner) {
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  if (!context->gemm) {
    Expected<std::unique_ptr<GemmRunner>> created =
        GemmRunner::create(context->cache);
    if (!created)
      return convert(created.takeError());
    context->gemm = {created->release(), [](GemmRunner *r) { delete r; }};
  }
  runner = context->gemm.get();
  return nullptr;
}

} // namespace

struct moss_gemm_plan {
  moss_context_t context;
  compiler::GemmSpec spec;
};

extern "C" {

void moss_gemm_spec_init(moss_gemm_spec_t *spec) {
  if (!spec)
    return;
  *spec = moss_gemm_spec_t{};
  spec->struct_size = sizeof(moss_gemm_spec_t);
  spec->m = MOSS_DYNAMIC;
  spec->a = {MOSS_FORMAT_E4M3, MOSS_SCHEME_MOSS, 1, 32, MOSS_GLOBAL_ROW, 0};
  spec->b = {
      MOSS_FORMAT_E4M3, MOSS_SCHEME_PER_TENSOR, 1, 0, MOSS_GLOBAL_TENSOR, 0};
  spec->out = MOSS_TYPE_BF16;
  spec->bias = MOSS_TYPE_NONE;
  spec->accumulate = MOSS_TYPE_NONE;
  spec->amax = 0;
  spec->beta = 1.0f;
}

moss_error_t moss_gemm_check(const moss_gemm_spec_t *spec, int64_t m,
                             const moss_gemm_buffers_t *buffers) {
  compiler::GemmSpec converted;
  GemmBuffers devBuffers;
  return convertCall(spec, m, buffers, converted, devBuffers);
}

moss_error_t moss_gemm(moss_context_t context, const moss_gemm_spec_t *spec,
                       int64_t m, const moss_gemm_buffers_t *buffers,
                       void *stream) {
  if (!context)
    return invalid("context is NULL");
  compiler::GemmSpec converted;
  GemmBuffers devBuffers;
  if (moss_error_t e = convertCall(spec, m, buffers, converted, devBuffers))
    return e;
  GemmRunner *runner = nullptr;
  if (moss_error_t e = getRunner(context, runner))
    return e;
  return convert(runner->launchChecked(converted, m, devBuffers,
                                       static_cast<CUstream>(stream)));
}

moss_error_t moss_gemm_plan_create(moss_context_t context,
                                   const moss_gemm_spec_t *spec,
                                   moss_gemm_plan_t *plan) {
  if (!plan)
    return invalid("plan is NULL");
  *plan = nullptr;
  if (!context)
    return invalid("context is NULL");
  compiler::GemmSpec converted;
  if (moss_error_t e = convertSpec(spec, converted))
    return e;
  if (moss_error_t e = convert(checkGemmSpec(converted),
                               MOSS_ERROR_INVALID_ARGUMENT))
    return e;
  GemmRunner *runner = nullptr;
  if (moss_error_t e = getRunner(context, runner))
    return e;
  if (Expected<const GemmKernelInfo *> info = runner->prepare(converted);
      !info)
    return convert(info.takeError());
  *plan = new moss_gemm_plan{context, converted};
  return nullptr;
}

/// moss_gemm_plan_launch, with an m-grouped GEMM's row offsets or counts.
static moss_error_t launchPlan(moss_gemm_plan_t plan, int64_t m,
                               const moss_gemm_buffers_t *buffers,
                               uint64_t groupRows, void *stream) {
  if (!plan)
    return invalid("plan is NULL");
  GemmBuffers devBuffers;
  if (moss_error_t e = convertBuffers(buffers, devBuffers))
    return e;
  devBuffers.groupOffsets = groupRows;
  // As moss_gemm: every failure of these checks is the caller's argument.
  if (moss_error_t e = convert(checkGemmLaunch(plan->spec, m, devBuffers),
                               MOSS_ERROR_INVALID_ARGUMENT))
    return e;
  GemmRunner *runner = nullptr;
  if (moss_error_t e = getRunner(plan->context, runner))
    return e;
  return convert(runner->launchChecked(plan->spec, m, devBuffers,
                                       static_cast<CUstream>(stream)));
}

moss_error_t moss_gemm_plan_launch(moss_gemm_plan_t plan, int64_t m,
                                   const moss_gemm_buffers_t *buffers,
                                   void *stream) {
  if (plan && plan->spec.groups)
    return needsOffsets(plan->spec);
  return launchPlan(plan, m, buffers, 0, stream);
}

moss_error_t moss_gemm_plan_launch_grouped(moss_gemm_plan_t plan, int64_t m,
                                           const moss_gemm_buffers_t *buffers,
                                           uint64_t group_rows, void *stream) {
  if (plan && !plan->spec.groups)
    return invalid("the plan's spec has groups=0: a plain GEMM launches with "
                   "moss_gemm_plan_launch");
  return launchPlan(plan, m, buffers, group_rows, stream);
}

void moss_gemm_plan_destroy(moss_gemm_plan_t plan) { delete plan; }

} // extern "C"
