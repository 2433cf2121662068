//===- CApi.cpp - The C API over moss::runtime ----------------------------===//
//
// Converts C structs to runtime specs (validating every field first) and
// llvm::Error values to error objects. Argument problems are found here, so
// they get MOSS_ERROR_INVALID_ARGUMENT; errors from the runtime are sorted by
// their source (driver, NVRTC) from their messages.
//
//===----------------------------------------------------------------------===//

#include "CApiInternal.h"

#include "moss/Numerics/Fold.h"

#include "moss/Runtime/Api/ExpertWeightScalers.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Api/WeightScaler.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace llvm;
using namespace moss::numerics;
using namespace moss::runtime;
using moss::capi::convert;
using moss::capi::invalid;
using namespace moss::compiler;

namespace {

/// The C code of a runtime error's kind.
moss_error_code_t getCode(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::NoDevice:
    return MOSS_ERROR_NO_DEVICE;
  case ErrorKind::Compile:
    return MOSS_ERROR_COMPILE;
  case ErrorKind::Cuda:
    return MOSS_ERROR_CUDA;
  }
  return MOSS_ERROR_INTERNAL;
}

/// Where a converted spec runs, which decides what it is checked against.
enum class Quantizer { Gpu, Host };

/// Converts a C spec, checking every enum and what the quantizer takes: the
/// GPU quantizers' rules (for both layouts from one read with
/// `bothLayouts`), or only the host reference's (checkQuantizeOptions),
/// which takes any K a scheme's blocks divide.
moss_error_t convertSpec(const moss_quantize_spec_t *spec, QuantizeSpec &out,
                         bool bothLayouts = false,
                         Quantizer quantizer = Quantizer::Gpu) {
  if (!spec)
    return invalid("spec is NULL");
  // The spec's fields were fixed when it gained struct_size (API version 2);
  // a larger one comes from a newer header whose fields this library lacks.
  if (spec->struct_size != sizeof(moss_quantize_spec_t))
    return invalid("spec->struct_size=" + Twine(uint64_t(spec->struct_size)) +
                   " is not this library's sizeof(moss_quantize_spec_t) (" +
                   Twine(uint64_t(sizeof(moss_quantize_spec_t))) +
                   "): call moss_quantize_spec_init first");
  if (spec->input != MOSS_INPUT_F32 && spec->input != MOSS_INPUT_BF16)
    return invalid("spec->input=" + Twine(spec->input) +
                   " is not a moss_input_type_t (expected 0..1)");
  moss::capi::SchemeFields fields;
  if (moss_error_t error = moss::capi::convertSchemeFields(
          spec->scheme, spec->global_scope, spec->format, "spec->", fields))
    return error;

  QuantizeSpec result;
  result.rows = spec->rows;
  result.cols = spec->cols;
  result.input = spec->input == MOSS_INPUT_F32 ? InputType::F32
                                               : InputType::BF16;
  ScalingScheme &scheme = result.options.scheme;
  scheme.kind = fields.kind;
  bool blocked = scheme.kind == ScalingKind::PerGroup ||
                 scheme.kind == ScalingKind::MXFP8 ||
                 scheme.kind == ScalingKind::TwoLevel;
  scheme.blockCols = !blocked                ? 0
                     : spec->block_cols == 0 ? getDefaultBlockCols(scheme.kind)
                                             : spec->block_cols;
  scheme.blockRows = spec->block_rows == 0 ? 1 : spec->block_rows;
  scheme.global = fields.scope;
  result.options.format = fields.format;
  result.options.transpose = spec->transpose != 0;
  // A quantizer folds only when asked: AUTO means none here.
  std::optional<BlockScaleFold> fold;
  if (moss_error_t error = moss::capi::convertFold(spec->fold, "spec->", fold))
    return error;
  result.options.fold = fold.value_or(BlockScaleFold::None);
  result.bothLayouts = bothLayouts;
  Error error =
      quantizer == Quantizer::Gpu
          ? checkGpuQuantizeSpec(result)
          : checkQuantizeOptions(result.rows, result.cols, result.options);
  if (error)
    return convert(std::move(error), MOSS_ERROR_INVALID_ARGUMENT);
  out = result;
  return nullptr;
}

moss_quantize_layout_t toCLayout(const QuantizeLayout &layout) {
  return {layout.codeRows,  layout.codeCols,          layout.localRows,
          layout.localCols, layout.localElementBytes, layout.globalCount};
}

/// The output shapes of `spec`, checked against `quantizer`'s rules.
moss_error_t writeLayout(const moss_quantize_spec_t *spec,
                         moss_quantize_layout_t *out, Quantizer quantizer) {
  if (!out)
    return invalid("out is NULL");
  QuantizeSpec converted;
  if (moss_error_t error =
          convertSpec(spec, converted, /*bothLayouts=*/false, quantizer))
    return error;
  *out = toCLayout(getQuantizeLayout(converted));
  return nullptr;
}

/// Checks one buffer pointer (device, or host as an integer): given exactly
/// when needed, and aligned.
moss_error_t checkPointer(uint64_t ptr, bool needed, unsigned alignment,
                          StringRef name, const ScalingScheme &scheme,
                          StringRef owner = "buffers") {
  if (needed && !ptr)
    return invalid(owner + "->" + name + " is 0 (NULL), but " + scheme.str() +
                   " writes it");
  if (!needed && ptr)
    return invalid(owner + "->" + name + " is given, but " + scheme.str() +
                   " has none");
  if (ptr % alignment != 0)
    return invalid(owner + "->" + name + " must be " + Twine(alignment) +
                   "-byte aligned, got 0x" + Twine::utohexstr(ptr));
  return nullptr;
}

