//===- Npy.h - Reading and writing NumPy .npy files ------------*- C++ -*-===//
//
// Just enough of the .npy format (versions 1.0, 2.0 and 3.0) for the tools:
// read a 2-D little-endian C-order matrix of float32, float16 or float64
// (or of uint16 BF16 bit patterns, where the caller asks), write float32 and
// uint8 arrays. Writes go to a temporary file in the same directory and are renamed
// into place, so a reader never sees a torn file.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_SUPPORT_NPY_H
#define MOSS_SUPPORT_NPY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace moss {

/// The largest .npy file read (64 GiB).
constexpr uint64_t kMaxNpyBytes = uint64_t(64) << 30;

/// The element types read.
enum class NpyElementType { F32, F16, F64, BF16 };

/// A row-major 2-D matrix read from a .npy file, as float32: float16 and
/// BF16 widen exactly, float64 rounds to nearest even (so values beyond
/// float32's range become infinities).
struct NpyMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
  /// The file's element type, and for BF16 its bit patterns.
  NpyElementType source = NpyElementType::F32;
  std::vector<uint16_t> bf16;
};

struct NpyReadOptions {
  /// Whether a '<u2' (uint16) array is read as BF16 bit patterns (numpy has
  /// no bfloat16; `x.view(np.uint16)` saves one's bits). Otherwise uint16 is
  /// refused like any other dtype.
  bool uint16AsBf16 = false;
};

/// Reads a 2-D '<f4', '<f2' or '<f8' (or, with the option, '<u2') C-order
/// .npy file. The error says what is wrong (not a .npy file, wrong dtype,
/// Fortran order, not 2-D, truncated data).
llvm::Expected<NpyMatrix> readNpyMatrix(llvm::StringRef path,
                                        const NpyReadOptions &options = {});

/// Parses the bytes of a .npy file (as readNpyMatrix does for a file).
llvm::Expected<NpyMatrix> parseNpyMatrix(llvm::StringRef bytes,
                                         const NpyReadOptions &options = {});

/// The .npy bytes of a C-order array of the given shape.
std::vector<char> serializeNpy(llvm::ArrayRef<int64_t> shape,
                               llvm::ArrayRef<float> values);
std::vector<char> serializeNpy(llvm::ArrayRef<int64_t> shape,
                               llvm::ArrayRef<uint8_t> values);

} // namespace moss

#endif // MOSS_SUPPORT_NPY_H
