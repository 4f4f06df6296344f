"""One fused pass per element (numba, the optional ``[fast]`` extra) for the
common element-wise calls: quantize, dequantize and quantized add on
contiguous operands with per-tensor parameters.

Each kernel reads an element, does the float32 arithmetic of docs/semantics.md
in the order dmlq.reference does it, and writes the result: no temporaries, so
the time is the memory traffic (numba compiles the loops to SIMD code; no
fast-math, so no reassociation, no reciprocal for a division and no fused
multiply-add: every operation is one IEEE float32 rounding, as in NumPy).
dmlq.cpu.elementwise calls them when :func:`active` and the call's operands fit
(:func:`flat`); everything else, and every call when numba is absent, takes its
chunked NumPy path. Both are compared with dmlq.reference on every call of the
fuzz and edge suites (tests/host_backends.py: ``cpu`` and ``cpu-numpy``).

The requantizing tail (NaN -> zp, clamp to ``[qmin - zp, qmax - zp]`` in float,
rint, add zp) is dmlq.cpu.requant's: NaN is replaced by 0 first (quantized add
skips this where its parameters rule NaN out, see :func:`add`), the clamp comes
before rint (equal, the bounds are integers), and rint is the add ``t + 1.5 *
2**23`` (exact ties-to-even rounding to an integer for ``|t| <= 2**22``, which the
clamp ensures), whose float32 bits are those of ``1.5 * 2**23`` (low byte 0)
plus ``rint(t)``: their low byte plus zp is the int8 or uint8 result, written
through a uint8 view of ``out`` (one compiled variant for both output types).

Compile cost: about 0.1-0.5 s per (kernel, dtypes) variant on first use,
cached on disk (numba's ``cache=True``: ``__pycache__`` beside this file, or
numba's user cache directory where that is read-only), so a later process
loads it in milliseconds. numba itself (about 0.3 s to import) is imported by
the first call that can run a kernel, never by a call that cannot (matmul,
pooling). ``DMLQ_CPU_JIT=0`` turns the kernels off.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..dtypes import qrange


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses the name: not importable either
        return False


# numba is imported by the first call that runs a kernel (:func:`active`), not by
# ``import dmlq.cpu``: a process that only multiplies matrices never loads it.
AVAILABLE = _findable("numba")
_on = AVAILABLE and os.environ.get("DMLQ_CPU_JIT", "1") != "0"
_k: Any = None  # dmlq.cpu.jit_kernels, once loaded

F32 = np.dtype(np.float32)
# Below this many elements one thread runs the whole call (a thread hand-off costs more).
SPLIT_MIN = 1 << 16
# Larger calls run in pieces of about this many elements (a few hundred microseconds
# each, against a few microseconds to start one), which the threads share out as they go.
PIECE = 1 << 20


def active() -> bool:
    """Whether the fused kernels run (numba importable, DMLQ_CPU_JIT not 0, not
    inside :func:`disabled`). The first True imports numba and defines the kernels."""
    global _on
    if _on and _k is None:
        try:
            _load()
        except ImportError:  # installed but unusable (e.g. built for another NumPy)
            _on = False
    return _on


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run dmlq.cpu's NumPy path inside the block (the tests run both paths)."""
    global _on
    before, _on = _on, False
    try:
        yield
    finally:
        _on = before


def flat(*arrays) -> bool:
    """Whether coalesced operand views are all 1-D and contiguous (what the kernels take)."""
    return all(a.ndim == 1 and (a.flags.c_contiguous or a.size <= 1) for a in arrays)


def kernels_of(name: str) -> Any:
    """dmlq.cpu.<name>, a module of numba kernels (imported on first use; after :func:`active`)."""
    return importlib.import_module(f".{name}", __package__)


def _load() -> None:
    global _k
    _k = importlib.import_module(".jit_kernels", __package__)  # imports numba


