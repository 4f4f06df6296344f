"""NumPy implementation of docs/semantics.md: the oracle and the CPU backend.

Every function follows the backend interface shared with dmlq.gpu: operands
arrive validated and broadcastable to ``out``; the result is written into
``out`` (computed in full first, so an ``out`` that overlaps an input is safe)
and ``out`` is returned. All real arithmetic is float32, one IEEE-rounded NumPy
operation at a time, in the order docs/semantics.md writes it.
"""
from __future__ import annotations

import itertools

import numpy as np

from . import floatconv
from .packing import unpack_b
from .qtypes import BFLOAT16, BFLOAT16_DTYPE, E8M0_DTYPE, is_qtype, qtype

_F32 = np.float32
_F16 = np.dtype(np.float16)


def _zp(zero_point):
    """A zero point as int64 (0 when omitted)."""
    return np.int64(0) if zero_point is None else np.asarray(zero_point).astype(np.int64)


def round_saturate(t, zero_point, dtype):
    """docs/semantics.md "Requantizing a value", steps 2-4 on t = v / s (float32): NaN -> zp,
    rint, clamp in float to [qmin - zp, qmax - zp], add zp."""
    q = qtype(dtype)
    qmin, qmax = q.qmin, q.qmax
    zp = _zp(zero_point)
    t = np.asarray(t, dtype=_F32)
    nan = np.isnan(t)
    r = np.clip(np.rint(t), (qmin - zp).astype(_F32), (qmax - zp).astype(_F32))
    r = np.where(nan, _F32(0), r)
    return (r.astype(np.int64) + zp).astype(dtype)


def requantize(v, scale, zero_point, dtype):
    """docs/semantics.md requantize(v, s, zp) with v and s float32."""
    with np.errstate(all="ignore"):
        t = np.divide(np.asarray(v, _F32), np.asarray(scale, _F32), dtype=_F32)
    return round_saturate(t, zero_point, dtype)


def to_float32(a):
    """float32 of an array: float16, bfloat16 and float8_e8m0fnu exactly (from their bits),
    integers rounded to nearest (ties to even)."""
    a = np.asarray(a)
    if a.dtype == BFLOAT16_DTYPE:
        return floatconv.decode(a.view(np.uint16), BFLOAT16)
    if E8M0_DTYPE is not None and a.dtype == E8M0_DTYPE:
        return floatconv.decode_e8m0(a.view(np.uint8))
    return a.astype(_F32)


def round_float32(v, dtype):
    """float32 values rounded once, ties to even, to float32, float16 or bfloat16
    (overflow to inf)."""
    dtype = np.dtype(dtype)
    if dtype == BFLOAT16_DTYPE:
        return floatconv.encode(v, BFLOAT16, saturate=False).view(dtype)
    with np.errstate(over="ignore"):  # float16 overflow to inf is the defined result
        return np.asarray(v, _F32).astype(dtype)


def _dequantize_f32(q, zero_point, scale):
    """float32(int64(q) - int64(zp)) * float32(scale); for a float8/float4 q, its
    code decoded exactly times the scale (its zero point is zero: docs/semantics.md)."""
    q = np.asarray(q)
    if is_qtype(q.dtype) and qtype(q.dtype).is_float:
        fmt = qtype(q.dtype).fmt
        diff = floatconv.decode(q.view(np.uint8), fmt)  # the zero point (zero) is not subtracted
    else:
        diff = (q.astype(np.int64) - _zp(zero_point)).astype(_F32)
    with np.errstate(all="ignore"):
        return np.multiply(diff, to_float32(scale), dtype=_F32)


def quotient(x, scale, precision=None):
    """t = x / scale (docs/semantics.md): float32 division, or with ``precision``
    float16/bfloat16 both operands and the quotient rounded to that type."""
    x32 = to_float32(x)  # float16/bfloat16 exact; int32 round-to-nearest
    s32 = to_float32(scale)
    p = None if precision is None else np.dtype(precision)
    if p is not None and p != np.dtype(_F32):
        x32, s32 = to_float32(round_float32(x32, p)), to_float32(round_float32(s32, p))
    with np.errstate(all="ignore"):
        t = np.divide(x32, s32, dtype=_F32)
    if p is not None and p != np.dtype(_F32):
        t = to_float32(round_float32(t, p))
    return _nan_sign(t, x32, s32)


