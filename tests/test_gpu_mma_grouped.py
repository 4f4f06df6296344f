"""Blocked scales along K on the tensor cores (cuda/matmul_mma_grouped.cu: matmul_mma.cu built with
GRP, variant ``mma-grouped``): matmul_integer_to_float with ``block_size=G`` above the decode sizes,
every b the tensor-core tile reads (8-bit row-major, 8-bit K-major, packed 4-bit row-major, packed
4-bit K-major: MatMulNBits' own bytes), each group's exact int32 sums closed into float32 sums in
ascending order (docs/semantics.md), the zero points' terms from the pre-passes' per-group row and
column sums (matmul_row_sums split by groups, matmul_col_sums with one split a group). Run by the
host harness through the public functions on arrays of the cupy stand-in, into poisoned outputs,
byte for byte against the same call on NumPy arrays (dmlq.reference); each call asserts the kernel
that ran and the plan. Groups of 32 (closed after every k32 step), 64, 96 (closed inside a 64-deep
tile), 128, 160 and 256, K ragged against the group and the tile, M and N cut inside the last
64 x 128 tile, float32 and float16 out, biases, batches with per-batch blocked b parameters, the
int32 extremes per group, NaN / inf / zero scales."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq.gpu import matmul
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream4_kmajor import I4, U4
from test_gpu_stream8_kmajor import same as same8

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))

pytestmark = pytest.mark.skipif(not matmul.HAVE_MMA_GROUPED, reason="matmul_mma_grouped.cu absent")

WIDE = {I4: I8, U4: U8}  # a 4-bit b's zero-point table type in the kernel


def tag(layout, tb):
    return {"rows8": tb.name, "kmajor8": f"kmajor_{tb.name}", "packed4": f"packed_{tb.name}",
            "kmajor4": f"kmajor_{tb.name}"}[layout]


def kernel(ta, layout, tb, to):
    return f"matmul_mma<{ta.name}, {tag(layout, tb)}, {to}, 64, 128, 64, 4, 16, true>"


def b_pair(rng, layout, tb, shape):
    """(host b, device b) of ``shape`` (..., K, N) in ``layout``: an 8-bit array or its K-major view
    (the transpose of an (N, K) weight), a packed 4-bit b (dmlq.Packed) or MatMulNBits' bytes
    (dmlq.Packed(w).mT); the host side is the ml_dtypes array for a 4-bit b."""
    *batch, k, n = shape
    if layout in ("rows8", "packed4"):
        b = q(rng, tb, shape)
        return b, dev(dmlq.pack(b)) if layout == "packed4" else dev(b)
    w = q(rng, tb, (*batch, n, k))
    return w.swapaxes(-1, -2), (dev(dmlq.pack(w)).mT if layout == "kmajor4" else dev(w).swapaxes(-1, -2))


def zp_pair(rng, layout, tb, shape):
    """A blocked (..., groups, N) or per-column b zero point: the array, or for a 4-bit b a Packed
    (row-major b) or MatMulNBits' (N, groups) bytes' .mT (K-major b)."""
    z = q(rng, tb, shape)
    if layout == "packed4":
        return z, dev(dmlq.pack(z))
    if layout == "kmajor4":
        z = z.reshape((1,) * (z.ndim < 2) + z.shape)  # per column as MatMulNBits' (N, 1) table
        return z, dev(dmlq.pack(np.ascontiguousarray(z.swapaxes(-1, -2)))).mT
    return z


def plan_ok(text):
    """The plan is mma-grouped's; a K-major b is read as it is (a row-major b whose rows are not
    16 bytes apart is copied into padded rows first, as for mma-128x128's 16-byte copies)."""
    return "mma-grouped" in text and ("K-major" not in text or "b copied" not in text)


