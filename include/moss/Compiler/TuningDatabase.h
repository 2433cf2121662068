//===- TuningDatabase.h - Measured tile configurations ----------*- C++ -*-===//
//
// The tuning database: what `moss-tune` measured as the fastest tile
// configuration of a GEMM on one kind of GPU, stored as a versioned,
// human-readable JSON file (docs/TUNING.md). The moss-select-tiling pass,
// compileGemm() and moss::GemmRunner look a GEMM up here before they fall
// back to the heuristic of Tiling.h.
//
// An entry is keyed by the GPU (arch and SM count), the operands (FP8 format
// and scaling scheme of A and of B), the output type, N, K and an M bucket
// (getRowsBucket). Entries measured on another arch or SM count never
// match; a lookup can say why through its note callback. A file that fails
// any check loads as an error, which callers report and then ignore: a
// corrupt database is never trusted.
//
// Plain C++ (llvm::json), no MLIR: the runtime and the tuner use it too.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_TUNINGDATABASE_H
#define MOSS_COMPILER_TUNINGDATABASE_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moss::compiler {

/// The largest tuning database or shapes file read (a real one is a few
/// hundred KiB) and the deepest JSON nesting parsed (a database nests 4).
constexpr uint64_t kMaxDatabaseBytes = uint64_t(64) << 20;
constexpr unsigned kMaxJsonDepth = 64;

/// The `"format"` string of a tuning database file.
constexpr llvm::StringLiteral kTuningDatabaseFormat = "moss-tuning-db";
/// The newest format version this build reads (it reads version 1 too), and
/// writes where an entry needs it: version 2 added grouped entries
/// (TuningKey::groups), so that a build that knows only version 1 rejects a
/// file holding them instead of reading them as plain GEMMs' entries.
constexpr int64_t kTuningDatabaseVersion = 2;

/// What an entry is keyed by.
struct TuningKey {
  /// The GPU: CUDA arch (e.g. "sm_90a") and streaming multiprocessors.
  std::string arch;
  unsigned smCount = 0;
  /// Each operand's FP8 format and scheme, e.g. "e4m3 two-level(row, 32)".
  std::string a, b;
  /// The output type: "bf16", "f16" or "f32".
  std::string out;
  /// What the tensor cores multiply: "fp8" or "f16" (GemmSpec::
  /// multipliesInF16). The f16 MMA's kernels are other kernels, timed
  /// apart. Written only when "f16", so FP8 entries read as before.
  std::string mma = "fp8";
  int64_t n = 0, k = 0;
  /// getRowsBucket of the M (an m-grouped GEMM's: all experts' rows).
  int64_t mBucket = 1;
  /// The experts of a contiguous m-grouped GEMM (GemmSpec::groups), 0 for
  /// a plain GEMM. Written only when nonzero, so plain entries read as
  /// before. Masked and k-grouped GEMMs have no entries.
  int64_t groups = 0;

  /// The key of `spec` at `m` rows on `target` (the bias, accumulate and
  /// amax of the epilogue are not part of it). `spec` is a plain GEMM or a
  /// contiguous m-grouped one (hasTuningEntries).
  static TuningKey get(const GemmSpec &spec, const TargetInfo &target,
                       int64_t m);
  /// Whether the two keys are equal except for arch and SM count.
  bool sameGemm(const TuningKey &other) const;
  /// E.g. "sm_90a/132 SMs: e4m3 two-level(row, 32) x e4m3 per-tensor -> bf16,
  /// N=11008 K=4096 M<=2048".
  std::string str() const;
};

/// Field-by-field equality.
bool operator==(const TuningKey &lhs, const TuningKey &rhs);

/// Whether a database may hold tilings of `spec`: plain GEMMs and contiguous
/// m-grouped ones, not the masked or k-grouped layouts.
inline bool hasTuningEntries(const GemmSpec &spec) {
  return spec.groups == 0 || (!spec.maskedGroups && !spec.groupedK);
}

/// One timed tile configuration.
struct TuningTiming {
  TileConfig tiling;
  /// Median kernel time in milliseconds, and the TFLOPS it makes.
  double milliseconds = 0;
  double tflops = 0;
};

