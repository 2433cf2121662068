"""Trains a LLaMA-style decoder from the same initial weights on the same
batches in bf16 and in MOSS FP8 (moss_jit.convert), and compares the tokens
per second, the peak memory and the losses.

    # a Hopper GPU: every run that applies, eager
    python python/examples/train_llama.py --size 150m --steps 1000
    # eager and torch.compile
    python python/examples/train_llama.py --size 1b --steps 300 --compile both
    # the CPU (the host reference GEMMs: slow; the tiny model only)
    python python/examples/train_llama.py --size tiny --steps 4 --device cpu

The model: RMSNorm, pre-norm residual blocks, grouped-query attention with
rotary embeddings through scaled_dot_product_attention, a SwiGLU MLP, untied
embeddings and LM head, no biases. The text is the .py files of the Python
standard library (sysconfig's "stdlib" path, site-packages left out), read
in sorted order up to --corpus-bytes, as bytes (vocabulary 256); the last 5%
is held out. Every run draws the same batches from --seed. Needs torch 2.5
or later (enable_gqa).

Runs (--runs; all that apply but the three studies by default):
  bf16                the model as it is, under bf16 autocast
  moss                moss_jit.convert(model), E4M3 gradients
  moss-e5m2           moss_jit.convert(model, grad_format="e5m2")
  moss-fast-wgrad     moss_jit.convert(model, wgrad_promote_k=0): the
                      weight gradient in the tensor cores' accumulation
  moss-promoted       moss_jit.convert(model, dgrad_promote_k=128): the
                      input gradient promoted every 128 too (as torchao's)
  moss-exact          moss_jit.convert(model, fold="none"): every GEMM
                      promotes every 32 (the exact MOSS product, slower)
  torchao-tensorwise  torchao.float8, recipe "tensorwise" (CUDA, torchao)
  torchao-rowwise     torchao.float8, recipe "rowwise" (CUDA, torchao)
The FP8 runs convert the Linears of the blocks; the embeddings and the LM
head stay in bf16. Every run keeps FP32 master weights, bf16 autocast for
the activations (on the CPU too) and AdamW (linear warmup, cosine decay,
weight decay 0.1 on the matrices, gradients clipped to norm 1.0). A step
whose loss or gradient norm is not finite is skipped and counted.

Prints a line every --log-every steps and a table at the end (with each
run's first step in seconds: the JIT compiles and torch.compile's tracing
that no cache held yet); writes results.json (the table, the configuration
and every step's loss) and loss.svg (the training-loss curves) into
--out-dir.
"""

import argparse
import copy
import gc
import json
import math
import os
import platform
import sys
import sysconfig
import time
from xml.sax.saxutils import escape

import torch
import torch.nn.functional as F

import moss_jit

RUNS = ("bf16", "moss", "moss-e5m2", "moss-fast-wgrad", "moss-promoted",
        "moss-exact", "torchao-tensorwise", "torchao-rowwise")
# Studies of the GEMMs' accumulation, asked for by name only.
STUDY_RUNS = ("moss-fast-wgrad", "moss-promoted", "moss-exact")
DEFAULT_RUNS = tuple(r for r in RUNS if r not in STUDY_RUNS)

# Every Linear's in and out features are multiples of 32 (the MOSS scaling
# block). The names follow the block shapes of the models of those sizes;
# the byte vocabulary makes the embeddings small, so the parameter count
# printed at the start is below the name.
SIZES = {
    "tiny": dict(layers=2, dim=128, heads=4, kv_heads=2, ffn=352, seq=64,
                 batch=8, lr=3e-3),
    "150m": dict(layers=12, dim=768, heads=12, kv_heads=4, ffn=2048,
                 seq=1024, batch=16, lr=1e-3),
    "1b": dict(layers=16, dim=2048, heads=16, kv_heads=4, ffn=5632,
               seq=2048, batch=8, lr=4e-4),
}
VOCAB = 256


# ---------------------------------------------------------------- the model

