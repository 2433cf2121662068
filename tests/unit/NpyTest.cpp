//===- NpyTest.cpp - Tests of the .npy reader and writer ------------------===//

#include "moss/Support/Npy.h"
#include "moss/Support/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

using namespace moss;
using llvm::StringRef;

namespace {

using Floats = std::vector<float>;

/// A .npy file with a hand-written header (no padding added) and raw data.
std::string makeNpy(int major, int minor, StringRef header, StringRef data) {
  std::string out("\x93NUMPY", 6);
  out.push_back(char(major));
  out.push_back(char(minor));
  if (major == 1) {
    out.push_back(char(header.size() & 0xFF));
    out.push_back(char(header.size() >> 8));
  } else {
    for (int i = 0; i < 4; ++i)
      out.push_back(char((header.size() >> (8 * i)) & 0xFF));
  }
  out += header.str();
  out += data.str();
  return out;
}

std::string floatBytes(const std::vector<float> &values) {
  std::string out(values.size() * 4, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    llvm::support::endian::write32le(&out[4 * i],
                                     llvm::bit_cast<uint32_t>(values[i]));
  return out;
}

std::string header2D(StringRef shape, StringRef descr = "'<f4'",
                     StringRef fortran = "False") {
  return ("{'descr': " + descr + ", 'fortran_order': " + fortran +
          ", 'shape': " + shape + ", }\n")
      .str();
}

/// The error message of a failed parse, or "" on success.
std::string parseError(StringRef bytes) {
  llvm::Expected<NpyMatrix> m = parseNpyMatrix(bytes);
  if (m)
    return "";
  return llvm::toString(m.takeError());
}

::testing::AssertionResult hasError(StringRef bytes,
                                    std::vector<std::string> keywords) {
  std::string message = parseError(bytes);
  if (message.empty())
    return ::testing::AssertionFailure() << "parsed without error";
  if (message.find('\n') != std::string::npos)
    return ::testing::AssertionFailure()
           << "message is not one line: " << message;
  for (const std::string &keyword : keywords)
    if (message.find(keyword) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" lacks \"" << keyword << "\"";
  return ::testing::AssertionSuccess() << message;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

std::vector<float> randomValues(std::mt19937_64 &rng, size_t count) {
  std::vector<float> values(count);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (float &v : values) {
    if (rng() % 4 == 0)
      v = llvm::bit_cast<float>(uint32_t(rng())); // any bits: NaNs, inf, -0
    else
      v = normal(rng);
  }
  return values;
}

/// Reads the header-length field and checks numpy's layout rules.
void expectAlignedHeader(const std::vector<char> &bytes, size_t dataBytes) {
  ASSERT_GE(bytes.size(), 10u + dataBytes);
  size_t prefix = bytes.size() - dataBytes;
  EXPECT_EQ(prefix % 64, 0u) << "data starts at " << prefix;
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  size_t headerLength = llvm::support::endian::read16le(bytes.data() + 8);
  EXPECT_EQ(10 + headerLength, prefix);
  EXPECT_EQ(bytes[prefix - 1], '\n');
  // Padding is spaces only, between the dict's closing brace and the '\n'.
  StringRef header(bytes.data() + 10, headerLength);
  size_t close = header.rfind('}');
  ASSERT_NE(close, StringRef::npos);
  EXPECT_EQ(header.substr(close + 1).drop_back().find_first_not_of(' '),
            StringRef::npos);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

// Golden bytes from numpy 1.24's np.save(np.arange(6, dtype=np.float32)
// .reshape(2, 3)) and np.save(np.array([1, 2, 3], dtype=np.uint8)).
TEST(NpyTest, SerializeMatchesNumpy) {
  std::string floatHeader =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
      std::string(58, ' ') + "\n";
  std::string expectedF32 = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                            floatHeader + floatBytes({0, 1, 2, 3, 4, 5});
  ASSERT_EQ(expectedF32.size(), 152u);
  std::vector<char> f32 =
      serializeNpy({2, 3}, Floats{0.f, 1.f, 2.f, 3.f, 4.f, 5.f});
  EXPECT_EQ(std::string(f32.begin(), f32.end()), expectedF32);

  std::string u8Header =
      "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }" +
      std::string(60, ' ') + "\n";
  std::string expectedU8 =
      std::string("\x93NUMPY\x01\x00\x76\x00", 10) + u8Header + "\x01\x02\x03";
  ASSERT_EQ(expectedU8.size(), 131u);
  std::vector<uint8_t> codes = {1, 2, 3};
  std::vector<char> u8 = serializeNpy({3}, llvm::ArrayRef<uint8_t>(codes));
  EXPECT_EQ(std::string(u8.begin(), u8.end()), expectedU8);
}

TEST(NpyTest, HeaderIsAlignedTo64) {
  std::vector<std::vector<int64_t>> shapes = {
      {1},          {7},        {1, 1},       {2, 3},
      {130, 384},   {12345678}, {1000000, 1}, {1, 1000000},
      {99999, 999}, {1, 2, 3},  {4096, 4096}};
  for (const auto &shape : shapes) {
    int64_t count = 1;
    for (int64_t d : shape)
      count *= d;
    if (count > (1 << 24))
      continue;
    SCOPED_TRACE(::testing::Message()
                 << "rank " << shape.size() << " count " << count);
    std::vector<float> values(count, 1.5f);
    expectAlignedHeader(serializeNpy(shape, values), 4 * count);
    std::vector<uint8_t> codes(count, 7);
    expectAlignedHeader(serializeNpy(shape, llvm::ArrayRef<uint8_t>(codes)),
                        count);
  }
}

TEST(NpyTest, HeaderIsAlignedForEveryDictLength) {
  // Shapes whose header text spans many lengths; the data offset must be a
  // multiple of 64 every time (numpy pads 1..64 spaces).
  for (int64_t rows : {1LL, 10LL, 100LL, 1000LL, 10000LL}) {
    for (int64_t cols = 1; cols <= 200; ++cols) {
      std::vector<float> values(rows * cols, -2.0f);
      if (values.size() > 200000)
        continue;
      std::vector<char> bytes = serializeNpy({rows, cols}, values);
      expectAlignedHeader(bytes, 4 * values.size());
    }
  }
}

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST(NpyTest, RoundTripRandom) {
  uint64_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 50; ++iter) {
    int64_t rows = 1 + rng() % 70, cols = 1 + rng() % 300;
    if (iter == 0)
      rows = cols = 1;
    SCOPED_TRACE(::testing::Message()
                 << "shape (" << rows << ", " << cols << ")");
    std::vector<float> values = randomValues(rng, rows * cols);
    std::vector<char> bytes = serializeNpy({rows, cols}, values);
    expectAlignedHeader(bytes, 4 * values.size());
    llvm::Expected<NpyMatrix> m =
        parseNpyMatrix(StringRef(bytes.data(), bytes.size()));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->rows, rows);
    EXPECT_EQ(m->cols, cols);
    EXPECT_TRUE(sameBits(m->data, values));
  }
}

class NpyFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("moss-npytest", dir);
    ASSERT_FALSE(ec) << ec.message();
  }
  void TearDown() override {
    if (!dir.empty())
      llvm::sys::fs::remove_directories(dir);
  }
  std::string pathTo(StringRef name) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    return std::string(path.str());
  }
  /// Names in the directory (to find stray temporary files).
  std::vector<std::string> listing() {
    std::vector<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec))
      names.push_back(std::string(llvm::sys::path::filename(it->path())));
    return names;
  }
  llvm::SmallString<256> dir;
};

