//===- TuningDatabaseTest.cpp - The tuning database -----------------------===//
//
// moss/Compiler/TuningDatabase.h: the JSON round trip and the atomic save,
// what a corrupt or wrong-version file reports, entries of another GPU
// ignored with a note, and the M buckets.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/TuningDatabase.h"
#include "GemmSpecs.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/Testing/Support/SupportHelpers.h"

#include "gtest/gtest.h"

#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

TileConfig tiling(int64_t tileM, int64_t tileN, int64_t stages) {
  TileConfig config;
  config.tileM = tileM;
  config.tileN = tileN;
  config.stages = stages;
  config.raster = RasterOrder::AlongN;
  config.swizzle = 4;
  return config;
}

TuningEntry entry(const GemmSpec &spec, const TargetInfo &target, int64_t m,
                  TileConfig best) {
  TuningEntry e;
  e.key = TuningKey::get(spec, target, m);
  e.m = m;
  e.best.tiling = best;
  e.best.milliseconds = 0.125;
  e.best.tflops = 721.5;
  e.device = "NVIDIA H200";
  e.date = "2026-12-01T10:00:00Z";
  e.candidatesTimed = 32;
  return e;
}

std::string errorOf(llvm::Expected<TuningDatabase> database) {
  if (database)
    return "";
  return llvm::toString(database.takeError());
}

TEST(TuningDatabaseTest, Buckets) {
  EXPECT_EQ(getRowsBucket(0), 1);
  EXPECT_EQ(getRowsBucket(1), 1);
  EXPECT_EQ(getRowsBucket(2), 2);
  EXPECT_EQ(getRowsBucket(16), 16);
  EXPECT_EQ(getRowsBucket(17), 32);
  EXPECT_EQ(getRowsBucket(2048), 2048);
  EXPECT_EQ(getRowsBucket(3000), 4096);
  EXPECT_EQ(getRowsBucket(16384), 16384);
}

TEST(TuningDatabaseTest, RoundTrip) {
  TargetInfo h200;
  TuningDatabase database;
  TuningEntry first = entry(mossForward(), h200, 2048, tiling(128, 128, 6));
  first.heuristic = TuningTiming{tiling(128, 96, 7), 0.25, 360.0};
  database.insert(first);
  database.insert(entry(mossForward(), h200, 1, tiling(128, 32, 8)));

  std::string text = database.toJson();
  EXPECT_NE(text.find("\"version\": 1"), std::string::npos) << text;
  EXPECT_NE(text.find("\"a\": \"e4m3 two-level(row, 32)\""), std::string::npos)
      << text;
  llvm::Expected<TuningDatabase> parsed = TuningDatabase::parse(text, "t");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  ASSERT_EQ(parsed->getEntries().size(), 2u);
  const TuningEntry *back = parsed->find(first.key);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->m, 2048);
  EXPECT_EQ(back->best.tiling.tileN, 128);
  EXPECT_EQ(back->best.tiling.raster, RasterOrder::AlongN);
  EXPECT_EQ(back->best.tiling.source, TilingSource::Database);
  ASSERT_TRUE(back->heuristic.has_value());
  EXPECT_EQ(back->heuristic->tiling.tileN, 96);
  EXPECT_DOUBLE_EQ(back->best.tflops, 721.5);
  EXPECT_EQ(back->date, "2026-12-01T10:00:00Z");
  // Writing again gives the same text (sorted, stable).
  EXPECT_EQ(parsed->toJson(), text);

  // Replacing an entry keeps one per key.
  TuningDatabase copy = *parsed;
  copy.insert(entry(mossForward(), h200, 2000, tiling(256, 64, 4)));
  EXPECT_EQ(copy.getEntries().size(), 2u);
  EXPECT_EQ(copy.find(first.key)->best.tiling.tileM, 256);
}

TEST(TuningDatabaseTest, HugeTimingsAreWrittenInFull) {
  // The reader takes any finite number >= 0; what it took is written back
  // digit for digit, however long (found by TuningDatabaseFuzzer).
  TuningDatabase database;
  TuningEntry huge = entry(mossForward(), TargetInfo(), 16, tiling(128, 96, 7));
  huge.best.tflops = 1e40;
  huge.best.milliseconds = 3e30;
  database.insert(huge);
  std::string text = database.toJson();
  llvm::Expected<TuningDatabase> parsed = TuningDatabase::parse(text, "t");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  ASSERT_EQ(parsed->getEntries().size(), 1u);
  EXPECT_EQ(parsed->getEntries()[0].best.tflops, 1e40) << text;
  EXPECT_EQ(parsed->getEntries()[0].best.milliseconds, 3e30) << text;
  EXPECT_EQ(parsed->toJson(), text);
}