/// Converts a quantization call's spec and checks it has buffers; `scheme`
/// gets the scales it writes (the folded scheme's, for one that folds).
moss_error_t convertCall(const moss_quantize_spec_t *spec, const void *buffers,
                         QuantizeSpec &converted, ScalingScheme &scheme,
                         bool bothLayouts = false,
                         Quantizer quantizer = Quantizer::Gpu) {
  if (moss_error_t error = convertSpec(spec, converted, bothLayouts, quantizer))
    return error;
  if (!buffers)
    return invalid("buffers is NULL");
  scheme = getFoldedScheme(converted.options.scheme, converted.options.fold);
  return nullptr;
}

/// Checks a quantization's input, codes and scales pointers against the
/// scales `scheme` writes: `dataAlign` for the input and codes, `scaleAlign`
/// for the scales.
moss_error_t checkBuffers(uint64_t x, uint64_t q, uint64_t local,
                          uint64_t global, unsigned dataAlign,
                          unsigned scaleAlign, const ScalingScheme &scheme) {
  if (moss_error_t e = checkPointer(x, true, dataAlign, "x", scheme))
    return e;
  if (moss_error_t e = checkPointer(q, true, dataAlign, "q", scheme))
    return e;
  if (moss_error_t e = checkPointer(local, scheme.hasLocalScales(),
                                    scaleAlign, "local", scheme))
    return e;
  return checkPointer(global, scheme.hasGlobalScales(), scaleAlign, "global",
                      scheme);
}

/// Checks a GPU quantization's buffers against the scales `scheme` writes
/// and converts them.
moss_error_t checkDeviceBuffers(const moss_quantize_buffers_t &buffers,
                                const ScalingScheme &scheme,
                                QuantizeBuffers &out) {
  if (moss_error_t e = checkBuffers(buffers.x, buffers.q, buffers.local,
                                    buffers.global, 16, 4, scheme))
    return e;
  if (buffers.counters % 8 != 0)
    return invalid("buffers->counters must be 8-byte aligned, got 0x" +
                   Twine::utohexstr(buffers.counters));
  out = QuantizeBuffers{buffers.x, buffers.q, buffers.local, buffers.global,
                        buffers.counters};
  return nullptr;
}

/// Checks the arguments common to moss_quantize and moss_cast_with_scale.
moss_error_t checkCall(moss_context_t context, const moss_quantize_spec_t *spec,
                       const moss_quantize_buffers_t *buffers,
                       QuantizeSpec &converted, QuantizeBuffers &out,
                       bool bothLayouts = false) {
  if (!context)
    return invalid("context is NULL");
  ScalingScheme scheme;
  if (moss_error_t error =
          convertCall(spec, buffers, converted, scheme, bothLayouts))
    return error;
  return checkDeviceBuffers(*buffers, scheme, out);
}

/// Checks a cast's device scale against its spec: per-tensor only, 4-byte
/// aligned.
moss_error_t checkCastScale(const moss_quantize_spec_t &spec,
                            const QuantizeSpec &converted, uint64_t scale) {
  if (converted.options.scheme.kind != ScalingKind::PerTensor)
    return invalid("a cast with a given scale is per-tensor, not spec->scheme=" +
                   Twine(spec.scheme) + " (" + converted.options.scheme.str() +
                   ")");
  if (scale % 4 != 0)
    return invalid("scale must be 4-byte aligned, got 0x" +
                   Twine::utohexstr(scale));
  return nullptr;
}

/// Checks the transposed outputs of a dual-layout quantize, whose input is
/// the row-major buffers' x (`x` 0 or that one).
moss_error_t checkTransposedBuffers(const moss_quantize_buffers_t *t,
                                    uint64_t x, const ScalingScheme &scheme,
                                    QuantizeBuffers &out) {
  if (!t)
    return invalid("transposed is NULL");
  if (t->x && t->x != x)
    return invalid("transposed->x differs from buffers->x: both layouts "
                   "come from one read of one input (give 0 or the same)");
  constexpr StringRef kOwner = "transposed";
  if (moss_error_t e = checkPointer(t->q, true, 16, "q", scheme, kOwner))
    return e;
  if (moss_error_t e = checkPointer(t->local, scheme.hasLocalScales(), 4,
                                    "local", scheme, kOwner))
    return e;
  if (moss_error_t e = checkPointer(t->global, scheme.hasGlobalScales(), 4,
                                    "global", scheme, kOwner))
    return e;
  if (t->counters % 8 != 0)
    return invalid("transposed->counters must be 8-byte aligned, got 0x" +
                   Twine::utohexstr(t->counters));
  out = QuantizeBuffers{x, t->q, t->local, t->global, t->counters};
  return nullptr;
}

} // namespace

/// A quantization prepared once (moss_quantize_plan_create): its spec and
/// the scales it writes (the folded scheme's, for one that folds).
struct moss_quantize_plan {
  moss_context_t context;
  QuantizeSpec spec;
  ScalingScheme scheme;
};

moss_error_t moss::capi::convertFold(int32_t fold, const Twine &field,
                                      std::optional<BlockScaleFold> &out) {
  switch (fold) {
  case MOSS_FOLD_AUTO:
    out.reset();
    return nullptr;
  case MOSS_FOLD_NONE:
    out = BlockScaleFold::None;
    return nullptr;
  case MOSS_FOLD_128:
    out = BlockScaleFold::K128;
    return nullptr;
  case MOSS_FOLD_ROW:
    out = BlockScaleFold::Row;
    return nullptr;
  }
  return invalid(field + "fold=" + Twine(fold) +
                 " is not a moss_fold_t (MOSS_FOLD_AUTO, MOSS_FOLD_NONE, "
                 "MOSS_FOLD_128 or MOSS_FOLD_ROW)");
}

moss_error_t moss::capi::makeError(moss_error_code_t code,
                                     const Twine &message) {
  return new moss_error{code, message.str()};
}

