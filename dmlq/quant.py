"""quantize_linear / dequantize_linear for every quantized type, ONNX opsets 21-25.

:func:`dmlq.quantize_linear` and :func:`dmlq.dequantize_linear` hand a call here
when it needs anything beyond DirectML's element-wise int8/uint8 operators: a type
of :mod:`dmlq.qtypes` other than int8/uint8 (int16 ... float4_e2m1fn), a bfloat16
input, scale or output, a dmlq.Packed input, ``axis=`` (ONNX's per-axis form),
``block_size=`` (blocked scales), ``saturate=False`` or ``precision=``.
docs/semantics.md "Quantized types beyond int8" is the contract. NumPy calls run
on the NumPy reference here; dmlq.api sends a call with a GPU operand to
dmlq.quant_gpu (cuda/quant_types.cu), which shares this module's checks. Every
check raises before anything is computed and names the argument.
A torch tensor or dask array among the operands goes to dmlq.torch or dmlq.dask
(dispatch.foreign_call) with every keyword; inside dmlq.calls.output_meta the
checks run and (shape, dtype) is returned, nothing computed.
"""
from __future__ import annotations

import math
import numbers

import ml_dtypes
import numpy as np

from . import calls, dispatch, floatconv, reference
from .checks import host_int, native_order, real_number, refuse_shared_out
from .cpu import qtypes as cpu_qtypes
from .errors import DescError, UnsupportedError
from .packing import Packed, refuse_lazy, unpack
from .qtypes import BFLOAT16_DTYPE, CLASSIC, E8M0_DTYPE, QTYPES, is_qtype, qtype

F32, F16, I32, U32 = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.uint32))
_FLOATS = tuple(d for d in (F32, F16, BFLOAT16_DTYPE) if d is not None)
_FLOAT_NAMES = "float32, float16 or bfloat16"
_CLASSIC_DTYPES = tuple(q.dtype for q in CLASSIC)
_OLD_DEQ = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32"))
# Scale types beyond float32/float16/bfloat16 (docs/semantics.md "Scale types"): QuantizeLinear
# takes int32 (opset 19 on) and float8e8m0 (opset 24 on), DequantizeLinear float8e8m0 only.
_E8M0 = () if E8M0_DTYPE is None else (E8M0_DTYPE,)


# ------------------------------------------------------------------ routing

def _dt(v):
    return getattr(v, "dtype", None)


def _new_type(dt) -> bool:
    return dt is not None and (dt == BFLOAT16_DTYPE or (is_qtype(dt) and dt not in _CLASSIC_DTYPES))


def _ml_dtype(dt) -> bool:
    """An ml_dtypes type (int4, float8_e4m3fn ...: NumPy calls their kind 'V')."""
    return isinstance(dt, np.dtype) and dt.kind == "V"


def quantize_is_extended(x, scale, zero_point, dtype, axis, block_size, saturate, precision, out) -> bool:
    """True when a quantize_linear call needs this module (see the module text)."""
    if axis is not None or block_size is not None or precision is not None or saturate is not True:
        return True
    if dtype is not None and not (isinstance(dtype, str) and dtype in ("int8", "uint8")):
        if isinstance(dtype, str):
            return True  # a name other than int8/uint8: qtype() takes it or reports it
        try:
            if np.dtype(dtype) not in _CLASSIC_DTYPES:
                return True
        except TypeError:
            return True  # not a NumPy dtype (torch's float4_e2m1fn_x2 ...): qtype() names every type taken
    zdt = _dt(zero_point)
    if isinstance(scale, Packed) or isinstance(zero_point, Packed) or _new_type(zdt) and (
            dtype is None or _ml_dtype(zdt)):
        return True  # (an ml_dtypes zero point with dtype=int8 too: taken where its values fit)
    xdt, sdt = _dt(x), _dt(scale)
    if xdt == F16 and _is_list(scale):
        return True  # numbers with no dtype, beside a float16 x: x's type (docs/semantics.md, "Scales")
    if xdt in (F32, F16, I32) and sdt in (F32, F16) and xdt != sdt:
        return True  # float32 x with a float16 scale or the reverse (ONNX 23 on), an int32 x with a float16
        # scale: both widened to float32
    return (xdt == BFLOAT16_DTYPE or sdt in (BFLOAT16_DTYPE, I32) + _E8M0
            or (zdt is None and dtype is None and _new_type(_dt(out))))


