"""One small case per kernel variant: the first thing a GPU session runs (the tensor-core
fragments have only met the host emulation), and the reduced case list the sanitizers run.

A *variant* here is a kernel instantiation of a source's KERNELS table (dmlq.gpu.loader.registry)
with its 8-bit type arguments folded (int8/uint8 -> q8, packed_int4/packed_uint4 -> q4) and, for
the element-wise and quantized-type sources, the float-side types folded too: the tile
configuration, the epilogue (requantized, int32, float32, float16), a packed b, the cp.async width,
the split-K epilogue, the stream kernels' rows per launch, each ONNX type code. :func:`variant_keys`
derives them from the tables, so a kernel added to a table is a variant with no case until one is
written here (tests/test_gpu_variants.py fails in CI until then).

Each case is ``fn(xp) -> [(what, got, want)]``: dmlq.gpu's launchers (variants forced where the
launcher takes ``variant=``, else sizes that selection sends there) on arrays of ``xp`` (CuPy, or
the cupy stand-in in CI), outputs poisoned, against dmlq.reference (and, for the tensor-core
known-answer cases, values worked out by hand). ``claims`` are the plan variants the case must run.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import ml_dtypes
import numpy as np

import dmlq
from dmlq import reference as R
from dmlq.gpu import avgpool, elementwise, intmm, intmm_tiled, loader, matmul, packed, qkernels, qmm, qmm_stream
from dmlq.gpu.matmul import plan_tiled
from dmlq.packing import held

from conftest import code_bytes  # tests/ is on sys.path under pytest, which alone imports this module

I8, U8, I32, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
I2, U2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)
BF16 = np.dtype(ml_dtypes.bfloat16)

# Kernels no small case here reaches: (source, folded name) -> why. Their small cases are
# tests/test_gpu_elementwise.py::test_wide_index_kernels (64-bit index math forced on small
# inputs), which the session runs beside these (quick, correct and the sanitizers), and the
# tests past 2**31 elements of its large stage (tests/test_gpu_session.py checks both).
LARGE_ONLY = {
    ("elementwise.cu", "quantize_strided<true>"): "64-bit offsets: a view spanning more than 2**31 elements",
    ("elementwise.cu", "dequantize_strided<true>"): "64-bit offsets: a view spanning more than 2**31 elements",
    ("elementwise.cu", "add_strided<true>"): "64-bit offsets: a view spanning more than 2**31 elements",
}
LARGE_ONLY_CASES = ("tests/test_gpu_elementwise.py::test_wide_index_kernels",)


def fold(source: str, name: str) -> str:
    """A kernel name expression with its 8-bit types folded (see the module docstring)."""
    template, _, rest = name.partition("<")
    args = [a.strip() for a in rest.rstrip(">").split(",")] if rest else []
    args = ["q8" if a in ("int8", "uint8") else "q4" if a in ("packed_int4", "packed_uint4") else a for a in args]
    if source == elementwise.SOURCE:
        args = [a for a in args if a in ("true", "false")]
    elif source == qkernels.SOURCE and template == "qt_quantize":
        args = args[1:]
    elif source == qkernels.SOURCE and template == "qt_dequantize":
        args = args[:1]
    return f"{template}<{','.join(args)}>"


def variant_keys() -> set:
    """Every (source, folded kernel name) of this install's kernel tables."""
    return {(src, fold(src, n)) for src, names in loader.registry().items() for n in names}


def launched_keys(plans) -> set:
    return {(launch.source, fold(launch.source, launch.kernel)) for p in plans for launch in p.launches}


class Case(NamedTuple):
    name: str
    claims: tuple          # plan variants the case must run
    fn: Callable           # fn(xp) -> [(what, got, want)]


CASES: list = []


def case(name, *claims):
    def add(fn):
        CASES.append(Case(name, claims, fn))
        return fn
    return add


# ----------------------------------------------------------------- helpers

def _rng(name: str):
    return np.random.default_rng(sum(map(ord, name)) * 7919)


