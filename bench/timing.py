"""Timing and result records for the benchmark suite.

Timing: CUDA events recorded on the current stream and synchronized, so every
timed span ends with the GPU work complete. A span holds ``iterations``
back-to-back calls; per-call time is the span over ``iterations``. Inputs are
fresh random data (never zeros: the GPU compresses zero pages).

Each result's extra_info is ``result_info(...)``: impl, bytes, ops, gb_per_s,
tops, limit, fraction_of_limit. Element-wise and pooling results are judged in
GB/s against copy bandwidth; matmul in TOPS against the roofline
min(peak, ops * copy_bw / bytes). ``ops`` counts output elements for element-wise
operators, output elements x window taps for pooling, 2*M*N*K for matmul.
"""
from __future__ import annotations

import math
import statistics

import numpy as np


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


def result_info(impl, nbytes, ops, seconds, limit, unit):
    """extra_info of one result: exactly the keys DESIGN.md names."""
    gb_per_s = nbytes / seconds / 1e9
    tops = ops / seconds / 1e12
    achieved = tops if unit == "TOPS" else gb_per_s
    return {"impl": impl, "bytes": int(nbytes), "ops": int(ops), "gb_per_s": gb_per_s, "tops": tops,
            "limit": limit, "fraction_of_limit": (achieved / limit) if limit else None}


def format_time(seconds):
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
