//===- GroupedGemmBench.cpp - m-grouped GEMMs against the dense kernel ----===//
//
// moss-bench-grouped: the m-grouped GEMM (GemmSpec::groups) of
// mixture-of-experts layers, timed against our dense GEMM of the same total
// rows, N and K in the same process (issue target: at least 0.95x its
// speed). Shapes: DeepSeek-V3's experts (N=4096, K=7168; N=7168, K=2048)
// and Mixtral's (N=14336, K=4096; N=4096, K=14336); 8 to 256 experts;
// uniform routing (each expert within 20% of the mean) and skewed (one
// expert half the tokens); 4096 to 65536 tokens. Schemes: MOSS (A
// two-level with row globals, folded by rows; B per-tensor per expert) and
// per-tensor x per-tensor.
//
// A second table times the masked layout (GemmSpec::maskedGroups) as a
// decoding step runs it: 64 experts of 64 rows each, 1 to 64 of them used,
// against a loop of one dense GEMM per expert over its used rows (issue
// target: at least 2x the loop's speed).
//
// A third times the k-grouped weight gradient (GemmSpec::groupedK): dW_g
// [M, N] = dY_g^T X_g over each expert's tokens (multiples of 128), against
// the dense GEMM of all tokens (M x N x T, the same work), both with the
// same schemes: per-row x per-row (what GroupedLinear's quantizers give,
// folded by rows) and MOSS x MOSS unfolded (issue target: at least 0.9x).
//
//   moss-bench-grouped [--repeat N] [--quick]
//
// Prints one row per case: milliseconds of each, TFLOPS, and the ratio.
// Operands are random FP8 (the dense problem's A and B, B copied to every
// expert); the timings do not depend on the values.
//
//===----------------------------------------------------------------------===//

#include "GemmProblem.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/EventTimer.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace llvm;
using namespace moss;

