"""The Hopper wgmma kernel (cuda/matmul_wgmma.cu, both variants: 64- and 128-byte k tiles) on the host harness,
whose PTX interpreter emulates wgmma from the PTX ISA (tests/cuda_host): every edge of its
staging (a tile inside K with whole 16-byte copies, the last tile of a ragged K with byte
counts and zero fill, rows past M and N never copied), several tiles and a split K, the
transposed copy of b (odd N and K, a view, a batch, a broadcast b), a's padded copy when its
rows are not 16 bytes apart, all four signedness pairs and the three operators' epilogues,
against dmlq.reference. Named `emulated` so tools/mutate.py selects them."""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import reference as ref
from dmlq.gpu import intmm_tiled, matmul, qmm
from dmlq.gpu.matmul import plan_tiled
from test_host_matmul_staging import TYPES, exact_view, run_case

pytestmark = pytest.mark.skipif(not matmul.HAVE_WGMMA, reason="matmul_wgmma.cu absent")
VARIANTS = tuple(matmul.WGMMA_CONFIGS)


@pytest.fixture(params=VARIANTS)
def V(request):
    return request.param


# (M, K, N, lda, A skew, ldb, B skew, batch (count, A stride, B stride), splits)
CASES = [
    (37, 70, 40, 80, 0, 48, 0, None, None),       # K tail of 6 inside a chunk: byte counts, zero fill
    (20, 128, 133, 128, 0, 133, 0, None, None),   # N = 133: a part B tile; whole k tiles
    (130, 200, 70, 208, 0, 72, 4, None, None),    # M past one tile, K tail of 8, b off 16 bytes
    (16, 12, 16, 16, 0, 16, 0, None, None),       # K < 16: one tile, shorter than the pipeline
    (16, 1000, 20, 1008, 0, 20, 0, None, 3),      # split-K over a K tail of 40
    (1, 68, 9, 80, 0, 9, 1, None, None),          # one row of a; N = 9, b at an odd address
    (131, 63, 129, 64, 0, 129, 0, None, None),    # K = 63 (one part tile), M and N one past a tile
    (24, 100, 28, 112, 0, 28, 0, (2, 2704, 2800), None),  # a batch
    (200, 384, 260, 384, 0, 260, 0, None, None),  # 2 x 3 tiles of 6 (3) k tiles: the 4-stage ring turns
    (40, 960, 24, 960, 0, 24, 0, None, 1),        # 15 (8) k tiles unsplit, the 3-stage ring turns twice
    (20, 192, 9, 192, 0, 9, 0, None, None),       # K = 192: a last 128-byte tile's second half all zero fill
    (33, 70, 17, 70, 4, 17, 0, None, None),       # a's rows not 16 bytes apart: its padded copy
]


def _names(host):
    return [c[0] for c in host.calls]


@pytest.mark.parametrize("case", CASES)
def test_emulated_wgmma_edges(host, rng, case, V):
    M, K, N, lda, a_skew, ldb, b_skew, batch, splits = case
    types = TYPES[(M + K + N) % 4]
    names = run_case(host, rng, V, M, K, N, lda, a_skew, ldb, b_skew, types, batch, splits)
    assert any(n.startswith("matmul_wgmma<") for n in names), names
    # unsplit the kernel finishes each output itself; split, the split-K epilogue adds the partials
    assert any(n.startswith("matmul_splitk_epilogue<") for n in names) is bool(splits and splits > 1), names


def _int_family(V, a, a_zp, b, b_zp, out, a_s=None, b_s=None, bias=None, splits=None):
    """matmul_integer (int32 out) or matmul_integer_to_float forced onto the wgmma kernel."""
    op = "matmul_integer" if out.dtype == np.int32 else "matmul_integer_to_float"
    plan = plan_tiled(op, a, a_zp is not None, b, b_zp is not None, out, variant=V, splits=splits)
    assert plan.variant == V, plan
    if op == "matmul_integer":
        intmm_tiled._bind(plan, a, b, out, None, None, a_zp, None, b_zp, None)(a, a_zp, b, b_zp, out)
    else:
        intmm_tiled._bind(plan, a, b, out, None, a_s, a_zp, b_s, b_zp, bias)(a, a_s, a_zp, b, b_s, b_zp, bias, out)
    return out


