"""The public functions' GPU path, end to end on the host harness: operands that
dispatch takes for GPU arrays (tests/gpu_stand_in.py), the per-signature plan
and its runners, device constants for scalar scales, dispatch and the kernels
compiled for the CPU. Every result is compared bit for bit with the same call
on NumPy arrays (dmlq.reference); outputs start poisoned."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import calls
from dmlq.dispatch import to_gpu_array
from dmlq.gpu import plan as plan_module

import gpu_stand_in as S

f32, f16, u8, i8 = np.float32, np.float16, np.uint8, np.int8


@pytest.fixture
def gpu(monkeypatch, host_device):
    host_device.forget()
    calls.clear_plan_cache()
    plan_module.Memo.clear_all()
    yield S.install(monkeypatch, host_device)
    calls.clear_plan_cache()


def _on_device(args):
    return [S.to_device(a) if isinstance(a, np.ndarray) else a for a in args]


def same(fn, *args, **kwargs):
    """fn on stand-ins equals fn on NumPy arrays (dtype, shape, every byte)."""
    want = fn(*args, **kwargs)
    got = fn(*_on_device(args), **kwargs)
    assert type(got) is S.StandIn
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8))
    return got


def _runners():
    """(plans, runners) the API holds for GPU signatures."""
    plans = [p for p in calls._PLANS.values() if p.runners is not None]
    return len(plans), sum(isinstance(r, plan_module.Runner)
                           for p in plans for _, table in p.runners.values() for r in table.values())


def test_every_operator_through_the_api(gpu, rng):
    x = rng.standard_normal((3, 5, 7)).astype(f32) * 40
    q = rng.integers(0, 256, (3, 5, 7), dtype=u8)
    same(dmlq.quantize_linear, x, 0.25, 3)
    same(dmlq.quantize_linear, x.astype(f16), np.float16(0.5), np.int8(-2))
    same(dmlq.quantize_linear, x, rng.uniform(0.1, 1, (1, 5, 1)).astype(f32), None, dtype=i8)
    same(dmlq.dequantize_linear, q, 0.1, 7)
    same(dmlq.dequantize_linear, q.astype(np.int16), rng.uniform(0.1, 1, (7,)).astype(f16), None)
    same(dmlq.quantized_add, q, 0.02, 128, q[:, :1], 0.03, 120, 0.05, 128)
    a = rng.integers(0, 256, (2, 17, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 9), dtype=i8)
    same(dmlq.quantized_matmul, a, 0.02, 3, b, rng.uniform(0.01, 0.1, (9,)).astype(f32), None, 0.5, i8(1))
    same(dmlq.quantized_matmul, a, rng.uniform(0.01, 0.1, (17, 1)).astype(f32), np.full((17, 1), 5, u8),
         b, 0.04, i8(-3), 0.5, u8(7))
    # every scale and zero point per axis, as 2-D (prepared into the kernels' vectors)
    same(dmlq.quantized_matmul, a, 0.02, 3, b, rng.uniform(0.01, 0.1, (1, 9)).astype(f32),
         rng.integers(-128, 128, (1, 9), dtype=i8), rng.uniform(0.1, 1, (17, 1)).astype(f32),
         rng.integers(-128, 128, (17, 1), dtype=i8))
    # K = 0: every sum is zero, the zero points of a and b drop out
    same(dmlq.quantized_matmul, np.empty((4, 0), u8), 0.02, 3, np.empty((0, 6), i8), 0.5, i8(-2), 0.25, i8(1))
    img = rng.integers(0, 256, (2, 3, 9, 8), dtype=u8)
    same(dmlq.quantized_avg_pool, img, 0.1, 3, 0.2, 5, 3, strides=2, start_padding=1)
    same(dmlq.quantized_avg_pool, img, rng.uniform(0.1, 1, (3,)).astype(f32), None, 0.2, None, (2, 3),
         include_padding=True, ceil_mode=True, start_padding=(1, 0), end_padding=(1, 2))


def test_scalar_scales_reach_matmul_and_pooling_without_a_synchronize(gpu, rng):
    a = S.to_device(rng.integers(0, 256, (16, 64), dtype=u8))
    b = S.to_device(rng.integers(-128, 128, (64, 32), dtype=i8))
    img = S.to_device(rng.integers(0, 256, (1, 2, 4, 4), dtype=u8))
    for scale in (0.1, 0.2, 0.3):  # a scale that changes per call: a new signature each time
        dmlq.quantized_matmul(a, scale, 3, b, 0.5, None, 0.5, i8(0))
        dmlq.quantized_avg_pool(img, scale, 3, 0.2, 5, 2)
    assert S.Xp.uploads > 0 and S.Xp.syncs == 0  # uploaded, and nothing waited for the GPU


def test_repeated_calls_reuse_one_runner(gpu, rng, host_device):
    a = S.to_device(rng.integers(0, 256, (16, 64), dtype=u8))
    b = S.to_device(rng.integers(-128, 128, (64, 32), dtype=i8))
    ws = S.to_device(rng.uniform(0.01, 0.1, (32,)).astype(f32))
    x = S.to_device(rng.standard_normal(1000).astype(f32))
    for _ in range(3):
        dmlq.quantized_matmul(a, 0.02, 3, b, ws, None, 0.5, i8(0))
        dmlq.quantize_linear(x, 0.02, 128)
    assert _runners() == (2, 2)
    assert S.Xp.uploads == 3  # the matmul's a_scale, a_zero_point and out_scale: once for three calls
    names = [c[0] for c in host_device.calls]
    assert len(names) == 9 and names[:3] == names[3:6] == names[6:]  # column sums, matmul, quantize
    # another alignment is another runner (the vector head and cp.async width depend on it)
    dmlq.quantize_linear(S.to_device(np.zeros(1001, f32))[1:], 0.02, 128)
    assert _runners() == (2, 3)


def test_runner_results_follow_each_call_values(gpu, rng):
    """A reused runner reads each call's arrays, not the first call's."""
    for _ in range(3):
        a = rng.integers(0, 256, (5, 33), dtype=u8)
        b = rng.integers(-128, 128, (33, 6), dtype=i8)
        s = rng.uniform(0.01, 0.1, (6,)).astype(f32)
        same(dmlq.quantized_matmul, a, 0.02, 3, b, s, None, 0.5, i8(0))
        img = rng.integers(0, 256, (1, 2, 5, 5), dtype=u8)
        same(dmlq.quantized_avg_pool, img, 0.1, 3, 0.2, 5, 2)
        q = rng.integers(-128, 128, (4, 8), dtype=i8)
        same(dmlq.dequantize_linear, q, 0.125, -3)
    assert _runners()[1] == 3


def test_scalar_values_are_part_of_the_signature(gpu, rng):
    """Host scalars are baked into a runner's arguments: other values, other runners."""
    x = rng.standard_normal(300).astype(f32) * 10
    for scale, zp in ((0.5, 3), (0.25, 3), (0.5, -4), (-0.0, 0)):
        same(dmlq.quantize_linear, x, scale, zp, dtype=i8)
    assert _runners() == (4, 4)


