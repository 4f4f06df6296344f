"""The GPU backend: the same functions as dmlq.reference, on CuPy arrays."""
from .avgpool import quantized_avg_pool
from .elementwise import dequantize_linear, quantize_linear, quantized_add
from .matmul import quantized_matmul

__all__ = ["quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul",
           "quantized_avg_pool"]
