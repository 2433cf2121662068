"""The automatic scaling study of docs/NUMERICS.md.

Reads the trace of finetune_autoscale.py, simulates MOSS's predicted weight
scale (docs/METHOD.md section 3) for c = 1 and the provable c, with rescale intervals
100, 500 and 2000, checks the simulation against the project's own
numerics::AutoScaler (through `moss-jit autoscale-replay`, to the bit),
measures the SNR cost of the predicted scale on the saved weights (through
`moss-jit snr --scale`), prints the Markdown tables and draws the figure.

usage: autoscale_study.py --moss-jit build/bin/moss-jit --run DIR
                          [--plot docs/numerics-autoscale.png]
"""
import argparse
import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

E4M3_MAX = np.float32(448.0)
INTERVALS = [100, 500, 2000]
BETA1, BETA2 = 0.9, 0.999
# The same floating-point operations as numerics::provableAdamBound.
C_PROVABLE = (1.0 - BETA1) / math.sqrt((1.0 - BETA2) *
                                       (1.0 - BETA1 * BETA1 / BETA2))
BOUNDS = [("paper", 1.0), ("provable", C_PROVABLE)]


def read_trace(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    names = rows[0][2:]
    lr = [float(r[1]) for r in rows[1:]]
    amax = np.array([[float(x) for x in r[2:]] for r in rows[1:]],
                    dtype=np.float32).T  # [weight, step]
    return names, lr, amax


def simulate(lr, amax, c, interval):
    """The AutoScaler protocol, step for step (see AutoScale.h): returns
    per step t = 1..T the predicted amax and scale, and the flags."""
    anchor, lr_sum, steps, pending = np.float32(amax[0]), 0.0, 0, False
    out = []
    for t in range(1, len(lr)):
        lr_sum += lr[t]
        steps += 1
        rescaled = pending or steps >= interval
        if rescaled:
            anchor, lr_sum, steps, pending = np.float32(amax[t]), 0.0, 0, \
                False
        bound = float(anchor) + c * lr_sum
        pred = np.float32(bound)
        if float(pred) < bound:  # round up, never below the bound
            pred = np.nextafter(pred, np.float32(np.inf))
        scale = pred / E4M3_MAX
        if scale == 0:  # the quantizer's rule for a zero scale
            scale = np.float32(1.0)
        # E4M3 saturates above 464 (NUMERICS-CONTRACT.md section 1).
        saturated = bool(np.float32(amax[t]) / scale > np.float32(464.0))
        pending = pending or saturated
        out.append((t, pred, np.float32(scale), rescaled,
                    bool(pred < amax[t]), saturated))
    return out


def replay(moss_jit, trace):
    text = subprocess.run([moss_jit, "autoscale-replay", "--in", str(trace)],
                          check=True, capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(text)))


