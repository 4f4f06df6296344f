"""Descriptor validation (dmlq.validation) against the seeds, row by row.

The tables here are a second, independent transcription of the seeds' "Tensor
support" tables (seed 003 from the Chinese text), in a different form from
dmlq/validation.py, so a typo in one shows up as a failure.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from dmlq import validation
from dmlq.desc import (DequantizeLinearDesc, QuantizedLinearAddDesc,
                       QuantizedLinearAveragePoolingDesc, QuantizedLinearMatrixMultiplyDesc,
                       QuantizeLinearDesc, TensorDesc, dml_name)
from dmlq.dtypes import DataType
from dmlq.errors import DescError
from dmlq.validation import parse_feature_level, validate

F32, F16, F64 = DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64
I8, I16, I32, I64 = DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64
U8, U16, U32, U64 = DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64
Q8 = {I8, U8}
INTS = {I32, I16, I8, U32, U16, U8}
IN, OPT, OUT = "Input", "Optional input", "Output"
R4, R18, R45, R15 = range(4, 5), range(1, 9), range(4, 6), range(1, 6)

LEVELS = ["1.0", "2.0", "2.1", "3.0", "3.1", "4.0", "4.1", "5.0", "5.1", "5.2",
          "6.0", "6.1", "6.2", "6.3", "6.4"]

QL, DQ, ADD, MM, POOL = ("QuantizeLinear", "DequantizeLinear", "QuantizedLinearAdd",
                         "QuantizedLinearMatrixMultiply", "QuantizedLinearAveragePooling")
CLASSES = {QL: QuantizeLinearDesc, DQ: DequantizeLinearDesc, ADD: QuantizedLinearAddDesc,
           MM: QuantizedLinearMatrixMultiplyDesc, POOL: QuantizedLinearAveragePoolingDesc}
INTRO = {QL: "1.0", DQ: "1.0", ADD: "4.0", MM: "2.1", POOL: "6.2"}


def _ew(dims, in_types, scale_types, zp_types, out_types, zp_kind=IN):
    return {"InputTensor": (IN, dims, in_types), "ScaleTensor": (IN, dims, scale_types),
            "ZeroPointTensor": (zp_kind, dims, zp_types), "OutputTensor": (OUT, dims, out_types)}


def _binary(dims):
    rows = {}
    for p in ("A", "B", "Output"):
        if p != "Output":
            rows[f"{p}Tensor"] = (IN, dims, Q8)
        rows[f"{p}ScaleTensor"] = (IN, dims, {F32})
        rows[f"{p}ZeroPointTensor"] = (OPT, dims, Q8)
    rows["OutputTensor"] = (OUT, dims, Q8)
    return rows


# op -> level -> field -> (kind, supported DimensionCounts, supported DataTypes)
TABLES = {
    QL: {
        "1.0": _ew(R4, {F32}, {F32}, {U8}, {U8}),
        "2.1": _ew(R4, {F32, I32}, {F32}, Q8, Q8),
        "3.0": _ew(R18, {F32, I32}, {F32}, Q8, Q8),
        "6.0": _ew(R18, {F32, F16, I32}, {F32, F16}, Q8, Q8),
        "6.2": _ew(R18, {F32, F16, I32}, {F32, F16}, Q8, Q8, zp_kind=OPT),
    },
    DQ: {
        "1.0": _ew(R4, {U8}, {F32}, {U8}, {F32}),
        "2.1": _ew(R4, INTS, {F32}, INTS, {F32}),
        "3.0": _ew(R18, INTS, {F32}, INTS, {F32}),
        "6.0": _ew(R18, INTS, {F32, F16}, INTS, {F32, F16}),
        "6.2": _ew(R18, INTS, {F32, F16}, INTS, {F32, F16}, zp_kind=OPT),
    },
    ADD: {"4.0": _binary(R18)},
    MM: {"2.1": _binary(R4)},
    POOL: {"6.2": {
        "InputTensor": (IN, R45, Q8),
        "InputScaleTensor": (IN, R15, {F32}),
        "InputZeroPointTensor": (OPT, R15, Q8),
        "OutputScaleTensor": (IN, R15, {F32}),
        "OutputZeroPointTensor": (OPT, R15, Q8),
        "OutputTensor": (OUT, R45, Q8),
    }},
}
FIELDS = {op: list(next(iter(t.values()))) for op, t in TABLES.items()}

# Fields that the "Tensor constraints" bullets tie to one DataType.
LINKED = {
    QL: [("OutputTensor", "ZeroPointTensor")],
    DQ: [("InputTensor", "ZeroPointTensor"), ("OutputTensor", "ScaleTensor")],
    ADD: [("ATensor", "AZeroPointTensor"), ("BTensor", "BZeroPointTensor"),
          ("OutputTensor", "OutputZeroPointTensor")],
    POOL: [("InputTensor", "InputZeroPointTensor"), ("OutputTensor", "OutputZeroPointTensor")],
}
LINKED[MM] = LINKED[ADD]

DEFAULT_TYPES = {
    QL: dict(InputTensor=F32, ScaleTensor=F32, ZeroPointTensor=U8, OutputTensor=U8),
    DQ: dict(InputTensor=U8, ScaleTensor=F32, ZeroPointTensor=U8, OutputTensor=F32),
}
for _op in (ADD, MM, POOL):
    DEFAULT_TYPES[_op] = {f: (F32 if "Scale" in f else U8) for f in FIELDS[_op]}


def level_index(level):
    return LEVELS.index(level)


def expected_table(op, level):
    """The latest table at or below ``level``."""
    usable = [lv for lv in TABLES[op] if level_index(lv) <= level_index(level)]
    return TABLES[op][max(usable, key=level_index)]


def usable_levels(op):
    return [lv for lv in LEVELS if level_index(lv) >= level_index(INTRO[op])]


def snake(field):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", field).lower()


SHAPE8 = (2, 3, 1, 4, 2, 1, 3, 2)


def build(op, dtypes=None, rank=None, field_rank=None, drop=(), sizes=None, **extra):
    """A valid desc of ``op`` (at every level where the op exists, with the defaults),
    with DataType overrides, a rank for the whole desc, one-filled Sizes of another
    rank for single fields, dropped (None) fields and explicit Sizes."""
    types = {**DEFAULT_TYPES[op], **(dtypes or {})}
    if op in (QL, DQ):
        r = rank or 4
        shp = {f: SHAPE8[:r] for f in FIELDS[op]}
    elif op == ADD:
        r = rank or 4
        shp = {f: SHAPE8[:r] if f in ("ATensor", "BTensor", "OutputTensor") else (1,) * r
               for f in FIELDS[op]}
    elif op == MM:
        shp = {f: (1, 1, 1, 1) for f in FIELDS[op]}
        shp.update(ATensor=(2, 3, 4, 5), BTensor=(2, 3, 5, 6), OutputTensor=(2, 3, 4, 6))
    else:
        r = rank or 4
        shp = {f: (1, 1, 1, 1) for f in FIELDS[op]}
        shp.update(InputTensor=(2, 3, 6, 7) if r == 4 else (2, 3, 5, 6, 7),
                   OutputTensor=(2, 3, 3, 3) if r == 4 else (2, 3, 2, 3, 3))
        dc = r - 2
        extra = {**dict(dimension_count=dc, strides=(2,) * dc, window_size=(2,) * dc,
                        start_padding=(0,) * dc, end_padding=(0,) * dc, dilations=(1,) * dc,
                        include_padding=False), **extra}
    for f, n in (field_rank or {}).items():
        shp[f] = (1,) * n
    shp.update(sizes or {})
    tensors = {snake(f): None if f in drop else TensorDesc(types[f], shp[f])
               for f in FIELDS[op]}
    return CLASSES[op](**tensors, **extra)


def consistent_types(op, field, dt):
    """DataTypes that give ``field`` the type ``dt`` without breaking a bullet."""
    types = {field: dt}
    for group in LINKED[op]:
        if field in group:
            types.update({f: dt for f in group})
    if op == QL and field == "InputTensor":
        types["ScaleTensor"] = F32 if dt == I32 else dt
    if op == QL and field == "ScaleTensor":
        types["InputTensor"] = dt
    return types


def dims_text(dims):
    return str(dims[0]) if len(dims) == 1 else f"{dims[0]} to {dims[-1]}"


def row_cases(kind):
    """Parameters for the row-by-row tests, over the levels the seeds list."""
    cases = []
    for op, tables in TABLES.items():
        for level, table in tables.items():
            for field, (_, dims, types) in table.items():
                if kind == "ok_type":
                    cases += [pytest.param(op, level, field, dt, id=f"{op}-{level}-{field}-{dt.name}")
                              for dt in DataType if dt in types]
                elif kind == "bad_type":
                    cases += [pytest.param(op, level, field, dt, id=f"{op}-{level}-{field}-{dt.name}")
                              for dt in DataType if dt not in types]
                elif kind == "ok_dims":
                    cases += [pytest.param(op, level, field, n, id=f"{op}-{level}-{field}-{n}")
                              for n in sorted({dims[0], dims[-1]})]
                else:
                    cases += [pytest.param(op, level, field, n, dims, id=f"{op}-{level}-{field}-{n}")
                              for n in (dims[0] - 1, dims[-1] + 1)]
    return cases


def desc_with_rank(op, field, n):
    """A desc whose ``field`` has ``n`` dimensions and is otherwise valid."""
    if op == POOL and "Scale" not in field and "ZeroPoint" not in field:
        return build(op, rank=n)
    if op == POOL:
        return build(op, field_rank={field: n})
    if op == MM:
        return build(op)
    return build(op, rank=n)


# ---------------------------------------------------------------- the tables, row by row

def test_tables_match_desc_fields():
    for op, cls in CLASSES.items():
        assert FIELDS[op] == [dml_name(f.name) for f in dataclasses.fields(cls)
                              if f.name.endswith("_tensor")]
        assert cls.OPERATOR == op and cls.FEATURE_LEVEL == INTRO[op]


@pytest.mark.parametrize("op,level,field,dt", row_cases("ok_type"))
def test_supported_data_type_accepted(op, level, field, dt):
    validate(build(op, consistent_types(op, field, dt)), level)


@pytest.mark.parametrize("op,level,field,dt", row_cases("bad_type"))
def test_unsupported_data_type_refused(op, level, field, dt):
    with pytest.raises(DescError, match=rf"^{op}: {field} DataType must be one of [A-Z0-9, ]+ "
                                        rf"at feature level {level} \(got {dt.name}\)$"):
        validate(build(op, {field: dt}), level)


@pytest.mark.parametrize("op,level,field,n", row_cases("ok_dims"))
def test_supported_dimension_count_accepted(op, level, field, n):
    desc = desc_with_rank(op, field, n)
    assert getattr(desc, snake(field)).dimension_count == n
    validate(desc, level)


@pytest.mark.parametrize("op,level,field,n,dims", row_cases("bad_dims"))
def test_dimension_count_just_outside_refused(op, level, field, n, dims):
    if not 1 <= n <= 8:  # TensorDesc itself holds DirectML's 1..8 limit
        with pytest.raises(DescError, match=rf"TensorDesc: DimensionCount must be 1 to 8 \(got {n}\)"):
            build(op, field_rank={field: n})
        return
    with pytest.raises(DescError, match=rf"^{op}: {field} DimensionCount must be "
                                        rf"{dims_text(dims)} at feature level {level} \(got {n}\)$"):
        validate(build(op, field_rank={field: n}), level)


@pytest.mark.parametrize("op,level", [pytest.param(op, lv, id=f"{op}-{lv}")
                                      for op in TABLES for lv in usable_levels(op)])
def test_every_feature_level_uses_latest_table(op, level):
    """All 15 DirectML levels: the latest listed table at or below the level applies."""
    table = expected_table(op, level)
    for field, (kind, dims, types) in table.items():
        for dt in DataType:
            desc = build(op, consistent_types(op, field, dt) if dt in types else {field: dt})
            if dt in types:
                validate(desc, level)
            else:
                with pytest.raises(DescError, match=rf"{op}: {field} DataType"):
                    validate(desc, level)
        for n in (dims[0], dims[-1]):
            validate(desc_with_rank(op, field, n), level)
        for n in (dims[0] - 1, dims[-1] + 1):
            if 1 <= n <= 8:
                with pytest.raises(DescError, match=rf"{op}: {field} DimensionCount"):
                    validate(build(op, field_rank={field: n}), level)
        dropped = build(op, drop=(field,))
        if kind == OPT:
            validate(dropped, level)
        else:
            with pytest.raises(DescError, match=rf"^{op}: {field} is required"):
                validate(dropped, level)


# ---------------------------------------------------------------- optional / required

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("op", [QL, DQ])
def test_zero_point_optional_from_6_2(op, level):
    desc = build(op, drop=("ZeroPointTensor",))
    if level_index(level) >= level_index("6.2"):
        validate(desc, level)
    else:
        with pytest.raises(DescError, match=rf"^{op}: ZeroPointTensor is required"):
            validate(desc, level)


@pytest.mark.parametrize("op", [ADD, MM, POOL])
def test_all_optional_zero_points_omitted(op):
    validate(build(op, drop=[f for f in FIELDS[op] if "ZeroPoint" in f]))


@pytest.mark.parametrize("op,field", [pytest.param(op, f, id=f"{op}-{f}")
                                      for op in TABLES for f in FIELDS[op]
                                      if "ZeroPoint" not in f])
def test_required_tensor_missing(op, field):
    with pytest.raises(DescError, match=rf"^{op}: {field} is required"):
        validate(build(op, drop=(field,)))


# ---------------------------------------------------------------- feature levels

def test_feature_level_list_and_default():
    assert tuple(validation.FEATURE_LEVELS) == tuple(LEVELS)
    assert validation.DEFAULT_FEATURE_LEVEL == "6.2"
    validate(build(QL, drop=("ZeroPointTensor",)))  # default 6.2: optional
    validate(build(POOL))                           # default 6.2: pooling exists
    with pytest.raises(DescError, match="ZeroPointTensor is required"):
        validate(build(QL, drop=("ZeroPointTensor",)), "6.1")


@pytest.mark.parametrize("level", LEVELS)
def test_feature_level_spellings(level):
    major, minor = level.split(".")
    for spelling in (level, f"{major}_{minor}", float(level), f"DML_FEATURE_LEVEL_{major}_{minor}",
                     np.float64(level)):
        assert parse_feature_level(spelling) == level
    validate(build(QL), f"DML_FEATURE_LEVEL_{major}_{minor}")


@pytest.mark.parametrize("bad", ["7.0", "6.5", "1.1", "6", "6.2.0", "", "six", "DML_FEATURE_LEVEL_6",
                                 "DML_FEATURE_LEVEL_6_2_1", 6, 62, 6.25, None, True, (6, 2),
                                 np.float32(6.2)])
def test_feature_level_refused(bad):
    with pytest.raises(DescError, match="feature level"):
        parse_feature_level(bad)
    with pytest.raises(DescError, match="feature level"):
        validate(build(QL), bad)


@pytest.mark.parametrize("op,level", [pytest.param(op, lv, id=f"{op}-{lv}") for op in TABLES
                                      for lv in LEVELS if level_index(lv) < level_index(INTRO[op])])
def test_operator_below_introducing_level(op, level):
    with pytest.raises(DescError, match=rf"^{op}: .*{re.escape(INTRO[op])}.*{re.escape(level)}"):
        validate(build(op), level)


@pytest.mark.parametrize("op", list(TABLES))
def test_operator_at_introducing_level(op):
    validate(build(op), INTRO[op])


# ---------------------------------------------------------------- types

@pytest.mark.parametrize("obj", [object(), None, TensorDesc(U8, (1,)), "QuantizeLinear"])
def test_not_a_desc(obj):
    with pytest.raises(TypeError):
        validate(obj)


@pytest.mark.parametrize("op,field", [pytest.param(op, f, id=f"{op}-{f}")
                                      for op in TABLES for f in FIELDS[op]])
@pytest.mark.parametrize("bad", [3, np.zeros((1, 1, 1, 1), np.uint8), "UINT8"])
def test_tensor_field_not_a_tensor_desc(op, field, bad):
    desc = dataclasses.replace(build(op), **{snake(field): bad})
    with pytest.raises(TypeError, match=rf"{op}: {field} must be a TensorDesc or None"):
        validate(desc)


# ---------------------------------------------------------------- constraint bullets

def test_quantize_example_message():
    desc = build(QL, {"ZeroPointTensor": I8})
    with pytest.raises(DescError, match=r"^QuantizeLinear: OutputTensor and ZeroPointTensor must "
                                        r"have the same DataType \(got UINT8 and INT8\)$"):
        validate(desc)


SAME_TYPE_BULLETS = [(op, a, b) for op, groups in LINKED.items() for a, b in groups]


@pytest.mark.parametrize("op,a,b", [pytest.param(*c, id="-".join(c)) for c in SAME_TYPE_BULLETS])
@pytest.mark.parametrize("which", [0, 1])
def test_same_data_type_bullet(op, a, b, which):
    field = (a, b)[which]
    other = (a, b)[1 - which]
    new = {U8: I8, F32: F16, I8: U8}[DEFAULT_TYPES[op][field]]
    desc = build(op, {field: new})
    pair = rf"({field} and {other}|{other} and {field})"
    with pytest.raises(DescError, match=rf"^{op}: {pair} must have the same DataType "
                                        rf"\(got [A-Z0-9]+ and [A-Z0-9]+\)$"):
        validate(desc)


@pytest.mark.parametrize("op,field", [pytest.param(op, f, id=f"{op}-{f}")
                                      for op in (QL, DQ, ADD) for f in FIELDS[op]])
def test_same_dimension_count_bullet(op, field):
    desc = build(op, field_rank={field: 3})
    with pytest.raises(DescError, match=rf"^{op}: (\w+ and )?{field}( and \w+)? must have the "
                                        rf"same DimensionCount \(got \d and \d\)$"):
        validate(desc)


def test_pooling_input_output_same_dimension_count_bullet():
    desc = build(POOL, sizes={"OutputTensor": (2, 3, 3, 3, 1)})
    with pytest.raises(DescError, match=r"^QuantizedLinearAveragePooling: InputTensor and "
                                        r"OutputTensor must have the same DimensionCount"):
        validate(desc)


@pytest.mark.parametrize("op,field", [pytest.param(op, f, id=f"{op}-{f}")
                                      for op in (QL, DQ) for f in FIELDS[op]])
def test_same_sizes_bullet(op, field):
    desc = build(op, sizes={field: (2, 3, 1, 5)})
    with pytest.raises(DescError, match=rf"^{op}: (\w+ and )?{field}( and \w+)? must have the "
                                        rf"same Sizes \(got \(.*\) and \(.*\)\)$"):
        validate(desc)


@pytest.mark.parametrize("op", [QL, DQ])
def test_elementwise_broadcast_through_strides(op):
    """DirectML broadcasts with equal Sizes and stride-0 inputs; that passes."""
    zeros = TensorDesc(DEFAULT_TYPES[op]["ScaleTensor"], SHAPE8[:4], strides=(0, 0, 0, 0))
    row = TensorDesc(DEFAULT_TYPES[op]["ZeroPointTensor"], SHAPE8[:4], strides=(0, 1, 0, 0))
    validate(dataclasses.replace(build(op), scale_tensor=zeros, zero_point_tensor=row))


# ---------------------------------------------------------------- QuantizeLinear scale type

@pytest.mark.parametrize("level", ["6.0", "6.2"])
@pytest.mark.parametrize("x,s,ok", [(F32, F32, True), (F16, F16, True), (I32, F32, True),
                                    (I32, F16, False), (F16, F32, False), (F32, F16, False)])
def test_quantize_scale_data_type(level, x, s, ok):
    desc = build(QL, {"InputTensor": x, "ScaleTensor": s})
    if ok:
        validate(desc, level)
        return
    msg = ("ScaleTensor must be FLOAT32 when InputTensor is INT32 \\(got FLOAT16\\)" if x == I32 else
           rf"ScaleTensor and InputTensor must have the same DataType \(got {s.name} and {x.name}\)")
    with pytest.raises(DescError, match="^QuantizeLinear: " + msg):
        validate(desc, level)


@pytest.mark.parametrize("level", ["2.1", "3.0"])
def test_quantize_int32_input_float32_scale(level):
    validate(build(QL, {"InputTensor": I32}), level)


# ---------------------------------------------------------------- QuantizedLinearAdd

@pytest.mark.parametrize("a,b,out", [((2, 3), (2, 3), (2, 3)), ((1, 3), (2, 1), (2, 3)),
                                     ((1, 1), (1, 1), (4, 5)), ((2, 1, 4), (1, 3, 1), (2, 3, 4)),
                                     ((1, 3), (0, 3), (0, 3)), ((7,), (7,), (7,))])
def test_add_broadcast_accepted(a, b, out):
    r = len(out)
    validate(build(ADD, rank=r, sizes={"ATensor": a, "BTensor": b, "OutputTensor": out}))


@pytest.mark.parametrize("a,b,out,bad", [((2, 4), (2, 3), (2, 3), "ATensor"),
                                         ((2, 3), (3, 3), (2, 3), "BTensor"),
                                         ((3, 3), (1, 3), (1, 3), "ATensor"),
                                         ((2, 3), (2, 2), (2, 3), "BTensor"),
                                         ((1, 3), (2, 3), (0, 3), "BTensor")])
def test_add_broadcast_refused(a, b, out, bad):
    desc = build(ADD, rank=2, sizes={"ATensor": a, "BTensor": b, "OutputTensor": out})
    with pytest.raises(DescError, match=rf"^QuantizedLinearAdd: {bad} Sizes .* must broadcast to "
                                        rf"OutputTensor Sizes"):
        validate(desc)


def test_add_directml_stride_broadcast_accepted():
    a = TensorDesc(U8, (2, 3, 1, 4), strides=(0, 1, 0, 0))
    validate(dataclasses.replace(build(ADD), a_tensor=a))


@pytest.mark.parametrize("field", [f for f in FIELDS[ADD] if "Scale" in f or "ZeroPoint" in f])
@pytest.mark.parametrize("sizes", [(1, 1, 1, 2), (1, 3, 1, 1), (1, 1, 1, 0)])
def test_add_scale_and_zero_point_one_element(field, sizes):
    desc = build(ADD, sizes={field: sizes})
    with pytest.raises(DescError, match=rf"^QuantizedLinearAdd: {field} must have exactly 1 element"):
        validate(desc)


# ---------------------------------------------------------------- QuantizedLinearMatrixMultiply

@pytest.mark.parametrize("a,b,out", [
    ((2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 4, 6)),
    ((1, 3, 4, 5), (2, 1, 5, 6), (2, 3, 4, 6)),
    ((1, 1, 4, 5), (1, 1, 5, 6), (2, 3, 4, 6)),
    ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1)),
    ((2, 3, 4, 0), (2, 3, 0, 6), (2, 3, 4, 6)),
])
def test_matmul_shapes_accepted(a, b, out):
    m, n = out[2], out[3]
    validate(build(MM, sizes={"ATensor": a, "BTensor": b, "OutputTensor": out,
                              "AScaleTensor": (1, 1, m, 1), "BScaleTensor": (1, 1, 1, n)}))


@pytest.mark.parametrize("a,b,out,match", [
    ((2, 3, 4, 5), (2, 3, 7, 6), (2, 3, 4, 6), r"ATensor Sizes\[3\] and BTensor Sizes\[2\] \(K\)"),
    ((2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 5, 6), r"OutputTensor Sizes\[2:\] must be \(M, N\)"),
    ((2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 4, 7), r"OutputTensor Sizes\[2:\] must be \(M, N\)"),
    ((3, 3, 4, 5), (2, 3, 5, 6), (2, 3, 4, 6), r"ATensor Sizes\[0\] \(BatchCount\)"),
    ((2, 2, 4, 5), (2, 3, 5, 6), (2, 3, 4, 6), r"ATensor Sizes\[1\] \(ChannelCount\)"),
    ((2, 3, 4, 5), (4, 3, 5, 6), (2, 3, 4, 6), r"BTensor Sizes\[0\] \(BatchCount\)"),
    ((2, 3, 4, 5), (2, 2, 5, 6), (2, 3, 4, 6), r"BTensor Sizes\[1\] \(ChannelCount\)"),
    ((2, 3, 4, 5), (2, 3, 5, 6), (1, 3, 4, 6), r"ATensor Sizes\[0\] \(BatchCount\)"),
])
def test_matmul_shapes_refused(a, b, out, match):
    desc = build(MM, sizes={"ATensor": a, "BTensor": b, "OutputTensor": out})
    with pytest.raises(DescError, match="^QuantizedLinearMatrixMultiply: " + match):
        validate(desc)


# M = 4, N = 6 in build(MM).
PER_ROW_OK, PER_ROW_BAD = [(1, 1, 1, 1), (1, 1, 4, 1)], [(1, 1, 1, 6), (1, 1, 4, 6), (4, 1, 1, 1),
                                                         (1, 4, 1, 1), (1, 1, 2, 1), (1, 1, 1, 4)]
PER_COL_OK, PER_COL_BAD = [(1, 1, 1, 1), (1, 1, 1, 6)], [(1, 1, 4, 1), (1, 1, 1, 4), (1, 1, 4, 6),
                                                         (6, 1, 1, 1), (1, 1, 6, 1)]


def _scale_cases():
    cases = []
    for field in FIELDS[MM]:
        if "Scale" not in field and "ZeroPoint" not in field:
            continue
        ok, bad = (PER_COL_OK, PER_COL_BAD) if field.startswith("B") else (PER_ROW_OK, PER_ROW_BAD)
        cases += [pytest.param(field, s, True, id=f"{field}-{s}-ok") for s in ok]
        cases += [pytest.param(field, s, False, id=f"{field}-{s}-bad") for s in bad]
    return cases


@pytest.mark.parametrize("field,sizes,ok", _scale_cases())
def test_matmul_scale_and_zero_point_shapes(field, sizes, ok):
    desc = build(MM, sizes={field: sizes})
    if ok:
        validate(desc)
        return
    axis = "column" if field.startswith("B") else "row"
    with pytest.raises(DescError, match=rf"^QuantizedLinearMatrixMultiply: {field} Sizes must be "
                                        rf"\(1, 1, 1, 1\) \(per tensor\) or .* \(per {axis}\)"):
        validate(desc)


# ---------------------------------------------------------------- QuantizedLinearAveragePooling

def pool(in_spatial, out_spatial, window, strides=None, start=None, end=None, dil=None,
         n=2, c=3, out_nc=None, include_padding=False, **scales):
    dc = len(in_spatial)
    sizes = {"InputTensor": (n, c, *in_spatial),
             "OutputTensor": (*(out_nc or (n, c)), *out_spatial), **scales}
    return build(POOL, rank=dc + 2, sizes=sizes, window_size=tuple(window),
                 strides=tuple(strides or (1,) * dc), start_padding=tuple(start or (0,) * dc),
                 end_padding=tuple(end or (0,) * dc), dilations=tuple(dil or (1,) * dc),
                 include_padding=include_padding)


def floor_ceil(size, window, stride, start, end, dil):
    """Independent statement of docs/semantics.md's output sizes (floor, ceil)."""
    extent = (window - 1) * dil + 1
    f = (size + start + end - extent) // stride + 1
    return f, f + 1 if f * stride < size + start else f


