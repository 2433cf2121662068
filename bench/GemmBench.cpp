//===- GemmBench.cpp - FP8 GEMM kernel throughput -------------------------===//
//
// TFLOPS of the Hopper FP8 GEMM kernel (templates/moss/gemm) per scheme and
// cluster shape on one problem size, plus its NVRTC compile time. Inputs are
// random FP8 codes and scales (timings do not depend on the values beyond
// power draw); the output is bf16. Times are medians of CUDA-event timings
// of back-to-back launches after warm-up.
//
//   moss-bench-gemm [--m M] [--n N] [--k K] [--repeat R] [--only NAME]...
//                   [--no-cublaslt] [--baseline NAME]... [--nvrtc-flag FLAG]...
//                   [--tiling TMxTNxSTAGES[xSPLITK]]... [--sustained MS]
//                   [--quick-compile] [--f16-mma]
//
// Variants are compiled first and then timed round-robin with the cuBLASLt
// baselines (up to 5 rounds of repeat/rounds launches each), so that clock
// drift during the run spreads over all of them. Defaults: 8192^3, 20
// repeats, every scheme with the tests' fixed tiling and the one the
// runtime launches for this M without a tuning database (`_heuristic`),
// each also with the other cluster shape of 1x1 and 2x1 (`_cluster2x1`,
// `_heuristic_cluster1x1`; a cluster kernel's persistent grid is the
// clusters that fit at once; split-K and 64-row tiles take none). Under this
// sustained load the H200 runs at its power cap (700 W) with SM clocks of
// 1.6-1.8 GHz, so these figures sit below ones from short bursts on an idle
// GPU, and a kernel's clocks depend on what ran just before it: compare
// rows of one run only.
// --sustained MS times each baseline and kernel alone instead, for MS
// milliseconds after a warm-up of MS/4, in two passes (the second in
// reverse order): each then runs at the clock its own power draw allows at
// the cap, as when a GPU runs one kind of GEMM back to back; --repeat is
// ignored.
// --nvrtc-flag passes a flag to NVRTC (e.g. --Ofast-compile=mid).
// --quick-compile adds each promoted kernel's quick-compile variant (the
// first kernel of a tiered compile, on its narrower tiles; `_quick`), next
// to the full one.
// --f16-mma adds each scheme with the f16 MMA (exact products, FP32 sums;
// `_f16mma`) on the tiling the runtime launches it with, and on each
// --tiling with that tiling's clusters.
// --tiling adds every scheme at that tiling too (`_tMxNxS`, 1x1 and 2x1
// clusters; `_splitK` and no cluster with a fourth field); a tiling the
// kernel does not take prints why and is skipped. --only keeps the variants
// whose name contains one of its values.
//
// Above the kernel's rows it prints the cuBLASLt baselines of the same
// round-robin (CublasLtBaseline.h): BF16, FP8 per-tensor and FP8
// block-scaled 1x128 x 128x128; a configuration cuBLASLt rejects prints
// "unsupported: <reason>". Each kernel row ends with its TFLOPS over the FP8
// per-tensor baseline's and, for the per-group rows, over the block-scaled
// baseline's. --no-cublaslt skips the baselines; --baseline keeps those
// whose name contains one of its values (e.g. to run one kernel alone while
// reading its power draw).
//
//===----------------------------------------------------------------------===//

#include "../tests/gpu/GemmApiLaunch.h"
#include "../tests/gpu/GemmTestSupport.h"

#include "CublasLtBaseline.h"
#include "moss/Runtime/EventTimer.h"

#include "moss/Runtime/Device.h"
#include "moss/Runtime/Driver.h"
#include "moss/Runtime/KernelCache.h"
#include "moss/Runtime/Module.h"
#include "moss/Runtime/TensorMaps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace moss::gemm;
using namespace moss::gemmtest;
using namespace moss::runtime;
using namespace llvm;

