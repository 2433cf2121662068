"""The torch API on CPU tensors (the host reference path): quantize bit for
bit as the CLI, the custom ops and their fake implementations, gemm against
the FP64 reference, the Linear's shapes, dtypes and gradients, convert, and
the argument errors. Skips without torch."""

import unittest
from unittest import mock

import numpy as np

from support import QUANTIZE_CASES, cli_quantize, have_torch, llm_like

if not have_torch():
    raise unittest.SkipTest("torch is not installed (the CPU tests of the "
                            "torch API need it; test_numpy covers the core)")

import torch  # noqa: E402

import moss_jit  # noqa: E402
from moss_jit import _torch as mt  # noqa: E402
from moss_jit import reference  # noqa: E402


def as_numpy(t):
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    return t.numpy()


class QuantizeTorchCpuTest(unittest.TestCase):
    def test_every_scheme_matches_the_cli_for_f32_and_bf16(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, transpose, fold = case
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(case=case, dtype=dtype):
                    x = torch.from_numpy(llm_like(rng, 128, 256)).to(dtype)
                    q = moss_jit.quantize(x, scheme, format=fmt, block=block,
                                          global_scope=scope,
                                          transpose=transpose, fold=fold)
                    self.assertEqual(q.codes.dtype, mt.FP8_DTYPES[fmt])
                    want = cli_quantize(x.float().numpy(), scheme, fmt, block,
                                        scope, transpose, fold)
                    np.testing.assert_array_equal(as_numpy(q.codes), want[0])
                    for got, expected in ((q.local_scales, want[1]),
                                          (q.global_scales, want[2])):
                        if expected is None:
                            self.assertIsNone(got)
                        else:
                            np.testing.assert_array_equal(
                                as_numpy(got).reshape(expected.shape),
                                expected)

    def test_fake_shapes_match_the_libmoss_layout(self):
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, transpose, fold = case
            with self.subTest(case=case):
                x = torch.randn(256, 384)
                real = torch.ops.moss_jit.quantize(
                    x, scheme, fmt, *moss_jit.schemes.parse_block(scheme,
                                                                  block),
                    scope, transpose, fold or "none")
                with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
                    fake = torch.ops.moss_jit.quantize(
                        mode.from_tensor(x), scheme, fmt,
                        *moss_jit.schemes.parse_block(scheme, block), scope,
                        transpose, fold or "none")
                for r, f in zip(real, fake):
                    self.assertEqual(tuple(r.shape), tuple(f.shape))
                    self.assertEqual(r.dtype, f.dtype)

    def test_custom_ops_pass_opcheck(self):
        x = torch.randn(64, 128)
        torch.library.opcheck(torch.ops.moss_jit.quantize.default,
                              (x, "moss", "e4m3", 1, 32, "row", False, "row"))
        a = moss_jit.quantize(x, "moss")
        b = moss_jit.quantize(torch.randn(96, 128), "per-tensor")
        args = (*mt._op_operand(a), a.descriptor(), *mt._op_operand(b),
                b.descriptor(), torch.bfloat16, None, None, 1.0, True,
                "auto", "auto")
        torch.library.opcheck(torch.ops.moss_jit.gemm.default, args)
        torch.library.opcheck(torch.ops.moss_jit.gemm.default,
                              (*args, 128))


class LinearConfigTest(unittest.TestCase):
    def test_the_weight_gradients_promotion_divides_the_tokens(self):
        config = moss_jit.nn.LinearConfig()
        self.assertEqual([config.wgrad_promotion(k) for k in
                          (16384, 4160, 4128, 4112, 96)],
                         [128, 64, 32, 0, 32])
        self.assertEqual(moss_jit.nn.LinearConfig(
            wgrad_promote_k=0).wgrad_promotion(16384), 0)
        # Unfolded operands promote every 32 already.
        self.assertEqual(moss_jit.nn.LinearConfig(
            fold="none").wgrad_promotion(16384), 0)
        for bad in (100, 128.0, True):
            with self.assertRaisesRegex(ValueError,
                                        f"wgrad_promote_k={bad!r}"):
                moss_jit.nn.LinearConfig(wgrad_promote_k=bad)

    def test_the_input_gradients_promotion_is_asked_for(self):
        self.assertEqual(moss_jit.nn.LinearConfig().dgrad_promotion(4096), 0)
        config = moss_jit.nn.LinearConfig(dgrad_promote_k=128)
        self.assertEqual([config.dgrad_promotion(k) for k in
                          (5632, 4096, 480, 96)], [128, 128, 32, 32])
        self.assertEqual(moss_jit.nn.LinearConfig(
            fold="none", dgrad_promote_k=128).dgrad_promotion(4096), 0)
        for bad in (48, "128", None):
            with self.assertRaisesRegex(ValueError,
                                        f"dgrad_promote_k={bad!r}"):
                moss_jit.nn.LinearConfig(dgrad_promote_k=bad)


class GemmTorchCpuTest(unittest.TestCase):
    def test_gemm_is_the_fp64_product_with_its_epilogue(self):
        m, n, k = 33, 96, 256
        a = moss_jit.quantize(torch.randn(m, k), "moss", global_scope="row")
        b = moss_jit.quantize(torch.randn(n, k), "per-group", block=(128, 128))
        bias = torch.randn(n)
        c = torch.randn(m, n, dtype=torch.bfloat16)
        d, amax = moss_jit.gemm(a, b, out_dtype=torch.float32, bias=bias, c=c,
                                beta=-0.5, amax=True)
        want = (a.dequantize() @ b.dequantize().T + bias.double() -
                0.5 * c.double())
        self.assertEqual(d.dtype, torch.float32)
        torch.testing.assert_close(d.double(), want, rtol=1e-6, atol=1e-6)
        self.assertAlmostEqual(float(amax), float(want.abs().max()),
                               delta=1e-4 * float(want.abs().max()))

    def test_gemm_errors_name_the_argument(self):
        a = moss_jit.quantize(torch.randn(64, 128), "moss")
        b = moss_jit.quantize(torch.randn(32, 128), "per-tensor")
        short = moss_jit.quantize(torch.randn(32, 64), "per-tensor")
        cases = [
            ((a, torch.randn(32, 128)), {}, TypeError, "b must be a MossTensor"),
            ((a, short), {}, ValueError, "same K"),
            ((a, b), {"out_dtype": torch.int8}, TypeError, "out_dtype"),
            ((a, b), {"bias": torch.randn(31)}, ValueError, "bias"),
            ((a, b), {"bias": torch.randn(32, dtype=torch.float64)},
             TypeError, "bias"),
            ((a, b), {"c": torch.randn(64, 31)}, ValueError, "c must"),
            ((a, b), {"beta": 2.0}, ValueError, "beta"),
            ((a, b), {"mma": "tf32"}, ValueError, "mma="),
            ((a, b), {"fold": "col"}, ValueError, "fold="),
            ((a._replace(codes=a.codes.view(torch.uint8)), b), {}, TypeError,
             "a.codes has dtype"),
            ((a._replace(global_scales=None), b), {}, ValueError,
             "a.global_scales is missing"),
            ((a, b._replace(local_scales=torch.ones(4))), {}, ValueError,
             "b.local_scales is given"),
            ((a._replace(local_scales=a.local_scales[:1]), b), {}, ValueError,
             "a.local_scales has shape (1, 4)"),
            # Unhashable: named, not a TypeError from a dictionary lookup.
            ((a._replace(format=[1, 32]), b), {}, ValueError,
             "a.format=[1, 32] is not one of"),
            ((a, b), {"promote_k": 96}, ValueError,
             "promote_k=96 is not 0, 32, 64 or 128"),
            ((a, b), {"promote_k": 128.0}, ValueError,
             "promote_k=128.0 is not 0, 32, 64 or 128"),
        ]
        for args, kwargs, exception, text in cases:
            with self.subTest(text=text):
                with self.assertRaises(exception) as caught:
                    moss_jit.gemm(*args, **kwargs)
                self.assertIn(text, str(caught.exception))

    def test_quantize_errors_name_the_argument(self):
        with self.assertRaisesRegex(TypeError, "x has dtype torch.float16"):
            moss_jit.quantize(torch.randn(8, 32, dtype=torch.float16), "moss")
        with self.assertRaisesRegex(ValueError, "contiguous"):
            moss_jit.quantize(torch.randn(64, 32).t(), "moss")
        with self.assertRaisesRegex(ValueError, "counters"):
            moss_jit.quantize(torch.randn(8, 32), "moss",
                              counters=torch.zeros(3, dtype=torch.int64))


class AdversarialTorchTest(unittest.TestCase):
    """Regression tests of what an adversarial pass found on 2026-12-06
    (issue 44) in the torch API."""

    def test_scale_shapes_are_checked_not_only_their_counts(self):
        a = moss_jit.quantize(torch.randn(16, 64), "mxfp8")
        b = moss_jit.quantize(torch.randn(8, 64), "per-tensor")
        for local in (a.local_scales.reshape(1, 32),
                      a.local_scales.reshape(32)):
            with self.subTest(shape=tuple(local.shape)):
                with self.assertRaisesRegex(ValueError,
                                            r"a.local_scales has shape "
                                            r"\(\d+(, \d+)?,?\); "
                                            r"scheme='mxfp8' with codes "
                                            r"\(16, 64\) needs \(16, 2\)"):
                    moss_jit.gemm(a._replace(local_scales=local), b)
        with self.assertRaisesRegex(ValueError, r"needs \(16, 2\)"):
            a._replace(local_scales=a.local_scales.reshape(1, 32)).dequantize()

    def test_e8m0_local_scales_give_the_uint8_results(self):
        rng = np.random.default_rng()
        a = moss_jit.quantize(torch.from_numpy(llm_like(rng, 16, 64)), "moss")
        b = moss_jit.quantize(torch.randn(8, 64), "mxfp8")
        e8m0 = [q._replace(local_scales=q.local_scales.view(
            torch.float8_e8m0fnu)) for q in (a, b)]
        self.assertEqual(moss_jit.gemm(*e8m0, out_dtype=torch.float32)
                         .tolist(),
                         moss_jit.gemm(a, b, out_dtype=torch.float32).tolist())
        self.assertTrue(torch.equal(e8m0[0].dequantize(), a.dequantize()))
        wrapped = moss_jit.MossTensor.from_parts(
            a.codes, "moss", local_scales=e8m0[0].local_scales,
            global_scales=a.global_scales)
        self.assertTrue(torch.equal(wrapped.dequantize(), a.dequantize()))

    def test_mixed_or_malformed_parts_name_the_part(self):
        a = moss_jit.quantize(torch.randn(16, 64), "moss")
        b = moss_jit.quantize(torch.randn(8, 64), "per-tensor")
        cases = [
            (a._replace(local_scales=a.local_scales.numpy()), TypeError,
             "a.local_scales is a numpy.ndarray, but a.codes is a torch "
             "tensor"),
            (a._replace(global_scales=a.global_scales.double()), TypeError,
             "a.global_scales has dtype torch.float64"),
            (a._replace(global_scope="banana"), ValueError,
             "a.global_scope='banana'"),
        ]
        for bad, exception, text in cases:
            with self.subTest(text=text):
                with self.assertRaises(exception) as caught:
                    moss_jit.gemm(bad, b)
                self.assertIn(text, str(caught.exception))
        with self.assertRaisesRegex(ValueError, "K=48, not a multiple of the "
                                    "scaling block 32"):
            moss_jit.MossTensor.from_parts(
                a.codes[:, :48].contiguous(), "moss",
                local_scales=a.local_scales[:, :1].contiguous(),
                global_scales=a.global_scales)

    def test_beta_must_be_a_finite_number(self):
        a = moss_jit.quantize(torch.randn(16, 64), "moss")
        b = moss_jit.quantize(torch.randn(8, 64), "per-tensor")
        c = torch.randn(16, 8)
        for beta, exception, text in ((float("nan"), ValueError, "finite"),
                                      (float("inf"), ValueError, "finite"),
                                      ("2", TypeError, "beta must be a real"),
                                      (True, TypeError, "beta must be a real")):
            with self.subTest(beta=beta):
                with self.assertRaisesRegex(exception, text):
                    moss_jit.gemm(a, b, c=c, beta=beta)
        d = moss_jit.gemm(a, b, c=c, beta=2, out_dtype=torch.float32)
        want = a.dequantize() @ b.dequantize().T + 2 * c.double()
        torch.testing.assert_close(d.double(), want, rtol=1e-6, atol=1e-6)

    def test_an_empty_gemm_has_amax_zero(self):
        a = moss_jit.MossTensor.from_parts(
            torch.empty(0, 64, dtype=torch.float8_e4m3fn), "per-row",
            global_scales=torch.empty(0))
        b = moss_jit.quantize(torch.randn(8, 64), "per-tensor")
        d, amax = moss_jit.gemm(a, b, amax=True)
        self.assertEqual(tuple(d.shape), (0, 8))
        self.assertEqual(amax.tolist(), [0.0])

    def test_strided_counters_are_refused(self):
        base = torch.zeros(4, dtype=torch.int64)
        x = torch.ones(4, 64)
        with self.assertRaisesRegex(ValueError, "counters must be a "
                                    "contiguous int64"):
            moss_jit.quantize(x, "moss", counters=base[::2])
        self.assertEqual(base.tolist(), [0, 0, 0, 0])

    def test_linear_takes_an_empty_batch_like_torch(self):
        layer = moss_jit.nn.Linear(64, 32)
        for shape in ((0, 64), (3, 0, 64)):
            with self.subTest(shape=shape):
                layer.zero_grad()
                x = torch.randn(*shape, requires_grad=True)
                y = layer(x)
                self.assertEqual(tuple(y.shape), shape[:-1] + (32,))
                self.assertEqual(y.dtype, torch.float32)
                y.sum().backward()
                self.assertEqual(tuple(x.grad.shape), shape)
                self.assertEqual(float(layer.weight.grad.abs().sum()), 0.0)
                self.assertEqual(float(layer.bias.grad.abs().sum()), 0.0)


def reference_linear(layer, x, dy):
    """The Linear's forward and gradients as the FP64 products of the same
    quantized operands (quantized here through the numpy path)."""
    c = layer.config
    x2 = x.reshape(-1, layer.in_features).float().numpy()
    dy2 = dy.reshape(-1, layer.out_features).float().numpy()
    w = layer.weight.detach().float().numpy()
    xq = moss_jit.quantize(x2, "moss", c.x_format, c.block, c.global_scope,
                           fold=c.fold)
    wq = moss_jit.quantize(w, "per-tensor")
    y = reference.gemm_numpy(xq, wq)
    if layer.bias is not None:
        y = y + layer.bias.detach().double().numpy()
    dyq = moss_jit.quantize(dy2, "moss", c.grad_format, c.block,
                            c.global_scope, fold=c.fold)
    wt = wq._replace(codes=np.ascontiguousarray(wq.codes.T))
    dx = reference.gemm_numpy(dyq, wt)
    pad = -x2.shape[0] % c.block
    x2p = np.pad(x2, ((0, pad), (0, 0)))
    dy2p = np.pad(dy2, ((0, pad), (0, 0)))
    dyt = moss_jit.quantize(dy2p, "moss", c.grad_format, c.block,
                            c.global_scope, transpose=True)
    xt = moss_jit.quantize(x2p, "moss", c.x_format, c.block, c.global_scope,
                           transpose=True)
    dw = reference.gemm_numpy(dyt, xt)
    return y, dx, dw, dy2.astype(np.float64).sum(0)


class LinearCpuTest(unittest.TestCase):
    def test_forward_and_backward_are_the_quantized_products(self):
        torch.manual_seed(np.random.default_rng().integers(1 << 30))
        for shape, bias in (((3, 5, 128), True), ((64, 128), False)):
            with self.subTest(shape=shape, bias=bias):
                layer = moss_jit.nn.Linear(128, 96, bias=bias)
                x = torch.randn(*shape, requires_grad=True)
                y = layer(x)
                self.assertEqual(tuple(y.shape), shape[:-1] + (96,))
                self.assertEqual(y.dtype, torch.float32)
                dy = torch.randn_like(y)
                y.backward(dy)
                want_y, want_dx, want_dw, want_db = reference_linear(
                    layer, x.detach(), dy)
                close = dict(rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(
                    y.detach().reshape(-1, 96).numpy(), want_y, **close)
                np.testing.assert_allclose(
                    x.grad.reshape(-1, 128).numpy(), want_dx, **close)
                self.assertEqual(layer.weight.grad.dtype, torch.float32)
                np.testing.assert_allclose(layer.weight.grad.numpy(), want_dw,
                                           **close)
                if bias:
                    np.testing.assert_allclose(layer.bias.grad.numpy(),
                                               want_db, **close)

    def test_bf16_activations_give_bf16_outputs_and_gradients(self):
        layer = moss_jit.nn.Linear(64, 32, dtype=torch.bfloat16)
        x = torch.randn(40, 64, dtype=torch.bfloat16, requires_grad=True)
        y = layer(x)
        self.assertEqual(y.dtype, torch.bfloat16)
        y.sum().backward()
        self.assertEqual(x.grad.dtype, torch.bfloat16)
        self.assertEqual(layer.weight.grad.dtype, torch.bfloat16)
        self.assertEqual(layer.bias.grad.dtype, torch.bfloat16)

    def test_autocast_sets_the_output_dtype_not_the_gradients(self):
        layer = moss_jit.nn.Linear(64, 32)
        x = torch.randn(40, 64, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x)
        self.assertEqual(y.dtype, torch.bfloat16)
        y.float().sum().backward()
        self.assertEqual(x.grad.dtype, torch.float32)
        self.assertEqual(layer.weight.grad.dtype, torch.float32)

    def test_the_weight_cast_follows_the_weight(self):
        layer = moss_jit.nn.Linear(64, 32)
        x = torch.randn(8, 64)
        y1 = layer(x)
        self.assertEqual(layer(x).tolist(), y1.tolist())
        self.assertEqual(layer.weight_casts["exact"], 1)
        with torch.no_grad():
            layer.weight.mul_(2)
        y2 = layer(x)
        self.assertEqual(layer.weight_casts["exact"], 2)
        torch.testing.assert_close(y2 - layer.bias, 2 * (y1 - layer.bias))

    def test_linears_reading_one_tensor_quantize_it_once(self):
        # Query, key and value projections take one tensor: its codes are
        # made once and every Linear's results stay the quantized products.
        # An in-place change, another tensor or another quantization makes
        # them again.
        torch.manual_seed(np.random.default_rng().integers(1 << 30))
        qkv = [moss_jit.nn.Linear(64, n) for n in (64, 32, 32)]
        other = moss_jit.nn.Linear(64, 32, x_format="e5m2")
        x = torch.randn(2, 24, 64, requires_grad=True)
        h = x * 1.5  # a tensor of the graph, as an RMSNorm's output
        calls = []
        real = moss_jit.nn._quantize_activations

        def counted(*args):
            calls.append(args[0].shape)
            return real(*args)

        with mock.patch.object(moss_jit.nn, "_quantize_activations", counted):
            ys = [layer(h) for layer in qkv]
            self.assertEqual(len(calls), 1)
            other(h)
            self.assertEqual(len(calls), 2)
            qkv[0](h * 1.0)
            self.assertEqual(len(calls), 3)
            with torch.no_grad():
                h2 = h.detach().clone()
                qkv[1](h2)
                h2.mul_(-2)
                qkv[2](h2)
            self.assertEqual(len(calls), 5)
        dys = [torch.randn_like(y) for y in ys]
        torch.autograd.backward(ys, dys)
        close = dict(rtol=1e-5, atol=1e-5)
        dx = np.zeros((48, 64))
        for layer, y, dy in zip(qkv, ys, dys):
            want_y, want_dx, want_dw, want_db = reference_linear(
                layer, h.detach(), dy)
            np.testing.assert_allclose(y.detach().reshape(-1, y.shape[-1]),
                                       want_y, **close)
            np.testing.assert_allclose(layer.weight.grad, want_dw, **close)
            dx += want_dx
        np.testing.assert_allclose(x.grad.reshape(-1, 64), 1.5 * dx, **close)

    def test_the_forward_keeps_x_transposed_codes_not_x(self):
        layer = moss_jit.nn.Linear(64, 32, bias=False)
        x = torch.randn(40, 64).requires_grad_()
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(t) or t, lambda t: t):
            layer(x)
        self.assertFalse(any(t.dtype == torch.float32 and t.shape == x.shape
                             for t in saved))
        # X^T over the tokens padded to the block: [64, 64] codes.
        self.assertIn((64, 64), [tuple(t.shape) for t in saved
                                 if t.dtype == torch.float8_e4m3fn])

    def test_bad_input_is_refused(self):
        with self.assertRaisesRegex(ValueError, "in_features=100"):
            moss_jit.nn.Linear(100, 64)
        layer = moss_jit.nn.Linear(64, 32)
        with self.assertRaisesRegex(ValueError, "features"):
            layer(torch.randn(4, 32))
        with self.assertRaisesRegex(TypeError, "float16"):
            layer(torch.randn(4, 64, dtype=torch.float16))
        with self.assertRaisesRegex(ValueError, "grad_format="):
            moss_jit.nn.Linear(64, 32, grad_format="e8m0")
        with self.assertRaisesRegex(ValueError, "both_layouts='yes' is not"):
            moss_jit.nn.Linear(64, 32, both_layouts="yes")


class CompileCpuTest(unittest.TestCase):
    def test_torch_compile_runs_the_custom_ops(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128),
                                    torch.nn.GELU(),
                                    torch.nn.Linear(128, 64))
        moss_jit.convert(model, verbose=False)
        x = torch.randn(32, 64)
        eager = model(x)
        eager.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        torch._dynamo.reset()
        compiled = torch.compile(model)
        out = compiled(x)
        out.sum().backward()
        torch.testing.assert_close(out, eager, rtol=1e-3, atol=1e-4)
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad, g, rtol=1e-3, atol=1e-4)
        # One graph: the weight codes come from an op of their own.
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(x)
        self.assertEqual(explained.graph_break_count, 0,
                         [b.reason for b in explained.break_reasons])

    def test_a_compiled_linear_casts_its_weight_when_it_changes(self):
        # The compiled forward reads the layer's version-keyed cache when it
        # runs: one cast per weight change, not one per call, and the codes
        # follow an optimizer's in-place update.
        torch.manual_seed(0)
        layer = moss_jit.nn.Linear(64, 32)
        twin = moss_jit.nn.Linear(64, 32)
        twin.load_state_dict(layer.state_dict())
        compiled = torch.compile(layer)
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
        twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
        x = torch.randn(16, 64)
        for _ in range(3):
            for model, opt in ((compiled, optimizer), (twin, twin_optimizer)):
                opt.zero_grad()
                for _ in range(2):  # two micro-batches a step
                    model(x).square().mean().backward()
                opt.step()
            self.assertEqual(layer.weight_casts["exact"],
                             twin.weight_casts["exact"])
        self.assertEqual(layer.weight_casts["exact"], 3)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), twin(x), rtol=1e-5,
                                       atol=1e-6)
        # In-place changes outside any optimizer are seen too.
        with torch.no_grad():
            layer.weight.mul_(2.0)
            twin.weight.mul_(2.0)
            torch.testing.assert_close(compiled(x), twin(x), rtol=1e-5,
                                       atol=1e-6)


