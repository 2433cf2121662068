//===- KGroupedGemmProblem.cpp - A k-grouped GEMM's operands on the GPU ---===//

#include "KGroupedGemmProblem.h"

#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Driver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

using namespace llvm;
using namespace moss;
using namespace moss::jit;
using runtime::checkCuda;

/// Rows past the output that must keep their poison.
static constexpr int64_t kPadRows = 3;

/// Sets one entry of each row of every slice, in column `at` (counted from
/// the slice's end when negative), to the largest magnitude of the row over
/// all slices, so that every slice has the whole row's (and the whole
/// operand's) maximum. `slices[g]` is [rows, cols[g]] row-major.
static void plantRowMaxima(std::vector<std::vector<float>> &slices,
                           ArrayRef<int64_t> cols, int64_t rows, int64_t at) {
  std::vector<float> largest(size_t(rows), 0.0f);
  for (size_t g = 0; g < slices.size(); ++g)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols[g]; ++c)
        largest[r] =
            std::max(largest[r], std::fabs(slices[g][size_t(r * cols[g] + c)]));
  for (size_t g = 0; g < slices.size(); ++g)
    if (cols[g])
      for (int64_t r = 0; r < rows; ++r)
        slices[g][size_t(r * cols[g] + (at < 0 ? cols[g] + at : at))] =
            largest[r];
}

/// The row-major [rows, sum of widths] matrix of `parts` [rows, widths[i]]
/// side by side (`bytes` per element).
static std::vector<uint8_t>
sideBySide(ArrayRef<const std::vector<uint8_t> *> parts,
           ArrayRef<int64_t> widths, int64_t rows, size_t bytes) {
  std::vector<uint8_t> whole;
  for (int64_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < parts.size(); ++i) {
      const uint8_t *begin = parts[i]->data() + size_t(r * widths[i]) * bytes;
      whole.insert(whole.end(), begin, begin + size_t(widths[i]) * bytes);
    }
  return whole;
}

template <class T>
static std::vector<uint8_t> asBytes(const std::vector<T> &v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(T));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

/// An operand's codes and scales [rows, K] from the experts' quantized
/// slices: codes and block scales side by side, the global scales (equal
/// in every slice) once.
struct StackedOperand {
  std::vector<uint8_t> codes, local, global;
};

static Expected<StackedOperand>
stackOperand(ArrayRef<const numerics::QuantizedTensor *> slices,
             const char *name) {
  StackedOperand whole;
  std::vector<std::vector<uint8_t>> locals;
  std::vector<const std::vector<uint8_t> *> codes, localParts;
  std::vector<int64_t> widths, localWidths;
  for (const numerics::QuantizedTensor *q : slices) {
    codes.push_back(&q->codes);
    widths.push_back(q->cols);
    locals.push_back(q->localF32.empty() ? q->localE8M0 : asBytes(q->localF32));
    localWidths.push_back(q->localCols);
    if (asBytes(q->global) != asBytes(slices[0]->global))
      return createStringError(Twine("operand ") + name +
                               ": the experts' slices have different global "
                               "scales, so their codes are not the whole "
                               "operand's");
  }
  for (const std::vector<uint8_t> &l : locals)
    localParts.push_back(&l);
  const numerics::QuantizedTensor &first = *slices[0];
  whole.codes = sideBySide(codes, widths, first.rows, 1);
  if (first.localCols)
    whole.local = sideBySide(localParts, localWidths, first.localRows,
                             first.localF32.empty() ? 1 : 4);
  whole.global = asBytes(first.global);
  return whole;
}

