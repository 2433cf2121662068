// moss/ptx/shared.cuh - shared-memory loads and stores by shared-space
// address.
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

/// st.shared.v4.b32 at `address` (16-byte aligned).
__device__ __forceinline__ void storeShared128(u32 address, const u32 (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(address),
               "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

/// ld.shared.v4.b32 at `address` (16-byte aligned).
__device__ __forceinline__ void loadShared128(u32 address, u32 (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(address)
               : "memory");
}

} // namespace moss::ptx
