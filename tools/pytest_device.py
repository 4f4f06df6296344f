"""pytest plugin for tools/gpu_session.sh (``-p pytest_device``, tools/ on the path): on the
device only the GPU twins run. Every gpu test has a twin on the cupy stand-in (the host
harness: the CPU running each CUDA thread, which CI already runs); those twins are
deselected, so device minutes go to the device, and ``--collect-only`` lists what a
stage runs there."""
from __future__ import annotations

import pytest

STAND_IN = "stand-in"


def on_stand_in(item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return STAND_IN in (params.get("cupy_twin"), params.get("dev"), params.get("host"))


SKIPPED_BUILDS: list = []


def pytest_configure(config):
    """DMLQ_CUPY_NO_POOL=1 (the sanitize stage): every CuPy allocation its own cudaMalloc, so
    compute-sanitizer's memcheck sees an access past an array's end instead of landing inside
    a memory-pool block it cannot tell from the array (the pool sub-allocates big blocks)."""
    import os

    if os.environ.get("DMLQ_CUPY_NO_POOL"):
        try:
            import cupy

            cupy.cuda.set_allocator(None)
            cupy.cuda.set_pinned_memory_allocator(None)
        except Exception as e:  # noqa: BLE001 - no CuPy or no device: the tests say so themselves
            print(f"pytest_device: CuPy's pools left on ({type(e).__name__}: {e})")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    """No cold builds for the host harness or the stand-in's cubins (tests/prebuild.py,
    which tests/conftest.py starts after collection): the device runs neither, and a
    g++ build still running would hold the step's exit (the pool's threads are joined
    when Python exits)."""
    try:
        import prebuild
    except ImportError:
        return
    prebuild.start = lambda host, nvrtc, ptx=(): SKIPPED_BUILDS.append((host, nvrtc))


def pytest_terminal_summary(terminalreporter):
    import os

    pools = "off" if os.environ.get("DMLQ_CUPY_NO_POOL") else "on"
    terminalreporter.write_line(f"pytest_device: GPU twins only; host-harness prebuild requests skipped: "
                                f"{len(SKIPPED_BUILDS)}; CuPy memory pools {pools}")


# A CUDA error that ends the process's context: every later call fails with it (the first
# H100 session: one test's deliberate __trap() failed the 258 tests after it). The step
# stops at the first one, names the test, and (DMLQ_DEVICE_STICKY_FILE) writes its node id,
# so tools/gpu_session.sh can go on in a fresh process after it (DMLQ_DEVICE_AFTER).
STICKY = ("cudaErrorLaunchFailure", "cudaErrorIllegalAddress", "cudaErrorIllegalInstruction",
          "cudaErrorMisalignedAddress", "cudaErrorAssert", "cudaErrorHardwareStackError",
          "unspecified launch failure", "an illegal memory access was encountered")


def sticky_error(text: str):
    """The first sticky CUDA error named in a failure's text, or None."""
    return next((s for s in STICKY if s in text), None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    import os

    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    what = sticky_error(str(report.longrepr))
    if what is None:
        return
    item.session.shouldstop = (f"pytest_device: {item.nodeid} left a sticky CUDA error ({what}); the process's "
                               "context is lost, so the step stops here")
    path = os.environ.get("DMLQ_DEVICE_STICKY_FILE")
    if path:
        with open(path, "w") as f:
            f.write(item.nodeid + "\n")


def after(items, nodeid: str):
    """The items after ``nodeid`` (all of them when it is not among them)."""
    ids = [item.nodeid for item in items]
    return items[ids.index(nodeid) + 1:] if nodeid in ids else items


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The stand-in twins deselected; with DMLQ_DEVICE_AFTER, every test up to that node id too."""
    import os

    removed = [item for item in items if on_stand_in(item)]
    kept = [item for item in items if not on_stand_in(item)]
    start = os.environ.get("DMLQ_DEVICE_AFTER")
    if start:
        rest = after(kept, start)
        removed += kept[:len(kept) - len(rest)]
        kept = rest
    if removed:
        config.hook.pytest_deselected(items=removed)
        items[:] = kept
