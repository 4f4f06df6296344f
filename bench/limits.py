"""Same-run limits: peak formulas, device facts, the copy-bandwidth measurement and
the session's cached Limits.

Limits, measured or computed in the same run (``Limits``):
  copy     device-to-device copy of a buffer >= 8x L2: 2 * bytes / time (read + write).
  int8 TC  SMs x max clock x dense int8 tensor-core ops per SM per clock (table below).
  dp4a     SMs x max clock x 64 dp4a per SM per clock x 8 ops (4 multiplies + 4 adds).
Environment overrides: DMLQ_BENCH_SM_COUNT, DMLQ_BENCH_CLOCK_MHZ (formula inputs),
DMLQ_BENCH_INT8_TC_TOPS, DMLQ_BENCH_DP4A_TOPS, DMLQ_BENCH_COPY_GBPS (results).

The pytest session measures them once (:func:`get`), so every result and the
JSON's machine_info carry the same figures.

    python bench/limits.py     # print this device's limits as JSON
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script (python bench/limits.py): the checkout's root first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.timing import copy_bandwidth  # noqa: E402


# ----------------------------------------------------------------- peak formulas

# Dense int8 tensor-core ops (a multiply-add counts 2) per SM per clock, derived
# from NVIDIA datasheet peaks as TOPS / (SMs x boost clock):
#   sm_75 T4        130 TOPS / (40 SMs x 1.59 GHz)   = 2044 -> 2048
#   sm_80 A100      624 TOPS / (108 SMs x 1.41 GHz)  = 4098 -> 4096 (2048 MACs: 4 TCs x 512)
#   sm_86 A10       250 TOPS / (72 SMs x 1.695 GHz)  = 2048
#   sm_89 L4      242.5 TOPS / (58 SMs x 2.04 GHz)   = 2049 -> 2048
#   sm_90 H100 SXM 1979 TOPS / (132 SMs x 1.83 GHz)  = 8193 -> 8192 (4096 MACs)
# The device's ClockRate is its maximum boost clock (H100 SXM reports 1980 MHz,
# giving 2141 TOPS, a stricter limit than the datasheet's 1.83 GHz figure; set
# DMLQ_BENCH_CLOCK_MHZ=1830 to reproduce that). Other architectures: unknown
# (None) unless DMLQ_BENCH_INT8_TC_TOPS is set.
INT8_TC_OPS_PER_SM_CLK = {(7, 5): 2048, (8, 0): 4096, (8, 6): 2048, (8, 9): 2048, (9, 0): 8192}
DP4A_PER_SM_CLK = 64      # dp4a instructions issued per SM per clock (sm_61+)
OPS_PER_DP4A = 8          # 4 multiplies + 4 adds

ENV_SM_COUNT = "DMLQ_BENCH_SM_COUNT"
ENV_CLOCK_MHZ = "DMLQ_BENCH_CLOCK_MHZ"
ENV_INT8_TC_TOPS = "DMLQ_BENCH_INT8_TC_TOPS"
ENV_DP4A_TOPS = "DMLQ_BENCH_DP4A_TOPS"
ENV_COPY_GBPS = "DMLQ_BENCH_COPY_GBPS"


def int8_tc_ops_per_sm_clk(cc):
    """Dense int8 tensor-core ops per SM per clock for compute capability ``cc``, or None."""
    return INT8_TC_OPS_PER_SM_CLK.get(tuple(cc))


def dp4a_ops_per_sm_clk(cc):
    return DP4A_PER_SM_CLK * OPS_PER_DP4A if tuple(cc) >= (6, 1) else None


def peak_tops(sm_count, clock_khz, ops_per_sm_clk):
    """SMs x clock x ops per SM per clock, in TOPS (1e12 ops/s)."""
    return sm_count * clock_khz * 1e3 * ops_per_sm_clk / 1e12


def peaks(facts, env=None):
    """{"int8_tc_tops", "int8_tc_source", "dp4a_tops", "dp4a_source", "sm_count", "clock_mhz"}."""
    env = os.environ if env is None else env
    sms = int(env.get(ENV_SM_COUNT) or facts["sm_count"])
    clock_khz = float(env[ENV_CLOCK_MHZ]) * 1e3 if env.get(ENV_CLOCK_MHZ) else float(facts["clock_khz"])
    out = {"sm_count": sms, "clock_mhz": clock_khz / 1e3}
    for key, env_key, per_clk in (("int8_tc", ENV_INT8_TC_TOPS, int8_tc_ops_per_sm_clk(facts["cc"])),
                                  ("dp4a", ENV_DP4A_TOPS, dp4a_ops_per_sm_clk(facts["cc"]))):
        if env.get(env_key):
            out[key + "_tops"] = float(env[env_key])
            out[key + "_source"] = f"env {env_key}"
        elif per_clk is None:
            out[key + "_tops"] = None
            out[key + "_source"] = f"unknown for sm_{facts['cc'][0]}{facts['cc'][1]} (set {env_key})"
        else:
            out[key + "_tops"] = peak_tops(sms, clock_khz, per_clk)
            out[key + "_source"] = f"{sms} SMs x {clock_khz / 1e3:g} MHz x {per_clk} ops/clk/SM"
    return out


# ------------------------------------------------------------------ device facts

@functools.lru_cache(maxsize=None)
def gpu_status():
    """(True, "") when CuPy sees a CUDA GPU, else (False, why). Asked once per process."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure means no GPU here
        return False, f"CuPy is not importable ({type(e).__name__}: {e})"
    from dmlq.check import gpu_report

    _, gpus, why = gpu_report()
    return (True, "") if gpus else (False, f"no CUDA GPU ({why})")


