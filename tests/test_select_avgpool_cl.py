"""The channels_last kernels (avgpool_cl, avgpool_cl_strip) on the host harness: output sizes
docs/semantics.md accepts beyond ceil mode's. (The other channels_last cases:
tests/test_select_avgpool.py, whose helpers these use.)"""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import reference
from dmlq.desc import pool_output_accepted
from dmlq.gpu import avgpool as ap
from dmlq.gpu.plan import Memo, recording
from kernel_cases import pool_params
from test_select_avgpool import channels_last_out, fake_gpu, make_input  # noqa: F401  (fake_gpu: the fixture)

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
