"""A new result's memory order (dmlq.layout): that of the operand it is shaped like.

Expected values are the same calls on C-order copies (tied to dmlq.reference by
tests/test_api.py and tests/test_quant_api.py); the order expected is the input's
(numpy's order='K', torch's preserve_format). The GPU twin runs on the cupy stand-in.
"""
from __future__ import annotations

import importlib
import itertools

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import layout

f32, u8, i8 = np.float32, np.uint8, np.int8


def _axes_order(a):
    """The axes of ``a`` from the largest stride to the smallest (length-1 axes left out)."""
    return [i for i in sorted(range(a.ndim), key=lambda i: -a.strides[i]) if a.shape[i] != 1]


def _permuted(rng, shape, perm, make):
    """An array of ``shape`` whose memory runs in axis order ``perm`` (C order transposed)."""
    base = make(rng, tuple(shape[i] for i in perm))
    return base.transpose(layout.inverse(perm))


def _floats(rng, shape):
    x = (rng.standard_normal(shape) * 40).astype(f32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    return x


def _codes(rng, shape):
    return rng.integers(0, 256, shape, dtype=u8)


def test_dense_order():
    assert layout.dense_order((2, 3), (12, 4), 4) is None                      # C order
    assert layout.dense_order((2, 3), (4, 8), 4) == (1, 0)                     # Fortran order
    assert layout.dense_order((2, 3, 5, 4), (60, 1, 12, 3)) == (0, 2, 3, 1)   # channels_last
    assert layout.dense_order((1, 3, 5, 4), (60, 1, 12, 3)) == (0, 2, 3, 1)   # a length-1 axis keeps its place
    assert layout.dense_order((2, 3, 5, 4), (120, 1, 24, 6)) is None          # not dense (a gap)
    assert layout.dense_order((2, 3), (0, 1)) is None                          # broadcast: not dense
    assert layout.dense_order((2, 0), (1, 2)) is None                          # empty: C order
    assert layout.inverse((0, 2, 3, 1)) == (0, 3, 1, 2)


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 1, 0), (2, 0, 1), (0, 2, 1)])
def test_numpy_results_keep_the_input_order(perm):
    rng = np.random.default_rng(list(perm))
    shape = (3, 4, 6)
    x = _permuted(rng, shape, perm, _floats)
    xc = np.ascontiguousarray(x)
    s_axis = rng.uniform(0.1, 1, (shape[1],)).astype(f32)
    s_block = rng.uniform(0.1, 1, (3, 4, 3)).astype(f32)  # blocks of 2 along axis 2
    cases = [
        (dmlq.quantize_linear, (0.25, u8(128)), {}),
        (dmlq.quantize_linear, (0.25,), dict(dtype="int16")),
        (dmlq.quantize_linear, (0.25,), dict(dtype="int4")),
        (dmlq.quantize_linear, (0.25,), dict(dtype="float8_e4m3fn", saturate=False)),
        (dmlq.quantize_linear, (s_axis,), dict(axis=1, dtype=i8)),
        (dmlq.quantize_linear, (s_axis,), dict(axis=-2, dtype="uint2")),
        (dmlq.quantize_linear, (s_block,), dict(block_size=2, dtype="int4")),
        (dmlq.quantize_linear, (s_axis[:, None],), {}),  # broadcast from the right
    ]
    for fn, args, kw in cases:
        want = fn(xc, *args, **kw)
        got = fn(x, *args, **kw)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(u8), want.view(u8), strict=True)
        assert _axes_order(got) == list(perm), (kw, got.strides)
        q = got
        back = dmlq.dequantize_linear(q, *args, **{k: v for k, v in kw.items() if k in ("axis", "block_size")})
        np.testing.assert_array_equal(back, dmlq.dequantize_linear(np.ascontiguousarray(q), *args, **{
            k: v for k, v in kw.items() if k in ("axis", "block_size")}), strict=True)
        assert _axes_order(back) == list(perm)
    a = _permuted(rng, shape, perm, _codes)
    b = _codes(rng, shape[1:])  # broadcast: a decides
    got = dmlq.quantized_add(a, 0.1, 3, b, 0.2, 7, 0.3, i8(-1))
    np.testing.assert_array_equal(got, dmlq.quantized_add(np.ascontiguousarray(a), 0.1, 3, b, 0.2, 7, 0.3, i8(-1)),
                                  strict=True)
    assert _axes_order(got) == list(perm)
    got = dmlq.quantized_add(b, 0.2, 7, a, 0.1, 3, 0.3)  # b (second) is the one of the result's shape
    assert _axes_order(got) == list(perm)
    got = dmlq.quantized_add(np.ascontiguousarray(a), 0.2, 7, a, 0.1, 3, 0.3)  # a decides: C order
    assert got.flags.c_contiguous