# (in, window, stride, start, end, dilation, accepted outputs, refused outputs); 1-D specs
# applied to every spatial dim. Where (padded - extent) % stride == 0, ONNX/PyTorch ceil mode
# equals floor mode but docs/semantics.md's rule gives floor + 1; those cases test only floor and
# sizes both rules refuse.
POOL_GEOMETRY = [
    (7, 2, 2, 0, 0, 1, [3, 4], [2, 5]),       # ceil mode: last window starts at 6 < 7
    (6, 2, 2, 0, 1, 1, [3], [2, 4]),          # extra window would start in end padding
    (6, 2, 2, 0, 0, 1, [3], [2, 4]),
    (7, 3, 1, 0, 0, 2, [3], [2]),             # dilation: extent 5
    (5, 3, 3, 2, 2, 2, [2, 3], [1, 4]),       # dilation with padding: extent 5, padded 9
    (4, 3, 1, 1, 0, 2, [1], [0, 3]),          # dilated window exactly the padded size
    (6, 6, 1, 0, 0, 1, [1], [0, 3]),          # window equal to the whole image
    (3, 4, 1, 2, 2, 1, [4], [3, 6]),          # windows entirely inside padding
    (5, 1, 1, 0, 0, 1, [5], [4, 6]),
    (1, 1, 5, 0, 4, 1, [1], [0, 2]),          # stride larger than the input
]


