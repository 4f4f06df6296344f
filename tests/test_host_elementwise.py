"""elementwise.cu's own source on the host harness, driven by the launchers in
dmlq/gpu/elementwise.py, bit for bit against dmlq.reference.

Every variant selection can pick (contig, axis, strided, strided-wide) with
each dtype pair, per-tensor / per-axis / broadcast scale and zero-point
layouts, device or host scalars, strided, reversed and offset views, sizes
around the vector width and the unroll, and outputs poisoned before the launch.
"""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import reference as ref
from dmlq.gpu import elementwise as ew

QUANT_IN = ("float32", "float16", "int32")
QTYPES = ("int8", "uint8")
DEQUANT_IN = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
SIZES = (1, 3, 15, 16, 17, 63, 257, 1031, 4099)  # around V (16), the unroll and the grid stride


def poisoned(shape, dtype):
    out = np.empty(shape, dtype)
    out.reshape(-1).view(np.uint8)[...] = 0xA5
    return out


def qvals(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=np.int64).astype(dtype)


def fvals(rng, shape, dtype):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(dtype)
    x = (rng.standard_normal(shape) * 40).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, 3e38 if np.dtype(dtype).itemsize == 4 else 6e4], np.float32).astype(dtype)
    flat[:: max(1, flat.size // 7)][: len(specials)] = specials[: len(flat[:: max(1, flat.size // 7)])]
    return x


def scales(rng, shape, dtype=np.float32):
    s = rng.uniform(0.01, 2.0, shape).astype(dtype)
    return s


def check_quantize(rng, x, scale, zp, q, variant, out=None):
    shape = np.broadcast_shapes(x.shape, np.shape(scale), np.shape(zp) if zp is not None else ())
    out = poisoned(shape, q) if out is None else out
    want = ref.quantize_linear(x, np.asarray(scale), None if zp is None else np.asarray(zp),
                               np.empty(shape, q))
    ew.quantize_linear(x, scale, zp, out, variant=variant)
    np.testing.assert_array_equal(out, want, err_msg=f"quantize {variant} {x.dtype}->{q} {shape}")


def check_dequantize(rng, qx, scale, zp, variant, out=None):
    shape = np.broadcast_shapes(qx.shape, np.shape(scale), np.shape(zp) if zp is not None else ())
    odt = np.asarray(scale).dtype
    out = poisoned(shape, odt) if out is None else out
    want = ref.dequantize_linear(qx, np.asarray(scale), None if zp is None else np.asarray(zp),
                                 np.empty(shape, odt))
    ew.dequantize_linear(qx, scale, zp, out, variant=variant)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8),
                                  err_msg=f"dequantize {variant} {qx.dtype}->{odt} {shape}")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("xt", QUANT_IN)
@pytest.mark.parametrize("q", QTYPES)
def test_quantize_contig(host, rng, n, xt, q):
    x = fvals(rng, (n,), xt)
    sdt = np.float16 if xt == "float16" else np.float32
    check_quantize(rng, x, np.array([0.37], sdt), np.array([7], q), q, "contig")
    check_quantize(rng, x[1:], sdt(0.02), None, q, None)  # host scalar, odd start


@pytest.mark.parametrize("n", (1, 17, 1031))
@pytest.mark.parametrize("it", DEQUANT_IN)
@pytest.mark.parametrize("ot", ("float32", "float16"))
def test_dequantize_contig(host, rng, n, it, ot):
    qx = qvals(rng, (n,), it)
    check_dequantize(rng, qx, np.array([0.125], ot), np.array([3], it), "contig")
    check_dequantize(rng, qx[1:], np.array([1e-3], ot), None, None)


@pytest.mark.parametrize("shape,axis", [((7, 33), 0), ((7, 33), 1), ((3, 5, 17), 1), ((2, 3, 4, 9), 3),
                                        ((1, 1031), 1), ((257, 3), 0)])
