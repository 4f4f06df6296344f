"""DML_FEATURE_LEVEL_6_3 QUANTIZE / DEQUANTIZE descriptors on GPU arrays (dmlq.operator's GPU half).

A compiled :class:`dmlq.QuantizeDesc` / :class:`dmlq.DequantizeDesc` called with GPU arrays runs
on the kernels of the public ``quantize_linear`` / ``dequantize_linear`` beyond int8
(dmlq.gpu.qkernels, cuda/quant_types.cu), bit for bit what the same operator gives on NumPy
arrays. The GPU form of the operands:

- FLOAT32/FLOAT16, INT8/UINT8 tensors: CuPy (or other CUDA) arrays of that dtype, bound as on
  NumPy (Sizes, or a contiguous 1-D buffer read through Strides);
- INT4/UINT4 tensors (CuPy has no int4 dtype): a :class:`dmlq.Packed` of CuPy bytes (two
  elements a byte, ONNX's packing) whose logical ``shape`` is the desc's Sizes (a 1-D shape of
  Sizes' element count also binds), or, for an input whose desc has Strides, a 1-D Packed
  buffer of at least the addressed element count (unpacked on the device, then read through
  the strides). The result of an INT4/UINT4 Quantize is such a Packed (``out=`` one of
  Sizes' shape); an INT4/UINT4 OutputTensor with Strides is refused on the GPU (two elements
  share a byte, so a strided write is a read-modify-write of the buffer).

The quantization tensors go to the kernel in its parameter layout (dmlq.gpu.qkernels.ParamLayout),
planned once per compiled operator and bound geometry (kept in the operator's runners):
per tensor (every Sizes entry 1) and per axis (one dimension of the input's size, the others 1)
read the tensor as it is; one blocked dimension (n entries on a dimension of D, blocks of D / n)
reads it as blocked on that axis, no block repeated (the other dimensions broadcast to the
input's where they are 1); several blocked dimensions repeat every blocked dimension but the
innermost on the device first (CuPy, per call), as several varying unblocked dimensions become
one entry per element. The scale is read as float32 (a FLOAT16 scale widened exactly), the zero
point as int32.
"""
from __future__ import annotations

import math

import numpy as np

from . import dispatch
from .desc import DequantizeDesc, QuantizeDesc, TensorDesc, block_sizes
from .dtypes import DataType
from .errors import UnsupportedError
from .packing import Packed, logical_shape, pack_codes, packed_nbytes, refuse_lazy, unpack

FOUR_BIT = (DataType.INT4, DataType.UINT4)
_PLAN = object()  # the key of an operator's 6.3 plan among a bound geometry's runners


def is_63(desc) -> bool:
    return isinstance(desc, (QuantizeDesc, DequantizeDesc))


def check_packed(desc, op: str, name: str, value: Packed, tensor: TensorDesc) -> None:
    """A TypeError naming ``name`` unless the Packed binds here: CuPy bytes for an INT4/UINT4
    tensor of a 6.3 Quantize/Dequantize (dmlq.Packed's GPU form)."""
    refuse_lazy(op, name, value)
    out = name == "OutputTensor"
    if not dispatch.is_gpu(value.data):
        raise TypeError(f"{op}: {name} is a dmlq.Packed of host bytes; on NumPy arrays a descriptor binds one "
                        f"element per byte (an ml_dtypes {value.dtype} array, whatever TotalTensorSizeInBytes "
                        "counts): " + ("pass an array and dmlq.pack the result" if out
                                      else "pass dmlq.unpack() of it") +
                        " (a Packed of CuPy bytes binds an INT4/UINT4 tensor of a 6.3 Quantize/Dequantize on "
                        "the GPU)")
    if not is_63(desc) or tensor.data_type not in FOUR_BIT:
        raise TypeError(f"{op}: {name} is a dmlq.Packed; on the GPU only an INT4/UINT4 tensor of a DML 6.3 "
                        f"Quantize/Dequantize binds one, and {name} is {tensor.data_type.name}: pass a CuPy array "
                        f"of {tensor.data_type.numpy.name}")


