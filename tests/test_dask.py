"""dask.array through the public functions: lazy results, bit for bit the one-array result.

Expected values are the public functions on whole NumPy arrays (the reference
backend; tests/test_api.py ties it to dmlq.reference) and dmlq.reference itself.
Computed with the threaded scheduler, and with a two-process distributed
LocalCluster (loopback) started and closed by this module.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import dmlq  # noqa: E402
from dmlq import reference as R  # noqa: E402

f32, u8, i8 = np.float32, np.uint8, np.int8


def _threads(x):
    return x.compute(scheduler="threads")


def _exact(got, want):
    np.testing.assert_array_equal(got, want, strict=True)


def _chunked(a, chunks):
    return da.from_array(a, chunks=chunks)


# ---- element-wise ---------------------------------------------------------------------------

ELEMENTWISE_CHUNKS = [((2, 5), (4, 1, 1)), ((7,), (6,)), ((1,) * 7, (5, 1)), ((3, 4), (6,))]


def test_quantize_dequantize_add_any_chunking(rng):
    x = (rng.standard_normal((7, 6)) * 5).astype(f32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    s_col = rng.uniform(0.01, 0.2, (1, 6)).astype(f32)
    z_col = rng.integers(0, 256, (1, 6), dtype=u8)
    s_row = rng.uniform(0.01, 0.2, (7, 1)).astype(f32)
    q = rng.integers(-128, 128, (7, 6), dtype=i8)
    b = rng.integers(0, 256, (6,), dtype=u8)
    for chunks in ELEMENTWISE_CHUNKS:
        dx, dq = _chunked(x, chunks), _chunked(q, chunks)
        cases = [
            (dmlq.quantize_linear, (dx, s_col, z_col), (x, s_col, z_col), {}),
            (dmlq.quantize_linear, (dx, _chunked(s_row, (chunks[0], 1)), None), (x, s_row, None),
             {"dtype": i8}),
            (dmlq.quantize_linear, (dx, 0.07, 3), (x, 0.07, 3), {}),
            (dmlq.dequantize_linear, (dq, s_col, i8(-5)), (q, s_col, i8(-5)), {}),
            (dmlq.quantized_add, (dq, 0.1, -3, _chunked(b, 4), 0.05, 128, 0.2, u8(9)),
             (q, 0.1, -3, b, 0.05, 128, 0.2, u8(9)), {}),
        ]
        for fn, dargs, args, kw in cases:
            lazy = fn(*dargs, **kw)
            assert isinstance(lazy, da.Array) and type(lazy._meta) is np.ndarray
            want = fn(*args, **kw)
            assert lazy.dtype == want.dtype and lazy.shape == want.shape and lazy._meta.dtype == want.dtype
            _exact(_threads(lazy), want)
    ref = np.empty(x.shape, u8)
    R.quantize_linear(x, s_col, z_col, ref)
    _exact(_threads(dmlq.quantize_linear(_chunked(x, (3, 2)), s_col, z_col)), ref)


def test_empty_dimension_and_single_chunk():
    x = np.zeros((0, 5), f32)
    lazy = dmlq.quantize_linear(da.from_array(x, chunks=(1, 2)), 0.5, 1)
    assert lazy.shape == (0, 5)
    _exact(_threads(lazy), np.zeros((0, 5), u8))
    one = np.arange(12, dtype=f32).reshape(3, 4)
    _exact(_threads(dmlq.quantize_linear(da.from_array(one, chunks=-1), 0.5)), dmlq.quantize_linear(one, 0.5))


# ---- average pooling ------------------------------------------------------------------------

POOLS = [  # window, strides, start, end, dilations, include_padding, ceil_mode
    ((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False, True),
    ((3, 2), (2, 3), (1, 0), (0, 2), (1, 2), True, True),
    ((2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False, False),
    ((3, 1), (1, 1), (2, 0), (2, 0), (2, 1), True, False),
    ((2, 3), (3, 2), (4, 5), (4, 3), (1, 1), True, True),    # windows entirely in padding
    ((2, 3), (3, 2), (4, 5), (4, 3), (1, 1), False, True),
]
POOL_CHUNKS = [((1, 1), (2, 1), (5, 1, 7, 4), (4, 4, 5)),    # uneven; one chunk smaller than the halo
               ((2,), (3,), (17,), (13,)),                    # one chunk
               ((2,), (1, 1, 1), (1,) * 17, (1,) * 13)]       # every chunk smaller than a window


def _pool_whole(x, xs, xz, os_, oz, p, dtype=None):
    w, s, sp, ep, d, inc, ceil = p
    return dmlq.quantized_avg_pool(x, xs, xz, os_, oz, w, strides=s, start_padding=sp, end_padding=ep, dilations=d,
                                   include_padding=inc, ceil_mode=ceil, dtype=dtype)


def test_avg_pool_any_chunking(rng):
    x = rng.integers(0, 256, (2, 3, 17, 13), dtype=u8)
    xs = rng.uniform(0.05, 0.2, (3,)).astype(f32)
    xz = rng.integers(0, 256, (1, 3, 1, 1), dtype=u8)
    oz = np.array([-3, 0, 7], i8)
    for p, chunks in itertools.product(POOLS, POOL_CHUNKS):
        want = _pool_whole(x, xs, xz, 0.11, oz, p)
        lazy = _pool_whole(_chunked(x, chunks), xs, xz, 0.11, oz, p)
        assert lazy.shape == want.shape and lazy.dtype == want.dtype, (p, chunks)
        _exact(_threads(lazy), want)
    w, s, sp, ep, d, inc, ceil = POOLS[0]
    ref = np.empty(want.shape if False else _pool_whole(x, 0.1, 2, 0.1, None, POOLS[0]).shape, u8)
    R.quantized_avg_pool(x, f32(0.1), u8(2), f32(0.1), None, ref, w, s, sp, ep, d, inc)
    _exact(_threads(_pool_whole(_chunked(x, POOL_CHUNKS[0]), 0.1, 2, 0.1, None, POOLS[0])), ref)


def test_avg_pool_3d_and_empty_batch(rng):
    x = rng.integers(-128, 128, (1, 2, 7, 6, 5), dtype=i8)
    p = ((2, 3, 2), (2, 2, 1), (1, 0, 1), (1, 1, 0), (1, 1, 2), False, True)
    w, s, sp, ep, d, inc, ceil = p
    kw = dict(strides=s, start_padding=sp, end_padding=ep, dilations=d, include_padding=inc, ceil_mode=ceil)
    want = dmlq.quantized_avg_pool(x, 0.1, -2, 0.2, None, w, dtype=u8, **kw)
    lazy = dmlq.quantized_avg_pool(_chunked(x, (1, 1, (3, 4), (1, 5), 2)), 0.1, -2, 0.2, None, w, dtype=u8, **kw)
    _exact(_threads(lazy), want)
    # an axis shorter than the window's halo (padding makes the window fit): one chunk, no halo
    short = rng.integers(0, 256, (1, 2, 3, 9), dtype=u8)
    for chunks, inc in itertools.product([(1, 2, 3, (4, 5)), (1, 1, (1, 2), (1,) * 9)], (False, True)):
        kw = dict(strides=(2, 3), start_padding=(2, 1), end_padding=(2, 2), include_padding=inc, ceil_mode=True)
        want = dmlq.quantized_avg_pool(short, 0.1, 3, 0.1, 3, (5, 4), **kw)
        _exact(_threads(dmlq.quantized_avg_pool(_chunked(short, chunks), 0.1, 3, 0.1, 3, (5, 4), **kw)), want)
    # an empty spatial axis whose padding still holds windows: they lie wholly in padding
    flat = np.zeros((1, 2, 0, 5), u8)
    kw = dict(strides=2, start_padding=(2, 0), end_padding=(1, 0), include_padding=True)
    _exact(_threads(dmlq.quantized_avg_pool(_chunked(flat, (1, 1, 0, (2, 3))), 0.1, 0, 0.1, u8(9), 2, **kw)),
           dmlq.quantized_avg_pool(flat, 0.1, 0, 0.1, u8(9), 2, **kw))
    empty = np.zeros((0, 2, 6, 6), u8)
    lazy = dmlq.quantized_avg_pool(_chunked(empty, (1, 1, 3, 2)), 0.1, 0, 0.1, 0, 2, strides=2)
    assert lazy.shape == (0, 2, 3, 3)
    _exact(_threads(lazy), np.zeros((0, 2, 3, 3), u8))


# ---- matmul ---------------------------------------------------------------------------------

def _mm(a, b, params, dtype=None):
    a_s, a_z, b_s, b_z, o_s, o_z = params
    return dmlq.quantized_matmul(a, a_s, a_z, b, b_s, b_z, o_s, o_z, dtype=dtype)


def test_matmul_k_split_and_any_m_n_chunking(rng):
    m, k, n = 9, 40, 7
    a = rng.integers(0, 256, (m, k), dtype=u8)
    b = rng.integers(-128, 128, (k, n), dtype=i8)
    params = [
        (rng.uniform(0.01, 0.05, (m, 1)).astype(f32), rng.integers(0, 256, (m, 1), dtype=u8),
         rng.uniform(0.001, 0.01, (n,)).astype(f32), rng.integers(-128, 128, (1, n), dtype=i8),
         rng.uniform(0.5, 2.0, (m, 1)).astype(f32), rng.integers(-128, 128, (m, 1), dtype=i8)),
        (0.02, 128, 0.004, None, 1.3, None),
        (0.02, 0, 0.004, 3, np.float32(0.0), u8(7)),  # a zero out_scale: IEEE, as the whole array
    ]
    chunkings = [((9,), (40,)), ((4, 5), (40,)), ((2, 7), (13, 1, 26)), ((1,) * 9, (8,) * 5)]
    b_chunks = [((40,), (7,)), ((40,), (3, 4)), ((20, 20), (1, 6)), ((3, 37), (7,))]
    for p, (ac, bc) in itertools.product(params, zip(chunkings, b_chunks)):
        want = _mm(a, b, p)
        lazy = _mm(_chunked(a, ac), _chunked(b, bc), p)
        assert lazy.dtype == want.dtype and lazy.shape == want.shape
        _exact(_threads(lazy), want)
    ref = np.empty((m, n), i8)
    a_s, a_z, b_s, b_z, o_s, o_z = params[0]
    R.quantized_matmul(a, a_s.ravel(), a_z.ravel(), b, b_s, b_z.ravel(), o_s.ravel(), o_z.ravel(), ref)
    _exact(_threads(_mm(_chunked(a, ((2, 7), (13, 1, 26))), b, params[0])), ref)


def test_matmul_batched_and_k_zero(rng):
    a = rng.integers(-128, 128, (3, 5, 12), dtype=i8)
    b = rng.integers(0, 256, (12, 4), dtype=u8)
    p = (0.03, -4, 0.01, 100, 0.5, None)
    _exact(_threads(_mm(_chunked(a, (2, 3, (5, 7))), _chunked(b, (7, 2)), p, dtype=i8)), _mm(a, b, p, dtype=i8))
    # sums past int32: a K chunk beyond 33025 (exact float64 products) beside a short one (matmul_integer)
    k = 33030
    a1, b1 = np.full((2, k), 255, u8), np.full((k, 2), -128, i8)
    p1 = (1.0, 0, 1.0, 127, 2.0**26, None)  # sum = -k * 255 * 255 = -2147775750 < -2**31
    _exact(_threads(_mm(_chunked(a1, (1, (33026, 4))), _chunked(b1, ((33026, 4), 2)), p1, dtype=i8)),
           _mm(a1, b1, p1, dtype=i8))
    a0, b0 = np.zeros((3, 0), u8), np.zeros((0, 2), i8)
    _exact(_threads(_mm(_chunked(a0, (2, 1)), b0, (0.1, 3, 0.1, None, 0.5, u8(4)))),
           _mm(a0, b0, (0.1, 3, 0.1, None, 0.5, u8(4))))


def test_matmul_integer_k_split_wraps_as_the_whole_array(rng):
    a = rng.integers(-128, 128, (2, 7, 30), dtype=i8)
    b = rng.integers(0, 256, (30, 5), dtype=u8)
    a_zp, b_zp = rng.integers(-128, 128, (7, 1), dtype=i8), rng.integers(0, 256, (5,), dtype=u8)
    lazy = dmlq.matmul_integer(_chunked(a, (1, (3, 4), (10, 20))), _chunked(b, ((10, 20), (2, 3))), a_zp, b_zp)
    assert lazy.dtype == np.int32 and lazy._meta.size == 0
    _exact(_threads(lazy), dmlq.matmul_integer(a, b, a_zp, b_zp))
    k = 33030  # past int32: the whole array's sums wrap, and so do the chunks' sums added
    a1, b1 = np.full((2, k), 255, u8), np.full((k, 2), -128, i8)
    _exact(_threads(dmlq.matmul_integer(_chunked(a1, (1, (33026, 4))), _chunked(b1, ((33026, 4), 2)), None, i8(127))),
           dmlq.matmul_integer(a1, b1, None, i8(127)))


def test_matmul_integer_to_float_k_split_blocked_scales_any_chunking(rng):
    """Per K chunk exact sums, per group of block_size rows where the scales are blocked
    (groups straddling chunk boundaries), added in ascending order as the whole array."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m, k, n = 6, 13, 5
    a = rng.integers(0, 256, (m, k), dtype=u8)
    b8 = rng.integers(-128, 128, (k, n), dtype=i8)
    b4 = rng.integers(-8, 8, (k, n)).astype(ml_dtypes.int4)
    a_s = rng.uniform(0.01, 0.1, (m, 1)).astype(np.float16)
    a_z = rng.integers(0, 256, (m, 1), dtype=u8)
    bias = (rng.standard_normal((m, n)) * 50).astype(f32)
    cases = [(b8, rng.uniform(-0.1, 0.1, (n,)).astype(f32), rng.integers(-128, 128, (n,), dtype=i8), None),
             (b8, rng.uniform(0.01, 0.1, (5, n)).astype(f32), rng.integers(-128, 128, (5, n), dtype=i8), 3),
             (b4, rng.uniform(0.01, 0.1, (4, n)).astype(f32), rng.integers(-8, 8, (4, n)).astype(ml_dtypes.int4), 4),
             (b4, np.float32(0.02), None, 13)]
    chunkings = [((m,), (k,), (n,)), ((2, 4), (5, 8), (3, 2)), ((1,) * m, (1,) * k, (1,) * n), ((6,), (4, 9), (5,))]
    for (b, b_s, b_z, bs), (mc, kc, nc), dt in itertools.product(cases, chunkings, (f32, np.float16)):
        for bi in (None, bias, bias[0]):
            want = dmlq.matmul_integer_to_float(a, a_s, a_z, b, b_s, b_z, bi, dtype=dt, block_size=bs)
            lazy = dmlq.matmul_integer_to_float(_chunked(a, (mc, kc)), a_s, a_z, _chunked(b, (kc, nc)), b_s, b_z,
                                                bi, dtype=dt, block_size=bs)
            assert isinstance(lazy, da.Array) and lazy._meta.dtype == dt and lazy.shape == want.shape
            _exact(_threads(lazy), want)
    # the contract itself, groups of 3 over K chunks (5, 8): group 1 straddles them
    b_s, b_z = cases[1][1], cases[1][2]
    ref = np.empty((m, n), f32)
    R.matmul_integer_to_float(a, a_s, a_z, b8, b_s, b_z, bias, ref, 3)
    _exact(_threads(dmlq.matmul_integer_to_float(_chunked(a, (3, (5, 8))), a_s, a_z, _chunked(b8, ((5, 8), 2)),
                                                 b_s, b_z, _chunked(bias, 2), block_size=3)), ref)
    # batched a, K = 0
    a3 = rng.integers(-128, 128, (2, 3, 7), dtype=i8)
    _exact(_threads(dmlq.matmul_integer_to_float(_chunked(a3, (1, 2, (3, 4))), 0.5, -3, b8[:7], 0.25, 1)),
           dmlq.matmul_integer_to_float(a3, 0.5, -3, b8[:7], 0.25, 1))
    a0, b0 = np.zeros((3, 0), u8), np.zeros((0, 2), i8)
    _exact(_threads(dmlq.matmul_integer_to_float(_chunked(a0, 2), -0.5, 3, b0, 0.1, None)),
           dmlq.matmul_integer_to_float(a0, -0.5, 3, b0, 0.1, None))


