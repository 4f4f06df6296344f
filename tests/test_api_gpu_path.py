"""The public functions' GPU path, end to end on the host harness: CuPy arrays of
the cupy stand-in (tests/cupy_stand_in: the only thing replaced), dispatch, the
per-signature plan and its runners, device constants for scalar scales, dmlq's
CupyBackend and the kernels compiled for the CPU. Every result is compared bit
for bit with the same call on NumPy arrays (dmlq.reference); outputs start
poisoned."""
from __future__ import annotations

import math

import numpy as np
import pytest

import dmlq
from dmlq import calls
from dmlq.gpu import plan as plan_module

import cupy_stand_in as S

f32, f16, u8, i8 = np.float32, np.float16, np.uint8, np.int8


@pytest.fixture
def gpu(cupy_stand_in):
    return cupy_stand_in


def to_device(a):
    """A device copy of a host array, its layout kept."""
    return S.module.asarray(a)


def _on_device(args):
    return [to_device(a) if isinstance(a, np.ndarray) else a for a in args]


def _names():
    return [launch[0] for launch in S.launches]


def same(fn, *args, **kwargs):
    """fn on stand-ins equals fn on NumPy arrays (dtype, shape, every byte)."""
    want = fn(*args, **kwargs)
    got = fn(*_on_device(args), **kwargs)
    assert type(got) is S.module.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.get().reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))
    return got


def _runners():
    """(plans, runners) the API holds for GPU signatures."""
    plans = [p for p in calls._PLANS.values() if p.runners is not None]
    return len(plans), sum(isinstance(r, plan_module.Runner)
                           for p in plans for _, table in p.runners.values() for r in table.values())


def test_every_operator_through_the_api(gpu, rng):
    x = rng.standard_normal((3, 5, 7)).astype(f32) * 40
    q = rng.integers(0, 256, (3, 5, 7), dtype=u8)
    same(dmlq.quantize_linear, x, 0.25, 3)
    same(dmlq.quantize_linear, x.astype(f16), np.float16(0.5), np.int8(-2))
    same(dmlq.quantize_linear, x, rng.uniform(0.1, 1, (1, 5, 1)).astype(f32), None, dtype=i8)
    same(dmlq.dequantize_linear, q, 0.1, 7)
    same(dmlq.dequantize_linear, q.astype(np.int16), rng.uniform(0.1, 1, (7,)).astype(f16), None)
    same(dmlq.quantized_add, q, 0.02, 128, q[:, :1], 0.03, 120, 0.05, 128)
    a = rng.integers(0, 256, (2, 17, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 9), dtype=i8)
    same(dmlq.quantized_matmul, a, 0.02, 3, b, rng.uniform(0.01, 0.1, (9,)).astype(f32), None, 0.5, i8(1))
    same(dmlq.quantized_matmul, a, rng.uniform(0.01, 0.1, (17, 1)).astype(f32), np.full((17, 1), 5, u8),
         b, 0.04, i8(-3), 0.5, u8(7))
    # every scale and zero point per axis, as 2-D (prepared into the kernels' vectors)
    same(dmlq.quantized_matmul, a, 0.02, 3, b, rng.uniform(0.01, 0.1, (1, 9)).astype(f32),
         rng.integers(-128, 128, (1, 9), dtype=i8), rng.uniform(0.1, 1, (17, 1)).astype(f32),
         rng.integers(-128, 128, (17, 1), dtype=i8))
    # K = 0: every sum is zero, the zero points of a and b drop out
    same(dmlq.quantized_matmul, np.empty((4, 0), u8), 0.02, 3, np.empty((0, 6), i8), 0.5, i8(-2), 0.25, i8(1))
    img = rng.integers(0, 256, (2, 3, 9, 8), dtype=u8)
    same(dmlq.quantized_avg_pool, img, 0.1, 3, 0.2, 5, 3, strides=2, start_padding=1)
    same(dmlq.quantized_avg_pool, img, rng.uniform(0.1, 1, (3,)).astype(f32), None, 0.2, None, (2, 3),
         include_padding=True, ceil_mode=True, start_padding=(1, 0), end_padding=(1, 2))


def test_scalar_scales_reach_matmul_and_pooling_without_a_synchronize(gpu, rng):
    a = to_device(rng.integers(0, 256, (16, 64), dtype=u8))
    b = to_device(rng.integers(-128, 128, (64, 32), dtype=i8))
    img = to_device(rng.integers(0, 256, (1, 2, 4, 4), dtype=u8))
    S.counts["uploads"] = S.counts["syncs"] = 0
    for scale in (0.1, 0.2, 0.3):  # a scale that changes per call: a new signature each time
        dmlq.quantized_matmul(a, scale, 3, b, 0.5, None, 0.5, i8(0))
        dmlq.quantized_avg_pool(img, scale, 3, 0.2, 5, 2)
    assert S.counts["uploads"] > 0 and S.counts["syncs"] == 0  # uploaded, and nothing waited for the GPU


