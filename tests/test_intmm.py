"""The integer matmul family (dmlq.matmul_integer, dmlq.matmul_integer_to_float):
docs/semantics.md checked against onnxruntime's CPU provider (MatMulInteger,
com.microsoft.MatMulIntegerToFloat) on the same vectors, against Python-integer
and float32-scalar re-computations for what onnxruntime does not take (per-row
zero points, blocked scales, float16 output, 4-bit B), and the argument errors.
"""
from __future__ import annotations

import ml_dtypes
import re

import numpy as np
import pytest

import dmlq
from dmlq.desc import MatrixMultiplyIntegerToFloatDesc, TensorDesc
from dmlq.errors import DescError

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx_cases import node_cases, run_onnx  # noqa: E402

I8, U8, I32, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
BF16 = np.dtype(ml_dtypes.bfloat16)


def qrand(rng, dtype, shape):
    info = ml_dtypes.iinfo(dtype) if dtype in (I4, U4) else np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def ort_b(rng, adt, bdt, shape):
    """b for an onnxruntime comparison: uint8 x int8 draws b from [-64, 63], where MLAS's AVX2
    (non-VNNI) u8s8 kernel cannot saturate its int16 pair sums (tests/test_reference_onnxruntime.py)."""
    if (adt, bdt) == (U8, I8):
        return rng.integers(-64, 64, shape).astype(I8)
    return qrand(rng, bdt, shape)


def exact_sums(a, azp, b, bzp):
    """The exact sums with Python integers (object arrays): no float, no wrap."""
    da = np.asarray(a).astype(np.int64).astype(object) - np.asarray(azp).astype(np.int64).astype(object)
    db = np.asarray(b).astype(np.int64).astype(object) - np.asarray(bzp).astype(np.int64).astype(object)
    return np.matmul(da, db)


def bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


# ------------------------------------------------------------------ MatMulInteger

SHAPES = [((3, 5), (5, 4)), ((1, 7), (7, 1)), ((4, 1), (1, 6)), ((2, 3, 9), (9, 5)),
          ((2, 1, 4, 6), (3, 6, 2)), ((3, 0), (0, 4)), ((5, 33), (33, 3))]


@pytest.mark.parametrize("adt,bdt", [(U8, U8), (U8, I8), (I8, U8), (I8, I8)])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_integer_equals_onnxruntime(adt, bdt, shapes):
    rng = np.random.default_rng(abs(hash((adt.str, bdt.str, shapes))) % 2**32)
    a, b = qrand(rng, adt, shapes[0]), ort_b(rng, adt, bdt, shapes[1])
    azp, bzp = qrand(rng, adt, ()), ort_b(rng, adt, bdt, ())
    want = run_onnx("MatMulInteger", [a, b, np.array(azp), np.array(bzp)], I32)
    got = dmlq.matmul_integer(a, b, azp, bzp)
    assert got.dtype == I32 and got.shape == want.shape
    np.testing.assert_array_equal(got, exact_sums(a, azp, b, bzp).astype(np.int64))
    if a.shape[-1] == 0:
        return  # onnxruntime 1.32 returns an uninitialized output for K = 0 (docs/semantics.md)
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_per_batch_b_zero_point_equals_onnxruntime():
    rng = np.random.default_rng(1)
    a, b = qrand(rng, U8, (2, 3, 8)), ort_b(rng, U8, I8, (2, 8, 5))
    bzp = ort_b(rng, U8, I8, (2, 1, 5))
    want = run_onnx("MatMulInteger", [a, b, np.array(U8.type(7)), bzp], I32)
    np.testing.assert_array_equal(dmlq.matmul_integer(a, b, np.uint8(7), bzp), want)


def test_matmul_integer_per_row_and_column_zero_points():
    """Per-row a and per-column b zero points (onnxruntime takes neither for 2-D b): exact sums."""
    rng = np.random.default_rng(2)
    a, b = qrand(rng, I8, (4, 11)), qrand(rng, U8, (11, 3))
    azp, bzp = qrand(rng, I8, (4, 1)), qrand(rng, U8, (3,))
    got = dmlq.matmul_integer(a, b, azp, bzp)
    np.testing.assert_array_equal(got, exact_sums(a, azp, b, bzp).astype(np.int64))
    np.testing.assert_array_equal(dmlq.matmul_integer(a, b, azp, bzp.reshape(1, 3)), got)


@pytest.mark.parametrize("k", [33025, 33026, 70000])
def test_matmul_integer_extremes_wrap_like_onnxruntime(k):
    """(0 - 255) * (255 - 0) per term: the sum fits int32 up to K = 33025, then wraps as ONNX's does."""
    a = np.zeros((1, k), U8)
    b = np.full((k, 2), 255, U8)
    b[:, 1] = 0
    got = dmlq.matmul_integer(a, b, np.uint8(255), np.uint8(0))
    want = run_onnx("MatMulInteger", [a, b, np.array(U8.type(255)), np.array(U8.type(0))], I32)
    np.testing.assert_array_equal(got, want)
    exact = -255 * 255 * k
    assert int(got[0, 0]) == (exact + 2**31) % 2**32 - 2**31
    assert int(got[0, 1]) == 0


# ------------------------------------------------------------------ MatMulIntegerToFloat

# onnxruntime registers u8 x u8, u8 x s8 and s8 x s8 (no s8 x u8).
ORT_TYPES = [(U8, U8), (U8, I8), (I8, I8)]


