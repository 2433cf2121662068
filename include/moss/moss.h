/*===- moss.h - The MOSS-JIT C API -----------------------------*- C -*-===//
 *
 * A C embedding API for the quantizers and the GEMM (C99 and C++). Handles are
 * opaque; every fallible function returns a moss_error_t, NULL on success,
 * which the caller owns and frees with moss_error_destroy(). Device memory
 * and streams are passed as integers and void pointers compatible with the
 * CUDA driver API (CUdeviceptr, CUstream), so this header needs no cuda.h.
 *
 * Versioning: MOSS_API_VERSION is bumped on incompatible changes; structs
 * passed by the caller that may grow begin with struct_size.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOSS_MOSS_H
#define MOSS_MOSS_H

#include <stddef.h>
#include <stdint.h>

#include "moss/Version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's API. */
#define MOSS_API_VERSION 2

/* The API version the library was built with (compare with
 * MOSS_API_VERSION). */
int moss_api_version(void);

/* The library's project version, MOSS_VERSION_STRING of its build
 * ("MAJOR.MINOR.PATCH"). */
const char *moss_version(void);

/*===--- Errors -----------------------------------------------------------===*/

/* What kind of failure an error object reports. */
typedef enum moss_error_code_t {
  /* Not an error: what moss_error_code(NULL) returns. */
  MOSS_ERROR_NONE = 0,
  /* A null handle or pointer, a bad enum value, an unsupported spec. */
  MOSS_ERROR_INVALID_ARGUMENT = 1,
  /* No CUDA driver, or no GPU with the requested ordinal. */
  MOSS_ERROR_NO_DEVICE = 2,
  /* NVRTC is missing or failed to compile a kernel. */
  MOSS_ERROR_COMPILE = 3,
  /* A CUDA driver call failed. */
  MOSS_ERROR_CUDA = 4,
  /* Anything else. */
  MOSS_ERROR_INTERNAL = 5
} moss_error_code_t;

/* An error object: a code and a message. NULL means success. */
typedef struct moss_error *moss_error_t;

/* The error's message ("" for NULL); valid until moss_error_destroy(). */
const char *moss_error_message(moss_error_t error);

/* The error's code (MOSS_ERROR_NONE for NULL). */
moss_error_code_t moss_error_code(moss_error_t error);

/* Frees an error object; NULL is ignored. */
void moss_error_destroy(moss_error_t error);

/*===--- Quantization specs -----------------------------------------------===*/

/* Element type of the input matrix. */
typedef enum moss_input_type_t {
  MOSS_INPUT_F32 = 0,
  MOSS_INPUT_BF16 = 1
} moss_input_type_t;

/* The scaling schemes (docs/NUMERICS-CONTRACT.md). */
typedef enum moss_scheme_t {
  MOSS_SCHEME_PER_TENSOR = 0,
  MOSS_SCHEME_PER_ROW = 1,
  MOSS_SCHEME_PER_GROUP = 2,
  MOSS_SCHEME_MXFP8 = 3,
  /* MOSS two-level: an FP32 global scale times an E8M0 scale per block
     ("moss" in the CLIs and the Python package). */
  MOSS_SCHEME_MOSS = 4,
  MOSS_SCHEME_TWO_LEVEL = MOSS_SCHEME_MOSS /* the same, by its method */
} moss_scheme_t;

/* Granularity of the two-level scheme's global scale. */
typedef enum moss_global_scope_t {
  MOSS_GLOBAL_TENSOR = 0,
  MOSS_GLOBAL_ROW = 1
} moss_global_scope_t;

/* The FP8 format of the codes. */
typedef enum moss_fp8_format_t {
  MOSS_FORMAT_E4M3 = 0,
  MOSS_FORMAT_E5M2 = 1
} moss_fp8_format_t;

/* Where the E8M0 block factors of two-level and MXFP8 operands go
 * (docs/NUMERICS-CONTRACT.md section 8). */
typedef enum moss_fold_t {
  /* MOSS_FOLD_ROW for bf16 and f16 outputs launched with at least 1024
   * rows; MOSS_FOLD_NONE for f32 outputs and fewer rows. */
  MOSS_FOLD_AUTO = 0,
  /* Exact: every 32-of-K partial sum promoted with its factors (slow). */
  MOSS_FOLD_NONE = 1,
  /* Codes refer to the largest factor of their 128-wide K group: one
   * promotion per 128 of K; K must be a multiple of 128. */
  MOSS_FOLD_128 = 2,
  /* Codes refer to the largest factor of their row: the row's factor goes
   * to the epilogue, no promotion in the main loop (fastest). */
  MOSS_FOLD_ROW = 3
} moss_fold_t;

