// moss/gemm/epilogue.cuh - global scales, bias, beta*C, output cast,
// amax, and the store.
//
// out[r][c] = acc[r][c] * gA[r] * gB[c]  (+ bias[c])  (+ beta * C[r][c])
//
// gA, gB are the operands' FP32 global scales (one per tensor or per row;
// 1 for schemes without one), read from device memory. The value is
// rounded once to the Out type (round to nearest even) and stored.
// `amax` receives max |stored value| (NaN if any stored value is NaN).
//
// The store (Config::kUsesTmaD): each consumer warp writes its 16 rows of
// an m64 tile, 128 bytes of columns at a time, into its own 128-byte
// swizzled staging buffer (conflict-free: the 8 rows of one store land in
// 8 different 16-byte bank groups) and hands each chunk to a TMA store,
// which skips rows past M and columns past N. Warps work alone, so the
// split-K epilogue (one warp at a time) takes the same path. The TMA store
// runs on while the warp goes on to the next chunk or tile; on the H200
// storing from registers instead (4-byte stores, 16 bytes per row per warp
// instruction) cost 12% of the cycles of per-tensor 128x256 at 8192^3. When
// the output rows are not 16-byte aligned, a tile is not whole chunks, or
// no buffer fits, each thread stores its fragment directly (pairs of
// columns as one 4- or 8-byte store when N is even), predicated on r < M
// and c < N.
#pragma once

#include "moss/gemm/mainloop.cuh"
#include "moss/ptx/convert.cuh"
#include "moss/ptx/shared.cuh"
#include "moss/ptx/sync.cuh"
#include "moss/ptx/tma.cuh"

namespace moss::gemm_kernel::detail {

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

/// The epilogue inputs that depend on the row: its row and gA * gB's row
/// part.
template <class Cfg> struct RowInputs {
  int row[Cfg::kWgM][2];
  float scale[Cfg::kWgM][2];

  __device__ __forceinline__ RowInputs(const Args &args, int m, int m0,
                                       const ConsumerPosition &pos,
                                       const ConsumerFold<Cfg> &fold) {
    // The uniform part of gA * gB.
    float uniform = 1.0f;
    if constexpr (Cfg::kHasGlobalA && !Cfg::kGlobalRowA && !Cfg::kFoldA)
      uniform *= args.aGlobal[0];
    if constexpr (Cfg::kHasGlobalB && !Cfg::kGlobalRowB)
      uniform *= args.bGlobal[0];
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int r = m0 + fragmentRow<Cfg>(pos, mm, h);
        row[mm][h] = r;
        float s = uniform;
        if constexpr (Cfg::kFoldA) {
          // The row fold's factor, rounded as the fold pass rounds it
          // (quantize/fold.cuh), so both paths give the same bits. Every
          // lane shuffles (rowScale), rows past M included.
          const float e = fold.rowScale(mm, h);
          float g = 1.0f;
          if constexpr (Cfg::kHasGlobalA)
            g = r < m ? args.aGlobal[Cfg::kGlobalRowA ? r : 0] : 0.0f;
          s *= r < m ? mulRn(g, e) : 0.0f;
        } else if constexpr (Cfg::kGlobalRowA) {
          s *= r < m ? args.aGlobal[r] : 0.0f;
        }
        scale[mm][h] = s;
      }
  }
};

/// The epilogue inputs of columns c and c + 1.
struct ColumnInputs {
  float scale[2] = {1.0f, 1.0f};
  float bias[2] = {0.0f, 0.0f};
};

