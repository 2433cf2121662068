//===- GemmSpecOptions.h - The GEMM flags of compile, run, bench -*- C++
//-*-===//
//
// `moss-jit compile`, `run` and `bench` describe a GEMM with the same flags
// (-m, -n, -k, --a-scheme, ..., --out, --bias, --accumulate, --amax); they
// live here, with the three subcommands they belong to.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSJIT_GEMMSPECOPTIONS_H
#define MOSS_TOOLS_MOSSJIT_GEMMSPECOPTIONS_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <vector>

namespace moss::jit {

/// The GemmSpec of the command line. For compile, -m specializes M (omitted:
/// dynamic). For run and bench, -m is the rows at launch and is required;
/// the kernel serves any M unless --static-m.
llvm::Expected<compiler::GemmSpec> getGemmSpec(bool mIsLaunchRows);

/// The rows at launch (run, bench).
int64_t getLaunchRows();

/// An m-grouped spec's rows per expert (-m the mean, --routing the spread),
/// drawn from `seed`.
llvm::Expected<std::vector<int64_t>>
getExpertRows(const compiler::GemmSpec &spec, uint64_t seed);

/// A k-grouped spec's tokens per expert, multiples of 128 (-k the mean,
/// --routing the spread), drawn from `seed`.
llvm::Expected<std::vector<int64_t>>
getExpertColumns(const compiler::GemmSpec &spec, uint64_t seed);

/// --quick-compile: the kernel's quick-compile variant
/// (compiler::CompileOptions::quickCompile).
bool getQuickCompile();

/// --tiling TMxTNxSTAGES[xCMxCN[xSPLITK]] (run, bench): a tile
/// configuration instead of the compiler's choice, its tiles walked in the
/// heuristic's order (compiler::setTileOrder) for `spec` launched at `m`
/// rows (-m; a grouped GEMM's order is that of all experts' rows); none
/// when the flag is absent.
llvm::Expected<std::optional<compiler::TileConfig>>
getTilingOverride(const compiler::GemmSpec &spec, int64_t m);

/// Checks a --tiling for `spec` at the launch rows before the GPU is opened
/// (against the H200's resources).
llvm::Error
checkTilingOverride(const compiler::GemmSpec &spec,
                    const std::optional<compiler::TileConfig> &tiling);

} // namespace moss::jit

#endif // MOSS_TOOLS_MOSSJIT_GEMMSPECOPTIONS_H