namespace {

cl::opt<int> repeat("repeat", cl::desc("Timed launches per case (median)"),
                    cl::init(20));
cl::opt<bool> quick("quick",
                    cl::desc("One shape, 8 and 64 experts, 16384 tokens"));

[[noreturn]] void die(const Twine &what) {
  errs() << "moss-bench-grouped: error: " << what << "\n";
  std::exit(1);
}

template <typename T> T orDie(Expected<T> value, const Twine &what) {
  if (!value)
    die(what + ": " + toString(value.takeError()));
  return std::move(*value);
}

void checkOk(Error error, const Twine &what) {
  if (error)
    die(what + ": " + toString(std::move(error)));
}

/// A device allocation freed at exit of its scope.
struct Device {
  CUdeviceptr pointer = 0;
  explicit Device(size_t bytes) {
    checkOk(runtime::checkCuda(runtime::getDriverApi()->memAlloc(
                                   &pointer, std::max<size_t>(bytes, 16)),
                               "cuMemAlloc"),
            "allocating");
  }
  ~Device() { runtime::getDriverApi()->memFree(pointer); }
  Device(const Device &) = delete;
};

/// Rows per expert: uniform (each within 20% of the mean) or skewed (one
/// expert half of them, the rest uniform), summing to `tokens`.
std::vector<int32_t> route(int64_t tokens, int groups, bool skewed,
                           std::mt19937 &rng) {
  std::vector<double> weight(groups);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  for (double &w : weight)
    w = jitter(rng);
  if (skewed) {
    double rest = 0;
    for (int g = 1; g < groups; ++g)
      rest += weight[g];
    weight[0] = rest; // half of all
  }
  double sum = 0;
  for (double w : weight)
    sum += w;
  std::vector<int32_t> offsets(groups + 1, 0);
  for (int g = 0; g < groups; ++g)
    offsets[g + 1] =
        g + 1 == groups
            ? int32_t(tokens)
            : std::min<int32_t>(int32_t(tokens),
                                offsets[g] + int32_t(tokens * weight[g] / sum));
  return offsets;
}

struct Shape {
  const char *name;
  int64_t n, k;
};

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv,
                              "m-grouped GEMMs against the dense kernel\n");
  Expected<runtime::Device> device = runtime::Device::open(0);
  if (!device)
    die("no GPU: " + toString(device.takeError()));
  checkOk(device->makeCurrent(), "making the device current");
  const runtime::DriverApi &api = *runtime::getDriverApi();

  std::vector<Shape> shapes = {{"deepseek-v3 up", 4096, 7168},
                               {"deepseek-v3 down", 7168, 2048},
                               {"mixtral up", 14336, 4096},
                               {"mixtral down", 4096, 14336}};
  std::vector<int> groupCounts = {8, 64, 256};
  std::vector<int64_t> tokenCounts = {4096, 16384, 65536};
  if (quick) {
    shapes.resize(1);
    groupCounts = {8, 64};
    tokenCounts = {16384};
  }
  const numerics::ScalingScheme moss =
      numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32);
  struct Schemes {
    const char *name;
    numerics::ScalingScheme a, b;
  };
  const Schemes schemes[] = {
      {"moss", moss, numerics::ScalingScheme::perTensor()},
      {"tensor", numerics::ScalingScheme::perTensor(),
       numerics::ScalingScheme::perTensor()}};

  std::printf("# %s, %d SMs; median of %d launches; dense = our GEMM of the "
              "same total rows\n",
              device->getName().str().c_str(), device->getSmCount(), int(repeat));
  std::printf("| shape | scheme | experts | routing | tokens | dense ms | "
              "grouped ms | dense TFLOPS | grouped TFLOPS | grouped/dense |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(7);
  for (const Shape &shape : shapes)
    for (const Schemes &s : schemes)
      for (int64_t tokens : tokenCounts) {
        compiler::GemmSpec dense;
        dense.n = shape.n;
        dense.k = shape.k;
        dense.aScaling = s.a;
        dense.bScaling = s.b;
        std::vector<float> a = numerics::llmActivationSample(tokens, shape.k, 1);
        std::vector<float> b = numerics::gaussianSample(shape.n, shape.k, 2);
        std::unique_ptr<jit::GemmProblem> problem = orDie(
            jit::GemmProblem::create(dense, tokens, a, b, 3), "operands");
        Expected<std::vector<float>> denseTimes = runtime::timeWithEvents(
            [&] { return moss::gemm(dense, tokens, problem->buffers, nullptr); },
            3, repeat, nullptr);
        const float denseMs = orDie(std::move(denseTimes), "dense")[repeat / 2];
        const double flops = 2.0 * double(tokens) * shape.n * shape.k;

        for (int groups : groupCounts)
          for (bool skewed : {false, true}) {
            compiler::GemmSpec spec = dense;
            spec.groups = groups;
            const size_t bBytes = size_t(shape.n * shape.k);
            Device bCodes(bBytes * groups), bGlobal(4 * groups),
                offsets(4 * (groups + 1)),
                d(size_t(tokens * shape.n) * 2);
            for (int g = 0; g < groups; ++g) {
              checkOk(runtime::checkCuda(
                          api.memcpyDtoD(bCodes.pointer + g * bBytes,
                                         problem->buffers.b.codes, bBytes),
                          "cuMemcpyDtoD"),
                      "B");
              checkOk(runtime::checkCuda(
                          api.memcpyDtoD(bGlobal.pointer + 4 * g,
                                         problem->buffers.b.globalScales, 4),
                          "cuMemcpyDtoD"),
                      "B's global");
            }
            std::vector<int32_t> rows = route(tokens, groups, skewed, rng);
            checkOk(runtime::checkCuda(api.memcpyHtoD(offsets.pointer,
                                                      rows.data(),
                                                      4 * rows.size()),
                                       "cuMemcpyHtoD"),
                    "offsets");
            GemmBuffers buffers = problem->buffers;
            buffers.b.codes = bCodes.pointer;
            buffers.b.globalScales = bGlobal.pointer;
            buffers.b.globalScaleCount = groups;
            buffers.d = d.pointer;
            buffers.groupOffsets = offsets.pointer;
            Expected<std::vector<float>> times = runtime::timeWithEvents(
                [&] { return moss::gemm(spec, tokens, buffers, nullptr); }, 3,
                repeat, nullptr);
            const float ms = orDie(std::move(times), "grouped")[repeat / 2];
            std::printf("| %s (N=%lld, K=%lld) | %s | %d | %s | %lld | %.3f | "
                        "%.3f | %.0f | %.0f | %.3f |\n",
                        shape.name, (long long)shape.n, (long long)shape.k,
                        s.name, groups, skewed ? "skewed" : "uniform",
                        (long long)tokens, denseMs, ms, flops / denseMs / 1e9,
                        flops / ms / 1e9, denseMs / ms);
            std::fflush(stdout);
          }
      }

  // Decoding: the masked layout against a loop of dense GEMMs.
  constexpr int kExperts = 64, kCapacity = 64;
  std::printf("\n| shape | scheme | experts | rows used of %d | loop of dense "
              "ms | masked ms | loop/masked |\n",
              kCapacity);
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Shape &shape : shapes)
    for (const Schemes &s : schemes) {
      compiler::GemmSpec dense;
      dense.n = shape.n;
      dense.k = shape.k;
      dense.aScaling = s.a;
      dense.bScaling = s.b;
      const int64_t m = int64_t(kExperts) * kCapacity;
      std::vector<float> a = numerics::llmActivationSample(m, shape.k, 4);
      std::vector<float> b = numerics::gaussianSample(shape.n, shape.k, 5);
      std::unique_ptr<jit::GemmProblem> problem =
          orDie(jit::GemmProblem::create(dense, m, a, b, 6), "operands");
      const GemmBuffers &p = problem->buffers;
      const size_t bBytes = size_t(shape.n * shape.k);
      Device bCodes(bBytes * kExperts), bGlobal(4 * kExperts),
          counts(4 * kExperts), d(size_t(m * shape.n) * 2);
      for (int g = 0; g < kExperts; ++g) {
        checkOk(runtime::checkCuda(api.memcpyDtoD(bCodes.pointer + g * bBytes,
                                                  p.b.codes, bBytes),
                                   "cuMemcpyDtoD"),
                "B");
        checkOk(runtime::checkCuda(api.memcpyDtoD(bGlobal.pointer + 4 * g,
                                                  p.b.globalScales, 4),
                                   "cuMemcpyDtoD"),
                "B's global");
      }
      std::uniform_int_distribution<int32_t> used(1, kCapacity);
      std::vector<int32_t> rows(kExperts);
      for (int32_t &r : rows)
        r = used(rng);
      checkOk(runtime::checkCuda(
                  api.memcpyHtoD(counts.pointer, rows.data(), 4 * kExperts),
                  "cuMemcpyHtoD"),
              "counts");

      compiler::GemmSpec spec = dense;
      spec.groups = kExperts;
      spec.maskedGroups = true;
      GemmBuffers buffers = p;
      buffers.b.codes = bCodes.pointer;
      buffers.b.globalScales = bGlobal.pointer;
      buffers.b.globalScaleCount = kExperts;
      buffers.d = d.pointer;
      buffers.groupOffsets = counts.pointer;
      const float maskedMs =
          orDie(runtime::timeWithEvents(
                    [&] { return moss::gemm(spec, m, buffers, nullptr); }, 3,
                    repeat, nullptr),
                "masked")[repeat / 2];

      // Expert g's used rows of A (and their scales) and of D, and its B.
      const int64_t blocks = s.a.hasLocalScales() ? shape.k / s.a.blockCols : 0;
      auto expertCall = [&](int g) {
        const int64_t first = int64_t(g) * kCapacity;
        GemmBuffers e = p;
        e.a.codes += first * shape.k;
        const int64_t scaleBytes = s.a.localScalesAreE8M0() ? 1 : 4;
        e.a.localScales += e.a.localScales ? first * blocks * scaleBytes : 0;
        e.a.localScaleCount = rows[g] * blocks;
        if (s.a.globalPerRow()) {
          e.a.globalScales += first * 4;
          e.a.globalScaleCount = rows[g];
        }
        e.b.codes = bCodes.pointer + g * bBytes;
        e.b.globalScales = bGlobal.pointer + 4 * g;
        e.d = d.pointer + first * shape.n * 2;
        return moss::gemm(dense, rows[g], e, nullptr);
      };
      const float loopMs = orDie(runtime::timeWithEvents(
                                     [&]() -> Error {
                                       for (int g = 0; g < kExperts; ++g)
                                         if (Error e = expertCall(g))
                                           return e;
                                       return Error::success();
                                     },
                                     3, repeat, nullptr),
                                 "loop of dense GEMMs")[repeat / 2];
      std::printf("| %s (N=%lld, K=%lld) | %s | %d | 1 to %d | %.3f | %.3f | "
                  "%.2f |\n",
                  shape.name, (long long)shape.n, (long long)shape.k, s.name,
                  kExperts, kCapacity, loopMs, maskedMs, loopMs / maskedMs);
      std::fflush(stdout);
    }

  // Weight gradients: k-grouped against the dense GEMM of all tokens.
  struct WeightGradient {
    const char *name;
    int64_t m, n; // dW [out, in]
  };
  std::vector<WeightGradient> gradients = {
      {"deepseek-v3 up", 4096, 7168},
      {"deepseek-v3 down", 7168, 2048},
      {"mixtral up", 14336, 4096},
      {"mixtral down", 4096, 14336}};
  if (quick)
    gradients.resize(1);
  const Schemes gradientSchemes[] = {
      {"row", numerics::ScalingScheme::perRow(),
       numerics::ScalingScheme::perRow()},
      {"moss unfolded", moss, moss}};
  std::printf("\n| weight gradient | scheme | experts | routing | tokens | "
              "dense ms | k-grouped ms | dense TFLOPS | k-grouped TFLOPS | "
              "k-grouped/dense |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const WeightGradient &shape : gradients)
    for (const Schemes &s : gradientSchemes)
      for (int64_t tokens : tokenCounts) {
        compiler::GemmSpec dense;
        dense.m = shape.m;
        dense.n = shape.n;
        dense.k = tokens;
        dense.aScaling = s.a;
        dense.bScaling = s.b;
        dense.fold = numerics::BlockScaleFold::None;
        if (!s.a.hasLocalScales())
          dense.fold.reset();
        std::vector<float> a =
            numerics::llmActivationSample(shape.m, tokens, 7);
        std::vector<float> b = numerics::llmActivationSample(shape.n, tokens, 8);
        std::unique_ptr<jit::GemmProblem> problem = orDie(
            jit::GemmProblem::create(dense, shape.m, a, b, 9), "operands");
        const float denseMs =
            orDie(runtime::timeWithEvents(
                      [&] {
                        return moss::gemm(dense, shape.m, problem->buffers,
                                          nullptr);
                      },
                      3, repeat, nullptr),
                  "dense")[repeat / 2];
        const double flops = 2.0 * double(tokens) * shape.m * shape.n;
        for (int groups : groupCounts)
          for (bool skewed : {false, true}) {
            compiler::GemmSpec spec = dense;
            spec.k = compiler::GemmSpec::kDynamic;
            spec.fold.reset();
            spec.groups = groups;
            spec.groupedK = true;
            // Whole 128-token blocks per expert.
            std::vector<int32_t> offsets =
                route(tokens / 128, groups, skewed, rng);
            for (int32_t &o : offsets)
              o *= 128;
            Device offsetsOnDevice(4 * offsets.size()),
                d(size_t(groups * shape.m * shape.n) * 2);
            checkOk(runtime::checkCuda(
                        api.memcpyHtoD(offsetsOnDevice.pointer, offsets.data(),
                                       4 * offsets.size()),
                        "cuMemcpyHtoD"),
                    "offsets");
            GemmBuffers buffers = problem->buffers;
            buffers.d = d.pointer;
            buffers.groupOffsets = offsetsOnDevice.pointer;
            const float ms =
                orDie(runtime::timeWithEvents(
                          [&] {
                            return moss::gemm(spec, tokens, buffers, nullptr);
                          },
                          3, repeat, nullptr),
                      "k-grouped")[repeat / 2];
            std::printf("| %s (M=%lld, N=%lld) | %s | %d | %s | %lld | %.3f | "
                        "%.3f | %.0f | %.0f | %.3f |\n",
                        shape.name, (long long)shape.m, (long long)shape.n,
                        s.name, groups, skewed ? "skewed" : "uniform",
                        (long long)tokens, denseMs, ms, flops / denseMs / 1e9,
                        flops / ms / 1e9, denseMs / ms);
            std::fflush(stdout);
          }
      }
  return 0;
}
