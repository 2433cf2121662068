"""The torch API on a Hopper GPU: the JIT quantizers bit for bit as the host
reference, every GEMM scheme pair against the FP64 product of its operands
(odd shapes included), the Linear's forward, dgrad and wgrad against the FP64
products of the same quantized operands, torch.compile, CUDA graphs,
threads and device errors. Skips without a CUDA GPU."""

import threading
import unittest

import numpy as np

from support import QUANTIZE_CASES, have_cuda, llm_like

if not have_cuda():
    raise unittest.SkipTest("no CUDA GPU (torch.cuda.is_available() is "
                            "False, or torch is missing)")

import torch  # noqa: E402

import moss_jit  # noqa: E402

if torch.cuda.get_device_capability(0) != (9, 0):
    raise unittest.SkipTest("cuda:0 is not a Hopper GPU (sm_90)")

DEVICE = torch.device("cuda", 0)


def poison_allocator(*tensors_like):
    """Leaves blocks the size of these tensors full of 0x7E bytes in torch's
    caching allocator, so that outputs of those sizes allocated next start
    as garbage rather than as earlier results or zeros."""
    blocks = [torch.full((t.numel() * t.element_size(),), 0x7E,
                         dtype=torch.uint8, device=DEVICE)
              for t in tensors_like]
    del blocks


def rel_error(got, want):
    got = got.double()
    return float((got - want).norm() / want.norm())


def row_shapes(block_cols):
    k = 4064 if 4064 % block_cols == 0 else 4096
    return [(1, k), (7, k), (333, k)]


