"""MOSS-JIT for Python: JIT-compiled block-scaled FP8 GEMMs and the MOSS
quantizers, on torch tensors (docs/PYTHON.md).

    q = moss_jit.quantize(x, "moss", fold="row")    # MossTensor
    w = moss_jit.quantize(weight, "per-tensor")
    y = moss_jit.gemm(q, w)                          # x @ weight^T, bf16
    model = moss_jit.convert(model)                  # FP8 MOSS training

`quantize` also takes numpy arrays (the host reference quantizers), so the
package imports and works without torch; everything else needs torch.
"""

from ._capi import MossError
from ._quantize import quantize, quantize_both_layouts
from .tensor import MossTensor

from . import _capi

#: The project version of the libmoss the package carries.
__version__ = _capi.lib.moss_version().decode()

try:
    import torch as _torch_module  # noqa: F401
except ImportError:  # numpy-only use
    _torch_module = None

if _torch_module is not None:
    from . import _torch, nn, optim
    from ._torch import cast_with_scale
    from .convert import convert
    from .nn import attach_optimizer

    def gemm(a, b, out_dtype=None, bias=None, c=None, beta=1.0, amax=False,
             mma="auto", fold="auto", promote_k=0):
        """D = a @ b^T for MossTensors a [M, K] and b [N, K], plus `bias`
        [N] and beta * `c` [M, N] when given, in `out_dtype` (default
        torch.bfloat16). With amax=True, returns (D, max |D| as a float32
        tensor [1]). CUDA operands run the JIT kernel on the current stream
        (a Hopper GPU); CPU operands the exact FP64 reference.
        mma: 'auto', 'fp8' or 'f16' (moss_mma_type_t); fold: 'auto',
        'none', '128' or 'row' (moss_fold_t); promote_k: 0, or promote
        the tensor cores' partial sums to FP32 every 32, 64 or 128 of K
        where the schemes need no promotion (more accurate over long K,
        somewhat slower)."""
        return _torch.gemm(a, b, _torch_module.bfloat16
                           if out_dtype is None else out_dtype,
                           bias, c, beta, amax, mma, fold, promote_k)

    from ._dispatch import combine, dispatch_quantize, route
    from ._grouped import ExpertWeights, stack_experts

    def grouped_gemm(a, b, offsets, out_dtype=None, bias=None, fold="auto",
                     layout="contiguous", out=None):
        """The m-grouped GEMM of a mixture-of-experts layer: for each expert
        g, D[rows] = a[rows] @ b_g^T over its rows. a: MossTensor [M, K]
        quantized row by row (blocks of one row); b: the G experts'
        MossTensors [N, K] quantized alike, or stack_experts() of them (do
        that once: it copies the weights); bias: [G, N] or None.
        layout="contiguous": a holds the experts' rows in turn and offsets
        is an int32 tensor [G + 1] on a's device, 0 first and M last,
        non-decreasing (an expert may have no rows). layout="masked"
        (decoding, CUDA graphs): a holds M / G rows per expert (a
        [G, M / G, K] batch reshaped to [M, K]) and offsets is an int32
        tensor [G] of how many of them each expert uses; D's other rows are
        not written. Returns D [M, N] in `out_dtype` (default
        torch.bfloat16): `out` if given (contiguous, [M, N]), else a new
        tensor, zeros for the masked layout. CUDA operands run one JIT
        kernel for all experts with the offsets read on the GPU (no
        synchronization; values out of range give wrong rows, never an
        access outside the tensors); CPU operands the FP64 reference expert
        by expert, after checking the values. fold as in gemm() (by all M
        rows together)."""
        from ._grouped import grouped_gemm as run
        return run(a, b, offsets, _torch_module.bfloat16
                   if out_dtype is None else out_dtype, bias, fold, layout,
                   out)

    def k_grouped_gemm(a, b, offsets, out_dtype=None, mma="auto"):
        """The k-grouped GEMM of a mixture-of-experts weight gradient: for
        each expert g, D[g] = a[:, cols] @ b[:, cols]^T over its columns
        cols = offsets[g]:offsets[g + 1] (its tokens). a: MossTensor [M, K]
        (the output gradient, transposed: K-major over the tokens); b:
        MossTensor [N, K] (the inputs, likewise); K a multiple of 128.
        offsets: int32 tensor [G + 1] on a's device, 0 first, at most K
        last, non-decreasing, multiples of 128 (pad each expert's tokens
        with zeros; columns past the last offset are no expert's). Returns
        D [G, M, N] in `out_dtype` (default
        torch.bfloat16); an expert without tokens gets zeros. CUDA operands
        run one JIT kernel for all experts with the offsets read on the GPU
        (no synchronization); CPU operands the FP64 reference expert by
        expert, after checking the values. No fold: block-scaled operands
        keep their factors. mma as in gemm()."""
        from ._grouped import k_grouped_gemm as run
        return run(a, b, offsets, _torch_module.bfloat16
                   if out_dtype is None else out_dtype, mma)

__all__ = ["MossError", "MossTensor", "quantize", "quantize_both_layouts",
           "gemm", "grouped_gemm", "k_grouped_gemm", "stack_experts",
           "ExpertWeights",
           "route", "dispatch_quantize", "combine",
           "cast_with_scale",
           "convert", "nn", "optim", "attach_optimizer"]
