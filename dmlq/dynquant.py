"""dynamic_quantize_linear: ONNX DynamicQuantizeLinear (opset 11) and DirectML's
DYNAMIC_QUANTIZE_LINEAR (feature level 4.0). The scale and zero point come from x's range
(docs/semantics.md, "dynamic_quantize_linear"); the quantized values are quantize_linear's
with them. Each array library keeps its own kind: NumPy computes the range on the host,
CuPy (and other CUDA arrays) with dmlq's kernels (cuda/dynamic_quant.cu, no host read),
torch tensors with torch's own reductions (so the call traces under torch.compile; the
quantize step is dmlq's op), dask arrays lazily (a task per chunk for its range, one each for the
scale and the zero point, each in the chunks' own kind: nothing computed).
"""
from __future__ import annotations

import contextlib
import numbers
import sys
from typing import Any

import numpy as np

from . import calls, dispatch
from .api import quantize_linear
from .checks import native_order, real_number
from .dtypes import plain_dtype, qrange
from .errors import UnsupportedError
from .qtypes import BFLOAT16_DTYPE

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
_OUT = (np.dtype(np.uint8), np.dtype(np.int8))
_F = "dynamic_quantize_linear"


def _out_dtype(dtype) -> np.dtype:
    if dtype is None:
        return np.dtype(np.uint8)  # ONNX's only output type
    try:
        dt = np.dtype(plain_dtype(dtype))
    except TypeError:
        dt = None
    if dt not in _OUT:
        raise TypeError(f"{_F}: dtype must be np.uint8 (ONNX's) or np.int8 (DirectML's) (got {dtype!r})")
    return dt


