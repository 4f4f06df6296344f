"""dmlq.matmul_integer / matmul_integer_to_float for M > 16 on the tiled kernels (cuda/matmul_dp4a.cu,
cuda/matmul_mma.cu with the int32 and float epilogues of cuda/matmul_epilogue.cuh), and
quantized_matmul's per-batch B parameters: run by the host harness through the public functions on
CuPy arrays of the cupy stand-in, into poisoned outputs, byte for byte against the NumPy reference.
Every variant selection can pick is reached by its sizes (the harness reports 4 SMs), and the test
asserts which kernels ran."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from conftest import assert_same, poison
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q  # NumPy arrays and dmlq.Packed bytes to the stand-in; random q values

I8, U8, F32, F16, I32 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16, np.int32))

# (M, K, N) -> the variant selection picks for one matrix on the harness (4 SMs).
SIZES = {
    "dp4a-32x32": (17, 37, 5),
    "dp4a-64x64": (100, 40, 130),
    "dp4a-128x64": (129, 33, 200),
    "mma-128x128": (130, 260, 140),
    "mma-128x128 split-K": (40, 1000, 130),
}


def kernels():
    return [name.split("<")[0] for name, *_ in S.launches]


def launched(name):
    """Whether the last call launched the kernel of this full name (template arguments included)."""
    return any(n == name for n, *_ in S.launches)


def same(fn, *args, kernel=None, **kwargs):
    """fn on stand-ins, into a poisoned out and into a fresh array, equals fn on NumPy arrays
    (dtype, shape, every byte; a float NaN matches any NaN); ``kernel``: the main kernel that must have run (its name before
    the template arguments, or a prefix of its full name)."""
    want = fn(*args, **kwargs)
    out = S.module.asarray(poison(np.empty(want.shape, want.dtype)))
    S.launches.clear()
    got = fn(*(dev(a) for a in args), **kwargs, out=out)
    assert got is out
    assert_same(got.get(), want)
    if kernel is not None:
        assert kernel in kernels() or any(n.startswith(kernel) for n, *_ in S.launches), kernels()
    fresh = fn(*(dev(a) for a in args), **kwargs)
    assert type(fresh) is S.module.ndarray and fresh.dtype == want.dtype
    assert_same(fresh.get(), want)


def main_kernel(variant):
    return {"dp4a-wide": "matmul_dp4a_wide"}.get(variant, "matmul_mma" if variant.startswith("mma") else "matmul_dp4a")


@pytest.mark.parametrize("variant", list(SIZES))
def test_matmul_integer(gpu, variant):
    m, k, n = SIZES[variant]
    rng = np.random.default_rng(m + k + n)
    for ta, tb in [(U8, I8), (I8, U8)]:
        a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
        same(dmlq.matmul_integer, a, b, q(rng, ta, (m, 1)), q(rng, tb, (n,)), kernel=main_kernel(variant))
    a, b = q(rng, I8, (m, k)), q(rng, I8, (k, n))
    same(dmlq.matmul_integer, a, b, kernel=main_kernel(variant))
    if "split-K" in variant:
        assert "matmul_splitk_epilogue" in kernels()


@pytest.mark.parametrize("out_dtype", [F32, F16])
@pytest.mark.parametrize("variant", list(SIZES))
def test_matmul_integer_to_float(gpu, variant, out_dtype):
    m, k, n = SIZES[variant]
    rng = np.random.default_rng(m * k + n)
    a, b = q(rng, U8, (m, k)), q(rng, I8, (k, n))
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    b_s = rng.uniform(-1, 1, n).astype(F16)
    bias = rng.uniform(-50, 50, (m, n)).astype(F32)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, a_s, q(rng, U8, (m, 1)), b, b_s, q(rng, I8, (1, n)), bias,
             dtype=out_dtype, kernel=main_kernel(variant))
        same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, b, np.float32(-3e-3), np.int8(-7),
             rng.uniform(-1, 1, n).astype(F16), dtype=out_dtype, kernel=main_kernel(variant))


@pytest.mark.parametrize("m,k,n,block", [(17, 100, 9, 32), (40, 64, 70, 64), (19, 97, 33, 32), (18, 0, 5, 32),
                                         (17, 40, 3, 64)])
def test_blocked_scales_take_the_wide_kernel(gpu, m, k, n, block):
    """Groups of 32 or 64 along K, a ragged last group, per-group zero points, K = 0 (no groups:
    +0.0 plus the bias) and one group (block_size >= K: the unblocked kernels)."""
    rng = np.random.default_rng(m * 7 + k)
    groups = max(-(-k // block), 1) if k else 0
    a, b = q(rng, I8, (m, k)), q(rng, U8, (k, n))
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    bzp = q(rng, U8, (groups, n))
    wide = "matmul_dp4a_wide" if groups != 1 else "matmul_dp4a"
    for dt in (F32, F16):
        same(dmlq.matmul_integer_to_float, a, rng.uniform(0, 1, (m, 1)).astype(F32), q(rng, I8, (m, 1)), b, b_s,
             bzp, rng.uniform(-9, 9, n).astype(F32), dtype=dt, block_size=block, kernel=wide)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, b_s, np.uint8(3), dtype=dt,
             block_size=block, kernel=wide)


def test_blocked_scales_off_the_tile_grid_are_routed(gpu):
    """A group the wide kernel's 32-deep tiles cannot close runs stream-rows (tests/test_gpu_intmm_packed.py)."""
    a, b = dev(np.zeros((17, 40), U8)), dev(np.zeros((40, 4), I8))
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, np.float32(1), None, b, dev(np.ones((3, 4), F32)),
                                None, block_size=16))
    assert plan.splitlines()[0].startswith("matmul_integer_to_float: stream-rows"), plan


