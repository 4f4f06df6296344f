"""The NumPy-like functions and compile_operator on the NumPy backend (CPU, CI)."""
import subprocess
import sys

import re

import numpy as np
import pytest

import dmlq
from dmlq import DataType, DescError, TensorDesc
from dmlq import reference as ref

f32, f16, i8, u8 = np.float32, np.float16, np.int8, np.uint8


def test_import_touches_no_gpu():
    code = "import sys, dmlq; dmlq.quantize_linear; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- quantize ---------------------------------------------------------------------------

def test_quantize_scalars_and_default_dtype(rng):
    x = rng.standard_normal((4, 5)).astype(f32) * 50
    got = dmlq.quantize_linear(x, 0.5, 3)
    assert got.dtype == u8  # a Python-int zero point takes the default output dtype
    want = np.empty((4, 5), u8)
    ref.quantize_linear(x, np.full((), 0.5, f32), np.full((), 3, u8), want)
    assert np.array_equal(got, want)
    assert dmlq.quantize_linear(x, 0.5, -3, dtype=np.int8).dtype == i8
    assert dmlq.quantize_linear(x, f32(0.5), i8(-3)).dtype == i8


def test_quantize_per_axis_broadcast_matches_elementwise(rng):
    x = rng.standard_normal((2, 3, 4)).astype(f32) * 10
    scale = (rng.random((1, 3, 1)) + 0.1).astype(f32)
    zp = rng.integers(-5, 5, (1, 3, 1)).astype(i8)
    got = dmlq.quantize_linear(x, scale, zp)
    for idx in np.ndindex(x.shape):
        t = f32(x[idx]) / scale[0, idx[1], 0]
        z = int(zp[0, idx[1], 0])
        expect = int(np.clip(np.rint(t), -128 - z, 127 - z)) + z
        assert got[idx] == expect


def test_quantize_float16_scale_from_python_float():
    x = np.array([0.623046875], f16)
    assert dmlq.quantize_linear(x, 0.03775024)[0] == 17  # scale becomes float16, as DML requires


@pytest.mark.parametrize("bad", [np.float64, np.int64, np.uint8])
def test_quantize_wrong_input_dtype(bad):
    with pytest.raises(TypeError, match="x must have dtype"):
        dmlq.quantize_linear(np.zeros(3, bad), 1.0)


def test_quantize_rules():
    x = np.zeros(3, f32)
    # a float16 scale for a float32 x (ONNX 23 on): its float32 value, the same as precision="float32"
    x3 = np.array([1.0, -2.5, 7.0], f32)
    s16 = np.array([0.0371, 0.5, 0.0999], f16)
    want = dmlq.quantize_linear(x3, s16.astype(f32), np.int8(1))
    assert np.array_equal(dmlq.quantize_linear(x3, s16, np.int8(1)), want)
    assert np.array_equal(dmlq.quantize_linear(x3, s16, np.int8(1), precision="float32"), want)
    with pytest.raises(DescError, match="out of range"):
        dmlq.quantize_linear(x, 1.0, 300)
    with pytest.raises(DescError, match="out of range"):
        dmlq.quantize_linear(x, 1.0, -1)  # default uint8
    with pytest.raises(TypeError, match="contradicts"):
        dmlq.quantize_linear(x, 1.0, u8(1), dtype=i8)
    with pytest.raises(TypeError, match="integer"):
        dmlq.quantize_linear(x, 1.0, 1.5)
    with pytest.raises(ValueError, match="broadcast"):
        dmlq.quantize_linear(x, np.ones(4, f32))


