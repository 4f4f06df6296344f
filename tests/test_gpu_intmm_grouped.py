"""The integer matmul family with a packed 4-bit b at small M (the decode step of a weight-only int4
layer): cuda/matmul_stream_packed.cu's ``matmul_stream_grouped`` (exact int32 sums per group of rows
of b to a workspace) and ``matmul_stream_grouped_finish`` (the output from them). Blocked scales along
K (onnxruntime MatMulNBits' layout): a chunk of K holds whole groups, the float steps add the groups in
ascending order. One group of scales (matmul_integer_to_float per tensor / row / column, and
matmul_integer's int32): each chunk of K its own group, added as integers by the finish pass. Run by
the host harness through the public functions on arrays of the cupy stand-in, into poisoned outputs,
byte for byte against the NumPy reference; each test asserts which kernels ran. The harness reports 4
SMs, so a long K with few columns splits K (the plans' notes say so)."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_packed import I4, U4
from test_gpu_intmm_tiled import kernels, launched, same
from dmlq.gpu import qmm_stream

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
GROUPED = "matmul_stream_grouped<"
FINISH = "matmul_stream_grouped_finish<"


def _plan(a, b, b_s, block, **kw):
    return str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, dev(a), np.float32(1), None, dev(b), dev(b_s), None,
                                block_size=block, **kw))


def _call(rng, m, k, n, block, ta, tb, *, a_zp, b_zp, bias, out_dtype, batch=()):
    groups = -(-k // block)
    a = q(rng, ta, batch + (m, k))
    b = dmlq.pack(q(rng, tb, batch + (k, n)))
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    b_s = rng.uniform(-1, 1, batch + (groups, n)).astype(F16 if out_dtype == F16 else F32)
    azp = {"none": None, "tensor": q(rng, ta, ()), "row": q(rng, ta, (m, 1))}[a_zp]
    bzp = {"none": None, "int": int(q(rng, tb, ())), "column": dmlq.pack(q(rng, tb, (n,))),
           "group": dmlq.pack(q(rng, tb, batch + (groups, n)))}[b_zp]
    bias_v = {"none": None, "column": rng.uniform(-9, 9, n).astype(F32),
              "matrix": rng.uniform(-9, 9, (m, n)).astype(F16)}[bias]
    grouped = qmm_stream.work_fits(m, k, block)  # else selection keeps dp4a-wide (its workspace would outgrow b)
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, a_s, azp, b, b_s, bzp, bias_v, dtype=out_dtype, block_size=block,
             kernel=GROUPED if grouped else "matmul_dp4a_wide<")
    assert any(n.startswith(FINISH) for n, *_ in S.launches) == grouped, kernels()
    return a, b, b_s


# (m, k, n, block): M = 1, 4 and 16 (the three row counts), K ragged against the groups and the
# 64-row stages, groups of 32 (two per stage), 64, 96 (straddling stages) and 128; N a multiple of 32
# (16-byte loads) or not (the nibble path), odd (rows start mid-byte).
CASES = [(1, 256, 64, 32), (1, 300, 70, 64), (3, 200, 33, 64), (4, 1000, 130, 96), (16, 1000, 32, 256),
         (2, 33, 5, 32), (16, 1300, 9, 160), (1, 4096, 32, 128)]


@pytest.mark.parametrize("m,k,n,block", CASES)
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_random_cases(gpu, m, k, n, block, ta, tb):
    rng = np.random.default_rng(m * 100003 + k * 101 + n + block)
    for a_zp, b_zp, bias, out_dtype in (("row", "group", "column", F32), ("tensor", "int", "matrix", F16),
                                        ("none", "column", "none", F32), ("none", "none", "column", F16)):
        _call(rng, m, k, n, block, ta, tb, a_zp=a_zp, b_zp=b_zp, bias=bias, out_dtype=out_dtype)


# Groups not a multiple of 32 rows (the kernel closes a group only at a half stage): one chunk of
# K per group, so a chunk starts anywhere in a stage (kb = z * group), and its last k-word is cut
# by the chunk's end; lengths 3 (every k-word straddles a group), 33, 40, 48, 65 and 100, ragged
# last groups, N past 64 and odd, M = 1 ... 16.
ODD_GROUPS = [(1, 300, 70, 48), (3, 200, 33, 33), (4, 130, 64, 100), (16, 150, 9, 40), (1, 10, 5, 3),
              (1, 257, 96, 65)]


@pytest.mark.parametrize("m,k,n,block", ODD_GROUPS)
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_groups_not_a_multiple_of_32(gpu, m, k, n, block, ta, tb):
    rng = np.random.default_rng(m * 7919 + k * 31 + n + block)
    assert qmm_stream.work_fits(m, k, block)
    for a_zp, b_zp, bias, out_dtype in (("row", "group", "column", F32), ("tensor", "int", "matrix", F16),
                                        ("none", "column", "none", F32), ("none", "none", "column", F16)):
        a, b, b_s = _call(rng, m, k, n, block, ta, tb, a_zp=a_zp, b_zp=b_zp, bias=bias, out_dtype=out_dtype)
    text = _plan(a, b, b_s, block)
    groups = -(-k // block)
    assert f"{groups} groups of {block} along K, one per chunk of K" in text, text
    assert f"grid {-(-n // 64)}x1x{groups} " in text, text


def test_groups_not_a_multiple_of_32_per_batch(gpu):
    """Batched a and b with per-batch blocked scales and zero points (the tables bp_bs elements apart
    per matrix, blockIdx.y) and groups of 48: one chunk of K per group in every matrix."""
    rng = np.random.default_rng(48)
    a, b, b_s = _call(rng, 3, 130, 40, 48, U8, I4, a_zp="row", b_zp="group", bias="column", out_dtype=F32,
                      batch=(2,))
    assert "grid 1x2x3 " in _plan(a, b, b_s, 48)


def test_odd_groups_leave_the_grouped_kernel_where_its_workspace_would_outgrow_the_rule(gpu):
    """Groups of 3 rows at M = 16 make a workspace 43x b's bytes: matmul_stream.cu, as for every M
    past 16 (stream-rows); both the reference's bits."""
    rng = np.random.default_rng(11)
    for m, kernel in ((16, "matmul_stream<"), (17, "matmul_stream<")):
        a, b = q(rng, U8, (m, 30)), dmlq.pack(q(rng, U4, (30, 6)))
        b_s = rng.uniform(-1, 1, (10, 6)).astype(F32)
        assert GROUPED not in _plan(a, b, b_s, 3)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, b_s, 8, None, dtype=F32, block_size=3,
             kernel=kernel)


