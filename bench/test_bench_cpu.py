"""CPU benchmarks: dmlq's CPU backend (what the public functions run on NumPy
arrays) against onnxruntime's CPU provider and against dmlq.reference, on the
same inputs in the same run (issue 28's shapes).

    DMLQ_CPU_BENCH=1 python -m pytest bench/test_bench_cpu.py --benchmark-json=bench/results/cpu-<date>.json
    python bench/cpu_table.py bench/results/cpu-<date>.json      # the README table

Each group ``op/dtype/shape`` holds these results: ``dmlq:cpu`` (the public
function, e.g. ``dmlq.quantize_linear``), ``peer:onnxruntime-cpu`` (one ONNX node:
QuantizeLinear, DequantizeLinear, com.microsoft QLinearAdd, QLinearMatMul,
com.microsoft QLinearAveragePool; every operand a graph input, as dmlq gets
them per call, so ORT's QLinearMatMul packs b on each run; ORT's default
thread count), ``dmlq:cpu-numpy`` (element-wise groups: the same public function
with dmlq.cpu.jit's numba kernels off, the path a lean install runs) and
``dmlq:reference`` (the NumPy oracle); for the element-wise groups also
``peer:onnxruntime-cpu-1thread`` and ``dmlq:cpu-1thread``, both on one thread (on a
busy shared machine a hand-off between threads can cost more than the call: these
two show the per-thread speed). ``extra_info``
holds DESIGN.md's keys; ``limit`` is onnxruntime's median seconds in this run
(its result runs first in each group) and ``fraction_of_limit`` is
onnxruntime's time over this one (1.0: as fast; the target is >= 1/3).
``peak_rss_bytes`` is how far one call lifts the process's peak resident
memory above what it held with the inputs ready (a fresh subprocess per
result, VmHWM after resetting it through /proc/self/clear_refs, after one small call of
the same group for the one-time set-up); for the NumPy
implementations ``peak_traced_bytes`` is tracemalloc's peak for one call.

Not part of the test suite (testpaths = tests); marked ``cpu`` so it runs without a
GPU, and only when asked (DMLQ_CPU_BENCH=1; under --benchmark-disable each runs once
on small inputs).
"""
from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import dmlq
from dmlq import reference
from dmlq.cpu import jit, tiles

u8, f32 = np.uint8, np.float32
M16 = 16 * 2**20

# group -> (kind, parameters)
GROUPS = {
    "quantize/float32->uint8/16M": ("quantize", dict(n=M16)),
    "dequantize/uint8->float32/16M": ("dequantize", dict(n=M16)),
    "add/uint8+uint8->uint8/16M": ("add", dict(n=M16)),
    "matmul/uint8xuint8->uint8/1024x1024x1024": ("matmul", dict(m=1024, k=1024, n=1024)),
    "matmul/uint8xuint8->uint8/1x4096x11008": ("matmul", dict(m=1, k=4096, n=11008)),
    "matmul/uint8xuint8->uint8/4x64x64": ("matmul", dict(m=4, k=64, n=64)),  # the call's own cost
    "avgpool/uint8/1x64x224x224-2x2s2": ("avgpool", dict(shape=(1, 64, 224, 224), window=2, stride=2, pad=0)),
    "avgpool/uint8/1x64x224x224-3x3s1p1": ("avgpool", dict(shape=(1, 64, 224, 224), window=3, stride=1, pad=1)),
}
IMPLS = ("peer:onnxruntime-cpu", "dmlq:cpu", "dmlq:cpu-numpy", "dmlq:reference",
         "peer:onnxruntime-cpu-1thread", "dmlq:cpu-1thread")
ELEMENTWISE = ("quantize", "dequantize", "add")  # where dmlq:cpu-numpy differs from dmlq:cpu
ONE_THREAD = ("peer:onnxruntime-cpu-1thread", "dmlq:cpu-1thread")  # element-wise groups only
ROUNDS = {"dmlq:reference": 3}  # others: 30 (a shared machine: the fastest rounds are the least disturbed)


def _smoke(kind, p):
    """The same workload at a size that runs in milliseconds (--benchmark-disable)."""
    if kind in ("quantize", "dequantize", "add"):
        return dict(p, n=65536 + 3)
    if kind == "matmul":
        return dict(m=min(p["m"], 33), k=min(p["k"], 300), n=min(p["n"], 70))
    return dict(p, shape=(1, 3, 17, 19))


