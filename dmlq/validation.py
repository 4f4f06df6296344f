"""Descriptor validation: the seeds' "Tensor support" tables per feature level, and the checks.

``SUPPORT[operator][level][field]`` is the table row that DirectML documents for
``DML_FEATURE_LEVEL_<level>`` and above (until the next listed level).
:func:`validate` checks, in this order: the desc and field types, the feature
level, required tensors, every table row (DimensionCount, DataType), every
"Tensor constraints" bullet, the operator's own rules from the seeds' field
texts, and that no output aliases itself. Every failure is a :class:`DescError`
naming the operator, the DML field and the rule.
"""
from __future__ import annotations

import math
import numbers
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from .desc import (OPERATOR_DESCS, QuantizationType, TensorDesc, block_sizes, dml_name, pool_output_accepted,
                   pool_output_size)
from .dtypes import DataType
from .errors import DescError

# DirectML's DML_FEATURE_LEVEL values, oldest first.
FEATURE_LEVELS = ("1.0", "2.0", "2.1", "3.0", "3.1", "4.0", "4.1", "5.0", "5.1", "5.2",
                  "6.0", "6.1", "6.2", "6.3", "6.4")
DEFAULT_FEATURE_LEVEL = "6.2"

INPUT, OPTIONAL_INPUT, OUTPUT = "Input", "Optional input", "Output"
INPUT_ARRAY = "Input array"  # DML 6.3 QuantizationTensors: one row for every tensor of the array


class TensorSupport(NamedTuple):
    """One row of a seed's "Tensor support" table."""

    kind: str  # INPUT, OPTIONAL_INPUT, INPUT_ARRAY or OUTPUT
    min_dims: int
    max_dims: int
    data_types: Tuple[DataType, ...]


