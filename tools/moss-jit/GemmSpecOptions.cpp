//===- GemmSpecOptions.cpp - The GEMM flags of compile, run, bench --------===//

#include "GemmSpecOptions.h"

#include "Commands.h"
#include "GroupedGemmProblem.h"
#include "SchemeOptions.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <random>
#include <tuple>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

// Function-local statics: options in other translation units name these
// subcommands during static construction, in no fixed order.
cl::SubCommand &getCompileCommand() {
  static cl::SubCommand command("compile",
                                "Compile a GEMM kernel and emit one stage");
  return command;
}
cl::SubCommand &getRunCommand() {
  static cl::SubCommand command(
      "run", "Run a GEMM on the GPU and check it against the FP64 reference");
  return command;
}
cl::SubCommand &getBenchCommand() {
  static cl::SubCommand command("bench", "Time a GEMM kernel on the GPU");
  return command;
}

namespace {
cl::OptionCategory category("GEMM options");

/// cl::sub for all three commands.
struct GemmCommands {
  template <class Opt> void apply(Opt &o) const {
    cl::sub(getCompileCommand()).apply(o);
    cl::sub(getRunCommand()).apply(o);
    cl::sub(getBenchCommand()).apply(o);
  }
} const kGemmCommands;

cl::opt<int64_t> m("m",
                   cl::desc("M: compile specializes to it (omitted: any M); "
                            "run and bench launch with it"),
                   cl::init(-1), kGemmCommands, cl::cat(category));
cl::opt<int64_t> n("n", cl::desc("N"), cl::Required, kGemmCommands,
                   cl::cat(category));
cl::opt<int64_t> k("k",
                   cl::desc("K, a multiple of 32 (--k-grouped: the mean "
                            "tokens per expert)"),
                   cl::Required, kGemmCommands, cl::cat(category));

/// What --a-scheme and --b-scheme take (SchemeOptions.h, parseSchemeText).
constexpr const char *kSchemeHelp =
    "per-tensor, per-row, per-group, mxfp8 or moss, with options as in "
    "moss:row:32 or per-group:128x128";
// cl::desc keeps a StringRef: the texts must outlive the options (defined
// before them, they are initialized first).
const std::string kASchemeHelp =
    std::string("Scaling scheme of A: ") + kSchemeHelp;
const std::string kBSchemeHelp =
    std::string("Scaling scheme of B: ") + kSchemeHelp;
auto formatValues() {
  return cl::values(clEnumValN(Fp8Format::E4M3, "e4m3", ""),
                    clEnumValN(Fp8Format::E5M2, "e5m2", ""));
}

// Operand A: MOSS two-level by default (the forward activations).
cl::opt<std::string> aScheme("a-scheme", cl::desc(kASchemeHelp),
                             cl::init("moss"), kGemmCommands,
                             cl::cat(category));
cl::opt<std::string> aGlobal("a-global",
                             cl::desc("A's moss global scale: tensor or row"),
                             kGemmCommands, cl::cat(category));
cl::opt<std::string> aBlock("a-block", cl::desc("A's block (N or RxN)"),
                            kGemmCommands, cl::cat(category));
cl::opt<Fp8Format> aFormat("a-format", cl::desc("A's FP8 format"),
                           cl::init(Fp8Format::E4M3), formatValues(),
                           kGemmCommands, cl::cat(category));
// Operand B: per-tensor by default (auto-scaled weights).
cl::opt<std::string> bScheme("b-scheme", cl::desc(kBSchemeHelp),
                             cl::init("per-tensor"), kGemmCommands,
                             cl::cat(category));
cl::opt<std::string> bGlobal("b-global",
                             cl::desc("B's moss global scale: tensor or row"),
                             kGemmCommands, cl::cat(category));
cl::opt<std::string> bBlock("b-block", cl::desc("B's block (N or RxN)"),
                            kGemmCommands, cl::cat(category));
cl::opt<Fp8Format> bFormat("b-format", cl::desc("B's FP8 format"),
                           cl::init(Fp8Format::E4M3), formatValues(),
                           kGemmCommands, cl::cat(category));

cl::opt<compiler::FloatType>
    out("out", cl::desc("Output type"), cl::init(compiler::FloatType::BF16),
        kGemmCommands, cl::cat(category),
        cl::values(clEnumValN(compiler::FloatType::BF16, "bf16", ""),
                   clEnumValN(compiler::FloatType::F16, "f16", ""),
                   clEnumValN(compiler::FloatType::F32, "f32", "")));
cl::opt<std::string> bias("bias", cl::desc("Bias type (bf16, f16, f32)"),
                          kGemmCommands, cl::cat(category));
cl::opt<std::string> accumulate("accumulate",
                                cl::desc("Type of C for beta * C (f32 or the "
                                         "output type)"),
                                kGemmCommands, cl::cat(category));
cl::opt<bool> amax("amax", cl::desc("Also return max |output|"), kGemmCommands,
                   cl::cat(category));
cl::opt<int64_t> promoteK(
    "promote-k",
    cl::desc("Promote the tensor cores' partial sums to FP32 every N of K "
             "(32, 64, 128; default: the schemes' own interval)"),
    cl::init(0), kGemmCommands, cl::cat(category));
cl::opt<compiler::MmaType>
    mma("mma",
        cl::desc("What the tensor cores multiply (default: auto, f16 for f32 "
                 "outputs and fp8 otherwise)"),
        cl::init(compiler::MmaType::Auto),
        cl::values(
            clEnumValN(compiler::MmaType::Auto, "auto", "f16 for f32 outputs"),
            clEnumValN(compiler::MmaType::FP8, "fp8",
                       "the FP8 codes, full speed; f32 outputs within about "
                       "1e-4 of FP64"),
            clEnumValN(compiler::MmaType::F16, "f16",
                       "the codes widened exactly to f16 on chip: FP32 sums of "
                       "exact products, f32 outputs within 1e-5, about a third "
                       "of the FP8 speed")),
        kGemmCommands, cl::cat(category));
cl::opt<std::string> fold(
    "fold",
    cl::desc("Where two-level and MXFP8 operands' E8M0 block factors go: "
             "none (exact per-32 promotion), 128 (one promotion per 128 of "
             "K), row (the row's factor in the epilogue), auto (row for "
             "bf16/f16 outputs of at least 1024 rows, else none)"),
    cl::init("auto"), kGemmCommands, cl::cat(category));
cl::opt<bool> staticM(
    "static-m", cl::desc("run, bench: compile the kernel for this M only"),
    cl::sub(getRunCommand()), cl::sub(getBenchCommand()), cl::cat(category));
cl::opt<std::string>
    tiling("tiling",
           cl::desc("run, bench: TMxTNxSTAGES[xCMxCN[xSPLITK]], e.g. "
                    "128x256x4, 128x128x6x2x1 or 128x128x6x1x1x4, its tiles "
                    "walked in the heuristic's order (default: the "
                    "compiler's choice)"),
           cl::sub(getRunCommand()), cl::sub(getBenchCommand()),
           cl::cat(category));
// run and bench compile for the GPU they run on; --arch is compile's. Known
// here so that it gets that answer, not LLVM's reading of "-a -r -c -h".
cl::opt<std::string> runArch("arch", cl::Hidden, cl::sub(getRunCommand()),
                             cl::sub(getBenchCommand()));
cl::opt<int64_t> groups(
    "groups",
    cl::desc("A grouped GEMM of this many experts: m-grouped (a "
             "mixture-of-experts layer: B holds each expert's [N, K]; run "
             "and bench then take -m as the mean rows per expert), or with "
             "--k-grouped its weight gradient"),
    cl::init(0), kGemmCommands, cl::cat(category));
cl::opt<bool> masked(
    "masked",
    cl::desc("With --groups: the masked layout (each expert's rows within "
             "the same number of rows, the decoding layout)"),
    kGemmCommands, cl::cat(category));
cl::opt<bool> kGrouped(
    "k-grouped",
    cl::desc("With --groups: k-grouped (a mixture-of-experts weight "
             "gradient): -m and -n are each expert's [M, N] output, A [M, K] "
             "and B [N, K] are shared, K being all experts' tokens; compile "
             "serves any K, run and bench take -k as the mean tokens per "
             "expert (a multiple of 128)"),
    kGemmCommands, cl::cat(category));
cl::opt<std::string> routing(
    "routing",
    cl::desc("run, bench with --groups: how rows fall to experts: random (0 "
             "to 2m each), skewed (one expert half of all), sparse (most "
             "experts empty)"),
    cl::init("random"), cl::sub(getRunCommand()), cl::sub(getBenchCommand()),
    cl::cat(category));
cl::opt<bool> quickCompile(
    "quick-compile",
    cl::desc("The kernel's quick-compile variant (less than half the NVRTC "
             "time, about a quarter slower), which a first call launches "
             "until the full kernel is compiled"),
    kGemmCommands, cl::cat(category));
} // namespace

