#!/usr/bin/env bash
# Runs the GPU suites and benchmarks on a machine with a GPU, from binaries
# built elsewhere. Logs go to $MOSS_GPU_LOG_DIR (default ./gpu-logs).
#
#   bash tests/gpu/run-on-device.sh BIN_DIR [quick|gemm|jitbench|sanitize|bench|fold|grouped|all]
#
#   quick  driver, quantizer and C API suites, GEMM on 129x257x96
#   gemm   the GEMM suites and moss-jit run
#   jitbench  moss-jit bench on the LLaMA-7B shapes and schemes of docs/PERFORMANCE.md
#   sanitize  compute-sanitizer memcheck and racecheck, one small GEMM per variant (both epilogue stores)
#   bench  the benchmarks (quantizers, GEMM against cuBLASLt)
#   fold   the fold suite, its sanitizer runs and the fold benchmarks
#   grouped  the grouped GEMM suites (m- and k-grouped, non-finite blocks),
#            the experts' batched casts and moss-bench-grouped --quick
#   all    (default) everything
#
# Exits 1, naming them, when any suite or benchmark fails.
set -uo pipefail
bin="${1:?usage: run-on-device.sh BIN_DIR [quick|gemm|jitbench|sanitize|bench|fold|grouped|all]}"
mode="${2:-all}"
out="${MOSS_GPU_LOG_DIR:-./gpu-logs}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"

failed=()
run() { # name, command...
  local name=$1; shift
  [ -x "$1" ] || { echo "=== $name: $1 missing, skipped"; return; }
  echo "=== $name: $*"
  # A hung kernel must not eat the whole lease.
  timeout "${MOSS_RUN_TIMEOUT:-300}" "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "=== $name exit $status"
  [ "$status" -eq 0 ] || failed+=("$name")
  tail -n "${MOSS_TAIL:-25}" "$out/$name.log"
}

suites() {
  run driver-test "$bin/DriverTest"
  # Every scheme, layout and odd shape compiles its own kernels: 299 s on
  # the H200 on 2026-12-03, so it gets more than the default 300.
  MOSS_RUN_TIMEOUT=600 run quantize-gpu-test "$bin/QuantizeGpuTest"
  run capi-test "$bin/CApiTest"
  run weight-scaler-gpu-test "$bin/WeightScalerGpuTest"
  run gemm-capi-gpu-test "$bin/GemmCApiGpuTest"
}

gemm() {
  run gemm-capi-gpu-test "$bin/GemmCApiGpuTest"
  run gemm-tiered-compile-gpu-test "$bin/GemmTieredCompileGpuTest"
  MOSS_RUN_TIMEOUT=480 run gemm-gpu-test "$bin/GemmGpuTest"
  grep -E "^\[ +(FAILED|OK|SKIPPED) +\]|rel_frobenius" "$out/gemm-gpu-test.log" > "$out/gemm-gpu-test-summary.log"
  local jit="$bin/moss-jit"
  run jit-run-moss "$jit" run --m 1000 --n 3000 --k 2048 --bias f32 --amax
  run jit-run-group "$jit" run --m 129 --n 257 --k 256 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --accumulate f32 --beta 0.5
  run jit-run-f32-f16-mma "$jit" run --m 1000 --n 3000 --k 2048 --out f32 --bias f32 --amax
}

jitbench() {
  fresh_caches
  local jit="$bin/moss-jit"
  for shape in "8192 8192 8192" "16384 4096 4096" "16384 11008 4096" "16384 4096 11008" "16384 12288 4096" "1 4096 4096" "128 11008 4096"; do
    set -- $shape
    for scheme in "--a-scheme moss --a-global row --b-scheme per-tensor" "--a-scheme per-tensor --b-scheme per-tensor" "--a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128"; do
      name="jit-bench-$1x$2x$3-$(echo "$scheme" | awk '{print $2}')"
      MOSS_TAIL=6 run "$name" "$jit" bench --m "$1" --n "$2" --k "$3" $scheme
    done
  done
}

