//===- CacheCommand.cpp - moss-jit cache stats|clear|warm -----------------===//

#include "Commands.h"
#include "Shapes.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Support/UntrustedInput.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace llvm;

namespace moss::jit {

cl::SubCommand cacheCommand(
    "cache", "Show, clear or warm the kernel cache (stats|clear|warm)");

namespace {
cl::opt<std::string> action(cl::Positional, cl::desc("<stats|clear|warm>"),
                            cl::Required, cl::sub(cacheCommand));
cl::opt<std::string> shapesFile(
    "shapes",
    cl::desc("warm: a shapes file, as moss-tune reads it (lines \"M N K "
             "[a-scheme] [b-scheme] [groups=G] [routing=R]\" or a JSON "
             "list; docs/TUNING.md)"),
    cl::sub(cacheCommand));
cl::opt<std::string> out("out", cl::desc("warm: output type bf16, f16, f32"),
                         cl::init("bf16"), cl::sub(cacheCommand));
cl::opt<bool> staticM(
    "static-m",
    cl::desc("warm: kernels specialized to each shape's M (what the Python "
             "package launches; a grouped GEMM's kernel keeps any M); "
             "default: the any-M kernels of the C and C++ APIs' dynamic-M "
             "specs"),
    cl::sub(cacheCommand));
cl::opt<bool> quantizers(
    "quantizers",
    cl::desc("warm: also the quantizers of moss_jit.nn.Linear's training "
             "step for each shape M N K (tokens, out, in): X and dY in both "
             "layouts (MOSS, global per row, row fold), and the weight's "
             "per-tensor casts; with the row-wise kernels' any-K twins, "
             "which serve a first call of another K that needs as many "
             "threads without a compile"),
    cl::sub(cacheCommand));
cl::opt<std::string>
    activations("activations",
                cl::desc("warm --quantizers: the activations' dtype, bf16 "
                         "or f32"),
                cl::init("bf16"), cl::sub(cacheCommand));
cl::opt<std::string> weights(
    "weights",
    cl::desc("warm --quantizers: the master weights' dtype, f32 or bf16"),
    cl::init("f32"), cl::sub(cacheCommand));
cl::opt<unsigned> smCount("sms",
                          cl::desc("warm: the GPU's SM count (H200: 132)"),
                          cl::init(132), cl::sub(cacheCommand));

int warmError(const Twine &message) {
  errs() << "moss-jit cache warm: error: " << message << "\n";
  return 1;
}

/// One quantization of a Linear's step: `withScale` for a cast with a given
/// scale.
struct StepQuantization {
  compiler::QuantizeSpec spec;
  bool withScale = false;
};

/// The quantizations moss_jit.nn.Linear (its defaults: E4M3, MOSS blocks of
/// 32 with a global per row, folded by rows) runs for `tokens` rows of
/// `in` -> `out` features: X and dY in both layouts (one dual-layout
/// quantize each where the tokens are a multiple of the block, else the two
/// apart over the tokens padded to it), the weight [out, in] cast exactly,
/// with the scaler's scale, and transposed with it, and both its layouts
/// at once, exactly (a rescale, and the compiled Linear's cast) and with
/// the scaler's scale (a training step's).
std::vector<StepQuantization>
getLinearStepQuantizations(int64_t tokens, int64_t out, int64_t in,
                           compiler::InputType activation,
                           compiler::InputType weight) {
  using numerics::BlockScaleFold;
  const numerics::ScalingScheme moss =
      numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32);
  auto make = [](int64_t rows, int64_t cols, compiler::InputType input,
                 numerics::ScalingScheme scheme, bool transpose,
                 BlockScaleFold fold) {
    compiler::QuantizeSpec spec;
    spec.rows = rows;
    spec.cols = cols;
    spec.input = input;
    spec.options = {scheme, numerics::Fp8Format::E4M3, transpose, fold};
    return spec;
  };
  std::vector<StepQuantization> steps;
  for (int64_t features : {in, out}) {
    compiler::QuantizeSpec x =
        make(tokens, features, activation, moss, false, BlockScaleFold::Row);
    if (tokens % 32 == 0) {
      // (Its compile builds the transposed quantize pass it runs too.)
      x.bothLayouts = true;
      steps.push_back({x});
      continue;
    }
    // The weight gradient pads the tokens to the block.
    steps.push_back({x});
    steps.push_back({make((tokens + 31) / 32 * 32, features, activation, moss,
                          true, BlockScaleFold::Row)});
  }
  const numerics::ScalingScheme perTensor =
      numerics::ScalingScheme::perTensor();
  compiler::QuantizeSpec w =
      make(out, in, weight, perTensor, false, BlockScaleFold::None);
  steps.push_back({w});
  steps.push_back({w, true});
  steps.push_back(
      {make(out, in, weight, perTensor, true, BlockScaleFold::None), true});
  w.bothLayouts = true;
  steps.push_back({w});
  steps.push_back({w, true});
  return steps;
}

std::optional<compiler::InputType> parseInputType(StringRef text) {
  if (text == "bf16")
    return compiler::InputType::BF16;
  if (text == "f32")
    return compiler::InputType::F32;
  return std::nullopt;
}

int runWarm(runtime::KernelCache &cache) {
  if (shapesFile.empty())
    return warmError("--shapes FILE is required");
  std::optional<compiler::FloatType> outType =
      out == "bf16"  ? std::optional(compiler::FloatType::BF16)
      : out == "f16" ? std::optional(compiler::FloatType::F16)
      : out == "f32" ? std::optional(compiler::FloatType::F32)
                     : std::nullopt;
  if (!outType)
    return warmError("--out=" + out + " is not bf16, f16 or f32");
  if (smCount < 1 || smCount > 1024)
    return warmError("--sms=" + Twine(smCount) + " is not an SM count");
  std::optional<compiler::InputType> activationType =
      parseInputType(activations);
  std::optional<compiler::InputType> weightType = parseInputType(weights);
  if (!activationType)
    return warmError("--activations=" + activations + " is not bf16 or f32");
  if (!weightType)
    return warmError("--weights=" + weights + " is not f32 or bf16");
  Expected<std::unique_ptr<MemoryBuffer>> text =
      readRegularFile(shapesFile, 16 << 20, "the shapes file");
  if (!text)
    return warmError(toString(text.takeError()));
  // The product's defaults: activations MOSS two-level with a per-row
  // global, weights per tensor.
  tune::ShapeDefaults defaults;
  defaults.a.scheme =
      numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32);
  defaults.b.scheme = numerics::ScalingScheme::perTensor();
  defaults.out = *outType;
  Expected<std::vector<tune::TuneShape>> shapes =
      tune::parseShapesFile((*text)->getBuffer(), shapesFile, defaults);
  if (!shapes)
    return warmError(toString(shapes.takeError()));
  if (Error e = tune::checkShapes(*shapes))
    return warmError(toString(std::move(e)));
  if (cache.getDirectory().empty())
    return warmError("the disk cache is off: set MOSS_CACHE_DIR");

