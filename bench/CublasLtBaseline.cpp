//===- CublasLtBaseline.cpp - cuBLASLt GEMM baselines ---------------------===//
//
// See CublasLtBaseline.h.
//
// cuBLASLt is opened with dlopen on first use, as the runtime opens NVRTC and
// the driver: the programs that time it start, and run everything else,
// where it is not installed.
//
// Layout. cuBLASLt is column-major and computes D = op(A') * op(B') with
// D m' x n'. Our operands are both K-major:
//
//   A [M, K] row-major  == column-major K x M, ld K
//   B [N, K] row-major  == column-major K x N, ld K
//   D [M, N] row-major  == column-major N x M, ld N
//
// We want D = A * B^T (row-major). Read column-major, the D buffer holds
// D^T (N x M), and D^T = (A * B^T)^T = B * A^T. So we hand cuBLASLt
//
//   A' = our B buffer, layout K x N (ld K), opA = CUBLAS_OP_T -> N x K
//   B' = our A buffer, layout K x M (ld K), opB = CUBLAS_OP_N -> K x M
//   D' = our D buffer, layout N x M (ld N)              -> m' = N, n' = M
//
// which is the "TN" form that cuBLASLt's FP8 kernels require (A' transposed,
// B' not), with the output in the same row-major [M, N] memory order as the
// MOSS kernel's. The swap means cuBLASLt's "A" scale attributes describe OUR
// B and its "B" scale attributes describe OUR A: per-tensor, A_SCALE_POINTER
// gets B's scale and B_SCALE_POINTER gets A's; block-scaled, our A's 1x128
// scales (VEC128_32F) go to CUBLASLT_MATMUL_DESC_B_SCALE_* and our B's
// 128x128 scales (BLK128x128_32F) to CUBLASLT_MATMUL_DESC_A_SCALE_*.
//
//===----------------------------------------------------------------------===//

#include "CublasLtBaseline.h"

#include "moss/Runtime/Cuda/EventTimer.h"

#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/ToolkitLibrary.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"

#include <cublasLt.h>

#include <dlfcn.h>

#include <random>
#include <string>
#include <vector>

using namespace llvm;
using moss::runtime::checkCuda;
using moss::runtime::DriverApi;

