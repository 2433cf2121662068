"""The m-grouped GEMM of a mixture-of-experts layer: moss_jit.grouped_gemm
against torch._scaled_grouped_mm (FP8, row-wise scales, fast accumulation,
on sm_90) and the bf16 torch._grouped_mm, at the same routing, all timed in
this process.

    python python/bench/bench_grouped.py [--shapes N,K ...] [--experts 8,64]
        [--tokens 16384] [--routing uniform|skewed] [--iters N]

Operands are quantized before the timing: only the GEMMs are timed. moss
runs per-row x per-row (torch's recipe) and MOSS x per-tensor experts. Each
expert's rows are a multiple of 16 (torch's grouped kernels' alignment), so
all three run the same rows. Prints one Markdown table: median ms, TFLOPS
on the routed rows, and moss's speed over torch's FP8 one.

A second table (unless --no-layer) times a whole expert layer's step,
forward and backward: moss_jit.nn.GroupedLinear (quantizers included)
against the same layer in bf16 through torch._grouped_mm's autograd, with
bf16 weights and with FP32 master weights cast to bf16 in each step (as
the MOSS layer quantizes its FP32 weights in each step), for
DeepSeek-V3-like experts (64, top-8 of 4096 tokens, 4096 -> 1536) and
Mixtral-like ones (8, top-2 of 8192 tokens, 4096 -> 14336). Its last
columns time the whole training step of the layer, the optimizer's
included: bf16 from FP32 weights with torch.optim.AdamW(fused=True), and
the MOSS layer with moss_jit.optim.AdamW, whose step also casts the
weights (so that the MOSS forward casts none).
"""

import argparse
import math
import os

# Time the full kernels from the first call, not their quick-compile tier.
os.environ.setdefault("MOSS_TIERED_COMPILE", "0")

import torch  # noqa: E402

import moss_jit  # noqa: E402
from bench_linear import time_steps  # noqa: E402

SHAPES = [(4096, 7168), (7168, 2048), (14336, 4096), (4096, 14336)]
FP8_MAX = 448.0
ROUNDS = 5


def route(tokens, experts, skewed, generator):
    """Rows per expert, each a multiple of 16, about `tokens` in all: uniform
    within 20% of the mean, or one expert half of them."""
    weight = 0.8 + 0.4 * torch.rand(experts, generator=generator)
    if skewed:
        weight[0] = weight[1:].sum()
    rows = (weight / weight.sum() * tokens / 16).round().long() * 16
    return rows.tolist()


def rowwise_fp8(x):
    """x [..., K] as E4M3 codes with an FP32 scale per row (torch's
    row-wise recipe): codes = x / scale, scale = amax / 448."""
    scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    codes = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX)
    return codes.to(torch.float8_e4m3fn), scale.squeeze(-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=None,
                        help="N,K pairs (default: DeepSeek-V3 and Mixtral)")
    parser.add_argument("--experts", default="8,64")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--routing", choices=("uniform", "skewed"),
                        default="uniform")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--no-layer", action="store_true",
                        help="skip the GroupedLinear step table")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_grouped.py needs a CUDA GPU (sm_90)")
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] \
        if args.shapes else SHAPES
    generator = torch.Generator().manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.tokens} tokens, {args.routing} routing")
    print("| N, K | experts | bf16 _grouped_mm ms | torch FP8 row-wise ms | "
          "moss row-wise ms | moss MOSS x tensor ms | moss row-wise TFLOPS | "
          "moss row-wise / torch FP8 |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for n, k in shapes:
        for experts in (int(e) for e in args.experts.split(",")):
            rows = route(args.tokens, experts, args.routing == "skewed",
                         generator)
            m = sum(rows)
            ends = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
            offsets = torch.cat([torch.zeros(1, dtype=torch.int32,
                                             device="cuda"), ends])
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(experts, n, k, device="cuda",
                            dtype=torch.bfloat16) / math.sqrt(k)

            bf16 = time_steps(lambda: torch._grouped_mm(
                x, w.transpose(-2, -1), offs=ends), args.iters, ROUNDS)
            x8, x_scale = rowwise_fp8(x)
            w8, w_scale = rowwise_fp8(w)
            torch_fp8 = time_steps(lambda: torch._scaled_grouped_mm(
                x8, w8.transpose(-2, -1), x_scale, w_scale, offs=ends,
                out_dtype=torch.bfloat16, use_fast_accum=True), args.iters, ROUNDS)

            a = moss_jit.quantize(x, "per-row")
            b = moss_jit.stack_experts(
                [moss_jit.quantize(w[g], "per-row") for g in range(experts)])
            rowwise = time_steps(lambda: moss_jit.grouped_gemm(a, b, offsets),
                              args.iters, ROUNDS)
            a_moss = moss_jit.quantize(x, "moss", global_scope="row",
                                       fold="row")
            b_tensor = moss_jit.stack_experts(
                [moss_jit.quantize(w[g], "per-tensor")
                 for g in range(experts)])
            moss = time_steps(lambda: moss_jit.grouped_gemm(a_moss, b_tensor,
                                                         offsets), args.iters, ROUNDS)
            flops = 2.0 * m * n * k
            ratios.append(torch_fp8 / rowwise)
            print(f"| {n}, {k} | {experts} | {bf16:.3f} | {torch_fp8:.3f} | "
                  f"{rowwise:.3f} | {moss:.3f} | "
                  f"{flops / rowwise / 1e9:.0f} | {torch_fp8 / rowwise:.2f} |",
                  flush=True)
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"\nmoss row-wise over torch's FP8 grouped GEMM: geometric mean "
          f"{geomean:.2f}x over {len(ratios)} cases")
    if not args.no_layer:
        layer_table(args, generator)