/// One tuned GEMM.
struct TuningEntry {
  TuningKey key;
  /// The M that was measured (inside key.mBucket).
  int64_t m = 0;
  /// The fastest configuration (its source is TilingSource::Database).
  TuningTiming best;
  /// What the heuristic chose without the database, when it was timed.
  std::optional<TuningTiming> heuristic;
  /// The GPU's name, e.g. "NVIDIA H200" (informational).
  std::string device;
  /// When it was measured: ISO 8601 UTC, e.g. "2026-12-01T10:15:00Z".
  std::string date;
  /// Candidates timed and verified for this entry.
  int64_t candidatesTimed = 0;
};

/// A set of entries, at most one per key.
class TuningDatabase {
public:
  /// Parses the JSON text of a database; `name` (a path) prefixes the error,
  /// which names the entry and the field that is wrong and what was
  /// expected.
  static llvm::Expected<TuningDatabase> parse(llvm::StringRef text,
                                              llvm::StringRef name);
  /// Reads and parses `path`. A missing file is an error too; callers that
  /// treat it as an empty database check for it first.
  static llvm::Expected<TuningDatabase> load(llvm::StringRef path);

  /// The file's text: pretty-printed JSON, entries sorted by key.
  std::string toJson() const;
  /// Writes toJson() to `path` atomically (a temporary file in the same
  /// directory, then rename), creating the directory when needed.
  llvm::Error save(llvm::StringRef path) const;
  /// Adds this database's entries to the file at `path` (replacing those
  /// with the same keys, keeping the others) and saves the result, under an
  /// exclusive lock on `<path>.lock`: processes tuning into one file at once
  /// keep each other's entries. A file that exists but cannot be read is
  /// left as it is and is an error.
  llvm::Error saveMerged(llvm::StringRef path) const;

  /// Adds `entry`, replacing one with the same key.
  void insert(TuningEntry entry);
  /// The entry with exactly `key`, if any.
  const TuningEntry *find(const TuningKey &key) const;
  /// All entries, in insertion order.
  llvm::ArrayRef<TuningEntry> getEntries() const { return entries; }

  /// The tuned configuration of `spec` at `m` rows on `target` (source
  /// TilingSource::Database), if there is an entry for this GPU and it fits
  /// the target (checkTiling). Entries of the same GEMM for another arch or
  /// SM count, and entries that do not fit, are skipped with a call to
  /// `note` saying why. FP8 and f16 MMA kernels have keys of their own.
  std::optional<TileConfig>
  lookup(const GemmSpec &spec, const TargetInfo &target, int64_t m,
         llvm::function_ref<void(const llvm::Twine &)> note = nullptr) const;

private:
  std::vector<TuningEntry> entries;
};

/// The M a lookup uses for `spec`: a static M itself, else `dynamicM`.
inline int64_t getTuningM(const GemmSpec &spec, int64_t dynamicM) {
  return spec.isDynamicM() ? dynamicM : spec.m;
}

/// What chooseTiling needs besides the spec and the target.
struct TilingChoice {
  /// Consulted first when set.
  const TuningDatabase *database = nullptr;
  /// The rows of the launch the kernel is for (the runtime), planned by
  /// selectTilingForLaunch; 0 for a kernel of any M (the moss-select-tiling
  /// pass, compileGemm), planned by selectTiling for `heuristic.assumedM`.
  int64_t launchRows = 0;
  TilingOptions heuristic;
  /// Called with each reason the database gave no tiling.
  llvm::function_ref<void(const llvm::Twine &)> onNote = nullptr;
};

/// The one rule for a GEMM whose tiling is not given: the tuning
/// database's entry for `spec` (the kernel's spec, folds applied) on
/// `target` at the M bucket of the launch (or of `heuristic.assumedM`),
/// else the heuristic's. Every path that tiles a GEMM calls it once and
/// hands the result on.
llvm::Expected<TileConfig> chooseTiling(const GemmSpec &spec,
                                        const TargetInfo &target,
                                        const TilingChoice &choice);

} // namespace moss::compiler

#endif // MOSS_COMPILER_TUNINGDATABASE_H