/// The column inputs of a warp's tile (gB per column, the bias), loaded at
/// the start of its epilogue: lane l holds columns n0 + l, n0 + 32 + l, ...,
/// so all the loads are in flight at once, and each column pair reaches the
/// lanes that store it by a shuffle. (Loaded between the stores, each load
/// would wait its full latency in turn: a load may not move above a store
/// that could alias it.)
template <class Cfg> struct TileColumns {
  static constexpr bool kScale = Cfg::kGlobalRowB;
  static constexpr bool kBias = Cfg::Bias != kNone;
  static constexpr int kRegs = (Cfg::TileN + 31) / 32;
  float scale[kScale ? kRegs : 1];
  float bias[kBias ? kRegs : 1];

  __device__ __forceinline__ TileColumns(const Args &args, int n0, int lane) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int offset = 32 * i + lane, c = n0 + offset;
      const bool present = offset < Cfg::TileN && c < Cfg::N;
      if constexpr (kScale)
        scale[i] = present ? args.bGlobal[c] : 1.0f;
      if constexpr (kBias)
        bias[i] = present ? loadElement<Cfg::Bias>(args.bias, c) : 0.0f;
    }
  }

  /// Columns n0 + 8j + 2 (lane & 3) and the next, the pair this lane
  /// stores in the tile's 8-column group j. Every lane of the warp calls
  /// it, with the same j.
  __device__ __forceinline__ ColumnInputs get(int j, int lane) const {
    ColumnInputs columns;
    if constexpr (kScale || kBias) {
      // 8j + 2 (lane & 3) + e lies in lane-word j / 4: 8j mod 32 is at most
      // 24, and the rest at most 7.
      const int source = (8 * j) % 32 + 2 * (lane & 3);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (kScale)
          columns.scale[e] = ptx::bitsFloat(
              ptx::shuffleIndex(ptx::floatBits(scale[j / 4]), source + e));
        if constexpr (kBias)
          columns.bias[e] = ptx::bitsFloat(
              ptx::shuffleIndex(ptx::floatBits(bias[j / 4]), source + e));
      }
    }
    return columns;
  }
};

/// The Out bits of the elements (r, c) and (r, c + 1) at `index` = r * N +
/// c, from their accumulators `a`; `valid` (r < M, c < N) gates the reads
/// of C and amax (`second` the second element's).
template <class Cfg>
__device__ __forceinline__ void
outputPair(const Args &args, const float (&a)[2], float rowScale,
           const ColumnInputs &columns, long long index, bool valid,
           bool second, u32 (&bits)[2], u32 &amaxBits) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const bool present = valid && (e == 0 || second);
    float v = a[e] * rowScale;
    if constexpr (Cfg::kGlobalRowB)
      v *= columns.scale[e];
    if constexpr (Cfg::Bias != kNone)
      v += columns.bias[e];
    if constexpr (Cfg::Accum != kNone)
      if (present)
        v = __fmaf_rn(args.beta, loadElement<Cfg::Accum>(args.c, index + e), v);
    bits[e] = Rounded<Cfg::Out>::bits(v);
    if constexpr (Cfg::Amax) {
      u32 magnitude =
          ptx::floatBits(Rounded<Cfg::Out>::value(bits[e])) & 0x7FFFFFFFu;
      if (present)
        amaxBits = magnitude > amaxBits ? magnitude : amaxBits;
    }
  }
}

