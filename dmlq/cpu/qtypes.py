"""quantize_linear / dequantize_linear on the CPU for every type of dmlq.qtypes (int16 ...
float4_e2m1fn), per tensor, per axis and blocked: dmlq.quant's NumPy path runs here.

The tensor is seen as (outer, D, inner) around the parameter axis (per tensor: ``outer`` = the
element count, D = inner = 1) and cut into pieces of whole ``outer`` rows of about
``tiles.CHUNK`` elements, run on ``tiles.THREADS`` threads, written straight into ``out``:
- with numba (the ``[fast]`` extra; dmlq.cpu.jit.active()): dmlq.cpu.jit_qtypes' kernels,
  which read the compact parameters (a blocked scale is never expanded), once per block;
- without it (or for what the kernels do not take: a ``precision`` other than float32, a float4
  zero point, parameters broadcast along several axes, 32-bit q): dmlq.reference on each
  piece, with only that piece's parameters expanded.
Either way the result is dmlq.reference's bit for bit (tests/test_cpu_qtypes.py runs both
against it, and the float8/float4 encoder on all 65,536 float16 values and a float32 sample).
"""
from __future__ import annotations

import math

import numpy as np

from .. import floatconv, reference
from ..qtypes import BFLOAT16, FloatFormat, is_qtype, qtype
from . import jit, tiles

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
_SPECIAL = {"ieee": 0, "fn": 1, "fnuz": 2, "none": 3}
_F16_FMT = FloatFormat(5, 10, 15, "ieee")