@pytest.mark.parametrize("adt,bdt", ORT_TYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_integer_to_float_equals_onnxruntime(adt, bdt, shapes, per_column, with_bias):
    """Per-tensor a scale: onnxruntime's order is the contract's, bit for bit."""
    rng = np.random.default_rng(abs(hash((adt.str, bdt.str, shapes, per_column, with_bias))) % 2**32)
    a, b = qrand(rng, adt, shapes[0]), ort_b(rng, adt, bdt, shapes[1])
    n = shapes[1][-1]
    a_s = np.array(rng.uniform(1e-3, 0.1), F32)
    b_s = (rng.uniform(-0.1, 0.1, n) if per_column else rng.uniform(1e-3, 0.1, ())).astype(F32)
    azp, bzp = np.array(qrand(rng, adt, ())), ort_b(rng, adt, bdt, (n,) if per_column else ())
    ort_b_s, ort_bzp = b_s, np.asarray(bzp)
    if len(shapes[1]) > 2 and per_column:
        # onnxruntime takes (N,) for a 2-D b only; a batched b takes b's batch shape + (1, N).
        # (It accepts an (N,) scale there too, but then scales after the bias: docs/semantics.md.)
        per_batch = shapes[1][:-2] + (1, n)
        ort_b_s = np.ascontiguousarray(np.broadcast_to(b_s, per_batch))
        ort_bzp = np.ascontiguousarray(np.broadcast_to(bzp, per_batch))
    bias = rng.uniform(-100, 100, n).astype(F32) if with_bias else None
    want = run_onnx("MatMulIntegerToFloat", [a, b, a_s, ort_b_s, azp, ort_bzp, bias], F32,
                    domain="com.microsoft")
    got = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, bias)
    assert got.dtype == F32 and got.shape == want.shape
    if a.shape[-1] == 0:  # onnxruntime 1.32 leaves the output uninitialized: the contract's value
        zero = np.float32(0) * (a_s * b_s)
        want = np.broadcast_to(zero if bias is None else zero + bias, got.shape)
    np.testing.assert_array_equal(bits(got), bits(want))


# numpy.matmul's vectors: a (K,) is (1, K), b (K,) is (K, 1), the added dimension leaves the result
VECTOR_SHAPES = [((7,), (7, 4)), ((3, 5, 7), (7,)), ((7,), (7,)), ((7,), (2, 7, 3)), ((5, 7), (7,))]


@pytest.mark.parametrize("shapes", VECTOR_SHAPES, ids=str)
def test_vector_operands_equal_onnxruntime(shapes):
    rng = np.random.default_rng(abs(hash(shapes)) % 2**32)
    a, b = qrand(rng, U8, shapes[0]), qrand(rng, I8, shapes[1])
    azp, bzp = np.array(qrand(rng, U8, ())), np.array(qrand(rng, I8, ()))
    want = run_onnx("MatMulInteger", [a, b, azp, bzp], I32)
    got = dmlq.matmul_integer(a, b, azp, bzp)
    assert got.dtype == I32 and got.shape == want.shape == np.matmul(a, b).shape
    np.testing.assert_array_equal(got, want)
    a_s, b_s = np.array(0.02, F32), np.array(0.03, F32)
    want = run_onnx("MatMulIntegerToFloat", [a, b, a_s, b_s, azp, bzp], F32, domain="com.microsoft")
    got = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp)
    assert got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))
    # out= of the vector result's shape is written and returned; a packed 4-bit vector b too
    out = np.full(want.shape, np.nan, F32)
    assert dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, out=out) is out
    np.testing.assert_array_equal(bits(out), bits(want))
    if len(shapes[1]) == 1:
        w4 = qrand(rng, I4, shapes[1])
        want4 = np.matmul(a.astype(np.int64) - int(azp), w4.astype(np.int64))
        np.testing.assert_array_equal(dmlq.matmul_integer(a, dmlq.pack(w4), azp), want4)


def test_quantized_matmul_vector_operands_equal_onnxruntime():
    rng = np.random.default_rng(5)
    a, b = qrand(rng, U8, (9,)), qrand(rng, I8, (9, 6))
    params = [np.array(0.05, F32), np.array(U8.type(3)), b, np.array(0.04, F32), np.array(I8.type(-1)),
              np.array(0.3, F32), np.array(U8.type(128))]
    want = run_onnx("QLinearMatMul", [a] + params, U8)
    got = dmlq.quantized_matmul(a, *params)
    assert got.shape == want.shape == (6,)
    np.testing.assert_array_equal(got, want)


def test_a_vector_result_out_is_checked_in_the_callers_shape():
    """out= of a vector matmul is named in the caller's shapes (the check named the matrices':
    "out must have shape (1, 5) (got (1, 6))" for a (6,) out, and asked for (1, 5))."""
    a, w = np.ones(8, U8), np.ones((8, 5), I8)
    for bad in ((6,), (1, 5)):
        with pytest.raises(ValueError, match=rf"matmul_integer: out must have shape \(5,\) \(got "
                                             rf"{re.escape(str(bad))}\): a 1-D a gives"):
            dmlq.matmul_integer(a, w, out=np.empty(bad, np.int32))
    with pytest.raises(ValueError, match=r"quantized_matmul: out must have shape \(2, 8\) \(got \(2, 8, 1\)\)"):
        dmlq.quantized_matmul(np.ones((2, 8, 8), U8), 0.1, 0, np.ones(8, I8), 0.1, 0, 0.2,
                              out=np.empty((2, 8, 1), U8))
    with pytest.raises(ValueError, match=r"matmul_integer_to_float: out must have shape \(\) \(got \(1,\)\)"):
        dmlq.matmul_integer_to_float(np.ones(8, U8), 0.1, 0, np.ones(8, I8), 0.1, 0, out=np.empty(1, F32))
    out = np.empty(5, np.int32)
    assert dmlq.matmul_integer(a, w, out=out) is out and out.tolist() == [8] * 5
    with pytest.raises(TypeError, match=r"out must have dtype int32 \(got float32\); allocate it with "
                                        r"np\.empty\(\(5,\), np\.int32\)"):  # it said (1, 5)
        dmlq.matmul_integer(a, w, out=np.empty(5, F32))


def test_a_bias_beside_a_vector_b_broadcasts_against_the_result():
    """numpy.matmul drops a 1-D b's column axis: a bias the shape of that result, (M,), is taken
    (it was refused against the internal (M, 1)), and one that would grow it, (M, 1), is refused."""
    a, w = np.arange(99, dtype=U8).reshape(3, 33), np.ones(33, I8)
    bias = np.array([0.5, -1.0, 2.0], F32)
    got = dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, bias)
    np.testing.assert_array_equal(got, a.astype(F32).sum(axis=1) + bias, strict=True)
    with pytest.raises(ValueError, match=r"bias of shape \(3, 1\) must broadcast to the result's \(3,\) without"):
        dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, bias[:, None])


