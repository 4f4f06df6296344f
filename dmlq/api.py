"""NumPy-like functions, built on the descriptors.

Each function turns its arguments into arrays of the right dtypes, checks them
(TypeError for wrong types and dtypes, DescError for broken rules), validates the
equivalent DirectML desc through compile_operator, and calls the backend that
the operands' array type picks: NumPy -> dmlq.reference, GPU -> dmlq.gpu.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import arrays as _arrays
from .desc import (DequantizeLinearDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc, pool_output_size)
from .dtypes import DataType
from .errors import DescError
from .operator import compile_operator

_QUANT = (np.dtype(np.int8), np.dtype(np.uint8))
_INTS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32))
_F32 = np.dtype(np.float32)


class _Args:
    """Operands of one call, converted to the backend's array type."""

    def __init__(self, op, named: dict):
        self.op = op
        self.kind = _arrays.kind_of(named.values(), op)
        self.xp = _arrays.module(self.kind)
        self.a = {}
        for name, v in named.items():
            if v is None or isinstance(v, numbers.Number) and not isinstance(v, np.generic):
                self.a[name] = v  # typed later, once the dtype it needs is known
            elif isinstance(v, np.generic):
                self.a[name] = self.xp.full((), v, dtype=v.dtype)
            elif self.kind == _arrays.HOST:
                self.a[name] = np.asarray(v)
            else:
                self.a[name] = _arrays.to_gpu_array(v, op, name)

    def array(self, name, dtypes, default_dtype=None, what="", scalar_only=False):
        """Operand ``name`` as an array whose dtype is in ``dtypes``.

        A Python scalar becomes a 0-d array of ``default_dtype`` (range-checked).
        """
        v = self.a[name]
        if v is None:
            return None
        if isinstance(v, numbers.Number) and not isinstance(v, np.generic):
            dt = np.dtype(default_dtype)
            if isinstance(v, bool) or (dt.kind in "iu" and not float(v).is_integer()):
                raise TypeError(f"{self.op}: {name} must be {'an integer' if dt.kind in 'iu' else 'a number'} "
                                f"(got {v!r})")
            if dt.kind in "iu":
                info = np.iinfo(dt)
                if not info.min <= v <= info.max:
                    raise DescError(f"{self.op}: {name} = {v} is out of range for {dt} "
                                    f"[{info.min}, {info.max}]")
            arr = self.xp.full((), v, dtype=dt)
            self.a[name] = arr
            return arr
        if v.dtype not in dtypes:
            allowed = ", ".join(str(d) for d in dtypes)
            raise TypeError(f"{self.op}: {name} must have dtype {allowed}{what} (got {v.dtype})")
        return v


def _check_out(op, shape, dtype, args: _Args):
    """The ``out`` argument checked (array type, dtype, shape), or a new array."""
    out = args.a["out"]
    if out is None:
        return args.xp.empty(shape, dtype)
    if not isinstance(out, args.xp.ndarray):
        raise TypeError(f"{op}: out must be an array like the inputs (got {type(out).__name__})")
    if out.dtype != dtype:
        raise TypeError(f"{op}: out must have dtype {np.dtype(dtype)} (got {out.dtype})")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
    if args.kind == _arrays.HOST and not out.flags.writeable:
        raise ValueError(f"{op}: out is read-only")
    return out


def _write(fn, args, out, kind, params=()):
    """Run a backend function into ``out``; through a temporary if ``out``
    shares memory with an input, so an overlapping out is never half-read."""
    if out.size == 0:
        return out
    xp = _arrays.module(kind)
    if any(a is not None and hasattr(a, "shape") and xp.may_share_memory(a, out) for a in args):
        tmp = xp.empty(out.shape, out.dtype)
        fn(*args, tmp, *params)
        out[...] = tmp
        return out
    fn(*args, out, *params)
    return out


