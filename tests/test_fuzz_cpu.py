"""CPU fuzz harness: dmlq.reference against tests/exact.py element by element,
onnxruntime where it implements the same case, and the invariants, on arguments
drawn by tests/fuzz_strategies.py (DMLQ_FUZZ_EXAMPLES per operator)."""
from __future__ import annotations

import numpy as np
from hypothesis import given

import exact
import fuzz_strategies as fs
from dmlq import reference as R

try:
    import onnxruntime  # noqa: F401
except ImportError:
    run_onnx = None
else:
    from test_reference_onnxruntime import run_onnx


def assert_same(got, want, out):
    """got is out, equals want bit for bit, and the poison outside out survived."""
    assert got is out
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind == "f":
        bits = np.uint16 if got.dtype == np.float16 else np.uint32
        mismatch = got.view(bits) != want.view(bits)
    else:
        mismatch = got != want
    if mismatch.any():
        idx = tuple(np.argwhere(mismatch)[0])
        raise AssertionError(f"{mismatch.sum()} mismatches, first at {idx}: "
                             f"got {got[idx]!r}, want {want[idx]!r}")
    assert fs.untouched_outside(out)


def check_range_and_nan(out, zp, nan_mask):
    """Invariant: NaN t gives the zero point (0 when omitted)."""
    zpb = np.broadcast_to(np.asarray(0 if zp is None else zp).astype(np.int64), out.shape)
    assert (out.astype(np.int64)[nan_mask] == zpb[nan_mask]).all()


@fs.fuzz_settings()
@given(fs.quantize_args())
def test_fuzz_quantize(args):
    out = args["out"]
    got = R.quantize_linear(**args)
    want = exact.quantize_array(args["x"], args["scale"], args["zero_point"], out.dtype, out.shape)
    assert_same(got, want, out)
    x32 = np.broadcast_to(np.asarray(args["x"]).astype(np.float64), out.shape)
    s32 = np.broadcast_to(np.asarray(args["scale"]).astype(np.float64), out.shape)
    with np.errstate(all="ignore"):
        check_range_and_nan(got, args["zero_point"], np.isnan(x32 / s32))
    # onnxruntime: float32 in, one scale and zero point (it sends NaN to qmin, not zp)
    x, s, zp = args["x"], args["scale"], args["zero_point"]
    if (run_onnx and x.dtype == np.float32 and s.dtype == np.float32 and s.size == 1
            and zp is not None and zp.size == 1 and x.shape == out.shape and x.size
            and np.isfinite(s).all() and s.reshape(-1)[0] > 0):
        got_ort = run_onnx("QuantizeLinear", [np.ascontiguousarray(x), s.reshape(()),
                                              zp.reshape(())], out.dtype)
        keep = ~np.isnan(x)
        assert np.array_equal(got[keep], got_ort[keep])


@fs.fuzz_settings()
@given(fs.dequantize_args())
def test_fuzz_dequantize(args):
    out = args["out"]
    got = R.dequantize_linear(**args)
    want = exact.dequantize_array(args["q"], args["scale"], args["zero_point"], out.dtype,
                                  out.shape)
    assert_same(got, want, out)
    # invariant: a float16 result is the float32 result rounded once
    if out.dtype == np.float16:
        out32 = np.empty(out.shape, np.float32)
        R.dequantize_linear(args["q"], args["scale"].astype(np.float32), args["zero_point"], out32)
        with np.errstate(over="ignore"):
            assert np.array_equal(out32.astype(np.float16).view(np.uint16), got.view(np.uint16))


@fs.fuzz_settings()
@given(fs.add_args())
def test_fuzz_add(args):
    out = args["out"]
    got = R.quantized_add(**args)
    a = {k: args[k] for k in args if k != "out"}
    want = exact.add_array(*a.values(), out.dtype, out.shape)
    assert_same(got, want, out)
    # invariant: swapping the operands changes nothing
    swapped = np.empty(out.shape, out.dtype)
    R.quantized_add(args["b"], args["b_scale"], args["b_zero_point"], args["a"], args["a_scale"],
                    args["a_zero_point"], args["out_scale"], args["out_zero_point"], swapped)
    assert np.array_equal(swapped, want)


# ORT's CPU QLinearMatMul type triples; u8s8 only with 7-bit B (see the ORT test module).
_ORT_MM = {("int8", "int8", "int8"), ("uint8", "int8", "uint8"), ("uint8", "uint8", "uint8")}


@fs.fuzz_settings()
@given(fs.matmul_args())
def test_fuzz_matmul(args):
    out = args["out"]
    got = R.quantized_matmul(**args)
    want = exact.matmul_array(args["a"], args["a_scale"], args["a_zero_point"], args["b"],
                              args["b_scale"], args["b_zero_point"], args["out_scale"],
                              args["out_zero_point"], out.dtype, out.shape[:-2])
    assert_same(got, want, out)
    a, b = args["a"], args["b"]
    types = (a.dtype.name, b.dtype.name, out.dtype.name)
    scales = [args[k] for k in ("a_scale", "b_scale", "out_scale")]
    zps = [args[k] for k in ("a_zero_point", "b_zero_point", "out_zero_point")]
    if (run_onnx and types in _ORT_MM and out.size and a.shape[-1] > 0
            and args["a_scale"].size == 1 and args["out_scale"].size == 1
            and all(z is not None for z in zps) and zps[0].size == 1 and zps[2].size == 1
            and all(np.isfinite(s).all() and (s > 0).all() for s in scales)
            and (types[:2] != ("uint8", "int8") or (np.abs(b.astype(int) + 0.5) < 64).all())
            and a.shape[:-2] == out.shape[:-2] and b.ndim == 2):
        got_ort = run_onnx("QLinearMatMul", [np.ascontiguousarray(a), scales[0].reshape(()),
                                             zps[0].reshape(()), np.ascontiguousarray(b),
                                             scales[1], zps[1], scales[2].reshape(()),
                                             zps[2].reshape(())], out.dtype)
        assert np.array_equal(got, got_ort)


@fs.fuzz_settings()
@given(fs.avg_pool_args())
def test_fuzz_avg_pool(args):
    out = args["out"]
    got = R.quantized_avg_pool(**args)
    want = exact.avgpool_array(args["x"], args["x_scale"], args["x_zero_point"], args["out_scale"],
                               args["out_zero_point"], out.dtype, out.shape[2:],
                               args["window_size"], args["strides"], args["start_padding"],
                               args["end_padding"], args["dilations"], args["include_padding"])
    assert_same(got, want, out)
