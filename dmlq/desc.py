"""DirectML-style descriptors: TensorDesc and the operator descs.

Field names are the DML struct fields in snake case and in DML order
(``InputTensor`` -> ``input_tensor``). Optional tensors (DirectML's
``_Maybenull_``) default to ``None``; the other fields default to ``None`` only so
that the dataclasses keep DML's field order, and validation refuses them when
missing. Validation of the operator rules lives in :mod:`dmlq.validation`.
"""
from __future__ import annotations

import enum
import math
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, SupportsIndex, Tuple

import numpy.typing as npt

from .dtypes import DataType
from .errors import DescError

MAX_DIMENSION_COUNT = 8  # DML_TENSOR_DIMENSION_COUNT_MAX1


def dml_name(field_name: str) -> str:
    """``a_zero_point_tensor`` -> ``AZeroPointTensor`` (the DML field name)."""
    return "".join(part.capitalize() for part in field_name.split("_"))


def _int_tuple(value, what: str) -> Tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"TensorDesc: {what} must be a sequence of integers (got {value!r})") from None
    return tuple(_int(v, what, "must hold integers") for v in items)


def _int(v, what: str, must: str = "must be an integer") -> int:
    """An integer field (a float or bool is a TypeError naming it, not rounded; a dask value is
    refused, not computed through its __index__)."""
    lazy = sys.modules.get("dask.array")
    if lazy is not None and isinstance(v, lazy.Array):
        raise TypeError(f"TensorDesc: {what} {must}, not a dask array, which dmlq does not compute for you "
                        "(pass int(v.compute()))")
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"TensorDesc: {what} {must} (got {v!r})")
    return int(v.__index__())