namespace moss::bench {
namespace {

#if CUBLAS_VER_MAJOR > 12 || (CUBLAS_VER_MAJOR == 12 && CUBLAS_VER_MINOR >= 9)
#define MOSS_HAVE_LT_BLOCK_SCALING 1
#else
#define MOSS_HAVE_LT_BLOCK_SCALING 0
#endif

constexpr size_t kWorkspaceBytes = size_t(64) << 20;

/// The cuBLASLt entry points used here.
#define MOSS_CUBLASLT_FUNCTIONS(X)                                             \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtGetStatusName)                                                     \
  X(cublasLtMatmul)                                                            \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)

struct CublasLtLibrary {
#define MOSS_CUBLASLT_FIELD(name) decltype(&::name) name = nullptr;
  MOSS_CUBLASLT_FUNCTIONS(MOSS_CUBLASLT_FIELD)
#undef MOSS_CUBLASLT_FIELD
  /// Empty once every entry point is resolved.
  std::string error;
};

CublasLtLibrary openCublasLt() {
  CublasLtLibrary lib;
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  void *handle =
      runtime::openToolkitLibrary("MOSS_CUBLASLT_PATH", {name}, tried);
  if (!handle) {
    lib.error = "cuBLASLt not found; tried " + tried +
                ". Install the CUDA toolkit's cuBLAS, set CUDA_HOME, or set "
                "MOSS_CUBLASLT_PATH to the library";
    return lib;
  }
#define MOSS_CUBLASLT_RESOLVE(name)                                            \
  lib.name = reinterpret_cast<decltype(lib.name)>(dlsym(handle, #name));       \
  if (!lib.name)                                                               \
    lib.error +=                                                               \
        std::string(lib.error.empty() ? "the cuBLASLt found lacks " : ", ") +  \
        #name;
  MOSS_CUBLASLT_FUNCTIONS(MOSS_CUBLASLT_RESOLVE)
#undef MOSS_CUBLASLT_RESOLVE
  return lib;
}

const CublasLtLibrary &library() {
  static const CublasLtLibrary lib = openCublasLt();
  return lib;
}

/// Opens cuBLASLt; the entry points of library() are valid after success.
Error checkCublasLt() {
  if (library().error.empty())
    return Error::success();
  return createStringError(inconvertibleErrorCode(), library().error);
}

Error ltError(cublasStatus_t status, const Twine &call) {
  return createStringError(inconvertibleErrorCode(),
                           call + " returned " +
                               library().cublasLtGetStatusName(status));
}

Error ltCheck(cublasStatus_t status, const Twine &call) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return Error::success();
  return ltError(status, call);
}

/// Device buffers freed on destruction (after the stream has drained).
class DeviceBuffers {
public:
  DeviceBuffers(const DriverApi &api, CUstream stream)
      : api(api), stream(stream) {}
  ~DeviceBuffers() {
    api.streamSynchronize(stream);
    for (CUdeviceptr p : buffers)
      api.memFree(p);
  }
  DeviceBuffers(const DeviceBuffers &) = delete;
  DeviceBuffers &operator=(const DeviceBuffers &) = delete;

  Expected<CUdeviceptr> alloc(size_t bytes) {
    CUdeviceptr p = 0;
    if (Error error = checkCuda(api.memAlloc(&p, bytes), "cuMemAlloc"))
      return std::move(error);
    buffers.push_back(p);
    return p;
  }
  Expected<CUdeviceptr> upload(const void *data, size_t bytes) {
    Expected<CUdeviceptr> p = alloc(bytes);
    if (!p)
      return p.takeError();
    if (Error error =
            checkCuda(api.memcpyHtoD(*p, data, bytes), "cuMemcpyHtoD"))
      return std::move(error);
    return *p;
  }

private:
  const DriverApi &api;
  CUstream stream;
  std::vector<CUdeviceptr> buffers;
};

/// The cuBLASLt objects of one GEMM, destroyed in reverse order.
struct LtObjects {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtObjects() {
    if (preference)
      library().cublasLtMatmulPreferenceDestroy(preference);
    if (d)
      library().cublasLtMatrixLayoutDestroy(d);
    if (c)
      library().cublasLtMatrixLayoutDestroy(c);
    if (b)
      library().cublasLtMatrixLayoutDestroy(b);
    if (a)
      library().cublasLtMatrixLayoutDestroy(a);
    if (op)
      library().cublasLtMatmulDescDestroy(op);
    if (handle)
      library().cublasLtDestroy(handle);
  }
};

/// What differs between the baselines. `a`/`b` are cuBLASLt's A' and B',
/// i.e. OUR B and OUR A (see the file comment).
struct LtGemm {
  cudaDataType_t inputType = CUDA_R_16BF;
  CUdeviceptr a = 0, b = 0, d = 0;
  CUdeviceptr aScale = 0, bScale = 0; // 0: no scale attribute set
  int32_t aScaleMode = -1, bScaleMode = -1; // -1: mode attribute not set
  /// CUBLASLT_MATMUL_DESC_FAST_ACCUM: FP8 sums stay in the tensor cores.
  bool fastAccumulation = false;
};

template <typename T>
Error setDesc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr,
              const T &value, const char *name) {
  return ltCheck(
      library().cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(T)),
      Twine("library().cublasLtMatmulDescSetAttribute(") + name + ")");
}

/// One GEMM set up for cublasLtMatmul: its operands (`buffers`), objects
/// and algorithm.
struct PreparedLt final : CublasLtGemm {
  PreparedLt(const DriverApi &api, CUstream stream)
      : buffers(api, stream), stream(stream) {}

  LtObjects lt; // destroyed after the buffers drained the stream
  DeviceBuffers buffers;
  LtGemm g;
  cublasLtMatmulHeuristicResult_t heuristic{};
  CUdeviceptr workspace = 0;
  CUstream stream;

  Error run() override {
    const float alpha = 1.0f, beta = 0.0f;
    auto ptr = [](CUdeviceptr d) { return reinterpret_cast<void *>(d); };
    return ltCheck(library().cublasLtMatmul(
                       lt.handle, lt.op, &alpha, ptr(g.a), lt.a, ptr(g.b), lt.b,
                       &beta, ptr(g.d), lt.c, ptr(g.d), lt.d, &heuristic.algo,
                       ptr(workspace), kWorkspaceBytes, stream),
                   "cublasLtMatmul");
  }
};

