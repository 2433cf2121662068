"""Writes .npy inputs with known answers for the moss-jit snr tests.

Pure Python (no numpy), like make_npy.py.

usage: make_snr_npy.py KIND PATH
  exact  [4, 128]: values m * 2^e, m in {1, 1.25, 1.5, 1.75}, e in [-6, 8],
         some zeros, and +-448 in every block of 32. Every scheme's scales are
         then powers of two that keep the values on the E4M3 and the E5M2
         grid: infinite SNR, no error, in both formats.
  tiny   [2, 128]: row 0 is +-448; row 1 is 64 x +-448 then 64 x +-2^-12,
         which is below half the smallest E4M3 subnormal at scale 1.
"""
import random
import struct
import sys

from make_npy import npy_bytes


def exact(rng):
    values = []
    for _ in range(4 * 128):
        if rng.random() < 0.1:
            values.append(0.0)
        else:
            values.append(rng.choice((-1, 1)) * rng.choice((1.0, 1.25, 1.5, 1.75)) *
                          2.0 ** rng.randint(-6, 8))
    for block in range(4 * 128 // 32):
        values[block * 32 + rng.randrange(32)] = rng.choice((-448.0, 448.0))
    return (4, 128), values


def tiny(rng):
    row0 = [448.0 * (-1) ** i for i in range(128)]
    row1 = [448.0 * (-1) ** i for i in range(64)] + [2.0 ** -12 * (-1) ** i for i in range(64)]
    return (2, 128), row0 + row1


def main():
    kind, path = sys.argv[1], sys.argv[2]
    rng = random.Random(random.randrange(1 << 30))
    shape, values = {"exact": exact, "tiny": tiny}[kind](rng)
    payload = struct.pack("<%df" % len(values), *values)
    with open(path, "wb") as f:
        f.write(npy_bytes("<f4", False, shape, payload))


if __name__ == "__main__":
    main()
