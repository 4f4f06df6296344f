"""The public NumPy-like functions: the top layer.

Layers, each importing only the ones below it:

    dmlq.api         these functions: arguments -> a validated plan -> launch
    dmlq.operator    compile_operator: DirectML descriptors bound to arrays
    dmlq.validation  the DirectML rules (seed tables, constraints, feature levels)
    dmlq.dispatch    which backend runs a call (dmlq.reference or dmlq.gpu), and running it

A call first normalizes its operands (lists and tuples as ``np.asarray`` makes
them, CPU DLPack tensors such as torch CPU tensors as NumPy views, CUDA arrays as
CuPy views), then looks up a *plan* keyed by everything the checks depend on:
the backend, each operand's type, dtype, shape and strides, the value of every
scalar (bit for bit, so ``-0.0`` and ``0.0`` differ), and the keyword
parameters. A new key runs every check -- in NumPy vocabulary, naming the
argument, what it got, what it accepts and how to fix it -- builds and validates
the equivalent DirectML descriptor, and stores the plan; a known key goes
straight to the launch. What depends on an array's *values* (a zero point of a
wider integer dtype that must fit) is checked on every call.

The numeric contract is docs/semantics.md.
"""
from __future__ import annotations

import contextvars
import math
import numbers

import numpy as np

from . import dispatch
from .desc import (DequantizeLinearDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc, pool_output_size)
from .dtypes import DataType
from .errors import DescError
from .operator import compile_operator

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
I8, U8, I32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)
F64 = np.dtype(np.float64)
_QUANT = (I8, U8)
_INTS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32))
MAX_DIMS = 8  # DirectML's limit for the element-wise operators

HOST, GPU = dispatch.HOST, dispatch.GPU


def _or(dtypes) -> str:
    names = [np.dtype(d).name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _np(dt) -> str:
    return f"np.{np.dtype(dt).name}"


# ------------------------------------------------------------------ operands

class _Spec:
    """One public function: its name, operand names and which operands are float data."""

    def __init__(self, fname, names, float_roles, planner, backend_name, gpu_takes_host_scalars=False):
        self.fname = fname
        self.names = names
        self.float_roles = float_roles
        self.planner = planner
        self.backend_name = backend_name
        # The element-wise kernels take a per-tensor scale or zero point by value:
        # a scalar stays on the host (no copy to the device per call).
        self.gpu_takes_host_scalars = gpu_takes_host_scalars


def _slow_operand(spec, name, v):
    """Anything that is not a NumPy array, None or a plain number: (value, side)."""
    f = spec.fname
    if dispatch.is_gpu(v):
        return v, GPU  # made a CuPy view once every operand is known to be on the GPU
    if isinstance(v, (list, tuple)):
        try:
            arr = np.asarray(v)
        except Exception as e:  # ragged nesting, mixed GPU/host items...
            raise TypeError(f"{f}: {name} is a {type(v).__name__} that np.asarray cannot turn into one "
                            f"numeric array ({type(e).__name__}: {e}); pass a numpy array") from None
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{f}: {name} is a {type(v).__name__} that np.asarray turns into dtype "
                            f"{arr.dtype}, not numbers; pass a numeric numpy array")
        if name in spec.float_roles and arr.dtype.kind in "iuf":
            arr = arr.astype(np.float32)  # Python numbers carry no dtype: they become float32
        return arr, HOST
    if dispatch.cpu_dlpack(v):
        try:
            return np.from_dlpack(v), HOST
        except Exception as e:
            raise TypeError(f"{f}: {name} is a CPU {type(v).__name__} that NumPy cannot import through "
                            f"DLPack ({type(e).__name__}: {e}); pass {name}.detach().numpy() or a numpy "
                            f"array") from None
    if isinstance(v, (bool, numbers.Number, np.generic)):
        return v, None  # a scalar: typed by the planner
    if hasattr(v, "__array__") or hasattr(v, "__array_interface__"):
        return np.asarray(v), HOST
    raise TypeError(f"{f}: {name} must be an array or a number (got {type(v).__name__}); pass a "
                    "numpy.ndarray, a cupy.ndarray or other CUDA array (torch, Numba), a list, or a "
                    "Python number")


