"""The channels_last kernels on the host harness: avgpool_cl and avgpool_cl_strip at output sizes
docs/semantics.md accepts beyond ceil mode's; avgpool_cl_global (whole-image windows) on its edges.
(The other channels_last cases: tests/test_select_avgpool.py, whose helpers these use.)"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dmlq import reference
from dmlq.desc import pool_output_accepted
from dmlq.gpu import avgpool as ap
from dmlq.gpu.plan import Memo, recording
from kernel_cases import pool_params
from test_select_avgpool import channels_last_out, fake_gpu, make_input, run_case  # noqa: F401  (fake_gpu: the fixture)

# (x shape without C, window, strides, start, end): each dimension's floor + 1 output size is
# accepted (its last window starts inside in + start_pad) and that window reaches past the
# end padding, so IncludePadding's divisor must clip it at in + end_pad. An H window of 3 at
# H stride 1 (the strip kernels' class) only gets such a row from floor + 1: its ceil size is
# its floor size.
ACCEPTED_CASES = (
    ((7, 9), (3, 3), (1, 2), (1, 0), (0, 1)),
    ((5, 6), (3, 2), (1, 1), (2, 1), (1, 0)),
    ((1, 4), (3, 1), (1, 3), (1, 2), (1, 0)),
    ((4, 6, 11), (2, 3, 4), (1, 1, 2), (1, 1, 0), (0, 0, 1)),
    ((13, 5), (3, 3), (1, 1), (0, 1), (0, 0)),
)


@pytest.mark.parametrize("variant, s_rows", [(v, s) for v in ap.CL_STRIP_CONFIGS for s in (8, 3, 1)]
                         + [(v, 16) for v in ap.CL_CONFIGS])  # (channels_last_*: no strips)
def test_emulated_channels_last_accepted_output_sizes(fake_gpu, monkeypatch, request, variant, s_rows):
    """Every dimension's floor + 1 output size (pool_output_accepted), IncludePadding on and off, per
    tensor (the table) and per channel, at strip lengths 8, 3 and 1 (strip kernels; pinned, the plan memo emptied as
    in test_emulated_channels_last_strip_edges). Found by: the strip's IncludePadding divisor clipped
    at H + EH + 1 instead of H + EH, surviving every other test."""
    monkeypatch.setattr(ap, "STRIP_ROWS", s_rows)
    monkeypatch.setattr(ap, "STRIP_MIN_ROWS", 1)
    monkeypatch.setattr(ap, "STRIP_WAVES", 0)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    vec = ap.CL_STRIP_CONFIGS[variant][0] if variant in ap.CL_STRIP_CONFIGS else ap.CL_CONFIGS[variant]
    rng = np.random.default_rng(41 + s_rows + vec)
    with recording() as plans:
        launched = _run_accepted(fake_gpu, rng, ACCEPTED_CASES, variant, lambda: vec * int(rng.integers(1, 3)),
                                 lambda: "nhwc", lambda shape, dt: channels_last_out(shape, dt, 0)[0])
    assert launched and all(p.variant == variant for p in plans)
    if variant in ap.CL_STRIP_CONFIGS:
        for p in plans:
            s, oh = int(p.detail[0][0][2]), int(p.detail[0][0][5])
            assert s == min(s_rows, oh), (s, oh, p.notes)


STRIP_ACCEPTED_CASES = (  # as ACCEPTED_CASES, with the strip_* kernels' 3x3 window at stride 1
    ((13, 5), (3, 3), (1, 1), (0, 1), (0, 0)),
    ((7, 20), (3, 3), (1, 1), (1, 0), (0, 1)),
    ((4, 6, 19), (2, 3, 3), (1, 1, 1), (1, 1, 0), (0, 0, 1)),
)


@pytest.mark.parametrize("s_rows", [8, 3, 1])
def test_emulated_strip_accepted_output_sizes(fake_gpu, monkeypatch, request, s_rows):
    """strip_k3s1 (NCHW rows) at every dimension's floor + 1 output size, IncludePadding on and off,
    per tensor and per channel, at pinned strip lengths (the plan memo emptied): its H rows past the
    end padding only come from those sizes (test_emulated_channels_last_accepted_output_sizes's
    gap, in this kernel's `chp` clip)."""
    monkeypatch.setattr(ap, "STRIP_ROWS", s_rows)
    monkeypatch.setattr(ap, "STRIP_MIN_ROWS", 1)
    monkeypatch.setattr(ap, "STRIP_WAVES", 0)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    rng = np.random.default_rng(43 + s_rows)
    with recording() as plans:
        _run_accepted(fake_gpu, rng, STRIP_ACCEPTED_CASES, "strip_k3s1", lambda: int(rng.integers(1, 4)),
                      lambda: str(rng.choice(["contig", "rows"])),
                      lambda shape, dt: np.full(shape, 0xA5, np.uint8).view(dt))
    assert plans and all(p.variant == "strip_k3s1" for p in plans)
    for p in plans:
        s, oh = int(p.detail[0][0][3]), int(p.detail[0][0][6])
        assert s == min(s_rows, oh), (s, oh, p.notes)


def _run_accepted(fake_gpu, rng, cases, variant, channels, layout, make_out) -> int:
    """Run ``variant`` on each case at every dimension's floor + 1 output size, int8 -> uint8 and
    uint8 -> int8, IncludePadding off and on, per tensor and per channel (x in ``layout()``, out
    from ``make_out(shape, dtype)``), against the reference; the launches made."""
    launched = 0
    for sp, window, strides, start, end in cases:
        nd = len(sp)
        dil = (1,) * nd
        out_sp = tuple(max(pool_output_accepted(sp[i], window[i], strides[i], start[i], end[i], dil[i]))
                       for i in range(nd))
        for xdt, odt in (("int8", "uint8"), ("uint8", "int8")):
            for include in (False, True):
                for pc in ((False,) * 4, (True, False, False, True)):
                    c = channels()
                    shape, out_shape = (2, c) + sp, (2, c) + out_sp
                    x = make_input(rng, shape, np.dtype(xdt), layout(), bool(rng.integers(2)))
                    # out scale near x scale: outputs not saturated, so each unit of the divisor shows
                    xs = rng.uniform(0.01, 0.1, c if pc[0] else 1).astype(np.float32)
                    os_ = (xs[:1] * rng.uniform(0.7, 1.4)).astype(np.float32)
                    _, xzp, _, ozp = pool_params(rng, c, np.dtype(xdt), np.dtype(odt), pc, (False, False), False)
                    want = np.empty(out_shape, odt)
                    reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, window, strides,
                                                 start, end, dil, include)
                    out = make_out(out_shape, np.dtype(odt))
                    ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, window, strides, start, end, dil, include,
                                          variant=variant)
                    np.testing.assert_array_equal(out, want, err_msg=f"{sp} {window} {strides} {start} {end} "
                                                                     f"{xdt}->{odt} inc={include} pc={pc}")
                    assert fake_gpu[-1][0] == ap.kernel_name(variant, xdt, odt)
                    launched += 1
    return launched


