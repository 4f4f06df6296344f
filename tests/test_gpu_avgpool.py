"""QUANTIZED_LINEAR_AVERAGE_POOLING on the GPU, bit for bit against dmlq.reference.

Every variant (forced through ``variant=``, where it applies) and the automatic
choice, on random shapes (batch 1..4, channels 1..67, spatial 1..67), the
docs/semantics.md pooling edge cases, all four signedness combinations, per-tensor
and per-channel parameters (which also switches the tile kernels' table on and
off), omitted zero points, extreme scales, non-contiguous and broadcast inputs,
poisoned and strided outputs, a non-default stream, and tensors past 2**31
elements.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import CurrentCupy, on_stand_in, poison, skip_past_2_31_on_the_stand_in
from dmlq import reference
from dmlq.desc import pool_output_accepted, pool_output_size
from dmlq.gpu import avgpool as ap
from kernel_cases import pool_params

pytestmark = pytest.mark.gpu
pytest.importorskip("cupy")
cupy = CurrentCupy()  # the stand-in in a stand-in twin

QTYPES = ("int8", "uint8")
LAYOUTS = ("contig", "offset", "wstride", "rows", "nhwc", "flipped", "bcast", "nhwc_offset", "nhwc_bcast")
CL_LAYOUTS = ("nhwc", "nhwc_offset", "nhwc_bcast")


def on_device(values, layout):
    """values (NumPy) as a CuPy array with the given memory layout."""
    shape, dt = values.shape, values.dtype
    if layout == "contig":
        return cupy.asarray(values)
    if layout == "bcast":  # stride-0 batch: every batch entry holds values[0]
        return cupy.broadcast_to(cupy.asarray(values[:1]), shape)
    if layout == "offset":  # contiguous, starting 3 bytes into an allocation
        x = cupy.zeros(values.size + 3, dt)[3:].reshape(shape)
    elif layout == "wstride":
        x = cupy.zeros(shape[:-1] + (2 * shape[-1],), dt)[..., ::2]
    elif layout == "rows":  # W stride 1, padded rows, odd start
        sp = shape[:-1] + (shape[-1] + 5,)
        x = cupy.zeros(math.prod(sp) + 1, dt)[1:].reshape(sp)[..., :shape[-1]]
    elif layout in ("nhwc", "nhwc_offset", "nhwc_bcast"):  # channels_last; 4 bytes in; stride-0 batch
        perm = (0, *range(2, len(shape)), 1)
        cl = tuple(shape[i] for i in perm)
        if layout == "nhwc_bcast":
            one = cupy.asarray(np.ascontiguousarray(values[:1].transpose(perm)))
            return cupy.broadcast_to(one, cl).transpose(tuple(np.argsort(perm)))
        skip = 4 if layout == "nhwc_offset" else 0
        x = cupy.zeros(values.size + skip, dt)[skip:].reshape(cl).transpose(tuple(np.argsort(perm)))
    elif layout == "flipped":
        x = cupy.zeros(shape, dt)[..., ::-1, :]
    else:
        raise ValueError(layout)
    x[...] = cupy.asarray(values)
    return x


def host_values(x):
    return cupy.asnumpy(cupy.ascontiguousarray(x))


def cl_vec(variant):
    """The channels a thread of a channels_last variant takes (None: not such a variant)."""
    if variant in ap.CL_STRIP_CONFIGS:
        return ap.CL_STRIP_CONFIGS[variant][0]
    return ap.CL_CONFIGS.get(variant) or ap.CL_GLOBAL_CONFIGS.get(variant)


def element_strides(shape, layout):
    probe = on_device(np.zeros(shape, np.uint8), layout)
    return tuple(probe.strides)


def layout_address(shape, layout):
    """The address alignment (mod 16) on_device's layout gives x (the channels_last rule reads it)."""
    return on_device(np.zeros(shape, np.uint8), layout).data.ptr % 16


