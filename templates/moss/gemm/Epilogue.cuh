// moss/gemm/Epilogue.cuh - global scales, bias, beta*C, output cast,
// amax, and the store.
//
// out[r][c] = acc[r][c] * gA[r] * gB[c]  (+ bias[c])  (+ beta * C[r][c])
//
// gA, gB are the operands' FP32 global scales (one per tensor or per row;
// 1 for schemes without one), read from device memory. The value is
// rounded once to the Out type (round to nearest even) and stored.
// `amax` receives max |stored value| (NaN if any stored value is NaN).
//
// First version: each thread stores its fragment directly to global memory
// (predicated on r < M, c < N; pairs of columns as one 4- or 8-byte store
// when N is even). A shared-memory + TMA store epilogue is the next step
// (docs/GEMM-KERNEL.md).
#pragma once

#include "moss/gemm/Mainloop.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/sync.cuh"

namespace moss::gemm::detail {

/// Reads element `index` of a bias / C array of element kind `kKind`.
template <int kKind>
__device__ __forceinline__ float loadElement(const void *p, long long index) {
  if constexpr (kKind == kF32)
    return static_cast<const float *>(p)[index];
  else if constexpr (kKind == kBF16)
    return ptx::bf16ToFloat(static_cast<const unsigned short *>(p)[index]);
  else
    return ptx::f16ToFloat(static_cast<const unsigned short *>(p)[index]);
}

/// The Out value of v rounded, as a float (what amax sees), and its bits.
template <int kOut> struct Rounded {
  __device__ __forceinline__ static u32 bits(float v) {
    if constexpr (kOut == kBF16)
      return ptx::floatToBf16(v);
    else if constexpr (kOut == kF16)
      return ptx::floatToF16(v);
    else
      return ptx::floatBits(v);
  }
  __device__ __forceinline__ static float value(u32 b) {
    if constexpr (kOut == kBF16)
      return ptx::bf16ToFloat(static_cast<unsigned short>(b));
    else if constexpr (kOut == kF16)
      return ptx::f16ToFloat(static_cast<unsigned short>(b));
    else
      return ptx::bitsFloat(b);
  }
};

/// Stores one element of the output.
template <int kOut>
__device__ __forceinline__ void storeOne(void *d, long long index, u32 bits) {
  if constexpr (kOut == kF32)
    static_cast<u32 *>(d)[index] = bits;
  else
    static_cast<unsigned short *>(d)[index] = static_cast<unsigned short>(bits);
}

/// The epilogue of one consumer thread for the tile at (m0, n0).
template <class Cfg>
__device__ __forceinline__ void epilogue(const Args &args, int m, int m0,
                                         int n0, const Fragment<Cfg> &acc,
                                         const ConsumerPosition &pos) {
  constexpr int kOut = Cfg::Out;
  // The uniform part of gA * gB.
  float uniform = 1.0f;
  if constexpr (Cfg::kHasGlobalA && !Cfg::kGlobalRowA)
    uniform *= args.aGlobal[0];
  if constexpr (Cfg::kHasGlobalB && !Cfg::kGlobalRowB)
    uniform *= args.bGlobal[0];
  int rows[Cfg::kWgM][2];
  float rowScale[Cfg::kWgM][2];
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = m0 + fragmentRow<Cfg>(pos, mm, h);
      rows[mm][h] = r;
      float s = uniform;
      if constexpr (Cfg::kGlobalRowA)
        s *= r < m ? args.aGlobal[r] : 0.0f;
      rowScale[mm][h] = s;
    }
  u32 amaxBits = 0;
  const int colBase = n0 + 2 * (pos.lane & 3);
#pragma unroll
  for (int j = 0; j < Cfg::TileN / 8; ++j) {
    const int c = colBase + 8 * j;
    if (c >= Cfg::N)
      continue;
    // N even: c + 1 < N too, and the pair is 2-element aligned.
    const bool second = (Cfg::N % 2 == 0) || c + 1 < Cfg::N;
    float colScale[2] = {1.0f, 1.0f};
    float bias[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (e == 1 && !second)
        continue;
      if constexpr (Cfg::kGlobalRowB)
        colScale[e] = args.bGlobal[c + e];
      if constexpr (Cfg::Bias != kNone)
        bias[e] = loadElement<Cfg::Bias>(args.bias, c + e);
    }
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = rows[mm][h];
        if (r >= m)
          continue;
        const long long index = static_cast<long long>(r) * Cfg::N + c;
        u32 bits[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = acc[mm][4 * j + 2 * h + e] * rowScale[mm][h];
          if constexpr (Cfg::kGlobalRowB)
            v *= colScale[e];
          if constexpr (Cfg::Bias != kNone)
            v += bias[e];
          if constexpr (Cfg::Accum != kNone) {
            if (e == 0 || second)
              v = __fmaf_rn(args.beta,
                            loadElement<Cfg::Accum>(args.c, index + e), v);
          }
          bits[e] = Rounded<kOut>::bits(v);
          if constexpr (Cfg::Amax) {
            u32 magnitude =
                ptx::floatBits(Rounded<kOut>::value(bits[e])) & 0x7FFFFFFFu;
            if (e == 0 || second)
              amaxBits = magnitude > amaxBits ? magnitude : amaxBits;
          }
        }
        if constexpr (Cfg::N % 2 == 0) {
          if constexpr (kOut == kF32) {
            struct alignas(8) Pair {
              u32 x, y;
            };
            *reinterpret_cast<Pair *>(static_cast<u32 *>(args.d) + index) =
                Pair{bits[0], bits[1]};
          } else {
            static_cast<u32 *>(args.d)[index / 2] = bits[0] | (bits[1] << 16);
          }
        } else {
          storeOne<kOut>(args.d, index, bits[0]);
          if (second)
            storeOne<kOut>(args.d, index + 1, bits[1]);
        }
      }
  }
  if constexpr (Cfg::Amax) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      u32 other = ptx::shuffleXor(amaxBits, offset);
      amaxBits = other > amaxBits ? other : amaxBits;
    }
    if (pos.lane == 0 && amaxBits != 0)
      ptx::atomicMaxU32(reinterpret_cast<u32 *>(args.amax), amaxBits);
  }
}

} // namespace moss::gemm::detail
