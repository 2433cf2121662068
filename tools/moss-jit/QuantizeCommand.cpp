//===- QuantizeCommand.cpp - moss-jit quantize ----------------------------===//
//
// Quantizes a 2-D .npy matrix [rows, K] and writes q.npy, local.npy
// and global.npy (see the README for the file format). Every check runs
// before anything is written, and the outputs are renamed into place only
// once all of them are on disk, so a failed run leaves the directory as it
// was.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GpuQuantize.h"
#include "SchemeOptions.h"

#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Fold.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Support/AtomicFile.h"
#include "moss/Support/Npy.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand quantizeCommand("quantize",
                               "Quantize a 2-D .npy matrix (float32, float16, float64 or BF16 bits) to FP8");

namespace {
cl::OptionCategory category("quantize options");

cl::opt<std::string> scheme(
    "scheme",
    cl::desc("Scaling scheme: per-tensor (one FP32 scale), per-row (one per "
             "row), per-group (one FP32 scale per 1xN or NxN block), mxfp8 "
             "(one E8M0 scale per 32 elements, OCP MX) or moss (MOSS "
             "two-level: FP32 global + E8M0 per block), with options as in "
             "moss:row:32"),
    cl::Required, cl::sub(quantizeCommand), cl::cat(category));
cl::opt<std::string> global("global",
                            cl::desc("moss global scale: tensor (default) or "
                                     "row"),
                            cl::sub(quantizeCommand), cl::cat(category));
cl::opt<std::string>
    block("block",
          cl::desc("Block length along K (N), or RxN for per-group; default "
                   "32, per-group 128"),
          cl::sub(quantizeCommand), cl::cat(category));
cl::opt<Fp8Format> fp8Format(
    "format", cl::desc("FP8 format"), cl::init(Fp8Format::E4M3),
    cl::sub(quantizeCommand), cl::cat(category),
    cl::values(clEnumValN(Fp8Format::E4M3, "e4m3", "E4M3, max 448"),
               clEnumValN(Fp8Format::E5M2, "e5m2", "E5M2, max 57344")));
cl::opt<bool> transpose(
    "transpose",
    cl::desc("Quantize the transpose: q is [K, rows], blocks along rows"),
    cl::sub(quantizeCommand), cl::cat(category));
cl::opt<bool> bothLayouts(
    "both-layouts",
    cl::desc("Write the row-major quantization (q.npy, local.npy, "
             "global.npy) and the transposed one (q_t.npy, local_t.npy, "
             "global_t.npy); on the GPU from one read of the input"),
    cl::sub(quantizeCommand), cl::cat(category));
cl::opt<std::string> input("in",
                           cl::desc("Input .npy (float32, float16 or float64; "
                                    "2-D, C order)"),
                           cl::value_desc("X.npy"), cl::Required,
                           cl::sub(quantizeCommand), cl::cat(category));
cl::opt<bool> bf16Bits(
    "bf16-bits",
    cl::desc("Read a uint16 .npy as BF16 bit patterns (numpy has no bfloat16: "
             "save x.view(np.uint16)); the GPU quantizes them as BF16"),
    cl::sub(quantizeCommand), cl::cat(category));
cl::opt<std::string> outDir("out-dir", cl::desc("Existing output directory"),
                            cl::value_desc("DIR"), cl::Required,
                            cl::sub(quantizeCommand), cl::cat(category));
enum class Target { Cpu, Gpu };
cl::opt<Target> target(
    "device", cl::desc("Where to quantize (same bits on both)"),
    cl::init(Target::Cpu), cl::sub(quantizeCommand), cl::cat(category),
    cl::values(clEnumValN(Target::Cpu, "cpu", "the host reference"),
               clEnumValN(Target::Gpu, "gpu", "the JIT GPU kernels")));
cl::opt<std::string> fold(
    "fold",
    cl::desc("Fold a moss or mxfp8 result's block factors into its codes, "
             "GEMM-ready: row (global.npy holds the rows' FP32 factors) or "
             "128 (local.npy holds FP32 factors per 128 of K); default none"),
    cl::init("none"), cl::sub(quantizeCommand), cl::cat(category));
cl::opt<bool> report("report",
                     cl::desc("Print SNR, saturated and non-finite counts"),
                     cl::sub(quantizeCommand), cl::cat(category));
} // namespace

/// Every file a run may write; those a run does not write are removed with
/// the rest replaced, so that no directory mixes two runs.
constexpr const char *kOutputNames[] = {"q.npy",       "local.npy",
                                        "global.npy",  "q_t.npy",
                                        "local_t.npy", "global_t.npy"};

/// One output file, serialized before anything is written.
struct OutputFile {
  std::string name;
  std::vector<char> bytes;
};

