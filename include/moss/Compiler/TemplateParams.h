//===- TemplateParams.h - A GEMM's parameters of the device templates C++
//-*-===//
//
// The one mapping from the compiler's description of a GEMM (GemmSpec and
// TileConfig) to the parameters of the device templates'
// `moss::gemm_kernel::Config` (templates/moss/gemm/config.cuh, host C++ here).
// The configuration text the lowering emits, the compiler's resource model and
// the runtime's launch plan all start from it, and the templates' `plan()`
// computes the rest.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_TEMPLATEPARAMS_H
#define MOSS_COMPILER_TEMPLATEPARAMS_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "moss/gemm/config.cuh"

namespace moss::compiler {

/// `moss::gemm_kernel::Params` of `spec` on `tiling`; `quickCompile` selects
/// the kernel's quick-compile variant (Params::quickCompile).
gemm_kernel::Params getTemplateParams(const GemmSpec &spec,
                                      const TileConfig &tiling,
                                      bool quickCompile = false);

} // namespace moss::compiler

#endif // MOSS_COMPILER_TEMPLATEPARAMS_H
