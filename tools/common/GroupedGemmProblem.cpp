//===- GroupedGemmProblem.cpp - An m-grouped GEMM's operands on the GPU --===//

#include "GroupedGemmProblem.h"

#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

using namespace llvm;
using namespace moss;
using namespace moss::jit;
using runtime::checkCuda;

/// Rows past the last expert's that the output buffer also holds, poisoned,
/// so that a write past M shows.
static constexpr int64_t kPadRows = 3;

namespace {

/// Bytes gathered from device buffers (and padding), then uploaded as one.
struct Stack {
  std::vector<uint8_t> bytes;
  Error add(CUdeviceptr pointer, size_t count) {
    const size_t at = bytes.size();
    bytes.resize(at + count);
    if (count == 0)
      return Error::success();
    return checkCuda(
        runtime::getDriverApi()->memcpyDtoH(bytes.data() + at, pointer, count),
        "cuMemcpyDtoH");
  }
  /// `count` copies of the `size` bytes at `value`.
  void pad(size_t count, const void *value, size_t size) {
    const uint8_t *b = static_cast<const uint8_t *>(value);
    for (size_t i = 0; i < count; ++i)
      bytes.insert(bytes.end(), b, b + size);
  }
};

size_t localBytes(const numerics::ScalingScheme &s) {
  return s.localScalesAreE8M0() ? 1 : 4;
}

} // namespace

void GroupedGemmCheckResult::add(const GemmCheckResult &one, int64_t expert) {
  compared += one.compared;
  bad += one.bad;
  unwritten += one.unwritten;
  worst = std::max(worst, one.worst);
  if (!one.ok() && firstBadExpert < 0)
    firstBadExpert = expert;
}

Error GroupedGemmCheckResult::checkExpert(const GemmProblem &expert,
                                          const uint8_t *output, int64_t rows,
                                          const GemmCheckOptions &options,
                                          int64_t index) {
  const size_t bytes =
      size_t(rows * expert.spec.n) * compiler::getByteWidth(expert.spec.out);
  if (Error e = checkCuda(
          runtime::getDriverApi()->memcpyHtoD(expert.buffers.d, output, bytes),
          "cuMemcpyHtoD"))
    return e;
  GemmCheckOptions expertOptions = options;
  expertOptions.scanRows = unsigned(std::min<int64_t>(rows, options.scanRows));
  expertOptions.compareRows =
      unsigned(std::min<int64_t>(rows, options.compareRows));
  expertOptions.seed = options.seed + index;
  Expected<GemmCheckResult> one = checkGemmOutput(expert, rows, expertOptions);
  if (!one)
    return one.takeError();
  add(*one, index);
  return Error::success();
}

Error GroupedGemmCheckResult::checkAmax(CUdeviceptr amax, float largest) {
  float value = 0;
  if (Error e = checkCuda(runtime::getDriverApi()->memcpyDtoH(&value, amax, 4),
                          "cuMemcpyDtoH"))
    return e;
  if (value != largest)
    ++bad;
  return Error::success();
}

GroupedGemmProblem::~GroupedGemmProblem() = default;

/// `spec` as a plain GEMM, folded as the grouped one is at `m` rows.
static compiler::GemmSpec getPlainSpec(const compiler::GemmSpec &spec,
                                       int64_t m) {
  compiler::GemmSpec plain = spec;
  plain.groups = 0;
  plain.maskedGroups = false;
  plain.fold = spec.getFold(m);
  return plain;
}

Expected<std::unique_ptr<GroupedGemmProblem>>
GroupedGemmProblem::layOut(const compiler::GemmSpec &spec,
                           ArrayRef<int64_t> rows, int64_t capacity) {
  if (spec.groups < 1 || int64_t(rows.size()) != spec.groups)
    return createStringError("a grouped problem needs groups > 0 and one row "
                             "count per expert; got groups=" +
                             Twine(spec.groups) + " and " + Twine(rows.size()) +
                             " row counts");
  std::unique_ptr<GroupedGemmProblem> p(new GroupedGemmProblem());
  p->spec = spec;
  p->rows.assign(rows.begin(), rows.end());
  const int64_t largest = *std::max_element(rows.begin(), rows.end());
  p->capacity = spec.maskedGroups ? std::max(capacity, largest) : 0;
  int64_t total = 0;
  std::vector<int32_t> offsets(1, 0);
  for (size_t g = 0; g < rows.size(); ++g) {
    p->starts.push_back(spec.maskedGroups ? int64_t(g) * p->capacity : total);
    total += rows[g];
    offsets.push_back(int32_t(total));
  }
  p->m = spec.maskedGroups ? spec.groups * p->capacity : total;
  if (spec.maskedGroups)
    p->groupRows.assign(rows.begin(), rows.end());
  else
    p->groupRows = offsets;
  return std::move(p);
}