def test_quantize_with_a_scale_of_the_other_float_type(gpu, rng):
    """float32 x with a float16 scale, or the reverse, as ONNX 23 allows: int8/uint8 out as for
    every other type (it was refused for int8/uint8 alone, and taken with precision="float32",
    which the contract calls the same), on the GPU as on NumPy; the value is the float32 one's."""
    x = rng.standard_normal((5, 33)).astype(f32) * 40
    got = same(dmlq.quantize_linear, x, np.float16(0.0371), np.int8(3))
    want = dmlq.quantize_linear(x, np.float32(np.float16(0.0371)), np.int8(3))
    np.testing.assert_array_equal(got.get(), want)
    same(dmlq.quantize_linear, x.astype(f16), np.float32(0.05), np.uint8(9))
    same(dmlq.quantize_linear, x, rng.uniform(0.1, 1, (33,)).astype(f16), None, dtype=i8)


def test_a_python_scale_takes_the_input_float_type_on_every_path(gpu):
    """A Python float scale with a float16 x is x's type (docs/semantics.md, "Scales"), whichever
    path the keywords pick: the int8 path rounded 1e-6 to float16 and the types-beyond-int8
    path (precision=, axis=, saturate=np.True_, dtype=int16) to float32, two answers for one
    call (99, 197 against 100, 200); 1e5 was refused by one and taken by the other."""
    x = np.array([1e-4, 2e-4, -3e-4], f16)
    want = dmlq.quantize_linear(x, np.float16(1e-6), np.int8(0))
    assert want.tolist() == [99, 127, -128]  # float16(1e-6) = 1.013e-06: 98.7, 197.4, -296
    for kw in ({}, dict(precision="float32"), dict(axis=0), dict(saturate=np.True_)):
        np.testing.assert_array_equal(same(dmlq.quantize_linear, x, 1e-6, np.int8(0), **kw).get(), want)
    np.testing.assert_array_equal(same(dmlq.quantize_linear, x, 1e-6, dtype=np.int16).get(),
                                  dmlq.quantize_linear(x, np.float16(1e-6), dtype=np.int16))
    # a list of numbers too (it was refused: "scale must have dtype float16 for a float16 x (got float32)")
    for kw in ({}, dict(dtype=np.int16), dict(precision="float32")):
        np.testing.assert_array_equal(dmlq.quantize_linear(x, [1e-6, 2e-6, 1e-6], **kw),
                                      dmlq.quantize_linear(x, np.array([1e-6, 2e-6, 1e-6], f16), **kw), strict=True)
    for kw in ({}, dict(dtype=np.int16), dict(precision="float32")):
        with pytest.raises(ValueError, match="scale = 100000.0 is beyond the range of float16"):
            dmlq.quantize_linear(x, 1e5, **kw)
        with pytest.raises(ValueError, match="scale = 100000.0 is beyond the range of float16"):
            dmlq.quantize_linear(to_device(x), 1e5, **kw)


def test_ceil_mode_window_past_the_padded_input_on_every_pooling_kernel(gpu, rng):
    """One ceil-mode output whose window runs past the padded input, on the variants selection
    picks for it (general, and tile_k2s2 along W): the same bytes as NumPy."""
    x = rng.integers(0, 256, (1, 2, 3, 3), dtype=u8)
    same(dmlq.quantized_avg_pool, x, 0.5, 3, 0.25, 7, 4, strides=2, ceil_mode=True)
    assert dmlq.kernel_plan(dmlq.quantized_avg_pool, to_device(x), 0.5, 3, 0.25, 7, 4, strides=2,
                            ceil_mode=True).variant == "general"
    y = rng.integers(0, 256, (1, 2, 3, 9), dtype=u8)
    same(dmlq.quantized_avg_pool, y, 0.5, 3, 0.25, 7, (4, 2), strides=2, ceil_mode=True, include_padding=True)
    assert dmlq.kernel_plan(dmlq.quantized_avg_pool, to_device(y), 0.5, 3, 0.25, 7, (4, 2), strides=2,
                            ceil_mode=True).variant == "tile_k2s2"


def test_a_zero_point_contradicting_dtype_is_refused_whatever_the_keywords(gpu):
    """int8 against uint8 (zero point against dtype=) was refused on the int8 path and converted
    on the types-beyond-int8 one, which precision= or axis= picked; refused on both now, on NumPy
    and the GPU. Another integer dtype is converted where it fits, on every path."""
    x = np.array([1.0, -2.0, 100.0], f32)
    for arr in (x, to_device(x)):
        for kw in ({}, dict(precision="float32"), dict(axis=0)):
            for zp, dt in ((np.uint8(3), np.int8), (np.int8(-3), np.uint8)):
                with pytest.raises(TypeError, match="contradicts the dtype of zero_point"):
                    dmlq.quantize_linear(arr, np.float32(0.5), zp, dtype=dt, **kw)
            for zp, dt in ((np.uint8(3), "int16"), (np.int32(3), np.int8)):
                got = dmlq.quantize_linear(arr, np.float32(0.5), zp, dtype=dt, **kw)
                got = got.get() if hasattr(got, "get") else got
                assert got.tolist() == [5, -1, 203 if dt == "int16" else 127]


