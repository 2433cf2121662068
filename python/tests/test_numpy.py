"""The package without torch: numpy arrays through the host reference
quantizers, checked bit for bit against `moss-jit quantize`, the argument
errors, and the packed GEMM buffers' layout."""

import ctypes
import unittest

import numpy as np

import moss_jit
from moss_jit import _capi, reference

from support import QUANTIZE_CASES, cli_quantize, llm_like


class QuantizeNumpyTest(unittest.TestCase):
    def test_every_scheme_matches_the_cli_bit_for_bit(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, transpose, fold = case
            with self.subTest(case=case):
                x = llm_like(rng, 256, 384)
                q = moss_jit.quantize(x, scheme, format=fmt, block=block,
                                      global_scope=scope, transpose=transpose,
                                      fold=fold)
                want_q, want_local, want_global = cli_quantize(
                    x, scheme, fmt, block, scope, transpose, fold)
                np.testing.assert_array_equal(q.codes, want_q)
                for got, want in ((q.local_scales, want_local),
                                  (q.global_scales, want_global)):
                    if want is None:
                        self.assertIsNone(got)
                    else:
                        self.assertEqual(got.dtype, want.dtype)
                        np.testing.assert_array_equal(
                            got.reshape(want.shape), want)

    def test_both_layouts_match_the_cli_bit_for_bit(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, _, fold = case
            with self.subTest(case=case):
                x = llm_like(rng, 256, 384)
                got = moss_jit.quantize_both_layouts(
                    x, scheme, format=fmt, block=block, global_scope=scope,
                    fold=fold)
                want = cli_quantize(x, scheme, fmt, block, scope, False, fold,
                                    both_layouts=True)
                for q, (want_q, want_local, want_global) in zip(got, want):
                    np.testing.assert_array_equal(q.codes, want_q)
                    for g, w in ((q.local_scales, want_local),
                                 (q.global_scales, want_global)):
                        if w is None:
                            self.assertIsNone(g)
                        else:
                            np.testing.assert_array_equal(g.reshape(w.shape),
                                                          w)
                self.assertFalse(got[0].transposed)
                self.assertTrue(got[1].transposed)

    def test_every_code_is_the_nearest_fp8_value_of_x_over_its_scale(self):
        # Independent of libmoss: with the scale each element got, its code
        # must decode (by reference's own tables) to the FP8 value nearest
        # x / scale, clamped to the format's largest finite value. Only
        # values within 2^-20 of a midpoint may go either way (the scale's
        # own FP32 rounding).
        rng = np.random.default_rng()
        x = llm_like(rng, 64, 256).astype(np.float64)
        for scheme in ("per-tensor", "per-row", "per-group", "mxfp8",
                       "moss"):
            for fmt in ("e4m3", "e5m2"):
                with self.subTest(scheme=scheme, format=fmt):
                    q = moss_jit.quantize(x.astype(np.float32), scheme,
                                          format=fmt)
                    one = {"e4m3": 0x38, "e5m2": 0x3C}[fmt]
                    scale = reference.dequantize_numpy(q._replace(
                        codes=np.full_like(q.codes, one)))
                    got = reference.FP8_VALUES[fmt][q.codes.astype(np.int64)]
                    table = reference.FP8_VALUES[fmt]
                    finite = np.unique(table[np.isfinite(table)])
                    v = np.clip(x / scale, finite[0], finite[-1])
                    hi = np.clip(np.searchsorted(finite, v), 1,
                                 len(finite) - 1)
                    below, above = finite[hi - 1], finite[hi]
                    nearest = np.where(v - below <= above - v, below, above)
                    midpoint = np.abs(v - (below + above) / 2) <= \
                        np.abs(v) * 2.0 ** -20
                    ok = (got == nearest) | (midpoint & ((got == below) |
                                                         (got == above)))
                    self.assertTrue(np.all(ok), f"{np.sum(~ok)} codes are "
                                    "not the nearest FP8 value")

    def test_counters_add_saturated_and_non_finite(self):
        x = np.ones((4, 64), dtype=np.float32)
        x[1, 3] = np.nan
        counters = np.zeros(2, dtype=np.uint64)
        q = moss_jit.quantize(x, "moss", counters=counters)
        self.assertEqual(int(counters[1]), 1)
        self.assertEqual(int(q.local_scales[1, 0]), 255)


class QuantizeNumpyErrorTest(unittest.TestCase):
    def assertRaisesNaming(self, exception, text, *args, **kwargs):
        with self.assertRaises(exception) as caught:
            moss_jit.quantize(*args, **kwargs)
        self.assertIn(text, str(caught.exception))

    def test_errors_name_the_argument(self):
        x = np.zeros((64, 128), dtype=np.float32)
        self.assertRaisesNaming(ValueError, "scheme=", x, "two-level")
        self.assertRaisesNaming(ValueError, "format=", x, "moss",
                                format="e3m4")
        self.assertRaisesNaming(ValueError, "global_scope=", x, "moss",
                                global_scope="column")
        self.assertRaisesNaming(ValueError, "fold=", x, "moss", fold="col")
        self.assertRaisesNaming(ValueError, "fold='row'", x, "per-row",
                                fold="row")
        self.assertRaisesNaming(ValueError, "block=", x, "mxfp8", block=64)
        self.assertRaisesNaming(ValueError, "block=", x, "per-tensor",
                                block=32)
        self.assertRaisesNaming(ValueError, "block=", x, "moss", block="1x")
        self.assertRaisesNaming(ValueError, "not a multiple of the block",
                                np.zeros((64, 100), np.float32), "moss")
        self.assertRaisesNaming(ValueError, "not a multiple of the block",
                                np.zeros((100, 64), np.float32), "moss",
                                transpose=True)
        self.assertRaisesNaming(TypeError, "dtype", x.astype(np.float64),
                                "moss")
        self.assertRaisesNaming(ValueError, "2-D", np.zeros(64, np.float32),
                                "moss")
        self.assertRaisesNaming(ValueError, "contiguous", x[:, ::2], "moss")
        self.assertRaisesNaming(TypeError, "torch tensor or a numpy array",
                                [[1.0]], "moss")
        self.assertRaisesNaming(ValueError, "counters", x, "moss",
                                counters=np.zeros(2, np.int64))

    def test_the_host_takes_shapes_the_gpu_quantizers_refuse(self):
        # K = 7 has no 16-byte rows: the GPU's layout check refuses it with
        # a ValueError, the host reference quantizes it (as the CLI does).
        args = (3, 7, "f32", "per-tensor", "e4m3", 1, 0, "tensor", False,
                "none")
        with self.assertRaisesRegex(ValueError, "GPU quantizer"):
            moss_jit.schemes.quantize_spec(*args)
        _, layout = moss_jit.schemes.quantize_spec(*args, host=True)
        self.assertEqual((layout.code_rows, layout.code_cols), (3, 7))
        x = llm_like(np.random.default_rng(), 3, 7)
        q = moss_jit.quantize(x, "per-tensor")
        want_q, _, want_global = cli_quantize(x, "per-tensor", "e4m3", None,
                                              "tensor", False, None)
        np.testing.assert_array_equal(q.codes, want_q)
        np.testing.assert_array_equal(q.global_scales, want_global)


class AdversarialNumpyTest(unittest.TestCase):
    """Regression tests of what an adversarial pass found on 2026-12-06
    (issue 44): each once gave a wrong result, wrote outside its buffer or
    failed with a message that named nothing."""

    def test_counters_that_are_views_or_read_only_are_refused(self):
        x = np.ones((4, 64), dtype=np.float32)
        x[0, 0] = np.nan
        base = np.zeros(4, dtype=np.uint64)
        for name, counters in (
                ("strided view", base[::2]),
                ("negative stride", base[1::-1]),
                ("read-only", np.frombuffer(bytes(16), dtype=np.uint64))):
            with self.subTest(counters=name):
                with self.assertRaisesRegex(ValueError,
                                            "counters must be a contiguous, "
                                            "writeable"):
                    moss_jit.quantize(x, "moss", counters=counters)
                self.assertEqual(base.tolist(), [0, 0, 0, 0])
        # A contiguous view is written where it lies.
        moss_jit.quantize(x, "moss", counters=base[2:])
        self.assertEqual(base.tolist(), [0, 0, 0, 1])

    def test_scales_are_checked_by_shape_not_count(self):
        rng = np.random.default_rng()
        a = moss_jit.quantize(llm_like(rng, 16, 64), "mxfp8")
        b = moss_jit.quantize(llm_like(rng, 8, 64), "per-tensor")
        cases = [
            (a._replace(local_scales=a.local_scales.reshape(1, 32)),
             ValueError, "a.local_scales has shape (1, 32)"),
            (a._replace(local_scales=a.local_scales.reshape(32)),
             ValueError, "a.local_scales has shape (32,)"),
            (a._replace(local_scales=a.local_scales.astype(np.float32)),
             TypeError, "a.local_scales has dtype float32"),
            (a._replace(codes=a.codes.astype(np.int8)), TypeError,
             "a.codes has dtype int8"),
            (a._replace(codes=a.codes[:, :48]), ValueError,
             "a.codes has K=48, not a multiple of the scaling block 32"),
            (a._replace(global_scope="banana"), ValueError,
             "a.global_scope='banana'"),
        ]
        for bad, exception, text in cases:
            with self.subTest(text=text):
                with self.assertRaises(exception) as caught:
                    reference.gemm_numpy(bad, b)
                self.assertIn(text, str(caught.exception))
        with self.assertRaisesRegex(ValueError, "b.global_scales has shape"):
            reference.gemm_numpy(a, b._replace(
                global_scales=np.ones(8, np.float32)))

    def test_from_parts_checks_what_it_wraps(self):
        codes = np.zeros((4, 48), dtype=np.uint8)
        with self.assertRaisesRegex(ValueError, "K=48, not a multiple of the "
                                    "scaling block 32"):
            moss_jit.MossTensor.from_parts(
                codes, "moss", local_scales=np.zeros((4, 1), np.uint8),
                global_scales=np.ones(1, np.float32))
        with self.assertRaisesRegex(ValueError, "global_scope='banana'"):
            moss_jit.MossTensor.from_parts(
                codes, "per-tensor", global_scales=np.ones(1, np.float32),
                global_scope="banana")
        q = moss_jit.MossTensor.from_parts(
            codes, "per-row", global_scales=np.ones(4, np.float32))
        self.assertEqual(q.dequantize().shape, (4, 48))

    def test_from_parts_takes_back_what_quantize_gives(self):
        rng = np.random.default_rng()
        for case in QUANTIZE_CASES:
            scheme, fmt, block, scope, transpose, fold = case
            with self.subTest(case=case):
                q = moss_jit.quantize(llm_like(rng, 128, 256), scheme, fmt,
                                      block, scope, transpose, fold)
                again = moss_jit.MossTensor.from_parts(
                    q.codes, q.scheme, q.local_scales, q.global_scales,
                    q.format, q.block, q.global_scope)
                self.assertEqual(again[:7], q[:7])


class GemmBuffersLayoutTest(unittest.TestCase):
    """gemm() packs its moss_gemm_buffers_t with _capi.GEMM_BUFFERS and
    passes the bytes (_capi.moss_gemm_packed)."""

    FIELDS = [("a", "codes"), ("a", "local_scales"),
              ("a", "local_scale_count"), ("a", "global_scales"),
              ("a", "global_scale_count"), ("b", "codes"),
              ("b", "local_scales"), ("b", "local_scale_count"),
              ("b", "global_scales"), ("b", "global_scale_count"),
              ("d",), ("bias",), ("c",), ("amax",)]

    def test_the_packed_bytes_are_the_struct_field_by_field(self):
        values = [(i + 1) << 20 | i for i in range(len(self.FIELDS))]
        buffers = _capi.GemmBuffers.from_buffer_copy(
            _capi.GEMM_BUFFERS.pack(*values))
        for path, value in zip(self.FIELDS, values):
            field = buffers
            for name in path:
                field = getattr(field, name)
            self.assertEqual(field, value, path)

    def test_libmoss_reads_the_packed_bytes(self):
        # moss_gemm_check takes the buffers as moss_gemm_packed does.
        check = _capi.lib["moss_gemm_check"]
        check.restype = ctypes.c_void_p
        check.argtypes = [ctypes.POINTER(_capi.GemmSpec), ctypes.c_int64,
                          ctypes.c_char_p]
        spec = _capi.GemmSpec()
        _capi.lib.moss_gemm_spec_init(ctypes.byref(spec))
        spec.m, spec.n, spec.k = 64, 64, 128
        spec.a.scheme = spec.b.scheme = _capi.SCHEMES["per-tensor"]
        spec.a.block_cols = spec.b.block_cols = 0
        base = 1 << 32
        good = [base, 0, 0, base + 4096, 1, base + 8192, 0, 0, base + 12288,
                1, base + 16384, 0, 0, 0]
        _capi.check(check(spec, 64, _capi.GEMM_BUFFERS.pack(*good)))
        for index, value, text in ((4, 2, "a.globalScaleCount=2"),
                                   (10, 0, "buffers.d"),
                                   (5, base + 1, "b.codes must be 16-byte")):
            bad = list(good)
            bad[index] = value
            with self.subTest(field=self.FIELDS[index]):
                with self.assertRaisesRegex(ValueError, text):
                    _capi.check(check(spec, 64, _capi.GEMM_BUFFERS.pack(*bad)))


class GemmSpecLayoutTest(unittest.TestCase):
    def test_the_struct_is_libmoss_s(self):
        # moss_gemm_spec_init writes the library's whole struct and its
        # size: the ctypes struct must be as large, or the call overruns it.
        spec = _capi.GemmSpec()
        _capi.lib.moss_gemm_spec_init(ctypes.byref(spec))
        self.assertEqual(spec.struct_size, ctypes.sizeof(_capi.GemmSpec))
        self.assertEqual(spec.groups, 0)


class SchemeDefaultsTest(unittest.TestCase):
    def test_default_blocks_are_libmoss_s(self):
        # parse_block's defaults mirror the library's (a block_cols of 0 in
        # a C spec): a quantization of 4096 columns has 4096 / block_cols
        # block scales per row.
        from moss_jit import schemes
        for scheme in schemes.BLOCKED:
            rows, cols = schemes.parse_block(scheme, None)
            with self.subTest(scheme=scheme):
                _, layout = schemes.quantize_spec(
                    4, 4096, "f32", scheme, "e4m3", 1, 0, "tensor", False,
                    "none", host=True)
                self.assertEqual((rows, layout.local_cols), (1, 4096 // cols))


if __name__ == "__main__":
    unittest.main()
