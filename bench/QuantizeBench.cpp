//===- QuantizeBench.cpp - GPU quantizer bandwidth and JIT overheads ------===//
//
// Effective bandwidth of every quantizer on LLaMA-7B sizes, against a
// device-to-device copy measured in the same process, plus the JIT costs:
// compile (cold, or a disk hit when the cache directory is warm) and host
// overhead per launch of a cached kernel.
//
//   moss-bench-quantize [--repeat N] [--first-calls-only] [--only TEXT]...
//
// With --first-calls-only it times only each kernel's first call (generate,
// then compile or load from the disk cache, then launch): run it in a fresh
// process against a warm $MOSS_CACHE_DIR to time disk hits.
//
// Effective bandwidth counts the fewest bytes: the input read once and every
// output written once (both layouts' for a dual-layout quantize, "both").
// Times are medians of CUDA-event timings.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Cuda/EventTimer.h"

#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace llvm;
using namespace moss::compiler;

namespace {

const DriverApi *api = nullptr;
int repeat = 30;
bool firstCallsOnly = false;

[[noreturn]] void die(Error error) {
  errs() << "moss-bench-quantize: " << toString(std::move(error)) << "\n";
  std::exit(1);
}

void check(CUresult result, const char *what) {
  if (result != CUDA_SUCCESS)
    die(makeCudaError(result, what));
}

CUdeviceptr alloc(size_t bytes) {
  CUdeviceptr p = 0;
  check(api->memAlloc(&p, std::max<size_t>(bytes, 16)), "cuMemAlloc");
  return p;
}

/// Median milliseconds of `body` over `repeat` event-timed runs, after two
/// warm-up runs.
double medianMs(llvm::function_ref<void()> body) {
  Expected<std::vector<float>> times = moss::runtime::timeWithEvents(
      [&] {
        body();
        return Error::success();
      },
      /*warmup=*/2, repeat, nullptr);
  if (!times)
    die(times.takeError());
  return (*times)[times->size() / 2];
}

/// Fills a buffer with heavy-ish random data (never zeros: they can run
/// faster than real data), tiling a 4M-element random chunk.
void fillRandom(CUdeviceptr p, size_t elements, InputType input) {
  constexpr size_t kChunk = size_t(1) << 22;
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t elementBytes = input == InputType::F32 ? 4 : 2;
  std::vector<char> chunk(kChunk * elementBytes);
  for (size_t i = 0; i < kChunk; ++i) {
    float f = normal(rng) * (1 + (rng() % 64 == 0) * 100.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (input == InputType::F32)
      std::memcpy(&chunk[i * 4], &bits, 4);
    else {
      uint16_t h = uint16_t(bits >> 16);
      std::memcpy(&chunk[i * 2], &h, 2);
    }
  }
  for (size_t done = 0; done < elements; done += kChunk) {
    size_t n = std::min(kChunk, elements - done);
    check(api->memcpyHtoD(p + done * elementBytes, chunk.data(),
                          n * elementBytes),
          "cuMemcpyHtoD");
  }
}

struct Case {
  const char *name;
  int64_t rows, cols;
  InputType input;
  ScalingScheme scheme;
  bool transpose = false;
  bool autoScaled = false;
  /// Fold the E8M0 factors as the codes are written (GEMM-ready).
  BlockScaleFold fold = BlockScaleFold::None;
  /// Both layouts from one read (GpuQuantizer::quantizeBothLayouts).
  bool both = false;
  /// Auto-scaled casts of this many experts' weights, one array of each
  /// (GpuQuantizer::castWithScales, one launch), also timed one launch per
  /// expert.
  int64_t experts = 1;
  /// The fused optimizer step: an AdamW update of the FP32 weights, then
  /// their cast with the given scale, in one read (QuantizeSpec::adamw);
  /// the cast alone is timed beside it.
  bool adamw = false;
};

const char *inputName(InputType input) {
  return input == InputType::F32 ? "f32" : "bf16";
}

} // namespace

namespace {
cl::opt<int> repeatOpt("repeat", cl::desc("Launches timed per case (>= 3)"),
                       cl::init(0));
cl::opt<bool> firstCallsOnlyOpt(
    "first-calls-only",
    cl::desc("Only the first calls (compile or cache load) of each case"));
cl::opt<bool> anyKOpt(
    "any-k",
    cl::desc("Also time each row-wise case on its any-K kernel (K read at "
             "run time, QuantizeSpec::anyK), in the same process, with its "
             "speed relative to the K-specialized kernel's"));
cl::list<std::string>
    onlyOpt("only",
            cl::desc("Only the cases whose \"scheme in shape\" line contains "
                     "this text, e.g. --only 'moss row bf16 16384x4096'"));
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(
      argc, argv, "moss-bench-quantize: the GPU quantizers against a copy\n");
  if (repeatOpt.getNumOccurrences())
    repeat = std::max(3, int(repeatOpt));
  firstCallsOnly = firstCallsOnlyOpt;

