"""dask.array inputs, the chunk-wise part: the checks on a call's operands (chunk
types, unknown chunk sizes, every error of the one-array call raised on stand-ins
while the graph is built) and the chunk-wise calls of quantize, dequantize and add
(every array operand cut where the output's chunks fall; ONNX's per-axis and
blocked scales cut to x's chunks). Used by dmlq.dask (every operator) and
dmlq.packed_dask (a dmlq.Packed of lazy bytes); see dmlq.dask for the whole story.
"""
from __future__ import annotations

import numbers
import sys

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks

from . import adapters
from .calls import output_meta
from .packing import Packed, TransposedPacked, remade, with_bytes

MATMULS = ("quantized_matmul", "matmul_integer", "matmul_integer_to_float")
# The operands of the matmul family and pooling that may be dask arrays (their scales and zero points
# are NumPy/CuPy arrays or numbers: dmlq.dask refuses dask ones by name).
LAZY_OPERANDS = ("x", "a", "b", "bias")


def _cupy():
    """The cupy module when it is loaded (dmlq never imports it for a NumPy call)."""
    return sys.modules.get("cupy")


def _module_of(a):
    """'numpy' or 'cupy' (or another module name) for an array or a dask array's chunks."""
    a = getattr(a, "_meta", a)
    cupy = _cupy()
    if cupy is not None and isinstance(a, cupy.ndarray):
        return "cupy"
    return type(a).__module__.partition(".")[0]


def _stand_in(shape, dtype):
    """A NumPy array of ``shape`` and ``dtype`` holding one element (zero strides)."""
    # (np.ndarray with a buffer, not as_strided: that goes through __array_interface__, which cannot
    # read float8_e5m2's type string '<f1')
    return np.ndarray(tuple(shape), dtype, buffer=np.zeros(1, dtype), strides=(0,) * len(shape))


def _check(fname, values, out):
    """The chunk module of the call's dask arrays, after the type checks."""
    if out is not None:
        raise TypeError(f"{fname}: out= is not taken with dask arrays (the result is a new lazy array); drop "
                        "out= and write the result with dask.array.store(result, target)")
    names = adapters.operand_names(fname)
    first = chunks = None
    for name, v in zip(names, values):
        if isinstance(v, da.Array):
            if any(isinstance(c, float) and c != c for c in v.shape):
                raise ValueError(f"{fname}: {name} has unknown chunk sizes (shape {v.shape}); call "
                                 f"{name}.compute_chunk_sizes() first")
            if isinstance(v._meta, np.ma.MaskedArray):  # (refused when the graph is built, as the eager call does)
                from .calls import refuse_masked

                refuse_masked(fname, name, v._meta)
            mod = _module_of(v)
            if chunks is None:
                first, chunks = name, mod
            elif mod != chunks:
                raise TypeError(f"{fname}: {name} has {mod} chunks but {first} has {chunks} chunks; use one "
                                "chunk type in a call")
    if chunks not in ("numpy", "cupy"):
        raise TypeError(f"{fname}: {first} has chunks of type {type(values[names.index(first)]._meta).__name__}; "
                        "dmlq takes dask arrays of NumPy or CuPy chunks")
    for name, v in zip(names, values):
        if v is None or isinstance(v, (da.Array, numbers.Number, np.generic)):
            continue
        if isinstance(v, (list, tuple)) and not isinstance(v, Packed):
            continue  # converted as np.asarray converts them (NumPy chunks only; CuPy refuses them below)
        packed = isinstance(v, (Packed, TransposedPacked))
        mod = _module_of(v.data if packed else v)
        if mod != chunks and packed:
            fix = "cupy.asarray" if chunks == "cupy" else "cupy.asnumpy"
            what = "a transposed dmlq.Packed (.mT)" if isinstance(v, TransposedPacked) else "a dmlq.Packed"
            raise TypeError(f"{fname}: {name} is {what} of {mod} bytes but {first} is a dask array of {chunks} "
                            f"chunks; pass {remade(name, v, f'{fix}({name}.data)')}")
        if mod != chunks:
            fix = ("cupy.asarray(...)" if chunks == "cupy" else
                   f"{name}.cpu().numpy()" if mod == "torch" else "np.asarray(...)")
            if chunks == "cupy" and getattr(getattr(v, "dtype", None), "kind", "") == "V":  # int4 ...: CuPy's is bytes
                fix = f"dmlq.pack({name}) with its bytes on the GPU: dmlq.Packed(cupy.asarray(p.data), p.shape, p.dtype)"
            lazy = "" if fname in MATMULS + ("quantized_avg_pool",) and name not in LAZY_OPERANDS else \
                " or a dask array"
            raise TypeError(f"{fname}: {name} is a {type(v).__module__}.{type(v).__name__} but {first} is a dask "
                            f"array of {chunks} chunks; pass {name} as a {chunks} array ({fix}){lazy}")
    return chunks