def test_a_numpy_scalar_zero_point_gives_its_type(gpu, rng):
    """quantize_linear's output type is the zero point's, a NumPy scalar's too, on the GPU as on
    NumPy (the GPU path of the types beyond int8 took np.int16(7) as a Python int: uint8 out)."""
    x = rng.standard_normal((4, 40)).astype(f32) * 40
    assert same(dmlq.quantize_linear, x, 0.05, np.int16(-7)).dtype == np.int16
    assert same(dmlq.quantize_linear, x, np.full(4, 0.5, f32), np.int8(3), axis=0).dtype == np.int8
    assert same(dmlq.quantize_linear, x, 0.25, np.uint16(9), saturate=True).dtype == np.uint16


def test_vector_operands_as_numpy_matmul_takes_them(gpu, rng):
    """A 1-D a or b on the GPU: the kernels get (1, K) / (K, 1) views, the result loses the
    added dimension (out= too), as on NumPy."""
    a, A = rng.integers(0, 256, (40,), dtype=u8), rng.integers(0, 256, (3, 5, 40), dtype=u8)
    b, bv = rng.integers(-128, 128, (40, 9), dtype=i8), rng.integers(-128, 128, (40,), dtype=i8)
    assert same(dmlq.matmul_integer, a, b, u8(3)).shape == (9,)
    assert same(dmlq.matmul_integer, A, bv, u8(3), i8(-2)).shape == (3, 5)
    assert same(dmlq.matmul_integer_to_float, a, 0.02, u8(3), bv, 0.03, None).shape == ()
    assert same(dmlq.quantized_matmul, a, 0.02, 3, b, 0.04, None, 0.5, i8(1)).shape == (9,)
    out = S.module.empty((3, 5), np.int32)
    assert dmlq.matmul_integer(to_device(A), to_device(bv), out=out) is out
    np.testing.assert_array_equal(out.get(), dmlq.matmul_integer(A, bv))


def _host_form(v):
    """A GPU result as NumPy: a Packed's elements (unpacked), an array's copy."""
    if isinstance(v, dmlq.Packed):
        return dmlq.unpack(dmlq.Packed(v.data.get(), v.shape, v.dtype))
    return v.get()


def test_narrow_type_edges_found_by_the_stand_in_audit(gpu, rng):
    """Each of these differed between the GPU path and NumPy (2026-11-27): an empty axis's
    per-axis scale (a reshape error), a 0-d x with a 0-d e8m0 scale (a Packed of shape (1,)),
    an ml_dtypes int4 / int2 scalar zero point and a NumPy int8 one with dtype="int4" (refused),
    a NumPy float64 scalar scale (refused on NumPy), a Python scale beyond float32 (inf there)."""
    import ml_dtypes

    x = rng.standard_normal((4, 9)).astype(f32) * 5
    e = np.zeros((4, 0), f32)
    for dt in ("uint8", "int4", "int16", "float8_e5m2"):
        got = dmlq.quantize_linear(to_device(e), to_device(np.zeros(0, f32)), axis=1, dtype=dt)
        assert tuple(got.shape) == (4, 0)
    got = dmlq.dequantize_linear(to_device(np.zeros((4, 0), u8)), to_device(np.zeros(0, f32)), axis=1)
    assert got.shape == (4, 0)
    e8 = dmlq.Packed(S.module.asarray(np.array([127], u8)), (), "float8_e8m0fnu")  # 2**0
    got = dmlq.quantize_linear(to_device(np.array(3.0, f32)), e8, dtype="int4")
    assert isinstance(got, dmlq.Packed) and got.shape == () and _host_form(got).tolist() == 3
    for zp, kw in ((ml_dtypes.int4(-8), {}), (ml_dtypes.int2(-2), {}), (np.int8(-3), {"dtype": "int4"})):
        want = dmlq.quantize_linear(x, 0.3, zp, **kw)
        got = dmlq.quantize_linear(to_device(x), 0.3, zp, **kw)
        assert got.dtype == want.dtype.name and np.array_equal(_host_form(got), want), (zp, kw)
    q4 = rng.integers(-8, 8, (4, 9)).astype(ml_dtypes.int4)
    p4 = dmlq.pack(q4)
    want = dmlq.dequantize_linear(q4, 0.3, ml_dtypes.int4(-8))
    got = dmlq.dequantize_linear(dmlq.Packed(S.module.asarray(p4.data), p4.shape, p4.dtype), 0.3, ml_dtypes.int4(-8))
    np.testing.assert_array_equal(got.get(), want)
    for dt in ("int16", "int4", "float8_e4m3fn"):
        want = dmlq.quantize_linear(x, np.float64(0.3), dtype=dt)
        assert np.array_equal(want.view(np.uint8), dmlq.quantize_linear(x, f32(0.3), dtype=dt).view(np.uint8))
        got = dmlq.quantize_linear(to_device(x), np.float64(0.3), dtype=dt)
        assert np.array_equal(np.asarray(_host_form(got)).view(np.uint8), want.view(np.uint8))
        for arr in (x, to_device(x)):
            with pytest.raises(ValueError, match=r"scale = 1e\+39 is beyond the range of float32"):
                dmlq.quantize_linear(arr, 1e39, dtype=dt)
    # a Packed q that broadcasts against its scale (it was refused: "on the GPU the output has q's shape")
    for name in ("int4", "uint2", "float8_e4m3fn"):
        codes = dmlq.quantize_linear(x[:, :1], 0.5, dtype=name)  # (4, 1)
        pq = dmlq.pack(codes)
        dq = dmlq.Packed(S.module.asarray(pq.data), pq.shape, pq.dtype)
        for scale in (rng.uniform(0.1, 1, (1, 7)).astype(f32), rng.uniform(0.1, 1, (7,)).astype(f32),
                      rng.uniform(0.1, 1, (2, 4, 1)).astype(f32)):
            want = dmlq.dequantize_linear(codes, scale)
            got = dmlq.dequantize_linear(dq, to_device(scale))
            assert got.shape == want.shape and np.array_equal(got.get().view(np.uint32), want.view(np.uint32))
    q16 = rng.integers(-300, 300, (4, 1)).astype(np.int16)  # a plain q on the same path (dtype= given)
    want = dmlq.dequantize_linear(q16, np.full((1, 7), 0.25, f32), dtype=np.float16)
    got = dmlq.dequantize_linear(to_device(q16), to_device(np.full((1, 7), 0.25, f32)), dtype=np.float16)
    assert got.shape == (4, 7) and np.array_equal(got.get().view(np.uint16), want.view(np.uint16))
    bad = dmlq.Packed(S.module.asarray(np.zeros((1, 3), u8)), (2, 3), "int4")  # 2-D bytes: a TypeError, as NumPy
    with pytest.raises(TypeError, match="its data must be a 1-D uint8 array of 3 bytes"):
        dmlq.dequantize_linear(bad, 1.0)


