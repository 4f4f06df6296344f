"""numpy.matmul's vector operands for the matmul family.

ONNX's MatMulInteger, MatMulIntegerToFloat and QLinearMatMul behave like
``numpy.matmul``: a 1-D ``a`` of K elements is a ``(1, K)`` matrix and a 1-D ``b``
a ``(K, 1)`` one, and the dimension added for it leaves the result (a vector times a
matrix is a vector; two vectors give a 0-d array). The kernels see the matrices:
:func:`promote` makes them (views, nothing copied: NumPy, CuPy, torch and dask
arrays alike, and a ``dmlq.Packed`` 1-D ``b``, whose bytes are the same for ``(K,)``
and ``(K, 1)``), and :func:`finish` takes the added dimension out of the result, of
``out=`` and of what ``dmlq.calls.output_meta`` reports. Every parameter keeps its
own shape: a per-column ``b`` parameter of a vector ``b`` has one column.
"""
from __future__ import annotations

import re
import sys
from typing import Any, NamedTuple

import numpy as np

from .dispatch import lazy_inside
from .packing import Packed


class Vectors(NamedTuple):
    """Which operands were vectors: the result loses axis -2 (``a``) and/or -1 (``b``)."""

    a: bool
    b: bool


def _ndim(v) -> int | None:
    if isinstance(v, Packed):
        return len(v.shape)
    nd = getattr(v, "ndim", None)
    return nd if isinstance(nd, int) else None


def _lazy(v) -> bool:
    array = sys.modules.get("dask.array")
    return array is not None and isinstance(v, array.Array)


def promote(a, b, out, f="") -> tuple[Any, Any, Any, Vectors]:
    """(a, b, out, vectors): a 1-D ``a`` as (1, K), a 1-D ``b`` as (K, 1), and ``out``
    (shaped as the caller's result) as a view of the matrices' result."""
    va, vb = _ndim(a) == 1, _ndim(b) == 1
    if not (va or vb):
        return a, b, out, Vectors(False, False)
    if va:
        a = a[None, :]
    if vb:
        b = Packed(b.data, (int(b.shape[0]), 1), b.dtype) if isinstance(b, Packed) else b[:, None]
    if out is not None and _ndim(out) is not None and not isinstance(out, np.generic) and not _lazy(out):
        _check_out_shape(f, a, b, out, va, vb)  # (a NumPy scalar or a dask array as out: the call refuses it)
        if not (va and not vb and _ndim(out) == 0):  # (a 0-d out where K does not fit: the call names the shapes)
            out = out[..., None, None] if va and vb else out[..., None, :] if va else out[..., None]
    return a, b, out, Vectors(va, vb)


def _result_shape(a, b, va, vb):
    """The caller's result shape for the matrices ``a`` and ``b`` (None where their shapes do
    not fit: the call names them)."""
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or any(isinstance(d, float) for d in sa + sb):
        return None  # (a float: NaN, a dask array's unknown size, which dmlq.dask names)
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        return None
    return batch + (() if va else (sa[-2],)) + (() if vb else (sb[-1],))


def _check_out_shape(f, a, b, out, va, vb):
    """A ValueError in the caller's terms for an ``out`` whose shape is not the vector result's
    (the matrices' check would name the shapes with the added dimensions)."""
    want = _result_shape(a, b, va, vb)
    if want is not None and tuple(out.shape) != want:
        raise ValueError(f"{f}: out must have shape {want} (got {tuple(out.shape)}): a 1-D "
                         f"{'a and b give' if va and vb else 'a gives' if va else 'b gives'} numpy.matmul's "
                         "result without that dimension")


def _bias_shape(bias):
    """A bias's shape: an array's, or a list's or tuple's as np.asarray makes it (None where
    np.asarray makes none, or would compute the dask arrays it holds: the call names those)."""
    if isinstance(bias, (list, tuple)):
        if lazy_inside(bias):
            return None
        try:
            return np.shape(bias)
        except Exception:  # (ragged nesting ...: the call names it)
            return None
    shape = getattr(bias, "shape", None)
    return None if shape is None else tuple(shape)


def _nest(v, depth, wrap):
    """``wrap`` applied to the items ``depth`` levels down a nested list or tuple."""
    return wrap(v) if depth == 0 else [_nest(e, depth - 1, wrap) for e in v]


def bias_of(f, bias, a, b, vectors: Vectors):
    """A bias as the matrices' result takes it: a 1-D operand's result has no row (``a``) or
    column (``b``) axis, so a bias that broadcasts against the caller's result (checked here, in
    its shapes) gets that axis back; a list or tuple too, as np.asarray will read it."""
    shape = None if not (vectors.a or vectors.b) else _bias_shape(bias)
    if not shape:
        return bias
    want = _result_shape(a, b, vectors.a, vectors.b)
    if want is not None and not any(isinstance(d, float) for d in shape):  # (NaN: named by dmlq.dask)
        try:
            grows = tuple(np.broadcast_shapes(shape, want)) != want
        except ValueError:
            grows = True
        if grows:
            which = "a and b give" if vectors.a and vectors.b else "a gives" if vectors.a else "b gives"
            axes = ("row and column axes" if vectors.a and vectors.b else "row axis" if vectors.a
                    else "column axis")
            raise ValueError(f"{f}: bias of shape {shape} must broadcast to the result's {want} without "
                             f"growing it (a 1-D {which} numpy.matmul's result without the {axes})")
    if isinstance(bias, (list, tuple)):
        if vectors.b:
            return _nest(bias, len(shape), (lambda x: [[x]]) if vectors.a else (lambda x: [x]))
        return _nest(bias, len(shape) - 1, lambda row: [row])
    return bias[..., None, None] if vectors.a and vectors.b else bias[..., None, :] if vectors.a else bias[..., None]


def call(run, vectors: Vectors, out=None):
    """:func:`finish` of ``run()``, whose out= errors name the matrices' shape: a wrong dtype's
    hint (np.empty(shape, ...)) gets the caller's shape (its own was checked by promote)."""
    try:
        result = run()
    except TypeError as e:
        if (vectors.a or vectors.b) and out is not None and "np.empty((" in str(e):
            raise type(e)(re.sub(r"np\.empty\(\([^()]*\)", f"np.empty({tuple(out.shape)}", str(e))) from None
        raise
    return finish(result, vectors, out)


def finish(result, vectors: Vectors, out=None):
    """The matrices' result without the added dimensions (``out``, the caller's array, is
    returned as it is); an ``output_meta`` (shape, dtype) pair gets its shape adjusted, a
    kernel plan is returned unchanged."""
    if not (vectors.a or vectors.b):
        return result
    if out is not None:
        return out
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], tuple):  # output_meta
        shape = list(result[0])
        if vectors.b:
            del shape[-1]
        if vectors.a:
            del shape[-1 if vectors.b else -2]
        return tuple(shape), result[1]
    if not hasattr(result, "shape"):  # dmlq.kernel_plan's Plan: the matrices' launch
        return result
    if vectors.a:
        result = result[..., 0, :]
    if vectors.b:
        result = result[..., 0]
    return result