# Operators whose tasks call the public function on each block (the matmul family sums K itself).
_PER_BLOCK = ("quantize_linear", "dequantize_linear", "quantized_add", "quantized_avg_pool")


def _meta_call(fname, values, kwargs, chunks):
    """(shape, dtype) of the one-array result: every check made, nothing computed. With
    CuPy chunks the operators called per block are checked on CuPy stand-ins (one
    element broadcast), so what the GPU path refuses is refused now, not in a task."""
    gpu = chunks == "cupy" and fname in _PER_BLOCK
    args = []
    for v in values:
        if isinstance(v, (Packed, TransposedPacked)) and not gpu and _module_of(v.data) == "cupy":  # a packed b
            v = with_bytes(v, _stand_in(v.data.shape, np.uint8))  # (its size)
        elif isinstance(v, da.Array) or _module_of(v) == "cupy":
            if gpu:
                cupy = _cupy()
                v = cupy.broadcast_to(cupy.zeros((), v.dtype), v.shape)
            else:
                v = _stand_in(v.shape, v.dtype)
        args.append(v)
    return output_meta(adapters.function(fname), *args, **kwargs)


# ------------------------------------------------------------------ element-wise

def _elementwise(fname, values, kwargs, shape, dtype, meta, packed=None):
    """Chunk-wise: every array operand cut where the output's chunks fall (the
    first dask operand of full length decides each axis, a NumPy/CuPy one only
    where no dask one has that axis's full length, so a NumPy a beside a dask b
    follows b's chunks; a length-1 axis is one chunk that every output chunk reads).
    ``packed``: (the task's function, blockwise keywords) for a 1-D result of packed
    bytes (dmlq.packed_dask)."""
    fn = adapters.function(fname)
    nd = len(shape)
    arrays = [np.asarray(v) if isinstance(v, (list, tuple)) else v for v in values]
    chunks = []  # each axis: the first dask operand of its full length decides (else one chunk)
    for axis in range(nd):
        found = None
        for v in arrays:
            if isinstance(v, da.Array) and v.ndim >= nd - axis and shape[axis] != 1:
                if v.shape[axis - nd] == shape[axis]:
                    found = v.chunks[axis - nd]
                    break
        chunks.append(found or (shape[axis],))
    args = []
    for v in arrays:
        if isinstance(v, da.Array) or getattr(v, "ndim", 0) > 0:  # (a NumPy/CuPy one cut now: constant)
            lead = nd - v.ndim
            v = rechunk(v, tuple(c if n != 1 else (1,) for c, n in zip(chunks[lead:], v.shape)))
            args += [v, tuple(range(lead, nd))]
        else:
            args += [v, None]
    return _blockwise(fn, nd, args, kwargs, dtype, meta, packed, chunks)


def _blockwise(fn, nd, args, kwargs, dtype, meta, packed, chunks=None):
    """``chunks``: the output's, said (blockwise would take the first operand's with the most
    blocks on each axis: a length-1 one-chunk x beside a (5,) one-chunk scale declared (1,))."""
    if packed is not None:  # one chunk of bytes per chunk of axis 0 (the other axes whole)
        task, extra = packed
        return da.blockwise(task, (0,), *args, fn=fn, kwargs=kwargs, align_arrays=False, concatenate=True,
                            token=f"{fn.__name__}-packed", **extra)
    adjust = None if chunks is None else dict(enumerate(chunks))
    return da.blockwise(_apply, tuple(range(nd)), *args, fn=fn, kwargs=kwargs, align_arrays=False, dtype=dtype,
                        meta=meta, adjust_chunks=adjust, token=fn.__name__)