# The seed tables, transcribed row for row ("<operator> <level>" opens a table). The two
# integer matmuls are not among the seeds: theirs are the directml.h reference pages
# (MicrosoftDocs/sdk-api ns-directml-dml_matrix_multiply_integer_operator_desc.md: levels
# 2.1, 4.0 and 5.2; ns-directml-dml_matrix_multiply_integer_to_float_operator_desc.md: 6.2).
_TABLES = """
QuantizeLinear 1.0
InputTensor           | Input          | 4      | FLOAT32
ScaleTensor           | Input          | 4      | FLOAT32
ZeroPointTensor       | Input          | 4      | UINT8
OutputTensor          | Output         | 4      | UINT8

QuantizeLinear 2.1
InputTensor           | Input          | 4      | FLOAT32, INT32
ScaleTensor           | Input          | 4      | FLOAT32
ZeroPointTensor       | Input          | 4      | INT8, UINT8
OutputTensor          | Output         | 4      | INT8, UINT8

QuantizeLinear 3.0
InputTensor           | Input          | 1 to 8 | FLOAT32, INT32
ScaleTensor           | Input          | 1 to 8 | FLOAT32
ZeroPointTensor       | Input          | 1 to 8 | INT8, UINT8
OutputTensor          | Output         | 1 to 8 | INT8, UINT8

QuantizeLinear 6.0
InputTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16, INT32
ScaleTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16
ZeroPointTensor       | Input          | 1 to 8 | INT8, UINT8
OutputTensor          | Output         | 1 to 8 | INT8, UINT8

QuantizeLinear 6.2
InputTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16, INT32
ScaleTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16
ZeroPointTensor       | Optional input | 1 to 8 | INT8, UINT8
OutputTensor          | Output         | 1 to 8 | INT8, UINT8

DequantizeLinear 1.0
InputTensor           | Input          | 4      | UINT8
ScaleTensor           | Input          | 4      | FLOAT32
ZeroPointTensor       | Input          | 4      | UINT8
OutputTensor          | Output         | 4      | FLOAT32

DequantizeLinear 2.1
InputTensor           | Input          | 4      | INT32, INT16, INT8, UINT32, UINT16, UINT8
ScaleTensor           | Input          | 4      | FLOAT32
ZeroPointTensor       | Input          | 4      | INT32, INT16, INT8, UINT32, UINT16, UINT8
OutputTensor          | Output         | 4      | FLOAT32

DequantizeLinear 3.0
InputTensor           | Input          | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
ScaleTensor           | Input          | 1 to 8 | FLOAT32
ZeroPointTensor       | Input          | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
OutputTensor          | Output         | 1 to 8 | FLOAT32

DequantizeLinear 6.0
InputTensor           | Input          | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
ScaleTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16
ZeroPointTensor       | Input          | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
OutputTensor          | Output         | 1 to 8 | FLOAT32, FLOAT16

DequantizeLinear 6.2
InputTensor           | Input          | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
ScaleTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16
ZeroPointTensor       | Optional input | 1 to 8 | INT32, INT16, INT8, UINT32, UINT16, UINT8
OutputTensor          | Output         | 1 to 8 | FLOAT32, FLOAT16

QuantizedLinearAdd 4.0
ATensor               | Input          | 1 to 8 | INT8, UINT8
AScaleTensor          | Input          | 1 to 8 | FLOAT32
AZeroPointTensor      | Optional input | 1 to 8 | INT8, UINT8
BTensor               | Input          | 1 to 8 | INT8, UINT8
BScaleTensor          | Input          | 1 to 8 | FLOAT32
BZeroPointTensor      | Optional input | 1 to 8 | INT8, UINT8
OutputScaleTensor     | Input          | 1 to 8 | FLOAT32
OutputZeroPointTensor | Optional input | 1 to 8 | INT8, UINT8
OutputTensor          | Output         | 1 to 8 | INT8, UINT8

QuantizedLinearMatrixMultiply 2.1
ATensor               | Input          | 4      | INT8, UINT8
AScaleTensor          | Input          | 4      | FLOAT32
AZeroPointTensor      | Optional input | 4      | INT8, UINT8
BTensor               | Input          | 4      | INT8, UINT8
BScaleTensor          | Input          | 4      | FLOAT32
BZeroPointTensor      | Optional input | 4      | INT8, UINT8
OutputScaleTensor     | Input          | 4      | FLOAT32
OutputZeroPointTensor | Optional input | 4      | INT8, UINT8
OutputTensor          | Output         | 4      | INT8, UINT8

MatrixMultiplyIntegerToFloat 6.2
ATensor               | Input          | 2 to 4 | INT32, INT16, INT8, UINT32, UINT16, UINT8
AScaleTensor          | Input          | 1 to 4 | FLOAT32, FLOAT16
AZeroPointTensor      | Optional input | 1 to 4 | INT32, INT16, INT8, UINT32, UINT16, UINT8
BTensor               | Input          | 2 to 4 | INT32, INT16, INT8, UINT32, UINT16, UINT8
BScaleTensor          | Input          | 1 to 4 | FLOAT32, FLOAT16
BZeroPointTensor      | Optional input | 1 to 4 | INT32, INT16, INT8, UINT32, UINT16, UINT8
BiasTensor            | Optional input | 2 to 4 | FLOAT32, FLOAT16
OutputTensor          | Output         | 2 to 4 | FLOAT32, FLOAT16

MatrixMultiplyInteger 2.1
ATensor               | Input          | 4      | INT8, UINT8
AZeroPointTensor      | Optional input | 4      | INT8, UINT8
BTensor               | Input          | 4      | INT8, UINT8
BZeroPointTensor      | Optional input | 4      | INT8, UINT8
OutputTensor          | Output         | 4      | INT32

MatrixMultiplyInteger 4.0
ATensor               | Input          | 2 to 4 | INT8, UINT8
AZeroPointTensor      | Optional input | 1 to 4 | INT8, UINT8
BTensor               | Input          | 2 to 4 | INT8, UINT8
BZeroPointTensor      | Optional input | 2 to 4 | INT8, UINT8
OutputTensor          | Output         | 2 to 4 | INT32

MatrixMultiplyInteger 5.2
ATensor               | Input          | 2 to 4 | INT8, UINT8
AZeroPointTensor      | Optional input | 1 to 4 | INT8, UINT8
BTensor               | Input          | 2 to 4 | INT8, UINT8
BZeroPointTensor      | Optional input | 1 to 4 | INT8, UINT8
OutputTensor          | Output         | 2 to 4 | INT32

QuantizedLinearAveragePooling 6.2
InputTensor           | Input          | 4 to 5 | INT8, UINT8
InputScaleTensor      | Input          | 1 to 5 | FLOAT32
InputZeroPointTensor  | Optional input | 1 to 5 | INT8, UINT8
OutputScaleTensor     | Input          | 1 to 5 | FLOAT32
OutputZeroPointTensor | Optional input | 1 to 5 | INT8, UINT8
OutputTensor          | Output         | 4 to 5 | INT8, UINT8
Quantize 6.3
InputTensor           | Input          | 1 to 8 | FLOAT32, FLOAT16
QuantizationTensors   | Input array    | 1 to 8 | FLOAT32, FLOAT16, INT8, INT4, UINT8, UINT4
OutputTensor          | Output         | 1 to 8 | INT8, INT4, UINT8, UINT4

Dequantize 6.3
InputTensor           | Input          | 1 to 8 | INT8, INT4, UINT8, UINT4
QuantizationTensors   | Input array    | 1 to 8 | FLOAT32, FLOAT16, INT8, INT4, UINT8, UINT4
OutputTensor          | Output         | 1 to 8 | FLOAT32, FLOAT16
"""