def test_batches_broadcast_and_per_batch_parameters(gpu):
    rng = np.random.default_rng(3)
    a, b = q(rng, U8, (2, 1, 20, 40)), q(rng, I8, (3, 40, 6))
    b_s = rng.uniform(0, 1, (3, 1, 6)).astype(F32)
    bzp = q(rng, I8, (3, 1, 6))
    bias = rng.uniform(-1, 1, (2, 3, 20, 6)).astype(F16)
    same(dmlq.matmul_integer_to_float, a, np.float16(0.5), np.uint8(3), b, b_s, bzp, bias, kernel="matmul_dp4a")
    same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, np.float32(2), bzp, kernel="matmul_dp4a")
    same(dmlq.matmul_integer, a, b, None, bzp, kernel="matmul_dp4a")
    # blocked and per batch: (3, groups, 6) scales, shared zero points
    b_g = rng.uniform(0, 1, (3, 2, 6)).astype(F32)
    same(dmlq.matmul_integer_to_float, a, np.float32(0.25), None, b, b_g, np.int8(1), block_size=32,
         kernel="matmul_dp4a_wide")
    # three batch dims that do not merge: two launches, the second's parameter tables offset
    a, b = q(rng, U8, (2, 1, 2, 20, 40)), q(rng, I8, (3, 1, 40, 6))
    b_s = rng.uniform(0, 1, (3, 1, 1, 6)).astype(F32)
    bzp = q(rng, I8, (3, 1, 1, 6))
    bias = rng.uniform(-1, 1, (2, 3, 2, 1, 6)).astype(F32)
    S.launches.clear()
    same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, b_s, bzp, bias, kernel="matmul_dp4a")
    same(dmlq.quantized_matmul, a, np.float32(0.05), np.uint8(128), b, b_s / 100, bzp, np.float32(0.5),
         kernel="matmul_dp4a")
    assert kernels().count("matmul_dp4a") == 4  # two launches per call (out= and fresh)


