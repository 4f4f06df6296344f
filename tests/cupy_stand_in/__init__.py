"""A stand-in for the ``cupy`` module itself, on the CPU.

:func:`install` puts it in ``sys.modules`` as ``cupy`` (with ``cupy.cuda``,
``cupy.cuda.runtime``, ``cupy.cuda.driver``, ``cupy.cuda.nvrtc``,
``cupy.random``); :func:`uninstall` puts back what was there. Code that imports
``cupy`` then runs unchanged -- dmlq's dispatch, its CuPy backend, plans,
workspaces, device constants and launches -- with:

- two identical H100-like devices (sm_90; HOST_SMS SMs so grids stay small),
  a current device and a current stream per thread, non-blocking and external
  streams, graph capture, the memory pool;
- ``cupy.ndarray`` on host memory (``.data.ptr``, ``.data.device_id``,
  ``.device.id``, ``__cuda_array_interface__``, strides, views, ``.get()``);
- ``cupy.RawModule`` / ``cupy.RawKernel`` launching the kernels' own sources on
  the g++ host harness (tests/cuda_host), arguments packed by CuPy 14.2's rules
  and checked against each kernel's C signature (see ``_kernels``);
- CuPy's refusals: NumPy arrays given to CuPy functions, NumPy arrays of more
  than one element as kernel arguments, launches past the H100's limits,
  dynamic shared memory over 48 KiB without the opt-in (occupancy 0 too).

Every name it offers exists in the installed CuPy (tests/test_cupy_stand_in.py
walks them).
"""
from __future__ import annotations

import contextlib
import sys
import types

import numpy as np

from . import _array, _cuda, _kernels

__all__ = ["install", "uninstall", "installed", "module", "launches", "counts", "reset", "forget_dmlq_state"]

_NUMPY_TYPES = ("bool_", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64", "complex64", "complex128", "dtype", "nan", "inf",
                "newaxis", "intp")


def _build() -> dict:
    """{module name: module} of the stand-in."""
    def mod(name, names):
        m = types.ModuleType(name, f"cupy stand-in: {name}")
        m.__dict__.update(names)
        m.__stand_in__ = True
        return m

    runtime = mod("cupy.cuda.runtime", _cuda.runtime_names)
    driver = mod("cupy.cuda.driver", dict(
        occupancyMaxActiveBlocksPerMultiprocessor=_kernels.occupancy_max_active_blocks_per_multiprocessor,
        CUDADriverError=_cuda.CUDADriverError))
    nvrtc = mod("cupy.cuda.nvrtc", dict(getVersion=lambda: (13, 0)))
    function = mod("cupy.cuda.function", dict(Function=_kernels.Function))
    memory = mod("cupy.cuda.memory", dict(OutOfMemoryError=_cuda.OutOfMemoryError, MemoryPool=_cuda.MemoryPool,
                                          MemoryPointer=_cuda.MemoryPointer))
    cuda = mod("cupy.cuda", dict(
        runtime=runtime, driver=driver, nvrtc=nvrtc, function=function, memory=memory, Device=_cuda.Device,
        Stream=_cuda.Stream, ExternalStream=_cuda.ExternalStream, Event=_cuda.Event,
        get_current_stream=_cuda.get_current_stream, get_elapsed_time=_cuda.get_elapsed_time,
        Memory=_cuda.Memory, MemoryPointer=_cuda.MemoryPointer, MemoryPool=_cuda.MemoryPool,
        alloc=_cuda.alloc, get_device_id=_cuda.get_device_id, set_allocator=_cuda.set_allocator,
        get_allocator=_cuda.get_allocator, using_allocator=_cuda.using_allocator))
    rnd = _array._Random()
    random = mod("cupy.random", dict(randint=rnd.randint, seed=rnd.seed, Generator=_array.Generator,
                                     default_rng=_array.Generator))
    names = {n: getattr(np, n) for n in _NUMPY_TYPES}
    names.update({n: getattr(_array, n) for n in (
        "ndarray", "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "full_like", "arange",
        "array", "asarray", "from_dlpack", "ascontiguousarray", "asnumpy", "broadcast_to",
        "may_share_memory", "shares_memory", "rint", "multiply", "add", "subtract", "minimum", "maximum",
        "divide", "isnan",
        "matmul", "clip", "where", "array_equal", "pad", "tile", "concatenate", "stack")})
    names.update(cuda=cuda, random=random, RawModule=_kernels.RawModule, RawKernel=_kernels.RawKernel,
                 get_default_memory_pool=_cuda.get_default_memory_pool, __version__="14.2.0")
    stride_tricks = mod("cupy.lib.stride_tricks", dict(as_strided=_array.as_strided))
    lib = mod("cupy.lib", dict(stride_tricks=stride_tricks))
    names.update(lib=lib)
    cupy = mod("cupy", names)
    return {m.__name__: m for m in (cupy, cuda, runtime, driver, nvrtc, function, memory, random, lib,
                                    stride_tricks)}


_MODULES = _build()
_saved: list = []

module = _MODULES["cupy"]
launches = _kernels.launches
counts = _array.counts


def install(run_kernels: bool = True):
    """Make ``import cupy`` give the stand-in (until :func:`uninstall`); returns it.
    ``run_kernels=False``: launches are checked and packed as ever, then return
    at once (for timing dmlq's own Python)."""
    _kernels.settings["run"] = run_kernels
    saved = {k: v for k, v in sys.modules.items() if k == "cupy" or k.startswith("cupy.")}
    _saved.append(saved)
    for k in saved:
        del sys.modules[k]
    sys.modules.update(_MODULES)
    return module


def uninstall():
    _kernels.settings["run"] = True
    for k in _MODULES:
        sys.modules.pop(k, None)
    if _saved:
        sys.modules.update(_saved.pop())


def reset():
    """Device 0 current, default streams, no pending stream work, an empty pool, no
    launch log (between tests)."""
    _cuda.discard_work()
    _cuda.get_default_memory_pool()._release()
    _cuda.set_allocator(_cuda.get_default_memory_pool().malloc)
    _cuda._tls.allocator = None
    _cuda._tls.device = 0
    _cuda._tls.streams.clear()
    launches.clear()
    counts["uploads"] = counts["downloads"] = counts["syncs"] = counts["allocations"] = 0
    dev = _kernels._harness.get("device")
    if dev is not None:
        dev.forget()


def forget_dmlq_state():
    """Forget what dmlq keeps per device or per cupy module (compiled modules,
    device facts, occupancy and opt-ins, workspaces, plans), so that its next
    call asks the cupy module now in sys.modules. Nothing of dmlq is replaced."""
    from dmlq.gpu import device, loader, plan

    from dmlq import calls

    calls.clear_plan_cache()
    plan.Memo.clear_all()
    loader._modules.clear()
    loader._functions.clear()
    device._info_for.cache_clear()
    device.CupyBackend._cupy.cache_clear()
    for be in {device.default, device.current()}:
        for cache in ("_opted_in", "_occupancy"):
            getattr(be, cache, {}).clear()
    device.release_workspaces()
    from dmlq import dispatch

    dispatch.NATIVE_GPU_TYPES.clear()


@contextlib.contextmanager
def installed(run_kernels: bool = True):
    """The stand-in as ``cupy`` inside the block, dmlq's device state forgotten
    on entry and on exit."""
    import dmlq  # noqa: F401 - loaded before cupy is swapped

    forget_dmlq_state()
    reset()
    cp = install(run_kernels)
    try:
        yield cp
    finally:
        uninstall()
        reset()
        forget_dmlq_state()
