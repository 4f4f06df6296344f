"""What ``python -m dmlq bench`` needs, shared with the full suite in bench/.

Here: peak formulas, device facts, timing, same-run limits, result records, the
quick groups (:func:`quick_cases`) with the builders that prepare every dmlq
implementation and peer of them, and the quick runner. In bench/ (a checkout
only, not installed): the full suite's workloads (bench/workloads.py), the
pytest-benchmark plumbing and the report (bench/report.py). This module never
imports bench/, and nothing here touches CuPy or a GPU at import time.

Timing: CUDA events recorded on the current stream and synchronized, so every
timed span ends with the GPU work complete. A span holds ``iterations``
back-to-back calls; per-call time is the span over ``iterations``. Inputs are
fresh random data (never zeros: the GPU compresses zero pages), rotated among
several buffers when one set would sit in L2.

Limits, measured or computed in the same run (``Limits``):
  copy     device-to-device copy of a buffer >= 8x L2: 2 * bytes / time (read + write).
  int8 TC  SMs x max clock x dense int8 tensor-core ops per SM per clock (table below).
  dp4a     SMs x max clock x 64 dp4a per SM per clock x 8 ops (4 multiplies + 4 adds).
Environment overrides: DMLQ_BENCH_SM_COUNT, DMLQ_BENCH_CLOCK_MHZ (formula inputs),
DMLQ_BENCH_INT8_TC_TOPS, DMLQ_BENCH_DP4A_TOPS, DMLQ_BENCH_COPY_GBPS (results).

Each result's extra_info is ``result_info(...)``: impl, bytes, ops, gb_per_s,
tops, limit, fraction_of_limit. Element-wise and pooling results are judged in
GB/s against copy bandwidth; matmul in TOPS against the roofline
min(peak, ops * copy_bw / bytes). ``ops`` counts output elements for element-wise
operators, output elements x window taps for pooling, 2*M*N*K for matmul.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib
import importlib.util
import itertools
import json
import math
import os
import statistics
import sys

import numpy as np

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
    from .check import gpu_report

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


# ------------------------------------------------------------------------ timing

class EventClock:
    """A clock (seconds) read from CUDA events on the current stream.

    Each reading records an event and waits for it, so a span between two
    readings covers the GPU work enqueued in between, to completion. Spans are
    summed in float64 from short event intervals, so precision does not decay.
    """

    def __init__(self):
        self._prev = None
        self._total = 0.0

    def __call__(self):
        import cupy

        ev = cupy.cuda.Event()
        ev.record(cupy.cuda.get_current_stream())
        ev.synchronize()
        if self._prev is not None:
            self._total += cupy.cuda.get_elapsed_time(self._prev, ev) / 1e3
        self._prev = ev
        return self._total


_CLOCK = EventClock()


def gpu_timer():
    """pytest-benchmark timer: ``@pytest.mark.benchmark(timer=gpu_timer)``."""
    return _CLOCK()


def plan_iterations(fn, round_s, max_iterations=100_000, clock=gpu_timer):
    """Calls per timed span so that a span lasts about ``round_s``."""
    t0 = clock()
    fn()
    one = max(clock() - t0, 1e-7)
    return max(1, min(max_iterations, math.ceil(round_s / one)))


def measure(fn, *, rounds=10, warmup=1, round_s=0.02, iterations=None, clock=gpu_timer):
    """Per-call seconds of ``fn`` (one list entry per round)."""
    for _ in range(warmup):
        fn()
    iterations = iterations or plan_iterations(fn, round_s, clock=clock)
    times = []
    for _ in range(rounds):
        t0 = clock()
        for _ in range(iterations):
            fn()
        times.append((clock() - t0) / iterations)
    return times


def fill_random(out, seed, lo, hi, integral=False):
    """Fill ``out`` with uniform values in [lo, hi) (floored when integral) from a
    counter hash of (seed, index): one pass, no temporaries, fresh per seed."""
    global _FILL
    import cupy

    if _FILL is None:
        _FILL = cupy.ElementwiseKernel(
            "uint64 seed, float64 lo, float64 span, bool integral", "T y",
            """
            unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ULL;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            z ^= z >> 31;
            double v = lo + span * ((double)(z >> 11) * (1.0 / 9007199254740992.0));
            if (integral) v = floor(v);
            y = (T)(float)v;
            """, "dmlq_bench_fill")
    seed = np.uint64((int(seed) * 0x2545F4914F6CDD1D + 1) % 2**64)
    _FILL(seed, float(lo), float(hi - lo), bool(integral), out)
    return out


_FILL = None


def random_array(shape, dtype, seed, lo=None, hi=None):
    """Fresh random data of ``dtype``: full range for 8-bit ints, [lo, hi) otherwise."""
    import cupy

    dtype = np.dtype(dtype)
    out = cupy.empty(shape, dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo = info.min if lo is None else lo
        hi = info.max + 1 if hi is None else hi
        return fill_random(out, seed, lo, hi, integral=True)
    return fill_random(out, seed, -3.0 if lo is None else lo, 3.0 if hi is None else hi)


def copy_bandwidth(nbytes, *, rounds=10, round_s=0.05, seed=1):
    """Device-to-device copy bandwidth in GB/s, counting read + write."""
    import cupy

    src = random_array((nbytes,), np.uint8, seed)
    dst = cupy.empty_like(src)

    def copy():
        dst.data.copy_from_device_async(src.data, nbytes, cupy.cuda.get_current_stream())

    times = measure(copy, rounds=rounds, round_s=round_s)
    return 2 * nbytes / statistics.median(times) / 1e9


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


def result_info(impl, nbytes, ops, seconds, limit, unit):
    """extra_info of one result: exactly the keys DESIGN.md names."""
    gb_per_s = nbytes / seconds / 1e9
    tops = ops / seconds / 1e12
    achieved = tops if unit == "TOPS" else gb_per_s
    return {"impl": impl, "bytes": int(nbytes), "ops": int(ops), "gb_per_s": gb_per_s, "tops": tops,
            "limit": limit, "fraction_of_limit": (achieved / limit) if limit else None}


# --------------------------------------------------------------------- workloads

@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark group ``op/dtype/shape``; ``p`` holds the workload's parameters."""

    op: str
    dtype: str
    shape: str
    p: dict = dataclasses.field(compare=False, hash=False)
    quick: bool = False
    rounds: int = 10
    round_s: float = 0.02

    @property
    def group(self):
        return f"{self.op}/{self.dtype}/{self.shape}"

    @property
    def unit(self):
        return unit_of(self.group)


