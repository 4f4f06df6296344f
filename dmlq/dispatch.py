"""Dispatch, the bottom layer: which backend runs a call, and running it.

The layers read one way: ``dmlq.api`` (public NumPy-like functions) ->
``dmlq.operator`` (descriptors bound to arrays) -> ``dmlq.validation`` (the
DirectML rules) -> this module (reference or GPU). Nothing here imports the
layers above it.

The array types of a call's operands pick its backend: all NumPy (or Python
scalars) -> :mod:`dmlq.cpu`; all GPU arrays -> :mod:`dmlq.gpu`. CuPy
arrays are used as they are, other CUDA arrays (torch tensors, Numba arrays...)
are wrapped without a copy through ``__cuda_array_interface__`` or DLPack. CPU
arrays that speak DLPack (a torch CPU tensor) are wrapped as NumPy arrays
without a copy. A mix of host and GPU arrays is a TypeError; GPU arrays on a
device other than CuPy's current one are a ValueError.
"""
from __future__ import annotations

import functools
import importlib
import itertools
import operator
import sys
from typing import Any, Callable, Optional

import numpy as np

from .gpu.interop import cuda_array

HOST = "host"
GPU = "gpu"

_CPU_DLPACK = 1          # kDLCPU


# The GPU array types the API takes as they are (cupy.ndarray, once one is seen):
# a fast type test for the common case.
NATIVE_GPU_TYPES: set = set()


def is_gpu(obj) -> bool:
    """True for CuPy arrays and other CUDA arrays (CUDA array interface or CUDA DLPack)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        NATIVE_GPU_TYPES.add(cupy.ndarray)
        return True
    return cuda_array(obj)


def cpu_dlpack(obj) -> bool:
    """True for a non-NumPy object that exports a CPU DLPack tensor (torch CPU tensors)."""
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or isinstance(obj, np.ndarray) or not hasattr(obj, "__dlpack__"):
        return False
    try:
        return dev()[0] == _CPU_DLPACK
    except Exception:
        return False


class Foreign(Exception):
    """Raised while a call's operands are normalized: a torch tensor or a dask
    array, whose call :data:`foreign_call` hands to dmlq.torch or dmlq.dask."""


# (fname, operand names, operands, params, out) -> result: dmlq.frameworks.call, installed on import of dmlq.
foreign_call: Optional[Callable[..., Any]] = None


def to_adapter(fname: str, names: tuple, values: tuple, params: tuple, out: Any) -> Any:
    """:data:`foreign_call` of a call whose operands :func:`foreign` found (it registered the adapter)."""
    assert foreign_call is not None
    return foreign_call(fname, names, values, params, out)


def foreign(obj) -> bool:
    """True for a torch tensor (a subclass defined anywhere too) or a dask array (neither
    module is imported here)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return True
    array = sys.modules.get("dask.array")  # (a subclass defined anywhere too: np.asarray would compute it)
    return array is not None and isinstance(obj, array.Array)


def lazy_inside(obj) -> bool:
    """Whether a list or tuple holds a dask array at any depth (np.asarray would compute it)."""
    array = sys.modules.get("dask.array")
    if array is None:
        return False
    if isinstance(obj, array.Array):
        return True
    level = [obj] if isinstance(obj, (list, tuple)) else []
    while level:  # one nesting level at a time, its element types found in one pass in C
        kinds = set(map(type, itertools.chain.from_iterable(level)))
        if any(issubclass(k, array.Array) for k in kinds):
            return True
        if not any(issubclass(k, (list, tuple)) for k in kinds):
            return False
        level = [e for e in itertools.chain.from_iterable(level) if isinstance(e, (list, tuple))]
    return False


def _is_host(obj) -> bool:
    return isinstance(obj, (np.ndarray, np.generic, int, float, bool))


def kind_of(arrays, op: str, names=None) -> str:
    """HOST or GPU for the given operands (None entries and Python scalars are neutral);
    ``names``, one per operand, name the offending one in the errors."""
    kinds: dict = {}
    for i, a in enumerate(arrays):
        if a is None or isinstance(a, (int, float, bool, np.generic)):
            continue  # scalars go wherever the arrays are
        name = f"{names[i]} " if names is not None else ""
        if is_gpu(a):
            kinds.setdefault(GPU, name)
        elif _is_host(a):
            kinds.setdefault(HOST, name)
        else:
            mod = type(a).__module__.partition(".")[0]
            fix = {"dask": "; compute it first (.compute())", "torch": "; pass t.numpy() for a CPU tensor",
                   "builtins": "; pass a numpy array"}.get(mod, "")
            raise TypeError(f"{op}: {name}is an unsupported array type {type(a).__module__}.{type(a).__name__} "
                            f"(expected numpy arrays, cupy arrays or CUDA arrays){fix}")
    if len(kinds) > 1:
        which = f" ({kinds[HOST]}is on the host, {kinds[GPU]}on the GPU)" if names is not None else ""
        raise TypeError(f"{op}: NumPy and GPU arrays are mixed{which}; put every operand on one side")
    return next(iter(kinds)) if kinds else HOST


def import_cupy():
    """The cupy module, or an ImportError saying how to install it: a GPU array (one with
    ``__cuda_array_interface__``) reached dmlq on a machine without CuPy."""
    cupy = sys.modules.get("cupy")  # cheaper than an import statement on every call
    if cupy is not None:
        return cupy
    try:
        return importlib.import_module("cupy")
    except ModuleNotFoundError as e:
        if e.name != "cupy":
            raise
        raise ImportError("dmlq runs GPU arrays through CuPy, which is not installed: pip install cupy-cuda13x "
                          "(or cupy-cuda12x for a CUDA 12 driver; dmlq's extras .[cuda13] / .[cuda12])") from None


