"""dmlq.dynamic_quantize_linear(x, per_row=True): one range, scale and zero point per row along
x's last axis (the per-token parameters of a W8A8 activation). Against onnxruntime's
DynamicQuantizeLinear run on each row alone, against dmlq.reference on the contract's edge cases
(each row also equal to the per-tensor reference of that row alone), on NumPy, torch (eager and
compiled), dask (lazy; rows whole in a chunk or split over chunks) and the GPU path (the cupy
stand-in: cuda/dynamic_quant.cu's dq_rows / dq_row_params on the host harness)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import reference as R

pytest.importorskip("onnx")

from onnx_cases import run_onnx  # noqa: E402
from test_dynamic_quant import EDGES, same  # noqa: E402

F32, F16, U8, I8 = np.float32, np.float16, np.uint8, np.int8
BF16 = ml_dtypes.bfloat16


def edge_rows(name, xdt):
    """One edge case as rows: the values, their negatives reversed, and zeros (3 rows)."""
    v = np.array(EDGES[name], np.float64)
    with np.errstate(over="ignore"):
        return np.stack([v, -v[::-1], np.zeros_like(v)]).astype(xdt)


@pytest.mark.parametrize("name", list(EDGES))
@pytest.mark.parametrize("xdt", [F32, F16, BF16])
@pytest.mark.parametrize("qdt", [U8, I8])
def test_edges_against_the_reference(name, xdt, qdt):
    """Each row's parameters are the per-tensor ones of that row alone (the per-tensor reference is
    checked against onnxruntime and the onnx wheel's cases in test_dynamic_quant.py)."""
    x = edge_rows(name, xdt)
    want = R.dynamic_quantize_linear(x, qdt, per_row=True)
    same(dmlq.dynamic_quantize_linear(x, dtype=qdt, per_row=True), want)
    for r in range(x.shape[0]):
        y, s, z = R.dynamic_quantize_linear(x[r], qdt)
        same((want[0][r], want[1][r, 0], want[2][r, 0]), (y, s, z))


def test_against_onnxruntime_row_by_row(rng):
    """onnxruntime's DynamicQuantizeLinear on each row alone gives dmlq's row (finite rows, none all
    zero: the two differences in test_dynamic_quant.py stay out)."""
    pytest.importorskip("onnxruntime")
    compared = 0
    for i in range(12):
        m, n = (int(v) for v in rng.integers(1, 30, 2))
        x = (rng.standard_normal((m, n)) * 10 ** rng.uniform(-3, 3) + rng.uniform(-2, 2)).astype(F32)
        y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
        assert s.shape == z.shape == (m, 1)
        for r in range(m):
            want = run_onnx("DynamicQuantizeLinear", [x[r]], (U8, F32, U8))
            same((y[r], s[r, 0], z[r, 0]), want)
            compared += n
    assert compared > 100


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (0, 4), (4, 0), (1, 1), (2, 0, 3)])
def test_shapes(shape, rng):
    """The scale and zero point have x's shape with 1 as the last dimension; rows of nothing have
    the range [0, 0]; a 1-D x is one row (the per-tensor parameters, shaped (1,))."""
    x = rng.standard_normal(shape).astype(F32)
    got = dmlq.dynamic_quantize_linear(x, per_row=True, dtype=I8)
    assert got[1].shape == got[2].shape == shape[:-1] + (1,)
    same(got, R.dynamic_quantize_linear(x, I8, per_row=True))
    if len(shape) == 1:
        one = dmlq.dynamic_quantize_linear(x, dtype=I8)
        same((got[0], got[1].reshape(()), got[2].reshape(())), one)


@pytest.mark.parametrize("bad, error, match", [
    (1, TypeError, r"per_row must be True or False \(got int 1\)"),
    ("rows", TypeError, r"per_row must be True or False \(got str 'rows'\)"),
    (None, TypeError, r"per_row must be True or False \(got NoneType None\)"),
])
def test_per_row_refused(bad, error, match):
    with pytest.raises(error, match=match):
        dmlq.dynamic_quantize_linear(np.ones((2, 2), F32), per_row=bad)


