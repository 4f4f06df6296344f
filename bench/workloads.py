"""The full benchmark suite's workloads: every group ``op/dtype/shape`` the
pytest-benchmark tests in bench/ time, and the CUDA-graph sequence builder.

``python -m dmlq bench`` needs only the quick groups, which live in the
installed package (``dmlq.bench.quick_cases``); this file adds the rest and is
not installed. Every quick group is one of these (tests/test_bench_report.py).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

try:
    from dmlq import bench as B
except ImportError:  # run from a checkout without PYTHONPATH: the repo root is bench/..
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dmlq import bench as B

MiB = B.MiB
_QUICK = {c.group for c in B.quick_cases()}


def _quick(case):
    """``case`` marked quick when ``python -m dmlq bench`` times it too."""
    return B.dataclasses.replace(case, quick=case.group in _QUICK)


def elementwise_cases():
    """Quantize / dequantize / add with 256 MiB and 1 GiB of (first) input."""
    ew = B.elementwise_case
    cases = []
    for nbytes in (256 * MiB, 1024 * MiB):
        cases += [
            ew("quantize", "float32->uint8", "float32", nbytes, x="float32", q="uint8"),
            ew("quantize", "float16->int8", "float16", nbytes, x="float16", q="int8"),
            ew("dequantize", "uint8->float32", "uint8", nbytes, q="uint8", y="float32"),
            ew("dequantize", "int8->float16", "int8", nbytes, q="int8", y="float16"),
            ew("add", "uint8+uint8->uint8", "uint8", nbytes, a="uint8", b="uint8", q="uint8"),
            ew("add", "int8+uint8->int8", "uint8", nbytes, a="int8", b="uint8", q="int8"),
        ]
    cases += [  # per-axis scale and zero point (a (1, 4096) row vector)
        ew("quantize", "float32->uint8", "float32", 256 * MiB, axis=1, x="float32", q="uint8"),
        ew("dequantize", "uint8->float32", "uint8", 256 * MiB, axis=1, q="uint8", y="float32"),
    ]
    return [_quick(c) for c in cases]


LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336))


def matmul_cases():
    """int8 x int8 -> int8, zero points omitted (what torch._int_mm supports)."""
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    shapes += [(m, n, k) for m in (16, 128, 2048) for n, k in LLM_NK]
    return [_quick(B.matmul_case(m, n, k)) for m, n, k in shapes]


POOLS = (  # label, input shape, window, strides, padding (start = end)
    ("64x64x112x112:k3s2p1", (64, 64, 112, 112), (3, 3), (2, 2), (1, 1)),
    ("256x256x56x56:k2s2", (256, 256, 56, 56), (2, 2), (2, 2), (0, 0)),
    ("64x256x56x56:k3s1p1", (64, 256, 56, 56), (3, 3), (1, 1), (1, 1)),
    ("8x64x16x56x56:k2s2", (8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2), (0, 0, 0)),
)


def avgpool_cases():
    return [_quick(B.avgpool_case(*p)) for p in POOLS]


def overhead_cases():
    return [B.overhead_case()]


GRAPH_SHAPE = (256, 1024)
GRAPH_REPEAT = 4


def graph_cases():
    r, c = GRAPH_SHAPE
    return [B.Case("graph", "float32->uint8->float32", f"{r}x{c}:x{GRAPH_REPEAT}",
                   dict(shape=GRAPH_SHAPE, repeat=GRAPH_REPEAT), rounds=50, round_s=0.005)]


def all_cases():
    return elementwise_cases() + matmul_cases() + avgpool_cases() + overhead_cases() + graph_cases()


def find_case(group):
    for case in all_cases():
        if case.group == group:
            return case
    raise KeyError(group)


# ---- CUDA graph of a sequence of calls ---------------------------------------------

def _graph_sequence(impl, shape, repeat, seed):
    """(enqueue-the-sequence callable, final output): quantize -> add -> dequantize, ``repeat`` times."""
    import cupy

    x = B.random_array(shape, np.float32, seed)
    q, r, y = cupy.empty(shape, np.uint8), cupy.empty(shape, np.uint8), cupy.empty(shape, np.float32)
    s, z = cupy.full((1,), 0.02, np.float32), cupy.full((1,), 128, np.uint8)
    so = cupy.full((1,), 0.04, np.float32)
    if impl.startswith("dmlq:"):
        import dmlq

        if all(hasattr(dmlq, f) for f in ("quantize_linear", "quantized_add", "dequantize_linear")):
            step = (lambda: dmlq.quantize_linear(x, s, z, out=q),
                    lambda: dmlq.quantized_add(q, s, z, q, s, z, so, z, out=r),
                    lambda: dmlq.dequantize_linear(r, so, z, out=y))
        else:
            mod = B.gpu_module("quantize")
            step = (lambda: mod.quantize_linear(x, s, z, q),
                    lambda: mod.quantized_add(q, s, z, q, s, z, so, z, r),
                    lambda: mod.dequantize_linear(r, so, z, y))
    else:
        kq, ka, kd = B._cupy_kernel("quantize"), B._cupy_kernel("add"), B._cupy_kernel("dequantize")
        step = (lambda: kq(x, 0.02, 128, 0, 255, q),
                lambda: ka(q, q, 0.02, 128, 0.02, 128, 0.04, 128, 0, 255, r),
                lambda: kd(r, 128, 0.04, y))

    def run():
        for _ in range(repeat):
            for f in step:
                f()
    return run, y, 5 * x.size * repeat * 3  # about 5 bytes per element per op


def _build_graph(case, impl, limits, seed):
    import cupy

    shape, repeat = case.p["shape"], case.p["repeat"]
    stream = cupy.cuda.Stream(non_blocking=True)
    n_ops = math.prod(shape) * 3 * repeat
    with stream:
        run, y, nbytes = _graph_sequence(impl, shape, repeat, seed)
        B._check_runs(run, impl)  # compiles and allocates everything before capture
        if not impl.endswith("graph"):
            return B.Prepared(run, nbytes, n_ops, limits.copy_gb_per_s, stream)
        eager = y.copy()
        stream.synchronize()
        stream.begin_capture()
        try:
            run()
        finally:
            graph = stream.end_capture()
        y.fill(0)
        graph.launch(stream)
        stream.synchronize()
        if not bool(cupy.array_equal(y, eager)):
            raise AssertionError(f"{impl}: the graph replay differs from the eager sequence")
    return B.Prepared(lambda: graph.launch(stream), nbytes, n_ops, limits.copy_gb_per_s, stream,
                    keep=(run, y, graph))


B.BUILDERS.setdefault("graph", _build_graph)
prepare = B.prepare