/// Creates the cuBLASLt objects of `prepared.g` and picks the algorithm.
Error describeLt(const CublasLtProblem &p, PreparedLt &prepared) {
  const LtGemm &g = prepared.g;
  LtObjects &lt = prepared.lt;
  if (Error error =
          ltCheck(library().cublasLtCreate(&lt.handle), "cublasLtCreate"))
    return std::move(error);
  if (Error error = ltCheck(library().cublasLtMatmulDescCreate(
                                &lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                            "cublasLtMatmulDescCreate"))
    return std::move(error);
  cublasOperation_t opA = CUBLAS_OP_T, opB = CUBLAS_OP_N;
  if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, opA, "TRANSA"))
    return std::move(error);
  if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, opB, "TRANSB"))
    return std::move(error);
  if (g.fastAccumulation)
    if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                              int8_t(1), "FAST_ACCUM"))
      return error;
  if (g.aScaleMode >= 0)
    if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                              g.aScaleMode, "A_SCALE_MODE"))
      return std::move(error);
  if (g.bScaleMode >= 0)
    if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                              g.bScaleMode, "B_SCALE_MODE"))
      return std::move(error);
  if (g.aScale) {
    const void *ptr = reinterpret_cast<const void *>(g.aScale);
    if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ptr,
                              "A_SCALE_POINTER"))
      return std::move(error);
  }
  if (g.bScale) {
    const void *ptr = reinterpret_cast<const void *>(g.bScale);
    if (Error error = setDesc(lt.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, ptr,
                              "B_SCALE_POINTER"))
      return std::move(error);
  }

  // m' = N, n' = M (see the file comment).
  uint64_t m = p.m, n = p.n, k = p.k;
  if (Error error = ltCheck(
          library().cublasLtMatrixLayoutCreate(&lt.a, g.inputType, k, n, k),
          "library().cublasLtMatrixLayoutCreate(A')"))
    return std::move(error);
  if (Error error = ltCheck(
          library().cublasLtMatrixLayoutCreate(&lt.b, g.inputType, k, m, k),
          "library().cublasLtMatrixLayoutCreate(B')"))
    return std::move(error);
  if (Error error = ltCheck(
          library().cublasLtMatrixLayoutCreate(&lt.c, CUDA_R_16BF, n, m, n),
          "library().cublasLtMatrixLayoutCreate(C)"))
    return std::move(error);
  if (Error error = ltCheck(
          library().cublasLtMatrixLayoutCreate(&lt.d, CUDA_R_16BF, n, m, n),
          "library().cublasLtMatrixLayoutCreate(D)"))
    return std::move(error);

  Expected<CUdeviceptr> workspace = prepared.buffers.alloc(kWorkspaceBytes);
  if (!workspace)
    return workspace.takeError();
  prepared.workspace = *workspace;
  if (Error error =
          ltCheck(library().cublasLtMatmulPreferenceCreate(&lt.preference),
                  "cublasLtMatmulPreferenceCreate"))
    return std::move(error);
  size_t workspaceBytes = kWorkspaceBytes;
  if (Error error =
          ltCheck(library().cublasLtMatmulPreferenceSetAttribute(
                      lt.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                      &workspaceBytes, sizeof(workspaceBytes)),
                  "cublasLtMatmulPreferenceSetAttribute"))
    return std::move(error);

  int found = 0;
  cublasStatus_t status = library().cublasLtMatmulAlgoGetHeuristic(
      lt.handle, lt.op, lt.a, lt.b, lt.c, lt.d, lt.preference, 1,
      &prepared.heuristic, &found);
  if (status != CUBLAS_STATUS_SUCCESS)
    return ltError(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    return createStringError(inconvertibleErrorCode(),
                             "cublasLtMatmulAlgoGetHeuristic found no "
                             "algorithm");

  return Error::success();
}

/// Random finite E4M3 codes (no 0x7f/0xff NaN patterns), both signs.
std::vector<uint8_t> randomFp8(size_t count, std::mt19937_64 &rng) {
  std::vector<uint8_t> v(count);
  for (size_t i = 0; i < count; i += 8) {
    uint64_t r = rng();
    for (size_t j = 0; j < 8 && i + j < count; ++j, r >>= 8) {
      uint8_t x = static_cast<uint8_t>(r);
      v[i + j] = static_cast<uint8_t>(((x & 0x7f) % 0x78) | (x & 0x80));
    }
  }
  return v;
}

