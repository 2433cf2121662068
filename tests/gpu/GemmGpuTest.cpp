//===- GemmGpuTest.cpp - The FP8 GEMM kernel against the FP64 reference ---===//
//
// For every scheme combination x output type x epilogue option of the GEMM
// templates, on LLaMA-7B and odd shapes: quantize fresh random or
// heavy-tailed inputs with the host reference (moss::numerics::quantize),
// upload codes and scales, poison the output (0xFF bytes), run the GEMM
// through moss::GemmRunner (compiler, kernel cache, launch; the case's
// tiling or, for *_heuristic_* cases, the compiler's), and compare with
// the tensor-core model of each entry (numerics/TensorCoreModel.h) and with
// referenceGemm over the dequantized operands (plus bias and beta * C), in
// FP64. Cases with promoteK (the `*_promote128_*` ones) show what an
// earlier promotion buys for per-tensor operands.
//
// The limits are the accuracy contract of docs/NUMERICS-CONTRACT.md section
// 7: each entry is the tensor-core model's value to within its output
// rounding and a bound on the kernel's FP32 roundings; with u(P) =
// 2^-13 sqrt(P/32), P the K elements the tensor cores sum before a
// promotion to FP32, the relative Frobenius error of f32 output against
// FP64 is at most 4 u(P). Each case also reports how much of the typical
// allowance (numerics::gemmEntryAllowance) its entries use. The f16 MMA's
// cases (`*_f16mma_*`: exact products, FP32 sums; section 7.4) are held to
// the FP64 reference within numerics::f16MmaEntryAllowance, and f32 output
// to a relative Frobenius error of 1e-5 (docs/NUMERICS-CONTRACT.md 7.3).
// Every entry must be written (no poison / NaN left), amax must equal the
// largest stored magnitude, and a second launch must be bitwise identical.
// Large shapes compare a random 64 x 64 grid of entries (plus the first and
// last rows and columns) and check the whole output for poison.
//
// Suites: Small/* (M, N, K up to 1000 x 4096 x 4096, every combination) and
// Large/* (4096^3, 16384 x 11008 x 4096, the main schemes). Skips with the
// reason without a Hopper GPU or NVRTC. MOSS_TEST_SEED fixes the seed
// (printed per case); MOSS_CACHE_DIR moves the kernel cache;
// MOSS_GEMM_TEST_TIMEOUT (60) is the watchdog's limit per launch in seconds;
// MOSS_GEMM_TEST_HOST=1 checks the harness on the host, without a GPU.
//
//===----------------------------------------------------------------------===//

#include "GemmApiLaunch.h"
#include "GemmKernelParams.h"

#include "moss/Compiler/Compile.h"

#include "moss/Numerics/FP8.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Numerics/TensorCoreModel.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "llvm/Support/Parallel.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace moss;
using namespace moss::gemm_kernel;
using namespace moss::gemmtest;
using namespace moss::numerics;
using namespace moss::runtime;
using llvm::cantFail;
using llvm::consumeError;
using llvm::Error;
using llvm::Expected;
using llvm::toString;

namespace {

//===----------------------------------------------------------------------===//
// Host-side 16-bit formats (round to nearest even), for bias, C and output.
//===----------------------------------------------------------------------===//

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x = bitsOf(f);
  if (std::isnan(f))
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}
float bf16ToFloat(uint16_t h) {
  return floatOf(static_cast<uint32_t>(h) << 16);
}

uint16_t floatToF16(float f) {
  uint32_t x = bitsOf(f);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exponent = static_cast<int32_t>((x >> 23) & 0xFF);
  uint32_t mantissa = x & 0x7FFFFF;
  if (exponent == 0xFF)
    return static_cast<uint16_t>(sign | 0x7C00 | (mantissa ? 0x200 : 0));
  int32_t e = exponent - 127 + 15;
  if (e >= 31)
    return static_cast<uint16_t>(sign | 0x7C00);
  if (e <= 0) { // f16 subnormal (or zero): units of 2^-24
    if (e < -10)
      return static_cast<uint16_t>(sign);
    uint32_t m = mantissa | 0x800000;
    int shift = 14 - e;
    uint32_t r = m >> shift;
    uint32_t rest = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1)))
      ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
    ++r; // a carry moves into the exponent (up to infinity)
  return static_cast<uint16_t>(sign | r);
}
float f16ToFloat(uint16_t h) {
  int exponent = (h >> 10) & 0x1F;
  int mantissa = h & 0x3FF;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0)
    return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31)
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : sign * std::numeric_limits<float>::infinity();
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