static Error checkOutputDirectory(StringRef dir) {
  if (!sys::fs::is_directory(dir))
    return createStringError(inconvertibleErrorCode(),
                             "output directory '" + dir +
                                 "' does not exist or is not a directory");
  if (sys::fs::access(dir, sys::fs::AccessMode::Write))
    return createStringError(inconvertibleErrorCode(),
                             "output directory '" + dir + "' is not writable");
  return Error::success();
}

/// Refuses an input that is one of the files a run writes or removes (every
/// name of kOutputNames in `dir`). Files are compared by identity (device
/// and inode), so another spelling of the path, a symbolic link or a hard
/// link to an output is caught too.
static Error checkInputIsNotAnOutput(StringRef in, StringRef dir) {
  for (StringRef name : kOutputNames) {
    SmallString<256> path(dir);
    sys::path::append(path, name);
    bool same = false;
    if (!sys::fs::equivalent(in, path, same) && same)
      return createStringError(
          inconvertibleErrorCode(),
          "the input '" + in + "' is the output '" + path +
              "', which this run replaces or removes; expected an input "
              "outside the outputs (q, local, global and their _t) of "
              "--out-dir; nothing was written");
  }
  return Error::success();
}

/// Replaces the outputs in `dir` all or nothing: every file goes to a
/// temporary name first; every destination (and an earlier run's output
/// of kOutputNames that this run does not write) must be a
/// regular file or absent; those that exist are moved to backups, the new
/// files renamed in, and the backups removed. A failure on the way puts the
/// backups back, so the directory never mixes two runs.
static Error writeOutputs(StringRef dir, ArrayRef<OutputFile> files) {
  auto pathOf = [&](StringRef name) {
    SmallString<256> path(dir);
    sys::path::append(path, name);
    return std::string(path);
  };
  std::vector<std::string> replaced; // destinations, new files first
  for (const OutputFile &file : files)
    replaced.push_back(pathOf(file.name));
  for (StringRef name : kOutputNames)
    if (llvm::none_of(files, [&](const OutputFile &f) { return f.name == name; }))
      replaced.push_back(pathOf(name));
  for (const std::string &path : replaced) {
    sys::fs::file_status status;
    if (sys::fs::status(path, status, /*follow=*/false))
      continue; // absent
    if (status.type() != sys::fs::file_type::regular_file)
      return createStringError(inconvertibleErrorCode(),
                               "'" + path +
                                   "' is not a regular file; nothing was "
                                   "written");
  }

  std::vector<std::string> temps;
  std::vector<std::pair<std::string, std::string>> backups; // (path, backup)
  std::vector<std::string> renamedIn;
  auto rollBack = [&]() {
    for (const std::string &path : renamedIn)
      sys::fs::remove(path);
    for (const auto &[path, backup] : backups)
      sys::fs::rename(backup, path);
    for (const std::string &temp : temps)
      sys::fs::remove(temp);
  };
  for (const OutputFile &file : files) {
    Expected<std::string> temp =
        writeTemporaryFileFor(pathOf(file.name), file.bytes);
    if (!temp) {
      rollBack();
      return temp.takeError();
    }
    temps.push_back(std::move(*temp));
  }
  for (const std::string &path : replaced) {
    if (!sys::fs::exists(path))
      continue;
    SmallString<256> backup;
    if (std::error_code ec = sys::fs::createUniqueFile(
            path + ".old-%%%%%%%%", backup)) {
      rollBack();
      return createStringError(ec, "cannot write in '" + dir +
                                       "': " + ec.message());
    }
    if (std::error_code ec = sys::fs::rename(path, backup)) {
      sys::fs::remove(backup);
      rollBack();
      return createStringError(ec, "cannot replace '" + path +
                                       "': " + ec.message());
    }
    backups.push_back({path, std::string(backup)});
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::error_code ec = sys::fs::rename(temps[i], replaced[i])) {
      rollBack();
      return createStringError(ec, "cannot rename into '" + replaced[i] +
                                       "': " + ec.message());
    }
    renamedIn.push_back(replaced[i]);
  }
  for (const auto &[path, backup] : backups)
    sys::fs::remove(backup);
  return Error::success();
}

