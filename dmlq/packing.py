"""Packed 4-bit and 2-bit tensors: ``dmlq.pack`` / ``dmlq.unpack`` and ``dmlq.Packed``.

A packed tensor is the bytes ONNX stores for an INT4/UINT4/FLOAT4E2M1 (two
elements a byte) or INT2/UINT2 (four a byte) tensor: the elements in C order,
element ``i`` in bits ``(i % k) * bits`` and up of byte ``i // k`` (the first
element in the low bits), the unused high bits of the last byte zero. A
:class:`Packed` carries those bytes (a 1-D uint8 array of
``ceil(size * bits / 8)`` bytes, NumPy or CuPy) with the logical ``shape`` and
``dtype`` they stand for. The four float8 types travel the same way, one byte
per element (ONNX's raw_data, the ml_dtypes and torch bit patterns): CuPy has
no float8 dtype, so on the GPU a float8 tensor is a Packed too (dmlq.quant_gpu).
The functions use only array operations that NumPy and CuPy share, so they pack
and unpack on either side.
"""
from __future__ import annotations

import math
import numbers
import sys
from typing import Any, NamedTuple, Tuple

import numpy as np

from .dtypes import torch_name
from .gpu.capture import guarded
from .gpu.packed import kmajor, stored_shape, widen_codes2
from .qtypes import QType, qtype