/// Host encoding of a float array as an Out / Bias / Accum type.
std::vector<uint8_t> encodeAs(int kind, const std::vector<float> &values) {
  std::vector<uint8_t> out(values.size() * elementBytes(kind));
  for (size_t i = 0; i < values.size(); ++i) {
    if (kind == kF32) {
      std::memcpy(&out[4 * i], &values[i], 4);
    } else {
      uint16_t h =
          kind == kBF16 ? floatToBf16(values[i]) : floatToF16(values[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

/// Element i of an encoded array, as a float.
float decodeAt(int kind, const std::vector<uint8_t> &bytes, size_t i) {
  if (kind == kF32) {
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[2 * i], 2);
  return kind == kBF16 ? bf16ToFloat(h) : f16ToFloat(h);
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/// Input distributions.
/// ZeroBlocks: LlmActivation with a fifth of the 32-element blocks and row 3
/// all zeros (block scale 2^-127: E8M0 code 0, which the producer decodes
/// on a path of its own). The zero-block cases use it on both sides, so they
/// also put heavy tails on both operands.
enum class Dist { Gaussian, StudentT, LlmActivation, ZeroBlocks };

struct GemmCase {
  std::string name;
  Params params; ///< n, k static; m = -1 (dynamic) unless static-M
  int m = 0;     ///< rows at launch
  Dist distA = Dist::Gaussian;
  Dist distB = Dist::Gaussian;
  bool sampled = false; ///< compare a sample of entries (large shapes)
  /// Launched with the tiling the compiler picks (else with the tiling of
  /// `params`).
  bool heuristic = false;
  /// Block scales 4 bytes past a 16-byte boundary (the kernel's vector scale
  /// loads need 16; the API takes 4).
  bool scalesOffset4 = false;
  /// The first launch runs the kernel's quick-compile variant (what a
  /// tiered compile launches first), the second the full kernel: the two
  /// must agree bit for bit.
  bool quickFirst = false;
  /// The factor of C in the epilogue.
  float beta = 0.5f;
};

/// gtest prints parameters with this (instead of their bytes).
void PrintTo(const GemmCase &c, std::ostream *os) { *os << c.name; }

struct Scheme {
  const char *name;
  int elemA, scaleA, blockRowsA, blockA;
  bool globalRowA;
  int elemB, scaleB, blockRowsB, blockB;
  bool globalRowB;
};

/// The scheme combinations under test.
const Scheme kSchemes[] = {
    {"tensor_x_tensor", kE4M3, kPerTensor, 1, 0, false, kE4M3, kPerTensor, 1, 0,
     false},
    {"row_x_row", kE4M3, kPerRow, 1, 0, true, kE4M3, kPerRow, 1, 0, true},
    {"mossrow_x_tensor", kE4M3, kTwoLevel, 1, 32, true, kE4M3, kPerTensor, 1, 0,
     false},
    {"mosstensor_x_tensor", kE4M3, kTwoLevel, 1, 32, false, kE4M3, kPerTensor,
     1, 0, false},
    {"group_x_group128", kE4M3, kPerGroup, 1, 128, false, kE4M3, kPerGroup, 128,
     128, false},
    {"mossrow_x_mosstensor", kE4M3, kTwoLevel, 1, 32, true, kE4M3, kTwoLevel, 1,
     32, false},
    {"mx_x_mx", kE4M3, kMXFP8, 1, 32, false, kE4M3, kMXFP8, 1, 32, false},
    {"e5m2mossrow_x_tensor", kE5M2, kTwoLevel, 1, 32, true, kE4M3, kPerTensor,
     1, 0, false},
    {"tensor_x_e5m2tensor", kE4M3, kPerTensor, 1, 0, false, kE5M2, kPerTensor,
     1, 0, false},
    // B's factors alone: a column table.
    {"tensor_x_mosstensor", kE4M3, kPerTensor, 1, 0, false, kE4M3, kTwoLevel, 1,
     32, false},
};

const Scheme &schemeNamed(const std::string &name) {
  for (const Scheme &s : kSchemes)
    if (name == s.name)
      return s;
  std::abort();
}

/// Epilogue options: none, bias, beta * C, amax, in a few combinations.
struct Epilogue {
  const char *name;
  bool bias, accum, amax;
};

Params makeParams(const Scheme &s, int n, int k, int out, const Epilogue &e) {
  Params p;
  p.n = n;
  p.k = k;
  p.elemA = s.elemA;
  p.scaleA = s.scaleA;
  p.blockRowsA = s.blockRowsA;
  p.blockA = s.blockA;
  p.globalRowA = s.globalRowA;
  p.elemB = s.elemB;
  p.scaleB = s.scaleB;
  p.blockRowsB = s.blockRowsB;
  p.blockB = s.blockB;
  p.globalRowB = s.globalRowB;
  p.out = out;
  p.bias = e.bias ? out : kNone;
  p.accum = e.accum ? out : kNone;
  p.amax = e.amax;
  return withDefaultTiling(p);
}

std::string shapeName(int m, int n, int k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

std::vector<GemmCase> smallCases() {
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{1, 4096, 4096}, {129, 257, 96}, {1000, 3000, 2048}};
  const Epilogue plain = {"plain", false, false, false};
  const Epilogue all = {"bias_c_amax", true, true, true};
  const Epilogue biasAmax = {"bias_amax", true, false, true};
  const Epilogue accum = {"c", false, true, false};
  std::vector<GemmCase> cases;
  for (const Shape &shape : shapes) {
    for (const Scheme &s : kSchemes) {
      // Per-group 128 needs K % 128 == 0 (the quantizer rejects K = 96).
      if (s.scaleA == kPerGroup && shape.k % 128 != 0)
        continue;
      struct Combo {
        int out;
        Epilogue e;
      };
      const Combo combos[] = {{kBF16, plain},
                              {kF16, accum},
                              {kF32, plain},
                              {kF32, all},
                              {kBF16, biasAmax}};
      for (const Combo &c : combos) {
        GemmCase gc;
        gc.params = makeParams(s, shape.n, shape.k, c.out, c.e);
        gc.m = shape.m;
        // Heavy tails for A except where f16 could overflow.
        gc.distA = c.out == kF16        ? Dist::Gaussian
                   : (cases.size() % 2) ? Dist::LlmActivation
                                        : Dist::StudentT;
        gc.sampled = shape.m == 1000;
        gc.name = std::string(s.name) + "_" + typeName(c.out) + "_" + c.e.name +
                  "_" + shapeName(shape.m, shape.n, shape.k);
        cases.push_back(gc);
      }
    }
  }
  // 2-CTA clusters with TMA multicast: B shared (2x1) or A shared (1x2),
  // with odd tile counts (an edge tile of a cluster lies past M or N).
  struct ClusterCase {
    const char *scheme;
    int m, n, k, clusterM, clusterN, out;
    Epilogue e;
  };
  const ClusterCase clustered[] = {
      {"mossrow_x_tensor", 129, 257, 96, 2, 1, kF32, all},
      {"mossrow_x_tensor", 1000, 3000, 2048, 2, 1, kBF16, biasAmax},
      {"tensor_x_tensor", 129, 257, 96, 1, 2, kF32, all},
      {"tensor_x_tensor", 1, 4096, 4096, 2, 1, kBF16, plain},
      {"tensor_x_tensor", 1000, 3000, 2048, 1, 2, kF32, plain},
      {"group_x_group128", 1000, 3000, 2048, 2, 1, kF32, plain},
      {"mossrow_x_mosstensor", 129, 257, 96, 1, 2, kBF16, biasAmax},
  };
  for (const ClusterCase &c : clustered) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out, c.e);
    gc.params.clusterM = c.clusterM;
    gc.params.clusterN = c.clusterN;
    gc.m = c.m;
    gc.distA = Dist::LlmActivation;
    gc.sampled = c.m == 1000;
    gc.name = std::string(c.scheme) + "_" + typeName(c.out) + "_" + c.e.name +
              "_cluster" + std::to_string(c.clusterM) + "x" +
              std::to_string(c.clusterN) + "_" + shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // Bias in types other than the output's, C in f32 under 16-bit outputs
  // (the op takes C in the output's type or f32), and beta of 0, 1 and -1.
  struct MixedCase {
    const char *scheme;
    int m, n, k, out, bias, accum;
    float beta;
  };
  const MixedCase mixed[] = {
      {"tensor_x_tensor", 129, 257, 96, kBF16, kF32, kF32, 0.0f},
      {"tensor_x_tensor", 129, 264, 96, kF16, kBF16, kF16, 0.0f},
      {"mossrow_x_tensor", 129, 257, 96, kF32, kBF16, kF32, 1.0f},
      {"group_x_group128", 129, 257, 256, kF16, kF32, kF32, -1.0f},
      {"mossrow_x_mosstensor", 1000, 3000, 2048, kBF16, kF16, kF32, -1.0f},
      {"mx_x_mx", 129, 264, 96, kF32, kF16, kF32, 1.0f},
  };
  for (const MixedCase &c : mixed) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out,
                           {"mixed", true, true, true});
    gc.params.bias = c.bias;
    gc.params.accum = c.accum;
    gc.m = c.m;
    gc.beta = c.beta;
    gc.distA = c.out == kF16 ? Dist::Gaussian : Dist::LlmActivation;
    gc.sampled = c.m == 1000;
    gc.name = std::string(c.scheme) + "_" + typeName(c.out) + "_bias" +
              typeName(c.bias) + "_c" + typeName(c.accum) + "_beta" +
              (c.beta < 0 ? "minus" : "") +
              std::to_string(int(std::fabs(c.beta))) + "_" +
              shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // Other tilings (what moss-select-tiling picks for some of these GEMMs):
  // two m64 tiles per warpgroup, narrow and odd tile widths, short rings,
  // split-K and 64-row tiles.
  struct TilingCase {
    const char *scheme;
    int m, n, k, tileM, tileN, stages, out;
    Epilogue e;
    int splitK = 1;
    Dist distA = Dist::StudentT;
  };
  const TilingCase tilings[] = {
      {"tensor_x_tensor", 1000, 3000, 2048, 256, 192, 4, kF32, all},
      {"tensor_x_tensor", 129, 257, 96, 256, 192, 4, kBF16, biasAmax},
      {"mossrow_x_mosstensor", 1000, 3000, 2048, 128, 96, 7, kF32, plain},
      {"mossrow_x_tensor", 129, 257, 96, 128, 32, 2, kF32, all},
      // Narrower MOSS tiles (what the tuner picks for small M).
      {"mossrow_x_tensor", 1000, 3000, 2048, 128, 96, 7, kF32, all},
      {"mosstensor_x_tensor", 129, 257, 96, 128, 96, 7, kBF16, biasAmax},
      {"e5m2mossrow_x_tensor", 1000, 3000, 2048, 128, 64, 8, kBF16, plain},
      {"mx_x_mx", 1, 4096, 4096, 128, 32, 8, kBF16, plain},
      {"mossrow_x_tensor", 1000, 3000, 2048, 256, 64, 5, kF32, plain},
      {"group_x_group128", 1000, 3000, 2048, 256, 64, 5, kBF16, biasAmax},
      // One partial set (too wide for two); per-group B through a column
      // table (192 does not divide its 128-row blocks).
      {"mossrow_x_tensor", 1000, 3000, 2048, 128, 192, 5, kF32, all},
      {"mossrow_x_mosstensor", 129, 257, 96, 128, 160, 5, kBF16, biasAmax},
      {"group_x_group128", 1000, 3000, 2048, 128, 192, 5, kF32, all},
      {"group_x_group128", 129, 257, 256, 128, 96, 7, kBF16, biasAmax},
      // Per-128 promotion in groups of four stages: 11 stages end in a
      // group of three, 5 in a group of one.
      {"group_x_group128", 129, 257, 1408, 128, 128, 6, kF32, all},
      {"group_x_group128", 1000, 3000, 640, 128, 128, 6, kBF16, biasAmax},
      // M below a tile: A's TMA box stops at M rounded up to 8 rows, and
      // the smem rows past it hold stale data (several tiles per CTA here).
      {"mossrow_x_tensor", 37, 9000, 256, 128, 32, 4, kF32, all},
      {"tensor_x_tensor", 203, 3000, 512, 256, 64, 4, kBF16, biasAmax},
      {"group_x_group128", 5, 3000, 512, 128, 64, 4, kF32, all},
      // Split-K: slices of K summed in the runner's workspace by the slice
      // that finishes a tile last; every epilogue, slices of 256 to 1024 of
      // K, several units per CTA (1000 rows), one row.
      {"mossrow_x_tensor", 37, 4096, 4096, 128, 128, 6, kBF16, biasAmax, 4,
       Dist::LlmActivation},
      {"tensor_x_tensor", 129, 257, 512, 128, 64, 4, kF32, all, 2,
       Dist::LlmActivation},
      {"group_x_group128", 1000, 3000, 2048, 128, 128, 6, kF32, all, 4,
       Dist::LlmActivation},
      {"mossrow_x_mosstensor", 16, 3000, 2048, 128, 96, 7, kF16, accum, 8,
       Dist::Gaussian},
      {"mx_x_mx", 1, 4096, 1024, 128, 32, 8, kBF16, plain, 2,
       Dist::LlmActivation},
      // 64-row tiles: both consumer warpgroups on the same rows over
      // alternate K stages, summed the same way; odd stage counts (33, 17,
      // 3) make the warpgroups swap the lead from one unit to the next
      // (several units per CTA at 200 x 9000).
      {"mossrow_x_tensor", 37, 4096, 4096, 64, 64, 8, kBF16, biasAmax, 2,
       Dist::LlmActivation},
      {"mossrow_x_tensor", 64, 3000, 4224, 64, 32, 8, kF32, all, 1,
       Dist::LlmActivation},
      {"group_x_group128", 200, 9000, 2176, 64, 128, 6, kF32, all, 1,
       Dist::LlmActivation},
      {"tensor_x_tensor", 1, 4096, 1024, 64, 64, 8, kF32, plain, 4,
       Dist::LlmActivation},
      {"mx_x_mx", 16, 257, 384, 64, 32, 4, kF16, accum, 1, Dist::Gaussian},
      {"mossrow_x_mosstensor", 5, 3000, 2176, 64, 96, 7, kBF16, biasAmax, 1,
       Dist::LlmActivation},
  };
  for (const TilingCase &c : tilings) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out, c.e);
    gc.params.tileM = c.tileM;
    gc.params.tileN = c.tileN;
    gc.params.stages = c.stages;
    gc.params.splitK = c.splitK;
    gc.m = c.m;
    gc.distA = c.distA;
    gc.sampled = c.m == 1000;
    gc.name = std::string(c.scheme) + "_" + typeName(c.out) + "_" + c.e.name +
              "_tile" + std::to_string(c.tileM) + "x" +
              std::to_string(c.tileN) + "x" + std::to_string(c.stages) +
              (c.splitK > 1 ? "_split" + std::to_string(c.splitK) : "") + "_" +
              shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // Zero blocks in both operands (E8M0 code 0 in some rows and columns of
  // every warp's table rows, and a zero row).
  struct ZeroCase {
    const char *scheme;
    int m, n, k, out;
    Epilogue e;
  };
  const ZeroCase zeroed[] = {
      {"mossrow_x_tensor", 129, 257, 96, kF32, all},
      {"mossrow_x_tensor", 1000, 3000, 2048, kBF16, plain},
      {"mossrow_x_mosstensor", 129, 257, 96, kBF16, biasAmax},
      {"mx_x_mx", 1000, 3000, 2048, kF32, plain},
  };
  for (const ZeroCase &c : zeroed) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out, c.e);
    gc.m = c.m;
    gc.distA = gc.distB = Dist::ZeroBlocks;
    gc.sampled = c.m == 1000;
    gc.name = std::string(c.scheme) + "_" + typeName(c.out) + "_" + c.e.name +
              "_zero_blocks_" + shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // A statically specialized M.
  GemmCase fixed;
  fixed.params =
      makeParams(schemeNamed("mossrow_x_tensor"), 3000, 2048, kBF16, all);
  fixed.params.m = 1000;
  fixed.m = 1000;
  fixed.distA = Dist::LlmActivation;
  fixed.sampled = true;
  fixed.name = "mossrow_x_tensor_bf16_bias_c_amax_staticM_1000x3000x2048";
  cases.push_back(fixed);

  // Block scales not 16-byte aligned: the kernel's scalar scale loads.
  for (const char *scheme :
       {"mossrow_x_tensor", "group_x_group128", "tensor_x_mosstensor"}) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(scheme), 3000, 2048, kF32, all);
    gc.params = withDefaultTiling(gc.params);
    gc.m = 1000;
    gc.distA = Dist::LlmActivation;
    gc.sampled = true;
    gc.scalesOffset4 = true;
    gc.name = std::string(scheme) + "_f32_scales_offset4_1000x3000x2048";
    cases.push_back(gc);
  }

  // The quick-compile variant (a tiered compile's first kernel: smaller
  // tiles, shorter promotion groups) launched first, the full kernel second:
  // bit for bit the same. Per 32 and per 128, factors on both sides, split
  // K, and without promotion on 256-row and 256-column tiles.
  struct QuickCase {
    const char *scheme;
    int m, n, k, out, splitK;
    Epilogue e;
    int tileM = 0, tileN = 0, stages = 0; ///< 0: the default tiling's
    bool f16Mma = false;
  };
  const QuickCase quickFirst[] = {
      {"mossrow_x_tensor", 129, 257, 1024, kF32, 1, all},
      {"mossrow_x_tensor", 1000, 3000, 2048, kBF16, 1, biasAmax},
      {"group_x_group128", 1000, 3000, 2048, kF32, 1, plain},
      {"e5m2mossrow_x_tensor", 129, 257, 1024, kBF16, 1, biasAmax},
      {"mx_x_mx", 129, 257, 1024, kF16, 1, accum},
      {"mossrow_x_mosstensor", 129, 257, 1024, kF32, 1, all},
      {"mossrow_x_tensor", 16, 4096, 4096, kF32, 2, plain},
      {"tensor_x_tensor", 1000, 3000, 2048, kF32, 1, all, 128, 256, 4},
      {"row_x_row", 129, 257, 1024, kBF16, 1, biasAmax, 256, 128, 4},
      {"mossrow_x_tensor", 1000, 3000, 2048, kF32, 1, all, 0, 0, 0, true},
      {"group_x_group128", 129, 257, 1024, kF32, 1, plain, 0, 0, 0, true},
  };
  for (const QuickCase &c : quickFirst) {
    GemmCase gc;
    Params p = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out, c.e);
    p.f16Mma = c.f16Mma;
    gc.params = withDefaultTiling(p);
    gc.params.splitK = c.splitK;
    if (c.tileM > 0) {
      gc.params.tileM = c.tileM;
      gc.params.tileN = c.tileN;
      gc.params.stages = c.stages;
    }
    gc.m = c.m;
    gc.distA = Dist::LlmActivation;
    gc.sampled = c.m == 1000;
    gc.quickFirst = true;
    gc.name = std::string(c.scheme) + "_" + typeName(c.out) + "_" + c.e.name +
              (c.splitK > 1 ? "_split" + std::to_string(c.splitK) : "") +
              (c.f16Mma ? "_f16mma" : "") + "_quick_first_" +
              shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // The f16 MMA (f16Mma): every scheme with f32 output, within 1e-5;
  // 16-bit outputs, clusters, split K, a column table (per-group B over
  // 96-wide tiles), the tail of K, zero blocks, and the runtime's tilings.
  for (const Shape &shape : shapes)
    for (const Scheme &s : kSchemes) {
      if (s.scaleA == kPerGroup && shape.k % 128 != 0)
        continue;
      GemmCase gc;
      Params p = makeParams(s, shape.n, shape.k, kF32, all);
      p.f16Mma = true;
      gc.params = withDefaultTiling(p);
      gc.m = shape.m;
      gc.distA = (cases.size() % 2) ? Dist::LlmActivation : Dist::StudentT;
      gc.sampled = shape.m == 1000;
      gc.name = std::string(s.name) + "_f32_" + all.name + "_f16mma_" +
                shapeName(shape.m, shape.n, shape.k);
      cases.push_back(gc);
    }
  struct F16MmaCase {
    const char *scheme;
    int m, n, k, out;
    Epilogue e;
    int tileN = 128, stages = 4, clusterM = 1, clusterN = 1, splitK = 1;
    Dist dist = Dist::LlmActivation;
    bool heuristic = false;
  };
  const F16MmaCase f16Mma[] = {
      {"mossrow_x_tensor", 1000, 3000, 2048, kBF16, biasAmax},
      {"e5m2mossrow_x_tensor", 129, 257, 96, kF16, accum, 128, 4, 1, 1, 1,
       Dist::Gaussian},
      {"mossrow_x_tensor", 1000, 3000, 2048, kF32, all, 128, 4, 2, 1},
      {"tensor_x_tensor", 129, 257, 96, kF32, all, 128, 4, 1, 2},
      {"mossrow_x_tensor", 37, 4096, 4096, kF32, all, 128, 4, 1, 1, 4},
      {"group_x_group128", 1000, 3000, 2048, kF32, all, 96, 4},
      {"mossrow_x_mosstensor", 129, 257, 1056, kF32, all, 64, 6},
      {"tensor_x_e5m2tensor", 1000, 3000, 2048, kF32, plain, 128, 2},
      {"mossrow_x_tensor", 129, 257, 96, kF32, all, 128, 4, 1, 1, 1,
       Dist::ZeroBlocks},
      {"mossrow_x_tensor", 1, 4096, 4096, kF32, all, 0, 0, 1, 1, 1,
       Dist::LlmActivation, true},
      {"group_x_group128", 1000, 3000, 2048, kF32, all, 0, 0, 1, 1, 1,
       Dist::LlmActivation, true},
      {"tensor_x_tensor", 129, 257, 96, kF32, plain, 0, 0, 1, 1, 1,
       Dist::StudentT, true},
  };
  for (const F16MmaCase &c : f16Mma) {
    GemmCase gc;
    Params p = makeParams(schemeNamed(c.scheme), c.n, c.k, c.out, c.e);
    p.f16Mma = true;
    p = withDefaultTiling(p);
    if (c.tileN > 0) {
      p.tileN = c.tileN;
      p.stages = c.stages;
    }
    p.clusterM = c.clusterM;
    p.clusterN = c.clusterN;
    p.splitK = c.splitK;
    gc.params = p;
    gc.m = c.m;
    gc.distA = c.dist;
    if (c.dist == Dist::ZeroBlocks)
      gc.distB = c.dist;
    gc.sampled = c.m == 1000;
    gc.heuristic = c.heuristic;
    gc.name =
        std::string(c.scheme) + "_" + typeName(c.out) + "_" + c.e.name +
        "_f16mma" +
        (c.heuristic ? std::string("_heuristic")
                     : "_tile128x" + std::to_string(c.tileN) + "x" +
                           std::to_string(c.stages)) +
        (c.clusterM * c.clusterN > 1 ? "_cluster" + std::to_string(c.clusterM) +
                                           "x" + std::to_string(c.clusterN)
                                     : "") +
        (c.splitK > 1 ? "_split" + std::to_string(c.splitK) : "") +
        (c.dist == Dist::ZeroBlocks ? "_zero_blocks" : "") + "_" +
        shapeName(c.m, c.n, c.k);
    cases.push_back(gc);
  }

  // The product path: the tiling moss-select-tiling picks.
  for (const char *scheme :
       {"mossrow_x_tensor", "tensor_x_tensor", "group_x_group128",
        "mossrow_x_mosstensor", "row_x_row"})
    for (const Shape &shape : shapes) {
      if (shape.k % 128 != 0 && std::string(scheme) == "group_x_group128")
        continue;
      bool f32 = shape.m != 1000;
      GemmCase gc;
      gc.params = makeParams(schemeNamed(scheme), shape.n, shape.k,
                             f32 ? kF32 : kBF16, f32 ? all : biasAmax);
      gc.m = shape.m;
      gc.distA = Dist::LlmActivation;
      gc.sampled = shape.m == 1000;
      gc.heuristic = true;
      gc.name = std::string(scheme) + "_" + typeName(gc.params.out) + "_" +
                (f32 ? all.name : biasAmax.name) + "_heuristic_" +
                shapeName(shape.m, shape.n, shape.k);
      cases.push_back(gc);
    }
  return cases;
}

