"""Average-pooling kernels without a GPU:

- select_variant / applicable for every class of problem;
- the magic-number division the kernels use;
- every name in KERNELS compiles through NVRTC (sm_90; sm_80 in tests/test_nvrtc.py) with an empty log,
  IEEE (non-.ftz) float division/multiplication and no local-memory arrays;
- the kernels themselves, run on the host: cuda/avgpool.cu and avgpool_cl.cu are compiled with g++
  against a small CUDA execution model (blocks in turn, threads as fibers so
  __syncthreads and warp shuffles work), driven through the real
  quantized_avg_pool launcher with a stand-in for CuPy that checks every launch
  argument's size against the kernel's C signature, and compared bit for bit with
  dmlq.reference. Inputs end (or start) at an inaccessible page, so a read past
  the tensor crashes. The GPU tests (test_gpu_avgpool.py) check the real thing.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import re
import subprocess
import sys

import numpy as np
import pytest

from dmlq import reference
from dmlq.desc import pool_output_size
from dmlq.gpu import avgpool as ap
from dmlq.gpu.plan import Memo, recording
from kernel_cases import pool_params

ARGS_2X2 = ((1, 64, 56, 56), (200704, 3136, 56, 1), (1, 64, 28, 28), (2, 2), (2, 2), (0, 0), (0, 0),
            (1, 1), False)


def c_strides(shape):
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def problem(x_shape, window, strides=None, start=None, end=None, dil=None, include=False, ceil=False,
            x_strides=None):
    """select_variant's arguments for a pooling problem (output sizes from pool_output_size)."""
    nd = len(x_shape) - 2
    strides = strides or (1,) * nd
    start = start or (0,) * nd
    end = end or (0,) * nd
    dil = dil or (1,) * nd
    out = tuple(x_shape[:2]) + tuple(
        pool_output_size(x_shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[1 if ceil else 0]
        for i in range(nd))
    return (tuple(x_shape), tuple(x_strides or c_strides(x_shape)), out, tuple(window), tuple(strides),
            tuple(start), tuple(end), tuple(dil), include)


def sel(*a, **k):
    """The variant selection's class: a strip variant, the tile that applies (whether or not
    selection takes it on its own: ap.AUTO_TILES), a global variant, or general."""
    args = problem(*a, **k)
    picked = ap.select_variant(*args)
    if picked in ap.STRIP_CONFIGS:
        return picked
    tile = ap.tile_class(*args)
    if tile is not None and picked != "global_warp" and picked != "global_block":
        assert picked == (tile if tile in ap.AUTO_TILES else "general"), (picked, tile)
        return tile
    return picked


def test_selection_takes_only_the_tiles_the_h100_measured_faster():
    """bench/results/gpu-2026-11-26: tile_k2s2 beat the general kernel; tile_k3s1 and
    tile_k3s2 lost to it on their shapes, so selection leaves them to variant=. 3x3 at stride
    1 goes to strip_k3s1 (not yet measured)."""
    assert ap.AUTO_TILES == ("tile_k2s2",)
    assert ap.select_variant(*problem((256, 256, 56, 56), (2, 2), (2, 2))) == "tile_k2s2"
    assert ap.select_variant(*problem((64, 256, 56, 56), (3, 3), (1, 1), (1, 1), (1, 1))) == "strip_k3s1"
    assert ap.select_variant(*problem((64, 64, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1))) == "general"


# ------------------------------------------------------------------ selection

def test_classes():
    assert sel((1, 64, 56, 56), (2, 2), (2, 2)) == "tile_k2s2"
    assert sel((256, 256, 56, 56), (2, 2), (2, 2)) == "tile_k2s2"
    assert sel((64, 256, 56, 56), (3, 3), (1, 1), (1, 1), (1, 1)) == "strip_k3s1"
    assert sel((64, 64, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1)) == "tile_k3s2"
    assert sel((2, 3, 9, 9), (3, 3), (2, 2)) == "tile_k3s2"
    # global average: a warp per plane, a block per plane for few large planes
    assert sel((256, 2048, 7, 7), (7, 7)) == "global_warp"
    assert sel((1, 3, 224, 224), (224, 224)) == "global_block"
    assert sel((4096, 3, 224, 224), (224, 224)) == "global_warp"
    assert sel((2, 8, 4, 6, 5), (4, 6, 5)) == "global_warp"
    # 3-D
    assert sel((8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2)) == "tile_k2s2"
    assert sel((2, 4, 8, 9, 10), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)) == "strip_k3s1"
    assert sel((2, 4, 8, 9, 10), (3, 3, 3), (2, 1, 1), (1, 1, 1), (1, 1, 1), dil=(3, 1, 1)) == "strip_k3s1"
    assert sel((2, 4, 40, 9, 10), (29, 3, 3), (1, 1, 1)) == "tile_k3s1"  # 261 taps: past a 16-bit lane
    assert sel((2, 4, 40, 9, 10), (28, 3, 3), (1, 1, 1)) == "strip_k3s1"  # 252
    # 3x3 at H stride or dilation other than 1: the tile's class
    assert sel((1, 8, 20, 20), (3, 3), (2, 1)) == "tile_k3s1"
    assert sel((1, 8, 20, 20), (4, 3), (1, 1)) == "tile_k3s1"
    # other W windows and strides, W dilation: general
    assert sel((1, 8, 20, 20), (5, 5)) == "general"
    assert sel((1, 8, 20, 20), (2, 2), (1, 1)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (3, 3)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), dil=(2, 2)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), (2, 2), (2, 2), dil=(1, 2)) == "general"
    # only the W window/stride/dilation are compile-time: H and D are free
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), (2, 2), (2, 2), dil=(2, 1)) == "tile_k3s1"
    assert sel((1, 8, 20, 20), (5, 2), (3, 2)) == "tile_k2s2"
    assert sel((1, 8, 6, 20, 20), (1, 4, 3), (2, 1, 1), dil=(3, 2, 1)) == "tile_k3s1"


