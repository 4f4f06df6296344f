"""numba's compiled kernels of dmlq.cpu.qtypes (quantize / dequantize for every type of
dmlq.qtypes, per tensor, per axis and blocked). A module of its own, as dmlq.cpu.jit_kernels:
numba is imported only when the first such call runs, and ``cache=True`` finds the code again.

The tensor is walked as (outer, D, inner): rows ``o0 <= o < o1`` of ``outer``; the parameter
of element (o, d, i) is ``p[o * so + (d // B) * sb + i * si]`` (strides in elements: 0 where
the parameter does not vary). Every loop over elements runs on slices (a run of one block, a
row, or ``inner`` elements) with a scale that is one value or one per element: LLVM vectorizes
those 16 lanes wide (indexing the whole arrays with a running offset kept it from vectorizing:
9-14 ms against 0.8 ms for 4 Mi int8 in 32-blocks). Per axis along the last axis (and
block_size 1) is one such loop per row over the scale vector; blocks along the last axis one
short loop per block (its scale read once, no integer division per block); blocks or per-axis
values along an outer axis one loop of ``inner`` elements per index.

Every operation is docs/semantics.md's, as dmlq.reference does it: ``t = x / s`` one float32
division (no fast-math). Integer outputs, all in float32 so that no lane widens to int64 (numba
types int32 arithmetic as int64): NaN -> 0, clamp to ``[qmin - zp, qmax - zp]``, rint by
``t + 1.5 * 2**23`` (exact ties-to-even for ``|t| <= 2**22``; the bits are then ``0x4B400000 +
rint(t)``), ``+ float32(zp)`` (exact: an integer near 2**23), and the low bits of the float's
bit pattern are the code. With a zero point per element the clamp is to ``+-2**17`` first and to
``1.5 * 2**23 + [qmin, qmax]`` after the zero point is added (the same result: the bounds are
integers). float8/float4 outputs: ``_round_code``, without a branch: the target's unit at
t's exponent from t's exponent bits, |t| rounded to it by one IEEE float32 addition of a
power of two (ties to even, exact), the code from the bit patterns; NaN, overflow and
unsigned-zero results selected by constants per format and ``saturate``. Dequantize's
float16/bfloat16 rounding: ``_encode``, dmlq.floatconv.encode's integer arithmetic on the
float32 bits, also branch-free (bfloat16 has float32's exponent range, where the adder's
power of two would overflow). Both against dmlq.floatconv on every float16 value and a
float32 sample, and the float8/float4 one against ml_dtypes' casts (tests/test_cpu_qtypes.py,
tests/test_qtypes_conversion.py). Measured on 4 Mi float32, one thread, e4m3fn: _encode's
integer steps run in int64 lanes (numba types int32 arithmetic as int64; variable shifts keep
LLVM from narrowing them), 3.5 ms; _round_code's narrow to 8- and 16-bit lanes, 1.3 ms.
Dequantize: ``float32(q) - float32(zp)`` (exact below 2**17) or the float code's exact value
from the 256-entry table dmlq.floatconv builds, times the scale, one float32 product.
"""
from __future__ import annotations

import numba
import numpy as np

MAGIC = np.float32(1.5 * 2**23)
WIDE = np.float32(2**17)  # beyond |qmin - zp| and |qmax - zp| for every integer type up to 16 bits
_ZERO = np.float32(0)
# FloatFormat.special as numbers (dmlq.qtypes)
IEEE, FN, FNUZ, NONE = 0, 1, 2, 3


def _kernel(fn):
    return numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)(fn)


_inline = numba.njit(inline="always", error_model="numpy")


# ------------------------------------------------------------------ integer outputs

@_inline
def _int_code(t, lo, hi, fz, mask):  # pragma: no cover (compiled)
    # one zero point for the run: NaN -> 0, clamp to [qmin - zp, qmax - zp], rint, + zp (exact)
    t = _ZERO if t != t else t
    t = lo if t < lo else t
    t = hi if t > hi else t
    return np.float32(np.float32(t + MAGIC) + fz).view(np.int32) & mask


