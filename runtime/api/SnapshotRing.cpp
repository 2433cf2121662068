//===- SnapshotRing.cpp - Page-locked slots for device snapshots ----------===//

#include "SnapshotRing.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"

using namespace llvm;

namespace moss::runtime {

Error SnapshotRing::allocate(size_t deviceBytes, size_t slotBytes) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  // On an error below, the destructor frees what was allocated.
  if (Error error = checkCuda(api->memAlloc(&words, deviceBytes),
                              "cuMemAlloc(weight scaler state)"))
    return error;
  void *host = nullptr;
  if (Error error = checkCuda(api->memAllocHost(&host, kSlots * slotBytes),
                              "cuMemAllocHost(weight scaler snapshots)"))
    return error;
  memory = static_cast<char *>(host);
  bytes = slotBytes;
  for (CUevent &event : events)
    if (Error error =
            checkCuda(api->eventCreate(&event, CU_EVENT_DISABLE_TIMING),
                      "cuEventCreate(weight scaler snapshots)"))
      return error;
  return Error::success();
}

SnapshotRing::~SnapshotRing() {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api) {
    consumeError(api.takeError());
    return;
  }
  // Pending copies still write to the page-locked slots: wait for them
  // before freeing.
  for (int i = 0; i < count; ++i)
    (void)api->eventSynchronize(events[(oldest + i) % kSlots]);
  for (CUevent event : events)
    if (event)
      api->eventDestroy(event);
  if (memory)
    api->memFreeHost(memory);
  if (words)
    api->memFree(words);
}

Error SnapshotRing::takeLanded(function_ref<Error(int index)> observe) {
  if (count == 0)
    return Error::success();
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  while (count > 0) {
    CUresult result = api->eventQuery(events[oldest]);
    if (result == CUDA_ERROR_NOT_READY)
      break;
    if (Error error = checkCuda(result, "cuEventQuery(weight scaler snapshot)"))
      return error;
    const int index = oldest;
    popOldest();
    if (Error error = observe(index))
      return error;
  }
  return Error::success();
}

Error SnapshotRing::waitOldest() const {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  return checkCuda(api->eventSynchronize(events[oldest]),
                   "cuEventSynchronize(weight scaler snapshot)");
}

void SnapshotRing::popOldest() {
  oldest = (oldest + 1) % kSlots;
  --count;
}

Error SnapshotRing::push(CUstream stream) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  if (Error error = checkCuda(api->eventRecord(events[nextIndex()], stream),
                              "cuEventRecord(weight scaler snapshot)"))
    return error;
  ++count;
  return Error::success();
}

} // namespace moss::runtime
