"""cuda/quant_types.cu's int32 and float8_e8m0fnu scales and int32/uint32 q on the host harness
(its own source under g++, PTX emulated), driven by dmlq/gpu/qkernels.py, bit for bit against
dmlq.reference: device scales read by the kernel as stored (int32 rounded to float32 ties to even,
e8m0 decoded from its bits, 0xFF NaN), per tensor / per axis / blocked, with the edge scales (0,
+-1, 2**24 + 1 and the int32 extremes; e8m0 codes 0, 1, 127, 254, 255) and edge inputs, outputs
poisoned before each launch."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import reference as ref
from dmlq.gpu import qkernels as qk
from dmlq.qtypes import QTYPES

md = pytest.importorskip("ml_dtypes")
E8M0 = np.dtype(md.float8_e8m0fnu)
I32_EDGES = np.array([0, 1, -1, 3, 2**24 + 1, 2**24 + 3, -(2**25 + 2), 2**31 - 1, -2**31, 7919], np.int32)
E8M0_EDGES = np.array([0, 1, 127, 254, 255, 126, 130, 100], np.uint8)
LAYOUTS = ("tensor", "axis", "blocked")
SHAPE = (37, 10)  # axis 1 (10): per axis 10 scales; blocked by 3: 4 blocks, the last ragged


def _scale(rng, kind, pshape):
    """(the kernel's device scale: int32 or the e8m0 codes as uint8, the reference's scale)."""
    if kind == "int32":
        s = rng.integers(-40, 41, pshape).astype(np.int32)
        flat = s.reshape(-1)
        flat[:min(flat.size, I32_EDGES.size)] = I32_EDGES[:flat.size]
        return s, s
    codes = rng.integers(118, 136, pshape).astype(np.uint8)
    flat = codes.reshape(-1)
    flat[:min(flat.size, E8M0_EDGES.size)] = E8M0_EDGES[:flat.size]
    return codes, codes.view(E8M0)


def _layout(layout):
    if layout == "tensor":
        return None, None, (1,)
    block = 1 if layout == "axis" else 3
    return 1, block, (SHAPE[0], -(-SHAPE[1] // block))


def _x(rng):
    x = (rng.standard_normal(SHAPE) * 50).astype(np.float32)
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 1e-42, 3e38, 2**31, -2**31, 1e-30,
                      448.0, 464.0, 57344.0, 6.0, 7.0], np.float32)
    x[0, :] = edges[:10]
    x[1, :8] = edges[10:]
    x[2:, 0] = np.resize(edges, SHAPE[0] - 2)
    return x


def _packed_bytes(arr, q):
    return dmlq.pack(arr).data if q.bits < 8 else np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("kind", ["int32", "e8m0"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantize_int32_and_e8m0_scales_every_type(host, rng, kind, layout):
    x = _x(rng)
    axis, block, pshape = _layout(layout)
    lay = qk.param_layout(SHAPE, axis, block)
    for qname in qk.QUANTIZE_CODES:
        q = QTYPES[qname]
        s_dev, s_ref = _scale(rng, kind, pshape)
        se = s_ref.reshape(()) if layout == "tensor" else ref.expand_blocks(s_ref, SHAPE, axis, block)
        z = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, pshape)
        ze = None if z is None else (z.reshape(()) if layout == "tensor" else ref.expand_blocks(z, SHAPE, axis, block))
        for saturate in ((True, False) if q.is_float and q.bits == 8 else (True,)):
            want = ref.quantize_linear(x, se, None if ze is None else ze.astype(q.dtype), np.empty(SHAPE, q.dtype),
                                       saturate)
            out = np.full(qk.packed_nbytes(x.size, qname), 0xA5, np.uint8)
            qk.quantize(x, s_dev, None if z is None else z.astype(np.int32), out, qname, lay, saturate)
            assert np.array_equal(out, _packed_bytes(want, q)), (qname, kind, layout, saturate)


def _same(got, want):
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("yt", ["float32", "float16"])
def test_dequantize_e8m0_scale_every_type(host, rng, layout, yt):
    axis, block, pshape = _layout(layout)
    lay = qk.param_layout(SHAPE, axis, block)
    for qname in qk.QUANTIZE_CODES:
        q = QTYPES[qname]
        raw = rng.integers(0, 1 << q.bits, SHAPE).astype(np.uint8 if q.bits <= 8 else np.uint16)
        qv = raw.view(q.dtype) if q.bits >= 8 else raw.view(q.dtype)
        qbytes = dmlq.pack(qv).data if q.bits < 8 else raw.reshape(-1).view(np.uint8)
        s_dev, s_ref = _scale(rng, "e8m0", pshape)
        se = s_ref.reshape(()) if layout == "tensor" else ref.expand_blocks(s_ref, SHAPE, axis, block)
        want = ref.dequantize_linear(qv, se, None, np.empty(SHAPE, yt))
        out = np.full(SHAPE, 0xA5A5, np.uint16).view(np.float16) if yt == "float16" else \
            np.full(SHAPE, 0xA5A5A5A5, np.uint32).view(np.float32)
        qk.dequantize(qbytes, want.size, s_dev, None, out, qname, lay)
        _same(out, want)


@pytest.mark.parametrize("qname", ["int32", "uint32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("yt", ["float32", "float16"])
def test_dequantize_int32_and_uint32_q_per_axis_and_blocked(host, rng, qname, layout, yt):
    """q and the zero point at the extremes of their range (q - zp up to 2**32 - 1, rounded once),
    float32 and e8m0 scales, aligned and misaligned outputs, ragged last blocks."""
    dt = np.dtype(qname)
    info = np.iinfo(dt)
    axis, block, pshape = _layout(layout)
    lay = qk.param_layout(SHAPE, axis, block)
    qv = rng.integers(info.min, info.max, SHAPE, dtype=np.int64, endpoint=True).astype(dt)
    qv[0, :4] = [info.min, info.max, 0, 2**24 + 1]
    zp = rng.integers(info.min, info.max, pshape, dtype=np.int64, endpoint=True).astype(dt)
    zp.reshape(-1)[:2] = np.array([info.max, info.min], dt)[:zp.size]
    ze = zp.reshape(()) if layout == "tensor" else ref.expand_blocks(zp, SHAPE, axis, block)
    for kind in ("float32", "e8m0"):
        if kind == "float32":
            s_dev = s_ref = rng.uniform(0.01, 3, pshape).astype(np.float32)
            s_dev.reshape(-1)[:3] = np.array([0.0, np.inf, np.nan], np.float32)[:s_dev.size]
        else:
            s_dev, s_ref = _scale(rng, "e8m0", pshape)
        se = s_ref.reshape(()) if layout == "tensor" else ref.expand_blocks(s_ref, SHAPE, axis, block)
        want = ref.dequantize_linear(qv, se, ze, np.empty(SHAPE, yt))
        for offset in (0, 1):
            buf = np.full(want.size + offset, 0xA5A5A5A5 if yt == "float32" else 0xA5A5,
                          np.uint32 if yt == "float32" else np.uint16).view(yt)
            out = buf[offset:]
            qk.dequantize(qv.reshape(-1).view(np.uint8), want.size, s_dev, zp.view(np.int32), out, qname, lay)
            _same(out.reshape(SHAPE), want)
        if layout == "tensor":  # the zero point by value (a uint32 beyond int32: its bits)
            out = np.full(SHAPE, np.nan, yt)
            qk.dequantize(qv.reshape(-1).view(np.uint8), want.size, s_dev, zp.reshape(())[()], out, qname, lay)
            _same(out, want)
