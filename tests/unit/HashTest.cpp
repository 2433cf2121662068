//===- HashTest.cpp - The 128-bit content hash ----------------------------===//

#include "moss/Runtime/Cache/Hash.h"

#include "gtest/gtest.h"

#include <string>

using namespace moss::runtime;

namespace {

// Published XXH3-128 values (the xxHash project's) for "" and "abc".
TEST(HashTest, MatchesXxh3Vectors) {
  EXPECT_EQ(hashBytes("").toHex(), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(hashBytes("abc").toHex(), "06b05ab6733a618578af5f94892f3950");
}

TEST(HashTest, IncrementalEqualsOneShot) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += static_cast<char>(i * 37 + 11);
  ContentHasher hasher;
  hasher.update(llvm::StringRef(text).take_front(333));
  hasher.update(llvm::StringRef(text).drop_front(333));
  EXPECT_EQ(hasher.digest(), hashBytes(text));
}

TEST(HashTest, FieldsCannotBeConfused) {
  ContentHasher a, b;
  a.updateField("ab");
  a.updateField("c");
  b.updateField("a");
  b.updateField("bc");
  EXPECT_NE(a.digest(), b.digest());
}

TEST(HashTest, EveryBitMatters) {
  std::string text(4096, 'x');
  Hash128 base = hashBytes(text);
  for (size_t i : {size_t(0), size_t(1000), size_t(4095)}) {
    std::string flipped = text;
    flipped[i] ^= 1;
    EXPECT_NE(hashBytes(flipped), base) << "byte " << i;
  }
}

TEST(HashTest, HexIsHighThenLow) {
  Hash128 h{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(h.toHex(), "0123456789abcdeffedcba9876543210");
}

} // namespace
