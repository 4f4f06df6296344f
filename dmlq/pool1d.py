"""Average pooling over one spatial axis, ``(N, C, L)``, as pooling over two.

ONNX's AveragePool and QLinearAveragePool take 1-D windows; DirectML's pooling
operator and dmlq's kernels take 4-D and 5-D tensors. An ``(N, C, L)`` input is the
``(N, C, 1, L)`` view (nothing copied: NumPy, CuPy, torch and dask alike) with a
window of height 1, stride 1 and no padding along the added axis, which changes no
window's taps or count; the result loses that axis again (``out=`` is viewed the
same way). Each parameter takes one int or a sequence of one.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import dispatch
from .errors import DescError

# (name, the added axis's value)
_PARAMS = (("window_size", 1), ("strides", 1), ("start_padding", 0), ("end_padding", 0), ("dilations", 1))


def _one(f, name, value, added):
    """A 1-D parameter as the 2-D call takes it: (added, value)."""
    if value is None:
        if name == "window_size":
            raise TypeError(f"{f}: window_size is required (got None); pass an int (or 1 int) for a 3-D x")
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (added, value)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{f}: {name} must be an int or a sequence of 1 int for a 3-D x (got the string {value!r})")
    try:
        items = tuple(value)
    except TypeError:
        return value
    if len(items) != 1:
        raise DescError(f"{f}: {name} must have 1 integer for a 3-D x (N, C, L) (got {value!r})")
    return (added,) + items


def _in_range(f, name, lifted):
    """The 1-D value's own range check (the 2-D call would name the added axis's value too)."""
    if lifted is None or not isinstance(lifted, tuple) or not isinstance(lifted[-1], numbers.Integral):
        return lifted
    least = 0 if name.endswith("padding") else 1
    if not isinstance(lifted[-1], bool) and lifted[-1] < least:
        raise DescError(f"{f}: every {name} value must be >= {least} (got ({lifted[-1]},))")
    return lifted


def _channel_param(f, name, v, channels):
    """A per-channel scale or zero point of the 3-D call ((C,), (C, 1) or (1, C, 1)) as (C,), the
    form the 4-D call takes; per tensor (one element) as it is; any other shape refused in the
    caller's terms."""
    shape = tuple(getattr(v, "shape", ()))
    listed = isinstance(v, (list, tuple))
    if listed:  # nested lists as np.asarray shapes them ((C, 1) too, as an array of that shape is taken)
        if dispatch.lazy_inside(v):  # (np.shape would compute them: the 4-D call refuses them by name)
            return v
        try:
            shape = tuple(np.shape(v))
        except Exception:  # noqa: BLE001 - ragged, or GPU arrays inside: the 4-D call names it
            return v
    if math.prod(shape) <= 1 and v is not None or not shape:
        return v
    if len(shape) <= 3 and ((1,) * (3 - len(shape)) + shape == (1, channels, 1) or shape == (channels,)):
        if listed:  # the numbers as given (an object array keeps them): the 4-D call types them as a list's
            return np.asarray(v, dtype=object).reshape(channels).tolist()
        return v.reshape(channels)
    raise DescError(f"{f}: {name} must have 1 element (per tensor) or C = {channels} (per channel: (C,), (C, 1) "
                    f"or (1, C, 1)) for a 3-D x (N, C, L) (got shape {shape})")


def lifted(f, values, kwargs, out, result_meta=None):
    """(values, kwargs, out) of the 4-D call for a 3-D ``x``; ``result_meta(values, kwargs)``, the
    4-D call's (shape, dtype), checks a given ``out`` in the caller's shapes."""
    kwargs = dict(kwargs)
    if any(n != n for n in values[0].shape):  # a dask x of unknown chunk sizes: named in its own shape
        raise ValueError(f"{f}: x has unknown chunk sizes (shape {tuple(values[0].shape)}); call "
                         "x.compute_chunk_sizes() first")
    for name, added in _PARAMS:
        kwargs[name] = _in_range(f, name, _one(f, name, kwargs.get(name), added))
    x = values[0]
    names = ("x_scale", "x_zero_point", "out_scale", "out_zero_point")
    values = (x[:, :, None, :],) + tuple(_channel_param(f, n, v, x.shape[1]) for n, v in zip(names, values[1:]))
    libraries = {type(v).__module__.partition(".")[0] for v in (x, out)}
    if out is None or getattr(out, "ndim", None) is None or "dask" in libraries:
        return values, kwargs, out  # (not an array, or a dask call: the 2-D call names it)
    if "torch" in libraries and out.ndim != 3:  # (torch's adapter checks the rest, in torch's words)
        raise ValueError(f"{f}: out must be 3-D (N, C, L') as x is (got shape {tuple(out.shape)})")
    if result_meta is not None and "torch" not in libraries:
        shape, dtype = lowered(result_meta(values, kwargs))
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"{f}: out must have shape {tuple(shape)} (got {tuple(out.shape)})")
        if getattr(out, "dtype", None) != dtype:
            raise TypeError(f"{f}: out must have dtype {dtype} (got {out.dtype}); allocate it with "
                            f"np.empty({tuple(shape)}, np.{dtype})")
    return values, kwargs, out[:, :, None, :]


def lowered(result):
    """The 4-D call's result without the added axis (an output_meta (shape, dtype) pair's shape
    too; a kernel plan as it is)."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], tuple):
        return result[0][:2] + result[0][3:], result[1]
    if getattr(result, "ndim", 0) == 4 and type(result).__module__.partition(".")[0] == "dask":
        # a layer named for the call (dask's own indexing names it "getitem"), fused into the pooling
        # tasks by dask's optimization as the indexing was
        return result.map_blocks(_drop_height, drop_axis=2, dtype=result.dtype,
                                 meta=result._meta.reshape(result._meta.shape[:2] + result._meta.shape[3:]),
                                 token="quantized_avg_pool-1d")
    return result[:, :, 0, :] if getattr(result, "ndim", 0) == 4 else result


def _drop_height(block):
    """A block of the 4-D pooling's result without its added axis (one element long)."""
    return block[:, :, 0, :]
