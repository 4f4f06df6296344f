"""quantize_linear / dequantize_linear on GPU arrays for every ONNX 21-25 type (dmlq.quant_gpu ->
dmlq.calls -> dmlq.gpu.qkernels -> cuda/quant_types.cu), bit for bit against the NumPy path (itself
checked against onnx's node tests, onnxruntime and ml_dtypes in test_quant_onnx / test_qtypes_*).

The GPU form: int8/uint8/int16/uint16 as CuPy arrays; float8, 4-bit and 2-bit types as dmlq.Packed
of a uint8 CuPy array (ONNX's raw_data bytes). Every type runs inside each test (the stand-in twin
of a gpu test runs only its first and last parameter sets), per tensor (by value and in device
memory), per axis (outer and inner axes around it), blocked with a ragged last block,
broadcast forms, saturate both ways, precision, float16 and float32; outputs poisoned; NaN/inf,
odd element counts, size 0; refusals before any launch.
"""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from conftest import NATIVE_CODES as NATIVE, CurrentCupy, code_bytes, poison
from dmlq import calls
from dmlq.gpu import plan as plan_module
from dmlq.qtypes import QTYPES

md = pytest.importorskip("ml_dtypes")
try:  # before any test installs the cupy stand-in (torch's first import looks for cupy)
    import torch
except ImportError:
    torch = None
pytestmark = pytest.mark.gpu
cp = CurrentCupy()

TYPES = tuple(QTYPES)
FLOAT8 = tuple(n for n in TYPES if n.startswith("float8"))


# ------------------------------------------------------------------ forms

def to_gpu(arr):
    """A NumPy result of the NumPy path in its GPU form."""
    name = arr.dtype.name
    if name in NATIVE:
        return cp.asarray(arr)
    p = dmlq.pack(arr)
    return dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)


def gpu_bytes(v):
    if isinstance(v, dmlq.Packed):
        return v.data.get()
    return np.ascontiguousarray(v.get()).reshape(-1).view(np.uint8)


def poisoned_like(arr):
    """A poisoned out= in the GPU form of the NumPy result ``arr``."""
    g = to_gpu(arr)
    poison(g.data if isinstance(g, dmlq.Packed) else g)
    return g


def same_floats(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    bits = {2: np.uint16, 4: np.uint32}[want.dtype.itemsize]
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan), what
    assert np.array_equal(got.view(bits)[~nan], want.view(bits)[~nan]), what


def _zero_point(rng, name, shape):
    q = QTYPES[name]
    if q.is_float:
        return None
    return rng.integers(q.qmin, q.qmax + 1, shape).astype(q.dtype)


def _x(rng, shape, dtype):
    x = (rng.standard_normal(shape) * 40).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 2.5, -2.5, 1e-42, 465.0, 1e30], np.float32)
    k = min(flat.size, specials.size)
    with np.errstate(over="ignore"):
        flat[:k] = specials[:k].astype(dtype)
    return x


# The layouts: (x shape, scale shape, keyword arguments); zero points take the scale's shape.
LAYOUTS = {
    "tensor-value": ((5, 13), None, {}),
    "tensor-device": ((5, 13), (1,), {}),
    "axis0": ((7, 9), (7,), {"axis": 0}),
    "axis1": ((4, 9), (9,), {"axis": 1}),
    "axis1-3d": ((3, 5, 4), (5,), {"axis": 1}),
    "blocked-last": ((3, 37), (3, 10), {"block_size": 4}),  # ragged: 37 = 9 * 4 + 1
    "blocked-first": ((11, 6), (3, 6), {"block_size": 5, "axis": 0}),
    "broadcast-axis": ((2, 6, 5), (1, 6, 1), {}),
    "broadcast-full": ((4, 6), (4, 1), {}),            # scale on axis 0, zero point on axis 1 below
}


def _params(rng, layout, name):
    shape, sshape, kw = LAYOUTS[layout]
    if sshape is None:
        s = np.float32(rng.uniform(0.05, 2.0))
        z = _zero_point(rng, name, ())
        return shape, s, (None if z is None else int(z)), kw
    s = rng.uniform(0.05, 2.0, sshape).astype(np.float32)
    zshape = (1, shape[1]) if layout == "broadcast-full" else sshape
    return shape, s, _zero_point(rng, name, zshape), kw


