"""Quantized matmul on the CPU: exact integer sums from float32 BLAS on K-chunks.

``acc[m, n] = sum_k (a[m, k] - a_zp[m]) * (b[k, n] - b_zp[n])`` is computed as

    P[m, n] - u[m] * b_zp[n] - a_zp[m] * colsum_b[n],   u[m] = rowsum_a[m] - K * a_zp[m]

with ``P = a @ b`` on the raw int8/uint8 values. P comes from float32 matmuls
(OpenBLAS sgemm) on K-chunks of ``KC`` columns of a and rows of b, added into a
float64 tile; the corrections are exact integers in float64.

Why every float operation here is exact: within one K-chunk every product
``a * b`` is an integer with ``|a * b| <= amax * bmax`` (amax, bmax: 255 for
uint8, 128 for int8), and ``KC * amax * bmax <= 2**24`` (KC = 256 for
uint8 x uint8, 512 for uint8 x int8, 1024 for int8 x int8). Whatever order
and blocking the BLAS sums in, with or without fused multiply-adds, every
intermediate value is then an integer of magnitude at most 2**24, which
float32 represents exactly, so no operation rounds and the chunk's result is
the exact integer sum. Across chunks, and in the zero-point corrections, the
values are integers far below 2**53 (|acc| <= K * 255 * 255, K < 2**37), so
float64 adds and multiplies them exactly. The result is therefore the exact
``acc`` of docs/semantics.md, as a float64 -- the same value dmlq.reference
holds, which it rounds to float32 the same way.

Then, per output tile, the reference's order: ``mult = (a_scale * b_scale) /
out_scale`` and ``t = float32(acc) * mult`` in float32, and requant.finish.

Memory: a and b are never widened whole. A tile of the output (at most
``TILE_M x TILE_N``; for M <= SKINNY_M a column block of at most 2**17 outputs)
holds a float64 accumulator, and each K-chunk converts only the pieces of a and
b it multiplies. A call whose a and b hold at most SMALL_OPERANDS elements (over the
batch) runs dmlq.reference instead: its float64 product of the widened operands is the
same exact sum, and there it is faster than the tiles' fixed cost.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading

import numpy as np

from .. import reference as _reference
from . import tiles
from .requant import F32, finish

F64 = np.dtype(np.float64)
_QUANT = (np.dtype(np.int8), np.dtype(np.uint8))
TILE_M = 256
TILE_N = 512
SKINNY_M = 16         # up to this M, converting b is the whole cost: b is cut into one
SKINNY_PIECE = 1 << 19  # column block per thread, converted in whole-row pieces of at most
                        # this many elements (2 MiB of float32): NumPy copies row by row, and
                        # short rows cost more in loop overhead than in bytes
THREAD_MIN_WORK = 1 << 18  # multiply-adds below which a skinny call stays one block on the
                           # calling thread: handing a piece to another thread costs tens of us
                           # (about 170 us a call on a busy 2-core machine for a 4x8x4 product)
SMALL_OPERANDS = 1 << 15  # elements of a and b (over the batch) up to which dmlq.reference's
                          # float64 product is the faster exact path: the tiles' fixed cost (plan,
                          # buffers, a K-chunk loop) is about 30 us, the reference's widened copies
                          # here at most 512 KiB (4x64x64: 47 against 23 us; 128x128x128: 127
                          # against 138; 1x512x512, 262 Ki elements: 389 against 1,284)
_small = {"on": True}


def small(a, b, out) -> bool:
    """Whether an integer matmul is small enough for :data:`SMALL_OPERANDS`'s shortcut."""
    if not _small["on"]:
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    return math.prod(out.shape[:-2]) * (m * k + k * n) <= SMALL_OPERANDS


@contextlib.contextmanager
def tiled_always():
    """Every call on the tiles, however small (the tests run both paths)."""
    before, _small["on"] = _small["on"], False
    try:
        yield
    finally:
        _small["on"] = before


