"""quantized_matmul with a packed 4-bit b at small M: cuda/matmul_stream_packed.cu.

At M <= 16 (an LLM's decode step) the product is bound by the bytes of b, so
:func:`dmlq.gpu.matmul.select_variant` sends a packed b there (``stream-m1`` /
``stream-m4`` / ``stream-m16``: the kernel's rows per launch) while K <= 32768
(int32 sums exact) and the matrices fit the grid; otherwise the dp4a tiles run.
This module plans and binds that kernel; the scale and zero-point arguments are
dmlq.gpu.matmul's (the matmul kernel ABI's per-row / per-column flags and
per-batch b tables).

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
from .intmm import _elem_strides
from .packed import TAGS
from .plan import Launch, Plan, Runner, launcher, staging

SOURCE = "matmul_stream_packed.cu"
THREADS, COLUMNS = 128, 64  # a block: 128 threads, 64 columns of one matrix


def kernel_name(ta: str, tb: str, to: str, mt: int) -> str:
    return f"matmul_stream_packed<{ta}, {tb}, {to}, {mt}>"


KERNELS = {SOURCE: tuple(kernel_name(ta, tb, to, mt) for ta in matmul.QTYPES for tb in TAGS.values()
                         for to in matmul.QTYPES for mt in matmul.STREAM_M.values())}


@dataclass(frozen=True)
class _Detail:
    offsets: np.ndarray   # (matrices, 3) int64: a, b (elements), out element offsets
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
    name = kernel_name(device.dtype_name(a.dtype), b.tag, device.dtype_name(out.dtype), mt)
    launch = Launch(SOURCE, name, (-(-N // COLUMNS), nbatch), (THREADS,))
    return Plan("quantized_matmul", variant, (launch,), tuple(notes), _Detail(offsets, copy_a, copy_b, direct))


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
        go([(a, b, dst, i32(M), i32(N), i32(K), table, i64(lda), i64(N), i64(ldc),
             a_s, b_s, o_s, a_z, b_z, o_z, *flags, i64(bp_bs))])
        if dst is not out:
            out[...] = dst

    return Runner(plan, call)
