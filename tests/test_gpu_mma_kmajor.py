"""An 8-bit b held K-major above the decode sizes: the transposed view of an (N, K) weight (torch's
Linear layout, ``x @ w.T``), read as it is by the tensor-core kernel (cuda/matmul_mma_kmajor.cu:
matmul_mma.cu with b's tag ``kmajor_int8`` / ``kmajor_uint8``, each tile of b staged as A's is and
its fragments loaded by ldmatrix without .trans), where the row-major kernel needs b copied to rows
first. Run by the host harness through the public functions on arrays of the cupy stand-in, into
poisoned outputs, byte for byte against the same call on NumPy arrays (the NumPy path is
dmlq.reference's, tied to onnxruntime by tests/test_cross_library_mm.py); each call asserts the
kernel that ran and that b was not copied. Every operator and zero-point form, K cut inside a
16-byte chunk and inside the last 64-byte tile (a padded to 16 bytes first), N cut inside a copy
and inside the last 128-column tile, split K, batches with per-batch b parameters and a b broadcast
over a's batch, sums at the int32 extremes; a K-major b off 16 bytes is still copied."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from dmlq.gpu import matmul
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream8_kmajor import PAIRS, float_forms, kmajor, km, quantized_forms, same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))

pytestmark = pytest.mark.skipif(not matmul.HAVE_MMA_KMAJOR, reason="matmul_mma_kmajor.cu absent")

# label -> (M, K, N): sizes selection sends to mma-128x128 on the harness (4 SMs).
SIZES = {
    "aligned": (130, 256, 160),
    "K ragged in the last tile, a padded": (129, 200, 168),   # 200 = 3 * 64 + 8: a's 200-byte rows padded
    "odd K and N": (150, 77, 381),                            # K inside one tile; N cut inside a 16-byte copy
    "split-K": (40, 1008, 130),                               # 4 splits of 256 on 4 SMs
}


def mma(ta, tb, to):
    return f"matmul_mma<{ta.name}, {km(tb)}, {to}, 128, 128, 64, 4, 16>"


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer(gpu, label):
    """Every (a, b) type pair; zero points per row / column, per tensor, none."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        zps = ((q(rng, ta, (m, 1)), q(rng, tb, (n,))), (ta.type(q(rng, ta, ())), tb.type(q(rng, tb, ()))),
               (None, None))[i % 3:] if i < 2 else ((q(rng, ta, (m, 1)), None), (None, tb.type(9)))
        for a_zp, b_zp in zps:
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), mma(ta, tb, "int"))
            if a_zp is not None:
                assert launched(f"matmul_row_sums<{tb.name}>"), kernels()  # b's column sums
        if "split" in label:
            assert "matmul_splitk_epilogue" in kernels(), kernels()
        if "padded" in label:
            text = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), b[1]))
            assert "a copied into rows padded to 16 bytes" in text, text


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer_to_float(gpu, label):
    """float32 and float16 out; per-row a, per-column b parameters and an (M, N) bias, then single
    values and a per-column float16 bias."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m * k + n)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        float_forms(same, rng, ta, a, b, q(rng, tb, (1, n)), lambda to, ta=ta, tb=tb: mma(ta, tb, to))


@pytest.mark.parametrize("label", list(SIZES))
def test_quantized_matmul(gpu, label):
    """Both outputs; per-row a and out parameters with per-column b ones, single values, no zero
    points."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m + k * 3 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        quantized_forms(same, rng, m, ta, tb, (I8, U8)[i % 2], a, b, q(rng, tb, (n,)), tb.type(q(rng, tb, ())),
                        lambda to, ta=ta, tb=tb: mma(ta, tb, to.name))


def test_batches_and_broadcast(gpu):
    """A batch of K-major matrices with per-batch b scales and zero points beside a broadcast a (the
    matrices 16-byte multiples apart, not contiguous); one K-major b beside a batch of a."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (2, 1, 70, 256)), kmajor(rng, I8, (4, 256, 136), pad=272)
    b_s, b_zp = rng.uniform(0, 0.1, (4, 1, 136)).astype(F32), q(rng, I8, (4, 1, 136))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp, np.float32(0.5), I8.type(-3)),
         mma(U8, I8, "int8"))
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp), mma(U8, I8, "float"))
    same(dmlq.matmul_integer, q(rng, I8, (3, 70, 192)), kmajor(rng, U8, (192, 200)), (I8.type(-4), U8.type(9)),
         mma(I8, U8, "int"))


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 255 at every k, K = 4096, both signs: exact as int32."""
    m, k, n = 20, 4096, 130
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 255) if tb == U8 else (-128, 127)
    for av, za, bv, zb in ((hi_a, lo_a, hi_b, lo_b), (hi_a, lo_a, lo_b, hi_b)):
        held = np.full((n, k), bv, tb)
        same(dmlq.matmul_integer, np.full((m, k), av, ta), (held.T, S.module.asarray(held).T),
             (ta.type(za), tb.type(zb)), mma(ta, tb, "int"))


def test_columns_off_16_bytes_are_copied(gpu):
    """A K-major b whose columns are 268 bytes apart, or whose start is 8 bytes off 16, is copied
    to rows first (the row-major kernel); the results are the same."""
    rng = np.random.default_rng(8)
    cases = [(q(rng, U8, (130, 264)), S.module.asarray(q(rng, I8, (140, 268)))[:, :264].T),
             (q(rng, U8, (130, 256)), S.module.asarray(q(rng, I8, (140, 272)))[:, 8:264].T)]
    for a, b in cases:
        text = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), b))
        assert "mma-128x128" in text and "b copied" in text and "K-major" not in text, text
        want = dmlq.matmul_integer(a, S.module.asnumpy(b))
        S.launches.clear()
        got = dmlq.matmul_integer(dev(a), b).get()
        assert (got == want).all()
        assert any(n.startswith("matmul_mma<uint8, int8, int,") for n, *_ in S.launches), kernels()


def test_dmlq_check_rows_read_b_k_major(gpu):
    """``python -m dmlq check``'s K-major rows (dmlq.check_cases.KMajor) reach the K-major kernels: the
    weight-streaming kernel at M = 5, the dp4a tile at M = 40, the tensor-core tile at M = 130, in
    all three operators."""
    from dmlq import check

    rows = [c for c in check.gpu_cases() if "K-major" in c[1] and "packed" not in c[1] and "blocked" not in c[1]]
    assert len(rows) == 18, [c[1] for c in rows]  # (the blocked K-major rows: tests/test_gpu_mma_grouped.py)
    for case in rows:
        S.launches.clear()
        for what, got, want in check.run_case(case, S.module):
            assert got.tobytes() == want.tobytes(), (case[1], what)
        mains = (("matmul_mma",) if "M=130" in case[1] else ("matmul_dp4a",) if "M=40" in case[1]
                 else ("matmul_stream_packed", "matmul_stream_grouped"))
        main = [n for n, *_ in S.launches if n.split("<")[0] in mains]
        assert main and all("kmajor_" in n for n in main), (case[1], kernels())