def whole_image_expected(x, xs, xzp, os_, ozp, odt):
    """docs/semantics.md for one window covering the whole image from its origin, with one
    sum per plane: the reference's loop over taps is far too slow for large images."""
    n, c = x.shape[:2]
    vol = math.prod(x.shape[2:])

    def per_channel(v):
        return None if v is None else np.asarray(v).reshape(1, -1)

    s = x.reshape(n, c, -1).astype(np.int64).sum(-1)
    if xzp is not None:
        s = s - vol * per_channel(xzp).astype(np.int64)
    with np.errstate(all="ignore"):
        v = np.divide(np.multiply(s.astype(np.float32), per_channel(xs), dtype=np.float32), np.float32(vol),
                      dtype=np.float32)
    res = reference.requantize(v, per_channel(os_), per_channel(ozp), np.dtype(odt))
    return np.asarray(res, odt).reshape((n, c) + (1,) * (x.ndim - 2))


def check(rng, x_shape, window, strides, start, end, dil, include, ceil, xdt, odt, *, pc=(False,) * 4,
          omit=(False, False), layout="contig", out_strided=False, variant=None, special=False, out_sizes=None,
          values=None, out_cl=None):
    """Run one problem on the GPU and compare with the reference; returns the variant used
    (None where the output would be empty: a window larger than the padded input). out_cl:
    None, or the byte offset of a channels_last out in its buffer."""
    if cl_vec(variant) and "nhwc" not in layout:  # channels_last
        vec = cl_vec(variant)
        x_shape = (x_shape[0], vec * -(-x_shape[1] // vec)) + tuple(x_shape[2:])
        layout = "nhwc"
    nd = len(x_shape) - 2
    if out_sizes is None:
        out_sizes = tuple(pool_output_size(x_shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])
                          [1 if ceil else 0] for i in range(nd))
    if min(out_sizes) <= 0:
        return None
    out_shape = tuple(x_shape[:2]) + tuple(out_sizes)
    xdt, odt = np.dtype(xdt), np.dtype(odt)
    if values is None:
        info = np.iinfo(xdt)
        values = rng.integers(info.min, info.max + 1, x_shape).astype(xdt)
    x = on_device(values, layout)
    xs, xzp, os_, ozp = pool_params(rng, x_shape[1], xdt, odt, pc, omit, special)
    whole = (tuple(window) == tuple(x_shape[2:]) and not any(start) and set(out_sizes) == {1}
             and math.prod(window) > 4096)
    if whole:
        want = whole_image_expected(host_values(x), xs, xzp, os_, ozp, odt)
    else:
        want = np.empty(out_shape, odt)
        reference.quantized_avg_pool(host_values(x), xs, xzp, os_, ozp, want, window, strides, start, end, dil,
                                     include)

    dev = [None if v is None else cupy.asarray(v) for v in (xs, xzp, os_, ozp)]
    if out_cl is not None:
        perm = (0, *range(2, len(out_shape)), 1)
        big = poison(cupy.empty(math.prod(out_shape) + out_cl, odt))
        out = big[out_cl:].reshape(tuple(out_shape[i] for i in perm)).transpose(tuple(np.argsort(perm)))
    elif out_strided:
        big = poison(cupy.empty(out_shape[:-1] + (2 * out_shape[-1] + 1,), odt))
        out = big[..., 1::2]
    else:
        big = out = poison(cupy.empty(out_shape, odt))
    args = (x.shape, tuple(x.strides), out_shape, window, strides, start, end, dil, include)
    used = variant or ap.select_variant(*args, x_address=x.data.ptr)
    got = ap.quantized_avg_pool(x, *dev, out, window, strides, start, end, dil, include, variant=variant)
    assert got is out
    res = cupy.asnumpy(out)
    if not np.array_equal(res, want):
        bad = np.argwhere(res != want)
        detail = ", ".join(f"{tuple(b)}: got {res[tuple(b)]} want {want[tuple(b)]}" for b in bad[:6])
        raise AssertionError(
            f"{used}: {len(bad)}/{res.size} wrong for x{x_shape} {xdt}->{odt} window {window} strides {strides} "
            f"pads {start}/{end} dil {dil} include={include} out{out_shape} pc={pc} omit={omit} layout={layout} "
            f"special={special}: {detail}")
    if out_cl is not None:
        assert (cupy.asnumpy(big[:out_cl]).view(np.uint8) == 0xA5).all(), "wrote before the output view"
    elif out_strided:
        assert (cupy.asnumpy(big[..., 0::2]).view(np.uint8) == 0xA5).all(), "wrote outside the output view"
    return used


def _n(count: int) -> int:
    """A loop count: ``count`` on a GPU, a tenth on the stand-in (the host runs every thread)."""
    return count if not on_stand_in() else max(1, count // 10)


def random_problem(rng, variant, big=True):
    """Parameters ``variant`` (None: any) runs, as check()'s keyword arguments."""
    for _ in range(1000):
        nd = 3 if rng.random() < 0.25 else 2
        hi = (21 if nd == 3 else 68) if big else (10 if nd == 3 else 30)
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 68 if big else 9))) + tuple(
            int(v) for v in rng.integers(1, hi, nd))
        window = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        start = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        end = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        dil = tuple(int(v) for v in rng.integers(1, 3, nd)) if rng.random() < 0.3 else (1,) * nd
        layout = str(rng.choice(("contig", "contig") + LAYOUTS))
        ceil = bool(rng.random() < 0.5)
        if variant in ap.TILE_CONFIGS:
            kw, sw, _ = ap.TILE_CONFIGS[variant]
            window, strides, dil = window[:-1] + (kw,), strides[:-1] + (sw,), dil[:-1] + (1,)
            layout = str(rng.choice(["contig", "offset", "rows", "flipped", "bcast"]))
        elif variant in ap.STRIP_CONFIGS:
            kh, kw, _ = ap.STRIP_CONFIGS[variant]
            window, strides, dil = window[:-2] + (kh, kw), strides[:-2] + (1, 1), dil[:-2] + (1, 1)
            layout = str(rng.choice(["contig", "offset", "rows", "flipped", "bcast"]))
        elif cl_vec(variant) or (variant is None and rng.random() < 0.15):  # channels_last
            vec = cl_vec(variant) or 4
            shape = (shape[0], vec * int(rng.integers(1, 5))) + shape[2:]
            layout = str(rng.choice(CL_LAYOUTS if vec != 16 else ("nhwc", "nhwc_bcast")))
            if variant in ap.CL_STRIP_CONFIGS:  # an H window of 3 at H stride 1
                window, strides, dil = (window[:-2] + (3, window[-1]), strides[:-2] + (1, strides[-1]),
                                        dil[:-2] + (1, dil[-1]))
            elif variant in ap.CL_GLOBAL_CONFIGS or (variant is None and rng.random() < 0.2):  # the whole image
                window, dil, start, ceil = shape[2:], (1,) * nd, (0,) * nd, False
                strides = tuple(max(w, e + 1) for w, e in zip(window, end))
        elif variant in ap.GLOBAL_GROUPS or (variant is None and rng.random() < 0.1):
            window, dil, start, ceil = shape[2:], (1,) * nd, (0,) * nd, False
            strides = tuple(max(w, e + 1) for w, e in zip(window, end))
            layout = str(rng.choice(["contig", "offset", "bcast"]))
        if any(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[0] <= 0
               for i in range(nd)):
            continue
        include = bool(rng.random() < 0.5)
        out_sp = tuple(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])
                       [1 if ceil else 0] for i in range(nd))
        args = (shape, element_strides(shape, layout), shape[:2] + out_sp, window, strides, start, end, dil,
                include)
        if variant is not None and not ap.applicable(variant, *args):
            continue
        return dict(x_shape=shape, window=window, strides=strides, start=start, end=end, dil=dil, include=include,
                    ceil=ceil, xdt=str(rng.choice(QTYPES)), odt=str(rng.choice(QTYPES)),
                    pc=tuple(bool(v) for v in rng.random(4) < 0.5) if rng.random() < 0.5 else (False,) * 4,
                    omit=tuple(bool(v) for v in rng.random(2) < 0.25), layout=layout,
                    out_strided=bool(rng.random() < 0.25), variant=variant,
                    out_cl=None if "nhwc" not in layout or rng.random() < 0.3 else int(rng.choice([0, 0, 4, 1])))
    raise AssertionError(f"no problem found for {variant}")