namespace {

const DriverApi *api = nullptr;

[[noreturn]] void die(const Twine &message) {
  errs() << "moss-bench-gemm: " << message << "\n";
  std::exit(1);
}

void check(CUresult result, const char *what) {
  if (result != CUDA_SUCCESS)
    die(toString(makeCudaError(result, what)));
}

void check(Error error) {
  if (error)
    die(toString(std::move(error)));
}

CUdeviceptr upload(const void *data, size_t bytes) {
  CUdeviceptr p = 0;
  if (bytes == 0)
    return 0;
  check(api->memAlloc(&p, bytes), "cuMemAlloc");
  check(api->memcpyHtoD(p, data, bytes), "cuMemcpyHtoD");
  return p;
}

/// Random finite FP8 codes (no NaN patterns in either format).
std::vector<uint8_t> randomCodes(size_t count, std::mt19937_64 &rng) {
  std::vector<uint8_t> v(count);
  for (uint8_t &c : v) {
    uint8_t magnitude = static_cast<uint8_t>(rng() % 0x78); // < 0x78
    c = static_cast<uint8_t>(magnitude | ((rng() & 1) << 7));
  }
  return v;
}

CUtensorMap operandMap(CUdeviceptr codes, int rows, int k, int boxRows,
                       const char *name) {
  CUtensorMap map;
  check(moss::runtime::encodeOperandMap(*api, map, codes, rows, k, boxRows,
                                        name));
  return map;
}

struct Variant {
  std::string name;
  Params params;
};

/// The accuracy class of a kernel (docs/NUMERICS-CONTRACT.md section 7):
/// what its sums compare with in cuBLASLt.
std::string accuracyClass(bool f16Mma, int promoteK) {
  if (f16Mma)
    return "f16-exact";
  if (promoteK == 0)
    return "fast-accum";
  return "promote-" + std::to_string(promoteK);
}

/// A GEMM timed through the product path (moss::GemmRunner via
/// GemmApiLaunch): a spec that folds runs its fold kernels and then the
/// GEMM kernel, all in the time. `foldAInKernel`: the kernel folds A
/// itself (GemmOptions::foldAInKernel).
struct ApiVariant {
  std::string name;
  moss::compiler::GemmSpec spec;
  bool foldAInKernel = false;
};

} // namespace

namespace {
cl::opt<int> mOpt("m", cl::desc("M"), cl::init(8192));
cl::opt<int> nOpt("n", cl::desc("N"), cl::init(8192));
cl::opt<int> kOpt("k", cl::desc("K"), cl::init(8192));
cl::opt<int> repeatOpt("repeat", cl::desc("Launches timed per variant"),
                       cl::init(20));
cl::opt<int> sustainedOpt(
    "sustained",
    cl::desc("Also time back-to-back launches for this many ms"),
    cl::init(0));
cl::list<std::string> onlyOpt(
    "only", cl::desc("Run only variants whose name contains NAME (repeatable)"),
    cl::value_desc("NAME"));
cl::opt<bool> noCublasLt("no-cublaslt", cl::desc("Skip the cuBLASLt baselines"));
cl::list<std::string> baselineOpt(
    "baseline",
    cl::desc("Run only baselines whose name contains NAME (repeatable)"),
    cl::value_desc("NAME"));
cl::list<std::string> nvrtcFlagOpt(
    "nvrtc-flag", cl::desc("An extra NVRTC flag (repeatable)"),
    cl::value_desc("FLAG"));
cl::opt<bool> quickCompileOpt("quick-compile",
                              cl::desc("Time the quick-compile variants"));
cl::opt<bool> f16MmaOpt("f16-mma", cl::desc("Also time the f16-MMA kernels"));
cl::list<std::string> tilingOpt(
    "tiling", cl::desc("An extra tiling to time (repeatable)"),
    cl::value_desc("TMxTNxSTAGES[xSPLITK]"));
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(
      argc, argv,
      "moss-bench-gemm: the GEMM kernels against cuBLASLt, in one process\n");
  int m = mOpt, n = nOpt, k = kOpt, repeat = repeatOpt,
      sustainedMs = sustainedOpt;
  std::vector<std::string> only(onlyOpt.begin(), onlyOpt.end());
  std::vector<std::string> onlyBaselines(baselineOpt.begin(),
                                         baselineOpt.end());
  bool cublasLt = !noCublasLt, quickCompile = quickCompileOpt,
       f16Mma = f16MmaOpt;
  std::vector<std::string> nvrtcFlags(nvrtcFlagOpt.begin(),
                                      nvrtcFlagOpt.end());
  std::vector<std::array<int, 4>> extraTilings;
  for (const std::string &text : tilingOpt) {
    std::array<int, 4> t{0, 0, 0, 1};
    char tail = 0;
    int fields = std::sscanf(text.c_str(), "%dx%dx%dx%d%c", &t[0], &t[1],
                             &t[2], &t[3], &tail);
    if (fields != 3 && fields != 4)
      die("--tiling takes TMxTNxSTAGES[xSPLITK], e.g. 128x192x5 or "
          "128x128x6x4; got " +
          text);
    extraTilings.push_back(t);
  }
  if (m < 1 || n < 1 || k < 1)
    die("--m, --n and --k must be positive");