def _normalize(spec, values, out):
    """(kind, operands, out, keys, device): every operand as a NumPy/CuPy array
    or scalar, the backend kind, each operand's part of the plan key
    (:func:`_key`) and, for the GPU, CuPy's current device."""
    kind = current = None
    vals = values
    keys = []
    add = keys.append
    native, device_of = dispatch.NATIVE_GPU_TYPES, dispatch.device_id_of
    convert = []    # GPU operands to make CuPy views of (foreign, or on another device: refused)
    gpu_later = []  # of those, the ones whose key waits for their conversion
    for i, v in enumerate(values):
        t = type(v)
        if t is np.ndarray:
            if kind != HOST:
                if kind is not None:
                    _mixed(spec, i, HOST)
                kind = HOST
            add((v.dtype, v.shape, v.strides))
        elif t in native:
            if kind != GPU:
                if kind is not None:
                    _mixed(spec, i, GPU)
                kind, current = GPU, dispatch.current_device()
            add((t, v.dtype, v.shape, v.strides))
            if device_of(v) != current:
                convert.append(i)
        elif v is None:
            add(None)
        elif t is float:
            add((float, v, _copysign(1.0, v)) if v == v else _NAN_KEY)
        elif t is int:
            add((int, v))
        elif t in _INT_SCALARS:
            add((t, int(v)))
        elif isinstance(v, np.generic):
            add((t, v.tobytes()))
        else:
            v, side = _slow_operand(spec, spec.names[i], v)
            if vals is values:
                vals = list(values)
            vals[i] = v
            if side == GPU:
                convert.append(i)
                gpu_later.append(i)
                add(None)
            else:
                add(_key(v))
            if side is None or side == kind:
                continue
            if kind is not None:
                _mixed(spec, i, side)
            kind = side
    if kind is None:
        kind = HOST
    elif convert:
        if current is None:  # only foreign GPU arrays so far
            current = dispatch.current_device()
        if vals is values:
            vals = list(values)
        for i in convert:
            vals[i] = dispatch.to_gpu_array(vals[i], spec.fname, spec.names[i], current)
        for i in gpu_later:
            keys[i] = _key(vals[i])
    if out is not None:
        if type(out) is np.ndarray:
            side = HOST
        elif dispatch.is_gpu(out):
            side = GPU
        else:
            raise TypeError(f"{spec.fname}: out must be a numpy.ndarray (or, for GPU inputs, a CuPy or "
                            f"other CUDA array), like the inputs (got {type(out).__name__}); leave out=None "
                            "to get a new array")
        if side != kind:
            raise TypeError(f"{spec.fname}: out is {'a GPU array' if side == GPU else 'a NumPy array'} but the "
                            f"inputs run on the {'GPU' if kind == GPU else 'host (NumPy)'}; NumPy and GPU "
                            "arrays are mixed")
        if side == GPU and not (type(out) in native and device_of(out) == current):
            out = dispatch.to_gpu_array(out, spec.fname, "out", current)
    return kind, vals, out, keys, current


# Scalar keys hold the value exactly: a float with its sign (-0.0 and 0.0 differ,
# though equal) and every NaN as one key (a NaN equals no other); NumPy integer
# scalars as Python ints (cheaper than their bytes), other NumPy scalars by bytes.
_copysign = math.copysign
_NAN_KEY = (float, "nan")
_INT_SCALARS = frozenset(np.dtype(c).type for c in "bBhHiIlLqQ")


def _mixed(spec, i, side):
    raise TypeError(f"{spec.fname}: NumPy and GPU arrays are mixed ({spec.names[i]} is "
                    f"{'a GPU array' if side == GPU else 'on the host'}, an earlier operand is not); "
                    "put every operand on one side (cupy.asarray(...) or .get())")


def _key(v):
    """What a plan may depend on for one operand (never array values)."""
    t = type(v)
    if t is np.ndarray:
        return (v.dtype, v.shape, v.strides)
    if v is None:
        return None
    if t is float:
        return (float, v, _copysign(1.0, v)) if v == v else _NAN_KEY
    if t is int or t is bool:
        return (t, v)
    if t in _INT_SCALARS:
        return (t, int(v))
    if isinstance(v, np.generic):
        return (t, v.tobytes())
    shape = getattr(v, "shape", None)
    if shape is not None:
        return (t, v.dtype, shape, v.strides)
    return (t, v)


def _param_key(p):
    return tuple(p) if type(p) is list else p


# ------------------------------------------------------------------ plans

class _Plan:
    """A validated call signature: operand conversions, the output and the backend
    call; for the GPU, the runners the backend keeps for this signature;
    ``fresh``, the backend call for a new, non-empty out (dispatch.fresh_writer).

    The backend's arguments are ``template`` (a list: constants where the call
    gave scalars, made arrays at plan time) with each ``(i, conv)`` of ``dynamic``
    filled in from operand i (converted when conv is not None) and each
    ``(i, constant)`` of ``on_device`` by the constant's copy on the device."""

    __slots__ = ("template", "dynamic", "on_device", "out_shape", "out_dtype", "params", "fn", "empty",
                 "runners", "fresh")

    def __init__(self, conv, out_shape, out_dtype, params=()):
        self.template = [c.value if isinstance(c, _Constant) else None for c in conv]
        kinds = (_Constant, dispatch.DeviceConstant)
        self.dynamic = tuple((i, c) for i, c in enumerate(conv) if not isinstance(c, kinds))
        self.on_device = tuple((i, c) for i, c in enumerate(conv) if isinstance(c, dispatch.DeviceConstant))
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.params = params
        self.fn = self.empty = self.runners = self.fresh = None

    def arguments(self, vals, device=None) -> list:
        """The backend's arguments for one call's operands (``device``: the
        current GPU's number, for a GPU call)."""
        args = self.template.copy()
        for i, c in self.dynamic:
            args[i] = vals[i] if c is None else c(vals[i])
        for i, c in self.on_device:
            args[i] = c.on(device)
        return args


