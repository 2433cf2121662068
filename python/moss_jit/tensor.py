"""MossTensor: FP8 codes with their scales, ready for gemm()."""

from typing import Any, NamedTuple, Optional, Tuple

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
        """Wraps codes and scales quantized elsewhere (gemm() checks their
        shapes against the scheme)."""
        schemes._choice(scheme, schemes.SCHEMES, "scheme")
        schemes._choice(format, schemes.FORMATS, "format")
        return cls(codes, local_scales, global_scales, scheme, format,
                   schemes.parse_block(scheme, block), global_scope)

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