def test_a_bias_beside_a_vector_a_broadcasts_against_the_result():
    """The same for a 1-D a, whose row axis numpy.matmul drops: a (K,) a times a (2, K, N) b gives
    (2, N), and a bias of that whole shape was refused, named against the internal (2, 1, N),
    while a (2, 1, N) bias, which would grow the result to (2, 2, N), was taken."""
    rng = np.random.default_rng(31)
    a, w = qrand(rng, U8, (7,)), qrand(rng, I8, (2, 7, 3))
    exact = np.matmul(a.astype(np.int64), w.astype(np.int64)).astype(F32)
    bias = rng.uniform(-4, 4, (2, 3)).astype(F32)
    got = dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, bias)
    np.testing.assert_array_equal(got, exact + bias, strict=True)
    for grows in ((2, 1, 3), (1, 1, 3)):
        with pytest.raises(ValueError, match=rf"bias of shape {re.escape(str(grows))} must broadcast to the "
                                             r"result's \(2, 3\) without growing it \(a 1-D a gives"):
            dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, np.ones(grows, F32))
    with pytest.raises(ValueError, match=r"bias of shape \(1,\) must broadcast to the result's \(\) without"):
        dmlq.matmul_integer_to_float(a, F32.type(1), None, w[0, :, 0], F32.type(1), None, np.ones(1, F32))


def test_a_list_bias_beside_a_vector_is_read_as_its_array():
    """A list bias beside a 1-D operand gets the array's rules: a 1-D b with a (M,) list was refused
    against the internal (M, 1) and a (M, 1) list taken, the reverse of the same values as an array."""
    a, w = np.arange(99, dtype=U8).reshape(3, 33), np.ones(33, I8)
    bias = [0.5, -1.0, 2.0]
    want = dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, np.array(bias, F32))
    for as_given in (bias, tuple(bias)):
        got = dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, as_given)
        np.testing.assert_array_equal(got, want, strict=True)
    with pytest.raises(ValueError, match=r"bias of shape \(3, 1\) must broadcast to the result's \(3,\)"):
        dmlq.matmul_integer_to_float(a, F32.type(1), None, w, F32.type(1), None, [[x] for x in bias])
    v, m = np.arange(33, dtype=U8), np.ones((2, 33, 4), I8)
    rows = [[0.5, 1.5, 2.5, 3.5], [-1.0, -2.0, -3.0, -4.0]]
    got = dmlq.matmul_integer_to_float(v, F32.type(1), None, m, F32.type(1), None, rows)
    np.testing.assert_array_equal(got, np.float32(528) + np.array(rows, F32), strict=True)


def test_matmul_integer_to_float_per_batch_b_scale_equals_onnxruntime():
    rng = np.random.default_rng(3)
    a, b = qrand(rng, U8, (2, 3, 16)), ort_b(rng, U8, I8, (2, 16, 5))
    b_s = rng.uniform(-0.1, 0.1, (2, 1, 5)).astype(F32)
    bzp = ort_b(rng, U8, I8, (2, 1, 5))
    bias = rng.uniform(-1, 1, 5).astype(F32)
    a_s, azp = np.array(0.037, F32), np.array(U8.type(128))
    want = run_onnx("MatMulIntegerToFloat", [a, b, a_s, b_s, azp, bzp, bias], F32, domain="com.microsoft")
    got = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, bias)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("scale", [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38])
def test_special_scales_equal_onnxruntime(scale):
    rng = np.random.default_rng(4)
    a, b = qrand(rng, U8, (3, 6)), ort_b(rng, U8, I8, (6, 4))
    a[0] = 10  # with azp = 10: a zero sum in row 0
    a_s, b_s = np.array(scale, F32), np.array([0.5, -0.5, 2.0, 1.0], F32)
    bias = np.array([1, -1, 0, 0.25], F32)
    want = run_onnx("MatMulIntegerToFloat", [a, b, a_s, b_s, np.array(U8.type(10)), None, bias], F32,
                    domain="com.microsoft")
    with np.errstate(all="ignore"):
        got = dmlq.matmul_integer_to_float(a, a_s, np.uint8(10), b, b_s, None, bias)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_per_row_a_scale_differs_from_onnxruntime_as_documented():
    """onnxruntime applies a per-row a scale last, to the biased result: (float32(acc) * b_scale + bias)
    * a_scale. dmlq (DirectML) does float32(acc) * (a_scale * b_scale) + bias."""
    rng = np.random.default_rng(5)
    a, b = qrand(rng, U8, (64, 40)), ort_b(rng, U8, I8, (40, 32))
    a_s = rng.uniform(1e-3, 1, (64, 1)).astype(F32)
    b_s = rng.uniform(1e-3, 1, 32).astype(F32)
    bias = rng.uniform(-10, 10, 32).astype(F32)
    acc = exact_sums(a, 0, b, 0).astype(np.int64).astype(F32)
    want_ort = run_onnx("MatMulIntegerToFloat", [a, b, a_s, b_s, None, None, bias], F32, domain="com.microsoft")
    np.testing.assert_array_equal(want_ort, (acc * b_s + bias) * a_s)
    got = dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None, bias)
    np.testing.assert_array_equal(got, acc * (a_s * b_s) + bias)
    no_bias_ort = run_onnx("MatMulIntegerToFloat", [a, b, a_s, b_s], F32, domain="com.microsoft")
    no_bias = dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None)
    assert np.count_nonzero(no_bias != no_bias_ort) > 0  # one rounding fewer: some last bits differ
    np.testing.assert_allclose(no_bias, no_bias_ort, rtol=2**-22)