class _Constant:
    """An operand's fixed value (a scalar made an array at plan time), in place of
    a conversion; later conversions are applied to it once, at plan time."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def then(self, fn):
        return self if self.value is None else _Constant(fn(self.value))


PLAN_CACHE_SIZE = 4096
_PLANS: dict = {}


def clear_plan_cache() -> None:
    """Forget every cached plan (the next call of each signature re-validates)."""
    _PLANS.clear()


def plan_cache_size() -> int:
    return len(_PLANS)


class _Builder:
    """Plan-time view of one call: checks operands (shape and dtype only) and records
    how each is turned into the array the backend receives."""

    def __init__(self, spec, kind, vals, out):
        self.f = spec.fname
        self.host_scalars = spec.gpu_takes_host_scalars
        self.kind = kind
        self.names = spec.names
        self.v = dict(zip(spec.names, vals))
        self.out = out
        self.conv = {}

    # -- helpers
    def _then(self, name, fn):
        prev = self.conv.get(name)
        if hasattr(prev, "then"):  # a constant: converted now, once
            self.conv[name] = prev.then(fn)
            return

        def chained(v, _p=prev, _f=fn):
            v = _p(v)
            return None if v is None else _f(v)  # a zero point passed as omitted stays omitted

        self.conv[name] = fn if prev is None else chained

    def _scalar(self, name, value, dtype, param=False, zero_point=False):
        """A scalar operand as a 0-d array of ``dtype``. A zero point of 0 is passed as
        omitted (the same number), so no kernel reads it and matmul skips the row or
        column sums it would need; on the GPU a scale or zero point (``param``) stays
        on the host where the kernels take it by value."""
        with np.errstate(over="ignore"):
            arr = np.array(value, dtype=dtype)
        if zero_point and not arr.any():
            self.conv[name] = _Constant(None)
        elif self.kind == HOST or (param and self.host_scalars):
            arr.flags.writeable = False
            self.conv[name] = _Constant(arr)
        else:  # copied to the device once per plan, not on every call
            self.conv[name] = dispatch.DeviceConstant(arr)
        return arr

    def reshape(self, name, shape):
        self._then(name, lambda v, _s=shape: v.reshape(_s))

    def required(self, name, example):
        if self.v[name] is None:
            raise TypeError(f"{self.f}: {name} is required (got None); pass {example}")

    # -- float operands: scales, and quantize's x
    def float_operand(self, name, allowed, py_dtype, context="", example="0.1"):
        """A float array or scalar of a dtype in ``allowed``. Python numbers and NumPy
        float64 scalars (which are Python floats) become ``py_dtype``."""
        v = self.v[name]
        if v is None:
            raise TypeError(f"{self.f}: {name} is required (got None); pass {name}={example} or a "
                            f"{_or(allowed)} array")
        if type(v) is bool or isinstance(v, np.bool_) or not (isinstance(v, numbers.Real) or hasattr(v, "dtype")):
            raise TypeError(f"{self.f}: {name} must be a real number or a {_or(allowed)} array "
                            f"(got {type(v).__name__} {v!r}); pass {name}={example}")
        if not hasattr(v, "dtype") or isinstance(v, np.float64):
            return self._scalar(name, float(v), py_dtype, param=True)
        dt = v.dtype
        if dt not in allowed:
            if dt == F64:
                why = (f"; dmlq computes in float32 and never narrows a float64 array silently: pass "
                       f"{name}.astype({_np(allowed[0])})")
            else:
                why = f"; pass {name}.astype({_np(allowed[0])})"
            raise TypeError(f"{self.f}: {name} must have dtype {_or(allowed)}{context} (got {dt}){why}")
        if isinstance(v, np.generic):
            return self._scalar(name, v, dt, param=True)
        return v

    # -- integer data: q, a, b, pooling's x
    def int_data(self, name, allowed, fix):
        v = self.v[name]
        if v is None:
            raise TypeError(f"{self.f}: {name} is required (got None); pass an array of dtype {_or(allowed)}")
        if not hasattr(v, "dtype"):
            raise TypeError(f"{self.f}: {name} must be an array of dtype {_or(allowed)} (got "
                            f"{type(v).__name__} {v!r}); a Python number does not say which integer type "
                            f"it is: pass {fix}")
        if v.dtype not in allowed:
            hint = (" (np.asarray makes int64 from a list of Python ints)" if v.dtype == np.dtype(np.int64)
                    else "")
            raise TypeError(f"{self.f}: {name} must have dtype {_or(allowed)} (got {v.dtype}){hint}; pass "
                            f"{fix} if its values fit")
        if isinstance(v, np.generic):
            return self._scalar(name, v, v.dtype)
        return v

    # -- zero points
    def zero_point(self, name, dt, whose):
        """A zero point of dtype ``dt`` (or None). Python ints, and integer arrays or NumPy
        integers of another dtype, are accepted when their values fit in ``dt``."""
        v = self.v[name]
        if v is None:
            return None
        f = self.f
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        fix = f"for example {name}={_np(dt)}({max(lo, 0)}) or {name}=None (zero)"
        if type(v) is bool or isinstance(v, np.bool_) or getattr(v, "dtype", None) == np.bool_:
            raise TypeError(f"{f}: {name} must be an integer of dtype {dt} {whose}, not a bool; {fix}")
        if not hasattr(v, "dtype"):
            if not isinstance(v, numbers.Integral):
                raise TypeError(f"{f}: {name} must be an integer of dtype {dt} {whose} (got "
                                f"{type(v).__name__} {v!r}); {fix}")
            if not lo <= v <= hi:
                raise DescError(f"{f}: {name} = {v} is out of range for {dt} [{lo}, {hi}] {whose}; pass a "
                                f"value in that range" + (" or dtype=np.int8" if dt == U8 and v < 0 else ""))
            return self._scalar(name, int(v), dt, param=True, zero_point=True)
        zdt = v.dtype
        if zdt == dt:
            return self._scalar(name, v, dt, param=True, zero_point=True) if isinstance(v, np.generic) else v
        if zdt.kind not in "iu":
            raise TypeError(f"{f}: {name} must have an integer dtype ({dt} {whose}; got {zdt}); {fix}")
        if isinstance(v, np.generic):
            if not lo <= int(v) <= hi:
                raise DescError(f"{f}: {name} = {int(v)} is out of range for {dt} [{lo}, {hi}] {whose}")
            return self._scalar(name, int(v), dt, param=True, zero_point=True)
        if self.kind == GPU:
            raise TypeError(f"{f}: {name} has dtype {zdt} but must be {dt} {whose}; checking that a GPU "
                            f"array's values fit would synchronize, so pass {name}.astype(cupy.{dt.name})")

        def checked(a, _f=f, _n=name, _lo=lo, _hi=hi, _dt=dt, _w=whose):
            if a.size and (int(a.min()) < _lo or int(a.max()) > _hi):
                raise DescError(f"{_f}: {_n} holds values outside [{_lo}, {_hi}], the range of {_dt} {_w}; "
                                f"an integer zero point of another dtype is accepted only when its values fit")
            return a.astype(_dt)

        self.conv[name] = checked
        return np.broadcast_to(np.zeros((), dt), v.shape)  # a stand-in with the right shape and dtype

    def out_dtype(self, zp_name, dtype):
        """The output dtype: the output zero point's, else ``dtype=``, else out's, else uint8."""
        f = self.f
        if dtype is not None:
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                raise TypeError(f"{f}: dtype must be np.int8 or np.uint8 (got {dtype!r})") from None
            if dtype not in _QUANT:
                raise TypeError(f"{f}: dtype must be np.int8 or np.uint8, the output types (got {dtype})")
        zp = self.v[zp_name]
        zdt = getattr(zp, "dtype", None)
        if zdt in _QUANT:
            if dtype is not None and dtype != zdt:
                raise TypeError(f"{f}: dtype={dtype} contradicts the dtype of {zp_name} ({zdt}), which is the "
                                f"output's; drop dtype= or pass {zp_name} as {_np(dtype)}")
            return np.dtype(zdt)
        if dtype is not None:
            return dtype
        if zdt is not None and zdt.kind in "iu":
            raise TypeError(f"{f}: {zp_name} has dtype {zdt}, but the output is int8 or uint8 and takes its "
                            f"dtype from {zp_name}; pass {zp_name}=np.uint8(...) (or .astype(np.uint8)), or keep "
                            f"it and say which output you want with dtype=np.uint8 or dtype=np.int8")
        out_dt = getattr(self.out, "dtype", None)
        if out_dt in _QUANT:
            return np.dtype(out_dt)
        return U8

    def broadcast(self, **shapes):
        try:
            shape = tuple(np.broadcast_shapes(*shapes.values()))
        except ValueError:
            described = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
            raise ValueError(f"{self.f}: shapes do not broadcast: {described}; per-axis values need "
                             "length-1 dimensions everywhere else, e.g. shape (1, C, 1)") from None
        if len(shape) > MAX_DIMS:
            raise ValueError(f"{self.f}: the result would have {len(shape)} dimensions; at most {MAX_DIMS} "
                             "are supported (reshape to fewer dimensions)")
        return shape

    def check_out(self, shape, dtype):
        out = self.out
        if out is None:
            return
        f = self.f
        if out.dtype != dtype:
            raise TypeError(f"{f}: out must have dtype {np.dtype(dtype)} (got {out.dtype}); allocate it with "
                            f"np.empty({tuple(shape)}, {_np(dtype)})")
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")

    def validate(self, desc):
        """The DirectML descriptor behind the call; every rule the checks above missed."""
        try:
            compile_operator(desc)
        except DescError as e:
            raise DescError(f"{self.f}: these arguments break a rule of the underlying DirectML operator: "
                            f"{e}") from None

    def plan(self, out_shape, out_dtype, params=()):
        return _Plan(tuple(self.conv.get(n) for n in self.names), out_shape, out_dtype, params)


def _run(spec, values, params_key, params, out):
    kind, vals, out, keys, current = _normalize(spec, values, out)
    key = (spec.fname, kind, params_key, None if out is None else _key(out), *keys)
    try:
        plan = _PLANS.get(key)
    except TypeError:  # an unhashable parameter: plan without caching
        key, plan = None, None
    if plan is None:
        plan = spec.planner(_Builder(spec, kind, vals, out), *params)
        plan.fn = getattr(dispatch.backend(kind), spec.backend_name)
        plan.empty = dispatch.module(kind).empty
        plan.runners = None if kind == HOST else {}
        if 0 not in plan.out_shape:
            plan.fresh = dispatch.fresh_writer(plan.fn, kind, plan.runners)
        if key is not None:
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                _PLANS.clear()
            _PLANS[key] = plan
    args = plan.arguments(vals, current)
    if out is None:
        out = plan.empty(plan.out_shape, plan.out_dtype)
        if _EXPLAINING.get():
            return dispatch.kernel_plan(spec.backend_name, args, out, kind, plan.params)
        if plan.fresh is not None:  # None for an empty out: nothing to compute
            plan.fresh(args, out, plan.params)
        return out
    if kind == HOST and not out.flags.writeable:
        raise ValueError(f"{spec.fname}: out is read-only; pass a writeable array")
    return dispatch.write(plan.fn, args, out, kind, plan.params, plan.runners)


_EXPLAINING = contextvars.ContextVar("dmlq_explaining", default=False)


def kernel_plan(function, *args, **kwargs):
    """What the GPU runs for ``function(*args, **kwargs)``, without running it.

    ``function`` is one of the five operator functions (quantize_linear ...
    quantized_avg_pool), called with its usual arguments; the arguments are
    checked as in a real call. Returns a ``dmlq.gpu.plan.Plan``: the kernel
    variant, each launch's kernel, grid, block and dynamic shared memory, and
    notes on copies and temporaries; ``print`` it. With CuPy arrays the plan is
    for CuPy's current device; with NumPy arrays it is for a nominal H100 (no
    GPU needed: selection is pure Python; occupancy then comes from threads
    and shared memory only). ``out=`` is not taken.
    """
    if function not in _FUNCTIONS:
        raise TypeError(f"kernel_plan: function must be one of {', '.join(f.__name__ for f in _FUNCTIONS)} "
                        f"(got {function!r})")
    if kwargs.get("out") is not None:
        raise TypeError("kernel_plan: out= is not taken (the plan is made for a new output array)")
    token = _EXPLAINING.set(True)
    try:
        return function(*args, **kwargs)
    finally:
        _EXPLAINING.reset(token)


def _desc(shape, dtype):
    return TensorDesc(DataType.of(dtype), tuple(shape) or (1,))


def _vector(b, name, v, length, per_axis, wrong_shape):
    """A per-tensor or per-axis scale or zero point, reshaped to 1-D for the backend.

    None stays None; one element becomes shape (1,); a shape that per_axis(dims)
    accepts becomes (length,); any other shape raises DescError(wrong_shape(dims)).
    """
    if v is None:
        return None
    want = (1,) if v.size == 1 else (length,)
    if v.size != 1 and not per_axis(tuple(v.shape)):
        raise DescError(wrong_shape(tuple(v.shape)))
    if tuple(v.shape) != want:  # (no view made per call for an operand already 1-D)
        b.reshape(name, want)
    return v.reshape(want)


# ------------------------------------------------------------------ quantize / dequantize

def _quantize_input(b):
    """quantize's x: float32, float16 or int32; Python numbers and lists become float32."""
    x = b.v["x"]
    f = b.f
    if x is None:
        raise TypeError(f"{f}: x is required (got None); pass a float32 array")
    if not hasattr(x, "dtype"):
        if type(x) is bool or not isinstance(x, numbers.Real):
            raise TypeError(f"{f}: x must be a real number or an array of dtype float32, float16 or int32 "
                            f"(got {type(x).__name__} {x!r})")
        return b._scalar("x", float(x), F32)  # a Python number: float32, like a list of them
    dt = x.dtype
    if dt not in (F32, F16, I32):
        if dt == F64:
            fix = ("dmlq computes in float32 and does not narrow a float64 array silently: pass "
                   "x.astype(np.float32)")
        elif dt.kind in "iub":
            fix = "pass x.astype(np.int32) if its values fit, or x.astype(np.float32)"
        else:
            fix = "pass x.astype(np.float32)"
        raise TypeError(f"{f}: x must have dtype float32, float16 or int32 (got {dt}); {fix}")
    if isinstance(x, np.generic):
        return b._scalar("x", x, dt)
    return x


