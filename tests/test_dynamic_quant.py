"""dmlq.dynamic_quantize_linear (ONNX DynamicQuantizeLinear, DirectML's DYNAMIC_QUANTIZE_LINEAR)
against what nobody here wrote: the ONNX backend node cases in the onnx wheel (read at test
time), onnxruntime's CPU provider, ONNX's reference evaluator; and against dmlq.reference on
the contract's edge cases (NaN, infinities, signed zeros, subnormal ranges, float16, int8,
empty), on NumPy, on the GPU path (the cupy stand-in: cuda/dynamic_quant.cu on the host
harness), on torch (eager and compiled) and on dask (lazy)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import reference as R

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from onnx_cases import node_cases, run_onnx  # noqa: E402

F32, F16, U8, I8 = np.float32, np.float16, np.uint8, np.int8
BF16 = ml_dtypes.bfloat16


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
@pytest.mark.parametrize("xdt", [F32, F16, BF16])
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


def test_where_onnxruntime_and_the_evaluator_differ_on_finite_inputs():
    """The two kinds of finite x docs/semantics.md names: zeros only (onnxruntime's scale is 1,
    the evaluator's and dmlq's 1 / 255), and a zero scale with lo = 0 (their zero point is 255,
    dmlq's 0). Everything else of these calls is the same bytes."""
    pytest.importorskip("onnxruntime")
    import warnings

    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    for values, differ in (([0.0, -0.0, 0.0], "scale"), ([0.0], "scale"), ([1e-45, 0.0], "zero point"),
                           ([2e-45, 1e-45, 0.0], "zero point")):
        x = np.array(values, F32)
        got = [np.asarray(v) for v in dmlq.dynamic_quantize_linear(x)]
        ort = run_onnx("DynamicQuantizeLinear", [x], (U8, F32, U8), opset=13)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                                  [helper.make_tensor_value_info(n, t, None) for n, t in (("y", 2), ("s", 1), ("z", 2))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the evaluator's 0 / 0)
            evaluated = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])).run(
                None, {"x": x})
        same(got, [evaluated[0], got[1], got[2]])  # y equal to both
        same(got, [ort[0], got[1], got[2]])
        if differ == "scale":
            assert float(ort[1]) == 1.0 and float(got[1]) == np.float32(1) / np.float32(255)
            same(got, evaluated)
            same(got, [ort[0], got[1], ort[2]])
        else:
            assert float(got[1]) == float(ort[1]) == float(evaluated[1]) == 0.0
            assert int(got[2]) == 0 and int(ort[2]) == int(evaluated[2]) == 255


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("bad, match", [
    (np.ones(3, np.float64), r"x must have dtype float32, float16 or bfloat16 \(got float64\)"),
    (np.ones(3, np.int32), r"x must have dtype float32, float16 or bfloat16 \(got int32\)"),
    ("abc", r"x must be a float32, float16 or bfloat16 array \(got str\)"),
])
def test_refused_x(bad, match):
    with pytest.raises(TypeError, match=match):
        dmlq.dynamic_quantize_linear(bad)


@pytest.mark.parametrize("bad, error, match", [
    # before: taken as float32 (a Python float's subclass), where quantize_linear refuses a float64 scalar x
    (np.float64(2.5), TypeError, r"x must have dtype float32, float16 or bfloat16 \(got float64\).*pass x.astype\(np.float32\)"),
    # before: NumPy's overflow warning, and an inf in the range
    ([1e40, 1.0], ValueError, r"dynamic_quantize_linear: x holds 1e\+40, beyond the range of float32"),
    (10 ** 400, ValueError, r"dynamic_quantize_linear: x = 100\.\.\. \(an integer of 401 digits\) is beyond the "
                            r"range of float32"),
    # before: NumPy's own ValueError, naming nothing
    ([[1.0], [1.0, 2.0]], TypeError, r"dynamic_quantize_linear: x is a list that np.asarray cannot turn into one"),
    # before: the range taken over the masked values too, then quantize_linear's refusal under its own name
    (np.ma.array([1.0, 1e6], mask=[0, 1], dtype=F32), TypeError, r"dynamic_quantize_linear: x is a masked array"),
    # before: "x must have dtype float32 or float16 (got >f4)", of a float32 x
    (np.ones(3, ">f4"), TypeError, r"dynamic_quantize_linear: x has the non-native byte order of dtype '>f4'.*"
                                   r"pass x.astype\('<f4'\)"),
    (True, TypeError, r"dynamic_quantize_linear: x must be a float32, float16 or bfloat16 array, not a bool"),
])
def test_x_checked_as_quantize_linear_checks_it(bad, error, match):
    """A list, a number, a NumPy scalar, a masked or byte-swapped x: quantize_linear's checks,
    under this function's name and before any range is found."""
    with pytest.raises(error, match=match):
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
@pytest.mark.parametrize("xdt", [F32, F16, BF16])
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
    what a C-order call does; a broadcast one (a stride of 0) is read at its first index along
    the broadcast dimensions, in place (its repeats leave the range as it is). A view with gaps is
    copied first. (Before, only a dense view in a non-C order counted as dense: C order was planned as
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
             "every other column": (lambda a: a[:, ::2], True), "broadcast rows": (broadcast, False),
             "broadcast, every other column": (lambda a: broadcast(a)[:, ::2], True)}
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
        assert (notes == ("x copied to a contiguous array (a view with gaps)",)) == copied, (name, notes)
        same([cupy.asnumpy(v) for v in got], R.dynamic_quantize_linear(view(x), U8))
    assert len(set(allocations.values())) <= 1, allocations


