"""The integer matmul family on the tiled kernels of quantized_matmul (every M).

``matmul_integer`` (int32 out) and ``matmul_integer_to_float`` (float32 / float16
out) run the same dp4a and tensor-core main loops as quantized_matmul
(cuda/matmul_dp4a.cu, cuda/matmul_mma.cu; dmlq/gpu/matmul.py plans the launches:
staging, batches, row/column-sum pre-passes, split-K over the exact int32 sums);
the output type picks the epilogue (cuda/matmul_epilogue.cuh). Selection is
quantized_matmul's table and rule plus one rule: blocked scales along K (more
than one group) take ``dp4a-wide``, whose K loop closes each group in ascending
order (docs/semantics.md; no split-K over float partial sums), and whose tiles
are 32 deep, so the group length must be a multiple of 32.

Parameters reach the kernels as: a's scale and zero point as length-M vectors;
b's as (rows, N) tables (rows: the groups, else 1), one per matrix of the
output batch when they vary by batch (``bp_bs`` elements apart) or one shared;
the bias as a float32 (matrices or 1, M or 1, N) table with its strides.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from . import device, packed
from .device import NULL
from .matmul import QTYPES, bind_tiled, offset, plan_tiled
from .plan import Plan, Runner

GROUP_STEP = 32  # the wide dp4a kernel's BK: groups end on tile boundaries


def _k_group(op, k, block_size) -> int:
    """The kernel's k_group: 0 for one group of all K, else the block size."""
    if block_size is None or (0 < k <= block_size):
        return 0
    if k == 0:
        return GROUP_STEP  # no groups at all: +0.0 (then the bias); any multiple of 32 will do
    if block_size % GROUP_STEP:
        raise UnsupportedError(f"{op}: block_size={block_size} along K has no CUDA kernel on the tiled path "
                               f"(it must be a multiple of {GROUP_STEP}); pass NumPy arrays to run it on the host")
    return int(block_size)


def _check(op, a, b, b_packed):
    """b as the planners see it: the array, or a packed b's PackedView."""
    if b_packed is None and b.dtype.name not in QTYPES:
        raise UnsupportedError(f"{op}: no CUDA kernel for a {b.dtype} b (a 4-bit b runs as a dmlq.Packed)")
    return packed.view(b, b_packed)


def plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Plan:
    b = _check("matmul_integer", a, b, b_packed)
    return plan_tiled("matmul_integer", a, a_zero_point is not None, b, b_zero_point is not None, out)


def plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, variant=None, b_packed=None) -> Plan:
    op = "matmul_integer_to_float"
    b = _check(op, a, b, b_packed)
    return plan_tiled(op, a, a_zero_point is not None, b, b_zero_point is not None, out,
                      k_group=_k_group(op, a.shape[-1], block_size), variant=variant)


def _batched(v) -> bool:
    return v is not None and v.ndim > 2 and any(d != 1 for d in v.shape[:-2])


def _table(xp, v, batch_shape, rows, cols, dtype, batched):
    """v broadcast to a contiguous (matrices, rows, cols) table (matrices: the
    output batch when ``batched``, else none) and the elements between two
    matrices' tables (0 for a shared one)."""
    if v is None:
        return NULL, 0
    shape = tuple(batch_shape) if batched else ()
    # not batched: every leading dim is 1, so the last two hold the whole table
    mat = v.shape if batched else v.shape[-2:] if v.ndim >= 2 else (1, -1)
    t = xp.ascontiguousarray(xp.broadcast_to(v.reshape(mat).astype(dtype), shape + (rows, cols)))
    return t, rows * cols if shape else 0


def _row_vector(xp, v, m, dtype):
    if v is None:
        return NULL
    return xp.ascontiguousarray(xp.broadcast_to(v.reshape(-1).astype(dtype), (m,)))


def _bind(plan, a, b, out, float_out, b_packed=None):
    if not plan.launches:
        return Runner(plan, lambda *args: None)
    b = packed.view(b, b_packed)
    launch = bind_tiled(plan, a, b, out)
    zp_dtype = b.zp_dtype if b_packed is not None else b.dtype
    d = plan.detail
    xp = device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch_shape = tuple(out.shape[:-2])
    rows = -(-K // d.k_group) if d.k_group else 1  # K = 0 with blocks: no groups, nothing read

    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out):
        if K == 0:  # as planned: the sums are all zero, so the zero points drop out
            a_zero_point = b_zero_point = None
        dst = out if d.direct_out else xp.empty(out.shape, out.dtype)
        a_s = _row_vector(xp, a_scale, M, np.float32)
        a_z = _row_vector(xp, a_zero_point, M, a.dtype)
        per_batch = _batched(b_scale) or _batched(b_zero_point)  # one bp_bs for both tables
        b_s, bs_bs = _table(xp, b_scale, batch_shape, rows, N, np.float32, per_batch)
        b_z, bz_bs = _table(xp, b_zero_point, batch_shape, rows, N, zp_dtype, per_batch)
        bp_bs = max(bs_bs, bz_bs)
        bias_rows = 1 if bias is None or bias.ndim < 2 else bias.shape[-2]
        bias_t, bias_bs = _table(xp, bias, batch_shape, bias_rows, N, np.float32, _batched(bias))
        bias_ld = N if bias_rows > 1 else 0
        flags = (i32(1), i32(1), i32(0))

        def params(i, first):
            head = (a_s, offset(b_s, first * bp_bs), NULL, a_z, offset(b_z, first * bp_bs), NULL, *flags)
            return head, (offset(bias_t, first * bias_bs), i64(bias_bs), i64(bias_ld), i64(bp_bs),
                          i32(d.k_group))
        launch(a, b, dst, params)
        if dst is not out:
            out[...] = dst

    if float_out:
        return Runner(plan, run)
    return Runner(plan, lambda a, a_zero_point, b, b_zero_point, out:
                  run(a, None, a_zero_point, b, None, b_zero_point, None, out))


def bind_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Runner:
    return _bind(plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed), a, b, out, False, b_packed)


def bind_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, variant=None, b_packed=None) -> Runner:
    plan = plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                        block_size, variant, b_packed)
    return _bind(plan, a, b, out, True, b_packed)
