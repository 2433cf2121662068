"""How the H200's tensor cores add FP8 products: a bit-level model, tested.

Input for the GEMM's accuracy contract (docs/NUMERICS-CONTRACT.md section 7)
and the model the GPU tests hold the kernel to
(include/moss/Numerics/TensorCoreModel.h). One Triton FP8 dot (64x64 tiles,
so wgmma with K = 32 per instruction, FP32 accumulators, no promotion) over
K = 32 to 256 of random heavy-tailed codes, E4M3 and E5M2 on either side.
Every product of two FP8 codes is exact, so the result's error is how the
tensor cores add them. `fit` prints, per data set, the share of dots that
each candidate model reproduces to the bit.

The fitted model (`nominal`): each K = 32 step adds its products to the
accumulator c (zero at first). E is the largest of c's exponent and the
non-zero products' nominal exponents (the sum of the two codes' exponents,
a subnormal code counting as its format's smallest normal exponent).
Every product and c are truncated toward zero to a multiple of 2^(E - 13),
summed exactly, and the sum is truncated toward zero to 14 significant
bits. Its rivals change one thing each: E from the products' actual
exponents (`actual`), no truncation of the sum (`sum-exact`), c added
without truncation (`c-exact`), steps of 16 products (`k16`).

Also prints hand-made dots (one product of 1 and n of +-2^-s; a zero or
subnormal code beside a large one), which show the same by eye.

Two steps, so that the GPU is held only for the dots: `collect` (a GPU with
FP8 tensor cores, measured on sm_90a; PyTorch and Triton) saves the codes
and the tensor cores' results, `fit` (NumPy, any machine) tries the models:

    python3 tools/studies/fp8_mma_rounding_probe.py collect DIR [--mn 64]
    python3 tools/studies/fp8_mma_rounding_probe.py fit DIR
"""
import argparse
import os

import numpy as np

MIN_NORMAL_EXPONENT = {"e4m3": -6, "e5m2": -14}
# (name, format of A, format of B, distribution, K)
SETS = [(f"{dist}_e4m3_e4m3_k{k}", "e4m3", "e4m3", dist, k)
        for k in (32, 64, 128, 256) for dist in ("student", "outlier")]
SETS += [(f"sparse_e4m3_e4m3_k{k}", "e4m3", "e4m3", "sparse", k)
         for k in (32, 128)]
SETS += [(f"student_{fa}_{fb}_k{k}", fa, fb, "student", k)
         for fa, fb in (("e5m2", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e5m2"))
         for k in (32, 128)]


# --- collect (GPU) ----------------------------------------------------------

def collect(out_dir, mn, seed):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, N, K: tl.constexpr,
                   IMPRECISE: tl.constexpr):
        # C[m, n] = sum_k A[m, k] B[n, k] as one FP8 dot over all of K, all
        # of it accumulated inside the tensor cores (Triton promotes nothing).
        rm = tl.program_id(0) * 64 + tl.arange(0, 64)
        rn = tl.program_id(1) * 64 + tl.arange(0, 64)
        rk = tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rn[:, None] * K + rk[None, :])
        c = tl.dot(a, tl.trans(b), out_dtype=tl.float32,
                   max_num_imprecise_acc=IMPRECISE)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)

    def run(a, b):
        m, k = a.shape
        n = b.shape[0]
        c = torch.full((m, n), float("nan"), device="cuda")  # poisoned
        dot_kernel[(m // 64, n // 64)](a.cuda(), b.cuda(), c, n, K=k,
                                       IMPRECISE=k)
        torch.cuda.synchronize()
        out = c.cpu().numpy()
        assert np.isfinite(out).all(), "the kernel left outputs unwritten"
        return out

    dtypes = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    gen = torch.Generator().manual_seed(seed)

    def codes(rows, k, dist, fmt):
        # 'student': t with 2 degrees of freedom; 'outlier': small Gaussian
        # values with a few near the E4M3 maximum, as LLM activations;
        # 'sparse': 'outlier' with a third zeros and a tenth subnormals, as
        # blocks whose scale an outlier sets.
        if dist == "student":
            u = torch.rand(rows, k, generator=gen).clamp(1e-6, 1 - 1e-6)
            x = (2 * u - 1) / torch.sqrt(2 * u * (1 - u)) * 8
        else:
            x = torch.randn(rows, k, generator=gen) * 2
            hot = torch.rand(rows, k, generator=gen) < 0.06
            x[hot] = (torch.rand(int(hot.sum()), generator=gen) * 2 - 1) * 440
        if dist == "sparse":
            pick = torch.rand(rows, k, generator=gen)
            x[pick < 0.1] *= 2.0**-9
            x[(pick >= 0.1) & (pick < 0.43)] = 0
        return x.clamp(-448, 448).to(dtypes[fmt])

    os.makedirs(out_dir, exist_ok=True)
    data = {"device": np.array(torch.cuda.get_device_name())}
    for name, fa, fb, dist, k in SETS:
        a, b = codes(mn, k, dist, fa), codes(mn, k, dist, fb)
        try:
            data[name + "_c"] = run(a, b)
        except Exception as e:  # a Triton without this format pair
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}")
            continue
        data[name + "_a"] = a.float().numpy()
        data[name + "_b"] = b.float().numpy()
    a, b, _ = hand_made_rows()
    data["hand_c"] = run(torch.from_numpy(a).to(torch.float8_e4m3fn),
                         torch.from_numpy(b).to(torch.float8_e4m3fn))
    np.savez_compressed(os.path.join(out_dir, "fp8_mma_probe.npz"), **data)
    print(f"saved {sum(k.endswith('_c') for k in data) - 1} random sets "
          "and the hand-made dots")


