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


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and CuPy; skipped without one")


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (cupy.cuda.runtime.getDeviceCount() failed or is 0)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def poison(out):
    """Fill an output with a value no kernel writes by accident (0xA5 bytes)."""
    if out.size:
        flat = out.reshape(-1) if out.flags.c_contiguous else None
        if flat is not None:
            flat.view("uint8")[...] = 0xA5  # numpy and cupy, any dtype, 0-d included
        else:
            out[...] = out.dtype.type(-91) if out.dtype.kind == "i" else out.dtype.type(0xA5)
    return out


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
    harness.build_all()
    dev = harness.HostDevice()
    yield dev
    dev.close()


@pytest.fixture(scope="session")
def gpu_mirror_device():
    from cuda_host import harness

    return harness.GpuMirrorDevice()


@pytest.fixture(params=["host", pytest.param("gpu", marks=pytest.mark.gpu)])
def host(request, monkeypatch):
    """dmlq.gpu's launchers on NumPy test cases, for one test: on the host
    harness, and (where a GPU is present) the same cases on the GPU."""
    from dmlq.gpu import device

    dev = request.getfixturevalue("host_device" if request.param == "host" else "gpu_mirror_device")
    dev.forget()
    with device.using(dev):
        yield dev
    dev.forget()