def _ints(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype in (I4, U4, I2, U2):
        lo, hi = int(ml_dtypes.iinfo(dtype).min), int(ml_dtypes.iinfo(dtype).max)
    else:
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def _poisoned(xp, shape, dtype):
    out = xp.empty(shape, dtype)
    if out.size:
        out.reshape(-1).view(np.uint8)[...] = 0xA5
    return out


def _get(v):
    return v.get() if hasattr(v, "get") else np.asarray(v)


def _dev(xp, v):
    return xp.asarray(v) if isinstance(v, np.ndarray) else v


def _kmajor_dev(xp, b):
    """An 8-bit b (K, N) on the device held K-major (the transposed view of an (N, K) weight whose
    rows are padded to 16 bytes), as the stream kernels' kmajor_* b reads it."""
    K, N = b.shape
    held = np.zeros((N, -(-K // 16) * 16), b.dtype)
    held[:, :K] = b.T
    return xp.asarray(held)[:, :K].T


def _packed_b(b, kmajor=False):
    """A 4-bit b as the kernels take it: dmlq.pack's bytes, b_packed, the zero point's dtype;
    ``kmajor``: the bytes of its (..., N, K) transpose (dmlq.pack(w).mT, MatMulNBits' layout); an
    int: those of its (..., N, kmajor) transpose, each row past K holding code 5 (MatMulNBits' rows
    padded to whole blocks: dmlq.Packed(...).mT[..., :K, :])."""
    if not kmajor:
        return dmlq.pack(b).data, (b.dtype.name, b.shape, True, False), (I8 if b.dtype == I4 else U8)
    K = b.shape[-2]
    row = K if kmajor is True else int(kmajor)
    w = np.full(b.shape[:-2] + (b.shape[-1], row), 5, b.dtype)
    w[..., :K] = b.swapaxes(-1, -2)
    return dmlq.pack(w).data, (b.dtype.name, b.shape, True, True, row), (I8 if b.dtype == I4 else U8)


def _matmul_operands(rng, M, K, N, ta, tb, batch=()):
    a = _ints(rng, ta, batch + (M, K))
    b = _ints(rng, tb, batch + (K, N))
    return a, b


# ----------------------------------------------------------------- quantized_matmul, int8 b

def _qmm(xp, a, b, to, *, variant=None, splits=None, per_axis=False, per_batch=False, kmajor=False):
    rng = _rng(f"qmm{a.shape}{b.shape}")
    M, N = a.shape[-2], b.shape[-1]
    packed = b.dtype in (I4, U4)
    b_zp_dtype = (I8 if b.dtype == I4 else U8) if packed else b.dtype
    a_s = rng.uniform(0.01, 0.1, (M, 1) if per_axis else (1,)).astype(F32)
    bshape = b.shape[:-2] + (1, N) if per_batch else (1, N) if per_axis else (1,)
    b_s = rng.uniform(0.01, 0.1, bshape).astype(F32)
    a_zp = _ints(rng, a.dtype, a_s.shape)
    b_zp = _ints(rng, b.dtype, bshape).astype(b_zp_dtype)
    o_s = np.float32([np.sqrt(a.shape[-1]) * 0.01])
    o_zp = _ints(rng, to, (1,))
    out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (M, N)
    args = (a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp)
    want = R.quantized_matmul(*args, out=np.empty(out_shape, to))
    out = _poisoned(xp, out_shape, to)
    if packed:
        data, b_packed, _ = _packed_b(b, kmajor)
        dargs = [_dev(xp, v) for v in (a, a_s, a_zp, data, b_s, b_zp, o_s, o_zp)]
        got = qmm.quantized_matmul(*dargs, out, b_packed, variant=variant, splits=splits)
    else:
        dargs = [_dev(xp, v) for v in args]
        if kmajor:
            dargs[3] = _kmajor_dev(xp, b)
        got = qmm.quantized_matmul(*dargs, out, variant=variant, splits=splits)
    return [(f"quantized_matmul {a.dtype}x{b.dtype}->{to} {a.shape}@{b.shape}{' K-major' if kmajor else ''} "
             f"{variant or 'selected'}", _get(got), want)]


def _known_answer_mma(xp, tb=I8, variant="mma-128x128", kmajor=False):
    """The tensor-core kernel on matrices whose product is known by hand (scales 1, zero
    points 0, out_scale 1: out = clamp(a @ b)): identity, ones, one nonzero element;
    ``kmajor``: b held K-major (x @ w.T; a packed one: dmlq.pack(w).mT)."""
    M = K = N = 128
    results = []
    eye = np.eye(M, K, dtype=I8)
    b = _ints(np.random.default_rng(5), tb, (K, N))
    if tb == I4:
        b = np.clip(b.astype(np.int16), -8, 7).astype(I4)
    cases = {"identity": (eye, b, b.astype(np.int64)),
             "ones": (np.ones((M, K), I8), np.ones((K, N), tb), np.full((M, N), K, np.int64))}
    a1, b1 = np.zeros((M, K), I8), np.zeros((K, N), tb)
    a1[37, 101], b1[101, 5] = 3, 5
    w1 = np.zeros((M, N), np.int64)
    w1[37, 5] = 15
    cases["one nonzero"] = (a1, b1, w1)
    one, zero = np.float32([1.0]), np.int8([0])
    for label, (a, bb, exact) in cases.items():
        want = np.clip(exact, -128, 127).astype(I8)
        ref = R.quantized_matmul(a, one, None, bb, one, None, one, zero, out=np.empty((M, N), I8))
        assert ref.tobytes() == want.tobytes(), f"the reference disagrees with the hand value ({label})"
        out = _poisoned(xp, (M, N), I8)
        if tb == I4:
            data, b_packed, _ = _packed_b(bb, kmajor)
            got = qmm.quantized_matmul(xp.asarray(a), one, None, xp.asarray(data), one, None, one, zero, out,
                                       b_packed, variant="mma-128x128")
        else:
            got = qmm.quantized_matmul(xp.asarray(a), one, None, _kmajor_dev(xp, bb) if kmajor else xp.asarray(bb),
                                       one, None, one, zero, out, variant=variant)
        results.append((f"{variant} known answer: {label} (b {tb}{', K-major' if kmajor else ''})", _get(got), want))
    return results


if matmul.HAVE_MMA:
    case("mma known answers: identity, ones, one nonzero", "mma-128x128")(_known_answer_mma)
if matmul.HAVE_MMA_PACKED:
    case("mma known answers, packed int4 b", "mma-128x128")(lambda xp: _known_answer_mma(xp, I4))
if matmul.HAVE_MMA_KMAJOR:
    case("mma known answers, K-major int8 b (x @ w.T)", "mma-128x128")(lambda xp: _known_answer_mma(xp, kmajor=True))
if matmul.HAVE_MMA_KMAJOR4:
    case("mma known answers, K-major packed int4 b (MatMulNBits' layout)", "mma-128x128")(
        lambda xp: _known_answer_mma(xp, I4, kmajor=True))
if matmul.HAVE_WGMMA:  # (a device of compute capability 9.0: the stand-in's H100, a GPU session's H100/H200)
    for _v in matmul.WGMMA_CONFIGS:
        case(f"{_v} known answers: identity, ones, one nonzero", _v)(
            lambda xp, _v=_v: _known_answer_mma(xp, I8, _v))

# aligned rows (16-byte cp.async), ragged ones (4-byte), a batch with per-batch b parameters
_SHAPES = {"aligned": (64, 128, 64), "ragged": (37, 70, 45)}


def _qmm_variant(variant, b_types):
    def fn(xp):
        rng = _rng(variant)
        results = []
        for i, (label, (M, K, N)) in enumerate(_SHAPES.items()):
            for tb in b_types:
                ta, to = (I8, U8) if i % 2 else (U8, I8)
                a, b = _matmul_operands(rng, M, K, N, ta, tb)
                results += _qmm(xp, a, b, to, variant=variant, per_axis=bool(i))
        a, b = _matmul_operands(rng, 19, 40, 33, I8, b_types[-1], batch=(2,))
        results += _qmm(xp, a, b, I8, variant=variant, per_batch=True)
        if variant in matmul.TENSOR_CONFIGS:
            a, b = _matmul_operands(rng, 40, 1000, 72, I8, b_types[-1])
            results += _qmm(xp, a, b, U8, variant=variant, splits=3)
        if variant != "dp4a-wide":  # one block of columns, 2048 rows: b's column sums in 4 splits of K, added
            a, b = _matmul_operands(rng, 8, 2048, 40, U8, b_types[-1])
            results += _qmm(xp, a, b, I8, variant=variant)
        return results
    return fn


for _v in (v for v in matmul.VARIANTS if v in matmul.QMM_VARIANTS):
    case(f"quantized_matmul {_v}", _v)(_qmm_variant(_v, (I8,)))
    if _v not in matmul.TENSOR_CONFIGS or (_v in matmul.MMA_CONFIGS and matmul.HAVE_MMA_PACKED):
        case(f"quantized_matmul {_v}, packed b", _v)(_qmm_variant(_v, (I4, U4)))


def _qmm_stream(M, variant):
    def fn(xp):
        rng = _rng(variant)
        results = []
        # the 16-byte path; the nibble (byte) path (odd N); a long K (2048 rows of b: 32 stages,
        # enough for a split of K where the kernel splits it to fill the GPU); packed and 8-bit b
        for tb, (K, N) in ((I4, (96, 64)), (U4, (37, 33)), (I4, (2048, 64)), (I8, (96, 64)), (U8, (37, 33)),
                           (I8, (2048, 48))):
            a, b = _matmul_operands(rng, M, K, N, U8 if tb in (I4, I8) else I8, tb)
            results += _qmm(xp, a, b, I8 if tb in (I4, I8) else U8, per_axis=tb in (U4, U8))
        # b held K-major (x @ w.T; a packed one: MatMulNBits' layout, its 16-byte and nibble paths)
        for tb, (K, N) in ((I8, (96, 64)), (U8, (37, 33)), (I4, (96, 64)), (U4, (37, 33))):
            a, b = _matmul_operands(rng, M, K, N, U8 if tb in (I4, I8) else I8, tb)
            results += _qmm(xp, a, b, I8 if tb in (I4, I8) else U8, per_axis=tb in (U4, U8), kmajor=True)
        return results
    return fn


for _v, _rows in matmul.STREAM_M.items():
    case(f"quantized_matmul {_v} (packed and 8-bit b, M = {_rows})", _v)(_qmm_stream(_rows, _v))


# ----------------------------------------------------------------- matmul_integer(_to_float)

def _intmm(xp, a, b, out_dtype, *, variant=None, splits=None, block_size=None, per_batch=False, tiled=False,
           kmajor=False):
    """matmul_integer (int32 out) or matmul_integer_to_float (float out); ``tiled``: the
    tiled kernels' planner with ``variant`` forced (dmlq.gpu.intmm_tiled), else selection."""
    rng = _rng(f"intmm{a.shape}{b.shape}{out_dtype}")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    packed = b.dtype in (I4, U4)
    rows = 1 if block_size is None else -(-K // block_size)
    bshape = (b.shape[:-2] if per_batch else ()) + (rows, N)
    a_zp = _ints(rng, a.dtype, (M, 1))
    b_zp = _ints(rng, b.dtype, bshape)
    out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (M, N)
    data, b_packed, zp_dtype = _packed_b(b, kmajor) if packed else (b, None, b.dtype)
    b_zp_k = b_zp.astype(zp_dtype)
    out = _poisoned(xp, out_shape, out_dtype)
    d = {k: _dev(xp, v) for k, v in dict(a=a, a_zp=a_zp, b=data, b_zp=b_zp_k).items()}
    if kmajor and not packed:  # an 8-bit b held K-major (x @ w.T)
        d["b"] = _kmajor_dev(xp, b)
    what = f"{'int' if out_dtype == I32 else 'float'} {a.dtype}x{b.dtype}->{out_dtype} {a.shape}@{b.shape}" \
           f"{' K-major' if kmajor else ''} " \
           f"{variant or 'selected'}{f' block {block_size}' if block_size else ''}"
    if out_dtype == I32:
        want = R.matmul_integer(a, a_zp, b, b_zp, out=np.empty(out_shape, I32))
        if tiled:
            view = intmm_tiled._check("matmul_integer", d["a"], d["b"], b_packed)
            plan = plan_tiled("matmul_integer", d["a"], True, view, True, out, variant=variant, splits=splits)
            intmm_tiled._bind(plan, d["a"], d["b"], out, b_packed, None, d["a_zp"], None, d["b_zp"], None)(
                d["a"], d["a_zp"], d["b"], d["b_zp"], out)
        else:
            intmm.matmul_integer(d["a"], d["a_zp"], d["b"], d["b_zp"], out, b_packed)
        return [(what, _get(out), want)]
    a_s = rng.uniform(0.01, 0.1, (M, 1)).astype(F32)
    b_s = rng.uniform(0.01, 0.1, bshape).astype(F16 if out_dtype == F16 else F32)
    bias = rng.uniform(-5, 5, (N,)).astype(F32)
    want = R.matmul_integer_to_float(a, a_s, a_zp, b, b_s, b_zp, bias, out=np.empty(out_shape, out_dtype),
                                     block_size=block_size)
    fargs = (d["a"], xp.asarray(a_s), d["a_zp"], d["b"], xp.asarray(b_s), d["b_zp"], xp.asarray(bias))
    if tiled:
        view = intmm_tiled._check("matmul_integer_to_float", d["a"], d["b"], b_packed)
        plan = plan_tiled("matmul_integer_to_float", d["a"], True, view, True, out, variant=variant, splits=splits,
                          k_group=intmm_tiled._k_group("matmul_integer_to_float", K, block_size))
        intmm_tiled._bind(plan, d["a"], d["b"], out, b_packed, *fargs[1:3], *fargs[4:])(*fargs, out)
    else:
        intmm.matmul_integer_to_float(*fargs, out, block_size, b_packed)
    return [(what, _get(out), want)]


def _intmm_tiled(variant, b_types):
    # bfloat16 out where the kernels have it: the tensor-core tile of an 8-bit b (matmul_configs.BF16_MMA)
    outs = (I32, F32, F16) + ((BF16,) if variant in matmul.MMA_CONFIGS and b_types[0] in (I8, U8) else ())

    def fn(xp):
        rng = _rng("tiled" + variant)
        results = []
        for i, (M, K, N) in enumerate(_SHAPES.values()):
            for tb in b_types:
                a, b = _matmul_operands(rng, M, K, N, (U8, I8)[i % 2], tb)
                for to in outs if K % 16 == 0 else outs[:3]:  # (bfloat16: the 16-byte copies' tile only)
                    results += _intmm(xp, a, b, to, variant=variant, tiled=True)
        a, b = _matmul_operands(rng, 19, 40, 33, I8, b_types[-1], batch=(2,))
        results += _intmm(xp, a, b, F32, variant=variant, tiled=True, per_batch=True)
        if b_types[-1] == U4:  # a packed b held K-major (the tensor cores at K = 40: repacked to rows first)
            results += _intmm(xp, a, b, I32, variant=variant, tiled=True, kmajor=True)
        if variant == "dp4a-wide":   # blocked scales along K: groups closed in ascending order
            a, b = _matmul_operands(rng, 20, 100, 24, U8, b_types[-1])
            results += _intmm(xp, a, b, F16, variant=variant, tiled=True, block_size=32)
        if variant in matmul.TENSOR_CONFIGS:
            a, b = _matmul_operands(rng, 40, 1000, 72, I8, b_types[-1])
            for to in (I32, F32, F16):
                results += _intmm(xp, a, b, to, variant=variant, tiled=True, splits=3)
            if BF16 in outs:  # (K and N on 16 bytes: the 16-byte copies' tile)
                a, b = _matmul_operands(rng, 40, 1024, 64, I8, b_types[-1])
                results += _intmm(xp, a, b, BF16, variant=variant, tiled=True, splits=3)
        return results
    return fn


for _v in matmul.VARIANTS:
    if _v in matmul.GROUPED_CONFIGS:  # float outputs with blocked scales only: _mma_grouped
        continue
    case(f"matmul_integer(_to_float) {_v}", _v)(_intmm_tiled(_v, (I8,)))
    if _v not in matmul.TENSOR_CONFIGS or (_v in matmul.MMA_CONFIGS and matmul.HAVE_MMA_PACKED):
        case(f"matmul_integer(_to_float) {_v}, packed b", _v)(_intmm_tiled(_v, (I4, U4)))


def _mma_grouped(xp):
    """Blocked scales along K on the tensor cores (mma-grouped, matmul_mma_grouped.cu): every b the
    tile reads (8-bit and packed 4-bit, row-major and K-major), both a types, float32 and float16
    out, groups of 32 and 96 (96 closed inside a 64-deep tile), a ragged last group, a batch with
    per-batch blocked parameters; zero points on both sides (per-group row and column sums)."""
    rng = _rng("mma grouped")
    results = []
    for i, tb in enumerate((I8, U8, I4, U4)):
        for kmajor in (False, True):
            a, b = _matmul_operands(rng, 70, 320, 136, (U8, I8)[i % 2], tb)
            for to in (F32, F16):
                results += _intmm(xp, a, b, to, variant="mma-grouped", tiled=True, block_size=(32, 96)[kmajor],
                                  kmajor=kmajor)
    a, b = _matmul_operands(rng, 40, 256, 130, I8, U4, batch=(2,))
    results += _intmm(xp, a, b, F32, variant="mma-grouped", tiled=True, block_size=64, per_batch=True)
    return results


if matmul.HAVE_MMA_GROUPED:
    case("matmul_integer_to_float mma-grouped, blocked scales on the tensor cores, every b", "mma-grouped")(
        _mma_grouped)


def _dp4a_kmajor(variant, b_types):
    """b held K-major on a dp4a tile: a packed 4-bit one (dmlq.pack(w).mT, matmul_dp4a_kmajor4.cu:
    16-bit runs where aligned, the nibble path on the ragged shapes, codes past K masked) or an
    8-bit one (x @ w.T, matmul_dp4a_kmajor.cu: a column's 4 k a word where aligned, A's windows on
    the ragged shapes); every a, b and output type; blocked scales on dp4a-wide."""
    def fn(xp):
        rng = _rng(f"dp4a kmajor {b_types} {variant}")
        results = []
        for i, (M, K, N) in enumerate(_SHAPES.values()):
            for ta in (U8, I8):
                for tb in b_types:
                    a, b = _matmul_operands(rng, M, K, N, ta, tb)
                    for to in ((I8, U8) if i == 0 else ()):
                        results += _qmm(xp, a, b, to, variant=variant, per_axis=ta == I8, kmajor=True)
                    for to in (I32, F32, F16):
                        results += _intmm(xp, a, b, to, variant=variant, tiled=True, kmajor=True)
        if variant == "dp4a-wide":
            a, b = _matmul_operands(rng, 20, 100, 24, U8, b_types[0])
            results += _intmm(xp, a, b, F16, variant=variant, tiled=True, block_size=32, kmajor=True)
        return results
    return fn


for _v in matmul.DP4A_CONFIGS:
    case(f"matmul (all three operators) {_v}, K-major packed 4-bit b", _v)(_dp4a_kmajor(_v, (I4, U4)))
    case(f"matmul (all three operators) {_v}, K-major 8-bit b", _v)(_dp4a_kmajor(_v, (I8, U8)))


def _mma_kmajor(b_types, shapes, split_shape):
    """b held K-major on the tensor cores: an 8-bit b (x @ w.T, matmul_mma_kmajor.cu) or a packed
    4-bit one (dmlq.pack(w).mT, matmul_mma_kmajor4.cu, K on 32 elements): every output type, both
    b types, aligned and ragged shapes (a padded to 16 bytes), split K; a's zero point takes b's
    column sums from its K-major rows (and bfloat16 out for an 8-bit b: matmul_configs.BF16_MMA)."""
    outs = (I32, F32, F16) + ((BF16,) if b_types[0] in (I8, U8) else ())

    def fn(xp):
        rng = _rng(f"mma kmajor {b_types}")
        results = []
        for i, (M, K, N) in enumerate(shapes):
            for tb in b_types:
                a, b = _matmul_operands(rng, M, K, N, (U8, I8)[i % 2], tb)
                results += _qmm(xp, a, b, (I8, U8)[i % 2], variant="mma-128x128", per_axis=bool(i), kmajor=True)
                for to in outs:
                    results += _intmm(xp, a, b, to, variant="mma-128x128", tiled=True, kmajor=True)
        a, b = _matmul_operands(rng, *split_shape, I8, b_types[-1])
        results += _qmm(xp, a, b, U8, variant="mma-128x128", splits=3, kmajor=True)
        results += _intmm(xp, a, b, F16, variant="mma-128x128", tiled=True, splits=3, kmajor=True)
        return results
    return fn


if matmul.HAVE_MMA_KMAJOR:
    case("matmul (all three operators) mma-128x128, K-major 8-bit b", "mma-128x128")(
        _mma_kmajor((I8, U8), _SHAPES.values(), (40, 1000, 72)))
if matmul.HAVE_MMA_KMAJOR4:
    case("matmul (all three operators) mma-128x128, K-major packed 4-bit b", "mma-128x128")(
        _mma_kmajor((I4, U4), ((64, 128, 64), (37, 96, 45)), (40, 1024, 72)))


def _kmajor4_rows(xp):
    """MatMulNBits' bytes where K (100) is not a multiple of its block size (32): b held K-major in
    rows of 128 elements (code 5 past K). The tensor-core tile reads them as it is (K off 32, its
    columns on 32) in all three operators; dp4a-wide and, at M = 1, the grouped stream kernel with
    blocked scales."""
    rng = _rng("kmajor4 rows")
    results = []
    for ta, tb in ((U8, I4), (I8, U4)):
        a, b = _matmul_operands(rng, 64, 100, 72, ta, tb)
        results += _qmm(xp, a, b, I8, variant="mma-128x128", per_axis=True, kmajor=128)
        for to in (I32, F32, F16):
            results += _intmm(xp, a, b, to, variant="mma-128x128", tiled=True, kmajor=128)
        a, b = _matmul_operands(rng, 20, 100, 24, ta, tb)
        results += _intmm(xp, a, b, F16, variant="dp4a-wide", tiled=True, block_size=32, kmajor=128)
        a, b = _matmul_operands(rng, 1, 100, 40, ta, tb)
        results += _intmm(xp, a, b, F32, block_size=32, kmajor=128)
    return results


if matmul.HAVE_MMA_KMAJOR4:
    case("matmul, K-major packed 4-bit b in rows longer than K (MatMulNBits, K off the block size)",
         "mma-128x128", "dp4a-wide")(_kmajor4_rows)


def _intmm_grouped(M, variant):
    """matmul_integer_to_float with a packed or an 8-bit b and groups of a multiple of 32 at M <= 16: the
    grouped stream kernel and its finish pass (a ragged last group; two groups a stage; groups of
    160 straddling the kernel's 64-row stages; a long K with few columns, which splits K; groups
    of 48 and 33, not a multiple of 32: one chunk of K per group), in the shapes whose workspace
    selection allows at this M (qmm_stream.work_fits)."""
    def fn(xp):
        rng = _rng(variant)
        results = []
        shapes = [(I4, (100, 64, 32)), (U4, (700, 33, 160)), (I4, (600, 64, 256)), (U4, (4096, 8, 128)),
                  (I8, (700, 33, 160)), (U8, (600, 64, 256)), (U4, (200, 70, 48)), (I8, (200, 33, 33))]
        for tb, (K, N, block) in (c for c in shapes if qmm_stream.work_fits(M, c[1][0], c[1][2],
                                                                              4 if c[0] in (I4, U4) else 8)):
            a, b = _matmul_operands(rng, M, K, N, U8 if tb in (I4, I8) else I8, tb)
            for to in (F32, F16):
                results += _intmm(xp, a, b, to, block_size=block)
        # a packed b held K-major (MatMulNBits' layout): groups of 32 and of 48 (one chunk per group)
        for tb, (K, N, block) in ((I4, (256, 64, 32)), (U4, (200, 70, 48))):
            if qmm_stream.work_fits(M, K, block):
                a, b = _matmul_operands(rng, M, K, N, U8 if tb == I4 else I8, tb)
                results += _intmm(xp, a, b, F16, block_size=block, kmajor=True)
        a, b = _matmul_operands(rng, M, 512, 9, I8, U4, batch=(2,))
        results += _intmm(xp, a, b, F32, per_batch=True, block_size=128)
        return results
    return fn


for _v, _rows in matmul.STREAM_M.items():
    _g = _v.replace("stream", qmm_stream.GROUPED)
    case(f"matmul_integer_to_float {_g} (packed b, M = {_rows}, groups of 32-256, 33 and 48)", _g)(
        _intmm_grouped(_rows, _g))


def _intmm_sums(M):
    """matmul_integer and matmul_integer_to_float (one group of scales) with a packed b at M <= 16:
    the grouped stream kernel with each chunk of K its own group and its finish pass (int32, float32
    and float16 out; a long K with few columns, which splits K; per-batch b parameters)."""
    def fn(xp):
        rng = _rng(f"sums{M}")
        results = []
        for tb, (K, N) in ((I4, (100, 64)), (U4, (700, 33)), (I4, (3000, 8)), (I8, (100, 64)), (U8, (700, 33))):
            a, b = _matmul_operands(rng, M, K, N, U8 if tb in (I4, I8) else I8, tb)
            for to in (I32, F32, F16):
                results += _intmm(xp, a, b, to)
        # b held K-major (x @ w.T; a packed one: MatMulNBits' layout)
        for tb, (K, N) in ((I8, (100, 64)), (U8, (70, 33)), (I4, (128, 64)), (U4, (70, 33))):
            a, b = _matmul_operands(rng, M, K, N, U8 if tb in (I4, I8) else I8, tb)
            for to in (I32, F16):
                results += _intmm(xp, a, b, to, kmajor=True)
        a, b = _matmul_operands(rng, M, 512, 9, I8, U4, batch=(2,))
        results += _intmm(xp, a, b, F32, per_batch=True)
        a, b = _matmul_operands(rng, M, 100, 64, U8, I4)  # a bfloat16 out, written by the finish pass
        results += _intmm(xp, a, b, BF16)
        return results
    return fn


for _v, _rows in matmul.STREAM_M.items():
    case(f"matmul_integer(_to_float) {_v} (packed and 8-bit b, M = {_rows}, one group of scales)", _v)(
        _intmm_sums(_rows))


def _intmm_stream(M, variant, block_size):
    """matmul_integer_to_float with groups the tiled kernels cannot close (block_size not a
    multiple of 32) where the grouped stream kernel does not take them either: past M = 16,
    groups whose workspace would pass its rule (1 row at M >= 4; a packed b's 1 row at M = 1),
    and at M = 1 an 8-bit b's groups of more than 32768 rows (its int32 group sums would wrap):
    the stream kernels' only calls."""
    long_8bit = M == 1  # an 8-bit b's groups fit the grouped kernel's rule at M = 1 whatever their length
    def fn(xp):
        rng = _rng(variant + str(block_size))
        results = []
        for tb in (I8, U8, I4, U4):
            k, n, g = (33100, 3, 33001) if long_8bit and tb in (I8, U8) else (70, 33, block_size)
            a, b = _matmul_operands(rng, M, k, n, (U8, I8)[tb in (I8, I4)], tb)
            for to in (F32, F16):
                results += _intmm(xp, a, b, to, block_size=g)
        a, b = _matmul_operands(rng, M, 40, 9, I8, I4, batch=(3,))
        results += _intmm(xp, a, b, F32, per_batch=True, block_size=block_size)
        return results
    return fn


for _v, _rows in intmm.VARIANTS.items():
    case(f"matmul_integer_to_float {_v} (M = {_rows}, groups of 1{'; an 8-bit b: of 33001' if _rows == 1 else ''})",
         _v)(_intmm_stream(_rows, _v, 1))
case(f"matmul_integer_to_float {intmm.ROWS[0]} (M > 16, groups of 20)", intmm.ROWS[0])(
    _intmm_stream(intmm.ROWS[1] + 3, intmm.ROWS[0], block_size=20))


# ----------------------------------------------------------------- average pooling

# variant -> (x shape, window, strides, dilations, padding): sizes the variant accepts
_POOLS = {
    "general": ((2, 3, 9, 11), (3, 2), (2, 1), (2, 1), (1, 0)),
    "tile_k2s2": ((2, 3, 12, 17), (2, 2), (2, 2), (1, 1), (0, 1)),
    "tile_k3s1": ((1, 4, 13, 19), (3, 3), (1, 1), (1, 1), (1, 1)),
    "tile_k3s2": ((2, 2, 15, 14), (3, 3), (2, 2), (1, 1), (1, 0)),
    "strip_k3s1": ((2, 3, 21, 35), (3, 3), (1, 1), (1, 1), (1, 1)),
    "global_warp": ((2, 5, 7, 9), (7, 9), (1, 1), (1, 1), (0, 0)),
    "global_block": ((1, 2, 70, 65), (70, 65), (1, 1), (1, 1), (0, 0)),
    "channels_last_16": ((2, 32, 9, 11), (3, 3), (1, 2), (1, 1), (1, 1)),   # x channels_last
    "channels_last_4": ((2, 12, 10, 7), (2, 3), (2, 1), (2, 1), (1, 0)),
    "channels_last_strip_16": ((2, 32, 21, 11), (3, 3), (1, 1), (1, 1), (1, 1)),   # x channels_last
    "channels_last_strip_4": ((2, 12, 19, 7), (3, 2), (1, 2), (1, 1), (1, 0)),
    "channels_last_global_16": ((2, 32, 140, 150), (140, 150), (1, 1), (1, 1), (0, 0)),  # 20 chunks an image (H100)
    "channels_last_global_4": ((3, 12, 7, 9), (7, 9), (1, 1), (1, 1), (0, 0)),
}


def _pool(variant):
    def fn(xp):
        rng = _rng(variant)
        shape, window, strides, dil, pad = _POOLS[variant]
        results = []
        for tx, to, include in ((I8, U8, True), (U8, I8, False)):
            x = _ints(rng, tx, shape)
            c = shape[1]
            xs, os_ = rng.uniform(0.01, 0.1, c).astype(F32), rng.uniform(0.01, 0.1, 1).astype(F32)
            xz, oz = _ints(rng, tx, c), _ints(rng, to, 1)
            out_sp = tuple((shape[2 + i] + 2 * pad[i] - (window[i] - 1) * dil[i] - 1) // strides[i] + 1
                           for i in range(2))
            out_shape = shape[:2] + out_sp
            params = (window, strides, pad, pad, dil, include)
            want = R.quantized_avg_pool(x, xs, xz, os_, oz, np.empty(out_shape, to), *params)
            out = _poisoned(xp, out_shape, to)
            xd, *pd = [_dev(xp, v) for v in (x, xs, xz, os_, oz)]
            if variant in avgpool.CL_VARIANTS:  # channels_last memory
                xd = xp.ascontiguousarray(xd.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
            got = avgpool.quantized_avg_pool(xd, *pd, out, *params, variant=variant)
            results.append((f"avg_pool {variant} {tx}->{to}", _get(got), want))
        return results
    return fn


for _v in avgpool.VARIANTS:
    case(f"quantized_avg_pool {_v}", _v)(_pool(_v))


# ----------------------------------------------------------------- dynamic quantize

@case("dynamic_quantize_linear", "range")
def _dynamic(xp):
    rng = _rng("dynamic_quantize_linear")
    results = []
    for xdt in (F32, F16, BF16):
        x = (rng.standard_normal((9, 70)) * 3 - 1).astype(xdt)
        x[0, 1] = np.nan
        for qdt in (U8, I8):
            want = R.dynamic_quantize_linear(x[:, 1:], qdt)  # (a start off the 16-byte grid)
            got = dmlq.dynamic_quantize_linear(xp.asarray(x)[:, 1:], dtype=qdt)
            results += [(f"dynamic_quantize_linear {xdt}->{qdt} {part}", _get(g), w)
                        for part, g, w in zip(("y", "scale", "zero point"), got, want)]
    return results


@case("dynamic_quantize_linear per_row", "rows")
def _dynamic_rows(xp):
    rng = _rng("dynamic_quantize_linear per_row")
    results = []
    for xdt in (F32, F16, BF16):
        for shape in ((9, 70), (3, 9000)):  # a warp a row; few long rows in splits
            x = (rng.standard_normal(shape) * 3 - 1).astype(xdt)
            x[0, 1], x[-1, :] = np.nan, 0.0
            for qdt in (U8, I8):
                want = R.dynamic_quantize_linear(x[:, 1:], qdt, per_row=True)  # (rows off the 16-byte grid)
                got = dmlq.dynamic_quantize_linear(xp.asarray(x)[:, 1:], dtype=qdt, per_row=True)
                results += [(f"dynamic_quantize_linear per_row {shape} {xdt}->{qdt} {part}", _get(g), w)
                            for part, g, w in zip(("y", "scale", "zero point"), got, want)]
    return results


# ----------------------------------------------------------------- element-wise

def _elementwise(variant):
    def fn(xp):
        rng = _rng(variant)
        results = []
        shape = (6, 33)
        axis_scale = variant == "axis"
        for xdt in (F32, F16, I32):
            x = (rng.standard_normal(shape) * 60).astype(xdt)
            s = rng.uniform(0.1, 2, (1, 33) if axis_scale else (1,)).astype(F32)
            z = _ints(rng, I8, s.shape)
            want = R.quantize_linear(x, s, z, out=np.empty(shape, I8))
            xd = xp.asarray(x)
            if variant == "strided":
                xd = xp.asarray(x.T.copy()).T   # a transposed view
            out = _poisoned(xp, shape, I8)
            got = elementwise.quantize_linear(xd, xp.asarray(s), xp.asarray(z), out, variant=variant)
            results.append((f"quantize {variant} {xdt}", _get(got), want))
        for qdt in (I8, U8, np.dtype(np.int16), np.dtype(np.uint16), I32, np.dtype(np.uint32)):
            for odt in (F32, F16):
                q = _ints(rng, qdt, shape)
                s = rng.uniform(0.001, 2, (1, 33) if axis_scale else (1,)).astype(odt)
                z = _ints(rng, qdt, s.shape)
                want = R.dequantize_linear(q, s, z, out=np.empty(shape, odt))
                qd = xp.asarray(q.T.copy()).T if variant == "strided" else xp.asarray(q)
                out = _poisoned(xp, shape, odt)
                got = elementwise.dequantize_linear(qd, xp.asarray(s), xp.asarray(z), out, variant=variant)
                results.append((f"dequantize {variant} {qdt}->{odt}", _get(got), want))
        if variant != "axis":
            results += _add(xp, rng, variant)
        return results
    return fn


def _add(xp, rng, variant):
    results = []
    for ta, tb, to in ((I8, U8, I8), (U8, I8, U8)):
        a, b = _ints(rng, ta, (5, 40)), _ints(rng, tb, (5, 40))
        ps = [rng.uniform(0.01, 1, (1,)).astype(F32) for _ in range(3)]
        zs = [_ints(rng, t, (1,)) for t in (ta, tb, to)]
        args = (a, ps[0], zs[0], b, ps[1], zs[1], ps[2], zs[2])
        want = R.quantized_add(*args, out=np.empty(a.shape, to))
        d = [_dev(xp, v) for v in args]
        if variant == "strided":
            d[0] = xp.asarray(a.T.copy()).T
        out = _poisoned(xp, a.shape, to)
        got = elementwise.quantized_add(*d, out, variant=variant)
        results.append((f"add {variant} {ta}+{tb}->{to}", _get(got), want))
    return results


for _v in elementwise.VARIANTS:
    case(f"element-wise {_v}", _v)(_elementwise(_v))
case("quantized_add table", "table")(lambda xp: _add(xp, _rng("table"), "table"))


# ----------------------------------------------------------------- the ONNX 21-25 types

def _qtypes(xp):
    """Every quantize and dequantize type code, blocked scales with a ragged last block
    (quant_types.cu), and the int32 / float8_e8m0fnu scales' conversion kernels."""
    from dmlq.qtypes import QTYPES

    rng = _rng("qtypes")
    results = []
    x = (rng.standard_normal((3, 37)) * 40).astype(F32)
    x.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -0.0, 2.5]
    s = rng.uniform(0.05, 2.0, (3, 10)).astype(F32)

    def to_dev(v):
        if not isinstance(v, np.ndarray) or v.dtype.name in ("int8", "uint8", "int16", "uint16", "float32",
                                                             "float16", "int32", "uint32"):
            return _dev(xp, v)
        p = dmlq.pack(v)
        return dmlq.Packed(xp.asarray(p.data), p.shape, p.dtype)

    def raw(v):
        return _get(v.data) if isinstance(v, dmlq.Packed) else code_bytes(_get(v))

    for name in qkernels.QUANTIZE_CODES:
        q = QTYPES[name]
        z = None if q.is_float else _ints(rng, q.dtype, (3, 10)) if q.bits >= 8 else \
            rng.integers(q.qmin, q.qmax + 1, (3, 10)).astype(q.dtype)
        want = dmlq.quantize_linear(x, s, z, block_size=4, dtype=name)
        got = dmlq.quantize_linear(xp.asarray(x), xp.asarray(s), to_dev(z), block_size=4, dtype=name)
        results.append((f"quantize -> {name}, blocked", raw(got), raw(want)))
        back = dmlq.dequantize_linear(want, s, z, block_size=4)
        got_back = dmlq.dequantize_linear(to_dev(want), xp.asarray(s), to_dev(z), block_size=4)
        results.append((f"dequantize {name}, blocked", _get(got_back), back))
    xb = x.astype(BF16)  # bfloat16 x read and bfloat16 y written by the kernels (compared widened: exact)
    for name in ("int8", "int4", "float8_e4m3fn"):
        want = dmlq.quantize_linear(xb, s, None, block_size=4, dtype=name)
        got = dmlq.quantize_linear(xp.asarray(xb), xp.asarray(s), None, block_size=4, dtype=name)
        results.append((f"quantize bfloat16 -> {name}, blocked", raw(got), raw(want)))
        back = dmlq.dequantize_linear(want, s, None, block_size=4, dtype="bfloat16")
        got_back = dmlq.dequantize_linear(to_dev(want), xp.asarray(s), None, block_size=4, dtype="bfloat16")
        results.append((f"dequantize {name} -> bfloat16, blocked", _get(got_back).astype(F32), back.astype(F32)))
    for name in ("int32", "uint32"):
        qv = _ints(rng, name, (3, 37))
        want = dmlq.dequantize_linear(qv, s, None, block_size=4)
        results.append((f"dequantize {name}, blocked", _get(dmlq.dequantize_linear(xp.asarray(qv), xp.asarray(s),
                                                                                  None, block_size=4)), want))
    si = rng.integers(-40, 41, (3, 10)).astype(np.int32)
    want = dmlq.quantize_linear(x, si, None, block_size=4, dtype="int8")
    results.append(("quantize int32 scale", raw(dmlq.quantize_linear(xp.asarray(x), xp.asarray(si), None,
                                                                    block_size=4, dtype="int8")), raw(want)))
    codes = rng.integers(118, 136, (3, 10)).astype(np.uint8)
    e8 = codes.view(np.dtype(ml_dtypes.float8_e8m0fnu))
    want = dmlq.quantize_linear(x, e8, None, block_size=4, dtype="uint8")
    got = dmlq.quantize_linear(xp.asarray(x), dmlq.Packed(xp.asarray(codes.reshape(-1)), (3, 10), "float8_e8m0fnu"),
                               None, block_size=4, dtype="uint8")
    results.append(("quantize e8m0 scale", raw(got), raw(want)))
    return results


case("quantize / dequantize, every ONNX type code, blocked")(_qtypes)


def same(got, want) -> np.ndarray:
    """Bit for bit; any NaN matches any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return np.zeros(max(want.size, 1), bool)
    if got.dtype.kind == "f":
        bits = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
        return (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    return got.view(np.uint8) == want.view(np.uint8) if got.dtype.itemsize == 1 else got == want


def check(results) -> None:
    for what, got, want in results:
        ok = same(got, want)
        if not ok.all():
            idx = tuple(np.argwhere(~ok.reshape(np.shape(want)) if ok.size == np.size(want) else ~ok)[0])
            raise AssertionError(f"{what}: {(~ok).sum()} mismatches, first at {idx}: got "
                                 f"{np.asarray(got)[idx] if ok.size == np.size(want) else np.asarray(got).dtype}, "
                                 f"want {np.asarray(want)[idx]}")


def _packed_tables(xp):
    """A packed 4-bit b_zero_point (dmlq.Packed, and MatMulNBits' (N, groups) table as its .mT[..., :k, :])
    made into the int8 / uint8 table by packed_table.cu's unpack_table, against dmlq.unpack."""
    rng = _rng("packed tables")
    results = []
    for tb in (I4, U4):
        w = _ints(rng, tb, (2, 37, 5))
        for p, want in ((dmlq.pack(w), w), (dmlq.pack(w).mT[..., :3, :], w[..., :3].swapaxes(-1, -2))):
            got = packed.unpack_table(xp.asarray(p.data), tb.name, *held(p))
            results.append((f"unpack_table {tb} {'C order' if held(p)[1] is None else '.mT[..., :3, :]'}", _get(got),
                            np.ascontiguousarray(want).astype(I8 if tb == I4 else U8)))
    return results


case("packed zero-point tables (unpack_table)", "packed table")(_packed_tables)


def _two_bit_b(xp):
    """A 2-bit b (MatMulNBits' bits=2) widened to the packed 4-bit bytes of its values by packed_table.cu's
    widen_codes2 (an odd element count: the last byte's high nibble 0), its zero points' table from the
    2-bit bytes (unpack_table), then matmul_integer through the 4-bit kernels against NumPy's sums."""
    rng = _rng("two-bit b")
    results = []
    for tb, wide in ((I2, I4), (U2, U4)):
        w = _ints(rng, tb, (2, 37, 5))
        p = dmlq.pack(w)
        got = packed.widen_codes2(xp.asarray(p.data), p.size, tb == I2)
        results.append((f"widen_codes2 {tb}", _get(got), dmlq.pack(w.astype(wide)).data))
        z = p.mT[..., :3, :]
        got = packed.unpack_table(xp.asarray(z.data), tb.name, *held(z))
        results.append((f"unpack_table {tb} .mT[..., :3, :]", _get(got),
                        np.ascontiguousarray(w[..., :3].swapaxes(-1, -2)).astype(I8 if tb == I2 else U8)))
        a, zp = _ints(rng, I8, (3, 37)), _ints(rng, tb, (5,))
        got = dmlq.matmul_integer(xp.asarray(a), dmlq.Packed(xp.asarray(p.data), p.shape, p.dtype), 1,
                                  dmlq.Packed(xp.asarray(dmlq.pack(zp).data), zp.shape, tb.name))
        want = (a.astype(np.int64) - 1) @ (w.astype(np.int64) - zp.astype(np.int64))
        results.append((f"matmul_integer, a packed {tb} b", _get(got), want.astype(I32)))
    return results


case("2-bit b widened (widen_codes2)", "2-bit b", "packed table")(_two_bit_b)