@pytest.mark.parametrize("op", ("quantize", "dequantize"))
def test_per_axis(host, rng, shape, axis, op):
    pshape = [1] * len(shape)
    pshape[axis] = shape[axis]
    s = scales(rng, pshape)
    for variant in ("axis", "strided", None):
        if op == "quantize":
            check_quantize(rng, fvals(rng, shape, "float32"), s, qvals(rng, pshape, "uint8"), "uint8", variant)
            check_quantize(rng, fvals(rng, shape, "int32"), s, None, "int8", variant)
        else:
            check_dequantize(rng, qvals(rng, shape, "int8"), s, qvals(rng, pshape, "int8"), variant)
            check_dequantize(rng, qvals(rng, shape, "uint16"), s.astype(np.float16),
                             qvals(rng, pshape, "uint16"), variant)


def test_per_axis_zero_point_only_and_scale_only(host, rng):
    x = fvals(rng, (5, 40), "float32")
    check_quantize(rng, x, np.float32(0.5), qvals(rng, (5, 1), "int8"), "int8", "axis")
    check_quantize(rng, x, scales(rng, (1, 40)), np.int8(-3), "int8", "axis")
    qx = qvals(rng, (5, 40), "uint8")
    check_dequantize(rng, qx, np.float32(0.5), qvals(rng, (5, 1), "uint8"), "axis")
    check_dequantize(rng, qx, scales(rng, (1, 40)), None, "axis")


def _views(rng, dtype, make):
    base = make((6, 10, 12), dtype)
    return [base[:, ::2, 1:], base[::-1], base.transpose(2, 0, 1), base[..., ::-3],
            np.broadcast_to(base[:1], (4, 10, 12)), base[1:5, 3:4, :]]


@pytest.mark.parametrize("wide", [False, True])
def test_strided_views_and_broadcasts(host, rng, monkeypatch, wide):
    if wide:  # force the 64-bit index path on small shapes
        monkeypatch.setattr(ew, "needs_wide", lambda layout: True)
        ew.clear_plan_cache()
    try:
        for x in _views(rng, "float32", lambda s, d: fvals(rng, s, d)):
            s = scales(rng, (1,) + x.shape[1:2] + (1,))
            check_quantize(rng, x, s, qvals(rng, s.shape, "int8"), "int8", "strided")
            check_quantize(rng, x, np.float32(0.1), np.uint8(200), "uint8", None)
        for qx in _views(rng, "int16", lambda s, d: qvals(rng, s, d)):
            check_dequantize(rng, qx, scales(rng, qx.shape[-1:]), None, "strided")
        for big in (poisoned((6, 10, 24), np.int8)[..., ::2], poisoned((12, 10, 6), np.int8).transpose(2, 1, 0)):
            x = fvals(rng, big.shape, "float32")
            check_quantize(rng, x, np.float32(0.3), np.int8(1), "int8", None, out=big)
    finally:
        ew.clear_plan_cache()


@pytest.mark.parametrize("ta,tb,to", [(a, b, o) for a in QTYPES for b in QTYPES for o in QTYPES])
def test_add_every_type(host, rng, ta, tb, to):
    for shape in ((1,), (17,), (1031,), (3, 5, 7)):
        a, b = qvals(rng, shape, ta), qvals(rng, shape, tb)
        params = (np.float32(0.05), np.array([3], ta), np.float32(0.07), np.array([-1 if tb == "int8" else 9], tb),
                  np.array([0.11], np.float32), np.array([5], to))
        want = ref.quantized_add(a, np.asarray(params[0]), params[1], b, np.asarray(params[2]), params[3],
                                 params[4], params[5], np.empty(shape, to))
        for variant in ("contig", "strided", None):
            out = poisoned(shape, to)
            ew.quantized_add(a, params[0], params[1], b, params[2], params[3], params[4], params[5], out,
                             variant=variant)
            np.testing.assert_array_equal(out, want, err_msg=f"add {variant} {shape}")


