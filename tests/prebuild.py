"""The session's cold builds, started at once on every core, each awaited by the
first test that needs it.

Two kinds of build are slow when their caches are cold: the host harness's
runners (g++ under ASan/UBSan, one per source of cuda/, tests/cuda_host/harness.py)
and the sm_90 cubins NVRTC makes of the same sources (tools/static_report.py:
the static report's rows, and the registers and shared memory the cupy
stand-in's occupancy reads). Built where a test first asks, they run one at a
time on one core while the other idles. conftest.py calls :func:`start` once the
tests are collected, with what they need: a pool of ``DMLQ_BUILD_JOBS`` workers
(default: the cores this process may use, at most 2) builds everything, and
each test's own request waits for the build already under way (the runner's
in-flight future in harness.build; :func:`wait` before a Toolchain.build).

A warm cache makes each job a cache hit: the pool costs nothing then.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_futures: dict = {}  # ("host" | "nvrtc", source) -> Future


def jobs() -> int:
    env = os.environ.get("DMLQ_BUILD_JOBS")
    if env:
        return max(1, int(env))
    return max(1, min(2, len(os.sched_getaffinity(0))))


def _nvrtc(source: str, names):
    from cupy_stand_in import _kernels

    _sr, toolchain = _kernels._static_report()
    toolchain.build(source, names)


def start(host: bool, nvrtc: bool):
    """Queue the runner (``host``) and the cubin (``nvrtc``) of every source of
    cuda/, source by source in the loader's order (elementwise.cu first: the
    tests that come first use it most)."""
    global _pool
    if _pool is not None or not (host or nvrtc):
        return
    from cuda_host import harness
    from dmlq.gpu import loader

    if host and not harness.available():
        host = False
    registry = loader.registry()
    _pool = ThreadPoolExecutor(jobs(), thread_name_prefix="dmlq-build")
    for source in registry:
        if host:
            _futures["host", source] = _pool.submit(harness.build, source)
        if nvrtc:
            _futures["nvrtc", source] = _pool.submit(_nvrtc, source, registry[source])


def wait(kind: str, source: str):
    """Wait for the background build of ``source``, if one was started; a failed
    one is left to the caller's own build, which reports the error."""
    f: Future | None = _futures.get((kind, source))
    if f is not None:
        try:
            f.result()
        except Exception:  # noqa: BLE001 - the caller builds again and raises
            pass


def wait_all(kind: str):
    for k, s in list(_futures):
        if k == kind:
            wait(k, s)


def stop():
    """Drop the builds not yet started (the session ends early)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None
    _futures.clear()