/* One quantization of a row-major [rows, cols] device matrix whose cols axis
 * is the GEMM reduction axis K. The enum fields are int32_t so that the
 * layout is fixed; they hold the values of the enum named beside them. Fill
 * with moss_quantize_spec_init(), then set the shape and what differs. */
typedef struct moss_quantize_spec_t {
  /* sizeof(moss_quantize_spec_t) of the caller's header (API version 2 on;
   * version 1's spec had no struct_size). */
  size_t struct_size;
  int64_t rows;
  int64_t cols;
  int32_t input;        /* moss_input_type_t */
  int32_t scheme;       /* moss_scheme_t */
  /* Block extent across rows: 1 (or 0, meaning 1), or block_cols for
   * square per-group blocks (e.g. 128x128 weights). */
  int64_t block_rows;
  /* Block extent along K: per-group, MXFP8 (always 32), two-level; 0 for
   * the scheme's default (128 per-group, 32 otherwise); ignored by
   * per-tensor and per-row. */
  int64_t block_cols;
  int32_t global_scope; /* moss_global_scope_t; two-level only */
  int32_t format;       /* moss_fp8_format_t */
  /* Nonzero: quantize the transpose of the input (codes [cols, rows]). */
  int32_t transpose;
  /* moss_fold_t (was a reserved 0): MOSS_FOLD_ROW or MOSS_FOLD_128 write a
   * two-level or MXFP8 result folded, GEMM-ready (docs/NUMERICS-CONTRACT.md
   * section 8): FP32 factors in `global` ([rows]) or `local` ([rows,
   * K/128]) instead of E8M0 ones. MOSS_FOLD_AUTO (0) and
   * MOSS_FOLD_NONE: no fold. */
  int32_t fold;
} moss_quantize_spec_t;

/* Sets `*spec` to MOSS (two-level, blocks of 32 along K, a global per row)
 * with E4M3 codes, bf16 input, no transpose and no fold; rows and cols 0. */
void moss_quantize_spec_init(moss_quantize_spec_t *spec);

/* The output shapes of a spec. */
typedef struct moss_quantize_layout_t {
  /* Codes, one byte each, [code_rows, code_cols]. */
  int64_t code_rows;
  int64_t code_cols;
  /* Block scales [local_rows, local_cols] of local_element_bytes each (1:
   * E8M0, 4: FP32); all 0 when the scheme has none. */
  int64_t local_rows;
  int64_t local_cols;
  int64_t local_element_bytes;
  /* FP32 global scales; 0 when the scheme has none. */
  int64_t global_count;
} moss_quantize_layout_t;

/* Device buffers of one quantization, as CUdeviceptr values. */
typedef struct moss_quantize_buffers_t {
  uint64_t x;        /* the input, 16-byte aligned */
  uint64_t q;        /* the codes, 16-byte aligned */
  uint64_t local;    /* block scales: given exactly when the scheme has them */
  uint64_t global;   /* FP32 global scales: likewise */
  /* Optional (0): two uint64 counters the kernels add to (saturated values,
   * non-finite blocks); the caller zeroes them. 8-byte aligned. */
  uint64_t counters;
} moss_quantize_buffers_t;

/* Writes the output shapes of `spec` to `*out`. Needs no GPU. Fails with
 * MOSS_ERROR_INVALID_ARGUMENT, naming the bad value, for a spec that
 * moss_quantize() would reject. */
moss_error_t moss_quantize_layout(const moss_quantize_spec_t *spec,
                                  moss_quantize_layout_t *out);

/* Host buffers of one reference quantization (CPU pointers, no alignment
 * needed). */
typedef struct moss_quantize_host_buffers_t {
  /* The input: float, or bf16 as uint16_t bit patterns (spec->input). */
  const void *x;
  uint8_t *q;
  /* Block scales (E8M0 bytes, or FP32) and FP32 global scales: given
   * exactly when the scheme has them, as for moss_quantize. */
  void *local;
  float *global;
  /* Optional (NULL): two counters the quantization adds to, as for
   * moss_quantize (saturated values, non-finite blocks). */
  uint64_t *counters;
} moss_quantize_host_buffers_t;

/* Writes the output shapes of `spec` under moss_quantize_host()'s rules,
 * which take any shape whose K the scheme's blocks divide (the GPU
 * quantizers' rules, which moss_quantize_layout checks, are stricter).
 * Fails with MOSS_ERROR_INVALID_ARGUMENT, naming the bad value, for a spec
 * that moss_quantize_host() would reject. */
moss_error_t moss_quantize_host_layout(const moss_quantize_spec_t *spec,
                                       moss_quantize_layout_t *out);

/* Quantizes on the host with the reference quantizers
 * (docs/NUMERICS-CONTRACT.md): the bits moss_quantize writes for the same
 * spec and input. Synchronous; needs no GPU. */
