"""4-bit B of the integer matmuls (matmul_integer, matmul_integer_to_float,
quantized_matmul): the ``dmlq.Packed`` operand and 4-bit zero points.

A packed b travels to the backend as its bytes (1-D uint8, ONNX's nibble
order: element i of the C-order (..., K, N) tensor in the low nibble of byte
i // 2 when i is even) with the keyword parameter ``b_packed = (dtype name,
logical shape, zp_wide)``; the planner checks the bytes against the shape and
plans on a shape-only stand-in of the logical tensor. dmlq.reference unpacks;
the GPU kernel (cuda/matmul_stream.cu) reads the bytes.

A ``dmlq.TransposedPacked`` b (``dmlq.pack(w).mT``: the bytes of an (..., N, K)
tensor, torch's Linear and onnxruntime's MatMulNBits layout) travels as its bytes
with ``b_packed = (dtype name, logical (..., K, N) shape, zp_wide, True)``: read
K-major (dmlq.packing.unpack_b; the GPU's stream kernels read it as it is).

A 4-bit b's zero point is a Python int, an ml_dtypes int4/uint4 array (NumPy),
or a ``dmlq.Packed`` of b's type. On the GPU (CuPy has no 4-bit dtype) a packed
zero point is unpacked on the device to its values in int8 (int4) or uint8
(uint4), and ``zp_wide`` says so; a Python int becomes that wide type too.

A 2-bit b (int2 / uint2: onnxruntime's MatMulNBits with ``bits=2``) runs as the 4-bit b
of the same values (int2 -> int4, uint2 -> uint4; the sums are the same numbers): an
ml_dtypes array through ``astype``, a Packed's bytes rewritten as packed 4-bit bytes
(NumPy here; on the GPU one launch of cuda/packed_table.cu's widen_codes2, which
dmlq.kernel_plan lists first), the layout kept (a TransposedPacked stays one). Its zero
point has its 2-bit type (or is a Python int in its range), checked here, then widened
alike (a GPU Packed straight to its int8 / uint8 table).
"""
from __future__ import annotations

import numbers
import sys

import ml_dtypes
import numpy as np

from . import calls, dispatch
from .checks import GPU
from .errors import DescError
from .gpu.packed import stored_shape, unpack_table, widen_launch
from .packing import (WIDER, Packed, TransposedPacked, check_bytes, held, packed_nbytes, refuse_lazy, unpack,
                      widen_bytes)
from .qtypes import qtype

I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
I2, U2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)
FOUR_BIT = (I4, U4)
B_NARROW = FOUR_BIT + (I2, U2)  # b's narrow types as errors name them
_WIDE = {I4: np.dtype(np.int8), U4: np.dtype(np.uint8)}
_NAMES = {"int4": I4, "uint4": U4}
_TWO_BIT = {"int2": I2, "uint2": U2}


def _type_name(p):
    """A Packed's type as its name: dmlq.unpack and dequantize_linear also read a dtype, its type
    object or another spelling of the name (np.dtype(ml_dtypes.int4), "INT4"); None for no type."""
    try:
        return qtype(p.dtype).name
    except TypeError:
        return None


def _bytes_of(f, name, p):
    if _type_name(p) not in _NAMES and _type_name(p) not in _TWO_BIT:
        raise TypeError(f"{f}: a packed {name} must be int4, uint4, int2 or uint2 (got a dmlq.Packed of {p.dtype})")
    data = p.data
    refuse_lazy(f, name, p)  # dask bytes or a torch tensor: named, with the line that fixes it
    if not (isinstance(data, np.ndarray) or dispatch.is_gpu(data)):
        raise TypeError(f"{f}: {name} is a dmlq.Packed whose data is a {type(data).__name__}; its bytes must be "
                        "a NumPy or CuPy uint8 array (dmlq.pack makes one)")
    return data


def _beside_tensors(values) -> bool:
    """A torch tensor among ``values`` and no dask array: dmlq.torch takes the call as it is and
    calls the public function again on the tensors' NumPy or CuPy views, on their device and
    stream, where a Packed is taken (taken here, a GPU zero point would be unpacked on CuPy's
    current device and stream, and dmlq.kernel_plan would see a 4-bit array, not the Packed)."""
    torch = sys.modules.get("torch")
    if torch is None or not any(isinstance(v, torch.Tensor) for v in values):
        return False
    return not any(dispatch.foreign(v) and not isinstance(v, torch.Tensor) for v in values)


