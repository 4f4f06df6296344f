"""cuda/quant_types.cu on the host harness (its own source under g++, PTX emulated), driven by
dmlq/gpu/qkernels.py, bit for bit against dmlq.reference: every type, per tensor / per axis /
blocked with ragged last blocks, sizes around the 16-byte groups, aligned and misaligned
inputs, zero points, saturate both ways, precision, and outputs poisoned before each launch."""
from __future__ import annotations

import math

import numpy as np
import pytest

import dmlq
from dmlq import reference as ref
from dmlq.gpu import qkernels as qk
from dmlq.qtypes import QTYPES
from conftest import code_bytes

md = pytest.importorskip("ml_dtypes")

TYPES = qk.QUANTIZE_CODES  # int32 / uint32 q: tests/test_host_qscales.py
SIZES = (1, 7, 33, 64, 129, 1031)  # around the groups (8 ... 64 elements per 16 bytes)
LAYOUTS = ("tensor", "axis", "blocked")


def _shape(n, layout):
    return (n,) if layout == "tensor" else ((3, n) if n < 200 else (n, 3))


def _params(rng, q, shape, layout):
    """(scale for the kernel, zero point for the kernel, axis, block, scale and zp expanded for the reference)."""
    if layout == "tensor":
        s = np.float32(rng.uniform(0.05, 2.0))
        z = None if q.is_float else int(rng.integers(q.qmin, q.qmax + 1))
        return s, z, None, None, np.asarray(s), None if z is None else np.asarray(z).astype(q.dtype)
    axis = 1 if shape[1] > 3 else 0
    block = 1 if layout == "axis" else 5
    lay = qk.param_layout(shape, axis, block)
    pshape = tuple(lay.S if i == axis else d for i, d in enumerate(shape))
    s = rng.uniform(0.05, 2.0, pshape).astype(np.float32)
    if q.is_float:
        z = None
        zr = None
    else:
        zr = rng.integers(q.qmin, q.qmax + 1, pshape).astype(q.dtype)
        z = zr.astype(np.int64).astype(np.int32)
    se = ref.expand_blocks(s, shape, axis, block)
    ze = None if zr is None else ref.expand_blocks(zr, shape, axis, block)
    return s, z, axis, block, se, ze


def _inputs(rng, n_shape, xt, q):
    if xt == "int32":
        return rng.integers(-2**31, 2**31, n_shape, dtype=np.int64).astype(np.int32)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(n_shape) * (30 if q.bits < 16 else 3e4)).astype(xt)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 1e-42, 465.0, 1e30], np.float32)
    k = min(flat.size, specials.size)
    with np.errstate(over="ignore"):
        flat[:k] = specials[:k].astype(xt)
    return x


def _poisoned(shape, dt):
    """A float32 / float16 array of `shape` filled with the byte 0xA5 (not a NaN)."""
    dt = np.dtype(dt)
    wide = dt.itemsize == 4
    return np.full(shape, 0xA5A5A5A5 if wide else 0xA5A5, np.uint32 if wide else np.uint16).view(dt)


def _assert_same_floats(got, want, tag):
    """Bit for bit, except that a NaN matches any NaN (docs/semantics.md: a NaN output's sign and
    payload are not part of the contract)."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), tag
    assert np.array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8)), tag


def _round_trip(x, s, z, se, ze, q, lay, tag):
    """x quantized by the kernel with (s, z) in `lay` against the reference with the expanded
    (se, ze), then the codes dequantized back to x's dtype: both bit for bit, outputs poisoned."""
    with np.errstate(all="ignore"):
        want = ref.quantize_linear(x, se, ze, np.empty(x.shape, q.dtype))
    out = np.full(qk.packed_nbytes(x.size, q.name), 0xA5, np.uint8)
    qk.quantize(x, s, z, out, q.name, lay)
    assert np.array_equal(out, code_bytes(want)), tag
    with np.errstate(all="ignore"):
        back = ref.dequantize_linear(want, se, ze, np.empty(x.shape, x.dtype))
    y = _poisoned(x.shape, x.dtype)
    qk.dequantize(out, x.size, s, z, y, q.name, lay)
    _assert_same_floats(y, back, tag)