def scalar_formula(a, a_s, azp, b, b_s, bzp, bias, block, out_dtype):
    """docs/semantics.md with one NumPy float32 scalar operation at a time (2-D only)."""
    m, k = a.shape
    n = b.shape[1]
    groups = [(s, min(s + block, k)) for s in range(0, k, block)] if block else [(0, k)]
    out = np.empty((m, n), out_dtype)
    for i in range(m):
        for j in range(n):
            v = None
            for g, (lo, hi) in enumerate(groups):
                acc = sum((int(a[i, t]) - int(azp[i, 0])) * (int(b[t, j]) - int(bzp[g if block else 0, j]))
                          for t in range(lo, hi))
                term = F32.type(acc) * (F32.type(a_s[i, 0]) * F32.type(b_s[g if block else 0, j]))
                v = term if v is None else F32.type(v + term)
            if v is None:
                v = F32.type(0.0) if block else F32.type(0) * (F32.type(a_s[i, 0]) * F32.type(b_s[0, j]))
            if bias is not None:
                v = F32.type(v + F32.type(bias[j]))
            out[i, j] = out_dtype.type(v)
    return out


@pytest.mark.parametrize("k,block", [(0, 32), (1, 32), (31, 32), (32, 32), (33, 32), (100, 32), (257, 64),
                                     (300, 256), (75, None)])
def test_blocked_scales_follow_the_group_order(k, block):
    rng = np.random.default_rng(k)
    m, n = 3, 4
    groups = -(-k // block) if block else 1
    a, b = qrand(rng, I8, (m, k)), qrand(rng, I4, (k, n))
    a_s, azp = rng.uniform(1e-3, 1, (m, 1)).astype(F32), qrand(rng, I8, (m, 1))
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    bzp = qrand(rng, I4, (groups, n))
    bias = rng.uniform(-1, 1, n).astype(F32)
    with np.errstate(all="ignore"):
        got = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, bias, block_size=block)
        want = scalar_formula(a, a_s, azp, b, b_s, bzp, bias, block, F32)
    np.testing.assert_array_equal(bits(got), bits(want))
    if groups == 1:  # one group: the unblocked result
        same = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, bias)
        np.testing.assert_array_equal(bits(got), bits(same))


def test_blocked_order_is_visible():
    """Ascending group order, not pairwise: a sum whose rounding depends on the order."""
    a = np.ones((1, 3), I8)
    b = np.ones((3, 1), I8)
    b_s = np.array([[1.0], [2.0**-24], [2.0**-24]], F32)
    got = dmlq.matmul_integer_to_float(a, np.float32(1), None, b, b_s, None, block_size=1)
    assert got[0, 0] == np.float32(1.0)  # (1 + 2^-24) + 2^-24 = 1 (ties to even twice); 1 + 2^-23 otherwise


def test_an_unblocked_scale_with_block_size_is_repeated_per_group():
    """docs/semantics.md: with block_size= a per-tensor or per-column b_scale is the same row for
    every group; the groups are still summed apart, so it is not the call without block_size=."""
    a = np.array([[64, 78, 124]], I8)
    b = np.ones((3, 2), I8)
    for b_s in (np.float32(0.7), np.full(2, 0.7, F32), np.full((1, 2), 0.7, F32)):
        got = dmlq.matmul_integer_to_float(a, np.float32(1), None, b, b_s, None, block_size=1)
        rows = np.broadcast_to(np.reshape(b_s, (1, -1)), (3, 2)).copy()
        np.testing.assert_array_equal(got, dmlq.matmul_integer_to_float(a, np.float32(1), None, b, rows, None,
                                                                         block_size=1), strict=True)
        # 64 * 0.7 + 78 * 0.7 + 124 * 0.7, each step in float32, against 266 * 0.7 rounded once
        assert got[0, 0] == (np.float32(64) * b_s.flat[0] + np.float32(78) * b_s.flat[0]) + \
            np.float32(124) * b_s.flat[0] == np.float32(186.19998)
        unblocked = dmlq.matmul_integer_to_float(a, np.float32(1), None, b, b_s, None)
        assert unblocked[0, 0] == np.float32(266) * np.float32(0.7) == np.float32(186.2)


def test_scales_onnxruntime_broadcasts_after_the_bias():
    """docs/semantics.md: onnxruntime's MatMulIntegerToFloat also takes an a_scale per batch and row
    and a batched b_scale beside an unbatched b, applied after the bias. dmlq takes the first in its
    own order (the scales before the bias: onnxruntime's sums without a bias) and refuses the second."""
    rng = np.random.default_rng(32)
    a, b = qrand(rng, U8, (2, 3, 5)), ort_b(rng, U8, I8, (5, 4))
    bias = np.arange(4, dtype=F32)
    acc = exact_sums(a, 0, b, 0).astype(np.int64).astype(F32)
    a_s = (rng.integers(1, 8, (2, 3, 1)) * 0.125).astype(F32)
    b_s = (rng.integers(1, 8, (2, 1, 4)) * 0.125).astype(F32)
    want = run_onnx("MatMulIntegerToFloat", [a, b, a_s, np.array(0.25, F32), None, None, bias], F32,
                    domain="com.microsoft")
    np.testing.assert_array_equal(want, (acc * np.float32(0.25) + bias) * a_s)
    want = run_onnx("MatMulIntegerToFloat", [a, b, np.array(0.25, F32), b_s, None, None, bias], F32,
                    domain="com.microsoft")
    np.testing.assert_array_equal(want, (acc * np.float32(0.25) + bias) * b_s)
    got = dmlq.matmul_integer_to_float(a, a_s, None, b, np.float32(0.25), None, bias)
    np.testing.assert_array_equal(got, acc * (a_s * np.float32(0.25)) + bias)
    assert not np.array_equal(got, (acc * np.float32(0.25) + bias) * a_s)
    no_bias = run_onnx("MatMulIntegerToFloat", [a, b, a_s, np.array(0.25, F32), None, None, None], F32,
                       domain="com.microsoft")
    np.testing.assert_array_equal(dmlq.matmul_integer_to_float(a, a_s, None, b, np.float32(0.25), None), no_bias)
    with pytest.raises(DescError, match="b has no batch dimensions, so there is no per-batch form"):
        dmlq.matmul_integer_to_float(a, np.float32(0.25), None, b, b_s, None, bias)


