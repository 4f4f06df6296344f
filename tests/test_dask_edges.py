"""dask arrays at the edges a user meets: lists beside them, NaN scales of either sign in one
graph, chunks of length 0, a length-1 operand broadcasting, graph names, masked chunks.
Expected values: the one-array NumPy call (itself checked against dmlq.reference)."""
from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import dmlq  # noqa: E402

_rng = np.random.default_rng(3)
A = _rng.integers(0, 256, (4, 6), dtype=np.uint8)
B = _rng.integers(-128, 128, (6, 3), dtype=np.int8)

LISTS = [
    lambda a: dmlq.matmul_integer(a, B, None, [1, 2, 3]),
    lambda a: dmlq.matmul_integer(a, B, [[1], [2], [3], [4]], None),
    lambda a: dmlq.quantized_matmul(a, 0.01, None, B, [0.01, 0.02, 0.03], None, 0.1),
    lambda a: dmlq.quantized_matmul(a, [[0.01], [0.02], [0.03], [0.04]], [[1], [2], [3], [4]], B, 0.02, None, 0.1),
    lambda a: dmlq.matmul_integer_to_float(a, 0.1, None, B, [0.1, 0.2, 0.3], None),
    lambda a: dmlq.matmul_integer_to_float(a, 0.1, None, B, [[0.01] * 3, [0.02] * 3], [[1, 2, 3], [4, 5, 6]],
                                           block_size=3),
    lambda a: dmlq.matmul_integer_to_float(a, [[0.1], [0.2], [0.3], [0.4]], None, B, 0.1, None, [1.0, 2.0, 3.0]),
]


@pytest.mark.parametrize("i", range(len(LISTS)))
@pytest.mark.parametrize("chunks", [(2, 3), (2, 6), (1, 1)])
def test_lists_beside_a_dask_a(i, chunks):
    """A list B-side scale, zero point or bias was taken for dask's own list of blocks: its first
    element applied to every column, silently."""
    call = LISTS[i]
    got, want = call(da.from_array(A, chunks=chunks)).compute(), call(A)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_lists_beside_dask_pooling_split_across_channels():
    x = np.arange(24, dtype=np.uint8).reshape(1, 2, 2, 6)
    got = dmlq.quantized_avg_pool(da.from_array(x, chunks=(1, 1, 2, 3)), [0.1, 0.2], [1, 2], 0.1, 0, 2).compute()
    assert np.array_equal(got, dmlq.quantized_avg_pool(x, [0.1, 0.2], [1, 2], 0.1, 0, 2))


@pytest.mark.parametrize("pair", [(float("nan"), -float("nan")),
                                  (np.array(np.nan, np.float32), np.array(-np.nan, np.float32)),
                                  (np.float64(np.nan), -np.float64(np.nan))])
def test_nan_scales_of_either_sign_in_one_graph(pair):
    """dask's tokenize gives +NaN and -NaN (a Python float, a 0-d array) one name: two results in
    one dask.compute became one. A NaN quotient's sign picks the float8 NaN code."""
    x = np.array([1.0, -2.0], np.float32)
    p, n = (dmlq.quantize_linear(da.from_array(x, chunks=1), s, dtype="float8_e4m3fn") for s in pair)
    assert p.name != n.name
    got_p, got_n = dask.compute(p, n)
    for got, s in ((got_p, pair[0]), (got_n, pair[1])):
        assert np.array_equal(got.view(np.uint8), dmlq.quantize_linear(x, s, dtype="float8_e4m3fn").view(np.uint8))
    assert got_p.view(np.uint8).tolist() == [0x7F, 0x7F] and got_n.view(np.uint8).tolist() == [0xFF, 0xFF]


@pytest.mark.parametrize("chunks", [((1,), (1,), (3, 0, 3)), ((1,), (1,), (0, 6)), ((1,), (1,), (2, 0, 0, 4))])
def test_pooling_with_chunks_of_length_zero(chunks):
    """x[mask].compute_chunk_sizes() makes them; a halo taken from an empty chunk lost an output."""
    x = np.arange(6, dtype=np.uint8).reshape(1, 1, 6)
    got = dmlq.quantized_avg_pool(da.from_array(x, chunks=chunks), 0.1, 0, 0.1, 0, 2)
    want = dmlq.quantized_avg_pool(x, 0.1, 0, 0.1, 0, 2)
    assert got.shape == want.shape and np.array_equal(got.compute(), want)


