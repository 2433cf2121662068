//===- Npy.cpp - Reading and writing NumPy .npy files ---------------------===//
//
// The .npy format (numpy/lib/format.py, NEP 1):
//   bytes 0-5   "\x93NUMPY"
//   bytes 6-7   major, minor version (1.0, 2.0 or 3.0)
//   then        header length: u16 little-endian (1.0) or u32 (2.0, 3.0)
//   then        the header: a Python dict literal with exactly the keys
//               'descr', 'fortran_order' and 'shape', padded with spaces and
//               a final '\n'
//   then        the raw array data.
// numpy pads the header so that the data starts at a multiple of 64 bytes and
// leaves room after the dict for the first dimension to grow to 21 digits.
// serializeNpy writes exactly what numpy's np.save writes for the same array.
//
//===----------------------------------------------------------------------===//

#include "moss/Support/Npy.h"
#include "moss/Support/UntrustedInput.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cassert>
#include <limits>
#include <string>

using namespace llvm;

namespace moss {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
/// numpy's ARRAY_ALIGN: the data starts at a multiple of this.
constexpr size_t kArrayAlign = 64;
/// numpy's GROWTH_AXIS_MAX_DIGITS: spare room after the dict so the header
/// can be rewritten in place when the first axis grows.
constexpr size_t kGrowthAxisMaxDigits = 21;

/// Formats a shape the way Python's repr formats a tuple of ints:
/// "()", "(3,)", "(2, 3)".
std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1)
    text += ",";
  text += ")";
  return text;
}

//===----------------------------------------------------------------------===//
// Header parsing
//===----------------------------------------------------------------------===//

/// One value of the header dict.
struct HeaderValue {
  enum class Kind { String, Bool, IntTuple, Other };
  Kind kind = Kind::Other;
  /// The literal as written (for messages).
  std::string text;
  /// String contents (Kind::String).
  std::string str;
  /// Kind::Bool.
  bool boolean = false;
  /// Kind::IntTuple. A dimension too large for int64 sets `overflow`.
  SmallVector<int64_t, 4> ints;
  bool overflow = false;
};

/// A recursive-descent parser for the small subset of Python literals a .npy
/// header uses. Anything it does not understand as a string, bool or tuple of
/// ints it keeps as raw text (e.g. the list descr of a structured dtype) so
/// that the caller can name it in an error.
class HeaderParser {
public:
  explicit HeaderParser(StringRef text) : text(text) {}

  Error parse(StringMap<HeaderValue> &dict) {
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'");
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return fail("expected a quoted key");
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after key '" + key + "'");
      skipSpace();
      HeaderValue value;
      if (Error err = parseValue(value))
        return err;
      if (dict.count(key))
        return fail("duplicate key '" + key + "'");
      dict[key] = std::move(value);
      skipSpace();
      if (consume(','))
        continue;
      if (consume('}'))
        break;
      return fail("expected ',' or '}'");
    }
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the dictionary");
    return Error::success();
  }

