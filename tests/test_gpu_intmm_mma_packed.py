"""A packed 4-bit b (dmlq.Packed of int4 / uint4) on the tensor cores: cuda/matmul_mma_packed.cu (matmul_mma.cu
staging the packed bytes with cp.async and unpacking them from shared memory into the IMMA fragments) for
matmul_integer, matmul_integer_to_float and quantized_matmul, where an int8 b takes mma-128x128; run by the host
harness through the public functions on arrays of the cupy stand-in, into poisoned outputs, byte for byte against
the NumPy reference. Each test asserts which kernels ran and how b was staged (16- or 4-byte copies of its rows as
they are, or rows padded first: odd N, N not a multiple of 8)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from dmlq.gpu import matmul, qmm
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)

pytestmark = pytest.mark.skipif(not matmul.HAVE_MMA_PACKED, reason="matmul_mma_packed.cu absent")

# label -> (M, K, N, the cp.async width of both operands); the harness has 4 SMs: split-K when the tiles fill
# under 8 block slots.
SIZES = {
    "rows as they are, 16-byte copies": (130, 256, 160, 16),  # N / 2 bytes a multiple of 16
    "rows as they are, 4-byte copies": (129, 260, 136, 4),    # 68-byte rows; K not a multiple of 64
    "odd N: padded rows": (131, 259, 131, 16),                # rows start mid-byte; odd K (a padded too)
    "split-K, padded rows": (40, 1008, 130, 16),              # 65-byte rows; 4 splits of 256
}


def _mma(ta, tb, to=""):
    return f"matmul_mma<{ta.name}, packed_{tb.name}, {to.replace('float32', 'float')}"


def _check_staging(label):
    names = [n for n, *_ in S.launches if n.startswith("matmul_mma<")]
    assert names, kernels()
    vec = SIZES[label][3] if label in SIZES else 16
    assert all(n.endswith(f", {vec}>") for n in names), names
    if "split-K" in label:
        assert "matmul_splitk_epilogue" in kernels()


@pytest.mark.parametrize("label", list(SIZES))
@pytest.mark.parametrize("ta,tb", [(U8, I4), (I8, U4)])
def test_matmul_integer(gpu, label, ta, tb):
    m, k, n, _ = SIZES[label]
    rng = np.random.default_rng(m + k + n)
    a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    same(dmlq.matmul_integer, a, b, q(rng, ta, (m, 1)), dmlq.pack(q(rng, tb, (n,))), kernel=_mma(ta, tb, "int"))
    _check_staging(label)
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), dev(b)))
    assert ("b copied into rows padded to 16 bytes" in plan) == ("padded" in label), plan
    assert f"matmul_col_sums<packed_{tb.name}>" in [x for x, *_ in S.launches], kernels()
    same(dmlq.matmul_integer, a, b, None, int(q(rng, tb, ())), kernel=_mma(ta, tb, "int"))
    same(dmlq.matmul_integer, a, b, kernel=_mma(ta, tb, "int"))


@pytest.mark.parametrize("out_dtype", [F32, F16])
@pytest.mark.parametrize("label", list(SIZES))
def test_matmul_integer_to_float(gpu, label, out_dtype):
    m, k, n, _ = SIZES[label]
    rng = np.random.default_rng(m * k + n)
    for ta, tb in ((U8, I4), (I8, U4)):
        a, b = q(rng, ta, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
        # (a_scale, a_zero_point, b_scale, b_zero_point, bias): per row / column / element, then per tensor
        for params in [(rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)), rng.uniform(-1, 1, n).astype(F16),
                        dmlq.pack(q(rng, tb, (1, n))), rng.uniform(-50, 50, (m, n)).astype(F32)),
                       (np.float32(0.01), None, np.float32(-3e-3), 5, rng.uniform(-1, 1, n).astype(F16))]:
            with np.errstate(all="ignore"):
                same(dmlq.matmul_integer_to_float, a, *params[:2], b, *params[2:], dtype=out_dtype,
                     kernel=_mma(ta, tb, out_dtype.name + ","))
            _check_staging(label)


@pytest.mark.parametrize("label", list(SIZES))
@pytest.mark.parametrize("tb", [I4, U4])
def test_quantized_matmul(gpu, label, tb):
    """Per-row and per-column parameters, packed and int zero points, per-batch b scales and zero points."""
    m, k, n, _ = SIZES[label]
    rng = np.random.default_rng(m * 31 + k + n)
    a, b = q(rng, U8, (m, k)), dmlq.pack(q(rng, tb, (k, n)))
    kern = _mma(U8, tb, "uint8,")
    with np.errstate(all="ignore"):
        same(dmlq.quantized_matmul, a, rng.uniform(0, 0.01, (m, 1)).astype(F32), q(rng, U8, (m, 1)), b,
             rng.uniform(-0.01, 0.01, n).astype(F32), dmlq.pack(q(rng, tb, (n,))), np.float32(0.5), np.int8(-3),
             kernel=_mma(U8, tb, "int8,"))
        _check_staging(label)
        same(dmlq.quantized_matmul, a, np.float32(0.002), None, b, np.float32(0.003), 2, np.float32(0.25),
             np.uint8(100), kernel=kern)
    a3, b3 = q(rng, U8, (2, m, k)), dmlq.pack(q(rng, tb, (2, k, n)))
    same(dmlq.quantized_matmul, a3, np.float32(0.02), np.uint8(7), b3, rng.uniform(0, 0.01, (2, 1, n)).astype(F32),
         dmlq.pack(q(rng, tb, (2, 1, n))), np.float32(0.5), kernel=kern)


def test_extremes_and_special_scales(gpu):
    """uint4 15 / int4 -8 against 255 and -128 with extreme zero points (the largest int32 sums), NaN / inf / zero
    a scales, -0.0 and 1e30 b scales (float16 overflow to inf), N = 17 (odd: padded rows)."""
    k = 500
    for (ta, av, azp), (tb, bv, zp), dt in [((U8, 255, 0), (U4, 15, 0), F16), ((I8, -128, 127), (I4, -8, 7), F32),
                                            ((U8, 0, 255), (U4, 0, 15), F16), ((I8, 127, -128), (I4, 7, -8), F16),
                                            ((U8, 255, 0), (I4, -8, 7), F32)]:
        ext_a, ext_b = np.full((130, k), av, ta), dmlq.pack(np.full((k, 72), bv, tb))
        same(dmlq.matmul_integer, ext_a, ext_b, np.array(azp, ta), zp, kernel=_mma(ta, tb, "int"))
        same(dmlq.matmul_integer_to_float, ext_a, np.float32(1), None, ext_b, np.float32(1), zp, dtype=dt,
             kernel=_mma(ta, tb, dt.name + ","))
    rng = np.random.default_rng(9)
    a, b = q(rng, U8, (130, 2000)), dmlq.pack(q(rng, I4, (2000, 17)))  # split-K: 2 tiles, 4 splits
    s = np.full((130, 1), 1.0, F32)
    s[:4, 0] = [np.nan, np.inf, -np.inf, 0.0]
    b_s = rng.uniform(-1, 1, 17).astype(F32)
    b_s[:3] = [1, -0.0, 1e30]
    with np.errstate(all="ignore"):
        for dt in (F32, F16):
            same(dmlq.matmul_integer_to_float, a, s, np.uint8(255), b, b_s, None, dtype=dt, kernel=_mma(U8, I4))


def test_batches_and_broadcast(gpu):
    """Three matrices of b broadcast against a (2, 1, M, K) batch, per-batch b scales and packed zero points, a
    per-matrix bias: rows as they are (N = 64: 32-byte rows, every matrix on a 16-byte boundary) and padded
    (N = 70: 35-byte rows, so matrices 1 and 2 would start mid-row)."""
    rng = np.random.default_rng(3)
    for n in (64, 70):
        a, b = q(rng, U8, (2, 1, 130, 192)), q(rng, U4, (3, 192, n))
        b_s = rng.uniform(0, 1, (3, 1, n)).astype(F32)
        bzp = dmlq.pack(q(rng, U4, (3, 1, n)))
        bias = rng.uniform(-1, 1, (2, 3, 130, n)).astype(F32)
        kern = _mma(U8, U4)
        same(dmlq.matmul_integer_to_float, a, np.float32(0.5), np.uint8(3), dmlq.pack(b), b_s, bzp, bias,
             kernel=kern)
        _check_staging("16-byte")
        same(dmlq.matmul_integer, a, dmlq.pack(b), None, bzp, kernel=kern)
        plan = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), dev(dmlq.pack(b))))
        assert ("b copied into rows padded to 16 bytes" in plan) == (n == 70), plan


def test_offset_and_strided_bytes(gpu):
    """The packed bytes at an odd address (4-byte copies impossible: padded rows) and as a strided view."""
    rng = np.random.default_rng(12)
    a, p = q(rng, I8, (130, 512)), dmlq.pack(q(rng, I4, (512, 64)))
    raw = S.module.asarray(np.concatenate([np.zeros(1, U8), p.data]))[1:]
    strided = S.module.asarray(np.repeat(p.data, 2))[::2]
    want = dmlq.matmul_integer(a, p, np.int8(-5), -3)
    for data in (raw, strided):
        packed = dmlq.Packed(data, p.shape, p.dtype)
        S.launches.clear()
        got = dmlq.matmul_integer(S.module.asarray(a), packed, np.int8(-5), -3)
        np.testing.assert_array_equal(got.get(), want)
        assert any(n.startswith(_mma(I8, I4, "int")) for n, *_ in S.launches), kernels()
        assert "b copied into rows padded to 16 bytes" in str(dmlq.kernel_plan(dmlq.matmul_integer,
                                                                               S.module.asarray(a), packed))


def test_full_k_single_pass_sums(gpu):
    """K = 32768 in one pass (splits=1): 16 * 255 * 15 * 32768 is the largest scaled int32 sum the kernel holds
    before its shift back; requantized so the sums decide the bytes."""
    k = 32768
    a, b = np.full((17, k), 255, U8), np.full((k, 16), 15, U4)
    b[:, 1::2] = 14
    args = [None if x is None else S.module.asarray(x) for x in (a, np.array([1.0], F32), None, dmlq.pack(b).data,
                                                                 np.array([1.0], F32), None, np.array([2.0**19], F32),
                                                                 None)]
    out = S.module.asarray(np.full((17, 16), 0xA5, U8))
    qmm.quantized_matmul(*args[:3], args[3], *args[4:], out, ("uint4", (k, 16), False),
                            variant="mma-128x128", splits=1)
    want = dmlq.quantized_matmul(a, np.float32(1), None, dmlq.pack(b), np.float32(1), None, np.float32(2.0**19))
    np.testing.assert_array_equal(out.get(), want)
    assert sorted(set(want.ravel().tolist())) == [223, 239]


def test_kernel_plan_names_the_packed_mma_kernel(gpu):
    a, p = dev(np.zeros((130, 256), U8)), dev(dmlq.pack(np.zeros((256, 140), U4)))
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, 0.1, None, dtype=np.float16))
    assert plan.splitlines()[0] == ("matmul_integer_to_float: mma-128x128 (b: packed uint4, unpacked from shared "
                                    "memory into the tensor-core fragments; b copied into rows padded to 16 bytes)"), plan
    assert "matmul_mma<uint8, packed_uint4, float16, 128, 128, 64, 4, 16>" in plan
    plan = str(dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, np.uint8(1), dev(dmlq.pack(np.zeros((256, 160), I4))),
                                0.1, None, 0.5))
    assert "matmul_col_sums<packed_int4>" in plan and "matmul_mma<uint8, packed_int4, uint8, 128, 128, 64, 4, 16>" \
        in plan and "padded" not in plan, plan
    # blocked scales along K: the grouped tensor-core tile (session 41; dp4a-wide before)
    plan = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, dev(np.ones((8, 140), F32)), None,
                                block_size=32))
    assert plan.splitlines()[0].startswith("matmul_integer_to_float: mma-grouped"), plan
    assert "matmul_mma<uint8, packed_uint4, float, 64, 128, 64, 4, 16, true>" in plan, plan


def test_selection_is_the_int8_rule():
    """select_variant gives a packed b the variant an int8 b gets (tensor cores included) past M = 16, the
    smallest stream-m* at M <= 16, wide K dp4a-wide, blocked scales the grouped tensor-core tile (where the
    tensor cores would take the product), and no tensor cores without the packed source."""
    for m, n, k, batch in [(4096, 4096, 4096, 1), (16, 4096, 4096, 1), (130, 140, 260, 1), (17, 16, 32768, 1),
                           (130, 140, 200, 1), (1, 4096, 4096, 1), (8, 8, 8, 1), (64, 64, 64, 8),
                           (4096, 4096, 32769, 1), (4096, 4096, 16, 1)]:
        for cc in (75, 80, 90):
            want = matmul.select_variant(m, n, k, batch, cc, have_mma=True)
            if m <= 16 and k <= matmul.WIDE_K:  # quantized_matmul's weight-streaming kernel takes small M
                want = next(name for name, rows in matmul.STREAM_M.items() if m <= rows)
            assert matmul.select_variant(m, n, k, batch, cc, have_mma=True, packed=True) == want, (m, n, k, cc)
    assert matmul.select_variant(4096, 4096, 4096, 1, 90, packed=True) == "mma-128x128"
    assert matmul.select_variant(4096, 4096, 4096, 1, 90, packed=True, blocked=True) == "mma-grouped"
    assert matmul.select_variant(4096, 4096, 4096, 1, 75, packed=True, blocked=True) == "dp4a-wide"
    assert matmul.select_variant(4096, 4096, 32769, 1, 90, packed=True) == "dp4a-wide"