# ------------------------------------------------------------------ random problems

@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_random_problems(rng, variant):
    for _ in range(_n(30)):
        p = random_problem(rng, variant)
        used = check(rng, **p)
        assert variant is None or used == variant


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_random_small_problems(rng, variant):
    for _ in range(_n(60)):
        check(rng, **random_problem(rng, variant, big=False))


# --------------------------------------- pooling edge cases (docs/semantics.md, quantized_avg_pool)

EDGE_VARIANTS = ["general", "tile_k2s2", "tile_k3s1", "tile_k3s2", None, *ap.CL_CONFIGS]


def w_params(variant):
    """The W window/stride a variant needs (general and auto: 2/2)."""
    kw, sw, _ = ap.TILE_CONFIGS.get(variant, (2, 2, 0))
    return kw, sw


@pytest.mark.parametrize("variant", EDGE_VARIANTS)
@pytest.mark.parametrize("include", [False, True])
def test_windows_entirely_in_padding(rng, variant, include):
    kw, sw = w_params(variant)
    for xdt in QTYPES:
        for odt in QTYPES:
            kw_args = dict(xdt=xdt, odt=odt, include=include, variant=variant)
            check(rng, (2, 3, 2, 2), (3, kw), (1, sw), (3, 3), (3, 3), (1, 1), ceil=True, **kw_args)
            check(rng, (1, 2, 1, 1), (2, kw), (1, sw), (2, kw), (2, kw), (1, 1), ceil=False, **kw_args)
            check(rng, (2, 5, 3, 4), (4, kw), (2, sw), (4, kw + 1), (4, kw + 2), (1, 1), ceil=True,
                  pc=(True,) * 4, **kw_args)