moss_error_t moss::capi::invalid(const Twine &message) {
  return makeError(MOSS_ERROR_INVALID_ARGUMENT, message);
}

moss_error_t moss::capi::convertSchemeFields(int32_t scheme,
                                             int32_t globalScope,
                                             int32_t format,
                                             const Twine &field,
                                             SchemeFields &out) {
  if (scheme < MOSS_SCHEME_PER_TENSOR || scheme > MOSS_SCHEME_MOSS)
    return invalid(field + "scheme=" + Twine(scheme) +
                   " is not a moss_scheme_t (expected 0..4)");
  if (globalScope != MOSS_GLOBAL_TENSOR && globalScope != MOSS_GLOBAL_ROW)
    return invalid(field + "global_scope=" + Twine(globalScope) +
                   " is not a moss_global_scope_t (expected 0..1)");
  if (format != MOSS_FORMAT_E4M3 && format != MOSS_FORMAT_E5M2)
    return invalid(field + "format=" + Twine(format) +
                   " is not a moss_fp8_format_t (expected 0..1)");
  out.kind = ScalingKind(scheme);
  out.scope = globalScope == MOSS_GLOBAL_ROW ? GlobalScope::Row
                                             : GlobalScope::Tensor;
  out.format = format == MOSS_FORMAT_E4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
  return nullptr;
}

moss_error_t moss::capi::convert(Error error,
                                 std::optional<moss_error_code_t> code) {
  if (!error)
    return nullptr;
  // The code comes from the error's type (runtime::RuntimeError); anything
  // untyped is internal.
  moss_error_code_t typed = MOSS_ERROR_INTERNAL;
  std::string message;
  handleAllErrors(std::move(error), [&](const ErrorInfoBase &info) {
    if (info.isA<RuntimeError>())
      typed = getCode(static_cast<const RuntimeError &>(info).getKind());
    if (!message.empty())
      message += "\n";
    message += info.message();
  });
  return makeError(code ? *code : typed, message);
}