def blocked_axis(kwargs, scale, shape):
    """The axis along which ``block_size`` blocks the scale (``axis=`` or the one where
    the scale's length differs from the output's)."""
    from .quant import param_form  # the one-array call's rule (checked already: _meta_call)

    return param_form("", tuple(shape), tuple(scale.shape), None, kwargs.get("axis"), kwargs["block_size"])[1]


def _apply(*blocks, fn, kwargs):
    return fn(*blocks, **kwargs)


def empty(like, shape, dtype, chunks):
    """A lazy empty array (``shape`` holds a 0) whose chunks are arrays of ``like``'s type
    (NumPy or CuPy, as the one-array call's result), cut as ``chunks`` says. dask's own
    ``da.empty`` makes NumPy chunks whatever the input's were."""
    from dask.base import tokenize

    cupy = _cupy()
    xp = cupy if cupy is not None and isinstance(getattr(like, "_meta", like), cupy.ndarray) else np
    dtype = np.dtype(dtype)
    name = "dmlq-empty-" + tokenize(xp.__name__, tuple(shape), dtype.name, dtype.str, chunks)
    return da.from_array(xp.empty(tuple(shape), dtype), chunks=chunks, asarray=False, name=name)


def constant(v, chunks=None):
    """A NumPy/CuPy operand (a scale, a zero point, a bias, a NumPy ``a``) as a dask array cut as
    ``chunks`` says (default: one chunk). dask slices a NumPy array now, when the graph is
    built, so each chunk is data in the graph, not a task (a one-chunk array rechunked
    afterwards added a task per chunk); a CuPy array cut into several chunks keeps a getter
    task per chunk (dask slices only NumPy arrays up front). Its name is dask's own for it (``array-`` and a hash of its values and
    chunks): the same operand in two calls is one constant."""
    return da.from_array(v, chunks=v.shape if chunks is None else chunks, asarray=False)


def rechunk(v, chunks):
    """``rechunk(v, chunks)``, a NumPy/CuPy operand cut ``chunks`` at once (:func:`constant`)."""
    if not isinstance(v, da.Array):
        return constant(v, normalize_chunks(_full(chunks, v.shape), v.shape, dtype=v.dtype))
    return _rechunk(v, chunks)


def _full(chunks, shape):
    """Per-axis chunks (a tuple, None keeping the axis whole, or a dict {axis: chunks})."""
    if isinstance(chunks, dict):
        chunks = {int(k) % len(shape): c for k, c in chunks.items()}
        chunks = tuple(chunks.get(i) for i in range(len(shape)))
    return tuple((n,) if c is None else c for c, n in zip(chunks, shape))


def _rechunk(v, chunks):
    """``v.rechunk(chunks)`` for a dask array ``v``, its chunks' type kept where v is empty.
    dask's rechunk of an array of size 0 builds ``da.empty``: NumPy chunks and a NumPy meta
    whatever v's chunks were (CuPy chunks came back NumPy: a task met a NumPy operand
    beside CuPy ones, or a result of CuPy meta computed to NumPy chunks); and an array whose
    every axis is 0 it leaves as it is (a 1-D (0, 0) kept). An empty v becomes an empty array
    of its own chunk type cut as asked (``dmlq-empty-`` in its name). ``chunks``: a tuple of
    per-axis chunks (None keeps v's) or a dict {axis: chunks}."""
    if v.size:
        return v.rechunk(chunks)
    if isinstance(chunks, dict):
        chunks = {int(k) % v.ndim: c for k, c in chunks.items()}
        chunks = tuple(chunks.get(i) for i in range(v.ndim))
    chunks = tuple(old if c is None else c for c, old in zip(chunks, v.chunks))
    chunks = normalize_chunks(chunks, v.shape, dtype=v.dtype, previous_chunks=v.chunks)
    if chunks == v.chunks:
        return v
    return empty(v._meta, v.shape, v.dtype, chunks)


