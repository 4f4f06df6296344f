"""pytest-benchmark plumbing for bench/ (kept out of the default test run).

    python -m pytest bench --benchmark-json=bench/results/<gpu>-<date>.json

Every test times one implementation (``dmlq:<variant>`` or ``peer:<name>``) of
one group ``op/dtype/shape`` with CUDA-event timing (bench.timing.gpu_timer), so
each timed span ends with the GPU done. Without a GPU every test skips.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # cupy_stand_in, for the CPU benchmarks
if str(BENCH_DIR.parent) not in sys.path:  # the bench package, however pytest was started
    sys.path.insert(0, str(BENCH_DIR.parent))

from bench import limits as limits_mod  # noqa: E402
from bench import peers, timing  # noqa: E402
from bench import workloads as W  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu: a benchmark that needs no GPU (runs everywhere)")


def pytest_collection_modifyitems(config, items):
    ok, why = limits_mod.gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"benchmarks need a CUDA GPU: {why}")
    for item in items:
        if item.get_closest_marker("cpu") is not None:  # (keywords also hold folder names)
            continue
        if BENCH_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


def pytest_report_header(config):
    ok, why = limits_mod.gpu_status()
    return f"dmlq bench: {limits_mod.device_facts()['gpu'] if ok else 'no GPU (' + why + ')'}"


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.update(limits_mod.machine_info(limits_mod.current()))


@pytest.fixture(scope="session")
def limits():
    return limits_mod.get()


@pytest.fixture
def run_bench(benchmark, limits):
    """run(group, impl): prepare fresh data, time with pedantic, fill extra_info."""

    def run(group, impl):
        import cupy

        case = W.find_case(group)
        benchmark.group = case.group
        seed = int(np.random.SeedSequence().entropy % 2**32)
        print(f"seed={seed}")
        try:
            prep = peers.prepare(case, impl, limits, seed)
        except peers.Unavailable as e:
            pytest.skip(str(e))
        with prep.stream if prep.stream is not None else cupy.cuda.get_current_stream():
            iterations = timing.plan_iterations(prep.fn, case.round_s)
            benchmark.pedantic(prep.fn, rounds=case.rounds, iterations=iterations, warmup_rounds=1)
        if benchmark.stats is not None:  # None under --benchmark-disable
            t = benchmark.stats.stats.median
            benchmark.extra_info.update(timing.result_info(impl, prep.bytes, prep.ops, t, prep.limit, case.unit))

    yield run
    if limits_mod.gpu_status()[0]:
        peers.free_memory()


@pytest.fixture
def smoke(request):
    """For the CPU benchmarks (seconds of work per result, so: only when asked,
    DMLQ_CPU_BENCH=1). Under --benchmark-disable (the test suite's run of bench/) each
    result runs once on small inputs (True); otherwise the benchmark skips."""
    if os.environ.get("DMLQ_CPU_BENCH"):
        return False
    if request.config.getoption("benchmark_disable", False):
        return True
    pytest.skip(f"CPU benchmarks run when asked: DMLQ_CPU_BENCH=1 python -m pytest {request.node.fspath.basename}")