def _nan_sign(t, x, s):
    """A NaN quotient's sign as docs/semantics.md fixes it, whatever the processor's
    default NaN: x's when x is NaN, else the scale's when it is NaN, else negative
    (0/0, inf/inf; the x86-64 default NaN)."""
    nan = np.isnan(t)
    if not nan.any():
        return t
    x, s = np.broadcast_arrays(x, s)
    negative = np.where(np.isnan(x), np.signbit(x), np.where(np.isnan(s), np.signbit(s), True))
    return np.where(nan, np.where(negative, _NEG_NAN, _POS_NAN), t).astype(_F32)


_POS_NAN, _NEG_NAN = np.array([0x7FC00000, 0xFFC00000], np.uint32).view(_F32)


def quantize_linear(x, scale, zero_point, out, saturate=True, precision=None):
    """Any quantized out.dtype (docs/semantics.md). A float8/float4 zero point is zero
    (the caller refuses a nonzero one); float8 ignores it, float4 adds it in float32
    when given (as ONNX's reference does: a -0 quotient plus a +0 zero point is +0)."""
    q = qtype(out.dtype)
    t = quotient(x, scale, precision)
    if q.is_float:
        if zero_point is not None and q.bits == 4:
            zp = floatconv.decode(np.asarray(zero_point).view(np.uint8), q.fmt)
            with np.errstate(all="ignore"):
                t = np.add(t, zp, dtype=_F32)
        out[...] = floatconv.encode(t, q.fmt, saturate).view(q.dtype)
    else:
        out[...] = round_saturate(t, zero_point, out.dtype)
    return out


def _dynamic_parameters(x32, qmin, qmax):
    """(scale, zero point) of one range: float32 values x32 (1-D), NaN skipped, 0 included."""
    seen = x32[~np.isnan(x32)]
    hi = _F32(max(0.0, float(seen.max()))) if seen.size else _F32(0)
    lo = _F32(min(0.0, float(seen.min()))) if seen.size else _F32(0)
    with np.errstate(all="ignore"):
        span = _F32(1) if hi == lo else np.subtract(hi, lo, dtype=_F32)
        scale = np.divide(span, _F32(qmax - qmin), dtype=_F32)
        zf = np.subtract(_F32(qmin), np.divide(lo, scale, dtype=_F32), dtype=_F32)
    return scale, qmin if np.isnan(zf) else int(np.rint(min(max(float(zf), qmin), qmax)))


def dynamic_quantize_linear(x, out_dtype, per_row=False):
    """(y, scale, zero point) of docs/semantics.md's dynamic_quantize_linear, one float32
    step at a time on NumPy scalars: the range over x's non-NaN values with 0, the scale,
    the zero point, then :func:`quantize_linear`. With ``per_row``, one range per row (every
    index of x's leading axes, along the last one): scale and zero point of x's shape with 1
    as the last dimension."""
    x32 = to_float32(x)
    info = np.iinfo(out_dtype)
    qmin, qmax = int(info.min), int(info.max)
    if per_row:
        rows = x32.reshape(-1, x32.shape[-1]) if x32.size else np.zeros((int(np.prod(x32.shape[:-1])), 0), _F32)
        both = [_dynamic_parameters(r, qmin, qmax) for r in rows]
        shape = x32.shape[:-1] + (1,)
        scale = np.array([s for s, _ in both], _F32).reshape(shape)
        zp = np.array([z for _, z in both], np.int64).astype(out_dtype).reshape(shape)
    else:
        s, z = _dynamic_parameters(x32.reshape(-1), qmin, qmax)
        scale, zp = np.array(s, _F32), np.array(z, out_dtype)
    y = quantize_linear(x, scale, zp, np.empty(np.shape(x), out_dtype))
    return y, scale, zp


def dequantize_linear(q, scale, zero_point, out):
    out[...] = round_float32(_dequantize_f32(q, zero_point, scale), out.dtype)
    return out


def expand_blocks(v, shape, axis, block_size):
    """A blocked scale or zero point (``ceil(D / block_size)`` entries on ``axis``)
    repeated to ``shape``: element i along the axis takes entry i // block_size."""
    if v is None:
        return None
    v = np.asarray(v)
    return np.repeat(v, block_size, axis=axis)[(slice(None),) * axis + (slice(0, shape[axis]),)]


def quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                  out_scale, out_zero_point, out):
    av = _dequantize_f32(a, a_zero_point, np.asarray(a_scale).reshape(()))
    bv = _dequantize_f32(b, b_zero_point, np.asarray(b_scale).reshape(()))
    with np.errstate(all="ignore"):
        v = np.add(av, bv, dtype=_F32)
    zp = None if out_zero_point is None else np.asarray(out_zero_point).reshape(())
    out[...] = requantize(v, np.asarray(out_scale).reshape(()), zp, out.dtype)
    return out


