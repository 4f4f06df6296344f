"""What the framework adapters (dmlq.torch, dmlq.dask) know of a public function.

The public functions normalize their operands in dmlq.api; an operand (or
``out``) that is a torch tensor or a dask array stops that (``dispatch.Foreign``)
and dmlq.frameworks hands the call, with its operands as the user gave them,
to dmlq.torch or dmlq.dask. Each adapter turns it back into calls of the same
public function on NumPy or CuPy arrays, so every check and every number is
the public function's own.
"""
from __future__ import annotations

import inspect

# Each public function's keyword parameters, in the order dmlq.api passes them.
PARAMS = {
    "quantize_linear": ("dtype", "axis", "block_size", "saturate", "precision"),
    "dequantize_linear": ("dtype", "axis", "block_size"),
    "quantized_add": ("dtype",),
    "quantized_matmul": ("dtype",),
    "quantized_avg_pool": ("window_size", "strides", "start_padding", "end_padding", "dilations",
                           "include_padding", "ceil_mode", "dtype"),
    "matmul_integer": (),
    "matmul_integer_to_float": ("dtype", "block_size"),
}


_FUNCTIONS: dict = {}


def function(fname):
    """The public function named ``fname``."""
    fn = _FUNCTIONS.get(fname)
    if fn is None:
        from . import api, intmm

        fn = _FUNCTIONS[fname] = getattr(api, fname, None) or getattr(intmm, fname)
    return fn


_NAMES: dict = {}


def operand_names(fname) -> tuple:
    """The public function's positional operand names (x, scale, zero_point...), in
    the order of its signature (the order dmlq.calls.run gets them for the five
    operators; the integer matmul family passes a, a_zero_point, b, ... instead)."""
    names = _NAMES.get(fname)
    if names is None:
        params = inspect.signature(function(fname)).parameters.values()
        names = _NAMES[fname] = tuple(p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD
                                      and p.name not in PARAMS[fname])
    return names
