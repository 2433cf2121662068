"""moss_jit.nn.Linear: a drop-in torch.nn.Linear that trains in FP8 the MOSS
way (docs/PYTHON.md).

Forward  Y = X W^T + b: X two-level (E4M3, E8M0 per 32 of K, an FP32 global
         scale per row or per tensor), folded by the quantizer into per-row
         factors; W per tensor, E4M3, with the scale the weight scaler
         predicts (a CUDA weight) or its exact scale (CPU).
Backward dX = dY W: dY two-level (E4M3 by default: with per-32 block
         scales it has the higher SNR, docs/PYTHON.md), row-wise and folded;
         W^T's codes are W's, transposed.
         dW = dY^T X: dY and X two-level along the tokens, quantized
         transposed and folded by the quantizer.
The forward quantizes X in both layouts and keeps X^T's codes for dW
instead of X (a byte per value instead of two or four). Linears that take
the same tensor in a row (query, key and value; SwiGLU's gate and up)
quantize it once. On CUDA, with the token count a multiple of the block,
X's two layouts come from one quantize_both_layouts call in the forward,
and dY's from one in the backward (both_layouts=True, the default): with a
global per row, two kernels that read X twice instead of three times; with
one per tensor, one kernel after the reduce pass.
The master weight stays in its own dtype (the optimizer's precision).
"""

import ctypes
import threading
import weakref

import torch

from . import _capi, _torch, schemes
from ._dispatch import dispatch_quantize, gathered_rows
from ._grouped import ExpertWeights, grouped_gemm, k_grouped_gemm
from ._quantize import quantize, quantize_both_layouts
from .tensor import MossTensor

# Why a weight cast happened: the scaler's moss_rescale_reason_t values,
# then "exact" for a cast with the weight's exact scale outside the scaler.
_REASONS = ("predicted", "no_anchor", "interval", "saturation", "exact")


class WeightScaler:
    """MOSS automatic scaling of one CUDA weight (moss_weight_scaler_t):
    per-tensor casts with a predicted scale, exact rescales on the first
    steps, every `interval` steps and after a saturation."""

    def __init__(self, device_index, interval=500, bound="paper",
                 betas=(0.9, 0.999)):
        options = _scaler_options(interval, bound, betas)
        self.device_index = device_index
        handle = ctypes.c_void_p()
        with _torch._DeviceGuard(device_index):
            _capi.check(_capi.lib.moss_weight_scaler_create(
                _capi.context(device_index), ctypes.byref(options),
                ctypes.byref(handle)))
        self._handle = handle.value
        # The scaler uses this thread's context: keep it alive as long.
        self._context = _capi._contexts.by_device[device_index]
        _capi.live_scalers.add(self)

    def step(self, weight, lr, codes, scale, codes_t=None, adamw=None):
        """Casts `weight` (just updated with learning rate `lr`) into `codes`
        and `scale` and, given `codes_t`, its transpose's codes at the same
        scale from the same read; returns the reason ('predicted' or a
        rescale's). With `adamw` (an AdamWUpdate), the optimizer's step
        comes first, in the same read: `weight` is the weight before it,
        updated in place."""
        spec = _weight_cast_spec(weight.shape[0], weight.shape[1],
                                 weight.dtype)
        buffers = _capi.QuantizeBuffers(weight.data_ptr(), codes.data_ptr(),
                                        0, scale.data_ptr(), 0)
        out = _capi.WeightScaleStep()
        stream = _torch._raw_stream(self.device_index)
        with _torch._DeviceGuard(self.device_index):
            if adamw is not None:
                transposed = _capi.QuantizeBuffers(
                    0, codes_t.data_ptr(), 0, scale.data_ptr(), 0) \
                    if codes_t is not None else None
                error = _capi.lib.moss_weight_scaler_adamw_step(
                    self._handle, ctypes.byref(adamw.struct(lr)),
                    ctypes.byref(spec), ctypes.byref(buffers),
                    ctypes.byref(transposed) if transposed is not None
                    else None, stream, ctypes.byref(out))
            elif codes_t is None:
                error = _capi.lib.moss_weight_scaler_step(
                    self._handle, float(lr), ctypes.byref(spec),
                    ctypes.byref(buffers), stream, ctypes.byref(out))
            else:
                # Both layouts' scale outputs are the one scale.
                transposed = _capi.QuantizeBuffers(0, codes_t.data_ptr(), 0,
                                                   scale.data_ptr(), 0)
                error = _capi.lib.moss_weight_scaler_step_both_layouts(
                    self._handle, float(lr), ctypes.byref(spec),
                    ctypes.byref(buffers), ctypes.byref(transposed), stream,
                    ctypes.byref(out))
            _capi.check(error)
        return _REASONS[out.reason]

    def stats(self):
        """The scaler's counters (moss_weight_scaler_stats_t) as a dict."""
        return _stats_dict(lambda out: _capi.lib.moss_weight_scaler_stats(
            self._handle, out))

    def close(self):
        if getattr(self, "_handle", None):
            _capi.lib.moss_weight_scaler_destroy(self._handle)
            self._handle = None

    __del__ = close


