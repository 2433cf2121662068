"""moss_jit.grouped_gemm on CPU tensors (the FP64 reference expert by
expert) against an independent reference: each expert's rows dequantized
and multiplied in float64 by torch; stack_experts; the argument errors.
test_cuda holds the GPU kernel to the per-expert GEMMs. Skips without
torch."""

import unittest
from unittest import mock

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


def quantized_grouped_linear(layer, x, offsets, dy):
    """The MOSS GroupedLinear's forward and gradients from its operands
    quantized by moss_jit.quantize (the host reference quantizers) and
    dequantized by reference.dequantize, multiplied in float64 expert by
    expert: what the layer computes, summed exactly."""
    cfg = layer.config
    w = layer.weight.detach()

    def dq(t, *args, **kwargs):
        return reference.dequantize(
            moss_jit.quantize(t, *args, **kwargs)).to(torch.float64)

    def moss(t, fmt, transpose=False):
        return dq(t, "moss", fmt, cfg.block, cfg.global_scope,
                  transpose=transpose, fold=cfg.fold)

    xq, dyq = moss(x, cfg.x_format), moss(dy, cfg.grad_format)
    y = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float64)
    dx = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    dw = torch.zeros(w.shape, dtype=torch.float64)
    bounds = offsets.tolist()
    # The weight gradient's operands: all tokens, each expert's padded
    # with zero rows to a multiple of 128 (and zeros to T + 127 G rounded
    # up to 128), quantized transposed as one.
    groups = len(bounds) - 1
    k = (x.shape[0] + 127 * groups + 127) // 128 * 128
    dy_pad = torch.zeros(k, dy.shape[1], dtype=dy.dtype)
    x_pad = torch.zeros(k, x.shape[1], dtype=x.dtype)
    columns, at = [], 0
    for s, e in zip(bounds, bounds[1:]):
        dy_pad[at:at + e - s] = dy[s:e]
        x_pad[at:at + e - s] = x[s:e]
        columns.append((at, at + e - s))
        at += -(-(e - s) // 128) * 128
    dyq_t = moss(dy_pad, cfg.grad_format, True)
    xq_t = moss(x_pad, cfg.x_format, True)
    for g, (s, e) in enumerate(zip(bounds, bounds[1:])):
        if s == e:
            continue
        # Each expert's weight per tensor, its transpose at the same scale.
        wq = dq(w[g], "per-tensor")
        y[s:e] = xq[s:e] @ wq.T
        if layer.bias is not None:
            y[s:e] += layer.bias.detach()[g].double()
        dx[s:e] = dyq[s:e] @ dq(w[g], "per-tensor", transpose=True).T
        c0, c1 = columns[g]
        dw[g] = dyq_t[:, c0:c1] @ xq_t[:, c0:c1].T
    return y, dx, dw


class KGroupedGemmCpuTest(unittest.TestCase):
    """moss_jit.k_grouped_gemm on CPU tensors against each expert's columns
    of the whole operands dequantized, multiplied in float64 by torch."""

    def check(self, a_scheme, b_scheme, cols, m, n, out_dtype=torch.bfloat16,
              **options):
        rng = np.random.default_rng()
        k = sum(cols)
        a = moss_jit.quantize(torch.from_numpy(llm_like(rng, m, k)), a_scheme,
                              **options)
        b = moss_jit.quantize(torch.from_numpy(
            rng.standard_normal((n, k)).astype(np.float32)), b_scheme,
            **options)
        offsets = offsets_of(cols)
        got = moss_jit.k_grouped_gemm(a, b, offsets, out_dtype=out_dtype)
        self.assertEqual(tuple(got.shape), (len(cols), m, n))
        self.assertEqual(got.dtype, out_dtype)
        dq_a = reference.dequantize(a).to(torch.float64)
        dq_b = reference.dequantize(b).to(torch.float64)
        start = 0
        for g, c in enumerate(cols):
            want = dq_a[:, start:start + c] @ dq_b[:, start:start + c].T
            torch.testing.assert_close(got[g], want.to(out_dtype),
                                       msg=f"expert {g} of {cols}")
            start += c

    def test_moss_x_moss_with_an_empty_expert(self):
        self.check("moss", "moss", [256, 0, 128, 384], 24, 40,
                   global_scope="row")

    def test_per_group_x_per_group(self):
        self.check("per-group", "per-group", [128, 256], 16, 256,
                   out_dtype=torch.float32, block=(1, 128))

    def test_mxfp8_one_expert(self):
        self.check("mxfp8", "mxfp8", [512], 8, 24)

    def test_arguments_are_checked(self):
        a = moss_jit.quantize(torch.randn(8, 256), "per-tensor")
        b = moss_jit.quantize(torch.randn(16, 256), "per-tensor")
        good = torch.tensor([0, 128, 256], dtype=torch.int32)
        for offsets, text in (
                (torch.tensor([0, 100, 256], dtype=torch.int32),
                 "multiples of 128"),
                (torch.tensor([0, 256, 128], dtype=torch.int32),
                 "not decrease"),
                (torch.tensor([0, 128, 384], dtype=torch.int32),
                 "at most at K=256"),
                (good.to(torch.int64), "int32"),
                (torch.tensor([0], dtype=torch.int32), r"\[G \+ 1\]")):
            with self.subTest(offsets=offsets):
                with self.assertRaisesRegex(ValueError, text):
                    moss_jit.k_grouped_gemm(a, b, offsets)
        odd = moss_jit.quantize(torch.randn(8, 96), "per-tensor")
        with self.assertRaisesRegex(ValueError, "multiple of 128"):
            moss_jit.k_grouped_gemm(odd, odd, torch.tensor(
                [0, 96], dtype=torch.int32))
        with self.assertRaisesRegex(ValueError, "same K"):
            moss_jit.k_grouped_gemm(a, odd, good)
        for out_dtype in (torch.int8, [torch.float32]):
            with self.assertRaisesRegex(TypeError, "out_dtype"):
                moss_jit.k_grouped_gemm(a, b, good, out_dtype=out_dtype)
        for mma in ("tf32", ["fp8"]):
            with self.assertRaisesRegex(ValueError, "mma="):
                moss_jit.k_grouped_gemm(a, b, good, mma=mma)


class GroupedLinearCpuTest(unittest.TestCase):
    def test_forward_and_gradients_are_the_quantized_products(self):
        rng = np.random.default_rng()
        torch.manual_seed(int(rng.integers(1 << 30)))
        groups, fin, fout = 5, 64, 96
        layer = moss_jit.nn.GroupedLinear(groups, fin, fout, bias=True)
        rows = random_rows(rng, groups, 12)
        offsets = offsets_of(rows)
        x = torch.from_numpy(llm_like(rng, sum(rows), fin)).requires_grad_()
        y = layer(x, offsets)
        self.assertEqual(tuple(y.shape), (sum(rows), fout))
        dy = torch.randn_like(y)
        y.backward(dy)
        want_y, want_dx, want_dw = quantized_grouped_linear(
            layer, x.detach(), offsets, dy)
        close = dict(rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y.detach().double(), want_y, **close)
        torch.testing.assert_close(x.grad.double(), want_dx, **close)
        torch.testing.assert_close(layer.weight.grad.double(), want_dw,
                                   **close)
        want_db = torch.stack([dy[s:e].sum(0) for s, e in zip(
            offsets.tolist(), offsets.tolist()[1:])])
        torch.testing.assert_close(layer.bias.grad, want_db)

    def test_close_to_a_loop_of_dense_linears(self):
        # Against each expert's torch.nn.Linear in float64, unquantized:
        # within FP8's error (a few percent of each tensor's size).
        rng = np.random.default_rng()
        torch.manual_seed(int(rng.integers(1 << 30)))
        groups, fin, fout = 4, 128, 64
        layer = moss_jit.nn.GroupedLinear(groups, fin, fout)
        rows = [40, 0, 73, 1]
        offsets = offsets_of(rows)
        x = torch.randn(sum(rows), fin, requires_grad=True)
        layer(x, offsets).sum().backward()
        xd = x.detach().double().requires_grad_()
        w = layer.weight.detach().double().requires_grad_()
        bounds = offsets.tolist()
        torch.cat([xd[s:e] @ w[g].T for g, (s, e) in enumerate(
            zip(bounds, bounds[1:]))]).sum().backward()

        def rel(got, want):
            return float((got.double() - want).norm() / want.norm())

        self.assertLess(rel(x.grad, xd.grad), 0.05)
        self.assertLess(rel(layer.weight.grad, w.grad), 0.05)
        self.assertTrue(torch.equal(layer.weight.grad[1],
                                    torch.zeros_like(layer.weight.grad[1])))

    def test_the_expert_padding_maps_each_token_once(self):
        # Each expert's tokens in order from a multiple of 128, -1 between;
        # offsets out of order give some map, never an index error.
        from moss_jit.nn import _expert_padding
        rng = np.random.default_rng()
        rows = [int(r) for r in rng.integers(0, 300, size=5)]
        rows[1] = 0
        source, padded, expert = _expert_padding(offsets_of(rows), sum(rows))
        want, starts = [], [0]
        for g, r in enumerate(rows):
            want += list(range(sum(rows[:g]), sum(rows[:g + 1])))
            want += [-1] * (-r % 128)
            starts.append(len(want))
        k = (sum(rows) + 127 * 5 + 127) // 128 * 128
        self.assertEqual(source.tolist(), want + [-1] * (k - len(want)))
        self.assertEqual(padded.tolist(), starts)
        self.assertEqual(expert.tolist(),
                         [g for g, r in enumerate(rows) for _ in range(r)])
        # (Unclamped, tokens 12 to 39 would land past the map's end.)
        bad = torch.tensor([0, -500, -500, -500], dtype=torch.int32)
        source, _, _ = _expert_padding(bad, 40)
        self.assertEqual(source.numel(), (40 + 127 * 3 + 127) // 128 * 128)

    def test_the_forward_keeps_fp8_codes_not_x(self):
        # X^T over the tokens padded by expert and the experts' W^T wait for
        # the backward as FP8 codes; X itself is not kept.
        layer = moss_jit.nn.GroupedLinear(2, 64, 96)
        x = torch.randn(40, 64, requires_grad=True)
        offsets = offsets_of([25, 15])
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(t) or t, lambda t: t):
            layer(x, offsets)
        self.assertFalse(any(t.dtype == torch.float32 and t.shape == x.shape
                             for t in saved))
        fp8 = [tuple(t.shape) for t in saved
               if t.dtype == torch.float8_e4m3fn]
        # K = 40 + 127 * 2 rounded up to 128; the experts' W^T [2 * 64, 96].
        self.assertIn((64, 384), fp8)
        self.assertIn((128, 96), fp8)

    def test_no_grad_makes_no_transposes(self):
        # Inference: only X's and the weights' row-major codes.
        layer = moss_jit.nn.GroupedLinear(2, 64, 96)
        x = torch.randn(40, 64, requires_grad=True)
        offsets = offsets_of([25, 15])
        real = moss_jit.nn.quantize
        transposes = []

        def counted(t, *args, **kwargs):
            transposes.append(bool(kwargs.get("transpose")))
            return real(t, *args, **kwargs)

        with mock.patch.object(moss_jit.nn, "quantize", counted), \
                mock.patch.object(moss_jit.nn, "quantize_both_layouts") as both:
            with torch.no_grad():
                y = layer(x, offsets)
            # X's codes and each of the two experts' weights.
            self.assertEqual(transposes, [False, False, False])
            both.assert_not_called()
        self.assertFalse(y.requires_grad)

    def test_the_weights_are_cast_again_only_when_they_change(self):
        # Inference and accumulated micro-batches reuse the experts' codes;
        # an in-place change (the version counter) and a fused optimizer's
        # step (reported through attach_optimizer) make them again.
        rng = np.random.default_rng()
        torch.manual_seed(int(rng.integers(1 << 30)))
        layer = moss_jit.nn.GroupedLinear(3, 64, 32)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2,
                                      fused=True)
        moss_jit.attach_optimizer(optimizer)
        offsets = offsets_of([7, 0, 9])
        x = torch.from_numpy(llm_like(rng, 16, 64))

        def fresh_layers_output():
            fresh = moss_jit.nn.GroupedLinear(3, 64, 32)
            with torch.no_grad():
                fresh.weight.copy_(layer.weight)
                return fresh(x, offsets)

        def casts():  # of the layer's three experts, each exact on the CPU
            self.assertEqual(sum(layer.weight_casts.values()),
                             layer.weight_casts["exact"])
            return layer.weight_casts["exact"] // 3

        with torch.no_grad():
            layer(x, offsets)
            layer(x, offsets)
        self.assertEqual(casts(), 1)
        with torch.no_grad():
            layer.weight.mul_(-0.5)
            after_change = layer(x, offsets)
        self.assertEqual(casts(), 2)
        self.assertTrue(torch.equal(after_change, fresh_layers_output()))
        # Training needs the transposes too: a third cast, then the step's.
        layer(x.clone().requires_grad_(), offsets).square().sum().backward()
        optimizer.step()
        with torch.no_grad():
            after_step = layer(x, offsets)
        self.assertEqual(casts(), 4)
        self.assertTrue(torch.equal(after_step, fresh_layers_output()))
        self.assertFalse(torch.equal(after_step, after_change))

    def test_bf16_tokens_and_no_tokens(self):
        layer = moss_jit.nn.GroupedLinear(3, 32, 64, bias=True,
                                          dtype=torch.bfloat16)
        x = torch.randn(20, 32, dtype=torch.bfloat16, requires_grad=True)
        y = layer(x, torch.tensor([0, 5, 5, 20], dtype=torch.int32))
        self.assertEqual(y.dtype, torch.bfloat16)
        y.float().sum().backward()
        self.assertEqual(x.grad.dtype, torch.bfloat16)
        self.assertEqual(layer.weight.grad.dtype, torch.bfloat16)
        empty = torch.zeros(0, 32, dtype=torch.bfloat16, requires_grad=True)
        out = layer(empty, torch.zeros(4, dtype=torch.int32))
        self.assertEqual(tuple(out.shape), (0, 64))

    def test_bad_input_is_refused(self):
        with self.assertRaisesRegex(ValueError, "in_features=40"):
            moss_jit.nn.GroupedLinear(2, 40, 64)
        with self.assertRaisesRegex(ValueError, "num_experts=0"):
            moss_jit.nn.GroupedLinear(0, 32, 64)
        layer = moss_jit.nn.GroupedLinear(2, 32, 64)
        with self.assertRaisesRegex(ValueError, r"\[tokens, 32\]"):
            layer(torch.randn(4, 64), torch.tensor([0, 2, 4],
                                                   dtype=torch.int32))
        with self.assertRaisesRegex(ValueError, r"offsets"):
            layer(torch.randn(4, 32), torch.tensor([0, 4], dtype=torch.int32))


