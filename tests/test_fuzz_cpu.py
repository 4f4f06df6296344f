"""CPU fuzz harness: each host backend (dmlq.reference, and dmlq.cpu compared bit
for bit with the reference on every call: tests/host_backends.py) against
tests/exact.py element by element, plus the invariants; the reference also
against onnxruntime where it implements the same case. Arguments are drawn by
tests/fuzz_strategies.py (DMLQ_FUZZ_EXAMPLES per operator and backend)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given

import exact
import fuzz_strategies as fs
import host_backends
from dmlq import reference as R

BACKENDS = pytest.mark.parametrize("backend", host_backends.NAMES)

try:
    import onnxruntime  # noqa: F401
except ImportError:
    run_onnx = None
else:
    from test_reference_onnxruntime import run_onnx


def assert_same(got, want, out):
    """got is out, equals want bit for bit (any NaN matches any NaN: docs/semantics.md fixes
    no NaN payload), and the poison outside out survived."""
    assert got is out
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind == "f":
        bits = np.uint16 if got.dtype == np.float16 else np.uint32
        mismatch = (got.view(bits) != want.view(bits)) & ~(np.isnan(got) & np.isnan(want))
    else:
        mismatch = got != want
    if mismatch.any():
        idx = tuple(np.argwhere(mismatch)[0])
        raise AssertionError(f"{mismatch.sum()} mismatches, first at {idx}: "
                             f"got {got[idx]!r}, want {want[idx]!r}")
    assert fs.untouched_outside(out)
    event(f"out: {'empty' if out.size == 0 else 'strided view' if out.base is not None else 'plain'}")
    if out.dtype.kind in "iu" and out.size:
        info = np.iinfo(out.dtype)
        event(f"saturated outputs: {bool(((got == info.min) | (got == info.max)).any())}")


def check_sides_of_zp(out, zp, t):
    """Invariants on t = x / s (float64 here, only its sign and NaN-ness matter):
    NaN gives the zero point (0 when omitted), positive t never lands below it and
    negative t never above (saturation, no wrap-around)."""
    zpb = np.broadcast_to(np.asarray(0 if zp is None else zp).astype(np.int64), out.shape)
    got = out.astype(np.int64)
    nan = np.isnan(t)
    assert (got[nan] == zpb[nan]).all()
    assert (got[t > 0] >= zpb[t > 0]).all() and (got[t < 0] <= zpb[t < 0]).all()


@BACKENDS
@fs.fuzz_settings()
@given(fs.quantize_args())
def test_fuzz_quantize(backend, args):
    out = args["out"]
    be = host_backends.get(backend)
    got = be.quantize_linear(**args)
    want = exact.quantize_array(args["x"], args["scale"], args["zero_point"], out.dtype, out.shape)
    assert_same(got, want, out)
    x32 = np.broadcast_to(np.asarray(args["x"]).astype(np.float64), out.shape)
    s32 = np.broadcast_to(np.asarray(args["scale"]).astype(np.float64), out.shape)
    with np.errstate(all="ignore"):
        check_sides_of_zp(got, args["zero_point"], x32 / s32)
    # onnxruntime: float32 in, one scale (it sends NaN to qmin, not zp: NaN left out)
    x, s, zp = args["x"], args["scale"], args["zero_point"]
    if (run_onnx and backend == "reference" and out.size and x.dtype == np.float32 and s.dtype == np.float32
            and s.size == 1 and np.isfinite(s).all() and (s > 0).all()
            and (zp is None or zp.size == 1)):
        event("checked against onnxruntime")
        zp0 = np.zeros((), out.dtype) if zp is None else zp.reshape(())
        xb = np.ascontiguousarray(np.broadcast_to(x, out.shape))
        got_ort = np.asarray(run_onnx("QuantizeLinear", [xb, s.reshape(()), zp0], out.dtype))
        keep = ~np.isnan(xb).reshape(-1)
        assert np.array_equal(got.reshape(-1)[keep], got_ort.reshape(-1)[keep])


@BACKENDS
@fs.fuzz_settings()
@given(fs.dequantize_args())
def test_fuzz_dequantize(backend, args):
    out = args["out"]
    be = host_backends.get(backend)
    got = be.dequantize_linear(**args)
    want = exact.dequantize_array(args["q"], args["scale"], args["zero_point"], out.dtype,
                                  out.shape)
    assert_same(got, want, out)
    # onnxruntime: int8/uint8/int32 in, float32 scale, one scale (int32: no zero point)
    q, s, zp = args["q"], args["scale"], args["zero_point"]
    if (run_onnx and backend == "reference" and out.size and q.dtype.name in ("int8", "uint8", "int32")
            and s.dtype == np.float32 and s.size == 1
            and (zp is None or (zp.size == 1 and q.dtype.name != "int32"))):
        event("checked against onnxruntime")
        qb = np.ascontiguousarray(np.broadcast_to(q, out.shape))
        inputs = [qb, s.reshape(())] + ([] if zp is None else [zp.reshape(())])
        got_ort = np.asarray(run_onnx("DequantizeLinear", inputs, np.float32)).reshape(out.shape)
        assert np.array_equal(got, got_ort, equal_nan=True)
    # invariant: a float16 result is the float32 result rounded once
    if out.dtype == np.float16:
        out32 = np.empty(out.shape, np.float32)
        be.dequantize_linear(args["q"], args["scale"].astype(np.float32), args["zero_point"], out32)
        with np.errstate(over="ignore"):
            assert np.array_equal(out32.astype(np.float16), got, equal_nan=True)


@BACKENDS
@fs.fuzz_settings()
@given(fs.add_args())
def test_fuzz_add(backend, args):
    out = args["out"]
    be = host_backends.get(backend)
    got = be.quantized_add(**args)
    a = {k: args[k] for k in args if k != "out"}
    want = exact.add_array(*a.values(), out.dtype, out.shape)
    assert_same(got, want, out)
    # invariant: swapping the operands changes nothing
    swapped = np.empty(out.shape, out.dtype)
    be.quantized_add(args["b"], args["b_scale"], args["b_zero_point"], args["a"], args["a_scale"],
                    args["a_zero_point"], args["out_scale"], args["out_zero_point"], swapped)
    assert np.array_equal(swapped, want)


# ORT's CPU QLinearMatMul type triples (A, B, out). a_scale and y_scale are per tensor.
_ORT_MM = {("int8", "int8", "int8"), ("uint8", "int8", "uint8"), ("uint8", "uint8", "uint8")}



def _finite_multiplier(a_scale, b_scale, out_scale) -> bool:
    """Whether a_scale * b_scale / out_scale stays finite in float32 (overflow is the question)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        m = (a_scale.astype(np.float32) * b_scale.astype(np.float32)) / out_scale.astype(np.float32)
    return bool(np.isfinite(m).all())