moss_error_t moss_quantize_host(const moss_quantize_spec_t *spec,
                                const moss_quantize_host_buffers_t *buffers);

/*===--- Contexts ---------------------------------------------------------===*/

/* A GPU (its primary context), a kernel cache and a quantizer. Not
 * thread-safe: use one context per thread. */
typedef struct moss_context *moss_context_t;

/* Options of moss_context_create(). Fill with moss_context_options_init(). */
typedef struct moss_context_options_t {
  /* sizeof(moss_context_options_t) of the caller's header. */
  size_t struct_size;
  /* The CUDA device ordinal. */
  int32_t device_ordinal;
  /* The kernel cache directory; NULL means $MOSS_CACHE_DIR, else
   * $XDG_CACHE_HOME/moss, else ~/.cache/moss. Copied. */
  const char *cache_directory;
} moss_context_options_t;

/* Sets `*options` to the defaults: device 0, the default cache directory. */
void moss_context_options_init(moss_context_options_t *options);

/* Opens a context on `*options`' device into `*out` (set to NULL on
 * failure). MOSS_ERROR_NO_DEVICE when there is no driver or no such GPU. */
moss_error_t moss_context_create(const moss_context_options_t *options,
                                 moss_context_t *out);

/* Frees a context and its device memory; NULL is ignored. */
void moss_context_destroy(moss_context_t context);

/*===--- Quantization -----------------------------------------------------===*/

/* Quantizes on `stream` (a CUstream; NULL is the default stream),
 * asynchronously. Everything is checked before any launch. The first call
 * for a kind of spec compiles its kernels (or loads them from the cache). */
moss_error_t moss_quantize(moss_context_t context,
                           const moss_quantize_spec_t *spec,
                           const moss_quantize_buffers_t *buffers,
                           void *stream);

/* moss_quantize of gathered rows (a mixture-of-experts dispatch: the tokens
 * in expert order, each as often as it is routed): the quantized
 * [spec->rows, spec->cols] matrix's row r is row gather_rows[r] of the
 * [source_rows, spec->cols] input at buffers->x, with the bits of
 * quantizing the gathered rows. `gather_rows` is the device address of
 * spec->rows int32 indices (4-byte aligned), read on the device. Row-major
 * quantizations keep them in [0, source_rows). Transposed ones (K-major
 * over the gathered rows, a k-grouped GEMM's operands) read an index
 * outside that range, -1 say, as a row of zeros: each expert's tokens
 * padded to whole blocks without a padded copy. Not for blocks spanning
 * several rows and columns (square per-group), not both layouts. */
moss_error_t moss_quantize_gathered(moss_context_t context,
                                    const moss_quantize_spec_t *spec,
                                    const moss_quantize_buffers_t *buffers,
                                    uint64_t gather_rows, int64_t source_rows,
                                    void *stream);

/* A quantization prepared once and launched many times: moss_quantize with
 * the spec's conversion, its checks and the kernels' compile (or cache
 * load) done at creation. A plan uses its context: call it where the
 * context may be used (one thread at a time), and destroy it before the
 * context. */
typedef struct moss_quantize_plan *moss_quantize_plan_t;

/* Checks `spec` as moss_quantize_layout does and compiles or loads its
 * kernels on `context`'s device. On failure `*plan` is NULL. */
moss_error_t moss_quantize_plan_create(moss_context_t context,
                                       const moss_quantize_spec_t *spec,
                                       moss_quantize_plan_t *plan);

/* Quantizes as moss_quantize would for the plan's spec: the buffers are
 * checked, the spec is not converted again. */
moss_error_t moss_quantize_plan_launch(moss_quantize_plan_t plan,
                                       const moss_quantize_buffers_t *buffers,
                                       void *stream);

/* Frees a plan (NULL is ignored). Its kernels stay in the context. */
void moss_quantize_plan_destroy(moss_quantize_plan_t plan);

/* Per-tensor cast with a scale kept on the device: codes = encode(x /
 * *scale), one pass, no host synchronization. `scale` is a 4-byte aligned
 * FP32 device pointer; the spec's scheme must be MOSS_SCHEME_PER_TENSOR. */
moss_error_t moss_cast_with_scale(moss_context_t context,
                                  const moss_quantize_spec_t *spec,
                                  uint64_t scale,
                                  const moss_quantize_buffers_t *buffers,
                                  void *stream);

/* The output shapes of both layouts of a moss_quantize_both_layouts() spec
 * (spec->transpose 0): the row-major quantization's and the transposed
 * one's. Needs no GPU. Fails with MOSS_ERROR_INVALID_ARGUMENT for a spec
 * moss_quantize_both_layouts() would reject. (moss_quantize_layout of the
 * same spec describes the row-major layout too, but refuses a K the
 * row-wise kernel does not take, such as one not a multiple of 8 for BF16.) */
