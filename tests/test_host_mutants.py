"""Host-harness cases that the mutation run (tools/mutate.py) showed missing.

Each test names the source it guards (mutant_elementwise, mutant_dp4a,
mutant_mma, mutant_avgpool) so the tool can select it; each runs the
launchers unchanged on the kernels' own source (the `host` fixture) and
compares bit for bit with dmlq.reference.
"""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import reference as ref
from dmlq.gpu import elementwise as ew
from test_host_elementwise import poisoned, qvals


def aligned16(v):
    """``v`` copied into its own allocation of exactly v.nbytes (so the harness
    reports a read one byte past it) whose base is 16-byte aligned."""
    keep = []
    for _ in range(64):
        out = np.empty(v.shape, v.dtype)
        if out.ctypes.data % 16 == 0:
            out[...] = v
            return out
        keep.append(out)  # try another address
    pytest.skip("no 16-byte aligned allocation")


# ------------------------------------------------------------ elementwise.cu

# Per-axis tensors larger than one block tile (256 threads x kUnroll 8 = 2048
# elements) and than one grid step (the host grid is 8 blocks: 16384
# elements), so that the axis kernel's position (j, c) is advanced inside a
# tile and across the grid stride, with the channel index landing exactly on
# L after a carry (e.g. (2, 4000): element 4000 is k = 7 of thread 160 of
# block 1). Found by: `c >= L` -> `c > L` and a tile of kUnroll + 1 surviving.
AXIS_CASES = [((2, 4000), 1), ((37, 700), 0), ((5, 37, 123), 1), ((3000, 7), 0), ((4, 6, 1031), 2)]


@pytest.mark.parametrize("shape,axis", AXIS_CASES)
def test_mutant_elementwise_axis_past_one_tile_and_grid_step(host, rng, shape, axis):
    pshape = [1] * len(shape)
    pshape[axis] = shape[axis]
    s = rng.uniform(0.01, 2.0, pshape).astype(np.float32)
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    zp = qvals(rng, pshape, "uint8")
    want = ref.quantize_linear(x, s, zp, np.empty(shape, np.uint8))
    out = poisoned(shape, np.uint8)
    ew.quantize_linear(x, s, zp, out, variant="axis")
    np.testing.assert_array_equal(out, want, err_msg=f"quantize axis {shape} axis={axis}")
    assert host.calls[-1][0].startswith("quantize_axis")

    q = qvals(rng, shape, "int8")
    zq = qvals(rng, pshape, "int8")
    want = ref.dequantize_linear(q, s, zq, np.empty(shape, np.float32))
    out = poisoned(shape, np.float32)
    ew.dequantize_linear(q, s, zq, out, variant="axis")
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32),
                                  err_msg=f"dequantize axis {shape} axis={axis}")


# ------------------------------------------------------------ matmul_mma.cu

# K a multiple of 16 but not of the 64-wide k tile, operands used in place
# (16-byte aligned, rows exactly K bytes: no padded copy): the last tile's A
# chunks end exactly at the row end, so a byte count one too large reads past
# the last row of A (an ASan report here; past the allocation on a GPU).
# Found by: the A k-edge byte count off by one surviving (every K in the other
# mma cases is a multiple of 64 or goes through a zero-padded copy).
@pytest.mark.parametrize("M,K,N", [(130, 80, 144), (64, 16, 128), (20, 208, 48)])
def test_mutant_mma_k_tail_multiple_of_16_in_place(host, rng, M, K, N):
    from dmlq.gpu import matmul, qmm

    if "mma-128x128" not in matmul.VARIANTS:
        pytest.skip("mma kernel source absent")
    a = aligned16(qvals(rng, (M, K), "int8"))
    b = aligned16(qvals(rng, (K, N), "uint8"))
    a_s = rng.uniform(0.5, 2, M).astype(np.float32)
    b_s = np.float32([0.75])
    o_s = np.float32([K * 40.0])
    a_zp, b_zp, o_zp = np.int8([3]), qvals(rng, (N,), "uint8"), np.int8([-2])
    want = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty((M, N), np.int8))
    out = poisoned((M, N), np.int8)
    qmm.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant="mma-128x128")
    np.testing.assert_array_equal(out, want)
    assert any(c[0].startswith("matmul_mma") for c in host.calls)


