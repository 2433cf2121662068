//===- CApi.cpp - The C API over moss::runtime ----------------------------===//
//
// Converts C structs to runtime specs (validating every field first) and
// llvm::Error values to error objects. Argument problems are found here, so
// they get MOSS_ERROR_INVALID_ARGUMENT; errors from the runtime are sorted by
// their source (driver, NVRTC) from their messages.
//
//===----------------------------------------------------------------------===//

#include "moss/moss.h"

#include "moss/Runtime/Device.h"
#include "moss/Runtime/KernelCache.h"
#include "moss/Runtime/Quantizer.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

using namespace llvm;
using namespace moss::numerics;
using namespace moss::runtime;

struct moss_error {
  moss_error_code_t code;
  std::string message;
};

struct moss_context {
  explicit moss_context(Device device, KernelCacheOptions cacheOptions)
      : device(std::move(device)), cache(std::move(cacheOptions)),
        quantizer(cache, this->device.getSmCount()) {}
  Device device;
  KernelCache cache;
  GpuQuantizer quantizer;
};

namespace {

moss_error_t makeError(moss_error_code_t code, const Twine &message) {
  return new moss_error{code, message.str()};
}

moss_error_t invalid(const Twine &message) {
  return makeError(MOSS_ERROR_INVALID_ARGUMENT, message);
}

/// The code of a runtime error, from where its message says it came from.
moss_error_code_t classify(StringRef message) {
  if (message.starts_with("no CUDA driver") ||
      message.starts_with("no CUDA device"))
    return MOSS_ERROR_NO_DEVICE;
  if (message.contains("NVRTC") || message.contains("nvrtc"))
    return MOSS_ERROR_COMPILE;
  if ((message.starts_with("cu") && message.contains(" failed: ")) ||
      message.contains("CUDA_ERROR_") || message.contains("kernel image"))
    return MOSS_ERROR_CUDA;
  return MOSS_ERROR_INTERNAL;
}

/// Converts `error` (consuming it); NULL for success. `code` forces a code.
moss_error_t convert(Error error,
                     std::optional<moss_error_code_t> code = std::nullopt) {
  if (!error)
    return nullptr;
  std::string message = toString(std::move(error));
  return makeError(code ? *code : classify(message), message);
}

/// Converts a C spec, checking every enum and what the GPU quantizers take.
moss_error_t convertSpec(const moss_quantize_spec_t *spec, QuantizeSpec &out) {
  if (!spec)
    return invalid("spec is NULL");
  if (spec->input != MOSS_INPUT_F32 && spec->input != MOSS_INPUT_BF16)
    return invalid("spec->input=" + Twine(spec->input) +
                   " is not a moss_input_type_t (expected 0..1)");
  if (spec->scheme < MOSS_SCHEME_PER_TENSOR ||
      spec->scheme > MOSS_SCHEME_TWO_LEVEL)
    return invalid("spec->scheme=" + Twine(spec->scheme) +
                   " is not a moss_scheme_t (expected 0..4)");
  if (spec->global_scope != MOSS_GLOBAL_TENSOR &&
      spec->global_scope != MOSS_GLOBAL_ROW)
    return invalid("spec->global_scope=" + Twine(spec->global_scope) +
                   " is not a moss_global_scope_t (expected 0..1)");
  if (spec->format != MOSS_FORMAT_E4M3 && spec->format != MOSS_FORMAT_E5M2)
    return invalid("spec->format=" + Twine(spec->format) +
                   " is not a moss_fp8_format_t (expected 0..1)");

  QuantizeSpec result;
  result.rows = spec->rows;
  result.cols = spec->cols;
  result.input = spec->input == MOSS_INPUT_F32 ? InputType::F32
                                               : InputType::BF16;
  ScalingScheme &scheme = result.options.scheme;
  scheme.kind = ScalingKind(spec->scheme);
  bool blocked = scheme.kind == ScalingKind::PerGroup ||
                 scheme.kind == ScalingKind::MXFP8 ||
                 scheme.kind == ScalingKind::TwoLevel;
  scheme.blockCols = blocked ? spec->block_cols : 0;
  scheme.blockRows = spec->block_rows == 0 ? 1 : spec->block_rows;
  scheme.global = spec->global_scope == MOSS_GLOBAL_TENSOR ? GlobalScope::Tensor
                                                           : GlobalScope::Row;
  result.options.format =
      spec->format == MOSS_FORMAT_E4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
  result.options.transpose = spec->transpose != 0;
  if (Error error = checkGpuQuantizeSpec(result))
    return convert(std::move(error), MOSS_ERROR_INVALID_ARGUMENT);
  out = result;
  return nullptr;
}

/// Checks one device pointer: given exactly when needed, and aligned.
moss_error_t checkPointer(uint64_t ptr, bool needed, unsigned alignment,
                          StringRef name, const QuantizeSpec &spec) {
  if (needed && !ptr)
    return invalid("buffers->" + name + " is 0, but " +
                   spec.options.scheme.str() + " writes it");
  if (!needed && ptr)
    return invalid("buffers->" + name + " is given, but " +
                   spec.options.scheme.str() + " has none");
  if (ptr % alignment != 0)
    return invalid("buffers->" + name + " must be " + Twine(alignment) +
                   "-byte aligned, got 0x" + Twine::utohexstr(ptr));
  return nullptr;
}

/// Checks the arguments common to moss_quantize and moss_cast_with_scale.
moss_error_t checkCall(moss_context_t context,
                       const moss_quantize_spec_t *spec,
                       const moss_quantize_buffers_t *buffers,
                       QuantizeSpec &converted, QuantizeBuffers &out) {
  if (!context)
    return invalid("context is NULL");
  if (moss_error_t error = convertSpec(spec, converted))
    return error;
  if (!buffers)
    return invalid("buffers is NULL");
  const ScalingScheme &scheme = converted.options.scheme;
  if (moss_error_t e = checkPointer(buffers->x, true, 16, "x", converted))
    return e;
  if (moss_error_t e = checkPointer(buffers->q, true, 16, "q", converted))
    return e;
  if (moss_error_t e = checkPointer(buffers->local, scheme.hasLocalScales(), 4,
                                    "local", converted))
    return e;
  if (moss_error_t e = checkPointer(buffers->global, scheme.hasGlobalScales(),
                                    4, "global", converted))
    return e;
  if (buffers->counters % 8 != 0)
    return invalid("buffers->counters must be 8-byte aligned, got 0x" +
                   Twine::utohexstr(buffers->counters));
  out = QuantizeBuffers{buffers->x, buffers->q, buffers->local,
                        buffers->global, buffers->counters};
  return nullptr;
}

} // namespace

