"""quantized_matmul with ONNX QLinearMatMul's other scale types (opset 21: float16 and
bfloat16), each scale widened to float32 exactly and then the float32 contract
(docs/semantics.md, "The operators"). Checked against what nobody here wrote: the ONNX
backend node cases in the onnx wheel (read at test time), onnxruntime's CPU provider at
opset 21 (float16 scales; it has no bfloat16 QLinearMatMul), and ml_dtypes' own
bfloat16 -> float32 cast feeding dmlq.reference."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import reference as R

from conftest import poison

ml_dtypes = pytest.importorskip("ml_dtypes")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from onnx_cases import node_cases, run_onnx  # noqa: E402

I8, U8, F16, F32 = np.int8, np.uint8, np.float16, np.float32
BF16 = ml_dtypes.bfloat16


def qrand(rng, dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape).astype(dtype)


def _reference(a, a_s, a_z, b, b_s, b_z, o_s, o_z, out_dtype):
    """dmlq.reference on the scales' float32 values, widened by ml_dtypes / NumPy."""
    wide = [None if s is None else np.asarray(s).astype(F32) for s in (a_s, b_s, o_s)]
    m, n = a.shape[-2], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = poison(np.empty(batch + (m, n), out_dtype))
    return R.quantized_matmul(a, wide[0].reshape(-1), a_z, b, wide[1] if wide[1].ndim > 2 else wide[1].reshape(-1),
                              b_z, wide[2].reshape(-1), o_z, out)


# ---------------------------------------------------------------- the ONNX node test cases

def _cases():
    return node_cases(("QLinearMatMul",), ("qlinearmatmul",), 8)


def test_the_wheel_ships_float16_scale_cases():
    names = set(_cases())
    assert {f"test_qlinearmatmul_{d}D_{t}_float16" for d in (2, 3) for t in ("int8", "uint8")} <= names, names


@pytest.mark.parametrize("name", [f"test_qlinearmatmul_{d}D_{t}_{s}" for d in (2, 3) for t in ("int8", "uint8")
                                  for s in ("float32", "float16")])
def test_onnx_node_case(name):
    case = _cases().get(name)
    if case is None:
        pytest.skip(f"this onnx wheel has no node case {name}")
    (inputs, outputs), = case.data_sets
    vals = [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for v in inputs]
    want = np.asarray(outputs[0])
    got = dmlq.quantized_matmul(*vals)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- onnxruntime, opset 21

