"""The benchmark machinery without a GPU: peak formulas, workloads, result records,
bench/report.py on a synthetic fixture (tests/data/bench_fixture.json, hand-picked
numbers, not a measurement), and bench/ collecting and skipping cleanly."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import on_stand_in

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a package of the checkout, not installed
    sys.path.insert(0, str(ROOT))

from bench import limits, peers, quick, timing  # noqa: E402
from bench import report as R  # noqa: E402
from bench import workloads as W  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "bench_fixture.json"
EXTRA_KEYS = {"impl", "bytes", "ops", "gb_per_s", "tops", "limit", "fraction_of_limit"}


def _report():
    return R


TORCH_BENCHMARKS = 4  # bench/test_bench_torch.py: a call on torch CUDA tensors and its peers (GPU only)
CPU_BENCHMARKS = 23  # bench/test_bench_plan.py: Python per call (API 6, GPU backend 5, whole GPU call 6, torch CPU
# tensors 6), no GPU needed
CPU_BACKEND_BENCHMARKS = 33  # bench/test_bench_cpu.py: 8 groups x 3 impls, 3 element-wise x 3 more
INTMM_CPU_BENCHMARKS = 6  # bench/test_bench_intmm.py: 3 NumPy groups x (dmlq:cpu, onnxruntime)
# bench/test_bench_intmm.py: 16 GPU groups (6 of quantized_matmul, packed int4: M = 1, 4, 16 x N = K = 4096, 8192;
# 3 of per-column packed uint4) x (dmlq:auto, 2 torch peers), dmlq:dp4a-wide forced in the 3 blocked
# packed-uint4 groups and dmlq:tiled (the tiled rule's kernel) in the 3 per-column ones and the int8 b
# groups at M = 1 and 4, and dmlq:mma-128x128 forced in the int8 b group at M = 16
# + dmlq:graph, one per group; + the groups of 48 (4 rows); + quantized_matmul int8 b at N = 14336, K = 4096,
# M = 1 and 4 (auto, 2 torch peers, graph, the tensor cores forced eagerly and in a graph: 2 x 6); + the packed
# b held K-major (dmlq:auto:w.T, dmlq:graph:w.T) in the 3 blocked packed-uint4 groups and quantized_matmul's
# packed int4 at M = 1, N = K = 8192 (2 x 4)
# + MatMulNBits' own bytes as they are (dmlq:auto:nbits) in the 3 blocked packed-uint4 groups (3)
# + the blocked packed-uint4 prefill at M = 512 and 2048, N = K = 4096 (session 41: mma-grouped), 8 rows each as
# the blocked decode groups have them (auto, 2 peers, graph, dp4a-wide, w.T, graph:w.T, nbits)
# + a bfloat16 out (dmlq:auto:bfloat16) in the int8 b groups (3) and the blocked packed-uint4 ones (5)
# + MatMulNBits' bits=2 bytes (dmlq:auto:nbits2) and that weight held as 4-bit (dmlq:auto:nbits2-held4)
# in the 5 blocked packed-uint4 groups (2 x 5)
INTMM_GPU_BENCHMARKS = 45 + 3 + 3 + 2 + 1 + 15 + 4 + 12 + 8 + 12 + 3 + 16 + 8 + 10
# bench/test_bench_qtypes.py: 12 types x (quantize, dequantize); GPU: dmlq + torch float8 (4 types) + cupy-expr
# (int8/int16/uint16) = 24 + 8 + 6, int4 with a scale per column both ways (2), and 3 types from and to
# bfloat16 (6); CPU: dmlq + onnxruntime on those 24 groups, uint8 blocked, and quantize to the 8 integer types
# per tensor and per axis (16) and in all 3 forms on one thread (24): 65 x 2 = 130, of which ORT's float4 (2) skips
QTYPES_GPU_BENCHMARKS, QTYPES_CPU_BENCHMARKS, QTYPES_CPU_SKIPPED = 46, 130, 2


def _run(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def data():
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def rows(data):
    return {r["group"]: r for r in R.summarize(data["benchmarks"])}


# ---------------------------------------------------------------- peak formulas

@pytest.mark.parametrize("gpu, cc, sms, mhz, datasheet_tops", [
    ("T4", (7, 5), 40, 1590, 130),
    ("A100", (8, 0), 108, 1410, 624),
    ("A10", (8, 6), 72, 1695, 250),
    ("L4", (8, 9), 58, 2040, 242.5),
    ("H100 SXM", (9, 0), 132, 1830, 1979),
])
def test_int8_tensor_core_peak_matches_datasheets(gpu, cc, sms, mhz, datasheet_tops):
    tops = limits.peak_tops(sms, mhz * 1000, limits.int8_tc_ops_per_sm_clk(cc))
    assert tops == pytest.approx(datasheet_tops, rel=0.005), gpu


def test_peak_formulas():
    assert limits.int8_tc_ops_per_sm_clk((8, 0)) == 4096 == 2 * 2048  # 2048 MACs/clk/SM
    assert limits.int8_tc_ops_per_sm_clk((9, 0)) == 8192
    assert limits.int8_tc_ops_per_sm_clk((12, 0)) is None
    assert limits.dp4a_ops_per_sm_clk((9, 0)) == 64 * 8
    assert limits.dp4a_ops_per_sm_clk((5, 2)) is None
    # H100 SXM at its reported max clock (1980 MHz): the limit the suite uses by default.
    facts = {"cc": (9, 0), "sm_count": 132, "clock_khz": 1980000}
    p = limits.peaks(facts, env={})
    assert p["int8_tc_tops"] == pytest.approx(132 * 1.98e9 * 8192 / 1e12)
    assert p["dp4a_tops"] == pytest.approx(132 * 1.98e9 * 512 / 1e12)
    assert p["int8_tc_source"] == "132 SMs x 1980 MHz x 8192 ops/clk/SM"


def test_peak_env_overrides():
    facts = {"cc": (9, 0), "sm_count": 132, "clock_khz": 1980000}
    p = limits.peaks(facts, env={limits.ENV_CLOCK_MHZ: "1830", limits.ENV_SM_COUNT: "114"})
    assert p["int8_tc_tops"] == pytest.approx(114 * 1.83e9 * 8192 / 1e12)
    assert (p["sm_count"], p["clock_mhz"]) == (114, 1830)
    p = limits.peaks(facts, env={limits.ENV_INT8_TC_TOPS: "1979", limits.ENV_DP4A_TOPS: "120.5"})
    assert (p["int8_tc_tops"], p["dp4a_tops"]) == (1979.0, 120.5)
    assert limits.ENV_INT8_TC_TOPS in p["int8_tc_source"]
    p = limits.peaks({"cc": (12, 0), "sm_count": 10, "clock_khz": 1e6}, env={})
    assert p["int8_tc_tops"] is None and limits.ENV_INT8_TC_TOPS in p["int8_tc_source"]
    assert p["dp4a_tops"] == pytest.approx(10 * 1e9 * 512 / 1e12)


# ---------------------------------------------------------------- records and workloads

def test_result_info_has_exactly_the_design_keys():
    info = timing.result_info("dmlq:contig", 2e9, 1e9, 1e-3, 2500.0, "GB/s")
    assert set(info) == EXTRA_KEYS
    assert info["gb_per_s"] == pytest.approx(2000.0)
    assert info["tops"] == pytest.approx(1.0)  # 1e9 ops in 1 ms
    assert info["fraction_of_limit"] == pytest.approx(0.8)
    info = timing.result_info("peer:torch._int_mm", 1, 2e12, 2e-3, 2000.0, "TOPS")
    assert info["tops"] == pytest.approx(1000.0) and info["fraction_of_limit"] == pytest.approx(0.5)
    assert timing.result_info("dmlq:auto", 1, 1, 1.0, None, "GB/s")["fraction_of_limit"] is None


def test_workloads_follow_the_issue():
    cases = W.all_cases()
    groups = [c.group for c in cases]
    assert len(set(groups)) == len(groups)
    for c in cases:
        assert c.group.count("/") >= 2 and c.group.split("/")[0] == c.op
        impls = peers.impl_names(c)
        assert any(i.startswith("dmlq:") for i in impls) and any(i.startswith("peer:") for i in impls)
        assert all(i.split(":")[0] in ("dmlq", "peer") for i in impls)
    # element-wise: 256 MiB and 1 GiB of first input, per-tensor, plus per-axis cases
    first_input = {"quantize": "x", "dequantize": "q", "add": "a"}
    sizes = {(c.op, math.prod(c.p["shape"]) * np.dtype(c.p[first_input[c.op]]).itemsize)
             for c in W.elementwise_cases()}
    for op in first_input:
        assert {(op, 256 << 20), (op, 1 << 30)} <= sizes
    assert any(c.p["axis"] for c in W.elementwise_cases())
    # matmul: 4096^3, 8192^3 and the fifteen LLM shapes (M = 1 and 4: the small-M crossovers)
    mm = {(c.p["M"], c.p["N"], c.p["K"]) for c in W.matmul_cases()}
    llm = {(m, n, k) for m in (1, 4, 16, 128, 2048) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))}
    assert mm == {(4096,) * 3, (8192,) * 3} | llm
    # pooling: output shapes of the configurations, four of them channels_last (two global)
    outs = {c.shape: c.p["out"] for c in W.avgpool_cases()}
    assert outs == {"64x64x112x112:k3s2p1": (64, 64, 56, 56), "256x256x56x56:k2s2": (256, 256, 28, 28),
                    "64x256x56x56:k3s1p1": (64, 256, 56, 56), "8x64x16x56x56:k2s2": (8, 64, 8, 28, 28),
                    "256x256x56x56:k2s2:nhwc": (256, 256, 28, 28), "64x256x56x56:k3s1p1:nhwc": (64, 256, 56, 56),
                    "64x256x56x56:global:nhwc": (64, 256, 1, 1), "64x2048x7x7:global:nhwc": (64, 2048, 1, 1)}
    assert {c.shape for c in W.avgpool_cases() if c.p["channels_last"]} == {
        "256x256x56x56:k2s2:nhwc", "64x256x56x56:k3s1p1:nhwc", "64x256x56x56:global:nhwc", "64x2048x7x7:global:nhwc"}
    assert W.unit_of("matmul/int8/x") == "TOPS" and W.unit_of("avgpool/uint8/x") == "GB/s"
    # the quick runner covers every family
    assert {c.group for c in W.all_cases() if c.quick} == {c.group for c in W.quick_cases()}
    assert {c.op for c in W.quick_cases()} == {"quantize", "dequantize", "add", "matmul",
                                                        "avgpool", "overhead"}


def test_device_facts_use_only_names_the_installed_cupy_has():
    """Every ``rt.X`` / ``cupy.cuda.runtime.X`` the benchmark code reads exists in the
    installed CuPy (14.2 has no cudaDevAttrComputeCapabilityMajor: the bench header died)."""
    import ast

    runtime = pytest.importorskip("cupy.cuda.runtime")
    missing = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            base = ast.unparse(node.value)
            if base in ("rt", "cupy.cuda.runtime", "runtime") and not hasattr(runtime, node.attr):
                missing.append(f"{path.name}:{node.lineno}: {base}.{node.attr}")
    assert missing == []


def test_benchmark_code_lives_in_bench_not_in_the_package():
    """dmlq/ holds what users import: no workloads, peers, limits or timing (issue 24)."""
    assert not (ROOT / "dmlq" / "bench.py").exists()
    words = ("copy_bandwidth", "get_elapsed_time", "plan_iterations", "random_array", "PEERS", "pytest_benchmark",
             "measure_limits")
    for path in (ROOT / "dmlq").rglob("*.py"):
        text = path.read_text()
        assert not [w for w in words if w in text], path
    r = _run("-c", "import sys; sys.path.insert(0, '.'); before = 'cupy' in sys.modules;"
                   " from bench import limits, peers, quick, report, timing, workloads; workloads.all_cases();"
                   " assert ('cupy' in sys.modules) == before, 'importing bench/ imported cupy'")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- report on the synthetic fixture

def test_fixture_is_marked_synthetic(data):
    assert "SYNTHETIC" in data["_comment"] and "not a measurement" in data["_comment"].lower()
    assert "SYNTHETIC" in data["machine_info"]["gpu"]
    for b in data["benchmarks"]:
        assert set(b["extra_info"]) == EXTRA_KEYS


def test_summary_rows(rows):
    assert set(rows) == {"quantize/float32->uint8/16384x4096", "dequantize/int8->float16/65536x4096",
                         "matmul/int8/M=4096,N=4096,K=4096", "avgpool/uint8/256x256x56x56:k2s2",
                         "overhead/float32->uint8/1024"}  # the add group has no dmlq entry: no row
    q = rows["quantize/float32->uint8/16384x4096"]
    assert (q["impl"], q["peer"]) == ("dmlq:contig", "peer:cupy-elementwise")
    assert q["speedup"] == pytest.approx(1.5e-4 / 1.2e-4)
    assert q["achieved"] == pytest.approx((64 * 2**20 * 5 + 5) / 1.2e-4 / 1e9)
    assert q["fraction"] == pytest.approx(q["achieved"] / 3000.0)
    d = rows["dequantize/int8->float16/65536x4096"]
    assert d["peer"] is None and d["speedup"] is None
    m = rows["matmul/int8/M=4096,N=4096,K=4096"]
    assert (m["impl"], m["peer"], m["unit"]) == ("dmlq:mma-128x128", "peer:torch._int_mm", "TOPS")
    assert m["speedup"] == pytest.approx(1.1)
    assert m["achieved"] == pytest.approx(2 * 4096**3 / 2e-4 / 1e12)
    assert m["limit"] == pytest.approx(2140.99776)
    p = rows["avgpool/uint8/256x256x56x56:k2s2"]
    assert (p["impl"], p["peer"]) == ("dmlq:tile_k2s2", "peer:torch.avg_pool-f16")
    assert p["speedup"] == pytest.approx(2.2e-4 / 0.98e-4)
    o = rows["overhead/float32->uint8/1024"]
    assert o["fraction"] == pytest.approx(8e-6 / 7.5e-6)


def test_markdown_table(data):
    report = _report()
    text = report.markdown(data, source="tests/data/bench_fixture.json")
    assert text.startswith("Measured on **SYNTHETIC GPU (test fixture, not a measurement)**")
    assert "2000-01-01" in text and "3,000 GB/s" in text and "2,141 TOPS" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 5
    assert table[0] == "| " + " | ".join(R.HEADER) + " |"
    assert ("| quantize | float32->uint8 | 16384x4096 | dmlq:contig | 120 us | 2,796.2 GB/s | 3,000.0 GB/s"
            " | 93.2% | peer:cupy-elementwise | 150 us | 1.25x |") in table
    assert ("| matmul | int8 | M=4096,N=4096,K=4096 | dmlq:mma-128x128 | 200 us | 687.2 TOPS | 2,141.0 TOPS"
            " | 32.1% | peer:torch._int_mm | 220 us | 1.10x |") in table
    assert "| dequantize | int8->float16 | 65536x4096 | dmlq:auto | 270 us |" in text
    assert text.count("| - | - | - |") == 1


def test_plots(data, tmp_path):
    pytest.importorskip("matplotlib")
    paths = _report().plot(data, tmp_path)
    assert {p.name for p in paths} == {"quantize.png", "dequantize.png", "matmul.png", "avgpool.png",
                                       "overhead.png"}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_plots_take_a_row_of_time_only(data, tmp_path):
    """A row with no bytes or ops (bench/test_bench_overhead.py's plan-cached calls: a time and
    its target) gets a plot with no bar instead of stopping the plots (the H200's full suite did)."""
    pytest.importorskip("matplotlib")
    import copy

    data = copy.deepcopy(data)
    data["benchmarks"].append({"name": "test_repeated_call_overhead[dequantize_linear]", "group": "plan-overhead",
                               "stats": {"median": 4.07e-06, "mean": 4.1e-06, "min": 4e-06},
                               "extra_info": {"impl": "dmlq:plan-cached", "target_s": 1e-05}})
    paths = _report().plot(data, tmp_path)
    assert "plan-overhead.png" in {p.name for p in paths}


def test_report_cli(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "perf.md"
    r = _run("bench/report.py", str(FIXTURE), "--markdown", str(out), "--plots", str(tmp_path / "plots"))
    assert r.returncode == 0, r.stderr
    assert "| quantize | float32->uint8 |" in out.read_text()
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "avgpool.png", "dequantize.png", "matmul.png", "overhead.png", "quantize.png"]


def _targets_json(tmp_path):
    """A SYNTHETIC run (hand-picked numbers): one time target met, one missed."""
    data = json.loads(FIXTURE.read_text())
    data["benchmarks"] += [
        {"name": "test_gpu_call_python[quantize_linear]", "group": "plan-overhead", "stats": {"median": 7e-6},
         "extra_info": {"impl": "dmlq:gpu-call-python", "target_s": 1e-5, "median_s": 7e-6}},
        {"name": "test_gpu_call_python[quantized_matmul]", "group": "plan-overhead", "stats": {"median": 1.2e-5},
         "extra_info": {"impl": "dmlq:gpu-call-python", "target_s": 1e-5, "median_s": 1.2e-5}},
    ]
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(data))
    return data, path


