//===- SchemeOptions.h - Scheme flags shared by commands --------*- C++ -*-===//

#ifndef MOSS_TOOLS_COMMON_SCHEMEOPTIONS_H
#define MOSS_TOOLS_COMMON_SCHEMEOPTIONS_H

#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace moss::jit {

/// The --scheme values.
enum class SchemeName { PerTensor, PerRow, PerGroup, MXFP8, Moss };

/// Builds a scheme from the command-line spellings: `block` is "N", "RxN"
/// (per-group only) or empty for the scheme's default (32 for moss and
/// mxfp8, 128 for per-group); `global` is "tensor", "row" or empty.
llvm::Expected<numerics::ScalingScheme>
makeScheme(SchemeName name, llvm::StringRef block, llvm::StringRef global);

/// "e4m3" or "e5m2".
llvm::StringRef formatName(numerics::Fp8Format format);

/// The value of a GEMM's --fold: none for "auto" (the spec's default), else
/// none, 128 or row.
llvm::Expected<std::optional<numerics::BlockScaleFold>>
parseGemmFold(llvm::StringRef text);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_SCHEMEOPTIONS_H
