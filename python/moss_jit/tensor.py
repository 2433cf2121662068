"""MossTensor: FP8 codes with their scales, ready for gemm()."""

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import schemes


class MossTensor(NamedTuple):
    """A quantized K-major matrix: `codes` [rows, K] (the transpose of the
    input when quantized with transpose=True) and the scales they need.

    codes: FP8 codes (torch.float8_e4m3fn or torch.float8_e5m2; uint8 bit
      patterns for numpy arrays).
    local_scales: block scales, [rows / R, K / N]: E8M0 bytes as uint8
      (scale = 2^(code - 127), 255 = NaN) for mxfp8 and moss, FP32 for
      per-group; None for the other schemes.
    global_scales: FP32, [1] per tensor or [rows] per row; None for per-group
      and mxfp8.
    scheme, format, block ((R, N)), global_scope: how the codes are scaled.
      A folded quantization (docs/NUMERICS-CONTRACT.md section 8) has the
      scheme of its result, per-row or per-group, and `folded_from` names the
      scheme it was quantized with.
    """

    codes: Any
    local_scales: Optional[Any]
    global_scales: Optional[Any]
    scheme: str
    format: str = "e4m3"
    block: Tuple[int, int] = (1, 0)
    global_scope: str = "tensor"
    transposed: bool = False
    folded_from: Optional[str] = None

    @property
    def shape(self):
        """The shape of the codes, [rows, K]."""
        return tuple(self.codes.shape)

    @property
    def device(self):
        return getattr(self.codes, "device", "cpu")

    @classmethod
    def from_parts(cls, codes, scheme, local_scales=None, global_scales=None,
                   format="e4m3", block=None, global_scope="tensor"):
        """Wraps codes and scales quantized elsewhere, checking their shapes
        and dtypes against the scheme (as gemm() and dequantize() do)."""
        schemes._choice(scheme, schemes.SCHEMES, "scheme")
        schemes._choice(format, schemes.FORMATS, "format")
        schemes._choice(global_scope, schemes.GLOBAL_SCOPES, "global_scope")
        q = cls(codes, local_scales, global_scales, scheme, format,
                schemes.parse_block(scheme, block), global_scope)
        check_parts(q, "from_parts")
        return q

    def descriptor(self):
        """The operand's scheme in one string (the GEMM op's argument)."""
        rows, cols = self.block
        return (f"{self.scheme}:{self.format}:{rows}:{cols}:"
                f"{self.global_scope}")

    def dequantize(self):
        """The values codes * scales as FP64 (exact), [rows, K]: a
        reference for tests, not a fast path."""
        from . import reference
        return reference.dequantize(self)


def _kind(array):
    """'numpy' or 'torch' for the arrays a MossTensor may hold, else None."""
    if isinstance(array, np.ndarray):
        return "numpy"
    if type(array).__module__.startswith("torch") and hasattr(array, "dtype"):
        return "torch"
    return None


def _dtype_name(array):
    """The array's dtype without torch's prefix, E8M0 as 'e8m0'."""
    name = str(array.dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    return "e8m0" if name == "float8_e8m0fnu" else name


def scale_shapes(scheme, block, global_scope, rows, k):
    """The shapes of an operand's (local, global) scales under its scheme,
    None for those it has not."""
    block_rows, block_cols = block
    if scheme == "per-tensor":
        return None, (1,)
    if scheme == "per-row":
        return None, (rows,)
    local = (-(-rows // block_rows), k // block_cols)
    if scheme == "moss":
        return local, ((rows,) if global_scope == "row" else (1,))
    return local, None


def check_parts(q, name):
    """Checks that a MossTensor's parts fit its scheme: 2-D codes whose K is
    a multiple of the block, and scales of the shapes and dtypes the scheme
    gives them, all numpy arrays or all torch tensors. Raises TypeError or
    ValueError naming the part (`name`.codes, ...). Returns (rows, K)."""
    schemes._choice(q.scheme, schemes.SCHEMES, name + ".scheme")
    schemes._choice(q.format, schemes.FORMATS, name + ".format")
    schemes._choice(q.global_scope, schemes.GLOBAL_SCOPES,
                    name + ".global_scope")
    block = q.block
    if not (isinstance(block, tuple) and len(block) == 2 and
            all(type(b) is int for b in block)):
        raise TypeError(f"{name}.block={block!r} is not a pair of ints")
    if q.scheme in schemes.BLOCKED:
        try:
            schemes.parse_block(q.scheme, block)
        except ValueError as error:
            raise ValueError(f"{name}.{error}") from None
    kind = _kind(q.codes)
    if kind is None:
        raise TypeError(f"{name}.codes must be a torch tensor or a numpy "
                        f"array, not {type(q.codes).__name__}")
    # numpy has no FP8 dtypes: its codes are the bit patterns, as uint8.
    codes_dtypes = ("uint8",) if kind == "numpy" else \
        ({"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[q.format], "uint8")
    if _dtype_name(q.codes) not in codes_dtypes:
        raise TypeError(f"{name}.codes has dtype {q.codes.dtype}; format "
                        f"{q.format!r} needs {' or '.join(codes_dtypes)}")
    shape = tuple(q.codes.shape)
    if len(shape) != 2:
        raise ValueError(f"{name}.codes must be 2-D [rows, K], got shape "
                         f"{shape}")
    rows, k = shape
    block_cols = block[1]
    if q.scheme in schemes.BLOCKED and k % block_cols:
        raise ValueError(f"{name}.codes has K={k}, not a multiple of the "
                         f"scaling block {block_cols}")
    local_shape, global_shape = scale_shapes(q.scheme, block, q.global_scope,
                                             rows, k)
    local_dtypes = ("float32",) if q.scheme == "per-group" else \
        ("uint8",) if kind == "numpy" else ("uint8", "e8m0")
    for part, value, want, dtypes in (
            ("local_scales", q.local_scales, local_shape, local_dtypes),
            ("global_scales", q.global_scales, global_shape, ("float32",))):
        label = f"{name}.{part}"
        if value is None:
            if want is not None:
                raise ValueError(f"{label} is missing: scheme={q.scheme!r} "
                                 f"needs shape {want}")
            continue
        if want is None:
            raise ValueError(f"{label} is given, but scheme={q.scheme!r} "
                             "has none")
        value_kind = _kind(value)
        if value_kind != kind:
            raise TypeError(
                f"{label} is a {type(value).__module__}."
                f"{type(value).__name__}, but {name}.codes is a {kind} "
                f"{'tensor' if kind == 'torch' else 'array'}: the scales "
                "must be of the same kind")
        if _dtype_name(value) not in dtypes:
            raise TypeError(f"{label} has dtype {value.dtype}; "
                            f"scheme={q.scheme!r} needs "
                            f"{' or '.join(dtypes)}")
        if tuple(value.shape) != want:
            raise ValueError(f"{label} has shape {tuple(value.shape)}; "
                             f"scheme={q.scheme!r} with codes {shape} needs "
                             f"{want}")
    return rows, k