def _plan_quantize(b, dtype):
    x = _quantize_input(b)
    if x.dtype == F16:
        scale = b.float_operand("scale", (F16,), F16, " for a float16 x")
    else:
        scale = b.float_operand("scale", (F32,), F32, f" for a {x.dtype} x")
    qdt = b.out_dtype("zero_point", dtype)
    zp = b.zero_point("zero_point", qdt, "(the output dtype)")
    shape = b.broadcast(x=x.shape, scale=scale.shape, **({} if zp is None else {"zero_point": zp.shape}))
    b.check_out(shape, qdt)
    full = shape or (1,)
    b.validate(QuantizeLinearDesc(_desc(full, x.dtype), _desc(full, scale.dtype),
                                  None if zp is None else _desc(full, qdt), _desc(full, qdt)))
    return b.plan(shape, qdt)


def _plan_dequantize(b):
    q = b.int_data("q", _INTS, "q.astype(np.int32) or np.asarray(q, np.uint8)")
    scale = b.float_operand("scale", (F32, F16), F32)
    zp = b.zero_point("zero_point", q.dtype, "(q's dtype)")
    shape = b.broadcast(q=q.shape, scale=scale.shape, **({} if zp is None else {"zero_point": zp.shape}))
    b.check_out(shape, scale.dtype)
    full = shape or (1,)
    b.validate(DequantizeLinearDesc(_desc(full, q.dtype), _desc(full, scale.dtype),
                                    None if zp is None else _desc(full, q.dtype), _desc(full, scale.dtype)))
    return b.plan(shape, scale.dtype)


