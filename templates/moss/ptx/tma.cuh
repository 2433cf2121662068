// moss/ptx/tma.cuh - the Tensor Memory Accelerator (cp.async.bulk.tensor).
//
// A tensor map (CUtensorMap, 128 bytes, encoded on the host by
// cuTensorMapEncodeTiled) describes a global tensor, a box shape and a
// shared-memory swizzle. Kernels take it as a `const __grid_constant__`
// parameter and pass its generic address to the copy instructions.
// Out-of-bounds box elements are filled with zeros on loads and skipped on
// stores, so edge tiles need no predication.
#pragma once

#include "moss/ptx/types.cuh"

// NVRTC has no <cuda.h>. This is layout-compatible with its CUtensorMap
// (16 x u64, 64-byte aligned, 128 bytes): the host passes a pointer to its
// own CUtensorMap as the kernel argument. When <cuda.h> is included (nvcc),
// its definition is used.
#if !defined(CU_TENSOR_MAP_NUM_QWORDS)
#define CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
  alignas(64) unsigned long long opaque[CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;
#endif
static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
static_assert(alignof(CUtensorMap) == 64, "CUtensorMap is 64-byte aligned");

namespace moss::ptx {

/// The generic address of a tensor map (a __grid_constant__ parameter).
__device__ __forceinline__ u64 tensorMapAddress(const CUtensorMap &map) {
  return reinterpret_cast<u64>(&map);
}

/// prefetch.tensormap: brings the descriptor into the TMA unit's cache
/// (once per CTA, before the first copy).
__device__ __forceinline__ void prefetchTensorMap(const CUtensorMap &map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensorMapAddress(map))
               : "memory");
}

/// A 2D tiled copy global -> shared of the box at element coordinates
/// (c0 innermost, c1), completing its bytes on `barrier`. `dst` is the
/// shared address of the box (1024-byte aligned for 128-byte swizzle).
__device__ __forceinline__ void tmaLoad2d(u32 dst, const CUtensorMap &map,
                                          i32 c0, i32 c1, u32 barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile"
      ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(tensorMapAddress(map)), "r"(c0), "r"(c1), "r"(barrier)
      : "memory");
}

/// A 1-D bulk copy of `bytes` (a multiple of 16; both addresses 16-byte
/// aligned) from global `src` to shared `dst`, completing its bytes on
/// `barrier`. With EvictFirst the source leaves L2 first (data read once).
template <bool EvictFirst>
__device__ __forceinline__ void bulkLoad1d(u32 dst, const void *src, u32 bytes,
                                           u32 barrier) {
  if constexpr (EvictFirst)
    asm volatile("{ .reg .b64 policy;\n\t"
                 "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes.L2::cache_hint [%0], [%1], %2, [%3], policy; }" ::"r"(
                     dst),
                 "l"(src), "r"(bytes), "r"(barrier)
                 : "memory");
  else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(barrier)
                 : "memory");
}

/// A 2D tiled copy global -> shared multicast to the CTAs of the cluster in
/// `ctaMask`: the box lands at the same shared offset `dst` in each, and
/// completes its bytes on the barrier at offset `barrier` in each.
__device__ __forceinline__ void tmaLoad2dMulticast(u32 dst,
                                                   const CUtensorMap &map,
                                                   i32 c0, i32 c1, u32 barrier,
                                                   u16 ctaMask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
               ".mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
               "l"(tensorMapAddress(map)), "r"(c0), "r"(c1), "r"(barrier),
               "h"(ctaMask)
               : "memory");
}

/// A 2D tiled copy shared -> global of the box at element coordinates
/// (c0 innermost, c1) from `src` (1024-byte aligned for 128-byte swizzle),
/// in this thread's current bulk group. Box elements out of the tensor's
/// bounds are not written.
__device__ __forceinline__ void tmaStore2d(const CUtensorMap &map, i32 c0,
                                           i32 c1, u32 src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
               " [%0, {%1, %2}], [%3];" ::"l"(tensorMapAddress(map)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}

/// Closes this thread's current bulk group of TMA stores.
__device__ __forceinline__ void bulkCommitGroup() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/// Waits until at most N of this thread's bulk groups still read their
/// shared-memory source (the buffers of the others may be written again).
template <int N> __device__ __forceinline__ void bulkWaitGroupRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/// Waits until all of this thread's bulk groups are complete (their writes
/// done).
__device__ __forceinline__ void bulkWaitGroupAll() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

} // namespace moss::ptx
