//===- GemmSpec.h - A GEMM to compile, as a plain struct --------*- C++ -*-===//
//
// The description of one block-scaled FP8 GEMM that callers without MLIR
// (the runtime's Gemm API, moss-jit, the tuner) hand to the compiler:
// shapes, operand formats and scaling schemes, and the epilogue. It mirrors
// `moss.gemm` (docs/DIALECT.md) field for field; compileGemm() builds the op
// from it. No MLIR types appear here.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_GEMMSPEC_H
#define MOSS_COMPILER_GEMMSPEC_H

#include "moss/Numerics/FP8.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Fold.h"
#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace moss::compiler {

/// The floating-point types of the GEMM epilogue (output, bias, accumulate
/// operand). The values are the ABI's `moss::gemm_kernel::kBF16/kF16/kF32`.
enum class FloatType : uint8_t { BF16 = 0, F16 = 1, F32 = 2 };

/// What the tensor cores multiply (docs/NUMERICS-CONTRACT.md section 7).
enum class MmaType : uint8_t {
  /// f16 for f32 outputs, FP8 otherwise (GemmSpec::multipliesInF16).
  Auto = 0,
  /// The FP8 codes as they are: full speed; the tensor cores' sums of a
  /// 32-element block lose about 2^-14 of their size, so f32 outputs are
  /// within about 1e-4 of the FP64 reference.
  FP8 = 1,
  /// Every FP8 code widened exactly to f16 on chip: exact products summed
  /// in FP32, f32 outputs within 1e-5, at about a third of the FP8 speed.
  /// Needs 128-row tiles.
  F16 = 2,
};

/// Bytes of one element of `type`.
unsigned getByteWidth(FloatType type);

/// "bf16", "f16" or "f32".
const char *getName(FloatType type);

/// The rounding the accuracy contract allows an output of `type`
/// (docs/NUMERICS-CONTRACT.md section 7): 2^-8 |x| for bf16, 2^-11 |x| plus
/// half the smallest subnormal (2^-25) for f16, 2^-23 |x| for f32.
numerics::OutputRounding getOutputRounding(FloatType type);

/// One GEMM `D[M, N] = epilogue(sum_k dqA[m, k] * dqB[n, k])` with K-major
/// operands A [M, K] and B [N, K] (docs/METHOD.md section 2).
struct GemmSpec {
  /// The value of `m` for a GEMM whose M is only known at launch.
  static constexpr int64_t kDynamic = -1;

  /// Rows of A and of the output, or kDynamic. A static M specializes the
  /// kernel to it (moss-specialize-shapes with m=M).
  int64_t m = kDynamic;
  /// Rows of B and columns of the output; must be static.
  int64_t n = 0;
  /// The reduction dimension; must be static and a multiple of 32.
  int64_t k = 0;

  /// FP8 formats of the operands (any pairing).
  numerics::Fp8Format a = numerics::Fp8Format::E4M3;
  numerics::Fp8Format b = numerics::Fp8Format::E4M3;
  /// Scaling scheme of each operand: kind, block rows and columns, and the
  /// two-level global scope.
  numerics::ScalingScheme aScaling;
  numerics::ScalingScheme bScaling;

  /// Element type of the output.
  FloatType out = FloatType::BF16;
  /// Element type of the bias vector [N], if there is one.
  std::optional<FloatType> bias;
  /// Element type of the accumulate operand C [M, N] (`+ beta * C`), if
  /// there is one: f32 or the output type.
  std::optional<FloatType> accumulate;
  /// Multiplier of C; 1 when unset and C is given. Only valid with C.
  std::optional<float> beta;
  /// Whether the kernel also returns max |output|.
  bool amax = false;
  /// Promote the tensor cores' partial sums into FP32 every `promoteK`
  /// (32, 64 or 128) elements of K even where the schemes need no
  /// promotion (per-tensor, per-row) or need it less often; 0: the schemes'
  /// own interval. More accurate, somewhat slower
  /// (docs/NUMERICS-CONTRACT.md section 7).
  int64_t promoteK = 0;
  /// What the tensor cores multiply; Auto resolves by the output type.
  MmaType mma = MmaType::Auto;
  /// Where the E8M0 block factors of two-level and MXFP8 operands go
  /// (docs/NUMERICS-CONTRACT.md section 8); unset: getFold()'s default.
  std::optional<numerics::BlockScaleFold> fold;
  /// Set only by getFoldingKernelSpec: A keeps its E8M0 block factors and
  /// the kernel's consumer warpgroups fold them into each stage's codes
  /// (the row fold, bit for bit; templates/moss/gemm/consumer_fold.cuh).
  /// Its arithmetic is getKernelSpec's, with no pass before it. Slower than
  /// the pass, so only asked for (GemmOptions::foldAInKernel).
  bool kernelFoldsA = false;
  /// An m-grouped GEMM of this many experts (a mixture-of-experts layer);
  /// 0 for a plain GEMM. Expert g multiplies its rows of A by its own
  /// B_g [N, K]: B is [groups * N, K] (B_g at row g * N), B's block scales
  /// are stacked alike, its global scales are [groups] (per-tensor) or
  /// [groups * N] (per-row), the bias is [groups, N]. A's rows and the
  /// output's are sorted by expert; the launch gives each expert's first row
  /// on the device (GemmBuffers::groupOffsets), so M is dynamic and any
  /// expert may have no rows.
  int64_t groups = 0;
  /// With groups > 0, the masked layout (decoding, CUDA graphs) instead of
  /// the contiguous one: A and the output hold M / groups rows per expert
  /// (a [groups, M / groups, K] batch), the launch gives each expert's row
  /// count on the device, and the output's rows past a count are not
  /// written.
  bool maskedGroups = false;
  /// With groups > 0, k-grouped instead of m-grouped (the weight gradient
  /// of a mixture-of-experts layer, K being the tokens): A [M, K] and B
  /// [N, K] are shared, and expert g multiplies their columns [offsets[g],
  /// offsets[g + 1]) into its own output D_g [M, N], rows g * M of the
  /// [groups * M, N] output (and of C). M and N are static, K is dynamic
  /// (k = kDynamic): the launch gives K, a multiple of 128, and the offsets
  /// on the device, each a multiple of 128. An expert without columns gets
  /// zeros (times the epilogue). No bias, no fold (its operands keep their
  /// block factors: fold None).
  bool groupedK = false;
  /// The most experts a grouped GEMM takes.
  static constexpr int64_t kMaxGroups = 4096;