# compute-sanitizer memcheck and racecheck on one small shape per kernel
# variant (scheme pair, cluster shape, epilogue), through moss-jit run.
sanitize() {
  local jit="$bin/moss-jit"
  local cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  # K = 1024: eight 128-wide stages, so the shorter rings wrap around.
  # N = 257 stores from registers; N = 264 (16-byte output rows) through
  # shared memory and TMA. f32 outputs multiply in f16 unless --mma fp8.
  local i=0
  while read -r n variant; do
    i=$((i + 1))
    for tool in memcheck racecheck; do
      MOSS_TAIL=4 run "sanitize-$tool-$i" "$cs" --tool "$tool" --error-exitcode 9 "$jit" run --m 129 --n "$n" --k 1024 $variant --check 16
    done
  done <<'VARIANTS'
257 --a-scheme moss --a-global row --b-scheme per-tensor --bias f32 --amax
257 --a-scheme moss --a-global tensor --b-scheme moss --b-global tensor --out f32 --accumulate f32 --mma fp8
257 --a-scheme per-tensor --b-scheme per-tensor --out f16 --accumulate f16
257 --a-scheme per-row --b-scheme per-row --tiling 256x192x4
257 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --mma fp8
257 --a-scheme mxfp8 --b-scheme mxfp8
257 --a-scheme moss --a-global row --b-scheme per-tensor --tiling 128x128x6x2x1
257 --a-scheme per-tensor --b-scheme per-tensor --tiling 128x256x4x1x2 --bias bf16 --amax
257 --a-scheme moss --a-global row --b-scheme per-tensor --tiling 128x192x5
257 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --tiling 128x192x5 --bias bf16
257 --a-scheme moss --a-global row --b-scheme per-tensor --bias f32 --amax --tiling 128x64x8x1x1x2
257 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --accumulate f32 --tiling 128x128x6x1x1x2 --mma fp8
257 --a-scheme per-tensor --b-scheme per-tensor --out f32 --tiling 128x32x8x1x1x2 --mma fp8
257 --a-scheme moss --a-global row --b-scheme per-tensor --bias f32 --amax --tiling 64x64x8
257 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --tiling 64x128x6x1x1x2 --mma fp8
264 --a-scheme per-tensor --b-scheme per-tensor --bias bf16 --amax
264 --a-scheme moss --a-global row --b-scheme per-tensor --out f32 --accumulate f32 --mma fp8
264 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f16 --tiling 128x128x6x2x1
264 --a-scheme moss --a-global row --b-scheme per-tensor --amax --tiling 64x64x8
264 --a-scheme per-tensor --b-scheme per-tensor --tiling 256x128x4x1x1x2
264 --a-scheme per-row --b-scheme per-row --bias f32 --amax --tiling 128x128x6
257 --a-scheme moss --a-global row --b-scheme per-tensor --bias f32 --amax --tiling 128x128x6x2x1 --quick-compile
264 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --quick-compile --mma fp8
257 --a-scheme moss --a-global row --b-scheme per-tensor --out f32 --bias f32 --amax
264 --a-scheme moss --a-global tensor --b-scheme moss --b-global tensor --out f32 --accumulate f32 --mma f16
264 --a-scheme per-group --a-block 128 --b-scheme per-group --b-block 128x128 --out f32 --tiling 128x96x4x2x1 --mma f16
257 --a-scheme per-tensor --b-scheme per-tensor --out f32 --tiling 128x64x4x1x1x2 --mma f16
VARIANTS
}

# Empty kernel caches, so that compile times are cold: ours, and the
# driver's compute cache, where NVRTC keeps compiles of its own.
fresh_caches() {
  export MOSS_CACHE_DIR=/tmp/moss-bench-cache CUDA_CACHE_PATH=/tmp/moss-bench-nv-cache
  rm -rf "$MOSS_CACHE_DIR" "$CUDA_CACHE_PATH"
}

