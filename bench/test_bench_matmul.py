"""int8 matmul at 4096^3, 8192^3 and LLM shapes (M in 16, 128, 2048 x (N, K) in
(4096, 4096), (14336, 4096), (4096, 14336)): dmlq's dp4a and tensor-core
variants against torch._int_mm (alone and with its requantize) and CuPy
float16/float32 matmul on dequantized inputs, in TOPS against the roofline
min(peak, ops * copy_bw / bytes); dp4a variants against the dp4a peak."""
import pytest

from bench import workloads as W
from bench.peers import case_impls
from bench.timing import gpu_timer

pytestmark = pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
PARAMS = case_impls(W.matmul_cases())


@pytest.mark.parametrize("group, impl", PARAMS, ids=[f"{g}|{i}" for g, i in PARAMS])
def test_matmul(run_bench, group, impl):
    run_bench(group, impl)
