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

A third kind, the PTX dmlq.gpu.nvrtc makes for another arch, is queued for the
(source, arch) pairs a collected test module lists in ``PREBUILT_PTX`` and read through
:func:`compiled`, which hands out sm_90's PTX from the cubin's own build (the pairs the
test modules list today are all sm_90's: tests/test_nvrtc.py compiles sm_80 through
NVRTC's front end only, a second or two a source).
All builds share one queue, the costliest first (COST), so no long build starts last.

A warm cache makes each job a cache hit: the pool costs nothing then.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_futures: dict = {}  # ("host" | "nvrtc", source) or ("ptx", (source, arch)) -> Future

# Wall seconds of each cold build (runner, cubin + SASS) measured one at a time at
# commit a82e242 on this project's idle 2-core machine (avgpool.cu's runner at 57b35d4;
# quant_types.cu's cubin again once its loops were rolled, 2026-11-26); the pool starts the
# longest first so the last builds to finish are short ones. A PTX build for another arch
# ("ptx", tests/test_nvrtc.py) costs about what the cubin costs. A source not listed: 10 s.
COST = {"elementwise.cu": (12, 11), "matmul_dp4a.cu": (29, 59), "matmul_dp4a_packed.cu": (31, 60), "matmul_dp4a_kmajor4.cu": (31, 60), "matmul_dp4a_kmajor.cu": (29, 59),
        "matmul_mma.cu": (28, 42), "matmul_mma_packed.cu": (25, 47), "matmul_mma_kmajor.cu": (25, 40), "matmul_mma_kmajor4.cu": (25, 40), "avgpool.cu": (8, 12), "avgpool_cl.cu": (6, 8),
        "matmul_stream.cu": (8, 8), "quant_types.cu": (4, 26), "matmul_stream_packed.cu": (18, 30)}


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


def _ptx(key, wait: bool):
    """One (source, arch) of dmlq.gpu.nvrtc (tests/test_nvrtc.py): under a lock file
    in its cache folder, so each is compiled once across processes."""
    from cupy_stand_in import _kernels
    from dmlq.gpu import nvrtc

    source, arch = key
    lock = nvrtc.cache_dir() / f"{source}-{arch}.lock"
    with _kernels.static_report_module().file_lock(lock, wait) as held:
        return nvrtc.compile_source(source, arch) if held else None


_BUILD = {"host": _host, "nvrtc": _nvrtc, "ptx": _ptx}


def _job(key, f: Future, wait: bool = False):
    """Build ``key`` unless another process holds its lock: then it goes to the
    back of the queue and is awaited last, so each worker's pool builds what no
    one else is building (the cache entry's lock file, harness.build and
    static_report's Toolchain.build)."""
    try:
        built = _BUILD[key[0]](key[1], wait) is not None
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


def start(host: bool, nvrtc: bool, ptx=()):
    """Queue the runner (``host``) and the cubin (``nvrtc``) of every source of
    cuda/, and the ``ptx`` pairs (source, arch) of dmlq.gpu.nvrtc that the tests
    read through :func:`compiled` (sm_90's come from the cubin's build): all in
    one queue, the longest first (COST)."""
    global _pool
    if _pool is not None or not (host or nvrtc or ptx):
        return
    cubins = {s for s, a in ptx if a == _static_arch()}  # sm_90's PTX: the cubin's build
    ptx = {p for p in ptx if p[1] != _static_arch()}
    from cuda_host import harness
    from dmlq.gpu import loader

    if host and not harness.available():
        host = False
    jobs_ = []
    for i, source in enumerate(loader.registry()):
        cost = COST.get(source, (10, 10))
        if host:
            jobs_.append((cost[0], i, ("host", source)))
        if nvrtc or source in cubins:
            jobs_.append((cost[1], i, ("nvrtc", source)))
    jobs_ += [(COST.get(s, (10, 10))[1], 0, ("ptx", (s, a))) for s, a in sorted(ptx)]
    _pool = ThreadPoolExecutor(jobs(), thread_name_prefix="dmlq-build")
    for _cost, _i, key in sorted(jobs_, key=lambda j: (-j[0], j[1])):
        f = _futures[key] = Future()
        _pool.submit(_job, key, f)


def _static_arch() -> str:
    from cupy_stand_in import _kernels

    return _kernels.static_report_module().ARCH


_PTXAS_INFO = re.compile(r"ptxas(?: info +:| +\.) ")  # -Xptxas -v's lines, no warnings


def compiled(source: str, arch: str, names=None):
    """dmlq.gpu.nvrtc.compile_source(source, arch, names) for the tests: for sm_90
    with every name of the source, the same program's PTX, log and lowered names
    from the static report's build (tools/static_report.py: CuPy's options plus
    ``-Xptxas -v``, whose info lines are dropped from the log; identical PTX),
    which the session makes anyway -- one NVRTC compile per source for sm_90,
    not two; otherwise the build this session's pool started, or a compile now."""
    from dmlq.gpu import loader, nvrtc

    full = loader.registry()[source]
    if names is None or tuple(names) == tuple(full):
        if arch == _static_arch():
            from cupy_stand_in import _kernels

            wait("nvrtc", source)
            try:
                _sr, toolchain = _kernels._static_report()
            except (FileNotFoundError, OSError):  # no nvdisasm wheel: NVRTC alone
                return nvrtc.compile_source(source, arch, names)
            b = toolchain.build(source, full)
            if b.ptx is None:  # a cache entry older than the PTX kept beside it
                return nvrtc.compile_source(source, arch, names)
            log = "\n".join(line for line in b.log.splitlines() if not _PTXAS_INFO.match(line))
            return nvrtc.CompileResult(source, arch, b.ptx, log.strip(), b.lowered)
        wait("ptx", (source, arch))
    return nvrtc.compile_source(source, arch, names)


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