std::vector<GemmCase> largeCases() {
  const Epilogue plain = {"plain", false, false, false};
  const Epilogue all = {"bias_c_amax", true, true, true};
  std::vector<GemmCase> cases;
  auto add = [&](const char *scheme, int m, int n, int k, int out,
                 const Epilogue &e, Dist dist, int promote = 0,
                 int clusterM = 1) {
    GemmCase gc;
    gc.params = makeParams(schemeNamed(scheme), n, k, out, e);
    gc.params.forcePromoteK = promote;
    if (promote)
      gc.params = withDefaultTiling(gc.params);
    gc.params.clusterM = clusterM;
    gc.m = m;
    gc.distA = dist;
    gc.sampled = true;
    gc.name = std::string(scheme) + "_" + typeName(out) + "_" + e.name +
              (promote ? "_promote" + std::to_string(promote) : "") +
              (clusterM > 1 ? "_cluster2x1" : "") + "_" + shapeName(m, n, k);
    cases.push_back(gc);
  };
  for (const char *scheme : {"tensor_x_tensor", "row_x_row", "mossrow_x_tensor",
                             "group_x_group128", "mossrow_x_mosstensor"})
    add(scheme, 4096, 4096, 4096, kBF16, plain, Dist::LlmActivation);
  add("mossrow_x_tensor", 4096, 4096, 4096, kF32, all, Dist::LlmActivation);
  add("tensor_x_tensor", 4096, 4096, 4096, kF32, plain, Dist::StudentT);
  add("tensor_x_tensor", 4096, 4096, 4096, kF32, plain, Dist::StudentT, 128);
  // The f16 MMA with the runtime's tiling, within 1e-5.
  for (const char *scheme : {"mossrow_x_tensor", "group_x_group128"}) {
    add(scheme, 4096, 4096, 4096, kF32, all, Dist::LlmActivation);
    GemmCase &gc = cases.back();
    gc.params.f16Mma = true;
    gc.params = withDefaultTiling(gc.params);
    gc.heuristic = true;
    gc.name = std::string(scheme) + "_f32_bias_c_amax_f16mma_heuristic_" +
              shapeName(4096, 4096, 4096);
  }
  add("mosstensor_x_tensor", 4096, 4096, 4096, kF32, plain, Dist::StudentT);
  for (const char *scheme :
       {"tensor_x_tensor", "mossrow_x_tensor", "group_x_group128"}) {
    add(scheme, 4096, 4096, 4096, kBF16, plain, Dist::LlmActivation, 0, 2);
    add(scheme, 16384, 11008, 4096, kBF16, plain, Dist::LlmActivation);
  }
  add("mossrow_x_tensor", 16384, 11008, 4096, kBF16, plain, Dist::LlmActivation,
      0, 2);
  for (const char *scheme :
       {"tensor_x_tensor", "mossrow_x_tensor", "group_x_group128"}) {
    add(scheme, 16384, 11008, 4096, kBF16, plain, Dist::LlmActivation);
    cases.back().heuristic = true;
    cases.back().name = std::string(scheme) + "_bf16_plain_heuristic_" +
                        shapeName(16384, 11008, 4096);
  }
  // A narrower MOSS tile on a large shape.
  add("mossrow_x_tensor", 4096, 4096, 4096, kF32, plain, Dist::LlmActivation);
  cases.back().params.tileN = 96;
  cases.back().params.stages = 7;
  cases.back().name = "mossrow_x_tensor_f32_plain_tile128x96x7_4096x4096x4096";
  // The heuristic's per-tensor tile (two m64 tiles per warpgroup).
  add("tensor_x_tensor", 4096, 4096, 4096, kBF16, plain, Dist::LlmActivation);
  cases.back().params.tileM = 256;
  cases.back().params.tileN = 192;
  cases.back().params.stages = 4;
  cases.back().name = "tensor_x_tensor_bf16_plain_tile256x192x4_4096x4096x4096";
  return cases;
}

