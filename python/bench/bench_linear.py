"""One Linear's forward + backward step time at LLaMA-7B MLP shapes:
moss_jit.nn.Linear (eager and torch.compile) against bf16 torch.nn.Linear
and, where torchao is installed, its Float8Linear (tensorwise and rowwise,
compiled, and tensorwise eager), all timed in this process.

    python python/bench/bench_linear.py [--shapes T,IN,OUT ...] [--iters N]
        [--only TEXT ...]

Each step recasts the weight as training does (the MOSS Linear through its
auto-scaler with a learning rate, as after an optimizer step). Prints one
Markdown table: median step ms over rounds, and bf16 / variant.
"""

import argparse
import copy
import statistics
import sys

import os

# Time the full kernels from the first call, not their quick-compile tier.
os.environ.setdefault("MOSS_TIERED_COMPILE", "0")

import torch  # noqa: E402

import moss_jit  # noqa: E402

SHAPES = [(8192, 4096, 11008), (8192, 11008, 4096), (16384, 4096, 11008),
          (16384, 11008, 4096)]


def time_steps(step, iters, rounds):
    """Median over `rounds` of the mean step time of `iters` steps (ms)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def make_step(layer, x, dy, before=None):
    def step():
        if before is not None:
            before()
        x.grad = None
        layer.weight.grad = None
        y = layer(x)
        y.backward(dy)
    return step


def variants(tokens, fin, fout):
    torch.manual_seed(0)
    base = torch.nn.Linear(fin, fout, bias=False, device="cuda",
                           dtype=torch.bfloat16)
    result = {"bf16 nn.Linear": (base, None)}

    moss = moss_jit.nn.Linear.from_linear(copy.deepcopy(base))

    def recast():
        # As after an optimizer step: the weight changed, the hook passed
        # the learning rate.
        moss.set_learning_rate(1e-5)

    result["moss eager"] = (moss, recast)
    result["moss compiled"] = (torch.compile(moss), recast)
    # One quantization per layout, against the default's one
    # quantize_both_layouts call for X's and for dY's.
    apart = moss_jit.nn.Linear.from_linear(copy.deepcopy(base),
                                           both_layouts=False)

    def recast_apart():
        apart.set_learning_rate(1e-5)

    result["moss eager, layouts apart"] = (apart, recast_apart)
    try:
        from torchao.float8 import (Float8LinearConfig,
                                    convert_to_float8_training)
    except ImportError as error:
        print(f"torchao not available ({error}); its rows are left out",
              file=sys.stderr)
        return result
    for name, recipe, compiled in (("torchao tensorwise compiled",
                                    "tensorwise", True),
                                   ("torchao rowwise compiled", "rowwise",
                                    True),
                                   ("torchao tensorwise eager", "tensorwise",
                                    False)):
        model = torch.nn.Sequential(copy.deepcopy(base))
        config = Float8LinearConfig.from_recipe_name(recipe)
        convert_to_float8_training(model, config=config)
        layer = model[0]
        result[name] = (torch.compile(layer) if compiled else layer, None)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="*", default=None,
                        help="T,IN,OUT triples")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="*", default=None,
                        help="time only the variants whose name contains "
                        "one of these (bf16 nn.Linear is always timed)")
    args = parser.parse_args()
    shapes = SHAPES if not args.shapes else [
        tuple(int(v) for v in s.split(",")) for s in args.shapes]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"moss_jit {moss_jit.__version__}")
    rows = []
    for tokens, fin, fout in shapes:
        x = torch.randn(tokens, fin, device="cuda", dtype=torch.bfloat16,
                        requires_grad=True)
        dy = torch.randn(tokens, fout, device="cuda", dtype=torch.bfloat16)
        measured = {}
        for name, (layer, before) in variants(tokens, fin, fout).items():
            if args.only and name != "bf16 nn.Linear" and not any(
                    text in name for text in args.only):
                continue
            # One round-robin pass per variant keeps clocks comparable.
            measured[name] = time_steps(make_step(layer, x, dy, before),
                                        args.iters, args.rounds)
            print(f"  {tokens}, {fin} -> {fout}: {name} "
                  f"{measured[name]:.3f} ms", file=sys.stderr, flush=True)
        rows.append(((tokens, fin, fout), measured))
    names = list(rows[0][1])
    print("| tokens, in -> out | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for (tokens, fin, fout), measured in rows:
        bf16 = measured["bf16 nn.Linear"]
        cells = [f"{measured[n]:.2f} ms ({bf16 / measured[n]:.2f}x)"
                 for n in names]
        print(f"| {tokens}, {fin} -> {fout} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
