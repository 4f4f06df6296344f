"""The requantizing tail every operator ends with, in place on a float32 chunk.

docs/semantics.md, steps 2-4 on ``t = v / s`` (already float32): NaN -> zp,
rint (ties to even), clamp in float to ``[qmin - zp, qmax - zp]``, add zp.
dmlq.reference spells this ``clip(rint(t), lo, hi) + zp`` with a NaN mask; here
the same numbers come from fewer passes over a cache-sized chunk:

1. ``clip(t, lo, hi)`` first. rint is monotone and leaves the integer bounds
   alone, so ``rint(clip(t)) == clip(rint(t))`` for every t; NumPy's clip keeps
   NaN as NaN.
2. ``t + 1.5 * 2**23``: for ``|t| <= 2**22`` the exact sum lies in
   ``[2**23, 2**24)``, where float32's spacing is 1, so the one IEEE rounding
   of the addition is rint(t) (ties to the even neighbour: the offset is even)
   and the float's bits are ``0x4B400000 + rint(t)``.
3. A NaN (the only value left that is not such an integer) becomes the offset
   itself, i.e. ``rint(t) = 0``, which step 4 turns into zp.
4. The low byte of those bits is ``rint(t) mod 256``; adding zp in 8-bit
   wrap-around arithmetic gives ``(rint(t) + zp) mod 256``, and since the true
   value lies in ``[qmin, qmax]`` that byte *is* the int8 or uint8 result.

A per-element zero point (an array) cannot set scalar bounds, so then step 1
clips to ``[-512, 512]`` (wider than ``[qmin - zp, qmax - zp]`` for every int8
or uint8 zp, so nothing the later clamp keeps changes), zp is added in float
after step 3 (exact: integers near 2**23), and the clamp to ``[qmin, qmax]``
(offset included) comes last.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import qrange

F32 = np.dtype(np.float32)
MAGIC = np.float32(1.5 * 2**23)
_I32 = np.dtype(np.int32)
_U8 = np.dtype(np.uint8)


def zp_value(zero_point):
    """A zero point given as None or a size-1 array: its int value; None for a
    per-element array."""
    if zero_point is None:
        return 0
    if zero_point.size == 1:
        return int(zero_point.reshape(-1)[0])
    return None


def finish(t, zero_point, out, nan_mask):
    """Requantize the float32 chunk ``t`` (destroyed) into ``out`` (int8 or uint8,
    same shape). ``zero_point``: an int, or an integer array broadcasting to the
    chunk. ``nan_mask``: a bool scratch array of t's shape."""
    qmin, qmax = qrange(out.dtype)
    scalar = not isinstance(zero_point, np.ndarray)
    if scalar:
        np.clip(t, np.float32(qmin - zero_point), np.float32(qmax - zero_point), out=t)
    else:
        np.clip(t, np.float32(-512), np.float32(512), out=t)
    np.add(t, MAGIC, out=t)
    np.isnan(t, out=nan_mask)
    if nan_mask.any():
        np.copyto(t, MAGIC, where=nan_mask)
    ob = out.view(_U8)
    if scalar:
        np.copyto(ob, t.view(_I32), casting="unsafe")  # int32 -> uint8 keeps the low byte
        if zero_point:
            np.add(ob, np.uint8(zero_point & 0xFF), out=ob)
    else:
        np.add(t, zero_point, out=t, dtype=F32)
        np.clip(t, MAGIC + np.float32(qmin), MAGIC + np.float32(qmax), out=t)
        np.copyto(ob, t.view(_I32), casting="unsafe")