//===----------------------------------------------------------------------===//
// Device helpers
//===----------------------------------------------------------------------===//

struct GpuState {
  std::optional<Device> device;
  const DriverApi *api = nullptr;
  std::string skipReason;
  CUstream stream = nullptr;
};

GpuState &gpu() {
  static GpuState state = [] {
    GpuState s;
    Expected<Device> opened = Device::open(0);
    if (!opened) {
      s.skipReason = "needs a CUDA device: " + toString(opened.takeError());
      return s;
    }
    if (opened->getComputeCapabilityMajor() != 9) {
      s.skipReason =
          "needs a Hopper GPU (sm_90a); device 0 is " + opened->getArch().str();
      return s;
    }
    if (!isNvrtcAvailable()) {
      s.skipReason = "needs NVRTC: " + toString(getNvrtcVersion().takeError());
      return s;
    }
    s.device.emplace(std::move(*opened));
    if (Error err = s.device->makeCurrent()) {
      s.skipReason = toString(std::move(err));
      s.device.reset();
      return s;
    }
    s.api = &cantFail(getDriverApi());
    if (s.api->streamCreate(&s.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      s.skipReason = "cuStreamCreate failed";
    std::printf("[ device ] %s, %s, %d SMs\n",
                s.device->getName().str().c_str(),
                s.device->getArch().str().c_str(), s.device->getSmCount());
    return s;
  }();
  return state;
}

/// Ends the process (exit code 3, with the case's name) when a kernel runs
/// longer than the deadline: a hung kernel would otherwise block the run in
/// cuStreamSynchronize forever. MOSS_GEMM_TEST_TIMEOUT sets the seconds (60).
class Watchdog {
public:
  static Watchdog &get() {
    static Watchdog watchdog;
    return watchdog;
  }
  void arm(const std::string &what) {
    std::lock_guard<std::mutex> lock(mutex);
    current = what;
    deadline = std::chrono::steady_clock::now() + timeout;
    armed = true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex);
    armed = false;
  }

private:
  Watchdog() {
    if (const char *s = std::getenv("MOSS_GEMM_TEST_TIMEOUT"))
      timeout = std::chrono::seconds(std::atoi(s));
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::lock_guard<std::mutex> lock(mutex);
        if (armed && std::chrono::steady_clock::now() > deadline) {
          std::fprintf(stderr,
                       "\n[ WATCHDOG ] %s did not finish within %lld s: the "
                       "kernel hangs (deadlock?). Exiting.\n",
                       current.c_str(),
                       static_cast<long long>(timeout.count()));
          std::fflush(stderr);
          std::fflush(stdout);
          std::_Exit(3);
        }
      }
    }).detach();
  }
  std::mutex mutex;
  std::string current;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::seconds timeout{60};
  bool armed = false;
};