class ExpertScalers:
    """The auto-scalers of a GroupedLinear's experts, one per expert, stepped
    together (moss_expert_scalers_t): each decides as a WeightScaler of its
    own would, and a step makes a fixed number of driver calls and one
    launch for all experts' casts (one each on a step that rescales
    any)."""

    def __init__(self, device_index, experts, interval=500, bound="paper",
                 betas=(0.9, 0.999)):
        options = _scaler_options(interval, bound, betas)
        self.device_index = device_index
        self.experts = experts
        handle = ctypes.c_void_p()
        with _torch._DeviceGuard(device_index):
            _capi.check(_capi.lib.moss_expert_scalers_create(
                _capi.context(device_index), ctypes.byref(options), experts,
                ctypes.byref(handle)))
        self._handle = handle.value
        self._context = _capi._contexts.by_device[device_index]
        _capi.live_scalers.add(self)

    def step(self, weights, lr, codes, scales, codes_t=None, adamw=None):
        """Each expert g of `weights` [G, N, K], just updated with learning
        rate `lr`: its codes into codes[g], its scale into scales[g] and,
        given `codes_t` [G, K, N], its transpose's codes into codes_t[g].
        Returns the reasons. With `adamw` (an AdamWUpdate of [G, N, K]
        states), the optimizer's step comes first, in the same read, as
        WeightScaler.step's."""
        groups, n, k = weights.shape
        spec = _weight_cast_spec(n, k, weights.dtype)
        buffers = _capi.QuantizeBuffers(weights.data_ptr(), codes.data_ptr(),
                                        0, scales.data_ptr(), 0)
        transposed = _capi.QuantizeBuffers(
            0, codes_t.data_ptr(), 0, scales.data_ptr(), 0) \
            if codes_t is not None else None
        out = (_capi.WeightScaleStep * groups)()
        stream = _torch._raw_stream(self.device_index)
        transposed = ctypes.byref(transposed) \
            if transposed is not None else None
        with _torch._DeviceGuard(self.device_index):
            if adamw is not None:
                _capi.check(_capi.lib.moss_expert_scalers_adamw_step(
                    self._handle, ctypes.byref(adamw.struct(lr)),
                    ctypes.byref(spec), ctypes.byref(buffers), transposed,
                    stream, out))
            else:
                _capi.check(_capi.lib.moss_expert_scalers_step(
                    self._handle, float(lr), ctypes.byref(spec),
                    ctypes.byref(buffers), transposed, stream, out))
        return [_REASONS[o.reason] for o in out]

    def stats(self):
        """Each expert's counters (moss_weight_scaler_stats_t) as dicts."""
        return [_stats_dict(lambda out: _capi.lib.moss_expert_scalers_stats(
            self._handle, g, out)) for g in range(self.experts)]

    def close(self):
        if getattr(self, "_handle", None):
            _capi.lib.moss_expert_scalers_destroy(self._handle)
            self._handle = None

    __del__ = close


class AdamWUpdate:
    """One AdamW step of a weight (moss_adamw_step_t), for a scaler's fused
    step: the gradient and Adam's moments (FP32, the weight's shape,
    contiguous) and the step's hyperparameters; `step` counts from 1."""

    def __init__(self, grad, exp_avg, exp_avg_sq, betas, eps, weight_decay,
                 step):
        self.tensors = (grad, exp_avg, exp_avg_sq)
        self.betas, self.eps = betas, eps
        self.weight_decay, self.step = weight_decay, step

    def struct(self, lr):
        """The moss_adamw_step_t of this step with learning rate `lr`."""
        grad, exp_avg, exp_avg_sq = self.tensors
        beta1, beta2 = self.betas
        return _capi.AdamWStep(
            ctypes.sizeof(_capi.AdamWStep), grad.data_ptr(),
            exp_avg.data_ptr(), exp_avg_sq.data_ptr(), float(lr),
            float(beta1), float(beta2), float(self.eps),
            float(self.weight_decay), int(self.step))


def _weight_cast_spec(n, k, dtype):
    """The per-tensor E4M3 spec of a scaler's weight cast, [n, k]."""
    spec, _ = schemes.quantize_spec(
        n, k, "bf16" if dtype == torch.bfloat16 else "f32", "per-tensor",
        "e4m3", 1, 0, "tensor", False, "none")
    return spec


def _stats_dict(call):
    """The moss_weight_scaler_stats_t that `call(out)` fills, as a dict."""
    stats = _capi.WeightScalerStats()
    stats.struct_size = ctypes.sizeof(stats)
    _capi.check(call(ctypes.byref(stats)))
    return {name: getattr(stats, name) for name, _ in stats._fields_
            if name not in ("struct_size", "reserved")}


def _scaler_options(interval, bound, betas):
    """moss_weight_scaler_options_t of a WeightScaler or ExpertScalers."""
    options = _capi.WeightScalerOptions()
    _capi.lib.moss_weight_scaler_options_init(ctypes.byref(options))
    options.interval = int(interval)
    options.bound = {"paper": 0, "provable": 1}[bound]
    options.beta1, options.beta2 = betas
    return options


def _weight_source(w):
    """What a weight's cached FP8 codes were cast from: a change of any of
    these (its version counter included) makes them stale. A fused
    optimizer's step moves none of them; it is reported instead
    (attach_optimizer)."""
    return (w.data_ptr(), w.device, w.dtype, w.shape, w._version)


def _scaler_on(scaler, device_index, interval):
    """`scaler` where it is a WeightScaler of that device, else a new one."""
    if scaler is None or scaler.device_index != device_index:
        return WeightScaler(device_index, interval)
    return scaler


def _cast_per_tensor(data, need_transpose, scaler=None, lr=None,
                     out=(None, None, None), adamw=None):
    """A weight's per-tensor E4M3 cast (the MOSS Linears' weights): the
    codes of data [N, K], those of its transpose [K, N] at the same scale
    when `need_transpose` (else None), the scale [1] and the reason. With a
    WeightScaler and the learning rate of the step that updated the weight,
    the auto-scaler's cast, both layouts from one read, into `out`'s
    (codes, codes_t, scale) where given; otherwise the exact quantization
    (both layouts from one quantize_both_layouts call). With `adamw` (an
    AdamWUpdate; a scaler), the optimizer's step updates `data` in place in
    the read that casts it."""
    if scaler is None:
        if need_transpose:
            q, q_t = quantize_both_layouts(data, "per-tensor", "e4m3")
            return q.codes, q_t.codes, q.global_scales, "exact"
        q = quantize(data, "per-tensor", "e4m3")
        return q.codes, None, q.global_scales, "exact"
    n, k = data.shape
    codes, codes_t, scale = out

    def empty(*shape, dtype=torch.uint8):
        return torch.empty(shape, dtype=dtype, device=data.device)

    codes = empty(n, k) if codes is None else codes
    scale = empty(1, dtype=torch.float32) if scale is None else scale
    if need_transpose and codes_t is None:
        codes_t = empty(k, n)
    reason = scaler.step(data, lr, codes, scale,
                         codes_t if need_transpose else None, adamw)
    fp8 = torch.float8_e4m3fn
    return (codes.view(fp8), codes_t.view(fp8) if need_transpose else None,
            scale, reason)