def test_float16_output_rounds_once_and_overflows_to_inf():
    a = np.full((2, 4), 127, I8)
    b = np.full((4, 3), 127, I8)
    b_s = np.array([1.0, 1.0, 1e-4], F32)  # 64516 * 1.02 > 65504 -> inf; 6.58 -> nearest float16
    a_s = np.array([[1.02], [-1.02]], F32)
    got = dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None, dtype=np.float16)
    f32 = dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None)
    assert got.dtype == F16
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bits(got), bits(f32.astype(F16)))
    assert got[0, 0] == np.inf and got[1, 0] == -np.inf
    assert got[0, 2] == np.float16(np.float32(64516) * (np.float32(1.02) * np.float32(1e-4)))
    out = np.empty((2, 3), F16)
    assert dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None, out=out) is out
    np.testing.assert_array_equal(bits(out), bits(got))


def test_float16_scales_and_bias_are_widened_exactly():
    rng = np.random.default_rng(6)
    a, b = qrand(rng, U8, (5, 9)), qrand(rng, U8, (9, 7))
    a_s, b_s = np.float16(0.0123), rng.uniform(0, 1, 7).astype(F16)
    bias = rng.uniform(-1, 1, (5, 7)).astype(F16)
    got = dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None, bias)
    want = dmlq.matmul_integer_to_float(a, np.float32(a_s), None, b, b_s.astype(F32), None, bias.astype(F32))
    np.testing.assert_array_equal(bits(got), bits(want))


def bf16_bits(f32):
    """float32 -> bfloat16 codes, ties to even, overflow to inf, from the bits alone (the top 16 bits
    after adding half an ulp less one, plus the kept bit's parity); NaN codes are not checked."""
    u = np.asarray(f32, F32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_output_scales_and_bias():
    """A bfloat16 output is the float32 result rounded once (ties to even; past bfloat16's largest
    finite value, inf), with bfloat16 scales and bias widened exactly: the float32 call on their
    float32 values, rounded by bf16_bits. Rows of huge, tiny (subnormal) and NaN scales."""
    rng = np.random.default_rng(11)
    a, b = qrand(rng, U8, (6, 40)), qrand(rng, I8, (40, 9))
    a_s = rng.uniform(1e-3, 1, (6, 1)).astype(BF16)
    a_s[1], a_s[2], a_s[3] = 3e38, 1e-39, np.nan
    b_s = rng.uniform(-1, 1, (9,)).astype(BF16)
    bias = rng.uniform(-5, 5, (9,)).astype(BF16)
    azp = qrand(rng, U8, (6, 1))
    with np.errstate(all="ignore"):
        got = dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, None, bias, dtype=BF16)
        f32 = dmlq.matmul_integer_to_float(a, a_s.astype(F32), azp, b, b_s.astype(F32), None, bias.astype(F32))
    assert got.dtype == BF16 and got.shape == (6, 9)
    nan = np.isnan(f32)
    assert nan[3].all() and np.array_equal(np.isnan(got.astype(F32)), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bf16_bits(f32)[~nan])
    # one term each: past the largest finite bfloat16 (finite in float32), a subnormal, two ties
    edges = np.array([3.4e38, 1e-39, 1 + 2**-8, 1 + 3 * 2**-8], F32)
    got1 = dmlq.matmul_integer_to_float(np.ones((1, 1), U8), np.float32(1), None, np.ones((1, 4), U8), edges, None,
                                        dtype=BF16)
    np.testing.assert_array_equal(bits(got1)[0], [0x7F80, bf16_bits(edges[1]), 0x3F80, 0x3F82])
    assert 0 < bits(got1)[0, 1] < 0x80  # (a subnormal bfloat16)
    out = np.empty((6, 9), BF16)  # out= alone picks the type, as for float16
    with np.errstate(all="ignore"):
        assert dmlq.matmul_integer_to_float(a, a_s, azp, b, b_s, None, bias, out=out) is out
    np.testing.assert_array_equal(bits(out)[~nan], bits(got)[~nan])
    blocked = dmlq.matmul_integer_to_float(a[:4], np.float32(0.5), None, b, b_s.reshape(1, 9).repeat(3, 0),
                                           None, dtype=BF16, block_size=16)
    want = dmlq.matmul_integer_to_float(a[:4], np.float32(0.5), None, b, b_s.astype(F32).reshape(1, 9).repeat(3, 0),
                                        None, block_size=16)
    np.testing.assert_array_equal(bits(blocked), bf16_bits(want))


@pytest.mark.parametrize("bdt", [I4, U4])
def test_four_bit_b_is_its_values(bdt):
    rng = np.random.default_rng(7)
    a, b = qrand(rng, U8, (4, 13)), qrand(rng, bdt, (13, 6))
    info = ml_dtypes.iinfo(bdt)
    b[0] = info.min
    b[1] = info.max
    bzp = qrand(rng, bdt, (6,))
    wide = b.astype(np.int16).astype(I8 if bdt == I4 else U8)
    np.testing.assert_array_equal(dmlq.matmul_integer(a, b, np.uint8(3), bzp),
                                  dmlq.matmul_integer(a, wide, np.uint8(3), bzp.astype(np.int16).astype(wide.dtype)))
    np.testing.assert_array_equal(dmlq.matmul_integer(a, b, None, int(info.max)),
                                  exact_sums(a, 0, b, int(info.max)).astype(np.int64))


def test_extreme_sums_are_exact_in_the_float_output():
    """K = 40000 at the extremes: the sum passes int32 and is rounded to float32 once."""
    k = 40000
    a = np.zeros((1, k), U8)
    b = np.full((k, 1), 255, U8)
    got = dmlq.matmul_integer_to_float(a, np.float32(1), np.uint8(255), b, np.float32(1), np.uint8(0))
    assert got[0, 0] == np.float32(-255 * 255 * k)