@pytest.mark.parametrize("variant", EDGE_VARIANTS)
def test_include_padding_with_end_padding(rng, variant):
    kw, sw = w_params(variant)
    for shape in ((2, 3, 7, 9), (1, 4, 13, 40), (3, 2, 1, 5)):
        for pads in (((0, 0), (2, 1)), ((1, 1), (0, 2)), ((2, 0), (2, 2))):
            for ceil in (False, True):
                check(rng, shape, (3, kw), (2, sw), pads[0], pads[1], (1, 1), True, ceil,
                      str(rng.choice(QTYPES)), str(rng.choice(QTYPES)), pc=(False, True, False, True),
                      variant=variant)


@pytest.mark.parametrize("variant", EDGE_VARIANTS)
def test_ceil_mode_every_accepted_size(rng, variant):
    kw, sw = w_params(variant)
    for shape in ((2, 3, 10, 11), (1, 5, 7, 30), (2, 2, 8, 16)):
        for start, end in (((0, 0), (0, 0)), ((1, 1), (0, 1)), ((1, 0), (1, 1))):
            window, strides = (3, kw), (2, sw)
            sizes = [pool_output_accepted(shape[2 + i], window[i], strides[i], start[i], end[i], 1)
                     for i in range(2)]
            for oh in sizes[0]:
                for ow in sizes[1]:
                    for include in (False, True):
                        check(rng, shape, window, strides, start, end, (1, 1), include, False,
                              str(rng.choice(QTYPES)), str(rng.choice(QTYPES)), variant=variant,
                              out_sizes=(oh, ow))


