"""The public NumPy-like functions: the top layer.

Layers, each importing only the ones below it:

    dmlq.api         these functions: each a planner and a call of dmlq.calls.run
    dmlq.calls       a call's operands normalized, its signature's key, the plan cache
    dmlq.checks      the planners' argument checks and the plan they make
    dmlq.operator    compile_operator: DirectML descriptors bound to arrays
    dmlq.validation  the DirectML rules (seed tables, constraints, feature levels)
    dmlq.dispatch    which backend runs a call (dmlq.reference or dmlq.gpu), and running it

A new function goes in a module of its own beside this one: a planner over a
:class:`dmlq.checks.Builder`, a :class:`dmlq.calls.Spec` and a function that
calls :func:`dmlq.calls.run`.

The numeric contract is docs/semantics.md.
"""
from __future__ import annotations

import numbers
import operator
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from . import dispatch, layout, packed_b, pool1d, quant, quant_gpu, vectors
from .calls import EXPLAINING, META, Spec, kernel_plan, output_meta, public, result_meta, run
from .checks import (GPU, HOST, QUANT, INTS, F16, F32, I32, F64, batch_rows, batch_rows_form, desc as _desc,
                     host_int, vector as _vector)
from .desc import (DequantizeLinearDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc, pool_output_size)
from .dtypes import DataType, plain_dtype
from .errors import DescError, UnsupportedError
from .typing import Bool, CudaArray, DType, HostArray, Index, Operand, Params


# ------------------------------------------------------------------ the result's memory order

def _order(fname, names, values, shape, out, operands=()):
    """The axis order (dmlq.layout) of a new result: None for C order, with out=, for torch
    tensors and dask arrays (their adapters decide), when only the shape is asked, and beside
    lists among the ``operands`` (their shapes are np.asarray's, known only in the call).
    ``shape``: the result's, or a function that gives it."""
    if out is not None or all(getattr(getattr(v, "flags", None), "c_contiguous", False) for v in values):
        return None  # (NumPy or CuPy arrays in C order: the common case, decided first)
    arrays = [v if type(v) is np.ndarray or quant_gpu.on_gpu(v) else None for v in values]
    if all(v is None for v in arrays) or any(isinstance(v, (list, tuple)) for v in operands) \
            or EXPLAINING.get() is META or layout.C_ORDER.get():
        return None
    if callable(shape):
        try:
            shape = shape()
        except (AttributeError, TypeError, ValueError):  # no shape: the call says what is wrong
            return None
    if shape is None:
        return None
    return layout.result_order(fname, names, arrays, shape)


def _elementwise_shape(first, scale, zero_point, axis, block_size):
    """A function giving quantize's or dequantize's result shape: the operands broadcast (a scale
    of more dimensions than x widens it), or x's shape in ONNX's per-axis and blocked forms."""
    if axis is not None or block_size is not None:
        return lambda: getattr(first, "shape")
    return lambda: np.broadcast_shapes(*(tuple(getattr(v, "shape", ())) for v in (first, scale, zero_point)))


def _gpu_narrow(values, dtype) -> bool:
    """A GPU call with a dmlq.Packed among its operands (bytes in C order), or whose result may be
    one (a type CuPy holds only as bytes): it keeps C order."""
    if not quant_gpu.on_gpu(*values):
        return False
    if any(isinstance(v, packed_b.Packed) for v in values):
        return True
    try:
        return dtype is not None and np.dtype(dtype).name not in quant_gpu.NATIVE + ("float32", "float16",
                                                                                       "bfloat16")
    except TypeError:
        return True


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
        return b._scalar("x", b.real("x", x, F32), F32)  # a Python number: float32, like a list of them
    dt = x.dtype
    if dt not in (F32, F16, I32):
        if dt == F64:
            fix = ("dmlq computes in float32 and does not narrow a float64 array silently: pass "
                   "x.astype(np.float32)")
        elif dt.kind in "iub":
            fix = "pass x.astype(np.int32) if its values fit, or x.astype(np.float32)"
        else:
            fix = "pass x.astype(np.float32)"
        raise TypeError(f"{f}: x must have dtype float32, float16 or int32 (got {dt}); {b.fix('x', fix)}")
    if isinstance(x, np.generic):
        return b._scalar("x", x, dt)
    return x


def _plan_quantize(b, dtype):
    x = _quantize_input(b)
    if x.dtype == F16:  # (the other float types go to dmlq.quant, widened: said in the message)
        scale = b.float_operand("scale", (F16,), F16, " (or float32 or bfloat16) for a float16 x")
    else:
        scale = b.float_operand("scale", (F32,), F32, f" (or float16 or bfloat16) for a {x.dtype} x")
    qdt = b.out_dtype("zero_point", dtype)
    zp = b.zero_point("zero_point", qdt, "(the output dtype)")
    shape = b.broadcast(x=x.shape, scale=scale.shape, **({} if zp is None else {"zero_point": zp.shape}))
    b.check_out(shape, qdt)
    full = shape or (1,)
    b.validate(QuantizeLinearDesc(_desc(full, x.dtype), _desc(full, scale.dtype),
                                  None if zp is None else _desc(full, qdt), _desc(full, qdt)))
    return b.plan(shape, qdt)