TEST(TuningDatabaseTest, SaveAndLoad) {
  llvm::unittest::TempDir temp("moss-tuning-test", /*Unique=*/true);
  const llvm::StringRef directory = temp.path();
  llvm::SmallString<128> path(directory);
  llvm::sys::path::append(path, "sub", "tuning.json");
  TuningDatabase database;
  database.insert(entry(mossForward(), TargetInfo(), 128, tiling(128, 64, 8)));
  ASSERT_FALSE(bool(database.save(path)));
  llvm::Expected<TuningDatabase> loaded = TuningDatabase::load(path);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->getEntries().size(), 1u);
  // No temporary file is left behind.
  std::error_code ec;
  int files = 0;
  for (llvm::sys::fs::directory_iterator it((directory + "/sub").str(), ec),
       end;
       it != end && !ec; it.increment(ec))
    ++files;
  EXPECT_EQ(files, 1);
  EXPECT_NE(errorOf(TuningDatabase::load((directory + "/missing.json").str()))
                .find("cannot read the tuning database"),
            std::string::npos);
}

TEST(TuningDatabaseTest, CorruptFiles) {
  EXPECT_NE(errorOf(TuningDatabase::parse("{\"format\": ", "db.json"))
                .find("tuning database 'db.json': not valid JSON"),
            std::string::npos);
  EXPECT_NE(errorOf(TuningDatabase::parse("[]", "db.json"))
                .find("expected a JSON object"),
            std::string::npos);
  EXPECT_NE(errorOf(TuningDatabase::parse(
                        R"({"format": "other", "version": 1, "entries": []})",
                        "db.json"))
                .find("'format' must be \"moss-tuning-db\""),
            std::string::npos);

  // A truncated file (a torn copy) never parses.
  TuningDatabase database;
  database.insert(entry(mossForward(), TargetInfo(), 16, tiling(128, 32, 8)));
  std::string text = database.toJson();
  EXPECT_FALSE(
      errorOf(TuningDatabase::parse(text.substr(0, text.size() / 2), "db.json"))
          .empty());

  // A field of the wrong type or out of range names the entry and field.
  std::string bad = text;
  bad.replace(bad.find("\"tile_n\": 32"), 12, "\"tile_n\": \"x\"");
  EXPECT_NE(errorOf(TuningDatabase::parse(bad, "db.json"))
                .find("entry 0.best.tiling: 'tile_n' must be an integer"),
            std::string::npos)
      << errorOf(TuningDatabase::parse(bad, "db.json"));
  bad = text;
  bad.replace(bad.find("\"m\": 16"), 7, "\"m\": 40");
  EXPECT_NE(errorOf(TuningDatabase::parse(bad, "db.json"))
                .find("'m' is 40, which is not in bucket 16"),
            std::string::npos);
  bad = text;
  bad.replace(bad.find("\"out\": \"bf16\""), 13,
              "\"out\": \"bf16\", \"mma\": \"bf16\"");
  EXPECT_NE(errorOf(TuningDatabase::parse(bad, "db.json"))
                .find("'mma' is 'bf16'; expected fp8 or f16"),
            std::string::npos)
      << errorOf(TuningDatabase::parse(bad, "db.json"));
  bad = text;
  bad.replace(bad.find("\"along_n\""), 9, "\"sideways\"");
  EXPECT_NE(errorOf(TuningDatabase::parse(bad, "db.json"))
                .find("'raster' is 'sideways'; expected along_m or along_n"),
            std::string::npos);

  // Two entries with one key.
  TuningDatabase twice;
  twice.insert(entry(mossForward(), TargetInfo(), 16, tiling(128, 32, 8)));
  TargetInfo other;
  other.smCount = 114;
  twice.insert(entry(mossForward(), other, 16, tiling(128, 32, 8)));
  std::string duplicated = twice.toJson();
  duplicated.replace(duplicated.find("\"sm_count\": 114"), 15,
                     "\"sm_count\": 132");
  EXPECT_NE(errorOf(TuningDatabase::parse(duplicated, "db.json"))
                .find("entry 1: a second entry for"),
            std::string::npos);
}

TEST(TuningDatabaseTest, WrongVersion) {
  std::string error = errorOf(TuningDatabase::parse(
      R"({"format": "moss-tuning-db", "version": 3, "entries": []})",
      "db.json"));
  EXPECT_NE(error.find("format version 3; this build reads versions 1 to 2"),
            std::string::npos)
      << error;
  EXPECT_NE(errorOf(TuningDatabase::parse(
                        R"({"format": "moss-tuning-db", "entries": []})", "d"))
                .find("missing 'version'"),
            std::string::npos);
}