def current_device() -> int:
    """CuPy's current device."""
    return import_cupy().cuda.runtime.getDevice()


# The device a cupy.ndarray lives on: a C-level attribute chain, no Python frame.
device_id_of = operator.attrgetter("data.device_id")


def to_gpu_array(obj, op: str, name: str, current: Optional[int] = None):
    """A cupy.ndarray view of a GPU array on the current device (no copy);
    ``current``: the current device, when the caller has asked already."""
    cupy = import_cupy()

    if not isinstance(obj, cupy.ndarray):
        if hasattr(obj, "__cuda_array_interface__"):
            obj = cupy.asarray(obj)
        elif hasattr(obj, "__dlpack__"):
            obj = cupy.from_dlpack(obj)
        else:
            raise TypeError(f"{op}: {name} must be a GPU array like the other operands (got "
                            f"{type(obj).__name__} {obj!r:.40}); pass cupy.asarray(...) of it (a 1-element "
                            "array for one value)")
    if current is None:
        current = cupy.cuda.runtime.getDevice()
    on = device_id_of(obj)
    if on != current:
        raise ValueError(f"{op}: {name} is on device {on} but the current device is {current}; use "
                         f"`with cupy.cuda.Device({on}):`")
    return obj


def refuse_unaligned(op: str, names, arrays) -> None:
    """A GPU operand whose data does not start at a multiple of its itemsize (a view of bytes at an
    odd offset) is a ValueError naming it: the kernels read and write whole elements, and a
    misaligned access is a fault that ends the process's CUDA context."""
    for name, a in zip(names, arrays):
        if a is None or isinstance(a, (np.ndarray, np.generic, int, float, complex)):
            continue
        ptr, size = getattr(getattr(a, "data", None), "ptr", 0), getattr(a, "itemsize", 1)
        if size > 1 and ptr % size:
            fix = "pass an aligned out, or leave out=None" if name in ("out", "OutputTensor") else \
                f"pass {name}.copy() (a new array, aligned)"
            raise ValueError(f"{op}: {name}'s data is not aligned to its itemsize ({size} bytes; its address is "
                             f"{ptr % size} past a multiple of it), and the kernels read and write whole elements; "
                             f"{fix}")


class DeviceConstant:
    """A host value a GPU kernel reads from device memory (a scale given as a
    Python number): copied once per device and stream, on first use there, then
    reused by every call of the signature that holds it.

    A copy is made on the stream that reads it, so the kernels after it on that
    stream see it complete without a synchronize (CuPy stages a host array
    through pinned memory and copies asynchronously), and another stream never
    reads a copy still in flight: it gets its own. When the signature is
    forgotten the copies go back to CuPy's pool, which hands a block freed on a
    stream only to later work on that same stream -- after every kernel that
    read it."""

    __slots__ = ("host", "_copies", "__weakref__")

    def __init__(self, host):
        self.host = host
        self._copies = {}

    def then(self, fn):
        """The constant ``fn(host)``: a later conversion applied once, on the host."""
        return DeviceConstant(fn(self.host))

    def on(self, dev: int):
        """The copy on device ``dev`` for CuPy's current stream (made now if there is none)."""
        device = sys.modules.get("dmlq.gpu.device") or importlib.import_module("dmlq.gpu.device")
        return device.stream_copy(self, self._copies, lambda: device.upload(module(GPU), self.host), (dev,))


def module(kind: str):
    """The array module (numpy or cupy) of a backend kind."""
    if kind == HOST:
        return np
    return import_cupy()


_BACKENDS: dict = {}


def backend(kind: str):
    """The module implementing the backend interface for a kind: dmlq.cpu (the fast
    CPU backend, bit-identical to dmlq.reference) or dmlq.gpu.ops."""
    be = _BACKENDS.get(kind)
    if be is None:
        if kind == HOST:
            from . import cpu as be
        else:
            from .gpu import ops as be
        _BACKENDS[kind] = be
    return be


def kernel_plan(name: str, args, out, kind: str, params=()):
    """The GPU backend's plan for ``name(*args, out, *params)``; for host arrays,
    on a nominal device (no GPU needed)."""
    from .gpu import device, ops

    fn = getattr(ops, f"plan_{name}")
    if kind != HOST:
        return fn(*args, out, *params)
    with device.using(device.NominalDevice()):
        return fn(*args, out, *params)


def fresh_writer(fn, kind, runners=None):
    """``go(args, out, params)``: :func:`write` for a freshly allocated, non-empty
    ``out`` (no overlap to test), with the backend's path resolved once."""
    if runners is not None and kind != HOST:
        return functools.partial(backend(kind).run, fn, runners)
    return lambda args, out, params: fn(*args, out, *params)


def write(fn, args, out, kind, params=(), runners=None):
    """Run the backend function ``fn(*args, out, *params)`` and return ``out``.

    When ``out`` may share memory with an input the result goes through a
    temporary first, so an overlapping ``out`` is never half-read (a freshly
    allocated ``out`` cannot overlap: it goes through :func:`fresh_writer`).
    ``runners``: for a GPU call, a dict the caller keeps per call signature,
    where the GPU backend keeps what a repeated call runs (dmlq.gpu.ops.run).
    """
    if out.size == 0:
        return out
    target = out
    xp = np if kind == HOST else module(kind)
    # Only arrays of out's own kind can share its memory: a GPU call's host
    # scalars (0-d NumPy arrays) cannot, and CuPy refuses NumPy arrays.
    if any(isinstance(a, xp.ndarray) and xp.may_share_memory(a, out) for a in args):
        target = xp.empty(out.shape, out.dtype)
    if runners is not None and kind != HOST:
        backend(kind).run(fn, runners, args, target, params)
    else:
        fn(*args, target, *params)
    if target is not out:
        out[...] = target
    return out
