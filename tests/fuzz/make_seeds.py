"""Writes the fuzz targets' seed corpora from the lit tests' inputs.

usage: make_seeds.py LIT_DIR OUT_DIR

OUT_DIR/<target>/ gets, for
  DialectFuzzer         each `// -----` split of every .mlir test, without
                        its comment lines (RUN, CHECK, expected-error);
  TuningDatabaseFuzzer  the tuning databases: Inputs/ files and the text of
                        `printf '...' > FILE` RUN lines naming moss-tuning-db;
  ShapesFuzzer          the shapes files: Inputs/ files and the other
                        printf-written .txt and .json files;
  NpyFuzzer             the .npy files that the tests' RUN lines make with
                        make_npy.py and make_snr_npy.py.
CApiFuzzer's seeds are structs of moss.h: the target writes them itself
(MOSS_FUZZ_WRITE_SEEDS, CApiSeeds.cpp).
"""
import os
import re
import subprocess
import sys

PRINTF_RUN = re.compile(r"RUN: printf '([^']*)' > (\S+)")
NPY_RUN = re.compile(r"RUN: %python %S/(make_\w*npy\.py) (\S+) %t/(\S+)")
SPLIT = re.compile(r"^// -----", re.MULTILINE)


def lit_files(lit_dir, suffixes):
    for root, _, names in sorted(os.walk(lit_dir)):
        for name in sorted(names):
            if name.endswith(suffixes):
                yield os.path.join(root, name)


def write(out_dir, target, name, data):
    directory = os.path.join(out_dir, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def seed_name(lit_dir, path, suffix=""):
    rel = os.path.relpath(path, lit_dir)
    return re.sub(r"[^A-Za-z0-9.]+", "-", rel) + suffix


def mlir_seeds(lit_dir, out_dir):
    for path in lit_files(lit_dir, (".mlir",)):
        with open(path) as f:
            text = f.read()
        for index, chunk in enumerate(SPLIT.split(text)):
            lines = [line for line in chunk.splitlines()
                     if not line.lstrip().startswith("//")]
            body = "\n".join(lines).strip()
            if body:
                write(out_dir, "DialectFuzzer",
                      seed_name(lit_dir, path, "-%d" % index),
                      (body + "\n").encode())


def text_seeds(lit_dir, out_dir):
    def target_of(text):
        return "TuningDatabaseFuzzer" if b"moss-tuning-db" in text else "ShapesFuzzer"

    for path in lit_files(lit_dir, (".json", ".txt")):
        if os.path.basename(os.path.dirname(path)) == "Inputs":
            with open(path, "rb") as f:
                data = f.read()
            write(out_dir, target_of(data), seed_name(lit_dir, path), data)
    for path in lit_files(lit_dir, (".mlir", ".test")):
        with open(path) as f:
            runs = PRINTF_RUN.findall(f.read())
        for index, (literal, file) in enumerate(runs):
            if not file.endswith((".json", ".txt")):
                continue
            # printf itself expands the escapes, as in the test.
            data = subprocess.run(["printf", literal], check=True,
                                  capture_output=True).stdout
            write(out_dir, target_of(data),
                  seed_name(lit_dir, path, "-printf-%d" % index), data)


def npy_seeds(lit_dir, out_dir):
    directory = os.path.join(out_dir, "NpyFuzzer")
    os.makedirs(directory, exist_ok=True)
    for path in lit_files(lit_dir, (".test",)):
        with open(path) as f:
            runs = NPY_RUN.findall(f.read())
        for script, kind, name in runs:
            subprocess.run([sys.executable,
                            os.path.join(os.path.dirname(path), script), kind,
                            os.path.join(directory, name)], check=True)


def main():
    lit_dir, out_dir = sys.argv[1], sys.argv[2]
    mlir_seeds(lit_dir, out_dir)
    text_seeds(lit_dir, out_dir)
    npy_seeds(lit_dir, out_dir)
    for target in sorted(os.listdir(out_dir)):
        print("%s: %d seeds" % (target, len(os.listdir(os.path.join(out_dir, target)))))


if __name__ == "__main__":
    main()