def test_ceil_mode_and_include_padding_keep_the_class():
    for window, strides, pad, want in (((2, 2), (2, 2), (0, 0), "tile_k2s2"),
                                       ((3, 3), (1, 1), (1, 1), "tile_k3s1"),
                                       ((3, 3), (2, 2), (1, 1), "tile_k3s2")):
        for include in (False, True):
            for ceil in (False, True):
                args = problem((2, 5, 13, 15), window, strides, pad, pad, include=include, ceil=ceil)
                assert ap.tile_class(*args) == want
                auto = "strip_k3s1" if want == "tile_k3s1" else want if want in ap.AUTO_TILES else "general"
                assert ap.select_variant(*args) == auto
    floor_args = problem((2, 5, 13, 15), (2, 2), (2, 2), ceil=False)
    ceil_args = problem((2, 5, 13, 15), (2, 2), (2, 2), ceil=True)
    assert ceil_args[2] == (2, 5, 7, 8) and floor_args[2] == (2, 5, 6, 7)


def test_non_contiguous_inputs():
    shape = (2, 6, 10, 12)
    nhwc = (10 * 12 * 6, 1, 12 * 6, 6)
    assert sel(shape, (2, 2), (2, 2), x_strides=nhwc) == "general"           # W stride C
    assert sel(shape, (2, 2), (2, 2), x_strides=(720, 120, 12, 2)) == "general"  # W stride 2
    assert sel(shape, (2, 2), (2, 2), x_strides=(1000, 150, 15, 1)) == "tile_k2s2"  # padded rows
    assert sel(shape, (2, 2), (2, 2), x_strides=(0, 120, 12, 1)) == "tile_k2s2"     # broadcast batch
    assert sel(shape, (2, 2), (2, 2), x_strides=(720, 120, -12, 1)) == "tile_k2s2"  # reversed rows
    assert sel(shape, (3, 3), (1, 1), x_strides=(720, 120, 12, -1)) == "general"    # reversed columns
    # global needs a contiguous image; a W stride of 1 with padded rows is not one
    assert sel(shape, (10, 12), x_strides=(1000, 150, 15, 1)) == "general"
    assert sel(shape, (10, 12), x_strides=nhwc) == "general"
    assert sel(shape, (10, 12), x_strides=(0, 120, 12, 1)) == "global_warp"
    # a size-1 W makes its stride irrelevant
    assert sel((2, 6, 10, 1), (10, 1), x_strides=(60, 10, 1, 7)) == "global_warp"


def test_global_conditions():
    shape = (2, 6, 10, 12)
    assert sel(shape, (10, 12)) == "global_warp"
    assert sel(shape, (10, 12), (3, 5), end=(2, 4)) == "global_warp"  # end padding cannot add taps
    assert sel(shape, (10, 12), end=(1, 0)) != "global_warp"          # two outputs along H
    assert sel(shape, (10, 12), start=(1, 0), end=(0, 0), strides=(2, 1)) != "global_warp"
    assert sel(shape, (5, 12), (10, 1), dil=(2, 1)) != "global_warp"  # dilated, not the whole image
    assert sel((2, 6, 1, 12), (1, 12), dil=(3, 1)) == "global_warp"   # dilation of a 1-tap window


def test_tile_limits():
    big_rows = (2**16, 2**15, 1, 8)  # N*C*OD*OH = 2**31 rows
    assert sel(big_rows, (1, 2), (1, 2)) == "general"
    ok_rows = (2**15, 2**15, 1, 8)
    assert sel(ok_rows, (1, 2), (1, 2)) == "tile_k2s2"


def test_selected_variant_is_applicable_and_general_always_is():
    rng = np.random.default_rng(0)
    for _ in range(500):
        nd = int(rng.integers(2, 4))
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 70))) + tuple(int(v) for v in rng.integers(1, 40, nd))
        window = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        start = tuple(int(v) for v in rng.integers(0, 3, nd))
        end = tuple(int(v) for v in rng.integers(0, 3, nd))
        dil = tuple(int(v) for v in rng.integers(1, 3, nd))
        if any(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[0] <= 0
               for i in range(nd)):
            continue
        args = problem(shape, window, strides, start, end, dil, bool(rng.integers(2)), bool(rng.integers(2)))
        v = ap.select_variant(*args)
        assert v in ap.VARIANTS
        assert ap.applicable(v, *args)
        assert ap.applicable("general", *args)


def test_unknown_variant():
    with pytest.raises(ValueError):
        ap.applicable("tile_k5s5", *ARGS_2X2)
    with pytest.raises(ValueError):
        ap.kernel_name("nope", "int8", "int8")


# ------------------------------------------------------------------ tables

def test_kernel_table_covers_every_launch():
    names = ap.KERNELS[ap.SOURCE] + ap.KERNELS[ap.CL_SOURCE]
    assert len(names) == len(set(names)) == len(ap.VARIANTS) * 4 + 4  # + channels_last_global's finish
    finish = {ap.finish_name(tx, to) for tx in ("int8", "uint8") for to in ("int8", "uint8")}
    assert finish <= set(ap.KERNELS[ap.CL_SOURCE])
    for v in ap.VARIANTS:  # each name in its variant's file
        assert ap.kernel_name(v, "int8", "uint8") in ap.KERNELS[ap.source_of(v)]
    for v in ap.VARIANTS:
        for tx in ("int8", "uint8"):
            for to in ("int8", "uint8"):
                assert ap.kernel_name(v, tx, to) in names
    assert set(ap.VARIANTS) == {"general", "tile_k2s2", "tile_k3s1", "tile_k3s2", "strip_k3s1", "global_warp",
                                "global_block", "channels_last_16", "channels_last_4", "channels_last_strip_16",
                                "channels_last_strip_4", "channels_last_global_16", "channels_last_global_4"}


