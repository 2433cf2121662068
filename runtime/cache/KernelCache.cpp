//===- KernelCache.cpp - Compiled kernels in memory and on disk -----------===//

#include "moss/Runtime/Cache/KernelCache.h"

#include "CacheDirectory.h"
#include "CacheFile.h"

#include "moss/Runtime/Nvrtc/Templates.h"
#include "moss/Support/AtomicFile.h"
#include "moss/Support/Npy.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

#include <mutex>
#include <set>

using namespace llvm;
namespace fs = llvm::sys::fs;

namespace moss::runtime {
namespace {

constexpr uint64_t kDefaultMaxDiskBytes = uint64_t(1) << 30;
/// The largest cache entry read: PTX and cubin of one kernel are at most a
/// few MiB.
constexpr uint64_t kMaxEntryBytes = uint64_t(256) << 20;

void printBytes(raw_ostream &os, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0)
    os << bytes << " B";
  else
    os << format("%.1f %s", value, units[unit]);
}

} // namespace

Expected<uint64_t> parseByteCount(StringRef text) {
  StringRef rest = text.trim();
  uint64_t value = 0;
  if (rest.consumeInteger(10, value))
    return createStringError(inconvertibleErrorCode(),
                             "'" + text +
                                 "' is not a byte count (expected e.g. "
                                 "1073741824, 512M or 1G)");
  rest = rest.trim();
  // "iB" and "B" after the unit letter are optional: 1G, 1GB, 1GiB.
  if (!rest.consume_back_insensitive("ib"))
    rest.consume_back_insensitive("b");
  unsigned shift = 0;
  if (rest.equals_insensitive("k"))
    shift = 10;
  else if (rest.equals_insensitive("m"))
    shift = 20;
  else if (rest.equals_insensitive("g"))
    shift = 30;
  else if (rest.equals_insensitive("t"))
    shift = 40;
  else if (!rest.empty())
    return createStringError(inconvertibleErrorCode(),
                             "'" + text +
                                 "' is not a byte count (units are K, M, G "
                                 "and T, powers of 1024)");
  if (shift && value > (UINT64_MAX >> shift))
    return createStringError(inconvertibleErrorCode(),
                             "byte count '" + text + "' is too large");
  return value << shift;
}

KernelCache::KernelCache(KernelCacheOptions options)
    : options(std::move(options)) {}

KernelCache::~KernelCache() = default;

const KernelCompiler &KernelCache::getCompiler() {
  // Resolved on first use: loading NVRTC to learn its version is not free.
  std::call_once(compilerOnce, [this] {
    compiler = options.compiler.compile ? options.compiler : getNvrtcCompiler();
  });
  return compiler;
}

Expected<CacheKey> KernelCache::getKey(StringRef source,
                                       const CompileOptions &compileOptions) {
  CompileOptions resolved = resolveCompileOptions(compileOptions);
  Expected<std::vector<std::string>> flags = getNvrtcFlags(resolved);
  if (!flags)
    return flags.takeError();
  CacheKeyInputs inputs;
  inputs.source = source;
  inputs.templateHash = resolved.includeTemplates ? getTemplateHash() : 0;
  inputs.compilerVersion = getCompiler().version;
  inputs.arch = resolved.arch;
  inputs.flags = *flags;
  inputs.headers = resolved.headers;
  inputs.programName = resolved.programName;
  return computeCacheKey(inputs);
}

std::string KernelCache::getDirectory() const {
  if (!options.useDisk)
    return "";
  return options.directory.empty() ? getDefaultCacheDirectory()
                                   : options.directory;
}

std::vector<std::string> KernelCache::getReadOnlyDirectories() const {
  if (!options.useDisk || !options.directory.empty())
    return {};
  return getReadOnlyCacheDirectories();
}

std::string KernelCache::getEntryPath(const CacheKey &key) const {
  std::string directory = getDirectory();
  return directory.empty() ? "" : getCacheEntryPath(directory, key);
}