def test_descriptor_operators_with_strides_on_gpu_arrays(gpu, rng):
    """compile_operator's strided TensorDescs bind CuPy buffers through
    cupy.lib.stride_tricks.as_strided (the stand-in lacked it, so no test ran this path):
    broadcast (stride 0) parameters, and an interleaved output that aliases nothing."""
    from dmlq import QuantizeLinearDesc, TensorDesc

    desc = QuantizeLinearDesc(TensorDesc("FLOAT32", (2, 3, 4)), TensorDesc("FLOAT32", (2, 3, 4), (0, 1, 0)),
                              TensorDesc("UINT8", (2, 3, 4), (0, 0, 0)), TensorDesc("UINT8", (2, 3, 4)))
    op = dmlq.compile_operator(desc)
    x = rng.standard_normal((2, 3, 4)).astype(f32)
    scales, zp = np.array([0.01, 0.02, 0.04], f32), np.array([128], u8)
    want = op(x, scales, zp)
    got = op(to_device(x), to_device(scales), to_device(zp))
    np.testing.assert_array_equal(got.get(), want)
    inter = dmlq.compile_operator(QuantizeLinearDesc(TensorDesc("FLOAT32", (3, 2)), TensorDesc("FLOAT32", (3, 2), (0, 0)),
                                                     None, TensorDesc("UINT8", (3, 2), (2, 3))))
    out = S.module.asarray(np.full(8, 0xA5, u8))
    inter(to_device(x[0, :, :2]), to_device(np.array([0.25], f32)), out=out)
    host = np.full(8, 0xA5, u8)
    inter(x[0, :, :2], np.array([0.25], f32), out=host)
    np.testing.assert_array_equal(out.get(), host)
    with pytest.raises(TypeError, match=r"QuantizeLinear: ScaleTensor must be a GPU array like the other operands"):
        op(to_device(x), 0.5, to_device(zp))  # a number where the operator binds a buffer
    with pytest.raises(TypeError, match=r"QuantizeLinear: NumPy and GPU arrays are mixed \(ScaleTensor is on the "
                                        r"host, InputTensor on the GPU\)"):  # (the fields were not named)
        op(to_device(x), scales, to_device(zp))