def _checked_x(x):
    """x as an array, float32, float16 or bfloat16: a list or a Python number as quantize_linear takes
    them (float32, a number beyond its range refused, not made inf); a NumPy scalar is an
    array of its dtype (a float64 one refused, as quantize_linear refuses it)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{_F}: x must be a float32, float16 or bfloat16 array, not a bool (got {x!r})")
    if isinstance(x, (list, tuple)):
        x = calls.list_operand(_F, "x", x, True)
    elif isinstance(x, numbers.Number) and not isinstance(x, np.generic):
        if not isinstance(x, numbers.Real):
            raise TypeError(f"{_F}: x must be a real number or an array (got {type(x).__name__} {x!r})")
        x = real_number(_F, "x", x, np.float32)
    calls.refuse_masked(_F, "x", x)
    native_order(_F, "x", x)
    dt = getattr(x, "dtype", None)
    if dt is None:
        raise TypeError(f"{_F}: x must be a float32, float16 or bfloat16 array (got {type(x).__name__})")
    if type(dt) is np.dtype and dt in _FLOATS:  # (a NumPy float32, float16 or bfloat16: no name to make)
        return x
    name = str(dt).rpartition(".")[2]  # torch.float32 -> float32
    if name not in ("float32", "float16", "bfloat16"):
        fix = "x.to(torch.float32)" if type(x).__module__.startswith("torch") else "x.astype(np.float32)"
        raise TypeError(f"{_F}: x must have dtype float32, float16 or bfloat16 (got {name}); dmlq computes in float32 "
                        f"and converts no other type silently: pass {fix}")
    return x


_FLOATS = (np.dtype(np.float32), np.dtype(np.float16)) + (() if BFLOAT16_DTYPE is None else (BFLOAT16_DTYPE,))


def _parameters(lo, hi, qdt):
    """(scale, zero point) from float32 lo <= 0 <= hi (NumPy 0-d arrays): the contract's
    float32 steps."""
    qmin, qmax = (np.float32(v) for v in qrange(qdt))
    with np.errstate(all="ignore"):
        span = np.where(hi == lo, np.float32(1), hi - lo)
        scale = span / (qmax - qmin)
        zf = qmin - lo / scale
        zp = np.rint(np.fmin(np.fmax(zf, qmin), qmax)).astype(qdt)  # fmax: a NaN zf gives qmin
    return scale, zp


def _host(x, qdt, per_row=False):
    x = np.asarray(x)
    axis = -1 if per_row else None  # (per row: x's shape with 1 as the last dimension)
    lo = np.asarray(np.fmin.reduce(x, axis=axis, keepdims=per_row, initial=0), F32)  # fmin / fmax skip NaN
    hi = np.asarray(np.fmax.reduce(x, axis=axis, keepdims=per_row, initial=0), F32)
    scale, zp = _parameters(lo, hi, qdt)
    return np.asarray(scale, F32), np.asarray(zp, qdt)


def _chunk_range(c):
    """One dask chunk's range, (lo, hi) with 0 in it and NaN skipped, as a float32 array of the
    chunk's kind and shape (1, ..., 1, 2) (dmlq's range kernel on a CuPy chunk)."""
    if isinstance(c, np.ndarray):
        pair = np.array([np.fmin.reduce(c, axis=None, initial=0), np.fmax.reduce(c, axis=None, initial=0)], F32)
    else:
        from .gpu import device, dynquant

        c = dispatch.to_gpu_array(c, _F, "x")
        dispatch.refuse_unaligned(_F, ("x",), (c,))
        pairs = dynquant.range_pairs(c)  # (0 in every pair, no NaN: their min and max are the chunk's)
        pair = device.xp().stack([pairs.min(), pairs.max()])
    return pair.reshape((1,) * c.ndim + (2,))


def _chunk_row_range(c):
    """One dask chunk's rows' ranges: (lo, hi) a row, 0 in it and NaN skipped, float32 of the
    chunk's kind shaped c.shape[:-1] + (2,) (dmlq's rows kernel on a CuPy chunk)."""
    if isinstance(c, np.ndarray):
        lo = np.fmin.reduce(c, axis=-1, keepdims=True, initial=0)
        hi = np.fmax.reduce(c, axis=-1, keepdims=True, initial=0)
        return np.concatenate([lo, hi], axis=-1).astype(F32)
    from .gpu import dynquant

    c = dispatch.to_gpu_array(c, _F, "x")
    dispatch.refuse_unaligned(_F, ("x",), (c,))
    return dynquant.row_pairs(c)


def _chunk_row_parameters(c, qdt):
    """[scale, zero point] of each row of c as float32 shaped c.shape[:-1] + (2,): c is a chunk
    of x whose rows are whole, or its chunks' (lo, hi) pairs side by side (their values have
    the row's range: each lo <= 0 <= hi)."""
    if isinstance(c, np.ndarray):
        scale, zp = _host(c, qdt, per_row=True)
        return np.concatenate([scale, zp.astype(F32)], axis=-1)
    from .gpu import device, dynquant

    c = dispatch.to_gpu_array(c, _F, "x")
    dispatch.refuse_unaligned(_F, ("x",), (c,))
    scale, zp = dynquant.row_parameters(c, qdt)
    return device.xp().concatenate([scale, zp.astype(F32)], axis=-1)


def _dask_rows(x, qdt):
    """per_row's (scale, zero point) as lazy dask arrays shaped x.shape[:-1] + (1,), chunked as
    x along its leading axes: a task per row of chunks for its rows' [scale, zero point]
    (``-parameters``: from x's chunk where its rows are whole in it, else from the (lo, hi)
    pairs of a task per chunk, ``-row-range``, side by side), then one task each for the
    scales and the zero points of those rows."""
    import dask.array as da
    from dask.array.utils import meta_from_array

    nd = x.ndim
    meta = meta_from_array(x._meta, ndim=nd, dtype=F32)
    src = x
    if x.numblocks[-1] > 1:
        src = x.map_blocks(_chunk_row_range, chunks=x.chunks[:-1] + ((2,) * x.numblocks[-1],), dtype=F32,
                           meta=meta, token=f"{_F}-row-range")
    lead = tuple(f"i{i}" for i in range(nd - 1))
    both = da.blockwise(_chunk_row_parameters, lead + ("p",), src, lead + ("k",), qdt, None, new_axes={"p": 2},
                        concatenate=True, dtype=F32, meta=meta, token=f"{_F}-parameters")
    return _split(both, lead, qdt, x._meta, rows=True)