private:
  StringRef text;
  size_t pos = 0;

  Error fail(const Twine &what) {
    return createStringError("malformed .npy header: " + what + " at offset " +
                             Twine(pos));
  }

  bool atEnd() const { return pos >= text.size(); }
  char peek() const { return atEnd() ? '\0' : text[pos]; }
  bool consume(char c) {
    if (peek() != c)
      return false;
    ++pos;
    return true;
  }
  void skipSpace() {
    while (!atEnd() && isSpace(text[pos]))
      ++pos;
  }

  /// A '...' or "..." literal without escapes (numpy never writes any).
  bool parseString(std::string &out) {
    char quote = peek();
    if (quote != '\'' && quote != '"')
      return false;
    size_t end = text.find(quote, pos + 1);
    if (end == StringRef::npos)
      return false;
    StringRef body = text.slice(pos + 1, end);
    if (body.contains('\\'))
      return false;
    out = body.str();
    pos = end + 1;
    return true;
  }

  /// Non-negative decimal integer, with the 'L' suffix Python 2 wrote.
  bool parseInt(int64_t &out, bool &overflow) {
    size_t start = pos;
    uint64_t value = 0;
    while (!atEnd() && isDigit(text[pos])) {
      unsigned digit = text[pos] - '0';
      if (value > (uint64_t(INT64_MAX) - digit) / 10)
        overflow = true;
      else
        value = value * 10 + digit;
      ++pos;
    }
    if (pos == start)
      return false;
    consume('L');
    out = overflow ? 0 : int64_t(value);
    return true;
  }

  Error parseValue(HeaderValue &value) {
    size_t start = pos;
    char c = peek();
    if (c == '\'' || c == '"') {
      if (!parseString(value.str))
        return fail("unterminated string");
      value.kind = HeaderValue::Kind::String;
    } else if (text.substr(pos).starts_with("True") ||
               text.substr(pos).starts_with("False")) {
      value.boolean = text[pos] == 'T';
      pos += value.boolean ? 4 : 5;
      value.kind = HeaderValue::Kind::Bool;
    } else if (c == '(' && parseIntTuple(value)) {
      value.kind = HeaderValue::Kind::IntTuple;
    } else {
      pos = start;
      if (Error err = skipRaw())
        return err;
      value.kind = HeaderValue::Kind::Other;
    }
    value.text = text.slice(start, pos).trim().str();
    return Error::success();
  }

  /// "(" [int ("," int)* [","]] ")". Leaves `pos` unspecified on failure.
  bool parseIntTuple(HeaderValue &value) {
    consume('(');
    skipSpace();
    if (consume(')'))
      return true;
    while (true) {
      skipSpace();
      int64_t dim;
      if (!parseInt(dim, value.overflow))
        return false;
      value.ints.push_back(dim);
      skipSpace();
      if (consume(',')) {
        skipSpace();
        if (consume(')'))
          return true;
        continue;
      }
      if (consume(')'))
        return value.ints.size() != 1; // "(3)" is an int, not a tuple.
      return false;
    }
  }

  /// Skips a value we do not model, up to the next top-level ',' or '}'.
  Error skipRaw() {
    int depth = 0;
    while (!atEnd()) {
      char c = peek();
      if (c == '\'' || c == '"') {
        std::string ignored;
        if (!parseString(ignored))
          return fail("unterminated string");
        continue;
      }
      if (c == '(' || c == '[' || c == '{')
        ++depth;
      else if (c == ')' || c == ']' || c == '}') {
        if (depth == 0)
          break;
        --depth;
      } else if (c == ',' && depth == 0)
        break;
      ++pos;
    }
    if (depth != 0)
      return fail("unbalanced brackets");
    return Error::success();
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// An IEEE half as float32, exactly (NaN payloads kept).
static float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) // zero or subnormal: mantissa * 2^-24, exact in float
    return llvm::bit_cast<float>(
        sign | llvm::bit_cast<uint32_t>(float(mantissa) * 0x1p-24f));
  if (exponent == 0x1F)
    return llvm::bit_cast<float>(sign | 0x7F800000u | mantissa << 13);
  return llvm::bit_cast<float>(sign | (exponent + 112) << 23 | mantissa << 13);
}

