"""float32 <-> float8 / float4 / bfloat16 codes, in integer arithmetic only.

docs/semantics.md "float8 and float4" is the contract. No float operation and no
ml_dtypes cast decides a bit here (tests hold ml_dtypes' own casts against these
functions as an independent oracle): a float32 is taken apart as its 32-bit
pattern, rounded to the target's mantissa width by round-to-nearest-even on the
integer significand, and the code assembled from the bits. These are also the
steps the CUDA kernels follow.
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from .qtypes import FloatFormat

_I64 = np.int64


def _rne_shift(v, s):
    """round(v / 2**s), ties to even, for int64 arrays v >= 0 and shifts 1 <= s <= 62."""
    q = v >> s
    rem = v & ((_I64(1) << s) - 1)
    half = _I64(1) << (s - 1)
    return q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))


def encode(x, fmt: FloatFormat, saturate: bool = True):
    """The codes (uint8, or uint16 for bfloat16) of float32 values ``x`` in ``fmt``.

    Round to nearest, ties to even, on the target's bits, with gradual underflow.
    A value that rounds past the largest finite one (and +-inf) becomes +-max
    with ``saturate``, otherwise inf (``"ieee"``) or NaN (``"fn"``, ``"fnuz"``).
    NaN becomes the format's NaN (``"fnuz"``: 0x80; ``"fn"``: sign | all ones;
    ``"ieee"``: sign | exponent all ones | top mantissa bit 1...0, the quiet
    NaN). ``"fnuz"`` has no -0: negative values that round to zero give +0.
    ``"none"`` (float4) has no inf or NaN: it always saturates, and NaN gives
    +max (ONNX's table for FLOAT4E2M1).
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(_I64)
    sign = bits >> 31
    mag = bits & 0x7FFFFFFF
    e_bits, m_bits, bias, special = fmt
    emin = 1 - bias                       # smallest normal exponent of the target
    # Normal range of the target: re-bias the float32 pattern, drop 23 - m_bits bits.
    normal = _rne_shift(np.maximum(mag - ((127 - bias) << 23), 0), 23 - m_bits)
    # Below the target's smallest normal: the significand in units of its
    # smallest subnormal 2**(emin - m_bits). float32 subnormals have exponent -126
    # and no implicit bit.
    e32 = np.maximum(mag >> 23, 1) - 127
    sig = (mag & 0x7FFFFF) | np.where(mag >> 23 > 0, _I64(1) << 23, _I64(0))
    shift = np.clip(23 + emin - m_bits - e32, 1, 62)
    sub = _rne_shift(sig, shift)
    code = np.where(mag >= (127 + emin) << 23, normal, sub)

    top = fmt.max_code
    nan_code: Optional[int]
    over_code: Optional[int]
    is_nan = mag > 0x7F800000
    over = (code > top) | (mag == 0x7F800000)
    if special == "ieee":
        inf_code = ((1 << e_bits) - 1) << m_bits
        nan_code = inf_code | (1 << (m_bits - 1))
        over_code = top if saturate else inf_code
    elif special == "fn":
        nan_code = (1 << (e_bits + m_bits)) - 1
        over_code = top if saturate else nan_code
    elif special == "fnuz":
        nan_code = None
        over_code = top if saturate else None
    else:  # "none": no inf, no NaN
        nan_code = None
        over_code = top
    code = np.where(over, over_code if over_code is not None else 0, code)
    sbit = _I64(1) << (fmt.bits - 1)
    out = code | (sign * sbit)
    if special == "fnuz":
        out = np.where(code == 0, 0, out)  # no -0: 0x80 is NaN
        bad = is_nan if saturate else (is_nan | over)
        out = np.where(bad, sbit, out)
    elif special == "none":
        out = np.where(is_nan, top, out)  # NaN -> +max
    else:
        out = np.where(is_nan, nan_code | (sign * sbit), out)
    return out.astype(np.uint16 if fmt.bits > 8 else np.uint8)


@functools.lru_cache(maxsize=None)
def _decode_table(fmt: FloatFormat) -> np.ndarray:
    """float32 bit patterns of every code of an 8-bit-or-narrower format."""
    e_bits, m_bits, bias, special = fmt
    n = 1 << fmt.bits
    table = np.zeros(n, np.uint32)
    for code in range(n):
        s = code >> (fmt.bits - 1)
        e = (code >> m_bits) & ((1 << e_bits) - 1)
        m = code & ((1 << m_bits) - 1)
        if special == "fnuz" and code == 1 << (fmt.bits - 1):
            word = 0x7FC00000
        elif special == "fn" and e == (1 << e_bits) - 1 and m == (1 << m_bits) - 1:
            word = 0x7FC00000
        elif special == "ieee" and e == (1 << e_bits) - 1:
            word = 0x7F800000 if m == 0 else 0x7FC00000
        elif e == 0 and m == 0:
            word = 0
        else:
            if e == 0:  # subnormal: normalize m * 2**(1 - bias - m_bits)
                shift = m_bits + 1 - m.bit_length()
                m, e = (m << shift) & ((1 << m_bits) - 1), 1 - shift
            word = ((e - bias + 127) << 23) | (m << (23 - m_bits))
        table[code] = word | (s << 31)
    return table


def decode_e8m0(codes):
    """float32 values of float8_e8m0fnu codes (uint8): 2**(e - 127), exactly (e = 0 is the
    float32 subnormal 2**-127); 0xFF is NaN. The format has no sign, zero or infinity."""
    e = np.asarray(codes).astype(np.uint32)
    word = np.where(e == 0, np.uint32(0x00400000), e << 23)
    return np.where(e == 0xFF, np.uint32(0x7FC00000), word).astype(np.uint32).view(np.float32)


def decode(codes, fmt: FloatFormat):
    """float32 values of codes (uint8 for float8/float4; uint16 for bfloat16): exact.

    NaN codes give a NaN with the code's sign (fnuz: +NaN)."""
    codes = np.asarray(codes)
    if fmt.bits > 8:  # bfloat16: the top half of a float32
        return (codes.astype(np.uint32) << 16).view(np.float32)
    idx = codes.astype(np.intp)
    if fmt.bits < 8:  # float4: a byte's low bits (the bits above, if a view of other bytes set them, ignored)
        idx &= (1 << fmt.bits) - 1
    return _decode_table(fmt)[idx].view(np.float32)
