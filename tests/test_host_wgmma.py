"""The host harness's wgmma emulation (tests/cuda_host/cuda_host_wgmma.h) against the PTX
ISA: wgmma.mma_async.m64nNk32.s32 with both operands in shared memory through matrix
descriptors, checked against NumPy, and the faults a wrong use must give.

The probe kernel lives in tests/cuda_host/wgmma_selftest.cu. The layouts are written here from
the ISA's text, independently of the emulator: K-major, no swizzle: core matrices of 8 rows x
16 bytes, LBO apart along K and SBO apart along M / N; 128-byte swizzle: rows of 128 bytes,
8-row atoms 1024 bytes apart, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the atom
1024-byte aligned, so the descriptor's base offset is 0).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SOURCE = Path(__file__).parent / "cuda_host" / "wgmma_selftest.cu"
PAIRS = [(True, True), (True, False), (False, True), (False, False)]
SHAPES = (8, 64, 128, 256)
STATIC = ((64, True, False), (256, False, True))


def probe(n, sa, sb, static=False):
    b = lambda v: "true" if v else "false"  # noqa: E731
    return f"wgmma_probe<{n}, {b(sa)}, {b(sb)}, {b(static)}>"


NAMES = tuple(probe(n, sa, sb) for n in SHAPES for sa, sb in PAIRS) + tuple(
    probe(n, sa, sb, True) for n, sa, sb in STATIC) + ("wgmma_satfinite_probe",)


@pytest.fixture(scope="module")
def dev(host_device):
    from cuda_host import harness

    d = harness.HostDevice()
    d.sources["wgmma_selftest.cu"] = (SOURCE, NAMES)
    yield d
    d.close()


def fault(match):
    from cuda_host import harness

    return pytest.raises(harness.KernelFault, match=match)


def descriptor(start, lbo, sbo, swizzle=0, base_offset=0):
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731
    return np.uint64(enc(start) | enc(lbo) << 16 | enc(sbo) << 32 | base_offset << 49 | swizzle << 62)


def place(image, off, m, layout, lbo=0, sbo=0, kstep=0):
    """Writes the rows x 32 bytes of m (uint8) into image at off; returns the descriptor."""
    rows = m.shape[0]
    r = np.arange(rows)[:, None]
    k = np.arange(32)[None, :]
    if layout == "none":
        pos = off + (r // 8) * sbo + (r % 8) * 16 + (k // 16) * lbo + k % 16
        image[pos] = m
        return descriptor(off, lbo, sbo)
    # 128-byte swizzle: the operand is bytes 32 kstep .. 32 kstep + 31 of a rows x 128 tile
    kk = 32 * kstep + k
    pos = off + (r // 8) * 1024 + (r % 8) * 128 + ((kk // 16) ^ (r % 8)) * 16 + kk % 16
    image[pos] = m
    return descriptor(off + 32 * kstep, 16, 1024, swizzle=1)


# (A's LBO, SBO), (B's LBO, SBO) for the no-swizzle layouts: core matrices packed 8-row group
# by group, all of K's first chunk before its second, and padded strides.
LAYOUTS = {
    "packed": lambda n: ((128, 256), (128, 256)),
    "k_outer": lambda n: ((1024, 128), (n * 16, 128)),
    "padded": lambda n: ((144, 400), (176, 336)),
}


def operands(rng, n, layout, kstep=0):
    """(image, desc_a, desc_b, a, b): random A (64 x 32) and B (n x 32) bytes in a shared-memory
    image of random filler."""
    image = rng.integers(0, 256, 48 * 1024, dtype=np.uint8)
    a = rng.integers(0, 256, (64, 32), dtype=np.uint8)
    b = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    if layout == "swizzle128":
        da = place(image, 0, a, "128B", kstep=kstep)
        db = place(image, 8192, b, "128B", kstep=kstep)
        size = 8192 + n * 128
    else:
        (la, sa_), (lb, sb_) = LAYOUTS[layout](n)
        da = place(image, 16, a, "none", la, sa_)
        off_b = 16 + 8 * sa_ + la + 1024
        db = place(image, off_b, b, "none", lb, sb_)
        size = off_b + (n // 8) * sb_ + lb + 256
    return image[: (size + 15) // 16 * 16].copy(), da, db, a, b


def fragment_to_matrix(regs, n):
    """The 64 x n accumulator from the 128 threads' registers (thread t's register i at
    [t, i]): warp w = t // 32, lane l: D[16 w + l // 4 + 8 (i % 4 // 2)][8 (i // 4) + 2 (l % 4) + i % 2]."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i % 4) // 2)
    col = 8 * (i // 4) + 2 * (t % 4) + i % 2
    d = np.zeros((64, n), np.int32)
    d[row, col] = regs.reshape(128, n // 2)
    return d


def run(dev, n, sa, sb, image, da, db, c, mode=0, poke=0, static=False, block=128):
    d0 = np.zeros(128 * n // 2, np.int32)
    d1 = np.zeros(128 * n // 2, np.int32)
    dev.forget()
    dev.launch("wgmma_selftest.cu", probe(n, sa, sb, static), (1,), (block,),
               (image.view(np.uint32), np.int32(image.size), da, db, c, d0, d1, np.int32(mode),
                np.int32(poke)), 0 if static else image.size)
    return fragment_to_matrix(d0, n), fragment_to_matrix(d1, n)


def expected(a, b, sa, sb, c_matrix=None):
    x = a.view(np.int8).astype(np.int64) if sa else a.astype(np.int64)
    y = b.view(np.int8).astype(np.int64) if sb else b.astype(np.int64)
    d = x @ y.T
    if c_matrix is not None:
        d = d + c_matrix
    return d.astype(np.uint32).view(np.int32)  # .s32 accumulation wraps


def check(dev, rng, n, sa, sb, layout, kstep=0, static=False, mode=0, poke=0):
    image, da, db, a, b = operands(rng, n, layout, kstep)
    c = rng.integers(-2**31, 2**31, 128 * n // 2, dtype=np.int64).astype(np.int32)
    c[:8] = 2**31 - 1  # accumulations that wrap
    d0, d1 = run(dev, n, sa, sb, image, da, db, c, mode, poke, static)
    np.testing.assert_array_equal(d0, expected(a, b, sa, sb))
    np.testing.assert_array_equal(d1, expected(a, b, sa, sb, fragment_to_matrix(c, n)))


@pytest.mark.parametrize("n", SHAPES)
@pytest.mark.parametrize("sa,sb", PAIRS)
def test_wgmma_without_swizzle_matches_numpy(dev, n, sa, sb):
    rng = np.random.default_rng(n * 4 + 2 * sa + sb)
    for layout in LAYOUTS:
        check(dev, rng, n, sa, sb, layout)


@pytest.mark.parametrize("n,sa,sb", [(8, True, True), (64, False, True), (128, True, False),
                                     (256, False, False)])
def test_wgmma_with_128_byte_swizzle_matches_numpy(dev, n, sa, sb):
    rng = np.random.default_rng(7 + n)
    for kstep in range(4):  # the start address advanced 32 bytes a k-step inside the atom
        check(dev, rng, n, sa, sb, "swizzle128", kstep)


@pytest.mark.parametrize("n,sa,sb", STATIC)
def test_wgmma_operands_in_static_shared_memory(dev, n, sa, sb):
    rng = np.random.default_rng(11)
    check(dev, rng, n, sa, sb, "padded", static=True)
    check(dev, rng, n, sa, sb, "swizzle128", kstep=1, static=True)


def test_satfinite_clamps_to_int32(dev):
    rng = np.random.default_rng(13)
    image, da, db, a, b = operands(rng, 8, "padded")
    c = np.where(rng.random(128 * 4) < 0.5, -(2**31) + 1000, 2**31 - 1000).astype(np.int32)
    out = np.zeros(128 * 4, np.int32)
    dev.forget()
    dev.launch("wgmma_selftest.cu", "wgmma_satfinite_probe", (1,), (128,),
               (image.view(np.uint32), np.int32(image.size), da, db, c, out), image.size)
    want = a.view(np.int8).astype(np.int64) @ b.view(np.int8).astype(np.int64).T
    want = np.clip(want + fragment_to_matrix(c, 8), -(2**31), 2**31 - 1)
    np.testing.assert_array_equal(fragment_to_matrix(out, 8), want)
    assert (want == 2**31 - 1).any() and (want == -(2**31)).any()


def test_writing_an_operand_after_wait_group_is_allowed(dev):
    check(dev, np.random.default_rng(3), 64, True, True, "padded", mode=5, poke=16)


def test_an_operand_overwritten_before_wait_group_fails(dev):
    with fault("wgmma operand in shared memory changed before wait_group retired it"):
        check(dev, np.random.default_rng(3), 64, True, True, "padded", mode=3, poke=16)


def test_a_cp_async_into_an_operand_before_wait_group_fails(dev):
    """Issued, not landed: on a GPU the copy may land while the tensor cores read (here copies
    land only at their wait, so the check is made when the copy is issued)."""
    with fault("cp.async into shared .* which a wgmma.mma_async not yet retired"):
        check(dev, np.random.default_rng(3), 64, True, True, "padded", mode=7, poke=32)


def test_wait_group_1_leaves_the_newest_group_in_flight(dev):
    with fault("changed before wait_group retired it"):
        check(dev, np.random.default_rng(3), 64, True, True, "padded", mode=6, poke=16)


def test_exit_with_a_wgmma_in_flight_fails(dev):
    with fault("in flight"):
        check(dev, np.random.default_rng(3), 8, True, False, "packed", mode=4)


def test_descriptors_must_be_uniform(dev):
    with fault("must be the same in all 128 threads"):
        check(dev, np.random.default_rng(3), 8, False, False, "packed", mode=1)


def test_a_partial_warpgroup_fails(dev):
    with fault("warpgroup collective .* waits for threads 0..127"):
        check(dev, np.random.default_rng(3), 8, False, False, "packed", mode=2)
    rng = np.random.default_rng(3)
    image, da, db, _, _ = operands(rng, 8, "packed")
    with fault("needs a full warpgroup of 128 threads"):
        run(dev, 8, True, True, image, da, db, np.zeros(512, np.int32), block=64)


@pytest.mark.parametrize("change,match", [
    (lambda d: d | np.uint64(3 << 49), "base offset 3"),
    (lambda d: d & np.uint64(2**62 - 1) | np.uint64(2 << 62), "64B swizzle is not emulated"),
    (lambda d: d & np.uint64(2**62 - 1) | np.uint64(3 << 62), "32B swizzle is not emulated"),
])
def test_descriptor_fields_the_harness_does_not_emulate_fail(dev, change, match):
    rng = np.random.default_rng(5)
    image, da, db, _, _ = operands(rng, 8, "packed")
    with fault(match):
        run(dev, 8, True, True, image, change(da), db, np.zeros(512, np.int32))