Expected<NpyMatrix> parseNpyMatrix(StringRef bytes,
                                   const NpyReadOptions &options) {
  if (bytes.size() < kMagicLen + 2 ||
      !bytes.starts_with(StringRef(kMagic, kMagicLen)))
    return createStringError("not a .npy file (missing the \\x93NUMPY magic)");
  unsigned major = uint8_t(bytes[6]), minor = uint8_t(bytes[7]);
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    return createStringError("unsupported .npy version " + Twine(major) + "." +
                             Twine(minor) + " (expected 1.0, 2.0 or 3.0)");
  size_t lengthSize = major == 1 ? 2 : 4;
  size_t headerStart = kMagicLen + 2 + lengthSize;
  if (bytes.size() < headerStart)
    return createStringError("truncated .npy file: it ends inside the header "
                             "length field");
  const char *lengthPtr = bytes.data() + kMagicLen + 2;
  uint64_t headerLength = major == 1 ? support::endian::read16le(lengthPtr)
                                     : support::endian::read32le(lengthPtr);
  if (bytes.size() - headerStart < headerLength)
    return createStringError("truncated .npy file: the header is " +
                             Twine(headerLength) + " bytes but only " +
                             Twine(bytes.size() - headerStart) + " follow");
  StringRef header = bytes.substr(headerStart, headerLength);
  size_t dataStart = headerStart + headerLength;

  StringMap<HeaderValue> dict;
  if (Error err = HeaderParser(header).parse(dict))
    return err;
  for (const char *key : {"descr", "fortran_order", "shape"})
    if (!dict.count(key))
      return createStringError(Twine("malformed .npy header: no '") + key +
                               "' key");
  if (dict.size() != 3) {
    for (const auto &entry : dict)
      if (entry.getKey() != "descr" && entry.getKey() != "fortran_order" &&
          entry.getKey() != "shape")
        return createStringError("malformed .npy header: unexpected key '" +
                                 entry.getKey() + "'");
  }

  const HeaderValue &descr = dict["descr"];
  const bool named = descr.kind == HeaderValue::Kind::String;
  NpyElementType type = NpyElementType::F32;
  int64_t elementBytes = 4;
  if (named && descr.str == "<f4") {
  } else if (named && descr.str == "<f2") {
    type = NpyElementType::F16;
    elementBytes = 2;
  } else if (named && descr.str == "<f8") {
    type = NpyElementType::F64;
    elementBytes = 8;
  } else if (named && descr.str == "<u2" && options.uint16AsBf16) {
    type = NpyElementType::BF16;
    elementBytes = 2;
  } else {
    std::string name = named ? "'" + descr.str + "'" : descr.text;
    return createStringError(
        "dtype " + name +
        " is not float32 ('<f4'), float16 ('<f2') or float64 ('<f8')" +
        (named && descr.str == "<u2"
             ? "; uint16 holds BF16 bit patterns only where the reader is "
               "told so (moss-jit quantize --bf16-bits)"
             : ""));
  }

  const HeaderValue &fortran = dict["fortran_order"];
  if (fortran.kind != HeaderValue::Kind::Bool)
    return createStringError("malformed .npy header: fortran_order is " +
                             fortran.text + ", expected True or False");
  if (fortran.boolean)
    return createStringError("Fortran-order arrays are not supported; save "
                             "with np.ascontiguousarray");

  const HeaderValue &shape = dict["shape"];
  if (shape.kind != HeaderValue::Kind::IntTuple)
    return createStringError("malformed .npy header: shape is " + shape.text +
                             ", expected a tuple of non-negative integers");
  if (shape.ints.size() != 2)
    return createStringError("expected a 2-D array, got shape " + shape.text);
  if (shape.overflow)
    return createStringError("shape " + shape.text + " is too large");
  int64_t rows = shape.ints[0], cols = shape.ints[1];
  if (rows == 0 || cols == 0)
    return createStringError("shape " + formatShape(shape.ints) +
                             " has a zero-sized dimension");
  int64_t count, byteCount;
  if (MulOverflow(rows, cols, count) ||
      MulOverflow(count, elementBytes, byteCount) ||
      uint64_t(byteCount) > std::numeric_limits<size_t>::max() / 2)
    return createStringError("shape " + formatShape(shape.ints) +
                             " is too large");

  uint64_t available = bytes.size() - dataStart;
  if (available < uint64_t(byteCount))
    return createStringError("truncated .npy data: shape " +
                             formatShape(shape.ints) + " needs " +
                             Twine(byteCount) +
                             " bytes of data, the "
                             "file holds " +
                             Twine(available));
  if (available > uint64_t(byteCount))
    return createStringError(
        "malformed .npy file: " + Twine(available - uint64_t(byteCount)) +
        " unexpected bytes after the data of shape " + formatShape(shape.ints));

  NpyMatrix matrix;
  matrix.rows = rows;
  matrix.cols = cols;
  matrix.source = type;
  matrix.data.resize(size_t(count));
  const char *data = bytes.data() + dataStart;
  switch (type) {
  case NpyElementType::F32:
    for (size_t i = 0; i < matrix.data.size(); ++i)
      matrix.data[i] =
          llvm::bit_cast<float>(support::endian::read32le(data + 4 * i));
    break;
  case NpyElementType::F16:
    for (size_t i = 0; i < matrix.data.size(); ++i)
      matrix.data[i] = halfToFloat(support::endian::read16le(data + 2 * i));
    break;
  case NpyElementType::F64:
    // (The conversion rounds to nearest even.)
    for (size_t i = 0; i < matrix.data.size(); ++i)
      matrix.data[i] = float(
          llvm::bit_cast<double>(support::endian::read64le(data + 8 * i)));
    break;
  case NpyElementType::BF16:
    matrix.bf16.resize(size_t(count));
    for (size_t i = 0; i < matrix.data.size(); ++i) {
      matrix.bf16[i] = support::endian::read16le(data + 2 * i);
      matrix.data[i] = llvm::bit_cast<float>(uint32_t(matrix.bf16[i]) << 16);
    }
    break;
  }
  return matrix;
}

