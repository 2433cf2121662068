// moss/ptx/wgmma.cuh - Hopper warpgroup MMA (wgmma, sm_90a) for FP8 and
// f16.
//
// One warpgroup (4 consecutive warps, the first a multiple of 4) computes
// D[64 x N] (+)= A[64 x K] * B[N x K]^T (K = 32 FP8 or 16 f16 elements,
// 32 bytes of each row either way) with both operands K-major in
// shared memory, described by 64-bit matrix descriptors, and D in FP32
// registers: N/2 per thread. Thread t of warp w holds, for each 8-column
// group j, D[16w + t/4][8j + 2(t%4) + {0,1}] in d[4j + {0,1}] and the same
// columns of row 16w + t/4 + 8 in d[4j + {2,3}].
//
// The instruction is asynchronous: issue wgmmaFence() before the first
// wgmma that touches registers other instructions accessed, close a batch
// with wgmmaCommit(), and wgmmaWait<N>() before reading D (then
// fenceOperand() each register read, so the compiler cannot hoist the
// reads above the wait).
#pragma once

#include "moss/ptx/types.cuh"

namespace moss::ptx {

/// A shared-memory matrix descriptor for a K-major tile written by TMA with
/// 128-byte swizzle: rows of 128 bytes, 8-row (1024-byte) swizzle atoms.
/// The tile must start 1024-byte aligned. To step along K inside the
/// 128-byte row, add (bytes >> 4) to the descriptor (wgmma applies the
/// swizzle to the computed addresses); to step 8 rows, add 64 (1024 >> 4).
__device__ __forceinline__ u64 makeSmemDescriptorSw128(u32 smemAddr) {
  u64 desc = 0;
  desc |= static_cast<u64>((smemAddr & 0x3FFFFu) >> 4); // start address
  desc |= static_cast<u64>(1) << 16;  // leading byte offset (unused here)
  desc |= static_cast<u64>(64) << 32; // stride byte offset: 1024 B per 8 rows
  desc |= static_cast<u64>(1) << 62;  // layout: 128-byte swizzle
  return desc;
}

/// wgmma.fence: orders earlier register accesses of the warpgroup before
/// the wgmma operations that follow.
__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

/// wgmma.commit_group: closes the group of wgmma operations issued so far.
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/// wgmma.wait_group N: waits until at most N groups are pending.
template <int N> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/// Ties a register to this point of the program: reads after it see the
/// value after everything before it (an empty volatile asm).
__device__ __forceinline__ void fenceOperand(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}

/// FP8 element formats (the values of moss::gemm_kernel::kE4M3 / kE5M2).
enum : int { kFp8E4M3 = 0, kFp8E5M2 = 1 };

// --- operand lists -------------------------------------------------------
// "%0, %1, ..., %(n-1)" as string pieces: MOSS_PTX_Rk(t) lists the k
// operands %t0 .. %t(k-1) of decade t (t empty for 0..9).
#define MOSS_PTX_R1(t) "%" #t "0"
#define MOSS_PTX_R2(t) MOSS_PTX_R1(t) ", %" #t "1"
#define MOSS_PTX_R3(t) MOSS_PTX_R2(t) ", %" #t "2"
#define MOSS_PTX_R4(t) MOSS_PTX_R3(t) ", %" #t "3"
#define MOSS_PTX_R5(t) MOSS_PTX_R4(t) ", %" #t "4"
#define MOSS_PTX_R6(t) MOSS_PTX_R5(t) ", %" #t "5"
#define MOSS_PTX_R7(t) MOSS_PTX_R6(t) ", %" #t "6"
#define MOSS_PTX_R8(t) MOSS_PTX_R7(t) ", %" #t "7"
#define MOSS_PTX_R9(t) MOSS_PTX_R8(t) ", %" #t "8"
#define MOSS_PTX_R10(t) MOSS_PTX_R9(t) ", %" #t "9"
#define MOSS_PTX_D10 MOSS_PTX_R10()
#define MOSS_PTX_D20 MOSS_PTX_D10 ", " MOSS_PTX_R10(1)
#define MOSS_PTX_D30 MOSS_PTX_D20 ", " MOSS_PTX_R10(2)
#define MOSS_PTX_D40 MOSS_PTX_D30 ", " MOSS_PTX_R10(3)
#define MOSS_PTX_D50 MOSS_PTX_D40 ", " MOSS_PTX_R10(4)
#define MOSS_PTX_D60 MOSS_PTX_D50 ", " MOSS_PTX_R10(5)
#define MOSS_PTX_D70 MOSS_PTX_D60 ", " MOSS_PTX_R10(6)
#define MOSS_PTX_D80 MOSS_PTX_D70 ", " MOSS_PTX_R10(7)
#define MOSS_PTX_D90 MOSS_PTX_D80 ", " MOSS_PTX_R10(8)
#define MOSS_PTX_D100 MOSS_PTX_D90 ", " MOSS_PTX_R10(9)
#define MOSS_PTX_D110 MOSS_PTX_D100 ", " MOSS_PTX_R10(10)
#define MOSS_PTX_D120 MOSS_PTX_D110 ", " MOSS_PTX_R10(11)
// C(d[i]) ... for consecutive registers from i, C the constraint "+f"
// (read and written) or "=f" (written only).
#define MOSS_PTX_F4(C, i)                                                      \
  C(d[(i) + 0]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3])
