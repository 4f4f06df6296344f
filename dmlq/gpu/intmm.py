"""The integer matmul family on the GPU: the tiled kernels of quantized_matmul
(dmlq/gpu/intmm_tiled.py) at every M, and cuda/matmul_stream.cu for blocked scales
along K whose groups those cannot close.

``matmul_integer`` and ``matmul_integer_to_float`` run quantized_matmul's kernels (at
M <= 16 its weight-streaming kernel's sums pass, blocked scales included: dmlq.gpu.qmm_stream;
past that the dp4a or tensor-core tiles, split-K over exact int32 sums) except for blocked
scales along K whose group is not a multiple of 32 (the wide dp4a kernel closes groups
on its 32-deep tiles, the grouped stream kernel on its 32-row half stages) where the
grouped stream kernel does not take them with one chunk of K per group (M > 16, or its
workspace past 4x b's bytes: dmlq.gpu.intmm_tiled.plan_odd_groups). Those run ``matmul_stream``: one
thread per output column streams B once for up to 16 rows (docs/semantics.md's
order: groups ascending, then the bias, one rounding to float16; a packed 4-bit b
read as its bytes), ``stream-m1`` / ``-m4`` / ``-m16`` at M <= 16 and past that
``stream-rows``, the M = 16 kernel once per 16 rows (blockIdx.y = a matrix's row
block), exact for any group length and slow (b is read once per row block). More
than 65535 matrices (times row blocks) raise UnsupportedError.

Why not the stream kernel at small M, as first planned (the H100 run,
bench/results/gpu-2026-11-26/bench/bench.log, N = K = 8192): matmul_integer_to_float
on it took 1,033 us at M = 1 and 3,948 us at M = 16 (2 % and 0.6 % of the HBM limit
for b's bytes; its header's napkin math predicted the issue- and latency-bound
figure), where quantized_matmul's tiled path, the same main loops and split-K with a
requantizing epilogue, took 46 us at M = 16 (N = 14336, K = 4096 and N = 4096,
K = 14336). The M < 16 tiled figures (dp4a-32x32; packed b's dp4a tiles) are to be
measured; their napkin math (about 20-80 us at M = 1, N = K = 8192: b's 64 MB at
HBM speed, 256 blocks of dp4a) is an order of magnitude under the stream kernel's.

Launch conventions: a and b are read with unit stride along their last axis (an
operand that is not is copied to a contiguous array); numpy.matmul batch
broadcasting through a per-matrix table of element offsets (blockIdx.y = the
matrix, no copies of a or b); per-row A parameters as length-M vectors (per batch and row: a (matrices, M)
table, each block's first row in its offsets), B parameters as (groups, N) rows per matrix, the bias expanded to the output's
shape in float32 (float16 inputs widen exactly); out written in place when it is
C-contiguous, else through a temporary.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError
from . import device, intmm_tiled, loader, qmm_stream
from .device import NULL
from .matmul import batch_rows
from .packed import TAGS, PackedView, stored_shape, to_rows
from .plan import Launch, Plan, Runner, elem_strides as _elem_strides, launcher, staging

SOURCE = "matmul_stream.cu"
QTYPES = ("int8", "uint8")
# b's kernel type: its dtype's name, or for a packed 4-bit b (dmlq.packed_b) the packed tag.
B_TYPES = QTYPES + tuple(TAGS.values())
OUT_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16"}  # matmul_integer_to_float's
# Variant name -> rows per launch (MT). One line per variant.
VARIANTS = {"stream-m1": 1, "stream-m4": 4, "stream-m16": 16}
ROWS = ("stream-rows", 16)  # M > 16 in blocks of 16 rows: blocked scales the tiled kernels cannot close
THREADS = 128
MAX_GRID_Y = 65535
MAX_DIM = 2**31 - 1


def kernel_name(ta: str, tb: str, to: str, mt: int) -> str:
    return f"matmul_stream<{ta}, {tb}, {to}, {mt}>"


KERNELS = {SOURCE: tuple(kernel_name(ta, tb, to, mt) for ta in QTYPES for tb in B_TYPES
                         for to in OUT_TYPES.values() for mt in VARIANTS.values())}


def select_variant(m: int):
    """The smallest stream variant that holds M rows, or None (no kernel for this M yet)."""
    for name, mt in VARIANTS.items():
        if m <= mt:
            return name
    return None


@dataclass(frozen=True)
class _Detail:
    mt: int
    groups: int
    group: int
    offsets: np.ndarray    # (blocks, 8) int64: a, b, out, b_scale, b_zp, bias element offsets, first row,
                           # first row of a's parameters (per batch and row: z * M + first row)
    copy_a: bool
    copy_b: bool
    direct_out: bool
    packed_zp: object = None   # packed b: its zero points' dtype on the device (int8 / uint8 values)
    a_batch_rows: bool = False  # a's scale and zero point per batch and row: (matrices, M) tables
    repack_b: bool = False      # a packed b held K-major: repacked to rows first (dmlq.gpu.packed.to_rows)


def _contiguous_rows(x) -> bool:
    return x.size == 0 or x.shape[-1] == 1 or x.strides[-1] == x.itemsize


def _plan(op, a, b, out, groups, group, b_param_rows, b_packed=None, a_batch_rows=False):
    if out.size == 0:
        return Plan(op, "empty")
    pb = None if b_packed is None else PackedView(b, b_packed)
    repack = pb is not None and pb.kmajor
    M, K = a.shape[-2:]
    N = (pb or b).shape[-1]
    batch_shape = tuple(out.shape[:-2])
    nbatch = math.prod(batch_shape)
    variant = select_variant(M)
    row_blocks = 1
    if variant is None:
        variant, row_blocks = ROWS[0], -(-M // ROWS[1])
    tb = b.dtype.name if pb is None else TAGS[pb.dtype_name]  # (a K-major packed b: its rows)
    if tb not in B_TYPES:
        raise UnsupportedError(f"{op}: no CUDA kernel for a {b.dtype} b: the GPU takes an int8 or uint8 b, or a "
                               "4-bit one as a dmlq.Packed (NumPy arrays run the wider types on the reference)")
    if nbatch * row_blocks > MAX_GRID_Y or max(M, N, K) > MAX_DIM:
        raise UnsupportedError(f"{op}: {nbatch} matrices of {row_blocks} row blocks (at most {MAX_GRID_Y}) or a "
                               f"dimension above {MAX_DIM}")
    copy_a, copy_b = not _contiguous_rows(a), not _contiguous_rows(b)
    direct = out.flags.c_contiguous and not (device.overlaps(out, a) or device.overlaps(out, b))
    notes = [f"{name} copied to a contiguous array" for name, c in (("a", copy_a), ("b", copy_b)) if c]
    if not direct:
        notes.append("out written through a contiguous temporary")
    if groups > 1:
        notes.append(f"{groups} groups of {group} along K")
    sa = device.Fresh(a.shape, a.dtype) if copy_a else a
    sb = device.Fresh(b.shape, b.dtype) if copy_b else b
    if pb is not None:
        notes.append(f"b: packed {pb.dtype_name}, unpacked in registers")
        if pb.kmajor:
            notes.append("b: K-major packed bytes repacked to rows first (a device pass over them)")
            pb = pb.rows()
        sb = pb
    if row_blocks > 1:
        notes.append(f"{row_blocks} blocks of {ROWS[1]} rows")
    if a_batch_rows:
        notes.append("a's scale and zero point per batch and row: a (matrices, M) table")
    a_st, b_st = _elem_strides(sa, batch_shape), _elem_strides(sb, batch_shape)
    offsets = np.zeros((nbatch, row_blocks, 8), np.int64)
    for z, idx in enumerate(np.ndindex(*batch_shape)):
        offsets[z, :, 0] = sum(i * s for i, s in zip(idx, a_st))
        offsets[z, :, 1] = sum(i * s for i, s in zip(idx, b_st))
    z = np.arange(nbatch, dtype=np.int64)[:, None]
    r0 = np.arange(row_blocks, dtype=np.int64)[None, :] * ROWS[1]
    offsets[:, :, 0] += r0 * (sa.strides[-2] // sa.itemsize if M > 1 else K)
    offsets[:, :, 2] = z * M * N + r0 * N
    offsets[:, :, 3] = z * groups * N
    offsets[:, :, 4] = z * b_param_rows * N
    offsets[:, :, 5] = z * M * N + r0 * N
    offsets[:, :, 6] = r0
    offsets[:, :, 7] = r0 + (z * M if a_batch_rows else 0)  # a's parameters: (matrices, M) per batch and row
    offsets = offsets.reshape(-1, 8)
    mt = VARIANTS.get(variant, ROWS[1])
    name = kernel_name(a.dtype.name, tb, OUT_TYPES[np.dtype(out.dtype)], mt)
    launch = Launch(SOURCE, name, (-(-N // THREADS), nbatch * row_blocks), (THREADS,))
    return Plan(op, variant, (launch,), tuple(notes),
                _Detail(mt, groups, group, offsets, copy_a, copy_b, direct,
                        None if pb is None else pb.zp_dtype, a_batch_rows, repack))


def _groups(k, block_size):
    if block_size is None:
        return 1, max(k, 1)
    return -(-k // block_size), block_size


def _b_rows(v):
    """How many rows of B parameters (1, or the groups) a scale or zero point holds."""
    return 1 if v is None or v.ndim < 2 else v.shape[-2]


def _tiled(a, block_size=None) -> bool:
    """dmlq.gpu.intmm_tiled's path (the tiles at every M, the weight-streaming kernels at
    M <= 16), unless blocked scales along K need groups the wide dp4a kernel cannot close
    (a length not a multiple of its 32-deep tiles): those take the grouped stream kernel
    where it applies (intmm_tiled.plan_odd_groups), else run here, exact for any group
    length."""
    k = a.shape[-1]
    return block_size is None or not 0 < block_size < k or block_size % intmm_tiled.GROUP_STEP == 0


def plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Plan:
    return intmm_tiled.plan_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed)


# A bfloat16 out: the grouped stream kernel's finish pass writes it (the plans at M <= 16 that end
# there, qmm_stream.FLOAT_OUT); the others' float outputs are float32 and float16, so their float32
# result goes to a temporary that CuPy's cast rounds (ties to even, docs/semantics.md's one rounding).
_BF16_NOTE = "bfloat16 out: a float32 temporary rounded by CuPy's cast (to nearest even)"


def _float32_out(out):
    """The stand-in out of a bfloat16 out's float32 kernels, or None for a kernel output type."""
    return None if np.dtype(out.dtype) in OUT_TYPES else device.Fresh(out.shape, np.float32)