def test_out_checked_and_used(rng):
    x = rng.standard_normal(6).astype(f32)
    out = np.empty(6, u8)
    assert dmlq.quantize_linear(x, 0.1, out=out) is out
    with pytest.raises(TypeError, match="dtype"):
        dmlq.quantize_linear(x, 0.1, out=np.empty(6, i8), dtype=u8)
    with pytest.raises(ValueError, match="shape"):
        dmlq.quantize_linear(x, 0.1, out=np.empty(5, u8))
    with pytest.raises(TypeError, match=r"out must be a numpy.ndarray .*\(got list\)"):
        dmlq.quantize_linear(x, 0.1, out=[0] * 6)
    ro = np.empty(6, u8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dmlq.quantize_linear(x, 0.1, out=ro)


def test_out_overlapping_input_is_computed_correctly(rng):
    q = rng.integers(-128, 128, 64, dtype=i8)
    want = dmlq.quantized_add(q, 0.5, 1, q[::-1], 0.25, -2, 0.3, i8(4))
    buf = q.copy()
    got = dmlq.quantized_add(buf, 0.5, 1, buf[::-1], 0.25, -2, 0.3, i8(4), out=buf)
    assert got is buf and np.array_equal(buf, want)


def test_zero_d_and_empty():
    assert dmlq.quantize_linear(f32(2.5), 1.0).shape == ()
    assert dmlq.quantize_linear(np.array(2.5, f32), 1.0)[()] == 2
    assert dmlq.quantize_linear(np.zeros((0, 3), f32), 1.0).shape == (0, 3)
    assert dmlq.quantized_matmul(np.zeros((0, 4), u8), 1.0, None, np.zeros((4, 2), u8), 1.0, None, 1.0).shape == (0, 2)


# ---- dequantize -------------------------------------------------------------------------

def test_dequantize_dtypes():
    q = np.array([1, 2], np.int16)
    assert dmlq.dequantize_linear(q, 0.5).dtype == f32
    assert dmlq.dequantize_linear(q, f16(0.5)).dtype == f16
    assert dmlq.dequantize_linear(q, 0.5, 2).tolist() == [-0.5, 0.0]
    # an integer zero point of another dtype is converted when its value fits q's dtype
    assert dmlq.dequantize_linear(q, 0.5, np.int8(1)).tolist() == [0.0, 0.5]
    with pytest.raises(TypeError, match="zero_point must have an integer dtype"):
        dmlq.dequantize_linear(q, 0.5, np.float32(1))
    with pytest.raises(TypeError, match="q must"):
        dmlq.dequantize_linear(np.zeros(2, np.int64), 0.5)


# ---- add --------------------------------------------------------------------------------

def test_add_scales_must_be_single_values():
    a = np.zeros(3, u8)
    with pytest.raises(DescError, match="a_scale must have exactly 1 element"):
        dmlq.quantized_add(a, np.ones(3, f32), 0, a, 1.0, 0, 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        dmlq.quantized_add(a, 1.0, 0, np.zeros(4, u8), 1.0, 0, 1.0)


def test_add_broadcasts(rng):
    a = rng.integers(0, 256, (3, 1), dtype=u8)
    b = rng.integers(-128, 128, (1, 4), dtype=i8)
    got = dmlq.quantized_add(a, 0.5, 3, b, 0.25, -1, 0.7, i8(2))
    full = dmlq.quantized_add(np.broadcast_to(a, (3, 4)).copy(), 0.5, 3, np.broadcast_to(b, (3, 4)).copy(),
                              0.25, -1, 0.7, i8(2))
    assert got.shape == (3, 4) and np.array_equal(got, full)


# ---- matmul -----------------------------------------------------------------------------

def _int_matmul(a, azp, b, bzp):
    return (a.astype(np.int64) - azp) @ (b.astype(np.int64) - bzp)


def test_matmul_batch_broadcast_matches_loop(rng):
    a = rng.integers(0, 256, (2, 1, 5, 7), dtype=u8)
    b = rng.integers(-128, 128, (3, 7, 4), dtype=i8)
    got = dmlq.quantized_matmul(a, 0.02, 1, b, 0.03, -2, 0.5, u8(9))
    assert got.shape == (2, 3, 5, 4)
    for i in range(2):
        for j in range(3):
            one = dmlq.quantized_matmul(a[i, 0], 0.02, 1, b[j], 0.03, -2, 0.5, u8(9))
            assert np.array_equal(got[i, j], one)


def test_matmul_scale_shapes(rng):
    a = rng.integers(0, 256, (3, 4), dtype=u8)
    b = rng.integers(0, 256, (4, 5), dtype=u8)
    per_row = np.array([[0.5], [0.25], [1.0]], f32)
    per_col = np.array([0.5, 1, 2, 4, 8], f32)
    got = dmlq.quantized_matmul(a, per_row, None, b, per_col, None, 64.0)
    acc = _int_matmul(a, 0, b, 0)
    mult = (per_row * per_col[None, :]) / f32(64)
    want = np.clip(np.rint(acc.astype(f32) * mult), 0, 255).astype(u8)
    assert np.array_equal(got, want)
    assert np.array_equal(dmlq.quantized_matmul(a, per_row, None, b, per_col.reshape(1, 5), None, 64.0), got)
    with pytest.raises(DescError, match=r"a_scale must be a single value or shaped \(M, 1\)"):
        dmlq.quantized_matmul(a, per_row.reshape(3), None, b, 1.0, None, 1.0)
    with pytest.raises(DescError, match="b_zero_point"):
        dmlq.quantized_matmul(a, 1.0, None, b, 1.0, np.zeros((5, 1), u8), 1.0)
    with pytest.raises(ValueError, match="K = 4"):
        dmlq.quantized_matmul(a, 1.0, None, b[:3], 1.0, None, 1.0)
    # a vector a is the (1, K) matrix, as in numpy.matmul; a 0-d a has no K
    assert np.array_equal(dmlq.quantized_matmul(a[0], 1.0, None, b, per_col, None, 64.0),
                          dmlq.quantized_matmul(a[:1], 1.0, None, b, per_col, None, 64.0)[0])
    with pytest.raises(DescError, match="a and b must be matrices"):
        dmlq.quantized_matmul(a[0, 0], 1.0, None, b, 1.0, None, 1.0)


# ---- pooling ----------------------------------------------------------------------------

def test_pool_parameters_checked():
    x = np.zeros((1, 2, 5, 5), u8)
    p = dmlq.quantized_avg_pool
    with pytest.raises(DescError, match="window_size"):
        p(x, 1.0, None, 1.0, None, (-1, 2))
    with pytest.raises(DescError, match="empty"):
        p(x, 1.0, None, 1.0, None, ())
    with pytest.raises(DescError, match="2 integers"):
        p(x, 1.0, None, 1.0, None, (2, 2, 2))
    for wrong in ((2.0, 2), (True, 2)):  # a wrong type: TypeError (they were DescErrors, a ValueError)
        with pytest.raises(TypeError, match=r"window_size must hold integers"):
            p(x, 1.0, None, 1.0, None, wrong)
    assert p(x, 1.0, None, 1.0, None, np.array([2, 2])).shape == (1, 2, 4, 4)
    torch = pytest.importorskip("torch")
    assert p(x, 1.0, None, 1.0, None, torch.tensor([2, 2])).shape == (1, 2, 4, 4)  # 0-d tensors: their ints
    with pytest.raises(DescError, match="larger than the padded input"):
        p(x, 1.0, None, 1.0, None, 3, dilations=3)
    with pytest.raises(DescError, match="per channel"):
        p(x, np.ones(3, f32), None, 1.0, None, 2)
    with pytest.raises(DescError, match="3-D .*4-D"):
        p(np.zeros((2, 5), u8), 1.0, None, 1.0, None, 2)


def test_pool_per_channel_shapes_and_ceil(rng):
    x = rng.integers(0, 256, (2, 3, 7, 7), dtype=u8)
    s = np.array([0.5, 1.0, 2.0], f32)
    a = dmlq.quantized_avg_pool(x, s, None, 1.0, None, 2, strides=2)
    b = dmlq.quantized_avg_pool(x, s.reshape(1, 3, 1, 1), None, 1.0, None, (2, 2), strides=(2, 2))
    assert a.shape == (2, 3, 3, 3) and np.array_equal(a, b)
    c = dmlq.quantized_avg_pool(x, s, None, 1.0, None, 2, strides=2, ceil_mode=True)
    assert c.shape == (2, 3, 4, 4) and np.array_equal(c[:, :, :3, :3], a)


@pytest.mark.parametrize("shape, window, strides, pad, include", [
    ((1, 2, 3, 3), 4, 2, 0, False), ((2, 3, 1, 5), (2, 6), (2, 3), 0, False), ((1, 1, 4, 4), 6, 3, 1, True),
    ((1, 1, 4, 4), 6, 3, 1, False), ((1, 2, 3, 1), (4, 2), 2, 0, True), ((2, 2, 2, 3), (3, 5), (2, 4), 0, True)])
def test_ceil_mode_window_past_the_padded_input_equals_torch(rng, shape, window, strides, pad, include):
    """ceil_mode with a window longer than the padded input by less than a stride: one output
    per axis, as ONNX, onnxruntime and torch give (refused before, "larger than the padded
    input"). torch averages in float32 (exact here: scales of 1, sums below 2**24) and rounds
    half to even."""
    torch = pytest.importorskip("torch")
    x = rng.integers(0, 256, shape, dtype=u8)
    got = dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, strides=strides, start_padding=pad, end_padding=pad,
                                  include_padding=include, ceil_mode=True)
    nd = len(shape) - 2
    pool = torch.nn.functional.avg_pool2d if nd == 2 else torch.nn.functional.avg_pool3d
    want = pool(torch.from_numpy(x.astype(f32)), window, strides, pad, ceil_mode=True, count_include_pad=include)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got, torch.round(want).numpy().astype(u8))
    if pad == 0:  # floor mode has no window there
        with pytest.raises(DescError, match=r"larger than the padded input .*ceil_mode=True where it overhangs"):
            dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, strides=strides)