def unit_of(group):
    return "TOPS" if group.split("/", 1)[0] == "matmul" else "GB/s"


MiB = 1 << 20
COLS = 4096


def elementwise_case(op, dtype, in_dtype, nbytes, axis=None, quick=False, **p):
    """An element-wise group over a (rows, 4096) array of ``nbytes`` of (first) input."""
    rows = nbytes // np.dtype(in_dtype).itemsize // COLS
    shape = f"{rows}x{COLS}" + (":axis1" if axis else "")
    return Case(op, dtype, shape, dict(shape=(rows, COLS), axis=axis, **p), quick=quick)


OVERHEAD_N = 1024


def matmul_case(m, n, k, quick=False):
    """int8 x int8 -> int8, zero points omitted (what torch._int_mm supports)."""
    return Case("matmul", "int8", f"M={m},N={n},K={k}", dict(M=m, N=n, K=k), quick=quick)


def pool_out_size(n, w, s, sp, ep):
    return (n + sp + ep - w) // s + 1


def avgpool_case(label, shape, window, strides, pad, quick=False):
    """A uint8 pooling group; ``pad`` is both the start and the end padding."""
    out = tuple(pool_out_size(n, w, s, p, p) for n, w, s, p in zip(shape[2:], window, strides, pad))
    return Case("avgpool", "uint8", label, dict(shape=shape, window=window, strides=strides, pad=pad,
                                                  out=shape[:2] + out), quick=quick)


def overhead_case():
    return Case("overhead", "float32->uint8", str(OVERHEAD_N), dict(n=OVERHEAD_N), quick=True,
                rounds=200, round_s=0.002)


def quick_cases():
    """The groups ``python -m dmlq bench`` times: one or more per operator family.

    The full suite's workloads (bench/workloads.py, not installed) include these.
    """
    return [
        elementwise_case("quantize", "float32->uint8", "float32", 256 * MiB, quick=True, x="float32", q="uint8"),
        elementwise_case("dequantize", "uint8->float32", "uint8", 256 * MiB, quick=True, q="uint8", y="float32"),
        elementwise_case("add", "uint8+uint8->uint8", "uint8", 256 * MiB, quick=True, a="uint8", b="uint8",
                         q="uint8"),
        matmul_case(4096, 4096, 4096, quick=True),
        matmul_case(16, 4096, 14336, quick=True),
        matmul_case(2048, 14336, 4096, quick=True),
        avgpool_case("256x256x56x56:k2s2", (256, 256, 56, 56), (2, 2), (2, 2), (0, 0), quick=True),
        avgpool_case("8x64x16x56x56:k2s2", (8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2), (0, 0, 0), quick=True),
        overhead_case(),
    ]
# ----------------------------------------------------------------- implementations

GPU_MODULES = {"quantize": "elementwise", "dequantize": "elementwise", "add": "elementwise",
               "overhead": "elementwise", "matmul": "matmul", "avgpool": "avgpool"}

