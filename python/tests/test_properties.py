"""Property-based tests of the Python API (hypothesis):

- quantize of random schemes, formats, blocks, shapes and values (NaN, Inf,
  -0, subnormals, huge and tiny magnitudes) is bit for bit the independent
  numpy reference of tests/lit/tools/quantize_reference.py, for numpy arrays
  and CPU torch tensors;
- random malformed MossTensors and arguments to gemm, gemm_numpy,
  dequantize, from_parts and quantize raise ValueError or TypeError with a
  message naming what was wrong. Each call runs in a child process, so a
  native crash fails the test instead of ending it.

Skips without hypothesis (the test command installs it).
"""

import concurrent.futures
import multiprocessing
import os
import re
import sys
import unittest

import numpy as np

from support import have_torch

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:
    raise unittest.SkipTest("hypothesis is not installed (pip install "
                            "hypothesis)")

import moss_jit  # noqa: E402
from moss_jit import reference  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "lit", "tools"))
import quantize_reference  # noqa: E402

SETTINGS = settings(max_examples=int(os.environ.get("MOSS_HYPOTHESIS_EXAMPLES",
                                                    "150")),
                    deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large])

#===--- values and quantizations -----------------------------------------===#

# Values that exercise every rule: specials, subnormals of FP32, the FP8
# formats' limits and the magnitudes around them.
SPECIAL = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-45,
           -1e-45, 1.17549435e-38, 3.4028235e38, -3.4028235e38, 448.0, 464.0,
           57344.0, 61440.0, 2.0 ** -9, 2.0 ** -16, 1.0]