def test_import_touches_no_cupy():
    code = "import sys, dmlq.gpu.avgpool as m; m.select_variant(*%r); assert 'cupy' not in sys.modules" % (
        ARGS_2X2,)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_magic_division():
    rng = np.random.default_rng(1)
    divisors = list(range(1, 3000)) + [int(v) for v in rng.integers(1, 2**31 - 1, 3000)] + [
        2**k + e for k in range(1, 31) for e in (-1, 0, 1)] + [2**31 - 1]
    for d in divisors:
        magic, shift = ap._magic(d)
        assert 0 < magic < 2**32 and 0 <= shift <= 31
        ns = np.concatenate([np.arange(0, 300), rng.integers(0, 2**31, 300),
                             np.array([2**31 - 1, 2**31 - 2, d - 1, d, d + 1, 2 * d - 1, 2 * d]) % 2**31,
                             (2**31 - 1) // d * d + np.arange(-2, 2)]).astype(np.uint64) % np.uint64(2**31)
        hi = (ns * np.uint64(magic)) >> np.uint64(32)
        t = (hi + ns) & np.uint64(0xFFFFFFFF)  # 32-bit add in the kernel: must not wrap
        assert (hi + ns < 2**32).all()
        assert ((t >> np.uint64(shift)) == ns // np.uint64(d)).all(), d


# ------------------------------------------------------------------ NVRTC

ARCHS = ("sm_90",)  # the static report's compile; sm_80: tests/test_nvrtc.py
PREBUILT_PTX = [(src, a) for src in ap.KERNELS for a in ARCHS]  # tests/prebuild.py starts them
_compiled: dict = {}


def compiled(source, arch):
    pytest.importorskip("dmlq.gpu.nvrtc")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if (source, arch) not in _compiled:
        import prebuild

        _compiled[source, arch] = prebuild.compiled(source, arch, ap.KERNELS[source])
    return _compiled[source, arch]


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)


def _bodies(ptx):
    matches = list(_ENTRY.finditer(ptx))
    return {m.group(1): ptx[m.end(): nxt.start() if nxt else len(ptx)]
            for m, nxt in zip(matches, matches[1:] + [None])}


@pytest.mark.parametrize("source", list(ap.KERNELS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles_clean(arch, source):
    res = compiled(source, arch)
    names = ap.KERNELS[source]
    assert res.log == "", res.log
    assert set(res.lowered) == set(names)
    bodies = _bodies(res.ptx)
    for name in names:
        body = bodies[res.lowered[name]]
        assert "div.rn.f32" in body and "mul.rn.f32" in body, name
        assert not re.search(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b", body), name
        assert ".local" not in body, f"{name}: a register array went to local memory"
        if name.startswith(("avgpool_tile", "avgpool_global")):
            assert "dp4a" in body, name
        if name.startswith("avgpool_cl<"):  # a 16-byte or 4-byte load a tap, summed in 16-bit lanes
            assert ("ld.global.nc.v4.u32" in body) == name.endswith(", 16>"), name


# ------------------------------------------------------------------ the kernels on the host
# quantized_avg_pool's launcher, unchanged, driving avgpool.cu's own source on
# the host harness (tests/cuda_host); inputs sit against an inaccessible page.

@pytest.fixture
def fake_gpu(host):
    """The launch log [(name, grid, block, shared_mem)] of the host device."""
    fake_gpu.device = host
    return host.calls


_libc = ctypes.CDLL(None)
_maps = []


def fake_gpu_limits():
    dev = fake_gpu.device
    return dev.info().sm_count * dev.resident_blocks("avgpool.cu", "", 0, 0)


def guarded(nbytes, dtype, at_end):
    """nbytes of fresh memory that end (or start) at an inaccessible page."""
    page = mmap.PAGESIZE
    pages = -(-nbytes // page) + 2
    mm = mmap.mmap(-1, pages * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    _maps.append(mm)
    for p in (base, base + (pages - 1) * page):
        assert _libc.mprotect(ctypes.c_void_p(p), page, 0) == 0
    off = (pages - 1) * page - nbytes if at_end else page
    return np.frombuffer(mm, np.uint8, nbytes, off).view(dtype)


def make_input(rng, shape, dtype, layout, at_end, alloc=guarded):
    info = np.iinfo(dtype)
    vals = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    if layout == "bcast":  # stride-0 batch
        one = alloc(math.prod(shape[1:]), dtype, at_end).reshape((1,) + shape[1:])
        one[...] = vals[:1]
        return np.broadcast_to(one, shape)
    if layout == "wstride":
        x = alloc(2 * vals.size, dtype, at_end).reshape(shape[:-1] + (2 * shape[-1],))[..., ::2]
    elif layout == "rows":  # padded rows and a start one byte in
        sp = shape[:-1] + (shape[-1] + 3,)
        x = alloc(math.prod(sp) + 1, dtype, at_end)[1:].reshape(sp)[..., :shape[-1]]
    elif layout.startswith("nhwc"):  # channels_last: plain, stride-0 batch, padded rows, W reversed
        perm = (0, *range(2, len(shape)), 1)
        cl = tuple(shape[i] for i in perm)
        if layout == "nhwc_bcast":
            one = alloc(math.prod(cl[1:]), dtype, at_end).reshape((1,) + cl[1:])
            one.transpose(np.argsort(perm))[...] = vals[:1]
            return np.broadcast_to(one, cl).transpose(np.argsort(perm))
        if layout == "nhwc_rows":  # 16 bytes of padding after each (W, C) row
            rows = cl[:-2] + (cl[-2] * cl[-1] + 16,)
            buf = alloc(math.prod(rows), dtype, at_end).reshape(rows)
            x = np.lib.stride_tricks.as_strided(buf, cl, buf.strides[:-1] + (cl[-1] * buf.itemsize, buf.itemsize))
        else:
            x = alloc(vals.size, dtype, at_end).reshape(cl)
            if layout == "nhwc_flipped":
                x = x[..., ::-1, :]
        x = x.transpose(np.argsort(perm))
    elif layout == "flipped":
        x = alloc(vals.size, dtype, at_end).reshape(shape)[..., ::-1, :]
    else:
        x = alloc(vals.size, dtype, at_end).reshape(shape)
    x[...] = vals
    return x


def channels_last_out(shape, dtype, offset):
    """A poisoned channels_last output ``offset`` bytes into its buffer, and that buffer."""
    perm = (0, *range(2, len(shape)), 1)
    n = math.prod(shape)
    big = np.full(n + offset, 0xA5, np.uint8).view(dtype)
    return big[offset:].reshape(tuple(shape[i] for i in perm)).transpose(np.argsort(perm)), big


def run_case(rng, x_shape, window, strides, start, end, dil, include, ceil, xdt, odt, *, pc=(False,) * 4,
             omit=(False, False), layout="contig", out_strided=False, variant=None, special=False, at_end=True,
             out_cl=None):
    """out_cl: None, or the byte offset of a channels_last out in its buffer."""
    nd = len(x_shape) - 2
    sizes = [pool_output_size(x_shape[2 + i], window[i], strides[i], start[i], end[i], dil[i]) for i in range(nd)]
    out_shape = tuple(x_shape[:2]) + tuple(s[1] if ceil else s[0] for s in sizes)
    xdt, odt = np.dtype(xdt), np.dtype(odt)
    x = make_input(rng, tuple(x_shape), xdt, layout, at_end)
    xs, xzp, os_, ozp = pool_params(rng, x_shape[1], xdt, odt, pc, omit, special)
    want = np.empty(out_shape, odt)
    reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, window, strides, start, end,
                                 dil, include)
    if out_cl is not None:
        out, _ = channels_last_out(out_shape, odt, out_cl)
    elif out_strided:
        big = np.full(out_shape[:-1] + (2 * out_shape[-1] + 1,), 0xA5, np.uint8).view(odt)
        out = big[..., 1::2]
    else:
        big = out = np.full(out_shape, 0xA5, np.uint8).view(odt)
    got = ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, window, strides, start, end, dil, include,
                                variant=variant)
    assert got is out
    if not np.array_equal(out, want):
        bad = np.argwhere(out != want)[:5]
        raise AssertionError(f"{variant} {x_shape} w{window} s{strides} p{start}/{end} d{dil} inc={include} "
                             f"ceil={ceil} {xdt}->{odt} pc={pc} omit={omit} {layout}: "
                             + ", ".join(f"{tuple(b)} got {out[tuple(b)]} want {want[tuple(b)]}" for b in bad))
    if out_strided:
        assert (big[..., 0::2].view(np.uint8) == 0xA5).all(), "wrote outside the output view"


def random_problem(rng, variant):
    """Random parameters that ``variant`` (None: any) runs; returns run_case's arguments."""
    for _ in range(1000):
        nd = 3 if rng.random() < 0.3 else 2
        hi = 14 if nd == 3 else 45
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 9))) + tuple(int(v) for v in rng.integers(1, hi, nd))
        window = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        start = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        end = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        dil = tuple(int(v) for v in rng.integers(1, 3, nd)) if rng.random() < 0.3 else (1,) * nd
        layout = str(rng.choice(["contig", "contig", "wstride", "rows", "nhwc", "flipped", "bcast"]))
        if variant in ap.TILE_CONFIGS:
            kw, sw, _ = ap.TILE_CONFIGS[variant]
            window, strides, dil = window[:-1] + (kw,), strides[:-1] + (sw,), dil[:-1] + (1,)
            layout = str(rng.choice(["contig", "rows", "flipped", "bcast"]))
        elif variant in ap.STRIP_CONFIGS:
            kh, kw, _ = ap.STRIP_CONFIGS[variant]
            window, strides, dil = window[:-2] + (kh, kw), strides[:-2] + (1, 1), dil[:-2] + (1, 1)
            layout = str(rng.choice(["contig", "rows", "flipped", "bcast"]))
        elif variant in ap.CL_VARIANTS:  # channels_last, C a multiple of the vector
            vec = (ap.CL_STRIP_CONFIGS[variant][0] if variant in ap.CL_STRIP_CONFIGS
                   else ap.CL_CONFIGS.get(variant) or ap.CL_GLOBAL_CONFIGS[variant])
            shape = (shape[0], vec * int(rng.integers(1, 4))) + shape[2:]
            layout = str(rng.choice(["nhwc", "nhwc_bcast", "nhwc_rows", "nhwc_flipped"]))
            if variant in ap.CL_STRIP_CONFIGS:
                kh = ap.CL_STRIP_CONFIGS[variant][1]
                window, strides, dil = window[:-2] + (kh, window[-1]), strides[:-2] + (1, strides[-1]), \
                    dil[:-2] + (1, dil[-1])
            elif variant in ap.CL_GLOBAL_CONFIGS:  # the whole image
                window, dil, start = shape[2:], (1,) * nd, (0,) * nd
                strides = tuple(max(w, e + 1) for w, e in zip(window, end))
        elif variant in ap.GLOBAL_GROUPS or (variant is None and rng.random() < 0.1):
            window, dil, start = shape[2:], (1,) * nd, (0,) * nd
            strides = tuple(max(w, e + 1) for w, e in zip(window, end))
            layout = str(rng.choice(["contig", "bcast"] + (["nhwc"] if variant is None else [])))
            if variant is None and layout == "nhwc":  # channels_last_global_* where C allows
                shape = (shape[0], 4 * int(rng.integers(1, 9))) + shape[2:]
            if variant in ap.GLOBAL_GROUPS:
                shape = shape[:2] + tuple(int(v) for v in rng.integers(1, 70 if nd == 2 else 20, nd))
                window = shape[2:]
                strides = tuple(max(w, e + 1) for w, e in zip(window, end))
        ceil = bool(rng.random() < 0.5) and variant not in ap.GLOBAL_GROUPS and variant not in ap.CL_GLOBAL_CONFIGS
        if any(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[0] <= 0
               for i in range(nd)):
            continue
        include = bool(rng.random() < 0.5)
        xs_probe = make_strides(shape, layout)
        args = problem(shape, window, strides, start, end, dil, include, ceil, xs_probe)
        if variant is not None and not ap.applicable(variant, *args):
            continue
        return dict(x_shape=shape, window=window, strides=strides, start=start, end=end, dil=dil, include=include,
                    ceil=ceil, xdt=str(rng.choice(["int8", "uint8"])), odt=str(rng.choice(["int8", "uint8"])),
                    pc=tuple(bool(v) for v in rng.random(4) < 0.5) if rng.random() < 0.5 else (False,) * 4,
                    omit=tuple(bool(v) for v in rng.random(2) < 0.25), layout=layout,
                    out_strided=bool(rng.random() < 0.3), variant=variant, at_end=bool(rng.random() < 0.5))
    raise AssertionError(f"no problem found for {variant}")


def make_strides(shape, layout):
    """The element strides make_input's layout gives (for selection)."""
    probe = make_input(np.random.default_rng(0), shape, np.dtype(np.uint8), layout, True,
                       alloc=lambda n, dtype, at_end: np.empty(n, dtype))
    return tuple(probe.strides)


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_emulated_random(fake_gpu, variant):
    rng = np.random.default_rng([None, *ap.VARIANTS].index(variant))
    for _ in range(40):
        p = random_problem(rng, variant)
        before = len(fake_gpu)
        run_case(rng, **p)
        if variant is not None:  # (channels_last_global_*: its finish kernel last where an image is split)
            assert ap.kernel_name(variant, p["xdt"], p["odt"]) == fake_gpu[before][0]


@pytest.mark.parametrize("variant", ["general", "tile_k2s2", "tile_k3s1", "tile_k3s2"])
def test_emulated_edges(fake_gpu, variant):
    rng = np.random.default_rng(7)
    kw, sw = ap.TILE_CONFIGS.get(variant, (2, 2, 0))[:2]
    for xdt in ("int8", "uint8"):
        for odt in ("int8", "uint8"):
            for include in (False, True):
                common = dict(xdt=xdt, odt=odt, include=include, variant=variant)
                # windows entirely inside the padding (start and end), with end padding
                run_case(rng, (2, 3, 2, 2), (3, kw), (1, sw), (3, 3), (3, 3), (1, 1), ceil=True, **common)
                run_case(rng, (1, 2, 1, 1), (2, kw), (1, sw), (2, kw), (2, kw), (1, 1), ceil=False, **common)
                # dilation (H) with padding, ceil mode
                run_case(rng, (2, 5, 11, 13), (3, kw), (2, sw), (2, 1), (2, 2), (3, 1), ceil=True, **common)
                # window = whole image
                run_case(rng, (2, 4, 6, kw), (6, kw), (1, sw), (0, 0), (0, 0), (1, 1), ceil=False, **common)
                # per-channel everything, omitted zero points, extreme scales
                run_case(rng, (3, 7, 9, 17), (2, kw), (1, sw), (1, 1), (0, 1), (1, 1), ceil=True,
                         pc=(True,) * 4, **common)
                run_case(rng, (1, 3, 5, 31), (3, kw), (2, sw), (1, 0), (1, 2), (1, 1), ceil=False,
                         omit=(True, True), **common)
                run_case(rng, (2, 5, 6, 29), (2, kw), (1, sw), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         pc=(True, False, True, False), **common)
                run_case(rng, (2, 1, 6, 29), (2, kw), (1, sw), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         **common)
                # 3-D
                run_case(rng, (2, 3, 5, 6, 21), (2, 3, kw), (1, 2, sw), (1, 1, 1), (0, 1, 1), (2, 1, 1),
                         ceil=True, **common)


@pytest.mark.parametrize("s_rows", [16, 8, 4])
def test_emulated_strip_edges(fake_gpu, monkeypatch, request, s_rows):
    """strip_k3s1 on the pooling edge cases at each strip length the launcher can pick (its rule's
    constants pinned so every problem gets s_rows, or its whole height where that is less: the
    kernel and its arguments are those a GPU gets for a larger problem), every layout it takes,
    and window sums at a 16-bit lane's limit. Plans are memoized with their strip length, so the
    memo is emptied before (a plan made under another pin, or the rule, would be reused: a third
    of these cases ran at 16 rows under the 8 and 4 pins) and after (none of these kept)."""
    monkeypatch.setattr(ap, "STRIP_ROWS", s_rows)
    monkeypatch.setattr(ap, "STRIP_WAVES", 0)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    with recording() as plans:
        _strip_edge_cases(fake_gpu, np.random.default_rng(19 + s_rows))
    ran = [p for p in plans if p.variant == "strip_k3s1"]
    assert len(ran) == len(plans) > 0
    for p in ran:
        rows, _, planes, s, _, _, oh = (int(v) for v in p.detail[0][0][:7])
        assert f"strips of {s} output rows" in p.notes and s == min(s_rows, oh), (s, oh, p.notes)
        assert rows == -(-oh // s) * planes


def _strip_edge_cases(fake_gpu, rng):
    variant = "strip_k3s1"
    for xdt in ("int8", "uint8"):
        for odt in ("int8", "uint8"):
            for include in (False, True):
                common = dict(xdt=xdt, odt=odt, include=include, variant=variant,
                              layout=str(rng.choice(["contig", "rows", "flipped", "bcast"])))
                # windows entirely inside the padding, an image of one pixel
                run_case(rng, (2, 3, 2, 2), (3, 3), (1, 1), (3, 3), (3, 3), (1, 1), ceil=True, **common)
                run_case(rng, (1, 2, 1, 1), (3, 3), (1, 1), (2, 2), (2, 2), (1, 1), ceil=False, **common)
                # heights across strips (37 rows: a partial last strip), widths across groups of 16
                run_case(rng, (2, 5, 37, 13), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=False, **common)
                run_case(rng, (1, 3, 20, 64), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=False, **common)
                run_case(rng, (1, 3, 19, 50), (3, 3), (1, 1), (0, 2), (2, 0), (1, 1), ceil=True, **common)
                run_case(rng, (1, 2, 33, 18), (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), ceil=False, **common)
                # the window = the whole image; a 1-wide image
                run_case(rng, (2, 4, 3, 3), (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), ceil=False, **common)
                run_case(rng, (2, 3, 9, 1), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, **common)
                # per-channel everything, omitted zero points, extreme scales
                run_case(rng, (3, 7, 19, 17), (3, 3), (1, 1), (1, 1), (0, 1), (1, 1), ceil=True,
                         pc=(True,) * 4, **common)
                run_case(rng, (1, 3, 5, 31), (3, 3), (1, 1), (1, 0), (1, 2), (1, 1), ceil=False,
                         omit=(True, True), **common)
                run_case(rng, (2, 5, 6, 29), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         pc=(True, False, True, False), **common)
                run_case(rng, (2, 1, 6, 29), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         **common)
                # 3-D: D windows of 1 to 3 taps, D stride and dilation, D padding
                run_case(rng, (2, 3, 5, 6, 21), (2, 3, 3), (2, 1, 1), (1, 1, 1), (0, 1, 1), (2, 1, 1),
                         ceil=True, **common)
                run_case(rng, (1, 2, 4, 18, 9), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                         ceil=False, pc=(False, True, False, False), **common)
                run_case(rng, (1, 2, 3, 7, 7), (1, 3, 3), (2, 1, 1), (0, 2, 0), (0, 0, 2), (1, 1, 1),
                         ceil=True, out_strided=True, **common)
    # a 16-bit lane's limit: windows of 252 and 63 taps (28 or 7 D taps of 3x3), every element the
    # type's extreme, per tensor (table for 63 taps, exact for 252) and per channel
    for xdt in ("int8", "uint8"):
        info = np.iinfo(xdt)
        for fill in (info.min, info.max):
            for window in ((28, 3, 3), (7, 3, 3)):
                shape = (1, 2, window[0], 20, 21)
                x = make_input(rng, shape, np.dtype(xdt), "contig", True)
                x[...] = fill
                for pc in ((False,) * 4, (True,) * 4):
                    xs, xzp, os_, ozp = pool_params(rng, 2, np.dtype(xdt), np.dtype("uint8"), pc, (False, False),
                                                    False)
                    out_shape = (1, 2, 1, 18, 19)
                    want = np.empty(out_shape, np.uint8)
                    reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, window,
                                                 (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), False)
                    out = np.full(out_shape, 0xA5, np.uint8)
                    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, window, (1, 1, 1), (0, 0, 0), (0, 0, 0),
                                          (1, 1, 1), False)
                    np.testing.assert_array_equal(out, want, err_msg=f"{xdt} {fill} {window} {pc}")
                    assert fake_gpu[-1][0] == ap.kernel_name(variant, xdt, "uint8")


@pytest.mark.parametrize("variant", [*ap.TILE_CONFIGS, *ap.STRIP_CONFIGS])
def test_emulated_spans_end_at_the_allocation(fake_gpu, variant):
    """Each row's last span ending on the last byte before an inaccessible page, at every byte
    offset of a 4-byte word (widths 16-39, W padding 0-2): a word past the span is never read."""
    if variant in ap.STRIP_CONFIGS:
        (kh, kw, _), sw = ap.STRIP_CONFIGS[variant], 1
    else:
        (kw, sw, _), kh = ap.TILE_CONFIGS[variant], 2
    rng = np.random.default_rng(23)
    for w in range(16, 40):
        for pad in (0, 1, 2):
            run_case(rng, (1, 2, 3, w), (kh, kw), (1, sw), (0, pad), (0, 0), (1, 1), False, False, "uint8",
                     "int8", variant=variant, at_end=True)


def _cl_edge_settings(rng, variant, vec):
    """(run_case's common keywords, channels) for the channels_last edge tests: each pair of x and
    out types, IncludePadding off and on, an x layout and a channel count drawn for each."""
    for xdt in ("int8", "uint8"):
        for odt in ("int8", "uint8"):
            for include in (False, True):
                common = dict(xdt=xdt, odt=odt, include=include, variant=variant,
                              layout=str(rng.choice(["nhwc", "nhwc_bcast", "nhwc_rows", "nhwc_flipped"])))
                yield common, vec * int(rng.integers(1, 4))


def _cl_extremes(fake_gpu, rng, variant, shape, window, out_shape):
    """``variant`` on a channels_last x of ``shape`` whose every element is its type's extreme, a
    ``window`` at stride 1 without padding, per tensor (the table) and per channel, int8 out."""
    nd = len(window)
    for xdt in ("int8", "uint8"):
        info = np.iinfo(xdt)
        for fill in (info.min, info.max):
            x = make_input(rng, shape, np.dtype(xdt), "nhwc", True)
            x[...] = fill
            for pc in ((False,) * 4, (True,) * 4):
                xs, xzp, os_, ozp = pool_params(rng, shape[1], np.dtype(xdt), np.dtype("int8"), pc, (False, False),
                                                False)
                geometry = (window, (1,) * nd, (0,) * nd, (0,) * nd, (1,) * nd, False)
                want = np.empty(out_shape, np.int8)
                reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, *geometry)
                out, _ = channels_last_out(out_shape, np.int8, 0)
                ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, *geometry, variant=variant)
                np.testing.assert_array_equal(out, want, err_msg=f"{xdt} {fill} {window} {pc}")
                assert fake_gpu[-1][0] == ap.kernel_name(variant, xdt, "int8")


