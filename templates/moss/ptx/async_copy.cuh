// moss/ptx/async_copy.cuh - per-thread asynchronous copies from global to
// shared memory (cp.async, sm_80 and later), grouped and waited on by the
// issuing thread.
#pragma once

#include "moss/ptx/types.cuh"

namespace moss::ptx {

/// Copies 16 bytes from global `src` to shared `dst` (both 16-byte aligned)
/// through L2 only. With `valid` false nothing is read and `dst` gets zeros
/// (`src` must still be a valid address).
__device__ __forceinline__ void copyAsync16(u32 dst, const void *src,
                                            bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

/// Closes the thread's copies issued since the last commit into a group.
__device__ __forceinline__ void copyAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

/// Waits until at most `Pending` of the thread's groups are in flight.
template <int Pending> __device__ __forceinline__ void copyAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

} // namespace moss::ptx
