"""Shared by the Python tests: the cases every scheme runs, the moss-jit CLI
(the host reference, reached through another program), and skips."""

import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

# (scheme, format, block, global_scope, transpose, fold) of every
# quantization the package offers.
QUANTIZE_CASES = [
    ("per-tensor", "e4m3", None, "tensor", False, None),
    ("per-tensor", "e5m2", None, "tensor", True, None),
    ("per-row", "e4m3", None, "tensor", False, None),
    ("per-row", "e5m2", None, "tensor", True, None),
    ("per-group", "e4m3", None, "tensor", False, None),
    ("per-group", "e4m3", (128, 128), "tensor", False, None),
    ("per-group", "e5m2", 64, "tensor", True, None),
    ("mxfp8", "e4m3", None, "tensor", False, None),
    ("mxfp8", "e5m2", None, "tensor", True, None),
    ("mxfp8", "e4m3", None, "tensor", False, "row"),
    ("moss", "e4m3", None, "tensor", False, None),
    ("moss", "e4m3", None, "row", False, None),
    ("moss", "e5m2", 64, "row", True, None),
    ("moss", "e4m3", None, "tensor", True, None),
    ("moss", "e4m3", None, "row", False, "row"),
    ("moss", "e5m2", None, "tensor", False, "128"),
    ("moss", "e4m3", None, "row", True, "row"),
    ("mxfp8", "e4m3", None, "tensor", True, "128"),
]


def llm_like(rng, rows, cols):
    """Heavy-tailed values with outlier channels and a few non-tiny zeros:
    what activations look like."""
    x = rng.standard_t(4, size=(rows, cols)).astype(np.float32)
    x[:, rng.integers(0, cols, size=max(1, cols // 64))] *= 40.0
    x[rng.integers(0, rows), :] *= 1e-3
    return x


def cli_path():
    path = os.environ.get("MOSS_JIT_CLI")
    if path and os.path.exists(path):
        return path
    return shutil.which("moss-jit")


def block_arg(block):
    if block is None:
        return []
    if isinstance(block, tuple):
        return ["--block", f"{block[0]}x{block[1]}"]
    return ["--block", str(block)]


def cli_quantize(x, scheme, fmt, block, global_scope, transpose, fold,
                 both_layouts=False):
    """What `moss-jit quantize` (the host reference) writes for float32 x:
    (q, local or None, global or None); with both_layouts, that of the
    row-major layout and that of the transposed one."""
    cli = cli_path()
    if cli is None:
        raise unittest.SkipTest("moss-jit not found (set MOSS_JIT_CLI)")
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        args = [cli, "quantize", "--scheme", scheme, "--format", fmt,
                "--in", os.path.join(tmp, "x.npy"), "--out-dir", out]
        args += block_arg(block)
        if scheme == "moss":
            args += ["--global", global_scope]
        if transpose:
            args.append("--transpose")
        if fold:
            args += ["--fold", fold]
        if both_layouts:
            args.append("--both-layouts")
        subprocess.run(args, check=True, capture_output=True)

        def load(name):
            path = os.path.join(out, name)
            return np.load(path) if os.path.exists(path) else None

        layouts = [load(f"{name}{suffix}.npy")
                   for suffix in ("", "_t")
                   for name in ("q", "local", "global")]
        return (tuple(layouts[:3]), tuple(layouts[3:])) if both_layouts \
            else tuple(layouts[:3])


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def have_cuda():
    if not have_torch():
        return False
    import torch
    return torch.cuda.is_available()
