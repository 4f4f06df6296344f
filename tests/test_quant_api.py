"""dmlq.quantize_linear / dequantize_linear with the types beyond int8 (docs/semantics.md
"Quantized types beyond int8"): blocked and per-axis scales, saturate and precision against
ONNX's own reference evaluator on seeded inputs, the edge cases by hand, and every refusal's
message naming its argument."""
import math

import numpy as np
import pytest

import dmlq
from dmlq import DescError, UnsupportedError
from dmlq.qtypes import QTYPES

md = pytest.importorskip("ml_dtypes")
onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F32 = np.float32
INTS = ("int16", "uint16", "int4", "uint4", "int2", "uint2", "int8", "uint8")
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def onnx_ref(op, inputs, opset=25, **attrs):
    """ONNX's reference evaluator (the onnx wheel's numpy implementation) on one node."""
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for n, v in zip(names, inputs)]
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def _finite_inputs(rng, shape, q):
    """Values whose quotients stay inside int32 (ONNX's reference casts to int32 before clipping)."""
    x = (rng.standard_normal(shape) * (4 if q.bits <= 8 else 3000)).astype(F32)
    flat = x.reshape(-1)
    ties = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 0.0, -0.0], F32)
    flat[: min(ties.size, flat.size)] = ties[: flat.size]
    return x


BLOCK_CASES = [((7,), 0, 3), ((5, 9), 1, 4), ((5, 9), 0, 2), ((3, 4, 5), 2, 5), ((3, 4, 5), 1, 3),
               ((2, 3, 4, 5), 3, 2), ((2, 3, 4, 5), 0, 1), ((6, 1), 0, 4)]


@pytest.mark.parametrize("qname", INTS + FLOAT8)
@pytest.mark.parametrize("shape,axis,block", BLOCK_CASES)
def test_blocked_quantize_and_dequantize_equal_onnx_reference(qname, shape, axis, block):
    q = QTYPES[qname]
    rng = np.random.default_rng(abs(hash((qname, shape, axis, block))) % 2**32)
    pshape = tuple(-(-n // block) if i == axis else n for i, n in enumerate(shape))
    x = _finite_inputs(rng, shape, q)
    s = (rng.uniform(0.2, 2.0, pshape) * (1 if q.bits <= 8 else 100)).astype(F32)
    z = (np.zeros(pshape, q.dtype) if q.is_float
         else rng.integers(q.qmin, q.qmax + 1, pshape).astype(q.dtype))
    got = dmlq.quantize_linear(x, s, z, axis=axis, block_size=block)
    want = onnx_ref("QuantizeLinear", [x, s, z], axis=axis, block_size=block)
    assert got.dtype == q.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8)), (got, want)
    # axis left out: the one axis where the shapes differ
    if pshape != shape:
        assert np.array_equal(dmlq.quantize_linear(x, s, z, block_size=block).view(np.uint8), got.view(np.uint8))
    zq = None if q.is_float else z
    back = dmlq.dequantize_linear(got, s, zq, axis=axis, block_size=block)
    want_back = onnx_ref("DequantizeLinear", [got, s] + ([] if zq is None else [zq]), axis=axis, block_size=block)
    assert back.dtype == F32 and np.array_equal(back.view(np.uint32), want_back.view(np.uint32))


