"""Exact dequantization and the FP64 GEMM: the references of the CPU path
and of the tests. Written from the format definitions (OCP FP8, E8M0), not
from libmoss's code."""

import math

import numpy as np


def _fp8_values(fmt):
    """The 256 values of an FP8 format's codes, as FP64."""
    mantissa_bits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    values = np.empty(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> mantissa_bits) & ((1 << (7 - mantissa_bits)) - 1)
        mantissa = code & ((1 << mantissa_bits) - 1)
        top = (1 << (7 - mantissa_bits)) - 1
        if fmt == "e4m3" and exponent == top and mantissa == 7:
            values[code] = math.nan  # E4M3FN: no infinities, one NaN
        elif fmt == "e5m2" and exponent == top:
            values[code] = sign * math.inf if mantissa == 0 else math.nan
        elif exponent == 0:
            values[code] = sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
        else:
            values[code] = sign * (1 + mantissa / (1 << mantissa_bits)) * \
                2.0 ** (exponent - bias)
    return values


FP8_VALUES = {"e4m3": _fp8_values("e4m3"), "e5m2": _fp8_values("e5m2")}


def e8m0_values(codes):
    """2^(code - 127), NaN for 255, as FP64 numpy."""
    codes = np.asarray(codes, dtype=np.int64)
    values = np.ldexp(1.0, codes - 127)
    return np.where(codes == 255, np.nan, values)


def _to_numpy(t):
    if t is None:
        return None
    if isinstance(t, np.ndarray):
        return t
    import torch
    t = t.detach().cpu()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2,
                   getattr(torch, "float8_e8m0fnu", None)):
        t = t.view(torch.uint8)
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def dequantize_numpy(q, name="q"):
    """codes * scales of a MossTensor as an FP64 numpy array [rows, K]
    (its parts checked first, as `name`)."""
    from .tensor import check_parts
    check_parts(q, name)
    codes = _to_numpy(q.codes)
    values = FP8_VALUES[q.format][codes.astype(np.int64)]
    rows, k = values.shape
    local = _to_numpy(q.local_scales)
    glob = _to_numpy(q.global_scales)
    block_rows, block_cols = q.block
    if q.scheme in ("mxfp8", "moss"):
        factors = e8m0_values(local)
        values = values * np.repeat(factors, block_cols, axis=1)[:, :k]
    elif q.scheme == "per-group":
        factors = np.repeat(np.repeat(local.astype(np.float64), block_rows,
                                      axis=0), block_cols, axis=1)
        values = values * factors[:rows, :k]
    if glob is not None:
        glob = glob.astype(np.float64)
        values = values * (glob[0] if glob.size == 1 else glob.reshape(-1, 1))
    return values


def dequantize(q):
    """dequantize_numpy(q), as a torch tensor on the codes' device when the
    codes are a torch tensor."""
    values = dequantize_numpy(q)
    if isinstance(q.codes, np.ndarray):
        return values
    import torch
    return torch.from_numpy(values).to(q.codes.device)


def gemm_numpy(a, b, bias=None, c=None, beta=1.0):
    """The exact GEMM of two MossTensors: a @ b^T (+ bias) (+ beta * c), in
    FP64."""
    a_values, b_values = dequantize_numpy(a, "a"), dequantize_numpy(b, "b")
    if a_values.shape[1] != b_values.shape[1]:
        raise ValueError(f"a is {list(a_values.shape)} and b is "
                         f"{list(b_values.shape)}: both must be K-major with "
                         "the same K (D = a @ b^T)")
    d = a_values @ b_values.T
    if bias is not None:
        d = d + _to_numpy(bias).astype(np.float64).reshape(1, -1)
    if c is not None:
        d = d + beta * _to_numpy(c).astype(np.float64)
    return d