/// Device memory, freed on destruction.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    if (bytes) {
      EXPECT_EQ(gpu().api->memAlloc(&pointer, bytes), CUDA_SUCCESS);
    }
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&o) : pointer(o.pointer), bytes(o.bytes) {
    o.pointer = 0;
  }
  DeviceBuffer &operator=(DeviceBuffer &&o) {
    std::swap(pointer, o.pointer);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceBuffer() {
    if (pointer)
      gpu().api->memFree(pointer);
  }
  template <typename T> static DeviceBuffer from(const std::vector<T> &v) {
    DeviceBuffer b(v.size() * sizeof(T));
    if (!v.empty()) {
      EXPECT_EQ(gpu().api->memcpyHtoD(b.pointer, v.data(), b.bytes),
                CUDA_SUCCESS);
    }
    return b;
  }
  void *get() const { return reinterpret_cast<void *>(pointer); }
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
};

//===----------------------------------------------------------------------===//
// Host data (generated once per shape and distribution, quantized once per
// scheme) and the reference
//===----------------------------------------------------------------------===//

uint64_t baseSeed() {
  static uint64_t seed = [] {
    if (const char *s = std::getenv("MOSS_TEST_SEED"))
      return static_cast<uint64_t>(std::strtoull(s, nullptr, 0));
    return static_cast<uint64_t>(std::random_device()()) << 32 |
           std::random_device()();
  }();
  return seed;
}

std::vector<float> sample(Dist dist, int rows, int cols, uint64_t seed,
                          float scale) {
  std::vector<float> x;
  switch (dist) {
  case Dist::Gaussian:
    x = gaussianSample(rows, cols, seed);
    break;
  case Dist::StudentT:
    x = studentTSample(rows, cols, 3.0, seed);
    break;
  case Dist::LlmActivation:
    x = llmActivationSample(rows, cols, seed);
    break;
  case Dist::ZeroBlocks:
    x = llmActivationSample(rows, cols, seed);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        if (r == 3 || (r * 7 + c / 32) % 5 == 0)
          x[static_cast<size_t>(r) * cols + c] = 0.0f;
    break;
  }
  if (scale != 1.0f)
    for (float &v : x)
      v *= scale;
  return x;
}

/// The tiling a case launches with: none (the heuristic's) or its own.
std::optional<compiler::TileConfig> tilingOf(const GemmCase &gc) {
  if (gc.heuristic)
    return std::nullopt;
  return tilingOfParams(gc.params);
}

/// Quantized operands, cached by (shape, distribution, seed, scheme).
struct Operand {
  std::shared_ptr<const QuantizedTensor> q;
};

std::shared_ptr<const QuantizedTensor>
quantizedOperand(Dist dist, int rows, int cols, uint64_t seed, float scale,
                 const QuantizeOptions &options) {
  static std::map<std::string, std::shared_ptr<const std::vector<float>>>
      inputs;
  static std::map<std::string, std::shared_ptr<const QuantizedTensor>> done;
  std::string inputKey = std::to_string(static_cast<int>(dist)) + ":" +
                         std::to_string(rows) + "x" + std::to_string(cols) +
                         ":" + std::to_string(seed) + ":" +
                         std::to_string(scale);
  std::string key = inputKey + ":" + options.scheme.str() + ":" +
                    std::to_string(static_cast<int>(options.format));
  if (auto it = done.find(key); it != done.end())
    return it->second;
  // Keep the cache small: large tensors are big.
  if (done.size() > 16)
    done.clear();
  if (inputs.size() > 4)
    inputs.clear();
  auto &x = inputs[inputKey];
  if (!x)
    x = std::make_shared<const std::vector<float>>(
        sample(dist, rows, cols, seed, scale));
  Expected<QuantizedTensor> q = quantize(*x, rows, cols, options);
  if (!q) {
    ADD_FAILURE() << toString(q.takeError());
    return nullptr;
  }
  auto result = std::make_shared<const QuantizedTensor>(std::move(*q));
  done[key] = result;
  return result;
}

/// The rows `rows` of q as a quantized tensor of their own (per-group NxN
/// scales become 1xB scales with the same values), for dequantize().
QuantizedTensor selectRows(const QuantizedTensor &q,
                           const std::vector<int64_t> &rows) {
  QuantizedTensor s;
  s.scheme = q.scheme;
  s.format = q.format;
  s.rows = static_cast<int64_t>(rows.size());
  s.cols = q.cols;
  s.codes.resize(rows.size() * q.cols);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(&s.codes[i * q.cols], &q.codes[rows[i] * q.cols], q.cols);
  if (q.scheme.hasLocalScales()) {
    const int64_t blockRows = q.scheme.blockRows;
    s.scheme.blockRows = 1;
    s.localRows = s.rows;
    s.localCols = q.localCols;
    for (int64_t r : rows) {
      int64_t lr = r / blockRows;
      for (int64_t j = 0; j < q.localCols; ++j) {
        if (q.scheme.localScalesAreE8M0())
          s.localE8M0.push_back(q.localE8M0[lr * q.localCols + j]);
        else
          s.localF32.push_back(q.localF32[lr * q.localCols + j]);
      }
    }
  }
  if (q.scheme.globalPerRow())
    for (int64_t r : rows)
      s.global.push_back(q.global[r]);
  else
    s.global = q.global;
  return s;
}