def test_split_k_keeps_whole_groups(gpu):
    """Few columns and a long K: the plan splits K into chunks of whole groups and whole stages
    (groups of 96: chunks of 192k rows) and the sums still meet in order."""
    rng = np.random.default_rng(5)
    a, b, b_s = _call(rng, 4, 4000, 40, 96, U8, U4, a_zp="row", b_zp="group", bias="column", out_dtype=F32)
    text = _plan(a, b, b_s, 96)
    assert "stream-grouped-m4" in text and "split-K" in text and "(whole groups" in text, text
    assert int(text.split("chunks of ")[1].split(" ")[0]) % 192 == 0, text
    _call(rng, 1, 8192, 8, 32, I8, I4, a_zp="tensor", b_zp="int", bias="none", out_dtype=F16)
    assert "split-K" in _plan(np.zeros((1, 8192), I8), dmlq.pack(np.zeros((8192, 8), I4)),
                              np.zeros((256, 8), F32), 32)


def test_batches_and_per_batch_scales(gpu):
    rng = np.random.default_rng(6)
    _call(rng, 3, 200, 48, 64, U8, I4, a_zp="row", b_zp="group", bias="column", out_dtype=F32, batch=(2,))
    a = q(rng, U8, (2, 1, 4, 160))
    b = dmlq.pack(q(rng, U4, (3, 160, 33)))
    b_s = rng.uniform(0, 1, (5, 33)).astype(F32)  # one table for every matrix
    same(dmlq.matmul_integer_to_float, a, np.float32(0.5), np.uint8(3), b, b_s, 8, block_size=32, kernel=GROUPED)


