"""ctypes bindings of libmoss.so (include/moss/moss.h).

The structs mirror moss.h field for field; every call that can fail returns
an error object, which `check` turns into a Python exception.
"""

import atexit
import ctypes
import os
import struct
import threading
import weakref
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint64, c_void_p)

# Enum values of moss.h.
SCHEMES = {"per-tensor": 0, "per-row": 1, "per-group": 2, "mxfp8": 3,
           "moss": 4}
GLOBAL_SCOPES = {"tensor": 0, "row": 1}
FORMATS = {"e4m3": 0, "e5m2": 1}
INPUTS = {"f32": 0, "bf16": 1}
FOLDS = {"auto": 0, "none": 1, "128": 2, "row": 3}
FLOAT_TYPES = {None: -1, "bf16": 0, "f16": 1, "f32": 2}
MMA_TYPES = {"auto": 0, "fp8": 1, "f16": 2}
GROUP_LAYOUTS = {"contiguous": 0, "masked": 1}
# moss_group_layout_t's k-grouped layout (moss_jit.k_grouped_gemm).
GROUPS_ALONG_K = 2
DYNAMIC = -1

ERROR_INVALID_ARGUMENT = 1
ERROR_NO_DEVICE = 2


class MossError(RuntimeError):
    """A failure reported by libmoss (its code and message)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class QuantizeSpec(Structure):
    _fields_ = [("struct_size", c_size_t), ("rows", c_int64),
                ("cols", c_int64), ("input", c_int32),
                ("scheme", c_int32), ("block_rows", c_int64),
                ("block_cols", c_int64), ("global_scope", c_int32),
                ("format", c_int32), ("transpose", c_int32),
                ("fold", c_int32)]


class QuantizeLayout(Structure):
    _fields_ = [("code_rows", c_int64), ("code_cols", c_int64),
                ("local_rows", c_int64), ("local_cols", c_int64),
                ("local_element_bytes", c_int64), ("global_count", c_int64)]


class QuantizeBuffers(Structure):
    _fields_ = [("x", c_uint64), ("q", c_uint64), ("local", c_uint64),
                ("global_", c_uint64), ("counters", c_uint64)]


class QuantizeHostBuffers(Structure):
    _fields_ = [("x", c_void_p), ("q", c_void_p), ("local", c_void_p),
                ("global_", c_void_p), ("counters", c_void_p)]


class ContextOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("device_ordinal", c_int32),
                ("cache_directory", c_char_p)]


class WeightScalerOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("bound", c_int32),
                ("reserved", c_int32), ("beta1", c_double),
                ("beta2", c_double), ("explicit_bound", c_double),
                ("interval", c_int64)]


class WeightScaleStep(Structure):
    _fields_ = [("step", c_int64), ("reason", c_int32), ("scale", c_float)]


class WeightScalerStats(Structure):
    _fields_ = [("struct_size", c_size_t), ("steps", c_int64),
                ("rescales", c_int64), ("no_anchor_rescales", c_int64),
                ("interval_rescales", c_int64),
                ("saturation_rescales", c_int64),
                ("saturation_events", c_int64),
                ("saturated_values", c_uint64),
                ("non_finite_blocks", c_uint64),
                ("non_finite_anchors", c_int64), ("observed_step", c_int64),
                ("last_saturation_step", c_int64),
                ("anchors_applied", c_int64), ("anchor_step", c_int64),
                ("anchor_amax", c_float), ("reserved", c_int32),
                ("dropped_snapshots", c_int64)]


class GemmOperandSpec(Structure):
    _fields_ = [("format", c_int32), ("scheme", c_int32),
                ("block_rows", c_int64), ("block_cols", c_int64),
                ("global_scope", c_int32), ("reserved", c_int32)]


class AdamWStep(Structure):
    _fields_ = [("struct_size", c_size_t), ("grad", c_uint64),
                ("exp_avg", c_uint64), ("exp_avg_sq", c_uint64),
                ("lr", c_double), ("beta1", c_double), ("beta2", c_double),
                ("eps", c_double), ("weight_decay", c_double),
                ("step", c_int64)]


class GemmSpec(Structure):
    _fields_ = [("struct_size", c_size_t), ("m", c_int64), ("n", c_int64),
                ("k", c_int64), ("a", GemmOperandSpec),
                ("b", GemmOperandSpec), ("out", c_int32), ("bias", c_int32),
                ("accumulate", c_int32), ("amax", c_int32), ("beta", c_float),
                ("promote_k", c_int32), ("mma", c_int32), ("fold", c_int32),
                ("groups", c_int32), ("group_layout", c_int32)]


class GemmOperand(Structure):
    _fields_ = [("codes", c_uint64), ("local_scales", c_uint64),
                ("local_scale_count", c_int64), ("global_scales", c_uint64),
                ("global_scale_count", c_int64)]


class GemmBuffers(Structure):
    _fields_ = [("a", GemmOperand), ("b", GemmOperand), ("d", c_uint64),
                ("bias", c_uint64), ("c", c_uint64), ("amax", c_uint64)]


def _packer(struct_type):
    """A struct.Struct that writes all of `struct_type`'s fields (nested
    structs flattened, in order) in one call; `struct_type` holds 64-bit
    integers only, so its layout has no padding."""
    codes = {c_uint64: "Q", c_int64: "q"}

    def fields(t):
        for _, field_type in t._fields_:
            if field_type in codes:
                yield codes[field_type]
            else:
                yield from fields(field_type)

    packer = struct.Struct("=" + "".join(fields(struct_type)))
    assert packer.size == ctypes.sizeof(struct_type), struct_type
    return packer


# The bytes of a moss_gemm_buffers_t, field by field in moss.h's order:
# packing them costs a fraction of setting a GemmBuffers' fields one by one.
GEMM_BUFFERS = _packer(GemmBuffers)


def _library_path():
    override = os.environ.get("MOSS_JIT_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib",
                        "libmoss.so.2")


def _cuda_wheel_dirs():
    """The library folders of pip's CUDA 13 wheels (nvidia-cuda-nvrtc,
    nvidia-cublas, ...: nvidia/cu13/lib in any site directory), which torch
    brings where no CUDA toolkit is installed."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    locations = spec.submodule_search_locations if spec else None
    return [path for path in (os.path.join(location, "cu13", "lib")
                              for location in (locations or ()))
            if os.path.isdir(path)]


