#!/usr/bin/env bash
# The Python package's tests, as ctest runs them: a virtual environment in
# the build tree, `pip install` of the repository (which builds libmoss.so
# in this same build), then every test module. Modules that need torch or a
# GPU skip, saying why, where those are missing.
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
MOSS_BUILD_DIR="$build" "$env/bin/python" -m pip install --quiet \
  --disable-pip-version-check --force-reinstall --no-deps "$root"
# numpy is the one dependency; pip fetches it only when it is missing.
"$env/bin/python" -c "import numpy" 2>/dev/null ||
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check numpy
cd "$root/python/tests"
exec "$env/bin/python" -m unittest discover -v