def _bfloat16_plan(args, out, block_size, b_packed, dense_plan):
    """The plan that writes the bfloat16 ``out`` itself, or None: where the float32 plan ends in a
    pass with a bfloat16 twin (the grouped stream kernel's finish pass; the tensor-core tile of an
    8-bit b or its split-K epilogue: dmlq.gpu.matmul_configs.BF16_MMA) and every kernel of the
    bfloat16 plan is built (the registry)."""
    if not dense_plan.launches:
        return None
    built = loader.registry()
    last = dense_plan.launches[-1]
    if last.kernel != qmm_stream.grouped_finish_name("float"):
        template, _, rest = last.kernel.partition("<")
        targs = [t.strip() for t in rest.rstrip(">").split(",")]
        if template not in _BF16_TWINS or targs[2] != "float":
            return None
        twin = f"{template}<{', '.join(targs[:2] + ['bfloat16'] + targs[3:])}>"
        if twin not in built.get(last.source, ()):  # (the grouped tile, a packed b's: none)
            return None
    plan = _plan_float(*args, out, block_size, b_packed)
    return plan if all(launch.kernel in built.get(launch.source, ()) for launch in plan.launches) else None


_BF16_TWINS = ("matmul_mma", "matmul_splitk_epilogue")  # (their output type: the third template argument)


def plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, b_packed=None) -> Plan:
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias)
    if (dense := _float32_out(out)) is None:
        return _plan_float(*args, out, block_size, b_packed)
    plan = _plan_float(*args, dense, block_size, b_packed)
    native = _bfloat16_plan(args, out, block_size, b_packed, plan)
    if native is not None:
        return native
    return dataclasses.replace(plan, notes=plan.notes + (_BF16_NOTE,)) if plan.launches else plan


def _plan_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out, block_size=None,
                b_packed=None) -> Plan:
    if _tiled(a, block_size):
        return intmm_tiled.plan_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias,
                                                        out, block_size, b_packed=b_packed)
    grouped = intmm_tiled.plan_odd_groups(a, b, out, block_size, b_packed)
    if grouped is not None:
        return grouped
    groups, group = _groups(a.shape[-1], block_size)
    return _plan("matmul_integer_to_float", a, b, out, groups, group, _b_rows(b_zero_point), b_packed,
                 batch_rows(a_scale) or batch_rows(a_zero_point))


def _row_vector(v, m, dtype, batch_shape=()):
    """A per-tensor or per-row parameter as a contiguous length-M vector, with ``batch_shape``
    (a's per batch and row) a contiguous (matrices, M) table; None stays None."""
    if v is None:
        return None
    return device.table(v.reshape(-1, 1) if v.ndim < 2 else v, tuple(batch_shape) + (m, 1), dtype)


