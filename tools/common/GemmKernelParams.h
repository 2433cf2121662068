//===- GemmKernelParams.h - GEMM kernel parameter sets ----------*- C++ -*-===//
//
// Shared by tests/unit/GemmKernelCompileTest.cpp (NVRTC only),
// tests/gpu/GemmGpuTest.cpp and bench/GemmBench.cpp: a GEMM configuration as
// moss::gemm_kernel::Params (templates/moss/gemm/config.cuh, which compiles as
// host C++), the translation unit of docs/GEMM-KERNEL-ABI.md for it, a readable
// name, and the conversions to the compiler's GemmSpec and TileConfig.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_GEMMKERNELPARAMS_H
#define MOSS_TOOLS_COMMON_GEMMKERNELPARAMS_H

#include "moss/Compiler/GemmSource.h"
#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Numerics/Quantize.h"
#include "moss/gemm/config.cuh"

#include <optional>
#include <string>

namespace moss::gemmtest {

using moss::gemm_kernel::Params;

inline const char *elemName(int e) {
  return e == moss::gemm_kernel::kE5M2 ? "e5m2" : "e4m3";
}

inline const char *scaleName(int s) {
  switch (s) {
  case moss::gemm_kernel::kPerTensor:
    return "tensor";
  case moss::gemm_kernel::kPerRow:
    return "row";
  case moss::gemm_kernel::kPerGroup:
    return "group";
  case moss::gemm_kernel::kMXFP8:
    return "mx";
  case moss::gemm_kernel::kTwoLevel:
    return "twolevel";
  }
  return "?";
}

inline const char *typeName(int t) {
  switch (t) {
  case moss::gemm_kernel::kBF16:
    return "bf16";
  case moss::gemm_kernel::kF16:
    return "f16";
  case moss::gemm_kernel::kF32:
    return "f32";
  }
  return "none";
}

/// One side's scheme for names: "twolevel(row,32)", "group(128x128)".
inline std::string sideName(int elem, int scale, int blockRows, int block,
                            bool globalRow) {
  std::string s = std::string(elemName(elem)) + ":" + scaleName(scale);
  if (scale == moss::gemm_kernel::kTwoLevel)
    s += std::string("(") + (globalRow ? "row" : "tensor") + "," +
         std::to_string(block) + ")";
  else if (scale == moss::gemm_kernel::kPerGroup)
    s += "(" + std::to_string(blockRows) + "x" + std::to_string(block) + ")";
  return s;
}

/// "A=e4m3:twolevel(row,32) B=e4m3:tensor out=bf16 bias=f32 c=f32 amax
///  tile=128x128x6 m=-1 n=4096 k=4096".
inline std::string describe(const Params &p) {
  std::string s =
      "A=" + sideName(p.elemA, p.scaleA, p.blockRowsA, p.blockA, p.globalRowA) +
      " B=" +
      sideName(p.elemB, p.scaleB, p.blockRowsB, p.blockB, p.globalRowB) +
      " out=" + typeName(p.out);
  if (p.bias != moss::gemm_kernel::kNone)
    s += std::string(" bias=") + typeName(p.bias);
  if (p.accum != moss::gemm_kernel::kNone)
    s += std::string(" c=") + typeName(p.accum);
  if (p.amax)
    s += " amax";
  if (p.forcePromoteK)
    s += " promote=" + std::to_string(p.forcePromoteK);
  if (p.quickCompile)
    s += " quick-compile";
  if (p.f16Mma)
    s += " f16-mma";
  if (p.foldA)
    s += " fold-a";
  s += " tile=" + std::to_string(p.tileM) + "x" + std::to_string(p.tileN) +
       "x" + std::to_string(p.stages) + " m=" + std::to_string(p.m) +
       " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
  return s;
}

/// The tiling the tests use (what moss-select-tiling is expected to pick
/// until the tuner exists): 128x128 and 6 stages with block scales (three
/// accumulator sets), 128x256 and 4 stages without; 128x128 and 4 stages
/// with the f16 MMA (its f16 slots take a third of the shared memory).
inline Params withDefaultTiling(Params p) {
  p.tileM = 128;
  if (p.f16Mma) {
    p.tileN = 128;
    p.stages = 4;
  } else if (moss::gemm_kernel::plan(p).promoteK > 0) {
    p.tileN = 128;
    p.stages = 6;
  } else {
    p.tileN = 256;
    p.stages = 4;
  }
  return p;
}

/// An operand's scaling scheme from its Params fields.
inline numerics::ScalingScheme schemeOf(int scale, int blockRows, int block,
                                        bool globalRow) {
  using numerics::ScalingScheme;
  switch (scale) {
  case moss::gemm_kernel::kPerTensor:
    return ScalingScheme::perTensor();
  case moss::gemm_kernel::kPerRow:
    return ScalingScheme::perRow();
  case moss::gemm_kernel::kPerGroup:
    return ScalingScheme::perGroup(blockRows, block);
  case moss::gemm_kernel::kMXFP8:
    return ScalingScheme::mxfp8();
  default:
    return ScalingScheme::twoLevel(globalRow ? numerics::GlobalScope::Row
                                             : numerics::GlobalScope::Tensor,
                                   block);
  }
}

/// The compiler's description of the GEMM of `p` (beta used with C).
inline compiler::GemmSpec specOf(const Params &p, float beta = 1.0f) {
  auto type = [](int kind) -> std::optional<compiler::FloatType> {
    if (kind == moss::gemm_kernel::kNone)
      return std::nullopt;
    return compiler::FloatType(kind);
  };
  auto format = [](int elem) {
    return elem == moss::gemm_kernel::kE5M2 ? numerics::Fp8Format::E5M2
                                            : numerics::Fp8Format::E4M3;
  };
  compiler::GemmSpec spec;
  spec.m = p.m < 0 ? compiler::GemmSpec::kDynamic : p.m;
  spec.n = p.n;
  spec.k = p.k;
  spec.a = format(p.elemA);
  spec.b = format(p.elemB);
  spec.aScaling = schemeOf(p.scaleA, p.blockRowsA, p.blockA, p.globalRowA);
  spec.bScaling = schemeOf(p.scaleB, p.blockRowsB, p.blockB, p.globalRowB);
  spec.out = *type(p.out);
  spec.bias = type(p.bias);
  spec.accumulate = type(p.accum);
  if (spec.accumulate)
    spec.beta = beta;
  spec.amax = p.amax;
  spec.promoteK = p.forcePromoteK;
  spec.mma = p.f16Mma ? compiler::MmaType::F16 : compiler::MmaType::FP8;
  // The kernels of Params promote every block factor, or fold A's
  // themselves (FoldGpuTest tests the folds).
  spec.fold = numerics::BlockScaleFold::None;
  spec.kernelFoldsA = p.foldA;
  return spec;
}

/// The tile configuration of `p`.
inline compiler::TileConfig tilingOfParams(const Params &p) {
  compiler::TileConfig t;
  t.tileM = p.tileM;
  t.tileN = p.tileN;
  t.stages = p.stages;
  t.clusterM = p.clusterM;
  t.clusterN = p.clusterN;
  t.raster = p.rasterAlongN ? compiler::RasterOrder::AlongN
                            : compiler::RasterOrder::AlongM;
  t.swizzle = p.swizzle;
  t.splitK = p.splitK;
  return t;
}

/// `p` with the tile configuration `t`.
inline Params withTiling(Params p, const compiler::TileConfig &t) {
  p.tileM = int(t.tileM);
  p.tileN = int(t.tileN);
  p.stages = int(t.stages);
  p.clusterM = int(t.clusterM);
  p.clusterN = int(t.clusterN);
  p.rasterAlongN = t.raster == compiler::RasterOrder::AlongN;
  p.swizzle = int(t.swizzle);
  p.splitK = int(t.splitK);
  return p;
}

/// The quick-compile variant of `p` (GemmRunner's first kernel of a tiered
/// compile): its tiles as the compiler shrinks them, and QuickCompile.
inline Params quickCompileParams(
    const Params &p,
    const compiler::TargetInfo &target = compiler::TargetInfo()) {
  Params quick = withTiling(
      p, compiler::getQuickCompileTiling(specOf(p), tilingOfParams(p), target));
  quick.quickCompile = true;
  return quick;
}

/// The generated translation unit of docs/GEMM-KERNEL-ABI.md for `p`
/// (compiler::generateGemmTranslationUnit, the runtime's).
inline std::string kernelSource(const Params &p) {
  return compiler::generateGemmTranslationUnit(p).source;
}

/// What ptxas reported for the kernel (from its -v log).
struct ResourceUsage {
  int registers = -1;
  int stackBytes = -1;
  int spillStoreBytes = -1;
  int spillLoadBytes = -1;
  bool parsed = false;
};

/// Parses "N bytes stack frame, N bytes spill stores, N bytes spill loads"
/// and "Used N registers" from a ptxas -v log.
inline ResourceUsage parsePtxasLog(const std::string &log) {
  ResourceUsage u;
  auto numberBefore = [&](const std::string &marker, int &out) {
    size_t at = log.find(marker);
    if (at == std::string::npos)
      return false;
    size_t end = at;
    while (end > 0 && log[end - 1] == ' ')
      --end;
    size_t begin = end;
    while (begin > 0 && log[begin - 1] >= '0' && log[begin - 1] <= '9')
      --begin;
    if (begin == end)
      return false;
    out = std::stoi(log.substr(begin, end - begin));
    return true;
  };
  bool ok = numberBefore("bytes stack frame", u.stackBytes);
  ok &= numberBefore("bytes spill stores", u.spillStoreBytes);
  ok &= numberBefore("bytes spill loads", u.spillLoadBytes);
  size_t used = log.find("Used ");
  if (used != std::string::npos)
    u.registers = std::stoi(log.substr(used + 5));
  u.parsed = ok && u.registers >= 0;
  return u;
}

} // namespace moss::gemmtest

#endif // MOSS_TOOLS_COMMON_GEMMKERNELPARAMS_H