class QuantizeCudaTest(unittest.TestCase):
    def test_gpu_quantizers_match_the_host_reference_bit_for_bit(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, transpose, fold = case
            _, block_cols = moss_jit.schemes.parse_block(scheme, block)
            if transpose:
                # K (the rows) a multiple of the block, and of 128 for the
                # 128 fold.
                k = 64 if block_cols <= 64 and fold != "128" else 128
                shapes = [(384, 2049), (k, 33)]
            else:
                shapes = row_shapes(max(block_cols, 128 if fold == "128"
                                        else 1))
            for shape in shapes:
                for dtype in (torch.float32, torch.bfloat16):
                    with self.subTest(case=case, shape=shape, dtype=dtype):
                        x = torch.from_numpy(llm_like(rng, *shape)).to(dtype)
                        want = moss_jit.quantize(x, scheme, fmt, block, scope,
                                                 transpose, fold)
                        poison_allocator(*[t for t in want[:3]
                                           if t is not None])
                        counters = torch.zeros(2, dtype=torch.int64,
                                               device=DEVICE)
                        got = moss_jit.quantize(x.to(DEVICE), scheme, fmt,
                                                block, scope, transpose, fold,
                                                counters=counters)
                        for g, w in zip(got[:3], want[:3]):
                            if w is None:
                                self.assertIsNone(g)
                                continue
                            self.assertEqual(g.device, DEVICE)
                            self.assertTrue(torch.equal(
                                g.cpu().view(torch.uint8),
                                w.view(torch.uint8)))


class QuantizeBothLayoutsCudaTest(unittest.TestCase):
    def test_both_layouts_match_the_host_reference_bit_for_bit(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, _, fold = case
            _, block_cols = moss_jit.schemes.parse_block(scheme, block)
            if fold == "128" or block == (128, 128):
                continue  # refused: see test_what_one_read_cannot_write
            for dtype in (torch.float32, torch.bfloat16):
                if block_cols * (4 if dtype == torch.float32 else 2) > 128:
                    continue
                # (No blocks: 333 rows, so the transposed rows are not
                # whole 16-byte vectors.)
                shapes = [(384, 2112), (64, 192)] if block_cols else \
                    [(333, 2056), (1, 16)]
                for shape in shapes:
                    with self.subTest(case=case, shape=shape, dtype=dtype):
                        x = torch.from_numpy(llm_like(rng, *shape)).to(dtype)
                        want = [moss_jit.quantize(x, scheme, fmt, block,
                                                  scope, t, fold)
                                for t in (False, True)]
                        poison_allocator(*[t for w in want for t in w[:3]
                                           if t is not None])
                        got = moss_jit.quantize_both_layouts(
                            x.to(DEVICE), scheme, fmt, block, scope, fold)
                        for g_layout, w_layout in zip(got, want):
                            self.assertEqual(g_layout.transposed,
                                             w_layout.transposed)
                            for g, w in zip(g_layout[:3], w_layout[:3]):
                                if w is None:
                                    self.assertIsNone(g)
                                    continue
                                self.assertEqual(g.device, DEVICE)
                                self.assertTrue(torch.equal(
                                    g.cpu().view(torch.uint8),
                                    w.view(torch.uint8)))

    def test_what_one_read_cannot_write(self):
        x = torch.randn(256, 512, device=DEVICE, dtype=torch.bfloat16)
        for args, message in (
                (("per-group", "e4m3", 128), "at most 64 along K"),
                (("moss", "e4m3", None, "tensor", "128"), "not per 128"),
                (("per-group", "e4m3", (128, 128)), "square per-group")):
            with self.subTest(args=args):
                # (libmoss's invalid-argument errors are ValueErrors.)
                with self.assertRaisesRegex(ValueError, message):
                    moss_jit.quantize_both_layouts(x, *args)


# (scheme, block, global_scope, fold) of the operands each side takes.
A_OPERANDS = [("per-tensor", None, "tensor", None),
              ("per-row", None, "tensor", None),
              ("per-group", 128, "tensor", None),
              ("mxfp8", None, "tensor", None),
              ("moss", None, "tensor", None),
              ("moss", None, "row", None),
              ("moss", None, "row", "row"),
              ("moss", None, "tensor", "128")]
B_OPERANDS = [("per-tensor", None, "tensor", None),
              ("per-row", None, "tensor", None),
              ("per-group", (128, 128), "tensor", None),
              ("mxfp8", None, "tensor", None),
              ("moss", None, "row", None)]


def quantized(rows, k, operand, fmt="e4m3", seed=None, scale=1.0):
    scheme, block, scope, fold = operand
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(llm_like(rng, rows, k) * np.float32(scale)).to(DEVICE)
    return moss_jit.quantize(x, scheme, fmt, block, scope, fold=fold)


class GemmCudaTest(unittest.TestCase):
    def check_gemm(self, a, b, out_dtype=torch.bfloat16, bias=None, c=None,
                   beta=1.0, tolerance=None, **kwargs):
        m, n = a.codes.shape[0], b.codes.shape[0]
        want = a.dequantize() @ b.dequantize().T
        if bias is not None:
            want = want + bias.double()
        if c is not None:
            want = want + beta * c.double()
        poison_allocator(torch.empty((m, n), dtype=out_dtype))
        d = moss_jit.gemm(a, b, out_dtype=out_dtype, bias=bias, c=c,
                          beta=beta, **kwargs)
        self.assertEqual(d.dtype, out_dtype)
        self.assertEqual(tuple(d.shape), (m, n))
        if tolerance is None:
            tolerance = 5e-3 if out_dtype != torch.float32 else 1e-3
        self.assertLess(rel_error(d, want), tolerance)
        return d, want

    def test_every_scheme_pair(self):
        m, n, k = 333, 2049, 4096
        for a_op in A_OPERANDS:
            for b_op in B_OPERANDS:
                with self.subTest(a=a_op, b=b_op):
                    self.check_gemm(quantized(m, k, a_op),
                                    quantized(n, k, b_op))

    def test_odd_shapes(self):
        for m in (1, 7, 333):
            for a_op, b_op in ((A_OPERANDS[5], B_OPERANDS[0]),
                               (A_OPERANDS[0], B_OPERANDS[0]),
                               (A_OPERANDS[3], B_OPERANDS[3])):
                with self.subTest(m=m, a=a_op, b=b_op):
                    self.check_gemm(quantized(m, 4064, a_op),
                                    quantized(2049, 4064, b_op))

    def test_promotion_cuts_a_long_ks_error(self):
        # A weight gradient's K (the tokens), per-row x per-row, f32 out
        # from the FP8 MMA (the Linear's dW):
        # promoted to FP32 every 128 of K, the error against FP64 is the
        # promote-128 class's (docs/PERFORMANCE.md: 1.5e-4 at K = 4096),
        # and under half of the tensor cores' own accumulation's.
        rng = np.random.default_rng()
        k = 16384
        a = moss_jit.quantize(torch.from_numpy(llm_like(rng, 256, k)).to(
            DEVICE), "per-row")
        b = moss_jit.quantize(torch.from_numpy(llm_like(rng, 512, k)).to(
            DEVICE), "per-row")
        d, want = self.check_gemm(a, b, torch.float32, tolerance=5e-4,
                                  mma="fp8", promote_k=128)
        fast = moss_jit.gemm(a, b, out_dtype=torch.float32, mma="fp8")
        self.assertLess(rel_error(d, want), rel_error(fast, want) / 2)

    def test_e5m2_gradients_against_e4m3_weights(self):
        a = quantized(333, 4064, A_OPERANDS[6], fmt="e5m2")
        self.check_gemm(a, quantized(2049, 4064, B_OPERANDS[0]))

    def test_epilogue_bias_c_beta_amax_and_output_types(self):
        m, n, k = 1024, 2049, 4096
        # Scaled down so that the products fit f16 (65504): llm_like's
        # outlier channels meeting heavy tails reach 1e5 at full scale.
        a = quantized(m, k, A_OPERANDS[5], scale=1 / 32)
        b = quantized(n, k, B_OPERANDS[0], scale=1 / 32)
        bias = torch.randn(n, device=DEVICE)
        for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
            for beta in (0.0, 1.0, -1.0, 0.5):
                with self.subTest(out=out_dtype, beta=beta):
                    c = torch.randn(m, n, device=DEVICE, dtype=out_dtype)
                    self.check_gemm(a, b, out_dtype, bias=bias, c=c,
                                    beta=beta, mma="fp8")
        d, amax = moss_jit.gemm(a, b, amax=True)
        self.assertEqual(float(amax), float(d.float().abs().max()))

    def test_the_default_stream_is_not_assumed(self):
        a = quantized(1024, 4096, A_OPERANDS[6])
        b = quantized(4096, 4096, B_OPERANDS[0])
        want = moss_jit.gemm(a, b)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                got = moss_jit.gemm(a, b)
        torch.cuda.current_stream().wait_stream(stream)
        self.assertTrue(torch.equal(got, want))

    def test_threads_get_their_own_contexts(self):
        a = quantized(512, 4096, A_OPERANDS[5])
        b = quantized(1024, 4096, B_OPERANDS[0])
        want = moss_jit.gemm(a, b)
        torch.cuda.synchronize()
        results, errors = [None] * 4, []

        def work(i):
            try:
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    results[i] = moss_jit.gemm(a, b)
                stream.synchronize()
            except Exception as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for r in results:
            self.assertTrue(torch.equal(r, want))

    def test_device_errors(self):
        a = quantized(64, 128, A_OPERANDS[5])
        b_cpu = moss_jit.quantize(torch.randn(32, 128), "per-tensor")
        with self.assertRaisesRegex(ValueError, "a is on cuda:0, b on cpu"):
            moss_jit.gemm(a, b_cpu)
        if torch.cuda.device_count() > 1:
            x1 = torch.randn(64, 128, device="cuda:1")
            q1 = moss_jit.quantize(x1, "moss")
            self.assertEqual(q1.codes.device, torch.device("cuda:1"))
            self.assertEqual(torch.cuda.current_device(), 0)
            want = moss_jit.quantize(x1.cpu(), "moss")
            self.assertTrue(torch.equal(q1.codes.cpu().view(torch.uint8),
                                        want.codes.view(torch.uint8)))

    def test_errors_after_a_planned_call(self):
        # The good call leaves a plan for its arguments; calls that differ
        # from them in anything the checks read get the checks' messages.
        a = quantized(64, 128, A_OPERANDS[5])
        b = quantized(32, 128, B_OPERANDS[0])
        want = moss_jit.gemm(a, b)
        strided = torch.empty(128, 32, dtype=b.codes.dtype, device=DEVICE).t()
        cases = [
            ((a._replace(codes=a.codes.view(torch.uint8)), b), {}, TypeError,
             "a.codes has dtype"),
            ((a, b._replace(codes=strided)), {}, ValueError,
             "b.codes must be a contiguous"),
            ((a._replace(local_scales=a.local_scales[:1]), b), {}, ValueError,
             "a.local_scales has shape"),
            ((a._replace(global_scales=a.global_scales.cpu()), b), {},
             ValueError, "a.global_scales must be"),
            ((a, b), {"bias": torch.randn(32)}, ValueError,
             "bias is on cpu, the operands on cuda:0"),
            ((a, b), {"c": torch.randn(32, 64, device=DEVICE).t()},
             ValueError, "c must be a contiguous"),
            ((a, b), {"beta": 2.0}, ValueError, "beta=2.0"),
            ((a, b), {"mma": "tf32"}, ValueError, "mma="),
        ]
        for args, kwargs, exception, text in cases:
            for attempt in range(2):  # a refused call leaves no plan
                with self.subTest(text=text, attempt=attempt):
                    with self.assertRaises(exception) as caught:
                        moss_jit.gemm(*args, **kwargs)
                    self.assertIn(text, str(caught.exception))
        self.assertTrue(torch.equal(moss_jit.gemm(a, b), want))

    def test_misaligned_input_is_refused(self):
        x = torch.randn(4 * 64 + 1, device=DEVICE)[1:].view(4, 64)
        with self.assertRaisesRegex(ValueError, "16-byte aligned"):
            moss_jit.quantize(x, "moss")


def reference_linear_cuda(layer, x, dy):
    """The Linear's outputs as FP64 products of the same quantized operands,
    quantized on the host."""
    c = layer.config
    x2 = x.reshape(-1, layer.in_features).cpu()
    dy2 = dy.reshape(-1, layer.out_features).cpu()
    w = layer.weight.detach().cpu()
    xq = moss_jit.quantize(x2, "moss", c.x_format, c.block, c.global_scope,
                           fold=c.fold)
    wq = moss_jit.quantize(w, "per-tensor")
    y = xq.dequantize() @ wq.dequantize().T
    if layer.bias is not None:
        y = y + layer.bias.detach().cpu().double()
    dyq = moss_jit.quantize(dy2, "moss", c.grad_format, c.block,
                            c.global_scope, fold=c.fold)
    dx = dyq.dequantize() @ wq.dequantize()
    pad = -x2.shape[0] % c.block
    x2p = torch.nn.functional.pad(x2, (0, 0, 0, pad))
    dy2p = torch.nn.functional.pad(dy2, (0, 0, 0, pad))
    dyt = moss_jit.quantize(dy2p, "moss", c.grad_format, c.block,
                            c.global_scope, transpose=True)
    xt = moss_jit.quantize(x2p, "moss", c.x_format, c.block, c.global_scope,
                           transpose=True)
    dw = dyt.dequantize() @ xt.dequantize().T
    return y, dx, dw


class GroupedGemmCudaTest(unittest.TestCase):
    def test_each_expert_against_fp64(self):
        # The experts' rows in one launch against each expert's FP64
        # product; an empty expert, a single row, odd counts; the row fold
        # and the exact kernel; per-tensor weights and per-row ones.
        rng = np.random.default_rng()
        for fold, w_scheme in (("row", "per-tensor"), ("none", "per-row")):
            with self.subTest(fold=fold, weights=w_scheme):
                groups, n, k = 7, 320, 512
                rows = [int(r) for r in rng.integers(0, 300, size=groups)]
                rows[0], rows[1], rows[2] = 0, 1, rows[2] | 1
                m = sum(rows)
                x = torch.from_numpy(llm_like(rng, m, k)).to(DEVICE)
                a = moss_jit.quantize(x, "moss", global_scope="row")
                weights = [moss_jit.quantize(torch.randn(
                    n, k, device=DEVICE) * 2.0 ** g, w_scheme)
                    for g in range(groups)]
                bias = torch.randn(groups, n, device=DEVICE,
                                   dtype=torch.bfloat16)
                offsets = torch.tensor(np.concatenate([[0], np.cumsum(rows)]),
                                       dtype=torch.int32, device=DEVICE)
                poison_allocator(torch.empty((m, n), dtype=torch.bfloat16))
                d = moss_jit.grouped_gemm(a, weights, offsets, bias=bias,
                                          fold=fold)
                self.assertEqual(tuple(d.shape), (m, n))
                dq_a = a.dequantize()
                start = 0
                for g, r in enumerate(rows):
                    if r:
                        want = dq_a[start:start + r] @ \
                            weights[g].dequantize().T + bias[g].double()
                        self.assertLess(rel_error(d[start:start + r], want),
                                        5e-3, f"expert {g} of {rows}")
                    start += r

    def test_masked_experts_write_only_their_counted_rows(self):
        # Decoding: 32 experts of 24 rows each, 0 to 24 of them used; the
        # output's unused rows keep the caller's poison.
        rng = np.random.default_rng()
        groups, capacity, n, k = 32, 24, 256, 512
        counts = [int(c) for c in rng.integers(0, capacity + 1, size=groups)]
        counts[0], counts[1], counts[2] = 0, 1, capacity
        m = groups * capacity
        x = torch.from_numpy(llm_like(rng, m, k)).to(DEVICE)
        a = moss_jit.quantize(x, "moss", global_scope="row")
        weights = moss_jit.stack_experts([moss_jit.quantize(
            torch.randn(n, k, device=DEVICE), "per-tensor")
            for _ in range(groups)])
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16,
                         device=DEVICE)
        d = moss_jit.grouped_gemm(
            a, weights, torch.tensor(counts, dtype=torch.int32,
                                     device=DEVICE),
            layout="masked", out=out)
        self.assertIs(d, out)
        dq_a = a.dequantize()
        for g, count in enumerate(counts):
            start = g * capacity
            if count:
                want = dq_a[start:start + count] @ \
                    weights.expert(g).dequantize().T
                self.assertLess(rel_error(d[start:start + count], want), 5e-3,
                                f"expert {g} of {counts}")
            self.assertTrue(
                torch.isnan(d[start + count:start + capacity]).all(),
                f"expert {g} wrote past its {count} rows")

    def test_k_grouped_weight_gradients_match_each_expert(self):
        # dW_g = dY_g^T X_g over each expert's tokens (multiples of 128,
        # an expert with none), MOSS on both sides, against the dequantized
        # column slices in FP64.
        rng = np.random.default_rng()
        cols = [256, 0, 128, 640, 384]
        m, n, k = 384, 256, sum(cols)
        dy_t = moss_jit.quantize(torch.from_numpy(
            llm_like(rng, m, k)).to(DEVICE), "moss", global_scope="row")
        x_t = moss_jit.quantize(torch.from_numpy(
            llm_like(rng, n, k)).to(DEVICE), "moss", global_scope="row")
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(cols)]),
                               dtype=torch.int32, device=DEVICE)
        poison_allocator(torch.empty((len(cols), m, n), dtype=torch.bfloat16))
        d = moss_jit.k_grouped_gemm(dy_t, x_t, offsets)
        self.assertEqual(tuple(d.shape), (len(cols), m, n))
        dq_a, dq_b = dy_t.dequantize(), x_t.dequantize()
        start = 0
        for g, c in enumerate(cols):
            if c:
                want = dq_a[:, start:start + c] @ dq_b[:, start:start + c].T
                self.assertLess(rel_error(d[g], want), 5e-3,
                                f"expert {g} of {cols}")
            else:
                self.assertTrue(torch.equal(d[g], torch.zeros_like(d[g])),
                                f"expert {g} has no tokens")
            start += c


