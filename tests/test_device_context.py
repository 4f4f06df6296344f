"""The device in use is chosen per context, never by swapping a process-wide
global (issue 24, defect 9): ``device.using`` -- which ``kernel_plan`` on NumPy
arrays enters with a nominal H100 -- changes the device of the calling thread
only, so a GPU call planned at the same time on another thread still plans on
CuPy's device."""
from __future__ import annotations

import threading

import numpy as np

import dmlq
from dmlq.gpu import device


def _while_using(dev, observe):
    """Run ``observe()`` in other threads while one thread is inside ``using(dev)``."""
    inside, entered, release = [], threading.Event(), threading.Event()

    def hold():
        with device.using(dev):
            inside.append(device.current())
            entered.set()
            release.wait(60)
        inside.append(device.current())

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(60)
        seen = [observe()]
        other = threading.Thread(target=lambda: seen.append(observe()))
        other.start()
        other.join(60)
    finally:
        release.set()
        holder.join(60)
    return inside, seen


def test_using_changes_the_device_of_the_calling_thread_only():
    nominal = device.NominalDevice()
    inside, seen = _while_using(nominal, device.current)
    assert inside == [nominal, device.default]  # entered, then left
    assert seen == [device.default, device.default]  # this thread, and a third one


def test_kernel_plan_leaves_every_thread_on_its_device():
    before = device.current()
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        str(dmlq.kernel_plan(dmlq.quantize_linear, np.ones(64, np.float32), 0.5)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 4 and all("quantize_contig" in r for r in results)
    assert device.current() is before is device.default


def test_nested_using_restores_in_order():
    a, b = device.NominalDevice(), device.NominalDevice()
    with device.using(a):
        with device.using(b):
            assert device.current() is b
        assert device.current() is a
    assert device.current() is device.default