@pytest.mark.parametrize("window, strides, pad, include, ceil", [
    (3, 2, 1, False, False), (4, 3, 2, True, True), (5, 1, 0, False, True), (2, 2, 1, True, False), (4, 2, 0, False, True)])
def test_one_spatial_axis_equals_torch_avg_pool1d(rng, window, strides, pad, include, ceil):
    """(N, C, L) inputs, ONNX's 1-D AveragePool / QLinearAveragePool: pooled as (N, C, 1, L)
    (dmlq.pool1d; refused before, with a fix, x[None], that made N the channels). torch's
    avg_pool1d in float32 (exact: scales of 1) rounded half to even."""
    torch = pytest.importorskip("torch")
    x = rng.integers(0, 256, (2, 3, 17), dtype=u8)
    got = dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, strides=[strides], start_padding=pad, end_padding=pad,
                                  include_padding=include, ceil_mode=ceil)
    want = torch.nn.functional.avg_pool1d(torch.from_numpy(x.astype(f32)), window, strides, pad, ceil_mode=ceil,
                                          count_include_pad=include)
    np.testing.assert_array_equal(got, torch.round(want).numpy().astype(u8), strict=True)
    out = np.empty(got.shape, u8)
    assert dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, (window,), strides=strides, start_padding=pad,
                                   end_padding=pad, include_padding=include, ceil_mode=ceil, out=out) is out
    np.testing.assert_array_equal(out, got)
    per_channel = dmlq.quantized_avg_pool(x, np.ones((1, 3, 1), f32), 0, 1.0, 0, window, strides=strides,
                                          start_padding=pad, end_padding=pad, include_padding=include, ceil_mode=ceil)
    np.testing.assert_array_equal(per_channel, got)
    with pytest.raises(DescError, match=r"window_size must have 1 integer for a 3-D x \(N, C, L\)"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, (window, window))
    for shape in ((3,), (3, 1), (1, 3, 1)):  # per channel, as a 4-D x takes (C,), (C, 1, 1), (1, C, 1, 1)
        np.testing.assert_array_equal(dmlq.quantized_avg_pool(x, np.ones(shape, f32), 0, 1.0, 0, window), dmlq.
                                      quantized_avg_pool(x, 1.0, 0, 1.0, 0, window))
    with pytest.raises(DescError, match=r"x_scale must have 1 element .* 3-D x \(N, C, L\) \(got shape \(3, 1, 1\)\)"):
        dmlq.quantized_avg_pool(x, np.ones((3, 1, 1), f32), 0, 1.0, 0, window)
    # in the caller's shapes (they named the (N, C, 1, L) call's)
    with pytest.raises(ValueError, match=rf"out must have shape {re.escape(str(got.shape))} \(got \(2, 3, 1, 1\)\)"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, strides=strides, start_padding=pad, end_padding=pad,
                                include_padding=include, ceil_mode=ceil, out=np.empty((2, 3, 1, 1), u8))
    with pytest.raises(TypeError, match=r"window_size is required \(got None\); pass an int \(or 1 int\)"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, None)
    with pytest.raises(TypeError, match=rf"allocate it with np\.empty\({re.escape(str(got.shape))}, np\.uint8\)"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, strides=strides, start_padding=pad, end_padding=pad,
                                include_padding=include, ceil_mode=ceil, out=np.empty(got.shape, f32))
    with pytest.raises(DescError, match=r"every window_size value must be >= 1 \(got \(0,\)\)"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, 0)
    with pytest.raises(DescError, match=r"larger than the padded input \(17\) in spatial dimension 0"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, 18)
    with pytest.raises(TypeError, match=r"out must be a numpy\.ndarray"):
        dmlq.quantized_avg_pool(x, 1.0, 0, 1.0, 0, window, out=[0])