def _exact_matmul(da, db):
    """The exact integer product of two int64 arrays (numpy.matmul shapes), as int64.

    Through float64 (BLAS) while every partial sum stays an integer below 2**53,
    otherwise in int64 arithmetic (exact while |sum| < 2**63)."""
    k = da.shape[-1]
    bound = max(int(np.abs(da).max(initial=0)), 1) * max(int(np.abs(db).max(initial=0)), 1) * max(k, 1)
    if bound < 2**53:
        return np.matmul(da.astype(np.float64), db.astype(np.float64)).astype(np.int64)
    if bound < 2**63:
        return np.matmul(da, db)
    return np.matmul(da.astype(object), db.astype(object))  # 32-bit inputs (descriptors): Python ints


def _f32_of_int(n: int) -> float:
    """A Python int rounded to float32 once (ties to even), as a float."""
    if -2**24 <= n <= 2**24:
        return float(n)
    mag = abs(n)
    shift = mag.bit_length() - 24
    q, r = divmod(mag, 1 << shift)
    half = 1 << (shift - 1)
    q += r > half or (r == half and q & 1)
    return float(q << shift) if n > 0 else -float(q << shift)


def _sums_f32(acc):
    """float32(acc), each exact sum rounded once."""
    if acc.dtype == object:
        return np.vectorize(_f32_of_int, otypes=[np.float64])(acc).astype(_F32)
    return acc.astype(_F32)


def _per_k(param, k, block_size):
    """A B-side parameter shaped (..., G, N) (G groups along K, or G = 1) as (..., K, N)."""
    p = np.asarray(param)
    if p.ndim < 2 or p.shape[-2] == 1:
        return p
    return np.repeat(p, block_size, axis=-2)[..., :k, :]


def _diff(x, zero_point):
    """int64(x) - int64(zero_point) (x may be an ml_dtypes int4/uint4 array)."""
    return np.asarray(x).astype(np.int64) - _zp(zero_point)


def unpacked(b, b_packed):
    """b, or with b_packed = (dtype name, shape, zp_wide[, kmajor]) the packed bytes b unpacked
    (ml_dtypes; K-major bytes: the transposed view, dmlq.packing.unpack_b)."""
    return b if b_packed is None else unpack_b(b, b_packed)


def matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None):
    """docs/semantics.md matmul_integer: the exact sum, wrapped to int32. b_packed: b
    is a packed 4-bit tensor's bytes (dmlq.packed_b)."""
    b = unpacked(b, b_packed)
    acc = _exact_matmul(_diff(a, a_zero_point), _diff(b, b_zero_point))
    if acc.dtype == object:
        acc = ((acc + 2**31) % 2**32 - 2**31).astype(np.int64)
    out[...] = acc.astype(np.int32)  # two's complement wrap where the sum does not fit
    return out


def matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                            block_size=None, b_packed=None):
    """docs/semantics.md matmul_integer_to_float.

    a_scale, a_zero_point: () or (M, 1), or per batch and row (..., M, 1); b_scale,
    b_zero_point: () or (..., G, N)
    with G = 1, or G = ceil(K / block_size) groups along K; bias: None or
    broadcastable to out."""
    b = unpacked(b, b_packed)
    k = np.shape(a)[-1]
    da = _diff(a, a_zero_point)
    a_s = np.asarray(a_scale).astype(_F32)
    b_s = np.asarray(b_scale).astype(_F32)
    with np.errstate(all="ignore"):
        if block_size is None:
            db = _diff(b, b_zero_point)
            mult = np.multiply(a_s, b_s, dtype=_F32)
            v = np.multiply(_sums_f32(_exact_matmul(da, db)), mult, dtype=_F32)
        else:
            db = _diff(b, None if b_zero_point is None else _per_k(b_zero_point, k, block_size))
            v = None
            for g, start in enumerate(range(0, k, block_size)):
                sl = slice(start, min(start + block_size, k))
                s_g = b_s[..., g:g + 1, :] if b_s.ndim >= 2 and b_s.shape[-2] > 1 else b_s
                term = np.multiply(_sums_f32(_exact_matmul(da[..., sl], db[..., sl, :])),
                                   np.multiply(a_s, s_g, dtype=_F32), dtype=_F32)
                v = term if v is None else np.add(v, term, dtype=_F32)
            if v is None:  # K = 0: no groups, the empty sum +0.0
                v = np.zeros(out.shape, _F32)
        if bias is not None:
            v = np.add(v, np.asarray(bias).astype(_F32), dtype=_F32)
        out[...] = np.broadcast_to(v, out.shape).astype(out.dtype)  # float16: rounded once, inf past 65504
    return out


