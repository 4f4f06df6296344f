"""Shared test plumbing: the `gpu` marker skips cleanly where no GPU is usable."""
from __future__ import annotations

import functools

import numpy as np
import pytest


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def suite_processes() -> int:
    """How many processes run the whole suite: ``DMLQ_TEST_JOBS``, or the cores
    this process may use (at most 4)."""
    import os

    env = os.environ.get("DMLQ_TEST_JOBS")
    return max(1, int(env)) if env else max(1, min(4, len(os.sched_getaffinity(0))))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The whole suite (``python -m pytest`` with no paths: testpaths) spreads over
    the cores through pytest-xdist where it is installed (the [test] extra), as
    ``-n`` would: each worker's tests/prebuild.py pool builds what the others are
    not building. One process as before where xdist is missing or disabled
    (``-p no:xdist``), where paths or ``-n`` are given, for --pdb and
    --collect-only, on one core, or with DMLQ_TEST_JOBS=1."""
    if hasattr(config, "workerinput") and hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True  # a worker: pytest-benchmark would warn that it is off
    if (not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput")
            or config.args_source != pytest.Config.ArgsSource.TESTPATHS
            or config.getoption("numprocesses", None) is not None or config.getoption("dist", "no") != "no"
            or config.getoption("usepdb", False) or config.getoption("collectonly", False)):
        return
    n = suite_processes()
    if n > 1:
        config.option.numprocesses = n
        if hasattr(config.option, "benchmark_disable"):  # tests/ times nothing: no warning that it is off
            config.option.benchmark_disable = True


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and CuPy; skipped without one")
    # bench/'s marker, met when tests/test_bench_stand_in.py imports a bench module
    config.addinivalue_line("markers", "cpu: a benchmark that needs no GPU (runs everywhere)")


STAND_IN = "stand-in"


def pytest_generate_tests(metafunc):
    """Every test marked ``gpu`` (on the function or its module) runs twice: on
    the GPU, and on the cupy stand-in (tests/cupy_stand_in), which runs the
    same CuPy calls with the kernels on the host harness -- so a GPU test that
    cannot even start fails in CI. Fixtures with their own gpu parameter (host,
    dev) add a stand-in parameter themselves."""
    if metafunc.definition.get_closest_marker("gpu") is not None:
        metafunc.parametrize("cupy_twin", [STAND_IN, "gpu"], indirect=True)


def _on_stand_in(item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return STAND_IN in (params.get("cupy_twin"), params.get("dev"), params.get("host"))


# Stand-in twins per gpu test function: all of its parameter sets on a GPU, a
# sample on the stand-in (every thread of every kernel runs on the CPU there;
# the host tests already run the same launchers on the harness), so every gpu
# test starts in CI. The sample: the first and the last parameter set of each gpu
# test proper (the first of a host test's GPU mirror, whose host parameter runs
# every case on the harness), and STAND_IN_FRACTION of the others, drawn by a
# seed: the checked-out commit's hash, so one commit always runs the same sample
# and the sample rotates from commit to commit. DMLQ_STAND_IN_SEED=N draws with
# N (the header names the seed); DMLQ_STAND_IN_ALL=1 runs every stand-in twin.
# 0.15 (406 of 1402 twins at this writing; 0.25 ran 519): the twins were 299 s of a cold CI
# run's ~560 s of test CPU on 2 cores, which ran 8 min 18 s against a budget of 8.
STAND_IN_FRACTION = 0.15


def stand_in_seed() -> int:
    import os
    import subprocess
    from pathlib import Path

    env = os.environ.get("DMLQ_STAND_IN_SEED")
    if env:
        return int(env)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
        return int(head[:8], 16) if head else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def stand_in_sample(groups: dict, seed: int, fraction: float = STAND_IN_FRACTION) -> dict:
    """{group: positions kept} for ``groups`` = {(module, function): [twin is a gpu
    test proper (first and last kept) or a GPU mirror (first kept), number of twins]}:
    the fixed positions plus ``fraction`` of the rest (rounded up), chosen by
    ``seed`` and the group alone (adding a test elsewhere moves nothing)."""
    import math
    import random

    kept = {}
    for group, (own, n) in groups.items():
        fixed = {0, n - 1} if own else {0}
        rest = [i for i in range(n) if i not in fixed]
        draw = random.Random(f"{seed}:{group[0]}:{group[1]}")
        kept[group] = fixed | set(draw.sample(rest, math.ceil(fraction * len(rest))))
    return kept


def _sample_stand_in_twins(config, items):
    import os

    if os.environ.get("DMLQ_STAND_IN_ALL"):
        config._stand_in_sample = "every stand-in twin (DMLQ_STAND_IN_ALL=1)"
        return
    groups: dict = {}
    for item in items:
        if "gpu" in item.keywords and _on_stand_in(item):
            groups.setdefault((item.module.__name__, item.originalname), []).append(item)
    seed = stand_in_seed()
    kept = stand_in_sample({g: (twins[0].callspec.params.get("cupy_twin") == STAND_IN, len(twins))
                            for g, twins in groups.items()}, seed)
    skip = pytest.mark.skip(reason=f"stand-in twin not in the sample (seed {seed}; DMLQ_STAND_IN_ALL=1 "
                                   "runs all)")
    for group, twins in groups.items():
        for i, item in enumerate(twins):
            if i not in kept[group]:
                item.add_marker(skip)
    total = sum(len(t) for t in groups.values())
    config._stand_in_sample = (f"{sum(map(len, kept.values()))} of {total} stand-in twins, seed {seed} "
                               f"(DMLQ_STAND_IN_SEED={seed} draws the same; DMLQ_STAND_IN_ALL=1 runs all)")


def pytest_terminal_summary(terminalreporter, config):
    what = getattr(config, "_stand_in_sample", None)
    if what:
        terminalreporter.write_line(f"cupy stand-in sample: {what}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: the controller prints the sample its workers drew (the same
    in each: one collection, one seed)."""
    what = getattr(node, "workeroutput", {}).get("stand_in_sample")
    if what:
        node.config._stand_in_sample = what


