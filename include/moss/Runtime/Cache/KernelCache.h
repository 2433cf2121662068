//===- KernelCache.h - Compiled kernels in memory and on disk --*- C++ -*-===//
//
// getOrCompile(source, options) returns the PTX and cubin of a kernel source,
// from an in-memory LRU, else from the disk cache, else by compiling it (NVRTC
// by default) and storing the result in both.
//
// Keys are a 128-bit hash of content only: the source, the template hash, the
// compiler version, the arch, the flags and any extra headers, never a path,
// so a cache directory copied to another machine or user still hits.
//
// Disk layout: <dir>/kernels/<first 2 key hex digits>/<32 key hex>.kernel,
// where <dir> is KernelCacheOptions::directory, else $MOSS_CACHE_DIR, else
// $XDG_CACHE_HOME/moss, else ~/.cache/moss, read at every call. Each file is
// a 64-byte header (magic, format version, key, lengths, checksum), then the
// PTX, then the cubin. Files are written to a temporary name in the same
// directory and renamed into place, so concurrent processes never see a torn
// file; a file failing any check is deleted and rebuilt. When a write pushes
// the directory over the size cap, the least recently used files (by mtime,
// refreshed on every disk hit) are deleted.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CACHE_KERNELCACHE_H
#define MOSS_RUNTIME_CACHE_KERNELCACHE_H

#include "moss/Runtime/Cache/Hash.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace moss::runtime {

/// A kernel cache key: the 128-bit hash of everything that determines the
/// compiled image.
using CacheKey = Hash128;

/// Everything hashed into a cache key.
struct CacheKeyInputs {
  /// The generated CUDA C++ source.
  llvm::StringRef source;
  /// getTemplateHash() when the templates are compiled in, else 0.
  uint64_t templateHash = 0;
  /// The compiler's identity, e.g. "nvrtc-13.0".
  llvm::StringRef compilerVersion;
  /// The resolved target, e.g. "sm_90a".
  llvm::StringRef arch;
  /// The full flag list passed to the compiler (getNvrtcFlags()).
  llvm::ArrayRef<std::string> flags;
  /// Headers besides the templates (names and contents).
  llvm::ArrayRef<HeaderFile> headers;
  /// The source's name (it can appear in PTX debug info).
  llvm::StringRef programName;
};

/// The key of `inputs`. Also covers the cache format version, so that
/// incompatible releases use different files.
CacheKey computeCacheKey(const CacheKeyInputs &inputs);

/// What the cache calls on a miss.
struct KernelCompiler {
  /// The compiler's identity; enters every key.
  std::string version;
  /// Compiles a source; `options` arrive resolved (arch filled in).
  std::function<llvm::Expected<CompileResult>(llvm::StringRef source,
                                              const CompileOptions &options)>
      compile;
};

/// NVRTC as a KernelCompiler. Its version is "nvrtc-<major>.<minor>" of the
/// NVRTC that loads, or, when none does, of the toolkit this library was built
/// with, so a prebuilt cache still hits on a machine without the toolkit.
KernelCompiler getNvrtcCompiler();

/// A compiled kernel image. Shared by the cache and its callers; immutable
/// except for the modules it loads on demand.
class KernelEntry {
public:
  KernelEntry(CacheKey key, std::string ptx, std::string cubin);
  ~KernelEntry();

  /// The entry's cache key.
  const CacheKey &getKey() const { return key; }
  /// PTX text.
  llvm::StringRef getPtx() const { return ptx; }
  /// The cubin (ELF); empty for PTX-only entries.
  llvm::StringRef getCubin() const { return cubin; }
  /// Bytes held (PTX plus cubin).
  size_t getSize() const { return ptx.size() + cubin.size(); }

  /// The kernel `name`, loading the image (the cubin, else the PTX) into the
  /// calling thread's current context on first use in that context.
  llvm::Expected<CUfunction> getFunction(llvm::StringRef name) const;

private:
  CacheKey key;
  std::string ptx;
  std::string cubin;
  mutable std::mutex moduleMutex;
  /// By context ID (runtime::getCurrentContext), not handle: a destroyed
  /// context's handle can come back for a new one.
  mutable std::vector<std::pair<unsigned long long, Module>> modules;
};

/// How a KernelCache behaves.
struct KernelCacheOptions {
  /// The disk cache directory; empty means $MOSS_CACHE_DIR, else
  /// $XDG_CACHE_HOME/moss, else ~/.cache/moss (looked up at every call).
  std::string directory;
  /// False keeps the cache in memory only.
  bool useDisk = true;
  /// Entries kept in memory (0 disables the memory cache).
  size_t memoryCapacity = 256;
  /// The disk size cap in bytes; unset means $MOSS_CACHE_MAX_BYTES (a byte
  /// count with an optional K/M/G/T suffix, e.g. "512M"), else 1 GiB.
  std::optional<uint64_t> maxDiskBytes;
  /// The compiler; an empty `compile` means getNvrtcCompiler().
  KernelCompiler compiler;
};

