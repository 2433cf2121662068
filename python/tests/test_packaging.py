"""How the package meets a user's machine: a wheel whose platform tag is the
glibc it needs (as `auditwheel show` reports it), and NVRTC found in pip's
CUDA wheels (what `pip install torch` brings) where no CUDA toolkit is
installed. Both run on the CPU."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from moss_jit import _capi

from support import cli_path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _run(args, env=None):
    return subprocess.run(args, capture_output=True, text=True, env=env,
                          timeout=600)


class WheelTagTest(unittest.TestCase):
    def test_the_platform_tag_is_the_one_auditwheel_reports(self):
        build = os.environ.get("MOSS_BUILD_DIR")
        if not build or not os.path.exists(os.path.join(build,
                                                        "CMakeCache.txt")):
            self.skipTest("MOSS_BUILD_DIR names no configured build (the "
                          "test command sets it)")
        if _run([sys.executable, "-m", "auditwheel", "--version"]).returncode:
            self.skipTest("auditwheel is not installed (pip install "
                          "auditwheel)")
        with tempfile.TemporaryDirectory() as out:
            built = _run([sys.executable, "-m", "pip", "wheel", "--quiet",
                          "--no-deps", "--no-build-isolation", "-w", out,
                          ROOT])
            self.assertEqual(built.returncode, 0, built.stderr)
            (wheel,) = os.listdir(out)
            tag = wheel[:-len(".whl")].split("-")[-1]
            self.assertRegex(tag, r"^manylinux_\d+_\d+_x86_64$")
            shown = _run([sys.executable, "-m", "auditwheel", "show",
                          os.path.join(out, wheel)])
            self.assertEqual(shown.returncode, 0, shown.stderr)
            # auditwheel wraps its text at any space.
            reported = re.search(r'consistent\s+with\s+the\s+following\s+'
                                 r'platform\s+tag:\s+"([^"]+)"',
                                 shown.stdout)
            self.assertIsNotNone(reported, shown.stdout)
            self.assertEqual(tag, reported.group(1))


class CudaWheelsTest(unittest.TestCase):
    """MOSS_CUDA_SKIP_TOOLKIT=1 hides the toolkit's locations, as on a
    machine with only the driver and pip's CUDA wheels."""

    def setUp(self):
        self.cli = cli_path()
        if self.cli is None:
            self.skipTest("moss-jit not found (set MOSS_JIT_CLI)")
        self.wheels = [d for d in _capi._cuda_wheel_dirs()
                       if os.path.exists(os.path.join(d, "libnvrtc.so.13"))]
        if not self.wheels:
            self.skipTest("no nvidia-cuda-nvrtc wheel (pip install torch, or "
                          "nvidia-cuda-nvrtc, brings one)")
        self.cache = tempfile.TemporaryDirectory()
        self.env = dict(os.environ, MOSS_CUDA_SKIP_TOOLKIT="1",
                        CUDA_HOME=os.path.join(self.cache.name, "no-toolkit"),
                        MOSS_CACHE_DIR=self.cache.name)
        self.env.pop("MOSS_NVRTC_PATH", None)

    def tearDown(self):
        self.cache.cleanup()

    def test_importing_moss_jit_lists_the_wheels(self):
        listed = os.environ.get("MOSS_CUDA_LIBRARY_DIRS", "").split(":")
        for directory in self.wheels:
            self.assertIn(directory, listed)

    def test_a_kernel_compiles_with_the_wheels_nvrtc(self):
        stats = _run([self.cli, "cache", "stats"], self.env)
        self.assertEqual(stats.returncode, 0, stats.stderr)
        loaded = re.search(r"NVRTC \S+ \((.*libnvrtc\.so[.\d]*)\)",
                           stats.stdout)
        self.assertIsNotNone(loaded, stats.stdout)
        self.assertIn(os.path.dirname(os.path.realpath(loaded.group(1))),
                      [os.path.realpath(d) for d in self.wheels])
        cubin = os.path.join(self.cache.name, "gemm.cubin")
        compiled = _run([self.cli, "compile", "-m", "256", "-n", "256", "-k",
                         "256", "--a-scheme", "moss:row", "--b-scheme",
                         "per-tensor", "--emit", "cubin", "-o", cubin],
                        self.env)
        self.assertEqual(compiled.returncode, 0, compiled.stderr)
        with open(cubin, "rb") as f:
            self.assertEqual(f.read(4), b"\x7fELF")

    def test_without_toolkit_or_wheels_the_error_says_where_it_looked(self):
        env = dict(self.env, MOSS_CUDA_LIBRARY_DIRS="")
        compiled = _run([self.cli, "compile", "-m", "256", "-n", "256", "-k",
                         "256", "--emit", "cubin", "-o",
                         os.path.join(self.cache.name, "gemm.cubin")], env)
        self.assertNotEqual(compiled.returncode, 0)
        self.assertIn("NVRTC (libnvrtc.so.13) not found", compiled.stderr)
        self.assertIn("nvidia-cuda-nvrtc", compiled.stderr)


if __name__ == "__main__":
    unittest.main()
