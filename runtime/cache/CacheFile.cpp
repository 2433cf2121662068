//===- CacheFile.cpp - The kernel cache's file format ---------------------===//

#include "CacheFile.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Endian.h"

#include <cstring>

using namespace llvm;

namespace moss::runtime {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'S', 'S', 'K', 'R', 'N', 'L'};
constexpr size_t kChecksumOffset = 48;

Hash128 computeChecksum(StringRef headerPrefix, StringRef payload) {
  ContentHasher hasher;
  hasher.update(headerPrefix);
  hasher.update(payload);
  return hasher.digest();
}

uint64_t read64(StringRef bytes, size_t offset) {
  return support::endian::read64le(bytes.data() + offset);
}

Error corrupt(const Twine &why) {
  return createStringError(inconvertibleErrorCode(),
                           "corrupt kernel cache file: " + why);
}

} // namespace

std::string serializeCacheFile(const Hash128 &key, StringRef ptx,
                               StringRef cubin) {
  std::string bytes(kCacheHeaderSize, '\0');
  char *p = bytes.data();
  memcpy(p, kMagic, sizeof(kMagic));
  support::endian::write32le(p + 8, kCacheFormatVersion);
  support::endian::write32le(p + 12, kCacheHeaderSize);
  support::endian::write64le(p + 16, key.high);
  support::endian::write64le(p + 24, key.low);
  support::endian::write64le(p + 32, ptx.size());
  support::endian::write64le(p + 40, cubin.size());
  bytes.reserve(kCacheHeaderSize + ptx.size() + cubin.size());
  bytes.append(ptx.data(), ptx.size());
  bytes.append(cubin.data(), cubin.size());
  StringRef all(bytes);
  Hash128 checksum = computeChecksum(all.take_front(kChecksumOffset),
                                     all.drop_front(kCacheHeaderSize));
  support::endian::write64le(bytes.data() + 48, checksum.high);
  support::endian::write64le(bytes.data() + 56, checksum.low);
  return bytes;
}

Expected<std::pair<std::string, std::string>>
parseCacheFile(StringRef bytes, const Hash128 &expectedKey) {
  if (bytes.size() < kCacheHeaderSize)
    return corrupt("truncated header (" + Twine(bytes.size()) + " of " +
                   Twine(kCacheHeaderSize) + " bytes)");
  if (memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return corrupt("bad magic (expected MOSSKRNL)");
  uint32_t version = support::endian::read32le(bytes.data() + 8);
  if (version != kCacheFormatVersion)
    return corrupt("format version " + Twine(version) + ", expected " +
                   Twine(kCacheFormatVersion));
  uint32_t headerSize = support::endian::read32le(bytes.data() + 12);
  if (headerSize != kCacheHeaderSize)
    return corrupt("header size " + Twine(headerSize) + ", expected " +
                   Twine(kCacheHeaderSize));
  Hash128 key{read64(bytes, 16), read64(bytes, 24)};
  if (key != expectedKey)
    return corrupt("holds key " + key.toHex() + ", expected " +
                   expectedKey.toHex());
  uint64_t ptxSize = read64(bytes, 32);
  uint64_t cubinSize = read64(bytes, 40);
  uint64_t payloadSize = bytes.size() - kCacheHeaderSize;
  // Compared one at a time so that huge lengths cannot overflow the sum.
  if (ptxSize > payloadSize || cubinSize != payloadSize - ptxSize)
    return corrupt("lengths " + Twine(ptxSize) + " + " + Twine(cubinSize) +
                   " do not match the " + Twine(payloadSize) +
                   " payload bytes");
  StringRef payload = bytes.drop_front(kCacheHeaderSize);
  Hash128 stored{read64(bytes, 48), read64(bytes, 56)};
  if (computeChecksum(bytes.take_front(kChecksumOffset), payload) != stored)
    return corrupt("checksum mismatch");
  return std::make_pair(payload.take_front(ptxSize).str(),
                        payload.drop_front(ptxSize).str());
}

} // namespace moss::runtime
