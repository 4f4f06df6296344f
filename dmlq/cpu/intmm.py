"""matmul_integer and matmul_integer_to_float on the CPU: the exact sums of
dmlq.cpu.matmul (float32 sgemm on K-chunks whose partial sums stay below 2**24,
added in float64: see that module), then docs/semantics.md's epilogues per tile.

- matmul_integer: the exact sum (a float64 integer, |acc| < 2**53 while
  K < 2**37) to int64, then to int32 with two's complement wrap-around, as
  dmlq.reference's ``astype(np.int32)``.
- matmul_integer_to_float: ``t = float32(acc) * float32(a_scale * b_scale)``;
  with ``block_size`` one exact sum per group of block_size rows of b (the
  group's own b scale and zero point), the groups' float32 terms added in
  ascending order; then ``t + bias`` in float32, and one rounding to the output
  dtype. The same operations, in the same order, on the same float32 values as
  dmlq.reference, so the bits are the same.

A 4-bit b (ml_dtypes int4/uint4) converts to float32 piece by piece like int8;
a packed one (dmlq.packed_b) is unpacked first, to one byte per element (the
size of an int8 b). Anything else (32-bit integers from a descriptor, K past
2**37) goes to dmlq.reference.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import reference as _reference
from . import tiles
from .matmul import F64, Sums, _per_batch, nonzero_zp, per_batch_rows, small
from .requant import F32

_INTS = (np.dtype(np.int8), np.dtype(np.uint8))
_B_INTS = _INTS + (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))


def _fast(a, b):
    return a.dtype in _INTS and b.dtype in _B_INTS and a.shape[-1] < 1 << 37


def _operands(a, b, out):
    """a and b broadcast to the output's batch shape, and (m, k, n, batch)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[:-2]
    return np.broadcast_to(a, batch + (m, k)), np.broadcast_to(b, batch + (k, n)), m, k, n, batch


def _b_zp(b_zp, batch):
    """b's zero point as float64, batch + (1 or G, 1 or N); None when omitted or all zero."""
    return None if b_zp is None or not np.asarray(b_zp).any() else _per_batch(np.asarray(b_zp).astype(F64), batch, F64)


def _copy_if_overlapping(fn, args, out):
    if any(np.may_share_memory(x, out) for x in args if isinstance(x, np.ndarray)):
        tmp = np.empty(out.shape, out.dtype)
        fn(*args, tmp)
        out[...] = tmp
        return True
    return False


def matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None):
    b = _reference.unpacked(b, b_packed)
    a, b = np.asarray(a), np.asarray(b)
    if not _fast(a, b) or small(a, b, out):
        return _reference.matmul_integer(a, a_zero_point, b, b_zero_point, out)
    if _copy_if_overlapping(matmul_integer, (a, a_zero_point, b, b_zero_point), out) or out.size == 0:
        return out
    ab, bb, m, k, n, batch = _operands(a, b, out)
    sums = Sums(a, b, m, k, n)
    a_zp = nonzero_zp(a_zero_point, batch)  # batch + (1 or M,)
    b_zp = _b_zp(b_zero_point, batch)

    def work(group):
        bufs = sums.scratch(a_zp is not None)
        wide = np.empty(sums.tm * sums.tn, np.int64)
        for i, m0, n0 in group:
            m1, n1 = min(m0 + sums.tm, m), min(n0 + sums.tn, n)
            bz = None if b_zp is None else sums.cols(b_zp[i].reshape(-1), n0, n1)
            azp = None if a_zp is None else sums.rows(a_zp[i], m0, m1)
            acc = sums.tile(bufs, ab[i][m0:m1], bb[i][:, n0:n1], azp, bz)
            w = tiles.shaped(wide, acc.shape)
            np.copyto(w, acc, casting="unsafe")                       # exact integers
            np.copyto(out[i][m0:m1, n0:n1], w, casting="unsafe")     # int32 wrap-around

    sums.run(work, batch)
    return out


def matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                            block_size=None, b_packed=None):
    b = _reference.unpacked(b, b_packed)
    a, b = np.asarray(a), np.asarray(b)
    if not _fast(a, b) or small(a, b, out):
        return _reference.matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                                  block_size)
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias)
    if _copy_if_overlapping(lambda *x: matmul_integer_to_float(*x, block_size), args, out) or out.size == 0:
        return out
    ab, bb, m, k, n, batch = _operands(a, b, out)
    sums = Sums(a, b, m, k, n)
    a_zp = nonzero_zp(a_zero_point, batch)                # batch + (1 or M,)
    b_zp = _b_zp(b_zero_point, batch)
    a_s = per_batch_rows(a_scale, batch, F32, column=True)  # batch + (1 or M, 1)
    b_s = _per_batch(b_scale, batch, F32)          # batch + (1 or G, 1 or N)
    bias_b = None if bias is None else np.broadcast_to(np.asarray(bias).astype(F32), out.shape)
    groups = [(0, k)] if block_size is None else [(k0, min(k0 + block_size, k)) for k0 in range(0, k, block_size)]

    def row(v, g):  # a (G or 1, N or 1) parameter's row for group g
        return v[g if v.shape[0] > 1 else 0]

    def work(group):
        bufs = sums.scratch(a_zp is not None, k if block_size is None else block_size)
        v_buf = np.empty(sums.tm * sums.tn, F32)
        term_buf = np.empty(sums.tm * sums.tn, F32)
        for i, m0, n0 in group:
            m1, n1 = min(m0 + sums.tm, m), min(n0 + sums.tn, n)
            tm, tn = m1 - m0, n1 - n0
            av, bv = ab[i][m0:m1], bb[i][:, n0:n1]
            azp = None if a_zp is None else sums.rows(a_zp[i], m0, m1)
            a_si = sums.rows(a_s[i], m0, m1)
            v = tiles.shaped(v_buf, (tm, tn))
            if not groups:                                  # K = 0 with block_size: the empty sum +0.0
                v[...] = 0
            for g, (k0, k1) in enumerate(groups):
                bz = None if b_zp is None else sums.cols(row(b_zp[i], g), n0, n1)
                acc = sums.tile(bufs, av[:, k0:k1], bv[k0:k1], azp, bz)
                mult = np.multiply(a_si, sums.cols(row(b_s[i], g), n0, n1)[None, :], dtype=F32)
                t = v if g == 0 else tiles.shaped(term_buf, (tm, tn))
                np.multiply(acc, mult, out=t, dtype=F32)   # float32(acc) * mult: acc rounded first
                if g:
                    np.add(v, t, out=v)                     # the groups in ascending order
            if bias_b is not None:
                np.add(v, bias_b[i][m0:m1, n0:n1], out=v)
            np.copyto(out[i][m0:m1, n0:n1], v, casting="unsafe")  # float16: rounded once

    sums.run(work, batch)
    return out