class Packed(NamedTuple):
    """Sub-byte elements packed as ONNX packs them (see :mod:`dmlq.packing`).

    data: 1-D uint8 array (NumPy or CuPy) of ``ceil(size * bits / 8)`` bytes.
    shape: the logical shape. dtype: the element type's QType name (``"int4"``).
    """

    data: Any
    shape: Tuple[int, ...]
    dtype: str

    @property
    def qtype(self) -> QType:
        return qtype(self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return packed_nbytes(self.size, self.qtype)

    def astype(self, dtype: Any) -> "Packed":
        """The Packed of type ``dtype`` holding the same values: int2 -> int4 and uint2 -> uint4
        (the only pairs that keep every value), or this Packed itself for its own type. A 2-bit
        weight of the integer matmuls held as 4-bit once (``w4 = w2.astype("int4")`` outside a
        decode loop) skips the widening each call pays on the GPU (dmlq.packed_b). NumPy or CuPy
        bytes, as the Packed's; on the GPU one launch (cuda/packed_table.cu's widen_codes2) on the
        current device and stream."""
        return widened(self, dtype)

    @property
    def mT(self) -> "TransposedPacked":
        """The tensor with its last two axes swapped, its bytes unchanged (see
        :class:`TransposedPacked`): ``dmlq.pack(w).mT`` is ``w.mT`` held as ``w``'s bytes."""
        if len(self.shape) < 2:
            raise ValueError(f"Packed.mT: a packed tensor of shape {self.shape} has fewer than 2 axes")
        return TransposedPacked(self)

    @property
    def T(self) -> "TransposedPacked":
        """:attr:`mT` of a matrix (2-D only: for a batch of matrices say ``.mT``)."""
        if len(self.shape) != 2:
            raise ValueError(f"Packed.T: a packed tensor of shape {self.shape} is not a matrix; .mT swaps the "
                             "last two axes of any rank")
        return TransposedPacked(self)


class TransposedPacked:
    """A :class:`Packed` with its last two axes swapped (``p.mT``; ``p.T`` for a matrix), its
    bytes as they are: ``dmlq.pack(w).mT`` for an (N, K) int4/uint4 weight ``w`` is the (K, N)
    ``b`` of ``x @ w.T`` held as torch's Linear layout and onnxruntime's MatMulNBits hold it, N
    runs of K packed elements. The integer matmuls take it as ``b`` (and ``b_zero_point``), and
    the GPU's kernels read such a ``b`` as it is (the weight-streaming kernels, the dp4a tiles, the
    tensor-core tile where its columns lie on 32 elements); :func:`unpack` gives its values (a
    transposed view). Anything else refuses it: it is no array.

    ``t[..., :k, :]`` (``t[:k]`` for a matrix) keeps the first ``k`` elements of each stored row,
    as NumPy slices the transposed view: MatMulNBits pads each row of its B to whole blocks
    and each row of its zero points to a whole byte, so its (N, L) bytes with L past K are
    ``dmlq.Packed(B, (N, L), "uint4").mT[..., :K, :]``. ``k`` is the view's K (``shape[-2]``).
    """

    __slots__ = ("packed", "k")

    def __init__(self, packed: Packed, k: Any = None) -> None:
        if not isinstance(packed, Packed):
            raise TypeError(f"TransposedPacked: takes a dmlq.Packed (got {type(packed).__name__}); "
                            "write p.mT for a Packed p")
        if len(packed.shape) < 2:
            raise ValueError(f"TransposedPacked: a packed tensor of shape {packed.shape} has fewer than 2 axes")
        row = int(packed.shape[-1])
        if k is None:
            k = row
        if not isinstance(k, numbers.Integral) or isinstance(k, (bool, np.bool_)) or not 0 <= int(k) <= row:
            raise ValueError(f"TransposedPacked: k = {k!r} must be an int in [0, {row}] (the elements of each "
                             f"row of the Packed {tuple(packed.shape)})")
        self.packed = packed
        self.k = int(k)

    @property
    def data(self) -> Any:
        return self.packed.data

    @property
    def dtype(self) -> str:
        return self.packed.dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        s = tuple(self.packed.shape)
        return s[:-2] + (self.k, s[-2])

    @property
    def ndim(self) -> int:
        return len(self.packed.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes it is held in: its Packed's (those of every stored row, whole)."""
        return self.packed.nbytes

    @property
    def qtype(self) -> QType:
        return self.packed.qtype

    @property
    def sliced(self) -> bool:
        """Whether it holds fewer than the whole of each stored row (``k`` below their length)."""
        return self.k != self.packed.shape[-1]

    def _whole(self, what: str) -> Packed:
        if self.sliced:
            raise ValueError(f"TransposedPacked.{what}: this {self.shape} view keeps {self.k} of each stored row's "
                             f"{self.packed.shape[-1]} elements, which no Packed holds; .packed is the whole "
                             f"tensor, dmlq.pack(dmlq.unpack(t).mT) one of these values")
        return self.packed

    def astype(self, dtype: Any) -> "TransposedPacked":
        """:meth:`Packed.astype` of its Packed, the same view of it (``[..., :k, :]`` kept)."""
        return TransposedPacked(self.packed.astype(dtype), self.k)

    @property
    def mT(self) -> Packed:
        return self._whole("mT")

    @property
    def T(self) -> Packed:
        if self.ndim != 2:
            raise ValueError(f"TransposedPacked.T: shape {self.shape} is not a matrix; .mT swaps the last two axes")
        return self._whole("T")

    def __getitem__(self, key: Any) -> "TransposedPacked":
        """``t[..., :k, :]`` (``t[:k]``, ``t[..., :k]``, any spelling NumPy reads so): the first ``k``
        elements of each stored row; any other index is refused (unpack it for its values)."""
        parts = key if isinstance(key, tuple) else (key,)
        nd = self.ndim
        if sum(p is Ellipsis for p in parts) > 1:
            raise IndexError("TransposedPacked: an index can only have a single ellipsis ('...')")
        if Ellipsis in parts:
            i = parts.index(Ellipsis)
            parts = parts[:i] + (slice(None),) * (nd - len(parts) + 1) + parts[i + 1:]
        parts = parts + (slice(None),) * (nd - len(parts))
        whole = slice(None)
        axis = parts[nd - 2] if len(parts) == nd else None
        if (len(parts) != nd or any(p != whole for j, p in enumerate(parts) if j != nd - 2)
                or not isinstance(axis, slice) or axis.start not in (None, 0) or axis.step not in (None, 1)
                or not (axis.stop is None or (isinstance(axis.stop, numbers.Integral)
                                              and not isinstance(axis.stop, (bool, np.bool_))))):
            raise IndexError(f"TransposedPacked: takes only [..., :k, :] (the first k elements of each stored "
                             f"row, as MatMulNBits pads them; got {key!r}); dmlq.unpack(t) gives its values as an "
                             f"array to index")
        return TransposedPacked(self.packed, range(self.k)[axis].stop if axis.stop is not None else self.k)

    def __dask_tokenize__(self) -> Any:
        """dask's name for it: its Packed's (whose device bytes dmlq.dask_tokens names without a copy to
        the host) and k."""
        from dask.base import normalize_token

        return type(self).__name__, normalize_token(self.packed), self.k

    def __repr__(self) -> str:
        return f"{self.packed!r}.mT" + (f"[..., :{self.k}, :]" if self.sliced else "")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"a transposed dmlq.Packed ({self.dtype} {self.shape}) is taken only as b (or "
                        "b_zero_point) of the integer matmuls; dmlq.unpack(p) gives its values")


def refuse_lazy(f: str, name: str, p: Packed) -> None:
    """A Packed whose data is a dask array or a torch tensor is refused, naming it (its
    bytes are never computed or converted behind the caller's back)."""
    mod = type(p.data).__module__.partition(".")[0]
    if mod in ("dask", "torch"):
        what = "a dask array" if mod == "dask" else "a torch tensor"
        data = (f"{name}.data.compute()" if mod == "dask" else f"cupy.asarray({name}.data)"
                if getattr(p.data, "is_cuda", False) else f"{name}.data.numpy()")  # a CPU tensor: NumPy bytes
        raise TypeError(f"{f}: {name} is a dmlq.Packed whose data is {what}; dmlq takes a Packed of NumPy or CuPy "
                        f"bytes: pass {remade(name, p, data)}")


def with_bytes(p: Any, data: Any) -> Any:
    """``p`` (a Packed or TransposedPacked) over other bytes ``data`` (a stand-in of them)."""
    if isinstance(p, TransposedPacked):
        return TransposedPacked(p.packed._replace(data=data), p.k)
    return p._replace(data=data)


def remade(name: str, p: Any, data: str) -> str:
    """The line that makes ``p`` (a Packed or TransposedPacked named ``name``) again over the
    bytes ``data`` (an expression): what an error says to pass instead."""
    if isinstance(p, TransposedPacked):
        return f"dmlq.Packed({data}, {name}.packed.shape, {name}.dtype).mT" + (f"[..., :{p.k}, :]" if p.sliced else "")
    return f"dmlq.Packed({data}, {name}.shape, {name}.dtype)"


def packed_nbytes(size: int, q) -> int:
    """Bytes that ``size`` elements of type ``q`` take packed."""
    q = qtype(q)
    return (size * q.bits + 7) // 8


def _xp(a, f="unpack", name="the packed data"):
    """numpy or cupy for array ``a`` (a NumPy array or a CuPy one: ``__cuda_array_interface__``);
    a TypeError naming ``name`` for anything else."""
    if isinstance(a, np.ndarray):
        return np
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy
    mod = type(a).__module__.partition(".")[0]
    fix = "its computed array (.compute())" if mod == "dask" else "a NumPy or CuPy array"
    raise TypeError(f"{f}: {name} is a {type(a).__module__}.{type(a).__name__}; {f} takes NumPy or CuPy arrays: "
                    f"pass {fix}")


def pair_codes(b):
    """torch.float4_e2m1fn_x2's bytes (..., n), a NumPy or CuPy uint8 array, as the codes of the
    float4 values they hold (..., 2 n), one a byte: the first of each byte in its low nibble."""
    xp = sys.modules[type(b).__module__.partition(".")[0]]
    return xp.stack([b & 0x0F, b >> 4], axis=-1).reshape(tuple(b.shape[:-1]) + (2 * b.shape[-1],))


def _torch_codes(x, dtype):
    """(the uint8 codes of torch tensor ``x``, NumPy for a CPU tensor, CuPy for a CUDA one, and
    the type's name): a tensor of a narrow torch dtype (torch.int4 ... torch.float8_e4m3fn,
    one element a byte, the code in the low bits), or a torch.uint8 tensor of codes with
    ``dtype=``."""
    import torch

    t = x.detach()
    name = torch_name(t.dtype)
    if name == "float4_e2m1fn_x2":  # float4 values, two of the last axis a byte: their codes, one a byte
        if dtype is not None and qtype(dtype, "pack: dtype").name != "float4_e2m1fn":
            raise TypeError(f"pack: x is a torch.float4_e2m1fn_x2 tensor, whose values are float4_e2m1fn "
                            f"(got dtype={dtype!r})")
        if t.ndim == 0:
            raise ValueError("pack: x is a 0-d torch.float4_e2m1fn_x2 tensor, whose byte holds two float4 values "
                             "of no shape; pass x.reshape(1) (two values)")
        raw = t.view(torch.uint8)
        return pair_codes(raw.numpy() if raw.device.type == "cpu" else __import__("cupy").asarray(raw)), "float4_e2m1fn"
    if dtype is None:
        if name == "uint8":
            raise TypeError("pack: x is a torch.uint8 tensor: say which type its codes are with dtype= "
                            "(dtype='int4', 'uint2' ...), or pass a tensor of that torch type")
        q = qtype(name, "pack: x's dtype")
    else:
        q = qtype(dtype, "pack: dtype")
        if name not in (q.name, "uint8"):
            raise TypeError(f"pack: x must be a {q.name} tensor or a uint8 tensor of {q.name} codes "
                            f"(got {t.dtype})")
    _sub_byte(q, "pack")
    raw = t if t.dtype == torch.uint8 else t.view(torch.uint8)
    codes = raw.numpy() if raw.device.type == "cpu" else __import__("cupy").asarray(raw)
    if name != "uint8":
        codes = codes & ((1 << q.bits) - 1)  # torch may hold a 4-bit code sign-extended in its byte
    return codes, q.name


def _sub_byte(q, what):
    if not (q.packed or q.is_float):
        raise TypeError(f"{what}: only the 4-bit and 2-bit types are packed (int4, uint4, float4_e2m1fn, "
                        f"int2, uint2), and the float8 types held as their bytes (one per element: CuPy has "
                        f"no float8 dtype); {q.name} is a plain array everywhere")


@guarded
def pack(x: Any, dtype: Any = None) -> Packed:
    """Pack an int4/uint4/float4_e2m1fn/int2/uint2 (or float8) array as ONNX does.

    Parameters
    ----------
    x : array
        One element per byte: an array of the ml_dtypes type (NumPy) or a torch tensor
        of the torch type (torch.int4 ...; CPU or CUDA; torch.float4_e2m1fn_x2, two values
        of the last axis a byte, stands for its values), or, with ``dtype=``, a uint8
        array or tensor of the type's codes (the low 4 or 2 bits; the others 0), NumPy,
        CuPy or torch.
    dtype : dtype or name, optional
        The element type when ``x`` holds codes (``"int4"`` ...).

    Returns
    -------
    Packed
        ``data`` (1-D uint8, ``ceil(size * bits / 8)`` bytes: the first element in the
        low bits, the last byte padded with zeros; NumPy for NumPy arrays and CPU
        tensors, CuPy for CuPy arrays and CUDA tensors), ``shape`` and ``dtype``.

    Raises
    ------
    TypeError
        ``x`` is not an array or tensor of a 4-bit, 2-bit or float8 type (or codes with
        ``dtype=``); a dask array (pack its computed array).
    ValueError
        A code wider than the type (NumPy; a GPU array's codes are not read, which would
        synchronize: the bits above the type's are dropped there).

    Examples
    --------
    >>> import ml_dtypes, numpy as np, dmlq
    >>> dmlq.pack(np.array([1, -2, 3], ml_dtypes.int4)).data
    array([225,   3], dtype=uint8)
    """
    if isinstance(x, (Packed, TransposedPacked)):
        raise TypeError("pack: x is already a dmlq.Packed")
    if isinstance(x, np.generic):
        x = np.asarray(x)  # a NumPy scalar: a 0-d array
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError("pack: x is a masked array (numpy.ma); pack would drop the mask: pass x.filled(value) "
                        "or x.data")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.device.type == "cuda":
        import cupy

        from .torch_stream import cuda_scope  # (the CuPy work on torch's current stream, as dmlq.torch's)

        with cuda_scope(cupy, x.device.index if x.device.index is not None else torch.cuda.current_device()):
            codes, name = _torch_codes(x, dtype)
            return pack(codes, dtype=name)
    if torch is not None and isinstance(x, torch.Tensor):
        x, dtype = _torch_codes(x, dtype)
    elif type(x).__module__.partition(".")[0] == "dask":
        raise TypeError("pack: x is a dask array; pack takes NumPy or CuPy arrays and torch tensors: pack "
                        "x.compute() (dmlq's functions take a dask array of an ml_dtypes type as it is)")
    elif not hasattr(x, "dtype") or not hasattr(x, "view"):
        raise TypeError(f"pack: x must be a NumPy or CuPy array or a torch tensor of a 4-bit, 2-bit or float8 "
                        f"type, or of uint8 codes with dtype= (got {type(x).__name__})")
    if dtype is None:
        q = qtype(getattr(x, "dtype", None), "pack: x's dtype")
        _sub_byte(q, "pack")
        codes = x.view(np.uint8)
    else:
        q = qtype(dtype, "pack: dtype")
        _sub_byte(q, "pack")
        xdt = np.dtype(getattr(x, "dtype", None) or np.float64)
        if xdt == q.dtype:
            codes = x.view(np.uint8)
        elif xdt == np.uint8:
            codes = x
            if isinstance(codes, np.ndarray) and codes.size and bool((codes >> q.bits).any()):
                raise ValueError(f"pack: x holds codes of more than {q.bits} bits; a {q.name} code is "
                                 f"0 ... {(1 << q.bits) - 1}")
        else:
            raise TypeError(f"pack: x must be a {q.name} array or a uint8 array of {q.name} codes "
                            f"(got dtype {xdt})")
    return pack_codes(codes, q)


def pack_codes(codes, q) -> Packed:
    """The Packed of uint8 ``codes`` (NumPy or CuPy, the low bits of each byte) of type ``q``,
    unchecked (:func:`pack` checks what a caller hands it)."""
    q = qtype(q)
    xp = _xp(codes)
    per = 8 // q.bits
    flat = xp.ascontiguousarray(codes).reshape(-1) & ((1 << q.bits) - 1)
    n = flat.size
    padded = xp.zeros(-(-n // per) * per, np.uint8)
    padded[:n] = flat
    groups = padded.reshape(-1, per)
    out = groups[:, 0].copy()
    for k in range(1, per):
        out |= groups[:, k] << (k * q.bits)
    return Packed(out, tuple(int(s) for s in codes.shape), q.name)


@guarded
def logical_shape(shape: Any, where: str) -> tuple:
    """A packed tensor's logical shape as a tuple of ints (one int: a 1-D shape, as NumPy
    takes it); a TypeError for anything but integers (bools, floats, strings), a ValueError
    for a negative size, each message starting with ``where``."""
    if isinstance(shape, numbers.Integral) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    try:
        if isinstance(shape, (str, bytes)):
            raise TypeError
        if not all(isinstance(s, numbers.Integral) and not isinstance(s, (bool, np.bool_)) for s in shape):
            raise TypeError
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{where} shape must be a tuple of ints (got {shape!r})") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"{where} shape {shape} has a negative size")
    return shape


def unpack(packed: Any, shape: Any = None, dtype: Any = None, *, codes: bool = False) -> Any:
    """The elements of a packed tensor, one per byte.

    Parameters
    ----------
    packed : Packed, TransposedPacked or 1-D uint8 array
        A :class:`Packed` (or its ``.mT``: the transposed view of its values), or the packed
        bytes alone (then with ``shape`` and ``dtype``).
    shape : tuple of int, optional
        The logical shape (bytes alone only).
    dtype : dtype or name, optional
        The element type (bytes alone only).
    codes : bool, default False
        Return the uint8 codes (sign bits not extended) instead of the ml_dtypes type.

    Returns
    -------
    ndarray
        The ml_dtypes type's array (NumPy), or uint8 codes (``codes=True``, and always
        for CuPy, which has no such dtype), of the logical shape.

    Raises
    ------
    TypeError
        Not packed bytes, or shape/dtype missing (or given with a Packed).
    ValueError
        The byte count does not match the shape.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> dmlq.unpack(np.array([0xE1, 0x03], np.uint8), (3,), "int4")
    array([1, -2, 3], dtype=int4)
    """
    if isinstance(packed, TransposedPacked):
        if shape is not None or dtype is not None:
            raise TypeError("unpack: a dmlq.Packed carries its shape and dtype; pass it alone")
        return unpack(packed.packed, codes=codes).swapaxes(-1, -2)[..., :packed.k, :]
    if isinstance(packed, Packed):
        if shape is not None or dtype is not None:
            raise TypeError("unpack: a dmlq.Packed carries its shape and dtype; pass it alone")
        data, shape, dtype = packed
    else:
        if shape is None or dtype is None:
            raise TypeError("unpack: pass a dmlq.Packed, or the packed bytes with shape= and dtype=")
        data = packed
    q = qtype(dtype, "unpack: dtype")
    _sub_byte(q, "unpack")
    shape = logical_shape(shape, "unpack:")
    n = math.prod(shape)
    check_bytes(data, shape, q)
    xp = _xp(data)
    per = 8 // q.bits
    mask = (1 << q.bits) - 1
    parts = xp.stack([(data >> (k * q.bits)) & mask for k in range(per)], axis=1)
    out = parts.reshape(-1)[:n].reshape(shape).astype(np.uint8)
    if codes or xp is not np:
        return out
    return out.view(q.dtype)


WIDER = {"int2": "int4", "uint2": "uint4"}  # the 2-bit types as the 4-bit types of their values


def widen_bytes(data, count: int, signed: bool, launch: bool = True, meta: bool = False):
    """The bytes of the packed int4 (``signed``) / uint4 tensor of the same values as the packed
    int2 / uint2 tensor of ``count`` elements in ``data`` (checked by the caller), element order
    kept: NumPy bytes in the array operations here, CuPy bytes by one launch of
    cuda/packed_table.cu's widen_codes2 (``launch`` / ``meta``: dmlq.gpu.packed.widen_codes2)."""
    if isinstance(data, np.ndarray):
        codes = unpack(data, (count,), "uint2", codes=True)
        return pack_codes(codes | ((codes & np.uint8(2)) * np.uint8(6)) if signed else codes, "uint4").data
    return widen_codes2(data, count, signed, launch=launch, meta=meta)


@guarded
def widened(p: Packed, dtype: Any) -> Packed:
    """:meth:`Packed.astype` (a public function for CUDA-graph capture's allocations)."""
    q, src = qtype(dtype, "Packed.astype: dtype"), qtype(p.dtype, "Packed.astype: the Packed's dtype")
    if q.name == src.name:
        return p
    if WIDER.get(src.name) != q.name:
        to = (f"converts to {WIDER[src.name]} only (every value kept)" if src.name in WIDER else
              "has no other packed type that holds every value")
        raise TypeError(f"Packed.astype: a packed {src.name} tensor {to}; got dtype {q.name}: dmlq.unpack(p) gives "
                        "its values to convert as you choose")
    shape = logical_shape(p.shape, "Packed.astype:")
    check_bytes(p.data, shape, src, "Packed.astype")
    if _xp(p.data, "Packed.astype", "its bytes") is not np:  # CuPy's: launched on their own device
        with p.data.device:
            return Packed(widen_bytes(p.data, math.prod(shape), src.name == "int2"), shape, q.name)
    return Packed(widen_bytes(p.data, math.prod(shape), src.name == "int2"), shape, q.name)


def held(p: Any, where: str = "unpack:") -> Tuple[Tuple[int, ...], Any]:
    """(the C-order shape the bytes of ``p`` hold, the rows it keeps): a :class:`Packed`'s shape and
    None, or a :class:`TransposedPacked`'s Packed's shape and its ``k``; the shape as
    :func:`logical_shape` reads it (errors start with ``where``)."""
    if isinstance(p, TransposedPacked):
        return logical_shape(p.packed.shape, where), p.k
    return logical_shape(p.shape, where), None


def check_bytes(data, shape: tuple, q, where: str = "unpack") -> None:
    """That ``data`` holds a packed tensor of ``shape`` (a tuple of ints) and type ``q``: 1-D
    uint8 bytes (not a torch tensor), exactly as many as :func:`packed_nbytes` says; else the
    TypeError or ValueError :func:`unpack` raises (its messages start with ``where``)."""
    if type(data).__module__.partition(".")[0] == "torch":
        raise TypeError(f"{where}: the packed data is a torch tensor; pass its bytes as a NumPy or CuPy array "
                        "(t.numpy() for a CPU tensor, cupy.asarray(t) for a CUDA one)")
    if getattr(data, "dtype", None) != np.uint8 or getattr(data, "ndim", 0) != 1:
        raise TypeError(f"{where}: the packed data must be a 1-D uint8 array (got "
                        f"{type(data).__name__} {getattr(data, 'dtype', '')} {getattr(data, 'shape', '')})")
    n, q = math.prod(shape), qtype(q)
    need = packed_nbytes(n, q)
    if data.size != need:
        raise ValueError(f"{where}: {n} {q.name} elements (shape {shape}) take {need} bytes packed; the data "
                         f"holds {data.size}")


def unpack_b(data, b_packed):
    """A packed b's values (the ml_dtypes array; CuPy: codes) from its bytes and the integer
    matmuls' ``b_packed = (dtype name, logical (..., K, N) shape, zp_wide[, kmajor, row])``: with
    ``kmajor`` the bytes are the (..., N, row) tensor's (:class:`TransposedPacked`; ``row`` >= K,
    K without it), and the result is the transposed view of its first K columns."""
    name, shape = b_packed[0], tuple(b_packed[1])
    if kmajor(b_packed):
        return unpack(TransposedPacked(Packed(data, stored_shape(b_packed), name), shape[-2]))
    return unpack(data, shape, name)
