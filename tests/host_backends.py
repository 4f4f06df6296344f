"""The host backends the CPU suites run: dmlq.reference (the oracle) and dmlq.cpu
(the fast backend), the latter with every call also run on the reference and
compared bit for bit (any NaN matches any NaN: docs/semantics.md fixes no
payload).

dmlq.cpu has two element-wise paths: numba's fused kernels (dmlq.cpu.jit, where
numba is installed: the ``test`` extra has it) and the chunked NumPy one; and its
integer matmuls hand calls of at most ``dmlq.cpu.matmul.SMALL_OPERANDS`` operand
elements to the reference (faster there), the rest to the exact sgemm tiles. ``cpu``
runs what a user gets (the kernels and the shortcut where they apply); ``cpu-numpy``
runs every call with the kernels off (dmlq.cpu.jit.disabled) and every matmul on the
tiles (dmlq.cpu.matmul.tiled_always), so each path is checked on the small shapes
the suites draw.

    be = host_backends.get("cpu")
    be.quantize_linear(x, scale, zp, out)   # dmlq.cpu's result, checked
"""
from __future__ import annotations

import contextlib
import inspect

import numpy as np

from dmlq import cpu as _cpu
from dmlq import reference as _reference
from dmlq.cpu import jit as _jit
from dmlq.cpu import matmul as _matmul

NAMES = ("reference", "cpu", "cpu-numpy")


def bits_differ(got, want):
    """Element mask of got != want, bit for bit, NaN equal to NaN."""
    if got.dtype.kind == "f":
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        return (got.view(bits) != want.view(bits)) & ~(np.isnan(got) & np.isnan(want))
    return got != want


class CheckedCPU:
    """dmlq.cpu, each function also run on dmlq.reference with a copy of ``out``
    (``jit=False``: with dmlq.cpu.jit's kernels off; ``tiled``: every integer matmul on
    the tiles, the small ones too)."""

    def __init__(self, jit=True, tiled=False):
        self.jit, self.tiled = jit, tiled

    def __getattr__(self, name):
        fn, ref = getattr(_cpu, name), getattr(_reference, name)
        sig = inspect.signature(ref)

        def call(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            out = bound.arguments["out"]
            ref_args = dict(bound.arguments, out=np.array(out, copy=True))
            want = ref(**ref_args)
            with contextlib.ExitStack() as scope:
                if not self.jit:
                    scope.enter_context(_jit.disabled())
                if self.tiled:
                    scope.enter_context(_matmul.tiled_always())
                got = fn(*args, **kwargs)
            assert got is out
            assert got.shape == want.shape and got.dtype == want.dtype
            bad = bits_differ(got, want)
            if bad.any():
                idx = tuple(np.argwhere(bad)[0])
                raise AssertionError(f"dmlq.cpu.{name} differs from dmlq.reference in {bad.sum()} of "
                                     f"{bad.size} elements, first at {idx}: {got[idx]!r} vs {want[idx]!r}")
            return got

        return call


def get(name):
    return _reference if name == "reference" else CheckedCPU(jit=name == "cpu", tiled=name == "cpu-numpy")