def test_matmul_with_chunks_of_length_zero():
    a, b, z = A[:, :3], B[:3, :2], np.arange(4, dtype=np.uint8).reshape(4, 1)
    got = dmlq.matmul_integer(da.from_array(a, chunks=((2, 0, 2), (3,))), b, z).compute()
    assert np.array_equal(got, dmlq.matmul_integer(a, b, z))
    got = dmlq.quantized_matmul(da.from_array(a[:1], chunks=((0, 1), (1, 2))), 0.1, None, b, 0.1, None, 0.2)
    assert np.array_equal(got.compute(), dmlq.quantized_matmul(a[:1], 0.1, None, b, 0.1, None, 0.2))
    a3 = a.reshape(1, 4, 3)
    got = dmlq.matmul_integer(da.from_array(a3, chunks=((0, 1), (4,), (3,))), b)
    assert got.shape == (1, 4, 2) and np.array_equal(got.compute(), dmlq.matmul_integer(a3, b))


def test_a_length_one_operand_broadcasting_keeps_the_result_shape():
    """blockwise took the length-1 one-chunk x's chunks for the output: declared (1,), computed (5,)."""
    x, s = np.array([1.0], np.float32), np.array([0.5, 1, 2, 4, 8], np.float32)
    got = dmlq.quantize_linear(da.from_array(x), s)
    assert got.shape == (5,) and np.array_equal(got.compute(), dmlq.quantize_linear(x, s))
    assert np.array_equal(got[3].compute(), dmlq.quantize_linear(x, s)[3])
    a, b = np.arange(6, dtype=np.uint8).reshape(6, 1), np.arange(8, dtype=np.uint8).reshape(1, 8)
    got = dmlq.quantized_add(da.from_array(a, chunks=(4, 1)), 0.1, 3, b, 0.2, 4, 0.3, 5)
    assert got.shape == (6, 8) and got.chunks == ((4, 2), (8,))
    assert np.array_equal(got.compute(), dmlq.quantized_add(a, 0.1, 3, b, 0.2, 4, 0.3, 5))


def test_pooling_graph_names_are_deterministic():
    x = da.from_array(np.arange(36, dtype=np.uint8).reshape(1, 1, 6, 6), chunks=(1, 1, 3, 3))
    p, p2 = (dmlq.quantized_avg_pool(x, 0.1, 0, 0.1, 0, 2) for _ in range(2))
    assert p.name == p2.name and p.name.startswith("quantized_avg_pool-") and " at 0x" not in p.name


def test_masked_chunks_are_refused_when_the_graph_is_built():
    m = da.ma.masked_greater(da.from_array(np.linspace(0, 1, 4, dtype=np.float32)), 0.5)
    with pytest.raises(TypeError, match=r"quantize_linear: x is a masked array \(numpy.ma\)"):
        dmlq.quantize_linear(m, 0.1)
    with pytest.raises(TypeError, match=r"quantize_linear: scale is a masked array"):
        dmlq.quantize_linear(da.from_array(np.ones(4, np.float32)), m + 1)


def test_a_dask_array_subclass_stays_lazy():
    """dispatch.foreign named dask arrays by their type's module: a subclass defined elsewhere went
    to np.asarray, which computed the whole graph while the call was made."""
    class MyArray(da.Array):
        pass

    d = da.ones((4, 4), chunks=2, dtype=np.float32)
    x = MyArray(d.dask, d.name, d.chunks, meta=d._meta)

    def forbid(*args, **kwargs):
        raise AssertionError("a chunk was computed while the graph was built")

    with dask.config.set(scheduler=forbid):
        lazy = dmlq.quantize_linear(x, 0.5, np.uint8(1))
    assert isinstance(lazy, da.Array)
    assert np.array_equal(lazy.compute(), dmlq.quantize_linear(np.ones((4, 4), np.float32), 0.5, np.uint8(1)))


@pytest.mark.parametrize("one", [np.full((1, 1), 0.4, np.float32), np.full((1, 1, 1), 0.4, np.float32), [[0.4]]])
def test_one_value_of_any_rank_for_add_and_the_matmuls(one):
    """The result's rank is the data's there: a (1, 1) b_scale was cut along N, a (1, 1) add scale
    indexed past the output's axes."""
    a_da = da.from_array(A, chunks=2)
    for call in (lambda a: dmlq.quantized_matmul(a, 0.1, 1, B, one, 0, 0.5, np.uint8(0)),
                 lambda a: dmlq.matmul_integer_to_float(a, one, 1, B, one, 0),
                 lambda a: dmlq.quantized_add(a[0], one, 1, A[1], 0.25, 2, 0.5, 0)):
        got, want = call(a_da), call(A)
        assert got.shape == want.shape and np.array_equal(got.compute(), want)
    z = np.zeros((1, 1), np.int8)
    assert np.array_equal(dmlq.matmul_integer(a_da, B, None, z).compute(), dmlq.matmul_integer(A, B, None, z))


