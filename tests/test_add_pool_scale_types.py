"""quantized_add and quantized_avg_pool with float16 and bfloat16 scales (a dmlq extension, as
quantized_matmul takes ONNX QLinearMatMul's opset-21 scale types): each scale widened to float32
exactly, then the float32 contract. Expected values: dmlq.reference on the scales widened by
NumPy / ml_dtypes (not by dmlq); on NumPy, torch CPU tensors and the GPU path (its stand-in twin
in CI), outputs poisoned. The descriptors see float32 scales (DirectML's tables take no other:
the pooling call failed their check until the plan described its widened scales)."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from conftest import CurrentCupy, poison
from dmlq import reference as R

ml_dtypes = pytest.importorskip("ml_dtypes")
F16, F32, U8, I8 = np.float16, np.float32, np.uint8, np.int8
BF16 = np.dtype(ml_dtypes.bfloat16)
cp = CurrentCupy()


def _add_case(rng, sdt):
    a = rng.integers(0, 256, (5, 7)).astype(U8)
    b = rng.integers(-128, 128, (7,)).astype(I8)
    # scales whose float32 products round differently from a float16/bfloat16 product (many bits)
    scales = [np.asarray(v, sdt) for v in rng.uniform(0.01, 0.3, 3)]
    zps = (U8(3), I8(-5), U8(128))
    want = R.quantized_add(a, scales[0].astype(F32), zps[0], b, scales[1].astype(F32), zps[1],
                           scales[2].astype(F32), zps[2], poison(np.empty((5, 7), U8)))
    return (a, scales[0], zps[0], b, scales[1], zps[1], scales[2], zps[2]), want


def _pool_case(rng, sdt):
    x = rng.integers(0, 256, (2, 3, 6, 5)).astype(U8)
    xs = rng.uniform(0.01, 0.2, 3).astype(sdt)  # per channel
    os_ = np.asarray(rng.uniform(0.01, 0.2), sdt)
    params = dict(window_size=(3, 2), strides=(2, 1), start_padding=(1, 0), end_padding=(1, 1), include_padding=True)
    out = poison(np.empty((2, 3, 3, 5), I8))
    want = R.quantized_avg_pool(x, xs.astype(F32), U8(7), os_.astype(F32), I8(-3), out, (3, 2), (2, 1), (1, 0),
                                (1, 1), (1, 1), True)
    return (x, xs, U8(7), os_, I8(-3)), params, want


@pytest.mark.parametrize("sdt", [F16, BF16], ids=["float16", "bfloat16"])
def test_numpy_and_torch(rng, sdt):
    args, want = _add_case(rng, sdt)
    assert np.array_equal(dmlq.quantized_add(*args), want)
    out = poison(np.empty_like(want))
    assert dmlq.quantized_add(*args, out=out) is out and np.array_equal(out, want)
    pargs, params, pwant = _pool_case(rng, sdt)
    assert np.array_equal(dmlq.quantized_avg_pool(*pargs, **params), pwant)
    torch = pytest.importorskip("torch")
    tdt = {np.dtype(F16): torch.float16, BF16: torch.bfloat16}[np.dtype(sdt)]

    def tensor(v):
        v = np.asarray(v)
        if v.dtype == BF16:  # (torch.from_numpy takes no ml_dtypes array: its bits)
            return torch.from_numpy(v.view(np.int16).copy()).view(tdt)
        return torch.from_numpy(v.copy())

    got = dmlq.quantized_add(*[tensor(v) for v in args])
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), want)
    got = dmlq.quantized_avg_pool(*[tensor(v) for v in pargs], **params)
    assert np.array_equal(got.numpy(), pwant)


def test_other_types_are_refused(rng):
    args, _ = _add_case(rng, BF16)
    with pytest.raises(TypeError, match=r"a_scale must have dtype float32, float16 or bfloat16 \(got float64\)"):
        dmlq.quantized_add(args[0], np.asarray(args[1], np.float64), *args[2:])
    pargs, params, _ = _pool_case(rng, F16)
    with pytest.raises(TypeError, match=r"x_scale must have dtype float32, float16 or bfloat16 \(got int32\)"):
        dmlq.quantized_avg_pool(pargs[0], pargs[1].astype(np.int32), *pargs[2:], **params)


@pytest.mark.gpu
@pytest.mark.parametrize("sdt", [F16, BF16], ids=["float16", "bfloat16"])
def test_gpu(rng, sdt):
    args, want = _add_case(rng, sdt)
    a, s0, z0, b, s1, z1, s2, z2 = args
    dev = [cp.asarray(a), cp.asarray(s0), z0, cp.asarray(b), s1[()], z1, cp.asarray(s2), z2]  # s1 a NumPy scalar
    out = poison(cp.empty(want.shape, U8))
    assert dmlq.quantized_add(*dev, out=out) is out and np.array_equal(out.get(), want)
    pargs, params, pwant = _pool_case(rng, sdt)
    x, xs, xz, os_, oz = pargs
    got = dmlq.quantized_avg_pool(cp.asarray(x), cp.asarray(xs), xz, os_[()], oz, **params)  # out_scale: a scalar
    assert np.array_equal(got.get(), pwant)
