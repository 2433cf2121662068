// moss/ptx/sync.cuh - proxy fences, cluster barriers, register reallocation.
#pragma once

#include "moss/ptx/types.cuh"

namespace moss::ptx {

/// fence.proxy.async.shared::cta: orders this thread's generic-proxy
/// shared-memory accesses before later async-proxy ones (TMA, wgmma) of the
/// CTA. Needed after ordinary stores to a buffer the TMA unit reads next.
__device__ __forceinline__ void fenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/// setmaxnreg.inc: raises this warpgroup's per-thread register limit to N
/// (blocks until the registers are free). Every warp of the warpgroup must
/// execute it. Needs a register cap at kernel entry
/// (__launch_bounds__(threads, 1)).
template <int N> __device__ __forceinline__ void setMaxRegistersIncrease() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg range");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

/// setmaxnreg.dec: lowers this warpgroup's per-thread register limit to N,
/// releasing the rest for other warpgroups.
template <int N> __device__ __forceinline__ void setMaxRegistersDecrease() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg range");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

/// This CTA's rank in its cluster (%cluster_ctarank).
__device__ __forceinline__ u32 clusterRank() {
  u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/// barrier.cluster arrive (release) + wait (acquire) by every thread of
/// every CTA of the cluster: orders shared-memory writes (barrier init)
/// before peers use them. With no cluster, it behaves as __syncthreads().
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

/// bar.sync kId, kThreads: waits until kThreads threads (whole warps) have
/// reached named barrier kId, ordering their shared-memory accesses.
template <int kId, int kThreads>
__device__ __forceinline__ void namedBarrierSync() {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
}

/// bar.warp.sync with the full mask (__syncwarp()).
__device__ __forceinline__ void syncWarp() {
  asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}

/// red.global.max.u32: atomic max without a return value. For non-negative
/// floats, the order of the bit patterns is the order of the values (and
/// NaN patterns sort above +inf).
__device__ __forceinline__ void atomicMaxU32(u32 *address, u32 value) {
  asm volatile("red.relaxed.gpu.global.max.u32 [%0], %1;" ::"l"(address),
               "r"(value)
               : "memory");
}

/// shfl.sync.bfly: the value of lane (laneId ^ mask).
__device__ __forceinline__ u32 shuffleXor(u32 value, u32 mask) {
  u32 out;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(out)
               : "r"(value), "r"(mask));
  return out;
}

/// shfl.sync.idx: the value of lane `source` (0 to 31).
__device__ __forceinline__ u32 shuffleIndex(u32 value, int source) {
  u32 out;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(out)
               : "r"(value), "r"(source));
  return out;
}

/// fence.acq_rel.gpu: this thread's earlier global writes are visible
/// GPU-wide before its later ones (and reads after it see what a matching
/// fence published).
__device__ __forceinline__ void fenceGpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

/// atom.global.add.u32 (relaxed, GPU scope): adds and returns the old value.
__device__ __forceinline__ u32 atomicAddU32(u32 *address, u32 value) {
  u32 old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(address), "r"(value)
               : "memory");
  return old;
}

/// st.relaxed.gpu.global.u32.
__device__ __forceinline__ void storeRelaxedU32(u32 *address, u32 value) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(address), "r"(value)
               : "memory");
}

/// ld.global.cg.f32: a load served by L2 (not a possibly stale L1 line).
__device__ __forceinline__ float loadGlobalL2(const float *address) {
  float value;
  asm volatile("ld.global.cg.f32 %0, [%1];"
               : "=f"(value)
               : "l"(address)
               : "memory");
  return value;
}

/// vote.sync.any over the active lanes: whether `p` holds in any of them.
__device__ __forceinline__ bool anyActiveLane(bool p) {
  u32 any;
  asm volatile("{\n\t.reg .pred q, a;\n\t.reg .b32 lanes;\n\t"
               "activemask.b32 lanes;\n\t"
               "setp.ne.u32 q, %1, 0;\n\t"
               "vote.sync.any.pred a, q, lanes;\n\t"
               "selp.u32 %0, 1, 0, a;\n}"
               : "=r"(any)
               : "r"(static_cast<u32>(p)));
  return any != 0;
}

/// shfl.sync.idx: the value of lane `lane`.
__device__ __forceinline__ u32 shuffleIdx(u32 value, u32 lane) {
  u32 out;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(out)
               : "r"(value), "r"(lane));
  return out;
}

} // namespace moss::ptx