@pytest.mark.parametrize("s_rows", [16, 4])
@pytest.mark.parametrize("variant", list(ap.CL_STRIP_CONFIGS))
def test_emulated_channels_last_strip_edges(fake_gpu, monkeypatch, request, variant, s_rows):
    """The channels_last strip kernels (an H window of 3 at H stride 1) on the pooling edge cases at
    strip lengths 16 and 4 (the rule's constants pinned and the plan memo emptied, as in
    test_emulated_strip_edges), every x and out layout they take, W windows of 1-5 taps with W
    strides and dilations, 3-D, and window sums at a 16-bit lane's limit."""
    monkeypatch.setattr(ap, "STRIP_ROWS", s_rows)
    monkeypatch.setattr(ap, "STRIP_WAVES", 0)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    vec, kh = ap.CL_STRIP_CONFIGS[variant]
    rng = np.random.default_rng(29 + s_rows + vec)
    with recording() as plans:
        for common, c in _cl_edge_settings(rng, variant, vec):
            run_case(rng, (2, c, 2, 2), (kh, 3), (1, 2), (3, 3), (3, 3), (1, 1), ceil=True, **common)
            run_case(rng, (1, c, 1, 1), (kh, 2), (1, 2), (2, 2), (2, 2), (1, 1), ceil=False, out_cl=0,
                     **common)
            run_case(rng, (2, c, 37, 13), (kh, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=False, out_cl=4,
                     **common)
            run_case(rng, (1, c, 19, 11), (kh, 5), (1, 2), (0, 2), (2, 0), (1, 2), ceil=True, out_cl=1,
                     **common)
            run_case(rng, (2, c, kh, 5), (kh, 5), (1, 1), (0, 0), (0, 0), (1, 1), ceil=False, **common)
            run_case(rng, (3, c, 9, 17), (kh, 1), (1, 3), (1, 0), (0, 1), (1, 1), ceil=True,
                     pc=(True,) * 4, out_strided=True, **common)
            run_case(rng, (1, c, 5, 31), (kh, 2), (1, 2), (1, 0), (1, 2), (1, 1), ceil=False,
                     omit=(True, True), **common)
            run_case(rng, (2, c, 20, 29), (kh, 3), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                     pc=(True, False, True, False), out_cl=0, **common)
            run_case(rng, (2, c, 18, 9), (kh, 4), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                     **common)
            run_case(rng, (2, c, 5, 19, 21), (2, kh, 3), (2, 1, 1), (1, 1, 1), (0, 1, 1), (2, 1, 1),
                     ceil=True, out_cl=0, **common)
        # a 16-bit lane's limit: 252 taps (28 D taps of 3x3) and 255 (5 x 3 x 17)
        for window in ((28, kh, 3), (5, kh, 17)):
            _cl_extremes(fake_gpu, rng, variant, (1, vec, window[0], 20, 18), window,
                         (1, vec, 1, 18, 18 - window[2] + 1))
    assert plans and all(p.variant == variant for p in plans)
    for p in plans:
        s = int(p.detail[0][0][2])
        oh = int(p.detail[0][0][5])
        assert f"strips of {s} output rows" in p.notes and s == min(s_rows, oh), (s, oh, p.notes)


@pytest.mark.parametrize("variant", list(ap.CL_CONFIGS))
def test_emulated_channels_last_edges(fake_gpu, variant):
    """The channels_last kernels on the pooling edge cases, every x and out layout they take
    (vector, word and byte stores), and windows whose taps fill and pass a 16-bit lane."""
    vec = ap.CL_CONFIGS[variant]
    rng = np.random.default_rng(13)
    for common, c in _cl_edge_settings(rng, variant, vec):
        run_case(rng, (2, c, 2, 2), (3, 3), (1, 2), (3, 3), (3, 3), (1, 1), ceil=True, **common)
        run_case(rng, (1, c, 1, 1), (2, 2), (1, 2), (2, 2), (2, 2), (1, 1), ceil=False, out_cl=0, **common)
        run_case(rng, (2, c, 11, 13), (3, 3), (2, 2), (2, 1), (2, 2), (3, 2), ceil=True, out_cl=4, **common)
        run_case(rng, (2, c, 6, 5), (6, 5), (1, 1), (0, 0), (0, 0), (1, 1), ceil=False, out_cl=1, **common)
        run_case(rng, (3, c, 9, 17), (2, 3), (1, 1), (1, 1), (0, 1), (1, 1), ceil=True, pc=(True,) * 4,
                 out_strided=True, **common)
        run_case(rng, (1, c, 5, 31), (3, 2), (2, 2), (1, 0), (1, 2), (1, 1), ceil=False, omit=(True, True),
                 **common)
        run_case(rng, (2, c, 6, 29), (2, 2), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                 pc=(True, False, True, False), out_cl=0, **common)
        run_case(rng, (2, c, 6, 9), (2, 4), (1, 1), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                 **common)
        run_case(rng, (2, c, 5, 6, 21), (2, 3, 3), (1, 2, 1), (1, 1, 1), (0, 1, 1), (2, 1, 1),
                 ceil=True, out_cl=0, **common)
    # the lanes' limits: a row of 257 taps (65535 in a lane) and windows of 2 and 3 rows of them (a
    # drain between rows)
    for window in ((1, 257), (2, 257), (3, 200), (9, 40), (2, 129), (6, 43)):  # (258 taps: one drain)
        _cl_extremes(fake_gpu, rng, variant, (1, vec, window[0] + 1, 258), window, (1, vec, 2, 2))


def test_emulated_channels_last_selection_and_stores(fake_gpu):
    """Selection takes the channels_last kernels for channels-stride-1 inputs (16 channels a
    thread where x's strides and address allow, else 4), and the plan's stores follow out."""
    rng = np.random.default_rng(17)
    for c, layout, x_off, picked in ((32, "nhwc", 0, "channels_last_16"), (12, "nhwc", 0, "channels_last_4"),
                                   (32, "nhwc", 4, "channels_last_4"), (32, "nhwc", 2, "general"),
                                   (6, "nhwc", 0, "general"), (32, "contig", 0, "tile_k2s2")):
        vals = rng.integers(0, 256, (2, c, 8, 10)).astype(np.uint8)
        perm = (0, 2, 3, 1)
        if layout == "nhwc":
            buf = np.empty(vals.size + 16, np.uint8)
            base = (-buf.ctypes.data) % 16 + x_off
            x = buf[base:base + vals.size].reshape(2, 8, 10, c).transpose(np.argsort(perm))
        else:
            x = vals.copy()
        x[...] = vals
        one = np.ones(1, np.float32)
        for out_off, stores in ((0, "16-byte stores"), (4, "4-byte stores"), (1, "byte stores")):
            out, _ = channels_last_out((2, c, 4, 5), np.uint8, 0)
            buf = np.full(out.size + 32, 0xA5, np.uint8)
            base = (-buf.ctypes.data) % 16 + out_off
            out = buf[base:base + out.size].reshape(2, 4, 5, c).transpose(np.argsort(perm))
            expected = np.empty(out.shape, np.uint8)
            reference.quantized_avg_pool(vals, one, None, one, None, expected, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1),
                                         False)
            plan = ap.plan_quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1),
                                              False)
            assert plan.variant == picked, (c, layout, x_off, plan.variant)
            ap.quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False)
            np.testing.assert_array_equal(out, expected)
            assert fake_gpu[-1][0] == ap.kernel_name(picked, "uint8", "uint8")
            if picked.startswith("channels_last"):
                expect = stores if ap.CL_CONFIGS[picked] == 16 or stores != "16-byte stores" else "4-byte stores"
                assert expect in plan.notes, (plan.notes, out_off)