std::vector<int64_t> pickIndices(int64_t count, int64_t want,
                                 std::mt19937_64 &rng) {
  std::vector<int64_t> out;
  if (count <= want) {
    for (int64_t i = 0; i < count; ++i)
      out.push_back(i);
    return out;
  }
  out.push_back(0);
  out.push_back(count - 1);
  while (static_cast<int64_t>(out.size()) < want)
    out.push_back(static_cast<int64_t>(rng() % count));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The epilogue's addends of entry (row, col): bias and beta * C.
struct EntryAddends {
  double bias = 0, betaC = 0;
};

EntryAddends addendsOf(const Params &p, const std::vector<float> &bias,
                       const std::vector<float> &accum, float beta, int64_t row,
                       int64_t col) {
  EntryAddends e;
  if (p.bias != kNone)
    e.bias = bias[col];
  if (p.accum != kNone)
    e.betaC = static_cast<double>(beta) * accum[row * p.n + col];
  return e;
}

/// The tensor-core model of every (rows[i], cols[j]), row-major, for the
/// kernel tiled by `tiling`, on all cores (a few seconds of one core on the
/// largest cases).
std::vector<ModelledGemmEntry>
modelEntries(const Params &p, const compiler::TileConfig &tiling,
             const QuantizedTensor &qa, const QuantizedTensor &qb,
             const std::vector<float> &bias, const std::vector<float> &accum,
             float beta, const std::vector<int64_t> &rows,
             const std::vector<int64_t> &cols) {
  const MmaSchedule schedule =
      compiler::getMmaSchedule(specOf(p, beta), tiling);
  std::vector<ModelledGemmEntry> out(rows.size() * cols.size());
  llvm::parallelFor(0, rows.size(), [&](size_t i) {
    for (size_t j = 0; j < cols.size(); ++j) {
      EntryAddends e = addendsOf(p, bias, accum, beta, rows[i], cols[j]);
      out[i * cols.size() + j] =
          modelGemmEntry(qa, rows[i], qb, cols[j], schedule, e.bias, e.betaC);
    }
  });
  return out;
}

//===----------------------------------------------------------------------===//
// The test
//===----------------------------------------------------------------------===//

/// What a run produced.
struct RunResult {
  std::vector<uint8_t> first, second; ///< two launches' outputs
  float amax = 0;                     ///< after the first launch
  float milliseconds = 0;             ///< the second launch
  double compileSeconds = 0;
  compiler::TileConfig tiling; ///< the kernel's
};

/// How the host reference quantizes operand `side` ('A' or 'B') of `p`.
QuantizeOptions operandOptions(const Params &p, char side) {
  const bool a = side == 'A';
  return {a ? schemeOf(p.scaleA, p.blockRowsA, p.blockA, p.globalRowA)
            : schemeOf(p.scaleB, p.blockRowsB, p.blockB, p.globalRowB),
          (a ? p.elemA : p.elemB) == kE5M2 ? Fp8Format::E5M2
                                           : Fp8Format::E4M3,
          false};
}

/// Uploads the operands, compiles and launches the kernel twice (output
/// poisoned with 0xFF bytes before each launch) and downloads the outputs.
void runOnDevice(const GemmCase &gc, const QuantizedTensor *qa,
                 const QuantizedTensor *qb, const std::vector<float> &bias,
                 const std::vector<float> &accum, float beta, RunResult &run) {
  const Params &p = gc.params;
  const int m = gc.m, n = p.n;
  const DriverApi &api = *gpu().api;
  // --- device buffers -----------------------------------------------------
  DeviceBuffer codesA = DeviceBuffer::from(qa->codes);
  DeviceBuffer codesB = DeviceBuffer::from(qb->codes);
  // Local scales as bytes, 4 bytes in when the case asks for it.
  const size_t scaleOffset = gc.scalesOffset4 ? 4 : 0;
  auto localScales = [&](const QuantizedTensor &q) {
    std::vector<uint8_t> bytes(scaleOffset, 0);
    if (q.scheme.localScalesAreE8M0())
      bytes.insert(bytes.end(), q.localE8M0.begin(), q.localE8M0.end());
    else
      bytes.insert(bytes.end(),
                   reinterpret_cast<const uint8_t *>(q.localF32.data()),
                   reinterpret_cast<const uint8_t *>(q.localF32.data() +
                                                     q.localF32.size()));
    return DeviceBuffer::from(bytes);
  };
  DeviceBuffer localA = localScales(*qa);
  DeviceBuffer localB = localScales(*qb);
  DeviceBuffer globalA = DeviceBuffer::from(qa->global);
  DeviceBuffer globalB = DeviceBuffer::from(qb->global);
  std::vector<uint8_t> biasBytes =
      p.bias != kNone ? encodeAs(p.bias, bias) : std::vector<uint8_t>();
  std::vector<uint8_t> accumBytes =
      p.accum != kNone ? encodeAs(p.accum, accum) : std::vector<uint8_t>();
  DeviceBuffer biasBuffer = DeviceBuffer::from(biasBytes);
  DeviceBuffer accumBuffer = DeviceBuffer::from(accumBytes);
  const size_t outBytes = static_cast<size_t>(m) * n * elementBytes(p.out);
  DeviceBuffer out(outBytes);
  DeviceBuffer amax(sizeof(float));

  // --- compile, launch (twice: the second result must be identical) ------
  // Through moss::GemmRunner: the product path (compiler, cache, launch).
  const compiler::GemmSpec spec = specOf(p, beta);
  const std::optional<compiler::TileConfig> tiling = tilingOf(gc);
  ApiBuffers buffers;
  buffers.aCodes = codesA.pointer;
  buffers.aLocal =
      qa->scheme.hasLocalScales() ? localA.pointer + scaleOffset : 0;
  buffers.aLocalCount =
      qa->scheme.hasLocalScales() ? int64_t(qa->localRows * qa->localCols) : 0;
  buffers.aGlobal = qa->global.empty() ? 0 : globalA.pointer;
  buffers.aGlobalCount = int64_t(qa->global.size());
  buffers.bCodes = codesB.pointer;
  buffers.bLocal =
      qb->scheme.hasLocalScales() ? localB.pointer + scaleOffset : 0;
  buffers.bLocalCount =
      qb->scheme.hasLocalScales() ? int64_t(qb->localRows * qb->localCols) : 0;
  buffers.bGlobal = qb->global.empty() ? 0 : globalB.pointer;
  buffers.bGlobalCount = int64_t(qb->global.size());
  buffers.d = out.pointer;
  buffers.bias = p.bias != kNone ? biasBuffer.pointer : 0;
  buffers.c = p.accum != kNone ? accumBuffer.pointer : 0;
  buffers.amax = p.amax ? amax.pointer : 0;
  auto tc0 = std::chrono::steady_clock::now();
  for (bool quick : {gc.quickFirst, false}) {
    std::string description;
    Error prepared =
        prepareThroughApi(spec, m, tiling, quick, description, run.tiling);
    ASSERT_FALSE(bool(prepared)) << toString(std::move(prepared));
    std::printf("         kernel %s%s\n", description.c_str(),
                quick ? " (quick-compile variant, first launch)" : "");
    if (!gc.quickFirst)
      break;
  }
  auto tc1 = std::chrono::steady_clock::now();
  run.compileSeconds = std::chrono::duration<double>(tc1 - tc0).count();

  run.first.resize(outBytes);
  run.second.resize(outBytes);
  float &milliseconds = run.milliseconds;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_EQ(api.memsetD8Async(out.pointer, 0xFF, outBytes, gpu().stream),
              CUDA_SUCCESS);
    ASSERT_EQ(api.memsetD8Async(amax.pointer, 0, sizeof(float), gpu().stream),
              CUDA_SUCCESS);
    CUevent start, stop;
    ASSERT_EQ(api.eventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    ASSERT_EQ(api.eventCreate(&stop, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    ASSERT_EQ(api.eventRecord(start, gpu().stream), CUDA_SUCCESS);
    struct Armed {
      Armed(const std::string &name) { Watchdog::get().arm(name); }
      ~Armed() { Watchdog::get().disarm(); }
    } armed(gc.name);
    Error launched = runThroughApi(spec, m, tiling, gc.quickFirst && pass == 0,
                                   buffers, gpu().stream);
    ASSERT_FALSE(bool(launched)) << toString(std::move(launched));
    ASSERT_EQ(api.eventRecord(stop, gpu().stream), CUDA_SUCCESS);
    CUresult synced = api.streamSynchronize(gpu().stream);
    ASSERT_EQ(synced, CUDA_SUCCESS)
        << toString(makeCudaError(synced, "the GEMM kernel"));
    ASSERT_EQ(api.eventElapsedTime(&milliseconds, start, stop), CUDA_SUCCESS);
    api.eventDestroy(start);
    api.eventDestroy(stop);
    ASSERT_EQ(api.memcpyDtoH((pass == 0 ? run.first : run.second).data(),
                             out.pointer, outBytes),
              CUDA_SUCCESS);
    if (pass == 0 && p.amax) {
      ASSERT_EQ(api.memcpyDtoH(&run.amax, amax.pointer, sizeof(float)),
                CUDA_SUCCESS);
    }
  }
}

/// MOSS_GEMM_TEST_HOST=1: checks this harness without a GPU. The "kernel"
/// is, for the compared entries, the tensor-core model's result (for the
/// tiling the runtime would plan on an H200) rounded to FP32 and the Out
/// type, zeros elsewhere, so every check must pass. Large/* is skipped (host
/// time).
bool hostSelfCheck() {
  const char *v = std::getenv("MOSS_GEMM_TEST_HOST");
  return v && *v && std::string(v) != "0";
}

void runOnHost(const GemmCase &gc, const QuantizedTensor *qa,
               const QuantizedTensor *qb, const std::vector<float> &bias,
               const std::vector<float> &accum, float beta,
               const std::vector<int64_t> &rows,
               const std::vector<int64_t> &cols, RunResult &run) {
  const Params &p = gc.params;
  const int n = p.n;
  std::optional<compiler::TileConfig> tiling = tilingOf(gc);
  if (!tiling) {
    Expected<compiler::TileConfig> planned = compiler::selectTilingForLaunch(
        specOf(p, beta), gc.m, compiler::TargetInfo());
    ASSERT_TRUE(bool(planned)) << toString(planned.takeError());
    tiling = *planned;
  }
  run.tiling = *tiling;
  // With the f16 MMA, the FP64 reference (a kernel without error).
  std::vector<double> values;
  if (p.f16Mma) {
    values = referenceGemm(dequantize(selectRows(*qa, rows)),
                           dequantize(selectRows(*qb, cols)),
                           static_cast<int64_t>(rows.size()),
                           static_cast<int64_t>(cols.size()), p.k);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < cols.size(); ++j) {
        EntryAddends e = addendsOf(p, bias, accum, beta, rows[i], cols[j]);
        values[i * cols.size() + j] += e.bias + e.betaC;
      }
  } else {
    for (const ModelledGemmEntry &entry :
         modelEntries(p, run.tiling, *qa, *qb, bias, accum, beta, rows, cols))
      values.push_back(entry.value);
  }
  std::vector<float> out(static_cast<size_t>(gc.m) * n, 0.0f);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j)
      out[rows[i] * n + cols[j]] =
          static_cast<float>(values[i * cols.size() + j]);
  run.first = encodeAs(p.out, out);
  run.second = run.first;
  float largest = 0;
  for (size_t i = 0; i < out.size(); ++i)
    largest = std::max(largest, std::fabs(decodeAt(p.out, run.first, i)));
  run.amax = p.amax ? largest : 0.0f;
}

/// Compiles the kernels of the selected cases (the --gtest_filter), many
/// at a time, into the process's kernel cache before the first case runs.
void precompileSelected() {
  std::map<std::string, GemmCase> byName;
  for (const GemmCase &c : smallCases())
    byName["MatchesFp64Reference/" + c.name] = c;
  for (const GemmCase &c : largeCases())
    byName["MatchesFp64Reference/" + c.name] = c;
  std::vector<GemmCase> selected;
  const ::testing::UnitTest &unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite &suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo &info = *suite.GetTestInfo(j);
      auto it = byName.find(info.name());
      if (info.should_run() && it != byName.end())
        selected.push_back(it->second);
    }
  }
  CompileOptions options;
  options.arch = gpu().device->getArch().str();
  compiler::TargetInfo target;
  target.smCount = unsigned(gpu().device->getSmCount());
  target.sharedMemoryPerBlock =
      unsigned(gpu().device->getMaxSharedMemoryPerBlockOptin());
  target.arch = options.arch;
  const unsigned threads = llvm::parallel::strategy.compute_thread_count();
  auto start = std::chrono::steady_clock::now();
  // Errors are reported again by the cases.
  llvm::parallelFor(0, selected.size(), [&](size_t i) {
    const GemmCase &c = selected[i];
    compiler::CompileOptions compileOptions;
    compileOptions.tiling = tilingOf(c);
    // What GemmRunner plans for the launch M (no tuning database).
    if (!compileOptions.tiling) {
      Expected<compiler::TileConfig> planned =
          compiler::selectTilingForLaunch(specOf(c.params, 0.5f), c.m, target);
      if (!planned) {
        consumeError(planned.takeError());
        return;
      }
      compileOptions.tiling = *planned;
    }
    for (bool quick : {false, c.quickFirst}) {
      compileOptions.quickCompile = quick;
      Expected<compiler::KernelSource> kernel =
          compiler::compileGemm(specOf(c.params, 0.5f), target, compileOptions);
      if (!kernel) {
        consumeError(kernel.takeError());
        break;
      }
      Expected<std::shared_ptr<const KernelEntry>> entry =
          getDefaultKernelCache().getOrCompile(kernel->source, options);
      if (!entry)
        consumeError(entry.takeError());
      if (!c.quickFirst)
        break;
    }
  });
  std::printf(
      "[ compile ] %zu kernels, %u threads, %.1f s (cache: %s)\n",
      selected.size(), threads,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      getDefaultKernelCache().getDirectory().c_str());
}