@pytest.mark.parametrize("qname", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantize_every_type_and_layout(host, rng, qname, layout):
    q = QTYPES[qname]
    for n in SIZES:
        for xt in ("float32", "float16", "int32") if n == 1031 else ("float32",):
            shape = _shape(n, layout)
            x = _inputs(rng, shape, xt, q)
            s, z, axis, block, se, ze = _params(rng, q, shape, layout)
            lay = qk.param_layout(shape, axis, block)
            for saturate in ((True, False) if q.is_float and q.bits == 8 else (True,)):
                want = ref.quantize_linear(x, se, ze, np.empty(shape, q.dtype), saturate)
                out = np.full(qk.packed_nbytes(x.size, qname), 0xA5, np.uint8)
                qk.quantize(x, s, z, out, qname, lay, saturate)
                assert np.array_equal(out, code_bytes(want)), (qname, layout, n, xt, saturate)


@pytest.mark.parametrize("qname", ["int4", "uint2", "int16", "float8_e4m3fn", "float4_e2m1fn"])
def test_quantize_misaligned_precision_and_float4_zero_point(host, rng, qname):
    q = QTYPES[qname]
    base = _inputs(rng, (200,), "float32", q)
    # 4 bytes past a 16-byte boundary (the scalar-load path), and aligned: the 16-byte path
    # has one loop per precision (quantize_group<X, T, PREC>), each over several chunks here.
    for x in (base[1:], base[:199]):
        for precision in (None, "float16", "bfloat16"):
            want = ref.quantize_linear(x, np.float32(0.3), None, np.empty(x.shape, q.dtype), True, precision)
            out = np.full(qk.packed_nbytes(x.size, qname), 0xA5, np.uint8)
            qk.quantize(x, np.float32(0.3), None, out, qname, qk.param_layout(x.shape), True, precision)
            assert np.array_equal(out, code_bytes(want)), (precision, x.ctypes.data % 16)
    if qname == "float4_e2m1fn":  # a +0 zero point turns a -0 quotient into +0 (docs/semantics.md)
        x = np.array([-0.0, 1.0, -0.0, -1.0, 0.0], np.float32)
        out = np.full(3, 0xA5, np.uint8)
        qk.quantize(x, np.float32(1), 0, out, qname, qk.param_layout(x.shape))
        want = ref.quantize_linear(x, np.float32(1), np.zeros((), q.dtype), np.empty(5, q.dtype))
        assert np.array_equal(out, dmlq.pack(want).data) and out.tolist() == [0x20, 0xA0, 0x00]


@pytest.mark.parametrize("qname", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("yt", ["float32", "float16"])
def test_dequantize_every_type_and_layout(host, rng, qname, layout, yt):
    q = QTYPES[qname]
    for n in SIZES:
        shape = _shape(n, layout)
        if q.bits < 8:
            codes = rng.integers(0, 1 << q.bits, shape).astype(np.uint8)
            qv = codes.view(q.dtype)
            qbytes = dmlq.pack(qv).data
        else:
            raw = rng.integers(0, 1 << q.bits, shape).astype(np.uint8 if q.bits == 8 else np.uint16)
            qv = raw.view(q.dtype)
            qbytes = raw.reshape(-1).view(np.uint8)
        s, z, axis, block, se, ze = _params(rng, q, shape, layout)
        want = ref.dequantize_linear(qv, se, ze, np.empty(shape, yt))
        for offset in (0, 1):  # an aligned and a misaligned output
            out = _poisoned(want.size + offset, yt)[offset:]
            qk.dequantize(qbytes, want.size, s, z, out, qname, qk.param_layout(shape, axis, block))
            _assert_same_floats(out.reshape(shape), want, (qname, layout, n, offset))


@pytest.mark.parametrize("qname", TYPES)
def test_quantize_every_float16_value(host, qname):
    """Every float16 value (ties, subnormals, the largest finite values and past them, NaN,
    +-inf) quantized with scale 1: every rounding and saturation case of every type."""
    q = QTYPES[qname]
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for xv in (x, x.astype(np.float32)):
        for saturate in ((True, False) if q.is_float and q.bits == 8 else (True,)):
            want = ref.quantize_linear(xv, np.float32(1), None, np.empty(xv.shape, q.dtype), saturate)
            out = np.full(qk.packed_nbytes(xv.size, qname), 0xA5, np.uint8)
            qk.quantize(xv, 1.0, None, out, qname, qk.param_layout(xv.shape), saturate)
            assert np.array_equal(out, code_bytes(want)), (qname, xv.dtype, saturate)


# Scales for the reciprocal path (common.cuh reciprocal_div), on both sides of its range.
ODD_SCALES = np.array([2.0**-60, 2.0**60, 2.0**-61, 2.0**61, 1e-40, 3e38, 0.0, np.inf, np.nan, -0.37,
                       0.039215686, 1 / 3], np.float32)


@pytest.mark.parametrize("qname", ["int4", "uint2", "int8", "uint8", "int16", "uint16", "float8_e5m2"])
@pytest.mark.parametrize("xt", ["float32", "float16"])
def test_blocks_along_the_last_axis_share_parameters_by_chunk(host, rng, qname, xt):
    """Blocked parameters along the last axis (inner == 1), blocks that end exactly at a
    16-byte chunk of x, inside one, or straddle it, rows that end mid-chunk: where a chunk's
    elements share one parameter the kernels read it once (Walker::uniform / skip) and
    quantize divides through its reciprocal. x sits beside each block's rounding ties."""
    q = QTYPES[qname]
    for D, block in ((32, 4), (32, 8), (40, 8), (37, 12), (64, 32), (35, 32), (16, 3), (24, 1)):
        shape = (5, D)
        lay = qk.param_layout(shape, 1, block)
        S = lay.S
        s = rng.choice(ODD_SCALES, (5, S)).astype(np.float32)
        s = np.where(rng.random((5, S)) < 0.5, rng.uniform(0.01, 3, (5, S)), s).astype(np.float32)
        se = ref.expand_blocks(s, shape, 1, block)
        k = rng.integers(-(1 << min(q.bits, 8)), 1 << min(q.bits, 8), shape).astype(np.float64)
        with np.errstate(all="ignore"):
            x = ((k + 0.5) * se.astype(np.float64)).astype(np.float32)
            x = (x.view(np.int32) + rng.integers(-2, 3, shape).astype(np.int32)).view(np.float32).astype(xt)
        zr = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, (5, S)).astype(q.dtype)
        z = None if zr is None else zr.astype(np.int64).astype(np.int32)
        ze = None if zr is None else ref.expand_blocks(zr, shape, 1, block)
        _round_trip(x, s, z, se, ze, q, lay, (qname, xt, D, block))  # and back with the same blocks


@pytest.mark.parametrize("qname", [t for t in TYPES if QTYPES[t].is_float])
def test_float_codes_beside_every_midpoint_with_odd_scales(host, rng, qname):
    """Per-tensor float8 / float4 quantize through the shared-parameter chunk path (and the
    last group's element path): x next to every rounding boundary of the code (the midpoints
    between neighbouring finite values and the first value past the largest), +-0 and the
    smallest float32 subnormals in the first group, with scales of both signs inside and
    outside the range where integer codes divide through the reciprocal (a float code keeps
    the division: through the reciprocal it saved no instruction, 2026-11-27, only two
    quarter-rate ones of ~66 an element, and -0 / s needs a fix-up there)."""
    q = QTYPES[qname]
    codes = np.arange(1 << q.bits, dtype=np.uint8)
    vals = np.unique(np.abs(codes.view(q.dtype) if q.bits == 8 else
                            dmlq.unpack(dmlq.pack(codes.astype(np.uint8).view(q.dtype))).astype(np.float64)
                            ).astype(np.float64))
    vals = vals[np.isfinite(vals)]
    mids = np.concatenate([(vals[:-1] + vals[1:]) / 2, [vals[-1] * 1.0625, vals[-1] * 2, vals[1] / 4]])
    mids = np.concatenate([mids, -mids, [0.0]])
    for s in np.concatenate([ODD_SCALES, -ODD_SCALES[:3], rng.uniform(0.01, 5, 3)]).astype(np.float32):
        with np.errstate(all="ignore"):
            x = (mids * np.float64(s)).astype(np.float32)
            x = (x.view(np.int32)[:, None] + np.arange(-2, 3, dtype=np.int32)).reshape(-1).view(np.float32)
        x = np.concatenate([np.float32([0.0, -0.0, -1e-45, 1e-45]), x])  # the first, 16-byte group's
        for saturate in ((True, False) if q.bits == 8 else (True,)):
            with np.errstate(all="ignore"):
                want = ref.quantize_linear(x, np.asarray(s), None, np.empty(x.shape, q.dtype), saturate)
            out = np.full(qk.packed_nbytes(x.size, qname), 0xA5, np.uint8)
            qk.quantize(x, s, None, out, qname, qk.param_layout(x.shape), saturate)
            assert np.array_equal(out, code_bytes(want)), (qname, float(s), saturate)


@pytest.mark.parametrize("qname", ["int4", "int8", "uint16", "float8_e4m3fn"])
def test_blocks_along_a_middle_axis(host, rng, qname):
    """Blocked parameters along the middle axis of a 3-D x (rows of the parameter axis before
    it, elements after it: the walker's row starts and steps, Walker::start's base)."""
    q = QTYPES[qname]
    for shape, block in (((3, 10, 5), 4), ((4, 7, 3), 2), ((2, 33, 2), 8)):
        lay = qk.param_layout(shape, 1, block)
        pshape = (shape[0], lay.S, shape[2])
        s = rng.uniform(0.05, 2.0, pshape).astype(np.float32)
        zr = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, pshape).astype(q.dtype)
        z = None if zr is None else zr.astype(np.int64).astype(np.int32)
        se = ref.expand_blocks(s, shape, 1, block)
        ze = None if zr is None else ref.expand_blocks(zr, shape, 1, block)
        _round_trip(_inputs(rng, shape, "float32", q), s, z, se, ze, q, lay, (qname, shape, block))


