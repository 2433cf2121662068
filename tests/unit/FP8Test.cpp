//===- FP8Test.cpp - FP8 and E8M0 conversion against a brute-force model --===//
//
// The reference here shares no code with the library: it lists the value of
// every code from the format's definition, picks the nearest one in double
// (ties to the even code), and applies the saturation rule by treating the
// code just above the largest finite value as a "saturated" candidate.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/FP8.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace moss::numerics;

namespace {

/// The brute-force model of one format.
struct RefFormat {
  Fp8Format format;
  int mantBits;
  int bias;
  uint8_t maxCode;
  /// values[c] for c in [0, maxCode + 1]: every finite magnitude, then the
  /// value the next code would have (480 for E4M3, 65536 for E5M2).
  std::vector<double> values;

  /// Value of a positive code from the format definition.
  double codeValue(int code) const {
    int exp = code >> mantBits;
    int mant = code & ((1 << mantBits) - 1);
    if (exp == 0)
      return std::ldexp(double(mant), 1 - bias - mantBits);
    return std::ldexp(1.0 + std::ldexp(double(mant), -mantBits), exp - bias);
  }

  RefFormat(Fp8Format format, int mantBits, int bias, uint8_t maxCode)
      : format(format), mantBits(mantBits), bias(bias), maxCode(maxCode) {
    for (int c = 0; c <= maxCode + 1; ++c)
      values.push_back(codeValue(c));
  }

  /// Nearest code, ties to even, saturating; NaN -> 0x7F, +-Inf -> +-max.
  Fp8Encoded encode(float x) const {
    if (std::isnan(x))
      return {0x7F, false};
    uint8_t sign = std::signbit(x) ? 0x80 : 0;
    double a = std::fabs(double(x));
    if (std::isinf(a))
      return {uint8_t(sign | maxCode), false};
    if (a > values.back())
      return {uint8_t(sign | maxCode), true};
    // values is increasing: hi is the first value >= a.
    size_t hi =
        std::lower_bound(values.begin(), values.end(), a) - values.begin();
    size_t pick = hi;
    if (values[hi] != a) {
      size_t lo = hi - 1;
      double dLo = a - values[lo], dHi = values[hi] - a;
      pick = dLo < dHi ? lo : dHi < dLo ? hi : (lo % 2 == 0 ? lo : hi);
    }
    if (pick > maxCode)
      return {uint8_t(sign | maxCode), true};
    return {uint8_t(sign | pick), false};
  }
};

const RefFormat &refE4M3() {
  static const RefFormat ref(Fp8Format::E4M3, 3, 7, 0x7E);
  return ref;
}
const RefFormat &refE5M2() {
  static const RefFormat ref(Fp8Format::E5M2, 2, 15, 0x7B);
  return ref;
}

const char *name(Fp8Format f) { return f == Fp8Format::E4M3 ? "E4M3" : "E5M2"; }

bool isNaNCode(uint8_t code, Fp8Format f) {
  uint8_t m = code & 0x7F;
  return f == Fp8Format::E4M3 ? m == 0x7F : m >= 0x7D;
}

float fromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

uint32_t bitsOf(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

/// Encodes with the library and with the model and compares both fields.
void expectMatchesRef(float x, const RefFormat &ref) {
  Fp8Encoded got = encodeFp8(x, ref.format);
  Fp8Encoded want = ref.encode(x);
  ASSERT_EQ(int(got.code), int(want.code))
      << name(ref.format) << " x=" << x << " bits=0x" << std::hex << bitsOf(x);
  ASSERT_EQ(got.saturated, want.saturated)
      << name(ref.format) << " x=" << x << " bits=0x" << std::hex << bitsOf(x);
}

class FP8FormatTest : public ::testing::TestWithParam<Fp8Format> {
protected:
  const RefFormat &ref() const {
    return GetParam() == Fp8Format::E4M3 ? refE4M3() : refE5M2();
  }
};

} // namespace

TEST_P(FP8FormatTest, DecodeMatchesFormatDefinition) {
  Fp8Format f = GetParam();
  for (int c = 0; c < 256; ++c) {
    float v = decodeFp8(uint8_t(c), f);
    if (isNaNCode(uint8_t(c), f)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      continue;
    }
    if (f == Fp8Format::E5M2 && (c & 0x7F) == 0x7C) {
      EXPECT_TRUE(std::isinf(v) && std::signbit(v) == bool(c & 0x80));
      continue;
    }
    double want = ref().codeValue(c & 0x7F) * ((c & 0x80) ? -1.0 : 1.0);
    EXPECT_EQ(double(v), want) << "code " << c;
    EXPECT_EQ(std::signbit(v), bool(c & 0x80)) << "code " << c;
  }
  EXPECT_EQ(fp8MaxFinite(f), float(ref().values[ref().maxCode]));
  EXPECT_EQ(decodeFp8(ref().maxCode, f), fp8MaxFinite(f));
}

TEST_P(FP8FormatTest, EveryCodeRoundTrips) {
  Fp8Format f = GetParam();
  for (int c = 0; c < 256; ++c) {
    uint8_t code = uint8_t(c);
    Fp8Encoded e = encodeFp8(decodeFp8(code, f), f);
    if (isNaNCode(code, f)) {
      EXPECT_EQ(int(e.code), int(kFp8NaNCode)) << "NaN code " << c;
    } else if (f == Fp8Format::E5M2 && (c & 0x7F) == 0x7C) {
      // Infinity saturates to the largest finite value of its sign, and is
      // documented as not "saturated".
      EXPECT_EQ(int(e.code), (c & 0x80) | 0x7B) << "inf code " << c;
    } else {
      EXPECT_EQ(int(e.code), c);
    }
    EXPECT_FALSE(e.saturated) << "code " << c;
  }
}

TEST_P(FP8FormatTest, RandomBitPatternsMatchBruteForce) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Uniform bit patterns: mostly huge or tiny magnitudes, NaNs, infinities.
  for (int i = 0; i < 2000000; ++i)
    ASSERT_NO_FATAL_FAILURE(expectMatchesRef(fromBits(uint32_t(rng())), ref()));
  // Patterns whose exponent lies around the format's range, where the
  // interesting rounding happens: FP32 exponents 2^-20 .. 2^18.
  for (int i = 0; i < 2000000; ++i) {
    uint64_t r = rng();
    uint32_t exp = 127 - 20 + uint32_t(r % 39);
    uint32_t bits = (uint32_t(r >> 8) & 0x807FFFFFu) | (exp << 23);
    ASSERT_NO_FATAL_FAILURE(expectMatchesRef(fromBits(bits), ref()));
  }
}

