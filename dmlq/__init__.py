"""dmlq: DirectML's quantized linear operators, bit-exact, on NVIDIA GPUs.

Two layers: DirectML-style descriptors compiled with ``compile_operator``, and
NumPy-like functions. NumPy inputs run on the NumPy reference; CuPy (or other
CUDA) arrays run on hand-written CUDA kernels. Importing dmlq touches no GPU.
"""
from .api import (dequantize_linear, kernel_plan, quantize_linear, quantized_add, quantized_avg_pool,
                  quantized_matmul)
from .desc import (DequantizeDesc, DequantizeLinearDesc, MatrixMultiplyIntegerDesc, MatrixMultiplyIntegerToFloatDesc,
                   QuantizationType,
                   QuantizeDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc)
from .dtypes import DataType
from .dynquant import dynamic_quantize_linear
from .errors import DescError, UnsupportedError
from .gpu.capture import release_graph_memory
from .intmm import matmul_integer, matmul_integer_to_float
from . import frameworks as _frameworks  # noqa: F401  (torch tensors and dask arrays; imports neither)
from .operator import Operator, compile_operator
from .packing import Packed, TransposedPacked, pack, unpack

__version__ = "0.1.0"


def compile_all() -> int:
    """Compile and load every CUDA kernel on CuPy's current device up front.

    Kernels are otherwise compiled on first use; CuPy's on-disk cache keeps them
    across processes, so this mainly moves the compile time to a moment of your choice.

    Returns:
        The number of kernels compiled and loaded.

    Raises:
        UnsupportedError: no GPU is usable (CuPy not installed, no NVIDIA driver, a driver
            older than CuPy's CUDA runtime, or no device); the message says which.
            NumPy arrays need no kernels: they run on the NumPy reference.

    Example:
        >>> import dmlq
        >>> dmlq.compile_all()  # doctest: +SKIP
        22
    """
    from .check import gpu_report

    _, gpus, why = gpu_report()
    if not gpus:
        raise UnsupportedError(
            f"compile_all: no GPU to compile the CUDA kernels for ({why}); "
            "the kernels need an NVIDIA GPU with its driver and the matching CuPy (pip install -e "
            "\".[cuda13]\" or \".[cuda12]\"). NumPy arrays need no kernels: they run on the NumPy "
            "reference. `python -m dmlq info` shows what was found.")
    from .gpu.device import compile_all as _compile_all

    return _compile_all()


__all__ = [
    "DataType", "TensorDesc", "QuantizeLinearDesc", "DequantizeLinearDesc", "QuantizedLinearAddDesc",
    "QuantizedLinearMatrixMultiplyDesc", "QuantizedLinearAveragePoolingDesc",
    "MatrixMultiplyIntegerToFloatDesc", "MatrixMultiplyIntegerDesc", "compile_operator",
    "Operator", "DescError", "UnsupportedError", "quantize_linear", "dequantize_linear",
    "quantized_add", "quantized_matmul", "quantized_avg_pool",
    "matmul_integer", "matmul_integer_to_float", "dynamic_quantize_linear", "kernel_plan", "compile_all",
    "__version__",
    "Packed", "TransposedPacked", "pack", "unpack", "QuantizeDesc", "DequantizeDesc", "QuantizationType",
    "release_graph_memory",
]