def _gpu_param(v):
    if v is None or np.ndim(v) == 0 and not isinstance(v, np.ndarray):
        return v
    if v.dtype.name in NATIVE or v.dtype.kind == "f":
        return cp.asarray(v)
    return to_gpu(v)


# ------------------------------------------------------------------ every type and layout

@pytest.mark.parametrize("xdt", [np.float32, np.float16])
def test_quantize_every_type_and_layout(rng, xdt):
    for layout, name in ((lay, n) for lay in LAYOUTS for n in TYPES):
        shape, s, z, kw = _params(rng, layout, name)
        if xdt == np.float16:
            s = s.astype(np.float16)  # the classic int8/uint8 path wants a float16 x's scale float16
        x = _x(rng, shape, xdt)
        for sat in ((True, False) if name in FLOAT8 else (True,)):
            what = f"{name} {layout} x {np.dtype(xdt).name} saturate={sat}"
            want = dmlq.quantize_linear(x, s, z, dtype=name, saturate=sat, **kw)
            got = dmlq.quantize_linear(cp.asarray(x), _gpu_param(s), _gpu_param(z), dtype=name, saturate=sat,
                                       **kw)
            assert (type(got) is dmlq.Packed) == (name not in NATIVE), what
            assert tuple(got.shape) == want.shape, what
            assert np.array_equal(gpu_bytes(got), code_bytes(want)), what
            out = poisoned_like(want)
            res = dmlq.quantize_linear(cp.asarray(x), _gpu_param(s), _gpu_param(z), dtype=name, saturate=sat,
                                       out=out, **kw)
            assert res is out and np.array_equal(gpu_bytes(out), code_bytes(want)), what + " (out=)"


@pytest.mark.parametrize("sdt, odt", [(np.float32, None), (np.float16, "float32"), (np.float32, "float16"),
                                      (np.float16, None)])
def test_dequantize_every_type_and_layout(rng, sdt, odt):
    for layout, name in ((lay, n) for lay in LAYOUTS for n in TYPES):
        q = QTYPES[name]
        shape, s, z, kw = _params(rng, layout, name)
        codes = rng.integers(0, 1 << q.bits, shape, dtype=np.uint32)
        data = codes.astype(np.uint16 if q.bits == 16 else np.uint8).view(q.dtype) if q.bits >= 8 else \
            dmlq.unpack(dmlq.pack(codes.astype(np.uint8), dtype=name))
        sv = s.astype(sdt) if isinstance(s, np.ndarray) else sdt(s)
        what = f"{name} {layout} scale {np.dtype(sdt).name} dtype={odt}"
        want = dmlq.dequantize_linear(data, sv, z, dtype=odt, **kw)
        got = dmlq.dequantize_linear(to_gpu(data), _gpu_param(sv), _gpu_param(z), dtype=odt, **kw)
        same_floats(got.get(), want, what)
        out = poison(cp.empty(want.shape, want.dtype))
        res = dmlq.dequantize_linear(to_gpu(data), _gpu_param(sv), _gpu_param(z), dtype=odt, out=out, **kw)
        assert res is out
        same_floats(out.get(), want, what + " (out=)")


@pytest.mark.parametrize("precision", [None, "float32", "float16", "bfloat16"])
def test_precision(rng, precision):
    for name in ("int8", "uint4", "float8_e5m2", "float4_e2m1fn"):
        x = _x(rng, (6, 33), np.float32)
        s = rng.uniform(0.01, 3.0, (6, 9)).astype(np.float32)
        want = dmlq.quantize_linear(x, s, dtype=name, block_size=4, precision=precision)
        got = dmlq.quantize_linear(cp.asarray(x), cp.asarray(s), dtype=name, block_size=4, precision=precision)
        assert np.array_equal(gpu_bytes(got), code_bytes(want)), (name, precision)