TEST_F(NpyFileTest, RoundTripThroughFile) {
  uint64_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::string path = pathTo("x.npy");
  for (int iter = 0; iter < 10; ++iter) {
    int64_t rows = 1 + rng() % 130, cols = 1 + rng() % 400;
    std::vector<float> values = randomValues(rng, rows * cols);
    std::vector<char> bytes = serializeNpy({rows, cols}, values);
    // The second and later writes replace an existing file.
    llvm::Error err = writeFileAtomically(path, bytes);
    ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
    llvm::Expected<NpyMatrix> m = readNpyMatrix(path);
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->rows, rows);
    EXPECT_EQ(m->cols, cols);
    EXPECT_TRUE(sameBits(m->data, values));
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"x.npy"});
}

TEST_F(NpyFileTest, ReadMissingFileNamesPath) {
  std::string path = pathTo("missing.npy");
  llvm::Expected<NpyMatrix> m = readNpyMatrix(path);
  ASSERT_FALSE(bool(m));
  std::string message = llvm::toString(m.takeError());
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST_F(NpyFileTest, ReadErrorNamesPathAndProblem) {
  std::string path = pathTo("bad.npy");
  std::string bytes = makeNpy(1, 0, header2D("(3,)"), floatBytes({1, 2, 3}));
  ASSERT_FALSE(bool(writeFileAtomically(
      path, llvm::ArrayRef<char>(bytes.data(), bytes.size()))));
  llvm::Expected<NpyMatrix> m = readNpyMatrix(path);
  ASSERT_FALSE(bool(m));
  std::string message = llvm::toString(m.takeError());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("expected a 2-D array, got shape (3,)"),
            std::string::npos)
      << message;
}

