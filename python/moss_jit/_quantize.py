"""quantize(): torch tensors (CUDA: the JIT quantizers on the current stream;
CPU: the host reference quantizers) and numpy arrays (host)."""

import ctypes

import numpy as np

from . import _capi, schemes
from .tensor import MossTensor


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _input_type(x):
    if isinstance(x, np.ndarray):
        if x.dtype == np.float32:
            return "f32"
        raise TypeError(f"x has dtype {x.dtype}; quantize takes float32 "
                        "numpy arrays (or float32/bfloat16 torch tensors)")
    import torch
    if x.dtype == torch.float32:
        return "f32"
    if x.dtype == torch.bfloat16:
        return "bf16"
    raise TypeError(f"x has dtype {x.dtype}; quantize takes torch.float32 or "
                    "torch.bfloat16 (convert with x.float() or "
                    "x.bfloat16())")


def _check_matrix(x, name):
    if not (isinstance(x, np.ndarray) or _is_torch(x)):
        raise TypeError(f"{name} must be a torch tensor or a numpy array, "
                        f"not {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [rows, K], got shape "
                         f"{tuple(x.shape)}")
    if 0 in x.shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}: it needs at "
                         "least one row and one column")
    contiguous = (x.flags["C_CONTIGUOUS"] if isinstance(x, np.ndarray)
                  else x.is_contiguous())
    if not contiguous:
        raise ValueError(f"{name} must be contiguous (row-major), got strides "
                         f"{tuple(x.strides if isinstance(x, np.ndarray) else x.stride())}; "
                         "pass x.contiguous()")


def quantize(x, scheme, format="e4m3", block=None, global_scope="tensor",
             transpose=False, fold=None, counters=None):
    """Quantizes a row-major [rows, K] matrix (K is the GEMM reduction axis,
    along which blocks run) into a MossTensor.

    scheme: 'per-tensor', 'per-row', 'per-group', 'mxfp8' or 'moss'
      (two-level).
    format: 'e4m3' or 'e5m2'.
    block: per-group N or (R, N) / 'RxN' (default 128), moss N (default 32);
      mxfp8 is always 32.
    global_scope: moss's global scale per 'tensor' or per 'row'.
    transpose: quantize x^T (codes [K_x, rows_x]) for the backward GEMMs.
    fold: 'row' or '128' folds moss and mxfp8 block factors into the codes
      (docs/NUMERICS-CONTRACT.md section 8): the result is a per-row or
      per-group MossTensor, the GEMM's fastest form.
    counters: optional int64 tensor (uint64 array) [2] the quantization adds
      its saturated values and non-finite blocks to.
    """
    _check_matrix(x, "x")
    input_type = _input_type(x)
    rows, cols = int(x.shape[0]), int(x.shape[1])
    block_rows, block_cols, fold = schemes.check_quantize_args(
        rows, cols, scheme, format, block, global_scope, transpose, fold)
    torch_side = None
    if not isinstance(x, np.ndarray):
        torch_side = _torch_side or _import_torch_side()
        if torch_side.compiling():
            # torch.compile traces the custom op; it runs the call itself.
            return torch_side.quantize_traced(x, scheme, format, block_rows,
                                              block_cols, global_scope,
                                              transpose, fold, counters)
    spec, layout = _spec(rows, cols, input_type, scheme, format, block_rows,
                         block_cols, global_scope, transpose, fold,
                         torch_side is None or not x.is_cuda)
    if torch_side is None:
        return _quantize_numpy(x, spec, layout, scheme, format, block_rows,
                               block_cols, global_scope, transpose, fold,
                               counters)
    return torch_side.quantize(x, spec, layout, scheme, format, block_rows,
                               block_cols, global_scope, transpose, fold,
                               counters)