class GroupedCompileCpuTest(unittest.TestCase):
    def test_torch_compile_runs_the_grouped_op(self):
        # grouped_gemm and the GroupedLinear under torch.compile: the same
        # output and gradients as eager.
        rng = np.random.default_rng()
        torch.manual_seed(int(rng.integers(1 << 30)))
        layer = moss_jit.nn.GroupedLinear(4, 64, 32, bias=True)
        offsets = offsets_of([9, 0, 17, 6])
        x = torch.from_numpy(llm_like(rng, 32, 64)).requires_grad_()
        eager = layer(x, offsets)
        eager.sum().backward()
        grads = [x.grad.clone()] + [p.grad.clone()
                                    for p in layer.parameters()]
        x.grad = None
        layer.zero_grad()
        torch._dynamo.reset()
        compiled = torch.compile(layer)
        out = compiled(x, offsets)
        out.sum().backward()
        torch.testing.assert_close(out, eager)
        for got, want in zip([x.grad] + [p.grad for p in layer.parameters()],
                             grads):
            torch.testing.assert_close(got, want)
        a = moss_jit.quantize(x.detach(), "moss", global_scope="row")
        experts = moss_jit.stack_experts([moss_jit.quantize(
            torch.randn(16, 64), "per-row") for _ in range(4)])
        # The op's schema, fake shapes and dispatch (torch.library.opcheck).
        from moss_jit import _torch as mt
        stacked = moss_jit.MossTensor(experts.codes, None,
                                      experts.global_scales, "per-row")
        torch.library.opcheck(torch.ops.moss_jit.grouped_gemm.default, (
            *mt._op_operand(a), a.descriptor(), *mt._op_operand(stacked),
            stacked.descriptor(), 4, offsets_of([9, 0, 17, 6]),
            torch.bfloat16, torch.randn(4, 16), "auto", False))
        run = torch.compile(lambda a, b, o: moss_jit.grouped_gemm(
            a, b, o, layout="masked"))
        counts = torch.tensor([8, 0, 3, 8], dtype=torch.int32)
        torch.testing.assert_close(
            run(a, experts, counts),
            moss_jit.grouped_gemm(a, experts, counts, layout="masked"))

    def test_torch_compile_runs_the_k_grouped_op(self):
        a = moss_jit.quantize(torch.randn(24, 384), "moss",
                              global_scope="row")
        b = moss_jit.quantize(torch.randn(40, 384), "moss",
                              global_scope="row")
        offsets = offsets_of([128, 0, 256])
        from moss_jit import _torch as mt
        torch.library.opcheck(torch.ops.moss_jit.k_grouped_gemm.default, (
            *mt._op_operand(a), a.descriptor(), *mt._op_operand(b),
            b.descriptor(), offsets, torch.float32, "auto"))
        torch._dynamo.reset()
        run = torch.compile(lambda a, b, o: moss_jit.k_grouped_gemm(a, b, o),
                            fullgraph=True)
        torch.testing.assert_close(run(a, b, offsets),
                                   moss_jit.k_grouped_gemm(a, b, offsets))


