"""Fine-tunes all-MiniLM-L6-v2 with AdamW on the CPU and records, after every
optimizer step, the learning rate and the true amax of every linear weight:
the trace that autoscale_study.py replays through the AutoScaler.

The task is the sentence-transformers one: in-batch contrastive loss on pairs
of consecutive sentences (and paragraph halves) of this repository's docs.
AdamW (beta 0.9 / 0.999, eps 1e-8, weight decay 0.01), linear warmup then a
cosine decay to zero, dropout on.

Writes into --out:
  trace.csv      step,lr,<weight>,...  (row 0: the initial amax; row t: the
                 rate of step t and the amax of W_t): moss-jit
                 autoscale-replay's input
  updates.csv    step,<weight>,...: max over elements of |m_hat/(sqrt(v_hat)
                 + eps)|, the Adam step size in units of lr (weight decay
                 left out): the c that the step actually used
  loss.csv       step,loss
  ckpt/step<T>/<weight>.npy  the weights after the steps of --ckpt-every
                 (the step before every multiple of it), for the SNR cost

usage: finetune_autoscale.py --out DIR [--steps 600] [--lr 1e-4] [--batch 8]
"""
import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def linear_weights(bert):
    """(name, parameter) of every nn.Linear weight of the encoder, in layer
    order: q, k, v, attn_out, ffn_up, ffn_down."""
    out = []
    for i, layer in enumerate(bert.encoder.layer):
        att = layer.attention
        for short, module in (("q", att.self.query), ("k", att.self.key),
                              ("v", att.self.value),
                              ("attn_out", att.output.dense),
                              ("ffn_up", layer.intermediate.dense),
                              ("ffn_down", layer.output.dense)):
            out.append((f"L{i}.{short}", module.weight))
    return out


def cosine_lr(step, total, peak, warmup):
    """The rate of step `step` (1-based): linear warmup, then cosine to 0."""
    if step <= warmup:
        return peak * step / warmup
    progress = (step - warmup) / (total - warmup)
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=48)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--ckpt-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(args.seed)
    model, bert, tokenizer = common.load_model(args.threads)
    model.train()
    weights = linear_weights(bert)
    names = [n for n, _ in weights]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=args.weight_decay)
    pairs = common.pairs(common.paragraphs())

    def amaxes():
        return [float(w.detach().abs().max()) for _, w in weights]

    trace = open(args.out / "trace.csv", "w", newline="")
    updates = open(args.out / "updates.csv", "w", newline="")
    losses = open(args.out / "loss.csv", "w", newline="")
    trace_w, updates_w, loss_w = (csv.writer(f) for f in (trace, updates,
                                                          losses))
    trace_w.writerow(["step", "lr"] + names)
    # float32 amax values, written with repr: exact round trip.
    trace_w.writerow([0, 0.0] + [repr(a) for a in amaxes()])
    updates_w.writerow(["step"] + names)
    loss_w.writerow(["step", "loss"])

    order = []
    start = time.time()
    for step in range(1, args.steps + 1):
        if len(order) < args.batch:
            order += common.shuffled(range(len(pairs)), args.seed + step)
        batch = [pairs[i] for i in order[:args.batch]]
        del order[:args.batch]

        lr = cosine_lr(step, args.steps, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        before = [w.detach().clone() for _, w in weights]
        optimizer.zero_grad()
        loss, _ = common.contrastive_loss(model, tokenizer, batch,
                                          args.max_len)
        loss.backward()
        optimizer.step()

        # W_t = W_{t-1} (1 - lr wd) - lr u: the Adam step u in units of lr.
        steps_u = []
        with torch.no_grad():
            for (_, w), w0 in zip(weights, before):
                u = (w0 * (1 - lr * args.weight_decay) - w) / lr if lr > 0 \
                    else torch.zeros(1)
                steps_u.append(float(u.abs().max()))
        trace_w.writerow([step, repr(lr)] + [repr(a) for a in amaxes()])
        updates_w.writerow([step] + [f"{u:.6g}" for u in steps_u])
        loss_w.writerow([step, f"{loss.item():.6f}"])
        if (step + 1) % args.ckpt_every == 0 or step == args.steps:
            ckpt = args.out / "ckpt" / f"step{step}"
            ckpt.mkdir(parents=True, exist_ok=True)
            for name, w in weights:
                np.save(ckpt / f"{name}.npy",
                        np.ascontiguousarray(w.detach().numpy(),
                                             dtype=np.float32))
        if step % 20 == 0 or step == 1:
            elapsed = time.time() - start
            print(f"step {step}/{args.steps} lr {lr:.3g} loss "
                  f"{loss.item():.4f} ({elapsed / step:.2f} s/step)",
                  flush=True)
    for f in (trace, updates, losses):
        f.close()


if __name__ == "__main__":
    main()
