"""dask.array inputs: lazy dask arrays out, equal bit for bit to the one-array result.

dmlq.frameworks sends a call here when any operand is a dask array. Nothing is
computed while the graph is built: the call's checks run first on zero-stride
stand-ins of the operands (``dmlq.calls.output_meta``: every error the
one-array call would raise, raised now, naming the argument), the result's
``meta`` is an empty array of the chunks' own type (NumPy or CuPy; no kernel
runs to infer it), and each task calls the public function on its chunks.

- quantize / dequantize / add: chunk-wise (``map_blocks``); every operand that
  is an array becomes a dask array, so per-axis scales and zero points are cut
  to each chunk by dask's broadcasting alignment.
- quantize / dequantize with ``axis=`` (ONNX per-axis: the 1-D scale cut where
  x's chunks fall on that axis) or ``block_size=`` (x rechunked, lazily, so each
  chunk holds whole blocks on the blocked axis; scale and zero point cut to the
  same blocks; the blocked axis passed to every chunk's call).
- average pooling: ``map_overlap`` with a right halo of ``(window - 1) *
  dilation`` input elements per spatial axis (chunks merged first where one is
  smaller than that). The output is cut where the windows start: output block j
  holds the outputs whose window starts in input chunk j (those starting in the
  start padding with chunk 0, in the end padding with the last one). Each task
  pools its slice with the padding that puts every window where it lies in the
  whole array and that counts the same taps (IncludePadding: the padded extent
  is cut where the whole array's is); a block whose windows miss the input in
  some axis holds the output zero point, as the whole array gives there.
- matmul: M and N chunked freely; K in one chunk calls the public matmul per
  block; K split across chunks sums exact partial products per K chunk
  (dmlq.matmul_integer's int32 for NumPy chunks of K <= 33025, exact float64
  products otherwise), adds them in int64 and requantizes the sum once, in
  docs/semantics.md's order. matmul_integer wraps the added sums to int32;
  matmul_integer_to_float keeps them per group of block_size rows (blocked B
  scales; a group straddling K chunks gets its pieces' sums added) and scales
  them once, groups added in ascending order, bias cut to the output's chunks.
  B's scale and zero point per batch (b's batch shape, then (1 or G, N)) are
  broadcast over the output's batch as b is and cut where b's batch and N chunks fall.
  A packed 4-bit b (a dmlq.Packed of CuPy bytes, or its .mT held K-major, beside CuPy
  chunks) goes whole to each task: a is cut along M only (K and the batch merged
  lazily), and each M block runs the public function, whose kernels read b packed.
  NumPy bytes beside NumPy chunks are unpacked on the host to the ml_dtypes array
  they stand for (a transposed view for a .mT).

quantize_linear to a packed type (4-bit, 2-bit, float8, float4) on CuPy chunks gives a
dmlq.Packed of lazy bytes, and dequantize_linear takes one back (dmlq.packed_dask). The
operand checks and the chunk-wise calls live in dmlq.dask_chunks (shared with it).

Scales and zero points of pooling and matmul are NumPy/CuPy arrays or numbers
(a dask array there is refused); ``out=`` is not taken (store a result with
``dask.array.store``).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

try:
    import dask.array as da
except ModuleNotFoundError as _e:
    if _e.name not in ("dask", "dask.array"):
        raise  # another missing module: its own message
    raise ImportError("dmlq.dask needs dask.array, which is not installed: pip install \"dask[array]\" (dmlq's "
                      "extra .[dask])") from None
from dask.array.utils import meta_from_array
from dask.base import tokenize

from . import adapters, packed_dask
from .dask_chunks import (LAZY_OPERANDS, MATMULS, _as_dask, _check, _cupy, _elementwise, _meta_call, _module_of,
                          _per_axis_or_blocked, rechunk)
from .dask_tokens import naming
from .desc import pool_output_size
from .errors import UnsupportedError
from .gpu.device import upload  # host scales to CuPy chunks' device, -0.0 kept
from .intmm import matmul_integer
from .packing import Packed, TransposedPacked, unpack
from .qtypes import qtype
from .quant_gpu import NATIVE

_F32 = np.float32
_OPERATORS = ("quantize_linear", "dequantize_linear", "quantized_add", "quantized_avg_pool") + MATMULS


def call(fname, values, kwargs, out=None, names=None):
    """``fname(*values, **kwargs)`` (a public function) with dask arrays among ``values``
    (``names``: the operands' names as dmlq.calls passes them). Its device arrays are named
    without a copy to the host (dmlq.dask_tokens)."""
    with naming(values, kwargs, out):
        return _call(fname, values, kwargs, out)


def _call(fname, values, kwargs, out):
    if fname == "matmul_integer":  # run passes (a, a_zero_point, b, b_zero_point)
        a, a_zp, b, b_zp = values
        values = (a, b, a_zp, b_zp)
    elif fname not in _OPERATORS:
        raise UnsupportedError(f"{fname} does not take dask arrays yet; pass NumPy arrays (x.compute())")
    if fname in ("quantize_linear", "dequantize_linear") and isinstance(values[1], Packed) \
            and not isinstance(values[1].data, da.Array):
        values = _packed_scale(fname, values, kwargs)
    if fname == "dequantize_linear" and isinstance(values[0], Packed):
        q = values[0]
        if not isinstance(q.data, da.Array):  # bytes beside dask parameters (checked against their chunks)
            if _check(fname, values, out) == "numpy":  # NumPy bytes: the ml_dtypes array they stand for
                values = (unpack(q),) + tuple(values[1:])
            else:  # GPU bytes: one chunk of lazy bytes
                q = Packed(da.from_array(q.data, chunks=q.data.shape, asarray=False), q.shape, q.dtype)
        if isinstance(q.data, da.Array):
            return packed_dask.dequantize(q, values[1], values[2], kwargs, out)
    chunks = _check(fname, values, out)  # (lists beside CuPy chunks refused by name there)
    # every operator's lists as the one-array call converts them (a list left to the tasks was taken
    # for dask's own list of blocks: its first element applied to every column)
    names = adapters.operand_names(fname)
    if chunks == "cupy":  # a list is host memory: the one-array GPU call refuses it, so the graph does too
        for n, v in zip(names, values):
            if isinstance(v, (list, tuple)) and not isinstance(v, Packed):
                raise TypeError(f"{fname}: {n} is a {type(v).__name__}, host memory, but the dask arrays have CuPy "
                                f"chunks; pass cupy.asarray({n}) (or a Python number)")
    first = _listed(fname, names[0], values[0], None)  # (x before its scale: a list scale takes x's type)
    values = (first,) + tuple(_listed(fname, n, v, first) for n, v in zip(names[1:], values[1:]))
    values = tuple(_number_bias(fname, v) if n == "bias" else v for n, v in zip(names, values))
    values = tuple(_without_empty_chunks(_signed_nan(v, chunks)) for v in values)
    if fname not in ("quantize_linear", "dequantize_linear"):  # one value for the whole tensor, of any rank:
        values = tuple(_one_value(n, v) for n, v in zip(names, values))  # (the result's rank is the data's)
    if chunks == "numpy" and fname in MATMULS:  # a packed b of NumPy bytes: the ml_dtypes array it stands for
        i = adapters.operand_names(fname).index("b")
        if isinstance(values[i], (Packed, TransposedPacked)):  # (a TransposedPacked: its transposed values)
            values = values[:i] + (unpack(values[i]),) + values[i + 1:]
    shape, dtype = _meta_call(fname, values, kwargs, chunks)
    if chunks == "cupy" and fname in ("quantize_linear", "dequantize_linear"):
        shape, dtype = _meta_call(fname, values, kwargs, "numpy")  # the logical result (not the GPU form)
        if fname == "quantize_linear" and np.dtype(dtype).name not in NATIVE:
            return packed_dask.quantize(values, kwargs, shape, qtype(np.dtype(dtype)), _cupy())
        if np.dtype(dtype).name not in NATIVE + ("float32", "float16") and not _cupy_holds(dtype):
            raise UnsupportedError(
                f"{fname}: a {np.dtype(dtype).name} result on CuPy chunks: this CuPy has no {np.dtype(dtype).name} "
                "dtype; use NumPy chunks for it, or call dmlq per block (x.to_delayed())")
    like = next(v for v in values if isinstance(v, da.Array))._meta
    meta = meta_from_array(like, ndim=len(shape), dtype=dtype)
    if fname == "quantized_avg_pool":
        return _avg_pool(values, kwargs, shape, dtype, meta)
    if fname in MATMULS and isinstance(values[adapters.operand_names(fname).index("b")], (Packed, TransposedPacked)):
        return _packed_b(fname, values, kwargs, shape, dtype, meta)
    if fname == "quantized_matmul":
        return _matmul(values, kwargs, shape, dtype, meta)
    if fname == "matmul_integer":
        return _matmul_integer(values, shape, meta)
    if fname == "matmul_integer_to_float":
        return _matmul_integer_to_float(values, kwargs, shape, dtype, meta)
    if kwargs.get("axis") is not None or kwargs.get("block_size") is not None:
        return _per_axis_or_blocked(fname, values, kwargs, shape, dtype, meta)
    return _elementwise(fname, values, kwargs, shape, dtype, meta)


def _packed_scale(fname, values, kwargs):
    """A float8_e8m0fnu scale given as a dmlq.Packed of its codes (the GPU's form; the NumPy path
    takes it too) beside dask arrays, as a scale array the chunks' tasks cut: NumPy bytes beside
    NumPy chunks as the ml_dtypes array they stand for; CuPy bytes beside CuPy chunks, which have
    no e8m0 dtype, as its exact float32 values ``2**(e - 127)`` (code 0 the subnormal 2**-127,
    code 255 NaN), what the kernels read, dequantize's dtype= rule checked first (a float32 scale
    would not need it). Bytes of the other library are left for the checks to name. It reached
    dask's blocks as a tuple: NumPy's "inhomogeneous shape" or CuPy's implicit-conversion error."""
    from .quant import E8M0_DTYPE, e8m0_codes, e8m0_needs_dtype, is_e8m0_name

    p = values[1]
    if not is_e8m0_name(p.dtype):
        return values  # (another type: the one-array call's error, from the checks)
    codes = e8m0_codes(fname, p).reshape(tuple(p.shape))
    lazy = (v.data if isinstance(v, Packed) else v for v in values)  # (q may be a Packed of lazy bytes)
    chunks = next((_module_of(v) for v in lazy if isinstance(v, da.Array)), None)
    if _module_of(codes) != chunks:
        return values
    if chunks != "cupy":
        return (values[0], codes.view(E8M0_DTYPE)) + tuple(values[2:])
    if fname == "dequantize_linear" and kwargs.get("dtype") is None:
        raise e8m0_needs_dtype(fname)
    cupy = _cupy()
    c = codes.astype(cupy.uint32)
    bits = cupy.where(c == 0, np.uint32(0x00400000), cupy.where(c == 255, np.uint32(0x7FC00000),
                                                                 c * np.uint32(1 << 23)))
    return (values[0], bits.astype(cupy.uint32).view(cupy.float32)) + tuple(values[2:])