def take(f, b, b_zero_point, beside=()):
    """The public function's (b, b_zero_point, b_packed): a Packed b as its bytes and
    the parameter that describes them; a Packed zero point unpacked (NumPy: the
    ml_dtypes array; GPU: its values in the wide type, zp_wide True). Beside torch
    tensors (among ``beside``, the call's other operands and out) both go on as they are."""
    packed = None
    if isinstance(b, (Packed, TransposedPacked)) and _beside_tensors((b_zero_point, *beside)):
        return b, b_zero_point, None
    two = _two_bit_name(b)  # (its zero point's type is checked by _two_bit, before both are widened)
    b, b_zero_point = _two_bit(f, b, b_zero_point)
    if isinstance(b, (Packed, TransposedPacked)):
        data = _bytes_of(f, "b", b)
        # (a TransposedPacked: the bytes of the (..., N, row) tensor, read K-major, row >= K its rows' length)
        packed = (_type_name(b), tuple(int(s) for s in b.shape), False, isinstance(b, TransposedPacked))
        if isinstance(b, TransposedPacked):
            packed += (int(b.packed.shape[-1]),)
        b = data
    if isinstance(b_zero_point, (Packed, TransposedPacked)):
        data = _bytes_of(f, "b_zero_point", b_zero_point)
        zname = _type_name(b_zero_point)
        bdt = _NAMES.get(packed[0]) if packed else getattr(b, "dtype", None)
        if bdt is not None and not isinstance(bdt, np.dtype):  # a torch.int4 / uint4 tensor's dtype: that type
            bdt = _NAMES.get(str(bdt).rpartition(".")[2])
        if two is None and (bdt is None or _NAMES.get(zname) != bdt):
            raise TypeError(f"{f}: b_zero_point is a dmlq.Packed of {zname}; it must have b's "
                            f"dtype ({'a packed ' + packed[0] if packed else getattr(b, 'dtype', type(b).__name__)})")
        if isinstance(data, np.ndarray):
            b_zero_point = unpack(b_zero_point)  # (a TransposedPacked: the transposed view of its values)
        else:
            if packed is None:
                raise TypeError(f"{f}: a packed b_zero_point on the GPU needs a packed b")
            # its values as int8 / uint8, C order, in one launch (cuda/packed_table.cu) on the current device,
            # where its bytes must be (as any operand's)
            stored, k = held(b_zero_point, f"{f}: b_zero_point's")
            check_bytes(data, stored, zname)
            data = dispatch.to_gpu_array(data, f, "b_zero_point's bytes")
            b_zero_point = unpack_table(data, zname, stored, k, values=calls.EXPLAINING.get() is not calls.META)
            packed = packed[:2] + (True,) + packed[3:]
    return b, b_zero_point, packed


def _two_bit_name(v):
    """int2 / uint2 where ``v`` is a 2-bit Packed, TransposedPacked or ml_dtypes array, else None."""
    if isinstance(v, (Packed, TransposedPacked)):
        name = _type_name(v)
        return name if name in _TWO_BIT else None
    dt = getattr(v, "dtype", None)
    if isinstance(dt, np.dtype):
        return next((n for n, t in _TWO_BIT.items() if t == dt), None)
    return None


def _two_bit(f, b, zp):
    """(b, b_zero_point) with a 2-bit b and its zero point as the 4-bit ones of the same values (the
    module text); a zero point of another type than b's, or a Python int out of its range, refused
    in the words the 4-bit checks use."""
    name = _two_bit_name(b)
    if name is None:
        return b, zp
    dt = _TWO_BIT[name]
    if isinstance(zp, numbers.Integral) and not isinstance(zp, (bool, np.bool_)):
        _check_range(f, "b_zero_point", zp, dt, "(b's dtype)")
    elif zp is not None and _two_bit_name(zp) != name:
        got = (f"a dmlq.Packed of {zp.dtype}" if isinstance(zp, (Packed, TransposedPacked))
               else getattr(zp, "dtype", type(zp).__name__))
        raise _zp_type_error(f, "b_zero_point", dt, "(b's dtype)", got)
    return _widened(f, "b", b), _widened(f, "b_zero_point", zp)