def _plan_dequantize(b):
    q = b.int_data("q", INTS, "q.astype(np.int32) or np.asarray(q, np.uint8)")
    scale = b.float_operand("scale", (F32, F16), F32, " (or bfloat16, or float8_e8m0fnu with dtype=)")
    zp = b.zero_point("zero_point", q.dtype, "(q's dtype)")
    shape = b.broadcast(q=q.shape, scale=scale.shape, **({} if zp is None else {"zero_point": zp.shape}))
    b.check_out(shape, scale.dtype)
    full = shape or (1,)
    b.validate(DequantizeLinearDesc(_desc(full, q.dtype), _desc(full, scale.dtype),
                                    None if zp is None else _desc(full, q.dtype), _desc(full, scale.dtype)))
    return b.plan(shape, scale.dtype)


_QUANTIZE = Spec("quantize_linear", ("x", "scale", "zero_point"), {"x", "scale"}, _plan_quantize,
                  "quantize_linear", gpu_takes_host_scalars=True)
_DEQUANTIZE = Spec("dequantize_linear", ("q", "scale", "zero_point"), {"scale"}, _plan_dequantize,
                    "dequantize_linear", gpu_takes_host_scalars=True)


@overload
def quantize_linear(x: CudaArray, scale: Operand, zero_point: Operand | None = None, *,
                    dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                    saturate: Bool = True, precision: DType | None = None, out: Any = None) -> Any: ...