def _both_layouts(t, config):
    """Whether one quantize_both_layouts call gives both layouts of `t`
    (faster than the two quantizations, docs/PERFORMANCE.md): where
    both_layouts is on, on CUDA, with the token count (its rows) a multiple
    of the block and blocks that fit the dual-layout kernel's tile rows."""
    return (config.both_layouts and t.is_cuda and
            t.shape[0] % config.block == 0 and
            config.block * t.element_size() <= 128)


def _check_features(in_features, out_features):
    for name, value in (("in_features", in_features),
                        ("out_features", out_features)):
        if value <= 0 or value % 32:
            raise ValueError(f"{name}={value} is not a positive multiple of "
                             "32")


def _check_activations(x, weight, layer):
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"x has dtype {x.dtype}; the MOSS {layer} takes "
                        "bfloat16 or float32 activations")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device}, the weight on {weight.device}")


def _gradient_operand(dy):
    """The output gradient as the quantizers take it: contiguous, bf16 or
    f32 (f16 and others widened to f32)."""
    dy = dy.contiguous()
    return dy if dy.dtype in (torch.float32, torch.bfloat16) else dy.float()


def _pad_rows(t, block):
    """`t` with zero rows appended up to a multiple of `block`: the weight
    gradient's K is the token count, and zero rows leave every block's
    scale and code as they are."""
    pad = -t.shape[0] % block
    return torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t


def _quantize_layouts(t, config, fmt, row, transposed):
    """The codes of `t` [tokens, features] in `fmt` for a GEMM over its
    features (`row`) and for the weight gradient's, over its tokens padded
    to the block (`transposed`), None for the one not asked: from one
    quantize_both_layouts call where both are asked and _both_layouts
    allows it."""
    t = t.detach()
    if row and transposed and _both_layouts(t, config):
        return quantize_both_layouts(t, "moss", fmt, config.block,
                                     config.global_scope, fold=config.fold)
    return (config.quantize(t, fmt) if row else None,
            config.quantize(_pad_rows(t, config.block), fmt, transpose=True)
            if transposed else None)


def _quantize_activations(x, config, need_wgrad):
    """X's codes for the forward GEMM and, when `need_wgrad`, for the
    weight gradient's (X^T)."""
    return _quantize_layouts(x, config, config.x_format, True, need_wgrad)


class _SharedActivations(threading.local):
    """The codes of the last input a MOSS Linear quantized, for the next
    Linear that reads the same tensor with the same quantization (the
    query, key and value projections; SwiGLU's gate and up projections).
    The entry names its input by a weak reference, so it never keeps the
    input alive and cannot match a new tensor at the same address, and by
    its version counter, so an in-place change misses; it is dropped with
    its input. Only the stream that made the codes reuses them, and never
    while a CUDA graph is captured."""

    entry = None

    def get(self, x, key, need_wgrad):
        entry = self.entry
        if entry is None or entry[0]() is not x or entry[1] != key:
            return None
        x_q, x_t = entry[2], entry[3]
        if need_wgrad and x_t is None:
            return None
        return x_q, x_t if need_wgrad else None

    def put(self, x, key, codes):
        self.entry = (weakref.ref(x, self._forget), key) + codes

    def _forget(self, ref):
        if self.entry is not None and self.entry[0] is ref:
            self.entry = None


_shared_activations = _SharedActivations()


