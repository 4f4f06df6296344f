"""An independent scalar model of docs/semantics.md in exact rational arithmetic.

Every value is a Python float that holds an exact float32 (or float16) value;
those carry signed zeros, infinities and NaN. Every operation computes the exact
result as a ratio of Python integers (as ``fractions.Fraction`` would) and rounds
it to float32 with ``round_ieee`` (ties to even, subnormals, overflow to inf). No
float32 (or float64) arithmetic decides a result: Python floats only hold values,
which is exact because every float32 and float16 value is a float64 value. NumPy
appears only in the array drivers at the end, to broadcast and index.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}

NAN = float("nan")
INF = float("inf")

# (significand bits incl. the implicit one, minimum normal exponent, maximum exponent)
_FORMATS = {"float32": (24, -126, 127), "float16": (11, -14, 15)}


def _round_ratio(n: int, d: int, fmt: str) -> float:
    """The IEEE value nearest to n / d (integers, d > 0, n != 0), ties to even,
    gradual underflow, overflow to +-inf. Pure integer arithmetic."""
    p, emin, emax = _FORMATS[fmt]
    sign = -1.0 if n < 0 else 1.0
    n = abs(n)
    # e = floor(log2(n / d)): first guess from bit lengths, then one exact fix-up
    e = n.bit_length() - d.bit_length()
    if (n << -e if e < 0 else n) < (d << e if e > 0 else d):
        e -= 1
    e = max(e, emin)
    shift = p - 1 - e  # m = round(n / d * 2**shift), the significand in ulps
    num, den = (n << shift, d) if shift >= 0 else (n, d << -shift)
    m, rem = divmod(num, den)
    if 2 * rem > den or (2 * rem == den and m & 1):
        m += 1
    if m == 0:
        return math.copysign(0.0, sign)
    if emax + 1 + shift <= 0 or m >= 1 << (emax + 1 + shift):  # m * 2**-shift >= 2**(emax+1)
        return math.copysign(INF, sign)
    return sign * math.ldexp(m, -shift)  # exact: m < 2**(p+1)


def round_ieee(value, fmt: str = "float32") -> float:
    """The IEEE binary32/binary16 value nearest to an exact value (int, Fraction
    or float), ties to even, gradual underflow, overflow to +-inf."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value == 0:
            return value  # keeps the sign of zero
    q = Fraction(value)
    if q == 0:
        return 0.0
    return _round_ratio(q.numerator, q.denominator, fmt)


def _rint_ratio(n: int, d: int) -> int:
    """Nearest integer to n / d (d > 0), ties to even (exact)."""
    f, rem = divmod(n, d)
    if 2 * rem > d or (2 * rem == d and f & 1):
        f += 1
    return f


def f32(value) -> float:
    """float32(value): round an exact value (int, Fraction, float) to float32."""
    return round_ieee(value, "float32")


def f16(value) -> float:
    return round_ieee(value, "float16")


def _sign(x: float) -> int:
    return -1 if math.copysign(1.0, x) < 0 else 1


