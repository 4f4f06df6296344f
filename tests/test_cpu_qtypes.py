"""dmlq.cpu.qtypes (the NumPy path of quantize_linear / dequantize_linear for every type of
dmlq.qtypes) bit for bit against dmlq.reference, on both of its paths: numba's kernels
(dmlq.cpu.jit_qtypes) and the chunked NumPy fallback (dmlq.cpu.jit.disabled). Every type,
per tensor / per axis (outer and inner) / blocked (last and first axis, ragged), 1-D to 3-D,
float32/float16/bfloat16/int32 x, float32/float16/bfloat16 outputs, zero points, saturate both
ways, precision; tensors past one chunk (several pieces, threads); and the float8/float4
encoder on all 65,536 float16 values and 2**20 float32 bit patterns against dmlq.floatconv."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dmlq
from dmlq import floatconv
from dmlq import reference as ref
from dmlq.cpu import jit, tiles
from dmlq.qtypes import BFLOAT16_DTYPE, QTYPES

md = pytest.importorskip("ml_dtypes")
PATHS = ["numba", "numpy"] if jit.AVAILABLE else ["numpy"]
TYPES = tuple(QTYPES)
FLOATS = tuple(n for n in TYPES if QTYPES[n].is_float)
# (x shape, scale shape, keyword arguments)
LAYOUTS = {
    "tensor": ((6, 50), (), {}),
    "axis-inner": ((6, 50), (50,), {"axis": 1}),
    "axis-outer": ((6, 5, 10), (5,), {"axis": 1}),
    "blocked-last": ((6, 50), (6, 4), {"block_size": 16}),  # ragged: 50 = 3 * 16 + 2
    "blocked-first": ((11, 3, 4), (3, 3, 4), {"block_size": 4, "axis": 0}),
    "blocked-1d": ((37,), (5,), {"block_size": 8}),
    "blocked-one-block": ((3, 4), (3, 1), {"block_size": 4}),  # one value per row
    "blocked-one-value": ((1, 9), (1, 1), {"block_size": 9}),  # one value in all: per tensor
    "axis-one-value": ((4, 5), (1,), {"axis": 0}),
}


def path(name):
    return contextlib.nullcontext() if name == "numba" else jit.disabled()


def _edges(x):
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 1e-42, 3e38, 448.0, 464.0, 57344.0,
                         6.0, 7.0, -1e-45, 240.0, 241.0], np.float32)
    k = min(flat.size, specials.size)
    with np.errstate(over="ignore"):
        flat[:k] = specials[:k].astype(x.dtype)
    return x


def _x(rng, shape, xt):
    if xt == "int32":
        return rng.integers(-3000, 3000, shape).astype(np.int32)
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    with np.errstate(over="ignore"):
        return _edges(x).astype(BFLOAT16_DTYPE if xt == "bfloat16" else xt)


def _expand(v, shape, kw):
    """A parameter broadcastable to shape, as dmlq.reference takes it."""
    if v is None or np.ndim(v) == 0:
        return v
    if "block_size" in kw:
        ax = kw.get("axis", next(i for i in range(len(shape)) if v.shape[i] != shape[i]))
        return ref.expand_blocks(v, shape, ax, kw["block_size"])
    ax = kw["axis"]
    return v.reshape(tuple(-1 if i == ax else 1 for i in range(len(shape))))


def _params(rng, q, layout):
    shape, sshape, kw = LAYOUTS[layout]
    s = rng.uniform(0.05, 3.0, sshape).astype(np.float32)
    s.reshape(-1)[:1] = 0.0 if s.size > 2 else s.reshape(-1)[:1]  # a zero scale: inf / NaN quotients
    z = None if q.is_float else rng.integers(q.qmin, q.qmax + 1, sshape).astype(q.dtype)
    return shape, s, z, kw


def _same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if want.dtype.kind == "f" or want.dtype == BFLOAT16_DTYPE or want.dtype.itemsize == 1 and \
            want.dtype.name.startswith("float"):
        g, w = got.astype(np.float32), want.astype(np.float32)
        nan = np.isnan(w)
        assert np.array_equal(np.isnan(g), nan), what
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[want.dtype.itemsize]
        assert np.array_equal(got.view(bits)[~nan], want.view(bits)[~nan]), what
    else:
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), what


@pytest.mark.parametrize("which", PATHS)
@pytest.mark.parametrize("xt", ["float32", "float16", "bfloat16", "int32"])
def test_quantize_every_type_and_layout(rng, which, xt):
    for layout in LAYOUTS:
        for name in TYPES:
            if layout == "tensor" and name in ("int8", "uint8"):
                continue  # the element-wise path (dmlq.cpu.elementwise; tests/test_cpu_backend.py)
            q = QTYPES[name]
            shape, s, z, kw = _params(rng, q, layout)
            x = _x(rng, shape, xt)
            for sat in ((True, False) if name in FLOATS and q.bits == 8 else (True,)):
                want = ref.quantize_linear(x, _expand(s, shape, kw), _expand(z, shape, kw), np.empty(shape, q.dtype),
                                           sat)
                with path(which):
                    got = dmlq.quantize_linear(x, s, z, dtype=name, saturate=sat, **kw)
                _same(got, want, f"{name} {layout} {xt} saturate={sat} {which}")


@pytest.mark.parametrize("which", PATHS)
@pytest.mark.parametrize("odt", ["float32", "float16", "bfloat16"])
def test_dequantize_every_type_and_layout(rng, which, odt):
    for layout in LAYOUTS:
        for name in TYPES:
            q = QTYPES[name]
            shape, s, z, kw = _params(rng, q, layout)
            codes = rng.integers(0, 1 << q.bits, shape)
            qv = codes.astype(np.uint16 if q.bits == 16 else np.uint8).view(q.dtype)
            want = ref.dequantize_linear(qv, _expand(s, shape, kw), _expand(z, shape, kw),
                                         np.empty(shape, BFLOAT16_DTYPE if odt == "bfloat16" else odt))
            with path(which):
                got = dmlq.dequantize_linear(qv, s, z, dtype=odt, **kw)
            _same(got, want, f"{name} {layout} {odt} {which}")


@pytest.mark.parametrize("which", PATHS)
def test_dequantize_reads_a_narrow_element_from_its_bytes_low_bits(rng, which):
    """A 4-bit or 2-bit array viewed from other bytes (int8 -3 viewed as int4 is the byte 0xFD,
    torch's int8.view(torch.int4) the same) holds bits above its width. Its elements are the
    low bits, as ml_dtypes reads its integer types and dmlq.pack packs them; dequantize reads
    them so on both paths (the kernel once read the whole byte: 0xFD as 237, and a float4 code
    past its 16-entry table), every layout, the same values as the array's packed form."""
    for name in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn"):
        q = QTYPES[name]
        for layout in ("tensor", "axis-inner", "axis-outer", "blocked-last", "blocked-first"):
            shape, s, z, kw = _params(rng, q, layout)
            raw = rng.integers(0, 256, shape).astype(np.uint8)
            raw.reshape(-1)[:4] = (0xFD, 0x12, 0x80, 0xFF)
            clean = (raw & ((1 << q.bits) - 1)).view(q.dtype)
            if not q.is_float:
                assert np.array_equal(raw.view(q.dtype).astype(np.int64), clean.astype(np.int64))  # ml_dtypes agrees
            want = ref.dequantize_linear(clean, _expand(s, shape, kw), _expand(z, shape, kw),
                                         np.empty(shape, np.float32))
            with path(which):
                got = dmlq.dequantize_linear(raw.view(q.dtype), s, z, **kw)
                packed = dmlq.dequantize_linear(dmlq.pack(raw.view(q.dtype)), s, z, **kw)
            _same(got, want, f"{name} {layout} {which}")
            _same(packed, want, f"{name} {layout} {which}, packed")


@pytest.mark.parametrize("which", PATHS)
def test_precision_float4_zero_point_and_broadcast_forms(rng, which):
    """What the kernels hand to the reference (precision float16/bfloat16, a float4 zero point,
    parameters along several axes) and what they run (precision float32)."""
    x = _x(rng, (8, 24), "float32")
    s = rng.uniform(0.1, 2, (8, 3)).astype(np.float32)
    with path(which):
        for prec in ("float32", "float16", "bfloat16"):
            for name in ("int4", "float8_e5m2", "uint16"):
                q = QTYPES[name]
                want = ref.quantize_linear(x, ref.expand_blocks(s, x.shape, 1, 8), None, np.empty(x.shape, q.dtype),
                                           True, np.dtype(BFLOAT16_DTYPE if prec == "bfloat16" else prec))
                _same(dmlq.quantize_linear(x, s, dtype=name, block_size=8, precision=prec), want, f"{name} {prec}")
        z = np.zeros((), md.float4_e2m1fn)
        want = ref.quantize_linear(x, np.float32(0.5), z, np.empty(x.shape, md.float4_e2m1fn))
        _same(dmlq.quantize_linear(x, np.float32(0.5), z), want, "float4 zero point")
        sc, zc = rng.uniform(0.1, 2, (8, 1)).astype(np.float32), rng.integers(-8, 8, (1, 24)).astype(md.int4)
        want = ref.quantize_linear(x, sc, zc, np.empty(x.shape, md.int4))
        _same(dmlq.quantize_linear(x, sc, zc), want, "broadcast along two axes")


@pytest.mark.parametrize("which", PATHS)
def test_tensors_past_one_chunk(rng, which, monkeypatch):
    """Several pieces (and threads): a per-tensor call, rows of blocks and one row longer than a chunk."""
    monkeypatch.setattr(tiles, "CHUNK", 1000)
    with path(which):
        for shape, sshape, kw in (((5003,), (), {}), ((97, 64), (97, 4), {"block_size": 16}),
                                  ((2, 2500), (2, 79), {"block_size": 32}), ((40, 7, 30), (7,), {"axis": 1})):
            x = _x(rng, shape, "float32")
            s = rng.uniform(0.05, 2, sshape).astype(np.float32)
            for name in ("int8", "uint4", "float8_e4m3fnuz", "int16"):
                q = QTYPES[name]
                want = ref.quantize_linear(x, _expand(s, shape, kw), None, np.empty(shape, q.dtype))
                got = dmlq.quantize_linear(x, s, dtype=name, **kw)
                _same(got, want, f"{name} {shape}")
                for odt in ("float32", "float16"):
                    back = ref.dequantize_linear(want, _expand(s, shape, kw), None, np.empty(shape, odt))
                    _same(dmlq.dequantize_linear(got, s, dtype=odt, **kw), back, f"{name} {shape} -> {odt}")


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("name", FLOATS)
def test_encoder_on_every_float16_and_a_float32_sample(name):
    """numba's float8/float4 encoder (quantize with scale 1) against dmlq.floatconv.encode on all
    65,536 float16 values and 2**20 seeded float32 bit patterns, saturate both ways."""
    fmt = QTYPES[name].fmt
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    sample = np.random.default_rng(25).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32) \
        .view(np.float32)
    for x in (every, sample):
        for sat in (True, False):
            got = dmlq.quantize_linear(x, np.float32(1), dtype=name, saturate=sat)
            assert np.array_equal(got.view(np.uint8), floatconv.encode(x, fmt, sat)), (name, sat, x.size)


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba not installed")
def test_float16_and_bfloat16_rounding_on_a_float32_sample():
    """dequantize's float16/bfloat16 rounding (the kernels' integer encoder) against NumPy's and
    dmlq.floatconv's casts on 2**20 float32 products: uint16 q with scale 1 is exact, so the
    sample is float32 values of every magnitude through a scale."""
    rng = np.random.default_rng(26)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    s = bits.view(np.float32)
    q = np.ones(s.size, np.uint16)
    for odt in ("float16", "bfloat16"):
        dt = BFLOAT16_DTYPE if odt == "bfloat16" else np.dtype(odt)
        want = ref.dequantize_linear(q, s, None, np.empty(s.shape, dt))
        _same(dmlq.dequantize_linear(q, s, dtype=odt, axis=0), want, odt)