def _broadcast(op, **shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        described = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
        raise ValueError(f"{op}: shapes do not broadcast: {described}") from None


def _out_dtype(op, zero_point, dtype, out):
    """The output's dtype: the zero point's, else ``dtype``, else out's, else uint8."""
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in _QUANT:
            raise TypeError(f"{op}: dtype must be int8 or uint8 (got {dtype})")
    zp_dtype = getattr(zero_point, "dtype", None)
    if zp_dtype is not None:
        if dtype is not None and dtype != zp_dtype:
            raise TypeError(f"{op}: dtype={dtype} contradicts the output zero point's dtype {zp_dtype}")
        return np.dtype(zp_dtype)
    if dtype is not None:
        return dtype
    if out is not None and getattr(out, "dtype", None) in _QUANT:
        return np.dtype(out.dtype)
    return np.dtype(np.uint8)


def _desc(arr_or_shape, dtype):
    shape = arr_or_shape if isinstance(arr_or_shape, tuple) else tuple(arr_or_shape.shape)
    return TensorDesc(DataType.of(dtype), shape or (1,))


def quantize_linear(x, scale, zero_point=None, *, dtype=None, out=None):
    """ELEMENT_WISE_QUANTIZE_LINEAR: ``clamp(rint(x / scale) + zero_point)``.

    x: float32, float16 or int32. scale: float32 (float16 for float16 x), a
    Python scalar or an array that broadcasts against x (per tensor, per axis or
    general). zero_point: int8/uint8 array or Python int; its dtype (else
    ``dtype``, else uint8) is the output's.
    """
    op = "QuantizeLinear"
    args = _Args(op, dict(x=x, scale=scale, zero_point=zero_point, out=out))
    x = args.array("x", (_F32, np.dtype(np.float16), np.dtype(np.int32)))
    scale_dtype = np.float16 if x.dtype == np.float16 else np.float32
    scale = args.array("scale", (np.dtype(np.float32), np.dtype(np.float16)), scale_dtype)
    qdt = _out_dtype(op, args.a["zero_point"], dtype, out)
    zero_point = args.array("zero_point", (qdt,), qdt, " (the output dtype)")
    shape = _broadcast(op, x=x.shape, scale=scale.shape,
                       **({} if zero_point is None else {"zero_point": zero_point.shape}))
    out = _check_out(op, shape, qdt, args)
    full = shape or (1,)
    compile_operator(QuantizeLinearDesc(
        _desc(full, x.dtype), _desc(full, scale.dtype),
        None if zero_point is None else _desc(full, qdt), _desc(full, qdt)))
    return _write(_arrays.backend(args.kind).quantize_linear, (x, scale, zero_point), out, args.kind)


def dequantize_linear(q, scale, zero_point=None, *, out=None):
    """ELEMENT_WISE_DEQUANTIZE_LINEAR: ``(q - zero_point) * scale`` in scale's dtype.

    q: int8, uint8, int16, uint16, int32 or uint32; zero_point: q's dtype (or a
    Python int); scale: float32 or float16 (a Python float is float32).
    """
    op = "DequantizeLinear"
    args = _Args(op, dict(q=q, scale=scale, zero_point=zero_point, out=out))
    q = args.array("q", _INTS)
    scale = args.array("scale", (_F32, np.dtype(np.float16)), np.float32)
    zero_point = args.array("zero_point", (q.dtype,), q.dtype, " (q's dtype)")
    shape = _broadcast(op, q=q.shape, scale=scale.shape,
                       **({} if zero_point is None else {"zero_point": zero_point.shape}))
    out = _check_out(op, shape, scale.dtype, args)
    full = shape or (1,)
    compile_operator(DequantizeLinearDesc(
        _desc(full, q.dtype), _desc(full, scale.dtype),
        None if zero_point is None else _desc(full, q.dtype), _desc(full, scale.dtype)))
    return _write(_arrays.backend(args.kind).dequantize_linear, (q, scale, zero_point), out, args.kind)


def _per_tensor(op, name, v):
    if v is not None and v.size != 1:
        raise DescError(f"{op}: {name} must have exactly 1 element (per tensor), got shape {tuple(v.shape)}")
    return v


def quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                  out_zero_point=None, *, dtype=None, out=None):
    """ELEMENT_WISE_QUANTIZED_LINEAR_ADD: dequantize a and b, add, requantize.

    a, b: int8/uint8 arrays that broadcast together; every scale (float32) and
    zero point (a's, b's, the output's dtype) is a single value.
    """
    op = "QuantizedLinearAdd"
    args = _Args(op, dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                          b_zero_point=b_zero_point, out_scale=out_scale,
                          out_zero_point=out_zero_point, out=out))
    a = args.array("a", _QUANT)
    b = args.array("b", _QUANT)
    qdt = _out_dtype(op, args.a["out_zero_point"], dtype, out)
    vals = {}
    for name, dts, default in (("a_scale", (_F32,), _F32), ("a_zero_point", (a.dtype,), a.dtype),
                               ("b_scale", (_F32,), _F32), ("b_zero_point", (b.dtype,), b.dtype),
                               ("out_scale", (_F32,), _F32), ("out_zero_point", (qdt,), qdt)):
        vals[name] = _per_tensor(op, name, args.array(name, dts, default))
    shape = _broadcast(op, a=a.shape, b=b.shape)
    out = _check_out(op, shape, qdt, args)
    rank = max(len(shape), 1)
    one = (1,) * rank
    full = shape or (1,)

    def pad(arr):
        return (1,) * (rank - arr.ndim) + tuple(arr.shape) if arr.ndim else one

    zp = {k: None if vals[k] is None else _desc(one, vals[k].dtype)
          for k in ("a_zero_point", "b_zero_point", "out_zero_point")}
    compile_operator(QuantizedLinearAddDesc(
        _desc(pad(a), a.dtype), _desc(one, _F32), zp["a_zero_point"], _desc(pad(b), b.dtype),
        _desc(one, _F32), zp["b_zero_point"], _desc(one, _F32), zp["out_zero_point"], _desc(full, qdt)))
    return _write(_arrays.backend(args.kind).quantized_add,
                  (a, vals["a_scale"], vals["a_zero_point"], b, vals["b_scale"], vals["b_zero_point"],
                   vals["out_scale"], vals["out_zero_point"]), out, args.kind)