def _without_empty_chunks(v):
    """A dask array without chunks of length 0 on an axis that has elements (x[mask] after
    compute_chunk_sizes() has them): the pooling halo and the matmul cuts assume none (a halo
    taken from an empty chunk lost an output). Unknown (NaN) chunks are left to the checks. An
    empty array keeps its chunk type (dmlq.dask_chunks.rechunk)."""
    if not isinstance(v, da.Array) or any(math.isnan(n) for c in v.chunks for n in c):
        return v
    if not any(len(c) > 1 and 0 in c for c in v.chunks):
        return v
    return rechunk(v, tuple(tuple(n for n in c if n) or (0,) for c in v.chunks))


def _one_value(name, v):
    """A scale or zero point of one element (NumPy, CuPy or dask) as 0-d, for the operators whose
    result does not take their rank (add, the matmuls, pooling): a (1, 1) b_scale was cut along N,
    a (1, 1) add scale indexed past the output's axes, a dask one of more dimensions than the
    output failed in dask's blockwise ("Chunks and shape must be of the same length")."""
    if (name.endswith("scale") or name.endswith("zero_point")) and not isinstance(v, Packed) \
            and getattr(v, "ndim", 0) > 0 and getattr(v, "size", 0) == 1:
        return v.reshape(())
    return v


