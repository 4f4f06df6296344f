"""quantized_matmul with a packed 4-bit b at M <= 16: the weight-streaming kernel
(cuda/matmul_stream_packed.cu; stream-m1 / -m4 / -m16), run by the host harness through
dmlq.quantized_matmul on arrays of the cupy stand-in, into poisoned outputs, byte for byte
against the NumPy reference; each call asserts which stream kernel ran. Sizes reach the
16-byte path (N a multiple of 32, whole 64-column blocks and a cut last one), the nibble path
(odd N: rows start mid-byte; matrices that start mid-byte), K tails inside a 4-deep k-word and
inside a 64-row stage, several stages, and K = 0."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq.gpu import device, matmul, qmm_stream
from dmlq.gpu.plan import recording
import cupy_stand_in as S
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import same

I8, U8, F32 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
MT = {1: 1, 2: 4, 3: 4, 4: 4, 5: 16, 7: 16, 9: 16, 11: 16, 13: 16, 16: 16}


def kern(ta, tb, to, m):
    return f"matmul_stream_packed<{ta.name}, packed_{tb.name}, {to.name}, {MT[m]}>"


def scales(rng, m, n):
    return rng.uniform(1e-3, 0.05, (m, 1)).astype(F32), rng.uniform(-0.05, 0.05, n).astype(F32)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 37, 5), (3, 200, 64), (4, 64, 96), (5, 3, 33), (7, 130, 160),
                                   (11, 65, 7), (13, 0, 9), (16, 129, 128)])
def test_rows_sizes_and_types(gpu, m, k, n):
    """Every M from 1 to 16 that changes the kernel or is prime, the four (a, b) type pairs and both
    outputs, per-row a and out parameters, per-column b ones (packed zero points)."""
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(((U8, I4), (I8, U4), (U8, U4), (I8, I4))):
        to = (I8, U8)[i % 2]
        a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
        a_s, b_s = scales(rng, m, n)
        with np.errstate(all="ignore"):
            same(dmlq.quantized_matmul, a, a_s, q(rng, ta, (m, 1)), b, b_s, dmlq.pack(q(rng, tb, (n,))),
                 rng.uniform(0.05, 1, (m, 1)).astype(F32), q(rng, to, (m, 1)), kernel=kern(ta, tb, to, m))
            same(dmlq.quantized_matmul, a, np.float32(0.02), None, b, np.float32(0.03), int(q(rng, tb, ())),
                 np.float32(0.25), to.type(3), kernel=kern(ta, tb, to, m))


@pytest.mark.parametrize("ta,tb", [(U8, I4), (U8, U4), (I8, I4), (I8, U4)])
def test_extreme_sums_and_saturation(gpu, ta, tb):
    """The largest |sum| (|a - a_zp| = 255 times |b - b_zp| = 15 at every k, K = 32768: both signs) read
    back exactly through a scale that keeps it in range, over split K (few column blocks), saturation to
    both ends of int8 and uint8, and K = 32769 leaving the stream kernel for dp4a-wide."""
    k, n = 32768, 3
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 15) if tb == U4 else (-8, 7)
    for av, za, bv, zb in ((hi_a, lo_a, lo_b, hi_b), (hi_a, lo_a, hi_b, lo_b)):
        a = np.full((2, k), av, ta)
        b = dmlq.pack(np.full((k, n), bv, tb))
        want = (av - za) * (bv - zb) * k
        assert abs(want) == 255 * 15 * k
        args = (a, np.float32(1), ta.type(za), b, np.float32(1.0 / 2**24), zb, np.float32(1), I8.type(0))
        got = same(dmlq.quantized_matmul, *args, kernel=kern(ta, tb, I8, 2))
        assert splits_run(dmlq.quantized_matmul, *args) > 1  # the sums cross chunks of K
        for to in (I8, U8):
            same(dmlq.quantized_matmul, a[:1], np.float32(1), ta.type(za), b, np.float32(1), zb, np.float32(1),
                 to.type(to == U8 and 128 or 0), kernel=kern(ta, tb, to, 1))
    assert np.abs(np.round(want / 2**24)) <= 127
    a = q(np.random.default_rng(0), ta, (1, k + 1))
    b = dmlq.pack(q(np.random.default_rng(1), tb, (k + 1, n)))
    same(dmlq.quantized_matmul, a, np.float32(1e-4), None, b, np.float32(1e-3), None, np.float32(1),
         kernel="matmul_dp4a_wide<")


def test_scale_layouts_batches_and_views(gpu):
    """Per-batch b scales and zero points, broadcast batches (a's and b's), matrices that start mid-byte
    (odd K * N), a non-contiguous a, out written through a temporary, strided packed bytes (copied)."""
    rng = np.random.default_rng(26)
    for tb in (I4, U4):
        for k, n in ((40, 64), (41, 7)):
            a3, b3 = q(rng, U8, (2, 1, 5, k)), q(rng, tb, (3, k, n))
            same(dmlq.quantized_matmul, a3, np.float32(0.02), np.uint8(7), dmlq.pack(b3),
                 rng.uniform(0, 0.1, (3, 1, n)).astype(F32), dmlq.pack(q(rng, tb, (3, 1, n))), np.float32(0.5),
                 np.int8(1), kernel=f"matmul_stream_packed<uint8, packed_{tb.name}, int8, 16>")
            same(dmlq.quantized_matmul, q(rng, I8, (3, 1, k)), rng.uniform(0, 0.1, (1, 1)).astype(F32), None,
                 dmlq.pack(q(rng, tb, (k, n))), rng.uniform(0, 0.1, (1, n)).astype(F32), None,
                 rng.uniform(0.1, 1, (1, 1)).astype(F32), np.uint8(128),
                 kernel=f"matmul_stream_packed<int8, packed_{tb.name}, uint8, 1>")
    base = q(rng, I8, (4, 2 * 70))
    b = dmlq.pack(q(rng, I4, (70, 96)))
    want = dmlq.quantized_matmul(base[:, ::2], np.float32(0.01), np.int8(-5), b, np.float32(0.02), -3,
                                 np.float32(0.3), np.int8(2))
    out = S.module.asarray(np.zeros((4, 200), I8))[:, ::2][:, :96]
    with recording() as plans:
        got = dmlq.quantized_matmul(S.module.asarray(base)[:, ::2], np.float32(0.01), np.int8(-5), dev(b),
                                    np.float32(0.02), -3, np.float32(0.3), np.int8(2), out=out)
    np.testing.assert_array_equal(got.get(), want)
    assert str(plans[-1]).startswith("quantized_matmul: stream-m4 (b: packed int4, unpacked in registers; a copied "
                                     "to a contiguous array; out written through a contiguous temporary)"), plans
    p = dmlq.pack(q(rng, U4, (41, 64)))
    strided = dmlq.Packed(S.module.asarray(np.repeat(p.data, 2))[::2], p.shape, p.dtype)
    a2 = q(rng, U8, (3, 41))
    got = dmlq.quantized_matmul(S.module.asarray(a2), np.float32(0.1), None, strided, np.float32(0.1), 5,
                                np.float32(1))
    np.testing.assert_array_equal(got.get(), dmlq.quantized_matmul(a2, np.float32(0.1), None, p, np.float32(0.1), 5,
                                                                   np.float32(1)))
    assert "b copied to a contiguous array" in str(dmlq.kernel_plan(
        dmlq.quantized_matmul, S.module.asarray(a2), np.float32(0.1), None, strided, np.float32(0.1), 5,
        np.float32(1)))


def test_special_scales(gpu):
    """NaN, inf and zero scales (0 * inf in the multiplier gives NaN -> the output zero point) and
    subnormal products, as the tiled kernels' epilogue computes them."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (6, 33)), dmlq.pack(q(rng, I4, (33, 8)))
    b_s = np.array([np.nan, np.inf, -np.inf, 0, 1e-38, 3e38, -1, 1e-45], F32)
    with np.errstate(all="ignore"):
        for a_s in (np.float32(0), np.float32(np.inf), np.float32(1e-30)):
            same(dmlq.quantized_matmul, a, a_s, np.uint8(3), b, b_s, 2, np.float32(0.5), np.int8(-7),
                 kernel="matmul_stream_packed<uint8, packed_int4, int8, 16>")