_QUANTIZE = _Spec("quantize_linear", ("x", "scale", "zero_point"), {"x", "scale"}, _plan_quantize,
                  "quantize_linear", gpu_takes_host_scalars=True)
_DEQUANTIZE = _Spec("dequantize_linear", ("q", "scale", "zero_point"), {"scale"}, _plan_dequantize,
                    "dequantize_linear", gpu_takes_host_scalars=True)


def quantize_linear(x, scale, zero_point=None, *, dtype=None, out=None):
    """ELEMENT_WISE_QUANTIZE_LINEAR: ``clip(rint(x / scale) + zero_point)``.

    x: float32, float16 or int32 array (Python numbers and lists become float32;
    float64 arrays are refused: pass ``x.astype(np.float32)``). scale: float32
    (float16 for a float16 x), a Python number or an array that broadcasts
    against x. zero_point: None (0), a Python int, or an int8/uint8 array or
    scalar whose dtype is the output's; with ``dtype=`` any integer zero point
    whose values fit is accepted. Zero, negative, NaN and infinite scales follow
    IEEE arithmetic (docs/semantics.md).
    """
    return _run(_QUANTIZE, (x, scale, zero_point), dtype, (dtype,), out)


def dequantize_linear(q, scale, zero_point=None, *, out=None):
    """ELEMENT_WISE_DEQUANTIZE_LINEAR: ``(q - zero_point) * scale`` in scale's dtype.

    q: int8, uint8, int16, uint16, int32 or uint32; zero_point: q's dtype (a
    Python int or an integer array whose values fit is converted); scale:
    float32 or float16 (a Python float is float32).
    """
    return _run(_DEQUANTIZE, (q, scale, zero_point), None, (), out)


