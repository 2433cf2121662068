//===- Driver.h - The CUDA driver API, loaded at run time -------*- C++ -*-===//
//
// libcuda.so.1 is opened with dlopen on first use (once, thread-safe), never
// linked, so the library and the tools load on machines without a driver and
// report "no CUDA driver" as an error value. Only <cuda.h>'s types and
// prototypes are used, for the function pointer types.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CUDA_DRIVER_H
#define MOSS_RUNTIME_CUDA_DRIVER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <optional>

#include <cuda.h>

namespace moss::runtime {

/// The driver entry points the runtime uses, e.g. `api.memAlloc(&ptr, n)`.
/// Every pointer is non-null in a table returned by getDriverApi().
struct DriverApi {
#define MOSS_DRIVER_FUNCTION(field, symbol) decltype(&::symbol) field = nullptr;
#include "moss/Runtime/Cuda/DriverFunctions.def"

  /// The driver's CUDA version, e.g. 13000 for 13.0.
  int driverVersion = 0;
};

/// Returns the driver table, opening libcuda.so.1 and calling cuInit(0) on
/// the first call. Fails with "no CUDA driver (libcuda.so.1) found: ..." when
/// the library is missing, "no CUDA device" when the driver sees no GPU, or
/// the driver's own error. The outcome of the first call is kept: later
/// calls return the same table or the same error.
llvm::Expected<const DriverApi &> getDriverApi();

/// True when getDriverApi() succeeds (a driver and at least one device).
bool isDriverAvailable();

/// An error for a failed driver call: "cuMemAlloc failed:
/// CUDA_ERROR_OUT_OF_MEMORY (out of memory)". `call` names what failed.
llvm::Error makeCudaError(CUresult result, const llvm::Twine &call);

/// Error::success() for CUDA_SUCCESS, else makeCudaError(result, call).
llvm::Error checkCuda(CUresult result, const llvm::Twine &call);

/// The calling thread's current context and its ID, unique for the life of
/// the process (cuCtxGetId): what per-context state is keyed by, since a
/// destroyed context's handle can come back for a new one. An error when no
/// context is current.
struct CurrentContext {
  CUcontext context = nullptr;
  unsigned long long id = 0;
};
llvm::Expected<CurrentContext> getCurrentContext();

/// The context an object's loaded kernels and device memory belong to. The
/// first check() binds it to the current context; a later check() from
/// another context fails, naming `owner`, instead of launching a kernel or
/// touching memory of the wrong context.
class ContextBinding {
public:
  llvm::Error check(llvm::StringRef owner);

private:
  std::optional<unsigned long long> id;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_DRIVER_H
