"""quantized_matmul with a packed 4-bit b at small M: cuda/matmul_stream_packed.cu.

At M <= 16 (an LLM's decode step) the product is bound by the bytes of b, so
:func:`dmlq.gpu.matmul.select_variant` sends a packed b there (``stream-m1`` /
``stream-m4`` / ``stream-m16``: the kernel's rows per launch) while K <= 32768
(int32 sums exact) and the matrices fit the grid; otherwise the dp4a tiles run.
This module plans and binds that kernel; the scale and zero-point arguments are
dmlq.gpu.matmul's (the matmul kernel ABI's per-row / per-column flags and
per-batch b tables). Where its 64-column blocks leave the device's block slots
empty, :func:`split_k` cuts K into chunks (blockIdx.z) whose exact int32 sums a
second kernel, ``matmul_stream_packed_finish``, adds and requantizes (the
kernel file's napkin math gives the numbers).

Launch conventions: one launch for every matrix (blockIdx.y), through a table of
per-matrix element offsets of a, b and out (numpy.matmul broadcasting, no copies
of a or b); a is read with unit stride along K (else copied to a contiguous
array), b's bytes must be contiguous (else copied); out is written in place under
the tiled kernels' conditions, else through a contiguous temporary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError
from . import device, matmul
from .device import NULL
from .intmm import _elem_strides
from .packed import TAGS
from .plan import Launch, Plan, Runner, launcher, staging

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


def kernel_name(ta: str, tb: str, to: str, mt: int) -> str:
    return f"matmul_stream_packed<{ta}, {tb}, {to}, {mt}>"


def finish_name(to: str) -> str:
    return f"matmul_stream_packed_finish<{to}>"


KERNELS = {SOURCE: tuple(kernel_name(ta, tb, to, mt) for ta in matmul.QTYPES for tb in TAGS.values()
                         for to in matmul.QTYPES for mt in matmul.STREAM_M.values())
           + tuple(finish_name(to) for to in matmul.QTYPES)}


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


def plan(a, b, out):
    """The stream plan for ``a @ b`` (``b`` a :class:`dmlq.gpu.packed.PackedView`),
    or None when selection picks a tiled variant."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch_shape = tuple(out.shape[:-2])
    nbatch = math.prod(batch_shape)
    dev = device.info()
    variant = matmul.select_variant(M, N, K, nbatch, dev.compute_capability, a.dtype, None,
                                    sm_count=dev.sm_count, packed=True)
    mt = matmul.STREAM_M.get(variant)
    if mt is None:
        return None
    if max(M, N, K) > matmul.MAX_DIM:
        raise UnsupportedError(f"quantized_matmul: dimensions above {matmul.MAX_DIM} are not supported "
                               f"(M={M}, N={N}, K={K})")
    copy_a = matmul._staging(a, False) != matmul.AS_IS
    copy_b = not matmul.packed.contiguous(b.data)
    direct = matmul._direct_out(out, a, b.data)
    notes = [f"b: packed {b.dtype_name}, unpacked in registers"]
    notes += [f"{name} copied to a contiguous array" for name, c in (("a", copy_a), ("b", copy_b)) if c]
    if not direct:
        notes.append("out written through a contiguous temporary")
    sa = device.Fresh(a.shape, a.dtype) if copy_a else a
    target = out if direct else device.Fresh(out.shape, out.dtype)
    offsets = np.zeros((nbatch, 3), np.int64)
    for i, x in enumerate((sa, b, target)):
        st = _elem_strides(x, batch_shape)
        for z, idx in enumerate(np.ndindex(*batch_shape)):
            offsets[z, i] = sum(j * s for j, s in zip(idx, st))
    to = device.dtype_name(out.dtype)
    name = kernel_name(device.dtype_name(a.dtype), b.tag, to, mt)
    dev = device.info()
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
                _Detail(offsets, splits, k_chunk, copy_a, copy_b, direct))


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
            go([(a, b, dst, i32(M), i32(N), i32(K), table, i64(lda), i64(N), i64(ldc), *q, i32(K), NULL)])
        else:
            partial = xp.empty(d.splits * len(d.offsets) * M * N, np.int32)
            go([(a, b, dst, i32(M), i32(N), i32(K), table, i64(lda), i64(N), i64(ldc), *q, i32(d.k_chunk),
                 partial),
                (partial, i32(d.splits), dst, i32(M), i32(N), table, i64(ldc), a_s, b_s, o_s, o_z, *flags,
                 i64(bp_bs))])
        if dst is not out:
            out[...] = dst

    return Runner(plan, call)
