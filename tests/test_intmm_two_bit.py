"""2-bit b (int2 / uint2: onnxruntime's com.microsoft.MatMulNBits with bits=2) in matmul_integer,
matmul_integer_to_float and quantized_matmul: an ml_dtypes array, a dmlq.Packed (four codes a byte,
ONNX's order) or its .mT (MatMulNBits' own bytes), with zero points of its type. It runs as the
4-bit b of the same values (dmlq.packed_b; on the GPU cuda/packed_table.cu's widen_codes2 first).

Oracles: the same call with b's values as int8 / uint8 (the established path: no 2-bit code in it),
NumPy's int64 matmul for the exact sums (every form on NumPy: tests/test_intmm_packed.py::
test_packed_b_equals_the_wide_values), and onnxruntime's CPU MatMulNBits (bits=2) on its own
bytes, built here from its operator documentation, where its float arithmetic is exact. The GPU
path runs on the cupy stand-in (the kernels' sources on the host harness), outputs poisoned."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cupy_stand_in as S
import dmlq
from dmlq.gpu import packed, plan
from test_api_gpu_path import gpu  # noqa: F401  (the cupy stand-in fixture)

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I2, U2, I4, U4 = (np.dtype(t) for t in (ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.int4, ml_dtypes.uint4))
WIDE = {I2: I8, U2: U8}
NAME = {I2: "int2", U2: "uint2"}


def qrand(rng, dtype, shape):
    info = ml_dtypes.iinfo(dtype) if dtype in (I2, U2, I4, U4) else np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def bits(x):
    return np.asarray(x).view(np.uint8)


def codes2(values):
    """The packed bytes of 2-bit values, written from ONNX's rule (element i in bits 2 (i % 4) and up
    of byte i // 4; the last byte's unused bits 0): the oracle of dmlq.pack here."""
    c = np.asarray(values).reshape(-1).view(np.uint8) & 3
    c = np.concatenate([c, np.zeros(-c.size % 4, np.uint8)]).reshape(-1, 4)
    return (c[:, 0] | c[:, 1] << 2 | c[:, 2] << 4 | c[:, 3] << 6).astype(np.uint8)


def test_two_bit_refusals():
    """A zero point of another type than b's, out of b's range, a Packed of the wrong byte count: named."""
    rng = np.random.default_rng(3)
    a, b = qrand(rng, I8, (2, 8)), qrand(rng, I2, (8, 3))
    p = dmlq.pack(b)
    with pytest.raises(ValueError, match=r"b_zero_point = 2 is out of range for int2 \[-2, 1\]"):
        dmlq.matmul_integer(a, p, None, 2)
    with pytest.raises(ValueError, match=r"b_zero_point = -1 is out of range for uint2 \[0, 3\]"):
        dmlq.matmul_integer(a, qrand(rng, U2, (8, 3)), None, -1)
    with pytest.raises(TypeError, match=r"b_zero_point must be a Python int, an array of dtype int2 or a "
                                        r"dmlq.Packed of int2 \(b's dtype\) \(got int4\)"):
        dmlq.matmul_integer(a, b, None, np.zeros(3, I4))
    with pytest.raises(TypeError, match=r"\(got a dmlq.Packed of uint2\)"):
        dmlq.quantized_matmul(a, 0.1, None, p, 0.1, dmlq.pack(np.zeros(3, U2)), 0.1)
    with pytest.raises(TypeError, match=r"\(got uint8\)"):
        dmlq.matmul_integer_to_float(a, 0.1, None, p, 0.1, np.zeros(3, U8))
    # a 2-bit zero point beside a 4-bit b is refused too, on NumPy and GPU bytes (its values would fit)
    p4 = dmlq.pack(b.astype(I4))
    with pytest.raises(TypeError, match=r"b_zero_point is a dmlq.Packed of int2; it must have b's dtype "
                                        r"\(a packed int4\)"):
        dmlq.matmul_integer(a, p4, None, dmlq.pack(np.zeros(3, I2)))
    with pytest.raises(ValueError, match=r"b is a dmlq.Packed that does not hold its elements: int2 \(8, 3\) "
                                         r"takes 6 bytes as a 1-D uint8 array \(got uint8 \(7,\)\)"):
        dmlq.matmul_integer(a, dmlq.Packed(np.zeros(7, np.uint8), (8, 3), "int2"))
    with pytest.raises(TypeError, match=r"a packed b must be int4, uint4, int2 or uint2 \(got a dmlq.Packed of "
                                        r"float4_e2m1fn\)"):
        dmlq.matmul_integer(a, dmlq.Packed(np.zeros(12, np.uint8), (8, 3), "float4_e2m1fn"))