@st.composite
def matrices(draw, rows, cols):
    """A float32 [rows, cols] matrix: a random magnitude range, with a few
    special values sprinkled in."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    exponent = draw(st.integers(-140, 120))
    spread = draw(st.integers(0, 40))
    x = rng.standard_normal((rows, cols)) * \
        np.exp2(rng.integers(exponent - spread, exponent + 1, (rows, cols)))
    x = x.astype(np.float32)
    specials = draw(st.lists(st.tuples(st.integers(0, rows - 1),
                                       st.integers(0, cols - 1),
                                       st.sampled_from(SPECIAL)),
                             max_size=4))
    for i, j, value in specials:
        x[i, j] = np.float32(value)
    return x


@st.composite
def quantizations(draw):
    """(x, scheme, format, block, global_scope, transpose)."""
    scheme = draw(st.sampled_from(quantize_reference.SCHEMES))
    fmt = draw(st.sampled_from(("e4m3", "e5m2")))
    block = None
    if scheme == "per-group":
        block = draw(st.sampled_from((None, 32, 64, 128, (128, 128),
                                      (32, 32))))
    elif scheme == "moss":
        block = draw(st.sampled_from((None, 32, 64, 128)))
    scope = draw(st.sampled_from(("tensor", "row"))) if scheme == "moss" \
        else "tensor"
    transpose = draw(st.booleans())
    cols_of_block = {None: {"per-group": 128}.get(scheme, 32)}
    n = block[1] if isinstance(block, tuple) else \
        (block or cols_of_block[None])
    if scheme in ("per-tensor", "per-row"):
        n = 1
    k = n * draw(st.integers(1, 3))
    other = draw(st.integers(1, 40))
    shape = (k, other) if transpose else (other, k)
    return draw(matrices(*shape)), scheme, fmt, block, scope, transpose


def bits(array):
    """Bit patterns, so that NaNs compare equal to themselves."""
    array = np.ascontiguousarray(array)
    if array.dtype == np.float32:
        return array.view(np.uint32)
    return array


class QuantizeProperties(unittest.TestCase):
    def check_against_reference(self, got, case):
        x, scheme, fmt, block, scope, transpose = case
        want, _ = quantize_reference.quantize(
            x, scheme, fmt, block, scope if scheme == "moss" else None,
            transpose)
        np.testing.assert_array_equal(reference._to_numpy(got.codes),
                                      want["q"])
        for part, name in ((got.local_scales, "local"),
                           (got.global_scales, "global")):
            if name not in want:
                self.assertIsNone(part, name)
                continue
            np.testing.assert_array_equal(
                bits(reference._to_numpy(part)).reshape(want[name].shape),
                bits(want[name]), err_msg=name)

    @SETTINGS
    @given(quantizations())
    def test_numpy_quantize_is_the_independent_reference(self, case):
        x, scheme, fmt, block, scope, transpose = case
        got = moss_jit.quantize(x, scheme, fmt, block, scope, transpose)
        self.check_against_reference(got, case)

    @unittest.skipUnless(have_torch(), "torch is not installed")
    @SETTINGS
    @given(quantizations(), st.booleans())
    def test_torch_cpu_quantize_is_the_independent_reference(self, case,
                                                             bf16):
        import torch
        x, scheme, fmt, block, scope, transpose = case
        t = torch.from_numpy(x)
        if bf16:
            t = t.bfloat16()
            case = (t.float().numpy(),) + case[1:]
        got = moss_jit.quantize(t, scheme, fmt, block, scope, transpose)
        self.check_against_reference(got, case)

    @unittest.skipUnless(have_torch(), "torch is not installed")
    @SETTINGS
    @given(quantizations(), st.integers(1, 24))
    def test_dequantized_gemm_is_the_fp64_product(self, case, n):
        # gemm on CPU tensors against products of the reference's values.
        import torch
        x, scheme, fmt, block, scope, transpose = case
        a = moss_jit.quantize(torch.from_numpy(x), scheme, fmt, block, scope,
                              transpose)
        k = a.shape[1]
        b = moss_jit.quantize(torch.randn(n, k), "per-row")
        d = moss_jit.gemm(a, b, out_dtype=torch.float32)
        want = reference.dequantize_numpy(a) @ reference.dequantize_numpy(b).T
        with np.errstate(invalid="ignore", over="ignore"):
            expected = want.astype(np.float32)
        np.testing.assert_array_equal(d.numpy(), expected)


#===--- malformed input --------------------------------------------------===#

# What a mutation may put where a valid value was.
JUNK = [None, 0, -1, 1.5, "", "banana", "moss", (1,), (0, 32), (-1, 32),
        (1, 33), (2, 32), [1, 32], "1x", b"32", float("nan"), object()]


def _operand(kind, scheme, rows, k):
    x = np.random.default_rng().standard_normal((rows, k)).astype(np.float32)
    if kind == "torch":
        import torch
        x = torch.from_numpy(x)
    return moss_jit.quantize(x, scheme, global_scope="row"
                             if scheme == "moss" else "tensor")


def _mutated_array(array, how):
    """A wrong version of `array` (numpy or torch)."""
    is_numpy = isinstance(array, np.ndarray)
    if how == "flat":
        return array.reshape(-1)
    if how == "row":
        return array.reshape(1, -1)
    if how == "scalar":
        return array.reshape(-1)[:1].reshape(())
    if how == "short":
        return array[:-1] if array.shape[0] > 1 else array[:0]
    if how == "wide":
        pad = array[:, :1] if array.ndim == 2 else array[:1]
        axis = 1 if array.ndim == 2 else 0
        if is_numpy:
            return np.concatenate([array, pad], axis=axis)
        import torch
        return torch.cat([array, pad], dim=axis)
    if how == "strided":
        if is_numpy:
            return np.repeat(array, 2, axis=-1)[..., ::2]
        import torch
        return torch.repeat_interleave(array, 2, dim=-1)[..., ::2]
    if how == "float64":
        return array.astype(np.float64) if is_numpy else \
            array.view(__import__("torch").uint8).double()
    if how == "int8":
        return array.view(np.int8) if is_numpy else \
            array.view(__import__("torch").int8)
    if how == "other kind":
        if is_numpy:
            import torch
            return torch.from_numpy(array)
        return reference._to_numpy(array)
    if how == "list":
        return reference._to_numpy(array).tolist()
    raise AssertionError(how)


ARRAY_MUTATIONS = ("flat", "row", "scalar", "short", "wide", "strided",
                   "float64", "int8", "other kind", "list", "none")
FIELDS = ("codes", "local_scales", "global_scales", "scheme", "format",
          "block", "global_scope")


def run_malformed_case(case):
    """Runs one malformed call (in a child process); returns None where the
    call succeeded, else (exception type name, message)."""
    target = case["target"]
    kind = case["kind"]
    try:
        a = _operand(kind, case["a_scheme"], case["rows"], case["k"])
        b = _operand(kind, case["b_scheme"], case["n"], case["k"])
        field, mutation = case["field"], case["mutation"]
        if field in ("codes", "local_scales", "global_scales"):
            value = getattr(a, field)
            if mutation == "none":
                value = None
            elif value is None:
                value = getattr(b, field) if getattr(b, field) is not None \
                    else a.codes
            else:
                value = _mutated_array(value, mutation)
            a = a._replace(**{field: value})
        elif field is not None:
            a = a._replace(**{field: mutation})
        if target == "gemm":
            import torch
            kwargs = dict(case["kwargs"])
            if "bias" in kwargs:
                kwargs["bias"] = torch.randn(*kwargs["bias"])
            if "c" in kwargs:
                kwargs["c"] = torch.randn(*kwargs["c"])
            moss_jit.gemm(a, b, **kwargs)
        elif target == "gemm_numpy":
            reference.gemm_numpy(a, b)
        elif target == "dequantize":
            a.dequantize()
        elif target == "from_parts":
            moss_jit.MossTensor.from_parts(
                a.codes, a.scheme, a.local_scales, a.global_scales,
                a.format, a.block, a.global_scope)
        elif target == "quantize":
            x = np.random.default_rng().standard_normal(
                (case["rows"], case["k"])).astype(np.float32)
            if kind == "torch":
                import torch
                x = torch.from_numpy(x)
            if case["x_mutation"]:
                x = _mutated_array(x, case["x_mutation"])
            moss_jit.quantize(x, **case["kwargs"])
        return None
    except (ValueError, TypeError) as error:
        return type(error).__name__, str(error)
    except Exception as error:  # anything else is a defect: report it
        return type(error).__name__, f"UNEXPECTED {error!r}"


@st.composite
def malformed_cases(draw, torch_ok):
    kind = draw(st.sampled_from(("numpy", "torch") if torch_ok
                                else ("numpy",)))
    targets = ["gemm_numpy", "dequantize", "from_parts", "quantize"]
    if kind == "torch":
        targets.append("gemm")
    case = {"kind": kind, "target": draw(st.sampled_from(targets)),
            "a_scheme": draw(st.sampled_from(quantize_reference.SCHEMES)),
            "b_scheme": draw(st.sampled_from(quantize_reference.SCHEMES)),
            "rows": draw(st.integers(1, 9)), "n": draw(st.integers(1, 9)),
            "k": 128 * draw(st.integers(1, 2)), "field": None,
            "mutation": None, "kwargs": {}, "x_mutation": None}
    if case["target"] == "quantize":
        arguments = {"scheme": st.sampled_from(JUNK + ["per-tensor"]),
                     "format": st.sampled_from(JUNK + ["e5m2"]),
                     "block": st.sampled_from(JUNK + [64]),
                     "global_scope": st.sampled_from(JUNK + ["row"]),
                     "fold": st.sampled_from(JUNK + ["row", "128"]),
                     "counters": st.sampled_from(JUNK + ["bad counters"])}
        name = draw(st.sampled_from(sorted(arguments) + ["x"]))
        kwargs = {"scheme": draw(st.sampled_from(quantize_reference.SCHEMES))}
        if name == "x":
            case["x_mutation"] = draw(st.sampled_from(
                [m for m in ARRAY_MUTATIONS if m not in ("none",)]))
        else:
            kwargs[name] = draw(arguments[name])
        case["kwargs"] = kwargs
        case["blame"] = name
        return case
    if case["target"] == "gemm" and draw(st.booleans()):
        name, value = draw(st.sampled_from([
            ("beta", float("nan")), ("beta", "2"), ("beta", None),
            ("mma", "tf32"), ("mma", None), ("fold", "col"), ("fold", 3),
            ("out_dtype", "bf16"), ("out_dtype", None), ("bias", (7,)),
            ("bias", (1, 1)), ("c", (3, 3)), ("amax", "yes")]))
        case["kwargs"] = {name: value}
        if name == "beta":
            case["kwargs"]["c"] = (case["rows"], case["n"])
        case["blame"] = name
        return case
    field = draw(st.sampled_from(FIELDS))
    case["field"] = field
    case["mutation"] = draw(st.sampled_from(ARRAY_MUTATIONS)) \
        if field in ("codes", "local_scales", "global_scales") \
        else draw(st.sampled_from(JUNK))
    case["blame"] = "a" if case["target"] in ("gemm", "gemm_numpy") else \
        "from_parts" if case["target"] == "from_parts" else "q"
    return case


def names(message, blame):
    """Whether an error message names `blame`: an argument (`beta=`,
    `beta must`...), or an operand's part (`a.local_scales`, `a is`)."""
    if blame in ("a", "q", "from_parts"):
        pattern = rf"\b{blame}(\.\w+|\b is\b|\b has\b)|\bscheme=|\bformat=" \
            r"|\bblock=|\bglobal_scope="
    else:
        pattern = rf"\b{blame}\b"
    return re.search(pattern, message) is not None


