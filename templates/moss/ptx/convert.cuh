// moss/ptx/convert.cuh - FP32 <-> BF16/F16 conversions and bit casts.
//
// The templates do not include <cuda_bf16.h> or <cuda_fp16.h> (they double
// NVRTC compile times); 16-bit values travel as u16 / packed u32 bits.
// Rounding is to nearest even (cvt.rn), with NaN kept NaN and overflow going
// to infinity, as the CUDA headers' __float2bfloat16_rn does.
#pragma once

#include "moss/common/fp8.cuh"
#include "moss/ptx/types.cuh"

namespace moss::ptx {

// One set of bit casts and E8M0 rules for all device code.
using moss::bitsFloat;
using moss::decodeE8M0;
using moss::floatBits;

/// RN(x) to bf16.
__device__ __forceinline__ u16 floatToBf16(float x) {
  u16 out;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(out) : "f"(x));
  return out;
}

/// RN(x) to f16.
__device__ __forceinline__ u16 floatToF16(float x) {
  u16 out;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(out) : "f"(x));
  return out;
}

/// The exact float value of bf16 bits.
__device__ __forceinline__ float bf16ToFloat(u16 x) {
  return bitsFloat(static_cast<u32>(x) << 16);
}

/// The exact float value of f16 bits.
__device__ __forceinline__ float f16ToFloat(u16 x) {
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(x));
  return out;
}

/// Two FP8 codes (the low 16 bits of `pair`, the first in the low byte) as
/// f16x2, exactly: every E4M3 and E5M2 value is an f16 value. kFormat is
/// kFp8E4M3 (0) or kFp8E5M2 (1).
template <int kFormat> __device__ __forceinline__ u32 fp8x2ToF16x2(u32 pair) {
  u32 out;
  const u16 in = static_cast<u16>(pair);
  if constexpr (kFormat == 0)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(in));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(out) : "h"(in));
  return out;
}

} // namespace moss::ptx
