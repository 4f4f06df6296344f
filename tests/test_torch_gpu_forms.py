"""Narrow-type torch tensors in dmlq's GPU form (dmlq.torch_gpu, dmlq.torch's CUDA path).

On CPU: the same functions run with NumPy as the array module and ``Tensor.numpy`` as the view
(what dmlq.torch passes on CUDA: CuPy and ``cupy.asarray``), and the forms they make go
through dmlq's public functions on the NumPy path, which takes dmlq.Packed as the GPU path
does: the result equals the same call on the tensors' ml_dtypes views. Zero copy where the
form allows (one-byte types: the Packed's data is the tensor's memory). On CUDA (gpu marker,
the next device session): the public functions on CUDA tensors of every narrow type against
the same calls on CPU tensors, on torch's current stream, output from torch's allocator.
"""
from __future__ import annotations

import numpy as np
import pytest

import dmlq

torch = pytest.importorskip("torch")
md = pytest.importorskip("ml_dtypes")
from dmlq import torch as dtorch  # noqa: E402  (needs torch)
from dmlq import torch_gpu  # noqa: E402

ONE_BYTE = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
SUB_BYTE = ("int4", "uint4", "int2", "uint2")


def _cpu_form(t, as_out=False):
    byte = dtorch._VIEWED[t.dtype][0]
    fn = torch_gpu.out_form if as_out else torch_gpu.to_form
    return fn(t, byte, np, lambda u: u.numpy(), np.dtype(md.bfloat16))


def _tensor(rng, name, shape):
    """A tensor of torch's dtype ``name`` with random codes (one element per byte, low bits)."""
    dt = getattr(torch, name)
    bits = 4 if name in ("int4", "uint4") else 2 if name in ("int2", "uint2") else 8
    codes = rng.integers(0, 1 << bits, shape).astype(np.uint8)
    return torch.from_numpy(codes).view(dt), codes.view(np.dtype(getattr(md, name)))


@pytest.mark.parametrize("name", ONE_BYTE + SUB_BYTE)
def test_forms_dequantize_as_the_ml_dtypes_views(rng, name):
    t, host = _tensor(rng, name, (5, 12))
    form = _cpu_form(t)
    assert isinstance(form, dmlq.Packed) and form.shape == (5, 12) and form.dtype == name
    if name in ONE_BYTE:  # the tensor's own bytes, no copy
        assert np.shares_memory(form.data, t.view(torch.uint8).numpy())
    s = rng.uniform(0.1, 2, (5, 3)).astype(np.float32)
    got = dmlq.dequantize_linear(form, s, block_size=4)
    want = dmlq.dequantize_linear(host, s, block_size=4)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_bfloat16_and_e8m0_forms(rng):
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    form = _cpu_form(x)
    assert form.dtype == md.bfloat16 and np.shares_memory(form, x.view(torch.int16).numpy())
    np.testing.assert_array_equal(form.astype(np.float32), x.float().numpy())
    codes = rng.integers(120, 135, (4, 2)).astype(np.uint8)
    e = torch.from_numpy(codes).view(torch.float8_e8m0fnu)
    s = _cpu_form(e)
    assert isinstance(s, dmlq.Packed) and s.dtype == "float8_e8m0fnu" and np.shares_memory(s.data, codes)
    xs = x.float().numpy()
    got = dmlq.quantize_linear(xs, s, dtype="int4", block_size=4)
    want = dmlq.quantize_linear(xs, codes.view(md.float8_e8m0fnu), dtype="int4", block_size=4)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("name", ONE_BYTE + SUB_BYTE)
def test_out_forms_fill_the_tensor(rng, name):
    """out_form: the one-byte types write the tensor's memory; the sub-byte types a packed buffer
    that finish() unpacks into the tensor's bytes (low bits, as ml_dtypes holds them)."""
    x = (rng.standard_normal((3, 7)) * 3).astype(np.float32)
    want = dmlq.quantize_linear(x, np.float32(0.5), dtype=name)
    out = torch.empty(3, 7, dtype=getattr(torch, name))
    out.view(torch.uint8).fill_(0xA5)
    target, finish = _cpu_form(out, as_out=True)
    packed = dmlq.pack(want)
    target.data[...] = packed.data  # what the kernel writes: the packed bytes
    finish()
    np.testing.assert_array_equal(out.view(torch.uint8).numpy(), want.view(np.uint8))


