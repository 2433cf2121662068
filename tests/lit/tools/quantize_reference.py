#!/usr/bin/env python3
"""An independent numpy reference of the MOSS quantizers, and a driver that
holds `moss-jit quantize` to it bit for bit.

This file does not share code or structure with the C++ reference
(runtime/numerics): the FP8 encoder is a table of every finite code value
searched with np.searchsorted, with ties broken explicitly to the even code;
power-of-two exponents come from np.frexp. Every arithmetic step is done on
np.float32 arrays with explicit dtypes, so the results do not depend on
numpy's scalar promotion rules (which changed between 1.x and 2.x).

Modes:
  --self-test                  unit checks of the reference itself
  --moss-jit BIN --work-dir D  generate random inputs, run BIN quantize over
                               every scheme/format/block/transpose, compare
                               every output file with the reference
  --quantize ...               write the reference outputs for one input
                               (same flags as moss-jit quantize)

The arithmetic contract (docs/METHOD.md section 1, as made exact for the CLI):
  encode   one round-to-nearest-even from the exact float32 value, subnormals,
           sign of zero kept, saturating to +-max (also for +-inf), NaN->0x7F.
  per-tensor / per-row / per-group:
           s = float32(amax) / float32(fmax) in float32, s == 0 -> 1,
           codes = encode(float32(x / s)).
  mxfp8:   k = floor(log2(amax)) - emax clamped to [-127, 127] (zero block:
           -127), X = 2^k, codes = encode(float32(x / X)), E8M0 = k + 127.
  moss:    s_i = float32(amax_i / fmax); s = max over finite blocks of the
           tensor (or row), 0 or none -> 1; r = float32(s_i / s);
           e_i = ceil(log2 r) clamped to [-127, 0] (r == 0 -> -127);
           codes = encode(float32(float32(x * 2^-e_i) / s)), E8M0 = e_i + 127.
  A block holding NaN or Inf has the NaN scale (E8M0 0xFF, float32 NaN
  0x7FC00000) and all its codes are 0x7F.
"""

import argparse
import bisect
import fractions
import math
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np
except ImportError:
    sys.stderr.write(f"quantize_reference.py needs numpy in {sys.executable} "
                     "(the python that runs lit): apt-get install "
                     "python3-numpy, or pip install numpy\n")
    sys.exit(2)

F32 = np.float32
NAN_CODE = 0x7F
E8M0_NAN = 0xFF
E8M0_MIN, E8M0_MAX = -127, 127
CANONICAL_NAN = np.array([0x7FC00000], dtype=np.uint32).view(F32)[0]

SCHEMES = ("per-tensor", "per-row", "per-group", "mxfp8", "moss")


# ---------------------------------------------------------------------------
# FP8 formats
# ---------------------------------------------------------------------------

class Fp8Format:
    """An OCP FP8 format described by its fields; the value of every code is
    derived from the field layout, not from bit manipulation of floats."""

    def __init__(self, name, ebits, mbits, bias, maxcode, has_inf):
        self.name = name
        self.ebits = ebits
        self.mbits = mbits
        self.bias = bias
        self.maxcode = maxcode  # largest finite positive code
        self.has_inf = has_inf
        # Exact values of the positive finite codes 0..maxcode, as Fractions
        # and as float64 (every FP8 value is exact in float64).
        self.exact = [self._exact_value(c) for c in range(maxcode + 1)]
        self.values = np.array([float(v) for v in self.exact], dtype=np.float64)
        assert np.all(np.diff(self.values) > 0), "codes must be monotonic"
        self.max = float(self.exact[-1])
        # emax: exponent of the largest normal binade (OCP MX emax_elem).
        self.emax = (2 ** ebits - 2 if has_inf else 2 ** ebits - 1) - bias

    def _exact_value(self, code):
        e = code >> self.mbits
        m = code & ((1 << self.mbits) - 1)
        if e == 0:  # subnormal: m * 2^(1 - bias - mbits)
            return fractions.Fraction(m) * fractions.Fraction(2) ** (
                1 - self.bias - self.mbits)
        return (1 + fractions.Fraction(m, 1 << self.mbits)) * \
            fractions.Fraction(2) ** (e - self.bias)

    def decode(self, code):
        """Value of a code as float64 (NaN for NaN codes, +-inf for E5M2
        infinities)."""
        sign = -1.0 if code & 0x80 else 1.0
        mag = code & 0x7F
        if mag <= self.maxcode:
            return sign * self.values[mag]
        if self.has_inf and mag == self.maxcode + 1:
            return sign * float("inf")
        return float("nan")

    def encode(self, x):
        """FP8 codes (uint8) of a float32 array: RNE with subnormals,
        saturating, sign of zero kept, NaN -> 0x7F."""
        x = np.asarray(x)
        assert x.dtype == F32, x.dtype
        shape = x.shape
        x = x.reshape(-1)
        nan = np.isnan(x)
        with np.errstate(invalid="ignore"):
            a = np.abs(x.astype(np.float64))  # exact
        a[nan] = 0.0
        vals = self.values
        # vals[lo] <= a < vals[lo + 1]; lo == maxcode when a >= max (incl. inf)
        lo = np.searchsorted(vals, a, side="right") - 1
        hi = np.minimum(lo + 1, self.maxcode)
        # Compare a with the midpoint as 2a vs lo+hi: both sides exact in
        # float64 (a float32 value times 2; a sum of two FP8 values).
        twice = 2.0 * a
        mid2 = vals[lo] + vals[hi]
        up = (twice > mid2) | ((twice == mid2) & (lo % 2 == 1))  # tie -> even
        code = np.where(up, hi, lo)
        # Beyond the largest finite value: saturate (the RNE result is either
        # max itself or a value beyond it, and both become max).
        code = np.where(lo >= self.maxcode, self.maxcode, code)
        code = code.astype(np.uint8)
        code |= np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
        code[nan] = NAN_CODE
        return code.reshape(shape)

    def saturates(self, x):
        """Mask of finite float32 values whose RNE result lies beyond max."""
        x = np.asarray(x, dtype=F32)
        a = np.abs(x.astype(np.float64))
        # The next value after max would be max + one step of the top binade;
        # RNE rounds beyond max when a exceeds the midpoint, or equals it and
        # max's code is odd (the next code would be even).
        step = self.values[-1] - self.values[-2]
        mid = self.max + step / 2
        odd = self.maxcode % 2 == 1
        return np.isfinite(x) & ((a > mid) | ((a == mid) & odd))


FORMATS = {
    # E4M3 "FN": no infinities, S.1111.111 is NaN, max 448 = 0x7E.
    "e4m3": Fp8Format("e4m3", ebits=4, mbits=3, bias=7, maxcode=0x7E,
                      has_inf=False),
    # E5M2: IEEE-like, 0x7C is inf, 0x7D..0x7F NaN, max 57344 = 0x7B.
    "e5m2": Fp8Format("e5m2", ebits=5, mbits=2, bias=15, maxcode=0x7B,
                      has_inf=True),
}


# ---------------------------------------------------------------------------
# float32 helpers
# ---------------------------------------------------------------------------

def f32(a):
    """Asserts that an array is float32 (catches silent promotion)."""
    assert isinstance(a, np.ndarray) and a.dtype == F32, (type(a), getattr(
        a, "dtype", None))
    return a


def pow2_f32(k):
    """2^k as float32 for integer k in [-149, 127] (exact, incl. subnormals)."""
    k = np.asarray(k, dtype=np.int32)
    assert np.all((k >= -149) & (k <= 127))
    # (np.asarray: a 0-d input gives a numpy scalar back)
    return f32(np.asarray(np.ldexp(np.ones(k.shape, dtype=F32), k), F32))


def floor_log2(a):
    """floor(log2 a) for positive finite float32 a, exactly (np.frexp:
    a = m * 2^E with m in [0.5, 1), so floor(log2 a) = E - 1)."""
    m, e = np.frexp(f32(a))
    assert m.dtype == F32
    return e.astype(np.int64) - 1


def ceil_log2(a):
    """ceil(log2 a) for positive finite float32 a, exactly: E - 1 when a is a
    power of two (m == 0.5), else E."""
    m, e = np.frexp(f32(a))
    e = e.astype(np.int64)
    return np.where(m == F32(0.5), e - 1, e)


def block_amax(xb):
    """float32 amax over the last axis and whether the block is finite."""
    f32(xb)
    finite = np.all(np.isfinite(xb), axis=-1)
    a = np.abs(xb)
    a = np.where(np.isfinite(a), a, F32(0))
    amax = f32(np.max(a, axis=-1))
    return amax, finite