class Walk:
    """(outer, D, inner) of a tensor around its parameter axis, the block size B and each
    parameter's strides (so, sb, si) over (outer, block, inner), in elements."""

    def __init__(self, shape, form, ax, block, params):
        n = math.prod(shape)
        self.per_tensor = form == "broadcast" or all(p is None or p.size == 1 for p in params)
        if self.per_tensor:  # one value each
            self.outer, self.D, self.inner, self.B = n, 1, 1, 1
            self.strides = [(0, 0, 0)] * len(params)
            return
        self.outer, self.D = math.prod(shape[:ax]), shape[ax]
        self.inner = math.prod(shape[ax + 1:])
        self.B = block if form == "blocked" else 1
        S = -(-self.D // self.B)
        full = (S * self.inner, self.inner, 1) if form == "blocked" else (0, 1, 0)
        self.strides = [(0, 0, 0) if p is None or p.size == 1 else full for p in params]

    def pieces(self, size=None):
        """Row ranges (o0, o1) of about ``size`` (default tiles.CHUNK) elements each."""
        row = max(1, self.D * self.inner)
        step = max(1, (size or tiles.CHUNK) // row)
        return [(o, min(o + step, self.outer)) for o in range(0, self.outer, step)]

    def expand(self, p, strides, o0, o1):
        """Parameter ``p`` for rows [o0, o1) broadcastable to (o1 - o0, D, inner) (the NumPy path)."""
        if p is None:
            return None
        if strides == (0, 0, 0):
            return np.asarray(p).reshape(())
        if strides[0] == 0:  # per axis
            return np.asarray(p).reshape(1, self.D, 1)
        S = -(-self.D // self.B)
        rows = np.asarray(p).reshape(self.outer, S, self.inner)[o0:o1]
        return np.repeat(rows, self.B, axis=1)[:, :self.D]


def _rows(a, walk, o0, o1):
    return a.reshape(walk.outer, walk.D, walk.inner)[o0:o1]


def _fits(x_shape, shape, form, scale, zero_point):
    """Whether the call is walked here (else the reference runs it whole)."""
    if tuple(x_shape) != tuple(shape) or 0 in shape:
        return False
    return form != "broadcast" or (scale.size == 1 and (zero_point is None or np.asarray(zero_point).size == 1))


def _flat_params(scale, zero_point):
    """scale and zero point as 1-D float32 arrays (copies only where the dtype changes; every
    zero point of a type up to 16 bits is exact in float32)."""
    scale = np.asarray(scale)
    sc = np.ascontiguousarray(scale if scale.dtype == F32 else reference.to_float32(scale), F32).reshape(-1)
    zp = np.zeros(1, F32) if zero_point is None else \
        np.ascontiguousarray(np.asarray(zero_point).astype(np.int32).astype(F32)).reshape(-1)
    return sc, zp


def _kernel_pieces(walk, n):
    """The kernels' pieces: no scratch to keep in cache, so a few per thread (a thread the OS
    delays then holds up the call by one piece), each at least tiles.CHUNK elements."""
    return walk.pieces(max(tiles.CHUNK, n // (4 * tiles.THREADS)))


def _args(walk, o0, o1, n):
    """(o0, o1, D, B) for a kernel on rows [o0, o1) of the whole tensor, and the element range
    (lo, hi) of its flat operands: per tensor the rows are flat elements, one run (D = B)."""
    if walk.per_tensor:
        return (0, 1, o1 - o0, o1 - o0), (o0, o1)
    return (o0, o1, walk.D, walk.B), (0, n)


# ------------------------------------------------------------------ quantize

def quantize(x, scale, zero_point, form, ax, block, out, saturate=True, precision=None):
    """out (any type of dmlq.qtypes, C-contiguous) = quantize(x) with ``scale`` and
    ``zero_point`` in ``form`` (dmlq.quant.param_form: "blocked", "axis" or "broadcast")."""
    q = qtype(out.dtype)
    if not _fits(x.shape, out.shape, form, scale, zero_point):
        return reference.quantize_linear(np.broadcast_to(x, out.shape), *_whole(out.shape, form, ax, block,
                                                                                  scale, zero_point), out,
                                         saturate, precision)
    walk = Walk(out.shape, form, ax, block, (scale, zero_point))
    fast = (jit.active() and (precision is None or np.dtype(precision) == F32)
            and not (q.is_float and q.bits == 4 and zero_point is not None))
    if not fast:
        def work(group):
            for o0, o1 in group:
                reference.quantize_linear(_rows(x, walk, o0, o1), walk.expand(scale, walk.strides[0], o0, o1),
                                          walk.expand(zero_point, walk.strides[1], o0, o1),
                                          _rows(out, walk, o0, o1), saturate, precision)
        tiles.run_pieces(work, walk.pieces())
        return out
    k = jit.kernels_of("jit_qtypes")
    xf = x.reshape(-1) if x.dtype == F32 and x.flags.c_contiguous else reference.to_float32(x).reshape(-1)
    sc, zp = _flat_params(scale, zero_point)
    (so, sb, si), zs = walk.strides
    zvar = zs != (0, 0, 0)
    if zvar and (so, sb, si) == (0, 0, 0):  # one scale, a zero point per block or index: give the scale its layout
        sc, (so, sb, si) = np.full(zp.size, sc[0], F32), zs
    inner, n = walk.inner, out.size
    if q.is_float:
        fmt = q.fmt
        codes = out.reshape(-1).view(np.uint8)
        top = float(floatconv.decode(np.array([fmt.max_code], np.uint8), fmt)[0])
        fc, ic = k.round_constants(fmt.exp_bits, fmt.man_bits, fmt.bias, _SPECIAL[fmt.special], fmt.max_code, top,
                                   bool(saturate))

        def work(group):
            for o0, o1 in group:
                (a, b, D, B), (lo, hi) = _args(walk, o0, o1, n)
                k.quantize_float(xf[lo:hi], sc, a, b, D, inner, B, so, sb, si, fc, ic, codes[lo:hi])
    else:
        codes = out.reshape(-1).view(np.uint16 if q.bits == 16 else np.uint8)
        iargs = (zvar, q.qmin, q.qmax, np.int32((1 << q.bits) - 1))

        def work(group):
            for o0, o1 in group:
                (a, b, D, B), (lo, hi) = _args(walk, o0, o1, n)
                k.quantize_int(xf[lo:hi], sc, zp, a, b, D, inner, B, so, sb, si, *iargs, codes[lo:hi])
    tiles.run_pieces(work, _kernel_pieces(walk, n))
    return out


def _whole(shape, form, ax, block, scale, zero_point):
    """The reference's parameters for a call run whole (broadcast forms, size 0)."""
    if form == "broadcast":
        return scale, zero_point
    walk = Walk(shape, form, ax, block, (scale, zero_point))
    return _expanded(walk, scale, 0, shape), _expanded(walk, zero_point, 1, shape)


def _expanded(walk, p, i, shape):
    if p is None:
        return None
    e = walk.expand(p, walk.strides[i], 0, walk.outer)
    return e if e.ndim == 0 else np.broadcast_to(e, (walk.outer, walk.D, walk.inner)).reshape(shape)


# ------------------------------------------------------------------ dequantize

def _table(q):
    if q is not None and q.is_float:
        return floatconv._decode_table(q.fmt).view(np.float32)
    return np.empty(0, np.float32)


def dequantize(qv, scale, zero_point, form, ax, block, out):
    """out (float32, float16 or bfloat16, C-contiguous) = dequantize(qv) (see :func:`quantize`)."""
    qt = qtype(qv.dtype) if is_qtype(qv.dtype) else None
    if not _fits(qv.shape, out.shape, form, scale, zero_point):
        return reference.dequantize_linear(np.broadcast_to(qv, out.shape), *_whole(out.shape, form, ax, block, scale, zero_point), out)
    walk = Walk(out.shape, form, ax, block, (scale, zero_point))
    if not (jit.active() and qt is not None):  # 32-bit q: the reference, piece by piece
        def work(group):
            for o0, o1 in group:
                reference.dequantize_linear(_rows(qv, walk, o0, o1), walk.expand(scale, walk.strides[0], o0, o1),
                                            walk.expand(zero_point, walk.strides[1], o0, o1),
                                            _rows(out, walk, o0, o1))
        tiles.run_pieces(work, walk.pieces())
        return out
    k = jit.kernels_of("jit_qtypes")
    flat = np.ascontiguousarray(qv).reshape(-1)
    codes = flat.view(np.uint8) if qt.bits < 8 or qt.is_float else flat
    sbits = qt.bits if qt.bits < 8 and qt.qmin is not None and qt.qmin < 0 else 0
    # a 4-/2-bit element is its byte's low bits (as ml_dtypes reads them and dmlq.pack packs them;
    # a view of other bytes, e.g. int8 -3 as int4, may hold more): the kernel masks each code
    cmask = np.int32((1 << qt.bits) - 1 if qt.bits < 8 else -1)
    table = _table(qt)
    sc, zp = _flat_params(scale, zero_point)
    (so, sb, si), (zo, zb, zi) = walk.strides
    inner, n = walk.inner, out.size
    y = out.reshape(-1)
    nf = None if out.dtype == F32 else (_F16_FMT if out.dtype == F16 else BFLOAT16)
    narrow = None if nf is None else k.encoder_constants(nf.exp_bits, nf.man_bits, nf.bias, 0, nf.max_code, False)

    row = walk.D * inner

    def work(group):
        buf = None
        for o0, o1 in group:
            (a, b, D, B), (lo, hi) = _args(walk, o0, o1, n)
            # the piece's elements in out: [w0, w1); the kernel writes element e at e - off
            w0, w1 = (lo, hi) if walk.per_tensor else (o0 * row, o1 * row)
            off = 0 if walk.per_tensor else w0
            if narrow is None:
                k.dequantize(codes[lo:hi], table, sbits, cmask, sc, zp, a, b, D, inner, B, so, sb, si, zo, zb, zi, off,
                             y[w0:w1])
                continue
            if buf is None or buf.size < w1 - w0:
                buf = tiles.scratch(F32, w1 - w0)
            k.dequantize(codes[lo:hi], table, sbits, cmask, sc, zp, a, b, D, inner, B, so, sb, si, zo, zb, zi, off,
                         buf[:w1 - w0])
            k.round_to(buf[:w1 - w0], narrow, y[w0:w1].view(np.uint16))
    tiles.run_pieces(work, walk.pieces())
    return out
