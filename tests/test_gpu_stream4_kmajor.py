"""A packed 4-bit b held K-major: ``dmlq.pack(w).mT`` (a ``dmlq.TransposedPacked``) for an (N, K)
int4 / uint4 weight ``w``, the layout torch's Linear and onnxruntime's MatMulNBits keep (N runs
of K packed elements). At M <= 16 the weight-streaming kernels of cuda/matmul_stream_packed.cu
read it as it is (b's tag ``kmajor_int4`` / ``kmajor_uint4``: each column's 32 bytes of a stage
copied by one 16-byte cp.async, its nibbles spread to the dp4a words in registers); the tiles
read it K-major too (tests/test_gpu_dp4a_kmajor4.py, tests/test_gpu_mma_kmajor4.py), and
matmul_stream.cu takes its rows, repacked on the device first (the plan says so). Run by the
host harness through the public functions on arrays of the cupy stand-in, into poisoned outputs, byte for byte against the same call on NumPy arrays with b as the ml_dtypes
array ``w.mT`` (dmlq.reference's path). K on and off 32 (the 16-byte path and the nibble path),
N cut inside a 64-column block, every operator and zero-point form (a Python int, a dmlq.Packed
per column, MatMulNBits' (N, groups) zero points as a Packed's .mT), blocked scales of 32 ...
96 rows and of 40 and 48 (one chunk per group, starting mid-vector), split K, batches with odd
matrix sizes (matrices starting mid-byte), per-batch b parameters, the int32 extremes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream8_kmajor import float_forms, quantized_forms, same as same8

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
PAIRS = ((U8, I4), (I8, U4), (U8, U4), (I8, I4))


def mt(m):
    return next(r for r in (1, 4, 16) if m <= r)


def km(dt):
    return f"kmajor_{dt.name}"


def kmajor(rng, dt, shape):
    """b of ``shape`` (..., K, N) held K-major: (the ml_dtypes view w.mT of a random (..., N, K)
    ``w``, and dmlq.pack(w).mT on the device)."""
    *batch, k, n = shape
    w = q(rng, dt, (*batch, n, k))
    return w.swapaxes(-1, -2), dev(dmlq.pack(w)).mT


def packed_t(v):
    """A (..., G, N) zero point as MatMulNBits holds it: the device Packed of its (..., N, G)
    transpose, .mT (and the ml_dtypes array itself for the NumPy call)."""
    return v, dev(dmlq.pack(np.ascontiguousarray(v.swapaxes(-1, -2)))).mT


def streamed(text):
    """The plan reads the packed b K-major as it is."""
    return "K-major (MatMulNBits' layout)" in text and "repacked" not in text and "b copied" not in text


def repacked(text):
    """The plan repacks the packed b to rows first."""
    return "K-major packed bytes repacked to rows first" in text


def same(fn, a, b, rest, kernel, *, plan_ok=streamed, **kwargs):
    """test_gpu_stream8_kmajor.same (the stand-in against NumPy, byte for byte, into a poisoned
    out) with this file's plan check; a repacked b's ``kernel`` is a prefix of the kernel's name."""
    same8(fn, a, b, rest, kernel, prefix=plan_ok is repacked, plan_ok=plan_ok, **kwargs)


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (2, 37, 5), (3, 200, 64), (4, 32, 96), (5, 3, 33), (7, 130, 160),
                                   (11, 65, 7), (16, 160, 128), (1, 700, 48)])
def test_quantized_matmul(gpu, m, k, n):
    """Every (a, b) type pair and both outputs; per-row a and out parameters, per-column b ones
    (a Packed zero point), single values, no zero points."""
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        to = (I8, U8)[i % 2]
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        zb = q(rng, tb, (n,))
        quantized_forms(same, rng, m, ta, tb, to, a, b, (zb, dev(dmlq.pack(zb))), int(q(rng, tb, ())))