@pytest.mark.parametrize("qname", FLOAT8)
@pytest.mark.parametrize("saturate", [True, False])
def test_float8_saturate_equals_onnx_reference(qname, saturate):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(200) * 10.0 ** rng.integers(-4, 7, 200)).astype(F32)
    x[:6] = [np.inf, -np.inf, np.nan, 1e30, -1e30, -0.0]
    s = np.float32(0.75)
    z = np.zeros((), QTYPES[qname].dtype)
    got = dmlq.quantize_linear(x, s, z, saturate=saturate)
    want = onnx_ref("QuantizeLinear", [x, np.array(s), z], saturate=int(saturate))
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("precision", [None, "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("qname", ["int8", "int16", "uint4", "float8_e4m3fn"])
def test_precision_equals_onnx_reference(precision, qname):
    q = QTYPES[qname]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(500) * 30).astype(F32)
    s = np.array(rng.uniform(0.01, 0.5), F32)
    z = np.zeros((), q.dtype)
    got = dmlq.quantize_linear(x, s, z, precision=precision)
    numbers = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
               "bfloat16": onnx.TensorProto.BFLOAT16}
    attrs = {} if precision is None else {"precision": numbers[precision]}
    want = onnx_ref("QuantizeLinear", [x, s, z], **attrs)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_precision_float16_is_onnx_default_for_a_float16_scale():
    # docs/semantics.md: dmlq divides in float32 unless asked; ONNX's default is the scale's type
    x, s = np.array([0.623046875], np.float16), np.array(0.03775024, np.float16)
    assert dmlq.quantize_linear(x, s, dtype="int16").tolist() == [17]
    assert dmlq.quantize_linear(x, s, dtype="int16", precision="float16").tolist() == [16]
    assert onnx_ref("QuantizeLinear", [x, s, np.zeros((), np.int16)]).tolist() == [16]


def test_bfloat16_inputs_and_outputs_equal_onnx_reference():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(300) * 20).astype(md.bfloat16)
    s = np.array(0.37, md.bfloat16)
    # ONNX divides in the scale's type (bfloat16) by default; dmlq in float32 unless precision says so
    got = dmlq.quantize_linear(x, s, dtype="int8", precision="bfloat16")
    want = onnx_ref("QuantizeLinear", [x, s, np.zeros((), np.int8)])
    assert np.array_equal(got, want)
    assert not np.array_equal(dmlq.quantize_linear(x, s, dtype="int8"), want)
    q = rng.integers(-32768, 32768, 300).astype(np.int16)
    for out_dtype, onnx_type in ((md.bfloat16, onnx.TensorProto.BFLOAT16), (np.float16, onnx.TensorProto.FLOAT16)):
        got = dmlq.dequantize_linear(q, np.float32(0.37), dtype=out_dtype)
        want = onnx_ref("DequantizeLinear", [q, np.array(0.37, F32)], output_dtype=onnx_type)
        assert got.dtype == np.dtype(out_dtype) and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert dmlq.dequantize_linear(q, s).dtype == md.bfloat16


@pytest.mark.parametrize("qname", INTS[:6])
def test_integer_edges_by_hand(qname):
    q = QTYPES[qname]
    zp = (q.qmin + q.qmax + 1) // 2
    x = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 0.5, 1.5, 2.5, -2.5, -0.0], F32)
    got = dmlq.quantize_linear(x, 1.0, np.array(zp, q.dtype)).astype(np.int64)
    want = [zp, q.qmax, q.qmin, q.qmax, q.qmin] + [min(max(v + zp, q.qmin), q.qmax) for v in (0, 2, 2, -2, 0)]
    assert got.tolist() == want
    # one past the range on either side saturates; the extremes come back exactly
    edge = np.array([q.qmin - 1, q.qmin, q.qmax, q.qmax + 1], F32)
    assert dmlq.quantize_linear(edge, 1.0, dtype=qname).astype(np.int64).tolist() == [q.qmin, q.qmin, q.qmax, q.qmax]
    qs = np.array([q.qmin, q.qmax], q.dtype)
    assert dmlq.dequantize_linear(qs, 0.5, np.array(zp, q.dtype)).tolist() == [(q.qmin - zp) / 2, (q.qmax - zp) / 2]


def test_ragged_last_block_by_hand():
    x = np.arange(7, dtype=F32)  # blocks of 3: [0 1 2] [3 4 5] [6]
    s = np.array([1.0, 0.5, 0.25], F32)
    got = dmlq.quantize_linear(x, s, np.array([0, 1, -2], md.int4), block_size=3)
    assert got.astype(int).tolist() == [0, 1, 2, 7, 7, 7, 7]
    back = dmlq.dequantize_linear(np.arange(7).astype(md.uint4), s, block_size=3)
    assert back.tolist() == [0, 1, 2, 1.5, 2, 2.5, 1.5]


