//===- GemmProblem.cpp - A GEMM's operands on the GPU, for run/bench ------===//

#include "GemmProblem.h"

#include "moss/Numerics/Fold.h"

#include "moss/Compiler/Tiling.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace llvm;
using namespace moss;
using namespace moss::jit;
using compiler::FloatType;
using runtime::checkCuda;

namespace {

/// Round to nearest even, as the kernel's output conversion.
uint16_t toBf16(float f) {
  uint32_t x = llvm::bit_cast<uint32_t>(f);
  if (std::isnan(f))
    return uint16_t((x >> 16) | 0x40);
  x += 0x7FFF + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

/// Values with at most 8 significant bits in [-8, 8): exact in bf16, f16
/// and f32, so the data does not depend on the type it is stored in.
std::vector<float> exactValues(size_t count, std::mt19937_64 &rng) {
  std::uniform_int_distribution<int> code(-255, 255);
  std::vector<float> values(count);
  for (float &v : values)
    v = float(code(rng)) / 32.0f;
  return values;
}

/// `values` encoded as `type` (exact for exactValues()).
std::vector<uint8_t> encode(const std::vector<float> &values, FloatType type) {
  std::vector<uint8_t> bytes(values.size() * compiler::getByteWidth(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == FloatType::F32) {
      std::memcpy(&bytes[4 * i], &values[i], 4);
      continue;
    }
    uint16_t h;
    if (type == FloatType::BF16) {
      h = toBf16(values[i]);
    } else { // f16 of a value with 8 significant bits in [-8, 8): exact
      float v = values[i];
      uint16_t sign = std::signbit(v) ? 0x8000 : 0;
      v = std::fabs(v);
      if (v == 0) {
        h = sign;
      } else {
        int e;
        float f = std::frexp(v, &e); // v = f * 2^e, f in [0.5, 1)
        uint16_t mantissa = uint16_t(std::lround((f * 2 - 1) * 1024));
        h = uint16_t(sign | uint16_t((e - 1 + 15) << 10) | mantissa);
      }
    }
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  return bytes;
}

} // namespace

float jit::decodeOutputElement(const uint8_t *bytes, FloatType type) {
  if (type == FloatType::F32) {
    float f;
    std::memcpy(&f, bytes, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes, 2);
  if (type == FloatType::BF16)
    return llvm::bit_cast<float>(uint32_t(h) << 16);
  int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0)
    return sign * std::ldexp(float(mantissa), -24);
  if (exponent == 31)
    return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(float(mantissa | 0x400), exponent - 25);
}

Expected<CUdeviceptr> GemmProblem::allocate(size_t bytes) {
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  CUdeviceptr pointer = 0;
  if (Error e = checkCuda(api->memAlloc(&pointer, std::max<size_t>(bytes, 16)),
                          "cuMemAlloc (" + Twine(bytes) + " bytes)"))
    return std::move(e);
  allocations.push_back(pointer);
  return pointer;
}

Expected<CUdeviceptr> GemmProblem::upload(const void *data, size_t bytes) {
  if (bytes == 0)
    return CUdeviceptr(0);
  Expected<CUdeviceptr> pointer = allocate(bytes);
  if (!pointer)
    return pointer.takeError();
  if (Error e =
          checkCuda(runtime::getDriverApi()->memcpyHtoD(*pointer, data, bytes),
                    "cuMemcpyHtoD"))
    return std::move(e);
  return *pointer;
}

GemmProblem::~GemmProblem() {
  if (Expected<const runtime::DriverApi &> api = runtime::getDriverApi()) {
    for (CUdeviceptr pointer : allocations)
      api->memFree(pointer);
  } else {
    consumeError(api.takeError());
  }
}

Expected<std::unique_ptr<GemmProblem>>
GemmProblem::create(const compiler::GemmSpec &spec, int64_t m,
                    const std::vector<float> &a, const std::vector<float> &b,
                    uint64_t seed) {
  Expected<Operands> operands = quantizeOperands(spec, m, a, b);
  if (!operands)
    return operands.takeError();
  return create(spec, m, std::move(*operands), seed);
}

Expected<GemmProblem::Operands>
GemmProblem::quantizeOperands(const compiler::GemmSpec &spec, int64_t m,
                              const std::vector<float> &a,
                              const std::vector<float> &b) {
  Operands operands;
  Expected<numerics::QuantizedTensor> qa = numerics::quantize(
      a, m, spec.k, numerics::QuantizeOptions{spec.aScaling, spec.a, false});
  if (!qa)
    return createStringError(inconvertibleErrorCode(),
                             "quantizing A: " + toString(qa.takeError()));
  Expected<numerics::QuantizedTensor> qb = numerics::quantize(
      b, spec.n, spec.k,
      numerics::QuantizeOptions{spec.bScaling, spec.b, false});
  if (!qb)
    return createStringError(inconvertibleErrorCode(),
                             "quantizing B: " + toString(qb.takeError()));
  operands.qa = std::move(*qa);
  operands.qb = std::move(*qb);
  for (auto [quantized, kernel] :
       {std::pair{&operands.qa, &operands.kernelA},
        std::pair{&operands.qb, &operands.kernelB}}) {
    numerics::BlockScaleFold fold = numerics::isFoldable(quantized->scheme)
                                        ? spec.getFold(m)
                                        : numerics::BlockScaleFold::None;
    Expected<numerics::QuantizedTensor> folded =
        numerics::foldBlockScales(*quantized, fold);
    if (!folded)
      return createStringError(inconvertibleErrorCode(),
                               "folding: " + toString(folded.takeError()));
    *kernel = std::move(*folded);
  }
  return std::move(operands);
}

Expected<std::unique_ptr<GemmProblem>>
GemmProblem::create(const compiler::GemmSpec &spec, int64_t m,
                    Operands operands, uint64_t seed) {
  std::unique_ptr<GemmProblem> problem(new GemmProblem());
  problem->spec = spec;
  problem->m = m;
  problem->qa = std::move(operands.qa);
  problem->qb = std::move(operands.qb);
  problem->kernelA = std::move(operands.kernelA);
  problem->kernelB = std::move(operands.kernelB);

  auto operand = [&](const numerics::QuantizedTensor &q,
                     GemmOperand &out) -> Error {
    Expected<CUdeviceptr> codes =
        problem->upload(q.codes.data(), q.codes.size());
    if (!codes)
      return codes.takeError();
    out.codes = *codes;
    if (q.scheme.hasLocalScales()) {
      bool e8m0 = q.scheme.localScalesAreE8M0();
      Expected<CUdeviceptr> local =
          e8m0 ? problem->upload(q.localE8M0.data(), q.localE8M0.size())
               : problem->upload(q.localF32.data(), q.localF32.size() * 4);
      if (!local)
        return local.takeError();
      out.localScales = *local;
      out.localScaleCount =
          int64_t(e8m0 ? q.localE8M0.size() : q.localF32.size());
    }
    if (q.scheme.hasGlobalScales()) {
      Expected<CUdeviceptr> global =
          problem->upload(q.global.data(), q.global.size() * 4);
      if (!global)
        return global.takeError();
      out.globalScales = *global;
      out.globalScaleCount = int64_t(q.global.size());
    }
    return Error::success();
  };
  if (Error e = operand(problem->qa, problem->buffers.a))
    return std::move(e);
  if (Error e = operand(problem->qb, problem->buffers.b))
    return std::move(e);

  std::mt19937_64 rng(seed);
  if (spec.bias) {
    problem->bias = exactValues(size_t(spec.n), rng);
    std::vector<uint8_t> bytes = encode(problem->bias, *spec.bias);
    Expected<CUdeviceptr> p = problem->upload(bytes.data(), bytes.size());
    if (!p)
      return p.takeError();
    problem->buffers.bias = *p;
  }
  if (spec.accumulate) {
    problem->c = exactValues(size_t(m * spec.n), rng);
    std::vector<uint8_t> bytes = encode(problem->c, *spec.accumulate);
    Expected<CUdeviceptr> p = problem->upload(bytes.data(), bytes.size());
    if (!p)
      return p.takeError();
    problem->buffers.c = *p;
  }
  Expected<CUdeviceptr> d =
      problem->allocate(size_t(m * spec.n) * compiler::getByteWidth(spec.out));
  if (!d)
    return d.takeError();
  problem->buffers.d = *d;
  if (spec.amax) {
    Expected<CUdeviceptr> amax = problem->allocate(4);
    if (!amax)
      return amax.takeError();
    problem->buffers.amax = *amax;
  }
  return std::move(problem);
}

Error GemmProblem::poison(CUstream stream) const {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  size_t bytes = size_t(m * spec.n) * compiler::getByteWidth(spec.out);
  if (Error e = checkCuda(api.memsetD8Async(buffers.d, 0xFF, bytes, stream),
                          "cuMemsetD8Async"))
    return e;
  if (buffers.amax)
    return checkCuda(api.memsetD8Async(buffers.amax, 0, 4, stream),
                     "cuMemsetD8Async");
  return Error::success();
}

Expected<std::vector<float>> GemmProblem::downloadOutput() const {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  unsigned width = compiler::getByteWidth(spec.out);
  std::vector<uint8_t> bytes(size_t(m * spec.n) * width);
  if (Error e = checkCuda(api.memcpyDtoH(bytes.data(), buffers.d, bytes.size()),
                          "cuMemcpyDtoH"))
    return std::move(e);
  std::vector<float> values(size_t(m * spec.n));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = decodeOutputElement(&bytes[i * width], spec.out);
  return values;
}

Expected<float> GemmProblem::downloadAmax() const {
  float amax = 0;
  if (!buffers.amax)
    return amax;
  if (Error e =
          checkCuda(runtime::getDriverApi()->memcpyDtoH(&amax, buffers.amax, 4),
                    "cuMemcpyDtoH"))
    return std::move(e);
  return amax;
}

int64_t jit::getPromotionInterval(const compiler::GemmSpec &spec) {
  const int64_t promoteK = compiler::getPromoteK(spec);
  return promoteK > 0 ? std::min(promoteK, spec.k) : spec.k;
}