def _parse_tables(text: str) -> Dict[str, Dict[str, Dict[str, TensorSupport]]]:
    tables: Dict[str, Dict[str, Dict[str, TensorSupport]]] = {}
    rows: Optional[Dict[str, TensorSupport]] = None
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        if "|" not in line:
            operator, level = line.split()
            rows = tables.setdefault(operator, {})[level] = {}
            continue
        assert rows is not None, f"a table row before its operator's header: {line}"
        field, kind, dims, types = (cell.strip() for cell in line.split("|"))
        lo, _, hi = dims.partition(" to ")
        rows[field] = TensorSupport(kind, int(lo), int(hi or lo),
                                    tuple(DataType[t.strip()] for t in types.split(",")))
    return tables


SUPPORT = _parse_tables(_TABLES)

# The "Tensor constraints" bullets, in the seeds' words: pairs that share a DataType,
# groups that share DimensionCount, groups that share Sizes.
SAME_DATA_TYPE = {
    "QuantizeLinear": (("OutputTensor", "ZeroPointTensor"),),
    "DequantizeLinear": (("InputTensor", "ZeroPointTensor"), ("OutputTensor", "ScaleTensor")),
    "QuantizedLinearAdd": (("BTensor", "BZeroPointTensor"),
                           ("OutputTensor", "OutputZeroPointTensor"),
                           ("ATensor", "AZeroPointTensor")),
    "QuantizedLinearMatrixMultiply": (("ATensor", "AZeroPointTensor"),
                                      ("BTensor", "BZeroPointTensor"),
                                      ("OutputTensor", "OutputZeroPointTensor")),
    "QuantizedLinearAveragePooling": (("InputTensor", "InputZeroPointTensor"),
                                      ("OutputTensor", "OutputZeroPointTensor")),
    "MatrixMultiplyInteger": (("BTensor", "BZeroPointTensor"), ("ATensor", "AZeroPointTensor")),
    "MatrixMultiplyIntegerToFloat": (("ATensor", "AZeroPointTensor"), ("ATensor", "BTensor"),
                                     ("BTensor", "BZeroPointTensor"),
                                     ("AScaleTensor", "BiasTensor"), ("AScaleTensor", "BScaleTensor"),
                                     ("AScaleTensor", "OutputTensor")),
}
_ELEMENTWISE = ("InputTensor", "OutputTensor", "ScaleTensor", "ZeroPointTensor")
SAME_DIMENSION_COUNT = {
    "QuantizeLinear": _ELEMENTWISE,
    "DequantizeLinear": _ELEMENTWISE,
    "QuantizedLinearAdd": ("ATensor", "AScaleTensor", "AZeroPointTensor", "BScaleTensor",
                           "BTensor", "BZeroPointTensor", "OutputScaleTensor", "OutputTensor",
                           "OutputZeroPointTensor"),
    "QuantizedLinearAveragePooling": ("InputTensor", "OutputTensor"),
    "MatrixMultiplyInteger": ("ATensor", "BTensor", "OutputTensor"),
    "MatrixMultiplyIntegerToFloat": (("AScaleTensor", "AZeroPointTensor", "BScaleTensor",
                                      "BZeroPointTensor"),
                                     ("ATensor", "BiasTensor", "BTensor", "OutputTensor")),
}
SAME_SIZES = {"QuantizeLinear": _ELEMENTWISE, "DequantizeLinear": _ELEMENTWISE,
              "MatrixMultiplyIntegerToFloat": ("BiasTensor", "OutputTensor")}