Expected<std::unique_ptr<GroupedGemmProblem>>
GroupedGemmProblem::create(const compiler::GemmSpec &spec,
                           ArrayRef<int64_t> rows, uint64_t seed,
                           int64_t capacity, bool nonFinite) {
  Expected<std::unique_ptr<GroupedGemmProblem>> laidOut =
      layOut(spec, rows, capacity);
  if (!laidOut)
    return laidOut.takeError();
  // Quantizing each expert apart gives the whole A's bits only for schemes
  // that quantize row by row.
  if ((spec.aScaling.hasLocalScales() && spec.aScaling.blockRows != 1) ||
      (spec.aScaling.hasGlobalScales() && !spec.aScaling.globalPerRow()))
    return createStringError("a grouped problem quantizes each expert's rows "
                             "apart, so A must be scaled row by row; got " +
                             spec.aScaling.str());
  std::unique_ptr<GroupedGemmProblem> p = std::move(*laidOut);

  // Each expert as a plain GEMM folded as the grouped one is at M. Every
  // random number is drawn first, in the experts' order; the experts'
  // operands are then sampled and quantized on threads of their own (the
  // host's work, 64 experts of 4096 x 7168 take minutes on one), and
  // uploaded in order.
  const compiler::GemmSpec dense = getPlainSpec(spec, p->m);
  std::mt19937_64 rng(seed);
  struct Draw {
    uint64_t a, b, problem;
    /// Where A holds NaN and Inf and B -Inf (SIZE_MAX: nowhere).
    size_t nan = SIZE_MAX, inf = SIZE_MAX, negInf = SIZE_MAX;
  };
  std::vector<Draw> draws(rows.size());
  for (size_t g = 0; g < rows.size(); ++g) {
    Draw &d = draws[g];
    d.a = rng();
    d.b = rng();
    if (nonFinite) {
      const size_t k = size_t(spec.k);
      auto at = [&](int64_t rowCount) {
        size_t row = size_t(rng() % uint64_t(rowCount));
        return row * k + rng() % k;
      };
      if (g % 3 == 1 && rows[g] > 0) {
        d.nan = at(rows[g]);
        d.inf = at(rows[g]);
      }
      if (g % 4 == 2)
        d.negInf = at(spec.n);
    }
    d.problem = rng();
  }
  std::vector<std::optional<GemmProblem::Operands>> operands(rows.size());
  std::vector<std::string> errors(rows.size());
  llvm::parallelFor(0, rows.size(), [&](size_t g) {
    const Draw &d = draws[g];
    const int64_t problemRows = std::max<int64_t>(rows[g], 1);
    std::vector<float> a =
        numerics::llmActivationSample(problemRows, spec.k, d.a);
    std::vector<float> b = numerics::gaussianSample(spec.n, spec.k, d.b);
    if (d.nan != SIZE_MAX)
      a[d.nan] = NAN;
    if (d.inf != SIZE_MAX)
      a[d.inf] = INFINITY;
    if (d.negInf != SIZE_MAX)
      b[d.negInf] = -INFINITY;
    Expected<GemmProblem::Operands> quantized =
        GemmProblem::quantizeOperands(dense, problemRows, a, b);
    if (quantized)
      operands[g] = std::move(*quantized);
    else
      errors[g] = toString(quantized.takeError());
  });
  for (size_t g = 0; g < rows.size(); ++g) {
    if (!operands[g])
      return createStringError(inconvertibleErrorCode(), "expert " +
                                                             std::to_string(g) +
                                                             ": " + errors[g]);
    Expected<std::unique_ptr<GemmProblem>> expert =
        GemmProblem::create(dense, std::max<int64_t>(rows[g], 1),
                            std::move(*operands[g]), draws[g].problem);
    operands[g].reset();
    if (!expert)
      return expert.takeError();
    p->experts.push_back(std::move(*expert));
  }

  // A's rows and B's experts stacked; a masked expert's unused rows hold
  // 1.0 in every code and scale.
  Stack aCodes, aLocal, aGlobal, bCodes, bLocal, bGlobal, bias, cIn;
  const size_t outWidth = compiler::getByteWidth(spec.out);
  const uint8_t code = 0x38, e8m0 = 127; // 1.0 in E4M3 and E8M0
  const float one = 1.0f;
  const numerics::ScalingScheme &sa = spec.aScaling, &sb = spec.bScaling;
  const size_t blocksPerRow = sa.hasLocalScales() ? spec.k / sa.blockCols : 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const GemmBuffers &e = p->experts[g]->buffers;
    const size_t r = size_t(rows[g]);
    const size_t unused = spec.maskedGroups ? size_t(p->capacity) - r : 0;
    if (Error err = aCodes.add(e.a.codes, r * spec.k))
      return std::move(err);
    aCodes.pad(unused * spec.k, &code, 1);
    if (sa.hasLocalScales()) {
      if (Error err =
              aLocal.add(e.a.localScales, r * blocksPerRow * localBytes(sa)))
        return std::move(err);
      if (localBytes(sa) == 1)
        aLocal.pad(unused * blocksPerRow, &e8m0, 1);
      else
        aLocal.pad(unused * blocksPerRow, &one, 4);
    }
    if (sa.hasGlobalScales() && sa.globalPerRow()) {
      if (Error err = aGlobal.add(e.a.globalScales, r * 4))
        return std::move(err);
      aGlobal.pad(unused, &one, 4);
    }
    if (Error err = bCodes.add(e.b.codes, size_t(spec.n * spec.k)))
      return std::move(err);
    if (sb.hasLocalScales())
      if (Error err = bLocal.add(e.b.localScales,
                                 size_t(e.b.localScaleCount) * localBytes(sb)))
        return std::move(err);
    if (sb.hasGlobalScales())
      if (Error err =
              bGlobal.add(e.b.globalScales, size_t(e.b.globalScaleCount) * 4))
        return std::move(err);
    if (spec.bias)
      if (Error err = bias.add(e.bias, size_t(spec.n) *
                                           compiler::getByteWidth(*spec.bias)))
        return std::move(err);
    if (spec.accumulate) {
      const size_t cWidth = compiler::getByteWidth(*spec.accumulate);
      if (Error err = cIn.add(e.c, r * spec.n * cWidth))
        return std::move(err);
      cIn.pad(unused * spec.n * cWidth, &code, 1);
    }
  }
  GemmScaleCounts counts = getGemmScaleCounts(spec, p->m);
  // Uploaded in this order; a scale or epilogue operand the spec lacks
  // stays 0.
  const Stack *stacks[] = {&aCodes, &aLocal,  &aGlobal, &bCodes,
                           &bLocal, &bGlobal, &bias,    &cIn};
  const bool given[] = {true,
                        sa.hasLocalScales(),
                        sa.hasGlobalScales(),
                        true,
                        sb.hasLocalScales(),
                        sb.hasGlobalScales(),
                        spec.bias.has_value(),
                        spec.accumulate.has_value()};
  CUdeviceptr pointers[8] = {};
  for (int i = 0; i < 8; ++i) {
    if (!given[i])
      continue;
    Expected<CUdeviceptr> pointer = p->memory.upload(stacks[i]->bytes);
    if (!pointer)
      return pointer.takeError();
    pointers[i] = *pointer;
  }
  Expected<CUdeviceptr> groupRows = p->memory.upload(p->groupRows);
  if (!groupRows)
    return groupRows.takeError();
  p->outputBytes = size_t((p->m + kPadRows) * spec.n) * outWidth;
  GemmBuffers &b = p->buffers;
  if (Error e = p->memory.allocateOutput(b, p->outputBytes, spec.amax))
    return std::move(e);
  b.a = {pointers[0], pointers[1], counts.aLocal, pointers[2], counts.aGlobal};
  b.b = {pointers[3], pointers[4], counts.bLocal, pointers[5], counts.bGlobal};
  b.bias = pointers[6];
  b.c = pointers[7];
  b.groupOffsets = *groupRows;
  return std::move(p);
}

