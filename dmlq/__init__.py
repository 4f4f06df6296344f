"""dmlq: DirectML's quantized linear operators, bit-exact, on NVIDIA GPUs.

Two layers: DirectML-style descriptors compiled with ``compile_operator``, and
NumPy-like functions. NumPy inputs run on the NumPy reference; CuPy (or other
CUDA) arrays run on hand-written CUDA kernels. Importing dmlq touches no GPU.
"""
from .api import (dequantize_linear, kernel_plan, quantize_linear, quantized_add, quantized_avg_pool,
                  quantized_matmul)
from .desc import (DequantizeLinearDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc)
from .dtypes import DataType
from .errors import DescError, UnsupportedError
from .operator import Operator, compile_operator

__version__ = "0.1.0"


def compile_all() -> int:
    """Compile and load every CUDA kernel on CuPy's current device up front.

    Returns the number of kernels; raises where no GPU is usable.
    """
    from .gpu.device import compile_all as _compile_all

    return _compile_all()


__all__ = [
    "DataType", "TensorDesc", "QuantizeLinearDesc", "DequantizeLinearDesc", "QuantizedLinearAddDesc",
    "QuantizedLinearMatrixMultiplyDesc", "QuantizedLinearAveragePoolingDesc", "compile_operator",
    "Operator", "DescError", "UnsupportedError", "quantize_linear", "dequantize_linear",
    "quantized_add", "quantized_matmul", "quantized_avg_pool", "kernel_plan", "compile_all", "__version__",
]
