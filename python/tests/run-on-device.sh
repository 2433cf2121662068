#!/usr/bin/env bash
# Runs the Python package's tests, benchmarks and training comparison on a
# machine with a Hopper GPU and torch, from wheels built elsewhere. Logs go
# to $MOSS_GPU_LOG_DIR (default ./gpu-logs).
#
#   bash python/tests/run-on-device.sh WHEEL_DIR [tests|readme|overhead|linear|grouped|gpt|all]
#
# WHEEL_DIR holds the moss_jit wheel (pip wheel of the repository), and
# optionally a torchao wheel and the moss-jit CLI (the CPU tests compare with
# it). Exits 1, naming them, when any step fails.
set -uo pipefail
wheels="$(cd "${1:?usage: run-on-device.sh WHEEL_DIR [tests|readme|overhead|linear|grouped|gpt|all]}" && pwd)"
mode="${2:-all}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${MOSS_GPU_LOG_DIR:-./gpu-logs}"
mkdir -p "$out"
site="${MOSS_SITE_DIR:-/tmp/moss-site}"
# --upgrade: a machine kept warm between calls must not run an older wheel.
python3 -m pip install --quiet --no-deps --no-index --upgrade --target "$site" \
  "$wheels"/*.whl || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
[ -x "$wheels/moss-jit" ] && export MOSS_JIT_CLI="$wheels/moss-jit"
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/device.txt"
python3 -c "import torch, moss_jit; print('torch', torch.__version__, 'moss_jit', moss_jit.__version__)" | tee -a "$out/device.txt"

failed=()
run() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "=== $name exit $status"
  [ "$status" -eq 0 ] || failed+=("$name")
  tail -n "${MOSS_TAIL:-30}" "$out/$name.log"
}

case "$mode" in
  tests|all) (cd "$root/python/tests" && run unittest 420 python3 -m unittest discover -v) ;;&
  readme|all)
    # The README's "Use from PyTorch" example, as written.
    awk '/^## Use from PyTorch/{f=1} f&&/^```python/{p=1;next} p&&/^```/{exit} p' \
      "$root/README.md" > "$out/readme-example.py"
    run readme 300 python3 "$out/readme-example.py" ;;&
  overhead|all) run overhead 120 python3 "$root/python/bench/bench_overhead.py" ;;&
  grouped|all) run grouped 300 python3 "$root/python/bench/bench_grouped.py" \
    --shapes 4096,7168 ;;&
  gpt|all) run gpt 400 python3 "$root/python/examples/train_gpt.py" ;;&
  linear|all) run linear 540 python3 "$root/python/bench/bench_linear.py" ;;
esac

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
