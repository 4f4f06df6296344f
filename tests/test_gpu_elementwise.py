"""cuda/elementwise.cu on the GPU against dmlq.reference, bit for bit.

Every dtype combination, every variant forced, random inputs and the docs/semantics.md
edge cases, odd sizes, misaligned / non-contiguous / reversed / broadcast operands,
outputs poisoned (0xA5) inside a larger buffer whose other bytes must survive,
size 0, 64-bit indexing and a non-default stream.

Layouts are built in NumPy and copied to the device byte for byte with the same
strides (``to_device``), so the host arrays the reference sees are the very same
values. Float outputs compare bit for bit, except that any NaN matches any NaN
(docs/semantics.md fixes no NaN payload). The harness itself runs on the CPU in
``test_harness_*`` (reference against reference), so a GPU session only meets
kernel bugs.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from conftest import STAND_IN, assert_same, on_stand_in, skip_past_2_31_on_the_stand_in
from dmlq import reference as R
from dmlq.gpu import elementwise as ew
from dmlq.gpu import plan as plan_module

gpu = pytest.mark.gpu

I8, U8, I16, U16, I32, U32 = (np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32",
                                                    "uint32"))
F16, F32 = np.dtype("float16"), np.dtype("float32")
QT = (I8, U8)
DEQ_IN = (I8, U8, I16, U16, I32, U32)
ZPS = {I8: (0, 127, -128), U8: (0, 128, 255)}
SIZES = (1, 15, 17, 2**20 + 3)


def sizes(dev):
    """SIZES; the host harness stops at a few thousand (it runs every thread on the CPU)."""
    return SIZES if dev.full else tuple(min(n, 4099) for n in SIZES)
NAN, INF = float("nan"), float("inf")
POISON = 0xA5


# ================================================================ harness

def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def span(a):
    """(lo, hi): byte offsets, relative to a's data pointer, of the memory a covers."""
    lo = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + a.itemsize
    return lo, hi


def to_device(a):
    """A CuPy array with a's values and exactly a's strides (0 and negative kept)."""
    import cupy

    a = np.asarray(a)
    if a.ndim == 0:  # one element, copied: cupy.array(0-d) fills, and fills -0.0 as +0.0
        return cupy.asarray(a.reshape(1)).reshape(())
    if a.size == 0:
        return cupy.array(a)
    lo, hi = span(a)
    raw = np.frombuffer(ctypes.string_at(a.ctypes.data + lo, hi - lo), np.uint8)
    buf = cupy.asarray(raw)
    return cupy.ndarray(a.shape, a.dtype, memptr=buf.data + (-lo), strides=a.strides)


def host_replica(a):
    """to_device's byte copy done on the host (tests the span arithmetic)."""
    lo, hi = span(a)
    raw = np.frombuffer(ctypes.string_at(a.ctypes.data + lo, hi - lo), np.uint8).copy()
    return np.ndarray(a.shape, a.dtype, buffer=raw, offset=-lo, strides=a.strides)


class Device:
    """Where the operator runs. "gpu": CuPy and dmlq.gpu.elementwise. "emu": the same
    launchers on NumPy arrays with elementwise.cu's own source on the host harness
    (tests/cuda_host). "ref": the reference itself (tests this test harness)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.full = mode == "gpu" and not on_stand_in()  # full sizes: a real GPU

    def put(self, a):
        if a is None or not isinstance(a, np.ndarray):
            return a
        if self.mode == "gpu":
            return to_device(a)
        return a

    def host(self, a):
        return a.get() if self.mode == "gpu" else np.asarray(a)

    def out(self, host_out):
        """(device out, fetch): fetch() copies the device buffer (the whole poisoned base)
        back into host_out's memory, so host_out then holds the device results."""
        if self.mode != "gpu":
            return host_out, lambda: None
        import cupy

        if host_out.size == 0:
            return cupy.empty(host_out.shape, host_out.dtype), lambda: None
        root = _root(host_out)
        assert root.flags.c_contiguous
        dbase = cupy.asarray(root)
        offset = host_out.ctypes.data - root.ctypes.data
        dview = cupy.ndarray(host_out.shape, host_out.dtype, memptr=dbase.data + offset,
                             strides=host_out.strides)

        def fetch():
            root[...] = cupy.asnumpy(dbase)

        return dview, fetch

    def call(self, op, *args, variant=None):
        if self.mode == "ref":
            return getattr(R, op)(*args)
        return getattr(ew, op)(*args, variant=variant)