@pytest.mark.parametrize("size,w,s,sp,ep,d,ok,bad", POOL_GEOMETRY)
def test_pool_output_sizes(size, w, s, sp, ep, d, ok, bad):
    f, c = floor_ceil(size, w, s, sp, ep, d)
    exact = (size + sp + ep - (w - 1) * d - 1) % s == 0
    assert f in ok and (exact or c in ok) and c not in bad
    for dc in (2, 3):
        args = dict(window=(w,) * dc, strides=(s,) * dc, start=(sp,) * dc, end=(ep,) * dc,
                    dil=(d,) * dc)
        for o in ok:
            validate(pool((size,) * dc, (o,) * dc, **args))
            # one spatial dim off, the others fine
            validate(pool((size,) * dc, (f,) * (dc - 1) + (o,), **args))
        for o in bad:
            for i in range(dc):
                out = [f] * dc
                out[i] = o
                with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: OutputTensor "
                                                    rf"Sizes\[{i + 2}\] must be {f}"):
                    validate(pool((size,) * dc, tuple(out), **args))


def test_pool_mixed_floor_and_ceil():
    validate(pool((7, 7), (3, 4), window=(2, 2), strides=(2, 2)))
    validate(pool((7, 6, 7), (4, 3, 3), window=(2, 2, 2), strides=(2, 2, 2)))