class MalformedInputProperties(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # One child at a time; a crash breaks the pool, which is then made
        # anew for the next case.
        cls.context = multiprocessing.get_context("spawn")
        cls.pool = None

    @classmethod
    def tearDownClass(cls):
        if cls.pool is not None:
            cls.pool.shutdown()

    def run_in_child(self, case):
        cls = type(self)
        if cls.pool is None:
            cls.pool = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=cls.context)
        try:
            return cls.pool.submit(run_malformed_case, case).result(60)
        except concurrent.futures.process.BrokenProcessPool:
            cls.pool = None
            self.fail(f"the child process died (a native crash) on {case}")

    @settings(max_examples=int(os.environ.get("MOSS_HYPOTHESIS_EXAMPLES",
                                              "150")),
              deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_malformed_input_raises_an_error_naming_it(self, data):
        case = data.draw(malformed_cases(have_torch()))
        outcome = self.run_in_child(case)
        if outcome is None:
            return  # the mutation left a valid call
        kind, message = outcome
        self.assertNotIn("UNEXPECTED", message, f"{kind} on {case}")
        self.assertIn(kind, ("ValueError", "TypeError"), case)
        self.assertTrue(names(message, case["blame"]),
                        f"{kind}: {message!r} does not name "
                        f"{case['blame']!r} ({case})")


if __name__ == "__main__":
    unittest.main()
