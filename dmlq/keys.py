"""The canonical key of a call's arguments: the one rule every cache keys by.

Two argument values get the same key only when every check and every plan made
from them is the same, so a cache keyed this way never hands a call a plan that
a fresh call would have refused:

- arrays (NumPy, CuPy, anything with ``shape``): their type, dtype, shape and
  strides -- never their values;
- scalars: their type and exact value (``True``, ``1``, ``1.0`` and
  ``np.int64(1)`` all differ though they compare equal; a float keeps its sign,
  so ``-0.0`` and ``0.0`` differ; every Python NaN is one key);
- ``None``, strings, dtypes and types: themselves, with their type;
- lists and tuples (keyword parameters such as pooling's ``window_size``):
  their type and each item's key.

:func:`key` is for operands (arrays by geometry); :func:`param_key` for keyword
parameters, whose values a plan reads: an array there has no key (a
``TypeError``: the call is planned afresh, never cached); :func:`value_key` for
a host scalar array whose value a GPU runner bakes into its kernel arguments.

Users: the public functions' plan cache (dmlq.calls.signature), the GPU runners
kept per plan (dmlq.gpu.ops.run: the signature's key plus the device and the
address alignments), and the GPU backend functions' memos for direct calls
(dmlq.gpu.elementwise, matmul, avgpool: the same keys plus alignment), the
kernel loader's modules and functions per device (dmlq.gpu.loader) and the CuPy
backend's shared-memory opt-ins and occupancy answers (dmlq.gpu.device), each
the :func:`param_key` of its device, source, kernel name and block facts.
"""
from __future__ import annotations

import math
import struct as _struct

import numpy as np

_copysign = math.copysign
_NAN = (float, "nan")
# NumPy integer scalars are keyed as Python ints (cheaper than their bytes).
_INT_SCALARS = frozenset(np.dtype(c).type for c in "bBhHiIlLqQ")


def _scalar(v, t):
    """The key of a scalar of type ``t``, or None when ``v`` is not one."""
    if t is float:
        return (float, v, _copysign(1.0, v)) if v == v else (_NAN, _struct.pack("<d", v))  # a NaN's sign, payload
    if t is int or t is bool:
        return (t, v)
    if t in _INT_SCALARS:
        return (t, int(v))
    if isinstance(v, np.generic):
        return (t, v.tobytes())
    return None


def key(v):
    """The key of one operand: what a plan may depend on, never an array's values."""
    t = type(v)
    if t is np.ndarray:
        return (v.dtype, v.shape, v.strides)
    if v is None:
        return None
    k = _scalar(v, t)
    if k is not None:
        return k
    shape = getattr(v, "shape", None)
    if shape is not None:
        return (t, v.dtype, shape, v.strides)
    return (t, v)


def param_key(p):
    """The key of a keyword parameter (values and types of every item); raises
    TypeError for a value that has none (an array), so the call is not cached."""
    t = type(p)
    if t is tuple or t is list:
        return (t, *map(param_key, p))
    if p is None:
        return None
    k = _scalar(p, t)
    if k is not None:
        return k
    if isinstance(p, (str, np.dtype, type)):
        return (t, p)
    raise TypeError(f"no cache key for a {t.__name__} parameter")


def value_key(a):
    """The key of a host array whose values a plan reads (a size-1 scale or zero
    point passed by value to a kernel): its type, dtype, shape and bytes."""
    return (type(a), a.dtype, a.shape, a.tobytes())