def test_report_judges_time_targets(tmp_path):
    data, path = _targets_json(tmp_path)
    judged = {t["name"]: t["met"] for t in R.targets(data["benchmarks"])}
    assert judged == {"test_gpu_call_python[quantize_linear]": True, "test_gpu_call_python[quantized_matmul]": False}
    text = R.markdown(data)
    assert "| test_gpu_call_python[quantized_matmul] | dmlq:gpu-call-python | 12 us | 10 us | **no** |" in text
    assert "1 of 2 time targets met" in text
    assert _run("bench/report.py", str(path)).returncode == 0  # a table, not a verdict
    r = _run("bench/report.py", str(path), "--check-targets")
    assert r.returncode == 1 and "target missed: test_gpu_call_python[quantized_matmul]" in r.stderr
    assert _run("bench/report.py", str(FIXTURE), "--check-targets").returncode == 0  # no targets: none missed


_TIMING_NAMES = {"median", "median_s", "stats", "TARGET_S", "target_s", "perf_counter", "monotonic",
                 "gpu_timer", "measure", "copy_bandwidth", "elapsed"}


def test_no_test_asserts_a_time():
    """Timing is judged by the report on committed JSON, never asserted (CI shares 2 cores)."""
    import ast

    offenders = []
    for path in sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "bench").glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Assert):
                continue
            used = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
            if used & _TIMING_NAMES:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