@_inline
def _int_code_z(t, fz, umin, umax, mask):  # pragma: no cover (compiled)
    # a zero point per element: clamp wide, rint, + zp, then clamp to MAGIC + [qmin, qmax]
    t = _ZERO if t != t else t
    t = -WIDE if t < -WIDE else t
    t = WIDE if t > WIDE else t
    u = np.float32(np.float32(t + MAGIC) + fz)
    u = umin if u < umin else u
    return np.float32(umax if u > umax else u).view(np.int32) & mask


@_inline
def _int_run(xs, s, fz, fq0, fq1, mask, os_):  # pragma: no cover (compiled)
    lo, hi = fq0 - fz, fq1 - fz
    for k in range(xs.size):
        os_[k] = _int_code(xs[k] / s, lo, hi, fz, mask)


@_inline
def _int_vrun(xs, ss, fz, fq0, fq1, mask, os_):  # pragma: no cover (compiled)
    # a scale per element (ss), one zero point
    lo, hi = fq0 - fz, fq1 - fz
    for k in range(xs.size):
        os_[k] = _int_code(xs[k] / ss[k], lo, hi, fz, mask)


@_inline
def _int_vrun_z(xs, ss, zs, fq0, fq1, mask, os_):  # pragma: no cover (compiled)
    # a scale (ss) and a zero point (zs) per element
    umin, umax = MAGIC + fq0, MAGIC + fq1
    for k in range(xs.size):
        os_[k] = _int_code_z(xs[k] / ss[k], zs[k], umin, umax, mask)


@_kernel
def quantize_int(x, sc, zp, o0, o1, D, inner, B, so, sb, si, zvar, qmin, qmax, mask, out):  # pragma: no cover
    # out: the codes (low bits of q; uint8 or uint16 view) of x (float32, C-contiguous). zp:
    # float32; with zvar it has sc's layout (strides so, sb, si), else zp[0] is the one value.
    fq0, fq1, fz0 = np.float32(qmin), np.float32(qmax), zp[0]
    for o in range(o0, o1):
        row, p = o * D * inner, o * so
        if inner == 1 and B == 1 and sb == 1:  # a parameter per element of the row (per axis, last axis)
            if zvar:
                _int_vrun_z(x[row:row + D], sc[p:p + D], zp[p:p + D], fq0, fq1, mask, out[row:row + D])
            else:
                _int_vrun(x[row:row + D], sc[p:p + D], fz0, fq0, fq1, mask, out[row:row + D])
        elif inner == 1:  # runs of B elements sharing one scale (per tensor: one run)
            for d0 in range(0, D, B):
                m = min(B, D - d0)
                _int_run(x[row + d0:row + d0 + m], sc[p], zp[p] if zvar else fz0, fq0, fq1, mask,
                         out[row + d0:row + d0 + m])
                p += sb
        else:  # runs of ``inner`` elements: one scale (si == 0) or one per element (si == 1)
            j = 0
            for d in range(D):
                base = row + d * inner
                xs, os_ = x[base:base + inner], out[base:base + inner]
                if si == 0:
                    _int_run(xs, sc[p], zp[p] if zvar else fz0, fq0, fq1, mask, os_)
                elif zvar:
                    _int_vrun_z(xs, sc[p:p + inner], zp[p:p + inner], fq0, fq1, mask, os_)
                else:
                    _int_vrun(xs, sc[p:p + inner], fz0, fq0, fq1, mask, os_)
                j += 1
                if j == B:
                    j, p = 0, p + sb


# ------------------------------------------------------------------ float8 / float4 outputs

@_inline
def _encode(b, sh, rebias, e_norm, top, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep, spos):  # pragma: no cover
    # dmlq.floatconv.encode of one float32 value from its bits ``b`` (int32), without a branch:
    # every lane computes the rounded code of |value| (normal: rebias the exponent and round
    # ``sh`` bits off; subnormal target: the significand shifted further), then selects NaN,
    # overflow and signed-zero results. Round to nearest even: add half - 1 plus the lowest
    # kept bit, then shift.
    mag = b & 0x7FFFFFFF
    e = mag >> 23
    norm = e >= e_norm
    v = (mag - rebias) if norm else ((mag & 0x7FFFFF) | (0x800000 if e > 0 else 0))
    s = sh if norm else min(sh + e_norm - max(e, 1), 25)
    code = (v + ((1 << (s - 1)) - 1) + ((v >> s) & 1)) >> s
    nan = mag > 0x7F800000
    ovf = code > top
    mcode = nan_mag if nan else (ovf_mag if ovf else code)
    keep = nan_keep if nan else (ovf_keep if ovf else (zero_keep or code != 0))
    return mcode | ((((b >> 31) & 1) << spos) if keep else 0)