def quantize_both_layouts(x, scheme, format="e4m3", block=None,
                          global_scope="tensor", fold=None):
    """Both layouts of x from one read: (quantize(x, ...), quantize(x, ...,
    transpose=True)), the forward GEMM's operand and the weight gradient's,
    bit for bit those two calls' results. On the GPU one kernel writes both
    (moss_quantize_both_layouts); on the CPU (and for numpy arrays) the host
    reference runs twice.

    Takes quantize()'s arguments. Both layouts must hold: K (x's columns)
    and x's rows multiples of the block. The GPU writes row-major blocks of
    at most 128 bytes of x (64 BF16 or 32 FP32 values), folds per row or not
    at all, and refuses square blocks.
    """
    _check_matrix(x, "x")
    input_type = _input_type(x)
    rows, cols = int(x.shape[0]), int(x.shape[1])
    for transpose in (False, True):
        block_rows, block_cols, fold_name = schemes.check_quantize_args(
            rows, cols, scheme, format, block, global_scope, transpose, fold)
    if not isinstance(x, np.ndarray) and x.is_cuda:
        torch_side = _torch_side or _import_torch_side()
        return torch_side.quantize_both_layouts(
            x, input_type, scheme, format, block_rows, block_cols,
            global_scope, fold_name)
    return (quantize(x, scheme, format, block, global_scope, False, fold),
            quantize(x, scheme, format, block, global_scope, True, fold))


# moss_jit._torch once imported: an import statement in quantize() would
# cost about as much as its argument checks on every call.
_torch_side = None


def _import_torch_side():
    global _torch_side
    from . import _torch
    _torch_side = _torch
    return _torch


def _spec(rows, cols, input_type, scheme, fmt, block_rows, block_cols,
          global_scope, transpose, fold, host):
    try:
        return schemes.quantize_spec(rows, cols, input_type, scheme, fmt,
                                     block_rows, block_cols, global_scope,
                                     bool(transpose), fold, host)
    except ValueError as error:
        raise ValueError(f"quantize: {error}") from None


def result_scheme(scheme, block_rows, block_cols, global_scope, fold):
    """(scheme, block, global_scope) of a quantization's result: a folded
    one has the scheme it became."""
    if fold == "128":
        return "per-group", (1, 128), global_scope
    if fold == "row":
        return "per-row", (1, 0), "row"
    return scheme, (block_rows, block_cols), global_scope


def result(codes, local, glob, scheme, fmt, block_rows, block_cols,
           global_scope, transpose, fold):
    """The MossTensor of a quantization's outputs."""
    effective, block, scope = result_scheme(scheme, block_rows, block_cols,
                                            global_scope, fold)
    return MossTensor(codes, local, glob, effective, fmt, block, scope,
                      bool(transpose), scheme if fold != "none" else None)


def _quantize_numpy(x, spec, layout, scheme, fmt, block_rows, block_cols,
                    global_scope, transpose, fold, counters):
    q = np.empty((layout.code_rows, layout.code_cols), dtype=np.uint8)
    local = glob = None
    if layout.local_element_bytes:
        local = np.empty((layout.local_rows, layout.local_cols),
                         dtype=np.uint8 if layout.local_element_bytes == 1
                         else np.float32)
    if layout.global_count:
        glob = np.empty(layout.global_count, dtype=np.float32)
    # The quantizer adds to two adjacent uint64s at the array's address.
    if counters is not None and (
            not isinstance(counters, np.ndarray) or
            counters.dtype != np.uint64 or counters.shape != (2,) or
            not counters.flags.c_contiguous or not counters.flags.writeable):
        raise ValueError("counters must be a contiguous, writeable uint64 "
                         "numpy array of shape (2,)")
    buffers = _capi.QuantizeHostBuffers(
        x.ctypes.data, q.ctypes.data,
        local.ctypes.data if local is not None else None,
        glob.ctypes.data if glob is not None else None,
        counters.ctypes.data if counters is not None else None)
    _capi.check(_capi.lib.moss_quantize_host(ctypes.byref(spec),
                                             ctypes.byref(buffers)))
    return result(q, local, glob, scheme, fmt, block_rows, block_cols,
                  global_scope, transpose, fold)
