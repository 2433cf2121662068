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

/// A scheme as written on a command line: NAME[:OPTION]... (README, "Scheme
/// names"). NAME is per-tensor, per-row, per-group, mxfp8 or moss; the
/// dialect's and the C API's spellings (per_tensor, ..., two_level,
/// two-level) and moss-row / moss-tensor (for moss:row, moss:tensor) are
/// aliases. An option is a global scope (tensor, row; moss only), a block
/// (N, or RxN for per-group) or an FP8 format (e4m3, e5m2).
struct SchemeText {
  /// As written, for messages.
  std::string spelling;
  SchemeName name = SchemeName::PerTensor;
  /// Empty where the text gives none.
  std::string global, block;
  std::optional<numerics::Fp8Format> format;
};

llvm::Expected<SchemeText> parseSchemeText(llvm::StringRef text);

/// The scheme of `text` with the flags that may also describe it: a flag
/// may add what the text leaves out but not contradict it (`flag` names the
/// flags in errors, e.g. "a-" for --a-global). Without either, moss's
/// global scope is `defaultGlobal`.
llvm::Expected<numerics::ScalingScheme>
makeScheme(SchemeText text, llvm::StringRef block, llvm::StringRef global,
           llvm::StringRef flag, llvm::StringRef defaultGlobal = "tensor");

/// An operand's scheme and FP8 format from a command's --scheme text and its
/// separate flags (the format flag counts only when `formatGiven`).
struct OperandChoice {
  numerics::ScalingScheme scheme;
  numerics::Fp8Format format;
};
llvm::Expected<OperandChoice>
makeOperandScheme(llvm::StringRef text, llvm::StringRef block,
                  llvm::StringRef global, numerics::Fp8Format formatFlag,
                  bool formatGiven, llvm::StringRef flag);

/// Refuses a flag given an empty value (`--global=`), which the scheme
/// builders would read as the flag left out; `expected` names the valid
/// values.
llvm::Error checkNotEmpty(llvm::StringRef flagName, llvm::StringRef value,
                          bool given, llvm::StringRef expected);

/// "e4m3" or "e5m2".
llvm::StringRef formatName(numerics::Fp8Format format);

/// The value of a GEMM's --fold: none for "auto" (the spec's default), else
/// none, 128 or row.
llvm::Expected<std::optional<numerics::BlockScaleFold>>
parseGemmFold(llvm::StringRef text);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_SCHEMEOPTIONS_H
