"""quantize / dequantize / add at 256 MiB and 1 GiB of input, per-tensor and per-axis:
dmlq's variants against CuPy (expression and fused kernel) and torch, in GB/s
against the same-run copy bandwidth."""
import pytest

from bench import workloads as W
from bench.peers import case_impls
from bench.timing import gpu_timer

pytestmark = pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
PARAMS = case_impls(W.elementwise_cases())


@pytest.mark.parametrize("group, impl", PARAMS, ids=[f"{g}|{i}" for g, i in PARAMS])
def test_elementwise(run_bench, group, impl):
    run_bench(group, impl)