def mul32(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return NAN
        return math.copysign(INF, _sign(a) * _sign(b))
    if a == 0 or b == 0:
        return math.copysign(0.0, _sign(a) * _sign(b))
    (na, da), (nb, db) = a.as_integer_ratio(), b.as_integer_ratio()
    return _round_ratio(na * nb, da * db, "float32")


def div32(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    s = _sign(a) * _sign(b)
    if math.isinf(a):
        return NAN if math.isinf(b) else math.copysign(INF, s)
    if math.isinf(b):
        return math.copysign(0.0, s)
    if b == 0:
        return NAN if a == 0 else math.copysign(INF, s)
    if a == 0:
        return math.copysign(0.0, s)
    (na, da), (nb, db) = a.as_integer_ratio(), b.as_integer_ratio()
    n, d = na * db, da * nb
    return _round_ratio(-n if d < 0 else n, abs(d), "float32")


def add32(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    if math.isinf(a) or math.isinf(b):
        if math.isinf(a) and math.isinf(b) and _sign(a) != _sign(b):
            return NAN
        return a if math.isinf(a) else b
    (na, da), (nb, db) = a.as_integer_ratio(), b.as_integer_ratio()
    n = na * db + nb * da
    if n == 0:
        # round to nearest: -0 only when both addends are -0
        return -0.0 if (_sign(a) < 0 and _sign(b) < 0) else 0.0
    return _round_ratio(n, da * db, "float32")


def rint_even(x) -> int:
    """rint of a finite value, ties to even."""
    if isinstance(x, float):
        return _rint_ratio(*x.as_integer_ratio())
    q = Fraction(x)
    return _rint_ratio(q.numerator, q.denominator)


def round_saturate(t: float, zp: int, dtype: str) -> int:
    qmin, qmax = QRANGE[dtype]
    if math.isnan(t):
        return zp
    if math.isinf(t):
        return qmax if t > 0 else qmin
    r = rint_even(t)
    return min(max(r, qmin - zp), qmax - zp) + zp


def requantize(v: float, s: float, zp, dtype: str) -> int:
    """docs/semantics.md requantize: t = v / s; NaN -> zp; rint, clamp, + zp."""
    return round_saturate(div32(v, s), 0 if zp is None else int(zp), dtype)


def widen(x) -> float:
    """A float16/float32 input value as float32 (exact), or an int32 input
    rounded to the nearest float32."""
    if isinstance(x, float):
        return x
    return f32(int(x))


def quantize(x, s, zp, dtype: str) -> int:
    return requantize(widen(x), float(s), zp, dtype)


def dequantize(q, s, zp, out: str = "float32") -> float:
    """float32(int(q) - int(zp)) * float32(s), then rounded once to out."""
    v = mul32(f32(int(q) - (0 if zp is None else int(zp))), float(s))
    return v if out == "float32" else f16(v)


def add(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, dtype: str) -> int:
    av = dequantize(a, a_s, a_zp)
    bv = dequantize(b, b_s, b_zp)
    return requantize(add32(av, bv), float(o_s), o_zp, dtype)


def _at(seq, i):
    """Per-tensor (length 1) or per-axis lookup; None stays None."""
    if seq is None:
        return None
    return seq[0] if len(seq) == 1 else seq[i]


def matmul(A, a_s, a_zp, B, b_s, b_zp, o_s, o_zp, dtype: str):
    """A: (M, K), B: (K, N) integer arrays. Scales/zps: sequences of length 1
    or M (A, out) / N (B); zps may be None. Returns an M x N list of ints."""
    A, B = np.asarray(A), np.asarray(B)
    (M, K), N = A.shape, B.shape[1]
    rows, cols = A.tolist(), B.T.tolist()
    out = []
    for m in range(M):
        azp = int(_at(a_zp, m) or 0)
        row = []
        for n in range(N):
            bzp = int(_at(b_zp, n) or 0)
            acc = sum((x - azp) * (y - bzp) for x, y in zip(rows[m], cols[n]))  # Python ints
            mult = div32(mul32(float(_at(a_s, m)), float(_at(b_s, n))), float(_at(o_s, m)))
            t = mul32(f32(acc), mult)
            row.append(requantize(t, 1.0, _at(o_zp, m), dtype))
        out.append(row)
    return out


def avgpool(x, x_s, x_zp, o_s, o_zp, dtype, out_spatial, window, strides, start_pad,
            end_pad, dilations, include_padding):
    """x: an integer array (N, C, *spatial), 2 or 3 spatial dims, read element by
    element. Scales/zps: sequences of length 1 or C (zps may be None). Returns
    nested lists [N][C][out_spatial...] of ints."""
    nd = len(window)
    n_, c_ = x.shape[:2]
    in_sp = x.shape[2:]

    def cell(nn, cc, o):
        zp_x = int(_at(x_zp, cc) or 0)
        S, inside, counted = 0, 0, 0
        for k in itertools.product(*(range(w) for w in window)):
            pos = tuple(o[i] * strides[i] - start_pad[i] + k[i] * dilations[i] for i in range(nd))
            if all(0 <= pos[i] < in_sp[i] for i in range(nd)):
                S += int(x[(nn, cc) + pos]) - zp_x
                inside += 1
            if all(-start_pad[i] <= pos[i] < in_sp[i] + end_pad[i] for i in range(nd)):
                counted += 1
        count = counted if include_padding else inside
        zp_o = _at(o_zp, cc)
        if count == 0:
            return int(zp_o or 0)
        v = div32(mul32(f32(S), float(_at(x_s, cc))), f32(count))
        return requantize(v, float(_at(o_s, cc)), zp_o, dtype)

    def build(nn, cc, prefix):
        if len(prefix) == nd:
            return cell(nn, cc, prefix)
        return [build(nn, cc, prefix + (o,)) for o in range(out_spatial[len(prefix)])]

    return [[build(nn, cc, ()) for cc in range(c_)] for nn in range(n_)]


# ---- array drivers: NumPy only broadcasts and indexes; every value is computed
# ---- by the scalar functions above.

def _scalar(v):
    """A NumPy element as a Python float (exact for float16/32) or int."""
    return v.item() if hasattr(v, "item") else v


def _zps(zp):
    return None if zp is None else [int(_scalar(v)) for v in np.asarray(zp).reshape(-1)]


def _scales(s):
    out = [float(_scalar(v)) for v in np.asarray(s).reshape(-1)]
    assert all(math.isnan(v) or f32(v) == v for v in out), "scales must be float32 values"
    return out


def _shape(shape, *arrays):
    """The given output shape, else the broadcast shape of the arrays."""
    if shape is not None:
        return tuple(shape)
    return np.broadcast_shapes(*(np.shape(a) for a in arrays if a is not None))


def quantize_array(x, s, zp, dtype, shape=None):
    x, s = np.asarray(x), np.asarray(s)
    shape = _shape(shape, x, s, zp)
    xb, sb = np.broadcast_to(x, shape), np.broadcast_to(s, shape)
    zb = None if zp is None else np.broadcast_to(np.asarray(zp), shape)
    name = np.dtype(dtype).name
    out = np.empty(shape, dtype)
    for i in np.ndindex(shape):
        out[i] = quantize(_scalar(xb[i]), float(sb[i]), None if zb is None else int(zb[i]), name)
    return out


def dequantize_array(q, s, zp, out_dtype=None, shape=None):
    q, s = np.asarray(q), np.asarray(s)
    out_dtype = np.dtype(out_dtype or s.dtype)
    shape = _shape(shape, q, s, zp)
    qb, sb = np.broadcast_to(q, shape), np.broadcast_to(s, shape)
    zb = None if zp is None else np.broadcast_to(np.asarray(zp), shape)
    out = np.empty(shape, out_dtype)
    for i in np.ndindex(shape):
        zpi = None if zb is None else int(zb[i])
        out[i] = dequantize(int(qb[i]), float(sb[i]), zpi, out_dtype.name)
    return out


def add_array(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, dtype, shape=None):
    a, b = np.asarray(a), np.asarray(b)
    shape = _shape(shape, a, b)
    ab, bb = np.broadcast_to(a, shape), np.broadcast_to(b, shape)

    def zp1(v):
        return None if v is None else _zps(v)[0]

    args = (_scales(a_s)[0], zp1(a_zp), _scales(b_s)[0], zp1(b_zp), _scales(o_s)[0], zp1(o_zp))
    # A's and B's dequantized values depend on one element each: tabulate them.
    av = {v: dequantize(v, args[0], args[1]) for v in np.unique(ab).tolist()}
    bv = {v: dequantize(v, args[2], args[3]) for v in np.unique(bb).tolist()}
    name = str(np.dtype(dtype))
    res = [requantize(add32(av[x], bv[y]), args[4], args[5], name)
           for x, y in zip(ab.ravel().tolist(), bb.ravel().tolist())]
    return np.array(res, dtype=np.int64).reshape(shape).astype(dtype)


def matmul_array(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, dtype, batch_shape=None):
    """numpy.matmul-style batches; each (M, N) product by the scalar model."""
    a, b = np.asarray(a), np.asarray(b)
    if batch_shape is None:
        batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    batch_shape = tuple(batch_shape)
    M, N = a.shape[-2], b.shape[-1]
    ab = np.broadcast_to(a, batch_shape + a.shape[-2:])
    bb = np.broadcast_to(b, batch_shape + b.shape[-2:])
    out = np.empty(batch_shape + (M, N), dtype)
    args = (_scales(a_s), _zps(a_zp), _scales(b_s), _zps(b_zp), _scales(o_s), _zps(o_zp))
    for z in np.ndindex(batch_shape):
        res = matmul(ab[z], args[0], args[1], bb[z], args[2], args[3],
                     args[4], args[5], str(np.dtype(dtype)))
        out[z] = np.array(res, dtype=np.int64).reshape(M, N)
    return out


def avgpool_array(x, x_s, x_zp, o_s, o_zp, dtype, out_spatial, window, strides, start_pad,
                  end_pad, dilations, include_padding):
    x = np.asarray(x)
    res = avgpool(x, _scales(x_s), _zps(x_zp), _scales(o_s), _zps(o_zp), str(np.dtype(dtype)),
                  out_spatial, window, strides, start_pad, end_pad, dilations, include_padding)
    return np.array(res, dtype=np.int64).reshape(x.shape[:2] + tuple(out_spatial)).astype(dtype)


def intmm_array(a, a_zp, b, b_zp, out_shape, out_dtype, a_s=None, b_s=None, bias=None, block_size=None):
    """matmul_integer (a_s None: the exact sum wrapped to int32) or matmul_integer_to_float
    (docs/semantics.md: per group of block_size k, float32(acc_g) * (a_s * b_s_g), the groups
    added in ascending order, then the bias, then one rounding to the output type), each
    element by Python ints and exactly rounded float32 operations. Parameters in the backend
    form: a's () or (M, 1); b's () or (..., 1 or G, N); bias broadcast to the output."""
    shape, out_dtype = tuple(out_shape), np.dtype(out_dtype)
    batch, (M, N) = shape[:-2], shape[-2:]
    K = np.shape(a)[-1]
    ints = (lambda v, s: np.broadcast_to(np.asarray(v).astype(np.int64), s))
    ab, bb = ints(a, batch + (M, K)), ints(b, batch + (K, N))
    step = block_size or max(K, 1)
    groups = [(g, min(g + step, K)) for g in range(0, K, step)] or ([(0, 0)] if block_size is None else [])

    def b_at(p, z, g, n):  # a b parameter for matrix z, group g, column n
        p = np.asarray(p)
        if p.ndim >= 2:
            p = np.broadcast_to(p, batch + p.shape[-2:])[z]
            return p[g if p.shape[-2] > 1 else 0, n]
        return p

    def a_at(p, m):
        p = np.asarray(p)
        return p.reshape(-1)[m if p.size > 1 else 0]

    out = np.empty(shape, out_dtype)
    biasb = None if bias is None else np.broadcast_to(np.asarray(bias), shape)
    for z in np.ndindex(*batch):
        A, B = ab[z].tolist(), bb[z].T.tolist()
        for m in range(M):
            azp = 0 if a_zp is None else int(a_at(a_zp, m))
            for n in range(N):
                accs = [sum((A[m][k] - azp) * (B[n][k] - (0 if b_zp is None else int(b_at(b_zp, z, gi, n))))
                            for k in range(k0, k1)) for gi, (k0, k1) in enumerate(groups)]
                if a_s is None:
                    out[z + (m, n)] = (sum(accs) + 2**31) % 2**32 - 2**31
                    continue
                v = None
                for gi, acc in enumerate(accs):
                    term = mul32(f32(acc), mul32(float(a_at(a_s, m)), float(b_at(b_s, z, gi, n))))
                    v = term if v is None else add32(v, term)
                v = 0.0 if v is None else v
                if biasb is not None:
                    v = add32(v, float(biasb[z + (m, n)]))
                out[z + (m, n)] = v if out_dtype == np.float32 else f16(v) if not math.isnan(v) else v
    return out
