//===- Hash.h - 128-bit content hash (XXH3-128) ----------------*- C++ -*-===//
//
// The hash behind kernel cache keys and the checksum of cache files:
// LLVM's XXH3-128 (llvm::xxh3_128bits), the family the compiler hashes with
// too. It is not cryptographic; keys name content the process produced
// itself, and the cache loads only files its owner may write
// (docs/RELIABILITY.md).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CACHE_HASH_H
#define MOSS_RUNTIME_CACHE_HASH_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <string>

namespace moss::runtime {

/// A 128-bit hash value.
struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;

  /// 32 lowercase hex digits, most significant first.
  std::string toHex() const;

  friend bool operator==(const Hash128 &a, const Hash128 &b) {
    return a.high == b.high && a.low == b.low;
  }
  friend bool operator!=(const Hash128 &a, const Hash128 &b) {
    return !(a == b);
  }
};

/// A hash built field by field (the fields are gathered, then hashed once).
class ContentHasher {
public:
  /// Hashes the bytes as they are.
  void update(llvm::StringRef bytes);
  /// Hashes the 8 little-endian bytes of the value.
  void updateU64(uint64_t value);
  /// Hashes the length, then the bytes, so that consecutive fields cannot be
  /// confused with each other ("ab","c" differs from "a","bc").
  void updateField(llvm::StringRef bytes);

  /// The hash of everything hashed so far.
  Hash128 digest() const;

private:
  std::string buffer;
};

/// The XXH3-128 hash of the bytes.
Hash128 hashBytes(llvm::StringRef bytes);

/// A hasher for unordered containers keyed by Hash128.
struct Hash128Hasher {
  size_t operator()(const Hash128 &h) const {
    return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ULL));
  }
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CACHE_HASH_H