@pytest.mark.parametrize("form", [lambda v: [[e] for e in v], lambda v: [[[e] for e in v]],
                                  lambda v: tuple((e,) for e in v)])
def test_one_spatial_axis_takes_nested_lists_per_channel(rng, form):
    """A 3-D x's per-channel scale or zero point as a nested list of shape (C, 1) or (1, C, 1), as
    np.asarray shapes it: taken as an array of that shape is (it was refused: "must be a single
    value or per channel ((C,) or (1, C, 1, ...) ... got (1, 3, 1))", a list has no .shape)."""
    x = rng.integers(0, 256, (2, 3, 9), dtype=u8)
    scales, zps = [0.5, 0.25, 0.125], [1, 2, 3]
    want = dmlq.quantized_avg_pool(x, np.array(scales, f32), np.array(zps, u8), 0.5, np.array(zps, i8), 2,
                                   strides=2)
    got = dmlq.quantized_avg_pool(x, form(scales), form(zps), 0.5, form(zps), 2, strides=2, dtype=np.int8)
    np.testing.assert_array_equal(got, want, strict=True)


# ---- compile_operator and arrays --------------------------------------------------------

def test_compile_operator_with_strided_buffers(rng):
    # Per-channel scale expressed the DirectML way: full Sizes, stride 0 except along C.
    x = rng.standard_normal((2, 3, 4)).astype(f32)
    scales = np.array([0.5, 0.25, 2.0], f32)
    desc = dmlq.QuantizeLinearDesc(
        TensorDesc("FLOAT32", (2, 3, 4)), TensorDesc(DataType.FLOAT32, (2, 3, 4), (0, 1, 0)),
        TensorDesc("UINT8", (2, 3, 4), (0, 0, 0)), TensorDesc("UINT8", (2, 3, 4)))
    op = dmlq.compile_operator(desc)
    got = op(x, scales, np.array([7], u8))
    want = dmlq.quantize_linear(x, scales.reshape(1, 3, 1), u8(7))
    assert np.array_equal(got, want)
    with pytest.raises(TypeError, match="expected 3 inputs"):
        op(x, scales)
    with pytest.raises(TypeError, match="ScaleTensor must be FLOAT32"):
        op(x, scales.astype(f16), np.array([7], u8))
    with pytest.raises(ValueError, match="address"):
        op(x, scales[:2], np.array([7], u8))


