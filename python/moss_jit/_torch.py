"""The torch side: CUDA and CPU tensors in, zero copy, on the current CUDA
stream, with no host synchronization; and the torch.library custom ops
(moss_jit::quantize, moss_jit::gemm; moss_jit::grouped_gemm in _grouped)
that torch.compile and CUDA graphs see.
"""

import ctypes
import functools
import math
import numbers
from typing import Optional

import torch

from . import _capi, reference, schemes
from . import _quantize as _quantize_module
from .tensor import MossTensor, check_parts, scale_shapes

FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT_TYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
             torch.float32: "f32"}

try:
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

# torch.cuda.current_device() without its Python frame (the C function
# initializes CUDA itself where needed).
_current_device = getattr(torch._C, "_cuda_getDevice",
                          torch.cuda.current_device)


@functools.lru_cache(maxsize=None)
def _capability(index):
    return torch.cuda.get_device_capability(index)


def _check_cuda_device(tensor, name, hopper):
    index = tensor.device.index
    if hopper and _capability(index) != (9, 0):
        major, minor = _capability(index)
        raise RuntimeError(
            f"{name} is on cuda:{index}, a {torch.cuda.get_device_name(index)}"
            f" (sm_{major}{minor}); moss_jit's GEMM needs a Hopper GPU "
            "(sm_90)")
    return index


class _DeviceGuard:
    """Makes `index` torch's current device for the call (libmoss makes its
    context current; torch's must not move)."""

    __slots__ = ("index", "previous")

    def __init__(self, index):
        self.index = index
        self.previous = None

    def __enter__(self):
        current = torch.cuda.current_device()
        if current != self.index:
            self.previous = current
            torch.cuda.set_device(self.index)

    def __exit__(self, *exc):
        if self.previous is not None:
            torch.cuda.set_device(self.previous)


def _call_on_device(index, function, *args):
    """Runs the libmoss call function(context, *args, stream) on device
    `index` (this thread's context, torch's current stream there)."""
    if _current_device() == index:  # the common case needs no guard
        error = function(_capi.context(index), *args, _raw_stream(index))
        if error:
            _capi.check(error)
        return
    with _DeviceGuard(index):
        _capi.check(function(_capi.context(index), *args, _raw_stream(index)))


def _aligned(tensor, name, alignment=16):
    if tensor.data_ptr() % alignment:
        raise ValueError(f"{name} must be {alignment}-byte aligned in device "
                         f"memory (data_ptr 0x{tensor.data_ptr():x}); pass a "
                         "fresh tensor or .clone()")


#===--- quantize -----------------------------------------------------------===#


def _empty_outputs(layout, device, codes_dtype=torch.uint8):
    # Sizes as ints, not tuples: torch.empty parses those faster.
    q = torch.empty(layout.code_rows, layout.code_cols, dtype=codes_dtype,
                    device=device)
    local = glob = None
    if layout.local_element_bytes:
        local = torch.empty(layout.local_rows, layout.local_cols,
                            dtype=torch.uint8 if layout.local_element_bytes ==
                            1 else torch.float32, device=device)
    if layout.global_count:
        glob = torch.empty(layout.global_count, dtype=torch.float32,
                           device=device)
    return q, local, glob


def _check_counters(counters, device):
    if counters is None:
        return 0
    # The quantizer adds to two adjacent int64s at data_ptr(): a strided
    # view would have them land outside it.
    if (not isinstance(counters, torch.Tensor) or counters.dtype != torch.int64
            or tuple(counters.shape) != (2,) or counters.device != device or
            not counters.is_contiguous()):
        raise ValueError(f"counters must be a contiguous int64 tensor of "
                         f"shape (2,) on {device}")
    return counters.data_ptr()


