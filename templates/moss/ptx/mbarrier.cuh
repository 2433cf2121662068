// moss/ptx/mbarrier.cuh - shared-memory transaction barriers (sm_90).
//
// An mbarrier is a 64-bit word in shared memory with an expected arrival
// count and a transaction (byte) count. A phase completes when all expected
// arrivals have arrived and the pending transaction bytes reached zero; the
// phase parity (0, 1, 0, ...) then flips. TMA loads complete bytes on a
// barrier (complete_tx), so one `arriveExpectTx` plus the copies completes a
// phase. All addresses are shared-state-space addresses (ptx::smemAddress).
#pragma once

#include "moss/ptx/types.cuh"

namespace moss::ptx {

/// mbarrier.init: sets the expected arrival count of a fresh barrier (phase
/// 0 in progress). One thread initializes; follow with fenceBarrierInit()
/// and a CTA barrier before anyone else uses it.
__device__ __forceinline__ void mbarrierInit(u32 barrier, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier),
               "r"(count)
               : "memory");
}

/// fence.mbarrier_init: makes preceding mbarrier.init visible to the async
/// proxy (TMA) and to other CTAs of the cluster.
__device__ __forceinline__ void fenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// mbarrier.arrive (release, CTA scope): one arrival of the calling thread.
/// Its earlier shared-memory writes are visible to threads that observe the
/// phase complete.
__device__ __forceinline__ void mbarrierArrive(u32 barrier) {
  asm volatile("{ .reg .b64 state;\n\t"
               "mbarrier.arrive.shared::cta.b64 state, [%0]; }" ::"r"(barrier)
               : "memory");
}

/// mbarrier.arrive.expect_tx: one arrival, and `bytes` more transaction
/// bytes expected in this phase (issued before the TMA copies that complete
/// them).
__device__ __forceinline__ void mbarrierArriveExpectTx(u32 barrier, u32 bytes) {
  asm volatile(
      "{ .reg .b64 state;\n\t"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1; }" ::"r"(
          barrier),
      "r"(bytes)
      : "memory");
}

/// mbarrier.arrive on the barrier at the same offset in CTA `cta` of the
/// cluster. Used to free a stage that a multicast copy from another CTA
/// fills. The arrival has the default semantics (release, CTA scope): the
/// consumers only read the stage, and their reads are complete (the wgmma
/// waited on) before they arrive. A release at cluster scope costs a
/// cluster-wide memory fence per arrival (ncu: 14 of 23 cycles per issued
/// instruction stalled on it in a 2x1-cluster GEMM).
__device__ __forceinline__ void mbarrierArriveCluster(u32 barrier, u32 cta) {
  asm volatile(
      "{ .reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote]; }" ::"r"(barrier),
      "r"(cta)
      : "memory");
}

/// Waits until the phase with parity `parity` has completed. A barrier
/// fresh from init counts its (nonexistent) previous phase, parity 1, as
/// complete: producers wait on "empty" barriers with parity phase ^ 1.
/// The retry loop is inside the asm statement (labels are local to its
/// braces): a C++ loop would be a control-flow join that makes the
/// compiler copy live accumulator registers around it.
__device__ __forceinline__ void mbarrierWait(u32 barrier, u32 parity) {
  asm volatile("{\n\t.reg .pred done;\n"
               "MOSS_MBARRIER_WAIT:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
               "@!done bra MOSS_MBARRIER_WAIT;\n}" ::"r"(barrier),
               "r"(parity)
               : "memory");
}

} // namespace moss::ptx