#define MOSS_PTX_F16(C, i)                                                     \
  MOSS_PTX_F4(C, i), MOSS_PTX_F4(C, (i) + 4), MOSS_PTX_F4(C, (i) + 8),         \
      MOSS_PTX_F4(C, (i) + 12)
#define MOSS_PTX_F32(C, i) MOSS_PTX_F16(C, i), MOSS_PTX_F16(C, (i) + 16)
#define MOSS_PTX_F64(C, i) MOSS_PTX_F32(C, i), MOSS_PTX_F32(C, (i) + 32)

// One FP8 wgmma statement (scale-a and scale-b 1): the shape and types
// ("m64n128k32.f32.e4m3.e4m3"), the accumulator list string, the operand
// numbers of desc A, desc B and the scale-d flag, then the output operands
// (variadic: they contain commas).
#define MOSS_PTX_WGMMA(SHAPE, REGS, DA, DB, SD, ...)                           \
  asm volatile("{\n\t.reg .pred p;\n\t"                                        \
               "setp.ne.b32 p, " SD ", 0;\n\t"                                 \
               "wgmma.mma_async.sync.aligned." SHAPE " {" REGS "}, " DA        \
               ", " DB ", p, 1, 1;\n}"                                         \
               : __VA_ARGS__                                                   \
               : "l"(descA), "l"(descB), "r"(scaleD))

#define MOSS_PTX_FP8(N, TA, TB) "m64n" #N "k32.f32." TA "." TB
// Both wrappers for one N: REGS lists the N/2 accumulators, O0 .. O5 are
// the operand numbers after them (FP8: desc A, desc B, scale-d; f16: the
// four A registers, desc B, scale-d).
#define MOSS_PTX_DEFINE_WGMMA(N, REGS, O0, O1, O2, O3, O4, O5, OUTS)           \
  template <> struct WgmmaFp8<N> {                                             \
    template <int kTypeA, int kTypeB>                                          \
    static __device__ __forceinline__ void mma(float (&d)[(N) / 2], u64 descA, \
                                               u64 descB, u32 scaleD) {        \
      if constexpr (kTypeA == kFp8E4M3 && kTypeB == kFp8E4M3)                  \
        MOSS_PTX_WGMMA(MOSS_PTX_FP8(N, "e4m3", "e4m3"), REGS, O0, O1, O2,      \
                       OUTS("+f"));                                            \
      else if constexpr (kTypeA == kFp8E4M3 && kTypeB == kFp8E5M2)             \
        MOSS_PTX_WGMMA(MOSS_PTX_FP8(N, "e4m3", "e5m2"), REGS, O0, O1, O2,      \
                       OUTS("+f"));                                            \
      else if constexpr (kTypeA == kFp8E5M2 && kTypeB == kFp8E4M3)             \
        MOSS_PTX_WGMMA(MOSS_PTX_FP8(N, "e5m2", "e4m3"), REGS, O0, O1, O2,      \
                       OUTS("+f"));                                            \
      else                                                                     \
        MOSS_PTX_WGMMA(MOSS_PTX_FP8(N, "e5m2", "e5m2"), REGS, O0, O1, O2,      \
                       OUTS("+f"));                                            \
    }                                                                          \
  };                                                                           \
  template <> struct WgmmaF16<N> {                                             \
    static __device__ __forceinline__ void                                     \
    mma(float (&d)[(N) / 2], const u32 (&a)[4], u64 descB, u32 scaleD) {       \
      asm volatile("{\n\t.reg .pred p;\n\t"                                    \
                   "setp.ne.b32 p, " O5 ", 0;\n\t"                             \
                   "wgmma.mma_async.sync.aligned.m64n" #N                      \
                   "k16.f32.f16.f16 {" REGS "}, {" O0 ", " O1 ", " O2 ", " O3  \
                   "}, " O4 ", p, 1, 1, 0;\n}"                                 \
                   : OUTS("+f")                                                \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB),   \
                     "r"(scaleD));                                             \
    }                                                                          \
  };