def test_extreme_sums_and_special_values(gpu):
    """The largest group sums (a = 255 or -128 against b = -8 or 15 and extreme zero points), a group of
    4096 (sums of 2**31 / 4 magnitude), NaN / inf / +-0 scales, float16 overflow to inf."""
    for ta, av, za, tb, bv, zb in ((U8, 255, 0, I4, -8, 7), (I8, -128, 127, U4, 15, 0), (U8, 0, 255, U4, 15, 0)):
        a = np.full((2, 8192), av, ta)
        b = dmlq.pack(np.full((8192, 6), bv, tb))
        for block in (32, 4096):
            b_s = np.ones((8192 // block, 6), F32)
            for dt in (F32, F16):
                with np.errstate(all="ignore"):
                    same(dmlq.matmul_integer_to_float, a, np.float32(1), ta.type(za), b, b_s, zb, dtype=dt,
                         block_size=block, kernel=GROUPED)
    rng = np.random.default_rng(7)
    a, b = q(rng, U8, (6, 200)), dmlq.pack(q(rng, I4, (200, 4)))
    a_s = np.array([[np.nan], [np.inf], [-np.inf], [0.0], [-0.0], [1e30]], F32)
    b_s = np.array([[1, -0.0, 1e30, -1]] * 4, F32)
    b_s[2, 0] = np.nan
    with np.errstate(all="ignore"):
        for dt in (F32, F16):
            same(dmlq.matmul_integer_to_float, a, a_s, None, b, b_s, 3, dtype=dt, block_size=64, kernel=GROUPED)


def test_selection(gpu):
    """The grouped kernel takes more than one group at M <= 16 (a packed or an 8-bit b; a length not a
    multiple of 32 one chunk of K per group); dp4a-wide past M = 16 and where the workspace outgrows
    the rule for groups of a multiple of 32, one group the same kernel with a group per chunk
    (stream-m*), other group lengths past the rule matmul_stream.cu (stream-m*: its kernel named in
    the plan)."""
    rng = np.random.default_rng(8)
    b4, b8 = dmlq.pack(q(rng, U4, (128, 8))), q(rng, I8, (128, 8))
    b_s = np.ones((43, 8), F32)
    for m, b, block, variant in ((1, b4, 32, "stream-grouped-m1"), (4, b4, 32, "stream-grouped-m4"),
                                 (16, b4, 64, "dp4a-wide"), (17, b4, 32, "dp4a-wide"),
                                 (1, b8, 32, "stream-grouped-m1"), (1, b4, 128, "stream-m1"),
                                 (1, b4, 48, "stream-grouped-m1"), (16, b4, 3, "stream-m16")):
        text = _plan(np.zeros((m, 128), U8), b, b_s[: -(-128 // block)], block)
        assert text.startswith(f"matmul_integer_to_float: {variant} "), (m, block, text)
    # M = 16: groups of 64 make a workspace twice b's bytes (dp4a-wide above), of 128 as large as b's
    b16, s16 = dmlq.pack(q(rng, U4, (1024, 8))), np.ones((8, 8), F32)
    assert _plan(np.zeros((16, 1024), U8), b16, s16, 128).startswith("matmul_integer_to_float: stream-grouped-m16 ")
    # forced past the rule (the bench times both): the same bits
    from dmlq.gpu import intmm_tiled
    from conftest import assert_same

    a16, b_s2 = q(rng, U8, (16, 128)), rng.uniform(-1, 1, (4, 8)).astype(F32)  # MT = 16, two groups a stage
    want = dmlq.matmul_integer_to_float(a16, np.float32(0.5), None, b4, b_s2, 3, block_size=32)
    out = S.module.asarray(np.full(want.shape, np.nan, F32))
    da, db, ds = dev(a16), dev(b4), dev(b_s2)
    a_s, zp, bp = dev(np.float32(0.5).reshape(1)), dev(np.full((4, 8), 3, U8)), ("uint4", (128, 8), True)
    plan = intmm_tiled.plan_matmul_integer_to_float(da, a_s, None, db.data, ds, zp, None, out, block_size=32,
                                                   variant="stream-grouped", b_packed=bp)
    assert plan.variant == "stream-grouped-m16", plan
    intmm_tiled._bind(plan, da, db.data, out, bp, a_s, None, ds, zp, None)(da, a_s, None, db.data, ds, zp, None, out)
    assert_same(out.get(), want)
    with pytest.raises(ValueError, match="does not apply"):
        intmm_tiled.plan_matmul_integer_to_float(dev(np.zeros((17, 128), U8)), a_s, None, db.data, ds, zp, None,
                                                 S.module.empty((17, 8), F32), block_size=64,
                                                 variant="stream-grouped", b_packed=bp)
    text = _plan(np.zeros((1, 128), U8), b4, b_s[:4], 32)
    assert "4 groups of 32 along K: exact int32 sums per group (128 bytes)" in text, text


def test_seeded_shapes(gpu):
    """20 seeded draws over the kernel's geometry: M 1..16, K up to 3000 (ragged against groups and
    stages), groups of 32..256 (multiples of 32: dividing 64, equal to it, straddling stages), N 1..200
    (few columns split K on the harness's 4 SMs), a batch of 1 or 2; zero points and bias forms drawn."""
    rng = np.random.default_rng(2026)
    split = 0
    for i in range(20):
        m = int(rng.integers(1, 17))
        block = 32 * int(rng.integers(1, 9))
        k = int(rng.integers(block + 1, 3001))
        n = int(rng.integers(1, 201))
        ta, tb = ((U8, I4), (I8, U4), (U8, U4), (I8, I4))[i % 4]
        batch = ((), (2,))[int(rng.integers(0, 2))]
        _call(rng, m, k, n, block, ta, tb, batch=batch, out_dtype=(F32, F16)[i % 2],
              a_zp=("none", "tensor", "row")[i % 3], b_zp=("none", "int", "column", "group")[i % 4],
              bias=("none", "column", "matrix")[i % 3])
        split += "split-K" in _plan(np.zeros(batch + (m, k), ta), dmlq.pack(np.zeros(batch + (k, n), tb)),
                                    np.zeros(batch + (-(-k // block), n), F32), block)
    assert split >= 5, split  # the draws reach the split path often


def _plan_of(fn, *args, **kw):
    return str(dmlq.kernel_plan(fn, *(dev(v) for v in args), **kw))


# (m, k, n): the grouped cases' geometry without groups, K = 1, and a K of one stage plus one row
SUMS_CASES = [(1, 256, 64), (1, 300, 70), (3, 200, 33), (4, 1000, 130), (16, 1000, 32), (2, 33, 5),
              (16, 1300, 9), (1, 4096, 32), (5, 1, 7), (8, 65, 64)]


@pytest.mark.parametrize("m,k,n", SUMS_CASES)
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_one_group_of_scales(gpu, m, k, n, ta, tb):
    """matmul_integer and matmul_integer_to_float with one group of scales: the grouped kernel with each
    chunk of K its own group, the finish pass adding the chunks as integers, then the int32 sum or the
    float steps (scales per tensor, row and column, every zero point and bias form, both float outputs)."""
    rng = np.random.default_rng(m * 7919 + k * 13 + n)
    a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    text = _plan_of(dmlq.matmul_integer, a, b)
    assert f"matmul_integer: stream-m{next(r for r in (1, 4, 16) if m <= r)} " in text, text
    for a_zp, b_zp in ((None, None), (q(rng, ta, (m, 1)), dmlq.pack(q(rng, tb, (n,)))),
                       (q(rng, ta, ()), int(q(rng, tb, ()))), (None, dmlq.pack(q(rng, tb, (1, n))))):
        same(dmlq.matmul_integer, a, b, a_zp, b_zp, kernel=GROUPED)
        assert launched(FINISH + "int>"), kernels()
    for out_dtype, a_s, b_s, a_zp, b_zp, bias in (
            (F32, rng.uniform(1e-3, 1, (m, 1)).astype(F32), rng.uniform(-1, 1, n).astype(F16),
             q(rng, ta, (m, 1)), dmlq.pack(q(rng, tb, (1, n))), rng.uniform(-50, 50, (m, n)).astype(F32)),
            (F16, np.float32(0.01), np.float32(-3e-3), None, 5, rng.uniform(-1, 1, n).astype(F16)),
            (F32, np.float32(0.5), rng.uniform(0, 1, (1, n)).astype(F32), q(rng, ta, ()), None, None),
            (F16, rng.uniform(1e-3, 1, (m, 1)).astype(F16), np.float16(0.25), None,
             dmlq.pack(q(rng, tb, (n,))), rng.uniform(-9, 9, (m, n)).astype(F16))):
        with np.errstate(all="ignore"):
            same(dmlq.matmul_integer_to_float, a, a_s, a_zp, b, b_s, b_zp, bias, dtype=out_dtype, kernel=GROUPED)
        assert launched(FINISH + ("float>" if out_dtype == F32 else "float16>")), kernels()


def test_one_group_splits_k_and_batches(gpu):
    """A long K over few columns splits K (the plan says so) and the chunks' sums meet exactly; batched
    a and b with per-batch b scales and zero points (one (1, N) table per matrix: b_zp's group row
    stays put while the chunks are groups), broadcast batches."""
    rng = np.random.default_rng(11)
    a, b = q(rng, U8, (2, 3000)), dmlq.pack(q(rng, I4, (3000, 24)))
    text = _plan_of(dmlq.matmul_integer, a, b, np.uint8(9))
    assert "stream-m4 " in text and "split-K:" in text and "their exact int32 sums added" in text, text
    same(dmlq.matmul_integer, a, b, np.uint8(9), dmlq.pack(q(rng, I4, (24,))), kernel=GROUPED)
    same(dmlq.matmul_integer_to_float, a, np.float32(0.02), np.uint8(9), b, rng.uniform(-1, 1, 24).astype(F32),
         dmlq.pack(q(rng, I4, (24,))), rng.uniform(-1, 1, 24).astype(F32), kernel=GROUPED)
    a, b = q(rng, I8, (3, 4, 700)), dmlq.pack(q(rng, U4, (3, 700, 40)))
    b_s, b_zp = rng.uniform(0, 1, (3, 1, 40)).astype(F32), dmlq.pack(q(rng, U4, (3, 1, 40)))
    assert "split-K:" in _plan_of(dmlq.matmul_integer_to_float, a, np.float32(1), None, b, b_s, b_zp)
    same(dmlq.matmul_integer_to_float, a, rng.uniform(0, 1, (4, 1)).astype(F32), q(rng, I8, (4, 1)), b, b_s,
         b_zp, rng.uniform(-1, 1, (3, 4, 40)).astype(F32), kernel=GROUPED)
    same(dmlq.matmul_integer, q(rng, I8, (2, 1, 5, 90)), dmlq.pack(q(rng, U4, (3, 90, 17))), None,
         dmlq.pack(q(rng, U4, (3, 1, 17))), kernel=GROUPED)


def test_one_group_extremes(gpu):
    """The largest sums the path takes (K = 32768, every term -255 * 15 or 255 * -15: -125,337,600 in
    int32), split over chunks; NaN / inf / +-0 scales and float16 overflow; past K = 32768 the tiles."""
    for ta, av, za, tb, bv, zb in ((I8, -128, 127, U4, 15, 0), (U8, 255, 0, I4, -8, 7)):
        a, b = np.full((2, 32768), av, ta), dmlq.pack(np.full((32768, 3), bv, tb))
        assert "split-K:" in _plan_of(dmlq.matmul_integer, a, b, ta.type(za), zb)
        same(dmlq.matmul_integer, a, b, ta.type(za), zb, kernel=GROUPED)
        with np.errstate(all="ignore"):
            same(dmlq.matmul_integer_to_float, a, np.float32(1), ta.type(za), b, np.float32(1), zb, dtype=F16,
                 kernel=GROUPED)
    rng = np.random.default_rng(12)
    a, b = q(rng, U8, (6, 200)), dmlq.pack(q(rng, I4, (200, 4)))
    a_s = np.array([[np.nan], [np.inf], [-np.inf], [0.0], [-0.0], [1e30]], F32)
    b_s = np.array([1, -0.0, 1e30, np.nan], F32)
    with np.errstate(all="ignore"):
        for dt in (F32, F16):
            same(dmlq.matmul_integer_to_float, a, a_s, None, b, b_s, 3, dtype=dt, kernel=GROUPED)
    long_k = _plan_of(dmlq.matmul_integer, np.zeros((1, 32769), U8), dmlq.pack(np.zeros((32769, 8), U4)))
    assert "matmul_integer: dp4a-wide " in long_k, long_k


@pytest.mark.parametrize("scale_dtype,bias_dtype,ops,transposed",
                         [(F32, F32, 0, False), (F16, F32, 1, False), (F32, F16, 1, False), (F16, F32, 0, True),
                          (F32, F32, 0, True)])
def test_ready_tables_make_no_array_operation(gpu, monkeypatch, scale_dtype, bias_dtype, ops, transposed):
    """The decode step's host work: a blocked b_scale that already is the kernels' contiguous float32
    (groups, N) table, b's zero point given as a number (made that table once, with the plan) and a
    float32 bias vector reach the kernels as they are: a repeated call broadcasts and copies none of
    them. A float16 scale table or bias (widened to float32) still takes one copy per call (one pass:
    the cast and the layout in one array operation, dmlq.gpu.device.table), which the counter sees;
    every call's bytes equal the reference. MatMulNBits' float16 or float32 scales as the .T of their
    (N, groups) table: no copy, the kernels read them in place (one copy, the widening and the
    transposition in one pass, before session 43; two before session 42)."""
    rng = np.random.default_rng(26)
    m, k, n, block = 1, 256, 64, 32
    a, b = q(rng, U8, (m, k)), dmlq.pack(q(rng, U4, (k, n)))
    a_s = np.float32(0.02)
    b_s = (rng.uniform(-1, 1, (n, k // block)).astype(scale_dtype).T if transposed else
           rng.uniform(-1, 1, (k // block, n)).astype(scale_dtype))
    bias = rng.uniform(-9, 9, n).astype(bias_dtype)
    want = dmlq.matmul_integer_to_float(a, a_s, np.uint8(128), b, b_s, 8, bias, dtype=F16, block_size=block)
    args = (dev(a), a_s, np.uint8(128), dev(b), dev(b_s.T).T if transposed else dev(b_s), 8, dev(bias))
    out = S.module.asarray(np.full((m, n), 0x7E00, np.uint16).view(F16))
    dmlq.matmul_integer_to_float(*args, dtype=F16, block_size=block, out=out)  # plans, binds the runner
    counted = []
    out[...] = S.module.asarray(np.full((m, n), 0x7E00, np.uint16).view(F16))
    for name in ("broadcast_to", "ascontiguousarray", "empty"):
        real = getattr(S.module, name)
        monkeypatch.setattr(S.module, name, lambda *x, _r=real, _n=name, **kw: counted.append(_n) or _r(*x, **kw))
    S.launches.clear()
    dmlq.matmul_integer_to_float(*args, dtype=F16, block_size=block, out=out)
    assert len(counted) == ops and counted.count("empty") == ops, counted
    assert out.get().tobytes() == want.tobytes()
    assert any(name.startswith(GROUPED) for name, *_ in S.launches), kernels()


def test_an_8bit_b_in_groups_too_long_for_int32_takes_the_wide_tiles(gpu):
    """An 8-bit b's group sums reach 255 * 255 per row: past 32768 rows they wrap int32, so groups
    that long leave the grouped kernel (whose sums per group are int32) for dp4a-wide, which folds
    its partials into int64. Extreme values whose exact group sums pass -2**31: every output equals
    the reference (the grouped kernel gave +4.04e9 for -4.55e9); a packed 4-bit b (15 * 255 per
    row) keeps the grouped kernel at the same length; forcing it on the 8-bit b is refused."""
    K, G = 70016, 35008
    a = np.full((1, K), 255, U8)
    b = np.full((K, 3), -128, I8)
    b_s = np.ones((2, 3), F32)
    args = (a, np.float32(1), None, b, b_s, np.int8(127), None)
    assert "matmul_dp4a_wide<" in _plan(a, b, b_s, G)
    same(dmlq.matmul_integer_to_float, *args, dtype=F32, block_size=G, kernel="matmul_dp4a_wide<")
    from dmlq.gpu import intmm_tiled

    with pytest.raises(ValueError, match="at most 32768"):
        intmm_tiled.plan_matmul_integer_to_float(dev(a), dev(np.float32([1])), None, dev(b), dev(b_s),
                                                 dev(np.full((2, 3), 127, I8)), None, S.module.empty((1, 3), F32),
                                                 block_size=G, variant="stream-grouped")
    b4 = dmlq.pack(np.full((K, 3), -8, I4))
    assert GROUPED in _plan(a, b4, b_s, G)
    same(dmlq.matmul_integer_to_float, a, np.float32(1), None, b4, b_s, np.int8(7), None, dtype=F32, block_size=G,
         kernel=GROUPED)


# MatMulNBits' own scales, the .T of its (N, groups) float32 or float16 table, read in place by every
# kernel that takes blocked scales (b_per_col 2 / 3, cuda/matmul_epilogue.cuh group_scale): the grouped
# stream kernel's finish pass at M <= 16 (groups of 64, and of 48: one chunk per group), dp4a-wide
# and mma-grouped past it; K ragged against the groups, N odd, a batch of a beside one b (held K-major
# as MatMulNBits holds it), the zero points its .mT too, scales at float16's edges.
NBITS = [(1, 300, 70, 64, GROUPED), (5, 200, 33, 48, GROUPED), (40, 200, 33, 32, "matmul_dp4a_wide<"),
         (130, 256, 72, 64, "matmul_mma<")]


@pytest.mark.parametrize("m,k,n,block,kernel", NBITS)
@pytest.mark.parametrize("scale_dtype", [F32, F16])
def test_matmulnbits_scales_read_in_place(gpu, m, k, n, block, kernel, scale_dtype):
    from conftest import assert_same, poison

    rng = np.random.default_rng(m * 1009 + k + n + block + scale_dtype.itemsize)
    groups = -(-k // block)
    a = q(rng, U8, (2, m, k))
    w = dmlq.pack(q(rng, U4, (n, k)))
    s = rng.uniform(-1, 1, (n, groups)).astype(scale_dtype)
    s.flat[:7] = [np.nan, np.inf, -0.0, 6e-8, 65504, -1e-3, 0.0]  # (float16: a subnormal, the largest)
    zp = dmlq.pack(q(rng, U4, (n, groups)))
    bias = rng.uniform(-9, 9, n).astype(F32)
    for out_dtype in (F32, F16):
        args = (a, np.float32(0.05), np.uint8(128))
        with np.errstate(all="ignore"):
            want = dmlq.matmul_integer_to_float(*args, w.mT, s.T, zp.mT, bias, dtype=out_dtype, block_size=block)
            out = S.module.asarray(poison(np.empty(want.shape, want.dtype)))
            S.launches.clear()
            got = dmlq.matmul_integer_to_float(dev(a), *args[1:], dev(w).mT, dev(s).T, dev(zp).mT, dev(bias),
                                               dtype=out_dtype, block_size=block, out=out)
        assert_same(got.get(), want)
        assert any(name.startswith(kernel) for name, *_ in S.launches), kernels()
    from dmlq.gpu.intmm_tiled import nbits_scales

    assert nbits_scales(dev(s).T, groups, n) == (2 if scale_dtype == F32 else 3)
    assert nbits_scales(dev(s.T.copy()), groups, n) == 0  # the kernels' own (groups, N) table: b_per_col 1