def test_user_out_strided_and_overlapping(gpu, rng):
    q = rng.integers(0, 256, (6, 10), dtype=u8)
    want = dmlq.quantized_add(q, 0.02, 128, q, 0.03, 120, 0.05, 100)
    dq = S.to_device(q)
    out = S.Xp.empty((10, 6), u8).T  # strided out
    out[...] = 0xA5
    assert dmlq.quantized_add(dq, 0.02, 128, dq, 0.03, 120, 0.05, 100, out=out) is out
    np.testing.assert_array_equal(np.asarray(out), want)
    # out is an input: computed through a temporary, with a runner for its C layout
    assert dmlq.quantized_add(dq, 0.02, 128, dq, 0.03, 120, 0.05, 100, out=dq) is dq
    np.testing.assert_array_equal(np.asarray(dq), want)
    img = rng.integers(0, 256, (1, 2, 6, 6), dtype=u8)
    want = dmlq.quantized_avg_pool(img, 0.1, 3, 0.1, 3, 2, strides=2)
    out = S.Xp.empty((1, 2, 3, 6), u8)[..., ::2]
    dmlq.quantized_avg_pool(S.to_device(img), 0.1, 3, 0.1, 3, 2, strides=2, out=out)
    np.testing.assert_array_equal(np.asarray(out), want)


def test_kernel_plan_of_a_gpu_call(gpu, rng):
    p = dmlq.kernel_plan(dmlq.quantize_linear, S.to_device(np.ones(4096, f32)), 0.5, 3)
    assert (p.op, p.variant) == ("quantize_linear", "contig")
    assert _runners() == (1, 0)  # planned, not run


def test_strided_per_axis_scales(gpu, rng):
    """Per-channel and per-column vectors that are views with a stride: the runner
    copies them to contiguous vectors on every call (its prep), not only the first."""
    img = rng.integers(0, 256, (2, 3, 6, 5), dtype=u8)
    for _ in range(2):
        xs = rng.uniform(0.05, 1, 6).astype(f32)
        zs = rng.integers(0, 256, 6, dtype=u8)
        want = dmlq.quantized_avg_pool(img, xs[::2], zs[1::2], 0.3, 7, 2)
        dxs, dzs = S.to_device(xs), S.to_device(zs)
        got = dmlq.quantized_avg_pool(S.to_device(img), dxs[::2], dzs[1::2], 0.3, 7, 2)
        np.testing.assert_array_equal(np.asarray(got), want)
        a = rng.integers(0, 256, (4, 19), dtype=u8)
        b = rng.integers(-128, 128, (19, 5), dtype=i8)
        bs = rng.uniform(0.01, 0.1, 10).astype(f32)
        want = dmlq.quantized_matmul(a, 0.02, 3, b, bs[::2], None, 0.5, i8(0))
        got = dmlq.quantized_matmul(S.to_device(a), 0.02, 3, S.to_device(b), S.to_device(bs)[::2], None, 0.5,
                                    i8(0))
        np.testing.assert_array_equal(np.asarray(got), want)