def test_split_k_float_epilogue_per_batch_bias(gpu):
    """Split-K over a batch: the epilogue kernel adds each matrix's own bias row, scale and zero
    point (mutation 136: every matrix given matrix 0's bias survived the single-matrix cases)."""
    rng = np.random.default_rng(136)
    m, k, n = SIZES["mma-128x128 split-K"]
    a, b = q(rng, U8, (2, m, k)), q(rng, I8, (2, k, n))
    bias = rng.uniform(-50, 50, (2, m, n)).astype(F32)
    b_s = rng.uniform(-1, 1, (2, 1, n)).astype(F32)
    for dt in (F32, F16):
        S.launches.clear()
        same(dmlq.matmul_integer_to_float, a, rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, U8, (m, 1)), b, b_s,
             q(rng, I8, (2, 1, n)), bias, dtype=dt, kernel="matmul_mma")
        assert "matmul_splitk_epilogue" in kernels()


def test_parameters_with_length_one_batch_dims(gpu):
    """A bias or b scale / zero point with leading length-1 dims is one table shared by
    every matrix (the fuzz suite drew bias (1, 17, 1) with a (1, 17, 0) a: ValueError
    from np.broadcast_to in the table set-up); with K = 0 and K = 37."""
    rng = np.random.default_rng(11)
    for k in (0, 37):
        a, b = q(rng, I8, (1, 17, k)), q(rng, I8, (k, 5))
        bias = rng.uniform(-1, 1, (1, 17, 1)).astype(F32)
        b_s = rng.uniform(0, 1, (1, 1, 5)).astype(F32)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.6), None, b, b_s, q(rng, I8, (1, 1, 5)), bias)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.6), None, b, np.float32(0.6), None, bias)


def test_strided_operands_and_outputs(gpu):
    """A transposed b and an a whose rows are not 4-byte aligned (copied / padded for cp.async),
    an odd-offset output view (written through a temporary), misaligned output rows."""
    rng = np.random.default_rng(5)
    m, k, n = 130, 259, 141
    a = q(rng, U8, (m, k + 1))[:, 1:]
    bt = q(rng, I8, (n, k)).T
    same(dmlq.matmul_integer, a, bt, np.uint8(128), None, kernel="matmul_mma")
    base = S.module.asarray(poison(np.empty((m, n + 1), F16)))
    out = base[:, 1:]
    want = dmlq.matmul_integer_to_float(a, np.float32(0.1), None, bt, np.float32(0.2), None, dtype=F16)
    got = dmlq.matmul_integer_to_float(dev(a), np.float32(0.1), None, dev(bt), np.float32(0.2), None, out=out)
    assert got is out
    np.testing.assert_array_equal(out.get().view(np.uint16), want.view(np.uint16))
    assert (base.get()[:, 0].view(np.uint16) == 0xA5A5).all()  # the column left of the view untouched


def test_edge_values(gpu):
    """Extreme sums: int32 wrap past K = 33025 in matmul_integer (the wide kernel), exact float
    sums; NaN / inf / zero scales; float16 overflow to inf; K = 1; N = 1."""
    k = 33100
    a = np.zeros((17, k), U8)
    b = np.full((k, 2), 255, U8)
    b[:, 1] = 0
    same(dmlq.matmul_integer, a, b, np.uint8(255), None, kernel="matmul_dp4a_wide")
    same(dmlq.matmul_integer_to_float, a, np.float32(1), np.uint8(255), b, np.float32(1), None,
         kernel="matmul_dp4a_wide")
    a, b = special_scales(I8)
    same(dmlq.matmul_integer, a, b[:, :1], None, np.int8(-128))


def special_scales(bdt, wrap=lambda b: b):
    """NaN / inf / zero a scales, -0.0 and 1e30 b scales (float16 overflow) and K = 1, float32 and
    float16 out, M = 20 > 16; ``wrap`` makes b's operand (dmlq.pack for a 4-bit b). Returns (a, b)."""
    rng = np.random.default_rng(9)
    a, b = q(rng, U8, (20, 33)), q(rng, bdt, (33, 3))
    s = np.full((20, 1), 1.0, F32)
    s[:4, 0] = [np.nan, np.inf, -np.inf, 0.0]
    with np.errstate(all="ignore"):
        for dt in (F32, F16):
            same(dmlq.matmul_integer_to_float, a, s, np.uint8(255), wrap(b), np.array([1, -0.0, 1e30], F32), None,
                 dtype=dt)
            same(dmlq.matmul_integer_to_float, a[:, :1], s, None, wrap(b[:1]), np.float32(7), None, dtype=dt)
    return a, b


