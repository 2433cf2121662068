// moss/quantize/adamw.cuh - an AdamW step fused with the per-tensor FP8 cast
// of the updated weight (QuantizeSpec::adamw): one read of the FP32 weight,
// its gradient and its two moments; one write of the weight, the moments and
// the codes, row-major and, for a dual-layout spec, transposed. Unfused, the
// cast reads the weight again after the optimizer wrote it.
//
// The update is moss::numerics::adamwUpdate's, operation for operation, and
// the codes are a cast with the caller's scale (Args::scaleIn) of the
// updated weight: the bits of castWithScale, saturation counted alike.
//
// A CTA of eight warps takes tiles of 64 rows by 128 columns: tiles
// (blockIdx.x, blockIdx.y), (blockIdx.x, blockIdx.y + gridDim.y), ... Lane
// L of a warp holds columns 4L .. 4L + 3 of four consecutive rows at a
// time, so a warp reads and writes whole 512-byte rows of each array and
// 128-byte rows of codes. For the transposed codes each lane turns its 4x4
// codes around in registers (four columns' words of four rows' codes) and
// parks them in a shared tile, from which the CTA writes each output row's
// 64 codes as 16 words.
#pragma once

#include "moss/quantize/common.cuh"

namespace moss::quantize {

template <int Fmt_, bool Dual_> struct AdamWConfig {
  static constexpr int Fmt = Fmt_;
  /// Whether the transposed codes are written too (Args then holds the
  /// transposed layout's outputs and Args::row the row-major ones).
  static constexpr bool Dual = Dual_;
  static constexpr int Threads = kAdamWThreads;
  static constexpr int kWarps = Threads / 32;
  static constexpr int TileR = kAdamWTileRows, TileC = kAdamWTileCols;
  /// Rows a warp takes at once, and the CTA's steps through a tile.
  static constexpr int kGroupRows = 4;
  static constexpr int kSteps = TileR / (kGroupRows * kWarps);
  static_assert(TileC == 32 * 4 && kSteps * kGroupRows * kWarps == TileR,
                "a lane's four columns, whole row groups");
};

/// moss::numerics::adamwUpdate: the updated weight; `m` and `v` in place.
__device__ __forceinline__ float adamwUpdate(float p, float g, float &m,
                                             float &v, const AdamWArgs &c) {
  m = fmaRn(c.oneMinusBeta1, subRn(g, m), m);
  v = fmaRn(c.oneMinusBeta2, mulRn(g, g), mulRn(c.beta2, v));
  const float denominator = addRn(__fdiv_rn(__fsqrt_rn(v), c.bias2Sqrt), c.eps);
  return fmaRn(c.negStepSize, __fdiv_rn(m, denominator), mulRn(p, c.decay));
}

__device__ __forceinline__ float4 load4(const float *p) {
  float4 v;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void store4(float *p, const float (&v)[4]) {
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]),
               "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
}

/// The four column words of a 4x4 block of codes: byte r of out[c] is byte
/// c of rows[r].
__device__ __forceinline__ void transpose4x4(const uint32_t (&rows)[4],
                                             uint32_t (&out)[4]) {
  const uint32_t low01 = __byte_perm(rows[0], rows[1], 0x5140);
  const uint32_t low23 = __byte_perm(rows[2], rows[3], 0x5140);
  const uint32_t high01 = __byte_perm(rows[0], rows[1], 0x7362);
  const uint32_t high23 = __byte_perm(rows[2], rows[3], 0x7362);
  out[0] = __byte_perm(low01, low23, 0x5410);
  out[1] = __byte_perm(low01, low23, 0x7632);
  out[2] = __byte_perm(high01, high23, 0x5410);
  out[3] = __byte_perm(high01, high23, 0x7632);
}

