"""The weight-streaming kernels at small M: cuda/matmul_stream_packed.cu, for a packed
4-bit b and an 8-bit b, in quantized_matmul (:func:`plan`) and the integer family
(:func:`plan_sums`; blocked scales along K: :func:`plan_grouped`).

At M <= 16 (an LLM's decode step) the product is bound by the bytes of b, so
:func:`dmlq.gpu.matmul.select_variant` sends such calls there (``stream-m1`` /
``stream-m4`` / ``stream-m16``: the kernel's rows per launch) while K <= 32768
(int32 sums exact) and the matrices fit the grid (an 8-bit b at M = 16 stays on
the tensor cores where their rule takes it); otherwise the tiles run.
This module plans and binds those kernels; the scale and zero-point arguments are
dmlq.gpu.matmul's (the matmul kernel ABI's per-row / per-column flags and
per-batch b tables). Where its 64-column blocks leave the device's block slots
empty, :func:`split_k` cuts K into chunks (blockIdx.z) whose exact int32 sums a
second kernel adds (``matmul_stream_packed_finish`` requantizes them;
``matmul_stream_grouped_finish`` makes the integer family's outputs; the kernel
file's napkin math gives the numbers).

Launch conventions: one launch for every matrix (blockIdx.y), through a table of
per-matrix element offsets of a, b and out (numpy.matmul broadcasting, no copies
of a or b); a is read with unit stride along K (else copied to a contiguous
array), a packed b's bytes must be contiguous (a K-major one, dmlq.TransposedPacked's, is
read as it is: ``kmajor_int4`` / ``kmajor_uint4``) and an 8-bit b's matrices
C-contiguous, or K-major with its start, columns and matrices on 16 bytes (the
transposed view of an (N, K) weight, read as it is: ``kmajor_int8`` /
``kmajor_uint8``), else copied; out is written in place under the tiled kernels'
conditions, else through a contiguous temporary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError
from ..qtypes import BFLOAT16_DTYPE
from . import device, matmul
from .device import NULL
from .packed import KMAJOR_TAGS, TAGS, PackedView
from .plan import Launch, Plan, Runner, elem_strides, launcher, staging

SOURCE = "matmul_stream_packed.cu"
THREADS, COLUMNS = 128, 64  # a block: 128 threads, 64 columns of one matrix
STAGE_ROWS = 64             # rows of b per pipeline stage; a split's chunk is a multiple of it
FINISH_THREADS = 256        # matmul_stream_packed_finish: one thread per output

# Split-K (the kernel's napkin math): a grid of ceil(N / 64) * matrices blocks
# under the SMs' resident block slots keeps too few bytes of b in flight, so K
# is cut into chunks, one per blockIdx.z, whose exact int32 sums a second pass
# adds and requantizes. The rule, split_k():
SPLIT_MIN_STAGES = 4   # stages per chunk at least (256 rows of b), so the prefetch pipeline runs
SPLIT_MAX = 32         # chunks at most
PARTIAL_SHARE = 2      # the partial sums (splits * M * N int32) at most 1 / PARTIAL_SHARE of b's bytes


# An 8-bit b held K-major (the transposed view of an (N, K) weight, 16-byte aligned): its tag in
# the kernel names, read as it is instead of copied to a row-major array.
KM_TAGS = matmul.KMAJOR_TAGS


def kernel_name(ta: str, tb: str, to: str, mt: int) -> str:
    return f"matmul_stream_packed<{ta}, {tb}, {to}, {mt}>"


def finish_name(to: str) -> str:
    return f"matmul_stream_packed_finish<{to}>"


def grouped_name(ta: str, tb: str, mt: int) -> str:
    return f"matmul_stream_grouped<{ta}, {tb}, {mt}>"


def grouped_finish_name(to: str) -> str:
    return f"matmul_stream_grouped_finish<{to}>"


# (bfloat16: the grouped finish pass rounds to it, common.cuh's from_f32<bfloat16>)
FLOAT_OUT = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16", BFLOAT16_DTYPE: "bfloat16"}
SUM_OUT = {**FLOAT_OUT, np.dtype(np.int32): "int"}  # the grouped finish pass: matmul_integer's int32 too
# packed 4-bit, 8-bit, K-major 8-bit, K-major packed 4-bit
B_TYPES = tuple(TAGS.values()) + matmul.QTYPES + tuple(KM_TAGS.values()) + tuple(KMAJOR_TAGS.values())
KERNELS = {SOURCE: tuple(kernel_name(ta, tb, to, mt) for ta in matmul.QTYPES for tb in B_TYPES
                         for to in matmul.QTYPES for mt in matmul.STREAM_M.values())
           + tuple(finish_name(to) for to in matmul.QTYPES)
           + tuple(grouped_name(ta, tb, mt) for ta in matmul.QTYPES for tb in B_TYPES
                   for mt in matmul.STREAM_M.values())
           + tuple(grouped_finish_name(to) for to in SUM_OUT.values())}


def split_k(M: int, N: int, K: int, batch: int, sm_count: int, blocks_per_sm: int) -> int:
    """Chunks of K for the stream kernel (pure: shapes and device facts in).

    The column blocks (ceil(N / 64) * batch) against the device's resident block
    slots (sm_count * blocks_per_sm, the kernel's occupancy): as many chunks as
    fit the slots in one wave, each at least SPLIT_MIN_STAGES stages of 64 rows,
    at most SPLIT_MAX, and the partial sums at most 1 / PARTIAL_SHARE of b's
    bytes (splits * M * N * 4 <= N * K / 2 / PARTIAL_SHARE). 1 when the column
    blocks fill the slots or K is short. ``matmul.k_chunks`` then rounds the
    chunk up to whole stages (no chunk left empty)."""
    blocks = -(-N // COLUMNS) * batch
    if K <= 0 or blocks <= 0:
        return 1
    slots = sm_count * blocks_per_sm
    stages = -(-K // STAGE_ROWS)
    return max(1, min(slots // blocks, stages // SPLIT_MIN_STAGES, SPLIT_MAX,
                      K // (8 * PARTIAL_SHARE * max(M, 1))))


@dataclass(frozen=True)
class _Detail:
    offsets: np.ndarray   # (matrices, 3) int64: a, b (elements), out element offsets
    splits: int           # chunks of K (blockIdx.z); > 1: partial sums and the finish pass
    k_chunk: int          # rows of b per chunk (K without a split)
    copy_a: bool
    copy_b: bool
    direct_out: bool
    ldb: int              # elements between b's rows (row-major: N), or its columns (K-major)


def b_type(b, kmajor=False) -> str:
    """The kernels' b type: a packed b's tag, else an 8-bit b's dtype name (its K-major tag)."""
    if isinstance(b, PackedView):
        return b.tag
    return KM_TAGS[device.dtype_name(b.dtype)] if kmajor else device.dtype_name(b.dtype)


def _geometry(op, a, b, out):
    """(offsets, copy_a, copy_b, direct_out, notes, kmajor, ldb) of a stream launch: a's rows
    read with unit stride (else copied), a packed b's bytes contiguous and an 8-bit b's
    matrices C-contiguous or K-major on 16 bytes (``kmajor``; else copied), out written in place under the tiled
    kernels' conditions; the per-matrix element offsets of a, b and out
    (numpy.matmul broadcasting); ``ldb``: the elements between b's rows (N), or its columns
    (K-major)."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if max(M, N, K) > matmul.MAX_DIM:
        raise UnsupportedError(f"{op}: dimensions above {matmul.MAX_DIM} are not supported "
                               f"(M={M}, N={N}, K={K})")
    batch_shape = tuple(out.shape[:-2])
    copy_a = matmul._staging(a, False) != matmul.AS_IS
    p4 = isinstance(b, PackedView)
    if p4:
        copy_b = not matmul.packed.contiguous(b.data)
    else:  # each matrix's rows N bytes apart, unit stride along them (the kernels' row pitch is N)
        copy_b = b.size > 0 and not ((K < 2 or b.strides[-2] == N) and (N < 2 or b.strides[-1] == 1))
    # K-major (read as it is, columns ldb apart): a packed b given so (dmlq.TransposedPacked), an 8-bit one
    # whose rows are not contiguous but whose columns are, on 16 bytes
    km = b.kmajor if p4 else copy_b and matmul._k_major16(b)
    copy_b = copy_b and (p4 or not km)
    direct = matmul._direct_out(out, a, b.data if p4 else b)
    notes = [f"b: packed {b.dtype_name}, K-major (MatMulNBits' layout){b.rows_note}, unpacked in registers" if p4 and km else
             f"b: packed {b.dtype_name}, unpacked in registers" if p4 else
             "b: K-major, 16-byte loads of its columns" if km else "b: 16-byte loads of its rows"]
    notes += [f"{name} copied to a contiguous array" for name, c in (("a", copy_a), ("b", copy_b)) if c]
    if not direct:
        notes.append("out written through a contiguous temporary")
    sa = device.Fresh(a.shape, a.dtype) if copy_a else a
    sb = device.Fresh(b.shape, b.dtype) if copy_b and not p4 else b
    target = out if direct else device.Fresh(out.shape, out.dtype)
    offsets = np.zeros((math.prod(batch_shape), 3), np.int64)
    for i, x in enumerate((sa, sb, target)):
        st = elem_strides(x, batch_shape)
        for z, idx in enumerate(np.ndindex(*batch_shape)):
            offsets[z, i] = sum(j * s for j, s in zip(idx, st))
    return offsets, copy_a, copy_b, direct, notes, km, b.strides[-1] if km else N


def _selected(a, b, out, a_zp):
    """The stream variant (``stream-m1`` / ``-m4`` / ``-m16``) where selection picks it for
    ``a @ b`` (:func:`dmlq.gpu.matmul.select_variant`, ``b`` a packed b's
    :class:`dmlq.gpu.packed.PackedView` or an 8-bit b; ``a_zp``: a has a zero point),
    else None (a tiled variant)."""
    M, K = a.shape[-2:]
    dev = device.info()
    variant = matmul.select_variant(M, b.shape[-1], K, math.prod(out.shape[:-2]), dev.compute_capability,
                                    a.dtype, None, sm_count=dev.sm_count, packed=isinstance(b, PackedView),
                                    col_sums=a_zp)
    return variant if variant in matmul.STREAM_M else None


def plan(a, b, out, *, a_zp):
    """The stream plan for ``a @ b`` (``b`` a packed b's :class:`dmlq.gpu.packed.PackedView`
    or an 8-bit b; ``a_zp``: a has a zero point, no default: it changes the selection), or
    None when selection picks a tiled variant."""
    variant = _selected(a, b, out, a_zp)
    if variant is None:
        return None
    mt = matmul.STREAM_M[variant]
    M, K = a.shape[-2:]
    N = b.shape[-1]
    nbatch = math.prod(out.shape[:-2])
    dev = device.info()
    offsets, copy_a, copy_b, direct, notes, km, ldb = _geometry("quantized_matmul", a, b, out)
    to = device.dtype_name(out.dtype)
    name = kernel_name(device.dtype_name(a.dtype), b_type(b, km), to, mt)
    resident = device.resident_blocks(SOURCE, name, THREADS, 0)
    splits, k_chunk = split_k(M, N, K, nbatch, dev.sm_count, resident), K
    if splits > 1:
        splits, k_chunk = matmul.k_chunks(K, splits, STAGE_ROWS)
    blocks = -(-N // COLUMNS) * nbatch
    grid = (-(-N // COLUMNS), nbatch) + ((splits,) if splits > 1 else ())
    launches = [Launch(SOURCE, name, grid, (THREADS,))]
    if splits > 1:
        notes.append(f"split-K: {splits} splits of {k_chunk} ({blocks * splits} blocks for "
                     f"{dev.sm_count} SMs x {resident} resident)")
        launches.append(Launch(SOURCE, finish_name(to), (-(-M * N // FINISH_THREADS), nbatch), (FINISH_THREADS,),
                               0, "split-K sum and requantize"))
    return Plan("quantized_matmul", variant, tuple(launches), tuple(notes),
                _Detail(offsets, splits, k_chunk, copy_a, copy_b, direct, ldb))


# ------------------------------------------------------------------ the integer family
# matmul_integer and matmul_integer_to_float with a packed b at M <= 16 (the decode step of
# a weight-only int4 layer), which dmlq/gpu/intmm_tiled.py otherwise sends to the dp4a tiles
# (32 x 32 at M = 1: 31 of 32 rows idle, and no split of K; 64 x 64 dp4a-wide for blocked
# scales). ``matmul_stream_grouped`` writes exact int32 sums to a workspace, one per group
# of rows of b, and ``matmul_stream_grouped_finish`` makes the output from them: the int32
# sum (matmul_integer), or the float steps with the groups in ascending order
# (matmul_integer_to_float; docs/semantics.md), the same bits as any other kernel.
# - Blocked scales along K (plan_grouped: groups of a multiple of 32 rows, more than one):
#   a chunk of K (split_k's rule) holds whole groups and whole stages, so each group's sum
#   is written once. Groups of any other length: one chunk per group (blockIdx.z = the
#   group; the kernel closes a group at a half stage only, so no chunk holds two), a grid
#   of ceil(N / 64) x matrices x groups blocks of at most ceil(group / 64) stages each.
#   Napkin (N = K = 8192, G = 48, M = 1): 128 x 171 = 21,888 blocks of one stage (48 of its
#   64 rows), 33.5 MB of b and 5.6 MB of sums written and read back; each block has 2 KB of b
#   in flight for its one stage and no next stage to overlap, so it is latency-bound: a
#   guess of 20-40 % of the bandwidth limit (40-80 us), against matmul_stream.cu's 2 % (its
#   int8 twin took 1,033 us on the H100). Not measured yet (bench: the groups of 48 row).
# - One group of all K (plan_sums): each chunk of K is its own kernel group, and the
#   finish pass adds a group's chunks as integers before its float steps (or its output).

GROUPED = "stream-grouped"  # variant names: stream-grouped-m1 / -m4 / -m16
GROUP_STEP = 32             # the grouped kernel closes a group at the end of a half stage (32 rows)
# Selection (napkin): the workspace of group sums (groups x M x N int32, written and read once) at
# most b's packed bytes (K x N / 2), i.e. 8 * M * groups <= K: every M = 1 call, groups of 32 and
# up at M = 4, of 128 and up at M = 16. Past that dp4a-wide, which needs none. Measured on the
# H100 (second run, N = K = 8192, groups of 128) only inside the rule, up to its edge: the grouped
# kernel took 128 / 118 / 144 us at M = 1 / 4 / 16 (M = 16 is the edge: workspace = b's bytes)
# against dp4a-wide's 204 / 212 / 211, so the edge is not yet where the two cross.
WORK_PER_B_BYTE = 1
# Groups not a multiple of 32 (one group per chunk of K, below): the alternative is matmul_stream.cu
# (one thread per column, no split of K: 2 % of the HBM limit on the H100 at M = 1), so a workspace
# up to 4x b's bytes (written and read once: 8x b's traffic at most) still wins by several times.
WORK_PER_B_BYTE_ODD = 4


@dataclass(frozen=True)
class SumsDetail:
    offsets: np.ndarray   # (matrices, 3) int64: a, b (elements), out element offsets
    splits: int           # chunks of K (blockIdx.z), each whole (kernel) groups and whole stages
    k_chunk: int
    k_group: int          # rows of b per group of scales (0: one group of all K)
    groups: int           # groups of scales: ceil(K / k_group), or 1
    kernel_group: int     # rows per sum the kernel writes: k_group, or k_chunk (one per chunk)
    per_group: int        # workspace sums per group, added by the finish pass: 1, or the chunks
    copy_a: bool
    copy_b: bool
    direct_out: bool
    ldb: int              # as _Detail's


def exact_group(b) -> int:
    """The longest group whose int32 sum the grouped kernel keeps exact: |(a - a_zp)(b - b_zp)|
    is at most 255 * 15 for a packed 4-bit b, 255 * 255 for an 8-bit one (the tiled path's
    WIDE_K: past it dp4a-wide, which folds its int32 partials into int64)."""
    return (2**31 - 1) // (255 * 15) if isinstance(b, PackedView) else matmul.WIDE_K


def work_fits(M: int, K: int, group: int, b_bits: int = 4) -> bool:
    """Selection's rule for the grouped kernel: its workspace (4 bytes per group, row and
    column) within WORK_PER_B_BYTE of b's bytes (K * b_bits / 8 per column), or within
    WORK_PER_B_BYTE_ODD for groups not a multiple of GROUP_STEP (their other kernel is
    matmul_stream.cu's, many times slower)."""
    per_b_byte = WORK_PER_B_BYTE if group % GROUP_STEP == 0 else WORK_PER_B_BYTE_ODD
    return 4 * M * -(-K // group) <= per_b_byte * K * b_bits / 8


def _sums_plan(op, a, b, out, mt, group):
    """The launches of the grouped kernel and its finish pass for ``group`` rows per group of
    scales (0: one group, each chunk of K a kernel group)."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    nbatch = math.prod(out.shape[:-2])
    offsets, copy_a, copy_b, direct, notes, km, ldb = _geometry(op, a, b, out)
    name = grouped_name(device.dtype_name(a.dtype), b_type(b, km), mt)
    dev = device.info()
    resident = device.resident_blocks(SOURCE, name, THREADS, 0)
    splits = split_k(M, N, K, nbatch, dev.sm_count, resident)
    blocks = -(-N // COLUMNS) * nbatch
    if group % GROUP_STEP:  # one group per chunk: the kernel closes no group inside a chunk
        k_chunk = group
        splits = groups = -(-K // group)
        kernel_group, per_group = group, 1
        notes.append(f"{groups} groups of {group} along K, one per chunk of K ({blocks * splits} blocks; a group "
                     f"not a multiple of {GROUP_STEP} rows): exact int32 sums per group "
                     f"({groups * nbatch * M * N * 4} bytes), then the float steps in ascending order")
    elif group:
        unit = math.lcm(group, STAGE_ROWS)  # a chunk holds whole groups and whole stages
        k_chunk = -(-(-(-K // unit)) // splits) * unit
        splits, groups = -(-K // k_chunk), -(-K // group)
        kernel_group, per_group = group, 1
        notes.append(f"{groups} groups of {group} along K: exact int32 sums per group ({groups * nbatch * M * N * 4} "
                     "bytes), then the float steps in ascending order")
        if splits > 1:
            notes.append(f"split-K: {splits} chunks of {k_chunk} (whole groups; {blocks * splits} blocks for "
                         f"{dev.sm_count} SMs x {resident} resident)")
    else:
        splits, k_chunk = matmul.k_chunks(K, splits, STAGE_ROWS) if splits > 1 else (1, K)
        groups, kernel_group, per_group = 1, k_chunk, splits
        notes.append(f"split-K: {splits} chunks of {k_chunk} ({blocks * splits} blocks for {dev.sm_count} SMs x "
                     f"{resident} resident), their exact int32 sums added by the second pass" if splits > 1 else
                     "exact int32 sums to a workspace, the output made by the second pass")
    grid = (-(-N // COLUMNS), nbatch) + ((splits,) if splits > 1 else ())
    what = "groups in ascending order" if group else "int32 sums" if out.dtype == np.int32 else "float steps"
    launches = (Launch(SOURCE, name, grid, (THREADS,)),
                Launch(SOURCE, grouped_finish_name(SUM_OUT[np.dtype(out.dtype)]),
                       (-(-M * N // FINISH_THREADS), nbatch), (FINISH_THREADS,), 0, what))
    return Plan(op, f"{GROUPED}-m{mt}" if group else f"stream-m{mt}", launches, tuple(notes),
                SumsDetail(offsets, splits, k_chunk, group, groups, kernel_group, per_group, copy_a, copy_b, direct,
                           ldb))


def plan_grouped(a, b, out, group, force=False):
    """matmul_integer_to_float with blocked scales along K at small M on the stream
    kernel (``matmul_stream_grouped``: each group's exact int32 sums to a workspace,
    whole groups per chunk of K; ``matmul_stream_grouped_finish``: the float steps,
    groups in ascending order), or None where it does not apply: ``b`` a packed
    4-bit b (:class:`dmlq.gpu.packed.PackedView`) or an 8-bit one, M <= 16, more than one
    group of at most :func:`exact_group` rows (an 8-bit b's groups past 32768 rows would
    wrap its int32 sums), at most MAX_GRID_YZ matrices; and unless ``force``d, the
    workspace within :func:`work_fits`' share of b's bytes. A group of a multiple of
    GROUP_STEP rows: chunks of whole groups (split_k's count); any other: one chunk per
    group (at most MAX_GRID_YZ), which the kernel closes at the chunk's end."""
    M, K = a.shape[-2:]
    nbatch = math.prod(out.shape[:-2])
    mt = next((v for v in matmul.STREAM_M.values() if M <= v), None)
    if (mt is None or out.size == 0 or not 0 < group < K or group > exact_group(b)
            or nbatch > matmul.MAX_GRID_YZ or np.dtype(out.dtype) not in FLOAT_OUT):
        return None
    if group % GROUP_STEP and -(-K // group) > matmul.MAX_GRID_YZ:  # one chunk (blockIdx.z) per group
        return None
    if not force and not work_fits(M, K, group, 4 if isinstance(b, PackedView) else 8):
        return None
    return _sums_plan("matmul_integer_to_float", a, b, out, mt, group)


def plan_sums(op, a, b, out, *, a_zp):
    """matmul_integer or matmul_integer_to_float (one group of scales) with a packed
    4-bit or an 8-bit b where selection picks the stream kernel (:func:`_selected`:
    M <= 16, K <= 32768, the matrices within the grid; an 8-bit b not where the tiles
    would be the tensor cores' with no column sums of b to make, ``a_zp`` false: no default),
    or None.
    The plan: the grouped kernel with each chunk of K its own group, and the finish pass
    (the chunks' sums added, then the int32 or float output)."""
    if out.size == 0 or a.shape[-1] == 0:
        return None
    variant = _selected(a, b, out, a_zp)
    return None if variant is None else _sums_plan(op, a, b, out, matmul.STREAM_M[variant], 0)


def bind_sums(plan, a, b, out):
    """``launch(a, b, dst, a_s, a_z, a_per_row, b_s, b_z, b_per_col, bp_bs, bias, bias_bs, bias_ld)``
    for a plan of :func:`plan_grouped` or :func:`plan_sums`: a's scale and zero point
    per tensor or row (``a_per_row``), b's per tensor or column (``b_per_col``), or as
    (groups, N) tables, per matrix ``bp_bs`` elements apart; the bias table of the tiled
    kernels' ABI (scales and bias NULL for matmul_integer); the sums in the device's
    workspace (or a temporary)."""
    d, go, xp = plan.detail, launcher(plan), device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a.shape[-2:]
    N = b.shape[-1]
    prepare = staging(d.copy_a, d.copy_b, d.offsets)
    nbytes = d.groups * d.per_group * len(d.offsets) * M * N * 4
    take = device.workspace() if nbytes <= device.WORKSPACE_MAX else None
    zp_ld = i64(N if d.k_group else 0)

    def launch(a, b, dst, a_s, a_z, a_per_row, b_s, b_z, b_per_col, bp_bs, bias, bias_bs, bias_ld):
        a, b, table = prepare(a, b)
        work = np.uint64(take(nbytes)) if take is not None else xp.empty(nbytes // 4, np.int32)
        lda, ldc = a.strides[-2] // a.itemsize, dst.strides[-2] // dst.itemsize
        go([(a, b, i32(M), i32(N), i32(K), table, i64(lda), i64(d.ldb), a_z, b_z, a_per_row, b_per_col, zp_ld, bp_bs,
             i32(d.k_chunk), i32(d.kernel_group), work),
            (work, i32(d.groups), i32(d.per_group), dst, i32(M), i32(N), table, i64(ldc), a_s, a_per_row, b_s,
             b_per_col, bp_bs, bias, bias_bs, bias_ld)])

    return launch


def bind(plan, a, b, out, flags, quant, bp_bs) -> Runner:
    """The runner of a stream plan; ``flags``, ``quant`` and ``bp_bs``: the scale
    and zero-point arguments as dmlq.gpu.qmm.bind_quantized_matmul makes them."""
    d, go, xp = plan.detail, launcher(plan), device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a.shape[-2:]
    N = b.shape[-1]
    prepare = staging(d.copy_a, d.copy_b, d.offsets)

    def call(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out):
        dst = out if d.direct_out else xp.empty(out.shape, out.dtype)
        a, b, table = prepare(a, b)
        a_s, b_s, o_s, a_z, b_z, o_z = quant(a_scale, a_zero_point, b_scale, b_zero_point, out_scale,
                                             out_zero_point)
        lda, ldc = a.strides[-2] // a.itemsize, dst.strides[-2] // dst.itemsize
        q = (a_s, b_s, o_s, a_z, b_z, o_z, *flags, i64(bp_bs))
        if d.splits == 1:
            go([(a, b, dst, i32(M), i32(N), i32(K), table, i64(lda), i64(d.ldb), i64(ldc), *q, i32(K), NULL)])
        else:
            partial = xp.empty(d.splits * len(d.offsets) * M * N, np.int32)
            go([(a, b, dst, i32(M), i32(N), i32(K), table, i64(lda), i64(d.ldb), i64(ldc), *q, i32(d.k_chunk),
                 partial),
                (partial, i32(d.splits), dst, i32(M), i32(N), table, i64(ldc), a_s, b_s, o_s, o_z, *flags,
                 i64(bp_bs))])
        if dst is not out:
            out[...] = dst

    return Runner(plan, call)