@pytest.mark.parametrize("variant", ["global_warp", "global_block", "general"])
def test_emulated_global(fake_gpu, variant):
    rng = np.random.default_rng(11)
    for shape in ((1, 1, 1, 1), (2, 3, 1, 15), (2, 5, 4, 4), (1, 3, 17, 33), (3, 7, 41, 43), (2, 3, 2, 9, 37),
                  (1, 2, 64, 64)):
        nd = len(shape) - 2
        for xdt, odt in (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")):
            for layout in ("contig", "bcast", "rows") if variant == "general" else ("contig", "bcast"):
                run_case(rng, shape, shape[2:], shape[2:], (0,) * nd, (0,) * nd, (1,) * nd, bool(rng.integers(2)),
                         False, xdt, odt, pc=(True, True, False, True), layout=layout, variant=variant,
                         at_end=bool(rng.integers(2)), omit=(bool(rng.integers(2)), False))


def test_emulated_lut_and_grid(fake_gpu):
    """Per-tensor tile launches carry the table and one wave of persistent blocks."""
    rng = np.random.default_rng(3)
    run_case(rng, (2, 3, 20, 40), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False, False, "uint8", "int8",
             variant="tile_k3s1")  # (forced: selection leaves the 3x3 tiles to variant=)
    name, grid, block, smem = fake_gpu[-1]
    assert name == "avgpool_tile<uint8, int8, 3, 1, 16>" and smem == 9 * 255 + 1
    assert grid[0] * grid[1] <= fake_gpu_limits() and block[0] * block[1] <= 256
    run_case(rng, (2, 3, 20, 40), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False, False, "uint8", "int8",
             pc=(True, False, False, False), variant="tile_k3s1")
    assert fake_gpu[-1][3] == 0
    run_case(rng, (2, 3, 40, 40), (33, 2), (1, 2), (1, 1), (1, 1), (1, 1), False, False, "int8", "int8",
             variant="tile_k2s2")  # 66 taps: past the table size
    assert fake_gpu[-1][3] == 0


def test_emulated_size_zero(fake_gpu):
    x = np.zeros((0, 3, 4, 4), np.int8)
    out = np.zeros((0, 3, 2, 2), np.int8)
    one = np.ones(1, np.float32)
    assert ap.quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1),
                                 False) is out
    assert fake_gpu == []


