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

#include "GemmApiLaunch.h"
#include "GemmKernelParams.h"

#include "CublasLtBaseline.h"
#include "moss/Runtime/Cuda/EventTimer.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Cuda/TensorMaps.h"

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

using namespace moss::gemm_kernel;
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
cl::list<std::string>
    tilingOpt("tiling", cl::desc("An extra tiling to time (repeatable)"),
              cl::value_desc("TMxTNxSTAGES[xSPLITK]"));

/// Whether `name` contains one of `parts` (every name when there are none).
bool isSelected(StringRef name, const cl::list<std::string> &parts) {
  return parts.empty() || llvm::any_of(parts, [&](const std::string &part) {
           return name.contains(part);
         });
}

/// --tiling's values, as {tileM, tileN, stages, splitK}.
std::vector<std::array<int, 4>> parseExtraTilings() {
  std::vector<std::array<int, 4>> tilings;
  for (const std::string &text : tilingOpt) {
    std::array<int, 4> t{0, 0, 0, 1};
    char tail = 0;
    int fields = std::sscanf(text.c_str(), "%dx%dx%dx%d%c", &t[0], &t[1],
                             &t[2], &t[3], &tail);
    if (fields != 3 && fields != 4)
      die("--tiling takes TMxTNxSTAGES[xSPLITK], e.g. 128x192x5 or "
          "128x128x6x4; got " +
          text);
    tilings.push_back(t);
  }
  return tilings;
}

