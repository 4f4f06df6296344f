"""Host-harness cases for the matmul kernels' tile staging paths.

matmul_mma stages a tile that lies wholly inside K with fixed-size copies and
no zero fill (A rows past M read row 0, B copies past N are skipped: those
only feed outputs that are not stored) and sends everything else (the last
tile of a K that is not a multiple of 64, a B chunk cut by N inside one copy)
through a rolled loop with byte counts and zero fill. matmul_dp4a does the
same with word loads and byte gathers. These cases put every edge on both
sides of that split, for both cp.async widths (4 and 16 bytes), with operands
that are views of their own exact extent: the harness allocates each one
exactly from its first to its last element, so a copy or load one byte past
the last row is an ASan report. Tests are named `emulated` so that
tools/mutate.py selects them.
"""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from dmlq import reference as ref
from dmlq.gpu import matmul, qmm

TYPES = [("int8", "int8", "int8"), ("uint8", "int8", "uint8"), ("int8", "uint8", "uint8"),
         ("uint8", "uint8", "int8")]


def exact_view(rng, shape, strides, skew, dtype):
    """Random values of `dtype` in a view of `shape` with element `strides`
    (last one 1) whose base lies `skew` bytes past a 16-byte boundary and whose
    allocation (its own root: as_strided's base is no ndarray) ends at its
    last element."""
    info = np.iinfo(dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = np.zeros(span + 32, dtype)
    off = (skew - buf.ctypes.data) % 16
    v = as_strided(buf[off:], shape=shape, strides=tuple(s * buf.itemsize for s in strides))
    v[...] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    assert v.ctypes.data % 16 == skew
    return v


def run_case(host, rng, variant, M, K, N, lda, a_skew, ldb, b_skew, types, batch=None, splits=None,
             per_axis=True, kmajor=False):
    """``kmajor``: b held K-major, N columns of K bytes ``ldb`` apart (the transposed view of an
    exact (N, K) allocation), else K rows of N bytes."""
    ta, tb, to = types
    b_shape, b_strides = ((N, K), (ldb, 1)) if kmajor else ((K, N), (ldb, 1))
    if batch:
        nb, a_bs, b_bs = batch
        a = exact_view(rng, (nb, M, K), (a_bs, lda, 1), a_skew, ta)
        b = exact_view(rng, (nb, *b_shape), (b_bs, *b_strides), b_skew, tb)
    else:
        a = exact_view(rng, (M, K), (lda, 1), a_skew, ta)
        b = exact_view(rng, b_shape, b_strides, b_skew, tb)
    if kmajor:
        b = b.swapaxes(-1, -2)
    ia, ib, io = np.iinfo(ta), np.iinfo(tb), np.iinfo(to)
    n_a, n_b = (M, N) if per_axis else (1, 1)
    a_s = rng.uniform(0.5, 2, n_a).astype(np.float32)
    b_s = rng.uniform(0.5, 2, n_b).astype(np.float32)
    o_s = (rng.uniform(0.5, 2, n_a) * max(K, 1) * 64).astype(np.float32)
    a_zp = rng.integers(ia.min, ia.max + 1, n_a).astype(ta)
    b_zp = rng.integers(ib.min, ib.max + 1, n_b).astype(tb)
    o_zp = rng.integers(io.min, io.max + 1, n_a).astype(to)
    shape = a.shape[:-2] + (M, N)
    want = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty(shape, to))
    out = np.full(shape, 0x5A, np.uint8).view(to)
    host.calls.clear()
    kw = {} if splits is None else {"splits": splits}
    qmm.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant=variant, **kw)
    np.testing.assert_array_equal(out, want, err_msg=f"{variant} M={M} K={K} N={N} lda={lda} ldb={ldb}")
    return [c[0] for c in host.calls]


# (M, K, N, lda, A skew, ldb, B skew, batch (count, A stride, B stride), splits), and
# the cp.async width the launcher must pick (min of the operands' widths).
MMA_CASES = [
    # 4-byte copies
    ((37, 70, 40, 72, 4, 48, 0, None, None), 4),       # K tail of 6: a part-word A copy, B rows past K
    ((20, 128, 133, 128, 0, 136, 8, None, None), 4),   # N = 133: a part-word B copy in every tile
    ((130, 200, 70, 200, 0, 72, 4, None, None), 4),    # M past one tile, K tail 8, N chunk of 6 bytes
    ((16, 12, 16, 12, 0, 16, 0, None, None), 4),       # K < 16: one tile, shorter than the pipeline
    ((16, 1000, 20, 1000, 4, 20, 0, None, 3), 4),      # split-K over K % 64 = 40
    ((1, 68, 9, 68, 0, 12, 4, None, None), 4),         # one row of A; N = 9
    ((50, 192, 36, 192, 4, 36, 0, None, None), 4),     # whole tiles only; N chunk of one word
    ((33, 260, 132, 260, 0, 132, 0, None, None), 4),   # contiguous; K tail of one word, N tail of one word
    ((24, 100, 28, 100, 0, 28, 4, (2, 2404, 2804), None), 4),  # a batch with 4-aligned strides
    ((131, 63, 129, 64, 4, 132, 0, None, None), 4),    # K = 63 (one part tile), M and N one past a tile
    ((5, 64, 7, 64, 4, 8, 0, None, None), 4),          # N < 16, whole tiles: chunks past N are not read
    # 16-byte copies, the same edges
    ((37, 70, 40, 80, 0, 48, 0, None, None), 16),      # K tail of 6 inside a 16-byte chunk
    ((20, 128, 133, 128, 0, 144, 0, None, None), 16),  # N = 133: a part chunk in every tile
    ((130, 192, 48, 192, 0, 48, 0, None, None), 16),   # whole tiles; rows past M read row 0
    ((16, 1000, 20, 1008, 0, 32, 0, None, 3), 16),     # split-K
    ((5, 128, 7, 128, 0, 16, 0, None, None), 16),      # N < 16, whole tiles
]


