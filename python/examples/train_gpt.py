"""Trains a small GPT twice from the same initialization, once with bf16
torch.nn.Linear and once with moss_jit.nn.Linear in every projection, and
compares the losses.

    python python/examples/train_gpt.py [--steps 500] [--layers 6] [--dim 1024]

The text is the repository's own Markdown (docs/, README.md), as bytes
(vocabulary 256). Every run sees the same batches; all keep FP32 master
weights under bf16 autocast, with AdamW. MOSS runs once per gradient format
(--grad-formats). Prints the losses every 50 steps, the final losses (mean of
the last 20 steps and a held-out evaluation), the step times, the weight
auto-scaler's counters, and the SNR of the output gradients of every MOSS
Linear quantized two-level in E4M3 and in E5M2 (one batch after training).
"""

import argparse
import copy
import glob
import math
import os
import time

import torch
import torch.nn.functional as F

import moss_jit


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.fc2 = torch.nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, layers, dim, heads, seq, vocab=256):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(dim, heads)
                                          for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2 and name != "pos":
                torch.nn.init.normal_(p, std=0.02)
            if name.endswith(("proj.weight", "fc2.weight")):
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def corpus(root):
    paths = sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"),
                             recursive=True))
    paths.append(os.path.join(root, "README.md"))
    data = b"".join(open(p, "rb").read() for p in paths)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batches(data, steps, batch, seq, generator):
    starts = torch.randint(0, len(data) - seq - 1, (steps, batch),
                           generator=generator)
    for row in starts:
        idx = row[:, None] + torch.arange(seq + 1)
        chunk = data[idx]
        yield chunk[:, :-1], chunk[:, 1:]


def train(model, data, held_out, args, label):
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  betas=(0.9, 0.95), weight_decay=0.1)
    moss_jit.attach_optimizer(optimizer)
    warmup = args.steps // 10
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 *
        (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    generator = torch.Generator().manual_seed(1234)
    losses, nan_steps = [], 0
    torch.cuda.synchronize()
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches(data, args.steps, args.batch,
                                          args.seq, generator)):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        value = loss.item()
        if not math.isfinite(value):
            nan_steps += 1
        losses.append(value)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"{label} step {step:4d} loss {value:.4f}", flush=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        total = 0.0
        for x, y in held_out:
            logits = model(x.cuda())
            total += F.cross_entropy(logits.float().reshape(-1, 256),
                                     y.cuda().reshape(-1)).item()
    model.train()
    return {"final": sum(losses[-20:]) / 20, "eval": total / len(held_out),
            "nan_steps": nan_steps, "ms_per_step": seconds / args.steps * 1e3}


def gradient_snr(model, data, args):
    """SNR (dB) of the output gradients dY of the model's MOSS Linears,
    quantized the way their backward does (two-level along K, per-row
    global), in each FP8 format: the median over the layers."""
    grads = []
    hooks = [m.register_full_backward_hook(
        lambda mod, gin, gout: grads.append(gout[0].detach().reshape(
            -1, gout[0].shape[-1]).float().contiguous()))
        for m in model.modules() if isinstance(m, moss_jit.nn.Linear)]
    x, y = next(batches(data, 1, args.batch, args.seq,
                        torch.Generator().manual_seed(7)))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x.cuda())
    F.cross_entropy(logits.float().reshape(-1, 256),
                    y.cuda().reshape(-1)).backward()
    model.zero_grad(set_to_none=True)
    for h in hooks:
        h.remove()
    result = {}
    for fmt in ("e4m3", "e5m2"):
        snrs = []
        for g in grads:
            q = moss_jit.quantize(g, "moss", format=fmt, global_scope="row")
            err = (q.dequantize() - g.double()).square().sum()
            snrs.append(float(10 * torch.log10(g.double().square().sum() /
                                                err)))
        result[fmt] = sorted(snrs)[len(snrs) // 2]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--grad-formats", default="e5m2,e4m3",
                        help="the MOSS runs' gradient formats")
    args = parser.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    data = corpus(root)
    split = int(len(data) * 0.9)
    train_data, eval_data = data[:split], data[split:]
    held_out = list(batches(eval_data, 8, args.batch, args.seq,
                            torch.Generator().manual_seed(99)))
    print(f"corpus: {len(data)} bytes; {args.layers} layers, d={args.dim}, "
          f"seq {args.seq}, batch {args.batch}, {args.steps} steps")

    torch.manual_seed(0)
    reference = GPT(args.layers, args.dim, args.heads, args.seq).cuda()
    initial = copy.deepcopy(reference)
    results = {"bf16": train(reference, train_data, held_out, args, "bf16")}
    for fmt in args.grad_formats.split(","):
        model = copy.deepcopy(initial)
        moss_jit.convert(model, grad_format=fmt)
        label = f"moss grad {fmt}"
        results[label] = train(model, train_data, held_out, args, label)
        casts = {}
        saturated = events = 0
        for module in model.modules():
            if isinstance(module, moss_jit.nn.Linear):
                for reason, count in module.weight_casts.items():
                    casts[reason] = casts.get(reason, 0) + count
                stats = module.scaler_stats() or {}
                saturated += stats.get("saturated_values", 0)
                events += stats.get("saturation_events", 0)
        print(f"{label}: weight casts by reason {casts}; saturation events "
              f"{events}, saturated values {saturated}")
        print(f"{label}: output-gradient SNR (median over layers, dB): "
              f"{gradient_snr(model, train_data, args)}")
    bf16 = results["bf16"]
    for name, r in results.items():
        print(f"{name}: final loss {r['final']:.4f} (mean of the last 20 "
              f"steps, {r['final'] / bf16['final'] - 1:+.2%} vs bf16), "
              f"held-out {r['eval']:.4f} ({r['eval'] / bf16['eval'] - 1:+.2%})"
              f", NaN steps {r['nan_steps']}, {r['ms_per_step']:.1f} ms/step")


if __name__ == "__main__":
    main()