class GemmCorrectness : public ::testing::TestWithParam<GemmCase> {
protected:
  static void SetUpTestSuite() {
    if (!hostSelfCheck() && gpu().skipReason.empty())
      precompileSelected();
  }
  void SetUp() override {
    if (hostSelfCheck()) {
      const GemmCase &c = GetParam();
      if (double(c.m) * c.params.n * c.params.k > 1e11)
        GTEST_SKIP() << "too large for the host self-check";
      return;
    }
    if (!gpu().skipReason.empty())
      GTEST_SKIP() << gpu().skipReason;
    ASSERT_FALSE(bool(gpu().device->makeCurrent()));
  }
};

TEST_P(GemmCorrectness, MatchesFp64Reference) {
  const GemmCase &gc = GetParam();
  const Params &p = gc.params;
  const int m = gc.m, n = p.n, k = p.k;
  ASSERT_EQ(validate(p), nullptr) << validate(p);
  const uint64_t seed =
      baseSeed() ^ std::hash<std::string>()(shapeName(m, n, k) +
                                            std::to_string(int(gc.distA)) +
                                            std::to_string(int(gc.distB)));
  std::printf("[ case ] %s\n         %s seed=0x%llx\n", gc.name.c_str(),
              describe(p).c_str(), static_cast<unsigned long long>(seed));

  // --- operands -----------------------------------------------------------
  auto t0 = std::chrono::steady_clock::now();
  const QuantizeOptions optionsA = operandOptions(p, 'A');
  const QuantizeOptions optionsB = operandOptions(p, 'B');
  auto qa = quantizedOperand(gc.distA, m, k, seed, 1.0f, optionsA);
  auto qb = quantizedOperand(gc.distB, n, k, seed + 1,
                             1.0f / std::sqrt(static_cast<float>(k)), optionsB);
  ASSERT_TRUE(qa && qb);
  std::mt19937_64 rng(seed + 2);
  std::normal_distribution<float> normal;
  std::vector<float> bias(n), accum;
  // Values exact in bf16, f16 and f32 (8 significant bits, small range).
  auto exactValue = [&](float scale) {
    float v = std::round(std::clamp(normal(rng) * 32.0f, -255.0f, 255.0f));
    return v * scale / 32.0f;
  };
  for (float &v : bias)
    v = exactValue(1.0f);
  if (p.accum != kNone) {
    accum.resize(static_cast<size_t>(m) * n);
    for (float &v : accum)
      v = exactValue(2.0f);
  }
  const float beta = gc.beta;
  auto t1 = std::chrono::steady_clock::now();

  // The entries compared with the reference.
  std::vector<int64_t> rows, cols;
  if (gc.sampled) {
    rows = pickIndices(m, 64, rng);
    cols = pickIndices(n, 64, rng);
  } else {
    for (int64_t i = 0; i < m; ++i)
      rows.push_back(i);
    for (int64_t j = 0; j < n; ++j)
      cols.push_back(j);
  }

  RunResult run;
  if (hostSelfCheck())
    runOnHost(gc, qa.get(), qb.get(), bias, accum, beta, rows, cols, run);
  else
    runOnDevice(gc, qa.get(), qb.get(), bias, accum, beta, run);
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<uint8_t> &result = run.first;
  const float amaxValue = run.amax;
  const float milliseconds = run.milliseconds;
  EXPECT_TRUE(run.first == run.second) << "two launches gave different outputs";

  // --- every entry written, amax --------------------------------------------
  int64_t unwritten = 0, firstBad = -1;
  float largest = 0;
  const int64_t entries = static_cast<int64_t>(m) * n;
  for (int64_t i = 0; i < entries; ++i) {
    float v = decodeAt(p.out, result, static_cast<size_t>(i));
    if (std::isnan(v)) {
      if (firstBad < 0)
        firstBad = i;
      ++unwritten;
      continue;
    }
    largest = std::max(largest, std::fabs(v));
  }
  EXPECT_EQ(unwritten, 0) << "NaN / poison left in " << unwritten
                          << " entries, first at row " << firstBad / n
                          << " column " << firstBad % n;
  if (p.amax) {
    EXPECT_EQ(bitsOf(amaxValue), bitsOf(largest))
        << "amax " << amaxValue << ", largest stored magnitude " << largest;
  }

  // --- the reference --------------------------------------------------------
  auto tr0 = std::chrono::steady_clock::now();
  std::vector<double> dqA = dequantize(selectRows(*qa, rows));
  std::vector<double> dqB = dequantize(selectRows(*qb, cols));
  std::vector<double> ref =
      referenceGemm(dqA, dqB, static_cast<int64_t>(rows.size()),
                    static_cast<int64_t>(cols.size()), k);
  const int promoteK = moss::gemm_kernel::plan(p).promoteK;
  // The f16 MMA has no tensor-core model: its products are exact.
  std::vector<ModelledGemmEntry> model;
  if (!p.f16Mma)
    model =
        modelEntries(p, run.tiling, *qa, *qb, bias, accum, beta, rows, cols);
  auto tr1 = std::chrono::steady_clock::now();

  // The accuracy contract (docs/NUMERICS-CONTRACT.md section 7): each entry
  // is the tensor-core model's value (TensorCoreModel.h; the kernel's tiling
  // decides where an unpromoted kernel's sums restart) to within the output
  // type's rounding and the FP32 arithmetic's bound. The tensor cores add
  // FP8 products with 13 bits of alignment precision, so the error against
  // FP64 grows with the number P of products summed before a promotion into
  // FP32 (the scheme's promotion block, else all of K):
  //   relative Frobenius error     <= 4 u(P)      (f32 output)
  // The typical allowance (gemmEntryAllowance) is reported, not enforced.
  // With the f16 MMA (section 7.4) each entry is held to the FP64 reference
  // within f16MmaEntryAllowance, the output's rounding and the epilogue's
  // FP32 operations, and f32 output to 1e-5 (section 7.3).
  const int64_t interval = promoteK > 0 ? promoteK : k;
  const double relFrobeniusLimit =
      p.f16Mma ? 1e-5 : 4 * tensorCoreUnit(interval);
  const OutputRounding outRounding =
      compiler::getOutputRounding(static_cast<compiler::FloatType>(p.out));
  double errorSquared = 0, refSquared = 0, worstRatio = 0, worstTypical = 0;
  int64_t compared = 0, skippedOverflow = 0, checkedOverflow = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) {
      const EntryAddends addends =
          addendsOf(p, bias, accum, beta, rows[i], cols[j]);
      const double expected =
          ref[i * cols.size() + j] + addends.bias + addends.betaC;
      if (p.out == kF16 && std::fabs(expected) >= 65504.0) {
        // Past f16's range: round to nearest gives +-Inf from 65520 on.
        // Well past it (further than any entry's error) the entry must be
        // the infinity of its sign; close to it either is right.
        if (std::fabs(expected) >= 65520.0 * (1 + 1.0 / 64)) {
          const double got = decodeAt(
              p.out, result, static_cast<size_t>(rows[i]) * n + cols[j]);
          EXPECT_EQ(got, std::copysign(HUGE_VAL, expected))
              << "entry (" << rows[i] << ", " << cols[j] << ") overflows f16"
              << " (FP64 " << expected << ")";
          ++checkedOverflow;
        } else {
          ++skippedOverflow;
        }
        continue;
      }
      double got =
          decodeAt(p.out, result, static_cast<size_t>(rows[i]) * n + cols[j]);
      double error = got - expected;
      errorSquared += error * error;
      refSquared += expected * expected;
      ++compared;
      const double typicalAllowed = gemmEntryAllowedError(
          expected, outRounding, llvm::ArrayRef(&dqA[i * k], k),
          llvm::ArrayRef(&dqB[j * k], k), interval);
      worstTypical = std::max(
          worstTypical, gemmEntryErrorRatio(got, expected, typicalAllowed));
      double want = expected, allowed;
      if (p.f16Mma) {
        allowed = f16MmaEntryAllowedError(
            expected, outRounding, llvm::ArrayRef(&dqA[i * k], k),
            llvm::ArrayRef(&dqB[j * k], k), ref[i * cols.size() + j],
            addends.bias, addends.betaC);
      } else {
        const ModelledGemmEntry &entry = model[i * cols.size() + j];
        want = entry.value;
        allowed = modelledEntryAllowedError(entry, outRounding);
      }
      double ratio =
          gemmEntryErrorRatio(got, want, allowed, outRounding.overflow);
      if (!(ratio <= worstRatio)) {
        worstRatio = ratio;
        if (!(ratio <= 1.0))
          ADD_FAILURE() << "entry (" << rows[i] << ", " << cols[j] << "): got "
                        << got << ", expected " << want << " ("
                        << (p.f16Mma ? "f16 MMA" : "tensor-core model")
                        << "; allowed error " << allowed << ", FP64 "
                        << expected << ")";
      }
    }
  const double relFrobenius =
      refSquared > 0 ? std::sqrt(errorSquared / refSquared) : 0.0;
  const double tflops = 2.0 * m * double(n) * k / (milliseconds * 1e-3) / 1e12;
  std::printf(
      "         rel_frobenius=%.3e (limit %.2e, promotion %d) "
      "worst_entry/allowed=%.3f (%s; typical %.3f) compared=%lld"
      "%s  kernel=%.3f ms (%.0f TFLOPS, second launch, not a "
      "benchmark)  host: data %.1fs compile %.2fs ref %.1fs\n",
      relFrobenius, relFrobeniusLimit, promoteK > 0 ? promoteK : k, worstRatio,
      p.f16Mma ? "f16 MMA" : "model", worstTypical,
      static_cast<long long>(compared),
      skippedOverflow || checkedOverflow
          ? (" f16_overflow_inf=" + std::to_string(checkedOverflow) +
             " f16_overflow_near_65520=" + std::to_string(skippedOverflow))
                .c_str()
          : "",
      milliseconds, tflops, std::chrono::duration<double>(t1 - t0).count(),
      run.compileSeconds, std::chrono::duration<double>(tr1 - tr0).count());
  if (p.out == kF32) { // 16-bit outputs: their rounding dominates
    EXPECT_LE(relFrobenius, relFrobeniusLimit) << "relative Frobenius error";
  }
  EXPECT_LE(worstRatio, 1.0) << "an entry is off by more than allowed";
  EXPECT_GT(compared, 0);
}