@overload
def quantize_linear(x: HostArray, scale: HostArray, zero_point: HostArray | None = None, *,
                    dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                    saturate: Bool = True, precision: DType | None = None,
                    out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def quantize_linear(x: Operand, scale: Operand, zero_point: Operand | None = None, *,
                    dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                    saturate: Bool = True, precision: DType | None = None, out: Any = None) -> Any:
    """Quantize: ``clip(rint(x / scale) + zero_point)`` (DirectML's ELEMENT_WISE_QUANTIZE_LINEAR,
    ONNX QuantizeLinear), bit for bit as docs/semantics.md defines it.

    Parameters
    ----------
    x : float32, float16 or int32 array
        The data. Python numbers and lists become float32; a float64 array is
        refused (pass ``x.astype(np.float32)``): dmlq computes in float32.
    scale : float32 array or number (float16 for a float16 ``x``)
        Per tensor (a number, 0-d or size-1 array) or per axis (any shape that
        broadcasts against ``x``). Zero, negative, NaN and infinite scales follow IEEE
        arithmetic; a number beyond float32's range is refused rather than made inf.
        Also bfloat16, int32 and float8_e8m0fnu (ONNX opset 24) scales (on the GPU an
        int32 CuPy array, or e8m0 codes as ``dmlq.Packed(data, shape, "float8_e8m0fnu")``;
        docs/semantics.md "Scale types").
    zero_point : int8 or uint8 array or number, optional
        Its dtype is the output's. ``None`` (the default) means 0. A Python int, or
        an integer array of another dtype together with ``dtype=``, is taken when its
        values fit.
    dtype : np.int8 or np.uint8, optional
        The output type when ``zero_point`` does not say it; with neither, ``out``'s
        dtype. **Without any of them the output is uint8 (as ONNX), which
        clips every negative ``x / scale`` to 0**:
        for signed data pass ``dtype=np.int8``, or a uint8 zero point such as 128.
        Also every ONNX 21-25 type (NumPy and GPU inputs; docs/semantics.md "Quantized
        types beyond int8"): int16, uint16, int4, uint4, int2, uint2, float8_e4m3fn,
        float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float4_e2m1fn, as an ml_dtypes
        dtype or its name; the zero point's dtype says it as well. x and scale may
        then also be bfloat16.
    axis : int, optional
        ONNX's per-axis form (a 1-D scale of ``x.shape[axis]`` values) or, with
        ``block_size``, the blocked axis (found from the shapes when left out).
    block_size : int, optional
        Blocked scales: scale and zero point have ``x``'s shape with
        ``ceil(D / block_size)`` on the blocked axis; the last block may be ragged.
    saturate : bool, default True
        float8 outputs only (ONNX): out-of-range values become +-max (True) or
        inf/NaN as the type has them (False).
    precision : float32, float16 or bfloat16, optional
        The float type the division runs in (ONNX opset 23); float32 when left out.
    out : array, optional
        Where to write the result: the output's dtype (it picks the output type where
        neither ``zero_point`` nor ``dtype`` does) and the broadcast shape, on the
        inputs' side (a NumPy array, or a CuPy/CUDA array for GPU inputs). It is
        returned. An ``out`` that overlaps an input is written through a temporary.

    Returns
    -------
    ndarray or Packed
        The output type (int8 or uint8, or a type beyond int8) of the broadcast shape,
        in the memory order of ``x`` where it is dense: a ``numpy.ndarray`` for NumPy
        inputs (ml_dtypes for the narrow types), a ``cupy.ndarray`` for GPU inputs, or on
        the GPU a ``dmlq.Packed`` for a type CuPy has no dtype for (4-bit, 2-bit, float8,
        float4); ``out`` when given.

    Raises
    ------
    TypeError
        A wrong type or dtype (a float64 array, a float zero point, NumPy and GPU
        arrays mixed, ``out`` of the wrong dtype); the message names the argument
        and the fix.
    ValueError
        A wrong value or shape (shapes that do not broadcast, a zero point out of
        range, a scale beyond float32); often ``dmlq.DescError``.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> x = np.array([-1.0, -0.26, 0.0, 0.25, 1.0, 3.0], np.float32)
    >>> dmlq.quantize_linear(x, 0.01)                 # uint8: negatives clip to 0, 300 to 255
    array([  0,   0,   0,  25, 100, 255], dtype=uint8)
    >>> dmlq.quantize_linear(x, 0.01, dtype=np.int8)
    array([-100,  -26,    0,   25,  100,  127], dtype=int8)
    >>> dmlq.quantize_linear(x, 0.01, 128)            # uint8 with zero point 128
    array([ 28, 102, 128, 153, 228, 255], dtype=uint8)
    """
    dtype, precision = plain_dtype(dtype), plain_dtype(precision)
    if type(x) is not np.ndarray and quant.foreign((x, scale, zero_point), out):  # torch tensors or dask arrays:
        # their adapter takes the call as it is (nothing to decide here first: the adapter calls this
        # function again; a foreign operand beside a NumPy x takes the longer way there, dmlq.calls.run)
        return dispatch.to_adapter("quantize_linear", ("x", "scale", "zero_point"), (x, scale, zero_point),
                                     (dtype, axis, block_size, saturate, precision), out)
    order = _order("quantize_linear", ("x",), (x,), _elementwise_shape(x, scale, zero_point, axis, block_size), out,
                   (scale, zero_point))
    if order is not None and not _gpu_narrow((x, scale, zero_point), dtype):
        return layout.call_in_order(quantize_linear, order, (x, scale, zero_point),
                                    dict(dtype=dtype, axis=axis, block_size=block_size, saturate=saturate,
                                         precision=precision))
    if quant.quantize_is_extended(x, scale, zero_point, dtype, axis, block_size, saturate, precision, out):
        path = quant_gpu if quant_gpu.on_gpu(x, scale, zero_point, out) else quant
        return path.quantize_linear(x, scale, zero_point, dtype=dtype, axis=axis, block_size=block_size,
                                     saturate=saturate, precision=precision, out=out)
    return run(_QUANTIZE, (x, scale, zero_point), (dtype,), out)


@overload
def dequantize_linear(q: CudaArray, scale: Operand, zero_point: Operand | None = None, *,
                      dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                      out: Any = None) -> Any: ...
@overload
def dequantize_linear(q: HostArray, scale: HostArray, zero_point: HostArray | None = None, *,
                      dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                      out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def dequantize_linear(q: Operand, scale: Operand, zero_point: Operand | None = None, *,
                      dtype: DType | None = None, axis: Index | None = None, block_size: Index | None = None,
                      out: Any = None) -> Any:
    """Dequantize: ``(q - zero_point) * scale`` in the scale's dtype (DirectML's
    ELEMENT_WISE_DEQUANTIZE_LINEAR, ONNX DequantizeLinear), as docs/semantics.md defines it.

    Parameters
    ----------
    q : int8, uint8, int16, uint16, int32 or uint32 array
        The quantized data. A list of Python ints is int64 and refused: say the
        dtype (``np.asarray(q, np.uint8)``).
    scale : float32 or float16 array or number
        Per tensor or per axis (broadcasting against ``q``); a Python number is float32.
        Also bfloat16 and float8_e8m0fnu (with ``dtype=``; on the GPU its codes as
        ``dmlq.Packed(data, shape, "float8_e8m0fnu")``; docs/semantics.md "Scale types").
    zero_point : array or number of ``q``'s dtype, optional
        ``None`` means 0; a Python int or an integer array of another dtype is taken
        when its values fit.
    dtype : float32, float16 or bfloat16, optional
        The output type (ONNX's output_dtype); the scale's dtype when left out.
    axis, block_size : int, optional
        ONNX's per-axis and blocked forms, as for quantize_linear. ``q`` may also be
        any ONNX 21-25 type: an ml_dtypes array (NumPy), or a dmlq.Packed of 4-bit,
        2-bit, float8 or float4 elements (NumPy or GPU bytes; docs/semantics.md).
    out : array, optional
        Where to write the result (the scale's dtype, the broadcast shape); returned.

    Returns
    -------
    ndarray
        The scale's dtype, or ``dtype=`` (float32, float16 or bfloat16), in the memory order
        of ``q`` where it is dense: NumPy for NumPy inputs, CuPy for GPU ones.

    Raises
    ------
    TypeError
        A wrong type or dtype, named with the fix.
    ValueError
        Shapes that do not broadcast, a zero point that does not fit ``q``'s dtype.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> dmlq.dequantize_linear(np.array([0, 100, 255], np.uint8), 0.5, 100)
    array([-50. ,   0. ,  77.5], dtype=float32)
    """
    dtype = plain_dtype(dtype)
    if type(q) is not np.ndarray and quant.foreign((q, scale, zero_point), out):  # to their adapter (as above)
        return dispatch.to_adapter("dequantize_linear", ("q", "scale", "zero_point"), (q, scale, zero_point),
                                     (dtype, axis, block_size), out)
    order = _order("dequantize_linear", ("q",), (q,), _elementwise_shape(q, scale, zero_point, axis, block_size), out,
                   (scale, zero_point))
    if order is not None and not _gpu_narrow((q, scale, zero_point), dtype):
        return layout.call_in_order(dequantize_linear, order, (q, scale, zero_point),
                                    dict(dtype=dtype, axis=axis, block_size=block_size))
    if quant.dequantize_is_extended(q, scale, zero_point, dtype, axis, block_size, out):
        path = quant_gpu if quant_gpu.on_gpu(q, scale, zero_point, out) else quant
        return path.dequantize_linear(q, scale, zero_point, dtype=dtype, axis=axis, block_size=block_size, out=out)
    return run(_DEQUANTIZE, (q, scale, zero_point), (), out)


# ------------------------------------------------------------------ quantized add

def _single(b, name, v):
    if v is not None and v.size != 1:
        raise DescError(f"{b.f}: {name} must have exactly 1 element (per tensor), got shape {tuple(v.shape)}; "
                        "quantized_add takes one scale and zero point per operand")
    return v


def _plan_add(b, dtype):
    a = b.int_data("a", QUANT, "a.astype(np.uint8) or a.astype(np.int8)")
    bb = b.int_data("b", QUANT, "b.astype(np.uint8) or b.astype(np.int8)")
    qdt = b.out_dtype("out_zero_point", dtype)
    vals = {}
    for name, kind, dt in (("a_scale", "s", F32), ("a_zero_point", "z", a.dtype), ("b_scale", "s", F32),
                           ("b_zero_point", "z", bb.dtype), ("out_scale", "s", F32),
                           ("out_zero_point", "z", qdt)):
        whose = {"a_zero_point": "(a's dtype)", "b_zero_point": "(b's dtype)"}.get(name, "(the output dtype)")
        v = b.widened_scale(name) if kind == "s" else b.zero_point(name, dt, whose)
        vals[name] = _single(b, name, v)
    shape = b.broadcast(None, a=a.shape, b=bb.shape)
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


_ADD = Spec("quantized_add", ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "out_scale",
                               "out_zero_point"),
             {"a_scale", "b_scale", "out_scale"}, _plan_add, "quantized_add", gpu_takes_host_scalars=True)


@overload
def quantized_add(a: CudaArray, a_scale: Operand, a_zero_point: Operand | None, b: Operand, b_scale: Operand,
                  b_zero_point: Operand | None, out_scale: Operand, out_zero_point: Operand | None = None, *,
                  dtype: DType | None = None, out: Any = None) -> Any: ...
@overload
def quantized_add(a: HostArray, a_scale: HostArray, a_zero_point: HostArray | None, b: HostArray,
                  b_scale: HostArray, b_zero_point: HostArray | None, out_scale: HostArray,
                  out_zero_point: HostArray | None = None, *, dtype: DType | None = None,
                  out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def quantized_add(a: Operand, a_scale: Operand, a_zero_point: Operand | None, b: Operand, b_scale: Operand,
                  b_zero_point: Operand | None, out_scale: Operand, out_zero_point: Operand | None = None, *,
                  dtype: DType | None = None, out: Any = None) -> Any:
    """Quantized add: dequantize ``a`` and ``b``, add, requantize (DirectML's
    ELEMENT_WISE_QUANTIZED_LINEAR_ADD, ONNX QLinearAdd), as docs/semantics.md defines it.

    Parameters
    ----------
    a, b : int8 or uint8 arrays
        Broadcasting together, as NumPy's ``a + b``.
    a_scale, b_scale, out_scale : float32, one value each
        Python numbers, 0-d or size-1 arrays (quantized add takes no per-axis scales).
    a_zero_point, b_zero_point : one value each, or None (0)
        In ``a``'s and ``b``'s dtype (a Python int or another integer dtype that fits).
    out_zero_point : int8 or uint8, one value, optional
        Its dtype is the output's; ``None`` means 0.
    dtype : np.int8 or np.uint8, optional
        The output type when ``out_zero_point`` does not say it; with neither, ``out``'s
        dtype; default uint8, which clips negative results to 0.
    out : array, optional
        Where to write the result; returned.

    Returns
    -------
    ndarray
        int8 or uint8 of the broadcast shape (NumPy or CuPy, as the inputs).

    Raises
    ------
    TypeError
        A wrong type or dtype, named with the fix.
    ValueError
        A per-axis scale or zero point, shapes that do not broadcast, a zero point
        out of range (``dmlq.DescError``).

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> a = np.array([10, 200, 255], np.uint8)        # 1.0, 20.0, 25.5 at scale 0.1
    >>> b = np.array([-5, 0, 127], np.int8)           # -1.0, 0.0, 25.4 at scale 0.2
    >>> dmlq.quantized_add(a, 0.1, 0, b, 0.2, 0, 0.5, np.int8(0))
    array([  0,  40, 102], dtype=int8)
    """
    order = _order("quantized_add", ("a", "b"), (a, b),
                   lambda: np.broadcast_shapes(getattr(a, "shape"), getattr(b, "shape")), out,
                   (a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point))
    if order is not None:
        values = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point)
        return layout.call_in_order(quantized_add, order, values, dict(dtype=dtype))
    return run(_ADD, (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point),
               (plain_dtype(dtype),), out)


# ------------------------------------------------------------------ quantized matmul

def _axis_vector(b, name, v, length, axis_name, column, also="", batch=None, whose="a's"):
    """A per-tensor or per-row/column scale or zero point, reshaped to 1-D for the backend.

    Per tensor: one element. Per row (column=True): shaped (M, 1), optionally
    with leading 1s, or per batch and row (``batch``: a's or the output's batch shape, + (M,
    1); dmlq.checks.batch_rows), kept at len(batch) + 2 dims. Per column: (N,) or (1, N),
    optionally with leading 1s. ``also``: the error's note of a form the caller takes."""
    def per_axis(dims):
        if column:
            return len(dims) >= 2 and dims[-2:] == (length, 1) and all(d == 1 for d in dims[:-2])
        return len(dims) >= 1 and dims[-1] == length and all(d == 1 for d in dims[:-1])

    if column and v is not None and v.size != 1:
        want = batch_rows(v.shape, length, batch)
        if want is not None:
            if tuple(v.shape) != want:
                b.reshape(name, want)
            return v.reshape(want)
        also = batch_rows_form(length, batch, whose) + also
    shape = f"({axis_name}, 1)" if column else f"({axis_name},) or (1, {axis_name})"
    return _vector(b, name, v, length, per_axis,
                   lambda dims: f"{b.f}: {name} must be a single value or shaped {shape} with "
                                f"{axis_name} = {length} (got {dims}){also}")


def _per_batch(dims, b_dims) -> bool:
    """B's per-batch, per-column form: b's batch shape (not all 1s), then (1, N)."""
    return (len(dims) == len(b_dims) > 2 and tuple(dims[:-2]) == tuple(b_dims[:-2])
            and tuple(dims[-2:]) == (1, b_dims[-1]) and any(d != 1 for d in dims[:-2]))


def _plan_matmul(b, dtype, packed=None):
    f = b.f
    if packed is not None:
        packed_b.stand_in(b, packed)
    a, bb, m, k, n, batch = b.matmul_operands(QUANT + packed_b.B_NARROW, "b.astype(np.uint8) or b.astype(np.int8), "
                                              "or an ml_dtypes int4/uint4/int2/uint2 array, or a dmlq.Packed of one")
    four_bit = bb.dtype in packed_b.FOUR_BIT
    if four_bit and packed is None and (b.kind == GPU or EXPLAINING.get() is True):
        raise UnsupportedError(f"{f}: a 4-bit b runs on the GPU as a dmlq.Packed (dmlq.pack(b)); pass that")
    qdt = b.out_dtype("out_zero_point", dtype)
    spec = (("a_scale", None, m, "M", True), ("a_zero_point", a.dtype, m, "M", True),
            ("b_scale", None, n, "N", False), ("b_zero_point", bb.dtype, n, "N", False),
            ("out_scale", None, m, "M", True), ("out_zero_point", qdt, m, "M", True))
    vec = {}
    for name, zdt, length, axis, column in spec:
        whose = {"a_zero_point": "(a's dtype)", "b_zero_point": "(b's dtype)"}.get(name, "(the output dtype)")
        v = b.widened_scale(name) if zdt is None else packed_b.zero_point(b, name, zdt, whose, packed)
        if name[0] == "b" and v is not None and _per_batch(v.shape, bb.shape):
            vec[name] = v  # (..., 1, N): one row of per-column values per matrix of b, as it is
            continue
        also = (f"; per batch and column it is {tuple(bb.shape[:-2]) + (1, n)} (b's batch shape + (1, N))"
                if name[0] == "b" and any(d != 1 for d in bb.shape[:-2]) else "")
        vec[name] = _axis_vector(b, name, v, length, axis, column, also, a.shape[:-2] if name[0] == "a" else batch,
                                 "a's" if name[0] == "a" else "the output's")
    shape = batch + (m, n)
    b.check_out(shape, qdt)

    def sdesc(name, per_row):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, 1, m, 1) if per_row else (1, 1, 1, n)
        dt = a.dtype if four_bit and name == "b_zero_point" else v.dtype  # 4-bit b: checked above
        dt = F32 if name.endswith("scale") else dt  # widened (Builder.widened_scale)
        return TensorDesc(DataType.of(dt), sizes if v.size > 1 else (1, 1, 1, 1))

    # Batch broadcasting was checked above; the desc checks dtypes and the
    # per-row/per-column shapes on one {1, 1, M, K} x {1, 1, K, N} product.
    b.validate(QuantizedLinearMatrixMultiplyDesc(
        TensorDesc(DataType.of(a.dtype), (1, 1, m, k)), sdesc("a_scale", True), sdesc("a_zero_point", True),
        TensorDesc(DataType.of(a.dtype if four_bit else bb.dtype), (1, 1, k, n)), sdesc("b_scale", False),
        sdesc("b_zero_point", False),
        sdesc("out_scale", True), sdesc("out_zero_point", True), TensorDesc(DataType.of(qdt), (1, 1, m, n))))
    for pair in (("a_scale", "a_zero_point"), ("b_scale", "b_zero_point"), ("out_scale", "out_zero_point")):
        b.widen_pair(pair, tuple(vec[name] for name in pair))
    return b.plan(shape, qdt, () if packed is None else (packed,))


