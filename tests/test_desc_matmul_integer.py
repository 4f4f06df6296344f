"""DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC (dmlq.MatrixMultiplyIntegerDesc): DirectML's tensor
support tables (feature levels 2.1, 4.0 and 5.2) row by row, its tensor constraints, the shape rules,
and compile_operator running ONNX MatMulInteger's computation (onnxruntime's CPU provider)."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq.dtypes import DataType
from dmlq.errors import DescError

t = dmlq.TensorDesc
I8, U8 = np.dtype(np.int8), np.dtype(np.uint8)

# The "Tensor support" tables (learn.microsoft.com, DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC), transcribed
# a second time: level -> field -> (DimensionCounts, DataTypes).
_Q = {"INT8", "UINT8"}
TABLES = {
    "2.1": {"ATensor": ((4, 4), _Q), "AZeroPointTensor": ((4, 4), _Q), "BTensor": ((4, 4), _Q),
            "BZeroPointTensor": ((4, 4), _Q), "OutputTensor": ((4, 4), {"INT32"})},
    "4.0": {"ATensor": ((2, 4), _Q), "AZeroPointTensor": ((1, 4), _Q), "BTensor": ((2, 4), _Q),
            "BZeroPointTensor": ((2, 4), _Q), "OutputTensor": ((2, 4), {"INT32"})},
    "5.2": {"ATensor": ((2, 4), _Q), "AZeroPointTensor": ((1, 4), _Q), "BTensor": ((2, 4), _Q),
            "BZeroPointTensor": ((1, 4), _Q), "OutputTensor": ((2, 4), {"INT32"})},
}
# Each "Tensor constraints" bullet that ties DataTypes: (A, A's zero point), (B, B's zero point).
TYPE_GROUPS = (("ATensor", "AZeroPointTensor"), ("BTensor", "BZeroPointTensor"), ("OutputTensor",))
FIELDS = ("a_tensor", "a_zero_point_tensor", "b_tensor", "b_zero_point_tensor", "output_tensor")


def fields(types=None, ranks=None):
    """A valid desc's fields (M = 4, K = 5, N = 6, per-row and per-column zero points)."""
    shapes = {"ATensor": (4, 5), "AZeroPointTensor": (4, 1), "BTensor": (5, 6), "BZeroPointTensor": (1, 6),
              "OutputTensor": (4, 6)}
    types = {"ATensor": "UINT8", "AZeroPointTensor": "UINT8", "BTensor": "INT8", "BZeroPointTensor": "INT8",
             "OutputTensor": "INT32", **(types or {})}
    out = {}
    for name in FIELDS:
        f = dmlq.desc.dml_name(name)
        r = (ranks or {}).get(f, 4)
        shape = shapes[f]
        full = (1,) * max(r - len(shape), 0) + shape
        out[name] = t(types[f], full[len(full) - r:] if r < len(shape) else full)
    return out


@pytest.mark.parametrize("level", ["2.1", "4.0", "6.2"])
@pytest.mark.parametrize("group", TYPE_GROUPS, ids=lambda g: g[0])
def test_table_types_row_by_row(level, group):
    table = TABLES["5.2" if level == "6.2" else level]
    for dt in DataType:
        desc = dmlq.MatrixMultiplyIntegerDesc(**fields({f: dt.name for f in group}))
        if dt.name in table[group[0]][1]:
            dmlq.compile_operator(desc, feature_level=level)
        else:
            with pytest.raises(DescError, match="DataType must be one of"):
                dmlq.compile_operator(desc, feature_level=level)


@pytest.mark.parametrize("level", ["2.1", "4.0", "5.2"])
def test_table_ranks(level):
    lo, hi = TABLES[level]["ATensor"][0]
    data = ("ATensor", "BTensor", "OutputTensor")
    for r in range(1, 6):
        desc = dmlq.MatrixMultiplyIntegerDesc(**fields(ranks={f: r for f in data}))
        if lo <= r <= hi:
            dmlq.compile_operator(desc, feature_level=level)
        elif r >= 2 or level == "2.1":
            with pytest.raises(DescError, match="DimensionCount"):
                dmlq.compile_operator(desc, feature_level=level)
    # 1-D zero points: A's from 4.0, B's from 5.2 (4.0's row reads "2 to 4" for BZeroPointTensor)
    for field, one_d in (("AZeroPointTensor", dict(a_zero_point_tensor=t("UINT8", (4,)))),
                         ("BZeroPointTensor", dict(b_zero_point_tensor=t("INT8", (6,))))):
        zlo, zhi = TABLES[level][field][0]
        desc = dmlq.MatrixMultiplyIntegerDesc(**{**fields(), **one_d})
        if zlo == 1:
            dmlq.compile_operator(desc, feature_level=level)
        else:
            with pytest.raises(DescError, match=f"{field} DimensionCount must be"):
                dmlq.compile_operator(desc, feature_level=level)