moss_error_t
moss_quantize_both_layouts_layout(const moss_quantize_spec_t *spec,
                                  moss_quantize_layout_t *row_major,
                                  moss_quantize_layout_t *transposed);

/* Both layouts from one read of the input (a training step's forward and
 * weight-gradient operands): `buffers` receives the row-major quantization
 * `spec` describes (spec->transpose 0), `transposed` the quantization of the
 * transpose, as moss_quantize with spec->transpose 1 writes it (shapes:
 * moss_quantize_both_layouts_layout). transposed->x is 0 or buffers->x; each
 * layout has its own counters. `scale` 0 quantizes; else it is a per-tensor
 * cast with that device scale, as moss_cast_with_scale. Row-major blocks
 * must lie within 128 bytes of input (at most 64 BF16 or 32 FP32 values);
 * folds are MOSS_FOLD_ROW or none; square blocks are refused. */
moss_error_t moss_quantize_both_layouts(
    moss_context_t context, const moss_quantize_spec_t *spec,
    const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, uint64_t scale, void *stream);

/*===--- Automatic weight scaling -----------------------------------------===*/

/* MOSS automatic scaling of one weight tensor (docs/RUNTIME.md): each step
 * casts the weight per tensor with a scale predicted from the last exact
 * amax and the learning rates since, with no host synchronization. A rescale
 * (the JIT per-tensor quantize, the exact scale) runs on the first steps,
 * every `interval` steps, and at the step after the host learns that a cast
 * saturated. A scaler uses its context's quantizer: destroy every scaler
 * before its context. Not thread-safe. */
typedef struct moss_weight_scaler *moss_weight_scaler_t;

/* The bound c on Adam's per-step update, |dW| <= c * lr. */
typedef enum moss_adam_bound_t {
  /* c = 1, the paper's choice (not a bound for every gradient sequence). */
  MOSS_ADAM_BOUND_PAPER = 0,
  /* c = (1 - beta1) / sqrt((1 - beta2) * (1 - beta1^2 / beta2)). */
  MOSS_ADAM_BOUND_PROVABLE = 1
} moss_adam_bound_t;

/* Options of moss_weight_scaler_create(). Fill with
 * moss_weight_scaler_options_init(). */
typedef struct moss_weight_scaler_options_t {
  /* sizeof(moss_weight_scaler_options_t) of the caller's header. */
  size_t struct_size;
  int32_t bound;         /* moss_adam_bound_t */
  int32_t reserved;      /* set to 0 */
  /* Adam's betas; used by MOSS_ADAM_BOUND_PROVABLE. */
  double beta1;
  double beta2;
  /* Nonzero: this c (finite, > 0) instead of `bound`. */
  double explicit_bound;
  /* Steps between two rescales, at least 1. */
  int64_t interval;
} moss_weight_scaler_options_t;

/* Sets `*options` to the defaults: the paper's c = 1, betas 0.9 / 0.999,
 * no explicit bound, an interval of 500 steps. */
void moss_weight_scaler_options_init(moss_weight_scaler_options_t *options);

/* Creates a scaler on `context`'s device into `*out` (set to NULL on
 * failure). The options are checked first, without a GPU. */
moss_error_t moss_weight_scaler_create(
    moss_context_t context, const moss_weight_scaler_options_t *options,
    moss_weight_scaler_t *out);

/* Waits for the scaler's pending copies and frees it; NULL is ignored. */
void moss_weight_scaler_destroy(moss_weight_scaler_t scaler);

/* Why a step rescaled. */
typedef enum moss_rescale_reason_t {
  /* Not a rescale: the cast used the predicted scale. */
  MOSS_RESCALE_NONE = 0,
  /* No exact amax has reached the host yet (the first steps). */
  MOSS_RESCALE_NO_ANCHOR = 1,
  /* `interval` steps passed. */
  MOSS_RESCALE_INTERVAL = 2,
  /* A cast saturated (or a rescale found NaN or Inf in the weight). */
  MOSS_RESCALE_SATURATION = 3
} moss_rescale_reason_t;

/* What one step did. */
typedef struct moss_weight_scale_step_t {
  /* The step's index, from 0. */
  int64_t step;
  int32_t reason; /* moss_rescale_reason_t */
  /* The predicted scale of the cast; 0 for a rescale (whose exact scale
   * the device writes to buffers->global). */
  float scale;
} moss_weight_scale_step_t;

