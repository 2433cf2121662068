//===- Hash.h - 128-bit FNV-1a content hash --------------------*- C++ -*-===//
//
// The hash behind kernel cache keys and the checksum of cache files: FNV-1a
// with the 128-bit parameters of the FNV specification (offset basis
// 0x6c62272e07bb014262b821756295c58d, prime 2^88 + 0x13b). It is not
// cryptographic; keys name content the process produced itself.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_HASH_H
#define MOSS_RUNTIME_HASH_H

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

/// Incremental 128-bit FNV-1a.
class Fnv1a128 {
public:
  Fnv1a128();

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
  unsigned __int128 state;
};

/// The 128-bit FNV-1a hash of the bytes.
Hash128 hashBytes(llvm::StringRef bytes);

/// A hasher for unordered containers keyed by Hash128.
struct Hash128Hasher {
  size_t operator()(const Hash128 &h) const {
    return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ULL));
  }
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_HASH_H
