//===- SchemeOptions.cpp - Scheme flags shared by commands ----------------===//

#include "SchemeOptions.h"

#include "moss/Numerics/Fold.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

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
  int64_t blockCols =
      getDefaultBlockCols(name == SchemeName::PerGroup ? ScalingKind::PerGroup
                                                       : ScalingKind::TwoLevel);
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

Expected<SchemeText> parseSchemeText(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, ':');
  const StringRef name = parts.front();
  SchemeText result;
  result.spelling = text.str();
  if (name == "per-tensor" || name == "per_tensor")
    result.name = SchemeName::PerTensor;
  else if (name == "per-row" || name == "per_row")
    result.name = SchemeName::PerRow;
  else if (name == "per-group" || name == "per_group")
    result.name = SchemeName::PerGroup;
  else if (name == "mxfp8")
    result.name = SchemeName::MXFP8;
  else if (name == "moss" || name == "two-level" || name == "two_level")
    result.name = SchemeName::Moss;
  else if (name == "moss-row" || name == "moss-tensor") {
    result.name = SchemeName::Moss;
    result.global = name.drop_front(5).str();
  } else
    return usageError("unknown scheme '" + name +
                      "'; expected per-tensor, per-row, per-group, mxfp8 or "
                      "moss, with options as in moss:row:32");
  for (StringRef option : ArrayRef<StringRef>(parts).drop_front()) {
    auto setOnce = [&](std::string &field, StringRef what) -> Error {
      if (!field.empty() && field != option)
        return usageError("two " + what + "s, " + field + " and " + option);
      field = option.str();
      return Error::success();
    };
    Error error = Error::success();
    if (option == "tensor" || option == "row")
      error = setOnce(result.global, "global scope");
    else if (option == "e4m3" || option == "e5m2") {
      Fp8Format format = option == "e4m3" ? Fp8Format::E4M3 : Fp8Format::E5M2;
      if (result.format && *result.format != format)
        error = usageError("two FP8 formats");
      result.format = format;
    } else if (!option.empty() && isDigit(option.front()))
      error = setOnce(result.block, "block");
    else
      error = usageError("unknown option '" + option +
                         "'; expected tensor or row (moss's global scale), a "
                         "block N or RxN, or e4m3/e5m2");
    if (error)
      return std::move(error);
  }
  return result;
}

Expected<ScalingScheme> makeScheme(SchemeText text, StringRef block,
                                   StringRef global, StringRef flag,
                                   StringRef defaultGlobal) {
  auto merge = [&](std::string &fromText, StringRef fromFlag,
                   StringRef name) -> Error {
    if (fromFlag.empty())
      return Error::success();
    if (!fromText.empty() && fromText != fromFlag)
      return usageError("--" + flag + "scheme=" + text.spelling + " and --" +
                        flag + name + "=" + fromFlag + " disagree");
    fromText = fromFlag.str();
    return Error::success();
  };
  if (Error error = merge(text.block, block, "block"))
    return std::move(error);
  if (Error error = merge(text.global, global, "global"))
    return std::move(error);
  if (text.global.empty() && text.name == SchemeName::Moss)
    text.global = defaultGlobal.str();
  return makeScheme(text.name, text.block, text.global);
}

Expected<OperandChoice> makeOperandScheme(StringRef text, StringRef block,
                                          StringRef global,
                                          Fp8Format formatFlag,
                                          bool formatGiven, StringRef flag) {
  Expected<SchemeText> parsed = parseSchemeText(text);
  if (!parsed)
    return usageError("--" + flag + "scheme=" + text + ": " +
                      toString(parsed.takeError()));
  Expected<ScalingScheme> scheme = makeScheme(*parsed, block, global, flag);
  if (!scheme)
    return scheme.takeError();
  if (parsed->format && formatGiven && *parsed->format != formatFlag)
    return usageError("--" + flag + "scheme=" + text + " and --" + flag +
                      "format disagree");
  return OperandChoice{*scheme, parsed->format.value_or(formatFlag)};
}

Error checkNotEmpty(StringRef flagName, StringRef value, bool given,
                    StringRef expected) {
  if (given && value.empty())
    return usageError("--" + flagName + " is empty; expected " + expected);
  return Error::success();
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
