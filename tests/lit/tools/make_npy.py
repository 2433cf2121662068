"""Writes small .npy files, good and malformed, for the CLI error tests.

Pure Python (no numpy), so that these tests build their inputs by hand and do
not share code with the reader under test.

usage: make_npy.py KIND PATH
       make_npy.py same PREFIX [ROWS COLS]
                                 (PREFIX-{f32,f16,f64,bf16}.npy: one random
                                  matrix, exact in every dtype)
"""
import random
import struct
import sys


def npy_bytes(descr, fortran, shape, payload, version=(1, 0)):
    shape_text = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    prefix_len = 10 if version[0] == 1 else 12
    pad = 64 - (prefix_len + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    size = struct.pack("<H", len(header)) if version[0] == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes(version) + size + header.encode("latin1") + payload


def floats(n, seed):
    rng = random.Random(seed)
    return struct.pack("<%df" % n, *[rng.gauss(0.0, 1.0) for _ in range(n)])


def same_values(seed, n):
    """Values exact in float16 and bfloat16: 4 significant bits, exponents
    within both ranges, both signs, and zeros."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.05:
            out.append(0.0)
        else:
            out.append(rng.choice((-1, 1)) * rng.randint(8, 15) / 8 * 2.0 ** rng.randint(-12, 12))
    return out


def write_same(prefix, seed, shape=(8, 256)):
    values = same_values(seed, shape[0] * shape[1])
    n = len(values)
    files = {
        "f32": npy_bytes("<f4", False, shape, struct.pack("<%df" % n, *values)),
        "f16": npy_bytes("<f2", False, shape, struct.pack("<%de" % n, *values)),
        "f64": npy_bytes("<f8", False, shape, struct.pack("<%dd" % n, *values)),
        # BF16: the top half of each float32 (exact for these values).
        "bf16": npy_bytes("<u2", False, shape, struct.pack(
            "<%dH" % n, *[struct.unpack("<I", struct.pack("<f", v))[0] >> 16
                          for v in values])),
    }
    for name, data in files.items():
        with open("%s-%s.npy" % (prefix, name), "wb") as f:
            f.write(data)


def main():
    kind, path = sys.argv[1], sys.argv[2]
    seed = random.randrange(1 << 30)
    if kind == "same":
        shape = tuple(int(v) for v in sys.argv[3:5]) or (8, 256)
        write_same(path, seed, shape)
        return
    data = {
        "good": lambda: npy_bytes("<f4", False, (4, 64), floats(256, seed)),
        "good-v2": lambda: npy_bytes("<f4", False, (4, 64), floats(256, seed), (2, 0)),
        "k100": lambda: npy_bytes("<f4", False, (4, 100), floats(400, seed)),
        "i32": lambda: npy_bytes("<i4", False, (4, 64), b"\0" * (4 * 256)),
        "fortran": lambda: npy_bytes("<f4", True, (4, 64), floats(256, seed)),
        "1d": lambda: npy_bytes("<f4", False, (64,), floats(64, seed)),
        "3d": lambda: npy_bytes("<f4", False, (2, 2, 64), floats(256, seed)),
        "truncated": lambda: npy_bytes("<f4", False, (4, 64), floats(100, seed)),
        "not-npy": lambda: b"this is not a numpy file\n",
    }[kind]()
    with open(path, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
