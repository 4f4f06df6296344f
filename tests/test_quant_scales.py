"""Scale types beyond float32/float16/bfloat16 (docs/semantics.md "Scale types"): float8_e8m0fnu
scales (ONNX opset 24: QuantizeLinear and DequantizeLinear) and int32 scales (QuantizeLinear only),
against ONNX's reference evaluator on seeded inputs, onnxruntime's CPU provider where it has the
case, ml_dtypes' own e8m0 cast on every code, and the refusals of what ONNX does not define."""
import numpy as np
import pytest

import dmlq
from dmlq import floatconv
from dmlq.qtypes import QTYPES

md = pytest.importorskip("ml_dtypes")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from test_quant_api import onnx_ref  # noqa: E402
from test_quant_onnx import _bits_equal  # noqa: E402

if not hasattr(md, "float8_e8m0fnu"):  # pragma: no cover - ml_dtypes >= 0.5 has it
    pytest.skip("ml_dtypes without float8_e8m0fnu", allow_module_level=True)
E8M0 = np.dtype(md.float8_e8m0fnu)
F32 = np.float32
SHAPE = (4, 10)


def _tp(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _layout(layout, rng, make):
    """(scale of SHAPE's layout made by make(shape), dmlq keywords, ONNX attributes)."""
    if layout == "tensor":
        return make(()), {}, {}
    if layout == "axis":
        return make((SHAPE[1],)), {"axis": 1}, {"axis": 1}
    return make((SHAPE[0], 3)), {"axis": 1, "block_size": 4}, {"axis": 1, "block_size": 4}  # 4 + 4 + 2


def _e8m0(rng, shape, lo=112, hi=140):
    """e8m0 codes 2**-15 ... 2**12 (quotients of N(0, 40) inputs stay inside int32)."""
    return rng.integers(lo, hi, shape).astype(np.uint8).view(E8M0)


def _x(rng, xt):
    x = (rng.standard_normal(SHAPE) * 40).astype(F32)
    x.reshape(-1)[:6] = [0.5, 1.5, -2.5, 0.0, -0.0, 3.0]  # ties (with a scale of 1) and zeros
    return x.astype(xt) if xt != "bfloat16" else x.astype(md.bfloat16)


def _zero_point(rng, q, like):
    if q.is_float:
        return None
    return rng.integers(q.qmin, q.qmax + 1, np.shape(like)).astype(q.dtype)


def test_e8m0_decode_every_code():
    codes = np.arange(256, dtype=np.uint8)
    got = floatconv.decode_e8m0(codes)
    want = codes.view(E8M0).astype(F32)  # ml_dtypes' own cast
    assert np.isnan(got[255]) and np.isnan(want[255])
    assert np.array_equal(got[:255].view(np.uint32), want[:255].view(np.uint32))
    assert (got[0], got[127], got[128], got[254]) == (2.0**-127, 1.0, 2.0, 2.0**127)


QNAMES = ("int8", "uint8", "int16", "uint16", "int4", "uint2", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn")


@pytest.mark.parametrize("qname", QNAMES)
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("xt", ["float32", "float16"])
def test_e8m0_scale_quantize_equals_onnx_reference(rng, qname, layout, xt):
    q = QTYPES[qname]
    x = _x(rng, xt)
    s, kw, attrs = _layout(layout, rng, lambda shape: _e8m0(rng, shape))
    zp = _zero_point(rng, q, s)
    got = dmlq.quantize_linear(x, s, zp, dtype=q.dtype, **kw)
    want = onnx_ref("QuantizeLinear", [x, s] + ([] if zp is None else [zp]), opset=25,
                    output_dtype=_tp(q.dtype), **attrs)
    assert _bits_equal(got, want), (qname, layout, xt)


@pytest.mark.parametrize("qname", ["int8", "uint4", "int16", "float8_e4m3fnuz", "float8_e5m2"])
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("yt", ["float32", "float16", "bfloat16"])
def test_e8m0_scale_dequantize_equals_onnx_reference(rng, qname, layout, yt):
    q = QTYPES[qname]
    if q.bits >= 8:  # every code (float8: NaN codes too)
        qv = rng.integers(0, 1 << q.bits, SHAPE).astype(np.uint8 if q.bits == 8 else np.uint16).view(q.dtype)
    else:
        qv = rng.integers(q.qmin, q.qmax + 1, SHAPE).astype(q.dtype)
    s, kw, attrs = _layout(layout, rng, lambda shape: _e8m0(rng, shape, 100, 150))
    zp = _zero_point(rng, q, s)
    dt = md.bfloat16 if yt == "bfloat16" else np.dtype(yt)
    got = dmlq.dequantize_linear(qv, s, zp, dtype=dt, **kw)
    want = onnx_ref("DequantizeLinear", [qv, s] + ([] if zp is None else [zp]), opset=24,
                    output_dtype=_tp(dt), **attrs)
    assert _bits_equal(got, want), (qname, layout, yt)


@pytest.mark.parametrize("qname", ["int8", "uint8", "int16", "uint4", "int2"])
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("xt", ["int32", "float32", "float16"])
def test_int32_scale_quantize_equals_onnx_reference(rng, qname, layout, xt):
    """ONNX's reference divides in float64 (NumPy's promotion of an int32 operand), dmlq in
    float32: for |x| < 2**23 and |scale| <= 2**24 the two give the same integer output (a float32
    quotient is never moved across a half-integer: docs/semantics.md), which this checks."""
    q = QTYPES[qname]
    if xt == "int32":
        x = rng.integers(-2**23 + 1, 2**23, SHAPE).astype(np.int32)
        x.reshape(-1)[:4] = [2**23 - 1, -2**23 + 1, 5, -7]
    else:
        x = _x(rng, xt)

    def make(shape):
        top = 2 ** rng.integers(1, 25, shape) + 1 if xt == "int32" else 9  # int32 x: scales up to 2**24
        s = rng.integers(1, top, shape) * rng.choice([-1, 1], shape)
        return np.asarray(s).astype(np.int32)

    s, kw, attrs = _layout(layout, rng, make)
    zp = _zero_point(rng, q, s)
    got = dmlq.quantize_linear(x, s, zp, dtype=q.dtype, **kw)
    want = onnx_ref("QuantizeLinear", [x, s] + ([] if zp is None else [zp]), opset=25,
                    output_dtype=_tp(q.dtype), **attrs)
    assert _bits_equal(got, want), (qname, layout, xt)


@pytest.mark.parametrize("qname", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "int8"])
@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_int32_and_e8m0_scales_with_precision_equal_onnx_reference(rng, qname, precision):
    """With precision given, ONNX's reference casts x and the scale to it and divides there:
    float8/float4 outputs too then agree bit for bit (float32: exactly dmlq's division)."""
    q = QTYPES[qname]
    x = _x(rng, "float32")
    p = md.bfloat16 if precision == "bfloat16" else np.dtype(precision)
    # no zero scale: ONNX's reference casts x / 0 = inf to int32 (undefined) before clipping
    nonzero = rng.integers(1, 300, SHAPE[1]) * rng.choice([-1, 1], SHAPE[1])
    for s in (nonzero.astype(np.int32), _e8m0(rng, (SHAPE[1],), 120, 135)):
        got = dmlq.quantize_linear(x, s, dtype=q.dtype, axis=1, precision=p)
        want = onnx_ref("QuantizeLinear", [x, s], opset=25, output_dtype=_tp(q.dtype), axis=1,
                        precision=_tp(p))
        assert _bits_equal(got, want), (qname, precision, s.dtype)


def test_scales_by_hand():
    x = np.array([3.0, -5.0, 1.0, 7.0], F32)
    two = np.array(2.0, F32).astype(E8M0)  # code 128
    assert two.view(np.uint8) == 128
    assert dmlq.quantize_linear(x, two, dtype="int8").tolist() == [2, -2, 0, 4]  # 1.5, -2.5, 0.5, 3.5: to even
    assert dmlq.quantize_linear(x, np.int32(2), dtype="int8").tolist() == [2, -2, 0, 4]
    assert dmlq.quantize_linear(x.astype(np.int32), np.int32(-2), dtype="int8").tolist() == [-2, 2, 0, -4]
    nan = np.array([255], np.uint8).view(E8M0)  # e8m0's NaN code: NaN quotients
    assert dmlq.quantize_linear(x, nan, np.int8(3)).tolist() == [3, 3, 3, 3]  # NaN -> the zero point
    y = dmlq.dequantize_linear(np.array([1, -3], np.int8), np.array([0, 254], np.uint8).view(E8M0),
                               dtype=np.float32, axis=0)
    assert y.view(np.uint32).tolist() == [0x00400000, 0xFF800000]  # 2**-127 (subnormal); -3 * 2**127: -inf
    assert dmlq.dequantize_linear(np.array([1], np.int8), two, dtype=np.float16).dtype == np.float16


_REFUSALS = [
    (lambda: dmlq.dequantize_linear(np.array([1], np.int8), np.int32(2)), r"scale must have dtype float32"),
    (lambda: dmlq.dequantize_linear(np.array([1], np.int8), np.array([2], np.int32), axis=0),
     r"scale must have dtype float32, float16 or bfloat16 or float8_e8m0fnu \(got int32\): ONNX's DequantizeLinear"),
    (lambda: dmlq.dequantize_linear(np.array([1], md.int4), np.array(2.0, F32).astype(E8M0)),
     r"dtype= is required with a float8_e8m0fnu scale"),
    (lambda: dmlq.dequantize_linear(np.array([1], np.int8), np.array(2.0, F32).astype(E8M0),
                                    out=np.empty(1, F32)), r"dtype= is required with a float8_e8m0fnu scale"),
    (lambda: dmlq.quantize_linear(np.ones(2, F32), np.array([1, 2], np.int64), dtype="int4"),
     r"scale must have dtype float32.*\(or int32, float8_e8m0fnu\) \(got int64\)"),
    (lambda: dmlq.quantize_linear(np.ones(2, F32), np.array([1, 2], np.uint8).view(md.float8_e4m3fn),
                                  dtype="int4"), r"scale must have dtype .*\(got float8_e4m3fn\)"),
]


@pytest.mark.parametrize("call,message", _REFUSALS)
def test_refusals_name_the_argument(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize("op,opset", [("QuantizeLinear", 25), ("DequantizeLinear", 24), ("QuantizeLinear", 21)])
def test_equals_onnxruntime_where_it_has_the_case(rng, op, opset):
    """onnxruntime 1.32's CPU provider has no kernel for these scale types (the test skips with its
    message); a later one that has is compared bit for bit."""
    from test_quant_onnx import _ort_run
    pytest.importorskip("onnxruntime")
    if op == "DequantizeLinear":
        qv = rng.integers(-128, 128, SHAPE).astype(np.int8)
        s = _e8m0(rng, (SHAPE[1],))
        got = dmlq.dequantize_linear(qv, s, dtype=F32, axis=1)
        want = _ort_run(op, opset, qv, s, None, {"axis": 1, "output_dtype": TensorProto.FLOAT}, out_float=F32)
    else:
        x = _x(rng, "float32") if opset == 25 else rng.integers(-1000, 1000, SHAPE).astype(np.int32)
        s = _e8m0(rng, (SHAPE[1],)) if opset == 25 else rng.integers(1, 50, SHAPE[1]).astype(np.int32)
        got = dmlq.quantize_linear(x, s, dtype="int8", axis=1)
        want = _ort_run(op, opset, x, s, None, {"axis": 1, "output_dtype": TensorProto.INT8}, out_q=QTYPES["int8"])
    assert _bits_equal(got, want)
