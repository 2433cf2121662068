//===- GemmCheck.cpp - A GEMM output against the accuracy contract --------===//

#include "GemmCheck.h"

#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/TensorCoreModel.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace llvm;
using namespace moss;
using namespace moss::jit;

/// `want` sorted distinct indices below `count`, spread evenly, with the
/// first and the last (all when count <= want).
static std::vector<int64_t> spread(int64_t count, unsigned want) {
  std::vector<int64_t> out;
  if (count <= int64_t(want) || want < 2) {
    for (int64_t i = 0; i < count; ++i)
      out.push_back(i);
    return out;
  }
  for (unsigned i = 0; i < want; ++i)
    out.push_back(int64_t(double(i) * double(count - 1) / double(want - 1)));
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// `want` sorted distinct random indices below `count` with the first and
/// the last.
static std::vector<int64_t> sample(int64_t count, unsigned want,
                                   std::mt19937_64 &rng) {
  if (count <= int64_t(want))
    return spread(count, want);
  std::vector<int64_t> out = {0, count - 1};
  while (out.size() < want)
    out.push_back(int64_t(rng() % uint64_t(count)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Expected<GemmCheckResult>
jit::checkGemmOutput(const GemmProblem &problem, int64_t m,
                     const GemmCheckOptions &options) {
  // The kernel's GEMM: the model and the reference see the operands as the
  // kernel multiplies them (folded, when the spec folds).
  const compiler::GemmSpec spec = problem.spec.getKernelSpec(m);
  const int64_t n = spec.n, k = spec.k;
  const unsigned width = compiler::getByteWidth(spec.out);
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();

  // The scanned rows, downloaded one by one.
  std::vector<int64_t> rows = spread(m, options.scanRows);
  std::vector<float> output(rows.size() * size_t(n));
  std::vector<uint8_t> bytes(size_t(n) * width);
  GemmCheckResult result;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (Error e = runtime::checkCuda(
            api->memcpyDtoH(bytes.data(),
                            problem.buffers.d + size_t(rows[i] * n) * width,
                            bytes.size()),
            "cuMemcpyDtoH (output row " + Twine(rows[i]) + ")"))
      return std::move(e);
    for (int64_t j = 0; j < n; ++j) {
      float v = decodeOutputElement(&bytes[size_t(j) * width], spec.out);
      output[i * size_t(n) + j] = v;
      if (std::isnan(v))
        ++result.unwritten;
    }
  }

  // A sample of them against the FP64 reference.
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> pickRows =
      sample(int64_t(rows.size()), options.compareRows, rng);
  std::vector<int64_t> cols = sample(n, options.compareCols, rng);
  std::vector<double> dqA(pickRows.size() * k), dqB(cols.size() * k);
  for (size_t i = 0; i < pickRows.size(); ++i)
    numerics::dequantizeRow(problem.kernelA, rows[pickRows[i]],
                            MutableArrayRef<double>(&dqA[i * k], k));
  for (size_t j = 0; j < cols.size(); ++j)
    numerics::dequantizeRow(problem.kernelB, cols[j],
                            MutableArrayRef<double>(&dqB[j * k], k));
  std::vector<double> ref = numerics::referenceGemm(
      dqA, dqB, int64_t(pickRows.size()), int64_t(cols.size()), k);
  const int64_t interval = getPromotionInterval(spec);
  // The model needs an unpromoted kernel's tiling (where its sums restart).
  // The f16 MMA has none: its products are exact (f16MmaEntryAllowance).
  std::optional<numerics::MmaSchedule> schedule;
  if (spec.multipliesInF16())
    ;
  else if (options.tiling)
    schedule = compiler::getMmaSchedule(spec, *options.tiling);
  else if (int64_t promoteK = compiler::getPromoteK(spec))
    schedule = numerics::MmaSchedule{promoteK, {}};
  result.againstModel = schedule.has_value();
  const numerics::OutputRounding rounding =
      compiler::getOutputRounding(spec.out);
  const double beta = spec.beta.value_or(1.0f);
  double errorSquared = 0, refSquared = 0;
  for (size_t i = 0; i < pickRows.size(); ++i) {
    int64_t row = rows[pickRows[i]];
    for (size_t j = 0; j < cols.size(); ++j) {
      const double bias = spec.bias ? problem.bias[cols[j]] : 0.0;
      const double betaC =
          spec.accumulate ? beta * problem.c[row * n + cols[j]] : 0.0;
      const double expected = ref[i * cols.size() + j] + bias + betaC;
      double got = output[size_t(pickRows[i]) * size_t(n) + cols[j]];
      double ratio;
      if (schedule) {
        numerics::ModelledGemmEntry entry =
            numerics::modelGemmEntry(problem.kernelA, row, problem.kernelB,
                                     cols[j], *schedule, bias, betaC);
        ratio = numerics::gemmEntryErrorRatio(
            got, entry.value,
            numerics::modelledEntryAllowedError(entry, rounding),
            rounding.overflow);
      } else if (spec.multipliesInF16()) {
        ratio = numerics::gemmEntryErrorRatio(
            got, expected,
            numerics::f16MmaEntryAllowedError(
                expected, rounding, ArrayRef(&dqA[i * k], k),
                ArrayRef(&dqB[j * k], k), ref[i * cols.size() + j], bias,
                betaC),
            rounding.overflow);
      } else {
        ratio = numerics::gemmEntryErrorRatio(
            got, expected,
            numerics::gemmEntryAllowedError(expected, rounding,
                                            ArrayRef(&dqA[i * k], k),
                                            ArrayRef(&dqB[j * k], k), interval),
            rounding.overflow);
      }
      errorSquared += (got - expected) * (got - expected);
      refSquared += expected * expected;
      ++result.compared;
      if (!(ratio <= 1.0))
        ++result.bad;
      result.worst = std::max(result.worst, ratio);
    }
  }
  result.relFrobenius = refSquared > 0 ? std::sqrt(errorSquared / refSquared)
                                       : std::sqrt(errorSquared);
  return result;
}

Expected<GemmCheckResult>
moss::jit::runAndCheckGemm(GemmRunner &runner, const compiler::GemmSpec &spec,
                           int64_t m, const GemmProblem &problem,
                           const GemmOptions &runOptions,
                           const GemmCheckOptions &options) {
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  if (Error e = problem.poison(nullptr))
    return std::move(e);
  if (Error e = runner.run(spec, m, problem.buffers, nullptr, runOptions))
    return std::move(e);
  if (Error e = runtime::checkCuda(api->streamSynchronize(nullptr),
                                   "the GEMM kernel"))
    return std::move(e);
  return checkGemmOutput(problem, m, options);
}