def k_chunk(a_dtype, b_dtype) -> int:
    """The longest K-chunk whose float32 sums stay exact (see the module docstring)."""
    amax = 255 if a_dtype == np.uint8 else 128
    bmax = 255 if b_dtype == np.uint8 else 128
    kc = (1 << 24) // (amax * bmax)
    return kc - kc % 64 if kc >= 64 else kc


def _per_batch(v, batch, dtype):
    """One of b's parameters (1-D: per tensor or column; or batch dims + (1, N)) as a
    view of shape ``batch + (1, 1 or N)``, in ``dtype``."""
    v = np.asarray(v).astype(dtype)
    if v.ndim <= 1:
        v = v.reshape(1, -1)
    return _broadcast(v, tuple(batch) + v.shape[-2:])


def _broadcast(v, shape):
    """``np.broadcast_to(v, shape)``, or ``v`` itself where it has that shape already (every
    operand of an unbatched call: it is only read, so the view would change nothing)."""
    return v if v.shape == shape else np.broadcast_to(v, shape)


def per_batch_rows(v, batch, dtype, column=False):
    """One of a's (or the output's) parameters (per tensor or row: 1-D, (), (M, 1); or per
    batch and row: batch dims + (M, 1)) as a view of shape ``batch + (1 or M,)`` in ``dtype``
    (``column``: ``batch + (1 or M, 1)``), so that ``v[i]`` is matrix i's."""
    v = np.asarray(v).astype(dtype)
    v = v.reshape(v.shape[:-1]) if v.ndim > 2 and any(d != 1 for d in v.shape[:-2]) else v.reshape(-1)
    v = _broadcast(v, tuple(batch) + v.shape[-1:])
    return v[..., None] if column else v


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out,
                     *extra, **kw):
    a, b = np.asarray(a), np.asarray(b)
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point)
    if (extra or kw or a.dtype not in _QUANT or b.dtype not in _QUANT or out.dtype not in _QUANT
            or any(np.asarray(s).dtype != F32 for s in (a_scale, b_scale, out_scale))
            or a.shape[-1] >= 1 << 37 or small(a, b, out)):
        return _reference.quantized_matmul(*args, out, *extra, **kw)
    if any(np.may_share_memory(x, out) for x in (a, b)):
        tmp = np.empty(out.shape, out.dtype)
        quantized_matmul(*args, tmp)
        out[...] = tmp
        return out
    if out.size == 0:
        return out
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[:-2]
    ab = _broadcast(a, batch + (m, k))
    bb = _broadcast(b, batch + (k, n))
    plan = _Plan(a, b, a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point, m, k, n, batch)
    plan.run(lambda group: plan.work(group, ab, bb, out), batch)
    return out


# dmlq's threads each run their own tiles' sgemm calls, so BLAS's own threads
# are held at 1 meanwhile (threadpoolctl): two levels of threads on the same
# cores only wait for each other. Without threadpoolctl the tiles run on the
# calling thread and BLAS threads as it likes. The limit is process-wide: one
# lock and a count keep it set from the first concurrent call to the last.
_BLAS = {"lock": threading.Lock(), "users": 0, "limiter": None, "controller": None}


def _reset_blas_state_in_child():
    # a fork while another thread held the lock must not leave the child's lock taken, nor BLAS
    # held at 1 thread by a call that does not exist in the child
    limiter = _BLAS["limiter"]
    _BLAS.update(lock=threading.Lock(), users=0, limiter=None)
    if limiter is not None:
        try:
            limiter.restore_original_limits()
        except Exception:  # noqa: BLE001 - a BLAS the child cannot reach: nothing to restore
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_blas_state_in_child)