TEST_F(NpyFileTest, WriteIntoMissingDirectoryFails) {
  std::string path = pathTo("no/such/dir/out.npy");
  std::vector<char> bytes = serializeNpy({1}, Floats{1.0f});
  llvm::Error err = writeFileAtomically(path, bytes);
  ASSERT_TRUE(bool(err));
  std::string message = llvm::toString(std::move(err));
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_TRUE(listing().empty());
}

TEST_F(NpyFileTest, FailedRenameRemovesTemporary) {
  // A non-empty directory where the file should go: rename fails.
  std::string path = pathTo("taken");
  ASSERT_FALSE(llvm::sys::fs::create_directory(path));
  std::string inner = path + "/keep";
  ASSERT_FALSE(
      bool(writeFileAtomically(inner, serializeNpy({1}, Floats{2.0f}))));
  llvm::Error err = writeFileAtomically(path, serializeNpy({1}, Floats{1.0f}));
  ASSERT_TRUE(bool(err));
  std::string message = llvm::toString(std::move(err));
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

TEST_F(NpyFileTest, WriteThroughSymlinkReplacesTarget) {
  // A relative link into another directory; the temporary goes next to the
  // target, and the link stays a link.
  ASSERT_FALSE(llvm::sys::fs::create_directory(pathTo("links")));
  ASSERT_FALSE(llvm::sys::fs::create_directory(pathTo("targets")));
  std::string target = pathTo("targets/x.npy");
  std::string link = pathTo("links/x.npy");
  ASSERT_FALSE(bool(writeFileAtomically(target, serializeNpy({1}, Floats{1}))));
  ASSERT_FALSE(llvm::sys::fs::create_link("../targets/x.npy", link));
  llvm::Error err =
      writeFileAtomically(link, serializeNpy({1, 2}, Floats{2, 3}));
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  llvm::sys::fs::file_status status;
  ASSERT_FALSE(llvm::sys::fs::status(link, status, /*follow=*/false));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::symlink_file);
  llvm::Expected<NpyMatrix> m = readNpyMatrix(target);
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->cols, 2);
  // No temporary left in either directory.
  for (StringRef sub : {"links", "targets"}) {
    std::error_code ec;
    int entries = 0;
    for (llvm::sys::fs::directory_iterator it(pathTo(sub), ec), end;
         it != end && !ec; it.increment(ec))
      ++entries;
    EXPECT_EQ(entries, 1) << sub.str();
  }
}

TEST_F(NpyFileTest, WriteThroughDanglingSymlinkCreatesTarget) {
  std::string target = pathTo("new.npy");
  std::string link = pathTo("link.npy");
  ASSERT_FALSE(llvm::sys::fs::create_link(target, link));
  llvm::Error err = writeFileAtomically(link, serializeNpy({1}, Floats{1}));
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  EXPECT_TRUE(llvm::sys::fs::is_regular_file(target));
  llvm::sys::fs::file_status status;
  ASSERT_FALSE(llvm::sys::fs::status(link, status, /*follow=*/false));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::symlink_file);
}

TEST_F(NpyFileTest, WriteToCharacterDeviceWritesInPlace) {
  // As root a rename would replace /dev/null with a regular file.
  ASSERT_FALSE(
      bool(writeFileAtomically("/dev/null", serializeNpy({1}, Floats{1.0f}))));
  llvm::sys::fs::file_status status;
  ASSERT_FALSE(llvm::sys::fs::status("/dev/null", status, /*follow=*/false));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::character_file);
}

