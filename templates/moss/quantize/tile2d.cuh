// moss/quantize/tile2d.cuh - per-group quantization with square BxB blocks
// (weights), row-wise or transposed. A CTA owns one block: it reduces the
// block's amax, then re-reads the block (now in cache) and writes its codes.
#pragma once

#include "moss/quantize/columnwise.cuh"

namespace moss::quantize {

template <int In_, int Fmt_, int Block_, bool Transpose_> struct Tile2dConfig {
  static constexpr int In = In_, Fmt = Fmt_, Block = Block_;
  static constexpr bool Transpose = Transpose_;
  static constexpr int Threads = 256;
};

template <class Config> __device__ void tile2d(const Args &args) {
  constexpr int In = Config::In, Fmt = Config::Fmt, B = Config::Block;
  __shared__ uint32_t scratch[Config::Threads / 32];
  const int r0 = blockIdx.y * B, c0 = blockIdx.x * B;

  uint32_t bits = 0;
  for (int idx = threadIdx.x; idx < B * B; idx += Config::Threads) {
    int r = r0 + idx / B, c = c0 + idx % B;
    if (r < args.rows && c < args.cols) {
      uint32_t b = absBits(loadElement<In>(args.x, size_t(r) * args.cols + c));
      bits = b > bits ? b : bits;
    }
  }
  bits = ctaMax<Config::Threads>(bits, scratch);
  BlockScale s = blockScale<kPerGroup, Fmt>(bits, GlobalScale{1.0f, 1.0});

  // Two neighbouring code bytes per thread and step, consecutive threads on
  // consecutive bytes of one output row.
  uint32_t saturated = 0;
  for (int idx = 2 * threadIdx.x; idx < B * B; idx += 2 * Config::Threads) {
    int outRow = idx / B, outCol = idx % B;
    // Element (r, c) of X and its neighbour along the output row.
    int r = Config::Transpose ? r0 + outCol : r0 + outRow;
    int c = Config::Transpose ? c0 + outRow : c0 + outCol;
    int r1 = Config::Transpose ? r + 1 : r, c1 = Config::Transpose ? c : c + 1;
    bool valid0 = r < args.rows && c < args.cols;
    bool valid1 = r1 < args.rows && c1 < args.cols;
    float x0 = valid0 ? loadElement<In>(args.x, size_t(r) * args.cols + c) : 0;
    float x1 = valid1 ? loadElement<In>(args.x, size_t(r1) * args.cols + c1)
                      : 0;
    uint32_t codes =
        encodePair<Fmt, false>(x0, x1, s, saturated, valid0, valid1);
    uint8_t *dst = Config::Transpose ? args.q + size_t(c) * args.rows + r
                                     : args.q + size_t(r) * args.cols + c;
    if (valid0)
      dst[0] = uint8_t(codes);
    if (valid1)
      dst[1] = uint8_t(codes >> 8);
  }
  if (threadIdx.x == 0) {
    size_t blockIndex =
        Config::Transpose
            ? size_t(blockIdx.x) * (args.rows / B) + blockIdx.y
            : size_t(blockIdx.y) * (args.cols / B) + blockIdx.x;
    static_cast<float *>(args.local)[blockIndex] = s.divisor;
  }
  addCount(args.saturated, saturated);
  addCount(args.nonFinite, threadIdx.x == 0 && bits >= kInfBits);
}

} // namespace moss::quantize