def dequantize_is_extended(q, scale, zero_point, dtype, axis, block_size, out) -> bool:
    """True when a dequantize_linear call needs this module."""
    if axis is not None or block_size is not None or dtype is not None or isinstance(q, Packed) \
            or isinstance(scale, Packed) or isinstance(zero_point, Packed) or _ml_dtype(_dt(zero_point)):
        return True
    qdt = _dt(q)
    if qdt is not None and qdt not in _OLD_DEQ and is_qtype(qdt):
        return True
    return _dt(scale) in (BFLOAT16_DTYPE,) + _E8M0 or _dt(out) == BFLOAT16_DTYPE


# ------------------------------------------------------------------ operands

def _gpu_refusal(f, what):
    return TypeError(f"{f}: NumPy and GPU arrays are mixed ({what}); put every operand on one side "
                     "(cupy.asarray(...) or .get())")


def foreign(values, out) -> bool:
    """A torch tensor or dask array among the operands or out: the call goes to dmlq.torch
    or dmlq.dask (which call this module again on NumPy arrays, or build a lazy graph)."""
    return dispatch.foreign(out) or any(dispatch.foreign(v) for v in values)


def _meta() -> bool:
    """True inside dmlq.calls.output_meta: the checks run, the (shape, dtype) is returned."""
    return calls.EXPLAINING.get() is calls._META


def _host(f, name, v, float_role, what):
    """One operand as a NumPy array (or None, or a Python int for a zero point)."""
    if calls.EXPLAINING.get() and not _meta():
        raise UnsupportedError(f"kernel_plan: {f} with these types or arguments shows its plan for GPU operands "
                               "only (CuPy arrays, dmlq.Packed of CuPy data); NumPy inputs run on the reference")
    if v is None:
        return None
    native_order(f, name, v)
    if isinstance(v, Packed):
        refuse_lazy(f, name, v)
        if dispatch.is_gpu(v.data):
            raise _gpu_refusal(f, f"{name}'s data is not a NumPy array")
        if not isinstance(v.data, np.ndarray):  # bytes, a list ...: not an array at all
            raise TypeError(f"{f}: {name} is a dmlq.Packed whose data is of type {type(v.data).__name__}; its data "
                            "must be a 1-D uint8 NumPy (or CuPy) array: np.frombuffer(b, np.uint8) of bytes b, "
                            "np.asarray(values, np.uint8) of a list")
        if name == "scale" and is_e8m0_name(v.dtype):
            return e8m0_codes(f, v).view(E8M0_DTYPE).reshape(tuple(v.shape))
        try:
            return unpack(v)
        except (TypeError, ValueError) as e:  # its bytes do not match its shape and dtype
            raise type(e)(f"{f}: {name} is a dmlq.Packed that does not hold its elements: "
                          f"{str(e).removeprefix('unpack: ')}") from None
    if dispatch.is_gpu(v):
        raise _gpu_refusal(f, f"{name} is a GPU array")
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{f}: {name} must be a number or an array, not a bool (got {v!r})")
    # a Python number, or a NumPy float64 scalar scale (a Python float, as the int8 path takes it)
    if isinstance(v, numbers.Number) and (not isinstance(v, np.generic) or float_role and name != "x"
                                          and isinstance(v, np.float64)):
        if not isinstance(v, numbers.Real):
            raise TypeError(f"{f}: {name} must be a real number (got {type(v).__name__} {v!r})")
        if float_role:
            return real_number(f, name, v, np.float32)
        return v
    if isinstance(v, (list, tuple)):
        arr = calls.list_operand(f, name, v, float_role)
        if arr.dtype.kind == "b":
            raise TypeError(f"{f}: {name} is a {type(v).__name__} of bools; pass a numeric numpy array")
        return arr
    calls.refuse_masked(f, name, v)
    if dispatch.cpu_dlpack(v):
        try:
            return np.from_dlpack(v)
        except Exception as e:
            raise TypeError(f"{f}: {name} is a CPU {type(v).__name__} that NumPy cannot import through DLPack "
                            f"({type(e).__name__}: {e}); pass a numpy array") from None
    if isinstance(v, (np.ndarray, np.generic)) or hasattr(v, "__array__"):
        return np.asarray(v)
    raise TypeError(f"{f}: {name} must be an array or a number (got {type(v).__name__})")