def quantize_raw(x, spec, layout, counters=None, codes_dtype=torch.uint8):
    """Runs one quantization of spec; returns (codes as `codes_dtype`, local,
    global) with None for the scales the scheme has not."""
    device = x.device
    q, local, glob = _empty_outputs(layout, device, codes_dtype)
    counter_ptr = _check_counters(counters, device)
    if x.is_cuda:
        _aligned(x, "x")
        buffers = _capi.QuantizeBuffers(
            x.data_ptr(), q.data_ptr(),
            local.data_ptr() if local is not None else 0,
            glob.data_ptr() if glob is not None else 0, counter_ptr)
        # The structs themselves: ctypes takes them faster than byref()s.
        _call_on_device(device.index, _capi.lib.moss_quantize, spec, buffers)
    elif device.type == "cpu":
        buffers = _capi.QuantizeHostBuffers(
            x.data_ptr(), q.data_ptr(),
            local.data_ptr() if local is not None else None,
            glob.data_ptr() if glob is not None else None,
            counter_ptr or None)
        _capi.check(_capi.lib.moss_quantize_host(ctypes.byref(spec),
                                                 ctypes.byref(buffers)))
    else:
        raise ValueError(f"x is on {x.device}; quantize takes CUDA or CPU "
                         "tensors")
    return q, local, glob


def cast_with_scale(x, scale, fmt="e4m3", transpose=False):
    """Per-tensor FP8 codes of x (or x^T) with a scale already on the
    device: codes = encode(x / scale[0]), one pass, no host synchronization
    (moss_cast_with_scale). Returns the codes; the scale is `scale`'s."""
    _quantize_module._check_matrix(x, "x")
    input_type = _quantize_module._input_type(x)
    if (not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32
            or scale.numel() != 1 or scale.device != x.device):
        raise ValueError(f"scale must be a float32 tensor of one element on "
                         f"{x.device}")
    if not x.is_cuda:
        raise ValueError(f"x is on {x.device}; cast_with_scale takes CUDA "
                         "tensors (on the CPU, quantize(x, 'per-tensor'))")
    index = _check_cuda_device(x, "x", hopper=False)
    _aligned(x, "x")
    spec, layout = schemes.quantize_spec(
        int(x.shape[0]), int(x.shape[1]), input_type, "per-tensor", fmt, 1, 0,
        "tensor", bool(transpose), "none")
    q, _, glob = _empty_outputs(layout, x.device, FP8_DTYPES[fmt])
    buffers = _capi.QuantizeBuffers(x.data_ptr(), q.data_ptr(), 0,
                                    glob.data_ptr(), 0)
    _call_on_device(index, _capi.lib.moss_cast_with_scale, spec,
                    scale.data_ptr(), buffers)
    return q


def _both_layouts_raw(x, input_type, scheme, fmt, block_rows, block_cols,
                      global_scope, fold, codes_dtype=torch.uint8):
    """One dual-layout quantization of a CUDA tensor: the outputs of the
    row-major layout, then of the transposed one, each (codes, local,
    global) with None for the scales the scheme has not."""
    index = _check_cuda_device(x, "x", hopper=False)
    _aligned(x, "x")
    spec, *layouts = schemes.both_layouts_spec(
        int(x.shape[0]), int(x.shape[1]), input_type, scheme, fmt,
        block_rows, block_cols, global_scope, fold)
    outputs, buffers = [], []
    for layout in layouts:
        q, local, glob = _empty_outputs(layout, x.device, codes_dtype)
        outputs.append((q, local, glob))
        buffers.append(_capi.QuantizeBuffers(
            x.data_ptr(), q.data_ptr(),
            local.data_ptr() if local is not None else 0,
            glob.data_ptr() if glob is not None else 0, 0))
    _call_on_device(index, _capi.lib.moss_quantize_both_layouts, spec,
                    buffers[0], buffers[1], 0)
    return outputs