def encoder_constants(e_bits, m_bits, bias, special, top, saturate):
    """The constant operands of :func:`_encode` for a format (dmlq.qtypes' FloatFormat fields)."""
    spos, sbit = e_bits + m_bits, 1 << (e_bits + m_bits)
    inf = ((1 << e_bits) - 1) << m_bits
    nan_mag, nan_keep = {IEEE: (inf | (1 << (m_bits - 1)), True), FN: (sbit - 1, True), FNUZ: (sbit, False),
                         NONE: (top, False)}[special]
    if saturate or special == NONE:
        ovf_mag, ovf_keep = top, True
    else:
        ovf_mag, ovf_keep = {IEEE: (inf, True), FN: (sbit - 1, True), FNUZ: (sbit, False)}[special]
    return np.array([23 - m_bits, (127 - bias) << 23, 128 - bias, top, nan_mag, nan_keep, ovf_mag, ovf_keep,
                     special != FNUZ, spos], np.int32)


_ONE = np.float32(1)


@_inline
def _round_code(t, clampv, eminv, cfac, mfac, k0, maxv, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep,
                sbit):  # pragma: no cover (compiled)
    # The float8/float4 code of float32 t without a branch, each step exact: |t| clamped below
    # 4 * max (larger values overflow anyway; NaN stays NaN); ep = 2**max(E, emin) from t's
    # exponent bits; C = ep * 2**(23 - M), whose float32 unit is 2**(E - M), the target's unit
    # at t's exponent (its subnormal unit below 2**emin); y = |t| + C is |t| rounded to the
    # target's bits, ties to even (IEEE addition), and y - C its value; the code is the
    # target's exponent field of ep, shifted by M, plus the units y holds above C (a carry
    # into the next binade adds 2**M: the next exponent). NaN, overflow (the rounded value
    # above max) and zero then select their codes; the sign bit comes from t's (copysign).
    a = np.abs(t)
    a = clampv if a > clampv else a
    ep = np.float32(np.int32(np.float32(a).view(np.int32) & 0x7F800000).view(np.float32))
    ep = eminv if ep < eminv else ep
    c = np.float32(ep * cfac)
    y = np.float32(a + c)
    r = np.float32(y - c)
    code = (np.float32(ep).view(np.int32) >> 23) * mfac - k0 + (y.view(np.int32) - c.view(np.int32))
    nan = t != t
    ovf = r > maxv
    m = nan_mag if nan else (ovf_mag if ovf else code)
    keep = nan_keep if nan else (ovf_keep if ovf else (zero_keep or r != 0))
    return m | (sbit if (keep and np.copysign(_ONE, t) < 0) else 0)


def round_constants(e_bits, m_bits, bias, special, top, max_value, saturate):
    """The operands of :func:`_round_code` after t for a float8/float4 format (dmlq.qtypes'
    FloatFormat fields; max_value the largest finite value), as a float32 and an int32 array."""
    c = encoder_constants(e_bits, m_bits, bias, special, top, saturate)
    f = np.array([4 * max_value, 2.0 ** (1 - bias), 2.0 ** (23 - m_bits), max_value], np.float32)
    i = np.array([1 << m_bits, (128 - bias) << m_bits, c[4], c[5], c[6], c[7], c[8], 1 << c[9]], np.int32)
    return f, i


@_inline
def _float_run(xs, s, f, i, os_):  # pragma: no cover (compiled)
    clampv, eminv, cfac, maxv = f[0], f[1], f[2], f[3]
    mfac, k0, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep, sbit = \
        i[0], i[1], i[2], i[3] != 0, i[4], i[5] != 0, i[6] != 0, i[7]
    for k in range(xs.size):
        os_[k] = _round_code(xs[k] / s, clampv, eminv, cfac, mfac, k0, maxv, nan_mag, nan_keep, ovf_mag, ovf_keep,
                             zero_keep, sbit)


