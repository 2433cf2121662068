"""moss_jit.optim.AdamW: torch.optim.AdamW whose step also casts the MOSS
layers' weights to FP8, in the same read of each weight.

A training step with FP32 master weights reads every weight twice after the
backward: the optimizer updates it, then the next forward casts it to FP8.
For the weights of moss_jit.nn.Linear and GroupedLinear on CUDA, this
optimizer runs one kernel instead: it reads the weight, its gradient and
Adam's two moments once and writes the updated weight, the moments and the
weight's FP8 codes in both layouts, at the scale the layer's auto-scaler
predicts (docs/PYTHON.md, "The fused optimizer step"). Every other
parameter takes torch's own AdamW step. The state is torch.optim.AdamW's
(`step`, `exp_avg`, `exp_avg_sq`), so checkpoints move between the two.
"""

import torch

from . import nn

__all__ = ["AdamW"]


def _fusable_layer(p, state):
    """The MOSS layer whose weight `p` is, where its step can be fused: a
    contiguous CUDA FP32 weight with a dense FP32 gradient and state of its
    own layout; None otherwise (torch's step takes it)."""
    layer = nn._layers_by_weight.get(id(p))
    if layer is None or layer.weight is not p:
        return None
    grad = p.grad
    if (grad is None or not p.is_cuda or p.dtype != torch.float32 or
            grad.is_sparse or grad.dtype != torch.float32 or
            not p.is_contiguous() or not grad.is_contiguous()):
        return None
    for key in ("exp_avg", "exp_avg_sq"):
        t = state.get(key)
        if t is not None and (t.dtype != torch.float32 or
                              t.device != p.device or not t.is_contiguous()):
            return None
    return layer


def _torch_step(optimizer):
    """torch.optim.AdamW's step of `optimizer`, without the step hooks: torch
    wraps each optimizer class's step in a function that runs them, and
    this class's step already does."""
    step = torch.optim.AdamW.step
    if getattr(step, "hooked", False):
        step = step.__wrapped__
    step(optimizer)


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW (same arguments and state) that fuses each CUDA
    MOSS layer's weight update with the weight's FP8 cast.

    The fused update is AdamW's, computed in FP32 with each operation
    rounded once (moss::numerics::adamwUpdate); it differs from torch's
    kernels by an ulp or so. amsgrad, maximize, differentiable and
    capturable steps, and steps a GradScaler hands scaled gradients
    (fused=True), are torch's alone. With this optimizer,
    attach_optimizer is not needed for the layers it fuses (it reports the
    learning rate to the others). A compiled layer reads the codes this
    step writes as an eager one does (moss_jit::linear_weight_codes).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2, amsgrad=False, **kwargs):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad,
                         **kwargs)
        # id()s of the weights the last step fused (attach_optimizer's hook
        # leaves those layers alone).
        self.fused_weights = set()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.fused_weights = set()
        held = []
        # A GradScaler hands torch's fused kernel scaled gradients to unscale
        # itself (grad_scale, found_inf): those steps are torch's alone.
        amp_scaled = getattr(self, "grad_scale", None) is not None or \
            getattr(self, "found_inf", None) is not None
        try:
            # (group, parameter, its layer and state) of each fused step.
            fused = []
            for group in self.param_groups if not amp_scaled else ():
                if group["amsgrad"] or group["maximize"] or \
                        group.get("differentiable") or \
                        group.get("capturable"):
                    continue
                for p in group["params"]:
                    state = self.state[p]
                    layer = _fusable_layer(p, state)
                    if layer is None:
                        continue
                    if not state:
                        # torch.optim.AdamW's initial state.
                        state["step"] = torch.tensor(0.0)
                        state["exp_avg"] = torch.zeros_like(
                            p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(
                            p, memory_format=torch.preserve_format)
                    fused.append((group, p, layer, state))
            if fused:
                # Every step count at once (the counts are CPU tensors, as
                # torch keeps them; one op instead of one per weight).
                torch._foreach_add_([s["step"] for *_, s in fused], 1)
            for group, p, layer, state in fused:
                update = nn.AdamWUpdate(
                    p.grad, state["exp_avg"], state["exp_avg_sq"],
                    group["betas"], group["eps"], group["weight_decay"],
                    int(state["step"]))
                layer._adamw_step(update, float(group["lr"]))
                self.fused_weights.add(id(p))
                # torch's step below skips parameters without a gradient.
                held.append((p, p.grad))
                p.grad = None
            _torch_step(self)
        finally:
            for p, grad in held:
                p.grad = grad
        return loss
