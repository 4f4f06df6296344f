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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    removed = [item for item in items if on_stand_in(item)]
    if removed:
        config.hook.pytest_deselected(items=removed)
        items[:] = [item for item in items if not on_stand_in(item)]


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