def test_bfloat16_operands(rng):
    """CuPy 14 holds bfloat16: x and scale convert to float32 exactly; a bfloat16 output is the
    float32 result rounded once (CuPy's cast, to nearest even)."""
    bf16 = np.dtype(md.bfloat16)
    x = _x(rng, (5, 12), np.float32).astype(bf16)
    s = rng.uniform(0.01, 2.0, (5, 3)).astype(bf16)
    for name in ("int8", "int4", "float8_e4m3fnuz", "uint16"):
        for precision in (None, "bfloat16"):
            want = dmlq.quantize_linear(x, s, dtype=name, block_size=4, precision=precision)
            got = dmlq.quantize_linear(cp.asarray(x), cp.asarray(s), dtype=name, block_size=4, precision=precision)
            assert np.array_equal(gpu_bytes(got), code_bytes(want)), (name, precision)
        for odt in (None, "bfloat16", "float16"):
            back = dmlq.dequantize_linear(to_gpu(want), cp.asarray(s), dtype=odt, block_size=4)
            same_floats(back.get(), dmlq.dequantize_linear(want, s, dtype=odt, block_size=4), (name, odt))
        back = dmlq.dequantize_linear(to_gpu(want), np.float32(0.5).astype(bf16), dtype="bfloat16")
        same_floats(back.get(), dmlq.dequantize_linear(want, np.float32(0.5).astype(bf16)), name)


def test_bfloat16_x_and_y_on_their_own_kernels(rng):
    """qt_quantize<bfloat16, T> reads a bfloat16 x as it lies (no float32 copy first) and
    qt_dequantize<T, bfloat16> writes a bfloat16 y (rounded once in the kernel, ties to even):
    every type, per tensor, per axis and blocked; x's edges (a negative NaN, +-inf, -0, a
    bfloat16 subnormal, its largest finite value) and dequantized products past bfloat16's
    largest finite value, at ties and among its subnormals; bytes equal to the NumPy path's
    (whose bfloat16 rounding is ml_dtypes'), the plans naming those kernels. Some types also
    take the chunk loop's other two paths (ChunkOut's pairs in each): blocks along the first
    axis (neighbouring parameters a chunk) and blocks of 5 along the last (a chunk across
    blocks, element by element)."""
    bf16 = np.dtype(md.bfloat16)
    x = _x(rng, (4, 40), np.float32)
    neg_nan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    x.reshape(-1)[:8] = [neg_nan, np.nan, 3.3895e38, -3.3895e38, 9.2e-41, -0.0, np.inf, -np.inf]
    xb, gx = x.astype(bf16), cp.asarray(x.astype(bf16))
    layouts = ((dict(), np.float32(0.75)), (dict(axis=0), rng.uniform(0.5, 2, 4).astype(np.float32)),
               (dict(block_size=8), rng.uniform(0.5, 2, (4, 5)).astype(np.float32)))
    other_paths = ((dict(axis=0, block_size=3), rng.uniform(0.5, 2, (2, 40)).astype(np.float32)),
                   (dict(block_size=5), rng.uniform(0.5, 2, (4, 8)).astype(np.float32)))
    for name in TYPES:
        more = other_paths if name in ("int8", "uint4", "int2", "float8_e5m2", "float4_e2m1fn") else ()
        for kw, sc in layouts + more:
            z = _zero_point(rng, name, np.shape(sc))
            with np.errstate(all="ignore"):
                want = dmlq.quantize_linear(xb, sc, z, dtype=name, **kw)
            plan = str(dmlq.kernel_plan(dmlq.quantize_linear, gx, _gpu_param(sc), _gpu_param(z), dtype=name, **kw))
            assert "qt_quantize<bfloat16, " in plan and "temporary" not in plan, plan
            got = dmlq.quantize_linear(gx, _gpu_param(sc), _gpu_param(z), dtype=name, **kw)
            assert np.array_equal(gpu_bytes(got), code_bytes(want)), (name, kw)
            # as is, ties, past the largest finite, subnormals, NaN (the GPU's 0x7FFFFFFF, whose rounding
            # would carry into the sign without the NaN rule)
            for mult in (1.0, 1 + 2.0**-8, 2.5e36, 1e-40, np.nan):
                sd = (sc * np.float32(mult)).astype(np.float32)
                with np.errstate(all="ignore"):
                    back = dmlq.dequantize_linear(want, sd, z, dtype="bfloat16", **kw)
                plan = str(dmlq.kernel_plan(dmlq.dequantize_linear, to_gpu(want), _gpu_param(sd), _gpu_param(z),
                                            dtype="bfloat16", **kw))
                assert ", bfloat16>" in plan and "temporary" not in plan, plan
                out = poison(cp.empty(back.shape, back.dtype))
                res = dmlq.dequantize_linear(to_gpu(want), _gpu_param(sd), _gpu_param(z), dtype="bfloat16", out=out,
                                             **kw)
                assert res is out
                same_floats(out.get(), back, (name, kw, mult))


