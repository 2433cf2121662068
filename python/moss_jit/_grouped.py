"""m-grouped GEMMs (mixture-of-experts layers) on torch tensors: each
expert's rows of A times its own weight, in one launch on a Hopper GPU
(the C API's moss_gemm_plan_launch_grouped), or expert by expert in FP64
on the CPU. The contiguous layout takes the experts' rows back to back with
G + 1 offsets; the masked one M / G rows per expert with G counts."""

from typing import Any, NamedTuple, Optional, Tuple

import torch

from . import _capi, _torch, reference, schemes
from .tensor import MossTensor


class ExpertWeights(NamedTuple):
    """The weights of G experts quantized alike, stacked for grouped_gemm:
    codes [G * N, K] (expert g's rows g * N to (g + 1) * N), their block
    scales stacked the same way, and their global scales [G] (one per
    expert's tensor) or [G * N] (per row). Make it once with
    stack_experts() and reuse it: stacking copies the weights."""
    codes: Any
    local_scales: Optional[Any]
    global_scales: Optional[Any]
    scheme: str
    format: str
    block: Tuple[int, int]
    global_scope: str
    groups: int
    n: int

    def expert(self, g):
        """Expert g's weight as a MossTensor [N, K]."""
        rows = slice(g * self.n, (g + 1) * self.n)
        local = None
        if self.local_scales is not None:
            per = self.local_scales.shape[0] // self.groups
            local = self.local_scales[g * per:(g + 1) * per]
        glob = None
        if self.global_scales is not None:
            per = self.global_scales.shape[0] // self.groups
            glob = self.global_scales[g * per:(g + 1) * per]
        return MossTensor(self.codes[rows], local, glob, self.scheme,
                          self.format, self.block, self.global_scope)


def stack_experts(weights):
    """ExpertWeights of a list of G MossTensors [N, K] (torch tensors on one
    device) of the same scheme, format, block and shape."""
    weights = list(weights)
    if not weights:
        raise ValueError("stack_experts needs at least one expert's weight")
    first = weights[0]
    n, k, device = _torch._check_operand(first, "weights[0]")
    for g, w in enumerate(weights[1:], 1):
        rows, kw, dev = _torch._check_operand(w, f"weights[{g}]")
        if (rows, kw) != (n, k) or dev != device or \
                tuple(w[3:7]) != tuple(first[3:7]):
            raise ValueError(
                f"weights[{g}] is [{rows}, {kw}] {w.scheme} {w.format} "
                f"{w.block} on {dev}; every expert's weight must be "
                f"[{n}, {k}] {first.scheme} {first.format} {first.block} "
                f"on {device} (as weights[0])")
    block_rows = first.block[0]
    if first.local_scales is not None and block_rows > 1 and n % block_rows:
        raise ValueError(f"N={n} is not a multiple of the weights' block "
                         f"rows {block_rows}: an expert's blocks would "
                         "straddle the next one's")

    def cat(parts):
        return None if parts[0] is None else torch.cat(parts).contiguous()

    return ExpertWeights(cat([w.codes for w in weights]),
                         cat([w.local_scales for w in weights]),
                         cat([w.global_scales for w in weights]),
                         first.scheme, first.format, first.block,
                         first.global_scope, len(weights), n)


def _check_offsets(offsets, groups, m, device, masked):
    what = "row counts" if masked else "row offsets"
    size, meaning = (groups, "one per expert") if masked else \
        (groups + 1, "the experts plus one")
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"offsets must be a torch tensor of int32 {what}")
    if offsets.dtype != torch.int32 or tuple(offsets.shape) != (size,) \
            or not offsets.is_contiguous():
        raise ValueError(f"offsets must be a contiguous int32 tensor [{size}] "
                         f"of {what} ({meaning}), got {offsets.dtype} "
                         f"{tuple(offsets.shape)}")
    if offsets.device != device:
        raise ValueError(f"offsets is on {offsets.device}, a on {device}")
    if masked and m % groups:
        raise ValueError(f"a has {m} rows, not a multiple of the {groups} "
                         "experts: the masked layout gives each expert M / G "
                         "rows")


