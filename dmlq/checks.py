"""The checks a planner makes on a call's operands, and the plan they produce.

A planner (one per public function, in dmlq.api) gets a :class:`Builder` over
the call's normalized operands, checks each operand's shape and dtype -- in
NumPy vocabulary, naming the argument, what it got, what it accepts and how to
fix it --, builds and validates the equivalent DirectML descriptor, and returns
a :class:`Plan`: how each operand becomes the array the backend receives, and
the output's shape and dtype. Nothing here reads an array's values at plan
time; a check on values becomes a conversion run on every call.
"""
from __future__ import annotations

import math
import numbers
import re

import ml_dtypes
import numpy as np

from . import dispatch
from .desc import TensorDesc
from .dtypes import DataType
from .errors import DescError
from .operator import compile_operator
from .qtypes import BFLOAT16_DTYPE
from .validation import shared_elements

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
MATMUL_SCALES = (F32, F16) + (() if BFLOAT16_DTYPE is None else (BFLOAT16_DTYPE,))  # (Builder.widened_scale)
I8, U8, I32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)
F64 = np.dtype(np.float64)
QUANT = (I8, U8)
INTS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32))
MAX_DIMS = 8  # DirectML's limit for the element-wise operators

HOST, GPU = dispatch.HOST, dispatch.GPU