class DispatchCpuTest(unittest.TestCase):
    def test_route_sorts_pairs_by_expert_and_keeps_token_order(self):
        rng = np.random.default_rng()
        tokens, top_k, groups = 37, 3, 6
        ids = torch.from_numpy(np.stack([rng.choice(groups, top_k,
                                                    replace=False)
                                         for _ in range(tokens)]))
        token_index, offsets, order = moss_jit.route(ids, groups)
        self.assertEqual(token_index.dtype, torch.int32)
        self.assertEqual(offsets.dtype, torch.int32)
        # Independent: each expert's tokens by a loop over the routing.
        start = 0
        for g in range(groups):
            want = [t for t in range(tokens) for e in ids[t].tolist()
                    if e == g]
            end = start + len(want)
            self.assertEqual(offsets[g].item(), start)
            self.assertEqual(token_index[start:end].tolist(), want)
            for r in range(start, end):
                t, j = divmod(order[r].item(), top_k)
                self.assertEqual((t, ids[t, j].item()),
                                 (token_index[r].item(), g))
            start = end
        self.assertEqual(offsets[-1].item(), tokens * top_k)

    def test_dispatch_quantize_is_the_quantization_of_the_gathered_rows(self):
        rng = np.random.default_rng()
        x = torch.from_numpy(llm_like(rng, 20, 64))
        index = torch.tensor(rng.integers(0, 20, size=33), dtype=torch.int32)
        got = moss_jit.dispatch_quantize(x, index)
        want = moss_jit.quantize(x[index.long()], "moss",
                                 global_scope="row", fold="row")
        self.assertTrue(torch.equal(got.codes.view(torch.uint8),
                                    want.codes.view(torch.uint8)))
        self.assertIsNone(got.local_scales)  # folded by rows
        self.assertTrue(torch.equal(got.global_scales, want.global_scales))
        self.assertEqual(got[3:], want[3:])
        with self.assertRaisesRegex(ValueError, r"\[0, 20\)"):
            moss_jit.dispatch_quantize(x, torch.tensor([0, 20],
                                                       dtype=torch.int32))
        with self.assertRaisesRegex(TypeError, "int32"):
            moss_jit.dispatch_quantize(x, torch.tensor([0, 1]))

    def test_transposed_dispatch_reads_minus_one_as_a_row_of_zeros(self):
        # The k-grouped GEMM's operands: each expert's tokens padded with
        # zero rows to 128, quantized K-major over them, from x itself.
        rng = np.random.default_rng()
        x = torch.from_numpy(llm_like(rng, 50, 96)).to(torch.bfloat16)
        index = torch.full((256,), -1, dtype=torch.int32)
        index[:30] = torch.from_numpy(rng.integers(0, 50, size=30))
        index[128:128 + 77] = torch.from_numpy(rng.integers(0, 50, size=77))
        padded = torch.zeros(256, 96, dtype=torch.bfloat16)
        padded[index >= 0] = x[index[index >= 0].long()]
        for fmt, scope in (("e4m3", "row"), ("e5m2", "tensor")):
            got = moss_jit.dispatch_quantize(x, index, format=fmt,
                                             global_scope=scope,
                                             transpose=True)
            want = moss_jit.quantize(padded, "moss", fmt, global_scope=scope,
                                     transpose=True, fold="row")
            self.assertEqual(tuple(got.codes.shape), (96, 256))
            self.assertTrue(torch.equal(got.codes.view(torch.uint8),
                                        want.codes.view(torch.uint8)))
            self.assertTrue(torch.equal(got.global_scales,
                                        want.global_scales))
            self.assertEqual(got[3:], want[3:])
        with self.assertRaisesRegex(ValueError, r"\[-1, 50\)"):
            moss_jit.dispatch_quantize(x, torch.tensor([-2] * 32,
                                                       dtype=torch.int32),
                                       transpose=True)
        with self.assertRaisesRegex(ValueError, r"\[0, 50\)"):
            moss_jit.dispatch_quantize(x, torch.tensor([-1, 0],
                                                       dtype=torch.int32))
        with self.assertRaisesRegex(ValueError, "transpose"):
            moss_jit.dispatch_quantize(x, index, transpose="yes")

    def test_a_moe_layer_through_route_dispatch_and_combine(self):
        # route -> dispatch_quantize -> grouped_gemm -> combine against each
        # token's weighted sum over its experts in float64.
        rng = np.random.default_rng()
        tokens, top_k, groups, k, n = 24, 2, 4, 64, 32
        x = torch.from_numpy(llm_like(rng, tokens, k))
        ids = torch.from_numpy(np.stack([rng.choice(groups, top_k,
                                                    replace=False)
                                         for _ in range(tokens)]))
        weights = torch.rand(tokens, top_k)
        experts = moss_jit.stack_experts([moss_jit.quantize(
            torch.randn(n, k), "per-tensor") for _ in range(groups)])
        token_index, offsets, order = moss_jit.route(ids, groups)
        a = moss_jit.dispatch_quantize(x, token_index)
        y = moss_jit.grouped_gemm(a, experts, offsets,
                                  out_dtype=torch.float32)
        out = moss_jit.combine(y, token_index, tokens, weights, order)
        self.assertEqual(tuple(out.shape), (tokens, n))
        dq_x = reference.dequantize(moss_jit.quantize(
            x, "moss", global_scope="row", fold="row")).double()
        want = torch.zeros(tokens, n, dtype=torch.float64)
        for t in range(tokens):
            for j in range(top_k):
                g = ids[t, j].item()
                w = reference.dequantize(experts.expert(g)).double()
                want[t] += weights[t, j].double() * (dq_x[t] @ w.T)
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
