//===- TuningDatabaseFuzzer.cpp - libFuzzer target: the tuning database ---===//
//
// Any text gives a database or an error that says what is wrong. A database
// is looked up as the compiler and the runtime do (each entry's tiling goes
// through the tiling checks), and what it writes reads back as itself.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "moss/Compiler/TuningDatabase.h"

#include <cstddef>
#include <cstdint>

using namespace moss;
using namespace moss::compiler;
using moss::fuzz::check;
using numerics::ScalingScheme;

/// GEMMs of the lit tests' databases: a lookup of one of them reaches the
/// checks of a mutated entry's tiling.
static std::vector<GemmSpec> getLookupSpecs() {
  auto make = [](int64_t n, int64_t k, ScalingScheme a) {
    GemmSpec spec;
    spec.n = n;
    spec.k = k;
    spec.aScaling = a;
    spec.bScaling = ScalingScheme::perTensor();
    spec.fold = numerics::BlockScaleFold::None;
    return spec;
  };
  return {make(11008, 4096,
               ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32)),
          make(4096, 4096, ScalingScheme::perTensor())};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::vector<GemmSpec> specs = getLookupSpecs();
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<TuningDatabase> db = TuningDatabase::parse(text, "fuzz.json");
  if (!db) {
    fuzz::checkMessage(db.takeError(), "a database error without a message");
    return 0;
  }
  for (const TuningEntry &entry : db->getEntries()) {
    check(db->find(entry.key) == &entry, "an entry not found by its key");
    TargetInfo target;
    target.arch = entry.key.arch;
    target.smCount = entry.key.smCount;
    for (const GemmSpec &spec : specs)
      (void)db->lookup(spec, target, entry.m, [](const llvm::Twine &note) {
        check(!note.str().empty(), "an empty lookup note");
      });
  }

  std::string written = db->toJson();
  llvm::Expected<TuningDatabase> again =
      TuningDatabase::parse(written, "written.json");
  if (!again) {
    std::string message = llvm::toString(again.takeError());
    check(false, "toJson wrote a database parse refuses: " + message);
  }
  check(again->getEntries().size() == db->getEntries().size(),
        "a database written and read back has other entries");
  check(again->toJson() == written,
        "a database written and read back writes other text");
  return 0;
}
