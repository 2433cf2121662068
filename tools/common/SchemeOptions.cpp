//===- SchemeOptions.cpp - Scheme flags shared by commands ----------------===//

#include "SchemeOptions.h"

#include "moss/Numerics/Fold.h"

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

static Error usageError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// Parses a positive decimal block length.
static Expected<int64_t> parseLength(StringRef text, StringRef whole) {
  int64_t value = 0;
  if (text.getAsInteger(10, value) || value <= 0)
    return usageError("--block=" + whole +
                      " is not a positive block length (expected N or RxN)");
  return value;
}

Expected<ScalingScheme> makeScheme(SchemeName name, StringRef block,
                                   StringRef global) {
  if (!global.empty() && name != SchemeName::Moss)
    return usageError("--global applies only to --scheme moss");
  if (!block.empty() &&
      (name == SchemeName::PerTensor || name == SchemeName::PerRow))
    return usageError("--block does not apply to per-tensor and per-row "
                      "schemes, which have no blocks");

  int64_t blockRows = 1;
  int64_t blockCols = name == SchemeName::PerGroup ? 128 : 32;
  if (!block.empty()) {
    auto [rowsText, colsText] = block.split('x');
    if (!block.contains('x')) {
      Expected<int64_t> cols = parseLength(rowsText, block);
      if (!cols)
        return cols.takeError();
      blockCols = *cols;
    } else {
      if (name != SchemeName::PerGroup)
        return usageError("--block=" + block +
                          ": only per-group takes a 2-D block (RxN)");
      Expected<int64_t> rows = parseLength(rowsText, block);
      if (!rows)
        return rows.takeError();
      Expected<int64_t> cols = parseLength(colsText, block);
      if (!cols)
        return cols.takeError();
      blockRows = *rows;
      blockCols = *cols;
    }
  }

  switch (name) {
  case SchemeName::PerTensor:
    return ScalingScheme::perTensor();
  case SchemeName::PerRow:
    return ScalingScheme::perRow();
  case SchemeName::PerGroup:
    return ScalingScheme::perGroup(blockRows, blockCols);
  case SchemeName::MXFP8:
    if (blockCols != 32)
      return usageError("mxfp8 blocks are 32 elements (OCP MX v1.0), got "
                        "--block=" +
                        block);
    return ScalingScheme::mxfp8();
  case SchemeName::Moss: {
    GlobalScope scope = GlobalScope::Tensor;
    if (global == "row")
      scope = GlobalScope::Row;
    else if (!global.empty() && global != "tensor")
      return usageError("--global=" + global + " must be tensor or row");
    return ScalingScheme::twoLevel(scope, blockCols);
  }
  }
  llvm_unreachable("unknown scheme");
}

StringRef formatName(Fp8Format format) {
  return format == Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

} // namespace moss::jit

Expected<std::optional<moss::numerics::BlockScaleFold>>
moss::jit::parseGemmFold(StringRef text) {
  if (text == "auto")
    return std::nullopt;
  if (std::optional<moss::numerics::BlockScaleFold> fold =
          moss::numerics::parseBlockScaleFold(text))
    return fold;
  return createStringError(inconvertibleErrorCode(),
                           "--fold=" + text + " must be auto, none, 128 or row");
}
