"""Launchers of cuda/quant_types.cu: quantize / dequantize for the types beyond int8.

The kernels take the quantized side packed as ONNX packs it (dmlq.Packed's bytes for the
4-bit and 2-bit types; the 8- and 16-bit types one element per byte or two bytes) and the
float side dense and C-contiguous. Parameters (scale float32, zero point int32) are per
tensor (a value), per axis or blocked: ``(outer, S, inner)`` C-contiguous with S =
ceil(D / B) entries on the parameter axis of D elements (per axis: B = 1). A device scale
is float32, or int32 / float8_e8m0fnu bytes (uint8; SCALE_KINDS) converted to a float32
temporary by qt_scale_f32 first (each parameter once); a by-value scale is float32. The kernel file's
header has the variants and the napkin math.
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
         "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn", "int32", "uint32")
QUANTIZE_CODES = CODES[:-2]  # int32 / uint32: dequantize only (ONNX has no int32 output)
BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2,
        "float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8, "float8_e5m2fnuz": 8, "float4_e2m1fn": 4,
        "int32": 32, "uint32": 32}
# A device scale's dtype -> the kernel's scale_kind (float8_e8m0fnu travels as its uint8 codes).
SCALE_KINDS = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.uint8): 2}
X_TYPES = {"float32": "float", "float16": "float16", "bfloat16": "bfloat16", "int32": "int"}
Y_TYPES = {"float32": "float", "float16": "float16", "bfloat16": "bfloat16"}
PRECISION = {None: 0, "float32": 0, "float16": 1, "bfloat16": 2}


def quantize_name(x: str, q: str) -> str:
    return f"qt_quantize<{X_TYPES[x]}, {CODES.index(q)}>"


def dequantize_name(q: str, y: str) -> str:
    return f"qt_dequantize<{CODES.index(q)}, {Y_TYPES[y]}>"


def scale_name(kind: int) -> str:
    return f"qt_scale_f32<{kind}>"


KERNELS = {SOURCE: tuple([quantize_name(x, q) for x in X_TYPES for q in QUANTIZE_CODES]
                         + [dequantize_name(q, y) for q in CODES for y in Y_TYPES]
                         + [scale_name(k) for k in (1, 2)])}


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


def quantize(x, scale, zero_point, out, q: str, layout: ParamLayout, saturate=True, precision=None):
    """out (packed bytes of q) = quantize(x): x a dense C-contiguous float32/float16/bfloat16/int32
    device array; scale a float32 device array in ``layout`` or a Python float; zero_point
    an int32 device array (q's values; float types: their codes), an int, or None."""
    n = int(x.size)
    nbytes = packed_nbytes(n, q)
    if n == 0:
        return out
    name = quantize_name(device.dtype_name(x.dtype), q)
    scale = _scale_f32(scale)
    sp, sv, zp, zv, given = _kernel_params(scale, zero_point)
    aligned = np.int32(device.ptr(x) % 16 == 0)
    args = (np.uint64(device.ptr(x)), np.uint64(device.ptr(out)), np.int64(n), np.int64(nbytes), aligned,
            *(np.int64(v) for v in layout), sp, sv, zp, zv, np.int32(given), np.int32(bool(saturate)),
            np.int32(PRECISION[precision]))
    device.kernel(SOURCE, name)(_grid(name, -(-nbytes // 16)), (THREADS,), args)
    return out


def dequantize(q_bytes, n: int, scale, zero_point, out, q: str, layout: ParamLayout):
    """out (dense float32/float16/bfloat16, n elements) = dequantize(q_bytes, the packed codes of q)."""
    nbytes = packed_nbytes(n, q)
    if n == 0:
        return out
    name = dequantize_name(q, device.dtype_name(out.dtype))
    scale = _scale_f32(scale)
    sp, sv, zp, zv, _ = _kernel_params(scale, zero_point)
    aligned = np.int32(device.ptr(out) % 16 == 0)
    args = (np.uint64(device.ptr(q_bytes)), np.uint64(device.ptr(out)), np.int64(n), np.int64(nbytes), aligned,
            *(np.int64(v) for v in layout), sp, sv, zp, zv)
    device.kernel(SOURCE, name)(_grid(name, -(-nbytes // 16)), (THREADS,), args)
    return out


# ------------------------------------------------------------------ backend functions (dmlq.gpu.ops)
# The variants of one call (one table) and the rule that picks one. The kernel itself
# takes the 16-byte path per group when its flag says the dense side is aligned; the
# packed side is always read or written in 16-byte groups (CuPy allocations are
# 256-byte aligned; a Packed's data must start 16-byte aligned, else the bytewise path).
VARIANTS = {
    "vec16": "16-byte loads and stores on both sides",
    "bytewise": "a misaligned operand: element by element, byte by byte on the packed side",
}


def select_variant(dense_address: int, packed_address: int) -> str:
    """vec16 when both sides start 16-byte aligned, else bytewise."""
    return "vec16" if dense_address % 16 == 0 and packed_address % 16 == 0 else "bytewise"


def layout_name(layout) -> str:
    """How the parameters are laid out (dmlq.quant_gpu makes these four)."""
    D, inner, S, B = layout
    if S == 0:
        return "per axis"
    if S == 1 and inner == 1 and B >= D:
        return "per tensor"
    if S == D and B == 1 and inner == 1:
        return "one parameter per element"
    return f"blocked (block {B})"


def _byvalue(v):
    return v is None or isinstance(v, (int, float, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)


def _scale_kind(scale) -> int:
    return 0 if _byvalue(scale) else SCALE_KINDS[np.dtype(scale.dtype)]


def _scale_args(scale):
    """(a float32 temporary for a stored int32 / e8m0 scale, qt_scale_f32's arguments)."""
    tmp = device.xp().empty(scale.size, np.float32)
    return tmp, (np.uint64(device.ptr(scale)), np.uint64(device.ptr(tmp)), np.int64(scale.size))


def _scale_launch(kind, n):
    from .plan import Launch

    name = scale_name(kind)
    return Launch(SOURCE, name, _grid(name, n), (THREADS,), role="scale to float32")


def _scale_f32(scale):
    """A device scale as float32 (the direct functions): int32 / e8m0 converted by qt_scale_f32."""
    kind = _scale_kind(scale)
    if not kind:
        return scale
    tmp, args = _scale_args(scale)
    launch = _scale_launch(kind, scale.size)
    device.kernel(SOURCE, launch.kernel)(launch.grid, launch.block, args)
    return tmp


def _kernel_params(scale, zero_point):
    """(scale pointer, scale value, zp pointer, zp value, zp given) for a float32 scale; a host
    0-d array by value (a uint32 zero point's bits as an int32)."""
    if _byvalue(scale):
        sp, sv = device.NULL, np.float32(scale)
    else:
        sp, sv = np.uint64(device.ptr(scale)), np.float32(0)
    if zero_point is None:
        return sp, sv, device.NULL, np.int32(0), 0
    if _byvalue(zero_point):
        return sp, sv, device.NULL, np.array(int(zero_point) & 0xFFFFFFFF, np.uint32).view(np.int32)[()], 1
    return sp, sv, np.uint64(device.ptr(zero_point)), np.int32(0), 1


def _plan(op, name, n, nbytes, dense, packed, out, layout, scale):
    from .plan import Launch, Plan

    notes = [layout_name(layout)]
    if not out.flags.c_contiguous:
        notes.append("out not C-contiguous: written through a temporary")
    if n == 0:
        return Plan(op, "empty", (), tuple(notes))
    variant = select_variant(device.ptr(dense), device.ptr(packed) if packed is not None else 0)
    launch = Launch(SOURCE, name, _grid(name, -(-nbytes // 16)), (THREADS,))
    kind = _scale_kind(scale)
    if kind:
        notes.append(f"{np.dtype(scale.dtype).name} scale: converted to a float32 temporary first")
        return Plan(op, variant, (_scale_launch(kind, scale.size), launch), tuple(notes))
    return Plan(op, variant, (launch,), tuple(notes))


def plan_quantize_types(x, scale, zero_point, out, q, layout, saturate=True, precision=None):
    """The plan of :func:`quantize_types` (nothing launched)."""
    n = int(x.size)
    return _plan("quantize_linear", quantize_name(device.dtype_name(x.dtype), q), n, packed_nbytes(n, q), x,
                 out if out.flags.c_contiguous else None, out, layout, scale)


def plan_dequantize_types(q_bytes, scale, zero_point, out, q, layout):
    """The plan of :func:`dequantize_types` (nothing launched)."""
    n = int(out.size)
    return _plan("dequantize_linear", dequantize_name(q, device.dtype_name(out.dtype)), n, packed_nbytes(n, q),
                 out if out.flags.c_contiguous else q_bytes, q_bytes, out, layout, scale)


def _through_dense(out, go):
    """Run ``go(target)`` into out, or into a C-contiguous temporary then copied to out."""
    if out.flags.c_contiguous:
        go(out)
        return out
    tmp = device.xp().empty(out.shape, out.dtype)
    go(tmp)
    out[...] = tmp
    return out


def _runner(plan, build):
    """A Runner launching ``plan`` with ``build(src, target, params)``'s arguments, ``params``
    the scale / zero point as the kernel takes them; through a temporary where out needs one."""
    from .plan import Runner, execute, kernels

    if not plan.launches:
        return Runner(plan, lambda *a: None)
    found = kernels(plan)
    converts = len(plan.launches) == 2  # qt_scale_f32 first

    def call(src, scale, zero_point, out):
        first = ()
        if converts:
            scale, args = _scale_args(scale)
            first = (args,)
        params = _kernel_params(scale, zero_point)
        _through_dense(out, lambda target: execute(plan, first + (build(src, target, params),), found))
    return Runner(plan, call)


def bind_quantize_types(x, scale, zero_point, out, q, layout, saturate=True, precision=None):
    """The runner of one quantize signature (dmlq.gpu.ops.run keeps it per alignment)."""
    plan = plan_quantize_types(x, scale, zero_point, out, q, layout, saturate, precision)
    n = int(x.size)
    sizes = (np.int64(n), np.int64(packed_nbytes(n, q)))
    tail = (*(np.int64(v) for v in layout),)
    flags = (np.int32(bool(saturate)), np.int32(PRECISION[precision]))

    def build(x, target, params):
        sp, sv, zp, zv, given = params
        aligned = np.int32(device.ptr(x) % 16 == 0 and device.ptr(target) % 16 == 0)
        return (np.uint64(device.ptr(x)), np.uint64(device.ptr(target)), *sizes, aligned, *tail, sp, sv, zp, zv,
                np.int32(given), *flags)
    return _runner(plan, build)


def bind_dequantize_types(q_bytes, scale, zero_point, out, q, layout):
    """The runner of one dequantize signature."""
    plan = plan_dequantize_types(q_bytes, scale, zero_point, out, q, layout)
    n = int(out.size)
    sizes = (np.int64(n), np.int64(packed_nbytes(n, q)))
    tail = (*(np.int64(v) for v in layout),)

    def build(q_bytes, target, params):
        aligned = np.int32(device.ptr(target) % 16 == 0 and device.ptr(q_bytes) % 16 == 0)
        return (np.uint64(device.ptr(q_bytes)), np.uint64(device.ptr(target)), *sizes, aligned, *tail,
                *params[:4])
    return _runner(plan, build)


def quantize_types(x, scale, zero_point, out, q, layout, saturate=True, precision=None):
    """out (q's codes, packed as ONNX packs them) = quantize(x) with the parameters in
    ``layout`` (see :class:`ParamLayout`); a direct call, not memoized."""
    bind_quantize_types(x, scale, zero_point, out, q, layout, saturate, precision).call(x, scale, zero_point, out)
    return out


def dequantize_types(q_bytes, scale, zero_point, out, q, layout):
    """out (dense float32/float16/bfloat16) = dequantize(q_bytes); a direct call, not memoized."""
    bind_dequantize_types(q_bytes, scale, zero_point, out, q, layout).call(q_bytes, scale, zero_point, out)
    return out
