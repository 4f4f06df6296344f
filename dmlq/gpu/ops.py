"""The GPU backend: the same functions as dmlq.reference, on CuPy arrays; for each
the plan of what it launches (dmlq.gpu.plan), made without launching; and
:func:`run`, the path of a call whose signature the caller has already checked."""
from . import device
from .avgpool import bind_quantized_avg_pool, plan_quantized_avg_pool, quantized_avg_pool
from .elementwise import (bind, dequantize_linear, plan_dequantize_linear, plan_quantize_linear,
                          plan_quantized_add, quantize_linear, quantized_add)
from .matmul import bind_quantized_matmul, plan_quantized_matmul, quantized_matmul

__all__ = ["quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul",
           "quantized_avg_pool", "plan_quantize_linear", "plan_dequantize_linear",
           "plan_quantized_add", "plan_quantized_matmul", "plan_quantized_avg_pool", "run"]

# backend function -> binder(*args, out, *params) -> Runner
_BINDERS = {
    quantize_linear: lambda *a: bind(plan_quantize_linear, a[:-1], a[-1]),
    dequantize_linear: lambda *a: bind(plan_dequantize_linear, a[:-1], a[-1]),
    quantized_add: lambda *a: bind(plan_quantized_add, a[:-1], a[-1]),
    quantized_matmul: bind_quantized_matmul,
    quantized_avg_pool: bind_quantized_avg_pool,
}


def run(fn, runners: dict, args, out, params=()) -> None:
    """``fn(*args, out, *params)`` through a runner kept in ``runners``.

    ``runners`` is a dict the caller keeps for one call signature -- operand
    shapes, strides and dtypes, the values of host scalars, the parameters --
    so the key here adds only what that signature does not fix: the device,
    out's strides and every address modulo 16. (``runners[backend]`` holds
    which operands are device arrays, also fixed by the signature.) ``out`` must overlap no input
    (the caller's check): a repeated call skips the backend function's own
    overlap test, its geometry key and its planning.
    """
    be = device.backend
    ptr = be.ptr
    arrays = runners.get(be)  # which operands are device arrays: fixed by the signature
    if arrays is None:
        arrays = runners[be] = tuple(i for i, a in enumerate(args) if a is not None and be.is_array(a))
    key = (be, be.info(), out.strides, ptr(out) % 16, *[ptr(args[i]) % 16 for i in arrays])
    runner = runners.get(key)
    if runner is None:
        runner = runners[key] = _BINDERS[fn](*args, out, *params)
    runner.call(*args, out)