extern "C" {

int moss_api_version(void) { return MOSS_API_VERSION; }

const char *moss_version(void) { return MOSS_VERSION_STRING; }

const char *moss_error_message(moss_error_t error) {
  return error ? error->message.c_str() : "";
}

moss_error_code_t moss_error_code(moss_error_t error) {
  return error ? error->code : MOSS_ERROR_NONE;
}

void moss_error_destroy(moss_error_t error) { delete error; }

moss_error_t moss_quantize_layout(const moss_quantize_spec_t *spec,
                                  moss_quantize_layout_t *out) {
  return writeLayout(spec, out, Quantizer::Gpu);
}

moss_error_t moss_quantize_host_layout(const moss_quantize_spec_t *spec,
                                       moss_quantize_layout_t *out) {
  return writeLayout(spec, out, Quantizer::Host);
}

moss_error_t
moss_quantize_both_layouts_layout(const moss_quantize_spec_t *spec,
                                  moss_quantize_layout_t *row_major,
                                  moss_quantize_layout_t *transposed) {
  if (!row_major || !transposed)
    return invalid(Twine(row_major ? "transposed" : "row_major") + " is NULL");
  QuantizeSpec converted;
  if (moss_error_t error = convertSpec(spec, converted, /*bothLayouts=*/true))
    return error;
  *row_major = toCLayout(getQuantizeLayout(converted));
  *transposed = toCLayout(getQuantizeLayout(getTransposedSpec(converted)));
  return nullptr;
}

moss_error_t moss_quantize_host(const moss_quantize_spec_t *spec,
                                const moss_quantize_host_buffers_t *buffers) {
  QuantizeSpec converted;
  ScalingScheme scheme;
  if (moss_error_t error = convertCall(spec, buffers, converted, scheme,
                                       /*bothLayouts=*/false, Quantizer::Host))
    return error;
  auto address = [](const void *p) { return uint64_t(uintptr_t(p)); };
  if (moss_error_t e = checkBuffers(address(buffers->x), address(buffers->q),
                                    address(buffers->local),
                                    address(buffers->global), 1, 1, scheme))
    return e;

  size_t count = size_t(converted.rows) * size_t(converted.cols);
  std::vector<float> widened;
  ArrayRef<float> x;
  if (converted.input == InputType::F32) {
    x = ArrayRef<float>(static_cast<const float *>(buffers->x), count);
  } else {
    // bf16 is the top half of an FP32: widening is exact.
    const auto *bits = static_cast<const uint16_t *>(buffers->x);
    widened.resize(count);
    for (size_t i = 0; i < count; ++i) {
      uint32_t word = uint32_t(bits[i]) << 16;
      std::memcpy(&widened[i], &word, 4);
    }
    x = widened;
  }
  Expected<QuantizedTensor> q =
      quantize(x, converted.rows, converted.cols, converted.options);
  if (!q)
    return convert(q.takeError(), MOSS_ERROR_INVALID_ARGUMENT);
  QuantizeLayout layout = getQuantizeLayout(converted);
  size_t localCount = size_t(layout.localRows * layout.localCols);
  if (q->codes.size() != size_t(layout.codeRows * layout.codeCols) ||
      q->global.size() != size_t(layout.globalCount) ||
      (layout.localElementBytes == 1 && q->localE8M0.size() != localCount) ||
      (layout.localElementBytes == 4 && q->localF32.size() != localCount))
    return moss::capi::makeError(
        MOSS_ERROR_INTERNAL,
        "the reference quantizer's output does not match the layout of " +
            scheme.str());
  std::memcpy(buffers->q, q->codes.data(), q->codes.size());
  if (layout.localElementBytes == 1)
    std::memcpy(buffers->local, q->localE8M0.data(), localCount);
  else if (layout.localElementBytes == 4)
    std::memcpy(buffers->local, q->localF32.data(), localCount * 4);
  if (!q->global.empty())
    std::memcpy(buffers->global, q->global.data(), q->global.size() * 4);
  if (buffers->counters) {
    buffers->counters[0] += uint64_t(q->stats.saturated);
    buffers->counters[1] += uint64_t(q->stats.nonFiniteBlocks);
  }
  return nullptr;
}

void moss_quantize_spec_init(moss_quantize_spec_t *spec) {
  if (!spec)
    return;
  *spec = moss_quantize_spec_t{};
  spec->struct_size = sizeof(moss_quantize_spec_t);
  spec->input = MOSS_INPUT_BF16;
  spec->scheme = MOSS_SCHEME_MOSS;
  spec->block_rows = 1;
  spec->block_cols = getDefaultBlockCols(ScalingKind::TwoLevel);
  spec->global_scope = MOSS_GLOBAL_ROW;
  spec->format = MOSS_FORMAT_E4M3;
  spec->transpose = 0;
  spec->fold = MOSS_FOLD_NONE;
}

void moss_context_options_init(moss_context_options_t *options) {
  if (!options)
    return;
  *options = moss_context_options_t{};
  options->struct_size = sizeof(moss_context_options_t);
  options->device_ordinal = 0;
  options->cache_directory = nullptr;
}

moss_error_t moss_context_create(const moss_context_options_t *options,
                                 moss_context_t *out) {
  if (!out)
    return invalid("out is NULL");
  *out = nullptr;
  if (!options)
    return invalid("options is NULL");
  // Version 1 callers pass at least the fields of version 1; fields a newer
  // caller appends are ignored.
  size_t v1Size = offsetof(moss_context_options_t, cache_directory) +
                  sizeof(options->cache_directory);
  if (options->struct_size < v1Size)
    return invalid("options->struct_size=" + Twine(uint64_t(options->struct_size)) +
                   " is smaller than version 1's " + Twine(uint64_t(v1Size)) +
                   " (call moss_context_options_init first)");
  if (options->device_ordinal < 0)
    return invalid("options->device_ordinal=" + Twine(options->device_ordinal) +
                   " must be non-negative");

  Expected<Device> device = Device::open(options->device_ordinal);
  if (!device)
    return convert(device.takeError());
  if (Error error = device->makeCurrent())
    return convert(std::move(error));
  KernelCacheOptions cacheOptions;
  if (options->cache_directory)
    cacheOptions.directory = options->cache_directory;
  *out = new moss_context(std::move(*device), std::move(cacheOptions));
  return nullptr;
}

void moss_context_destroy(moss_context_t context) {
  if (!context)
    return;
  // The quantizer frees its workspace in the device's context.
  if (Error error = context->device.makeCurrent())
    consumeError(std::move(error));
  delete context;
}

/// Quantizes checked arguments on the context's device.
static moss_error_t quantizeOnDevice(moss_context_t context,
                                     const QuantizeSpec &spec,
                                     const QuantizeBuffers &buffers,
                                     void *stream) {
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return convert(context->quantizer.quantize(spec, buffers,
                                             static_cast<CUstream>(stream)));
}

moss_error_t moss_quantize(moss_context_t context,
                           const moss_quantize_spec_t *spec,
                           const moss_quantize_buffers_t *buffers,
                           void *stream) {
  QuantizeSpec converted;
  QuantizeBuffers devBuffers;
  if (moss_error_t error =
          checkCall(context, spec, buffers, converted, devBuffers))
    return error;
  return quantizeOnDevice(context, converted, devBuffers, stream);
}

moss_error_t moss_quantize_gathered(moss_context_t context,
                                    const moss_quantize_spec_t *spec,
                                    const moss_quantize_buffers_t *buffers,
                                    uint64_t gather_rows, int64_t source_rows,
                                    void *stream) {
  QuantizeSpec converted;
  QuantizeBuffers devBuffers;
  if (moss_error_t error =
          checkCall(context, spec, buffers, converted, devBuffers))
    return error;
  if (!gather_rows)
    return invalid("gather_rows is 0 (NULL); moss_quantize takes the rows "
                   "in order");
  converted.gather = true;
  if (Error error = checkGpuQuantizeSpec(converted))
    return convert(std::move(error), MOSS_ERROR_INVALID_ARGUMENT);
  devBuffers.gatherRows = gather_rows;
  devBuffers.gatherSourceRows = source_rows;
  return quantizeOnDevice(context, converted, devBuffers, stream);
}

moss_error_t moss_quantize_plan_create(moss_context_t context,
                                       const moss_quantize_spec_t *spec,
                                       moss_quantize_plan_t *plan) {
  if (!plan)
    return invalid("plan is NULL");
  *plan = nullptr;
  if (!context)
    return invalid("context is NULL");
  QuantizeSpec converted;
  if (moss_error_t error = convertSpec(spec, converted))
    return error;
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  if (Error error = context->quantizer.prepare(converted))
    return convert(std::move(error));
  *plan = new moss_quantize_plan{
      context, converted,
      getFoldedScheme(converted.options.scheme, converted.options.fold)};
  return nullptr;
}

moss_error_t moss_quantize_plan_launch(moss_quantize_plan_t plan,
                                       const moss_quantize_buffers_t *buffers,
                                       void *stream) {
  if (!plan)
    return invalid("plan is NULL");
  if (!buffers)
    return invalid("buffers is NULL");
  QuantizeBuffers devBuffers;
  if (moss_error_t error =
          checkDeviceBuffers(*buffers, plan->scheme, devBuffers))
    return error;
  return quantizeOnDevice(plan->context, plan->spec, devBuffers, stream);
}

void moss_quantize_plan_destroy(moss_quantize_plan_t plan) { delete plan; }

moss_error_t moss_cast_with_scale(moss_context_t context,
                                  const moss_quantize_spec_t *spec,
                                  uint64_t scale,
                                  const moss_quantize_buffers_t *buffers,
                                  void *stream) {
  QuantizeSpec converted;
  QuantizeBuffers devBuffers;
  if (moss_error_t error =
          checkCall(context, spec, buffers, converted, devBuffers))
    return error;
  if (moss_error_t error = checkCastScale(*spec, converted, scale))
    return error;
  if (!scale)
    return invalid("scale is 0");
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return convert(context->quantizer.castWithScale(
      converted, scale, devBuffers, static_cast<CUstream>(stream)));
}

moss_error_t moss_quantize_both_layouts(
    moss_context_t context, const moss_quantize_spec_t *spec,
    const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, uint64_t scale, void *stream) {
  QuantizeSpec converted;
  QuantizeBuffers rowMajor, t;
  if (moss_error_t error = checkCall(context, spec, buffers, converted,
                                     rowMajor, /*bothLayouts=*/true))
    return error;
  if (moss_error_t error = checkTransposedBuffers(
          transposed, buffers->x,
          getFoldedScheme(converted.options.scheme, converted.options.fold), t))
    return error;
  if (scale)
    if (moss_error_t error = checkCastScale(*spec, converted, scale))
      return error;
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return convert(context->quantizer.quantizeBothLayouts(
      converted, rowMajor, t, static_cast<CUstream>(stream), scale));
}

//===--- Automatic weight scaling -----------------------------------------===//

} // extern "C"

