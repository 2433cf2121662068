"""The token shuffles around a mixture-of-experts layer's grouped GEMMs:
route() sorts the (token, expert) pairs of a top-k routing by expert,
dispatch_quantize() quantizes the tokens in that order with one read of
each token's row per pair (no gathered copy), and combine() adds the
experts' outputs back to their tokens, weighted."""

import torch

from . import _capi, _quantize, _torch, schemes


def route(expert_ids, num_experts):
    """The expert order of a routing. expert_ids: integer tensor [T, top_k]
    (each token's experts). Returns (token_index, offsets, order): int32
    [T * top_k] the token of each row in expert order, int32 [G + 1] the
    experts' row offsets (grouped_gemm's), and int64 [T * top_k] each row's
    position in expert_ids.flatten() (for combine's weights). The sort is
    stable: an expert's rows keep their tokens' order."""
    if not isinstance(expert_ids, torch.Tensor) or expert_ids.dim() != 2 or \
            expert_ids.dtype.is_floating_point or expert_ids.dtype == \
            torch.bool:
        raise TypeError("expert_ids must be an integer tensor [tokens, top_k]")
    if num_experts < 1:
        raise ValueError(f"num_experts={num_experts} must be at least 1")
    flat = expert_ids.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or
                         int(flat.max()) >= num_experts):
        raise ValueError(f"expert ids must lie in [0, {num_experts})")
    order = torch.sort(flat, stable=True).indices
    token_index = (order // expert_ids.shape[1]).to(torch.int32)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32,
                          device=flat.device)
    offsets[1:] = torch.cumsum(counts, 0)
    return token_index, offsets, order


def gathered_rows(x, index):
    """x[index] with a row of zeros for each negative index: the copy the
    gathering quantizer reads in place (in torch operations that
    torch.compile traces)."""
    index = index.long()
    return torch.where((index >= 0).unsqueeze(1), x[index.clamp(min=0)], 0)


def dispatch_quantize(x, token_index, scheme="moss", format="e4m3",
                      block=None, global_scope="row", fold="row",
                      transpose=False):
    """quantize(x[token_index], ...) without the gathered copy: on a GPU the
    quantizer reads row token_index[r] of x for row r of the gathered
    matrix (moss_quantize_gathered), the same bits. x: [T, K] float32 or
    bfloat16; token_index: int32 [R] on x's device, each in [0, T) (on the
    GPU values out of range are clamped, on the CPU refused). The schemes
    are those quantizing row by row: moss (its default here: a global per
    row, folded by rows, grouped_gemm's A), per-tensor, per-row, per-group
    1xN, mxfp8.

    transpose=True quantizes the gathered matrix's transpose (codes [K, R],
    K-major over the rows: a k-grouped GEMM's operands), and an index of -1
    is a row of zeros (each expert's tokens padded to whole blocks, as
    k_grouped_gemm takes them; on the GPU every index outside [0, T) is
    one)."""
    _quantize._check_matrix(x, "x")
    if not isinstance(x, torch.Tensor):
        raise TypeError("x must be a torch tensor")
    if not isinstance(token_index, torch.Tensor) or \
            token_index.dtype != torch.int32 or token_index.dim() != 1 or \
            not token_index.is_contiguous():
        raise TypeError("token_index must be a contiguous int32 tensor [rows]")
    if token_index.device != x.device:
        raise ValueError(f"token_index is on {token_index.device}, x on "
                         f"{x.device}")
    if token_index.numel() == 0:
        raise ValueError("token_index is empty: nothing to quantize")
    if transpose not in (False, True):
        raise ValueError(f"transpose={transpose!r} is not True or False")
    if not x.is_cuda:
        lowest = -1 if transpose else 0
        if int(token_index.min()) < lowest or \
                int(token_index.max()) >= x.shape[0]:
            raise ValueError(f"token_index values must lie in [{lowest}, "
                             f"{x.shape[0]})")
        return _quantize.quantize(gathered_rows(x, token_index), scheme,
                                  format, block, global_scope,
                                  transpose=transpose, fold=fold)
    input_type = _quantize._input_type(x)
    rows, cols = int(token_index.numel()), int(x.shape[1])
    block_rows, block_cols, fold = schemes.check_quantize_args(
        rows, cols, scheme, format, block, global_scope, transpose, fold)
    if block_rows != 1:
        raise ValueError(f"blocks of {block_rows} rows span several tokens; "
                         "dispatch_quantize quantizes row by row")
    index = _torch._check_cuda_device(x, "x", hopper=False)
    _torch._aligned(x, "x")
    spec, layout = schemes.quantize_spec(rows, cols, input_type, scheme,
                                         format, block_rows, block_cols,
                                         global_scope, transpose, fold)
    q, local, glob = _torch._empty_outputs(layout, x.device,
                                           _torch.FP8_DTYPES[format])
    buffers = _capi.QuantizeBuffers(
        x.data_ptr(), q.data_ptr(),
        local.data_ptr() if local is not None else 0,
        glob.data_ptr() if glob is not None else 0, 0)
    _torch._call_on_device(index, _capi.lib.moss_quantize_gathered, spec,
                           buffers, token_index.data_ptr(), int(x.shape[0]))
    return _quantize.result(q, local, glob, scheme, format, block_rows,
                            block_cols, global_scope, transpose, fold)


def combine(y, token_index, tokens, weights=None, order=None):
    """The experts' outputs y [R, N] (rows in expert order) added back to
    their tokens: out[token_index[r]] += weights.flatten()[order[r]] * y[r],
    out [tokens, N] in y's dtype (summed in float32). weights: the routing's
    [T, top_k] weights, or None for 1."""
    if not isinstance(y, torch.Tensor) or y.dim() != 2:
        raise TypeError("y must be a tensor [rows, N]")
    if token_index.shape != (y.shape[0],):
        raise ValueError(f"token_index has shape {tuple(token_index.shape)}; "
                         f"y has {y.shape[0]} rows")
    rows = y.float()
    if weights is not None:
        if order is None:
            raise ValueError("weights need route()'s order")
        rows = rows * weights.reshape(-1)[order].float().unsqueeze(1)
    out = torch.zeros(tokens, y.shape[1], dtype=torch.float32,
                      device=y.device)
    out.index_add_(0, token_index.long(), rows)
    return out.to(y.dtype)
