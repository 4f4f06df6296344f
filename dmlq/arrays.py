"""Which backend a call runs on, decided by the array types of its operands.

All NumPy (or Python scalars) -> dmlq.reference. All GPU arrays -> dmlq.gpu:
CuPy arrays as they are, other CUDA arrays (torch tensors, Numba arrays...)
wrapped without a copy through ``__cuda_array_interface__`` or DLPack. A mix of
host and GPU arrays is a TypeError; GPU arrays on a device other than CuPy's
current one are a ValueError.
"""
from __future__ import annotations

import sys

import numpy as np

HOST = "host"
GPU = "gpu"


def _is_gpu(obj) -> bool:
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return True
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None and not isinstance(obj, np.ndarray):
        try:
            return dev()[0] in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        except Exception:
            return False
    return False


def _is_host(obj) -> bool:
    return isinstance(obj, (np.ndarray, np.generic, int, float, bool))


def kind_of(arrays, op: str) -> str:
    """HOST or GPU for the given operands (None entries and Python scalars are neutral)."""
    kinds = set()
    for a in arrays:
        if a is None or isinstance(a, (int, float, bool, np.generic)):
            continue  # scalars go wherever the arrays are
        if _is_gpu(a):
            kinds.add(GPU)
        elif _is_host(a):
            kinds.add(HOST)
        else:
            raise TypeError(f"{op}: unsupported array type {type(a).__name__} "
                            "(expected numpy arrays, cupy arrays or CUDA arrays)")
    if len(kinds) > 1:
        raise TypeError(f"{op}: NumPy and GPU arrays are mixed; put every operand on one side")
    return kinds.pop() if kinds else HOST


def to_gpu_array(obj, op: str, name: str):
    """A cupy.ndarray view of a GPU array on the current device (no copy)."""
    import cupy

    if not isinstance(obj, cupy.ndarray):
        if hasattr(obj, "__cuda_array_interface__"):
            obj = cupy.asarray(obj)
        else:
            obj = cupy.from_dlpack(obj)
    current = cupy.cuda.runtime.getDevice()
    if obj.device.id != current:
        raise ValueError(f"{op}: {name} is on device {obj.device.id} but the current device is "
                         f"{current}; use `with cupy.cuda.Device({obj.device.id}):`")
    return obj


def module(kind: str):
    """The array module (numpy or cupy) of a backend kind."""
    if kind == HOST:
        return np
    import cupy

    return cupy


def backend(kind: str):
    """The module implementing the backend interface for a kind."""
    if kind == HOST:
        from . import reference

        return reference
    from .gpu import ops

    return ops