@pytest.mark.parametrize("ta,tb", [(a, b) for a in ("int8", "uint8") for b in ("int8", "uint8")])
def test_emulated_wgmma_extremes_at_the_int32_limit(host, ta, tb, V):
    """Every element at its type's extreme, zero points at the other extreme, K = 32768 (the
    int32 path's limit): the corrected sums reach their largest magnitude, exact."""
    M, N, K = 3, 5, 32768
    a = np.full((M, K), np.iinfo(ta).min, ta)
    b = np.full((K, N), np.iinfo(tb).max, tb)
    a_zp, b_zp = np.array([np.iinfo(ta).max], ta), np.array([np.iinfo(tb).min], tb)
    want = ref.matmul_integer(a, a_zp, b, b_zp, np.empty((M, N), np.int32))
    out = _int_family(V, a, a_zp, b, b_zp, np.full((M, N), 0x5A5A5A5A, np.int32))
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("to", [np.float32, np.float16, np.int32])
def test_emulated_wgmma_integer_family(host, rng, to, V):
    """matmul_integer (int32) and matmul_integer_to_float (float32/float16, a bias) on the wgmma
    kernel, unsplit and split: the same sums, each operator's own epilogue."""
    M, K, N = 70, 150, 90
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    a_zp = rng.integers(0, 256, (M, 1)).astype(np.uint8)
    b_zp = rng.integers(-128, 128, (1, N)).astype(np.int8)
    a_s = (rng.uniform(0.5, 2, (M, 1)) * 1e-3).astype(np.float32)
    b_s = rng.uniform(0.5, 2, (1, N)).astype(np.float32)
    bias = rng.standard_normal((N,)).astype(np.float32)
    for splits in (1, 2):
        host.calls.clear()
        out = np.empty((M, N), to)
        out.view(np.uint8)[...] = 0x5A
        if to == np.int32:
            want = ref.matmul_integer(a, a_zp, b, b_zp, np.empty((M, N), to))
            _int_family(V, a, a_zp, b, b_zp, out, splits=splits)
        else:
            want = ref.matmul_integer_to_float(a, a_s, a_zp, b, b_s, b_zp, bias, np.empty((M, N), to))
            _int_family(V, a, a_zp, b, b_zp, out, a_s, b_s, bias, splits=splits)
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
        assert any(n.startswith("matmul_wgmma<uint8, int8") for n in _names(host)), _names(host)


def _transposed_notes(a, b, s, out, V):
    plan = qmm.plan_quantized_matmul(a, s, None, b, s, None, s, None, out, variant=V)
    return [note for note in plan.notes if "copied transposed" in note]


def test_emulated_wgmma_reads_a_k_major_b_as_it_is(host, rng, V):
    """b already N rows of K contiguous bytes, 16 bytes apart (x @ w.T of an (N, K) weight: the
    layout torch's Linear keeps), is read as it is, no transposed copy: 2-D beside a batch of a
    (batch stride 0), a batch of such matrices, and with both zero points (b's column sums are
    then its rows' sums, read from b itself)."""
    s = np.float32([0.01])
    w = exact_view(rng, (72, 96), (96, 1), 0, np.uint8)  # (N, K), rows 96 bytes apart
    wb = exact_view(rng, (3, 40, 112), (40 * 112, 112, 1), 0, np.int8)  # a batch of (N, K), K = 112
    cases = [(rng.integers(-128, 128, (3, 40, 96)).astype(np.int8), w.T, None, None),
             (rng.integers(0, 256, (3, 24, 112)).astype(np.uint8), wb.swapaxes(-1, -2), None, None),
             (rng.integers(0, 256, (50, 96)).astype(np.uint8), w.T, np.uint8(7), np.uint8(200))]
    for a, b, a_zp, b_zp in cases:
        shape = a.shape[:-1] + b.shape[-1:]
        want = ref.quantized_matmul(a, s, a_zp, b, s, b_zp, s, None, np.empty(shape, np.int8))
        out = np.full(shape, 0x5A, np.uint8).view(np.int8)
        host.calls.clear()
        qmm.quantized_matmul(a, s, a_zp, b, s, b_zp, s, None, out, variant=V)
        np.testing.assert_array_equal(out, want)
        assert any(c[0].startswith("matmul_wgmma<") for c in host.calls), _names(host)
        plan = qmm.plan_quantized_matmul(a, s, a_zp, b, s, b_zp, s, None, out, variant=V)
        assert not any("b copied" in note for note in plan.notes), plan.notes