static_assert(int(RescaleReason::None) == MOSS_RESCALE_NONE &&
                  int(RescaleReason::NoAnchor) == MOSS_RESCALE_NO_ANCHOR &&
                  int(RescaleReason::Interval) == MOSS_RESCALE_INTERVAL &&
                  int(RescaleReason::Saturation) == MOSS_RESCALE_SATURATION,
              "moss_rescale_reason_t mirrors RescaleReason");

struct moss_weight_scaler {
  /// The context whose device and quantizer the scaler uses.
  moss_context_t context;
  std::unique_ptr<WeightScaler> scaler;
};

struct moss_expert_scalers {
  /// The context whose device and quantizer the scalers use.
  moss_context_t context;
  std::unique_ptr<ExpertWeightScalers> scalers;
};

namespace {

/// Converts C options, checking every field without a GPU.
moss_error_t convertScalerOptions(const moss_weight_scaler_options_t *options,
                                  WeightScalerOptions &out) {
  if (!options)
    return invalid("options is NULL");
  size_t v1Size = offsetof(moss_weight_scaler_options_t, interval) +
                  sizeof(options->interval);
  if (options->struct_size < v1Size)
    return invalid("options->struct_size=" +
                   Twine(uint64_t(options->struct_size)) +
                   " is smaller than version 1's " + Twine(uint64_t(v1Size)) +
                   " (call moss_weight_scaler_options_init first)");
  if (options->bound != MOSS_ADAM_BOUND_PAPER &&
      options->bound != MOSS_ADAM_BOUND_PROVABLE)
    return invalid("options->bound=" + Twine(options->bound) +
                   " is not a moss_adam_bound_t (expected 0..1)");
  WeightScalerOptions result;
  result.scaling.bound = options->bound == MOSS_ADAM_BOUND_PAPER
                             ? AdamBound::Paper
                             : AdamBound::Provable;
  result.scaling.beta1 = options->beta1;
  result.scaling.beta2 = options->beta2;
  result.scaling.interval = options->interval;
  result.explicitBound = options->explicit_bound;
  // The planner checks the interval, the betas and the explicit bound.
  Expected<WeightScalePlanner> planner = WeightScalePlanner::create(result);
  if (!planner)
    return convert(planner.takeError(), MOSS_ERROR_INVALID_ARGUMENT);
  out = result;
  return nullptr;
}

/// The checks of a scaler's create before it allocates: the options first
/// (without a GPU), then the context, made current.
moss_error_t beginScalerCreate(moss_context_t context,
                               const moss_weight_scaler_options_t *options,
                               WeightScalerOptions &converted) {
  if (moss_error_t error = convertScalerOptions(options, converted))
    return error;
  if (!context)
    return invalid("context is NULL");
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return nullptr;
}

/// The checks the experts' steps share before each expert's own.
moss_error_t checkExpertsCall(const moss_quantize_spec_t *spec,
                              const moss_quantize_buffers_t *buffers) {
  if (!spec)
    return invalid("spec is NULL");
  if (!buffers)
    return invalid("buffers is NULL");
  if (spec->rows < 1 || spec->cols < 1)
    return invalid("spec is [" + Twine(spec->rows) + ", " + Twine(spec->cols) +
                   "]; each expert needs at least one value");
  return nullptr;
}

/// A scaler step's arguments, converted and checked.
struct ScalerStep {
  QuantizeSpec spec;
  QuantizeBuffers buffers, transposed;
  bool both = false;
  /// A fused AdamW step's constants and this weight's state.
  std::optional<AdamWBuffers> adamw;
  AdamWCoefficients coefficients;
};

/// The constants of `*adamw`, checked.
moss_error_t convertAdamW(const moss_adamw_step_t *adamw,
                          AdamWCoefficients &out) {
  if (!adamw)
    return invalid("adamw is NULL");
  if (adamw->struct_size < sizeof(moss_adamw_step_t))
    return invalid("adamw->struct_size=" + Twine(uint64_t(adamw->struct_size)) +
                   " is smaller than version 1's " +
                   Twine(uint64_t(sizeof(moss_adamw_step_t))) +
                   " (fill it with moss_adamw_step_init)");
  Expected<AdamWCoefficients> c =
      getAdamWCoefficients({adamw->lr, adamw->beta1, adamw->beta2, adamw->eps,
                            adamw->weight_decay, adamw->step});
  if (!c)
    return convert(c.takeError(), MOSS_ERROR_INVALID_ARGUMENT);
  out = *c;
  return nullptr;
}

/// Expert g's AdamW state: `adamw`'s arrays moved by g experts of `spec`'s
/// FP32 elements (0 stays 0).
AdamWBuffers adamwState(const moss_adamw_step_t &adamw,
                        const moss_quantize_spec_t &spec, size_t g) {
  const uint64_t bytes = uint64_t(spec.rows) * uint64_t(spec.cols) * 4;
  auto at = [&](uint64_t base) { return base ? base + g * bytes : 0; };
  return {at(adamw.grad), at(adamw.exp_avg), at(adamw.exp_avg_sq)};
}

/// Checks the arguments of a scaler step of `context` (`transposed` NULL
/// for moss_weight_scaler_step, else moss_weight_scaler_step_both_layouts),
/// without a GPU.
/// With `adamw` (the step's constants in step.coefficients), a fused AdamW
/// step with that state.
moss_error_t checkScalerStep(moss_context_t context, double lr,
                             const moss_quantize_spec_t *spec,
                             const moss_quantize_buffers_t *buffers,
                             const moss_quantize_buffers_t *transposed,
                             ScalerStep &step,
                             const AdamWBuffers *adamw = nullptr) {
  step.both = transposed != nullptr;
  if (moss_error_t error =
          checkCall(context, spec, buffers, step.spec, step.buffers, step.both))
    return error;
  if (adamw) {
    step.spec.adamw = true;
    step.adamw = *adamw;
  }
  if (step.spec.options.scheme.kind != ScalingKind::PerTensor)
    return invalid("the weight scaler casts per-tensor, not spec->scheme=" +
                   Twine(spec->scheme) + " (" + step.spec.options.scheme.str() +
                   ")");
  if (buffers->counters)
    return invalid("buffers->counters must be 0: the weight scaler counts "
                   "into its own");
  if (step.both) {
    if (moss_error_t error = checkTransposedBuffers(
            transposed, buffers->x, step.spec.options.scheme, step.transposed))
      return error;
    if (transposed->counters)
      return invalid("transposed->counters must be 0: the weight scaler "
                     "counts into its own");
  }
  // The learning rate, and what else the scaler asks of its arguments.
  if (Error error =
          checkWeightScalerStep(lr, step.spec, step.buffers,
                                step.both ? &step.transposed : nullptr, adamw))
    return convert(std::move(error), MOSS_ERROR_INVALID_ARGUMENT);
  return nullptr;
}

/// Launches a checked step (its scaler's context current).
moss_error_t launchScalerStep(moss_weight_scaler_t scaler, double lr,
                              const ScalerStep &step, void *stream,
                              moss_weight_scale_step_t *out) {
  // (checkScalerStep ran checkWeightScalerStep.)
  std::optional<AdamWUpdate> update;
  if (step.adamw)
    update = AdamWUpdate{step.coefficients, ArrayRef(*step.adamw)};
  Expected<WeightScaleDecision> decision = scaler->scaler->castStepChecked(
      lr, step.spec, step.buffers, static_cast<CUstream>(stream),
      step.both ? &step.transposed : nullptr, update ? &*update : nullptr);
  if (!decision)
    return convert(decision.takeError());
  if (out)
    *out = moss_weight_scale_step_t{decision->step, int32_t(decision->reason),
                                    decision->scale};
  return nullptr;
}

/// moss_weight_scaler_step, with the transposed layout's buffers or NULL,
/// and fused with `adamw`'s step where not NULL.
moss_error_t scalerStep(moss_weight_scaler_t scaler, double lr,
                        const moss_quantize_spec_t *spec,
                        const moss_quantize_buffers_t *buffers,
                        const moss_quantize_buffers_t *transposed, void *stream,
                        moss_weight_scale_step_t *out,
                        const moss_adamw_step_t *adamw = nullptr) {
  if (!scaler)
    return invalid("scaler is NULL");
  ScalerStep step;
  std::optional<AdamWBuffers> state;
  if (adamw) {
    if (moss_error_t error = convertAdamW(adamw, step.coefficients))
      return error;
    if (spec)
      state = adamwState(*adamw, *spec, 0);
  }
  if (moss_error_t error =
          checkScalerStep(scaler->context, lr, spec, buffers, transposed, step,
                          state ? &*state : nullptr))
    return error;
  if (Error error = scaler->context->device.makeCurrent())
    return convert(std::move(error));
  return launchScalerStep(scaler, lr, step, stream, out);
}

/// Checks a moss_weight_scaler_stats_t the caller passes.
moss_error_t checkStatsOut(const moss_weight_scaler_stats_t *out) {
  if (!out)
    return invalid("out is NULL");
  if (out->struct_size < sizeof(moss_weight_scaler_stats_t))
    return invalid("out->struct_size=" + Twine(uint64_t(out->struct_size)) +
                   " is smaller than version 1's " +
                   Twine(uint64_t(sizeof(moss_weight_scaler_stats_t))) +
                   " (set it to sizeof(moss_weight_scaler_stats_t))");
  return nullptr;
}

/// `out` (its struct_size checked) filled from `s`.
void fillStats(const WeightScalerStats &s, moss_weight_scaler_stats_t *out) {
  size_t size = out->struct_size;
  *out = moss_weight_scaler_stats_t{};
  out->struct_size = size;
  out->steps = s.steps;
  out->rescales = s.rescales;
  out->no_anchor_rescales = s.noAnchorRescales;
  out->interval_rescales = s.intervalRescales;
  out->saturation_rescales = s.saturationRescales;
  out->saturation_events = s.saturationEvents;
  out->saturated_values = s.saturatedValues;
  out->non_finite_blocks = s.nonFiniteBlocks;
  out->non_finite_anchors = s.nonFiniteAnchors;
  out->observed_step = s.observedStep;
  out->last_saturation_step = s.lastSaturationStep;
  out->anchors_applied = s.anchorsApplied;
  out->anchor_step = s.anchorStep;
  out->anchor_amax = s.anchorAmax;
  out->dropped_snapshots = s.droppedSnapshots;
}

/// `error` (not NULL) with `prefix` before its message.
moss_error_t prefixed(moss_error_t error, const Twine &prefix) {
  error->message = (prefix + error->message).str();
  return error;
}

/// `buffers` moved to expert `g` of stacked experts of `spec`'s shape:
/// the input by its elements, the codes by their bytes, the scale by one
/// FP32 (0 stays 0).
moss_quantize_buffers_t expertBuffers(const moss_quantize_buffers_t &buffers,
                                      const moss_quantize_spec_t &spec,
                                      size_t g) {
  const uint64_t elements = uint64_t(spec.rows) * uint64_t(spec.cols);
  const uint64_t inputBytes = spec.input == MOSS_INPUT_F32 ? 4 : 2;
  auto at = [&](uint64_t base, uint64_t stride) {
    return base ? base + g * stride : 0;
  };
  moss_quantize_buffers_t expert = buffers;
  expert.x = at(buffers.x, elements * inputBytes);
  expert.q = at(buffers.q, elements);
  expert.global = at(buffers.global, 4);
  return expert;
}

} // namespace