@pytest.mark.parametrize("size,w,sp,ep,d", [(4, 3, 0, 0, 2), (2, 3, 0, 0, 1), (1, 2, 0, 0, 1),
                                           (3, 2, 0, 0, 3), (0, 1, 0, 0, 1), (2, 4, 1, 0, 1)])
def test_pool_window_larger_than_padded_input(size, w, sp, ep, d):
    desc = pool((size, 5), (1, 5), window=(w, 1), start=(sp, 0), end=(ep, 0), dil=(d, 1))
    with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: WindowSize\[0\] = {w} "
                                        rf"with Dilations\[0\] = {d} spans {(w - 1) * d + 1} "
                                        rf"elements, more than the padded InputTensor size"):
        validate(desc)


def test_pool_3d_and_include_padding():
    validate(pool((5, 6, 7), (3, 3, 4), window=(3, 2, 2), strides=(2, 2, 2), start=(1, 0, 1),
                  end=(1, 0, 0), dil=(1, 1, 1), include_padding=True))
    validate(pool((5, 6), (5, 6), window=(3, 3), start=(1, 1), end=(1, 1), include_padding=True))
    validate(dataclasses.replace(build(POOL), include_padding=np.bool_(True)))


@pytest.mark.parametrize("dc", [4, 1, 0, -1])
def test_pool_dimension_count_refused(dc):
    desc = dataclasses.replace(build(POOL), dimension_count=dc)
    with pytest.raises(DescError, match=r"^QuantizedLinearAveragePooling: DimensionCount must be "
                                        r"2 or 3"):
        validate(desc)