def test_descriptor_runs_the_same_computation():
    rng = np.random.default_rng(8)
    a, b = qrand(rng, I8, (2, 3, 4, 5)), qrand(rng, I8, (2, 3, 5, 6))
    a_s = rng.uniform(0, 1, (1, 1, 4, 1)).astype(F32)
    b_s = rng.uniform(0, 1, (1, 1, 1, 6)).astype(F32)
    bzp = qrand(rng, I8, (1, 1, 1, 6))
    bias = rng.uniform(-1, 1, (2, 3, 4, 6)).astype(F32)
    t = TensorDesc
    desc = MatrixMultiplyIntegerToFloatDesc(
        t("INT8", a.shape), t("FLOAT32", a_s.shape), None, t("INT8", b.shape), t("FLOAT32", b_s.shape),
        t("INT8", bzp.shape), t("FLOAT32", bias.shape), t("FLOAT32", bias.shape))
    got = dmlq.compile_operator(desc)(a, a_s, b, b_s, bzp, bias)
    want = dmlq.matmul_integer_to_float(a, a_s.reshape(4, 1), None, b, b_s.reshape(6), bzp.reshape(6), bias)
    np.testing.assert_array_equal(bits(got), bits(want))
    with pytest.raises(DescError, match="feature level 6.2"):
        dmlq.compile_operator(desc, feature_level="6.1")


@pytest.mark.parametrize("change,match", [
    (dict(b_tensor=TensorDesc("UINT8", (1, 1, 5, 6))), "ATensor and BTensor must have the same DataType"),
    (dict(output_tensor=TensorDesc("FLOAT16", (1, 1, 4, 6))), "must have the same DataType"),
    (dict(output_tensor=TensorDesc("INT32", (1, 1, 4, 6))), "OutputTensor DataType"),
    (dict(a_scale_tensor=TensorDesc("FLOAT32", (1, 1, 1, 4))), "AScaleTensor Sizes"),
    (dict(b_zero_point_tensor=TensorDesc("INT8", (1, 1, 6, 1))), "BZeroPointTensor Sizes"),
    (dict(bias_tensor=TensorDesc("FLOAT32", (1, 1, 1, 6))), "BiasTensor and OutputTensor must have the same"),
    (dict(b_tensor=TensorDesc("INT8", (1, 1, 4, 6))), "K"),
    (dict(a_tensor=TensorDesc("INT8", (4, 5))), "DimensionCount"),
])
def test_descriptor_rules(change, match):
    t = TensorDesc
    fields = dict(a_tensor=t("INT8", (1, 1, 4, 5)), a_scale_tensor=t("FLOAT32", (1, 1, 4, 1)),
                  b_tensor=t("INT8", (1, 1, 5, 6)), b_scale_tensor=t("FLOAT32", (1, 1, 1, 6)),
                  bias_tensor=t("FLOAT32", (1, 1, 4, 6)), output_tensor=t("FLOAT32", (1, 1, 4, 6)))
    dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**fields))
    fields.update(change)
    with pytest.raises(DescError, match=match):
        dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**fields))


def _args():
    rng = np.random.default_rng(9)
    return dict(a=qrand(rng, U8, (3, 8)), a_scale=np.float32(0.1), a_zero_point=None,
                b=qrand(rng, I8, (8, 5)), b_scale=np.float32(0.2), b_zero_point=None)


@pytest.mark.parametrize("change,error,match", [
    (dict(a=np.zeros((3, 8), np.int16)), TypeError, "a must have dtype int8 or uint8"),
    (dict(b=np.zeros((8, 5), np.float32)), TypeError, "b must have dtype"),
    (dict(b=np.zeros((7, 5), np.int8)), ValueError, "a has K = 8 columns but b has 7 rows"),
    (dict(a=np.uint8(1)), DescError, "a and b must be matrices"),
    (dict(a_scale=np.ones(3, np.float32)), DescError, "a_scale must be a single value .* \\(M, 1\\)"),
    (dict(b_scale=np.ones((2, 5), np.float32)), DescError, "blocked along K need block_size="),
    (dict(b_scale=np.ones(4, np.float32)), DescError, "b_scale must be a single value"),
    (dict(b_scale=np.float64(1)[None]), TypeError, "b_scale must have dtype float32, float16 or bfloat16"),
    (dict(a_zero_point=np.float32(1)), TypeError, "a_zero_point must have an integer dtype"),
    (dict(b_zero_point=300), DescError, "b_zero_point = 300 is out of range"),
    (dict(bias=np.ones(4, np.float32)), ValueError, "bias of shape \\(4,\\)"),
    (dict(bias=np.ones((2, 3, 5), np.float32)), ValueError, "without growing it"),
    (dict(dtype=np.int32), TypeError, "dtype must be np.float32, np.float16 or ml_dtypes.bfloat16"),
    (dict(block_size=0), DescError, "block_size must be >= 1"),
    (dict(block_size=2.5), TypeError, "block_size must be an int"),
    (dict(block_size=4, b_scale=np.ones((3, 5), np.float32)), DescError, "per group of block_size"),
    (dict(out=np.empty((3, 5), np.float64)), TypeError, "out must have dtype float32"),
])
def test_matmul_integer_to_float_errors_name_the_argument(change, error, match):
    kw = {**_args(), **change}
    with pytest.raises(error, match=match):
        dmlq.matmul_integer_to_float(**kw)


def test_matmul_integer_errors_name_the_argument():
    rng = np.random.default_rng(10)
    a, b = qrand(rng, U8, (3, 8)), qrand(rng, I4, (8, 5))
    with pytest.raises(TypeError, match="b_zero_point must be a Python int, an array of dtype int4"):
        dmlq.matmul_integer(a, b, None, np.ones(5, np.int8))
    with pytest.raises(DescError, match="b_zero_point = 8 is out of range for int4"):
        dmlq.matmul_integer(a, b, None, 8)
    with pytest.raises(DescError, match=r"a_zero_point must be a single value .*\(per row of a\)"):
        dmlq.matmul_integer(a, b, np.zeros(3, np.uint8))
    with pytest.raises(TypeError, match="out must have dtype int32"):
        dmlq.matmul_integer(a, b, out=np.empty((3, 5), np.int64))


