"""QUANTIZED_LINEAR_MATRIX_MULTIPLY on the GPU: kernel tables, selection, launch.

Kernels: cuda/matmul_dp4a.cu (dp4a tiles, the wide K > 32768 path and the
row/column-sum pre-passes) and cuda/matmul_mma.cu (tensor cores, sm_80+), both
with the matmul kernel ABI (see the .cu headers). Selection is pure Python.

Launch conventions of quantized_matmul:
- numpy.matmul batch broadcasting, any number of batch dims: the batch dims of
  a, b and out are collapsed where their strides allow into the ABI's two
  levels (blockIdx.z = b0 * batch1 + b1, stride 0 = broadcast, no copies);
  further leading dims, and batches beyond the 65535 grid limit, become
  separate launches with offset pointers.
- Rows of a and b must have unit stride along the last axis; an operand that
  does not is copied once to a contiguous array (its own shape, no broadcast),
  except a b held K-major (x @ w.T: its columns contiguous along K), which the
  dp4a tiles read as it is at any column stride (cuda/matmul_dp4a_kmajor.cu).
- The tensor-core variants stage a and b with cp.async: 16-byte copies when
  both operands' bases, row and batch strides are multiples of 16 bytes, else
  4-byte copies when they are multiples of 4 (K = 1000, N = 4092); an operand
  that fits neither (K or N odd, an odd offset view) is first copied into
  rows padded to 16 (:func:`padded16`: one pass over that operand). A packed
  4-bit b (cuda/matmul_mma_packed.cu) is staged as its bytes: rows that do
  not start on a VEC-aligned byte (odd N, N not a multiple of 8) are first
  copied into rows of 32-element multiples (dmlq.gpu.packed.pad_rows). An
  8-bit b held K-major on 16 bytes (x @ w.T of an (N, K) weight: start,
  columns and matrices on 16 bytes) is read as it is by
  cuda/matmul_mma_kmajor.cu (a then takes 16-byte copies, padded if it must
  be). The dp4a variants take any alignment.
- out is written in place when its last axis is contiguous, it does not
  overlap a or b, and no batch/row stride of it is 0; otherwise through a
  contiguous temporary that is then copied into out.
- Scales and zero points are 1-element or per-axis device arrays passed by
  pointer (no host reads, no synchronization); a per-tensor value beside a
  per-axis partner (e.g. per-row scale, per-tensor zero point) is expanded to
  the axis length so one per-axis flag covers both.
- The row-sum pre-pass runs only when b has a zero point, the column-sum one
  only when a has one (never for the wide variant, which sums per K-chunk).
- K == 0 gives requantize(0) everywhere via the dp4a kernel's epilogue.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError
from . import device, packed
from .device import NULL
from .plan import Launch, Plan, launcher

from .matmul_configs import (  # noqa: F401 - the tables, re-exported (dmlq.gpu.matmul.X)
    DP4A_SOURCE, MMA_SOURCE, PACKED_SOURCE, MMA_PACKED_SOURCE, MMA_KMAJOR_SOURCE, MMA_KMAJOR4_SOURCE, WGMMA_SOURCE,
    DP4A_KMAJOR4_SOURCE, DP4A_KMAJOR8_SOURCE, WIDE_K,
    MAX_DIM, MAX_GRID_YZ, MMA_MIN_WORK, QTYPES, DP4A_CONFIGS, MMA_CONFIGS,
    WGMMA_CONFIGS, CONFIGS, STREAM_M, ALL_VARIANTS, QMM_VARIANTS, COMBINE, PREPASS_KERNELS,
    HAVE_MMA, HAVE_MMA_PACKED, HAVE_MMA_KMAJOR, HAVE_MMA_KMAJOR4, HAVE_WGMMA, KMAJOR_TAGS, MMA_VECS, OUT_TYPES, SPLITK_EPILOGUES,
    PACKED_TAGS, KERNELS, VARIANTS, TENSOR_CONFIGS, Dp4aConfig, MmaConfig, GROUPED_CONFIGS, HAVE_MMA_GROUPED,
    MMA_GROUPED_SOURCE,
    WgmmaConfig, _have_mma, _instantiations,
)


_cc = device.cc_int


def select_variant(M, N, K, batch, compute_capability, a_dtype=None, b_dtype=None, *,
                  sm_count=132, have_mma=None, blocked=False, packed=False, stream=True,
                  col_sums=False) -> str:
    """The variant for an (M, K) x (K, N) product repeated `batch` times.

    Pure Python (no GPU). Every variant handles all 8 dtype combinations, so
    a_dtype / b_dtype do not change the choice today. have_mma defaults to
    whether cuda/matmul_mma.cu is present. ``blocked``: matmul_integer_to_float
    with more than one block of B scales along K, which only two kernels' K loops close
    group by group (in ascending order, as the contract fixes): the grouped tensor-core
    kernel (``mma-grouped``, cuda/matmul_mma_grouped.cu) where the tensor cores would take
    the product, else the wide dp4a kernel.
    ``packed``: a packed 4-bit b, the same rule (cuda/matmul_mma_packed.cu
    stages its bytes for the tensor cores) where that source is present.
    At M <= 16 and K <= 32768 (no blocked scales) the weight-streaming kernel
    (cuda/matmul_stream_packed.cu; the smallest ``stream-m*`` that holds M rows;
    bound by b's bytes, one pass over them) takes a packed b, and an 8-bit b
    wherever the tiles would not be the tensor cores' (M = 16 with enough work
    stays there, as the H100 measured it: 46 us at N = 14336, K = 4096; the
    stream kernel's M = 16 is dp4a-bound near the bandwidth limit in its napkin
    math, so the crossover is the bench's to find), except with ``col_sums``
    (a has a zero point): the tiles would first need b's column sums, a pass
    over all of b by N / 128 blocks, which the stream kernel folds into its own
    (the H200, 2026-11-26, M = 16, N = K = 8192, uint8 a with a zero point:
    tensor cores, split-K and the column sums 168 us of device time in a CUDA
    graph; stream-m16 78 us called eagerly). ``stream=False``: never that
    kernel (the tiled rule below at every M).
    """
    if have_mma is None:
        have_mma = HAVE_MMA
    have_mma = have_mma and (HAVE_MMA_PACKED or not packed)
    if _cc(compute_capability) < 61:
        raise UnsupportedError(f"quantized_matmul needs dp4a (sm_61 or newer); this device is "
                               f"sm_{_cc(compute_capability)}")
    # Provisional crossover: tensor cores are ~15x dp4a's peak, so anything
    # that fills a few mma tiles should win; re-measure MMA_MIN_WORK and the
    # minimum sizes on the device machine.
    mma = (have_mma and _cc(compute_capability) >= 80 and min(M, N) >= 16 and 32 <= K <= WIDE_K
           and M * N * K * batch >= MMA_MIN_WORK)
    if blocked:  # the two kernels that close each group of K in order
        return "mma-grouped" if mma and HAVE_MMA_GROUPED else "dp4a-wide"
    if K > WIDE_K:
        return "dp4a-wide"  # the only exact path past 32768
    if stream and (packed or col_sums or not mma) and batch <= MAX_GRID_YZ:
        for name, rows in STREAM_M.items():
            if M <= rows:
                return name
    if mma:
        if _cc(compute_capability) == 90 and not packed and HAVE_WGMMA:  # a wgmma config a GPU has timed ahead
            timed = [name for name, wcfg in WGMMA_CONFIGS.items() if wcfg.auto]
            if timed:
                return timed[0]
        return "mma-128x128"
    # Largest dp4a tile that still gives every SM at least one block.
    for name in ("dp4a-128x64", "dp4a-64x64"):
        cfg = DP4A_CONFIGS[name]
        blocks = -(-M // cfg.bm) * -(-N // cfg.bn) * batch
        if M >= cfg.bm and N >= cfg.bn and blocks >= sm_count:
            return name
    return "dp4a-32x32"


SPLIT_K_MAX = 16        # partial sums written and re-read grow with the splits
SPLIT_K_MIN_KTILES = 4  # k tiles per split, so the 4-stage pipeline still fills
MMA_BLOCKS_PER_SM = 2   # __launch_bounds__(128, 2) of matmul_mma 128x128


def split_k(M, N, K, batch, sm_count, cfg=None) -> int:
    """Splits of K for the tensor-core kernel. One while the output tiles fill
    every SM's block slots (tiles per SM >= MMA_BLOCKS_PER_SM); otherwise
    enough splits for about one wave of blocks, each at least
    SPLIT_K_MIN_KTILES k tiles long, at most SPLIT_K_MAX. The partial sums
    are added exactly (int32, mod 2**32) before the epilogue."""
    cfg = cfg or MMA_CONFIGS["mma-128x128"]
    tiles = -(-M // cfg.bm) * -(-N // cfg.bn) * batch
    slots = sm_count * MMA_BLOCKS_PER_SM
    if tiles >= slots or K <= 0:
        return 1
    ktiles = -(-K // cfg.bk)
    return max(1, min(-(-slots // tiles), ktiles // SPLIT_K_MIN_KTILES, SPLIT_K_MAX))


COL_SUMS_BLOCKS_PER_SM = 4  # matmul_col_sums: blocks of 256 threads a split K aims for per SM
COL_SUMS_MIN_ROWS = 512      # rows of b per split, at least
COL_SUMS_MAX_SPLITS = 32
COMBINE_GRID = 4096          # matmul_sums_combine's blocks, at most (grid-stride past them)


def col_sum_splits(N: int, K: int, batch: int, sm_count: int):
    """(splits, k_chunk) of matmul_col_sums: one split where its ceil(N / 128) x batch blocks
    give every SM COL_SUMS_BLOCKS_PER_SM of them, else K cut into chunks of at least
    COL_SUMS_MIN_ROWS rows (a multiple of 8, the block's k-slices) for about that many
    blocks, at most COL_SUMS_MAX_SPLITS; matmul_sums_combine adds the splits' sums."""
    blocks = -(-N // 128) * min(batch, MAX_GRID_YZ)
    want = -(-(COL_SUMS_BLOCKS_PER_SM * sm_count) // max(blocks, 1))
    splits = max(1, min(want, K // COL_SUMS_MIN_ROWS, COL_SUMS_MAX_SPLITS))
    if splits == 1:
        return 1, K
    chunk = -(-(-(-K // splits)) // 8) * 8
    return -(-K // chunk), chunk


def k_chunks(K: int, splits: int, bk: int = 64):
    """(splits, k_chunk): k_chunk a multiple of bk, and no split left empty."""
    ktiles = -(-K // bk)
    chunk = -(-ktiles // max(1, splits)) * bk
    return -(-K // chunk), chunk


# ---------------------------------------------------------------- batch plan

@dataclass(frozen=True)
class BatchLaunch:
    """One kernel launch's batch: element offsets of a, b, out and the ABI batch levels."""

    offsets: tuple   # (a, b, c) element offsets from each base pointer
    batch0: int
    batch1: int
    strides: tuple   # (a_bs0, a_bs1, b_bs0, b_bs1, c_bs0, c_bs1), elements


def batch_strides(shape, strides, itemsize, batch_shape) -> tuple:
    """Element strides of an operand's batch dims aligned to batch_shape (0 = broadcast)."""
    nb = len(shape) - 2
    lead = len(batch_shape) - nb
    out = []
    for i, size in enumerate(batch_shape):
        j = i - lead
        if j < 0 or shape[j] == 1 or size == 1:
            out.append(0)
        else:
            out.append(strides[j] // itemsize)
    return tuple(out)


def plan_batches(batch_shape, sa, sb, sc, max_z=None) -> list:
    """Launches covering batch_shape; each has batch0 * batch1 <= max_z (grid z limit)."""
    max_z = MAX_GRID_YZ if max_z is None else max_z
    dims = [(n, a, b, c) for n, a, b, c in zip(batch_shape, sa, sb, sc) if n != 1]
    merged: list = []
    for d in dims:
        if merged and all(merged[-1][i] == d[i] * d[0] for i in (1, 2, 3)):
            merged[-1] = (merged[-1][0] * d[0], d[1], d[2], d[3])
        else:
            merged.append(d)
    while len(merged) < 2:
        merged.insert(0, (1, 0, 0, 0))
    outer, (n0, a0, b0, c0), (n1, a1, b1, c1) = merged[:-2], merged[-2], merged[-1]
    strides = (a0, a1, b0, b1, c0, c1)
    launches = []
    for idx in itertools.product(*(range(d[0]) for d in outer)):
        base = [sum(i * d[k] for i, d in zip(idx, outer)) for k in (1, 2, 3)]
        if n1 <= max_z:
            step = max_z // n1
            for s in range(0, n0, step):
                off = (base[0] + s * a0, base[1] + s * b0, base[2] + s * c0)
                launches.append(BatchLaunch(off, min(step, n0 - s), n1, strides))
        else:
            for s0, s in itertools.product(range(n0), range(0, n1, max_z)):
                off = (base[0] + s0 * a0 + s * a1, base[1] + s0 * b0 + s * b1,
                       base[2] + s0 * c0 + s * c1)
                launches.append(BatchLaunch(off, 1, min(max_z, n1 - s), strides))
    return launches


# ------------------------------------------------------------------ launch

def _or_null(v):
    return NULL if v is None else v


def cp_async_width(x) -> int:
    """The widest cp.async copy (16 or 4 bytes, 0 for none) that can stage ``x``:
    it must divide the base address, the row stride (passed to the kernel even
    for a single row) and every batch stride that is used."""
    g = device.ptr(x) | x.strides[-2]
    for n, st in zip(x.shape[:-2], x.strides[:-2]):
        if n > 1:
            g |= st
    return next((v for v in MMA_VECS if g % v == 0), 0)


def padded16(xp, x):
    """A copy of ``x`` whose rows start 16 bytes apart (K or N rounded up to 16,
    the padding never read): one pass over the operand instead of a byte-wise
    staging path in the kernel."""
    rows, k = x.shape[:-1], x.shape[-1]
    kp = -(-k // 16) * 16
    n = math.prod(rows) * kp
    buf = xp.empty(n + 16, x.dtype)
    skew = (-device.ptr(buf)) % 16
    p = buf[skew:skew + n].reshape(rows + (kp,))
    p[..., k:] = 0
    p[..., :k] = x
    return p[..., :k]


def _param(xp, v, n, dtype, cast=False):
    """A scale (``cast``: float16 widened, exactly) or zero point as the contiguous
    ``n``-element vector a kernel reads (one element broadcast); None stays None."""
    if v is None:
        return None
    v = v.reshape(-1)
    if v.dtype != dtype:
        if not cast:
            raise TypeError(f"quantized_matmul: expected {np.dtype(dtype)}, got {v.dtype}")
        v = v.astype(dtype)
    if v.size != n:
        if v.size != 1:
            raise ValueError(f"quantized_matmul: per-axis vector of {v.size} elements, expected {n}")
        v = xp.broadcast_to(v, (n,))
    return xp.ascontiguousarray(v)


def _direct_out(out, a, b) -> bool:
    if out.shape[-1] > 1 and out.strides[-1] != out.itemsize:
        return False
    if out.shape[-2] > 1 and out.strides[-2] == 0:
        return False
    if any(n > 1 and s == 0 for n, s in zip(out.shape[:-2], out.strides[:-2])):
        return False
    return not (device.overlaps(out, a) or device.overlaps(out, b))


# How an operand reaches the kernel: as it is, copied to a C-contiguous array
# (rows must have unit stride), or copied into rows padded to 16 bytes (for
# cp.async when no copy width fits the original).
AS_IS, CONTIGUOUS, PADDED = "as is", "copied to a contiguous array", "copied into rows padded to 16 bytes"
TRANSPOSED = "copied transposed: N rows of K bytes, 16 bytes apart"  # wgmma's b
WHOLE_BYTES = "repacked with each matrix starting on a byte (one zero nibble after each)"  # packed b only


def _staging(x, tensor_cores: bool) -> str:
    if x.size == 0:  # K = 0: nothing is read
        return AS_IS
    if x.shape[-1] > 1 and x.strides[-1] != x.itemsize:
        if tensor_cores and cp_async_width(device.Fresh(x.shape, x.dtype)) == 0:
            return PADDED
        return CONTIGUOUS
    if tensor_cores and cp_async_width(x) == 0:
        return PADDED
    return AS_IS


def _padded_shape(x):
    """The shape padded16 allocates, whose first (shape) columns a staged operand uses."""
    return x.shape[:-1] + (-(-x.shape[-1] // 16) * 16,)


def _k_major16(b) -> bool:
    """Whether ``b`` (..., K, N) is held K-major on 16 bytes, as the wgmma kernel and the stream
    kernels' ``kmajor_*`` b read it: N rows of K contiguous bytes whose start, row stride and
    used batch strides are multiples of 16 bytes."""
    t = b.swapaxes(-1, -2)
    return b.size > 0 and _staging(t, True) == AS_IS and cp_async_width(t) == 16


def _k_major_dense(b) -> bool:
    """Whether ``b`` (..., K, N) is held K-major as the dp4a tiles' ``kmajor_*`` b reads it: each
    column's K bytes contiguous, the columns and the used batch dimensions at positive strides."""
    K, N = b.shape[-2:]
    return (b.size > 0 and (K < 2 or b.strides[-2] == b.itemsize) and b.strides[-1] > 0
            and all(st >= 0 for n, st in zip(b.shape[:-2], b.strides[:-2]) if n > 1))


def _staged(x, how: str):
    """A stand-in for the array the kernel reads: the operand or the copy that
    :func:`_stage` will make (same strides, addresses as aligned); a packed b's
    view stands for its bytes as they are or copied (C-order either way)."""
    if isinstance(x, packed.PackedView):
        if how == PADDED:
            return packed.padded(x)
        return x.in_whole_bytes() if how == WHOLE_BYTES else x
    if how == AS_IS:
        return x
    if how == CONTIGUOUS:
        return device.Fresh(x.shape, x.dtype)
    if how == TRANSPOSED:  # (..., K, N) read from a (..., N, K) copy whose rows are padded to 16 bytes
        t = device.Fresh(_padded_shape(device.Fresh(x.shape[:-2] + x.shape[:-3:-1], x.dtype)), x.dtype).strides
        return device.Fresh(x.shape, x.dtype, t[:-2] + t[:-3:-1])
    return device.Fresh(x.shape, x.dtype, device.Fresh(_padded_shape(x), x.dtype).strides)


def _stage(xp, x, how: str, planned):
    if how == AS_IS:
        return x
    y = (xp.ascontiguousarray(x) if how == CONTIGUOUS else
         padded16(xp, x.swapaxes(-1, -2)).swapaxes(-1, -2) if how == TRANSPOSED else padded16(xp, x))
    if y.strides != planned.strides:  # a copy laid out otherwise than planned
        raise AssertionError(f"quantized_matmul: staged strides {y.strides}, planned {planned.strides}")
    return y


def _check_options(variant, splits) -> None:
    """The caller's variant= and splits= (split-K is a tensor-core option)."""
    if variant is None:
        return
    if variant not in VARIANTS:
        raise ValueError(f"quantized_matmul: unknown variant {variant!r}; expected one of {VARIANTS}")
    if splits not in (None, 1) and variant not in TENSOR_CONFIGS:
        raise ValueError(f"quantized_matmul: split-K is a tensor-core option; {variant!r} takes none")


@dataclass(frozen=True)
class _Detail:
    """What quantized_matmul needs beyond the launches to build their arguments."""

    cfg: object
    stage_a: str
    stage_b: str
    direct_out: bool
    batches: tuple        # BatchLaunch records (offsets and batch strides per launch)
    need_rows: bool
    need_cols: bool
    nsplit: int
    k_chunk: int
    k_group: int = 0
    col_splits: tuple = ()  # per batch launch: matmul_col_sums' (splits, k_chunk) (col_sum_splits); empty
    #                         where b's column sums are not split (a K-major b's row sums, per-group sums)
    kmajor: bool = False    # b read K-major (matmul_mma_kmajor.cu; packed: matmul_mma_kmajor4.cu, matmul_dp4a_kmajor4.cu)
    repack_b: bool = False  # a packed b held K-major, repacked to rows (dmlq.gpu.packed.to_rows) first
    groups: int = 0         # mma-grouped: the groups whose row / column sums the pre-passes keep apart


# Kernel type names of the outputs that are not quantized types.
_OUT_NAMES = {"int32": "int", "float32": "float"}


def plan_tiled(op, a, a_zp: bool, b, b_zp: bool, out, *, variant=None, splits=None, k_group=0) -> Plan:
    """The plan of one tiled-kernel product for ``op`` (the output type picks
    the epilogue); ``a_zp`` / ``b_zp``: whether the zero points are given;
    ``k_group``: the length of a block of B scales along K (0: one group);
    ``b`` may be a packed 4-bit b's :class:`dmlq.gpu.packed.PackedView`."""
    if out.size == 0:
        return Plan(op, "empty")
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch_shape = tuple(out.shape[:-2])
    nbatch = math.prod(batch_shape)
    p4 = isinstance(b, packed.PackedView)
    if max(M, N, K) > MAX_DIM:
        raise UnsupportedError(f"{op}: dimensions above {MAX_DIM} are not supported "
                               f"(M={M}, N={N}, K={K})")
    _check_options(variant, splits)
    if variant is None:
        dev = device.info()
        variant = select_variant(M, N, K, nbatch, dev.compute_capability, a.dtype, None,
                                sm_count=dev.sm_count, blocked=k_group > 0, packed=p4, stream=False)
    notes = [f"b: packed {b.dtype_name}, packed in shared memory, unpacked in registers"] if p4 else []
    # A packed b held K-major: the tensor-core kernel reads it as it is on 16 bytes (kmp4), the dp4a
    # tiles at any alignment (kmd); the tensor-core kernel off 16 bytes reads a packed b's rows, so it
    # is repacked first.
    grouped = variant in GROUPED_CONFIGS
    if grouped and out.dtype.kind != "f":
        raise ValueError(f"{op}: variant {variant!r} does not apply (it makes float outputs only: "
                         "matmul_integer_to_float)")
    if grouped and K == 0:
        variant, grouped = "dp4a-wide", False  # no groups: +0.0 (then the bias), the wide kernel's
    on_mma = variant in MMA_CONFIGS or grouped  # the mma.sync kernel (matmul_mma.cu's template)
    kmp4 = (p4 and b.kmajor and on_mma and HAVE_MMA_KMAJOR4 and K > 0
            and packed.kmajor_width(b, device.ptr(b.data)) == 16)
    kmd = p4 and b.kmajor and variant in DP4A_CONFIGS
    repack_b = p4 and b.kmajor and not (kmp4 or kmd)
    b_in = b.data if p4 else b  # (what out must not overlap)
    if repack_b:
        b = b.rows()
    if variant in WGMMA_CONFIGS:
        cc = device.info().compute_capability
        if cc != 90:
            raise ValueError(f"{op}: variant {variant!r} runs on compute capability 9.0 (Hopper) only; this "
                             f"device is {cc // 10}.{cc % 10}: use 'mma-128x128'")
        if p4:
            raise ValueError(f"{op}: variant {variant!r} does not apply to a packed 4-bit b (it takes an 8-bit "
                             "b): use 'mma-128x128'")
    if p4 and on_mma:
        if not HAVE_MMA_PACKED:
            raise ValueError(f"{op}: no tensor-core kernel for a packed 4-bit b here ({MMA_PACKED_SOURCE} "
                             f"absent; got {variant!r})")
        notes[0] = f"b: packed {b.dtype_name}, unpacked from shared memory into the tensor-core fragments"
        if kmp4:
            notes[0] += "; K-major (MatMulNBits' layout), 16-byte copies of its columns" + b.rows_note
    if k_group and variant not in ("dp4a-wide", *GROUPED_CONFIGS):
        raise ValueError(f"{op}: blocked scales along K need the 'dp4a-wide' or 'mma-grouped' variant (got "
                         f"{variant!r})")
    if k_group:
        notes.append(f"groups of {k_group} along K, closed in ascending order")
    if kmd:
        notes[0] += "; K-major (MatMulNBits' layout), its columns' runs interleaved as they are staged" + b.rows_note
    if repack_b:
        notes.append("b: K-major packed bytes repacked to rows first (a device pass over them)")
    if K == 0:
        # acc = 0 exactly; the epilogue still applies mult (0 * Inf is NaN -> zp).
        a_zp = b_zp = False
        if variant in TENSOR_CONFIGS:
            variant = "dp4a-32x32"
        notes.append("K = 0: the dp4a epilogue alone")
    elif K > WIDE_K and not getattr(CONFIGS[variant], "wide", False):
        raise ValueError(f"{op}: variant {variant!r} accumulates in int32 and is "
                         f"exact only for K <= {WIDE_K} (K = {K}); use 'dp4a-wide'")
    cfg = CONFIGS[variant]
    mma = isinstance(cfg, MmaConfig)
    wide = not mma and cfg.wide
    grid_y = -(-M // cfg.bm)
    nsplit, k_chunk = 1, 0
    if mma and not grouped:
        if splits is None:
            splits = split_k(M, N, K, nbatch, device.info().sm_count, cfg)
        nsplit, k_chunk = k_chunks(K, splits, cfg.bk) if splits > 1 else (1, 0)
        grid_y *= nsplit
    elif splits not in (None, 1):  # a selected dp4a variant
        _check_options(variant, splits)
    if grid_y > MAX_GRID_YZ:
        raise UnsupportedError(f"{op}: M = {M} needs {grid_y} row tiles "
                               f"(grid limit {MAX_GRID_YZ}) with {variant}")

    wg = cfg.transposed_b
    # An 8-bit b whose rows are not contiguous but whose columns are, on 16 bytes (x @ w.T of an (N, K)
    # weight): the mma kernel reads it K-major instead of copying it to rows.
    km = kmp4 or (mma and not wg and not p4 and HAVE_MMA_KMAJOR and _staging(b, True) != AS_IS and _k_major16(b))
    # The same on the dp4a tiles, at any alignment (their word path where the columns lie on 4 bytes)
    kmd8 = not (mma or p4) and _staging(b, False) != AS_IS and _k_major_dense(b)
    stage_a = _staging(a, mma)
    if (wg or km or grouped) and (stage_a != AS_IS or cp_async_width(a) != 16):  # these copy 16 bytes only
        stage_a = PADDED
    if wg:  # b read K-major: as it is where it already is (x @ w.T of an (N, K) weight), else a transposed copy
        stage_b = AS_IS if _k_major16(b) else TRANSPOSED
    elif km:
        stage_b = AS_IS
        if not p4:
            notes.append("b: K-major (x @ w.T), 16-byte copies of its columns")
    elif kmd8:
        stage_b = AS_IS
        notes.append("b: K-major (x @ w.T), 4 k of a column a load")
    elif p4 and mma:  # cp.async needs whole-byte rows at aligned addresses, else padded rows
        width = packed.mma_width(b, device.ptr(b.data))
        stage_b = AS_IS if b.size == 0 or width == 16 or (width and not grouped) else PADDED
    elif p4:  # the dp4a tiles read the bytes at the view's element offsets, K-major ones too
        stage_b = AS_IS
    else:
        stage_b = _staging(b, mma)
        if grouped and cp_async_width(_staged(b, stage_b)) != 16:
            stage_b = PADDED
    sa, sb = _staged(a, stage_a), _staged(b, stage_b)
    if p4 and not mma and not packed.contiguous(b.data):
        stage_b = CONTIGUOUS  # the bytes, copied: the kernel reads them at C-order offsets
    for name, how in (("a", stage_a), ("b", stage_b)):
        if how != AS_IS:
            notes.append(f"{name} {how}")
    direct = _direct_out(out, a, b_in)
    target = out if direct else device.Fresh(out.shape, out.dtype)
    if not direct:
        notes.append("out written through a contiguous temporary")

    ta, tb, to = device.dtype_name(a.dtype), b.tag if p4 else device.dtype_name(b.dtype), device.dtype_name(out.dtype)
    to = _OUT_NAMES.get(to, to)
    if wg:
        name = cfg.name(ta, tb, to)
    elif km:
        name = cfg.name(ta, tb if p4 else KMAJOR_TAGS[tb], to, 16)
    elif kmd8:
        name = cfg.name(ta, KMAJOR_TAGS[tb], to)
    elif mma:
        b_width = (16 if stage_b == PADDED else packed.mma_width(b, device.ptr(b.data))) if p4 else cp_async_width(sb)
        name = cfg.name(ta, tb, to, min(cp_async_width(sa), b_width))
    else:
        name = cfg.name(ta, tb, to)
    if mma and name.endswith(", 4>"):
        notes.append("4-byte cp.async staging")
    if nsplit > 1:
        notes.append(f"split-K: {nsplit} splits of {k_chunk}")
    def batches_of(sb):
        return tuple(plan_batches(batch_shape, *(batch_strides(x.shape, x.strides, x.itemsize, batch_shape)
                                                 for x in (sa, sb, target))))
    batches = batches_of(sb)
    if p4 and any(u.offsets[1] % 2 for u in batches):
        # a launch past the first would start mid-byte (K * N odd): its matrices are copied to whole bytes
        if mma:  # not reached: odd rows are padded for the tensor cores, so every matrix starts on a byte
            raise UnsupportedError(f"{op}: a packed b matrix starts mid-byte in a tensor-core launch")
        stage_b, sb = WHOLE_BYTES, b.in_whole_bytes()
        notes.append(f"b {stage_b}")
        batches = batches_of(sb)
    source = DP4A_KMAJOR4_SOURCE if kmd else DP4A_KMAJOR8_SOURCE if kmd8 else PACKED_SOURCE if p4 else DP4A_SOURCE
    main_source = ((MMA_GROUPED_SOURCE if grouped else MMA_KMAJOR4_SOURCE if kmp4 else MMA_PACKED_SOURCE if p4
                    else MMA_KMAJOR_SOURCE if km else MMA_SOURCE) if mma else source)
    smem = (cfg.packed_smem if p4 else cfg.smem) if mma else cfg.smem
    need_rows = b_zp and not wide
    need_cols = a_zp and not wide
    # mma-grouped: the sums of each group apart ([group][matrix][row or column]: k split by groups)
    groups = (-(-K // k_group) if k_group else 1) if grouped else 0
    per, split = (" per group of K", (groups,)) if groups else ("", ())  # (grid y of the row sums)
    if grouped and (need_rows or need_cols):
        notes.append(f"the zero points' terms from {groups} group(s) of sums")
    launches = []
    col_splits = []
    for u in batches:
        nz = u.batch0 * u.batch1
        if need_rows:
            launches.append(Launch(DP4A_SOURCE, f"matmul_row_sums<{ta}>", (min(-(-nz * M // 8), 65535),) + split,
                                   (256,), 0, f"row sums of a{per}, for b's zero point"))
        if need_cols and (wg or km or kmd or kmd8):  # b's column sums are its K-major rows' sums
            launches.append(Launch(PACKED_SOURCE if p4 else DP4A_SOURCE, f"matmul_row_sums<{tb}>",
                                   (min(-(-nz * N // 8), 65535),) + split, (256,), 0,
                                   f"column sums of b{per} (row sums of its K-major rows), for a's zero point"))
        elif need_cols and groups:
            launches.append(Launch(source, f"matmul_col_sums<{tb}>", (-(-N // 128), min(nz, MAX_GRID_YZ), groups),
                                   (256,), 0, f"column sums of b{per}, for a's zero point"))
        elif need_cols:
            col_splits.append(col_sum_splits(N, K, nz, device.info().sm_count))
            cs = col_splits[-1][0]
            launches.append(Launch(source, f"matmul_col_sums<{tb}>",
                                   (-(-N // 128), min(nz, MAX_GRID_YZ), cs), (256,), 0,
                                   "column sums of b, for a's zero point"))
            if cs > 1:
                launches.append(Launch(DP4A_SOURCE, COMBINE, (min(-(-nz * N // 256), COMBINE_GRID),),
                                       (256,), 0, "the column sums' splits added"))
        launches.append(Launch(cfg.source if wg else main_source, name, (-(-N // cfg.bn), grid_y, nz),
                               (cfg.threads,), smem))
        if nsplit > 1:
            # (a K-major b's: the row-major 8-bit b's, matmul_mma.cu's, which reads b's parameters only)
            epi_b = device.dtype_name(b.zp_dtype) if kmp4 else tb
            launches.append(Launch(MMA_SOURCE if km else main_source, f"matmul_splitk_epilogue<{ta}, {epi_b}, {to}>",
                                   (-(-M * N // 256), 1, nz), (256,), 0, "split-K sum and epilogue"))
    detail = _Detail(cfg, stage_a, stage_b, direct, batches, need_rows, need_cols, nsplit, k_chunk, k_group,
                     tuple(col_splits), km or kmd or kmd8, repack_b, groups)
    return Plan(op, variant, tuple(launches), tuple(notes), detail)


def _vector_prep(xp, length, scale, zero_point, zp_dtype):
    """(per_axis flag, prep): ``prep(scale, zero_point)`` gives the kernel's
    contiguous vectors (:func:`_param`), or is None when the arguments already
    are such vectors (decided once, from their geometry: one element each, or
    ``length`` when either is per axis; any shape whose elements are contiguous).
    Either may be None (absent). The kernels read both through one flag, so a
    single value beside a per-axis one is broadcast here on every call: the
    public functions widen one given as a number at plan time instead
    (dmlq.checks.Builder.widen_pair)."""
    per = int(any(v is not None and v.size != 1 for v in (scale, zero_point)))
    n = length if per else 1
    if device.is_vector(scale, np.float32, n) and device.is_vector(zero_point, zp_dtype, n):
        return per, None
    return per, lambda s, z: (_param(xp, s, n, np.float32, cast=True), _param(xp, z, n, zp_dtype))


def batch_rows(v) -> bool:
    """Whether a scale or zero point of a (or of the output) is per batch and row: (..., M, 1)
    with batch dims not all 1 (dmlq.checks.batch_rows)."""
    return v is not None and v.ndim > 2 and any(d != 1 for d in v.shape[:-2])


def _row_prep(xp, M, batch_shape, scale, zero_point, zp_dtype):
    """:func:`_vector_prep` for a's (or the output's) parameters: per tensor or per row as
    there (flag 0 or 1); per batch and row (either one, :func:`batch_rows`) flag 2, both as
    contiguous (matrices, M) tables in the output's flattened batch order, matrix z's rows
    z * M elements on (the launchers offset them per batch launch; no copy where they
    already are that table)."""
    if not (batch_rows(scale) or batch_rows(zero_point)):
        return _vector_prep(xp, M, scale, zero_point, zp_dtype)
    n = math.prod(batch_shape) * M
    if device.is_vector(scale, np.float32, n) and device.is_vector(zero_point, zp_dtype, n):
        return 2, None

    def table(v, dtype):
        if v is None:
            return None
        v = v if v.ndim >= 2 else v.reshape(-1, 1)  # per tensor or row: broadcast to every matrix
        return device.table(v, tuple(batch_shape) + (M, 1), dtype)
    return 2, lambda s, z: (table(s, np.float32), table(z, zp_dtype))


def _quant_args(preps, zero_points):
    """``quant(a_scale, a_zero_point, b_scale, b_zero_point, out_scale,
    out_zero_point)``: the kernels' six scale and zero-point arguments (scales,
    then zero points, NULL for an absent one). Which preps run and which zero
    points are absent is fixed for a runner (``zero_points``: present or not)."""
    has_a, has_b, has_o = zero_points
    if preps == (None, None, None):  # already the kernel's vectors: passed as they are
        def quant(a_s, a_z, b_s, b_z, o_s, o_z):
            return (_or_null(a_s), _or_null(b_s), _or_null(o_s), a_z if has_a else NULL, b_z if has_b else NULL,
                    o_z if has_o else NULL)
        return quant
    identity = lambda s, z: (s, z)  # noqa: E731
    prep_a, prep_b, prep_o = (p or identity for p in preps)

    def quant(a_s, a_z, b_s, b_z, o_s, o_z):
        a_s, a_z = prep_a(a_s, a_z if has_a else None)
        b_s, b_z = prep_b(b_s, b_z if has_b else None)
        o_s, o_z = prep_o(o_s, o_z if has_o else None)
        return (_or_null(a_s), _or_null(b_s), _or_null(o_s), _or_null(a_z), _or_null(b_z), _or_null(o_z))
    return quant


def bind_tiled(plan, a, b, out):
    """``launch(a, b, dst, params)`` for a tiled-kernel plan: stages a and b,
    makes the row/column-sum pre-passes and the main (and split-K) launches;
    ``params(i, first)`` gives batch launch i's scale, zero-point and bias
    arguments (``first``: the index of its first matrix in the flattened
    output batch, for per-matrix parameter tables): the 9 arguments before
    row_sum_a and the 5 after col_sum_b. Every integer argument is fixed here.
    ``b``: as planned (a packed b's PackedView); ``launch`` gets its bytes."""
    d, go = plan.detail, launcher(plan)
    xp, ptr = device.xp(), device.current().ptr  # at call time: never a Fresh stand-in
    i32, i64, u64 = np.int32, np.int64, np.uint64
    M, K = a.shape[-2:]
    N = b.shape[-1]
    repack = (lambda x, _s=b.shape, _r=b.stored[-1]: packed.to_rows(xp, x, _s, _r)) if d.repack_b else None
    if d.repack_b:
        b = b.rows()
    plan_a, plan_b = _staged(a, d.stage_a), _staged(b, d.stage_b)
    target = out if d.direct_out else device.Fresh(out.shape, out.dtype)
    wg = d.cfg.transposed_b or d.kmajor  # b read K-major: N rows of K bytes, ldb bytes apart
    lda, ldb = plan_a.strides[-2] // a.itemsize, plan_b.strides[-1 if wg else -2] // b.itemsize
    ldc = target.strides[-2] // target.itemsize
    zmax = max(u.batch0 * u.batch1 for u in d.batches)
    mma = isinstance(d.cfg, MmaConfig)
    b_shift = int(isinstance(b, packed.PackedView))  # b's element offsets in bytes: halved when packed
    col_stride = zmax * N  # int32 elements between two splits' column sums
    # mma-grouped: each group's sums kept apart (no combine), group g's nz * M (N) of a launch at g
    groups, k_sum = max(d.groups, 1), (d.k_group or K) if d.groups else K
    col_splits = max((cs for cs, _ in d.col_splits), default=1)
    fixed = []  # per batch launch: (offsets, row-sum, column-sum, main and split-K integer arguments, first)
    first = 0
    for i, u in enumerate(d.batches):
        nz = u.batch0 * u.batch1
        a_bs0, a_bs1, b_bs0, b_bs1, c_bs0, c_bs1 = u.strides
        cs, chunk = d.col_splits[i] if d.col_splits else (1, K)
        group_at = (i64(nz * N) if d.groups else i64(0))  # the groups' sums apart (row sums of a K-major b)
        # (the row sums of a K-major b, or mma-grouped's column sums: straight to their table, no combine)
        cols = ((i32(N), i32(K), i32(nz), i32(u.batch1), i64(b_bs0), i64(b_bs1), i64(ldb), i32(k_sum), group_at, 1,
                 None) if wg or d.groups else
                (i32(N), i32(K), i32(nz), i32(u.batch1), i64(b_bs0), i64(b_bs1), i64(ldb), i32(chunk),
                 i64(col_stride), cs, (i64(nz * N), i32(cs), i64(col_stride))))
        fixed.append((u.offsets,
                      (i32(M), i32(K), i32(nz), i32(u.batch1), i64(a_bs0), i64(a_bs1), i64(lda), i32(k_sum),
                       i64(nz * M if d.groups else 0)),
                      cols,
                      (i32(M), i32(N), i32(K), i32(u.batch1), i64(a_bs0), i64(a_bs1), i64(b_bs0),
                       i64(b_bs1), i64(c_bs0), i64(c_bs1), i64(lda), i64(ldb), i64(ldc)),
                      nz * M * N,
                      (i32(d.nsplit),), (i32(M), i32(N), i32(K), i32(u.batch1), i64(c_bs0), i64(c_bs1),
                                         i64(ldc)), first))
        first += nz
    split = (i32(d.nsplit), i32(d.k_chunk))
    need_rows, need_cols, nsplit = d.need_rows, d.need_cols, d.nsplit
    # Row and column sums share one int32 temporary: rows first, columns 16-byte aligned after,
    # then the column sums' splits where K is split (col_stride elements each).
    cols_at = -(-groups * zmax * M * 4 // 16) * 16 if need_rows else 0
    parts_at = cols_at + -(-groups * col_stride * 4 // 16) * 16
    sums_bytes = (parts_at + (col_splits * col_stride * 4 if col_splits > 1 else 0) if need_cols
                  else cols_at)
    take = device.workspace() if 0 < sums_bytes <= device.WORKSPACE_MAX else None
    whole = len(fixed) == 1 and fixed[0][0] == (0, 0, 0)  # one launch at the arrays' own addresses
    stage_a = None if d.stage_a == AS_IS else lambda x: _stage(xp, x, d.stage_a, plan_a)
    stage_b = None if d.stage_b == AS_IS else lambda x: _stage(xp, x, d.stage_b, plan_b)
    if b_shift and d.stage_b == PADDED:
        stage_b = lambda x: packed.pad_rows(xp, x, b.shape)  # noqa: E731
    elif b_shift and d.stage_b == WHOLE_BYTES:
        stage_b = lambda x: packed.matrices_in_whole_bytes(xp, x, b.stored)  # noqa: E731
    elif b_shift and d.stage_b != AS_IS:
        stage_b = xp.ascontiguousarray

    def launch(a, b, dst, params):
        if stage_a is not None:
            a = stage_a(a)
        if repack is not None:
            b = repack(b)
        if stage_b is not None:
            b = stage_b(b)
        if take is not None:
            sums = take(sums_bytes)
        elif sums_bytes:
            tmp = xp.empty(sums_bytes, np.uint8)  # kept alive until the launches are made
            sums = ptr(tmp)
        row_sums = u64(sums) if need_rows else NULL
        col_sums = u64(sums + cols_at) if need_cols else NULL
        col_parts = u64(sums + parts_at) if need_cols and col_splits > 1 else NULL
        if not whole:
            pa, pb, pc = ptr(a), ptr(b), ptr(dst)
            isz = dst.itemsize
        arglists = []
        for i, ((oa, ob, oc), rows, cols, main, size, ns, epi, first) in enumerate(fixed):
            head, tail = params(i, first)
            quant = (*head, row_sums, col_sums, *tail)
            if whole:  # arrays are passed as their addresses
                A, B, C = a, b, dst
            else:  # offsets in bytes (a and b: itemsize 1)
                A, B, C = u64(pa + oa), u64(pb + (ob >> b_shift)), u64(pc + oc * isz)
            if need_rows:
                arglists.append((A, *rows, row_sums))
            if need_cols:
                *cols_args, cs, combine = cols
                arglists.append((B, *cols_args, col_parts if cs > 1 else col_sums))
                if cs > 1:
                    arglists.append((col_parts, *combine, col_sums))
            if not mma:
                arglists.append((A, B, C, *main, *quant))
                continue
            partial = xp.empty(nsplit * size, np.int32) if nsplit > 1 else NULL
            arglists.append((A, B, C, *main, *quant, *split, partial))
            if nsplit > 1:
                arglists.append((partial, *ns, C, *epi, *quant))
        go(arglists)

    return launch


def per_batch_table(v, batch_shape, n, dtype):
    """A per-batch, per-column B parameter (b's batch shape, then (1, N)) as a
    contiguous (matrices, N) table in the output's flattened batch order."""
    return device.table(v, tuple(batch_shape) + (1, n), dtype)


def offset(v, elements):
    """v's device address advanced by ``elements`` of its type (v itself at 0)."""
    if v is NULL or elements == 0:
        return v
    return np.uint64(device.current().ptr(v) + elements * v.itemsize)
