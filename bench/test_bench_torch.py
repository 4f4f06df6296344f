"""Python overhead of a dmlq call on torch CUDA tensors (GPU only), in group
``overhead-torch/float32->uint8/1024``: the public function on torch tensors (the
adapter: device and stream lookup, CuPy views through the CUDA array interface,
the output from torch's caching allocator), the same through ``torch.ops.dmlq``
(the dispatcher too), beside the public function on CuPy arrays and torch's own
``torch.quantize_per_tensor``, all on a tiny 1024-element quantize on torch's
current stream. Judged in the report, never asserted (bench/report.py)."""
import numpy as np
import pytest

from bench.timing import gpu_timer, plan_iterations, result_info

pytestmark = pytest.mark.benchmark(group="overhead-torch/float32->uint8/1024", timer=gpu_timer, disable_gc=True)
N = 1024
IMPLS = ("dmlq:torch-tensors", "dmlq:torch.ops", "dmlq:cupy-arrays", "peer:torch.quantize_per_tensor")


def _calls(torch, impl):
    import cupy

    import dmlq
    import dmlq.torch  # noqa: F401

    x = torch.randn(N, device="cuda")
    if impl == "dmlq:torch-tensors":
        return lambda: dmlq.quantize_linear(x, 0.02, 128)
    if impl == "dmlq:torch.ops":
        return lambda: torch.ops.dmlq.quantize_linear(x, 0.02, 128)
    if impl == "dmlq:cupy-arrays":
        cx = cupy.asarray(x)
        return lambda: dmlq.quantize_linear(cx, 0.02, 128)
    return lambda: torch.quantize_per_tensor(x, 0.02, 128, torch.quint8)


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_call_overhead(benchmark, impl):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    if torch.cuda.current_stream().cuda_stream != 0:
        pytest.skip("the timer's events go on CuPy's current stream, the legacy default one; torch's is another")
    fn = _calls(torch, impl)
    fn()  # the call signature's plan made before timing
    iterations = plan_iterations(fn, 0.005)
    benchmark.pedantic(fn, rounds=200, iterations=iterations, warmup_rounds=5)
    if benchmark.stats is not None:  # None under --benchmark-disable
        t = benchmark.stats.stats.median
        benchmark.extra_info.update(result_info(impl, 5 * N, N, t, None, "GB/s"))
        benchmark.extra_info["seconds_per_call"] = t