def _split(both, index, qdt, like, rows=False):
    """(scale, zero point) of the [scale, zero point] pairs along ``both``'s last axis: a task
    each per block (``-scale``, ``-zero-point``), shaped (..., 1) with ``rows`` (per_row: (1,)
    for a 1-D x, whose ``index`` is ()), else 0-d."""
    import dask.array as da
    from dask.array.utils import meta_from_array

    from .dask_tokens import named_meta

    out = index + ("r",) if rows else ()
    extra = {"new_axes": {"r": 1}} if rows else {}
    return tuple(da.blockwise(_parameter, out, both, index + ("p",), which, None, qdt, None, rows, None,
                              concatenate=True, dtype=dt,
                              meta=named_meta(meta_from_array(like, ndim=len(out), dtype=dt)),
                              token=f"{_F}-{which}", **extra)
                 for which, dt in (("scale", F32), ("zero-point", qdt)))


def _parameter(both, which, qdt, rows):
    """The scale (float32) or the zero point (``qdt``) of [scale, zero point] pairs (last axis):
    per row shaped (..., 1), else 0-d."""
    if not rows:
        return both[:1].reshape(()) if which == "scale" else both[1:].reshape(()).astype(qdt)  # (0-d arrays)
    return both[..., :1] if which == "scale" else both[..., 1:].astype(qdt)


def _dask(x, qdt, per_row=False):
    """(scale, zero point) as lazy 0-d dask arrays: a task per chunk finds its range
    (``dynamic_quantize_linear-range``), one the parameters of them all (``-parameters``), and
    one each picks the scale and the zero point (nothing computed now; NumPy or CuPy chunks,
    each in its own kind, dmlq's range kernels for CuPy's). The chunks of x are shared with
    quantize's tasks (blockwise layers over x: an x made by other tasks is computed once)."""
    import dask.array as da
    from dask.array.utils import meta_from_array

    if any(c != c for c in x.shape):
        raise ValueError(f"{_F}: x has unknown chunk sizes (shape {x.shape}); call x.compute_chunk_sizes() first")
    calls.refuse_masked(_F, "x", x._meta)
    cupy = sys.modules.get("cupy")
    if not (cupy is not None and isinstance(x._meta, cupy.ndarray)) and type(x._meta) is not np.ndarray:
        raise TypeError(f"{_F}: x has chunks of type {type(x._meta).__name__}; dmlq takes dask arrays of NumPy or "
                        "CuPy chunks")
    if per_row:
        return _dask_rows(x, qdt)
    nd = x.ndim
    ranges = x.map_blocks(_chunk_range, chunks=tuple((1,) * len(c) for c in x.chunks) + ((2,),), new_axis=nd,
                          dtype=F32, meta=meta_from_array(x._meta, ndim=nd + 1, dtype=F32), token=f"{_F}-range")
    index = tuple(f"i{i}" for i in range(nd)) + ("p",)
    both = da.blockwise(_all_parameters, ("p",), ranges, index, qdt, None, concatenate=True, dtype=F32,
                        meta=meta_from_array(x._meta, ndim=1, dtype=F32), token=f"{_F}-parameters")
    return _split(both, (), qdt, x._meta)  # (0-d arrays, as the eager call's)


def _all_parameters(ranges, qdt):
    """The chunks' ranges (their (..., 2) pairs concatenated) -> [scale, zero point] as a float32
    (2,) array of their kind: the parameters of the pairs side by side as one row, whose range
    is x's (exact: the min and max of float32 values; the zero point, an integer of at most 8
    bits, is exact in float32 too)."""
    return _chunk_row_parameters(ranges.reshape(1, -1), qdt).reshape(2)


def _div32(a, b):
    """a / b of float32 tensors, rounded once to float32 wherever torch runs it: the float64
    quotient rounded to float32 is the correctly rounded float32 quotient (53 >= 2 x 24 + 2
    bits), as eager torch's float32 division is; under torch.compile on CUDA, Inductor's Triton
    code lowers a float32 ``/`` to ``div.full.f32`` (up to 2 ulp off) unless
    TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING=1, and the scale and zero point would then differ
    from the eager call's and ONNX's."""
    return (a.double() / b.double()).float()


