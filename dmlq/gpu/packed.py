"""A packed 4-bit b (dmlq.packed_b) as the GPU planners see it.

The backend gets the bytes (1-D uint8, ONNX's nibble order) and ``b_packed =
(dtype name, logical shape, zp_wide)``; :class:`PackedView` is the logical
(..., K, N) tensor for planning: its shape, C-order strides counted in elements
(itemsize 1, so the planners' element arithmetic holds), the kernels' type tag
(``packed_int4`` / ``packed_uint4``, cuda/packed4.cuh), the dtype its zero points
take on the device (int8 / uint8 values) and the bytes themselves.
"""
from __future__ import annotations

import math

import numpy as np

TAGS = {"int4": "packed_int4", "uint4": "packed_uint4"}
ZP_DTYPES = {"int4": np.dtype(np.int8), "uint4": np.dtype(np.uint8)}


class PackedView:
    def __init__(self, data, b_packed):
        self.data = data
        self.dtype_name = b_packed[0]
        self.tag = TAGS[self.dtype_name]
        self.zp_dtype = ZP_DTYPES[self.dtype_name]
        self.shape = tuple(b_packed[1])
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.itemsize = 1
        st, acc = [], 1
        for d in reversed(self.shape):
            st.append(acc)
            acc *= d
        self.strides = tuple(reversed(st))


def view(b, b_packed):
    """b's PackedView, or b itself when it is not packed."""
    return b if b_packed is None else PackedView(b, b_packed)


def contiguous(data) -> bool:
    """Whether the bytes are contiguous (else they are copied before a launch)."""
    return data.size <= 1 or data.strides[0] == 1