def quantize_both_layouts(x, input_type, scheme, fmt, block_rows, block_cols,
                          global_scope, fold):
    """quantize_both_layouts() of a CUDA tensor: two MossTensors."""
    if compiling():
        flat = torch.ops.moss_jit.quantize_both_layouts(
            x, scheme, fmt, block_rows, block_cols, global_scope, fold)
        outputs = [(flat[i].view(FP8_DTYPES[fmt]), _none_if_empty(flat[i + 1]),
                    _none_if_empty(flat[i + 2])) for i in (0, 3)]
    else:
        outputs = _both_layouts_raw(x, input_type, scheme, fmt, block_rows,
                                    block_cols, global_scope, fold,
                                    FP8_DTYPES[fmt])
    return tuple(_quantize_module.result(
        q, local, glob, scheme, fmt, block_rows, block_cols, global_scope,
        transpose, fold) for (q, local, glob), transpose in
        zip(outputs, (False, True)))


def compiling():
    return torch.compiler.is_compiling()


def quantize_traced(x, scheme, fmt, block_rows, block_cols, global_scope,
                    transpose, fold, counters):
    """quantize() as torch.compile sees it: the moss_jit::quantize op."""
    if counters is not None:
        raise ValueError("counters are not supported under torch.compile")
    q, local, glob = torch.ops.moss_jit.quantize(
        x, scheme, fmt, block_rows, block_cols, global_scope, bool(transpose),
        fold)
    return _quantize_module.result(
        q.view(FP8_DTYPES[fmt]), local if local.numel() else None,
        glob if glob.numel() else None, scheme, fmt, block_rows, block_cols,
        global_scope, transpose, fold)


def quantize(x, spec, layout, scheme, fmt, block_rows, block_cols,
             global_scope, transpose, fold, counters):
    # The codes come out in their FP8 dtype (the custom op's in uint8).
    q, local, glob = quantize_raw(x, spec, layout, counters, FP8_DTYPES[fmt])
    return _quantize_module.result(
        q, local, glob, scheme, fmt, block_rows, block_cols, global_scope,
        transpose, fold)


#===--- gemm ---------------------------------------------------------------===#


def _check_scales(scales, name, device):
    """The checks of a scale tensor that check_parts leaves to the torch
    side."""
    if scales is not None and (not scales.is_contiguous() or
                               scales.device != device):
        raise ValueError(f"{name} must be a contiguous tensor on {device}, "
                         f"got strides {scales.stride()} on {scales.device}")


def _check_operand(q, name):
    """Checks a GEMM operand; returns its codes' (rows, K, device)."""
    if type(q) is not MossTensor:
        raise TypeError(f"{name} must be a MossTensor (from moss_jit.quantize "
                        f"or MossTensor.from_parts), not {type(q).__name__}")
    codes = q.codes
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"{name}.codes must be a torch tensor (use "
                        "moss_jit.reference.gemm_numpy for numpy arrays)")
    # check_parts names a format that is not one; an unhashable one must
    # reach it.
    if isinstance(q.format, str) and q.format in FP8_DTYPES and \
            codes.dtype != FP8_DTYPES[q.format]:
        raise TypeError(f"{name}.codes has dtype {codes.dtype}, but its format "
                        f"{q.format!r} needs {FP8_DTYPES[q.format]}")
    rows, k = check_parts(q, name)
    if not codes.is_contiguous():
        raise ValueError(f"{name}.codes must be a contiguous 2-D [rows, K] "
                         f"tensor, got strides {codes.stride()}")
    device = codes.device
    _check_scales(q.local_scales, name + ".local_scales", device)
    _check_scales(q.global_scales, name + ".global_scales", device)
    return rows, k, device


def _check_epilogue(tensor, name, shape, device):
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor")
    if tensor.dtype not in OUT_TYPES:
        raise TypeError(f"{name} has dtype {tensor.dtype}; it takes "
                        "bfloat16, float16 or float32")
    if tuple(tensor.shape) != shape or not tensor.is_contiguous():
        raise ValueError(f"{name} must be a contiguous tensor of shape "
                         f"{shape}, got {tuple(tensor.shape)} strides "
                         f"{tensor.stride()}")
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, the operands on "
                         f"{device}")
    return OUT_TYPES[tensor.dtype]