def _signed_nan(v, chunks):
    """A NaN scalar whose sign dask's tokenize would lose (a Python float or a 0-d array: +NaN and
    -NaN get one name, so two results in one graph became one) as a NumPy scalar, which dask
    names by its bytes: a Python float as float32 (a NaN of any float type is NaN of that sign,
    and the typed float32 takes the same path), a 0-d array as its own type's scalar."""
    if isinstance(v, float) and math.isnan(v):  # (a NumPy float64 scalar too: a float)
        return np.copysign(np.float32("nan"), np.float32(math.copysign(1.0, v)))
    if chunks == "numpy" and type(v) is np.ndarray and v.ndim == 0 and v.dtype != np.float64 and \
            v.dtype.kind in "fV":  # (beside CuPy chunks a host array is refused, NaN or not: left as it is)
        try:
            nan = bool(np.isnan(v.astype(np.float32)))
        except (TypeError, ValueError):
            return v
        return v[()] if nan else v
    return v


def _listed(fname, name, v, first):
    """A list or tuple operand as the one-array call converts it (numbers in a float role: float32,
    quantize's scale beside a float16 or bfloat16 x that type; dmlq.calls.list_operand), so the
    chunks' calls and the checks see that array, not np.asarray's float64."""
    if not isinstance(v, (list, tuple)) or isinstance(v, Packed):
        return v
    from .calls import list_operand
    from .quant import number_scale_dtype

    float_role = name == "x" or name.endswith("scale") or name == "bias"
    dtype = number_scale_dtype(first.dtype) if fname == "quantize_linear" and name == "scale" and \
        first is not None else np.float32
    return list_operand(fname, name, v, float_role, dtype)


def _number_bias(fname, v):
    """A Python number bias as the one-array call takes it: a float32 NumPy scalar (beyond float32's
    range refused as there), which every task takes as it is (a number has no shape to cut)."""
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.generic)):
        from .checks import real_number

        return real_number(fname, "bias", v, _F32)[()]
    return v


def _cupy_holds(dtype) -> bool:
    """Whether CuPy makes arrays of ``dtype`` (bfloat16 from CuPy 14 on), as a one-array result is."""
    try:
        _cupy().empty((0,), dtype)
    except Exception:  # noqa: BLE001 - CuPy's refusal of the dtype, whatever its class
        return False
    return True


# ------------------------------------------------------------------ average pooling