# ---------------------------------------------------------------- torch and dask

def test_torch_tensors_eager_and_compiled():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 9)) * 4 + 1).astype(F32)
    x[0, 0] = np.nan
    for xdt, tdt in ((F32, torch.float32), (F16, torch.float16), (BF16, torch.bfloat16)):
        want = R.dynamic_quantize_linear(x.astype(xdt), U8)
        t = torch.from_numpy(x.astype(xdt).astype(F32)).to(tdt)  # (torch takes no ml_dtypes array; exact)
        got = dmlq.dynamic_quantize_linear(t)
        assert all(isinstance(v, torch.Tensor) for v in got) and got[0].dtype == torch.uint8
        same([v.numpy() for v in got], want)
        compiled = torch.compile(lambda v: dmlq.dynamic_quantize_linear(v, dtype=torch.int8), fullgraph=True)
        same([v.numpy() for v in compiled(t)], R.dynamic_quantize_linear(x.astype(xdt), I8))
        assert t.dtype == tdt


def test_torch_parameters_are_not_differentiable():
    """Of a tensor that requires grad, the scale is a plain tensor, as y and the zero point are (the
    outputs of ONNX's DynamicQuantizeLinear are not differentiable). Before, the scale carried
    min / max / div's grad_fn: scale.numpy() failed, and dequantize_linear(y, scale, zp) raised
    dmlq's no-derivative error at backward."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], requires_grad=True)
    got = dmlq.dynamic_quantize_linear(x)
    assert not any(v.requires_grad for v in got), [v.requires_grad for v in got]
    same([v.numpy() for v in got], R.dynamic_quantize_linear(x.detach().numpy(), U8))
    assert not dmlq.dequantize_linear(*got).requires_grad
    with pytest.raises(TypeError, match=r"got float64\); dmlq computes in float32 .*: pass x.to\(torch.float32\)$"):
        dmlq.dynamic_quantize_linear(x.double())


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


def test_dask_edges_compute_silently_to_0d_arrays():
    """NaN, infinities and a zero scale computed in dask's tasks: no RuntimeWarning (the eager
    path's errstate did not reach them: 0 / 0 and inf / inf warned at compute), and the scale
    and zero point come back as 0-d arrays as the eager call returns them (they came back as
    NumPy scalars)."""
    da = pytest.importorskip("dask.array")
    import warnings

    for values in ([1e-45, 0.0], [np.inf, -np.inf, 0.5], [-np.inf, 1.0], [np.nan, np.nan], [0.0, -0.0]):
        x = np.array(values, F32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = da.compute(*dmlq.dynamic_quantize_linear(da.from_array(x, chunks=1), dtype=np.int8))
        assert all(type(v) is np.ndarray for v in got), [type(v) for v in got]
        same(got, R.dynamic_quantize_linear(x, I8))


def test_dask_computes_x_once():
    """The range's tasks and quantize's read the same chunks of x: an x made by other tasks is
    computed once for the three results (blockwise layers over x, no graph of its own)."""
    da = pytest.importorskip("dask.array")
    made = []

    def double(b):
        made.append(b.shape)
        return b * 2

    x = np.random.default_rng(4).standard_normal((40, 30)).astype(F32)
    lazy = da.from_array(x, chunks=10).map_blocks(double, dtype=F32, meta=np.empty((0, 0), F32))
    got = dmlq.dynamic_quantize_linear(lazy)
    assert not made
    same(da.compute(*got), R.dynamic_quantize_linear(x * 2, U8))
    assert len(made) == lazy.npartitions == 12


def test_dask_unknown_chunk_sizes_are_named():
    """Refused before anything is built, under this function's name (it was quantize_linear's,
    once the range's graph was made)."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.arange(12, dtype=F32).reshape(4, 3), chunks=2)
    with pytest.raises(ValueError, match=r"^dynamic_quantize_linear: x has unknown chunk sizes \(shape \(nan, 3\)\); "
                                         r"call x.compute_chunk_sizes\(\) first"):
        dmlq.dynamic_quantize_linear(x[x[:, 0] > 2])