def or_list(dtypes) -> str:
    names = [np.dtype(d).name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def np_name(dt) -> str:
    """The dtype as code names it: ``np.float32``, ``ml_dtypes.bfloat16``."""
    dt = np.dtype(dt)
    return f"{'ml_dtypes' if dt.type.__module__.startswith('ml_dtypes') else 'np'}.{dt.name}"


def short(value) -> str:
    """``repr(value)``, but a huge Python int as its size (10**400 has 401 digits)."""
    if isinstance(value, float):
        return repr(float(value))  # 1e+300, also for a NumPy float64
    text = repr(value)
    if isinstance(value, int) and len(text) > 24:
        return f"{text[:3]}... (an integer of {len(text.lstrip('-'))} digits)"
    return text


# ------------------------------------------------------------------ plans

class Plan:
    """A validated call signature: operand conversions, the output and the backend
    call; for the GPU, the runners the backend keeps for this signature;
    ``fresh``, the backend call for a new, non-empty out (dispatch.fresh_writer).

    The backend's arguments are ``template`` (a list: constants where the call
    gave scalars, made arrays at plan time) with each ``(i, conv)`` of ``dynamic``
    filled in from operand i (converted when conv is not None) and each
    ``(i, constant)`` of ``on_device`` by the constant's copy on the device."""

    __slots__ = ("template", "dynamic", "on_device", "out_shape", "out_dtype", "params", "fn", "empty",
                 "runners", "fresh", "value_checks")

    def __init__(self, conv, out_shape, out_dtype, params=(), value_checks=()):
        self.template = [c.value if isinstance(c, Constant) else None for c in conv]
        kinds = (Constant, dispatch.DeviceConstant)
        self.dynamic = tuple((i, c) for i, c in enumerate(conv) if not isinstance(c, kinds))
        self.on_device = tuple((i, c) for i, c in enumerate(conv) if isinstance(c, dispatch.DeviceConstant))
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.params = params
        self.value_checks = value_checks  # (i, check): the checks of operand i's values, every call
        self.fn = self.empty = self.runners = self.fresh = None

    def check_values(self, vals) -> None:
        """The checks of the operands' values alone (a zero point of another integer dtype that
        must fit), made where nothing else runs: dmlq.calls.output_meta on host operands."""
        for i, check in self.value_checks:
            if vals[i] is not None:
                check(vals[i])

    def arguments(self, vals, device=None) -> list:
        """The backend's arguments for one call's operands (``device``: the
        current GPU's number, for a GPU call)."""
        args = self.template.copy()
        for i, c in self.dynamic:
            args[i] = vals[i] if c is None else c(vals[i])
        for i, c in self.on_device:
            args[i] = c.on(device)
        return args


class Constant:
    """An operand's fixed value (a scalar made an array at plan time), in place of
    a conversion; later conversions are applied to it once, at plan time."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def then(self, fn):
        return self if self.value is None else Constant(fn(self.value))



def narrowed(wide, dtype):
    """float64 values in float ``dtype``, each rounded once, to nearest even (an overflow is inf).
    NumPy rounds float64 to float32 and float16 so; ml_dtypes' bfloat16 goes through float32, two
    roundings (1 + 2**-8 + 2**-30 would give 1.0): here float32 rounds to odd first (the nearest
    float32 toward zero, its last bit set where inexact), which a second rounding turns into the
    one rounding of the double."""
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype != BFLOAT16_DTYPE:
            return wide.astype(dtype)
        f = np.asarray(wide.astype(np.float32))
        back = f.astype(np.float64)
        inexact = (back != wide) & np.isfinite(wide)
        bits = f.view(np.uint32).copy()
        bits[inexact & (np.abs(back) > np.abs(wide))] -= np.uint32(1)  # one float32 toward zero
        bits[inexact] |= np.uint32(1)
        return bits.view(np.float32).astype(dtype)


_BEYOND_FLOAT64 = 2**1024 - 2**970  # the least integer float() rounds to inf (the largest double plus half an ulp)


def host_int(value):
    """An integer parameter as a Python int: an int, a NumPy integer or a 0-d NumPy integer array
    (numpy.sum(x, axis=np.array(1)) takes one, and dmlq.typing's Index names it); None for anything
    else: bools, floats, arrays of other shapes, device or lazy arrays (reading those would be a
    device transfer or a compute the call does not make for you)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if type(value) is np.ndarray and value.shape == () and value.dtype.kind in "iu":
        return int(value)
    return None


def real_number(f, name, value, dtype):
    """A Python number (or NumPy float64 scalar) given as ``name`` as a 0-d array of float
    ``dtype``, or a ValueError where it lies beyond the dtype's range: it would become
    inf, as a float64 array is refused rather than narrowed."""
    if isinstance(value, numbers.Integral) and abs(int(value)) >= _BEYOND_FLOAT64:  # an int past float64 (by its
        number = math.inf if value > 0 else -math.inf  # value: torch.compile cannot trace float()'s error)
    else:
        number = float(value)
    arr = narrowed(np.array(number, np.float64), dtype)
    if arr == 0 and number != 0 and name.endswith("scale"):
        raise ValueError(underflow_message(f, name, short(value), dtype))
    if np.isinf(arr) and not (isinstance(value, float) and math.isinf(value)):
        top = ml_dtypes.finfo(dtype).max  # (NumPy's finfo knows no bfloat16)
        raise ValueError(f"{f}: {name} = {short(value)} is beyond the range of {np.dtype(dtype)} (largest "
                         f"magnitude {top:.8g}), the dtype dmlq computes it in; it would become inf. Pass a "
                         f"value within that range, or {name}={'-' if number < 0 else ''}np.inf if an "
                         "infinite value is meant")
    return arr


def underflow_message(f, name, value, dtype):
    """The message for a nonzero number scale that rounds to 0 in ``dtype`` (1e-46 in float32, 1e-8
    in float16): a zero scale is a different operation (quantize saturates), so it is said, not taken."""
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    return (f"{f}: {name} = {value} is below the smallest magnitude of {np.dtype(dtype).name} ({tiny:.3g}), the "
            f"dtype dmlq computes it in; it would become a zero scale (docs/semantics.md, \"Scales\"). Pass a larger "
            f"value, or {name}=0.0 if a zero scale is meant")


def native_order(f, name, v):
    """A TypeError for an array of the other byte order (``>f4`` on a little-endian machine),
    which the kernels would read as garbage: naming it, where the dtype checks would call it
    the wrong dtype."""
    dt = getattr(v, "dtype", None)
    if isinstance(dt, np.dtype) and not dt.isnative:
        native = dt.newbyteorder("=").str
        fix = f"allocate out with dtype {native!r}" if name == "out" else f"pass {name}.astype({native!r})"
        raise TypeError(f"{f}: {name} has the non-native byte order of dtype {dt.str!r} ({dt.name}); dmlq reads "
                        f"arrays in the machine's byte order: {fix}")


def refuse_shared_out(f, out):
    """A ValueError for an ``out`` two of whose elements share memory (a stride-0 axis, as
    ``cupy.broadcast_to`` or ``as_strided`` make; overlapping strides): dmlq's threads and GPU
    kernels write in no fixed order, so which result lands there would be a race (NumPy's
    ufuncs write the last in C order; torch refuses an expanded tensor)."""
    shared = shared_elements(out.shape, out.strides, out.itemsize)
    if shared is None:
        return
    where = (f"indices {shared[0]} and {shared[1]} share memory" if shared else
             f"{out.size} elements are too many to show that none share memory")
    raise ValueError(f"{f}: out has elements that share memory (shape {tuple(out.shape)}, strides "
                     f"{tuple(out.strides)}: {where}), so a result element would overwrite another in no fixed "
                     "order; pass an array of its own memory (np.empty of its shape), or copy the result in")


class Builder:
    """Plan-time view of one call: checks operands (shape and dtype only) and records
    how each is turned into the array the backend receives."""

    def __init__(self, spec, kind, vals, out, given=()):
        self.f = spec.fname
        self.host_scalars = spec.gpu_takes_host_scalars
        self.kind = kind
        self.names = spec.names
        self.v = dict(zip(spec.names, vals))
        self.out = out
        self.conv = {}
        self.value_checks: list = []
        # operands the caller gave as torch tensors: their fixes are said in torch's words
        self.torch = {n for n, g in zip(spec.names, given) if type(g).__module__.partition(".")[0] == "torch"}
        # operands given as lists, tuples or Python numbers: they have no .astype, np.asarray converts them
        self.plain = {n for n, g in zip(spec.names, given) if isinstance(g, (list, tuple, int, float))}
        for name, v in (*self.v.items(), ("out", out)):
            native_order(self.f, name, v)

    def astype(self, name, dt):
        """How the caller converts operand ``name`` to dtype ``dt``, in the words of its type:
        ``x.astype(np.float32)`` for arrays, ``x.to(torch.float32)`` for a torch tensor."""
        dt = np.dtype(dt).name
        return f"{name}.to(torch.{dt})" if name in self.torch else f"{name}.astype(np.{dt})"

    def fix(self, name, text):
        """``text`` (a fix written for NumPy) in the words of operand ``name``'s type: for a
        list, tuple or Python number, which has no ``.astype``, ``np.asarray(name, np.uint8)``."""
        if name in self.plain:
            return re.sub(rf"\b{name}\.astype\(np\.(\w+)\)", rf"np.asarray({name}, np.\1)", text)
        if name not in self.torch:
            return text
        text = re.sub(rf"\b{name}\.astype\(np\.(\w+)\)", rf"{name}.to(torch.\1)", text)
        return re.sub(rf"np\.asarray\({name}, np\.(\w+)\)", rf"{name}.to(torch.\1)", text)

    def real(self, name, value, dtype):
        """:func:`real_number` for operand ``name`` of this call."""
        return real_number(self.f, name, value, dtype)

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
            self.conv[name] = Constant(None)
        elif self.kind == HOST or (param and self.host_scalars):
            arr.flags.writeable = False
            self.conv[name] = Constant(arr)
        else:  # copied to the device once per plan, not on every call
            self.conv[name] = dispatch.DeviceConstant(arr)
        return arr

    def reshape(self, name, shape):
        self._then(name, lambda v, _s=shape: v.reshape(_s))

    def widen(self, name, dtype):
        """The operand converted to ``dtype`` before the backend sees it: an exact widening
        (a float16 or bfloat16 scale to float32), once at plan time for a constant, on each
        call for an array (a scale vector: a few elements)."""
        self._then(name, lambda v, _d=np.dtype(dtype): v.astype(_d))

    def widened_scale(self, name):
        """A scale of ONNX QLinearMatMul's types (opset 21: float32, float16, bfloat16), widened
        to float32 exactly for the backend (DirectML's tables, the descriptors, take float32
        only); quantized_add's and quantized_avg_pool's scales too (a dmlq extension: ONNX's
        com.microsoft QLinearAdd / QLinearAveragePool take float32)."""
        v = self.float_operand(name, MATMUL_SCALES, F32)
        if v.dtype != F32:
            self.widen(name, F32)
        return v

    def widen_pair(self, names, vals):
        """On the GPU, the scale and zero point of one operand (``names``, their
        checked values ``vals``, either may be None) where one is per axis and the
        other a single value given as a number: that one is made the partner's
        shape once, at plan time, and copied to the device once with the plan.
        The matmul kernels read an operand's scale and zero point through one
        per-axis flag, so a single value would otherwise be broadcast on every
        call (a CuPy kernel each time). An array given by the caller stays as it
        is: its values may change between calls."""
        if self.kind != GPU or any(v is None for v in vals):
            return
        big = [v for v in vals if v.size != 1]
        if len(big) != 1:
            return
        for name, v in zip(names, vals):
            c = self.conv.get(name)
            if v.size == 1 and isinstance(c, (Constant, dispatch.DeviceConstant)) and \
                    not (isinstance(c, Constant) and c.value is None):
                self._then(name, lambda h, _s=big[0].shape: np.ascontiguousarray(np.broadcast_to(h, _s)))

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
                            f"{or_list(allowed)} array")
        if type(v) is bool or isinstance(v, np.bool_) or not (isinstance(v, numbers.Real) or hasattr(v, "dtype")):
            raise TypeError(f"{self.f}: {name} must be a real number or a {or_list(allowed)} array "
                            f"(got {type(v).__name__} {v!r}); pass {name}={example}")
        if not hasattr(v, "dtype") or isinstance(v, np.float64):
            return self._scalar(name, self.real(name, v, py_dtype), py_dtype, param=True)
        dt = v.dtype
        if dt not in allowed:
            if dt == F64:
                why = (f"; dmlq computes in float32 and never narrows a float64 array silently: pass "
                       f"{self.astype(name, allowed[0])}")
            else:
                why = f"; pass {self.astype(name, allowed[0])}"
            raise TypeError(f"{self.f}: {name} must have dtype {or_list(allowed)}{context} (got {dt}){why}")
        if isinstance(v, np.generic):
            return self._scalar(name, v, dt, param=True)
        return v

    # -- integer data: q, a, b, pooling's x
    def int_data(self, name, allowed, fix):
        v = self.v[name]
        if v is None:
            raise TypeError(f"{self.f}: {name} is required (got None); pass an array of dtype {or_list(allowed)}")
        if not hasattr(v, "dtype"):
            raise TypeError(f"{self.f}: {name} must be an array of dtype {or_list(allowed)} (got "
                            f"{type(v).__name__} {short(v)}); a Python number does not say which integer "
                            f"type it is: pass {self.fix(name, fix)}")
        if v.dtype not in allowed:
            if _float_kind(v.dtype):  # its values are not codes: astype would change what they mean
                raise TypeError(f"{self.f}: {name} must have dtype {or_list(allowed)} (got {v.dtype}): {name} holds "
                                f"integer codes, and a float {name} is not converted to them"
                                f"{_FLOAT_DATA.get(self.f, '')}")
            hint = ""
            if v.dtype == np.dtype(np.int64):
                hint = (" (torch.tensor makes int64 from Python ints)" if name in self.torch
                        else " (np.asarray makes int64 from a list of Python ints)")
            raise TypeError(f"{self.f}: {name} must have dtype {or_list(allowed)} (got {v.dtype}){hint}; pass "
                            f"{self.fix(name, fix)} if its values fit")
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
        fix = f"for example {name}={np_name(dt)}({max(lo, 0)}) or {name}=None (zero)"
        if type(v) is bool or isinstance(v, np.bool_) or getattr(v, "dtype", None) == np.bool_:
            raise TypeError(f"{f}: {name} must be an integer of dtype {dt} {whose}, not a bool; {fix}")
        if not hasattr(v, "dtype"):
            if not isinstance(v, numbers.Integral):
                raise TypeError(f"{f}: {name} must be an integer of dtype {dt} {whose} (got "
                                f"{type(v).__name__} {short(v)}); {fix}")
            if not lo <= v <= hi:
                raise DescError(f"{f}: {name} = {short(v)} is out of range for {dt} [{lo}, {hi}] {whose}; pass a "
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
        self.value_checks.append((self.names.index(name), checked))
        return np.broadcast_to(np.zeros((), dt), v.shape)  # a stand-in with the right shape and dtype

    def dtype_param(self, dtype, allowed):
        """``dtype=`` as a numpy dtype in ``allowed`` (None stays None)."""
        if dtype is None:
            return None
        names = [np_name(d) for d in allowed]
        names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"{self.f}: dtype must be {names} (got {dtype!r})") from None
        if dtype not in allowed:
            raise TypeError(f"{self.f}: dtype must be {names}, the output types (got {dtype})")
        return dtype

    def matmul_operands(self, b_types, b_fix):
        """a (int8/uint8) and b (``b_types``) as numpy.matmul operands: (a, b, M, K, N, batch shape)."""
        f = self.f
        a = self.int_data("a", QUANT, "a.astype(np.uint8) or a.astype(np.int8)")
        bb = self.int_data("b", b_types, b_fix)
        if a.ndim < 2 or bb.ndim < 2:
            raise DescError(f"{f}: a and b must be matrices (..., M, K) and (..., K, N), or vectors as numpy.matmul "
                            f"takes them (got {a.ndim}-D and {bb.ndim}-D); a 0-d operand has no K")
        (m, k), (k2, n) = a.shape[-2:], bb.shape[-2:]
        if k != k2:
            raise ValueError(f"{f}: a has K = {k} columns but b has {k2} rows (a is {tuple(a.shape)}, b is "
                             f"{tuple(bb.shape)})")
        return a, bb, m, k, n, self.broadcast(
            "batch dimensions broadcast as in numpy.matmul: equal, or 1 (or absent) in one of a and b",
            a_batch=a.shape[:-2], b_batch=bb.shape[:-2])

    def out_dtype(self, zp_name, dtype):
        """The output dtype: the output zero point's, else ``dtype=``, else out's, else uint8."""
        f = self.f
        dtype = self.dtype_param(dtype, QUANT)
        zp = self.v[zp_name]
        zdt = getattr(zp, "dtype", None)
        if zdt in QUANT:
            if dtype is not None and dtype != zdt:
                raise TypeError(f"{f}: dtype={dtype} contradicts the dtype of {zp_name} ({zdt}), which is the "
                                f"output's; drop dtype= or pass {zp_name} as {np_name(dtype)}")
            return np.dtype(zdt)
        if dtype is not None:
            return dtype
        if zdt is not None and zdt.kind in "iu":
            which = ("a quantized type (int8, uint8, int16, uint16, int4 ... float8)" if f == "quantize_linear"
                     else "int8 or uint8")
            raise TypeError(f"{f}: {zp_name} has dtype {zdt}, but the output is {which} and takes its "
                            f"dtype from {zp_name}; pass {zp_name}=np.uint8(...) (or .astype(np.uint8)), or keep "
                            f"it and say which output you want with dtype=np.uint8 or dtype=np.int8")
        out_dt = getattr(self.out, "dtype", None)
        if out_dt in QUANT:
            return np.dtype(out_dt)
        return U8

    def broadcast(self, hint="per-axis values need length-1 dimensions everywhere else, e.g. shape (1, C, 1)",
                  **shapes):
        try:
            shape = tuple(np.broadcast_shapes(*shapes.values()))
        except ValueError:
            described = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
            raise ValueError(f"{self.f}: shapes do not broadcast: {described}" + (f"; {hint}" if hint else "")) \
                from None
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
                            f"np.empty({tuple(shape)}, {np_name(dtype)})")
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
        refuse_shared_out(f, out)

    def validate(self, desc):
        """The DirectML descriptor behind the call; every rule the checks above missed."""
        try:
            compile_operator(desc)
        except DescError as e:
            raise DescError(f"{self.f}: these arguments break a rule of the underlying DirectML operator: "
                            f"{e}") from None

    def plan(self, out_shape, out_dtype, params=()):
        return Plan(tuple(self.conv.get(n) for n in self.names), out_shape, out_dtype, params,
                    tuple(self.value_checks))