TEST_P(FP8FormatTest, MidpointsTieToEven) {
  const RefFormat &r = ref();
  for (size_t c = 0; c + 1 < r.values.size(); ++c) {
    double mid = 0.5 * (r.values[c] + r.values[c + 1]);
    float m = float(mid);
    ASSERT_EQ(double(m), mid) << "midpoint not an FP32 value";
    for (float sign : {1.0f, -1.0f}) {
      float x = sign * m;
      expectMatchesRef(x, r);
      expectMatchesRef(std::nextafter(x, 0.0f), r);
      expectMatchesRef(std::nextafter(x, sign * INFINITY), r);
      // The rule itself, not just agreement with the model: an exact tie
      // goes to the even code (or saturates at the top).
      Fp8Encoded e = encodeFp8(x, r.format);
      size_t even = c % 2 == 0 ? c : c + 1;
      if (even > r.maxCode)
        EXPECT_TRUE(e.saturated) << "midpoint " << mid;
      else
        EXPECT_EQ(int(e.code & 0x7F), int(even)) << "midpoint " << mid;
      EXPECT_EQ(bool(e.code & 0x80), sign < 0);
      // Just above / below the tie: away from / towards zero.
      Fp8Encoded up = encodeFp8(std::nextafter(x, sign * INFINITY), r.format);
      Fp8Encoded down = encodeFp8(std::nextafter(x, 0.0f), r.format);
      EXPECT_EQ(int(down.code & 0x7F), int(c)) << "below midpoint " << mid;
      if (c + 1 <= r.maxCode)
        EXPECT_EQ(int(up.code & 0x7F), int(c + 1)) << "above midpoint " << mid;
      else
        EXPECT_TRUE(up.saturated);
    }
  }
}

