"""Quantized average pooling on the CPU: separable strided window sums per tile.

The output is cut into tiles (one image, a block of channels, a block of
positions along the first spatial dimension). For each tile the padded input
region it reads is built once as ``x - x_zp`` (zeros where the window leaves
the input, so those taps add nothing), and the window sum is taken one spatial
axis at a time, last axis first: ``S = sum_kh (sum_kw d[oh*sh + kh*dh, ow*sw + kw*dw])``,
``window_h + window_w`` strided adds per output instead of ``window_h * window_w``.

Exactness: ``|x - x_zp| <= 255``, so every partial sum of a window with ``T``
taps is an integer of magnitude at most ``255 * T``. The sums run in float32
when ``255 * T <= 2**24`` (exact, whatever the order) and in float64 otherwise
(exact below 2**53), so S is the exact integer sum; converting it to float32
rounds it the way the reference's int64 -> float32 conversion does.

Then the reference's order in float32: ``v = (float32(S) * x_scale) /
float32(count)``, ``t = v / out_scale``, requant.finish. A window entirely in
padding has ``S = 0`` and ``count = 0``: ``v = 0 / 0`` (or ``(0 * inf) / 0``)
is NaN, which requantizes to the output zero point, the value docs/semantics.md
gives such a window.
"""
from __future__ import annotations

import math

import numpy as np

from .. import reference as _reference
from . import tiles
from .requant import F32, finish, zp_value

F64 = np.dtype(np.float64)
_QUANT = (np.dtype(np.int8), np.dtype(np.uint8))
TILE_ELEMENTS = 1 << 18  # input-region elements per tile (1 MiB of float32)


def tap_counts(in_size, out_size, window, stride, start, dilation, lo, hi):
    """Per output index o: how many of its taps ``o * stride - start + k * dilation``
    (k < window) lie in ``[lo, hi)``."""
    base = np.arange(out_size, dtype=np.int64) * stride - start
    first = np.maximum(0, -((base - lo) // dilation))          # ceil((lo - base) / dilation)
    last = np.minimum(window - 1, (hi - 1 - base) // dilation)  # floor((hi - 1 - base) / dilation)
    return np.maximum(last - first + 1, 0)


def _sparse(in_sp, out_sp, window, strides, dil):
    """Whether the smallest region a tile reads (one output row's window extent along
    the first spatial dimension, the whole padded output span along the others) is
    mostly positions no window reads and larger than a tile: huge padding with large
    strides or dilations. Such a call goes to dmlq.reference, whose sums add only the
    taps inside the input (memory: the input and the output, never the padded span)."""
    extent0 = (window[0] - 1) * dil[0] + 1
    rest = math.prod((o - 1) * s + (w - 1) * d + 1 for o, s, w, d in zip(out_sp[1:], strides[1:], window[1:],
                                                                         dil[1:]))
    return extent0 * rest > max(TILE_ELEMENTS, 4 * (math.prod(in_sp) + math.prod(out_sp)))


def _per_channel(v, c0, c1, nd, dtype):
    """A per-tensor (scalar of ``dtype``) or per-channel parameter for channels [c0, c1)."""
    v = np.asarray(v).reshape(-1)
    if v.size == 1:
        return v.astype(dtype)[0]
    return v[c0:c1].astype(dtype).reshape((-1,) + (1,) * nd)


def quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size, strides,
                       start_padding, end_padding, dilations, include_padding, *extra, **kw):
    x = np.asarray(x)
    args = (x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size, strides, start_padding,
            end_padding, dilations, include_padding)
    taps = math.prod(window_size)
    if (extra or kw or x.dtype not in _QUANT or out.dtype not in _QUANT or taps * 255 >= 2**53
            or any(np.asarray(s).dtype != F32 for s in (x_scale, out_scale))):
        return _reference.quantized_avg_pool(*args, *extra, **kw)
    if np.may_share_memory(x, out):
        tmp = np.empty(out.shape, out.dtype)
        quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, tmp, *args[6:])
        out[...] = tmp
        return out
    if out.size == 0:
        return out
    if _sparse(x.shape[2:], out.shape[2:], window_size, strides, dilations):
        return _reference.quantized_avg_pool(*args)
    _Pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size, strides, start_padding,
          end_padding, dilations, include_padding, taps).run()
    return out