_DESC_BY_OPERATOR = {cls.OPERATOR: cls for cls in OPERATOR_DESCS}
_UINT_MAX = 2**32 - 1


def _key(level: str) -> Tuple[int, int]:
    major, minor = level.split(".")
    return int(major), int(minor)


def parse_feature_level(level) -> str:
    """"6.2", "6_2", 6.2 or "DML_FEATURE_LEVEL_6_2" -> "6.2"; anything else is a DescError."""
    if isinstance(level, float):
        text = str(level)
    elif isinstance(level, str):
        text = level.strip()
        if text.upper().startswith("DML_FEATURE_LEVEL_"):
            text = text[len("DML_FEATURE_LEVEL_"):]
        text = text.replace("_", ".")
    else:
        text = None
    if text not in FEATURE_LEVELS:
        raise DescError(f"unknown DirectML feature level {level!r} "
                        f"(expected one of {', '.join(FEATURE_LEVELS)})")
    return text


def support_table(operator: str, feature_level=DEFAULT_FEATURE_LEVEL) -> Dict[str, TensorSupport]:
    """The table that applies to ``operator`` at ``feature_level``: the latest one at
    or below it. Refuses a level below the operator's introducing level."""
    level = parse_feature_level(feature_level)
    if operator not in SUPPORT:
        raise DescError(f"unknown operator {operator!r}")
    introduced = _DESC_BY_OPERATOR[operator].FEATURE_LEVEL
    if _key(level) < _key(introduced):
        raise DescError(f"{operator}: introduced in feature level {introduced}, "
                        f"not available at feature level {level}")
    tables = SUPPORT[operator]
    return tables[max((lv for lv in tables if _key(lv) <= _key(level)), key=_key)]


def _names(types) -> str:
    return ", ".join(t.name for t in types)


def check_data_type(op: str, field: str, dt: DataType, allowed, feature_level=None) -> None:
    """DescError unless ``dt`` is one of ``allowed``."""
    if dt not in allowed:
        at = f" at feature level {feature_level}" if feature_level else ""
        raise DescError(f"{op}: {field} DataType must be one of {_names(allowed)}{at} "
                        f"(got {dt.name})")


def _check_rows(op, level, table, tensors):
    for field, row in table.items():
        if row.kind == INPUT_ARRAY:
            _check_rows(op, level, {f"{field}[{i}]": row._replace(kind=INPUT) for i in range(len(tensors[field]))},
                        {f"{field}[{i}]": t for i, t in enumerate(tensors[field])})
            continue
        t = tensors[field]
        if t is None:
            if row.kind != OPTIONAL_INPUT:
                raise DescError(f"{op}: {field} is required (feature level {level})")
            continue
        n = t.dimension_count
        if not row.min_dims <= n <= row.max_dims:
            dims = (str(row.min_dims) if row.min_dims == row.max_dims
                    else f"{row.min_dims} to {row.max_dims}")
            raise DescError(f"{op}: {field} DimensionCount must be {dims} at feature level "
                            f"{level} (got {n})")
        check_data_type(op, field, t.data_type, row.data_types, level)


def _check_bullets(op, tensors):
    for a, b in SAME_DATA_TYPE.get(op, ()):
        ta, tb = tensors[a], tensors[b]
        if ta is not None and tb is not None and ta.data_type != tb.data_type:
            raise DescError(f"{op}: {a} and {b} must have the same DataType "
                            f"(got {ta.data_type.name} and {tb.data_type.name})")
    for rule, attr in ((SAME_DIMENSION_COUNT, "dimension_count"), (SAME_SIZES, "sizes")):
        groups = rule.get(op, ())
        if groups and isinstance(groups[0], str):  # one group, or a tuple of groups
            groups = (groups,)
        for group in groups:
            present = [(f, tensors[f]) for f in group if tensors[f] is not None]
            for f, t in present[1:]:
                f0, t0 = present[0]
                if getattr(t, attr) != getattr(t0, attr):
                    what = "DimensionCount" if attr == "dimension_count" else "Sizes"
                    raise DescError(f"{op}: {f0} and {f} must have the same {what} "
                                    f"(got {getattr(t0, attr)} and {getattr(t, attr)})")