def _operand_spec(scheme, fmt, block, global_scope):
    spec = _capi.GemmOperandSpec()
    spec.format = _capi.FORMATS[fmt]
    spec.scheme = _capi.SCHEMES[scheme]
    spec.block_rows, spec.block_cols = block
    spec.global_scope = _capi.GLOBAL_SCOPES[global_scope]
    return spec


@functools.lru_cache(maxsize=4096)
def _gemm_spec(m, n, k, a, b, out, bias, c, amax, beta, mma, fold, groups=0,
               layout=0, promote_k=0):
    """The moss_gemm_spec_t of a call; `a` and `b` are the operands'
    (scheme, format, block, global_scope); `groups` the experts of a
    grouped GEMM (0: a plain one), `layout` its moss_group_layout_t."""
    spec = _capi.GemmSpec()
    _capi.lib.moss_gemm_spec_init(ctypes.byref(spec))
    spec.m, spec.n, spec.k = m, n, k
    spec.a = _operand_spec(*a)
    spec.b = _operand_spec(*b)
    spec.out = _capi.FLOAT_TYPES[out]
    spec.bias = _capi.FLOAT_TYPES[bias]
    spec.accumulate = _capi.FLOAT_TYPES[c]
    spec.amax = int(amax)
    spec.beta = beta
    spec.mma = _capi.MMA_TYPES[mma]
    spec.fold = _capi.FOLDS[fold]
    spec.groups = groups
    spec.group_layout = layout
    spec.promote_k = promote_k
    return spec


def check_promote_k(value, name):
    """Checks a GEMM's promote_k (moss_gemm_spec_t::promote_k's values)."""
    if type(value) is not int or value not in (0, 32, 64, 128):
        raise ValueError(f"{name}={value!r} is not 0, 32, 64 or 128")


def check_gemm_args(a, b, out_dtype, bias, c, beta, mma, fold, promote_k=0):
    m, k, device = _check_operand(a, "a")
    n, kb, device_b = _check_operand(b, "b")
    if k != kb:
        raise ValueError(f"a is [{m}, {k}] and b is [{n}, {kb}]: both must be "
                         "K-major with the same K (D = a @ b^T)")
    if device_b != device:
        raise ValueError(f"a is on {device}, b on {device_b}")
    if out_dtype not in OUT_TYPES:
        raise TypeError(f"out_dtype={out_dtype} is not torch.bfloat16, "
                        "torch.float16 or torch.float32")
    bias_type = _check_epilogue(bias, "bias", (n,), device)
    c_type = _check_epilogue(c, "c", (m, n), device)
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"beta must be a real number, not "
                        f"{type(beta).__name__}")
    if not math.isfinite(beta):
        raise ValueError(f"beta={beta} is not finite")
    if c is None and beta != 1.0:
        raise ValueError(f"beta={beta} is given without c")
    if mma not in _capi.MMA_TYPES:
        schemes._choice(mma, tuple(_capi.MMA_TYPES), "mma")
    if fold not in _capi.FOLDS:
        schemes._choice(fold, tuple(_capi.FOLDS), "fold")
    check_promote_k(promote_k, "promote_k")
    return m, n, k, device, bias_type, c_type


# Plans of the CUDA GEMM calls seen, by _gemm_key: everything
# check_gemm_args reads and the spec depends on. A call whose key has a plan
# passed the checks, so it goes straight to the launch. Plans never change
# once stored, so threads share them; two threads may store equal plans.
_gemm_plans = {}
_GEMM_PLANS_MAX = 4096
# A key part for values the checks must see every time (a tensor subclass,
# a beta or amax of another type): it makes the key unhashable, so the call
# finds no plan and stores none.
_UNPLANNED = []
_Tensor = torch.Tensor