def pytest_collection_finish(session):
    """Start the cold builds the collected tests need on every core (tests/prebuild.py):
    the host harness's runners where a test runs kernels on the host (the stand-in
    included), and the sm_90 cubins whose registers the harness's and the
    stand-in's occupancy read, and the static report too."""
    if session.config.option.collectonly:
        return
    import prebuild

    host = nvrtc = False
    ptx: set = set()  # (source, arch) of dmlq.gpu.nvrtc that the tests will read
    texts: dict = {}
    for item in session.items:
        if item.get_closest_marker("skip") is not None:
            continue
        if item.path not in texts:
            texts[item.path] = item.path.read_text() if item.path.suffix == ".py" else ""
        text = texts[item.path]
        ptx.update(_prebuilt_ptx(item))
        stand_in = _on_stand_in(item) or "cupy_stand_in" in text
        host = host or stand_in or "host_device" in text or "cuda_host" in text or "host" in item.fixturenames
        nvrtc = nvrtc or host or "static_report" in text  # the host harness's occupancy reads the cubin
    prebuild.start(host, nvrtc, ptx)


def _prebuilt_ptx(item):
    """The pairs (source, arch) of the item's module's PREBUILT_PTX that the item
    compiles: those matching its ``arch`` parameter (and ``source``, where it has
    one); an item without an ``arch`` parameter compiles none."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "arch" not in params:
        return ()
    return [(s, a) for s, a in getattr(getattr(item, "module", None), "PREBUILT_PTX", ())
            if a == params["arch"] and params.get("source", s) == s]


def pytest_sessionfinish(session):
    import prebuild

    what = getattr(session.config, "_stand_in_sample", None)
    if what and hasattr(session.config, "workeroutput"):  # a pytest-xdist worker tells the controller
        session.config.workeroutput["stand_in_sample"] = what

    prebuild.stop()


def pytest_collection_modifyitems(config, items):
    _sample_stand_in_twins(config, items)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (cupy.cuda.runtime.getDeviceCount() failed or is 0)")
    for item in items:
        if "gpu" in item.keywords and not _on_stand_in(item):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def cupy_twin(request):
    """For a gpu test's stand-in twin, ``import cupy`` gives the stand-in."""
    which = getattr(request, "param", None)
    if which != STAND_IN:
        yield which
        return
    request.getfixturevalue("host_device")
    import cupy_stand_in

    with cupy_stand_in.installed():
        yield which


def on_stand_in() -> bool:
    """Whether ``import cupy`` gives the stand-in now (tests shrink sizes there)."""
    import sys

    return getattr(sys.modules.get("cupy"), "__stand_in__", False)


