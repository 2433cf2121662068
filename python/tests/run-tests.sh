#!/usr/bin/env bash
# The Python package's tests, as ctest runs them: a virtual environment in
# the build tree, `pip install` of the repository (which builds libmoss.so
# in this same build), torch, hypothesis and auditwheel from PyPI, then
# every test module. The torch tests run on the CPU; those that need a GPU
# skip, saying why. MOSS_PYTHON_TEST_TORCH=0 leaves torch out.
#
#   bash python/tests/run-tests.sh BUILD_DIR
set -euo pipefail
build="$(cd "${1:?usage: run-tests.sh BUILD_DIR}" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${MOSS_PYTHON:-python3}"
env="$build/python-env"
if [ ! -x "$env/bin/python" ]; then
  # Site packages stay visible: a torch installed there is tested too.
  "$python" -m venv --system-site-packages "$env"
fi
pip=("$env/bin/python" -m pip install --quiet --disable-pip-version-check)
MOSS_BUILD_DIR="$build" "${pip[@]}" --force-reinstall --no-deps "$root"
# pip fetches only what is missing. torch from PyPI brings pip's CUDA wheels
# (NVRTC among them), which test_cuda_wheels.py compiles with.
deps=(numpy hypothesis auditwheel)
if [ "${MOSS_PYTHON_TEST_TORCH:-1}" != 0 ]; then
  deps+=(torch)
fi
for dep in "${deps[@]}"; do
  "$env/bin/python" -c "import $dep" 2>/dev/null || {
    echo "[moss] installing $dep from PyPI into $env"
    "${pip[@]}" "$dep"
  }
done
cd "$root/python/tests"
# test_packaging.py builds a wheel from this build.
export MOSS_BUILD_DIR="$build"
exec "$env/bin/python" -m unittest discover -v