# ------------------------------------------------------------------ quantized add

def _single(b, name, v):
    if v is not None and v.size != 1:
        raise DescError(f"{b.f}: {name} must have exactly 1 element (per tensor), got shape {tuple(v.shape)}; "
                        "quantized_add takes one scale and zero point per operand")
    return v


def _plan_add(b, dtype):
    a = b.int_data("a", _QUANT, "a.astype(np.uint8) or a.astype(np.int8)")
    bb = b.int_data("b", _QUANT, "b.astype(np.uint8) or b.astype(np.int8)")
    qdt = b.out_dtype("out_zero_point", dtype)
    vals = {}
    for name, kind, dt in (("a_scale", "s", F32), ("a_zero_point", "z", a.dtype), ("b_scale", "s", F32),
                           ("b_zero_point", "z", bb.dtype), ("out_scale", "s", F32),
                           ("out_zero_point", "z", qdt)):
        whose = {"a_zero_point": "(a's dtype)", "b_zero_point": "(b's dtype)"}.get(name, "(the output dtype)")
        v = b.float_operand(name, (F32,), F32) if kind == "s" else b.zero_point(name, dt, whose)
        vals[name] = _single(b, name, v)
    shape = b.broadcast(a=a.shape, b=bb.shape)
    b.check_out(shape, qdt)
    rank = max(len(shape), 1)
    one = (1,) * rank

    def pad(arr):
        return (1,) * (rank - arr.ndim) + tuple(arr.shape) if arr.ndim else one

    zp = {k: None if vals[k] is None else _desc(one, vals[k].dtype)
          for k in ("a_zero_point", "b_zero_point", "out_zero_point")}
    b.validate(QuantizedLinearAddDesc(
        _desc(pad(a), a.dtype), _desc(one, F32), zp["a_zero_point"], _desc(pad(bb), bb.dtype),
        _desc(one, F32), zp["b_zero_point"], _desc(one, F32), zp["out_zero_point"], _desc(shape, qdt)))
    return b.plan(shape, qdt)


_ADD = _Spec("quantized_add", ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "out_scale",
                               "out_zero_point"),
             {"a_scale", "b_scale", "out_scale"}, _plan_add, "quantized_add", gpu_takes_host_scalars=True)


def quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                  out_zero_point=None, *, dtype=None, out=None):
    """ELEMENT_WISE_QUANTIZED_LINEAR_ADD: dequantize a and b, add, requantize.

    a, b: int8/uint8 arrays that broadcast together; every scale (float32) and
    zero point (a's, b's, the output's dtype) is a single value.
    """
    return _run(_ADD, (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point),
                dtype, (dtype,), out)


# ------------------------------------------------------------------ quantized matmul