/// Random BF16 bit patterns with magnitudes in [2^-7, 1), both signs.
std::vector<uint16_t> randomBf16(size_t count, std::mt19937_64 &rng) {
  std::vector<uint16_t> v(count);
  for (size_t i = 0; i < count; i += 4) {
    uint64_t r = rng();
    for (size_t j = 0; j < 4 && i + j < count; ++j, r >>= 16) {
      uint16_t x = static_cast<uint16_t>(r);
      uint16_t sign = x & 0x8000, mantissa = x & 0x7f;
      uint16_t exponent = 120 + (x >> 7 & 0xff) % 7; // 2^-7 .. 2^-1
      v[i + j] = static_cast<uint16_t>(sign | exponent << 7 | mantissa);
    }
  }
  return v;
}

/// Random FP32 scales in [0.5, 2).
std::vector<float> randomScales(size_t count, std::mt19937_64 &rng) {
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> v(count);
  for (float &s : v)
    s = dist(rng);
  return v;
}

Error checkProblem(const CublasLtProblem &p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.repeat <= 0 || p.warmup < 0)
    return createStringError(inconvertibleErrorCode(),
                             "bad problem size or repeat count");
  return checkCublasLt();
}

/// Uploads our A [m, k] and B [n, k] and allocates the bf16 output: sets
/// g.a (our B), g.b (our A), g.d and the input type.
template <typename T>
Error uploadOperands(const CublasLtProblem &p, const std::vector<T> &a,
                     const std::vector<T> &b, cudaDataType_t type,
                     DeviceBuffers &buffers, LtGemm &g) {
  Expected<CUdeviceptr> dA = buffers.upload(a.data(), a.size() * sizeof(T));
  if (!dA)
    return dA.takeError();
  Expected<CUdeviceptr> dB = buffers.upload(b.data(), b.size() * sizeof(T));
  if (!dB)
    return dB.takeError();
  g.inputType = type;
  g.a = *dB; // cuBLASLt's A' is our B
  g.b = *dA; // cuBLASLt's B' is our A
  Expected<CUdeviceptr> dD = buffers.alloc(size_t(p.m) * p.n * 2);
  if (!dD)
    return dD.takeError();
  g.d = *dD;
  return Error::success();
}

/// Uploads random FP8 operands (see uploadOperands).
Error uploadFp8Operands(const CublasLtProblem &p, std::mt19937_64 &rng,
                        DeviceBuffers &buffers, LtGemm &g) {
  std::vector<uint8_t> a = randomFp8(size_t(p.m) * p.k, rng);
  std::vector<uint8_t> b = randomFp8(size_t(p.n) * p.k, rng);
  return uploadOperands(p, a, b, CUDA_R_8F_E4M3, buffers, g);
}

/// Uploads our A's and B's FP32 scales: sets g.aScale (our B's) and
/// g.bScale (our A's).
Error uploadScales(const std::vector<float> &scaleA,
                   const std::vector<float> &scaleB, DeviceBuffers &buffers,
                   LtGemm &g) {
  Expected<CUdeviceptr> dScaleA =
      buffers.upload(scaleA.data(), scaleA.size() * 4);
  if (!dScaleA)
    return dScaleA.takeError();
  Expected<CUdeviceptr> dScaleB =
      buffers.upload(scaleB.data(), scaleB.size() * 4);
  if (!dScaleB)
    return dScaleB.takeError();
  g.aScale = *dScaleB; // cuBLASLt's A' is our B
  g.bScale = *dScaleA; // cuBLASLt's B' is our A
  return Error::success();
}

/// Inputs of one GEMM: `setup` uploads them and describes the GEMM.
using LtSetup =
    function_ref<Error(std::mt19937_64 &, DeviceBuffers &, LtGemm &)>;

/// Checks the problem, runs `setup` and prepares the GEMM.
Expected<std::unique_ptr<CublasLtGemm>> prepareLt(const CublasLtProblem &p,
                                                  LtSetup setup) {
  if (Error error = checkProblem(p))
    return std::move(error);
  Expected<const DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  std::mt19937_64 rng(p.seed);
  auto prepared = std::make_unique<PreparedLt>(*api, p.stream);
  if (Error error = setup(rng, prepared->buffers, prepared->g))
    return std::move(error);
  if (Error error = describeLt(p, *prepared))
    return std::move(error);
  return std::unique_ptr<CublasLtGemm>(std::move(prepared));
}

} // namespace

Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtBf16(const CublasLtProblem &p) {
  return prepareLt(
      p, [&](std::mt19937_64 &rng, DeviceBuffers &buffers, LtGemm &g) {
        std::vector<uint16_t> a = randomBf16(size_t(p.m) * p.k, rng);
        std::vector<uint16_t> b = randomBf16(size_t(p.n) * p.k, rng);
        return uploadOperands(p, a, b, CUDA_R_16BF, buffers, g);
      });
}

