"""A packed 4-bit b held K-major in rows longer than K: ``dmlq.Packed(B, (N, L), dt).mT[..., :K, :]``,
the first K of each stored row of L elements. MatMulNBits stores its B so where K is not a multiple
of its block size (each row padded to whole blocks) and its zero points so where the number of
groups is odd (each row padded to a byte); before, dmlq took only rows of exactly K elements. The
kernels read b's columns ``ldb = L`` elements apart, so every kernel that reads a K-major packed b
takes it as it is: the weight-streaming kernels (M <= 16), the dp4a tiles (dp4a-wide: MatMulNBits'
blocked scales past M = 16), the tensor-core tile (now also with K off 32 where L is on it), and
the kernels that read b's rows get it repacked from the first K of each row. Run by the host
harness through the public functions on arrays of the cupy stand-in, into poisoned outputs, byte
for byte against the same call on NumPy arrays with b as the ml_dtypes array of the kept values;
the elements past K hold random codes (not MatMulNBits' zeros), so a kernel that read them would
differ. Each call asserts the kernel that ran and the plan."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq.gpu import matmul
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched
from test_gpu_stream4_kmajor import I4, PAIRS, U4, km, mt, repacked, streamed
from test_gpu_stream8_kmajor import float_forms, quantized_forms
from test_gpu_stream8_kmajor import same as same8

I8, U8, F32 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32))


def same(fn, a, b, rest, kernel, *, plan_ok=streamed, **kwargs):
    """test_gpu_stream8_kmajor.same (the stand-in against NumPy, byte for byte, into a poisoned out)
    with the plan read as ``plan_ok`` (default: b read K-major as it is) and, where b is read as it
    is, saying how far apart its columns lie; a repacked b's ``kernel`` is a prefix of the kernel's
    name."""
    t = b[1]
    note = f"its columns {t.packed.shape[-1]} elements apart (the first {t.k} read)"
    as_is = plan_ok is not repacked and t.sliced
    same8(fn, a, b, rest, kernel, prefix=plan_ok is repacked,
          plan_ok=lambda text: plan_ok(text) and (not as_is or note in text), **kwargs)


def padded(rng, dt, shape, row):
    """b of ``shape`` (..., K, N) held K-major in rows of ``row`` >= K elements: (the ml_dtypes view
    of the kept values, and ``dmlq.pack(w).mT[..., :K, :]`` of the random (..., N, row) ``w`` on the
    device)."""
    *batch, k, n = shape
    w = q(rng, dt, (*batch, n, row))
    t = dev(dmlq.pack(w)).mT[..., :k, :]
    assert t.shape == tuple(shape) and t.sliced == (row != k)
    return w[..., :k].swapaxes(-1, -2), t


def padded_t(v, row):
    """A (..., G, N) zero point as MatMulNBits holds it for an odd G: the device Packed of its
    (..., N, row) transpose padded past G (random codes there), ``.mT[..., :G, :]``."""
    g, n = v.shape[-2:]
    w = np.zeros(v.shape[:-2] + (n, row), v.dtype)
    w[..., :g] = v.swapaxes(-1, -2)
    w[..., g:] = q(np.random.default_rng(g), v.dtype, v.shape[:-2] + (n, row - g))
    return v, dev(dmlq.pack(w)).mT[..., :g, :]


def zp_row(rng, dt, n):
    """A (1, N) zero point: (the array, the device Packed of it)."""
    v = q(rng, dt, (1, n))
    return v, dev(dmlq.pack(v))


# (M, K, N, row): rows on 32 elements with K off them (a chunk cut short), K on 32 with longer rows,
# rows off 32 (the byte path), K = 1
STREAM = [(1, 100, 64, 128), (4, 64, 40, 96), (3, 37, 33, 41), (16, 129, 9, 160), (2, 1, 5, 2)]


@pytest.mark.parametrize("m,k,n,row", STREAM)
def test_stream_kernels(gpu, m, k, n, row):
    """quantized_matmul's stream kernel (every type pair, both outputs), matmul_integer and
    matmul_integer_to_float on the sums pass, b's columns ``row`` elements apart."""
    rng = np.random.default_rng(m * 1000 + k * 7 + n + row)
    for i, (ta, tb) in enumerate(PAIRS):
        to = (I8, U8)[i % 2]
        a, b = q(rng, ta, (m, k)), padded(rng, tb, (k, n), row)
        zb = q(rng, tb, (n,))
        quantized_forms(same, rng, m, ta, tb, to, a, b, (zb, dev(dmlq.pack(zb))), int(q(rng, tb, ())))
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), padded(rng, tb, (k, n), row)
        name = f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>"
        same(dmlq.matmul_integer, a, b, (q(rng, ta, (m, 1)), 3), name)
        float_forms(same, rng, ta, a, b, zp_row(rng, tb, n),
                    lambda _: name)