static Expected<compiler::FloatType> parseFloatType(StringRef text,
                                                    StringRef flag) {
  if (text == "bf16")
    return compiler::FloatType::BF16;
  if (text == "f16")
    return compiler::FloatType::F16;
  if (text == "f32")
    return compiler::FloatType::F32;
  return createStringError(inconvertibleErrorCode(),
                           "--" + flag + "=" + text +
                               " must be bf16, f16 or f32");
}

Expected<compiler::GemmSpec> getGemmSpec(bool mIsLaunchRows) {
  if (runArch.getNumOccurrences())
    return createStringError(inconvertibleErrorCode(),
                             "--arch is not an option of run and bench: they "
                             "compile for the GPU they run on (moss-jit "
                             "compile takes --arch)");
  compiler::GemmSpec spec;
  // Sizes in range before anything else: the kernels take 1 <= M, N, K
  // < 2^31 (M may also be omitted for compile).
  constexpr int64_t kLimit = int64_t(1) << 31;
  for (auto [name, value, given] :
       {std::tuple{"m", int64_t(m), m.getNumOccurrences() > 0},
        std::tuple{"n", int64_t(n), true}, std::tuple{"k", int64_t(k), true}})
    if (given && (value < 1 || value >= kLimit))
      return createStringError(inconvertibleErrorCode(),
                               "--" + Twine(name) + "=" + Twine(value) +
                                   " is out of range; expected 1 <= " + name +
                                   " < 2^31");
  if (mIsLaunchRows) {
    if (m < 0)
      return createStringError(inconvertibleErrorCode(),
                               "-m (the rows at launch) is required");
    spec.m = staticM ? int64_t(m) : compiler::GemmSpec::kDynamic;
  } else {
    spec.m = m < 0 ? compiler::GemmSpec::kDynamic : int64_t(m);
  }
  if (groups.getNumOccurrences() && groups < 1)
    return createStringError(inconvertibleErrorCode(),
                             "--groups=" + Twine(int64_t(groups)) +
                                 " must be at least 1");
  if (masked && !groups)
    return createStringError(inconvertibleErrorCode(),
                             "--masked is a layout of an m-grouped GEMM: give "
                             "--groups too");
  if (routing.getNumOccurrences() && !groups)
    return createStringError(
        inconvertibleErrorCode(),
        "--routing spreads a grouped GEMM's rows or tokens: "
        "give --groups too");
  if (routing != "random" && routing != "skewed" && routing != "sparse")
    return createStringError(inconvertibleErrorCode(),
                             "--routing=" + routing +
                                 " must be random, skewed or sparse");
  if (kGrouped) {
    if (!groups || masked)
      return createStringError(inconvertibleErrorCode(),
                               "--k-grouped is a layout of a grouped GEMM: "
                               "give --groups, without --masked");
    if (m < 1)
      return createStringError(inconvertibleErrorCode(),
                               "--k-grouped needs -m (each expert's output "
                               "rows; its K is the tokens, known at launch)");
    spec.m = m;
    spec.groups = groups;
    spec.groupedK = true;
  } else if (groups) {
    // The experts' rows are known at launch only.
    if (staticM || (!mIsLaunchRows && m.getNumOccurrences()))
      return createStringError(inconvertibleErrorCode(),
                               "an m-grouped GEMM has a dynamic M: drop " +
                                   Twine(staticM ? "--static-m" : "-m"));
    spec.m = compiler::GemmSpec::kDynamic;
    spec.groups = groups;
    spec.maskedGroups = masked;
  }
  spec.n = n;
  spec.k = kGrouped ? compiler::GemmSpec::kDynamic : int64_t(k);
  for (const cl::opt<std::string> *flag : {&aGlobal, &bGlobal})
    if (Error e = checkNotEmpty(flag->ArgStr, *flag,
                                flag->getNumOccurrences() > 0, "tensor or row"))
      return std::move(e);
  for (const cl::opt<std::string> *flag : {&aBlock, &bBlock})
    if (Error e =
            checkNotEmpty(flag->ArgStr, *flag, flag->getNumOccurrences() > 0,
                          "a positive block length N or RxN"))
      return std::move(e);
  Expected<OperandChoice> a = makeOperandScheme(
      aScheme, aBlock, aGlobal, aFormat, aFormat.getNumOccurrences() > 0, "a-");
  if (!a)
    return a.takeError();
  Expected<OperandChoice> b = makeOperandScheme(
      bScheme, bBlock, bGlobal, bFormat, bFormat.getNumOccurrences() > 0, "b-");
  if (!b)
    return b.takeError();
  spec.a = a->format;
  spec.b = b->format;
  spec.aScaling = a->scheme;
  spec.bScaling = b->scheme;
  if (groups && !kGrouped) {
    // The experts' tokens: a MOSS A takes a global per row unless told.
    if (spec.aScaling.kind == numerics::ScalingKind::TwoLevel &&
        !aGlobal.getNumOccurrences())
      spec.aScaling.global = numerics::GlobalScope::Row;
    // run and bench quantize each expert's rows apart.
    if (mIsLaunchRows && spec.aScaling.hasGlobalScales() &&
        !spec.aScaling.globalPerRow())
      return createStringError(
          inconvertibleErrorCode(),
          "--groups: run and bench quantize each expert's rows apart, so A "
          "needs a global per row, not " +
              spec.aScaling.str() +
              " (--a-global row, or --a-scheme per-row, per-group or mxfp8)");
  }
  spec.out = out;
  if (!bias.empty()) {
    Expected<compiler::FloatType> type = parseFloatType(bias, "bias");
    if (!type)
      return type.takeError();
    spec.bias = *type;
  }
  if (!accumulate.empty()) {
    Expected<compiler::FloatType> type =
        parseFloatType(accumulate, "accumulate");
    if (!type)
      return type.takeError();
    spec.accumulate = *type;
  }
  spec.amax = amax;
  spec.promoteK = promoteK;
  spec.mma = mma;
  Expected<std::optional<numerics::BlockScaleFold>> parsedFold =
      parseGemmFold(fold);
  if (!parsedFold)
    return parsedFold.takeError();
  spec.fold = *parsedFold;
  if (!spec.fold) {
    // Spelled out, so that the spec's description shows it: the default at
    // the launch rows (run, bench) or the spec's M.
    int64_t rows = mIsLaunchRows ? int64_t(m) * std::max<int64_t>(groups, 1)
                                 : compiler::GemmSpec::kDynamic;
    if (spec.getFold(rows) != numerics::BlockScaleFold::None)
      spec.fold = spec.getFold(rows);
  }
  return spec;
}