def test_a_two_bit_zero_point_beside_a_four_bit_b_on_the_gpu_path(gpu):
    """GPU bytes: the zero point's table would read 2-bit codes and fit int4's range; refused by name."""
    rng = np.random.default_rng(4)
    a = S.module.asarray(qrand(rng, I8, (2, 8)))
    p4 = packed_on_device(dmlq.pack(qrand(rng, I4, (8, 3))))
    z2 = packed_on_device(dmlq.pack(np.zeros(3, I2)))
    with pytest.raises(TypeError, match=r"b_zero_point is a dmlq.Packed of int2; it must have b's dtype"):
        dmlq.matmul_integer(a, p4, None, z2)


def test_kernel_plan_lists_the_widening_first():
    """dmlq.kernel_plan of a 2-bit b: widen_codes2 over its bytes, then the 4-bit b's kernels."""
    a = np.zeros((1, 4096), np.int8)
    p = dmlq.pack(np.zeros((4096, 512), U2))
    lines = str(dmlq.kernel_plan(dmlq.matmul_integer, a, p)).splitlines()
    assert lines[1] == "  widen_codes2  grid 128  block 256  (b's 2-bit codes as 4-bit)", lines  # 32,768 chunks
    assert "packed_uint4" in lines[2], lines
    # a 4-bit b has no such launch
    assert "widen_codes2" not in str(dmlq.kernel_plan(dmlq.matmul_integer, a, dmlq.pack(np.zeros((4096, 512), U4))))


@pytest.mark.parametrize("bdt", [I2, U2], ids=["int2", "uint2"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 9, 6)])
def test_astype_holds_the_same_values(bdt, shape):
    """Packed.astype("int4" / "uint4") of a 2-bit Packed: the values kept, the 4-bit type's bytes
    (ONNX's rule, written here); a TransposedPacked keeps its view (MatMulNBits' [..., :k, :])."""
    rng = np.random.default_rng(sum(shape))
    w = qrand(rng, bdt, shape)
    wide = I4 if bdt == I2 else U4
    got = dmlq.pack(w).astype(wide.name)
    nib = w.astype(wide).reshape(-1).view(np.uint8) & 15
    nib = np.concatenate([nib, np.zeros(nib.size % 2, np.uint8)])
    assert got.dtype == wide.name and got.shape == shape
    assert np.array_equal(got.data, (nib[0::2] | nib[1::2] << 4).astype(np.uint8))
    if len(shape) >= 2 and shape[-1] > 1:
        t = dmlq.pack(w).mT[..., :shape[-1] - 1, :].astype(wide)  # (the dtype object too)
        assert isinstance(t, dmlq.TransposedPacked) and t.dtype == wide.name
        assert np.array_equal(dmlq.unpack(t), np.swapaxes(w, -1, -2)[..., :shape[-1] - 1, :].astype(wide))


def test_astype_refusals_and_the_same_type():
    p2, p4 = dmlq.pack(np.zeros(5, I2)), dmlq.pack(np.zeros(5, U4))
    assert p2.astype("int2") is p2 and p4.astype(U4) is p4
    with pytest.raises(TypeError, match=r"Packed.astype: a packed int2 tensor converts to int4 only \(every value "
                                        r"kept\); got dtype uint4: dmlq.unpack\(p\) gives its values"):
        p2.astype("uint4")
    with pytest.raises(TypeError, match=r"a packed uint4 tensor has no other packed type that holds every value"):
        p4.astype("uint2")
    with pytest.raises(ValueError, match=r"Packed.astype: 5 int2 elements \(shape \(5,\)\) take 2 bytes packed; "
                                         r"the data holds 1"):
        dmlq.Packed(p2.data[:1], (5,), "int2").astype("int4")
    with pytest.raises(TypeError, match=r"Packed.astype: dtype"):
        p2.astype("int3")