extern "C" {

int moss_api_version(void) { return MOSS_API_VERSION; }

const char *moss_error_message(moss_error_t error) {
  return error ? error->message.c_str() : "";
}

moss_error_code_t moss_error_code(moss_error_t error) {
  return error ? error->code : MOSS_ERROR_NONE;
}

void moss_error_destroy(moss_error_t error) { delete error; }

moss_error_t moss_quantize_layout(const moss_quantize_spec_t *spec,
                                  moss_quantize_layout_t *out) {
  if (!out)
    return invalid("out is NULL");
  QuantizeSpec converted;
  if (moss_error_t error = convertSpec(spec, converted))
    return error;
  QuantizeLayout layout = getQuantizeLayout(converted);
  *out = moss_quantize_layout_t{layout.codeRows,   layout.codeCols,
                                layout.localRows,  layout.localCols,
                                layout.localElementBytes,
                                layout.globalCount};
  return nullptr;
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

moss_error_t moss_quantize(moss_context_t context,
                           const moss_quantize_spec_t *spec,
                           const moss_quantize_buffers_t *buffers,
                           void *stream) {
  QuantizeSpec converted;
  QuantizeBuffers devBuffers;
  if (moss_error_t error =
          checkCall(context, spec, buffers, converted, devBuffers))
    return error;
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return convert(context->quantizer.quantize(converted, devBuffers,
                                             static_cast<CUstream>(stream)));
}

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
  if (converted.options.scheme.kind != ScalingKind::PerTensor)
    return invalid("a cast with a given scale is per-tensor, not spec->scheme=" +
                   Twine(spec->scheme) + " (" +
                   converted.options.scheme.str() + ")");
  if (!scale)
    return invalid("scale is 0");
  if (scale % 4 != 0)
    return invalid("scale must be 4-byte aligned, got 0x" +
                   Twine::utohexstr(scale));
  if (Error error = context->device.makeCurrent())
    return convert(std::move(error));
  return convert(context->quantizer.castWithScale(
      converted, scale, devBuffers, static_cast<CUstream>(stream)));
}

} // extern "C"
