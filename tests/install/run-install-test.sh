#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs the
# out-of-tree examples against that prefix alone: examples/c with
# pkg-config and cc, examples/cmake with find_package(MOSSJIT),
# examples/cxx with the C++ components, and examples/mlir through
# mlir-opt-22 with the installed plugin.
#
#   bash tests/install/run-install-test.sh BUILD_DIR
set -euo pipefail
build="$(cd "${1:?usage: run-install-test.sh BUILD_DIR}" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix/usr" > "$prefix/install.log"
# Only the prefix from here on: copies of the examples, outside the tree.
cp -r "$root/examples" "$prefix/examples"
installed="$prefix/usr"
libdir="$(PKG_CONFIG_PATH="$installed/lib/pkgconfig" pkg-config --variable=libdir moss)"

echo "--- examples/c with pkg-config"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror "$prefix/examples/c/quantize.c" -o "$prefix/quantize" \
  $(PKG_CONFIG_PATH="$installed/lib/pkgconfig" pkg-config --cflags --libs moss) \
  -lm -Wl,-rpath,"$libdir"
"$prefix/quantize"

echo "--- examples/cmake with find_package(MOSSJIT)"
cmake -S "$prefix/examples/cmake" -B "$prefix/cmake-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$installed" > "$prefix/cmake.log"
cmake --build "$prefix/cmake-build" > "$prefix/cmake-build.log"
"$prefix/cmake-build/layout"

echo "--- examples/cxx with find_package(MOSSJIT COMPONENTS compiler runtime)"
cmake -S "$prefix/examples/cxx" -B "$prefix/cxx-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$installed" > "$prefix/cxx.log"
cmake --build "$prefix/cxx-build" > "$prefix/cxx-build.log" ||
  { cat "$prefix/cxx-build.log"; exit 1; }
"$prefix/cxx-build/compile_gemm"

echo "--- examples/mlir with Debian's mlir-opt-22 and the installed plugin"
mlir_opt="$(command -v mlir-opt-22 || echo /usr/lib/llvm-22/bin/mlir-opt)"
plugin="$installed/lib/libMOSSPlugin.so"
"$mlir_opt" --load-dialect-plugin="$plugin" --load-pass-plugin="$plugin" \
  "$prefix/examples/mlir/forward.mlir" \
  --pass-pipeline="builtin.module(moss-gemm-pipeline)" > "$prefix/forward.out"
grep -q 'emitc.file "moss_gemm_' "$prefix/forward.out" ||
  { echo "the plugin's pipeline emitted no kernel"; exit 1; }
for td in Dialect/MOSS/IR/MOSSOps.td Dialect/MOSS/IR/MOSSAttrs.td \
          Dialect/MOSS/IR/MOSSDialect.td Dialect/MOSS/Transforms/Passes.td \
          Conversion/Passes.td; do
  [ -f "$installed/include/moss/$td" ] || { echo "missing include/moss/$td"; exit 1; }
done

echo "--- the installed tools"
"$installed/bin/moss-jit" quantize --help > /dev/null
for tool in moss-opt moss-translate moss-tune; do
  [ -x "$installed/bin/$tool" ] || { echo "missing $installed/bin/$tool"; exit 1; }
done
echo "the installed tree works"