def check_plain(op: str, name: str, value, tensor: TensorDesc) -> None:
    """A GPU array where an INT4/UINT4 tensor of a 6.3 operator goes: a TypeError with the form."""
    if value is None or isinstance(value, Packed) or tensor.data_type not in FOUR_BIT:
        return
    t = tensor.data_type.numpy.name
    what = "out" if name == "OutputTensor" else name
    raise TypeError(f"{op}: {name} is {tensor.data_type.name}, which CuPy cannot hold: on the GPU pass {what} as "
                    f"a dmlq.Packed of CuPy bytes (dmlq.pack(codes, dtype='{t}'), codes a uint8 CuPy array)"
                    + (", or leave out=None" if what == "out" else "") +
                    f" (got {type(value).__name__} {getattr(value, 'dtype', '')})")


def bind_packed(value: Packed, tensor: TensorDesc, op: str, name: str):
    """A Packed operand of an INT4/UINT4 tensor on the GPU as the desc describes it: the Packed
    itself with Sizes as its shape (no Strides), or its codes (uint8, one a byte) unpacked on the
    device and read through the desc's Strides."""
    want = tensor.data_type.numpy.name
    if value.dtype != want:
        raise TypeError(f"{op}: {name} must be {tensor.data_type.name} (got a dmlq.Packed of {value.dtype})")
    shape = logical_shape(value.shape, f"{op}: {name} is a dmlq.Packed whose")
    data = dispatch.to_gpu_array(value.data, op, f"{name}.data")
    n = math.prod(shape)
    need = packed_nbytes(n, want)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise TypeError(f"{op}: {name} is a dmlq.Packed whose data must be a 1-D uint8 array of packed bytes "
                        f"(got {data.dtype} {tuple(data.shape)})")
    if data.size != need or not data.flags.c_contiguous:
        raise ValueError(f"{op}: {name} is a dmlq.Packed of {n} {want} elements (shape {shape}); its data must be "
                         f"{need} contiguous bytes (got {data.size}"
                         f"{'' if data.flags.c_contiguous else ', not contiguous'})")
    if tensor.strides is None:
        if shape == tensor.sizes or len(shape) == 1 and n == tensor.element_count:
            return Packed(data, tensor.sizes, want)
        raise ValueError(f"{op}: {name} has shape {shape}, the desc's Sizes are {tensor.sizes}")
    if name == "OutputTensor":
        raise refuse_strided_output(op, tensor)
    if len(shape) != 1:
        raise ValueError(f"{op}: {name} must be a 1-D dmlq.Packed buffer because its desc has Strides "
                         f"(got shape {shape})")
    if n < tensor.minimum_element_count:
        raise ValueError(f"{op}: {name} holds {n} elements; Sizes {tensor.sizes} with Strides {tensor.strides} "
                         f"address {tensor.minimum_element_count}")
    codes = unpack(data, shape, want, codes=True)
    return dispatch.module(dispatch.GPU).lib.stride_tricks.as_strided(codes, tensor.sizes, tensor.strides)


def refuse_strided_output(op: str, tensor: TensorDesc) -> UnsupportedError:
    return UnsupportedError(f"{op}: OutputTensor is {tensor.data_type.name} with Strides {tensor.strides}; on the "
                            "GPU a 4-bit output is written packed and dense (two elements share a byte), so its "
                            "desc must have no Strides there (NumPy arrays take it)")


def new_output(tensor: TensorDesc, op: str) -> Packed:
    """out=None for an INT4/UINT4 OutputTensor on the GPU: a Packed of new CuPy bytes."""
    if tensor.strides is not None:
        raise refuse_strided_output(op, tensor)
    name = tensor.data_type.numpy.name
    data = dispatch.module(dispatch.GPU).empty(packed_nbytes(tensor.element_count, name), np.uint8)
    return Packed(data, tensor.sizes, name)


def geometry(a):
    """A bound operand's part of the runners' key."""
    if a is None:
        return None
    if isinstance(a, Packed):
        return a.shape, a.dtype
    return a.shape, a.strides, a.dtype.str


# ------------------------------------------------------------------ the plan