@pytest.mark.parametrize("m,k,n", [(1, 256, 64), (3, 200, 33), (4, 1000, 130), (16, 129, 9), (2, 33, 5)])
def test_integer_family(gpu, m, k, n):
    """matmul_integer (every zero-point form) and matmul_integer_to_float (one group of scales,
    float32 and float16 out, a bias) on the sums pass."""
    rng = np.random.default_rng(m * 7919 + k * 13 + n)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        name = f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>"
        zb = q(rng, tb, (n,))
        for a_zp, b_zp in ((None, None), (q(rng, ta, (m, 1)), (zb, dev(dmlq.pack(zb)))), (ta.type(7), 3)):
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), name)
        float_forms(same, rng, ta, a, b, packed_t(q(rng, tb, (1, n))), lambda _: name)


@pytest.mark.parametrize("m,k,n,block", [(1, 256, 64, 32), (3, 200, 33, 64), (4, 1000, 130, 96), (3, 300, 40, 48),
                                         (2, 300, 70, 40), (2, 320, 70, 40), (1, 4096, 64, 128)])
def test_blocked_scales(gpu, m, k, n, block):
    """MatMulNBits' call: blocked scales along K as the transposed view of an (N, groups) table and
    zero points as the .mT of a Packed (N, groups); groups of 32, 64, 96 (straddling stages), 48
    and 40 (one chunk of K per group, starting inside a column's 16-byte vector: the byte path,
    also where K itself is on 32 elements), 128 at K = 4096 (split K between whole groups)."""
    blocked_calls(m, k, n, block, lambda ta, tb: f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>")


def blocked_calls(m, k, n, block, kernel):
    """MatMulNBits' call through :func:`same` for the first two type pairs: scales the transposed
    view of an (N, groups) table, zero points a Packed (N, groups)'s .mT, a per-column bias;
    ``kernel(ta, tb)`` names the kernel."""
    rng = np.random.default_rng(m * 31 + k + n + block)
    groups = -(-k // block)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        s = rng.uniform(-1, 1, (n, groups)).astype(F32)
        same(dmlq.matmul_integer_to_float, a, b, (rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                                  (s.T, dev(s).T), packed_t(q(rng, tb, (groups, n))),
                                                  rng.uniform(-9, 9, n).astype(F32)),
             kernel(ta, tb), block_size=block)


def test_batches_broadcast_and_split_k(gpu):
    """A batch of K-major matrices of an odd size (so every other one starts mid-byte) with per-batch
    b scales and zero points beside a broadcast a; one K-major b beside a batch of a; a long K over
    few columns (split K, the finish pass adds the chunks)."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (2, 1, 3, 301)), kmajor(rng, I4, (4, 301, 41))
    b_s, zb = rng.uniform(0, 0.1, (4, 1, 41)).astype(F32), q(rng, I4, (4, 1, 41))
    b_zp = (zb, dev(dmlq.pack(zb)))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp, np.float32(0.5), I8.type(-3)),
         "matmul_stream_packed<uint8, kmajor_int4, int8, 4>")
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp),
         "matmul_stream_grouped<uint8, kmajor_int4, 4>")
    same(dmlq.matmul_integer, q(rng, I8, (3, 2, 64)), kmajor(rng, U4, (64, 24)), (I8.type(-4), 9),
         "matmul_stream_grouped<int8, kmajor_uint4, 4>")
    a, b = q(rng, U8, (1, 6016)), kmajor(rng, U4, (6016, 16))
    text = str(dmlq.kernel_plan(dmlq.quantized_matmul, dev(a), np.float32(1), None, b[1], np.float32(1), None,
                                np.float32(4e4), None))
    assert "split-K" in text, text
    same(dmlq.quantized_matmul, a, b, (np.float32(1e-2), U8.type(128), np.float32(1e-2), 7,
                                       np.float32(40.0), U8.type(128)),
         "matmul_stream_packed<uint8, kmajor_uint4, uint8, 1>")
    assert launched("matmul_stream_packed_finish<uint8>"), kernels()


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 15 at every k, K = 4096 (split over chunks), both signs."""
    extreme_sums(ta, tb, 2, 3, f"matmul_stream_grouped<{ta.name}, {km(tb)}, 4>")


def extreme_sums(ta, tb, m, n, kernel, k=4096):
    """matmul_integer through :func:`same` where |a - a_zp| = 255 times |b - b_zp| = 15 at every k,
    both signs: the largest int32 sums a K-major packed b makes; ``kernel`` ran."""
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 15) if tb == U4 else (-8, 7)
    for av, za, bv, zb in ((hi_a, lo_a, hi_b, lo_b), (hi_a, lo_a, lo_b, hi_b)):
        w = np.full((n, k), bv, tb)
        same(dmlq.matmul_integer, np.full((m, k), av, ta), (w.T, dev(dmlq.pack(w)).T), (ta.type(za), zb), kernel)


def test_stream_rows_repack_rows(gpu):
    """Groups the tiles cannot close at M > 16 (matmul_stream.cu) take b's rows: it is repacked on
    the device first; the results are the reference's. (The dp4a tiles and the tensor-core tile
    read it K-major: tests/test_gpu_dp4a_kmajor4.py, tests/test_gpu_mma_kmajor4.py.)"""
    rng = np.random.default_rng(9)
    a, b = q(rng, I8, (20, 100)), kmajor(rng, U4, (100, 9))
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.5), None, rng.uniform(-1, 1, (3, 9)).astype(F32),
                                              packed_t(q(rng, U4, (3, 9)))),
         "matmul_stream<int8, packed_uint4, float,", plan_ok=repacked, block_size=40)