  /// Whether M is dynamic.
  bool isDynamicM() const { return m == kDynamic; }

  /// The GEMM of a launch of `extent`, the size a launch gives: a
  /// k-grouped GEMM's with K = extent, any other's with M = extent. What the
  /// checks and the scale counts of that launch read.
  GemmSpec atExtent(int64_t extent) const {
    GemmSpec at = *this;
    (groupedK ? at.k : at.m) = extent;
    return at;
  }

  /// Whether the kernel multiplies in f16: asked for, or by default for an
  /// f32 output, which the accuracy contract holds to 1e-5 (FP8 gives about
  /// 1e-4). The one place Auto is resolved.
  bool multipliesInF16() const {
    return mma == MmaType::F16 ||
           (mma == MmaType::Auto && out == FloatType::F32);
  }

  /// Launched with fewer rows than this, a GEMM does not fold by default:
  /// the fold's extra pass costs more than the promotion it saves
  /// (docs/PERFORMANCE.md, "Design measurements behind the code").
  static constexpr int64_t kMinRowsToFold = 1024;

  /// The fold the GEMM applies at `rows` rows (kDynamic: the static M, else
  /// the heuristic's assumed M): `fold` when set; else None for f32 outputs
  /// (the accuracy contract holds them to 1e-5) and below kMinRowsToFold
  /// rows, and Row otherwise. None when no operand has E8M0 factors. The
  /// one place the default is decided.
  numerics::BlockScaleFold getFold(int64_t rows = kDynamic) const;

  /// The GEMM the kernel computes at `rows` rows: each operand that
  /// getFold(rows) folds replaced by its folded scheme (per-row or
  /// per-group 1x128), and the fold None.
  GemmSpec getKernelSpec(int64_t rows = kDynamic) const;

  /// Whether a kernel can fold A itself at `rows` rows (kernelFoldsA):
  /// getFold(rows) is Row, A has E8M0 factors of 32-element blocks, K is a
  /// multiple of 128, the FP8 MMA without promoteK, and B after its own
  /// fold has no block scales. Its tilings then have TileM 128 or 256 and
  /// no split-K.
  bool canFoldAInKernel(int64_t rows = kDynamic) const;

  /// The GEMM of the kernel that folds A itself at `rows` rows:
  /// getKernelSpec(rows), except that where canFoldAInKernel(rows) A keeps
  /// its scheme and kernelFoldsA is set. B's fold, if any, stays a pass.
  GemmSpec getFoldingKernelSpec(int64_t rows = kDynamic) const;

  /// A short description, e.g. (a fold appears when `fold` is set) "?x11008x4096 e4m3 two-level(row, 32) x e4m3
  /// per-tensor -> bf16".
  std::string str() const;
};

/// Checks what can be checked without building the IR (the op verifier
/// checks the rest): positive static N and K, M positive or kDynamic.
llvm::Error checkShapes(const GemmSpec &spec);

/// Checks a fold the spec asks for (`fold` set, not None): an operand with
/// E8M0 factors, each of whose blocks and K the fold takes
/// (numerics::checkFold).
llvm::Error checkFold(const GemmSpec &spec);

/// Checks that the GEMM kernels can be compiled for `arch`: sm_90a only,
/// the one target with wgmma and the TMA paths they use. The error is one
/// line naming what is supported.
llvm::Error checkGemmArch(llvm::StringRef arch);

/// The machine a kernel is compiled for. Defaults: NVIDIA H200 (sm_90a).
struct TargetInfo {
  /// Streaming multiprocessors.
  unsigned smCount = 132;
  /// Dynamic shared memory one thread block may opt into (227 KiB).
  unsigned sharedMemoryPerBlock = 232448;
  /// 32-bit registers per SM.
  unsigned registersPerSm = 65536;
  /// CUDA architecture the kernel targets (for the runtime's NVRTC call).
  std::string arch = "sm_90a";

  /// The H200 (same as the defaults).
  static TargetInfo h200() { return TargetInfo(); }
};

} // namespace moss::compiler

#endif // MOSS_COMPILER_GEMMSPEC_H