Expected<std::unique_ptr<KGroupedGemmProblem>>
KGroupedGemmProblem::create(const compiler::GemmSpec &spec,
                            ArrayRef<int64_t> cols, uint64_t seed) {
  if (!spec.groupedK || int64_t(cols.size()) != spec.groups)
    return createStringError("a k-grouped problem needs a k-grouped spec and "
                             "one column count per expert; got groups=" +
                             Twine(spec.groups) + " and " + Twine(cols.size()) +
                             " column counts");
  std::unique_ptr<KGroupedGemmProblem> p(new KGroupedGemmProblem());
  p->spec = spec;
  p->cols.assign(cols.begin(), cols.end());
  p->offsets.push_back(0);
  for (int64_t c : cols) {
    if (c < 0 || c % 128 != 0)
      return createStringError("an expert's columns must be a multiple of "
                               "128; got " +
                               Twine(c));
    p->k += c;
    p->offsets.push_back(int32_t(p->k));
  }
  const int64_t m = spec.m, n = spec.n;

  // Each expert as a plain GEMM of its columns, its slices holding the
  // whole rows' maxima.
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> as(cols.size()), bs(cols.size());
  for (size_t g = 0; g < cols.size(); ++g)
    if (cols[g]) {
      as[g] = numerics::llmActivationSample(m, cols[g], rng());
      bs[g] = numerics::gaussianSample(n, cols[g], rng());
    }
  // A's maxima and B's in different columns: their products would add up
  // to outputs past f16's range.
  plantRowMaxima(as, cols, m, 0);
  plantRowMaxima(bs, cols, n, -1);
  compiler::GemmSpec plain = spec;
  plain.groups = 0;
  plain.groupedK = false;
  plain.fold = numerics::BlockScaleFold::None;
  std::vector<const numerics::QuantizedTensor *> qa, qb;
  for (size_t g = 0; g < cols.size(); ++g) {
    p->experts.emplace_back();
    if (!cols[g])
      continue;
    plain.k = cols[g];
    Expected<std::unique_ptr<GemmProblem>> expert =
        GemmProblem::create(plain, m, as[g], bs[g], rng());
    if (!expert)
      return expert.takeError();
    p->experts.back() = std::move(*expert);
    qa.push_back(&p->experts.back()->qa);
    qb.push_back(&p->experts.back()->qb);
  }

  const runtime::DriverApi &api = *runtime::getDriverApi();
  auto uploadOrZero = [&](const std::vector<uint8_t> &bytes,
                          bool given) -> Expected<CUdeviceptr> {
    return given ? p->memory.upload(bytes)
                 : Expected<CUdeviceptr>(CUdeviceptr(0));
  };
  GemmScaleCounts counts = getGemmScaleCounts(spec, p->k);
  GemmBuffers &b = p->buffers;
  // With no columns at all the operands are empty; the launch still needs
  // their codes.
  StackedOperand a, bOperand;
  if (!qa.empty()) {
    Expected<StackedOperand> stackedA = stackOperand(qa, "A");
    if (!stackedA)
      return stackedA.takeError();
    Expected<StackedOperand> stackedB = stackOperand(qb, "B");
    if (!stackedB)
      return stackedB.takeError();
    a = std::move(*stackedA);
    bOperand = std::move(*stackedB);
  } else {
    a.global.assign(4 * counts.aGlobal, 0);
    bOperand.global.assign(4 * counts.bGlobal, 0);
  }
  const numerics::ScalingScheme &sa = spec.aScaling, &sb = spec.bScaling;
  for (auto [operand, stacked, scheme, localCount, globalCount] :
       {std::tuple{&b.a, &a, &sa, counts.aLocal, counts.aGlobal},
        std::tuple{&b.b, &bOperand, &sb, counts.bLocal, counts.bGlobal}}) {
    Expected<CUdeviceptr> codes = p->memory.upload(stacked->codes);
    Expected<CUdeviceptr> local =
        uploadOrZero(stacked->local, scheme->hasLocalScales());
    Expected<CUdeviceptr> global =
        uploadOrZero(stacked->global, scheme->hasGlobalScales());
    if (!codes || !local || !global)
      return joinErrors(codes.takeError(),
                        joinErrors(local.takeError(), global.takeError()));
    *operand = {*codes, *local, localCount, *global, globalCount};
  }

  // C: each expert's, and 1.0 for an empty one.
  if (spec.accumulate) {
    const size_t width = compiler::getByteWidth(*spec.accumulate);
    const size_t expertBytes = size_t(m * n) * width;
    const uint32_t oneF32 = 0x3F800000u;
    const uint16_t one16 =
        *spec.accumulate == compiler::FloatType::BF16 ? 0x3F80 : 0x3C00;
    std::vector<uint8_t> c;
    for (size_t g = 0; g < cols.size(); ++g) {
      const size_t at = c.size();
      c.resize(at + expertBytes);
      if (p->experts[g]) {
        if (Error e =
                checkCuda(api.memcpyDtoH(c.data() + at,
                                         p->experts[g]->buffers.c, expertBytes),
                          "cuMemcpyDtoH"))
          return std::move(e);
        continue;
      }
      for (size_t i = 0; i < expertBytes; i += width)
        std::memcpy(c.data() + at + i,
                    width == 4 ? (const void *)&oneF32 : (const void *)&one16,
                    width);
    }
    Expected<CUdeviceptr> cIn = p->memory.upload(c);
    if (!cIn)
      return cIn.takeError();
    b.c = *cIn;
  }
  Expected<CUdeviceptr> offsets = p->memory.upload(p->offsets);
  if (!offsets)
    return offsets.takeError();
  b.groupOffsets = *offsets;
  p->outputBytes = size_t((spec.groups * m + kPadRows) * n) *
                   compiler::getByteWidth(spec.out);
  if (Error e = p->memory.allocateOutput(b, p->outputBytes, spec.amax))
    return std::move(e);
  return std::move(p);
}

