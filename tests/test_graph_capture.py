"""Calls captured in a CUDA graph keep their memory (dmlq.gpu.capture).

A graph's kernels keep the addresses they were captured with. A call's temporaries (split-K
partial sums, row and column sums, the packed operands of 4-bit types, the result made for an
overlapping out) came from CuPy's pool and went back to it when the call returned, so arrays
allocated after the capture were given those blocks and every launch of the graph wrote into
them. Each case here: the call made once outside the capture (plans and constants), then
captured on a created stream; then arrays of many sizes allocated and filled with a pattern;
then the graph launched twice. The result must equal the NumPy path's and every pattern must
be intact. A `gpu` test: on the GPU, and in CI on the cupy stand-in, whose pool hands freed
blocks to later allocations on the same stream as CuPy's does.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq.check_cases import _dynamic_bytes

pytestmark = pytest.mark.gpu
f32, u8, i8 = np.float32, np.uint8, np.int8
SIZES = (16, 64, 256, 512, 1024, 4096, 8192, 16384, 65536, 262144)


@pytest.fixture
def cp(cupy_twin):
    import cupy

    return cupy


def _host(v):
    if isinstance(v, dmlq.Packed):
        return dmlq.Packed(_host(v.data), v.shape, v.dtype)
    return v.get() if hasattr(v, "get") else v


def _device(cp, v):
    if isinstance(v, dmlq.Packed):
        return dmlq.Packed(cp.asarray(v.data), v.shape, v.dtype)
    return cp.asarray(v) if isinstance(v, np.ndarray) else v


def _bytes(v):
    """The elements' bytes, one element per byte for a packed type (unpacked on the host)."""
    v = _host(v)
    return np.asarray(dmlq.unpack(v) if isinstance(v, dmlq.Packed) else v).view(np.uint8)


def _rng_ints(rng, dt, shape):
    info = ml_dtypes.iinfo(dt) if np.dtype(dt).itemsize == 1 and np.dtype(dt).name in ("int4", "uint4") \
        else np.iinfo(dt)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dt)


def _cases(rng):
    """name -> (function, host arguments, keyword arguments, whether out is the first operand)."""
    a1 = _rng_ints(rng, u8, (1, 2048))
    b1 = _rng_ints(rng, i8, (2048, 64))
    b4 = dmlq.pack(_rng_ints(rng, np.dtype(ml_dtypes.uint4), (256, 64)))
    a4 = _rng_ints(rng, u8, (1, 256))
    bs = rng.uniform(0.01, 0.1, (8, 64)).astype(f32)
    a2, b2 = _rng_ints(rng, u8, (40, 64)), _rng_ints(rng, i8, (64, 24))
    x = rng.normal(0, 4, (3, 70)).astype(f32)
    q8 = _rng_ints(rng, u8, (5, 33))
    return {
        # stream-m1 with split-K: int32 partial sums
        "split-K partial sums": (dmlq.quantized_matmul, (a1, f32(0.5), u8(3), b1, f32(0.25), i8(0), f32(40.0),
                                                          u8(0)), {}, False),
        # a packed uint4 b, scales in groups of 32 along K: the grouped stream kernel's work buffer
        "packed 4-bit b, blocked scales": (dmlq.matmul_integer_to_float, (a4, f32(0.5), u8(3), b4, bs, None),
                                           {"block_size": 32}, False),
        # the dp4a tiles with both zero points: row and column sums (the shared scratch outside a capture)
        "row and column sums": (dmlq.quantized_matmul, (a2, f32(0.5), u8(3), b2, f32(0.25), i8(5), f32(40.0),
                                                        u8(1)), {}, False),
        # a packed int4 result
        "int4 result": (dmlq.quantize_linear, (x, f32(0.5), None), {"dtype": "int4"}, False),
        # out overlapping an operand: the result is made in a temporary, then copied
        "out overlapping a": (dmlq.quantized_add, (q8, f32(0.1), u8(128), q8, f32(0.2), u8(3), f32(0.3), u8(7)),
                              {}, True),
        # packing a CuPy array
        "pack": (dmlq.pack, (rng.integers(0, 16, (9, 7)).astype(u8),), {"dtype": "int4"}, False),
        # the range's per-block pairs, the device scale and zero point (its three results joined, as dmlq check does)
        "dynamic quantize": (_dynamic_bytes, (rng.normal(0, 4, (7, 300)).astype(np.float16)[::-1],), {"dtype": i8},
                             False),
    }


