"""A packed 4-bit b held K-major above the decode sizes: ``dmlq.pack(w).mT`` for an (N, K) int4 /
uint4 weight (torch's Linear and onnxruntime's MatMulNBits layout), read as it is by the
tensor-core kernel (cuda/matmul_mma_kmajor4.cu: matmul_mma.cu with b's tag ``kmajor_int4`` /
``kmajor_uint4``: each column's 32 bytes of a k tile staged by two 16-byte copies, its nibbles
spread to the mma fragments in registers in k order 8t..8t+7, a read by 8-byte loads in the same
order), where b's columns lie on 16 bytes (K a multiple of 32); elsewhere b is still repacked to
rows first. Run by the host harness through the public functions on arrays of the cupy stand-in,
into poisoned outputs, byte for byte against the same call on NumPy arrays (b as the ml_dtypes
array ``w.mT``: dmlq.reference's path); each call asserts the kernel that ran and the plan. Every
operator and zero-point form (a Python int, a dmlq.Packed per column), K ending inside the last
64-row tile, a whose rows are padded to 16 bytes first, N cut inside the last 128-column tile,
split K, batches with per-batch b parameters, a b broadcast over a's batch, the int32 extremes."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq.gpu import matmul
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream4_kmajor import I4, PAIRS, U4, extreme_sums, km, kmajor, packed_t, repacked, same
from test_gpu_stream8_kmajor import float_forms, quantized_forms

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))

pytestmark = pytest.mark.skipif(not matmul.HAVE_MMA_KMAJOR4, reason="matmul_mma_kmajor4.cu absent")

# label -> (M, K, N): sizes selection sends to mma-128x128 on the harness (4 SMs).
SIZES = {
    "aligned": (130, 256, 160),
    "K ends inside the last tile": (129, 224, 168),  # 224 = 3 * 64 + 32: the last tile's second chunk empty
    "one short tile, odd N": (150, 96, 381),          # N cut inside the last 128-column tile
    "split-K": (40, 1024, 130),                       # 4 splits of 256 on 4 SMs
}


def mma(ta, tb, to):
    return f"matmul_mma<{ta.name}, {km(tb)}, {to}, 128, 128, 64, 4, 16>"


def zp_forms(rng, m, ta, tb, n, i):
    """(a_zp, b_zp) pairs: per row and per column (a Packed), single values, none; rotated by i."""
    zb = q(rng, tb, (n,))
    forms = ((q(rng, ta, (m, 1)), (zb, dev(dmlq.pack(zb)))), (ta.type(q(rng, ta, ())), int(q(rng, tb, ()))),
             (None, None), (None, 5), (q(rng, ta, (m, 1)), None))
    return forms[i % 2:i % 2 + 3]


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer(gpu, label):
    """Every (a, b) type pair and zero-point form; a's zero point takes b's column sums from the
    sums of its K-major rows (matmul_row_sums of a packed tag)."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        for a_zp, b_zp in zp_forms(rng, m, ta, tb, n, i):
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), mma(ta, tb, "int"))
            if a_zp is not None:
                assert launched(f"matmul_row_sums<{km(tb)}>"), kernels()
        if "split" in label:
            assert launched(f"matmul_splitk_epilogue<{ta.name}, {(I8 if tb == I4 else U8).name}, int>"), kernels()


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer_to_float(gpu, label):
    """float32 and float16 out; per-row a, per-column b parameters (MatMulNBits' (N, 1) zero
    points as a Packed's .mT) and an (M, N) bias, then single values and a per-column bias."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m * k + n)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        float_forms(same, rng, ta, a, b, packed_t(q(rng, tb, (1, n))), lambda to, ta=ta, tb=tb: mma(ta, tb, to))


@pytest.mark.parametrize("label", list(SIZES))
def test_quantized_matmul(gpu, label):
    """Both outputs; per-row a and out parameters with per-column b ones (a Packed zero point),
    single values, no zero points."""
    m, k, n = SIZES[label]
    rng = np.random.default_rng(m + k * 3 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        zb = q(rng, tb, (n,))
        quantized_forms(same, rng, m, ta, tb, (I8, U8)[i % 2], a, b, (zb, dev(dmlq.pack(zb))), int(q(rng, tb, ())),
                        lambda to, ta=ta, tb=tb: mma(ta, tb, to.name))


def test_a_padded_batches_and_broadcast(gpu):
    """a whose rows are 232 bytes apart (padded to 16 bytes first) against a K-major b; a batch of
    K-major matrices with per-batch b scales and zero points beside a broadcast a; one K-major b
    beside a batch of a."""
    rng = np.random.default_rng(5)
    held = q(rng, I8, (130, 232))
    a, b = held[:, :224], kmajor(rng, U4, (224, 150))
    text = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(held)[:, :224], b[1]))
    assert "a copied into rows padded to 16 bytes" in text, text
    same(dmlq.matmul_integer, a, b, (I8.type(3), 2), mma(I8, U4, "int"))
    a, b = q(rng, U8, (2, 1, 70, 256)), kmajor(rng, I4, (4, 256, 136))
    b_s, zb = rng.uniform(0, 0.1, (4, 1, 136)).astype(F32), q(rng, I4, (4, 1, 136))
    b_zp = (zb, dev(dmlq.pack(zb)))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp, np.float32(0.5), I8.type(-3)),
         mma(U8, I4, "int8"))
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp), mma(U8, I4, "float"))
    same(dmlq.matmul_integer, q(rng, I8, (3, 70, 192)), kmajor(rng, U4, (192, 200)), (I8.type(-4), 9),
         mma(I8, U4, "int"))


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 15 at every k, K = 4096, both signs: exact as int32
    (every product taken 16 times over in the fragments, as the kernel does, and shifted back)."""
    extreme_sums(ta, tb, 20, 130, mma(ta, tb, "int"))


def test_k_off_32_is_repacked(gpu):
    """K not a multiple of 32 puts b's columns off 16 bytes: b is repacked to rows for the row-major
    packed kernel (mma-128x128 of matmul_mma_packed.cu), the results the same."""
    rng = np.random.default_rng(8)
    a, b = q(rng, U8, (130, 200)), kmajor(rng, I4, (200, 170))
    same(dmlq.matmul_integer, a, b, (U8.type(7), -2), "matmul_mma<uint8, packed_int4, int,", plan_ok=repacked)
