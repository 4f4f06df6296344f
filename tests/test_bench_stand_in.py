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
    if case.op in ("quantize", "dequantize", "add"):
        p["shape"] = (3, 256)
    elif case.op == "matmul":
        p.update(M=min(case.p["M"], 16) + 1, N=64, K=96)
    elif case.op == "avgpool":
        shape = (2, 3) + (9,) * (len(case.p["shape"]) - 2)
        p["shape"] = shape
        p["out"] = shape[:2] + tuple(W.pool_out_size(n, w, s, q, q) for n, w, s, q in
                                     zip(shape[2:], case.p["window"], case.p["strides"], case.p["pad"]))
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
