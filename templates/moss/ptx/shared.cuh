// moss/ptx/shared.cuh - stores to shared memory by shared-space address.
#pragma once

#include "moss/ptx/types.cuh"

namespace moss::ptx {

/// st.shared.b32 at shared-state-space address `address`.
__device__ __forceinline__ void storeShared32(u32 address, u32 value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(value) : "memory");
}

/// st.shared.v2.b32 at `address` (8-byte aligned).
__device__ __forceinline__ void storeShared64(u32 address, u32 x, u32 y) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(address), "r"(x), "r"(y)
               : "memory");
}

} // namespace moss::ptx
