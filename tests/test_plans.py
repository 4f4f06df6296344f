"""The kernel-selection interface (dmlq.gpu.plan): plans made without a GPU on a
nominal device, the plan a launcher executes equals the plan it prints, and
dmlq.kernel_plan on the public functions."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import api, checks, dispatch
from dmlq.gpu import avgpool, device, elementwise, matmul, qmm
from dmlq.gpu.plan import Launch, Plan, recording

f32, u8, i8 = np.float32, np.uint8, np.int8


@pytest.fixture
def nominal():
    with device.using(device.NominalDevice()) as dev:
        yield dev


def _kernels(plan):
    return [(launch.role, launch.kernel) for launch in plan.launches]


# ------------------------------------------------------------------ nominal plans

def test_nominal_device_only_plans(nominal):
    assert device.current() is nominal
    with pytest.raises(RuntimeError, match="only plans"):
        nominal.launch("elementwise.cu", "quantize_contig<float, int8>", (1,), (256,), ())
    # threads: 2048 / 256 = 8; shared memory: 228 KiB / (64 KiB + 1 KiB) = 3
    assert nominal.resident_blocks("x", "y", 256, 0) == 8
    assert nominal.resident_blocks("x", "y", 256, 65536) == 3


def test_element_wise_plans(nominal):
    n = 1 << 20
    x, out = np.empty(n, f32), np.empty(n, u8)
    p = elementwise.plan_quantize_linear(x, np.float32(0.5), None, out)
    # 16 uint8 outputs per thread, 256 threads: n / 4096 = 256 blocks (below 132 SMs x 8)
    assert (p.op, p.variant) == ("quantize_linear", "contig")
    assert p.launches == (Launch("elementwise.cu", "quantize_contig<float, uint8>", (256,), (256,)),)
    big = np.empty(1 << 30, u8)
    p = elementwise.plan_quantize_linear(np.empty(1 << 30, f32), np.float32(0.5), None, big)
    assert p.launches[0].grid == (132 * 8,)  # capped at one resident wave
    # a per-column scale: the axis kernel; a transposed input: strided
    m = np.empty((64, 128), f32)
    p = elementwise.plan_quantize_linear(m, np.ones((1, 128), f32), None, np.empty((64, 128), i8))
    assert _kernels(p) == [("main", "quantize_axis<float, int8>")]
    p = elementwise.plan_dequantize_linear(np.empty((128, 64), np.int16).T, np.float16(1), None,
                                           np.empty((64, 128), np.float16))
    assert _kernels(p) == [("main", "dequantize_strided<short, float16, false>")]


def test_add_table_plan(nominal):
    n = elementwise.TABLE_MIN_ELEMENTS
    a, out = np.empty(n, u8), np.empty(n, i8)
    one = np.float32(1)
    p = elementwise.plan_quantized_add(a, one, None, a, one, None, one, None, out)
    assert p.variant == "table"
    build, main = p.launches
    assert (build.role, build.kernel, build.grid, build.block) == \
        ("table build", "add_table_build<uint8, uint8, int8>", (256,), (256,))
    # 64 KiB of shared memory: 3 blocks per SM on the nominal H100
    assert (main.kernel, main.shared_mem, main.grid) == ("add_table<uint8, uint8, int8>", 65536, (132 * 3,))
    p = elementwise.plan_quantized_add(a[:n - 1], one, None, a[:n - 1], one, None, one, None, out[:n - 1])
    assert p.variant == "contig"


def test_out_overlapping_an_input_is_planned_through_a_temporary(nominal):
    buf = np.empty(1000, u8)
    p = elementwise.plan_quantized_add(buf, f32(1), None, buf, f32(1), None, f32(1), None, buf)
    assert any("temporary" in note for note in p.notes)


def _mm(m, k, n, **kw):
    a = kw.pop("a", None)
    b = kw.pop("b", None)
    a = np.empty((m, k), u8) if a is None else a
    b = np.empty((k, n), i8) if b is None else b
    one = np.ones(1, f32)
    zp_a = kw.pop("a_zp", np.zeros(1, u8))
    zp_b = kw.pop("b_zp", None)
    return qmm.plan_quantized_matmul(a, one, zp_a, b, one, zp_b, one, None,
                                        np.empty(a.shape[:-2] + (m, n), i8), **kw)


def _main(plan):
    (main,) = [launch for launch in plan.launches if launch.role == "main"]
    return main


def test_matmul_plans(nominal):
    p = _mm(4096, 4096, 4096)
    assert p.variant == "mma-128x128" and p.notes == ()
    # 32 blocks of columns fill few of 132 SMs: K in 8 splits of 512 rows (grid z), then added
    assert _kernels(p) == [("column sums of b, for a's zero point", "matmul_col_sums<int8>"),
                           ("the column sums' splits added", "matmul_sums_combine<256>"),
                           ("main", "matmul_mma<uint8, int8, int8, 128, 128, 64, 4, 16>")]
    assert p.launches[0].grid == (32, 1, 8) and p.launches[1].grid == (16,)
    # 33 matrices of b: 1,056 blocks of columns, one pass over K
    q = _mm(64, 4096, 4096, a=np.empty((33, 64, 4096), u8), b=np.empty((33, 4096, 4096), i8))
    assert q.launches[0].grid == (32, 33, 1) and "matmul_sums_combine<256>" not in [k for _, k in _kernels(q)]
    main = p.launches[2]
    assert (main.grid, main.block, main.shared_mem) == ((32, 32, 1), (128,), 4 * (128 * 64 + 64 * 128))
    # one LLM decode-sized product: 32 tiles on 264 block slots -> split-K
    p = _mm(16, 4096, 4096, a_zp=None)
    assert p.notes == ("split-K: 8 splits of 512",)
    assert [r for r, _ in _kernels(p)] == ["main", "split-K sum and epilogue"]
    assert p.launches[0].grid == (32, 8, 1)
    # K a multiple of 4 but not 16: 4-byte cp.async; K odd: operands padded to 16-byte rows
    assert _main(_mm(1000, 1000, 1000)).kernel.endswith(", 4>")
    p = _mm(512, 4095, 1001)
    assert "a copied into rows padded to 16 bytes" in p.notes and "b copied into rows padded to 16 bytes" in p.notes
    assert _main(p).kernel.endswith(", 16>")
    # a transposed b (x @ w.T) held on 16 bytes is read K-major, its column sums the row sums of w;
    # one whose columns are not 16 bytes apart is copied first; K > 32768: the wide dp4a kernel
    p = _mm(256, 256, 256, b=np.empty((256, 256), i8).T)
    assert p.notes == ("b: K-major (x @ w.T), 16-byte copies of its columns",)
    assert _kernels(p) == [("column sums of b (row sums of its K-major rows), for a's zero point",
                            "matmul_row_sums<int8>"), ("main", "matmul_mma<uint8, kmajor_int8, int8, 128, 128, 64, 4, 16>")]
    p = _mm(256, 256, 256, b=np.empty((256, 260), i8)[:, :256].T)
    assert "b copied to a contiguous array" in p.notes
    p = _mm(8, 40000, 64)
    assert p.variant == "dp4a-wide" and _kernels(p) == [("main", "matmul_dp4a_wide<uint8, int8, int8, 64, 64, 32, 8, 4>")]
    # M <= 16: the weight-streaming kernel, split along K (b's bytes once, one column block here)
    p = _mm(1, 4096, 4096)
    assert p.variant == "stream-m1" and _kernels(p) == [("main", "matmul_stream_packed<uint8, int8, int8, 1>"),
                                                        ("split-K sum and requantize", "matmul_stream_packed_finish<int8>")]
    # b's zero point: the row-sum pre-pass; K = 0: the dp4a epilogue alone, no pre-pass
    assert _kernels(_mm(64, 64, 64, b_zp=np.zeros(1, i8)))[0][1] == "matmul_row_sums<uint8>"
    p = _mm(20, 0, 4, b_zp=np.zeros(1, i8))
    assert p.variant == "dp4a-32x32" and [r for r, _ in _kernels(p)] == ["main"]


def test_matmul_batches_beyond_the_grid_are_folded_when_printed(nominal, monkeypatch):
    monkeypatch.setattr(matmul, "MAX_GRID_YZ", 4)
    a = np.empty((10, 32, 32), u8)
    p = _mm(32, 32, 32, a=a, a_zp=None)
    assert len(p.launches) == 3  # 4 + 4 + 2 batches
    text = str(p)
    assert "grid 1x1x4  block 64  x2" in text and "grid 1x1x2  block 64" in text


def test_avgpool_plans(nominal):
    img = np.empty((2, 8, 30, 30), u8)
    one, zp = np.ones(1, f32), np.zeros(1, u8)

    def plan(window, strides, pad=0, dil=1, out_hw=None, variant=None):
        oh = out_hw or (30 + 2 * pad - (window - 1) * dil - 1) // strides + 1
        return avgpool.plan_quantized_avg_pool(img, one, zp, one, zp, np.empty((2, 8, oh, oh), u8), (window,) * 2,
                                               (strides,) * 2, (pad,) * 2, (pad,) * 2, (dil,) * 2, False,
                                               variant=variant)

    p = plan(3, 1, pad=1)  # 3x3 at stride 1: each input row summed once per strip
    assert p.variant == "strip_k3s1" and p.launches[0].kernel == "avgpool_strip<uint8, uint8, 3, 3, 16>"
    assert p.launches[0].shared_mem == 9 * 255 + 1 and p.launches[0].block == (1, 256)
    assert any(n.startswith("strips of ") for n in p.notes), p.notes
    p = plan(3, 1, pad=1, variant="tile_k3s1")
    assert p.variant == "tile_k3s1" and p.launches[0].shared_mem == 9 * 255 + 1
    assert p.launches[0].kernel == "avgpool_tile<uint8, uint8, 3, 1, 16>"
    assert plan(2, 2).variant == "tile_k2s2"
    assert plan(30, 1).variant in ("global_warp", "global_block")
    p = plan(3, 2, pad=2, dil=2)
    assert p.variant == "general" and p.launches[0].block[0] * p.launches[0].block[1] * p.launches[0].block[2] <= 256


def test_plan_text():
    p = Plan("quantized_add", "contig", (Launch("elementwise.cu", "add_contig<int8, int8, int8>", (3,), (256,)),),
             ("out written through a contiguous temporary",))
    assert str(p) == ("quantized_add: contig (out written through a contiguous temporary)\n"
                      "  add_contig<int8, int8, int8>  grid 3  block 256")
    assert str(Plan("quantize_linear", "empty")) == "quantize_linear: empty, nothing launched"


# ------------------------------------------------------------------ printed == executed

def _run_and_plan(fn, plan_fn, args, **kw):
    with recording() as ran:
        fn(*args, **kw)
    return ran, plan_fn(*args, **kw)


def test_the_executed_plan_is_the_planned_one(host, rng):
    """The launcher runs exactly the plan its plan_* function returns, launch for launch."""
    q = rng.integers(0, 256, (67, 45), dtype=u8)
    cases = [
        (elementwise.quantize_linear, elementwise.plan_quantize_linear,
         (rng.standard_normal((67, 45)).astype(f32), np.float32(0.1), None, np.empty((67, 45), u8))),
        (elementwise.dequantize_linear, elementwise.plan_dequantize_linear,
         (q.T, np.float32(0.5), np.uint8(3), np.empty((45, 67), f32))),
        (elementwise.quantized_add, elementwise.plan_quantized_add,
         (q, f32(1), None, q[0], f32(2), None, f32(3), None, np.empty((67, 45), i8))),
        (qmm.quantized_matmul, qmm.plan_quantized_matmul,
         (q, np.ones(1, f32), np.ones(1, u8), rng.integers(-128, 128, (45, 33), dtype=i8), np.ones(1, f32),
          np.ones(1, i8), np.ones(1, f32), None, np.empty((67, 33), i8))),
        (avgpool.quantized_avg_pool, avgpool.plan_quantized_avg_pool,
         (q.reshape(1, 1, 67, 45), np.ones(1, f32), None, np.ones(1, f32), None, np.empty((1, 1, 65, 43), u8),
          (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), False)),
    ]
    for fn, plan_fn, args in cases:
        ran, planned = _run_and_plan(fn, plan_fn, args)
        assert ran == [planned], fn.__name__
    args = (rng.integers(0, 256, (20, 200), dtype=u8), np.ones(1, f32), np.ones(1, u8),
            rng.integers(-128, 128, (200, 24), dtype=i8), np.ones(1, f32), None, np.ones(1, f32), None,
            np.empty((20, 24), i8))
    ran, planned = _run_and_plan(qmm.quantized_matmul, qmm.plan_quantized_matmul, args,
                                 variant="mma-128x128", splits=2)
    assert ran == [planned] and "split-K: 2 splits of 128" in planned.notes


# ------------------------------------------------------------------ dmlq.kernel_plan

def test_kernel_plan_of_public_calls_without_a_gpu():
    x = np.zeros((256, 256), f32)
    p = dmlq.kernel_plan(dmlq.quantize_linear, x, 0.02, 128)
    assert (p.op, p.variant) == ("quantize_linear", "contig")
    assert p.launches[0].kernel == "quantize_contig<float, uint8>"
    a = np.zeros((64, 64), u8)
    w = np.zeros((64, 64), i8)
    with_zps = dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, 3, w, 0.1, np.int8(-2), 0.2)
    assert [launch.role for launch in with_zps.launches] == [
        "row sums of a, for b's zero point", "column sums of b, for a's zero point", "main"]
    # a zero point of 0 is the omitted one: no sums to correct with, no pre-pass
    for zps in ((0, 0), (np.uint8(0), np.int8(0)), (None, None)):
        p = dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, zps[0], w, 0.1, zps[1], 0.2)
        assert [launch.role for launch in p.launches] == ["main"], zps
    # a zero point held in an array is not read at plan time: its pre-pass stays
    p = dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, np.zeros(1, u8), w, 0.1, None, 0.2)
    assert [launch.role for launch in p.launches] == ["column sums of b, for a's zero point", "main"]
    img = np.zeros((1, 4, 9, 9), u8)
    p = dmlq.kernel_plan(dmlq.quantized_avg_pool, img, 0.1, 3, 0.1, 3, (9, 9))
    assert p.variant.startswith("global_")


def test_kernel_plan_checks_like_a_call():
    with pytest.raises(TypeError, match="kernel_plan: function must be one of"):
        dmlq.kernel_plan(print, 1)
    with pytest.raises(TypeError, match="out= is not taken"):
        dmlq.kernel_plan(dmlq.quantize_linear, np.zeros(3, f32), 0.1, out=np.zeros(3, u8))
    with pytest.raises(TypeError, match="scale is required"):
        dmlq.kernel_plan(dmlq.quantize_linear, np.zeros(3, f32), None)
    # outside kernel_plan the same call computes as usual
    assert dmlq.quantize_linear(np.ones(3, f32), 0.5).tolist() == [2, 2, 2]


def test_zero_points_of_zero_reach_the_backend_as_omitted_and_scalars_stay_on_the_host():
    """What the GPU backend receives for scalar scales and zero points (no GPU needed:
    the conversions are planned from dtypes and values alone)."""
    pytest.importorskip("cupy")
    x = np.zeros((4, 4), f32)
    vals = (x, 0.5, 0)
    b = checks.Builder(api._QUANTIZE, checks.GPU, vals, None)
    plan = api._QUANTIZE.planner(b, None)
    converted = plan.arguments(vals)
    assert converted[2] is None
    assert isinstance(converted[1], np.ndarray) and converted[1].dtype == f32  # by value, not copied
    vals = (x, 0.5, 7)
    b = checks.Builder(api._QUANTIZE, checks.GPU, vals, None)
    plan = api._QUANTIZE.planner(b, None)
    zp = plan.arguments(vals)[2]
    assert isinstance(zp, np.ndarray) and zp.dtype == u8 and int(zp) == 7
    a, w = np.zeros((4, 4), u8), np.zeros((4, 4), i8)
    vals = (a, np.ones((4, 1), f32), np.uint8(0), w, np.ones(4, f32), 0, np.float32(1), None)
    b = checks.Builder(api._MATMUL, checks.GPU, vals, None)
    plan = api._MATMUL.planner(b, None)
    assert [i for i, _ in plan.dynamic] == [0, 1, 3, 4, 7]  # the zero points of 0 are constants: None
    assert plan.template[2] is None and plan.template[5] is None
    assert [i for i, _ in plan.on_device] == [6]  # out_scale: copied once per device
    assert isinstance(plan.on_device[0][1], dispatch.DeviceConstant)


def test_repeated_calls_reuse_their_plan(host, rng, monkeypatch):
    """A repeated call (same shapes, strides, dtypes, alignment) skips planning; another
    alignment plans again (the contig kernel's scalar head depends on it); results stay exact."""
    from dmlq import reference

    elementwise.clear_plan_cache()
    made = []
    real = elementwise.plan_quantize_linear

    def counting(*args, **kw):
        made.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(elementwise, "plan_quantize_linear", counting)
    buf = rng.standard_normal(1001).astype(f32)
    for x in (buf[:1000], buf[:1000], buf[1:]):
        out = np.full(1000, 0xA5, u8)
        elementwise.quantize_linear(x, np.float32(0.01), np.uint8(7), out)
        np.testing.assert_array_equal(out, reference.quantize_linear(x, np.float32(0.01), np.uint8(7),
                                                                     np.empty(1000, u8)))
    assert len(made) == 2
    matmul_plans = []
    real_mm = qmm.plan_quantized_matmul
    monkeypatch.setattr(qmm, "plan_quantized_matmul", lambda *a, **k: matmul_plans.append(1) or real_mm(*a, **k))
    a = rng.integers(0, 256, (5, 7), dtype=u8)
    w = rng.integers(-128, 128, (7, 3), dtype=i8)
    for zp in (np.ones(1, u8), np.ones(1, u8), None):
        out = np.empty((5, 3), i8)
        qmm.quantized_matmul(a, np.ones(1, f32), zp, w, np.ones(1, f32), None, np.ones(1, f32), None, out)
        np.testing.assert_array_equal(out, reference.quantized_matmul(
            a, np.ones(1, f32), zp, w, np.ones(1, f32), None, np.ones(1, f32), None, np.empty((5, 3), i8)))
    assert len(matmul_plans) == 2  # a zero point present or omitted are two plans
    elementwise.clear_plan_cache()


def test_host_scalar_values_are_part_of_a_runner_key(host, rng):
    """Host scalars are packed into a runner's arguments once: another value on the
    same geometry must get another runner, never the first call's values."""
    from dmlq import reference

    elementwise.clear_plan_cache()
    x = rng.standard_normal(777).astype(f32) * 30
    q = rng.integers(0, 256, 777, dtype=u8)
    for scale, zp in ((0.5, 3), (0.25, 3), (0.5, 200)):
        s, z = np.float32(scale), np.uint8(zp)
        out = np.full(777, 0xA5, u8)
        elementwise.quantize_linear(x, s, z, out)
        np.testing.assert_array_equal(out, reference.quantize_linear(x, s, z, np.empty(777, u8)))
        out = np.full(777, np.nan, f32)
        elementwise.dequantize_linear(q, s, z, out)
        np.testing.assert_array_equal(out, reference.dequantize_linear(q, s, z, np.empty(777, f32)))
        params = (s, z, np.float32(0.3), np.uint8(1), np.float32(scale * 3), z)
        out = np.full(777, 0xA5, u8)
        elementwise.quantized_add(q, *params[:2], q[::-1], *params[2:], out)
        np.testing.assert_array_equal(out, reference.quantized_add(q, *params[:2], q[::-1], *params[2:],
                                                                   np.empty(777, u8)))
    elementwise.clear_plan_cache()


def test_cupy_device_facts_carry_the_device_number(monkeypatch):
    """Two identical GPUs differ in their facts (every plan, runner and kernel
    cache key holds them), so nothing looked up on one is launched on the other."""
    import sys
    import types

    class Dev:
        compute_capability = "90"
        attributes = {"MultiProcessorCount": 132}

        def __init__(self, i):
            self.i = i

    cuda = types.SimpleNamespace(
        Device=Dev, runtime=types.SimpleNamespace(
            getDeviceProperties=lambda i: {"name": b"NVIDIA H100", "sharedMemPerBlockOptin": 232448}))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    device._info_for.cache_clear()
    try:
        first, second = device._info_for(0), device._info_for(1)
    finally:
        device._info_for.cache_clear()
    assert first[:4] == second[:4] == ("NVIDIA H100", 90, 132, 232448)
    assert (first.ordinal, second.ordinal) == (0, 1) and first != second


def test_workspace_is_private_to_a_thread_and_a_stream(monkeypatch):
    """Scratch memory is reused only where launches run in order: the same
    thread on the same stream; it grows when a larger size is asked for."""
    import threading

    class Streams(device.NominalDevice):
        handle = 0

        def stream(self):
            return self.handle

    dev = Streams()
    device.release_workspaces()
    with device.using(dev):
        take = device.workspace()
    first = take(100)
    assert take(100) == first == take(4096)  # reused; 4 KiB at least
    grown = take(5000)
    assert grown != first and take(5000) == grown
    dev.handle = 7
    on_other_stream = take(100)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(take(100)))
    worker.start()
    worker.join()
    held = {ptr for ptr in (grown, on_other_stream, seen[0])}  # three buffers alive at once
    assert len(held) == 3 and device.workspace_count() == 2  # (the worker's went with it)
    assert all(a % 16 == 0 for a in held)
    dev.handle = 0
    assert take(100) == grown
    for handle in range(100, 100 + device.WORKSPACE_STREAMS):  # a stream per task: the last few kept
        dev.handle = handle
        take(100)
    assert [key[-1] for key in device._table()] == list(range(100, 100 + device.WORKSPACE_STREAMS))
    dev.handle = 0  # the least recently used went first: stream 0's, then 100's
    take(100)
    assert [key[-1] for key in device._table()] == list(range(101, 100 + device.WORKSPACE_STREAMS)) + [0]
    device.release_workspaces()
    assert device.workspace_count() == 0