class _ChangedMmaLaunches:
    """The host harness, with each tensor-core main launch changed by
    ``change(grid, args) -> (grid, args)`` before it runs (a test double of the
    device: dmlq's launchers and plans run unchanged)."""

    def __init__(self, host, change):
        self.host, self.change = host, change

    def __getattr__(self, name):  # xp, ptr, is_array, info, resident_blocks, register
        return getattr(self.host, name)

    def launch(self, source, name, grid, block, args, shared_mem=0):
        if name.startswith("matmul_mma<"):
            grid, args = self.change(tuple(grid), list(args))
        self.host.launch(source, name, grid, block, args, shared_mem)


def _mma_case(rng, M, K, N):
    a = aligned16(qvals(rng, (M, K), "uint8"))
    b = aligned16(qvals(rng, (K, N), "int8"))
    params = (np.float32([0.02]), np.uint8([3]), np.float32([0.5]), None, np.float32([K * 2.0]), np.int8([1]))
    want = ref.quantized_matmul(a, *params[:2], b, *params[2:], np.empty((M, N), np.int8))
    return a, b, params, want


# Blocks past the last tile (lin >= tiles * splits) return at once. dmlq's
# launcher sizes the grid to the tiles exactly, so only a grid with more blocks
# than tiles (a folded 2-D grid, e.g. above 65,535 tiles) reaches the guard:
# here one more row of blocks. With split-K such a block would compute split
# = splits and write past the partial sums (an ASan report). Found by: `lin >=
# tiles * splits` -> `lin > tiles * splits` surviving every test.
def test_mutant_mma_blocks_past_the_last_tile_return(host, rng):
    from dmlq.gpu import device, matmul, qmm

    if "mma-128x128" not in matmul.VARIANTS:
        pytest.skip("mma kernel source absent")
    a, b, params, want = _mma_case(rng, 130, 256, 72)
    seen = []

    def one_more_row(grid, args):
        seen.append(grid)
        return (grid[0], grid[1] + 1, grid[2]), args

    out = poisoned(want.shape, np.int8)
    with device.using(_ChangedMmaLaunches(host, one_more_row)):
        qmm.quantized_matmul(a, *params[:2], b, *params[2:], out, variant="mma-128x128", splits=2)
    np.testing.assert_array_equal(out, want)
    assert seen and seen[0][1] == 2 * 2  # two row tiles, two splits: the guard met one more row


# The launcher pads operands that cp.async cannot read at its width, so the
# kernel's misalignment __trap is reached only by a launch with a misaligned
# A: here A one byte past a 16-byte boundary under the 16-byte copy width.
# Found by: `& (VEC - 1)` -> `& (VEC - 2)` surviving (1 & 14 == 0).
def test_mutant_mma_traps_on_a_misaligned_operand(host, rng, request):
    from cuda_host.harness import KernelFault
    from dmlq.gpu import device, matmul, qmm

    if request.node.callspec.params["host"] != "host":
        # On a GPU a __trap() ends the process's CUDA context: every later call fails with
        # cudaErrorLaunchFailure (the first H100 session lost the 258 tests after this one).
        pytest.skip("a kernel trap is checked on the host harness only")

    if "mma-128x128" not in matmul.VARIANTS:
        pytest.skip("mma kernel source absent")
    a, b, params, want = _mma_case(rng, 40, 128, 48)
    slack = aligned16(np.zeros(a.nbytes + 16, np.uint8))
    slack[1:1 + a.nbytes] = a.reshape(-1).view(np.uint8)
    names = []

    def misaligned_a(grid, args):
        host.register(slack)
        args[0] = np.uint64(slack.ctypes.data + 1)
        return grid, args

    dev = _ChangedMmaLaunches(host, misaligned_a)
    launch = dev.launch
    dev.launch = lambda source, name, *rest: (names.append(name), launch(source, name, *rest))
    with device.using(dev), pytest.raises(KernelFault, match=r"__trap\(\) at .*matmul_mma"):
        qmm.quantized_matmul(a, *params[:2], b, *params[2:], poisoned(want.shape, np.int8),
                                variant="mma-128x128")
    assert [n for n in names if n.startswith("matmul_mma<")][0].endswith(", 16>")


# ------------------------------------------------------------ avgpool.cu