# ---------------------------------------------------------------------------
# The quantizers
# ---------------------------------------------------------------------------

DEFAULT_BLOCK = {"per-group": 128, "mxfp8": 32, "moss": 32}


class QuantizeError(ValueError):
    pass


def normalize_block(scheme, block):
    """(rows, cols) of a block: None -> the default; int N -> (1, N)."""
    if scheme in ("per-tensor", "per-row"):
        if block is not None:
            raise QuantizeError("--block does not apply to " + scheme)
        return None
    if block is None:
        block = DEFAULT_BLOCK[scheme]
    if isinstance(block, str):
        parts = block.split("x")
        block = int(parts[0]) if len(parts) == 1 else (int(parts[0]),
                                                      int(parts[1]))
    if isinstance(block, int):
        block = (1, block)
    br, bc = block
    if br <= 0 or bc <= 0:
        raise QuantizeError("block must be positive")
    if br != 1 and scheme != "per-group":
        raise QuantizeError("only per-group takes a 2-D block")
    if scheme == "mxfp8" and (br, bc) != (1, 32):
        raise QuantizeError("mxfp8 blocks are 32 elements")
    return (br, bc)


def quantize(x, scheme, fmt="e4m3", block=None, global_scope=None,
             transpose=False):
    """Quantizes a 2-D float32 array. Returns (outputs, stats): outputs maps
    'q', 'local', 'global' to numpy arrays (only the ones the scheme has);
    stats counts 'nonfinite' blocks (groups, rows, the tensor) and
    'saturated' finite elements whose scaled value rounded beyond +-max."""
    x = np.asarray(x)
    if x.dtype != F32 or x.ndim != 2:
        raise QuantizeError("input must be a 2-D float32 array")
    if transpose:
        x = np.ascontiguousarray(x.T)
    f = FORMATS[fmt]
    if global_scope is not None and scheme != "moss":
        raise QuantizeError("--global applies only to moss")
    blk = normalize_block(scheme, block)
    rows, k = x.shape
    if blk is not None and k % blk[1] != 0:
        raise QuantizeError(f"K={k} is not a multiple of the block {blk[1]}")
    fmax = F32(f.max)
    with np.errstate(all="ignore"):
        if scheme in ("per-tensor", "per-row"):
            return _quantize_fp32_scales(x, f, fmax, scheme)
        if scheme == "per-group":
            return _quantize_per_group(x, f, fmax, blk)
        if scheme == "mxfp8":
            return _quantize_mxfp8(x, f)
        return _quantize_moss(x, f, blk[1], global_scope or "tensor")


def _stats(f, y, finite_el, finite_blocks):
    return {"nonfinite": int(np.count_nonzero(~finite_blocks)),
            "saturated": int(np.count_nonzero(f.saturates(y) & finite_el))}


def _fp32_scale(amax, finite, fmax):
    s = f32(amax / fmax)
    s = np.where(s == F32(0), F32(1), s)
    s = np.where(finite, s, CANONICAL_NAN)
    return f32(s)


def _quantize_fp32_scales(x, f, fmax, scheme):
    rows, k = x.shape
    if scheme == "per-tensor":
        amax, finite = block_amax(x.reshape(1, 1, rows * k))  # [1, 1]
        s = _fp32_scale(amax, finite, fmax).reshape(1)
        y = f32(x / s[0:1].reshape(1, 1))
        mask = np.broadcast_to(finite.reshape(1, 1), x.shape)
        glob = s
    else:
        amax, finite = block_amax(x)  # [rows]
        s = _fp32_scale(amax, finite, fmax)
        y = f32(x / s[:, None])
        mask = np.broadcast_to(finite[:, None], x.shape)
        glob = s
    q = f.encode(y)
    q[~mask] = NAN_CODE
    return {"q": q, "global": f32(glob)}, _stats(f, y, mask, finite)


