"""Quantize, dequantize and quantized add on the CPU, chunk by chunk.

Operands are broadcast to the output's shape (views), coalesced to the fewest
dimensions (tiles.coalesce: a contiguous call becomes 1-D) and cut into
chunks of ``tiles.CHUNK`` elements. Each chunk runs a few in-place NumPy ufuncs
on a scratch buffer that stays in cache, in the float32 order of
docs/semantics.md, then requant.finish. Per chunk, per pass: one ufunc call.

Why each step equals dmlq.reference's:
- ``np.divide(x, s, dtype=float32)`` widens float16 exactly and rounds int32
  to float32 (ties to even) before the one float32 division, as the
  reference's ``astype(float32)`` does.
- dequantize: for 8- and 16-bit q, ``float32(q) - float32(zp)`` is exact
  (both below 2**17 in magnitude), so it equals ``float32(int64(q - zp))``;
  for 32-bit q the difference is taken in float64 (exact below 2**53) and
  rounded to float32 once, like the int64 -> float32 conversion.
- quantized add: ``a - a_zp`` is exact in float32 (|.| <= 255).
"""
from __future__ import annotations

import numpy as np

from .. import reference as _reference
from . import jit, tiles
from .requant import F32, finish, zp_value

F16, F64 = np.dtype(np.float16), np.dtype(np.float64)
_QUANT = (np.dtype(np.int8), np.dtype(np.uint8))
_NARROW = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16"))
_WIDE = (np.dtype(np.int32), np.dtype(np.uint32))


def _operands(out, *arrays):
    """(shape, out view, operand views, index list): broadcast and coalesced."""
    full = tuple(None if a is None else np.broadcast_to(a, out.shape) for a in arrays)
    present = [a for a in full if a is not None]
    shape, views = tiles.coalesce(out.shape, out, *present)
    it = iter(views[1:])
    return shape, views[0], tuple(None if a is None else next(it) for a in full), tiles.blocks(shape)


def _run_of(out, a):
    """``a`` as the one 1-D contiguous run that :func:`_operands` coalesces it to when ``a``
    and ``out`` are C-contiguous arrays of one shape with more than one element (a
    view, made without broadcasting); None otherwise, for :func:`_operands` to decide."""
    if a.shape == out.shape and out.size > 1 and a.flags.c_contiguous and out.flags.c_contiguous:
        return a.reshape(-1)
    return None


def _overlaps(out, *arrays):
    return any(a is not None and np.may_share_memory(a, out) for a in arrays)


def _through_temporary(fn, out, args):
    """An ``out`` that shares memory with an input: compute into a new array first."""
    tmp = np.empty(out.shape, out.dtype)
    fn(*args, tmp)
    out[...] = tmp
    return out


def quantize_linear(x, scale, zero_point, out, *extra, **kw):
    x, scale = np.asarray(x), np.asarray(scale)
    if (extra or kw or out.dtype not in _QUANT or x.dtype not in (F32, F16, np.dtype(np.int32))
            or scale.dtype not in (F32, F16)):
        return _reference.quantize_linear(x, scale, zero_point, out, *extra, **kw)
    if _overlaps(out, x, scale, zero_point):
        return _through_temporary(quantize_linear, out, (x, scale, zero_point))
    zp = zp_value(zero_point)
    if zp is not None and scale.size == 1 and x.dtype != F16 and jit.active():
        xv = _run_of(out, x)  # the fused kernel's operands without broadcasting and coalescing
        if xv is not None:
            jit.quantize(xv, np.float32(scale.reshape(-1)[0]), zp, out.reshape(-1), tiles.run_pieces)
            return out
    shape, o, (xv, sv, zv), pieces = _operands(out, x, scale, None if zp is not None else zero_point)
    if (zp is not None and scale.size == 1 and x.dtype != F16 and len(shape) == 1
            and jit.flat(o, xv) and jit.active()):
        jit.quantize(xv, np.float32(scale.reshape(-1)[0]), zp, o, tiles.run_pieces)
        return out

    def work(group):
        t, mask = tiles.scratch(F32), tiles.scratch(np.bool_)
        for ix in group:
            bs = tiles.block_shape(shape, ix)
            tb, mb = tiles.shaped(t, bs), tiles.shaped(mask, bs)
            np.divide(xv[ix], sv[ix], out=tb, dtype=F32)
            finish(tb, zp if zp is not None else zv[ix], o[ix], mb)

    with np.errstate(all="ignore"):
        tiles.run_pieces(work, pieces)
    return out


