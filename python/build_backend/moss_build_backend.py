"""The PEP 517 build backend of the moss_jit Python package.

`pip install <repo>` builds the C library libmoss.so with the project's CMake
build (in $MOSS_BUILD_DIR, default <repo>/build, so that the package and the
tools share one build) and packs it with the Python sources of python/moss_jit
into a wheel. Standard library only: the build needs nothing from PyPI.
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import zipfile

ROOT = os.path.abspath(os.getcwd())
PACKAGE_DIR = os.path.join(ROOT, "python", "moss_jit")
NAME = "moss_jit"
SUMMARY = "JIT-compiled block-scaled FP8 GEMMs and MOSS quantizers for PyTorch"
REQUIRES = ["numpy", 'torch>=2.4; extra == "torch"']


def _version():
    """The project's version, from the one place it is set."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        match = re.search(r"project\(moss-jit VERSION ([0-9.]+)", f.read())
    if not match:
        raise RuntimeError("CMakeLists.txt sets no project VERSION")
    return match.group(1)


def _build_library():
    """Builds libmoss.so and returns its path."""
    build_dir = os.environ.get("MOSS_BUILD_DIR", os.path.join(ROOT, "build"))
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("building moss_jit needs cmake and ninja "
                           "(bash tools/setup.sh installs them)")
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        subprocess.check_call([cmake, "-G", "Ninja", "-S", ROOT, "-B",
                               build_dir, "-DCMAKE_BUILD_TYPE=Release",
                               "-DCUDAToolkit_ROOT=" + cuda])
    subprocess.check_call([cmake, "--build", build_dir, "--target", "moss"])
    return os.path.join(build_dir, "lib", "libmoss.so.2")


def _glibc_needed(library):
    """The newest GLIBC_2.N symbol version `library` needs, as (2, N), from
    its version-needs section (readelf, from binutils like strip); None
    when it cannot be read."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    listing = subprocess.run([readelf, "--version-info", "--wide", library],
                             check=True, capture_output=True,
                             text=True).stdout
    needs = listing.partition(".gnu.version_r")[2]
    versions = [(int(major), int(minor)) for major, minor in
                re.findall(r"Name: GLIBC_(\d+)\.(\d+)", needs)]
    return max(versions, default=None)


def _tag(library):
    """py3-none-manylinux_2_N_ARCH for the newest glibc the library needs
    (what `auditwheel show` reports), so that pip refuses the wheel on an
    older glibc instead of failing at import; the generic linux_ARCH where
    that cannot be read."""
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    glibc = _glibc_needed(library)
    if glibc and platform.startswith("linux_"):
        platform = f"manylinux_{glibc[0]}_{glibc[1]}_" + \
            platform[len("linux_"):]
    return "py3-none-" + platform


def _metadata(version):
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}",
             f"Summary: {SUMMARY}", "Requires-Python: >=3.9",
             "Provides-Extra: torch"]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES]
    return "\n".join(lines) + "\n"


def _files(library):
    """(archive name, bytes) of everything the wheel carries."""
    for dirpath, dirnames, filenames in os.walk(PACKAGE_DIR):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))
                with open(path, "rb") as f:
                    yield rel, f.read()
    # Shipped without its symbol tables (a third of its size); the build
    # tree keeps the unstripped library for debugging.
    data = open(library, "rb").read()
    strip = shutil.which("strip")
    if strip:
        stripped = library + ".stripped"
        subprocess.check_call([strip, "--strip-unneeded", "-o", stripped,
                               library])
        with open(stripped, "rb") as f:
            data = f.read()
        os.remove(stripped)
    yield f"{NAME}/_lib/libmoss.so.2", data


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{name},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    version = _version()
    library = _build_library()
    dist_info = f"{NAME}-{version}.dist-info"
    tag = _tag(library)
    wheel_name = f"{NAME}-{version}-{tag}.whl"
    entries = list(_files(library))
    entries.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    entries.append((f"{dist_info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: moss_build_backend\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n").encode()))
    entries.append((f"{dist_info}/top_level.txt", f"{NAME}\n".encode()))
    record = [_record_line(n, d) for n, d in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so.2") else
                                  0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return wheel_name