def test_compile_operator_feature_levels():
    t = TensorDesc("FLOAT32", (1, 1, 2, 2))
    desc = dmlq.QuantizeLinearDesc(t, t, TensorDesc("UINT8", (1, 1, 2, 2)), TensorDesc("UINT8", (1, 1, 2, 2)))
    dmlq.compile_operator(desc, "1.0")
    pool = dmlq.QuantizedLinearAveragePoolingDesc(
        TensorDesc("UINT8", (1, 1, 2, 2)), TensorDesc("FLOAT32", (1, 1, 1, 1)), None,
        TensorDesc("FLOAT32", (1, 1, 1, 1)), None, TensorDesc("UINT8", (1, 1, 1, 1)),
        2, (1, 1), (2, 2), (0, 0), (0, 0), (1, 1), False)
    one = np.ones(1, f32)
    assert dmlq.compile_operator(pool)(np.array([[[[1, 2], [3, 4]]]], u8), one, one).tolist() == [[[[2]]]]
    with pytest.raises(DescError):
        dmlq.compile_operator(pool, "6.0")


def test_compile_operator_verdict_does_not_depend_on_what_was_compiled_before():
    """2.0 == 2 and 1 == True as Python values: a validation cache keyed by value alone took a
    float DimensionCount, an int IncludePadding or float strides for the valid descriptor it
    equalled once that had been compiled (and the operator then failed when run)."""
    one = (1, 1, 1, 1)

    def pool(dims=2, strides=(1, 1), include_padding=False, out=(1, 1, 3, 3)):
        return dmlq.QuantizedLinearAveragePoolingDesc(
            TensorDesc("UINT8", (1, 1, 5, 5)), TensorDesc("FLOAT32", one), None, TensorDesc("FLOAT32", one), None,
            TensorDesc("UINT8", out), dims, strides, (3, 3), (0, 0), (0, 0), (1, 1), include_padding)

    for good, bad, message in ((pool(), pool(dims=2.0), "DimensionCount is a UINT"),
                               (pool(include_padding=False), pool(include_padding=0.0), "IncludePadding is a BOOL"),
                               (pool(strides=(2, 2), out=(1, 1, 2, 2)), pool(strides=(2.0, 2.0), out=(1, 1, 2, 2)),
                                "Strides must hold integers")):
        assert good == bad  # equal as Python values
        dmlq.compile_operator(good)
        with pytest.raises(TypeError, match=message):
            dmlq.compile_operator(bad)
    f = TensorDesc("FLOAT32", (1, 1, 2, 3))
    quantize = dmlq.QuantizeLinearDesc(f, f, TensorDesc("UINT8", (1, 1, 2, 3)), TensorDesc("UINT8", (1, 1, 2, 3)))
    dmlq.compile_operator(quantize, 6.0)  # the levels 6.0 and 1.0, spelled as floats
    dmlq.compile_operator(quantize, 1.0)
    for bad_level in (6, True):  # equal to 6.0 and 1.0, but not levels: refused whatever came before
        with pytest.raises(DescError, match="unknown DirectML feature level"):
            dmlq.compile_operator(quantize, bad_level)