Expected<uint64_t> KernelCache::parseMaxDiskBytes() const {
  if (options.maxDiskBytes)
    return *options.maxDiskBytes;
  const char *text = std::getenv("MOSS_CACHE_MAX_BYTES");
  if (!text || !*text)
    return kDefaultMaxDiskBytes;
  Expected<uint64_t> bytes = parseByteCount(text);
  if (!bytes)
    return createStringError(inconvertibleErrorCode(),
                             "MOSS_CACHE_MAX_BYTES: " +
                                 toString(bytes.takeError()) +
                                 "; using the default of 1 GiB");
  return *bytes;
}

uint64_t KernelCache::getMaxDiskBytes() const {
  Expected<uint64_t> bytes = parseMaxDiskBytes();
  if (bytes)
    return *bytes;
  // A bad setting must not stop every compile: warn once per value.
  warnOnce(toString(bytes.takeError()));
  return kDefaultMaxDiskBytes;
}

void KernelCache::warnOnce(const std::string &message) {
  static std::mutex warnedMutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(warnedMutex);
  if (warned.insert(message).second)
    errs() << "moss: warning: " << message << "\n";
}

void KernelCache::noteDiskError(std::string message) {
  std::lock_guard<std::mutex> lock(mutex);
  counters.lastDiskError = std::move(message);
}

KernelCache::EntryPtr KernelCache::lookupMemory(const CacheKey &key) {
  auto it = index.find(key);
  if (it == index.end())
    return nullptr;
  lru.splice(lru.begin(), lru, it->second);
  return *it->second;
}

void KernelCache::insertMemory(const EntryPtr &entry) {
  if (options.memoryCapacity == 0 || index.count(entry->getKey()))
    return;
  lru.push_front(entry);
  index[entry->getKey()] = lru.begin();
  memoryBytes += entry->getSize();
  while (lru.size() > options.memoryCapacity) {
    memoryBytes -= lru.back()->getSize();
    index.erase(lru.back()->getKey());
    lru.pop_back();
  }
}

Expected<std::shared_ptr<const KernelEntry>>
KernelCache::getOrCompile(StringRef source,
                          const CompileOptions &compileOptions) {
  return get(source, compileOptions, /*compile=*/true);
}

Expected<std::shared_ptr<const KernelEntry>>
KernelCache::find(StringRef source, const CompileOptions &compileOptions) {
  return get(source, compileOptions, /*compile=*/false);
}

Expected<KernelCache::EntryPtr>
KernelCache::get(StringRef source, const CompileOptions &compileOptions,
                 bool compile) {
  CompileOptions resolved = resolveCompileOptions(compileOptions);
  Expected<CacheKey> key = getKey(source, resolved);
  if (!key)
    return key.takeError();

  {
    std::unique_lock<std::mutex> lock(mutex);
    // Another thread building this key will have it in memory when done.
    inFlightDone.wait(lock, [&] { return !inFlight.count(*key); });
    if (EntryPtr hit = lookupMemory(*key)) {
      ++counters.memoryHits;
      return hit;
    }
    ++counters.memoryMisses;
    inFlight.insert(*key);
  }
  scope_exit release([&] {
    std::lock_guard<std::mutex> lock(mutex);
    inFlight.erase(*key);
    inFlightDone.notify_all();
  });

  Expected<EntryPtr> entry = loadOrCompile(source, resolved, *key, compile);
  if (entry && *entry) {
    std::lock_guard<std::mutex> lock(mutex);
    insertMemory(*entry);
  }
  return entry;
}

Expected<KernelCache::EntryPtr>
KernelCache::loadOrCompile(StringRef source, const CompileOptions &resolved,
                           const CacheKey &key, bool compile) {
  std::string directory = getDirectory();
  uint64_t cap = 0;
  if (!directory.empty()) {
    // Prebuilt directories first, then the writable one.
    for (const std::string &prebuilt : getReadOnlyDirectories())
      if (EntryPtr entry = readFromDisk(prebuilt, key, /*readOnly=*/true))
        return entry;
    cap = getMaxDiskBytes();
    if (EntryPtr entry = readFromDisk(directory, key))
      return entry;
  }
  if (!compile)
    return nullptr;

  Expected<CompileResult> compiled = getCompiler().compile(source, resolved);
  if (!compiled)
    return compiled.takeError();
  auto entry = std::make_shared<const KernelEntry>(
      key, std::move(compiled->ptx), std::move(compiled->cubin));
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counters.compiles;
  }
  if (!directory.empty())
    writeToDisk(directory, cap, *entry);
  return entry;
}