def test_dask_cupy_chunks_through_numpy_functions(gpu, rng):
    """dask's own tasks call NumPy functions on the chunks (np.broadcast_to for a batch that
    broadcasts, or a bias): CuPy's ndarray.__array_function__ sends them to CuPy, which the
    stand-in lacked (the calls failed in the tasks there)."""
    da = pytest.importorskip("dask.array")
    from dask.array.dispatch import concatenate_lookup

    concatenate_lookup.register(S.module.ndarray, S.module.concatenate)
    a = rng.integers(-128, 128, (2, 1, 4, 6), dtype=i8)
    b = rng.integers(0, 256, (3, 6, 3), dtype=u8)
    lazy = dmlq.matmul_integer(da.from_array(to_device(a), chunks=(1, 1, 4, 6), asarray=False),
                               da.from_array(to_device(b), chunks=(2, 6, 3), asarray=False))
    np.testing.assert_array_equal(lazy.compute().get(), dmlq.matmul_integer(a, b))
    a2, b2 = rng.integers(0, 256, (4, 6), dtype=u8), rng.integers(-128, 128, (6, 3), dtype=i8)
    bias = np.linspace(-1, 1, 3).astype(f32)
    lazy = dmlq.matmul_integer_to_float(da.from_array(to_device(a2), chunks=(2, 6), asarray=False), 0.5, 3,
                                        da.from_array(to_device(b2), chunks=(6, 3), asarray=False), 0.25, None,
                                        to_device(bias))
    np.testing.assert_array_equal(lazy.compute().get(), dmlq.matmul_integer_to_float(a2, 0.5, 3, b2, 0.25, None, bias))


def test_repeated_calls_reuse_one_runner(gpu, rng):
    a = to_device(rng.integers(0, 256, (17, 64), dtype=u8))  # past M = 16: the tiles (column sums, matmul)
    b = to_device(rng.integers(-128, 128, (64, 32), dtype=i8))
    ws = to_device(rng.uniform(0.01, 0.1, (32,)).astype(f32))
    x = to_device(rng.standard_normal(1000).astype(f32))
    for _ in range(3):
        dmlq.quantized_matmul(a, 0.02, 3, b, ws, None, 0.5, i8(0))
        dmlq.quantize_linear(x, 0.02, 128)
    assert _runners() == (2, 2)
    assert S.counts["uploads"] == 4 + 3  # the operands; the matmul's a_scale, a_zero_point, out_scale once
    names = _names()
    assert len(names) == 9 and names[:3] == names[3:6] == names[6:]  # column sums, matmul, quantize
    # another alignment is another runner (the vector head and cp.async width depend on it)
    dmlq.quantize_linear(to_device(np.zeros(1001, f32))[1:], 0.02, 128)
    assert _runners() == (2, 3)


_KERNEL_FORM_CALLS = {  # parameters that already are what the kernels read through a pointer
    "matmul_integer": lambda d: dmlq.matmul_integer(d["a"], d["b"], 3, i8(-2)),
    "matmul_integer_to_float": lambda d: dmlq.matmul_integer_to_float(d["a"], 0.02, 3, d["b"], d["bs"], None),
    "bias, float16 out": lambda d: dmlq.matmul_integer_to_float(d["a"], d["as"], None, d["b"], d["bs"], d["bz"],
                                                                d["bias"], dtype=f16),
    "blocked scales": lambda d: dmlq.matmul_integer_to_float(d["a"], 0.5, 3, d["b"], d["bsg"], None,
                                                             block_size=32),
    "quantized_matmul": lambda d: dmlq.quantized_matmul(d["a"], 0.02, 3, d["b"], d["bs"], None, 0.5, i8(0)),
    # a zero point given as a number beside a per-axis scale: widened once with the plan, not per call
    "zero points per tensor, scales per axis": lambda d: dmlq.quantized_matmul(d["a"], d["as"], 3, d["b"], d["bs"],
                                                                              i8(-2), 0.5, i8(0)),
    "packed b, M = 1": lambda d: dmlq.quantized_matmul(d["a"][:1], 0.02, 3, d["b4"], d["bs"], 8, 0.5, i8(0)),
    "blocked scales, a per-tensor zero point": lambda d: dmlq.matmul_integer_to_float(
        d["a"], d["as"], 3, d["b4"], d["bsg"], 8, block_size=32),
    "groups of 20 (the stream kernel)": lambda d: dmlq.matmul_integer_to_float(d["a"], d["as"], None, d["b"],
                                                                              d["bs20"], None, block_size=20),
}