Expected<std::unique_ptr<GroupedGemmProblem>>
GroupedGemmProblem::createForTiming(const compiler::GemmSpec &spec,
                                    ArrayRef<int64_t> rows, uint64_t seed) {
  Expected<std::unique_ptr<GroupedGemmProblem>> laidOut =
      layOut(spec, rows, /*capacity=*/0);
  if (!laidOut)
    return laidOut.takeError();
  std::unique_ptr<GroupedGemmProblem> p = std::move(*laidOut);

  // One plain problem of all the rows; its B, bias and scales serve every
  // expert.
  const compiler::GemmSpec dense = getPlainSpec(spec, p->m);
  const int64_t rowsA = std::max<int64_t>(p->m, 1);
  std::mt19937_64 rng(seed);
  Expected<std::unique_ptr<GemmProblem>> whole = GemmProblem::create(
      dense, rowsA, numerics::llmActivationSample(rowsA, spec.k, rng()),
      numerics::gaussianSample(spec.n, spec.k, rng()), rng());
  if (!whole)
    return whole.takeError();
  const GemmBuffers &w = (*whole)->buffers;
  const runtime::DriverApi &api = *runtime::getDriverApi();
  // `bytes` at `source`, `spec.groups` times over.
  auto repeat = [&](CUdeviceptr source, size_t bytes) -> Expected<CUdeviceptr> {
    if (!source)
      return CUdeviceptr(0);
    Expected<CUdeviceptr> copies =
        p->memory.upload(std::vector<uint8_t>(bytes * size_t(spec.groups)));
    if (!copies)
      return copies.takeError();
    for (int64_t g = 0; g < spec.groups; ++g)
      if (Error e =
              checkCuda(api.memcpyDtoD(*copies + g * bytes, source, bytes),
                        "cuMemcpyDtoD"))
        return std::move(e);
    return *copies;
  };
  const numerics::ScalingScheme &sb = spec.bScaling;
  const size_t bLocalBytes =
      size_t(w.b.localScaleCount) * (sb.localScalesAreE8M0() ? 1 : 4);
  Expected<CUdeviceptr> bCodes = repeat(w.b.codes, size_t(spec.n * spec.k)),
                        bLocal = repeat(w.b.localScales, bLocalBytes);
  if (!bCodes)
    return bCodes.takeError();
  if (!bLocal)
    return bLocal.takeError();
  Expected<CUdeviceptr> bGlobal =
      repeat(w.b.globalScales, size_t(w.b.globalScaleCount) * 4);
  if (!bGlobal)
    return bGlobal.takeError();
  Expected<CUdeviceptr> bias = repeat(
      w.bias,
      spec.bias ? size_t(spec.n) * compiler::getByteWidth(*spec.bias) : 0);
  if (!bias)
    return bias.takeError();
  Expected<CUdeviceptr> groupRows = p->memory.upload(p->groupRows);
  if (!groupRows)
    return groupRows.takeError();
  GemmScaleCounts counts = getGemmScaleCounts(spec, p->m);
  GemmBuffers &b = p->buffers;
  b = w;
  b.a.localScaleCount = counts.aLocal;
  b.a.globalScaleCount = counts.aGlobal;
  b.b = {*bCodes, *bLocal, counts.bLocal, *bGlobal, counts.bGlobal};
  b.bias = *bias;
  b.groupOffsets = *groupRows;
  // The whole problem owns A, C, D and amax: keep it.
  p->timing = std::move(*whole);
  p->outputBytes = size_t(p->m * spec.n) * compiler::getByteWidth(spec.out);
  return std::move(p);
}