TEST(TuningDatabaseTest, LookupByBucket) {
  TargetInfo h200;
  TuningDatabase database;
  database.insert(entry(mossForward(), h200, 2048, tiling(128, 128, 6)));
  database.insert(entry(mossForward(), h200, 16, tiling(128, 32, 8)));

  // A dynamic spec is looked up at the launch M's bucket; a static one at
  // its own M.
  std::optional<TileConfig> found = database.lookup(mossForward(), h200, 1500);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->tileN, 128);
  EXPECT_EQ(found->source, TilingSource::Database);
  found = database.lookup(mossForward(9), h200, 9);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->tileN, 32);
  EXPECT_FALSE(database.lookup(mossForward(), h200, 1).has_value());
  EXPECT_FALSE(database.lookup(mossForward(), h200, 4096).has_value());

  // Another N, another scheme or another output type does not match.
  GemmSpec other = mossForward();
  other.n = 4096;
  EXPECT_FALSE(database.lookup(other, h200, 2048).has_value());
  other = mossForward();
  other.out = FloatType::F32;
  other.mma = MmaType::FP8;
  EXPECT_FALSE(database.lookup(other, h200, 2048).has_value());
  other = mossForward();
  other.aScaling = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  EXPECT_FALSE(database.lookup(other, h200, 2048).has_value());
  // The epilogue is not part of the key.
  other = mossForward();
  other.bias = FloatType::BF16;
  EXPECT_TRUE(database.lookup(other, h200, 2048).has_value());
}

TEST(TuningDatabaseTest, F16MmaEntriesAreTheirOwn) {
  const TargetInfo h200;
  GemmSpec fp8 = mossForward();
  fp8.out = FloatType::F32;
  fp8.mma = MmaType::FP8;
  GemmSpec byDefault = fp8; // f32: multiplies in f16
  byDefault.mma = MmaType::Auto;
  TuningDatabase database;
  database.insert(entry(fp8, h200, 2048, tiling(128, 128, 6)));
  EXPECT_TRUE(database.lookup(fp8, h200, 2048).has_value());
  // The FP8 kernel's timing says nothing about the f16 MMA's.
  EXPECT_FALSE(database.lookup(byDefault, h200, 2048).has_value());
  database.insert(entry(byDefault, h200, 2048, tiling(128, 128, 4)));
  ASSERT_EQ(database.getEntries().size(), 2u);
  std::optional<TileConfig> found = database.lookup(byDefault, h200, 2048);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->stages, 4);
  GemmSpec asked = mossForward(); // bf16 out, f16 asked for: another key
  asked.mma = MmaType::F16;
  EXPECT_FALSE(database.lookup(asked, h200, 2048).has_value());
  EXPECT_NE(TuningKey::get(byDefault, h200, 2048).str().find("f16 MMA"),
            std::string::npos);

  // The key's "mma" is written for f16 entries only, and read back.
  llvm::Expected<TuningDatabase> reread =
      TuningDatabase::parse(database.toJson(), "db.json");
  ASSERT_TRUE(bool(reread)) << llvm::toString(reread.takeError());
  EXPECT_EQ(reread->lookup(byDefault, h200, 2048)->stages, 4);
  EXPECT_EQ(reread->lookup(fp8, h200, 2048)->stages, 6);
  const std::string text = database.toJson();
  const size_t first = text.find("\"mma\": \"f16\"");
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("\"mma\"", first + 1), std::string::npos) << text;
}