template <class Config> __device__ void adamwCast(const Args &args) {
  constexpr int Fmt = Config::Fmt, TileR = Config::TileR, TileC = Config::TileC,
                Rows = Config::kGroupRows;
  // The transposed codes of one tile: [TileC][TileR / 4] words, padded to an
  // odd pitch so that a warp's column words spread over the banks.
  constexpr int kPitch = TileR / 4 + 1;
  __shared__ uint32_t transposed[Config::Dual ? TileC : 1][kPitch];

  const AdamWArgs &c = args.adamw;
  const int rows = args.rows, cols = args.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int col = int(blockIdx.x) * TileC + 4 * lane;
  float *weight = const_cast<float *>(static_cast<const float *>(args.x));
  unsigned char *rowCodes = Config::Dual ? args.row.q : args.q;
  const GlobalScale scale = makeGlobal(*args.scaleIn);
  uint32_t saturated = 0;

  const int tiles = (rows + TileR - 1) / TileR;
  for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
#pragma unroll
    for (int s = 0; s < Config::kSteps; ++s) {
      // This warp's rows of the step: first .. first + Rows - 1.
      const int group = s * Config::kWarps + warp;
      const int first = tile * TileR + group * Rows;
      float4 p[Rows], g[Rows], m[Rows], v[Rows];
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        if (col >= cols || first + r >= rows)
          continue;
        const size_t at = size_t(first + r) * size_t(cols) + size_t(col);
        p[r] = load4(weight + at);
        g[r] = load4(c.grad + at);
        m[r] = load4(c.expAvg + at);
        v[r] = load4(c.expAvgSq + at);
      }
      uint32_t codes[Rows] = {};
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        if (col >= cols || first + r >= rows)
          continue;
        float w[4] = {p[r].x, p[r].y, p[r].z, p[r].w};
        const float gv[4] = {g[r].x, g[r].y, g[r].z, g[r].w};
        float mv[4] = {m[r].x, m[r].y, m[r].z, m[r].w};
        float vv[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
        uint32_t amaxBits = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          w[e] = adamwUpdate(w[e], gv[e], mv[e], vv[e], c);
          const uint32_t bits = absBits(w[e]);
          amaxBits = bits > amaxBits ? bits : amaxBits;
        }
        const size_t at = size_t(first + r) * size_t(cols) + size_t(col);
        store4(weight + at, w);
        store4(c.expAvg + at, mv);
        store4(c.expAvgSq + at, vv);
        uint32_t word[1];
        encodeValues<Fmt, false, true>(
            w, blockScale<kPerTensor, Fmt>(amaxBits, scale), word, saturated);
        codes[r] = word[0];
        *reinterpret_cast<uint32_t *>(rowCodes + at) = codes[r];
      }
      if constexpr (Config::Dual) {
        uint32_t columns[4];
        transpose4x4(codes, columns);
#pragma unroll
        for (int k = 0; k < 4; ++k)
          transposed[4 * lane + k][group] = columns[k];
      }
    }
    if constexpr (Config::Dual) {
      // Output row `col0 + i` holds the codes of input column col0 + i: its
      // words of this tile's rows go out 16 at a time (64 bytes).
      __syncthreads();
      constexpr int kWords = TileC * (TileR / 4);
      const int col0 = int(blockIdx.x) * TileC;
      for (int i = threadIdx.x; i < kWords; i += Config::Threads) {
        const int outRow = i / (TileR / 4), word = i % (TileR / 4);
        const int row = tile * TileR + 4 * word;
        if (col0 + outRow < cols && row < rows)
          *reinterpret_cast<uint32_t *>(
              args.q + size_t(col0 + outRow) * size_t(rows) + size_t(row)) =
              transposed[outRow][word];
      }
      __syncthreads();
    }
  }

  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    if (args.global)
      args.global[0] = scale.value;
    if (Config::Dual && args.row.global)
      args.row.global[0] = scale.value;
  }
  // Both layouts hold the same codes, so they count the same saturations.
  if constexpr (Config::Dual)
    addCount(args.row.saturated, saturated);
  addCount(args.saturated, saturated);
}

} // namespace moss::quantize