def test_a_0d_x_has_no_rows():
    with pytest.raises(ValueError, match=r"^dynamic_quantize_linear: per_row takes the rows along x's last axis, "
                                         r"and this x is 0-d"):
        dmlq.dynamic_quantize_linear(np.float32(2.0), per_row=True)
    same(dmlq.dynamic_quantize_linear(np.ones((2, 2), F32), per_row=np.bool_(True)),
         R.dynamic_quantize_linear(np.ones((2, 2), F32), U8, per_row=True))


def test_the_per_token_linear_layer(rng):
    """The W8A8 layer: activations quantized per token, then matmul_integer_to_float with the row
    scales and zero points as they come (a_scale (M, 1)): float32(exact sum) * (a_scale * b_scale)
    per row and column, worked out here from the integers."""
    x = (rng.standard_normal((9, 40)) * 3).astype(F32)
    w = rng.integers(-128, 128, (40, 11)).astype(I8)
    w_s = rng.uniform(0.01, 0.05, 11).astype(F32)
    y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
    got = dmlq.matmul_integer_to_float(y, s, z, w, w_s, None)
    acc = (y.astype(np.int64) - z.astype(np.int64)) @ w.astype(np.int64)
    want = acc.astype(F32) * (s * w_s[None, :]).astype(F32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_per_token_linear_layer_of_a_bfloat16_model(rng):
    """The same layer in torch's bfloat16 (activations, weight scales, bias and output): the
    float32 layer on the same values (bfloat16 widens exactly), each output rounded once to
    bfloat16 by torch's own cast (ties to even)."""
    torch = pytest.importorskip("torch")
    x = (torch.from_numpy(rng.standard_normal((2, 9, 40)).astype(F32)) * 3).bfloat16()
    w = torch.from_numpy(rng.integers(-128, 128, (40, 11)).astype(I8))
    w_s = torch.from_numpy(rng.uniform(0.01, 0.05, 11).astype(F32)).bfloat16()
    bias = torch.from_numpy(rng.uniform(-2, 2, 11).astype(F32)).bfloat16()
    y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
    got = dmlq.matmul_integer_to_float(y, s, z, w, w_s, None, bias, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (2, 9, 11)
    y32, s32, z32 = dmlq.dynamic_quantize_linear(x.float().numpy(), per_row=True)
    assert np.array_equal(y.numpy(), y32) and np.array_equal(s.numpy(), s32) and np.array_equal(z.numpy(), z32)
    f32 = dmlq.matmul_integer_to_float(y32, s32, z32, w.numpy(), w_s.float().numpy(), None, bias.float().numpy())
    assert torch.equal(got.view(torch.int16), torch.from_numpy(f32).bfloat16().view(torch.int16))


def test_a_batch_of_token_rows(rng):
    """Per-row parameters of a (batch, tokens, K) x are (batch, tokens, 1): the matmuls take them
    as they are (a's scale and zero point per batch and row), each batch's result the 2-D call's on
    that batch with its (tokens, 1) parameters, and the reference's bits."""
    x = (rng.standard_normal((2, 5, 16)) * 2).astype(F32)
    w = rng.integers(-128, 128, (16, 7)).astype(I8)
    y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
    assert s.shape == z.shape == (2, 5, 1)
    got = dmlq.matmul_integer_to_float(y, s, z, w, np.float32(0.5), None)
    want = R.matmul_integer_to_float(y, s, z, w, np.float32(0.5), None, None, np.empty((2, 5, 7), F32))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    q = dmlq.quantized_matmul(y, s, z, w, np.float32(0.5), None, np.float32(1.0), None)
    for i in range(2):
        one = dmlq.matmul_integer_to_float(y[i], s[i], z[i], w, np.float32(0.5), None)
        assert np.array_equal(got[i].view(np.uint32), one.view(np.uint32))
        assert np.array_equal(q[i], dmlq.quantized_matmul(y[i], s[i], z[i], w, np.float32(0.5), None,
                                                          np.float32(1.0), None))


def test_torch_eager_and_compiled():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 5, 9)) * 4 + 1).astype(F32)
    x[0, 1, :] = np.nan
    x[1, 2, 3] = -np.inf
    for xdt, tdt in ((F32, torch.float32), (F16, torch.float16), (BF16, torch.bfloat16)):
        t = torch.from_numpy(x.astype(xdt).astype(F32)).to(tdt)  # (torch takes no ml_dtypes array; exact)
        got = dmlq.dynamic_quantize_linear(t, per_row=True)
        assert all(isinstance(v, torch.Tensor) for v in got) and tuple(got[1].shape) == (2, 5, 1)
        same([v.numpy() for v in got], R.dynamic_quantize_linear(x.astype(xdt), U8, per_row=True))
        compiled = torch.compile(lambda v: dmlq.dynamic_quantize_linear(v, dtype=torch.int8, per_row=True),
                                 fullgraph=True)
        same([v.numpy() for v in compiled(t)], R.dynamic_quantize_linear(x.astype(xdt), I8, per_row=True))
    for shape in ((0, 3), (3, 0)):
        e = np.zeros(shape, F32)
        same([v.numpy() for v in dmlq.dynamic_quantize_linear(torch.from_numpy(e), per_row=True)],
             R.dynamic_quantize_linear(e, U8, per_row=True))