@pytest.mark.parametrize("fn", ["matmul_integer", "matmul_integer_to_float"])
def test_b_parameter_shape_errors_give_the_hint_that_fits(fn):
    """A b parameter of a wrong shape: the block_size= hint only where the function has that keyword
    and the parameter has several rows; a per-batch shape beside a b without batch dimensions is
    said to be that (it had the block_size= hint, which cannot help a single row)."""
    rng = np.random.default_rng(12)
    a, b = qrand(rng, U8, (2, 3, 8)), qrand(rng, I8, (8, 5))

    def call(b_zero_point):
        if fn == "matmul_integer":
            return dmlq.matmul_integer(a, b, None, b_zero_point)
        return dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.2, b_zero_point)

    with pytest.raises(DescError, match=r"b_zero_point must be .*\(got shape \(4, 5\)\)") as e:
        call(np.ones((4, 5), np.int8))
    assert ("zero points blocked along K need block_size=" in str(e.value)) == (fn != "matmul_integer"), e.value
    with pytest.raises(DescError, match=r"\(got shape \(2, 1, 5\)\); b has no batch dimensions, so there is "
                                        r"no per-batch form") as e:
        call(np.ones((2, 1, 5), np.int8))
    assert "block_size" not in str(e.value)


# ------------------------------------------------------------------ quantized_matmul, per-batch B

def test_quantized_matmul_per_batch_b_parameters():
    """Per-batch b_scale / b_zero_point: each matrix of the batch equals the 2-D call with its row,
    and onnxruntime's QLinearMatMul with the same per-batch tensors gives the same bytes."""
    rng = np.random.default_rng(11)
    a, b = qrand(rng, U8, (3, 4, 24)), ort_b(rng, U8, I8, (3, 24, 6))
    b_s = rng.uniform(1e-3, 2e-2, (3, 1, 6)).astype(F32)
    bzp = ort_b(rng, U8, I8, (3, 1, 6))
    a_s, azp, o_s, ozp = np.float32(0.02), np.uint8(120), np.float32(0.05), np.uint8(128)
    got = dmlq.quantized_matmul(a, a_s, azp, b, b_s, bzp, o_s, ozp)
    for i in range(3):
        one = dmlq.quantized_matmul(a[i], a_s, azp, b[i], b_s[i, 0], bzp[i, 0], o_s, ozp)
        np.testing.assert_array_equal(got[i], one)
    want = run_onnx("QLinearMatMul", [a, np.array(a_s), np.array(azp), b, b_s, bzp, np.array(o_s),
                                      np.array(ozp)], U8)
    np.testing.assert_array_equal(got, want)
    # a wrong shape's error names the per-batch form too, b's batch shape and all
    with pytest.raises(DescError, match=r"b_scale must be a single value .*; per batch and column it is "
                                        r"\(3, 1, 6\) \(b's batch shape \+ \(1, N\)\)"):
        dmlq.quantized_matmul(a, a_s, azp, b, b_s[:2], bzp, o_s, ozp)
    with pytest.raises(DescError, match=r"b_zero_point must be .*; per batch and column it is \(3, 1, 6\)"):
        dmlq.quantized_matmul(a, a_s, azp, b, b_s, bzp[:, :, :1].repeat(5, 1), o_s, ozp)


def test_kernel_plan_of_the_new_operators():
    rng = np.random.default_rng(13)
    a, b = qrand(rng, U8, (3, 8)), qrand(rng, I8, (8, 5))
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer, a, b))
    # M <= 16: quantized_matmul's weight-streaming kernel, its sums pass (cuda/matmul_stream.cu's one
    # thread per column lost to the tiles on the H100: dmlq/gpu/intmm.py); past it the tiles
    assert plan.splitlines() == [
        "matmul_integer: stream-m4 (b: 16-byte loads of its rows; exact int32 sums to a workspace, the output made "
        "by the second pass)",
        "  matmul_stream_grouped<uint8, int8, 4>  grid 1x1  block 128",
        "  matmul_stream_grouped_finish<int>  grid 1x1  block 256  (int32 sums)"]
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, qrand(rng, U8, (17, 8)), 0.1, None, b, 0.2, None))
    assert plan.splitlines()[0] == "matmul_integer_to_float: dp4a-32x32"
    assert "matmul_dp4a<uint8, int8, float, 32, 32, 32, 4, 4>" in plan
    # blocked scales whose group is not a multiple of 32: at M <= 16 the grouped stream kernel, one
    # chunk of K per group, where its workspace fits; else (groups of 1 here) and past 16 rows
    # matmul_stream.cu
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, qrand(rng, U8, (3, 8)), 0.1, None, b,
                                np.full((2, 5), 0.2, F32), None, block_size=4))
    assert plan.splitlines()[0].startswith("matmul_integer_to_float: stream-grouped-m4 (b: 16-byte loads of its "
                                           "rows; 2 groups of 4 along K, one per chunk of K (2 blocks;"), plan
    assert plan.splitlines()[1] == "  matmul_stream_grouped<uint8, int8, 4>  grid 1x1x2  block 128", plan
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, qrand(rng, U8, (3, 8)), 0.1, None, b,
                                np.full((8, 5), 0.2, F32), None, block_size=1))
    assert plan.splitlines()[:2] == ["matmul_integer_to_float: stream-m4 (8 groups of 1 along K)",
                                     "  matmul_stream<uint8, int8, float, 4>  grid 1x1  block 128"]
    with pytest.raises(ValueError, match="a has K = 8 columns but b has 7 rows"):  # checked first
        dmlq.kernel_plan(dmlq.matmul_integer, a, np.zeros((7, 2), np.int8))


