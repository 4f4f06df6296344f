"""A packed 4-bit b (dmlq.packed_b) as the GPU planners see it.

The backend gets the bytes (1-D uint8, ONNX's nibble order) and ``b_packed =
(dtype name, logical shape, zp_wide[, kmajor])``; :class:`PackedView` is the logical
(..., K, N) tensor for planning: its shape, strides counted in elements (itemsize 1,
so the planners' element arithmetic holds: C order, or with ``kmajor`` those of the
transposed view of the C-order (..., N, K) tensor whose bytes they are), the kernels'
type tag (``packed_int4`` / ``packed_uint4``, K-major ``kmajor_int4`` / ``kmajor_uint4``,
cuda/packed4.cuh), the dtype its zero points take on the device (int8 / uint8 values)
and the bytes themselves.
"""
from __future__ import annotations

import math

import numpy as np

from . import device
from .plan import Launch, Memo, Plan, device_key, launcher

TAGS = {"int4": "packed_int4", "uint4": "packed_uint4"}
# A packed b held K-major (dmlq.TransposedPacked: the bytes of the (..., N, K) tensor), as the stream
# kernels of cuda/matmul_stream_packed.cu read it; every other kernel takes its rows (to_rows).
KMAJOR_TAGS = {"int4": "kmajor_int4", "uint4": "kmajor_uint4"}
ZP_DTYPES = {"int4": np.dtype(np.int8), "uint4": np.dtype(np.uint8), "int2": np.dtype(np.int8),
             "uint2": np.dtype(np.uint8)}
_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
# A packed zero-point table unpacked on the device in one launch, and a packed 2-bit b widened to the
# packed 4-bit b of its values in one (cuda/packed_table.cu)
TABLE_SOURCE = "packed_table.cu"
WIDEN_KERNEL = "widen_codes2"
KERNELS = {TABLE_SOURCE: ("unpack_table<int8>", "unpack_table<uint8>", WIDEN_KERNEL)}
TABLE_BLOCK, TABLE_MAX_BLOCKS = 256, 1024
_table_launchers = Memo()  # (device, kernel, blocks) -> the launch of unpack_table or widen_codes2


def kmajor(b_packed) -> bool:
    """Whether ``b_packed`` (dtype name, logical shape, zp_wide[, kmajor, row]) describes K-major
    bytes: those of the (..., N, row) tensor, dmlq.TransposedPacked's (row >= K: K without it)."""
    return len(b_packed) > 3 and bool(b_packed[3])


def stored_shape(b_packed) -> tuple:
    """The C-order shape of the tensor whose packed bytes ``b_packed`` describes: the logical
    (..., K, N), or K-major (..., N, row), row the elements of each stored column of b (its
    TransposedPacked's Packed's last axis, MatMulNBits' padded rows; K where not given)."""
    shape = tuple(b_packed[1])
    if not kmajor(b_packed):
        return shape
    row = int(b_packed[4]) if len(b_packed) > 4 else shape[-2]
    return shape[:-2] + (shape[-1], row)