/// The files of one result; `suffix` marks the transposed half of a
/// dual-layout run.
static void serializeOutputs(const QuantizedTensor &q, StringRef suffix,
                             std::vector<OutputFile> &files) {
  auto name = [&](StringRef stem) { return (stem + suffix + ".npy").str(); };
  files.push_back(
      {name("q"), serializeNpy({q.rows, q.cols}, ArrayRef(q.codes))});
  if (q.scheme.localScalesAreE8M0())
    files.push_back({name("local"), serializeNpy({q.localRows, q.localCols},
                                                 ArrayRef(q.localE8M0))});
  else if (q.scheme.hasLocalScales())
    files.push_back({name("local"), serializeNpy({q.localRows, q.localCols},
                                                 ArrayRef(q.localF32))});
  if (q.scheme.hasGlobalScales())
    files.push_back(
        {name("global"), serializeNpy({static_cast<int64_t>(q.global.size())},
                                      ArrayRef(q.global))});
}

static void printReport(raw_ostream &os, const NpyMatrix &x,
                        const QuantizedTensor &q) {
  FidelityReport fidelity = measureFidelity(x.data, x.rows, x.cols, q);
  os << "scheme      " << q.scheme.str() << " " << formatName(q.format)
     << "\n";
  os << "shape       [" << x.rows << ", " << x.cols << "] -> q [" << q.rows
     << ", " << q.cols << "]\n";
  os << "SNR         " << format("%.2f", fidelity.snrDb) << " dB\n";
  os << "saturated   " << fidelity.saturated << "\n";
  os << "non-finite  " << fidelity.nonFiniteBlocks << " blocks\n";
  os << "underflow   " << fidelity.underflowToZero << " values\n";
  os << "max rel err " << format("%.3e", fidelity.maxRelError) << "\n";
}

static int fail(Error error) {
  errs() << "moss-jit quantize: error: " << toString(std::move(error)) << "\n";
  return 1;
}

int runQuantize() {
  if (Error error = checkNotEmpty(
          "global", global, global.getNumOccurrences() > 0, "tensor or row"))
    return fail(std::move(error));
  if (Error error = checkNotEmpty("block", block, block.getNumOccurrences() > 0,
                                  "a positive block length N or RxN"))
    return fail(std::move(error));
  Expected<OperandChoice> chosen = makeOperandScheme(
      scheme, block, global, fp8Format, fp8Format.getNumOccurrences() > 0, "");
  if (!chosen)
    return fail(chosen.takeError());
  if (Error error = checkOutputDirectory(outDir))
    return fail(std::move(error));
  if (Error error = checkInputIsNotAnOutput(input, outDir))
    return fail(std::move(error));
  NpyReadOptions readOptions;
  readOptions.uint16AsBf16 = bf16Bits;
  Expected<NpyMatrix> x = readNpyMatrix(input, readOptions);
  if (!x)
    return fail(x.takeError());

  QuantizeOptions options;
  options.scheme = chosen->scheme;
  options.format = chosen->format;
  options.transpose = transpose;
  std::optional<BlockScaleFold> parsedFold = parseBlockScaleFold(fold);
  if (!parsedFold)
    return fail(createStringError(inconvertibleErrorCode(),
                                  "--fold=" + fold +
                                      " must be none, 128 or row"));
  options.fold = *parsedFold;
  if (bothLayouts && transpose)
    return fail(createStringError(
        inconvertibleErrorCode(),
        "--both-layouts writes the transposed quantization with the "
        "row-major one: drop --transpose"));
  // Both layouts: the row-major quantization, then the transposed one.
  std::vector<QuantizeOptions> layouts = {options};
  if (bothLayouts) {
    layouts.push_back(options);
    layouts.back().transpose = true;
  }
  for (const QuantizeOptions &layout : layouts)
    if (Error error = checkQuantizeOptions(x->rows, x->cols, layout))
      return fail(std::move(error));
  std::vector<QuantizedTensor> results;
  if (target == Target::Gpu) {
    Expected<std::vector<QuantizedTensor>> q =
        quantizeOnGpu(x->data, x->bf16, x->rows, x->cols, options, bothLayouts);
    if (!q)
      return fail(q.takeError());
    results = std::move(*q);
  } else {
    for (const QuantizeOptions &layout : layouts) {
      Expected<QuantizedTensor> q = quantize(x->data, x->rows, x->cols, layout);
      if (!q)
        return fail(q.takeError());
      results.push_back(std::move(*q));
    }
  }
  std::vector<OutputFile> files;
  for (size_t i = 0; i < results.size(); ++i)
    serializeOutputs(results[i], i ? "_t" : "", files);
  if (Error error = writeOutputs(outDir, files))
    return fail(std::move(error));

  for (const QuantizedTensor &q : results) {
    if (report)
      printReport(outs(), *x, q);
    if (q.stats.nonFiniteBlocks != 0)
      errs() << "moss-jit quantize: warning: " << q.stats.nonFiniteBlocks
             << " block(s)" << (q.transposed ? " of the transpose" : "")
             << " held NaN or Inf; they carry the NaN scale\n";
  }
  return 0;
}

} // namespace moss::jit
