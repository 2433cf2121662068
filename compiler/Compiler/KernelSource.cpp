//===- KernelSource.cpp - A compiled GEMM kernel's source -----------------===//

#include "moss/Compiler/KernelSource.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace moss::compiler;

unsigned KernelSource::getGridBlocks(int64_t m, unsigned smCount) const {
  int64_t clusterSize = tiling.clusterM * tiling.clusterN;
  int64_t tilesM = llvm::divideCeil(std::max<int64_t>(m, 1), tiling.tileM);
  int64_t tilesN = llvm::divideCeil(spec.n, tiling.tileN);
  int64_t work = llvm::alignTo(tilesM * tilesN * tiling.splitK, clusterSize);
  int64_t slots =
      std::max<int64_t>(clusterSize, smCount / clusterSize * clusterSize);
  return static_cast<unsigned>(std::min(work, slots));
}
