"""dmlq.dynamic_quantize_linear (ONNX DynamicQuantizeLinear, DirectML's DYNAMIC_QUANTIZE_LINEAR)
against what nobody here wrote: the ONNX backend node cases in the onnx wheel (read at test
time), onnxruntime's CPU provider, ONNX's reference evaluator; and against dmlq.reference on
the contract's edge cases (NaN, infinities, signed zeros, subnormal ranges, float16, int8,
empty), on NumPy, on the GPU path (the cupy stand-in: cuda/dynamic_quant.cu on the host
harness), on torch (eager and compiled) and on dask (lazy)."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from dmlq import reference as R

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from onnx_cases import node_cases, run_onnx  # noqa: E402

F32, F16, U8, I8 = np.float32, np.float16, np.uint8, np.int8


def same(got, want):
    """(y, scale, zero point) equal in dtype, shape and every byte."""
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        assert np.array_equal(g.reshape(-1).view(np.uint8), w.reshape(-1).view(np.uint8)), (g, w)


EDGES = {
    "onnx example": [0, 2, -3, -2.5, 1.34, 0.5],
    "positive only": [1, 2.5, 7.75],
    "negative only": [-1, -2.5, -7.75],
    "zeros": [0.0, -0.0, 0.0],
    "one value": [0.3],
    "NaN among values": [np.nan, 1.5, -2.0, np.nan],
    "all NaN": [np.nan, np.nan],
    "infinite max": [np.inf, 1.0, -1.0],
    "infinite min": [-np.inf, 1.0, -1.0],
    "both infinities": [np.inf, -np.inf, 0.5],
    "subnormal range (scale 0)": [1e-45, 0.0],
    "tiny range": [1e-38, -2e-38, 3e-39],
    "float32 extremes (range overflows)": [3.4e38, -3.4e38],
    "ties": [0.5, 1.5, 2.5, -0.5, 127.5, -128.5, 255.0, -255.0],
}


@pytest.mark.parametrize("name", list(EDGES))
@pytest.mark.parametrize("xdt", [F32, F16])
@pytest.mark.parametrize("qdt", [U8, I8])
def test_edges_against_the_reference(name, xdt, qdt):
    with np.errstate(over="ignore"):
        x = np.array(EDGES[name], np.float64).astype(xdt)
    same(dmlq.dynamic_quantize_linear(x, dtype=qdt), R.dynamic_quantize_linear(x, qdt))


def test_the_range_holds_zero_and_skips_nan():
    y, s, z = dmlq.dynamic_quantize_linear(np.array([np.nan, 1.0, 2.0], F32))
    assert float(s) == np.float32(2) / np.float32(255) and int(z) == 0  # min(0, 1) = 0: zero representable
    # NaN -> the zero point, as quantize_linear makes it; float32(2 / 255) lies above 2 / 255, so
    # 1 / scale is 127.49999 in float32, not the tie 127.5
    assert y.tolist() == [0, 127, 255]
    y, s, z = dmlq.dynamic_quantize_linear(np.zeros(5, F32))
    assert float(s) == np.float32(1) / np.float32(255) and int(z) == 0 and not y.any()
    y, s, z = dmlq.dynamic_quantize_linear(np.zeros((2, 0), F16), dtype=np.int8)
    assert y.shape == (2, 0) and y.dtype == I8 and int(z) == -128 and s.dtype == F32 and s.shape == ()


@pytest.mark.parametrize("seed", range(6))
def test_random_against_the_reference(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 9, int(rng.integers(1, 4))))
    x = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3) + rng.uniform(-5, 5)).astype(F32)
    for qdt in (U8, I8):
        same(dmlq.dynamic_quantize_linear(x, dtype=qdt), R.dynamic_quantize_linear(x, qdt))
        same(dmlq.dynamic_quantize_linear(x.astype(F16), dtype=qdt), R.dynamic_quantize_linear(x.astype(F16), qdt))


# ---------------------------------------------------------------- ONNX's cases, evaluator, onnxruntime

def _cases():
    return node_cases(("DynamicQuantizeLinear",), ("dynamicquantizelinear",), 3)


@pytest.mark.parametrize("name", ["test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
                                  "test_dynamicquantizelinear_min_adjusted"])
def test_onnx_node_case(name):
    case = _cases().get(name)
    if case is None:
        pytest.skip(f"this onnx wheel has no node case {name}")
    (inputs, outputs), = case.data_sets
    x = numpy_helper.to_array(inputs[0]) if isinstance(inputs[0], onnx.TensorProto) else np.asarray(inputs[0])
    want = [np.asarray(numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v) for v in outputs]
    same(dmlq.dynamic_quantize_linear(x), want)


def test_against_onnxruntime_and_the_reference_evaluator(rng):
    pytest.importorskip("onnxruntime")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    compared = 0
    for i in range(40):
        shape = (int(rng.integers(1, 50)), int(rng.integers(1, 50)))
        x = (rng.standard_normal(shape) * 10 ** rng.uniform(-4, 4) + rng.uniform(-3, 3) * (i % 3)).astype(F32)
        if i % 5 == 0:
            x = np.abs(x) * (1 if i % 2 else -1)  # one-signed: the range's 0 end adjusted
        got = dmlq.dynamic_quantize_linear(x)
        same(got, run_onnx("DynamicQuantizeLinear", [x], (U8, F32, U8), opset=13))
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                                  [helper.make_tensor_value_info(n, t, None) for n, t in (("y", 2), ("s", 1), ("z", 2))])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        same(got, ReferenceEvaluator(model).run(None, {"x": x}))
        compared += x.size
    assert compared > 1000


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("bad, match", [
    (np.ones(3, np.float64), r"x must have dtype float32 or float16 \(got float64\)"),
    (np.ones(3, np.int32), r"x must have dtype float32 or float16 \(got int32\)"),
    ("abc", r"x must be a float32 or float16 array \(got str\)"),
])
def test_refused_x(bad, match):
    with pytest.raises(TypeError, match=match):
        dmlq.dynamic_quantize_linear(bad)


@pytest.mark.parametrize("dtype", [np.int16, np.float32, "int4", 8])
def test_refused_dtype(dtype):
    with pytest.raises(TypeError, match=r"dtype must be np.uint8 \(ONNX's\) or np.int8 \(DirectML's\)"):
        dmlq.dynamic_quantize_linear(np.ones(3, F32), dtype=dtype)


def test_lists_and_numbers_are_float32():
    same(dmlq.dynamic_quantize_linear([1.0, -2.0, 0.25]), R.dynamic_quantize_linear(np.array([1, -2, 0.25], F32), U8))
    same(dmlq.dynamic_quantize_linear(3.5, dtype="int8"), R.dynamic_quantize_linear(np.array(3.5, F32), I8))


# ---------------------------------------------------------------- the GPU path (stand-in on CI)

@pytest.mark.gpu
@pytest.mark.parametrize("xdt", [F32, F16])
def test_gpu_path(xdt, rng):
    """cuda/dynamic_quant.cu's range and parameters, then quantize_linear's kernels: every layout
    (C order, a transposed and a reversed dense view read as one buffer, a strided view copied),
    a start that is not 16-byte aligned (single elements before the vectors), sizes below one
    vector and over several blocks, NaN and infinities; bytes equal to the NumPy path's."""
    import cupy

    from conftest import on_stand_in

    big = 3000 if on_stand_in() else 300_000
    ends = rng.standard_normal(big).astype(xdt)
    ends[0], ends[-1] = -30, 40  # the min in the first element, the max in the last block's last
    cases = [rng.standard_normal(big).astype(xdt) * 3 - 1, ends,
             rng.standard_normal((37, 41)).astype(xdt),
             np.array([2.5], xdt), np.zeros(0, xdt), np.array([np.nan, -np.inf, 4, np.nan], xdt),
             np.abs(rng.standard_normal((5, 7, 3))).astype(xdt)]
    for x in cases:
        views = [lambda a: a]
        if x.ndim >= 2:
            views += [lambda a: a.T, lambda a: a[::-1], lambda a: a[:, ::2]]
        if x.ndim == 1 and x.size > 8:
            views += [lambda a: a[1:], lambda a: a[3:-2]]
        for view in views:
            host = view(x)
            for qdt in (U8, I8):
                got = dmlq.dynamic_quantize_linear(view(cupy.asarray(x)), dtype=qdt)
                assert all(isinstance(v, cupy.ndarray) for v in got)
                same([cupy.asnumpy(v) for v in got], R.dynamic_quantize_linear(host, qdt))