@pytest.mark.parametrize("per_row", [True, False])
def test_torch_compiled_divisions_round_once(per_row):
    """Under torch.compile the scale's and zero point's divisions are float64 ones (rounded to
    float32 after: the correctly rounded float32 quotient): Inductor lowers a float32 division
    to Triton's div.full.f32 on CUDA (up to 2 ulp off), which moved scales by an ulp and zero
    points by one from the eager call's and ONNX's (see test_torch_cuda_compiled_rows)."""
    torch = pytest.importorskip("torch")
    import operator

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x = torch.from_numpy((np.random.default_rng(2).standard_normal((5, 7)) * 3).astype(F32))
    got = torch.compile(lambda v: dmlq.dynamic_quantize_linear(v, per_row=per_row), backend=backend,
                        fullgraph=True)(x)
    same([v.numpy() for v in got], R.dynamic_quantize_linear(x.numpy(), U8, per_row=per_row))
    divisions = [n for gm in graphs for n in gm.graph.nodes
                 if n.op in ("call_function", "call_method") and n.target in (operator.truediv, torch.div, "div",
                                                                            torch.true_divide, "__truediv__")]
    assert len(divisions) == 2, [n.format_node() for gm in graphs for n in gm.graph.nodes]
    assert {n.meta["example_value"].dtype for n in divisions} == {torch.float64}