class DispatchQuantizeCudaTest(unittest.TestCase):
    def assert_same_bits(self, got, want):
        """The GPU's MossTensor `got` holds the host's `want`, bit for bit."""
        for name in ("codes", "local_scales", "global_scales"):
            a, b = getattr(got, name), getattr(want, name)
            self.assertEqual(a is None, b is None, name)
            if a is not None:
                self.assertTrue(torch.equal(a.cpu().view(torch.uint8),
                                            b.view(torch.uint8)), name)

    def test_gathered_rows_match_the_host_bit_for_bit(self):
        # Each token read once per routed row, in expert order, against the
        # host reference of the gathered copy; K long enough for segments.
        rng = np.random.default_rng()
        for tokens, k, dtype, scheme, kwargs in (
                (500, 4096, torch.bfloat16, "moss", {}),
                (77, 12288, torch.float32, "moss", {"fold": "none"}),
                (300, 2048, torch.bfloat16, "per-tensor", {"fold": "none"}),
                (64, 1024, torch.bfloat16, "mxfp8", {"fold": "row"})):
            with self.subTest(tokens=tokens, k=k, scheme=scheme):
                x = torch.from_numpy(llm_like(rng, tokens, k)).to(
                    DEVICE, dtype)
                ids = torch.from_numpy(rng.integers(0, 8, size=(tokens, 2)))
                token_index, _, _ = moss_jit.route(ids, 8)
                got = moss_jit.dispatch_quantize(
                    x, token_index.to(DEVICE), scheme, **kwargs)
                want = moss_jit.dispatch_quantize(x.cpu(), token_index,
                                                  scheme, **kwargs)
                self.assert_same_bits(got, want)

    def test_transposed_gathers_match_the_host_bit_for_bit(self):
        # The k-grouped GEMM's operands: the tokens in expert order, each
        # expert's padded with -1 (rows of zeros) to 128, transposed.
        from moss_jit.nn import _expert_padding
        rng = np.random.default_rng()
        for tokens, k, dtype, scope in ((700, 1024, torch.bfloat16, "row"),
                                        (129, 96, torch.float32, "tensor")):
            with self.subTest(tokens=tokens, k=k, scope=scope):
                x = torch.from_numpy(llm_like(rng, tokens, k)).to(
                    DEVICE, dtype)
                counts = rng.multinomial(tokens, np.ones(6) / 6)
                counts[1], counts[0] = counts[1] + counts[0], 0
                offsets = torch.tensor(np.concatenate([[0], np.cumsum(
                    counts)]), dtype=torch.int32, device=DEVICE)
                index = _expert_padding(offsets, tokens)[0]
                got = moss_jit.dispatch_quantize(
                    x, index, global_scope=scope, transpose=True)
                want = moss_jit.dispatch_quantize(
                    x.cpu(), index.cpu(), global_scope=scope,
                    transpose=True)
                self.assert_same_bits(got, want)