def test_per_batch_b_parameters_any_chunking(rng):
    """b_scale / b_zero_point per batch and column (b's batch shape, then (1, N); and
    (G, N) per group with blocked scales) cut where b's batch and N chunks fall, for
    every K split, in all three operators; a batch broadcast from a or from b."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    nb, m, k, n = 3, 5, 12, 7
    a = rng.integers(0, 256, (2, nb, m, k), dtype=u8)
    b8 = rng.integers(-128, 128, (nb, k, n), dtype=i8)
    b4 = rng.integers(-8, 8, (nb, k, n)).astype(ml_dtypes.int4)
    b_s = rng.uniform(0.001, 0.01, (nb, 1, n)).astype(f32)
    b_z = rng.integers(-128, 128, (nb, 1, n), dtype=i8)
    g_s = rng.uniform(0.001, 0.01, (nb, 3, n)).astype(f32)
    g_z = rng.integers(-128, 128, (nb, 3, n), dtype=i8)
    g_z4 = rng.integers(-8, 8, (nb, 3, n)).astype(ml_dtypes.int4)
    a_s, a_z = rng.uniform(0.01, 0.05, (m, 1)).astype(f32), rng.integers(0, 256, (m, 1), dtype=u8)
    chunkings = [((1, (1, 2), (2, 3), (5, 7)), ((2, 1), (5, 7), (3, 4))),  # K split, batch and N cut
                 ((2, 3, 5, 12), (3, 12, 7)),                              # one chunk
                 ((1, 1, 1, (4,) * 3), (1, (4,) * 3, 1))]                  # every batch and column alone
    for ac, bc in chunkings:
        la, lb = _chunked(a, ac), _chunked(b8, bc)
        for lazy, want in (
                (dmlq.quantized_matmul(la, a_s, a_z, lb, b_s, b_z, 0.5, None),
                 dmlq.quantized_matmul(a, a_s, a_z, b8, b_s, b_z, 0.5, None)),
                (dmlq.quantized_matmul(la, 0.02, 3, lb, b_s, 0, np.float32(0.7), i8(-3), dtype=i8),
                 dmlq.quantized_matmul(a, 0.02, 3, b8, b_s, 0, np.float32(0.7), i8(-3), dtype=i8)),
                (dmlq.matmul_integer(la, lb, a_z, b_z), dmlq.matmul_integer(a, b8, a_z, b_z)),
                (dmlq.matmul_integer_to_float(la, a_s, a_z, lb, b_s, b_z, dtype=np.float16),
                 dmlq.matmul_integer_to_float(a, a_s, a_z, b8, b_s, b_z, dtype=np.float16)),
                (dmlq.matmul_integer_to_float(la, a_s, a_z, lb, g_s, g_z, _chunked(b_s[0, 0], (3, 4)), block_size=5),
                 dmlq.matmul_integer_to_float(a, a_s, a_z, b8, g_s, g_z, b_s[0, 0], block_size=5)),
                (dmlq.matmul_integer_to_float(la, a_s, a_z, _chunked(b4, bc), g_s, g_z4, block_size=4),
                 dmlq.matmul_integer_to_float(a, a_s, a_z, b4, g_s, g_z4, block_size=4))):
            assert isinstance(lazy, da.Array) and lazy._meta.size == 0 and lazy.dtype == want.dtype
            _exact(_threads(lazy), want)
    # a single matrix a against a batched b (the batch comes from b), and the contract itself per matrix
    a2 = a[0, 0]
    lazy = dmlq.quantized_matmul(_chunked(a2, (2, (5, 7))), a_s, a_z, _chunked(b8, (2, (5, 7), 4)), b_s, b_z, 0.5,
                                 None)
    got = _threads(lazy)
    for i in range(nb):
        ref = np.empty((m, n), u8)
        R.quantized_matmul(a2, a_s.ravel(), a_z.ravel(), b8[i], b_s[i, 0], b_z[i, 0], np.full(m, 0.5, f32), None,
                           ref)
        _exact(got[i], ref)


# ---- the types beyond int8: per-axis and blocked scales -------------------------------------

def _bits(a):
    return a.view(np.uint8 if a.itemsize == 1 else np.int16)


def test_blocked_and_per_axis_scales_follow_x_chunks(rng):
    """Blocked scales: x is rechunked (lazily) so each chunk holds whole blocks along the
    blocked axis, and the scale and zero point are cut to the same blocks, whatever the
    chunking; per-axis (axis=) 1-D scales are cut where x's chunks fall on that axis."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (rng.standard_normal((7, 10)) * 4).astype(f32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    bf16 = np.dtype(ml_dtypes.bfloat16)
    chunkings = [(7, 10), (2, 3), (1, 1), ((3, 4), (5, 1, 4))]
    for ax, block, name in [(1, 4, "int4"), (0, 3, "float8_e4m3fn"), (1, 10, "uint2"), (0, 1, "int16")]:
        dt = np.dtype(getattr(ml_dtypes, name, None) or name)
        shape = list(x.shape)
        shape[ax] = -(-shape[ax] // block)
        scale = rng.uniform(0.05, 0.5, shape).astype(f32)
        zp = None if dt.kind == "V" else rng.integers(-1, 2, shape).astype(dt)
        if name == "float8_e4m3fn":
            zp = None
        want = np.empty(x.shape, dt)
        R.quantize_linear(x, R.expand_blocks(scale, x.shape, ax, block), R.expand_blocks(zp, x.shape, ax, block),
                          want, True, None)
        want_d = np.empty(x.shape, bf16)
        R.dequantize_linear(want, R.expand_blocks(scale, x.shape, ax, block),
                            R.expand_blocks(zp, x.shape, ax, block), want_d)
        for chunks, axis in itertools.product(chunkings, (ax, None)):
            lazy = dmlq.quantize_linear(_chunked(x, chunks), scale, zp, dtype=dt, block_size=block, axis=axis)
            assert isinstance(lazy, da.Array) and lazy.dtype == dt and lazy._meta.dtype == dt
            assert all(c % block == 0 for c in lazy.chunks[ax][:-1])  # whole blocks in each chunk
            got = _threads(lazy)
            assert got.dtype == dt
            np.testing.assert_array_equal(_bits(got), _bits(want))
            lazy_d = dmlq.dequantize_linear(_chunked(want, chunks), _chunked(scale, 2),
                                            None if zp is None else _chunked(zp, 3), block_size=block, axis=axis,
                                            dtype=bf16)
            np.testing.assert_array_equal(_bits(_threads(lazy_d)), _bits(want_d))
    s1 = rng.uniform(0.05, 0.5, (10,)).astype(f32)
    z1 = rng.integers(-8, 8, (10,)).astype(ml_dtypes.int4)
    want = np.empty(x.shape, ml_dtypes.int4)
    R.quantize_linear(x, s1.reshape(1, -1), z1.reshape(1, -1), want)
    for chunks in chunkings:
        got = _threads(dmlq.quantize_linear(_chunked(x, chunks), _chunked(s1, 3), z1, axis=1))
        np.testing.assert_array_equal(_bits(got), _bits(want))
    # saturate and precision reach every chunk's call
    want = np.empty(x.shape, ml_dtypes.float8_e5m2)
    R.quantize_linear(x, f32(1e-3), None, want, False, bf16)
    got = _threads(dmlq.quantize_linear(_chunked(x, 3), 1e-3, dtype="float8_e5m2", saturate=False, precision=bf16))
    np.testing.assert_array_equal(_bits(got), _bits(want))


# ---- laziness and errors --------------------------------------------------------------------

def _poisoned(shape, dtype, chunks):
    """A dask array that raises if any chunk is ever computed."""
    def boom(block_info=None):
        raise AssertionError("a lazy input was computed")
    return da.map_blocks(boom, dtype=dtype, chunks=chunks, meta=np.empty((0,) * len(shape), dtype))


def test_matmul_vector_operands(rng):
    a = rng.integers(0, 256, (6, 9), dtype=u8)
    v = rng.integers(-128, 128, (9,), dtype=i8)
    got = dmlq.matmul_integer(da.from_array(a, chunks=(4, 5)), da.from_array(v, chunks=4), np.uint8(2))
    assert isinstance(got, da.Array) and got.shape == (6,)
    np.testing.assert_array_equal(got.compute(), dmlq.matmul_integer(a, v, np.uint8(2)))
    got = dmlq.matmul_integer(da.from_array(a[0], chunks=4), v)
    assert got.shape == () and int(got.compute()) == int(dmlq.matmul_integer(a[0], v))


def test_packed_b_beside_dask_a(rng):
    """A dmlq.Packed b of NumPy bytes beside a dask a (its bytes were taken for a (bytes, 1)
    matrix: a K mismatch, or an IndexError inside dask); a Packed of dask bytes is refused with
    the line that computes it."""
    import ml_dtypes

    w = rng.integers(-8, 8, (40, 6)).astype(ml_dtypes.int4)
    a = rng.integers(0, 256, (9, 40), dtype=u8)
    lazy = da.from_array(a, chunks=(4, 13))
    np.testing.assert_array_equal(dmlq.matmul_integer(lazy, dmlq.pack(w)).compute(), dmlq.matmul_integer(a, w))
    got = dmlq.quantized_matmul(lazy, f32(0.1), None, dmlq.pack(w), f32(0.2), None, f32(3.0), np.int8(0))
    np.testing.assert_array_equal(got.compute(), dmlq.quantized_matmul(a, 0.1, None, w, 0.2, None, 3.0, np.int8(0)))
    p = dmlq.pack(w)
    with pytest.raises(TypeError, match=r"b is a dmlq.Packed whose data is a dask array; .* "
                                        r"dmlq.Packed\(b.data.compute\(\), b.shape, b.dtype\)"):
        dmlq.matmul_integer(a, dmlq.Packed(da.from_array(p.data, chunks=40), p.shape, p.dtype))


def test_packed_zero_point_beside_dask_x(rng):
    """A dmlq.Packed zero point (NumPy bytes) beside a dask x: it is the ml_dtypes array it stands
    for (the adapter read the Packed tuple as a ragged sequence: NumPy's ValueError)."""
    import ml_dtypes

    x = np.linspace(-3, 3, 18, dtype=f32).reshape(6, 3)
    s = np.full((6, 1), 0.5, f32)
    zp = np.array([[-2], [1], [0], [3], [-8], [7]], ml_dtypes.int4)
    want = dmlq.quantize_linear(x, s, zp)
    got = dmlq.quantize_linear(da.from_array(x, chunks=(4, 3)), s, dmlq.pack(zp))
    np.testing.assert_array_equal(got.compute(), want)
    back = dmlq.dequantize_linear(da.from_array(want, chunks=(4, 3)), s, dmlq.pack(zp))
    np.testing.assert_array_equal(back.compute(), dmlq.dequantize_linear(want, s, zp))


def test_nothing_is_computed_while_the_graph_is_built():
    x = _poisoned((6, 4), f32, ((3, 3), (4,)))
    q = _poisoned((6, 4), u8, ((2, 4), (2, 2)))
    img = _poisoned((1, 2, 8, 8), u8, ((1,), (2,), (3, 5), (8,)))
    for lazy in (dmlq.quantize_linear(x, 0.1), dmlq.dequantize_linear(q, 0.1, 3),
                 dmlq.quantized_add(q, 0.1, 0, q, 0.1, 0, 0.2),
                 dmlq.quantized_matmul(q, 0.1, 0, _poisoned((4, 3), i8, ((1, 3), (3,))), 0.1, 0, 0.2),
                 dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, 3, strides=2, ceil_mode=True),
                 dmlq.quantize_linear(x, np.ones((6, 2), f32), dtype="int4", block_size=3),
                 dmlq.dequantize_linear(q, _poisoned((4,), f32, ((1, 3),)), axis=1, dtype=np.float16)):
        assert isinstance(lazy, da.Array) and lazy._meta.size == 0
    with pytest.raises(AssertionError, match="lazy input was computed"):
        _threads(dmlq.quantize_linear(x, 0.1))