def _check_quantize(desc, t):
    x, s = t["InputTensor"], t["ScaleTensor"]
    if x.data_type == DataType.INT32:
        if s.data_type != DataType.FLOAT32:
            raise DescError(f"{desc.OPERATOR}: ScaleTensor must be FLOAT32 when InputTensor is "
                            f"INT32 (got {s.data_type.name})")
    elif s.data_type != x.data_type:
        raise DescError(f"{desc.OPERATOR}: ScaleTensor and InputTensor must have the same "
                        f"DataType (got {s.data_type.name} and {x.data_type.name})")


def _check_add(desc, t):
    op, y = desc.OPERATOR, t["OutputTensor"]
    for f in ("AScaleTensor", "AZeroPointTensor", "BScaleTensor", "BZeroPointTensor",
              "OutputScaleTensor", "OutputZeroPointTensor"):
        if t[f] is not None and t[f].element_count != 1:
            raise DescError(f"{op}: {f} must have exactly 1 element (got Sizes {t[f].sizes})")
    # dmlq extension: A and B may broadcast NumPy-style (each dim 1 or the output's).
    # DirectML broadcasts through stride-0 strides with equal Sizes, which passes too.
    for f in ("ATensor", "BTensor"):
        if any(n not in (1, m) for n, m in zip(t[f].sizes, y.sizes)):
            raise DescError(f"{op}: {f} Sizes {t[f].sizes} must broadcast to OutputTensor Sizes "
                            f"{y.sizes} (each dimension 1 or equal to the output's)")


def _check_matmul(desc, t):
    op = desc.OPERATOR
    a, b, y = t["ATensor"], t["BTensor"], t["OutputTensor"]
    (m, k), (k2, n) = a.sizes[2:], b.sizes[2:]
    if k != k2:
        raise DescError(f"{op}: ATensor Sizes[3] and BTensor Sizes[2] (K) must be equal "
                        f"(got {k} and {k2})")
    if y.sizes[2:] != (m, n):
        raise DescError(f"{op}: OutputTensor Sizes[2:] must be (M, N) = ({m}, {n}) "
                        f"(got {y.sizes[2:]})")
    for f in ("ATensor", "BTensor"):
        for i, what in ((0, "BatchCount"), (1, "ChannelCount")):
            if t[f].sizes[i] not in (1, y.sizes[i]):
                raise DescError(f"{op}: {f} Sizes[{i}] ({what}) must be 1 or OutputTensor's "
                                f"{y.sizes[i]} (got {t[f].sizes[i]})")
    per_row, per_col = (1, 1, m, 1), (1, 1, 1, n)
    for f, axis, shape in (("AScaleTensor", "row", per_row), ("AZeroPointTensor", "row", per_row),
                           ("BScaleTensor", "column", per_col),
                           ("BZeroPointTensor", "column", per_col),
                           ("OutputScaleTensor", "row", per_row),
                           ("OutputZeroPointTensor", "row", per_row)):
        if t[f] is not None and t[f].sizes not in ((1, 1, 1, 1), shape):
            raise DescError(f"{op}: {f} Sizes must be (1, 1, 1, 1) (per tensor) or {shape} "
                            f"(per {axis}) (got {t[f].sizes})")


