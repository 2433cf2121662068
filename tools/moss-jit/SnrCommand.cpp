//===- SnrCommand.cpp - moss-jit snr: fidelity of every scheme ------------===//
//
// Quantizes one tensor (a .npy file or a built-in synthetic sample) under
// every scaling scheme, both FP8 formats and the block lengths asked for, and
// prints SNR, saturated and underflow counts and the largest relative error,
// as a table or as CSV. The SNR study of docs/NUMERICS.md is built from it.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "SchemeOptions.h"

#include "moss/Numerics/AutoScale.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Support/Npy.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand snrCommand(
    "snr", "Quantize one tensor under every scheme and print its fidelity");

namespace {

enum class SampleKind { None, Gaussian, StudentT, Llm };

/// The --schemes values: a family of schemes, expanded over --blocks.
enum class Family { PerTensor, PerRow, PerGroup, MXFP8, MossTensor, MossRow };

cl::OptionCategory category("snr options");

cl::opt<std::string> input("in", cl::desc("Input .npy (float32, 2-D, C order)"),
                           cl::value_desc("X.npy"), cl::sub(snrCommand),
                           cl::cat(category));
cl::opt<SampleKind> sample(
    "sample", cl::desc("A built-in synthetic tensor instead of --in"),
    cl::init(SampleKind::None), cl::sub(snrCommand), cl::cat(category),
    cl::values(clEnumValN(SampleKind::Gaussian, "gaussian", "standard normal"),
               clEnumValN(SampleKind::StudentT, "student-t",
                          "Student-t with --dof degrees of freedom"),
               clEnumValN(SampleKind::Llm, "llm",
                          "LLM-like: outlier channels x100-x1000, token "
                          "spikes")));
cl::opt<int64_t> sampleRows("rows", cl::desc("Rows of the sample (tokens)"),
                            cl::init(4096), cl::sub(snrCommand),
                            cl::cat(category));
cl::opt<int64_t> sampleCols("cols", cl::desc("Columns (K) of the sample"),
                            cl::init(4096), cl::sub(snrCommand),
                            cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Sample seed"), cl::init(2026),
                       cl::sub(snrCommand), cl::cat(category));
cl::opt<double> dof("dof", cl::desc("Degrees of freedom of --sample student-t"),
                    cl::init(4.0), cl::sub(snrCommand), cl::cat(category));

cl::list<Family> families(
    "schemes", cl::desc("Schemes to run (default: all)"), cl::CommaSeparated,
    cl::sub(snrCommand), cl::cat(category),
    cl::values(clEnumValN(Family::PerTensor, "per-tensor", "one FP32 scale"),
               clEnumValN(Family::PerRow, "per-row", "one FP32 scale per row"),
               clEnumValN(Family::PerGroup, "per-group",
                          "one FP32 scale per 1xN block, N from --blocks"),
               clEnumValN(Family::MXFP8, "mxfp8",
                          "E8M0 per 32 (runs when --blocks holds 32)"),
               clEnumValN(Family::MossTensor, "moss-tensor",
                          "two-level, global per tensor, N from --blocks"),
               clEnumValN(Family::MossRow, "moss-row",
                          "two-level, global per row, N from --blocks"),
               clEnumValN(Family::MossTensor, "moss:tensor", "= moss-tensor"),
               clEnumValN(Family::MossRow, "moss:row", "= moss-row")));
cl::list<int64_t> blocks("blocks",
                         cl::desc("Block lengths along K for per-group and "
                                  "moss (default 32,64,128)"),
                         cl::CommaSeparated, cl::sub(snrCommand),
                         cl::cat(category));
cl::list<Fp8Format> formats(
    "format", cl::desc("FP8 formats (default both)"), cl::CommaSeparated,
    cl::sub(snrCommand), cl::cat(category),
    cl::values(clEnumValN(Fp8Format::E4M3, "e4m3", "E4M3, max 448"),
               clEnumValN(Fp8Format::E5M2, "e5m2", "E5M2, max 57344")));
cl::list<float> fixedScales(
    "scale",
    cl::desc("Also quantize per tensor with this FP32 scale (e.g. a "
             "predicted one); repeatable"),
    cl::CommaSeparated, cl::sub(snrCommand), cl::cat(category));
cl::opt<bool> transpose(
    "transpose",
    cl::desc("Quantize the transpose (blocks along the input's rows)"),
    cl::sub(snrCommand), cl::cat(category));
cl::opt<bool> csv("csv", cl::desc("Print CSV instead of a table"),
                  cl::sub(snrCommand), cl::cat(category));
cl::opt<std::string> label("label",
                           cl::desc("Name of the data in the output (default: "
                                    "the file stem or the sample name)"),
                           cl::sub(snrCommand), cl::cat(category));

/// One quantization to run.
struct Run {
  std::string name;
  ScalingScheme scheme;
  /// Per-tensor with a given scale instead of amax / max.
  bool fixed = false;
  float scale = 0;
};

/// One line of the output.
struct Row {
  const Run *run;
  Fp8Format format;
  FidelityReport report;
  /// The per-tensor scale actually used, or 0 where the scheme has none.
  float scale = 0;
};

} // namespace

