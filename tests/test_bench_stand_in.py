"""Every benchmark's dmlq and CuPy implementations, built and run once on the cupy stand-in
with every shape shrunk: bench/peers.py's builders call the code a GPU session will time.
The first H100 session lost all 55 dmlq matmul variant rows to a builder calling
``dmlq.gpu.matmul.quantized_matmul`` (the entry point is ``dmlq.gpu.qmm``); no test had run
a builder. The peers (CuPy ElementwiseKernels and expressions, torch on CUDA) need a real
device, as does bench.timing.fill_random's kernel: here the inputs are filled on the host."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import limits as limits_mod  # noqa: E402
from bench import peers, timing  # noqa: E402
from bench import workloads as W  # noqa: E402

# a small L2 (a few rotating buffer sets) and an H100's figures, nothing measured
LIMITS = limits_mod.Limits(facts={"l2_bytes": 1 << 16}, copy_gb_per_s=3000.0, copy_source="stand-in",
                           peaks={"int8_tc_tops": 1979.0, "dp4a_tops": 120.0}, overhead_reference_gb_per_s=100.0)


def small(case):
    """``case`` with its shapes shrunk to a few hundred elements (the same parameters otherwise)."""
    p = dict(case.p)
    if case.op in ("quantize", "dequantize", "add", "dynquant"):
        p["shape"] = (3, 256)
    elif case.op == "matmul":
        p.update(M=min(case.p["M"], 16) + 1, N=64, K=96)
    elif case.op == "avgpool":
        shape = (2, 16 if case.p.get("channels_last") else 3) + (9,) * (len(case.p["shape"]) - 2)
        p["shape"] = shape
        if tuple(case.p["window"]) == tuple(case.p["shape"][2:]):  # global pooling stays global
            p["window"] = shape[2:]
        p["out"] = shape[:2] + tuple(W.pool_out_size(n, w, s, q, q) for n, w, s, q in
                                     zip(shape[2:], p["window"], case.p["strides"], case.p["pad"]))
    elif case.op == "overhead":
        p["n"] = 8
    elif case.op == "graph":
        p["shape"] = (4, 64)
    return dataclasses.replace(case, p=p)


PARAMS = [pytest.param(case, impl, id=f"{case.group}|{impl}") for case in W.all_cases()
          for impl in peers.impl_names(case) if impl.startswith("dmlq:")]


def _host_fill(out, seed, lo, hi, integral=False):
    """bench.timing.fill_random's values drawn on the host (its CuPy kernel needs a device)."""
    v = np.random.default_rng(int(seed)).uniform(lo, hi, out.shape)
    out[...] = (np.floor(v) if integral else v).astype(out.dtype)
    return out


@pytest.mark.parametrize("case,impl", PARAMS)
def test_builder_runs_on_the_stand_in(gpu, monkeypatch, case, impl):  # noqa: F811
    monkeypatch.setattr(timing, "fill_random", _host_fill)
    try:
        prep = peers.prepare(small(case), impl, LIMITS, seed=3)
    except peers.Unavailable as e:
        if "refused" in str(e) or "torch" in str(e) or "not defined" in str(e):
            pytest.skip(str(e))
        raise
    prep.fn()  # a second round, as the timer runs it
    assert prep.bytes > 0


def _intmm_params():
    from bench import test_bench_intmm as B

    return [pytest.param(g, impl, id=f"{g}|{impl}") for g, impl in B.GPU_CASES if impl.startswith("dmlq:")]