def _ort_matmul_check(args):
    """Run the case through ORT's QLinearMatMul when it implements it, comparing with the
    reference on the same inputs. For u8s8, B and its zero point are first halved into
    [-64, 63]: ORT's AVX2 u8s8 kernel saturates int16 pair sums on full-range B
    (see test_reference_onnxruntime.py)."""
    out = args["out"]
    a, b = args["a"], args["b"]
    types = (a.dtype.name, b.dtype.name, out.dtype.name)
    scales = [args[k] for k in ("a_scale", "b_scale", "out_scale")]
    if not (run_onnx and types in _ORT_MM and out.size and a.shape[-1] > 0
            and scales[0].size == 1 and scales[2].size == 1
            and (len(out.shape) == 2 or (scales[1].size == 1 and (
                args["b_zero_point"] is None or args["b_zero_point"].size == 1)))
            and all(np.isfinite(s).all() and (s > 0).all() for s in scales)
            # an infinite multiplier makes 0 * inf = NaN where acc is 0: dmlq gives the zero
            # point (docs/semantics.md), ORT qmin (a known difference, not compared)
            and _finite_multiplier(*scales)
            and (args["a_zero_point"] is None or args["a_zero_point"].size == 1)
            and (args["out_zero_point"] is None or args["out_zero_point"].size == 1)):
        return
    event("checked against onnxruntime")
    zps = [np.zeros(1, t) if z is None else z for z, t in
           zip((args["a_zero_point"], args["b_zero_point"], args["out_zero_point"]),
               (a.dtype, b.dtype, out.dtype))]
    if types[:2] == ("uint8", "int8"):
        b = (b >> 1).astype(np.int8)
        zps[1] = (zps[1] >> 1).astype(np.int8)
    batch = out.shape[:-2]
    ab = np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:]))
    bb = np.ascontiguousarray(np.broadcast_to(b, batch + b.shape[-2:]))
    mine = R.quantized_matmul(ab, scales[0], zps[0], bb, scales[1], zps[1], scales[2], zps[2],
                              np.empty(out.shape, out.dtype))
    b_zp = zps[1] if scales[1].size > 1 or zps[1].size > 1 else zps[1].reshape(())
    b_s = scales[1] if scales[1].size > 1 or zps[1].size > 1 else scales[1].reshape(())
    if b_zp.size != b_s.size:           # ORT wants b_scale and b_zero_point alike
        b_zp, b_s = np.broadcast_to(b_zp, (b.shape[-1],)).copy(), np.broadcast_to(
            b_s, (b.shape[-1],)).copy()
    got_ort = run_onnx("QLinearMatMul", [ab, scales[0].reshape(()), zps[0].reshape(()), bb, b_s,
                                         b_zp, scales[2].reshape(()), zps[2].reshape(())],
                       out.dtype)
    assert np.array_equal(mine, np.asarray(got_ort).reshape(out.shape))


