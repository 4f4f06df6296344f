"""Python work per call on a repeated call, up to just before the launch (CPU, no GPU needed).

The backend function each public function ends in (dmlq.cpu's, the host backend,
on NumPy inputs) is replaced by a stub that returns at once, so what is timed is exactly
dmlq's own Python: operand normalization, the plan-cache lookup, operand
conversion, output allocation and the dispatch. The target (issue 14) is the cost
of a CuPy ElementwiseKernel call: at most 10 us per call. It is written into each
result's extra_info (``target_s`` beside ``median_s``) and judged by
bench/report.py on the JSON, never asserted here: a shared machine's timing only
measures the neighbours.

    python -m pytest bench/test_bench_plan.py --benchmark-columns=median,min,rounds
"""
import importlib

import numpy as np
import pytest

import dmlq
from dmlq import dispatch

S = importlib.import_module("cupy_stand_in")  # tests/cupy_stand_in, on sys.path via bench/conftest.py

TARGET_S = 10e-6
f32, u8, i8 = np.float32, np.uint8, np.int8

pytestmark = [pytest.mark.cpu, pytest.mark.benchmark(group="plan-overhead", disable_gc=True, min_rounds=2000)]

CALLS = {
    "quantize_linear": lambda a: dmlq.quantize_linear(a["x"], 0.02, 128),
    "quantize_linear-arrays": lambda a: dmlq.quantize_linear(a["x"], a["s"], a["z"]),
    "dequantize_linear": lambda a: dmlq.dequantize_linear(a["q"], 0.02, 128),
    "quantized_add": lambda a: dmlq.quantized_add(a["q"], 0.02, 128, a["q"], 0.03, 120, 0.05, 128),
    "quantized_matmul": lambda a: dmlq.quantized_matmul(a["m"], 0.02, 3, a["w"], a["ws"], None, 0.5, i8(0)),
    "quantized_avg_pool": lambda a: dmlq.quantized_avg_pool(a["img"], 0.1, 3, 0.1, 3, 2, strides=2),
}


@pytest.fixture
def stubbed(monkeypatch):
    """The host backend's five functions as no-ops: the timed span ends where the launch begins."""
    def stub(*args):
        return None

    for name in ("quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul",
                 "quantized_avg_pool"):
        monkeypatch.setattr(dispatch.backend(dispatch.HOST), name, stub)
    return _inputs(np.random.default_rng(0))


def _inputs(rng):
    return dict(x=rng.standard_normal(1024).astype(f32), s=np.full((1,), 0.02, f32), z=np.full((1,), 128, u8),
                q=rng.integers(0, 256, 1024, dtype=u8), m=rng.integers(0, 256, (16, 64), dtype=u8),
                w=rng.integers(-128, 128, (64, 32), dtype=i8), ws=np.full((32,), 0.01, f32),
                img=rng.integers(0, 256, (1, 4, 8, 8), dtype=u8))


@pytest.mark.parametrize("call", sorted(CALLS))
def test_repeated_call_overhead(benchmark, stubbed, call):
    fn = CALLS[call]
    fn(stubbed)  # the first call plans; every timed call reuses the plan
    benchmark.extra_info.update(impl="dmlq:plan-cached", target_s=TARGET_S)
    benchmark(fn, stubbed)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["median_s"] = benchmark.stats.stats.median


# The GPU backend's own Python on a repeated call: planning (variant, grid, block),
# argument packing and the launch call, on the cupy stand-in with launches that
# return once CuPy's packing and checks are done. Added to the API's share above,
# this is dmlq's whole Python cost of a GPU call; no target is asserted for it alone.
@pytest.fixture
def launchless():
    """``import cupy`` gives tests/cupy_stand_in, whose launches do nothing."""
    with S.installed(run_kernels=False) as cp:
        yield cp


def _backend_calls():
    from dmlq.gpu import ops

    return {
        "quantize_linear": (ops.quantize_linear, ("x", f32(0.02), u8(128)), ("xq",)),
        "dequantize_linear": (ops.dequantize_linear, ("q", f32(0.02), u8(128)), ("qf",)),
        "quantized_add": (ops.quantized_add, ("q", f32(0.02), u8(128), "q", f32(0.03), u8(120), f32(0.05),
                                              u8(128)), ("qq",)),
        "quantized_matmul": (ops.quantized_matmul, ("m", "one", "zp", "w", "ws", None, "one", None), ("mo",)),
        "quantized_avg_pool": (ops.quantized_avg_pool, ("img", "one", "zp", "one", "zp"),
                               ("po", (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False)),
    }


def _device_inputs(cp):
    arrays = {k: cp.asarray(v) for k, v in _inputs(np.random.default_rng(0)).items()}
    arrays.update(one=cp.full((1,), 0.02, f32), zp=cp.full((1,), 3, u8))
    return arrays


@pytest.mark.parametrize("call", sorted(CALLS.keys() - {"quantize_linear-arrays"}))
def test_gpu_backend_python_per_call(benchmark, launchless, call):
    cp = launchless
    arrays = _device_inputs(cp)
    arrays.update(xq=cp.empty(1024, u8), qf=cp.empty(1024, f32), qq=cp.empty(1024, u8),
                  mo=cp.empty((16, 32), i8), po=cp.empty((1, 4, 4, 4), u8))
    fn, args, rest = _backend_calls()[call]
    resolve = lambda v: arrays[v] if isinstance(v, str) else v  # noqa: E731
    args = [resolve(v) for v in args] + [resolve(v) for v in rest]
    fn(*args)
    benchmark.extra_info.update(impl="dmlq:gpu-backend-python")
    benchmark(fn, *args)
    if benchmark.stats is not None:
        benchmark.extra_info["median_s"] = benchmark.stats.stats.median


# The whole GPU call: the public function on CuPy arrays of the stand-in, through
# the per-signature plan, its runner and the launch call (CuPy's packing and
# checks included, the kernel not run). The stand-in's own costs (its arrays,
# views and packing are Python, CuPy's are C) are in it.
@pytest.mark.parametrize("call", sorted(CALLS))
def test_gpu_call_python(benchmark, launchless, call):
    arrays = _device_inputs(launchless)
    fn = CALLS[call]
    fn(arrays)
    benchmark.extra_info.update(impl="dmlq:gpu-call-python")
    benchmark(fn, arrays)
    if benchmark.stats is not None:  # None under --benchmark-disable; no target: the stand-in's Python is in it
        benchmark.extra_info["median_s"] = benchmark.stats.stats.median


# The same repeated calls on torch CPU tensors (tensors viewing the same NumPy inputs), the host
# backend stubbed as above: dmlq's Python with the torch adapter's (dmlq.frameworks, dmlq.torch:
# the device and autograd checks, NumPy views of the tensors, the result wrapped as a tensor).
# Less the matching test_repeated_call_overhead row, that is what a torch user pays over NumPy.
@pytest.mark.parametrize("call", sorted(CALLS))
def test_torch_cpu_call_overhead(benchmark, stubbed, call):
    torch = pytest.importorskip("torch")
    import dmlq.torch  # noqa: F401  (the custom ops registered, as a torch user has them)

    tensors = {k: torch.from_numpy(v) for k, v in stubbed.items()}
    fn = CALLS[call]
    assert isinstance(fn(tensors), torch.Tensor)  # the first call plans; every timed call reuses the plan
    benchmark.extra_info.update(impl="dmlq:torch-cpu-plan-cached", target_s=TARGET_S)
    benchmark(fn, tensors)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["median_s"] = benchmark.stats.stats.median