def _axis_vector(b, name, v, length, axis_name, column):
    """A per-tensor or per-row/column scale or zero point, reshaped to 1-D for the backend.

    Per tensor: one element. Per row (column=True): shaped (M, 1), optionally
    with leading 1s. Per column: (N,) or (1, N), optionally with leading 1s.
    """
    def per_axis(dims):
        if column:
            return len(dims) >= 2 and dims[-2:] == (length, 1) and all(d == 1 for d in dims[:-2])
        return len(dims) >= 1 and dims[-1] == length and all(d == 1 for d in dims[:-1])

    shape = f"({axis_name}, 1)" if column else f"({axis_name},) or (1, {axis_name})"
    return _vector(b, name, v, length, per_axis,
                   lambda dims: f"{b.f}: {name} must be a single value or shaped {shape} with "
                                f"{axis_name} = {length} (got {dims})")


def _plan_matmul(b, dtype):
    f = b.f
    a = b.int_data("a", _QUANT, "a.astype(np.uint8) or a.astype(np.int8)")
    bb = b.int_data("b", _QUANT, "b.astype(np.uint8) or b.astype(np.int8)")
    if a.ndim < 2 or bb.ndim < 2:
        raise DescError(f"{f}: a and b must be at least 2-D, (..., M, K) and (..., K, N) (got {a.ndim}-D and "
                        f"{bb.ndim}-D); a vector v becomes a matrix with v.reshape(1, -1) or v.reshape(-1, 1)")
    m, k = a.shape[-2:]
    k2, n = bb.shape[-2:]
    if k != k2:
        raise ValueError(f"{f}: a has K = {k} columns but b has {k2} rows (a is {tuple(a.shape)}, b is "
                         f"{tuple(bb.shape)})")
    batch = b.broadcast(a_batch=a.shape[:-2], b_batch=bb.shape[:-2])
    qdt = b.out_dtype("out_zero_point", dtype)
    spec = (("a_scale", None, m, "M", True), ("a_zero_point", a.dtype, m, "M", True),
            ("b_scale", None, n, "N", False), ("b_zero_point", bb.dtype, n, "N", False),
            ("out_scale", None, m, "M", True), ("out_zero_point", qdt, m, "M", True))
    vec = {}
    for name, zdt, length, axis, column in spec:
        whose = {"a_zero_point": "(a's dtype)", "b_zero_point": "(b's dtype)"}.get(name, "(the output dtype)")
        v = b.float_operand(name, (F32,), F32) if zdt is None else b.zero_point(name, zdt, whose)
        vec[name] = _axis_vector(b, name, v, length, axis, column)
    shape = batch + (m, n)
    b.check_out(shape, qdt)

    def sdesc(name, per_row):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, 1, m, 1) if per_row else (1, 1, 1, n)
        return TensorDesc(DataType.of(v.dtype), sizes if v.size > 1 else (1, 1, 1, 1))

    # Batch broadcasting was checked above; the desc checks dtypes and the
    # per-row/per-column shapes on one {1, 1, M, K} x {1, 1, K, N} product.
    b.validate(QuantizedLinearMatrixMultiplyDesc(
        TensorDesc(DataType.of(a.dtype), (1, 1, m, k)), sdesc("a_scale", True), sdesc("a_zero_point", True),
        TensorDesc(DataType.of(bb.dtype), (1, 1, k, n)), sdesc("b_scale", False), sdesc("b_zero_point", False),
        sdesc("out_scale", True), sdesc("out_zero_point", True), TensorDesc(DataType.of(qdt), (1, 1, m, n))))
    return b.plan(shape, qdt)


_MATMUL = _Spec("quantized_matmul", _ADD.names, _ADD.float_roles, _plan_matmul, "quantized_matmul")


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                     out_zero_point=None, *, dtype=None, out=None):
    """QUANTIZED_LINEAR_MATRIX_MULTIPLY with numpy.matmul shapes.

    a: (..., M, K), b: (..., K, N), int8/uint8, batch dims broadcast. a_scale,
    a_zero_point, out_scale, out_zero_point: per tensor or per row, (M, 1);
    b_scale, b_zero_point: per tensor or per column, (N,) or (1, N). Scales
    float32; the integer accumulation is exact for every K.
    """
    return _run(_MATMUL, (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point),
                dtype, (dtype,), out)


# ------------------------------------------------------------------ quantized average pooling

def _param(f, name, value, nd, default, minimum):
    if value is None:
        return (default,) * nd
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        value = (value,) * nd
    try:
        value = tuple(int(v) if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) else v
                      for v in value)
    except TypeError:
        raise TypeError(f"{f}: {name} must be an int or a sequence of ints (got {value!r})") from None
    if len(value) != nd or not all(type(v) is int for v in value):
        raise DescError(f"{f}: {name} must have {nd} integers, one per spatial dimension (got {value!r})")
    if any(v < minimum for v in value):
        raise DescError(f"{f}: every {name} value must be >= {minimum} (got {value})")
    if any(v >= 2**32 for v in value):
        raise DescError(f"{f}: {name} values must be below 2**32 (got {value})")
    return value


