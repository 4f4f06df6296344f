"""DirectML tensor data types and their NumPy equivalents."""
from __future__ import annotations

import enum

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

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @classmethod
    def of(cls, value: DataType | str | npt.DTypeLike) -> DataType:
        """Accept a DataType, its name ("UINT8"), or anything numpy.dtype accepts."""
        if isinstance(value, DataType):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        try:
            dt = np.dtype(value)
        except TypeError:
            raise TypeError(f"not a DirectML data type: {value!r}") from None
        for member in cls:
            if member.numpy == dt:
                return member
        raise TypeError(f"no DirectML data type for numpy dtype {dt}")


QUANTIZED = (DataType.INT8, DataType.UINT8)


def qrange(dt) -> tuple[int, int]:
    """(qmin, qmax) of an integer data type."""
    info = np.iinfo(DataType.of(dt).numpy)
    return int(info.min), int(info.max)