@pytest.mark.parametrize("which", PATHS)
def test_out_strided_or_overlapping_an_input(rng, which):
    """out= is written in place when it can be; a strided out, or one sharing memory with x or q,
    still gets the reference's values (through a temporary)."""
    x = _x(rng, (4, 8), "float32")
    s = rng.uniform(0.05, 2, (4, 2)).astype(np.float32)
    se = ref.expand_blocks(s, x.shape, 1, 4)
    want = ref.quantize_linear(x, se, None, np.empty(x.shape, np.int16))
    with path(which):
        strided = np.zeros((4, 16), np.int16)[:, ::2]
        assert dmlq.quantize_linear(x, s, dtype="int16", block_size=4, out=strided) is strided
        _same(strided.copy(), want, "strided out")
        buf = x.copy()
        shared = buf.reshape(-1).view(np.int16)[:32].reshape(4, 8)  # the first half of x's bytes
        dmlq.quantize_linear(buf, s, dtype="int16", block_size=4, out=shared)
        _same(shared, want, "out overlapping x")
        back = ref.dequantize_linear(want, se, None, np.empty(x.shape, np.float32))
        mem = np.zeros(32, np.float32)
        q = mem.view(np.int16)[:32].reshape(4, 8)
        q[...] = want
        out = mem.reshape(4, 8)
        dmlq.dequantize_linear(q, s, block_size=4, out=out)
        _same(out, back, "out overlapping q")


