//===- CacheFile.h - The kernel cache's file format -------------*- C++ -*-===//
//
// One entry file, all integers little-endian:
//   offset  0  magic "MOSSKRNL"
//           8  u32 format version (kCacheFormatVersion)
//          12  u32 header size (64)
//          16  key: u64 high, u64 low
//          32  u64 PTX length, u64 cubin length
//          48  checksum: u64 high, u64 low, the XXH3-128 of bytes [0, 48)
//              followed by the payload
//          64  PTX, then cubin
// The file size must be exactly 64 + both lengths.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CACHE_CACHEFILE_H
#define MOSS_RUNTIME_CACHE_CACHEFILE_H

#include "moss/Runtime/Cache/Hash.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace moss::runtime {

/// Bumped whenever the file layout or the key derivation changes.
constexpr uint32_t kCacheFormatVersion = 2;

/// The size of an entry file's header.
constexpr size_t kCacheHeaderSize = 64;

/// The bytes of an entry file.
std::string serializeCacheFile(const Hash128 &key, llvm::StringRef ptx,
                               llvm::StringRef cubin);

/// The PTX and cubin of an entry file's bytes, after checking the magic,
/// version, header size, key (against `expectedKey`), lengths and checksum;
/// the error says which check failed.
llvm::Expected<std::pair<std::string, std::string>>
parseCacheFile(llvm::StringRef bytes, const Hash128 &expectedKey);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CACHE_CACHEFILE_H
