"""dmlq.cpu's matmul_integer and matmul_integer_to_float (dmlq/cpu/intmm.py) bit for bit
against dmlq.reference on every call (tests/host_backends.py: each call below runs both and
compares), on seeded random inputs and the edge cases: K over several exact K-chunks, K = 0
and 1, the extreme int8/uint8/int4 values with extreme zero points, int32 wrap-around,
blocked scales with K not a multiple of the group size, float16 overflow, NaN/inf/zero
scales, packed 4-bit b. And that the public functions take this path on NumPy arrays (no
silent fall back to the reference), seen from outside: which functions run, and peak memory."""
from __future__ import annotations

import sys
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import dmlq
import host_backends
from dmlq import reference
from dmlq.cpu import matmul as cpu_matmul
from dmlq.cpu import tiles

CPU = host_backends.CheckedCPU(tiled=True)  # the tiles, the small calls too (test_small_calls_* below: the shortcut)
I8, U8, I32, F32, F16 = np.int8, np.uint8, np.int32, np.float32, np.float16
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
INFO = {np.dtype(I8): (-128, 127), np.dtype(U8): (0, 255), I4: (-8, 7), U4: (0, 15)}


def q(rng, dt, shape):
    lo, hi = INFO[np.dtype(dt)]
    return rng.integers(lo, hi + 1, shape).astype(dt)


def poisoned(shape, dt):
    out = np.empty(shape, dt)
    out.view(np.uint8)[...] = 0xA5
    return out


# (batch of a, batch of b, M, K, N): K past one exact chunk (256 for uint8 x uint8, shorter in
# the skinny M <= 16 tiling), M past a 256-row tile, N past a 512-column tile, and tiny sizes
SHAPES = [((), (), 1, 1, 1), ((), (), 3, 0, 4), ((), (), 5, 7, 3), ((), (), 16, 3000, 40),
          ((), (), 300, 600, 530), ((2,), (), 4, 300, 9), ((3, 1), (2, 1, 1), 17, 520, 6)]


