"""The GPU backend: the same functions as dmlq.reference, on CuPy arrays; for each
the plan of what it launches (dmlq.gpu.plan), made without launching; and
:func:`run`, the path of a call whose signature the caller has already checked."""
from typing import Any

from . import device
from .avgpool import bind_quantized_avg_pool, plan_quantized_avg_pool, quantized_avg_pool
from .elementwise import (bind, dequantize_linear, plan_dequantize_linear, plan_quantize_linear,
                          plan_quantized_add, quantize_linear, quantized_add)
from .intmm import (bind_matmul_integer, bind_matmul_integer_to_float, matmul_integer, matmul_integer_to_float,
                    plan_matmul_integer, plan_matmul_integer_to_float)
from .qmm import bind_quantized_matmul, plan_quantized_matmul, quantized_matmul
from .qkernels import (bind_dequantize_types, bind_quantize_types, dequantize_types, plan_dequantize_types,
                       plan_quantize_types, quantize_types)

__all__ = ["matmul_integer", "matmul_integer_to_float", "plan_matmul_integer", "plan_matmul_integer_to_float",
           "quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul",
           "quantized_avg_pool", "plan_quantize_linear", "plan_dequantize_linear",
           "plan_quantized_add", "plan_quantized_matmul", "plan_quantized_avg_pool", "run",
           "quantize_types", "dequantize_types", "plan_quantize_types", "plan_dequantize_types"]

# backend function -> (binder(*args, out, *params) -> Runner, the operand
# positions whose address alignment its plan depends on: None for every device
# array and out). These mirror the backend functions' own memo keys: matmul
# reads a's and b's alignment (cp.async widths, staging), pooling x's and out's
# (the channels_last kernels' vector loads and stores).
_BINDERS: dict[Any, tuple[Any, Any]] = {
    quantize_linear: (lambda *a: bind(plan_quantize_linear, a[:-1], a[-1]), None),
    dequantize_linear: (lambda *a: bind(plan_dequantize_linear, a[:-1], a[-1]), None),
    quantized_add: (lambda *a: bind(plan_quantized_add, a[:-1], a[-1]), None),
    quantized_matmul: (bind_quantized_matmul, (0, 3)),
    quantized_avg_pool: (bind_quantized_avg_pool, (0, -1)),
    matmul_integer: (bind_matmul_integer, (0, 2)),          # M > 16: the tiled kernels' staging
    matmul_integer_to_float: (bind_matmul_integer_to_float, (0, 3)),
    quantize_types: (bind_quantize_types, None),
    dequantize_types: (bind_dequantize_types, None),
}


def run(fn, runners: dict, args, out, params=()) -> None:
    """``fn(*args, out, *params)`` through a runner kept in ``runners``.

    ``runners`` is a dict the caller keeps for one call signature -- operand
    shapes, strides and dtypes, the values of host scalars, the parameters --
    so the key here adds only what that signature does not fix: the device,
    out's strides and the address alignments the plan reads. ``runners[backend]``
    is ``(aligned, {key: runner})``, ``aligned`` the positions of the operands
    whose alignment is read (fixed by the signature). ``out`` must overlap no
    input (the caller's check): a repeated call skips the backend function's own
    overlap test, its geometry key and its planning.
    """
    be = device.current()
    entry = runners.get(be)
    if entry is None:
        table: dict = {}
        entry = runners[be] = _aligned(fn, args, be), table
    aligned, table = entry
    ptr = be.ptr
    key = (be.info(), out.strides, *[ptr(args[i]) % 16 if i >= 0 else ptr(out) % 16 for i in aligned])
    runner = table.get(key)
    if runner is None:
        runner = table[key] = _BINDERS[fn][0](*args, out, *params)
    runner.call(*args, out)


def _aligned(fn, args, be) -> tuple:
    """Positions of the operands whose address alignment ``fn``'s plan reads (-1: out)."""
    fixed = _BINDERS[fn][1]
    if fixed is not None:
        return fixed
    return (-1, *(i for i, a in enumerate(args) if a is not None and be.is_array(a)))
