"""out= and memory: an out that is or overlaps an operand gives the fresh out's bits and
is returned itself; an out two of whose elements share memory (a stride-0 axis, overlapping
strides) is refused naming it, leaving its memory as it was, on NumPy, CuPy (the stand-in)
and the descriptor operators. Before the refusal such an out was written by dmlq's threads
(NumPy) or kernels (CuPy) in no fixed order: a large dequantize gave neither the first nor the
last element's value, and the stand-in's dequantize and add kernels another than CuPy's copy."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import DequantizeLinearDesc, TensorDesc, compile_operator

u8, f32 = np.uint8, np.float32
AS = np.lib.stride_tricks.as_strided
SHARED = r"out has elements that share memory"


def _calls(xp):
    """(name, function of out=, the result's shape and dtype) for every public function that
    writes a result, on ``xp`` arrays (NumPy or CuPy)."""
    rng = np.random.default_rng(5)
    x = xp.asarray(rng.standard_normal((4, 6)).astype(f32))
    q = xp.asarray(rng.integers(0, 256, (4, 6), dtype=u8))
    b = xp.asarray(rng.integers(0, 256, (6, 5), dtype=u8))
    img = xp.asarray(rng.integers(0, 256, (1, 2, 5, 5), dtype=u8))
    row = xp.asarray(rng.integers(0, 256, (1, 2, 9), dtype=u8))
    return [
        ("quantize", lambda out: dmlq.quantize_linear(x, 0.05, u8(3), out=out), (4, 6), u8),
        ("quantize int16", lambda out: dmlq.quantize_linear(x, 0.01, dtype=np.int16, out=out), (4, 6), np.int16),
        ("dequantize", lambda out: dmlq.dequantize_linear(q, f32(0.1), u8(4), out=out), (4, 6), f32),
        ("add", lambda out: dmlq.quantized_add(q, 0.1, 3, q, 0.2, 5, 0.15, u8(4), out=out), (4, 6), u8),
        ("quantized_matmul", lambda out: dmlq.quantized_matmul(q, 0.1, u8(3), b, 0.05, u8(2), 0.3, u8(4), out=out),
         (4, 5), u8),
        ("matmul_integer", lambda out: dmlq.matmul_integer(q, b, u8(3), u8(2), out=out), (4, 5), np.int32),
        ("matmul_integer_to_float", lambda out: dmlq.matmul_integer_to_float(q, 0.1, u8(3), b, 0.05, u8(2), out=out),
         (4, 5), f32),
        ("avg_pool", lambda out: dmlq.quantized_avg_pool(img, 0.1, u8(3), 0.1, u8(3), (2, 2), out=out),
         (1, 2, 4, 4), u8),
        ("avg_pool 1-D", lambda out: dmlq.quantized_avg_pool(row, 0.1, u8(3), 0.1, u8(3), (3,), strides=(2,),
                                                             out=out), (1, 2, 4), u8),
    ]


def _sharing_outs(xp, shape, dtype):
    """(poisoned buffer, out): stride 0 on the first axis longer than 1; strides of one element
    on every axis."""
    item = np.dtype(dtype).itemsize
    size = int(np.prod(shape))
    dense = [item * int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    dense[next(i for i, n in enumerate(shape) if n > 1)] = 0
    for strides in (tuple(dense), (item,) * len(shape)):
        buf = xp.asarray(np.full(size * item, 0xA5, u8))
        yield buf, xp.lib.stride_tricks.as_strided(buf.view(dtype), shape, strides)


def _refused_untouched(xp, call, shape, dtype):
    for buf, out in _sharing_outs(xp, shape, dtype):
        with pytest.raises(ValueError, match=SHARED):
            call(out)
        before = np.full(buf.shape, 0xA5, u8)
        np.testing.assert_array_equal(buf if xp is np else buf.get(), before)


@pytest.mark.parametrize("which", range(9))
def test_an_out_whose_elements_share_memory_is_refused(which):
    name, call, shape, dtype = _calls(np)[which]
    _refused_untouched(np, call, shape, dtype)


def test_an_interleaved_out_that_aliases_nothing_is_taken():
    """Strides that fail the sorted-stride test without aliasing (offsets 0 3 2 5 4 7 of (3, 2)
    with element strides (2, 3)) are enumerated and taken."""
    x = np.array([[0.5, -1.0], [2.0, 3.5], [-4.0, 1.5]], f32)
    buf = np.full(8, 0xA5, u8)
    out = AS(buf, (3, 2), (2, 3))
    assert dmlq.quantize_linear(x, 0.5, u8(10), out=out) is out
    np.testing.assert_array_equal(out, dmlq.quantize_linear(x, 0.5, u8(10)))
    assert buf[1] == 0xA5 and buf[6] == 0xA5  # outside out's reach (offsets 0 3 2 5 4 7)


def test_a_large_stride_0_out_is_refused_before_any_thread_writes():
    """The case that gave a racy value: 2**21 elements run in several pieces."""
    q = np.arange(1 << 21, dtype=np.int64).astype(u8)
    buf = np.full(4, 0xA5, u8)
    with pytest.raises(ValueError, match=SHARED):
        dmlq.dequantize_linear(q, f32(0.5), u8(1), out=AS(buf.view(f32), q.shape, (0,)))
    assert (buf == 0xA5).all()


def test_a_descriptor_operator_refuses_such_an_out():
    op = compile_operator(DequantizeLinearDesc(TensorDesc("UINT8", (64,)), TensorDesc("FLOAT32", (64,)), None,
                                               TensorDesc("FLOAT32", (64,))))
    buf = np.full(4, 0xA5, u8)
    with pytest.raises(ValueError, match="OutputTensor \\(out\\) has elements that share memory"):
        op(np.arange(64, dtype=u8), np.full(64, 0.5, f32), out=AS(buf.view(f32), (64,), (0,)))
    assert (buf == 0xA5).all()


@pytest.mark.gpu
def test_an_out_whose_elements_share_memory_is_refused_on_the_gpu(cupy_twin):
    import cupy

    for name, call, shape, dtype in _calls(cupy):
        _refused_untouched(cupy, call, shape, dtype)


def test_a_cpu_tensor_out_beside_numpy_operands_is_written_and_returned():
    """The README's rule for out= across NumPy and torch: a tensor out beside NumPy operands is
    taken (as NumPy operands beside CPU tensors are); a NumPy out beside tensors is refused."""
    torch = pytest.importorskip("torch")
    q = np.arange(24, dtype=u8).reshape(4, 6)
    out = torch.full((4, 6), 7.0)
    assert dmlq.dequantize_linear(q, f32(0.5), u8(3), out=out) is out
    np.testing.assert_array_equal(out.numpy(), dmlq.dequantize_linear(q, f32(0.5), u8(3)))
    buf = np.full((4, 6), 7.0, f32)
    with pytest.raises(TypeError, match=r"out is a numpy.ndarray but q is a torch tensor"):
        dmlq.dequantize_linear(torch.from_numpy(q), 0.5, 3, out=buf)
    assert (buf == 7.0).all()