def _cuda_version(v):
    return f"{v // 1000}.{(v % 1000) // 10}"


def _driver_version():
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def device_facts():
    """Name, compute capability, SM count, max clock, L2 and versions of the current device."""
    import cupy

    dev = cupy.cuda.Device()
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(dev.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    attr = lambda a: rt.deviceGetAttribute(a, dev.id)  # noqa: E731
    driver_api = rt.driverGetVersion()
    driver = _driver_version()
    return {
        "gpu": name,
        # CuPy 14 exposes no cudaDevAttrComputeCapabilityMajor/Minor; its Device says "90"
        "cc": (int(dev.compute_capability[:-1]), int(dev.compute_capability[-1])),
        "sm_count": attr(rt.cudaDevAttrMultiProcessorCount),
        "clock_khz": attr(rt.cudaDevAttrClockRate),
        "l2_bytes": attr(rt.cudaDevAttrL2CacheSize),
        "memory_bytes": dev.mem_info[1],
        "driver": f"{driver} (CUDA {_cuda_version(driver_api)})" if driver else f"CUDA {_cuda_version(driver_api)}",
        "cuda_runtime": _cuda_version(rt.runtimeGetVersion()),
        "cupy": cupy.__version__,
    }


def torch_version():
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch.__version__


def machine_info(limits=None):
    """The GPU part of pytest-benchmark's machine_info (plus this run's limits)."""
    ok, why = gpu_status()
    if not ok:
        return {"gpu": None, "gpu_unavailable": why, "torch": torch_version()}
    f = device_facts()
    info = {"gpu": f["gpu"], "compute_capability": "%d.%d" % f["cc"], "sm_count": f["sm_count"],
            "max_clock_mhz": f["clock_khz"] / 1e3, "l2_bytes": f["l2_bytes"], "driver": f["driver"],
            "cuda_runtime": f["cuda_runtime"], "cupy": f["cupy"], "torch": torch_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if limits is not None:
        info["dmlq_limits"] = limits.as_dict()
    return info


@dataclasses.dataclass
class Limits:
    """The figures every result is judged against, all from this run."""

    facts: dict
    copy_gb_per_s: float
    copy_source: str
    peaks: dict
    overhead_reference_gb_per_s: float | None = None

    @property
    def int8_tc_tops(self):
        return self.peaks["int8_tc_tops"]

    @property
    def dp4a_tops(self):
        return self.peaks["dp4a_tops"]

    def as_dict(self):
        d = {"copy_gb_per_s": self.copy_gb_per_s, "copy_source": self.copy_source}
        d.update(self.peaks)
        d["l2_bytes"] = self.facts["l2_bytes"]
        if self.overhead_reference_gb_per_s is not None:
            d["overhead_reference_gb_per_s"] = self.overhead_reference_gb_per_s
        return d


def measure_limits(*, quick=False, env=None):
    import cupy

    env = os.environ if env is None else env
    facts = device_facts()
    if env.get(ENV_COPY_GBPS):
        copy, source = float(env[ENV_COPY_GBPS]), f"env {ENV_COPY_GBPS}"
    else:
        free = cupy.cuda.Device().mem_info[0]
        nbytes = max(8 * facts["l2_bytes"], (256 if quick else 1024) << 20)
        nbytes = min(nbytes, free // 4) // 4096 * 4096
        copy = copy_bandwidth(nbytes, rounds=5 if quick else 20)
        source = f"measured: device-to-device copy of {nbytes >> 20} MiB, 2 x bytes / median time"
        cupy.get_default_memory_pool().free_all_blocks()
    return Limits(facts, copy, source, peaks(facts, env))


# ------------------------------------------------------------------ the session's limits

_limits = None


def get():
    """The session's Limits, measured on first use (copy bandwidth takes about a second)."""
    global _limits
    if _limits is None:
        _limits = measure_limits()
    return _limits


def current():
    """The Limits measured so far in this session, or None."""
    return _limits


def main() -> int:
    ok, why = gpu_status()
    if not ok:
        print(f"no limits to measure: {why}")
        return 0
    print(json.dumps({"machine_info": machine_info(get())}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