def test_packed_t_refused_elsewhere():
    """A TransposedPacked is no array: quantize/dequantize and NumPy refuse it by name; .T of a
    batch and .mT of a vector are errors; unpack gives the transposed values; pack refuses it."""
    w = np.arange(12).reshape(3, 4).astype(ml_dtypes.int4)
    p = dmlq.pack(w)
    t = p.mT
    assert t.shape == (4, 3) and t.mT is p and t.T is p and p.T.packed is p and t.ndim == 2 and t.size == 12
    assert np.array_equal(dmlq.unpack(t), w.T)
    with pytest.raises(TypeError, match="transposed dmlq.Packed"):
        np.asarray(t)
    with pytest.raises(TypeError, match="transposed dmlq.Packed"):
        dmlq.dequantize_linear(t, np.float32(1))
    with pytest.raises(TypeError, match="already a dmlq.Packed"):
        dmlq.pack(t)
    with pytest.raises(ValueError, match=r"\.mT"):
        dmlq.pack(np.zeros((2, 3, 4), ml_dtypes.int4)).T
    with pytest.raises(ValueError, match="fewer than 2 axes"):
        dmlq.pack(np.zeros(4, ml_dtypes.int4)).mT


def test_dmlq_check_rows(gpu):
    """``python -m dmlq check``'s K-major packed rows (``dmlq.pack(w).mT``, MatMulNBits' scales and
    zero points; its bytes with K off the block size, rows padded) run the K-major stream kernels at
    M = 1 and 5, the K-major dp4a tiles at M = 40 (and dp4a-wide for blocked scales past M = 16) and
    the K-major tensor-core tile at M = 130, in all three operators, equal to the reference."""
    from dmlq import check

    rows = [c for c in check.gpu_cases() if "K-major packed" in c[1]]
    assert len(rows) == 40, [c[1] for c in rows]
    for case in rows:
        S.launches.clear()
        for what, got, want in check.run_case(case, S.module):
            assert got.tobytes() == want.tobytes(), (case[1], what)
        mains = [n for n, *_ in S.launches if n.split("<")[0] in ("matmul_stream_packed", "matmul_stream_grouped",
                                                                  "matmul_dp4a", "matmul_dp4a_wide", "matmul_mma")]
        assert mains and all("kmajor_" in n for n in mains), (case[1], kernels())
        if "M=130" in case[1] and "blocked" not in case[1]:
            assert any(n.startswith("matmul_mma<") for n in mains), (case[1], kernels())

