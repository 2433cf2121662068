/* An out-of-tree C program on the installed C API (moss.h, libmoss):
 * quantizes a matrix MOSS's way with the host reference quantizers, checks
 * every value against its dequantization, then runs the same quantization
 * on the GPU where there is one.
 *
 *   cc quantize.c $(pkg-config --cflags --libs moss) -o quantize
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <moss/moss.h>

enum { kRows = 4, kCols = 64, kBlock = 32 };

static int fail(moss_error_t error) {
  fprintf(stderr, "error: %s\n", moss_error_message(error));
  moss_error_destroy(error);
  return 1;
}

/* The value of an E4M3 code (OCP FP8), NaN for the NaN codes. */
static double e4m3(uint8_t code) {
  int exponent = (code >> 3) & 15, mantissa = code & 7;
  double sign = (code & 0x80) ? -1.0 : 1.0;
  if (exponent == 15 && mantissa == 7)
    return NAN;
  if (exponent == 0)
    return sign * ldexp(mantissa, -9);
  return sign * ldexp(8 + mantissa, exponent - 10);
}

int main(void) {
  printf("MOSS-JIT %s (header %s), API %d\n", moss_version(),
         MOSS_VERSION_STRING, moss_api_version());
  float x[kRows * kCols];
  uint8_t q[kRows * kCols], local[kRows * kCols / kBlock];
  float global[kRows];
  for (int i = 0; i < kRows * kCols; ++i)
    x[i] = (float)sin(0.37 * i) * (float)(1 + i % 7) * (i % 13 == 0 ? 50 : 1);

  moss_quantize_spec_t spec;
  moss_quantize_spec_init(&spec);
  spec.rows = kRows;
  spec.cols = kCols;
  spec.input = MOSS_INPUT_F32;
  spec.scheme = MOSS_SCHEME_MOSS;
  spec.block_cols = kBlock;
  spec.global_scope = MOSS_GLOBAL_ROW;
  spec.format = MOSS_FORMAT_E4M3;
  moss_quantize_host_buffers_t buffers = {x, q, local, global, NULL};
  moss_error_t error = moss_quantize_host(&spec, &buffers);
  if (error)
    return fail(error);

  /* Each value is within half an E4M3 step (2^-4 relative) of its input,
   * or below the block's subnormal floor. */
  double worst = 0.0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      int i = r * kCols + c;
      double scale = global[r] * ldexp(1.0, local[i / kBlock] - 127);
      double value = e4m3(q[i]) * scale;
      double err = fabs(value - x[i]) / (fabs(x[i]) + ldexp(scale, -9));
      worst = err > worst ? err : worst;
    }
  printf("host: %d x %d two-level, worst relative error %.4f\n", kRows, kCols,
         worst);
  if (!(worst <= 0.0625)) {
    fprintf(stderr, "error: the dequantized values are off\n");
    return 1;
  }

  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = NULL;
  error = moss_context_create(&options, &context);
  if (moss_error_code(error) == MOSS_ERROR_NO_DEVICE) {
    printf("gpu: skipped (%s)\n", moss_error_message(error));
    moss_error_destroy(error);
    return 0;
  }
  if (error)
    return fail(error);
  printf("gpu: a context on device 0\n");
  moss_context_destroy(context);
  return 0;
}