@pytest.mark.parametrize("dc", [True, 2.0, "2"])
def test_pool_dimension_count_of_another_type(dc):
    desc = dataclasses.replace(build(POOL), dimension_count=dc)
    with pytest.raises(TypeError, match=r"^QuantizedLinearAveragePooling: DimensionCount is a UINT"):
        validate(desc)


def test_pool_dimension_count_missing():
    desc = dataclasses.replace(build(POOL), dimension_count=None)
    with pytest.raises(DescError, match="DimensionCount is required"):
        validate(desc)


def test_pool_dimension_count_4_with_6d_input():
    desc = dataclasses.replace(pool((2, 2), (1, 1), window=(2, 2)), dimension_count=4,
                               input_tensor=TensorDesc(U8, (1, 1, 2, 2, 2, 2)))
    with pytest.raises(DescError, match=r"InputTensor DimensionCount must be 4 to 5"):
        validate(desc)


@pytest.mark.parametrize("rank,dc", [(4, 3), (5, 2)])
def test_pool_input_rank_must_be_dimension_count_plus_2(rank, dc):
    desc = dataclasses.replace(build(POOL, rank=rank), dimension_count=dc)
    with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: InputTensor must have "
                                        rf"DimensionCount \+ 2 = {dc + 2} dimensions \(got {rank}\)"):
        validate(desc)