TEST_F(NpyFileTest, WriteToFifoWritesInPlace) {
  std::string path = pathTo("fifo");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::vector<char> bytes = serializeNpy({1}, Floats{1.0f});
  std::string read;
  std::thread reader([&] {
    std::ifstream in(path, std::ios::binary);
    read.assign(std::istreambuf_iterator<char>(in), {});
  });
  llvm::Error err = writeFileAtomically(path, bytes);
  reader.join();
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  EXPECT_EQ(read, std::string(bytes.begin(), bytes.end()));
  llvm::sys::fs::file_status status;
  ASSERT_FALSE(llvm::sys::fs::status(path, status, /*follow=*/false));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::fifo_file);
}

TEST_F(NpyFileTest, WriteToDirectoryIsRefused) {
  std::string path = pathTo("taken");
  ASSERT_FALSE(llvm::sys::fs::create_directory(path));
  llvm::Error err = writeFileAtomically(path, serializeNpy({1}, Floats{1.0f}));
  ASSERT_TRUE(bool(err));
  std::string message = llvm::toString(std::move(err));
  EXPECT_NE(message.find("'" + path + "': it is a directory; expected a file"),
            std::string::npos)
      << message;
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

//===----------------------------------------------------------------------===//
// Header versions and spellings
//===----------------------------------------------------------------------===//

TEST(NpyTest, ParsesVersion2And3Headers) {
  std::vector<float> values = {1.0f, -2.0f, 3.5f, 0.0f, -0.0f, 1e-40f};
  for (int major : {2, 3}) {
    SCOPED_TRACE(major);
    std::string header = header2D("(2, 3)");
    // Pad so the data is aligned as numpy would (not required to parse).
    header.insert(header.size() - 1, std::string(40, ' '));
    std::string bytes = makeNpy(major, 0, header, floatBytes(values));
    llvm::Expected<NpyMatrix> m = parseNpyMatrix(bytes);
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->rows, 2);
    EXPECT_EQ(m->cols, 3);
    EXPECT_TRUE(sameBits(m->data, values));
  }
  // A header longer than 65535 bytes only fits in a version 2.0 file.
  std::string longHeader = header2D("(1, 2)");
  longHeader.insert(longHeader.size() - 1, std::string(70000, ' '));
  llvm::Expected<NpyMatrix> m =
      parseNpyMatrix(makeNpy(2, 0, longHeader, floatBytes({7.0f, 8.0f})));
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->data, (std::vector<float>{7.0f, 8.0f}));
}

TEST(NpyTest, ParsesOtherSpellings) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  // Key order, double quotes, Python 2 'L' suffixes, no trailing comma.
  for (StringRef header :
       {"{'shape': (3, 2), 'fortran_order': False, 'descr': '<f4'}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3L, 2L)}",
        "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 3 , 2 , ) "
        "}  \n"}) {
    SCOPED_TRACE(header.str());
    llvm::Expected<NpyMatrix> m =
        parseNpyMatrix(makeNpy(1, 0, header, floatBytes(values)));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->rows, 3);
    EXPECT_EQ(m->cols, 2);
    EXPECT_EQ(m->data, values);
  }
}

//===----------------------------------------------------------------------===//
// Malformed input
//===----------------------------------------------------------------------===//

TEST(NpyTest, RejectsBadMagic) {
  std::string good = makeNpy(1, 0, header2D("(1, 1)"), floatBytes({1}));
  EXPECT_TRUE(hasError("", {"not a .npy file"}));
  EXPECT_TRUE(hasError("\x93NUMP", {"not a .npy file"}));
  EXPECT_TRUE(hasError("PK\x03\x04 a zip file, not npy", {"not a .npy file"}));
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_TRUE(hasError(bad, {"not a .npy file"}));
}

TEST(NpyTest, RejectsUnsupportedVersion) {
  std::string header = header2D("(1, 1)");
  EXPECT_TRUE(hasError(makeNpy(4, 0, header, floatBytes({1})),
                       {"unsupported .npy version 4.0"}));
  EXPECT_TRUE(hasError(makeNpy(1, 1, header, floatBytes({1})),
                       {"unsupported .npy version 1.1"}));
  EXPECT_TRUE(hasError(makeNpy(0, 0, header, floatBytes({1})),
                       {"unsupported .npy version 0.0"}));
}