  compiler::TargetInfo target = compiler::TargetInfo::h200();
  target.smCount = smCount;
  std::unique_ptr<GemmRunner> runner =
      GemmRunner::createForTarget(cache, target);
  unsigned compiled = 0;
  for (size_t i = 0; i < shapes->size(); ++i) {
    tune::TuneShape &shape = (*shapes)[i];
    compiler::GemmSpec spec = shape.given;
    // (An m-grouped kernel serves any M: it has no static one.)
    if (staticM && !spec.groups)
      spec.m = shape.m;
    auto start = std::chrono::steady_clock::now();
    Expected<unsigned> count = runner->warm(spec, shape.m);
    if (!count)
      return warmError(shape.origin + ": " + toString(count.takeError()));
    compiled += *count;
    // (GroupedLinear's quantizers are not among the Linear's.)
    if (quantizers && !spec.groups) {
      // The quantizers compile through the same cache: count its compiles.
      const uint64_t before = cache.stats().compiles;
      for (StepQuantization q :
           getLinearStepQuantizations(shape.m, shape.spec.n, shape.spec.k,
                                      *activationType, *weightType))
        for (bool anyK : {false, true}) {
          // (The twin's source is K's only where its kernel takes any K;
          // the cache compiles equal sources once.)
          q.spec.anyK = anyK;
          if (Error e = runtime::compileQuantizer(cache, q.spec, q.withScale)
                            .takeError())
            return warmError(shape.origin + ": quantizer of " +
                             Twine(q.spec.rows) + "x" + Twine(q.spec.cols) +
                             ": " + toString(std::move(e)));
        }
      *count += unsigned(cache.stats().compiles - before);
      compiled += unsigned(cache.stats().compiles - before);
    }
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    outs() << "[" << (i + 1) << "/" << shapes->size() << "] "
           << shape.getShapeText() << " " << spec.str() << ": "
           << (*count ? "compiled " + std::to_string(*count) + " kernel(s)"
                      : std::string("cached"))
           << " (" << format("%.2f", seconds) << " s)\n";
    outs().flush();
  }
  outs() << "warmed " << shapes->size() << " shapes into "
         << cache.getDirectory() << ": " << compiled << " kernels compiled\n";
  return 0;
}
} // namespace

int runCache() {
  // The default cache: MOSS_CACHE_DIR, else $XDG_CACHE_HOME/moss, else
  // ~/.cache/moss, as every kernel lookup resolves it.
  runtime::KernelCache cache;
  if (action == "stats") {
    cache.formatStats(outs());
    // What compiles new entries (a cache key holds its version).
    if (Expected<std::string> path = runtime::getNvrtcLibraryPath())
      outs() << "compiler:     NVRTC " << cantFail(runtime::getNvrtcVersion())
                                              .toString()
             << " (" << *path << ")\n";
    else
      outs() << "compiler:     " << toString(path.takeError()) << "\n";
    return 0;
  }
  if (action == "clear") {
    std::string directory = cache.getDirectory();
    if (Error error = cache.clear()) {
      errs() << "moss-jit cache: error: " << toString(std::move(error))
             << "\n";
      return 1;
    }
    outs() << "cleared " << (directory.empty() ? "the memory cache"
                                               : directory)
           << "\n";
    return 0;
  }
  if (action == "warm")
    return runWarm(cache);
  errs() << "moss-jit cache: error: unknown action '" << action
         << "'; expected stats, clear or warm\n";
  return 1;
}

} // namespace moss::jit