# avgpool_general walks planes p = (n*C + c)*OD + od by a grid stride, advancing
# (n, c, od) with carries. The grid's z extent is capped at 65535 blocks, so the
# walk only takes a second step past 65535 * blockDim.z planes: with one thread
# per block (GENERAL_BLOCK = 1) that is 65,536 planes, a few seconds on the
# host. OD = 2 and a stride of 65535 put od + stride % OD exactly on OD for
# odd planes, and C odd carries c into n. Found by: `od >= OD` -> `od > OD`
# surviving (no other case has more planes than the grid's z extent).
def test_mutant_avgpool_general_grid_stride_carries(host, rng, monkeypatch):
    from dmlq.gpu import avgpool as ap

    monkeypatch.setattr(ap, "GENERAL_BLOCK", 1)
    x = qvals(rng, (3, 10923, 2, 1, 2), "int8")  # 65,538 planes of 1 x 2 bytes
    xs, os_ = np.float32([0.05]), np.float32([0.03])
    xzp, ozp = np.int8([-3]), np.uint8([128])
    args = ((1, 1, 2), (1, 1, 2), (0, 0, 0), (0, 0, 0), (1, 1, 1), False)
    want = np.empty((3, 10923, 2, 1, 1), np.uint8)
    ref.quantized_avg_pool(x, xs, xzp, os_, ozp, want, *args)
    out = poisoned(want.shape, np.uint8)
    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, *args, variant="general")
    np.testing.assert_array_equal(out, want)
    name, grid, block, _ = host.calls[-1]
    assert name.startswith("avgpool_general") and block == (1, 1, 1) and grid[2] == 65535


# avgpool_general writes through out's element strides (a channels_last out in place,
# dmlq.layout): a 3-D and a 2-D out in channels_last order, against the reference
# written C order; every axis of a different length, so a swapped stride shows.
@pytest.mark.parametrize("shape, perm", [((2, 3, 5, 4, 6), (0, 2, 3, 4, 1)), ((3, 5, 7, 4), (0, 2, 3, 1))])
def test_mutant_avgpool_general_writes_through_out_strides(host, rng, shape, perm):
    from dmlq.gpu import avgpool as ap

    x = qvals(rng, shape, "uint8")
    nd = len(shape) - 2
    xs, os_ = np.float32([0.05]), np.float32([0.03])
    xzp, ozp = np.uint8([3]), np.int8([-2])
    args = ((2,) * nd, (1,) * nd, (1,) * nd, (0,) * nd, (1,) * nd, True)
    out_shape = tuple(shape[:2]) + tuple(s + 1 - 2 + 1 for s in shape[2:])
    want = np.empty(out_shape, np.int8)
    ref.quantized_avg_pool(x, xs, xzp, os_, ozp, want, *args)
    inverse = tuple(int(i) for i in np.argsort(perm))
    out = poisoned(tuple(out_shape[i] for i in perm), np.int8).transpose(inverse)
    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, *args, variant="general")
    np.testing.assert_array_equal(out, want)
    assert "temporary" not in str(ap.plan_quantized_avg_pool(x, xs, xzp, os_, ozp, out, *args, variant="general"))


# avgpool_global walks planes by a grid stride too, and only a block that takes
# a second plane reuses warp_sums: the launcher's grid covers every plane unless
# planes pass GLOBAL_MAX_GRID (INT_MAX). A grid of 2 blocks makes each block
# walk several planes. Found by: global_block's `__syncthreads()` before
# warp_sums is reused, dropped, surviving.
@pytest.mark.parametrize("variant", ["global_block", "global_warp"])
def test_mutant_avgpool_global_blocks_walk_several_planes(host, rng, monkeypatch, variant):
    from dmlq.gpu import avgpool as ap

    monkeypatch.setattr(ap, "GLOBAL_MAX_GRID", 2)
    if hasattr(host, "schedules"):  # the host harness: every launch under all four schedules
        monkeypatch.setattr(host, "schedules", (0, 1, 2, 3))
    # 15 planes of 4970 taps: more than 256 threads x 16 bytes, so every warp
    # of global_block holds a partial sum in warp_sums; planes of very
    # different means, so a partial sum of the wrong plane shows.
    base = (np.arange(15) * 17 % 256).reshape(3, 5, 1, 1)
    x = (base + rng.integers(0, 3, (3, 5, 70, 71))).astype(np.uint8)
    xs, os_ = np.float32([0.05, 0.1, 0.2, 0.3, 0.4]) / 10, np.float32([0.03])
    xzp, ozp = np.uint8([7]), np.int8([-2])
    args = ((70, 71), (1, 1), (0, 0), (0, 0), (1, 1), False)
    want = np.empty((3, 5, 1, 1), np.int8)
    ref.quantized_avg_pool(x, xs, xzp, os_, ozp, want, *args)
    out = poisoned(want.shape, np.int8)
    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, *args, variant=variant)
    np.testing.assert_array_equal(out, want)
    name, grid, _, _ = host.calls[-1]
    assert name.startswith("avgpool_global") and grid[0] == 2