/// wgmma.mma_async m64nNk32, FP32 accumulators, both operands FP8 in shared
/// memory: WgmmaFp8<N>::mma<kTypeA, kTypeB>(d, descA, descB, scaleD)
/// computes d = A * B^T + (scaleD ? d : 0). The registers are "+f"
/// (read-write) for the compiler even when scaleD is 0: with "=f" the
/// register allocator may move the outputs of an in-flight wgmma, which
/// measured worse (spills, serialized wgmma) in the promoted main loop.
/// Defined for N = 32, 64, ..., 256.
template <int N> struct WgmmaFp8;

/// wgmma.mma_async m64nNk16, FP32 accumulators, A f16 from registers and B
/// f16 in shared memory (K-major, 128-byte swizzled like the FP8 tiles):
/// WgmmaF16<N>::mma(d, a, descB, scaleD), as WgmmaFp8. Thread t of warp w
/// holds in a[0] and a[1] A's rows 16w + t/4 and 16w + t/4 + 8 at K 2(t%4)
/// and the next, in a[2] and a[3] the same rows 8 further along K (two f16
/// each, the first in the low half). The registers must keep their values
/// until the wgmma has completed.
template <int N> struct WgmmaF16;

#define MOSS_PTX_OUTS_32(C) MOSS_PTX_F16(C, 0)
MOSS_PTX_DEFINE_WGMMA(32, MOSS_PTX_D10 ", " MOSS_PTX_R6(1), "%16", "%17", "%18",
                      "%19", "%20", "%21", MOSS_PTX_OUTS_32)
#define MOSS_PTX_OUTS_64(C) MOSS_PTX_F32(C, 0)
MOSS_PTX_DEFINE_WGMMA(64, MOSS_PTX_D30 ", " MOSS_PTX_R2(3), "%32", "%33", "%34",
                      "%35", "%36", "%37", MOSS_PTX_OUTS_64)
#define MOSS_PTX_OUTS_96(C) MOSS_PTX_F32(C, 0), MOSS_PTX_F16(C, 32)
MOSS_PTX_DEFINE_WGMMA(96, MOSS_PTX_D40 ", " MOSS_PTX_R8(4), "%48", "%49", "%50",
                      "%51", "%52", "%53", MOSS_PTX_OUTS_96)
#define MOSS_PTX_OUTS_128(C) MOSS_PTX_F64(C, 0)
MOSS_PTX_DEFINE_WGMMA(128, MOSS_PTX_D60 ", " MOSS_PTX_R4(6), "%64", "%65",
                      "%66", "%67", "%68", "%69", MOSS_PTX_OUTS_128)
#define MOSS_PTX_OUTS_160(C) MOSS_PTX_F64(C, 0), MOSS_PTX_F16(C, 64)
MOSS_PTX_DEFINE_WGMMA(160, MOSS_PTX_D80, "%80", "%81", "%82", "%83", "%84",
                      "%85", MOSS_PTX_OUTS_160)
#define MOSS_PTX_OUTS_192(C) MOSS_PTX_F64(C, 0), MOSS_PTX_F32(C, 64)
MOSS_PTX_DEFINE_WGMMA(192, MOSS_PTX_D90 ", " MOSS_PTX_R6(9), "%96", "%97",
                      "%98", "%99", "%100", "%101", MOSS_PTX_OUTS_192)
#define MOSS_PTX_OUTS_224(C)                                                   \
  MOSS_PTX_F64(C, 0), MOSS_PTX_F32(C, 64), MOSS_PTX_F16(C, 96)
MOSS_PTX_DEFINE_WGMMA(224, MOSS_PTX_D110 ", " MOSS_PTX_R2(11), "%112", "%113",
                      "%114", "%115", "%116", "%117", MOSS_PTX_OUTS_224)
#define MOSS_PTX_OUTS_256(C) MOSS_PTX_F64(C, 0), MOSS_PTX_F64(C, 64)
MOSS_PTX_DEFINE_WGMMA(256, MOSS_PTX_D120 ", " MOSS_PTX_R8(12), "%128", "%129",
                      "%130", "%131", "%132", "%133", MOSS_PTX_OUTS_256)

} // namespace moss::ptx
