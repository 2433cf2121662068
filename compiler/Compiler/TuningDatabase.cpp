//===- TuningDatabase.cpp - Measured tile configurations ------------------===//
//
// The JSON format of docs/TUNING.md: reading with a check of every field,
// writing sorted and pretty-printed, atomically; and the lookup.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/TuningDatabase.h"

#include "moss/Support/AtomicFile.h"
#include "moss/Support/UntrustedInput.h"

#include "llvm/ADT/ScopeExit.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <tuple>

using namespace llvm;
using namespace moss;
using namespace moss::compiler;

static const char *getFormatName(numerics::Fp8Format format) {
  return format == numerics::Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

//===----------------------------------------------------------------------===//
// TuningKey
//===----------------------------------------------------------------------===//

TuningKey TuningKey::get(const GemmSpec &spec, const TargetInfo &target,
                         int64_t m) {
  TuningKey key;
  key.arch = target.arch;
  key.smCount = target.smCount;
  key.a = std::string(getFormatName(spec.a)) + " " + spec.aScaling.str();
  key.b = std::string(getFormatName(spec.b)) + " " + spec.bScaling.str();
  key.out = getName(spec.out);
  key.mma = spec.multipliesInF16() ? "f16" : "fp8";
  key.n = spec.n;
  key.k = spec.k;
  key.mBucket = getRowsBucket(m);
  key.groups = spec.groups;
  return key;
}

static auto asTuple(const TuningKey &key) {
  return std::tie(key.arch, key.smCount, key.a, key.b, key.out, key.mma, key.n,
                  key.k, key.mBucket, key.groups);
}

bool compiler::operator==(const TuningKey &lhs, const TuningKey &rhs) {
  return asTuple(lhs) == asTuple(rhs);
}

bool TuningKey::sameGemm(const TuningKey &other) const {
  return a == other.a && b == other.b && out == other.out && mma == other.mma &&
         n == other.n && k == other.k && mBucket == other.mBucket &&
         groups == other.groups;
}

std::string TuningKey::str() const {
  return formatv("{0}/{1} SMs: {2} x {3} -> {4}{8}, N={5} K={6} M<={7}{9}",
                 arch, smCount, a, b, out, n, k, mBucket,
                 mma == "f16" ? ", f16 MMA" : "",
                 groups ? formatv(", {0} experts", groups).str() : "");
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// Reads the fields of one JSON object, with errors that say where.
class ObjectReader {
public:
  ObjectReader(const json::Object &object, std::string where)
      : object(object), where(std::move(where)) {}

  Error fail(const Twine &message) const {
    return createStringError(inconvertibleErrorCode(), where + ": " + message);
  }

  Expected<int64_t> integer(StringRef field, int64_t min, int64_t max) const {
    const json::Value *value = object.get(field);
    if (!value)
      return fail("missing '" + field + "' (an integer)");
    std::optional<int64_t> number = value->getAsInteger();
    if (!number)
      return fail("'" + field + "' must be an integer");
    if (*number < min || *number > max)
      return fail("'" + field + "' is " + Twine(*number) + "; expected " +
                  Twine(min) + " to " + Twine(max));
    return *number;
  }

  Expected<double> number(StringRef field) const {
    const json::Value *value = object.get(field);
    if (!value)
      return fail("missing '" + field + "' (a number)");
    std::optional<double> number = value->getAsNumber();
    if (!number || !std::isfinite(*number) || *number < 0)
      return fail("'" + field + "' must be a finite number >= 0");
    return *number;
  }

  Expected<std::string> string(StringRef field, bool required = true) const {
    const json::Value *value = object.get(field);
    if (!value) {
      if (!required)
        return std::string();
      return fail("missing '" + field + "' (a string)");
    }
    std::optional<StringRef> text = value->getAsString();
    if (!text || (required && text->empty()))
      return fail("'" + field + "' must be a non-empty string");
    return text->str();
  }

  Expected<const json::Object *> child(StringRef field,
                                       bool required = true) const {
    const json::Value *value = object.get(field);
    if (!value) {
      if (!required)
        return nullptr;
      return fail("missing '" + field + "' (an object)");
    }
    const json::Object *child = value->getAsObject();
    if (!child)
      return fail("'" + field + "' must be an object");
    return child;
  }

  const std::string &getWhere() const { return where; }

private:
  const json::Object &object;
  std::string where;
};

/// Collects the first error of a sequence of reads.
template <typename T> bool take(Expected<T> value, T &out, Error &error) {
  if (!value) {
    error = value.takeError();
    return false;
  }
  out = std::move(*value);
  return true;
}

Expected<TileConfig> readTiling(const json::Object &object,
                                const std::string &where) {
  ObjectReader reader(object, where);
  TileConfig tiling;
  Error error = Error::success();
  if (!take(reader.integer("tile_m", 1, 256), tiling.tileM, error) ||
      !take(reader.integer("tile_n", 1, 256), tiling.tileN, error) ||
      !take(reader.integer("stages", 2, 64), tiling.stages, error) ||
      !take(reader.integer("cluster_m", 1, 8), tiling.clusterM, error) ||
      !take(reader.integer("cluster_n", 1, 8), tiling.clusterN, error) ||
      !take(reader.integer("swizzle", 1, 1 << 16), tiling.swizzle, error) ||
      !take(reader.integer("split_k", 1, 64), tiling.splitK, error))
    return std::move(error);
  consumeError(std::move(error));
  Expected<std::string> raster = reader.string("raster");
  if (!raster)
    return raster.takeError();
  if (*raster == "along_m")
    tiling.raster = RasterOrder::AlongM;
  else if (*raster == "along_n")
    tiling.raster = RasterOrder::AlongN;
  else
    return reader.fail("'raster' is '" + *raster +
                       "'; expected along_m or along_n");
  tiling.source = TilingSource::Database;
  return tiling;
}

Expected<TuningTiming> readTiming(const json::Object &object,
                                  const std::string &where) {
  ObjectReader reader(object, where);
  Expected<const json::Object *> tiling = reader.child("tiling");
  if (!tiling)
    return tiling.takeError();
  TuningTiming timing;
  Expected<TileConfig> config = readTiling(**tiling, where + ".tiling");
  if (!config)
    return config.takeError();
  timing.tiling = *config;
  Error error = Error::success();
  if (!take(reader.number("ms"), timing.milliseconds, error) ||
      !take(reader.number("tflops"), timing.tflops, error))
    return std::move(error);
  consumeError(std::move(error));
  return timing;
}

Expected<TuningEntry> readEntry(const json::Object &object,
                                const std::string &where) {
  ObjectReader reader(object, where);
  TuningEntry entry;
  TuningKey &key = entry.key;
  int64_t sms = 0;
  Error error = Error::success();
  if (!take(reader.string("arch"), key.arch, error) ||
      !take(reader.integer("sm_count", 1, 1 << 16), sms, error) ||
      !take(reader.string("a"), key.a, error) ||
      !take(reader.string("b"), key.b, error) ||
      !take(reader.string("out"), key.out, error) ||
      !take(reader.string("mma", /*required=*/false), key.mma, error) ||
      !take(reader.integer("n", 1, INT32_MAX), key.n, error) ||
      !take(reader.integer("k", 1, INT32_MAX), key.k, error) ||
      !take(reader.integer("m_bucket", 1, int64_t(1) << 31), key.mBucket,
            error) ||
      !take(reader.integer("m", 1, INT32_MAX), entry.m, error) ||
      (object.get("groups") &&
       !take(reader.integer("groups", 1, 1 << 20), key.groups, error)) ||
      !take(reader.string("device", /*required=*/false), entry.device, error) ||
      !take(reader.string("date"), entry.date, error) ||
      !take(reader.integer("candidates_timed", 0, 1 << 20),
            entry.candidatesTimed, error))
    return std::move(error);
  consumeError(std::move(error));
  key.smCount = static_cast<unsigned>(sms);
  if (key.out != "bf16" && key.out != "f16" && key.out != "f32")
    return reader.fail("'out' is '" + key.out + "'; expected bf16, f16 or f32");
  if (key.mma.empty())
    key.mma = "fp8";
  if (key.mma != "fp8" && key.mma != "f16")
    return reader.fail("'mma' is '" + key.mma + "'; expected fp8 or f16");
  if (!isPowerOf2_64(static_cast<uint64_t>(key.mBucket)))
    return reader.fail("'m_bucket' is " + Twine(key.mBucket) +
                       "; expected a power of two");
  if (getRowsBucket(entry.m) != key.mBucket)
    return reader.fail("'m' is " + Twine(entry.m) +
                       ", which is not in bucket " + Twine(key.mBucket) +
                       " (expected " + Twine(key.mBucket / 2 + 1) + " to " +
                       Twine(key.mBucket) + ")");

  Expected<const json::Object *> best = reader.child("best");
  if (!best)
    return best.takeError();
  Expected<TuningTiming> bestTiming = readTiming(**best, where + ".best");
  if (!bestTiming)
    return bestTiming.takeError();
  entry.best = *bestTiming;
  Expected<const json::Object *> heuristic =
      reader.child("heuristic", /*required=*/false);
  if (!heuristic)
    return heuristic.takeError();
  if (*heuristic) {
    Expected<TuningTiming> timing =
        readTiming(**heuristic, where + ".heuristic");
    if (!timing)
      return timing.takeError();
    entry.heuristic = *timing;
    entry.heuristic->tiling.source = TilingSource::Heuristic;
  }
  return entry;
}

} // namespace

Expected<TuningDatabase> TuningDatabase::parse(StringRef text, StringRef name) {
  auto fail = [&](const Twine &message) -> Error {
    return createStringError(inconvertibleErrorCode(),
                             "tuning database '" + name + "': " + message);
  };
  // The parser recurses: a file nested deeper than any database is refused
  // before it can exhaust the stack.
  if (Error e = checkJsonNesting(text, kMaxJsonDepth))
    return fail(toString(std::move(e)));
  Expected<json::Value> root = json::parse(text);
  if (!root)
    return fail("not valid JSON: " + toString(root.takeError()));
  const json::Object *object = root->getAsObject();
  if (!object)
    return fail("expected a JSON object at the top level");
  std::optional<StringRef> format = object->getString("format");
  if (!format || *format != kTuningDatabaseFormat)
    return fail("'format' must be \"" + kTuningDatabaseFormat + "\"");
  std::optional<int64_t> version = object->getInteger("version");
  if (!version)
    return fail("missing 'version' (an integer)");
  if (*version < 1 || *version > kTuningDatabaseVersion)
    return fail("format version " + Twine(*version) +
                "; this build reads versions 1 to " +
                Twine(kTuningDatabaseVersion) +
                " (re-run moss-tune to rebuild it)");
  const json::Array *list = object->getArray("entries");
  if (!list)
    return fail("missing 'entries' (an array)");

  TuningDatabase database;
  for (auto [index, value] : llvm::enumerate(*list)) {
    std::string where = formatv("entry {0}", index).str();
    const json::Object *entryObject = value.getAsObject();
    if (!entryObject)
      return fail(where + ": expected an object");
    Expected<TuningEntry> entry = readEntry(*entryObject, where);
    if (!entry)
      return fail(toString(entry.takeError()));
    if (database.find(entry->key))
      return fail(where + ": a second entry for " + entry->key.str());
    database.entries.push_back(std::move(*entry));
  }
  return database;
}

Expected<TuningDatabase> TuningDatabase::load(StringRef path) {
  Expected<std::unique_ptr<MemoryBuffer>> buffer =
      readRegularFile(path, kMaxDatabaseBytes, "the tuning database");
  if (!buffer)
    return buffer.takeError();
  return parse((*buffer)->getBuffer(), path);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

static void writeTiling(json::OStream &os, const TileConfig &tiling) {
  os.attributeObject("tiling", [&] {
    os.attribute("tile_m", tiling.tileM);
    os.attribute("tile_n", tiling.tileN);
    os.attribute("stages", tiling.stages);
    os.attribute("cluster_m", tiling.clusterM);
    os.attribute("cluster_n", tiling.clusterN);
    os.attribute("raster",
                 tiling.raster == RasterOrder::AlongM ? "along_m" : "along_n");
    os.attribute("swizzle", tiling.swizzle);
    os.attribute("split_k", tiling.splitK);
  });
}

static void writeTiming(json::OStream &os, StringRef name,
                        const TuningTiming &timing) {
  os.attributeObject(name, [&] {
    writeTiling(os, timing.tiling);
    // Enough digits for the measurement, few enough to read. llvm::format
    // grows its buffer: formatv's 32 bytes would cut 1e40 TFLOPS, which the
    // reader takes, to its first 31 digits.
    os.attributeBegin("ms");
    os.rawValue(
        [&](raw_ostream &out) { out << format("%.6f", timing.milliseconds); });
    os.attributeEnd();
    os.attributeBegin("tflops");
    os.rawValue(
        [&](raw_ostream &out) { out << format("%.2f", timing.tflops); });
    os.attributeEnd();
  });
}

std::string TuningDatabase::toJson() const {
  std::vector<const TuningEntry *> sorted;
  for (const TuningEntry &entry : entries)
    sorted.push_back(&entry);
  llvm::stable_sort(sorted, [](const TuningEntry *l, const TuningEntry *r) {
    return asTuple(l->key) < asTuple(r->key);
  });

  std::string text;
  raw_string_ostream stream(text);
  json::OStream os(stream, /*IndentSize=*/2);
  os.object([&] {
    os.attribute("format", kTuningDatabaseFormat);
    const bool grouped = llvm::any_of(entries, [](const TuningEntry &entry) {
      return entry.key.groups != 0;
    });
    os.attribute("version", grouped ? kTuningDatabaseVersion : int64_t(1));
    os.attributeArray("entries", [&] {
      for (const TuningEntry *entry : sorted) {
        const TuningKey &key = entry->key;
        os.object([&] {
          os.attribute("arch", key.arch);
          os.attribute("sm_count", static_cast<int64_t>(key.smCount));
          os.attribute("a", key.a);
          os.attribute("b", key.b);
          os.attribute("out", key.out);
          if (key.mma != "fp8")
            os.attribute("mma", key.mma);
          os.attribute("n", key.n);
          os.attribute("k", key.k);
          os.attribute("m_bucket", key.mBucket);
          if (key.groups)
            os.attribute("groups", key.groups);
          os.attribute("m", entry->m);
          writeTiming(os, "best", entry->best);
          if (entry->heuristic)
            writeTiming(os, "heuristic", *entry->heuristic);
          os.attribute("candidates_timed", entry->candidatesTimed);
          if (!entry->device.empty())
            os.attribute("device", entry->device);
          os.attribute("date", entry->date);
        });
      }
    });
  });
  stream << "\n";
  return text;
}

Error TuningDatabase::saveMerged(StringRef path) const {
  SmallString<256> directory(path);
  sys::path::remove_filename(directory);
  if (!directory.empty())
    if (std::error_code ec = sys::fs::create_directories(directory))
      return createStringError(ec, "cannot create the directory '" +
                                       directory + "' for the tuning "
                                       "database: " + ec.message());
  // The lock file stays: removing it could race with a process waiting on
  // it. It holds nothing.
  std::string lockPath = (path + ".lock").str();
  int fd = -1;
  if (std::error_code ec = sys::fs::openFileForWrite(
          lockPath, fd, sys::fs::CD_OpenAlways, sys::fs::OF_None))
    return createStringError(ec, "cannot open '" + lockPath +
                                     "': " + ec.message());
  scope_exit closeLock([&] { sys::fs::closeFile(fd); });
  if (std::error_code ec = sys::fs::lockFile(fd))
    return createStringError(ec, "cannot lock '" + lockPath +
                                     "': " + ec.message());
  scope_exit unlock([&] { sys::fs::unlockFile(fd); });
  TuningDatabase merged;
  if (sys::fs::exists(path)) {
    Expected<TuningDatabase> onDisk = load(path);
    if (!onDisk)
      return createStringError(inconvertibleErrorCode(),
                               toString(onDisk.takeError()) +
                                   "; the file is left as it is");
    merged = std::move(*onDisk);
  }
  for (const TuningEntry &entry : entries)
    merged.insert(entry);
  return merged.save(path);
}

Error TuningDatabase::save(StringRef path) const {
  if (Error e = createParentDirectories(path))
    return e;
  std::string text = toJson();
  return writeFileAtomically(path, ArrayRef<char>(text.data(), text.size()));
}

//===----------------------------------------------------------------------===//
// Entries and lookup
//===----------------------------------------------------------------------===//

void TuningDatabase::insert(TuningEntry entry) {
  entry.best.tiling.source = TilingSource::Database;
  for (TuningEntry &existing : entries)
    if (existing.key == entry.key) {
      existing = std::move(entry);
      return;
    }
  entries.push_back(std::move(entry));
}

const TuningEntry *TuningDatabase::find(const TuningKey &key) const {
  for (const TuningEntry &entry : entries)
    if (entry.key == key)
      return &entry;
  return nullptr;
}

std::optional<TileConfig>
TuningDatabase::lookup(const GemmSpec &spec, const TargetInfo &target,
                       int64_t m,
                       function_ref<void(const Twine &)> note) const {
  TuningKey key = TuningKey::get(spec, target, m);
  std::optional<TileConfig> found;
  for (const TuningEntry &entry : entries) {
    if (!entry.key.sameGemm(key))
      continue;
    if (entry.key.arch != key.arch || entry.key.smCount != key.smCount) {
      if (note)
        note("tuning database entry ignored: it was measured on " +
             entry.key.arch + " with " + Twine(entry.key.smCount) +
             " SMs; this GPU is " + key.arch + " with " + Twine(key.smCount) +
             " SMs (" + key.str() + ")");
      continue;
    }
    TileConfig tiling = entry.best.tiling;
    tiling.source = TilingSource::Database;
    // What the Hopper kernel implements beyond checkTiling's structural
    // rules (templates/moss/gemm/config.cuh, validate()).
    if (tiling.clusterM * tiling.clusterN > 2 || tiling.splitK != 1) {
      if (note)
        note("tuning database entry ignored: tiling " + tiling.str() +
             ": the kernel takes clusters 1x1, 2x1 or 1x2 and split_k 1 (" +
             key.str() + ")");
      continue;
    }
    if (Error error = checkTiling(spec, tiling, target)) {
      if (note)
        note("tuning database entry ignored: " + toString(std::move(error)) +
             " (" + key.str() + ")");
      continue;
    }
    found = tiling;
  }
  return found;
}

llvm::Expected<TileConfig>
moss::compiler::chooseTiling(const GemmSpec &spec, const TargetInfo &target,
                             const TilingChoice &choice) {
  const int64_t m =
      choice.launchRows > 0 ? choice.launchRows : choice.heuristic.assumedM;
  if (choice.database) {
    const int64_t tuningM = getTuningM(spec, m);
    if (std::optional<TileConfig> tuned =
            choice.database->lookup(spec, target, tuningM, choice.onNote))
      return *tuned;
    if (choice.onNote)
      choice.onNote("no tuning database entry for " +
                    TuningKey::get(spec, target, tuningM).str() +
                    "; using the heuristic");
  }
  if (choice.launchRows > 0)
    return selectTilingForLaunch(spec, choice.launchRows, target,
                                 choice.heuristic);
  return selectTiling(spec, target, choice.heuristic);
}