extern "C" {

void moss_weight_scaler_options_init(moss_weight_scaler_options_t *options) {
  if (!options)
    return;
  *options = moss_weight_scaler_options_t{};
  options->struct_size = sizeof(moss_weight_scaler_options_t);
  options->bound = MOSS_ADAM_BOUND_PAPER;
  options->beta1 = 0.9;
  options->beta2 = 0.999;
  options->explicit_bound = 0.0;
  options->interval = 500;
}

moss_error_t moss_weight_scaler_create(
    moss_context_t context, const moss_weight_scaler_options_t *options,
    moss_weight_scaler_t *out) {
  if (!out)
    return invalid("out is NULL");
  *out = nullptr;
  WeightScalerOptions converted;
  if (moss_error_t error = beginScalerCreate(context, options, converted))
    return error;
  Expected<std::unique_ptr<WeightScaler>> scaler =
      WeightScaler::create(context->quantizer, converted);
  if (!scaler)
    return convert(scaler.takeError());
  *out = new moss_weight_scaler{context, std::move(*scaler)};
  return nullptr;
}

void moss_weight_scaler_destroy(moss_weight_scaler_t scaler) {
  if (!scaler)
    return;
  // The scaler frees its memory and events in the device's context.
  if (Error error = scaler->context->device.makeCurrent())
    consumeError(std::move(error));
  delete scaler;
}

moss_error_t moss_weight_scaler_step(moss_weight_scaler_t scaler, double lr,
                                     const moss_quantize_spec_t *spec,
                                     const moss_quantize_buffers_t *buffers,
                                     void *stream,
                                     moss_weight_scale_step_t *out) {
  return scalerStep(scaler, lr, spec, buffers, nullptr, stream, out);
}

moss_error_t moss_weight_scaler_step_both_layouts(
    moss_weight_scaler_t scaler, double lr, const moss_quantize_spec_t *spec,
    const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out) {
  if (!transposed)
    return invalid("transposed is NULL");
  return scalerStep(scaler, lr, spec, buffers, transposed, stream, out);
}

void moss_adamw_step_init(moss_adamw_step_t *adamw) {
  if (!adamw)
    return;
  *adamw = moss_adamw_step_t{};
  adamw->struct_size = sizeof(moss_adamw_step_t);
  const AdamWStep defaults;
  adamw->lr = defaults.lr;
  adamw->beta1 = defaults.beta1;
  adamw->beta2 = defaults.beta2;
  adamw->eps = defaults.eps;
  adamw->weight_decay = defaults.weightDecay;
  adamw->step = defaults.step;
}

moss_error_t moss_weight_scaler_adamw_step(
    moss_weight_scaler_t scaler, const moss_adamw_step_t *adamw,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out) {
  if (!adamw)
    return invalid("adamw is NULL");
  return scalerStep(scaler, adamw->lr, spec, buffers, transposed, stream, out,
                    adamw);
}

moss_error_t moss_weight_scaler_step_experts(
    const moss_weight_scaler_t *scalers, size_t count, double lr,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out) {
  if (!scalers)
    return invalid("scalers is NULL");
  if (count == 0)
    return invalid("count is 0: no experts to step");
  if (moss_error_t error = checkExpertsCall(spec, buffers))
    return error;
  // Every expert's step is checked before any launches.
  std::vector<ScalerStep> steps(count);
  std::vector<moss_quantize_buffers_t> expert(count), expertT(count);
  for (size_t g = 0; g < count; ++g) {
    if (!scalers[g])
      return invalid("scalers[" + Twine(uint64_t(g)) + "] is NULL");
    if (scalers[g]->context != scalers[0]->context)
      return invalid("scalers[" + Twine(uint64_t(g)) +
                     "] belongs to another context than scalers[0]");
    for (size_t h = 0; h < g; ++h)
      if (scalers[h] == scalers[g])
        return invalid("scalers[" + Twine(uint64_t(h)) + "] and scalers[" +
                       Twine(uint64_t(g)) + "] are one scaler");
    expert[g] = expertBuffers(*buffers, *spec, g);
    if (transposed)
      expertT[g] = expertBuffers(*transposed, *spec, g);
    if (moss_error_t error =
            checkScalerStep(scalers[g]->context, lr, spec, &expert[g],
                            transposed ? &expertT[g] : nullptr, steps[g]))
      return prefixed(error, "expert " + Twine(uint64_t(g)) + ": ");
  }
  if (Error error = scalers[0]->context->device.makeCurrent())
    return convert(std::move(error));
  for (size_t g = 0; g < count; ++g)
    if (moss_error_t error = launchScalerStep(scalers[g], lr, steps[g], stream,
                                              out ? out + g : nullptr))
      return prefixed(error, "expert " + Twine(uint64_t(g)) + ": ");
  return nullptr;
}

moss_error_t moss_weight_scaler_stats(moss_weight_scaler_t scaler,
                                      moss_weight_scaler_stats_t *out) {
  if (!scaler)
    return invalid("scaler is NULL");
  if (moss_error_t error = checkStatsOut(out))
    return error;
  if (Error error = scaler->context->device.makeCurrent())
    return convert(std::move(error));
  if (Error error = scaler->scaler->poll())
    return convert(std::move(error));
  fillStats(scaler->scaler->stats(), out);
  return nullptr;
}

moss_error_t
moss_expert_scalers_create(moss_context_t context,
                           const moss_weight_scaler_options_t *options,
                           size_t experts, moss_expert_scalers_t *out) {
  if (!out)
    return invalid("out is NULL");
  *out = nullptr;
  if (experts == 0)
    return invalid("experts is 0: the scalers need at least one");
  WeightScalerOptions converted;
  if (moss_error_t error = beginScalerCreate(context, options, converted))
    return error;
  Expected<std::unique_ptr<ExpertWeightScalers>> scalers =
      ExpertWeightScalers::create(context->quantizer, converted, experts);
  if (!scalers)
    return convert(scalers.takeError());
  *out = new moss_expert_scalers{context, std::move(*scalers)};
  return nullptr;
}

void moss_expert_scalers_destroy(moss_expert_scalers_t scalers) {
  if (!scalers)
    return;
  if (Error error = scalers->context->device.makeCurrent())
    consumeError(std::move(error));
  delete scalers;
}

} // extern "C"