def layout(a, kind):
    """The values of a in a memory layout: c, offset (base shifted by one element, so
    not 16-byte aligned), step (every other element), rev (all axes reversed), T
    (Fortran order)."""
    a = np.asarray(a)
    if a.ndim == 0 or a.size == 0 or kind == "c":
        return np.ascontiguousarray(a).copy()
    if kind == "offset":
        buf = np.empty(a.size + 2, a.dtype)
        v = buf[1:1 + a.size].reshape(a.shape)
    elif kind == "step":
        buf = np.empty(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        v = buf[..., 1::2]
    elif kind == "rev":
        v = np.empty(a.shape, a.dtype)[(slice(None, None, -1),) * a.ndim]
    elif kind == "T":
        v = np.empty(a.shape[::-1], a.dtype).T
    else:
        raise ValueError(kind)
    v[...] = a
    return v


def poisoned_out(shape, dtype, kind="c"):
    """An output of ``kind`` layout inside a poisoned (0xA5) buffer."""
    shape = tuple(shape)
    if kind == "c" or not shape or 0 in shape:
        buf = np.empty(shape, dtype)
        buf.reshape(-1).view(np.uint8)[...] = POISON
        return buf
    size = math.prod(shape)
    if kind == "offset":
        buf = np.empty(size + 2, dtype)
        view = lambda b: b[1:1 + size].reshape(shape)  # noqa: E731
    elif kind == "step":
        buf = np.empty(shape[:-1] + (2 * shape[-1] + 1,), dtype)
        view = lambda b: b[..., 1::2]  # noqa: E731
    elif kind == "rev":
        buf = np.empty(shape, dtype)
        view = lambda b: b[(slice(None, None, -1),) * len(shape)]  # noqa: E731
    elif kind == "T":
        buf = np.empty(shape[::-1], dtype)
        view = lambda b: b.T  # noqa: E731
    else:
        raise ValueError(kind)
    buf.reshape(-1).view(np.uint8)[...] = POISON
    return view(buf)


def untouched_outside(out) -> bool:
    """Every byte of out's buffer that is not an element of out still holds the poison."""
    root = _root(out)
    if root is out:
        return True
    covered = np.zeros(root.nbytes, bool)
    start = out.ctypes.data - root.ctypes.data
    idx = np.indices(out.shape).reshape(out.ndim, -1)
    first = start + (np.asarray(out.strides)[:, None] * idx).sum(axis=0)
    for k in range(out.itemsize):
        covered[first + k] = True
    return bool((root.reshape(-1).view(np.uint8)[~covered] == POISON).all())


def check(dev: Device, op, inputs, out_shape, out_dtype, out_kind="c", variant=None, context=""):
    """Run op on the device with ``inputs`` (host arrays / scalars / None, laid out as
    given) and compare with the reference on the same values."""
    want = getattr(R, op)(*inputs, np.empty(out_shape, out_dtype))
    host_out = poisoned_out(out_shape, out_dtype, out_kind)
    dout, fetch = dev.out(host_out)
    got = dev.call(op, *[dev.put(a) for a in inputs], dout, variant=variant)
    assert got is dout
    fetch()
    assert_same(host_out, want, f"{op} {context} variant={variant} out={out_kind}")
    assert untouched_outside(host_out), f"{op} {context}: wrote outside out"
    return want


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "emu",
                        pytest.param(STAND_IN, marks=pytest.mark.gpu)])
def dev(request, monkeypatch):
    """The GPU; the host harness running the same launchers ("emu"); or the GPU
    test on the cupy stand-in (CuPy's calls, the kernels on the host harness)."""
    if request.param == STAND_IN:
        request.getfixturevalue("host_device")
        import cupy_stand_in

        with cupy_stand_in.installed():
            yield Device("gpu")
        return
    if request.param == "gpu":
        import cupy  # noqa: F401
    else:
        from dmlq.gpu import device

        host = request.getfixturevalue("host_device")
        monkeypatch.setattr(device, "default", host)  # every thread's device, for this test
        host.forget()
    yield Device(request.param)


@pytest.fixture
def launched(request, monkeypatch):
    """Names of the kernels launched during the test (after dev, if the test uses it)."""
    if "dev" in request.fixturenames:
        request.getfixturevalue("dev")
    names = []
    real = plan_module.execute

    def spy(plan, arglists, kernels):
        names.extend(launch.kernel for launch in plan.launches if launch.role == "main")
        return real(plan, arglists, kernels)

    monkeypatch.setattr(plan_module, "execute", spy)
    return names


def variants_for(contiguous: bool, per_axis: bool = False, op="quantize"):
    """The variants that can run a case (None = automatic choice)."""
    vs = [None, "strided"]
    if contiguous:
        if op != "quantized_add":
            vs.append("axis")
        if not per_axis:
            vs.append("contig")
    return vs


# ================================================================ values

def quant_inputs(rng, n, xdt, scale):
    """x values for quantize: in range, saturating, ties and near-ties at the given
    scale, and specials."""
    s = float(scale)
    if xdt == I32:
        parts = [rng.integers(-2**31, 2**31, n, dtype=np.int64),
                 rng.integers(-300, 300, n),
                 rng.integers(2**24 - 50, 2**24 + 50, n) * rng.choice([-1, 1], n),
                 rng.choice([0, 1, -1, 2**31 - 1, -2**31, -2**31 + 1, 33161217, 2**24 + 1], n)]
        pick = rng.integers(0, len(parts), n)
        return np.choose(pick, parts).astype(I32)
    with np.errstate(all="ignore"):
        parts = [rng.standard_normal(n) * 60 * s,
                 rng.standard_normal(n) * 400 * s,
                 rng.integers(-600, 601, n) / 2 * s,
                 np.nextafter((rng.integers(-600, 601, n) / 2 * s).astype(xdt),
                              rng.choice([-np.inf, np.inf], n).astype(xdt)).astype(np.float64),
                 rng.choice([NAN, INF, -INF, 0.0, -0.0, 3e38, -3e38, 1e-40, -1e-45, 65504.0,
                             6e-8, 0.5, -0.5, 1.5, -2.5], n)]
        pick = rng.integers(0, len(parts), n)
        return np.choose(pick, parts).astype(xdt)


def int_inputs(rng, n, dt):
    info = np.iinfo(dt)
    edges = np.array([info.min, info.min + 1, -1 if info.min < 0 else 1, 0, 1, info.max - 1,
                      info.max], dtype=np.int64)
    a = rng.integers(int(info.min), int(info.max) + 1, n, dtype=np.int64)
    mask = rng.random(n) < 0.1
    a[mask] = rng.choice(edges, int(mask.sum()))
    return a.astype(dt)


def rand_scale(rng, dt, shape=(), factor=1.0):
    """Scales (an array, 0-d by default), mostly positive."""
    v = rng.uniform(1e-3, 1.0, shape) * rng.choice([1, 1, 1, -1], shape) * factor
    return np.asarray(v, np.float64).astype(dt)