def test_numpy_pooling_keeps_channels_last():
    rng = np.random.default_rng(5)
    for shape, perm in (((2, 3, 7, 6), (0, 2, 3, 1)), ((1, 2, 5, 4, 3), (0, 2, 3, 4, 1))):
        x = _permuted(rng, shape, perm, _codes)
        kw = dict(window_size=2, strides=2, start_padding=1, ceil_mode=True)
        got = dmlq.quantized_avg_pool(x, 0.1, 3, 0.2, u8(5), **kw)
        want = dmlq.quantized_avg_pool(np.ascontiguousarray(x), 0.1, 3, 0.2, u8(5), **kw)
        np.testing.assert_array_equal(got, want, strict=True)
        assert _axes_order(got) == [i for i in perm if got.shape[i] != 1]
        assert dmlq.kernel_plan(dmlq.quantized_avg_pool, x, 0.1, 3, 0.2, u8(5), **kw) is not None


def test_pooling_keeps_channels_last_where_x_has_length_1_spatial_axes():
    """A channels_last x with a spatial axis of length 1 (padding makes it longer in the result)
    gave a result whose memory was not channels_last: the length-1 axis kept its C-order place
    in the order (N, W, H, C for an H of 1; N, H, C, W for a W of 1), which torch's
    is_contiguous(memory_format=channels_last) does not call channels_last. Its stride says where
    it lies (torch's and NumPy's channels_last copies give it one)."""
    rng = np.random.default_rng(10)
    for shape, pads in (((2, 3, 1, 4), (1, 0)), ((2, 3, 4, 1), (0, 1)), ((2, 3, 1, 4, 1), (1, 0, 2)),
                        ((1, 3, 1, 5), (2, 1))):
        perm = (0,) + tuple(range(2, len(shape))) + (1,)
        x = _permuted(rng, shape, perm, _codes)  # channels_last memory, as np.moveaxis(...).copy() makes it
        kw = dict(window_size=1, start_padding=pads, end_padding=pads)
        got = dmlq.quantized_avg_pool(x, 0.1, 3, 0.2, u8(5), **kw)
        np.testing.assert_array_equal(got, dmlq.quantized_avg_pool(np.ascontiguousarray(x), 0.1, 3, 0.2, u8(5), **kw),
                                      strict=True)
        assert _axes_order(got) == [i for i in perm if got.shape[i] != 1], (shape, got.shape, got.strides)
    torch = pytest.importorskip("torch")
    importlib.import_module("dmlq.torch")
    for shape, pads, fmt in (((2, 3, 1, 4), (1, 0), torch.channels_last), ((2, 3, 4, 1), (0, 1), torch.channels_last),
                             ((2, 3, 1, 4, 1), (1, 0, 2), torch.channels_last_3d)):
        x = torch.randint(0, 256, shape, dtype=torch.uint8).contiguous(memory_format=fmt)
        args = (x, 0.1, 3, 0.2, 5, [1] * (len(shape) - 2))
        kw = dict(start_padding=list(pads), end_padding=list(pads))
        got = dmlq.quantized_avg_pool(*args, **kw)
        assert got.is_contiguous(memory_format=fmt), (shape, got.shape, got.stride())
        assert torch.equal(got, dmlq.quantized_avg_pool(x.contiguous(), *args[1:], **kw))
        torch.library.opcheck(torch.ops.dmlq.quantized_avg_pool.default, args, kw, test_utils=("test_faketensor",))