@pytest.mark.parametrize("adt,bdt", [(U8, I8), (U8, U8), (I8, I8), (I8, U8), (U8, I4), (I8, U4)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matmul_integer_random(adt, bdt, shape):
    ba, bb, m, k, n = shape
    rng = np.random.default_rng(hash((np.dtype(adt).name, np.dtype(bdt).name, str(shape))) % 2**32)
    a, b = q(rng, adt, ba + (m, k)), q(rng, bdt, bb + (k, n))
    batch = np.broadcast_shapes(ba, bb)
    for azp, bzp in [(None, None), (q(rng, adt, ()), q(rng, bdt, ())),
                     (q(rng, adt, (m, 1)), q(rng, bdt, (1, n))),
                     (np.zeros((), adt), q(rng, bdt, batch + (1, n)) if batch else None)]:
        CPU.matmul_integer(a, azp, b, bzp, poisoned(batch + (m, n), I32))


@pytest.mark.parametrize("k", [1, 33025, 33026, 70000])
def test_matmul_integer_extremes_and_int32_wrap(k):
    # (0 - 255) * (-128 - 127) = 65025 per term: past K = 33025 the sum wraps
    a = np.zeros((2, k), U8)
    b = np.full((k, 3), -128, I8)
    b[:, 1] = 127
    got = CPU.matmul_integer(a, np.array(255, U8), b, np.array(127, I8), poisoned((2, 3), I32))
    assert got[0, 0] == np.int64(65025 * k).astype(I32)  # hand value, wrapped as int64 -> int32
    CPU.matmul_integer(np.full((1, k), 255, U8), np.array(0, U8), b, np.array(-128, I8), poisoned((1, 3), I32))
    CPU.matmul_integer(np.full((1, k), -128, I8), np.array(127, I8), np.full((k, 2), 255, U8), np.array(0, U8),
                       poisoned((1, 2), I32))
    # raw products 255 * 127 = 32385 (odd): a chunk one element longer than the exact limit of
    # uint8 x int8 (512) would round its partial sums past 2**24
    # (b 126 or 127 at random, so the sums' parity varies)
    b = np.random.default_rng(k).integers(126, 128, (k, 8)).astype(I8)
    got = CPU.matmul_integer(np.full((1, k), 255, U8), None, b, None, poisoned((1, 8), I32))
    np.testing.assert_array_equal(got[0], (255 * b.astype(np.int64).sum(axis=0)).astype(I32))


@pytest.mark.parametrize("bdt,zp", [(I4, 7), (I4, -8), (U4, 15), (U4, 0)])
def test_matmul_integer_four_bit_extremes_packed(bdt, zp):
    lo, hi = INFO[bdt]
    k = 4099
    a = np.full((3, k), 255, U8)
    b = np.full((k, 5), lo if zp == hi else hi, bdt)
    p = dmlq.pack(b)
    bzp = np.array(zp, bdt)
    packed = (p.dtype, tuple(p.shape), False)
    got = CPU.matmul_integer(a, np.array(0, U8), p.data, bzp, poisoned((3, 5), I32), b_packed=packed)
    assert got[0, 0] == 255 * (int(b[0, 0]) - zp) * k
    CPU.matmul_integer_to_float(a, np.array(0.5, F32), None, p.data, np.full((1, 5), 0.25, F32), bzp, None,
                                poisoned((3, 5), F16), block_size=64, b_packed=packed)


def _float_args(rng, adt, bdt, ba, bb, m, k, n, groups, params):
    batch = np.broadcast_shapes(ba, bb)
    rows = groups if groups > 1 else 1
    a_s = rng.uniform(0.5, 2, (m, 1) if params else ()).astype(F32)
    b_s = rng.uniform(0.5, 2, (rows, n) if params == 1 else batch + (rows, n) if params else ()).astype(F32)
    azp = q(rng, adt, (m, 1) if params else ())
    bzp = q(rng, bdt, (rows, n) if params == 1 else batch + (rows, n) if params else ())
    return a_s, azp, b_s, bzp


@pytest.mark.parametrize("adt,bdt", [(U8, I8), (I8, U8), (U8, U8), (U8, I4)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("block", [None, 1, 32, 250])
def test_matmul_integer_to_float_random(adt, bdt, shape, block):
    ba, bb, m, k, n = shape
    if block is not None and k // block * m * n * int(np.prod(np.broadcast_shapes(ba, bb))) > 100_000:
        pytest.skip("many groups on a large output: the reference's per-group loop takes seconds")
    rng = np.random.default_rng(hash((np.dtype(adt).name, np.dtype(bdt).name, str(shape), block)) % 2**32)
    a, b = q(rng, adt, ba + (m, k)), q(rng, bdt, bb + (k, n))
    batch = np.broadcast_shapes(ba, bb)
    groups = 1 if block is None else -(-k // block)
    for params in (0, 1, 2):
        if params == 2 and not batch:
            continue
        a_s, azp, b_s, bzp = _float_args(rng, adt, bdt, ba, bb, m, k, n, groups, params)
        for bias, odt in [(None, F32), (rng.standard_normal(n).astype(F32), F16),
                          (rng.standard_normal((m, n)).astype(F16), F32)]:
            CPU.matmul_integer_to_float(a, a_s, azp, b, b_s, bzp, bias, poisoned(batch + (m, n), odt),
                                        block_size=block)


@pytest.mark.parametrize("scale", [np.nan, np.inf, 0.0, -0.0, 1e-45, 3e38, 65504.0])
@pytest.mark.parametrize("block", [None, 100])
def test_matmul_integer_to_float_special_scales(scale, block):
    rng = np.random.default_rng(7)
    k = 1100
    a, b = q(rng, U8, (4, k)), q(rng, I8, (k, 6))
    a[0] = 255
    b[:, 0] = -128
    b_s = np.full((1 if block is None else 11, 6), 1.0, F32)
    b_s[0, 1] = scale
    for odt in (F32, F16):
        CPU.matmul_integer_to_float(a, np.array(scale, F32), np.array(0, U8), b, b_s, np.array(127, I8),
                                    np.float32(0.5), poisoned((4, 6), odt), block_size=block)
    # K = 0: the empty sum times the scales (0 * inf is NaN), or +0.0 with blocks
    CPU.matmul_integer_to_float(a[:, :0], np.array(scale, F32), None, b[:0], b_s[:1], None, None,
                                poisoned((4, 6), F32), block_size=None)
    CPU.matmul_integer_to_float(a[:, :0], np.array(scale, F32), None, b[:0], np.array(scale, F32), None, None,
                                poisoned((4, 6), F32), block_size=block)


def test_output_overlapping_an_input():
    rng = np.random.default_rng(3)
    out = np.empty((2, 2), I32)
    a = out.view(I8).reshape(2, 8)
    a[...] = q(rng, I8, (2, 8))
    b = q(rng, U8, (8, 2))
    want = reference.matmul_integer(a.copy(), None, b, np.array(9, U8), np.empty((2, 2), I32))
    assert dmlq.cpu.matmul_integer(a, None, b, np.array(9, U8), out) is out
    np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------- the public route

def _functions_run(fn):
    """The code objects called while fn() runs (a profile hook: nothing of dmlq's is replaced),
    with the tiles' pieces all on this thread (dmlq.cpu.tiles.THREADS = 1): the pool's threads
    exist before the hook, so a piece one of them took would go unseen, and on a busy machine
    they can take every piece (a flaky test, seen under load)."""
    seen = set()

    def hook(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code)

    threads, tiles.THREADS = tiles.THREADS, 1
    sys.setprofile(hook)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
        tiles.THREADS = threads
    return result, seen


@pytest.fixture(autouse=True)
def _tiles_for_small_calls_too(request):
    """The tests here are the tiles' own: small calls too go on them (not to the reference)."""
    if "small_calls" in request.node.name:
        yield
        return
    with cpu_matmul.tiled_always():
        yield


@pytest.mark.parametrize("fname", ["quantized_matmul", "matmul_integer", "matmul_integer_to_float"])
@pytest.mark.parametrize("batch,m,k,n", [(1, 4, 64, 64), (2, 3, 5, 7)])
def test_small_calls_take_the_reference_and_larger_ones_the_tiles(fname, batch, m, k, n):
    """Up to SMALL_OPERANDS elements of a and b (over the batch) the public functions run
    dmlq.reference (faster there: the tiles' fixed cost is tens of us); one row of b more and
    they run the tiles. The bits are the same either way (the tiled run beside it)."""
    rng = np.random.default_rng(batch * m * k * n)
    room = cpu_matmul.SMALL_OPERANDS // batch - m * k   # elements of b that fit the bound
    fit_n = room // k                                   # the widest b that fits
    for n_, small in ((fit_n, True), (fit_n + 1, False), (n, True)):
        a, b = q(rng, U8, (batch, m, k)), q(rng, I8, (k, n_))
        args = {"quantized_matmul": (a, F32(0.02), U8(3), b, F32(0.01), I8(-5), F32(0.5), U8(7)),
                "matmul_integer": (a, b, U8(3), I8(-5)),
                "matmul_integer_to_float": (a, F32(0.02), U8(3), b, F32(0.01), I8(-5))}[fname]
        fn = getattr(dmlq, fname)
        got, seen = _functions_run(lambda: fn(*args))
        assert (getattr(reference, fname).__code__ in seen) is small, (n_, small)
        assert (cpu_matmul.Sums.tile.__code__ in seen) is not small, (n_, small)
        with cpu_matmul.tiled_always():
            tiled, seen = _functions_run(lambda: fn(*args))
        assert cpu_matmul.Sums.tile.__code__ in seen and getattr(reference, fname).__code__ not in seen
        np.testing.assert_array_equal(got.view(np.uint8), tiled.view(np.uint8))


@pytest.mark.parametrize("which", ["int32", "float", "blocked packed"])
def test_public_functions_take_the_exact_sgemm_path(which):
    rng = np.random.default_rng(11)
    m, k, n = 8, 2048, 512
    a, b = q(rng, U8, (m, k)), q(rng, I8, (k, n))
    if which == "int32":
        def call():
            return dmlq.matmul_integer(a, b, np.uint8(3), np.int8(-2))
    elif which == "float":
        def call():
            return dmlq.matmul_integer_to_float(a, np.float32(0.1), np.uint8(3), b, np.float32(0.2), np.int8(1))
    else:
        b4 = q(rng, I4, (k, n))
        p = dmlq.pack(b4)

        def call():
            return dmlq.matmul_integer_to_float(a, np.float32(0.1), None, p, np.full((k // 64, n), 0.2, F32), 1,
                                                block_size=64)
    call()  # plans and caches warm
    _, seen = _functions_run(call)
    assert cpu_matmul.Sums.tile.__code__ in seen
    assert reference.matmul_integer.__code__ not in seen
    assert reference.matmul_integer_to_float.__code__ not in seen
    assert reference._exact_matmul.__code__ not in seen
    # the reference widens a and b to int64 (8 bytes per element, 8 MiB for b alone); the
    # sgemm path converts pieces, so the peak stays near the output and b's bytes
    tracemalloc.start()
    try:
        call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * k * n, peak
