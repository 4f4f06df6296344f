"""An 8-bit b (int8 / uint8) at M <= 16 on the weight-streaming kernels of
cuda/matmul_stream_packed.cu: quantized_matmul's ``matmul_stream_packed`` (requantized output,
split-K through ``matmul_stream_packed_finish``), and the integer family's
``matmul_stream_grouped`` + ``matmul_stream_grouped_finish`` (matmul_integer's int32,
matmul_integer_to_float with one group of scales or blocked along K). b's bytes go to the dp4a
words as they are; its zero point leaves the sums afterwards (- b_zp * sum(a) + rows * a_zp *
b_zp, from a's row sums per k-split). Run by the host harness through the public functions on
arrays of the cupy stand-in, into poisoned outputs, byte for byte against the NumPy reference;
each call asserts which kernel ran. Sizes reach the 16-byte path (N a multiple of 16, whole
64-column blocks and a cut last one), the byte path (N % 16 != 0, matrices starting off a
16-byte boundary), K tails inside a k-word and a stage, several stages, split K (the harness
reports 4 SMs)."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq.gpu import qmm_stream
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched, same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
PAIRS = ((U8, I8), (I8, U8), (U8, U8), (I8, I8))


def mt(m):
    return next(r for r in (1, 4, 16) if m <= r)


def qmm_kernel(ta, tb, to, m):
    return f"matmul_stream_packed<{ta.name}, {tb.name}, {to.name}, {mt(m)}>"


def sums_kernel(ta, tb, m):
    return f"matmul_stream_grouped<{ta.name}, {tb.name}, {mt(m)}>"


def plan_text(fn, *args, **kw):
    return str(dmlq.kernel_plan(fn, *(dev(v) for v in args), **kw))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 37, 5), (3, 200, 64), (4, 64, 96), (5, 3, 33), (7, 130, 160),
                                   (11, 65, 7), (16, 129, 128), (1, 700, 48), (13, 0, 9)])
def test_quantized_matmul(gpu, m, k, n):
    """Every (a, b) type pair and both outputs; per-row a and out parameters, per-column b ones;
    single values; no zero points; K = 0 (no stage: every sum 0, the zero points' terms too)."""
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        to = (I8, U8)[i % 2]
        a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
        a_s, b_s = rng.uniform(1e-3, 0.05, (m, 1)).astype(F32), rng.uniform(-0.05, 0.05, n).astype(F32)
        name = qmm_kernel(ta, tb, to, m)
        with np.errstate(all="ignore"):
            same(dmlq.quantized_matmul, a, a_s, q(rng, ta, (m, 1)), b, b_s, q(rng, tb, (n,)),
                 rng.uniform(0.05, 1, (m, 1)).astype(F32), q(rng, to, (m, 1)), kernel=name)
            same(dmlq.quantized_matmul, a, np.float32(0.02), None, b, np.float32(1e-3), tb.type(q(rng, tb, ())),
                 np.float32(0.25), to.type(3), kernel=name)
            same(dmlq.quantized_matmul, a, np.float32(0.02), ta.type(q(rng, ta, ())), b, np.float32(1e-3), None,
                 np.float32(0.5), None, kernel=qmm_kernel(ta, tb, U8, m))  # no out zero point: uint8


@pytest.mark.parametrize("m,k,n", [(1, 256, 64), (3, 200, 33), (4, 1000, 130), (16, 129, 9), (2, 33, 5),
                                   (1, 3000, 24), (5, 1, 7)])
def test_integer_family(gpu, m, k, n):
    """matmul_integer and matmul_integer_to_float (one group of scales: per tensor, row, column;
    every zero-point and bias form; float32 and float16 out) on the sums pass."""
    rng = np.random.default_rng(m * 7919 + k * 13 + n)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
        name = sums_kernel(ta, tb, m)
        for a_zp, b_zp in ((None, None), (q(rng, ta, (m, 1)), q(rng, tb, (n,))), (ta.type(7), tb.type(q(rng, tb, ()))),
                           (None, q(rng, tb, (1, n)))):
            same(dmlq.matmul_integer, a, b, a_zp, b_zp, kernel=name)
            assert launched("matmul_stream_grouped_finish<int>"), kernels()
        with np.errstate(all="ignore"):
            same(dmlq.matmul_integer_to_float, a, rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)), b,
                 rng.uniform(-1, 1, n).astype(F16), q(rng, tb, (1, n)), rng.uniform(-50, 50, (m, n)).astype(F32),
                 kernel=name)
            same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, b, np.float32(-3e-3), 5,
                 rng.uniform(-1, 1, n).astype(F16), dtype=F16, kernel=name)