/* One optimizer step: the weight buffers->x was just updated with learning
 * rate `lr` (finite, >= 0); writes its codes to buffers->q and the scale
 * used to buffers->global (one FP32), asynchronously on `stream`. The spec
 * must be MOSS_SCHEME_PER_TENSOR; buffers->local and buffers->counters must
 * be 0. Everything is checked before anything runs. `out` may be NULL. */
moss_error_t moss_weight_scaler_step(moss_weight_scaler_t scaler, double lr,
                                     const moss_quantize_spec_t *spec,
                                     const moss_quantize_buffers_t *buffers,
                                     void *stream,
                                     moss_weight_scale_step_t *out);

/* moss_weight_scaler_step for both layouts of the weight from one read
 * (the forward's W and the input gradient's W^T): `buffers` receives W's
 * codes and the scale as moss_weight_scaler_step writes them, `transposed`
 * the codes of W^T [K, N] at the same scale (transposed->q) and that scale
 * (transposed->global, which may be buffers->global). spec->transpose must
 * be 0; transposed->x is 0 or buffers->x, transposed->local and ->counters
 * are 0. */
moss_error_t moss_weight_scaler_step_both_layouts(
    moss_weight_scaler_t scaler, double lr, const moss_quantize_spec_t *spec,
    const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out);

/* One optimizer step of the experts of a mixture-of-experts layer, each
 * weight with its own scaler, in one call: for g in [0, count), the step of
 * scalers[g] (moss_weight_scaler_step_both_layouts where `transposed` is
 * not NULL, else moss_weight_scaler_step) on expert g of stacked weights.
 * `spec` is one expert's [rows, cols]; expert g's buffers are `buffers`'
 * (and `transposed`'s) moved by g experts: x by rows * cols input
 * elements, q by rows * cols bytes, global by one FP32 (a scale per
 * expert). The scalers are distinct and share one context. Every expert's
 * arguments are checked before anything launches; an error names the
 * expert. `out`: NULL or `count` results. */
moss_error_t moss_weight_scaler_step_experts(
    const moss_weight_scaler_t *scalers, size_t count, double lr,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out);

/* One AdamW step (torch.optim.AdamW's: decoupled weight decay, bias
 * correction, no amsgrad) that a fused scaler step applies to the weight
 * before its cast, in the same read of the weight. Fill with
 * moss_adamw_step_init(). The update is FP32, each operation rounded once
 * (docs/RUNTIME.md, "The fused AdamW step"). */
typedef struct moss_adamw_step_t {
  /* sizeof(moss_adamw_step_t) of the caller's header. */
  size_t struct_size;
  /* FP32 device arrays of the weight's shape, 16-byte aligned: the
   * gradient (read) and Adam's first and second moments (exp_avg,
   * exp_avg_sq; updated in place). In an experts' step, expert g's are
   * these moved by g experts' elements, as its weight is. */
  uint64_t grad;
  uint64_t exp_avg;
  uint64_t exp_avg_sq;
  /* The step's learning rate (also the scaler's), finite and >= 0. */
  double lr;
  /* Betas in [0, 1); eps and weight_decay finite and >= 0. */
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  /* The step's number, from 1: the bias corrections use it. */
  int64_t step;
} moss_adamw_step_t;

/* Sets `*adamw` to torch.optim.AdamW's defaults: lr 1e-3, betas 0.9 /
 * 0.999, eps 1e-8, weight_decay 0.01, step 1, no arrays. */
void moss_adamw_step_init(moss_adamw_step_t *adamw);

/* The optimizer's step and the scaler's in one: buffers->x holds the FP32
 * weight before the step; the AdamW step `adamw` updates it (and the
 * moments) in place, and the same read writes the updated weight's codes as
 * moss_weight_scaler_step (`transposed` NULL) or
 * moss_weight_scaler_step_both_layouts (not NULL) writes them, with
 * adamw->lr as the step's learning rate. A step that rescales updates the
 * weight first, then quantizes it. spec->input must be MOSS_INPUT_F32, K a
 * multiple of 4, and for both layouts the rows a multiple of 4. The arrays
 * must not overlap. */
moss_error_t moss_weight_scaler_adamw_step(
    moss_weight_scaler_t scaler, const moss_adamw_step_t *adamw,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out);

/* What a scaler did and learned, counted since its creation. */
typedef struct moss_weight_scaler_stats_t {
  /* Set to sizeof(moss_weight_scaler_stats_t) before the call. */
  size_t struct_size;
  /* Steps, and the rescales among them by reason. */
  int64_t steps;
  int64_t rescales;
  int64_t no_anchor_rescales;
  int64_t interval_rescales;
  int64_t saturation_rescales;
  /* Snapshots whose saturated count grew, and the values counted. */
  int64_t saturation_events;
  uint64_t saturated_values;
  /* Non-finite blocks the rescales counted; NaN/Inf amaxes seen. */
  uint64_t non_finite_blocks;
  int64_t non_finite_anchors;
  /* The latest step whose device results reached the host, and the latest
   * whose snapshot revealed saturation (-1: none). */
  int64_t observed_step;
  int64_t last_saturation_step;
  /* Exact amaxes applied; the current anchor's step (-1: none) and amax. */
  int64_t anchors_applied;
  int64_t anchor_step;
  float anchor_amax;
  int32_t reserved;
  /* Snapshots overwritten before the host read them (the GPU lagged). */
  int64_t dropped_snapshots;
} moss_weight_scaler_stats_t;