class Workload:
    """Inputs and the three implementations of one group (``smoke``: small sizes)."""

    def __init__(self, group, seed=0, smoke=False):
        kind, p = GROUPS[group]
        if smoke:
            p = _smoke(kind, p)
        rng = np.random.default_rng(seed)
        self.kind, self.p = kind, p
        s, z = f32(0.02), u8(128)
        self.scalars = dict(s=np.array(s), z=np.array(z))
        if kind == "quantize":
            self.x = (rng.standard_normal(p["n"], dtype=f32) * 2).astype(f32)
            self.bytes, self.ops = p["n"] * 5, p["n"]
        elif kind == "dequantize":
            self.q = rng.integers(0, 256, p["n"], dtype=u8)
            self.bytes, self.ops = p["n"] * 5, p["n"]
        elif kind == "add":
            self.a = rng.integers(0, 256, p["n"], dtype=u8)
            self.b = rng.integers(0, 256, p["n"], dtype=u8)
            self.bytes, self.ops = p["n"] * 3, p["n"]
        elif kind == "matmul":
            m, k, n = p["m"], p["k"], p["n"]
            self.a = rng.integers(0, 256, (m, k), dtype=u8)
            self.b = rng.integers(0, 256, (k, n), dtype=u8)
            self.out_scale = f32(0.02 * 0.02 * 128 * math.sqrt(k) / 40)  # outputs spread, few saturated
            self.bytes, self.ops = m * k + k * n + m * n, 2 * m * n * k
        else:
            self.x = rng.integers(0, 256, p["shape"], dtype=u8)
            w, st, pad = p["window"], p["stride"], p["pad"]
            out_sp = [(h + 2 * pad - w) // st + 1 for h in p["shape"][2:]]
            outputs = p["shape"][0] * p["shape"][1] * math.prod(out_sp)
            self.bytes, self.ops = self.x.size + outputs, outputs * w * w

    # -- dmlq (the public functions) and the reference (the backend function, output allocated per call)
    def dmlq(self):
        k = self.kind
        if k == "quantize":
            return lambda: dmlq.quantize_linear(self.x, 0.02, u8(128))
        if k == "dequantize":
            return lambda: dmlq.dequantize_linear(self.q, 0.02, u8(128))
        if k == "add":
            return lambda: dmlq.quantized_add(self.a, 0.02, u8(128), self.b, 0.03, u8(120), 0.05, u8(128))
        if k == "matmul":
            return lambda: dmlq.quantized_matmul(self.a, 0.02, u8(128), self.b, 0.02, u8(128), self.out_scale,
                                                 u8(128))
        p = self.p
        return lambda: dmlq.quantized_avg_pool(self.x, 0.02, u8(128), 0.02, u8(128), p["window"],
                                               strides=p["stride"], start_padding=p["pad"], end_padding=p["pad"])

    def reference(self):
        k, R = self.kind, reference
        s1 = lambda v: np.array([v], f32)  # noqa: E731
        z1 = np.array([128], u8)
        if k == "quantize":
            return lambda: R.quantize_linear(self.x, np.array(0.02, f32), np.array(128, u8),
                                             np.empty(self.x.shape, u8))
        if k == "dequantize":
            return lambda: R.dequantize_linear(self.q, np.array(0.02, f32), np.array(128, u8),
                                               np.empty(self.q.shape, f32))
        if k == "add":
            return lambda: R.quantized_add(self.a, s1(0.02), z1, self.b, s1(0.03), np.array([120], u8), s1(0.05),
                                           z1, np.empty(self.a.shape, u8))
        if k == "matmul":
            shape = (self.p["m"], self.p["n"])
            return lambda: R.quantized_matmul(self.a, s1(0.02), z1, self.b, s1(0.02), z1, s1(self.out_scale), z1,
                                              np.empty(shape, u8))
        p = self.p
        w, st, pad = p["window"], p["stride"], p["pad"]
        out_shape = p["shape"][:2] + tuple((h + 2 * pad - w) // st + 1 for h in p["shape"][2:])
        return lambda: R.quantized_avg_pool(self.x, s1(0.02), z1, s1(0.02), z1, np.empty(out_shape, u8),
                                            (w, w), (st, st), (pad, pad), (pad, pad), (1, 1), False)

    # -- onnxruntime: one node, every operand an input
    def onnxruntime(self, threads=0):
        ort = pytest.importorskip("onnxruntime")
        from onnx import TensorProto, helper

        k, p = self.kind, self.p
        S = lambda v: np.array(v, f32)  # noqa: E731
        Z = lambda v: np.array(v, u8)   # noqa: E731
        domain, attrs = "", {}
        if k == "quantize":
            op, feeds, out = "QuantizeLinear", [self.x, S(0.02), Z(128)], u8
        elif k == "dequantize":
            op, feeds, out = "DequantizeLinear", [self.q, S(0.02), Z(128)], f32
        elif k == "add":
            op, domain, out = "QLinearAdd", "com.microsoft", u8
            feeds = [self.a, S(0.02), Z(128), self.b, S(0.03), Z(120), S(0.05), Z(128)]
        elif k == "matmul":
            op, out = "QLinearMatMul", u8
            feeds = [self.a, S(0.02), Z(128), self.b, S(0.02), Z(128), S(self.out_scale), Z(128)]
        else:
            op, domain, out = "QLinearAveragePool", "com.microsoft", u8
            feeds = [self.x, S(0.02), Z(128), S(0.02), Z(128)]
            w, st, pad = p["window"], p["stride"], p["pad"]
            attrs = dict(kernel_shape=[w, w], strides=[st, st], pads=[pad] * 4, count_include_pad=0)
        types = {np.dtype(f32): TensorProto.FLOAT, np.dtype(u8): TensorProto.UINT8}
        names = [f"in{i}" for i in range(len(feeds))]
        node = helper.make_node(op, names, ["out"], domain=domain or None, **attrs)
        graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, types[v.dtype], v.shape)
                                               for n, v in zip(names, feeds)],
                                  [helper.make_tensor_value_info("out", types[np.dtype(out)], None)])
        opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = threads  # 0: onnxruntime's default
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        fd = dict(zip(names, feeds))
        return lambda: session.run(None, fd)

    def numpy_path(self):
        """dmlq's public function with dmlq.cpu.jit's numba kernels off: the NumPy path."""
        fn = self.dmlq()

        def run():
            with jit.disabled():
                return fn()
        return run

    def one_thread(self):
        """dmlq's public function on the calling thread only (as DMLQ_CPU_THREADS=1)."""
        fn = self.dmlq()

        def run():
            before, tiles.THREADS = tiles.THREADS, 1
            try:
                return fn()
            finally:
                tiles.THREADS = before
        return run

    def impl(self, name):
        return {"dmlq:cpu": self.dmlq, "dmlq:cpu-numpy": self.numpy_path, "dmlq:reference": self.reference,
                "peer:onnxruntime-cpu": self.onnxruntime, "dmlq:cpu-1thread": self.one_thread,
                "peer:onnxruntime-cpu-1thread": lambda: self.onnxruntime(threads=1)}[name]()