@pytest.mark.parametrize("m,k,n,block", [(1, 256, 64, 32), (3, 200, 33, 64), (4, 1000, 130, 96), (2, 33, 5, 32),
                                         (1, 4096, 32, 128), (16, 1300, 9, 160), (3, 300, 40, 48), (16, 150, 9, 40)])
def test_blocked_scales(gpu, m, k, n, block):
    """matmul_integer_to_float with blocked scales along K: each group's zero points (a (groups, N)
    table) leave the group's sums; groups of 32 (two a stage), 96 and 160 (straddling stages), 40 and
    48 (one chunk of K per group: not a multiple of 32)."""
    rng = np.random.default_rng(m * 31 + k + n + block)
    groups = -(-k // block)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
        fits = qmm_stream.work_fits(m, k, block, 8)
        for a_zp, b_zp, out_dtype in ((q(rng, ta, (m, 1)), q(rng, tb, (groups, n)), F32),
                                      (ta.type(9), tb.type(3), F16), (None, q(rng, tb, (n,)), F32)):
            with np.errstate(all="ignore"):
                same(dmlq.matmul_integer_to_float, a, rng.uniform(1e-3, 1, (m, 1)).astype(F32), a_zp, b,
                     rng.uniform(-1, 1, (groups, n)).astype(F32), b_zp, rng.uniform(-9, 9, n).astype(F32),
                     dtype=out_dtype, block_size=block, kernel=sums_kernel(ta, tb, m) if fits else "matmul_dp4a_wide<")


def test_batches_views_and_split_k(gpu):
    """Batched a and b with broadcasting, per-batch b scales and zero points, a transposed b (copied
    to rows first: the plan says so), a b whose matrices start off a 16-byte boundary (the byte
    path), and a long K over few columns (split K)."""
    rng = np.random.default_rng(3)
    a, b = q(rng, U8, (2, 1, 3, 300)), q(rng, I8, (4, 300, 40))
    b_s, b_zp = rng.uniform(0, 0.1, (4, 1, 40)).astype(F32), q(rng, I8, (4, 1, 40))
    same(dmlq.quantized_matmul, a, np.float32(0.02), U8.type(100), b, b_s, b_zp, np.float32(0.5), I8.type(-3),
         kernel=qmm_kernel(U8, I8, I8, 3))
    same(dmlq.matmul_integer_to_float, a, np.float32(0.02), U8.type(100), b, b_s, b_zp, kernel=sums_kernel(U8, I8, 3))
    bt = np.ascontiguousarray(q(rng, U8, (40, 300))).T
    assert "b copied to a contiguous array" in plan_text(dmlq.matmul_integer, a[0, 0], bt)
    same(dmlq.matmul_integer, a[0, 0], bt, U8.type(1), U8.type(200), kernel=sums_kernel(U8, U8, 3))
    odd = q(rng, I8, (3, 17, 33))  # each matrix 561 bytes: every matrix but the first starts off 16 bytes
    same(dmlq.matmul_integer, q(rng, I8, (3, 2, 17)), odd, None, I8.type(-5), kernel=sums_kernel(I8, I8, 2))
    long_k = q(rng, U8, (1, 6000)), q(rng, U8, (6000, 16))
    text = plan_text(dmlq.quantized_matmul, long_k[0], np.float32(1), None, long_k[1], np.float32(1), None,
                     np.float32(4e4), None)
    assert "split-K" in text, text
    same(dmlq.quantized_matmul, long_k[0], np.float32(1e-2), U8.type(128), long_k[1], np.float32(1e-2),
         U8.type(77), np.float32(40.0), U8.type(128), kernel=qmm_kernel(U8, U8, U8, 1))
    assert launched("matmul_stream_packed_finish<uint8>"), kernels()
    same(dmlq.matmul_integer, long_k[0], long_k[1], U8.type(128), U8.type(77), kernel=sums_kernel(U8, U8, 1))


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """The largest |sum| the path takes: |a - a_zp| = 255 times |b - b_zp| = 255 at every k, K = 32768
    (2,130,739,200: just inside int32), both signs, split over chunks; read back exactly as int32 and
    through quantized_matmul's saturation; K = 32769 leaves for dp4a-wide."""
    k, n = 32768, 3
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 255) if tb == U8 else (-128, 127)
    for av, za, bv, zb in ((hi_a, lo_a, hi_b, lo_b), (hi_a, lo_a, lo_b, hi_b)):
        a, b = np.full((2, k), av, ta), np.full((k, n), bv, tb)
        assert "split-K" in plan_text(dmlq.matmul_integer, a, b, ta.type(za), tb.type(zb))
        same(dmlq.matmul_integer, a, b, ta.type(za), tb.type(zb), kernel=sums_kernel(ta, tb, 2))
        for to in (I8, U8):
            same(dmlq.quantized_matmul, a, np.float32(1), ta.type(za), b, np.float32(1), tb.type(zb),
                 np.float32(2.0 ** 24), to.type(0), kernel=qmm_kernel(ta, tb, to, 2))
    wide = plan_text(dmlq.matmul_integer, np.zeros((1, k + 1), ta), np.zeros((k + 1, 4), tb))
    assert wide.startswith("matmul_integer: dp4a-wide"), wide


