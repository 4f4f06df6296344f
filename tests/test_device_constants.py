"""Scalar scales that matmul and pooling read from device memory reach the device
without a synchronize, and no stream reads a copy made for another (issue 24,
defects 5 and 7): dispatch.DeviceConstant against a stand-in for the ``cupy``
module that records each stream's uploads and synchronizations (only CuPy is
faked; dmlq's own code runs as it is)."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from dmlq import dispatch


class _Stream:
    def __init__(self, ptr):
        self.ptr = ptr
        self.synchronized = 0

    def synchronize(self):
        self.synchronized += 1


@pytest.fixture
def cupy(monkeypatch):
    """A ``cupy`` with a current stream to switch, an ``asarray`` that records the
    stream it copies on, and ``Stream.synchronize`` counted."""
    fake = types.ModuleType("cupy")
    fake.streams = {p: _Stream(p) for p in (0, 7, 9)}
    fake.current = fake.streams[0]
    fake.uploads = []
    fake.cuda = types.SimpleNamespace(get_current_stream=lambda: fake.current)

    def asarray(a):
        fake.uploads.append(fake.current.ptr)
        return np.array(a)  # the device copy

    fake.asarray = asarray
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def test_a_scalar_scale_is_uploaded_once_per_stream_without_a_synchronize(cupy):
    scale = dispatch.DeviceConstant(np.array([0.5], np.float32))
    first = scale.on(0)
    assert scale.on(0) is first and cupy.uploads == [0]  # once, on the stream that reads it
    assert sum(s.synchronized for s in cupy.streams.values()) == 0  # no call waits for the GPU


def test_another_stream_never_reads_a_copy_made_on_the_first(cupy):
    scale = dispatch.DeviceConstant(np.array([0.5], np.float32))
    on_default = scale.on(0)
    cupy.current = cupy.streams[7]
    on_seven = scale.on(0)
    assert on_seven is not on_default and cupy.uploads == [0, 7]  # its own copy, made on stream 7
    assert scale.on(1) is not on_seven and cupy.uploads == [0, 7, 7]  # and per device
    cupy.current = cupy.streams[0]
    assert scale.on(0) is on_default and cupy.uploads == [0, 7, 7]
    assert sum(s.synchronized for s in cupy.streams.values()) == 0