/* Takes the snapshots that have arrived (never waits), then writes the
 * statistics to `*out`, whose struct_size the caller sets. */
moss_error_t moss_weight_scaler_stats(moss_weight_scaler_t scaler,
                                      moss_weight_scaler_stats_t *out);

/* The weight scalers of a mixture-of-experts layer's experts, one per
 * expert, stepped together. Each expert decides its casts and rescales as a
 * moss_weight_scaler_t of its own would, from its own amax; their device
 * state is one buffer, so a step makes a fixed number of driver calls where
 * moss_weight_scaler_step_experts makes about five calls per expert: one
 * launch casts every expert when all cast with their predictions (one per
 * expert on a step that rescales any). Destroy before the context. Not
 * thread-safe. */
typedef struct moss_expert_scalers *moss_expert_scalers_t;

/* Creates `experts` (>= 1) scalers with `options` on `context`'s device
 * into `*out` (set to NULL on failure). */
moss_error_t
moss_expert_scalers_create(moss_context_t context,
                           const moss_weight_scaler_options_t *options,
                           size_t experts, moss_expert_scalers_t *out);

/* Waits for the scalers' pending copies and frees them; NULL is ignored. */
void moss_expert_scalers_destroy(moss_expert_scalers_t scalers);

/* One optimizer step of every expert, as moss_weight_scaler_step_experts
 * lays them out: `spec` is one expert's [rows, cols]; expert g's buffers
 * are `buffers`' (and, where not NULL, `transposed`'s, for W_g^T's codes
 * from the same read) moved by g experts. Every expert's arguments are
 * checked before anything launches; an error names the expert. `out`: NULL
 * or one result per expert. The host waits only when the GPU lags 8 steps
 * behind it (the predicted scales travel through page-locked slots). */
moss_error_t moss_expert_scalers_step(moss_expert_scalers_t scalers, double lr,
                                      const moss_quantize_spec_t *spec,
                                      const moss_quantize_buffers_t *buffers,
                                      const moss_quantize_buffers_t *transposed,
                                      void *stream,
                                      moss_weight_scale_step_t *out);

/* moss_expert_scalers_step fused with the optimizer's AdamW step, as
 * moss_weight_scaler_adamw_step: every expert's weight (and moments, at
 * adamw's arrays moved by g experts) updated in the read that casts it. */
moss_error_t moss_expert_scalers_adamw_step(
    moss_expert_scalers_t scalers, const moss_adamw_step_t *adamw,
    const moss_quantize_spec_t *spec, const moss_quantize_buffers_t *buffers,
    const moss_quantize_buffers_t *transposed, void *stream,
    moss_weight_scale_step_t *out);

/* moss_weight_scaler_stats of expert `expert`. */
moss_error_t moss_expert_scalers_stats(moss_expert_scalers_t scalers,
                                       size_t expert,
                                       moss_weight_scaler_stats_t *out);

/*===--- GEMM --------------------------------------------------------------===*/
/* The GEMM functions live in the MOSSGemm library (it links the compiler);
 * the rest of this header needs only MOSSRuntime. */

/* M of a kernel that serves every row count. */
#define MOSS_DYNAMIC (-1)

/* Element types of the GEMM epilogue; MOSS_TYPE_NONE leaves an optional
 * operand out. */
typedef enum moss_float_type_t {
  MOSS_TYPE_NONE = -1,
  MOSS_TYPE_BF16 = 0,
  MOSS_TYPE_F16 = 1,
  MOSS_TYPE_F32 = 2
} moss_float_type_t;

/* What the GEMM's tensor cores multiply (docs/NUMERICS-CONTRACT.md
 * section 7). */
typedef enum moss_mma_type_t {
  /* MOSS_MMA_F16 for an f32 output, MOSS_MMA_FP8 otherwise. */
  MOSS_MMA_AUTO = 0,
  /* The FP8 codes as they are, at full speed; f32 outputs are within about
   * 1e-4 of the FP64 reference. */
  MOSS_MMA_FP8 = 1,
  /* Every code widened exactly to f16 on chip: exact products summed in
   * FP32, f32 outputs within 1e-5, at about a third of the FP8 speed. */
  MOSS_MMA_F16 = 2
} moss_mma_type_t;