ARRAYS = ["strides", "window_size", "start_padding", "end_padding", "dilations"]


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("delta", [-1, 1])
def test_pool_array_length(name, rank, delta):
    dc = rank - 2
    value = (1 if name != "start_padding" and name != "end_padding" else 0,) * (dc + delta)
    desc = dataclasses.replace(build(POOL, rank=rank), **{name: value})
    with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: {dml_name(name)} must "
                                        rf"have DimensionCount \({dc}\) elements \(got {dc + delta}"):
        validate(desc)


@pytest.mark.parametrize("name,value,match", [
    ("strides", (0, 2), r"Strides values must be >= 1"),
    ("strides", (2, -1), r"Strides values must be >= 1"),
    ("window_size", (0, 2), r"WindowSize values must be >= 1"),
    ("dilations", (1, 0), r"Dilations values must be >= 1"),
    ("start_padding", (-1, 0), r"StartPadding values must be >= 0"),
    ("end_padding", (0, -2), r"EndPadding values must be >= 0"),
    ("strides", (2, 2**32), r"Strides values must fit in a UINT"),
    ("strides", (2, 1.5), r"Strides must hold integers"),
    ("window_size", (True, 2), r"WindowSize must hold integers"),
    ("dilations", ("1", 1), r"Dilations must hold integers"),
    ("start_padding", 0, r"StartPadding must be a sequence"),
    ("strides", 2, r"Strides must be a sequence"),
    ("end_padding", None, r"EndPadding is required"),
    ("strides", None, r"Strides is required"),
    ("window_size", None, r"WindowSize is required"),
    ("start_padding", None, r"StartPadding is required"),
    ("dilations", None, r"Dilations is required"),
])
def test_pool_array_values(name, value, match):
    """A value that breaks a rule is a DescError; a field of the wrong type (a float, a bool, a
    string, one int for a UINT array) a TypeError, as compile_operator's docstring says."""
    desc = dataclasses.replace(build(POOL), **{name: value})
    kind = TypeError if "hold integers" in match or "be a sequence" in match else DescError
    with pytest.raises(kind, match="^QuantizedLinearAveragePooling: " + match):
        validate(desc)


