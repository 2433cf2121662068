//===- KernelSource.cpp - A compiled GEMM kernel's source -----------------===//

#include "moss/Compiler/KernelSource.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace moss::compiler;

unsigned KernelSource::getGridBlocks(int64_t m, unsigned smCount) const {
  // moss::gemm::gridSize: whole cluster tiles (each cluster dimension
  // rounded up on its own), at most the clusters the SMs hold, times the
  // cluster size.
  int64_t clusterSize = tiling.clusterM * tiling.clusterN;
  int64_t tilesM = llvm::divideCeil(std::max<int64_t>(m, 1), tiling.tileM);
  int64_t tilesN = llvm::divideCeil(spec.n, tiling.tileN);
  int64_t clusterTiles = llvm::divideCeil(tilesM, tiling.clusterM) *
                         llvm::divideCeil(tilesN, tiling.clusterN) *
                         tiling.splitK;
  int64_t slots = std::max<int64_t>(1, smCount / clusterSize);
  return static_cast<unsigned>(std::min(clusterTiles, slots) * clusterSize);
}