/// The kernels timed straight from the templates: each scheme with the
/// tests' fixed tiling and the heuristic's for this M (what moss::gemm
/// launches without a tuning database: the plan for M's bucket, split-K
/// allowed), each with 1x1 and 2x1 clusters (the heuristic's own choice
/// unsuffixed); then the --tiling, --f16-mma and --quick-compile variants.
std::vector<Variant>
getTemplateVariants(const moss::compiler::TargetInfo &target,
                    const std::vector<std::array<int, 4>> &extraTilings) {
  const int m = mOpt;
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
    p.n = nOpt;
    p.k = kOpt;
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
    if (f16MmaOpt) {
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

  if (quickCompileOpt)
    for (size_t i = 0, count = variants.size(); i < count; ++i) {
      // What GemmRunner compiles first: the variant on narrowed tiles.
      const Params &full = variants[i].params;
      const Params quick = quickCompileParams(full, target);
      if (plan(quick).groupBlocks != plan(full).groupBlocks ||
          quick.tileM != full.tileM || quick.tileN != full.tileN)
        variants.push_back({variants[i].name + "_quick", quick});
    }
  return variants;
}

/// The GEMMs timed through the product path: the folds, and their kernels
/// alone.
std::vector<ApiVariant> getApiVariants() {
  using moss::numerics::BlockScaleFold;
  using moss::numerics::GlobalScope;
  using moss::numerics::ScalingScheme;
  std::vector<ApiVariant> variants;
  auto add = [&](std::string name, ScalingScheme a, ScalingScheme b,
                 std::optional<BlockScaleFold> fold, int promoteK = 0) {
    moss::compiler::GemmSpec spec;
    spec.n = nOpt;
    spec.k = kOpt;
    spec.aScaling = a;
    spec.bScaling = b;
    spec.fold = fold;
    spec.promoteK = promoteK;
    variants.push_back({name + "_api", spec});
    // Where a kernel can fold A itself, that kernel on the same GEMM.
    if (spec.canFoldAInKernel(mOpt))
      variants.push_back({name + "_kernelfold_api", spec, true});
  };
  const ScalingScheme mossRow = ScalingScheme::twoLevel(GlobalScope::Row);
  const ScalingScheme mossTensor = ScalingScheme::twoLevel(GlobalScope::Tensor);
  const ScalingScheme tensor = ScalingScheme::perTensor();
  add("tensor_x_tensor", tensor, tensor, std::nullopt);
  add("tensor_x_tensor_promote128", tensor, tensor, std::nullopt, 128);
  add("row_x_tensor", ScalingScheme::perRow(), tensor, std::nullopt);
  add("group1x128_x_tensor", ScalingScheme::perGroup(1, 128), tensor,
      std::nullopt);
  for (auto [scope, a] : {std::pair{"moss_rowglobal", mossRow},
                          std::pair{"moss_tensorglobal", mossTensor}}) {
    add(std::string(scope) + "_x_tensor_fold_none", a, tensor,
        BlockScaleFold::None);
    add(std::string(scope) + "_x_tensor_fold_row", a, tensor,
        BlockScaleFold::Row);
    add(std::string(scope) + "_x_tensor_fold_row_promote128", a, tensor,
        BlockScaleFold::Row, 128);
    add(std::string(scope) + "_x_tensor_fold_128", a, tensor,
        BlockScaleFold::K128);
  }
  add("twolevel_x_twolevel_fold_row", mossRow, mossRow, BlockScaleFold::Row);
  add("twolevel_x_twolevel_fold_128", mossRow, mossRow, BlockScaleFold::K128);
  add("row_x_row", ScalingScheme::perRow(), ScalingScheme::perRow(),
      std::nullopt);
  add("mxfp8_x_mxfp8_fold_row", ScalingScheme::mxfp8(), ScalingScheme::mxfp8(),
      BlockScaleFold::Row);
  add("mxfp8_x_mxfp8_fold_128", ScalingScheme::mxfp8(), ScalingScheme::mxfp8(),
      BlockScaleFold::K128);
  return variants;
}

/// The operands every kernel reads, on the device: random codes, E8M0
/// factors in [117, 127], FP32 block scales near 1, globals 1, and the bf16
/// output.
struct Operands {
  CUdeviceptr a = 0, b = 0, e8A = 0, e8B = 0, f32A = 0, f32B = 0, globalA = 0,
              globalB = 0, out = 0;
};

Operands uploadOperands() {
  const size_t m = size_t(mOpt), n = size_t(nOpt), k = size_t(kOpt);
  std::mt19937_64 rng(42);
  Operands o;
  std::vector<uint8_t> a = randomCodes(m * k, rng);
  std::vector<uint8_t> b = randomCodes(n * k, rng);
  o.a = upload(a.data(), a.size());
  o.b = upload(b.data(), b.size());
  std::vector<uint8_t> e8A(m * (k / 32)), e8B(n * (k / 32));
  for (uint8_t &e : e8A)
    e = static_cast<uint8_t>(117 + rng() % 11);
  for (uint8_t &e : e8B)
    e = static_cast<uint8_t>(117 + rng() % 11);
  std::vector<float> f32A(m * (k / 128), 0.01f),
      f32B((n + 127) / 128 * (k / 128), 0.02f), globalA(m, 1.0f),
      globalB(n, 1.0f);
  o.e8A = upload(e8A.data(), e8A.size());
  o.e8B = upload(e8B.data(), e8B.size());
  o.f32A = upload(f32A.data(), f32A.size() * 4);
  o.f32B = upload(f32B.data(), f32B.size() * 4);
  o.globalA = upload(globalA.data(), globalA.size() * 4);
  o.globalB = upload(globalB.data(), globalB.size() * 4);
  check(api->memAlloc(&o.out, m * n * 2), "cuMemAlloc");
  return o;
}

/// A baseline or a kernel: how to launch it once, and its times.
struct Timed {
  std::string name;
  std::function<Error()> launch;
  std::vector<float> times;
  double compileSeconds = 0;
  /// Kernel rows: per-group x per-group (compared with cuBLASLt's
  /// block-scaled baseline too).
  bool perGroup = false;
};

/// The cuBLASLt baselines kept by --baseline, on the same problem and
/// stream. A baseline cuBLASLt rejects prints why.
std::vector<Timed> prepareBaselines(CUstream stream) {
  std::vector<Timed> baselines;
  if (noCublasLt) {
    outs() << "(cuBLASLt baselines skipped: --no-cublaslt)\n";
    return baselines;
  }
  moss::bench::CublasLtProblem problem;
  problem.m = mOpt;
  problem.n = nOpt;
  problem.k = kOpt;
  problem.stream = stream;
  // Prepared only when kept: preparing uploads the baseline's operands.
  auto add = [&](const char *name, auto prepare) {
    if (!isSelected(name, baselineOpt))
      return;
    Expected<std::unique_ptr<moss::bench::CublasLtGemm>> gemm =
        prepare(problem);
    if (!gemm) {
      outs() << format("%-46s ", name)
             << "unsupported: " << toString(gemm.takeError()) << "\n";
      return;
    }
    std::shared_ptr<moss::bench::CublasLtGemm> owned = std::move(*gemm);
    baselines.push_back({name, [owned] { return owned->run(); }});
  };
  add("cublaslt_bf16", moss::bench::prepareCublasLtBf16);
  add("cublaslt_fp8_tensor_x_tensor", moss::bench::prepareCublasLtFp8PerTensor);
  add("cublaslt_fp8_tensor_x_tensor_fastaccum",
      moss::bench::prepareCublasLtFp8PerTensorFastAccum);
  add("cublaslt_fp8_block1x128_x_128x128",
      moss::bench::prepareCublasLtFp8BlockScaled);
  return baselines;
}

/// A template kernel's launch: its function, maps and arguments.
struct TemplateLaunch {
  CUfunction function = nullptr;
  LaunchConfig launch;
  CUtensorMap mapA, mapB, mapD;
  Args args{};
  void *kernelParams[4];
};

/// Compiles `v` straight from the templates and sets up its launch; none
/// when the templates do not take its parameters (printed).
std::optional<Timed> prepareTemplateKernel(const Variant &v, const Operands &o,
                                           const Device &device,
                                           CUstream stream) {
  const int m = mOpt, n = nOpt, k = kOpt;
  const Params &p = v.params;
  if (const char *error = validate(p)) {
    outs() << v.name << ": " << error << "\n";
    return std::nullopt;
  }
  Timed timed;
  timed.name = v.name + " " + std::to_string(p.tileM) + "x" +
               std::to_string(p.tileN) + "x" + std::to_string(p.stages) +
               (p.splitK > 1 ? " s" + std::to_string(p.splitK) : "") + " " +
               accuracyClass(p.f16Mma, plan(p).promoteK);
  timed.perGroup = p.scaleA == kPerGroup && p.scaleB == kPerGroup;
  const Plan q = plan(p);
  CompileOptions options;
  options.arch = device.getArch().str();
  options.flags.assign(nvrtcFlagOpt.begin(), nvrtcFlagOpt.end());
  auto t0 = std::chrono::steady_clock::now();
  const moss::compiler::GemmTranslationUnit unit =
      moss::compiler::generateGemmTranslationUnit(p);
  Expected<std::shared_ptr<const KernelEntry>> entry =
      getDefaultKernelCache().getOrCompile(unit.source, options);
  if (!entry)
    die(toString(entry.takeError()));
  Expected<CUfunction> function = (*entry)->getFunction(unit.kernelName);
  if (!function)
    die(toString(function.takeError()));
  timed.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();

  auto l = std::make_shared<TemplateLaunch>();
  l->function = *function;
  l->mapA = operandMap(o.a, m, k, boxRowsA(p, m), "A");
  l->mapB = operandMap(o.b, n, k, q.boxB[1], "B");
  std::memset(&l->mapD, 0, sizeof(l->mapD));
  if (q.usesTmaD)
    check(moss::runtime::encodeOutputMap(*api, l->mapD, o.out, m, n,
                                         unsigned(elementBytes(p.out)),
                                         q.boxD[0], q.boxD[1]));
  Args &args = l->args;
  args.m = m;
  auto ptr = [](CUdeviceptr d) { return reinterpret_cast<void *>(d); };
  args.d = ptr(o.out);
  args.aLocal = p.scaleA == kTwoLevel   ? ptr(o.e8A)
                : p.scaleA == kPerGroup ? ptr(o.f32A)
                                        : nullptr;
  args.bLocal = p.scaleB == kTwoLevel   ? ptr(o.e8B)
                : p.scaleB == kPerGroup ? ptr(o.f32B)
                                        : nullptr;
  args.aGlobal = static_cast<const float *>(ptr(o.globalA));
  args.bGlobal = static_cast<const float *>(ptr(o.globalB));
  if (long long bytes = workspaceBytes(p, m)) {
    CUdeviceptr workspace = 0;
    check(api->memAlloc(&workspace, size_t(bytes)), "cuMemAlloc");
    // The counters must start at zero; each launch leaves them so.
    check(api->memsetD8(workspace, 0, size_t(workspaceCounterBytes(p, m))),
          "cuMemsetD8");
    args.workspace = ptr(workspace);
  }
  l->kernelParams[0] = &l->mapA;
  l->kernelParams[1] = &l->mapB;
  l->kernelParams[2] = &l->mapD;
  l->kernelParams[3] = &l->args;
  LaunchConfig &launch = l->launch;
  launch.block[0] = static_cast<unsigned>(q.threads);
  launch.cluster[0] = static_cast<unsigned>(q.clusterSize);
  launch.sharedMemoryBytes = static_cast<unsigned>(q.sharedBytes);
  launch.stream = stream;
  // A persistent grid of clusters is limited by how many fit at once.
  Expected<int> slots =
      getPersistentSlots(l->function, launch, device.getSmCount());
  if (!slots)
    die(timed.name + ": " + toString(slots.takeError()));
  launch.grid[0] = static_cast<unsigned>(gridSize(p, m, *slots));
  timed.launch = [l] {
    return launchKernel(l->function, l->launch, l->kernelParams);
  };
  return timed;
}

/// Prepares `v` through the product path on the operands `o`; none when
/// the runtime refuses it (printed).
std::optional<Timed> prepareApiKernel(const ApiVariant &v, const Operands &o,
                                      CUstream stream) {
  const int m = mOpt;
  auto operand = [&](const moss::numerics::ScalingScheme &scheme,
                     CUdeviceptr e8m0, CUdeviceptr f32, CUdeviceptr global,
                     CUdeviceptr &local, CUdeviceptr &globalOut) {
    local = !scheme.hasLocalScales()      ? 0
            : scheme.localScalesAreE8M0() ? e8m0
                                          : f32;
    globalOut = scheme.hasGlobalScales() ? global : 0;
  };
  ApiBuffers b;
  b.aCodes = o.a;
  b.bCodes = o.b;
  operand(v.spec.aScaling, o.e8A, o.f32A, o.globalA, b.aLocal, b.aGlobal);
  operand(v.spec.bScaling, o.e8B, o.f32B, o.globalB, b.bLocal, b.bGlobal);
  const moss::GemmScaleCounts counts = moss::getGemmScaleCounts(v.spec, m);
  b.aLocalCount = counts.aLocal;
  b.aGlobalCount = counts.aGlobal;
  b.bLocalCount = counts.bLocal;
  b.bGlobalCount = counts.bGlobal;
  b.d = o.out;
  std::string description;
  moss::compiler::TileConfig planned;
  auto t0 = std::chrono::steady_clock::now();
  if (Error e = prepareThroughApi(v.spec, m, std::nullopt, false, description,
                                  planned, v.foldAInKernel)) {
    outs() << v.name << ": " << toString(std::move(e)) << "\n";
    return std::nullopt;
  }
  Timed timed;
  timed.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const moss::compiler::GemmSpec kernelSpec = v.spec.getKernelSpec(m);
  timed.name =
      v.name + " " + planned.str() + " " +
      accuracyClass(false, int(moss::compiler::getPromoteK(kernelSpec)));
  timed.launch = [v, b, m, stream] {
    return runThroughApi(v.spec, m, std::nullopt, false, b, stream,
                         v.foldAInKernel);
  };
  return timed;
}

/// Times `items`: with --sustained each alone for that long, in two passes
/// (the second in reverse order); else round-robin, up to 5 rounds of
/// --repeat / rounds launches each, so that clock drift spreads over all.
void timeAll(const std::vector<Timed *> &items, CUstream stream) {
  const int repeat = repeatOpt, sustainedMs = sustainedOpt;
  auto time = [&](Timed &item, int warmup, int count) {
    Expected<std::vector<float>> timed =
        moss::runtime::timeWithEvents(item.launch, warmup, count, stream);
    if (!timed)
      die(item.name + ": " + toString(timed.takeError()));
    return std::move(*timed);
  };
  if (sustainedMs > 0) {
    auto timeAlone = [&](Timed &item) {
      // The launch count from a short probe.
      std::vector<float> probe = time(item, 3, 10);
      const float ms = std::max(probe[probe.size() / 2], 1e-3f);
      const int count = std::max(10, static_cast<int>(sustainedMs / ms));
      std::vector<float> timed = time(item, count / 4, count);
      item.times.insert(item.times.end(), timed.begin(), timed.end());
    };
    for (Timed *item : items)
      timeAlone(*item);
    for (auto it = items.rbegin(); it != items.rend(); ++it)
      timeAlone(**it);
    return;
  }
  const int rounds = std::min(repeat, 5);
  for (int round = 0; round < rounds; ++round)
    for (Timed *item : items) {
      int count = repeat / rounds + (round < repeat % rounds ? 1 : 0);
      std::vector<float> timed =
          time(*item, /*warmup=*/round == 0 ? 3 : 1, count);
      item->times.insert(item->times.end(), timed.begin(), timed.end());
    }
}

/// The baselines' rows, then the kernels' with their ratios: vs_lt_fp8
/// over cuBLASLt FP8 per-tensor in its default (promoting) mode,
/// vs_lt_fast over its fast-accumulation mode (the class of our unpromoted
/// kernels), vs_lt_block over its block-scaled GEMM (per-group rows).
void printResults(std::vector<Timed> &baselines, std::vector<Timed> &kernels) {
  auto tflopsOf = [](double ms) {
    return 2.0 * mOpt * double(nOpt) * kOpt / (ms * 1e-3) / 1e12;
  };
  auto median = [](std::vector<float> &times) {
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  auto ratio = [](double tflops, double base) -> std::string {
    if (base <= 0)
      return "-";
    return formatv("{0:F2}x", tflops / base).str();
  };
  // 0 when a baseline is unsupported or skipped (its column shows "-").
  double ltFp8Tflops = 0, ltFastTflops = 0, ltBlockTflops = 0;
  outs() << format("%-46s %9s %9s %9s %9s\n", "baseline", "", "median_ms",
                   "best_ms", "TFLOPS");
  for (Timed &b : baselines) {
    float ms = median(b.times);
    double tflops = tflopsOf(ms);
    if (b.name == "cublaslt_fp8_tensor_x_tensor")
      ltFp8Tflops = tflops;
    if (b.name == "cublaslt_fp8_tensor_x_tensor_fastaccum")
      ltFastTflops = tflops;
    if (b.name == "cublaslt_fp8_block1x128_x_128x128")
      ltBlockTflops = tflops;
    outs() << format("%-46s %9s %9.4f %9.4f %9.1f\n", b.name.c_str(), "", ms,
                     b.times.front(), tflops);
  }
  outs() << format("%-62s %9s %9s %9s %9s %10s %10s %11s\n",
                   "kernel tile accuracy", "compile_s", "median_ms", "best_ms",
                   "TFLOPS", "vs_lt_fp8", "vs_lt_fast", "vs_lt_block");
  for (Timed &kernel : kernels) {
    float ms = median(kernel.times);
    double tflops = tflopsOf(ms);
    outs() << format(
        "%-62s %9.3f %9.4f %9.4f %9.1f %10s %10s %11s\n", kernel.name.c_str(),
        kernel.compileSeconds, ms, kernel.times.front(), tflops,
        ratio(tflops, ltFp8Tflops).c_str(), ratio(tflops, ltFastTflops).c_str(),
        kernel.perGroup ? ratio(tflops, ltBlockTflops).c_str() : "");
  }
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(
      argc, argv,
      "moss-bench-gemm: the GEMM kernels against cuBLASLt, in one process\n");
  if (mOpt < 1 || nOpt < 1 || kOpt < 1)
    die("--m, --n and --k must be positive");
  if (repeatOpt < 1)
    die("--repeat must be at least 1");
  if (sustainedOpt < 0)
    die("--sustained takes a positive number of milliseconds");
  const std::vector<std::array<int, 4>> extraTilings = parseExtraTilings();
  Expected<Device> device = Device::open(0);
  if (!device)
    die(toString(device.takeError()));
  if (Error err = device->makeCurrent())
    die(toString(std::move(err)));
  api = &cantFail(getDriverApi());
  outs() << "device " << device->getName() << ", " << device->getArch() << ", "
         << device->getSmCount() << " SMs; m=" << mOpt << " n=" << nOpt
         << " k=" << kOpt << ", out bf16\n";
  moss::compiler::TargetInfo target;
  target.smCount = unsigned(device->getSmCount());
  target.sharedMemoryPerBlock =
      unsigned(device->getMaxSharedMemoryPerBlockOptin());
  target.arch = device->getArch().str();

  const Operands operands = uploadOperands();
  CUstream stream;
  check(api->streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<Timed> baselines = prepareBaselines(stream);
  // Every kernel is compiled and set up first, then all are timed.
  std::vector<Timed> kernels;
  for (const Variant &v : getTemplateVariants(target, extraTilings))
    if (isSelected(v.name, onlyOpt))
      if (std::optional<Timed> kernel =
              prepareTemplateKernel(v, operands, *device, stream))
        kernels.push_back(std::move(*kernel));
  for (const ApiVariant &v : getApiVariants())
    if (isSelected(v.name, onlyOpt))
      if (std::optional<Timed> kernel = prepareApiKernel(v, operands, stream))
        kernels.push_back(std::move(*kernel));

  errs() << "timing " << baselines.size() << " baselines and " << kernels.size()
         << " kernels " << (sustainedOpt > 0 ? "one at a time" : "round-robin")
         << "...\n";
  std::vector<Timed *> items;
  for (Timed &b : baselines)
    items.push_back(&b);
  for (Timed &kernel : kernels)
    items.push_back(&kernel);
  timeAll(items, stream);
  printResults(baselines, kernels);
  return 0;
}