KernelCache::EntryPtr KernelCache::readFromDisk(StringRef directory,
                                                const CacheKey &key,
                                                bool readOnly) {
  // A lookup counts one miss, in the writable directory.
  auto miss = [&]() -> EntryPtr {
    std::lock_guard<std::mutex> lock(mutex);
    if (!readOnly)
      ++counters.diskMisses;
    return nullptr;
  };
  std::string path = getCacheEntryPath(directory, key);
  // Only a regular file of a plausible size is read: anything else at an
  // entry's name (a FIFO would block, a link to /dev/zero never ends, a
  // directory never reads) is removed, and the kernel rebuilt.
  fs::file_status status;
  if (std::error_code ec = fs::status(path, status, /*follow=*/false)) {
    if (ec != std::errc::no_such_file_or_directory)
      noteDiskError("cannot read '" + path + "': " + ec.message());
    return miss();
  }
  if (status.type() != fs::file_type::regular_file ||
      status.getSize() > kMaxEntryBytes) {
    if (readOnly) {
      noteDiskError("'" + path + "': not a regular cache file of at most " +
                    std::to_string(kMaxEntryBytes) +
                    " bytes (a prebuilt directory: left as it is)");
      return miss();
    }
    std::error_code removed = removeCacheItem(path);
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++counters.corruptEntriesRemoved;
      counters.lastDiskError =
          "'" + path + "': not a regular cache file of at most " +
          std::to_string(kMaxEntryBytes) + " bytes; " +
          (removed ? "cannot remove it: " + removed.message() : "removed");
    }
    return miss();
  }
  // Only what no one else could have planted is loaded: the kernel would
  // run in this process. Otherwise warn once and compile.
  if (std::string why = getUntrustedReason(directory, path); !why.empty()) {
    warnOnce("kernel cache entries in '" + directory.str() +
             "' are not loaded: " + why +
             "; kernels are compiled instead (keep the cache directory "
             "private to its user, mode 0700)");
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++counters.untrustedEntriesSkipped;
    }
    return miss();
  }
  // Read, not mapped: a file is never changed in place, but a reader must
  // not fault if some other tool truncates it.
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(path, /*IsText=*/false,
                            /*RequiresNullTerminator=*/false,
                            /*IsVolatile=*/true);
  if (!buffer) {
    if (buffer.getError() != std::errc::no_such_file_or_directory)
      noteDiskError("cannot read '" + path +
                    "': " + buffer.getError().message());
    return miss();
  }
  Expected<std::pair<std::string, std::string>> payload =
      parseCacheFile((*buffer)->getBuffer(), key);
  if (!payload) {
    std::string why = toString(payload.takeError());
    if (readOnly) {
      noteDiskError("'" + path + "': " + why +
                    " (a prebuilt directory: left as it is)");
      return miss();
    }
    // A concurrent writer only ever renames a complete file over this one,
    // so deleting can at worst drop a good entry, which is rebuilt.
    fs::remove(path);
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++counters.corruptEntriesRemoved;
      counters.lastDiskError = "'" + path + "': " + why;
    }
    return miss();
  }
  if (!readOnly)
    touchCacheFile(path);
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counters.diskHits;
  }
  return std::make_shared<const KernelEntry>(key, std::move(payload->first),
                                             std::move(payload->second));
}

