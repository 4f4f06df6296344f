"""dmlq.floatconv (integer-arithmetic float8/float4/bfloat16 rounding) against ml_dtypes'
own casts, the independent oracle, and against the hand-written table of docs/semantics.md;
dmlq.pack/unpack against the bytes the onnx wheel writes. The encoder tests also run dmlq.cpu's compiled
encoder (numba, quantize with scale 1) against ml_dtypes."""
import math

import numpy as np
import pytest

import dmlq
from dmlq import floatconv
from dmlq.qtypes import BFLOAT16, QTYPES, qtype

md = pytest.importorskip("ml_dtypes")

FLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")


def _all_float16():
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _float32_sample(n=1 << 18, seed=20250325):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # half of them near the float8 ranges (exponents -30 ... 20), where the roundings happen
    e = rng.integers(127 - 30, 127 + 20, n // 2, dtype=np.uint32)
    bits[: n // 2] = (bits[: n // 2] & 0x807FFFFF) | (e << 23)
    return bits.view(np.float32)


def _ml_dtypes_cast(x, q, saturate):
    """ml_dtypes' cast; with saturate, of x clipped to +-max first (NaN stays NaN)."""
    fmax = np.float32(float(md.finfo(q.dtype).max))
    with np.errstate(invalid="ignore", over="ignore"):
        src = np.clip(x, -fmax, fmax) if saturate else x
        return src.astype(q.dtype).view(np.uint8)


def _cpu_kernel_encode(x, name, saturate):
    """dmlq.cpu's compiled encoder (dmlq.cpu.jit_qtypes): quantize with scale 1 on the numba path."""
    from dmlq.cpu import jit

    if not jit.active():
        pytest.skip("numba is not installed (or DMLQ_CPU_JIT=0): no compiled encoder")
    return dmlq.quantize_linear(x, np.float32(1), dtype=name, saturate=saturate).view(np.uint8)


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("source", ["all float16", "float32 sample"])
@pytest.mark.parametrize("impl", ["floatconv", "cpu kernel"])
def test_encode_agrees_with_ml_dtypes(name, saturate, source, impl):
    q = QTYPES[name]
    x = _all_float16() if source == "all float16" else _float32_sample()
    mine = floatconv.encode(x, q.fmt, saturate) if impl == "floatconv" else _cpu_kernel_encode(x, name, saturate)
    theirs = _ml_dtypes_cast(x, q, saturate or q.fmt.special == "none")
    differ = mine != theirs
    if name == "float4_e2m1fn":
        # The one difference the contract explains: ONNX's FLOAT4E2M1 table maps NaN to +6
        # (code 0x7); ml_dtypes gives a zero.
        assert np.isnan(x[differ]).all()
        assert (mine[np.isnan(x)] == 0x7).all()
        differ &= ~np.isnan(x)
    assert not differ.any(), (x[differ][:8], mine[differ][:8], theirs[differ][:8])


@pytest.mark.parametrize("name", FLOATS)
def test_decode_every_code_agrees_with_ml_dtypes(name):
    q = QTYPES[name]
    codes = np.arange(1 << q.bits, dtype=np.uint8)
    mine = floatconv.decode(codes, q.fmt)
    theirs = codes.view(q.dtype).astype(np.float32)
    assert np.array_equal(np.isnan(mine), np.isnan(theirs))
    ok = ~np.isnan(theirs)
    assert np.array_equal(mine[ok].view(np.uint32), theirs[ok].view(np.uint32))


def test_bfloat16_rounding_agrees_with_ml_dtypes():
    x = _float32_sample()
    mine = floatconv.encode(x, BFLOAT16, saturate=False)
    with np.errstate(invalid="ignore"):
        theirs = x.astype(md.bfloat16).view(np.uint16)
    ok = ~np.isnan(x)
    assert np.array_equal(mine[ok], theirs[ok])
    assert np.isnan(floatconv.decode(mine[~ok], BFLOAT16)).all()
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    back = floatconv.decode(codes, BFLOAT16)
    assert np.array_equal(floatconv.encode(back, BFLOAT16, saturate=False)[~np.isnan(back)],
                          codes[~np.isnan(back)])


# docs/semantics.md "float8 and float4 codes": each row by hand.
NAN, INF = math.nan, math.inf
TABLE = [
    # value, type, saturate, expected code
    (-0.0, "float8_e4m3fn", True, 0x80), (-0.0, "float8_e4m3fnuz", True, 0x00),
    (-0.0, "float8_e5m2", True, 0x80), (-0.0, "float8_e5m2fnuz", True, 0x00), (-0.0, "float4_e2m1fn", True, 0x8),
    (-1e-30, "float8_e4m3fnuz", False, 0x00), (-1e-30, "float8_e4m3fn", False, 0x80),
    (NAN, "float8_e4m3fn", True, 0x7F), (-NAN, "float8_e4m3fn", True, 0xFF), (NAN, "float8_e4m3fnuz", True, 0x80),
    (NAN, "float8_e5m2", True, 0x7E), (-NAN, "float8_e5m2", False, 0xFE), (NAN, "float8_e5m2fnuz", False, 0x80),
    (NAN, "float4_e2m1fn", True, 0x7), (-NAN, "float4_e2m1fn", True, 0x7),
    (INF, "float8_e4m3fn", True, 0x7E), (-INF, "float8_e4m3fn", True, 0xFE), (INF, "float8_e4m3fnuz", True, 0x7F),
    (INF, "float8_e5m2", True, 0x7B), (-INF, "float8_e5m2fnuz", True, 0xFF), (-INF, "float4_e2m1fn", False, 0xF),
    (INF, "float8_e4m3fn", False, 0x7F), (-INF, "float8_e4m3fn", False, 0xFF), (INF, "float8_e4m3fnuz", False, 0x80),
    (INF, "float8_e5m2", False, 0x7C), (-INF, "float8_e5m2", False, 0xFC), (-INF, "float8_e5m2fnuz", False, 0x80),
    # the largest finite value, the tie above it (to even: stays), and one float32 ulp past the tie
    (448.0, "float8_e4m3fn", False, 0x7E), (464.0, "float8_e4m3fn", False, 0x7E),
    (float(np.nextafter(np.float32(464), np.float32(1e9))), "float8_e4m3fn", False, 0x7F),
    (float(np.nextafter(np.float32(464), np.float32(1e9))), "float8_e4m3fn", True, 0x7E),
    # 240 has an odd mantissa (1.111): the tie above it, 248, rounds up to 256 and overflows
    (240.0, "float8_e4m3fnuz", False, 0x7F), (247.99, "float8_e4m3fnuz", False, 0x7F),
    (248.0, "float8_e4m3fnuz", False, 0x80), (248.0, "float8_e4m3fnuz", True, 0x7F),
    (57344.0, "float8_e5m2", False, 0x7B), (61440.0, "float8_e5m2", False, 0x7C),  # tie to even: 65536 -> inf
    (61439.99, "float8_e5m2", False, 0x7B), (61440.0, "float8_e5m2", True, 0x7B),
    (61440.0, "float8_e5m2fnuz", False, 0x80), (61439.99, "float8_e5m2fnuz", False, 0x7F),
    (6.0, "float4_e2m1fn", False, 0x7), (7.0, "float4_e2m1fn", False, 0x7), (1e30, "float4_e2m1fn", False, 0x7),
    # ties to even inside the range
    (2.5, "float4_e2m1fn", True, 0x4), (3.5, "float4_e2m1fn", True, 0x6), (5.0, "float4_e2m1fn", True, 0x6),
    (0.25, "float4_e2m1fn", True, 0x0), (0.75, "float4_e2m1fn", True, 0x2), (-0.25, "float4_e2m1fn", True, 0x8),
    (17.0, "float8_e4m3fn", True, 0x58), (19.0, "float8_e4m3fn", True, 0x5A),  # 17 -> 16, 19 -> 20
    # subnormals: the smallest, half of it (tie to 0), and just above half
    (2.0 ** -9, "float8_e4m3fn", True, 0x01), (2.0 ** -10, "float8_e4m3fn", True, 0x00),
    (2.0 ** -10 * 1.0001, "float8_e4m3fn", True, 0x01), (3 * 2.0 ** -10, "float8_e4m3fn", True, 0x02),
    (2.0 ** -16, "float8_e5m2", True, 0x01), (2.0 ** -17, "float8_e5m2fnuz", True, 0x01),
    (2.0 ** -10, "float8_e4m3fnuz", True, 0x01), (-(2.0 ** -11), "float8_e4m3fnuz", True, 0x00),
    (1e-45, "float8_e4m3fn", True, 0x00),  # a float32 subnormal
]


@pytest.mark.parametrize("value,name,saturate,code", TABLE)
def test_contract_table(value, name, saturate, code):
    got = floatconv.encode(np.array([value], np.float32), QTYPES[name].fmt, saturate)[0]
    assert got == code, (value, name, saturate, hex(got), hex(code))


def test_qtype_lookup():
    assert qtype("int4") is QTYPES["int4"] and qtype(md.int4) is QTYPES["int4"]
    assert qtype(np.dtype("int16")).qmax == 32767 and qtype("Float8_E4M3FN").is_float
    with pytest.raises(TypeError, match="dtype must be a quantized type"):
        qtype("int3")
    with pytest.raises(TypeError, match="quantized type"):
        qtype(np.float32)


# ---- packing -----------------------------------------------------------------------------------

PACKED = ("int4", "uint4", "int2", "uint2", "float4_e2m1fn")


@pytest.mark.parametrize("name", PACKED)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 3, 3), (4, 4)])
def test_pack_matches_onnx_bytes_and_round_trips(name, shape):
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    q = QTYPES[name]
    rng = np.random.default_rng(hash((name, shape)) % 2**32)
    x = rng.integers(0, 1 << q.bits, shape).astype(np.uint8).view(q.dtype)
    p = dmlq.pack(x)
    assert p.shape == shape and p.dtype == name and p.data.dtype == np.uint8
    assert p.data.size == p.nbytes == -(-math.prod(shape) * q.bits // 8)
    assert p.data.tobytes() == numpy_helper.from_array(x).raw_data
    back = dmlq.unpack(p)
    assert back.dtype == q.dtype and back.shape == shape
    assert np.array_equal(back.view(np.uint8) & ((1 << q.bits) - 1), x.view(np.uint8) & ((1 << q.bits) - 1))
    assert np.array_equal(back.astype(np.float32), x.astype(np.float32))
    assert np.array_equal(dmlq.unpack(p.data, shape, name, codes=True), dmlq.unpack(p, codes=True))
    assert dmlq.pack(dmlq.unpack(p, codes=True), dtype=name).data.tobytes() == p.data.tobytes()


def test_pack_layout_by_hand():
    x = np.array([1, -2, 3], md.int4)  # codes 0x1, 0xE, 0x3: low nibble first, odd count padded with 0
    assert dmlq.pack(x).data.tolist() == [0xE1, 0x03]
    y = np.array([1, 0, 3, 2, 1], md.uint2)
    assert dmlq.pack(y).data.tolist() == [0b10110001, 0b00000001]


def test_padding_bits_are_not_read():
    """README: a given Packed's padding bits are not read (ONNX's unpacking leaves them out):
    the values and dequantize's result are those of the zero-padded bytes."""
    for name, data, want in (("int4", [0xE1, 0xF3], [1, -2, 3]), ("uint2", [0b10110001, 0b11111101], [1, 0, 3, 2, 1])):
        clean = dmlq.Packed(np.array(data, np.uint8) & np.array([0xFF, (1 << 4 if name == "int4" else 1 << 2) - 1],
                                                               np.uint8), (len(want),), name)
        dirty = dmlq.Packed(np.array(data, np.uint8), (len(want),), name)
        assert dmlq.unpack(dirty).astype(int).tolist() == dmlq.unpack(clean).astype(int).tolist() == want
        assert dmlq.unpack(dirty, codes=True).tolist() == dmlq.unpack(clean, codes=True).tolist()
        assert np.array_equal(dmlq.dequantize_linear(dirty, np.float32(0.5)),
                              np.array(want, np.float32) * 0.5)


def test_pack_float8_is_its_bytes():
    x = np.array([1.0, -2.0, np.nan, 448.0], md.float8_e4m3fn)
    p = dmlq.pack(x)
    assert (p.shape, p.dtype) == ((4,), "float8_e4m3fn")
    assert p.data.tobytes() == x.tobytes() == bytes([0x38, 0xC0, 0x7F, 0x7E])
    assert dmlq.unpack(p).tobytes() == x.tobytes() and dmlq.unpack(p).dtype == x.dtype


def test_pack_refusals():
    with pytest.raises(TypeError, match="only the 4-bit and 2-bit types are packed"):
        dmlq.pack(np.zeros(3, np.int8))
    with pytest.raises(TypeError, match="int16 is a plain array everywhere"):
        dmlq.pack(np.zeros(3, np.uint8), dtype="int16")
    with pytest.raises(TypeError, match="pack: x's dtype must be a quantized type"):
        dmlq.pack(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="more than 4 bits"):
        dmlq.pack(np.array([16], np.uint8), dtype="uint4")
    with pytest.raises(ValueError, match="take 2 bytes packed; the data holds 3"):
        dmlq.unpack(np.zeros(3, np.uint8), (4,), "int4")
    with pytest.raises(TypeError, match="pass a dmlq.Packed, or the packed bytes"):
        dmlq.unpack(np.zeros(3, np.uint8))