/// The rows of `x` ([rows, k]) whose scales a NaN or Inf in x makes NaN
/// under `scheme` (docs/NUMERICS-CONTRACT.md section 4): every row for a
/// per-tensor scale, the rows of a square block, else the row itself (a
/// two-level tensor global counts only finite blocks).
std::vector<bool> nanRows(const std::vector<float> &x, int rows, int k,
                          const ScalingScheme &scheme) {
  std::vector<bool> bad(rows, false);
  bool any = false;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c)
      if (!std::isfinite(x[size_t(r) * k + c])) {
        bad[r] = any = true;
        break;
      }
  if (scheme.kind == ScalingKind::PerTensor && any)
    std::fill(bad.begin(), bad.end(), true);
  if (scheme.blockRows > 1)
    for (int r0 = 0; r0 < rows; r0 += int(scheme.blockRows)) {
      const int r1 = std::min(rows, r0 + int(scheme.blockRows));
      if (std::any_of(bad.begin() + r0, bad.begin() + r1,
                      [](bool b) { return b; }))
        std::fill(bad.begin() + r0, bad.begin() + r1, true);
    }
  return bad;
}

// The GEMM's non-finite rule (docs/NUMERICS-CONTRACT.md section 7.5): a NaN
// or Inf in an input makes NaN every output entry whose A row or B row
// (output column) got a NaN scale from it, and no other; amax is then NaN.
// Every scheme pair, bf16 and f32 output.
TEST(GemmNonFinite, NanScalesMakeTheirRowsAndColumnsNanAndNothingElse) {
  if (hostSelfCheck())
    GTEST_SKIP() << "needs the GPU";
  if (!gpu().skipReason.empty())
    GTEST_SKIP() << gpu().skipReason;
  ASSERT_FALSE(bool(gpu().device->makeCurrent()));
  const int m = 129, n = 264, k = 256;
  const uint64_t seed = baseSeed();
  for (const Scheme &s : kSchemes)
    for (int out : {kBF16, kF32}) {
      GemmCase gc;
      gc.params = makeParams(s, n, k, out, {"amax", false, false, true});
      gc.m = m;
      const Params &p = gc.params;
      SCOPED_TRACE(std::string(s.name) + " " + typeName(out));
      std::vector<float> a = sample(Dist::Gaussian, m, k, seed, 1.0f);
      std::vector<float> b =
          sample(Dist::Gaussian, n, k, seed + 1, 1.0f / std::sqrt(float(k)));
      a[5 * k + 17] = NAN;
      a[77 * k + 200] = INFINITY;
      b[3 * k + 100] = -INFINITY;
      b[260 * k + 5] = NAN;
      const QuantizeOptions optionsA = operandOptions(p, 'A');
      const QuantizeOptions optionsB = operandOptions(p, 'B');
      Expected<QuantizedTensor> qa = quantize(a, m, k, optionsA);
      Expected<QuantizedTensor> qb = quantize(b, n, k, optionsB);
      ASSERT_TRUE(qa && qb);
      RunResult run;
      runOnDevice(gc, &*qa, &*qb, {}, {}, 1.0f, run);
      ASSERT_FALSE(HasFatalFailure());
      const std::vector<bool> badA = nanRows(a, m, k, optionsA.scheme);
      const std::vector<bool> badB = nanRows(b, n, k, optionsB.scheme);
      std::vector<double> ref =
          referenceGemm(dequantize(*qa), dequantize(*qb), m, n, k);
      double errorSquared = 0, refSquared = 0;
      int64_t wrongNan = 0, missingNan = 0;
      for (int r = 0; r < m; ++r)
        for (int c = 0; c < n; ++c) {
          const double got = decodeAt(out, run.first, size_t(r) * n + c);
          if (badA[r] || badB[c]) {
            missingNan += !std::isnan(got);
            continue;
          }
          if (!std::isfinite(got)) {
            ++wrongNan;
            continue;
          }
          const double want = ref[size_t(r) * n + c];
          errorSquared += (got - want) * (got - want);
          refSquared += want * want;
        }
      EXPECT_EQ(missingNan, 0) << "entries of NaN rows or columns not NaN";
      EXPECT_EQ(wrongNan, 0) << "entries not NaN or Inf in the reference are";
      // The values are checked exactly by GemmCorrectness; here, only that
      // the finite entries are the product's.
      if (refSquared > 0) {
        EXPECT_LE(std::sqrt(errorSquared / refSquared), 1e-2);
      }
      EXPECT_TRUE(std::isnan(run.amax)) << "amax " << run.amax;
      EXPECT_TRUE(run.first == run.second);
    }
}

/// MOSS_GEMM_TEST_COMPILE=1 (no GPU needed): every case's kernel compiles
/// for sm_90a with no stack, no spills and no serialized wgmma.
TEST(GemmGpuCompile, EveryCaseCompilesClean) {
  const char *v = std::getenv("MOSS_GEMM_TEST_COMPILE");
  if (!v || !*v || std::string(v) == "0")
    GTEST_SKIP() << "set MOSS_GEMM_TEST_COMPILE=1 to compile every case";
  if (!isNvrtcAvailable())
    GTEST_SKIP() << toString(getNvrtcVersion().takeError());
  std::vector<GemmCase> all = smallCases();
  for (const GemmCase &c : largeCases())
    all.push_back(c);
  for (size_t i = 0, n = all.size(); i < n; ++i)
    if (all[i].quickFirst) {
      // What GemmRunner compiles first: the variant on narrowed tiles.
      GemmCase quick = all[i];
      quick.params = quickCompileParams(quick.params);
      quick.name += "(quick-compile variant)";
      all.push_back(quick);
    }
  std::map<std::string, std::string> failures;
  std::mutex mutex;
  llvm::parallelFor(0, all.size(), [&](size_t i) {
    CompileOptions options;
    options.arch = "sm_90a";
    options.flags = {"--ptxas-options=-v"};
    Expected<CompileResult> r =
        compileCuda(kernelSource(all[i].params), options);
    std::string problem;
    if (!r) {
      problem = toString(r.takeError());
    } else {
      ResourceUsage u = parsePtxasLog(r->log);
      if (!u.parsed || u.stackBytes != 0 || u.spillStoreBytes != 0 ||
          r->log.find("Potential Performance Loss") != std::string::npos)
        problem = r->log;
    }
    if (!problem.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      failures[all[i].name] = problem;
    }
  });
  for (const auto &[name, problem] : failures)
    ADD_FAILURE() << name << ":\n" << problem;
  std::printf("[ compile ] %zu kernels, %zu failed\n", all.size(),
              failures.size());
}

std::string caseName(const ::testing::TestParamInfo<GemmCase> &info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Small, GemmCorrectness,
                         ::testing::ValuesIn(smallCases()), caseName);
INSTANTIATE_TEST_SUITE_P(Large, GemmCorrectness,
                         ::testing::ValuesIn(largeCases()), caseName);

} // namespace
