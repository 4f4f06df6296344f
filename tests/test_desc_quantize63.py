"""DML_FEATURE_LEVEL_6_3 DML_OPERATOR_QUANTIZE / DEQUANTIZE: the descriptors, DirectML's
support tables for them, dmlq's layout rule for the quantization tensors, and the bound
operators against ONNX's own reference evaluator (blocked int4/uint4)."""
import numpy as np
import pytest

import dmlq
from dmlq import DataType, DescError, DequantizeDesc, QuantizeDesc, TensorDesc as T
from dmlq.validation import validate

md = pytest.importorskip("ml_dtypes")

Q_IN = ("FLOAT32", "FLOAT16")
Q_OUT = ("INT8", "INT4", "UINT8", "UINT4")
PARAM = ("FLOAT32", "FLOAT16", "INT8", "INT4", "UINT8", "UINT4")


def qdesc(x="FLOAT32", y="INT4", scale=None, zp="same", shape=(2, 4), pshape=(2, 2), kind=None, count=None):
    scale = scale or x
    params = [T(scale, pshape)] + ([] if zp is None else [T(y if zp == "same" else zp, pshape)])
    kind = kind or ("SCALE" if zp is None else "SCALE_ZERO_POINT")
    return QuantizeDesc(T(x, shape), kind, count, params, T(y, shape))


def ddesc(x="INT4", y="FLOAT32", scale=None, zp="same", shape=(2, 4), pshape=(2, 2), kind=None):
    scale = scale or y
    params = [T(scale, pshape)] + ([] if zp is None else [T(x if zp == "same" else zp, pshape)])
    kind = kind or ("SCALE" if zp is None else "SCALE_ZERO_POINT")
    return DequantizeDesc(T(x, shape), kind, None, params, T(y, shape))


@pytest.mark.parametrize("level", ["6.3", "6.4"])
def test_every_supported_type_combination_validates(level):
    for x in Q_IN:
        for y in Q_OUT:
            for zp in (None, "same"):
                validate(qdesc(x, y, zp=zp), level)
                validate(ddesc(y, x, zp=zp), level)


def test_introduced_at_6_3():
    for desc in (qdesc(), ddesc()):
        with pytest.raises(DescError, match=rf"^{desc.OPERATOR}: introduced in feature level 6.3, not available "
                                            r"at feature level 6.2$"):
            validate(desc, "6.2")


@pytest.mark.parametrize("dt", [d.name for d in DataType])
def test_table_rows(dt):
    if dt not in Q_IN:
        with pytest.raises(DescError, match=rf"^Quantize: InputTensor DataType must be one of FLOAT32, FLOAT16 at "
                                            rf"feature level 6.3 \(got {dt}\)$"):
            validate(qdesc(x=dt), "6.3")
    if dt not in Q_OUT:
        with pytest.raises(DescError, match=rf"^Quantize: OutputTensor DataType must be one of INT8, INT4, UINT8, "
                                            rf"UINT4 at feature level 6.3 \(got {dt}\)$"):
            validate(qdesc(y=dt, zp=None), "6.3")
        with pytest.raises(DescError, match=rf"^Dequantize: InputTensor DataType must be one of INT8, INT4, UINT8, "
                                            rf"UINT4 at feature level 6.3 \(got {dt}\)$"):
            validate(ddesc(x=dt, zp=None), "6.3")
    if dt not in PARAM:
        with pytest.raises(DescError, match=rf"^Quantize: QuantizationTensors\[0\] DataType must be one of "
                                            rf"FLOAT32, FLOAT16, INT8, INT4, UINT8, UINT4 at feature level 6.3 "
                                            rf"\(got {dt}\)$"):
            validate(qdesc(scale=dt), "6.3")


@pytest.mark.parametrize("make,message", [
    (lambda: qdesc(kind="NONE"), r"QuantizationType must be SCALE or SCALE_ZERO_POINT \(got NONE\)"),
    (lambda: qdesc(kind="BOGUS"), r"QuantizationType must be SCALE or SCALE_ZERO_POINT \(got 'BOGUS'\)"),
    (lambda: qdesc(kind="SCALE"), r"QuantizationType SCALE takes QuantizationTensorCount = 1 QuantizationTensors "
                                  r"\(got count 2, 2 tensors\)"),
    (lambda: qdesc(count=1), r"takes QuantizationTensorCount = 2 QuantizationTensors \(got count 1, 2 tensors\)"),
    (lambda: qdesc(zp="INT8"), r"QuantizationTensors\[1\] \(the zero point\) and OutputTensor must have the same "
                               r"DataType \(got INT8 and INT4\)"),
    (lambda: ddesc(zp="UINT4"), r"QuantizationTensors\[1\] \(the zero point\) and InputTensor must have the same "
                                r"DataType \(got UINT4 and INT4\)"),
    (lambda: qdesc(scale="INT8"), r"QuantizationTensors\[0\] \(the scale\) DataType must be FLOAT32 or FLOAT16"),
    (lambda: qdesc(x="FLOAT16", scale="FLOAT32"), r"QuantizationTensors\[0\] \(the scale\) and InputTensor must "
                                                  r"have the same DataType \(got FLOAT32 and FLOAT16\)"),
    (lambda: qdesc(pshape=(2, 3)), r"QuantizationTensors\[0\] Sizes \(2, 3\) do not block InputTensor Sizes "
                                   r"\(2, 4\)"),
    (lambda: qdesc(pshape=(1, 2, 2)), r"InputTensor and QuantizationTensors\[0\] must have the same DimensionCount"),
    (lambda: QuantizeDesc(T("FLOAT32", (2, 4)), "SCALE_ZERO_POINT", None, [T("FLOAT32", (2, 2)), T("INT4", (2, 1))],
                          T("INT4", (2, 4))), r"QuantizationTensors\[1\] \(the zero point\) must have the scale's Sizes"),
    (lambda: QuantizeDesc(T("FLOAT32", (2, 4)), "SCALE", None, [T("FLOAT32", (2, 4))], T("INT4", (2, 2))),
     r"InputTensor and OutputTensor must have the same Sizes"),
    # the tensors a required field
    (lambda: QuantizeDesc(T("FLOAT32", (2, 4)), "SCALE", None, None, T("INT4", (2, 4))),
     r"QuantizationTensors is required"),
])
def test_rules(make, message):
    with pytest.raises(DescError, match=message):
        validate(make(), "6.3")