def number_scale_dtype(x_dtype):
    """The dtype a Python number given as quantize's scale takes: x's float type (float32 for
    an int32 x), as the int8 path's planner gives it (docs/semantics.md, "Scales")."""
    return x_dtype if x_dtype in (F16, BFLOAT16_DTYPE) else np.dtype(np.float32)


def _numbers_as(f, given, dtype):
    """Quantize's scale given as a Python number or a list of numbers, in ``dtype`` (x's float
    type), each number rounded once from the double; one beyond the type's range refused."""
    if not isinstance(given, (list, tuple)):
        return real_number(f, "scale", given, dtype)
    return calls.list_operand(f, "scale", given, True, dtype)


def _is_list(v):
    """A list or tuple of numbers (a dmlq.Packed is a NamedTuple: not one)."""
    return isinstance(v, (list, tuple)) and not isinstance(v, Packed)


def _is_number(v):
    """A scale given as a Python number or a NumPy float64 scalar (a float has no dtype of
    its own)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        return False
    return not isinstance(v, np.generic) or isinstance(v, np.float64)


def is_e8m0_name(dtype) -> bool:
    """True for float8_e8m0fnu (its name or dtype): a Packed scale's type, not a quantized type."""
    if isinstance(dtype, str):
        return dtype.strip().lower() == "float8_e8m0fnu" and E8M0_DTYPE is not None
    return E8M0_DTYPE is not None and dtype == E8M0_DTYPE


def e8m0_codes(f, scale):
    """The codes (a 1-D uint8 array, NumPy or CuPy) of a float8_e8m0fnu scale given as a
    dmlq.Packed (CuPy has no e8m0 dtype: on the GPU the scale travels as its bytes)."""
    data, n = scale.data, math.prod(int(s) for s in scale.shape)
    if getattr(data, "dtype", None) != np.uint8 or getattr(data, "ndim", 0) != 1 or data.size != n:
        raise ValueError(f"{f}: scale is a dmlq.Packed of {n} float8_e8m0fnu codes (shape {tuple(scale.shape)}); "
                         f"its data must be a 1-D uint8 array of {n} bytes (got {type(data).__name__} "
                         f"{getattr(data, 'dtype', '')} {getattr(data, 'shape', '')})")
    return data


def e8m0_needs_dtype(f):
    return TypeError(f"{f}: dtype= is required with a float8_e8m0fnu scale: the output type is the scale's when "
                     "dtype is left out, and ONNX's DequantizeLinear has no float8e8m0 output (its output_dtype "
                     "is float32, float16 or bfloat16); pass dtype=np.float32")


def _float_array(f, name, v, context=""):
    if v is None:
        raise TypeError(f"{f}: {name} is required (got None)")
    if v.dtype not in _FLOATS:
        if v.dtype == np.float64:
            fix = (f"dmlq computes in float32 and never narrows a float64 array silently: pass "
                   f"{name}.astype(np.float32)")
        else:
            fix = f"pass {name}.astype(np.float32)"
        raise TypeError(f"{f}: {name} must have dtype {_FLOAT_NAMES}{context} (got {v.dtype}); {fix}")
    return v


def _scale(f, scale, quantize):
    """The scale: float32, float16 or bfloat16; float8_e8m0fnu; int32 for quantize only."""
    if scale is not None and (scale.dtype in _E8M0 or (quantize and scale.dtype == I32)):
        return scale
    if scale is not None and scale.dtype == I32:
        raise TypeError(f"{f}: scale must have dtype {_FLOAT_NAMES} or float8_e8m0fnu (got int32): ONNX's "
                        "DequantizeLinear takes no int32 scale (QuantizeLinear does); pass scale.astype(np.float32)")
    return _float_array(f, "scale", scale, " (or int32, float8_e8m0fnu)" if quantize else " (or float8_e8m0fnu)")