def _expert_rows(offsets, groups, m, masked):
    """Each expert's (first row, end row), checked on the host (CPU)."""
    values = offsets.tolist()
    if masked:
        capacity = m // groups
        if any(not 0 <= c <= capacity for c in values):
            raise ValueError(f"row counts {values} must each lie in [0, "
                             f"{capacity}] (M / G)")
        return [(g * capacity, g * capacity + c) for g, c in enumerate(values)]
    if values[0] != 0 or values[-1] != m or \
            any(x > y for x, y in zip(values, values[1:])):
        raise ValueError(f"offsets {values} must start at 0, end at M={m} "
                         "and not decrease")
    return list(zip(values, values[1:]))


def _check_out(out, m, n, out_dtype, device):
    if not isinstance(out, torch.Tensor):
        raise TypeError("out must be a torch tensor or None")
    if tuple(out.shape) != (m, n) or out.dtype != out_dtype or \
            not out.is_contiguous() or out.device != device:
        raise ValueError(f"out must be a contiguous {out_dtype} tensor "
                         f"[{m}, {n}] on {device}, got {out.dtype} "
                         f"{tuple(out.shape)} on {out.device}")


def _slice_rows(a, start, end):
    """Rows start:end of a row-wise quantized MossTensor."""
    local = None if a.local_scales is None else a.local_scales[start:end]
    glob = a.global_scales
    if glob is not None and glob.shape[0] != 1:
        glob = glob[start:end]
    return MossTensor(a.codes[start:end], local, glob, *a[3:])


def grouped_gemm(a, b, offsets, out_dtype=torch.bfloat16, bias=None,
                 fold="auto", layout="contiguous", out=None):
    if not isinstance(b, ExpertWeights):
        b = stack_experts(b)
    m, k, device = _torch._check_operand(a, "a")
    if b.codes.shape[1] != k:
        raise ValueError(f"a is [{m}, {k}] and the experts' weights are "
                         f"[{b.n}, {b.codes.shape[1]}]: both K-major with "
                         "the same K")
    if b.codes.device != device:
        raise ValueError(f"a is on {device}, the weights on {b.codes.device}")
    if a.local_scales is not None and a.block[0] != 1:
        raise ValueError(f"a's blocks span {a.block[0]} rows; a grouped "
                         "GEMM's rows belong to their experts one by one "
                         "(quantize a with blocks of one row)")
    if layout not in _capi.GROUP_LAYOUTS:
        schemes._choice(layout, tuple(_capi.GROUP_LAYOUTS), "layout")
    masked = layout == "masked"
    _check_offsets(offsets, b.groups, m, device, masked)
    if out_dtype not in _torch.OUT_TYPES:
        raise TypeError(f"out_dtype={out_dtype} is not torch.bfloat16, "
                        "torch.float16 or torch.float32")
    if out is not None:
        _check_out(out, m, b.n, out_dtype, device)
    bias_type = _torch._check_epilogue(bias, "bias", (b.groups, b.n), device)
    if fold not in _capi.FOLDS:
        schemes._choice(fold, tuple(_capi.FOLDS), "fold")

    if _torch.compiling():
        # torch.compile traces the custom op, which returns a new output.
        if out is not None:
            raise ValueError("out is not supported under torch.compile")
        stacked = MossTensor(b.codes, b.local_scales, b.global_scales,
                             b.scheme, b.format, b.block, b.global_scope)
        return torch.ops.moss_jit.grouped_gemm(
            *_torch._op_operand(a), a.descriptor(),
            *_torch._op_operand(stacked), stacked.descriptor(), b.groups,
            offsets, out_dtype, bias, fold, masked)
    # A masked layout's unused rows are left as they were: zeros unless the
    # caller passes its own output.
    if out is not None:
        d = out
    elif masked:
        d = torch.zeros(m, b.n, dtype=out_dtype, device=device)
    else:
        d = torch.empty(m, b.n, dtype=out_dtype, device=device)
    _grouped_raw(a, b, offsets, bias, bias_type, fold, masked, d)
    return d


