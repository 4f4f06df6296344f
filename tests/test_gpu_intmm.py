"""dmlq.matmul_integer / matmul_integer_to_float on the GPU path at small M: the tiled kernels
(selection's choice at every M) and cuda/matmul_stream.cu (blocked scales whose group is not a
multiple of 32), run by the host harness (tests/cuda_host) through the public functions on CuPy
arrays of the cupy stand-in (tests/cupy_stand_in), byte for byte against the NumPy reference on
seeded random inputs and the contract's edge cases."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from dmlq.gpu import intmm as G
from conftest import assert_same, poison
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
BF16 = np.dtype(ml_dtypes.bfloat16)


def dev(x):
    if isinstance(x, dmlq.Packed) and isinstance(x.data, np.ndarray):
        return dmlq.Packed(S.module.asarray(x.data), x.shape, x.dtype)
    return S.module.asarray(x) if isinstance(x, np.ndarray) else x


def same(fn, *args, **kwargs):
    """fn on stand-ins, into a poisoned out, equals fn on NumPy arrays (dtype, shape, every byte;
    a float NaN matches any NaN)."""
    want = fn(*args, **kwargs)
    out = S.module.asarray(poison(np.empty(want.shape, want.dtype)))
    got = fn(*(dev(a) for a in args), **kwargs, out=out)
    assert got is out
    assert_same(got.get(), want)
    fresh = fn(*(dev(a) for a in args), **kwargs)  # and into a new array
    assert type(fresh) is S.module.ndarray and fresh.dtype == want.dtype
    assert_same(fresh.get(), want)


def q(rng, dt, shape):
    info = ml_dtypes.iinfo(dt) if dt in (I4, U4) else np.iinfo(dt)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dt)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 37, 5), (3, 64, 130), (4, 0, 7), (7, 33, 1), (16, 100, 9)])
@pytest.mark.parametrize("ta,tb", [(U8, I8), (I8, I8), (U8, U8), (I8, U8)])
def test_matmul_integer(gpu, m, k, n, ta, tb):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
    same(dmlq.matmul_integer, a, b, q(rng, ta, (m, 1)), q(rng, tb, (n,)))
    same(dmlq.matmul_integer, a, b)


@pytest.mark.parametrize("out_dtype", [F32, F16, BF16])
@pytest.mark.parametrize("m,k,n,block", [(1, 64, 33, None), (2, 100, 17, 32), (5, 31, 8, 32), (16, 257, 4, 64),
                                         (3, 0, 5, None), (3, 0, 5, 32), (1, 1, 1, 1)])
def test_matmul_integer_to_float(gpu, out_dtype, m, k, n, block):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = q(rng, U8, (m, k)), q(rng, I8, (k, n))
    groups = -(-k // block) if block else 1
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    bzp = q(rng, I8, (groups, n))
    bias = rng.uniform(-50, 50, n).astype(F32)
    kw = dict(dtype=out_dtype, block_size=block)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, a_s, q(rng, U8, (m, 1)), b, b_s, bzp, bias, **kw)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, b, b_s[:1], None, **kw)


def test_batches_broadcast_and_per_batch_parameters(gpu):
    rng = np.random.default_rng(1)
    a, b = q(rng, I8, (2, 1, 3, 40)), q(rng, I8, (4, 40, 6))
    b_s = rng.uniform(0, 1, (4, 1, 6)).astype(F32)
    bzp = q(rng, I8, (4, 1, 6))
    bias = rng.uniform(-1, 1, (3, 6)).astype(F16)
    same(dmlq.matmul_integer_to_float, a, np.float16(0.5), np.int8(3), b, b_s, bzp, bias)
    same(dmlq.matmul_integer, a, b, None, bzp)


def test_edge_values(gpu):
    """Extreme sums (past int32: exact in the float output, wrapped in the int32 one), float16
    overflow, NaN / inf / zero scales, a strided a."""
    k = 40000
    a = np.zeros((2, k), U8)
    b = np.full((k, 3), 255, U8)
    b[:, 1] = 0
    same(dmlq.matmul_integer, a, b, np.uint8(255), None)
    same(dmlq.matmul_integer_to_float, a, np.float32(1), np.uint8(255), b, np.float32(1), None)
    s = np.array([[np.nan], [np.inf]], F32)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a[:, :5], s, np.uint8(255), b[:5], np.float32(-0.0), None)
        same(dmlq.matmul_integer_to_float, a[:, :5], np.float32(1e30), np.uint8(255), b[:5],
             np.array([1, 0, 1e-30], F32), None, dtype=np.float16)
    big = q(np.random.default_rng(2), U8, (3, 50))
    same(dmlq.matmul_integer_to_float, big[:, ::2], np.float32(0.1), None, b[:25], np.float32(0.2), None)


@pytest.mark.parametrize("m,k,n,block,packed,native", [
    (40, 70, 9, None, False, None), (3, 64, 33, 32, False, "finish"), (20, 100, 7, 48, True, None),
    (40, 96, 5, 32, True, None), (2, 10, 3, 3, False, "finish"), (5, 64, 9, None, True, "finish"),
    (130, 256, 144, None, False, "mma"), (130, 260, 140, None, False, None), (40, 1024, 128, None, False, "mma split-K"),
    (130, 256, 140, None, "kmajor", "mma K-major")])
def test_bfloat16_out_scales_and_bias(gpu, m, k, n, block, packed, native):
    """bfloat16 scales, bias and out (CuPy 14 holds bfloat16) on each path selection takes, bit for
    bit the NumPy result (itself the float32 result rounded once: tests/test_intmm.py): written by
    the kernels themselves where they have a bfloat16 twin (``native``: the grouped stream kernel's
    finish pass at M <= 16, the chunks' or groups' sums; the tensor-core tile of an 8-bit b,
    row-major or K-major, with 16-byte copies, and its split-K epilogue), else (K = 260: the 4-byte
    copies' tile) the float32 kernels into a temporary that CuPy's cast rounds; the plan says which."""
    rng = np.random.default_rng(m + k + n)
    groups = -(-k // block) if block else 1
    a, b = q(rng, U8, (m, k)), q(rng, I4 if packed is True else I8, (k, n))
    if packed == "kmajor":  # the transposed view of an (N, K) weight
        b, packed = np.ascontiguousarray(b.T).T, False
    b_s = rng.uniform(-1, 1, (groups, n)).astype(BF16)
    b_s[0, 0] = 3e38  # a float32 result past bfloat16's largest finite value
    b_s[-1, -1] = np.nan
    bias = rng.uniform(-50, 50, n).astype(BF16)
    b = dmlq.pack(b) if packed else b
    args = (a, rng.uniform(1e-3, 1, (m, 1)).astype(BF16), q(rng, U8, (m, 1)), b, b_s, None, bias)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, *args, dtype=BF16, block_size=block)
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, *(dev(x) for x in args), dtype=BF16, block_size=block))
    if native == "finish":
        assert "matmul_stream_grouped_finish<bfloat16>" in plan and "temporary" not in plan, plan
    elif native:
        assert plan.splitlines()[0].startswith("matmul_integer_to_float: mma-128x128") and "temporary" not in plan
        kernel = "matmul_splitk_epilogue<uint8, int8, bfloat16>" if "split" in native else \
            f"matmul_mma<uint8, {'kmajor_int8' if 'K-major' in native else 'int8'}, bfloat16, 128, 128, 64, 4, "
        assert kernel in plan, plan
    else:
        assert "bfloat16 out: a float32 temporary rounded by CuPy's cast" in plan.splitlines()[0], plan
        assert "float16" not in plan.replace("bfloat16", ""), plan  # the float32 kernels


def test_bfloat16_out_into_a_strided_view(gpu):
    """out= a strided bfloat16 view, on both bfloat16 paths (M = 3: the finish pass, through a
    temporary of out's type; M = 40: the float32 temporary's cast into the view): its elements
    the fresh call's, the bytes between them untouched."""
    rng = np.random.default_rng(44)
    for m in (3, 40):
        a, b = q(rng, U8, (m, 64)), q(rng, I8, (64, 9))
        want = dmlq.matmul_integer_to_float(a, np.float32(0.1), np.uint8(3), b, np.float32(0.2), None, dtype=BF16)
        big = S.module.asarray(np.full((m, 20), 7, BF16))
        out = big[:, ::2][:, :9]
        assert dmlq.matmul_integer_to_float(dev(a), np.float32(0.1), np.uint8(3), dev(b), np.float32(0.2), None,
                                            out=out) is out
        host = big.get()
        assert np.array_equal(host[:, ::2][:, :9].view(np.uint16), want.view(np.uint16))
        assert (host[:, 1::2].astype(F32) == 7).all() and (host[:, 18].astype(F32) == 7).all()


def test_selection_and_refusals(gpu):
    assert [G.select_variant(m) for m in (1, 2, 4, 5, 16, 17)] == \
        ["stream-m1", "stream-m4", "stream-m4", "stream-m16", "stream-m16", None]
    a, b = dev(np.zeros((17, 8), U8)), dev(np.zeros((8, 4), I8))  # past 16 rows: the tiled kernels
    assert str(dmlq.kernel_plan(dmlq.matmul_integer, a, b)).splitlines()[0] == "matmul_integer: dp4a-32x32"
    with pytest.raises(ValueError, match="a has K = 8 columns but b has 7 rows"):  # the host's checks first
        dmlq.matmul_integer(dev(np.zeros((3, 8), U8)), dev(np.zeros((7, 2), I8)))
    a, b = np.zeros((4, 64), U8), np.zeros((64, 300), I8)
    plan = dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, b, 0.1, None, dtype=np.float16)
    assert str(plan).splitlines()[0].startswith("matmul_integer_to_float: stream-m4 ")  # small M: the
    assert "matmul_stream_grouped<uint8, int8, 4>" in str(plan)  # weight-streaming kernel (one group a chunk)
    plan = dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, b, np.full((2, 300), 0.1, F32), None,
                            dtype=np.float16, block_size=48)  # groups the tiled kernels cannot close:
    assert "matmul_stream_grouped<uint8, int8, 4>  grid 5x1x2  block 128" in str(plan)  # a chunk of K each
    plan = dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, b, np.full((32, 300), 0.1, F32), None,
                            dtype=np.float16, block_size=2)  # whose workspace would be 16x b's bytes
    assert str(plan).splitlines()[0] == "matmul_integer_to_float: stream-m4 (32 groups of 2 along K)"
    assert "matmul_stream<uint8, int8, float16, 4>  grid 3x1  block 128" in str(plan)