def test_compile_operator_matmul_batches(rng):
    a = rng.integers(-128, 128, (2, 3, 4, 5), dtype=i8)
    b = rng.integers(0, 256, (1, 3, 5, 6), dtype=u8)
    desc = dmlq.QuantizedLinearMatrixMultiplyDesc(
        TensorDesc("INT8", a.shape), TensorDesc("FLOAT32", (1, 1, 4, 1)), None,
        TensorDesc("UINT8", b.shape), TensorDesc("FLOAT32", (1, 1, 1, 1)), TensorDesc("UINT8", (1, 1, 1, 6)),
        TensorDesc("FLOAT32", (1, 1, 1, 1)), None, TensorDesc("INT8", (2, 3, 4, 6)))
    a_scale = np.array([0.5, 1, 2, 4], f32)
    bzp = np.arange(6, dtype=u8)
    got = dmlq.compile_operator(desc)(a, a_scale, b, np.array([0.01], f32), bzp, np.array([3.0], f32))
    want = dmlq.quantized_matmul(a, a_scale.reshape(4, 1), None, b, 0.01, bzp, 3.0, dtype=i8)
    assert np.array_equal(got, want)


class _FakeCudaArray:
    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_mixing_host_and_gpu_arrays_is_a_type_error():
    with pytest.raises(TypeError, match="mixed"):
        dmlq.quantize_linear(_FakeCudaArray(), np.ones(2, f32))