class PackedView:
    def __init__(self, data, b_packed, whole_bytes=False):
        self.data = data
        self.dtype_name = b_packed[0]
        self.kmajor = kmajor(b_packed)  # bytes of (..., N, row): ldb = row (>= K) between columns
        self.tag = (KMAJOR_TAGS if self.kmajor else TAGS)[self.dtype_name]
        self.zp_dtype = ZP_DTYPES[self.dtype_name]
        self.shape = tuple(b_packed[1])
        self.stored = stored_shape(b_packed)  # the C-order tensor the bytes hold
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.itemsize = 1
        # whole_bytes: the layout of matrices_in_whole_bytes (each matrix padded to an even count)
        st, acc = [], 1
        for i, d in enumerate(reversed(self.stored)):
            st.append(acc)
            acc *= d
            if i == 1 and whole_bytes:
                acc += acc % 2
        if self.kmajor:  # the logical (..., K, N) tensor's strides: 1 along K, row along N
            st[0], st[1] = st[1], st[0]
        self.strides = tuple(reversed(st))
        self.whole_bytes = whole_bytes

    @property
    def rows_note(self) -> str:
        """A plan's words for K-major columns stored longer than K ("" where they are K long)."""
        if not self.kmajor or self.stored[-1] == self.shape[-2]:
            return ""
        return f", its columns {self.stored[-1]} elements apart (the first {self.shape[-2]} read)"

    def in_whole_bytes(self):
        """The view of this tensor's :func:`matrices_in_whole_bytes` copy (planning only)."""
        return PackedView(self.data, (self.dtype_name, self.shape, False, self.kmajor, self.stored[-1]),
                          whole_bytes=True)

    def rows(self):
        """The row-major view of this K-major tensor's :func:`to_rows` copy (planning only)."""
        return PackedView(device.Fresh((-(-self.size // 2),), np.uint8), (self.dtype_name, self.shape))


def to_rows(xp, data, shape, row=None):
    """The C-order packed bytes of the logical (..., K, N) tensor ``shape`` from its K-major
    bytes (``data``: those of the C-order (..., N, row) tensor, dmlq.TransposedPacked's, row >= K
    elements a column, K by default): a device pass in the array module's own operations, for the
    kernels that read b's rows."""
    K, N = shape[-2:]
    row = K if row is None else row
    count = math.prod(shape[:-2])
    n = count * N * K
    data = xp.ascontiguousarray(data)
    codes = xp.stack([data & np.uint8(15), data >> np.uint8(4)], axis=-1).reshape(-1)[:count * N * row]
    codes = codes.reshape(count, N, row)[..., :K]
    flat = xp.ascontiguousarray(codes.swapaxes(-1, -2)).reshape(-1)
    if n % 2:
        flat = xp.concatenate([flat, xp.zeros(1, np.uint8)])
    return xp.ascontiguousarray(flat[0::2] | (flat[1::2] << np.uint8(4)))


def matrices_in_whole_bytes(xp, data, shape):
    """The bytes of the C-order packed tensor ``shape`` (a PackedView's ``stored``: (..., K, N),
    K-major (..., N, row)) with every matrix starting on a byte (an odd K * N gets one zero nibble after each
    matrix), so that any matrix's first element is a whole byte's low nibble:
    a device copy in the array module's own operations, nibbles unchanged."""
    kn = shape[-1] * shape[-2]
    count = math.prod(shape[:-2])
    data = xp.ascontiguousarray(data)
    codes = xp.stack([data & 15, data >> 4], axis=-1).reshape(-1)[:count * kn].reshape(count, kn)
    if kn % 2:
        codes = xp.concatenate([codes, xp.zeros((count, 1), np.uint8)], axis=1)
    flat = codes.reshape(-1)
    return xp.ascontiguousarray(flat[0::2] | (flat[1::2] << 4))


def view(b, b_packed):
    """b's PackedView, or b itself when it is not packed."""
    return b if b_packed is None else PackedView(b, b_packed)


def contiguous(data) -> bool:
    """Whether the bytes are contiguous (else they are copied before a launch)."""
    return data.size <= 1 or data.strides[0] == 1


# The tensor-core kernel (cuda/matmul_mma_packed.cu) stages b's rows with cp.async, so
# each row must start on a byte at a VEC-aligned address; rows that do not are first
# copied into rows of ROW_ALIGN elements (16 bytes), one pass over the bytes.
ROW_ALIGN = 32


def padded(v: PackedView) -> PackedView:
    """The view of ``v`` copied by :func:`pad_rows`: rows ROW_ALIGN-element aligned."""
    p = PackedView(v.data, (v.dtype_name, v.shape, False))
    p.dtype_name, p.tag, p.zp_dtype = v.dtype_name, v.tag, v.zp_dtype
    row = -(-v.shape[-1] // ROW_ALIGN) * ROW_ALIGN
    st, acc = [1, row], row * v.shape[-2]
    for d in reversed(v.shape[:-2]):
        st.append(acc)
        acc *= d
    p.strides = tuple(reversed(st))
    return p


def mma_width(v: PackedView, ptr: int) -> int:
    """The widest cp.async copy (16 or 4 bytes; 0: none) that can stage ``v``'s rows as
    they are, its bytes at address ``ptr``: rows and matrices start on whole bytes at
    multiples of it."""
    if not contiguous(v.data) or v.shape[-1] % 2:
        return 0
    g = ptr | v.strides[-2] // 2
    for n, st in zip(v.shape[:-2], v.strides[:-2]):
        if n > 1:
            g |= st // 2 if st % 2 == 0 else 1
    return next((w for w in (16, 4) if g % w == 0), 0)


def kmajor_width(v: PackedView, ptr: int) -> int:
    """16 where the tensor-core kernel for a K-major packed b (cuda/matmul_mma_kmajor4.cu) can
    stage ``v``'s columns as they are, its bytes at address ``ptr``: contiguous bytes whose
    start, columns and matrices lie on 16 bytes (32 elements); else 0 (its rows are repacked)."""
    if not v.kmajor or not contiguous(v.data):
        return 0
    g = 2 * ptr | v.strides[-1]
    for n, st in zip(v.shape[:-2], v.strides[:-2]):
        if n > 1:
            g |= st
    return 16 if g % 32 == 0 else 0


def pad_rows(xp, data, shape):
    """``data`` (the bytes of a packed C-order tensor of ``shape``) as 1-D bytes whose rows
    are ROW_ALIGN elements apart, 16-byte aligned, the padding zero."""
    n = shape[-1]
    rows = math.prod(shape[:-1])
    rb = -(-n // ROW_ALIGN) * ROW_ALIGN // 2
    buf = xp.empty(rows * rb + 16, np.uint8)
    skew = (-device.current().ptr(buf)) % 16
    out = buf[skew:skew + rows * rb]
    dst = out.reshape(rows, rb)
    if n % 2 == 0:  # rows on whole bytes: a copy of each row's bytes
        dst[:, n // 2:] = 0
        dst[:, :n // 2] = data[:rows * n // 2].reshape(rows, n // 2)
        return out
    codes = xp.zeros((rows, 2 * rb), np.uint8)  # odd n: rows start mid-byte, so by nibbles
    flat = xp.empty(2 * data.size, np.uint8)
    flat[0::2] = data & np.uint8(15)
    flat[1::2] = data >> np.uint8(4)
    codes[:, :n] = flat[:rows * n].reshape(rows, n)
    dst[...] = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))
    return out


def unpack_table(data, name: str, stored: tuple, k=None, values=True):
    """The values of a packed int4 / uint4 / int2 / uint2 tensor on the device as the C-order int8 / uint8 array
    the matmul kernels read (b's zero points): ``data`` its bytes (1-D uint8 on the current device,
    as many as ``stored``, the C-order shape they hold, takes: dmlq.packing.check_bytes, which the
    caller runs), ``k`` None for that tensor itself (a dmlq.Packed) or, for its ``.mT[..., :k, :]``
    (a dmlq.TransposedPacked: the values of shape (..., k, N) of stored (..., N, L)), the rows
    kept. One launch of cuda/packed_table.cu's unpack_table; with ``values`` False (only the call's
    result shape and dtype are asked: dmlq.calls.output_meta) none, a zero-stride array of its shape
    and dtype in its place."""
    xp = device.xp()
    stored = tuple(int(d) for d in stored)
    if k is None:  # C order: (..., R, C), R = 1 below two axes
        R, C = (stored[-2], stored[-1]) if len(stored) >= 2 else (1, stored[-1] if stored else 1)
        shape, sr, sc = stored, C, 1
    else:  # the transposed view of (..., C, L), its first k rows
        C, L = stored[-2:]
        R, shape, sr, sc = k, stored[:-2] + (k, C), 1, L
    if not values:
        return xp.broadcast_to(xp.zeros((), ZP_DTYPES[name]), shape)
    data = xp.ascontiguousarray(data)
    batch_stride = math.prod(stored[-2:]) if len(stored) >= 2 else 0
    out = xp.empty(shape, ZP_DTYPES[name])
    total = out.size
    if total:
        blocks = min(TABLE_MAX_BLOCKS, -(-total // TABLE_BLOCK))
        kernel = f"unpack_table<{ZP_DTYPES[name].name}>"
        go = _table_launchers.get((*device_key(), kernel, blocks), lambda: launcher(Plan(
            "unpack", "packed table", (Launch(TABLE_SOURCE, kernel, (blocks, 1, 1), (TABLE_BLOCK, 1, 1),
                                              role="table build"),))))
        i64, i32 = np.int64, np.int32
        go([(data, i64(batch_stride), i64(sr), i64(sc), i32(R), i32(C), i64(total), i32(_BITS[name]), out)])
    return out


def widen_launch(count: int, aligned: bool = True) -> Launch:
    """The launch of widen_codes2 over a packed 2-bit tensor of ``count`` elements: a thread a 16-byte
    chunk of whole codes where the bytes lie on 16 (``aligned``), then a thread a remaining byte;
    grid-stride past TABLE_MAX_BLOCKS blocks."""
    in_bytes = -(-count // 4)
    chunks = count // 64 if aligned else 0
    threads = max(chunks, in_bytes - 16 * chunks)
    blocks = max(1, min(TABLE_MAX_BLOCKS, -(-threads // TABLE_BLOCK)))
    return Launch(TABLE_SOURCE, WIDEN_KERNEL, (blocks,), (TABLE_BLOCK,), role="b's 2-bit codes as 4-bit")


def widen_codes2(data, count: int, signed: bool, launch: bool = True, meta: bool = False):
    """The bytes of the packed int4 (``signed``) / uint4 tensor of the same values as the packed
    int2 / uint2 tensor of ``count`` elements whose bytes ``data`` are (1-D uint8 on the current
    device, as many as it takes: the caller checks), in the same element order: one launch of
    cuda/packed_table.cu's widen_codes2 into a new array of ``(count + 1) // 2`` bytes. With
    ``launch`` False (dmlq.kernel_plan: the plan reads the new bytes' layout, not their values)
    the array is made and nothing runs; with ``meta`` (only the call's result shape and dtype are
    asked: dmlq.calls.output_meta) not even that: a zero-stride array of their shape."""
    xp = device.xp()
    if meta:
        return xp.broadcast_to(xp.zeros((), np.uint8), ((count + 1) // 2,))
    out = xp.empty((count + 1) // 2, np.uint8)
    if launch and count:
        data = xp.ascontiguousarray(data)
        one = widen_launch(count, data.data.ptr % 16 == 0)
        go = _table_launchers.get((*device_key(), WIDEN_KERNEL, one.grid[0]), lambda: launcher(Plan(
            "widen", "2-bit b", (one,))))
        go([(data, np.int64(count), np.int32(bool(signed)), out)])
    return out
