"""The types in dmlq's signatures, for code that calls dmlq and is type-checked.

``HostArray``
    What runs on the NumPy reference and gives a ``numpy.ndarray``: NumPy arrays and
    scalars, Python numbers, (nested) lists and tuples of them, and anything else
    with ``__array__``.
``CudaArray``
    An array with ``__cuda_array_interface__``: CuPy, Numba, torch tensors.
``Operand``
    Anything a data, scale or zero-point argument takes: a ``HostArray``, a CuPy
    array, any CUDA array or DLPack tensor.
``Params``
    Pooling's window sizes, strides, paddings and dilations: one int for every
    spatial dimension, or one int per dimension (a sequence or an integer array).
``DType``
    What ``dtype=`` and ``precision=`` take: a NumPy dtype-like (``np.int8``,
    ``"int4"``, an ml_dtypes type) or a torch dtype (``torch.int8``), the latter
    matched by its attributes (``TorchDType``) so that torch need not be installed.
``Index``, ``Bool``
    ``axis=``/``block_size=`` (a Python or NumPy integer) and the flags (a Python
    or NumPy bool).

The public functions are overloaded on their first data argument (``x``, ``q``,
``a``): a ``CudaArray`` (or a CuPy array, which has no type hints) gives ``Any``,
because the result is a ``cupy.ndarray`` for CUDA data and a ``torch.Tensor`` for
a torch tensor (CPU or CUDA); a ``HostArray`` gives a ``numpy.ndarray``.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, SupportsIndex, Union

import numpy as np
import numpy.typing as npt


class CudaArray(Protocol):
    """An array in GPU memory that exports the CUDA array interface (CuPy, Numba, torch)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class SupportsArray(Protocol):
    """Anything ``np.asarray`` converts through ``__array__`` (NumPy scalars, pandas, torch CPU)."""

    def __array__(self) -> Any: ...


class DLPackArray(Protocol):
    """A tensor that exports DLPack (torch, JAX, CuPy): CPU ones run on the NumPy path."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


class TorchDType(Protocol):
    """A ``torch.dtype`` (``torch.int8``, ``torch.float8_e4m3fn`` ...), by the attributes it has."""

    @property
    def is_floating_point(self) -> bool: ...

    @property
    def is_signed(self) -> bool: ...


HostArray = Union[npt.NDArray[Any], SupportsArray, Sequence[Any], float, int]
Operand = Union[HostArray, CudaArray, DLPackArray]
Index = SupportsIndex
Bool = Union[bool, np.bool_]
Params = Union[SupportsIndex, Sequence[SupportsIndex], npt.NDArray[np.integer[Any]]]
DType = Union[npt.DTypeLike, TorchDType]

__all__ = ["Bool", "CudaArray", "DLPackArray", "DType", "HostArray", "Index", "Operand", "Params", "SupportsArray",
           "TorchDType"]