def test_a_per_tensor_dask_zero_point_beside_axis_keeps_one_name():
    """A one-element dask zero point went to blockwise as a plain argument, which dask embeds under
    a key of its own making: a new graph name on every identical call."""
    q = np.arange(7, dtype=np.uint16).reshape(1, 7)
    zp = da.from_array(np.array([3], np.uint16))
    r1, r2 = (dmlq.dequantize_linear(da.from_array(q, chunks=((1,), (5, 2))), np.float32([0.5]), zp, axis=0)
              for _ in range(2))
    assert r1.name == r2.name
    assert np.array_equal(r1.compute(), dmlq.dequantize_linear(q, np.float32([0.5]), np.array([3], np.uint16), axis=0))


def test_empty_and_list_operands_beside_dask():
    zp = da.from_array(np.zeros(0, np.uint8), chunks=((0, 0),))  # (v[mask] with no hits, compute_chunk_sizes())
    assert dmlq.quantize_linear(np.zeros((2, 0), np.float32), 0.5, zp).compute().shape == (2, 0)
    zp = da.from_array(np.array([1, 2], np.uint8), chunks=1)  # a list x and a list scale beside a dask zero point
    assert np.array_equal(dmlq.quantize_linear([1.0, 2.0], [0.5, 0.25], zp).compute(),
                          dmlq.quantize_linear([1.0, 2.0], [0.5, 0.25], np.array([1, 2], np.uint8)))


@pytest.mark.parametrize("bias", [0.5, -3, float("nan"), 2**70, np.float32(0.75), np.float16(-1.5)])
def test_a_number_bias_beside_dask(bias):
    """matmul_integer_to_float's bias as a Python number (float32, as the one-array call takes it)
    or a NumPy scalar: a Python number was cut to the output's chunks as if an array
    (AttributeError: 'float' object has no attribute 'shape'); K split and whole."""
    for chunks in ((2, 6), (2, 4)):
        a = da.from_array(A, chunks=chunks)
        got = dmlq.matmul_integer_to_float(a, 0.1, 3, B, 0.2, None, bias)
        want = dmlq.matmul_integer_to_float(A, 0.1, 3, B, 0.2, None, bias)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.compute(), want, strict=True)
    with pytest.raises(ValueError, match=r"bias = 1e\+300 is beyond the range of float32"):
        dmlq.matmul_integer_to_float(da.from_array(A, chunks=2), 0.1, 3, B, 0.2, None, 1e300)


def test_errors_of_a_dask_call_show_no_internal_exception():
    """An error raised for a call with dask arrays was raised inside the handler of dmlq's internal
    dispatch.Foreign, so its traceback began with that exception and "During handling of the above
    exception, another exception occurred"."""
    import traceback

    for call in (lambda: dmlq.quantize_linear(da.ones((3,), dtype=np.float64), 0.1),
                 lambda: dmlq.quantized_matmul(da.from_array(A), 0.1, 0, B[:5], 0.1, 0, 0.1),
                 lambda: dmlq.quantized_avg_pool(da.ones((1, 1, 4, 4), dtype=np.uint8), 1.0, 0, 1.0, 0, 5)):
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        text = "".join(traceback.format_exception(info.value))
        assert "Foreign" not in text and "During handling" not in text, text


def test_unknown_chunk_sizes_beside_a_vector_b_and_a_bias_are_named():
    """A 1-D b's bias check ran np.broadcast_shapes on the NaN sizes first: TypeError: 'float'
    object cannot be interpreted as an integer."""
    x = da.from_array(np.arange(6, dtype=np.float32), chunks=2)
    with pytest.raises(ValueError, match=r"bias has unknown chunk sizes .* bias\.compute_chunk_sizes\(\)"):
        dmlq.matmul_integer_to_float(A[:, :2], 0.1, None, B[:2, 0], 0.2, None, x[x > 3])
    a = da.from_array(np.ones((4, 2, 3), np.uint8), chunks=2)  # a's batch of unknown size, b a vector
    with pytest.raises(ValueError, match=r"a has unknown chunk sizes .* a\.compute_chunk_sizes\(\)"):
        dmlq.matmul_integer_to_float(a[da.from_array(np.array([1, 0, 1, 1], bool))], 0.1, None, B[:3, 0], 0.2, None,
                                     np.ones(2, np.float32))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_a_one_element_dask_scale_or_zero_point_of_add_of_any_rank(rank):
    """quantized_add takes one scale and zero point per operand of any rank (0-d or size 1); a dask
    one of more dimensions than the output failed in dask's blockwise (ValueError: Chunks and
    shape must be of the same length/dimension), naming neither the argument nor the rule."""
    one = (1,) * rank
    s, z = np.full(one, 0.4, np.float32), np.full(one, 3, np.uint8)
    a = da.from_array(A[0], chunks=4)
    got = dmlq.quantized_add(a, da.from_array(s), da.from_array(z), A[1].view(np.int8), 0.25, -2, 0.5, np.int8(1))
    want = dmlq.quantized_add(A[0], s, z, A[1].view(np.int8), 0.25, -2, 0.5, np.int8(1))
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_array_equal(got.compute(), want, strict=True)