Error GroupedGemmProblem::poison() const {
  return poisonOutput(buffers, outputBytes);
}

Expected<GroupedGemmCheckResult>
GroupedGemmProblem::check(const GemmCheckOptions &options) const {
  if (timing)
    return createStringError("a problem made for timing has no experts to "
                             "check against");
  const runtime::DriverApi &api = *runtime::getDriverApi();
  std::vector<uint8_t> out(outputBytes);
  if (Error e = checkCuda(api.memcpyDtoH(out.data(), buffers.d, outputBytes),
                          "cuMemcpyDtoH"))
    return std::move(e);
  GroupedGemmCheckResult result;
  const size_t rowBytes = size_t(spec.n) * compiler::getByteWidth(spec.out);
  // Every byte outside the experts' rows is as poisoned.
  std::vector<bool> owned(size_t(m + kPadRows), false);
  for (size_t g = 0; g < rows.size(); ++g)
    for (int64_t r = 0; r < rows[g]; ++r)
      owned[size_t(starts[g] + r)] = true;
  float largest = 0;
  for (size_t row = 0; row < owned.size(); ++row) {
    const uint8_t *bytes = out.data() + row * rowBytes;
    if (!owned[row]) {
      result.writtenOutside += int64_t(std::count_if(
          bytes, bytes + rowBytes, [](uint8_t b) { return b != 0xFF; }));
      continue;
    }
    if (!spec.amax)
      continue;
    const size_t width = compiler::getByteWidth(spec.out);
    for (size_t i = 0; i < rowBytes; i += width) {
      const float v = decodeOutputElement(bytes + i, spec.out);
      if (!std::isnan(v))
        largest = std::max(largest, std::fabs(v));
    }
  }

  for (size_t g = 0; g < rows.size(); ++g) {
    if (!rows[g])
      continue;
    if (Error e = result.checkExpert(*experts[g],
                                     out.data() + size_t(starts[g]) * rowBytes,
                                     rows[g], options, int64_t(g)))
      return std::move(e);
  }
  if (spec.amax)
    if (Error e = result.checkAmax(buffers.amax, largest))
      return std::move(e);
  return result;
}
