/*===- moss.h - The MOSS-JIT C API -----------------------------*- C -*-===//
 *
 * A C embedding API for the runtime quantizers (C99 and C++). Handles are
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

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's API. */
#define MOSS_API_VERSION 1

/* The API version the library was built with (compare with
 * MOSS_API_VERSION). */
int moss_api_version(void);

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
  /* MOSS two-level: an FP32 global scale times an E8M0 scale per block. */
  MOSS_SCHEME_TWO_LEVEL = 4
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

/* One quantization of a row-major [rows, cols] device matrix whose cols axis
 * is the GEMM reduction axis K. The enum fields are int32_t so that the
 * layout is fixed; they hold the values of the enum named beside them. */
typedef struct moss_quantize_spec_t {
  int64_t rows;
  int64_t cols;
  int32_t input;        /* moss_input_type_t */
  int32_t scheme;       /* moss_scheme_t */
  /* Block extent across rows: 1 (or 0, meaning 1), or block_cols for
   * square per-group blocks (e.g. 128x128 weights). */
  int64_t block_rows;
  /* Block extent along K: per-group, MXFP8 (always 32), two-level; ignored
   * by per-tensor and per-row. */
  int64_t block_cols;
  int32_t global_scope; /* moss_global_scope_t; two-level only */
  int32_t format;       /* moss_fp8_format_t */
  /* Nonzero: quantize the transpose of the input (codes [cols, rows]). */
  int32_t transpose;
  int32_t reserved;     /* set to 0 */
} moss_quantize_spec_t;

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

/* Per-tensor cast with a scale kept on the device: codes = encode(x /
 * *scale), one pass, no host synchronization. `scale` is a 4-byte aligned
 * FP32 device pointer; the spec's scheme must be MOSS_SCHEME_PER_TENSOR. */
moss_error_t moss_cast_with_scale(moss_context_t context,
                                  const moss_quantize_spec_t *spec,
                                  uint64_t scale,
                                  const moss_quantize_buffers_t *buffers,
                                  void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOSS_MOSS_H */
