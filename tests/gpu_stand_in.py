"""NumPy arrays that dmlq's public functions take for GPU arrays.

With :func:`install`, ``dmlq.quantize_linear(StandIn...)`` and the other public
functions run their whole GPU path -- operand normalization, the per-signature
plan, device constants, dispatch, dmlq.gpu's runners and the launch -- on the
CPU: the "device" is the host harness (kernels compiled with g++) or a device
whose launches do nothing (bench/test_bench_plan.py). Only CuPy is replaced.
"""
from __future__ import annotations

import numpy as np

from dmlq import dispatch
from dmlq.gpu import device


class StandIn(np.ndarray):
    """A NumPy array that dmlq.dispatch treats as a GPU array. Arrays made by
    :func:`to_device` and :class:`Xp` carry their address (``_addr``), as a CuPy
    array does (``a.data.ptr`` costs tens of ns; NumPy's lookup a microsecond)."""


def _mark(a: np.ndarray) -> StandIn:
    s = a.view(StandIn)
    s._addr = a.__array_interface__["data"][0]
    return s


def to_device(a) -> StandIn:
    """A stand-in copy of a host array (its layout kept)."""
    a = np.asarray(a)
    buf = np.empty_like(a)  # same layout for C/F-ordered or transposed inputs
    buf[...] = a
    return _mark(buf)


def address(a) -> int:
    addr = getattr(a, "_addr", None)
    return a.__array_interface__["data"][0] if addr is None else addr


class _Stream:
    """CuPy's current stream (the default one): synchronizations are counted in Xp.syncs."""

    ptr = 0

    @staticmethod
    def synchronize():
        Xp.syncs += 1


class Xp:
    """The few CuPy functions dmlq calls, making stand-ins; counts host-to-device copies
    and stream synchronizations."""

    uploads = 0
    syncs = 0

    class cuda:  # noqa: N801 - cupy.cuda
        @staticmethod
        def get_current_stream():
            return _Stream()

    @staticmethod
    def empty(shape, dtype):
        return _mark(np.empty(shape, dtype))

    @classmethod
    def asarray(cls, a):
        if type(a) is StandIn:
            return a
        cls.uploads += 1
        return to_device(a)

    @staticmethod
    def ascontiguousarray(a):
        return _mark(np.ascontiguousarray(a)) if not a.flags.c_contiguous else a

    @staticmethod
    def broadcast_to(a, shape):
        return np.broadcast_to(a, shape).view(StandIn)

    may_share_memory = staticmethod(np.may_share_memory)


def install(monkeypatch, backend):
    """Route the public functions' GPU calls to ``backend`` (a dmlq.gpu.device
    backend on NumPy arrays: tests.cuda_host's HostDevice, or a launchless one)
    with :class:`StandIn` operands; NumPy arrays stay host arrays."""
    is_gpu = dispatch.is_gpu
    monkeypatch.setattr(dispatch, "is_gpu", lambda a: type(a) is StandIn or is_gpu(a))
    monkeypatch.setattr(dispatch, "NATIVE_GPU_TYPES", {StandIn})
    monkeypatch.setattr(dispatch, "to_gpu_array", lambda a, op, name, current=None: a)
    monkeypatch.setattr(dispatch, "current_device", lambda: 0)
    monkeypatch.setattr(dispatch, "device_id_of", lambda a: 0)
    monkeypatch.setattr(dispatch, "module", lambda kind: np if kind == dispatch.HOST else Xp)
    monkeypatch.setattr(backend, "xp", lambda: Xp, raising=False)
    monkeypatch.setattr(backend, "is_array", lambda a: isinstance(a, StandIn), raising=False)
    monkeypatch.setattr(device, "default", backend)
    Xp.uploads = Xp.syncs = 0
    return backend