def test_errors_before_anything_runs():
    x = _poisoned((6, 4), f32, ((3, 3), (4,)))
    with pytest.raises(ValueError, match=r"quantize_linear: shapes do not broadcast: x \(6, 4\), scale \(3,\)"):
        dmlq.quantize_linear(x, np.ones(3, f32))
    with pytest.raises(TypeError, match=r"x must have dtype float32, float16 or int32 \(got float64\)"):
        dmlq.quantize_linear(x.astype(np.float64), 0.1)
    with pytest.raises(TypeError, match="out= is not taken with dask arrays"):
        dmlq.quantize_linear(x, 0.1, out=np.empty((6, 4), u8))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"scale is a torch\.Tensor but x is a dask array of numpy chunks; pass "
                                        r"scale as a numpy array \(scale\.cpu\(\)\.numpy\(\)\)"):
        dmlq.quantize_linear(x, torch.ones(4))
    img = _poisoned((1, 2, 8, 8), u8, ((1,), (2,), (3, 5), (8,)))
    with pytest.raises(TypeError, match="x_scale is a dask array"):
        dmlq.quantized_avg_pool(img, da.ones(2, dtype=f32), 0, 0.1, 0, 2)
    with pytest.raises(ValueError, match=r"b_scale must be a single value or shaped \(N,\) or \(1, N\) with N = 3 "
                                         r"\(got \(3, 1, 3\)\)"):  # per batch of another batch shape than b's
        dmlq.quantized_matmul(_poisoned((2, 6, 4), u8, ((1, 1), (6,), (4,))), 0.1, 0, np.zeros((2, 4, 3), i8),
                              np.ones((3, 1, 3), f32), 0, 0.2)
    lazy_bytes = dmlq.Packed(_poisoned((3,), u8, ((2, 1),)), (6,), "int4")
    with pytest.raises(TypeError, match=r"q is a dmlq\.Packed whose data is a dask array; .* "
                                        r"dmlq\.Packed\(q\.data\.compute\(\), q\.shape, q\.dtype\)"):
        dmlq.dequantize_linear(lazy_bytes, 0.1)
    with pytest.raises(TypeError, match=r"zero_point is a dmlq\.Packed whose data is a dask array"):
        dmlq.quantize_linear(np.ones(6, f32), 0.1, lazy_bytes)
    with pytest.raises(ValueError, match=r"block_size = 3 on axis 1 of size 4 makes ceil\(4 / 3\) = 2 blocks"):
        dmlq.quantize_linear(x, np.ones((6, 3), f32), dtype="int4", block_size=3)
    with pytest.raises(ValueError, match=r"with axis=0 \(and no block_size\), scale must be one value or 1-D"):
        dmlq.dequantize_linear(x.astype(u8), np.ones(4, f32), axis=0)
    with pytest.raises(ValueError, match="a has K = 4 columns but b has 5 rows"):
        dmlq.quantized_matmul(_poisoned((6, 4), u8, ((6,), (4,))), 0.1, 0, np.zeros((5, 2), i8), 0.1, 0, 0.2)
    # kernel_plan: a plan per chunk, never a lazy call set up in its place
    with pytest.raises(TypeError, match=r"kernel_plan: quantize_linear on dask arrays runs per chunk"):
        dmlq.kernel_plan(dmlq.quantize_linear, x, 0.1)
    # a NumPy zero point's values are on the host: checked now, under the function called (they were
    # checked in the tasks, and the K-split matmul's named matmul_integer)
    ones8 = _poisoned((6, 8), u8, ((3, 3), (4, 4)))
    with pytest.raises(ValueError, match=r"quantize_linear: zero_point holds values outside \[0, 255\]"):
        dmlq.quantize_linear(x, 0.1, np.full(4, 300), dtype=u8)
    with pytest.raises(ValueError, match=r"quantized_matmul: a_zero_point holds values outside \[0, 255\]"):
        dmlq.quantized_matmul(ones8, 0.1, np.full((6, 1), 300), _poisoned((8, 5), i8, ((4, 4), (5,))), 0.02, None,
                              0.3)
    with pytest.raises(ValueError, match=r"quantized_avg_pool: x_zero_point holds values outside \[0, 255\]"):
        dmlq.quantized_avg_pool(img, 0.1, np.full(2, 300), 0.1, 0, 2)
    with pytest.raises(TypeError, match=r"matmul_integer: a_zero_point is a dask array"):  # dask's own error before
        dmlq.matmul_integer(ones8, np.ones((8, 5), i8), da.from_array(np.full((6, 1), 3, u8), chunks=(3, 1)))


