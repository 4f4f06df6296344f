"""Every quantized type dmlq knows: the integer ranges and the float8/float4 formats.

On the NumPy side each type is the NumPy dtype users already have (``numpy.int8``
... and the ``ml_dtypes`` types: ``int4``, ``float8_e4m3fn`` ...), one element per
byte. :func:`qtype` takes such a dtype or its name and returns the :class:`QType`
that the reference, the API and the packing code share. docs/semantics.md states
what each type means.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

_md: Any
try:
    import ml_dtypes as _md
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; kept importable without it
    _md = None


class FloatFormat(NamedTuple):
    """A small binary float: sign bit, ``exp_bits`` exponent bits (bias ``bias``),
    ``man_bits`` mantissa bits. ``special`` says what the top codes mean:
    ``"ieee"`` (all-ones exponent: inf and NaN, as float16), ``"fn"`` (only the
    all-ones code S.1111.111 is NaN; no inf), ``"fnuz"`` (0x80 is the one NaN; no
    inf, no -0), ``"none"`` (every code finite)."""

    exp_bits: int
    man_bits: int
    bias: int
    special: str

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def max_code(self) -> int:
        """The code (without sign) of the largest finite value."""
        top = (1 << (self.exp_bits + self.man_bits)) - 1
        if self.special == "ieee":
            return top - (1 << self.man_bits)  # exponent all ones is inf/NaN
        if self.special == "fn":
            return top - 1  # S.1111.111 is NaN
        return top


class QType(NamedTuple):
    """One quantized type: its name (as ml_dtypes and NumPy spell it), the NumPy
    dtype holding one element per byte, its width in bits, the ONNX
    TensorProto.DataType number, the integer range (None for floats) and the
    float format (None for integers)."""

    name: str
    dtype: np.dtype
    bits: int
    onnx: int
    qmin: Optional[int]
    qmax: Optional[int]
    fmt: Optional[FloatFormat]

    @property
    def is_float(self) -> bool:
        return self.fmt is not None

    @property
    def packed(self) -> bool:
        """Narrower than a byte: packed two (4-bit) or four (2-bit) to a byte."""
        return self.bits < 8


def _dtype(name):
    if name in ("int8", "uint8", "int16", "uint16"):
        return np.dtype(name)
    if _md is None:
        return None
    return np.dtype(getattr(_md, name))


_SPECS = (
    # name, bits, ONNX TensorProto number, qmin, qmax, float format
    ("int8", 8, 3, -128, 127, None),
    ("uint8", 8, 2, 0, 255, None),
    ("int16", 16, 5, -32768, 32767, None),
    ("uint16", 16, 4, 0, 65535, None),
    ("int4", 4, 22, -8, 7, None),
    ("uint4", 4, 21, 0, 15, None),
    ("int2", 2, 26, -2, 1, None),
    ("uint2", 2, 25, 0, 3, None),
    ("float8_e4m3fn", 8, 17, None, None, FloatFormat(4, 3, 7, "fn")),
    ("float8_e4m3fnuz", 8, 18, None, None, FloatFormat(4, 3, 8, "fnuz")),
    ("float8_e5m2", 8, 19, None, None, FloatFormat(5, 2, 15, "ieee")),
    ("float8_e5m2fnuz", 8, 20, None, None, FloatFormat(5, 2, 16, "fnuz")),
    ("float4_e2m1fn", 4, 23, None, None, FloatFormat(2, 1, 1, "none")),
)

QTYPES = {name: QType(name, _dtype(name), bits, onnx, lo, hi, fmt)
          for name, bits, onnx, lo, hi, fmt in _SPECS}
_BY_DTYPE = {q.dtype: q for q in QTYPES.values() if q.dtype is not None}

# The types the original element-wise path (and its CUDA kernels) produce.
CLASSIC = (QTYPES["int8"], QTYPES["uint8"])
# bfloat16 as a float format (for rounding float32 results to it).
BFLOAT16 = FloatFormat(8, 7, 127, "ieee")
BFLOAT16_DTYPE = None if _md is None else np.dtype(_md.bfloat16)
# float8_e8m0fnu (ONNX FLOAT8E8M0, opset 24): a scale type (powers of two), not a quantized type.
E8M0_DTYPE = None if getattr(_md, "float8_e8m0fnu", None) is None else np.dtype(_md.float8_e8m0fnu)


def qtype(value, what: str = "dtype") -> QType:
    """The QType of a dtype, a dtype's type object, a QType or a name ("int4").

    TypeError naming ``what`` for anything else (including ml_dtypes missing)."""
    if isinstance(value, QType):
        return value
    if isinstance(value, str):
        q = QTYPES.get(value.strip().lower())
        if q is not None:
            if q.dtype is None:
                raise TypeError(f"{what}={value!r} needs the ml_dtypes package (pip install ml_dtypes)")
            return q
        try:  # a NumPy type code ("i1", "<u2"), as np.dtype reads it
            q = _BY_DTYPE.get(np.dtype(value))
        except TypeError:
            q = None
        if q is not None:
            return q
    else:
        try:
            q = _BY_DTYPE.get(np.dtype(value))
        except TypeError:
            q = None
        if q is not None:
            return q
    raise TypeError(f"{what} must be a quantized type: one of {', '.join(QTYPES)} (a NumPy or ml_dtypes "
                    f"dtype, or its name); got {value!r}")


def is_qtype(dtype) -> bool:
    """True for a dtype that is one of the quantized types."""
    if type(dtype).__module__ == "torch":  # torch.int8: np.dtype refuses it (a TypeError that torch.compile,
        return False  # tracing this code when a call falls back from the traced op, could not take)
    try:
        return np.dtype(dtype) in _BY_DTYPE
    except TypeError:
        return False