def _float_dtype(f, name, value):
    if isinstance(value, bool) or isinstance(value, numbers.Integral):
        raise TypeError(f"{f}: {name} takes a dtype or its name ({_FLOAT_NAMES}), not a number (got {value!r}); "
                        "for an ONNX TensorProto number use onnx.helper.tensor_dtype_to_np_dtype(...)")
    try:
        if isinstance(value, str) and value.strip().lower() == "bfloat16" and BFLOAT16_DTYPE is not None:
            dt = BFLOAT16_DTYPE
        else:
            dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt not in _FLOATS:
        raise TypeError(f"{f}: {name} must be {_FLOAT_NAMES} (got {value!r})")
    return dt


def _zero_point(f, v, q, dtype_given, whose):
    """The zero point as an array of q's dtype (None when omitted), or DescError/TypeError."""
    if v is None:
        return None
    if q.is_float:
        if isinstance(v, numbers.Real) and not hasattr(v, "dtype"):
            vals = np.array(v, np.float32)
        elif is_qtype(v.dtype) and qtype(v.dtype).is_float:
            if qtype(v.dtype) != q:
                raise TypeError(f"{f}: zero_point has dtype {v.dtype} but must be {q.name} {whose}")
            vals = reference.to_float32(v.view(np.uint8).view(q.dtype)) if v.size else v.astype(np.float32)
        elif v.dtype.kind in "iuf" or v.dtype == BFLOAT16_DTYPE:
            vals = reference.to_float32(v)
        else:
            raise TypeError(f"{f}: zero_point must be zero or omitted for a {q.name} {whose} (got dtype {v.dtype})")
        if vals.size and not bool(np.all(vals == 0)):
            raise DescError(f"{f}: zero_point must be zero (or None) for {q.name} {whose}: ONNX's reference refuses "
                            "a nonzero zero point for the float types, which use none; docs/semantics.md")
        return floatconv.encode(vals, q.fmt).view(q.dtype).reshape(np.shape(vals))  # +0 or -0 (fnuz: +0)
    lo, hi = q.qmin, q.qmax
    if not hasattr(v, "dtype"):
        if not isinstance(v, numbers.Integral):
            raise TypeError(f"{f}: zero_point must be an integer of type {q.name} {whose} (got "
                            f"{type(v).__name__} {v!r})")
        if not lo <= v <= hi:
            raise DescError(f"{f}: zero_point = {v} is out of range for {q.name} [{lo}, {hi}] {whose}")
        return np.array(v).astype(q.dtype)
    if v.dtype == q.dtype:
        return v
    if v.dtype.kind not in "iu" and not (is_qtype(v.dtype) and not qtype(v.dtype).is_float):
        raise TypeError(f"{f}: zero_point must have an integer dtype ({q.name} {whose}; got {v.dtype})")
    if not dtype_given:
        raise TypeError(f"{f}: zero_point has dtype {v.dtype} but must be {q.name} {whose}; pass "
                        f"zero_point.astype(...) or say the type with dtype=")
    wide = v.astype(np.uint64 if v.dtype.kind == "u" else np.int64)  # (uint64 past 2**63 does not wrap)
    if wide.size and (int(wide.min()) < lo or int(wide.max()) > hi):
        raise DescError(f"{f}: zero_point holds values outside [{lo}, {hi}], the range of {q.name} {whose}")
    return wide.astype(q.dtype)


def _int_param(f, name, value, least):
    if (number := host_int(value)) is None:
        raise TypeError(f"{f}: {name} must be an int (got {value!r})")
    if number < least:
        raise DescError(f"{f}: {name} must be >= {least} (got {number})")
    return number


def _data_name(f):
    """The data operand's name in ``f``'s signature: dequantize_linear's is q."""
    return "q" if f.startswith("dequantize") else "x"