@BACKENDS
@fs.fuzz_settings()
@given(fs.matmul_args())
def test_fuzz_matmul(backend, args):
    out = args["out"]
    be = host_backends.get(backend)
    got = be.quantized_matmul(**args)
    want = exact.matmul_array(args["a"], args["a_scale"], args["a_zero_point"], args["b"],
                              args["b_scale"], args["b_zero_point"], args["out_scale"],
                              args["out_zero_point"], out.dtype, out.shape[:-2])
    assert_same(got, want, out)
    if backend == "reference":
        _ort_matmul_check(args)


@BACKENDS
@fs.fuzz_settings()
@given(fs.avg_pool_args())
def test_fuzz_avg_pool(backend, args):
    out = args["out"]
    be = host_backends.get(backend)
    got = be.quantized_avg_pool(**args)
    want = exact.avgpool_array(args["x"], args["x_scale"], args["x_zero_point"], args["out_scale"],
                               args["out_zero_point"], out.dtype, out.shape[2:],
                               args["window_size"], args["strides"], args["start_padding"],
                               args["end_padding"], args["dilations"], args["include_padding"])
    assert_same(got, want, out)



@BACKENDS
@pytest.mark.parametrize("op", ["int", "float"], ids=["matmul_integer", "matmul_integer_to_float"])
def test_fuzz_intmm(backend, op):
    """matmul_integer ("int") and matmul_integer_to_float ("float") against tests/exact.py."""
    fn = "matmul_integer" if op == "int" else "matmul_integer_to_float"

    @fs.fuzz_settings()
    @given(fs.intmm_args(op))
    def run(args):
        out = args["out"]
        got = getattr(host_backends.get(backend), fn)(**args)
        kw = {} if op == "int" else dict(a_s=args["a_scale"], b_s=args["b_scale"], bias=args["bias"],
                                          block_size=args["block_size"])
        want = exact.intmm_array(args["a"], args["a_zero_point"], args["b"], args["b_zero_point"], out.shape,
                                 out.dtype, **kw)
        assert_same(got, want, out)
        event(f"b: {args['b'].dtype}, block_size: {args.get('block_size')}, out: {out.dtype}")

    run()