# ================================================================ harness self-tests (CPU)

@pytest.mark.parametrize("kind", ["c", "offset", "step", "rev", "T"])
def test_harness_layouts_and_guard(kind):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 5)).astype(F32)
    v = layout(a, kind)
    np.testing.assert_array_equal(v, a)
    np.testing.assert_array_equal(host_replica(v), a)
    bc = np.broadcast_to(a[:1], (7, 4, 5))
    np.testing.assert_array_equal(host_replica(bc), bc)
    o = poisoned_out((3, 4, 5), F16, kind)
    assert untouched_outside(o)
    o[...] = 0
    assert untouched_outside(o)
    if _root(o) is not o and _root(o).size > o.size:
        _root(o).reshape(-1)[0 if kind != "offset" else -1] = 1
        assert not untouched_outside(o)


def test_harness_compare():
    assert_same(np.array([NAN, 1.0], F32), np.array([-NAN, 1.0], F32))
    with pytest.raises(AssertionError):
        assert_same(np.array([0.0], F32), np.array([-0.0], F32))
    with pytest.raises(AssertionError):
        assert_same(np.array([1, 2], I8), np.array([1, 3], I8))


def test_harness_runs_reference_cases():
    """The case builders below, with the reference standing in for the GPU."""
    cpu = Device("ref")
    rng = np.random.default_rng(3)
    x = quant_inputs(rng, 1000, F32, 0.05)
    for kind in ("c", "offset", "step", "rev", "T"):
        check(cpu, "quantize_linear", (layout(x.reshape(10, 100), kind), np.float32(0.05), None),
              (10, 100), U8, kind)
    q = int_inputs(rng, 600, U32).reshape(6, 100)
    check(cpu, "dequantize_linear", (q, np.full((6, 1), 0.25, F16), np.full((1, 100), 7, U32)),
          (6, 100), F16, "step")
    a, b = _all_pairs(I8, U8)
    check(cpu, "quantized_add", (a, np.float32(0.5), None, b, np.float32(0.5), None,
                                 np.float32(1.0), np.array([3], I8)), a.shape, I8, "rev")


# ================================================================ quantize

@pytest.mark.parametrize("variant", [None, "contig", "axis", "strided"])
@pytest.mark.parametrize("q", QT)
@pytest.mark.parametrize("xdt,sdt", [(F32, F32), (F16, F16), (I32, F32), (F32, F16), (F16, F32)])
def test_quantize_random(dev, launched, rng, xdt, sdt, q, variant):
    for n in sizes(dev):
        scale = rand_scale(rng, sdt)
        x = quant_inputs(rng, n, xdt, scale)
        for zp in (None, np.array(rng.integers(*((-128, 128) if q == I8 else (0, 256))), q)):
            for x_kind, o_kind in (("c", "c"), ("offset", "c"), ("c", "offset"), ("offset", "offset")):
                check(dev, "quantize_linear", (layout(x, x_kind), scale, zp), (n,), q, o_kind,
                      variant, f"n={n} x={x_kind} zp={zp}")
    if variant:
        assert launched and all(nm.startswith(f"quantize_{variant}<") for nm in launched)
    else:
        assert all(nm.startswith("quantize_contig<") for nm in launched)


@pytest.mark.parametrize("variant", [None, "strided"])
@pytest.mark.parametrize("kind", ["step", "rev", "T", "bcast"])
@pytest.mark.parametrize("xdt", [F32, F16, I32])
def test_quantize_non_contiguous(dev, launched, rng, xdt, kind, variant):
    shape = (33, 65)
    sdt = F16 if xdt == F16 else F32
    scale = rand_scale(rng, sdt)
    x = quant_inputs(rng, 33 * 65, xdt, scale).reshape(shape)
    zp = np.array(-3, I8)
    if kind == "bcast":
        for xs in (x[:1], x[:, :1], x[:1, :1]):
            check(dev, "quantize_linear", (np.broadcast_to(xs, shape), scale, zp), shape, I8,
                  "c", variant, "broadcast view")
            check(dev, "quantize_linear", (xs, scale, zp), shape, I8, "step", variant, "broadcast")
    else:
        for o_kind in ("c", kind, "T", "step"):
            check(dev, "quantize_linear", (layout(x, kind), scale, zp), shape, I8, o_kind, variant,
                  f"x={kind}")
    if kind in ("rev", "T"):  # same layout on x and out: dense after canonicalizing
        launched.clear()
        check(dev, "quantize_linear", (layout(x, kind), scale, zp), shape, I8, kind)
        assert launched[0].startswith("quantize_contig<")


