// moss/quantize/geometry.cuh - the quantizer kernels' launch geometry, the
// one definition the templates and the host's launch code
// (runtime/api/Quantizer*.cpp, which compile this file as plain C++) share.
#pragma once

namespace moss::quantize {

/// The row-wise kernel's most input rows in flight per CTA.
constexpr int kMaxRowStages = 8;

/// The transposed kernel: a CTA of four warps, and a tile of 128 input rows
/// by 128 bytes of input columns (32 FP32 or 64 BF16 columns).
constexpr int kColumnwiseThreads = 128;
constexpr int kColumnwiseTileRows = 128;
constexpr int kColumnwiseTileBytes = 128;

/// The column pass of a dual-layout quantize in two kernels: a CTA of 256
/// threads per 32 words of a row of column maxima.
constexpr int kColumnMaxThreads = 256;
constexpr int kColumnMaxWords = 32;

/// The fused AdamW step and cast (adamw.cuh): a CTA of eight warps takes
/// tiles of 64 rows by 128 FP32 columns.
constexpr int kAdamWThreads = 256;
constexpr int kAdamWTileRows = 64;
constexpr int kAdamWTileCols = 128;

} // namespace moss::quantize
