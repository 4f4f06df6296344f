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
- per_row: x as rows along its last axis (dense along it, either direction, or broadcast
  along it: its first element read; the leading axes one stride apart, 0 where broadcast),
  else first copied; a warp a row, or a split of one
  where the rows are fewer than SPLIT_BELOW of the warps the GPU holds at once (each split at
  least MIN_SPLIT_BYTES; 4096 rows of 4096 float32 on an H100: one split each, 4096 warps of
  4 x 512 bytes in flight, 8 MB against the ~2 MB that 3.35 TB/s x ~600 ns latency asks);
  the scale and zero point have x's shape with 1 as the last dimension.
"""
from __future__ import annotations

import math

import numpy as np

from ..qtypes import BFLOAT16_DTYPE
from . import device
from .plan import Launch, Plan, launcher

SOURCE = "dynamic_quant.cu"
X_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16", BFLOAT16_DTYPE: "bfloat16"}
Q_TYPES = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8"}
KERNELS = {SOURCE: tuple(f"dq_range<{t}>" for t in X_TYPES.values())
           + tuple(f"dq_params<{q}>" for q in Q_TYPES.values())
           + tuple(f"dq_rows<{t}, {q}>" for t in X_TYPES.values() for q in Q_TYPES.values())
           + tuple(f"dq_row_params<{q}>" for q in Q_TYPES.values())}
BLOCK = 256
RANGE_WAVES = 4
ROW_WAVES = 4            # the rows' grid: at most this many waves of blocks (a grid-stride loop)
SPLIT_BELOW = 0.25       # rows fewer than this fraction of the warps the GPU holds at once are split
MIN_SPLIT_BYTES = 8192


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
    """The range and parameters' launches for x (float32, float16 or bfloat16) and output type qdtype;
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


def _row_view(x):
    """x with a broadcast last axis (a stride of 0 over more than one element) cut to its first
    element: each row is one value repeated, whose range that value alone has."""
    return x[..., :1] if x.shape[-1] > 1 and x.strides[-1] == 0 else x


def _rows(x):
    """x as rows for dq_rows: (address of row 0's lowest element, inner, outer stride, inner
    stride), row r at r // inner outer strides and r % inner inner strides from row 0 (strides
    in elements), or None where x must first be copied (its last axis not dense, or its
    leading axes not two strides)."""
    cols, item = x.shape[-1], x.itemsize
    rows = math.prod(x.shape[:-1])
    if x.size == 0:
        return device.ptr(x), max(rows, 1), 0, 0  # nothing to read
    last = x.strides[-1] if cols > 1 else item
    lead: list = []  # the leading axes of more than one row, each merged into the one before it
    for n, s in zip(x.shape[:-1], x.strides[:-1]):  # where that one is n of this one's strides
        if n == 1:
            continue
        if lead and lead[-1][1] == s * n:
            lead[-1] = (lead[-1][0] * n, s)
        else:
            lead.append((n, s))
    if abs(last) != item or any(s % item for _, s in lead) or len(lead) > 2:
        return None
    base = device.ptr(x) + ((cols - 1) * last if last < 0 else 0)
    (_, outer), (inner, step) = [(1, 0)] * (2 - len(lead)) + lead
    return base, (inner if len(lead) == 2 else max(rows, 1)), outer // item, step // item