# ---------------------------------------------------------------- bench/ without a GPU

def test_bench_collects():
    r = _run("-m", "pytest", "bench", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert r.returncode == 0, r.stdout + r.stderr
    expected = (len(peers.case_impls(W.all_cases())) + CPU_BENCHMARKS + CPU_BACKEND_BENCHMARKS + TORCH_BENCHMARKS
                + INTMM_CPU_BENCHMARKS + INTMM_GPU_BENCHMARKS + QTYPES_GPU_BENCHMARKS + QTYPES_CPU_BENCHMARKS)
    assert f"{expected} tests collected" in r.stdout, r.stdout[-2000:]


def test_bench_skips_cleanly_without_gpu():
    if limits.gpu_status()[0]:
        pytest.skip("a GPU is present: the suite would run for real (python -m pytest bench)")
    # --benchmark-disable: each benchmark body runs once, untimed (inside the test suite a
    # timing would only measure the machine's other work)
    r = _run("-m", "pytest", "bench", "-q", "-p", "no:cacheprovider", "-rs", "--benchmark-disable")
    assert r.returncode == 0, r.stdout + r.stderr
    tail = r.stdout.strip().splitlines()[-1]
    assert "skipped" in tail and "failed" not in tail and "error" not in tail, tail
    # only the CPU benchmarks run (bench/test_bench_cpu.py on its small smoke inputs)
    passed = (CPU_BENCHMARKS + CPU_BACKEND_BENCHMARKS + INTMM_CPU_BENCHMARKS + QTYPES_CPU_BENCHMARKS
              - QTYPES_CPU_SKIPPED)
    assert f"{passed} passed" in tail, tail
    assert "benchmarks need a CUDA GPU" in r.stdout


def test_quick_runner_without_gpu(capsys):
    if limits.gpu_status()[0]:
        pytest.skip("a GPU is present")
    assert quick.run() == 0
    assert "nothing to measure" in capsys.readouterr().out
    r = _run("-m", "dmlq", "bench")
    assert r.returncode == 0 and "nothing to measure" in r.stdout, r.stdout + r.stderr


def test_bench_command_outside_a_checkout_says_where_the_suite_is(tmp_path):
    """An installed dmlq (the package alone, no bench/ beside it) has no benchmark code."""
    import shutil

    shutil.copytree(ROOT / "dmlq", tmp_path / "site" / "dmlq", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    r = subprocess.run([sys.executable, "-m", "dmlq", "bench"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "lives in bench/ of a dmlq checkout" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- primitives on a GPU

@pytest.mark.gpu
def test_primitives_on_gpu():
    if on_stand_in():
        pytest.skip("the bench's fills and CuPy peers are cupy.ElementwiseKernel code the stand-in does not run")
    import cupy

    u = timing.random_array((1 << 20,), "uint8", seed=1)
    i = timing.random_array((1 << 20,), "int8", seed=1)
    f = timing.random_array((1 << 20,), "float16", seed=2, lo=-3.0, hi=3.0)
    assert int(u.min()) == 0 and int(u.max()) == 255 and int(i.min()) == -128 and int(i.max()) == 127
    assert float(f.min()) >= -3.0 and float(f.max()) <= 3.0 and int((f == 0).sum()) < 100
    assert not bool(cupy.array_equal(u, timing.random_array((1 << 20,), "uint8", seed=2)))
    t0 = timing.gpu_timer()
    t1 = timing.gpu_timer()
    assert t1 >= t0
    times = timing.measure(lambda: cupy.multiply(f, f), rounds=3)
    assert len(times) == 3 and all(t > 0 for t in times)  # no bound on how long: that is the report's
    assert timing.copy_bandwidth(256 << 20, rounds=3) > 0


@pytest.mark.gpu
def test_quick_runner_on_gpu(capsys):
    if on_stand_in():
        pytest.skip("the bench's fills and CuPy peers are cupy.ElementwiseKernel code the stand-in does not run")
    assert quick.run(only="overhead") == 0
    out = capsys.readouterr().out
    assert "overhead" in out and "limits: copy" in out


def test_a_graph_replay_is_not_compared_with_an_eager_peer():
    """bench/test_bench_intmm.py's dmlq:graph rows (the decode step replayed from a CUDA graph) sit
    beside eager peers: the summary's best dmlq entry there is the fastest eager one; where a peer
    is replayed too (the overhead group) the graphs are compared."""
    def entry(group, impl, t):
        return {"group": group, "stats": {"median": t}, "extra_info": {"impl": impl, "gb_per_s": 1.0, "limit": 2.0}}
    g, o = "matmul_integer_to_float/uint8xint8->float16/M=1,N=8192,K=8192", "overhead/float32->uint8/1024"
    rows = {r["group"]: r for r in R.summarize([
        entry(g, "dmlq:auto", 5e-5), entry(g, "dmlq:graph", 2.5e-5), entry(g, "peer:torch-f16-matmul", 4.8e-5),
        entry(o, "dmlq:eager", 9e-5), entry(o, "dmlq:graph", 2e-5), entry(o, "peer:cupy-elementwise-graph", 3e-5)])}
    assert (rows[g]["impl"], rows[g]["speedup"]) == ("dmlq:auto", pytest.approx(4.8e-5 / 5e-5))
    assert set(rows[g]["entries"]) == {"dmlq:auto", "dmlq:graph", "peer:torch-f16-matmul"}
    assert (rows[o]["impl"], rows[o]["speedup"]) == ("dmlq:graph", pytest.approx(3e-5 / 2e-5))
