// moss/quantize/columnmax.cuh - the column pass of a dual-layout quantize in
// two kernels: the row-wise kernel quantizes the row-major layout and leaves
// each CTA's largest magnitudes per column (RowwiseConfig::ColumnMax,
// Args::columnMax); this pass turns them into the words the transposed
// layout's quantize pass reads, each input column's in Args::globalBits,
// bit for bit the transposed reduce pass's (columnwise.cuh): the largest
// globalContribution of the column's blocks of Block rows, 0 where there is
// none. The transposed quantize pass follows with no reduce pass, so X is
// read twice instead of three times.
//
// A CTA of kColumnMaxThreads threads owns kColumnMaxWords (32) words of a row
// of maxima (64 BF16 or 32 FP32 columns); its warps take every eighth row of
// the maxima and combine theirs in shared memory. A column without NaN or Inf
// has only finite blocks, so its largest magnitude is its word. For two-level
// and MXFP8, whose contributions leave out non-finite blocks, a column that
// holds NaN or Inf is read again, block by block, by the whole CTA: slow,
// and only for data that is not finite.
#pragma once

#include "moss/quantize/common.cuh"

namespace moss::quantize {

/// The magnitude bits (FP32 layout) of X[row][col].
template <int In>
__device__ __forceinline__ uint32_t loadMagnitude(const Args &args, int row,
                                                  int col) {
  const size_t index = size_t(row) * args.cols + col;
  if constexpr (In == kInBF16) {
    unsigned short h;
    asm volatile("ld.global.nc.u16 %0, [%1];"
                 : "=h"(h)
                 : "l"(static_cast<const unsigned short *>(args.x) + index));
    return uint32_t(h & 0x7FFFu) << 16;
  } else {
    uint32_t bits;
    asm volatile("ld.global.nc.u32 %0, [%1];"
                 : "=r"(bits)
                 : "l"(static_cast<const uint32_t *>(args.x) + index));
    return bits & 0x7FFFFFFFu;
  }
}

template <int In, int Kind, int Block>
__device__ void columnMax(const Args &args) {
  constexpr int kWarps = kColumnMaxThreads / 32;
  constexpr int kWordCols = In == kInBF16 ? 2 : 1;
  static_assert(kColumnMaxWords == 32, "a warp's lanes take the words");
  constexpr int kCols = kColumnMaxWords * kWordCols;
  __shared__ uint32_t partial[kWarps][32];
  __shared__ uint32_t columnBits[kCols];
  __shared__ uint32_t scratch[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int rowWords = args.cols / (4 / InputTraits<In>::kBytes);
  const int word = int(blockIdx.x) * kColumnMaxWords + lane;
  uint32_t m = 0;
  if (word < rowWords)
    for (int p = warp; p < args.columnMaxParts; p += kWarps)
      m = wordMagnitudeMax<In>(m, args.columnMax[size_t(p) * rowWords + word]);
  partial[warp][lane] = m;
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
      m = wordMagnitudeMax<In>(m, partial[w][lane]);
    if constexpr (In == kInBF16) {
      columnBits[2 * lane] = m << 16;
      columnBits[2 * lane + 1] = m & 0xFFFF0000u;
    } else {
      columnBits[lane] = m;
    }
  }
  __syncthreads();
  const int c0 = int(blockIdx.x) * kCols;
  if constexpr (Kind == kTwoLevel || Kind == kMXFP8) {
    const int blocks = (args.rows + Block - 1) / Block;
    for (int j = 0; j < kCols && c0 + j < args.cols; ++j) {
      if (columnBits[j] < kInfBits)
        continue; // (columnBits[j] is the same for every thread)
      uint32_t best = 0;
      for (int b = threadIdx.x; b < blocks; b += kColumnMaxThreads) {
        uint32_t blockBits = 0;
        const int end = min(args.rows, (b + 1) * Block);
        for (int r = b * Block; r < end; ++r) {
          const uint32_t bits = loadMagnitude<In>(args, r, c0 + j);
          blockBits = bits > blockBits ? bits : blockBits;
        }
        const uint32_t c = globalContribution<Kind>(blockBits);
        best = c > best ? c : best;
      }
      best = ctaMax<kColumnMaxThreads>(best, scratch);
      if (threadIdx.x == 0)
        columnBits[j] = best;
      __syncthreads();
    }
  }
  for (int j = threadIdx.x; j < kCols; j += kColumnMaxThreads)
    if (c0 + j < args.cols)
      args.globalBits[c0 + j] = columnBits[j];
}

} // namespace moss::quantize
