//===- Device.cpp - A GPU and its primary context -------------------------===//

#include "moss/Runtime/Cuda/Device.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/Twine.h"

using namespace llvm;

namespace moss::runtime {
namespace {

Expected<CUdevice> getDeviceHandle(const DriverApi &api, int ordinal) {
  int count = 0;
  if (Error err = checkCuda(api.deviceGetCount(&count), "cuDeviceGetCount"))
    return std::move(err);
  if (ordinal < 0 || ordinal >= count)
    return makeRuntimeError(ErrorKind::NoDevice,
                            "no CUDA device " + Twine(ordinal) +
                                ": the driver sees " + Twine(count) +
                                " device(s), numbered from 0");
  CUdevice device = 0;
  if (Error err = checkCuda(api.deviceGet(&device, ordinal), "cuDeviceGet"))
    return std::move(err);
  return device;
}

Expected<int> getAttribute(const DriverApi &api, CUdevice device,
                           CUdevice_attribute attribute, StringRef what) {
  int value = 0;
  if (Error err = checkCuda(api.deviceGetAttribute(&value, attribute, device),
                            "cuDeviceGetAttribute(" + what + ")"))
    return std::move(err);
  return value;
}

} // namespace

std::string getArchForComputeCapability(int major, int minor) {
  std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
  if (major >= 9)
    arch += 'a';
  return arch;
}

Expected<DeviceProperties> queryDeviceProperties(CUdevice device) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  DeviceProperties properties;
  char name[256] = {0};
  if (Error err = checkCuda(api->deviceGetName(name, sizeof(name) - 1, device),
                            "cuDeviceGetName"))
    return std::move(err);
  properties.name = name;
  struct Query {
    CUdevice_attribute attribute;
    const char *what;
    int *out;
  } queries[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "major",
       &properties.ccMajor},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "minor",
       &properties.ccMinor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count",
       &properties.smCount},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       "shared memory opt-in", &properties.maxSharedOptin},
  };
  for (const Query &query : queries) {
    Expected<int> value =
        getAttribute(*api, device, query.attribute, query.what);
    if (!value)
      return value.takeError();
    *query.out = *value;
  }
  properties.arch =
      getArchForComputeCapability(properties.ccMajor, properties.ccMinor);
  return properties;
}

Expected<DeviceProperties> queryCurrentDeviceProperties() {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  CUdevice device = 0;
  if (Error err = checkCuda(api->ctxGetDevice(&device, /*current*/ nullptr),
                            "cuCtxGetDevice (is a context current?)"))
    return std::move(err);
  return queryDeviceProperties(device);
}

Expected<std::string> queryDeviceArch(int ordinal) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  Expected<CUdevice> device = getDeviceHandle(*api, ordinal);
  if (!device)
    return device.takeError();
  Expected<DeviceProperties> properties = queryDeviceProperties(*device);
  if (!properties)
    return properties.takeError();
  return properties->arch;
}

Expected<int> Device::getCount() {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  int count = 0;
  if (Error err = checkCuda(api->deviceGetCount(&count), "cuDeviceGetCount"))
    return std::move(err);
  return count;
}

Expected<Device> Device::open(int ordinal) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  Expected<CUdevice> handle = getDeviceHandle(*api, ordinal);
  if (!handle)
    return handle.takeError();

  Device result;
  result.ordinal = ordinal;
  result.device = *handle;

  Expected<DeviceProperties> properties = queryDeviceProperties(*handle);
  if (!properties)
    return properties.takeError();
  result.properties = std::move(*properties);

  if (Error err =
          checkCuda(api->devicePrimaryCtxRetain(&result.context, *handle),
                    "cuDevicePrimaryCtxRetain"))
    return std::move(err);
  return std::move(result);
}

Device::Device(Device &&other)
    : ordinal(other.ordinal), device(other.device), context(other.context),
      properties(std::move(other.properties)) {
  other.context = nullptr;
}

Device &Device::operator=(Device &&other) {
  if (this == &other)
    return *this;
  release();
  ordinal = other.ordinal;
  device = other.device;
  context = other.context;
  properties = std::move(other.properties);
  other.context = nullptr;
  return *this;
}

Device::~Device() { release(); }

void Device::release() {
  if (!context)
    return;
  // A retained context implies the driver loaded; errors at teardown (the
  // driver may already be shutting down) have nowhere to go.
  if (Expected<const DriverApi &> api = getDriverApi())
    (void)api->devicePrimaryCtxRelease(device);
  else
    consumeError(api.takeError());
  context = nullptr;
}

Error Device::makeCurrent() const {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  return checkCuda(api->ctxSetCurrent(context), "cuCtxSetCurrent");
}

} // namespace moss::runtime
