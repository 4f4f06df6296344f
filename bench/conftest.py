"""pytest-benchmark plumbing for bench/ (kept out of the default test run).

    python -m pytest bench --benchmark-json=bench/results/<gpu>-<date>.json

Every test times one implementation (``dmlq:<variant>`` or ``peer:<name>``) of
one group ``op/dtype/shape`` with CUDA-event timing (dmlq.bench.gpu_timer), so
each timed span ends with the GPU done. Without a GPU every test skips.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from dmlq import bench as B

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # gpu_stand_in, for the CPU benchmarks


def _load(name):
    spec = importlib.util.spec_from_file_location(f"dmlq_bench_{name}", BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


limits_mod = _load("limits")
W = _load("workloads")


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu: a benchmark that needs no GPU (runs everywhere)")


def pytest_collection_modifyitems(config, items):
    ok, why = B.gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"benchmarks need a CUDA GPU: {why}")
    for item in items:
        if item.get_closest_marker("cpu") is not None:  # (keywords also hold folder names)
            continue
        if BENCH_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


def pytest_report_header(config):
    ok, why = B.gpu_status()
    return f"dmlq bench: {B.device_facts()['gpu'] if ok else 'no GPU (' + why + ')'}"


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.update(B.machine_info(limits_mod.current()))


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
            prep = W.prepare(case, impl, limits, seed)
        except B.Unavailable as e:
            pytest.skip(str(e))
        with prep.stream if prep.stream is not None else cupy.cuda.get_current_stream():
            iterations = B.plan_iterations(prep.fn, case.round_s)
            benchmark.pedantic(prep.fn, rounds=case.rounds, iterations=iterations, warmup_rounds=1)
        if benchmark.stats is not None:  # None under --benchmark-disable
            t = benchmark.stats.stats.median
            benchmark.extra_info.update(B.result_info(impl, prep.bytes, prep.ops, t, prep.limit, case.unit))

    yield run
    if B.gpu_status()[0]:
        B.free_memory()