  if (repeat < 1)
    die("--repeat must be at least 1");
  if (sustainedMs < 0)
    die("--sustained takes a positive number of milliseconds");
  Expected<Device> device = Device::open(0);
  if (!device)
    die(toString(device.takeError()));
  if (Error err = device->makeCurrent())
    die(toString(std::move(err)));
  api = &cantFail(getDriverApi());
  outs() << "device " << device->getName() << ", " << device->getArch() << ", "
         << device->getSmCount() << " SMs; m=" << m << " n=" << n << " k=" << k
         << ", out bf16\n";

  // The schemes, each with the tests' fixed tiling and the heuristic's for
  // this M (what moss::gemm launches without a tuning database: the plan
  // for M's bucket, split-K allowed), each with 1x1 and 2x1 clusters (the
  // heuristic's own choice unsuffixed).
  moss::compiler::TargetInfo target;
  target.smCount = unsigned(device->getSmCount());
  target.sharedMemoryPerBlock =
      unsigned(device->getMaxSharedMemoryPerBlockOptin());
  target.arch = device->getArch().str();
  std::vector<Variant> variants;
  // `base` at --tiling `t` (its clusters kept), and the name suffix.
  auto withExtraTiling = [](Params base, const std::array<int, 4> &t) {
    base.tileM = t[0];
    base.tileN = t[1];
    base.stages = t[2];
    base.splitK = t[3];
    return std::pair{formatv("_t{0}x{1}x{2}", t[0], t[1], t[2]).str() +
                         (t[3] > 1 ? formatv("_split{0}", t[3]).str() : ""),
                     base};
  };
  auto add = [&](const char *name, Params p) {
    p.m = -1;
    p.n = n;
    p.k = k;
    Params fixed = withDefaultTiling(p);
    Expected<moss::compiler::TileConfig> chosen =
        moss::compiler::selectTilingForLaunch(specOf(p), m, target);
    if (!chosen)
      die(std::string(name) + ": " + toString(chosen.takeError()));
    std::vector<std::pair<std::string, Params>> tilings = {
        {"", fixed}, {"_heuristic", withTiling(p, *chosen)}};
    for (const std::array<int, 4> &t : extraTilings)
      tilings.push_back(withExtraTiling(fixed, t));
    for (const auto &[tiling, q] : tilings)
      for (int cluster : {1, 2}) {
        if (cluster == 2 && (q.splitK > 1 || q.tileM == 64))
          continue; // split-K and 64-row tiles run without clusters
        Params r = q;
        r.clusterM = cluster;
        const int usual = tiling == "_heuristic" ? q.clusterM : 1;
        variants.push_back(
            {std::string(name) + tiling +
                 (cluster == usual ? ""
                                   : formatv("_cluster{0}x1", cluster).str()),
             r});
      }
    if (f16Mma) {
      Params wide = p;
      wide.f16Mma = true;
      Expected<moss::compiler::TileConfig> planned =
          moss::compiler::selectTilingForLaunch(specOf(wide), m, target);
      if (!planned)
        die(std::string(name) + "_f16mma: " + toString(planned.takeError()));
      wide = withTiling(wide, *planned);
      variants.push_back({std::string(name) + "_f16mma", wide});
      for (const std::array<int, 4> &t : extraTilings) {
        auto [suffix, extra] = withExtraTiling(wide, t);
        variants.push_back({std::string(name) + "_f16mma" + suffix, extra});
      }
    }
  };
  Params tensor;
  add("tensor_x_tensor", tensor);
  Params group;
  group.scaleA = kPerGroup;
  group.blockA = 128;
  group.scaleB = kPerGroup;
  group.blockRowsB = 128;
  group.blockB = 128;
  add("group1x128_x_group128x128", group);
  Params moss;
  moss.scaleA = kTwoLevel;
  moss.blockA = 32;
  moss.globalRowA = true;
  add("moss_twolevel_x_tensor", moss);
  Params both = moss;
  both.scaleB = kTwoLevel;
  both.blockB = 32;
  add("twolevel_x_twolevel", both);
  // Through the product path: the folds, and their kernels alone.
  using moss::numerics::BlockScaleFold;
  using moss::numerics::GlobalScope;
  using moss::numerics::ScalingScheme;
  std::vector<ApiVariant> apiVariants;
  auto addApi = [&](std::string name, ScalingScheme a, ScalingScheme b,
                    std::optional<BlockScaleFold> fold, int promoteK = 0) {
    moss::compiler::GemmSpec spec;
    spec.n = n;
    spec.k = k;
    spec.aScaling = a;
    spec.bScaling = b;
    spec.fold = fold;
    spec.promoteK = promoteK;
    apiVariants.push_back({name + "_api", spec});
    // Where a kernel can fold A itself, that kernel on the same GEMM.
    if (spec.canFoldAInKernel(m))
      apiVariants.push_back({name + "_kernelfold_api", spec, true});
  };
  const ScalingScheme mossRow = ScalingScheme::twoLevel(GlobalScope::Row);
  const ScalingScheme mossTensor = ScalingScheme::twoLevel(GlobalScope::Tensor);
  const ScalingScheme tensorScheme = ScalingScheme::perTensor();
  addApi("tensor_x_tensor", tensorScheme, tensorScheme, std::nullopt);
  addApi("tensor_x_tensor_promote128", tensorScheme, tensorScheme, std::nullopt,
         128);
  addApi("row_x_tensor", ScalingScheme::perRow(), tensorScheme, std::nullopt);
  addApi("group1x128_x_tensor", ScalingScheme::perGroup(1, 128), tensorScheme,
         std::nullopt);
  for (auto [scope, a] : {std::pair{"moss_rowglobal", mossRow},
                          std::pair{"moss_tensorglobal", mossTensor}}) {
    addApi(std::string(scope) + "_x_tensor_fold_none", a, tensorScheme,
           BlockScaleFold::None);
    addApi(std::string(scope) + "_x_tensor_fold_row", a, tensorScheme,
           BlockScaleFold::Row);
    addApi(std::string(scope) + "_x_tensor_fold_row_promote128", a,
           tensorScheme, BlockScaleFold::Row, 128);
    addApi(std::string(scope) + "_x_tensor_fold_128", a, tensorScheme,
           BlockScaleFold::K128);
  }
  addApi("twolevel_x_twolevel_fold_row", mossRow, mossRow, BlockScaleFold::Row);
  addApi("twolevel_x_twolevel_fold_128", mossRow, mossRow,
         BlockScaleFold::K128);
  addApi("row_x_row", ScalingScheme::perRow(), ScalingScheme::perRow(),
         std::nullopt);
  addApi("mxfp8_x_mxfp8_fold_row", ScalingScheme::mxfp8(),
         ScalingScheme::mxfp8(), BlockScaleFold::Row);
  addApi("mxfp8_x_mxfp8_fold_128", ScalingScheme::mxfp8(),
         ScalingScheme::mxfp8(), BlockScaleFold::K128);

