"""How exactly the H200's tensor cores add up a MOSS GEMM: FP8 against BF16.

Input for the f32 target of the GEMM issue (relative Frobenius error at most
1e-5; docs/NUMERICS-CONTRACT.md section 7). A is quantized the MOSS way
(E4M3 codes times an E8M0 power of two per 32 along K), B per tensor (E4M3
codes; its FP32 scale is left out: it only adds one rounding in the
epilogue). Every product is then exact, so all of the error is how the
MMA adds the products. Two variants of one Triton kernel (64x64 tiles,
FP32 accumulators), against FP64 over the dequantized operands:

- fp8_promote32: FP8 dot per 32 of K into a fresh partial, promoted into
  FP32 times the block's power of two: what the MOSS-JIT kernel does.
- bf16_prescaled: A's codes times their power of two in bf16 (exact), B's
  codes in bf16, one BF16 dot over the whole of K: the BF16-MMA variant the
  contract weighs, with no promotion.

Needs a GPU with FP8 tensor cores (sm_89+; measured on sm_90a), PyTorch
and Triton:

    python3 tools/studies/mma_accumulation_study.py [--mn 256] [--seeds 4]

Prints one Markdown table: the relative Frobenius error (min-max over the
seeds) per variant and K.
"""
import argparse

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0


@triton.jit
def _gemm(a_ptr, b_ptr, s_ptr, c_ptr, M, N, K,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          PROMOTE: tl.constexpr, IMPRECISE: tl.constexpr):
    # C[M, N] = sum_k A[m, k] B[n, k] (both K-major); with PROMOTE, every BK
    # of K is a fresh dot scaled by s[m, k / BK] and added in FP32.
    # IMPRECISE: how much of its K Triton lets an FP8 dot accumulate inside
    # the tensor cores before it adds into FP32 itself (all of it here, so
    # that the only promotion is PROMOTE's).
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + rn[:, None] * K + (k0 + rk)[None, :])
        if PROMOTE:
            part = tl.dot(a, tl.trans(b), out_dtype=tl.float32,
                          max_num_imprecise_acc=IMPRECISE)
            s = tl.load(s_ptr + rm * (K // BK) + k0 // BK)
            acc += part * s[:, None]
        else:
            acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.float32,
                         max_num_imprecise_acc=IMPRECISE)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def run(a, b, scales, promote, bk):
    m, k = a.shape
    n = b.shape[0]
    c = torch.full((m, n), float("nan"), device=a.device)  # poisoned
    _gemm[(m // 64, n // 64)](a, b, scales, c, m, n, k, BM=64, BN=64, BK=bk,
                              PROMOTE=promote,
                              IMPRECISE=bk if a.element_size() == 1 else None)
    torch.cuda.synchronize()
    assert torch.isfinite(c).all(), "the kernel left outputs unwritten"
    return c.double()


def quantize_moss(x):
    """E4M3 codes and the E8M0 exponent of each 32-element block of x."""
    blocks = x.view(x.shape[0], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True).clamp_min(2.0**-100)
    e = torch.ceil(torch.log2(amax / FP8_MAX))
    codes = (blocks / torch.exp2(e)).to(torch.float8_e4m3fn)
    return codes.view_as(x), e.squeeze(-1)


def rel_fro(c, ref):
    return ((c - ref).norm() / ref.norm()).item()


def study(mn, ks, seeds):
    rows = {}
    for k in ks:
        for seed in range(seeds):
            g = torch.Generator(device="cuda").manual_seed(1000 * k + seed)
            x = torch.randn(mn, k, device="cuda", generator=g)
            # LLM-like: rows of varied size, a few channels much larger.
            x *= torch.exp(torch.randn(mn, 1, device="cuda", generator=g))
            x[:, :: max(1, k // 8)] *= 20.0
            codes_a, e_a = quantize_moss(x)
            w = torch.randn(mn, k, device="cuda", generator=g)
            codes_b = (w * (FP8_MAX / w.abs().max())).to(torch.float8_e4m3fn)

            blocks_a = codes_a.float().view(mn, -1, 32)
            a_deq = (blocks_a * torch.exp2(e_a)[..., None]).view(mn, k)
            b_deq = codes_b.float()
            ref = a_deq.double() @ b_deq.double().T

            pow2 = torch.exp2(e_a).contiguous()
            ones = torch.ones_like(pow2)
            results = {
                "fp8_promote32": rel_fro(
                    run(codes_a, codes_b, pow2, True, 32), ref),
                "bf16_prescaled": rel_fro(
                    run(a_deq.to(torch.bfloat16), b_deq.to(torch.bfloat16),
                        ones, False, 64), ref),
            }
            # The bf16 copies must be exact, or the comparison is void.
            assert torch.equal(a_deq.to(torch.bfloat16).float(), a_deq)
            for name, err in results.items():
                rows.setdefault(name, {}).setdefault(k, []).append(err)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mn", type=int, default=256, help="M = N")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--k", type=int, nargs="*",
                        default=[128, 1024, 4096, 16384])
    args = parser.parse_args()
    name = torch.cuda.get_device_name()
    print(f"{name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"M = N = {args.mn}, {args.seeds} seeds\n")
    rows = study(args.mn, args.k, args.seeds)
    print("| variant | " + " | ".join(f"K = {k}" for k in args.k) + " |")
    print("|---|" + "---|" * len(args.k))
    for variant, by_k in rows.items():
        cells = [f"{min(v):.2e}-{max(v):.2e}" for v in by_k.values()]
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