/// Stores the fragment from registers (see the top of this file).
template <class Cfg>
__device__ __forceinline__ void
storeDirect(const Args &args, int m, int n0, const Fragment<Cfg> &acc,
            const RowInputs<Cfg> &rows, const TileColumns<Cfg> &tileColumns,
            const ConsumerPosition &pos, u32 &amaxBits) {
  constexpr int kOut = Cfg::Out;
  const int colBase = n0 + 2 * (pos.lane & 3);
#pragma unroll
  for (int j = 0; j < Cfg::TileN / 8; ++j) {
    const ColumnInputs columns = tileColumns.get(j, pos.lane);
    const int c = colBase + 8 * j;
    if (c >= Cfg::N)
      continue;
    // N even: c + 1 < N too, and the pair is 2-element aligned.
    const bool second = (Cfg::N % 2 == 0) || c + 1 < Cfg::N;
#pragma unroll
    for (int mm = 0; mm < Cfg::kWgM; ++mm)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = rows.row[mm][h];
        if (r >= m)
          continue;
        const long long index = static_cast<long long>(r) * Cfg::N + c;
        const float a[2] = {acc[mm][4 * j + 2 * h], acc[mm][4 * j + 2 * h + 1]};
        u32 bits[2];
        outputPair<Cfg>(args, a, rows.scale[mm][h], columns, index, true,
                        second, bits, amaxBits);
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
}

/// Stores the fragment through the warp's staging buffers and TMA (see
/// the top of this file). N is a multiple of 8 here (16-byte rows), so
/// c < N implies c + 1 < N.
template <class Cfg>
__device__ __forceinline__ void
storeStaged(const Args &args, int m, int n0, const Fragment<Cfg> &acc,
            const RowInputs<Cfg> &rows, const TileColumns<Cfg> &tileColumns,
            const ConsumerPosition &pos, const SharedStorage<Cfg> &smem,
            const CUtensorMap &tmaD, u32 &amaxBits) {
  constexpr int kChunkCols = 128 / elementBytes(Cfg::Out);
  constexpr int kGroups = kChunkCols / 8; // 8-column groups of a chunk
  const int warp = pos.warpgroup * 4 + pos.warp;
  const int quad = pos.lane >> 2; // the row within 8, and its swizzle
  // Earlier stores may still read the buffers.
  if (pos.lane == 0)
    ptx::bulkWaitGroupRead<0>();
  ptx::syncWarp();
  int slot = 0; // stores issued by this epilogue
#pragma unroll
  for (int mm = 0; mm < Cfg::kWgM; ++mm) {
    const int band = rows.row[mm][0] - quad; // the warp's first row
    if (band >= m)
      break; // so are the warp's later bands
#pragma unroll
    for (int chunk = 0; chunk < Cfg::TileN / kChunkCols; ++chunk) {
      const int chunkCol = n0 + chunk * kChunkCols;
      if (chunkCol >= Cfg::N)
        break;
      if (slot >= Cfg::kStoreBuffers) {
        if (pos.lane == 0)
          ptx::bulkWaitGroupRead<Cfg::kStoreBuffers - 1>();
        ptx::syncWarp();
      }
      const u32 buffer =
          smem.staging(warp, Cfg::kStoreBuffers == 2 ? (slot & 1) : 0);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int j = chunk * kGroups + g;
        const int c = n0 + 8 * j + 2 * (pos.lane & 3);
        // Columns past N (in the tile's last chunk) are never stored.
        const ColumnInputs columns = tileColumns.get(j, pos.lane);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = rows.row[mm][h];
          const float a[2] = {acc[mm][4 * j + 2 * h],
                              acc[mm][4 * j + 2 * h + 1]};
          u32 bits[2];
          outputPair<Cfg>(args, a, rows.scale[mm][h], columns,
                          static_cast<long long>(r) * Cfg::N + c,
                          r < m && c < Cfg::N, true, bits, amaxBits);
          // Row quad + 8h of the buffer; its 16-byte units are swizzled
          // with the row's index mod 8 (quad).
          const u32 row = buffer + (quad + 8 * h) * 128;
          if constexpr (Cfg::Out == kF32) {
            const int unit = 2 * g + ((pos.lane & 3) >> 1);
            ptx::storeShared64(row + ((unit ^ quad) << 4) + (pos.lane & 1) * 8,
                               bits[0], bits[1]);
          } else {
            ptx::storeShared32(row + ((g ^ quad) << 4) + (pos.lane & 3) * 4,
                               bits[0] | (bits[1] << 16));
          }
        }
      }
      // The TMA unit reads the buffer through the async proxy.
      ptx::fenceProxyAsyncShared();
      ptx::syncWarp();
      if (pos.lane == 0) {
        ptx::tmaStore2d(tmaD, chunkCol, band, buffer);
        ptx::bulkCommitGroup();
      }
      ++slot;
    }
  }
}

/// The epilogue of one consumer thread for the tile at (m0, n0).
template <class Cfg>
__device__ __forceinline__ void
epilogue(const Args &args, int m, int m0, int n0, const Fragment<Cfg> &acc,
         const ConsumerPosition &pos, const SharedStorage<Cfg> &smem,
         const CUtensorMap &tmaD, const ConsumerFold<Cfg> &fold) {
  const TileColumns<Cfg> columns(args, n0, pos.lane);
  const RowInputs<Cfg> rows(args, m, m0, pos, fold);
  u32 amaxBits = 0;
  if constexpr (Cfg::kUsesTmaD)
    storeStaged<Cfg>(args, m, n0, acc, rows, columns, pos, smem, tmaD,
                     amaxBits);
  else
    storeDirect<Cfg>(args, m, n0, acc, rows, columns, pos, amaxBits);
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

} // namespace moss::gemm_kernel::detail