# ------------------------------------------------------------------ edges

def test_float_edges_saturate_both_ways():
    """NaN, +-inf, +-0, subnormals, each type's largest finite value and one ulp past it, ties."""
    for name in FLOAT8 + ("float4_e2m1fn",):
        q = QTYPES[name]
        top = float(md.finfo(q.dtype).max)
        vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, -1e-42, top, -top, np.nextafter(np.float32(top), 1e30),
                top * 1.0625, top * 1.125, -top * 1.125, top * 4, float(md.finfo(q.dtype).smallest_subnormal) / 2,
                0.5, 1.5, 2.5, 3.5, 5.0]
        x = np.array(vals, np.float32)
        for sat in (True, False):
            want = dmlq.quantize_linear(x, 1.0, dtype=name, saturate=sat)
            got = dmlq.quantize_linear(cp.asarray(x), 1.0, dtype=name, saturate=sat)
            assert np.array_equal(gpu_bytes(got), code_bytes(want)), (name, sat)
            back = dmlq.dequantize_linear(got, np.float32(1.0))
            same_floats(back.get(), dmlq.dequantize_linear(want, np.float32(1.0)), (name, sat))
    # float4 adds its zero point (+0 or -0): -0 / 1 + (+0) is +0
    x = np.array([-0.0, 0.0, -1.0], np.float32)
    for zp in (0.0, -0.0):
        want = dmlq.quantize_linear(x, 1.0, zp, dtype="float4_e2m1fn")
        got = dmlq.quantize_linear(cp.asarray(x), 1.0, zp, dtype="float4_e2m1fn")
        assert np.array_equal(gpu_bytes(got), code_bytes(want)), zp


