"""Per-call cost on a tiny (1024-element) quantize, judged against CuPy's own
ElementwiseKernel call measured in the same run (many pedantic rounds), and a
CUDA graph of 12 dmlq calls (quantize -> add -> dequantize, x4) captured with
Stream.begin_capture / end_capture and replayed with graph.launch, against the
same calls made eagerly and against CuPy kernels (eager and captured)."""
import pytest

from bench import workloads as W
from bench.peers import case_impls
from bench.timing import gpu_timer

pytestmark = pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
OVERHEAD = case_impls(W.overhead_cases())
GRAPH = case_impls(W.graph_cases())


@pytest.mark.parametrize("group, impl", OVERHEAD, ids=[f"{g}|{i}" for g, i in OVERHEAD])
def test_overhead(run_bench, group, impl):
    run_bench(group, impl)


@pytest.mark.parametrize("group, impl", GRAPH, ids=[f"{g}|{i}" for g, i in GRAPH])
def test_graph(run_bench, group, impl):
    run_bench(group, impl)
