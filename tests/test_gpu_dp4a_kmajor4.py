"""A packed 4-bit b held K-major (``dmlq.pack(w).mT`` of an (N, K) int4 / uint4 weight: torch's and
onnxruntime's MatMulNBits layout) on the dp4a tiles (cuda/matmul_dp4a_kmajor4.cu: matmul_dp4a.cu's
gemm with b's tag ``kmajor_int4`` / ``kmajor_uint4``, each thread's 4 columns read as runs of 4 k
and interleaved into the packed row-major words as they are staged), where selection takes a dp4a
tile for a packed b past the decode sizes: small products, and blocked scales along K past
M = 16 (dp4a-wide: MatMulNBits' prefill). Before, b was repacked to rows first. Run by the host
harness through the public functions on arrays of the cupy stand-in, into poisoned outputs, byte
for byte against the same call on NumPy arrays (b as the ml_dtypes array ``w.mT``); each call
asserts the kernel that ran and that the plan reads b K-major. Every tile the rule picks, every
operator and zero-point form (b's column sums for a's zero point from its K-major rows), K on
and off 4 (the 16-bit runs and the nibble path, codes past K masked), N cut inside a 4-column
block and a tile, columns starting mid-byte (odd K), blocked scales of 32, 64 and 48 with
MatMulNBits' zero points, batches of odd-sized matrices, the int32 extremes."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream4_kmajor import I4, PAIRS, U4, blocked_calls, extreme_sums, km, kmajor, packed_t, same
from test_gpu_stream8_kmajor import float_forms

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))

# label -> (M, K, N, tile): sizes the rule sends to each dp4a tile on the harness (4 SMs), under the
# tensor cores' minimum work
SIZES = {
    "32x32, aligned": (20, 64, 40, "32, 32, 32, 4, 4"),
    "32x32, odd K (columns start mid-byte), N ragged": (33, 75, 37, "32, 32, 32, 4, 4"),
    "64x64": (128, 96, 128, "64, 64, 32, 8, 4"),
    "128x64, K ending inside a word": (256, 62, 128, "128, 64, 32, 8, 8"),
}


def dp4a(ta, tb, to, tile):
    return f"matmul_dp4a<{ta.name}, {km(tb)}, {to}, {tile}>"


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer(gpu, label):
    """Every (a, b) type pair and zero-point form; a's zero point takes b's column sums from the
    sums of its K-major rows."""
    m, k, n, tile = SIZES[label]
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        zb = q(rng, tb, (n,))
        forms = ((q(rng, ta, (m, 1)), (zb, dev(dmlq.pack(zb)))), (ta.type(q(rng, ta, ())), int(q(rng, tb, ()))),
                 (None, None))
        for a_zp, b_zp in forms[i % 2:]:
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), dp4a(ta, tb, "int", tile))
            if a_zp is not None:
                assert launched(f"matmul_row_sums<{km(tb)}>"), kernels()


@pytest.mark.parametrize("label", list(SIZES))
def test_float_and_quantized(gpu, label):
    """matmul_integer_to_float (float32 with per-row a and per-column b parameters and a bias,
    float16 with single values) and quantized_matmul (both outputs)."""
    m, k, n, tile = SIZES[label]
    rng = np.random.default_rng(m * k + n)
    for i, (ta, tb) in enumerate(PAIRS[:2]):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        float_forms(same, rng, ta, a, b, packed_t(q(rng, tb, (1, n))), lambda to, ta=ta, tb=tb: dp4a(ta, tb, to, tile))
        to = (I8, U8)[i]
        zb = q(rng, tb, (n,))
        same(dmlq.quantized_matmul, a, b, (rng.uniform(1e-3, 0.05, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                           rng.uniform(-0.05, 0.05, n).astype(F32), (zb, dev(dmlq.pack(zb))),
                                           rng.uniform(0.05, 1, (m, 1)).astype(F32), q(rng, to, (m, 1))),
             dp4a(ta, tb, to.name, tile))


@pytest.mark.parametrize("m,k,n,block", [(20, 256, 40, 32), (40, 200, 33, 64), (17, 301, 24, 32)])
def test_blocked_scales_past_the_decode_sizes(gpu, m, k, n, block):
    """MatMulNBits' call past M = 16 (dp4a-wide): blocked scales as the transposed view of an
    (N, groups) table, zero points as a Packed (N, groups)'s .mT; a ragged last group; odd K."""
    blocked_calls(m, k, n, block, lambda ta, tb: f"matmul_dp4a_wide<{ta.name}, {km(tb)}, float, 64, 64, 32, 8, 4>")


def test_batches(gpu):
    """A batch of odd-sized K-major matrices (every other one starting mid-byte) with per-batch b
    parameters beside a broadcast a; one K-major b beside a batch of a."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (2, 1, 24, 301)), kmajor(rng, I4, (4, 301, 41))
    b_s, zb = rng.uniform(0, 0.1, (4, 1, 41)).astype(F32), q(rng, I4, (4, 1, 41))
    b_zp = (zb, dev(dmlq.pack(zb)))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp, np.float32(0.5), I8.type(-3)),
         dp4a(U8, I4, "int8", "32, 32, 32, 4, 4"))
    same(dmlq.matmul_integer, q(rng, I8, (3, 20, 64)), kmajor(rng, U4, (64, 24)), (I8.type(-4), 9),
         dp4a(I8, U4, "int", "32, 32, 32, 4, 4"))


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 15 at every k, K = 4096, both signs: exact as int32."""
    extreme_sums(ta, tb, 20, 24, dp4a(ta, tb, "int", "32, 32, 32, 4, 4"))
