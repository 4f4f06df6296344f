"""An 8-bit b held K-major (the transposed view of an (N, K) int8 / uint8 weight, ``x @ w.T`` with
torch's Linear layout) on the dp4a tiles (cuda/matmul_dp4a_kmajor.cu: matmul_dp4a.cu's gemm with
b's tag ``kmajor_int8`` / ``kmajor_uint8``, each column's 4 k one 32-bit load, already the shared
tile's word), where selection takes a dp4a tile past the decode sizes: small products, blocked
scales along K (dp4a-wide), K past 32768 (dp4a-wide). Before, b was copied to rows first. Run by
the host harness through the public functions on arrays of the cupy stand-in, into poisoned
outputs, byte for byte against the same call on NumPy arrays; each call asserts the kernel that
ran and that the plan reads b K-major, not copied. Every tile the rule picks, every operator and
zero-point form (b's column sums for a's zero point from its K-major rows), columns on 4 bytes
(the word path) and off them (the edge path: A's windows, bytes past K zero), K cut inside a
word, N cut inside a block, blocked scales with a ragged last group, batches with per-batch b
parameters and a b broadcast over a's batch, K past 32768, the int32 extremes."""
from __future__ import annotations

import numpy as np
import pytest

import cupy_stand_in as S
import dmlq
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream8_kmajor import PAIRS, float_forms, km, kmajor, quantized_forms, same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))

# label -> (M, K, N, pad, tile): sizes the rule sends to each dp4a tile on the harness (4 SMs), under the
# tensor cores' minimum work; pad: b's columns rounded up to that many bytes (1: K apart)
SIZES = {
    "32x32, columns on 16 bytes": (20, 64, 40, 16, "32, 32, 32, 4, 4"),
    "32x32, columns 75 bytes apart, N ragged": (33, 75, 37, 1, "32, 32, 32, 4, 4"),
    "64x64, K cut inside a word": (128, 90, 128, 4, "64, 64, 32, 8, 4"),
    "128x64": (256, 64, 128, 1, "128, 64, 32, 8, 8"),
}


def dp4a(ta, tb, to, tile):
    return f"matmul_dp4a<{ta.name}, {km(tb)}, {to}, {tile}>"


@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer(gpu, label):
    """Every (a, b) type pair and zero-point form; a's zero point takes b's column sums from the
    sums of its K-major rows (matmul_row_sums of b's type, ldb apart)."""
    m, k, n, pad, tile = SIZES[label]
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n), pad)
        forms = ((q(rng, ta, (m, 1)), q(rng, tb, (n,))), (ta.type(q(rng, ta, ())), tb.type(q(rng, tb, ()))),
                 (None, None))
        for a_zp, b_zp in forms[i % 2:]:
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), dp4a(ta, tb, "int", tile))
            if a_zp is not None:
                assert launched(f"matmul_row_sums<{tb.name}>"), kernels()


@pytest.mark.parametrize("label", list(SIZES))
def test_float_and_quantized(gpu, label):
    """matmul_integer_to_float (float32 with per-row a and per-column b parameters and a bias,
    float16 with single values) and quantized_matmul (both outputs)."""
    m, k, n, pad, tile = SIZES[label]
    rng = np.random.default_rng(m * k + n)
    for i, (ta, tb) in enumerate(PAIRS[:2]):
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n), pad)
        float_forms(same, rng, ta, a, b, q(rng, tb, (1, n)), lambda to, ta=ta, tb=tb: dp4a(ta, tb, to, tile))
        quantized_forms(same, rng, m, ta, tb, (I8, U8)[i], a, b, q(rng, tb, (n,)), tb.type(q(rng, tb, ())),
                        lambda to, ta=ta, tb=tb: dp4a(ta, tb, to.name, tile))


@pytest.mark.parametrize("m,k,n,block,pad", [(20, 256, 40, 32, 16), (40, 200, 33, 64, 1), (17, 301, 24, 32, 4)])
def test_blocked_scales(gpu, m, k, n, block, pad):
    """Blocked scales past M = 16 (dp4a-wide): scales and zero points per group and column, a
    ragged last group, odd K; columns on and off 4 bytes."""
    rng = np.random.default_rng(m * 31 + k + n + block)
    groups = -(-k // block)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n), pad)
        same(dmlq.matmul_integer_to_float, a, b, (rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                                  rng.uniform(-1, 1, (groups, n)).astype(F32), q(rng, tb, (groups, n)),
                                                  rng.uniform(-9, 9, n).astype(F32)),
             f"matmul_dp4a_wide<{ta.name}, {km(tb)}, float, 64, 64, 32, 8, 4>", block_size=block)


def test_k_past_32768(gpu):
    """K = 33,001 (dp4a-wide, chunks of 32,768: int64 totals) with the extreme values, so that the
    int32 partial sums reach their largest magnitude; columns 33,004 bytes apart."""
    m, k, n = 17, 33001, 5
    a = np.full((m, k), 255, U8)
    w = np.full((n, k + 3), -128, I8)
    b = (w[:, :k].T, S.module.asarray(w)[:, :k].T)
    same(dmlq.matmul_integer, a, b, (U8.type(0), I8.type(127)), f"matmul_dp4a_wide<uint8, {km(I8)}, int, 64, 64, 32, 8, 4>")


def test_batches_and_broadcast(gpu):
    """A batch of K-major matrices with per-batch b scales and zero points beside a broadcast a;
    one K-major b beside a batch of a."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (2, 1, 20, 70)), kmajor(rng, I8, (4, 70, 41), 4)
    b_s, zb = rng.uniform(0, 0.1, (4, 1, 41)).astype(F32), q(rng, I8, (4, 1, 41))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, zb, np.float32(0.5), I8.type(-3)),
         "matmul_dp4a<uint8, kmajor_int8, int8, 32, 32, 32, 4, 4>")
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.02), U8.type(100), b_s, zb),
         "matmul_dp4a<uint8, kmajor_int8, float, 32, 32, 32, 4, 4>")
    same(dmlq.matmul_integer, q(rng, I8, (3, 20, 64)), kmajor(rng, U8, (64, 24), 16), (I8.type(-4), U8.type(9)),
         "matmul_dp4a<int8, kmajor_uint8, int, 32, 32, 32, 4, 4>")


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 255 at every k, K = 4096, both signs: exact as int32."""
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 255) if tb == U8 else (-128, 127)
    m, k, n = 20, 4096, 6
    for bv, zb in ((hi_b, lo_b), (lo_b, hi_b)):
        w = np.full((n, k), bv, tb)
        b = (w.T, S.module.asarray(w).T)
        same(dmlq.matmul_integer, np.full((m, k), hi_a, ta), b, (ta.type(lo_a), tb.type(zb)),
             f"matmul_dp4a<{ta.name}, {km(tb)}, int, 32, 32, 32, 4, 4>")