KGroupedGemmProblem::~KGroupedGemmProblem() = default;

Error KGroupedGemmProblem::poison() const {
  return poisonOutput(buffers, outputBytes);
}

Expected<GroupedGemmCheckResult>
KGroupedGemmProblem::check(const GemmCheckOptions &options) const {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  std::vector<uint8_t> out(outputBytes);
  if (Error e = checkCuda(api.memcpyDtoH(out.data(), buffers.d, outputBytes),
                          "cuMemcpyDtoH"))
    return std::move(e);
  GroupedGemmCheckResult result;
  const size_t width = compiler::getByteWidth(spec.out);
  const size_t expertBytes = size_t(spec.m * spec.n) * width;
  const size_t written = expertBytes * size_t(spec.groups);
  result.writtenOutside = int64_t(std::count_if(
      out.begin() + written, out.end(), [](uint8_t b) { return b != 0xFF; }));
  float largest = 0;
  for (size_t i = 0; i < written; i += width) {
    const float v = decodeOutputElement(out.data() + i, spec.out);
    if (!std::isnan(v))
      largest = std::max(largest, std::fabs(v));
  }

  // An empty expert's sums are zeros: its output is the epilogue's of 0.
  const double emptyValue = spec.accumulate ? spec.beta.value_or(1.0f) : 0.0;
  const numerics::OutputRounding rounding =
      compiler::getOutputRounding(spec.out);
  for (size_t g = 0; g < experts.size(); ++g) {
    const uint8_t *expertOut = out.data() + g * expertBytes;
    if (!experts[g]) {
      GemmCheckResult empty;
      for (size_t i = 0; i < expertBytes; i += width) {
        const float v = decodeOutputElement(expertOut + i, spec.out);
        ++empty.compared;
        if (std::isnan(v)) {
          ++empty.unwritten;
          continue;
        }
        const double ratio = numerics::gemmEntryErrorRatio(
            v, emptyValue, rounding.of(emptyValue), rounding.overflow);
        empty.bad += !(ratio <= 1.0);
        empty.worst = std::max(empty.worst, ratio);
      }
      result.add(empty, int64_t(g));
      continue;
    }
    if (Error e = result.checkExpert(*experts[g], expertOut, spec.m, options,
                                     int64_t(g)))
      return std::move(e);
  }
  if (spec.amax)
    if (Error e = result.checkAmax(buffers.amax, largest))
      return std::move(e);
  return result;
}
