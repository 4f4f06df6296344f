"""dynamic_quantize_linear: ONNX DynamicQuantizeLinear (opset 11) and DirectML's
DYNAMIC_QUANTIZE_LINEAR (feature level 4.0). The scale and zero point come from x's range
(docs/semantics.md, "dynamic_quantize_linear"); the quantized values are quantize_linear's
with them. Each array library keeps its own kind: NumPy computes the range on the host,
CuPy (and other CUDA arrays) with dmlq's kernels (cuda/dynamic_quant.cu, no host read),
torch tensors with torch's own reductions (so the call traces under torch.compile; the
quantize step is dmlq's op), dask arrays lazily (a reduction in the graph, nothing computed).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import dispatch
from .api import quantize_linear
from .dtypes import plain_dtype
from .gpu.capture import guarded

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
    """x as an array (a list or number as NumPy makes it, float32), float32 or float16."""
    if isinstance(x, (list, tuple)):
        if dispatch.lazy_inside(x):
            raise TypeError(f"{_F}: x is a {type(x).__name__} holding dask arrays, which dmlq does not compute "
                            "for you; pass one dask array (dask.array.stack(x) keeps it lazy)")
        x = np.asarray(x, dtype=np.float32)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        x = np.asarray(x, dtype=np.float32)
    dt = getattr(x, "dtype", None)
    if dt is None:
        raise TypeError(f"{_F}: x must be a float32 or float16 array (got {type(x).__name__})")
    name = str(dt).rpartition(".")[2]  # torch.float32 -> float32
    if name not in ("float32", "float16"):
        raise TypeError(f"{_F}: x must have dtype float32 or float16 (got {name}); pass x.astype(np.float32)"
                        + (" (x.to(torch.float32))" if type(x).__module__.startswith("torch") else ""))
    return x


def _parameters(lo, hi, qdt, where):
    """(scale, zero point) from float32 lo <= 0 <= hi, NumPy's ufuncs (NumPy 0-d arrays, or
    dask ones through its ufunc dispatch): the contract's float32 steps."""
    info = np.iinfo(qdt)
    qmin, qmax = np.float32(info.min), np.float32(info.max)
    with np.errstate(all="ignore"):
        span = where(hi == lo, np.float32(1), hi - lo)
        scale = span / (qmax - qmin)
        zf = qmin - lo / scale
        zp = np.rint(np.fmin(np.fmax(zf, qmin), qmax)).astype(qdt)  # fmax: a NaN zf gives qmin
    return scale, zp


def _host(x, qdt):
    x = np.asarray(x)
    lo = np.asarray(np.fmin.reduce(x, axis=None, initial=0), F32)  # fmin / fmax skip NaN elements
    hi = np.asarray(np.fmax.reduce(x, axis=None, initial=0), F32)
    scale, zp = _parameters(lo, hi, qdt, np.where)
    return np.asarray(scale, F32), np.asarray(zp, qdt)


def _dask(x, qdt):
    import dask.array as da

    if x.size == 0:  # (a known size of 0: the range is [0, 0])
        lo = hi = da.zeros((), F32)
    else:
        finite = da.where(da.isnan(x), 0, x)  # a NaN element counts as 0, which the range holds anyway
        lo = da.minimum(finite.min(), 0).astype(F32)
        hi = da.maximum(finite.max(), 0).astype(F32)
    scale, zp = _parameters(lo, hi, qdt, da.where)
    return scale.astype(F32), zp


def _torch(x, qdt):
    import torch

    if x.numel() == 0:
        lo = hi = torch.zeros((), dtype=torch.float32, device=x.device)
    else:
        finite = torch.where(x.isnan(), torch.zeros((), dtype=x.dtype, device=x.device), x)
        lo = finite.min().clamp(max=0).float()
        hi = finite.max().clamp(min=0).float()
    info = np.iinfo(qdt)
    qmin = torch.tensor(float(info.min), dtype=torch.float32, device=x.device)
    qmax = torch.tensor(float(info.max), dtype=torch.float32, device=x.device)
    span = torch.where(hi == lo, torch.ones_like(hi), hi - lo)
    scale = span / (qmax - qmin)
    zf = qmin - lo / scale
    zp = torch.round(torch.fmin(torch.fmax(zf, qmin), qmax))  # round: half to even; fmax: NaN gives qmin
    return scale, zp.to(torch.int8 if qdt == np.int8 else torch.uint8)


@guarded
def dynamic_quantize_linear(x: Any, *, dtype: Any = None) -> tuple:
    """Quantize ``x`` with a scale and zero point computed from its own range (ONNX
    DynamicQuantizeLinear; DirectML's DYNAMIC_QUANTIZE_LINEAR), as docs/semantics.md defines:
    ``hi = max(0, max(x))``, ``lo = min(0, min(x))`` (NaN elements skipped),
    ``scale = (hi - lo) / (qmax - qmin)`` (1 / (qmax - qmin) where hi == lo),
    ``zero_point = rint(clamp(qmin - lo / scale, qmin, qmax))``, then
    ``y = quantize_linear(x, scale, zero_point)``; every step in float32.

    Parameters
    ----------
    x : float32 or float16 array (NumPy, CuPy or another CUDA array, torch, dask)
        Any shape, any memory layout.
    dtype : np.uint8 (default: ONNX's only type) or np.int8 (DirectML's, range [-128, 127])

    Returns
    -------
    (y, y_scale, y_zero_point)
        ``y`` of x's shape and ``dtype``; ``y_scale`` a 0-d float32 array and
        ``y_zero_point`` a 0-d array of ``dtype``, all of x's array library and device
        (lazy for a dask x: nothing is computed).

    Raises
    ------
    TypeError
        x not float32 or float16 (or not an array, a list or a number), or ``dtype`` not
        uint8 or int8; each named with the fix.
    ValueError
        A CuPy x on another device than the current one.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> y, s, z = dmlq.dynamic_quantize_linear(np.array([0.0, 2.0, -3.0, 1.02], np.float32))
    >>> y, s, z                                   # range [-3, 2]: scale 5 / 255, 0 -> 153
    (array([153, 255,   0, 205], dtype=uint8), array(0.01960784, dtype=float32), array(153, dtype=uint8))
    """
    qdt = _out_dtype(dtype)
    x = _checked_x(x)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        scale, zp = _torch(x, qdt)
    elif dispatch.foreign(x):  # a dask array
        scale, zp = _dask(x, qdt)
    elif dispatch.is_gpu(x):
        from .gpu import dynquant

        x = dispatch.to_gpu_array(x, _F, "x")
        dispatch.refuse_unaligned(_F, ("x",), (x,))
        scale, zp = dynquant.range_parameters(x, qdt)
    else:
        scale, zp = _host(x, qdt)
    return quantize_linear(x, scale, zp), scale, zp