def _stream_ran(fn, *args, **kwargs):
    """``same`` on a call that selection sends to cuda/matmul_stream.cu, or at M <= 16 to the
    grouped stream kernel where its workspace fits (qmm_stream.work_fits): the kernel the
    plan names must be the one that ran."""
    plan = str(dmlq.kernel_plan(fn, *(dev(a) for a in args), **kwargs))
    assert plan.startswith("matmul_integer_to_float: stream-"), plan
    kernel = "matmul_stream_grouped<" if "stream-grouped-" in plan else "matmul_stream<"
    assert ("  " + kernel) in plan, plan
    S.launches.clear()
    same(fn, *args, **kwargs)
    assert any(name.startswith(kernel) for name, *_ in S.launches), S.launches


@pytest.mark.parametrize("out_dtype", [F32, F16])
@pytest.mark.parametrize("m,k,n,block", [(1, 64, 33, 20), (3, 100, 17, 33), (16, 257, 4, 48), (1, 5, 1, 1),
                                         (17, 70, 5, 7), (4, 31, 9, 30), (4, 30, 9, 2), (16, 40, 5, 3)])
@pytest.mark.parametrize("ta,tb", [(U8, I8), (I8, U8), (U8, U4), (I8, I4)])
def test_stream_kernel_groups_not_a_multiple_of_32(gpu, out_dtype, m, k, n, block, ta, tb):
    """Every MT (1, 4, 16, stream-rows past 16) and b type, per-group b scales and zero points,
    per-row a parameters, a bias: matmul_stream.cu's ground (groups the tiles cannot close) where
    the grouped stream kernel does not take them (past 16 rows; groups of 1-3 rows, whose
    workspace would outgrow the rule; a 4-bit b's groups of 1 at M = 1), and the grouped kernel
    (one chunk of K per group) on the others."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n + block)
    groups = -(-k // block)
    a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    bzp = q(rng, tb, (groups, n))
    bias = rng.uniform(-50, 50, n).astype(F32)
    if tb in (I4, U4):
        b, bzp = dmlq.pack(b), dmlq.pack(bzp)
    with np.errstate(all="ignore"):
        _stream_ran(dmlq.matmul_integer_to_float, a, rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                    b, b_s, bzp, bias, dtype=out_dtype, block_size=block)
        _stream_ran(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, b, b_s, None,
                    dtype=out_dtype, block_size=block)


def test_stream_kernel_edge_values(gpu):
    """On the stream kernel: a group longer than 33025 (int32 partials folded into an int64, exact
    past int32 in the float output), float16 overflow, NaN / inf / zero scales, a strided a."""
    k = 40000
    a = np.zeros((2, k), U8)
    b = np.full((k, 3), 255, U8)
    b[:, 1] = 0
    _stream_ran(dmlq.matmul_integer_to_float, a, np.float32(1), np.uint8(255), b, np.ones((2, 3), F32), None,
                block_size=k - 1)
    s = np.array([[np.nan], [np.inf]], F32)
    with np.errstate(all="ignore"):
        _stream_ran(dmlq.matmul_integer_to_float, a[:, :5], s, np.uint8(255), b[:5], np.full((2, 3), -0.0, F32),
                    None, block_size=3)
        _stream_ran(dmlq.matmul_integer_to_float, a[:, :5], np.float32(1e30), np.uint8(255), b[:5],
                    np.array([[1, 0, 1e-30]] * 2, F32), None, dtype=np.float16, block_size=3)
    big = q(np.random.default_rng(2), U8, (3, 50))
    _stream_ran(dmlq.matmul_integer_to_float, big[:, ::2], np.float32(0.1), None, b[:25], np.full((3, 3), 0.2, F32),
                None, block_size=10)
    # every group's term -0.0 (zero sums, a negative multiplier): the sum starts from the first
    # term, not from +0.0 (+0.0 + -0.0 is +0.0), so the output is -0.0 (docs/semantics.md)
    for m in (3, 20):  # stream-m4 and stream-rows
        _stream_ran(dmlq.matmul_integer_to_float, np.zeros((m, 50), U8), np.float32(-0.5), None,
                    np.ones((50, 4), I8), np.full((3, 4), 2.0, F32), np.int8(1), block_size=20)


# ------------------------------------------------------------------ 4-bit b (dmlq.Packed)

@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 37, 5), (3, 64, 130), (4, 0, 7), (7, 33, 1), (16, 99, 9),
                                   (2, 3, 3)])
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_packed_matmul_integer(gpu, m, k, n, ta, tb):
    """Odd K * N: rows of b start in the middle of a byte; zero points packed, as an int, or none."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n + 7)
    a, b = q(rng, ta, (m, k)), q(rng, tb, (k, n))
    p = dmlq.pack(b)
    same(dmlq.matmul_integer, a, p, q(rng, ta, (m, 1)), dmlq.pack(q(rng, tb, (n,))))
    same(dmlq.matmul_integer, a, p, None, int(q(rng, tb, ())))
    same(dmlq.matmul_integer, a, p)


