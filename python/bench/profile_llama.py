"""Where a LLaMA training step's GPU time goes, by kind of kernel, for each
run of python/examples/train_llama.py (same model, batches and optimizer):
torch.profiler's CUDA kernels over --steps steps after --warmup steps,
summed into categories (MOSS GEMMs, MOSS quantizers, other GEMMs,
attention, element-wise, reductions and norms, the optimizer, copies),
then the --top kernels of each run.

    python python/bench/profile_llama.py [--size 1b] [--runs bf16 moss]
        [--steps 3] [--compile] [--both-layouts]
"""

import argparse
import collections
import copy
import os
import sys

os.environ.setdefault("MOSS_TIERED_COMPILE", "0")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))
import train_llama  # noqa: E402

import moss_jit  # noqa: E402

# First match wins: (category, substrings of the kernel's name).
CATEGORIES = (
    ("moss quantize", ("moss_quantize", "moss_fold")),
    ("moss gemm", ("moss_gemm",)),
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("other gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "sm90_")),
    ("optimizer", ("multi_tensor", "foreach", "adam")),
    ("reduction / norm", ("reduce", "norm", "softmax", "cross_entropy",
                          "nll_loss")),
    ("copy / cast", ("copy", "memcpy", "memset", "cat", "fill")),
    ("element-wise", ("elementwise", "vectorized", "unrolled")),
)


def category(name):
    lowered = name.lower()
    for label, needles in CATEGORIES:
        if any(n in lowered for n in needles):
            return label
    return "other"


def profile_run(run, args, initial, data, device):
    """The kernels' CUDA time (us per step) of `run`, by name."""
    model = copy.deepcopy(initial).to(device)
    if run.startswith("moss") and args.both_layouts:
        moss_jit.convert(
            model, filter_fn=lambda n, m: not train_llama.keep_in_bf16(n),
            verbose=False, both_layouts=True,
            grad_format="e5m2" if run == "moss-e5m2" else "e4m3")
    else:
        train_llama.convert_for_run(model, run)
    step_model = torch.compile(model) if args.compile else model
    optimizer, _ = train_llama.make_optimizer(model, 1e-4, 100, 1)
    moss_jit.attach_optimizer(optimizer)
    starts = data["train_starts"]

    def step(i):
        x, y = train_llama.make_batch(data["train"], starts[i], args.seq,
                                      device)
        with train_llama.autocast(device):
            loss = train_llama.loss_of(step_model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for i in range(args.steps):
            step(args.warmup + i)
        end.record()
        torch.cuda.synchronize(device)
    kernels = collections.Counter()
    for event in prof.key_averages():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.key] += event.self_device_time_total / args.steps
    return start.elapsed_time(end) * 1e3 / args.steps, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=train_llama.SIZES, default="1b")
    parser.add_argument("--runs", nargs="+", default=["bf16", "moss"],
                        choices=train_llama.RUNS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--both-layouts", action="store_true",
                        help="MOSS Linears with both_layouts=True")
    args = parser.parse_args()
    device = torch.device("cuda")
    size = train_llama.SIZES[args.size]
    args.batch, args.seq = size["batch"], size["seq"]
    data, _ = train_llama.stdlib_corpus(8 << 20)
    data = {"train": data, "train_starts": train_llama.batch_starts(
        len(data), args.warmup + args.steps, args.batch, args.seq, 0)}
    initial = train_llama.build_model(args.size, 0)

    results = {}
    for run in args.runs:
        results[run] = profile_run(run, args, initial, data, device)
    labels = [label for label, _ in CATEGORIES] + ["other"]
    print(f"{args.size}, batch {args.batch} x {args.seq}, "
          f"{'compiled' if args.compile else 'eager'}"
          f"{', both_layouts' if args.both_layouts else ''}; us per step")
    print(f"{'category':<18}" + "".join(f"{r:>14}" for r in results))
    sums = {r: collections.Counter() for r in results}
    for r, (_, kernels) in results.items():
        for name, us in kernels.items():
            sums[r][category(name)] += us
    for label in labels:
        print(f"{label:<18}" + "".join(f"{sums[r][label]:>14,.0f}"
                                       for r in results))
    print(f"{'kernels':<18}" + "".join(
        f"{sum(sums[r].values()):>14,.0f}" for r in results))
    print(f"{'step (events)':<18}" + "".join(
        f"{results[r][0]:>14,.0f}" for r in results))
    for r, (_, kernels) in results.items():
        print(f"\n{r}: top {args.top} kernels, us per step")
        for name, us in kernels.most_common(args.top):
            print(f"{us:>10,.0f}  {category(name):<16}  {name[:110]}")


if __name__ == "__main__":
    main()