def test_add_broadcast_and_views(host, rng):
    a = qvals(rng, (4, 1, 9), "uint8")
    b = qvals(rng, (5, 18), "int8")[:, ::2]
    shape = (4, 5, 9)
    p = (np.float32(0.5), np.uint8(128), np.float32(0.25), None, np.float32(0.75), np.int8(0))
    want = ref.quantized_add(a, np.asarray(p[0]), np.asarray(p[1]), b, np.asarray(p[2]), None,
                             np.asarray(p[4]), np.asarray(p[5]), np.empty(shape, np.int8))
    for out in (poisoned(shape, np.int8), poisoned((4, 5, 18), np.int8)[..., ::-2]):
        ew.quantized_add(a, *p[:2], b, *p[2:], out)
        np.testing.assert_array_equal(out, want)


def test_every_launch_of_this_file_ran_on_the_host(host, rng):
    x = fvals(rng, (100,), "float32")
    check_quantize(rng, x, np.float32(0.2), None, "int8", None)
    assert host.calls and all(c[0].startswith("quantize_") for c in host.calls)


def test_out_overlapping_an_input_goes_through_a_temporary(host, rng):
    buf = qvals(rng, (4099,), "uint8")
    a, b = buf[:-1].copy(), buf[1:].copy()
    p = (np.float32(0.5), np.uint8(3), np.float32(0.25), np.uint8(250), np.float32(0.3), np.uint8(7))
    want = ref.quantized_add(a, np.asarray(p[0]), np.asarray(p[1]), b, np.asarray(p[2]), np.asarray(p[3]),
                             np.asarray(p[4]), np.asarray(p[5]), np.empty(a.shape, np.uint8))
    ew.quantized_add(buf[:-1], *p[:2], buf[1:], *p[2:4], *p[4:], buf[1:])  # out = b, shifted over a
    np.testing.assert_array_equal(buf[1:], want)
    x = fvals(rng, (64,), "float32")
    want = ref.quantize_linear(x, np.float32(0.1), None, np.empty(64, np.int8))
    ew.quantize_linear(x, np.float32(0.1), None, x.view(np.int8)[:64])  # out inside x's bytes
    np.testing.assert_array_equal(x.view(np.int8)[:64], want)


# ---- the add table path: the same function as the arithmetic, pair for pair

ADD_TABLE_PARAMS = [  # (a_scale, a_zp, b_scale, b_zp, out_scale, out_zp)
    (0.05, 3, 0.07, -1, 0.11, 5),
    (1.0, 0, 1.0, 0, 1.0, 0),
    (0.0039215686, 127, 3e-3, -128, 0.5, -128),
    (2.0, -128, 1e-30, 127, 1e-39, 100),
    (1e10, 0, -0.25, 5, 3.0, 0),
    (0.5, 7, 0.5, 7, 0.0, 9),      # out_scale 0: +-Inf saturates, 0/0 is NaN -> zero point
    (np.inf, 1, 1.0, 2, 1.0, 3),   # Inf * 0 is NaN for a == a_zp
]


@pytest.mark.parametrize("ta,tb,to", [("int8", "int8", "int8"), ("uint8", "int8", "uint8"),
                                      ("int8", "uint8", "int8"), ("uint8", "uint8", "uint8")])
def test_add_table_matches_arithmetic_on_all_65536_pairs(host, ta, tb, to):
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(ta)
    b = np.tile(np.arange(256, dtype=np.uint8), 256).view(tb)
    for sa, za, sb, zb, so, zo in ADD_TABLE_PARAMS:
        za, zb, zo = (np.array([v], t) if np.iinfo(t).min <= v <= np.iinfo(t).max else None
                      for v, t in ((za, ta), (zb, tb), (zo, to)))
        p = (np.float32([sa]), za, np.float32([sb]), zb, np.float32([so]), zo)
        with np.errstate(all="ignore"):
            want = ref.quantized_add(a, p[0], za, b, p[2], zb, p[4], zo, np.empty(65536, to))
        for variant in ("table", "contig"):
            host.forget()
            out = poisoned(65536, to)
            ew.quantized_add(a, *p[:2], b, *p[2:], out, variant=variant)
            np.testing.assert_array_equal(out, want, err_msg=f"{variant} {p}")
            assert any(c[0].startswith(f"add_{variant}<") for c in host.calls)