def test_k_zero_and_empty(gpu):
    a, b = np.zeros((20, 0), U8), np.zeros((0, 7), I8)
    same(dmlq.matmul_integer, a, b, np.uint8(3), np.int8(4))
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, np.float32(np.inf), np.uint8(1), b, np.float32(-2), None,
             np.arange(7, dtype=F32))
    S.launches.clear()
    out = dmlq.matmul_integer(dev(np.zeros((0, 5), U8)), dev(np.zeros((5, 3), I8)))
    assert out.shape == (0, 3) and S.launches == []


def test_kernel_plan_names_the_tiled_variant(gpu):
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, np.zeros((130, 260), U8), 0.1, None,
                                np.zeros((260, 140), I8), 0.1, None, dtype=np.float16))
    assert plan.splitlines()[0].startswith("matmul_integer_to_float: mma-128x128"), plan
    assert "matmul_mma<uint8, int8, float16, 128, 128, 64, 4, 4>" in plan
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, np.zeros((40, 64), U8), 0.1, None,
                                np.zeros((64, 8), I8), np.ones((2, 8), F32), None, block_size=32))
    assert plan.splitlines()[0].startswith("matmul_integer_to_float: dp4a-wide"), plan
    assert "groups of 32 along K" in plan


def test_quantized_matmul_per_batch_parameters(gpu):
    """QLinearMatMul's per-batch b parameters ((..., 1, N)) on every kernel kind."""
    rng = np.random.default_rng(11)
    for (m, k, n), kernel in [((17, 40, 6), "matmul_dp4a"), ((130, 260, 140), "matmul_mma"),
                              ((3, 40, 6), "matmul_stream_packed"), ((5, 40, 6), None)]:
        a, b = q(rng, U8, (2, m, k)), q(rng, I8, (2, k, n))
        b_s = rng.uniform(1e-3, 1e-2, (2, 1, n)).astype(F32)
        bzp = q(rng, I8, (2, 1, n))
        same(dmlq.quantized_matmul, a, np.float32(0.05), np.uint8(128), b, b_s, bzp, np.float32(0.5), np.uint8(9),
             kernel=kernel)
        same(dmlq.quantized_matmul, a, np.float32(0.05), None, b, b_s, None, np.float32(0.5), kernel=kernel)


def test_forced_wide_kernel_k_zero_keeps_the_sign_of_mult(gpu):
    """K = 0 without blocks is one empty group: v = 0 * mult, so -0.0 where a_scale * b_scale < 0
    (docs/semantics.md), also on the wide dp4a kernel, which selection takes only past K = 32768
    and the kernel fuzz forces at any K (it once gave +0.0 there)."""
    from dmlq.gpu import intmm_tiled, matmul

    a, b = np.zeros((20, 0), U8), np.zeros((0, 7), I8)
    b_s = np.array([-1, 256, -0.5, 1, -np.inf, 0, -3], F32)
    bias = None
    with np.errstate(all="ignore"):
        want = dmlq.matmul_integer_to_float(a, np.float32(0.625), None, b, b_s, None, bias)
    assert np.signbit(want[0, 0]) and not np.signbit(want[0, 1])  # the case the test is about
    da, db = dev(a), dev(b)
    out = S.module.asarray(poison(np.empty(want.shape, want.dtype)))
    p = matmul.plan_tiled("matmul_integer_to_float", da, False, intmm_tiled._check("matmul_integer_to_float", da, db,
                          None), False, out, variant="dp4a-wide", k_group=0)
    S.launches.clear()
    a_s, bs = S.module.asarray(np.float32(0.625)), S.module.asarray(b_s)
    intmm_tiled._bind(p, da, db, out, None, a_s, None, bs, None, bias)(da, a_s, None, db, bs, None, bias, out)
    assert "matmul_dp4a_wide" in kernels(), kernels()
    assert_same(out.get(), want)  # the zeros' signs bit for bit; 0 * -inf any NaN