@dataclass(frozen=True)
class TensorDesc:
    """DML_BUFFER_TENSOR_DESC: data type, sizes, optional strides in elements.

    ``data_type``: a :class:`DataType`, its name ("UINT8") or a NumPy dtype.
    ``sizes``: 1 to 8 non-negative ints. ``strides``: one int per dimension, in
    elements; a stride of 0 broadcasts, as in DirectML. ``total_tensor_size_in_bytes``
    defaults to DirectML's minimum (DMLCalcBufferTensorSize: the byte after the
    last addressed element, rounded up to a multiple of 4); a given value must
    not be smaller. Sizes of 0 are accepted (DirectML has none; dmlq returns
    empty results for them). Raises DescError for a rule broken.

    >>> from dmlq import TensorDesc
    >>> TensorDesc("FLOAT32", (2, 3, 4), strides=(0, 1, 0)).total_tensor_size_in_bytes  # 3 floats
    12
    """

    data_type: DataType
    sizes: Tuple[int, ...]
    strides: Optional[Tuple[int, ...]] = None
    total_tensor_size_in_bytes: Optional[int] = None

    if TYPE_CHECKING:  # what the dataclass's __init__ takes (it stores the types above)
        def __init__(self, data_type: DataType | str | npt.DTypeLike, sizes: Sequence[SupportsIndex],
                     strides: Optional[Sequence[SupportsIndex]] = None,
                     total_tensor_size_in_bytes: Optional[int] = None) -> None: ...

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "data_type", DataType.of(self.data_type))
        sizes = _int_tuple(self.sizes, "Sizes")
        set_(self, "sizes", sizes)
        if not 1 <= len(sizes) <= MAX_DIMENSION_COUNT:
            raise DescError(
                f"TensorDesc: DimensionCount must be 1 to {MAX_DIMENSION_COUNT} (got {len(sizes)})")
        if any(s < 0 for s in sizes):
            raise DescError(f"TensorDesc: Sizes must not be negative (got {sizes})")
        if self.strides is not None:
            strides = _int_tuple(self.strides, "Strides")
            set_(self, "strides", strides)
            if len(strides) != len(sizes):
                raise DescError(
                    f"TensorDesc: Strides must have DimensionCount ({len(sizes)}) elements "
                    f"(got {len(strides)})")
            if any(s < 0 for s in strides):
                raise DescError(f"TensorDesc: Strides must not be negative (got {strides})")
        minimum = self.minimum_size_in_bytes
        if self.total_tensor_size_in_bytes is None:
            set_(self, "total_tensor_size_in_bytes", minimum)
        else:
            total = _int(self.total_tensor_size_in_bytes, "TotalTensorSizeInBytes")
            set_(self, "total_tensor_size_in_bytes", total)
            if total < minimum:
                raise DescError(
                    f"TensorDesc: TotalTensorSizeInBytes must be at least {minimum} for sizes "
                    f"{sizes} and strides {self.strides} (got {total})")

    @property
    def dimension_count(self) -> int:
        return len(self.sizes)

    @property
    def element_count(self) -> int:
        return math.prod(self.sizes)

    @property
    def minimum_element_count(self) -> int:
        """Elements a buffer must hold: one past the last addressed element."""
        if self.element_count == 0:
            return 0
        if self.strides is None:
            return self.element_count
        return sum((n - 1) * s for n, s in zip(self.sizes, self.strides)) + 1

    @property
    def minimum_size_in_bytes(self) -> int:
        # DMLCalcBufferTensorSize: INT4/UINT4 elements take half a byte each
        return ((self.minimum_element_count * self.data_type.bits + 7) // 8 + 3) & ~3

    @classmethod
    def like(cls, array: Any) -> TensorDesc:
        """A packed desc with the array's dtype and shape (0-d arrays become {1})."""
        return cls(DataType.of(array.dtype), tuple(array.shape) or (1,))


# The default of a field DirectML requires: None at run time (validation refuses it
# when missing), typed Any so that the field keeps its own type. Dataclass fields
# after an optional one need a default; this keeps DML's field order.
REQUIRED: Any = None


class _OperatorDesc:
    """What every operator desc has (each is a frozen dataclass of the DML struct's fields)."""

    OPERATOR: ClassVar[str]
    FEATURE_LEVEL: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Any]]
    output_tensor: TensorDesc

    def tensor_fields(self) -> list[tuple[str, Optional[TensorDesc]]]:
        """(field name, TensorDesc or None) for every tensor field, in DML order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self) if f.name.endswith("_tensor")]


@dataclass(frozen=True)
class QuantizeLinearDesc(_OperatorDesc):
    """DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC."""

    OPERATOR: ClassVar[str] = "QuantizeLinear"
    FEATURE_LEVEL: ClassVar[str] = "1.0"
    input_tensor: TensorDesc = REQUIRED
    scale_tensor: TensorDesc = REQUIRED
    zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class DequantizeLinearDesc(_OperatorDesc):
    """DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC."""

    OPERATOR: ClassVar[str] = "DequantizeLinear"
    FEATURE_LEVEL: ClassVar[str] = "1.0"
    input_tensor: TensorDesc = REQUIRED
    scale_tensor: TensorDesc = REQUIRED
    zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class QuantizedLinearAddDesc(_OperatorDesc):
    """DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC."""

    OPERATOR: ClassVar[str] = "QuantizedLinearAdd"
    FEATURE_LEVEL: ClassVar[str] = "4.0"
    a_tensor: TensorDesc = REQUIRED
    a_scale_tensor: TensorDesc = REQUIRED
    a_zero_point_tensor: Optional[TensorDesc] = None
    b_tensor: TensorDesc = REQUIRED
    b_scale_tensor: TensorDesc = REQUIRED
    b_zero_point_tensor: Optional[TensorDesc] = None
    output_scale_tensor: TensorDesc = REQUIRED
    output_zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class QuantizedLinearMatrixMultiplyDesc(_OperatorDesc):
    """DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC."""

    OPERATOR: ClassVar[str] = "QuantizedLinearMatrixMultiply"
    FEATURE_LEVEL: ClassVar[str] = "2.1"
    a_tensor: TensorDesc = REQUIRED
    a_scale_tensor: TensorDesc = REQUIRED
    a_zero_point_tensor: Optional[TensorDesc] = None
    b_tensor: TensorDesc = REQUIRED
    b_scale_tensor: TensorDesc = REQUIRED
    b_zero_point_tensor: Optional[TensorDesc] = None
    output_scale_tensor: TensorDesc = REQUIRED
    output_zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class QuantizedLinearAveragePoolingDesc(_OperatorDesc):
    """DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC.

    The UINT arrays (strides ... dilations) are tuples of DimensionCount ints.
    """

    OPERATOR: ClassVar[str] = "QuantizedLinearAveragePooling"
    FEATURE_LEVEL: ClassVar[str] = "6.2"
    input_tensor: TensorDesc = REQUIRED
    input_scale_tensor: TensorDesc = REQUIRED
    input_zero_point_tensor: Optional[TensorDesc] = None
    output_scale_tensor: TensorDesc = REQUIRED
    output_zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED
    dimension_count: int = REQUIRED
    strides: Tuple[int, ...] = REQUIRED
    window_size: Tuple[int, ...] = REQUIRED
    start_padding: Tuple[int, ...] = REQUIRED
    end_padding: Tuple[int, ...] = REQUIRED
    dilations: Tuple[int, ...] = REQUIRED
    include_padding: bool = False

    def __post_init__(self):
        # Lists are accepted for the UINT arrays; store tuples so the desc hashes.
        for name in ("strides", "window_size", "start_padding", "end_padding", "dilations"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                try:
                    object.__setattr__(self, name, tuple(value))
                except TypeError:
                    pass  # validation reports it


@dataclass(frozen=True)
class MatrixMultiplyIntegerToFloatDesc(_OperatorDesc):
    """DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC."""

    OPERATOR: ClassVar[str] = "MatrixMultiplyIntegerToFloat"
    FEATURE_LEVEL: ClassVar[str] = "6.2"
    a_tensor: TensorDesc = REQUIRED
    a_scale_tensor: TensorDesc = REQUIRED
    a_zero_point_tensor: Optional[TensorDesc] = None
    b_tensor: TensorDesc = REQUIRED
    b_scale_tensor: TensorDesc = REQUIRED
    b_zero_point_tensor: Optional[TensorDesc] = None
    bias_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class MatrixMultiplyIntegerDesc(_OperatorDesc):
    """DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC (ONNX MatMulInteger: int32 sums)."""

    OPERATOR: ClassVar[str] = "MatrixMultiplyInteger"
    FEATURE_LEVEL: ClassVar[str] = "2.1"
    a_tensor: TensorDesc = REQUIRED
    a_zero_point_tensor: Optional[TensorDesc] = None
    b_tensor: TensorDesc = REQUIRED
    b_zero_point_tensor: Optional[TensorDesc] = None
    output_tensor: TensorDesc = REQUIRED


class QuantizationType(enum.Enum):
    """DML_QUANTIZATION_TYPE (DML_FEATURE_LEVEL_6_3)."""

    NONE = 0
    SCALE = 1
    SCALE_ZERO_POINT = 2

    @classmethod
    def of(cls, value: object) -> "QuantizationType":
        """A QuantizationType, its name ("SCALE", "DML_QUANTIZATION_TYPE_SCALE") or number."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            name = value.strip().upper()
            name = name[len("DML_QUANTIZATION_TYPE_"):] if name.startswith("DML_QUANTIZATION_TYPE_") else name
            if name in cls.__members__:
                return cls[name]
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        raise DescError(f"QuantizationType must be SCALE or SCALE_ZERO_POINT (got {value!r})")