@pytest.mark.parametrize("tb", [I4, U4])
def test_row_pitch_wider_than_n_reads_nothing_past_the_last_row(host_device, tb):
    """The kernel's ABI takes b's row pitch ``ldb`` (in elements; the launcher passes N). With ldb a
    multiple of 32 but N not, the 16-byte loads stop at N and the row's last columns go through the
    nibble path: b here is an allocation that ends at the last row's N-th element (the rest of the
    pitch lies past it), so a 16-byte load of the last row's last columns is an out-of-bounds read
    (harness.IllegalAddress) although its values would be masked. Run on the host harness directly."""
    from numpy.lib.stride_tricks import as_strided

    rng = np.random.default_rng(171)
    m, k, n, ldb = 3, 70, 40, 64
    ta, to = U8, I8
    full = q(rng, tb, (k, ldb))  # the pitch's columns past N hold values the kernel must never use
    packed = dmlq.pack(full.reshape(-1)).data
    nbytes = ((k - 1) * ldb + n + 1) // 2
    raw = np.zeros(nbytes + 32, U8)
    off = (-raw.ctypes.data) % 16
    b = as_strided(raw[off:], shape=(nbytes,), strides=(1,))  # its own root: the allocation is these bytes
    b[...] = packed[:nbytes]
    a = q(rng, ta, (m, k))
    a_s, b_s, o_s = np.float32(0.02), np.float32(0.03), np.float32(0.5)
    a_z, b_z, o_z = np.uint8(3), int(q(rng, tb, ())), np.int8(-2)
    want = dmlq.quantized_matmul(a, a_s, a_z, dmlq.pack(full[:, :n]), b_s, b_z, o_s, o_z)
    out = np.full((m, n), 0x5A, np.uint8).view(to)
    args = (a, b, out, np.int32(m), np.int32(n), np.int32(k), np.zeros((1, 3), np.int64), np.int64(k),
            np.int64(ldb), np.int64(n), np.array([a_s]), np.array([b_s]), np.array([o_s]), np.array([a_z]),
            np.array([b_z], np.int8 if tb == I4 else U8), np.array([o_z]), np.int32(0), np.int32(0), np.int32(0), np.int64(0),
            np.int32(k), np.uint64(0))  # k_chunk = K, no partial sums: one chunk
    host_device.forget()
    host_device.launch("matmul_stream_packed.cu", kern(ta, tb, to, m), (-(-n // 64), 1), (128,), args)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def splits_run(fn, *args):
    """The stream plan's split count of the stand-in call fn(*args) (the plan that ran)."""
    with recording() as plans:
        fn(*(dev(a) for a in args))
    assert plans[-1].variant.startswith("stream-m"), plans
    return plans[-1].detail.splits


# (M, K, N): each splits K on the stand-in's H100 (few column blocks against 132 SMs' slots); K not a
# multiple of the chunk, odd K, K past 16 chunks, N = 1 and primes, whole and cut 64-column blocks.
SPLIT_SHAPES = [(1, 512, 1), (1, 1001, 7), (1, 8193, 5), (2, 4095, 64), (3, 2049, 97), (4, 1600, 33),
                (5, 777, 3), (9, 1153, 64), (16, 1024, 13), (16, 4097, 2)]


@pytest.mark.parametrize("m,k,n", SPLIT_SHAPES)
def test_split_k(gpu, m, k, n):
    """Split-K (partial int32 sums per chunk of K, the finish pass adding and requantizing them) bit-exact
    against the reference with per-row a and out parameters, per-column packed b zero points, and per
    tensor; the split count is the rule's, and more than one."""
    rng = np.random.default_rng(m * 100003 + k * 31 + n)
    for i, (ta, tb) in enumerate(((U8, I4), (I8, U4))):
        to = (I8, U8)[i]
        a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
        a_s, b_s = scales(rng, m, n)
        args = (a, a_s * np.float32(0.02), q(rng, ta, (m, 1)), b, b_s, dmlq.pack(q(rng, tb, (n,))),
                rng.uniform(0.05, 1, (m, 1)).astype(F32), q(rng, to, (m, 1)))
        with np.errstate(all="ignore"):
            same(dmlq.quantized_matmul, *args, kernel="matmul_stream_packed_finish<")
            same(dmlq.quantized_matmul, a, np.float32(2e-4), None, b, np.float32(0.03), int(q(rng, tb, ())),
                 np.float32(0.25), to.type(3), kernel=kern(ta, tb, to, m))
        want = qmm_stream.split_k(m, n, k, 1, device.info().sm_count, resident(ta, tb, to, m))
        assert want > 1
        assert splits_run(dmlq.quantized_matmul, *args) == matmul.k_chunks(k, want, 64)[0] > 1


def resident(ta, tb, to, m):
    """The stream kernel's resident blocks per SM as the stand-in's device reports them (from its cubin)."""
    return device.resident_blocks(qmm_stream.SOURCE, kern(ta, tb, to, m), qmm_stream.THREADS, 0)


@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_split_k_batches(gpu, ta, tb):
    """Per-batch b scales and zero points with broadcast batches over split K (the extreme sums over
    split K: test_extreme_sums_and_saturation)."""
    rng = np.random.default_rng(2626)
    k, n = 1031, 40
    a3, b3 = q(rng, ta, (2, 1, 3, k)), q(rng, tb, (3, k, n))
    args = (a3, np.float32(1e-3), ta.type(7), dmlq.pack(b3), rng.uniform(0, 0.01, (3, 1, n)).astype(F32),
            dmlq.pack(q(rng, tb, (3, 1, n))), np.float32(0.5), np.int8(1))
    same(dmlq.quantized_matmul, *args, kernel="matmul_stream_packed_finish<int8>")
    assert splits_run(dmlq.quantized_matmul, *args) > 1


def test_split_k_rule():
    """qmm_stream.split_k, pure: at the decode shapes of an H100 (132 SMs; 7 / 8 / 6 resident blocks, the
    sm_90 cubin's registers for MT = 1 / 4 / 16) the values worked by hand in the kernel's napkin math, and
    over a grid of shapes the rule's bounds: one wave of blocks, chunks of whole 64-row stages, at least 4
    of them, none empty, at most 32 chunks, partial sums at most half of b's bytes."""
    def chunks(m, n, k, batch, sms, resident):
        s = qmm_stream.split_k(m, n, k, batch, sms, resident)
        return matmul.k_chunks(k, s, 64) if s > 1 else (1, k)

    assert chunks(1, 4096, 4096, 1, 132, 7) == (13, 320)      # 924 // 64 = 14 -> 5 stages a chunk
    assert chunks(1, 8192, 8192, 1, 132, 7) == (7, 1216)      # 924 // 128 = 7 -> 19 stages
    assert chunks(1, 14336, 4096, 1, 132, 7) == (4, 1024)
    assert chunks(4, 4096, 4096, 1, 132, 8) == (16, 256)      # 1056 // 64 = 16, 64 stages // 4 = 16
    assert chunks(16, 4096, 4096, 1, 132, 6) == (11, 384)     # 792 // 64 = 12, K // 256 = 16 -> 6 stages
    assert chunks(16, 14336, 4096, 1, 132, 6) == (3, 1408)
    assert chunks(16, 4096, 1024, 1, 132, 6) == (4, 256)      # partials: 1024 // (16 * 16) = 4
    assert chunks(1, 64, 32768, 1, 132, 7) == (32, 1024)      # SPLIT_MAX
    assert chunks(1, 64, 447, 1, 132, 7) == (1, 447)          # 7 stages: one chunk
    assert chunks(1, 64, 511, 1, 132, 7) == (2, 256)          # 8 stages (the last one cut): two
    assert chunks(1, 65536, 4096, 1, 132, 7) == (1, 4096)     # 1024 column blocks fill the slots
    assert chunks(1, 4096, 4096, 15, 132, 7) == (1, 4096)     # so do 15 matrices
    assert chunks(1, 4096, 0, 1, 132, 7) == (1, 0)
    for sms, resident in ((132, 7), (132, 6), (4, 7), (114, 8)):
        for m in (1, 2, 4, 9, 16):
            for n in (1, 7, 64, 97, 4096, 11008, 14336, 65536):
                for k in (0, 1, 255, 511, 512, 1000, 4096, 14336, 32768):
                    for batch in (1, 3):
                        s = qmm_stream.split_k(m, n, k, batch, sms, resident)
                        assert 1 <= s <= qmm_stream.SPLIT_MAX
                        if s == 1:
                            continue
                        ns, ch = matmul.k_chunks(k, s, 64)
                        blocks = -(-n // 64) * batch
                        assert 1 < ns <= s and ch % 64 == 0 and ch >= 4 * 64, (m, n, k, batch, s, ns, ch)
                        assert (ns - 1) * ch < k <= ns * ch
                        assert blocks * ns <= sms * resident
                        assert ns * m * n * 4 * 2 <= n * k / 2


def test_split_k_in_the_printed_plan():
    """kernel_plan on NumPy arrays (a nominal H100: 132 SMs, occupancy from the 128-thread block alone,
    16 blocks) shows the split and the finish pass; a full grid shows neither."""
    a = np.zeros((1, 4096), U8)
    b = dmlq.Packed(np.zeros(4096 * 4096 // 2, U8), (4096, 4096), "int4")
    text = str(dmlq.kernel_plan(dmlq.quantized_matmul, a, np.float32(1), None, b, np.float32(1), None,
                                np.float32(1), np.int8(0)))
    assert text.splitlines() == [
        "quantized_matmul: stream-m1 (b: packed int4, unpacked in registers; split-K: 16 splits of 256 (1024 "
        "blocks for 132 SMs x 16 resident))",
        "  matmul_stream_packed<uint8, packed_int4, int8, 1>  grid 64x1x16  block 128",
        "  matmul_stream_packed_finish<int8>  grid 16x1  block 256  (split-K sum and requantize)"], text
    b = dmlq.Packed(np.zeros(256 * 65536 // 2, U8), (256, 65536), "int4")
    text = str(dmlq.kernel_plan(dmlq.quantized_matmul, a[:, :256], np.float32(1), None, b, np.float32(1), None,
                                np.float32(1), np.int8(0)))
    assert "split" not in text and "grid 1024x1 " in text, text
