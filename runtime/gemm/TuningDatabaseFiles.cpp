//===- TuningDatabaseFiles.cpp - Tuning databases read once per version ---===//

#include "TuningDatabaseFiles.h"

#include "moss/Gemm/Gemm.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace llvm;
using namespace moss;

std::string
moss::getDefaultTuningDatabasePath(const runtime::KernelCache &cache) {
  if (const char *path = std::getenv("MOSS_TUNING_DB"))
    return path;
  std::string directory = cache.getDirectory();
  if (directory.empty())
    return "";
  SmallString<256> path(directory);
  sys::path::append(path, "tuning.json");
  return std::string(path);
}

std::shared_ptr<const compiler::TuningDatabase>
moss::detail::TuningDatabaseFiles::get(const std::string &path,
                                 const compiler::GemmSpec &spec,
                                 bool verbose) {
  sys::fs::file_status status;
  if (sys::fs::status(path, status) || !sys::fs::exists(status)) {
    if (verbose)
      errs() << "moss: note: no tuning database at '" << path
             << "'; the heuristic tiles " << spec.str() << "\n";
    return nullptr;
  }
  auto [it, inserted] = files.try_emplace(path);
  File &file = it->second;
  if (inserted || file.modified != status.getLastModificationTime() ||
      file.size != status.getSize()) {
    file.modified = status.getLastModificationTime();
    file.size = status.getSize();
    Expected<compiler::TuningDatabase> loaded =
        compiler::TuningDatabase::load(path);
    if (loaded) {
      file.database =
          std::make_shared<compiler::TuningDatabase>(std::move(*loaded));
    } else {
      file.database.reset();
      errs() << "moss: warning: ignoring the tuning database: "
             << toString(loaded.takeError()) << "\n";
    }
  }
  return file.database;
}