def _ints(value, nd, default):
    if value is None:
        return (default,) * nd
    if isinstance(value, numbers.Integral):
        return (int(value),) * nd
    return tuple(int(v) for v in value)


def _refuse_dask_params(fname, values, names):
    for name, v in zip(names, values):
        if isinstance(v, da.Array) and name not in LAZY_OPERANDS:
            raise TypeError(f"{fname}: {name} is a dask array; pass scales and zero points of pooling and matmul "
                            f"as NumPy/CuPy arrays or numbers ({name}.compute() if it is small)")


def _min_chunks(chunks, least):
    """Chunks merged left to right until each holds at least ``least`` elements
    (the total permitting)."""
    if least <= 1:
        return tuple(chunks)
    merged, acc = [], 0
    for c in chunks:
        acc += c
        if acc >= least:
            merged.append(acc)
            acc = 0
    if acc:
        if merged:
            merged[-1] += acc
        else:
            merged.append(acc)
    return tuple(merged) or (0,)  # an empty axis stays one empty chunk


def _axis_plan(length, chunks, window, stride, start, end, dilation, include, out_len):
    """Per input chunk along one spatial axis: (oa, ob, lo, hi, pad_start, pad_end) -- the
    outputs [oa, ob) whose windows start in that chunk, and how to pool them from the chunk's
    data (with its right halo): the slice [lo, hi) of that data and the padding around it."""
    extent = (window - 1) * dilation + 1
    bounds = np.cumsum((0,) + tuple(chunks))
    plans = []
    for j in range(len(chunks)):
        b0, b1 = int(bounds[j]), int(bounds[j + 1])
        first = 0 if j == 0 else -(-(b0 + start) // stride)  # first output whose window starts at >= b0
        last = out_len if j == len(chunks) - 1 else -(-(b1 + start) // stride)
        oa, ob = min(first, out_len), min(max(last, first), out_len)
        if ob <= oa:
            plans.append((oa, oa, 0, 0, 0, 0))
            continue
        have = min(length, b1 + extent - 1) - b0       # the chunk and its halo
        g0 = oa * stride - start                        # where the first window starts (global)
        g1 = (ob - 1) * stride - start + extent         # where the last window ends
        lo, pad_start = max(0, g0 - b0), max(0, b0 - g0)
        hi = max(lo, min(have, g1 - b0))
        upper = min(length + end, g1) if include else g1  # IncludePadding counts taps below this
        pad_end = max(0, upper - (b0 + hi))
        plans.append((oa, ob, lo, hi, pad_start, pad_end))
    return plans


def _avg_pool(values, kwargs, shape, dtype, meta):
    names = adapters.operand_names("quantized_avg_pool")
    _refuse_dask_params("quantized_avg_pool", values, names)
    x, x_scale, x_zp, out_scale, out_zp = values
    if not isinstance(x, da.Array):
        x = da.from_array(x, chunks=x.shape, asarray=False)
    nd = x.ndim - 2
    window = _ints(kwargs.get("window_size"), nd, 1)
    stride = _ints(kwargs.get("strides"), nd, 1)
    start = _ints(kwargs.get("start_padding"), nd, 0)
    end = _ints(kwargs.get("end_padding"), nd, 0)
    dil = _ints(kwargs.get("dilations"), nd, 1)
    include = bool(kwargs.get("include_padding", False))
    halo = [(window[i] - 1) * dil[i] for i in range(nd)]
    x = rechunk(x, x.chunks[:2] + tuple(_min_chunks(x.chunks[2 + i], halo[i]) for i in range(nd)))
    plans = [_axis_plan(x.shape[2 + i], x.chunks[2 + i], window[i], stride[i], start[i], end[i], dil[i],
                        include, shape[2 + i]) for i in range(nd)]
    out_chunks = x.chunks[:2] + tuple(tuple(p[1] - p[0] for p in plans[i]) for i in range(nd))
    channel_bounds = np.cumsum((0,) + x.chunks[1])
    params = dict(kwargs, window_size=window, strides=stride, dilations=dil)
    params.pop("start_padding", None), params.pop("end_padding", None), params.pop("ceil_mode", None)
    task = _PoolTask(plans, channel_bounds, (window, stride, dil), (x_scale, x_zp, out_scale, out_zp), params,
                     dtype)
    # an axis in one chunk needs no halo (and dask refuses one longer than the axis)
    depth = {2 + i: (0, halo[i] if len(x.chunks[2 + i]) > 1 else 0) for i in range(nd)}
    result = da.map_overlap(task, x, depth=depth, boundary="none", trim=False, chunks=out_chunks, dtype=dtype,
                            meta=meta, token="quantized_avg_pool")
    assert result.shape == shape, (result.shape, shape)
    return result


def _channel_slice(v, c0, c1):
    """A per-tensor or per-channel scale or zero point for channels [c0, c1)."""
    if v is None or not hasattr(v, "size") or v.size == 1:
        return v
    return v.reshape(-1)[c0:c1]


class _PoolTask:
    """One output block of pooling from one input block and its right halo."""

    __name__ = "quantized_avg_pool"  # (dask's name for a callable object without one is its repr: an address)

    def __init__(self, plans, channel_bounds, geometry, params, kwargs, dtype):
        self.plans, self.channel_bounds = plans, channel_bounds
        self.window, self.stride, self.dil = geometry
        self.params, self.kwargs, self.dtype = params, kwargs, dtype

    def __dask_tokenize__(self):
        """What the task computes, by value (dask would pickle the object: its class by reference)."""
        return (type(self).__qualname__, tokenize(self.plans, self.channel_bounds, self.window, self.stride,
                                                  self.dil, self.params, self.kwargs, np.dtype(self.dtype).str))

    def __call__(self, block, block_info=None):
        from . import api

        where = block_info[0]["chunk-location"]
        c0, c1 = int(self.channel_bounds[where[1]]), int(self.channel_bounds[where[1] + 1])
        x_scale, x_zp, out_scale, out_zp = (_channel_slice(v, c0, c1) for v in self.params)
        nd = block.ndim - 2
        axes = [self.plans[i][where[2 + i]] for i in range(nd)]
        counts = tuple(ob - oa for oa, ob, *_ in axes)
        xp = _array_module(block)
        shape = block.shape[:2] + counts
        if 0 in shape:
            return xp.empty(shape, self.dtype)
        if any(hi <= lo for _, _, lo, hi, _, _ in axes):
            # every window of this block misses the input along some axis: no tap is summed, and
            # a zero sum (or a zero count) requantizes to the output zero point, whatever the scales
            out = xp.empty(shape, self.dtype)
            zp = 0 if out_zp is None else out_zp
            if getattr(zp, "size", 1) > 1:
                zp = xp.asarray(zp).reshape((1, -1) + (1,) * nd)
            out[...] = zp
            return out
        index, starts, keep, ceil = [slice(None), slice(None)], [], [slice(None), slice(None)], False
        for i, (oa, ob, lo, hi, pad_start, pad_end) in enumerate(axes):
            w, s, d = self.window[i], self.stride[i], self.dil[i]
            # windows put in front in the start padding, dropped after, where the slice and its
            # padding are shorter than one window; they change no kept window's count
            lead = max(0, -(-((w - 1) * d + 1 - (pad_start + hi - lo + pad_end)) // s))
            floor_size, _ = pool_output_size(hi - lo, w, s, pad_start + lead * s, pad_end, d)
            ceil = ceil or floor_size < lead + ob - oa
            index.append(slice(lo, hi))
            starts.append(pad_start + lead * s)
            keep.append(slice(lead, lead + ob - oa))
        pooled = api.quantized_avg_pool(block[tuple(index)], x_scale, x_zp, out_scale, out_zp,
                                        start_padding=tuple(starts), end_padding=tuple(a[5] for a in axes),
                                        ceil_mode=ceil, **self.kwargs)
        return pooled[tuple(keep)]


def _array_module(a):
    cupy = _cupy()
    return cupy if cupy is not None and isinstance(a, cupy.ndarray) else np


# ------------------------------------------------------------------ matmul

def _vector(v):
    """A per-row/column scale or zero point as 1-D (per tensor: as it is). One of no elements
    (M or N = 0) is per row or column too, not one value."""
    return v.reshape(-1) if hasattr(v, "size") and v.size != 1 else v


def _matmul_operands(a, b, shape):
    """a and b as dask arrays broadcast to the output's batch shape, b's K (and batch)
    cut where a's are (a NumPy/CuPy a beside a dask b: a's cut where b's are, so b's
    chunks are kept, not merged into one); and that batch shape."""
    b_leads = not isinstance(a, da.Array) and isinstance(b, da.Array)
    a, b = (v if isinstance(v, da.Array) else da.from_array(v, chunks=v.shape, asarray=False) for v in (a, b))
    batch = shape[:-2]
    a = da.broadcast_to(a, batch + a.shape[-2:])
    b = da.broadcast_to(b, batch + b.shape[-2:])
    if b_leads:
        return rechunk(a, b.chunks[:-2] + (a.chunks[-2], b.chunks[-2])), b, batch
    return a, rechunk(b, a.chunks[:-2] + (a.chunks[-1],) + (b.chunks[-1],)), batch


def _per_batch(v):
    """B's per-batch form: b's batch shape (not all 1s), then (1 or groups, N)."""
    return getattr(v, "ndim", 0) > 2 and any(d != 1 for d in v.shape[:-2])


def _b_side(v, b, batch):
    """A B-side scale or zero point as a blockwise (argument, index) pair: per batch ->
    broadcast to the output's batch as b is and cut where b's batch and N chunks fall
    (its rows, 1 or the groups, whole); per column (1-D) -> cut along N; else as it is."""
    bi = tuple(f"z{i}" for i in range(len(batch)))
    if _per_batch(v):
        v = da.broadcast_to(_as_dask(v), batch + tuple(v.shape[-2:]))
        return rechunk(v, b.chunks[:-2] + ((v.shape[-2],), b.chunks[-1])), bi + ("g", "n")
    if hasattr(v, "ndim") and v.ndim == 1 and v.size != 1:
        return da.from_array(v, chunks=(b.chunks[-1],), asarray=False), ("n",)
    if hasattr(v, "ndim") and v.ndim == 2:  # (1 or G, N): cut along N, the groups whole
        return da.from_array(v, chunks=((v.shape[0],), b.chunks[-1]), asarray=False), ("g", "n")
    return v, None


def _matmul(values, kwargs, shape, dtype, meta):
    names = adapters.operand_names("quantized_matmul")
    _refuse_dask_params("quantized_matmul", values, names)
    a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp = values
    a, b, batch = _matmul_operands(a, b, shape)
    bi = tuple(f"z{i}" for i in range(len(batch)))
    args = []
    for v in (a_scale, a_zp, out_scale, out_zp):
        args += _a_side(v, a, batch)
    for v in (b_scale, b_zp):
        args += _b_side(v if _per_batch(v) else _vector(v), b, batch)
    if len(a.chunks[-1]) == 1:
        fn = adapters.function("quantized_matmul")
        return da.blockwise(_block_matmul, bi + ("m", "n"), a, bi + ("m", "k"), b, bi + ("k", "n"), *args,
                            fn=fn, kwargs=kwargs, concatenate=True, dtype=dtype, meta=meta, token="quantized_matmul")
    # K split: one task per output block sums its K chunks' products and requantizes the sum
    return da.blockwise(_k_split_matmul, bi + ("m", "n"), a, bi + ("m", "k"), b, bi + ("k", "n"), *args,
                        out_dtype=dtype, concatenate=False, dtype=dtype, meta=meta, token="quantized_matmul")


def _packed_b(fname, values, kwargs, shape, dtype, meta):
    """The matmul family with a dmlq.Packed b of CuPy bytes (dmlq.frameworks passes it on
    beside dask arrays of CuPy chunks): the bytes go whole to every task, which calls the
    public function as one CuPy array would (the kernels read b packed). a is broadcast to
    the output's batch and rechunked lazily so that only M is cut (K and the batch in one
    chunk); per-row A parameters and a bias are cut where M's chunks fall, B's parameters
    go whole with b."""
    names = adapters.operand_names(fname)
    _refuse_dask_params(fname, values, names)
    values = list(values)
    a = values[0] if isinstance(values[0], da.Array) else da.from_array(values[0], chunks=values[0].shape,
                                                                         asarray=False)
    batch = shape[:-2]
    a = da.broadcast_to(a, batch + a.shape[-2:])
    a = rechunk(a, tuple((n,) for n in batch) + (a.chunks[-2], (a.shape[-1],)))
    bi = tuple(f"z{i}" for i in range(len(batch)))
    cut, args = [0], [a, bi + ("m", "k")]
    for i, name in enumerate(names):
        if name == "bias" and values[i] is not None and not isinstance(values[i], np.generic):
            args += _bias(values[i], a.chunks[:-1] + ((shape[-1],),), bi + ("m", "n"))
        elif name in ("a_scale", "a_zero_point", "out_scale", "out_zero_point"):
            v, index = _a_side(values[i], a, batch)
            if index is None:
                continue
            args += [v, index]
        else:
            continue
        cut.append(i)
    rows = {i for i in cut if names[i] != "bias" and i}
    values = [None if i in cut else v for i, v in enumerate(values)]  # (those come from the blocks)
    return da.blockwise(_PackedBTask(adapters.function(fname), values, cut, kwargs, rows), bi + ("m", "n"), *args,
                        new_axes={"n": shape[-1]}, concatenate=True, dtype=dtype, meta=meta,
                        token=f"{fname}-packed-b")


class _PackedBTask:
    """One M block of a matmul with a packed b: the public function on the block, the
    operands in ``cut`` taken from the block's arguments, the others as given."""

    __name__ = "packed-b-matmul"  # (as _PoolTask's)

    def __init__(self, fn, values, cut, kwargs, rows=()):
        self.fn, self.values, self.cut, self.kwargs, self.rows = fn, values, cut, kwargs, rows

    def __dask_tokenize__(self):
        """By value, as _PoolTask's (the packed bytes by dask's token of Packed, a tuple)."""
        return (type(self).__qualname__, tokenize(self.fn, self.values, self.cut, self.kwargs, sorted(self.rows)))

    def __call__(self, *blocks):
        values = list(self.values)
        for i, v in zip(self.cut, blocks):
            values[i] = _column(v) if i in self.rows else v  # A-side blocks; a and the bias as they are
        return self.fn(*values, **self.kwargs)


def _matmul_integer(values, shape, meta):
    """dmlq.matmul_integer: the exact sums of every K chunk added, wrapped to int32 as
    the one-array result wraps them (past K = 33025 at extreme values only)."""
    _refuse_dask_params("matmul_integer", values, ("a", "b", "a_zero_point", "b_zero_point"))
    a, b, a_zp, b_zp = values
    a, b, batch = _matmul_operands(a, b, shape)
    bi = tuple(f"z{i}" for i in range(len(batch)))
    args = [*_a_side(a_zp, a, batch), *_b_side(b_zp if _per_batch(b_zp) else _vector(b_zp), b, batch)]
    return da.blockwise(_wrapped_sums, bi + ("m", "n"), a, bi + ("m", "k"), b, bi + ("k", "n"), *args,
                        concatenate=False, dtype=np.int32, meta=meta, token="matmul_integer")


def _a_side(v, a, batch):
    """An A-side scale or zero point (a's, or quantized_matmul's output's) as a blockwise
    (argument, index) pair: per batch and row (batch dims not all 1, then (M, 1)) -> its
    (..., M) broadcast to the output's batch and cut where a's batch and M chunks fall
    (the blocks get their (..., M, 1) back: :func:`_column`); per row -> (M,) cut along M;
    per tensor as it is."""
    if _per_batch(v):
        v = da.broadcast_to(_as_dask(v)[..., 0], tuple(batch) + (v.shape[-2],))
        return rechunk(v, a.chunks[:-1]), tuple(f"z{i}" for i in range(len(batch))) + ("m",)
    v = _vector(v)
    if hasattr(v, "ndim") and v.ndim == 1 and v.size != 1:
        return da.from_array(v, chunks=(a.chunks[-2],), asarray=False), ("m",)
    return v, None


def _b_rows(v):
    """A B-side scale or zero point as () / (1, N) / (G, N) (per tensor, per column, blocked)
    or, per batch, as it is (b's batch shape, then (1 or G, N))."""
    if not hasattr(v, "ndim") or v.size == 1 or _per_batch(v):
        return v
    return v.reshape((1, -1) if v.ndim == 1 else v.shape[-2:])


def _matmul_integer_to_float(values, kwargs, shape, dtype, meta):
    """dmlq.matmul_integer_to_float: exact int64 sums per K chunk (and per group of
    block_size rows with blocked B scales), added across chunks, then scaled once
    in docs/semantics.md's float32 order (groups in ascending order), bias added,
    rounded to the output type."""
    fname = "matmul_integer_to_float"
    a, a_scale, a_zp, b, b_scale, b_zp, bias = values
    _refuse_dask_params(fname, values, adapters.operand_names(fname))
    a, b, batch = _matmul_operands(a, b, shape)
    bi = tuple(f"z{i}" for i in range(len(batch)))
    out_chunks = a.chunks[:-1] + (b.chunks[-1],)
    args = [*_a_side(a_scale, a, batch), *_a_side(a_zp, a, batch)]
    for v in (b_scale, b_zp):
        args += _b_side(_b_rows(v), b, batch)
    args += _bias(bias, out_chunks, bi + ("m", "n"))
    return da.blockwise(_to_float_task, bi + ("m", "n"), a, bi + ("m", "k"), b, bi + ("k", "n"), *args,
                        block_size=kwargs.get("block_size"), out_dtype=dtype, concatenate=False, dtype=dtype,
                        meta=meta, token="matmul_integer_to_float")


def _bias(bias, out_chunks, index):
    """A bias as a blockwise [argument, index] pair cut where the output's chunks fall; an axis
    of length 1 stays one chunk that every block reads (the task broadcasts it: broadcasting it
    in the graph first added a task per output block)."""
    if bias is None or isinstance(bias, np.generic):
        return [bias, None]
    lead = len(out_chunks) - bias.ndim
    return [rechunk(bias, tuple((1,) if n == 1 else c for n, c in zip(bias.shape, out_chunks[lead:]))),
            index[lead:]]


def _one(v):
    """A block given as a one-element list (an index contracted without concatenation)."""
    while isinstance(v, list):
        v = v[0]
    return v


def _to_float_task(a_blocks, b_blocks, a_scale, a_zp, b_scale, b_zp, bias, block_size, out_dtype):
    xp = _array_module(a_blocks[0])
    b_scale, b_zp, bias = _one(b_scale), _one(b_zp), _one(bias)
    f32 = (lambda v: upload(xp, v).astype(_F32))
    a_s = f32(_column(a_scale))
    k = sum(blk.shape[-1] for blk in a_blocks)
    grouped = block_size is not None
    step = block_size if grouped else max(k, 1)
    accs = {}
    k0 = 0
    for a, b in zip(a_blocks, b_blocks):
        k1 = k0 + a.shape[-1]
        for g in range(k0 // step, -(-k1 // step) if k1 > k0 else k0 // step):
            lo, hi = max(k0, g * step), min(k1, (g + 1) * step)
            zp = b_zp[..., g:g + 1, :] if grouped and _groups(b_zp) else b_zp
            part = matmul_integer_sum(a[..., lo - k0:hi - k0], a_zp, b[..., lo - k0:hi - k0, :], zp,
                                      xp).astype(xp.int64)
            accs[g] = part if g not in accs else accs[g] + part
        k0 = k1
    shape = a_blocks[0].shape[:-1] + b_blocks[0].shape[-1:]
    if not grouped and not accs:  # K = 0: acc = 0, scaled as any sum
        accs[0] = xp.zeros(shape, xp.int64)
    v = None
    with np.errstate(all="ignore"):
        for g in sorted(accs):
            s_g = b_scale[..., g:g + 1, :] if grouped and _groups(b_scale) else b_scale
            term = xp.multiply(accs[g].astype(_F32), xp.multiply(a_s, f32(s_g), dtype=_F32), dtype=_F32)
            v = term if v is None else xp.add(v, term, dtype=_F32)
        if v is None:  # K = 0 with blocked scales: no groups, the empty sum +0.0
            v = xp.zeros(shape, _F32)
        if bias is not None:
            v = xp.add(v, f32(bias), dtype=_F32)
        return xp.broadcast_to(v, shape).astype(out_dtype)


def _groups(v):
    """Whether a B-side value holds a row per group of block_size rows ((..., G, N), G > 1)."""
    return getattr(v, "ndim", 0) >= 2 and v.shape[-2] > 1


def _wrapped_sums(a_blocks, b_blocks, a_zp, b_zp):
    """matmul_integer's block: the K chunks' exact sums added in int64, wrapped to int32."""
    return _partial_sums(a_blocks, b_blocks, a_zp, b_zp).astype(np.int32)


def _column(v):
    """An A-side block as the public functions take it: (M,) -> (M, 1), a per-batch-and-row
    block (..., M) -> (..., M, 1), an empty one too (M = 0); one value as it is."""
    if not hasattr(v, "ndim") or v.size == 1:
        return v
    return v.reshape(-1, 1) if v.ndim == 1 else v[..., None]


def _block_matmul(a, b, a_scale, a_zp, out_scale, out_zp, b_scale, b_zp, fn, kwargs):
    return fn(a, _column(a_scale), _column(a_zp), b, b_scale, b_zp, _column(out_scale), _column(out_zp),
              **kwargs)


def matmul_integer_sum(a, a_zp, b, b_zp, xp):
    """The exact integer products ``(a - a_zp) @ (b - b_zp)`` of one K chunk (a_zp per
    row or per tensor, b_zp per column or per tensor). NumPy chunks of K <= 33025 go
    through dmlq.matmul_integer (exact int32 there); CuPy chunks (matmul_integer's
    kernel covers small M only) and longer K through float64 products, exact integers (each term is at
    most 255 * 255 and K * 65025 < 2**53), as int64."""
    if xp is np and a.shape[-1] <= 33025:
        return matmul_integer(a, b, _column(a_zp), b_zp)
    da_ = a.astype(xp.int32) - (0 if a_zp is None else xp.asarray(_column(a_zp)).astype(xp.int32))
    db_ = b.astype(xp.int32) - (0 if b_zp is None else xp.asarray(b_zp).astype(xp.int32))
    return xp.matmul(da_.astype(xp.float64), db_.astype(xp.float64)).astype(xp.int64)


def _partial_sums(a_blocks, b_blocks, a_zp, b_zp):
    xp = _array_module(a_blocks[0])
    b_zp, total = _one(b_zp), None
    for a, b in zip(a_blocks, b_blocks):
        part = matmul_integer_sum(a, a_zp, b, b_zp, xp).astype(xp.int64)
        total = part if total is None else total + part
    return total


def _k_split_matmul(a_blocks, b_blocks, a_scale, a_zp, out_scale, out_zp, b_scale, b_zp, out_dtype):
    """quantized_matmul's block with K split: its K chunks' exact sums, requantized once."""
    return _requantize(_partial_sums(a_blocks, b_blocks, a_zp, b_zp), _one(a_scale), _one(out_scale),
                       _one(out_zp), b_scale, out_dtype)


def _requantize(acc, a_scale, out_scale, out_zp, b_scale, out_dtype):
    """docs/semantics.md's matmul requantization of an exact sum:
    ``t = float32(acc) * ((a_scale * b_scale) / out_scale)``, rounded half to even,
    saturated in float, plus the zero point."""
    xp = _array_module(acc)
    col = (lambda v: _column(upload(xp, v, _F32)) if getattr(v, "ndim", 0) > 1 else
           upload(xp, v, _F32).reshape(-1, 1))
    with np.errstate(all="ignore"):
        b_s = upload(xp, _one(b_scale), _F32)
        mult = xp.divide(xp.multiply(col(a_scale), b_s if b_s.ndim > 2 else b_s.reshape(1, -1), dtype=_F32),
                         col(out_scale), dtype=_F32)
        t = xp.multiply(acc.astype(_F32), mult, dtype=_F32)
    info = np.iinfo(out_dtype)
    zp = xp.zeros((1, 1), xp.int64) if out_zp is None else col(out_zp).astype(xp.int64)
    low, high = (info.min - zp).astype(_F32), (info.max - zp).astype(_F32)
    r = xp.where(xp.isnan(t), _F32(0), xp.minimum(xp.maximum(xp.rint(t), low), high))
    return (r.astype(xp.int64) + zp).astype(out_dtype)
