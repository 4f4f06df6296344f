"""quantize_linear / dequantize_linear on GPU arrays for every ONNX 21-25 type.

dmlq.quant hands a call here when an operand lives on the GPU. The GPU form of the
types (CuPy has no ml_dtypes dtypes: ``cupy.ndarray`` refuses them):

- int8, uint8, int16, uint16: CuPy arrays of that dtype, as everywhere else;
- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), int4, uint4, int2, uint2, float4_e2m1fn:
  a :class:`dmlq.Packed` whose ``data`` is a 1-D uint8 CuPy array of the bytes ONNX
  stores (its raw_data): one byte per element for float8 (the ml_dtypes / torch bit
  pattern), two or four elements per byte for the 4-bit and 2-bit types (the first
  element in the low bits, the last byte padded with zero bits); ``shape`` and
  ``dtype`` (the type's name) say what they hold.

quantize_linear returns that form for the output type; dequantize_linear takes it
(and the zero point of a packed type as a Packed of the same type, or a Python int),
and int32/uint32 q per axis and blocked. Scales are float32, float16, bfloat16, int32
(quantize) or float8_e8m0fnu: a host scalar (np.int32(...), an ml_dtypes e8m0 scalar) is
converted here by dmlq.reference's rules and passed by value; a device int32 array, or
e8m0 codes as ``dmlq.Packed(uint8 data, shape, "float8_e8m0fnu")``, are read by the kernel
as stored, once per parameter.
The call goes through dmlq.calls (operands normalized, the signature's key, the plan
cache) to dmlq.gpu.qkernels (cuda/quant_types.cu). Every check raises before any
launch and names the argument; nothing here reads a device array's values (that
would synchronize): a zero point of another integer dtype than the output's, or a
float8/float4 zero point held in a device array, is refused with the fix.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import dispatch, floatconv, quant
from .calls import Spec, run
from .checks import F16, F32, I32, refuse_shared_out
from .errors import DescError, UnsupportedError
from .packing import Packed, packed_nbytes, refuse_lazy
from .qtypes import BFLOAT16_DTYPE, QTYPES, QType, is_qtype, qtype
from . import reference

# The types a CuPy array holds as they are; the others travel as dmlq.Packed.
NATIVE = ("int8", "uint8", "int16", "uint16")
# q of dequantize only (per axis / blocked here; per tensor on dmlq.gpu.elementwise).
WIDE = {n: QType(n, np.dtype(n), 32, 0, int(np.iinfo(n).min), int(np.iinfo(n).max), None)
        for n in ("int32", "uint32")}


def on_gpu(*values) -> bool:
    """True when an operand (or a Packed's data) is a GPU array: the call runs here. A dask
    array or a torch tensor (CPU or CUDA) among them sends the call to dmlq.quant, which
    hands it to its adapter (dmlq.dask, dmlq.torch) with the others as they are; the torch
    adapter comes back here with CuPy views of CUDA tensors (dmlq.torch_gpu)."""
    if any(dispatch.foreign(v) for v in values):
        return False
    for v in values:
        if isinstance(v, Packed):  # a lazy Packed's bytes (dask) lie where its chunks lie
            v = v.data._meta if type(v.data).__module__.startswith("dask.") else v.data
        if v is not None and not isinstance(v, (np.ndarray, np.generic, numbers.Number)) and dispatch.is_gpu(v):
            return True
    return False


def gpu_form(q: QType) -> str:
    return "array" if q.name in NATIVE else "Packed"


def _packed_meta(f, name, v):
    """(data, (shape, type name)) of a Packed operand, checked; (v, None) for anything else."""
    if not isinstance(v, Packed):
        return v, None
    refuse_lazy(f, name, v)
    q = qtype(v.dtype, f"{f}: {name}.dtype")
    shape = tuple(int(s) for s in v.shape)
    data = v.data
    need = packed_nbytes(math.prod(shape), q)
    if getattr(data, "dtype", None) != np.uint8 or getattr(data, "ndim", 0) != 1 or data.size != need:
        kind = ValueError if getattr(data, "dtype", None) == np.uint8 and getattr(data, "ndim", 0) == 1 else TypeError
        raise kind(f"{f}: {name} is a dmlq.Packed of {math.prod(shape)} {q.name} elements (shape {shape}); "
                   f"its data must be a 1-D uint8 array of {need} bytes (got {type(data).__name__} "
                   f"{getattr(data, 'dtype', '')} {getattr(data, 'shape', '')})")
    if q.name in NATIVE:
        raise TypeError(f"{f}: {name} is a dmlq.Packed of {q.name}; pass {q.name} data as a plain array "
                        f"(data.view(cupy.{q.name}).reshape(shape))")
    return data, (shape, q.name)


def _foreign(f, values):
    for name, v in values:
        if dispatch.foreign(v):
            raise UnsupportedError(f"{f}: {name} is a {type(v).__module__}.{type(v).__name__}; the types beyond "
                                   "int8, blocked and per-axis (axis=) scales on the GPU take CuPy arrays and "
                                   "dmlq.Packed: pass cupy.asarray(tensor) (no copy; a float8 tensor as "
                                   "tensor.view(torch.uint8) in a dmlq.Packed)")


# ------------------------------------------------------------------ parameters in the kernels' layout

def _layout(form, ax, block, out_shape, shapes):
    """(ParamLayout as a tuple, how the parameter arrays are placed, their compact shape)
    for the kernel's walker; ``shapes``: the device parameter arrays' shapes. The walker reads
    entry ((o * S + d / B) * inner + i) for element (o, d, i) of (outer, D, inner) in its
    parametrization (D, inner, S, B)."""
    n = max(math.prod(out_shape), 1)
    ndim = len(out_shape)
    if form == "broadcast":
        axes = set()
        for shp in shapes:
            padded = (1,) * (ndim - len(shp)) + tuple(shp)
            axes |= {i for i, d in enumerate(padded) if d != 1}
        if len(axes) > 1:  # values along several axes: one entry per element
            return (n, 1, n, 1), "full", tuple(out_shape)
        ax = axes.pop() if axes else None
        form = "axis"
    if form != "blocked" and (ax is None or not any(math.prod(s) > 1 for s in shapes)):
        return (n, 1, 1, n), "tensor", (1,)
    outer, d, inner = math.prod(out_shape[:ax]), out_shape[ax], math.prod(out_shape[ax + 1:])
    d1, inner1 = max(d, 1), max(inner, 1)
    if form == "blocked":
        s = -(-d // block)
        return (d1, inner1, s, block), "blocked", (outer, s, inner)
    # per axis: as (D*inner, 1, S=0, B=inner) the walker reads entry d: D values, never repeated
    return (max(d * inner, 1), 1, 0, inner1), "axis", (d,)


def _place(v, how, compact, dtype, xp):
    """A device parameter array in the compact layout ``how``, C-contiguous, of ``dtype``."""
    if v.size == 0:  # an empty axis: the output is empty too, and no kernel reads it
        return xp.zeros(1, dtype)
    if how == "tensor":
        v = v.reshape(1)
    elif how == "full":
        v = xp.broadcast_to(v, compact)
    elif how == "blocked":
        v = v.reshape(compact) if v.size != 1 else xp.broadcast_to(v.reshape(1, 1, 1), compact)
    else:  # per axis: the values along the one axis that varies
        v = xp.broadcast_to(v.reshape(-1), compact)
    return xp.ascontiguousarray(v, dtype)


def _placed(b, name, how, compact, dtype):
    before = b.conv.get(name)

    def conv(v, _b=before):
        if _b is not None:
            v = _b(v)
        return _place(v, how, compact, dtype, dispatch.module(dispatch.GPU))
    b.conv[name] = conv


# ------------------------------------------------------------------ zero points

def _signed_codes(codes, q):
    """int32 values of sub-byte codes (uint8, low bits), sign-extended for int4/int2."""
    v = codes.astype(np.int32)
    if q.qmin < 0:
        half = 1 << (q.bits - 1)
        v = (v ^ half) - half
    return v


def _zero_point(b, q, meta, whose):
    """The zero point for the kernel: None, a host int32 0-d array (by value) or a device array
    (converted per call to int32); returns its shape (None when omitted)."""
    f, v = b.f, b.v["zero_point"]
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{f}: zero_point must be a number or an array, not a bool (got {v!r})")
    if q.is_float:
        if meta is not None or hasattr(v, "shape") and not isinstance(v, np.generic):
            raise TypeError(f"{f}: zero_point for {q.name} {whose} on the GPU must be 0 or None (ONNX requires a "
                            "zero float zero point, and checking a device array's values would synchronize); "
                            "pass zero_point=None")
        if isinstance(v, np.generic) and v.dtype.kind in "fV" and not isinstance(v, np.bool_):
            v = float(v)  # an ml_dtypes scalar (float8, float4, bfloat16: not a numbers.Real): its value, as on NumPy
        if not isinstance(v, numbers.Real):
            raise TypeError(f"{f}: zero_point must be zero or omitted for {q.name} (got {v!r})")
        if float(v) != 0:
            raise DescError(f"{f}: zero_point must be zero (or None) for {q.name} {whose}: ONNX's reference refuses "
                            "a nonzero zero point for the float types, which use none; docs/semantics.md")
        code = int(floatconv.encode(np.array(v, np.float32).reshape(1), q.fmt)[0])
        b.conv["zero_point"] = _const(np.array(code, np.int32))
        return ()
    lo, hi = q.qmin, q.qmax
    if meta is not None:
        shape, name = meta
        if name != q.name:
            raise TypeError(f"{f}: zero_point is a Packed of {name} but must be {q.name} {whose}")
        b.conv["zero_point"] = lambda data, _s=shape, _q=q: _signed_codes(_unpack_codes(data, _s, _q), _q)
        return shape
    if not hasattr(v, "dtype") or isinstance(v, np.generic):
        if isinstance(v, np.generic) and is_qtype(v.dtype) and not qtype(v.dtype).is_float:
            v = int(v)  # an ml_dtypes int4 / int2 scalar (not a numbers.Integral): its value
        if not isinstance(v, numbers.Integral):
            raise TypeError(f"{f}: zero_point must be an integer of type {q.name} {whose} (got "
                            f"{type(v).__name__} {v!r})")
        if not lo <= int(v) <= hi:
            raise DescError(f"{f}: zero_point = {int(v)} is out of range for {q.name} [{lo}, {hi}] {whose}")
        b.conv["zero_point"] = _const(np.array(int(v) & 0xFFFFFFFF, np.uint32).view(np.int32))
        return ()
    if q.name not in NATIVE and q.name not in WIDE:
        raise TypeError(f"{f}: zero_point of {q.name} {whose} on the GPU is a dmlq.Packed of {q.name} (or a Python "
                        f"int); got a {v.dtype} array: pack it with dmlq.pack(codes, dtype='{q.name}')")
    if v.dtype != q.dtype:
        raise TypeError(f"{f}: zero_point has dtype {v.dtype} but must be {q.name} {whose}; checking that a GPU "
                        f"array's values fit would synchronize, so pass zero_point.astype(cupy.{q.name})")
    b.conv["zero_point"] = lambda a: a.view(np.int32) if a.dtype.itemsize == 4 else a.astype(np.int32)
    return tuple(v.shape)


def _unpack_codes(data, shape, q):
    from .packing import unpack

    return unpack(data, shape, q.name, codes=True)


def _const(value):
    from .checks import Constant

    value.flags.writeable = False
    return Constant(value)


# ------------------------------------------------------------------ planners

_FLOATS = (F32, F16) + (() if BFLOAT16_DTYPE is None else (BFLOAT16_DTYPE,))


def _scale(b, quantize, meta, number_dtype=F32):
    """(shape, the dtype the kernel reads, the scale's dtype): float32, float16 or bfloat16 (CuPy 14 holds it) as
    float32, exactly; an int32 device array (quantize only) as is; float8_e8m0fnu codes (``meta``:
    a Packed scale's shape) as uint8. A host int32 or e8m0 scalar: its float32 value by value."""
    f, v = b.f, b.v["scale"]
    if meta is not None:
        b.conv["scale"] = lambda a, _s=meta: a.reshape(_s)
        return meta, np.dtype(np.uint8), None
    dt = getattr(v, "dtype", None)
    if dt is not None and (quant.is_e8m0_name(dt) or quantize and dt == I32):
        if isinstance(v, np.generic):
            b._scalar("scale", reference.to_float32(v), F32, param=True)
            return (), F32, dt
        return tuple(v.shape), np.dtype(dt), dt  # a device int32 array (CuPy holds no e8m0)
    if dt == I32:
        raise TypeError(f"{f}: scale must have dtype {quant._FLOAT_NAMES} or float8_e8m0fnu (got int32): ONNX's "
                        "DequantizeLinear takes no int32 scale (QuantizeLinear does); pass scale.astype(cupy.float32)")
    context = " (or int32, float8_e8m0fnu)" if quantize else " (or float8_e8m0fnu)"
    scale = b.float_operand("scale", _FLOATS, number_dtype, context)  # a Python number: number_dtype
    return tuple(scale.shape), F32, scale.dtype


def _scale_meta(f, v):
    """(data, shape) of a float8_e8m0fnu scale given as a dmlq.Packed; (v, None) otherwise."""
    if not isinstance(v, Packed):
        return v, None
    if not quant.is_e8m0_name(v.dtype):
        raise TypeError(f"{f}: scale must be a float array (or a dmlq.Packed of float8_e8m0fnu codes), not a "
                        f"dmlq.Packed of {v.dtype}")
    return quant.e8m0_codes(f, v), tuple(int(s) for s in v.shape)


def _params_of(b, form, ax, block, out_shape, scale_shape, scale_dtype, zp_shape):
    """The kernel's ParamLayout (a tuple); the device parameters placed in it per call."""
    on_device = [n for n in ("scale", "zero_point") if not hasattr(b.conv.get(n), "value") and b.v[n] is not None]
    shapes = [scale_shape if n == "scale" else tuple(zp_shape) for n in on_device]
    layout, how, compact = _layout(form, ax, block, out_shape, shapes)
    for n in on_device:
        _placed(b, n, how, compact, scale_dtype if n == "scale" else I32)
    return tuple(int(v) for v in layout)


def _dense_input(b, name, shape):
    """x dense and C-contiguous in the output's shape (a copy where it is not)."""
    v = b.v[name]
    if tuple(v.shape) != tuple(shape):
        b.conv[name] = lambda a, _s=shape: dispatch.module(dispatch.GPU).ascontiguousarray(
            dispatch.module(dispatch.GPU).broadcast_to(a, _s))
    elif not v.flags.c_contiguous:
        b.conv[name] = lambda a: dispatch.module(dispatch.GPU).ascontiguousarray(a)


def _check_out(b, q_or_float, shape, meta_out):
    """The raw out array's checks (logical shape and type), before any launch."""
    f, out = b.f, b.out
    if out is None:
        return
    if isinstance(q_or_float, QType) and q_or_float.name not in NATIVE:
        q = q_or_float
        if meta_out is None:
            raise TypeError(f"{f}: out for {q.name} on the GPU must be a dmlq.Packed of {q.name} (got "
                            f"{type(out).__name__} {getattr(out, 'dtype', '')})")
        oshape, oname = meta_out
        if oname != q.name:
            raise TypeError(f"{f}: out is a Packed of {oname} but the output is {q.name}")
        if tuple(oshape) != tuple(shape):
            raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(oshape)})")
        if not out.flags.c_contiguous:
            raise ValueError(f"{f}: out's data must be contiguous")
        return
    if meta_out is not None:
        raise TypeError(f"{f}: out must be a plain array here, not a dmlq.Packed")
    dt = q_or_float.dtype if isinstance(q_or_float, QType) else q_or_float
    if out.dtype != dt:
        raise TypeError(f"{f}: out must have dtype {np.dtype(dt).name} (got {out.dtype})")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
    refuse_shared_out(f, out)


def _raw(q, shape):
    """(shape, dtype) of the array the kernel writes for ``q``."""
    if q.name in NATIVE:
        return tuple(shape), q.dtype
    return (packed_nbytes(math.prod(shape), q),), np.dtype(np.uint8)


def _plan_quantize(b, qname, axis, block_size, saturate, precision, scale_meta, zp_meta, out_meta):
    f = b.f
    x = b.v["x"]
    if x is None or not hasattr(x, "shape") or isinstance(x, (np.ndarray, np.generic)):
        raise TypeError(f"{f}: x must be a GPU array when the other operands are (got {type(x).__name__})")
    if x.dtype not in _FLOATS + (I32,):
        raise TypeError(f"{f}: x must have dtype float32, float16, bfloat16 or int32 on the GPU (got {x.dtype}); "
                        "pass x.astype(cupy.float32)")
    scale_shape, scale_dtype, _ = _scale(b, True, scale_meta, quant.number_scale_dtype(x.dtype))
    sat = quant._saturate(f, saturate)
    prec = None if precision is None else quant._float_dtype(f, "precision", precision)
    q = QTYPES[qname]
    zp_shape = _zero_point(b, q, zp_meta, "(the output type)")
    form, ax, block, shape = quant.param_form(f, tuple(x.shape), scale_shape, zp_shape, axis, block_size)
    _check_out(b, q, shape, out_meta)
    layout = _params_of(b, form, ax, block, shape, scale_shape, scale_dtype, zp_shape)
    _dense_input(b, "x", shape)
    prec_name = None if prec is None else prec.name
    raw_shape, raw_dtype = _raw(q, shape)
    return b.plan(raw_shape, raw_dtype, (q.name, layout, sat, prec_name))


def _output_type(f, dtype, zp, zp_meta, out, out_meta):
    """The output type: dtype=, else the zero point's type, else out's, else uint8."""
    q = None if dtype is None else qtype(dtype, f"{f}: dtype")
    zq = None
    if zp_meta is not None:
        zq = qtype(zp_meta[1])
    elif hasattr(zp, "dtype") and is_qtype(zp.dtype) and not (isinstance(zp, np.generic) and q is not None):
        # an array, or a NumPy scalar such as np.int8(3) (with dtype= given, a scalar is a value that must fit)
        zq = qtype(zp.dtype)
    elif isinstance(zp, np.generic) and is_qtype(zp.dtype):  # a value, but int8 against uint8 is refused as on NumPy
        quant.refuse_contradiction(f, q, qtype(zp.dtype))
    if zq is not None:
        if q is None:
            return zq
        if q != zq and q.name in NATIVE and zq.name in NATIVE:
            raise TypeError(f"{f}: zero_point has dtype {zq.name} but must be {q.name} (the output type); checking "
                            "that a GPU array's values fit would synchronize, so pass "
                            f"zero_point.astype(cupy.{q.name})")
        if q != zq and zq.name in NATIVE and not q.is_float:
            raise TypeError(f"{f}: zero_point of {q.name} on the GPU is a dmlq.Packed of {q.name} (or a Python "
                            f"int); got a {zq.name} array: pack it with dmlq.pack(codes, dtype='{q.name}')")
        if q != zq:
            quant.refuse_contradiction(f, q, zq)  # int8 against uint8, a float type: as on NumPy
            raise TypeError(f"{f}: zero_point is a GPU {'dmlq.Packed' if zp_meta is not None else 'array'} of "
                            f"{zq.name} but the output type is {q.name}; a GPU zero point must already have the "
                            "output's type (NumPy converts one whose values fit, but checking a GPU array's values "
                            f"would synchronize): pass it as {q.name} (dmlq.pack(codes, dtype='{q.name}') for a "
                            "packed type), or drop dtype=")
        return q
    if q is not None:
        return q
    if out_meta is not None:
        return qtype(out_meta[1])
    odt = getattr(out, "dtype", None)
    if odt is not None and is_qtype(odt):
        return qtype(odt)
    return QTYPES["uint8"]


def _plan_dequantize(b, dtype, axis, block_size, scale_meta, q_meta, zp_meta, out_meta):
    f = b.f
    data = b.v["q"]
    if q_meta is not None:
        shape_q, qt = q_meta[0], qtype(q_meta[1])
        if not data.flags.c_contiguous:
            b.conv["q"] = lambda a: dispatch.module(dispatch.GPU).ascontiguousarray(a)
    else:
        if data is None or not hasattr(data, "dtype") or isinstance(data, (np.ndarray, np.generic)):
            raise TypeError(f"{f}: q must be a GPU array or a dmlq.Packed when the other operands are on the GPU "
                            f"(got {type(data).__name__})")
        qt = WIDE.get(data.dtype.name)
        if qt is None and not is_qtype(data.dtype):
            raise TypeError(f"{f}: q must be an array of a quantized type, int32 or uint32 (got {data.dtype})")
        shape_q, qt = tuple(data.shape), qt or qtype(data.dtype)
        if qt.name in WIDE:  # the kernel reads the four bytes of each element
            b.conv["q"] = lambda a: dispatch.module(dispatch.GPU).ascontiguousarray(a).reshape(-1).view(np.uint8)
        elif not data.flags.c_contiguous:
            b.conv["q"] = lambda a: dispatch.module(dispatch.GPU).ascontiguousarray(a)
    scale_shape, scale_dtype, own = _scale(b, False, scale_meta)
    if dtype is not None:
        out_dtype = quant._float_dtype(f, "dtype", dtype)
    elif own is None or quant.is_e8m0_name(own):
        raise quant.e8m0_needs_dtype(f)
    else:
        out_dtype = own
    zp_shape = _zero_point(b, qt, zp_meta, "(q's type)")
    form, ax, block, shape = quant.param_form(f, shape_q, scale_shape, zp_shape, axis, block_size)
    if shape != tuple(shape_q):
        raise ValueError(f"{f}: scale {scale_shape} would broadcast q {tuple(shape_q)} to {shape}; on the "
                         "GPU the output has q's shape")
    _check_out(b, np.dtype(out_dtype), shape, out_meta)
    layout = _params_of(b, form, ax, block, shape, scale_shape, scale_dtype, zp_shape)
    return b.plan(tuple(shape), np.dtype(out_dtype), (qt.name, layout))


_QUANTIZE = Spec("quantize_linear", ("x", "scale", "zero_point"), {"x", "scale"}, _plan_quantize,
                 "quantize_types", gpu_takes_host_scalars=True)
_DEQUANTIZE = Spec("dequantize_linear", ("q", "scale", "zero_point"), {"scale"}, _plan_dequantize,
                   "dequantize_types", gpu_takes_host_scalars=True)


# ------------------------------------------------------------------ the two functions

def quantize_linear(x, scale, zero_point=None, *, dtype=None, axis=None, block_size=None, saturate=True,
                    precision=None, out=None):
    """dmlq.quantize_linear on GPU arrays (see the module text): the output type's GPU form."""
    f = "quantize_linear"
    _foreign(f, (("x", x), ("scale", scale), ("zero_point", zero_point), ("out", out)))
    zp, zp_meta = _packed_meta(f, "zero_point", zero_point)
    out_raw, out_meta = _packed_meta(f, "out", out)
    if isinstance(x, Packed):
        raise TypeError(f"{f}: x must be a float array, not a dmlq.Packed")
    scale, scale_meta = _scale_meta(f, scale)
    q = _output_type(f, dtype, zp, zp_meta, out_raw, out_meta)
    params = (q.name, axis, block_size, saturate, precision, scale_meta, zp_meta, out_meta)
    raw = run(_QUANTIZE, (x, scale, zp), params, out_raw)
    if out is not None or q.name in NATIVE or not hasattr(raw, "shape"):
        return out if out is not None else raw  # (kernel_plan's plan, output_meta's (shape, dtype))
    scale_shape = scale_meta if scale_meta is not None else getattr(scale, "shape", ())  # () is a 0-d scale's
    zp_shape = zp_meta[0] if zp_meta else getattr(zp, "shape", None)
    return Packed(raw, _logical_shape(x, scale_shape, zp_shape, axis, block_size), q.name)


def _logical_shape(x, scale_shape, zp_shape, axis, block_size):
    if axis is not None or block_size is not None:
        return tuple(x.shape)
    return tuple(np.broadcast_shapes(tuple(x.shape), tuple(scale_shape), tuple(zp_shape or ())))


def _broadcast_q(f, q, scale, zero_point):
    """A q that broadcasts against its scale or zero point (NumPy's rule, which the NumPy path
    follows) as q of the broadcast shape, since the kernel makes one output per element of q:
    an array as a broadcast view (made contiguous for the kernel), a Packed by its codes unpacked
    on the device, broadcast and packed again. Any other q is returned as it is (the checks
    refuse what does not broadcast)."""
    shapes = [tuple(q.shape)] + [tuple(int(n) for n in v.shape) for v in (scale, zero_point)
                                 if v is not None and hasattr(v, "shape")]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return q
    if shape == tuple(q.shape):
        return q
    xp = dispatch.module(dispatch.GPU)
    if not isinstance(q, Packed):
        return xp.broadcast_to(q, shape)
    data, (qshape, name) = _packed_meta(f, "q", q)
    from .packing import pack_codes, unpack

    codes = unpack(data, qshape, name, codes=True)
    return pack_codes(xp.broadcast_to(codes, shape), name)


def dequantize_linear(q, scale, zero_point=None, *, dtype=None, axis=None, block_size=None, out=None):
    """dmlq.dequantize_linear on GPU arrays (see the module text)."""
    f = "dequantize_linear"
    if isinstance(q, Packed) and dispatch.foreign(q.data):  # a lazy Packed (dask bytes): dmlq.packed_dask
        return dispatch.foreign_call(f, ("q", "scale", "zero_point"), (q, scale, zero_point),
                                     (dtype, axis, block_size), out)
    _foreign(f, (("q", q), ("scale", scale), ("zero_point", zero_point), ("out", out)))
    if axis is None and block_size is None and (isinstance(q, Packed) or dispatch.is_gpu(q)):
        q = _broadcast_q(f, q, scale, zero_point)
    data, q_meta = _packed_meta(f, "q", q)
    zp, zp_meta = _packed_meta(f, "zero_point", zero_point)
    out_raw, out_meta = _packed_meta(f, "out", out)
    scale, scale_meta = _scale_meta(f, scale)
    params = (dtype, axis, block_size, scale_meta, q_meta, zp_meta, out_meta)
    return run(_DEQUANTIZE, (data, scale, zp), params, out_raw)