def _column(v):
    """A per-tensor (length 1) or per-row (length M) 1-D array as shape (n, 1); per batch
    and row, (..., M, 1), as it is."""
    if v is None:
        return None
    v = np.asarray(v)
    return v if v.ndim >= 2 else v.reshape(-1, 1)


def _b_row(v):
    """A per-tensor or per-column 1-D array as (1, N); per batch, (..., 1, N), as it is."""
    v = np.asarray(v)
    return v if v.ndim >= 2 else v.reshape(1, -1)


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                     out_scale, out_zero_point, out, b_packed=None):
    a = np.asarray(a)
    b = np.asarray(unpacked(b, b_packed))
    k = a.shape[-1]
    # The exact integer sum from a float64 product: every partial sum is an
    # integer below 2**53 while K * 255 * 255 < 2**53.
    assert k * 255 * 255 < 2**53
    da = (a.astype(np.int64) - _zp(_column(a_zero_point))).astype(np.float64)
    db = (b.astype(np.int64) - _zp(None if b_zero_point is None
                                   else _b_row(b_zero_point))).astype(np.float64)
    acc = np.matmul(da, db)
    with np.errstate(all="ignore"):
        mult = np.divide(
            np.multiply(_column(a_scale).astype(_F32), _b_row(b_scale).astype(_F32), dtype=_F32),
            _column(out_scale).astype(_F32), dtype=_F32)
        t = np.multiply(acc.astype(_F32), mult, dtype=_F32)
    out[...] = round_saturate(t, _column(out_zero_point), out.dtype)
    return out


def _tap_counts(in_size, out_size, window, stride, start_pad, dilation, lo, hi):
    """Per output index: how many of its taps fall in [lo, hi) (input coords)."""
    o = np.arange(out_size, dtype=np.int64) * stride - start_pad
    count = np.zeros(out_size, dtype=np.int64)
    for k in range(window):
        tap = o + k * dilation
        count += (tap >= lo) & (tap < hi)
    return count


def _tap_outputs(in_size, out_size, stride, offset):
    """The outputs o whose tap ``o * stride + offset`` lies inside the input, as a
    slice of outputs and the slice of input positions they read (None: none)."""
    first = max(0, -(offset // stride))                     # ceil(-offset / stride)
    last = min(out_size - 1, (in_size - 1 - offset) // stride)
    if first > last:
        return None
    return slice(first, last + 1), slice(first * stride + offset, last * stride + offset + 1, stride)


def quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out,
                       window_size, strides, start_padding, end_padding, dilations,
                       include_padding):
    x = np.asarray(x)
    nd = x.ndim - 2
    in_sp, out_sp = x.shape[2:], out.shape[2:]

    def per_channel(v):
        return None if v is None else np.asarray(v).reshape((1, -1) + (1,) * nd)

    # x - zp fits int16. A tap outside the input (in padding) adds nothing, so each tap
    # adds only over the outputs whose tap lies inside: no padded copy of x, whatever
    # the padding and strides (memory: x, its differences and the int64 sums).
    d = (x.astype(np.int16) - _zp(per_channel(x_zero_point)).astype(np.int16))
    total = np.zeros(out.shape, dtype=np.int64)
    for k in itertools.product(*(range(w) for w in window_size)):
        spans = [_tap_outputs(in_sp[i], out_sp[i], strides[i], k[i] * dilations[i] - start_padding[i])
                 for i in range(nd)]
        if None in spans:
            continue
        total[(Ellipsis,) + tuple(o for o, _ in spans)] += d[(Ellipsis,) + tuple(t for _, t in spans)]

    # Tap counts are separable: the product of per-dimension counts.
    count = np.ones((1, 1) + (1,) * nd, dtype=np.int64)
    for i in range(nd):
        lo, hi = (-start_padding[i], in_sp[i] + end_padding[i]) if include_padding else (0, in_sp[i])
        c = _tap_counts(in_sp[i], out_sp[i], window_size[i], strides[i], start_padding[i],
                        dilations[i], lo, hi)
        count = count * c.reshape((1, 1) + tuple(-1 if j == i else 1 for j in range(nd)))

    with np.errstate(all="ignore"):
        v = np.divide(np.multiply(total.astype(_F32), per_channel(x_scale).astype(_F32), dtype=_F32),
                      count.astype(_F32), dtype=_F32)
    res = requantize(v, per_channel(out_scale), per_channel(out_zero_point), out.dtype)
    zp_full = np.broadcast_to(_zp(per_channel(out_zero_point)), out.shape).astype(out.dtype)
    out[...] = np.where(np.broadcast_to(count == 0, out.shape), zp_full, res)
    return out
