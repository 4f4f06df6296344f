"""Scalar scales that matmul and pooling read from device memory reach the device
without a synchronize, and no stream reads a copy made for another (issue 24,
defects 5 and 7): dispatch.DeviceConstant on the cupy stand-in
(tests/cupy_stand_in), which counts uploads and synchronizations (only CuPy is
faked; dmlq's own code runs as it is)."""
from __future__ import annotations

import numpy as np
import pytest

import cupy_stand_in as S
from dmlq import dispatch


def test_a_scalar_scale_is_uploaded_once_per_stream_without_a_synchronize(cupy_stand_in):
    scale = dispatch.DeviceConstant(np.array([0.5], np.float32))
    first = scale.on(0)
    assert scale.on(0) is first and S.counts["uploads"] == 1  # once, on the stream that reads it
    assert S.counts["syncs"] == 0  # no call waits for the GPU
    np.testing.assert_array_equal(first.get(), [0.5])


def test_another_stream_never_reads_a_copy_made_on_the_first(cupy_stand_in):
    cp = cupy_stand_in
    scale = dispatch.DeviceConstant(np.array([0.5], np.float32))
    on_default = scale.on(0)
    with cp.cuda.Stream(non_blocking=True):
        on_other = scale.on(0)
        assert on_other is not on_default and S.counts["uploads"] == 2  # its own copy, on that stream
    with cp.cuda.Device(1):
        on_one = scale.on(1)
        assert on_one.device.id == 1 and S.counts["uploads"] == 3  # and per device
    assert scale.on(0) is on_default and S.counts["uploads"] == 3
    assert S.counts["syncs"] == 0


def _matmul_with_float_scales(cp, seed):
    """(call, want): a quantized_matmul of device arrays (copied on the null stream,
    complete before any call) with Python-float scales, and its NumPy result."""
    import dmlq

    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (9, 40), dtype=np.uint8)
    b = rng.integers(-128, 128, (40, 7), dtype=np.int8)
    args = (0.02, np.uint8(3), None, 0.01, np.int8(-7), 0.8, np.int8(2))
    da, db = cp.asarray(a), cp.asarray(b)
    return (lambda: dmlq.quantized_matmul(da, *args[:2], db, *args[3:]),
            dmlq.quantized_matmul(a, *args[:2], b, *args[3:]))


def test_a_call_on_a_second_stream_never_reads_the_first_streams_copy_in_flight(cupy_stand_in):
    """A Python-float scale is copied to the device on the stream of the call that
    needs it. On the stand-in a copy on a created stream lands only when that
    stream's work is ordered (as on a GPU, where it may still be in flight), so
    a call on a second stream that read the first stream's copy would compute
    with the fresh allocation's leftovers; with its own copy it is exact."""
    cp = cupy_stand_in
    call, want = _matmul_with_float_scales(cp, 5)
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        call()  # copies 0.02 and 0.01 on `first`, not run yet
    with second:
        got = call().get()  # runs `second`'s work, not `first`'s
    assert not first.done
    np.testing.assert_array_equal(got, want)


def test_a_copy_freed_with_its_plan_is_reused_only_behind_the_kernels_that_read_it(cupy_stand_in):
    """Defect 5 with CuPy's pool (the stand-in models CuPy 14.2's: a freed block
    goes back to the arena of the stream it was allocated on, and that stream's
    next request gets it at once). A scale's copies go back to the pool when
    their plan is forgotten, maybe before a kernel on some stream has read them.
    Here: a call on the null stream (its copies made and read there), the same
    call on a second stream (pending), every plan forgotten, and the null
    stream's next requests filled with 1e30. A copy made per stream and read only
    there is safe; a call that read the null stream's copy (copies keyed by
    device only) computes with 1e30."""
    import gc

    from dmlq import calls

    cp = cupy_stand_in
    call, want = _matmul_with_float_scales(cp, 6)
    call()  # the null stream: copies made and read now
    second = cp.cuda.Stream(non_blocking=True)
    with second:
        out = call()  # pending
    calls.clear_plan_cache()
    gc.collect()
    pool = cp.get_default_memory_pool()
    assert pool.n_free_blocks() >= 3  # the null stream's three scale copies are back in the pool
    junk = [cp.full(128, 1e30, cp.float32) for _ in range(8)]  # noqa: F841 - they take the freed blocks
    assert not second.done
    second.synchronize()
    np.testing.assert_array_equal(out.get(), want)


@pytest.mark.parametrize("b_kind", ["int8", "packed uint4"])
def test_a_stream_kernels_offsets_table_is_uploaded_per_stream(cupy_stand_in, b_kind):
    """The weight-streaming kernels read their per-matrix offsets from a table the runner uploads.
    Uploaded once per runner (as it was), a call on a second stream read the first stream's copy
    before it landed (the stand-in: the fresh allocation's leftovers; a crashed kernel); uploaded per
    stream, each call reads its own."""
    import dmlq

    cp = cupy_stand_in
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (2, 3, 40), dtype=np.uint8)
    b = rng.integers(-128, 128, (2, 40, 7), dtype=np.int8)
    if b_kind != "int8":
        b = dmlq.pack(rng.integers(0, 16, (2, 40, 7), dtype=np.uint8).astype("uint4"))
    args = (0.02, np.uint8(3), None, 0.01, None, 0.8, np.int8(2))
    want = dmlq.quantized_matmul(a, *args[:2], b, *args[3:])
    da = cp.asarray(a)
    db = cp.asarray(b) if b_kind == "int8" else dmlq.Packed(cp.asarray(b.data), b.shape, b.dtype)
    assert "stream-m4" in str(dmlq.kernel_plan(dmlq.quantized_matmul, da, *args[:2], db, *args[3:]))
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        dmlq.quantized_matmul(da, *args[:2], db, *args[3:])  # uploads on `first`, not run yet
    with second:
        got = dmlq.quantized_matmul(da, *args[:2], db, *args[3:]).get()
    assert not first.done
    np.testing.assert_array_equal(got, want)
