"""dynamic_quantize_linear's range and parameters on the GPU: cuda/dynamic_quant.cu (its
header has the napkin math). The quantize pass that follows is quantize_linear's
(dmlq.gpu.elementwise), with the device scale and zero point these kernels write.

- x is read as one dense buffer from its lowest address (any memory order, strides of either
  sign: the range does not depend on the order); a broadcast dimension (a stride of 0) is read
  at its first index only (its repeats leave the range as it is); an x with gaps between its
  elements (a strided view) is first copied to a contiguous array (the plan says so).
- The range pass has at most RANGE_WAVES waves of 256-thread blocks, each writing its
  (min, max) pair to a workspace; one block folds the pairs and computes the parameters.
- Nothing is read back to the host: the scale (float32) and zero point (int8 / uint8) are
  0-d device arrays, written on CuPy's current stream.
"""
from __future__ import annotations

import numpy as np

from . import device
from .plan import Launch, Plan, launcher

SOURCE = "dynamic_quant.cu"
X_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16"}
Q_TYPES = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8"}
KERNELS = {SOURCE: tuple(f"dq_range<{t}>" for t in X_TYPES.values())
           + tuple(f"dq_params<{q}>" for q in Q_TYPES.values())}
BLOCK = 256
RANGE_WAVES = 4


def _dense(x) -> bool:
    """Whether x's elements fill one block of memory, each element once, in any order and with
    strides of either sign (C order, a transposed or reversed view); not a strided view with
    gaps, nor a broadcast one (a stride of 0 reads an element more than once)."""
    if x.size == 0:
        return True  # nothing to read
    step = x.itemsize
    for stride, n in sorted((abs(s), n) for n, s in zip(x.shape, x.strides) if n != 1):
        if stride != step:
            return False
        step *= n
    return True


def _unbroadcast(x):
    """x without the repeats of its broadcast dimensions (a stride of 0 over more than one
    element): its first index there, since repeated values leave the range as it is."""
    if not any(s == 0 and n > 1 for n, s in zip(x.shape, x.strides)):
        return x
    return x[tuple(slice(0, 1) if s == 0 and n > 1 else slice(None) for n, s in zip(x.shape, x.strides))]


def lowest_address(x) -> int:
    """The address of a dense x's first byte in memory (its first element's, moved back over
    every negative stride)."""
    return device.ptr(x) + sum((n - 1) * s for n, s in zip(x.shape, x.strides) if s < 0 and n > 0)


def plan_range(x, qdtype=None) -> Plan:
    """The range and parameters' launches for x (float32 or float16) and output type qdtype;
    with qdtype None, the range pass alone (:func:`range_pairs`)."""
    x = _unbroadcast(x)
    per_vector = 16 // x.itemsize
    name = f"dq_range<{X_TYPES[np.dtype(x.dtype)]}>"
    wave = device.info().sm_count * device.resident_blocks(SOURCE, name, BLOCK)
    blocks = max(1, min(-(-x.size // (BLOCK * per_vector)), RANGE_WAVES * wave))
    notes = () if _dense(x) else ("x copied to a contiguous array (a view with gaps)",)
    launches: tuple = (Launch(SOURCE, name, (blocks,), (BLOCK,)),)
    if qdtype is not None:
        launches += (Launch(SOURCE, f"dq_params<{Q_TYPES[np.dtype(qdtype)]}>", (1,), (BLOCK,), 0,
                            "the scale and zero point"),)
    return Plan("dynamic_quantize_linear", "range", launches, notes, blocks)


def _range_pass(x, plan):
    """(x, or its copy where the plan says so, kept alive through the launches; the range
    launch's arguments: x's buffer address, its size, the pairs' workspace)."""
    xp = device.xp()
    x = _unbroadcast(x)
    if not _dense(x):
        x = xp.ascontiguousarray(x)
    return x, (np.uint64(lowest_address(x)), np.int64(x.size), xp.empty(2 * plan.detail, np.float32))


def range_parameters(x, qdtype):
    """(scale, zero_point): 0-d device arrays of float32 and qdtype, for x's values."""
    xp = device.xp()
    plan = plan_range(x, qdtype)
    x, read = _range_pass(x, plan)
    scale, zp = xp.empty((), np.float32), xp.empty((), np.dtype(qdtype))
    launcher(plan)([read, (read[2], np.int32(plan.detail), scale, zp)])
    return scale, zp


def range_pairs(x):
    """The range pass alone: a 1-D float32 device array of (min, max) pairs, one a block, each
    with 0 in it and NaN skipped, so that its own min and max are x's (a dask chunk's range:
    dmlq.dynquant)."""
    plan = plan_range(x)
    x, read = _range_pass(x, plan)
    launcher(plan)([read])
    return read[2]