def _check_matmul_to_float(desc, t):
    """The seed's field texts: {[Batch], [Channel], M, K} x {..., K, N} -> {..., M, N}; A's
    scale and zero point per tensor or per row, B's per tensor or per column."""
    op = desc.OPERATOR
    a, b, y = t["ATensor"], t["BTensor"], t["OutputTensor"]
    (m, k), (k2, n) = a.sizes[-2:], b.sizes[-2:]
    if k != k2:
        raise DescError(f"{op}: ATensor's K (Sizes[-1] = {k}) and BTensor's K (Sizes[-2] = {k2}) "
                        f"must be equal")
    if y.sizes[-2:] != (m, n):
        raise DescError(f"{op}: OutputTensor Sizes[-2:] must be (M, N) = ({m}, {n}) (got {y.sizes[-2:]})")
    for f in ("ATensor", "BTensor"):
        for i in range(y.dimension_count - 2):
            if t[f].sizes[i] not in (1, y.sizes[i]):
                raise DescError(f"{op}: {f} Sizes[{i}] must be 1 or OutputTensor's {y.sizes[i]} "
                                f"(got {t[f].sizes[i]})")
    for f, count, row in (("AScaleTensor", m, True), ("AZeroPointTensor", m, True),
                          ("BScaleTensor", n, False), ("BZeroPointTensor", n, False)):
        s = t.get(f)  # MatrixMultiplyInteger has no scales
        if s is None or s.element_count == 1:
            continue
        tail = (count, 1) if row else (1, count)
        ok = s.sizes == (count,) or (s.dimension_count >= 2 and s.sizes[-2:] == tail
                                      and all(d == 1 for d in s.sizes[:-2]))
        if not ok:
            shape = "{..., M, 1} (per row)" if row else "{..., 1, N} (per column)"
            raise DescError(f"{op}: {f} Sizes must hold 1 element (per tensor) or be {shape} with "
                            f"{'M' if row else 'N'} = {count} (got {s.sizes})")


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_pooling(desc, t):
    op = desc.OPERATOR
    x, y = t["InputTensor"], t["OutputTensor"]
    dc = desc.dimension_count
    if dc is None:
        raise DescError(f"{op}: DimensionCount is required")
    if not _is_int(dc):
        raise TypeError(f"{op}: DimensionCount is a UINT: pass the int 2 or 3 (got {dc!r})")
    if dc not in (2, 3):
        raise DescError(f"{op}: DimensionCount must be 2 or 3 (got {dc!r})")
    if x.dimension_count != dc + 2:
        raise DescError(f"{op}: InputTensor must have DimensionCount + 2 = {dc + 2} dimensions "
                        f"(got {x.dimension_count})")
    arrays: Dict[str, Tuple[int, ...]] = {}
    for name, least in (("strides", 1), ("window_size", 1), ("start_padding", 0),
                        ("end_padding", 0), ("dilations", 1)):
        field, value = dml_name(name), getattr(desc, name)
        if value is None:
            raise DescError(f"{op}: {field} is required")
        if not isinstance(value, tuple):
            raise TypeError(f"{op}: {field} must be a sequence of DimensionCount ({dc}) "
                            f"integers (got {value!r})")
        if len(value) != dc:
            raise DescError(f"{op}: {field} must have DimensionCount ({dc}) elements "
                            f"(got {len(value)}: {value})")
        if not all(_is_int(v) for v in value):
            raise TypeError(f"{op}: {field} must hold integers (got {value!r})")
        if any(v < least for v in value):
            raise DescError(f"{op}: {field} values must be >= {least} (got {value})")
        if any(v > _UINT_MAX for v in value):
            raise DescError(f"{op}: {field} values must fit in a UINT (got {value})")
        arrays[name] = tuple(int(v) for v in value)
    if not isinstance(desc.include_padding, (bool, np.bool_)):  # a DML BOOL: an int, TRUE (1) or FALSE (0)
        if not _is_int(desc.include_padding):
            raise TypeError(f"{op}: IncludePadding is a BOOL: pass True or False, or 1 or 0 "
                            f"(got {desc.include_padding!r})")
        if desc.include_padding not in (0, 1):
            raise DescError(f"{op}: IncludePadding must be TRUE (1) or FALSE (0) (got {desc.include_padding!r})")
    for i, what in ((0, "BatchCount"), (1, "ChannelCount")):
        if y.sizes[i] != x.sizes[i]:
            raise DescError(f"{op}: OutputTensor Sizes[{i}] ({what}) must equal InputTensor's "
                            f"{x.sizes[i]} (got {y.sizes[i]})")
    for i in range(dc):
        size = x.sizes[2 + i]
        w, s, sp, ep, d = (arrays[k][i] for k in ("window_size", "strides", "start_padding", "end_padding",
                                                   "dilations"))
        floor_size, _ = pool_output_size(size, w, s, sp, ep, d)
        accepted = pool_output_accepted(size, w, s, sp, ep, d)
        if accepted == (0,):
            raise DescError(
                f"{op}: WindowSize[{i}] = {w} with Dilations[{i}] = {d} spans {(w - 1) * d + 1} "
                f"elements, more than the padded InputTensor size {size + sp + ep}")
        if y.sizes[2 + i] not in accepted:
            also = f" or {accepted[1]} (ceil mode)" if len(accepted) > 1 else ""
            raise DescError(f"{op}: OutputTensor Sizes[{2 + i}] must be {floor_size}{also} "
                            f"(got {y.sizes[2 + i]})")
    c = x.sizes[1]
    for f in ("InputScaleTensor", "InputZeroPointTensor", "OutputScaleTensor",
              "OutputZeroPointTensor"):
        if t[f] is None or t[f].element_count == 1:
            continue  # absent, or per tensor
        sizes = t[f].sizes
        if not (sizes == (c,) or len(sizes) >= 2 and sizes[1] == c
                and all(n == 1 for i, n in enumerate(sizes) if i != 1)):
            raise DescError(f"{op}: {f} must have 1 element (per tensor) or ChannelCount = {c} "
                            f"elements at dimension 1 (per channel) (got Sizes {sizes})")