def test_per_axis_form():
    x = np.arange(6, dtype=F32).reshape(2, 3)
    got = dmlq.quantize_linear(x, np.array([1.0, 2.0], F32), np.array([1, -1], np.int16), axis=0)
    assert got.dtype == np.int16 and got.tolist() == [[1, 2, 3], [1, 1, 1]]
    got = dmlq.quantize_linear(x, np.array([1.0, 2.0, 4.0], F32), axis=-1, dtype="uint2")
    assert got.astype(int).tolist() == [[0, 0, 0], [3, 2, 1]]


def test_packed_round_trip_through_the_api():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 5)).astype(F32)
    q = dmlq.quantize_linear(x, 0.3, dtype="int4")
    p = dmlq.pack(q)
    assert p.nbytes == 8 and np.array_equal(dmlq.dequantize_linear(p, 0.3), dmlq.dequantize_linear(q, 0.3))


def test_unpack_takes_one_int_for_a_1d_shape():
    p = dmlq.pack(np.array([1, -2, 3], md.int4))
    assert np.array_equal(dmlq.unpack(p.data, 3, "int4"), dmlq.unpack(p))


def test_pack_refuses_a_dask_array_without_computing_it():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.zeros(4, md.int4), chunks=2)
    with pytest.raises(TypeError, match=r"pack: x is a dask array; .* pack x.compute\(\)"):
        dmlq.pack(x)


def test_output_type_rules():
    x = np.array([1.0, -1.0], F32)
    assert dmlq.quantize_linear(x, 1.0, dtype=md.uint4).dtype == md.uint4
    assert dmlq.quantize_linear(x, 1.0, dtype="float8_e5m2").dtype == md.float8_e5m2
    assert dmlq.quantize_linear(x, 1.0, np.zeros((), md.int2)).dtype == md.int2
    assert dmlq.quantize_linear(x, 1.0, out=np.empty(2, md.int4)).dtype == md.int4
    assert dmlq.quantize_linear(x, 1.0, 3, dtype="int4").tolist() == [4, 2]  # a Python int zero point
    assert dmlq.quantize_linear(x, 1.0, np.int64(3), dtype="int16").tolist() == [4, 2]
    assert dmlq.quantize_linear(x, 1.0, 0.0, dtype="float8_e4m3fn").dtype == md.float8_e4m3fn
    assert dmlq.quantize_linear(x, 1.0, np.uint8(200), dtype="uint16").dtype == np.uint16
    out = np.empty(2, md.float8_e4m3fn)
    assert dmlq.quantize_linear(x, 1.0, dtype="float8_e4m3fn", out=out) is out


