"""A packed 4-bit b (dmlq.Packed of int4 / uint4) past M = 16 on the GPU path, and blocked scales whose
group is not a multiple of 32: cuda/matmul_dp4a_packed.cu (the dp4a tiles reading the packed bytes) for
matmul_integer, matmul_integer_to_float and quantized_matmul, and cuda/matmul_stream.cu's stream-rows;
run by the host harness through the public functions on arrays of the cupy stand-in, into poisoned
outputs, byte for byte against the NumPy reference. Every variant selection can pick for a packed b is
reached by its sizes (the harness reports 4 SMs), and each test asserts which kernels ran."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, same, special_scales

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)

# (M, K, N) -> the dp4a variant selection picks for one matrix with a packed b (no tensor cores).
SIZES = {
    "dp4a-32x32": (17, 37, 5),       # odd K, N < 4: nibble-by-nibble staging, rows start mid-byte
    "dp4a-64x64": (100, 40, 132),    # N % 4 == 0: 16-bit loads, the last column block cut by N
    "dp4a-128x64": (130, 71, 200),   # odd K: the last tile on the edge path
}


@pytest.mark.parametrize("variant", list(SIZES))
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_matmul_integer(gpu, variant, ta, tb):
    m, k, n = SIZES[variant]
    rng = np.random.default_rng(m + k + n)
    a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    main = f"matmul_dp4a<{ta.name}, packed_{tb.name}, int, "
    same(dmlq.matmul_integer, a, b, q(rng, ta, (m, 1)), dmlq.pack(q(rng, tb, (n,))), kernel=main)
    assert f"matmul_col_sums<packed_{tb.name}>" in [n for n, *_ in S.launches], kernels()
    same(dmlq.matmul_integer, a, b, None, int(q(rng, tb, ())), kernel=main)
    same(dmlq.matmul_integer, a, b, kernel=main)


@pytest.mark.parametrize("out_dtype", [F32, F16])
@pytest.mark.parametrize("variant", list(SIZES))
def test_matmul_integer_to_float(gpu, variant, out_dtype):
    m, k, n = SIZES[variant]
    rng = np.random.default_rng(m * k + n)
    for ta, tb in ((U8, I4), (I8, U4)):
        a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
        a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
        b_s = rng.uniform(-1, 1, n).astype(F16)
        bias = rng.uniform(-50, 50, (m, n)).astype(F32)
        with np.errstate(all="ignore"):
            same(dmlq.matmul_integer_to_float, a, a_s, q(rng, ta, (m, 1)), b, b_s, dmlq.pack(q(rng, tb, (1, n))),
                 bias, dtype=out_dtype, kernel="matmul_dp4a<")
            same(dmlq.matmul_integer_to_float, a, np.float32(0.01), None, b, np.float32(-3e-3), 5,
                 rng.uniform(-1, 1, n).astype(F16), dtype=out_dtype, kernel="matmul_dp4a<")


@pytest.mark.parametrize("m,k,n,block", [(17, 100, 9, 32), (40, 64, 72, 64), (19, 97, 33, 32), (18, 0, 5, 32),
                                         (17, 40, 3, 64), (33, 300, 8, 256)])
@pytest.mark.parametrize("tb", [I4, U4])
def test_blocked_scales(gpu, m, k, n, block, tb):
    """Groups of 32..256 along K on dp4a-wide (a ragged last group, per-group packed zero points), K = 0
    (no groups) and one group (block_size >= K: the unblocked kernels)."""
    rng = np.random.default_rng(m * 7 + k)
    groups = max(-(-k // block), 1) if k else 0
    a, b = q(rng, I8, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    kern = "matmul_dp4a_wide<" if groups != 1 else "matmul_dp4a<"
    for dt in (F32, F16):
        same(dmlq.matmul_integer_to_float, a, rng.uniform(0, 1, (m, 1)).astype(F32), q(rng, I8, (m, 1)), b, b_s,
             dmlq.pack(q(rng, tb, (groups, n))), rng.uniform(-9, 9, n).astype(F32), dtype=dt, block_size=block,
             kernel=kern)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, b_s, 3, dtype=dt, block_size=block,
             kernel=kern)


def test_extremes_batches_and_edges(gpu):
    """int4 -8 / uint4 15 against extreme zero points (the largest sums), float16 overflow to inf, NaN /
    inf / zero scales, K = 1, N = 1, batches whose matrices start mid-byte (odd K * N) or on 4-element
    boundaries (the 16-bit loads), a strided view of the bytes (copied first)."""
    k = 1001
    ext_a = np.full((20, k), 255, U8)
    for tb, bv, zp in ((I4, -8, 7), (U4, 15, 0), (U4, 0, 15)):
        ext_b = dmlq.pack(np.full((k, 8), bv, tb))
        same(dmlq.matmul_integer, ext_a, ext_b, np.uint8(0), zp, kernel="matmul_dp4a<")
        for dt in (F16, F32):
            same(dmlq.matmul_integer_to_float, ext_a, np.float32(1), None, ext_b, np.float32(1), zp, dtype=dt)
    a, b = special_scales(I4, dmlq.pack)
    same(dmlq.matmul_integer, a, dmlq.pack(b[:, :1]), None, -8)
    rng = np.random.default_rng(10)
    for kk, nn in ((41, 7), (40, 8)):
        a, b = q(rng, U8, (2, 1, 20, kk)), q(rng, U4, (3, kk, nn))
        same(dmlq.matmul_integer, a, dmlq.pack(b), np.uint8(9), dmlq.pack(q(rng, U4, (3, 1, nn))),
             kernel="matmul_dp4a<")
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, dmlq.pack(b),
             rng.uniform(0, 1, (3, 1, nn)).astype(F32), 3, kernel="matmul_dp4a<")
    p = dmlq.pack(q(rng, U4, (41, 7)))
    strided = dmlq.Packed(S.module.asarray(np.repeat(p.data, 2))[::2], p.shape, p.dtype)
    a2 = q(rng, U8, (20, 41))
    got = dmlq.matmul_integer(S.module.asarray(a2), strided, np.uint8(1), 5)
    np.testing.assert_array_equal(got.get(), dmlq.matmul_integer(a2, p, np.uint8(1), 5))
    assert "b copied to a contiguous array" in str(dmlq.kernel_plan(dmlq.matmul_integer, S.module.asarray(a2),
                                                                    strided))


@pytest.mark.parametrize("m,k,n", [(1, 37, 5), (16, 64, 8), (17, 37, 5), (100, 40, 132), (130, 71, 200),
                                   (20, 0, 3)])
@pytest.mark.parametrize("tb", [I4, U4])
def test_quantized_matmul(gpu, m, k, n, tb):
    """quantized_matmul with a packed b: the dp4a tiles past M = 16, the stream kernel up to it
    (tests/test_gpu_qmm_stream.py), per-row and per-column parameters, packed and int zero points, a
    per-batch b scale."""
    rng = np.random.default_rng(m * 31 + k + n)
    a, b = q(rng, U8, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    kern = f"matmul_dp4a<uint8, packed_{tb.name}, " if m > 16 else f"matmul_stream_packed<uint8, packed_{tb.name}, "
    with np.errstate(all="ignore"):
        same(dmlq.quantized_matmul, a, rng.uniform(0, 0.1, (m, 1)).astype(F32), q(rng, U8, (m, 1)), b,
             rng.uniform(-0.1, 0.1, n).astype(F32), dmlq.pack(q(rng, tb, (n,))), np.float32(0.5), np.int8(-3),
             kernel=kern)
        same(dmlq.quantized_matmul, a, np.float32(0.02), None, b, np.float32(0.03), 2, np.float32(0.25),
             np.uint8(100), kernel=kern)
    a3, b3 = q(rng, U8, (2, m, k)), dmlq.pack(q(rng, tb, (2, k, n)))
    same(dmlq.quantized_matmul, a3, np.float32(0.02), np.uint8(7), b3, rng.uniform(0, 0.1, (2, 1, n)).astype(F32),
         None, np.float32(0.5))


@pytest.mark.parametrize("m,k,n,block", [(17, 100, 9, 20), (40, 64, 70, 48), (33, 97, 1, 1), (17, 50, 130, 33)])
def test_groups_not_a_multiple_of_32_take_stream_rows(gpu, m, k, n, block):
    """block_size 1, 20, 33, 48 past M = 16: matmul_stream in blocks of 16 rows (the last one partial),
    int8 and packed b, per-group zero points, a batch."""
    rng = np.random.default_rng(m + k * 3 + block)
    groups = -(-k // block)
    a = q(rng, U8, (m, k))
    b_s = rng.uniform(-1, 1, (groups, n)).astype(F32)
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, q(rng, I8, (k, n)), b_s, None,
                                block_size=block))
    assert plan.startswith("matmul_integer_to_float: stream-rows") and f"{-(-m // 16)} blocks of 16 rows" in plan
    with np.errstate(all="ignore"):
        for b, zp in ((q(rng, I8, (k, n)), q(rng, I8, (groups, n))),
                      (dmlq.pack(q(rng, I4, (k, n))), dmlq.pack(q(rng, I4, (groups, n))))):
            for dt in (F32, F16):
                same(dmlq.matmul_integer_to_float, a, rng.uniform(0, 1, (m, 1)).astype(F32), q(rng, U8, (m, 1)),
                     b, b_s, zp, rng.uniform(-9, 9, (m, n)).astype(F32), dtype=dt, block_size=block,
                     kernel="matmul_stream<uint8, ")
    a2, b2 = q(rng, U8, (2, m, k)), q(rng, U8, (k, n))
    same(dmlq.matmul_integer_to_float, a2, np.float32(0.5), None, b2, b_s, None, block_size=block,
         kernel="matmul_stream<uint8, uint8, float, 16>")


def test_kernel_plan_names_the_packed_kernels(gpu):
    # the harness's 4 SMs; M * N * K under MMA_MIN_WORK (bigger products take matmul_mma_packed.cu)
    a, p = dev(np.zeros((130, 200), U8)), dev(dmlq.pack(np.zeros((200, 140), U4)))
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, 0.1, None, dtype=np.float16))
    assert plan.splitlines()[0] == ("matmul_integer_to_float: dp4a-128x64 (b: packed uint4, packed in shared "
                                    "memory, unpacked in registers)"), plan
    assert "matmul_dp4a<uint8, packed_uint4, float16, 128, 64, 32, 8, 8>" in plan
    plan = str(dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, np.uint8(1), p, 0.1, None, 0.5))
    assert "matmul_col_sums<packed_uint4>" in plan and "matmul_dp4a<uint8, packed_uint4, uint8, " in plan
    with pytest.raises(dmlq.UnsupportedError, match="a 4-bit b runs on the GPU as a dmlq.Packed"):
        dmlq.kernel_plan(dmlq.quantized_matmul, np.zeros((130, 200), U8), 0.1, None, np.zeros((200, 140), U4),
                         0.1, None, 0.5)


@pytest.mark.parametrize("n", [130, 131, 4])
@pytest.mark.parametrize("tb", [I4, U4])
def test_row_starts_and_k_zero(gpu, n, tb):
    """Rows of b starting on 2-element boundaries (N % 4 == 2: the nibble-window edge path, never the
    16-bit loads), on odd elements (N odd) and on 4-element boundaries (N = 4), every column block of
    the packed shared-memory words (both nibbles, both k-words of a pair); K = 0 into poisoned outputs."""
    rng = np.random.default_rng(n)
    a, b = q(rng, I8, (100, 40)), dmlq.pack(q(rng, tb, (40, n)))
    same(dmlq.matmul_integer, a, b, q(rng, I8, (100, 1)), dmlq.pack(q(rng, tb, (n,))), kernel="matmul_dp4a<")
    assert "matmul_col_sums" in kernels()
    same(dmlq.matmul_integer, a[:, :0], dmlq.pack(np.zeros((0, n), tb)), np.int8(3), 2, kernel="matmul_dp4a<")


@pytest.mark.parametrize("ta,tb,av,bv,za,zb", [(U8, U4, 255, 15, None, None), (I8, I4, -128, -8, 127, 7)])
def test_largest_sums_at_k_32768(gpu, ta, tb, av, bv, za, zb):
    """The unblocked tiles' longest K (32768) with every product at its extreme: the packed words' high
    nibbles (and int4's low ones) are summed as 16 times the values, |16 * sum| up to 255 * 240 * 32768 <
    2**31, then shifted back; int32 out is the exact sum (with the zero points: (a - za)(b - zb) = 3825)."""
    k = 32768
    a, b = np.full((17, k), av, ta), dmlq.pack(np.full((k, 6), bv, tb))
    same(dmlq.matmul_integer, a, b, None if za is None else ta.type(za), zb, kernel="matmul_dp4a<")


def test_matrices_starting_mid_byte_in_a_second_launch(gpu):
    """Batch dims that need two launches (b broadcast over the middle one, so they do not merge) with
    K * N odd: the second launch's first matrix starts mid-byte, so b is repacked with every matrix on a
    byte (the plan says so) and the results are exact in all three operators."""
    rng = np.random.default_rng(26)
    m, k, n = 17, 37, 5
    a, b = q(rng, U8, (2, 3, 5, m, k)), dmlq.pack(q(rng, I4, (2, 1, 5, k, n)))
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), dev(b)))
    assert "b repacked with each matrix starting on a byte" in plan, plan
    assert "matmul_dp4a<uint8, packed_int4, int, 32, 32, 32, 4, 4>  grid 1x1x15  block 64  x2" in plan, plan
    same(dmlq.matmul_integer, a, b, np.uint8(3), dmlq.pack(q(rng, I4, (2, 1, 5, 1, n))), kernel="matmul_dp4a<")
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), None, b, rng.uniform(0, 1, (2, 1, 5, 1, n)).astype(F32),
             -2, dtype=F16, kernel="matmul_dp4a<")
        same(dmlq.quantized_matmul, a, np.float32(0.02), np.uint8(7), b, np.float32(0.03), 1, np.float32(0.5),
             kernel="matmul_dp4a<")
    ub = dmlq.pack(q(rng, U4, (2, 1, 5, k, n)))
    same(dmlq.matmul_integer, a, ub, None, None, kernel="matmul_dp4a<")
