"""dask.array of CuPy chunks through the public functions.

A `gpu` test: on a GPU with the real CuPy, and in CI on its stand-in twin
(tests/cupy_stand_in: CuPy arrays in host memory, the kernels' own sources run on
the host harness). Nothing of dmlq is replaced. The chunks stay CuPy arrays from
input to result (the result's ``meta`` too), and no chunk is copied to the host
while the graph is built or computed: the stand-in counts device-to-host copies and
refuses implicit conversions (``numpy.asarray``) as CuPy does. Expected values are
the public functions on whole NumPy arrays (tied to dmlq.reference by
tests/test_api.py) and dmlq.reference itself.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

da = pytest.importorskip("dask.array")

import dmlq  # noqa: E402
from dmlq import reference as R  # noqa: E402

f32, u8, i8 = np.float32, np.uint8, np.int8
pytestmark = pytest.mark.gpu


@pytest.fixture
def cp(cupy_twin):
    import cupy

    if getattr(cupy, "__stand_in__", False):
        # what dask registers for cupy.ndarray when it meets one, for the stand-in's type
        from dask.array.dispatch import concatenate_lookup

        concatenate_lookup.register(cupy.ndarray, cupy.concatenate)
    return cupy


def _on_gpu(cp, a, chunks):
    # name=False: a random name, where dask's own name would pickle the CuPy array (a download)
    return da.from_array(cp.asarray(a), chunks=chunks, asarray=False, name=False)


def _computed_equal(cp, lazies, wants):
    """Compute the lazy results with the threaded scheduler: CuPy chunks, no chunk copied to the
    host since the caller zeroed the stand-in's count (before building the graph), each equal to
    its want bit for bit."""
    import cupy_stand_in

    got = da.compute(*lazies, scheduler="threads")
    if getattr(cp, "__stand_in__", False):
        assert cupy_stand_in.counts["downloads"] == 0
    for g, want in zip(got, wants):
        assert isinstance(g, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(g), want, strict=True)


def test_every_operator_keeps_cupy_chunks_and_equals_the_whole_array(cp):
    import cupy_stand_in

    rng = np.random.default_rng(27)
    x = (rng.standard_normal((9, 8)) * 3).astype(f32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    a = rng.integers(0, 256, (9, 30), dtype=u8)
    b = rng.integers(-128, 128, (30, 8), dtype=i8)
    img = rng.integers(0, 256, (1, 2, 11, 9), dtype=u8)
    s_col = rng.uniform(0.01, 0.2, (1, 8)).astype(f32)
    z_col = rng.integers(0, 256, (1, 8), dtype=u8)
    pool = dict(window_size=(3, 2), strides=2, start_padding=1, ceil_mode=True)
    mm = (0.02, 1, 0.01, 0, 0.7, i8(5))

    def calls(x, a, b, img, arr):
        return [
            dmlq.quantize_linear(x, arr(s_col), arr(z_col)),
            dmlq.dequantize_linear(a, 0.5, u8(3)),
            dmlq.quantized_add(a, 0.1, 7, a, 0.1, 9, 0.3),
            dmlq.quantized_matmul(a, mm[0], mm[1], b, mm[2], mm[3], mm[4], mm[5]),
            dmlq.matmul_integer(a, b, u8(3), arr(rng_b_zp)),
            dmlq.matmul_integer_to_float(a, 0.5, u8(3), b, arr(b_blocks), None, block_size=7),
            dmlq.matmul_integer_to_float(a, arr(s_rows), None, b, 0.25, None, arr(bias16), dtype=bf16),
            dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, **pool),
        ]

    rng_b_zp = rng.integers(-128, 128, (8,), dtype=i8)
    b_blocks = rng.uniform(0.001, 0.01, (5, 8)).astype(f32)
    bf16 = np.dtype(ml_dtypes.bfloat16)  # scales, bias and out
    s_rows, bias16 = rng.uniform(0.001, 0.01, (9, 1)).astype(bf16), rng.uniform(-3, 3, 8).astype(bf16)
    wants = calls(x, a, b, img, lambda v: v)
    # the whole-array matmul against dmlq.reference itself
    ref = np.empty((9, 8), i8)
    R.quantized_matmul(a, f32(mm[0]), u8(mm[1]), b, f32(mm[2]), i8(mm[3]), f32(mm[4]), mm[5], ref)
    np.testing.assert_array_equal(wants[3], ref)
    for k_chunks in ((30,), (10, 20)):  # K whole (the public matmul per block) and K split (exact sums)
        cupy_stand_in.counts["downloads"] = 0
        lazies = calls(_on_gpu(cp, x, (4, 3)), _on_gpu(cp, a, (4, k_chunks)), _on_gpu(cp, b, (k_chunks, 3)),
                       _on_gpu(cp, img, (1, 1, (3, 8), (2, 7))), cp.asarray)
        for lazy, want in zip(lazies, wants):
            assert isinstance(lazy._meta, cp.ndarray) and lazy._meta.dtype == want.dtype  # meta= a CuPy array
        got = da.compute(*lazies, scheduler="threads")
        if getattr(cp, "__stand_in__", False):
            assert cupy_stand_in.counts["downloads"] == 0  # no chunk went to the host
        for g, want in zip(got, wants):
            assert isinstance(g, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(g), want, strict=True)


def test_cupy_chunks_are_checked_on_the_gpu_path_when_the_graph_is_built(cp):
    x = _on_gpu(cp, np.ones((6, 4), f32), (3, 2))
    # bfloat16 where this CuPy holds it (14 on, and the stand-in), as the one-array call gives it
    q = np.arange(24, dtype=u8).reshape(6, 4)
    bf = dmlq.dequantize_linear(_on_gpu(cp, q, 3), cp.full((6, 2), 0.3, f32), dtype="bfloat16", block_size=2)
    np.testing.assert_array_equal(cp.asnumpy(bf.compute()), dmlq.dequantize_linear(q, np.full((6, 2), 0.3, f32),
                                                                                   dtype="bfloat16", block_size=2),
                                  strict=True)
    lazy = dmlq.quantize_linear(x, cp.ones((6, 2), f32), dtype="int4", block_size=2)
    with pytest.raises(ValueError, match=r"block_size = 3 on axis 1 of size 4 makes ceil\(4 / 3\) = 2 blocks"):
        dmlq.dequantize_linear(lazy, cp.ones((6, 3), f32), block_size=3)  # checked now, on a stand-in
    with pytest.raises(TypeError, match=r"scale is a numpy\.ndarray but q is a dask array of cupy chunks"):
        dmlq.dequantize_linear(lazy, np.ones((6, 2), f32), block_size=2)
    with pytest.raises(ValueError, match=r"q is a dmlq\.Packed of 24 int4 elements .* 12 bytes"):
        dmlq.dequantize_linear(dmlq.Packed(lazy.data[:-1], lazy.shape, "int4"), cp.ones((6, 2), f32), block_size=2)
    with pytest.raises(TypeError, match=r"quantize_linear: precision must be float32, float16 or bfloat16"):
        dmlq.quantize_linear(x, cp.ones((6, 2), f32), dtype="int16", block_size=2, precision=np.int8)
    with pytest.raises(TypeError, match=r"scale is a numpy\.ndarray but x is a dask array of cupy chunks"):
        dmlq.quantize_linear(x, np.ones(4, f32))
    with pytest.raises(TypeError, match="b has numpy chunks but a has cupy chunks"):
        dmlq.quantized_add(x, 0.1, 0, da.ones((6, 4), dtype=u8), 0.1, 0, 0.2)
    # a list is host memory beside CuPy chunks, for every operator (the matmuls took it where K was
    # split and failed in a task where it was not)
    a = _on_gpu(cp, np.ones((4, 6), u8), (2, 3))
    b = cp.asarray(np.ones((6, 2), i8))
    for call, name in ((lambda: dmlq.quantized_matmul(a, 0.1, 0, b, [0.38, 0.2], 0, 0.5), "b_scale"),
                       (lambda: dmlq.matmul_integer(a, b, None, [1, 2]), "b_zero_point"),
                       (lambda: dmlq.matmul_integer_to_float(a, 0.1, 0, b, 0.2, 0, [1.0, 2.0]), "bias"),
                       (lambda: dmlq.quantize_linear(x, [0.1, 0.2, 0.3, 0.4]), "scale")):
        with pytest.raises(TypeError, match=rf"{name} is a list, host memory, but the dask arrays have CuPy chunks"):
            call()


def test_blocked_scales_on_cupy_chunks_run_the_gpu_kernels_per_block(cp):
    """The types beyond int8 that CuPy holds (int16, uint16, and int8/uint8 with blocked
    or per-axis scales): x rechunked to whole blocks, each block through
    cuda/quant_types.cu; equal to the whole NumPy array."""
    import cupy_stand_in

    rng = np.random.default_rng(28)
    x = (rng.standard_normal((7, 10)) * 300).astype(f32)
    scale = rng.uniform(0.05, 0.5, (7, 4)).astype(f32)  # blocks of 3 along axis 1: 3, 3, 3, 1
    zp = rng.integers(-5, 5, (7, 4)).astype(np.int16)
    want = dmlq.quantize_linear(x, scale, zp, block_size=3)
    want_d = dmlq.dequantize_linear(want, scale, zp, block_size=3)
    s_row = rng.uniform(0.05, 0.5, (7,)).astype(f32)
    want_axis = dmlq.quantize_linear(x, s_row, dtype=np.uint16, axis=0)
    cupy_stand_in.counts["downloads"] = 0
    cupy_stand_in.launches.clear()
    lazies = [dmlq.quantize_linear(_on_gpu(cp, x, (4, (4, 6))), cp.asarray(scale), cp.asarray(zp), block_size=3),
              dmlq.dequantize_linear(_on_gpu(cp, want, (3, 5)), cp.asarray(scale), cp.asarray(zp), block_size=3),
              dmlq.quantize_linear(_on_gpu(cp, x, (2, 5)), cp.asarray(s_row), dtype=np.uint16, axis=0)]
    got = da.compute(*lazies, scheduler="threads")
    if getattr(cp, "__stand_in__", False):
        assert cupy_stand_in.counts["downloads"] == 0
        assert len(cupy_stand_in.launches) >= 3 * 6  # a kernel per block: 6 + 6 + 8 blocks
    for g, w in zip(got, (want, want_d, want_axis)):
        assert isinstance(g, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(g), w, strict=True)


def test_per_batch_b_parameters_on_cupy_chunks(cp):
    """b_scale / b_zero_point per batch and column, CuPy arrays, cut to each block's
    matrices (K whole: the GPU matmul per block; K split: exact sums on the GPU)."""
    import cupy_stand_in

    rng = np.random.default_rng(29)
    a = rng.integers(0, 256, (2, 9, 20), dtype=u8)
    b = rng.integers(-128, 128, (2, 20, 6), dtype=i8)
    b_s = rng.uniform(0.001, 0.01, (2, 1, 6)).astype(f32)
    b_z = rng.integers(-128, 128, (2, 1, 6), dtype=i8)
    g_s = rng.uniform(0.001, 0.01, (2, 4, 6)).astype(f32)  # blocks of 5 rows of b

    def calls(a, b, arr):
        return [dmlq.quantized_matmul(a, 0.02, 3, b, arr(b_s), arr(b_z), 0.5, u8(9)),
                dmlq.matmul_integer(a, b, u8(3), arr(b_z)),
                dmlq.matmul_integer_to_float(a, 0.02, u8(3), b, arr(g_s), arr(b_z), None, block_size=5)]

    wants = calls(a, b, lambda v: v)
    for k_chunks in ((20,), (8, 12)):
        cupy_stand_in.counts["downloads"] = 0
        lazies = calls(_on_gpu(cp, a, (1, (4, 5), k_chunks)), _on_gpu(cp, b, (1, k_chunks, (2, 4))), cp.asarray)
        _computed_equal(cp, lazies, wants)


@pytest.mark.parametrize("dtype", ["int4", "uint2", "float8_e4m3fn", "float4_e2m1fn"])
def test_packed_results_are_packed_with_lazy_bytes(cp, dtype):
    """quantize_linear to a type CuPy has no dtype for: a dmlq.Packed whose data is a
    lazy 1-D dask array of uint8 CuPy chunks, byte for byte the one-array result's
    data for any chunking (x rechunked along axis 0 to whole bytes and blocks)."""
    import cupy_stand_in

    rng = np.random.default_rng(30)
    x = (rng.standard_normal((7, 5)) * 3).astype(f32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    s_col = rng.uniform(0.1, 0.5, (5,)).astype(f32)
    s_blk = rng.uniform(0.1, 0.5, (3, 5)).astype(f32)  # blocks of 3 rows along axis 0
    s_row = rng.uniform(0.1, 0.5, (7, 1)).astype(f32)  # grows a (5,) x to (7, 5)
    calls = [((x, np.float32(0.3)), {}), ((x, s_col), {}), ((x, s_col), dict(axis=1)),
             ((x, s_blk), dict(block_size=3)), ((x[0], s_row), {}), ((x[0, 0], np.float32(0.3)), {}),
             ((x[:0], np.float32(0.3)), {})]
    for (xv, sv), kw in calls:
        want = dmlq.quantize_linear(cp.asarray(xv), cp.asarray(sv), dtype=dtype, **kw)
        chunkings = [()] if xv.ndim == 0 else [((1,) * 5,), ((2, 3),)] if xv.ndim == 1 else \
            [((1,) * len(xv) or (0,), (2, 3)), ((2, 2, 3) if len(xv) else (0,), (5,))]
        for chunks in chunkings:
            cupy_stand_in.counts["downloads"] = 0
            lazy = dmlq.quantize_linear(_on_gpu(cp, xv, chunks), cp.asarray(sv), dtype=dtype, **kw)
            assert isinstance(lazy, dmlq.Packed) and (lazy.shape, lazy.dtype) == (want.shape, want.dtype)
            assert isinstance(lazy.data, da.Array) and isinstance(lazy.data._meta, cp.ndarray)
            assert lazy.data.dtype == u8 and lazy.data.shape == want.data.shape
            got = lazy.data.compute(scheduler="threads")
            if getattr(cp, "__stand_in__", False):
                assert cupy_stand_in.counts["downloads"] == 0
            assert isinstance(got, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want.data), strict=True)
            # and back, lazily: the lazy Packed dequantized chunk-wise, as the one-array Packed
            back = dmlq.dequantize_linear(lazy, cp.asarray(sv), **kw)
            want_back = dmlq.dequantize_linear(want, cp.asarray(sv), **kw)
            assert isinstance(back, da.Array) and isinstance(back._meta, cp.ndarray) and back.shape == want_back.shape
            cupy_stand_in.counts["downloads"] = 0
            got_back = back.compute(scheduler="threads")
            if getattr(cp, "__stand_in__", False):
                assert cupy_stand_in.counts["downloads"] == 0
            np.testing.assert_array_equal(cp.asnumpy(got_back), cp.asnumpy(want_back), strict=True)
    # bytes of any chunking (a Packed made by hand): rechunked to whole rows, blocks along axis 0
    want = dmlq.quantize_linear(cp.asarray(x), cp.asarray(s_blk), dtype=dtype, block_size=3)
    for byte_chunks in (1, 3, 7):
        lazy = dmlq.Packed(da.from_array(want.data, chunks=byte_chunks, asarray=False), want.shape, want.dtype)
        back = dmlq.dequantize_linear(lazy, cp.asarray(s_blk), block_size=3, dtype=np.float16)
        np.testing.assert_array_equal(cp.asnumpy(back.compute(scheduler="threads")),
                                      cp.asnumpy(dmlq.dequantize_linear(want, cp.asarray(s_blk), block_size=3,
                                                                        dtype=np.float16)), strict=True)
    # and the NumPy path's values: the lazy bytes unpack to the whole NumPy array's result
    lazy = dmlq.quantize_linear(_on_gpu(cp, x, ((3, 4), (5,))), cp.asarray(s_blk), dtype=dtype, block_size=3)
    data = lazy.data.compute(scheduler="threads")
    got = dmlq.unpack(dmlq.Packed(cp.asnumpy(data), lazy.shape, lazy.dtype))
    want = dmlq.quantize_linear(x, s_blk, dtype=dtype, block_size=3)
    np.testing.assert_array_equal(got.view(u8), want.view(u8), strict=True)


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_packed_4bit_b_on_cupy_chunks_goes_whole_to_each_block(cp, dtype):
    """A dmlq.Packed b (and b_zero_point) of CuPy bytes beside a dask a of CuPy chunks: the
    bytes go whole to every M block's GPU call (the kernels read b packed); a's K and
    batch are merged to one chunk lazily; per-row A parameters and a dask bias are cut
    along M. Every result equals the one-array NumPy call."""
    import cupy_stand_in
    import ml_dtypes

    rng = np.random.default_rng(30)
    q = np.dtype(getattr(ml_dtypes, dtype))
    lo, hi = int(ml_dtypes.iinfo(q).min), int(ml_dtypes.iinfo(q).max) + 1
    a = rng.integers(0, 256, (2, 5, 37), dtype=u8)  # odd K: the last byte of each ... row pair is shared
    b = dmlq.pack(rng.integers(lo, hi, (2, 37, 7)).astype(q))
    b_zp = dmlq.pack(rng.integers(lo, hi, (7,)).astype(q))
    a_s = rng.uniform(0.5, 1.5, (5, 1)).astype(f32)
    a_z = rng.integers(0, 256, (5, 1), dtype=u8)
    b_s, g_s = rng.uniform(0.001, 0.01, (7,)).astype(f32), rng.uniform(0.001, 0.01, (2, 7)).astype(f32)
    bias = rng.standard_normal((5, 7)).astype(f32)

    def calls(a, b, b_zp, arr, bias):
        return [dmlq.matmul_integer(a, b, u8(3), b_zp),
                dmlq.matmul_integer_to_float(a, arr(a_s), arr(a_z), b, arr(b_s), b_zp, bias),
                dmlq.matmul_integer_to_float(a[0], 0.1, None, b, arr(g_s), None, None, block_size=32,
                                             dtype=np.float16),
                dmlq.quantized_matmul(a, arr(a_s), 128, b, arr(b_s), b_zp, 3.0, i8(-2))]

    wants = calls(a, b, b_zp, lambda v: v, bias)
    on_gpu = (lambda p: dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype))
    cupy_stand_in.counts["downloads"] = 0
    lazies = calls(_on_gpu(cp, a, (1, (2, 3), (20, 17))), on_gpu(b), on_gpu(b_zp), cp.asarray,
                   _on_gpu(cp, bias, (3, 7)))
    for lazy, want in zip(lazies, wants):
        assert isinstance(lazy._meta, cp.ndarray) and lazy._meta.dtype == want.dtype
        assert lazy.chunks[-2] == (2, 3) and lazy.chunks[-1] == (7,)  # cut along M only
    _computed_equal(cp, lazies, wants)
    with pytest.raises(TypeError, match=r"b_scale is a dask array"):
        dmlq.matmul_integer_to_float(_on_gpu(cp, a, 5), 0.1, None, on_gpu(b), da.from_array(cp.asarray(b_s)), None)
    with pytest.raises(TypeError, match=r"b is a dmlq\.Packed of numpy bytes but a is a dask array of cupy chunks; "
                                        r"pass dmlq\.Packed\(cupy\.asarray\(b\.data\)"):
        dmlq.matmul_integer(_on_gpu(cp, a, 5), b)
    with pytest.raises(TypeError, match=r"b is a dmlq\.Packed of cupy bytes but a is a dask array of numpy chunks"):
        dmlq.matmul_integer(da.from_array(a, 5), on_gpu(b))


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_packed_4bit_b_held_kmajor_on_dask_chunks(cp, dtype):
    """A transposed dmlq.Packed b (``dmlq.pack(w).mT`` of an (N, K) weight: torch's Linear and
    MatMulNBits' layout), its rows whole or padded past K with other codes as MatMulNBits pads
    them, and MatMulNBits' (N, groups) zero points as their .mT: beside a dask a of CuPy chunks
    the bytes go whole to every M block's GPU call (read K-major there), beside NumPy chunks they
    are the transposed values. Each result equals the one-array NumPy call; nothing is copied to
    the host while the CuPy graph is built and computed. Bytes of the other library are refused
    with the line that fixes them."""
    import cupy_stand_in
    import ml_dtypes

    rng = np.random.default_rng(31)
    q = np.dtype(getattr(ml_dtypes, dtype))
    lo, hi = int(ml_dtypes.iinfo(q).min), int(ml_dtypes.iinfo(q).max) + 1
    K, N, L = 45, 7, 64  # K off the groups of 32 and odd (a column's last byte half past K)
    a = rng.integers(0, 256, (5, K), dtype=u8)
    w = rng.integers(lo, hi, (N, L)).astype(q)  # codes past K in the padded rows: never read
    a_s, b_s = rng.uniform(0.5, 1.5, (5, 1)).astype(f32), rng.uniform(0.001, 0.01, (N,)).astype(f32)
    g_s = rng.uniform(0.001, 0.01, (2, N)).astype(f32)
    zp_codes = rng.integers(lo, hi, (N, 2)).astype(q)
    whole = dmlq.pack(np.ascontiguousarray(w[:, :K])).mT
    padded = dmlq.pack(w).mT[:K]
    zp = dmlq.pack(zp_codes).mT
    assert whole.shape == padded.shape == (K, N) and zp.shape == (2, N)

    def calls(a, b, zp, arr):
        return [dmlq.matmul_integer(a, b, u8(3), None),
                dmlq.matmul_integer_to_float(a, 0.1, None, b, arr(g_s), zp, None, block_size=32, dtype=np.float16),
                dmlq.quantized_matmul(a, arr(a_s), 128, b, arr(b_s), None, 3.0, i8(-2))]

    def on_gpu(t):
        return dmlq.Packed(cp.asarray(t.data), t.packed.shape, t.dtype).mT[:t.shape[0]]

    for b in (whole, padded):
        wants = calls(a, b, zp, lambda v: v)
        for want, ref in zip(wants, calls(a, dmlq.unpack(b), zp_codes.T, lambda v: v)):
            np.testing.assert_array_equal(want, ref, strict=True)  # the .mT forms: the values they stand for
        cupy_stand_in.counts["downloads"] = 0
        lazies = calls(_on_gpu(cp, a, ((2, 3), (20, 25))), on_gpu(b), on_gpu(zp), cp.asarray)
        for lazy, want in zip(lazies, wants):
            assert isinstance(lazy._meta, cp.ndarray) and lazy._meta.dtype == want.dtype
            assert lazy.chunks == ((2, 3), (N,))  # cut along M only
        _computed_equal(cp, lazies, wants)
        host = calls(da.from_array(a, ((2, 3), (20, 25))), b, zp, lambda v: v)
        for got, want in zip(da.compute(*host, scheduler="threads"), wants):
            np.testing.assert_array_equal(got, want, strict=True)
    with pytest.raises(TypeError, match=r"b is a transposed dmlq\.Packed \(\.mT\) of numpy bytes but a is a dask "
                                        r"array of cupy chunks; pass dmlq\.Packed\(cupy\.asarray\(b\.data\), "
                                        r"b\.packed\.shape, b\.dtype\)\.mT"):
        dmlq.matmul_integer(_on_gpu(cp, a, 5), whole)
    with pytest.raises(TypeError, match=r"b is a transposed dmlq\.Packed \(\.mT\) of cupy bytes but a is a dask "
                                        r"array of numpy chunks"):
        dmlq.matmul_integer(da.from_array(a, 5), on_gpu(whole))


def test_a_packed_q_of_bytes_beside_dask_scales(cp):
    """dequantize_linear of a dmlq.Packed q whose bytes are NumPy or CuPy arrays (not lazy) with a
    dask scale: NumPy bytes beside NumPy chunks are the ml_dtypes array they stand for, CuPy bytes
    beside CuPy chunks one chunk of lazy bytes (dmlq.packed_dask); each library beside the other's
    chunks is named with the fix. (Both took the bytes for lazy ones: a false TypeError, and an
    AttributeError.)"""
    import ml_dtypes

    q = np.array([[1, -2, 3, 4], [-8, 7, 0, 5]], ml_dtypes.int4)
    scale = np.full((2, 2), 0.5, f32)
    want = dmlq.dequantize_linear(q, scale, block_size=2)
    p = dmlq.pack(q)
    p_gpu = dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)
    on_host, on_gpu = da.from_array(scale, chunks=1), _on_gpu(cp, scale, 1)
    np.testing.assert_array_equal(dmlq.dequantize_linear(p, on_host, block_size=2).compute(), want, strict=True)
    got = dmlq.dequantize_linear(p_gpu, on_gpu, block_size=2).compute(scheduler="threads")
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), want, strict=True)
    with pytest.raises(TypeError, match=r"q is a dmlq\.Packed of cupy bytes but scale is a dask array of numpy"):
        dmlq.dequantize_linear(p_gpu, on_host, block_size=2)
    with pytest.raises(TypeError, match=r"q is a dmlq\.Packed of numpy bytes but scale is a dask array of cupy"):
        dmlq.dequantize_linear(p, on_gpu, block_size=2)


def test_empty_operands_keep_cupy_chunks_where_they_are_rechunked(cp):
    """An empty dask operand of CuPy chunks (a dimension of size 0) that dmlq rechunks: dask's
    rechunk of an array of size 0 builds da.empty, NumPy chunks and meta. A result of NumPy
    meta and chunks came back (chunks of length 0 merged, pooling's halo merge), or a task met
    a NumPy operand beside CuPy ones (a TypeError on compute: an operand cut where another's
    chunks fall, block scales, b's K or batch cut where a's fall). Every result is what the
    eager CuPy call gives: CuPy chunks, CuPy meta, its shape and dtype."""
    import dask
    import cupy_stand_in

    e = (lambda shape, dtype: np.zeros(shape, dtype))
    ones = (lambda shape, dtype: np.ones(shape, dtype))
    cases = [  # (call, operands, their chunks)
        (lambda x: dmlq.quantize_linear(x, f32(0.5), u8(3)), [e((0, 5), f32)], [((0, 0), (2, 3))]),
        (lambda x: dmlq.quantize_linear(x, f32(0.5)), [e((4, 0), f32)], [((2, 0, 2), (0,))]),
        (lambda q: dmlq.dequantize_linear(q, f32(0.5)), [e((0, 5), u8)], [((0, 0), (5,))]),
        (lambda x, s: dmlq.quantize_linear(x, s), [e((0, 5), f32), e((0, 5), f32)], [((0,), (5,)), ((0,), (2, 3))]),
        (lambda x: dmlq.quantize_linear(x, cp.full((0, 2), 0.5, f32), block_size=2, dtype=np.int16),
         [e((0, 4), f32)], [((0,), (2, 2))]),
        (lambda q: dmlq.dequantize_linear(q, cp.full((0, 2), 0.5, f32), block_size=2), [e((0, 4), u8)],
         [((0,), (1, 3))]),
        (lambda a, b: dmlq.quantized_add(a, 0.1, 1, b, 0.1, 2, 0.2), [e((0, 4), u8), e((0, 4), u8)],
         [((0,), (2, 2)), ((0,), (4,))]),
        (lambda a, b: dmlq.quantized_add(a, 0.1, 1, b, 0.1, 2, 0.2), [ones((1, 4), u8), e((0, 4), u8)],
         [((1,), (1, 3)), ((0,), (2, 2))]),  # an empty b beside a non-empty a, broadcast
        (lambda x: dmlq.quantized_avg_pool(x, 0.1, 0, 0.1, 0, 4), [e((0, 2, 5, 5), u8)],
         [((0,), (1, 1), (2, 3), (5,))]),  # spatial chunks merged for the halo
        (lambda x: dmlq.quantized_avg_pool(x, 0.1, 0, 0.1, 0, 3), [e((1, 0, 6, 6), u8)],
         [((1,), (0,), (1, 2, 3), (6,))]),
        (lambda a, b: dmlq.quantized_matmul(a, 0.1, 1, b, 0.1, 0, 0.5), [ones((4, 6), u8), e((6, 0), i8)],
         [((2, 2), (3, 3)), ((6,), (0,))]),  # an empty b cut where a's K falls
        (lambda a, b: dmlq.matmul_integer(a, b), [ones((4, 6), u8), e((6, 0), i8)], [((2, 2), (3, 3)), ((6,), (0,))]),
        (lambda a, b: dmlq.matmul_integer(a, b), [ones((2, 4, 6), u8), e((2, 6, 0), i8)],
         [((1, 1), (2, 2), (3, 3)), ((2,), (6,), (0,))]),
        (lambda a, b: dmlq.matmul_integer(a, b), [e((0, 4, 6), u8), ones((1, 6, 3), i8)],
         [((0,), (2, 2), (3, 3)), ((1,), (6,), (3,))]),  # b broadcast to an empty batch
        (lambda a, b: dmlq.matmul_integer(a, b), [e((4, 0), u8), e((0, 3), i8)], [((2, 2), (0,)), ((0, 0), (3,))]),
        (lambda a, b: dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.2, None), [ones((4, 6), u8), e((6, 0), i8)],
         [((2, 2), (3, 3)), ((6,), (0,))]),
        (lambda a, b, c: dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.2, None, c),
         [e((0, 6), u8), ones((6, 3), i8), ones((0, 3), f32)], [((0,), (3, 3)), ((3, 3), (1, 2)), ((0,), (3,))]),
    ]
    for call, operands, chunks in cases:
        want = call(*(cp.asarray(v) for v in operands))
        assert isinstance(want, cp.ndarray)
        want_host = cp.asnumpy(want)
        cupy_stand_in.counts["downloads"] = 0
        lazies = [_on_gpu(cp, v, c) for v, c in zip(operands, chunks)]
        lazy = call(*lazies)
        assert (lazy.shape, lazy.dtype) == (want.shape, want.dtype)
        assert isinstance(lazy._meta, cp.ndarray) and lazy._meta.dtype == want.dtype  # before compute
        assert call(*lazies).name == lazy.name  # (the empty arrays' names are deterministic)
        blocks = dask.compute(*lazy.to_delayed().ravel(), scheduler="threads")
        assert all(isinstance(b, cp.ndarray) for b in blocks), [type(b) for b in blocks]
        _computed_equal(cp, [lazy], [want_host])


@pytest.mark.parametrize("bias", [0.5, -3, np.float32(0.75), np.float16(-1.5)])
def test_a_number_bias_beside_cupy_chunks(cp, bias):
    """matmul_integer_to_float's bias as a Python number or a NumPy scalar beside dask arrays of
    CuPy chunks, b a dask array and a packed 4-bit b of CuPy bytes: a Python number was cut to
    the output's chunks as if an array (AttributeError), a NumPy scalar beside a packed b became a
    NumPy block, which each block's GPU call refused as mixed NumPy and GPU arrays (on compute)."""
    import ml_dtypes

    rng = np.random.default_rng(31)
    a = rng.integers(0, 256, (5, 8), dtype=u8)
    b8 = rng.integers(-128, 128, (8, 3), dtype=i8)
    b4 = rng.integers(-8, 8, (8, 3)).astype(ml_dtypes.int4)
    p = dmlq.pack(b4)
    wants = [dmlq.matmul_integer_to_float(a, 0.1, u8(3), b, 0.2, None, bias) for b in (b8, b4)]
    lazies = [dmlq.matmul_integer_to_float(_on_gpu(cp, a, (2, 3)), 0.1, u8(3), b, 0.2, None, bias)
              for b in (_on_gpu(cp, b8, (3, 2)), dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype))]
    for lazy, want in zip(lazies, wants):
        assert isinstance(lazy._meta, cp.ndarray) and (lazy.shape, lazy.dtype) == (want.shape, want.dtype)
    import cupy_stand_in

    cupy_stand_in.counts["downloads"] = 0
    _computed_equal(cp, lazies, wants)


def test_cupy_graphs_are_named_after_the_public_function(cp):
    """CuPy chunks: every layer dmlq makes is named after the call (the packed bytes, the
    packed rows dequantized, a packed b's blocks, pooling, the parameters of
    dynamic_quantize_linear), and every result's meta is a CuPy array of its dtype. Nothing is
    computed, and no operand is copied to the host to be named: the same call twice gives the
    same names where its operands are dask arrays and numbers, and new ones where a CuPy array
    is among them (dmlq.dask_tokens: dask would pickle it, which CuPy does by downloading it)."""
    import cupy_stand_in

    rng = np.random.default_rng(31)
    x = _on_gpu(cp, rng.standard_normal((6, 8)).astype(f32), (3, 4))
    a = _on_gpu(cp, rng.integers(0, 256, (6, 8), dtype=u8), (3, 8))
    img = _on_gpu(cp, rng.integers(0, 256, (1, 2, 6, 6), dtype=u8), (1, 1, 3, 3))
    b4 = dmlq.pack(rng.integers(-8, 8, (8, 5)).astype(np.dtype("int4")))
    b4 = dmlq.Packed(cp.asarray(b4.data), b4.shape, b4.dtype)
    s = cp.asarray(np.full(8, 0.1, f32))
    inputs = {n for v in (x, a, img) for n in v.dask.layers}

    def calls():
        p = dmlq.quantize_linear(x, s, dtype="int4")
        return {"quantize_linear": [p.data, dmlq.quantize_linear(x, 0.1, u8(3))],
                "dequantize_linear": [dmlq.dequantize_linear(p, s)],
                "quantized_add": [dmlq.quantized_add(a, 0.1, 3, a, 0.2, 3, 0.3, u8(3))],
                "quantized_avg_pool": [dmlq.quantized_avg_pool(img, 0.1, 3, 0.1, 3, 2)],
                "matmul_integer": [dmlq.matmul_integer(a, b4)],
                "matmul_integer_to_float": [dmlq.matmul_integer_to_float(a, 0.1, None, b4, 0.2, None)],
                "quantized_matmul": [dmlq.quantized_matmul(a, 0.1, 3, b4, 0.2, None, 0.3, u8(3))],
                "dynamic_quantize_linear": list(dmlq.dynamic_quantize_linear(x))[1:]}

    cupy_stand_in.counts["downloads"] = 0
    first, again = calls(), calls()
    if getattr(cp, "__stand_in__", False):
        assert cupy_stand_in.counts["downloads"] == 0
    with_device_operand = {("quantize_linear", 0), ("dequantize_linear", 0), ("matmul_integer", 0),
                           ("matmul_integer_to_float", 0), ("quantized_matmul", 0)}
    for fname, results in first.items():
        for i, (r, r2) in enumerate(zip(results, again[fname])):
            assert r.name.startswith(fname + "-"), (fname, r.name)
            assert (r.name == r2.name) != ((fname, i) in with_device_operand), (fname, i, r.name, r2.name)
            assert isinstance(r._meta, cp.ndarray) and r._meta.dtype == r.dtype
            for layer in r.dask.layers:
                assert layer in inputs or layer.startswith((fname + "-", "quantize_linear-", "array-", "rechunk-",
                                                            "original-array-", "overlap-")), (fname, layer)
    assert first["matmul_integer"][0].name.startswith("matmul_integer-packed-b-")


def test_dmlq_names_cupy_arrays_only_while_it_builds_a_graph(cp):
    """dmlq.dask_tokens registers its rule for the CuPy array type, and the rule is dask's own
    (or the user's) outside dmlq's calls: dask.base.tokenize of a CuPy array after a dmlq graph
    is built is what it was before (by value, so equal arrays share it), and a rule the user
    registered for the type before is the one their own tokenize calls still get."""
    from dask.base import normalize_token, tokenize

    if getattr(cp, "__stand_in__", False):
        import cupy_stand_in

        cupy_stand_in.counts["downloads"] = 0
    v, same = cp.asarray(np.arange(6, dtype=f32)), cp.asarray(np.arange(6, dtype=f32))
    before = tokenize(v)
    if getattr(cp, "__stand_in__", False):
        assert cupy_stand_in.counts["downloads"] > 0  # dask pickles it, the stand-in as CuPy (a copy to the host)
    x = _on_gpu(cp, np.ones((4, 6), f32), (2, 3))
    lazy = dmlq.quantize_linear(x, v, axis=1)
    assert tokenize(v) == before == tokenize(same) != tokenize(cp.asarray(np.arange(1, 7, dtype=f32)))
    np.testing.assert_array_equal(cp.asnumpy(lazy.compute()), dmlq.quantize_linear(np.ones((4, 6), f32),
                                                                                   np.arange(6, dtype=f32), axis=1))
    held = normalize_token._lookup.pop(cp.ndarray, None)
    try:
        normalize_token.register(cp.ndarray, lambda a: ("mine", a.shape))
        dmlq.quantize_linear(x, v, axis=1)  # registers dmlq's rule over the user's, which it calls outside
        assert tokenize(v) == tokenize(cp.zeros(6, f32)) != tokenize(cp.zeros(5, f32))  # the user's rule
        assert dmlq.quantize_linear(x, v, axis=1).name != dmlq.quantize_linear(x, v, axis=1).name
    finally:
        normalize_token._lookup.pop(cp.ndarray, None)
        if held is not None:
            normalize_token._lookup[cp.ndarray] = held