def _axis(f, axis, ndim):
    if (number := host_int(axis)) is None:
        raise TypeError(f"{f}: axis must be an int (got {axis!r})")
    axis = number
    if not -ndim <= axis < ndim:
        raise DescError(f"{f}: axis = {axis} is out of range for a {ndim}-D {_data_name(f)} (accepted: {-ndim} ... "
                        f"{ndim - 1})")
    return int(axis) % ndim


def param_form(f, x_shape, scale_shape, zp_shape, axis, block_size):
    """Shapes only, for the NumPy and the GPU path alike: ``(form, axis, block, out_shape)``
    with form "blocked" (scale has x's shape with ceil(D / block) on ``axis``), "axis"
    (ONNX's per-axis form: one value or D values along ``axis``) or "broadcast" (NumPy
    broadcasting, axis and block None). DescError/ValueError naming the argument."""
    ndim = len(x_shape)
    xn = _data_name(f)
    scale_shape = tuple(scale_shape)
    zp_size = None if zp_shape is None else math.prod(zp_shape)
    if zp_shape is not None and (block_size is not None or axis is not None) and zp_size != 1 \
            and tuple(zp_shape) != scale_shape:
        raise DescError(f"{f}: zero_point must have scale's shape {scale_shape} or be one value (got "
                        f"{tuple(zp_shape)})")
    if block_size is not None:
        b = _int_param(f, "block_size", block_size, 1)
        if ndim == 0:
            raise DescError(f"{f}: block_size= needs {xn} to have at least one dimension ({xn} is 0-d)")
        if len(scale_shape) != ndim:
            raise DescError(f"{f}: with block_size, scale must have {xn}'s rank {ndim} ({xn} {tuple(x_shape)}, "
                            f"scale {scale_shape}): {xn}'s shape with ceil(D / block_size) on the blocked axis")
        differ = [i for i in range(ndim) if scale_shape[i] != x_shape[i]]
        if axis is None:
            if len(differ) > 1:
                raise DescError(f"{f}: scale {scale_shape} differs from {xn} {tuple(x_shape)} on axes {differ}; "
                                "blocked scales differ on one axis only (name it with axis=)")
            # the axis where the shapes differ; where they differ nowhere, one whose length is its
            # number of blocks (every block one element: any axis with block_size=1, else one of length 0 or 1)
            ax = differ[0] if differ else next((i for i in range(ndim) if -(-x_shape[i] // b) == x_shape[i]), 0)
        else:
            ax = _axis(f, axis, ndim)
            if any(i != ax for i in differ):
                raise DescError(f"{f}: scale {scale_shape} must equal {xn}'s shape {tuple(x_shape)} except on "
                                f"axis {ax}")
        d, s = x_shape[ax], scale_shape[ax]
        want = -(-d // b)
        if s != want:
            lo, hi = (-(-d // s), -(-d // (s - 1)) - 1) if s > 1 and d > 0 else (0, -1)
            hint = (f"; with {s} blocks, block_size must be in [{lo}, {hi}]" if lo <= hi
                    else f"; no block_size makes {s} blocks of {d}")
            if axis is None and not differ:
                hint += (f" (scale has {xn}'s shape, so no axis was found where it is blocked: name the axis with "
                         "axis=)")
            raise DescError(f"{f}: block_size = {b} on axis {ax} of size {d} makes ceil({d} / {b}) = {want} blocks, "
                            f"but scale has {s} there{hint}")
        return "blocked", ax, min(b, max(d, 1)), tuple(x_shape)  # (a block past the axis: the axis, exactly)
    if axis is not None:
        if ndim == 0:
            raise DescError(f"{f}: axis= needs {xn} to have at least one dimension ({xn} is 0-d)")
        ax = _axis(f, axis, ndim)
        for name, shp in (("scale", scale_shape), ("zero_point", zp_shape)):
            if shp is None or math.prod(shp) == 1 and len(shp) <= 1:
                continue
            if len(shp) != 1 or shp[0] != x_shape[ax]:
                raise DescError(f"{f}: with axis={axis} (and no block_size), {name} must be one value or 1-D of "
                                f"length {xn}.shape[{ax}] = {x_shape[ax]} (got shape {tuple(shp)})")
        return "axis", ax, None, tuple(x_shape)
    shapes = [x_shape, scale_shape] + ([] if zp_shape is None else [zp_shape])
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{f}: shapes do not broadcast: {xn} {tuple(x_shape)}, scale {scale_shape}"
                         + ("" if zp_shape is None else f", zero_point {tuple(zp_shape)}")
                         + "; for per-axis values pass axis=, for blocked scales block_size=") from None
    return "broadcast", None, None, shape


def _out(f, out, shape, dtype):
    if out is None:
        return np.empty(shape, dtype)
    native_order(f, "out", out)
    if dispatch.is_gpu(out):
        raise _gpu_refusal(f, "out is a GPU array, the inputs are not")
    calls.refuse_masked(f, "out", out)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{f}: out must be a numpy.ndarray (got {type(out).__name__})")
    if out.dtype != dtype:
        raise TypeError(f"{f}: out must have dtype {np.dtype(dtype).name} (got {out.dtype})")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
    refuse_shared_out(f, out)
    if not out.flags.writeable:
        raise ValueError(f"{f}: out is read-only; pass a writeable array")
    return out


def _saturate(f, saturate):
    if isinstance(saturate, (bool, np.bool_)) or isinstance(saturate, numbers.Integral) and saturate in (0, 1):
        return bool(saturate)
    raise TypeError(f"{f}: saturate must be True or False (got {saturate!r})")


def _operands(f, first, v, scale, zero_point):
    """The input (x or q), scale and zero point on the host (see _host)."""
    what = f"{f} with these types or arguments"
    return (_host(f, first, v, first == "x", what), _host(f, "scale", scale, True, what),
            _host(f, "zero_point", zero_point, False, what))


def _into(f, out, shape, dtype, compute, inputs):
    """The checked output (a fresh one for out=None) filled by compute(array). A caller's out is
    written in place when it is C-contiguous and shares no memory with ``inputs``; otherwise
    (it may overlap the input, or the kernels cannot walk it) through a temporary."""
    result = _out(f, out, shape, dtype)
    if result.size:
        direct = out is None or (result.flags.c_contiguous
                                 and not any(a is not None and np.may_share_memory(a, result) for a in inputs))
        tmp = result if direct else np.empty(shape, dtype)
        compute(tmp)
        if tmp is not result:
            result[...] = tmp
    return result


# ------------------------------------------------------------------ the two functions

def quantize_linear(x, scale, zero_point=None, *, dtype=None, axis=None, block_size=None, saturate=True,
                    precision=None, out=None):
    """dmlq.quantize_linear for the calls routed here (see the module text)."""
    f = "quantize_linear"
    if foreign((x, scale, zero_point), out):
        return dispatch.to_adapter(f, ("x", "scale", "zero_point"), (x, scale, zero_point),
                                     (dtype, axis, block_size, saturate, precision), out)
    number = scale if _is_number(scale) or _is_list(scale) else None
    x, scale, zp = _operands(f, "x", x, 1.0 if number is not None else scale, zero_point)
    if x is None:
        raise TypeError(f"{f}: x is required (got None); pass a float32 array")
    if number is not None:  # numbers in x's float type (checked against its range, not float32's)
        scale = _numbers_as(f, number, number_scale_dtype(getattr(x, "dtype", F32)))
    if x.dtype not in _FLOATS + (I32,):
        fix = ("dmlq computes in float32 and does not narrow a float64 array silently: pass x.astype(np.float32)"
               if x.dtype == np.float64 else "pass x.astype(np.float32)")
        raise TypeError(f"{f}: x must have dtype float32, float16, bfloat16 or int32 (got {x.dtype}); {fix}")
    _scale(f, scale, True)
    sat = _saturate(f, saturate)
    prec = None if precision is None else _float_dtype(f, "precision", precision)
    q = _output_qtype(f, zp, dtype, out)
    zp = _zero_point(f, zp, q, dtype is not None, "(the output type)")
    form, ax, b, shape = param_form(f, x.shape, scale.shape, None if zp is None else zp.shape, axis, block_size)
    if _meta():
        return shape, q.dtype
    return _into(f, out, shape, q.dtype, lambda tmp: cpu_qtypes.quantize(x, scale, zp, form, ax, b, tmp, sat, prec),
                 (x, scale, zp))


def refuse_contradiction(f, q, zq):
    """A TypeError where ``dtype=`` (q) contradicts the zero point's type (zq) as the int8 path
    says it (dmlq.checks.Builder.out_dtype): int8 against uint8, or a float type against
    another type. A zero point of another integer type is a value, converted where it fits."""
    if q != zq and (q.is_float or zq.is_float or q.name in _CLASSIC_NAMES and zq.name in _CLASSIC_NAMES):
        raise TypeError(f"{f}: dtype={q.name} contradicts the dtype of zero_point ({zq.name}), which is the "
                        f"output's; drop dtype= or pass zero_point as {q.name}")


_CLASSIC_NAMES = ("int8", "uint8")


def _output_qtype(f, zp, dtype, out):
    q = None if dtype is None else qtype(dtype, f"{f}: dtype")
    zdt = _dt(zp)
    if zdt is not None and is_qtype(zdt):
        zq = qtype(zdt)
        if q is None:
            return zq
        refuse_contradiction(f, q, zq)
        return q
    if q is not None:
        return q
    if zdt is not None and zdt.kind in "iu":
        raise TypeError(f"{f}: zero_point has dtype {zdt}, which is not a quantized type; pass it as the output "
                        "type (e.g. .astype(ml_dtypes.int4)) or say the output type with dtype=")
    odt = _dt(out)
    if odt is not None and is_qtype(odt):
        return qtype(odt)
    return QTYPES["uint8"]


def dequantize_linear(q, scale, zero_point=None, *, dtype=None, axis=None, block_size=None, out=None):
    """dmlq.dequantize_linear for the calls routed here (see the module text)."""
    f = "dequantize_linear"
    if foreign((q, scale, zero_point), out):
        return dispatch.to_adapter(f, ("q", "scale", "zero_point"), (q, scale, zero_point),
                                     (dtype, axis, block_size), out)
    given = q
    q, scale, zp = _operands(f, "q", q, scale, zero_point)
    if q is None:
        raise TypeError(f"{f}: q is required (got None)")
    if not hasattr(q, "dtype") or not (is_qtype(q.dtype) or q.dtype in (I32, U32)):
        if not hasattr(q, "dtype"):
            why = "; a Python number does not say which type it is: pass np.asarray(q, np.uint8) or another type"
        elif isinstance(given, (list, tuple)):
            why = (f" (np.asarray makes {q.dtype} from a list of Python numbers); pass np.asarray(q, np.uint8) or "
                   "another type its values fit")
        else:
            why = "; pass q.astype(np.uint8) or another type its values fit"
        raise TypeError(f"{f}: q must be an array of a quantized type ({', '.join(QTYPES)}, int32 or uint32; "
                        f"got {getattr(q, 'dtype', type(q).__name__)}){why}")
    _scale(f, scale, False)
    qt = qtype(q.dtype) if is_qtype(q.dtype) else None
    if qt is None:  # int32 / uint32: the DirectML element-wise ranges
        info = np.iinfo(q.dtype)
        from .qtypes import QType
        qt = QType(q.dtype.name, q.dtype, 32, 0, int(info.min), int(info.max), None)
    zp = _zero_point(f, zp, qt, True, "(q's type)")  # another integer dtype: converted when it fits
    if dtype is None and scale.dtype in _E8M0:
        raise e8m0_needs_dtype(f)
    out_dtype = scale.dtype if dtype is None else _float_dtype(f, "dtype", dtype)
    form, ax, b, shape = param_form(f, q.shape, scale.shape, None if zp is None else zp.shape, axis, block_size)
    if _meta():
        return shape, out_dtype
    return _into(f, out, shape, out_dtype, lambda tmp: cpu_qtypes.dequantize(q, scale, zp, form, ax, b, tmp),
                 (q, scale, zp))