TEST(FP8Test, SaturationBoundaries) {
  auto e4 = [](float x) { return encodeFp8(x, Fp8Format::E4M3); };
  auto e5 = [](float x) { return encodeFp8(x, Fp8Format::E5M2); };
  auto expectCode = [](Fp8Encoded e, int code, bool saturated) {
    EXPECT_EQ(int(e.code), code);
    EXPECT_EQ(e.saturated, saturated);
  };
  expectCode(e4(448.0f), 0x7E, false);
  expectCode(e4(-448.0f), 0xFE, false);
  expectCode(e4(464.0f), 0x7E, false); // Tie between 448 and 480: even 448.
  expectCode(e4(std::nextafter(464.0f, INFINITY)), 0x7E, true);
  expectCode(e4(-std::nextafter(464.0f, INFINITY)), 0xFE, true);
  expectCode(e4(1e30f), 0x7E, true);
  expectCode(e4(std::numeric_limits<float>::max()), 0x7E, true);
  expectCode(e5(57344.0f), 0x7B, false);
  // Tie between 57344 (odd) and 65536 (even, out of range): saturates.
  expectCode(e5(61440.0f), 0x7B, true);
  expectCode(e5(-61440.0f), 0xFB, true);
  expectCode(e5(std::nextafter(61440.0f, 0.0f)), 0x7B, false);
  expectCode(e5(std::numeric_limits<float>::max()), 0x7B, true);
  // Infinities become +-max; documented as not "saturated".
  expectCode(e4(INFINITY), 0x7E, false);
  expectCode(e4(-INFINITY), 0xFE, false);
  expectCode(e5(INFINITY), 0x7B, false);
  expectCode(e5(-INFINITY), 0xFB, false);
}

TEST(FP8Test, SubnormalsZerosAndNaN) {
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    SCOPED_TRACE(name(f));
    int minSubExp = f == Fp8Format::E4M3 ? -9 : -16;
    float minSub = std::ldexp(1.0f, minSubExp);
    float halfSub = std::ldexp(1.0f, minSubExp - 1);
    EXPECT_EQ(encodeFp8(minSub, f).code, 0x01);
    EXPECT_EQ(encodeFp8(-minSub, f).code, 0x81);
    EXPECT_EQ(encodeFp8(halfSub, f).code, 0x00); // Tie to even zero.
    EXPECT_EQ(encodeFp8(-halfSub, f).code, 0x80);
    EXPECT_EQ(encodeFp8(std::nextafter(halfSub, 1.0f), f).code, 0x01);
    EXPECT_EQ(encodeFp8(3 * halfSub, f).code, 0x02); // Tie 1 vs 2: even 2.
    EXPECT_EQ(encodeFp8(5 * halfSub, f).code, 0x02); // Tie 2 vs 3: even 2.
    EXPECT_EQ(encodeFp8(0.0f, f).code, 0x00);
    EXPECT_EQ(encodeFp8(-0.0f, f).code, 0x80);
    EXPECT_EQ(encodeFp8(-1e-30f, f).code, 0x80);
    EXPECT_EQ(encodeFp8(std::numeric_limits<float>::denorm_min(), f).code, 0);
    EXPECT_EQ(encodeFp8(-std::numeric_limits<float>::denorm_min(), f).code,
              0x80);
    // The largest subnormal rounds up into the smallest normal.
    int mantBits = f == Fp8Format::E4M3 ? 3 : 2;
    float minNormal = std::ldexp(1.0f, minSubExp + mantBits);
    EXPECT_EQ(encodeFp8(std::nextafter(minNormal, 0.0f), f).code,
              1 << mantBits);
    EXPECT_EQ(decodeFp8(uint8_t(1 << mantBits), f), minNormal);
    Fp8Encoded n = encodeFp8(std::numeric_limits<float>::quiet_NaN(), f);
    EXPECT_EQ(n.code, kFp8NaNCode);
    EXPECT_FALSE(n.saturated);
    EXPECT_EQ(encodeFp8(-std::numeric_limits<float>::quiet_NaN(), f).code,
              kFp8NaNCode);
    EXPECT_EQ(encodeFp8(fromBits(0x7F800001u), f).code, kFp8NaNCode);
  }
  EXPECT_EQ(fp8MaxExponent(Fp8Format::E4M3), 8);
  EXPECT_EQ(fp8MaxExponent(Fp8Format::E5M2), 15);
}

INSTANTIATE_TEST_SUITE_P(Formats, FP8FormatTest,
                         ::testing::Values(Fp8Format::E4M3, Fp8Format::E5M2),
                         [](const auto &info) {
                           return std::string(name(info.param));
                         });

TEST(E8M0Test, AllExponentsRoundTrip) {
  for (int e = kE8M0MinExponent; e <= kE8M0MaxExponent; ++e) {
    uint8_t code = encodeE8M0(e);
    EXPECT_EQ(int(code), e + 127);
    EXPECT_EQ(e8m0Exponent(code), e);
    // 2^e exactly, including the FP32 subnormal 2^-127.
    EXPECT_EQ(double(decodeE8M0(code)), std::ldexp(1.0, e)) << "e=" << e;
  }
  EXPECT_TRUE(std::isnan(decodeE8M0(kE8M0NaNCode)));
  EXPECT_EQ(int(kE8M0NaNCode), 0xFF);
}
