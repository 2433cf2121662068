//===- HashTest.cpp - The 128-bit FNV-1a hash -----------------------------===//

#include "moss/Runtime/Hash.h"

#include "gtest/gtest.h"

#include <string>

using namespace moss::runtime;

namespace {

// Published FNV-1a 128-bit test vectors (the FNV reference test suite).
TEST(HashTest, MatchesFnv1a128Vectors) {
  EXPECT_EQ(hashBytes("").toHex(), "6c62272e07bb014262b821756295c58d");
  EXPECT_EQ(hashBytes("a").toHex(), "d228cb696f1a8caf78912b704e4a8964");
  EXPECT_EQ(hashBytes("foobar").toHex(), "343e1662793c64bf6f0d3597ba446f18");
}

TEST(HashTest, IncrementalEqualsOneShot) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += static_cast<char>(i * 37 + 11);
  Fnv1a128 hasher;
  hasher.update(llvm::StringRef(text).take_front(333));
  hasher.update(llvm::StringRef(text).drop_front(333));
  EXPECT_EQ(hasher.digest(), hashBytes(text));
}

TEST(HashTest, FieldsCannotBeConfused) {
  Fnv1a128 a, b;
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
