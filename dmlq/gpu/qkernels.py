"""Launchers of cuda/quant_types.cu: quantize / dequantize for the types beyond int8.

The kernels take the quantized side packed as ONNX packs it (dmlq.Packed's bytes for the
4-bit and 2-bit types; the 8- and 16-bit types one element per byte or two bytes) and the
float side dense and C-contiguous. Parameters (scale float32, zero point int32) are per
tensor (a value), per axis or blocked: ``(outer, S, inner)`` C-contiguous with S =
ceil(D / B) entries on the parameter axis of D elements (per axis: B = 1). The kernel
file's header has the variants and the napkin math.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import device

SOURCE = "quant_types.cu"
THREADS = 256  # matches kThreads in quant_types.cu
# The type codes of quant_types.cu, in its enum order.
CODES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn",
         "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2,
        "float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8, "float8_e5m2fnuz": 8, "float4_e2m1fn": 4}
X_TYPES = {"float32": "float", "float16": "float16", "int32": "int"}
Y_TYPES = {"float32": "float", "float16": "float16"}
PRECISION = {None: 0, "float32": 0, "float16": 1, "bfloat16": 2}


def quantize_name(x: str, q: str) -> str:
    return f"qt_quantize<{X_TYPES[x]}, {CODES.index(q)}>"


def dequantize_name(q: str, y: str) -> str:
    return f"qt_dequantize<{CODES.index(q)}, {Y_TYPES[y]}>"


KERNELS = {SOURCE: tuple([quantize_name(x, q) for x in X_TYPES for q in CODES]
                         + [dequantize_name(q, y) for q in CODES for y in Y_TYPES])}


class ParamLayout(NamedTuple):
    """Where element i's parameter is: ((i / (D * inner)) * S + (i / inner % D) / B) * inner + i % inner."""

    D: int
    inner: int
    S: int
    B: int


def param_layout(shape, axis=None, block_size=None) -> ParamLayout:
    """Per tensor (axis None), per axis (block_size None) or blocked."""
    n = math.prod(shape)
    if axis is None:
        return ParamLayout(max(n, 1), 1, 1, max(n, 1))
    d = shape[axis]
    inner = math.prod(shape[axis + 1:])
    b = 1 if block_size is None else int(block_size)
    return ParamLayout(max(d, 1), max(inner, 1), max(-(-d // b), 1), b)


def packed_nbytes(n: int, q: str) -> int:
    return (n * BITS[q] + 7) // 8


def _grid(name: str, groups: int):
    per_sm = device.resident_blocks(SOURCE, name, THREADS, 0)
    return (max(1, min(-(-groups // THREADS), device.info().sm_count * per_sm)),)


def _params(scale, zero_point):
    """(scale pointer, scale value, zp pointer, zp value, zp given) with NULL for a host value."""
    host = (int, float, np.generic)
    if isinstance(scale, host):
        sp, sv = device.NULL, np.float32(scale)
    else:
        sp, sv = np.uint64(device.ptr(scale)), np.float32(0)
    if zero_point is None:
        zp, zv, given = device.NULL, np.int32(0), 0
    elif isinstance(zero_point, host):
        zp, zv, given = device.NULL, np.int32(zero_point), 1
    else:
        zp, zv, given = np.uint64(device.ptr(zero_point)), np.int32(0), 1
    return sp, sv, zp, zv, given


def quantize(x, scale, zero_point, out, q: str, layout: ParamLayout, saturate=True, precision=None):
    """out (packed bytes of q) = quantize(x): x a dense C-contiguous float32/float16/int32
    device array; scale a float32 device array in ``layout`` or a Python float; zero_point
    an int32 device array (q's values; float types: their codes), an int, or None."""
    n = int(x.size)
    nbytes = packed_nbytes(n, q)
    if n == 0:
        return out
    name = quantize_name(device.dtype_name(x.dtype), q)
    sp, sv, zp, zv, given = _params(scale, zero_point)
    aligned = np.int32(device.ptr(x) % 16 == 0)
    args = (np.uint64(device.ptr(x)), np.uint64(device.ptr(out)), np.int64(n), np.int64(nbytes), aligned,
            *(np.int64(v) for v in layout), sp, sv, zp, zv, np.int32(given), np.int32(bool(saturate)),
            np.int32(PRECISION[precision]))
    device.kernel(SOURCE, name)(_grid(name, -(-nbytes // 16)), (THREADS,), args)
    return out


def dequantize(q_bytes, n: int, scale, zero_point, out, q: str, layout: ParamLayout):
    """out (dense float32/float16, n elements) = dequantize(q_bytes, the packed codes of q)."""
    nbytes = packed_nbytes(n, q)
    if n == 0:
        return out
    name = dequantize_name(q, device.dtype_name(out.dtype))
    sp, sv, zp, zv, _ = _params(scale, zero_point)
    aligned = np.int32(device.ptr(out) % 16 == 0)
    args = (np.uint64(device.ptr(q_bytes)), np.uint64(device.ptr(out)), np.int64(n), np.int64(nbytes), aligned,
            *(np.int64(v) for v in layout), sp, sv, zp, zv)
    device.kernel(SOURCE, name)(_grid(name, -(-nbytes // 16)), (THREADS,), args)
    return out
