/*===- CApiHeaderTest.c - moss.h compiles as C99 --------------------------===//
 *
 * Built with -std=c99 -Wall -Werror -pedantic: a C++-ism in moss.h (a
 * reference, a default argument, `bool`, a namespace) fails the build. Not
 * linked into anything; it only has to compile.
 *
 *===----------------------------------------------------------------------===*/

#include "moss/moss.h"

#if MOSS_API_VERSION != 2
#error "unexpected MOSS_API_VERSION"
#endif

int moss_c_header_test(void);

int moss_c_header_test(void) {
  moss_context_options_t options;
  moss_context_t context = NULL;
  moss_quantize_spec_t spec = {0};
  moss_quantize_layout_t layout;
  moss_quantize_buffers_t buffers = {0, 0, 0, 0, 0};
  moss_error_t error;
  moss_error_code_t code;
  int ok = 0;

  moss_quantize_spec_init(&spec);
  spec.rows = 64;
  spec.cols = 256;
  spec.input = MOSS_INPUT_BF16;
  spec.scheme = MOSS_SCHEME_TWO_LEVEL;
  spec.block_rows = 1;
  spec.block_cols = 32;
  spec.global_scope = MOSS_GLOBAL_ROW;
  spec.format = MOSS_FORMAT_E4M3;
  spec.transpose = 0;

  error = moss_quantize_layout(&spec, &layout);
  code = moss_error_code(error);
  if (code == MOSS_ERROR_NONE && layout.local_cols == 8)
    ok = 1;
  moss_error_destroy(error);

  moss_context_options_init(&options);
  options.cache_directory = NULL;
  error = moss_context_create(&options, &context);
  if (error) {
    ok = ok && moss_error_message(error)[0] != '\0';
    moss_error_destroy(error);
    return ok && moss_api_version() == MOSS_API_VERSION;
  }
  error = moss_quantize(context, &spec, &buffers, NULL);
  moss_error_destroy(error);
  error = moss_cast_with_scale(context, &spec, 0, &buffers, (void *)0);
  moss_error_destroy(error);
  moss_context_destroy(context);
  return ok;
}