def _activation_codes(x, x2d, config, need_wgrad):
    """_quantize_activations(x2d, ...), shared by the Linears that take the
    same tensor `x` in a row (eager only: torch.compile traces each
    call)."""
    # Not under torch.compile, nor for an inference tensor (no version
    # counter to key on), nor while a CUDA graph is captured: a graph runs
    # none of its kernels until replayed, so codes made in it hold nothing
    # yet, and codes taken from the entry would leave the quantization out
    # of the graph.
    if _torch.compiling() or x.is_inference() or \
            (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        return _quantize_activations(x2d, config, need_wgrad)
    # Codes made on another stream may not be written yet.
    stream = _torch._raw_stream(x.device.index) if x.is_cuda else None
    key = (x._version, x.shape, x.stride(), stream, config.activation_key)
    codes = _shared_activations.get(x, key, need_wgrad)
    if codes is None:
        codes = _quantize_activations(x2d, config, need_wgrad)
        _shared_activations.put(x, key, codes)
    return codes


def _parts(q):
    """The tensors of a MossTensor or ExpertWeights `q` (None for each where
    `q` is None), for save_for_backward; _without_parts(q) keeps the rest."""
    return (q.codes, q.local_scales, q.global_scales) if q is not None \
        else (None, None, None)


def _without_parts(q):
    return q._replace(codes=None, local_scales=None, global_scales=None) \
        if q is not None else None


def _with_parts(q, parts):
    """`q` from _without_parts with its tensors `parts` back."""
    codes, local, glob = parts
    return q._replace(codes=codes, local_scales=local, global_scales=glob)


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, w_codes, w_t_codes, w_scale, x_q, x_t,
                config):
        w_q = MossTensor(w_codes, None, w_scale, "per-tensor", "e4m3")
        # FP8 products summed in FP32 for every output type (an f32 output's
        # default would widen the codes to f16, at a third of the speed).
        y = _torch.gemm(x_q, w_q, out_dtype=config.out_dtype(x), bias=bias,
                        mma="fp8")
        # X^T's codes, not X, wait for dW: a byte per value instead of X's
        # two or four.
        ctx.save_for_backward(weight, w_t_codes, w_scale, *_parts(x_t))
        ctx.x_t = _without_parts(x_t)
        ctx.x_dtype = x.dtype
        ctx.config = config
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, dy):
        weight, w_t_codes, w_scale, *x_t_parts = ctx.saved_tensors
        config = ctx.config
        dy = _gradient_operand(dy)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = db = None
        dy_q, dy_t = _quantize_layouts(dy, config, config.grad_format,
                                       need_dx, need_dw)
        if need_dx:
            w_t = MossTensor(w_t_codes, None, w_scale, "per-tensor", "e4m3")
            # The gradient has its input's dtype, whatever autocast did.
            dx = _torch.gemm(dy_q, w_t, out_dtype=ctx.x_dtype, mma="fp8",
                             promote_k=config.dgrad_promotion(
                                 dy_q.codes.shape[1]))
        if need_dw:
            if ctx.x_t is None:
                raise RuntimeError("the weight gradient needs X^T's codes, "
                                   "which the forward did not keep: the "
                                   "weight did not require grad then")
            dw = _torch.gemm(dy_t, _with_parts(ctx.x_t, x_t_parts),
                             out_dtype=weight.dtype, mma="fp8",
                             promote_k=config.wgrad_promotion(
                                 dy_t.codes.shape[1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return dx, dw, db, None, None, None, None, None, None


class LinearConfig:
    """The quantization of one Linear (see Linear)."""

    def __init__(self, x_format="e4m3", grad_format="e4m3", block=32,
                 global_scope="row", fold="row", both_layouts=True,
                 wgrad_promote_k=128, dgrad_promote_k=0):
        schemes._choice(x_format, schemes.FORMATS, "x_format")
        schemes._choice(grad_format, schemes.FORMATS, "grad_format")
        schemes._choice(global_scope, ("tensor", "row"), "global_scope")
        schemes._choice(fold, ("none", "row"), "fold")
        if block not in (32, 64, 128):
            raise ValueError(f"block={block} is not 32, 64 or 128")
        self.x_format = x_format
        self.grad_format = grad_format
        self.block = block
        self.global_scope = global_scope
        self.fold = fold
        if not isinstance(both_layouts, bool):
            raise ValueError(f"both_layouts={both_layouts!r} is not True or "
                             "False")
        self.both_layouts = both_layouts
        _torch.check_promote_k(wgrad_promote_k, "wgrad_promote_k")
        _torch.check_promote_k(dgrad_promote_k, "dgrad_promote_k")
        # The weight gradient sums over the tokens, the longest K of the
        # three GEMMs, where the tensor cores' own accumulation loses most
        # (docs/PYTHON.md). Unfolded operands promote every 32 already.
        folded = fold == "row"
        self.wgrad_promote_k = wgrad_promote_k if folded else 0
        self.dgrad_promote_k = dgrad_promote_k if folded else 0
        # What X's codes depend on (grad_format is dY's).
        self.activation_key = (x_format, block, global_scope, fold,
                               self.both_layouts)

    @staticmethod
    def _dividing(promote, k):
        """`promote` halved until it divides `k` (the GEMM's rule), 0 below
        32."""
        while promote >= 32 and k % promote:
            promote //= 2
        return promote if promote >= 32 else 0

    def wgrad_promotion(self, tokens):
        """The weight gradient GEMM's promote_k for K = `tokens`: the
        configured one, halved until it divides K."""
        return self._dividing(self.wgrad_promote_k, tokens)

    def dgrad_promotion(self, out_features):
        """The input gradient GEMM's promote_k for K = `out_features`."""
        return self._dividing(self.dgrad_promote_k, out_features)

    def quantize(self, t, fmt, transpose=False, gather=None):
        """`t` quantized the MOSS way with this configuration: `fmt`
        (x_format or grad_format), its block and global scope, folded as
        configured; transposed (K-major over the rows) when asked. With
        `gather` (int32 row indices, -1 for a row of zeros), t's gathered
        rows, transposed (dispatch_quantize)."""
        if gather is not None:
            if not _torch.compiling():
                return dispatch_quantize(t, gather, "moss", fmt, self.block,
                                         self.global_scope, self.fold,
                                         transpose=True)
            # torch.compile traces quantize's op over the gathered copy.
            t, transpose = gathered_rows(t, gather), True
        return quantize(t, "moss", fmt, self.block, self.global_scope,
                        transpose=transpose, fold=self.fold)

    @staticmethod
    def out_dtype(x):
        """The forward's output dtype: autocast's bf16 or f16 where it is on
        (as torch.nn.Linear's), else the activations' dtype."""
        device = x.device.type
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            if dtype in (torch.bfloat16, torch.float16):
                return dtype
        return x.dtype


# Weights of MOSS Linears, for attach_optimizer().
_layers_by_weight = weakref.WeakValueDictionary()
# MOSS Linears by id(), for the weight-codes op of their compiled forwards.
_layers_by_id = weakref.WeakValueDictionary()


@torch.library.custom_op("moss_jit::linear_weight_codes", mutates_args=())
def _linear_weight_codes(weight: torch.Tensor, layer: int,
                         transposed: bool) -> tuple[torch.Tensor,
                                                    torch.Tensor,
                                                    torch.Tensor]:
    """A compiled Linear's weight codes (uint8 [N, K], [K, N] or empty, and
    the scale [1]), read from the layer's cache when the graph runs: the
    cache follows the weight's version counter and the optimizer's reports
    (the auto-scaler's casts, moss_jit.optim.AdamW's fused ones), which a
    traced graph could not. Under CUDA graph capture, or for a weight that
    is not the layer's, the weight's exact cast instead: a replay runs no
    Python, so cached codes would go stale in it. The cache's codes go out
    as copies: a graph owns what its ops return, and may reuse the memory."""
    module = _layers_by_id.get(layer)
    capturing = weight.is_cuda and torch.cuda.is_current_stream_capturing()
    if module is None or capturing or \
            module.weight.data_ptr() != weight.data_ptr():
        codes, codes_t, scale, _ = _cast_per_tensor(weight.contiguous(),
                                                    transposed)
    else:
        codes, codes_t, scale = (
            t.clone() if t is not None else None
            for t in module._weight_codes(transposed))
    empty = torch.empty(0, dtype=torch.uint8, device=weight.device)
    return (codes.view(torch.uint8),
            codes_t.view(torch.uint8) if transposed else empty, scale)


@_linear_weight_codes.register_fake
def _linear_weight_codes_fake(weight, layer, transposed):
    n, k = weight.shape
    return (weight.new_empty(n, k, dtype=torch.uint8),
            weight.new_empty((k, n) if transposed else (0,),
                             dtype=torch.uint8),
            weight.new_empty(1, dtype=torch.float32))


@torch.library.custom_op("moss_jit::grouped_weight_codes", mutates_args=())
def _grouped_weight_codes(weight: torch.Tensor, layer: int,
                          transposed: bool) -> tuple[torch.Tensor,
                                                     torch.Tensor,
                                                     torch.Tensor]:
    """_linear_weight_codes for a compiled GroupedLinear's experts: their
    stacked codes (uint8 [G N, K], [G K, N] or empty) and scales [G]."""
    module = _layers_by_id.get(layer)
    capturing = weight.is_cuda and torch.cuda.is_current_stream_capturing()
    if module is None or capturing or \
            module.weight.data_ptr() != weight.data_ptr():
        w_q, w_t = _expert_weights(weight.contiguous(), transposed)[0]
        copy = lambda t: t  # noqa: E731
    else:
        w_q, w_t = module._expert_codes(transposed)
        copy = torch.Tensor.clone
    empty = torch.empty(0, dtype=torch.uint8, device=weight.device)
    return (copy(w_q.codes).view(torch.uint8),
            copy(w_t.codes).view(torch.uint8) if transposed else empty,
            copy(w_q.global_scales))


@_grouped_weight_codes.register_fake
def _grouped_weight_codes_fake(weight, layer, transposed):
    groups, n, k = weight.shape
    return (weight.new_empty(groups * n, k, dtype=torch.uint8),
            weight.new_empty((groups * k, n) if transposed else (0,),
                             dtype=torch.uint8),
            weight.new_empty(groups, dtype=torch.float32))


class _PlainAttributes:
    """Sets the names in `_plain` as plain attributes: the weight cache's,
    which every training step changes. torch.nn.Module.__setattr__ looks
    each name up among the parameters, buffers and submodules first, which
    costs several microseconds a set."""

    _plain = frozenset()

    def __setattr__(self, name, value):
        if name in self._plain:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


class Linear(_PlainAttributes, torch.nn.Module):
    """torch.nn.Linear in FP8, MOSS's way. `in_features` and
    `out_features` must be multiples of 32 (the scaling block); CUDA weights
    need a Hopper GPU.

    Keyword options: x_format ('e4m3'), grad_format ('e4m3';
    docs/PYTHON.md says why), block (32), global_scope ('row' or
    'tensor'), fold ('row': the quantizers fold the
    block factors, docs/NUMERICS-CONTRACT.md section 8; 'none': exact),
    scaler_interval (500 steps between exact weight rescales),
    both_layouts (True: X's and dY's two layouts from one
    quantize_both_layouts call each where the shapes allow; False: one
    quantization per layout; the same bits either way), wgrad_promote_k
    (128: the weight gradient's GEMM promotes its partial sums to FP32
    every 128 tokens; 0: the tensor cores' own accumulation; folded
    operands only), dgrad_promote_k (0: the same for the input gradient's
    GEMM, over the out_features).

    The weight's FP8 cast is redone whenever the weight changes: its
    version counter moves, or a step is reported (attach_optimizer, or
    set_learning_rate(lr) after each step; needed with a fused optimizer,
    which updates the weight without moving its version). With a reported
    learning rate a CUDA weight's cast uses the auto-scaler's predicted
    scale; otherwise its exact per-tensor scale.
    """

    _plain = frozenset({"_w_codes", "_w_t_codes", "_w_scale", "_w_source",
                        "_pending_lr", "_scaler"})

    def __init__(self, in_features, out_features, bias=True, device=None,
                 dtype=None, *, x_format="e4m3", grad_format="e4m3",
                 block=32, global_scope="row", fold="row",
                 both_layouts=True, scaler_interval=500, wgrad_promote_k=128,
                 dgrad_promote_k=0):
        super().__init__()
        _check_features(in_features, out_features)
        self.in_features = in_features
        self.out_features = out_features
        self.config = LinearConfig(x_format, grad_format, block, global_scope,
                                   fold, both_layouts, wgrad_promote_k,
                                   dgrad_promote_k)
        reference = torch.nn.Linear(in_features, out_features, bias, device,
                                    dtype)
        self.weight = reference.weight
        self.bias = reference.bias
        self.scaler_interval = scaler_interval
        self._scaler = None
        self._w_codes = self._w_t_codes = self._w_scale = None
        self._w_source = None
        self._pending_lr = None
        self.weight_casts = {reason: 0 for reason in _REASONS}
        _layers_by_weight[id(self.weight)] = self
        _layers_by_id[id(self)] = self

    @classmethod
    def from_linear(cls, linear, **options):
        """A MOSS Linear with `linear`'s parameters (shared, not copied)."""
        layer = cls(linear.in_features, linear.out_features,
                    linear.bias is not None, device=linear.weight.device,
                    dtype=linear.weight.dtype, **options)
        layer.weight = linear.weight
        layer.bias = linear.bias
        _layers_by_weight[id(layer.weight)] = layer
        return layer

    def extra_repr(self):
        c = self.config
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, "
                f"bias={self.bias is not None}, x={c.x_format}, "
                f"grad={c.grad_format}, block={c.block}, "
                f"global={c.global_scope}, fold={c.fold}")

    def set_learning_rate(self, lr):
        """Tells the auto-scaler the learning rate of the step that just
        updated the weight (attach_optimizer does it for you)."""
        self._pending_lr = (self._pending_lr or 0.0) + float(lr)

    def scaler_stats(self):
        """The weight auto-scaler's counters (None before the first CUDA
        forward)."""
        return self._scaler.stats() if self._scaler is not None else None

    @torch.compiler.disable
    def _weight_codes(self, need_transpose):
        """The weight's FP8 codes [out, in], those of its transpose
        [in, out] when `need_transpose` (None otherwise), and their scale:
        cast again when the weight changed (_weight_source). Under CUDA
        graph capture, cast in the graph: a replay runs no Python, so it
        could not follow the cache, and would read codes the cache may have
        dropped since."""
        w = self.weight
        if w.is_cuda and torch.cuda.is_current_stream_capturing():
            with torch.no_grad():
                codes, codes_t, scale, _ = _cast_per_tensor(
                    w.detach().contiguous(), need_transpose)
            return codes, codes_t, scale
        # A step reported by the optimizer hook counts as a change too: a
        # fused optimizer updates the weight without moving its version.
        source = _weight_source(w)
        if self._w_codes is None or self._w_source != source or \
                self._pending_lr is not None:
            if w.dtype not in (torch.float32, torch.bfloat16):
                raise TypeError(f"weight has dtype {w.dtype}; the MOSS Linear "
                                "keeps float32 or bfloat16 master weights")
            with torch.no_grad():
                self._cast_weight(w.detach().contiguous(), need_transpose)
            self._w_source = source
        if need_transpose and self._w_t_codes is None:
            with torch.no_grad():
                if w.is_cuda:
                    # The same scale, the same rounding: W's codes,
                    # transposed, in one pass over the weight.
                    self._w_t_codes = _torch.cast_with_scale(
                        w.detach().contiguous(), self._w_scale,
                        transpose=True)
                else:
                    self._w_t_codes = self._w_codes.view(
                        torch.uint8).t().contiguous().view(
                            torch.float8_e4m3fn)
        return self._w_codes, self._w_t_codes, self._w_scale

    def _adamw_step(self, update, lr):
        """The optimizer's AdamW step of the weight (a CUDA FP32 one) fused
        with its cast (moss_jit.optim.AdamW): `update` is an AdamWUpdate;
        the codes of both layouts serve the next forward."""
        w = self.weight
        self._scaler = _scaler_on(self._scaler, w.device.index,
                                  self.scaler_interval)
        codes, codes_t, scale, reason = _cast_per_tensor(
            w.detach(), True, self._scaler, lr, adamw=update)
        # The kernel wrote the weight in place: its version moves, as any
        # in-place update's does, and the codes are that version's.
        torch.autograd.graph.increment_version(w)
        self._w_codes, self._w_t_codes, self._w_scale = codes, codes_t, scale
        self._w_source = _weight_source(w)
        self._pending_lr = None
        self.weight_casts[reason] += 1

    def _cast_weight(self, data, need_transpose):
        w = self.weight
        scaler = None
        if w.is_cuda and self._pending_lr is not None:
            self._scaler = scaler = _scaler_on(
                self._scaler, w.device.index, self.scaler_interval)
        codes, codes_t, scale, reason = _cast_per_tensor(
            data, need_transpose, scaler, self._pending_lr)
        self.weight_casts[reason] += 1
        self._pending_lr = None
        self._w_codes, self._w_t_codes, self._w_scale = codes, codes_t, scale

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x has {x.shape[-1]} features in its last "
                             f"dimension, this layer takes {self.in_features}")
        _check_activations(x, self.weight, "Linear")
        if x.numel() == 0:
            # No tokens, nothing to quantize: torch's Linear gives the empty
            # output and the zero gradients, as torch.nn.Linear's.
            bias = self.bias.to(x.dtype) if self.bias is not None else None
            return torch.nn.functional.linear(x, self.weight.to(x.dtype), bias)
        need_transpose = torch.is_grad_enabled() and x.requires_grad
        if _torch.compiling():
            # Traced, the cache is read by an op of its own when the graph
            # runs (_linear_weight_codes): the version-keyed cache and the
            # auto-scaler are Python state a graph cannot hold, and leaving
            # them out of the graph broke it at every Linear.
            codes, codes_t, w_scale = torch.ops.moss_jit.linear_weight_codes(
                self.weight.detach(), id(self), need_transpose)
            fp8 = torch.float8_e4m3fn
            w_codes = codes.view(fp8)
            w_t_codes = codes_t.view(fp8) if need_transpose else None
        else:
            w_codes, w_t_codes, w_scale = self._weight_codes(need_transpose)
        x2d = x.reshape(-1, self.in_features).contiguous()
        need_wgrad = torch.is_grad_enabled() and self.weight.requires_grad
        x_q, x_t = _activation_codes(x, x2d, self.config, need_wgrad)
        y = _LinearFunction.apply(x2d, self.weight, self.bias, w_codes,
                                  w_t_codes, w_scale, x_q, x_t, self.config)
        return y.reshape(*x.shape[:-1], self.out_features)


def _expert_weights(w, transposes=False, scalers=None, lr=None, adamw=None):
    """The experts' weights w [G, N, K] cast per tensor (E4M3, an FP32
    scale per expert, as Linear's weight) and stacked for grouped_gemm, with
    `transposes` also their transposes W_g^T [K, N] at the same scales, each
    expert's two layouts from one read (_cast_per_tensor; with `scalers`,
    an ExpertScalers of G experts, and the learning rate `lr`, the
    auto-scalers' casts in one call, after the optimizer's AdamW step of `w`
    in the same read where `adamw` is given). Returns
    ((weights, transposes or None), each expert's cast reason)."""
    groups, n, k = w.shape
    if scalers is not None:
        out_codes = torch.empty(groups, n, k, dtype=torch.uint8,
                                device=w.device)
        out_t = torch.empty(groups, k, n, dtype=torch.uint8,
                            device=w.device) if transposes else None
        scales = torch.empty(groups, dtype=torch.float32, device=w.device)
        reasons = scalers.step(w, lr, out_codes, scales, out_t, adamw)
        fp8 = torch.float8_e4m3fn
        codes = out_codes.view(fp8)
        codes_t = out_t.view(fp8) if transposes else None
    else:
        casts = [_cast_per_tensor(w[g], transposes) for g in range(groups)]
        codes = torch.stack([c[0] for c in casts])
        codes_t = torch.stack([c[1] for c in casts]) if transposes else None
        scales = torch.cat([c[2] for c in casts])
        reasons = ["exact"] * groups

    return ((_stacked_experts(codes, scales, groups, n, k),
             _stacked_experts(codes_t, scales, groups, k, n)
             if transposes else None), reasons)


def _stacked_experts(codes, scales, groups, rows, cols):
    """ExpertWeights of G experts' per-tensor E4M3 codes [G, rows, cols]
    (or [G rows, cols]) and their scales [G]."""
    return ExpertWeights(codes.reshape(groups * rows, cols), None, scales,
                         "per-tensor", "e4m3", (1, 0), "tensor", groups, rows)


def _expert_padding(offsets, rows):
    """The `rows` tokens sorted by expert (int32 offsets [G + 1]) with each
    expert's padded by rows of zeros to a multiple of 128, as
    LinearConfig.quantize's `gather` takes them: int32 [K] each padded
    row's token (-1 for a zero row), K the most the padding can take
    (T + 127 G rounded up to 128; rows past the last expert's end are
    zeros too); the padded int32 offsets [G + 1]; each token's expert [T]
    (int64). All on the offsets' device with no synchronization."""
    groups = offsets.numel() - 1
    device = offsets.device
    bounds = offsets.long()
    counts = (bounds[1:] - bounds[:-1]).clamp(min=0)
    starts = torch.zeros(groups + 1, dtype=torch.long, device=device)
    starts[1:] = torch.cumsum((counts + 127) // 128 * 128, 0)
    index = torch.arange(rows, device=device)
    expert = torch.searchsorted(bounds[1:], index, right=True).clamp(
        max=groups - 1)
    k = (rows + 127 * groups + 127) // 128 * 128
    source = torch.full((k,), -1, dtype=torch.int32, device=device)
    # (Clamped: offsets out of order give wrong rows, never an access
    # outside `source`, which would end the CUDA context.)
    position = (starts[expert] + index - bounds[expert]).clamp(0, k - 1)
    source[position] = index.to(torch.int32)
    return source, starts.to(torch.int32), expert


class _GroupedLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, offsets, weight, bias, w_q, w_t, config,
                need_wgrad):
        x_q = config.quantize(x, config.x_format)
        y = grouped_gemm(x_q, w_q, offsets, out_dtype=config.out_dtype(x),
                         bias=bias)
        # X^T's codes over the tokens padded by expert (read in place), not
        # X, wait for dW.
        padding = _expert_padding(offsets, x.shape[0]) if need_wgrad \
            else (None, None, None)
        x_t = config.quantize(x, config.x_format, gather=padding[0]) \
            if need_wgrad else None
        ctx.save_for_backward(offsets, weight, *_parts(w_t), *_parts(x_t),
                              *padding)
        ctx.w_t, ctx.x_t = _without_parts(w_t), _without_parts(x_t)
        ctx.x_dtype = x.dtype
        ctx.config = config
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, dy):
        offsets, weight, *parts = ctx.saved_tensors
        w_t_parts, x_t_parts = parts[:3], parts[3:6]
        source, padded_offsets, expert = parts[6:]
        config = ctx.config
        dy = _gradient_operand(dy)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            # dX_g = dY_g W_g: each expert's W^T [K, N], quantized per row.
            dy_q = config.quantize(dy, config.grad_format)
            dx = grouped_gemm(dy_q, _with_parts(ctx.w_t, w_t_parts), offsets,
                              out_dtype=ctx.x_dtype)
        need_dw = ctx.needs_input_grad[2]
        need_db = ctx.has_bias and ctx.needs_input_grad[3]
        if need_dw or need_db:
            # dW_g = dY_g^T X_g over each expert's tokens: one k-grouped
            # GEMM of the tokens padded per expert to 128 (zeros), with no
            # synchronization.
            if source is None:
                source, padded_offsets, expert = _expert_padding(
                    offsets, dy.shape[0])
            if need_db:
                db = torch.zeros(weight.shape[0], weight.shape[1],
                                 dtype=torch.float32, device=dy.device)
                db.index_add_(0, expert, dy.float())
                db = db.to(ctx.bias_dtype)
            if need_dw:
                dy_t = config.quantize(dy, config.grad_format,
                                       gather=source)
                dw = k_grouped_gemm(dy_t, _with_parts(ctx.x_t, x_t_parts),
                                    padded_offsets, out_dtype=weight.dtype,
                                    mma="fp8")
        return dx, None, dw, db, None, None, None, None