TEST(TuningDatabaseTest, GroupedEntriesAreTheirOwn) {
  const TargetInfo h200;
  GemmSpec experts = mossForward();
  experts.groups = 64;
  TuningDatabase database;
  database.insert(entry(experts, h200, 16384, tiling(128, 128, 4)));
  EXPECT_FALSE(database.lookup(mossForward(), h200, 16384).has_value());
  GemmSpec other = experts;
  other.groups = 8;
  EXPECT_FALSE(database.lookup(other, h200, 16384).has_value());
  ASSERT_TRUE(database.lookup(experts, h200, 16384).has_value());
  EXPECT_NE(TuningKey::get(experts, h200, 16384).str().find(", 64 experts"),
            std::string::npos);
  EXPECT_FALSE(hasTuningEntries([&] {
    GemmSpec masked = experts;
    masked.maskedGroups = true;
    return masked;
  }()));

  // "groups" is written for grouped entries only, and read back; a file
  // holding one is version 2, which builds of version 1 reject.
  database.insert(entry(mossForward(), h200, 16384, tiling(128, 64, 6)));
  const std::string text = database.toJson();
  EXPECT_NE(text.find("\"version\": 2"), std::string::npos) << text;
  const size_t first = text.find("\"groups\": 64");
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("\"groups\"", first + 1), std::string::npos) << text;
  llvm::Expected<TuningDatabase> reread =
      TuningDatabase::parse(text, "db.json");
  ASSERT_TRUE(bool(reread)) << llvm::toString(reread.takeError());
  EXPECT_EQ(reread->lookup(experts, h200, 16384)->tileN, 128);
  EXPECT_EQ(reread->lookup(mossForward(), h200, 16384)->tileN, 64);
  std::string bad = text;
  bad.replace(first, std::strlen("\"groups\": 64"), "\"groups\": 0");
  EXPECT_NE(errorOf(TuningDatabase::parse(bad, "db.json")).find("'groups'"),
            std::string::npos);
  TuningDatabase plain;
  plain.insert(entry(mossForward(), h200, 16384, tiling(128, 64, 6)));
  EXPECT_NE(plain.toJson().find("\"version\": 1"), std::string::npos);
}

TEST(TuningDatabaseTest, OtherGpuIgnoredWithNote) {
  TargetInfo h100;
  h100.smCount = 114;
  TargetInfo ampere;
  ampere.arch = "sm_80";
  TuningDatabase database;
  database.insert(entry(mossForward(), h100, 128, tiling(128, 64, 8)));
  database.insert(entry(mossForward(), ampere, 128, tiling(128, 64, 8)));

  std::vector<std::string> notes;
  auto note = [&](const llvm::Twine &text) { notes.push_back(text.str()); };
  EXPECT_FALSE(database.lookup(mossForward(), TargetInfo(), 100, note));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("measured on sm_90a with 114 SMs; this GPU is "
                          "sm_90a with 132 SMs"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("measured on sm_80 with 132 SMs"), std::string::npos)
      << notes[1];
  // Without a note callback the lookup is just empty.
  EXPECT_FALSE(database.lookup(mossForward(), TargetInfo(), 100));
  // The H100 entry matches on an H100.
  EXPECT_TRUE(database.lookup(mossForward(), h100, 100).has_value());
}

TEST(TuningDatabaseTest, EntryThatDoesNotFitIsIgnored) {
  TargetInfo h200;
  TuningDatabase database;
  // Two-level scales promote with three accumulator sets: 256x256 does not
  // fit the registers.
  database.insert(entry(mossForward(), h200, 128, tiling(256, 256, 4)));
  TileConfig cluster4 = tiling(128, 64, 4);
  cluster4.clusterM = 4;
  database.insert(entry(mossForward(), h200, 256, cluster4));
  std::vector<std::string> notes;
  auto note = [&](const llvm::Twine &text) { notes.push_back(text.str()); };
  EXPECT_FALSE(database.lookup(mossForward(), h200, 128, note));
  EXPECT_FALSE(database.lookup(mossForward(), h200, 256, note));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("accumulator registers"), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("clusters 1x1, 2x1 or 1x2"), std::string::npos)
      << notes[1];
}

} // namespace

/// A GEMM of its own for each `i` (N differs).
GemmSpec specNumber(int i) {
  GemmSpec spec = mossForward();
  spec.n = 1024 + 32 * i;
  return spec;
}

// Two processes tuning into one file keep each other's entries: each save
// merges under a lock. Eight children each save 16 entries one at a time.
TEST(TuningDatabaseTest, ConcurrentSavesKeepEveryEntry) {
  llvm::unittest::TempDir dir("moss-db", /*Unique=*/true);
  std::string path = (dir.path() + "/tuning.json").str();
  const TargetInfo target;
  constexpr int kChildren = 8, kEach = 16;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int i = 0; i < kEach; ++i) {
        TuningDatabase mine;
        mine.insert(entry(specNumber(c * kEach + i), target, 4096,
                          tiling(128, 128, 4)));
        if (llvm::Error e = mine.saveMerged(path)) {
          llvm::consumeError(std::move(e));
          ::_exit(1);
        }
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  llvm::Expected<TuningDatabase> merged = TuningDatabase::load(path);
  ASSERT_TRUE(bool(merged)) << llvm::toString(merged.takeError());
  EXPECT_EQ(merged->getEntries().size(), size_t(kChildren * kEach));
  for (int i = 0; i < kChildren * kEach; ++i)
    EXPECT_TRUE(merged->find(TuningKey::get(specNumber(i), target, 4096)))
        << "entry " << i << " was lost";
}