# onnxruntime's CPU kernels: (a, b, out) = (int8, int8, int8), (uint8, int8, uint8), (uint8, uint8, uint8);
# a_scale and y_scale per tensor, b's per tensor or per column. u8s8 draws b from [-64, 63] (MLAS's
# non-VNNI u8s8 kernel saturates int16 pair sums beyond: tests/test_reference_onnxruntime.py).
@pytest.mark.parametrize("ta,tb,to", [(I8, I8, I8), (U8, I8, U8), (U8, U8, U8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_float16_scales_against_onnxruntime(ta, tb, to, per_column, batch, rng):
    blim = (-64, 63) if (ta, tb) == (U8, I8) else (None, None)
    compared = 0
    for m, k, n in [(1, 1, 1), (7, 33, 5), (16, 64, 16), (3, 257, 9), (2, 1000, 3)]:
        a = qrand(rng, ta, batch + (m, k))
        b = qrand(rng, tb, (k, n), *blim)
        a_s = F16(rng.uniform(0.005, 0.05))
        b_s = rng.uniform(0.005, 0.05, n if per_column else 1).astype(F16)
        y_s = F16(float(a_s) * 0.03 * np.sqrt(k) * 40 * rng.uniform(0.2, 2))
        a_z, y_z = qrand(rng, ta, ()), qrand(rng, to, ())
        b_z = qrand(rng, tb, n if per_column else (), *blim)
        b_s = b_s if per_column else b_s.reshape(())
        args = [a, np.array(a_s), a_z, b, b_s, b_z, np.array(y_s), y_z]
        want = run_onnx("QLinearMatMul", args, to, opset=21)
        got = dmlq.quantized_matmul(*args)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, _reference(*args, to))
        compared += got.size
    assert compared > 100


# ---------------------------------------------------------------- every form, every scale type


@pytest.mark.parametrize("scale_type", [F16, BF16])
def test_scales_of_each_form_are_their_float32_values(scale_type, rng):
    """Per tensor (0-d, (1,), NumPy and Python-number neighbours), per row, per column, per
    batch and column; the three scales of different types in one call."""
    a = qrand(rng, U8, (2, 6, 40))
    b = qrand(rng, I8, (2, 40, 7))
    forms = [
        (scale_type(0.0137), rng.uniform(0.01, 0.1, 7).astype(scale_type), np.array(0.73, scale_type)),
        (rng.uniform(0.01, 0.1, (6, 1)).astype(scale_type), np.array([0.021], scale_type),
         rng.uniform(0.3, 2, (6, 1)).astype(scale_type)),
        (np.array(0.0137, scale_type), rng.uniform(0.01, 0.1, (2, 1, 7)).astype(scale_type), F32(0.61)),
        (F16(0.0137), rng.uniform(0.01, 0.1, 7).astype(BF16), np.float32(0.5)),
    ]
    for a_s, b_s, o_s in forms:
        for a_z, b_z, o_z in [(None, None, None), (U8(131), I8(-3), I8(5))]:
            args = (a, a_s, a_z, b, b_s, b_z, o_s, o_z)
            got = dmlq.quantized_matmul(*args, dtype=I8)
            np.testing.assert_array_equal(got, _reference(*args, I8))
            wide = [np.asarray(s).astype(F32) for s in (a_s, b_s, o_s)]
            np.testing.assert_array_equal(got, dmlq.quantized_matmul(a, wide[0], a_z, b, wide[1], b_z, wide[2], o_z,
                                                                     dtype=I8))


def test_lists_of_float16_and_bfloat16_numbers(rng):
    """A list holds numbers, whatever NumPy scalar type its items have: in a scale it becomes float32
    (dmlq.calls.list_operand), a list of bfloat16 numbers as a list of float16 ones (it was refused: "a
    list that np.asarray turns into dtype bfloat16, not numbers"), on NumPy and dask alike."""
    da = pytest.importorskip("dask.array")
    a = qrand(rng, U8, (3, 40))
    b = qrand(rng, I8, (40, 4))
    for t in (F16, BF16):
        a_s = [[t(v)] for v in rng.uniform(0.01, 0.1, 3)]
        b_s = [t(v) for v in rng.uniform(0.01, 0.1, 4)]
        o_s = [t(0.73)]
        want = dmlq.quantized_matmul(a, np.array(a_s, F32), U8(5), b, np.array(b_s, F32), I8(-2), np.array(o_s, F32),
                                     I8(1))
        np.testing.assert_array_equal(dmlq.quantized_matmul(a, a_s, U8(5), b, b_s, I8(-2), o_s, I8(1)), want)
        lazy = dmlq.quantized_matmul(da.from_array(a, chunks=(2, 20)), a_s, U8(5), b, b_s, I8(-2), o_s, I8(1))
        np.testing.assert_array_equal(lazy.compute(), want)


def test_a_scale_that_float16_rounds_differently_from_float32():
    """The multiplier is the float32 one of the widened scales. a_scale 0.0999755859375 (float16's
    0.1) times b_scale 5 is 0.4998779296875 in float32, a tie that float16 arithmetic (ONNX's
    reference evaluator multiplies float16 scales in float16) rounds to 0.5; with K = 51 ones the
    result is rint(51 * 0.49987793) = rint(25.494) = 25 here, where 51 * 0.5 = 25.5 would give 26."""
    a = np.ones((1, 51), U8)
    b = np.ones((51, 1), U8)
    got = dmlq.quantized_matmul(a, F16(0.0999755859375), None, b, F16(5.0), None, F16(1.0), None)
    assert float(F16(0.0999755859375)) == 0.0999755859375 and float(F16(F16(0.0999755859375) * F16(5.0))) == 0.5
    assert got.tolist() == [[25]]


@pytest.mark.parametrize("name", ["a_scale", "b_scale", "out_scale"])
@pytest.mark.parametrize("bad", [np.float64, np.int32, ml_dtypes.float8_e4m3fn])
def test_other_scale_types_are_refused_naming_the_scale(name, bad):
    a = np.ones((2, 3), U8)
    b = np.ones((3, 2), I8)
    args = dict(a_scale=0.5, b_scale=0.25, out_scale=0.125)
    args[name] = np.array([0.5]).astype(bad)
    with pytest.raises(TypeError, match=rf"quantized_matmul: {name} must have dtype float32, float16 or bfloat16 "
                                        rf"\(got {np.dtype(bad).name}\)"):
        dmlq.quantized_matmul(a, args["a_scale"], None, b, args["b_scale"], None, args["out_scale"], None)


def test_the_descriptor_keeps_directml_float32_table():
    """DirectML's QUANTIZED_LINEAR_MATRIX_MULTIPLY takes FLOAT32 scales only: a descriptor with a
    FLOAT16 scale stays refused (the NumPy-like function widens; the descriptor is DirectML's)."""
    from dmlq.desc import QuantizedLinearMatrixMultiplyDesc, TensorDesc
    from dmlq.dtypes import DataType

    def t(dt, sizes):
        return TensorDesc(DataType.of(np.dtype(dt)), sizes)

    def desc(scale_dtype):
        return QuantizedLinearMatrixMultiplyDesc(
            t(U8, (1, 1, 2, 3)), t(scale_dtype, (1, 1, 1, 1)), None, t(U8, (1, 1, 3, 4)), t(F32, (1, 1, 1, 1)), None,
            t(F32, (1, 1, 1, 1)), None, t(U8, (1, 1, 2, 4)))

    dmlq.compile_operator(desc(F32))
    with pytest.raises(dmlq.DescError, match="FLOAT16"):
        dmlq.compile_operator(desc(F16))


def test_torch_tensors_of_float16_and_bfloat16_scales():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    a = qrand(rng, U8, (5, 19))
    b = qrand(rng, I8, (19, 7))
    for tdt, ndt in [(torch.float16, F16), (torch.bfloat16, BF16)]:
        bs = torch.rand(7, dtype=torch.float32).mul(0.1).to(tdt)
        got = dmlq.quantized_matmul(torch.from_numpy(a), torch.tensor(0.02, dtype=tdt), U8(3), torch.from_numpy(b),
                                    bs, None, torch.tensor(0.5, dtype=tdt), torch.tensor(0, dtype=torch.int8))
        want = dmlq.quantized_matmul(a, np.array(0.02, ndt), U8(3), b, bs.float().numpy().astype(ndt), None,
                                     np.array(0.5, ndt), I8(0))
        assert isinstance(got, torch.Tensor)
        np.testing.assert_array_equal(got.numpy(), want)


def test_dask_arrays_beside_float16_scales():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(11)
    a = qrand(rng, U8, (2, 5, 19))
    b = qrand(rng, I8, (2, 19, 7))
    b_s = rng.uniform(0.01, 0.1, (2, 1, 7)).astype(F16)
    lazy = dmlq.quantized_matmul(da.from_array(a, chunks=(1, 5, 19)), F16(0.02), U8(3), da.from_array(b, chunks=(1, 19, 7)),
                                 b_s, None, np.array(0.5, BF16), I8(0))
    assert isinstance(lazy, da.Array) and lazy.dtype == I8
    np.testing.assert_array_equal(lazy.compute(), _reference(a, F16(0.02), U8(3), b, b_s, None, np.array(0.5, BF16),
                                                             I8(0), I8))
