"""Packed results of dask arrays of CuPy chunks: a dmlq.Packed whose bytes are lazy.

On the GPU, quantize_linear to a type CuPy has no dtype for (int4, uint4, int2,
uint2, float4_e2m1fn and the float8 types) returns a :class:`dmlq.Packed`: ONNX's
raw bytes as a 1-D uint8 array, the logical shape and the type's name. With a dask
array of CuPy chunks it returns the same thing, lazily:
``Packed(data, shape, dtype)`` whose ``data`` is a 1-D dask array of uint8 CuPy
chunks, byte for byte the one-array result's ``data`` for any chunking of x
(``dmlq.Packed(p.data.compute(), p.shape, p.dtype)`` is the one-array result).

How: the bytes hold x's elements in C order, so a run of whole bytes is a run of
whole rows along axis 0. x is rechunked lazily so that only axis 0 is cut and each
chunk but the last holds a number of elements that fills whole bytes (two 4-bit
or four 2-bit elements a byte) and, with blocked scales along axis 0, whole
blocks; each task quantizes its chunk on the GPU and returns its Packed's bytes.

dequantize_linear takes such a lazy Packed (bytes of any chunking) back: the bytes
are rechunked to whole rows the same way and each task dequantizes a Packed of its
rows on the GPU; the result is a lazy dask array of CuPy chunks.
"""
from __future__ import annotations

import math

import numpy as np

from . import dask_chunks as dd
from .packing import Packed, packed_nbytes
from .qtypes import qtype


def quantize(values, kwargs, shape, q, cupy):
    """dmlq.quantize_linear(*values, **kwargs) with dask operands of CuPy chunks and a
    packed output type ``q`` (a QType): a Packed of lazy bytes."""
    x, scale, zp = values
    logical = tuple(shape)
    if 0 in shape:  # no bytes: one empty chunk of CuPy bytes (dask's own would be NumPy)
        return Packed(dd.empty(cupy.empty((0,), np.uint8), (0,), np.uint8, ((0,),)), logical, q.name)
    if not shape:  # one element: quantized as a 1-element row, packed the same
        shape, x = (1,), dd._as_dask(x).reshape((1,))
    per_byte = 8 // math.gcd(8, q.bits)
    rest = math.prod(shape[1:])
    step = per_byte // math.gcd(per_byte, rest) if rest else 1
    block = kwargs.get("block_size")
    if block is not None and dd.blocked_axis(kwargs, scale, shape) == 0:
        step = math.lcm(step, int(block))
    chunkwise = kwargs.get("axis") is None and block is None  # else the scales follow x's chunks
    values, rows = [], None
    for v in (x, scale, zp):  # cut along axis 0 only (x, and scales and zero points as x)
        if getattr(v, "ndim", 0) > 0 and not isinstance(v, (list, tuple)) and (v is x or chunkwise):
            if v.ndim == len(shape) and v.shape[0] == shape[0] != 1:  # (a CuPy one cut now: dd.constant)
                rows = rows or dd._block_chunks(getattr(v, "chunks", ((v.shape[0],),))[0], step)
                v = dd.rechunk(v, (rows,) + tuple((n,) for n in v.shape[1:]))
            else:
                v = dd.rechunk(v, tuple((n,) for n in v.shape))
        values.append(v)
    rows = rows or (shape[0],)
    nbytes = tuple((r * rest * q.bits + 7) // 8 for r in rows)
    packed = (_bytes, dict(adjust_chunks={0: nbytes}, dtype=np.uint8, meta=cupy.empty((0,), np.uint8)))
    if kwargs.get("axis") is not None or block is not None:
        data = dd._per_axis_or_blocked("quantize_linear", values, kwargs, shape, None, None, packed)
    else:
        data = dd._elementwise("quantize_linear", values, kwargs, shape, None, None, packed)
    return Packed(data, logical, q.name)


def _bytes(*blocks, fn, kwargs):
    """One chunk quantized on the GPU: its Packed's bytes."""
    return fn(*blocks, **kwargs).data


def dequantize(q, scale, zero_point, kwargs, out):
    """dmlq.dequantize_linear of a Packed whose data is a dask array of uint8 CuPy chunks
    (as quantize above gives it): a lazy dask array of CuPy chunks. The bytes are
    rechunked lazily to whole rows along axis 0 (whole bytes, whole blocks); each task
    hands its bytes to the GPU as a Packed of its rows."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
    from dask.array.utils import meta_from_array

    f = "dequantize_linear"
    chunks = dd._check(f, (q.data, scale, zero_point), out)
    if chunks != "cupy":
        raise TypeError(f"{f}: q is a dmlq.Packed whose data is a dask array of {chunks} chunks; a lazy Packed "
                        "takes CuPy chunks (with NumPy chunks pass the ml_dtypes array itself as a dask array)")
    cupy, qt, shape = dd._cupy(), qtype(q.dtype), tuple(int(s) for s in q.shape)
    nbytes = packed_nbytes(math.prod(shape), qt)
    stand = Packed(cupy.broadcast_to(cupy.zeros((), np.uint8), (q.data.shape[0],)), shape, q.dtype)
    out_shape, dtype = dd._meta_call(f, (stand, scale, zero_point), kwargs, "cupy")  # every check, now
    meta = meta_from_array(q.data._meta, ndim=len(out_shape), dtype=dtype)
    if 0 in shape:
        return dd.empty(q.data, out_shape, dtype, tuple((n,) for n in out_shape))
    rows_shape = shape or (1,)
    per_byte, rest = 8 // math.gcd(8, qt.bits), math.prod(rows_shape[1:])
    step = per_byte // math.gcd(per_byte, rest)
    if kwargs.get("block_size") is not None and dd.blocked_axis(kwargs, scale, rows_shape) == 0:
        step = math.lcm(step, int(kwargs["block_size"]))
    cuts = sorted({min(rows_shape[0], int(b) * per_byte // rest) for b in np.cumsum(q.data.chunks[0])[:-1]})
    edges = [0] + [c for c in cuts if 0 < c < rows_shape[0]] + [rows_shape[0]]
    rows = dd._block_chunks(tuple(b - a for a, b in zip(edges[:-1], edges[1:])), step)
    whole = tuple(r * rest * qt.bits // 8 for r in rows[:-1])  # whole bytes: the last chunk takes the rest
    data = dd.rechunk(q.data, (whole + (nbytes - sum(whole),),))
    name = f"{f}-packed-rows-" + tokenize(data, rows_shape, q.dtype)
    tail = (0,) * (len(rows_shape) - 1)
    layer = {(name, i) + tail: (Packed, (data.name, i), (r,) + rows_shape[1:], q.dtype) for i, r in enumerate(rows)}
    carrier = da.Array(HighLevelGraph.from_collections(name, layer, dependencies=[data]), name,
                       chunks=(rows,) + tuple((n,) for n in rows_shape[1:]), meta=meta_from_array(meta, dtype=np.uint8))
    values = (carrier, scale, zero_point)
    if kwargs.get("axis") is not None or kwargs.get("block_size") is not None:
        result = dd._per_axis_or_blocked(f, values, kwargs, rows_shape, dtype, meta)
    else:  # the operands broadcast: a scale or zero point of more dimensions widens the result (q's rows
        # cut along its last axes); it was given q's shape, and dask refused the wider operand's chunks
        result = dd._elementwise(f, values, kwargs, np.broadcast_shapes(rows_shape, out_shape), dtype, meta)
    return result if result.shape == tuple(out_shape) else result.reshape(tuple(out_shape))