def _axis_vector(op, name, v, length, axis_name, column):
    """A per-tensor or per-row/column scale or zero point as a 1-D array.

    Per tensor: one element. Per row (column=True): shaped (M, 1), optionally
    with leading 1s. Per column: (N,) or (1, N), optionally with leading 1s.
    """
    if v is None:
        return None
    if v.size == 1:
        return v.reshape(1)
    dims = tuple(v.shape)
    if column:
        ok = len(dims) >= 2 and dims[-2:] == (length, 1) and all(d == 1 for d in dims[:-2])
    else:
        ok = dims[-1] == length and all(d == 1 for d in dims[:-1])
    if not ok:
        shape = f"({axis_name}, 1)" if column else f"({axis_name},) or (1, {axis_name})"
        raise DescError(f"{op}: {name} must be a single value or shaped {shape} with "
                        f"{axis_name} = {length} (got {dims})")
    return v.reshape(length)


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                     out_zero_point=None, *, dtype=None, out=None):
    """QUANTIZED_LINEAR_MATRIX_MULTIPLY with numpy.matmul shapes.

    a: (..., M, K), b: (..., K, N), int8/uint8, batch dims broadcast. a_scale,
    a_zero_point, out_scale, out_zero_point: per tensor or per row, (M, 1);
    b_scale, b_zero_point: per tensor or per column, (N,) or (1, N). Scales
    float32; the int32 accumulation is exact for every K.
    """
    op = "QuantizedLinearMatrixMultiply"
    args = _Args(op, dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                          b_zero_point=b_zero_point, out_scale=out_scale,
                          out_zero_point=out_zero_point, out=out))
    a = args.array("a", _QUANT)
    b = args.array("b", _QUANT)
    if a.ndim < 2 or b.ndim < 2:
        raise DescError(f"{op}: a and b must be at least 2-D (got {a.ndim}-D and {b.ndim}-D)")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"{op}: a has K = {k} columns but b has {k2} rows")
    batch = _broadcast(op, a_batch=a.shape[:-2], b_batch=b.shape[:-2])
    qdt = _out_dtype(op, args.a["out_zero_point"], dtype, out)
    spec = (("a_scale", (_F32,), _F32, m, "M", True), ("a_zero_point", (a.dtype,), a.dtype, m, "M", True),
            ("b_scale", (_F32,), _F32, n, "N", False), ("b_zero_point", (b.dtype,), b.dtype, n, "N", False),
            ("out_scale", (_F32,), _F32, m, "M", True), ("out_zero_point", (qdt,), qdt, m, "M", True))
    vec = {name: _axis_vector(op, name, args.array(name, dts, default), length, axis, column)
           for name, dts, default, length, axis, column in spec}
    out = _check_out(op, batch + (m, n), qdt, args)

    def sdesc(name, per_row):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, 1, m, 1) if per_row else (1, 1, 1, n)
        return TensorDesc(DataType.of(v.dtype), sizes if v.size > 1 else (1, 1, 1, 1))

    # Batch broadcasting was checked above; the desc checks dtypes and the
    # per-row/per-column shapes on one {1, 1, M, K} x {1, 1, K, N} product.
    compile_operator(QuantizedLinearMatrixMultiplyDesc(
        TensorDesc(DataType.of(a.dtype), (1, 1, m, k)), sdesc("a_scale", True), sdesc("a_zero_point", True),
        TensorDesc(DataType.of(b.dtype), (1, 1, k, n)), sdesc("b_scale", False), sdesc("b_zero_point", False),
        sdesc("out_scale", True), sdesc("out_zero_point", True), TensorDesc(DataType.of(qdt), (1, 1, m, n))))
    return _write(_arrays.backend(args.kind).quantized_matmul,
                  (a, vec["a_scale"], vec["a_zero_point"], b, vec["b_scale"], vec["b_zero_point"],
                   vec["out_scale"], vec["out_zero_point"]), out, args.kind)