def _tensor_key(t):
    """What the GEMM's checks read of an epilogue tensor."""
    if type(t) is not _Tensor:
        return _UNPLANNED
    return t.dtype, t.shape, t.is_contiguous(), t.device


def _scales_key(t):
    """What the checks read of a scale tensor."""
    if type(t) is not _Tensor:
        return _UNPLANNED
    return t.dtype, t.shape, t.is_contiguous(), t.device


def _gemm_key(a, b, out_dtype, bias, c, beta, amax, mma, fold, promote_k):
    """The key of a call's plan in _gemm_plans (unhashable where it has
    none)."""
    if type(a) is not MossTensor or type(b) is not MossTensor or \
            type(beta) is not float or type(amax) is not bool:
        return _UNPLANNED
    a_codes, a_local, a_global, a_scheme, a_fmt, a_block, a_scope, _, _ = a
    b_codes, b_local, b_global, b_scheme, b_fmt, b_block, b_scope, _, _ = b
    if type(a_codes) is not _Tensor or type(b_codes) is not _Tensor:
        return _UNPLANNED
    # The codes' reads are inline (this runs on every call): a tenth faster.
    return (a_codes.dtype, a_codes.shape, a_codes.is_contiguous(),
            a_codes.device,
            None if a_local is None else _scales_key(a_local),
            None if a_global is None else _scales_key(a_global),
            a_scheme, a_fmt, a_block, a_scope,
            b_codes.dtype, b_codes.shape, b_codes.is_contiguous(),
            b_codes.device,
            None if b_local is None else _scales_key(b_local),
            None if b_global is None else _scales_key(b_global),
            b_scheme, b_fmt, b_block, b_scope, out_dtype,
            None if bias is None else _tensor_key(bias),
            None if c is None else _tensor_key(c), beta, amax, mma, fold,
            promote_k)


def _gemm_plan(a, b, out_dtype, bias, c, beta, amax, mma, fold, promote_k):
    """Checks a GEMM call; returns its plan for CUDA operands, None for CPU
    ones."""
    m, n, k, device, bias_type, c_type = check_gemm_args(
        a, b, out_dtype, bias, c, beta, mma, fold, promote_k)
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        raise ValueError(f"the operands are on {device}; gemm takes CUDA or "
                         "CPU tensors")
    index = _check_cuda_device(a.codes, "a", hopper=True)
    spec = _gemm_spec(m, n, k, a[3:7], b[3:7], OUT_TYPES[out_dtype],
                      bias_type, c_type, bool(amax), float(beta), mma, fold,
                      promote_k=promote_k)
    counts = tuple(t.numel() if t is not None else 0
                   for t in a[1:3] + b[1:3])
    return spec, m, n, device, index, counts


def gemm_buffers(a, b, d, bias, c, amax, counts):
    """The bytes of the call's moss_gemm_buffers_t (for
    _capi.moss_gemm_packed); `counts` are the operands' scale counts (a
    local, a global, b local, b global)."""
    a_local, a_global, b_local, b_global = a[1], a[2], b[1], b[2]
    return _capi.GEMM_BUFFERS.pack(
        a[0].data_ptr(), a_local.data_ptr() if a_local is not None else 0,
        counts[0], a_global.data_ptr() if a_global is not None else 0,
        counts[1],
        b[0].data_ptr(), b_local.data_ptr() if b_local is not None else 0,
        counts[2], b_global.data_ptr() if b_global is not None else 0,
        counts[3],
        d.data_ptr(), bias.data_ptr() if bias is not None else 0,
        c.data_ptr() if c is not None else 0,
        amax.data_ptr() if amax is not None else 0)


