"""The host harness itself (tests/cuda_host): it must fail a test when a kernel
breaks a rule, and its PTX emulation must follow the PTX ISA's tables.

The probe kernels live in tests/cuda_host/selftest.cu.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dmlq.gpu import device

SELFTEST = Path(__file__).parent / "cuda_host" / "selftest.cu"
NAMES = ("race", "divergent_barrier", "exit_before_barrier", "write_at", "read_at", "write_const",
         "trap_kernel", "shuffle_xor", "cp_async_wait_probe<0>", "cp_async_wait_probe<1>",
         "cp_async_wait_probe<2>", "ldmatrix_probe<false>", "ldmatrix_probe<true>", "mma_probe_s8u8",
         "float_ops", "address_mod", "warp_race", "read16_at", "cp_async_at",
         "shared_back_to_back<256>", "ldmatrix_rows")


@pytest.fixture(scope="module")
def dev(host_device):
    from cuda_host import harness

    d = harness.HostDevice()
    d.sources["selftest.cu"] = (SELFTEST, NAMES)
    yield d
    d.close()


def run(dev, name, grid, block, *args, shared=0):
    dev.forget()
    dev.launch("selftest.cu", name, grid, block, args, shared)


def fault(match=None):
    from cuda_host import harness

    return pytest.raises(harness.KernelFault, match=match)


def test_missing_barrier_is_a_wrong_result_in_some_thread_order(dev):
    for order in range(4):  # the harness cycles through four schedules
        out = np.zeros(64, np.int32)
        run(dev, "race", (1,), (64,), out, np.int32(1))
        np.testing.assert_array_equal(out, np.arange(63, -1, -1))
    for order in range(4):
        out = np.zeros(64, np.int32)
        run(dev, "race", (1,), (64,), out, np.int32(0))
        assert (out != np.arange(63, -1, -1)).any()


def test_a_warp_running_ahead_shows_a_missing_barrier(dev):
    want = (np.arange(64) + 32) % 64
    for order in range(4):
        out = np.zeros(64, np.int32)
        run(dev, "warp_race", (1,), (64,), out, np.int32(1))
        np.testing.assert_array_equal(out, want)
    wrong = 0
    for order in range(4):
        out = np.zeros(64, np.int32)
        run(dev, "warp_race", (1,), (64,), out, np.int32(0))
        wrong += bool((out != want).any())
    assert wrong >= 1


@pytest.mark.parametrize("name", ["divergent_barrier", "exit_before_barrier"])
def test_barrier_not_reached_by_every_thread_fails(dev, name):
    with fault() as e:
        run(dev, name, (1,), (64,), np.zeros(64, np.int32))
    assert "__syncthreads()" in str(e.value)


def test_global_overrun_fails(dev):
    out = np.zeros(8, np.int32)
    run(dev, "write_at", (1,), (32,), out, np.int32(7))
    assert out[7] == 7
    with fault() as e:
        run(dev, "write_at", (1,), (32,), out, np.int32(8))
    assert "AddressSanitizer" in str(e.value)
    with fault() as e:
        run(dev, "read_at", (1,), (32,), np.zeros(8, np.int32), np.zeros(1, np.int32), np.int32(-1))
    assert "AddressSanitizer" in str(e.value)
    run(dev, "write_at", (1,), (32,), out, np.int32(0))  # the runner restarted after the crash


I32, U8 = np.int32, np.uint8


# (kernel, its arguments but the offset, offset, None for an in-bounds access or
# (read/write, what memcheck would say of the address)). The buffers: 8 int32
# (32 bytes), 40 bytes at a 16-byte aligned start.
OUT_OF_BOUNDS = [
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(7), None),
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(0), None),
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(8), ("read", "0 bytes after the end")),
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(-1), ("read", "4 bytes before")),
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(100000), ("read", "399968 bytes after")),
    ("read_at", lambda: (np.zeros(8, I32), np.zeros(1, I32)), I32(-100000), ("read", "400000 bytes before")),
    ("write_at", lambda: (np.zeros(8, I32),), I32(7), None),
    ("write_at", lambda: (np.zeros(8, I32),), I32(8), ("write", "0 bytes after the end")),
    ("write_at", lambda: (np.zeros(8, I32),), I32(-1), ("write", "4 bytes before")),
    ("write_at", lambda: (np.zeros(8, I32),), I32(5000), ("write", "19968 bytes after")),
    # a 16-byte load: the last one inside, one straddling the end, one before
    ("read16_at", lambda: (np.zeros(48, U8)[:40], np.zeros(16, U8)), np.int64(16), None),
    ("read16_at", lambda: (np.zeros(48, U8)[:40], np.zeros(16, U8)), np.int64(32), None),  # a view: its array has 48
    ("read16_at", lambda: (np.zeros(40, U8), np.zeros(16, U8)), np.int64(32), ("read", "0 bytes after the end")),
    ("read16_at", lambda: (np.zeros(40, U8), np.zeros(16, U8)), np.int64(-16), ("read", "16 bytes before")),
]


@pytest.mark.parametrize("name,make,offset,error", OUT_OF_BOUNDS)
def test_out_of_bounds_global_access_is_an_illegal_address(dev, name, make, offset, error):
    """As compute-sanitizer's memcheck: an access outside the allocation a
    pointer points into fails the launch, naming the kernel, the argument and how
    far out; an access inside it (even past a view's end) does not."""
    from cuda_host import harness

    args = make()
    assert all(a.ctypes.data % 16 == 0 for a in args)  # NumPy's allocations: the uint4 loads need it
    if error is None:
        run(dev, name, (1,), (32,), *args, offset)
        return
    with pytest.raises(harness.IllegalAddress) as e:
        run(dev, name, (1,), (32,), *args, offset)
    msg = str(e.value).splitlines()[0]
    assert msg.startswith(f"cudaErrorIllegalAddress: {name} block (0,0,0) thread (0,0,0): "
                          f"invalid __global__ {error[0]}"), msg
    assert f"{error[1]}" in msg and "(argument 0," in msg, msg


@pytest.mark.parametrize("offset,src_size,error", [(0, 16, None), (16, 16, None), (32, 8, None),
                                                   (32, 16, "0 bytes after the end"), (-16, 16, "16 bytes before")])
@pytest.mark.parametrize("page_start", [False, True])
def test_out_of_bounds_cp_async_is_an_illegal_address(dev, offset, src_size, error, page_start):
    """cp.async reads its src-size bytes of global memory (the rest of the 16 is
    zero-filled): only those must lie in the allocation. page_start: src's address
    a multiple of 256, which the runner keeps, so the buffer's first byte could
    sit at the start of its page (it once did: "16 bytes before" then fell in the
    guard, a fault whose report names no access size, and this test failed about
    one run in 16, whenever NumPy's allocation happened to be 256-aligned)."""
    from cuda_host import harness

    src = np.arange(40, dtype=U8)
    keep = [src]  # NumPy's small allocations: draw until one is 256-aligned
    while page_start and src.ctypes.data % 256:
        src = np.arange(40, dtype=U8)
        keep.append(src)
        assert len(keep) < 10000
    assert src.ctypes.data % 16 == 0
    out = np.zeros(16, U8)
    if error is None:
        run(dev, "cp_async_at", (1,), (32,), src, out, np.int64(offset), np.uint32(src_size))
        want = np.zeros(16, U8)
        want[:src_size] = src[offset:offset + src_size]
        np.testing.assert_array_equal(out, want)
        return
    with pytest.raises(harness.IllegalAddress, match=f"cp_async_at .*invalid __global__ read of size 16 .*{error}"):
        run(dev, "cp_async_at", (1,), (32,), src, out, np.int64(offset), np.uint32(src_size))


def test_shared_address_of_an_array_that_follows_another(dev):
    """Two static shared arrays lie back to back in host memory (checked: else this case would
    prove nothing), so the second's first element is also one past the first's end, and a third
    array was registered between them; a cp.async to that element must land in its own array.
    The harness once mapped it to the end of the first array's window, which is the third's: the
    narrow types' quantize kernels then read another kernel's staging buffer in some test orders."""
    src = np.arange(32, dtype=U8).reshape(2, 16)
    out = np.zeros((2, 16), U8)
    adj = np.zeros(1, np.int32)
    run(dev, "shared_back_to_back<256>", (1,), (32,), src, out, adj)
    assert adj[0] == 1, "the arrays are not back to back in host memory: the case is not exercised"
    np.testing.assert_array_equal(out, src)


def test_write_through_a_const_pointer_fails(dev):
    with fault() as e:
        run(dev, "write_const", (1,), (32,), np.zeros(4, np.int32))
    assert "const" in str(e.value)


def test_trap_fails(dev):
    with fault() as e:
        run(dev, "trap_kernel", (1,), (32,))
    assert "__trap()" in str(e.value)


def test_bad_arguments_fail_before_the_launch(dev):
    with pytest.raises(TypeError, match="None"):
        run(dev, "write_at", (1,), (32,), None, np.int32(0))
    with fault():
        run(dev, "write_at", (1,), (32,), np.zeros(4, np.int32), np.int64(0))  # int parameter
    with fault():
        run(dev, "write_at", (1,), (32,), np.zeros(4, np.int32), 0)            # Python int
    with fault(match="wild pointer"):
        run(dev, "write_at", (1,), (32,), np.uint64(4096), np.int32(0))
    with fault():
        run(dev, "write_at", (1,), (32,), np.zeros(4, np.int32))               # too few
    with fault():
        run(dev, "write_at", (1,), (2048,), np.zeros(4, np.int32), np.int32(0))  # block too big


def test_launchers_never_pass_none():
    with pytest.raises(TypeError, match="NULL"):
        device.check_args("k", (np.uint64(1), None))
    device.check_args("k", (device.NULL, np.int32(0)))


def test_shuffle(dev):
    out = np.zeros(64, np.int32)
    run(dev, "shuffle_xor", (1,), (64,), out)
    np.testing.assert_array_equal(out, (np.arange(64) ^ 5) * 10)


def test_cp_async_lands_only_when_waited_for(dev):
    src = np.arange(8, dtype=np.uint32).reshape(2, 4) + 100
    landed1 = np.array([src[1, 0], src[1, 1], 0, 0], np.uint32)  # src-size 8: zero-filled
    out = np.zeros((2, 4), np.uint32)
    run(dev, "cp_async_wait_probe<0>", (1,), (1,), src, out)
    np.testing.assert_array_equal(out, [src[0], landed1])
    out[...] = 0
    run(dev, "cp_async_wait_probe<1>", (1,), (1,), src, out)
    np.testing.assert_array_equal(out[0], src[0])
    assert (out[1] != landed1).any() and len(set(out[1].view(np.uint8))) == 1  # poison bytes
    run(dev, "cp_async_wait_probe<2>", (1,), (1,), src, out)
    assert (out[0] != src[0]).all() and (out[1] != landed1).any()


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_follows_the_ptx_fragment_table(dev, rng, trans):
    m = rng.integers(0, 2**16, (4, 8, 8), dtype=np.uint64).astype(np.uint16)  # 4 matrices of 8x8 b16
    out = np.zeros((32, 4), np.uint32)
    run(dev, f"ldmatrix_probe<{'true' if trans else 'false'}>", (1,), (32,), m.reshape(32, 8).copy(), out)
    want = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for i in range(4):
            if trans:  # column lane/4 of rows 2(lane%4), 2(lane%4)+1
                lo, hi = m[i, 2 * (lane % 4), lane // 4], m[i, 2 * (lane % 4) + 1, lane // 4]
            else:      # row lane/4, columns 2(lane%4), 2(lane%4)+1
                lo, hi = m[i, lane // 4, 2 * (lane % 4)], m[i, lane // 4, 2 * (lane % 4) + 1]
            want[lane, i] = int(lo) | (int(hi) << 16)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("rows,extra", [
    (np.arange(32), 0),             # 8 consecutive 16-byte rows a phase: 8 bank quads
    (np.zeros(32, int), 0),         # one row for every lane: a broadcast
    (2 * np.arange(32), 1),         # rows 32 bytes apart: 2 rows a quad, 2 wavefronts a phase
    (8 * np.arange(32), 7),         # rows 128 bytes apart: every row in one quad, 8 wavefronts
    (np.arange(32) ^ (np.arange(32) >> 3 & 1) * 8, 0),  # rows 8 apart swapped in: still 8 quads
])
def test_ldmatrix_bank_conflicts_are_counted(dev, rows, extra):
    """The runner counts, per ldmatrix phase (8 lanes' 16-byte rows), the wavefronts past the
    first that rows sharing a bank quad cost (HostDevice.ldmatrix: the kernels' conflict test)."""
    out = np.zeros(32, np.uint32)
    run(dev, "ldmatrix_rows", (1,), (32,), rows.astype(np.int32), out)
    assert dev.ldmatrix == {"ldmatrix_rows": [4, 4 * extra]}


def test_mma_m16n8k32_follows_the_ptx_fragment_table(dev, rng):
    A = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    B = rng.integers(0, 256, (32, 8)).astype(np.uint8)
    C = rng.integers(-2**20, 2**20, (16, 8)).astype(np.int32)
    a = np.zeros((32, 4), np.uint32)
    b = np.zeros((32, 2), np.uint32)
    c = np.zeros((32, 4), np.int32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):  # a_i: row g (+8 for odd i), k = 4t (+16 for i >= 2)
            a[lane, i] = A[g + 8 * (i % 2), 4 * t + 16 * (i // 2):][:4].view(np.uint32)[0]
        for i in range(2):  # b_i: column g, k = 4t + 16 i
            b[lane, i] = np.ascontiguousarray(B[4 * t + 16 * i:][:4, g]).view(np.uint32)[0]
        for i in range(4):  # c_i: row g (+8 for i >= 2), column 2t + i % 2
            c[lane, i] = C[g + 8 * (i // 2), 2 * t + i % 2]
    d = np.zeros((32, 4), np.int32)
    run(dev, "mma_probe_s8u8", (1,), (32,), a, b, c, d)
    D = A.astype(np.int64) @ B.astype(np.int64) + C
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            assert d[lane, i] == D[g + 8 * (i // 2), 2 * t + i % 2], (lane, i)


def test_float_ops_are_ieee_and_ftz_is_seen(dev):
    pairs = np.array([[5.0, 0.039215686], [1e-39, 3.0], [3e-39, 0.5], [1.0, 3.0], [65519.0, 1.0],
                      [65520.0, 1.0], [2.0**-25, 1.0], [2.0**-24 * 1.5, 1.0], [np.nan, 1.0],
                      [1.0, 0.0], [-0.0, 5.0], [3e38, 10.0]], np.float32)
    n = len(pairs)
    out = np.zeros((n, 4), np.float32)
    with np.errstate(all="ignore"):
        run(dev, "float_ops", (1,), (n,), pairs.copy(), out)
        x, y = pairs[:, 0], pairs[:, 1]
        tiny = np.finfo(np.float32).tiny

        def ftz(v):
            return np.where(np.abs(v) < tiny, np.copysign(np.float32(0), v), v).astype(np.float32)

        want = np.stack([x / y, x * y, ftz(ftz(x) * ftz(y)), x.astype(np.float16).astype(np.float32)], 1)
    # the arithmetic's NaN results are the GPU's canonical NaN (x86 would pass the operand's on), and
    # so is cvt.f32.f16's (the float16 round trip: the second H100 session lost a float16 NaN's sign)
    bits = want.view(np.uint32)
    bits[np.isnan(want)] = 0x7FFFFFFF
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert out[0, 0] < 127.5 and out[1, 2] == 0.0 and out[1, 1] != 0.0


def test_buffers_keep_their_alignment(dev):
    base = np.zeros(1000, np.uint8)
    for off in (0, 1, 3, 16, 100):
        out = np.zeros(1, np.uint32)
        run(dev, "address_mod", (1,), (1,), base[off:], out)
        assert out[0] == (base.ctypes.data + off) % 256


def test_every_schedule_on_request_shows_a_race_by_itself(dev):
    dev.schedules = (0, 1, 2, 3)
    try:
        run(dev, "warp_race", (1,), (64,), np.zeros(64, np.int32), np.int32(1))
        with fault(match="schedules"):
            run(dev, "warp_race", (1,), (64,), np.zeros(64, np.int32), np.int32(0))
    finally:
        dev.schedules = None


def test_a_runner_another_process_is_building_is_not_built_twice(host_device, tmp_path, monkeypatch):
    """While a lock file says another process builds a runner, a caller that will
    not wait (tests/prebuild.py's pool) gets None at once and builds nothing;
    one that waits would block on that lock, then find the runner cached."""
    from cuda_host import harness

    monkeypatch.setenv("DMLQ_HOST_CACHE", str(tmp_path))
    _path, _names, exe = harness.runner_path("selftest.cu", path=SELFTEST, names=("race",))
    assert exe.parent == tmp_path
    with harness._file_lock(exe) as held:
        assert held
        assert harness.build("selftest.cu", path=SELFTEST, names=("race",), wait=False) is None
        with harness._file_lock(exe, blocking=False) as again:  # flock: held against every other open
            assert not again
    assert not exe.exists() and exe not in harness._inflight


def test_a_crash_report_outside_the_guards_or_inside_a_buffer():
    """harness.crash_fault on ASan's words: a null pointer is an illegal address in no
    buffer; an address inside a buffer (not an out-of-bounds access) stays a plain KernelFault."""
    from cuda_host import harness

    report = ("==1==ERROR: AddressSanitizer: SEGV on unknown address {} (pc 0x1 bp 0x2 sp 0x3 T0)\n"
              "==1==The signal is caused by a WRITE memory access.\n"
              "cuda_host launch: k block (1,0,0) thread (3,0,0)\n"
              "cuda_host buffer 0: 0x7f0000001000 40 args 0 2\n")
    e = harness.crash_fault(1, report.format("0x000000000000"))
    assert type(e) is harness.IllegalAddress
    assert str(e).startswith("cudaErrorIllegalAddress: k block (1,0,0) thread (3,0,0): invalid __global__ write at "
                             "0x0, an address in no buffer of the launch (the nearest: argument 0, 2, 40 bytes at "
                             "0x7f0000001000)\n"), str(e)
    assert "8 bytes after the end" in str(harness.crash_fault(1, report.format("0x7f0000001030")))
    assert type(harness.crash_fault(1, report.format("0x7f0000001010"))) is harness.KernelFault
    assert type(harness.crash_fault(1, report.format("0x7f0000001010").replace("cuda_host launch", "x"))) \
        is harness.KernelFault
