//===- Driver.cpp - The CUDA driver API, loaded at run time ---------------===//
//
// Entry points are resolved with cuGetProcAddress at CUDA_VERSION, the
// version of the <cuda.h> we compiled against, so each pointer matches the
// prototype the header maps its name to (cuMemAlloc -> cuMemAlloc_v2). A
// driver without cuGetProcAddress_v2 (before CUDA 12) falls back to dlsym of
// the header's exported name.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Api/RuntimeError.h"

#include "llvm/ADT/Twine.h"

#include <dlfcn.h>
#include <string>

using namespace llvm;

#define MOSS_STRINGIFY_EXPANDED(x) #x
#define MOSS_STRINGIFY(x) MOSS_STRINGIFY_EXPANDED(x)

namespace moss::runtime {
namespace {

/// The outcome of loading the driver: a full table, or why there is none.
struct DriverState {
  DriverApi api;
  std::string error;
};

std::string describe(const DriverApi &api, CUresult result) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (api.getErrorName)
    api.getErrorName(result, &name);
  if (api.getErrorString)
    api.getErrorString(result, &text);
  std::string out = name ? name : ("CUresult " + std::to_string(result));
  if (text)
    out += std::string(" (") + text + ")";
  return out;
}

DriverState loadDriver() {
  DriverState state;
  // Never closed: the pointers stay valid for the life of the process.
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    state.error = std::string("no CUDA driver (libcuda.so.1) found: ") +
                  (why ? why : "dlopen failed");
    return state;
  }

  using GetProcAddressFn = decltype(&::cuGetProcAddress);
  auto getProcAddress = reinterpret_cast<GetProcAddressFn>(
      dlsym(library, MOSS_STRINGIFY(cuGetProcAddress)));
  auto resolve = [&](const char *name, const char *exported) -> void * {
    if (getProcAddress) {
      void *function = nullptr;
      CUdriverProcAddressQueryResult found;
      if (getProcAddress(name, &function, CUDA_VERSION,
                         CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&
          function)
        return function;
    }
    return dlsym(library, exported);
  };

  std::string missing;
  DriverApi &api = state.api;
#define MOSS_DRIVER_FUNCTION(field, symbol)                                    \
  api.field = reinterpret_cast<decltype(api.field)>(                           \
      resolve(#symbol, MOSS_STRINGIFY(symbol)));                               \
  if (!api.field)                                                              \
    missing += std::string(missing.empty() ? "" : ", ") + #symbol;
#include "moss/Runtime/Cuda/DriverFunctions.def"

  if (api.driverGetVersion)
    api.driverGetVersion(&api.driverVersion);
  if (!missing.empty()) {
    state.error = "the CUDA driver (version " +
                  std::to_string(api.driverVersion / 1000) + "." +
                  std::to_string(api.driverVersion % 1000 / 10) + ") lacks " +
                  missing + "; MOSS-JIT needs a driver for CUDA " +
                  std::to_string(CUDA_VERSION / 1000) + "." +
                  std::to_string(CUDA_VERSION % 1000 / 10) + " or newer";
    return state;
  }

  CUresult result = api.init(0);
  if (result == CUDA_ERROR_STUB_LIBRARY) {
    // The toolkit's link-time stub, found through LD_LIBRARY_PATH.
    state.error = "no CUDA driver (libcuda.so.1) found: the library loaded "
                  "is the CUDA toolkit's stub (lib64/stubs/libcuda.so), "
                  "which has no driver behind it";
    return state;
  }
  if (result == CUDA_ERROR_NO_DEVICE) {
    state.error = "no CUDA device: the driver is installed but sees no GPU";
    return state;
  }
  if (result != CUDA_SUCCESS) {
    state.error = "cuInit failed: " + describe(api, result);
    return state;
  }
  int count = 0;
  result = api.deviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    state.error = "cuDeviceGetCount failed: " + describe(api, result);
    return state;
  }
  if (count == 0)
    state.error = "no CUDA device: the driver is installed but sees no GPU";
  return state;
}

const DriverState &getDriverState() {
  // A function-local static: initialized once, thread-safe (C++11).
  static const DriverState state = loadDriver();
  return state;
}

} // namespace

Expected<const DriverApi &> getDriverApi() {
  const DriverState &state = getDriverState();
  if (!state.error.empty())
    return makeRuntimeError(ErrorKind::NoDevice, state.error);
  return state.api;
}

bool isDriverAvailable() { return getDriverState().error.empty(); }

Error makeCudaError(CUresult result, const Twine &call) {
  return makeRuntimeError(ErrorKind::Cuda,
                          call + " failed: " +
                              describe(getDriverState().api, result));
}

Error checkCuda(CUresult result, const Twine &call) {
  if (result == CUDA_SUCCESS)
    return Error::success();
  return makeCudaError(result, call);
}

} // namespace moss::runtime

llvm::Expected<moss::runtime::CurrentContext>
moss::runtime::getCurrentContext() {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  CurrentContext current;
  if (Error err =
          checkCuda(api->ctxGetCurrent(&current.context), "cuCtxGetCurrent"))
    return std::move(err);
  if (!current.context)
    return invalidArgument("no CUDA context is current on this thread; make "
                           "one current (e.g. the device's primary context) "
                           "first");
  if (Error err =
          checkCuda(api->ctxGetId(current.context, &current.id), "cuCtxGetId"))
    return std::move(err);
  return current;
}

llvm::Error moss::runtime::ContextBinding::check(StringRef owner) {
  Expected<CurrentContext> current = getCurrentContext();
  if (!current)
    return current.takeError();
  if (!id) {
    id = current->id;
    return Error::success();
  }
  if (*id == current->id)
    return Error::success();
  return invalidArgument(owner + " was first used in CUDA context " +
                         Twine(*id) +
                         ", and its kernels and memory belong "
                         "there; the current context is " +
                         Twine(current->id) + ": use one per context");
}
