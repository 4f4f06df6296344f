"""numba's compiled kernels of dmlq.cpu.qtypes (quantize / dequantize for every type of
dmlq.qtypes, per tensor, per axis and blocked). A module of its own, as dmlq.cpu.jit_kernels:
numba is imported only when the first such call runs, and ``cache=True`` finds the code again.

The tensor is walked as (outer, D, inner): rows ``o0 <= o < o1`` of ``outer``; the parameter
of element (o, d, i) is ``p[o * so + (d // B) * sb + i * si]`` (strides in elements: 0 where
the parameter does not vary). With ``inner == 1`` (blocks along the last axis, and per tensor)
each block is one run of elements sharing one scale and zero point: the scale is read once
per block and the run's loop is the element arithmetic only, which LLVM vectorizes.

Every operation is docs/semantics.md's, as dmlq.reference does it: ``t = x / s`` one float32
division (no fast-math); integer outputs: NaN -> 0, clamp to ``[qmin - zp, qmax - zp]`` in
float32, rint by ``(t + 1.5 * 2**23) - 1.5 * 2**23`` (exact ties-to-even for ``|t| <= 2**22``,
which the clamp ensures for every type up to 16 bits), ``+ zp``; float8/float4 outputs (and
float16/bfloat16 rounding of dequantize's product): dmlq.floatconv.encode's integer
arithmetic on the float32 bit pattern, one value at a time (``_encode``); dequantize:
``float32(q) - float32(zp)`` (exact below 2**17) or the float code's exact value from the
256-entry table dmlq.floatconv builds, times the scale, one float32 product.
"""
from __future__ import annotations

import numba
import numpy as np

MAGIC = np.float32(1.5 * 2**23)
_ZERO = np.float32(0)
# FloatFormat.special as numbers (dmlq.qtypes)
IEEE, FN, FNUZ, NONE = 0, 1, 2, 3


def _kernel(fn):
    return numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)(fn)


_inline = numba.njit(inline="always", error_model="numpy")