  Expected<Device> device = Device::open(0);
  if (!device)
    die(device.takeError());
  if (Error error = device->makeCurrent())
    die(std::move(error));
  api = &*getDriverApi();
  KernelCache cache; // $MOSS_CACHE_DIR decides cold or disk-warm compiles
  GpuQuantizer quantizer(cache, device->getSmCount());
  outs() << "device: " << device->getName() << " (" << device->getArch()
         << ", " << device->getSmCount() << " SMs), cache "
         << cache.getDirectory() << "\n\n";

  // The copy baseline: read + write of 1 GiB.
  const size_t copyBytes = size_t(1) << 30;
  CUdeviceptr copySrc = alloc(copyBytes), copyDst = alloc(copyBytes);
  check(api->memsetD8(copySrc, 1, copyBytes), "cuMemsetD8");
  double copyMs = medianMs([&] {
    check(api->memcpyDtoDAsync(copyDst, copySrc, copyBytes, nullptr),
          "cuMemcpyDtoDAsync");
  });
  double copyGBs = 2.0 * copyBytes / (copyMs * 1e-3) / 1e9;
  api->memFree(copySrc);
  api->memFree(copyDst);
  outs() << format("device copy: %.0f GB/s (read + write)\n\n", copyGBs);

  const ScalingScheme tensor = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  const ScalingScheme row = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  std::vector<Case> cases;
  for (int64_t cols : {4096, 11008}) {
    cases.push_back({"moss row", 16384, cols, InputType::BF16, row});
    cases.push_back({"moss tensor", 16384, cols, InputType::BF16, tensor});
    cases.push_back({"moss tensor T", 16384, cols, InputType::BF16, tensor, true});
    cases.push_back({"moss row T", 16384, cols, InputType::BF16, row, true});
    // What moss_jit.nn.Linear's wgrad quantizes.
    cases.push_back({"moss row T, fold row", 16384, cols, InputType::BF16, row,
                     true, false, BlockScaleFold::Row});
    cases.push_back({"mxfp8 T", 16384, cols, InputType::BF16,
                     ScalingScheme::mxfp8(), true});
    cases.push_back({"moss row, fold row", 16384, cols, InputType::BF16, row,
                     false, false, BlockScaleFold::Row});
    cases.push_back({"moss tensor, fold row", 16384, cols, InputType::BF16,
                     tensor, false, false, BlockScaleFold::Row});
    cases.push_back({"moss tensor, fold 128", 16384, cols, InputType::BF16,
                     tensor, false, false, BlockScaleFold::K128});
    cases.push_back({"per-group 1x128", 16384, cols, InputType::BF16,
                     ScalingScheme::perGroup(1, 128)});
    cases.push_back({"mxfp8", 16384, cols, InputType::BF16,
                     ScalingScheme::mxfp8()});
    cases.push_back({"per-row", 16384, cols, InputType::BF16,
                     ScalingScheme::perRow()});
    // Forward and weight-gradient operands of one activation, one read.
    cases.push_back({"moss row both", 16384, cols, InputType::BF16, row, false,
                     false, BlockScaleFold::None, true});
    cases.push_back({"moss tensor both", 16384, cols, InputType::BF16, tensor,
                     false, false, BlockScaleFold::None, true});
    cases.push_back({"moss row both, fold row", 16384, cols, InputType::BF16,
                     row, false, false, BlockScaleFold::Row, true});
    cases.push_back({"mxfp8 both", 16384, cols, InputType::BF16,
                     ScalingScheme::mxfp8(), false, false, BlockScaleFold::None,
                     true});
  }
  // A LLaMA ~1B step's activations: the normalized residual stream in FP32
  // (the query, key and value projections' input) and BF16.
  for (InputType input : {InputType::F32, InputType::BF16}) {
    cases.push_back({"moss row, fold row", 16384, 2048, input, row, false,
                     false, BlockScaleFold::Row});
    cases.push_back({"moss row T, fold row", 16384, 2048, input, row, true,
                     false, BlockScaleFold::Row});
    cases.push_back({"moss row both, fold row", 16384, 2048, input, row, false,
                     false, BlockScaleFold::Row, true});
  }
  // Rows longer than a CTA holds, cut into segments: a row's global or fold
  // reference then takes a reduce pass.
  cases.push_back({"moss row", 2048, 65536, InputType::BF16, row});
  cases.push_back({"moss row, fold row", 2048, 65536, InputType::BF16, row,
                   false, false, BlockScaleFold::Row});
  cases.push_back({"per-group 1x128", 2048, 65536, InputType::BF16,
                   ScalingScheme::perGroup(1, 128)});
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{11008, 16384},
                            {4096, 4096}, {11008, 4096}}) {
    cases.push_back({"per-tensor JIT", rows, cols, InputType::F32,
                     ScalingScheme::perTensor()});
    cases.push_back({"per-tensor auto", rows, cols, InputType::F32,
                     ScalingScheme::perTensor(), false, true});
    cases.push_back({"per-group 128x128", rows, cols, InputType::F32,
                     ScalingScheme::perGroup(128, 128)});
    cases.push_back({"per-tensor auto both", rows, cols, InputType::F32,
                     ScalingScheme::perTensor(), false, true,
                     BlockScaleFold::None, true});
  }
  // A mixture of experts' FP32 weights, each cast with its predicted scale
  // in both layouts (GroupedLinear's step): DeepSeek-V3-like and
  // Mixtral-like experts.
  for (auto [experts, rows, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{64, 1536, 4096},
        {8, 14336, 4096}})
    cases.push_back({"experts auto both", rows, cols, InputType::F32,
                     ScalingScheme::perTensor(), false, true,
                     BlockScaleFold::None, true, experts});
  // The same casts fused into the AdamW step, and a dense layer's weights.
  for (auto [experts, rows, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 11008, 4096},
        {64, 1536, 4096},
        {8, 14336, 4096}})
    cases.push_back({"adamw auto both", rows, cols, InputType::F32,
                     ScalingScheme::perTensor(), false, true,
                     BlockScaleFold::None, true, experts, true});

  outs() << format("%-24s %-5s %-14s %9s %9s %8s %10s\n", "scheme", "in",
                   "shape", "first ms", "time us", "GB/s", "of copy");
  for (const Case &c : cases) {
    const std::string shape =
        (c.experts > 1 ? std::to_string(c.experts) + "x" : "") +
        std::to_string(c.rows) + "x" + std::to_string(c.cols) +
        (c.transpose ? "T" : "");
    const std::string line =
        std::string(c.name) + " " + inputName(c.input) + " " + shape;
    if (!onlyOpt.empty() &&
        std::none_of(onlyOpt.begin(), onlyOpt.end(), [&](const std::string &o) {
          return line.find(o) != std::string::npos;
        }))
      continue;
    QuantizeSpec spec;
    spec.rows = c.rows;
    spec.cols = c.cols;
    spec.input = c.input;
    spec.options = {c.scheme, Fp8Format::E4M3, c.transpose, c.fold};
    spec.bothLayouts = c.both;
    spec.adamw = c.adamw;
    // (Every expert's: the experts' arrays hold `elements` each.)
    const size_t elements = size_t(c.rows * c.cols);
    const size_t elementBytes = c.input == InputType::F32 ? 4 : 2;
    const size_t experts = size_t(c.experts);
    size_t inBytes = elements * elementBytes * experts;
    CUdeviceptr x = alloc(inBytes), scale = alloc(4 * experts);
    fillRandom(x, elements * experts, c.input);
    const std::vector<float> predicted(experts, 0.5f);
    check(api->memcpyHtoD(scale, predicted.data(), 4 * experts),
          "cuMemcpyHtoD");
    // One layout's outputs (both layouts: row-major, then transposed).
    size_t outBytes = 0;
    std::vector<CUdeviceptr> allocations = {x, scale};
    auto outputs = [&](const QuantizeSpec &s) {
      QuantizeLayout layout = getQuantizeLayout(s);
      size_t localBytes = size_t(layout.localRows * layout.localCols *
                                 layout.localElementBytes);
      size_t globalBytes = size_t(layout.globalCount) * 4;
      QuantizeBuffers b{x, alloc(elements * experts),
                        localBytes ? alloc(localBytes * experts) : 0,
                        globalBytes ? alloc(globalBytes * experts) : 0, 0};
      allocations.insert(allocations.end(), {b.q, b.local, b.global});
      outBytes += (elements + localBytes + globalBytes) * experts;
      // Expert g's: its part of each array.
      std::vector<QuantizeBuffers> parts(experts, b);
      for (size_t g = 0; g < experts; ++g) {
        parts[g].x += g * elements * elementBytes;
        parts[g].q += g * elements;
        parts[g].global += parts[g].global ? g * globalBytes : 0;
      }
      return parts;
    };
    const std::vector<QuantizeBuffers> rowMajor = outputs(spec);
    const QuantizeBuffers &buffers = rowMajor[0];
    const std::vector<QuantizeBuffers> transposedParts =
        c.both ? outputs(getTransposedSpec(spec))
               : std::vector<QuantizeBuffers>();
    const QuantizeBuffers transposed =
        c.both ? transposedParts[0] : QuantizeBuffers{};
    // A fused AdamW step's gradients and moments (zero), read and written
    // besides the weights, which it writes back.
    std::vector<AdamWBuffers> state;
    if (c.adamw) {
      const size_t stateBytes = elements * 4 * experts;
      CUdeviceptr g = alloc(stateBytes), m = alloc(stateBytes),
                  v = alloc(stateBytes);
      fillRandom(g, elements * experts, InputType::F32);
      check(api->memsetD8(m, 0, stateBytes), "cuMemsetD8");
      check(api->memsetD8(v, 0, stateBytes), "cuMemsetD8");
      allocations.insert(allocations.end(), {g, m, v});
      for (size_t e = 0; e < experts; ++e)
        state.push_back(
            {g + e * elements * 4, m + e * elements * 4, v + e * elements * 4});
      // The gradient and moments read; the weight and moments written.
      inBytes += 3 * stateBytes;
      outBytes += 3 * stateBytes;
    }
    const AdamWUpdate update{cantFail(getAdamWCoefficients(AdamWStep())),
                             state};
    QuantizeSpec timed = spec;
    auto run = [&] {
      Error error =
          c.adamw       ? quantizer.castWithScales(timed, scale, rowMajor,
                                                   transposedParts, nullptr, &update)
          : experts > 1 ? quantizer.castWithScales(timed, scale, rowMajor,
                                                   transposedParts, nullptr)
          : c.both
              ? quantizer.quantizeBothLayouts(timed, buffers, transposed,
                                              nullptr, c.autoScaled ? scale : 0)
          : c.autoScaled
              ? quantizer.castWithScale(timed, scale, buffers, nullptr)
              : quantizer.quantize(timed, buffers, nullptr);
      if (error)
        die(std::move(error));
    };
    // The first call generates, compiles (or loads from disk) and launches.
    auto t0 = std::chrono::steady_clock::now();
    run();
    check(api->streamSynchronize(nullptr), "cuStreamSynchronize");
    double firstMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    double ms = firstCallsOnly ? 0.0 : medianMs(run);
    double bytes = double(inBytes + outBytes);
    double gbs = bytes / (ms * 1e-3) / 1e9;
    if (firstCallsOnly)
      outs() << format("%-24s %-5s %-14s %9.1f\n", c.name, inputName(c.input),
                       shape.c_str(), firstMs);
    else
      outs() << format("%-24s %-5s %-14s %9.1f %9.1f %8.0f %9.1f%%\n", c.name,
                       inputName(c.input), shape.c_str(), firstMs, ms * 1e3,
                       gbs, 100.0 * gbs / copyGBs);
    // A second timing of the case, in a row of its own after `note`.
    auto reportAlso = [&](double otherMs, const std::string &note) {
      const double otherGBs = bytes / (otherMs * 1e-3) / 1e9;
      outs() << format("%-24s %-5s %-14s %9s %9.1f %8.0f %9.1f%%  %s\n", c.name,
                       inputName(c.input), shape.c_str(), "", otherMs * 1e3,
                       otherGBs, 100.0 * otherGBs / copyGBs, note.c_str());
    };
    if (c.adamw && !firstCallsOnly) {
      QuantizeSpec cast = spec;
      cast.adamw = false;
      double castMs = medianMs([&] {
        if (Error error = quantizer.castWithScales(cast, scale, rowMajor,
                                                   transposedParts, nullptr))
          die(std::move(error));
      });
      outs() << format("%-24s %-5s %-14s %9s %9.1f  the cast alone\n", c.name,
                       inputName(c.input), shape.c_str(), "", castMs * 1e3);
    }
    if (experts > 1 && !firstCallsOnly && !c.adamw) {
      double apartMs = medianMs([&] {
        for (size_t g = 0; g < experts; ++g)
          if (Error error = quantizer.quantizeBothLayouts(
                  timed, rowMajor[g], transposedParts[g], nullptr,
                  scale + 4 * g))
            die(std::move(error));
      });
      reportAlso(apartMs, formatv("one launch per expert; one launch is "
                                  "{0:F3}x as fast",
                                  apartMs / ms));
    }
    timed.anyK = true;
    if (anyKOpt && !firstCallsOnly &&
        chooseQuantizerVariant(timed, c.autoScaled).anyK) {
      run(); // (compiles it)
      double anyMs = medianMs(run);
      reportAlso(anyMs, formatv("any K, {0:F3}x the K-specialized kernel's "
                                "speed",
                                ms / anyMs));
    }
    for (CUdeviceptr p : allocations)
      if (p)
        api->memFree(p);
  }

  // Host overhead of a cached launch: many async calls, no synchronization.
  if (!firstCallsOnly) {
    QuantizeSpec spec;
    spec.rows = 16;
    spec.cols = 4096;
    spec.input = InputType::BF16;
    spec.options = {row, Fp8Format::E4M3, false};
    CUdeviceptr x = alloc(16 * 4096 * 2), q = alloc(16 * 4096),
                local = alloc(16 * 128), global = alloc(16 * 4);
    fillRandom(x, 16 * 4096, InputType::BF16);
    QuantizeBuffers buffers{x, q, local, global, 0};
    if (Error error = quantizer.quantize(spec, buffers, nullptr))
      die(std::move(error));
    check(api->streamSynchronize(nullptr), "cuStreamSynchronize");
    const int calls = 2000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      if (Error error = quantizer.quantize(spec, buffers, nullptr))
        die(std::move(error));
    double us = std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - t0)
                    .count() /
                calls;
    check(api->streamSynchronize(nullptr), "cuStreamSynchronize");

    // The baseline: the driver's own launch of an empty kernel, same process.
    Expected<std::shared_ptr<const KernelEntry>> empty = cache.getOrCompile(
        "extern \"C\" __global__ void moss_empty(int) {}", CompileOptions());
    if (!empty)
      die(empty.takeError());
    Expected<CUfunction> function = (*empty)->getFunction("moss_empty");
    if (!function)
      die(function.takeError());
    int arg = 0;
    void *params[] = {&arg};
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      check(api->launchKernel(*function, 1, 1, 1, 32, 1, 1, 0, nullptr,
                              params, nullptr),
            "cuLaunchKernel");
    double rawUs = std::chrono::duration<double, std::micro>(
                       std::chrono::steady_clock::now() - t0)
                       .count() /
                   calls;
    check(api->streamSynchronize(nullptr), "cuStreamSynchronize");
    outs() << format("\nhot launch: %.2f us of host time per quantize() call "
                     "(cached kernel, %d calls); the driver's cuLaunchKernel "
                     "of an empty kernel: %.2f us; our overhead: %.2f us\n",
                     us, calls, rawUs, us - rawUs);
  }
  outs() << "\n";
  cache.formatStats(outs());
  return 0;
}