@pytest.mark.gpu
def test_gpu_reads_a_dense_view_where_it_lies(rng):
    """A view whose elements fill one block of memory (C order, transposed, reversed, 0-d) is read
    in place from its lowest address: its plan has no copy, and on the stand-in the call allocates
    what a C-order call does. A view with gaps and a broadcast one (a stride of 0) are copied
    first. (Before, only a dense view in a non-C order counted as dense: C order was planned as
    copied, and reversed views were copied.) No call reads back to the host or synchronizes."""
    import cupy

    from conftest import on_stand_in
    from dmlq.gpu.plan import recording

    def broadcast(a):
        return (cupy if isinstance(a, cupy.ndarray) else np).broadcast_to(a[1], (3, 40))

    x = rng.standard_normal((6, 40)).astype(F32)
    views = {"C order": (lambda a: a, False), "transposed": (lambda a: a.T, False),
             "reversed rows": (lambda a: a[::-1], False), "reversed 1-D": (lambda a: a.reshape(-1)[::-1], False),
             "reversed twice, transposed": (lambda a: a[::-1, ::-1].T, False), "0-d": (lambda a: a[2, 3], False),
             "every other column": (lambda a: a[:, ::2], True), "broadcast rows": (broadcast, True)}
    allocations = {}
    for name, (view, copied) in views.items():
        gx = view(cupy.asarray(x))
        if on_stand_in():
            import cupy_stand_in

            counts = cupy_stand_in.counts
            counts.update(dict.fromkeys(counts, 0))
        with recording() as plans:
            got = dmlq.dynamic_quantize_linear(gx)
        if on_stand_in():
            assert counts["syncs"] == counts["downloads"] == 0, (name, counts)
            allocations[name] = counts["allocations"] - (1 if copied else 0)
        notes = plans[0].notes
        assert (notes == ("x copied to a contiguous array (a view with gaps, or broadcast)",)) == copied, (name, notes)
        same([cupy.asnumpy(v) for v in got], R.dynamic_quantize_linear(view(x), U8))
    assert len(set(allocations.values())) <= 1, allocations