@pytest.mark.parametrize("variant", EDGE_VARIANTS)
def test_dilation_with_padding(rng, variant):
    kw, sw = w_params(variant)
    dw = 2 if variant in ("general", None) else 1
    for shape in ((2, 3, 11, 13), (1, 6, 20, 33)):
        for include in (False, True):
            for ceil in (False, True):
                check(rng, shape, (3, kw), (2, sw), (2, 1), (3, 2), (3, dw), include, ceil,
                      str(rng.choice(QTYPES)), str(rng.choice(QTYPES)), variant=variant)
                check(rng, shape + (7,), (2, 3, kw), (1, 2, sw), (1, 2, 1), (2, 0, 1), (4, 2, dw), include, ceil,
                      str(rng.choice(QTYPES)), str(rng.choice(QTYPES)), variant=variant)


@pytest.mark.parametrize("include", [False, True])
def test_strip_edges(rng, include):
    """strip_k3s1 (3x3 at H and W stride 1): windows in the padding, heights across strips (a
    partial last strip; 16, 8 or 4 rows a strip by the launcher's rule, the whole height where
    it is less), widths across its 16-output groups, 3-D windows, every layout it takes."""
    for xdt in QTYPES:
        for odt in QTYPES:
            for shape, pads, ceil in (((2, 3, 2, 2), ((3, 3), (3, 3)), True), ((2, 5, 37, 13), ((1, 1), (1, 1)), False),
                                      ((1, 3, 70, 64), ((1, 1), (1, 1)), False), ((1, 3, 19, 50), ((0, 2), (2, 0)), True),
                                      ((2, 3, 9, 1), ((1, 1), (1, 1)), True), ((3, 7, 19, 17), ((1, 1), (0, 1)), True)):
                check(rng, shape, (3, 3), (1, 1), pads[0], pads[1], (1, 1), include, ceil, xdt, odt,
                      pc=tuple(bool(v) for v in rng.random(4) < 0.3), variant="strip_k3s1",
                      layout=str(rng.choice(["contig", "offset", "rows", "flipped", "bcast"])))
            check(rng, (2, 3, 5, 6, 21), (2, 3, 3), (2, 1, 1), (1, 1, 1), (0, 1, 1), (2, 1, 1), include, True, xdt,
                  odt, variant="strip_k3s1")
            check(rng, (1, 2, 3, 18, 9), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), include, False, xdt,
                  odt, pc=(False, True, False, False), variant="strip_k3s1")


def test_whole_image_oracle_matches_the_reference(rng):
    for shape in ((2, 3, 5, 7), (1, 4, 3, 4, 6)):
        for xdt, odt in (("int8", "uint8"), ("uint8", "int8")):
            x = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, shape).astype(xdt)
            xs, os_ = (rng.uniform(0.002, 0.2, shape[1]).astype(np.float32) for _ in range(2))
            xzp = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, 1).astype(xdt)
            ozp = rng.integers(np.iinfo(odt).min, np.iinfo(odt).max + 1, shape[1]).astype(odt)
            nd = len(shape) - 2
            want = np.empty(shape[:2] + (1,) * nd, odt)
            reference.quantized_avg_pool(x, xs, xzp, os_, ozp, want, shape[2:], (1,) * nd, (0,) * nd, (0,) * nd,
                                         (1,) * nd, False)
            np.testing.assert_array_equal(whole_image_expected(x, xs, xzp, os_, ozp, odt), want)


