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
    spatial dimension, or one int per dimension.

The public functions are overloaded on their first data argument (``x``, ``q``,
``a``): a ``CudaArray`` (or a CuPy array, which has no type hints) gives ``Any``,
because the result is a ``cupy.ndarray`` for CUDA data (and a ``numpy.ndarray``
for a torch CPU tensor); a ``HostArray`` gives a ``numpy.ndarray``.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, Union

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


HostArray = Union[npt.NDArray[Any], SupportsArray, Sequence[Any], float, int]
Operand = Union[HostArray, CudaArray, DLPackArray]
Params = Union[int, Sequence[int]]

__all__ = ["CudaArray", "DLPackArray", "HostArray", "Operand", "Params", "SupportsArray"]