def test_pool_arrays_accept_lists_and_numpy_ints():
    desc = dataclasses.replace(build(POOL), strides=[2, 2], window_size=np.array([2, 2]),
                               dilations=(np.int64(1), np.uint32(1)))
    validate(desc)


@pytest.mark.parametrize("value,kind,match", [(None, TypeError, "is a BOOL"), ("yes", TypeError, "is a BOOL"),
                                              (1.0, TypeError, "is a BOOL"), (2, DescError, r"must be TRUE \(1\) or FALSE")])
def test_pool_include_padding_is_a_bool(value, kind, match):
    desc = dataclasses.replace(build(POOL), include_padding=value)
    with pytest.raises(kind, match=r"^QuantizedLinearAveragePooling: IncludePadding " + match):
        validate(desc)


@pytest.mark.parametrize("value", [True, False, 1, 0, np.int32(1), np.bool_(False)])
def test_pool_include_padding_takes_a_dml_bool(value):
    """DML's BOOL is an int: a DirectML programmer writes 1 or 0."""
    validate(dataclasses.replace(build(POOL), include_padding=value))


@pytest.mark.parametrize("out_nc,i,what", [((3, 3), 0, "BatchCount"), ((2, 4), 1, "ChannelCount"),
                                           ((1, 3), 0, "BatchCount"), ((2, 1), 1, "ChannelCount")])
def test_pool_batch_and_channel(out_nc, i, what):
    desc = pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), out_nc=out_nc)
    with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: OutputTensor "
                                        rf"Sizes\[{i}\] \({what}\) must equal InputTensor's"):
        validate(desc)


POOL_QUANT_FIELDS = [f for f in FIELDS[POOL] if "Scale" in f or "ZeroPoint" in f]


@pytest.mark.parametrize("field", POOL_QUANT_FIELDS)
@pytest.mark.parametrize("sizes", [(1,), (1, 1, 1, 1), (1, 1, 1, 1, 1), (3,), (1, 3), (1, 3, 1, 1),
                                   (1, 3, 1, 1, 1), (1, 3, 1)])
def test_pool_per_tensor_and_per_channel_accepted(field, sizes):
    validate(pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), c=3, **{field: sizes}))


@pytest.mark.parametrize("field", POOL_QUANT_FIELDS)
@pytest.mark.parametrize("sizes", [(2,), (3, 1, 1, 1), (1, 3, 2, 1), (1, 1, 3, 1), (1, 2, 1, 1),
                                   (2, 3), (1, 1, 1, 3), (1, 0, 1, 1)])
def test_pool_per_channel_shapes_refused(field, sizes):
    desc = pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), c=3, **{field: sizes})
    with pytest.raises(DescError, match=rf"^QuantizedLinearAveragePooling: {field} must have 1 "
                                        rf"element \(per tensor\) or ChannelCount = 3 elements"):
        validate(desc)


def test_pool_per_channel_3d_and_single_channel():
    validate(pool((4, 4, 4), (2, 2, 2), window=(2, 2, 2), strides=(2, 2, 2), c=5,
                  InputScaleTensor=(1, 5, 1, 1, 1), OutputZeroPointTensor=(5,)))
    validate(pool((4, 4), (2, 2), window=(2, 2), strides=(2, 2), c=1, InputScaleTensor=(1, 1)))


def test_pool_scale_rank_6_refused():
    desc = pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), InputScaleTensor=(1, 3, 1, 1, 1, 1))
    with pytest.raises(DescError, match=r"InputScaleTensor DimensionCount must be 1 to 5"):
        validate(desc)


