// moss/quantize/args.cuh - the launch arguments of every quantizer kernel,
// the one definition the templates and the host's launch code
// (runtime/api/Quantizer.cpp, which compiles this file as plain C++) share.
// Plain C types only: the host sees no CUDA headers here.
#pragma once

namespace moss::quantize {

/// The row-major outputs of a dual-layout quantize (one read of X, both
/// layouts); Args's own outputs then hold the transposed layout's. Null in
/// every other quantization.
struct RowLayoutArgs {
  /// Codes [rows, cols].
  unsigned char *q;
  /// Block scales over [rows, cols / block]: E8M0 bytes or FP32.
  void *local;
  /// FP32 global scales ([1] or one per row).
  float *global;
  /// Reduce-pass accumulators, zeroed before it: max magnitude bits ([1] or
  /// per row), and a row fold's largest finite block per row.
  unsigned int *globalBits;
  unsigned int *foldBits;
  /// Counters the quantize pass adds to: saturated values, non-finite blocks.
  unsigned long long *saturated;
  unsigned long long *nonFinite;
};

/// A batched launch's strides (QuantizeSpec::batched: G casts of one shape
/// with a given scale each, such as a mixture of experts' weights): the slice
/// at blockIdx.z adds blockIdx.z times each stride, in bytes, to its
/// pointer (batch.cuh). The reduce words are never sliced: a batched
/// launch has no reduce pass.
struct BatchStrides {
  long long x, q, global, scaleIn, counters;
  /// The row-major layout's of a dual-layout cast (Args::row).
  long long rowQ, rowGlobal, rowCounters;
  /// A fused AdamW step's gradient and moments (AdamWArgs).
  long long grad, expAvg, expAvgSq;
};

/// A fused AdamW step (QuantizeSpec::adamw, adamw.cuh): the weight at
/// Args::x is updated in place before its cast, with these FP32 states of
/// its shape and the step's constants (moss::numerics::AdamWCoefficients).
struct AdamWArgs {
  const float *grad;
  float *expAvg;
  float *expAvgSq;
  float decay, oneMinusBeta1, oneMinusBeta2, beta2, negStepSize, bias2Sqrt, eps;
};

/// Launch arguments of every quantizer kernel (all device pointers).
struct Args {
  /// Input [rows, cols], row-major, FP32 or BF16.
  const void *x;
  int rows;
  int cols;
  /// Codes [rows, cols], or [cols, rows] when transposed.
  unsigned char *q;
  /// Block scales: E8M0 bytes or FP32, row-major over the output's blocks.
  void *local;
  /// FP32 global scales written by the quantize pass ([1] or one per
  /// output row).
  float *global;
  /// Reduce-pass accumulators: max magnitude bits ([1] or per output row),
  /// zeroed before the reduce pass.
  unsigned int *globalBits;
  /// Row fold with a reduce pass (transposed, or row-wise in segments):
  /// each output row's largest finite block's bits (globalBits itself for a
  /// global per row).
  unsigned int *foldBits;
  /// The caller's scale for kGlobalFromScale.
  const float *scaleIn;
  /// Counters the quantize pass adds to (zeroed by the caller).
  unsigned long long *saturated;
  unsigned long long *nonFinite;
  /// Row-wise kernel: input rows staged in dynamic shared memory at once
  /// (1 to kMaxRowStages).
  int stages;
  RowLayoutArgs row;
  /// Row-wise kernel, optional (null: output row r quantizes input row r):
  /// output row r quantizes input row gatherRows[r] of the
  /// gatherSourceRows rows at x, kept in [0, gatherSourceRows) (a
  /// mixture-of-experts dispatch: the tokens in expert order). Transposed
  /// kernel, likewise optional: X's row r is that input row, or zeros for
  /// an index outside [0, gatherSourceRows).
  const int *gatherRows;
  int gatherSourceRows;
  /// A dual-layout quantize in two kernels: the row-wise kernel leaves each
  /// CTA's largest input magnitudes per column in columnMax ([gridDim.x]
  /// rows of cols BF16 or FP32 magnitudes, in the input's own format), and
  /// the column pass reduces its columnMaxParts rows into the transposed
  /// quantize pass's words (Args::globalBits).
  unsigned int *columnMax;
  int columnMaxParts;
  /// Read only by a batched kernel.
  BatchStrides batch;
  /// Read only by the fused AdamW kernel.
  AdamWArgs adamw;
};

} // namespace moss::quantize