@pytest.mark.parametrize("qname", [t for t in TYPES if QTYPES[t].is_float])
def test_float_codes_with_scales_that_leave_the_range_in_the_precision(host, rng, qname):
    """Whole 16-byte groups of float codes, per tensor, at each precision, with scales that
    are positive and finite in float32 but 0, subnormal or inf once rounded to float16 or
    bfloat16 (the code's sign then comes from the division's rules, not from x: 0 / 0 and
    inf / inf are negative NaNs), negative scales, and float4 with a +0 zero point (which
    turns a -0 quotient into +0). x holds +-0, +-inf and NaNs of both signs; float16 x too
    (its NaNs' sign kept where the GPU's cvt.f32.f16 drops it)."""
    q = QTYPES[qname]
    x = (rng.standard_normal(200) * 4).astype(np.float32)
    x[:10] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-30, -1e-30, 3e38, -3e38], np.float32)
    x[100:110] = x[:10]
    rng.shuffle(x[10:100])
    scales = np.float32([0.3, 1e-8, 7e4, 3.4e38, 1e-45, 6e-8, 1e-39, -0.3, 2.0**-61])
    zps = (None, np.zeros((), q.dtype)) if qname == "float4_e2m1fn" else (None,)
    for s, x in [(s, x) for s in scales] + [(s, x.astype(np.float16)) for s in scales[[0, 7]]]:
        for precision in (None, "float16", "bfloat16"):
            for zp in zps:
                for saturate in ((True, False) if q.bits == 8 else (True,)):
                    with np.errstate(all="ignore"):
                        want = ref.quantize_linear(x, np.asarray(s), zp, np.empty(x.shape, q.dtype), saturate,
                                                   precision)
                    out = np.full(qk.packed_nbytes(x.size, qname), 0xA5, np.uint8)
                    qk.quantize(x, s, None if zp is None else 0, out, qname, qk.param_layout(x.shape), saturate,
                                precision)
                    assert np.array_equal(out, code_bytes(want)), (qname, float(s), precision, zp, saturate)