/// Counters and sizes for `moss-jit cache stats`.
struct CacheStats {
  /// The disk cache directory now in use; empty when disk caching is off.
  std::string directory;
  /// The size cap now in force; unset when MOSS_CACHE_MAX_BYTES is invalid
  /// (lastDiskError says why).
  std::optional<uint64_t> maxDiskBytes;
  /// Valid entry files on disk and their total size (read from the
  /// directory when stats() is called).
  uint64_t diskEntries = 0;
  uint64_t diskBytes = 0;
  uint64_t memoryEntries = 0;
  uint64_t memoryBytes = 0;
  uint64_t memoryCapacity = 0;
  /// Lookups since this cache was created.
  uint64_t memoryHits = 0;
  uint64_t memoryMisses = 0;
  uint64_t diskHits = 0;
  uint64_t diskMisses = 0;
  uint64_t compiles = 0;
  /// Files that failed verification and were deleted.
  uint64_t corruptEntriesRemoved = 0;
  /// Entry files not loaded because another user could have written them
  /// (docs/RUNTIME.md, "The kernel cache"); their kernels were compiled.
  uint64_t untrustedEntriesSkipped = 0;
  /// Files deleted to stay under the size cap.
  uint64_t filesEvicted = 0;
  /// Entries that could not be written (the kernel is still returned).
  uint64_t diskWriteFailures = 0;
  /// The last disk problem, for diagnosis; empty when none.
  std::string lastDiskError;
};

/// The kernel cache. Thread-safe; any number of processes may share one
/// directory.
class KernelCache {
public:
  explicit KernelCache(KernelCacheOptions options = {});
  ~KernelCache();
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// The compiled kernel for `source`: from memory, else disk, else compiled.
  /// Threads asking for the same key at once compile it once.
  llvm::Expected<std::shared_ptr<const KernelEntry>>
  getOrCompile(llvm::StringRef source, const CompileOptions &options);

  /// The entry for `source` from memory or disk; null when neither has it
  /// (nothing is compiled).
  llvm::Expected<std::shared_ptr<const KernelEntry>>
  find(llvm::StringRef source, const CompileOptions &options);

  /// The key getOrCompile uses for `source` and `options`.
  llvm::Expected<CacheKey> getKey(llvm::StringRef source,
                                  const CompileOptions &options);

  /// The (writable) disk directory a call made now would use; empty when
  /// disk caching is off or no directory can be determined.
  std::string getDirectory() const;
  /// The prebuilt directories lookups read first, in order: the entries of
  /// $MOSS_CACHE_DIR before its last (none when the options name the
  /// directory or turn the disk off). They are never written to or cleared.
  std::vector<std::string> getReadOnlyDirectories() const;

  /// The path of `key`'s file under getDirectory(); empty without one.
  std::string getEntryPath(const CacheKey &key) const;

  /// Counters, plus the disk directory's current entries and bytes.
  CacheStats stats() const;

  /// Drops every entry from memory and deletes every entry file (only
  /// files of the cache's own naming scheme) from the disk directory.
  llvm::Error clear();

  /// Prints stats() for people (`moss-jit cache stats`).
  void formatStats(llvm::raw_ostream &os) const;

private:
  using EntryPtr = std::shared_ptr<const KernelEntry>;

  const KernelCompiler &getCompiler();
  EntryPtr lookupMemory(const CacheKey &key);
  void insertMemory(const EntryPtr &entry);
  llvm::Expected<EntryPtr> get(llvm::StringRef source,
                               const CompileOptions &options, bool compile);
  llvm::Expected<EntryPtr> loadOrCompile(llvm::StringRef source,
                                         const CompileOptions &resolved,
                                         const CacheKey &key, bool compile);
  /// A read-only directory is a prebuilt one: a bad entry there is left
  /// alone, and a miss there does not count.
  EntryPtr readFromDisk(llvm::StringRef directory, const CacheKey &key,
                        bool readOnly = false);
  void writeToDisk(llvm::StringRef directory, uint64_t cap,
                   const KernelEntry &entry);
  /// The disk cap: the options', else $MOSS_CACHE_MAX_BYTES, else 1 GiB;
  /// an unreadable variable warns once on stderr and means 1 GiB.
  uint64_t getMaxDiskBytes() const;
  llvm::Expected<uint64_t> parseMaxDiskBytes() const;
  void noteDiskError(std::string message);
  /// Prints "moss: warning: <message>" on stderr, once per message per
  /// process.
  static void warnOnce(const std::string &message);

  KernelCacheOptions options;
  std::once_flag compilerOnce;
  KernelCompiler compiler;

  mutable std::mutex mutex;
  std::condition_variable inFlightDone;
  std::unordered_set<CacheKey, Hash128Hasher> inFlight;
  std::list<EntryPtr> lru;
  std::unordered_map<CacheKey, std::list<EntryPtr>::iterator, Hash128Hasher>
      index;
  uint64_t memoryBytes = 0;
  CacheStats counters;
};

/// The process-wide cache with default options (used by the public API and
/// `moss-jit cache`).
KernelCache &getDefaultKernelCache();

/// Parses a byte count such as "1073741824", "512M", "1G" or "2GiB" (K, M,
/// G, T are powers of 1024).
llvm::Expected<uint64_t> parseByteCount(llvm::StringRef text);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CACHE_KERNELCACHE_H