def _torch(x, qdt, per_row=False):
    import torch

    x = x.detach()  # the parameters are not differentiable (nor are ONNX's), as quantize's y is not
    if x.numel() == 0:  # (no rows, or rows of nothing: each range [0, 0])
        lo = hi = torch.zeros(tuple(x.shape[:-1]) + (1,) if per_row else (), dtype=torch.float32, device=x.device)
    else:
        finite = torch.where(x.isnan(), torch.zeros((), dtype=x.dtype, device=x.device), x)
        lo = (finite.amin(dim=-1, keepdim=True) if per_row else finite.min()).clamp(max=0).float()
        hi = (finite.amax(dim=-1, keepdim=True) if per_row else finite.max()).clamp(min=0).float()
    info = np.iinfo(qdt)
    qmin = torch.tensor(float(info.min), dtype=torch.float32, device=x.device)
    qmax = torch.tensor(float(info.max), dtype=torch.float32, device=x.device)
    span = torch.where(hi == lo, torch.ones_like(hi), hi - lo)
    scale = _div32(span, qmax - qmin)
    zf = qmin - _div32(lo, scale)
    zp = torch.round(torch.fmin(torch.fmax(zf, qmin), qmax))  # round: half to even; fmax: NaN gives qmin
    return scale, zp.to(torch.int8 if qdt == np.int8 else torch.uint8)


@calls.public
def dynamic_quantize_linear(x: Any, *, dtype: Any = None, per_row: bool = False) -> tuple:
    """Quantize ``x`` with a scale and zero point computed from its own range (ONNX
    DynamicQuantizeLinear; DirectML's DYNAMIC_QUANTIZE_LINEAR), as docs/semantics.md defines:
    ``hi = max(0, max(x))``, ``lo = min(0, min(x))`` (NaN elements skipped),
    ``scale = (hi - lo) / (qmax - qmin)`` (1 / (qmax - qmin) where hi == lo),
    ``zero_point = rint(clamp(qmin - lo / scale, qmin, qmax))``, then
    ``y = quantize_linear(x, scale, zero_point)``; every step in float32. With
    ``per_row=True``, one range (so one scale and zero point) per row along x's last axis:
    the per-token parameters of an activation, as :func:`matmul_integer_to_float` takes them.

    Parameters
    ----------
    x : float32, float16 or bfloat16 array (NumPy, CuPy or another CUDA array, torch, dask)
        Any shape, any memory layout.
    dtype : np.uint8 (default: ONNX's only type) or np.int8 (DirectML's, range [-128, 127])
    per_row : bool, default False
        False: one range for all of x (ONNX's and DirectML's operator). True: one range per
        row, that is per index of every axis but the last (x needs at least one dimension).

    Returns
    -------
    (y, y_scale, y_zero_point)
        ``y`` of x's shape and ``dtype``; ``y_scale`` a 0-d float32 array and
        ``y_zero_point`` a 0-d array of ``dtype`` (with ``per_row``, both shaped
        ``x.shape[:-1] + (1,)``), all of x's array library and device (lazy for a dask x:
        nothing is computed).

    Raises
    ------
    TypeError
        x not float32, float16 or bfloat16 (or not an array, a list or a number; a masked or byte-swapped
        array), ``dtype`` not uint8 or int8, or ``per_row`` not a bool; each named with the fix.
    ValueError
        A CuPy x on another device than the current one, a number of a list x (or x itself)
        beyond float32's range, a dask x of unknown chunk sizes, ``per_row`` with a 0-d x.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> y, s, z = dmlq.dynamic_quantize_linear(np.array([0.0, 2.0, -3.0, 1.02], np.float32))
    >>> y, s, z                                   # range [-3, 2]: scale 5 / 255, 0 -> 153
    (array([153, 255,   0, 205], dtype=uint8), array(0.01960784, dtype=float32), array(153, dtype=uint8))
    >>> x = np.array([[0.0, 2.0, 1.0], [-3.0, 2.0, 1.02]], np.float32)
    >>> y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
    >>> y, z.ravel()                              # ranges [0, 2] and [-3, 2]; s and z shaped (2, 1)
    (array([[  0, 255, 127],
           [  0, 255, 205]], dtype=uint8), array([  0, 153], dtype=uint8))
    """
    qdt = _out_dtype(dtype)
    if not isinstance(per_row, (bool, np.bool_)):
        raise TypeError(f"{_F}: per_row must be True or False (got {type(per_row).__name__} {per_row!r})")
    per_row = bool(per_row)
    x = _checked_x(x)
    if per_row and len(x.shape) == 0:
        raise ValueError(f"{_F}: per_row takes the rows along x's last axis, and this x is 0-d (a single value); "
                         "pass per_row=False or x with at least one dimension")
    torch = sys.modules.get("torch")
    tensor = torch is not None and isinstance(x, torch.Tensor)
    traced = torch is not None and tensor and torch.compiler.is_compiling()  # (Dynamo cannot read a ContextVar)
    if not traced and calls.EXPLAINING.get() is True:  # dmlq.kernel_plan
        return _plan(x, qdt, tensor, per_row)
    if tensor:
        scale, zp = _torch(x, qdt, per_row)
    elif dispatch.foreign(x):  # a dask array: its CuPy metas named without a copy to the host
        from .dask_tokens import naming

        with naming(x):
            scale, zp = _dask(x, qdt, per_row)
    elif dispatch.is_gpu(x):
        from .gpu import dynquant

        x = dispatch.to_gpu_array(x, _F, "x")
        dispatch.refuse_unaligned(_F, ("x",), (x,))
        scale, zp = (dynquant.row_parameters if per_row else dynquant.range_parameters)(x, qdt)
    else:
        scale, zp = _host(x, qdt, per_row)
    return quantize_linear(x, scale, zp), scale, zp