@pytest.mark.parametrize("which", PATHS)
def test_integer_ties_bounds_and_specials(rng, which):
    """Integer outputs where the rounding and the clamp decide: power-of-two scales (x / s exact)
    and x / s = k + 1/2 around both ends of [qmin - zp, qmax - zp] (ties to even), one zero point
    or one per block / index, with NaN, +-inf, +-0, subnormals and +-3e38 mixed in."""
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-39, 3e38, -3e38], np.float32)
    for name in ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2"):
        q = QTYPES[name]
        for layout in ("tensor", "axis-inner", "axis-outer", "blocked-last", "blocked-first", "blocked-1d"):
            shape, sshape, kw = LAYOUTS[layout]
            s = rng.choice(np.array([0.25, 0.5, 1.0, 2.0], np.float32), sshape).astype(np.float32)
            for z in (None, rng.integers(q.qmin, q.qmax + 1, sshape).astype(q.dtype)):
                ends = np.array([q.qmin, q.qmax])[rng.integers(0, 2, shape)]
                zf = 0 if z is None else _expand(z, shape, kw).astype(np.float64)
                t = ends - zf + rng.integers(-3, 3, shape) + 0.5
                x = (t * _expand(s, shape, kw)).astype(np.float32)
                x.reshape(-1)[::7][:specials.size] = specials[:x.reshape(-1)[::7].size]
                want = ref.quantize_linear(x, _expand(s, shape, kw), _expand(z, shape, kw), np.empty(shape, q.dtype))
                with path(which):
                    got = dmlq.quantize_linear(x, s, z, dtype=name, **kw)
                _same(got, want, f"{name} {layout} zero point {z is not None} {which}")