def test_a_captured_call_keeps_its_memory(cp):
    """Every case in one test (the stand-in's sample of twins would run only some)."""
    for name, case in _cases(np.random.default_rng(11)).items():
        _capture_and_launch(cp, name, *case)


def _capture_and_launch(cp, name, fn, args, kwargs, out_is_first):
    want = _bytes(fn(*args, **kwargs))  # the NumPy path
    dev = [_device(cp, v) for v in args]
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        if out_is_first:
            kwargs = {**kwargs, "out": dev[0]}
            first = dev[0].copy()
        got = fn(*dev, **kwargs)  # outside the capture: plans, kernels, constants
        s.synchronize()
        np.testing.assert_array_equal(_bytes(got), want, err_msg=name)
        if out_is_first:
            dev[0][...] = first
        s.synchronize()
        s.begin_capture()
        try:
            result = fn(*dev, **kwargs)
        finally:
            graph = s.end_capture()
        later = [cp.full((n,), 0xA5, u8) for n in SIZES]  # given what the pool has free now
        for _ in range(2):
            if out_is_first:
                dev[0][...] = first
            graph.launch(s)
            s.synchronize()
            np.testing.assert_array_equal(_bytes(result), want, err_msg=name)
            for arr in later:
                assert (arr.get() == 0xA5).all(), f"{name}: a launch of the graph wrote into a later {arr.size}-byte array"
    assert dmlq.release_graph_memory() > 0


def test_held_memory_is_released_once_and_only_for_captures(cp):
    rng = np.random.default_rng(5)
    fn, args, kwargs, _ = _cases(rng)["split-K partial sums"]
    dev = [_device(cp, v) for v in args]
    dmlq.release_graph_memory()
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        fn(*dev, **kwargs)
        s.synchronize()
        assert dmlq.release_graph_memory() == 0  # nothing held for a call that was not captured
        s.begin_capture()
        try:
            fn(*dev, **kwargs)
        finally:
            s.end_capture()
    assert dmlq.release_graph_memory() >= 4 * 8 * 64  # the int32 partial sums at least
    assert dmlq.release_graph_memory() == 0


def test_constants_a_graph_reads_outlive_the_plan_cache(cp):
    """Scales given as numbers are device constants the calls of one signature share, freed when
    the signature is forgotten (the plan cache is cleared when full): a graph that reads them
    keeps them until release_graph_memory."""
    rng = np.random.default_rng(8)
    a, b = _rng_ints(rng, u8, (40, 64)), _rng_ints(rng, i8, (64, 24))
    want = dmlq.quantized_matmul(a, 0.5, 3, b, 0.25, 5, 40.0, 1)
    ga, gb = cp.asarray(a), cp.asarray(b)
    _once(cp, lambda: dmlq.quantized_matmul(ga, 0.5, 3, gb, 0.25, 5, 40.0, 1), want, dmlq.calls.clear_plan_cache)