def _row_splits(rows, cols, itemsize, warps):
    """(splits, chunk): each row cut into splits of chunk elements (a multiple of 16 bytes, at
    least MIN_SPLIT_BYTES; the row's last split has what remains), as many as it takes for
    ``warps`` items in all; one split where the row is shorter than two of MIN_SPLIT_BYTES."""
    if rows == 0 or cols == 0 or rows >= warps:
        return 1, max(cols, 1)
    per = 16 // itemsize
    least = MIN_SPLIT_BYTES // itemsize
    splits = max(1, min(-(-warps // rows), cols // least))  # (cols // least: every split >= least)
    chunk = -(-cols // splits)
    chunk = -(-chunk // per) * per  # (rounded up to whole 16-byte vectors)
    return max(1, -(-cols // chunk)), chunk


def plan_rows(x, qdtype=None) -> Plan:
    """per_row's launches for x (float32, float16 or bfloat16, at least one dimension) and qdtype; with
    qdtype None, the rows' ranges alone (:func:`row_pairs`)."""
    x = _row_view(x)
    notes: tuple = () if _rows(x) is not None else ("x copied to a contiguous array (its rows more than two "
                                                    "strides apart)",)
    rows, cols = math.prod(x.shape[:-1]), x.shape[-1]
    xname, qname = X_TYPES[np.dtype(x.dtype)], Q_TYPES[np.dtype(qdtype if qdtype is not None else np.uint8)]
    name = f"dq_rows<{xname}, {qname}>"
    per_block = BLOCK // 32
    wave = device.info().sm_count * device.resident_blocks(SOURCE, name, BLOCK)
    splits, chunk = _row_splits(rows, cols, x.itemsize, int(SPLIT_BELOW * wave * per_block))
    items = rows * splits
    blocks = max(1, min(-(-items // per_block), ROW_WAVES * wave))
    launches: tuple = (Launch(SOURCE, name, (blocks,), (BLOCK,), 0,
                              "the rows' ranges" if splits > 1 or qdtype is None
                              else "the rows' ranges, scales and zero points"),)
    if splits > 1:
        launches += (Launch(SOURCE, f"dq_row_params<{qname}>", (max(1, min(-(-rows // per_block), wave)),), (BLOCK,), 0,
                            "the scales and zero points" if qdtype is not None else "the rows' ranges folded"),)
        notes += (f"each row in {splits} splits of {chunk} elements",)
    return Plan("dynamic_quantize_linear", "rows", launches, notes, (rows, cols, splits, chunk))


def _rows_pass(x, plan, scale, zp):
    """Runs dq_rows (and dq_row_params) for the plan on x (copied first where the plan says so):
    the scale and zero point written, or with both None the rows' (lo, hi) pairs returned (a
    float32 device array of 2 x rows)."""
    xp = device.xp()
    rows, cols, splits, chunk = plan.detail
    x = _row_view(x)
    view = _rows(x)
    if view is None:
        x = xp.ascontiguousarray(x)
        view = _rows(x)
    base, inner, outer, step = view
    part = xp.empty(2 * rows * splits if splits > 1 or scale is None else 0, np.float32)
    pairs = xp.empty(2 * rows, np.float32) if splits > 1 and scale is None else part
    null = np.uint64(0)
    args = [(np.uint64(base), np.int64(rows), np.int64(cols), np.int64(inner), np.int64(outer), np.int64(step),
             np.int64(chunk), np.int32(splits), part, null if scale is None else scale, null if zp is None else zp)]
    if splits > 1:
        args.append((part, np.int64(rows), np.int32(splits), null if scale is None else scale,
                     null if zp is None else zp, null if scale is not None else pairs))
    launcher(plan)(args)
    return pairs


def row_parameters(x, qdtype):
    """(scale, zero_point) of each row of x (along its last axis): device arrays of float32 and
    qdtype shaped x.shape[:-1] + (1,)."""
    xp = device.xp()
    shape = x.shape[:-1] + (1,)
    scale, zp = xp.empty(shape, np.float32), xp.empty(shape, np.dtype(qdtype))
    _rows_pass(x, plan_rows(x, qdtype), scale, zp)
    return scale, zp


def row_pairs(x):
    """Each row's (min, max) with 0 in it and NaN skipped: a float32 device array shaped
    x.shape[:-1] + (2,) (a dask chunk's rows: dmlq.dynquant)."""
    return _rows_pass(x, plan_rows(x), None, None).reshape(x.shape[:-1] + (2,))