@pytest.mark.parametrize("case,vec", MMA_CASES)
def test_emulated_mma_staging_edges(host, rng, case, vec):
    if "mma-128x128" not in matmul.VARIANTS:
        pytest.skip("mma kernel source absent")
    M, K, N, lda, a_skew, ldb, b_skew, batch, splits = case
    types = TYPES[(M + K + N) % 4]
    names = run_case(host, rng, "mma-128x128", M, K, N, lda, a_skew, ldb, b_skew, types, batch, splits)
    mma = [n for n in names if n.startswith("matmul_mma")]
    assert mma and all(n.endswith(f", {vec}>") for n in mma), names
    if splits:
        assert any(n.startswith("matmul_splitk_epilogue") for n in names), names


# (M, K, N, lda, A skew, ldb, B skew, batch, splits) with b held K-major (ldb: the bytes between
# its columns, a multiple of 16, as the kernel's K-major path requires); each allocation ends at
# its last element, so a copy past K in the last column, or of a column past N, is an ASan report.
KMAJOR_CASES = [
    (37, 70, 40, 80, 0, 80, 0, None, None),       # K tail of 6 inside a 16-byte chunk
    (20, 128, 133, 128, 0, 128, 0, None, None),   # N = 133: columns past N in the last block, not read
    (130, 192, 48, 192, 0, 192, 0, None, None),   # whole tiles; rows past M and columns past N skipped
    (16, 1000, 20, 1008, 0, 1008, 0, None, 3),    # split-K: every split's k range from its own start
    (5, 128, 7, 136, 4, 128, 0, None, None),      # N < 16; a's rows off 16 bytes: a padded first
    (24, 96, 28, 96, 0, 112, 0, (2, 2400, 3152), None),  # a batch, b's matrices 3152 bytes apart
    (131, 63, 129, 64, 0, 64, 0, None, None),     # K = 63 (one part tile), M and N one past a tile
]


@pytest.mark.parametrize("case", KMAJOR_CASES)
def test_emulated_mma_kmajor_staging_edges(host, rng, case):
    """matmul_mma_kmajor.cu's staging on exact allocations: b read K-major as it is (no copy)."""
    if not matmul.HAVE_MMA_KMAJOR:
        pytest.skip("matmul_mma_kmajor.cu absent")
    M, K, N, lda, a_skew, ldb, b_skew, batch, splits = case
    types = TYPES[(M + K + N) % 4]
    names = run_case(host, rng, "mma-128x128", M, K, N, lda, a_skew, ldb, b_skew, types, batch, splits,
                     kmajor=True)
    mma = [n for n in names if n.startswith("matmul_mma")]
    assert mma == [f"matmul_mma<{types[0]}, kmajor_{types[1]}, {types[2]}, 128, 128, 64, 4, 16>"], names
    assert not any(n.startswith("matmul_col_sums") for n in names), names  # b's column sums: its row sums
    if splits:
        assert any(n.startswith("matmul_splitk_epilogue") for n in names), names