@pytest.mark.parametrize("qname", [t for t in TYPES if QTYPES[t].is_float])
@pytest.mark.parametrize("yt", ["float32", "float16"])
def test_dequantize_every_float_code(host, qname, yt):
    """Every code of each float8 / float4 type, in whole groups, times scales of 1, a power of
    two that makes the smallest codes float32 subnormals, and 3: exact values, NaN codes NaN."""
    q = QTYPES[qname]
    codes = np.tile(np.arange(1 << q.bits, dtype=np.uint8), 4)
    qv = codes.view(q.dtype) if q.bits == 8 else codes.view(q.dtype)
    qbytes = codes.copy() if q.bits == 8 else dmlq.pack(qv).data
    for s in np.float32([1.0, 2.0**-120, 3.0]):
        want = ref.dequantize_linear(qv, np.asarray(s), None, np.empty(qv.shape, yt))
        out = _poisoned(qv.shape, yt)
        qk.dequantize(qbytes, qv.size, s, None, out, qname, qk.param_layout(qv.shape))
        _assert_same_floats(out, want, (qname, float(s)))


@pytest.mark.parametrize("qname", ["int8", "uint4", "int2", "int16", "float8_e4m3fn", "float4_e2m1fn"])
@pytest.mark.parametrize("xt", ["float32", "float16"])
def test_parameters_that_change_every_element(host, rng, qname, xt):
    """Blocks along the first axis of a 2-D (K, N) x (an ONNX weight blocked along K: inner > 1)
    and per-axis parameters (or blocks of 1) along the last axis: a chunk's elements take
    neighbouring parameters (Walker::neighbours / skip_row); rows that end on, inside and across
    a chunk, ragged last blocks; per-axis along an earlier axis (runs sharing one parameter) too.
    Rows of 7 and 15 elements end one short of a whole chunk of float32 (4) and float16 (8): a
    chunk crossing the row's end must walk (per axis, parameters restart at each row).
    Quantize and dequantize back, outputs poisoned."""
    q = QTYPES[qname]
    for shape, axis, block in (((8, 64), 0, 4), ((7, 33), 0, 3), ((9, 12), 0, 2), ((6, 5), 0, 4),
                               ((5, 8), 0, 5), ((4, 3, 16), 0, None), ((3, 2, 20), 1, None), ((40, 24), 0, 32),
                               ((5, 12), 1, None), ((6, 10), 1, 1), ((3, 37), 1, None),
                               ((4, 7), 1, None), ((5, 15), 1, 1)):  # rows one short of whole chunks (4 and 8)
        lay = qk.param_layout(shape, axis, block)
        if block is None:  # per axis: the values along `axis`, placed as dmlq.quant_gpu places them
            pshape = (shape[axis],)
            lay = qk.ParamLayout(max(math.prod(shape[axis:]), 1), 1, 0, math.prod(shape[axis + 1:]))
            s = rng.uniform(0.05, 2.0, pshape).astype(np.float32)
            se = s.reshape((-1,) + (1,) * (len(shape) - axis - 1))
            zr = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, pshape).astype(q.dtype)
            ze = None if zr is None else zr.reshape(se.shape)
        else:
            pshape = tuple(lay.S if i == axis else d for i, d in enumerate(shape))
            s = rng.uniform(0.05, 2.0, pshape).astype(np.float32)
            se = ref.expand_blocks(s, shape, axis, block)
            zr = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, pshape).astype(q.dtype)
            ze = None if zr is None else ref.expand_blocks(zr, shape, axis, block)
        z = None if zr is None else zr.astype(np.int64).astype(np.int32)
        _round_trip(_inputs(rng, shape, xt, q), s, z, se, ze, q, lay, (qname, xt, shape, axis, block))