class GroupedLinearCudaTest(unittest.TestCase):
    def test_forward_and_gradients_against_the_quantized_products(self):
        # The host quantizers give the GPU's bits, so the FP64 products of
        # the CPU-quantized operands are what the GPU layer computes.
        from test_grouped import quantized_grouped_linear
        rng = np.random.default_rng()
        torch.manual_seed(int(rng.integers(1 << 30)))
        groups, fin, fout = 8, 512, 1024
        layer = moss_jit.nn.GroupedLinear(groups, fin, fout, bias=True,
                                          device=DEVICE)
        rows = [int(r) for r in rng.integers(0, 300, size=groups)]
        rows[0], rows[1] = 0, 1
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(rows)]),
                               dtype=torch.int32, device=DEVICE)
        x = torch.randn(sum(rows), fin, device=DEVICE, dtype=torch.bfloat16,
                        requires_grad=True)
        y = layer(x, offsets)
        dy = torch.randn_like(y)
        y.backward(dy)
        cpu = moss_jit.nn.GroupedLinear(groups, fin, fout, bias=True,
                                        dtype=layer.weight.dtype)
        with torch.no_grad():
            cpu.weight.copy_(layer.weight.cpu())
            cpu.bias.copy_(layer.bias.cpu())
        want_y, want_dx, want_dw = quantized_grouped_linear(
            cpu, x.detach().cpu(), offsets.cpu(), dy.cpu())
        self.assertLess(rel_error(y.detach().cpu(), want_y), 5e-3)
        self.assertLess(rel_error(x.grad.cpu(), want_dx), 5e-3)
        self.assertLess(rel_error(layer.weight.grad.cpu(), want_dw), 5e-3)