/// Little-endian 16- and 64-bit words.
std::string wordBytes16(const std::vector<uint16_t> &words) {
  std::string out(words.size() * 2, '\0');
  for (size_t i = 0; i < words.size(); ++i)
    llvm::support::endian::write16le(&out[2 * i], words[i]);
  return out;
}
std::string doubleBytes(const std::vector<double> &values) {
  std::string out(values.size() * 8, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    llvm::support::endian::write64le(&out[8 * i],
                                     llvm::bit_cast<uint64_t>(values[i]));
  return out;
}

uint32_t bitsOf(float x) { return llvm::bit_cast<uint32_t>(x); }

TEST(NpyTest, ReadsFloat16Exactly) {
  // 1, -0, the smallest and largest subnormals, the largest normal, -inf,
  // a NaN, and 1 + 2^-10.
  const std::vector<uint16_t> half = {0x3C00, 0x8000, 0x0001, 0x03FF,
                                      0x7BFF, 0xFC00, 0x7E00, 0x3C01};
  llvm::Expected<NpyMatrix> m = parseNpyMatrix(
      makeNpy(1, 0, header2D("(2, 4)", "'<f2'"), wordBytes16(half)));
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->source, NpyElementType::F16);
  ASSERT_EQ(m->data.size(), 8u);
  EXPECT_EQ(m->data[0], 1.0f);
  EXPECT_EQ(bitsOf(m->data[1]), 0x80000000u);
  EXPECT_EQ(m->data[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(m->data[3], 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(m->data[4], 65504.0f);
  EXPECT_EQ(m->data[5], -INFINITY);
  EXPECT_TRUE(std::isnan(m->data[6]));
  EXPECT_EQ(m->data[7], 1.0f + std::ldexp(1.0f, -10));
}

TEST(NpyTest, RoundsFloat64ToNearestEven) {
  // Ties between float32 neighbours go to the even one; beyond the range,
  // infinity.
  const std::vector<double> values = {1.0 + std::ldexp(1.0, -24),
                                      1.0 + 3 * std::ldexp(1.0, -24),
                                      -0.1, 1e39};
  llvm::Expected<NpyMatrix> m = parseNpyMatrix(
      makeNpy(1, 0, header2D("(1, 4)", "'<f8'"), doubleBytes(values)));
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->source, NpyElementType::F64);
  EXPECT_EQ(m->data[0], 1.0f);
  EXPECT_EQ(m->data[1], 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(m->data[2], -0.1f);
  EXPECT_EQ(m->data[3], INFINITY);
}

TEST(NpyTest, ReadsUint16AsBf16BitsOnlyWhenAsked) {
  const std::vector<uint16_t> bits = {0x3F80, 0xC040, 0x7F80, 0x0001};
  const std::string file =
      makeNpy(1, 0, header2D("(2, 2)", "'<u2'"), wordBytes16(bits));
  EXPECT_TRUE(hasError(file, {"dtype '<u2'", "BF16 bit patterns",
                              "--bf16-bits"}));
  NpyReadOptions options;
  options.uint16AsBf16 = true;
  llvm::Expected<NpyMatrix> m = parseNpyMatrix(file, options);
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->source, NpyElementType::BF16);
  EXPECT_EQ(m->bf16, bits);
  EXPECT_EQ(m->data[0], 1.0f);
  EXPECT_EQ(m->data[1], -3.0f);
  EXPECT_EQ(m->data[2], INFINITY);
  EXPECT_EQ(bitsOf(m->data[3]), 0x00010000u);
}

TEST(NpyTest, RejectsOtherDtypes) {
  std::vector<float> two = {1, 2};
  for (StringRef descr :
       {"'>f4'", "'|u1'", "'<i4'", "'=f4'", "'float32'", "'<u2'"})
    EXPECT_TRUE(hasError(
        makeNpy(1, 0, header2D("(1, 1)", descr), floatBytes({1})),
        {"dtype " + descr.str(),
         "is not float32 ('<f4'), float16 ('<f2') or float64 ('<f8')"}));
  // A structured dtype's descr is a list.
  EXPECT_TRUE(
      hasError(makeNpy(1, 0, header2D("(1, 1)", "[('a', '<f4'), ('b', '<f4')]"),
                       floatBytes(two)),
               {"dtype [('a', '<f4'), ('b', '<f4')]", "not float32"}));
  // What serializeNpy writes for codes is not a float32 matrix.
  std::vector<uint8_t> codes = {1, 2, 3, 4};
  std::vector<char> u8 = serializeNpy({2, 2}, llvm::ArrayRef<uint8_t>(codes));
  EXPECT_TRUE(hasError(StringRef(u8.data(), u8.size()),
                       {"dtype '|u1' is not float32"}));
}

TEST(NpyTest, RejectsFortranOrder) {
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(2, 2)", "'<f4'", "True"),
                               floatBytes({1, 2, 3, 4})),
                       {"Fortran-order arrays are not supported; save with "
                        "np.ascontiguousarray"}));
  EXPECT_TRUE(hasError(
      makeNpy(1, 0, header2D("(2, 2)", "'<f4'", "0"), floatBytes({1, 2, 3, 4})),
      {"fortran_order"}));
}