@contextlib.contextmanager
def _blas_single_threaded(wanted):
    """Yields whether the tiles may run on several threads."""
    if not wanted:
        yield False
        return
    state = _BLAS
    with state["lock"]:
        if state["controller"] is None:
            try:
                import threadpoolctl
            except ImportError:
                state["controller"] = False
            else:
                state["controller"] = threadpoolctl.ThreadpoolController()
        if state["controller"] is False:
            yield_value = False
        else:
            if state["users"] == 0:
                state["limiter"] = state["controller"].limit(limits=1, user_api="blas")
            state["users"] += 1
            yield_value = True
    try:
        yield yield_value
    finally:
        if yield_value:
            with state["lock"]:
                state["users"] -= 1
                if state["users"] == 0:
                    state["limiter"].restore_original_limits()
                    state["limiter"] = None


class Sums:
    """The exact integer sums of one call, tile by tile: chunk and tile sizes, and
    :meth:`tile`, which every integer matmul of dmlq.cpu builds its epilogue on."""

    def __init__(self, a, b, m, k, n):
        self.m, self.k, self.n = m, k, n
        self.kc = k_chunk(a.dtype, b.dtype)
        self.tm = min(m, TILE_M)
        if m <= SKINNY_M:
            split = tiles.THREADS if m * k * n >= THREAD_MIN_WORK else 1
            self.tn = max(1, min(-(-n // split), max(64, (1 << 17) // (self.tm + 1))))
            self.kc = min(self.kc, max(8, SKINNY_PIECE // self.tn))  # shorter chunks stay exact
        else:
            self.tn = min(n, TILE_N)

    def pieces(self, batch):
        return [(i, m0, n0) for i in (np.ndindex(*batch) if batch else ((),))  # (what ndindex() yields)
                for n0 in range(0, self.n, self.tn) for m0 in range(0, self.m, self.tm)]

    def run(self, work, batch):
        """``work(group)`` over every tile of the output, on dmlq's threads."""
        pieces = self.pieces(batch)
        if len(pieces) == 1 or tiles.THREADS == 1:  # one thread runs them: BLAS's threads left as they are
            tiles.run_pieces(work, pieces, False)
            return
        with _blas_single_threaded(True) as threaded:
            tiles.run_pieces(work, pieces, threaded)

    def scratch(self, with_colsum, k=None):
        """One group's buffers (K-chunks of at most ``k`` columns, default K)."""
        rows = self.tm + with_colsum
        kcl = min(self.kc, max(self.k if k is None else k, 1))
        return (np.empty(rows * self.tn, F64), np.empty(rows * self.tn, F32),
                np.empty(self.tm * kcl, F32), np.empty(kcl * self.tn, F32))

    def tile(self, bufs, av, bv, a_zp, b_zp):
        """The exact ``sum_k (av - a_zp) * (bv - b_zp)`` of a (tm, K') piece of a and a
        (K', tn) piece of b, as a float64 (tm, tn) view of ``bufs[0]``. a_zp: None or
        float64 of length 1 or tm (``bufs`` then has the column-sum row); b_zp: None
        or float64 of length 1 or tn."""
        acc_buf, p_buf, a_buf, b_buf = bufs
        tm, k = av.shape
        tn = bv.shape[1]
        extra = 0 if a_zp is None else 1
        # with an a zero point, b's column sums ride along in an extra accumulator row
        # (np.add.reduce over the float32 piece: exact, at most 255 * KC)
        acc = tiles.shaped(acc_buf, (tm + extra, tn))
        acc[...] = 0
        for k0 in range(0, k, self.kc):
            k1 = min(k0 + self.kc, k)
            ac = tiles.shaped(a_buf, (tm, k1 - k0))
            bc = tiles.shaped(b_buf, (k1 - k0, tn))
            np.copyto(ac, av[:, k0:k1], casting="unsafe")
            np.copyto(bc, bv[k0:k1], casting="unsafe")
            p = tiles.shaped(p_buf, (tm + extra, tn))
            np.matmul(ac, bc, out=p[:tm])
            if extra:
                np.add.reduce(bc, axis=0, out=p[tm])
            np.add(acc, p, out=acc)
        colsum = acc[tm] if extra else None
        acc = acc[:tm]
        # acc -= u[m] * b_zp[n] + a_zp[m] * colsum_b[n] (exact float64 integers)
        if b_zp is not None:
            u = np.add.reduce(av, axis=1, dtype=np.int64).astype(F64)
            if a_zp is not None:
                u -= k * a_zp
            acc -= u[:, None] * b_zp[None, :]
        if a_zp is not None:
            acc -= a_zp[:, None] * colsum[None, :]
        return acc

    @staticmethod
    def rows(v, m0, m1):
        return v if v is None or v.shape[0] == 1 else v[m0:m1]

    @staticmethod
    def cols(v, n0, n1):
        return v if v is None or v.shape[-1] == 1 else v[..., n0:n1]


def nonzero_zp(v, batch=()):
    """A zero point as float64 ``batch + (1 or M,)`` (:func:`per_batch_rows`), None when
    omitted or all zero."""
    return None if v is None or not np.asarray(v).any() else per_batch_rows(v, batch, F64)


class _Plan(Sums):
    """What every tile of one quantized_matmul call shares: per-row and per-column vectors."""

    def __init__(self, a, b, a_scale, a_zp, b_scale, b_zp, o_scale, o_zp, m, k, n, batch):
        super().__init__(a, b, m, k, n)
        self.a_zp = nonzero_zp(a_zp, batch)   # float64, batch + (1 or M,)
        # b's parameters per batch matrix: batch + (1, 1 or N) (one row for all, or one per batch)
        self.b_zp = None if b_zp is None or not np.asarray(b_zp).any() else _per_batch(b_zp, batch, F64)
        # mult = (a_scale[m] * b_scale[n]) / out_scale[m], float32, shaped to broadcast
        # (a's and the output's per batch: batch + (1 or M, 1), matrix i's at [i])
        self.a_s = per_batch_rows(a_scale, batch, F32, column=True)
        self.b_s = _per_batch(b_scale, batch, F32)
        self.o_s = per_batch_rows(o_scale, batch, F32, column=True)
        self.o_zp = None if o_zp is None else np.asarray(o_zp)
        if self.o_zp is not None and self.o_zp.size == 1:
            self.o_zp = int(self.o_zp.reshape(-1)[0])
        elif self.o_zp is None:
            self.o_zp = 0
        else:
            self.o_zp = per_batch_rows(self.o_zp, batch, self.o_zp.dtype, column=True)

    def work(self, group, ab, bb, out):
        bufs = self.scratch(self.a_zp is not None)
        mask_buf = np.empty(self.tm * self.tn, np.bool_)
        for i, m0, n0 in group:
            m1, n1 = min(m0 + self.tm, self.m), min(n0 + self.tn, self.n)
            tm, tn = m1 - m0, n1 - n0
            av, bv = ab[i][m0:m1], bb[i][:, n0:n1]
            b_zp = None if self.b_zp is None else self.cols(self.b_zp[i].reshape(-1), n0, n1)
            acc = self.tile(bufs, av, bv, None if self.a_zp is None else self.rows(self.a_zp[i], m0, m1), b_zp)
            t = tiles.shaped(bufs[1], (tm, tn))
            mult = np.divide(np.multiply(self.rows(self.a_s[i], m0, m1), self.cols(self.b_s[i], n0, n1), dtype=F32),
                             self.rows(self.o_s[i], m0, m1), dtype=F32)
            np.multiply(acc, mult, out=t, dtype=F32)  # float32(acc) * mult: acc rounded first
            zp = self.o_zp if isinstance(self.o_zp, int) else self.rows(self.o_zp[i], m0, m1)
            finish(t, zp, out[i][m0:m1, n0:n1], tiles.shaped(mask_buf, (tm, tn)))