int64_t getLaunchRows() { return m; }

Expected<std::vector<int64_t>> getExpertRows(const compiler::GemmSpec &spec,
                                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  return routeRows(spec.groups, m, routing, rng);
}

Expected<std::vector<int64_t>> getExpertColumns(const compiler::GemmSpec &spec,
                                                uint64_t seed) {
  if (k % 128 != 0)
    return createStringError(inconvertibleErrorCode(),
                             "-k=" + Twine(int64_t(k)) +
                                 " (the mean tokens per expert of a "
                                 "k-grouped GEMM) is not a multiple of 128");
  std::mt19937_64 rng(seed);
  Expected<std::vector<int64_t>> blocks =
      routeRows(spec.groups, k / 128, routing, rng);
  if (!blocks)
    return blocks.takeError();
  for (int64_t &b : *blocks)
    b *= 128;
  return blocks;
}

Error checkTilingOverride(const compiler::GemmSpec &spec,
                          const std::optional<compiler::TileConfig> &tiling) {
  if (!tiling)
    return Error::success();
  // Against the H200's resources: no Hopper GPU has more.
  return compiler::checkTiling(spec.getKernelSpec(m), *tiling,
                               compiler::TargetInfo::h200());
}

bool getQuickCompile() { return quickCompile; }

Expected<std::optional<compiler::TileConfig>>
getTilingOverride(const compiler::GemmSpec &spec, int64_t m) {
  if (tiling.empty())
    return std::nullopt;
  SmallVector<StringRef> parts;
  StringRef(tiling).split(parts, 'x');
  SmallVector<int64_t> values;
  for (StringRef part : parts) {
    int64_t value = 0;
    if (part.getAsInteger(10, value) || value < 1)
      return createStringError(inconvertibleErrorCode(),
                               "--tiling=" + tiling + ": '" + part +
                                   "' is not a positive integer; expected "
                                   "TMxTNxSTAGES[xCMxCN[xSPLITK]]");
    values.push_back(value);
  }
  if (values.size() != 3 && values.size() != 5 && values.size() != 6)
    return createStringError(inconvertibleErrorCode(),
                             "--tiling=" + tiling +
                                 ": expected TMxTNxSTAGES[xCMxCN[xSPLITK]], "
                                 "e.g. 128x256x4");
  compiler::TileConfig config;
  config.tileM = values[0];
  config.tileN = values[1];
  config.stages = values[2];
  if (values.size() >= 5) {
    config.clusterM = values[3];
    config.clusterN = values[4];
  }
  if (values.size() == 6)
    config.splitK = values[5];
  // -m is each expert's mean rows (m-grouped), or each expert's output
  // rows (k-grouped).
  const int64_t rows = spec.groups ? m * spec.groups : m;
  compiler::setTileOrder(config, rows, spec.n);
  return config;
}

} // namespace moss::jit