def test_count_of_another_type_is_a_type_error():
    """The count is a UINT (1.0 was taken as 1): a field of the wrong type, a TypeError."""
    with pytest.raises(TypeError, match=r"QuantizationTensorCount is a UINT: pass the int 1 \(got 1.0\)"):
        validate(QuantizeDesc(T("FLOAT32", (2, 4)), "SCALE", 1.0, [T("FLOAT32", (2, 1))], T("INT4", (2, 4))), "6.3")


def test_layout_rule_accepts_broadcast_full_and_divisor_blocks():
    for pshape in ((1, 1), (2, 4), (1, 4), (2, 1), (2, 2), (1, 2)):
        validate(qdesc(pshape=pshape), "6.3")


def test_int4_buffers_are_half_a_byte_per_element():
    assert T("INT4", (3, 3)).total_tensor_size_in_bytes == 8  # 36 bits -> 5 bytes -> multiple of 4
    assert T("UINT4", (9,)).minimum_size_in_bytes == 8 and T("UINT4", (8,)).minimum_size_in_bytes == 4
    assert DataType.of(md.int4) is DataType.INT4 and DataType.of("uint4") is DataType.UINT4


def _onnx_blocked(op, x, scale, zp, axis, block):
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = ["x", "s"] + ([] if zp is None else ["z"])
    node = helper.make_node(op, names, ["y"], axis=axis, block_size=block)
    vals = [x, scale] + ([] if zp is None else [zp])
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in zip(names, vals)]
    out_dt = (zp.dtype if zp is not None else np.dtype(np.uint8)) if op == "QuantizeLinear" else scale.dtype
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(out_dt), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, vals)))[0]


@pytest.mark.parametrize("qname", ["int4", "uint4", "int8", "uint8"])
@pytest.mark.parametrize("axis", [0, 1])
def test_bound_operators_equal_onnx_reference(qname, axis):
    rng = np.random.default_rng(7)
    qdt = np.dtype(getattr(md, qname, None) or qname)
    shape = (4, 6)
    block = 2
    pshape = tuple(n // block if i == axis else n for i, n in enumerate(shape))
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    s = rng.uniform(0.3, 2.0, pshape).astype(np.float32)
    info = md.iinfo(qdt) if qname.endswith("4") else np.iinfo(qdt)
    z = rng.integers(int(info.min), int(info.max) + 1, pshape).astype(qdt)
    dml = DataType.of(qdt).name
    desc = QuantizeDesc(T("FLOAT32", shape), "SCALE_ZERO_POINT", None, [T("FLOAT32", pshape), T(dml, pshape)],
                        T(dml, shape))
    got = dmlq.compile_operator(desc, "6.3")(x, s, z)
    want = _onnx_blocked("QuantizeLinear", x, s, z, axis, block)
    assert got.dtype == qdt and np.array_equal(got.astype(np.int32), want.astype(np.int32))
    ddesc_ = DequantizeDesc(T(dml, shape), "SCALE_ZERO_POINT", None, [T("FLOAT32", pshape), T(dml, pshape)],
                            T("FLOAT32", shape))
    back = dmlq.compile_operator(ddesc_, "6.3")(got, s, z)
    assert np.array_equal(back, _onnx_blocked("DequantizeLinear", got, s, z, axis, block))


def test_a_packed_operand_is_refused_naming_the_field():
    """A dmlq.Packed of NumPy bytes (two int4 per byte) is not what a descriptor binds on NumPy: a
    TypeError naming the field and the fix, not "unsupported array type Packed" (a Packed of CuPy
    bytes is the GPU form of an INT4/UINT4 tensor: tests/test_gpu_desc63.py)."""
    op = dmlq.compile_operator(DequantizeDesc(T("INT4", (2, 4)), "SCALE", None, [T("FLOAT32", (2, 1))],
                                         T("FLOAT32", (2, 4))), "6.3")
    q = (np.arange(8) - 4).reshape(2, 4).astype(md.int4)
    s = np.full((2, 1), 0.5, np.float32)
    assert np.array_equal(op(q, s), (np.arange(8) - 4).reshape(2, 4) * 0.5)
    with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is a dmlq.Packed of host bytes; on NumPy arrays a "
                                        r"descriptor binds one element per byte .* pass dmlq.unpack\(\) of it"):
        op(dmlq.pack(q), s)
    quant = dmlq.compile_operator(QuantizeDesc(T("FLOAT32", (2, 4)), "SCALE", None, [T("FLOAT32", (2, 1))],
                                          T("INT4", (2, 4))), "6.3")
    with pytest.raises(TypeError, match=r"^Quantize: OutputTensor is a dmlq.Packed of host bytes; .* "
                                        r"dmlq.pack the result"):
        quant(np.ones((2, 4), np.float32), s, out=dmlq.pack(q))