def rope_tables(seq, head_dim, theta=10000.0):
    """cos and sin [seq, head_dim] of the rotary embedding (half-split
    layout: the pairs are (i, i + head_dim / 2))."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() /
                               head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x [batch, heads, seq, head_dim] rotated, in x's dtype."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    t = x.shape[-2]
    return x * cos[:t].to(x.dtype) + rotated * sin[:t].to(x.dtype)


class Attention(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = dim // heads
        self.wq = torch.nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = torch.nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(torch.nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim, ffn):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, ffn, bias=False)
        self.w3 = torch.nn.Linear(dim, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.attention_norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.feed_forward = FeedForward(dim, ffn)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(torch.nn.Module):
    def __init__(self, layers, dim, heads, kv_heads, ffn, seq, vocab=VOCAB):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(
            Block(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(seq, dim // heads)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # The projections back into the residual stream start
                # smaller, so the stream's variance does not grow with depth.
                std = 0.02 / math.sqrt(2 * layers) \
                    if name.endswith(("wo.weight", "w2.weight")) else 0.02
                torch.nn.init.normal_(p, std=std)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))


def build_model(size, seed):
    torch.manual_seed(seed)
    shape = {k: v for k, v in SIZES[size].items() if k not in ("batch", "lr")}
    return Llama(**shape)


# ----------------------------------------------------------------- the data

def stdlib_corpus(limit):
    """The bytes of the standard library's .py files, in sorted path order,
    at most `limit` of them, as a uint8 tensor, and the number of files."""
    root = sysconfig.get_paths()["stdlib"]
    chunks, total, files = [], 0, 0
    for dirpath, dirnames, filenames in os.walk(root):
        # Sorted in place, so that os.walk descends in a fixed order.
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "dist-packages",
                                          "__pycache__"))
        for name in sorted(filenames):
            if not name.endswith(".py") or total >= limit:
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read(limit - total)
            chunks.append(data)
            total += len(data)
            files += 1
        if total >= limit:
            break
    data = b"".join(chunks)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8), files


def batch_starts(length, count, batch, seq, seed):
    """[count, batch] window starts, drawn from `seed` alone."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, length - seq - 1, (count, batch),
                         generator=generator)


def make_batch(data, starts, seq, device):
    """Inputs and targets [batch, seq] (int64) of the windows at `starts`."""
    chunk = data[starts[:, None] + torch.arange(seq + 1)].long()
    return (chunk[:, :-1].to(device, non_blocking=True),
            chunk[:, 1:].to(device, non_blocking=True))


# ----------------------------------------------------------------- the runs

def torchao_float8():
    """torchao.float8's (convert_to_float8_training, Float8LinearConfig),
    or the reason they are missing."""
    try:
        from torchao.float8 import Float8LinearConfig, \
            convert_to_float8_training
    except ImportError as error:
        return None, f"torchao.float8 does not import ({error})"
    return (convert_to_float8_training, Float8LinearConfig), None


def skip_reason(run, device):
    """Why `run` cannot run here, or None."""
    if run.startswith("torchao-"):
        if device.type != "cuda":
            return "torchao's float8 training needs a CUDA GPU"
        return torchao_float8()[1]
    return None


def keep_in_bf16(name):
    """The Linears the FP8 runs leave alone: the LM head (with the
    embeddings, which are not Linears)."""
    return name == "lm_head"


def convert_for_run(model, run):
    """Swaps the model's Linears for the run's FP8 ones, in place."""
    if run.startswith("moss"):
        options = {"moss-e5m2": dict(grad_format="e5m2"),
                   "moss-fast-wgrad": dict(wgrad_promote_k=0),
                   "moss-promoted": dict(dgrad_promote_k=128),
                   "moss-exact": dict(fold="none")}.get(run, {})
        moss_jit.convert(model, filter_fn=lambda n, m: not keep_in_bf16(n),
                         verbose=False, **options)
        # convert skips the layers it cannot take (a non-Hopper GPU among
        # them) instead of failing: a run with any of them left would time
        # bf16 under the MOSS label.
        refused = [(n, r) for n, r in model.moss_report["skipped"]
                   if not keep_in_bf16(n)]
        if refused:
            raise RuntimeError("moss_jit.convert did not convert " +
                               "; ".join(f"{n}: {r}" for n, r in refused))
    elif run.startswith("torchao-"):
        (convert, config_class), _ = torchao_float8()
        recipe = run[len("torchao-"):]
        convert(model, config=config_class.from_recipe_name(recipe),
                module_filter_fn=lambda m, fqn: not keep_in_bf16(fqn))


