"""Where one moss_jit.nn.Linear step's GPU time goes: torch.profiler's
kernel table for forward + backward at one shape; with --experts G, a
moss_jit.nn.GroupedLinear's (the T rows split evenly among G experts).

    python python/bench/profile_linear.py [--shape T,IN,OUT] [--steps N]
        [--experts G]
"""

import argparse
import os
import time

os.environ.setdefault("MOSS_TIERED_COMPILE", "0")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import moss_jit  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="8192,4096,11008")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--experts", type=int, default=0)
    args = parser.parse_args()
    tokens, fin, fout = (int(v) for v in args.shape.split(","))
    x = torch.randn(tokens, fin, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    dy = torch.randn(tokens, fout, device="cuda", dtype=torch.bfloat16)
    if args.experts:
        layer = moss_jit.nn.GroupedLinear(args.experts, fin, fout,
                                          device="cuda")
        offsets = torch.linspace(0, tokens, args.experts + 1,
                                 device="cuda").to(torch.int32)

        def step():
            layer.set_learning_rate(1e-5)  # a step: the weights cast again
            x.grad = None
            layer.weight.grad = None
            layer(x, offsets).backward(dy)
    else:
        layer = moss_jit.nn.Linear(fin, fout, bias=False, device="cuda",
                                   dtype=torch.bfloat16)

        def step():
            layer.set_learning_rate(1e-5)
            x.grad = None
            layer.weight.grad = None
            layer(x).backward(dy)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    # The step's wall time without the profiler, against its kernels' sum
    # below: where the wall time is longer, the GPU waits for the host.
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - start) / args.steps * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    print(events.table(sort_by="cuda_time_total", row_limit=20,
                       max_name_column_width=90))
    kernels_ms = sum(e.self_device_time_total for e in events) / 1e3 / \
        args.steps
    print(f"per step: wall {wall_ms:.3f} ms, kernels {kernels_ms:.3f} ms")


if __name__ == "__main__":
    main()