@pytest.mark.gpu
def test_torch_cuda_compiled_rows(rng):
    """torch CUDA tensors, eager and compiled (Inductor's Triton code), give the reference's bytes
    on many rows of many ranges: every row's scale and zero point are two divisions that Triton's
    float32 '/' (div.full.f32) would round differently now and then."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    x = (rng.standard_normal((20000, 24)) * 10.0 ** rng.uniform(-4, 4, (20000, 1))
         + rng.uniform(-3, 3, (20000, 1))).astype(F32)
    want = R.dynamic_quantize_linear(x, U8, per_row=True)
    t = torch.from_numpy(x).cuda()
    same([v.cpu().numpy() for v in dmlq.dynamic_quantize_linear(t, per_row=True)], want)
    compiled = torch.compile(lambda v: dmlq.dynamic_quantize_linear(v, per_row=True), fullgraph=True)
    same([v.cpu().numpy() for v in compiled(t)], want)


@pytest.mark.parametrize("chunks", [(3, 30), (4, 7), (40, 11), (1, 1)])
def test_dask_stays_lazy(chunks):
    """Rows whole in each chunk (a task per chunk), or split over chunks (each chunk's row ranges,
    then the parameters per row of chunks): nothing computed by the call, the scale and zero point
    chunked as x along the rows."""
    da = pytest.importorskip("dask.array")
    import dask

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((13, 30)) * 2 - 0.5).astype(F32)
    x[3, 4], x[5, :] = np.nan, 0.0
    lazy = da.from_array(x, chunks=chunks)
    computed = []
    with dask.config.set(scheduler=lambda dsk, keys, **kw: computed.append(keys) or dask.get(dsk, keys, **kw)):
        got = dmlq.dynamic_quantize_linear(lazy, dtype=np.int8, per_row=True)
        assert not computed, "the call computed something"
        assert got[1].chunks == got[2].chunks == (lazy.chunks[0], (1,))
        same(dask.compute(*got), R.dynamic_quantize_linear(x, I8, per_row=True))


def test_dask_a_1d_x_has_one_row():
    """A 1-D x is one row: per_row's scale and zero point are shaped (1,) on dask too (the
    lazy parameters' split by blocks gave 0-d arrays there), whatever its chunks."""
    da = pytest.importorskip("dask.array")
    x = np.array([-3.0, 0.5, np.nan, 7.0, 2.0], F32)
    want = R.dynamic_quantize_linear(x, U8, per_row=True)
    for chunks in (5, 2):
        got = dmlq.dynamic_quantize_linear(da.from_array(x, chunks=chunks), per_row=True)
        assert [v.shape for v in got[1:]] == [(1,), (1,)]
        same([np.asarray(v) for v in da.compute(*got)], want)


def test_kernel_plan_of_a_host_x():
    """A nominal H100's plan: many rows a warp each (the parameters written by dq_rows itself), few
    long rows split (then dq_row_params), then quantize with the (M, 1) parameters."""
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((4096, 4096), F32), per_row=True)
    assert plan.variant == "rows, then axis" and not plan.notes
    assert [v.kernel for v in plan.launches] == ["dq_rows<float, uint8>", "quantize_axis<float, uint8>"]
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((16, 8192), F32), dtype=np.int8, per_row=True)
    assert [v.kernel for v in plan.launches] == ["dq_rows<float, int8>", "dq_row_params<int8>",
                                                 "quantize_axis<float, int8>"]
    assert plan.notes == ("each row in 4 splits of 2048 elements",)
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((64, 64), F32).T, per_row=True)
    assert plan.notes == ("x copied to a contiguous array (its rows more than two strides apart)",)
    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.broadcast_to(np.empty((64, 1), F32), (64, 8192)),
                            per_row=True)  # (a row of one value repeated: that value read, not 64 x 32 KiB copied)
    assert not plan.notes and [v.kernel for v in plan.launches][:1] == ["dq_rows<float, uint8>"]


def test_splits_are_at_least_min_split_bytes():
    """Every split but a row's last holds at least MIN_SPLIT_BYTES (README: "splits of at least
    8 KiB"), in whole 16-byte vectors, and the splits cover the row exactly: 9000 float32 are 4
    splits of 2252 (not 5 of 1800, 7200 bytes), 8999 float16 2 of 4504 (not 3 of 3000)."""
    from dmlq.gpu.dynquant import MIN_SPLIT_BYTES, _row_splits

    plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, np.empty((16, 9000), F32), per_row=True)
    assert plan.notes == ("each row in 4 splits of 2252 elements",)
    assert _row_splits(3, 8999, 2, 1320) == (2, 4504)
    for item in (2, 4):
        for rows in (1, 2, 3, 16, 500):
            for cols in range(1, 60000, 41):
                splits, chunk = _row_splits(rows, cols, item, 1320)
                assert chunk * item % 16 == 0 and (splits - 1) * chunk < cols <= splits * chunk, (rows, cols)
                assert splits == 1 or chunk * item >= MIN_SPLIT_BYTES, (rows, cols, item, splits, chunk)