@pytest.mark.parametrize("b_form", ["row-major", "K-major", "packed int4"])
def test_emulated_mma_ldmatrix_conflict_free(host_device, rng, b_form):
    """Every ldmatrix phase of the tensor-core kernel (A's and B's fragments, for a row-major, a
    K-major and a packed 4-bit b) reads 8 rows from 8 distinct bank quads: the XOR swizzles
    leave no shared-memory bank conflict (the runner counts each phase's extra wavefronts)."""
    if not (matmul.HAVE_MMA_KMAJOR and matmul.HAVE_MMA_PACKED):
        pytest.skip("mma kernel sources absent")
    from dmlq import pack

    M, K, N = 130, 256, 136
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    w = rng.integers(-8, 8, (K, N)).astype(np.int8)
    b_packed = None
    if b_form == "K-major":
        b = np.ascontiguousarray(w.T).T
    elif b_form == "packed int4":
        import ml_dtypes

        b, b_packed = pack(w.astype(ml_dtypes.int4)).data, ("int4", (K, N), True)
    else:
        b = w
    out = np.empty((M, N), np.int32)
    from dmlq.gpu import device, intmm

    host_device.forget()
    with device.using(host_device):  # selection's kernel at these sizes: mma-128x128
        intmm.matmul_integer(a, None, b, None, out, b_packed)
    np.testing.assert_array_equal(out, a.astype(np.int64) @ w.astype(np.int64))
    (name,) = [n for n in host_device.ldmatrix if n.startswith("matmul_mma<")]
    assert ("kmajor_" in name) == (b_form == "K-major") and ("packed_" in name) == (b_form == "packed int4"), name
    phases, extra = host_device.ldmatrix[name]
    # per warp and k32 step: 4 A loads and 4 B loads (a packed b: 2) of 4 phases each
    tiles = -(-M // 128) * -(-N // 128) * (K // 32) * 4
    assert phases == tiles * (16 + (8 if b_form == "packed int4" else 16)), (phases, tiles)
    assert extra == 0, (name, phases, extra)


# (M, K, N, lda, A skew, ldb, B skew): matmul_dp4a's word path needs a tile
# inside K and 4-byte aligned rows; everything else goes through the byte
# windows. Rows past M read the last row, B columns wholly past N read columns
# 0..3 (N >= 4), B rows past K read row K - 1 (zeroed for the wide kernel).
DP4A_CASES = [
    (37, 70, 40, 72, 0, 40, 0),      # aligned; K tail of 6 (a part word); M tail; N inside a tile
    (33, 67, 45, 67, 1, 45, 3),      # unaligned rows (contiguous, K % 4 = 3, N % 4 = 1)
    (5, 3, 7, 3, 0, 7, 0),           # K < 4: windows shorter than a word
    (6, 9, 2, 12, 4, 2, 0),          # N < 4
    (5, 64, 3, 64, 0, 4, 0),         # N < 4 with aligned rows: no column redirect, last row in a whole tile
    (1, 1, 1, 1, 0, 1, 0),           # one byte each
    (2, 2, 3, 2, 0, 3, 0),           # operands of 4 and 6 bytes
    (64, 96, 64, 96, 0, 64, 0),      # whole tiles only (the word path throughout)
    (70, 64, 33, 64, 4, 36, 0),      # N = 33 with aligned rows: a word cut by N, words past N
    (17, 200, 19, 201, 2, 19, 1),    # several tiles, unaligned, K tail of 8
    (130, 33, 131, 36, 0, 132, 0),   # aligned, K tail of 1 (a one-byte window), M and N past a tile
]


@pytest.mark.parametrize("variant", sorted(matmul.DP4A_CONFIGS))
@pytest.mark.parametrize("case", DP4A_CASES)
def test_emulated_dp4a_staging_edges(host, rng, variant, case):
    M, K, N, lda, a_skew, ldb, b_skew = case
    types = TYPES[(M + K + N) % 4]
    names = run_case(host, rng, variant, M, K, N, lda, a_skew, ldb, b_skew, types)
    assert any(n.startswith("matmul_dp4a") for n in names), names


@pytest.mark.parametrize("variant", sorted(matmul.DP4A_CONFIGS))
def test_emulated_dp4a_reversed_rows_and_batches(host, rng, variant):
    """Negative row strides (a view with its rows reversed) and batch strides:
    rows past M and K still read inside each operand's exact extent."""
    ta, tb, to = TYPES[1]
    a = exact_view(rng, (45, 38), (40, 1), 0, ta)[::-1]
    b = exact_view(rng, (38, 21), (24, 1), 0, tb)[::-1]
    a3 = exact_view(rng, (3, 9, 50), (470, 52, 1), 0, ta)
    b3 = exact_view(rng, (3, 50, 35), (1800, 36, 1), 0, tb)
    for a_, b_ in ((a, b), (a3, b3)):
        M, K = a_.shape[-2:]
        N = b_.shape[-1]
        a_s = rng.uniform(0.5, 2, M).astype(np.float32)
        b_s = rng.uniform(0.5, 2, N).astype(np.float32)
        o_s = np.float32([K * 64.0])
        a_zp = rng.integers(-128, 128, M).astype(ta)
        b_zp = rng.integers(0, 256, N).astype(tb)
        o_zp = np.array([3], to)
        shape = np.broadcast_shapes(a_.shape[:-2], b_.shape[:-2]) + (M, N)
        want = ref.quantized_matmul(a_, a_s, a_zp, b_, b_s, b_zp, o_s, o_zp, np.empty(shape, to))
        out = np.full(shape, 0x5A, np.uint8).view(to)
        qmm.quantized_matmul(a_, a_s, a_zp, b_, b_s, b_zp, o_s, o_zp, out, variant=variant)
        np.testing.assert_array_equal(out, want, err_msg=f"{variant} {a_.shape} {b_.shape}")
