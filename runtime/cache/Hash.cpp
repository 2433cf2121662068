//===- Hash.cpp - 128-bit content hash (XXH3-128) -------------------------===//

#include "moss/Runtime/Cache/Hash.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/xxhash.h"

using namespace llvm;

namespace moss::runtime {

std::string Hash128::toHex() const {
  static const char digits[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (int i = 0; i < 16; ++i) {
    hex[15 - i] = digits[(high >> (4 * i)) & 0xf];
    hex[31 - i] = digits[(low >> (4 * i)) & 0xf];
  }
  return hex;
}

void ContentHasher::update(StringRef bytes) { buffer.append(bytes); }

void ContentHasher::updateU64(uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  update(StringRef(bytes, 8));
}

void ContentHasher::updateField(StringRef bytes) {
  updateU64(bytes.size());
  update(bytes);
}

Hash128 ContentHasher::digest() const { return hashBytes(buffer); }

Hash128 hashBytes(StringRef bytes) {
  XXH128_hash_t h = xxh3_128bits(arrayRefFromStringRef(bytes));
  return Hash128{h.high64, h.low64};
}

} // namespace moss::runtime
