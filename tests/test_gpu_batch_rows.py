"""a's scale and zero point per batch and row ((..., M, 1): ONNX MatMulInteger's [D1, D2, M, 1]
a_zero_point), and quantized_matmul's output scale and zero point likewise, on every GPU kernel
selection can pick for the integer matmuls: the dp4a and tensor-core tiles (split-K's epilogue
pass too), the wide dp4a kernel (blocked scales), the weight-streaming kernels (their sums and
grouped passes, an 8-bit and a packed 4-bit b), cuda/matmul_stream.cu (groups the tiles cannot
close), several batch launches (MAX_GRID_YZ pinned low) and batch dims that broadcast. Run by
the host harness through the public functions on CuPy stand-in arrays into poisoned outputs,
byte for byte against the NumPy path (itself dmlq.reference's bits: tests/test_batch_rows.py);
each test asserts which kernels ran."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4 = np.dtype(ml_dtypes.int4)

# name -> (M, K, N, b: 8 (int8) or 4 (a packed int4), block_size, the kernels that must run)
CASES = {
    "dp4a-32x32": (17, 37, 5, 8, None, ("matmul_dp4a",)),
    "dp4a-64x64": (100, 40, 130, 8, None, ("matmul_dp4a",)),
    "mma-128x128": (130, 260, 140, 8, None, ("matmul_mma",)),
    "mma split-K": (40, 1000, 130, 8, None, ("matmul_mma", "matmul_splitk_epilogue")),
    "stream 8-bit b": (3, 40, 6, 8, None, ("matmul_stream_grouped", "matmul_stream_grouped_finish")),
    "packed dp4a": (17, 37, 5, 4, None, ("matmul_dp4a",)),
    "packed stream": (4, 64, 40, 4, None, ("matmul_stream_grouped", "matmul_stream_grouped_finish")),
    "dp4a-wide": (40, 64, 8, 8, 32, ("matmul_dp4a_wide",)),
    "stream-grouped": (3, 96, 40, 4, 32, ("matmul_stream_grouped", "matmul_stream_grouped_finish")),
    "stream-rows": (17, 40, 4, 8, 16, ("matmul_stream",)),
    "stream-m16 (matmul_stream.cu)": (16, 9, 5, 4, 3, ("matmul_stream",)),
}


def _b(rng, bits, shape):
    return q(rng, I8, shape) if bits == 8 else dmlq.pack(q(rng, I4, shape))


def _ran(names):
    ran = kernels()
    assert all(n in ran for n in names), (names, ran)


@pytest.mark.parametrize("case", list(CASES))
def test_integer_family(gpu, case):
    m, k, n, bits, block, names = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    # a's batch (2, 3); b's (3,): the output's (2, 3). Per batch and row, one batch dim broadcast, and
    # (3, M, 1) against an a of batch (3,) broadcast to the output's (2, 3).
    a, b = q(rng, U8, (2, 3, m, k)), _b(rng, bits, (3, k, n))
    forms = (((2, 3), (2, 3, m, 1)), ((2, 3), (2, 1, m, 1)), ((3,), (3, m, 1)))
    if "split-K" in case:  # two matrices, so that selection still splits K
        a, b = a[:, :1], _b(rng, bits, (k, n))
        forms = (((2, 1), (2, 1, m, 1)),)
    for a_batch, zp_shape in forms:
        aa = a if len(a_batch) == 2 else a[0]
        b2 = b if len(a_batch) == 2 else _b(rng, bits, zp_shape[:-2] + (k, n))
        a_s = rng.uniform(1e-3, 1, zp_shape).astype(F32)
        a_zp = q(rng, U8, zp_shape)
        bias = rng.uniform(-9, 9, n).astype(F32)
        for dt in (F32, F16):
            S.launches.clear()
            same(dmlq.matmul_integer_to_float, aa, a_s, a_zp, b2, np.float32(0.02), None, bias, dtype=dt,
                 block_size=block)
            _ran(names)
            # the scale per batch and row beside a single zero point (and the reverse)
            same(dmlq.matmul_integer_to_float, aa, a_s.astype(F16), np.uint8(7), b2, np.float32(-0.5), None,
                 block_size=block)
            same(dmlq.matmul_integer_to_float, aa, np.float32(0.5), a_zp, b2, np.float32(0.25), None,
                 block_size=block)
        if block is None:
            S.launches.clear()
            same(dmlq.matmul_integer, aa, b2, a_zp, None)
            _ran(tuple(x for x in names if x != "matmul_stream_grouped_finish") or names)


QMM = {  # quantized_matmul: name -> (M, K, N, b bits, kernels)
    "dp4a-32x32": (17, 37, 5, 8, ("matmul_dp4a",)),
    "mma-128x128": (130, 260, 140, 8, ("matmul_mma",)),
    "mma split-K": (40, 1000, 130, 8, ("matmul_mma", "matmul_splitk_epilogue")),
    "stream 8-bit b": (3, 40, 6, 8, ("matmul_stream_packed",)),
    "stream split-K": (4, 4096, 8, 8, ("matmul_stream_packed", "matmul_stream_packed_finish")),
    "packed dp4a": (17, 37, 5, 4, ("matmul_dp4a",)),
    "packed stream": (4, 64, 40, 4, ("matmul_stream_packed",)),
}


@pytest.mark.parametrize("case", list(QMM))
def test_quantized_matmul(gpu, case):
    m, k, n, bits, names = QMM[case]
    rng = np.random.default_rng(sum(map(ord, case)) + 1)
    nb = 1 if "split-K" in case else 3  # two matrices, so that selection still splits K
    a, b = q(rng, U8, (2, nb, m, k)), _b(rng, bits, (nb, k, n))
    a_s = rng.uniform(1e-3, 2e-3, (2, nb, m, 1)).astype(F32)
    a_zp = q(rng, U8, (2, 1, m, 1))
    o_s = rng.uniform(0.1, 2, (2, nb, m, 1)).astype(F32) * np.float32(np.sqrt(k))
    o_zp = q(rng, I8, (2, 1, m, 1) if nb == 1 else (nb, m, 1))  # (per matrix either way; 1s broadcast)
    S.launches.clear()
    same(dmlq.quantized_matmul, a, a_s, a_zp, b, np.float32(0.3), None, o_s, o_zp)
    _ran(names)
    same(dmlq.quantized_matmul, a, np.float32(0.01), a_zp, b, np.float32(0.3), None, np.float32(2), o_zp)
    same(dmlq.quantized_matmul, a, a_s, None, b, np.float32(0.3), None, o_s, np.int8(-3))


def test_several_batch_launches(gpu, monkeypatch):
    """More matrices than the grid's z limit: several launches, each one's tables offset by its
    first matrix (a's and the output's parameters as b's per-batch ones); and three batch dims
    that do not merge (two launches without the pin)."""
    from dmlq.gpu import matmul

    rng = np.random.default_rng(33)
    for (nb, m, k, n), name, zmax in (((11, 17, 37, 5), "matmul_dp4a", 4),
                                      ((3, 40, 1000, 130), "matmul_splitk_epilogue", 2)):
        a, b = q(rng, U8, (nb, m, k)), q(rng, I8, (nb, k, n))
        a_s, a_zp = rng.uniform(1e-3, 1, (nb, m, 1)).astype(F32), q(rng, U8, (nb, m, 1))
        o_s, o_zp = rng.uniform(1, 3, (nb, m, 1)).astype(F32) * np.float32(k), q(rng, I8, (nb, m, 1))
        b_s = rng.uniform(0.5, 1, (nb, 1, n)).astype(F32)
        monkeypatch.setattr(matmul, "MAX_GRID_YZ", zmax)
        S.launches.clear()
        same(dmlq.matmul_integer_to_float, a, a_s, a_zp, b, b_s, None, kernel=name)
        assert kernels().count(name) == 2 * -(-nb // zmax), kernels()  # per call (out= and fresh)
        same(dmlq.matmul_integer, a, b, a_zp, None)
        same(dmlq.quantized_matmul, a, a_s, a_zp, b, b_s / 100, None, o_s, o_zp, kernel=name)
        monkeypatch.undo()
    a, b = q(rng, U8, (2, 1, 2, 20, 40)), q(rng, I8, (3, 1, 40, 6))
    a_s, a_zp = rng.uniform(1e-3, 1, (2, 1, 2, 20, 1)).astype(F32), q(rng, U8, (2, 1, 2, 20, 1))
    S.launches.clear()
    same(dmlq.matmul_integer_to_float, a, a_s, a_zp, b, np.float32(0.5), None, kernel="matmul_dp4a")
    assert kernels().count("matmul_dp4a") == 4, kernels()  # two launches per call
    same(dmlq.quantized_matmul, a, a_s / 100, a_zp, b, np.float32(0.5), None, rng.uniform(1, 2, (3, 1, 20, 1))
         .astype(F32), q(rng, U8, (2, 3, 2, 20, 1)), kernel="matmul_dp4a")


def test_edges(gpu):
    """M = 1 (a 1-row table per matrix), K = 0 (the zero points drop out, the scales stay), NaN / inf
    scales in one matrix only, and a table already contiguous float32 (passed as it is)."""
    rng = np.random.default_rng(7)
    for m, k in ((1, 37), (20, 0), (3, 0)):
        a, b = q(rng, I8, (3, m, k)), q(rng, I8, (k, 5))
        a_s = rng.uniform(-1, 1, (3, m, 1)).astype(F32)
        a_s[1, 0, 0] = np.nan
        a_s[2, -1, 0] = np.inf
        with np.errstate(all="ignore"):
            for dt in (F32, F16):
                same(dmlq.matmul_integer_to_float, a, a_s, q(rng, I8, (3, m, 1)), b, np.float32(1e30), None,
                     dtype=dt)
        same(dmlq.matmul_integer, a, b, q(rng, I8, (3, m, 1)), np.int8(2))
