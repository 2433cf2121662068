//===- CApiInternal.h - The C API's handles, for its implementations ------===//
//
// The definitions behind moss.h's opaque handles and the conversion of
// llvm::Error values to error objects, shared by the runtime's C API
// (CApi.cpp) and the GEMM library's (runtime/gemm/GemmCApi.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_CAPIINTERNAL_H
#define MOSS_RUNTIME_API_CAPIINTERNAL_H

#include "moss/moss.h"

#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>

struct moss_error {
  moss_error_code_t code;
  std::string message;
};

namespace moss::capi {

/// A new error object.
moss_error_t makeError(moss_error_code_t code, const llvm::Twine &message);

/// MOSS_ERROR_INVALID_ARGUMENT with `message`.
moss_error_t invalid(const llvm::Twine &message);

/// Converts `error` (consuming it); NULL for success. The code comes from
/// the error's type (runtime::RuntimeError; other errors are internal)
/// unless `code` forces one.
moss_error_t convert(llvm::Error error,
                     std::optional<moss_error_code_t> code = std::nullopt);

/// The scheme fields every C spec has (moss_scheme_t, moss_global_scope_t,
/// moss_fp8_format_t), checked and converted; `field` prefixes the names in
/// the message ("spec->", "spec->a.").
struct SchemeFields {
  numerics::ScalingKind kind;
  numerics::GlobalScope scope;
  numerics::Fp8Format format;
};
moss_error_t convertSchemeFields(int32_t scheme, int32_t globalScope,
                                 int32_t format, const llvm::Twine &field,
                                 SchemeFields &out);

/// A moss_fold_t field, checked: none for MOSS_FOLD_AUTO.
moss_error_t convertFold(int32_t fold, const llvm::Twine &field,
                         std::optional<numerics::BlockScaleFold> &out);

} // namespace moss::capi

namespace moss {
class GemmRunner;
} // namespace moss

struct moss_context {
  explicit moss_context(moss::runtime::Device device,
                        moss::runtime::KernelCacheOptions cacheOptions)
      : device(std::move(device)), cache(std::move(cacheOptions)),
        quantizer(cache, this->device.getSmCount()) {}
  moss::runtime::Device device;
  moss::runtime::KernelCache cache;
  moss::runtime::GpuQuantizer quantizer;
  /// The GEMM library's runner, created on the first moss_gemm(), which
  /// sets the deleter: this library does not link the GEMM's (the runner is
  /// destroyed with the context, while the context's device is current).
  std::unique_ptr<moss::GemmRunner, void (*)(moss::GemmRunner *)> gemm{nullptr,
                                                                       nullptr};
};

#endif // MOSS_RUNTIME_API_CAPIINTERNAL_H
