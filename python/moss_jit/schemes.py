"""Scaling schemes by name, their checks, and the C specs built from them.

Names follow `moss-jit quantize`: per-tensor, per-row, per-group, mxfp8 and
moss (two-level: an FP32 global scale per tensor or per row times an E8M0
scale per block of K).
"""

import ctypes
import functools

from . import _capi

SCHEMES = tuple(_capi.SCHEMES)
FORMATS = tuple(_capi.FORMATS)
GLOBAL_SCOPES = tuple(_capi.GLOBAL_SCOPES)
# What each scheme's codes are scaled by (the GEMM operand kinds).
BLOCKED = ("per-group", "mxfp8", "moss")
FOLDABLE = ("mxfp8", "moss")


def _choice(value, choices, argument):
    if value not in choices:
        raise ValueError(f"{argument}={value!r} is not one of "
                         f"{', '.join(repr(c) for c in choices)}")
    return value


def parse_block(scheme, block):
    """(block_rows, block_cols) of `block`: None (the scheme's default), an
    int N (1xN), a pair (R, N) or a string 'N' / 'RxN'."""
    default = (1, {"per-group": 128, "mxfp8": 32, "moss": 32}.get(scheme, 0))
    # (1, 0) is the block of a scheme without blocks (MossTensor.block).
    if block is None or (scheme not in BLOCKED and block == default):
        return default
    if scheme not in BLOCKED:
        raise ValueError(f"block={block!r}: scheme={scheme!r} has no blocks")
    if isinstance(block, str):
        parts = block.lower().split("x")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) not in (1, 2):
            raise ValueError(f"block={block!r} is not 'N' or 'RxN'")
        block = numbers[0] if len(numbers) == 1 else tuple(numbers)
    if isinstance(block, int) and not isinstance(block, bool):
        rows, cols = 1, block
    elif (isinstance(block, tuple) and len(block) == 2 and
          all(isinstance(b, int) for b in block)):
        rows, cols = block
    else:
        raise ValueError(f"block={block!r} is not an int N, a pair (R, N) or "
                         "a string 'RxN'")
    if cols <= 0 or rows <= 0:
        raise ValueError(f"block={block!r} must be positive")
    if rows != 1 and (scheme != "per-group" or rows != cols):
        raise ValueError(f"block={block!r}: only per-group takes square RxN "
                         "blocks")
    if scheme == "mxfp8" and cols != 32:
        raise ValueError(f"block={block!r}: mxfp8 blocks are always 32")
    return rows, cols


def _make_spec(rows, cols, input_type, scheme, fmt, block_rows, block_cols,
               global_scope, transpose, fold):
    spec = _capi.QuantizeSpec()
    spec.struct_size = ctypes.sizeof(spec)
    spec.rows = rows
    spec.cols = cols
    spec.input = _capi.INPUTS[input_type]
    spec.scheme = _capi.SCHEMES[scheme]
    spec.block_rows = block_rows
    spec.block_cols = block_cols
    spec.global_scope = _capi.GLOBAL_SCOPES[global_scope]
    spec.format = _capi.FORMATS[fmt]
    spec.transpose = int(transpose)
    spec.fold = _capi.FOLDS[fold]
    return spec


@functools.lru_cache(maxsize=4096)
def quantize_spec(rows, cols, input_type, scheme, fmt, block_rows, block_cols,
                  global_scope, transpose, fold, host=False):
    """The moss_quantize_spec_t and its layout (cached), checked against the
    GPU quantizers' rules, or the host reference's where `host`."""
    spec = _make_spec(rows, cols, input_type, scheme, fmt, block_rows,
                      block_cols, global_scope, transpose, fold)
    layout = _capi.QuantizeLayout()
    write_layout = _capi.lib.moss_quantize_host_layout if host else \
        _capi.lib.moss_quantize_layout
    _capi.check(write_layout(ctypes.byref(spec), ctypes.byref(layout)))
    return spec, layout


@functools.lru_cache(maxsize=4096)
def both_layouts_spec(rows, cols, input_type, scheme, fmt, block_rows,
                      block_cols, global_scope, fold):
    """The checked spec of a dual-layout quantize (transpose off) and its
    two layouts, row-major then transposed (cached)."""
    spec = _make_spec(rows, cols, input_type, scheme, fmt, block_rows,
                      block_cols, global_scope, False, fold)
    row, transposed = _capi.QuantizeLayout(), _capi.QuantizeLayout()
    _capi.check(_capi.lib.moss_quantize_both_layouts_layout(
        ctypes.byref(spec), ctypes.byref(row), ctypes.byref(transposed)))
    return spec, row, transposed


def check_quantize_args(rows, cols, scheme, fmt, block, global_scope,
                        transpose, fold):
    """Checks the arguments of quantize(), naming them; returns the blocks
    and the fold as the C spec takes them."""
    _choice(scheme, SCHEMES, "scheme")
    _choice(fmt, FORMATS, "format")
    _choice(global_scope, GLOBAL_SCOPES, "global_scope")
    if fold is None:
        fold = "none"
    _choice(str(fold), ("none", "row", "128"), "fold")
    fold = str(fold)
    if fold != "none" and scheme not in FOLDABLE:
        raise ValueError(f"fold={fold!r}: only mxfp8 and moss have block "
                         f"factors to fold, not scheme={scheme!r}")
    block_rows, block_cols = parse_block(scheme, block)
    k = rows if transpose else cols
    if block_cols and k % block_cols:
        axis = "rows" if transpose else "columns"
        raise ValueError(
            f"x has {k} {axis} (the K axis), not a multiple of the block "
            f"{block_cols}")
    return block_rows, block_cols, fold
