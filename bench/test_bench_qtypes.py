"""The types beyond int8 (issue 25): quantize float32 -> T and dequantize T -> float, blocked
scales (32 along the last axis), for every ONNX 21-25 type.

GPU (skips without one): 64 Mi elements (256 MiB of float32; int4 also with a scale per column,
``-axis1``), ``dmlq:auto`` (the public
function on CuPy arrays / dmlq.Packed) against the same-run copy bandwidth, counted on the
real bytes (float side + packed side + scales), and the peers that have the type: torch's
float8 casts (``peer:torch-float8``, per-tensor-free: x / s expanded, then ``.to(float8)``),
a CuPy expression for int8/int16/uint16 (``peer:cupy-expr``).

CPU (marked ``cpu``; runs when asked, DMLQ_CPU_BENCH=1, and once on small inputs under
--benchmark-disable): 4 Mi elements, ``dmlq:cpu`` (the public function on NumPy arrays)
against onnxruntime's CPU provider in the same run (one QuantizeLinear / DequantizeLinear
node, optimizations off, the output left in ORT's memory through IOBinding so no conversion
is timed; ``limit`` is ORT's median seconds, ``fraction_of_limit`` ORT's time over dmlq's).
ORT 1.32 has no float4_e2m1fn on the CPU: that peer skips. Quantize to the integer types
(uint8 too) also per tensor (one scale) and per axis (one scale per column), and all three
forms again on one thread each (groups ``...-1thread``; extra_info ``threads``).

    python -m pytest bench/test_bench_qtypes.py --benchmark-json=bench/results/<gpu>-qtypes.json
    DMLQ_CPU_BENCH=1 python -m pytest bench/test_bench_qtypes.py -m cpu --benchmark-json=...
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import dmlq
from bench.timing import gpu_timer, plan_iterations, result_info
from dmlq.qtypes import QTYPES

TYPES = ("int8", "int16", "uint16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn", "float8_e4m3fnuz",
         "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
BLOCK = 32
GPU_N = 64 * 2**20
CPU_N = 4 * 2**20
OPSET = {"float4_e2m1fn": 23, "int2": 25, "uint2": 25}
TORCH_FLOAT8 = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
                "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}


def _groups(n_label):
    out = []
    for t in TYPES:
        out.append((f"quantize/float32->{t}/{n_label}-blocked{BLOCK}", "quantize", t))
        out.append((f"dequantize/{t}->float32/{n_label}-blocked{BLOCK}", "dequantize", t))
    return out


# GPU only: a scale per column (axis 1, the last) of int4 codes, as an ONNX (K, N) weight has them.
AXIS_TYPES = ("int4",)
COLS = 1024  # the float side is (n / COLS, COLS)


def _nbytes(kind, t, n, per_column=False, dense="float32"):
    """Real bytes moved: the float side, the packed side, the scales (one per block or column)."""
    q = QTYPES[t]
    return n * (2 if dense == "bfloat16" else 4) + (n * q.bits + 7) // 8 + (COLS if per_column else n // BLOCK) * 4


def _host_data(kind, t, n, seed=0, codes=True):
    """(x, s, q): float32 x, blocked scales, and (``codes``, dequantize only) x's codes made
    on the host (the peers' input; the GPU rows quantize on the device instead)."""
    rng = np.random.default_rng(seed)
    rows = n // 1024
    x = (rng.standard_normal((rows, 1024)) * 3).astype(np.float32)
    s = rng.uniform(0.01, 0.1, (rows, 1024 // BLOCK)).astype(np.float32)
    q = dmlq.quantize_linear(x, s, dtype=t, block_size=BLOCK) if kind == "dequantize" and codes else None
    return x, s, q


# ================================================================== GPU

GPU_CASES = [(g, k, t, i) for g, k, t in _groups("64M") for i in
             ("dmlq:auto",) + (("peer:torch-float8",) if t in TORCH_FLOAT8 else ())
             + (("peer:cupy-expr",) if t in ("int8", "int16", "uint16") else ())]
GPU_CASES += [(f"{k}/{'float32->' + t if k == 'quantize' else t + '->float32'}/64M-axis1", k, t, "dmlq:auto")
              for t in AXIS_TYPES for k in ("quantize", "dequantize")]
# bfloat16 on the float side, read and written by the kernels (session 44: a float32 copy before)
BF16_TYPES = ("int8", "int4", "float8_e4m3fn")
GPU_CASES += [(f"{k}/{'bfloat16->' + t if k == 'quantize' else t + '->bfloat16'}/64M-blocked{BLOCK}", k, t, "dmlq:auto")
              for t in BF16_TYPES for k in ("quantize", "dequantize")]


def dense_of(group: str) -> str:
    """The float side's type a GPU row's group names."""
    return "bfloat16" if "bfloat16" in group else "float32"


def _gpu_fn(kind, t, impl, per_column=False, dense="float32"):
    import cupy

    x, s, q = _host_data(kind, t, GPU_N, codes=impl == "peer:cupy-expr")
    xg, sg = cupy.asarray(x), cupy.asarray(s)
    if dense == "bfloat16":  # dmlq:auto rows only
        xb = xg.astype(dense)
        if kind == "quantize":
            out = dmlq.quantize_linear(xb, sg, dtype=t, block_size=BLOCK)
            return lambda: dmlq.quantize_linear(xb, sg, dtype=t, block_size=BLOCK, out=out)
        qg = dmlq.quantize_linear(xb, sg, dtype=t, block_size=BLOCK)
        y = cupy.empty(x.shape, dense)
        return lambda: dmlq.dequantize_linear(qg, sg, block_size=BLOCK, dtype=dense, out=y)
    if per_column:
        sg = cupy.asarray(np.random.default_rng(1).uniform(0.01, 0.1, COLS).astype(np.float32))
        if kind == "quantize":
            out = dmlq.quantize_linear(xg, sg, dtype=t, axis=1)
            return lambda: dmlq.quantize_linear(xg, sg, dtype=t, axis=1, out=out)
        qg = dmlq.quantize_linear(xg, sg, dtype=t, axis=1)
        y = cupy.empty(x.shape, np.float32)
        return lambda: dmlq.dequantize_linear(qg, sg, axis=1, out=y)
    if impl == "dmlq:auto":
        if kind == "quantize":
            out = dmlq.quantize_linear(xg, sg, dtype=t, block_size=BLOCK)
            return lambda: dmlq.quantize_linear(xg, sg, dtype=t, block_size=BLOCK, out=out)
        qg = dmlq.quantize_linear(xg, sg, dtype=t, block_size=BLOCK)
        y = cupy.empty(x.shape, np.float32)
        return lambda: dmlq.dequantize_linear(qg, sg, block_size=BLOCK, out=y)
    s_full = cupy.repeat(sg, BLOCK, axis=1)
    if impl == "peer:cupy-expr":
        info = np.iinfo(t)
        if kind == "quantize":
            return lambda: cupy.clip(cupy.rint(xg / s_full), info.min, info.max).astype(t)
        qg = cupy.asarray(q)
        return lambda: (qg.astype(np.float32) * s_full)
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available() or not hasattr(torch, TORCH_FLOAT8[t]):
        pytest.skip(f"torch has no CUDA or no torch.{TORCH_FLOAT8[t]}")
    f8 = getattr(torch, TORCH_FLOAT8[t])
    xt, st = torch.as_tensor(xg, device="cuda"), torch.as_tensor(s_full, device="cuda")
    if kind == "quantize":
        return lambda: (xt / st).to(f8)
    qt = (xt / st).to(f8)
    return lambda: qt.to(torch.float32) * st


@pytest.mark.benchmark(timer=gpu_timer, disable_gc=True)
@pytest.mark.parametrize("group, kind, t, impl", GPU_CASES, ids=[f"{g}|{i}" for g, _, _, i in GPU_CASES])
def test_gpu_qtypes(benchmark, limits, group, kind, t, impl):
    per_column, dense = group.endswith("-axis1"), dense_of(group)
    fn = _gpu_fn(kind, t, impl, per_column, dense)
    benchmark.group = group
    iterations = plan_iterations(fn, 0.05)
    benchmark.pedantic(fn, rounds=10, iterations=iterations, warmup_rounds=1)
    if benchmark.stats is not None:
        nbytes = _nbytes(kind, t, GPU_N, per_column, dense)
        benchmark.extra_info.update(result_info(impl, nbytes, GPU_N, benchmark.stats.stats.median,
                                                limits.copy_gb_per_s, "GB/s"))


# ================================================================== CPU against onnxruntime

# Quantize to the integer types (ORT has them all) also per tensor and per axis, and each of the
# three forms once more on one thread (dmlq: tiles.THREADS = 1; ORT: intra_op_num_threads = 1).
INT_TYPES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2")
FORMS = ("tensor", "axis", f"blocked{BLOCK}")


def _cpu_groups():
    out = [(g, k, t, f"blocked{BLOCK}", 0) for g, k, t in _groups("4M")]
    out.append((f"quantize/float32->uint8/4M-blocked{BLOCK}", "quantize", "uint8", f"blocked{BLOCK}", 0))
    for t in INT_TYPES:
        for form in FORMS:
            if form != f"blocked{BLOCK}":
                out.append((f"quantize/float32->{t}/4M-{form}", "quantize", t, form, 0))
            out.append((f"quantize/float32->{t}/4M-{form}-1thread", "quantize", t, form, 1))
    return out


CPU_CASES = [(g, k, t, f, n, i) for g, k, t, f, n in _cpu_groups() for i in ("peer:onnxruntime-cpu", "dmlq:cpu")]
_ORT_MEDIAN: dict = {}


@pytest.fixture
def cpu_n(request):
    if os.environ.get("DMLQ_CPU_BENCH"):
        return CPU_N
    if request.config.getoption("benchmark_disable", False):
        return 4 * 1024 + 1024  # once, small
    pytest.skip("CPU benchmarks run when asked: DMLQ_CPU_BENCH=1 python -m pytest bench/test_bench_qtypes.py -m cpu")


def _form_data(form, x, s):
    """(scale, keyword arguments, ONNX attributes) of a form: blocked along the last axis (s as
    drawn), per axis 1 (one scale per column), per tensor (one scale)."""
    if form == "tensor":
        return np.float32(0.05), {}, {}
    if form == "axis":
        return np.random.default_rng(1).uniform(0.01, 0.1, x.shape[1]).astype(np.float32), {"axis": 1}, {"axis": 1}
    return s, {"block_size": BLOCK}, {"axis": 1, "block_size": BLOCK}


def _ort_fn(kind, t, x, s, q, attrs=None, threads=0):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    attrs = dict(axis=1, block_size=BLOCK) if attrs is None else attrs
    inits = [numpy_helper.from_array(np.asarray(s, np.float32), "s")]
    if kind == "quantize":
        out_type = helper.np_dtype_to_tensor_dtype(QTYPES[t].dtype)
        node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=out_type, **attrs)
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    else:
        out_type = TensorProto.FLOAT
        inits.append(numpy_helper.from_array(q, "x"))  # ORT takes the narrow types as initializers
        node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], **attrs)
        inputs = []
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", out_type, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET.get(t, 21))])
    model.ir_version = 10 if OPSET.get(t, 21) < 25 else 11
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        binding = session.io_binding()
        if kind == "quantize":
            binding.bind_cpu_input("x", x)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
    except Exception as e:  # not implemented for this type on ORT's CPU provider
        pytest.skip(f"onnxruntime {ort.__version__} CPU: {type(e).__name__}: {str(e)[:160]}")
    return lambda: session.run_with_iobinding(binding)