def nbits_calls(m, k, n, block, kernel, zp_row=None):
    """MatMulNBits' call with K off its block size: b in rows of whole blocks, scales the transposed
    view of an (N, groups) table, zero points a Packed (N, groups)'s .mT, its rows padded to a
    byte where the groups are odd (``zp_row``: to that many instead), a per-column bias."""
    rng = np.random.default_rng(m * 31 + k + n + block)
    groups = -(-k // block)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), padded(rng, tb, (k, n), groups * block)
        s = rng.uniform(-1, 1, (n, groups)).astype(F32)
        zp = padded_t(q(rng, tb, (groups, n)), zp_row or groups + groups % 2)
        same(dmlq.matmul_integer_to_float, a, b, (rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                                  (s.T, dev(s).T), zp, rng.uniform(-9, 9, n).astype(F32)),
             kernel(ta, tb), block_size=block)


@pytest.mark.parametrize("m,k,n,block", [(1, 100, 64, 32), (2, 80, 40, 32), (4, 300, 9, 64), (3, 4000, 24, 128)])
def test_matmul_nbits_decode(gpu, m, k, n, block):
    """Blocked scales at M <= 16 (the grouped stream kernel, where its workspace fits): K = 100 / 300 /
    4000 in rows of 128 / 320 / 4096 (4, 5 and 32 groups), K = 80 in rows of 96 (3 groups: zero
    points padded to 4)."""
    nbits_calls(m, k, n, block, lambda ta, tb: f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>")


@pytest.mark.parametrize("m,k,n,block", [(20, 100, 40, 32), (40, 80, 33, 32), (17, 301, 24, 64)])
def test_matmul_nbits_prefill(gpu, m, k, n, block):
    """Blocked scales past M = 16 (dp4a-wide): odd group counts, a ragged last group, odd K."""
    nbits_calls(m, k, n, block, lambda ta, tb: f"matmul_dp4a_wide<{ta.name}, {km(tb)}, float, 64, 64, 32, 8, 4>")


def test_zero_points_in_longer_rows(gpu):
    """A zero point table's rows may be longer than a byte's padding: 3 groups in rows of 8."""
    nbits_calls(4, 96, 16, 32, lambda ta, tb: f"matmul_stream_grouped<{ta.name}, {km(tb)}, 4>", zp_row=8)


@pytest.mark.parametrize("m,k,n,row,tile", [(20, 64, 40, 96, "32, 32, 32, 4, 4"), (33, 75, 37, 77, "32, 32, 32, 4, 4"),
                                            (128, 90, 128, 128, "64, 64, 32, 8, 4")])
def test_dp4a_tiles(gpu, m, k, n, row, tile):
    """The dp4a tiles: every operator, a's zero point (b's column sums from its stored rows' first
    K), rows on and off 4 elements."""
    rng = np.random.default_rng(m + k + n + row)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), padded(rng, tb, (k, n), row)
        same(dmlq.matmul_integer, a, b, (q(rng, ta, (m, 1)), int(q(rng, tb, ()))),
             f"matmul_dp4a<{ta.name}, {km(tb)}, int, {tile}>")
        assert launched(f"matmul_row_sums<{km(tb)}>"), kernels()
        if i < 2:
            float_forms(same, rng, ta, a, b, zp_row(rng, tb, n),
                        lambda to, ta=ta, tb=tb: f"matmul_dp4a<{ta.name}, {km(tb)}, {to}, {tile}>")


def test_dp4a_batches_starting_mid_byte(gpu):
    """A batch of 3 matrices of 5 stored rows of 41 elements (K = 39): every other matrix starts
    mid-byte, which the dp4a tile's element offsets (205 a matrix) take as they are."""
    rng = np.random.default_rng(3)
    a, b = q(rng, U8, (3, 20, 39)), padded(rng, I4, (3, 39, 5), 41)
    same(dmlq.matmul_integer, a, b, (U8.type(7), -2), "matmul_dp4a<uint8, kmajor_int4, int, 32, 32, 32, 4, 4>")


def mma(ta, tb, to):
    return f"matmul_mma<{ta.name}, {km(tb)}, {to}, 128, 128, 64, 4, 16>"


@pytest.mark.skipif(not matmul.HAVE_MMA_KMAJOR4, reason="matmul_mma_kmajor4.cu absent")
@pytest.mark.parametrize("m,k,n,row", [(130, 100, 336, 128), (129, 224, 168, 256), (40, 1000, 130, 1024)])
def test_tensor_cores(gpu, m, k, n, row):
    """The tensor-core tile reads b as it is where its rows lie on 32 elements, K on or off them
    (K = 100: the last k tile's chunks cut inside a column, the codes past K in the bytes it
    copies; K = 1000: split K): every operator."""
    rng = np.random.default_rng(m + k + n + row)
    for i, (ta, tb) in enumerate(PAIRS):
        a, b = q(rng, ta, (m, k)), padded(rng, tb, (k, n), row)
        same(dmlq.matmul_integer, a, b, (q(rng, ta, (m, 1)), int(q(rng, tb, ()))), mma(ta, tb, "int"))
        if i < 2:
            float_forms(same, rng, ta, a, b, zp_row(rng, tb, n),
                        lambda to, ta=ta, tb=tb: mma(ta, tb, to))
            zb = q(rng, tb, (n,))
            quantized_forms(same, rng, m, ta, tb, (I8, U8)[i], a, b, (zb, dev(dmlq.pack(zb))), int(q(rng, tb, ())),
                            lambda to, ta=ta, tb=tb: mma(ta, tb, to.name))


def test_rows_off_32_and_groups_off_32_are_repacked(gpu):
    """Where a kernel reads b's rows (the tensor-core tile with rows off 32 elements; stream-rows:
    groups off 32 past M = 16), b is repacked from the first K of each stored row."""
    rng = np.random.default_rng(8)
    a, b = q(rng, I8, (130, 100)), padded(rng, U4, (100, 336), 110)
    kernel = "matmul_mma<int8, packed_uint4, int, 128, 128, 64, 4," if matmul.HAVE_MMA_PACKED else "matmul_dp4a<"
    same(dmlq.matmul_integer, a, b, (I8.type(-3), 5), kernel, plan_ok=repacked)
    a, b = q(rng, I8, (20, 100)), padded(rng, U4, (100, 9), 120)
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.5), None, rng.uniform(-1, 1, (3, 9)).astype(F32),
                                              padded_t(q(rng, U4, (3, 9)), 4)),
         "matmul_stream<int8, packed_uint4, float,", plan_ok=repacked, block_size=40)