class FusedOptimizerCudaTest(unittest.TestCase):
    """moss_jit.optim.AdamW: the MOSS layers' weights take the fused AdamW
    step and cast; the rest torch's AdamW."""

    def twin_steps(self, layer, torch_params, steps=6, lr=3e-3):
        """Steps `layer` with moss_jit.optim.AdamW and `torch_params` (the
        same tensors' copies) with torch.optim.AdamW on the same random
        gradients."""
        ours = moss_jit.optim.AdamW(layer.parameters(), lr=lr,
                                    weight_decay=0.1)
        theirs = torch.optim.AdamW(torch_params, lr=lr, weight_decay=0.1,
                                   foreach=False)
        generator = torch.Generator(device=DEVICE).manual_seed(
            int(np.random.randint(1 << 30)))
        for _ in range(steps):
            for p, q in zip(layer.parameters(), torch_params):
                g = 1e-2 * torch.randn(p.shape, device=DEVICE,
                                       generator=generator)
                p.grad, q.grad = g.clone(), g.clone()
            ours.step()
            theirs.step()
        return ours

    def check_codes(self, w, codes, codes_t, scale):
        # The codes the forward reads are the updated weight's cast at the
        # step's scale, bit for bit, in both layouts.
        u8 = torch.uint8
        self.assertTrue(torch.equal(
            codes.view(u8), moss_jit.cast_with_scale(w, scale).view(u8)))
        self.assertTrue(torch.equal(
            codes_t.view(u8),
            moss_jit.cast_with_scale(w, scale, transpose=True).view(u8)))

    def test_linear_steps_as_torch_adamw_and_casts_the_update(self):
        layer = moss_jit.nn.Linear(512, 256, device=DEVICE)
        twins = [p.detach().clone() for p in layer.parameters()]
        for t in twins:
            t.requires_grad_(True)
        optimizer = self.twin_steps(layer, twins)
        torch.cuda.synchronize()
        # FP32 AdamW both ways; torch rounds a few products apart.
        for p, q in zip(layer.parameters(), twins):
            self.assertLess(rel_error(p.detach(), q.detach().double()), 1e-6)
        self.assertEqual(optimizer.fused_weights, {id(layer.weight)})
        casts = layer.weight_casts
        self.assertEqual(sum(casts.values()), 6)
        self.assertGreater(casts["predicted"], 0)
        self.check_codes(layer.weight.detach(), layer._w_codes,
                         layer._w_t_codes, layer._w_scale)
        # The next forward reads those codes: no cast of its own.
        layer(torch.randn(64, 512, device=DEVICE, dtype=torch.bfloat16))
        self.assertEqual(sum(layer.weight_casts.values()), 6)
        self.assertEqual(
            optimizer.state[layer.weight]["exp_avg"].dtype, torch.float32)

    def test_grouped_linear_steps_every_expert(self):
        experts = moss_jit.nn.GroupedLinear(4, 256, 128, bias=False,
                                            device=DEVICE)
        twins = [experts.weight.detach().clone().requires_grad_(True)]
        self.twin_steps(experts, twins, steps=4)
        torch.cuda.synchronize()
        self.assertLess(
            rel_error(experts.weight.detach(), twins[0].detach().double()),
            1e-6)
        self.assertEqual(sum(experts.weight_casts.values()), 16)
        w_q, w_t = experts._w_cached
        n, k = 128, 256
        for g in range(4):
            self.check_codes(experts.weight[g].detach(),
                             w_q.codes[g * n:(g + 1) * n],
                             w_t.codes[g * k:(g + 1) * k],
                             w_q.global_scales[g:g + 1])

    def test_a_training_loop_matches_the_unfused_one(self):
        # The same model, data and learning rates: with the fused step, and
        # with torch's AdamW reporting to the layers (attach_optimizer). The
        # losses agree to the updates' ulps.
        def run(fused):
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                moss_jit.nn.Linear(256, 512, device=DEVICE), torch.nn.GELU(),
                moss_jit.nn.Linear(512, 256, device=DEVICE))
            if fused:
                optimizer = moss_jit.optim.AdamW(model.parameters(), lr=1e-3)
            else:
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
                moss_jit.attach_optimizer(optimizer)
            x = torch.randn(512, 256, device=DEVICE)
            losses = []
            for _ in range(20):
                loss = (model(x) - x).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.item())
            return losses, model

        fused, fused_model = run(True)
        apart, _ = run(False)
        self.assertLess(fused[-1], 0.8 * fused[0])
        np.testing.assert_allclose(fused, apart, rtol=1e-3)
        self.assertGreater(fused_model[0].weight_casts["predicted"], 10)