@pytest.mark.parametrize("out_dtype", [F32, F16, BF16])
@pytest.mark.parametrize("m,k,n,block", [(1, 64, 33, None), (2, 100, 17, 32), (5, 31, 8, 32), (16, 257, 4, 64),
                                         (3, 0, 5, 32), (1, 1, 1, 1), (4, 96, 3, 256)])
@pytest.mark.parametrize("tb", [I4, U4])
def test_packed_matmul_integer_to_float(gpu, out_dtype, m, k, n, block, tb):
    rng = np.random.default_rng(m * 1000 + k * 10 + n + 11)
    a, b = q(rng, U8, (m, k)), q(rng, tb, (k, n))
    groups = -(-k // block) if block else 1
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    bias = rng.uniform(-50, 50, n).astype(F32)
    kw = dict(dtype=out_dtype, block_size=block)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, a_s, q(rng, U8, (m, 1)), dmlq.pack(b), b_s,
             dmlq.pack(q(rng, tb, (groups, n))), bias, **kw)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, dmlq.pack(b), b_s[:1],
             dmlq.pack(q(rng, tb, (n,))), **kw)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, dmlq.pack(b), b_s, 3, **kw)


def test_packed_batches_extremes_and_strided_bytes(gpu):
    rng = np.random.default_rng(3)
    a, b = q(rng, I8, (2, 1, 3, 41)), q(rng, I4, (4, 41, 7))
    b_s = rng.uniform(0, 1, (4, 1, 7)).astype(F32)
    same(dmlq.matmul_integer_to_float, a, np.float16(0.5), np.int8(3), dmlq.pack(b), b_s, -8)
    same(dmlq.matmul_integer, a, dmlq.pack(b), None, 7)
    k = 1001  # every term 255 * -15 (a = 255 - 0, b = -8 - 7); float16 overflows to -inf
    ext_a, ext_b = np.full((3, k), 255, U8), dmlq.pack(np.full((k, 5), -8, I4))
    same(dmlq.matmul_integer, ext_a, ext_b, None, 7)
    same(dmlq.matmul_integer_to_float, ext_a, np.float32(1), None, ext_b, np.float32(1), 7, dtype=np.float16)
    same(dmlq.matmul_integer_to_float, ext_a, np.float32(1), None, ext_b, np.float32(1), 7, dtype=np.float32)
    # the packed bytes as a strided view (copied to contiguous bytes first)
    p = dmlq.pack(q(rng, U4, (41, 7)))
    wide = S.module.asarray(np.repeat(p.data, 2))
    strided = dmlq.Packed(wide[::2], p.shape, p.dtype)
    a2 = q(rng, U8, (2, 41))
    got = dmlq.matmul_integer(S.module.asarray(a2), strided, None, 5)
    np.testing.assert_array_equal(got.get(), dmlq.matmul_integer(a2, p, None, 5))
    plan = dmlq.kernel_plan(dmlq.matmul_integer, S.module.asarray(a2), strided)
    assert "b copied to a contiguous array" in str(plan)