# The fold of E8M0 block factors: its suite, compute-sanitizer on the fold
# and the folded kernels, and the benchmark shapes of docs/PERFORMANCE.md.
fold() {
  run fold-gpu-test "$bin/FoldGpuTest"
  local jit="$bin/moss-jit"
  local cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  local i=0
  while read -r variant; do
    i=$((i + 1))
    for tool in memcheck racecheck; do
      MOSS_TAIL=4 run "sanitize-fold-$tool-$i" "$cs" --tool "$tool" --error-exitcode 9 "$jit" run --m 129 --n 264 --k 1024 $variant --check 16
    done
  done <<'VARIANTS'
--a-scheme moss --a-global tensor --b-scheme per-tensor --fold row
--a-scheme moss --a-global row --b-scheme moss --b-global row --fold 128 --bias f32
--a-scheme mxfp8 --b-scheme mxfp8 --fold row --out f32
VARIANTS
  # The kernel that folds A itself (FoldA): 7 and 129 rows, E4M3 and E5M2.
  for tool in memcheck racecheck; do
    MOSS_TAIL=4 run "sanitize-kernel-fold-$tool" "$cs" --tool "$tool" --error-exitcode 9 "$bin/FoldGpuTest" \
      --gtest_filter='*KernelFold*m7:*KernelFold*e5m2*'
  done
  local keep=(--only _api --only moss_twolevel_x_tensor_heuristic --only twolevel_x_twolevel_heuristic)
  MOSS_RUN_TIMEOUT=480 run fold-bench-8192 "$bin/moss-bench-gemm" --m 8192 --n 8192 --k 8192 --repeat 20 "${keep[@]}"
  for shape in "16384 4096 4096" "16384 11008 4096" "16384 12288 4096" "16384 4096 11008" "4096 4096 4096" \
               "1 4096 4096" "16 4096 4096" "128 4096 4096" "1 11008 4096" "16 11008 4096" "128 11008 4096" \
               "1 4096 11008" "16 4096 11008" "128 4096 11008"; do
    set -- $shape
    MOSS_TAIL=40 run "fold-bench-$1x$2x$3" "$bin/moss-bench-gemm" --m "$1" --n "$2" --k "$3" --repeat 20 --baseline fp8 \
      --only tensor_x_tensor_api --only tensor_x_tensor_promote128_api --only row_x_tensor_api --only group1x128_x_tensor_api \
      --only moss_rowglobal_x_tensor_fold --only moss_tensorglobal_x_tensor_fold_row_api --only twolevel_x_twolevel_fold --only mxfp8_x_mxfp8_fold \
      --only fold_row_kernelfold_api
  done
}

grouped() {
  run grouped-gemm-gpu-test "$bin/GroupedGemmGpuTest"
  run k-grouped-gemm-gpu-test "$bin/KGroupedGemmGpuTest"
  run batched-cast-gpu-test "$bin/QuantizeGpuTest" --gtest_filter='*Batched*'
  run expert-scalers-test "$bin/CApiTest" --gtest_filter='*Expert*'
  run grouped-bench "$bin/moss-bench-grouped" --quick
  run experts-cast-bench "$bin/moss-bench-quantize" --only 'experts auto'
}

benches() {
  fresh_caches
  run quantize-bench "$bin/moss-bench-quantize"
  run quantize-bench-disk "$bin/moss-bench-quantize" --first-calls-only
  run gemm-bench "$bin/moss-bench-gemm"
  run overlap-bench "$bin/moss-bench-overlap"
}

case "$mode" in
  quick)
    suites
    run gemm-gpu-test-quick "$bin/GemmGpuTest" --gtest_filter='*129x257x96*' ;;
  gemm) gemm ;;
  jitbench) jitbench ;;
  sanitize) sanitize ;;
  bench) benches ;;
  fold) fold ;;
  grouped) grouped ;;
  all) suites; gemm; jitbench; sanitize; fold; grouped; benches ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
if [ "${#failed[@]}" -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
