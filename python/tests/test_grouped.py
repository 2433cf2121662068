"""moss_jit.grouped_gemm on CPU tensors (the FP64 reference expert by
expert) against an independent reference: each expert's rows dequantized
and multiplied in float64 by torch; stack_experts; the argument errors.
test_cuda holds the GPU kernel to the per-expert GEMMs. Skips without
torch."""

import unittest

import numpy as np

from support import have_torch, llm_like

if not have_torch():
    raise unittest.SkipTest("torch is not installed")

import torch  # noqa: E402

import moss_jit  # noqa: E402
from moss_jit import reference  # noqa: E402


def random_rows(rng, groups, mean):
    """Rows per expert with an empty expert and a single row among them."""
    rows = [int(r) for r in rng.integers(0, 2 * mean + 1, size=groups)]
    if groups >= 3:
        rows[0], rows[1] = 0, 1
    if sum(rows) == 0:
        rows[-1] = mean
    return rows


def offsets_of(rows):
    return torch.tensor(np.concatenate([[0], np.cumsum(rows)]),
                        dtype=torch.int32)


class GroupedGemmCpuTest(unittest.TestCase):
    def check(self, a_scheme, b_scheme, groups, n, k, bias=False,
              scope="row", out_dtype=torch.bfloat16):
        rng = np.random.default_rng()
        rows = random_rows(rng, groups, 20)
        m = sum(rows)
        x = torch.from_numpy(llm_like(rng, m, k))
        a = moss_jit.quantize(x, a_scheme, **(
            {"global_scope": scope} if a_scheme == "moss" else {}))
        weights = [moss_jit.quantize(
            torch.from_numpy(rng.standard_normal((n, k)).astype(np.float32)),
            b_scheme) for _ in range(groups)]
        b_bias = torch.from_numpy(
            rng.standard_normal((groups, n)).astype(np.float32)) \
            if bias else None
        offsets = offsets_of(rows)
        got = moss_jit.grouped_gemm(a, weights, offsets, out_dtype=out_dtype,
                                    bias=b_bias)
        self.assertEqual(tuple(got.shape), (m, n))
        self.assertEqual(got.dtype, out_dtype)
        # Independent: the whole A dequantized once, then sliced.
        dq_a = reference.dequantize(a).to(torch.float64)
        start = 0
        for g, r in enumerate(rows):
            want = dq_a[start:start + r] @ \
                reference.dequantize(weights[g]).to(torch.float64).T
            if bias:
                want = want + b_bias[g].to(torch.float64)
            # Both are FP64 sums rounded once to the output type; their
            # order may differ, so allow one rounding step of it.
            torch.testing.assert_close(got[start:start + r],
                                       want.to(out_dtype),
                                       msg=f"expert {g} of {rows}")
            start += r
        # A stacked ExpertWeights gives the same.
        stacked = moss_jit.stack_experts(weights)
        self.assertEqual(stacked.codes.shape, (groups * n, k))
        self.assertTrue(torch.equal(
            moss_jit.grouped_gemm(a, stacked, offsets, out_dtype=out_dtype,
                                  bias=b_bias), got))

    def test_moss_rows_x_per_tensor_experts(self):
        self.check("moss", "per-tensor", 6, 48, 128, bias=True)

    def test_per_row_x_per_row(self):
        self.check("per-row", "per-row", 3, 32, 64, out_dtype=torch.float32)

    def test_mxfp8_x_mxfp8_one_expert(self):
        self.check("mxfp8", "mxfp8", 1, 40, 96)

    def test_masked_layout_computes_each_experts_counted_rows(self):
        rng = np.random.default_rng()
        groups, capacity, n, k = 5, 12, 24, 64
        counts = [int(c) for c in rng.integers(0, capacity + 1, size=groups)]
        counts[0], counts[1] = 0, capacity
        m = groups * capacity
        x = torch.from_numpy(llm_like(rng, m, k))
        a = moss_jit.quantize(x, "moss", global_scope="row")
        weights = moss_jit.stack_experts([moss_jit.quantize(
            torch.from_numpy(rng.standard_normal((n, k)).astype(np.float32)),
            "per-tensor") for _ in range(groups)])
        b_bias = torch.from_numpy(
            rng.standard_normal((groups, n)).astype(np.float32))
        got = moss_jit.grouped_gemm(
            a, weights, torch.tensor(counts, dtype=torch.int32),
            bias=b_bias, layout="masked")
        self.assertEqual(tuple(got.shape), (m, n))
        dq_a = reference.dequantize(a).to(torch.float64)
        for g, count in enumerate(counts):
            rows = slice(g * capacity, g * capacity + count)
            want = dq_a[rows] @ reference.dequantize(
                weights.expert(g)).to(torch.float64).T + \
                b_bias[g].to(torch.float64)
            torch.testing.assert_close(got[rows], want.to(torch.bfloat16),
                                       msg=f"expert {g} of {counts}")
            unused = got[g * capacity + count:(g + 1) * capacity]
            self.assertTrue(torch.equal(unused, torch.zeros_like(unused)))
        # A given output keeps what the experts do not write.
        out = torch.full((m, n), 7.0, dtype=torch.bfloat16)
        again = moss_jit.grouped_gemm(
            a, weights, torch.tensor(counts, dtype=torch.int32),
            bias=b_bias, layout="masked", out=out)
        self.assertIs(again, out)
        for g, count in enumerate(counts):
            rows = slice(g * capacity, g * capacity + count)
            self.assertTrue(torch.equal(out[rows], got[rows]))
            unused = out[g * capacity + count:(g + 1) * capacity]
            self.assertTrue(torch.equal(unused, torch.full_like(unused, 7.0)))

    def test_stacked_experts_keep_their_own_scales(self):
        rng = np.random.default_rng()
        weights = [moss_jit.quantize(torch.from_numpy(
            (rng.standard_normal((16, 64)) * 10.0 ** g).astype(np.float32)),
            "per-tensor") for g in range(3)]
        stacked = moss_jit.stack_experts(weights)
        self.assertEqual(tuple(stacked.global_scales.shape), (3,))
        for g in range(3):
            self.assertTrue(torch.equal(stacked.expert(g).codes.view(
                torch.uint8), weights[g].codes.view(torch.uint8)))
            self.assertTrue(torch.equal(stacked.expert(g).global_scales,
                                        weights[g].global_scales))


class GroupedGemmArgumentsTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng()
        self.a = moss_jit.quantize(torch.from_numpy(llm_like(rng, 10, 64)),
                                   "moss", global_scope="row")
        self.weights = [moss_jit.quantize(
            torch.randn(16, 64), "per-tensor") for _ in range(2)]
        self.offsets = torch.tensor([0, 4, 10], dtype=torch.int32)

    def test_offsets_are_checked(self):
        for offsets, text in (
                (torch.tensor([0, 4, 10], dtype=torch.int64), "int32"),
                (torch.tensor([0, 10], dtype=torch.int32), r"\[3\]"),
                (torch.tensor([0, 6, 4], dtype=torch.int32), "not decrease"),
                (torch.tensor([0, 4, 9], dtype=torch.int32), "end at M=10"),
                ([0, 4, 10], "torch tensor")):
            with self.subTest(offsets=offsets):
                with self.assertRaisesRegex((TypeError, ValueError), text):
                    moss_jit.grouped_gemm(self.a, self.weights, offsets)

    def test_masked_counts_and_rows_are_checked(self):
        counts = torch.tensor([3, 5], dtype=torch.int32)
        for a_rows, offsets, text in (
                (10, torch.tensor([3, 6], dtype=torch.int32), r"\[0, 5\]"),
                (10, torch.tensor([-1, 2], dtype=torch.int32), r"\[0, 5\]"),
                (10, torch.tensor([0, 3, 5], dtype=torch.int32), r"\[2\]"),
                (9, counts, "not a multiple of the 2 experts")):
            with self.subTest(offsets=offsets, a_rows=a_rows):
                a = moss_jit.quantize(torch.randn(a_rows, 64), "moss",
                                      global_scope="row")
                with self.assertRaisesRegex(ValueError, text):
                    moss_jit.grouped_gemm(a, self.weights, offsets,
                                          layout="masked")
        with self.assertRaisesRegex(ValueError, "layout"):
            moss_jit.grouped_gemm(self.a, self.weights, counts,
                                  layout="padded")
        for out, text in ((torch.zeros(10, 16), "torch.bfloat16"),
                          (torch.zeros(16, 10, dtype=torch.bfloat16).T,
                           "contiguous"),
                          ("d", "torch tensor")):
            with self.subTest(out=out):
                with self.assertRaisesRegex((TypeError, ValueError), text):
                    moss_jit.grouped_gemm(self.a, self.weights, self.offsets,
                                          out=out)

    def test_experts_must_match(self):
        other = moss_jit.quantize(torch.randn(16, 64), "per-row")
        with self.assertRaisesRegex(ValueError, r"weights\[1\]"):
            moss_jit.grouped_gemm(self.a, [self.weights[0], other],
                                  self.offsets)
        wider = moss_jit.quantize(torch.randn(16, 128), "per-tensor")
        with self.assertRaisesRegex(ValueError, r"weights\[1\]"):
            moss_jit.stack_experts([self.weights[0], wider])
        with self.assertRaisesRegex(ValueError, "at least one"):
            moss_jit.stack_experts([])

    def test_a_is_quantized_row_by_row(self):
        square = moss_jit.quantize(torch.randn(256, 128), "per-group",
                                   block=(128, 128))
        weights = [moss_jit.quantize(torch.randn(16, 128), "per-tensor")
                   for _ in range(2)]
        with self.assertRaisesRegex(ValueError, "blocks span 128 rows"):
            moss_jit.grouped_gemm(
                square, weights,
                torch.tensor([0, 100, 256], dtype=torch.int32))

    def test_bias_is_per_expert(self):
        with self.assertRaisesRegex(ValueError, r"\(2, 16\)"):
            moss_jit.grouped_gemm(self.a, self.weights, self.offsets,
                                  bias=torch.zeros(16))


if __name__ == "__main__":
    unittest.main()