# ------------------------------------------------------------------ channels_last global pooling

@pytest.mark.parametrize("variant", list(ap.CL_GLOBAL_CONFIGS))
@pytest.mark.parametrize("split", ["rule", "many", "one", "need"])
def test_emulated_channels_last_global_edges(fake_gpu, monkeypatch, request, variant, split):
    """avgpool_cl_global (a window of the whole image on a channels_last x with evenly spaced
    positions) and its finish kernel, every image split as the rule splits it ("rule"), into
    chunks of at least 2 positions a thread ("many": CL_GLOBAL_MIN_TAPS pinned to 2, ragged last
    chunks), never ("one": CL_GLOBAL_WAVES pinned to 0, so a thread sums past a 16-bit lane's 257
    taps and empties it), and only as the 32-bit sums need ("need": CL_GLOBAL_MAX_CHUNK pinned to
    1000 with no waves wanted); the plan memo emptied, as the strip tests do. int8/uint8 each way,
    IncludePadding, per-channel and omitted parameters, special scales, 2-D and 3-D images, a
    stride-0 batch, channel counts that leave idle threads in a block (48) or take two channel
    blocks (640), outputs channels_last at byte offsets and strided."""
    if split == "many":
        monkeypatch.setattr(ap, "CL_GLOBAL_MIN_TAPS", 2)
    elif split == "one":
        monkeypatch.setattr(ap, "CL_GLOBAL_WAVES", 0)
    elif split == "need":
        monkeypatch.setattr(ap, "CL_GLOBAL_WAVES", 0)
        monkeypatch.setattr(ap, "CL_GLOBAL_MAX_CHUNK", 1000)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    vec = ap.CL_GLOBAL_CONFIGS[variant]
    rng = np.random.default_rng(61 + vec + len(split))
    cases = [(2, 16, 5, 7), (1, 48, 1, 1), (3, 16, 1, 9), (2, 32, 2, 3, 4), (1, 640, 6, 5)]
    if split == "one":
        cases.append((1, 16, 257, 260))  # 66,820 positions, 256 rows of threads: 261 taps each
    elif split == "rule":
        cases.append((1, 16, 128, 130))  # 16,640 positions: 8 chunks (256 rows of threads, 8 taps each)
    else:
        cases += [(1, 16, 61, 67), (3, 16, 40, 41)]  # 4,087 positions; several images, each in chunks
    if vec == 4:
        cases = [(n, c // 4 if c % 64 else c // 16, *sp) for n, c, *sp in cases] + [(2, 4, 9, 11), (1, 12, 3, 40)]
    with recording() as plans:
        for i, shape in enumerate(cases):
            xdt, odt = (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"))[i % 4]
            sp = shape[2:]
            nd = len(sp)
            common = dict(xdt=xdt, odt=odt, include=bool(i % 2), variant=variant, ceil=False)
            zeros, ones = (0,) * nd, (1,) * nd
            run_case(rng, shape, sp, ones, zeros, zeros, ones, layout="nhwc", **common)
            run_case(rng, shape, sp, (2,) * nd, zeros, (1,) * nd, (3,) * nd, layout="nhwc_bcast", pc=(True,) * 4,
                     out_cl=1, **common)
            run_case(rng, shape, sp, ones, zeros, zeros, ones, layout="nhwc", omit=(True, True), special=True,
                     out_strided=True, **common)
            run_case(rng, shape, sp, ones, zeros, zeros, ones, layout="nhwc", pc=(False, True, True, False),
                     out_cl=3, **common)
    assert plans and all(p.variant == variant for p in plans)
    chunks = [int(p.detail[0][0][1]) for p in plans]
    finishes = [len(p.launches) == 2 for p in plans]
    assert finishes == [c > 1 for c in chunks]
    if split == "one":
        assert set(chunks) == {1}
    else:
        assert max(chunks) >= 2, chunks
    if split == "need":
        assert all(int(p.detail[0][0][4]) <= 1000 for p in plans)
    if split in ("many", "need"):  # images beside each other in the chunk sums' temporary
        assert any(int(p.detail[0][0][1]) > 1 and int(p.detail[0][0][0]) > int(p.detail[0][0][1]) for p in plans)


@pytest.mark.parametrize("variant", list(ap.CL_GLOBAL_CONFIGS))
def test_emulated_channels_last_global_extreme_sums(fake_gpu, monkeypatch, request, variant):
    """Every tap at the far end from its zero point (uint8 255 with zero point 0, int8 -128 with
    127: |x - zp| = 255), so each chunk's 32-bit sum is at its largest for its length, split and
    not; out_scale makes each unit of the average count."""
    vec = ap.CL_GLOBAL_CONFIGS[variant]
    for waves in (0, ap.CL_GLOBAL_WAVES):
        monkeypatch.setattr(ap, "CL_GLOBAL_WAVES", waves)
        Memo.clear_all()
        request.addfinalizer(Memo.clear_all)
        for xdt, v, zp in (("uint8", 255, 0), ("int8", -128, 127)):
            shape = (1, vec, 300, 301)
            x = np.full((shape[0], *shape[2:], shape[1]), v, xdt).transpose(0, 3, 1, 2)
            xs, xzp = np.array([0.5], np.float32), np.array([zp], xdt)
            os_, ozp = np.array([0.5 * 255 / 100], np.float32), np.array([0], np.int8)
            want = np.empty(shape[:2] + (1, 1), np.int8)
            reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, shape[2:], (1, 1), (0, 0),
                                         (0, 0), (1, 1), False)
            out = np.full(want.shape, 0x5A, np.int8)
            ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, shape[2:], (1, 1), (0, 0), (0, 0), (1, 1), False,
                                  variant=variant)
            np.testing.assert_array_equal(out, want)
            assert abs(int(want.reshape(-1)[0])) == 100
            assert fake_gpu[-1][0] in (ap.kernel_name(variant, xdt, "int8"), ap.finish_name(xdt, "int8"))


def test_channels_last_global_rule():
    """Where channels_last_global_* applies and what it splits (pure Python)."""
    def sel(shape, strides, out_sp=None, window=None, start=None, address=0):
        sp = shape[2:]
        nd = len(sp)
        return ap.select_variant(shape, strides, shape[:2] + (out_sp or (1,) * nd), window or sp, (1,) * nd,
                                 start or (0,) * nd, (0,) * nd, (1,) * nd, False, x_address=address)

    nhwc = lambda n, c, h, w: (c * h * w, 1, w * c, c)  # noqa: E731
    assert sel((8, 256, 56, 56), nhwc(8, 256, 56, 56)) == "channels_last_global_16"
    assert sel((8, 36, 7, 7), nhwc(8, 36, 7, 7)) == "channels_last_global_4"
    assert sel((8, 36, 7, 7), nhwc(8, 36, 7, 7), address=2) == "general"
    assert sel((8, 256, 56, 56), (256 * 56 * 60, 1, 60 * 256, 256)) == "channels_last_16"  # padded rows
    assert sel((8, 256, 56, 56), (256 * 56 * 56, 1, 56 * 256, -256)) == "channels_last_16"  # W reversed
    assert sel((8, 256, 56, 1), (256 * 56, 1, 256, 7)) == "channels_last_global_16"  # W of 1: its stride free
    assert sel((8, 256, 56, 56), nhwc(8, 256, 56, 56), window=(55, 56), out_sp=(2, 1)) == "channels_last_16"
    assert sel((8, 256, 56, 56), (256 * 56 * 56, 56 * 56, 56, 1)) == "global_warp"  # NCHW
    assert ap.positions_stride((4, 5, 6), (30 * 16, 6 * 16, 16)) == 16
    assert ap.positions_stride((4, 1, 6), (6 * 16, 7, 16)) == 16
    assert ap.positions_stride((4, 5, 6), (30 * 16, 6 * 16 + 1, 16)) is None
    # splits: to CL_GLOBAL_WAVES waves, each thread keeping CL_GLOBAL_MIN_TAPS positions, 32-bit sums
    assert ap.global_splits(blocks=8, vol=56 * 56, rows=256, wave=1000) == 1  # 3136 // (256 * 8) = 1
    assert ap.global_splits(blocks=8, vol=112 * 112, rows=16, wave=1000) == 98  # 12544 // 128
    assert ap.global_splits(blocks=8, vol=7 * 7, rows=8, wave=1000) == 1  # 49 // 64 = 0: one chunk
    assert ap.global_splits(blocks=4000, vol=112 * 112, rows=16, wave=1000) == 1  # waves enough
    assert ap.global_splits(blocks=10, vol=10**6, rows=16, wave=1000) == 200  # 2 * 1000 / 10
    assert ap.global_splits(blocks=4000, vol=2**23 + 1, rows=16, wave=1000) == 2  # the sums' need


@pytest.mark.parametrize("variant", list(ap.CL_GLOBAL_CONFIGS))
def test_emulated_channels_last_global_grid_stride(fake_gpu, monkeypatch, request, variant):
    """The grid-stride loops of avgpool_cl_global: the grid's x (items: images x chunks) and y
    (channel blocks) pinned below what the problem needs (CL_GLOBAL_MAX_GRID, CL_MAX_GRID_Y: 2**31 - 1
    and 65535 on a GPU, reached by 2**31 items or 32 * 65535 groups), so blocks walk further items and
    channel blocks, reusing their shared rows; split and not, stride-0 batch and not."""
    monkeypatch.setattr(ap, "CL_GLOBAL_MAX_GRID", 2)
    monkeypatch.setattr(ap, "CL_MAX_GRID_Y", 1)
    monkeypatch.setattr(ap, "CL_GLOBAL_MIN_TAPS", 1)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    vec = ap.CL_GLOBAL_CONFIGS[variant]
    rng = np.random.default_rng(67 + vec)
    cases = [(3, 640, 5, 7), (2, 48 if vec == 16 else 140, 9, 11), (5, 32 * vec + vec, 2, 3, 4)]
    with recording() as plans:
        for i, shape in enumerate(cases):
            for waves in (0, 2):  # no split; splits to 2 waves of the host's blocks
                monkeypatch.setattr(ap, "CL_GLOBAL_WAVES", waves)
                sp = shape[2:]
                nd = len(sp)
                zeros, ones = (0,) * nd, (1,) * nd
                xdt, odt = (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"))[i]
                run_case(rng, shape, sp, ones, zeros, zeros, ones, include=bool(waves), ceil=False, xdt=xdt, odt=odt,
                         layout=("nhwc", "nhwc_bcast")[i % 2], pc=(True, True, False, True), variant=variant)
                Memo.clear_all()
    for p in plans:
        gx, gy = p.launches[0].grid
        assert gx == min(int(p.detail[0][0][0]), 2) and gy == 1
    assert any(int(p.detail[0][0][0]) > 2 for p in plans)                           # items walked
    assert any(-(-int(p.detail[0][0][2]) // p.launches[0].block[0]) > 1 for p in plans)  # channel blocks walked
    assert any(int(p.detail[0][0][1]) > 1 for p in plans) and any(int(p.detail[0][0][1]) == 1 for p in plans)


def test_emulated_channels_last_global_last_block_of_the_largest_grid(host_device):
    """avgpool_cl_global as the last block of a grid of 2**31 - 1 blocks (a stride-0 batch of
    2**31 - 1 images of 256 channels, one chunk each: applicable() takes it), run through a probe
    (tests/cuda_host/avgpool_cl_probe.cu) that renames the block and widens the grid the kernel
    sees: the block makes its image and stops. Found by review: the block's item was an int, so
    item + gridDim.x wrapped to -3 and the block went on to pool a negative image (written 2**39
    bytes before out here: a fault)."""
    from pathlib import Path

    from cuda_host import harness

    name = "avgpool_cl_global_at<uint8, uint8, 16>"
    items = 2**31 - 1
    c, sp = 256, (2, 3)
    vol = sp[0] * sp[1]
    groups, bx, by, gy = ap._cl_block(c, 16)
    shape = (items, c) + sp
    assert ap.applicable("channels_last_global_16", shape, (0, 1, sp[1] * c, c), shape[:2] + (1, 1), sp, (1, 1),
                         (0, 0), (0, 0), (1, 1), False)
    rng = np.random.default_rng(71)
    one = make_input(rng, (1, c) + sp, np.dtype(np.uint8), "nhwc", True)  # the batch's one image
    xs, xzp, os_, ozp = pool_params(rng, c, np.dtype(np.uint8), np.dtype(np.uint8), (True, True, False, True),
                                    (False, False), False)
    want = np.empty((1, c, 1, 1), np.uint8)
    reference.quantized_avg_pool(np.ascontiguousarray(one), xs, xzp, os_, ozp, want, sp, (1, 1), (0, 0), (0, 0),
                                 (1, 1), False)
    dev = harness.HostDevice()
    try:
        dev.sources["avgpool_cl_probe.cu"] = (Path(__file__).parent / "cuda_host" / "avgpool_cl_probe.cu", (name,))
        out = np.full(c, 0xA5, np.uint8)  # image items - 1 of an (items, C, 1, 1) out
        i32, i64 = np.int32, np.int64
        dev.launch("avgpool_cl_probe.cu", name, (1, gy), (bx, by),
                   (one, out, i32(items), i32(1), i32(groups), i64(vol), i64(vol), i64(0), i64(c), i64(c), i64(1),
                    xs, xzp, os_, ozp, i32(1 | 2 | 8), i32(items), i32(items - 1)))  # per channel: x_scale, zero points
    finally:
        dev.close()
    np.testing.assert_array_equal(out, want.reshape(-1))


def _positions(kind, n, c, sp, dtype, rng, at_end):
    """x (N, C, *sp) in channels_last memory whose positions are evenly spaced in an unusual way:
    every spatial dimension reversed (one negative step), all positions one (stride 0), or size-1
    dimensions with strides that are not the others' (free: they are never stepped)."""
    from test_select_avgpool import guarded

    cl = (n, *sp, c)
    if kind == "reversed":
        base = guarded(math.prod(cl), dtype, at_end).reshape(cl)
        x = base[(slice(None),) + (slice(None, None, -1),) * len(sp)]
    elif kind == "one_position":
        base = guarded(n * c, dtype, at_end).reshape((n,) + (1,) * len(sp) + (c,))
        x = np.broadcast_to(base, cl)
    else:  # "odd_unit_strides": every size-1 dimension's stride 7 (not a multiple of the vector)
        base = guarded(math.prod(cl), dtype, at_end)
        strides = [c] * (len(sp) + 2)
        strides[-1] = 1
        for i in range(len(sp), 0, -1):
            strides[i] = 7 if cl[i] == 1 else c * math.prod(s for s in cl[i + 1:-1])
        strides[0] = math.prod(cl[1:])
        x = np.lib.stride_tricks.as_strided(base, cl, strides)
    info = np.iinfo(dtype)
    filled = base if kind == "one_position" else x  # (a broadcast view is read-only)
    filled[...] = rng.integers(info.min, info.max + 1, filled.shape)
    return x.transpose(0, len(cl) - 1, *range(1, len(cl) - 1))


@pytest.mark.parametrize("kind", ["reversed", "one_position", "odd_unit_strides"])
def test_emulated_channels_last_global_position_strides(fake_gpu, monkeypatch, request, kind):
    """avgpool_cl_global on positions one stride apart however that stride comes: negative (every
    spatial dimension reversed), 0 (a broadcast image), or a size-1 dimension's stride of 7 next to
    16-byte steps; selection takes channels_last_global_16 for each (and _4 is forced), each image
    split into chunks of a position or more a thread (CL_GLOBAL_MIN_TAPS pinned to 1)."""
    monkeypatch.setattr(ap, "CL_GLOBAL_MIN_TAPS", 1)
    Memo.clear_all()
    request.addfinalizer(Memo.clear_all)
    rng = np.random.default_rng(73 + len(kind))
    shapes = {"reversed": [(2, 32, 17, 19), (1, 16, 5, 8, 14), (2, 32, 1, 300)],
              "one_position": [(2, 32, 17, 19), (1, 16, 5, 8, 14)],
              "odd_unit_strides": [(2, 32, 300, 1), (2, 16, 1, 600), (1, 32, 20, 1, 15)]}[kind]
    split = 0
    for i, shape in enumerate(shapes):
        sp = shape[2:]
        nd = len(sp)
        xdt, odt = (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"))[i]
        x = _positions(kind, shape[0], shape[1], sp, np.dtype(xdt), rng, bool(i % 2))
        for variant in (None, "channels_last_global_4"):
            for include in (False, True):
                xs, xzp, os_, ozp = pool_params(rng, shape[1], np.dtype(xdt), np.dtype(odt), (include,) * 4,
                                                (False, False), False)
                want = np.empty(shape[:2] + (1,) * nd, odt)
                ones, zeros = (1,) * nd, (0,) * nd
                reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, sp, ones, zeros,
                                             zeros, ones, include)
                out = np.full(want.shape, 0xA5, np.uint8).view(odt)
                before = len(fake_gpu)
                ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, sp, ones, zeros, zeros, ones, include,
                                      variant=variant)
                np.testing.assert_array_equal(out, want, err_msg=f"{kind} {shape} {variant}")
                assert fake_gpu[before][0] == ap.kernel_name(variant or "channels_last_global_16", xdt, odt)
                split += len(fake_gpu) - before - 1
    assert split  # (the finish kernel ran)


def test_mutation_snippets_of_the_avgpool_sources_occur_once():
    """tools/mutate.py stops on a mutation whose snippet is not exactly once in its file: the
    avgpool sources' rows must stay runnable as kernels are added beside them. Found by review:
    avgpool_cl_global's `constexpr int LANE_TAPS = 257;` made mutation 242's snippet (avgpool_cl's
    line) occur twice, so `python tools/mutate.py --file avgpool` exited before running any."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("dmlq_mutate", root / "tools" / "mutate.py")
    mutate = sys.modules.get(spec.name)
    if mutate is None:
        mutate = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mutate  # (its dataclasses look their module up)
        spec.loader.exec_module(mutate)
    rows = {i for i, m in mutate.numbered() if m.source == "avgpool.cu"}
    assert len(rows) > 40
    mutate.check_snippets(root / "cuda", rows)  # SystemExit names the row
