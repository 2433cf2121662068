"""Host overhead of one moss_jit.gemm call from Python, against the same
call made directly through libmoss's C API (ctypes, prebuilt structs: the
runtime's lookup and the driver's launch) and against torch._scaled_mm,
all in this process.

    python python/bench/bench_overhead.py [--calls N]

A small GEMM (256^3, per-tensor x per-tensor, bf16 out) keeps the GPU ahead
of the host, so calls per second measure the host. Prints microseconds per
call, the median of several rounds.
"""

import argparse
import statistics
import time

import os

# Time the full kernels from the first call, not their quick-compile tier.
os.environ.setdefault("MOSS_TIERED_COMPILE", "0")

import torch  # noqa: E402

import moss_jit  # noqa: E402
from moss_jit import _capi, _torch


def per_call_us(call, calls, rounds=7):
    for _ in range(100):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    n = args.size
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(n, n, device="cuda")
    a = moss_jit.quantize(x, "per-tensor")
    b = moss_jit.quantize(w, "per-tensor")
    d = moss_jit.gemm(a, b)

    # The C API with everything prepared once.
    spec = _torch._gemm_spec(n, n, n, a[3:7], b[3:7], "bf16", None, None,
                             False, 1.0, "auto", "auto")
    buffers = _capi.GemmBuffers.from_buffer_copy(
        _torch.gemm_buffers(a, b, d, None, None, None, (0, 1, 0, 1)))
    ctx = _capi.context(0)
    stream = _torch._raw_stream(0)
    gemm_c = _capi.lib.moss_gemm

    # The structs themselves, not byref()s of them: ctypes takes those
    # faster.
    def direct():
        gemm_c(ctx, spec, n, buffers, stream)

    scale_a = a.global_scales
    scale_b = b.global_scales
    b_t = b.codes.t()

    def scaled_mm():
        torch._scaled_mm(a.codes, b_t, scale_a, scale_b,
                         out_dtype=torch.bfloat16)

    results = {
        "moss_jit.gemm (Python)": per_call_us(lambda: moss_jit.gemm(a, b),
                                              args.calls),
        "moss_gemm via ctypes, prebuilt": per_call_us(direct, args.calls),
        "torch._scaled_mm": per_call_us(scaled_mm, args.calls),
    }
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{n}^3 per-tensor bf16, {args.calls} calls per round")
    print("| call | us per call |")
    print("|---|---:|")
    for name, us in results.items():
        print(f"| {name} | {us:.2f} |")
    python = results["moss_jit.gemm (Python)"] - \
        results["moss_gemm via ctypes, prebuilt"]
    print(f"\nPython layer on top of the C call: {python:.2f} us")


if __name__ == "__main__":
    main()