@pytest.mark.parametrize("call", sorted(_KERNEL_FORM_CALLS))
def test_a_repeated_matmul_allocates_nothing_but_its_output(gpu, rng, call):
    """A 0-d device constant (a Python scalar's), a float32 per-row or per-column
    vector, a (groups, N) table and a float32 bias row are passed to the kernels as
    they are: a repeated call allocates its output and nothing else. Each further
    allocation would be a cast or a broadcast, one more CuPy kernel per call on a GPU
    (matmul_integer_to_float once made four: a_scale and a_zero_point broadcast to M
    rows, b_scale and the bias copied by astype; and a per-tensor zero point beside a
    per-axis scale was broadcast to its length: now widened once, with the plan)."""
    M, K, N = 4, 64, 32
    host = dict(a=rng.integers(0, 256, (M, K), dtype=u8), b=rng.integers(-128, 128, (K, N), dtype=i8),
                bs=rng.uniform(0.01, 0.1, (N,)).astype(f32), bz=rng.integers(-3, 3, (1, N), dtype=i8),
                bsg=rng.uniform(0.01, 0.1, (K // 32, N)).astype(f32), bs20=rng.uniform(0.01, 0.1, (4, N)).astype(f32), bias=rng.uniform(-1, 1, N).astype(f32),
                **{"as": rng.uniform(0.01, 0.1, (M, 1)).astype(f32)})
    d = {k: to_device(v) for k, v in host.items()}
    host["b4"] = dmlq.pack(host["b"].view(u8) & 15, "uint4")
    d["b4"] = dmlq.pack(to_device(host["b"].view(u8) & 15), "uint4")
    fn = _KERNEL_FORM_CALLS[call]
    fn(d)  # plans, and uploads the scalars' device constants
    S.counts["allocations"] = S.counts["uploads"] = 0
    S.launches.clear()
    got = fn(d)
    assert (S.counts["allocations"], S.counts["uploads"]) == (1, 0), _names()
    assert all(n.startswith("matmul_") for n in _names()), _names()
    want = fn(host)
    np.testing.assert_array_equal(got.get().view(np.uint8), want.view(np.uint8))


def test_runner_results_follow_each_call_values(gpu, rng):
    """A reused runner reads each call's arrays, not the first call's."""
    for _ in range(3):
        a = rng.integers(0, 256, (5, 33), dtype=u8)
        b = rng.integers(-128, 128, (33, 6), dtype=i8)
        s = rng.uniform(0.01, 0.1, (6,)).astype(f32)
        same(dmlq.quantized_matmul, a, 0.02, 3, b, s, None, 0.5, i8(0))
        img = rng.integers(0, 256, (1, 2, 5, 5), dtype=u8)
        same(dmlq.quantized_avg_pool, img, 0.1, 3, 0.2, 5, 2)
        q = rng.integers(-128, 128, (4, 8), dtype=i8)
        same(dmlq.dequantize_linear, q, 0.125, -3)
    assert _runners()[1] == 3


def test_scalar_values_are_part_of_the_signature(gpu, rng):
    """Host scalars are baked into a runner's arguments: other values, other runners."""
    x = rng.standard_normal(300).astype(f32) * 10
    for scale, zp in ((0.5, 3), (0.25, 3), (0.5, -4), (-0.0, 0)):
        same(dmlq.quantize_linear, x, scale, zp, dtype=i8)
    assert _runners() == (4, 4)


def test_out_with_scalar_parameters(gpu, rng):
    """Issue 24, defect 1: with out=, the overlap test met the host scalar (a 0-d
    NumPy array) and CuPy's may_share_memory refuses NumPy arrays."""
    x = rng.standard_normal(50).astype(f32) * 20
    out = gpu.empty(50, u8)
    assert dmlq.quantize_linear(to_device(x), 0.5, 3, out=out) is out
    np.testing.assert_array_equal(out.get(), dmlq.quantize_linear(x, 0.5, 3))
    q = gpu.empty(50, f32)
    assert dmlq.dequantize_linear(out, 0.5, 3, out=q) is q
    np.testing.assert_array_equal(q.get(), dmlq.dequantize_linear(dmlq.quantize_linear(x, 0.5, 3), 0.5, 3))


def test_user_out_strided_and_overlapping(gpu, rng):
    q = rng.integers(0, 256, (6, 10), dtype=u8)
    want = dmlq.quantized_add(q, 0.02, 128, q, 0.03, 120, 0.05, 100)
    dq = to_device(q)
    out = gpu.empty((10, 6), u8).T  # strided out
    out[...] = 0xA5
    assert dmlq.quantized_add(dq, 0.02, 128, dq, 0.03, 120, 0.05, 100, out=out) is out
    np.testing.assert_array_equal(out.get(), want)
    # out is an input: computed through a temporary, with a runner for its C layout
    assert dmlq.quantized_add(dq, 0.02, 128, dq, 0.03, 120, 0.05, 100, out=dq) is dq
    np.testing.assert_array_equal(dq.get(), want)
    img = rng.integers(0, 256, (1, 2, 6, 6), dtype=u8)
    want = dmlq.quantized_avg_pool(img, 0.1, 3, 0.1, 3, 2, strides=2)
    out = gpu.empty((1, 2, 3, 6), u8)[..., ::2]
    dmlq.quantized_avg_pool(to_device(img), 0.1, 3, 0.1, 3, 2, strides=2, out=out)
    np.testing.assert_array_equal(out.get(), want)


def test_kernel_plan_of_a_gpu_call(gpu, rng):
    p = dmlq.kernel_plan(dmlq.quantize_linear, to_device(np.ones(4096, f32)), 0.5, 3)
    assert (p.op, p.variant) == ("quantize_linear", "contig")
    assert _runners() == (1, 0)  # planned, not run


def test_strided_per_axis_scales(gpu, rng):
    """Per-channel and per-column vectors that are views with a stride: the runner
    copies them to contiguous vectors on every call (its prep), not only the first."""
    img = rng.integers(0, 256, (2, 3, 6, 5), dtype=u8)
    for _ in range(2):
        xs = rng.uniform(0.05, 1, 6).astype(f32)
        zs = rng.integers(0, 256, 6, dtype=u8)
        want = dmlq.quantized_avg_pool(img, xs[::2], zs[1::2], 0.3, 7, 2)
        dxs, dzs = to_device(xs), to_device(zs)
        got = dmlq.quantized_avg_pool(to_device(img), dxs[::2], dzs[1::2], 0.3, 7, 2)
        np.testing.assert_array_equal(got.get(), want)
        a = rng.integers(0, 256, (4, 19), dtype=u8)
        b = rng.integers(-128, 128, (19, 5), dtype=i8)
        bs = rng.uniform(0.01, 0.1, 10).astype(f32)
        want = dmlq.quantized_matmul(a, 0.02, 3, b, bs[::2], None, 0.5, i8(0))
        got = dmlq.quantized_matmul(to_device(a), 0.02, 3, to_device(b), to_device(bs)[::2], None, 0.5,
                                    i8(0))
        np.testing.assert_array_equal(got.get(), want)


def test_matmul_scales_of_float16_and_bfloat16(gpu, rng):
    """ONNX QLinearMatMul's float16 and bfloat16 scales on the GPU path as on NumPy, and as the
    float32 scales of the same values: device vectors (per row, per column, per batch and
    column) widened on each call, NumPy scalars widened once with the plan."""
    import ml_dtypes

    a = rng.integers(0, 256, (2, 5, 37), dtype=u8)
    b = rng.integers(-128, 128, (2, 37, 6), dtype=i8)
    for t in (f16, ml_dtypes.bfloat16):
        for a_s, b_s, o_s in [(t(0.0137), rng.uniform(0.01, 0.1, 6).astype(t), t(0.7)),
                              (rng.uniform(0.01, 0.1, (5, 1)).astype(t), rng.uniform(0.01, 0.1, (2, 1, 6)).astype(t),
                               np.array([0.4], t))]:
            got = same(dmlq.quantized_matmul, a, a_s, u8(7), b, b_s, i8(-2), o_s, i8(1))
            wide = [np.asarray(s).astype(f32) for s in (a_s, b_s, o_s)]
            np.testing.assert_array_equal(got.get(), dmlq.quantized_matmul(a, wide[0], u8(7), b, wide[1], i8(-2),
                                                                          wide[2], i8(1)))


def test_identical_devices_get_their_own_runners(gpu, rng):
    """Two identical devices: kernels looked up on one launch only there (the
    stand-in refuses a function of one device launched on the other), and each
    device gets its own copies of the scalar constants."""
    a = rng.integers(0, 256, (17, 40), dtype=u8)  # past M = 16: the tiles, no offsets table
    b = rng.integers(-128, 128, (40, 9), dtype=i8)
    x = rng.standard_normal(100).astype(f32)
    seen = set()
    for dev in (0, 1, 0):
        with gpu.cuda.Device(dev):
            S.counts["uploads"] = 0
            same(dmlq.quantized_matmul, a, 0.02, 3, b, 0.04, None, 0.5, i8(1))
            same(dmlq.quantize_linear, x, 0.02, 128)
            # a, b and x; the matmul's five scalar constants only on a device's first call
            assert S.counts["uploads"] == 3 + (0 if dev in seen else 5)
            seen.add(dev)
    assert sorted({launch[5] for launch in S.launches}) == [0, 1]


def test_an_array_on_another_device_is_refused(gpu, rng):
    """The fast path takes a CuPy array as it is only when it lives on the current
    device; one elsewhere gets to_gpu_array's error, as an operand or as out."""
    here = to_device(rng.standard_normal(10).astype(f32))
    with gpu.cuda.Device(1):
        there = to_device(rng.standard_normal(10).astype(f32))
        there_out = gpu.zeros(10, u8)
    dmlq.quantize_linear(here, 0.1)  # the signature is planned: the next call takes the fast path
    with pytest.raises(ValueError, match=r"quantize_linear: x is on device 1 but the current device is 0; "
                                         r"use `with cupy.cuda.Device\(1\):`"):
        dmlq.quantize_linear(there, 0.1)
    with pytest.raises(ValueError, match="quantized_add: out is on device 1"):
        dmlq.quantized_add(gpu.zeros(10, u8), 0.1, 0, here.astype(u8), 0.1, 0, 0.1, 0, out=there_out)


@pytest.mark.parametrize("which", ["scale", "zero_point", "both"])
def test_per_axis_parameters_on_reversed_axes(gpu, rng, which):
    """An out walked backwards (negative strides) moves every operand's origin,
    per-axis scales and zero points included."""
    x = (rng.standard_normal((6, 9)) * 30).astype(f32)
    q = rng.integers(0, 256, (6, 9), dtype=u8)
    s = rng.uniform(0.1, 1, (1, 9)).astype(f32)
    z = rng.integers(0, 256, (1, 9), dtype=u8)
    for view in (lambda a: a[:, ::-1], lambda a: a[::-1, ::-2]):
        for fn, data, dt in ((dmlq.quantize_linear, x, u8), (dmlq.dequantize_linear, q, f32)):
            args = (data, s if which != "zero_point" else 0.25, z if which != "scale" else u8(9))
            want = fn(*(view(a) if isinstance(a, np.ndarray) else a for a in args))
            out = view(to_device(np.full((6, 9 * np.dtype(dt).itemsize), 0xA5, np.uint8).view(dt)))
            fn(*(view(to_device(a)) if isinstance(a, np.ndarray) else a for a in args), out=out)
            np.testing.assert_array_equal(gpu.ascontiguousarray(out).get().view(np.uint8), want.view(np.uint8))


def test_sums_beyond_the_workspace_get_their_own_temporary(gpu, rng, monkeypatch):
    """Row and column sums larger than the workspace are allocated per call."""
    from dmlq.gpu import device

    monkeypatch.setattr(device, "WORKSPACE_MAX", 0)
    a = rng.integers(0, 256, (3, 11, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 13), dtype=i8)
    for _ in range(2):
        same(dmlq.quantized_matmul, a, 0.02, 3, b, 0.04, i8(-5), 0.5, i8(1))


def test_pooling_reach_past_2_31_is_refused_on_every_path(gpu):
    """The kernels' tap positions are C ints up to (outputs - 1) * stride + window + the padded
    input: the GPU refused a call past that (UnsupportedError, when launched: inside a dask
    task) that NumPy computed. Both refuse it now, when the call is checked."""
    x = np.zeros((1, 1, 6, 6), u8)
    kw = dict(strides=(1, 2**30), start_padding=(0, 2**30))
    for arr in (x, to_device(x)):
        with pytest.raises(dmlq.DescError, match=r"= 2147483655 in spatial dimension 1 must stay below 2\*\*31"):
            dmlq.quantized_avg_pool(arr, 0.1, 3, 0.1, 3, 1, **kw)
    da = pytest.importorskip("dask.array")
    with pytest.raises(dmlq.DescError, match="must stay below 2"):
        dmlq.quantized_avg_pool(da.from_array(to_device(x), chunks=(1, 1, 3, 3), asarray=False), 0.1, 3, 0.1, 3, 1,
                                **kw)
    same(dmlq.quantized_avg_pool, x, 0.1, 3, 0.1, 3, 1, strides=(1, 2**29), start_padding=(0, 2**29))


def test_a_nan_scale_sign_is_part_of_the_signature(gpu):
    """Every Python NaN had one plan-cache key, so the plan of one NaN scale (its value a constant)
    served the other sign: a float8 code's sign (the scale's, docs/semantics.md) followed the
    history. Both orders give each sign's own code now."""
    import ml_dtypes

    x = to_device(np.array([1.0, -2.0, 3.0, 0.5], f32))
    f8 = ml_dtypes.float8_e4m3fn
    for first in (-1.0, 1.0):
        calls.clear_plan_cache()
        for sign in (first, -first):
            got = dmlq.quantize_linear(x, math.copysign(math.nan, sign), dtype=f8)
            codes = got.data.get() if isinstance(got, dmlq.Packed) else got.get().view(np.uint8)
            assert set(codes.tolist()) == {0xFF if sign < 0 else 0x7F}, (first, sign)


def test_kernel_plan_refuses_the_same_call_whatever_ran_before(gpu):
    """kernel_plan of quantized_matmul with an unpacked int4 b (the GPU takes a dmlq.Packed) refused
    it only until a NumPy call of the same signature cached its plan."""
    import ml_dtypes

    a, b = np.ones((4, 8), u8), np.ones((8, 5), ml_dtypes.int4)
    args = (a, 0.1, None, b, 0.1, None, 0.2)
    calls.clear_plan_cache()
    with pytest.raises(dmlq.UnsupportedError, match=r"dmlq\.pack"):
        dmlq.kernel_plan(dmlq.quantized_matmul, *args)
    dmlq.quantized_matmul(*args)
    with pytest.raises(dmlq.UnsupportedError, match=r"dmlq\.pack"):
        dmlq.kernel_plan(dmlq.quantized_matmul, *args)


def test_a_float8_scalar_zero_point_on_the_gpu_as_on_numpy(gpu):
    """An ml_dtypes float8/float4 scalar zero point (not a numbers.Real) was a TypeError on the GPU
    ("must be zero or omitted (got 0)") and taken on NumPy; a nonzero one a TypeError there and a
    DescError here. Both paths: zero taken, nonzero a DescError."""
    import ml_dtypes

    x = np.array([1.0, -2.0, 3.0, 0.5], f32)
    for name in ("float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"):
        t = getattr(ml_dtypes, name)
        want = dmlq.quantize_linear(x, f32(0.5), np.array(0.0, t)[()])
        got = dmlq.quantize_linear(to_device(x), f32(0.5), np.array(0.0, t)[()])
        np.testing.assert_array_equal(dmlq.unpack(dmlq.Packed(got.data.get(), got.shape, got.dtype)), want)
        for arr in (x, to_device(x)):
            with pytest.raises(dmlq.DescError, match="zero_point must be zero"):
                dmlq.quantize_linear(arr, f32(0.5), np.array(1.0, t)[()])