def _run(kernel, out, arrays, scalars, run_pieces) -> None:
    """kernel(*pieces of arrays interleaved with scalars..., out piece) on contiguous
    ranges of the 1-D ``out`` (one below SPLIT_MIN elements, else ``THREADS`` or more
    of at most about PIECE); ``arrays`` maps argument positions to
    1-D arrays the length of out, the other positions take ``scalars`` in order."""
    n = out.size
    from .tiles import THREADS

    if n < SPLIT_MIN:  # one piece, the whole of out: run here (no piece list, no hand-off)
        it = iter(scalars)
        kernel(*[arrays[k] if k in arrays else next(it) for k in range(len(arrays) + len(scalars))], out)
        return
    parts = max(THREADS, -(-n // PIECE))
    bounds = [n * i // parts for i in range(parts + 1)]
    pieces = [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]

    def work(group):
        for lo, hi in group:
            it = iter(scalars)
            args = [arrays[k][lo:hi] if k in arrays else next(it) for k in range(len(arrays) + len(scalars))]
            kernel(*args, out[lo:hi])

    run_pieces(work, pieces)


def bounds(dtype, zp: int):
    """The float32 clamp bounds ``qmin - zp``, ``qmax - zp`` of an int8/uint8 output."""
    qmin, qmax = qrange(dtype)
    return np.float32(qmin - zp), np.float32(qmax - zp)


def quantize(x, s, zp: int, out, run_pieces) -> None:
    """out (1-D int8/uint8, contiguous) = requantize(x / s); x float32 or int32, s a float32 scalar."""
    lo, hi = bounds(out.dtype, zp)
    _run(_k.quantize, out.view(np.uint8), {0: x}, (np.float32(s), lo, hi, np.int32(zp)), run_pieces)


def dequantize(q, zp: int, s, out, run_pieces) -> None:
    """out (1-D float32, contiguous) = float32(q - zp) * s; s a float32 scalar."""
    if q.dtype.itemsize == 4:
        _run(_k.dequantize_wide, out, {0: q}, (np.float64(zp), np.float32(s)), run_pieces)
    else:
        _run(_k.dequantize_narrow, out, {0: q}, (np.float32(zp), np.float32(s)), run_pieces)


def _finite_terms(dtype, zp: int, s) -> bool:
    """Whether ``float32(q - zp) * s`` is finite for every q of ``dtype`` (rounding is
    monotone, so the largest ``|q - zp|`` decides; a NaN or infinite s is not). Kept per
    (dtype, zp, s's bits): a repeated call's parameters are usually the same."""
    s = np.float32(s)
    key = (dtype, zp, s.tobytes())
    finite = _FINITE.get(key)
    if finite is None:
        qmin, qmax = qrange(dtype)
        with np.errstate(all="ignore"):
            finite = bool(np.isfinite(np.float32(max(zp - qmin, qmax - zp)) * s))
        if len(_FINITE) >= 4096:
            _FINITE.clear()
        _FINITE[key] = finite
    return finite


_FINITE: dict = {}


def add(a, a_zp: int, a_s, b, b_zp: int, b_s, o_s, o_zp: int, out, run_pieces) -> bool:
    """out (1-D int8/uint8) = quantized add; a and b int8/uint8, 1-D of out's length
    or of one element (broadcast); every parameter a float32 scalar or an int.
    Returns False, computing nothing, unless the parameters rule out a NaN ``t``:
    both terms finite for every input (then their sum is finite or +-inf) and
    out_scale finite and not zero (then so is the quotient). The kernels rely on
    it and skip the NaN test; NaN, infinite and zero scales take the NumPy path.

    Not a lookup table: 8-bit operands with per-tensor parameters have only
    65,536 input pairs, but one gather per element from a 64 KiB table (built by
    this kernel over all pairs) measured 12 ms against this kernel's 4 ms for 16M
    elements on one thread of the AVX-512 EPYC (2026-11-25; numba does not
    vectorize the gather, while the arithmetic runs 16 lanes wide)."""
    f = np.float32
    if a.size != out.size:  # a is the one value: swap, the sum is commutative
        a, a_zp, a_s, b, b_zp, b_s = b, b_zp, b_s, a, a_zp, a_s
    scalar = b.size != out.size
    if scalar:
        with np.errstate(all="ignore"):
            bv = (f(b.reshape(-1)[0]) - f(b_zp)) * f(b_s)
    o_s = f(o_s)
    if not (_finite_terms(a.dtype, a_zp, a_s) and (np.isfinite(bv) if scalar else _finite_terms(b.dtype, b_zp, b_s))
            and np.isfinite(o_s) and o_s != 0):
        return False
    lo, hi = bounds(out.dtype, o_zp)
    o8 = out.view(np.uint8)
    if scalar:
        _run(_k.add_scalar, o8, {0: a}, (f(a_zp), f(a_s), bv, o_s, lo, hi, np.int32(o_zp)), run_pieces)
    else:
        _run(_k.add, o8, {0: a, 3: b}, (f(a_zp), f(a_s), f(b_zp), f(b_s), o_s, lo, hi, np.int32(o_zp)),
             run_pieces)
    return True