PEERS = {
    "quantize": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.quantize_per_tensor"),
    "dequantize": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.dequantize"),
    "add": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.dequantize+add+quantize"),
    "matmul": ("peer:torch._int_mm+requant", "peer:torch._int_mm", "peer:cupy-matmul-f16",
               "peer:cupy-matmul-f32"),
    "avgpool": ("peer:cupy-expr", "peer:torch.avg_pool-f16"),
    "overhead": ("peer:cupy-elementwise", "peer:cupy-expr", "peer:torch.quantize_per_tensor"),
    "graph": ("peer:cupy-elementwise-eager", "peer:cupy-elementwise-graph"),
}


class Unavailable(Exception):
    """This implementation cannot run this case here; the message says why."""


def gpu_module(op):
    try:
        return importlib.import_module(f"dmlq.gpu.{GPU_MODULES[op]}")
    except Exception as e:  # noqa: BLE001 - a missing/broken module skips, with its reason
        raise Unavailable(f"dmlq.gpu.{GPU_MODULES[op]} not importable ({type(e).__name__}: {e})") from e


def dmlq_variants(op):
    """The kernel variants of ``op``'s GPU module (empty when it cannot be imported)."""
    if op not in GPU_MODULES:
        return ()
    try:
        return tuple(gpu_module(op).VARIANTS)
    except (Unavailable, AttributeError):
        return ()


def _applicable(case, names):
    """Drop pooling variants that cannot run the case (dmlq.gpu.avgpool.applicable, pure Python)."""
    if case.op != "avgpool":
        return names
    p = case.p
    shape = p["shape"]
    cstrides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    args = (shape, cstrides, p["out"], p["window"], p["strides"], p["pad"], p["pad"],
            (1,) * len(p["window"]), False)
    try:
        check = gpu_module(case.op).applicable
        return tuple(v for v in names if check(v, *args))
    except Exception:  # noqa: BLE001 - without the filter, prepare() skips what does not apply
        return names


def case_impls(cases, variants=True):
    """[(group, impl)] for every implementation of every case (pytest parameters)."""
    return [(c.group, impl) for c in cases for impl in impl_names(c, variants)]


def impl_names(case, variants=True):
    if case.op == "graph":
        dm = ["dmlq:eager", "dmlq:graph"]
    else:
        names = _applicable(case, dmlq_variants(case.op)) if variants else ()
        dm = ["dmlq:auto"] + [f"dmlq:{v}" for v in names]
    peers = list(PEERS[case.op])
    if case.op == "quantize" and case.p.get("axis"):
        peers[-1] = "peer:torch.quantize_per_channel"
    return dm + peers


@dataclasses.dataclass
class Prepared:
    """A ready-to-time call: ``fn()`` enqueues one operation (no sync)."""

    fn: object
    bytes: int
    ops: int
    limit: float | None
    stream: object = None
    keep: object = None  # buffers a captured graph reads and writes


def _need_torch():
    if importlib.util.find_spec("torch") is None:
        raise Unavailable("torch is not installed")
    import cupy
    import torch

    if not torch.cuda.is_available():
        raise Unavailable("torch has no CUDA support here")
    if cupy.cuda.get_current_stream().ptr != 0:  # events are recorded on CuPy's stream
        raise Unavailable("torch peers run on the legacy default stream; CuPy's current stream is another")
    return torch


def _to_torch(arr):
    import torch

    return torch.from_dlpack(arr)


def _rotating(call, sets):
    """A no-argument callable running ``call(*set)`` over ``sets`` in turn."""
    if len(sets) == 1:
        args = sets[0]
        return lambda: call(*args)
    cycle = itertools.cycle(sets)
    return lambda: call(*next(cycle))


def _n_sets(bytes_per_set, limits, cap=16):
    """Enough buffer sets that a round-robin over them streams from HBM, not L2."""
    need = 4 * limits.facts["l2_bytes"]
    return 1 if bytes_per_set >= need else min(cap, math.ceil(need / bytes_per_set))


def _api(name):
    import dmlq

    fn = getattr(dmlq, name, None)
    if fn is None:
        raise Unavailable(f"dmlq.{name} is not defined yet")
    return fn


# dmlq refusing a forced variant (UnsupportedError, DescError) skips; anything else fails.
_DMLQ_SKIPS = (NotImplementedError, ValueError)


def _check_runs(fn, impl):
    """Run once (compiles kernels, surfaces refusals) and wait for the GPU."""
    import cupy

    try:
        fn()
        cupy.cuda.get_current_stream().synchronize()
    except Unavailable:
        raise
    except _DMLQ_SKIPS as e:
        raise Unavailable(f"{impl} refused this case ({type(e).__name__}: {e})") from e
    except Exception as e:
        if impl.startswith("peer:"):  # a peer's limitation, not ours
            raise Unavailable(f"{impl} failed here ({type(e).__name__}: {e})") from e
        raise


