//===- CacheDirectory.h - The kernel cache's directory ----------*- C++ -*-===//
//
// Where entry files live, and the whole-directory operations: listing,
// eviction to a size cap, and clearing. Only names of the cache's own scheme
// are ever deleted, so pointing the cache at a shared directory is safe.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CACHE_CACHEDIRECTORY_H
#define MOSS_RUNTIME_CACHE_CACHEDIRECTORY_H

#include "moss/Runtime/Cache/Hash.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moss::runtime {

/// The default (writable) directory: the last entry of $MOSS_CACHE_DIR (a
/// ':'-separated list), else $XDG_CACHE_HOME/moss, else ~/.cache/moss;
/// empty when none can be determined. Reads the environment on every call.
std::string getDefaultCacheDirectory();

/// The entries of $MOSS_CACHE_DIR before its last: prebuilt directories
/// that lookups read, in order, before the writable one, and that the cache
/// never writes or deletes in.
std::vector<std::string> getReadOnlyCacheDirectories();

/// <root>/kernels/<2 hex>/<32 hex>.kernel.
std::string getCacheEntryPath(llvm::StringRef root, const Hash128 &key);

/// Why the entry file `path` under `root` must not be loaded, or "" when it
/// may: `root`, every directory between it and `path`, and the file must be
/// owned by this user (or root) and writable by no one else. A kernel that
/// another user could plant would run in this process.
std::string getUntrustedReason(llvm::StringRef root, llvm::StringRef path);

/// An entry file found on disk.
struct CacheFileInfo {
  std::string path;
  uint64_t size = 0;
  llvm::sys::TimePoint<> modified;
};

/// Every entry file under `root` (an empty list when there is none).
/// Temporary files of crashed writers older than an hour are deleted on the
/// way; younger ones may belong to a live writer and are left alone.
std::vector<CacheFileInfo> listCacheFiles(llvm::StringRef root);

/// Deletes the least recently modified entry files under `root` until their
/// total is at most `maxBytes`, never deleting `keep`. Returns how many were
/// deleted. Files another process deleted first are skipped silently.
uint64_t evictCacheFiles(llvm::StringRef root, uint64_t maxBytes,
                         llvm::StringRef keep);

/// Deletes every entry file and temporary file under `root`.
llvm::Error removeCacheFiles(llvm::StringRef root);

/// Sets `path`'s modification time to now (marks it recently used).
/// Removes what sits at `path` in a cache directory, without following a
/// symbolic link: a file, link, FIFO or a whole directory.
std::error_code removeCacheItem(llvm::StringRef path);

void touchCacheFile(llvm::StringRef path);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CACHE_CACHEDIRECTORY_H
