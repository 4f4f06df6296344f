"""dynamic_quantize_linear on 256 MiB of float32 (-> uint8) and float16 (-> int8): dmlq
against a CuPy expression and torch (aminmax, then quantize_per_tensor with tensor parameters),
in GB/s of the bytes it must move (x read twice: its range, then its values; y written once)
against the same-run copy bandwidth."""
import pytest

from bench import workloads as W
from bench.peers import case_impls
from bench.timing import gpu_timer

pytestmark = pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
PARAMS = case_impls(W.dynquant_cases())


@pytest.mark.parametrize("group, impl", PARAMS, ids=[f"{g}|{i}" for g, i in PARAMS])
def test_dynquant(run_bench, group, impl):
    run_bench(group, impl)
