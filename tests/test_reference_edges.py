"""The host backends on every edge case of docs/semantics.md, in groups 1-9 below:
dmlq.reference, and dmlq.cpu with each call also compared bit for bit with the
reference (tests/host_backends.py); every test runs once per backend.

Expected values are worked out by hand (the arithmetic is in the comments) or
computed by tests/exact.py, an independent exact-rational model; never copied
from the reference.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction as F

import numpy as np
import pytest

import exact
import host_backends
from conftest import poison

R = host_backends.get("reference")  # the backend under test, set per test by _backend


@pytest.fixture(autouse=True, params=host_backends.NAMES)
def _backend(request):
    global R
    R = host_backends.get(request.param)
    yield
    R = host_backends.get("reference")

I8, U8 = np.int8, np.uint8
QTYPES = (I8, U8)
F32, F16 = np.float32, np.float16


def f32(v):
    return np.float32(v)


def hexf(x: float) -> F:
    """A float written in hex (e.g. '0x1.99cccep-3') as an exact Fraction."""
    return F(float.fromhex(x))


def bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    ia = a.view(np.uint16 if a.dtype == F16 else np.uint32)
    ib = b.view(np.uint16 if b.dtype == F16 else np.uint32)
    return np.array_equal(ia, ib)


# ---- calling the reference ----------------------------------------------------

def quantize(x, s, zp=None, dtype=None):
    x, s = np.asarray(x), np.asarray(s)
    zp = None if zp is None else np.asarray(zp, dtype)
    dtype = np.dtype(dtype if dtype is not None else U8)
    shape = np.broadcast_shapes(x.shape, s.shape, () if zp is None else zp.shape)
    return R.quantize_linear(x, s, zp, poison(np.empty(shape, dtype)))


def dequantize(q, s, zp=None):
    q, s = np.asarray(q), np.asarray(s)
    zp = None if zp is None else np.asarray(zp, q.dtype)
    shape = np.broadcast_shapes(q.shape, s.shape, () if zp is None else zp.shape)
    return R.dequantize_linear(q, s, zp, poison(np.empty(shape, s.dtype)))


def _arr(v, dt):
    return None if v is None else np.asarray(v, dt).reshape(-1)


def add(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, dtype, out=None):
    a, b = np.asarray(a), np.asarray(b)
    if out is None:
        out = poison(np.empty(np.broadcast_shapes(a.shape, b.shape), dtype))
    return R.quantized_add(a, _arr(a_s, F32), _arr(a_zp, a.dtype), b, _arr(b_s, F32),
                           _arr(b_zp, b.dtype), _arr(o_s, F32), _arr(o_zp, dtype), out)


def matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, dtype, out=None):
    a, b = np.asarray(a), np.asarray(b)
    if out is None:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = poison(np.empty(batch + (a.shape[-2], b.shape[-1]), dtype))
    return R.quantized_matmul(a, _arr(a_s, F32), _arr(a_zp, a.dtype), b, _arr(b_s, F32),
                              _arr(b_zp, b.dtype), _arr(o_s, F32), _arr(o_zp, dtype), out)


def pool(x, x_s, x_zp, o_s, o_zp, dtype, out_spatial, window, strides=None, start=None,
         end=None, dilations=None, include_padding=False, out=None):
    x = np.asarray(x)
    nd = x.ndim - 2
    strides = strides or (1,) * nd
    start = start or (0,) * nd
    end = end or (0,) * nd
    dilations = dilations or (1,) * nd
    if out is None:
        out = poison(np.empty(x.shape[:2] + tuple(out_spatial), dtype))
    got = R.quantized_avg_pool(x, _arr(x_s, F32), _arr(x_zp, x.dtype), _arr(o_s, F32),
                               _arr(o_zp, dtype), out, tuple(window), tuple(strides), tuple(start),
                               tuple(end), tuple(dilations), include_padding)
    want = exact.avgpool_array(x, _arr(x_s, F32), _arr(x_zp, x.dtype), _arr(o_s, F32),
                               _arr(o_zp, dtype), dtype, tuple(out_spatial), tuple(window),
                               tuple(strides), tuple(start), tuple(end), tuple(dilations),
                               include_padding)
    return got, want


# ---- 0. the exact model itself, on hand-computed values -----------------------

def test_exact_rounding_hand_values():
    # 1/3 = 0.0101...b: 24 significant bits 1.0101..01|0101.. -> round up -> 0x1.555556p-2
    assert exact.f32(F(1, 3)) == float.fromhex("0x1.555556p-2")
    # 2**24 + 1 sits halfway between 2**24 and 2**24 + 2: ties to the even significand
    assert exact.f32(2**24 + 1) == 2**24
    assert exact.f32(2**24 + 3) == 2**24 + 4          # (2**24+3)/2 = 8388609.5 -> 8388610
    assert exact.f32(33161217) == 33161216            # odd/2 = 16580608.5 -> 16580608 (even)
    assert exact.f32(4294967295) == 4294967296        # 1 below 2**32, ulp 256 -> up
    # gradual underflow: 2**-149 is the smallest subnormal
    assert exact.f32(F(1, 2**150)) == 0.0             # tie between 0 and 2**-149 -> 0 (even)
    assert exact.f32(F(3, 2**151)) == 2.0**-149       # 0.75 ulp -> 1 ulp
    assert exact.f32(F(3, 2**150)) == 2.0**-148       # 1.5 ulp -> 2 ulp (even)
    assert math.copysign(1, exact.f32(F(-1, 2**151))) == -1 and exact.f32(F(-1, 2**151)) == 0
    # overflow: largest float32 is 2**128 - 2**104; the halfway point rounds to 2**128 = inf
    assert exact.f32(2**128 - 2**104) == float.fromhex("0x1.fffffep127")
    assert exact.f32(2**128 - 2**103 - 1) == float.fromhex("0x1.fffffep127")
    assert exact.f32(2**128 - 2**103) == math.inf
    assert exact.f32(-(2**129)) == -math.inf
    # float16: max 65504, halfway to 65536 is 65520 -> inf; smallest subnormal 2**-24
    assert exact.f16(65519) == 65504 and exact.f16(65520) == math.inf
    assert exact.f16(F(1, 2**25)) == 0.0 and exact.f16(F(3, 2**26)) == 2.0**-24
    assert exact.f16(16392) == 16384 and exact.f16(16393) == 16400    # ulp 16 at 2**14
    # cross-check against NumPy's (correctly rounded) conversions of doubles
    rng = np.random.default_rng(7)
    for x in rng.standard_normal(2000) * 2.0 ** rng.integers(-160, 140, 2000):
        with np.errstate(over="ignore"):
            assert exact.f32(float(x)) == float(np.float32(x))
            assert exact.f16(float(x)) == float(np.float16(x))


def test_exact_ieee_specials_and_rint():
    inf, nan = math.inf, math.nan
    assert exact.div32(1.0, 0.0) == inf and exact.div32(-1.0, 0.0) == -inf
    assert exact.div32(1.0, -0.0) == -inf
    assert math.isnan(exact.div32(0.0, 0.0)) and math.isnan(exact.div32(-0.0, 0.0))
    assert math.isnan(exact.div32(inf, inf)) and exact.div32(inf, -2.0) == -inf
    assert exact.div32(3.0, inf) == 0.0 and math.copysign(1, exact.div32(-3.0, inf)) == -1
    assert math.isnan(exact.mul32(inf, 0.0)) and math.isnan(exact.mul32(nan, 1.0))
    assert math.copysign(1, exact.mul32(-3.0, 0.0)) == -1
    assert math.isnan(exact.add32(inf, -inf)) and exact.add32(inf, 1.0) == inf
    assert math.copysign(1, exact.add32(-0.0, -0.0)) == -1
    assert math.copysign(1, exact.add32(1.0, -1.0)) == 1
    assert exact.mul32(2.0**-75, 2.0**-75) == 0.0     # 2**-150: tie -> 0
    assert exact.mul32(3.0, 2.0**-150 * 2) == 3 * 2.0**-149
    assert exact.div32(1.0, 3.0) == float.fromhex("0x1.555556p-2")
    assert exact.add32(2.0**24, 1.0) == 2.0**24       # tie -> even
    assert exact.add32(2.0**24, 3.0) == 2.0**24 + 4
    ties = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 76.5, -76.5, F(7, 2), 3, 2.4999999]
    assert [exact.rint_even(t) for t in ties] == [0, 0, 2, -2, 2, -2, 76, -76, 4, 3, 2]
    assert exact.requantize(1.0, 0.0, 5, "int8") == 127
    assert exact.requantize(0.0, 0.0, 5, "int8") == 5
    assert exact.requantize(-300.0, 1.0, 100, "uint8") == 0
    assert exact.requantize(127.5, 1.0, 0, "int8") == 127   # rint 128, clamped


def test_exact_division_is_correctly_rounded_against_float64():
    # Figueroa: rounding a double result of +,*,/ on float32 operands to float32 is
    # correctly rounded (53 >= 2*24 + 2), a second independent check of exact.py.
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(3000) * 2.0 ** rng.integers(-140, 120, 3000)).astype(F32)
    b = (rng.standard_normal(3000) * 2.0 ** rng.integers(-140, 120, 3000)).astype(F32)
    with np.errstate(all="ignore"):
        want = {
            exact.div32: (a.astype(np.float64) / b.astype(np.float64)).astype(F32),
            exact.mul32: (a.astype(np.float64) * b.astype(np.float64)).astype(F32),
            exact.add32: (a.astype(np.float64) + b.astype(np.float64)).astype(F32),
        }
    for fn, w in want.items():
        got = np.array([fn(float(x), float(y)) for x, y in zip(a, b)], F32)
        assert bits_equal(got, w), fn.__name__


# ---- 1. exact ties ------------------------------------------------------------

# t = x / s with s = 1: t is x itself. rint to even: 0.5->0, -0.5->-0->0, 1.5->2,
# -1.5->-2, 2.5->2, -2.5->-2, 76.5->76, -76.5->-76, 3.5->4, 127.5->128 (clamped).
TIES_T = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 76.5, -76.5, 3.5]
TIES_R = [0, 0, 2, -2, 2, -2, 76, -76, 4]


@pytest.mark.parametrize("xdt", [F32, F16])
@pytest.mark.parametrize("sdt", [F32, F16])
@pytest.mark.parametrize("dtype,zp", [(I8, 0), (I8, 5), (I8, -7), (U8, 128), (U8, 100)])
@pytest.mark.parametrize("scale", [1.0, 0.25, 4.0])
def test_ties_float_inputs(xdt, sdt, dtype, zp, scale):
    # x = t * scale is exact in float16 and float32 (few significant bits), and
    # x / scale = t exactly, so the result is rint(t) + zp.
    x = np.array(TIES_T, np.float64) * scale
    got = quantize(x.astype(xdt), np.array(scale, sdt), zp, dtype)
    assert got.tolist() == [r + zp for r in TIES_R]


@pytest.mark.parametrize("dtype,zp", [(I8, 0), (I8, -3), (U8, 128)])
def test_ties_int32_input(dtype, zp):
    # t = x / 2: 1/2 -> 0, 3/2 -> 2, 5/2 -> 2, 153/2 = 76.5 -> 76, -5/2 -> -2, -1/2 -> 0, -3/2 -> -2
    x = np.array([1, 3, 5, 153, -5, -1, -3], np.int32)
    got = quantize(x, np.float32(2.0), zp, dtype)
    assert got.tolist() == [v + zp for v in [0, 2, 2, 76, -2, 0, -2]]


def test_ties_at_the_saturation_edges():
    # int8: 127.5 -> rint 128 -> clamp 127; -128.5 -> -128; uint8: 255.5 -> 256 -> 255;
    # -0.5 -> -0 -> 0; with zp 10: t = 117.5 -> 118 -> clamped to 127 - 10 = 117 -> 127.
    assert quantize(np.float32([127.5, -128.5, 126.5]), F32(1), 0, I8).tolist() == [127, -128, 126]
    assert quantize(np.float32([255.5, -0.5, 254.5]), F32(1), 0, U8).tolist() == [255, 0, 254]
    assert quantize(np.float32([117.5, 116.5]), F32(1), 10, I8).tolist() == [127, 126]


# ---- 2. division-sensitive near ties ------------------------------------------

@pytest.mark.parametrize("x,s", [(5.0, 0.039215686), (0.273939937, 0.00214854861)])
@pytest.mark.parametrize("sign", [1, -1])
def test_near_ties_need_true_division(x, s, sign):
    x32, s32 = float(f32(sign * x)), float(f32(s))
    # The exact quotient of the two float32 values is just below 127.5:
    q = F(x32) / F(s32)
    assert abs(q) < F(255, 2) and abs(q) > F(255, 2) - F(1, 10**5)
    # float32(q) is 127.49999237060547 = 0x1.fdfffep6 (the float32 below 127.5).
    t = exact.f32(q)
    assert abs(t) == float.fromhex("0x1.fdfffep6")
    # The reciprocal shortcut rounds 1/s first and lands exactly on the tie 127.5 -> 128.
    recip = exact.f32(F(1) / F(s32))
    assert abs(exact.mul32(x32, recip)) == 127.5
    for dtype, zp in [(I8, 0), (U8, 0), (U8, 128), (I8, -1)]:
        want = min(max(127 * sign, np.iinfo(dtype).min - zp), np.iinfo(dtype).max - zp) + zp
        assert quantize(np.float32([x32]), F32(s32), zp, dtype).tolist() == [want]


# ---- 3. NaN / Inf / huge -------------------------------------------------------

@pytest.mark.parametrize("dtype,zp", [(I8, 0), (I8, 127), (I8, -128), (U8, 0), (U8, 128), (U8, 255)])
@pytest.mark.parametrize("scale", [1.0, 0.5, 1e-3, 1e30])
def test_nan_inf_huge_float32(dtype, zp, scale):
    qmin, qmax = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = np.float32([np.nan, np.inf, -np.inf, 3e38, -3e38])
    # 3e38 / 0.5 overflows to inf (-> qmax); 3e38 / 1e30 = 3e8 is still far above qmax.
    assert quantize(x, F32(scale), zp, dtype).tolist() == [zp, qmax, qmin, qmax, qmin]
    # a NaN scale gives NaN t for every x
    assert quantize(x, F32(np.nan), zp, dtype).tolist() == [zp] * 5


@pytest.mark.parametrize("dtype,zp", [(I8, 0), (I8, 127), (I8, -128), (U8, 0), (U8, 128), (U8, 255)])
def test_nan_inf_huge_float16_and_int32(dtype, zp):
    qmin, qmax = np.iinfo(dtype).min, np.iinfo(dtype).max
    x16 = np.float16([np.nan, np.inf, -np.inf, 65504, -65504])
    # 65504 / 2**-24 (float16's smallest subnormal scale) = 1.1e12 -> saturates
    assert quantize(x16, F16(2.0**-24), zp, dtype).tolist() == [zp, qmax, qmin, qmax, qmin]
    assert quantize(x16, F32(1.0), zp, dtype).tolist() == [zp, qmax, qmin, qmax, qmin]
    x32 = np.int32([2**31 - 1, -(2**31)])
    assert quantize(x32, F32(1e-3), zp, dtype).tolist() == [qmax, qmin]


# ---- 4. float16 pairs ----------------------------------------------------------

def test_float16_pair_divides_in_float32():
    x, s = np.float16(0.623046875), np.float16(0.03775024)
    assert float(x) == 0.623046875                       # 319/512, exact in float16
    xs, ss = F(float(x)), F(float(s))
    t32 = exact.f32(xs / ss)                             # the float32 quotient
    t16 = exact.f16(xs / ss)                             # what a float16 division would give
    assert 16.5 < t32 < 16.51 and t16 == 16.5            # 16.5 -> 16 (even), 16.50x -> 17
    assert quantize(np.array([x]), s, 0, I8).tolist() == [17]
    assert quantize(np.array([x]), s, 0, U8).tolist() == [17]
    assert quantize(np.array([-x]), s, 10, I8).tolist() == [-17 + 10]
    # float16 input with a float32 scale (widened exactly), the same quotient
    assert quantize(np.array([x]), F32(float(s)), 0, I8).tolist() == [17]


# ---- 5. int32 above 2**24, dequantize extremes ---------------------------------

def test_int32_quantize_rounds_to_float32_first():
    # float32(33161217) = 33161216 (tie, even significand); 33161216 / 262144 = 126.5 -> 126.
    # (The exact quotient 126.500004 would give 127.)
    for dtype, zp in [(I8, 0), (U8, 0), (U8, 100)]:
        assert quantize(np.int32([33161217]), F32(262144), zp, dtype).tolist() == [126 + zp]
    # -33161217 -> -33161216 -> -126.5 -> -126
    assert quantize(np.int32([-33161217]), F32(262144), 0, I8).tolist() == [-126]
    # 2**31 - 1 -> 2**31 (nearest float32); / 2**25 = 64 exactly
    assert quantize(np.int32([2**31 - 1]), F32(2.0**25), 0, I8).tolist() == [64]


@pytest.mark.parametrize("qdt,q,zp,diff", [
    (np.int32, 2**31 - 1, -1, 2**31),          # int32 arithmetic would wrap to -2**31
    (np.int32, -(2**31), 2**31 - 1, -(2**32 - 1)),
    (np.uint32, 2**32 - 1, 0, 2**32 - 1),
    (np.uint32, 0, 2**32 - 1, -(2**32 - 1)),
    (np.int16, -(2**15), 2**15 - 1, -(2**16 - 1)),
    (np.uint16, 2**16 - 1, 0, 2**16 - 1),
    (np.int8, -128, 127, -255),
    (np.uint8, 255, 0, 255),
])
@pytest.mark.parametrize("scale", [1.0, 2.0**-20, 0.5, 3.0])
def test_dequantize_extremes(qdt, q, zp, diff, scale):
    # float32(diff): 2**31 exact; 2**32 - 1 -> 2**32 (ulp 256, 1 below 2**32);
    # 65535 and 255 exact. Then one float32 multiply by a power of two (exact) or 3.
    d32 = {2**31: 2.0**31, 2**32 - 1: 2.0**32, 2**16 - 1: 65535.0, 255: 255.0}[abs(diff)]
    d32 = math.copysign(d32, diff)
    want32 = exact.f32(F(d32) * F(scale))    # one rounding (3 * 65535 etc. are exact anyway)
    got = dequantize(np.array([q], qdt), np.float32(scale), np.array([zp], qdt))
    assert got.dtype == F32 and float(got[0]) == want32
    # float16 scale and output: the float32 product rounded once to float16.
    # 2**31 * 1 -> inf; 2**32 * 2**-20 = 4096; 65535 * 0.5 = 32767.5 -> 32768 (ulp 16);
    # 255 * 3 = 765 exact.
    got16 = dequantize(np.array([q], qdt), np.float16(scale), np.array([zp], qdt))
    assert got16.dtype == F16 and float(got16[0]) == exact.f16(want32)
    if abs(diff) >= 2**16 - 1 and scale >= 1.0:
        assert np.isinf(got16[0]) and np.sign(got16[0]) == np.sign(diff)   # overflow to inf


def test_dequantize_float16_output_rounds_the_float32_product_once():
    # q = 22380545 (int32) -> float32 22380544 (tie to even); times 3 * 2**-12 (a float16)
    # = 67141632 / 4096 = 16392 exactly, a float16 tie (ulp 16 above 2**14) -> 16384.
    # Rounding the exact product 16392.00073 directly would give 16400.
    s = np.float16(3 * 2.0**-12)
    assert float(s) == 3 * 2.0**-12
    assert dequantize(np.int32([22380545]), s).tolist() == [16384.0]
    assert dequantize(np.int32([22380545]), np.float32(s)).tolist() == [16392.0]
    # float16 subnormal output, no flush: 1 * 2**-24
    assert dequantize(np.int8([1]), np.float16(2.0**-24)).tolist() == [2.0**-24]
    assert dequantize(np.int8([-3]), np.float16(2.0**-24)).tolist() == [-3 * 2.0**-24]


# ---- 6. matrix multiply --------------------------------------------------------

def _worst_case(ta, tb, K):
    """A (2, K) and B (K, 2) whose per-row / per-column zero points make every
    term (a - a_zp) * (b - b_zp) = +-255 * +-255: row/col 0 gives +255, 1 gives -255."""
    def plus_minus(t):
        if t == I8:   # 127 - (-128) = 255, -128 - 127 = -255
            return (127, -128), (-128, 127)
        return (255, 0), (0, 255)  # uint8
    (ap, azp0), (am, azp1) = plus_minus(ta)
    (bp, bzp0), (bm, bzp1) = plus_minus(tb)
    a = np.array([[ap] * K, [am] * K], ta)
    b = np.array([[bp, bm]] * K, tb)
    return a, np.array([azp0, azp1], ta), b, np.array([bzp0, bzp1], tb)


COMBOS = list(itertools.product(QTYPES, QTYPES, QTYPES))


@pytest.mark.parametrize("ta,tb,to", COMBOS)
@pytest.mark.parametrize("K", [33025, 33026])
def test_matmul_worst_case_K(ta, tb, to, K):
    a, azp, b, bzp = _worst_case(ta, tb, K)
    # Exact accumulators with Python ints: K * (+-255) * (+-255).
    rows, cols, az, bz = a.tolist(), b.T.tolist(), azp.tolist(), bzp.tolist()
    acc = [[sum((x - az[m]) * (y - bz[n]) for x, y in zip(rows[m], cols[n])) for n in range(2)]
           for m in range(2)]
    big = {33025: 2147450625, 33026: 2147515650}[K]     # 33025 * 65025, 33026 * 65025
    assert acc == [[big, -big], [-big, big]]
    assert (K == 33025) == (big < 2**31)                 # 33026 no longer fits int32

    # Scales 2**-12 * 2**-12 / 1: mult = 2**-24, t = float32(acc) / 2**24.
    # K=33025: float32(2147450625) = 2147450624 (ulp 128, remainder 1) -> t = 127.998046875 -> 128.
    # K=33026: float32(2147515650) = 2147515648 (ulp 256, remainder 2) -> t = 128.001953125 -> 128.
    # (a wrapped int32 accumulator, 2147515650 - 2**32, would give t ~ -128.)
    ozp = np.array([-1, 2], to) if to == I8 else np.array([100, 150], to)
    s = np.float32(2.0**-12)
    got = matmul(a, [s, s], azp, b, [s, s], bzp, [1.0, 1.0], ozp, to)
    lo, hi = np.iinfo(to).min, np.iinfo(to).max
    want = [[min(max(v + int(ozp[m]), lo), hi) for v in (128, -128)[::1 if m == 0 else -1]]
            for m in range(2)]
    assert got.tolist() == want

    # Scales put t within one K-term of a rounding tie, so any error in acc shows:
    # pick out_scale so that acc * 2**-24 / out_scale is just above 100.5.
    fbig = exact.f32(big)
    os_ = exact.f32(F(fbig) / 2**24 / (F(201, 2) + F(1, 1000)))
    ozp = np.array([0, 0], to) if to == I8 else np.array([0, 255], to)
    got = matmul(a, [s, s], azp, b, [s, s], bzp, [os_, os_], ozp, to)
    want = exact.matmul(a, [float(s)], azp.tolist(), b, [float(s)], bzp.tolist(), [os_, os_],
                        ozp.tolist(), np.dtype(to).name)
    assert got.tolist() == want
    # the same computation one K-term short must differ in the positive corner
    short = exact.mul32(exact.f32(big - 65025), exact.div32(exact.mul32(float(s), float(s)), os_))
    assert exact.rint_even(short) == 100
    assert want[0][0] == min(101 + int(ozp[0]), 127 if to == I8 else 255)


# The order of the float operations matters. For each plausible wrong order, a
# deterministic search (exact arithmetic throughout) finds acc and scales where it
# rounds differently from docs/semantics.md's (a_scale * b_scale) / out_scale, then float32(acc)
# times that; the reference must give the docs/semantics.md answer on each.
MM_WRONG_ORDERS = {
    "(as/os)*bs": lambda acc, a, b, o: exact.mul32(exact.f32(acc), exact.mul32(exact.div32(a, o), b)),
    "as*(bs/os)": lambda acc, a, b, o: exact.mul32(exact.f32(acc), exact.mul32(a, exact.div32(b, o))),
    "((acc*as)*bs)/os": lambda acc, a, b, o: exact.div32(
        exact.mul32(exact.mul32(exact.f32(acc), a), b), o),
    "(acc*(as*bs))/os": lambda acc, a, b, o: exact.div32(
        exact.mul32(exact.f32(acc), exact.mul32(a, b)), o),
    "acc*((as*bs)*(1/os))": lambda acc, a, b, o: exact.mul32(
        exact.f32(acc), exact.mul32(exact.mul32(a, b), exact.div32(1.0, o))),
}


def _mm_right(acc, a, b, o):
    return exact.mul32(exact.f32(acc), exact.div32(exact.mul32(a, b), o))


def _find_order_case(right, wrong, draw, seed):
    """Draw (args, t_target) cases and jitter the last argument (the output scale) by a
    few ulps around the value that puts t on a .5 tie, until right and wrong round apart."""
    rng = np.random.default_rng(seed)
    for _ in range(5000):
        args, scale = draw(rng)
        for j in range(-6, 7):
            o = float(F32(scale) + F32(j) * np.spacing(F32(scale)))
            if o > 0 and exact.rint_even(right(*args, o)) != exact.rint_even(wrong(*args, o)):
                return args + (o,)
    raise AssertionError("no distinguishing case found")


def _draw_mm(rng):
    a_s, b_s = (float(F32(v)) for v in rng.uniform(0.001, 0.1, 2))
    acc = int(rng.integers(1000, 30000)) * int(rng.choice([-1, 1]))
    target = int(rng.integers(-100, 100)) + 0.5
    return (acc, a_s, b_s), a_s * b_s * acc / target


def _realize_acc(acc):
    """int8 A (1, 4), B (4, 1) with sum_k A*B = acc: 127 * (b0 + b1 + b2) + b3."""
    q, r = divmod(acc, 127)           # 0 <= r < 127, |q| <= 381
    parts = []
    for _ in range(3):
        parts.append(max(-127, min(127, q - sum(parts))))
    assert 127 * sum(parts) + r == acc
    return np.array([[127, 127, 127, 1]], I8), np.array([[parts[0]], [parts[1]], [parts[2]], [r]], I8)


@pytest.mark.parametrize("wrong", sorted(MM_WRONG_ORDERS))
def test_matmul_float_operation_order(wrong):
    acc, a_s, b_s, o_s = _find_order_case(_mm_right, MM_WRONG_ORDERS[wrong], _draw_mm, seed=1)
    a, b = _realize_acc(acc)
    want = exact.rint_even(_mm_right(acc, a_s, b_s, o_s))
    assert want != exact.rint_even(MM_WRONG_ORDERS[wrong](acc, a_s, b_s, o_s))
    assert abs(want) <= 100
    got = matmul(a, [a_s], None, b, [b_s], None, [o_s], None, I8)
    assert got.tolist() == [[want]]


@pytest.mark.parametrize("ta,tb,to", COMBOS)
def test_matmul_per_row_per_column_random_large_K(ta, tb, to, rng):
    M, K, N = 3, 33026, 2
    a = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, (M, K)).astype(ta)
    b = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, (K, N)).astype(tb)
    azp = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, M).astype(ta)
    bzp = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, N).astype(tb)
    ozp = rng.integers(np.iinfo(to).min, np.iinfo(to).max + 1, M).astype(to)
    a_s = rng.uniform(1e-3, 1e-2, M).astype(F32)
    b_s = rng.uniform(1e-3, 1e-2, N).astype(F32)
    o_s = rng.uniform(1e-1, 10, M).astype(F32)
    got = matmul(a, a_s, azp, b, b_s, bzp, o_s, ozp, to)
    want = exact.matmul_array(a, a_s, azp, b, b_s, bzp, o_s, ozp, to)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("ta,tb,to", COMBOS)
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 7, 5), (6, 1, 3), (5, 9, 1), (17, 33, 65),
                                   (1, 300, 1), (2, 0, 3)])
@pytest.mark.parametrize("layout", ["tensor", "axis", "none"])
def test_matmul_small_shapes_every_layout(ta, tb, to, M, K, N, layout, rng):
    def q(t, size):
        return rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, size).astype(t)
    a, b = q(ta, (M, K)), q(tb, (K, N))
    per = layout == "axis"
    a_s = rng.uniform(0.01, 0.1, M if per else 1).astype(F32)
    b_s = rng.uniform(0.01, 0.1, N if per else 1).astype(F32)
    o_s = rng.uniform(0.05, 2.0, M if per else 1).astype(F32)
    azp = None if layout == "none" else q(ta, M if per else 1)
    bzp = None if layout == "none" else q(tb, N if per else 1)
    ozp = None if layout == "none" else q(to, M if per else 1)
    got = matmul(a, a_s, azp, b, b_s, bzp, o_s, ozp, to)
    assert np.array_equal(got, exact.matmul_array(a, a_s, azp, b, b_s, bzp, o_s, ozp, to))


@pytest.mark.parametrize("to", QTYPES)
def test_matmul_saturating_and_special_multipliers(to):
    lo, hi = np.iinfo(to).min, np.iinfo(to).max
    zp = 0 if to == I8 else 128
    a = np.array([[100, -100, 0]], I8)            # M=1, K=1 per column of B below
    a = a.reshape(3, 1)
    b = np.array([[1, 1]], I8)                    # K=1, N=2
    # acc = [[100, 100], [-100, -100], [0, 0]]
    # mult = 1 * 1 / 1e-3 -> t = +-1e5: saturates; acc 0 -> t 0 -> zp
    got = matmul(a, [1.0], None, b, [1.0], None, [1e-3], [zp], to)
    assert got.tolist() == [[hi, hi], [lo, lo], [zp, zp]]
    # out_scale 0: mult = 1/0 = inf; t = +-inf saturates; 0 * inf = NaN -> zp
    got = matmul(a, [1.0], None, b, [1.0], None, [0.0], [zp], to)
    assert got.tolist() == [[hi, hi], [lo, lo], [zp, zp]]
    # a_scale * b_scale overflows to inf (3e38 * 10) and out_scale is inf: inf/inf = NaN -> zp
    got = matmul(a, [3e38], None, b, [10.0], None, [np.inf], [zp], to)
    assert got.tolist() == [[zp, zp]] * 3
    # subnormal product: 2**-70 * 2**-70 = 2**-140 (no flush to zero) / 2**-140 = 1 -> t = acc
    got = matmul(a, [2.0**-70], None, b, [2.0**-70], None, [2.0**-140], [zp], to)
    assert got.tolist() == [[min(100 + zp, hi)] * 2, [max(-100 + zp, lo)] * 2, [zp, zp]]
    # product underflows to 0 (2**-80 * 2**-80 = 2**-160): mult 0, t = +-0 -> zp
    got = matmul(a, [2.0**-80], None, b, [2.0**-80], None, [1.0], [zp], to)
    assert got.tolist() == [[zp, zp]] * 3


def test_matmul_batch_broadcast_and_strided(rng):
    a = rng.integers(-128, 128, (3, 1, 4, 6)).astype(I8)
    b_full = rng.integers(0, 256, (2, 12, 10)).astype(U8)
    b = b_full[:, ::2, 1::2]                                   # (2, 6, 5), non-contiguous
    a_b = np.broadcast_to(a, (3, 2, 4, 6))                     # stride-0 batch
    args = (F32([0.02]), I8([3]), b, F32([0.03]), U8([200]), F32([0.1]), I8([-4]), I8)
    got = matmul(a_b, *args)
    want = exact.matmul_array(a_b, *args)
    assert got.shape == (3, 2, 4, 5) and np.array_equal(got, want)
    # numpy.matmul batch broadcasting without materializing: (3,1,4,6) @ (2,6,5)
    assert np.array_equal(matmul(a, *args), want)
    # out as a non-contiguous view
    big = poison(np.empty((3, 2, 8, 10), I8))
    view = big[:, :, ::2, ::2]
    matmul(a, *args, out=view)
    assert np.array_equal(view, want)
    mask = np.ones(big.shape, bool)
    mask[:, :, ::2, ::2] = False
    assert (big.view(U8)[mask] == 0xA5).all()


# ---- 7. add: every (a, b) pair -------------------------------------------------

def _all_pairs(ta, tb):
    ia, ib = np.iinfo(ta), np.iinfo(tb)
    a, b = np.meshgrid(np.arange(ia.min, ia.max + 1), np.arange(ib.min, ib.max + 1), indexing="ij")
    return a.astype(ta).reshape(-1), b.astype(tb).reshape(-1)


def _add_float64_model(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, to):
    """docs/semantics.md add, vectorized, in float64 with one rounding to float32 per step.

    Why this equals float32 arithmetic: (a - a_zp) has at most 9 bits and a float32
    scale 24, so their product is exact in float64 (and far from its range limits);
    rounding that to float32 is the correctly rounded float32 product, including
    subnormal results and overflow to inf. For the sum and the quotient of two float32
    values, the float64 result is correctly rounded to 53 bits and then rounded again
    to 24; since 53 >= 2 * 24 + 2 this double rounding equals one correct rounding
    (Figueroa, "When is double rounding innocuous?", 1995). float64 never overflows or
    underflows here (float32 magnitudes lie in [2**-149, 2**128) and a quotient of two
    lies in [2**-277, 2**277]). NaN and inf follow IEEE in both formats.
    """
    lo, hi = np.iinfo(to).min, np.iinfo(to).max
    with np.errstate(all="ignore"):
        av = ((a.astype(np.int64) - a_zp).astype(np.float64) * np.float64(F32(a_s))).astype(F32)
        bv = ((b.astype(np.int64) - b_zp).astype(np.float64) * np.float64(F32(b_s))).astype(F32)
        v = (av.astype(np.float64) + bv.astype(np.float64)).astype(F32)
        t = (v.astype(np.float64) / np.float64(F32(o_s))).astype(F32).astype(np.float64)
    r = np.clip(np.rint(t), lo - o_zp, hi - o_zp)
    r = np.where(np.isnan(t), 0, r)
    return (r.astype(np.int64) + o_zp).astype(to)


ADD_SCALES = {
    # generic float32 scales: most sums are inexact, rounding and near ties matter
    "generic": (0.0123, 0.0456, 0.0789),
    # dyadic: every t is a multiple of 1/4, so exact ties (.5) occur by the hundred
    "ties": (0.5, 0.25, 1.0),
    # outputs far out of range: saturation on both sides
    "saturate": (0.7, 0.9, 0.01),
    # subnormal scales: av, bv and t all subnormal-scale (no flush to zero)
    "subnormal": (3 * 2.0**-149, 2.0**-147, 2.0**-146),
}


@pytest.mark.parametrize("ta,tb,to", COMBOS)
def test_add_pairs_exact_model(ta, tb, to):
    # exact.py costs ~15 us a pair, so it checks a fixed eighth of all pairs here (and
    # validates the float64 model on them); test_add_all_pairs_float64_model covers all.
    a, b = _all_pairs(ta, tb)
    pick = np.random.default_rng(2024).permutation(a.size)[: a.size // 8]
    a, b = a[pick], b[pick]
    zps = {I8: (-3, 5, 7), U8: (128, 3, 200)}
    a_zp, b_zp, o_zp = zps[ta][0], zps[tb][1], zps[to][2]
    for name in ("generic", "ties"):
        a_s, b_s, o_s = ADD_SCALES[name]
        got = add(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, to)
        want = exact.add_array(a, F32(a_s), a_zp, b, F32(b_s), b_zp, F32(o_s), o_zp, to)
        assert np.array_equal(got, want)
        assert np.array_equal(_add_float64_model(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, to), want)


@pytest.mark.parametrize("ta,tb,to", COMBOS)
@pytest.mark.parametrize("scales", sorted(ADD_SCALES))
@pytest.mark.parametrize("zps", ["mid", "extreme"])
def test_add_all_pairs_float64_model(ta, tb, to, scales, zps):
    a, b = _all_pairs(ta, tb)
    pick = {"mid": {I8: -3, U8: 128}, "extreme": {I8: 127, U8: 0}}[zps]
    a_zp, b_zp = pick[ta], (pick[tb] if zps == "mid" else (-128 if tb == I8 else 255))
    o_zp = pick[to]
    a_s, b_s, o_s = ADD_SCALES[scales]
    got = add(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, to)
    want = _add_float64_model(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, to)
    assert np.array_equal(got, want)
    if scales == "ties":
        # the dyadic case really exercises ties: some t = k + 0.5 exactly
        t = ((a.astype(np.int64) - a_zp) * 0.5 + (b.astype(np.int64) - b_zp) * 0.25) / 1.0
        assert (t % 1 == 0.5).sum() > 1000
    if scales == "saturate" and zps == "mid":
        lo, hi = np.iinfo(to).min, np.iinfo(to).max
        assert (got == lo).any() and (got == hi).any()


def _add_right(da, db, a_s, b_s, o_s):
    v = exact.add32(exact.mul32(exact.f32(da), a_s), exact.mul32(exact.f32(db), b_s))
    return exact.div32(v, o_s)


ADD_WRONG_ORDERS = {
    # ORT-style: scales folded into ratios a_scale / out_scale, b_scale / out_scale
    "folded ratios": lambda da, db, a, b, o: exact.add32(
        exact.mul32(exact.f32(da), exact.div32(a, o)), exact.mul32(exact.f32(db), exact.div32(b, o))),
    "times 1/out_scale": lambda da, db, a, b, o: exact.mul32(
        exact.add32(exact.mul32(exact.f32(da), a), exact.mul32(exact.f32(db), b)), exact.div32(1.0, o)),
    # fused multiply-add contraction: da * a_scale + bv rounded once
    "fma(da, a_scale, bv)": lambda da, db, a, b, o: exact.div32(
        exact.f32(F(da) * F(a) + F(exact.mul32(exact.f32(db), b))), o),
}


def _draw_add(rng):
    da, db = (int(v) for v in rng.integers(-128, 128, 2))
    a_s, b_s = (float(F32(v)) for v in rng.uniform(0.001, 0.1, 2))
    target = int(rng.integers(-100, 100)) + 0.5
    v = da * a_s + db * b_s
    return (da, db, a_s, b_s), v / target if v else 1.0


@pytest.mark.parametrize("wrong", sorted(ADD_WRONG_ORDERS))
def test_add_float_operation_order(wrong):
    da, db, a_s, b_s, o_s = _find_order_case(_add_right, ADD_WRONG_ORDERS[wrong], _draw_add, seed=3)
    want = exact.rint_even(_add_right(da, db, a_s, b_s, o_s))
    assert want != exact.rint_even(ADD_WRONG_ORDERS[wrong](da, db, a_s, b_s, o_s))
    got = add(I8([da]), a_s, None, I8([db]), b_s, None, o_s, None, I8)
    assert got.tolist() == [max(-128, min(127, want))]


def test_add_hand_values():
    # a=3 (zp 1) * 0.5 = 1; b=5 (zp 0) * 0.25 = 1.25; sum 2.25 / 0.5 = 4.5 -> 4 (even); + zp 10
    assert add(I8([3]), 0.5, 1, U8([5]), 0.25, 0, 0.5, 10, I8).tolist() == [14]
    # b=7 (zp 0) * 0.25 = 1.75; sum 2.75 / 0.5 = 5.5 -> 6
    assert add(U8([3]), 0.5, 1, U8([7]), 0.25, 0, 0.5, 0, U8).tolist() == [6]
    # a_scale 3e38 * 2 = inf; b_scale 3e38 * -2 = -inf; inf + -inf = NaN -> out zp
    assert add(np.int8([2]), 3e38, 0, np.int8([-2]), 3e38, 0, 1.0, 9, U8).tolist() == [9]
    # out scale 0: 1/0 = inf -> qmax; 0/0 -> zp; -1/0 -> qmin
    got = add(np.int8([1, 0, -1]), 1.0, 0, np.int8([0, 0, 0]), 1.0, 0, 0.0, 3, I8)
    assert got.tolist() == [127, 3, -128]
    # out scale -0.0: 1/-0 = -inf -> qmin
    assert add(np.int8([1]), 1.0, 0, np.int8([0]), 1.0, 0, -0.0, 3, I8).tolist() == [-128]


@pytest.mark.parametrize("ta,tb,to", [(I8, U8, I8), (U8, U8, U8), (U8, I8, I8)])
def test_add_broadcasting_and_layouts(ta, tb, to, rng):
    def q(t, shape):
        return rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t)
    cases = [((4, 1, 5), (3, 1)), ((1,), (2, 3)), ((2, 3, 4), (4,)), ((0, 3), (1, 3)), ((5,), ())]
    for sa, sb in cases:
        a, b = q(ta, sa), q(tb, sb)
        args = (0.031, 2 if ta == I8 else 130, b, 0.047, None, 0.05, None, to)
        got = add(a, *args)
        want = exact.add_array(a, F32(0.031), args[1], b, F32(0.047), None, F32(0.05), None, to)
        assert got.shape == want.shape and np.array_equal(got, want)
    # non-contiguous, stride-0 and reversed inputs, and a non-contiguous out
    a = q(ta, (6, 10))[::2, ::-3]                # (3, 4)
    b = np.broadcast_to(q(tb, (1, 4)), (3, 4))   # stride 0 rows
    big = poison(np.empty((3, 12), to))
    out = big[:, ::3]
    add(a, 0.02, None, b, 0.03, None, 0.04, None, to, out=out)
    want = exact.add_array(a, F32(0.02), None, b, F32(0.03), None, F32(0.04), None, to)
    assert np.array_equal(out, want)
    rest = np.ones(big.shape, bool)
    rest[:, ::3] = False
    assert (big.view(U8)[rest] == 0xA5).all()


# ---- 8. pooling ----------------------------------------------------------------

def test_pool_windows_entirely_inside_padding():
    # in 2x2 of 10s, window 2x2 stride 2, padding 2 on every side: 3x3 outputs;
    # o=0 taps -2,-1 and o=2 taps 2,3 lie in padding, o=1 taps 0,1 cover the image.
    x = np.full((1, 1, 2, 2), 10, I8)
    for incl in (False, True):
        got, want = pool(x, 0.5, 0, 0.25, 7, I8, (3, 3), (2, 2), (2, 2), (2, 2), (2, 2),
                         include_padding=incl)
        # centre: S = 40, count 4: 40 * 0.5 / 4 = 5, / 0.25 = 20, + 7 = 27.
        # all-padding windows: count 0 -> out zp 7 (excluded); or S = 0 -> t = 0 -> 7 (included)
        hand = [[7, 7, 7], [7, 27, 7], [7, 7, 7]]
        assert got[0, 0].tolist() == hand and np.array_equal(got, want)
    # One pixel of 200 with a padding row above and below: o=0 and o=2 see only padding
    # (count 0 -> out zp 50), o=1 sees 200 - 0 = 200: t = 200, clamped to 255 - 50 = 205 -> 250.
    got, want = pool(np.full((1, 1, 1, 1), 200, U8), 1.0, 0, 1.0, 50, U8, (3, 1), (1, 1),
                     (1, 1), (1, 0), (1, 0))
    assert got[0, 0, :, 0].tolist() == [50, 250, 50] and np.array_equal(got, want)


def test_pool_include_padding_with_end_padding():
    # one row [1, 2, 3], window 2, stride 2, start pad 0, end pad 1: 2 outputs;
    # o=0 taps 0,1 -> (1+2)/2 = 1.5 -> 2; o=1 taps 2,3 (3 is end padding):
    # excluded: 3/1 = 3; included: 3/2 = 1.5 -> 2.
    x = np.array([1, 2, 3], I8).reshape(1, 1, 1, 3)
    got, want = pool(x, 1.0, 0, 1.0, 0, I8, (1, 2), (1, 2), (1, 2), None, (0, 1))
    assert got.ravel().tolist() == [2, 3] and np.array_equal(got, want)
    got, want = pool(x, 1.0, 0, 1.0, 0, I8, (1, 2), (1, 2), (1, 2), None, (0, 1),
                     include_padding=True)
    assert got.ravel().tolist() == [2, 2] and np.array_equal(got, want)
    # 3x3 window, stride 1, padding 1 all round on a 3x3 of 9s: corner counts 4 vs 9
    x = np.full((1, 1, 3, 3), 9, U8)
    got, _ = pool(x, 1.0, 0, 1.0, 0, U8, (3, 3), (3, 3), None, (1, 1), (1, 1))
    assert (got == 9).all()                         # 36/4, 54/6, 81/9
    got, want = pool(x, 1.0, 0, 1.0, 0, U8, (3, 3), (3, 3), None, (1, 1), (1, 1),
                     include_padding=True)
    # corners 36/9 = 4, edges 54/9 = 6, centre 81/9 = 9
    assert got[0, 0].tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]] and np.array_equal(got, want)


def test_pool_ceil_mode():
    # row [1, 2, 3, 4, 5], window 2, stride 2: floor size 2, ceil size 3
    # (2 * 2 = 4 < 5); o=2 taps 4, 5 -> only 4 inside: 5/1 = 5, with include padding
    # still 1 tap inside [0, 5). o=0: 1.5 -> 2, o=1: 3.5 -> 4.
    x = np.arange(1, 6, dtype=U8).reshape(1, 1, 1, 5)
    for incl in (False, True):
        got, want = pool(x, 1.0, 0, 1.0, 0, U8, (1, 3), (1, 2), (1, 2), include_padding=incl)
        assert got.ravel().tolist() == [2, 4, 5] and np.array_equal(got, want)


def test_pool_dilation_with_padding():
    # row [10, 20, 30, 40, 50], window 2, dilation 2 (extent 3), pad 1 both sides, stride 1:
    # (5 + 2 - 3) + 1 = 5 outputs, taps o-1 and o+1.
    # excluded: [20/1, (10+30)/2, (20+40)/2, (30+50)/2, 40/1] = [20, 20, 30, 40, 40]
    # included: o=0 and o=4 have a padding tap: [10, 20, 30, 40, 20]
    x = np.array([10, 20, 30, 40, 50], I8).reshape(1, 1, 1, 5)
    got, want = pool(x, 1.0, 0, 1.0, 0, I8, (1, 5), (1, 2), None, (0, 1), (0, 1), (1, 2))
    assert got.ravel().tolist() == [20, 20, 30, 40, 40] and np.array_equal(got, want)
    got, want = pool(x, 1.0, 0, 1.0, 0, I8, (1, 5), (1, 2), None, (0, 1), (0, 1), (1, 2),
                     include_padding=True)
    assert got.ravel().tolist() == [10, 20, 30, 40, 20] and np.array_equal(got, want)


@pytest.mark.parametrize("dtype", QTYPES)
def test_pool_window_equal_to_whole_image(dtype, rng):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 3, 5, 7)).astype(dtype)
    got, want = pool(x, 0.1, 3, 0.07, 5, dtype, (1, 1), (5, 7))
    assert np.array_equal(got, want)
    # hand check of one cell: mean of all 35 taps
    S = int(x[1, 2].astype(np.int64).sum()) - 35 * 3
    v = exact.div32(exact.mul32(exact.f32(S), float(F32(0.1))), 35.0)
    assert got[1, 2, 0, 0] == exact.requantize(v, float(F32(0.07)), 5, np.dtype(dtype).name)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("nd", [2, 3])
def test_pool_per_channel(dtype, nd, rng):
    info = np.iinfo(dtype)
    C = 4
    shape = (2, C) + ((5, 6) if nd == 2 else (3, 4, 5))
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    xs = rng.uniform(0.01, 0.2, C).astype(F32)
    os_ = rng.uniform(0.01, 0.2, C).astype(F32)
    xz = rng.integers(info.min, info.max + 1, C).astype(dtype)
    oz = rng.integers(info.min, info.max + 1, C).astype(dtype)
    win, st, sp, ep = (2,) * nd, (2,) * nd, (1,) * nd, (1,) * nd
    out_sp = tuple((s + 2 - 2) // 2 + 1 for s in shape[2:])
    for incl in (False, True):
        got, want = pool(x, xs, xz, os_, oz, dtype, out_sp, win, st, sp, ep, include_padding=incl)
        assert np.array_equal(got, want)
    # per-channel zero points omitted, scales per tensor / per channel mixed
    got, want = pool(x, xs, None, [0.05], None, dtype, out_sp, win, st, sp, ep)
    assert np.array_equal(got, want)


def _pool_right(values, xs, os_):
    S, count = sum(values), len(values)
    v = exact.div32(exact.mul32(exact.f32(S), xs), exact.f32(count))
    return exact.div32(v, os_)


POOL_WRONG_ORDERS = {
    "(S/count)*xs": lambda vals, xs, o: exact.div32(
        exact.mul32(exact.div32(exact.f32(sum(vals)), exact.f32(len(vals))), xs), o),
    "S*(xs/count)": lambda vals, xs, o: exact.div32(
        exact.mul32(exact.f32(sum(vals)), exact.div32(xs, exact.f32(len(vals)))), o),
    "S*xs/(count*os)": lambda vals, xs, o: exact.div32(
        exact.mul32(exact.f32(sum(vals)), xs), exact.mul32(exact.f32(len(vals)), o)),
    "sum of dequantized taps": lambda vals, xs, o: exact.div32(exact.div32(
        _fsum([exact.mul32(exact.f32(v), xs) for v in vals]), exact.f32(len(vals))), o),
}


def _fsum(terms):
    total = 0.0
    for t in terms:
        total = exact.add32(total, t)
    return total


def _draw_pool(rng):
    count = int(rng.integers(2, 10))
    values = [int(v) for v in rng.integers(-128, 128, count)]
    xs = float(F32(rng.uniform(0.001, 0.1)))
    target = int(rng.integers(-100, 100)) + 0.5
    return (values, xs), sum(values) * xs / count / target if sum(values) else 1.0


@pytest.mark.parametrize("wrong", sorted(POOL_WRONG_ORDERS))
def test_pool_float_operation_order(wrong):
    values, xs, os_ = _find_order_case(_pool_right, POOL_WRONG_ORDERS[wrong], _draw_pool, seed=2)
    want = exact.rint_even(_pool_right(values, xs, os_))
    assert want != exact.rint_even(POOL_WRONG_ORDERS[wrong](values, xs, os_))
    x = np.array(values, I8).reshape(1, 1, 1, -1)        # one window over the whole row
    got, ref = pool(x, xs, None, os_, None, I8, (1, 1), (1, len(values)))
    assert got.ravel().tolist() == [max(-128, min(127, want))] and np.array_equal(got, ref)


def test_pool_subnormal_and_zero_scales():
    x = np.array([[1, 2]], I8).reshape(1, 1, 1, 2)
    # S = 3, x_scale 2**-149: 3 * 2**-149 / 2 = 1.5 * 2**-149 -> 2 * 2**-149 (tie to even),
    # / 2**-149 = 2.
    got, want = pool(x, 2.0**-149, 0, 2.0**-149, 0, I8, (1, 1), (1, 2))
    assert got.ravel().tolist() == [2] and np.array_equal(got, want)
    # out scale 0: v = 1.5 / 0 = inf -> 127; zero input: 0 / 0 -> NaN -> zp
    got, _ = pool(x, 1.0, 0, 0.0, 4, I8, (1, 1), (1, 2))
    assert got.ravel().tolist() == [127]
    got, _ = pool(np.zeros((1, 1, 1, 2), I8), 1.0, 0, 0.0, 4, I8, (1, 1), (1, 2))
    assert got.ravel().tolist() == [4]


def test_pool_strided_and_broadcast_inputs_and_strided_out(rng):
    base = rng.integers(0, 256, (2, 6, 9, 11)).astype(U8)
    x = base[:, ::2, 1::2, ::-2]                                   # (2, 3, 4, 6) non-contiguous
    xb = np.broadcast_to(rng.integers(0, 256, (1, 3, 1, 6)).astype(U8), (2, 3, 4, 6))
    for inp in (x, xb):
        big = poison(np.empty((2, 3, 6, 8), U8))
        out = big[:, :, ::2, ::2]                                  # (2, 3, 3, 4) view
        got, want = pool(inp, 0.03, 128, 0.05, 120, U8, (3, 4), (2, 2), (2, 2), (1, 1), (1, 1),
                         out=out)
        assert got is out and np.array_equal(out, want)
        rest = np.ones(big.shape, bool)
        rest[:, :, ::2, ::2] = False
        assert (big[rest] == 0xA5).all()


def test_pool_3d_hand_value():
    # 2x2x2 cube of 1..8 averaged over a whole-cube window: 36/8 = 4.5 -> 4 (even)
    x = np.arange(1, 9, dtype=I8).reshape(1, 1, 2, 2, 2)
    got, want = pool(x, 1.0, 0, 1.0, 0, I8, (1, 1, 1), (2, 2, 2))
    assert got.ravel().tolist() == [4] and np.array_equal(got, want)


# ---- 9. omitted zero points, size 0, layouts, subnormals, zero scale ------------

def test_omitted_zero_points_are_zero():
    x = np.float32([1.4, -1.6, 300, -300])
    assert quantize(x, F32(1), None, I8).tolist() == [1, -2, 127, -128]
    assert quantize(x, F32(1), None, U8).tolist() == [1, 0, 255, 0]
    assert dequantize(np.uint8([0, 255]), F32(0.5)).tolist() == [0.0, 127.5]
    assert add(U8([10]), 1.0, None, I8([-3]), 1.0, None, 1.0, None, I8).tolist() == [7]
    got = matmul(np.uint8([[2, 3]]), [1.0], None, np.int8([[4], [-5]]), [1.0], None, [1.0], None, I8)
    assert got.tolist() == [[2 * 4 - 3 * 5]]


def test_size_zero_tensors():
    for shape in [(0,), (3, 0), (0, 4, 2)]:
        assert quantize(np.zeros(shape, F32), F32(1), 3, I8).shape == shape
        assert dequantize(np.zeros(shape, U8), F16(1)).shape == shape
        assert add(np.zeros(shape, I8), 1.0, 0, np.zeros((1,) * len(shape), U8), 1.0, 0,
                   1.0, 0, U8).shape == shape
    for M, K, N in [(0, 3, 2), (2, 3, 0), (0, 0, 0)]:
        got = matmul(np.zeros((M, K), I8), [1.0], None, np.zeros((K, N), U8), [1.0], None, [1.0],
                     None, I8)
        assert got.shape == (M, N)
    # K = 0: the empty sum is 0 -> t = 0 -> out zp (and 0 * inf = NaN -> zp as well)
    got = matmul(np.zeros((2, 0), I8), [1.0], None, np.zeros((0, 3), U8), [1.0], None, [1.0],
                 [9], I8)
    assert got.tolist() == [[9] * 3] * 2
    got = matmul(np.zeros((1, 0), I8), [1.0], None, np.zeros((0, 1), U8), [1.0], None, [0.0],
                 [9], I8)
    assert got.tolist() == [[9]]
    for shape in [(0, 3, 4, 4), (2, 0, 4, 4)]:
        got, want = pool(np.zeros(shape, I8), 1.0, 0, 1.0, 0, I8, (2, 2), (2, 2), (2, 2))
        assert got.shape == shape[:2] + (2, 2) and np.array_equal(got, want)


def test_pool_empty_spatial_input_all_padding():
    # a 0x0 image with padding 1 all round and a 1x1 window, stride 1: (0 + 2 - 1) + 1 = 2
    # outputs per dimension, every window entirely in padding -> out zp (count 0);
    # with include padding: count 1, S = 0 -> t = 0 -> out zp.
    for incl in (False, True):
        got, want = pool(np.zeros((1, 2, 0, 0), U8), [1.0, 2.0], [3, 4], 1.0, [5, 6], U8, (2, 2),
                         (1, 1), None, (1, 1), (1, 1), include_padding=incl)
        assert got[0, 0].tolist() == [[5, 5], [5, 5]] and got[0, 1].tolist() == [[6, 6], [6, 6]]
        assert np.array_equal(got, want)


def test_noncontiguous_and_broadcast_elementwise(rng):
    x = (rng.standard_normal((7, 9)) * 40).astype(F32)[::2, ::-3]    # (4, 3)
    s = np.broadcast_to(rng.uniform(0.1, 1, (1, 3)).astype(F32), (4, 3))
    zp = np.broadcast_to(np.int8([[1], [2], [3], [4]]), (4, 3))
    big = poison(np.empty((4, 6), I8))
    out = big[:, 1::2]
    R.quantize_linear(x, s, zp, out)
    assert np.array_equal(out, exact.quantize_array(x, s, zp, I8))
    assert (big[:, ::2].view(U8) == 0xA5).all()
    q = rng.integers(-2**31, 2**31, (5, 8)).astype(np.int32).T[::2]   # (4, 5), transposed
    s16 = np.float16([0.5, 2.0, 3e-3, 7.0, 1e-7]).reshape(1, 5)
    zpq = np.int32([[-2**31], [2**31 - 1], [0], [5]])
    got = dequantize(q, s16, zpq)
    assert bits_equal(got, exact.dequantize_array(q, s16, zpq))


@pytest.mark.parametrize("dtype", QTYPES)
def test_subnormal_scales_and_values_no_flush(dtype):
    tiny = 2.0**-149
    # x = 3 * 2**-149, s = 2 * 2**-149: t = 1.5 -> 2; x = 2**-149, s = 2**-149 -> 1;
    # x = 2**-149, s = 1: t = 2**-149 -> 0; x = 1, s = 2**-149 -> 2**149 overflow? no:
    # 1 / 2**-149 = 2**149 > float32 max -> inf -> qmax
    x = np.float32([3 * tiny, tiny, tiny, 1.0])
    s = np.float32([2 * tiny, tiny, 1.0, tiny])
    qmax = np.iinfo(dtype).max
    assert quantize(x, s, 0, dtype).tolist() == [2, 1, 0, qmax]
    # float16 subnormal input and scale: 3 * 2**-24 / 2**-23 = 1.5 -> 2
    assert quantize(np.float16([3 * 2.0**-24]), np.float16(2.0**-23), 0, dtype).tolist() == [2]
    # dequantize into float32 subnormals: 5 * 2**-149
    got = dequantize(np.array([5], dtype), F32(tiny))
    assert float(got[0]) == 5 * tiny
    # add with subnormal values: 1 * 2**-149 + 1 * 2**-149 = 2**-148; / 2**-149 = 2
    assert add(np.array([1], dtype), tiny, 0, np.array([1], dtype), tiny, 0, tiny, 0,
               dtype).tolist() == [2]


@pytest.mark.parametrize("dtype,zp", [(I8, 0), (I8, -5), (U8, 128)])
def test_zero_scale(dtype, zp):
    qmin, qmax = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = np.float32([1.0, -1.0, 0.0, -0.0, np.inf, np.nan])
    # x / +0: +inf, -inf, NaN, NaN, +inf, NaN
    assert quantize(x, F32(0.0), zp, dtype).tolist() == [qmax, qmin, zp, zp, qmax, zp]
    # x / -0: signs flip
    assert quantize(x, F32(-0.0), zp, dtype).tolist() == [qmin, qmax, zp, zp, qmin, zp]
    # dequantize with scale 0: (q - zp) * 0 = +-0 (sign kept), float32 and float16
    q = np.array([zp + 3, zp, zp - 3] if dtype == U8 else [3, 0, -3], dtype)
    qz = np.array(zp if dtype == U8 else 0, dtype)
    for sdt in (F32, F16):
        got = dequantize(q, np.array(0.0, sdt), qz)
        assert got.tolist() == [0.0, 0.0, 0.0]
        assert np.signbit(got).tolist() == [False, False, True]
        got = dequantize(q, np.array(-0.0, sdt), qz)   # 3 * -0 = -0, 0 * -0 = -0, -3 * -0 = +0
        assert np.signbit(got).tolist() == [True, True, False]