def test_gpu_mirror_keeps_the_planned_alignment(cupy_stand_in):
    """The GPU twins' mirror device copies each array's root allocation to the device: the copy
    keeps the host address's alignment (mod 256), which the launcher planned for. An x 16 bytes
    aligned on the host but 4 bytes into a root starting at 12 mod 16 was planned for
    channels_last_16 and launched 4 bytes off alignment (a misaligned 16-byte load)."""
    from cuda_host import harness
    from dmlq.gpu import device

    dev = harness.GpuMirrorDevice()
    n, c, h, w = 1, 32, 4, 4
    raw = np.empty(n * h * w * c + 64, np.uint8)
    a = (-raw.ctypes.data) % 16
    root = raw[a + 12:a + 12 + n * h * w * c + 4]
    root = np.lib.stride_tricks.as_strided(root, root.shape, root.strides)  # a root starting at 12 mod 16
    assert harness._extent(harness._root(root))[0] % 16 == 12
    x = root[4:].reshape(n, h, w, c).transpose(0, 3, 1, 2)  # x at 0 mod 16
    x[...] = np.arange(c, dtype=np.uint8)[None, :, None, None]
    one = np.ones(1, np.float32)
    out = np.zeros((n, 2, 2, c), np.uint8).transpose(0, 3, 1, 2)
    with device.using(dev):
        assert ap.plan_quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1),
                                          False).variant == "channels_last_16"
        ap.quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False)
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(c, dtype=np.uint8)[None, :, None, None], out.shape))
