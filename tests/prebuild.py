"""The session's cold builds, started at once on every core, each awaited by the
first test that needs it.

Two kinds of build are slow when their caches are cold: the host harness's
runners (g++ under ASan/UBSan, one per source of cuda/, tests/cuda_host/harness.py)
and the sm_90 cubins NVRTC makes of the same sources (tools/static_report.py:
the static report's rows, and the registers and shared memory the cupy
stand-in's occupancy reads). Built where a test first asks, they run one at a
time on one core while the other idles. conftest.py calls :func:`start` once the
tests are collected, with what they need: a pool of ``DMLQ_BUILD_JOBS`` workers
(default: the cores this process may use, at most 2, shared among pytest-xdist's
workers) builds everything, and each test's own request waits for the build
already under way (the runner's in-flight future in harness.build; :func:`wait`
before a Toolchain.build). Across processes each build holds a lock file beside
its cache entry: under pytest-xdist every worker runs this pool, a worker's pool
skips what another worker is building (and awaits it last), so each runner and
cubin is built once and the workers' pools build different ones at once.

A warm cache makes each job a cache hit: the pool costs nothing then.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_futures: dict = {}  # ("host" | "nvrtc", source) -> Future


def jobs() -> int:
    """DMLQ_BUILD_JOBS, or this process's share of the cores (at most 2): under
    pytest-xdist each worker runs its own pool, so the workers share them."""
    env = os.environ.get("DMLQ_BUILD_JOBS")
    if env:
        return max(1, int(env))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, len(os.sched_getaffinity(0)) // workers))


def _host(source: str, wait: bool):
    from cuda_host import harness

    return harness.build(source, wait=wait)


def _nvrtc(source: str, wait: bool):
    from cupy_stand_in import _kernels
    from dmlq.gpu import loader

    _sr, toolchain = _kernels._static_report()
    return toolchain.build(source, loader.registry()[source], wait=wait)


def _job(key, f: Future, wait: bool = False):
    """Build ``key`` unless another process holds its lock: then it goes to the
    back of the queue and is awaited last, so each worker's pool builds what no
    one else is building (the cache entry's lock file, harness.build and
    static_report's Toolchain.build)."""
    try:
        built = (_host if key[0] == "host" else _nvrtc)(key[1], wait) is not None
    except Exception as e:  # noqa: BLE001 - the test's own build reports it
        _settle(f, e)
        return
    if built:
        _settle(f, None)
        return
    try:
        _pool.submit(_job, key, f, True)
    except (AttributeError, RuntimeError):  # the session is over (stop): nothing waits
        _settle(f, None)


def _settle(f: Future, error):
    try:
        if error is None:
            f.set_result(None)
        else:
            f.set_exception(error)
    except InvalidStateError:
        pass


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
    _pool = ThreadPoolExecutor(jobs(), thread_name_prefix="dmlq-build")
    for source in loader.registry():
        for kind, wanted in (("host", host), ("nvrtc", nvrtc)):
            if wanted:
                f = _futures[kind, source] = Future()
                _pool.submit(_job, (kind, source), f)


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
    for f in _futures.values():
        _settle(f, None)
    _futures.clear()