@dataclass(frozen=True)
class _QuantizeDescBase(_OperatorDesc):
    FEATURE_LEVEL: ClassVar[str] = "6.3"

    def __post_init__(self):
        # Lists are accepted for QuantizationTensors; store a tuple so the desc hashes,
        # and QuantizationTensorCount defaults to its length.
        qt = self.quantization_tensors
        if qt is not None and not isinstance(qt, tuple):
            try:
                object.__setattr__(self, "quantization_tensors", tuple(qt))
            except TypeError:
                pass  # validation reports it
        if self.quantization_tensor_count is None and isinstance(self.quantization_tensors, tuple):
            object.__setattr__(self, "quantization_tensor_count", len(self.quantization_tensors))


@dataclass(frozen=True)
class QuantizeDesc(_QuantizeDescBase):
    """DML_QUANTIZE_OPERATOR_DESC (feature level 6.3): QuantizationTensors holds the
    scale, then (for SCALE_ZERO_POINT) the zero point, each of InputTensor's rank."""

    OPERATOR: ClassVar[str] = "Quantize"
    input_tensor: TensorDesc = REQUIRED
    quantization_type: object = None
    quantization_tensor_count: Optional[int] = None
    quantization_tensors: Tuple[TensorDesc, ...] = REQUIRED
    output_tensor: TensorDesc = REQUIRED