def desc(shape, dtype):
    return TensorDesc(DataType.of(dtype), tuple(shape) or (1,))


def vector(b, name, v, length, per_axis, wrong_shape):
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


def batch_rows(dims, m, batch):
    """A matmul's scale or zero point per batch and row (a's, or quantized_matmul's output's):
    ``dims`` (..., M, 1) with batch dims not all 1 that broadcast to ``batch`` (a's batch shape,
    or the output's) without growing it (leading 1s past it dropped); the shape the backends
    get, the batch dims padded with 1s to ``len(batch)``, or None for any other shape."""
    dims, batch = tuple(dims), tuple(batch)
    if len(dims) <= 2 or dims[-2:] != (m, 1) or all(d == 1 for d in dims[:-2]):
        return None
    lead = dims[:-2]
    while len(lead) > len(batch) and lead[0] == 1:
        lead = lead[1:]
    if len(lead) > len(batch) or any(d not in (1, e) for d, e in zip(lead, batch[len(batch) - len(lead):])):
        return None
    return (1,) * (len(batch) - len(lead)) + lead + (m, 1)


def batch_rows_form(m, batch, whose="a's") -> str:
    """The per-batch-and-row form for a refusal's text."""
    if not any(d != 1 for d in batch):
        return f"; {whose} batch shape is {tuple(batch)}, so there is no per-batch-and-row form"
    return f", or {tuple(batch) + (m, 1)} per batch and row ({whose} batch shape + (M, 1); 1s broadcast)"


# Where a float operand has a reading of its own (ONNX QLinearMatMul's float8 inputs, opset 21), the
# refusal says what dmlq takes instead.
_FLOAT_DATA = {"quantized_matmul": "; ONNX QLinearMatMul's float8 form (opset 21) is not taken: "
                                   "dmlq.dequantize_linear each operand and multiply in float"}


def _float_kind(dt) -> bool:
    """A float dtype: NumPy's own, or one of ml_dtypes' (bfloat16, float8, float4: kind 'V')."""
    dt = np.dtype(dt)
    if dt.kind == "f":
        return True
    if dt.kind != "V":
        return False
    try:
        ml_dtypes.finfo(dt)
    except ValueError:
        return False
    return True