/// moss_expert_scalers_step, fused with `adamw`'s step where not NULL.
static moss_error_t expertScalersStep(moss_expert_scalers_t scalers, double lr,
                                      const moss_quantize_spec_t *spec,
                                      const moss_quantize_buffers_t *buffers,
                                      const moss_quantize_buffers_t *transposed,
                                      void *stream,
                                      moss_weight_scale_step_t *out,
                                      const moss_adamw_step_t *adamw) {
  if (!scalers)
    return invalid("scalers is NULL");
  if (moss_error_t error = checkExpertsCall(spec, buffers))
    return error;
  AdamWCoefficients coefficients;
  if (adamw)
    if (moss_error_t error = convertAdamW(adamw, coefficients))
      return error;
  const size_t count = scalers->scalers->size();
  // Every expert's step is checked before any launches.
  SmallVector<QuantizeBuffers> expert(count), expertT(transposed ? count : 0);
  SmallVector<AdamWBuffers> state(adamw ? count : 0);
  QuantizeSpec converted;
  for (size_t g = 0; g < count; ++g) {
    moss_quantize_buffers_t b = expertBuffers(*buffers, *spec, g);
    moss_quantize_buffers_t t = transposed
                                    ? expertBuffers(*transposed, *spec, g)
                                    : moss_quantize_buffers_t{};
    ScalerStep step;
    if (adamw)
      state[g] = adamwState(*adamw, *spec, g);
    if (moss_error_t error = checkScalerStep(scalers->context, lr, spec, &b,
                                             transposed ? &t : nullptr, step,
                                             adamw ? &state[g] : nullptr))
      return prefixed(error, "expert " + Twine(uint64_t(g)) + ": ");
    expert[g] = step.buffers;
    if (transposed)
      expertT[g] = step.transposed;
    converted = step.spec;
  }
  if (Error error = scalers->context->device.makeCurrent())
    return convert(std::move(error));
  const AdamWUpdate update{coefficients, state};
  Expected<SmallVector<WeightScaleDecision>> decisions =
      scalers->scalers->castStepsChecked(lr, converted, expert, expertT,
                                         static_cast<CUstream>(stream),
                                         adamw ? &update : nullptr);
  if (!decisions)
    return convert(decisions.takeError());
  if (out)
    for (size_t g = 0; g < count; ++g)
      out[g] = moss_weight_scale_step_t{(*decisions)[g].step,
                                        int32_t((*decisions)[g].reason),
                                        (*decisions)[g].scale};
  return nullptr;
}