def test_add_table_with_unaligned_heads_and_tails(host, rng):
    a = qvals(rng, (4099,), "int8")
    b = qvals(rng, (4099,), "uint8")
    p = (np.float32(0.3), np.int8(-7), np.float32(0.2), np.uint8(130), np.float32(0.4), np.int8(2))
    for lo, hi in ((1, 4099), (3, 2000), (0, 17), (5, 6)):
        want = ref.quantized_add(a[lo:hi], *map(np.asarray, p[:2]), b[lo:hi], *map(np.asarray, p[2:]),
                                 np.empty(hi - lo, np.int8))
        out = poisoned(hi - lo + 1, np.int8)[1:]
        ew.quantized_add(a[lo:hi], *p[:2], b[lo:hi], *p[2:], out, variant="table")
        np.testing.assert_array_equal(out, want)


def test_add_path_rule():
    n = ew.TABLE_MIN_ELEMENTS
    assert ew.add_path("contig", n) == "table"
    assert ew.add_path("contig", n - 1) == "contig"
    assert ew.add_path("strided", 10 * n) == "strided"
    assert ew.add_path("contig", 10, "table") == "table"
    assert ew.add_path("contig", 10 * n, "contig") == "contig"
    with pytest.raises(ValueError):
        ew.quantize_linear(np.zeros(4, np.float32), np.float32(1), None, np.zeros(4, np.int8),
                           variant="table")


# quantize_contig divides by a per-tensor scale with 2**-60 <= |s| <= 2**60 through
# a reciprocal and two FMA corrections (common.cuh, reciprocal_div), outside that
# range with div.rn.f32. Scales on both sides of the range edges, reciprocals with
# the longest and shortest significands, a negative scale, a float16 subnormal.
RECIPROCAL_SCALES = np.array(
    [2.0**-60, 2.0**60, np.nextafter(np.float32(2.0**-60), np.float32(0)),
     np.nextafter(np.float32(2.0**60), np.float32(np.inf)), 1.0, 0.039215686, 1 / 3,
     np.nextafter(np.float32(2), np.float32(0)), 2.0**-24, -0.37, 3e-3, 1e-30, 7.5e22,
     1e-40, 3e38, 0.0, np.inf, np.nan], np.float32)


def near_ties(scale, k):
    """float32 x whose quotient x / scale lies on or beside the halfway points
    k + 0.5, where one ulp of the quotient changes the rounded integer."""
    m = np.float32(k) + np.float32(0.5)
    x = (m.astype(np.float64) * np.float64(scale)).astype(np.float32)
    steps = np.arange(-3, 4, dtype=np.int32)
    return (x.view(np.int32)[:, None] + steps).reshape(-1).view(np.float32)


@pytest.mark.parametrize("q", QTYPES)
def test_quantize_reciprocal_path_on_every_float16_and_beside_every_tie(host, rng, q):
    every16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    k = np.arange(-300, 300)
    zp = np.array([-1 if q == "int8" else 130], q)
    for s in RECIPROCAL_SCALES:
        for x in (every16, every16.astype(np.float32), near_ties(s, k),
                  (rng.standard_normal(4099) * 300 * s).astype(np.float32)):
            with np.errstate(all="ignore"):
                check_quantize(rng, x, np.array([s], np.float32), zp, q, "contig")
    assert any(c[0].startswith(f"quantize_contig<") for c in host.calls)