def _plan(x, qdt, tensor, per_row):
    """dmlq.kernel_plan's answer: the range and parameters' launches, then quantize's with the
    device scale and zero point they write (for a NumPy x, what a nominal H100 would run); for a
    torch tensor quantize's alone (torch's reductions find the range)."""
    from .gpu import device, dynquant
    from .gpu.plan import Plan

    shape = tuple(x.shape[:-1]) + (1,) if per_row else ()
    if tensor:
        import torch

        plan = quantize_linear(x, torch.empty(shape, dtype=torch.float32, device=x.device),
                               torch.empty(shape, dtype=torch.int8 if qdt == np.int8 else torch.uint8, device=x.device))
        return Plan(_F, plan.variant, plan.launches, ("the range and parameters by torch's reductions",)
                    + plan.notes)
    if dispatch.foreign(x):
        raise TypeError(f"kernel_plan: {_F} on dask arrays runs per chunk (its range, then quantize), each chunk "
                        "its own plan; pass a NumPy or CuPy array shaped like one chunk (for example "
                        "np.empty(x.chunksize, x.dtype)) for that chunk's plan")
    if dispatch.is_gpu(x):
        x = dispatch.to_gpu_array(x, _F, "x")
        dispatch.refuse_unaligned(_F, ("x",), (x,))
        xp, where = device.xp(), contextlib.nullcontext()
    elif np.dtype(x.dtype) != F32:
        raise UnsupportedError(f"kernel_plan: {_F} of a {np.dtype(x.dtype)} x shows its plan for GPU operands only "
                               f"(its quantize step, a {np.dtype(x.dtype)} x with a float32 scale, is planned on the "
                               "GPU); pass a CuPy array")
    else:
        xp, where = np, device.using(device.NominalDevice())
    with where:
        ranged = dynquant.plan_rows(x, qdt) if per_row else dynquant.plan_range(x, qdt)
    plan = quantize_linear(x, xp.empty(shape, F32), xp.empty(shape, qdt))  # (EXPLAINING: its plan, nothing run)
    return Plan(_F, f"{ranged.variant}, then {plan.variant}", ranged.launches + plan.launches,
                ranged.notes + plan.notes)