def hand_made_rows():
    """E4M3 rows of A and B (64 x 32) and what each dot is."""
    a = np.zeros((64, 32), np.float32)
    b = np.zeros((64, 32), np.float32)
    cases = []
    for n, sign in ((1, 1), (31, 1), (31, -1)):
        for s in range(10, 17):  # E4M3's smallest code is 2^-9
            i = len(cases)
            a[i, 0] = b[i, 0] = 1
            a[i, 1:n + 1] = sign * 2.0**-(s // 2)
            b[i, 1:n + 1] = 2.0**-(s - s // 2)
            cases.append(f"1 + {n} x {'+' if sign > 0 else '-'}2^-{s}")
    # A zero or subnormal code beside 448 (exponent 8), then 31 products of
    # 2^-12: nominal exponents put E at -6 + 8 = 2, and 2^-12 falls below
    # 2^(2 - 13).
    for first, what in ((0.0, "0"), (2.0**-9, "2^-9")):
        i = len(cases)
        a[i, 0], b[i, 0] = first, 448
        a[i, 1:] = b[i, 1:] = 2.0**-6
        cases.append(f"{what} x 448 + 31 x 2^-12")
    return a, b, cases


# --- fit (any machine) --------------------------------------------------------

def exponent(x):
    """floor(log2(|x|)) of non-zero float64 values, exactly."""
    return np.frexp(x)[1].astype(np.int64) - 1


def truncate(x, quantum):
    return np.trunc(x / quantum) * quantum


def model_dot(a, b, fa, fb, variant):
    """The tensor cores' dot of code rows a [M, K], b [N, K] (float64) under
    the fitted model or one of its rivals -> [M, N]."""
    def nominal(x, fmt):
        tiny = 2.0**MIN_NORMAL_EXPONENT[fmt]
        return np.where(np.abs(x) < tiny, MIN_NORMAL_EXPONENT[fmt],
                        exponent(np.where(x == 0, 1, x)))

    p = a[:, None, :] * b[None, :, :]
    if variant == "actual":
        e = exponent(np.where(p == 0, 1, p))
    else:
        e = nominal(a, fa)[:, None, :] + nominal(b, fb)[None, :, :]
    e = np.where(p == 0, -1000, e)  # zero products do not count
    step = 16 if variant == "k16" else 32
    c = np.zeros(p.shape[:-1])
    for k0 in range(0, p.shape[-1], step):
        top = e[..., k0:k0 + step].max(-1)
        top = np.where(c != 0, np.maximum(top, exponent(np.where(c == 0, 1, c))),
                       top)
        q = 2.0**(top - 13)
        s = truncate(p[..., k0:k0 + step], q[..., None]).sum(-1)
        s += c if variant == "c-exact" else truncate(c, q)
        if variant != "sum-exact":
            s = np.where(s == 0, 0,
                         truncate(s, 2.0**(exponent(np.where(s == 0, 1, s)) - 13)))
        c = s
    return c


VARIANTS = ("nominal", "actual", "sum-exact", "c-exact", "k16")


def fit(in_dir):
    data = np.load(os.path.join(in_dir, "fp8_mma_probe.npz"))
    print(f"device: {data['device']}\n")
    a, b, cases = hand_made_rows()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    model = model_dot(a64, b64, "e4m3", "e4m3", "nominal")
    print("| dot | exact | H200 | model |\n|---|---|---|---|")
    for i, what in enumerate(cases):
        exact = float(a64[i] @ b64[i])
        print(f"| {what} | {exact:.9g} | {float(data['hand_c'][i, i]):.9g} | "
              f"{model[i, i]:.9g} |")
    print("\nShare of dots reproduced to the bit:\n")
    print("| set | dots | relative Frobenius error | " +
          " | ".join(VARIANTS) + " |")
    print("|---" * (3 + len(VARIANTS)) + "|")
    for name, fa, fb, _, _ in SETS:
        if name + "_c" not in data:
            print(f"| {name} | not collected |")
            continue
        a, b = data[name + "_a"].astype(np.float64), data[name + "_b"].astype(np.float64)
        got = data[name + "_c"].astype(np.float64)
        exact = a @ b.T
        rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        shares = [(model_dot(a, b, fa, fb, v) == got).mean() for v in VARIANTS]
        print(f"| {name} | {got.size} | {rel:.2e} | " +
              " | ".join(f"{s:.4f}" for s in shares) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("collect", "fit"))
    parser.add_argument("dir")
    parser.add_argument("--mn", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.step == "collect":
        collect(args.dir, args.mn, args.seed)
    else:
        fit(args.dir)


if __name__ == "__main__":
    main()