# ----------------------------------------------------------------- peak memory

def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def measure_peak_rss(group, impl):
    """In this process: the impl's first call's peak RSS above the RSS with inputs ready.
    A small call of the same group runs first, so one-time set-up (numba loading its
    compiled kernels, onnxruntime's first session) is not counted as the call's memory."""
    Workload(group, smoke=True).impl(impl)()
    fn = Workload(group).impl(impl)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    fn()
    return _status("VmHWM") - before


def peak_rss(group, impl):
    """measure_peak_rss in a fresh interpreter (None where /proc cannot tell)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1])] +
                                                      sys.path))
    r = subprocess.run([sys.executable, __file__, group, impl], capture_output=True, text=True, env=env,
                       timeout=600)
    try:
        return int(json.loads(r.stdout.strip().splitlines()[-1])["peak_rss_bytes"])
    except Exception:
        return None


def traced_peak(fn):
    fn()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# ----------------------------------------------------------------- the benchmarks

def _dist_version(name):
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _versions():
    import platform

    try:
        import onnxruntime
        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    return {"numpy": np.__version__, "onnxruntime": ort_version, "numba": _dist_version("numba"),
            "jit_active": jit.active(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "loadavg_1_5_15": os.getloadavg()}  # the machine is shared: how busy it was


pytestmark = [pytest.mark.cpu, pytest.mark.benchmark(disable_gc=True)]


_ORT_MEDIAN: dict = {}
CASES = [(g, i) for g in GROUPS for i in IMPLS
         if (i != "dmlq:cpu-numpy" and i not in ONE_THREAD) or GROUPS[g][0] in ELEMENTWISE]


@pytest.mark.parametrize("group, impl", CASES, ids=[f"{g}|{i}" for g, i in CASES])
def test_cpu(benchmark, smoke, group, impl):
    w = Workload(group, smoke=smoke)
    fn = w.impl(impl)
    benchmark.group = group
    benchmark.pedantic(fn, rounds=ROUNDS.get(impl, 30), iterations=1, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable: each implementation ran once
        return
    t = benchmark.stats.stats.median
    one = impl in ONE_THREAD  # compared with the one-thread peer
    if impl.startswith("peer:"):
        _ORT_MEDIAN[group, one] = t
    limit = _ORT_MEDIAN.get((group, one))
    info = {"impl": impl, "bytes": int(w.bytes), "ops": int(w.ops), "gb_per_s": w.bytes / t / 1e9,
            "tops": w.ops / t / 1e12, "limit": limit, "fraction_of_limit": (limit / t) if limit else None,
            "limit_is": f"{ONE_THREAD[0] if one else IMPLS[0]} median seconds, same run",
            "threads": 1 if one else tiles.THREADS,
            "peak_rss_bytes": peak_rss(group, impl), **_versions()}
    if impl.startswith("dmlq:"):
        info["peak_traced_bytes"] = traced_peak(fn)
    benchmark.extra_info.update(info)


if __name__ == "__main__":  # python bench/test_bench_cpu.py GROUP IMPL: one peak-memory measurement
    print(json.dumps({"peak_rss_bytes": measure_peak_rss(sys.argv[1], sys.argv[2])}))