X = np.array([1.0, 2.0], F32)
REFUSALS = [
    (lambda: dmlq.quantize_linear(X, 1.0, 1.0, dtype="float8_e4m3fn"), DescError,
     r"zero_point must be zero \(or None\) for float8_e4m3fn"),
    (lambda: dmlq.dequantize_linear(np.zeros(2, md.float8_e5m2), 1.0, np.ones(2, md.float8_e5m2)), DescError,
     r"dequantize_linear: zero_point must be zero \(or None\) for float8_e5m2"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int3"), TypeError, r"dtype must be a quantized type"),
    (lambda: dmlq.quantize_linear(X, 1.0, np.zeros((), md.int4), dtype="float8_e4m3fn"), TypeError,
     r"dtype=float8_e4m3fn contradicts the dtype of zero_point \(int4\)"),
    (lambda: dmlq.quantize_linear(X, 1.0, 9, dtype="int4"), DescError, r"zero_point = 9 is out of range for int4"),
    (lambda: dmlq.quantize_linear(X, 1.0, np.array([0, 9]), dtype="int4"), DescError,
     r"zero_point holds values outside \[-8, 7\]"),
    # a uint64 zero point past 2**63 once wrapped to a negative int64 (2**64 - 1 taken as -1)
    (lambda: dmlq.quantize_linear(X, 1.0, np.array(2**64 - 1, np.uint64), dtype="int4"), DescError,
     r"quantize_linear: zero_point holds values outside \[-8, 7\]"),
    (lambda: dmlq.dequantize_linear(np.zeros(2, np.int16), 1.0, np.uint64(2**64 - 2), axis=0), DescError,
     r"dequantize_linear: zero_point holds values outside \[-32768, 32767\]"),
    (lambda: dmlq.quantize_linear(X, 1.0, np.int32(1), block_size=1), TypeError,
     r"zero_point has dtype int32, which is not a quantized type"),
    (lambda: dmlq.quantize_linear(X.astype(np.float64), 1.0, dtype="int4"), TypeError,
     r"x must have dtype float32, float16, bfloat16 or int32 \(got float64\)"),
    (lambda: dmlq.quantize_linear(X, np.int64(1), dtype="int4"), TypeError, r"scale must have dtype float32"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", precision=10), TypeError,
     r"precision takes a dtype or its name .* not a number"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", precision="float64"), TypeError,
     r"precision must be float32, float16 or bfloat16"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", saturate="no"), TypeError,
     r"saturate must be True or False"),
    (lambda: dmlq.quantize_linear(X, np.ones((1, 2), F32), block_size=1), DescError,
     r"with block_size, scale must have x's rank 1"),
    (lambda: dmlq.quantize_linear(X, np.ones(1, F32), block_size=0), DescError, r"block_size must be >= 1"),
    (lambda: dmlq.quantize_linear(X, np.ones(1, F32), block_size=True), TypeError, r"block_size must be an int"),
    (lambda: dmlq.quantize_linear(np.ones((4, 4), F32), np.ones((2, 2), F32), block_size=2), DescError,
     r"differs from x \(4, 4\) on axes \[0, 1\]"),
    (lambda: dmlq.quantize_linear(np.ones(4, F32), np.ones(3, F32), block_size=2), DescError,
     r"block_size = 2 on axis 0 of size 4 makes ceil\(4 / 2\) = 2 blocks, but scale has 3 there; no block_size"),
    (lambda: dmlq.quantize_linear(np.ones(10, F32), np.ones(2, F32), block_size=3), DescError,
     r"with 2 blocks, block_size must be in \[5, 9\]"),
    (lambda: dmlq.quantize_linear(np.ones((2, 4), F32), np.ones((2, 2), F32), np.zeros((2, 1), np.int8),
                                  block_size=2), DescError, r"zero_point must have scale's shape \(2, 2\)"),
    (lambda: dmlq.quantize_linear(X, 1.0, axis=2, dtype="int4"), DescError, r"axis = 2 is out of range for a 1-D x"),
    (lambda: dmlq.quantize_linear(X, np.ones(3, F32), axis=0, dtype="int4"), DescError,
     r"with axis=0 \(and no block_size\), scale must be one value or 1-D of length x.shape\[0\] = 2"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", out=np.empty(2, np.int8)), TypeError,
     r"out must have dtype int4"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", out=np.empty(3, md.int4)), ValueError,
     r"out must have shape \(2,\)"),
    (lambda: dmlq.dequantize_linear(np.zeros(2, md.int4), 1.0, dtype="int8"), TypeError,
     r"dtype must be float32, float16 or bfloat16"),
    (lambda: dmlq.dequantize_linear(np.zeros(2, np.int64), 1.0, block_size=1), TypeError,
     r"q must be an array of a quantized type"),
    (lambda: dmlq.quantize_linear(X, 1.0, dtype="int4", out=dmlq.Packed(np.zeros(1, np.uint8), (2,), "int4")),
     TypeError, r"out must be a numpy.ndarray"),
    # pack / unpack / a Packed where it is not taken: the function and the argument named
    (lambda: dmlq.pack([1, 2]), TypeError, r"pack: x must be a NumPy or CuPy array or a torch tensor .* \(got list\)"),
    (lambda: dmlq.unpack(np.zeros(2, np.uint8), (-1, 3), "int4"), ValueError, r"unpack: shape \(-1, 3\) has a negative"),
    (lambda: dmlq.unpack(np.zeros(2, np.uint8), "3", "int4"), TypeError, r"unpack: shape must be a tuple of ints"),
    (lambda: dmlq.quantized_matmul(dmlq.pack(np.zeros((2, 3), md.int4)), 1.0, 0, np.zeros((3, 2), np.int8), 1.0, 0,
                                   1.0), TypeError, r"quantized_matmul: a is a dmlq.Packed, which quantized_matmul "
                                                    r"does not take as a"),
    (lambda: dmlq.dequantize_linear(dmlq.Packed(np.zeros(2, np.uint8), (5,), "int4"), 1.0), ValueError,
     r"dequantize_linear: q is a dmlq.Packed that does not hold its elements: 5 int4 elements \(shape \(5,\)\) "
     r"take 3 bytes"),
    # a Packed of bytes is no GPU array (the message once said NumPy and GPU arrays were mixed)
    (lambda: dmlq.dequantize_linear(dmlq.Packed(b"\xe1\x03", (3,), "int4"), 1.0), TypeError,
     r"dequantize_linear: q is a dmlq.Packed whose data is of type bytes; its data must be a 1-D uint8 NumPy "
     r"\(or CuPy\) array: np.frombuffer\(b, np.uint8\)"),
    (lambda: dmlq.quantize_linear(X, 1.0, dmlq.Packed([1], (), "int4")), TypeError,
     r"quantize_linear: zero_point is a dmlq.Packed whose data is of type list"),
    # a 0-d operand has no axis to block (an IndexError before), and dequantize's operand is q
    (lambda: dmlq.quantize_linear(np.float32(1.0), np.float32(1.0), block_size=2), DescError,
     r"quantize_linear: block_size= needs x to have at least one dimension \(x is 0-d\)"),
    (lambda: dmlq.dequantize_linear(np.uint8(3), np.float32(1.0), block_size=1), DescError,
     r"dequantize_linear: block_size= needs q to have at least one dimension \(q is 0-d\)"),
    (lambda: dmlq.dequantize_linear(np.zeros(2, md.int4), 1.0, axis=2), DescError,
     r"axis = 2 is out of range for a 1-D q"),
    (lambda: dmlq.dequantize_linear(np.zeros((4, 4), np.uint8), np.ones((2, 2), F32), block_size=2), DescError,
     r"differs from q \(4, 4\) on axes \[0, 1\]"),
    (lambda: dmlq.kernel_plan(dmlq.quantize_linear, X, 1.0, dtype="int4"), UnsupportedError,
     r"kernel_plan: quantize_linear with these types or arguments shows its plan for GPU operands only"),
]


@pytest.mark.parametrize("call,exc,message", REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_refusals_name_the_argument(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_classic_calls_keep_their_path():
    # int8/uint8 with broadcast scales stays on the plan-cached element-wise path, errors included
    from dmlq import quant

    assert not quant.quantize_is_extended(X, 1.0, None, None, None, None, True, None, None)
    assert not quant.quantize_is_extended(X, 1.0, np.array(5, np.int16), np.uint8, None, None, True, None, None)
    assert not quant.dequantize_is_extended(np.zeros(2, np.int16), 1.0, None, None, None, None, None)
    assert quant.quantize_is_extended(X, 1.0, None, "int16", None, None, True, None, None)
    assert quant.dequantize_is_extended(np.zeros(2, md.int4), 1.0, None, None, None, None, None)
    assert math.isnan(float(dmlq.dequantize_linear(np.array([0x7F], np.uint8).view(md.float8_e4m3fn), 1.0)[0]))


def test_a_call_is_valid_or_not_whatever_the_no_op_keywords():
    """A zero point of a type beyond int8 (ml_dtypes int4, uint2) beside an int8 q or output,
    and an int32 x with a float16 scale for an int8 output, were refused on the int8 path and
    taken on the types-beyond-int8 one, which a no-op keyword (dtype="float32",
    precision="float32") picked. Both paths take them now, with the same values."""
    import ml_dtypes

    q8 = np.array([1, 2, 3], np.int8)
    z4 = np.array([1, 1, -1], ml_dtypes.int4)
    want = np.array([0.0, 0.5, 2.0], np.float32)
    for kw in ({}, dict(dtype="float32")):
        np.testing.assert_array_equal(dmlq.dequantize_linear(q8, np.float32(0.5), z4, **kw), want, strict=True)
    x = np.array([1.0, 2.0, -3.0], np.float32)
    z2 = np.array([1, 1, 3], ml_dtypes.uint2)
    for kw in ({}, dict(precision="float32")):
        np.testing.assert_array_equal(dmlq.quantize_linear(x, np.float32(0.5), z2, dtype="int8", **kw),
                                      np.array([3, 5, -3], np.int8), strict=True)
    with pytest.raises(ValueError, match="zero_point holds values outside"):
        dmlq.quantize_linear(x, np.float32(0.5), np.array([1, 1, -8], ml_dtypes.int4), dtype="uint8")
    xi = np.array([1, 5, -7], np.int32)
    for kw in (dict(dtype="uint8"), dict(dtype="int16"), dict(dtype="uint8", precision="float32")):
        got = dmlq.quantize_linear(xi, np.float16(0.5), **kw)
        np.testing.assert_array_equal(got, dmlq.quantize_linear(xi, np.float32(0.5), **kw), strict=True)


def test_block_sizes_past_the_axis_and_the_blocked_axis_of_equal_shapes():
    """A block_size of 2**64 or more is one block (it raised OverflowError, or numba's typing
    error, on its way to the kernels); with scale of x's shape the blocked axis is one whose
    length is its block count (axis 0 was taken, and refused for a (4, 1) x with B = 2)."""
    x = np.array([[1.0, -2.0, 3.0, 4.0], [5.0, 6.0, -7.0, 8.0], [0.5, 1.5, 2.5, -3.5]], np.float32)
    s = np.array([[0.5], [0.25], [2.0]], np.float32)
    want = dmlq.quantize_linear(x, s, axis=1, block_size=4)
    for b in (5, 2**63, 2**64, 2**70):
        np.testing.assert_array_equal(dmlq.quantize_linear(x, s, block_size=b), want, strict=True)
        np.testing.assert_array_equal(dmlq.dequantize_linear(want, s, block_size=b),
                                      dmlq.dequantize_linear(want, s, axis=1, block_size=4), strict=True)
    col = np.array([[1.0], [2.0], [-3.0], [4.0]], np.float32)
    np.testing.assert_array_equal(dmlq.quantize_linear(col, col, dtype="int4", block_size=2),
                                  np.ones((4, 1), "int4"), strict=True)
    with pytest.raises(ValueError, match=r"no axis was found where it is blocked: name the axis with axis="):
        dmlq.quantize_linear(x, np.ones((3, 4), np.float32), dtype="int4", block_size=2)


def test_number_scales_are_checked_against_the_type_they_take():
    """A number scale beside a bfloat16 x takes bfloat16 (docs/semantics.md, "Scales"): one past
    bfloat16's range is refused naming bfloat16 (the check named float32, and let 3.5e38 through
    to become inf); lists alike."""
    import ml_dtypes

    xb = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    for scale in (3.5e38, 1e39, 10**400):
        with pytest.raises(ValueError, match=r"scale = .* is beyond the range of bfloat16"):
            dmlq.quantize_linear(xb, scale, dtype=np.int16)
    with pytest.raises(ValueError, match=r"scale holds 3\.5e\+38, beyond the range of bfloat16"):
        dmlq.quantize_linear(xb, [3.5e38, 1.0], dtype=np.int16)
    assert dmlq.quantize_linear(xb, np.inf, dtype=np.int16).tolist() == [0, 0]
    assert dmlq.quantize_linear(xb.astype(np.float32), 3.0e38, dtype=np.int16).tolist() == [0, 0]


def test_a_0d_x_with_a_float8_zero_point_and_float8_e5m2_beside_dask():
    """A differential fuzz across the front ends: a 0-d x with a float8 zero point gave shape (1,) on
    NumPy (() on the GPU; a dask error 'Unknown dimension'); any float8_e5m2 dask operand failed with
    NumPy's "data type '<f1' not understood" while the graph was built."""
    import ml_dtypes

    x = np.array(5.0, np.float32)
    for zp in (ml_dtypes.float8_e4m3fnuz(0), np.asarray(ml_dtypes.float8_e4m3fn(0))):
        assert dmlq.quantize_linear(x, -0.25, zp).shape == ()
    da = pytest.importorskip("dask.array")
    assert dmlq.quantize_linear(da.from_array(x, chunks=()), 0.5, ml_dtypes.float8_e4m3fn(0)).compute().shape == ()
    q = np.array([1.0, 2.0, -4.0], ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(dmlq.dequantize_linear(da.from_array(q, chunks=2), 0.5).compute(),
                                  dmlq.dequantize_linear(q, 0.5), strict=True)