def test_numpy_values_and_byte_counts():
    """On NumPy the view is the transposed values' first K rows; the bytes must be those of the
    whole stored tensor (the error names both shapes)."""
    rng = np.random.default_rng(1)
    w = q(rng, U4, (6, 16))
    t = dmlq.pack(w).mT[:10]
    assert np.array_equal(dmlq.unpack(t), w[:, :10].T) and t.nbytes == 48 and t.size == 60
    a = q(rng, I8, (2, 10))
    want = a.astype(np.int64) @ (w[:, :10].T.astype(np.int64) - 4)
    assert np.array_equal(dmlq.matmul_integer(a, t, 0, 4), want)
    short = dmlq.Packed(t.data[:40], (6, 16), "uint4").mT[:10]
    with pytest.raises(ValueError, match=r"uint4 \(6, 16\) \(\.mT: \(10, 6\)\) takes 48 bytes"):
        dmlq.matmul_integer(a, short, 0, 4)


def test_matrices_starting_mid_byte_in_a_second_launch(gpu):
    """Batch dims that need two launches (b broadcast over the middle one) with 5 stored rows of 39
    elements a matrix (K = 37): the second launch's first matrix starts mid-byte, so b's matrices are
    copied to whole bytes, each matrix's stored rows whole (the plan says so)."""
    rng = np.random.default_rng(26)
    a, b = q(rng, U8, (2, 3, 5, 17, 37)), padded(rng, I4, (2, 1, 5, 37, 5), 39)

    def whole(text):
        return "K-major (MatMulNBits' layout)" in text and "b repacked with each matrix starting on a byte" in text

    same(dmlq.matmul_integer, a, b, (U8.type(3), -1), "matmul_dp4a<uint8, kmajor_int4, int, 32, 32, 32, 4, 4>",
         plan_ok=whole)