# ---------------------------------------------------------------- the GPU path (stand-in on CI)

def _views():
    """(name, view, copied): layouts of a 3-D x as dq_rows reads them."""
    def broadcast(a):
        return (cupy_of(a)).broadcast_to(a[:1, :1], (3, 4, a.shape[2]))

    return [("C order", lambda a: a, False), ("reversed rows", lambda a: a[::-1, ::-1], False),
            ("first axis reversed", lambda a: a[::-1], False),
            ("reversed columns", lambda a: a[:, :, ::-1], False), ("reversed both", lambda a: a[::-1, ::-1, ::-1], False),
            ("rows not 16-byte aligned", lambda a: a[:, :, 1:], False), ("every other row", lambda a: a[:, ::2], False),
            ("a block of rows", lambda a: a[:, :3], False), ("broadcast rows", broadcast, False),
            ("every other block of rows, reversed", lambda a: a[::-2, 1:], False),
            ("rows broadcast along the first axis", lambda a: cupy_of(a).broadcast_to(a[:1], a.shape), False),
            ("rows broadcast along the second axis", lambda a: cupy_of(a).broadcast_to(a[:, 2:3], a.shape), False),
            ("broadcast along the last axis", lambda a: cupy_of(a).broadcast_to(a[:, :, 5:6], a.shape), False),
            ("transposed", lambda a: a.transpose(0, 2, 1), True), ("every other column", lambda a: a[..., ::2], True)]


def cupy_of(a):
    import cupy

    return cupy if isinstance(a, cupy.ndarray) else np


@pytest.mark.gpu
@pytest.mark.parametrize("xdt", [F32, F16, BF16])
def test_gpu_rows(xdt, rng):
    """dq_rows on every layout (rows in place where the last axis is dense and the leading axes reach
    the rows by at most two strides, or the last axis broadcast (its first element read), else copied: "rows not
    16-byte aligned" is read in place, each row with single
    elements before its vectors; "every other row" is one stride apart), a warp a row and few long rows split (then dq_row_params), NaN,
    infinities and all-NaN rows, more rows than the grid has warps; bytes equal to the reference's, nothing read back to the host."""
    import cupy

    from conftest import on_stand_in
    from dmlq.gpu.plan import recording

    x = (rng.standard_normal((3, 4, 37)) * 3 - 1).astype(xdt)
    x[0, 1, 5], x[1, 2, :], x[2, 3, 0], x[2, 0, 36] = np.nan, np.nan, -np.inf, np.inf
    long = (rng.standard_normal((2, 9000)) * 2).astype(xdt)
    long[1, 8999], long[0, 0] = 50, -60  # the extremes in the last split's last element and the first's first
    many = (rng.standard_normal((3000, 5)) * 2).astype(xdt)  # more rows than the grid's warps (a grid-stride)
    x4 = (rng.standard_normal((2, 3, 4, 37)) * 3).astype(xdt)
    cases = [(x, v) for v in _views()] + [(x4, ("three strides", lambda a: a[:, ::-1, :3], True)),
                                          (x4, ("two strides of four axes", lambda a: a[:, :2], False)),
                                          (long, ("few long rows", lambda a: a, False)),
                                          (long, ("few long rows, reversed", lambda a: a[:, ::-1], False)),
                                          (many, ("many rows", lambda a: a, False))]
    split = set()
    for host, (name, view, copied) in cases:
        for qdt in (U8, I8):
            if on_stand_in():
                import cupy_stand_in

                cupy_stand_in.counts.update(syncs=0, downloads=0)
            with recording() as plans:
                got = dmlq.dynamic_quantize_linear(view(cupy.asarray(host)), dtype=qdt, per_row=True)
            if on_stand_in():
                assert cupy_stand_in.counts["syncs"] == cupy_stand_in.counts["downloads"] == 0, name
            notes = plans[0].notes
            assert ("x copied to a contiguous array (its rows more than two strides apart)" in notes) == copied, (name, notes)
            split.add(any(n.startswith("each row in") for n in notes))
            same([cupy.asnumpy(v) for v in got], R.dynamic_quantize_linear(view(host), qdt, per_row=True))
    assert split == {True, False}
    grid = plans[0].launches[0].grid[0] * plans[0].launches[0].block[0] // 32
    assert grid < many.shape[0], grid  # (the last case's warps: fewer than its rows)


