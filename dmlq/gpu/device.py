"""The one place that talks to the CUDA device: array module, pointers, device
facts (compute capability, SM count, occupancy) and the kernel launch.

Every launcher in dmlq.gpu goes through :data:`backend`, so a test can swap the
whole device for another one (tests/cuda_host runs the same launchers against
the kernels compiled for the CPU) while grid, block, shared-memory size and
argument packing stay exactly as on a GPU.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

# A null device pointer as a kernel argument. CuPy does not turn a Python None
# into a null pointer (it arrives as garbage), so launchers pass this instead;
# launch() refuses None outright.
NULL = np.uint64(0)


@dataclass(frozen=True)
class DeviceInfo:
    """What kernel selection and launch sizing need to know about a device."""

    name: str
    compute_capability: int   # 90 for sm_90
    sm_count: int
    max_smem_per_block: int   # bytes of dynamic shared memory a block may opt in to

    @property
    def has_dp4a(self) -> bool:
        return self.compute_capability >= 61

    @property
    def has_mma(self) -> bool:
        return self.compute_capability >= 80


def cc_int(compute_capability) -> int:
    """80 from 80, "80", "8.0" or (8, 0)."""
    if isinstance(compute_capability, (tuple, list)):
        major, minor = compute_capability
        return int(major) * 10 + int(minor)
    text = str(compute_capability)
    if "." in text:
        major, minor = text.split(".")
        return int(major) * 10 + int(minor)
    return int(text)


class CupyBackend:
    """The real device, through CuPy (imported on first use)."""

    def __init__(self):
        self._opted_in: set = set()
        self._occupancy: dict = {}

    @staticmethod
    def xp():
        import cupy

        return cupy

    @staticmethod
    def ptr(a) -> int:
        return a.data.ptr

    @staticmethod
    def is_array(a) -> bool:
        import cupy

        return isinstance(a, cupy.ndarray)

    @staticmethod
    def current() -> int:
        import cupy

        return cupy.cuda.runtime.getDevice()

    def info(self) -> DeviceInfo:
        return _info_for(self.current())

    def resident_blocks(self, source: str, name: str, threads: int, smem: int) -> int:
        """Blocks of kernel ``name`` one SM holds at once (CUDA's occupancy calculator)."""
        import cupy

        from . import loader

        key = (self.current(), source, name, threads, smem)
        n = self._occupancy.get(key)
        if n is None:
            fn = loader.function(source, name)
            try:
                n = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                    fn.kernel.ptr, threads, smem)
            except Exception:  # noqa: BLE001 - only sizes a grid; 4 blocks is a safe guess
                n = 4
            n = self._occupancy[key] = max(1, int(n))
        return n

    def launch(self, source: str, name: str, grid, block, args, shared_mem: int = 0):
        from . import loader

        check_args(name, args)
        fn = loader.function(source, name)
        if shared_mem > 48 * 1024:
            key = (self.current(), source, name)
            if key not in self._opted_in:
                fn.max_dynamic_shared_size_bytes = shared_mem
                self._opted_in.add(key)
        fn(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)


@functools.lru_cache(maxsize=None)
def _info_for(device_id: int) -> DeviceInfo:
    import cupy

    dev = cupy.cuda.Device(device_id)
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    optin = int(props.get("sharedMemPerBlockOptin", 48 * 1024))
    return DeviceInfo(name, cc_int(dev.compute_capability),
                      int(dev.attributes["MultiProcessorCount"]), optin)


def check_args(name: str, args) -> None:
    """Refuse argument lists CuPy would pass wrongly (None is not a null pointer)."""
    for i, a in enumerate(args):
        if a is None:
            raise TypeError(f"{name}: kernel argument {i} is None; pass dmlq.gpu.device.NULL "
                            "for a null pointer")


backend = CupyBackend()


def xp():
    return backend.xp()


def ptr(a) -> int:
    return backend.ptr(a)


def info() -> DeviceInfo:
    return backend.info()


def resident_blocks(source: str, name: str, threads: int, smem: int = 0) -> int:
    return backend.resident_blocks(source, name, threads, smem)


def launch(source: str, name: str, grid, block, args, shared_mem: int = 0) -> None:
    backend.launch(source, name, grid, block, args, shared_mem)


def compile_all() -> int:
    """Compile and load every kernel the current device supports; returns the count."""
    from . import loader

    count = 0
    for source in loader.sources_for(info().compute_capability):
        for name in loader.registry()[source]:
            loader.function(source, name)
            count += 1
    return count