def test_the_index_forms():
    """``[..., :k, :]`` in the spellings NumPy reads the same (a stop past the rows clips, a negative
    one counts from the end, a second slice narrows further); anything else (``[..., :k]`` slices N,
    as in NumPy) is an IndexError naming the one form; ``.mT`` / ``.T`` of a narrowed view (no Packed holds it) and a ``k`` past the rows
    are errors; repr and the refusal of lazy bytes show the slice."""
    import dask.array as da

    w = np.arange(2 * 5 * 8).reshape(2, 5, 8).astype(U4)
    t = dmlq.pack(w).mT
    for key in (np.s_[..., :6, :], np.s_[:, :6], np.s_[:, :6, :], np.s_[:, 0:6:1, ...], np.s_[..., :-2, :],
                np.s_[..., :np.int64(6), :]):
        v = t[key]
        assert v.shape == (2, 6, 5) and v.k == 6 and np.array_equal(dmlq.unpack(v), w[..., :6].swapaxes(-1, -2)), key
    assert t[..., :99, :].k == 8 and not t[..., :99, :].sliced and t[..., :6, :][..., :3, :].k == 3
    assert t[..., :0, :].shape == (2, 0, 5)
    for key in (0, np.s_[..., :6], np.s_[..., 1:6, :], np.s_[..., :6:2, :], np.s_[..., :6, :3], np.s_[..., ::-1, :], np.s_[..., 2, :],
                np.s_[:, :, :, :], np.s_[..., np.int64(3), :], np.s_[..., ..., :2]):
        with pytest.raises(IndexError):
            t[key]
    v = t[..., :6, :]
    with pytest.raises(ValueError, match=r"keeps 6 of each stored row's 8 elements, which no Packed holds"):
        v.mT
    m2 = dmlq.pack(w[0]).T[:3]
    with pytest.raises(ValueError, match="no Packed holds"):
        m2.T
    assert t.mT is t.packed and repr(v).endswith(".mT[..., :6, :]") and repr(t).endswith(".mT")
    with pytest.raises(ValueError, match=r"k = 9 must be an int in \[0, 8\]"):
        dmlq.TransposedPacked(t.packed, 9)
    lazy = dmlq.TransposedPacked(dmlq.Packed(da.from_array(t.data), t.packed.shape, "uint4"), 6)
    with pytest.raises(TypeError, match=r"pass dmlq.Packed\(b.data.compute\(\), b.packed.shape, b.dtype\).mT\[\.\.\., :6, :\]"):
        dmlq.matmul_integer(q(np.random.default_rng(0), I8, (2, 3, 6)), lazy)


def test_dask_and_torch_operands_beside_it():
    """A dask a (chunked) and a torch CPU a take the narrowed view of NumPy bytes as they take any packed
    b: the values of its kept elements."""
    import dask.array as da
    import torch

    rng = np.random.default_rng(2)
    w = q(rng, I4, (6, 16))
    t = dmlq.pack(w).mT[:10]
    a = q(rng, I8, (8, 10))
    want = a.astype(np.int64) @ (w[:, :10].T.astype(np.int64) + 2)
    got = dmlq.matmul_integer(da.from_array(a, chunks=(4, 10)), t, 0, -2)
    assert isinstance(got, da.Array) and np.array_equal(got.compute(), want)
    assert np.array_equal(dmlq.matmul_integer(torch.from_numpy(a), t, 0, -2).numpy(), want)
