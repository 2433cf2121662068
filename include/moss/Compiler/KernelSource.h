//===- KernelSource.h - A compiled GEMM kernel's source ---------*- C++ -*-===//
//
// What the compiler hands the runtime for one GEMM: the CUDA C++ translation
// unit, the name of its kernel, how to launch it, and the tile configuration
// it was made with. Plain C++: the runtime reads it without linking MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_KERNELSOURCE_H
#define MOSS_COMPILER_KERNELSOURCE_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include <cstdint>
#include <string>

namespace moss::compiler {

/// Launch geometry of a GEMM kernel (docs/GEMM-KERNEL-ABI.md, "Launch"), as
/// the templates' plan gives it. The runtime launches from its own plan of
/// the same templates (runtime/gemm/TemplatePlan.cpp); this copy is for
/// tools and tests that read a compiled kernel without a GPU.
struct LaunchGeometry {
  /// Threads per block: `Config::kThreads`.
  unsigned threads = 0;
  /// Dynamic shared memory per block: `Config::kSharedBytes`.
  unsigned sharedBytes = 0;
  /// Cluster dimensions: (ClusterM * ClusterN, 1, 1); {1, 1, 1} means no
  /// cluster launch. The grid is persistent: the templates' `gridSize()`.
  unsigned cluster[3] = {1, 1, 1};
};

/// One compiled GEMM, ready for NVRTC.
struct KernelSource {
  /// The CUDA C++ translation unit.
  std::string source;
  /// The `extern "C"` kernel in it: "moss_gemm_" + a hash of its
  /// configuration, equal for equal GEMMs in every process.
  std::string kernelName;
  LaunchGeometry launch;
  /// The tile configuration; `tiling.source` says whether the heuristic or
  /// the tuning database chose it (unset: given by the caller).
  TileConfig tiling;
  /// The GEMM it computes (with M as specialized, or kDynamic).
  GemmSpec spec;
  /// Whether it is the quick-compile variant (CompileOptions::quickCompile).
  bool quickCompile = false;
};

} // namespace moss::compiler

#endif // MOSS_COMPILER_KERNELSOURCE_H
