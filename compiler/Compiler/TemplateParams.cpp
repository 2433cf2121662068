//===- TemplateParams.cpp - A GEMM's parameters of the device templates ---===//

#include "moss/Compiler/TemplateParams.h"

using namespace moss;

gemm_kernel::Params compiler::getTemplateParams(const GemmSpec &spec,
                                                const TileConfig &tiling,
                                                bool quickCompile) {
  auto type = [](std::optional<FloatType> f) {
    return f ? int(*f) : gemm_kernel::kNone;
  };
  gemm_kernel::Params p;
  p.m = spec.isDynamicM() ? -1 : int(spec.m);
  p.n = int(spec.n);
  p.k = int(spec.k);
  p.elemA = int(spec.a);
  p.elemB = int(spec.b);
  p.scaleA = int(spec.aScaling.kind);
  p.blockRowsA = int(spec.aScaling.blockRows);
  p.blockA = int(spec.aScaling.blockCols);
  p.globalRowA = spec.aScaling.globalPerRow();
  p.scaleB = int(spec.bScaling.kind);
  p.blockRowsB = int(spec.bScaling.blockRows);
  p.blockB = int(spec.bScaling.blockCols);
  p.globalRowB = spec.bScaling.globalPerRow();
  p.out = int(spec.out);
  p.bias = type(spec.bias);
  p.accum = type(spec.accumulate);
  p.amax = spec.amax;
  p.tileM = int(tiling.tileM);
  p.tileN = int(tiling.tileN);
  p.stages = int(tiling.stages);
  p.clusterM = int(tiling.clusterM);
  p.clusterN = int(tiling.clusterN);
  p.rasterAlongN = tiling.raster == RasterOrder::AlongN;
  p.swizzle = int(tiling.swizzle);
  p.splitK = int(tiling.splitK);
  p.forcePromoteK = int(spec.promoteK);
  p.quickCompile = quickCompile;
  p.f16Mma = spec.multipliesInF16();
  p.foldA = spec.kernelFoldsA;
  p.groups = int(spec.groups);
  p.maskedGroups = spec.maskedGroups;
  p.groupedK = spec.groupedK;
  return p;
}