static Expected<std::unique_ptr<CublasLtGemm>>
prepareFp8PerTensor(const CublasLtProblem &p, bool fastAccumulation) {
  return prepareLt(
      p, [&](std::mt19937_64 &rng, DeviceBuffers &buffers, LtGemm &g) -> Error {
        g.fastAccumulation = fastAccumulation;
        if (Error error = uploadFp8Operands(p, rng, buffers, g))
          return error;
        // One FP32 scale per operand, on the device (SCALAR_32F, the default
        // mode, so the mode attributes are left unset).
        std::vector<float> scaleA = randomScales(1, rng);
        std::vector<float> scaleB = randomScales(1, rng);
        return uploadScales(scaleA, scaleB, buffers, g);
      });
}

Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8PerTensor(const CublasLtProblem &p) {
  return prepareFp8PerTensor(p, /*fastAccumulation=*/false);
}

Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8PerTensorFastAccum(const CublasLtProblem &p) {
  return prepareFp8PerTensor(p, /*fastAccumulation=*/true);
}

Expected<std::unique_ptr<CublasLtGemm>>
prepareCublasLtFp8BlockScaled(const CublasLtProblem &p) {
#if !MOSS_HAVE_LT_BLOCK_SCALING
  if (Error error = checkProblem(p))
    return std::move(error);
  return createStringError(inconvertibleErrorCode(),
                           "built against cuBLASLt older than 12.9 (no "
                           "VEC128_32F/BLK128x128_32F scale modes)");
#else
  return prepareLt(
      p, [&](std::mt19937_64 &rng, DeviceBuffers &buffers, LtGemm &g) -> Error {
        if (p.k % 128 != 0)
          return createStringError(inconvertibleErrorCode(),
                                   "K must be a multiple of 128");
        if (Error error = uploadFp8Operands(p, rng, buffers, g))
          return error;
        // Scale tensors. Our A [M, K] has one FP32 scale per 1x128 block along
        // K: M x K/128 values, stored (as we read the cuBLASLt documentation)
        // with the M index fastest, i.e. scale[kb * M + m], leading dimension M
        // padded to a multiple of 4 (16 bytes). Our B [N, K] has one FP32 scale
        // per 128x128 block: ceil(N/128) x K/128 values, leading dimension
        // padded to a multiple of 4. The buffers are over-allocated (both
        // dimensions padded) and filled entirely with random values in [0.5,
        // 2), so whichever of these orders the library uses, every scale it
        // reads is a finite random value; timings do not depend on which scale
        // lands on which block.
        auto roundUp4 = [](size_t x) { return (x + 3) / 4 * 4; };
        size_t kBlocks = size_t(p.k) / 128;
        size_t nBlocks = (size_t(p.n) + 127) / 128;
        std::vector<float> scaleA =
            randomScales(roundUp4(p.m) * roundUp4(kBlocks), rng);
        std::vector<float> scaleB =
            randomScales(roundUp4(nBlocks) * roundUp4(kBlocks), rng);
        if (Error error = uploadScales(scaleA, scaleB, buffers, g))
          return error;
        // cuBLASLt's A' is our B (128x128 blocks); its B' is our A (1x128).
        g.aScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        g.bScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        return Error::success();
      });
#endif
}

CublasLtGemm::~CublasLtGemm() = default;

Expected<double> timeCublasLt(const CublasLtProblem &p,
                              Expected<std::unique_ptr<CublasLtGemm>> gemm) {
  if (!gemm)
    return gemm.takeError();
  Expected<std::vector<float>> times = runtime::timeWithEvents(
      [&] { return (*gemm)->run(); }, p.warmup, p.repeat, p.stream);
  if (!times)
    return times.takeError();
  if (times->empty())
    return createStringError(inconvertibleErrorCode(), "no timed repeats");
  return static_cast<double>((*times)[times->size() / 2]);
}

} // namespace moss::bench