def test_float4_x2_forms_are_its_bytes(rng):
    """A torch.float4_e2m1fn_x2 tensor (n bytes a row) is already the packed form the kernels read:
    a Packed of its bytes (the tensor's memory where contiguous, a C-order copy where strided) with
    the values' shape (2 n a row); as out= the Packed is its memory (contiguous only)."""
    x2 = torch.float4_e2m1fn_x2
    codes = rng.integers(0, 16, (5, 12)).astype(np.uint8)
    values = codes.view(md.float4_e2m1fn)
    data = codes[:, 0::2] | (codes[:, 1::2] << 4)  # torch's header: val1 : val0, the first in bits 3..0
    t = torch.from_numpy(data.copy()).view(x2)
    form = _cpu_form(t)
    assert isinstance(form, dmlq.Packed) and form.shape == (5, 12) and form.dtype == "float4_e2m1fn"
    assert np.shares_memory(form.data, t.view(torch.uint8).numpy())
    np.testing.assert_array_equal(dmlq.unpack(form).view(np.uint8), codes)
    wide = torch.from_numpy(np.concatenate([data, data], 1)).view(x2)[:, 6:]  # strided rows
    np.testing.assert_array_equal(dmlq.unpack(_cpu_form(wide)).view(np.uint8), codes)
    s = rng.uniform(0.1, 2, (5, 3)).astype(np.float32)
    got = dmlq.dequantize_linear(form, s, block_size=4)
    np.testing.assert_array_equal(got.view(np.uint32), dmlq.dequantize_linear(values, s, block_size=4).view(np.uint32))
    out = torch.empty(5, 6, dtype=x2)
    target, finish = _cpu_form(out, as_out=True)
    assert target.shape == (5, 12) and np.shares_memory(target.data, out.view(torch.uint8).numpy())
    target.data[...] = dmlq.pack(values).data  # what the kernel writes
    finish()
    np.testing.assert_array_equal(out.view(torch.uint8).numpy(), data)
    with pytest.raises(ValueError, match=r"out: a float4_e2m1fn_x2 out tensor must be contiguous"):
        _cpu_form(torch.empty(5, 12, dtype=torch.uint8)[:, :6].view(x2), as_out=True)
    meta = dmlq.calls.output_meta(dmlq.dequantize_linear, torch_gpu.stand_in(t, md.float4_e2m1fn),
                                  np.float32(1))
    assert meta == ((5, 12), np.dtype(np.float32))


def test_stand_in_gives_the_logical_result():
    x = torch.zeros(6, 10)
    meta = dmlq.calls.output_meta(dmlq.quantize_linear, torch_gpu.stand_in(x, np.float32), np.float32(1),
                                  dtype="int4", axis=1)
    assert meta == ((6, 10), np.dtype(md.int4))
    assert dtorch.torch_dtype(meta[1]) == torch.int4


# ---- CUDA tensors: for the next device session

class _ReportsCuda(torch.Tensor):
    """A CPU tensor whose DLPack device says CUDA (2): what dispatch.is_gpu sees of a CUDA tensor."""

    def __dlpack_device__(self):
        return (2, 0)


@pytest.mark.parametrize("name", ["int4", "float8_e4m3fn"])
def test_a_torch_tensor_that_looks_like_cuda_goes_to_the_torch_adapter(rng, name):
    # The first H100 session: a CUDA tensor of a narrow type reached dmlq.quant_gpu as a torch
    # tensor (quant_gpu.on_gpu sent every GPU-looking operand there) and was refused with
    # UnsupportedError; every torch tensor goes to dmlq.torch, which converts CUDA tensors.
    x = torch.from_numpy((rng.standard_normal((3, 32)) * 5).astype(np.float32))
    s = torch.from_numpy(rng.uniform(0.1, 2, (3, 2)).astype(np.float32))
    looks, s_looks = x.as_subclass(_ReportsCuda), s.as_subclass(_ReportsCuda)
    assert dmlq.dispatch.is_gpu(looks) and dmlq.dispatch.foreign(looks)
    assert not dmlq.quant_gpu.on_gpu(looks, s_looks, None, None)
    got = dmlq.quantize_linear(looks, s_looks, dtype=name, block_size=16)
    want = dmlq.quantize_linear(x, s, dtype=name, block_size=16)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch.device("cuda", torch.cuda.current_device())  # tensors report their index: cuda:0, never cuda


