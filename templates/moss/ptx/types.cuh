// moss/ptx/types.cuh - fixed-width integer names and shared-memory addresses.
//
// NVRTC compiles the templates without the C++ standard library (no
// <cstdint>), so the wrappers use these names. Everything here is a
// __device__ inline function around one PTX instruction or less.
#pragma once

namespace moss::ptx {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i32 = int;
using i64 = long long;

static_assert(sizeof(u32) == 4 && sizeof(u64) == 8, "unexpected type sizes");

/// The 32-bit shared-state-space address of a generic pointer into shared
/// memory (what the `.shared` forms of mbarrier, TMA and wgmma take).
__device__ __forceinline__ u32 smemAddress(const void *pointer) {
  u32 address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

/// The lane index within the warp (%laneid).
__device__ __forceinline__ u32 laneId() {
  u32 lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

} // namespace moss::ptx