@pytest.mark.cpu
@pytest.mark.benchmark(disable_gc=True)
@pytest.mark.parametrize("group, kind, t, form, threads, impl", CPU_CASES,
                         ids=[f"{g}|{i}" for g, _, _, _, _, i in CPU_CASES])
def test_cpu_qtypes(benchmark, cpu_n, monkeypatch, group, kind, t, form, threads, impl):
    x, s, q = _host_data(kind, t, cpu_n)
    s, kw, attrs = _form_data(form, x, s)
    if impl == "dmlq:cpu":
        if threads:
            from dmlq.cpu import tiles
            monkeypatch.setattr(tiles, "THREADS", threads)
        if kind == "quantize":
            out = np.empty(x.shape, QTYPES[t].dtype)
            fn = lambda: dmlq.quantize_linear(x, s, dtype=t, out=out, **kw)  # noqa: E731
        else:
            y = np.empty(x.shape, np.float32)
            fn = lambda: dmlq.dequantize_linear(q, s, out=y, **kw)  # noqa: E731
    else:
        fn = _ort_fn(kind, t, x, s, q, attrs, threads)
    benchmark.group = group
    benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
    if benchmark.stats is None:
        return
    t_med = benchmark.stats.stats.median
    if impl.startswith("peer:"):
        _ORT_MEDIAN[group] = t_med
    limit = _ORT_MEDIAN.get(group)
    nbytes = _nbytes(kind, t, x.size)
    info = result_info(impl, nbytes, x.size, t_med, None, "GB/s")
    info.update(limit=limit, fraction_of_limit=(limit / t_med) if limit else None, threads=threads or "default")
    benchmark.extra_info.update(info)