def gemm_raw(a, b, out_dtype, bias, c, beta, amax, mma, fold, promote_k=0):
    """D = a @ b^T with the epilogue; returns (D, amax or None)."""
    key = _gemm_key(a, b, out_dtype, bias, c, beta, amax, mma, fold,
                    promote_k)
    try:
        plan = _gemm_plans.get(key)
    except TypeError:  # an _UNPLANNED part, or an unhashable argument
        plan = key = None
    if plan is None:
        plan = _gemm_plan(a, b, out_dtype, bias, c, beta, amax, mma, fold,
                          promote_k)
        if plan is None:
            d = torch.from_numpy(reference.gemm_numpy(a, b, bias, c, beta))
            # max |D| of an empty D is 0, as the GPU's zeroed amax.
            amax_value = torch.tensor(
                [d.abs().max() if d.numel() else 0.0],
                dtype=torch.float32) if amax else None
            return d.to(out_dtype), amax_value
        if key is not None:
            if len(_gemm_plans) >= _GEMM_PLANS_MAX:
                _gemm_plans.clear()
            _gemm_plans[key] = plan
    spec, m, n, device, index, counts = plan
    # The sizes as two ints: torch.empty parses a tuple of them slower.
    d = torch.empty(m, n, dtype=out_dtype, device=device)
    amax_out = torch.zeros(1, dtype=torch.float32, device=device) if amax \
        else None
    buffers = gemm_buffers(a, b, d, bias, c, amax_out, counts)
    if _current_device() == index:  # _call_on_device's common case, inline
        error = _capi.moss_gemm_packed(_capi.context(index), spec, m, buffers,
                                       _raw_stream(index))
        if error:
            _capi.check(error)
    else:
        _call_on_device(index, _capi.moss_gemm_packed, spec, m, buffers)
    return d, amax_out


def gemm(a, b, out_dtype=torch.bfloat16, bias=None, c=None, beta=1.0,
         amax=False, mma="auto", fold="auto", promote_k=0):
    if compiling():
        d, amax_out = torch.ops.moss_jit.gemm(
            *_op_operand(a), a.descriptor(), *_op_operand(b), b.descriptor(),
            out_dtype, bias, c, float(beta), bool(amax), mma, fold, promote_k)
        return (d, amax_out) if amax else d
    d, amax_out = gemm_raw(a, b, out_dtype, bias, c, beta, amax, mma, fold,
                           promote_k)
    return (d, amax_out) if amax else d


#===--- custom ops ---------------------------------------------------------===#


def _none_if_empty(t):
    return t if t.numel() else None


def _empty(device, dtype=torch.uint8):
    return torch.empty(0, dtype=dtype, device=device)


def _op_operand(q):
    """A MossTensor as the GEMM op's tensors. The codes pass as uint8 bit
    patterns: torch's checks of ops compare inputs with arithmetic that
    FP8 dtypes lack."""
    device = q.codes.device
    return (q.codes.view(torch.uint8),
            q.local_scales if q.local_scales is not None else _empty(device),
            q.global_scales if q.global_scales is not None
            else _empty(device, torch.float32))


def _from_descriptor(codes, local, glob, descriptor):
    scheme, fmt, rows, cols, scope = descriptor.split(":")
    return MossTensor(codes.view(FP8_DTYPES[fmt]), _none_if_empty(local),
                      _none_if_empty(glob),
                      scheme, fmt, (int(rows), int(cols)), scope)


def quantize_layout_shapes(rows, cols, scheme, block_rows, block_cols,
                           global_scope, transpose, fold):
    """The output shapes of a quantization, from the scheme alone (symbolic
    sizes allowed): ((code_rows, K), local shape or None, global count or
    None). tests/ check it against libmoss's layout."""
    out_rows, k = (cols, rows) if transpose else (rows, cols)
    local, glob = scale_shapes(*_quantize_module.result_scheme(
        scheme, block_rows, block_cols, global_scope, fold), out_rows, k)
    return (out_rows, k), local, glob[0] if glob else None


