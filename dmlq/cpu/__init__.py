"""The fast CPU backend: dmlq.reference's backend interface, bit for bit, in
cache-sized chunks on every core (dmlq.cpu.tiles), the integer matmul from
float32 BLAS on exact K-chunks (dmlq.cpu.matmul; the int32 and float-output
matmuls on the same sums: dmlq.cpu.intmm), pooling by separable window
sums (dmlq.cpu.pool). The public functions run NumPy inputs here.

A function, dtype or argument this backend does not implement (yet) goes to
dmlq.reference, the simple oracle, so new operators and types work on the
host from the moment the reference has them.
"""
from __future__ import annotations

from .. import reference as _reference
from .elementwise import dequantize_linear, quantize_linear, quantized_add
from .intmm import matmul_integer, matmul_integer_to_float
from .matmul import quantized_matmul
from .pool import quantized_avg_pool

__all__ = ["quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul", "quantized_avg_pool",
           "matmul_integer", "matmul_integer_to_float"]


def __getattr__(name):
    # anything else of the backend interface: the reference's implementation
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_reference, name)