# ---- a distributed cluster of two worker processes ------------------------------------------

@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, worker_dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_distributed_cluster_every_operator(client, rng):
    x = (rng.standard_normal((9, 8)) * 3).astype(f32)
    a = rng.integers(0, 256, (9, 30), dtype=u8)
    b = rng.integers(-128, 128, (30, 8), dtype=i8)
    img = rng.integers(0, 256, (2, 2, 11, 9), dtype=u8)
    p = POOLS[1]
    a3, b3 = np.stack([a, a[::-1]]), np.stack([b, -b])
    zp3 = rng.integers(-128, 128, (2, 1, 8), dtype=i8)  # per batch and column
    lazies = [dmlq.quantize_linear(_chunked(x, (4, 3)), 0.05, 128),
              dmlq.dequantize_linear(_chunked(a, (5, 7)), np.full((1, 30), 0.5, f32), u8(3)),
              dmlq.quantized_add(_chunked(a, (2, 30)), 0.1, 7, _chunked(a, (9, 11)), 0.1, 9, 0.3),
              _mm(_chunked(a, (4, (10, 20))), _chunked(b, ((10, 20), 3)), (0.02, 1, 0.01, 0, 0.7, i8(5))),
              _pool_whole(_chunked(img, (1, 2, (3, 8), (2, 7))), 0.1, 0, 0.1, 0, p),
              dmlq.matmul_integer_to_float(_chunked(a, (4, (10, 20))), 0.02, 1, _chunked(b, ((10, 20), 3)),
                                           np.full((4, 8), 0.01, f32), None, block_size=8),
              dmlq.matmul_integer(_chunked(a3, (1, 4, (10, 20))), _chunked(b3, (1, (10, 20), 3)), None, zp3)]
    wants = [dmlq.quantize_linear(x, 0.05, 128), dmlq.dequantize_linear(a, np.full((1, 30), 0.5, f32), u8(3)),
             dmlq.quantized_add(a, 0.1, 7, a, 0.1, 9, 0.3), _mm(a, b, (0.02, 1, 0.01, 0, 0.7, i8(5))),
             _pool_whole(img, 0.1, 0, 0.1, 0, p),
             dmlq.matmul_integer_to_float(a, 0.02, 1, b, np.full((4, 8), 0.01, f32), None, block_size=8),
             dmlq.matmul_integer(a3, b3, None, zp3)]
    for got, want in zip(client.compute(lazies, sync=True), wants):
        _exact(got, want)