extern "C" {

moss_error_t moss_expert_scalers_step(moss_expert_scalers_t scalers, double lr,
                                      const moss_quantize_spec_t *spec,
                                      const moss_quantize_buffers_t *buffers,
                                      const moss_quantize_buffers_t *transposed,
                                      void *stream,
                                      moss_weight_scale_step_t *out) {
  return expertScalersStep(scalers, lr, spec, buffers, transposed, stream, out,
                           nullptr);
}

moss_error_t moss_expert_scalers_adamw_step(
    moss_expert_scalers_t scalers, const moss_adamw_step_t *adamw,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out) {
  if (!adamw)
    return invalid("adamw is NULL");
  return expertScalersStep(scalers, adamw->lr, spec, buffers, transposed,
                           stream, out, adamw);
}

moss_error_t moss_expert_scalers_stats(moss_expert_scalers_t scalers,
                                       size_t expert,
                                       moss_weight_scaler_stats_t *out) {
  if (!scalers)
    return invalid("scalers is NULL");
  if (expert >= scalers->scalers->size())
    return invalid("expert " + Twine(uint64_t(expert)) + " of " +
                   Twine(uint64_t(scalers->scalers->size())) + " experts");
  if (moss_error_t error = checkStatsOut(out))
    return error;
  if (Error error = scalers->context->device.makeCurrent())
    return convert(std::move(error));
  if (Error error = scalers->scalers->poll())
    return convert(std::move(error));
  fillStats(scalers->scalers->stats(expert), out);
  return nullptr;
}

} // extern "C"