def test_pool_empty_batch_and_channels():
    validate(pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), n=0))
    validate(pool((6, 7), (3, 3), window=(2, 2), strides=(2, 2), c=0, InputScaleTensor=(1, 0, 1, 1)))


# ---------------------------------------------------------------- outputs must not alias

def _output(op):
    desc = build(op)
    return desc, desc.output_tensor


def _packed_strides(sizes):
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _with_output_strides(desc, out, strides):
    return dataclasses.replace(desc, output_tensor=TensorDesc(out.data_type, out.sizes, strides))


def _assert_output_aliasing_refused(op, desc, out, strides):
    with pytest.raises(DescError, match=rf"^{op}: OutputTensor Strides .* share memory"):
        validate(_with_output_strides(desc, out, strides))


@pytest.mark.parametrize("op", list(TABLES))
def test_output_stride_zero_refused(op):
    desc, out = _output(op)
    dim = next(i for i, n in enumerate(out.sizes) if n > 1)
    strides = list(_packed_strides(out.sizes))
    strides[dim] = 0
    _assert_output_aliasing_refused(op, desc, out, strides)


@pytest.mark.parametrize("op", list(TABLES))
def test_output_overlapping_strides_refused(op):
    desc, out = _output(op)
    strides = list(_packed_strides(out.sizes))
    dim = max(i for i, n in enumerate(out.sizes) if n > 1)  # innermost non-trivial dim
    outer = max(i for i, n in enumerate(out.sizes) if n > 1 and i < dim)
    strides[outer] = strides[dim] * (out.sizes[dim] - 1)  # one element short: overlap
    _assert_output_aliasing_refused(op, desc, out, strides)


@pytest.mark.parametrize("op", list(TABLES))
def test_output_padded_transposed_and_unit_dims_accepted(op):
    desc, out = _output(op)
    packed = _packed_strides(out.sizes)
    padded = tuple(s * 2 for s in packed)                  # gaps between elements
    reversed_ = _packed_strides(out.sizes[::-1])[::-1]     # column-major
    unit_zero = tuple(0 if n == 1 else s for n, s in zip(out.sizes, packed))
    for strides in (packed, padded, reversed_, unit_zero):
        validate(_with_output_strides(desc, out, strides))


def test_output_empty_with_zero_strides_accepted():
    desc = build(QL, rank=2, sizes={f: (0, 3) for f in FIELDS[QL]})
    validate(dataclasses.replace(desc, output_tensor=TensorDesc(U8, (0, 3), (0, 0))))


@pytest.mark.parametrize("sizes,strides,ok", [
    ((2, 3), (3, 1), True), ((2, 3), (1, 2), True), ((2, 3), (2, 1), False),
    ((2, 3), (3, 0), False), ((2, 2), (1, 1), False), ((4, 1, 5), (5, 0, 1), True),
    ((2, 2, 2), (4, 1, 2), True), ((2, 2, 2), (2, 1, 2), False), ((3, 3), (1, 3), True),
    # interleaved: no stride clears the extent of the smaller ones, yet no two offsets meet
    ((3, 2), (2, 3), True), ((2, 3), (3, 2), True), ((3, 3), (2, 3), True), ((4, 3), (2, 3), False),
])
def test_output_alias_rule(sizes, strides, ok):
    desc = build(QL, rank=len(sizes), sizes={f: sizes for f in FIELDS[QL]})
    desc = dataclasses.replace(desc, output_tensor=TensorDesc(U8, sizes, strides))
    if ok:
        validate(desc)
    else:
        with pytest.raises(DescError, match="share memory"):
            validate(desc)


def test_interleaved_output_strides_write_every_element(rng):
    """Sizes (3, 2), Strides (2, 3): offsets 0 3 2 5 4 7, all distinct (the quick test alone
    refused it): the operator writes each element where its strides say."""
    import dmlq

    x = rng.standard_normal((3, 2)).astype(np.float32) * 20
    desc = dmlq.QuantizeLinearDesc(TensorDesc("FLOAT32", (3, 2)), TensorDesc("FLOAT32", (3, 2), (0, 0)), None,
                                   TensorDesc("UINT8", (3, 2), (2, 3)))
    out = np.full(8, 0xA5, np.uint8)
    dmlq.compile_operator(desc)(x, np.array([0.25], np.float32), out=out)
    want = dmlq.quantize_linear(x, 0.25)
    np.testing.assert_array_equal(np.lib.stride_tricks.as_strided(out, (3, 2), (2, 3)), want)
    assert out[[1, 6]].tolist() == [0xA5, 0xA5]  # the two offsets no element takes


def test_input_may_alias():
    """Inputs broadcast through stride 0; only outputs are checked."""
    x = TensorDesc(F32, SHAPE8[:4], strides=(0, 0, 0, 0))
    validate(dataclasses.replace(build(QL), input_tensor=x))


# ---------------------------------------------------------------- the exported pieces

def test_support_table_lookup():
    assert validation.support_table(QL, "5.2")["InputTensor"].data_types == (F32, I32)
    row = validation.support_table(POOL)["InputScaleTensor"]
    assert (row.kind, row.min_dims, row.max_dims, row.data_types) == (IN, 1, 5, (F32,))
    with pytest.raises(DescError, match="QuantizedLinearAveragePooling: .*6.2.*6.1"):
        validation.support_table(POOL, "6.1")


def test_check_data_type():
    validation.check_data_type(QL, "InputTensor", F32, (F32, F16))
    with pytest.raises(DescError, match=r"^QuantizeLinear: InputTensor DataType must be one of "
                                        r"FLOAT32, FLOAT16 \(got INT8\)$"):
        validation.check_data_type(QL, "InputTensor", I8, (F32, F16))