  if (quickCompile)
    for (size_t i = 0, count = variants.size(); i < count; ++i) {
      // What GemmRunner compiles first: the variant on narrowed tiles.
      const Params &full = variants[i].params;
      const Params quick = quickCompileParams(full, target);
      if (plan(quick).groupBlocks != plan(full).groupBlocks ||
          quick.tileM != full.tileM || quick.tileN != full.tileN)
        variants.push_back({variants[i].name + "_quick", quick});
    }

  std::mt19937_64 rng(42);
  std::vector<uint8_t> a = randomCodes(static_cast<size_t>(m) * k, rng);
  std::vector<uint8_t> b = randomCodes(static_cast<size_t>(n) * k, rng);
  CUdeviceptr dA = upload(a.data(), a.size());
  CUdeviceptr dB = upload(b.data(), b.size());
  // Scales: E8M0 codes in [117, 127], FP32 ones near 1, globals 1.
  size_t blocksA = static_cast<size_t>(m) * (k / 32),
         blocksB = static_cast<size_t>(n) * (k / 32);
  std::vector<uint8_t> e8A(blocksA), e8B(blocksB);
  for (uint8_t &e : e8A)
    e = static_cast<uint8_t>(117 + rng() % 11);
  for (uint8_t &e : e8B)
    e = static_cast<uint8_t>(117 + rng() % 11);
  std::vector<float> f32A(static_cast<size_t>(m) * (k / 128), 0.01f),
      f32B(static_cast<size_t>((n + 127) / 128) * (k / 128), 0.02f),
      globalA(m, 1.0f), globalB(n, 1.0f);
  CUdeviceptr dE8A = upload(e8A.data(), e8A.size()),
              dE8B = upload(e8B.data(), e8B.size()),
              dF32A = upload(f32A.data(), f32A.size() * 4),
              dF32B = upload(f32B.data(), f32B.size() * 4),
              dGA = upload(globalA.data(), globalA.size() * 4),
              dGB = upload(globalB.data(), globalB.size() * 4);
  CUdeviceptr dOut = 0;
  check(api->memAlloc(&dOut, static_cast<size_t>(m) * n * 2), "cuMemAlloc");
  CUstream stream;
  check(api->streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  auto tflopsOf = [&](double ms) {
    return 2.0 * m * double(n) * k / (ms * 1e-3) / 1e12;
  };

  // cuBLASLt baselines, same problem, same stream, timed in the same
  // round-robin as the kernels (the clocks under the power cap depend on
  // what ran just before). A baseline cuBLASLt rejects prints why.
  struct Baseline {
    const char *name;
    std::unique_ptr<moss::bench::CublasLtGemm> gemm;
    std::vector<float> times;
  };
  std::vector<Baseline> baselines;
  moss::bench::CublasLtProblem problem;
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.stream = stream;
  // Prepared only when kept: preparing uploads the baseline's operands.
  auto addBaseline = [&](const char *name, auto prepare) {
    if (!onlyBaselines.empty() &&
        llvm::none_of(onlyBaselines, [&](const std::string &part) {
          return StringRef(name).contains(part);
        }))
      return;
    Expected<std::unique_ptr<moss::bench::CublasLtGemm>> gemm =
        prepare(problem);
    if (!gemm) {
      outs() << format("%-46s ", name)
             << "unsupported: " << toString(gemm.takeError()) << "\n";
      return;
    }
    baselines.push_back({name, std::move(*gemm), {}});
  };
  if (cublasLt) {
    addBaseline("cublaslt_bf16", moss::bench::prepareCublasLtBf16);
    addBaseline("cublaslt_fp8_tensor_x_tensor",
                moss::bench::prepareCublasLtFp8PerTensor);
    addBaseline("cublaslt_fp8_tensor_x_tensor_fastaccum",
                moss::bench::prepareCublasLtFp8PerTensorFastAccum);
    addBaseline("cublaslt_fp8_block1x128_x_128x128",
                moss::bench::prepareCublasLtFp8BlockScaled);
  } else {
    outs() << "(cuBLASLt baselines skipped: --no-cublaslt)\n";
  }
  auto ratio = [](double tflops, double base) -> std::string {
    if (base <= 0)
      return "-";
    return formatv("{0:F2}x", tflops / base).str();
  };

  // Compile and set up every variant first, then time them round-robin:
  // the H200's clocks drift under sustained load, and interleaving spreads
  // the drift over all variants instead of penalizing the last ones.
  struct Prepared {
    std::string name;
    Params params;
    double compileSeconds = 0;
    CUfunction function = nullptr;
    LaunchConfig launch;
    CUtensorMap mapA, mapB, mapD;
    Args args{};
    void *kernelParams[4];
    std::vector<float> times;
  };
  std::vector<std::unique_ptr<Prepared>> prepared;
  for (const Variant &v : variants) {
    if (!only.empty() && llvm::none_of(only, [&](const std::string &part) {
          return v.name.find(part) != std::string::npos;
        }))
      continue;
    const Params &p = v.params;
    if (const char *error = validate(p)) {
      outs() << v.name << ": " << error << "\n";
      continue;
    }
    auto prep = std::make_unique<Prepared>();
    prep->name = v.name + " " + std::to_string(p.tileM) + "x" +
                 std::to_string(p.tileN) + "x" + std::to_string(p.stages) +
                 (p.splitK > 1 ? " s" + std::to_string(p.splitK) : "");
    prep->params = p;
    Plan q = plan(p);
    CompileOptions options;
    options.arch = device->getArch().str();
    options.flags = nvrtcFlags;
    auto t0 = std::chrono::steady_clock::now();
    Expected<std::shared_ptr<const KernelEntry>> entry =
        getDefaultKernelCache().getOrCompile(kernelSource(p), options);
    if (!entry)
      die(toString(entry.takeError()));
    Expected<CUfunction> function = (*entry)->getFunction("moss_gemm");
    if (!function)
      die(toString(function.takeError()));
    prep->function = *function;
    prep->compileSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();

    prep->mapA = operandMap(dA, m, k, boxRowsA(p, m), "A");
    prep->mapB = operandMap(dB, n, k, q.boxB[1], "B");
    std::memset(&prep->mapD, 0, sizeof(prep->mapD));
    if (q.usesTmaD)
      check(moss::runtime::encodeOutputMap(*api, prep->mapD, dOut, m, n,
                                           unsigned(elementBytes(p.out)),
                                           q.boxD[0], q.boxD[1]));
    Args &args = prep->args;
    args.m = m;
    args.d = reinterpret_cast<void *>(dOut);
    auto ptr = [](CUdeviceptr d) { return reinterpret_cast<void *>(d); };
    args.aLocal = p.scaleA == kTwoLevel   ? ptr(dE8A)
                  : p.scaleA == kPerGroup ? ptr(dF32A)
                                          : nullptr;
    args.bLocal = p.scaleB == kTwoLevel   ? ptr(dE8B)
                  : p.scaleB == kPerGroup ? ptr(dF32B)
                                          : nullptr;
    args.aGlobal = static_cast<const float *>(ptr(dGA));
    args.bGlobal = static_cast<const float *>(ptr(dGB));
    if (long long bytes = workspaceBytes(p, m)) {
      CUdeviceptr workspace = 0;
      check(api->memAlloc(&workspace, size_t(bytes)), "cuMemAlloc");
      // The counters must start at zero; each launch leaves them so.
      check(api->memsetD8(workspace, 0, size_t(workspaceCounterBytes(p, m))),
            "cuMemsetD8");
      args.workspace = ptr(workspace);
    }
    prep->kernelParams[0] = &prep->mapA;
    prep->kernelParams[1] = &prep->mapB;
    prep->kernelParams[2] = &prep->mapD;
    prep->kernelParams[3] = &prep->args;
    LaunchConfig &launch = prep->launch;
    launch.block[0] = static_cast<unsigned>(q.threads);
    launch.cluster[0] = static_cast<unsigned>(q.clusterSize);
    launch.sharedMemoryBytes = static_cast<unsigned>(q.sharedBytes);
    launch.stream = stream;
    // A persistent grid of clusters is limited by how many fit at once.
    Expected<int> slots =
        getPersistentSlots(prep->function, launch, device->getSmCount());
    if (!slots)
      die(prep->name + ": " + toString(slots.takeError()));
    launch.grid[0] = static_cast<unsigned>(gridSize(p, m, *slots));
    prepared.push_back(std::move(prep));
  }

  // The product path's variants: the operands above (two-level factors in
  // dE8A/dE8B, FP32 ones in dF32A/dF32B, globals in dGA/dGB).
  struct PreparedApi {
    std::string name;
    ApiVariant variant;
    ApiBuffers buffers;
    double compileSeconds = 0;
    std::vector<float> times;
  };
  std::vector<std::unique_ptr<PreparedApi>> preparedApi;
  for (const ApiVariant &v : apiVariants) {
    if (!only.empty() && llvm::none_of(only, [&](const std::string &part) {
          return v.name.find(part) != std::string::npos;
        }))
      continue;
    auto prep = std::make_unique<PreparedApi>();
    prep->variant = v;
    // Gemm.h's getGemmScaleCounts cannot be included beside the templates'
    // moss::gemm namespace.
    auto localCount = [&](const ScalingScheme &scheme, int64_t rows) {
      return scheme.hasLocalScales()
                 ? (rows + scheme.blockRows - 1) / scheme.blockRows *
                       (k / scheme.blockCols)
                 : 0;
    };
    auto globalCount = [&](const ScalingScheme &scheme, int64_t rows) {
      return scheme.hasGlobalScales() ? (scheme.globalPerRow() ? rows : 1) : 0;
    };
    auto operand = [&](const ScalingScheme &scheme, CUdeviceptr e8m0,
                       CUdeviceptr f32, CUdeviceptr global, CUdeviceptr &local,
                       CUdeviceptr &globalOut) {
      local = !scheme.hasLocalScales()      ? 0
              : scheme.localScalesAreE8M0() ? e8m0
                                            : f32;
      globalOut = scheme.hasGlobalScales() ? global : 0;
    };
    ApiBuffers &b = prep->buffers;
    b.aCodes = dA;
    b.bCodes = dB;
    operand(v.spec.aScaling, dE8A, dF32A, dGA, b.aLocal, b.aGlobal);
    operand(v.spec.bScaling, dE8B, dF32B, dGB, b.bLocal, b.bGlobal);
    b.aLocalCount = localCount(v.spec.aScaling, m);
    b.aGlobalCount = globalCount(v.spec.aScaling, m);
    b.bLocalCount = localCount(v.spec.bScaling, n);
    b.bGlobalCount = globalCount(v.spec.bScaling, n);
    b.d = dOut;
    std::string description;
    moss::compiler::TileConfig planned;
    auto t0 = std::chrono::steady_clock::now();
    if (Error e = prepareThroughApi(v.spec, m, std::nullopt, false, description,
                                    planned, v.foldAInKernel)) {
      outs() << v.name << ": " << toString(std::move(e)) << "\n";
      continue;
    }
    prep->compileSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    moss::compiler::GemmSpec kernelSpec = v.spec.getKernelSpec(m);
    prep->name =
        v.name + " " + planned.str() + " " +
        accuracyClass(false, int(moss::compiler::getPromoteK(kernelSpec)));
    preparedApi.push_back(std::move(prep));
  }

  errs() << "timing " << baselines.size() << " baselines and "
         << prepared.size() + preparedApi.size() << " kernels "
         << (sustainedMs > 0 ? "one at a time" : "round-robin") << "...\n";
  // Alone for sustainedMs: the launch count from a short probe.
  auto timeAlone = [&](auto launch, std::vector<float> &times,
                       const std::string &name) {
    Expected<std::vector<float>> probe =
        moss::runtime::timeWithEvents(launch, 3, 10, stream);
    if (!probe)
      die(name + ": " + toString(probe.takeError()));
    const float ms = std::max((*probe)[probe->size() / 2], 1e-3f);
    const int count = std::max(10, static_cast<int>(sustainedMs / ms));
    Expected<std::vector<float>> timed =
        moss::runtime::timeWithEvents(launch, count / 4, count, stream);
    if (!timed)
      die(name + ": " + toString(timed.takeError()));
    times.insert(times.end(), timed->begin(), timed->end());
  };
  if (sustainedMs > 0) {
    std::vector<std::function<void()>> items;
    for (Baseline &b : baselines)
      items.push_back([&, base = &b] {
        timeAlone([&] { return base->gemm->run(); }, base->times, base->name);
      });
    for (const std::unique_ptr<Prepared> &prep : prepared)
      items.push_back([&, kernel = prep.get()] {
        timeAlone(
            [&] {
              return launchKernel(kernel->function, kernel->launch,
                                  kernel->kernelParams);
            },
            kernel->times, kernel->name);
      });
    for (const std::unique_ptr<PreparedApi> &prep : preparedApi)
      items.push_back([&, api = prep.get()] {
        timeAlone(
            [&] {
              return runThroughApi(api->variant.spec, m, std::nullopt, false,
                                   api->buffers, stream,
                                   api->variant.foldAInKernel);
            },
            api->times, api->name);
      });
    for (const std::function<void()> &item : items)
      item();
    for (auto it = items.rbegin(); it != items.rend(); ++it)
      (*it)();
  }
  const int rounds = sustainedMs > 0 ? 0 : std::min(repeat, 5);
  auto timeRound = [&](int round, auto launch, std::vector<float> &times,
                       const std::string &name) {
    int count = repeat / rounds + (round < repeat % rounds ? 1 : 0);
    Expected<std::vector<float>> timed = moss::runtime::timeWithEvents(
        launch, /*warmup=*/round == 0 ? 3 : 1, count, stream);
    if (!timed)
      die(name + ": " + toString(timed.takeError()));
    times.insert(times.end(), timed->begin(), timed->end());
  };
  for (int round = 0; round < rounds; ++round) {
    for (Baseline &b : baselines)
      timeRound(
          round, [&] { return b.gemm->run(); }, b.times, b.name);
    for (const std::unique_ptr<Prepared> &prep : prepared)
      timeRound(
          round,
          [&] {
            return launchKernel(prep->function, prep->launch,
                                prep->kernelParams);
          },
          prep->times, prep->name);
    for (const std::unique_ptr<PreparedApi> &prep : preparedApi)
      timeRound(
          round,
          [&] {
            return runThroughApi(prep->variant.spec, m, std::nullopt, false,
                                 prep->buffers, stream,
                                 prep->variant.foldAInKernel);
          },
          prep->times, prep->name);
  }
  auto median = [](std::vector<float> &times) {
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };

  // ratio()'s bases: 0 when a baseline is unsupported or skipped (its
  // column then shows "-").
  double ltFp8Tflops = 0, ltFastTflops = 0, ltBlockTflops = 0;
  outs() << format("%-46s %9s %9s %9s %9s\n", "baseline", "", "median_ms",
                   "best_ms", "TFLOPS");
  for (Baseline &b : baselines) {
    float ms = median(b.times);
    double tflops = tflopsOf(ms);
    if (StringRef(b.name) == "cublaslt_fp8_tensor_x_tensor")
      ltFp8Tflops = tflops;
    if (StringRef(b.name) == "cublaslt_fp8_tensor_x_tensor_fastaccum")
      ltFastTflops = tflops;
    if (StringRef(b.name) == "cublaslt_fp8_block1x128_x_128x128")
      ltBlockTflops = tflops;
    outs() << format("%-46s %9s %9.4f %9.4f %9.1f\n", b.name, "", ms,
                     b.times.front(), tflops);
  }

  // vs_lt_fp8: over cuBLASLt FP8 per-tensor in its default (promoting)
  // mode; vs_lt_fast: over its fast-accumulation mode, the class of our
  // unpromoted kernels.
  outs() << format("%-62s %9s %9s %9s %9s %10s %10s %11s\n",
                   "kernel tile accuracy", "compile_s", "median_ms", "best_ms",
                   "TFLOPS", "vs_lt_fp8", "vs_lt_fast", "vs_lt_block");
  auto row = [&](const std::string &name, double compileSeconds,
                 std::vector<float> &times, bool perGroup) {
    float ms = median(times);
    double tflops = tflopsOf(ms);
    outs() << format("%-62s %9.3f %9.4f %9.4f %9.1f %10s %10s %11s\n",
                     name.c_str(), compileSeconds, ms, times.front(), tflops,
                     ratio(tflops, ltFp8Tflops).c_str(),
                     ratio(tflops, ltFastTflops).c_str(),
                     perGroup ? ratio(tflops, ltBlockTflops).c_str() : "");
  };
  for (const std::unique_ptr<Prepared> &prep : prepared) {
    const Params &p = prep->params;
    row(prep->name + " " + accuracyClass(p.f16Mma, plan(p).promoteK),
        prep->compileSeconds, prep->times,
        p.scaleA == kPerGroup && p.scaleB == kPerGroup);
  }
  for (const std::unique_ptr<PreparedApi> &prep : preparedApi)
    row(prep->name, prep->compileSeconds, prep->times, false);
  return 0;
}