class ConvertTest(unittest.TestCase):
    def test_convert_swaps_eligible_layers_and_says_why_not(self):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.up = torch.nn.Linear(64, 128)
                self.down = torch.nn.Linear(128, 64)
                self.half = torch.nn.Linear(64, 64).half()

            def forward(self, x):
                return self.down(torch.relu(self.up(x)))

        model = torch.nn.Sequential(Block(), Block(), torch.nn.Linear(64, 10))
        weight = model[0].up.weight
        x = torch.randn(16, 64)
        moss_jit.convert(model, filter_fn=lambda name, m: name != "1.up",
                         verbose=False)
        report = model.moss_report
        self.assertEqual(sorted(report["converted"]),
                         ["0.down", "0.up", "1.down"])
        reasons = dict(report["skipped"])
        self.assertIn("out_features=10", reasons["2"])
        self.assertIn("float16", reasons["1.half"])
        self.assertIn("float16", reasons["0.half"])
        self.assertIn("filter_fn", reasons["1.up"])
        self.assertIsInstance(model[0].up, moss_jit.nn.Linear)
        self.assertIs(model[0].up.weight, weight)
        self.assertEqual(tuple(model(x).shape), (16, 10))


class OptimizerHookTest(unittest.TestCase):
    def test_a_fused_optimizers_step_recasts_the_weight(self):
        # fused=True updates the weight without moving its version counter;
        # the hook's report of the step is what makes the cast follow.
        layer = moss_jit.nn.Linear(64, 32)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2,
                                      fused=True)
        moss_jit.attach_optimizer(optimizer)
        x = torch.randn(8, 64)
        layer(x).square().sum().backward()
        optimizer.step()
        after = layer(x)
        self.assertEqual(layer.weight_casts["exact"], 2)
        fresh = moss_jit.nn.Linear(64, 32)
        with torch.no_grad():
            fresh.weight.copy_(layer.weight)
            fresh.bias.copy_(layer.bias)
        self.assertEqual(after.tolist(), fresh(x).tolist())


    def test_attach_optimizer_passes_the_learning_rate(self):
        layer = moss_jit.nn.Linear(64, 32)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=3e-4)
        moss_jit.attach_optimizer(optimizer)
        layer(torch.randn(8, 64)).sum().backward()
        optimizer.step()
        self.assertAlmostEqual(layer._pending_lr, 3e-4)