def make_optimizer(model, lr, steps, warmup):
    """AdamW with weight decay on the matrices, and its schedule: linear
    warmup over `warmup` steps, then cosine decay to a tenth of `lr`.
    moss_jit.optim.AdamW (torch's AdamW that updates and casts each MOSS
    Linear's weight in one kernel) where the model has MOSS Linears."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    # The fused kernel on CUDA, as torchtitan runs AdamW by default: one
    # launch per parameter group instead of foreach's chain of kernels. It
    # leaves the parameters' version counters alone; the step hook of
    # moss_jit.attach_optimizer (train) is what tells the MOSS Linears
    # moss_jit.optim.AdamW does not step to recast their weights.
    fused = all(p.is_cuda for p in matrices + vectors)
    has_moss = any(isinstance(m, (moss_jit.nn.Linear,
                                  moss_jit.nn.GroupedLinear))
                   for m in model.modules())
    adamw = moss_jit.optim.AdamW if has_moss else torch.optim.AdamW
    optimizer = adamw(
        [{"params": matrices, "weight_decay": 0.1},
         {"params": vectors, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, schedule


def autocast(device):
    return torch.autocast(device.type, dtype=torch.bfloat16)


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def held_out_loss(model, data, starts, seq, device):
    """The mean loss over the fixed validation batches."""
    model.eval()
    total = 0.0
    with torch.no_grad(), autocast(device):
        for row in starts:
            x, y = make_batch(data, row, seq, device)
            total += loss_of(model, x, y).item()
    model.train()
    return total / len(starts)


def train(label, model, data, args, device):
    """Trains `model` for args.steps steps; returns its figures."""
    step_model = torch.compile(model) if label.endswith("+compile") \
        else model
    optimizer, schedule = make_optimizer(model, args.lr, args.steps,
                                         args.lr_warmup)
    moss_jit.attach_optimizer(optimizer)
    seq = args.seq
    tokens_per_step = args.batch * seq
    timed_from = min(args.warmup_steps, args.steps - 1)
    losses, bad_steps = [], 0
    synchronize(device)
    last_time, last_step = time.perf_counter(), 0
    start = first_start = last_time
    first_step_s = None
    for step, row in enumerate(data["train_starts"]):
        if step == timed_from:
            synchronize(device)
            start = time.perf_counter()
        x, y = make_batch(data["train"], row, seq, device)
        with autocast(device):
            loss = loss_of(step_model, x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # One host synchronization per step, in every run alike: the skip
        # decision and the loss curve need the values.
        finite = torch.isfinite(loss) & torch.isfinite(norm)
        value, finite = torch.stack((loss.detach().float(),
                                     finite.float())).tolist()
        if finite:
            optimizer.step()
        else:
            bad_steps += 1
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(value)
        if step == 0:
            # The first step pays for the JIT's compiles (and torch.compile's
            # tracing) where no cache holds them yet.
            synchronize(device)
            first_step_s = time.perf_counter() - first_start
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            now = time.perf_counter()
            rate = (step + 1 - last_step) * tokens_per_step / (now - last_time)
            print(f"{label:>26} step {step:5d}  loss {value:.4f}  "
                  f"{rate:,.0f} tokens/s", flush=True)
            last_time, last_step = now, step + 1
    synchronize(device)
    seconds = time.perf_counter() - start
    timed = args.steps - timed_from
    tail = [v for v in losses[-max(1, args.steps // 10):] if math.isfinite(v)]
    held_out = held_out_loss(model, data["val"], data["val_starts"], seq,
                             device)
    # Each run's result as it ends, before the table: a long comparison
    # that is cut short keeps the runs it finished.
    print(f"{label:>26} done: {timed * tokens_per_step / seconds:,.0f} "
          f"tokens/s, held-out loss {held_out:.4f}, {bad_steps} bad steps",
          flush=True)
    return {
        "tokens_per_s": timed * tokens_per_step / seconds,
        "timed_steps": timed,
        "first_step_s": first_step_s,
        "peak_memory_bytes": (torch.cuda.max_memory_allocated(device)
                              if device.type == "cuda" else None),
        "initial_loss": losses[0],
        "final_train_loss": sum(tail) / len(tail) if tail else math.nan,
        "held_out_loss": held_out,
        "nonfinite_steps": bad_steps,
        "losses": losses,
    }


def run_one(label, initial, data, args, device):
    """One run from a copy of the initial model; its figures, or its
    error."""
    run = label.split("+")[0]
    model = None
    try:
        model = copy.deepcopy(initial).to(device)
        convert_for_run(model, run)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        return train(label, model, data, args, device)
    except Exception as error:  # noqa: BLE001 - reported, then the next run
        print(f"{label}: failed: {type(error).__name__}: {error}",
              file=sys.stderr, flush=True)
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


# -------------------------------------------------------------- the reports

def add_ratios(results):
    """Each run's tokens/s and held-out loss over those of the bf16 run of
    the same compile mode."""
    for label, r in results.items():
        base = results.get("bf16+compile" if label.endswith("+compile")
                           else "bf16")
        ok = base is not None and "error" not in base and "error" not in r
        r["tokens_per_s_vs_bf16"] = \
            r["tokens_per_s"] / base["tokens_per_s"] if ok else None
        r["held_out_vs_bf16"] = \
            r["held_out_loss"] / base["held_out_loss"] if ok else None


def table(results):
    header = ("run", "tokens/s", "x bf16", "peak GiB", "train loss",
              "held-out", "x bf16", "bad steps", "first step s")
    rows = [header]
    for label, r in results.items():
        if "error" in r:
            rows.append((label, "failed") + ("",) * (len(header) - 2))
            continue
        peak = r["peak_memory_bytes"]

        def ratio(v):
            return f"{v:.3f}" if v is not None else "n/a"

        rows.append((label, f"{r['tokens_per_s']:,.0f}",
                     ratio(r["tokens_per_s_vs_bf16"]),
                     f"{peak / 2**30:.2f}" if peak is not None else "n/a",
                     f"{r['final_train_loss']:.4f}",
                     f"{r['held_out_loss']:.4f}",
                     ratio(r["held_out_vs_bf16"]),
                     str(r["nonfinite_steps"]), f"{r['first_step_s']:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def json_safe(value):
    """`value` with non-finite floats as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def curve_points(losses, most=400):
    """(step, loss) of the curve: the means of consecutive groups of steps,
    at most `most` points; non-finite losses are left out."""
    group = max(1, math.ceil(len(losses) / most))
    points = []
    for first in range(0, len(losses), group):
        values = [v for v in losses[first:first + group] if math.isfinite(v)]
        if values:
            points.append((first + (len(values) - 1) / 2,
                           sum(values) / len(values)))
    return points