def call(rng, layout, ta, tb, m, k, n, g, form, to=F32, batch=(), b_batch=None):
    """matmul_integer_to_float(block_size=g) through test_gpu_stream8_kmajor.same (stand-in against
    NumPy, byte for byte); ``form`` picks the parameters: 0 per-row a, blocked b, an (M, N) bias;
    1 per-tensor a, per-column b, a per-column bias; 2 no zero points, blocked scales; 3 per-row
    a's zero point alone beside blocked b scales."""
    groups = -(-k // g)
    b_batch = batch if b_batch is None else b_batch
    a, b = q(rng, ta, batch + (m, k)), b_pair(rng, layout, tb, b_batch + (k, n))
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    b_s = rng.uniform(-1, 1, b_batch + (groups, n)).astype(F32)
    if form == 0:
        rest = (a_s, q(rng, ta, (m, 1)), b_s, zp_pair(rng, layout, tb, b_batch + (groups, n)),
                rng.uniform(-50, 50, (m, n)).astype(F32))
    elif form == 1:
        rest = (np.float32(0.01), ta.type(q(rng, ta, ())), rng.uniform(-1, 1, n).astype(F16),
                zp_pair(rng, layout, tb, (n,)), rng.uniform(-1, 1, n).astype(F32))
    elif form == 2:
        rest = (a_s, None, b_s, None)
    else:
        rest = (a_s, q(rng, ta, (m, 1)), b_s, None)
    same8(dmlq.matmul_integer_to_float, a, b, rest, kernel(ta, layout, tb, "float" if to == F32 else "float16"),
          plan_ok=plan_ok, dtype=to, block_size=g)
    return a, b


LAYOUTS = {"rows8": (I8, U8), "kmajor8": (I8, U8), "packed4": (I4, U4), "kmajor4": (I4, U4)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layouts_and_parameter_forms(gpu, layout):
    """Each b layout with both a types, four parameter forms, float32 and float16 out; M = 70 and
    N = 200 cut the second 64-row and 128-column tiles, K = 320 is five groups of 64. With zero
    points on both sides the per-group row sums of a and column sums of b are launched."""
    rng = np.random.default_rng(len(layout))
    b_i, b_u = LAYOUTS[layout]
    for i, (ta, tb) in enumerate(((U8, b_i), (I8, b_u))):
        for form in range(4):
            call(rng, layout, ta, tb, 70, 320, 200, 64, form, to=(F32, F16)[(i + form) % 2])
            if form == 0:
                col_sums = {"kmajor8": f"matmul_row_sums<{tb.name}>", "kmajor4": f"matmul_row_sums<{tag(layout, tb)}>"
                            }.get(layout, f"matmul_col_sums<{tag(layout, tb)}>")
                assert launched(f"matmul_row_sums<{ta.name}>") and launched(col_sums), kernels()


# (m, k, n, g): groups of 32 (a close after every k32 step), 96 and 160 (groups that end inside a
# 64-deep tile), 128, 256; K ragged against the group, the tile and 32 (K = 200: the last step
# holds 8 k); M = 17 (one short row tile), N = 80 (one short column tile).
GROUPS = [(40, 200, 600, 32), (64, 1000, 80, 96), (17, 520, 480, 160), (100, 384, 130, 128), (33, 4096, 40, 256)]


@pytest.mark.parametrize("m,k,n,g", GROUPS)
def test_group_lengths(gpu, m, k, n, g):
    rng = np.random.default_rng(m * 1000 + k + n + g)
    layouts = ("rows8", "packed4") if k % 32 else ("kmajor4", "rows8")  # (K-major 4-bit on 16 bytes: K % 32 == 0)
    for i, layout in enumerate(layouts):
        ta, tb = ((U8, LAYOUTS[layout][0]), (I8, LAYOUTS[layout][1]))[i]
        call(rng, layout, ta, tb, m, k, n, g, (0, 3)[i], to=(F32, F16)[i])


def test_batches(gpu):
    """A batch of a beside one b, then a batch of b with per-batch blocked scales and zero points
    (bp_bs apart) beside a broadcast a: grid z is the matrices, each reading its own groups' sums."""
    rng = np.random.default_rng(3)
    call(rng, "kmajor4", U8, U4, 40, 256, 136, 64, 0, batch=(2, 3), b_batch=())
    call(rng, "rows8", I8, I8, 48, 256, 130, 32, 0, batch=(3,))
    call(rng, "packed4", U8, I4, 32, 320, 256, 128, 3, batch=(2,))


@pytest.mark.parametrize("layout", ["rows8", "kmajor4"])
def test_extreme_group_sums(gpu, layout):
    """|a - a_zp| = 255 times the widest |b - b_zp| at every k of a group of 256, both signs, with
    unit scales: each group's exact sum (up to 255 * 255 * 256 for an 8-bit b) and the float sums
    of 16 such groups."""
    m, k, n, g = 64, 4096, 128, 256
    tb = I8 if layout == "rows8" else U4
    lo_b, hi_b = (-128, 127) if tb == I8 else (0, 15)
    ones = np.ones((k // g, n), F32)
    for bv, zb in ((hi_b, lo_b), (lo_b, hi_b)):
        a = np.full((m, k), 255, U8)
        w = np.full((n, k), bv, tb)
        zp = np.full((k // g, n), zb, tb)
        b = (w.T, dev(w).T) if tb == I8 else (w.T, dev(dmlq.pack(w)).mT)
        zpp = zp if tb == I8 else (zp, dev(dmlq.pack(np.ascontiguousarray(zp.T))).mT)
        same8(dmlq.matmul_integer_to_float, a, b, (np.float32(1), U8.type(0), ones, zpp),
              kernel(U8, "kmajor8" if tb == I8 else "kmajor4", tb, "float"), plan_ok=plan_ok, block_size=g)


def test_nan_inf_zero_scales_and_float16_overflow(gpu):
    """NaN, +-inf and zero in b's blocked scales and a's row scales (a NaN term poisons its output
    from its group on, an infinite one against a zero sum is NaN), and scales large enough that
    the float16 output overflows to inf."""
    rng = np.random.default_rng(11)
    m, k, n, g = 96, 256, 192, 64
    a, b = q(rng, U8, (m, k)), b_pair(rng, "kmajor4", U4, (k, n))
    b_s = rng.uniform(-1, 1, (k // g, n)).astype(F32)
    b_s[1, ::7], b_s[2, 3::11], b_s[0, 5::13], b_s[3, 1::5] = np.nan, np.inf, -np.inf, 0.0
    a_s = rng.uniform(1e-3, 1, (m, 1)).astype(F32)
    a_s[::9], a_s[4::17] = 0.0, np.inf
    zp = zp_pair(rng, "kmajor4", U4, (k // g, n))
    same8(dmlq.matmul_integer_to_float, a, b, (a_s, q(rng, U8, (m, 1)), b_s, zp), kernel(U8, "kmajor4", U4, "float"),
          plan_ok=plan_ok, block_size=g)
    big = np.full((k // g, n), 30.0, F32)
    same8(dmlq.matmul_integer_to_float, a, b, (np.float32(40.0), None, big, zp), kernel(U8, "kmajor4", U4, "float16"),
          plan_ok=plan_ok, block_size=g, dtype=F16)


def test_plan_and_selection(gpu):
    """The plan names mma-grouped and its per-group sums (grid y the groups); selection keeps the
    wide dp4a kernel below the tensor cores' work threshold, past K = 32768 and for K = 0, and
    mma-128x128 refuses blocked scales by name."""
    rng = np.random.default_rng(4)
    a, b = dev(q(rng, U8, (70, 320))), dev(q(rng, I8, (320, 200)))
    b_s, zb = dev(rng.uniform(-1, 1, (5, 200)).astype(F32)), dev(q(rng, I8, (5, 200)))
    plan = dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, np.float32(1), U8.type(3), b, b_s, zb, block_size=64)
    assert plan.variant == "mma-grouped", plan
    rows, cols, main = plan.launches
    assert rows.kernel == "matmul_row_sums<uint8>" and rows.grid[1] == 5, plan
    assert cols.kernel == "matmul_col_sums<int8>" and cols.grid[2] == 5, plan
    assert main.kernel == kernel(U8, "rows8", I8, "float") and main.grid == (2, 2, 1), plan
    small = dmlq.kernel_plan(dmlq.matmul_integer_to_float, a[:20, :64], np.float32(1), None, b[:64, :100],
                             b_s[:2, :100], None, block_size=32)
    assert small.variant == "dp4a-wide", small
    assert matmul.select_variant(512, 512, 40000, 1, 90, blocked=True) == "dp4a-wide"
    assert matmul.select_variant(512, 512, 4096, 1, 90, blocked=True) == "mma-grouped"
    assert matmul.select_variant(512, 512, 4096, 1, 75, blocked=True) == "dp4a-wide"
    with pytest.raises(ValueError, match="'dp4a-wide' or 'mma-grouped'"):
        matmul.plan_tiled("matmul_integer_to_float", a, True, b, True, dev(np.empty((70, 200), F32)),
                          variant="mma-128x128", k_group=64)
    with pytest.raises(ValueError, match="does not apply.*float outputs only"):
        matmul.plan_tiled("matmul_integer", a, True, b, True, dev(np.empty((70, 200), np.int32)),
                          variant="mma-grouped")


def test_dmlq_check_rows_run_mma_grouped(gpu):
    """``python -m dmlq check``'s tensor-core blocked rows (dmlq.check_cases._random_grouped: int8, K-major
    uint8 and packed 4-bit b, groups of 32 and 96) and the K-major packed b's blocked rows at M = 130
    run mma-grouped, bit for bit."""
    import cupy_stand_in as S
    from dmlq import check

    rows = [c for c in check.gpu_cases() if "(tensor cores)" in c[1] or ("M=130" in c[1] and "blocked" in c[1])]
    assert len(rows) == 8 + 4, [c[1] for c in rows]
    for case in rows:
        S.launches.clear()
        for what, got, want in check.run_case(case, S.module):
            assert got.tobytes() == want.tobytes(), (case[1], what)
        assert any(n.startswith("matmul_mma<") and n.endswith(", true>") for n, *_ in S.launches), (case[1], kernels())
