//===- Quantizer.h - The quantizers on the GPU ------------------*- C++ -*-===//
//
// Every scheme of moss::numerics::quantize, run on the GPU through the JIT:
// the kernels are generated for the scheme and K, compiled with NVRTC once,
// cached, and launched on the caller's stream. The output bits equal the
// host reference's (docs/NUMERICS-CONTRACT.md).
//
// Passes: schemes whose scale lives within a row the CTA owns (per-row,
// two-level with a per-row global, per-group, MXFP8) read the input once.
// A per-tensor global (per-tensor, two-level with a tensor global), and any
// global of a transposed quantization, needs the whole tensor or column
// first: a reduce pass, then the quantize pass (the second pass walks the
// rows in reverse so that what the first left in L2 is reused).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_QUANTIZER_H
#define MOSS_RUNTIME_API_QUANTIZER_H

#include "moss/Compiler/QuantizerSource.h"
#include "moss/Numerics/AdamW.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/StreamWorkspaces.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cuda.h>
#include <memory>
#include <string>
#include <unordered_map>

namespace moss::runtime {

/// Device buffers of one quantization.
struct QuantizeBuffers {
  /// The input, 16-byte aligned.
  CUdeviceptr x = 0;
  /// Codes, 16-byte aligned.
  CUdeviceptr q = 0;
  /// Block scales; required exactly when the scheme has them.
  CUdeviceptr local = 0;
  /// FP32 global scales; required exactly when the scheme has them.
  CUdeviceptr global = 0;
  /// Two uint64 counters the kernels add to: saturated values and
  /// non-finite blocks. The caller zeroes them. Optional.
  CUdeviceptr counters = 0;
  /// Optional, per-tensor quantize only (not castWithScale): one FP32 that
  /// receives the tensor's exact amax, max |x| as the reduce pass found it
  /// (NaN or Inf when x holds NaN or Inf), copied on the stream after the
  /// cast. 4-byte aligned. The weight scaler anchors its prediction on it.
  CUdeviceptr amax = 0;
  /// Optional, row-major and transposed quantizations (not 2-D blocks, not
  /// both layouts): int32 [spec.rows] on the device, 4-byte aligned; the
  /// quantized matrix's row r is input row gatherRows[r] of the
  /// gatherSourceRows rows at x. Row-major: indices are kept in
  /// [0, gatherSourceRows). Transposed: an index outside that range (-1,
  /// say) is a row of zeros (a mixture-of-experts layer's tokens with each
  /// expert's padded to whole blocks). The bits are those of quantizing the
  /// gathered rows.
  CUdeviceptr gatherRows = 0;
  int64_t gatherSourceRows = 0;
};

/// The optimizer state of one weight in a fused AdamW step
/// (QuantizeSpec::adamw): FP32 arrays of the weight's shape, 16-byte
/// aligned. The gradient is read; the moments are updated in place.
struct AdamWBuffers {
  CUdeviceptr grad = 0;
  CUdeviceptr expAvg = 0;
  CUdeviceptr expAvgSq = 0;
};

/// Checks one weight's AdamW state: present and 16-byte aligned.
llvm::Error checkAdamWBuffers(const AdamWBuffers &state);

/// A fused AdamW step of castWithScales's casts: the step's constants and
/// each cast's state.
struct AdamWUpdate {
  numerics::AdamWCoefficients coefficients;
  llvm::ArrayRef<AdamWBuffers> state;
};

/// The kernels of one quantization, compiled (or found in `cache`) as
/// GpuQuantizer compiles them, so under the same cache keys: what `moss-jit
/// cache warm --quantizers` puts in the disk cache without a GPU. The
/// reduce pass is a program of its own (QuantizerSource::reduceSource),
/// compiled on a second thread beside the quantize pass's. A dual-layout
/// spec in two kernels (QuantizerVariant::columnMax) also runs the
/// transposed spec's quantize pass: those programs are compiled meanwhile
/// too, and cached on their own.
struct CompiledQuantizer {
  compiler::QuantizerSource source;
  /// QuantizerSource::quantizeSource's program, and reduceSource's (null
  /// without a reduce pass).
  std::shared_ptr<const KernelEntry> entry, reduceEntry;
};
llvm::Expected<CompiledQuantizer>
compileQuantizer(KernelCache &cache, const compiler::QuantizeSpec &spec,
                 bool withScale);

/// The spec whose kernels run `spec`: `spec` itself, or its any-K twin
/// (QuantizeSpec::anyK) where `cache` (memory or disk) holds the twin's
/// programs and not all of spec's own: a first call of a new K then loads
/// kernels instead of compiling them (`moss-jit cache warm --quantizers`
/// puts the twins on disk). Compiles nothing.
llvm::Expected<compiler::QuantizeSpec>
selectCompiledSpec(KernelCache &cache, const compiler::QuantizeSpec &spec,
                   bool withScale);

/// Whether GpuQuantizer::castWithScales casts `rowMajor`'s (and, for a
/// dual-layout spec, `transposed`'s) buffers in one launch: two casts or
/// more whose every address steps by one stride from a cast to the next,
/// whose outputs do not overlap, and whose pointers are as aligned as the
/// first cast's; for a fused AdamW step (`adamw`, each cast's state), whose
/// weights and moments step alike and do not overlap.
bool castsShareOneLaunch(const compiler::QuantizeSpec &spec,
                         llvm::ArrayRef<QuantizeBuffers> rowMajor,
                         llvm::ArrayRef<QuantizeBuffers> transposed,
                         llvm::ArrayRef<AdamWBuffers> adamw = {});

/// Runs quantizations in one CUDA context: the one current at its first
/// call (a call from another context is an error). Not thread-safe: use one
/// per thread.
class GpuQuantizer {
public:
  /// A quantizer for the current context's device with `smCount` SMs,
  /// compiling through `cache`.
  GpuQuantizer(KernelCache &cache, int smCount);
  ~GpuQuantizer();
  GpuQuantizer(const GpuQuantizer &) = delete;
  GpuQuantizer &operator=(const GpuQuantizer &) = delete;