class LinearCudaTest(unittest.TestCase):
    def test_forward_dgrad_wgrad_against_fp64(self):
        torch.manual_seed(int(np.random.default_rng().integers(1 << 30)))
        for tokens, fin, fout, both, dgrad_promote in (
                (2048, 1024, 2048, False, 0), (2048, 1024, 2048, True, 0),
                (333, 512, 1024, True, 0), (2048, 1024, 2048, True, 128)):
            with self.subTest(tokens=tokens, fin=fin, fout=fout, both=both,
                              dgrad_promote=dgrad_promote):
                layer = moss_jit.nn.Linear(fin, fout, device=DEVICE,
                                           both_layouts=both,
                                           dgrad_promote_k=dgrad_promote)
                x = torch.randn(tokens, fin, device=DEVICE,
                                dtype=torch.bfloat16, requires_grad=True)
                y = layer(x)
                dy = torch.randn_like(y)
                y.backward(dy)
                want_y, want_dx, want_dw = reference_linear_cuda(
                    layer, x.detach(), dy)
                self.assertLess(rel_error(y.cpu(), want_y), 5e-3)
                # Promoted every 128 of K, dX is at bf16's own rounding
                # (1.66e-3) plus the fold's far smaller error.
                self.assertLess(rel_error(x.grad.cpu(), want_dx),
                                2.5e-3 if dgrad_promote else 5e-3)
                # The GEMM folds wgrad's transposed operands (2^-17.8 of a
                # row's largest element at most, docs/NUMERICS-CONTRACT.md).
                self.assertLess(rel_error(layer.weight.grad.cpu(), want_dw),
                                1e-3)

    def test_scaler_predicts_after_the_optimizer_hook(self):
        layer = moss_jit.nn.Linear(1024, 1024, device=DEVICE)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-4)
        moss_jit.attach_optimizer(optimizer)
        x = torch.randn(256, 1024, device=DEVICE, dtype=torch.bfloat16)
        for _ in range(8):
            layer(x).float().square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        layer(x)
        torch.cuda.synchronize()
        casts = layer.weight_casts
        self.assertEqual(casts["exact"], 1)
        self.assertGreater(casts["predicted"], 0)
        self.assertEqual(layer.scaler_stats()["steps"], 8)

    def test_the_scalers_two_layouts_are_one_cast(self):
        # A training step (X needs its gradient, the optimizer reports the
        # learning rate) casts W and W^T in one scaler call: both are the
        # weight's cast at the step's one scale, bit for bit with the
        # separate casts of cast_with_scale.
        layer = moss_jit.nn.Linear(1024, 512, device=DEVICE)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-4,
                                      fused=True)
        moss_jit.attach_optimizer(optimizer)
        x = torch.randn(256, 1024, device=DEVICE, dtype=torch.bfloat16,
                        requires_grad=True)
        for _ in range(5):
            layer(x).float().square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        layer(x).float().sum().backward()
        self.assertGreater(layer.weight_casts["predicted"], 0)
        w = layer.weight.detach()
        scale = layer._w_scale
        u8 = torch.uint8
        self.assertTrue(torch.equal(
            layer._w_codes.view(u8),
            moss_jit.cast_with_scale(w, scale).view(u8)))
        self.assertTrue(torch.equal(
            layer._w_t_codes.view(u8),
            moss_jit.cast_with_scale(w, scale, transpose=True).view(u8)))

    def test_grouped_experts_have_their_own_scalers(self):
        experts = moss_jit.nn.GroupedLinear(4, 512, 256, device=DEVICE)
        optimizer = torch.optim.AdamW(experts.parameters(), lr=1e-4,
                                      fused=True)
        moss_jit.attach_optimizer(optimizer)
        offsets = torch.tensor([0, 40, 40, 200, 256], dtype=torch.int32,
                               device=DEVICE)
        x = torch.randn(256, 512, device=DEVICE, dtype=torch.bfloat16,
                        requires_grad=True)
        for _ in range(4):
            experts(x, offsets).float().square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        experts(x, offsets).float().sum().backward()
        self.assertGreater(experts.weight_casts["predicted"], 0)
        self.assertEqual(len(experts.scaler_stats()), 4)
        w_q, w_t = experts._w_cached
        u8 = torch.uint8
        for g in range(4):
            w = experts.weight.detach()[g]
            scale = w_q.global_scales[g:g + 1]
            self.assertTrue(torch.equal(
                w_q.expert(g).codes.view(u8),
                moss_jit.cast_with_scale(w, scale).view(u8)))
            self.assertTrue(torch.equal(
                w_t.expert(g).codes.view(u8),
                moss_jit.cast_with_scale(w, scale, transpose=True).view(u8)))

    def test_torch_compile_matches_eager(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024),
                                    torch.nn.GELU(),
                                    torch.nn.Linear(1024, 512)).to(DEVICE)
        moss_jit.convert(model, verbose=False)
        x = torch.randn(1024, 512, device=DEVICE, dtype=torch.float32)
        eager = model(x)
        eager.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        compiled = torch.compile(model)
        out = compiled(x)
        out.sum().backward()
        # Inductor may round the GELU between the layers differently.
        self.assertLess(rel_error(out, eager.double()), 1e-2)
        for p, g in zip(model.parameters(), grads):
            self.assertLess(rel_error(p.grad, g.double()), 2e-2)

    def test_cuda_graph_replays_the_forward(self):
        layer = moss_jit.nn.Linear(1024, 2048, device=DEVICE)
        x = torch.randn(2048, 1024, device=DEVICE, dtype=torch.bfloat16)
        with torch.no_grad():
            want = layer(x)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                layer(x)  # warm up on the capture's stream kind
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = layer(x)
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(y, layer(x)))
            self.assertFalse(torch.equal(y, want))
            # The graph casts the weight as each replay finds it: an update
            # between replays is seen.
            layer.weight.mul_(1.5)
            graph.replay()
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(y, layer(x)))


if __name__ == "__main__":
    unittest.main()