class FusedOptimizerCpuTest(unittest.TestCase):
    """moss_jit.optim.AdamW on CPU parameters: torch's AdamW step, and its
    state and checkpoints torch.optim.AdamW's."""

    def test_cpu_parameters_take_torchs_step_bit_for_bit(self):
        torch.manual_seed(int(np.random.randint(1 << 30)))
        model = torch.nn.Sequential(moss_jit.nn.Linear(64, 32),
                                    torch.nn.Linear(32, 8))
        twins = [p.detach().clone().requires_grad_(True)
                 for p in model.parameters()]
        ours = moss_jit.optim.AdamW(model.parameters(), lr=1e-2,
                                    weight_decay=0.05)
        theirs = torch.optim.AdamW(twins, lr=1e-2, weight_decay=0.05)
        moss_jit.attach_optimizer(ours)
        for _ in range(3):
            for p, q in zip(model.parameters(), twins):
                g = torch.randn_like(p)
                p.grad, q.grad = g.clone(), g.clone()
            ours.step()
            theirs.step()
        for p, q in zip(model.parameters(), twins):
            self.assertTrue(torch.equal(p, q))
        # Nothing was fused on the CPU: the hook reported the steps, and the
        # layer casts its weight again at the next forward.
        self.assertEqual(ours.fused_weights, set())
        self.assertAlmostEqual(model[0]._pending_lr, 3e-2)

    def test_checkpoints_move_between_it_and_torchs_adamw(self):
        layer = moss_jit.nn.Linear(64, 32)
        theirs = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        layer(torch.randn(8, 64)).square().sum().backward()
        theirs.step()
        ours = moss_jit.optim.AdamW(layer.parameters(), lr=1e-3)
        ours.load_state_dict(theirs.state_dict())
        state = ours.state[layer.weight]
        self.assertEqual(float(state["step"]), 1.0)
        self.assertTrue(torch.equal(state["exp_avg"],
                                    theirs.state[layer.weight]["exp_avg"]))
        ours.step()
        self.assertEqual(float(ours.state[layer.weight]["step"]), 2.0)

    def test_the_c_apis_defaults_are_torchs(self):
        import ctypes
        from moss_jit import _capi
        step = _capi.AdamWStep()
        _capi.lib.moss_adamw_step_init(ctypes.byref(step))
        defaults = torch.optim.AdamW([torch.zeros(1)]).defaults
        self.assertEqual(step.struct_size, ctypes.sizeof(step))
        self.assertEqual(step.lr, defaults["lr"])
        self.assertEqual((step.beta1, step.beta2), defaults["betas"])
        self.assertEqual(step.eps, defaults["eps"])
        self.assertEqual(step.weight_decay, defaults["weight_decay"])
        self.assertEqual(step.step, 1)

    def test_amsgrad_and_closures_are_torchs(self):
        layer = moss_jit.nn.Linear(64, 32)
        optimizer = moss_jit.optim.AdamW(layer.parameters(), amsgrad=True)
        x = torch.randn(8, 64)

        def closure():
            optimizer.zero_grad()
            loss = layer(x).square().sum()
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        self.assertGreater(float(loss), 0.0)
        self.assertIn("max_exp_avg_sq", optimizer.state[layer.weight])


if __name__ == "__main__":
    unittest.main()