class GroupedLinear(_PlainAttributes, torch.nn.Module):
    """The experts of a mixture-of-experts layer in FP8: expert g computes
    y[rows] = x[rows] @ weight[g]^T + bias[g] for its rows of the tokens x
    [T, in_features], sorted by expert, given as int32 offsets [G + 1] on
    x's device (0 first, T last). `weight` is [num_experts, out_features,
    in_features]; both feature counts must be multiples of 32.

    Forward and the input gradient are grouped GEMMs (grouped_gemm, one
    launch for all experts): X and dY quantized as in Linear (MOSS two-level,
    folded by rows), each expert's weight and its transpose per tensor
    (E4M3, an FP32 scale per expert) from one read, cast again whenever the
    weight changed (its version counter moved, or attach_optimizer reported
    a step); with a reported learning rate, CUDA experts are cast by their
    own auto-scalers (as Linear's weight), otherwise at their exact scales.
    The weight gradient is one k-grouped GEMM (k_grouped_gemm) over the
    experts' tokens, each expert's padded with zeros to a multiple of 128
    on the device and quantized transposed as in Linear (folded by rows
    over all tokens; X^T's codes made in the forward and kept instead of X):
    no synchronization. Keyword options as Linear's
    (x_format, grad_format, block, global_scope, fold, scaler_interval).
    """

    _plain = frozenset({"_w_cached", "_w_source", "_pending_lr",
                        "_scalers"})

    def __init__(self, num_experts, in_features, out_features, bias=False,
                 device=None, dtype=None, *, x_format="e4m3",
                 grad_format="e4m3", block=32, global_scope="row",
                 fold="row", scaler_interval=500):
        super().__init__()
        if num_experts < 1:
            raise ValueError(f"num_experts={num_experts} must be at least 1")
        _check_features(in_features, out_features)
        self.num_experts = num_experts
        self.in_features = in_features
        self.out_features = out_features
        self.config = LinearConfig(x_format, grad_format, block, global_scope,
                                   fold)
        self.weight = torch.nn.Parameter(torch.empty(
            num_experts, out_features, in_features, device=device,
            dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(
            num_experts, out_features, device=device, dtype=dtype)) \
            if bias else None
        # Each expert as torch.nn.Linear initializes its own.
        bound = 1.0 / in_features ** 0.5
        with torch.no_grad():
            for g in range(num_experts):
                torch.nn.init.kaiming_uniform_(self.weight[g], a=5 ** 0.5)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)
        self.scaler_interval = scaler_interval
        # The experts' FP8 codes, what they were cast from, and the
        # auto-scalers (one per expert).
        self._w_cached = self._w_source = None
        self._scalers = None
        self._pending_lr = None
        self.weight_casts = {reason: 0 for reason in _REASONS}
        _layers_by_weight[id(self.weight)] = self
        _layers_by_id[id(self)] = self

    def set_learning_rate(self, lr):
        """Reports an optimizer step that updated the weight with learning
        rate `lr` (attach_optimizer does it for you): a fused optimizer
        updates it without moving its version counter. The stale codes go
        at once; the next cast of CUDA experts uses their auto-scalers."""
        self._pending_lr = (self._pending_lr or 0.0) + float(lr)
        self._w_cached = None

    def scaler_stats(self):
        """Each expert's auto-scaler counters (None before the first CUDA
        cast with a reported learning rate)."""
        return self._scalers.stats() if self._scalers else None

    def _adamw_step(self, update, lr):
        """The optimizer's AdamW step of every expert's weight (CUDA, FP32)
        fused with their casts, as Linear._adamw_step's."""
        w = self.weight
        s = self._scalers
        if s is None or s.device_index != w.device.index or \
                s.experts != w.shape[0]:
            self._scalers = ExpertScalers(w.device.index, w.shape[0],
                                          self.scaler_interval)
        self._w_cached, reasons = _expert_weights(
            w.detach(), True, self._scalers, lr, adamw=update)
        torch.autograd.graph.increment_version(w)
        self._w_source, self._pending_lr = _weight_source(w), None
        for reason in reasons:
            self.weight_casts[reason] += 1

    def _expert_codes(self, need_transposes):
        """_expert_weights(weight, need_transposes), cast again only when
        the weight changed: inference and accumulated micro-batches reuse
        the codes (traced, through _grouped_weight_codes)."""
        w = self.weight
        if w.is_cuda and torch.cuda.is_current_stream_capturing():
            # As Linear._weight_codes: the cast goes into the graph.
            with torch.no_grad():
                return _expert_weights(w.detach().contiguous(),
                                       need_transposes)[0]
        if _torch.compiling():
            codes, codes_t, scales = torch.ops.moss_jit.grouped_weight_codes(
                w.detach(), id(self), need_transposes)
            groups, n, k = w.shape
            fp8 = torch.float8_e4m3fn
            return (_stacked_experts(codes.view(fp8), scales, groups, n, k),
                    _stacked_experts(codes_t.view(fp8), scales, groups, k, n)
                    if need_transposes else None)
        source = _weight_source(w)
        if self._w_cached is None or self._w_source != source or \
                (need_transposes and self._w_cached[1] is None):
            scalers = None
            if w.is_cuda and self._pending_lr is not None:
                s = self._scalers
                if s is None or s.device_index != w.device.index or \
                        s.experts != w.shape[0]:
                    self._scalers = ExpertScalers(w.device.index, w.shape[0],
                                                  self.scaler_interval)
                scalers = self._scalers
            with torch.no_grad():
                # (Each expert's slice of a contiguous weight is one too.)
                self._w_cached, reasons = _expert_weights(
                    w.detach().contiguous(), need_transposes, scalers,
                    self._pending_lr)
            self._w_source, self._pending_lr = source, None
            for reason in reasons:
                self.weight_casts[reason] += 1
            # A weight replaced since __init__ gets the optimizer's reports.
            _layers_by_weight[id(w)] = self
        w_q, w_t = self._w_cached
        return w_q, w_t if need_transposes else None

    def extra_repr(self):
        return (f"num_experts={self.num_experts}, "
                f"in_features={self.in_features}, "
                f"out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def forward(self, x, offsets):
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x must be [tokens, {self.in_features}], got "
                             f"{tuple(x.shape)}")
        _check_activations(x, self.weight, "GroupedLinear")
        if x.shape[0] == 0:
            # No tokens, nothing to quantize: torch gives the empty output
            # and the zero gradients.
            bias = self.bias[0].to(x.dtype) if self.bias is not None else None
            return torch.nn.functional.linear(x, self.weight[0].to(x.dtype),
                                              bias)
        # (Inside the Function, needs_input_grad holds under no_grad too.)
        grad = torch.is_grad_enabled()
        # The input gradient's transposed weights come with the forward's.
        w_q, w_t = self._expert_codes(grad and x.requires_grad)
        return _GroupedLinearFunction.apply(
            x.contiguous(), offsets, self.weight, self.bias, w_q, w_t,
            self.config, grad and self.weight.requires_grad)


def attach_optimizer(optimizer):
    """Registers a hook that passes each step's learning rate to the MOSS
    Linears whose weights `optimizer` updates. Returns the hook's handle."""

    def hook(opt, args, kwargs):
        for group in opt.param_groups:
            lr = group.get("lr")
            if lr is None:
                continue
            # (moss_jit.optim.AdamW casts the weights it steps itself.)
            fused = getattr(opt, "fused_weights", ())
            for p in group["params"]:
                layer = _layers_by_weight.get(id(p))
                if layer is not None and layer.weight is p and \
                        id(p) not in fused:
                    layer.set_learning_rate(float(lr))

    return optimizer.register_step_post_hook(hook)