@_inline
def _rne(v, s):  # pragma: no cover (compiled)
    # round(v / 2**s), ties to even; v >= 0, 1 <= s <= 62
    q = v >> s
    rem = v & ((np.int64(1) << s) - 1)
    half = np.int64(1) << (s - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1
    return q


@_inline
def _encode_bits(bits, e_bits, m_bits, bias, special, top, saturate):  # pragma: no cover (compiled)
    # dmlq.floatconv.encode of one float32 value (its bit pattern, int64): the code, as an int64
    sign = bits >> 31
    mag = bits & 0x7FFFFFFF
    sbit = np.int64(1) << (e_bits + m_bits)
    if mag > 0x7F800000:  # NaN
        if special == FNUZ:
            return sbit
        if special == NONE:
            return top
        if special == FN:
            return ((np.int64(1) << (e_bits + m_bits)) - 1) | (sign * sbit)
        return (((np.int64(1) << e_bits) - 1) << m_bits) | (np.int64(1) << (m_bits - 1)) | (sign * sbit)
    emin = 1 - bias
    if mag >= (127 + emin) << 23:
        code = _rne(mag - ((127 - bias) << 23), 23 - m_bits)
    else:
        e = mag >> 23
        e32 = (e if e > 1 else 1) - 127
        sig = (mag & 0x7FFFFF) | ((np.int64(1) << 23) if e > 0 else 0)
        shift = 23 + emin - m_bits - e32
        code = np.int64(0) if shift > 62 else _rne(sig, shift)
    if code > top or mag == 0x7F800000:
        if saturate or special == NONE:
            code = top
        elif special == IEEE:
            code = ((np.int64(1) << e_bits) - 1) << m_bits
        elif special == FN:
            code = (np.int64(1) << (e_bits + m_bits)) - 1
        else:
            return sbit
    if special == FNUZ and code == 0:
        return np.int64(0)
    return code | (sign * sbit)


@_inline
def _to_int(t, lo, hi, z, mask):  # pragma: no cover (compiled)
    t = _ZERO if t != t else t
    t = lo if t < lo else t
    t = hi if t > hi else t
    return (np.int32((t + MAGIC) - MAGIC) + z) & mask


# The loops over one run take slices (xs, os_ ...) of the operands: indexing the whole arrays
# with a running offset kept LLVM from vectorizing them (40 ms against 1.2 ms for 4 Mi int8).

@_inline
def _int_run(xs, s, z, qmin, qmax, mask, os_):  # pragma: no cover (compiled)
    lo, hi = np.float32(qmin - z), np.float32(qmax - z)
    for k in range(xs.size):
        os_[k] = _to_int(xs[k] / s, lo, hi, z, mask)


@_inline
def _float_run(xs, s, t, bits, e_bits, m_bits, bias, special, top, saturate, os_):  # pragma: no cover
    m = xs.size
    for k in range(m):
        t[k] = xs[k] / s
    for k in range(m):
        os_[k] = _encode_bits(np.int64(bits[k]), e_bits, m_bits, bias, special, top, saturate)


@_inline
def _value(c, table, use_table, sbits, z):  # pragma: no cover (compiled)
    if use_table:
        return table[c]
    if sbits > 0:
        half = np.int32(1) << (sbits - 1)
        c = (c ^ half) - half
    return np.float32(c) - z


@_inline
def _deq_run(qs, table, use_table, sbits, z, s, os_):  # pragma: no cover (compiled)
    for k in range(qs.size):
        os_[k] = _value(np.int32(qs[k]), table, use_table, sbits, z) * s


@_kernel
def quantize_int(x, sc, zp, o0, o1, D, inner, B, so, sb, si, zo, zb, zi, qmin, qmax, mask, out):  # pragma: no cover
    # out: the codes (low bits of q; uint8 or uint16 view) of x (float32, C-contiguous)
    for o in range(o0, o1):
        for d0 in range(0, D, B if inner == 1 else 1):
            blk = d0 // B
            ps, pz = o * so + blk * sb, o * zo + blk * zb
            base, m = (o * D + d0) * inner, (min(B, D - d0) if inner == 1 else inner)
            xs, os_ = x[base:base + m], out[base:base + m]
            if inner == 1 or si == 0 and zi == 0:  # one scale and zero point for the run
                _int_run(xs, sc[ps], np.int32(zp[pz]), qmin, qmax, mask, os_)
            else:  # per element along inner
                for i in range(m):
                    z = np.int32(zp[pz + i * zi])
                    os_[i] = _to_int(xs[i] / sc[ps + i * si], np.float32(qmin - z), np.float32(qmax - z), z, mask)


@_kernel
def quantize_float(x, sc, o0, o1, D, inner, B, so, sb, si, e_bits, m_bits, bias, special, top, saturate,
                   t, out):  # pragma: no cover
    # out (uint8): the float8 / float4 codes of x / s (float32 division, then encode); t: float32
    # scratch of at least min(B, D) (inner == 1) or inner elements, seen as its bits (uint32)
    bits = t.view(np.uint32)
    for o in range(o0, o1):
        for d0 in range(0, D, B if inner == 1 else 1):
            ps = o * so + (d0 // B) * sb
            base, m = (o * D + d0) * inner, (min(B, D - d0) if inner == 1 else inner)
            xs, os_ = x[base:base + m], out[base:base + m]
            if inner == 1 or si == 0:
                _float_run(xs, sc[ps], t, bits, e_bits, m_bits, bias, special, top, saturate, os_)
            else:
                for i in range(m):
                    t[i] = xs[i] / sc[ps + i]
                for i in range(m):
                    os_[i] = _encode_bits(np.int64(bits[i]), e_bits, m_bits, bias, special, top, saturate)


@_kernel
def dequantize(q, table, sbits, sc, zp, o0, o1, D, inner, B, so, sb, si, zo, zb, zi, off,
               out):  # pragma: no cover
    # out[e - off] (float32) = value(q[e]) * s; value: table[code] (float codes) or float32(q) -
    # float32(zp), q sign-extended from its low ``sbits`` bits (int4 / int2 codes; 0: q as it is)
    use_table = table.size > 0
    for o in range(o0, o1):
        for d0 in range(0, D, B if inner == 1 else 1):
            blk = d0 // B
            ps, pz = o * so + blk * sb, o * zo + blk * zb
            base, m = (o * D + d0) * inner, (min(B, D - d0) if inner == 1 else inner)
            qs, os_ = q[base:base + m], out[base - off:base - off + m]
            if inner == 1 or si == 0 and zi == 0:
                _deq_run(qs, table, use_table, sbits, np.float32(zp[pz]), sc[ps], os_)
            else:
                for i in range(m):
                    os_[i] = _value(np.int32(qs[i]), table, use_table, sbits, np.float32(zp[pz + i * zi])) * \
                        sc[ps + i * si]


@_kernel
def round_to(v, e_bits, m_bits, bias, out):  # pragma: no cover
    # out (uint16): float32 v rounded to float16 / bfloat16 bits (ties to even, overflow to inf)
    top = ((np.int64(1) << (e_bits + m_bits)) - 1) - (np.int64(1) << m_bits)
    bits = v.view(np.uint32)
    for e in range(v.size):
        out[e] = _encode_bits(np.int64(bits[e]), e_bits, m_bits, bias, IEEE, top, False)
