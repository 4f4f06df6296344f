"""DirectML tensor data types and their NumPy equivalents."""
from __future__ import annotations

import enum
import sys

import numpy as np
import numpy.typing as npt


class DataType(enum.Enum):
    """DML_TENSOR_DATA_TYPE, member names as in DirectML (without the prefix)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    UINT32 = "uint32"
    UINT16 = "uint16"
    UINT8 = "uint8"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    FLOAT64 = "float64"
    UINT64 = "uint64"
    INT64 = "int64"
    UINT4 = "uint4"  # DML_FEATURE_LEVEL_6_3: packed two to a byte in DirectML buffers
    INT4 = "int4"

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype (for INT4/UINT4 the ml_dtypes one: one element per byte)."""
        if self.bits == 4:
            from .qtypes import qtype

            return qtype(self.value).dtype
        return np.dtype(self.value)

    @property
    def bits(self) -> int:
        """Bits per element in a DirectML buffer."""
        return 4 if self.value in ("int4", "uint4") else np.dtype(self.value).itemsize * 8

    @property
    def itemsize(self) -> int:
        """Bytes per element in NumPy (INT4/UINT4: 1, one element per byte)."""
        return self.numpy.itemsize

    @classmethod
    def of(cls, value: DataType | str | npt.DTypeLike) -> DataType:
        """Accept a DataType, its name ("UINT8"), or anything numpy.dtype accepts."""
        if isinstance(value, DataType):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        if value is None:  # (numpy.dtype(None) is float64)
            raise TypeError("not a DirectML data type: None; pass a DataType or its name (\"UINT8\")")
        try:
            dt = np.dtype(value)
        except TypeError:
            raise TypeError(f"not a DirectML data type: {value!r}") from None
        for member in cls:
            if (member.value == dt.name if member.bits == 4 else member.numpy == dt):
                return member
        raise TypeError(f"no DirectML data type for numpy dtype {dt}")


QUANTIZED = (DataType.INT8, DataType.UINT8)


_QRANGES: dict = {}  # qrange's answers by argument (a dtype, DataType or name): asked on every call


def qrange(dt) -> tuple[int, int]:
    """(qmin, qmax) of an integer data type."""
    try:
        return _QRANGES[dt]
    except (KeyError, TypeError):  # (TypeError: an unhashable dtype spelling)
        pass
    d = DataType.of(dt)
    if d.bits == 4:
        answer = (-8, 7) if d == DataType.INT4 else (0, 15)
    else:
        info = np.iinfo(d.numpy)
        answer = int(info.min), int(info.max)
    try:
        _QRANGES[dt] = answer
    except TypeError:
        pass
    return answer


def torch_name(dtype) -> str:
    """A torch dtype's name: torch.float8_e4m3fn -> "float8_e4m3fn"."""
    return str(dtype).rpartition(".")[2]


def plain_dtype(dtype):
    """``dtype=`` as the public functions read it: a torch dtype (torch.int8, torch.int4,
    torch.bfloat16 ...) as the NumPy or ml_dtypes dtype of its name, so NumPy and CuPy
    inputs take it too; anything else unchanged (checked where it is used)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(dtype, torch.dtype):
        return dtype
    name = torch_name(dtype)
    from .qtypes import QTYPES, BFLOAT16_DTYPE

    if name == "float4_e2m1fn_x2":  # torch's float4_e2m1fn, two elements a byte (dmlq.torch_dtypes)
        name = "float4_e2m1fn"

    if name == "bfloat16" and BFLOAT16_DTYPE is not None:
        return BFLOAT16_DTYPE
    q = QTYPES.get(name)
    if q is not None and q.dtype is not None:
        return q.dtype
    try:
        return np.dtype(name)
    except TypeError:
        return dtype  # no NumPy twin (torch.complex32 ...): the checks name it