/* One operand's FP8 format and scaling scheme (as in moss_quantize_spec_t). */
typedef struct moss_gemm_operand_spec_t {
  int32_t format;       /* moss_fp8_format_t */
  int32_t scheme;       /* moss_scheme_t */
  int64_t block_rows;   /* 1 (or 0), or block_cols for NxN per-group */
  int64_t block_cols;   /* block along K; 0 for the scheme's default */
  int32_t global_scope; /* moss_global_scope_t; two-level only */
  int32_t reserved;     /* set to 0 */
} moss_gemm_operand_spec_t;

/* How a grouped GEMM's experts share A, B and D. */
typedef enum moss_group_layout_t {
  /* Sorted by expert, back to back: G + 1 row offsets give each expert's
   * rows (training, prefill). */
  MOSS_GROUPS_CONTIGUOUS = 0,
  /* M / G rows per expert (A a [G, M / G, K] batch): G row counts give how
   * many of its rows each expert uses, and D's rows past a count are not
   * written (decoding, CUDA graphs: the shapes never change). */
  MOSS_GROUPS_MASKED = 1,
  /* k-grouped (the weight gradient of a mixture-of-experts layer, K being
   * the tokens): A [M, K] and B [N, K] are shared and expert g multiplies
   * their columns [offsets[g], offsets[g + 1]) into its own D_g [M, N],
   * rows g * M of D [G * M, N] (and of C). M and N are static, k is
   * MOSS_DYNAMIC, no bias, no fold; moss_gemm_plan_launch_grouped takes K
   * (a multiple of 128) for m and G + 1 column offsets, each a multiple of
   * 128 (columns past offsets[G] are no expert's: padding). An expert
   * without columns gets the epilogue of zeros. */
  MOSS_GROUPS_ALONG_K = 2
} moss_group_layout_t;

/* D[M, N] = epilogue(sum_k A[m, k] * B[n, k]), both operands K-major
 * (docs/GEMM-KERNEL-ABI.md). Fill with moss_gemm_spec_init(). */
typedef struct moss_gemm_spec_t {
  /* sizeof(moss_gemm_spec_t) of the caller's header. */
  size_t struct_size;
  /* MOSS_DYNAMIC, or an M to specialize the kernel to. */
  int64_t m;
  int64_t n;
  /* A multiple of 32. */
  int64_t k;
  moss_gemm_operand_spec_t a;
  moss_gemm_operand_spec_t b;
  int32_t out;        /* moss_float_type_t, not NONE */
  int32_t bias;       /* moss_float_type_t of bias [N], or NONE */
  int32_t accumulate; /* moss_float_type_t of C [M, N] (+ beta * C), or NONE */
  int32_t amax;       /* nonzero: also write max |D| */
  float beta;         /* multiplies C; used only with accumulate */
  /* 0, or promote the tensor cores' partial sums to FP32 every 32, 64 or
   * 128 of K even where the schemes need no promotion (more accurate,
   * somewhat slower; at most the schemes' own scaling block). */
  int32_t promote_k;
  /* moss_mma_type_t. Since the struct's second version (read only when
   * struct_size covers it; older callers get MOSS_MMA_AUTO). */
  int32_t mma;
  /* moss_fold_t. Since the struct's third version (older callers get
   * MOSS_FOLD_AUTO). A fold runs a memory-bound pass over the folded
   * operands before the GEMM, into a workspace kept per stream. */
  int32_t fold;
  /* 0: a plain GEMM. G > 0: a grouped GEMM of G experts, k-grouped with
   * group_layout MOSS_GROUPS_ALONG_K (see there), else m-grouped (a
   * mixture-of-experts layer; M must be MOSS_DYNAMIC): expert g multiplies
   * its rows of A by its own [N, K] B, so B is [G * N, K] with its scales
   * stacked per expert (a per-tensor B has G globals, a per-row one G * N),
   * the bias is [G, N], and the rows of A and D are sorted by expert. It
   * launches with moss_gemm_plan_launch_grouped, which takes the row
   * offsets. Since the struct's fourth version (older callers get 0). */
  int32_t groups;
  /* moss_group_layout_t of a grouped GEMM (groups > 0). Since the
   * struct's fifth version (older callers get MOSS_GROUPS_CONTIGUOUS). */
  int32_t group_layout;
} moss_gemm_spec_t;

/* One operand's device buffers; counts are in elements. */
typedef struct moss_gemm_operand_t {
  uint64_t codes; /* [rows, K] FP8, 16-byte aligned */
  uint64_t local_scales; /* block scales, exactly when the scheme has them */
  int64_t local_scale_count;
  uint64_t global_scales; /* FP32 global scales, likewise */
  int64_t global_scale_count;
} moss_gemm_operand_t;

