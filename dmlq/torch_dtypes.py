"""torch's dtypes beside NumPy's (the narrow types through views of their bytes), and the
conversions between a tensor and a NumPy array that dmlq.torch and dmlq.torch_traced share."""
import ml_dtypes
import numpy as np
import torch

from .packing import pair_codes

_TO_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
             torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
             torch.int64: np.int64, torch.bool: np.bool_}
for _name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
    if hasattr(torch, _name):
        _TO_NUMPY[getattr(torch, _name)] = getattr(np, _name)
# The narrow types (docs/semantics.md "Quantized types beyond int8"): torch's dtype of the same
# name holds one element per byte (two for bfloat16), as ml_dtypes' does in NumPy, so a tensor is
# read and written through a view of its bytes (Tensor.numpy() refuses these dtypes). float4_e2m1fn
# is torch's float4_e2m1fn_x2 (torch >= 2.8): two elements of the last axis a byte, the first in
# the low nibble (torch's c10 Float4_e2m1fn_x2 header; ONNX's order), so a tensor of shape (..., n)
# holds the float4 values of shape (..., 2 n): unpacked into ml_dtypes' one-a-byte form on CPU,
# handed to the GPU kernels as the packed bytes they read (dmlq.torch_gpu), a result packed back.
_NARROW = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "int4", "uint4",
           "int2", "uint2", "float8_e8m0fnu")
_VIEWED: dict = {}
for _name in _NARROW:
    if hasattr(torch, _name) and hasattr(ml_dtypes, _name):
        _TO_NUMPY[getattr(torch, _name)] = ml_dtypes.__dict__[_name]
        _VIEWED[getattr(torch, _name)] = (torch.int16, np.int16) if _name == "bfloat16" else (torch.uint8, np.uint8)
FLOAT4_X2 = getattr(torch, "float4_e2m1fn_x2", None)
if FLOAT4_X2 is not None and hasattr(ml_dtypes, "float4_e2m1fn"):
    _TO_NUMPY[FLOAT4_X2] = ml_dtypes.float4_e2m1fn
    _VIEWED[FLOAT4_X2] = (torch.uint8, np.uint8)
else:  # pragma: no cover - a torch without the dtype
    FLOAT4_X2 = None
_TO_TORCH = {np.dtype(v): k for k, v in _TO_NUMPY.items()}


def pairs(dtype) -> bool:
    """Whether a torch dtype is float4_e2m1fn_x2 (two elements a byte)."""
    return FLOAT4_X2 is not None and dtype == FLOAT4_X2


def logical_shape(t, size=int) -> tuple:
    """The shape of the values a tensor holds: a float4_e2m1fn_x2 tensor's last axis twice its
    length (a 0-d one is refused: its byte holds two values of no shape)."""
    shape = tuple(size(s) for s in t.shape)
    if not pairs(t.dtype):
        return shape
    if not shape:
        raise ValueError("a 0-d torch.float4_e2m1fn_x2 tensor holds two float4 values of no shape; give it a "
                         "last axis (t.reshape(1): two values)")
    return shape[:-1] + (2 * shape[-1],)


def pair_shape(shape) -> tuple:
    """The float4_e2m1fn_x2 tensor shape holding float4 values of ``shape`` (its last axis halved)."""
    shape = tuple(shape)
    if not shape or shape[-1] % 2:
        what = "no axis" if not shape else f"a last axis of {shape[-1]} elements"
        raise ValueError(f"a float4_e2m1fn result of shape {shape} has {what}; torch holds float4 values as "
                         "torch.float4_e2m1fn_x2, two elements of the last axis a byte, so that axis must have an "
                         "even length: pad it, or call dmlq on NumPy arrays (x.numpy())")
    return shape[:-1] + (shape[-1] // 2,)


def unpack_pairs(b: np.ndarray) -> np.ndarray:
    """uint8 bytes (..., n) of float4_e2m1fn_x2 as ml_dtypes float4_e2m1fn values (..., 2 n)."""
    return pair_codes(b).view(ml_dtypes.float4_e2m1fn)


def pack_pairs(a: np.ndarray) -> np.ndarray:
    """ml_dtypes float4_e2m1fn values (..., 2 n) as float4_e2m1fn_x2's bytes (..., n), C order."""
    codes = a.view(np.uint8) & 0x0F
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4))