# ------------------------------------------------------------------ the GPU path (cupy stand-in)

def widened(p, offset=0):
    """widen_codes2 of Packed ``p`` (NumPy bytes, moved to the device ``offset`` bytes into an
    allocation: 16-byte aligned at 0, else the byte path alone) into a poisoned block; (the bytes on
    the host, the kernels launched)."""
    held_bytes = S.module.asarray(np.concatenate([np.zeros(offset, np.uint8), p.data]))
    data = held_bytes[offset:]
    n_out = (p.size + 1) // 2
    bait = S.module.full(max(n_out, 1), 0xA5, np.uint8)
    at = bait.data.ptr
    del bait
    with plan.recording() as plans:
        got = packed.widen_codes2(data, p.size, p.dtype == "int2")
    assert got.size == 0 or got.data.ptr == at
    return got.get(), [launch for pl in plans for launch in pl.launches]


def widened_on_host(p):
    """The packed 4-bit bytes of ``p``'s values, by ONNX's rule written here."""
    values = dmlq.unpack(p).astype(I4 if p.dtype == "int2" else U4)
    nib = values.reshape(-1).view(np.uint8) & 15
    nib = np.concatenate([nib, np.zeros(nib.size % 2, np.uint8)])
    return (nib[0::2] | nib[1::2] << 4).astype(np.uint8)


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 127, 128, 129, 1000, 1024])
@pytest.mark.parametrize("offset", [0, 1, 4], ids=["aligned", "offset1", "offset4"])
@pytest.mark.parametrize("bdt", [I2, U2], ids=["int2", "uint2"])
def test_widen_codes2(gpu, bdt, offset, count):
    """Every code in every slot of a byte, odd tails (the last 4-bit byte alone, nibbles past the count
    0 even where the 2-bit byte's unused bits are not), chunks of 64 elements and the bytes after the
    last one, bytes on 16 (the 16-byte path) and off it (bytes only): the packed 4-bit bytes of the
    same values."""
    rng = np.random.default_rng(count + 7 * offset)
    data = rng.integers(0, 256, -(-count // 4), dtype=np.uint8)
    data[:256] = np.arange(256)[:data.size]
    p = dmlq.Packed(data, (count,), NAME[bdt])
    got, launches = widened(p, offset)
    assert got.dtype == np.uint8 and np.array_equal(got, widened_on_host(p))
    assert [launch.kernel for launch in launches] == (["widen_codes2"] if count else [])


def test_widen_codes2_grid_stride(gpu, monkeypatch):
    """The grid's cap pinned to 2 blocks (512 threads): 1,000 chunks of 16 bytes and 1,000 single
    bytes each take several passes of their grid-stride loop, the last partial."""
    monkeypatch.setattr(packed, "TABLE_MAX_BLOCKS", 2)
    rng = np.random.default_rng(12)
    for offset, count in ((0, 64 * 1000 + 13), (3, 4000 - 1)):
        p = dmlq.Packed(rng.integers(0, 256, -(-count // 4), dtype=np.uint8), (count,), "int2")
        got, launches = widened(p, offset)
        assert launches[0].grid == (2,) and np.array_equal(got, widened_on_host(p))


def test_widen_launch_sizes_its_grid():
    """A thread a 16-byte chunk (the at most 16 bytes after the last one reuse the first threads), a
    thread a byte when the bytes are off 16; at most TABLE_MAX_BLOCKS blocks."""
    assert packed.widen_launch(64 * 256 * 3).grid == (3,)
    assert packed.widen_launch(64 * 256 * 3, aligned=False).grid == (48,)
    assert packed.widen_launch(64 * 256 * 3 + 1).grid == (3,)
    assert packed.widen_launch(64 * (256 * 3 + 1)).grid == (4,)
    assert packed.widen_launch(63).grid == (1,)
    assert packed.widen_launch(64 * 256 * 2000).grid == (packed.TABLE_MAX_BLOCKS,)


@pytest.mark.parametrize("bdt", [I2, U2], ids=["int2", "uint2"])
def test_two_bit_b_on_the_gpu_path(gpu, bdt):
    """A Packed of device bytes (row-major and its .mT) with a Packed zero point of device bytes (its
    table made from the 2-bit bytes in one launch): widen_codes2, then the 4-bit kernels, at M = 1
    (stream), 20 (dp4a tiles) and 130 (tensor cores), equal to the NumPy path's bytes."""
    rng = np.random.default_rng(7)
    for m, k, n, main in ((1, 96, 40, "matmul_stream_grouped<"), (20, 96, 40, "matmul_dp4a<"),
                          (130, 256, 160, "matmul_mma<")):
        b, zp = qrand(rng, bdt, (k, n)), qrand(rng, bdt, (n,))
        forms = {"rows": (dmlq.pack(b), dmlq.pack(zp)),
                 "mT": (dmlq.pack(np.ascontiguousarray(b.T)).mT, dmlq.pack(zp.reshape(n, 1)).mT)}
        a = qrand(rng, U8, (m, k))
        for name, (pb, pz) in forms.items():
            want_i = dmlq.matmul_integer(a, pb, 7, pz)
            want_q = dmlq.quantized_matmul(a, 0.05, 7, pb, 0.25, pz, 0.5, np.int8(3))
            want_f = dmlq.matmul_integer_to_float(a, 0.05, 7, pb, 0.25, pz, dtype=F16)
            dev = [packed_on_device(v) for v in (pb, pz)]
            S.launches.clear()
            got = dmlq.matmul_integer(S.module.asarray(a), dev[0], 7, dev[1])
            names = [launch[0] for launch in S.launches]
            assert names[0] == "widen_codes2" and names[1] == "unpack_table<{}>".format(WIDE[bdt].name), names
            assert any(nm.startswith(main) and "int4" in nm for nm in names[2:]), names
            np.testing.assert_array_equal(got.get(), want_i, err_msg=f"{name} M={m}")
            got = dmlq.quantized_matmul(S.module.asarray(a), 0.05, 7, dev[0], 0.25, dev[1], 0.5, np.int8(3))
            np.testing.assert_array_equal(bits(got.get()), bits(want_q), err_msg=f"{name} M={m}")
            got = dmlq.matmul_integer_to_float(S.module.asarray(a), 0.05, 7, dev[0], 0.25, dev[1], dtype=F16)
            np.testing.assert_array_equal(bits(got.get()), bits(want_f), err_msg=f"{name} M={m}")


def test_astype_on_the_gpu_path(gpu):
    """A weight held as 4-bit once (Packed.astype on device bytes: one widen_codes2 launch into a
    poisoned block) runs the 4-bit kernels with no widening in the call: the same bytes as the 2-bit
    b, and dmlq.kernel_plan lists no widen_codes2."""
    rng = np.random.default_rng(8)
    a, w = qrand(rng, I8, (1, 200)), qrand(rng, I2, (24, 200))
    pw = dmlq.pack(w).mT
    dev = packed_on_device(pw)
    bait = S.module.full((dev.packed.size + 1) // 2, 0xA5, np.uint8)
    at = bait.data.ptr
    del bait
    S.launches.clear()
    dev4 = dev.astype("int4")
    assert [launch[0] for launch in S.launches] == ["widen_codes2"] and dev4.data.data.ptr == at
    assert np.array_equal(dev4.data.get(), pw.astype("int4").data)
    S.launches.clear()
    got = dmlq.matmul_integer(S.module.asarray(a), dev4, None, -1)
    assert "widen_codes2" not in [launch[0] for launch in S.launches]
    np.testing.assert_array_equal(got.get(), a.astype(np.int64) @ (np.swapaxes(w, 0, 1).astype(np.int64) + 1))
    assert "widen_codes2" not in str(dmlq.kernel_plan(dmlq.matmul_integer, S.module.asarray(a), dev4, None, -1))
    assert "widen_codes2" in str(dmlq.kernel_plan(dmlq.matmul_integer, S.module.asarray(a), dev, None, -1))


def test_bytes_on_another_device(gpu):
    """A 2-bit b's bytes on device 1 while device 0 is current: the call refuses them by name before
    any launch (widen_codes2 would read them from the current device); Packed.astype widens them on
    their own device, as CuPy's own operations on an array do."""
    rng = np.random.default_rng(9)
    w = qrand(rng, U2, (16, 8))
    with S.module.cuda.Device(1):
        dev = dmlq.Packed(S.module.asarray(dmlq.pack(w).data), w.shape, "uint2")
    a = S.module.asarray(qrand(rng, U8, (2, 16)))
    S.launches.clear()
    with pytest.raises(ValueError, match=r"matmul_integer: b's bytes is on device 1 but the current device is 0"):
        dmlq.matmul_integer(a, dev)
    assert not S.launches
    w4 = dev.astype("uint4")
    assert w4.data.device.id == 1 and np.array_equal(w4.data.get(), dmlq.pack(w.astype(U4)).data)


def packed_on_device(v):
    if isinstance(v, dmlq.TransposedPacked):
        return dmlq.Packed(S.module.asarray(v.data), v.packed.shape, v.dtype).mT[..., :v.k, :]
    return dmlq.Packed(S.module.asarray(v.data), v.shape, v.dtype)


# ------------------------------------------------------------------ onnxruntime MatMulNBits, bits=2

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def nbits2_feeds(b_u2, scales, zp_u2, block):
    """MatMulNBits' (bits=2) B, scales and zero_points for (K, N) uint2 values, (G, N) scales and
    zero points (or None), in its layout: B (N, G, block / 4) bytes, column n's k-th value in group
    k // block, four a byte from the low bits; zero points (N, ceil(G / 4)) bytes, each row padded."""
    k, n = b_u2.shape
    g = -(-k // block)
    col = np.zeros((n, g * block), np.uint8)
    col[:, :k] = b_u2.view(np.uint8).T
    feeds = {"B": codes2(col).reshape(n, g, block // 4), "scales": np.ascontiguousarray(scales.T).reshape(-1)}
    if zp_u2 is not None:
        z = np.zeros((n, -(-g // 4) * 4), np.uint8)
        z[:, :g] = zp_u2.view(np.uint8).T
        feeds["zero_points"] = codes2(z)
    return feeds


def matmul_nbits2(a_f, feeds, k, n, block):
    from onnx_cases import run_onnx

    return run_onnx("MatMulNBits", [a_f, feeds["B"], feeds["scales"], feeds.get("zero_points")], F32,
                    domain="com.microsoft", opset=21, K=k, N=n, bits=2, block_size=block)


def nbits2_operands(feeds, k, n, block):
    """MatMulNBits' bytes as dmlq takes them, untouched: b the first K of each row of the Packed
    (N, G * block) uint2 they are, scales the .T of their (N, G) table, zero points the first G of
    each row of a Packed (N, ceil(G / 4) * 4) (None: its default 2)."""
    g = -(-k // block)
    b = dmlq.Packed(feeds["B"].reshape(-1), (n, g * block), "uint2").mT[..., :k, :]
    zp = 2 if "zero_points" not in feeds else \
        dmlq.Packed(feeds["zero_points"], (n, -(-g // 4) * 4), "uint2").mT[..., :g, :]
    return b, feeds["scales"].reshape(n, g).T, zp


def exact_case(rng, m, k, n, block, with_zp):
    g = -(-k // block)
    a, b = qrand(rng, I8, (m, k)), qrand(rng, U2, (k, n))
    scales = (2.0 ** rng.integers(-6, 3, (g, n))).astype(F32) * rng.choice([-1, 1], (g, n)).astype(F32)
    zp = qrand(rng, U2, (g, n)) if with_zp else None
    return a, b, scales, zp


@pytest.mark.parametrize("m,k,n,block", [(1, 64, 8, 16), (4, 256, 33, 64), (3, 100, 9, 32), (2, 80, 16, 16),
                                         (5, 200, 7, 64), (1, 17, 4, 16)])
@pytest.mark.parametrize("with_zp", [False, True])
def test_matmul_nbits2_equals_onnxruntime_where_exact(m, k, n, block, with_zp):
    """Integer A (a_scale 1), power-of-two scales: MatMulNBits' float arithmetic is exact, so its bits
    are dmlq's; its bytes handed over as they are (rows padded to whole blocks, zero points' rows to a
    byte: G of 1 to 13)."""
    rng = np.random.default_rng(m * 7 + k + n + with_zp)
    a, b, scales, zp = exact_case(rng, m, k, n, block, with_zp)
    feeds = nbits2_feeds(b, scales, zp, block)
    want = matmul_nbits2(a.astype(F32), feeds, k, n, block)
    bt, st, zt = nbits2_operands(feeds, k, n, block)
    got = dmlq.matmul_integer_to_float(a, np.float32(1), None, bt, st, zt, block_size=block)
    np.testing.assert_array_equal(got, want)


def test_matmul_nbits2_on_the_gpu_path(gpu):
    """The same on the GPU path (stand-in): MatMulNBits' 2-bit bytes widened, then read K-major by
    the 4-bit kernels (the grouped stream kernel at M = 1 and 4, dp4a-wide at M = 20, stream-rows for
    groups of 16 past M = 16), equal to onnxruntime."""
    rng = np.random.default_rng(11)
    for m, k, n, block in ((1, 256, 40, 64), (4, 200, 40, 32), (20, 256, 40, 64), (20, 96, 24, 16)):
        a, b, scales, zp = exact_case(rng, m, k, n, block, True)
        feeds = nbits2_feeds(b, scales, zp, block)
        want = matmul_nbits2(a.astype(F32), feeds, k, n, block)
        bt, st, zt = nbits2_operands(feeds, k, n, block)
        S.launches.clear()
        got = dmlq.matmul_integer_to_float(S.module.asarray(a), np.float32(1), None, packed_on_device(bt),
                                           S.module.asarray(st), packed_on_device(zt), block_size=block)
        np.testing.assert_array_equal(got.get(), want)
        names = [launch[0] for launch in S.launches]
        assert names[:2] == ["widen_codes2", "unpack_table<uint8>"], names


# ------------------------------------------------------------------ torch

def test_torch_int2_tensors_and_packed_b_eager_and_compiled():
    """A torch.int2 / uint2 b (one code a byte) beside torch tensors, eager, and a Packed 2-bit b inside
    torch.compile (by value: int8 values in the graph; Inductor and aot_eager): NumPy's sums."""
    torch = pytest.importorskip("torch")
    import dmlq.torch  # noqa: F401  (the custom ops)

    rng = np.random.default_rng(21)
    for bdt, tdt in ((I2, torch.int2), (U2, torch.uint2)):
        a, w = qrand(rng, I8, (3, 16)), qrand(rng, bdt, (16, 5))
        zp = int(w.reshape(-1)[0])
        want = a.astype(np.int64) @ (w.astype(np.int64) - zp)
        at = torch.from_numpy(a)
        wt = torch.from_numpy(w.view(np.uint8).copy()).view(tdt)
        got = dmlq.matmul_integer(at, wt, None, zp)
        assert got.dtype == torch.int32 and np.array_equal(got.numpy(), want)
        got = dmlq.matmul_integer_to_float(at, 0.5, None, wt, 0.25, zp)
        np.testing.assert_array_equal(got.numpy(), dmlq.matmul_integer_to_float(a, 0.5, None, w.astype(WIDE[bdt]),
                                                                                0.25, zp))
        p = dmlq.pack(w)
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            f = torch.compile(lambda x: dmlq.matmul_integer(x, p, None, zp), backend=backend, fullgraph=True)
            assert np.array_equal(f(at).numpy(), want), backend
