"""The optimizer's step with the weights' FP8 casts: moss_jit.optim.AdamW
(the AdamW update and the cast in one read of each weight) against
torch.optim.AdamW(fused=True) followed by the MOSS layer's own cast of the
updated weight (what the next forward does after attach_optimizer reports
the step), both timed in this process on FP32 master weights. Also torch's
fused AdamW alone, and with the bf16 cast that autocast makes of the
weight, for scale.

    python python/bench/bench_optimizer.py [--iters N] [--rounds R]

Shapes: a dense Linear's weight (11008 x 4096) and a mixture of experts'
(64 x 1536 x 4096, DeepSeek-V3-like; 8 x 14336 x 4096, Mixtral-like).
Prints one Markdown table: median ms per step and the unfused / fused ratio.
"""

import argparse

import torch

import moss_jit
from bench_linear import time_steps

SHAPES = [(1, 11008, 4096), (64, 1536, 4096), (8, 14336, 4096)]


def make_layer(experts, rows, cols):
    device = torch.device("cuda")
    if experts == 1:
        layer = moss_jit.nn.Linear(cols, rows, bias=False, device=device)
        cast = lambda: layer._weight_codes(True)  # noqa: E731
    else:
        layer = moss_jit.nn.GroupedLinear(experts, cols, rows, bias=False,
                                          device=device)
        cast = lambda: layer._expert_codes(True)  # noqa: E731
    # Gradients of a trained layer's size; the steps reuse them.
    layer.weight.grad = 1e-3 * torch.randn_like(layer.weight)
    return layer, cast


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"moss_jit {moss_jit.__version__}")
    print("| weights | torch AdamW | + bf16 cast | torch AdamW + MOSS cast "
          "| moss AdamW (fused) | unfused / fused |")
    print("|---|---|---|---|---|---|")
    for experts, rows, cols in SHAPES:
        layer, cast = make_layer(experts, rows, cols)
        torch_adamw = torch.optim.AdamW(layer.parameters(), lr=1e-4,
                                        fused=True)
        moss_jit.attach_optimizer(torch_adamw)
        alone = time_steps(torch_adamw.step, args.iters, args.rounds)
        bf16 = time_steps(
            lambda: (torch_adamw.step(),
                     layer.weight.detach().to(torch.bfloat16)),
            args.iters, args.rounds)
        unfused = time_steps(lambda: (torch_adamw.step(), cast()),
                             args.iters, args.rounds)
        fused_adamw = moss_jit.optim.AdamW(layer.parameters(), lr=1e-4)
        fused = time_steps(fused_adamw.step, args.iters, args.rounds)
        name = (f"{experts} x {rows}x{cols}" if experts > 1
                else f"{rows}x{cols}")
        print(f"| {name} | {alone:.3f} | {bf16:.3f} | {unfused:.3f} "
              f"| {fused:.3f} | {unfused / fused:.2f} |")
        del layer, torch_adamw, fused_adamw
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