def _grouped_raw(a, b, offsets, bias, bias_type, fold, masked, d):
    """The grouped GEMM of checked operands into d."""
    m, k, device = d.shape[0], a.codes.shape[1], d.device
    out_dtype = d.dtype
    if device.type == "cpu":
        # Expert by expert, the FP64 reference of each (as gemm on CPU).
        for g, (start, end) in enumerate(
                _expert_rows(offsets, b.groups, m, masked)):
            if start == end:
                continue
            part = reference.gemm_numpy(
                _slice_rows(a, start, end), b.expert(g),
                None if bias is None else bias[g])
            d[start:end] = torch.from_numpy(part).to(out_dtype)
        return
    if device.type != "cuda":
        raise ValueError(f"the operands are on {device}; grouped_gemm takes "
                         "CUDA or CPU tensors")
    index = _torch._check_cuda_device(a.codes, "a", hopper=True)
    spec = _torch._gemm_spec(
        _capi.DYNAMIC, b.n, k, a[3:7], b[3:7], _torch.OUT_TYPES[out_dtype],
        bias_type, None, False, 1.0, "auto", fold, b.groups,
        _capi.GROUP_LAYOUTS["masked" if masked else "contiguous"])
    _launch_grouped(index, spec, m, a, b, d, bias, offsets)


def _launch_grouped(index, spec, extent, a, b, d, bias, offsets):
    """moss_gemm_plan_launch_grouped of the GemmSpec `spec` on device
    `index`'s current stream: `extent` rows (a k-grouped GEMM's K), the
    operands' tensors (a and b: MossTensor fields, codes first), the output
    d, and the offsets or counts on the device."""
    counts = tuple(t.numel() if t is not None else 0
                   for t in a[1:3] + b[1:3])
    buffers = _torch.gemm_buffers(a, b, d, bias, None, None, counts)
    with _torch._DeviceGuard(index):
        _capi.check(_capi.moss_gemm_plan_launch_grouped_packed(
            _capi.plan(index, spec), extent, buffers, offsets.data_ptr(),
            _torch._raw_stream(index)))