class _TwoGpus:
    """Two identical devices over the host harness: kernels looked up on one may
    only launch there (as a CUfunction belongs to one device's context)."""

    def __init__(self, host):
        self.host, self.current, self.lookups = host, 0, []

    def __getattr__(self, name):  # xp, ptr, is_array, resident_blocks, launch
        return getattr(self.host, name)

    def info(self):
        return self.host.info()._replace(ordinal=self.current)

    def kernel(self, source, name, shared_mem=0):
        owner = self.current
        self.lookups.append(owner)

        def k(grid, block, args, shared_mem=0):
            assert self.current == owner, f"{name}: looked up on device {owner}, launched on {self.current}"
            self.host.launch(source, name, grid, block, args, shared_mem)
        return k


def test_identical_devices_get_their_own_runners(gpu, rng, host_device, monkeypatch):
    two = _TwoGpus(host_device)
    S.install(monkeypatch, two)
    monkeypatch.setattr(calls.dispatch, "current_device", lambda: two.current)
    monkeypatch.setattr(calls.dispatch, "device_id_of", lambda arr: two.current)  # made on the current one
    a = rng.integers(0, 256, (5, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 9), dtype=i8)
    x = rng.standard_normal(100).astype(f32)
    for dev in (0, 1, 0):
        two.current = dev
        same(dmlq.quantized_matmul, a, 0.02, 3, b, 0.04, None, 0.5, i8(1))
        same(dmlq.quantize_linear, x, 0.02, 128)
    assert sorted(set(two.lookups)) == [0, 1]
    assert S.Xp.uploads == 2 * 5  # matmul's five scalar constants, once per device


def test_an_array_on_another_device_is_refused(gpu, rng, monkeypatch):
    """The fast path takes a CuPy array as it is only when it lives on the current
    device; one elsewhere gets to_gpu_array's error, as an operand or as out."""
    import sys
    import types

    real_cupy = types.SimpleNamespace(ndarray=S.StandIn, cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setitem(sys.modules, "cupy", real_cupy)
    monkeypatch.setattr(calls.dispatch, "to_gpu_array", to_gpu_array)
    here = S.to_device(rng.standard_normal(10).astype(f32))
    there = S.to_device(rng.standard_normal(10).astype(f32))
    monkeypatch.setattr(calls.dispatch, "device_id_of", lambda arr: 1 if arr is there else 0)
    dmlq.quantize_linear(here, 0.1)  # the signature is planned: the next call takes the fast path
    with pytest.raises(ValueError, match=r"quantize_linear: x is on device 1 but the current device is 0; "
                                         r"use `with cupy.cuda.Device\(1\):`"):
        dmlq.quantize_linear(there, 0.1)
    there_out = S.to_device(np.zeros(10, u8))
    monkeypatch.setattr(calls.dispatch, "device_id_of", lambda arr: 1 if arr is there_out else 0)
    with pytest.raises(ValueError, match="quantized_add: out is on device 1"):
        dmlq.quantized_add(S.to_device(np.zeros(10, u8)), 0.1, 0, here.astype(u8).view(S.StandIn), 0.1, 0,
                           0.1, 0, out=there_out)


@pytest.mark.parametrize("which", ["scale", "zero_point", "both"])
def test_per_axis_parameters_on_reversed_axes(gpu, rng, which):
    """An out walked backwards (negative strides) moves every operand's origin,
    per-axis scales and zero points included."""
    x = (rng.standard_normal((6, 9)) * 30).astype(f32)
    q = rng.integers(0, 256, (6, 9), dtype=u8)
    s = rng.uniform(0.1, 1, (1, 9)).astype(f32)
    z = rng.integers(0, 256, (1, 9), dtype=u8)
    for view in (lambda a: a[:, ::-1], lambda a: a[::-1, ::-2]):
        for fn, data, dt in ((dmlq.quantize_linear, x, u8), (dmlq.dequantize_linear, q, f32)):
            args = (data, s if which != "zero_point" else 0.25, z if which != "scale" else u8(9))
            want = fn(*(view(a) if isinstance(a, np.ndarray) else a for a in args))
            out = view(S.to_device(np.full((6, 9 * np.dtype(dt).itemsize), 0xA5, np.uint8).view(dt)))
            fn(*(view(S.to_device(a)) if isinstance(a, np.ndarray) else a for a in args), out=out)
            np.testing.assert_array_equal(np.ascontiguousarray(out).view(np.uint8), want.view(np.uint8))


def test_sums_beyond_the_workspace_get_their_own_temporary(gpu, rng, monkeypatch):
    """Row and column sums larger than the workspace are allocated per call."""
    from dmlq.gpu import device

    monkeypatch.setattr(device, "WORKSPACE_MAX", 0)
    a = rng.integers(0, 256, (3, 11, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 13), dtype=i8)
    for _ in range(2):
        same(dmlq.quantized_matmul, a, 0.02, 3, b, 0.04, i8(-5), 0.5, i8(1))
