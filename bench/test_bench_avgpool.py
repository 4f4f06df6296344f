"""Average pooling: 64x64x112x112 3x3/2 pad 1, 256x256x56x56 2x2/2, 64x256x56x56
3x3/1 pad 1, 3-D 8x64x16x56x56 2x2x2/2, two of them channels_last, and global pooling of
channels_last 64x256x56x56 and 64x2048x7x7; dmlq's variants against a CuPy
expression and torch avg_pool2d/3d on the dequantized float16 tensor, in GB/s
(input + output bytes) against the same-run copy bandwidth."""
import pytest

from bench import workloads as W
from bench.peers import case_impls
from bench.timing import gpu_timer

pytestmark = pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
PARAMS = case_impls(W.avgpool_cases())


@pytest.mark.parametrize("group, impl", PARAMS, ids=[f"{g}|{i}" for g, i in PARAMS])
def test_avgpool(run_bench, group, impl):
    run_bench(group, impl)
