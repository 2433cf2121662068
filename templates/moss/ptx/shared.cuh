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

/// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices of 16-bit
/// elements (8 rows of 16 bytes each); lanes 8i .. 8i+7 give the addresses
/// of matrix i's rows, and thread t receives in r[i] matrix i's row t / 4,
/// bytes 4(t % 4) .. 4(t % 4) + 3.
__device__ __forceinline__ void loadMatrixX4(u32 address, u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

} // namespace moss::ptx