def skip_past_2_31_on_the_stand_in():
    """A test over more than 2**31 elements needs a GPU's memory and speed: on
    the stand-in (2 GiB of host memory, every thread on the CPU) it skips; the
    host tests cover 64-bit indexing with the wide-index kernels on small arrays."""
    if on_stand_in():
        pytest.skip("more than 2**31 elements: GPU only (the stand-in has 2 GiB of host memory)")


class CurrentCupy:
    """``cupy`` as imported at each use: the stand-in inside a stand-in twin."""

    def __getattr__(self, name):
        import cupy

        return getattr(cupy, name)


def poison(out):
    """Fill an output with a value no kernel writes by accident (0xA5 bytes)."""
    if out.size:
        flat = out.reshape(-1) if out.flags.c_contiguous else None
        if flat is not None:
            flat.view("uint8")[...] = 0xA5  # numpy and cupy, any dtype, 0-d included
        else:
            out[...] = out.dtype.type(-91) if out.dtype.kind == "i" else out.dtype.type(0xA5)
    return out


# Code types whose NumPy arrays are their bytes as ONNX stores them; the others (4-/2-bit
# ml_dtypes, one element a byte) pack, float8 to the same bytes.
NATIVE_CODES = ("int8", "uint8", "int16", "uint16")


def code_bytes(codes):
    """The bytes a quantize kernel writes for a NumPy array of codes (ONNX's packing)."""
    import dmlq

    if codes.dtype.name in NATIVE_CODES:
        return np.ascontiguousarray(codes).reshape(-1).view(np.uint8)
    return dmlq.pack(codes).data


def assert_same(got, want, context=""):
    """Bit-for-bit equality, except that a NaN in a float output matches any NaN:
    docs/semantics.md leaves a float NaN's sign and payload open (a GPU gives 0x7FFFFFFF,
    x86 NumPy passes an operand's NaN on). Float8 codes are compared as bits, NaN sign
    included. The message names up to five differing elements."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (context, got.dtype, got.shape, want.dtype, want.shape)
    bits = np.dtype(f"u{want.dtype.itemsize}")
    bad = got.view(bits) != want.view(bits)
    if want.dtype.kind == "f" or want.dtype.name == "bfloat16":
        bad &= ~(np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))
    if bad.any():
        idx = [tuple(int(v) for v in i) for i in np.argwhere(bad)[:5]]
        detail = ", ".join(f"{i}: got {got[i]!r} want {want[i]!r}" for i in idx)
        raise AssertionError(f"{context}: {int(bad.sum())} of {bad.size} differ; {detail}")


@pytest.fixture
def rng(request):
    """A fresh, reported seed per test so failures can be replayed."""
    seed = np.random.SeedSequence().entropy % (2**32)
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


# ------------------------------------------------------------ the cupy stand-in

@pytest.fixture
def cupy_stand_in(host_device):
    """``import cupy`` gives tests/cupy_stand_in for one test: dmlq runs its GPU
    path unchanged, launches going to the host harness."""
    import cupy_stand_in

    with cupy_stand_in.installed() as cp:
        yield cp


# ------------------------------------------------------------ the host harness

@pytest.fixture(scope="session")
def host_device():
    """The kernels' own sources, compiled for the CPU (tests/cuda_host), as one device."""
    from cuda_host import harness

    if not harness.available():
        pytest.skip("no g++ to build the host harness")
    dev = harness.HostDevice()  # runners built where first used (tests/prebuild.py builds them ahead)
    yield dev
    dev.close()


@pytest.fixture(scope="session")
def gpu_mirror_device():
    from cuda_host import harness

    return harness.GpuMirrorDevice()


@pytest.fixture(params=["host", pytest.param("gpu", marks=pytest.mark.gpu),
                        pytest.param(STAND_IN, marks=pytest.mark.gpu)])
def host(request):
    """dmlq.gpu's launchers on NumPy test cases, for one test: on the host
    harness, and (where a GPU is present) the same cases on the GPU; the GPU
    case's twin mirrors them through the cupy stand-in."""
    import contextlib

    from dmlq.gpu import device

    stand_in = contextlib.nullcontext()
    if request.param == STAND_IN:
        request.getfixturevalue("host_device")
        import cupy_stand_in

        stand_in = cupy_stand_in.installed()
    with stand_in:
        if request.param == "host":
            dev = request.getfixturevalue("host_device")
        else:
            from cuda_host import harness

            dev = request.getfixturevalue("gpu_mirror_device") if request.param == "gpu" else \
                harness.GpuMirrorDevice()
        dev.forget()
        with device.using(dev):
            yield dev
        dev.forget()
