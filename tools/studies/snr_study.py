"""The SNR study of docs/NUMERICS.md: runs `moss-jit snr` on synthetic samples
and on captured activations and gradients, and prints the Markdown tables.

usage: snr_study.py --moss-jit build/bin/moss-jit [--acts DIR]
                    [--rows 4096 --cols 4096] [--csv all.csv]

--acts is the folder capture_activations.py wrote; without it only the
synthetic tables are printed.
"""
import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

SYNTHETIC = [  # (table name, CSV label, flags)
    ("Gaussian", "gaussian", ["--sample", "gaussian"]),
    ("Student-t, 4 dof", "student-t4", ["--sample", "student-t", "--dof", "4"]),
    ("Student-t, 3 dof", "student-t3", ["--sample", "student-t", "--dof", "3"]),
    ("LLM-like", "llm", ["--sample", "llm"]),
]
ACTIVATIONS = [
    ("qkv_in", "Q/K/V input"),
    ("attn_out_in", "attn out-proj input"),
    ("ffn_up_in", "FFN up input"),
    ("ffn_down_in", "FFN intermediate (after GELU)"),
    ("ln1_in", "LayerNorm 1 input"),
    ("ln2_in", "LayerNorm 2 input"),
]
GRADIENTS = [
    ("grad_qkv", "dY of Q"),
    ("grad_attn_out", "dY of attn out-proj"),
    ("grad_ffn_up", "dY of FFN up"),
    ("grad_ffn_down", "dY of FFN down"),
]
# Columns of the SNR tables: (scheme in moss-jit's CSV, header).
SNR_COLUMNS = [
    ("per-tensor", "per-tensor"),
    ("per-row", "per-row"),
    ("per-group-1x32", "group 1x32"),
    ("per-group-1x64", "group 1x64"),
    ("per-group-1x128", "group 1x128"),
    ("mxfp8", "MXFP8"),
    ("moss-tensor-32", "MOSS T-32"),
    ("moss-tensor-128", "MOSS T-128"),
    ("moss-row-32", "MOSS R-32"),
]
UNDERFLOW_COLUMNS = [
    ("per-tensor", "per-tensor"),
    ("per-row", "per-row"),
    ("per-group-1x128", "group 1x128"),
    ("mxfp8", "MXFP8"),
    ("moss-tensor-32", "MOSS T-32"),
    ("moss-tensor-64", "MOSS T-64"),
    ("moss-tensor-128", "MOSS T-128"),
]


def run(moss_jit, args, label):
    out = subprocess.run([moss_jit, "snr", "--csv", "--label", label] + args,
                         check=True, capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(out)))


def by_key(rows):
    return {(r["scheme"], r["format"]): r for r in rows}


def fmt_db(v):
    return "inf" if v == float("inf") else f"{v:.2f}"


def snr_table(title, results, fmt, out):
    """One row per data, one column per scheme; then the paper's two
    differences."""
    out.write(f"\n**{title}, {fmt.upper()}: SNR in dB** (T: global scale "
              "per tensor, R: per row; -32/-128: block)\n\n")
    heads = [h for _, h in SNR_COLUMNS] + ["MOSS - group 1x128",
                                           "MOSS - per-tensor"]
    out.write("| data | " + " | ".join(heads) + " |\n")
    out.write("|---|" + "---:|" * len(heads) + "\n")
    deltas = []
    for name, rows in results:
        k = by_key(rows)
        snr = {s: float(k[(s, fmt)]["snr_db"]) for s, _ in SNR_COLUMNS}
        d1 = snr["moss-tensor-32"] - snr["per-group-1x128"]
        d2 = snr["moss-tensor-32"] - snr["per-tensor"]
        deltas.append((d1, d2))
        cells = [fmt_db(snr[s]) for s, _ in SNR_COLUMNS]
        cells += [f"{d1:+.2f}", f"{d2:+.2f}"]
        out.write(f"| {name} | " + " | ".join(cells) + " |\n")
    if len(results) > 1:
        m1 = sum(d for d, _ in deltas) / len(deltas)
        m2 = sum(d for _, d in deltas) / len(deltas)
        out.write("| **mean** |" + " |" * len(SNR_COLUMNS) +
                  f" **{m1:+.2f}** | **{m2:+.2f}** |\n")
    return deltas


def underflow_table(title, results, fmt, out):
    out.write(f"\n**{title}, {fmt.upper()}: non-zero values flushed to zero, "
              "% (MXFP8: saturated % in brackets)**\n\n")
    heads = [h for _, h in UNDERFLOW_COLUMNS]
    out.write("| data | " + " | ".join(heads) + " |\n")
    out.write("|---|" + "---:|" * len(heads) + "\n")
    for name, rows in results:
        k = by_key(rows)
        total = int(rows[0]["rows"]) * int(rows[0]["cols"])
        cells = []
        for s, _ in UNDERFLOW_COLUMNS:
            r = k[(s, fmt)]
            cell = f"{100 * int(r['underflow']) / total:.3f}"
            if s == "mxfp8":
                cell += f" ({100 * int(r['saturated']) / total:.2f})"
            cells.append(cell)
        out.write(f"| {name} | " + " | ".join(cells) + " |\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moss-jit", required=True)
    parser.add_argument("--acts", type=Path)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--csv", type=Path, help="also write every result")
    args = parser.parse_args()
    out = sys.stdout
    everything = []

    shape = ["--rows", str(args.rows), "--cols", str(args.cols), "--seed",
             str(args.seed)]
    synthetic = []
    for name, label, flags in SYNTHETIC:
        synthetic.append((name, run(args.moss_jit, flags + shape, label)))
    everything += [r for _, rows in synthetic for r in rows]
    out.write(f"### Synthetic data [{args.rows}, {args.cols}], seed "
              f"{args.seed}\n")
    for fmt in ("e4m3", "e5m2"):
        snr_table("Synthetic", synthetic, fmt, out)
    underflow_table("Synthetic", synthetic, "e4m3", out)

    if args.acts:
        layers = sorted({p.name.split(".")[0]
                         for p in args.acts.glob("L*.npy")})
        for title, kinds in (("MiniLM activations", ACTIVATIONS),
                             ("MiniLM gradients", GRADIENTS)):
            results = []
            for kind, desc in kinds:
                for layer in layers:
                    path = args.acts / f"{layer}.{kind}.npy"
                    results.append((f"{layer} {desc}",
                                    run(args.moss_jit, ["--in", str(path)],
                                        f"{layer}.{kind}")))
            everything += [r for _, rows in results for r in rows]
            r0 = results[0][1][0]
            out.write(f"\n### {title} ({r0['rows']} tokens)\n")
            for fmt in ("e4m3", "e5m2"):
                snr_table(title, results, fmt, out)
            underflow_table(title, results, "e4m3", out)

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(everything[0].keys()))
            w.writeheader()
            w.writerows(everything)


if __name__ == "__main__":
    main()