def _poisoned(shape, dtype, chunks=()):
    """A dask array that raises if it is ever computed."""
    def boom(block_info=None):
        raise AssertionError("a lazy input was computed")
    return da.map_blocks(boom, dtype=dtype, chunks=chunks, meta=np.empty((0,) * len(shape), dtype))


def test_lists_holding_dask_arrays_and_dask_parameters_are_not_computed():
    """A list or tuple operand holding dask arrays went through np.asarray, which computed them
    (README: a lazy input is never computed behind your back); so did pooling's window
    parameters holding dask scalars (operator.index) and a dask saturate= (== 0). Each is a
    TypeError naming it, raised before anything runs."""
    s, n, flag = _poisoned((), np.float32), _poisoned((), np.int64), _poisoned((), bool)
    x, img = np.ones(2, np.float32), np.ones((1, 2, 4, 4), np.uint8)
    for call, name in ((lambda: dmlq.quantize_linear(x, [s, s]), "scale is a list holding dask arrays"),
                       (lambda: dmlq.quantize_linear(da.from_array(x), [[0.5], [s]]), "scale is a list holding dask"),
                       (lambda: dmlq.quantize_linear(x, 0.5, (_poisoned((), np.uint8),)), "zero_point is a tuple"),
                       (lambda: dmlq.matmul_integer(A[:, :2], [[n, n], [n, n]]), "b is a list holding dask arrays"),
                       (lambda: dmlq.quantized_avg_pool(img, [[[s]], [[s]]], 0, 1.0, 0, 2), "x_scale is a list"),
                       (lambda: dmlq.quantized_avg_pool(img[0], [[s], [s]], 0, 1.0, 0, 2), "x_scale is a list"),
                       (lambda: dmlq.quantized_avg_pool(img, 1.0, 0, 1.0, 0, (n, 2)), "window_size holds a dask array"),
                       (lambda: dmlq.quantized_avg_pool(da.from_array(img), 1.0, 0, 1.0, 0, 2, strides=[1, n]),
                        "strides holds a dask array"),
                       (lambda: dmlq.quantized_avg_pool(img[0], 1.0, 0, 1.0, 0, [n]), "window_size holds a dask array"),
                       (lambda: dmlq.quantize_linear(x, 0.5, dtype="float8_e4m3fn", saturate=flag),
                        "saturate must be True or False")):
        with pytest.raises(TypeError, match=name):
            call()


def test_a_tensor_desc_refuses_dask_sizes_and_strides_without_computing_them():
    """TensorDesc took a dask scalar in sizes or strides through its __index__, which computed it."""
    from dmlq.desc import TensorDesc

    n = _poisoned((), np.int64)
    with pytest.raises(TypeError, match="Sizes must hold integers, not a dask array"):
        TensorDesc("FLOAT32", (n, 2))
    with pytest.raises(TypeError, match="Strides must hold integers, not a dask array"):
        TensorDesc("FLOAT32", (2, 2), strides=(n, 1))


