"""dmlq.cpu where its own structure could break it: sizes around its chunk, tile
and K-chunk sizes, strided, transposed and broadcast operands, per-axis
parameters, size 0, the thread count, its fallback to the reference, and its
memory (tracemalloc: the peak of a call stays below the output plus a fixed
workspace, whatever the size of the inputs).

Every result is compared bit for bit with dmlq.reference (host_backends.CheckedCPU);
matmul's extreme-value cases also with the exact int64 product.
"""
from __future__ import annotations

import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import dmlq
import host_backends
from conftest import poison
from dmlq import cpu
from dmlq import reference as R
from dmlq.cpu import matmul as cpu_matmul
from dmlq.cpu import pool as cpu_pool
from dmlq.cpu import tiles

C = host_backends.CheckedCPU(tiled=True)  # every matmul on the tiles, the small ones too
I8, U8, F16, F32 = (np.dtype(t) for t in ("int8", "uint8", "float16", "float32"))
CHUNK = tiles.CHUNK


def qrand(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def layouts(a):
    """The same values as C order, Fortran order, a reversed view and a strided view."""
    big = np.empty(tuple(2 * n for n in a.shape), a.dtype)
    strided = big[tuple(slice(None, None, 2) for _ in a.shape)]
    strided[...] = a
    return [a, np.asfortranarray(a), np.ascontiguousarray(a[::-1])[::-1], strided]


# ---- element-wise: sizes around the chunk, layouts, broadcasting -----------------

SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 3]
SHAPES_2D = [(3, CHUNK // 3 + 1), (CHUNK + 5, 1), (1, CHUNK + 5), (2, CHUNK + 1), (CHUNK // 7 + 1, 7)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("xdt", [F32, F16, np.dtype(np.int32)])
def test_quantize_sizes_around_the_chunk(n, xdt, rng):
    x = (rng.standard_normal(n) * 200).astype(xdt)
    x[::97] = np.nan if xdt.kind == "f" else 7
    s = np.array([0.37], F16 if xdt == F16 else F32)
    for odt, zp in ((U8, np.array([131], U8)), (I8, None), (I8, np.array([-3], I8))):
        C.quantize_linear(x, s, zp, poison(np.empty(n, odt)))


@pytest.mark.parametrize("shape", SHAPES_2D)
def test_elementwise_layouts_and_per_axis_params(shape, rng):
    x = (rng.standard_normal(shape) * 100).astype(F32)
    row_scale = rng.uniform(0.1, 2, (1, shape[1])).astype(F32)
    col_zp = qrand(rng, U8, (shape[0], 1))
    q = qrand(rng, I8, shape)
    for xl in layouts(x):
        out = poison(np.empty(shape, U8))
        C.quantize_linear(xl, row_scale, col_zp, out)
        C.quantize_linear(xl, np.broadcast_to(row_scale, shape), None, poison(np.empty(shape, U8).T).T)
    for ql in layouts(q):
        C.dequantize_linear(ql, row_scale, qrand(rng, I8, (shape[0], 1)), poison(np.empty(shape, F32)))
        C.dequantize_linear(ql, row_scale.astype(F16), None, poison(np.empty(shape, F16)))
        C.quantized_add(ql, np.float32([0.03]), np.int8([5]), qrand(rng, U8, (1, shape[1])),
                        np.float32([0.02]), np.uint8([200]), np.float32([0.05]), np.int8([-7]),
                        poison(np.empty(shape, I8)))


@pytest.mark.parametrize("qdt", ["int8", "uint8", "int16", "uint16", "int32", "uint32"])
def test_dequantize_every_input_type_across_chunks(qdt, rng):
    q = qrand(rng, np.dtype(qdt), 2 * CHUNK + 11)
    zp = qrand(rng, np.dtype(qdt), 1)
    per_element_zp = qrand(rng, np.dtype(qdt), q.shape)
    for sdt in (F32, F16):
        s = np.array([3e-3], sdt)
        C.dequantize_linear(q, s, zp, poison(np.empty(q.shape, sdt)))
        C.dequantize_linear(q, s, per_element_zp, poison(np.empty(q.shape, sdt)))


def test_zero_d_and_size_one_broadcast():
    for x in (np.float32(2.5), np.full((1, 1, 1), -2.5, F32)):
        C.quantize_linear(np.asarray(x), np.array(1.0, F32), np.array(0, I8), np.empty(np.shape(x), I8))
    C.quantized_add(np.uint8([[200]]), np.float32([1]), None, np.uint8([100]), np.float32([1]), None,
                    np.float32([1]), None, np.empty((1, 1), U8))


def test_results_do_not_depend_on_the_thread_count(rng, monkeypatch):
    x = (rng.standard_normal(5 * CHUNK + 1) * 100).astype(F32)
    a, b = qrand(rng, U8, (40, 700)), qrand(rng, I8, (700, 1100))
    want_q = R.quantize_linear(x, np.float32([0.5]), None, np.empty(x.shape, I8))
    want_m = R.quantized_matmul(a, np.float32([0.1]), np.uint8([3]), b, np.float32([0.1]), None,
                                np.float32([40.0]), None, np.empty((40, 1100), I8))
    for threads in (1, 2, 5):
        monkeypatch.setattr(tiles, "THREADS", threads)
        assert np.array_equal(cpu.quantize_linear(x, np.float32([0.5]), None, np.empty(x.shape, I8)), want_q)
        got = cpu.quantized_matmul(a, np.float32([0.1]), np.uint8([3]), b, np.float32([0.1]), None,
                                   np.float32([40.0]), None, np.empty((40, 1100), I8))
        assert np.array_equal(got, want_m)


def test_threads_share_the_pieces_out_as_they_go(monkeypatch):
    """A thread held up on one piece (as by a busy machine) does not hold the rest of
    the call: the other thread takes every other piece. With a fixed share per thread
    the held-up piece's share would wait for it, and this would time out."""
    import threading

    monkeypatch.setattr(tiles, "THREADS", 2)
    pieces, done, others_done = list(range(40)), [], threading.Event()
    lock = threading.Lock()

    def work(group):
        for p in group:
            if p == 0:
                assert others_done.wait(30), "the other pieces waited for the held-up one"
            with lock:
                done.append(p)
                if len(done) == len(pieces) - 1 and 0 not in done:
                    others_done.set()

    tiles.run_pieces(work, pieces)
    assert sorted(done) == pieces and done[-1] == 0


def test_overlapping_out_goes_through_a_temporary():
    buf = np.arange(2 * CHUNK + 9, dtype=np.int64).astype(U8)
    want = R.quantized_add(buf, np.float32([1]), None, buf[::-1], np.float32([1]), None, np.float32([1]), None,
                           np.empty(buf.shape, U8))
    got = cpu.quantized_add(buf, np.float32([1]), None, buf[::-1], np.float32([1]), None, np.float32([1]),
                            None, buf)
    assert got is buf and np.array_equal(buf, want)


def test_what_it_does_not_implement_goes_to_the_reference():
    x = np.linspace(-1000, 1000, 11, dtype=F32)
    got = cpu.quantize_linear(x, np.float32([1.0]), None, np.empty(11, np.int16))  # no int16 output here
    assert np.array_equal(got, R.quantize_linear(x, np.float32([1.0]), None, np.empty(11, np.int16)))
    assert cpu.round_saturate is R.round_saturate          # any other name of the interface
    with pytest.raises(AttributeError):
        cpu.no_such_function


def test_the_public_functions_run_on_it():
    from dmlq import dispatch

    assert dispatch.backend(dispatch.HOST) is cpu
    x = np.linspace(-3, 3, 2 * CHUNK + 1, dtype=F32)
    assert np.array_equal(dmlq.quantize_linear(x, 0.01, np.int8(3)),
                          R.quantize_linear(x, np.float32(0.01), np.int8(3), np.empty(x.shape, I8)))


# ---- matmul: K around the K-chunk, tiles, extremes, batches ---------------------

PAIRS = [(U8, U8), (U8, I8), (I8, U8), (I8, I8)]


def extreme(dtype, shape, high):
    info = np.iinfo(dtype)
    return np.full(shape, info.max if high else info.min, dtype)


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_matmul_k_around_the_k_chunk_at_extreme_values(ta, tb):
    kc = cpu_matmul.k_chunk(ta, tb)
    assert kc * (255 if ta == U8 else 128) * (255 if tb == U8 else 128) <= 2**24
    for k in (kc - 1, kc, kc + 1, 2 * kc + 1):
        for a_high, b_high in ((True, True), (False, False), (True, False)):
            a, b = extreme(ta, (3, k), a_high), extreme(tb, (k, 5), b_high)
            acc = a.astype(np.int64) @ b.astype(np.int64)
            # out_scale so large products land in range: t = acc * 2**-20 exactly
            out = C.quantized_matmul(a, np.float32([1.0]), None, b, np.float32([2.0**-20]), None,
                                     np.float32([1.0]), None, poison(np.empty((3, 5), I8)))
            assert np.array_equal(out, np.clip(np.rint(acc * 2.0**-20), -128, 127).astype(I8))
            # zero points at the other extreme: every product at its largest magnitude
            azp, bzp = extreme(ta, 1, not a_high), extreme(tb, 1, not b_high)
            C.quantized_matmul(a, np.float32([1.0]), azp, b, np.float32([2.0**-24]), bzp,
                               np.float32([1.0]), None, poison(np.empty((3, 5), I8)))


@pytest.mark.parametrize("m,k,n", [(cpu_matmul.TILE_M + 1, 70, cpu_matmul.TILE_N + 3),
                                   (cpu_matmul.SKINNY_M, 300, 2100),
                                   (cpu_matmul.SKINNY_M + 1, 1030, 9), (1, 1, 1), (7, 0, 4), (0, 5, 3)])
@pytest.mark.parametrize("ta,tb", PAIRS)
def test_matmul_tile_edges_per_axis_params(m, k, n, ta, tb, rng):
    a, b = qrand(rng, ta, (m, k)), qrand(rng, tb, (k, n))
    scale = k * 60.0 + 1
    params = [
        (np.float32([0.02]), None, np.float32([0.05]), None, np.float32([scale * 1e-3]), None),
        (rng.uniform(0.01, 0.1, m).astype(F32), qrand(rng, ta, m), rng.uniform(0.01, 0.1, n).astype(F32),
         qrand(rng, tb, n), rng.uniform(1, 3, m).astype(F32) * np.float32(scale * 1e-3), qrand(rng, I8, m)),
        (np.float32([0.02]), qrand(rng, ta, 1), np.float32([0.05]), qrand(rng, tb, 1),
         np.float32([scale * 1e-3]), np.int8([9])),
    ]
    for a_s, a_zp, b_s, b_zp, o_s, o_zp in params:
        for al, bl in ((a, b), (np.asfortranarray(a), np.asfortranarray(b)), layouts(a)[3:] + layouts(b)[3:]):
            C.quantized_matmul(al, a_s, a_zp, bl, b_s, b_zp, o_s, o_zp, poison(np.empty((m, n), I8)))


def test_matmul_batches_broadcast_and_strided_out(rng):
    a = qrand(rng, U8, (2, 1, 33, 300))
    b = np.broadcast_to(qrand(rng, I8, (1, 3, 300, 70)), (2, 3, 300, 70))
    big = poison(np.empty((2, 3, 66, 140), U8))
    C.quantized_matmul(a, np.float32([0.01]), np.uint8([120]), b.transpose(0, 1, 3, 2).transpose(0, 1, 3, 2),
                       np.float32([0.02]), None, np.float32([0.5]), np.uint8([128]), big[:, :, ::2, ::2])
    rest = np.ones(big.shape, bool)
    rest[:, :, ::2, ::2] = False
    assert (big[rest] == 0xA5).all()


def test_matmul_per_batch_b_parameters(rng):
    # b_scale / b_zero_point of shape batch + (1, N) (or (1, 1)), broadcasting over the batch
    a = qrand(rng, U8, (2, 3, 20, 300))
    b = qrand(rng, I8, (3, 300, 600))
    for b_s, b_zp in ((rng.uniform(0.01, 0.1, (3, 1, 600)).astype(F32), qrand(rng, I8, (3, 1, 600))),
                      (rng.uniform(0.01, 0.1, (2, 3, 1, 1)).astype(F32), qrand(rng, I8, (3, 1, 1))),
                      (np.float32([0.05]), np.zeros((3, 1, 600), I8))):
        C.quantized_matmul(a, np.float32([0.02]), np.uint8([100]), b, b_s, b_zp, np.float32([3.0]),
                           np.uint8([128]), poison(np.empty((2, 3, 20, 600), U8)))


# ---- pooling: tiles along channels and rows --------------------------------------

@pytest.mark.parametrize("shape,window,strides,pads,dil,incl", [
    ((1, 1, 600, 601), (3, 3), (1, 2), ((1, 2), (1, 0)), (1, 1), False),  # one plane > a tile: row tiles
    ((2, 7, 70, 90), (2, 2), (2, 2), ((0, 0), (1, 1)), (1, 1), True),     # several channels per tile
    ((1, 3, 300, 300), (5, 2), (3, 1), ((2, 2), (0, 1)), (2, 3), False),
    ((1, 2, 40, 50, 60), (2, 3, 2), (2, 1, 2), ((1, 0, 1), (0, 1, 1)), (1, 2, 1), True),
    ((1, 1, 1, 300000), (1, 4), (1, 3), ((0, 0), (2, 3)), (1, 1), False),
])
def test_pool_tile_edges(shape, window, strides, pads, dil, incl, rng):
    x = qrand(rng, U8, shape)
    nd = len(shape) - 2
    start, end = pads
    out_sp = tuple((shape[2 + i] + start[i] + end[i] - (window[i] - 1) * dil[i] - 1) // strides[i] + 1
                   for i in range(nd))
    c = shape[1]
    for x_zp, o_zp in ((np.uint8([128]), np.int8([3])), (qrand(rng, U8, c), qrand(rng, I8, c)), (None, None)):
        C.quantized_avg_pool(x, rng.uniform(0.01, 0.1, c).astype(F32), x_zp, np.float32([0.03]), o_zp,
                             poison(np.empty(shape[:2] + out_sp, I8)), window, strides, start, end, dil, incl)


def test_pool_large_windows_sum_in_float64(rng):
    # 255 * taps > 2**24: the sums run in float64. One whole-image window per
    # channel, checked against the int64 sum and the formula's float32 steps.
    x = qrand(rng, U8, (1, 2, 300, 300))
    xs, os_ = np.float32(0.37), np.float32(0.011)
    got = cpu.quantized_avg_pool(x, np.float32([xs]), np.uint8([100]), np.float32([os_]), np.int8([-3]),
                                 np.empty((1, 2, 1, 1), I8), (300, 300), (1, 1), (0, 0), (0, 0), (1, 1), False)
    for c in range(2):
        s = int(x[0, c].astype(np.int64).sum()) - 100 * 90000
        t = (np.float32(s) * xs) / np.float32(90000) / os_
        assert got[0, c, 0, 0] == np.clip(np.rint(t) - 3, -128, 127)
    x = np.full((1, 1, 300, 300), 255, U8)
    got = cpu.quantized_avg_pool(x, np.float32([1.0]), None, np.float32([1.0]), None, np.empty((1, 1, 1, 1), U8),
                                 (300, 300), (1, 1), (0, 0), (0, 0), (1, 1), False)
    assert got.item() == 255


def test_pool_tap_counts_against_a_direct_count():
    for in_size, window, stride, start, end, dil in [(5, 2, 2, 0, 1, 1), (7, 3, 1, 2, 2, 2), (0, 1, 1, 1, 1, 1)]:
        out_size = (in_size + start + end - (window - 1) * dil - 1) // stride + 1
        for lo, hi in ((0, in_size), (-start, in_size + end)):
            want = [sum(lo <= o * stride - start + k * dil < hi for k in range(window)) for o in range(out_size)]
            got = cpu_pool.tap_counts(in_size, out_size, window, stride, start, dil, lo, hi)
            assert got.tolist() == want


# ---- memory: the output plus a fixed workspace ------------------------------------

MiB = 1 << 20


def peak_of(fn):
    """Bytes allocated at the peak of ``fn()`` beyond what was allocated before it."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


# per worker thread: element-wise 3 chunk buffers; matmul a tile's accumulator,
# its a and b pieces and the requantizing scratch; pooling a tile's region and sums
WORKSPACE = {"elementwise": 2 * MiB, "matmul": 8 * MiB, "pool": 8 * MiB}


def within(kind, peak, out_bytes):
    limit = out_bytes + tiles.THREADS * WORKSPACE[kind]
    assert peak <= limit, f"{kind}: peak {peak / MiB:.1f} MiB > {limit / MiB:.1f} MiB"


def test_peak_memory_elementwise(rng):
    n = 8 * MiB // 4   # 8 MiB of float32 in, 2 MiB out
    x = rng.standard_normal(n).astype(F32)
    q, q2 = qrand(rng, U8, n), qrand(rng, U8, n)
    s, z = np.float32([0.02]), np.uint8([128])
    within("elementwise", peak_of(lambda: dmlq.quantize_linear(x, 0.02, np.uint8(128))), n)
    within("elementwise", peak_of(lambda: dmlq.dequantize_linear(q, 0.02, np.uint8(128))), 4 * n)
    within("elementwise", peak_of(lambda: dmlq.quantized_add(q, s, z, q2, s, z, s, z)), n)
    q32 = q.astype(np.int32)
    within("elementwise", peak_of(lambda: dmlq.dequantize_linear(q32, s, np.int32(-5))), 4 * n)
    # the reference, for scale: several full-size temporaries
    assert peak_of(lambda: R.quantize_linear(x, s, z, np.empty(n, U8))) > 8 * n


def test_peak_memory_matmul(rng):
    a, b = qrand(rng, U8, (1, 2048)), qrand(rng, U8, (2048, 4096))   # b: 8 MiB
    s = np.float32([0.02])
    within("matmul", peak_of(lambda: dmlq.quantized_matmul(a, s, np.uint8(3), b, s, np.uint8(5), 40.0)), 4096)
    a2 = qrand(rng, I8, (600, 700))
    b2 = qrand(rng, I8, (700, 1100))
    within("matmul", peak_of(lambda: dmlq.quantized_matmul(a2, s, np.int8(3), b2, s, np.int8(5), 40.0,
                                                            np.int8(1))), 600 * 1100)


def test_peak_memory_pool(rng):
    x = qrand(rng, U8, (1, 16, 256, 256))   # 1 MiB in
    within("pool", peak_of(lambda: dmlq.quantized_avg_pool(x, 0.1, np.uint8(3), 0.1, np.uint8(5), 3,
                                                           start_padding=1, end_padding=1)), x.size)


# ---- a forked child ----------------------------------------------------------------

def test_a_forked_child_runs_its_own_threads(rng):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    x = (rng.standard_normal(3 * CHUNK) * 50).astype(F32)
    a, b = qrand(rng, U8, (40, 300)), qrand(rng, I8, (300, 1100))
    cpu.quantize_linear(x, np.float32([0.5]), None, np.empty(x.shape, I8))  # the parent's pool exists
    want = R.quantize_linear(x, np.float32([0.5]), None, np.empty(x.shape, I8))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_child_work, (x, a, b)).get(timeout=120)  # an inherited pool would hang here
    assert np.array_equal(got[0], want)
    assert np.array_equal(got[1], R.quantized_matmul(a, np.float32([0.1]), np.uint8([3]), b, np.float32([0.1]),
                                                     None, np.float32([40.0]), None, np.empty((40, 1100), I8)))


def _child_work(x, a, b):
    q = cpu.quantize_linear(x, np.float32([0.5]), None, np.empty(x.shape, I8))
    m = cpu.quantized_matmul(a, np.float32([0.1]), np.uint8([3]), b, np.float32([0.1]), None, np.float32([40.0]),
                             None, np.empty((40, 1100), I8))
    return q, m


# ---- the fused kernels (numba, dmlq.cpu.jit) ------------------------------------------

def test_fused_kernels_take_the_flat_calls(rng):
    """Contiguous operands with per-tensor parameters run numba's kernels (a compiled
    variant for each operand type appears), checked against the reference as always;
    without numba (a lean install) the NumPy path runs them."""
    from dmlq.cpu import jit

    if not jit.AVAILABLE:
        pytest.skip("numba is not installed (the [fast] extra): the NumPy path runs everything")
    assert jit.active()

    def typed(kernel, dtype):
        return any(sig[0].dtype == numba_type(dtype) for sig in kernel.signatures)

    def numba_type(dtype):
        import numba
        return numba.from_dtype(np.dtype(dtype))

    n = CHUNK + 3
    xi = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    C.quantize_linear(xi, np.float32([3e7]), np.int8([-4]), poison(np.empty(n, I8)))
    assert typed(jit._k.quantize, np.int32)
    q16 = qrand(rng, np.dtype(np.uint16), n)
    C.dequantize_linear(q16, np.float16([0.01]), np.uint16([9]), poison(np.empty(n, F32)))
    assert typed(jit._k.dequantize_narrow, np.uint16)
    qu32 = qrand(rng, np.dtype(np.uint32), n)
    C.dequantize_linear(qu32, np.float32([1e-7]), np.uint32([2**31 + 5]), poison(np.empty(n, F32)))
    assert typed(jit._k.dequantize_wide, np.uint32)
    a, b = qrand(rng, I8, n), qrand(rng, U8, n)
    C.quantized_add(a, np.float32([0.03]), np.int8([5]), b, np.float32([0.02]), np.uint8([200]),
                    np.float32([0.05]), np.int8([-7]), poison(np.empty(n, I8)))
    assert any(s[0].dtype == numba_type(I8) and s[3].dtype == numba_type(U8) for s in jit._k.add.signatures)
    # one value on either side: the broadcast kernel, whichever side it is on
    C.quantized_add(np.int8([100]), np.float32([0.03]), None, b, np.float32([0.02]), np.uint8([7]),
                    np.float32([0.05]), np.uint8([3]), poison(np.empty(n, U8)))
    assert typed(jit._k.add_scalar, U8)
    # and the NumPy path is what runs inside jit.disabled()
    with jit.disabled():
        assert not jit.active()
    assert jit.active()


_NAN_PAYLOAD = np.uint32(0x7FC000FF).view(np.float32)  # a NaN whose low byte is not 0
# parameters for every (a, b) pair: ties (dyadic scales), negative, tiny and huge scales;
# the last four can give a NaN t (an infinite term, a zero or NaN out_scale): the NumPy path
# (1.3e36: each term finite, their sum up to +-inf; 3e36: a term itself overflows)
ADD_PARAMS = [(0.5, 0.25, 0.75), (0.02, 0.03, 0.05), (-0.125, 3.0, 0.5), (1e-40, 2e-40, 3e-41),
              (1e36, 1e-3, 7e37), (1.3e36, -1.3e36, 1e36), (1.3e36, 1.3e36, 2.0),
              (1.0, 1.0, 0.0), (np.nan, 1.0, 1.0), (1.0, _NAN_PAYLOAD, 1.0), (1.0, 1.0, np.inf), (3e36, 3e36, 1.0)]
FUSED_ADD = [True] * 7 + [False] * 5


@pytest.mark.parametrize("ta,tb,to", [(U8, U8, U8), (I8, U8, I8), (U8, I8, U8), (I8, I8, I8)])
def test_fused_add_on_every_input_pair(ta, tb, to):
    """quantized add's kernel (no NaN test, see dmlq.cpu.jit.add) on all 65,536 (a, b)
    pairs, bit for bit with the reference, and on one b with every a; parameters that
    could make a NaN are refused by the kernel and run the NumPy path."""
    from dmlq.cpu import jit

    ia, ib = np.iinfo(ta), np.iinfo(tb)
    a = np.repeat(np.arange(ia.min, ia.max + 1), 256).astype(ta)
    b = np.tile(np.arange(ib.min, ib.max + 1), 256).astype(tb)
    zps = (ta.type(-3 if ta == I8 else 131), tb.type(7), to.type(-100 if to == I8 else 200))
    for (sa, sb, so), fused in zip(ADD_PARAMS, FUSED_ADD):
        s = [np.float32([v]) for v in (sa, sb, so)]
        C.quantized_add(a, s[0], zps[0][None], b, s[1], zps[1][None], s[2], zps[2][None], poison(np.empty(a.size, to)))
        C.quantized_add(a[::256], s[0], zps[0][None], b[5:6], s[1], zps[1][None], s[2], zps[2][None],
                        poison(np.empty(256, to)))
        if jit.active():
            ran = jit.add(a, int(zps[0]), s[0][0], b, int(zps[1]), s[1][0], s[2][0], int(zps[2]),
                                           np.empty(a.size, to), tiles.run_pieces)
            assert ran == fused, (sa, sb, so)


# ---- pooling with huge padding: memory bounded by the input and output -------------

def test_pool_huge_padding_and_strides_allocate_no_padded_input(rng):
    """Padding 3000 and stride 3000 around an 8 x 9 image: a padded copy of the input
    would be about 6000 x 6000 elements (69 MiB as int16); the reference's sums (and the
    CPU backend, which sends such sparse calls to it) add only the taps inside the
    input. Checked against tests/exact.py's element-by-element model and tracemalloc."""
    import exact

    x = qrand(rng, U8, (1, 2, 8, 9))
    window, strides, start, end, dil = (3, 2), (3000, 3000), (3000, 2996), (3001, 2999), (1, 2)
    out_sp = tuple((x.shape[2 + i] + start[i] + end[i] - (window[i] - 1) * dil[i] - 1) // strides[i] + 1
                   for i in range(2))
    assert out_sp == (3, 3)
    args = (np.float32([0.05, 0.07]), np.uint8([100, 3]), np.float32([0.1]), np.int8([-2]))
    for incl in (False, True):
        want = np.array(exact.avgpool(x, *args, "int8", out_sp, window, strides,
                                      start, end, dil, incl), I8)
        for impl in (R.quantized_avg_pool, cpu.quantized_avg_pool):
            out = poison(np.empty((1, 2) + out_sp, I8))
            peak = peak_of(lambda: impl(x, *args[:2], *args[2:], out, window, strides, start, end, dil, incl))
            assert np.array_equal(out, want), (impl.__module__, incl, out.tolist(), want.tolist())
            assert peak < MiB, f"{impl.__module__}: peak {peak} bytes"
    # 3-D, the public function: one window per axis reads the image's corner
    x3 = qrand(rng, U8, (1, 1, 4, 5, 6))
    got = dmlq.quantized_avg_pool(x3, 0.1, np.uint8(7), 0.1, np.uint8(9), 2, strides=50000,
                                  start_padding=50000, end_padding=50000)
    assert got.shape == (1, 1, 3, 3, 3)
    s = np.float32([0.1])
    want = exact.avgpool(x3, s, [7], s, [9], "uint8", (3, 3, 3), (2, 2, 2), (50000,) * 3, (50000,) * 3,
                         (50000,) * 3, (1, 1, 1), False)
    assert got.tolist() == want


