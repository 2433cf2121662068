//===- TuningDatabaseFiles.h - Tuning databases read once per version -*- C++ -*-===//
//
// The tuning databases a GemmRunner consults, by path: read on first use
// and again when the file's time or size changes.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_GEMM_TUNINGDATABASEFILES_H
#define MOSS_RUNTIME_GEMM_TUNINGDATABASEFILES_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/TuningDatabase.h"

#include "llvm/Support/Chrono.h"

#include <memory>
#include <string>
#include <unordered_map>

namespace moss::detail {

class TuningDatabaseFiles {
public:
  /// The database at `path`, read again when the file changes; null when
  /// there is none (a note on stderr when `verbose`, naming `spec`) or it
  /// fails its checks (a warning on stderr, once per version of the file).
  std::shared_ptr<const compiler::TuningDatabase>
  get(const std::string &path, const compiler::GemmSpec &spec, bool verbose);

private:
  struct File {
    llvm::sys::TimePoint<> modified;
    uint64_t size = 0;
    /// Null when the file failed its checks.
    std::shared_ptr<const compiler::TuningDatabase> database;
  };
  std::unordered_map<std::string, File> files;
};

} // namespace moss::detail

#endif // MOSS_RUNTIME_GEMM_TUNINGDATABASEFILES_H