def prepare(case, impl, limits, seed):
    """Buffers and a timed callable for ``impl`` on ``case``; raises Unavailable."""
    import cupy

    builder = BUILDERS.get(case.op)
    if builder is None:
        raise Unavailable(f"no builder for {case.op!r} (bench/workloads.py registers the full suite's)")
    prep = builder(case, impl, limits, seed)
    if prep.stream is not None:
        with prep.stream:
            _check_runs(prep.fn, impl)
    else:
        _check_runs(prep.fn, impl)
    cupy.cuda.get_current_stream().synchronize()
    return prep


def _qrange(dtype):
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


# ---- element-wise ------------------------------------------------------------------

_KERNELS: dict = {}


def _cupy_kernel(name):
    """Fused CuPy ElementwiseKernels of the same formulas (the strongest CuPy peer)."""
    import cupy

    if name not in _KERNELS:
        src = {
            "quantize": ("X x, float32 s, int32 zp, float32 qmin, float32 qmax", "Q q",
                         "float r = rintf((float)x / s);"
                         "r = fminf(fmaxf(r, qmin - (float)zp), qmax - (float)zp);"
                         "q = (Q)((int)r + zp);"),
            "dequantize": ("T q, int32 zp, float32 s", "Y y", "y = (Y)((float)((int)q - zp) * s);"),
            "add": ("A a, B b, float32 sa, int32 za, float32 sb, int32 zb, float32 so, int32 zo,"
                    " float32 qmin, float32 qmax", "Q q",
                    "float v = (float)((int)a - za) * sa + (float)((int)b - zb) * sb;"
                    "float r = rintf(v / so);"
                    "r = fminf(fmaxf(r, qmin - (float)zo), qmax - (float)zo);"
                    "q = (Q)((int)r + zo);"),
        }[name]
        _KERNELS[name] = cupy.ElementwiseKernel(*src, f"dmlq_bench_peer_{name}")
    return _KERNELS[name]


def _scale_zp(case, seed, rows_cols, scale_dtype, zp_dtype, scale, zp):
    """Per-tensor (shape (1,)) or per-axis (shape (1, cols)) scale and zero point."""
    import cupy

    if case.p.get("axis"):
        shape = (1, rows_cols[1])
        s = random_array(shape, scale_dtype, seed + 101, 0.5 * scale, 1.5 * scale)
        lo, hi = _qrange(zp_dtype)
        z = random_array(shape, zp_dtype, seed + 202, lo + 32, hi - 31)
        return s, z
    return cupy.full((1,), scale, scale_dtype), cupy.full((1,), zp, zp_dtype)


def _peer_params(s, z):
    """Scalars for per-tensor, int32/float32 arrays for per-axis (set up outside timing)."""
    import cupy

    if s.size == 1:
        return float(s[0]), int(z[0])
    return s.astype(cupy.float32), z.astype(cupy.int32)