def test_c_order_where_the_input_is_not_dense_or_out_is_given():
    rng = np.random.default_rng(6)
    x = _floats(rng, (6, 8))
    assert dmlq.quantize_linear(x[::2, 1:], 0.5, u8(1)).flags.c_contiguous          # a strided view
    assert dmlq.quantize_linear(np.broadcast_to(x[0], (6, 8)), 0.5).flags.c_contiguous  # broadcast
    out = np.empty((6, 8), u8)
    assert dmlq.quantize_linear(x.T.copy().T, 0.5, out=out) is out                 # out= as given
    assert dmlq.quantize_linear(x[:, ::-1], 0.5).flags.c_contiguous                # negative strides
    # the shape alone (dmlq's output_meta, used by dask and torch.compile) is the same
    from dmlq.calls import output_meta
    assert output_meta(dmlq.quantize_linear, x.T, 0.5) == ((8, 6), np.dtype(u8))


@pytest.mark.gpu
def test_gpu_results_keep_the_input_order(cupy_twin):
    import cupy as cp

    rng = np.random.default_rng(7)
    perm, shape = (1, 0, 2), (3, 4, 6)
    x = _permuted(rng, shape, perm, _floats)
    xg = cp.asarray(x).transpose(perm).copy().transpose(layout.inverse(perm))  # the same order on the device
    assert xg.strides == tuple(s for s in x.strides)
    s_axis = rng.uniform(0.1, 1, (shape[1],)).astype(f32)
    for args, kw in (((0.25, u8(128)), {}), ((0.25,), dict(dtype="int16")), ((cp.asarray(s_axis),), dict(axis=1))):
        got = dmlq.quantize_linear(xg, *args, **kw)
        want = dmlq.quantize_linear(np.ascontiguousarray(x), *(cp.asnumpy(a) if isinstance(a, cp.ndarray) else a
                                                               for a in args), **kw)
        assert isinstance(got, cp.ndarray) and _axes_order(got) == list(perm)
        np.testing.assert_array_equal(cp.asnumpy(got), want, strict=True)
        back = dmlq.dequantize_linear(got, *args, **{k: v for k, v in kw.items() if k == "axis"})
        assert _axes_order(back) == list(perm)
    packed = dmlq.quantize_linear(xg, 0.25, dtype="int4")  # a Packed result: C order by definition
    assert isinstance(packed, dmlq.Packed)
    want = dmlq.quantize_linear(np.ascontiguousarray(x), 0.25, dtype="int4")
    np.testing.assert_array_equal(dmlq.unpack(dmlq.Packed(cp.asnumpy(packed.data), packed.shape, packed.dtype)),
                                  want, strict=True)
    a = _permuted(rng, shape, perm, _codes)
    ag = cp.asarray(a).transpose(perm).copy().transpose(layout.inverse(perm))
    got = dmlq.quantized_add(ag, 0.1, 3, ag, 0.2, 7, 0.3)
    assert _axes_order(got) == list(perm)
    np.testing.assert_array_equal(cp.asnumpy(got), dmlq.quantized_add(a, 0.1, 3, a, 0.2, 7, 0.3), strict=True)
    img = _permuted(rng, (2, 3, 7, 6), (0, 2, 3, 1), _codes)
    imgg = cp.asarray(np.ascontiguousarray(img.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
    got = dmlq.quantized_avg_pool(imgg, 0.1, 3, 0.2, u8(5), window_size=3, strides=2)
    assert _axes_order(got) == [0, 2, 3, 1]
    plan = dmlq.kernel_plan(dmlq.quantized_avg_pool, imgg, 0.1, 3, 0.2, u8(5), window_size=3, strides=2)
    assert plan.variant == "general" and "temporary" not in str(plan)  # written through out's strides
    np.testing.assert_array_equal(cp.asnumpy(got), dmlq.quantized_avg_pool(img, 0.1, 3, 0.2, u8(5), window_size=3,
                                                                         strides=2), strict=True)
    for shape, perm, kw in (((2, 3, 4, 5, 6), (0, 2, 3, 4, 1), dict(window_size=(2, 3, 2), dilations=(1, 2, 1))),
                            ((3, 5, 9, 7), (0, 2, 3, 1), dict(window_size=(3, 2), strides=(2, 3), start_padding=1,
                                                              ceil_mode=True, include_padding=True)),
                            ((2, 4, 1, 5), (0, 2, 3, 1), dict(window_size=1, start_padding=(1, 0),  # H of 1 made 3
                                                              end_padding=(1, 0)))):
        img = _permuted(rng, shape, perm, _codes)
        imgg = cp.asarray(np.ascontiguousarray(img.transpose(perm))).transpose(layout.inverse(perm))
        s_c = rng.uniform(0.05, 0.3, (shape[1],)).astype(f32)
        got = dmlq.quantized_avg_pool(imgg, cp.asarray(s_c), 3, 0.2, u8(5), **kw)
        assert _axes_order(got) == [i for i in perm if got.shape[i] != 1]
        np.testing.assert_array_equal(cp.asnumpy(got), dmlq.quantized_avg_pool(img, s_c, 3, 0.2, u8(5), **kw),
                                      strict=True)


def test_torch_channels_last_in_channels_last_out():
    torch = pytest.importorskip("torch")
    import dmlq.torch  # noqa: F401  (registers the custom ops)

    gen = torch.Generator().manual_seed(8)
    x = torch.randn(2, 3, 5, 4, generator=gen).to(memory_format=torch.channels_last)
    xc = x.contiguous()
    cl = torch.channels_last
    for kw in ({}, dict(dtype=torch.int8), dict(dtype=torch.int4), dict(dtype="float8_e4m3fn")):
        q = dmlq.quantize_linear(x, 0.1, **kw)
        assert q.is_contiguous(memory_format=cl), kw
        want = dmlq.quantize_linear(xc, 0.1, **kw)
        assert torch.equal(q.view(torch.uint8).contiguous(), want.view(torch.uint8))
    q = dmlq.quantize_linear(x, 0.1, 3)
    assert dmlq.dequantize_linear(q, 0.1, 3).is_contiguous(memory_format=cl)
    assert dmlq.quantized_add(q, 0.1, 3, q.contiguous(), 0.1, 3, 0.2).is_contiguous(memory_format=cl)
    p = dmlq.quantized_avg_pool(q, 0.1, 3, 0.1, 3, window_size=2)
    assert p.is_contiguous(memory_format=cl)
    assert torch.equal(p, dmlq.quantized_avg_pool(q.contiguous(), 0.1, 3, 0.1, 3, window_size=2))
    s = torch.rand(3, generator=gen) + 0.5
    assert torch.equal(dmlq.quantize_linear(x, s, axis=1), dmlq.quantize_linear(xc, s, axis=1))
    # the fake implementation gives the real one's strides (torch.compile, torch.export)
    for op, args in ((torch.ops.dmlq.quantize_linear.default, (x, 0.1, 3)),
                     (torch.ops.dmlq.dequantize_linear.default, (q, 0.1, 3)),
                     (torch.ops.dmlq.quantized_add.default, (q.contiguous(), 0.1, 3, q, 0.1, 3, 0.2, 0)),
                     (torch.ops.dmlq.quantized_avg_pool.default, (q, 0.1, 3, 0.1, 3, [2, 2]))):
        torch.library.opcheck(op, args, test_utils=("test_faketensor",))


def test_every_permutation_of_a_4d_quantize_matches_c_order():
    rng = np.random.default_rng(9)
    shape = (2, 3, 4, 5)
    for perm in itertools.permutations(range(4)):
        x = _permuted(rng, shape, perm, _floats)
        got = dmlq.quantize_linear(x, 0.5, i8(-3))
        np.testing.assert_array_equal(got, dmlq.quantize_linear(np.ascontiguousarray(x), 0.5, i8(-3)), strict=True)
        assert _axes_order(got) == list(perm)


def test_lists_higher_rank_parameters_and_errors_beside_a_permuted_input():
    """A list scale or zero point beside a Fortran-order x was not transposed with it (wrong
    values: [0 10 20 30] for [0 5 7 8]); a scale of more dimensions than x (a result of another
    shape, which no operand has) crashed; errors named the transposed shapes. All as the
    C-order call now."""
    x = np.arange(16, dtype=f32).reshape(4, 4)
    s = [0.1, 0.2, 0.3, 0.4]
    np.testing.assert_array_equal(dmlq.quantize_linear(np.asfortranarray(x), s), dmlq.quantize_linear(x, s),
                                  strict=True)
    q = np.arange(16, dtype=u8).reshape(4, 4)
    np.testing.assert_array_equal(dmlq.dequantize_linear(np.asfortranarray(q), 1.0, (0, 1, 2, 3)),
                                  dmlq.dequantize_linear(q, 1.0, (0, 1, 2, 3)), strict=True)
    x3 = np.asfortranarray(np.ones((2, 3, 4), f32))
    wide = dmlq.quantize_linear(x3, np.ones((1, 1, 1, 1), f32))
    assert wide.shape == (1, 2, 3, 4) and wide.flags.c_contiguous
    a = np.asfortranarray(np.zeros((2, 3, 4), i8))
    assert dmlq.quantized_add(a, 0.1, 0, a, 0.1, 0, np.ones((1, 1, 1, 1), f32), 0).shape == (2, 3, 4)
    with pytest.raises(ValueError, match=r"x \(2, 3, 4\), scale \(5, 1, 1\)"):  # it said x (4, 3, 2)
        dmlq.quantize_linear(x3, np.ones((5, 1, 1), f32))
    with pytest.raises(ValueError, match=r"block_size = 2 on axis 2 of size 4"):  # it said axis 0
        dmlq.quantize_linear(x3, np.ones((2, 3, 5), f32), dtype="int4", block_size=2)
    torch = pytest.importorskip("torch")
    t = torch.arange(16.0).reshape(4, 4)
    assert torch.equal(dmlq.quantize_linear(t.t().contiguous().t(), s), dmlq.quantize_linear(t, s))
    tf = torch.ones(2, 3, 4).permute(2, 1, 0).contiguous().permute(2, 1, 0)
    assert dmlq.quantize_linear(tf, torch.ones(1, 1, 1, 1)).shape == (1, 2, 3, 4)
    importlib.import_module("dmlq.torch")  # registers torch.ops.dmlq
    torch.library.opcheck(torch.ops.dmlq.quantize_linear.tensor, (tf, torch.ones(1, 1, 1, 1), None),
                          test_utils=("test_faketensor",))


def test_torch_errors_and_lower_rank_operands_beside_permuted_tensors():
    """An error of a call on a channels_last tensor recursed until RecursionError (the retry in C
    order decided the order again); add's lower-rank a beside a permuted b of the result's shape
    gave C order while the fake gave b's (opcheck's stride mismatch; inductor's assertion)."""
    torch = pytest.importorskip("torch")
    importlib.import_module("dmlq.torch")
    x = torch.randn(1, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match=r"zero_point = 300 is out of range for uint8"):
        dmlq.quantize_linear(x, 0.5, 300)
    with pytest.raises(TypeError, match=r"saturate must be True or False"):
        dmlq.quantize_linear(x, 0.5, saturate="no")
    a = torch.randint(0, 100, (3, 4), dtype=torch.uint8)
    b = torch.randint(0, 100, (4, 3), dtype=torch.uint8).t().unsqueeze(0)  # (1, 3, 4), strides (3, 1, 3)
    got = dmlq.quantized_add(a, 0.1, 1, b, 0.2, 2, 0.3, 3)
    assert got.stride() == (12, 1, 3)
    torch.library.opcheck(torch.ops.dmlq.quantized_add.default, (a, 0.1, 1, b, 0.2, 2, 0.3, 3),
                          test_utils=("test_faketensor",))
    assert dmlq.quantized_add(a.numpy(), 0.1, 1, b.numpy(), 0.2, 2, 0.3, np.uint8(3)).strides == (12, 1, 3)