@pytest.mark.parametrize("variant", [None, "axis", "strided"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("xdt,q", [(F32, I8), (F16, U8), (I32, U8)])
def test_quantize_per_axis(dev, launched, rng, xdt, q, axis, variant):
    for shape in ((4, 5, 6), (3, 257, 17), (2, 3, 1001)):
        sdt = F16 if xdt == F16 else F32
        pshape = [1, 1, 1]
        pshape[axis] = shape[axis]
        scale = rand_scale(rng, sdt, tuple(pshape))
        x = quant_inputs(rng, math.prod(shape), xdt, 0.05).reshape(shape)
        lo, hi = (-128, 128) if q == I8 else (0, 256)
        zp_axis = rng.integers(lo, hi, pshape).astype(q)
        zp_one = np.array(rng.integers(lo, hi), q)
        for s, zp in ((scale, zp_axis), (scale, zp_one), (scale, None),
                      (np.asarray(scale.reshape(-1)[0]), zp_axis),
                      (layout(scale, "rev"), layout(zp_axis, "rev")),
                      (layout(scale, "step"), zp_axis),
                      (scale.reshape(-1) if axis == 2 else scale, None)):
            check(dev, "quantize_linear", (x, s, zp), shape, q, "c", variant,
                  f"shape={shape} axis={axis}")
    if variant:
        assert all(nm.startswith(f"quantize_{variant}<") for nm in launched)
    else:
        assert {nm.split("<")[0] for nm in launched} == {"quantize_axis"}


def test_quantize_merged_axis_and_two_axes(dev, launched, rng):
    x = quant_inputs(rng, 5 * 6 * 7, F32, 0.1).reshape(5, 6, 7)
    scale = rand_scale(rng, F32, (6, 7))  # one merged axis of 42
    check(dev, "quantize_linear", (x, scale, None), x.shape, U8)
    assert launched[-1].startswith("quantize_axis<")
    zp = rng.integers(0, 256, (5, 1, 1)).astype(U8)  # scale and zp on different axes
    check(dev, "quantize_linear", (x, scale[:1], zp), x.shape, U8)
    assert launched[-1].startswith("quantize_strided<")
    full = rand_scale(rng, F32, x.shape)  # an element-wise scale
    check(dev, "quantize_linear", (x, full, zp), x.shape, U8, "T")


FLOAT_EDGES = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 76.5, 3.5, 126.5, 127.5, 128.5, -127.5, -128.5,
               -129.5, 254.5, 255.5, 5.0, -5.0, 0.273939937, NAN, -NAN, INF, -INF, 3e38, -3e38,
               0.0, -0.0, 1e-40, -1e-40, 1e-45, 2.0**-126, 1.0, -1.0, 65504.0, 1e10,
               float(np.finfo(F32).max), 0.49999997, 0.50000006, 2.4999998, 2.5000002]
F16_EDGES = [0.623046875, 0.5, -0.5, 2.5, -2.5, 76.5, 6e-8, -6e-8, 2.0**-14, 65504.0, -65504.0,
             INF, -INF, NAN, 0.0, -0.0, 127.5, 128.5, 255.5, 1000.0]
SCALE_EDGES = [1.0, 0.039215686, 0.00214854861, 0.5, 1e-3, 1e-45, 1e-40, 2.0**-149, 0.0, -0.0,
               INF, -INF, NAN, -1.0, 3e38, 0.03775024]
F16_SCALES = [1.0, 0.03775024, 0.5, 2.0**-24, 6.1e-5, 0.0, -0.0, INF, NAN, -1.0, 65504.0]
INT_EDGES = [33161217, 2**24, 2**24 + 1, 2**24 + 3, 2**31 - 1, -2**31, -2**31 + 1, 0, 1, -1, 127,
             128, -128, -129, 255, 256, 16777217, -16777217]
INT_SCALES = [1.0, 262144.0, 2.0**24, 0.5, 3e-3, 1e-45, 0.0, INF, NAN, -1.0, 2.0**31]


@pytest.mark.parametrize("variant", [None, "contig", "axis", "strided"])
@pytest.mark.parametrize("q", QT)
@pytest.mark.parametrize("xdt", [F32, F16, I32])
def test_quantize_edges(dev, xdt, q, variant):
    xs, ss = {F32: (FLOAT_EDGES, SCALE_EDGES), F16: (F16_EDGES, F16_SCALES),
              I32: (INT_EDGES, INT_SCALES)}[xdt]
    sdt = F16 if xdt == F16 else F32
    x = np.array(xs, np.float64 if xdt != I32 else np.int64).astype(xdt)
    # plus every t that lands on a tie or a clamp edge for each zero point at scale 1
    for zp in ZPS[q] + (None,):
        z = None if zp is None else np.array(zp, q)
        for s in ss:
            check(dev, "quantize_linear", (x, np.array(s, sdt), z), x.shape, q, "c", variant,
                  f"s={s} zp={zp}")
        qmin, qmax = (-128, 127) if q == I8 else (0, 255)
        zz = 0 if zp is None else zp
        t = np.array([qmin - zz - 0.5, qmin - zz + 0.5, qmax - zz - 0.5, qmax - zz + 0.5,
                      qmin - zz - 1, qmax - zz + 1], np.float64)
        if xdt != I32:
            check(dev, "quantize_linear", (t.astype(xdt), np.array(1.0, sdt), z), t.shape, q,
                  "c", variant, f"clamp edges zp={zp}")
    if variant in (None, "axis", "strided"):
        # the whole x-by-scale table at once: x (N, M) against scales (1, M), per axis
        s = np.array(ss, sdt).reshape(1, -1)
        xt = np.ascontiguousarray(np.broadcast_to(x.reshape(-1, 1), (x.size, s.size)))
        check(dev, "quantize_linear", (xt, s, np.array(ZPS[q][1], q)), xt.shape, q, "c", variant,
              "table")
        if variant != "axis":  # x broadcast (stride 0): strided only
            check(dev, "quantize_linear", (x.reshape(-1, 1), s, np.array(ZPS[q][1], q)),
                  xt.shape, q, "step", variant, "broadcast table")


def test_quantize_semantics_examples(dev):
    cases = [  # (x, scale, zp, dtype, expected) straight from docs/semantics.md
        (np.array([5.0, -5.0], F32), 0.039215686, None, I8, [127, -127]),
        (np.array([76.5, -2.5], F32), 1.0, None, I8, [76, -2]),
        (np.array([0.623046875], F16), np.float16(0.03775024), None, U8, [17]),
        (np.array([33161217], I32), 262144.0, None, I8, [126]),
        (np.array([NAN, INF, 3e38, -INF, -3e38], F32), 1.0, 128, U8, [128, 255, 255, 0, 0]),
    ]
    for x, s, zp, q, expected in cases:
        sdt = F16 if x.dtype == F16 else F32
        z = None if zp is None else np.array(zp, q)
        want = check(dev, "quantize_linear", (x, np.array(s, sdt), z), x.shape, q)
        assert want.tolist() == expected


# ================================================================ dequantize

@pytest.mark.parametrize("variant", [None, "contig", "axis", "strided"])
@pytest.mark.parametrize("odt", [F32, F16])
@pytest.mark.parametrize("qdt", DEQ_IN)
def test_dequantize_random(dev, launched, rng, qdt, odt, variant):
    for n in sizes(dev):
        q = int_inputs(rng, n, qdt)
        scale = rand_scale(rng, odt, factor=float(rng.choice([1e-6, 1.0, 1e3])) if odt == F32 else 1.0)
        for zp in (None, int_inputs(rng, 1, qdt).reshape(())):
            for q_kind, o_kind in (("c", "c"), ("offset", "c"), ("c", "offset"), ("offset", "offset")):
                check(dev, "dequantize_linear", (layout(q, q_kind), scale, zp), (n,),
                      odt, o_kind, variant, f"n={n} q={q_kind}")
    if variant:
        assert launched and all(nm.startswith(f"dequantize_{variant}<") for nm in launched)


@pytest.mark.parametrize("variant", [None, "strided"])
@pytest.mark.parametrize("kind", ["step", "rev", "T", "bcast"])
@pytest.mark.parametrize("qdt,odt", [(I8, F32), (U8, F16), (I16, F32), (U16, F16), (I32, F32),
                                     (U32, F16)])
def test_dequantize_non_contiguous(dev, rng, qdt, odt, kind, variant):
    shape = (31, 67)
    q = int_inputs(rng, 31 * 67, qdt).reshape(shape)
    scale = rand_scale(rng, odt)
    zp = int_inputs(rng, 1, qdt).reshape(())
    if kind == "bcast":
        for qs in (q[:1], q[:, :1], q[:1, :1]):
            check(dev, "dequantize_linear", (np.broadcast_to(qs, shape), scale, zp), shape, odt,
                  "T", variant)
    else:
        for o_kind in ("c", kind, "step", "offset"):
            check(dev, "dequantize_linear", (layout(q, kind), scale, zp), shape, odt, o_kind, variant)


@pytest.mark.parametrize("variant", [None, "axis", "strided"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("qdt,odt", [(I8, F32), (U8, F16), (I32, F32), (U32, F16), (I16, F16)])
def test_dequantize_per_axis(dev, launched, rng, qdt, odt, axis, variant):
    for shape in ((4, 5, 6), (3, 129, 33), (2, 5, 2001)):
        pshape = [1, 1, 1]
        pshape[axis] = shape[axis]
        scale = rand_scale(rng, odt, tuple(pshape))
        zp = int_inputs(rng, shape[axis], qdt).reshape(pshape)
        q = int_inputs(rng, math.prod(shape), qdt).reshape(shape)
        for s, z in ((scale, zp), (scale, None), (np.asarray(scale.reshape(-1)[0]), zp),
                     (layout(scale, "rev"), layout(zp, "step")), (scale, zp.reshape(-1)[:1])):
            check(dev, "dequantize_linear", (q, s, z), shape, odt, "c", variant, f"axis={axis}")
    if variant is None:
        assert {nm.split("<")[0] for nm in launched} == {"dequantize_axis"}


DEQ_SCALES = [1.0, -1.0, 0.0, -0.0, INF, -INF, NAN, 1e-45, 1e-40, 2.0**-126, 3e38, 65504.0, 65520.0,
              2.0**-24, 2.0**-25, 6e-8, 0.1, 1.0000001]


def _as(values, dt):
    """np.array(values, dt), overflow to inf allowed (float16 scales)."""
    with np.errstate(over="ignore"):
        return np.array(values, dt)


@pytest.mark.parametrize("variant", [None, "contig", "axis", "strided"])
@pytest.mark.parametrize("odt", [F32, F16])
@pytest.mark.parametrize("qdt", DEQ_IN)
def test_dequantize_edges(dev, qdt, odt, variant):
    info = np.iinfo(qdt)
    vals = np.array(sorted({int(info.min), int(info.min) + 1, -1 if info.min else 2, 0, 1,
                            int(info.max) - 1, int(info.max), 2**24 + 1 if info.max > 2**24 else 3,
                            (2**24 + 3) if info.max > 2**24 else 5}), np.int64)
    q = vals.astype(qdt)
    # every extreme difference, incl. 2**31-1 - (-1) and 2**32-1 - 0 (the host harness: a few)
    for zp in (vals if dev.full else vals[::3]):
        for s in DEQ_SCALES:
            check(dev, "dequantize_linear", (q, _as(s, odt), np.array(zp, qdt)), q.shape, odt,
                  "c", variant, f"zp={zp} s={s}")
    if variant != "contig":
        s = _as(DEQ_SCALES, odt).reshape(-1, 1, 1)
        check(dev, "dequantize_linear", (q.reshape(1, -1, 1), s, q.reshape(1, 1, -1)),
              (s.size, q.size, q.size), odt, "c", "strided" if variant == "axis" else variant,
              "table")


# ================================================================ quantized add

def _all_pairs(adt, bdt):
    av = np.arange(256, dtype=np.int64) + (-128 if adt == I8 else 0)
    bv = np.arange(256, dtype=np.int64) + (-128 if bdt == I8 else 0)
    return (np.repeat(av, 256).reshape(256, 256).astype(adt),
            np.tile(bv, 256).reshape(256, 256).astype(bdt))


def _one(v, dt, shape=(1,)):
    return None if v is None else np.full(shape, v, dt)


ADD_PARAMS = [  # a_scale, b_scale, out_scale, zero points (a, b, out) as fractions of the range
    (0.05, 0.07, 0.1, (0.3, 0.6, 0.5)),
    (0.5, 0.5, 1.0, (0.5, 0.5, 0.5)),        # (a + b) / 2: exact ties
    (0.02, 0.03, 0.5, None),                  # zero points omitted
    (1.0, 1.0, 1.0, (0.0, 1.0, 0.0)),
    (1e-45, 3e38, 1e-3, (0.5, 0.5, 0.5)),     # subnormal and huge
    (3e38, 3e38, 1e-38, (0.2, 0.9, 0.5)),     # av + bv overflows to inf, inf - inf = NaN
    (INF, 1.0, 1.0, (0.5, 0.5, 0.25)),        # inf * 0 = NaN where a == a_zp
    (0.1, 0.1, 0.0, (0.5, 0.5, 0.75)),        # division by zero
    (0.1, NAN, 0.3, (0.5, 0.5, 0.5)),
    (-0.05, 0.05, -0.25, (0.1, 0.2, 0.3)),
]


def _zp_value(frac, dt):
    lo, hi = (-128, 127) if dt == I8 else (0, 255)
    return int(round(lo + frac * (hi - lo)))


@pytest.mark.parametrize("variant", [None, "contig", "strided"])
@pytest.mark.parametrize("adt,bdt,odt", [(a, b, o) for a in QT for b in QT for o in QT])
def test_add_all_pairs(dev, launched, adt, bdt, odt, variant):
    a, b = _all_pairs(adt, bdt)
    for i, (sa, sb, so, zps) in enumerate(ADD_PARAMS if dev.full else ADD_PARAMS[:3]):
        zs = (None, None, None) if zps is None else tuple(
            np.full(sh, _zp_value(f, dt), dt)
            for f, dt, sh in zip(zps, (adt, bdt, odt), ((1,), (), (1, 1))))
        args = (a, np.full((), sa, F32), zs[0], b, np.full((1,), sb, F32), zs[1],
                np.full((1, 1), so, F32), zs[2])
        check(dev, "quantized_add", args, a.shape, odt, "c", variant, f"params #{i}")
        check(dev, "quantized_add", (layout(a, "offset"), *args[1:3], layout(b, "offset"), *args[4:]),
              a.shape, odt, "offset", variant, f"params #{i} misaligned")
    if variant:
        assert all(nm.startswith(f"add_{variant}<") for nm in launched)
    else:
        assert all(nm.startswith("add_contig<") for nm in launched)


@pytest.mark.parametrize("variant", [None, "strided"])
def test_add_broadcast_and_layouts(dev, launched, rng, variant):
    s = (np.float32(0.03), np.float32(0.05), np.float32(0.07))
    for adt, bdt, odt in ((I8, U8, I8), (U8, U8, U8), (I8, I8, U8)):
        a, b = _all_pairs(adt, bdt)
        cases = [((256, 1), a[:, :1], b[:1, :]), ((256, 256), a[:1, :], b),
                 ((256, 256), np.asarray(a[3, 7]), b), ((256, 256), a, b[:, :1]),
                 ((5, 256, 256), a, np.broadcast_to(b, (5, 256, 256))),
                 ((256, 256), np.broadcast_to(a[:1], (256, 256)), layout(b, "T"))]
        zp = (np.array([1], adt), None, np.array(7, odt))
        for shape, av, bv in cases:
            shape = np.broadcast_shapes(av.shape, bv.shape)
            for o_kind in ("c", "step", "rev"):
                check(dev, "quantized_add", (av, s[0], zp[0], bv, s[1], zp[1], s[2], zp[2]),
                      shape, odt, o_kind, variant, f"a{av.shape} b{bv.shape}")
        for kind in ("step", "rev", "T"):
            check(dev, "quantized_add", (layout(a, kind), s[0], zp[0], layout(b, kind), s[1], zp[1],
                                         s[2], zp[2]), a.shape, odt, "c", variant, kind)
    if variant is None:
        assert "add_strided<int8, int8, uint8, false>" in launched


# ================================================================ shared cases

def _is_tensor(v):
    return isinstance(v, np.ndarray) and v.ndim == 1 and v.size > 1


def _cases(rng, n=4099):
    """(op, inputs, out dtype) for one contiguous case of every operator family, n elements."""
    x = quant_inputs(rng, n, F32, 0.05)
    xh = quant_inputs(rng, n, F16, 0.05)
    q8, q32 = int_inputs(rng, n, U8), int_inputs(rng, n, I32)
    a, b = int_inputs(rng, n, I8), int_inputs(rng, n, U8)
    # 0-d arrays go to the device (pointer arguments), NumPy scalars by value
    return [
        ("quantize_linear", (x, np.array(0.05, F32), np.array(3, I8)), I8),
        ("quantize_linear", (xh, np.float16(0.05), None), U8),
        ("dequantize_linear", (q8, np.array(0.125, F16), np.array(200, U8)), F16),
        ("dequantize_linear", (q32, np.float32(1e-3), np.array(-7, I32)), F32),
        ("quantized_add", (a, np.array(0.1, F32), np.array(2, I8), b, np.array([0.2], F32), None,
                           np.float32(0.15), np.array(100, U8)), U8),
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 15, 16, 17, 31, 33, 63, 65, 1000, 2**20 + 3])
def test_odd_sizes_and_alignment(dev, rng, n):
    """Every head/tail split of the vector loop: misaligned inputs and outputs, alone
    and together (no common head: all scalar)."""
    n = n if dev.full else min(n, 4099)
    for op, inputs, odt in _cases(rng, max(n, 4099)):  # (the first GPU run: n past 4099 sliced short)
        big = [i for i, v in enumerate(inputs) if _is_tensor(v)]
        inputs = tuple(v[:n] if i in big else v for i, v in enumerate(inputs))
        for in_kind in ("c", "offset"):
            for o_kind in ("c", "offset"):
                args = tuple(layout(v, in_kind) if i in big else v for i, v in enumerate(inputs))
                for variant in variants_for(True, op=op):
                    check(dev, op, args, (n,), odt, o_kind, variant, f"n={n} in={in_kind}")


@pytest.mark.parametrize("variant", ["strided"])
def test_wide_index_kernels(dev, launched, monkeypatch, request, rng, variant):
    """The 64-bit strided kernels on small inputs (forced), every operator family."""
    ew.clear_plan_cache()  # plans are memoized with their 32/64-bit choice
    request.addfinalizer(ew.clear_plan_cache)
    monkeypatch.setattr(ew, "needs_wide", lambda lay: True)
    for op, inputs, odt in _cases(rng):
        inputs = tuple(layout(v[:4096].reshape(64, 64), "T") if _is_tensor(v) else v for v in inputs)
        for o_kind in ("c", "rev", "step"):
            check(dev, op, inputs, (64, 64), odt, o_kind, variant)
        check(dev, op, inputs, (64, 64), odt, "c", None)
    assert launched and all(nm.endswith(", true>") for nm in launched)


def test_host_scalar_parameters(dev, rng):
    """NumPy and Python scalars for scales and zero points travel by value."""
    x = quant_inputs(rng, 1000, F32, 0.05)
    ref = R.quantize_linear(x, np.float32(0.05), np.array(-3, I8), np.empty(1000, I8))
    for s in (0.05, np.float32(0.05), np.array(0.05, F32)):
        for zp in (-3, np.int8(-3), np.array([-3], I8)):
            out = dev.put(poisoned_out((1000,), I8))
            ew.quantize_linear(dev.put(x), s, zp, out)
            assert_same(dev.host(out), ref, f"s={s!r} zp={zp!r}")
    q = int_inputs(rng, 1000, U16)
    ref = R.dequantize_linear(q, np.float16(0.5), np.array(9, U16), np.empty(1000, F16))
    out = dev.put(poisoned_out((1000,), F16))
    ew.dequantize_linear(dev.put(q), np.float16(0.5), np.uint16(9), out)
    assert_same(dev.host(out), ref, "dequantize host scalars")
    a, b = int_inputs(rng, 1000, I8), int_inputs(rng, 1000, I8)
    ref = R.quantized_add(a, np.float32(0.1), None, b, np.float32(0.2), np.array(4, I8),
                          np.float32(0.3), None, np.empty(1000, U8))
    out = dev.put(poisoned_out((1000,), U8))
    ew.quantized_add(dev.put(a), 0.1, None, dev.put(b), np.float32(0.2), 4, 0.3, None, out)
    assert_same(dev.host(out), ref, "add host scalars")
    # a per-axis host array is copied to the device
    s = rand_scale(rng, F32, (10, 1))
    ref = R.quantize_linear(x.reshape(10, 100), s, None, np.empty((10, 100), U8))
    out = dev.put(poisoned_out((10, 100), U8))
    ew.quantize_linear(dev.put(x.reshape(10, 100)), s, None, out)
    assert_same(dev.host(out), ref, "per-axis host scale")


@gpu
def test_size_zero_launches_nothing(launched):
    import cupy

    for shape in ((0,), (3, 0), (0, 5, 2)):
        for variant in (None,) + ew.VARIANTS:
            out = cupy.empty(shape, I8)
            assert ew.quantize_linear(cupy.empty(shape, F32), cupy.float32(1), None, out,
                                      variant=variant) is out
            out = cupy.empty(shape, F32)
            assert ew.dequantize_linear(cupy.empty(shape, U8), cupy.ones((), F32), None, out,
                                        variant=variant) is out
            out = cupy.empty(shape, U8)
            assert ew.quantized_add(cupy.empty(shape, U8), cupy.ones(1, F32), None,
                                    cupy.empty(shape[-1:], U8), cupy.ones(1, F32), None,
                                    cupy.ones(1, F32), None, out, variant=variant) is out
    assert launched == []
    with pytest.raises(ValueError):
        ew.quantize_linear(cupy.empty(0, F32), cupy.float32(1), None, cupy.empty(0, I8),
                           variant="vec16")


@gpu
def test_forced_variant_that_cannot_run_raises():
    import cupy

    x = cupy.zeros((4, 6), F32)
    out = cupy.empty((4, 6), U8)
    with pytest.raises(ValueError):
        ew.quantize_linear(x, cupy.ones((4, 1), F32), None, out, variant="contig")
    with pytest.raises(ValueError):  # x in Fortran order, out in C order
        ew.quantize_linear(cupy.zeros((6, 4), F32).T, cupy.ones((), F32), None, out,
                           variant="contig")
    # a scale varying along two axes that do not merge into one (a full (4, 6) scale
    # merges with x into one axis of 24: the axis kernel runs it; found by the
    # stand-in twin, as this test had never run)
    with pytest.raises(ValueError):
        ew.quantize_linear(cupy.zeros((4, 6, 5), F32), cupy.ones((4, 1, 5), F32), None,
                           cupy.empty((4, 6, 5), U8), variant="axis")
    a = cupy.zeros((4, 6), U8)
    with pytest.raises(ValueError):
        ew.quantized_add(a, cupy.ones(1, F32), None, a, cupy.ones(1, F32), None,
                         cupy.ones(1, F32), None, out, variant="axis")
    with pytest.raises(ValueError):
        ew.quantized_add(a[:1], cupy.ones(1, F32), None, a, cupy.ones(1, F32), None,
                         cupy.ones(1, F32), None, out, variant="contig")
    with pytest.raises(TypeError):
        ew.quantize_linear(x, cupy.ones((), F32), cupy.zeros((), I8), out)  # zp dtype != out


@gpu
def test_non_default_stream(rng):
    import cupy

    for op, inputs, odt in _cases(rng):
        want = getattr(R, op)(*inputs, np.empty(4099, odt))
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            args = [to_device(v) if isinstance(v, np.ndarray) else v for v in inputs]
            out = cupy.empty(4099, odt)
            out.fill(0)
            getattr(ew, op)(*args, out)
            res = out.get(stream=stream)  # the copy is ordered after the kernel on this stream
        stream.synchronize()
        assert_same(res, want, f"{op} on a non-default stream")


# ================================================================ 64-bit indexing, >= 2**31 elements

def _tiled(cupy, pattern, n, dtype):
    reps = -(-n // pattern.size)
    return cupy.tile(cupy.asarray(pattern.astype(dtype)), reps)[:n]


@gpu
def test_add_contig_beyond_2_31_elements():
    skip_past_2_31_on_the_stand_in()
    import cupy

    n = 2**31 + 19
    pa = (np.arange(251 * 256) % 251 - 125).astype(I8)
    pb = (np.arange(241 * 256) * 7 % 256).astype(U8)
    a, b = _tiled(cupy, pa, n, I8), _tiled(cupy, pb, n, U8)
    out = cupy.empty(n, I8)
    params = (np.float32(0.1), np.array(3, I8), np.float32(0.05), np.array(130, U8),
              np.float32(0.2), np.array(-5, I8))
    dparams = [cupy.asarray(p) for p in params]
    ew.quantized_add(a, dparams[0], dparams[1], b, dparams[2], dparams[3], dparams[4], dparams[5],
                     out)
    for lo, hi in ((0, 2**20), (2**31 - 2**20, n), (2**30 - 77, 2**30 + 77)):
        ha, hb = cupy.asnumpy(a[lo:hi]), cupy.asnumpy(b[lo:hi])
        want = R.quantized_add(ha, params[0], params[1], hb, params[2], params[3], params[4],
                               params[5], np.empty(hi - lo, I8))
        assert_same(cupy.asnumpy(out[lo:hi]), want, f"[{lo}:{hi}]")
    del a, b, out


@gpu
def test_dequantize_axis_beyond_2_31_elements(launched):
    skip_past_2_31_on_the_stand_in()
    import cupy

    cols = 2**30 + 7
    q = _tiled(cupy, (np.arange(253 * 64) % 253).astype(U8), 2 * cols, U8).reshape(2, cols)
    scale = np.array([[0.5], [-0.25]], F16)
    zp = np.array([[3], [250]], U8)
    out = cupy.empty((2, cols), F16)
    ew.dequantize_linear(q, cupy.asarray(scale), cupy.asarray(zp), out)
    assert launched[-1].startswith("dequantize_axis<")
    # (1, 2**30 - 7) is element 2**31, 14 elements before the row's end (the first GPU run's
    # window reached past the end, so the slice came back short)
    for r, c0, c1 in ((0, 0, 2**16), (0, cols - 2**16, cols), (1, 0, 2**16), (1, cols - 2**16, cols),
                      (1, 2**30 - 7 - 500, cols)):
        want = R.dequantize_linear(cupy.asnumpy(q[r, c0:c1]), scale[r], zp[r],
                                   np.empty(c1 - c0, F16))
        assert_same(cupy.asnumpy(out[r, c0:c1]), want, f"row {r} [{c0}:{c1}]")
    del q, out


@gpu
def test_strided_wide_by_extent_and_by_count(launched):
    skip_past_2_31_on_the_stand_in()
    import cupy

    # few elements, but the input view spans more than 2**31 elements
    buf = _tiled(cupy, (np.arange(97 * 3) % 97).astype(I8), 2**31 + 2**21, I8)
    view = buf[::2**20]
    out = cupy.empty(view.shape, F32)
    ew.dequantize_linear(view, cupy.asarray(np.float32(0.5)), cupy.asarray(np.array(-4, I8)), out)
    assert launched[-1] == "dequantize_strided<int8, float, true>"
    want = R.dequantize_linear(cupy.asnumpy(view), np.float32(0.5), np.array(-4, I8),
                               np.empty(view.shape, F32))
    assert_same(cupy.asnumpy(out), want, "wide extent")
    del buf, view
    # >= 2**31 outputs from broadcast inputs (never dense: strided, 64-bit)
    rows, cols = 2**16 + 1, 2**15
    ha = (np.arange(rows) % 256).astype(U8).reshape(rows, 1)
    hb = (np.arange(cols) * 5 % 256 - 128).astype(I8).reshape(1, cols)
    out = cupy.empty((rows, cols), U8)
    ps = (np.float32(0.02), np.float32(0.03), np.float32(0.04))
    ew.quantized_add(cupy.asarray(ha), cupy.asarray(ps[0]), None, cupy.asarray(hb),
                     cupy.asarray(ps[1]), None, cupy.asarray(ps[2]), None, out)
    assert launched[-1] == "add_strided<uint8, int8, uint8, true>"
    for r0, r1 in ((0, 3), (2**15 - 1, 2**15 + 2), (rows - 3, rows)):
        want = R.quantized_add(ha[r0:r1], ps[0], None, hb, ps[1], None, ps[2], None,
                               np.empty((r1 - r0, cols), U8))
        assert_same(cupy.asnumpy(out[r0:r1]), want, f"rows [{r0}:{r1}]")