@torch.library.custom_op("moss_jit::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, scheme: str, fmt: str, block_rows: int,
                 block_cols: int, global_scope: str, transpose: bool,
                 fold: str) -> tuple[torch.Tensor, torch.Tensor,
                                     torch.Tensor]:
    input_type = "bf16" if x.dtype == torch.bfloat16 else "f32"
    spec, layout = schemes.quantize_spec(
        int(x.shape[0]), int(x.shape[1]), input_type, scheme, fmt, block_rows,
        block_cols, global_scope, transpose, fold, not x.is_cuda)
    q, local, glob = quantize_raw(x, spec, layout)
    return (q,
            local if local is not None else _empty(x.device),
            glob if glob is not None else _empty(x.device, torch.float32))


@_quantize_op.register_fake
def _quantize_fake(x, scheme, fmt, block_rows, block_cols, global_scope,
                   transpose, fold):
    codes, local, glob = quantize_layout_shapes(
        x.shape[0], x.shape[1], scheme, block_rows, block_cols, global_scope,
        transpose, fold)
    local_dtype = torch.float32 if (scheme == "per-group" or fold == "128") \
        else torch.uint8
    return (x.new_empty(codes, dtype=torch.uint8),
            x.new_empty(local, dtype=local_dtype) if local else
            x.new_empty(0, dtype=torch.uint8),
            x.new_empty(glob, dtype=torch.float32) if glob else
            x.new_empty(0, dtype=torch.float32))


@torch.library.custom_op("moss_jit::quantize_both_layouts", mutates_args=())
def _quantize_both_op(x: torch.Tensor, scheme: str, fmt: str,
                      block_rows: int, block_cols: int, global_scope: str,
                      fold: str) -> tuple[torch.Tensor, torch.Tensor,
                                          torch.Tensor, torch.Tensor,
                                          torch.Tensor, torch.Tensor]:
    input_type = "bf16" if x.dtype == torch.bfloat16 else "f32"
    flat = []
    for q, local, glob in _both_layouts_raw(x, input_type, scheme, fmt,
                                            block_rows, block_cols,
                                            global_scope, fold):
        flat += [q, local if local is not None else _empty(x.device),
                 glob if glob is not None else _empty(x.device,
                                                      torch.float32)]
    return tuple(flat)


@_quantize_both_op.register_fake
def _quantize_both_fake(x, scheme, fmt, block_rows, block_cols, global_scope,
                        fold):
    flat = []
    for transpose in (False, True):
        flat += list(_quantize_fake(x, scheme, fmt, block_rows, block_cols,
                                    global_scope, transpose, fold))
    return tuple(flat)


@torch.library.custom_op("moss_jit::gemm", mutates_args=())
def _gemm_op(a_codes: torch.Tensor, a_local: torch.Tensor,
             a_global: torch.Tensor, a_desc: str, b_codes: torch.Tensor,
             b_local: torch.Tensor, b_global: torch.Tensor, b_desc: str,
             out_dtype: torch.dtype, bias: Optional[torch.Tensor],
             c: Optional[torch.Tensor], beta: float, amax: bool, mma: str,
             fold: str, promote_k: int = 0) -> tuple[torch.Tensor,
                                                     torch.Tensor]:
    a = _from_descriptor(a_codes, a_local, a_global, a_desc)
    b = _from_descriptor(b_codes, b_local, b_global, b_desc)
    d, amax_out = gemm_raw(a, b, out_dtype, bias, c, beta, amax, mma, fold,
                           promote_k)
    return d, (amax_out if amax_out is not None
               else _empty(d.device, torch.float32))


@_gemm_op.register_fake
def _gemm_fake(a_codes, a_local, a_global, a_desc, b_codes, b_local,
               b_global, b_desc, out_dtype, bias, c, beta, amax, mma, fold,
               promote_k=0):
    d = a_codes.new_empty((a_codes.shape[0], b_codes.shape[0]),
                          dtype=out_dtype)
    return d, a_codes.new_empty(1 if amax else 0, dtype=torch.float32)