def test_packed_refusals_on_the_gpu(gpu):
    a = S.module.asarray(np.zeros((2, 4), U8))
    p = dev(dmlq.pack(np.zeros((4, 3), I4)))
    with pytest.raises(TypeError, match="b_zero_point must be a Python int, an array of dtype int4"):
        dmlq.matmul_integer(a, p, None, S.module.asarray(np.zeros(3, I8)))
    with pytest.raises(TypeError, match="NumPy and GPU arrays are mixed"):
        dmlq.matmul_integer(a, dmlq.pack(np.zeros((4, 3), I4)))


def test_check_random_covers_the_integer_family(gpu):
    """`python -m dmlq check`'s GPU random part for matmul_integer / matmul_integer_to_float (int8, uint8 and
    packed 4-bit b, M = 1, 5, 16), run through the stand-in: every case equal to the reference."""
    from dmlq import check, check_cases
    table = {}
    for row in check_cases._random_intmm(np.random.default_rng(0)):
        ok, detail = check._judge((*row, None), S.module)
        table.setdefault(row[0], []).append((ok, f"{row[1]}: {detail}"))
    assert {op: len(v) for op, v in table.items()} == {"mm_integer": 24, "mm_float": 96}
    assert [what for v in table.values() for ok, what in v if not ok] == []
    assert any("packed int4 M=16 blocked 64" in what for _, what in table["mm_float"])
    assert any("packed int4 M=16 blocked 48" in what for _, what in table["mm_float"])  # the stream kernels