def nice_ticks(low, high, count=5):
    """About `count` round tick values covering [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if raw <= m * step)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def svg_plot(curves, title):
    """An SVG line chart: one polyline per (label, points) in `curves`, with
    axes, their labels and a legend."""
    width, height = 760, 460
    left, right, top, bottom = 70, 200, 40, 60
    xs = [x for _, pts in curves for x, _ in pts] or [0.0]
    ys = [y for _, pts in curves for _, y in pts] or [0.0]
    x0, x1 = 0.0, max(max(xs), 1.0)
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x):
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y):
        return top + (y1 - y) / (y1 - y0) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left + plot_w / 2}" y="22" text-anchor="middle" '
           f'font-size="14">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
           'fill="none" stroke="black"/>']
    for t in nice_ticks(x0, x1):
        out.append(f'<line x1="{px(t):.1f}" y1="{top + plot_h}" '
                   f'x2="{px(t):.1f}" y2="{top + plot_h + 5}" stroke="black"/>'
                   f'<text x="{px(t):.1f}" y="{top + plot_h + 18}" '
                   f'text-anchor="middle">{t:g}</text>')
    for t in nice_ticks(y0, y1):
        out.append(f'<line x1="{left - 5}" y1="{py(t):.1f}" x2="{left}" '
                   f'y2="{py(t):.1f}" stroke="black"/>'
                   f'<text x="{left - 8}" y="{py(t) + 4:.1f}" '
                   f'text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 15}" '
               'text-anchor="middle">step</text>')
    out.append(f'<text x="18" y="{top + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {top + plot_h / 2})">'
               'training loss (nats per byte)</text>')
    for i, (label, pts) in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{color}" '
                   f'stroke-width="1.5" points="{coords}">'
                   f'<title>{escape(label)}</title></polyline>')
        ly = top + 10 + 20 * i
        out.append(f'<line x1="{left + plot_w + 15}" y1="{ly}" '
                   f'x2="{left + plot_w + 40}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="3"/><text x="{left + plot_w + 46}" '
                   f'y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------- main

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=SIZES, default="150m")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=None,
                        help="default: all that apply")
    parser.add_argument("--compile", choices=("off", "on", "both"),
                        default="off",
                        help="torch.compile the model: off (eager), on, or "
                        "both (each run twice)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup-steps", type=int, default=10,
                        help="steps left out of the tokens/s timing")
    parser.add_argument("--batch", type=int, default=None,
                        help="sequences per step (default: the size's)")
    parser.add_argument("--seq", type=int, default=None,
                        help="tokens per sequence (default: the size's)")
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate (default: the size's)")
    parser.add_argument("--lr-warmup", type=int, default=None,
                        help="learning-rate warmup steps (default: 5%% of "
                        "--steps, at least 10 and at most 100)")
    parser.add_argument("--eval-batches", type=int, default=10)
    parser.add_argument("--corpus-bytes", type=int, default=32 << 20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--device", default=None,
                        help="cuda (the default where there is one) or cpu")
    parser.add_argument("--out-dir", default="train-llama-out")
    args = parser.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available()
                                  else "cpu")
    if torch.device(args.device).type == "cpu" and args.size == "1b":
        parser.error("--size 1b needs a GPU: on the CPU the MOSS GEMMs run "
                     "the FP64 host reference; use --size tiny")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    size = SIZES[args.size]
    args.batch = args.batch or size["batch"]
    args.lr = args.lr or size["lr"]
    if args.seq is None:
        args.seq = size["seq"]
    elif not 1 <= args.seq <= size["seq"]:
        parser.error(f"--seq {args.seq} is not in 1..{size['seq']} (the "
                     "model's rotary table)")
    if args.lr_warmup is None:
        # At least 10: AdamW's first steps at the peak rate throw a fresh
        # model's loss far up (to 13.5 at ~1B), and a short comparison would
        # measure that jump rather than the training.
        args.lr_warmup = max(1, min(args.steps, max(10, min(100,
                                                             args.steps // 20))))
    args.log_every = max(1, args.log_every)
    return args


def run_labels(args, device):
    """The labels of the runs to make, after printing the skipped ones."""
    labels = []
    for run in args.runs or DEFAULT_RUNS:
        reason = skip_reason(run, device)
        if reason:
            print(f"{run}: skipped: {reason}")
            continue
        modes = {"off": [""], "on": ["+compile"],
                 "both": ["", "+compile"]}[args.compile]
        labels += [run + mode for mode in modes]
    return labels


def load_data(args):
    data, files = stdlib_corpus(args.corpus_bytes)
    split = int(len(data) * 0.95)
    train_data, val_data = data[:split], data[split:]
    if len(val_data) <= args.seq + 1:
        raise SystemExit(f"the held-out split has {len(val_data)} bytes, "
                         f"fewer than a sequence: raise --corpus-bytes")
    return {
        "train": train_data, "val": val_data, "files": files,
        "train_starts": batch_starts(len(train_data), args.steps, args.batch,
                                     args.seq, args.seed),
        "val_starts": batch_starts(len(val_data), args.eval_batches,
                                   args.batch, args.seq, args.seed + 1),
    }


def main(argv=None):
    """Runs the comparison; returns the results dict written to
    results.json."""
    args = parse_args(argv)
    device = torch.device(args.device)
    data = load_data(args)
    initial = build_model(args.size, args.seed)
    params = sum(p.numel() for p in initial.parameters())
    print(f"corpus: {len(data['train']) + len(data['val']):,} bytes of "
          f"{data['files']} files (Python {platform.python_version()} "
          f"stdlib), {len(data['val']):,} held out")
    print(f"model {args.size}: {params / 1e6:.1f}M parameters, "
          f"{SIZES[args.size]}; batch {args.batch} x {args.seq} tokens, "
          f"{args.steps} steps, lr {args.lr:g}, device {device}")

    results = {}
    for label in run_labels(args, device):
        results[label] = run_one(label, initial, data, args, device)
    add_ratios(results)
    print()
    print(table(results))

    os.makedirs(args.out_dir, exist_ok=True)
    report = {
        "config": {
            "size": args.size, "model": SIZES[args.size],
            "parameters": params, "batch": args.batch, "seq": args.seq,
            "steps": args.steps, "warmup_steps": args.warmup_steps,
            "lr": args.lr, "lr_warmup": args.lr_warmup, "seed": args.seed,
            "eval_batches": args.eval_batches, "device": str(device),
            "device_name": (torch.cuda.get_device_name(device)
                            if device.type == "cuda" else platform.machine()),
            "corpus_bytes": len(data["train"]) + len(data["val"]),
            "python": platform.python_version(), "torch": torch.__version__,
            "moss_jit": moss_jit.__version__,
            "kept_in_bf16": ["tok_embeddings", "lm_head"],
        },
        "runs": results,
    }
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump(json_safe(report), f, indent=1)
    curves = [(label, curve_points(r["losses"]))
              for label, r in results.items() if "losses" in r]
    with open(os.path.join(args.out_dir, "loss.svg"), "w") as f:
        f.write(svg_plot(curves, f"LLaMA {args.size}, batch {args.batch} x "
                         f"{args.seq}, {device.type}"))
    print(f"wrote {args.out_dir}/results.json and {args.out_dir}/loss.svg")
    if any("error" in r for r in results.values()):
        raise SystemExit(1)
    return report


if __name__ == "__main__":
    main()