def snr_rows(moss_jit, path, scales):
    args = [moss_jit, "snr", "--csv", "--in", str(path), "--schemes",
            "per-tensor", "--format", "e4m3"]
    if scales:
        args += ["--scale", ",".join(f"{s:.9g}" for s in scales)]
    text = subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout
    return list(csv.DictReader(io.StringIO(text)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moss-jit", required=True)
    parser.add_argument("--run", required=True, type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--weight", help="weight to plot (default: the one "
                        "whose amax grows most)")
    args = parser.parse_args()
    out = sys.stdout

    names, lr, amax = read_trace(args.run / "trace.csv")
    steps = len(lr) - 1
    sims = {(b, n, w): simulate(lr, amax[i], c, n)
            for b, c in BOUNDS for n in INTERVALS
            for i, w in enumerate(names)}

    # 1. The simulation is the C++ AutoScaler, to the bit.
    checked = 0
    for r in replay(args.moss_jit, args.run / "trace.csv"):
        t, pred, scale, rescaled, under, sat = \
            sims[(r["bound"], int(r["interval"]), r["weight"])][
                int(r["step"]) - 1]
        assert t == int(r["step"])
        assert pred == np.float32(r["pred_amax"]), r
        assert scale == np.float32(r["pred_scale"]), r
        assert (rescaled, under, sat) == (r["rescaled"] == "1",
                                          r["undershoot"] == "1",
                                          r["saturated"] == "1"), r
        checked += 1
    assert checked == len(sims) * steps, (checked, len(sims) * steps)
    print(f"checked {checked} predictions against moss-jit autoscale-replay: "
          "identical", file=sys.stderr)

    # 2. Saturation events, rescales and pred/true ratios.
    out.write(f"**{len(names)} linear weights, {steps} AdamW steps "
              f"(peak lr {max(lr):.3g}), E4M3.** Ratios are predicted / "
              "true amax over every weight and step; 'undershoot' counts "
              "steps where the prediction fell below the true amax, "
              "'saturated' those where the cast would clip (|x|/s > 464).\n\n")
    out.write("| c | interval | undershoot | saturated | rescales (forced) "
              "| mean ratio | worst ratio | min ratio |\n")
    out.write("|---|---:|---:|---:|---:|---:|---:|---:|\n")
    summary = {}
    for b, c in BOUNDS:
        for n in INTERVALS:
            ratios, under, sat, resc, forced = [], 0, 0, 0, 0
            for i, w in enumerate(names):
                prev_sat = False
                for t, pred, scale, rescaled, u, s in sims[(b, n, w)]:
                    true = amax[i][t]
                    ratios.append(float(pred) / float(true))
                    under += u
                    sat += s
                    resc += rescaled
                    forced += rescaled and prev_sat
                    prev_sat = s
            ratios = np.array(ratios)
            summary[(b, n)] = ratios
            label = "1" if b == "paper" else f"{c:.2f}"
            out.write(f"| {label} | {n} | {under} | {sat} | {resc} "
                      f"({forced}) | {ratios.mean():.4f} | "
                      f"{ratios.max():.4f} | {ratios.min():.4f} |\n")

    # 3. The Adam step sizes the run actually took, in units of lr.
    with open(args.run / "updates.csv") as f:
        rows = list(csv.reader(f))
    u = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    out.write(f"\nLargest Adam step |m_hat/(sqrt(v_hat)+eps)| of any element, "
              f"in units of lr: median over steps and weights "
              f"{np.median(u):.3f}, 99th percentile "
              f"{np.percentile(u, 99):.3f}, max {u.max():.3f} "
              f"(provable bound {C_PROVABLE:.3f}).\n")

    # 4. SNR cost of the predicted scale against the JIT scale, on the
    # weights saved just before each multiple of 100 steps (the worst point
    # of an interval-100 cycle) and at the end.
    ckpts = sorted((p for p in (args.run / "ckpt").glob("step*")),
                   key=lambda p: int(p.name[4:]))
    costs = {(b, n): [] for b, _ in BOUNDS for n in INTERVALS}
    for ckpt in ckpts:
        t = int(ckpt.name[4:])
        for i, w in enumerate(names):
            keys = [(b, n) for b, _ in BOUNDS for n in INTERVALS]
            scales = [float(sims[(b, n, w)][t - 1][2]) for b, n in keys]
            rows = snr_rows(args.moss_jit, ckpt / f"{w}.npy", scales)
            jit = float(rows[0]["snr_db"])
            for key, r in zip(keys, rows[1:]):
                costs[key].append(jit - float(r["snr_db"]))
    out.write(f"\n**SNR cost of the predicted scale** (JIT SNR minus "
              f"predicted-scale SNR, dB, per-tensor E4M3, {len(names)} "
              f"weights at steps {', '.join(p.name[4:] for p in ckpts)})\n\n")
    out.write("| c | interval | mean cost | worst cost |\n|---|---:|---:|---:|\n")
    for b, c in BOUNDS:
        for n in INTERVALS:
            v = np.array(costs[(b, n)])
            label = "1" if b == "paper" else f"{c:.2f}"
            out.write(f"| {label} | {n} | {v.mean():.4f} | {v.max():.4f} |\n")

    if args.plot:
        plot(args, names, lr, amax, sims)


def plot(args, names, lr, amax, sims):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    growth = amax[:, -1] / amax[:, 0]
    i = names.index(args.weight) if args.weight else int(np.argmax(growth))
    w = names[i]
    t = np.arange(1, len(lr))
    fig, axes = plt.subplots(1, len(INTERVALS), figsize=(13, 3.8),
                             sharey=True)
    for ax, n in zip(axes, INTERVALS):
        ax.plot(t, amax[i][1:] / 448.0, color="black", lw=1.6,
                label="true (JIT) scale")
        for (b, c), color in zip(BOUNDS, ("tab:blue", "tab:red")):
            pred = [float(s) for _, _, s, _, _, _ in sims[(b, n, w)]]
            label = "predicted, c = 1" if b == "paper" else \
                f"predicted, c = {c:.2f}"
            ax.plot(t, pred, color=color, lw=1.1, label=label)
        ax.set_title(f"rescale interval {n}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"scale of {w} (amax / 448)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"all-MiniLM-L6-v2, AdamW, cosine lr (peak {max(lr):.0e}): "
                 f"true vs predicted per-tensor E4M3 scale of {w}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=90)
    print(f"wrote {args.plot} ({w})", file=sys.stderr)


if __name__ == "__main__":
    main()