Expected<NpyMatrix> readNpyMatrix(StringRef path,
                                  const NpyReadOptions &options) {
  // A FIFO would block and /dev/zero never ends: only regular files are
  // read (mapped where large, so that a sparse file costs nothing until its
  // header is checked).
  Expected<std::unique_ptr<MemoryBuffer>> buffer =
      readRegularFile(path, kMaxNpyBytes, "the .npy file");
  if (!buffer)
    return buffer.takeError();
  Expected<NpyMatrix> matrix = parseNpyMatrix((*buffer)->getBuffer(), options);
  if (!matrix)
    return createStringError("'" + path + "': " + toString(matrix.takeError()));
  return matrix;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// The version 1.0 .npy prefix (magic, version, length, header), exactly as
/// numpy's np.save writes it for a C-order array.
std::vector<char> npyPrefix(StringRef descr, ArrayRef<int64_t> shape) {
  std::string dict =
      "{'descr': '" + descr.str() +
      "', 'fortran_order': False, 'shape': " + formatShape(shape) + ", }";
  if (!shape.empty()) {
    size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits)
      dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  size_t fixed = kMagicLen + 2 + 2;
  size_t withNewline = dict.size() + 1;
  // numpy pads with 1 to 64 spaces (64 when already aligned).
  size_t padding = kArrayAlign - (fixed + withNewline) % kArrayAlign;
  size_t headerLength = withNewline + padding;
  assert(headerLength <= 0xFFFF && "header too long for .npy version 1.0");

  std::vector<char> out(kMagic, kMagic + kMagicLen);
  out.push_back(1);
  out.push_back(0);
  out.push_back(char(headerLength & 0xFF));
  out.push_back(char(headerLength >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), padding, ' ');
  out.push_back('\n');
  assert(out.size() % kArrayAlign == 0);
  return out;
}

[[maybe_unused]] int64_t elementCount(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

} // namespace

std::vector<char> serializeNpy(ArrayRef<int64_t> shape,
                               ArrayRef<float> values) {
  assert(elementCount(shape) == int64_t(values.size()) &&
         "shape does not match the number of values");
  std::vector<char> out = npyPrefix("<f4", shape);
  size_t start = out.size();
  out.resize(start + 4 * values.size());
  for (size_t i = 0; i < values.size(); ++i)
    support::endian::write32le(out.data() + start + 4 * i,
                               llvm::bit_cast<uint32_t>(values[i]));
  return out;
}

std::vector<char> serializeNpy(ArrayRef<int64_t> shape,
                               ArrayRef<uint8_t> values) {
  assert(elementCount(shape) == int64_t(values.size()) &&
         "shape does not match the number of values");
  std::vector<char> out = npyPrefix("|u1", shape);
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

} // namespace moss