def _as_dask(v):
    if isinstance(v, (list, tuple)):
        v = np.asarray(v)
    return v if isinstance(v, da.Array) else constant(v)


def _block_chunks(chunks, block):
    """x's chunks along a blocked axis with every boundary moved up to a multiple of
    ``block`` (so each chunk holds whole blocks, the last one possibly ragged)."""
    length = sum(chunks)
    bounds = sorted({min(length, -(-int(b) // block) * block) for b in np.cumsum(chunks)[:-1]} - {0, length})
    edges = [0] + bounds + [length]
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:])) or (0,)


def _scalar_arg(v, ax):
    """A per-tensor scale or zero point as a blockwise argument: a one-element dask array by an
    index of its own (a 1-D one along the axis, broadcast as a single block), not as a plain
    argument, which dask embeds under a key of its own making (a new name on every call)."""
    if isinstance(v, da.Array) and v.ndim <= 1:
        return [v, (ax,) if v.ndim == 1 else ()]
    return [v, None]


def _cut_like_parameters(x, scale, zp, block, axis, shape, kwargs):
    """A NumPy/CuPy x beside a dask scale or zero point (per axis or blocked) as a dask array cut
    where the parameter's chunks fall (a blocked chunk of n entries: n blocks of x), so the
    parameter keeps its chunks rather than being merged into x's one chunk."""
    nd = len(shape)
    chunks = [(n,) for n in shape]
    if nd:
        ax = int(axis) % nd if block is None else blocked_axis(kwargs, scale, shape)
        for v in (scale, zp):
            if not isinstance(v, da.Array):
                continue
            if block is None and v.ndim == 1 and v.shape[0] == shape[ax] > 1:
                chunks[ax] = v.chunks[0]
                break
            if block is not None and v.ndim == nd and v.shape[ax] == -(-shape[ax] // int(block)):
                edges = [min(shape[ax], int(e) * int(block)) for e in np.cumsum(v.chunks[ax])]
                chunks = [v.chunks[i] if i != ax and v.shape[i] == shape[i] else c for i, c in enumerate(chunks)]
                chunks[ax] = tuple(b - a for a, b in zip([0] + edges[:-1], edges)) or (0,)
                break
    return da.from_array(x, chunks=tuple(chunks), asarray=False)


def _per_axis_or_blocked(fname, values, kwargs, shape, dtype, meta, packed=None):
    """quantize/dequantize with ONNX's per-axis form (axis=: a 1-D scale cut where x's
    chunks fall along that axis) or blocked scales (block_size=: x rechunked lazily so
    that its chunks hold whole blocks along the blocked axis, and the scale and zero
    point cut to the same blocks). The blocked axis is passed to every chunk's call."""
    x, scale, zp = values
    fn = adapters.function(fname)
    nd = len(shape)
    block, axis = kwargs.get("block_size"), kwargs.get("axis")
    x = _as_dask(x) if isinstance(x, da.Array) else _cut_like_parameters(x, scale, zp, block, axis, shape, kwargs)
    args = [x, tuple(range(nd))]
    if block is None:
        ax = int(axis) % nd
        for v in (scale, zp):
            if getattr(v, "ndim", 0) == 1 and v.shape[0] > 1:
                args += [rechunk(v, (x.chunks[ax],)), (ax,)]
            else:
                args += _scalar_arg(v, ax)
    else:
        ax = blocked_axis(kwargs, scale, shape)
        x = rechunk(x, {ax: _block_chunks(x.chunks[ax], int(block))})
        args[0] = x
        s_chunks = tuple(tuple(-(-c // int(block)) for c in x.chunks[i]) if i == ax else x.chunks[i]
                         for i in range(nd))
        args += [rechunk(scale, s_chunks), tuple(range(nd))]
        if zp is not None and getattr(zp, "shape", ()) == tuple(scale.shape):
            args += [rechunk(zp, s_chunks), tuple(range(nd))]
        else:
            args += _scalar_arg(zp, ax)
        kwargs = dict(kwargs, axis=ax)
    return _blockwise(fn, nd, args, kwargs, dtype, meta, packed)