@torch.library.custom_op("moss_jit::grouped_gemm", mutates_args=())
def _grouped_op(a_codes: torch.Tensor, a_local: torch.Tensor,
                a_global: torch.Tensor, a_desc: str, b_codes: torch.Tensor,
                b_local: torch.Tensor, b_global: torch.Tensor, b_desc: str,
                groups: int, offsets: torch.Tensor, out_dtype: torch.dtype,
                bias: Optional[torch.Tensor], fold: str,
                masked: bool) -> torch.Tensor:
    a = _torch._from_descriptor(a_codes, a_local, a_global, a_desc)
    expert = _torch._from_descriptor(b_codes, b_local, b_global, b_desc)
    b = ExpertWeights(expert.codes, expert.local_scales, expert.global_scales,
                      expert.scheme, expert.format, expert.block,
                      expert.global_scope, groups, b_codes.shape[0] // groups)
    make = torch.zeros if masked else torch.empty
    d = make(a_codes.shape[0], b.n, dtype=out_dtype, device=a_codes.device)
    bias_type = _torch._check_epilogue(bias, "bias", (b.groups, b.n),
                                       d.device)
    _grouped_raw(a, b, offsets, bias, bias_type, fold, masked, d)
    return d


@_grouped_op.register_fake
def _grouped_fake(a_codes, a_local, a_global, a_desc, b_codes, b_local,
                  b_global, b_desc, groups, offsets, out_dtype, bias, fold,
                  masked):
    return a_codes.new_empty((a_codes.shape[0], b_codes.shape[0] // groups),
                             dtype=out_dtype)


def _slice_columns(t, start, end):
    """Columns start:end of a MossTensor whose block scales cover whole
    128-column blocks there."""
    local = t.local_scales
    if local is not None:
        block = t.block[1]
        local = local[:, start // block:end // block]
    return MossTensor(t.codes[:, start:end], local, t.global_scales, *t[3:])


def _expert_columns(offsets, groups, k):
    """Each expert's (first column, end column), checked on the host."""
    values = offsets.tolist()
    if values[0] != 0 or values[-1] > k or \
            any(x > y for x, y in zip(values, values[1:])) or \
            any(v % 128 for v in values):
        raise ValueError(f"offsets {values} must be multiples of 128, start "
                         f"at 0, end at most at K={k} and not decrease")
    return list(zip(values, values[1:]))


def k_grouped_gemm(a, b, offsets, out_dtype=torch.bfloat16, mma="auto"):
    m, k, device = _torch._check_operand(a, "a")
    n, kb, device_b = _torch._check_operand(b, "b")
    if kb != k:
        raise ValueError(f"a is [{m}, {k}] and b is [{n}, {kb}]: both "
                         "K-major over the same K (the experts' tokens)")
    if device_b != device:
        raise ValueError(f"a is on {device}, b on {device_b}")
    if k % 128:
        raise ValueError(f"K={k} is not a multiple of 128: pad each "
                         "expert's tokens to a multiple of 128 (zeros)")
    if not isinstance(offsets, torch.Tensor) or \
            offsets.dtype != torch.int32 or offsets.dim() != 1 or \
            offsets.numel() < 2 or not offsets.is_contiguous():
        raise ValueError("offsets must be a contiguous int32 tensor [G + 1] "
                         "of column offsets (the experts plus one)")
    if offsets.device != device:
        raise ValueError(f"offsets is on {offsets.device}, a on {device}")
    if not isinstance(out_dtype, torch.dtype) or \
            out_dtype not in _torch.OUT_TYPES:
        raise TypeError(f"out_dtype={out_dtype} is not torch.bfloat16, "
                        "torch.float16 or torch.float32")
    # A tuple's membership test takes unhashable values too.
    schemes._choice(mma, tuple(_capi.MMA_TYPES), "mma")
    if _torch.compiling():
        # torch.compile traces the custom op.
        return torch.ops.moss_jit.k_grouped_gemm(
            *_torch._op_operand(a), a.descriptor(), *_torch._op_operand(b),
            b.descriptor(), offsets, out_dtype, mma)
    return _k_grouped_raw(a, b, offsets, out_dtype, mma)


def _k_grouped_raw(a, b, offsets, out_dtype, mma):
    """The k-grouped GEMM of checked operands, as a new [G, M, N]."""
    (m, k), n, device = a.codes.shape, b.codes.shape[0], a.codes.device
    groups = offsets.numel() - 1
    if device.type == "cpu":
        d = torch.zeros(groups, m, n, dtype=out_dtype)
        for g, (start, end) in enumerate(_expert_columns(offsets, groups, k)):
            if start < end:
                d[g] = torch.from_numpy(reference.gemm_numpy(
                    _slice_columns(a, start, end),
                    _slice_columns(b, start, end))).to(out_dtype)
        return d
    if device.type != "cuda":
        raise ValueError(f"the operands are on {device}; k_grouped_gemm "
                         "takes CUDA or CPU tensors")
    index = _torch._check_cuda_device(a.codes, "a", hopper=True)
    d = torch.empty(groups, m, n, dtype=out_dtype, device=device)
    spec = _torch._gemm_spec(
        m, n, _capi.DYNAMIC, a[3:7], b[3:7], _torch.OUT_TYPES[out_dtype],
        None, None, False, 1.0, mma, "auto", groups, _capi.GROUPS_ALONG_K)
    _launch_grouped(index, spec, k, a, b, d, None, offsets)
    return d


@torch.library.custom_op("moss_jit::k_grouped_gemm", mutates_args=())
def _k_grouped_op(a_codes: torch.Tensor, a_local: torch.Tensor,
                  a_global: torch.Tensor, a_desc: str, b_codes: torch.Tensor,
                  b_local: torch.Tensor, b_global: torch.Tensor, b_desc: str,
                  offsets: torch.Tensor, out_dtype: torch.dtype,
                  mma: str) -> torch.Tensor:
    return _k_grouped_raw(
        _torch._from_descriptor(a_codes, a_local, a_global, a_desc),
        _torch._from_descriptor(b_codes, b_local, b_global, b_desc), offsets,
        out_dtype, mma)


@_k_grouped_op.register_fake
def _k_grouped_fake(a_codes, a_local, a_global, a_desc, b_codes, b_local,
                    b_global, b_desc, offsets, out_dtype, mma):
    return a_codes.new_empty(
        (offsets.shape[0] - 1, a_codes.shape[0], b_codes.shape[0]),
        dtype=out_dtype)