def test_emulated_wgmma_copies_b_transposed_otherwise(host, rng, V):
    """b that is not K-major rows 16 bytes apart is copied transposed first: row-major b, K-major
    rows 70 bytes apart, K-major rows at an address off 16 bytes, and a K-major batch whose
    matrices are 808 bytes apart (16 * 50 + 8); each bit for bit."""
    s = np.float32([0.01])
    i8 = np.int8
    cases = [(rng.integers(0, 256, (30, 64)).astype(np.uint8), exact_view(rng, (64, 20), (20, 1), 0, i8)),
             (rng.integers(0, 256, (30, 70)).astype(np.uint8), exact_view(rng, (20, 70), (70, 1), 0, i8).T),
             (rng.integers(0, 256, (30, 64)).astype(np.uint8), exact_view(rng, (20, 64), (64, 1), 4, i8).T),
             (rng.integers(0, 256, (2, 30, 32)).astype(np.uint8),  # two K-major matrices 808 bytes apart
              exact_view(rng, (2, 20, 32), (808, 32, 1), 0, i8).swapaxes(-1, -2))]
    for a, b in cases:
        shape = a.shape[:-1] + b.shape[-1:]
        want = ref.quantized_matmul(a, s, None, b, s, None, s, None, np.empty(shape, np.int8))
        out = np.full(shape, 0x5A, np.uint8).view(np.int8)
        qmm.quantized_matmul(a, s, None, b, s, None, s, None, out, variant=V)
        np.testing.assert_array_equal(out, want)
        assert _transposed_notes(a, b, s, out, V), (b.shape, b.strides)


def test_wgmma_is_forced_only_and_on_9_0_alone(V):
    """Selection does not take the kernel (no GPU has checked it yet); forced on a device of
    another compute capability, or with a packed b, it is a ValueError naming the variant,
    before any launch."""
    from cuda_host import harness
    from dmlq.gpu import device

    for cc in (80, 90, 100):
        assert matmul.select_variant(8192, 8192, 8192, 1, cc) != V
    assert not any(c.auto for c in matmul.WGMMA_CONFIGS.values())
    a, b, s = np.zeros((4, 8), np.int8), np.zeros((8, 4), np.int8), np.float32([1.0])
    for cc in (80, 89, 100):
        dev = harness.HostDevice(cc=cc)
        try:
            with device.using(dev), pytest.raises(ValueError, match=rf"'{V}' runs on compute capability 9\.0"):
                qmm.quantized_matmul(a, s, None, b, s, None, s, None, np.empty((4, 4), np.int8), variant=V)
            assert not dev.calls
        finally:
            dev.close()
    import ml_dtypes

    from dmlq import pack

    data = pack(np.zeros((8, 4), ml_dtypes.int4)).data  # a packed int4 b, as the kernels take it
    dev = harness.HostDevice(cc=90)
    try:
        with device.using(dev), pytest.raises(ValueError, match=f"'{V}' does not apply to a packed 4-bit b"):
            qmm.quantized_matmul(a, s, None, data, s, None, s, None, np.empty((4, 4), np.int8), ("int4", (8, 4), True),
                                 variant=V)
        assert not dev.calls
    finally:
        dev.close()
