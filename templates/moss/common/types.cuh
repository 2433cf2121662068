// moss/common/types.cuh - the few basics device templates need.
//
// Kernels compile with NVRTC -minimal and without the CUDA headers (they
// double compile times), so fixed-width types and float bit casts are
// defined here.
#pragma once

namespace moss {

using uint8_t = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using int64_t = long long;
using uint64_t = unsigned long long;

// Bit casts and bit counts in PTX: -minimal compiles see no CUDA headers.
__device__ __forceinline__ uint32_t floatBits(float x) {
  uint32_t u;
  asm("mov.b32 %0, %1;" : "=r"(u) : "f"(x));
  return u;
}
__device__ __forceinline__ float bitsFloat(uint32_t u) {
  float x;
  asm("mov.b32 %0, %1;" : "=f"(x) : "r"(u));
  return x;
}
__device__ __forceinline__ int countLeadingZeros(uint32_t u) {
  uint32_t n;
  asm("clz.b32 %0, %1;" : "=r"(n) : "r"(u));
  return int(n);
}

/// Input element types of the quantizers, numbered as in the runtime.
enum InputKind : int { kInF32 = 0, kInBF16 = 1 };

template <int In> struct InputTraits;
template <> struct InputTraits<kInF32> {
  static constexpr int kBytes = 4;
};
template <> struct InputTraits<kInBF16> {
  static constexpr int kBytes = 2;
};

/// 16 bytes, the width of one vector load.
struct alignas(16) Vec16 {
  uint32_t w[4];
};

/// Element i of a 16-byte vector of `In` elements, as FP32 (exact).
template <int In>
__device__ __forceinline__ float vecElement(const Vec16 &v, int i) {
  if constexpr (In == kInF32)
    return bitsFloat(v.w[i]);
  else
    return bitsFloat((i & 1) ? (v.w[i >> 1] & 0xFFFF0000u)
                             : (v.w[i >> 1] << 16));
}

template <int In> constexpr int kVecElements = 16 / InputTraits<In>::kBytes;

} // namespace moss