@pytest.mark.parametrize("fn", ["matmul_integer", "matmul_integer_to_float", "quantized_matmul"])
def test_a_zero_point_at_16_rows_takes_the_stream_kernel(fn):
    """M = 16 with an 8-bit b and enough work for the tensor cores: with a's zero point (the
    tiles' column sums of b would cost a pass over b) every operator plans stream-m16; without
    it, the tensor cores (the plan for a nominal H100, no GPU needed)."""
    a, b = np.zeros((16, 4096), U8), np.zeros((4096, 4096), I8)
    one = np.float32(1)

    def first_line(zp):
        args = {"matmul_integer": (a, b, zp, None),
                "matmul_integer_to_float": (a, one, zp, b, one, None),
                "quantized_matmul": (a, one, zp, b, one, None, one, None)}[fn]
        return str(dmlq.kernel_plan(getattr(dmlq, fn), *args)).splitlines()[0]

    assert first_line(U8.type(128)).startswith(f"{fn}: stream-m16"), first_line(U8.type(128))
    assert first_line(None).startswith(f"{fn}: mma-128x128"), first_line(None)


def test_selection():
    """An 8-bit b takes the stream kernel at M <= 16 unless the tiled rule picks the tensor cores
    (M = 16 with enough work); past M = 16, or K past 32768, the tiles."""
    from dmlq.gpu import matmul

    sel = matmul.select_variant
    assert sel(1, 4096, 4096, 1, 90, have_mma=True) == "stream-m1"
    assert sel(4, 4096, 4096, 1, 90, have_mma=True) == "stream-m4"
    assert sel(9, 4096, 4096, 1, 90, have_mma=True) == "stream-m16"
    assert sel(16, 4096, 4096, 1, 90, have_mma=True) == "mma-128x128"
    assert sel(16, 4096, 4096, 1, 90, have_mma=False) == "stream-m16"
    assert sel(16, 8, 8, 1, 90, have_mma=True) == "stream-m16"
    assert sel(16, 4096, 4096, 1, 90, have_mma=True, packed=True) == "stream-m16"
    assert sel(17, 4096, 4096, 1, 90, have_mma=True) == "mma-128x128"
    # a's zero point: the tiles would need b's column sums first, the stream kernel folds them in
    assert sel(16, 4096, 4096, 1, 90, have_mma=True, col_sums=True) == "stream-m16"
    assert sel(16, 8192, 8192, 1, 90, have_mma=True, col_sums=True) == "stream-m16"
    assert sel(17, 4096, 4096, 1, 90, have_mma=True, col_sums=True) == "mma-128x128"
    assert sel(16, 4096, 32769, 1, 90, have_mma=True, col_sums=True) == "dp4a-wide"
    assert sel(1, 4096, 32769, 1, 90) == "dp4a-wide"
    assert sel(1, 4096, 4096, 1, 90, stream=False) == "dp4a-32x32"
    assert sel(1, 4096, 4096, 70000, 90) == "dp4a-32x32"  # more matrices than the grid's y