_EXACT_ALIAS_LIMIT = 1 << 22  # elements whose offsets are enumerated when the quick test fails


def shared_elements(shape, strides, itemsize=1, limit=_EXACT_ALIAS_LIMIT):
    """Two indices of an array of ``shape`` and ``strides`` whose elements share memory and
    the offset of the first, both in the strides' units where an element is ``itemsize``
    long; None where no two share memory, () where that cannot be shown within ``limit``.

    The quick test: with the dims sorted by stride, each stride clears the extent of the
    ones before. Interleaved layouts fail it without aliasing (shape (3, 2), strides (2, 3):
    offsets 0 3 2 5 4 7), so where it fails the offsets are enumerated (up to ``limit``
    elements); past that the answer is ()."""
    dims = [(abs(int(s)), int(n)) for s, n in zip(strides, shape) if n > 1]
    count = math.prod(int(n) for n in shape)
    if count == 0:
        return None
    for axis, (stride, size) in enumerate(zip(strides, shape)):
        if size > 1 and stride == 0:  # a broadcast axis: the first two elements along it
            j = [0] * len(shape)
            j[axis] = 1
            return (0,) * len(shape), tuple(j), 0
    extent = itemsize
    for stride, size in sorted(dims):
        if stride < extent:
            break
        extent += stride * (size - 1)
    else:
        return None
    if count > limit:
        return ()
    offsets = np.zeros((), np.int64)
    for stride, size in zip(strides, shape):
        offsets = np.add.outer(offsets, np.arange(size, dtype=np.int64) * int(stride))
    flat = offsets.reshape(-1)
    order = np.argsort(flat, kind="stable")
    same = np.nonzero(np.diff(flat[order]) < itemsize)[0]
    if not same.size:
        return None
    i, j = (tuple(int(v) for v in np.unravel_index(int(order[k]), tuple(shape))) for k in (same[0], same[0] + 1))
    return i, j, int(flat[order[same[0]]])


def _check_no_self_alias(op, field, t):
    """Refuse strides that map two indices to one element (:func:`shared_elements`); past
    2**22 elements that the quick test cannot clear it refuses, saying so."""
    if t is None or t.strides is None or t.element_count == 0:
        return
    shared = shared_elements(t.sizes, t.strides)
    if shared is None:
        return
    if not shared:
        raise DescError(f"{op}: {field} Strides {t.strides} with Sizes {t.sizes}: dmlq cannot show that no two "
                        f"elements share memory (with the dimensions sorted by stride, a stride does not clear "
                        f"the extent of the ones before, and {t.element_count} elements are too many to "
                        "enumerate); an output must not alias itself: pass packed strides")
    i, j, offset = shared
    raise DescError(f"{op}: {field} Strides {t.strides} with Sizes {t.sizes} make different elements share "
                    f"memory (indices {i} and {j} both at element offset {offset}); an output must not "
                    "alias itself")