LAYERS = [("deepseek-v3-like", 64, 8 * 4096, 4096, 1536),
          ("mixtral-like", 8, 2 * 8192, 4096, 14336)]


def layer_table(args, generator):
    """One expert layer's forward and backward: GroupedLinear against bf16
    torch._grouped_mm with autograd, from the same weights and rows."""
    print("\n| layer | experts | routed rows | in -> out | bf16 step ms | "
          "bf16 from FP32 weights step ms | moss step ms | moss / bf16 speed "
          "| moss / bf16 from FP32 weights speed | with AdamW: bf16 from FP32 "
          "weights ms | with AdamW: moss ms | with AdamW: moss / bf16 speed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, experts, tokens, d, ffn in LAYERS:
        rows = route(tokens, experts, args.routing == "skewed", generator)
        m = sum(rows)
        ends = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int32,
                                         device="cuda"), ends])
        x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16,
                        requires_grad=True)
        dy = torch.randn(m, ffn, device="cuda", dtype=torch.bfloat16)
        layer = moss_jit.nn.GroupedLinear(experts, d, ffn, device="cuda")
        w = layer.weight.detach().to(torch.bfloat16).requires_grad_()

        def bf16_step():
            x.grad = w.grad = None
            torch._grouped_mm(x, w.transpose(-2, -1), offs=ends).backward(dy)

        # As training with FP32 master weights casts them each step (the
        # MOSS layer quantizes its FP32 weight each step too).
        master = layer.weight.detach().clone().requires_grad_()

        def bf16_cast_step():
            x.grad = master.grad = None
            torch._grouped_mm(x, master.to(torch.bfloat16).transpose(-2, -1),
                              offs=ends).backward(dy)

        def moss_step():
            # An optimizer step is reported, as in training: the layer casts
            # its weights again instead of reusing the last step's codes.
            layer.set_learning_rate(1e-5)
            x.grad = layer.weight.grad = None
            layer(x, offsets).backward(dy)

        try:
            bf16 = time_steps(bf16_step, args.iters, ROUNDS)
            bf16_cast = time_steps(bf16_cast_step, args.iters, ROUNDS)
        except RuntimeError as error:  # no autograd for _grouped_mm
            print(f"| {name} | {experts} | {m} | {d} -> {ffn} | n/a "
                  f"({str(error).splitlines()[0]}) | | | | |")
            continue
        moss = time_steps(moss_step, args.iters, ROUNDS)

        # Whole training steps: the optimizers update the FP32 weights (a
        # small learning rate: the weights stay where they are).
        bf16_adamw = torch.optim.AdamW([master], lr=1e-6, fused=True)
        moss_adamw = moss_jit.optim.AdamW(layer.parameters(), lr=1e-6)

        def bf16_train_step():
            bf16_cast_step()
            bf16_adamw.step()

        def moss_train_step():
            x.grad = layer.weight.grad = None
            layer(x, offsets).backward(dy)
            moss_adamw.step()

        bf16_train = time_steps(bf16_train_step, args.iters, ROUNDS)
        moss_train = time_steps(moss_train_step, args.iters, ROUNDS)
        print(f"| {name} | {experts} | {m} | {d} -> {ffn} | {bf16:.3f} | "
              f"{bf16_cast:.3f} | {moss:.3f} | {bf16 / moss:.2f} | "
              f"{bf16_cast / moss:.2f} | {bf16_train:.3f} | "
              f"{moss_train:.3f} | {bf16_train / moss_train:.2f} |",
              flush=True)
        del bf16_adamw, moss_adamw, master, layer, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
