"""GPU calls from several threads: first use of a kernel, and the per-thread default stream.

A `gpu` test: on the GPU, and in CI on the cupy stand-in (its streams are ordered only by
waits, so a copy still queued on another stream reads as poison, not as a lucky race).
Expected values: the same calls on NumPy arrays.
"""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import dmlq

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp(cupy_twin):
    import cupy

    return cupy


def _both(*threads):
    """Run each ``threads`` function in its own thread; the exceptions they raised."""
    errors = []

    def run(f):
        try:
            f()
        except BaseException as e:  # (reported to the test)
            errors.append(e)
    ts = [threading.Thread(target=run, args=(f,)) for f in threads]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_two_first_calls_of_a_kernel_past_48_kib_of_shared_memory(cp):
    """Two threads making the first call of a tensor-core tile at once: each made its own
    Function of the kernel, the one kept lacked the shared-memory opt-in, and every later
    call of the kernel failed (CUDA_ERROR_INVALID_VALUE) for the life of the process."""
    from dmlq.gpu import device, loader

    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, (128, 512)).astype(np.int8), rng.integers(-128, 128, (512, 128)).astype(np.int8)
    args = (a, np.float32(0.1), np.uint8(3), b, np.float32(0.2), np.int8(-1), np.float32(0.5))
    ga, gb = cp.asarray(a), cp.asarray(b)
    plan = dmlq.kernel_plan(dmlq.quantized_matmul, ga, *args[1:3], gb, *args[4:], np.uint8(2))
    assert any(launch.shared_mem > 48 * 1024 for launch in plan.launches), str(plan)
    loader._functions.clear()  # as in a new process: no kernel loaded, no opt-in made
    device.current()._opted_in.clear()
    barrier, got = threading.Barrier(2), {}

    def first(i):
        barrier.wait()
        got[i] = dmlq.quantized_matmul(ga, *args[1:3], gb, *args[4:], np.uint8(2)).get()
    assert not _both(lambda: first(0), lambda: first(1))
    want = dmlq.quantized_matmul(*args, np.uint8(2))
    for i in (0, 1):
        np.testing.assert_array_equal(got[i], want)
    np.testing.assert_array_equal(dmlq.quantized_matmul(ga, *args[1:3], gb, *args[4:], np.uint8(7)).get(),
                                  dmlq.quantized_matmul(*args, np.uint8(7)))


def _per_thread_streams(cp, call):
    """``call()`` on each of two threads' per-thread default streams, the second thread's
    made while the first's copies of the call's constants are still queued on its stream."""
    queued, done, got = threading.Event(), threading.Event(), {}

    def first():
        with cp.cuda.Stream(ptds=True) as s:
            r = call()
            queued.set()
            done.wait(60)
            got[0] = r.get(stream=s)

    def second():
        queued.wait(60)
        try:
            with cp.cuda.Stream(ptds=True) as s:
                got[1] = call().get(stream=s)
        finally:
            done.set()
    assert not _both(first, second)
    return got


def test_scale_constants_on_per_thread_default_streams(cp):
    """Handle 2 (cudaStreamPerThread) is another stream in each thread: a constant copied on
    one thread's must not be read by the other's before it lands."""
    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, (64, 256)).astype(np.int8), rng.integers(-128, 128, (256, 64)).astype(np.int8)
    ga, gb = cp.asarray(a), cp.asarray(b)
    got = _per_thread_streams(cp, lambda: dmlq.quantized_matmul(ga, 0.1, 3, gb, 0.2, -1, 0.5, 2))
    want = dmlq.quantized_matmul(a, 0.1, 3, b, 0.2, -1, 0.5, 2)
    for i in (0, 1):
        np.testing.assert_array_equal(got[i], want)


def test_offset_tables_on_per_thread_default_streams(cp):
    """The batched stream kernels' table of per-matrix offsets, uploaded per stream (as above)."""
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (3, 2, 64)).astype(np.int8)
    pb = dmlq.pack(rng.integers(-8, 8, (3, 64, 32)).astype(ml_dtypes.int4))
    sb = rng.random(32).astype(np.float32)
    want = dmlq.matmul_integer_to_float(a, np.float32(0.1), None, pb, sb, None)

    def call():
        return dmlq.matmul_integer_to_float(*_args(cp, a, pb, sb))
    assert "matmul_stream_grouped" in str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, *_args(cp, a, pb, sb)))
    dmlq.calls.clear_plan_cache()
    got = _per_thread_streams(cp, call)
    for i in (0, 1):
        np.testing.assert_array_equal(got[i].view(np.uint32), want.view(np.uint32))


def _args(cp, a, pb, sb):
    return (cp.asarray(a), cp.asarray(np.float32([0.1])), None, dmlq.Packed(cp.asarray(pb.data), pb.shape, pb.dtype),
            cp.asarray(sb), None)


def test_a_later_thread_with_the_same_ident_gets_copies_of_its_own(cp):
    """A thread's ident is given to a later thread once it ends; keyed by it, the later thread's
    per-thread stream read the constants still queued on the first one's."""
    rng = np.random.default_rng(13)
    a, b = rng.integers(-128, 128, (64, 256)).astype(np.int8), rng.integers(-128, 128, (256, 64)).astype(np.int8)
    ga, gb = cp.asarray(a), cp.asarray(b)
    want = dmlq.quantized_matmul(a, 0.1, 3, b, 0.2, -1, 0.5, 2)
    first, kept = [], []

    def call(only_as=None):
        if only_as is not None and threading.get_ident() != only_as:
            return  # (another ident: the case does not arise on this thread)
        first.append(threading.get_ident())
        with cp.cuda.Stream(ptds=True) as s:
            kept.append((dmlq.quantized_matmul(ga, 0.1, 3, gb, 0.2, -1, 0.5, 2), s))  # ends with its work queued
    t = threading.Thread(target=call)
    t.start()
    t.join()
    for _ in range(200):  # a later thread that is given the first one's ident
        t = threading.Thread(target=call, args=(first[0],))
        t.start()
        t.join()
        if len(kept) == 2:
            break
    else:
        pytest.skip("no later thread was given the first one's ident here: the case did not arise")
    result, stream = kept[1]
    np.testing.assert_array_equal(result.get(stream=stream), want)


def test_per_thread_stream_copies_go_with_their_thread(cp):
    """Keyed by a thread's serial, the constants a thread copied on its per-thread default stream
    stayed (a few KiB per thread and signature) after it ended: a thread per task kept them all.
    They live with the thread now; the results stay right."""
    import gc

    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 256, (40, 64)).astype(np.uint8), rng.integers(-128, 128, (64, 24)).astype(np.int8)
    ga, gb = cp.asarray(a), cp.asarray(b)
    want = dmlq.quantized_matmul(a, 0.5, 3, b, 0.25, 5, 40.0, 1)
    got = []

    def task():
        with cp.cuda.Stream(ptds=True) as s:
            got.append(dmlq.quantized_matmul(ga, 0.5, 3, gb, 0.25, 5, 40.0, 1).get(stream=s))

    def threads(n):
        for _ in range(n):
            t = threading.Thread(target=task)
            t.start()
            t.join()
        gc.collect()
        return cp.get_default_memory_pool().used_bytes()
    first = threads(2)
    assert threads(20) <= first
    for g in got:
        np.testing.assert_array_equal(g, want)