/// snprintf of one number.
static std::string printed(const char *fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

static int fail(const Twine &message) {
  errs() << "moss-jit snr: error: " << message << "\n";
  return 1;
}

static std::string sampleName(SampleKind kind) {
  switch (kind) {
  case SampleKind::Gaussian:
    return "gaussian";
  case SampleKind::StudentT:
    return "student-t" + std::to_string(int(std::lround(dof)));
  case SampleKind::Llm:
    return "llm";
  case SampleKind::None:
    break;
  }
  return "";
}

/// The runs, in table order: schemes outermost, then blocks.
static std::vector<Run> makeRuns(ArrayRef<Family> wanted,
                                 ArrayRef<int64_t> blockList) {
  std::vector<Run> runs;
  auto has = [&](Family f) { return llvm::is_contained(wanted, f); };
  if (has(Family::PerTensor))
    runs.push_back({"per-tensor", ScalingScheme::perTensor()});
  if (has(Family::PerRow))
    runs.push_back({"per-row", ScalingScheme::perRow()});
  if (has(Family::PerGroup))
    for (int64_t b : blockList)
      runs.push_back({"per-group-1x" + std::to_string(b),
                      ScalingScheme::perGroup(1, b)});
  if (has(Family::MXFP8) && llvm::is_contained(blockList, int64_t(32)))
    runs.push_back({"mxfp8", ScalingScheme::mxfp8()});
  if (has(Family::MossTensor))
    for (int64_t b : blockList)
      runs.push_back({"moss-tensor-" + std::to_string(b),
                      ScalingScheme::twoLevel(GlobalScope::Tensor, b)});
  if (has(Family::MossRow))
    for (int64_t b : blockList)
      runs.push_back({"moss-row-" + std::to_string(b),
                      ScalingScheme::twoLevel(GlobalScope::Row, b)});
  for (float s : fixedScales) {
    Run run{"fixed-scale", ScalingScheme::perTensor()};
    run.fixed = true;
    run.scale = s;
    runs.push_back(run);
  }
  return runs;
}

static void printTable(raw_ostream &os, StringRef name, int64_t rows,
                       int64_t cols, ArrayRef<Row> lines) {
  os << "moss-jit snr: " << name << " [" << rows << ", " << cols << "]"
     << (transpose ? " transposed" : "") << "\n\n";
  os << format("%-18s %-6s %10s %9s %9s %10s %10s %11s %12s\n", "scheme",
               "format", "SNR (dB)", "vs p-t", "row SNR", "saturated",
               "underflow", "underflow%", "max rel err");
  double total = double(rows) * double(cols);
  double perTensorSnr = NAN;
  for (const Row &line : lines) {
    const FidelityReport &r = line.report;
    if (line.run->name == "per-tensor")
      perTensorSnr = r.snrDb;
    std::string name = line.run->name;
    if (line.run->fixed)
      name = "scale=" + printed("%.3e", line.run->scale);
    // inf - inf is not a difference worth printing.
    std::string delta = "-";
    if (std::isfinite(perTensorSnr) && std::isfinite(r.snrDb))
      delta = printed("%+.2f", r.snrDb - perTensorSnr);
    else if (std::isfinite(perTensorSnr) || std::isfinite(r.snrDb))
      delta = r.snrDb > perTensorSnr ? "+inf" : "-inf";
    os << format("%-18s %-6s %10.2f %9s %9.2f %10lld %10lld %10.4f%% %12.3e\n",
                 name.c_str(), formatName(line.format).data(), r.snrDb,
                 delta.c_str(), r.meanRowSnrDb,
                 static_cast<long long>(r.saturated),
                 static_cast<long long>(r.underflowToZero),
                 100.0 * double(r.underflowToZero) / total, r.maxRelError);
    if (r.nonFiniteBlocks != 0)
      os << format("%-18s %-6s   %lld non-finite block(s) left out\n", "", "",
                   static_cast<long long>(r.nonFiniteBlocks));
  }
  os << "\nSNR = 10 log10(sum x^2 / sum (x - dequant(quant(x)))^2); vs p-t: "
        "dB above per-tensor in the same format; row SNR: the mean over rows "
        "of each row's SNR; underflow: non-zero inputs that became zero.\n";
}

static void printCsv(raw_ostream &os, StringRef name, int64_t rows,
                     int64_t cols, ArrayRef<Row> lines) {
  os << "data,rows,cols,transposed,scheme,format,scale,snr_db,"
        "row_snr_db,saturated,underflow,nonfinite_blocks,max_rel_err\n";
  for (const Row &line : lines) {
    const FidelityReport &r = line.report;
    os << name << "," << rows << "," << cols << "," << (transpose ? 1 : 0)
       << "," << line.run->name << "," << formatName(line.format) << ",";
    if (line.scale != 0)
      os << format("%.9g", line.scale);
    os << "," << format("%.6f", r.snrDb) << ","
       << format("%.6f", r.meanRowSnrDb) << "," << r.saturated << ","
       << r.underflowToZero << "," << r.nonFiniteBlocks << ","
       << format("%.6e", r.maxRelError) << "\n";
  }
}

int runSnr() {
  // The data.
  if (input.empty() == (sample == SampleKind::None))
    return fail("give exactly one of --in X.npy and --sample "
                "{gaussian,student-t,llm}");
  NpyMatrix x;
  std::string name = label;
  if (!input.empty()) {
    Expected<NpyMatrix> read = readNpyMatrix(input);
    if (!read)
      return fail(toString(read.takeError()));
    x = std::move(*read);
    if (name.empty())
      name = sys::path::stem(input).str();
  } else {
    if (sampleRows <= 0 || sampleCols <= 0)
      return fail("--rows and --cols must be positive, got " +
                  Twine(sampleRows) + " and " + Twine(sampleCols));
    // The sample and its quantizations live in memory: bound them first.
    constexpr int64_t kMaxSampleElements = int64_t(1) << 28;
    if (sampleCols > kMaxSampleElements / sampleRows)
      return fail("--rows " + Twine(sampleRows) + " x --cols " +
                  Twine(sampleCols) + " is more than the 2^28 elements a "
                  "sample may have");
    if (sample == SampleKind::StudentT && !(dof > 0.0))
      return fail("--dof must be positive, got " + printed("%g", dof));
    x.rows = sampleRows;
    x.cols = sampleCols;
    switch (sample) {
    case SampleKind::Gaussian:
      x.data = gaussianSample(x.rows, x.cols, seed);
      break;
    case SampleKind::StudentT:
      x.data = studentTSample(x.rows, x.cols, dof, seed);
      break;
    case SampleKind::Llm:
      x.data = llmActivationSample(x.rows, x.cols, seed);
      break;
    case SampleKind::None:
      break;
    }
    if (name.empty())
      name = sampleName(sample);
  }
  if (name.find(',') != std::string::npos)
    return fail("--label '" + name + "' must not hold a comma (it is a CSV "
                "field)");

  // What to run. Every check happens before the first quantization.
  SmallVector<int64_t, 4> blockList(blocks.begin(), blocks.end());
  if (blockList.empty())
    blockList.append({32, 64, 128});
  for (int64_t b : blockList)
    if (b <= 0)
      return fail("--blocks: " + Twine(b) + " is not a positive block length");
  static const Family allFamilies[] = {
      Family::PerTensor, Family::PerRow,     Family::PerGroup,
      Family::MXFP8,     Family::MossTensor, Family::MossRow};
  static const Fp8Format allFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};
  SmallVector<Family, 8> wanted(families.begin(), families.end());
  if (wanted.empty())
    wanted.append(std::begin(allFamilies), std::end(allFamilies));
  SmallVector<Fp8Format, 2> formatList(formats.begin(), formats.end());
  if (formatList.empty())
    formatList.append(std::begin(allFormats), std::end(allFormats));
  for (float s : fixedScales)
    if (!(std::isfinite(s) && s > 0.0f))
      return fail("--scale " + printed("%g", s) + " must be finite and positive");
  if (transpose && !fixedScales.empty())
    return fail("--scale does not combine with --transpose (a per-tensor "
                "scale does not depend on the layout)");
  std::vector<Run> runs = makeRuns(wanted, blockList);
  if (runs.empty())
    return fail("nothing to run: --schemes mxfp8 needs 32 in --blocks");
  for (const Run &run : runs) {
    QuantizeOptions options{run.scheme, Fp8Format::E4M3, transpose};
    if (Error error = checkQuantizeOptions(x.rows, x.cols, options))
      return fail(run.name + ": " + toString(std::move(error)));
  }

  std::vector<Row> lines;
  for (Fp8Format fp8 : formatList)
    for (const Run &run : runs) {
      Expected<QuantizedTensor> q =
          run.fixed ? quantizeWithScale(x.data, x.rows, x.cols, run.scale, fp8)
                    : quantize(x.data, x.rows, x.cols,
                               QuantizeOptions{run.scheme, fp8, transpose});
      if (!q)
        return fail(run.name + ": " + toString(q.takeError()));
      Row line{&run, fp8, measureFidelity(x.data, x.rows, x.cols, *q)};
      if (!run.scheme.globalPerRow() && run.scheme.hasGlobalScales())
        line.scale = q->global[0];
      lines.push_back(line);
    }

  if (csv)
    printCsv(outs(), name, x.rows, x.cols, lines);
  else
    printTable(outs(), name, x.rows, x.cols, lines);
  return 0;
}

} // namespace moss::jit
