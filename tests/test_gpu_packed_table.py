"""A packed 4-bit b_zero_point on the GPU path: its values as the int8 / uint8 table the matmul
kernels read, made by one launch of cuda/packed_table.cu's ``unpack_table`` (before: 6 to 9
operations of the array module and their temporaries a call). Run by the host harness through the
cupy stand-in into memory poisoned with 0xA5 (the pool's block the table then takes), byte for
byte against dmlq.unpack on NumPy bytes (ml_dtypes' values): a dmlq.Packed of any rank, its rows
starting mid-byte; a TransposedPacked (MatMulNBits' (N, groups) zero points) whole and narrowed
to the first k of each stored row; every code of both types; the refusals of bytes that do not
hold the shape."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cupy_stand_in as S
import dmlq
from dmlq.gpu import packed, plan
from dmlq.packing import held
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)

I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
I2, U2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)
TYPES = pytest.mark.parametrize("dt", [I4, U4, I2, U2], ids=["int4", "uint4", "int2", "uint2"])


def table(p):
    """unpack_table of Packed / TransposedPacked ``p`` (NumPy bytes, moved to the device) into the
    poisoned block the pool hands it; (the result on the host, the kernels launched)."""
    stored, k = held(p)
    n = max(1, int(np.prod(p.shape)))
    data = S.module.asarray(p.data)
    bait = S.module.full(n, 0xA5, np.uint8)
    at = bait.data.ptr
    del bait
    with plan.recording() as plans:
        got = packed.unpack_table(data, p.dtype, stored, k)
    assert got.size == 0 or got.data.ptr == at  # (the poisoned block: a missed element shows)
    return got.get(), [launch.kernel for pl in plans for launch in pl.launches]


def codes(rng, dt, shape):
    info = ml_dtypes.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dt)


@TYPES
@pytest.mark.parametrize("shape", [(7,), (3, 5), (4, 1, 33), (2, 3, 7, 9), (1,), (0, 4)])
def test_packed_tables(gpu, dt, shape):
    """A Packed's C order: odd rows (every other row starts mid-byte), batches of odd matrices."""
    v = codes(np.random.default_rng(sum(shape)), dt, shape)
    got, kernels = table(dmlq.pack(v))
    assert got.dtype == np.dtype(np.int8 if dt in (I4, I2) else np.uint8) and got.shape == shape
    assert np.array_equal(got, v.astype(got.dtype))
    assert kernels == ([f"unpack_table<{got.dtype.name}>"] if v.size else [])


@TYPES
@pytest.mark.parametrize("stored,k", [((40, 4), 3), ((40, 4), 4), ((9, 7), 5), ((2, 33, 6), 6), ((3, 8, 16), 1)])
def test_transposed_tables(gpu, dt, stored, k):
    """MatMulNBits' zero points: the (..., N, L) Packed's .mT[..., :k, :], the (..., k, N) table in C
    order; stored rows of odd length start mid-byte, the codes past k differ from the kept ones."""
    w = codes(np.random.default_rng(k + sum(stored)), dt, stored)
    t = dmlq.pack(w).mT[..., :k, :]
    got, _ = table(t)
    want = np.ascontiguousarray(w[..., :k].swapaxes(-1, -2))
    assert got.shape == want.shape and np.array_equal(got, want.astype(got.dtype))
    assert np.array_equal(got, np.asarray(dmlq.unpack(t)).astype(got.dtype))


def test_every_code(gpu):
    """All 16 codes of the 4-bit types in both nibbles of a byte, all 4 of the 2-bit types in each of
    a byte's four slots (the 2-bit ones: b_zero_point of a 2-bit b, tests/test_intmm_two_bit.py)."""
    b = np.arange(256, dtype=np.uint8)
    for name, per in (("int4", 2), ("uint4", 2), ("int2", 4), ("uint2", 4)):
        p = dmlq.Packed(b, (256 * per,), name)
        got, _ = table(p)
        assert np.array_equal(got, dmlq.unpack(p).astype(got.dtype)), name


def test_bytes_that_do_not_hold_the_shape(gpu):
    """As dmlq.unpack says it (dmlq.packing.check_bytes, before the launch): the byte count, then
    1-D uint8 bytes, through the public matmul."""
    data = S.module.asarray(np.zeros(5, np.uint8))
    a = S.module.asarray(np.ones((2, 8), np.uint8))
    b = dmlq.Packed(S.module.asarray(np.zeros(12, np.uint8)), (8, 3), "uint4")
    with pytest.raises(ValueError, match=r"12 uint4 elements \(shape \(3, 4\)\) take 6 bytes packed; the data holds 5"):
        dmlq.matmul_integer(a, b, None, dmlq.Packed(data, (3, 4), "uint4"))
    with pytest.raises(TypeError, match="1-D uint8"):
        dmlq.matmul_integer(a, b, None, dmlq.Packed(S.module.zeros((2, 3), np.uint8), (3, 4), "uint4"))
    with pytest.raises(ValueError, match="take 2 bytes packed; the data holds 5"):
        dmlq.matmul_integer(a, b, None, dmlq.Packed(data, (3,), "uint4"))