def test_unsupported_array_type():
    with pytest.raises(TypeError, match=r"x must be an array or a number \(got object\)"):
        dmlq.quantize_linear(object(), 1.0)


def test_ceil_mode_sizes_follow_onnx_and_semantics():
    from dmlq.desc import pool_output_accepted, pool_output_size

    # 7 wide, window 3, stride 1: exact division, so ceil mode adds nothing (ONNX, PyTorch) ...
    assert pool_output_size(7, 3, 1, 0, 0, 1) == (5, 5)
    # ... but docs/semantics.md still accepts 6 in a desc: the 6th window starts at 5 < 7.
    assert pool_output_accepted(7, 3, 1, 0, 0, 1) == (5, 6)
    # 8 wide, window 3, stride 2: (8 - 3) / 2 is inexact -> floor 3, ceil 4 (window at 6 < 8)
    assert pool_output_size(8, 3, 2, 0, 0, 1) == (3, 4)
    # the extra window would start in the end padding only: not accepted
    assert pool_output_size(4, 2, 3, 0, 2, 1) == (2, 2)
    x = np.zeros((1, 1, 1, 7), u8)
    assert dmlq.quantized_avg_pool(x, 1.0, None, 1.0, None, (1, 3), ceil_mode=True).shape == (1, 1, 1, 5)


def test_integer_parameters_take_0d_numpy_integer_arrays():
    """axis, block_size, window_size and strides take a 0-d NumPy integer array as NumPy's own
    functions do (numpy.sum(axis=np.array(1))) and as dmlq.typing's Index says (they were refused:
    "axis must be an int (got array(1))"); a 0-d float or bool array, a 1-element 1-D array and a
    tensor stay refused (a device or lazy array is not read for a parameter)."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    s = np.full(8, 0.25, np.float32)
    assert np.array_equal(dmlq.quantize_linear(x, s, axis=np.array(1)), dmlq.quantize_linear(x, s, axis=1))
    sb = np.full((2, 2), 0.25, np.float32)
    for k in (np.array(4), np.array(4, np.uint8)):
        assert np.array_equal(dmlq.quantize_linear(x, sb, axis=np.array(-1), block_size=k, dtype="int4"),
                              dmlq.quantize_linear(x, sb, axis=-1, block_size=4, dtype="int4"))
    a, w = np.ones((3, 8), np.uint8), np.ones((8, 5), np.int8)
    ws = np.full((2, 5), 0.5, np.float32)
    assert np.array_equal(dmlq.matmul_integer_to_float(a, 1.0, None, w, ws, None, block_size=np.array(4)),
                          dmlq.matmul_integer_to_float(a, 1.0, None, w, ws, None, block_size=4))
    img = np.arange(32, dtype=np.uint8).reshape(1, 2, 4, 4)
    assert np.array_equal(dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, np.array(2), strides=np.array(2)),
                          dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, 2, strides=2))
    for bad in (np.array(1.0), np.array(True), np.array([1]), torch.tensor(1)):
        with pytest.raises(TypeError, match=r"^quantize_linear: axis must be an int \(got "):
            dmlq.quantize_linear(x, s, axis=bad)
    with pytest.raises(TypeError, match=r"^quantized_avg_pool: window_size must be an int or a sequence of ints"):
        dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, np.array(2.0))