@pytest.mark.parametrize("group,impl", _intmm_params())
def test_intmm_builder_runs_on_the_stand_in(gpu, monkeypatch, group, impl):  # noqa: F811
    """bench/test_bench_intmm.py's dmlq rows (auto, and the tiles forced or chosen by their own rule
    beside it), shrunk to N = K = 256 (groups of 64): each builds, runs and launches the kernels its
    label names."""
    import cupy_stand_in as S
    from bench import test_bench_intmm as B

    monkeypatch.setattr(timing, "fill_random", _host_fill)
    b_kind, m, *_ = B.GPU_GROUPS[group]
    monkeypatch.setitem(B.GPU_GROUPS, group, (b_kind, m, 256))
    monkeypatch.setattr(B, "G", 64)
    fn, nbytes, ops = B._gpu_call(group, impl)
    S.launches.clear()
    fn()
    ran = {launch[0].split("<")[0] for launch in S.launches}
    want = {"dmlq:dp4a-wide": "matmul_dp4a_wide", "dmlq:tiled": "matmul_dp4a", B.MMA16: "matmul_mma",
            B.MMA_GRAPH: "matmul_mma"}.get(impl)
    if want is None:  # auto at M <= 16: the weight-streaming kernels (8-bit M = 16 at this size too),
        from dmlq.gpu import qmm_stream  # but dp4a-wide where the groups' workspace would outgrow b

        want = "matmul_stream_packed" if b_kind in ("qmm-int4", B.QMM_I8) else "matmul_stream_grouped"
        if b_kind == "uint8xpacked-uint4->float16" and not qmm_stream.work_fits(m, 256, 64):
            want = "matmul_dp4a_wide"
        if m > 16:  # past the decode step: the tensor-core tile
            want = "matmul_mma"
    assert want in ran and nbytes > 0 and ops > 0, (ran, want)
    nbits = (B.NBITS, B.NBITS2, B.NBITS2_HELD4)
    if impl in (B.WT, B.WT_GRAPH, *nbits) and want != "matmul_dp4a_wide":  # the packed b held K-major, as it is
        assert all("kmajor_" in launch[0] for launch in S.launches if launch[0].split("<")[0] == want), S.launches
    names = [launch[0] for launch in S.launches]
    assert names.count("widen_codes2") == (impl == B.NBITS2), names  # a 2-bit weight widened in the call
    if impl == B.BF16_OUT and want == "matmul_stream_grouped":  # the finish pass writes the bfloat16 out
        assert "matmul_stream_grouped_finish<bfloat16>" in [launch[0] for launch in S.launches], S.launches
    if impl in nbits:  # MatMulNBits' packed zero points: their table in one launch
        assert [launch[0] for launch in S.launches].count("unpack_table<uint8>") == 1, S.launches
    if impl == B.MMA16 and b_kind != B.QMM_I8:  # the tensor cores forced (auto: stream-m16 with a's zero point)
        assert any(launch[0].startswith("matmul_mma<") for launch in S.launches), S.launches
        assert any(launch[0].startswith("matmul_col_sums<") for launch in S.launches), S.launches


def _qtypes_params():
    from bench import test_bench_qtypes as Q

    return [pytest.param(k, t, g.endswith("-axis1"), Q.dense_of(g), id=g) for g, k, t, impl in Q.GPU_CASES
            if impl == "dmlq:auto"]


@pytest.mark.parametrize("kind,t,per_column,dense", _qtypes_params())
def test_qtypes_builder_runs_on_the_stand_in(gpu, monkeypatch, kind, t, per_column, dense):  # noqa: F811
    """bench/test_bench_qtypes.py's dmlq rows (blocked quantize and dequantize of every narrow
    type, int4 with a scale per column, three types from and to bfloat16), shrunk to 2,048 elements: each builds on the device and
    runs quant_types.cu's kernel."""
    import cupy_stand_in as S
    from bench import test_bench_qtypes as Q

    monkeypatch.setattr(Q, "GPU_N", 2048)
    fn = Q._gpu_fn(kind, t, "dmlq:auto", per_column, dense)
    S.launches.clear()
    fn()
    from dmlq.gpu import qkernels

    want = qkernels.quantize_name(dense, t) if kind == "quantize" else qkernels.dequantize_name(t, dense)
    assert want in [launch[0] for launch in S.launches], (want, S.launches)
