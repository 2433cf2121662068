// A C++ consumer of the installed C API (found with find_package): prints
// the output layout of each scheme's quantization of a 4096 x 11008
// activation, which needs no GPU.
#include <moss/moss.h>

#include <cstdio>

int main() {
  std::printf("MOSS-JIT %s\n", moss_version());
  const char *names[] = {"per-tensor", "per-row", "per-group", "mxfp8",
                         "moss"};
  for (int scheme = MOSS_SCHEME_PER_TENSOR; scheme <= MOSS_SCHEME_MOSS;
       ++scheme) {
    moss_quantize_spec_t spec;
    moss_quantize_spec_init(&spec);
    spec.rows = 4096;
    spec.cols = 11008;
    spec.input = MOSS_INPUT_BF16;
    spec.scheme = scheme;
    spec.block_cols = scheme == MOSS_SCHEME_PER_GROUP ? 128 : 32;
    moss_quantize_layout_t layout;
    if (moss_error_t error = moss_quantize_layout(&spec, &layout)) {
      std::fprintf(stderr, "error: %s\n", moss_error_message(error));
      moss_error_destroy(error);
      return 1;
    }
    std::printf("%-10s codes %lldx%lld, block scales %lldx%lld of %lld "
                "bytes, %lld global scales\n",
                names[scheme], (long long)layout.code_rows,
                (long long)layout.code_cols, (long long)layout.local_rows,
                (long long)layout.local_cols,
                (long long)layout.local_element_bytes,
                (long long)layout.global_count);
  }
  return 0;
}