class _Pool:
    def __init__(self, x, x_scale, x_zp, o_scale, o_zp, out, window, strides, start, end, dil, incl, taps):
        self.x, self.out = x, out
        self.nd = nd = x.ndim - 2
        self.in_sp, self.out_sp = x.shape[2:], out.shape[2:]
        self.w, self.s, self.p, self.d = window, strides, start, dil
        self.x_scale, self.x_zp, self.o_scale, self.o_zp = x_scale, x_zp, o_scale, o_zp
        self.sum_dtype = F32 if taps * 255 <= 2**24 else F64
        counts = []
        for i in range(nd):
            lo, hi = (-start[i], self.in_sp[i] + end[i]) if incl else (0, self.in_sp[i])
            counts.append(tap_counts(self.in_sp[i], self.out_sp[i], window[i], strides[i], start[i], dil[i],
                                     lo, hi).astype(F64))
        self.count0 = counts[0]
        rest = np.ones((), F64)
        for c in counts[1:]:
            rest = np.multiply.outer(rest, c)   # exact: counts are small integers, products < 2**53
        self.count_rest = rest
        # the padded region a tile reads: along dimension i >= 1 the whole output row's span
        self.span = [(self.out_sp[i] - 1) * strides[i] + (window[i] - 1) * dil[i] + 1 for i in range(nd)]
        rest_elems = math.prod(self.span[1:])
        n, c = x.shape[:2]
        plane = self.span[0] * rest_elems
        if plane <= TILE_ELEMENTS:
            cb, rows = max(1, min(c, TILE_ELEMENTS // plane)), self.out_sp[0]
        else:
            cb = 1
            rows = max(1, ((TILE_ELEMENTS // rest_elems) - ((window[0] - 1) * dil[0] + 1)) // strides[0] + 1)
        self.pieces = [(i, c0, min(c0 + cb, c), r0, min(r0 + rows, self.out_sp[0]))
                       for i in range(n) for c0 in range(0, c, cb) for r0 in range(0, self.out_sp[0], rows)]

    def run(self):
        with np.errstate(all="ignore"):
            tiles.run_pieces(self.work, self.pieces)

    def work(self, group):
        for piece in group:
            self.tile(*piece)

    def tile(self, i, c0, c1, r0, r1):
        nd, w, s, p, d = self.nd, self.w, self.s, self.p, self.d
        # the region: first spatial dim for output rows [r0, r1), the others whole
        starts = [r0 * s[0] - p[0]] + [-p[j] for j in range(1, nd)]
        lengths = [(r1 - r0 - 1) * s[0] + (w[0] - 1) * d[0] + 1] + self.span[1:]
        region = np.empty((c1 - c0,) + tuple(lengths), self.sum_dtype)
        dst, src, whole = [slice(None)], [slice(c0, c1)], True
        for j in range(nd):
            lo, hi = max(starts[j], 0), min(starts[j] + lengths[j], self.in_sp[j])
            if lo >= hi:
                dst = None
                break
            dst.append(slice(lo - starts[j], hi - starts[j]))
            src.append(slice(lo, hi))
            whole = whole and lo == starts[j] and hi == starts[j] + lengths[j]
        if dst is None or not whole:  # taps in padding read zeros
            region[...] = 0
        if dst is not None:
            xs = self.x[i][tuple(src)]
            target = region[tuple(dst)]
            zp = None if self.x_zp is None else _per_channel(self.x_zp, c0, c1, nd, self.sum_dtype)
            if zp is None:
                np.copyto(target, xs)
            else:
                np.subtract(xs, zp, out=target, dtype=self.sum_dtype)
        # separable window sums, last spatial axis first
        cur = region
        for j in reversed(range(nd)):
            o = (r1 - r0) if j == 0 else self.out_sp[j]
            if w[j] == 1 and s[j] == 1:
                continue
            axis = 1 + j
            shape = list(cur.shape)
            shape[axis] = o
            acc = np.empty(shape, self.sum_dtype)
            for k in range(w[j]):
                sl = (slice(None),) * axis + (slice(k * d[j], k * d[j] + (o - 1) * s[j] + 1, s[j]),)
                if k == 0:
                    np.copyto(acc, cur[sl])
                else:
                    np.add(acc, cur[sl], out=acc)
            cur = acc
        # v = (float32(S) * x_scale) / float32(count); t = v / out_scale
        t = np.multiply(cur, _per_channel(self.x_scale, c0, c1, nd, F32), dtype=F32)
        count = np.multiply.outer(self.count0[r0:r1], self.count_rest).astype(F32)
        np.divide(t, count, out=t)
        np.divide(t, _per_channel(self.o_scale, c0, c1, nd, F32), out=t)
        zp = zp_value(self.o_zp)
        if zp is None:
            zp = _per_channel(self.o_zp, c0, c1, nd, self.out.dtype)
        finish(t, zp, self.out[i][c0:c1, r0:r1], np.empty(t.shape, np.bool_))
