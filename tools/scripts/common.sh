# Shared by tools/setup.sh and tools/run-tests.sh: check or install the
# dependencies, then configure and build MOSS-JIT. Safe to run again.

MOSS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MOSS_BUILD_DIR="${MOSS_BUILD_DIR:-$MOSS_ROOT/build}"

# Debian packages the build and the tests need.
MOSS_PACKAGES=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools libzstd-dev
  zlib1g-dev googletest libgtest-dev ninja-build cmake g++ python3-numpy
  python3-venv pkgconf clang-14 libclang-rt-14-dev
)

moss_log() { echo "[moss] $*"; }

moss_missing_packages() {
  local pkg
  for pkg in "${MOSS_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      echo "$pkg"
    fi
  done
}

moss_ensure_packages() {
  if ! command -v dpkg-query >/dev/null; then
    moss_log "not a Debian system: make sure these are installed: ${MOSS_PACKAGES[*]}"
    return 0
  fi
  local missing
  missing=$(moss_missing_packages | tr '\n' ' ')
  if [ -z "${missing// /}" ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    moss_log "missing Debian packages: $missing"
    moss_log "install them as root: apt-get install -y $missing"
    exit 1
  fi
  moss_log "installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
}

moss_find_cuda() {
  local root="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
  if [ ! -x "$root/bin/nvcc" ] || [ ! -f "$root/include/nvrtc.h" ] || [ ! -f "$root/include/cuda.h" ]; then
    moss_log "error: the CUDA Toolkit 13 was not found in '$root'."
    moss_log "MOSS-JIT needs its nvcc, NVRTC (nvrtc.h, libnvrtc), the driver API header cuda.h and cuBLASLt."
    moss_log "Install the CUDA Toolkit 13 in /usr/local/cuda, or set CUDA_HOME to where it is."
    exit 1
  fi
  MOSS_CUDA_ROOT="$root"
}

moss_build() {
  moss_ensure_packages
  moss_find_cuda
  moss_log "configuring in $MOSS_BUILD_DIR"
  cmake -G Ninja -S "$MOSS_ROOT" -B "$MOSS_BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$MOSS_CUDA_ROOT" >/dev/null
  moss_log "building (the first build takes several minutes)"
  cmake --build "$MOSS_BUILD_DIR"
}

# QuantizerSassTest reads SASS with nvdisasm, which not every toolkit
# install has: where neither $MOSS_NVDISASM nor the toolkit gives one, pip's
# nvidia-cuda-nvdisasm is installed into the build tree and exported.
moss_find_nvdisasm() {
  if [ -n "${MOSS_NVDISASM:-}" ] || [ -x "$MOSS_CUDA_ROOT/bin/nvdisasm" ]; then
    return 0
  fi
  local dir="$MOSS_BUILD_DIR/nvdisasm"
  local bin="$dir/nvidia/cu13/bin/nvdisasm"
  if [ ! -x "$bin" ]; then
    moss_log "installing nvdisasm (nvidia-cuda-nvdisasm from PyPI) into $dir"
    python3 -m pip install --quiet --disable-pip-version-check \
      --root-user-action=ignore --target "$dir" \
      nvidia-cuda-nvdisasm==13.2.86 ||
      moss_log "warning: no nvdisasm: QuantizerSassTest will skip"
  fi
  [ -x "$bin" ] && export MOSS_NVDISASM="$bin"
  return 0
}

# Installs the moss_jit Python package (pip install of the repository, which
# reuses this build) into the active virtual environment, else into
# $MOSS_PYTHON's environment, else into a virtual environment in the build
# tree.
moss_install_python() {
  local python="${MOSS_PYTHON:-}"
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -z "$python" ]; then
    python="$VIRTUAL_ENV/bin/python"
  fi
  if [ -z "$python" ]; then
    local env="$MOSS_BUILD_DIR/python-env"
    [ -x "$env/bin/python" ] || python3 -m venv --system-site-packages "$env"
    python="$env/bin/python"
  fi
  moss_log "installing the Python package moss_jit into $python"
  MOSS_BUILD_DIR="$MOSS_BUILD_DIR" "$python" -m pip install --quiet \
    --disable-pip-version-check "$MOSS_ROOT"
}