def test_odd_counts_and_ragged_blocks(rng):
    """Element counts around the packing (a padded last byte) and the 16-byte groups."""
    for name in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn", "float8_e4m3fnuz", "int16"):
        for n in (1, 2, 3, 5, 31, 33, 63, 65, 127, 129):
            x = _x(rng, (n,), np.float32)
            s = rng.uniform(0.1, 2.0, -(-n // 7)).astype(np.float32)
            want = dmlq.quantize_linear(x, s, dtype=name, block_size=7)
            got = dmlq.quantize_linear(cp.asarray(x), cp.asarray(s), dtype=name, block_size=7)
            assert np.array_equal(gpu_bytes(got), code_bytes(want)), (name, n)
            back = dmlq.dequantize_linear(got, cp.asarray(s), block_size=7)
            same_floats(back.get(), dmlq.dequantize_linear(want, s, block_size=7), (name, n))


def test_size_zero():
    for name in ("int4", "float8_e5m2", "uint16"):
        x = cp.empty((0, 3), np.float32)
        got = dmlq.quantize_linear(x, 0.5, dtype=name)
        assert tuple(got.shape) == (0, 3)
        assert gpu_bytes(got).size == 0
        back = dmlq.dequantize_linear(got, cp.ones((0, 3), np.float32))
        assert back.shape == (0, 3) and back.dtype == np.float32


def test_bytes_are_onnxs(rng):
    """The Packed bytes are ONNX's raw_data for the tensor (onnx.numpy_helper)."""
    onnx_helper = pytest.importorskip("onnx.numpy_helper")
    for name in ("int4", "uint4", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn", "int2", "uint2"):
        x = _x(rng, (3, 5), np.float32)
        got = dmlq.quantize_linear(cp.asarray(x), 0.25, dtype=name)
        want = onnx_helper.from_array(dmlq.quantize_linear(x, 0.25, dtype=name)).raw_data
        assert got.data.get().tobytes() == want, name


# ------------------------------------------------------------------ layouts of the operands

def test_views_misaligned_and_broadcast_operands(rng):
    x = _x(rng, (40, 9), np.float32)
    xt = cp.asarray(x).T  # not contiguous
    s = np.float32(0.3)
    for name in ("int4", "float8_e4m3fn", "int16"):
        want = dmlq.quantize_linear(np.ascontiguousarray(x.T), s, dtype=name)
        assert np.array_equal(gpu_bytes(dmlq.quantize_linear(xt, s, dtype=name)), code_bytes(want)), name
        # misaligned Packed data (bytewise path) and a non-contiguous native out
        g = to_gpu(want)
        if isinstance(g, dmlq.Packed):
            buf = cp.zeros(g.data.size + 1, np.uint8)
            buf[1:] = g.data
            g = dmlq.Packed(buf[1:], g.shape, g.dtype)
        back = dmlq.dequantize_linear(g, s)
        same_floats(back.get(), dmlq.dequantize_linear(want, s), name)
    wide = poison(cp.empty((9, 80), np.int16))
    out = wide[:, ::2]
    want = dmlq.quantize_linear(x.T, s, dtype="int16")
    assert dmlq.quantize_linear(xt, s, dtype="int16", out=out) is out
    assert np.array_equal(out.get(), want)
    assert np.all(wide.get()[:, 1::2].view(np.uint16) == 0xA5A5)
    # misaligned x and out (the kernels' element-wise path; a 16-byte access there traps on the harness)
    xb = cp.zeros(x.size + 1, np.float32)
    xb[1:] = cp.asarray(x).reshape(-1)
    for name in ("uint4", "float8_e5m2", "int16"):
        want = dmlq.quantize_linear(x.reshape(-1), s, dtype=name)
        g = poisoned_like(want)
        if isinstance(g, dmlq.Packed):
            ob = poison(cp.empty(g.data.size + 1, np.uint8))
            out = dmlq.Packed(ob[1:], g.shape, g.dtype)
        else:
            ob = poison(cp.empty(g.size + 1, g.dtype))
            out = ob[1:]
        assert np.array_equal(gpu_bytes(dmlq.quantize_linear(xb[1:], s, dtype=name)), code_bytes(want)), name
        dmlq.quantize_linear(cp.asarray(x).reshape(-1), s, dtype=name, out=out)
        assert np.array_equal(gpu_bytes(out), code_bytes(want)), name
    # x broadcast by a larger scale
    xs = _x(rng, (1, 7), np.float32)
    ss = rng.uniform(0.1, 1, (3, 7)).astype(np.float32)
    want = dmlq.quantize_linear(xs, ss, dtype="uint4")
    got = dmlq.quantize_linear(cp.asarray(xs), cp.asarray(ss), dtype="uint4")
    assert got.shape == (3, 7) and np.array_equal(gpu_bytes(got), code_bytes(want))


def test_plans_are_cached_and_shown(rng):
    x = cp.asarray(_x(rng, (4, 32), np.float32))
    s = cp.asarray(rng.uniform(0.1, 1, (4, 2)).astype(np.float32))
    dmlq.quantize_linear(x, s, dtype="int4", block_size=16)
    size = calls.plan_cache_size()
    with plan_module.recording() as plans:
        dmlq.quantize_linear(x, s, dtype="int4", block_size=16)
    assert calls.plan_cache_size() == size and len(plans) == 1
    assert plans[0].launches[0].kernel == "qt_quantize<float, 4>"
    text = str(dmlq.kernel_plan(dmlq.quantize_linear, x, s, dtype="int4", block_size=16))
    assert text.startswith("quantize_linear: vec16 (blocked (block 16))") and "qt_quantize<float, 4>" in text
    text = str(dmlq.kernel_plan(dmlq.dequantize_linear, dmlq.quantize_linear(x, s, dtype="int4", block_size=16),
                                s, block_size=16))
    assert "qt_dequantize<4, float>" in text


def test_readme_gpu_example_runs():
    import re
    import textwrap
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]
    (numpy_block,) = [b for b in blocks if "w4 = dmlq.quantize_linear(" in b]
    (gpu_block,) = [b for b in blocks if b.startswith("# The GPU form (CuPy)")]
    ns: dict = {}
    exec(compile(numpy_block, "README.md NumPy example", "exec"), ns)
    exec(compile(gpu_block, "README.md GPU example", "exec"), ns)
    same_floats(ns["backg"].get(), ns["back"], "README")
    f8 = dmlq.quantize_linear(ns["x"], 0.01, dtype="float8_e4m3fn")
    assert np.array_equal(ns["f8g"].data.get(), dmlq.pack(f8).data)


# ------------------------------------------------------------------ refusals, before any launch

def _refused(exc, match, fn, *args, **kwargs):
    with plan_module.recording() as plans:
        with pytest.raises(exc, match=match):
            fn(*args, **kwargs)
    assert plans == []


def test_refusals_name_the_argument():
    x = cp.zeros((4, 6), np.float32)
    p4 = dmlq.quantize_linear(x, 1.0, dtype="int4")
    q = dmlq.quantize_linear
    _refused(TypeError, "zero_point for float8_e4m3fn .* must be 0 or None", q, x, 1.0,
             dmlq.quantize_linear(cp.zeros(1, np.float32), 1.0, dtype="float8_e4m3fn"))
    _refused(TypeError, "zero_point for float8_e5m2 .* must be 0 or None", q, x, 1.0, cp.zeros(1, np.float32),
             dtype="float8_e5m2")
    _refused(ValueError, "zero_point must be zero", q, x, 1.0, 0.5, dtype="float8_e5m2")
    _refused(TypeError, "zero_point has dtype int16 but must be int8 .* would synchronize", q, x, 1.0,
             cp.zeros(1, np.int16), dtype="int8", axis=0)
    _refused(TypeError, "zero_point of int4 .* dmlq.Packed", q, x, 1.0, cp.zeros(1, np.int8), dtype="int4",
             axis=0)
    _refused(ValueError, "zero_point = 8 is out of range for int4", q, x, 1.0, 8, dtype="int4")
    _refused(TypeError, "x must have dtype float32, float16, bfloat16 or int32", q, x.astype(np.float64), 1.0, dtype="int4")
    _refused(ValueError, "block_size = 4 on axis 1 of size 6 makes ceil", q, x, cp.ones((4, 3), np.float32),
             dtype="int4", block_size=4)
    _refused(TypeError, "out for int4 on the GPU must be a dmlq.Packed", q, x, 1.0, dtype="int4",
             out=cp.empty(12, np.uint8))
    _refused(ValueError, r"out must have shape \(4, 6\)", q, x, 1.0, dtype="int4",
             out=dmlq.Packed(cp.empty(6, np.uint8), (2, 6), "int4"))
    _refused(ValueError, "its data must be a 1-D uint8 array of 12 bytes", dmlq.dequantize_linear,
             dmlq.Packed(cp.empty(13, np.uint8), (4, 6), "int4"), 1.0)
    _refused(TypeError, "NumPy and GPU arrays are mixed", q, x, np.ones(6, np.float32), dtype="int4", axis=1)
    _refused(TypeError, "a Packed of int4 but must be uint4", dmlq.dequantize_linear,
             dmlq.quantize_linear(x, 1.0, dtype="uint4"), 1.0, p4)
    _refused(TypeError, "precision must be", q, x, 1.0, dtype="int4", precision="int8")


def test_torch_tensors_with_gpu_operands_are_refused_with_the_fix():
    if torch is None:
        pytest.skip("torch is not installed")
    x = cp.zeros((2, 4), np.float32)
    # the torch adapter takes the call (a torch operand) and refuses the mix, naming both operands
    _refused(TypeError, r"x is a \w+\.ndarray but scale is a torch tensor",
             dmlq.quantize_linear, x, torch.ones(1), dtype="int4")
