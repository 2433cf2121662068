//===- EventTimer.h - CUDA-event timings (benchmarks, tuning) ---*- C++ -*-===//

#ifndef MOSS_RUNTIME_CUDA_EVENTTIMER_H
#define MOSS_RUNTIME_CUDA_EVENTTIMER_H

#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <vector>

namespace moss::runtime {

/// Runs `body` `warmup` times, then `repeat` times between two events on
/// `stream`, and returns the event times in milliseconds, sorted (the median
/// is the middle one).
inline llvm::Expected<std::vector<float>>
timeWithEvents(llvm::function_ref<llvm::Error()> body, int warmup, int repeat,
               CUstream stream) {
  llvm::Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  CUevent start = nullptr, stop = nullptr;
  if (llvm::Error error =
          runtime::checkCuda(api->eventCreate(&start, 0), "cuEventCreate"))
    return std::move(error);
  if (llvm::Error error =
          runtime::checkCuda(api->eventCreate(&stop, 0), "cuEventCreate"))
    return std::move(error);
  std::vector<float> times;
  llvm::Error failure = llvm::Error::success();
  for (int i = 0; i < warmup + repeat && !failure; ++i) {
    bool timed = i >= warmup;
    if (timed)
      failure =
          runtime::checkCuda(api->eventRecord(start, stream), "cuEventRecord");
    if (!failure)
      failure = body();
    if (timed && !failure)
      failure =
          runtime::checkCuda(api->eventRecord(stop, stream), "cuEventRecord");
    if (timed && !failure)
      failure =
          runtime::checkCuda(api->eventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    if (timed && !failure)
      failure = runtime::checkCuda(api->eventElapsedTime(&ms, start, stop),
                                   "cuEventElapsedTime");
    if (timed && !failure)
      times.push_back(ms);
  }
  api->eventDestroy(start);
  api->eventDestroy(stop);
  if (failure)
    return std::move(failure);
  std::sort(times.begin(), times.end());
  return times;
}

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_EVENTTIMER_H