/* The device buffers of one GEMM. */
typedef struct moss_gemm_buffers_t {
  moss_gemm_operand_t a; /* [M, K] */
  moss_gemm_operand_t b; /* [N, K] */
  uint64_t d;    /* output [M, N], 16-byte aligned */
  uint64_t bias; /* [N], exactly when spec->bias is not NONE */
  uint64_t c;    /* [M, N], exactly when spec->accumulate is not NONE; may be d */
  uint64_t amax; /* one FP32, zeroed by the caller, exactly when spec->amax */
} moss_gemm_buffers_t;

/* Sets `*spec` to the defaults: dynamic M, N = K = 0, A E4M3 MOSS two-level
 * (per-row global, blocks of 32), B E4M3 per-tensor, bf16 output, no bias,
 * no C, no amax, beta 1, the schemes' own promotion. */
void moss_gemm_spec_init(moss_gemm_spec_t *spec);

/* Checks a GEMM call without a GPU: the spec, m, every pointer and scale
 * count. MOSS_ERROR_INVALID_ARGUMENT names the first bad value. */
moss_error_t moss_gemm_check(const moss_gemm_spec_t *spec, int64_t m,
                             const moss_gemm_buffers_t *buffers);

/* Computes the GEMM for `m` rows on `stream`, asynchronously, after the
 * checks of moss_gemm_check. The first call for a spec compiles its kernel
 * (or loads it from the cache); later calls only launch. Where it saves
 * time the kernel compiles in two tiers: the first calls launch its
 * quick-compile variant (the same output bit for bit, somewhat slower) while
 * the full kernel compiles on a background thread, which the context's
 * destruction waits for. MOSS_TIERED_COMPILE=0 in the environment compiles
 * the full kernel at once, on the calling thread. */
moss_error_t moss_gemm(moss_context_t context, const moss_gemm_spec_t *spec,
                       int64_t m, const moss_gemm_buffers_t *buffers,
                       void *stream);

/* A GEMM prepared once and launched many times: moss_gemm with the spec's
 * conversion, its checks and the kernel's compile (or cache load) done at
 * creation. A plan uses its context: call it where the context may be used
 * (one thread at a time), and destroy it before the context. */
typedef struct moss_gemm_plan *moss_gemm_plan_t;

/* Checks `spec` (all that does not depend on the buffers or on the rows of
 * a dynamic M) and compiles or loads its kernel on `context`'s device: for
 * the spec's M, or for the heuristic's assumed M when M is dynamic (another
 * M's kernel, where its bucket differs, comes on its first launch). On
 * failure `*plan` is NULL. */
moss_error_t moss_gemm_plan_create(moss_context_t context,
                                   const moss_gemm_spec_t *spec,
                                   moss_gemm_plan_t *plan);

/* Computes the plan's GEMM for `m` rows on `stream`, asynchronously, as
 * moss_gemm would for its spec: m and the buffers are checked (every
 * pointer, alignment and scale count), the spec is not converted again. */
moss_error_t moss_gemm_plan_launch(moss_gemm_plan_t plan, int64_t m,
                                   const moss_gemm_buffers_t *buffers,
                                   void *stream);

/* Computes the grouped GEMM of a plan whose spec has `groups` = G > 0,
 * for `m` rows in all (MOSS_GROUPS_ALONG_K: K columns), as
 * moss_gemm_plan_launch. `group_rows` is the device
 * address (4-byte aligned) of int32 values the kernel reads on the device,
 * so the launch needs no synchronization and any expert may have no rows:
 * - MOSS_GROUPS_CONTIGUOUS: G + 1 row offsets (offsets[0] = 0,
 *   non-decreasing, offsets[G] = m), expert g's rows of A and D being
 *   [offsets[g], offsets[g + 1]);
 * - MOSS_GROUPS_MASKED: G row counts, m a multiple of G, expert g's rows
 *   being the first counts[g] (at most m / G) of [g * m / G,
 *   (g + 1) * m / G); D's other rows are left as they were;
 * - MOSS_GROUPS_ALONG_K: G + 1 column offsets, multiples of 128
 *   (offsets[0] = 0, non-decreasing, offsets[G] <= m = K).
 * Values that break these rules give wrong rows but no access outside the
 * buffers. */
moss_error_t moss_gemm_plan_launch_grouped(moss_gemm_plan_t plan, int64_t m,
                                           const moss_gemm_buffers_t *buffers,
                                           uint64_t group_rows, void *stream);

/* Frees a plan (NULL is ignored). Its kernels stay in the context. */
void moss_gemm_plan_destroy(moss_gemm_plan_t plan);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOSS_MOSS_H */