@pytest.mark.gpu
def test_dask_of_cupy_chunks(rng):
    """A dask array of CuPy chunks: each chunk's range by the range kernel, the parameters of them
    all by the parameters kernel, then quantize per chunk: lazy, CuPy chunks and meta throughout,
    nothing read back to the host while building or computing, equal to the reference. An empty
    x too (its scale's meta was NumPy's, and quantize_linear refused the mix). Before, the range
    went through NumPy ufuncs on the chunks (not run on the stand-in, whose arrays take none)."""
    da = pytest.importorskip("dask.array")
    import cupy

    from conftest import on_stand_in

    if on_stand_in():
        import cupy_stand_in
        from dask.array.dispatch import concatenate_lookup

        concatenate_lookup.register(cupy.ndarray, cupy.concatenate)
    x = (rng.standard_normal((9, 70)) * 3 - 1).astype(F32)
    x[4, 5], x[8, 69] = np.nan, 40.0
    for host, chunks in ((x, (4, 33)), (x.astype(F16)[:, 1:], (9, 20)), (x.astype(BF16), (5, 40)),
                         (np.zeros((0, 5), F32), (2, 5))):
        for qdt in (U8, I8):
            lazy = da.from_array(cupy.asarray(host), chunks=chunks, asarray=False)
            if on_stand_in():
                cupy_stand_in.counts["downloads"] = 0
            got = dmlq.dynamic_quantize_linear(lazy, dtype=qdt)
            assert all(isinstance(v, da.Array) and isinstance(v._meta, cupy.ndarray) for v in got)
            computed = da.compute(*got, scheduler="threads")
            if on_stand_in():
                assert cupy_stand_in.counts["downloads"] == 0
            assert all(isinstance(v, cupy.ndarray) for v in computed)
            same([cupy.asnumpy(v) for v in computed], R.dynamic_quantize_linear(host, qdt))


# ---------------------------------------------------------------- dmlq.kernel_plan

def test_kernel_plan_of_a_host_x():
    """What a nominal H100 would run: the range, the parameters, then quantize (kernel_plan refused
    the function before); a float16 NumPy x, whose quantize step is planned on the GPU only, and a
    dask array (planned per chunk) are refused by name."""
    da = pytest.importorskip("dask.array")
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((512, 512), F32), dtype=np.int8)
    assert plan.op == "dynamic_quantize_linear" and plan.variant == "range, then contig"
    assert [v.kernel for v in plan.launches] == ["dq_range<float>", "dq_params<int8>", "quantize_contig<float, int8>"]
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((512, 512), F32)[:, ::2])
    assert plan.notes == ("x copied to a contiguous array (a view with gaps)",)
    with pytest.raises(dmlq.UnsupportedError, match="kernel_plan: dynamic_quantize_linear of a float16 x shows"):
        dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty(8, F16))
    with pytest.raises(TypeError, match="kernel_plan: dynamic_quantize_linear on dask arrays runs per chunk"):
        dmlq.kernel_plan(dmlq.dynamic_quantize_linear, da.zeros(8, dtype=F32))


def test_kernel_plan_of_a_tensor():
    torch = pytest.importorskip("torch")
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, torch.empty(64, 3))
    assert plan.notes[0] == "the range and parameters by torch's reductions"
    assert [v.kernel for v in plan.launches] == ["quantize_contig<float, uint8>"]


@pytest.mark.gpu
def test_kernel_plan_is_what_runs():
    """kernel_plan's launches for a GPU x are those the call runs (recorded), for every dtype pair,
    a copied view and an empty x; nothing is launched to make the plan."""
    import cupy

    from dmlq.gpu.plan import recording

    x = cupy.asarray(np.ones((6, 50), F32))
    for gx in (x, x.astype(F16), x.astype(BF16), x[::-1, ::3], x[:0]):
        for qdt in (U8, I8):
            with recording() as planned:
                plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, gx, dtype=qdt)
            assert not planned
            with recording() as plans:
                dmlq.dynamic_quantize_linear(gx, dtype=qdt)
            assert plan.launches == sum((p.launches for p in plans), ()), (plan, plans)
            assert plan.notes == sum((p.notes for p in plans), ())