@pytest.mark.parametrize("qname", ["int4", "uint2", "float4_e2m1fn"])
def test_quantize_past_two_grid_strides(host, rng, qname):
    """Enough groups that each warp of the launcher's own grid takes three sets of 32 groups,
    the last set ending in a whole group, a partial one and none: quantize's cp.async rounds
    (two or more a group here) copy each set's own whole rows, and its read-ahead walker and
    parameter follow the grid stride (blocks of 32 along the last axis, and per tensor)."""
    q = QTYPES[qname]
    name = qk.quantize_name("float32", qname)
    G = 128 // q.bits
    stride = qk._grid(name, 1 << 40)[0] * qk.THREADS  # groups a grid stride takes
    n = (2 * stride + 1) * G + 1
    x = _inputs(rng, (n,), "float32", q)
    for block in (None, 32):
        if block is None:
            s, z, _, _, se, ze = _params(rng, q, (n,), "tensor")
            lay = qk.param_layout((n,), None, None)
        else:
            lay = qk.param_layout((n,), 0, block)
            s = rng.uniform(0.05, 2.0, lay.S).astype(np.float32)
            zr = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, lay.S).astype(q.dtype)
            z = None if zr is None else zr.astype(np.int64).astype(np.int32)
            se = ref.expand_blocks(s, (n,), 0, block)
            ze = None if zr is None else ref.expand_blocks(zr, (n,), 0, block)
        with np.errstate(all="ignore"):
            want = ref.quantize_linear(x, se, ze, np.empty((n,), q.dtype))
        out = np.full(qk.packed_nbytes(n, qname), 0xA5, np.uint8)
        qk.quantize(x, s, z, out, qname, lay)
        assert np.array_equal(out, code_bytes(want)), (qname, n, block)
