# mypy: warn-unused-ignores
"""A type-checked caller of dmlq: tests/test_typing.py runs mypy on it (pytest does not
collect it). Each ``type: ignore`` marks a call the checker must refuse: an ignore that
catches nothing is itself an error under warn-unused-ignores."""
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

import dmlq
from dmlq.typing import Operand

x = np.zeros((4, 8), np.float32)

# NumPy in, numpy.ndarray out
q = dmlq.quantize_linear(x, 0.1, 3)
assert_type(q, npt.NDArray[Any])
assert_type(dmlq.quantize_linear([0.5, 1.0], 0.1, dtype=np.int8), npt.NDArray[Any])
assert_type(dmlq.dequantize_linear(q, np.full(8, 0.1, np.float32), 3), npt.NDArray[Any])
w = np.zeros((8, 2), np.int8)
assert_type(dmlq.quantized_matmul(q, 0.1, 3, w, 0.2, None, 0.5, dtype=np.int8), npt.NDArray[Any])
assert_type(dmlq.quantized_add(q, 0.1, 3, q, 0.1, 3, 0.2, out=np.empty((4, 8), np.uint8)), npt.NDArray[Any])
img = np.zeros((1, 2, 4, 4), np.uint8)
assert_type(dmlq.quantized_avg_pool(img, 1.0, None, 1.0, None, (2, 2), strides=2, ceil_mode=True),
            npt.NDArray[Any])


def on_the_gpu(x_gpu: Any, scale: Operand) -> None:
    # a CuPy array (untyped) or a torch tensor: the result is a cupy.ndarray or a torch.Tensor;
    # typed Any
    assert_type(dmlq.quantize_linear(x_gpu, scale), Any)


# descriptors
desc = dmlq.DequantizeLinearDesc(dmlq.TensorDesc("UINT8", (4,)), dmlq.TensorDesc("FLOAT32", (4,)), None,
                                 dmlq.TensorDesc("FLOAT32", (4,)))
op: dmlq.Operator = dmlq.compile_operator(desc, feature_level="6.2")
assert_type(dmlq.DataType.of(np.uint8), dmlq.DataType)
desc2 = dmlq.TensorDesc(np.float32, [2, 3], strides=[0, 1])
assert_type(desc2.sizes, tuple[int, ...])

# calls the checker refuses
dmlq.quantize_linear(x, 0.1, bogus=1)  # type: ignore[call-overload]
dmlq.quantized_avg_pool(img, 1.0, None, 1.0, None, 2.5)  # type: ignore[call-overload]
dmlq.quantized_avg_pool(img, 1.0, None, 1.0, None, 2, include_padding="yes")  # type: ignore[call-overload]
dmlq.compile_operator(desc, feature_level=6.2)  # type: ignore[arg-type]
dmlq.dequantize_linear(q, 0.1, 3, 4)  # type: ignore[call-overload]


# what the README says dtype= and the keywords take besides Python's own types
class _Int8Like:  # torch.dtype as torch's stubs declare it (torch is read as Any here)
    is_floating_point: bool = False
    is_signed: bool = True


assert_type(dmlq.quantize_linear(x, 0.1, dtype=_Int8Like()), npt.NDArray[Any])
assert_type(dmlq.quantize_linear(x, np.full((4, 1), 0.1, np.float32), axis=np.int64(0), saturate=np.bool_(False),
                                 dtype="int4", precision=np.float32), npt.NDArray[Any])
assert_type(dmlq.quantized_avg_pool(img, 1.0, None, 1.0, None, np.array([2, 2]), strides=(np.int32(1), 1),
                                    include_padding=np.bool_(True)), npt.NDArray[Any])
assert_type(dmlq.matmul_integer_to_float(q, 0.1, 3, w, 0.2, None, dtype=np.float16, block_size=np.int64(4)),
            npt.NDArray[Any])
dmlq.quantize_linear(x, 0.1, dtype=3.5)  # type: ignore[call-overload]
dmlq.quantize_linear(x, 0.1, axis=1.0)  # type: ignore[call-overload]
