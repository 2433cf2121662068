//===- QuantizerSource.cpp - The GPU quantizers' kernel source -----------===//

#include "moss/Compiler/QuantizerSource.h"

#include "moss/Numerics/Fold.h"
#include "moss/quantize/geometry.cuh"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>

using namespace llvm;
using namespace moss::numerics;

namespace moss::compiler {

namespace {

using Family = QuantizerVariant::Family;

/// A spec the kernels do not take: an untyped error naming the value (the
/// C API reports it as an invalid argument).
Error invalidArgument(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

int vecElements(InputType input) { return input == InputType::F32 ? 4 : 8; }

/// The number of 16-byte vectors a thread of the row-wise kernel holds in
/// registers, at most: 4 keeps every variant free of spills
/// (QuantizerCompileTest checks).
constexpr int kMaxVecsPerThread = 4;

/// The values of a row-wise segment: the whole row where 1024 threads hold
/// it, else the fewest near-equal segments that they do, each a whole number
/// of vectors, blocks and 128 fold groups (the last one may be shorter).
int64_t getRowSegment(const QuantizeSpec &spec) {
  const int64_t vec = vecElements(spec.input);
  const int64_t longest = int64_t(kMaxVecsPerThread) * 1024 * vec;
  if (spec.cols <= longest)
    return spec.cols;
  // Every unit is a power of two: vectors, blocks and fold groups.
  int64_t unit = vec;
  if (spec.options.scheme.hasLocalScales())
    unit = std::max<int64_t>(unit, spec.options.scheme.blockCols);
  if (spec.options.fold == BlockScaleFold::K128)
    unit = std::max<int64_t>(unit, kFoldGroupCols);
  const int64_t units = llvm::divideCeil(spec.cols, unit);
  const int64_t segments = llvm::divideCeil(units, longest / unit);
  return llvm::divideCeil(units, segments) * unit;
}

} // namespace

QuantizeSpec getTransposedSpec(const QuantizeSpec &spec) {
  QuantizeSpec transposed = spec;
  transposed.options.transpose = true;
  transposed.bothLayouts = false;
  return transposed;
}

bool isSquareGroup(const ScalingScheme &scheme) {
  return scheme.kind == ScalingKind::PerGroup && scheme.blockRows > 1;
}

QuantizerVariant chooseQuantizerVariant(const QuantizeSpec &spec,
                                        bool withScale) {
  if (spec.adamw) {
    QuantizerVariant v;
    v.family = Family::AdamW;
    v.source = QuantizerGlobal::FromScale;
    v.bothLayouts = spec.bothLayouts;
    v.threads = quantize::kAdamWThreads;
    return v;
  }
  if (spec.bothLayouts && !withScale && !spec.options.transpose) {
    QuantizeSpec rowMajor = spec;
    rowMajor.bothLayouts = false;
    QuantizerVariant row = chooseQuantizerVariant(rowMajor, false);
    QuantizerVariant transposed =
        chooseQuantizerVariant(getTransposedSpec(spec), false);
    if (row.family == Family::Rowwise &&
        (row.anyK || row.segment == spec.cols) &&
        spec.cols % vecElements(spec.input) == 0 && !row.hasReducePass() &&
        transposed.hasReducePass()) {
      row.columnMax = true;
      return row;
    }
  }
  const ScalingScheme &scheme = spec.options.scheme;
  QuantizerVariant v;
  v.block = int(scheme.blockCols);
  if (isSquareGroup(scheme)) {
    v.family = Family::Tile2d;
    return v;
  }
  bool perTensorGlobal = scheme.kind == ScalingKind::PerTensor ||
                         (scheme.kind == ScalingKind::TwoLevel &&
                          scheme.global == GlobalScope::Tensor);
  bool hasGlobal = scheme.hasGlobalScales();
  if (withScale)
    v.source = QuantizerGlobal::FromScale;
  else if (!hasGlobal)
    v.source = QuantizerGlobal::None;
  else if (spec.options.transpose || spec.bothLayouts || perTensorGlobal)
    v.source = QuantizerGlobal::FromBits;
  else
    v.source = QuantizerGlobal::InCta;

  if (spec.options.transpose || spec.bothLayouts) {
    v.family = Family::Columnwise;
    v.bothLayouts = spec.bothLayouts;
    v.threads = quantize::kColumnwiseThreads;
    v.globalPerRow = hasGlobal && scheme.globalPerRow();
    v.foldReference = spec.options.fold == BlockScaleFold::Row;
    if (!scheme.hasLocalScales())
      v.block = 32;
    return v;
  }
  v.family = Family::Rowwise;
  v.segment = getRowSegment(spec);
  if (v.segment < spec.cols) {
    // What spans a row cut into segments comes from a reduce pass.
    if (v.source == QuantizerGlobal::InCta)
      v.source = QuantizerGlobal::FromRowBits;
    v.globalPerRow = v.source == QuantizerGlobal::FromRowBits;
    v.foldReference = spec.options.fold == BlockScaleFold::Row;
  }
  // Enough threads that each holds at most kMaxVecsPerThread vectors.
  int64_t vecs = v.segment / vecElements(spec.input);
  int64_t threads = llvm::PowerOf2Ceil(
      std::max<int64_t>(1, llvm::divideCeil(vecs, kMaxVecsPerThread)));
  v.threads = int(std::clamp<int64_t>(threads, 64, 1024));
  if (spec.anyK && v.segment == spec.cols && !spec.bothLayouts) {
    // The segment is all that the threads hold: every K up to it.
    v.anyK = true;
    v.segment =
        int64_t(v.threads) * kMaxVecsPerThread * vecElements(spec.input);
  }
  if (!scheme.hasLocalScales())
    v.block = int(v.anyK ? v.segment : spec.cols);
  return v;
}

QuantizeLayout getQuantizeLayout(const QuantizeSpec &spec) {
  // A quantization that folds writes the folded scheme's scales.
  const ScalingScheme scheme =
      getFoldedScheme(spec.options.scheme, spec.options.fold);
  QuantizeLayout layout;
  bool t = spec.options.transpose;
  layout.codeRows = t ? spec.cols : spec.rows;
  layout.codeCols = t ? spec.rows : spec.cols;
  if (scheme.hasLocalScales()) {
    layout.localRows = llvm::divideCeil(layout.codeRows, scheme.blockRows);
    layout.localCols = layout.codeCols / scheme.blockCols;
    layout.localElementBytes = scheme.localScalesAreE8M0() ? 1 : 4;
  }
  if (scheme.hasGlobalScales())
    layout.globalCount = scheme.globalPerRow() ? layout.codeRows : 1;
  return layout;
}

/// A dual-layout spec: both halves must be quantizations the GPU takes,
/// and a row-major block must lie within the transposed kernel's tile row.
static Error checkBothLayouts(const QuantizeSpec &spec) {
  const ScalingScheme &scheme = spec.options.scheme;
  if (spec.options.transpose)
    return invalidArgument(
        "a dual-layout quantize is described by its row-major half: leave "
        "transpose off (the transposed half comes with it)");
  if (Error error = checkGpuQuantizeSpec(getTransposedSpec(spec)))
    return error;
  if (isSquareGroup(scheme))
    return invalidArgument("square per-group blocks are the same in both "
                           "layouts: quantize once and transpose instead of "
                           "asking for both layouts");
  if (spec.options.fold == BlockScaleFold::K128)
    return invalidArgument("a dual-layout quantize folds per row or not at "
                           "all, not per 128 (a row-major 128 fold group "
                           "spans two of its column strips)");
  const int64_t tileCols =
      quantize::kColumnwiseTileBytes / (spec.input == InputType::F32 ? 4 : 2);
  if (scheme.hasLocalScales() && scheme.blockCols > tileCols)
    return invalidArgument(
        "a dual-layout quantize of " +
        Twine(spec.input == InputType::F32 ? "FP32" : "BF16") +
        " takes blocks of at most " + Twine(tileCols) + " along K, got " +
        Twine(scheme.blockCols));
  return Error::success();
}

/// A fused AdamW step and cast: FP32 weights cast per tensor, in whole
/// 16-byte vectors, and 4-row words of transposed codes.
static Error checkAdamW(const QuantizeSpec &spec) {
  const ScalingScheme &scheme = spec.options.scheme;
  if (spec.input != InputType::F32)
    return invalidArgument("the fused AdamW step updates FP32 weights, not "
                           "BF16");
  if (scheme.kind != ScalingKind::PerTensor)
    return invalidArgument("the fused AdamW step casts per tensor, not " +
                           scheme.str());
  if (spec.options.transpose || spec.gather || spec.anyK)
    return invalidArgument(
        "the fused AdamW step takes a row-major or dual-layout cast of the "
        "whole weight, not a " +
        Twine(spec.options.transpose ? "transposed"
              : spec.gather          ? "gathered"
                                     : "any-K") +
        " one");
  if (spec.cols % 4 != 0)
    return invalidArgument("the fused AdamW step takes FP32 rows of whole "
                           "16-byte vectors: K=" +
                           Twine(spec.cols) + " is not a multiple of 4");
  if (spec.bothLayouts && spec.rows % 4 != 0)
    return invalidArgument("the fused AdamW step writes transposed codes four "
                           "rows at a time: " +
                           Twine(spec.rows) + " rows are not a multiple of 4");
  return Error::success();
}

Error checkGpuQuantizeSpec(const QuantizeSpec &spec) {
  if (Error error = checkQuantizeOptions(spec.rows, spec.cols, spec.options))
    return error;
  if (spec.rows > INT_MAX || spec.cols > INT_MAX)
    return invalidArgument(
        "the shape [" + Twine(spec.rows) + ", " + Twine(spec.cols) +
        "] exceeds the GPU quantizers' limit of 2^31-1 per axis");
  if (spec.adamw)
    return checkAdamW(spec);
  const ScalingScheme &scheme = spec.options.scheme;
  if (spec.gather && (spec.bothLayouts || isSquareGroup(scheme)))
    return invalidArgument(
        "gathered rows are quantized by the row-wise and transposed "
        "kernels, not " +
        Twine(spec.bothLayouts ? "both layouts at once"
                               : "square blocks of " + scheme.str()));
  if (spec.batched && (spec.gather || isSquareGroup(scheme)))
    return invalidArgument("a batched cast takes whole matrices with the "
                           "row-wise and transposed kernels, not " +
                           Twine(spec.gather
                                     ? "gathered rows"
                                     : "square blocks of " + scheme.str()));
  if (spec.bothLayouts)
    return checkBothLayouts(spec);
  if (isSquareGroup(scheme)) {
    if (scheme.blockCols != 32 && scheme.blockCols != 64 &&
        scheme.blockCols != 128)
      return invalidArgument(
          "the GPU quantizers take square per-group blocks of 32, "
          "64 or 128, got " +
          Twine(scheme.blockCols));
    return Error::success();
  }
  if (scheme.hasLocalScales() &&
      (!llvm::isPowerOf2_64(scheme.blockCols) || scheme.blockCols < 16 ||
       scheme.blockCols > 128))
    return invalidArgument(
        "the GPU quantizers take power-of-two blocks from 16 to "
        "128, got " +
        Twine(scheme.blockCols));
  if (spec.options.transpose)
    return Error::success();
  int vec = vecElements(spec.input);
  if (spec.cols % vec != 0)
    return invalidArgument(
        "K=" + Twine(spec.cols) + " must be a multiple of " + Twine(vec) +
        " for the row-wise GPU quantizer (16-byte "
        "rows of " +
        (spec.input == InputType::F32 ? "FP32" : "BF16") + ")");
  QuantizerVariant v = chooseQuantizerVariant(spec, false);
  int64_t segments = v.getRowSegments(spec.cols);
  if (spec.rows * segments > INT_MAX)
    return invalidArgument(
        "the row-wise GPU quantizer cuts rows of K=" + Twine(spec.cols) +
        " into " + Twine(segments) + " segments; " + Twine(spec.rows) +
        " rows of them exceed its limit of 2^31-1 segments");
  return Error::success();
}

Expected<QuantizerSource> generateQuantizerSource(const QuantizeSpec &spec,
                                                  bool withScale,
                                                  StringRef kernelName) {
  if (Error error = checkGpuQuantizeSpec(spec))
    return std::move(error);
  const QuantizeOptions &options = spec.options;
  if (withScale && options.scheme.kind != ScalingKind::PerTensor)
    return invalidArgument("a cast with a given scale is per-tensor, not " +
                           options.scheme.str());
  if ((spec.batched || spec.adamw) && !withScale)
    return invalidArgument(
        spec.adamw ? "the fused AdamW step casts with a given scale"
                   : "a batched quantize is a cast with a given scale "
                     "per matrix: the reduce passes of other "
                     "quantizations are not batched");
  QuantizerVariant v = chooseQuantizerVariant(spec, withScale);
  int in = spec.input == InputType::F32 ? 0 : 1;
  int fmt = options.format == Fp8Format::E4M3 ? 0 : 1;
  int kind = int(options.scheme.kind); // numbered as the templates' SchemeKind

  QuantizerSource result;
  result.threads = unsigned(v.threads);
  std::string header, config, call;
  // A batched kernel's pass takes its slice's arguments (batch.cuh).
  const std::string args =
      spec.batched ? "moss::quantize::batchSlice(args)" : "args";
  switch (v.family) {
  case Family::Rowwise:
    header = "moss/quantize/rowwise.cuh";
    // (Gather and ColumnMax, the last parameters, default to off.)
    config = formatv("moss::quantize::RowwiseConfig<{0}, {1}, {2}, {3}, {4}, "
                     "{5}, {6}, {7}, {8}{9}>",
                     in, kind, fmt, v.block, v.anyK ? 0 : spec.cols, v.threads,
                     int(v.source), int(options.fold), v.segment,
                     v.columnMax   ? ", false, true"
                     : spec.gather ? ", true"
                                   : "");
    call = "moss::quantize::rowwise<Config>(" + args + ", moss::quantize::{0})";
    break;
  case Family::Columnwise:
    header = "moss/quantize/columnwise.cuh";
    // (Dual and Gather, the last parameters, default to off.)
    config =
        formatv("moss::quantize::ColumnwiseConfig<{0}, {1}, {2}, {3}, {4}, "
                "{5}{6}>",
                in, kind, fmt, v.block, int(v.source), int(options.fold),
                v.bothLayouts ? ", true"
                : spec.gather ? ", false, true"
                              : "");
    call = "moss::quantize::columnwise<Config>(" + args +
           ", moss::quantize::{0}, " + (v.globalPerRow ? "true)" : "false)");
    break;
  case Family::Tile2d:
    header = "moss/quantize/tile2d.cuh";
    config = formatv("moss::quantize::Tile2dConfig<{0}, {1}, {2}, {3}>", in,
                     fmt, v.block, options.transpose ? "true" : "false");
    call = "moss::quantize::tile2d<Config>(args)";
    break;
  case Family::AdamW:
    header = "moss/quantize/adamw.cuh";
    config = formatv("moss::quantize::AdamWConfig<{0}, {1}>", fmt,
                     spec.bothLayouts ? "true" : "false");
    call = "moss::quantize::adamwCast<Config>(" + args + ")";
    break;
  }

  std::string prefix = "#include \"" + header + "\"\n";
  if (spec.batched)
    prefix += "#include \"moss/quantize/batch.cuh\"\n";
  prefix += "\nusing Config = " + config + ";\n";
  // The row-wise kernel keeps at least 768 threads per SM (at most 85
  // registers for up to 256 threads, 64 for more), the transposed one 5
  // CTAs (at most 102 registers; its shared memory holds 5, and 4 with the
  // dual layout's row scales); left alone, ptxas gives the encoding's
  // independent values enough registers to halve that.
  const int minBlocks =
      v.family == Family::Rowwise      ? int(llvm::divideCeil(768, v.threads))
      : v.family == Family::Columnwise ? (v.bothLayouts ? 4 : 5)
                                       : 1;
  auto kernel = [&](StringRef name, StringRef pass) {
    return formatv("\nextern \"C\" __global__ void __launch_bounds__({0}, "
                   "{3})\n"
                   "{1}(const moss::quantize::Args args) {{\n  {2};\n}\n",
                   v.threads, name, formatv(call.c_str(), pass).str(),
                   minBlocks)
        .str();
  };
  std::string reduce, rest;
  if (v.hasReducePass()) {
    result.reduceKernel = (kernelName + "_reduce").str();
    reduce = kernel(result.reduceKernel, "kReducePass");
  }
  result.quantizeKernel = kernelName.str();
  rest = kernel(result.quantizeKernel, "kQuantizePass");
  if (v.columnMax) {
    // The transposed layout's blocks run down the columns, Block rows each.
    result.columnKernel = (kernelName + "_columns").str();
    rest +=
        formatv("\n#include \"moss/quantize/columnmax.cuh\"\n\n"
                "extern \"C\" __global__ void __launch_bounds__({0}, "
                "1)\n{1}(const moss::quantize::Args args) {{\n"
                "  moss::quantize::columnMax<{2}, {3}, {4}>(args);\n}\n",
                quantize::kColumnMaxThreads, result.columnKernel, in, kind,
                chooseQuantizerVariant(getTransposedSpec(spec), false).block)
            .str();
  }
  result.source = prefix + reduce + rest;
  if (!reduce.empty())
    result.reduceSource = prefix + reduce;
  result.quantizeSource = prefix + rest;
  return result;
}

} // namespace moss::compiler
