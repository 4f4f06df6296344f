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

from typing import Any, NamedTuple

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


def promote(a, b, out) -> tuple[Any, Any, Any, Vectors]:
    """(a, b, out, vectors): a 1-D ``a`` as (1, K), a 1-D ``b`` as (K, 1), and ``out``
    (shaped as the caller's result) as a view of the matrices' result."""
    va, vb = _ndim(a) == 1, _ndim(b) == 1
    if not (va or vb):
        return a, b, out, Vectors(False, False)
    if va:
        a = a[None, :]
    if vb:
        b = Packed(b.data, (int(b.shape[0]), 1), b.dtype) if isinstance(b, Packed) else b[:, None]
    if out is not None and _ndim(out) is not None:
        out = out[..., None, None] if va and vb else out[..., None, :] if va else out[..., None]
    return a, b, out, Vectors(va, vb)


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
