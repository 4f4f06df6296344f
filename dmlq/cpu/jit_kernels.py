"""numba's compiled kernels of dmlq.cpu.jit (see there for what each computes and
why it equals dmlq.reference). A module of its own so that numba is imported
only when dmlq.cpu.jit first runs a kernel, and at module level so that numba's
disk cache (``cache=True``) finds the compiled code again in a later process.
"""
from __future__ import annotations

import numba
import numpy as np

MAGIC = np.float32(1.5 * 2**23)
_ZERO = np.float32(0)


def _kernel(fn):
    return numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)(fn)


@numba.njit(inline="always", error_model="numpy")
def _rounded(t, lo, hi, zp):  # pragma: no cover (compiled)
    # the low byte of the int8 / uint8 result of a non-NaN t (float32): clamp, rint, + zp.
    # After the clamp |t| <= 255, so t + MAGIC lies in [2**23, 2**24), where the float32
    # spacing is 1: the add rounds t to an integer (ties to even, MAGIC is even) and the
    # bits of the sum are MAGIC's bits (low byte 0) plus rint(t). Their low byte + zp
    # is the result's byte, with no float subtract and no float -> int conversion.
    t = lo if t < lo else t
    t = hi if t > hi else t
    return np.uint8(np.float32(t + MAGIC).view(np.int32) + zp)


@numba.njit(inline="always", error_model="numpy")
def _requantized(t, lo, hi, zp):  # pragma: no cover (compiled)
    # any float32 t: NaN -> zp, otherwise _rounded
    return _rounded(_ZERO if t != t else t, lo, hi, zp)


@_kernel
def quantize(x, s, lo, hi, zp, out):  # pragma: no cover (compiled)
    for i in range(out.size):
        t = np.float32(x[i]) / s
        out[i] = _requantized(t, lo, hi, zp)


@_kernel
def dequantize_narrow(q, zp, s, out):  # pragma: no cover (compiled)
    # 8- and 16-bit q: float32(q) - float32(zp) is exact (|.| < 2**17)
    for i in range(out.size):
        out[i] = (np.float32(q[i]) - zp) * s


@_kernel
def dequantize_wide(q, zp, s, out):  # pragma: no cover (compiled)
    # 32-bit q: the difference exact in float64, rounded to float32 once
    for i in range(out.size):
        out[i] = np.float32(np.float64(q[i]) - zp) * s


# quantized add: dmlq.cpu.jit calls these only with parameters under which t is never
# NaN (see jit.add), so the tail skips quantize's NaN test.
@_kernel
def add(a, a_zp, a_s, b, b_zp, b_s, o_s, lo, hi, o_zp, out):  # pragma: no cover (compiled)
    for i in range(out.size):
        t = ((np.float32(a[i]) - a_zp) * a_s + (np.float32(b[i]) - b_zp) * b_s) / o_s
        out[i] = _rounded(t, lo, hi, o_zp)


@_kernel
def add_scalar(a, a_zp, a_s, bv, o_s, lo, hi, o_zp, out):  # pragma: no cover (compiled)
    # b one value: its float32 dequantized value bv; av + bv == bv + av
    for i in range(out.size):
        t = ((np.float32(a[i]) - a_zp) * a_s + bv) / o_s
        out[i] = _rounded(t, lo, hi, o_zp)