def _quantize_per_group(x, f, fmax, blk):
    br, bc = blk
    rows, k = x.shape
    rb = -(-rows // br)
    # Pad rows with zeros to a whole number of row blocks (zeros change
    # neither amax nor finiteness).
    xp = np.zeros((rb * br, k), dtype=F32)
    xp[:rows] = x
    g = xp.reshape(rb, br, k // bc, bc).transpose(0, 2, 1, 3).reshape(
        rb, k // bc, br * bc)
    amax, finite = block_amax(g)  # [rb, k/bc]
    s = _fp32_scale(amax, finite, fmax)
    # Expand the scales back to elements.
    s_el = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:rows]
    fin_el = np.repeat(np.repeat(finite, br, axis=0), bc, axis=1)[:rows]
    y = f32(x / f32(s_el))
    q = f.encode(y)
    q[~fin_el] = NAN_CODE
    return {"q": q, "local": s}, _stats(f, y, fin_el, finite)


def _quantize_mxfp8(x, f):
    rows, k = x.shape
    xb = x.reshape(rows, k // 32, 32)
    amax, finite = block_amax(xb)
    safe = np.where(amax > F32(0), amax, F32(1))
    kexp = floor_log2(safe) - f.emax
    kexp = np.where(amax > F32(0), kexp, E8M0_MIN)
    kexp = np.clip(kexp, E8M0_MIN, E8M0_MAX)
    scale = pow2_f32(kexp)  # 2^-127 is an exact float32 subnormal
    y = f32(xb / scale[:, :, None])
    q = f.encode(y)
    q[~finite] = NAN_CODE
    local = np.where(finite, kexp + 127, E8M0_NAN).astype(np.uint8)
    return {"q": q.reshape(rows, k), "local": local}, \
        _stats(f, y, np.broadcast_to(finite[:, :, None], y.shape), finite)


def _quantize_moss(x, f, bc, scope):
    rows, k = x.shape
    xb = x.reshape(rows, k // bc, bc)
    amax, finite = block_amax(xb)  # [rows, nb]
    # s_i = amax_i / fmax: 448 for E4M3 as docs/METHOD.md writes it; the format's
    # own max (57344) for E5M2, as for the other schemes.
    s_i = f32(amax / F32(f.max))
    s_fin = np.where(finite, s_i, F32(0))
    if scope == "tensor":
        s = f32(np.max(s_fin).reshape(1))
        s = np.where(s == F32(0), F32(1), s)
        s_row = np.broadcast_to(s, (rows,))
    elif scope == "row":
        s = f32(np.max(s_fin, axis=1))
        s = f32(np.where(s == F32(0), F32(1), s))
        s_row = s
    else:
        raise QuantizeError("--global must be tensor or row")
    s_row = f32(np.ascontiguousarray(s_row))
    r = f32(s_fin / s_row[:, None])  # non-finite blocks: r = 0, unused
    pos = np.where(r > F32(0), r, F32(1))
    e = ceil_log2(pos)
    e = np.where(r > F32(0), e, E8M0_MIN)
    e = np.clip(e, E8M0_MIN, 0)
    t = f32(xb * pow2_f32(-e)[:, :, None])  # exact: a power of two <= 2^127
    y = f32(t / s_row[:, None, None])
    q = f.encode(y)
    q[~finite] = NAN_CODE
    local = np.where(finite, e + 127, E8M0_NAN).astype(np.uint8)
    return {"q": q.reshape(rows, k), "local": local, "global": f32(s)}, \
        _stats(f, y, np.broadcast_to(finite[:, :, None], y.shape), finite)


# ---------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------

class SelfTest:
    def __init__(self):
        self.failures = 0
        self.checks = 0

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            self.failures += 1
            print("self-test FAILED:", what)

    def eq(self, got, want, what):
        got = np.asarray(got)
        want = np.asarray(want)
        same = got.shape == want.shape and got.dtype == want.dtype and \
            got.tobytes() == want.tobytes()
        self.check(same, f"{what}: got {got!r} want {want!r}")


def encode_exact_slow(value, f):
    """A scalar encoder with exact rational arithmetic and a linear scan over
    all codes: nearest finite value, ties to the even code, beyond max ->
    max. Used to check the vectorized encoder."""
    v = float(value)
    if v != v:
        return NAN_CODE
    sign = 0x80 if np.signbit(np.float32(value)) else 0
    if v in (float("inf"), float("-inf")):
        return sign | f.maxcode
    a = abs(fractions.Fraction(v))
    if a > f.exact[-1]:
        return sign | f.maxcode
    best, best_d = None, None
    for c, val in enumerate(f.exact):
        d = abs(a - val)
        if best is None or d < best_d or (d == best_d and c % 2 == 0):
            best, best_d = c, d
    return sign | best


def encode_exact_bisect(value, f):
    """encode_exact_slow with a binary search for the two neighbours."""
    v = float(value)
    if v != v:
        return NAN_CODE
    sign = 0x80 if np.signbit(np.float32(value)) else 0
    if math.isinf(v):
        return sign | f.maxcode
    a = abs(fractions.Fraction(v))
    i = bisect.bisect_right(f.exact, a) - 1
    if i >= f.maxcode:
        return sign | f.maxcode
    dlo, dhi = a - f.exact[i], f.exact[i + 1] - a
    if dlo < dhi or (dlo == dhi and i % 2 == 0):
        return sign | i
    return sign | (i + 1)


def scalar_quantize(x, scheme, fmt, block, scope, transpose):
    """A second, element-by-element implementation of the contract with
    Python floats, used only by the self-test to catch vectorization and
    broadcasting mistakes. float32 rounding of one operation is done as
    float32(float64 result): for +, -, *, / of float32 operands that double
    rounding is innocuous (53 >= 2 * 24 + 2), so it equals the float32
    operation. Exponents come from loops over powers of two, not frexp."""
    f = FORMATS[fmt]
    xt = x.T if transpose else x
    rows, k = xt.shape
    v = xt.astype(np.float64).tolist()
    fmax = f.max

    def rn32(a):
        with np.errstate(all="ignore"):
            return float(np.float32(a))

    def stats(cells):
        vals = [v[i][j] for i, j in cells]
        if not all(math.isfinite(a) for a in vals):
            return None
        return max(abs(a) for a in vals)

    def fp32_scale(amax):
        if amax is None:
            return float("nan")
        s = rn32(amax / fmax)
        return 1.0 if s == 0 else s

    q = np.zeros((rows, k), np.uint8)

    def emit(i, j, y):
        q[i, j] = encode_exact_bisect(np.float32(y), f)

    def fill_nan(cells):
        for i, j in cells:
            q[i, j] = NAN_CODE

    blk = normalize_block(scheme, block)
    out = {}
    if scheme in ("per-tensor", "per-row"):
        groups = ([[(i, j) for i in range(rows) for j in range(k)]]
                  if scheme == "per-tensor" else
                  [[(i, j) for j in range(k)] for i in range(rows)])
        glob = []
        for cells in groups:
            s = fp32_scale(stats(cells))
            glob.append(s)
            if s != s:
                fill_nan(cells)
            else:
                for i, j in cells:
                    emit(i, j, rn32(v[i][j] / s))
        out["global"] = np.array(glob, F32)
    elif scheme == "per-group":
        br, bc = blk
        nrb = (rows + br - 1) // br
        local = np.zeros((nrb, k // bc), F32)
        for gi in range(nrb):
            for gj in range(k // bc):
                cells = [(i, j) for i in range(gi * br, min(rows, gi * br + br))
                         for j in range(gj * bc, gj * bc + bc)]
                s = fp32_scale(stats(cells))
                local[gi, gj] = s
                if s != s:
                    fill_nan(cells)
                else:
                    for i, j in cells:
                        emit(i, j, rn32(v[i][j] / s))
        out["local"] = local
    elif scheme == "mxfp8":
        local = np.zeros((rows, k // 32), np.uint8)
        for i in range(rows):
            for b in range(k // 32):
                cells = [(i, j) for j in range(32 * b, 32 * b + 32)]
                amax = stats(cells)
                if amax is None:
                    local[i, b] = E8M0_NAN
                    fill_nan(cells)
                    continue
                if amax == 0:
                    e = E8M0_MIN
                else:
                    fl = 0
                    while 2.0 ** fl > amax:
                        fl -= 1
                    while 2.0 ** (fl + 1) <= amax:
                        fl += 1
                    e = min(max(fl - f.emax, E8M0_MIN), E8M0_MAX)
                local[i, b] = e + 127
                for ii, j in cells:
                    emit(ii, j, rn32(v[ii][j] / 2.0 ** e))
        out["local"] = local
    else:
        bc = blk[1]
        nb = k // bc
        si = [[None] * nb for _ in range(rows)]
        for i in range(rows):
            for b in range(nb):
                amax = stats([(i, j) for j in range(b * bc, b * bc + bc)])
                si[i][b] = None if amax is None else rn32(amax / fmax)
        finite = [[a for a in r if a is not None] for r in si]
        if scope == "tensor":
            m = max([a for r in finite for a in r], default=0.0)
            gs = [1.0 if m == 0 else m] * rows
            out["global"] = np.array(gs[:1], F32)
        else:
            gs = [1.0 if max(r, default=0.0) == 0 else max(r) for r in finite]
            out["global"] = np.array(gs, F32)
        local = np.zeros((rows, nb), np.uint8)
        for i in range(rows):
            for b in range(nb):
                cells = [(i, j) for j in range(b * bc, b * bc + bc)]
                if si[i][b] is None:
                    local[i, b] = E8M0_NAN
                    fill_nan(cells)
                    continue
                r = rn32(si[i][b] / gs[i])
                e = 0
                while e > E8M0_MIN and 2.0 ** (e - 1) >= r:
                    e -= 1
                local[i, b] = e + 127
                for ii, j in cells:
                    t = rn32(v[ii][j] * 2.0 ** -e)
                    emit(ii, j, rn32(t / gs[i]))
        out["local"] = local
    out["q"] = q
    return out


def self_test(seed):
    t = SelfTest()
    rng = np.random.default_rng(seed)
    e4, e5 = FORMATS["e4m3"], FORMATS["e5m2"]

    # Format constants.
    t.check(e4.max == 448.0 and e4.maxcode == 0x7E, "e4m3 max 448 = 0x7E")
    t.check(e5.max == 57344.0 and e5.maxcode == 0x7B, "e5m2 max 57344 = 0x7B")
    t.check(e4.values[1] == 2.0 ** -9, "e4m3 min subnormal 2^-9")
    t.check(e5.values[1] == 2.0 ** -16, "e5m2 min subnormal 2^-16")
    t.check(e4.emax == 8 and e5.emax == 15, "emax 8 / 15")
    t.check(e4.values[8] == 2.0 ** -6 and e5.values[4] == 2.0 ** -14,
            "min normals")
    t.check(e4.decode(0x38) == 1.0 and e5.decode(0x3C) == 1.0, "1.0 codes")
    t.check(np.isnan(e4.decode(0x7F)) and np.isnan(e4.decode(0xFF)),
            "e4m3 NaN codes")
    t.check(e5.decode(0x7C) == float("inf") and
            e5.decode(0xFC) == float("-inf") and np.isnan(e5.decode(0x7D)),
            "e5m2 inf/NaN codes")
    t.check(CANONICAL_NAN.dtype == F32 and np.isnan(CANONICAL_NAN),
            "canonical NaN")

    for f in (e4, e5):
        name = f.name
        # Every one of the 256 codes: finite codes round trip, the others are
        # NaN (-> 0x7F) or E5M2 inf (-> saturates to +-max).
        codes = np.arange(256, dtype=np.uint8)
        vals = np.array([f.decode(int(c)) for c in codes])
        vals32 = vals.astype(F32)
        t.check(np.array_equal(vals32.astype(np.float64), vals, equal_nan=True),
                f"{name}: every code value is exact in float32")
        enc = f.encode(vals32)
        for c in range(256):
            v = vals[c]
            if np.isnan(v):
                want = NAN_CODE
            elif np.isinf(v):
                want = (c & 0x80) | f.maxcode
            else:
                want = c
            if enc[c] != want:
                t.check(False, f"{name}: code 0x{c:02X} ({v}) -> 0x{enc[c]:02X}"
                        f", want 0x{want:02X}")
        t.check(f.encode(np.array([0.0], F32))[0] == 0x00, f"{name}: +0")
        t.check(f.encode(np.array([-0.0], F32))[0] == 0x80, f"{name}: -0")

        # Ties to even between every pair of consecutive codes (all binades,
        # the subnormal/normal boundary, 0 and the smallest subnormal), and
        # one float32 ulp either side of every midpoint.
        for c in range(f.maxcode):
            lo, hi = f.exact[c], f.exact[c + 1]
            mid = (lo + hi) / 2
            m32 = np.array([float(mid)], F32)
            t.check(fractions.Fraction(float(m32[0])) == mid,
                    f"{name}: midpoint exact in float32")
            even = c if c % 2 == 0 else c + 1
            below = np.nextafter(m32, F32(0))
            above = np.nextafter(m32, F32(np.inf))
            got = [int(f.encode(v)[0]) for v in (m32, below, above, -m32,
                                                 -below, -above)]
            want = [even, c, c + 1, 0x80 | even, 0x80 | c, 0x80 | (c + 1)]
            if got != want:
                t.check(False, f"{name}: tie between 0x{c:02X} and "
                        f"0x{c + 1:02X}: got {got} want {want}")

        # Saturation boundary: the midpoint between max and the next value
        # beyond it, and one ulp either side.
        step = f.exact[-1] - f.exact[-2]
        beyond_mid = float(f.exact[-1] + step / 2)  # 464 or 61440
        top = F32(f.max)
        cases = [
            (top, f.maxcode),
            (np.nextafter(top, F32(0)), f.maxcode),
            (np.nextafter(top, F32(np.inf)), f.maxcode),
            (F32(beyond_mid), f.maxcode),
            (np.nextafter(F32(beyond_mid), F32(np.inf)), f.maxcode),
            (F32(3.0e38), f.maxcode),
            (F32(np.inf), f.maxcode),
            (F32(-np.inf), 0x80 | f.maxcode),
            (F32(-3.0e38), 0x80 | f.maxcode),
            (F32(np.nan), NAN_CODE),
            (-F32(np.nan), NAN_CODE),
        ]
        for v, want in cases:
            got = int(f.encode(np.array([v], F32))[0])
            t.check(got == want, f"{name}: encode({v!r}) = 0x{got:02X}, want "
                    f"0x{want:02X}")
        sat = f.saturates(np.array(
            [f.max, beyond_mid, np.nextafter(F32(beyond_mid), F32(np.inf)),
             np.inf], F32))
        # E4M3: 464 ties to 448 (0x7E even) -> not saturated.
        # E5M2: 61440 ties to 65536 (0x7C even) -> saturated.
        want_sat = [False, name == "e5m2", True, False]
        t.check(list(sat) == want_sat, f"{name}: saturation flags {sat}")

        # Smallest values: half the min subnormal ties to 0 (even); a hair
        # above rounds up; negative tiny values keep the sign (0x80).
        mins = float(f.exact[1])
        cases = [
            (F32(mins), 0x01),
            (F32(mins / 2), 0x00),
            (np.nextafter(F32(mins / 2), F32(1)), 0x01),
            (F32(-mins / 2), 0x80),
            (F32(1.5 * mins), 0x02),  # tie 1 vs 2 -> 2
            (F32(2.5 * mins), 0x02),  # tie 2 vs 3 -> 2
            (F32(1e-45), 0x00),
            (F32(-1e-45), 0x80),
        ]
        for v, want in cases:
            got = int(f.encode(np.array([v], F32))[0])
            t.check(got == want, f"{name}: encode({v!r}) = 0x{got:02X}, want "
                    f"0x{want:02X}")

        # Random float32 values against the exact scalar encoder: arbitrary
        # bit patterns, and values concentrated in the format's range.
        bits = rng.integers(0, 2 ** 32, size=3000, dtype=np.uint64).astype(
            np.uint32)
        r1 = bits.view(F32)
        r2 = (rng.standard_normal(3000) * (2.0 ** rng.uniform(
            -f.bias - f.mbits - 3, f.emax + 2, size=3000))).astype(F32)
        for arr in (r1, r2):
            got = f.encode(arr)
            for v, g in zip(arr, got):
                w = encode_exact_slow(v, f)
                if g != w:
                    t.check(False, f"{name}: encode({v!r}) = 0x{g:02X}, exact "
                            f"0x{w:02X}")
                    break

    # frexp-based exponents, including float32 subnormals.
    a = np.array([1.0, 0.75, 448.0, 2.0 ** -126, 2.0 ** -140, 2.0 ** -149,
                  3.0 * 2.0 ** -149, 3.4e38], F32)
    t.eq(floor_log2(a), np.array([0, -1, 8, -126, -140, -149, -148, 127]),
         "floor_log2")
    t.eq(ceil_log2(a), np.array([0, 0, 9, -126, -140, -149, -147, 128]),
         "ceil_log2")
    t.eq(pow2_f32(np.array([-127, -149, 127, 0])).view(np.uint32),
         np.array([0x00400000, 0x00000001, 0x7F000000, 0x3F800000], np.uint32),
         "pow2_f32 bit patterns")

    u8 = lambda *v: np.array(v, dtype=np.uint8)  # noqa: E731
    f32a = lambda *v: np.array(v, dtype=F32)  # noqa: E731

    # --- per-tensor, E4M3. amax 896 -> s = 2; x/s = 0.5, -1, 0.25, 448.
    # 0.5 = 2^-1: exponent field -1+7 = 6 -> 0x30; -1.0 -> 0x38|0x80 = 0xB8;
    # 0.25 -> 0x28; 448 -> 0x7E.
    out, nf = quantize(f32a([1, -2, 0.5, 896]), "per-tensor")
    t.eq(out["q"], u8([0x30, 0xB8, 0x28, 0x7E]).reshape(1, 4), "per-tensor q")
    t.eq(out["global"], f32a(2.0), "per-tensor s")
    t.check(set(out) == {"q", "global"} and nf["nonfinite"] == 0,
            "per-tensor outputs")

    # All zeros (with -0): s = 1, codes 0x00 / 0x80.
    out, _ = quantize(f32a([0.0, -0.0], [0.0, 0.0]), "per-tensor", "e5m2")
    t.eq(out["q"], u8([0, 0x80], [0, 0]), "per-tensor zeros q")
    t.eq(out["global"], f32a(1.0), "per-tensor zeros s")

    # Non-finite tensor: NaN scale (0x7FC00000) and all codes 0x7F.
    out, nf = quantize(f32a([1.0, np.inf], [2.0, 3.0]), "per-tensor")
    t.eq(out["q"], np.full((2, 2), 0x7F, np.uint8), "per-tensor inf q")
    t.eq(out["global"].view(np.uint32), np.array([0x7FC00000], np.uint32),
         "per-tensor inf s is the canonical NaN")
    t.check(nf["nonfinite"] == 1, "per-tensor non-finite count")

    # --- per-row, E4M3. Row 0: amax 1344 -> s = 3; x = 1 -> float32(1/3) =
    # 0.33333334, in [0.25, 0.5) with step 2^-5: 0.25 + 2.67 steps -> 3
    # steps = 0.34375 = 1.375 * 2^-2 -> exponent field 5, mantissa 3 ->
    # 0x2B; 1344/3 = 448 -> 0x7E. Row 1 has a NaN: NaN scale, codes 0x7F.
    # Row 2 is zero: s = 1.
    out, nf = quantize(f32a([1, 1344], [np.nan, 1], [0, 0]), "per-row")
    t.eq(out["q"], u8([0x2B, 0x7E], [0x7F, 0x7F], [0, 0]), "per-row q")
    t.eq(out["global"].view(np.uint32),
         np.array([0x40400000, 0x7FC00000, 0x3F800000], np.uint32),
         "per-row s = [3, NaN, 1]")
    t.check(nf["nonfinite"] == 1, "per-row non-finite count")

    # --- per-group 1x4 E5M2: group 0 amax 57344*4 -> s = 4 exactly;
    # 4 -> 1.0 = 0x3C, -229376 -> -57344 = 0xFB, 6 -> 1.5 = 0x3E, 5 -> 1.25
    # = 0x3D. Group 1 all zero -> s = 1, codes 0.
    x = f32a([4, -229376, 6, 5, 0, 0, 0, 0])
    out, _ = quantize(x, "per-group", "e5m2", block=4)
    t.eq(out["q"], u8([0x3C, 0xFB, 0x3E, 0x3D, 0, 0, 0, 0]).reshape(1, 8),
         "per-group q")
    t.eq(out["local"], f32a([4.0, 1.0]), "per-group scales")
    t.check(set(out) == {"q", "local"}, "per-group outputs")

    # per-group 2x2 blocks on 3 rows: ceil(3/2) = 2 block rows; the third row
    # forms a block alone. Block (0,0) = {896, 2, 1, 0}: s = 2 -> row 0 codes
    # 448 = 0x7E, 1 = 0x38. Block (0,1) = {448, 1, 0, -448}: s = 1 -> 0x7E,
    # 0x38. Block (1,0) = row 2 cols 0-1: s = float32(4.375 / 448). Block
    # (1,1) holds NaN: NaN scale, codes 0x7F.
    x = f32a([896, 2, 448, 1], [1, 0, 0, -448], [4.375, 1, np.nan, 0])
    out, nf = quantize(x, "per-group", block=(2, 2))
    s10 = f32a(4.375) / F32(448)
    t.eq(out["local"], np.array([[2, 1], [s10[0], np.nan]], F32)
         .astype(F32), "per-group 2x2 scales")
    t.eq(out["q"][2, 2:], u8(0x7F, 0x7F), "per-group non-finite codes")
    t.eq(out["q"][0], u8(0x7E, 0x38, 0x7E, 0x38), "per-group 2x2 q row 0")
    t.check(nf["nonfinite"] == 1, "per-group non-finite count")

    # --- mxfp8 E4M3, 4 blocks of 32:
    # block 0: amax 1.0 -> floor(log2) = 0, k = -8, X = 2^-8 -> 1.0 * 256 =
    #   256 = 2^8 -> field 15 -> 0x78; 0.5 -> 128 = 0x70. E8M0 119.
    # block 1: amax 500 -> floor(log2 500) = 8 -> k = 0, X = 1; 500 > 464
    #   -> saturates to 0x7E; 464 ties to 448 -> 0x7E; 460 -> 448 (0x7E).
    #   E8M0 127.
    # block 2: zeros -> k = -127, E8M0 0x00, codes 0.
    # block 3: holds -inf -> E8M0 0xFF, codes 0x7F.
    x = np.zeros((1, 128), F32)
    x[0, 0], x[0, 1] = 1.0, 0.5
    x[0, 32], x[0, 33], x[0, 34] = 500, 464, 460
    x[0, 96], x[0, 100] = 1.0, -np.inf
    out, nf = quantize(x, "mxfp8")
    t.eq(out["local"], u8([119, 127, 0, 0xFF]), "mxfp8 E8M0")
    t.eq(out["q"][0, [0, 1, 32, 33, 34, 2]], u8(0x78, 0x70, 0x7E, 0x7E, 0x7E,
                                                0), "mxfp8 codes")
    t.check(np.all(out["q"][0, 96:] == 0x7F) and nf["nonfinite"] == 1,
            "mxfp8 non-finite")
    # Of 500, 464 and 460 only 500 rounds beyond 448 (464 ties down to it).
    t.check(nf["saturated"] == 1, "mxfp8 saturated count")
    t.check(set(out) == {"q", "local"}, "mxfp8 outputs")
    # E5M2: amax 1.0 -> k = 0 - 15 = -15; 1.0 * 2^15 = 32768 = 2^15 ->
    # field 30, mantissa 0 -> 0x78. A tiny block: amax 2^-140 -> k = -155 ->
    # clamps to -127 -> X = 2^-127; 2^-140 / 2^-127 = 2^-13 -> E5M2 normal
    # field -13+15 = 2 -> 0x08.
    x = np.zeros((1, 64), F32)
    x[0, 0] = 1.0
    x[0, 32] = 2.0 ** -140
    out, _ = quantize(x, "mxfp8", "e5m2")
    t.eq(out["local"], u8([112, 0]), "mxfp8 e5m2 E8M0 (k=-15, clamp -127)")
    t.eq(out["q"][0, [0, 32]], u8(0x78, 0x08), "mxfp8 e5m2 codes")

    # --- moss E4M3, global tensor, block 32, one row of 4 blocks:
    # block 0 amax 448 -> s_0 = 1 = s. e_0 = 0 (E8M0 127).
    # block 1 amax 100 -> s_1 = float32(100/448) = 0.2232..; r = s_1;
    #   ceil(log2 0.2232) = -2 (E8M0 125). 100 * 4 / 1 = 400: in [256, 512)
    #   with step 32, 400 is the midpoint of 384 (mantissa 4, even) and 416
    #   -> 384 = field 15, mantissa 4 -> 0x7C.
    # block 2 amax 224 -> s_2 = 0.5 exactly -> r = 0.5 -> e = -1 (E8M0 126);
    #   224 * 2 = 448 -> 0x7E.
    # block 3 amax 448 * 2^-130 -> s_3 = 2^-130 -> e = -130 clamps to -127
    #   (E8M0 0); x * 2^127 = 448 * 2^-3 = 56 = 1.75 * 2^5 -> field 12,
    #   mantissa 6 -> 0x66.
    x = np.zeros((1, 128), F32)
    x[0, 0] = 448
    x[0, 32] = 100
    x[0, 64] = -224
    x[0, 96] = 448 * 2.0 ** -130
    out, nf = quantize(x, "moss")
    t.eq(out["local"], u8([127, 125, 126, 0]).reshape(1, 4), "moss E8M0")
    t.eq(out["global"], f32a(1.0), "moss global")
    t.eq(out["q"][0, [0, 32, 64, 96]], u8(0x7E, 0x7C, 0xFE, 0x66), "moss q")
    t.check(set(out) == {"q", "local", "global"} and nf["nonfinite"] == 0,
            "moss outputs")

    # moss per row: row 0 = [448 | 0 block], row 1 = [NaN block | 2 block],
    # row 2 all NaN, row 3 all zero.
    # row 0: s = 1, E8M0 [127, 0 (zero block)].
    # row 1: s = 2/448 = float32(2/448); block 1 r = 1 -> E8M0 127; code
    #   float32(2 / s) = 448 (or within an ulp) -> 0x7E; block 0 -> 0xFF.
    # row 2: no finite block -> s = 1; both E8M0 0xFF, codes 0x7F.
    # row 3: s = 1, E8M0 0, codes 0.
    x = np.zeros((4, 64), F32)
    x[0, 0] = 448
    x[1, 5] = np.nan
    x[1, 40] = 2
    x[2, :] = np.nan
    out, nf = quantize(x, "moss", global_scope="row")
    s1 = (f32a(2) / F32(448))[0]
    t.eq(out["global"], f32a(1, s1, 1, 1), "moss row global")
    t.eq(out["local"], u8([127, 0], [0xFF, 127], [0xFF, 0xFF], [0, 0]),
         "moss row E8M0")
    t.eq(out["q"][:, [0, 40]], u8([0x7E, 0], [0x7F, 0x7E], [0x7F, 0x7F],
                                  [0, 0]), "moss row q")
    t.check(nf["nonfinite"] == 3, "moss row non-finite count")
    # The same input with a tensor global: s = max over finite blocks = 1;
    # row 1 block 1: s_i = 2/448 -> ceil(log2 0.00446) = -7 (E8M0 120);
    # 2 * 2^7 = 256 -> 0x78.
    out, _ = quantize(x, "moss", global_scope="tensor")
    t.eq(out["global"], f32a(1), "moss tensor global")
    t.eq(out["local"][1], u8(0xFF, 120), "moss tensor E8M0 row 1")
    t.eq(out["q"][1, 40], np.uint8(0x78), "moss tensor q row 1")
    # All zero / all non-finite tensors: s = 1.
    out, _ = quantize(np.zeros((2, 32), F32), "moss")
    t.eq(out["global"], f32a(1), "moss zero global")
    t.eq(out["local"], u8([0], [0]), "moss zero E8M0")
    out, _ = quantize(np.full((1, 32), np.inf, F32), "moss", "e5m2")
    t.eq(out["global"], f32a(1), "moss inf global")
    t.eq(out["local"], u8([0xFF]), "moss inf E8M0")
    # E5M2 moss (s_i = amax / 57344): block amaxes 57344 and 7168 -> s_0 = 1
    # = s, s_1 = r = 1/8 -> e = -3 (E8M0 124); -7168 * 8 = -57344 -> 0xFB.
    x = np.zeros((1, 64), F32)
    x[0, 0] = 57344
    x[0, 32] = -7168
    out, _ = quantize(x, "moss", "e5m2")
    t.eq(out["global"], f32a(1), "moss e5m2 global")
    t.eq(out["local"], u8([127, 124]), "moss e5m2 E8M0")
    t.eq(out["q"][0, [0, 32]], u8(0x7B, 0xFB), "moss e5m2 q")

    # The vectorized quantizers against the element-by-element one on small
    # random inputs with mixed magnitudes, zeros, NaN, Inf and subnormals.
    x = (rng.standard_normal((6, 128)) *
         2.0 ** rng.integers(-20, 20, size=(6, 4)).repeat(32, axis=1))
    x = x.astype(F32)
    x[1, 32:64] = 0
    x[2, 64:96] = (x[2, 64:96] * 2.0 ** -130).astype(F32)
    x[3, 7] = np.nan
    x[4, 100] = -np.inf
    x[5, 3] = F32(-0.0)
    for fmt in FORMATS:
        for scheme, block, scope in [
                ("per-tensor", None, None), ("per-row", None, None),
                ("per-group", 32, None), ("per-group", 64, None),
                ("per-group", "4x32", None), ("mxfp8", None, None),
                ("moss", 32, "tensor"), ("moss", 64, "row"),
                ("moss", 32, "row")]:
            for transpose in (False, True):
                xin = np.ascontiguousarray(x.T) if transpose else x
                what = f"{scheme} {fmt} {block} {scope} T={transpose}"
                vec, _ = quantize(xin, scheme, fmt, block, scope, transpose)
                ref = scalar_quantize(xin, scheme, fmt, block, scope,
                                      transpose)
                for n in ref:
                    t.eq(vec[n], ref[n], f"vectorized vs scalar {what} {n}")
            # Finite-only tensors for per-tensor (one NaN poisons it all).
            xf = np.where(np.isfinite(x), x, F32(1))
            vec, _ = quantize(xf, "per-tensor", fmt)
            ref = scalar_quantize(xf, "per-tensor", fmt, None, None, False)
            for n in ref:
                t.eq(vec[n], ref[n], f"vectorized vs scalar per-tensor {n}")

    # Exact division ties: per-row, per-group 1x32/1x64 and moss --global row
    # must give encode(float32(x / s_row)) = encode(m) for these rows.
    for fmt, f in FORMATS.items():
        x, m = division_tie_rows(rng, f, 8, 128)
        want = f.encode(m)
        for scheme, block, scope in [("per-row", None, None),
                                     ("per-group", 32, None),
                                     ("per-group", 64, None),
                                     ("moss", 32, "row")]:
            out, _ = quantize(x, scheme, fmt, block, scope)
            t.eq(out["q"], want, f"division ties {scheme} {block} {fmt}")
        t.check(np.count_nonzero(f.encode(m) != f.encode(
            np.nextafter(m, F32(np.inf)))) > 100, "division ties are ties")

    # Transposed quantization is the quantization of the transpose.
    x = rng.standard_normal((64, 96)).astype(F32)
    a, _ = quantize(x, "moss", block=64, transpose=True)
    b, _ = quantize(np.ascontiguousarray(x.T), "moss", block=64)
    t.check(all(np.array_equal(a[n], b[n]) for n in a) and
            a["q"].shape == (96, 64) and a["local"].shape == (96, 1),
            "transpose")
    # per-group 128x128 shapes with ragged rows.
    out, _ = quantize(rng.standard_normal((130, 256)).astype(F32),
                      "per-group", block=(128, 128))
    t.check(out["local"].shape == (2, 2) and out["q"].shape == (130, 256),
            "per-group 128x128 shapes")
    # Output dtypes and shapes for every scheme.
    x = rng.standard_normal((5, 128)).astype(F32)
    for scheme, kw, shapes in [
            ("per-tensor", {}, {"q": (5, 128), "global": (1,)}),
            ("per-row", {}, {"q": (5, 128), "global": (5,)}),
            ("per-group", {}, {"q": (5, 128), "local": (5, 1)}),
            ("mxfp8", {}, {"q": (5, 128), "local": (5, 4)}),
            ("moss", {"global_scope": "row"},
             {"q": (5, 128), "local": (5, 4), "global": (5,)})]:
        out, _ = quantize(x, scheme, **kw)
        t.check({n: a.shape for n, a in out.items()} == shapes,
                f"{scheme} shapes")
        local_dtype = F32 if scheme == "per-group" else np.uint8
        want_dtypes = {"q": np.uint8, "local": local_dtype, "global": F32}
        t.check(all(a.dtype == want_dtypes[n] for n, a in out.items()),
                f"{scheme} dtypes")
    # Invalid options.
    for args in [("moss", {"block": 48}), ("mxfp8", {"block": 64}),
                 ("per-row", {"block": 32}), ("moss", {"block": (2, 32)})]:
        try:
            quantize(x, args[0], **args[1])
            t.check(False, f"{args} should be rejected")
        except QuantizeError:
            pass

    print(f"self-test: {t.checks} checks, {t.failures} failures "
          f"(numpy {np.__version__}, seed {seed})")
    return 0 if t.failures == 0 else 1


# ---------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------

def _fp8_grid_f32(f):
    """All positive finite values, midpoints, and one ulp either side of the
    midpoints, as float32."""
    v = f.values.astype(F32)
    mids = ((f.values[:-1] + f.values[1:]) / 2).astype(F32)
    return np.concatenate([v, mids, np.nextafter(mids, F32(0)),
                           np.nextafter(mids, F32(np.inf))])


def division_tie_rows(rng, f, rows, k):
    """Rows built so that float32(x / s_row) lands exactly on an FP8 midpoint
    or grid value of format f, for the row scale s_row = float32(A / fmax)
    that per-row, per-group (1xN) and moss --global row compute: every
    32-block holds the anchor +-A on a diagonal. An implementation that
    multiplies by a rounded reciprocal instead of dividing misses some of
    these ties. Returns (x, m) with m = float32(x / s_row)."""
    fmax = F32(f.max)
    grid = _fp8_grid_f32(f)
    grid = grid[(grid > 0) & (grid <= fmax)]
    x = np.zeros((rows, k), F32)
    m = np.zeros((rows, k), F32)
    for i in range(rows):
        while True:
            s = f32(np.array([rng.uniform(1, 2)], F32) *
                    pow2_f32(np.array([rng.integers(-10, 11)])))
            a = f32(s * fmax)
            if f32(a / fmax)[0] == s[0]:
                break
        cand = rng.choice(grid, size=4 * k)
        xc = f32(cand * s)
        ok = f32(xc / s) == cand
        cand, xc = cand[ok][:k], xc[ok][:k]
        assert cand.size == k
        sign = np.where(rng.random(k) < 0.5, F32(-1), F32(1))
        x[i], m[i] = xc * sign, cand * sign
        diag = np.arange(k) % 32 == i % 32
        x[i, diag], m[i, diag] = a[0], fmax
    return x, m


def make_datasets(rng):
    """Named 2-D float32 inputs [rows, K]; K is a multiple of 128."""

    def shape(max_rows=200):
        return int(rng.integers(33, max_rows + 1)), 128 * int(
            rng.integers(1, 4))

    ds = {}
    r, k = shape()
    ds["gaussian"] = (rng.standard_normal((r, k)) *
                      10.0 ** rng.uniform(-3, 3)).astype(F32)

    r, k = shape()
    df = float(rng.choice([1.0, 1.5, 2.0, 3.0]))
    ds["student-t"] = rng.standard_t(df, size=(r, k)).astype(F32)

    r, k = shape()
    x = rng.standard_normal((r, k))
    for c in rng.choice(k, size=int(rng.integers(1, 5)), replace=False):
        x[:, c] *= 10.0 ** rng.uniform(1.5, 3.5)  # outlier channels
    x[int(rng.integers(r))] *= 100.0  # and one outlier token
    ds["outlier-channels"] = x.astype(F32)

    r, k = shape()
    x = rng.standard_normal((r, k)).astype(F32)
    x[rng.random(r) < 0.25] = F32(0)
    x[int(rng.integers(r))] = F32(-0.0)
    for _ in range(8):  # zero blocks of 32, some of -0
        i, b = int(rng.integers(r)), int(rng.integers(k // 32))
        x[i, 32 * b:32 * b + 32] = F32(-0.0) if rng.random() < 0.5 else F32(0)
    ds["zero-rows"] = x

    r, k = shape()
    x = rng.standard_normal((r, k)).astype(F32)
    rows = rng.choice(r, size=5, replace=False)
    x[rows[0], 32 * int(rng.integers(k // 32)) + int(rng.integers(32))] = np.nan
    b = 32 * int(rng.integers(k // 32))
    x[rows[1], b:b + 32] = np.nan  # a NaN block
    x[rows[2], 32 * int(rng.integers(k // 32)) + 3] = np.inf
    b = 32 * int(rng.integers(k // 32))
    x[rows[3], b:b + 32] = -np.inf  # an Inf block
    x[rows[3], b + 5] = np.inf
    x[rows[4], int(rng.integers(k))] = -np.inf
    x[int(rng.integers(r)), :] = np.nan * (1 if rng.random() < 0.5 else -1)
    ds["nan-inf"] = x

    # Tiny values: float32 subnormals and the bottom of the normal range,
    # some rows of ordinary size so the block exponents clamp at -127.
    r, k = shape()
    x = rng.standard_normal((r, k)) * 2.0 ** rng.uniform(-152, -110,
                                                         size=(r, 1))
    x = x.astype(F32)
    x[rng.random(r) < 0.2] *= F32(2.0 ** 100)
    x[0, :4] = np.array([1e-45, -1e-45, 2.0 ** -149 * 3, 2.0 ** -126], F32)
    ds["tiny"] = x

    # Arbitrary finite float32 bit patterns (every exponent, subnormals).
    r, k = shape(96)
    expo = rng.integers(0, 255, size=(r, k), dtype=np.int64)
    mant = rng.integers(0, 1 << 23, size=(r, k), dtype=np.int64)
    sign = rng.integers(0, 2, size=(r, k), dtype=np.int64)
    bits = ((sign << 31) | (expo << 23) | mant).astype(np.uint32)
    ds["wide"] = bits.view(F32)

    # Blocks whose scales are exact powers of two (block amax = fmax * 2^j,
    # j <= 0, and each row has a j = 0 block) holding FP8 grid values,
    # midpoints and their float32 neighbours: exact ties under every scheme.
    for name, f in FORMATS.items():
        r, k = shape(160)
        grid = _fp8_grid_f32(f)
        x = rng.choice(grid, size=(r, k)) * np.where(
            rng.random((r, k)) < 0.5, F32(-1), F32(1))
        x = x.astype(F32)
        nb = k // 32
        j = rng.integers(-40, 1, size=(r, nb))
        j[:, 0] = 0
        j[rng.random((r, nb)) < 0.3] = 0
        xb = x.reshape(r, nb, 32)
        xb *= pow2_f32(j)[:, :, None]
        # One anchor +-fmax*2^j per block, on a diagonal so that 32-blocks of
        # the transposed matrix hold anchors too.
        for i in range(r):
            for b in range(nb):
                xb[i, b, i % 32] = F32(f.max) * pow2_f32(j[i, b]) * (
                    F32(1) if (i + b) % 3 else F32(-1))
        ds["pow2-blocks-" + name] = xb.reshape(r, k)

    # Block amaxes in the top of a binade (mantissa in [1.75, 2)): under
    # mxfp8 these scale to the saturation boundary of both formats
    # (E4M3 448..464..512, E5M2 57344..61440..65536).
    r, k = shape(128)
    nb = k // 32
    x = (rng.uniform(-1, 1, size=(r, k)) * 1.75).astype(F32)
    tops = np.array([1.75, 1.8125, 1.875, 1.9, 1.99999988], F32)
    tops = np.concatenate([tops, np.nextafter(tops, F32(0)),
                           np.nextafter(tops, F32(4))])
    xb = x.reshape(r, nb, 32)
    for i in range(r):
        for b in range(nb):
            n = int(rng.integers(1, 5))
            pos = rng.choice(32, size=n, replace=False)
            xb[i, b, pos] = rng.choice(tops, size=n) * np.where(
                rng.random(n) < 0.5, F32(-1), F32(1))
    xb *= pow2_f32(rng.integers(-60, 60, size=(r, nb)))[:, :, None]
    ds["saturation"] = xb.reshape(r, k)

    parts = [division_tie_rows(rng, f, int(rng.integers(16, 48)), 256)[0]
             for f in FORMATS.values()]
    ds["division-ties"] = np.concatenate(parts, axis=0)

    x = np.zeros((8, 128), F32)
    x[rng.random((8, 128)) < 0.5] = F32(-0.0)
    ds["all-zero"] = x

    for name, x in ds.items():
        assert x.dtype == F32 and x.ndim == 2 and x.shape[1] % 128 == 0, name
    return ds


# ---------------------------------------------------------------------------
# Running moss-jit and comparing
# ---------------------------------------------------------------------------

def run_configs():
    """(scheme, format, block, global, transpose, explicit) for every run.
    `explicit` False leaves --block/--format/--global out so the CLI's
    defaults are exercised."""
    out = []
    for fmt in FORMATS:
        for transpose in (False, True):
            out.append(("per-tensor", fmt, None, None, transpose))
            out.append(("per-row", fmt, None, None, transpose))
            for blk in ("32", "64", "128", "128x128"):
                out.append(("per-group", fmt, blk, None, transpose))
            out.append(("mxfp8", fmt, "32", None, transpose))
            for glob in ("tensor", "row"):
                for blk in ("32", "64", "128"):
                    out.append(("moss", fmt, blk, glob, transpose))
    configs = [c + (True,) for c in out]
    # Defaults: no --format/--block/--global.
    for scheme in SCHEMES:
        configs.append((scheme, "e4m3", None, None, False, False))
    return configs


def cli_args(cfg):
    scheme, fmt, blk, glob, transpose, explicit = cfg
    args = ["--scheme", scheme]
    if explicit:
        args += ["--format", fmt]
        if blk is not None:
            args += ["--block", blk]
        if glob is not None:
            args += ["--global", glob]
    if transpose:
        args.append("--transpose")
    return args


def describe(cfg):
    return " ".join(cli_args(cfg))


def read_npy(path):
    """(dtype string, shape, data bytes, data offset) of a .npy file, with the
    header parsed by numpy's own reader."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shp, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shp, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unexpected .npy version {version}")
        offset = fh.tell()
        data = fh.read()
    return dtype.str, shp, fortran, data, offset


def hexf(v):
    v = np.asarray(v, dtype=F32).reshape(1)
    return f"{v[0]!r} (0x{int(v.view(np.uint32)[0]):08X})"


def compare_file(path, name, want, x_in, cfg, ref):
    """None when the file matches `want` bit for bit, else a message."""
    try:
        dtype, shp, fortran, data, offset = read_npy(path)
    except (OSError, ValueError) as e:
        return f"{name}: cannot read it as .npy: {e}"
    if dtype != want.dtype.str or tuple(shp) != want.shape or fortran:
        return (f"{name}: dtype {dtype} shape {tuple(shp)} fortran_order "
                f"{fortran}, reference dtype {want.dtype.str} shape "
                f"{want.shape} fortran_order False")
    if offset % 64 != 0:
        return f"{name}: data starts at byte {offset}, not a multiple of 64"
    wbytes = want.tobytes()
    if data == wbytes:
        return None
    if len(data) != len(wbytes):
        return (f"{name}: {len(data)} data bytes, reference has "
                f"{len(wbytes)}")
    got = np.frombuffer(data, dtype=want.dtype).reshape(want.shape)
    diff = np.flatnonzero(got.reshape(-1).view(np.uint8 if want.itemsize == 1
                                               else np.uint32) !=
                          want.reshape(-1).view(np.uint8 if want.itemsize == 1
                                                else np.uint32))
    i = int(diff[0])
    idx = np.unravel_index(i, want.shape)
    msg = [f"{name}: {diff.size} of {want.size} elements differ; first at "
           f"{list(map(int, idx))}"]
    if want.dtype == F32:
        msg.append(f"moss-jit {hexf(got.reshape(-1)[i])}, reference "
                   f"{hexf(want.reshape(-1)[i])}")
    elif name == "local.npy":
        def e8m0(c):
            c = int(c)
            return f"0x{c:02X} ({'NaN' if c == E8M0_NAN else f'2^{c - 127}'})"
        msg.append(f"moss-jit E8M0 {e8m0(got.reshape(-1)[i])}, reference "
                   f"{e8m0(want.reshape(-1)[i])}")
    else:
        msg.append(f"moss-jit 0x{int(got.reshape(-1)[i]):02X}, reference "
                   f"0x{int(want.reshape(-1)[i]):02X}")
    if name == "q.npy":
        r, c = int(idx[0]), int(idx[1])
        transpose = cfg[4]
        xv = x_in[c, r] if transpose else x_in[r, c]
        where = f"input[{c}, {r}]" if transpose else f"input[{r}, {c}]"
        msg.append(f"{where} = {hexf(xv)}")
        f = FORMATS[cfg[1]]
        msg.append(f"(moss-jit decodes to {f.decode(int(got[r, c]))}, "
                   f"reference to {f.decode(int(want[r, c]))})")
        if "local" in ref:
            loc = ref["local"]
            kb = want.shape[1] // loc.shape[1]
            rb = -(-want.shape[0] // loc.shape[0])
            lv = loc[r // rb, c // kb]
            msg.append(f"reference local scale {int(lv)}" if loc.dtype ==
                       np.uint8 else f"reference local scale {hexf(lv)}")
        if "global" in ref:
            g = ref["global"]
            msg.append(f"reference global scale "
                       f"{hexf(g[0] if g.size == 1 else g[r])}")
    return "; ".join(msg)


def wants_report(ds_name):
    """--report (which must not change the outputs) on the inputs that hold
    NaN and Inf or saturate, so that its counts can be checked."""
    return ds_name in ("nan-inf", "saturation")


def run_one(binary, workdir, ds_name, in_path, cfg):
    scheme, fmt, blk, glob, transpose, explicit = cfg
    tag = "-".join([ds_name, scheme, fmt, blk or "none", glob or "none",
                    "T" if transpose else "N", "x" if explicit else "d"])
    out_dir = os.path.join(workdir, "out", tag)
    os.makedirs(out_dir)
    cmd = [binary, "quantize"] + cli_args(cfg) + ["--in", in_path,
                                                    "--out-dir", out_dir]
    if wants_report(ds_name):
        cmd.append("--report")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    return cmd, out_dir, proc


def run_rejected(binary, workdir, name, x, args):
    """Runs moss-jit on an input it must reject; a message or None."""
    path = os.path.join(workdir, "reject-" + name + ".npy")
    np.save(path, x)
    out_dir = os.path.join(workdir, "out", "reject-" + name)
    os.makedirs(out_dir)
    cmd = [binary, "quantize"] + args + ["--in", path, "--out-dir", out_dir]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if proc.returncode == 0:
        return f"{' '.join(cmd)}: accepted an input it must reject ({name})"
    if os.listdir(out_dir):
        return (f"{' '.join(cmd)}: failed but left files behind: "
                f"{sorted(os.listdir(out_dir))}")
    if not proc.stderr.strip():
        return f"{' '.join(cmd)}: failed without an error message"
    return None


def drive(binary, workdir, seed, max_report):
    start = time.time()
    print(f"quantize-bitexact: seed {seed} (rerun with --seed {seed}); "
          f"numpy {np.__version__}; moss-jit {binary}")
    sys.stdout.flush()
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(os.path.join(workdir, "out"))
    rng = np.random.default_rng(seed)
    datasets = make_datasets(rng)

    jobs = []
    inputs = {}
    for ds_name, x in datasets.items():
        # The non-transposed runs quantize x; the transposed runs get x.T as
        # their input (a matrix whose row count is a multiple of every block).
        for transpose in (False, True):
            xin = np.ascontiguousarray(x.T) if transpose else x
            path = os.path.join(workdir, f"{ds_name}{'-T' if transpose else ''}"
                                ".npy")
            np.save(path, xin)
            inputs[(ds_name, transpose)] = (path, xin)
        for cfg in run_configs():
            jobs.append((ds_name, cfg))

    failures = []
    workers = max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(ds, cfg, pool.submit(run_one, binary, workdir, ds,
                                         inputs[(ds, cfg[4])][0], cfg))
                   for ds, cfg in jobs]
        for ds_name, cfg, fut in futures:
            cmd, out_dir, proc = fut.result()
            in_path, xin = inputs[(ds_name, cfg[4])]
            scheme, fmt, blk, glob, transpose, explicit = cfg
            where = f"[{ds_name} {xin.shape[0]}x{xin.shape[1]}] {describe(cfg)}"
            if wants_report(ds_name):
                where += " --report"
            if proc.returncode != 0:
                failures.append(f"{where}: moss-jit exited with "
                                f"{proc.returncode}: {proc.stderr.strip()}")
                continue
            ref, stats = quantize(xin, scheme, fmt, blk, glob, transpose)
            if wants_report(ds_name):
                # The report's wording is the CLI's own; only lines naming
                # the non-finite and saturated counts are checked, when the
                # report has them.
                bad = []
                for key, word in (("nonfinite", "non-finite"),
                                  ("saturated", "saturated")):
                    m = re.search(word + r"\D*?(\d+)", proc.stdout)
                    if m and int(m.group(1)) != stats[key]:
                        bad.append(f"report says {m.group(0)!r}, reference "
                                   f"counts {stats[key]}")
                if bad:
                    failures.append(f"{where}: " + "; ".join(bad))
                    continue
            expected = {n + ".npy" for n in ref}
            present = set(os.listdir(out_dir))
            if present != expected:
                failures.append(f"{where}: output files {sorted(present)}, "
                                f"expected {sorted(expected)}")
                continue
            for n, want in ref.items():
                msg = compare_file(os.path.join(out_dir, n + ".npy"),
                                   n + ".npy", want, xin, cfg, ref)
                if msg:
                    failures.append(f"{where}: {msg}")
                    break

    # A few inputs the CLI must reject (K not a multiple of the block, an
    # mxfp8 block other than 32, a transposed input whose rows do not fill
    # the blocks). Rejecting means: non-zero exit, a message, no files.
    bad = rng.standard_normal((4, 100)).astype(F32)
    for name, x, args in [
            ("k-not-multiple", bad, ["--scheme", "moss"]),
            ("mxfp8-block-64", rng.standard_normal((4, 128)).astype(F32),
             ["--scheme", "mxfp8", "--block", "64"]),
            ("transpose-rows", rng.standard_normal((100, 128)).astype(F32),
             ["--scheme", "per-group", "--block", "32", "--transpose"])]:
        msg = run_rejected(binary, workdir, name, x, args)
        if msg:
            failures.append(msg)

    elapsed = time.time() - start
    total = len(jobs)
    if failures:
        print(f"quantize-bitexact: FAILED: {len(failures)} of {total + 3} runs "
              f"differ from the reference (seed {seed}; inputs and outputs "
              f"kept in {workdir})")
        print(f"  rerun: {sys.executable} {os.path.abspath(__file__)} "
              f"--moss-jit {binary} --work-dir {workdir} --seed {seed}")
        for msg in failures[:max_report]:
            print("  " + msg)
        if len(failures) > max_report:
            print(f"  ... and {len(failures) - max_report} more")
        return 1
    print(f"quantize-bitexact: {total} runs over {len(datasets)} inputs match "
          f"the reference bit for bit, 3 bad inputs rejected "
          f"({elapsed:.1f} s)")
    shutil.rmtree(os.path.join(workdir, "out"), ignore_errors=True)
    return 0


# ---------------------------------------------------------------------------
# Reference outputs for one input (the CLI's flags)
# ---------------------------------------------------------------------------

def write_reference(args):
    x = np.load(args.input)
    if x.dtype != F32 or x.ndim != 2:
        print("error: input must be a 2-D float32 array", file=sys.stderr)
        return 1
    try:
        out, stats = quantize(x, args.scheme, args.format, args.block,
                                  args.global_scope, args.transpose)
    except QuantizeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    for name, arr in out.items():
        np.save(os.path.join(args.out_dir, name + ".npy"), arr)
    print(f"non-finite {stats['nonfinite']} blocks, saturated "
          f"{stats['saturated']} values", file=sys.stderr)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--moss-jit", help="moss-jit binary to check")
    p.add_argument("--work-dir", help="scratch directory (recreated)")
    p.add_argument("--seed", type=int, help="random seed (default: fresh)")
    p.add_argument("--max-report", type=int, default=20)
    p.add_argument("--quantize", action="store_true",
                   help="write reference outputs like moss-jit quantize")
    p.add_argument("--scheme", choices=SCHEMES)
    p.add_argument("--format", choices=sorted(FORMATS), default="e4m3")
    p.add_argument("--block")
    p.add_argument("--global", dest="global_scope", choices=["tensor", "row"])
    p.add_argument("--transpose", action="store_true")
    p.add_argument("--in", dest="input")
    p.add_argument("--out-dir")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(
        os.urandom(4), "little")
    if args.self_test:
        return self_test(seed)
    if args.quantize:
        if not (args.scheme and args.input and args.out_dir):
            p.error("--quantize needs --scheme, --in and --out-dir")
        return write_reference(args)
    if args.moss_jit:
        if not args.work_dir:
            p.error("--moss-jit needs --work-dir")
        return drive(args.moss_jit, args.work_dir, seed, args.max_report)
    p.error("give --self-test, --moss-jit or --quantize")


if __name__ == "__main__":
    sys.exit(main())