_MATMUL = Spec("quantized_matmul", _ADD.names, _ADD.float_roles, _plan_matmul, "quantized_matmul")


@overload
def quantized_matmul(a: CudaArray, a_scale: Operand, a_zero_point: Operand | None, b: Operand, b_scale: Operand,
                     b_zero_point: Operand | None, out_scale: Operand, out_zero_point: Operand | None = None, *,
                     dtype: DType | None = None, out: Any = None) -> Any: ...
@overload
def quantized_matmul(a: HostArray, a_scale: HostArray, a_zero_point: HostArray | None, b: HostArray,
                     b_scale: HostArray, b_zero_point: HostArray | None, out_scale: HostArray,
                     out_zero_point: HostArray | None = None, *, dtype: DType | None = None,
                     out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def quantized_matmul(a: Operand, a_scale: Operand, a_zero_point: Operand | None, b: Operand, b_scale: Operand,
                     b_zero_point: Operand | None, out_scale: Operand, out_zero_point: Operand | None = None, *,
                     dtype: DType | None = None, out: Any = None) -> Any:
    """Quantized matrix multiply with ``numpy.matmul`` shapes (DirectML's
    QUANTIZED_LINEAR_MATRIX_MULTIPLY, ONNX QLinearMatMul), as docs/semantics.md defines it:
    the exact integer sum of ``(a - a_zero_point) @ (b - b_zero_point)``, then
    ``rint(float32(acc) * ((a_scale * b_scale) / out_scale)) + out_zero_point``, saturated.

    Parameters
    ----------
    a : int8 or uint8 array, (..., M, K)
    b : int8 or uint8 array, or int4/uint4/int2/uint2 (ml_dtypes, or a dmlq.Packed), (..., K, N)
        Batch dimensions broadcast. A 1-D a or b is a vector, as in numpy.matmul (a (K,)
        is (1, K), b (K,) is (K, 1), and that dimension leaves the result). On the GPU
        a 4-bit b is a dmlq.Packed (its bytes read packed by the kernel dmlq.kernel_plan
        names: the weight-streaming kernels at M <= 16, else the tensor cores or dp4a); a
        2-bit b runs as the 4-bit b of its values (on the GPU one pass widens its bytes first).
    a_scale, a_zero_point, out_scale, out_zero_point : per tensor, per row or per batch and row
        One value, shaped (M, 1), or a's (the output's, for out_*) batch shape + (M, 1)
        (batch dims of 1 broadcast). Scales float32, float16 or bfloat16 (ONNX
        QLinearMatMul's; each widened to float32 exactly); zero points in ``a``'s dtype and
        the output's dtype; ``None`` zero points mean 0.
    b_scale, b_zero_point : per tensor, per column or per batch and column
        One value, shaped (N,) or (1, N), or b's batch shape + (1, N).
    dtype : np.int8 or np.uint8, optional
        The output type when ``out_zero_point`` does not say it; with neither, ``out``'s
        dtype; default uint8, which clips negative results to 0.
    out : array, optional
        Where to write the (..., M, N) result; returned.

    Returns
    -------
    ndarray
        int8 or uint8, (..., M, N) (NumPy or CuPy, as the inputs). The accumulation is
        exact for every K.

    Raises
    ------
    TypeError
        A wrong type or dtype, named with the fix.
    ValueError
        A 0-d a or b, mismatched K, batch shapes that do not broadcast, a scale or zero
        point of the wrong shape or out of range (``dmlq.DescError``).

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> a = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    >>> w = np.array([[1, -1], [2, 0], [3, 1]], np.int8)
    >>> dmlq.quantized_matmul(a, 0.5, None, w, 0.25, None, 0.125, np.int8(0))   # multiplier 1
    array([[14,  2],
           [32,  2]], dtype=int8)
    """
    a, b, view, vec = vectors.promote(a, b, out, "quantized_matmul")
    b, b_zero_point, packed = packed_b.take("quantized_matmul", b, b_zero_point,
                                            (a, a_scale, a_zero_point, b_scale, out_scale, out_zero_point, out))
    return vectors.call(lambda: run(_MATMUL, (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                                              out_zero_point), (plain_dtype(dtype), packed), view), vec, out)


# ------------------------------------------------------------------ quantized average pooling

# Pooling's sizes, strides, paddings and dilations are C ints in the kernels.
POOL_PARAM_LIMIT = 2**31


def _param(f, name, value, nd, default, minimum):
    if value is None:
        return (default,) * nd
    if (one := host_int(value)) is not None:  # (an int, or a 0-d NumPy integer array)
        value = (one,) * nd
    if isinstance(value, (str, bytes)):
        hint = ""
        if name.endswith("padding"):
            hint = ("; dmlq takes explicit paddings: for 'same' with window k, stride 1 and dilation 1 pass "
                    "start_padding=(k - 1) // 2 and end_padding=k - 1 - (k - 1) // 2 in each dimension (ONNX's "
                    "SAME_UPPER), for 'valid' pass 0")
        raise TypeError(f"{f}: {name} must be an int or a sequence of {nd} ints (got the string {value!r}){hint}")
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{f}: {name} must be an int or a sequence of ints (got {value!r})") from None
    if dispatch.lazy_inside(items):  # (a dask scalar's __index__ computes it)
        raise TypeError(f"{f}: {name} holds a dask array, which dmlq does not compute for you; pass ints "
                        f"(int(v.compute()))")
    try:  # ints, NumPy ints and 0-d integer tensors (anything with __index__); not bools or floats
        if any(isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError
        value = tuple(operator.index(v) for v in items)
    except TypeError:
        raise TypeError(f"{f}: {name} must hold integers (got {items!r})") from None
    if len(value) != nd:
        raise DescError(f"{f}: {name} must have {nd} integers, one per spatial dimension (got {value!r})")
    if any(v < minimum for v in value):
        raise DescError(f"{f}: every {name} value must be >= {minimum} (got {value})")
    if any(v >= POOL_PARAM_LIMIT for v in value):
        raise DescError(f"{f}: {name} values must be below 2**31, the kernels' C ints (got {value}); pass "
                        "smaller ones")
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
    x = b.int_data("x", QUANT, "x.astype(np.uint8) or x.astype(np.int8)")
    if x.ndim not in (4, 5):
        raise DescError(f"{f}: x must be 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) (got {x.ndim}-D, "
                        f"shape {tuple(x.shape)}); add the missing batch or channel dimension with x[None] or "
                        "x.reshape(...)")
    nd = x.ndim - 2
    if window_size is None:
        raise TypeError(f"{f}: window_size is required (got None); pass an int or {nd} ints")
    if (one := host_int(window_size)) is not None:
        window_size = (one,) * nd
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
        v = b.widened_scale(name) if zdt is None else b.zero_point(name, zdt, whose)
        vec[name] = _channel_vector(b, name, v, channels, x.ndim)
    out_spatial = []
    for i in range(nd):
        padded = x.shape[2 + i] + start[i] + end[i]
        if padded >= POOL_PARAM_LIMIT:
            raise DescError(f"{f}: start_padding + x's size + end_padding must stay below 2**31, the kernels' C "
                            f"ints (spatial dimension {i}: {start[i]} + {x.shape[2 + i]} + {end[i]} = {padded}); "
                            "pass smaller paddings (a window entirely in padding only gives the output zero point)")
        floor_size, ceil_size = pool_output_size(x.shape[2 + i], window[i], stride[i], start[i], end[i], dil[i])
        if (ceil_size if ceil_mode else floor_size) <= 0:
            raise DescError(f"{f}: the dilated window ({(window[i] - 1) * dil[i] + 1}) is larger than the "
                            f"padded input ({x.shape[2 + i] + start[i] + end[i]}) in spatial dimension {i}"
                            + (" by a stride or more (ceil mode)" if ceil_mode else "") +
                            "; use a smaller window_size or dilations, or more padding"
                            + ("" if ceil_mode else ", or ceil_mode=True where it overhangs by less than a stride"))
        out_spatial.append(ceil_size if ceil_mode else floor_size)
    for i in range(nd):  # (after every padded size's own check)
        reach = (out_spatial[i] - 1) * stride[i] + (window[i] - 1) * dil[i] + 1 + x.shape[2 + i] + start[i] + end[i]
        if reach >= POOL_PARAM_LIMIT:  # the kernels' tap positions, from the last window's end, are C ints
            raise DescError(f"{f}: (outputs - 1) * stride + dilated window + padded input = {reach} in spatial "
                            f"dimension {i} must stay below 2**31 (the kernels' C ints); pass smaller strides or "
                            "paddings")
    shape = tuple(x.shape[:2]) + tuple(out_spatial)
    b.check_out(shape, qdt)

    def sdesc(name):
        v = vec[name]
        if v is None:
            return None
        sizes = (1, channels) + (1,) * nd if v.size > 1 else (1,) * x.ndim
        return TensorDesc(DataType.of(F32 if name.endswith("scale") else v.dtype), sizes)  # (scales widened)

    b.validate(QuantizedLinearAveragePoolingDesc(
        _desc(x.shape, x.dtype), sdesc("x_scale"), sdesc("x_zero_point"), sdesc("out_scale"),
        sdesc("out_zero_point"), _desc(shape, qdt), nd, stride, window, start, end, dil, bool(include_padding)))
    return b.plan(shape, qdt, (window, stride, start, end, dil, bool(include_padding)))


_POOL = Spec("quantized_avg_pool", ("x", "x_scale", "x_zero_point", "out_scale", "out_zero_point"),
              {"x_scale", "out_scale"}, _plan_avg_pool, "quantized_avg_pool")


@overload
def quantized_avg_pool(x: CudaArray, x_scale: Operand, x_zero_point: Operand | None, out_scale: Operand,
                       out_zero_point: Operand | None, window_size: Params, *, strides: Params | None = None,
                       start_padding: Params | None = None, end_padding: Params | None = None,
                       dilations: Params | None = None, include_padding: Bool = False, ceil_mode: Bool = False,
                       dtype: DType | None = None, out: Any = None) -> Any: ...
@overload
def quantized_avg_pool(x: HostArray, x_scale: HostArray, x_zero_point: HostArray | None, out_scale: HostArray,
                       out_zero_point: HostArray | None, window_size: Params, *, strides: Params | None = None,
                       start_padding: Params | None = None, end_padding: Params | None = None,
                       dilations: Params | None = None, include_padding: Bool = False, ceil_mode: Bool = False,
                       dtype: DType | None = None, out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def quantized_avg_pool(x: Operand, x_scale: Operand, x_zero_point: Operand | None, out_scale: Operand,
                       out_zero_point: Operand | None, window_size: Params, *, strides: Params | None = None,
                       start_padding: Params | None = None, end_padding: Params | None = None,
                       dilations: Params | None = None, include_padding: Bool = False, ceil_mode: Bool = False,
                       dtype: DType | None = None, out: Any = None) -> Any:
    """Quantized average pooling over (N, C, L), (N, C, H, W) or (N, C, D, H, W) (DirectML's
    QUANTIZED_LINEAR_AVERAGE_POOLING, ONNX QLinearAveragePool), as docs/semantics.md
    defines it: integer window sums, divided by the taps counted, requantized.

    Parameters
    ----------
    x : int8 or uint8 array, 3-D, 4-D or 5-D (3-D: pooled as (N, C, 1, L), ONNX's 1-D pooling)
    x_scale, out_scale : float32, per tensor or per channel ((C,) or (1, C, 1, ...))
    x_zero_point, out_zero_point : per tensor or per channel, or None (0)
        In ``x``'s dtype and the output's dtype (``out_zero_point``'s dtype is the output's).
    window_size : int or one int per spatial dimension
    strides, dilations : int or ints, optional
        Default 1.
    start_padding, end_padding : int or ints, optional
        Default 0; explicit numbers (for ONNX's 'same', compute them). The padded size,
        and it plus (outputs - 1) * stride + the dilated window, must stay below 2**31 in
        every dimension.
    include_padding : bool
        Count padded taps in the divisor (ONNX count_include_pad).
    ceil_mode : bool
        Size the output by ceiling, as ONNX and PyTorch do: one more output where its
        window starts inside the input or the start padding.
    dtype : np.int8 or np.uint8, optional
        The output type when ``out_zero_point`` does not say it; with neither, ``out``'s
        dtype; default uint8.
    out : array, optional
        Where to write the result; returned.

    Returns
    -------
    ndarray
        int8 or uint8, (N, C, out spatial...) (NumPy or CuPy, as the inputs). A window
        entirely in padding gives the output zero point.

    Raises
    ------
    TypeError
        A wrong type or dtype, a string or float as a window parameter, a non-bool flag.
    ValueError
        A wrong rank, a window larger than the padded input, parameters below their
        minimum or from 2**31, scales or zero points of the wrong shape (``dmlq.DescError``).

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> img = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    >>> dmlq.quantized_avg_pool(img, 1.0, None, 1.0, None, 2, strides=2)   # 2.5 -> 2: ties to even
    array([[[[ 2,  4],
             [10, 12]]]], dtype=uint8)
    """
    values = (x, x_scale, x_zero_point, out_scale, out_zero_point)
    if getattr(x, "ndim", None) == 3:  # (N, C, L), ONNX's 1-D pooling: as (N, C, 1, L) (dmlq.pool1d)
        values, kw, view = pool1d.lifted("quantized_avg_pool", values, dict(
            window_size=window_size, strides=strides, start_padding=start_padding, end_padding=end_padding,
            dilations=dilations), out, lambda vals, params: output_meta(
                quantized_avg_pool, *vals, **params, include_padding=include_padding, ceil_mode=ceil_mode, dtype=dtype))
        try:
            result = quantized_avg_pool(*values, **kw, include_padding=include_padding, ceil_mode=ceil_mode,
                                        dtype=dtype, out=view)
        except (TypeError, ValueError) as e:  # the 2-D call's spatial dimension 1 is the caller's 0
            raise type(e)(str(e).replace("spatial dimension 1", "spatial dimension 0")) from None
        return out if out is not None else pool1d.lowered(result)
    params = (window_size, strides, start_padding, end_padding, dilations, include_padding, ceil_mode,
              plain_dtype(dtype))
    order = _order("quantized_avg_pool", ("x",), (x,), (), out)
    if order is not None:  # a new result in x's axis order (channels_last in, channels_last out)
        shape, out_dtype = result_meta(_POOL, values, params)
        out = layout.empty(dispatch.module(HOST if type(x) is np.ndarray else GPU).empty, shape, out_dtype, order)
    return run(_POOL, values, params, out)


__all__ = ["quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul", "quantized_avg_pool",
           "kernel_plan"]
