"""The integer matmul family on the tiled kernels of quantized_matmul (every M).

``matmul_integer`` (int32 out) and ``matmul_integer_to_float`` (float32 / float16
out) run the same dp4a and tensor-core main loops as quantized_matmul
(cuda/matmul_dp4a.cu, cuda/matmul_mma.cu; dmlq/gpu/matmul.py plans the launches:
staging, batches, row/column-sum pre-passes, split-K over the exact int32 sums);
the output type picks the epilogue (cuda/matmul_epilogue.cuh). Selection is
quantized_matmul's table and rule plus one rule: blocked scales along K (more
than one group) take ``mma-grouped`` (cuda/matmul_mma_grouped.cu) where the tensor
cores would take the product, else ``dp4a-wide``; both close each group in ascending
order (docs/semantics.md; no split-K over float partial sums) on 32-deep k steps,
so the group length must be a multiple of 32. A packed 4-bit b at
M <= 16 (where quantized_matmul's rule picks its stream kernel) takes the stream
kernel's sums pass instead (dmlq.gpu.qmm_stream: one pass over the packed bytes, K
split between chunks, exact int32 sums to a workspace, a second pass making the
output): ``plan_sums`` for one group of scales (matmul_integer too), and
``plan_grouped`` for blocked scales where its workspace fits (``work_fits``; K split
between whole groups; ``variant="stream-grouped"`` forces it), groups of any length
(one chunk of K per group where the length is not a multiple of 32).

Parameters reach the kernels as: a's scale and zero point as they are when
both are single values or both per row (0-d device constants, float32
vectors: decided once per runner, so a repeated call makes no array operation
for them), else as length-M vectors; per batch and row (either of them) as
(matrices, M) tables (a_per_row 2, matrix z's rows z * M elements on: the
table's pointer advanced by a batch launch's first matrix, as b's); b's per tensor or per column likewise;
blocked or per-batch ones as (rows, N) tables (rows: the groups, else 1), one
per matrix of the output batch when they vary by batch (``bp_bs`` elements
apart) or one shared; the bias as a float32 (matrices or 1, M or 1, N) table
with its strides. A table or bias that already is that contiguous float32 (or
zero-point dtype) table is passed as it is, decided once per runner too, so the
decode step's repeated call makes no array operation for them.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from . import device, packed, qmm_stream
from .device import NULL
from .matmul import QTYPES, _quant_args, _row_prep, _vector_prep, bind_tiled, offset, plan_tiled
from .plan import Plan, Runner

GROUP_STEP = 32  # the wide dp4a kernel's BK and mma-grouped's k step: groups end on their boundaries


def _k_group(op, k, block_size, tiled=True) -> int:
    """The kernel's k_group: 0 for one group of all K, else the block size; on the tiles
    (``tiled``) a multiple of GROUP_STEP, else UnsupportedError (the grouped stream kernel,
    ``tiled=False``, takes any)."""
    if block_size is None or (0 < k <= block_size):
        return 0
    if k == 0:
        return GROUP_STEP  # no groups at all: +0.0 (then the bias); any multiple of 32 will do
    if tiled and block_size % GROUP_STEP:
        raise UnsupportedError(f"{op}: block_size={block_size} along K has no CUDA kernel on the tiled path (it "
                               f"must be a multiple of {GROUP_STEP}; the grouped stream kernel takes any at "
                               "M <= 16); pass NumPy arrays to run it on the host")
    return int(block_size)


def plan_odd_groups(a, b, out, block_size, b_packed=None):
    """The grouped stream kernel's plan (qmm_stream.plan_grouped: one group per chunk of K;
    M <= 16, its workspace within the rule) for blocked scales along K in groups of a length
    the tiles cannot close (not a multiple of GROUP_STEP), or None: dmlq.gpu.intmm's
    matmul_stream then. Bound by :func:`_bind`, as every plan of this module."""
    op = "matmul_integer_to_float"
    group = _k_group(op, a.shape[-1], block_size, tiled=False)
    return qmm_stream.plan_grouped(a, _check(op, a, b, b_packed), out, group)


def _check(op, a, b, b_packed):
    """b as the planners see it: the array, or a packed b's PackedView."""
    if b_packed is None and b.dtype.name not in QTYPES:
        raise UnsupportedError(f"{op}: no CUDA kernel for a {b.dtype} b: the GPU takes an int8 or uint8 b, or a "
                               "4-bit one as a dmlq.Packed (NumPy arrays run the wider types on the reference)")
    return packed.view(b, b_packed)


def plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Plan:
    b = _check("matmul_integer", a, b, b_packed)
    streamed = qmm_stream.plan_sums("matmul_integer", a, b, out, a_zp=a_zero_point is not None)
    return streamed or plan_tiled("matmul_integer", a, a_zero_point is not None, b, b_zero_point is not None, out)


def plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, variant=None, b_packed=None) -> Plan:
    op = "matmul_integer_to_float"
    b = _check(op, a, b, b_packed)
    k_group = _k_group(op, a.shape[-1], block_size, tiled=False)
    if k_group and variant in (None, qmm_stream.GROUPED):  # blocked weights at small M
        grouped = qmm_stream.plan_grouped(a, b, out, k_group, force=variant is not None)
        if grouped is not None:
            return grouped
        if variant is not None:
            raise ValueError(f"{op}: variant {variant!r} does not apply (it takes M <= 16 and more than one "
                             f"group, of at most {qmm_stream.exact_group(b)} rows for this b)")
    k_group = _k_group(op, a.shape[-1], block_size)  # the tiles': raises for groups they cannot close
    if not k_group and variant is None:  # one group of scales
        streamed = qmm_stream.plan_sums(op, a, b, out, a_zp=a_zero_point is not None)
        if streamed is not None:
            return streamed
    return plan_tiled(op, a, a_zero_point is not None, b, b_zero_point is not None, out,
                      k_group=k_group, variant=variant)


def _batched(v) -> bool:
    return v is not None and v.ndim > 2 and any(d != 1 for d in v.shape[:-2])


def _table(v, batch_shape, rows, cols, dtype, batched):
    """v broadcast to a contiguous (matrices, rows, cols) table (matrices: the
    output batch when ``batched``, else none) and the elements between two
    matrices' tables (0 for a shared one). No copy where v already is that table."""
    if v is None:
        return NULL, 0
    shape = tuple(batch_shape) if batched else ()
    # not batched: every leading dim is 1, so the last two hold the whole table
    mat = v.shape if batched else v.shape[-2:] if v.ndim >= 2 else (1, -1)
    t = device.table(v.reshape(mat), shape + (rows, cols), dtype)
    return t, rows * cols if shape else 0


def _is_table(v, batch_shape, rows, cols, dtype, batched) -> bool:
    """Whether :func:`_table` would hand ``v`` back as it is (None, or already the
    contiguous table of ``dtype``: as many elements as the table, so nothing is
    broadcast): decided once per runner from v's geometry, so a call whose tables
    are ready makes no array operation for them."""
    n = rows * cols * (int(np.prod(batch_shape, dtype=np.int64)) if batched else 1)
    return device.is_vector(v, dtype, n)


def nbits_scales(v, rows, n) -> int:
    """The kernels' b_per_col for blocked scales that are MatMulNBits' own (N, groups) table
    handed over as its ``.T`` (the (groups, N) view, strides 1 and groups elements):
    2 float32, 3 float16, read in place (cuda/matmul_epilogue.cuh group_scale); 0 for any
    other array (made the (groups, N) float32 table)."""
    if v is None or v.ndim != 2 or tuple(v.shape) != (rows, n) or v.dtype not in (np.float32, np.float16):
        return 0
    item = v.itemsize
    if (rows > 1 and v.strides[0] != item) or (n > 1 and v.strides[1] != rows * item):
        return 0
    return 2 if v.dtype == np.float32 else 3