def test_numba_loaded_by_the_first_kernel_call_only():
    """Matrix multiply and pooling never import numba (about 0.3 s); the first
    element-wise call that runs a kernel does."""
    from dmlq.cpu import jit

    if not jit.AVAILABLE:
        pytest.skip("numba is not installed (the [fast] extra)")
    code = """
import sys
import numpy as np
import dmlq
a = np.ones((4, 8), np.int8); b = np.ones((8, 3), np.int8); s = np.array(0.5, np.float32)
dmlq.quantized_matmul(a, s, None, b, s, None, s)
dmlq.quantized_avg_pool(np.ones((1, 1, 4, 4), np.int8), s, None, s, None, window_size=(2, 2))
print('numba' in sys.modules)
dmlq.quantize_linear(np.ones(64, np.float32), s)
print('numba' in sys.modules)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("value,threads", [("1", "1"), ("3", "3"), ("0", "1"), ("abc", None), ("2.5", None)])
def test_dmlq_cpu_threads_from_the_environment(value, threads):
    """DMLQ_CPU_THREADS sets the CPU backend's threads (README); a value that is not an integer
    is a RuntimeWarning naming it, and import dmlq still works (it read it at import)."""
    import os

    env = dict(os.environ, DMLQ_CPU_THREADS=value)
    r = subprocess.run([sys.executable, "-c", "import dmlq, dmlq.cpu.tiles as t; print(t.THREADS)"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    if threads is None:
        assert f"RuntimeWarning: DMLQ_CPU_THREADS={value!r} is not an integer" in r.stderr
        assert int(r.stdout) >= 1
    else:
        assert r.stdout.strip() == threads and r.stderr == ""