@pytest.mark.parametrize("change,match", [
    (dict(a_zero_point_tensor=t("INT8", (1, 1, 4, 1))), "ATensor and AZeroPointTensor must have the same DataType"),
    (dict(b_zero_point_tensor=t("UINT8", (1, 1, 1, 6))), "BTensor and BZeroPointTensor must have the same DataType"),
    (dict(output_tensor=t("INT32", (4, 6))), "same DimensionCount"),
    (dict(b_tensor=t("INT8", (1, 1, 4, 6))), "K"),
    (dict(output_tensor=t("INT32", (1, 1, 4, 7))), "OutputTensor Sizes"),
    (dict(a_zero_point_tensor=t("UINT8", (1, 1, 1, 4))), "AZeroPointTensor Sizes"),
    (dict(b_zero_point_tensor=t("INT8", (1, 1, 6, 1))), "BZeroPointTensor Sizes"),
    (dict(a_tensor=t("UINT8", (3, 1, 4, 5))), "ATensor Sizes.0. must be 1 or OutputTensor's 1"),
])
def test_rules(change, match):
    dmlq.compile_operator(dmlq.MatrixMultiplyIntegerDesc(**fields()))
    with pytest.raises(DescError, match=match):
        dmlq.compile_operator(dmlq.MatrixMultiplyIntegerDesc(**{**fields(), **change}))


def test_feature_level_and_fields():
    desc = dmlq.MatrixMultiplyIntegerDesc(**fields())
    with pytest.raises(DescError, match="feature level 2.1"):
        dmlq.compile_operator(desc, feature_level="2.0")
    assert [dmlq.desc.dml_name(n) for n, _ in desc.tensor_fields()] == \
        ["ATensor", "AZeroPointTensor", "BTensor", "BZeroPointTensor", "OutputTensor"]
    with pytest.raises(DescError):
        dmlq.compile_operator(dmlq.MatrixMultiplyIntegerDesc(a_tensor=t("UINT8", (1, 1, 4, 5)),
                                                             output_tensor=t("INT32", (1, 1, 4, 6))))


def test_operator_equals_matmul_integer_and_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (2, 3, 4, 5)).astype(U8)
    b = rng.integers(-64, 64, (2, 3, 5, 6)).astype(I8)  # MLAS's u8s8 pair sums cannot saturate
    azp, bzp = np.full((1, 1, 1, 1), 7, U8), np.full((1, 1, 1, 1), -3, I8)
    op = dmlq.compile_operator(dmlq.MatrixMultiplyIntegerDesc(
        t("UINT8", a.shape), t("UINT8", azp.shape), t("INT8", b.shape), t("INT8", bzp.shape), t("INT32", (2, 3, 4, 6))))
    got = op(a, azp, b, bzp)
    np.testing.assert_array_equal(got, dmlq.matmul_integer(a, b, np.uint8(7), np.int8(-3)))
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    tp = helper.np_dtype_to_tensor_dtype
    feeds = {"a": a, "b": b, "az": azp.reshape(()), "bz": bzp.reshape(())}
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info(k, tp(v.dtype), v.shape)
                                              for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", tp(np.dtype(np.int32)), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_public_function_checks_through_the_descriptor():
    """matmul_integer's planner validates the same DirectML descriptor: its rules hold for every call."""
    with pytest.raises(TypeError, match="a_zero_point"):
        dmlq.matmul_integer(np.zeros((2, 3), U8), np.zeros((3, 2), I8), np.zeros((2, 1), np.float32))
    assert dmlq.matmul_integer(np.zeros((2, 3), U8), dmlq.pack(np.zeros((3, 2), dmlq.packed_b.I4))).shape == (2, 2)