def test_a_numpy_operand_follows_the_dask_operands_chunks():
    """A NumPy operand of the result's full shape beside a dask one decided the result's chunks:
    one chunk, the dask operand merged into it (quantize's x, add's a, the matmuls' a beside a
    dask b whose K and N chunks were merged away). As dask's own ``numpy + dask``, the dask
    operand's chunks are kept and the NumPy one is cut to them; results are the one-array ones."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    s = rng.uniform(0.05, 0.5, (8, 6)).astype(np.float32)
    q, q2 = A[:, :4], rng.integers(0, 256, (4, 4), dtype=np.uint8)
    cases = [(lambda x, s: dmlq.quantize_linear(x, s, np.uint8(3)), (x, s), 1, ((2, 6), (3, 3)), None),
             (lambda q, s: dmlq.dequantize_linear(q, s), (q, s[:4, :4]), 1, ((1, 3), (2, 2)), None),
             (lambda a, b: dmlq.quantized_add(a, 0.1, 2, b, 0.2, 3, 0.3), (q, q2), 1, ((3, 1), (2, 2)), None),
             # per axis and blocked: x cut where the dask scale's or zero point's chunks fall
             (lambda q, s: dmlq.dequantize_linear(q, s, axis=0), (A, s[:4, 0]), 1, ((1, 3),), ((1, 3), (6,))),
             (lambda x, s: dmlq.quantize_linear(x, s, block_size=2, dtype=np.int8), (x, s[:, :3]), 1,
              ((5, 3), (2, 1)), ((5, 3), (4, 2))),
             (lambda q, z: dmlq.dequantize_linear(q, s[:4, :2], z, block_size=4), (A, A[:, :2]), 1,
              ((2, 2), (1, 1)), ((2, 2), (4, 2)))]
    a3, b3 = rng.integers(0, 256, (2, 5, 7), dtype=np.uint8), rng.integers(-128, 128, (2, 7, 4), dtype=np.int8)
    for f in (lambda a, b: dmlq.quantized_matmul(a, 0.1, 3, b, 0.05, None, 0.5, np.int8(1)),
              lambda a, b: dmlq.matmul_integer(a, b),
              lambda a, b: dmlq.matmul_integer_to_float(a, 0.1, 3, b, 0.05, None, np.ones(4, np.float32))):
        for a in (a3, a3[0]):  # (b's batch and N chunks: the result's; its K chunks: a K split)
            cases.append((f, (a, b3), 1, ((1, 1), (3, 4), (2, 2)), ((1, 1), (5,), (2, 2))))
    for call, operands, lazy, chunks, result_chunks in cases:
        args = list(operands)
        args[lazy] = da.from_array(operands[lazy], chunks=chunks)
        got, want = call(*args), call(*operands)
        assert got.chunks == (result_chunks or chunks), (got.chunks, result_chunks or chunks)
        np.testing.assert_array_equal(got.compute(), want, strict=True)


_M0_CALLS = {  # M = 0 with per-row / per-batch-and-row A-side and output parameters of 0 rows
    "qmm per batch and row": lambda a, b: dmlq.quantized_matmul(
        a, np.ones((2, 0, 1), np.float32), None, b, 0.1, None, np.ones((2, 0, 1), np.float32),
        np.zeros((2, 0, 1), np.int8)),
    "qmm per row, leading 1s": lambda a, b: dmlq.quantized_matmul(
        a, np.ones((1, 1, 0, 1), np.float32), np.zeros((1, 1, 0, 1), np.uint8), b, 0.1, None, 0.5, np.int8(0)),
    "matmul_integer per batch and row": lambda a, b: dmlq.matmul_integer(a, b, np.zeros((2, 0, 1), np.uint8)),
    "to_float per batch and row": lambda a, b: dmlq.matmul_integer_to_float(
        a, np.ones((2, 0, 1), np.float32), np.zeros((2, 0, 1), np.uint8), b, np.ones(3, np.float32), None),
    "to_float per row, leading 1s": lambda a, b: dmlq.matmul_integer_to_float(
        a, np.ones((1, 1, 0, 1), np.float32), None, b, 0.1, None, np.zeros((2, 0, 3), np.float32)),
}


@pytest.mark.parametrize("name", sorted(_M0_CALLS))
@pytest.mark.parametrize("k_chunks", [(5,), (2, 3)])
def test_matmuls_with_no_rows_and_per_row_parameters(name, k_chunks):
    """An a of M = 0 beside A-side or output parameters of 0 rows ((2, 0, 1), (1, 1, 0, 1)): the
    dask graph took a parameter of no elements for one value (size <= 1), so its blocks failed at
    compute (shapes (2, 0) and (2, 0, 1) do not broadcast; a (1, 0) zero point refused) or the result
    came back (1, 1, 0, N) where the one-array call gives (0, N) (the cross-library probe, 2026-11-28)."""
    a = np.zeros((2, 0, 5), np.uint8)
    b = _rng.integers(-128, 128, (5, 3), dtype=np.int8)
    call = _M0_CALLS[name]
    want = call(a, b)
    got = call(da.from_array(a, chunks=((1, 1), (0,), k_chunks)), b)
    assert got.shape == want.shape
    got = got.compute()
    assert got.shape == want.shape and got.dtype == want.dtype