def _b_table(v, batch_shape, rows, n, dtype):
    """A B parameter as a contiguous (matrices, rows, N) table (per tensor, per column,
    per group, per batch: all broadcast)."""
    if v is None:
        return None
    return device.table(v.reshape(1, -1) if v.ndim < 2 else v, tuple(batch_shape) + (rows, n), dtype)


def _bind(plan, a_shape, b_shape, out, b_packed=None):
    d = plan.detail
    go = launcher(plan)
    xp = device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a_shape[-2:]
    if b_packed is not None:
        b_shape = b_packed[1]
    N = b_shape[-1]
    batch_shape = tuple(out.shape[:-2])
    prepare = staging(d.copy_a, d.copy_b, d.offsets)

    def launch(a, b, dst, a_s, a_z, b_s, b_z, bias, bz_rows):
        if d.repack_b:
            b = to_rows(xp, b, b_shape, stored_shape(b_packed)[-1])
        a, b, table = prepare(a, b)
        lda = a.strides[-2] // a.itemsize if M > 1 else K
        ldb = b.strides[-2] // b.itemsize if K > 1 and d.packed_zp is None else N
        args = (a, b, dst, i32(M), i32(N), i32(K), i32(d.group), i32(d.groups), i32(bz_rows), table,
                i64(lda), i64(ldb), i64(N),
                NULL if a_s is None else a_s, NULL if a_z is None else a_z,
                NULL if b_s is None else b_s, NULL if b_z is None else b_z, NULL if bias is None else bias)
        go([args])

    def finish(dst, out):
        if dst is not out:
            out[...] = dst

    def call(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out):
        dst = out if d.direct_out else xp.empty(out.shape, out.dtype)
        bz_rows = _b_rows(b_zero_point)
        b_s = _b_table(b_scale, batch_shape, d.groups, N, np.float32)
        full_bias = None if bias is None else device.table(bias, out.shape, np.float32)
        rows = batch_shape if d.a_batch_rows else ()
        launch(a, b, dst, _row_vector(a_scale, M, np.float32, rows),
               _row_vector(a_zero_point, M, a.dtype, rows), b_s, _b_table(b_zero_point, batch_shape, bz_rows, N, d.packed_zp or b.dtype), full_bias, bz_rows)
        finish(dst, out)
    return Runner(plan, call)


def bind_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None) -> Runner:
    return intmm_tiled.bind_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed)


def bind_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out,
                                 block_size=None, b_packed=None) -> Runner:
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias)
    if (dense := _float32_out(out)) is None:
        return _bind_float(*args, out, block_size, b_packed)
    inner = _bind_float(*args, dense, block_size, b_packed)
    if _bfloat16_plan(args, out, block_size, b_packed, inner.plan) is not None:
        return _bind_float(*args, out, block_size, b_packed)
    if not inner.plan.launches:
        return inner
    xp = device.xp()

    def call(*args):
        tmp = xp.empty(dense.shape, np.float32)
        inner(*args[:-1], tmp)
        args[-1][...] = tmp  # (one elementwise pass: the cast, to nearest even, into out as it lies)
    return Runner(dataclasses.replace(inner.plan, notes=inner.plan.notes + (_BF16_NOTE,)), call)


def _bind_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out, block_size=None,
                b_packed=None) -> Runner:
    if _tiled(a, block_size):
        return intmm_tiled.bind_matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias,
                                                        out, block_size, b_packed=b_packed)
    plan = _plan_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out, block_size, b_packed)
    if not isinstance(plan.detail, _Detail):  # the grouped stream kernel's plan (intmm_tiled.plan_odd_groups)
        return intmm_tiled._bind(plan, a, b, out, b_packed, a_scale, a_zero_point, b_scale, b_zero_point, bias)
    if not plan.launches:
        return Runner(plan, lambda *args: None)
    return _bind(plan, a.shape, b.shape, out, b_packed)


def matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed=None):
    """Backend interface (see dmlq.reference.matmul_integer); returns out."""
    bind_matmul_integer(a, a_zero_point, b, b_zero_point, out, b_packed)(a, a_zero_point, b, b_zero_point, out)
    return out


def matmul_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out, block_size=None,
                            b_packed=None):
    """Backend interface (see dmlq.reference.matmul_integer_to_float); returns out."""
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias)
    bind_matmul_integer_to_float(*args, out, block_size, b_packed)(*args, out)
    return out