@dataclass(frozen=True)
class DequantizeDesc(_QuantizeDescBase):
    """DML_DEQUANTIZE_OPERATOR_DESC (feature level 6.3), fields as in QuantizeDesc."""

    OPERATOR: ClassVar[str] = "Dequantize"
    input_tensor: TensorDesc = REQUIRED
    quantization_type: object = None
    quantization_tensor_count: Optional[int] = None
    quantization_tensors: Tuple[TensorDesc, ...] = REQUIRED
    output_tensor: TensorDesc = REQUIRED


# The type of any operator desc (compile_operator's argument).
OperatorDesc = _OperatorDesc

OPERATOR_DESCS = (
    QuantizeLinearDesc,
    DequantizeLinearDesc,
    QuantizedLinearAddDesc,
    QuantizedLinearMatrixMultiplyDesc,
    QuantizedLinearAveragePoolingDesc,
    MatrixMultiplyIntegerToFloatDesc,
    MatrixMultiplyIntegerDesc,
    QuantizeDesc,
    DequantizeDesc,
)


def block_sizes(param_sizes, input_sizes) -> Tuple[int, ...]:
    """Per dimension, how many input elements share one entry of a DML 6.3 quantization
    tensor: 1 where the sizes are equal, the whole dimension where the entry count
    is 1, ``D / n`` where n divides D; 0 where n does not divide D (not a layout)."""
    out = []
    for n, d in zip(param_sizes, input_sizes):
        if n == d:
            out.append(1)
        elif n == 1:
            out.append(d)
        elif n > 0 and d % n == 0:
            out.append(d // n)
        else:
            out.append(0)
    return tuple(out)


def pool_output_size(in_size: int, window: int, stride: int, start_pad: int, end_pad: int,
                     dilation: int) -> Tuple[int, int]:
    """(floor-mode size, ceil-mode size) of one spatial dimension.

    Floor: ``(in + start_pad + end_pad - extent) // stride + 1`` with the dilated
    extent ``(window - 1) * dilation + 1``; 0 when the window does not fit
    (callers refuse that). Ceil, as ONNX and PyTorch define it: one more where the
    division is inexact and that extra window starts inside ``in + start_pad`` (so a
    window longer than the padded input by less than a stride still makes one output,
    as in ONNX, onnxruntime and torch). docs/semantics.md also accepts floor + 1 after
    an exact division when the window starts there; see ``pool_output_accepted``.
    """
    extent = (window - 1) * dilation + 1
    rest = in_size + start_pad + end_pad - extent
    floor_size, ceil_size = rest // stride + 1, -(-rest // stride) + 1
    if ceil_size > floor_size and (ceil_size - 1) * stride >= in_size + start_pad:  # the extra one starts past x
        ceil_size -= 1
    return max(floor_size, 0), max(ceil_size, 0)


def pool_output_accepted(in_size, window, stride, start_pad, end_pad, dilation) -> Tuple[int, ...]:
    """Every output size docs/semantics.md accepts: floor, and floor + 1 where that
    last window starts inside ``in + start_pad`` (this includes the ceil size)."""
    floor_size, ceil_size = pool_output_size(in_size, window, stride, start_pad, end_pad, dilation)
    if floor_size == 0:  # a window past the padded input: ceil mode's one output, if it has one
        return (ceil_size,) if ceil_size else (0,)
    if floor_size * stride < in_size + start_pad:
        return floor_size, floor_size + 1
    return (floor_size,)