void KernelCache::writeToDisk(StringRef directory, uint64_t cap,
                              const KernelEntry &entry) {
  std::string path = getCacheEntryPath(directory, entry.getKey());
  std::string bytes =
      serializeCacheFile(entry.getKey(), entry.getPtx(), entry.getCubin());
  Error err = Error::success();
  // New directories are private to the user (entries are created 0600).
  if (std::error_code ec = fs::create_directories(sys::path::parent_path(path),
                                                  /*IgnoreExisting=*/true,
                                                  fs::perms::owner_all))
    err =
        createStringError(ec, "cannot create '" + sys::path::parent_path(path) +
                                  "': " + ec.message());
  else
    // replaceFileAtomically: what sits at an entry's name (a link, a FIFO)
    // is replaced, never followed or written into.
    err =
        replaceFileAtomically(path, ArrayRef<char>(bytes.data(), bytes.size()));
  if (err) {
    std::string message = toString(std::move(err));
    std::lock_guard<std::mutex> lock(mutex);
    ++counters.diskWriteFailures;
    counters.lastDiskError = std::move(message);
    return;
  }
  uint64_t evicted = evictCacheFiles(directory, cap, path);
  std::lock_guard<std::mutex> lock(mutex);
  counters.filesEvicted += evicted;
}

CacheStats KernelCache::stats() const {
  CacheStats result;
  {
    std::lock_guard<std::mutex> lock(mutex);
    result = counters;
    result.memoryEntries = lru.size();
    result.memoryBytes = memoryBytes;
  }
  result.memoryCapacity = options.memoryCapacity;
  result.directory = getDirectory();
  if (Expected<uint64_t> cap = parseMaxDiskBytes()) {
    result.maxDiskBytes = *cap;
  } else {
    result.maxDiskBytes = kDefaultMaxDiskBytes;
    result.lastDiskError = toString(cap.takeError());
  }
  if (!result.directory.empty()) {
    for (const CacheFileInfo &file : listCacheFiles(result.directory)) {
      ++result.diskEntries;
      result.diskBytes += file.size;
    }
  }
  return result;
}

Error KernelCache::clear() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    lru.clear();
    index.clear();
    memoryBytes = 0;
  }
  std::string directory = getDirectory();
  if (directory.empty())
    return Error::success();
  return removeCacheFiles(directory);
}

void KernelCache::formatStats(raw_ostream &os) const {
  CacheStats s = stats();
  if (s.directory.empty()) {
    os << "disk cache:   off\n";
  } else {
    for (const std::string &prebuilt : getReadOnlyDirectories())
      os << "prebuilt:     " << prebuilt << " (read first, never written)\n";
    os << "disk cache:   " << s.directory << "\n"
       << "  entries:    " << s.diskEntries << " (";
    printBytes(os, s.diskBytes);
    if (s.maxDiskBytes) {
      os << " of a ";
      printBytes(os, *s.maxDiskBytes);
      os << " cap)\n";
    } else {
      os << ", no valid cap)\n";
    }
    if (fs::is_directory(s.directory)) {
      std::string why = getUntrustedReason(s.directory, s.directory);
      os << "  private:    "
         << (why.empty() ? "yes" : "no, entries are not loaded: " + why)
         << "\n";
    }
  }
  os << "memory cache: " << s.memoryEntries << " of " << s.memoryCapacity
     << " entries (";
  printBytes(os, s.memoryBytes);
  os << ")\n"
     << "this process: " << s.memoryHits << " memory hits, " << s.memoryMisses
     << " misses; " << s.diskHits << " disk hits, " << s.diskMisses
     << " misses; " << s.compiles << " compiles\n";
  if (s.corruptEntriesRemoved || s.filesEvicted || s.diskWriteFailures ||
      s.untrustedEntriesSkipped)
    os << "  " << s.corruptEntriesRemoved << " corrupt entries removed, "
       << s.filesEvicted << " files evicted, " << s.diskWriteFailures
       << " failed writes, " << s.untrustedEntriesSkipped
       << " entries not loaded (not private)\n";
  if (!s.lastDiskError.empty())
    os << "  last disk problem: " << s.lastDiskError << "\n";
}

KernelCache &getDefaultKernelCache() {
  static KernelCache cache;
  return cache;
}

} // namespace moss::runtime