def _fx_names_the_narrow_types():
    """torch.fx writes a graph's tensors with their dtype's short name, from a table
    (torch.utils._dtype_abbrs) that torch 2.13 builds without int1..int7 and uint1..uint7: every
    graph holding a torch.int4/uint4/int2/uint2 value raised ``KeyError: torch.int4`` where torch
    prints or logs it (inductor compiles each graph that way, and torch.export.save), so no such
    graph compiled with the default backend. The types dmlq gives tensors get their names there
    (``dtype.abbr``, "int4"); a torch whose table has them keeps its own."""
    try:
        from torch.utils._dtype_abbrs import dtype_abbrs
    except ImportError:  # pragma: no cover - a torch without the table
        return
    for t in _VIEWED:
        dtype_abbrs.setdefault(t, getattr(t, "abbr", str(t).removeprefix("torch.")))


_fx_names_the_narrow_types()


def numpy_dtype(dtype):
    """A torch dtype as NumPy's (anything else as it is)."""
    return np.dtype(_TO_NUMPY[dtype]) if isinstance(dtype, torch.dtype) and dtype in _TO_NUMPY else dtype


def torch_dtype(dtype) -> torch.dtype:
    """A NumPy dtype, its type or a quantized type's name ("int4") as torch's."""
    if isinstance(dtype, str):
        from .qtypes import QTYPES, qtype

        if dtype.strip().lower() in QTYPES:  # np.dtype("int4") would be int32
            dtype = qtype(dtype).dtype
    dt = np.dtype(dtype)
    if dt not in _TO_TORCH:
        raise TypeError(f"dtype: {dt} has no torch dtype that dmlq can give a tensor; run it on NumPy arrays "
                        "(t.numpy()), or quantize to another type")
    return _TO_TORCH[dt]


def _torch_dtype_or_why(dtype):
    """:func:`torch_dtype`'s answer, or the message of the TypeError it raises (a str, naming dtype)."""
    try:
        return torch_dtype(dtype)
    except TypeError as e:  # (NumPy's own for a name it does not know: "data type 'x' not understood")
        return str(e) if str(e).startswith("dtype") else f"dtype: {e}"


# dtype= given as a NumPy dtype, its type or a name, inside torch.compile: Dynamo cannot trace
# NumPy's dtype comparisons, but the answer is a constant of the call (the graph keeps it). A
# refusal comes back as its message, raised by the caller in the traced code: raised inside the
# constant function, Dynamo reported it as its own InternalTorchDynamoError ("report a PyTorch bug").
_torch_dtype_constant = (torch.compiler.assume_constant_result(_torch_dtype_or_why)
                         if hasattr(torch.compiler, "assume_constant_result") else _torch_dtype_or_why)


def _from_numpy(a):
    """A tensor sharing the NumPy array's memory (the narrow types through a view of its bytes)."""
    t = torch_dtype(a.dtype)
    if pairs(t):  # float4 values, two a byte: a new tensor of their packed bytes
        shape = pair_shape(a.shape)
        return torch.from_numpy(pack_pairs(a)).view(t) if a.size else torch.empty(shape, dtype=t)
    if a.size == 0:  # (no memory to share: torch's contiguous strides, as the fake implementation gives)
        return torch.empty(a.shape, dtype=t)
    if t in _VIEWED:
        return torch.from_numpy(a.view(_VIEWED[t][1])).view(t)
    return torch.from_numpy(a)


def _is_fake(t) -> bool:
    """A tensor with no data to read: a FakeTensor (non-strict torch.export, FakeTensorMode)."""
    try:  # a plain tensor, neither functional nor functorch's: is_fake's answer (False), without its Python
        if type(t) is torch.Tensor and not torch._is_functional_tensor(t) \
                and not torch._C._functorch.is_functorch_wrapped_tensor(t):
            return False
    except AttributeError:  # pragma: no cover - a torch without them: is_fake decides
        pass
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # pragma: no cover - torch without it
        return False
    return is_fake(t)
