"""The GPU backend: the same functions as dmlq.reference, on CuPy arrays, and
for each the plan of what it launches (dmlq.gpu.plan), made without launching."""
from .avgpool import plan_quantized_avg_pool, quantized_avg_pool
from .elementwise import (dequantize_linear, plan_dequantize_linear, plan_quantize_linear,
                          plan_quantized_add, quantize_linear, quantized_add)
from .matmul import plan_quantized_matmul, quantized_matmul

__all__ = ["quantize_linear", "dequantize_linear", "quantized_add", "quantized_matmul",
           "quantized_avg_pool", "plan_quantize_linear", "plan_dequantize_linear",
           "plan_quantized_add", "plan_quantized_matmul", "plan_quantized_avg_pool"]