def _channel_vector(b, name, v, channels, ndim):
    """Per-tensor or per-channel pooling scale/zero point, reshaped to 1-D for the backend."""
    def per_channel(dims):
        aligned = (1,) * (ndim - len(dims)) + dims if len(dims) <= ndim else None
        return (len(dims) == 1 and dims[0] == channels) or (
            aligned is not None and aligned[1] == channels and all(d == 1 for i, d in enumerate(aligned) if i != 1))

    return _vector(b, name, v, channels, per_channel,
                   lambda dims: f"{b.f}: {name} must be a single value or per channel ((C,) or (1, C, 1, ...) "
                                f"with C = {channels}; got {dims})")


def _plan_avg_pool(b, window_size, strides, start_padding, end_padding, dilations, include_padding,
                   ceil_mode, dtype):
    f = b.f
    x = b.int_data("x", _QUANT, "x.astype(np.uint8) or x.astype(np.int8)")
    if x.ndim not in (4, 5):
        raise DescError(f"{f}: x must be 4-D (N, C, H, W) or 5-D (N, C, D, H, W) (got {x.ndim}-D, shape "
                        f"{tuple(x.shape)}); add the missing dimensions with x[None] or x.reshape(...)")
    nd = x.ndim - 2
    if window_size is None:
        raise TypeError(f"{f}: window_size is required (got None); pass an int or {nd} ints")
    if isinstance(window_size, numbers.Integral) and not isinstance(window_size, (bool, np.bool_)):
        window_size = (window_size,) * nd
    try:
        empty = len(tuple(window_size)) == 0
    except TypeError:
        raise TypeError(f"{f}: window_size must be an int or a sequence of ints (got {window_size!r})") from None
    if empty:
        raise DescError(f"{f}: window_size must not be empty; pass an int or {nd} ints")
    window = _param(f, "window_size", window_size, nd, None, 1)
    stride = _param(f, "strides", strides, nd, 1, 1)
    start = _param(f, "start_padding", start_padding, nd, 0, 0)
    end = _param(f, "end_padding", end_padding, nd, 0, 0)
    dil = _param(f, "dilations", dilations, nd, 1, 1)
    for flag, value in (("include_padding", include_padding), ("ceil_mode", ceil_mode)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{f}: {flag} must be True or False (got {value!r})")
    qdt = b.out_dtype("out_zero_point", dtype)
    channels = x.shape[1]
    vec = {}
    for name, zdt in (("x_scale", None), ("x_zero_point", x.dtype), ("out_scale", None), ("out_zero_point", qdt)):
        whose = "(x's dtype)" if name == "x_zero_point" else "(the output dtype)"
        v = b.float_operand(name, (F32,), F32) if zdt is None else b.zero_point(name, zdt, whose)
        vec[name] = _channel_vector(b, name, v, channels, x.ndim)
    out_spatial = []
    for i in range(nd):
        floor_size, ceil_size = pool_output_size(x.shape[2 + i], window[i], stride[i], start[i], end[i], dil[i])
        if floor_size <= 0:
            raise DescError(f"{f}: the dilated window ({(window[i] - 1) * dil[i] + 1}) is larger than the "
                            f"padded input ({x.shape[2 + i] + start[i] + end[i]}) in spatial dimension {i}; "
                            "use a smaller window_size or dilations, or more padding")
        out_spatial.append(ceil_size if ceil_mode else floor_size)
    shape = tuple(x.shape[:2]) + tuple(out_spatial)
    b.check_out(shape, qdt)

    def sdesc(name):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, channels) + (1,) * nd if v.size > 1 else (1,) * x.ndim
        return TensorDesc(DataType.of(v.dtype), sizes)

    b.validate(QuantizedLinearAveragePoolingDesc(
        _desc(x.shape, x.dtype), sdesc("x_scale"), sdesc("x_zero_point"), sdesc("out_scale"),
        sdesc("out_zero_point"), _desc(shape, qdt), nd, stride, window, start, end, dil, bool(include_padding)))
    return b.plan(shape, qdt, (window, stride, start, end, dil, bool(include_padding)))


_POOL = _Spec("quantized_avg_pool", ("x", "x_scale", "x_zero_point", "out_scale", "out_zero_point"),
              {"x_scale", "out_scale"}, _plan_avg_pool, "quantized_avg_pool")


def quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, window_size, *,
                       strides=None, start_padding=None, end_padding=None, dilations=None,
                       include_padding=False, ceil_mode=False, dtype=None, out=None):
    """QUANTIZED_LINEAR_AVERAGE_POOLING over (N, C, H, W) or (N, C, D, H, W).

    window_size, strides (default 1), start_padding/end_padding (default 0),
    dilations (default 1): an int or one int per spatial dimension. Scales
    float32 and zero points (x's / the output's dtype) per tensor or per channel.
    ceil_mode adds the extra output docs/semantics.md allows where its window
    starts inside the input or start padding.
    """
    params = (window_size, strides, start_padding, end_padding, dilations, include_padding, ceil_mode, dtype)
    return _run(_POOL, (x, x_scale, x_zero_point, out_scale, out_zero_point),
                tuple(map(_param_key, params)), params, out)


_FUNCTIONS = (quantize_linear, dequantize_linear, quantized_add, quantized_matmul, quantized_avg_pool)