# ---------------------------------------------------------------- torch and dask

def test_torch_tensors_eager_and_compiled():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 9)) * 4 + 1).astype(F32)
    x[0, 0] = np.nan
    for xdt, tdt in ((F32, torch.float32), (F16, torch.float16)):
        want = R.dynamic_quantize_linear(x.astype(xdt), U8)
        t = torch.from_numpy(x.astype(xdt))
        got = dmlq.dynamic_quantize_linear(t)
        assert all(isinstance(v, torch.Tensor) for v in got) and got[0].dtype == torch.uint8
        same([v.numpy() for v in got], want)
        compiled = torch.compile(lambda v: dmlq.dynamic_quantize_linear(v, dtype=torch.int8), fullgraph=True)
        same([v.numpy() for v in compiled(t)], R.dynamic_quantize_linear(x.astype(xdt), I8))
        assert t.dtype == tdt


def test_dask_stays_lazy():
    da = pytest.importorskip("dask.array")
    import dask

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((40, 30)) * 2 - 0.5).astype(F32)
    x[3, 4] = np.nan
    lazy = da.from_array(x, chunks=(7, 11))
    computed = []
    with dask.config.set(scheduler=lambda dsk, keys, **kw: computed.append(keys) or dask.get(dsk, keys, **kw)):
        got = dmlq.dynamic_quantize_linear(lazy, dtype=np.int8)
        assert not computed, "the call computed something"
        assert all(isinstance(v, da.Array) for v in got)
        same(dask.compute(*got), R.dynamic_quantize_linear(x, I8))


def test_with_matmul_integer_to_float_it_is_onnxruntimes_dynamic_quantize_matmul(rng):
    """com.microsoft.DynamicQuantizeMatMul (what onnxruntime's quantize_dynamic makes of a float
    MatMul): x quantized by its range to uint8, then MatMulIntegerToFloat. dmlq's two calls give
    onnxruntime's bytes (README, dynamic_quantize_linear), per-tensor and per-column b scales,
    with and without a bias and b's zero point."""
    pytest.importorskip("onnxruntime")
    compared = 0
    for i in range(24):
        m, k, n = (int(v) for v in rng.integers(1, 40, 3))
        a = (rng.standard_normal((m, k)) * 10 ** rng.uniform(-2, 2)).astype(F32)
        b = rng.integers(-128, 128, (k, n)).astype(I8)
        b_s = rng.uniform(0.01, 0.1, n).astype(F32) if i % 2 else np.array(F32(0.05))
        b_z = None if i % 4 < 2 else (rng.integers(-5, 5, n).astype(I8) if i % 2 else np.array(I8(3)))
        bias = rng.standard_normal(n).astype(F32) if i % 3 == 0 else None
        want = run_onnx("DynamicQuantizeMatMul", [a, b, b_s, b_z, bias], F32, domain="com.microsoft")
        y, s, z = dmlq.dynamic_quantize_linear(a)
        got = dmlq.matmul_integer_to_float(y, s, z, b, b_s, b_z, bias)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), i
        compared += got.size
    assert compared > 1000
