//===- Records.h - Every timed candidate: CSV and SVG -----------*- C++ -*-===//
//
// One record per candidate (and per cuBLASLt baseline) of every shape. The
// CSV holds them all, one row each; on a resumed sweep the rows of shapes
// that are not re-tuned are read back and kept. The SVG plots TFLOPS per
// candidate per shape (log scale), marks the best and the runtime
// heuristic's choice, and draws cuBLASLt as a line across the shapes.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSTUNE_RECORDS_H
#define MOSS_TOOLS_MOSSTUNE_RECORDS_H

#include "moss/Compiler/Tiling.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moss::tune {

/// One timed (or failed) configuration of one shape.
struct CandidateRecord {
  /// The shape: its database key and M, e.g. "sm_90a/132 SMs: ... M=2048".
  std::string shape;
  /// A label for plots: preset name and MxNxK.
  std::string label;
  std::string arch;
  unsigned smCount = 0;
  std::string a, b, out;
  int64_t m = 0, n = 0, k = 0;
  /// "moss" (a tile configuration) or "cublaslt" (the baseline).
  std::string kind = "moss";
  compiler::TileConfig tiling;
  /// "ok", "wrong" (failed verification), "compile-error", "launch-error"
  /// or "unsupported" (a baseline that did not run).
  std::string status = "ok";
  double milliseconds = 0;
  double tflops = 0;
  /// Space-separated: "best", "heuristic" (the runtime's choice without a
  /// database), "heuristic-m" (the heuristic planned for this M).
  std::string roles;
  std::string note;
};

/// Writes `records` as CSV, atomically.
llvm::Error writeCsv(llvm::StringRef path,
                     llvm::ArrayRef<CandidateRecord> records);

/// Reads a CSV written by writeCsv; the error names the line.
llvm::Expected<std::vector<CandidateRecord>> readCsv(llvm::StringRef path);

/// Writes the SVG plot of `records`, atomically.
llvm::Error writeSvg(llvm::StringRef path,
                     llvm::ArrayRef<CandidateRecord> records,
                     llvm::StringRef title);

/// Writes `text` to `path` (moss::writeFileAtomically), creating its
/// directory if needed.
llvm::Error writeTextFile(llvm::StringRef path, llvm::StringRef text);

} // namespace moss::tune

#endif // MOSS_TOOLS_MOSSTUNE_RECORDS_H