def _param(op, name, value, nd, default, minimum):
    if value is None:
        return (default,) * nd
    if isinstance(value, numbers.Integral):
        value = (value,) * nd
    try:
        value = tuple(int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
                      for v in value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int or a sequence of ints (got {value!r})") from None
    if len(value) != nd or not all(isinstance(v, int) for v in value):
        raise DescError(f"{op}: {name} must have {nd} integers, one per spatial dimension (got {value!r})")
    if any(v < minimum for v in value):
        raise DescError(f"{op}: every {name} value must be >= {minimum} (got {value})")
    return value


def _channel_vector(op, name, v, channels, ndim):
    """Per-tensor or per-channel pooling scale/zero point as a 1-D array."""
    if v is None:
        return None
    if v.size == 1:
        return v.reshape(1)
    dims = tuple(v.shape)
    aligned = (1,) * (ndim - len(dims)) + dims if len(dims) <= ndim else None
    per_channel = (len(dims) == 1 and dims[0] == channels) or (
        aligned is not None and aligned[1] == channels and all(d == 1 for i, d in enumerate(aligned) if i != 1))
    if not per_channel:
        raise DescError(f"{op}: {name} must be a single value or per channel ((C,) or (1, C, 1, ...) "
                        f"with C = {channels}; got {dims})")
    return v.reshape(channels)


def quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, window_size, *,
                       strides=None, start_padding=None, end_padding=None, dilations=None,
                       include_padding=False, ceil_mode=False, dtype=None, out=None):
    """QUANTIZED_LINEAR_AVERAGE_POOLING over (N, C, H, W) or (N, C, D, H, W).

    window_size, strides (default 1), start_padding/end_padding (default 0),
    dilations (default 1): an int or one int per spatial dimension. Scales
    float32 and zero points (x's / the output's dtype) per tensor or per channel.
    ceil_mode adds the extra output SEMANTICS.md allows where its window starts
    inside the input or start padding.
    """
    op = "QuantizedLinearAveragePooling"
    args = _Args(op, dict(x=x, x_scale=x_scale, x_zero_point=x_zero_point, out_scale=out_scale,
                          out_zero_point=out_zero_point, out=out))
    x = args.array("x", _QUANT)
    if x.ndim not in (4, 5):
        raise DescError(f"{op}: x must be 4-D (N, C, H, W) or 5-D (N, C, D, H, W) (got {x.ndim}-D)")
    nd = x.ndim - 2
    if isinstance(window_size, numbers.Integral):
        window_size = (window_size,) * nd
    if window_size is None or len(tuple(window_size)) == 0:
        raise DescError(f"{op}: window_size must not be empty")
    window = _param(op, "window_size", window_size, nd, None, 1)
    stride = _param(op, "strides", strides, nd, 1, 1)
    start = _param(op, "start_padding", start_padding, nd, 0, 0)
    end = _param(op, "end_padding", end_padding, nd, 0, 0)
    dil = _param(op, "dilations", dilations, nd, 1, 1)
    qdt = _out_dtype(op, args.a["out_zero_point"], dtype, out)
    channels = x.shape[1]
    vec = {}
    for name, dts, default in (("x_scale", (_F32,), _F32), ("x_zero_point", (x.dtype,), x.dtype),
                               ("out_scale", (_F32,), _F32), ("out_zero_point", (qdt,), qdt)):
        vec[name] = _channel_vector(op, name, args.array(name, dts, default), channels, x.ndim)
    out_spatial = []
    for i in range(nd):
        floor_size, ceil_size = pool_output_size(x.shape[2 + i], window[i], stride[i], start[i], end[i], dil[i])
        if floor_size <= 0:
            raise DescError(f"{op}: the dilated window ({(window[i] - 1) * dil[i] + 1}) is larger than the "
                            f"padded input ({x.shape[2 + i] + start[i] + end[i]}) in spatial dimension {i}")
        out_spatial.append(ceil_size if ceil_mode else floor_size)
    shape = tuple(x.shape[:2]) + tuple(out_spatial)
    out = _check_out(op, shape, qdt, args)

    def sdesc(name):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, channels) + (1,) * nd if v.size > 1 else (1,) * x.ndim
        return TensorDesc(DataType.of(v.dtype), sizes)

    compile_operator(QuantizedLinearAveragePoolingDesc(
        _desc(x, x.dtype), sdesc("x_scale"), sdesc("x_zero_point"), sdesc("out_scale"), sdesc("out_zero_point"),
        _desc(shape, qdt), nd, stride, window, start, end, dil, bool(include_padding)))
    return _write(_arrays.backend(args.kind).quantized_avg_pool,
                  (x, vec["x_scale"], vec["x_zero_point"], vec["out_scale"], vec["out_zero_point"]), out,
                  args.kind, (window, stride, start, end, dil, bool(include_padding)))