def _widened(f, name, v):
    """A 2-bit operand (or None, or a Python int) as the 4-bit one of its values."""
    if isinstance(v, TransposedPacked):
        return TransposedPacked(_widened(f, name, v.packed), v.k)
    if isinstance(v, Packed):
        data = _bytes_of(f, name, v)
        stored, _ = held(v, f"{f}: {name}'s")
        _check_held(f, name, data, _type_name(v), stored, stored)
        count = int(np.prod(stored, dtype=np.int64))
        if name == "b_zero_point" and not isinstance(data, np.ndarray):
            return v  # GPU bytes: dmlq.packed_b.take unpacks its table from the 2-bit bytes
        if not isinstance(data, np.ndarray):  # read by a launch on the current device, where they must be
            data = dispatch.to_gpu_array(data, f, f"{name}'s bytes")
        mode = calls.EXPLAINING.get()
        wide = widen_bytes(data, count, _type_name(v) == "int2", launch=mode is False, meta=mode == calls.META)
        if mode is True and name == "b":  # dmlq.kernel_plan: what the GPU runs first
            calls.PRELUDE.get().append(widen_launch(count, isinstance(data, np.ndarray) or data.data.ptr % 16 == 0))
        return Packed(wide, stored, WIDER[_type_name(v)])
    if v is None or isinstance(v, numbers.Integral):
        return v
    return v.astype(_NAMES[WIDER[_two_bit_name(v)]])


def stand_in(bld, packed):
    """Check the packed bytes (operand ``b`` of the builder) against their shape and
    put a shape-only stand-in of the logical tensor in their place for the checks."""
    f = bld.f
    name, shape = packed[0], packed[1]
    data = bld.v["b"]
    dt = _NAMES[name]
    if len(shape) < 2:
        raise DescError(f"{f}: a and b must be matrices or vectors (b is a dmlq.Packed of shape {shape})")
    # (a TransposedPacked: its Packed's shape, whose rows may hold more than K)
    _check_held(f, "b", data, name, stored_shape(packed), shape)
    bld.v["b"] = np.broadcast_to(np.zeros((), dt), shape)


def _check_held(f, operand, data, name, stored, shape):
    """That ``data`` holds the packed ``name`` tensor of C-order shape ``stored`` (``shape`` the one
    the call sees: a TransposedPacked's): 1-D uint8 bytes, as many as it takes; a ValueError naming
    ``operand`` else."""
    need = packed_nbytes(int(np.prod(stored, dtype=np.int64)), name)
    if getattr(data, "dtype", None) != np.uint8 or getattr(data, "ndim", 0) != 1 or data.size != need:
        what = f"{shape}" if stored == shape else f"{stored} (.mT: {shape})"
        raise ValueError(f"{f}: {operand} is a dmlq.Packed that does not hold its elements: {name} {what} takes "
                         f"{need} bytes as a 1-D uint8 array (got {getattr(data, 'dtype', '')} "
                         f"{getattr(data, 'shape', '')})")


def zero_point(bld, name, dt, whose, packed=None):
    """A zero point of ``dt`` (int8/uint8 through the builder's check; int4/uint4 here)."""
    if dt not in FOUR_BIT:
        return bld.zero_point(name, dt, whose)
    v = bld.v[name]
    if v is None:
        return None
    wide = bld.kind == GPU  # CuPy has no 4-bit dtype: the values in int8 / uint8
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)):
        _check_range(bld.f, name, v, dt, whose)
        return bld._scalar(name, int(v), _WIDE[dt] if wide else dt, param=True, zero_point=True)
    vdt = getattr(v, "dtype", None)
    if packed is not None and packed[2] and vdt == _WIDE[dt]:
        return v  # a packed zero point unpacked on the device (dmlq.packed_b.take): in range
    if vdt != dt:
        raise _zp_type_error(bld.f, name, dt, whose, vdt if vdt is not None else type(v).__name__)
    if isinstance(v, np.generic):
        return bld._scalar(name, int(v), _WIDE[dt] if wide else dt, param=True, zero_point=True)
    return v


def _check_range(f, name, v, dt, whose):
    """A Python int zero point ``v`` within the sub-byte type ``dt``'s range; a DescError else."""
    info = ml_dtypes.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    if not lo <= int(v) <= hi:
        raise DescError(f"{f}: {name} = {int(v)} is out of range for {dt} [{lo}, {hi}] {whose}")


def _zp_type_error(f, name, dt, whose, got):
    return TypeError(f"{f}: {name} must be a Python int, an array of dtype {dt} or a dmlq.Packed of {dt} {whose} "
                     f"(got {got}); pass {name}.astype(ml_dtypes.{dt.name}) or dmlq.pack(...)")