def _build_quantize(case, impl, limits, seed):
    import cupy

    p = case.p
    shape, xdt, qdt = p["shape"], np.dtype(p["x"]), np.dtype(p["q"])
    n = shape[0] * shape[1]
    zp0 = 128 if qdt == np.uint8 else -3
    s, z = _scale_zp(case, seed, shape, xdt, qdt, 0.02, zp0)
    per_set = n * (xdt.itemsize + 1) + s.nbytes + z.nbytes
    sets = [(random_array(shape, xdt, seed + 1 + i), cupy.empty(shape, qdt))
            for i in range(_n_sets(per_set, limits))]
    qmin, qmax = _qrange(qdt)
    limit = limits.copy_gb_per_s
    if impl == "dmlq:auto":
        api = _api("quantize_linear")
        return Prepared(_rotating(lambda x, o: api(x, s, z, out=o), sets), per_set, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda x, o: mod.quantize_linear(x, s, z, o, variant=v), sets),
                        per_set, n, limit)
    if impl == "peer:cupy-expr":
        zf = z.astype(cupy.float32)

        def expr(x, o):
            r = cupy.rint(x.astype(cupy.float32) / s.astype(cupy.float32))
            return (cupy.clip(r, qmin - zf, qmax - zf) + zf).astype(qdt)
        return Prepared(_rotating(expr, sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern, (ps, pz) = _cupy_kernel("quantize"), _peer_params(s, z)
        return Prepared(_rotating(lambda x, o: kern(x, ps, pz, qmin, qmax, o), sets), per_set, n, limit)
    torch = _need_torch()
    if xdt != np.float32:
        raise Unavailable(f"{impl} takes float32 input only")
    tq = torch.quint8 if qdt == np.uint8 else torch.qint8
    tsets = [(_to_torch(x),) for x, _ in sets]
    if impl == "peer:torch.quantize_per_tensor":
        fs, fz = float(s[0]), int(z[0])
        return Prepared(_rotating(lambda x: torch.quantize_per_tensor(x, fs, fz, tq), tsets),
                        per_set, n, limit)
    if impl == "peer:torch.quantize_per_channel":
        ts = _to_torch(s.reshape(-1).astype(cupy.float64))
        tz = _to_torch(z.reshape(-1).astype(cupy.int64))
        return Prepared(_rotating(lambda x: torch.quantize_per_channel(x, ts, tz, 1, tq), tsets),
                        per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


def _build_dequantize(case, impl, limits, seed):
    import cupy

    p = case.p
    shape, qdt, ydt = p["shape"], np.dtype(p["q"]), np.dtype(p["y"])
    n = shape[0] * shape[1]
    s, z = _scale_zp(case, seed, shape, ydt, qdt, 0.02, 128 if qdt == np.uint8 else -3)
    per_set = n * (1 + ydt.itemsize) + s.nbytes + z.nbytes
    sets = [(random_array(shape, qdt, seed + 1 + i), cupy.empty(shape, ydt))
            for i in range(_n_sets(per_set, limits))]
    limit = limits.copy_gb_per_s
    if impl == "dmlq:auto":
        api = _api("dequantize_linear")
        return Prepared(_rotating(lambda q, o: api(q, s, z, out=o), sets), per_set, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda q, o: mod.dequantize_linear(q, s, z, o, variant=v), sets),
                        per_set, n, limit)
    if impl == "peer:cupy-expr":
        zi, sf = z.astype(cupy.int32), s.astype(cupy.float32)
        return Prepared(_rotating(lambda q, o: ((q.astype(cupy.int32) - zi).astype(cupy.float32) * sf)
                                  .astype(ydt), sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern, (ps, pz) = _cupy_kernel("dequantize"), _peer_params(s, z)
        return Prepared(_rotating(lambda q, o: kern(q, pz, ps, o), sets), per_set, n, limit)
    if impl == "peer:torch.dequantize":
        torch = _need_torch()
        if ydt != np.float32:
            raise Unavailable("torch dequantize produces float32 only")
        if case.p.get("axis"):
            ts = _to_torch(s.reshape(-1).astype(cupy.float64))
            tz = _to_torch(z.reshape(-1).astype(cupy.int64))
            make = lambda q: torch._make_per_channel_quantized_tensor(_to_torch(q), ts, tz, 1)  # noqa: E731
        else:
            fs, fz = float(s[0]), int(z[0])
            make = lambda q: torch._make_per_tensor_quantized_tensor(_to_torch(q), fs, fz)  # noqa: E731
        try:
            tsets = [(make(q),) for q, _ in sets]
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"{impl}: cannot wrap {qdt} as a torch quantized tensor ({e})") from e
        return Prepared(_rotating(lambda qt: qt.dequantize(), tsets), per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


def _build_add(case, impl, limits, seed):
    import cupy

    p = case.p
    shape = p["shape"]
    adt, bdt, qdt = np.dtype(p["a"]), np.dtype(p["b"]), np.dtype(p["q"])
    n = shape[0] * shape[1]
    zp = lambda dt, v: cupy.full((1,), v if dt == np.uint8 else v - 128, dt)  # noqa: E731
    sa, sb, so = (cupy.full((1,), v, np.float32) for v in (0.02, 0.03, 0.04))
    za, zb, zo = zp(adt, 120), zp(bdt, 131), zp(qdt, 127)
    per_set = 3 * n
    sets = [(random_array(shape, adt, seed + 1 + 2 * i), random_array(shape, bdt, seed + 2 + 2 * i),
             cupy.empty(shape, qdt)) for i in range(_n_sets(per_set, limits))]
    qmin, qmax = _qrange(qdt)
    limit = limits.copy_gb_per_s
    if impl == "dmlq:auto":
        api = _api("quantized_add")
        return Prepared(_rotating(lambda a, b, o: api(a, sa, za, b, sb, zb, so, zo, out=o), sets),
                        per_set, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda a, b, o: mod.quantized_add(a, sa, za, b, sb, zb, so, zo, o,
                                                                   variant=v), sets), per_set, n, limit)
    fa, fb, fo = (float(v[0]) for v in (sa, sb, so))
    ia, ib, io = (int(v[0]) for v in (za, zb, zo))
    if impl == "peer:cupy-expr":
        def expr(a, b, o):
            av = (a.astype(cupy.int32) - ia).astype(cupy.float32) * np.float32(fa)
            bv = (b.astype(cupy.int32) - ib).astype(cupy.float32) * np.float32(fb)
            r = cupy.rint((av + bv) / np.float32(fo))
            return (cupy.clip(r, qmin - io, qmax - io) + io).astype(qdt)
        return Prepared(_rotating(expr, sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern = _cupy_kernel("add")
        return Prepared(_rotating(lambda a, b, o: kern(a, b, fa, ia, fb, ib, fo, io, qmin, qmax, o), sets),
                        per_set, n, limit)
    if impl == "peer:torch.dequantize+add+quantize":
        torch = _need_torch()
        tq = torch.quint8 if qdt == np.uint8 else torch.qint8
        try:
            tsets = [(torch._make_per_tensor_quantized_tensor(_to_torch(a), fa, ia),
                      torch._make_per_tensor_quantized_tensor(_to_torch(b), fb, ib)) for a, b, _ in sets]
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"{impl}: cannot wrap the inputs as torch quantized tensors ({e})") from e
        return Prepared(_rotating(lambda a, b: torch.quantize_per_tensor(a.dequantize() + b.dequantize(),
                                                                          fo, io, tq), tsets),
                        per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


# ---- matmul ------------------------------------------------------------------------

def _roofline(peak, ops, nbytes, limits):
    """Attainable TOPS: the lower of the compute peak and what copy bandwidth feeds."""
    memory = ops / (nbytes / (limits.copy_gb_per_s * 1e9)) / 1e12
    return memory if peak is None else min(peak, memory)


def _build_matmul(case, impl, limits, seed):
    import cupy

    m, n, k = case.p["M"], case.p["N"], case.p["K"]
    ops = 2 * m * n * k
    i8 = np.dtype(np.int8)
    sa, sb = 0.02, 0.01
    so = sa * sb * math.sqrt(k) * 74 * 74 / 32  # outputs spread over about +-100
    a_s, b_s, o_s = (cupy.full((1,), v, np.float32) for v in (sa, sb, so))
    logical = m * k + k * n + m * n
    peak = limits.int8_tc_tops
    if impl.startswith("dmlq:") and impl[5:].startswith("dp4a"):
        peak = limits.dp4a_tops

    def int8_sets(b_transposed=False):
        count = _n_sets(logical, limits)
        return [(random_array((m, k), i8, seed + 2 * i), random_array((n, k) if b_transposed else (k, n),
                                                                       i8, seed + 2 * i + 1),
                 cupy.empty((m, n), i8)) for i in range(count)]

    if impl == "dmlq:auto":
        api = _api("quantized_matmul")
        return Prepared(_rotating(lambda a, b, o: api(a, a_s, None, b, b_s, None, o_s, None, out=o),
                                  int8_sets()), logical, ops, _roofline(peak, ops, logical, limits))
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda a, b, o: mod.quantized_matmul(a, a_s, None, b, b_s, None, o_s, None,
                                                                      o, variant=v), int8_sets()),
                        logical, ops, _roofline(peak, ops, logical, limits))
    if impl.startswith("peer:cupy-matmul-"):
        fdt = np.dtype(np.float16 if impl.endswith("f16") else np.float32)
        nbytes = logical * fdt.itemsize
        sets = []
        for i in range(_n_sets(nbytes, limits)):
            a = random_array((m, k), i8, seed + 2 * i).astype(fdt) * fdt.type(sa)
            b = random_array((k, n), i8, seed + 2 * i + 1).astype(fdt) * fdt.type(sb)
            sets.append((a, b, cupy.empty((m, n), fdt)))
        return Prepared(_rotating(lambda a, b, o: cupy.matmul(a, b, out=o), sets), nbytes, ops,
                        _roofline(peak, ops, nbytes, limits))
    torch = _need_torch()
    if not hasattr(torch, "_int_mm"):
        raise Unavailable("this torch has no torch._int_mm")
    # torch gets its preferred layout: B column-major (an (N, K) weight, transposed).
    tsets = [(_to_torch(a), _to_torch(bt).t()) for a, bt, _ in int8_sets(b_transposed=True)]
    mult = sa * sb / so
    if impl == "peer:torch._int_mm":
        nbytes = m * k + k * n + 4 * m * n
        return Prepared(_rotating(torch._int_mm, tsets), nbytes, ops, _roofline(peak, ops, nbytes, limits))
    if impl == "peer:torch._int_mm+requant":
        def int_mm_requant(a, b):
            c = torch._int_mm(a, b)
            return c.to(torch.float32).mul_(mult).round_().clamp_(-128, 127).to(torch.int8)
        return Prepared(_rotating(int_mm_requant, tsets), logical, ops, _roofline(peak, ops, logical, limits))
    raise Unavailable(f"unknown implementation {impl}")


# ---- average pooling --------------------------------------------------------------

def _pool_count(in_spatial, window, strides, pad, out_spatial):
    """Taps inside the input per output position (IncludePadding false), float32."""
    import cupy

    ones = cupy.pad(cupy.ones(in_spatial, cupy.float32), [(q, q) for q in pad])
    count = cupy.zeros(out_spatial, cupy.float32)
    for taps in itertools.product(*(range(w) for w in window)):
        count += ones[tuple(slice(t, t + (o - 1) * s + 1, s) for t, o, s in zip(taps, out_spatial, strides))]
    return count


def _build_avgpool(case, impl, limits, seed):
    import cupy

    p = case.p
    shape, out_shape, window, strides, pad = p["shape"], p["out"], p["window"], p["strides"], p["pad"]
    u8 = np.dtype(np.uint8)
    n_in, n_out = math.prod(shape), math.prod(out_shape)
    ops = n_out * math.prod(window)
    xs, xz, os_, oz = (cupy.full((1,), v, dt) for v, dt in
                       ((0.05, np.float32), (128, u8), (0.05, np.float32), (128, u8)))
    per_set = n_in + n_out
    limit = limits.copy_gb_per_s
    dil = (1,) * len(window)

    def sets(dtype=u8, itemsize=1):
        count = _n_sets(per_set * itemsize, limits)
        out = []
        for i in range(count):
            x = random_array(shape, u8, seed + i)
            if dtype != u8:
                x = ((x.astype(cupy.int32) - 128).astype(cupy.float32) * np.float32(0.05)).astype(dtype)
            out.append((x, cupy.empty(out_shape, dtype)))
        return out

    if impl == "dmlq:auto":
        api = _api("quantized_avg_pool")
        return Prepared(_rotating(lambda x, o: api(x, xs, xz, os_, oz, window, strides=strides,
                                                   start_padding=pad, end_padding=pad, dilations=dil,
                                                   include_padding=False, out=o), sets()),
                        per_set, ops, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda x, o: mod.quantized_avg_pool(x, xs, xz, os_, oz, o, window, strides,
                                                                     pad, pad, dil, False, variant=v),
                                  sets()), per_set, ops, limit)
    if impl == "peer:cupy-expr":
        count = _pool_count(shape[2:], window, strides, pad, out_shape[2:])
        widths = [(0, 0), (0, 0)] + [(q, q) for q in pad]

        def expr(x, o):
            xp = cupy.pad(x.astype(cupy.int32) - 128, widths)
            acc = None
            for taps in itertools.product(*(range(w) for w in window)):
                tap = xp[(slice(None), slice(None)) + tuple(
                    slice(t, t + (q - 1) * s + 1, s) for t, q, s in zip(taps, out_shape[2:], strides))]
                acc = tap.copy() if acc is None else acc.__iadd__(tap)
            v = acc.astype(cupy.float32) * np.float32(0.05) / count
            return (cupy.clip(cupy.rint(v / np.float32(0.05)), -128, 127) + 128).astype(u8)
        return Prepared(_rotating(expr, sets()), per_set, ops, limit)
    if impl == "peer:torch.avg_pool-f16":
        torch = _need_torch()
        pool = torch.nn.functional.avg_pool2d if len(window) == 2 else torch.nn.functional.avg_pool3d
        tsets = [(_to_torch(x),) for x, _ in sets(np.dtype(np.float16), 2)]
        return Prepared(_rotating(lambda x: pool(x, window, strides, pad, count_include_pad=False), tsets),
                        2 * per_set, ops, limit)
    raise Unavailable(f"unknown implementation {impl}")


# ---- Python overhead on a tiny array ------------------------------------------------

def overhead_reference(limits, seed=7):
    """GB/s of CuPy's own ElementwiseKernel call on the tiny overhead input (cached)."""
    if limits.overhead_reference_gb_per_s is None:
        import cupy

        n = OVERHEAD_N
        x = random_array((n,), np.float32, seed)
        out = cupy.empty((n,), np.uint8)
        kern = _cupy_kernel("quantize")
        times = measure(lambda: kern(x, 0.02, 128, 0, 255, out), rounds=50, round_s=0.002, warmup=100)
        limits.overhead_reference_gb_per_s = 5 * n / statistics.median(times) / 1e9
    return limits.overhead_reference_gb_per_s


def _build_overhead(case, impl, limits, seed):
    import cupy

    n = case.p["n"]
    x = random_array((n,), np.float32, seed)
    out = cupy.empty((n,), np.uint8)
    s, z = cupy.full((1,), 0.02, np.float32), cupy.full((1,), 128, np.uint8)
    limit = overhead_reference(limits)
    nbytes = 5 * n
    if impl == "dmlq:auto":
        api = _api("quantize_linear")
        return Prepared(lambda: api(x, s, z, out=out), nbytes, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module("overhead"), impl[5:]
        return Prepared(lambda: mod.quantize_linear(x, s, z, out, variant=v), nbytes, n, limit)
    if impl == "peer:cupy-elementwise":
        kern = _cupy_kernel("quantize")
        return Prepared(lambda: kern(x, 0.02, 128, 0, 255, out), nbytes, n, limit)
    if impl == "peer:cupy-expr":
        return Prepared(lambda: (cupy.clip(cupy.rint(x / s), -128, 127) + 128).astype(np.uint8), nbytes, n, limit)
    if impl == "peer:torch.quantize_per_tensor":
        torch = _need_torch()
        tx = _to_torch(x)
        return Prepared(lambda: torch.quantize_per_tensor(tx, 0.02, 128, torch.quint8), nbytes, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


# op -> builder(case, impl, limits, seed) -> Prepared. bench/workloads.py adds the
# builders of the full suite's extra families (the CUDA graph sequence).
BUILDERS = {"quantize": _build_quantize, "dequantize": _build_dequantize, "add": _build_add,
            "matmul": _build_matmul, "avgpool": _build_avgpool, "overhead": _build_overhead}


def free_memory():
    """Hand cached blocks back between benchmarks (CuPy's pool and torch's)."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()




# ------------------------------------------------------------- quick runner (CLI)

def format_time(seconds):
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


QUICK_HEADER = ["group", "implementation", "time", "achieved", "limit", "% of limit"]


def quick_table(entries):
    """One line per measured implementation, in the order measured (no cross-run summary:
    that is bench/report.py's job on a pytest-benchmark JSON)."""
    def num(v):
        return "-" if v is None else f"{v:,.1f}" if v >= 10 else f"{v:.3g}"

    cells = [QUICK_HEADER]
    for e in entries:
        info, group = e["extra_info"], e["group"]
        unit = unit_of(group)
        achieved = info.get("tops" if unit == "TOPS" else "gb_per_s")
        frac = info.get("fraction_of_limit")
        cells.append([group, info["impl"], format_time(e["stats"]["median"]), f"{num(achieved)} {unit}",
                      f"{num(info.get('limit'))} {unit}", "-" if frac is None else f"{100 * frac:.1f}%"])
    widths = [max(len(c[i]) for c in cells) for i in range(len(QUICK_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_quick(cases, *, variants=False, rounds=5, log=print):
    """Measure ``cases`` (dmlq:auto and the peers unless ``variants``); returns (limits, entries)."""
    limits = measure_limits(quick=True)
    entries = []
    for case in cases:
        for impl in impl_names(case, variants=variants):
            seed = np.random.SeedSequence().entropy % 2**32
            try:
                prep = prepare(case, impl, limits, seed)
            except Unavailable as e:
                log(f"  skip {case.group} {impl}: {e}")
                continue
            import cupy

            ctx = prep.stream if prep.stream is not None else cupy.cuda.get_current_stream()
            with ctx:
                times = measure(prep.fn, rounds=rounds if case.rounds <= 10 else 20, warmup=1,
                                round_s=min(case.round_s, 0.01))
            t = statistics.median(times)
            entries.append({"group": case.group, "stats": {"median": t, "min": min(times)},
                            "extra_info": result_info(impl, prep.bytes, prep.ops, t, prep.limit, case.unit)})
            del prep
            free_memory()
    return limits, entries


def run(only="", variants=False, json_path=None) -> int:
    """``python -m dmlq bench``: a quick table of the quick groups against the same-run limits."""
    ok, why = gpu_status()
    if not ok:
        print(f"dmlq bench: {why}; nothing to measure (the benchmarks need a CUDA GPU).")
        return 0
    cases = [c for c in quick_cases() if only in c.group]
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    limits, entries = run_quick(cases, variants=variants, log=log)
    info = machine_info(limits)
    lim = limits.as_dict()
    print(f"{info['gpu']} (sm_{info['compute_capability'].replace('.', '')}), driver {info['driver']}, "
          f"CUDA runtime {info['cuda_runtime']}, CuPy {info['cupy']}, torch {info['torch'] or 'absent'}; "
          f"{info['date']}")
    tc = lim["int8_tc_tops"]
    print(f"limits: copy {lim['copy_gb_per_s']:,.0f} GB/s; int8 tensor cores "
          f"{'unknown' if tc is None else f'{tc:,.0f} TOPS'} ({lim['int8_tc_source']}); "
          f"dp4a {'unknown' if lim['dp4a_tops'] is None else format(lim['dp4a_tops'], ',.0f') + ' TOPS'}")
    print()
    print(quick_table(entries))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine_info": info, "benchmarks": entries}, f, indent=2)
    return 0


def add_arguments(parser) -> None:
    """The options of ``python -m dmlq bench`` (shared with the CLI's subcommand)."""
    parser.add_argument("--only", default="", help="run only groups whose name contains this text")
    parser.add_argument("--variants", action="store_true", help="also time every forced kernel variant")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def main(argv=None) -> int:
    """``python -m dmlq bench [options]`` from Python (the options as a list)."""
    parser = argparse.ArgumentParser(prog="python -m dmlq bench")
    add_arguments(parser)
    ns = parser.parse_args(argv)
    return run(only=ns.only, variants=ns.variants, json_path=ns.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
