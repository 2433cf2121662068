"""Captures the GEMM inputs of a real transformer as .npy files.

Runs all-MiniLM-L6-v2 (6 BERT layers, hidden 384, FFN 1536) on the CPU over
paragraphs of this repository's documentation, forward and backward (the
contrastive loss of the fine-tune), and saves, per layer L:

  L{L}.qkv_in       input of the Q/K/V projections           [tokens, 384]
  L{L}.attn_out_in  input of the attention output projection [tokens, 384]
  L{L}.ffn_up_in    input of the FFN up projection            [tokens, 384]
  L{L}.ffn_down_in  FFN intermediate after GELU               [tokens, 1536]
  L{L}.ln1_in       input of the attention LayerNorm          [tokens, 384]
  L{L}.ln2_in       input of the FFN LayerNorm                [tokens, 384]
  L{L}.grad_<proj>  gradient dY at the output of each projection
                    (qkv = query, attn_out, ffn_up, ffn_down)

Rows are the real (non-padding) tokens of the anchors, trimmed to a multiple
of 128 so that transposed (dW = dY^T X) quantization works too. Files are
float32, C order, [tokens, K]: what `moss-jit snr --in` reads.

usage: capture_activations.py --out DIR [--sequences 64] [--max-len 128]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(args.seed)
    model, bert, tokenizer = common.load_model()
    model.eval()  # no dropout: the activations of inference / a clean step
    pairs = common.shuffled(common.pairs(common.paragraphs()),
                            args.seed)[:args.sequences]

    captured = {}  # name -> list of [batch, seq, K] anchor tensors
    hooks = []
    state = {"anchor": False}

    def save(name, tensor):
        if state["anchor"]:
            captured.setdefault(name, []).append(
                tensor.detach().float().clone())

    def save_grad(name):
        # Tag at forward time: the gradient of this very output arrives
        # later, and autograd's order between anchors and positives is not
        # ours to rely on.
        def hook(module, inputs, output):
            if state["anchor"]:
                output.register_hook(lambda g: captured.setdefault(
                    name, []).append(g.detach().float().clone()))
        return hook

    for i, layer in enumerate(bert.encoder.layer):
        att, inter, out = layer.attention, layer.intermediate, layer.output
        pre = {
            f"L{i}.qkv_in": att.self.query,
            f"L{i}.attn_out_in": att.output.dense,
            f"L{i}.ffn_up_in": inter.dense,
            f"L{i}.ffn_down_in": out.dense,
            f"L{i}.ln1_in": att.output.LayerNorm,
            f"L{i}.ln2_in": out.LayerNorm,
        }
        for name, module in pre.items():
            hooks.append(module.register_forward_pre_hook(
                lambda m, inputs, name=name: save(name, inputs[0])))
        grads = {
            f"L{i}.grad_qkv": att.self.query,
            f"L{i}.grad_attn_out": att.output.dense,
            f"L{i}.grad_ffn_up": inter.dense,
            f"L{i}.grad_ffn_down": out.dense,
        }
        for name, module in grads.items():
            hooks.append(module.register_forward_hook(save_grad(name)))

    # Each batch embeds its anchors, then its positives (common.
    # contrastive_loss); only the anchors are kept. The mean loss over a
    # batch of 16 pairs gives the gradients of one fine-tuning step.
    batch = 16
    masks = []
    calls = {"n": 0}
    real_bert_forward = bert.forward

    def tagged_forward(*a, **k):
        state["anchor"] = calls["n"] % 2 == 0
        calls["n"] += 1
        return real_bert_forward(*a, **k)

    bert.forward = tagged_forward
    for start in range(0, len(pairs), batch):
        chunk = pairs[start:start + batch]
        model.zero_grad()
        loss, mask = common.contrastive_loss(model, tokenizer, chunk,
                                             args.max_len)
        state["anchor"] = False
        loss.backward()
        masks.append(mask)
        print(f"batch {start // batch}: loss {loss.item():.4f}", flush=True)
    bert.forward = real_bert_forward

    for h in hooks:
        h.remove()

    for name, tensors in sorted(captured.items()):
        assert len(tensors) == len(masks), name
        rows = []
        for t, mask in zip(tensors, masks):
            assert t.shape[:2] == mask.shape, (name, t.shape, mask.shape)
            m = mask.bool()
            rows.append(t[:, :m.shape[1]][m].numpy())
        x = np.concatenate(rows, axis=0)
        x = x[: (x.shape[0] // 128) * 128]
        np.save(args.out / f"{name}.npy", np.ascontiguousarray(x, dtype=np.float32))
        print(f"{name}: {x.shape}, amax {np.abs(x).max():.4g}, "
              f"rms {np.sqrt((x.astype(np.float64) ** 2).mean()):.4g}")


if __name__ == "__main__":
    main()