def test_one_launch_a_call(gpu):
    """MatMulNBits' call with its zero points as they are: the table is one launch, and the array
    module makes no temporary for it (before: shifts, masks, a stack, copies)."""
    rng = np.random.default_rng(4)
    n, k, g = 64, 256, 64
    a = S.module.asarray(rng.integers(-128, 128, (1, k)).astype(np.int8))
    w = dmlq.Packed(S.module.asarray(rng.integers(0, 256, n * k // 2).astype(np.uint8)), (n, k), "uint4")
    zp = dmlq.Packed(S.module.asarray(rng.integers(0, 256, n * 2).astype(np.uint8)), (n, k // g), "uint4")
    s = S.module.asarray(rng.uniform(0, 1, (k // g, n)).astype(np.float32))
    dmlq.matmul_integer_to_float(a, np.float32(0.5), None, w.mT, s, zp.mT, block_size=g)
    S.launches.clear()
    before = S.counts["allocations"]
    dmlq.matmul_integer_to_float(a, np.float32(0.5), None, w.mT, s, zp.mT, block_size=g)
    names = [name for name, *_ in S.launches]
    assert names.count("unpack_table<uint8>") == 1, names
    assert S.counts["allocations"] - before <= 3, (S.counts["allocations"] - before, names)


def test_grid_stride(gpu, monkeypatch):
    """The grid's cap (TABLE_MAX_BLOCKS, 1024 blocks: 262,144 elements a pass) pinned to 2 blocks,
    so a table of 3 x 1000 elements takes 6 passes of the grid-stride loop, its last one partial."""
    monkeypatch.setattr(packed, "TABLE_MAX_BLOCKS", 2)
    for dt in (I4, U4):
        w = codes(np.random.default_rng(7), dt, (1000, 3))
        got, _ = table(dmlq.pack(w).mT)
        assert np.array_equal(got, np.ascontiguousarray(w.T).astype(got.dtype))


def test_bytes_on_another_device(gpu):
    """A packed zero point's bytes on a device other than the current one are refused by name, as
    any operand there is (the table would be made by a launch on the current device)."""
    rng = np.random.default_rng(6)
    with S.module.cuda.Device(1):
        zp = dmlq.pack(codes(rng, U4, (1, 8)))
        zp = dmlq.Packed(S.module.asarray(zp.data), zp.shape, zp.dtype)
    a = S.module.asarray(rng.integers(0, 255, (2, 16)).astype(np.uint8))
    b = dmlq.pack(codes(rng, U4, (16, 8)))
    b = dmlq.Packed(S.module.asarray(b.data), b.shape, b.dtype)
    with pytest.raises(ValueError, match=r"b_zero_point's bytes is on device 1 but the current device is 0"):
        dmlq.matmul_integer(a, b, None, zp)


def test_no_table_is_built_when_only_the_result_is_asked(gpu, rng):
    """dmlq.calls.output_meta (what the torch CUDA path and dask ask before a call: the result's
    shape and dtype) of the integer matmuls with a packed zero point of GPU bytes launches no
    table build; the call itself launches one, and the two agree on the result."""
    import cupy

    from dmlq.calls import output_meta

    a = cupy.asarray(rng.integers(0, 256, (3, 64), dtype=np.uint8))
    b = dmlq.pack(cupy.asarray(rng.integers(-8, 8, (6, 64)).astype(np.int8).view(np.uint8) & 15), dtype="int4").mT
    zp = dmlq.pack(cupy.asarray(rng.integers(-8, 8, (6, 2)).astype(np.int8).view(np.uint8) & 15), dtype="int4").mT
    s = cupy.asarray(rng.uniform(0.001, 0.01, (2, 6)).astype(np.float32))
    b2 = dmlq.pack(cupy.asarray(rng.integers(0, 4, (6, 64)).astype(np.uint8)), dtype="uint2").mT
    zp2 = dmlq.pack(cupy.asarray(rng.integers(0, 4, (6, 2)).astype(np.uint8)), dtype="uint2").mT
    calls = [(dmlq.matmul_integer, (a, b, 3, zp[:1]), {}),
             (dmlq.matmul_integer_to_float, (a, 0.1, None, b, s, zp, None), {"block_size": 32}),
             (dmlq.matmul_integer_to_float, (a, 0.1, None, b2, s, zp2, None), {"block_size": 32})]
    prep = ("unpack_table", "widen_codes2")  # (a 2-bit b's bytes widened: tests/test_intmm_two_bit.py)
    for fn, args, kw in calls:
        counted = getattr(cupy, "__stand_in__", False)
        if counted:
            import cupy_stand_in
            cupy_stand_in.launches.clear()
        shape, dtype = output_meta(fn, *args, **kw)
        if counted:
            assert not [n for n, *_ in cupy_stand_in.launches if n.startswith(prep)], fn.__name__
        got = fn(*args, **kw)
        if counted:
            assert [n for n, *_ in cupy_stand_in.launches if n.startswith("unpack_table")], fn.__name__
        assert (got.shape, got.dtype) == (shape, dtype)