@pytest.mark.gpu
def test_gpu_kernel_plan_is_what_runs():
    import cupy

    from dmlq.gpu.plan import recording

    x = cupy.asarray(np.ones((6, 5000), F32))
    for gx in (x, x.astype(F16)[:, 1:], x.astype(BF16)[:, 1:], x[:, ::3], x[:0], x[:, :0],
               cupy.broadcast_to(x[:, 7:8], x.shape)):
        with recording() as planned:
            plan = dmlq.kernel_plan(dmlq.dynamic_quantize_linear, gx, dtype=I8, per_row=True)
        assert not planned
        with recording() as plans:
            dmlq.dynamic_quantize_linear(gx, dtype=I8, per_row=True)
        assert plan.launches == sum((p.launches for p in plans), ()), (plan, plans)
        assert plan.notes == sum((p.notes for p in plans), ())


@pytest.mark.gpu
def test_gpu_dask_of_cupy_chunks(rng):
    """CuPy chunks: rows whole in a chunk (dq_rows' parameters per chunk) or split over chunks
    (dq_rows' pairs per chunk, then the parameters of the pairs side by side); lazy, CuPy
    throughout, nothing read back."""
    da = pytest.importorskip("dask.array")
    import cupy

    from conftest import on_stand_in
    from dmlq.gpu.plan import recording

    if on_stand_in():
        import cupy_stand_in
        from dask.array.dispatch import concatenate_lookup

        concatenate_lookup.register(cupy.ndarray, cupy.concatenate)
    x = (rng.standard_normal((9, 70)) * 3 - 1).astype(F32)
    x[4, 5], x[8, 69], x[2, :] = np.nan, 40.0, np.nan
    long = (rng.standard_normal((3, 9000)) * 2).astype(F32)
    long[0, 4599], long[1, 4600], long[2, 8999] = -70, 80, np.nan  # (the last elements of splits and chunks)
    folded = set()
    for host, chunks in ((x, (4, 70)), (x, (4, 33)), (x.astype(F16)[:, 1:], (9, 20)), (np.zeros((0, 5), F32), (2, 5)),
                         (long, (3, 4600)), (long, (2, 9000))):
        lazy = da.from_array(cupy.asarray(host), chunks=chunks, asarray=False)
        if on_stand_in():
            cupy_stand_in.counts["downloads"] = 0
        got = dmlq.dynamic_quantize_linear(lazy, dtype=I8, per_row=True)
        assert all(isinstance(v, da.Array) and isinstance(v._meta, cupy.ndarray) for v in got)
        with recording() as plans:
            computed = da.compute(*got, scheduler="threads")
        if on_stand_in():
            assert cupy_stand_in.counts["downloads"] == 0
        folded.update(v.role for p in plans for v in p.launches if v.kernel.startswith("dq_row_params"))
        same([cupy.asnumpy(v) for v in computed], R.dynamic_quantize_linear(host, I8, per_row=True))
    # few long rows in a chunk are split: their ranges folded (chunks (3, 4600)), or their
    # parameters (the whole rows in one chunk, (2, 9000))
    assert folded == {"the rows' ranges folded", "the scales and zero points"}, folded