def dequantize_linear(q, scale, zero_point, out, *extra, **kw):
    q, scale = np.asarray(q), np.asarray(scale)
    if (extra or kw or out.dtype not in (F32, F16) or q.dtype not in _NARROW + _WIDE
            or scale.dtype not in (F32, F16) or (zero_point is not None and zero_point.dtype != q.dtype)):
        return _reference.dequantize_linear(q, scale, zero_point, out, *extra, **kw)
    if _overlaps(out, q, scale, zero_point):
        return _through_temporary(dequantize_linear, out, (q, scale, zero_point))
    wide = q.dtype in _WIDE
    zp = zp_value(zero_point)
    if zp is not None:  # one value: a NumPy scalar, exact in the type the difference is taken in
        zero_point = None if zp == 0 else (np.float64(zp) if wide else np.float32(zp))
        if scale.size == 1 and out.dtype == F32 and jit.active():
            qv = _run_of(out, q)  # the fused kernel's operands without broadcasting and coalescing
            if qv is not None:
                jit.dequantize(qv, zp, np.float32(scale.reshape(-1)[0]), out.reshape(-1), tiles.run_pieces)
                return out
    shape, o, (qv, sv, zv), pieces = _operands(out, q, scale, None if zp is not None else zero_point)
    if zp is not None:
        zv = zero_point
    if (zp is not None and scale.size == 1 and out.dtype == F32 and len(shape) == 1
            and jit.flat(o, qv) and jit.active()):
        jit.dequantize(qv, zp, np.float32(scale.reshape(-1)[0]), o, tiles.run_pieces)
        return out
    direct = out.dtype == F32  # float32 results go straight into out

    def work(group):
        t = None if direct else tiles.scratch(F32)
        d64 = tiles.scratch(F64) if wide and zv is not None else None
        for ix in group:
            bs = tiles.block_shape(shape, ix)
            tb = o[ix] if direct else tiles.shaped(t, bs)
            if zv is None:
                np.multiply(qv[ix], sv[ix], out=tb, dtype=F32)
            else:
                if wide:
                    db = tiles.shaped(d64, bs)
                    np.subtract(qv[ix], zv if zp is not None else zv[ix], out=db, dtype=F64)
                    np.copyto(tb, db, casting="same_kind")
                else:  # widen, then subtract in place: cheaper than a casting subtract
                    np.copyto(tb, qv[ix], casting="unsafe")
                    np.subtract(tb, zv if zp is not None else zv[ix], out=tb, dtype=F32)
                np.multiply(tb, sv[ix], out=tb, dtype=F32)
            if not direct:
                np.copyto(o[ix], tb, casting="same_kind")

    with np.errstate(all="ignore"):
        tiles.run_pieces(work, pieces)
    return out


def _flat_operand(view, array):
    """A coalesced 1-D operand as the fused kernels take it: the contiguous view, or
    the one element of a broadcast size-1 array; None otherwise."""
    if jit.flat(view):
        return view
    return array.reshape(1) if array.size == 1 else None


def _scalar(v):
    return np.asarray(v, F32).reshape(())


def quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out,
                  *extra, **kw):
    a, b = np.asarray(a), np.asarray(b)
    params = (a_scale, b_scale, out_scale)
    if (extra or kw or out.dtype not in _QUANT or a.dtype not in _QUANT or b.dtype not in _QUANT
            or any(np.asarray(p).dtype != F32 for p in params)):
        return _reference.quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                                        out_zero_point, out, *extra, **kw)
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point)
    if _overlaps(out, a, b):
        return _through_temporary(quantized_add, out, args)
    a_s, b_s, o_s = (_scalar(p) for p in params)
    a_zp, b_zp, o_zp = (zp_value(z) for z in (a_zero_point, b_zero_point, out_zero_point))
    if None in (a_zp, b_zp, o_zp):  # a zero point of several elements: not quantized add's contract
        return _reference.quantized_add(*args, out)
    tried = False
    if jit.active():  # the fused kernel's operands without broadcasting and coalescing, where they are runs
        fa, fb = _run_of(out, a), _run_of(out, b)
        if fb is None and fa is not None and b.size == 1:
            fb = b.reshape(1)
        elif fa is None and fb is not None and a.size == 1:
            fa = a.reshape(1)
        if fa is not None and fb is not None:
            if jit.add(fa, a_zp, a_s, fb, b_zp, b_s, o_s, o_zp, out.reshape(-1), tiles.run_pieces):
                return out
            tried = True  # the parameters rule the kernel out: the NumPy path
    shape, o, (av, bv), pieces = _operands(out, a, b)
    if not tried and len(shape) == 1 and jit.flat(o) and jit.active():
        fa, fb = _flat_operand(av, a), _flat_operand(bv, b)
        if fa is not None and fb is not None and jit.add(fa, a_zp, a_s, fb, b_zp, b_s, o_s, o_zp, o,
                                                         tiles.run_pieces):
            return out

    def side(src, zp, s, dst):
        if zp:
            np.copyto(dst, src, casting="unsafe")  # exact: int8/uint8 in float32
            np.subtract(dst, np.float32(zp), out=dst)
            np.multiply(dst, s, out=dst)
        else:
            np.multiply(src, s, out=dst, dtype=F32)

    def work(group):
        t, u, mask = tiles.scratch(F32), tiles.scratch(F32), tiles.scratch(np.bool_)
        for ix in group:
            bs = tiles.block_shape(shape, ix)
            tb, ub = tiles.shaped(t, bs), tiles.shaped(u, bs)
            side(av[ix], a_zp, a_s, tb)
            side(bv[ix], b_zp, b_s, ub)
            np.add(tb, ub, out=tb)
            np.divide(tb, o_s, out=tb)
            finish(tb, o_zp, o[ix], tiles.shaped(mask, bs))

    with np.errstate(all="ignore"):
        tiles.run_pieces(work, pieces)
    return out
