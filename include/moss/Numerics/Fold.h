//===- Fold.h - Folding E8M0 block factors into FP8 codes ------*- C++ -*-===//
//
// The fold of docs/NUMERICS-CONTRACT.md section 8: an operand with E8M0
// block factors (two-level or MXFP8) becomes one with FP32 factors per row
// (or per row and 128-wide K group), its codes rescaled to a local reference
// exponent. The GEMM of folded operands needs no per-32 promotion. This is
// the host rule; templates/moss/quantize/fold.cuh implements the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_FOLD_H
#define MOSS_NUMERICS_FOLD_H

#include "moss/Numerics/FP8.h"
#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace moss::numerics {

/// "none", "128" or "row".
const char *getName(BlockScaleFold fold);

/// The fold named by getName's spelling; none for other text.
std::optional<BlockScaleFold> parseBlockScaleFold(llvm::StringRef text);

/// Whether `scheme` has E8M0 block factors a fold can move (two-level,
/// MXFP8).
bool isFoldable(const ScalingScheme &scheme);

/// The scheme a foldable operand has after `fold` (per-row, or per-group
/// 1x128); `scheme` itself when the fold is None or the scheme has no E8M0
/// factors.
ScalingScheme getFoldedScheme(const ScalingScheme &scheme, BlockScaleFold fold);

/// Checks that an operand with `cols` elements per row can be folded:
/// a foldable scheme whose block divides 128 (K128), K a multiple of 128
/// (K128).
llvm::Error checkFold(const ScalingScheme &scheme, int64_t cols,
                      BlockScaleFold fold);

/// Rounds the exact value of FP8 code `code` times 2^-shift (shift >= 0) to
/// the format, ties to even, subnormals included. NaN and infinity codes are
/// returned as they are. The one host definition of a folded code.
uint8_t foldCode(uint8_t code, int shift, Fp8Format format);

/// The smallest shift from which foldCode gives a signed zero for every
/// finite code (19 for E4M3, 33 for E5M2): the device table stops there.
int getFoldShiftLimit(Fp8Format format);

/// Folds `q` (two-level or MXFP8, not transposed-specific: blocks along its
/// cols) into a per-row or per-group 1x128 tensor with the same stats:
///  - E = the largest E8M0 exponent of the row (or group) over the blocks
///    whose factor is not NaN; -127 when there is none;
///  - each code becomes foldCode(code, E - e); a block with the NaN factor
///    gets all codes kFp8NaNCode;
///  - the FP32 factor is RN(g * 2^E), g the global scale (1 for MXFP8).
llvm::Expected<QuantizedTensor> foldBlockScales(const QuantizedTensor &q,
                                                BlockScaleFold fold);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_FOLD_H