@pytest.mark.parametrize("variant", ["global_warp", "global_block", "general", None])
def test_window_is_the_whole_image(rng, variant):
    shapes = ((1, 1, 1, 1), (2, 3, 1, 15), (2, 5, 4, 4), (1, 3, 17, 33), (3, 67, 41, 43), (2, 3, 2, 9, 37),
              (1, 2, 64, 64), (2, 3, 224, 224), (1, 2, 301, 299), (4, 2, 9, 17, 20))
    for shape in shapes if not on_stand_in() else [s for s in shapes if np.prod(s) < 5000]:
        nd = len(shape) - 2
        for xdt, odt in (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")):
            for layout in ("contig", "offset", "bcast"):
                for end in ((0,) * nd, (1,) * nd):
                    check(rng, shape, shape[2:], tuple(s + 1 for s in shape[2:]), (0,) * nd, end, (1,) * nd,
                          bool(rng.integers(2)), False, xdt, odt, pc=(True, True, False, True), layout=layout,
                          variant=variant, omit=(bool(rng.integers(2)), bool(rng.integers(2))))


def test_whole_image_through_the_tile_kernels(rng):
    check(rng, (2, 3, 5, 2), (5, 2), (1, 2), (0, 0), (0, 0), (1, 1), False, False, "uint8", "int8",
          variant="tile_k2s2")
    check(rng, (2, 3, 4, 3), (4, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, False, "int8", "uint8",
          variant="tile_k3s1")


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_per_channel_parameters(rng, variant):
    for mask in range(16):
        p = random_problem(rng, variant, big=False)
        p["pc"] = tuple(bool(mask >> i & 1) for i in range(4))
        check(rng, **p)


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
@pytest.mark.parametrize("xdt", QTYPES)
@pytest.mark.parametrize("odt", QTYPES)
def test_signedness_and_omitted_zero_points(rng, variant, xdt, odt):
    for omit in ((False, False), (True, False), (False, True), (True, True)):
        for pc in ((False,) * 4, (True,) * 4):
            p = random_problem(rng, variant, big=False)
            p.update(xdt=xdt, odt=odt, omit=omit, pc=pc)
            check(rng, **p)


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_three_d(rng, variant):
    n = 0
    while n < 15:
        p = random_problem(rng, variant)
        if len(p["x_shape"]) == 5:
            check(rng, **p)
            n += 1


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_extreme_scales(rng, variant):
    for _ in range(_n(20)):
        p = random_problem(rng, variant, big=False)
        check(rng, special=True, **p)


@pytest.mark.parametrize("variant", ["general", "tile_k2s2", "tile_k3s1", "tile_k3s2", "global_block",
                                     "channels_last_global_16"])
def test_extreme_values_and_window_sums(rng, variant):
    """Constant qmin/qmax inputs against extreme zero points: the largest sums, both table sizes."""
    kw, sw = w_params(variant)
    cases = [((1, 2, 40, 40), (32, kw), (1, sw)),   # 32*kw taps: the table for kw = 2, direct for kw = 3
             ((1, 2, 40, 40), (33, kw), (1, sw)),   # past the table size
             ((2, 2, 6, 9, 9), (3, 3, kw), (1, 1, sw))]
    if variant == "global_block":
        cases = [((2, 3, 200, 300), (200, 300), (1, 1)), ((1, 2, 5, 6, 700), (5, 6, 700), (1, 1, 1))]
    elif variant == "channels_last_global_16":  # (check() makes x channels_last, C a multiple of 16)
        cases = [((2, 16, 200, 300), (200, 300), (1, 1)), ((1, 32, 5, 6, 70), (5, 6, 70), (1, 1, 1))]
    for shape, window, strides in cases:
        nd = len(shape) - 2
        for xdt in QTYPES:
            info = np.iinfo(xdt)
            for fill in (info.min, info.max):
                values = np.full(shape, fill, xdt)
                for odt in QTYPES:
                    check(rng, shape, window, strides, (0,) * nd, (0,) * nd, (1,) * nd, False, False, xdt, odt,
                          variant=variant, values=values)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_input_layouts(rng, layout, variant):
    done = 0
    for _ in range(200):
        p = random_problem(rng, variant, big=False)
        p["layout"] = layout
        shape = p["x_shape"]
        out_sp = tuple(pool_output_size(shape[2 + i], p["window"][i], p["strides"][i], p["start"][i], p["end"][i],
                                        p["dil"][i])[1 if p["ceil"] else 0] for i in range(len(shape) - 2))
        args = (shape, element_strides(shape, layout), shape[:2] + out_sp, p["window"], p["strides"], p["start"],
                p["end"], p["dil"], p["include"])
        if variant is not None and not ap.applicable(variant, *args, x_address=layout_address(shape, layout)):
            continue
        check(rng, **p)
        done += 1
        if done == _n(6):
            break


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_strided_poisoned_output(rng, variant):
    for _ in range(_n(8)):
        p = random_problem(rng, variant, big=False)
        p["out_strided"] = True
        check(rng, **p)


def test_rejects_a_variant_that_does_not_apply():
    x = cupy.zeros((1, 2, 8, 8), cupy.uint8)
    out = cupy.zeros((1, 2, 4, 4), cupy.uint8)
    one = cupy.ones(1, cupy.float32)
    with pytest.raises(ValueError):
        ap.quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False,
                              variant="tile_k3s1")


def test_size_zero_outputs_return_at_once():
    one = cupy.ones(1, cupy.float32)
    for xs, os_ in (((0, 3, 4, 4), (0, 3, 2, 2)), ((2, 0, 4, 4), (2, 0, 2, 2)), ((2, 3, 0, 4, 4), (2, 3, 0, 2, 2))):
        x = cupy.zeros(xs, cupy.int8)
        out = cupy.zeros(os_, cupy.int8)
        nd = len(xs) - 2
        assert ap.quantized_avg_pool(x, one, None, one, None, out, (2,) * nd, (2,) * nd, (0,) * nd, (0,) * nd,
                                     (1,) * nd, False) is out


# ------------------------------------------------------------------ streams

_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
"""


_IDLE = r"""
extern "C" __global__ void spin(long long cycles) {}
"""


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_runs_on_the_current_stream_without_syncing(rng, variant):
    # On the stand-in, work on a created stream waits until something orders it
    # (tests/cupy_stand_in/_cuda.py): any kernel keeps the stream busy (the host
    # harness has no clock64).
    code, cycles = (_IDLE, 0) if on_stand_in() else (_SPIN, 2_000_000_000)  # a GPU: about a second
    p = random_problem(rng, variant, big=False)
    p["layout"] = "contig"
    check(rng, **p)  # compiles and caches everything first
    shape = p["x_shape"]
    nd = len(shape) - 2
    out_sp = tuple(pool_output_size(shape[2 + i], p["window"][i], p["strides"][i], p["start"][i], p["end"][i],
                                    p["dil"][i])[1 if p["ceil"] else 0] for i in range(nd))
    xdt, odt = np.dtype(p["xdt"]), np.dtype(p["odt"])
    old = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, shape).astype(xdt)
    new = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, shape).astype(xdt)
    xs, os_ = (rng.uniform(0.002, 0.2, shape[1]).astype(np.float32) for _ in range(2))
    ozp = rng.integers(np.iinfo(odt).min, np.iinfo(odt).max + 1, 1).astype(odt)
    want = np.empty(shape[:2] + out_sp, odt)
    reference.quantized_avg_pool(new, xs, None, os_, ozp, want, p["window"], p["strides"], p["start"], p["end"],
                                 p["dil"], p["include"])
    x = on_device(old, "nhwc") if cl_vec(variant) else cupy.asarray(old)
    x_new = cupy.asarray(new)
    d_xs, d_os, d_ozp = cupy.asarray(xs), cupy.asarray(os_), cupy.asarray(ozp)
    out = poison(cupy.empty(want.shape, odt))
    cupy.cuda.Device().synchronize()
    spin = cupy.RawKernel(code, "spin")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        spin((1,), (1,), (np.int64(cycles),))
        x[...] = x_new  # lands only after the spin; a kernel on another stream would see `old`
        ap.quantized_avg_pool(x, d_xs, None, d_os, d_ozp, out, p["window"], p["strides"], p["start"], p["end"],
                              p["dil"], p["include"], variant=variant)
        busy = not stream.done
    stream.synchronize()
    assert busy, "quantized_avg_pool waited for the stream (a synchronization inside?)"
    np.testing.assert_array_equal(cupy.asnumpy(out), want)


# ------------------------------------------------------------------ 64-bit indexing

def _big_random(shape, dtype, seed):
    """A tensor of > 2**31 elements filled from a random period that is not a power of two."""
    x = cupy.empty(shape, dtype)
    flat = x.reshape(-1)
    period = cupy.asarray(np.random.default_rng(seed).integers(0, 256, 1_000_003).astype(np.uint8).view(dtype))
    for i in range(0, flat.size, period.size):
        chunk = flat[i:i + period.size]
        chunk[...] = period[:chunk.size]
    return x


@pytest.mark.parametrize("variant", ["tile_k2s2", "general", None])
def test_past_2_31_elements(variant):
    skip_past_2_31_on_the_stand_in()
    shape = (1, 2, 32768, 32776)  # 2**31 + 2**19 elements
    x = _big_random(shape, np.uint8, 5)
    out = poison(cupy.empty((1, 2, 16384, 16388), np.uint8))
    xs = cupy.asarray(np.array([0.03, 0.05], np.float32))
    os_ = cupy.asarray(np.array([0.04], np.float32))
    xzp = cupy.asarray(np.array([3, 200], np.uint8))
    ozp = cupy.asarray(np.array([100], np.uint8))
    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False,
                          variant=variant)
    tail = cupy.asnumpy(x[:, 1:, -6:, :])
    want = np.empty((1, 1, 3, 16388), np.uint8)
    reference.quantized_avg_pool(tail, np.array([0.05], np.float32), np.array([200], np.uint8),
                                 np.array([0.04], np.float32), np.array([100], np.uint8), want, (2, 2), (2, 2),
                                 (0, 0), (0, 0), (1, 1), False)
    np.testing.assert_array_equal(cupy.asnumpy(out[:, 1:, -3:, :]), want)
    head = cupy.asnumpy(x[:, :1, :6, :])
    want = np.empty((1, 1, 3, 16388), np.uint8)
    reference.quantized_avg_pool(head, np.array([0.03], np.float32), np.array([3], np.uint8),
                                 np.array([0.04], np.float32), np.array([100], np.uint8), want, (2, 2), (2, 2),
                                 (0, 0), (0, 0), (1, 1), False)
    np.testing.assert_array_equal(cupy.asnumpy(out[:, :1, :3, :]), want)


@pytest.mark.parametrize("variant", ["global_warp", "global_block"])
def test_global_past_2_31_elements(variant):
    skip_past_2_31_on_the_stand_in()
    shape = (64, 1, 4096, 8193)  # 2**31 + 2**18 elements, planes of 2**25 bytes
    x = _big_random(shape, np.int8, 6)
    out = poison(cupy.empty((64, 1, 1, 1), np.int8))
    xs, xzp, os_ = np.array([0.01], np.float32), np.array([-7], np.int8), np.array([0.00125], np.float32)
    ap.quantized_avg_pool(x, cupy.asarray(xs), cupy.asarray(xzp), cupy.asarray(os_), None, out, (4096, 8193),
                          (4096, 8193), (0, 0), (0, 0), (1, 1), False, variant=variant)
    for planes in (slice(0, 2), slice(62, 64)):
        want = whole_image_expected(cupy.asnumpy(x[planes]), xs, xzp, os_, None, np.int8)
        np.testing.assert_array_equal(cupy.asnumpy(out[planes]), want)