TEST(NpyTest, RejectsOtherRanks) {
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(3,)"), floatBytes({1, 2, 3})),
                       {"expected a 2-D array, got shape (3,)"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("()"), floatBytes({1})),
                       {"expected a 2-D array, got shape ()"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(1, 2, 1)"), floatBytes({1, 2})),
                       {"expected a 2-D array, got shape (1, 2, 1)"}));
  // What numpy writes for a 1-D array is rejected with the same words.
  std::vector<char> oneD = serializeNpy({3}, Floats{1.0f, 2.0f, 3.0f});
  EXPECT_TRUE(hasError(StringRef(oneD.data(), oneD.size()),
                       {"expected a 2-D array, got shape (3,)"}));
}

TEST(NpyTest, RejectsZeroSizedDims) {
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(0, 3)"), ""),
                       {"(0, 3)", "zero-sized"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(4, 0)"), ""),
                       {"(4, 0)", "zero-sized"}));
}

TEST(NpyTest, RejectsTruncatedData) {
  std::vector<float> five = {1, 2, 3, 4, 5};
  std::string bytes = makeNpy(1, 0, header2D("(2, 3)"), floatBytes(five));
  EXPECT_TRUE(hasError(bytes, {"truncated", "(2, 3)", "24 bytes", "20"}));
  std::vector<char> full =
      serializeNpy({2, 3}, Floats{1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  for (size_t cut : {size_t(1), size_t(3), size_t(24)})
    EXPECT_TRUE(
        hasError(StringRef(full.data(), full.size() - cut), {"truncated"}));
  // Header length beyond the end of the file.
  EXPECT_TRUE(hasError(StringRef(full.data(), 40), {"truncated", "header"}));
  EXPECT_TRUE(hasError(StringRef(full.data(), 9), {"truncated"}));
}

TEST(NpyTest, RejectsTrailingBytes) {
  std::vector<float> seven = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(2, 3)"), floatBytes(seven)),
                       {"4 unexpected bytes after the data"}));
}

TEST(NpyTest, RejectsShapeOverflow) {
  EXPECT_TRUE(hasError(
      makeNpy(1, 0, header2D("(4611686018427387904, 4)"), floatBytes({1})),
      {"too large"}));
  EXPECT_TRUE(hasError(
      makeNpy(1, 0, header2D("(2147483648, 2147483648)"), floatBytes({1})),
      {"too large"}));
  EXPECT_TRUE(hasError(
      makeNpy(1, 0, header2D("(99999999999999999999999, 1)"), floatBytes({1})),
      {"(99999999999999999999999, 1)", "too large"}));
}

TEST(NpyTest, RejectsMalformedHeaders) {
  std::string data = floatBytes({1});
  EXPECT_TRUE(hasError(makeNpy(1, 0, "not a dict", data), {"malformed"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, "{'descr': '<f4', 'shape': (1, 1)}", data),
                       {"malformed", "fortran_order"}));
  EXPECT_TRUE(hasError(
      makeNpy(1, 0,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), "
              "'extra': 1}",
              data),
      {"malformed", "extra"}));
  EXPECT_TRUE(
      hasError(makeNpy(1, 0, header2D("(-1, 1)"), data), {"shape", "(-1, 1)"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(1)"), data), {"shape"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("[1, 1]"), data), {"shape"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(1, 1"), data), {"malformed"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, "{'descr': '<f4", data), {"malformed"}));
  EXPECT_TRUE(hasError(makeNpy(1, 0, header2D("(1, 1)") + "junk", data),
                       {"malformed"}));
}

} // namespace