@pytest.mark.gpu
@pytest.mark.parametrize("name", ONE_BYTE + SUB_BYTE)
def test_cuda_tensors_of_every_narrow_type(rng, name):
    dev = _cuda()
    x = torch.from_numpy((rng.standard_normal((6, 40)) * 5).astype(np.float32))
    s = torch.from_numpy(rng.uniform(0.1, 2, (6, 3)).astype(np.float32))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        q = dmlq.quantize_linear(x.to(dev), s.to(dev), dtype=name, block_size=16)
        assert q.device.type == "cuda" and q.dtype == getattr(torch, name) and q.shape == x.shape
        want = dmlq.quantize_linear(x, s, dtype=name, block_size=16)
        assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))
        for odt in (torch.float32, torch.float16, torch.bfloat16):
            y = dmlq.dequantize_linear(q, s.to(dev), block_size=16, dtype=odt)
            yw = dmlq.dequantize_linear(want, s, block_size=16, dtype=odt)
            assert y.dtype == odt and torch.equal(y.cpu().view(torch.int16 if odt != torch.float32 else torch.int32),
                                                  yw.view(torch.int16 if odt != torch.float32 else torch.int32))
        out = torch.empty_like(q)
        assert dmlq.quantize_linear(x.to(dev), s.to(dev), dtype=name, block_size=16, out=out) is out
        assert torch.equal(out.cpu().view(torch.uint8), want.view(torch.uint8))


@pytest.mark.gpu
def test_cuda_float4_e2m1fn_x2_tensors(rng):
    """float4 on CUDA tensors: torch.float4_e2m1fn_x2 in and out, its bytes handed to the kernels as
    they lie (no packing pass), the same bytes as the CPU path's; e8m0 scales of 32-blocks (MXFP4)."""
    dev = _cuda()
    x2 = torch.float4_e2m1fn_x2
    x = torch.from_numpy((rng.standard_normal((6, 64)) * 5).astype(np.float32))
    e = torch.from_numpy(rng.integers(124, 130, (6, 2)).astype(np.uint8)).view(torch.float8_e8m0fnu)
    q = dmlq.quantize_linear(x.to(dev), e.to(dev), dtype=x2, block_size=32)
    want = dmlq.quantize_linear(x, e, dtype=x2, block_size=32)
    assert q.device.type == "cuda" and q.dtype == x2 and q.shape == (6, 32)
    assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))
    for odt in (torch.float32, torch.bfloat16):
        y = dmlq.dequantize_linear(q, e.to(dev), block_size=32, dtype=odt)
        yw = dmlq.dequantize_linear(want, e, block_size=32, dtype=odt)
        bits = torch.int16 if odt == torch.bfloat16 else torch.int32
        assert y.shape == (6, 64) and torch.equal(y.cpu().view(bits), yw.view(bits))
    out = torch.empty_like(q)
    assert dmlq.quantize_linear(x.to(dev), e.to(dev), dtype="float4_e2m1fn", block_size=32, out=out) is out
    assert torch.equal(out.cpu().view(torch.uint8), want.view(torch.uint8))


@pytest.mark.gpu
def test_cuda_bfloat16_and_e8m0_scales(rng):
    dev = _cuda()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    e = torch.from_numpy(rng.integers(120, 135, (4, 2)).astype(np.uint8)).view(torch.float8_e8m0fnu)
    got = dmlq.quantize_linear(x.to(dev), e.to(dev), dtype=torch.float8_e4m3fn, block_size=32)
    want = dmlq.quantize_linear(x, e, dtype=torch.float8_e4m3fn, block_size=32)
    assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8))
    back = dmlq.dequantize_linear(got, e.to(dev), block_size=32, dtype=torch.bfloat16)
    assert torch.equal(back.cpu().view(torch.int16),
                       dmlq.dequantize_linear(want, e, block_size=32, dtype=torch.bfloat16).view(torch.int16))


def test_only_a_narrow_type_takes_the_stand_in_pass():
    """dmlq.torch's CUDA path makes a quantize or dequantize call's result shape and dtype from
    NumPy stand-ins only where a narrow type may be involved (its GPU form is bytes, so the CuPy
    views would give the bytes' shape): a tensor of one, or a dtype= that is not NumPy's own.
    Plain calls take the CuPy views' answer at once, one pass through dmlq.calls.run fewer."""
    x, zp8 = torch.zeros(3), torch.zeros((), dtype=torch.uint8)
    assert not dtorch._narrow((x, 0.5, zp8), {})
    assert not dtorch._narrow((x, 0.5, 3), dtorch._kwargs({"dtype": torch.int8}))
    assert not dtorch._narrow((x, 0.5, None), {"dtype": np.uint16})
    for name in ONE_BYTE + SUB_BYTE:
        if hasattr(torch, name):
            assert dtorch._narrow((torch.zeros(2, dtype=getattr(torch, name)), 0.5, None), {}), name
            assert dtorch._narrow((x, 0.5, None), dtorch._kwargs({"dtype": getattr(torch, name)})), name
        assert dtorch._narrow((x, 0.5, None), {"dtype": name}), name
        assert dtorch._narrow((x, 0.5, None), {"dtype": np.dtype(getattr(md, name))}), name
    assert dtorch._narrow((x, torch.ones((), dtype=torch.bfloat16), None), {})
    assert dtorch._narrow((x, 0.5, None), {"dtype": object()})  # not a dtype: the full path's error
