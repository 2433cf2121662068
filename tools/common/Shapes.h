//===- Shapes.h - GEMM shapes: moss-tune, moss-jit cache warm -*- C++ -*-===//
//
// Shapes come from --shape MxNxK flags, a shapes file (plain text lines
// "M N K [a-scheme] [b-scheme] [groups=G] [routing=R]" with # comments, or
// a JSON list), or a preset. With groups, a shape is a contiguous m-grouped
// GEMM of G experts (a mixture-of-experts layer; N and K each expert's) whose
// M rows in all fall to the experts by the routing (ExpertRouting.h:
// routeTotalRows; uniform unless given). A scheme is written
// NAME[:OPTION]...: NAME is per-tensor,
// per-row, per-group, mxfp8 or moss; an option is a global scope (tensor,
// row), a block (N or RxN) or an FP8 format (e4m3, e5m2); e.g. moss:row:32,
// per-group:128x128, mxfp8:e5m2. Every error names where the shape came
// from (file and line) and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_SHAPES_H
#define MOSS_TOOLS_COMMON_SHAPES_H

#include "moss/Compiler/GemmSpec.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moss::tune {

/// One operand's FP8 format and scheme.
struct OperandScheme {
  numerics::Fp8Format format = numerics::Fp8Format::E4M3;
  numerics::ScalingScheme scheme;
};

/// What a shape without its own schemes uses.
struct ShapeDefaults {
  OperandScheme a, b;
  compiler::FloatType out = compiler::FloatType::BF16;
  compiler::MmaType mma = compiler::MmaType::Auto;
  /// The fold of two-level and MXFP8 operands; unset: GemmSpec's default.
  std::optional<numerics::BlockScaleFold> fold;
  /// Experts (0: a plain GEMM) and their routing.
  int64_t groups = 0;
  std::string routing = "uniform";
};

/// One GEMM to tune: `spec` has a dynamic M (the kernel the runtime
/// compiles for any M) and is launched with `m` rows.
struct TuneShape {
  compiler::GemmSpec spec;
  /// The spec as written, before its fold: what a program passes to
  /// moss::gemm (spec is the kernel planGemm plans for it at m rows).
  compiler::GemmSpec given;
  int64_t m = 0;
  /// An m-grouped shape's routing of its m rows to spec.groups experts.
  std::string routing;
  /// Where it came from, e.g. "shapes.txt:4" or "--preset llama7b".
  std::string origin;
  /// A name from the preset ("qkv", "ffn-down"), else empty.
  std::string name;

  /// "MxNxK", with " G experts (routing)" for an m-grouped shape.
  std::string getShapeText() const;
};

/// Parses a scheme token (see the file comment); `what` names it in errors.
llvm::Expected<OperandScheme> parseScheme(llvm::StringRef token,
                                          llvm::StringRef what);

/// Parses "MxNxK" (the --shape flag).
llvm::Expected<TuneShape> parseShapeFlag(llvm::StringRef text,
                                         const ShapeDefaults &defaults);

/// Parses the text of a shapes file named `name` (plain text or, when it
/// starts with '[', JSON). A file without shapes (an empty JSON list too) is
/// an error.
llvm::Expected<std::vector<TuneShape>>
parseShapesFile(llvm::StringRef text, llvm::StringRef name,
                const ShapeDefaults &defaults);

/// The shapes of a preset; "llama7b": the LLaMA-7B projections (QKV
/// 12288x4096, attention output 4096x4096, FFN gate/up 11008x4096, FFN
/// down 4096x11008) at M in {1, 16, 128, 2048, 16384}.
llvm::Expected<std::vector<TuneShape>> getPreset(llvm::StringRef preset,
                                                 const ShapeDefaults &defaults);

/// The preset names, for --help.
llvm::StringRef getPresetNames();

/// Checks each shape as the runtime would (moss::checkGemmSpec at its M; an
/// m-grouped one's routing, and A with a global per row, since each expert's
/// rows are quantized apart) and that it is not listed twice; the error names
/// its origin.
llvm::Error checkShapes(const std::vector<TuneShape> &shapes);

} // namespace moss::tune

#endif // MOSS_TOOLS_COMMON_SHAPES_H