def param_plan(psizes, xsizes):
    """(layout, view, broadcast): the kernel's ParamLayout (D, inner, S, B) for quantization
    tensors of Sizes ``psizes`` on an input of Sizes ``xsizes``, and how one is placed in it: reshaped
    to ``view`` (a blocked dimension other than the layout's split into (n, 1)), broadcast to
    ``broadcast`` and made C-contiguous. The walker reads entry ((o * S + d / B) * inner + i) for
    element (o, d, i) of (outer, D, inner) around the layout's axis."""
    r = len(xsizes)
    n = max(math.prod(xsizes), 1)
    varying = [a for a in range(r) if psizes[a] > 1]
    blocked = [a for a in range(r) if 1 < psizes[a] < xsizes[a]]
    if not varying:  # per tensor
        return (n, 1, 1, n), (1,), (1,)
    if not blocked and len(varying) == 1:  # per axis: (D * inner, 1, S=0, B=inner) reads entry d
        a = varying[0]
        d, inner = xsizes[a], math.prod(xsizes[a + 1:])
        return (max(d * inner, 1), 1, 0, max(inner, 1)), (d,), (d,)
    # blocked on one axis (the innermost blocked one), the others as the input's: (outer, S, inner)
    ax = blocked[-1] if blocked else varying[0]
    b = block_sizes(psizes, xsizes)[ax] if blocked else 1
    s = xsizes[ax] // b
    view: list = []
    broadcast: list = []
    for a in range(r):
        if a == ax:
            view.append(s)
            broadcast.append(s)
        elif a in blocked:  # repeated on the device: entry i // (D / n)
            view += [psizes[a], 1]
            broadcast += [psizes[a], xsizes[a] // psizes[a]]
        else:  # 1 (broadcast) or the input's size
            view.append(psizes[a])
            broadcast.append(xsizes[a])
    return (xsizes[ax], max(math.prod(xsizes[ax + 1:]), 1), s, b), tuple(view), tuple(broadcast)


def _place(v, view, broadcast, dtype):
    xp = dispatch.module(dispatch.GPU)
    return xp.ascontiguousarray(xp.broadcast_to(v.reshape(view), broadcast), dtype).reshape(-1)


def _zero_point_codes(v, name):
    """A zero point's int32 values: of an 8-bit array, or of int4/uint4 codes (a Packed or a
    strided view of unpacked codes), sign-extended for int4."""
    if isinstance(v, Packed):
        v = unpack(v.data, v.shape, v.dtype, codes=True)
    if name not in ("int4", "uint4"):
        return v
    v = v.astype(np.int32)
    return (v ^ 8) - 8 if name == "int4" else v


def run(desc, v: dict, out, runners: dict, write):
    """The 6.3 operator on bound GPU operands ``v`` into ``out`` (an array, or a Packed for an
    INT4/UINT4 Quantize); ``write``: dmlq.dispatch.write with the runners of this geometry."""
    quantize = isinstance(desc, QuantizeDesc)
    plan = runners.get(_PLAN)
    if plan is None:
        x_desc, tensors = desc.input_tensor, desc.quantization_tensors
        qname = (desc.output_tensor if quantize else x_desc).data_type.numpy.name
        plan = runners[_PLAN] = (qname, *param_plan(tensors[0].sizes, x_desc.sizes))
    qname, layout, view, broadcast = plan
    if desc.input_tensor.element_count == 0:
        return out
    xp = dispatch.module(dispatch.GPU)
    x = v["input_tensor"]
    scale = _place(v["quantization_tensors[0]"], view, broadcast, np.float32)
    zp = v.get("quantization_tensors[1]")
    if zp is not None:
        zp = _place(_zero_point_codes(zp, qname), view, broadcast, np.int32)
    be = dispatch.backend(dispatch.GPU)
    if quantize:
        if not x.flags.c_contiguous:
            x = xp.ascontiguousarray(x)
        write(be.quantize_types, (x, scale, zp), out.data if isinstance(out, Packed) else out, dispatch.GPU,
              (qname, layout, True, None), runners)
        return out
    if isinstance(x, Packed):
        q = x.data
    elif qname in ("int4", "uint4"):  # codes read through Strides
        q = pack_codes(x, qname).data
    else:
        q = x if x.flags.c_contiguous else xp.ascontiguousarray(x)
    write(be.dequantize_types, (q, scale, zp), out, dispatch.GPU, (qname, layout), runners)
    return out
