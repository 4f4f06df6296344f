"""CUDA tensors of the narrow types in dmlq's GPU form, and back (dmlq.torch's CUDA path).

CuPy holds none of torch's float8 / int4 / int2 / float8_e8m0fnu dtypes, so such a tensor is
handed to dmlq.quant_gpu in the form it takes (dmlq.quant_gpu's module text):

- bfloat16: a CuPy bfloat16 view of its bytes (the tensor's memory, no copy);
- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and a float8_e8m0fnu scale: ``dmlq.Packed`` whose
  data is a uint8 CuPy view of the tensor's bytes (one per element: no copy);
- int4, uint4, int2, uint2 (torch holds one element per byte, the code in the low bits, as
  ml_dtypes does): packed as ONNX packs them (two or four per byte) into a new CuPy array,
  since the kernels read the packed bytes; a result of such a type is unpacked back into the
  tensor's bytes.

Every function takes the array module (``xp``) and the function making an ``xp`` array of a
tensor's memory (``view``): dmlq.torch passes CuPy and ``cupy.asarray`` (the CUDA array
interface, no copy, on the current stream); tests/test_torch_gpu_forms.py runs the same code
with NumPy and ``Tensor.numpy`` on CPU tensors.
"""
from __future__ import annotations

import math

import numpy as np

from .dtypes import torch_name
from .packing import Packed, pack, unpack
from .qtypes import QTYPES
from .torch_dtypes import logical_shape

E8M0 = "float8_e8m0fnu"
PAIRS = "float4_e2m1fn_x2"  # torch's float4_e2m1fn, two elements of the last axis a byte




def bytes_of(t, byte_dtype, view):
    """An ``xp`` array of the tensor's bytes as ``byte_dtype`` (torch.uint8 / torch.int16), its shape."""
    return view(t.detach().view(byte_dtype))


def to_form(t, byte_dtype, xp, view, bfloat16):
    """The GPU form of a narrow-type tensor ``t`` (see the module text); ``bfloat16``: the
    array module's bfloat16 dtype."""
    name = torch_name(t.dtype)
    raw = bytes_of(t, byte_dtype, view)
    if name == "bfloat16":
        return raw.view(bfloat16)
    shape = tuple(int(s) for s in t.shape)
    if name == PAIRS:  # already ONNX's packed bytes (a row's elements in order, the first in the low nibble)
        return Packed(xp.ascontiguousarray(raw).reshape(-1), logical_shape(t), "float4_e2m1fn")
    if name == E8M0 or QTYPES[name].is_float:
        return Packed(xp.ascontiguousarray(raw).reshape(-1), shape, name)
    q = QTYPES[name]
    return pack(raw & ((1 << q.bits) - 1), dtype=name)


def out_form(t, byte_dtype, xp, view, bfloat16):
    """(the array dmlq writes for the output tensor ``t``, finish()): for the one-byte types a
    view of ``t``'s memory (finish does nothing); for the 4-bit and 2-bit types a packed
    buffer that finish() unpacks into ``t``'s bytes."""
    name = torch_name(t.dtype)
    if name == PAIRS or name == "bfloat16" or QTYPES[name].is_float:
        if name != "bfloat16" and not t.is_contiguous():
            raise ValueError(f"out: a {name} out tensor must be contiguous (it is written as its bytes); pass "
                             "a contiguous tensor or leave out=None")
        return to_form(t, byte_dtype, xp, view, bfloat16), lambda: None
    q = QTYPES[name]
    shape = tuple(int(s) for s in t.shape)
    buf = Packed(xp.zeros((math.prod(shape) * q.bits + 7) // 8, np.uint8), shape, name)

    def finish():
        bytes_of(t, byte_dtype, view)[...] = unpack(buf, codes=True)
    return buf, finish


def stand_in(t, numpy_dtype):
    """A NumPy stand-in of tensor ``t`` (zeros broadcast to the shape of the values it holds:
    a float4_e2m1fn_x2 tensor's last axis doubled; NumPy's form of its dtype):
    dmlq.calls.output_meta on stand-ins gives the logical result (the type and shape a tensor
    holds), where the GPU form of a narrow type would be bytes."""
    return np.broadcast_to(np.zeros((), numpy_dtype), logical_shape(t))