@_inline
def _float_vrun(xs, ss, f, i, os_):  # pragma: no cover (compiled)
    clampv, eminv, cfac, maxv = f[0], f[1], f[2], f[3]
    mfac, k0, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep, sbit = \
        i[0], i[1], i[2], i[3] != 0, i[4], i[5] != 0, i[6] != 0, i[7]
    for k in range(xs.size):
        os_[k] = _round_code(xs[k] / ss[k], clampv, eminv, cfac, mfac, k0, maxv, nan_mag, nan_keep, ovf_mag,
                             ovf_keep, zero_keep, sbit)


@_kernel
def quantize_float(x, sc, o0, o1, D, inner, B, so, sb, si, f, i, out):  # pragma: no cover
    # out (uint8): the float8 / float4 codes of x / s (float32 division, then _round_code with
    # the constants f, i of round_constants); the layout walk of quantize_int
    for o in range(o0, o1):
        row, p = o * D * inner, o * so
        if inner == 1 and B == 1 and sb == 1:
            _float_vrun(x[row:row + D], sc[p:p + D], f, i, out[row:row + D])
        elif inner == 1:
            for d0 in range(0, D, B):
                m = min(B, D - d0)
                _float_run(x[row + d0:row + d0 + m], sc[p], f, i, out[row + d0:row + d0 + m])
                p += sb
        else:
            j = 0
            for d in range(D):
                base = row + d * inner
                if si == 0:
                    _float_run(x[base:base + inner], sc[p], f, i, out[base:base + inner])
                else:
                    _float_vrun(x[base:base + inner], sc[p:p + inner], f, i, out[base:base + inner])
                j += 1
                if j == B:
                    j, p = 0, p + sb


# ------------------------------------------------------------------ dequantize

@_inline
def _value(c, table, use_table, sbits, cmask, z):  # pragma: no cover (compiled)
    c &= cmask  # a 4-/2-bit element's code is its byte's low bits (-1: every bit)
    if use_table:
        return table[c]
    if sbits > 0:
        half = np.int32(1) << (sbits - 1)
        c = (c ^ half) - half
    return np.float32(c) - z


@_inline
def _deq_run(qs, table, use_table, sbits, cmask, z, s, os_):  # pragma: no cover (compiled)
    for k in range(qs.size):
        os_[k] = _value(np.int32(qs[k]), table, use_table, sbits, cmask, z) * s


@_kernel
def dequantize(q, table, sbits, cmask, sc, zp, o0, o1, D, inner, B, so, sb, si, zo, zb, zi, off,
               out):  # pragma: no cover
    # out[e - off] (float32) = value(q[e]) * s; value: table[code] (float codes) or float32(q) -
    # float32(zp), q sign-extended from its low ``sbits`` bits (int4 / int2 codes; 0: q as it is);
    # the code is q & cmask (a 4-/2-bit element's low bits, whatever its byte's high bits hold)
    use_table = table.size > 0
    for o in range(o0, o1):
        for d0 in range(0, D, B if inner == 1 else 1):
            blk = d0 // B
            ps, pz = o * so + blk * sb, o * zo + blk * zb
            base, m = (o * D + d0) * inner, (min(B, D - d0) if inner == 1 else inner)
            qs, os_ = q[base:base + m], out[base - off:base - off + m]
            if inner == 1 or si == 0 and zi == 0:
                _deq_run(qs, table, use_table, sbits, cmask, np.float32(zp[pz]), sc[ps], os_)
            else:
                for i in range(m):
                    os_[i] = _value(np.int32(qs[i]), table, use_table, sbits, cmask, np.float32(zp[pz + i * zi])) * \
                        sc[ps + i * si]


@_kernel
def round_to(v, c, out):  # pragma: no cover
    # out (uint16): float32 v rounded to float16 / bfloat16 bits (ties to even, overflow to inf;
    # c: encoder_constants of the format, IEEE, not saturating)
    sh, rebias, e_norm, top, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep, spos = \
        c[0], c[1], c[2], c[3], c[4], c[5] != 0, c[6], c[7] != 0, c[8] != 0, c[9]
    bits = v.view(np.int32)
    for e in range(v.size):
        out[e] = _encode(bits[e], sh, rebias, e_norm, top, nan_mag, nan_keep, ovf_mag, ovf_keep, zero_keep, spos)