  /// Quantizes on `stream`. Everything is checked before any launch: the
  /// shapes, null or misaligned pointers, the scheme. The first call for a
  /// scheme, format, input type and K compiles (or loads from the cache);
  /// later calls only launch.
  llvm::Error quantize(const compiler::QuantizeSpec &spec,
                       const QuantizeBuffers &buffers, CUstream stream);

  /// Compiles (or loads from the cache) the kernels quantize() launches for
  /// `spec`, without launching them.
  llvm::Error prepare(const compiler::QuantizeSpec &spec);

  /// Per-tensor cast with a scale the caller keeps on the device (the
  /// AutoScaler's prediction): codes = encode(x / *scale), one pass, no
  /// host synchronization. `scale` is an FP32 device pointer.
  llvm::Error castWithScale(const compiler::QuantizeSpec &spec,
                            CUdeviceptr scale, const QuantizeBuffers &buffers,
                            CUstream stream);

  /// Both layouts of `spec` (a dual-layout spec, QuantizeSpec::bothLayouts)
  /// from one read of the input: `rowMajor` receives the row-major
  /// quantization the options describe, `transposed` that of the transpose
  /// (getTransposedSpec), the bits of two quantize() calls. The input is
  /// rowMajor.x; transposed.x must be 0 or the same. Each layout has its own
  /// counters; an amax, given in either, is the tensor's. With `scale` (an
  /// FP32 device pointer), a per-tensor cast with that scale, as
  /// castWithScale.
  llvm::Error quantizeBothLayouts(const compiler::QuantizeSpec &spec,
                                  const QuantizeBuffers &rowMajor,
                                  const QuantizeBuffers &transposed,
                                  CUstream stream, CUdeviceptr scale = 0);

  /// G per-tensor casts of `spec`'s shape, cast g with the FP32 scale at
  /// `scales` + 4 g (a device array): cast g reads rowMajor[g].x and writes
  /// rowMajor[g]'s outputs (and, for a dual-layout spec, transposed[g]'s)
  /// with the bits of castWithScale (quantizeBothLayouts with a scale).
  /// Where each buffer's address steps by one stride from a cast to the
  /// next and the casts' outputs do not overlap (G experts' [N, K] weights
  /// in one [G, N, K] tensor, say: castsShareOneLaunch), the G casts are one
  /// launch; otherwise they are launched one at a time.
  ///
  /// With `adamw` (and spec.adamw), each cast's input is a weight that the
  /// AdamW step first updates in place, with adamw->state[g]; its codes are
  /// those of the updated weight (a cast of one read: the fused optimizer
  /// step). The state's arrays must not overlap the weights or each other.
  llvm::Error castWithScales(const compiler::QuantizeSpec &spec,
                             CUdeviceptr scales,
                             llvm::ArrayRef<QuantizeBuffers> rowMajor,
                             llvm::ArrayRef<QuantizeBuffers> transposed,
                             CUstream stream,
                             const AdamWUpdate *adamw = nullptr);

  /// The generated kernels; the launch path looks them up by this key.
  struct PlanKey {
    uint64_t bits = 0;
    int64_t k = 0;
    bool operator==(const PlanKey &other) const {
      return bits == other.bits && k == other.k;
    }
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey &key) const {
      return size_t(key.bits * 0x9E3779B97F4A7C15ull) ^ size_t(key.k);
    }
  };
  struct Plan;

private:
  llvm::Expected<const Plan *> getPlan(const compiler::QuantizeSpec &spec,
                                       bool withScale);
  /// A batched launch: its casts and their strides.
  struct Batch;
  /// `rowMajor`: the row-major outputs of a dual-layout spec, whose
  /// `buffers` are then the transposed layout's. A batched spec launches
  /// `batch`'s casts (`buffers` and `rowMajor` are the first's).
  /// `adamw`: a fused AdamW step's constants and the (first) cast's state.
  llvm::Error run(const compiler::QuantizeSpec &spec,
                  const QuantizeBuffers &buffers,
                  const QuantizeBuffers *rowMajor, CUdeviceptr scale,
                  CUstream stream, const Batch *batch = nullptr,
                  const AdamWUpdate *adamw = nullptr);
  /// A dual-layout spec in two kernels (QuantizerVariant::columnMax): the
  /// row-wise kernel and the column pass of `plan`, then the transposed
  /// spec's quantize pass.
  llvm::Error runInTwoKernels(const compiler::QuantizeSpec &spec,
                              const Plan &plan,
                              const QuantizeBuffers &transposed,
                              const QuantizeBuffers &rowMajor, CUstream stream);
  /// The workspace of launches on `stream` (two uint64 counters, then
  /// `globalWords` words): one per stream and per CUDA graph capture
  /// (StreamWorkspaces).
  llvm::Expected<CUdeviceptr> getWorkspace(int64_t globalWords,
                                           CUstream stream);

  KernelCache &cache;
  int smCount;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  /// Reduce-pass words, column maxima and fallback counters.
  StreamWorkspaces workspaces;
  ContextBinding context;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_QUANTIZER_H
