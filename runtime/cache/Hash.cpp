//===- Hash.cpp - 128-bit FNV-1a content hash -----------------------------===//

#include "moss/Runtime/Hash.h"

using namespace llvm;

namespace moss::runtime {
namespace {

constexpr unsigned __int128 kOffsetBasis =
    (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) |
    0x62b821756295c58dULL;

/// h * (2^88 + 0x13b) mod 2^128, written as a shift and a small multiply
/// (what a full 128-bit multiply by the sparse prime reduces to).
inline unsigned __int128 multiplyByPrime(unsigned __int128 h) {
  return (h << 88) + h * 0x13bU;
}

} // namespace

std::string Hash128::toHex() const {
  static const char digits[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (int i = 0; i < 16; ++i) {
    hex[15 - i] = digits[(high >> (4 * i)) & 0xf];
    hex[31 - i] = digits[(low >> (4 * i)) & 0xf];
  }
  return hex;
}

Fnv1a128::Fnv1a128() : state(kOffsetBasis) {}

void Fnv1a128::update(StringRef bytes) {
  unsigned __int128 h = state;
  for (unsigned char byte : bytes.bytes()) {
    h ^= byte;
    h = multiplyByPrime(h);
  }
  state = h;
}

void Fnv1a128::updateU64(uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  update(StringRef(bytes, 8));
}

void Fnv1a128::updateField(StringRef bytes) {
  updateU64(bytes.size());
  update(bytes);
}

Hash128 Fnv1a128::digest() const {
  return Hash128{static_cast<uint64_t>(state >> 64),
                 static_cast<uint64_t>(state)};
}

Hash128 hashBytes(StringRef bytes) {
  Fnv1a128 hasher;
  hasher.update(bytes);
  return hasher.digest();
}

} // namespace moss::runtime