@pytest.mark.parametrize("dt,value", [(np.uint32, 2**32 - 1), (np.int32, -2**31), (np.int16, -2**15)])
def test_descriptor_wide_integers_are_exact(dt, value):
    """DirectML's table also takes 16- and 32-bit A and B: sums past int64 stay exact, rounded once."""
    k = 5
    a = np.full((1, 1, 1, k), value, dt)
    b = np.full((1, 1, k, 1), value, dt)
    b[0, 0, 0, 0] = 3
    one = np.ones((1, 1, 1, 1), F32)
    t = TensorDesc
    name = np.dtype(dt).name.upper()
    desc = MatrixMultiplyIntegerToFloatDesc(t(name, a.shape), t("FLOAT32", one.shape), None, t(name, b.shape),
                                            t("FLOAT32", one.shape), None, None, t("FLOAT32", (1, 1, 1, 1)))
    got = dmlq.compile_operator(desc)(a, one, b, one)
    exact = value * 3 + (k - 1) * value * value  # a Python int, past int64 for 32-bit values
    from fractions import Fraction
    err = abs(Fraction(got.item()) - exact)  # rounded once: within half an ulp of float32
    ulp = Fraction(np.spacing(np.float32(abs(got.item()))).item())
    assert err <= ulp / 2


# The seed's "Tensor support" table for MATRIX_MULTIPLY_INTEGER_TO_FLOAT, transcribed a second
# time (learn.microsoft.com, DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC): field -> (dims, types).
_INTS = {"INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8"}
_FLOAT_TYPES = {"FLOAT32", "FLOAT16"}
I2F_TABLE = {"ATensor": ((2, 4), _INTS), "AScaleTensor": ((1, 4), _FLOAT_TYPES),
             "AZeroPointTensor": ((1, 4), _INTS), "BTensor": ((2, 4), _INTS),
             "BScaleTensor": ((1, 4), _FLOAT_TYPES), "BZeroPointTensor": ((1, 4), _INTS),
             "BiasTensor": ((2, 4), _FLOAT_TYPES), "OutputTensor": ((2, 4), _FLOAT_TYPES)}
# The fields each "Tensor constraints" bullet ties to one DataType.
I2F_TYPE_GROUPS = (("ATensor", "AZeroPointTensor", "BTensor", "BZeroPointTensor"),
                   ("AScaleTensor", "BiasTensor", "BScaleTensor", "OutputTensor"))


def _i2f_fields(types=None, ranks=None):
    """A valid desc's fields (M = 4, K = 5, N = 6), with DataType and rank overrides."""
    shapes = {"ATensor": (4, 5), "AScaleTensor": (4, 1), "AZeroPointTensor": (4, 1), "BTensor": (5, 6),
              "BScaleTensor": (1, 6), "BZeroPointTensor": (1, 6), "BiasTensor": (4, 6), "OutputTensor": (4, 6)}
    types = {**{f: "INT8" for f in I2F_TYPE_GROUPS[0]}, **{f: "FLOAT32" for f in I2F_TYPE_GROUPS[1]},
             **(types or {})}
    ranks = ranks or {}
    fields = {}
    for f, shape in shapes.items():
        r = ranks.get(f, 4)
        full = (1,) * max(r - len(shape), 0) + shape
        fields[f] = TensorDesc(types[f], full[len(full) - r:] if r < len(shape) else full)
    from dmlq.desc import dml_name
    return {n: fields[dml_name(n)] for n in ("a_tensor", "a_scale_tensor", "a_zero_point_tensor", "b_tensor",
                                              "b_scale_tensor", "b_zero_point_tensor", "bias_tensor",
                                              "output_tensor")}


@pytest.mark.parametrize("field", list(I2F_TABLE))
def test_descriptor_table_types_row_by_row(field):
    from dmlq.dtypes import DataType
    group = next(g for g in I2F_TYPE_GROUPS if field in g)
    for dt in DataType:
        fields = _i2f_fields({f: dt.name for f in group})
        desc = MatrixMultiplyIntegerToFloatDesc(**fields)
        if dt.name in I2F_TABLE[field][1]:
            dmlq.compile_operator(desc)
        else:
            with pytest.raises(DescError, match="DataType must be one of"):
                dmlq.compile_operator(desc)


_PARAMS = ("AScaleTensor", "AZeroPointTensor", "BScaleTensor", "BZeroPointTensor")
_DATA = ("ATensor", "BTensor", "BiasTensor", "OutputTensor")


@pytest.mark.parametrize("group", [_PARAMS, _DATA], ids=["parameters", "data"])
def test_descriptor_table_ranks(group):
    """Each group's rows allow the table's DimensionCounts (one rule ties each group's count)."""
    lo, hi = I2F_TABLE[group[0]][0]
    for r in range(max(lo, 2), hi + 1):
        dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**_i2f_fields(ranks={f: r for f in group})))
    for r in (lo - 1, hi + 1):
        if r >= 1:
            with pytest.raises(DescError, match=f"DimensionCount must be {lo} to {hi}"):
                dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**_i2f_fields(ranks={f: r for f in group})))
    with pytest.raises(DescError, match="must have the same DimensionCount"):
        dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**_i2f_fields(ranks={group[-1]: 3})))
    if lo == 1:  # one-dimensional parameters: per tensor (1,) or per row / column (M,) / (N,)
        one = {k: TensorDesc(v.data_type, (v.element_count,) if v.element_count > 1 else (1,))
               for k, v in _i2f_fields().items() if "scale" in k or "zero" in k}
        dmlq.compile_operator(MatrixMultiplyIntegerToFloatDesc(**{**_i2f_fields(), **one}))


def test_onnx_node_case_matmulinteger():
    """The onnx wheel's MatMulInteger node case (read at test time), through dmlq.matmul_integer."""
    from onnx import numpy_helper

    case = node_cases(("MatMulInteger",), ("matmulinteger",), 1).get("test_matmulinteger")
    if case is None:
        pytest.skip("this onnx wheel has no node case test_matmulinteger")
    (inputs, outputs), = case.data_sets
    vals = [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for v in inputs]
    want = np.asarray(outputs[0])
    got = dmlq.matmul_integer(*vals)
    assert got.dtype == want.dtype == I32 and np.array_equal(got, want)
