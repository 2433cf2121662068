#!/usr/bin/env bash
# Runs the GPU suites and benchmarks on a machine with a GPU, from binaries
# built elsewhere. Logs go to $MOSS_GPU_LOG_DIR (default ./gpu-logs).
#
#   bash tests/gpu/run-on-device.sh BIN_DIR [quick]
set -uo pipefail
bin="${1:?usage: run-on-device.sh BIN_DIR [quick]}"
out="${MOSS_GPU_LOG_DIR:-./gpu-logs}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"

run() { # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  # A hung kernel must not eat the whole lease.
  timeout "${MOSS_RUN_TIMEOUT:-300}" "$@" > "$out/$name.log" 2>&1
  echo "=== $name exit $?"
  tail -n 25 "$out/$name.log"
}

run driver-test "$bin/DriverTest"
run quantize-gpu-test "$bin/QuantizeGpuTest"
if [ "${2:-}" = quick ]; then
  run gemm-gpu-test-quick "$bin/GemmGpuTest" --gtest_filter='*129x257x96*'
  exit 0
fi
run gemm-gpu-test "$bin/GemmGpuTest"

export MOSS_CACHE_DIR=/tmp/moss-bench-cache
rm -rf "$MOSS_CACHE_DIR"
run quantize-bench "$bin/moss-bench-quantize"
run quantize-bench-disk "$bin/moss-bench-quantize" --first-calls-only