def _b_params(xp, b, b_scale, b_zero_point, out, k_group, zp_dtype):
    """(b_per_col, bp_bs, prep(b_scale, b_zero_point) -> (scale, zero point) or None):
    per tensor or per column as the kernels' vectors (no copy where they already
    are: :func:`_vector_prep`); per group along K or per batch as contiguous
    (matrices, rows, N) tables, one bp_bs apart, but blocked scales that are
    MatMulNBits' (N, groups) float32 or float16 table read as they are
    (:func:`nbits_scales`: b_per_col 2 or 3)."""
    K, N = b.shape[-2:]
    per_batch = _batched(b_scale) or _batched(b_zero_point)
    if not (k_group or per_batch):
        per_col, prep = _vector_prep(xp, N, b_scale, b_zero_point, zp_dtype)
        return per_col, 0, prep
    rows = -(-K // k_group) if k_group else 1  # K = 0 with blocks: no groups, nothing read
    batch_shape = tuple(out.shape[:-2])
    bp_bs = rows * N if per_batch else 0

    s_ready = _is_table(b_scale, batch_shape, rows, N, np.float32, per_batch)
    layout = 1 if s_ready or per_batch else nbits_scales(b_scale, rows, N) or 1  # (k_group here: not per_batch)
    s_ready = s_ready or layout > 1
    z_ready = _is_table(b_zero_point, batch_shape, rows, N, zp_dtype, per_batch)
    if s_ready and z_ready:
        return layout, bp_bs, None

    def prep(s, z):
        return (s if s_ready else _table(s, batch_shape, rows, N, np.float32, per_batch)[0],
                z if z_ready else _table(z, batch_shape, rows, N, zp_dtype, per_batch)[0])
    return layout, bp_bs, prep


def _bind(plan, a, b, out, b_packed, a_scale, a_zero_point, b_scale, b_zero_point, bias):
    """The runner: which parameters need preparing (broadcasts, float16 scales
    widened) is decided here from their geometry, so a call whose parameters
    already are the kernels' vectors makes no array operation besides the launches."""
    float_out = a_scale is not None
    if not plan.launches:
        return Runner(plan, lambda *args: None)
    b = packed.view(b, b_packed)
    streamed = isinstance(plan.detail, qmm_stream.SumsDetail)
    launch = qmm_stream.bind_sums(plan, a, b, out) if streamed else bind_tiled(plan, a, b, out)
    zp_dtype = b.zp_dtype if b_packed is not None else b.dtype
    d = plan.detail
    xp = device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch_shape = tuple(out.shape[:-2])
    if K == 0:  # as planned: the sums are all zero, so the zero points drop out
        a_zero_point = b_zero_point = None
    has_za, has_zb = a_zero_point is not None, b_zero_point is not None
    a_per_row, prep_a = _row_prep(xp, M, batch_shape, a_scale, a_zero_point, a.dtype)
    a_bs = M if a_per_row == 2 else 0  # per batch and row: matrix z's rows z * M elements on
    b_per_col, bp_bs, prep_b = _b_params(xp, b, b_scale, b_zero_point, out, d.k_group, zp_dtype)
    quant = _quant_args((prep_a, prep_b, None), (has_za, has_zb, False))
    bias_rows = 1 if bias is None or bias.ndim < 2 else bias.shape[-2]
    bias_batched = _batched(bias)
    bias_ld = i64(N if bias_rows > 1 else 0)
    flags = (i32(a_per_row), i32(b_per_col), i32(0))
    k_group = i32(d.k_group)
    if bias is None:
        bias_table = lambda v: (NULL, 0)  # noqa: E731
    elif _is_table(bias, batch_shape, bias_rows, N, np.float32, bias_batched):
        bias_table = lambda v, _bs=bias_rows * N if bias_batched else 0: (v, _bs)  # noqa: E731
    else:
        def bias_table(v):
            return _table(v, batch_shape, bias_rows, N, np.float32, bias_batched)

    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out):
        dst = out if d.direct_out else xp.empty(out.shape, out.dtype)
        a_s, b_s, _o_s, a_z, b_z, _o_z = quant(a_scale, a_zero_point, b_scale, b_zero_point, NULL, None)
        bias_t, bias_bs = bias_table(bias)
        if streamed:
            launch(a, b, dst, a_s, a_z, flags[0], b_s, b_z, flags[1], i64(bp_bs), bias_t, i64(bias_bs), bias_ld)
        else:
            def params(i, first):
                return ((offset(a_s, first * a_bs), offset(b_s, first * bp_bs), NULL, offset(a_z, first * a_bs),
                         offset(b_z, first * bp_bs), NULL, *flags),
                        (offset(bias_t, first * bias_bs), i64(bias_bs), bias_ld, i64(bp_bs), k_group))
            launch(a, b, dst, params)
        if dst is not out:
            out[...] = dst

    if float_out:
        return Runner(plan, run)
    return Runner(plan, lambda a, a_zero_point, b, b_zero_point, out:
                  run(a, None, a_zero_point, b, None, b_zero_point, None, out))


def bind_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Runner:
    plan = plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed)
    return _bind(plan, a, b, out, b_packed, None, a_zero_point, None, b_zero_point, None)


def bind_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, variant=None, b_packed=None) -> Runner:
    plan = plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                        block_size, variant, b_packed)
    return _bind(plan, a, b, out, b_packed, a_scale, a_zero_point, b_scale, b_zero_point, bias)
