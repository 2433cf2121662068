//===- CacheDirectory.cpp - The kernel cache's directory ------------------===//

#include "CacheDirectory.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace llvm;
namespace fs = llvm::sys::fs;

namespace moss::runtime {
namespace {

constexpr StringLiteral kEntrySuffix = ".kernel";
/// replaceFileAtomically's temporaries: "<entry>.tmp-XXXXXX".
constexpr StringLiteral kTempMarker = ".kernel.tmp-";
constexpr auto kStaleTempAge = std::chrono::hours(1);

bool isHexDigits(StringRef text, size_t count) {
  return text.size() == count && llvm::all_of(text, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool isEntryName(StringRef name) {
  return name.consume_back(kEntrySuffix) && isHexDigits(name, 32);
}

bool isTempName(StringRef name) {
  size_t marker = name.find(kTempMarker);
  return marker != StringRef::npos && isHexDigits(name.take_front(marker), 32);
}

std::string getKernelsDirectory(StringRef root) {
  SmallString<256> path(root);
  sys::path::append(path, "kernels");
  return std::string(path);
}

/// Calls `visit(path, name, status)` for every file in the fan-out
/// directories under <root>/kernels. Files vanishing meanwhile are skipped.
/// Calls `visit(path, name, status)` for every item of the shard
/// directories, symbolic links not followed (`status` is the link's own).
template <typename Visit> void forEachCacheItem(StringRef root, Visit visit) {
  std::error_code ec;
  std::string kernels = getKernelsDirectory(root);
  for (fs::directory_iterator shard(kernels, ec), end; !ec && shard != end;
       shard.increment(ec)) {
    if (!isHexDigits(sys::path::filename(shard->path()), 2))
      continue;
    std::error_code innerEc;
    for (fs::directory_iterator file(shard->path(), innerEc,
                                     /*follow_symlinks=*/false);
         !innerEc && file != end; file.increment(innerEc)) {
      ErrorOr<fs::basic_file_status> status = file->status();
      if (!status)
        continue;
      visit(file->path(), sys::path::filename(file->path()), *status);
    }
  }
}

/// forEachCacheItem for the regular files only.
template <typename Visit> void forEachCacheFile(StringRef root, Visit visit) {
  forEachCacheItem(root, [&](StringRef path, StringRef name,
                             const fs::basic_file_status &status) {
    if (status.type() == fs::file_type::regular_file)
      visit(path, name, status);
  });
}

} // namespace

/// The non-empty entries of $MOSS_CACHE_DIR, a ':'-separated list.
static SmallVector<StringRef, 4> getCacheDirList() {
  SmallVector<StringRef, 4> dirs;
  if (const char *list = std::getenv("MOSS_CACHE_DIR"))
    StringRef(list).split(dirs, ':', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  return dirs;
}

std::vector<std::string> getReadOnlyCacheDirectories() {
  SmallVector<StringRef, 4> dirs = getCacheDirList();
  if (dirs.size() < 2)
    return {};
  return std::vector<std::string>(dirs.begin(), dirs.end() - 1);
}

std::string getDefaultCacheDirectory() {
  if (SmallVector<StringRef, 4> dirs = getCacheDirList(); !dirs.empty())
    return dirs.back().str();
  SmallString<256> path;
  // XDG_CACHE_HOME, else $HOME/.cache (else the passwd entry's home).
  if (!sys::path::cache_directory(path))
    return "";
  sys::path::append(path, "moss");
  return std::string(path);
}

std::string getCacheEntryPath(StringRef root, const Hash128 &key) {
  std::string hex = key.toHex();
  SmallString<256> path(root);
  sys::path::append(path, "kernels", StringRef(hex).take_front(2),
                    hex + kEntrySuffix.str());
  return std::string(path);
}

std::vector<CacheFileInfo> listCacheFiles(StringRef root) {
  std::vector<CacheFileInfo> files;
  auto now = std::chrono::system_clock::now();
  forEachCacheFile(root, [&](StringRef path, StringRef name,
                             const fs::basic_file_status &status) {
    if (isEntryName(name)) {
      files.push_back(
          {path.str(), status.getSize(), status.getLastModificationTime()});
    } else if (isTempName(name) &&
               now - status.getLastModificationTime() > kStaleTempAge) {
      fs::remove(path);
    }
  });
  return files;
}

uint64_t evictCacheFiles(StringRef root, uint64_t maxBytes, StringRef keep) {
  std::vector<CacheFileInfo> files = listCacheFiles(root);
  uint64_t total = 0;
  for (const CacheFileInfo &file : files)
    total += file.size;
  if (total <= maxBytes)
    return 0;
  // Oldest first; ties broken by path so concurrent evictors agree.
  llvm::sort(files, [](const CacheFileInfo &a, const CacheFileInfo &b) {
    return a.modified != b.modified ? a.modified < b.modified : a.path < b.path;
  });
  uint64_t removed = 0;
  for (const CacheFileInfo &file : files) {
    if (total <= maxBytes)
      break;
    if (file.path == keep)
      continue;
    // Another process may have deleted it already; either way it is gone.
    std::error_code ec = fs::remove(file.path, /*IgnoreNonExisting=*/false);
    if (!ec)
      ++removed;
    if (!ec || ec == std::errc::no_such_file_or_directory)
      total -= file.size;
  }
  return removed;
}

Error removeCacheFiles(StringRef root) {
  std::string firstFailure;
  // Whatever sits at an entry's or a temporary's name goes: links (not what
  // they point to), FIFOs and directories too.
  forEachCacheItem(root, [&](StringRef path, StringRef name,
                             const fs::basic_file_status &) {
    if (!isEntryName(name) && !isTempName(name))
      return;
    std::error_code ec = removeCacheItem(path);
    if (ec && firstFailure.empty())
      firstFailure = "cannot delete '" + path.str() + "': " + ec.message();
  });
  if (!firstFailure.empty())
    return createStringError(inconvertibleErrorCode(), firstFailure);
  return Error::success();
}

std::error_code removeCacheItem(StringRef path) {
  fs::file_status status;
  if (std::error_code ec = fs::status(path, status, /*follow=*/false))
    return ec;
  if (status.type() == fs::file_type::directory_file)
    return fs::remove_directories(path);
  return fs::remove(path);
}

std::string getUntrustedReason(StringRef root, StringRef path) {
  // The file, root/kernels/<2 hex>, root/kernels, then root.
  SmallVector<std::string, 4> chain;
  for (StringRef p = path; p.size() > root.size() && p.starts_with(root);
       p = sys::path::parent_path(p))
    chain.push_back(p.str());
  chain.push_back(root.str());
  const unsigned user = ::geteuid();
  for (const std::string &item : chain) {
    fs::file_status status;
    // The root may be a link to the real directory; nothing below it may.
    if (std::error_code ec = fs::status(item, status, /*follow=*/item == root))
      return "cannot check '" + item + "': " + ec.message();
    if (status.getUser() != user && status.getUser() != 0)
      return "'" + item + "' belongs to another user (uid " +
             std::to_string(status.getUser()) + ")";
    if (status.permissions() & (fs::group_write | fs::others_write))
      return "'" + item + "' is writable by " +
             ((status.permissions() & fs::others_write) ? "others"
                                                        : "its group");
  }
  return "";
}

void touchCacheFile(StringRef path) {
  SmallString<256> copy(path);
  // utimensat with null times sets both to now; failure only costs LRU order.
  (void)::utimensat(AT_FDCWD, copy.c_str(), nullptr, 0);
}

} // namespace moss::runtime