def _once(cp, call, want, after_capture=lambda: None):
    """``call()`` made on a created stream (its constants copied there), captured, ``after_capture()``,
    arrays allocated on that stream, the graph launched: the result is ``want``, the arrays intact."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        call()
        s.synchronize()
        s.begin_capture()
        try:
            result = call()
        finally:
            graph = s.end_capture()
        after_capture()
        later = [cp.full((n,), 0xA5, u8) for n in SIZES]
        graph.launch(s)
        s.synchronize()
    np.testing.assert_array_equal(result.get(), want)
    assert all((arr.get() == 0xA5).all() for arr in later)
    dmlq.release_graph_memory()


def test_a_cupy_without_a_device_hides_no_capture(cp):
    """Where a cupy module cannot be asked (no driver, no device), no capture is running; that
    answer is kept for that module only (the suite's stand-in twins ran after the real CuPy)."""
    from dmlq.gpu import capture

    class NoDevice:
        class cuda:
            @staticmethod
            def get_current_stream():
                raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    assert not capture.capturing(NoDevice)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        assert not capture.capturing(cp)
        s.begin_capture()
        try:
            assert capture.capturing(cp)
        finally:
            s.end_capture()


def test_a_descriptor_operator_is_captured(cp):
    """An Operator call planned (and its offset table uploaded) anew on every call: inside a
    capture that upload was a refused host-to-device copy. Its runners are kept per geometry."""
    from dmlq import MatrixMultiplyIntegerDesc, TensorDesc, compile_operator

    rng = np.random.default_rng(21)
    M, K, N = 1, 512, 64
    op = compile_operator(MatrixMultiplyIntegerDesc(a_tensor=TensorDesc("UINT8", (1, 1, M, K)),
                                                    b_tensor=TensorDesc("UINT8", (1, 1, K, N)),
                                                    output_tensor=TensorDesc("INT32", (1, 1, M, N))))
    a, b = _rng_ints(rng, u8, (1, 1, M, K)), _rng_ints(rng, u8, (1, 1, K, N))
    ga, gb = cp.asarray(a), cp.asarray(b)
    _once(cp, lambda: op(ga, gb), op(a, b))


def test_a_6_3_descriptor_operator_is_captured(cp):
    """A DML 6.3 Quantize / Dequantize on GPU arrays (dmlq.quantize63) keeps its plan and runners per
    bound geometry too: captured with int4/uint4 Packed operands and blocked quantization tensors
    (the zero point unpacked and both placed in the kernel's layout on the device, in the graph)."""
    from dmlq import DequantizeDesc, QuantizeDesc, TensorDesc as T, compile_operator

    rng = np.random.default_rng(63)
    shape, pshape = (8, 64), (8, 2)
    q = _rng_ints(rng, np.dtype(ml_dtypes.int4), shape)
    s = rng.uniform(0.01, 0.1, pshape).astype(f32)
    z = _rng_ints(rng, np.dtype(ml_dtypes.int4), pshape)
    deq = compile_operator(DequantizeDesc(T("INT4", shape), "SCALE_ZERO_POINT", None,
                                          [T("FLOAT32", pshape), T("INT4", pshape)], T("FLOAT32", shape)), "6.3")
    gq, gs, gz = _device(cp, dmlq.pack(q)), cp.asarray(s), _device(cp, dmlq.pack(z))
    _once(cp, lambda: deq(gq, gs, gz), deq(q, s, z))
    x = rng.normal(0, 4, shape).astype(np.float16)
    s16 = s.astype(np.float16)
    z4 = _rng_ints(rng, np.dtype(ml_dtypes.uint4), pshape)
    quant = compile_operator(QuantizeDesc(T("FLOAT16", shape), "SCALE_ZERO_POINT", None,
                                          [T("FLOAT16", pshape), T("UINT4", pshape)], T("UINT4", shape)), "6.3")
    gx, gs16, gz4 = cp.asarray(x), cp.asarray(s16), _device(cp, dmlq.pack(z4))
    _once(cp, lambda: quant(gx, gs16, gz4).data, dmlq.pack(quant(x, s16, z4)).data)
    assert len(deq._runners) == 1 and len(quant._runners) == 1


def test_release_is_refused_while_capturing(cp):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="release_graph_memory: CuPy's current stream is capturing"):
                dmlq.release_graph_memory()
        finally:
            s.end_capture()


def test_numpy_calls_ask_cuda_nothing(cp, monkeypatch):
    """A call on NumPy arrays (lists, keywords, a Packed of NumPy bytes, a descriptor operator)
    goes straight through with CuPy imported: asking whether a stream captures would make a CUDA
    context for a NumPy-only program. A call on GPU arrays asks."""
    from dmlq import QuantizeLinearDesc, TensorDesc, compile_operator

    asked = []
    real = type(cp.cuda.get_current_stream()).is_capturing
    monkeypatch.setattr(type(cp.cuda.get_current_stream()), "is_capturing",
                        lambda self: asked.append(1) or real(self))
    x = np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
    p = dmlq.pack(np.arange(-4, 4, dtype=np.int8).astype(ml_dtypes.int4))
    op = compile_operator(QuantizeLinearDesc(input_tensor=TensorDesc("FLOAT32", (3, 4)),
                                             scale_tensor=TensorDesc("FLOAT32", (3, 4), strides=(0, 0)),
                                             output_tensor=TensorDesc("UINT8", (3, 4))))
    dmlq.quantize_linear(x=x, scale=0.5)
    dmlq.quantize_linear([1.0, 2.0], 0.5)
    dmlq.dequantize_linear(p, 0.5)
    dmlq.unpack(p)
    op(x, np.float32([0.5]))
    assert not asked
    dmlq.quantize_linear(cp.asarray(x), 0.5)
    assert asked