def _check_quantize_63(desc, t):
    """DML_QUANTIZE / DML_DEQUANTIZE (6.3): the quantization type and count, the shared
    DimensionCount, and the quantization tensors' layout (docs/semantics.md: an entry count
    n on a dimension of D is 1, D, or a divisor of D giving blocks of D / n)."""
    op, x, y = desc.OPERATOR, t["InputTensor"], t["OutputTensor"]
    params = t["QuantizationTensors"]
    try:
        kind = QuantizationType.of(desc.quantization_type)
    except DescError as e:
        raise DescError(f"{op}: {e}") from None
    if kind == QuantizationType.NONE:
        raise DescError(f"{op}: QuantizationType must be SCALE or SCALE_ZERO_POINT (got NONE)")
    want = 1 if kind == QuantizationType.SCALE else 2
    count = desc.quantization_tensor_count
    if count is not None and (isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral)):
        raise TypeError(f"{op}: QuantizationTensorCount is a UINT: pass the int {want} (got {count!r})")
    if count != want or len(params) != want:
        raise DescError(f"{op}: QuantizationType {kind.name} takes QuantizationTensorCount = {want} "
                        f"QuantizationTensors (got count {count}, {len(params)} tensors)")
    for f, tt in [("OutputTensor", y)] + [(f"QuantizationTensors[{i}]", p) for i, p in enumerate(params)]:
        if tt.dimension_count != x.dimension_count:
            raise DescError(f"{op}: InputTensor and {f} must have the same DimensionCount "
                            f"(got {x.dimension_count} and {tt.dimension_count})")
    if y.sizes != x.sizes:
        raise DescError(f"{op}: InputTensor and OutputTensor must have the same Sizes (got {x.sizes} and {y.sizes})")
    quantized, real = (y, x) if op == "Quantize" else (x, y)
    scale = params[0]
    if scale.data_type not in (DataType.FLOAT32, DataType.FLOAT16):
        raise DescError(f"{op}: QuantizationTensors[0] (the scale) DataType must be FLOAT32 or FLOAT16 "
                        f"(got {scale.data_type.name})")
    if scale.data_type != real.data_type:
        side = "InputTensor" if op == "Quantize" else "OutputTensor"
        raise DescError(f"{op}: QuantizationTensors[0] (the scale) and {side} must have the same DataType "
                        f"(got {scale.data_type.name} and {real.data_type.name})")
    if want == 2:
        zp = params[1]
        side = "OutputTensor" if op == "Quantize" else "InputTensor"
        if zp.data_type != quantized.data_type:
            raise DescError(f"{op}: QuantizationTensors[1] (the zero point) and {side} must have the same DataType "
                            f"(got {zp.data_type.name} and {quantized.data_type.name})")
        if zp.sizes != scale.sizes:
            raise DescError(f"{op}: QuantizationTensors[1] (the zero point) must have the scale's Sizes "
                            f"{scale.sizes} (got {zp.sizes})")
    if 0 in block_sizes(scale.sizes, x.sizes):
        raise DescError(f"{op}: QuantizationTensors[0] Sizes {scale.sizes} do not block InputTensor Sizes {x.sizes}: "
                        "each dimension must be 1, the input's, or a divisor of it (blocks of input / n)")


_RULES = {
    "Quantize": _check_quantize_63,
    "Dequantize": _check_quantize_63,
    "QuantizeLinear": _check_quantize,
    "QuantizedLinearAdd": _check_add,
    "QuantizedLinearMatrixMultiply": _check_matmul,
    "QuantizedLinearAveragePooling": _check_pooling,
    "MatrixMultiplyIntegerToFloat": _check_matmul_to_float,
    "MatrixMultiplyInteger": _check_matmul_to_float,  # the same shapes, without scales and bias
}


def validate(desc, feature_level=DEFAULT_FEATURE_LEVEL) -> None:
    """Check every seed rule for ``desc`` at ``feature_level``; DescError on a violation,
    TypeError for something that is not an operator desc or a TensorDesc field."""
    if not isinstance(desc, OPERATOR_DESCS):
        raise TypeError(f"not a dmlq operator desc: {type(desc).__name__}")
    op = desc.OPERATOR
    tensors = {}
    for name, value in desc.tensor_fields():
        if value is not None and not isinstance(value, TensorDesc):
            raise TypeError(f"{op}: {dml_name(name)} must be a TensorDesc or None "
                            f"(got {type(value).__name__})")
        tensors[dml_name(name)] = value
    if hasattr(desc, "quantization_tensors"):
        params = desc.quantization_tensors
        if params is None:
            raise DescError(f"{op}: QuantizationTensors is required (the scale, and the zero point for "
                            "SCALE_ZERO_POINT)")
        if not isinstance(params, tuple) or not all(isinstance(p, TensorDesc) for p in params):
            raise TypeError(f"{op}: QuantizationTensors must be a sequence of TensorDesc (got {params!r})")
        tensors["QuantizationTensors"] = params  # type: ignore[assignment]  # the "Input array" row
        for field in ("InputTensor", "OutputTensor"):
            if tensors[field] is None:
                raise DescError(f"{op}: {field} is required")
    level = parse_feature_level(feature_level)
    table = support_table(op, level)
    _check_rows(op, level, table, tensors)
    _check_bullets(op, tensors)
    if op in _RULES:
        _RULES[op](desc, tensors)
    for field, row in table.items():
        if row.kind == OUTPUT:
            _check_no_self_alias(op, field, tensors[field])