def _list_cuda_wheels():
    """Appends the CUDA wheels' folders to $MOSS_CUDA_LIBRARY_DIRS, where
    libmoss looks for NVRTC (and cuBLASLt) after the toolkit's locations."""
    listed = [d for d in os.environ.get("MOSS_CUDA_LIBRARY_DIRS",
                                        "").split(":") if d]
    added = [d for d in _cuda_wheel_dirs() if d not in listed]
    if added:
        os.environ["MOSS_CUDA_LIBRARY_DIRS"] = ":".join(listed + added)


def _load():
    _list_cuda_wheels()
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as error:
        raise ImportError(
            f"moss_jit cannot load its C library {path}: {error}. Reinstall "
            "the package (pip install of the MOSS-JIT repository), or set "
            "MOSS_JIT_LIBRARY to a libmoss.so.2.") from error
    error_t = c_void_p
    signatures = {
        "moss_api_version": (c_int, []),
        "moss_version": (c_char_p, []),
        "moss_error_message": (c_char_p, [error_t]),
        "moss_error_code": (c_int, [error_t]),
        "moss_error_destroy": (None, [error_t]),
        "moss_quantize_layout": (error_t, [POINTER(QuantizeSpec),
                                           POINTER(QuantizeLayout)]),
        "moss_quantize_host_layout": (error_t, [POINTER(QuantizeSpec),
                                                POINTER(QuantizeLayout)]),
        "moss_quantize_host": (error_t, [POINTER(QuantizeSpec),
                                         POINTER(QuantizeHostBuffers)]),
        "moss_context_options_init": (None, [POINTER(ContextOptions)]),
        "moss_context_create": (error_t, [POINTER(ContextOptions),
                                          POINTER(c_void_p)]),
        "moss_context_destroy": (None, [c_void_p]),
        "moss_quantize": (error_t, [c_void_p, POINTER(QuantizeSpec),
                                    POINTER(QuantizeBuffers), c_void_p]),
        "moss_quantize_gathered": (error_t, [
            c_void_p, POINTER(QuantizeSpec), POINTER(QuantizeBuffers),
            c_uint64, c_int64, c_void_p]),
        "moss_cast_with_scale": (error_t, [c_void_p, POINTER(QuantizeSpec),
                                           c_uint64, POINTER(QuantizeBuffers),
                                           c_void_p]),
        "moss_quantize_both_layouts_layout": (error_t, [
            POINTER(QuantizeSpec), POINTER(QuantizeLayout),
            POINTER(QuantizeLayout)]),
        "moss_quantize_both_layouts": (error_t, [
            c_void_p, POINTER(QuantizeSpec), POINTER(QuantizeBuffers),
            POINTER(QuantizeBuffers), c_uint64, c_void_p]),
        "moss_weight_scaler_options_init": (
            None, [POINTER(WeightScalerOptions)]),
        "moss_weight_scaler_create": (error_t, [
            c_void_p, POINTER(WeightScalerOptions), POINTER(c_void_p)]),
        "moss_weight_scaler_destroy": (None, [c_void_p]),
        "moss_weight_scaler_step": (error_t, [
            c_void_p, c_double, POINTER(QuantizeSpec),
            POINTER(QuantizeBuffers), c_void_p, POINTER(WeightScaleStep)]),
        "moss_weight_scaler_step_both_layouts": (error_t, [
            c_void_p, c_double, POINTER(QuantizeSpec),
            POINTER(QuantizeBuffers), POINTER(QuantizeBuffers), c_void_p,
            POINTER(WeightScaleStep)]),
        "moss_weight_scaler_step_experts": (error_t, [
            POINTER(c_void_p), ctypes.c_size_t, c_double,
            POINTER(QuantizeSpec), POINTER(QuantizeBuffers),
            POINTER(QuantizeBuffers), c_void_p, POINTER(WeightScaleStep)]),
        "moss_adamw_step_init": (None, [POINTER(AdamWStep)]),
        "moss_weight_scaler_adamw_step": (error_t, [
            c_void_p, POINTER(AdamWStep), POINTER(QuantizeSpec),
            POINTER(QuantizeBuffers), POINTER(QuantizeBuffers), c_void_p,
            POINTER(WeightScaleStep)]),
        "moss_expert_scalers_adamw_step": (error_t, [
            c_void_p, POINTER(AdamWStep), POINTER(QuantizeSpec),
            POINTER(QuantizeBuffers), POINTER(QuantizeBuffers), c_void_p,
            POINTER(WeightScaleStep)]),
        "moss_weight_scaler_stats": (error_t, [
            c_void_p, POINTER(WeightScalerStats)]),
        "moss_expert_scalers_create": (error_t, [
            c_void_p, POINTER(WeightScalerOptions), ctypes.c_size_t,
            POINTER(c_void_p)]),
        "moss_expert_scalers_destroy": (None, [c_void_p]),
        "moss_expert_scalers_step": (error_t, [
            c_void_p, c_double, POINTER(QuantizeSpec),
            POINTER(QuantizeBuffers), POINTER(QuantizeBuffers), c_void_p,
            POINTER(WeightScaleStep)]),
        "moss_expert_scalers_stats": (error_t, [
            c_void_p, ctypes.c_size_t, POINTER(WeightScalerStats)]),
        "moss_gemm_spec_init": (None, [POINTER(GemmSpec)]),
        "moss_gemm_check": (error_t, [POINTER(GemmSpec), c_int64,
                                      POINTER(GemmBuffers)]),
        "moss_gemm": (error_t, [c_void_p, POINTER(GemmSpec), c_int64,
                                POINTER(GemmBuffers), c_void_p]),
        "moss_gemm_plan_create": (error_t, [c_void_p, POINTER(GemmSpec),
                                            POINTER(c_void_p)]),
        "moss_gemm_plan_launch": (error_t, [c_void_p, c_int64,
                                            POINTER(GemmBuffers), c_void_p]),
        "moss_gemm_plan_destroy": (None, [c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


lib = _load()
if lib.moss_api_version() != 2:
    raise ImportError(f"libmoss API version {lib.moss_api_version()}, "
                      "this package expects 2")

# moss_gemm again, with its buffers passed as the bytes of
# GEMM_BUFFERS.pack(...): ctypes hands over a pointer to the bytes object's
# own (immutable) storage, which saves building a GemmBuffers from them.
moss_gemm_packed = lib["moss_gemm"]
moss_gemm_packed.restype = c_void_p
moss_gemm_packed.argtypes = [c_void_p, POINTER(GemmSpec), c_int64, c_char_p,
                             c_void_p]
# moss_gemm_plan_launch_grouped likewise (plan, m, buffers, group offsets,
# stream).
moss_gemm_plan_launch_grouped_packed = lib["moss_gemm_plan_launch_grouped"]
moss_gemm_plan_launch_grouped_packed.restype = c_void_p
moss_gemm_plan_launch_grouped_packed.argtypes = [c_void_p, c_int64, c_char_p,
                                                 c_uint64, c_void_p]


def check(error):
    """Raises the error object `error` (an int or None) as an exception."""
    if not error:
        return
    try:
        code = lib.moss_error_code(error)
        message = lib.moss_error_message(error).decode("utf-8", "replace")
    finally:
        lib.moss_error_destroy(error)
    if code == ERROR_INVALID_ARGUMENT:
        raise ValueError(message)
    raise MossError(code, message)


class _Contexts(threading.local):
    """One moss context per device and thread (a context is not
    thread-safe)."""

    def __init__(self):
        self.by_device = {}


_contexts = _Contexts()


# GEMM plans a context keeps, at most; past that they are all freed (a plan
# is remade on its spec's next call).
_PLANS_MAX = 4096


class _Context:
    def __init__(self, ordinal):
        # The GEMM plans made in this context: the bytes of a GemmSpec ->
        # its moss_gemm_plan_t.
        self.plans = {}
        options = ContextOptions()
        lib.moss_context_options_init(ctypes.byref(options))
        options.device_ordinal = ordinal
        handle = c_void_p()
        check(lib.moss_context_create(ctypes.byref(options),
                                      ctypes.byref(handle)))
        self.handle = handle.value

    def plan(self, spec):
        """The plan of `spec` in this context (made on first use: its
        kernels are compiled or loaded then)."""
        # ctypes structures are not hashable: key by the struct's bytes
        # (zeroed at creation, so equal specs have equal bytes).
        key = bytes(spec)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= _PLANS_MAX:
                self.free_plans()
            handle = c_void_p()
            check(lib.moss_gemm_plan_create(self.handle, ctypes.byref(spec),
                                            ctypes.byref(handle)))
            plan = self.plans[key] = handle.value
        return plan

    def free_plans(self):
        for plan in self.plans.values():
            lib.moss_gemm_plan_destroy(plan)
        self.plans.clear()

    def close(self):
        if getattr(self, "handle", None):
            self.free_plans()  # plans go before their context
            lib.moss_context_destroy(self.handle)
            self.handle = None

    __del__ = close


# Weight scalers alive (each must go before its context).
live_scalers = weakref.WeakSet()


@atexit.register
def _release():
    """Frees the scalers, then this thread's contexts, while the
    interpreter still runs: a context's destruction waits for its
    background compiles."""
    for scaler in list(live_scalers):
        scaler.close()
    for ctx in list(_contexts.by_device.values()):
        ctx.close()
    _contexts.by_device.clear()


def _context_object(ordinal):
    ctx = _contexts.by_device.get(ordinal)
    if ctx is None:
        ctx = _Context(ordinal)
        _contexts.by_device[ordinal] = ctx
    return ctx


def context(ordinal):
    """This thread's moss context of CUDA device `ordinal` (created on first
    use)."""
    return _context_object(ordinal).handle


def plan(ordinal, spec):
    """This thread's moss_gemm_plan_t of the GemmSpec `spec` on device
    `ordinal` (created on first use)."""
    return _context_object(ordinal).plan(spec)
