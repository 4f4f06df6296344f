"""tools/gpu_session.sh, the device runbook, on a machine without a GPU: every
stage ends with one clear line and exit 0; a wrong stage is a usage error."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dmlq
from conftest import gpu_available

ROOT = Path(__file__).resolve().parents[1]
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from dmlq import check, check_cases
from dmlq.gpu import ops

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "gpu_session.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("stage", ["quick", "correct", "sanitize", "bench", "large", "profile", "fuzz"])
def test_stage_without_gpu_skips_with_one_line(stage, tmp_path):
    if gpu_available():
        pytest.skip("a GPU is present: the stage would run for real")
    r = subprocess.run(["bash", str(SCRIPT), stage], capture_output=True, text=True,
                       env={**os.environ, "OUT": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[{stage}] no CUDA GPU here (CuPy sees none): stage skipped"
    assert (tmp_path / "summary.txt").read_text().strip() == r.stdout.strip()


def test_unknown_stage_is_a_usage_error(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), "nonsense"], capture_output=True, text=True,
                       env={**os.environ, "OUT": str(tmp_path)}, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


# ------------------------------------------------- one list of public calls

@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """{step: (command, [node ids])} from ``tools/gpu_session.sh collect``: every
    step of every stage, each pytest step's selection collected as pytest would run it."""
    out = tmp_path_factory.mktemp("collect")
    r = subprocess.run(["bash", str(SCRIPT), "collect"], capture_output=True, text=True,
                       env={**os.environ, "OUT": str(out)}, timeout=600)
    assert r.returncode == 0, r.stderr
    steps = {}
    for line in (out / "steps.txt").read_text().splitlines():
        name, _, rest = line.partition(": ")
        if name.startswith("collect_"):
            step = name[len("collect_"):]
            assert rest == "rc=0", (step, (out / f"{name}.txt").read_text()[-2000:])
            ids = [t for t in (out / f"{name}.txt").read_text().splitlines() if "::" in t]
            steps[step] = (steps[step][0], ids)
        else:
            steps[name] = (rest, [])
    return steps


def test_every_session_step_selects_tests(collected):
    """A pytest step whose selection matches nothing (a renamed file, test or -k
    word) would run nothing on the device and exit 5: each selects tests."""
    pytest_steps = {n for n, (cmd, _) in collected.items() if "-m pytest" in cmd}
    assert pytest_steps >= {"variants", "torch_cuda", "fuzz_slice", "bench_key", "gpu_tests", "fuzz",
                            "sanitize_memcheck", "bench", "large", "fuzz_only"}
    for name in pytest_steps:
        assert collected[name][1], f"{name} selects no test: {collected[name][0]}"


def test_gpu_tests_and_the_session_hold_the_gpu_to_one_list(collected):
    """The correct stage runs ``python -m dmlq check`` (dmlq.check.gpu_cases on
    the GPU) and every gpu test; among them tests/test_gpu_cases.py runs exactly
    the same cases, on the GPU and on the stand-in, and the test that runs
    ``dmlq check`` itself."""
    from test_gpu_cases import case_id

    assert collected["check"][0] == "python3 -m dmlq check"
    gpu_tests = collected["gpu_tests"][1]
    want = sorted(case_id(c) for c in check.gpu_cases())
    assert len(set(want)) == len(want), "two cases with one description"
    prefix = "tests/test_gpu_cases.py::test_public_call[gpu-"
    got = sorted(t[len(prefix):-1] for t in gpu_tests if t.startswith(prefix))
    assert got == want
    assert "tests/test_gpu_cases.py::test_dmlq_check_runs_the_same_cases[gpu]" in gpu_tests
    # on the device only the GPU twins run (tools/pytest_device.py): CI runs the stand-in ones
    assert not [t for t in gpu_tests if "stand-in" in t]


# GPU backend functions reached through a public function of another name: the
# types beyond int8 go from quantize_linear/dequantize_linear to dmlq.quant_gpu.
VIA = {"quantize_types": "quantize_linear", "dequantize_types": "dequantize_linear"}


def test_the_cases_call_every_public_function_with_a_gpu_path(cupy_stand_in):
    """Each function of the GPU backend (dmlq.gpu.ops) is reached through its
    public namesake (or the one VIA names) by at least one case that runs it, and
    every case calls a public function."""
    from dmlq.gpu import plan

    cases = check.gpu_cases()
    for case in cases:  # (dynamic_quantize_linear's rows join its three results: check_cases._dynamic_bytes)
        fn = check_cases.PUBLIC_OF.get(case[2], case[2])
        assert getattr(dmlq, fn.__name__) is fn, case[:2]
    assert set(check_cases.PUBLIC_OF) <= {c[2] for c in cases}
    backend = {f.__name__ for f in ops._BINDERS}
    assert {VIA.get(n, n) for n in backend} == {c[2].__name__ for c in cases if c[2] not in check_cases.PUBLIC_OF}
    # the types beyond int8: some case plans a quant_types.cu kernel for each direction
    kernels = set()
    for case in cases:
        if case[1].endswith(("per axis", "blocked", "float16")) and case[0] in ("quantize", "dequantize"):
            with plan.recording() as plans:
                case[2](*(check._to_backend(a, cupy_stand_in) for a in case[3]), **case[4])
            kernels |= {launch.kernel.split("<")[0] for p in plans for launch in p.launches}
    assert {"qt_quantize", "qt_dequantize"} <= kernels, kernels
def test_the_large_stage_holds_every_test_past_2_31_elements(collected):
    """Every test that needs more than 2**31 elements (it skips on the stand-in)
    is in the large stage's selection, which runs with the stage's whole time."""
    big = set()
    for path in SCRIPT.parents[1].joinpath("tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and any(
                    isinstance(n, ast.Name) and n.id == "skip_past_2_31_on_the_stand_in"
                    for n in ast.walk(node)):
                big.add(f"tests/{path.name}::{node.name}")
    assert len(big) >= 4
    large = {t.split("[")[0] for t in collected["large"][1]}
    assert big <= large, sorted(big - large)


# ------------------------------------------------- every kernel variant in every list

def test_every_variant_case_runs_in_quick_correct_and_sanitize(collected):
    """tests/gpu_variants.py holds one case per kernel variant of the kernel tables
    (tests/test_gpu_variants.py checks that in CI): each runs on the GPU in the quick and
    correct stages and under every sanitizer."""
    import gpu_variants as V

    want = {f"tests/test_gpu_variants.py::test_variant[gpu-{c.name}]" for c in V.CASES}
    assert len(want) == len(V.CASES) >= 30
    for step in ("variants", "gpu_tests", "sanitize_memcheck", "sanitize_racecheck", "sanitize_initcheck",
                 "sanitize_synccheck"):
        got = set(collected[step][1])
        assert want <= got, (step, sorted(want - got)[:5])
        # the kernels no small case of gpu_variants reaches: their small cases run beside them
        for node in V.LARGE_ONLY_CASES:
            assert any(t.split("[")[0] == node for t in got), (step, node)
    large = {t.split("[")[0] for t in collected["large"][1]}
    assert set(V.LARGE_ONLY_CASES) <= large


def test_the_fuzz_reaches_every_selectable_variant(collected):
    """The GPU fuzz (quick's slice and correct's 10,000 cases) runs every operator, forces
    every tiled, pooling and element-wise variant, and its drawn sizes reach every
    stream variant through selection (M from the strategies' sides)."""
    import fuzz_strategies as fs
    import test_fuzz_kernels as F
    from dmlq.gpu import avgpool, elementwise, intmm, matmul

    ops = {f"tests/test_fuzz_kernels.py::test_fuzz_kernels[{op}-gpu]" for op in F.OPS} | \
          {f"tests/test_fuzz_kernels.py::test_fuzz_intmm_kernels[{op}-gpu]" for op in F.INTMM}
    for step in ("fuzz", "fuzz_slice"):
        assert ops <= set(collected[step][1]), step
    assert set(F.FORCED["matmul"]) >= set(matmul.ALL_VARIANTS)
    assert set(F.FORCED["matmul_packed"]) >= set(matmul.ALL_VARIANTS)
    assert set(F.INTMM_FORCED) >= set(matmul.ALL_VARIANTS)
    assert set(F.FORCED["avg_pool"]) >= set(avgpool.VARIANTS)
    for op in ("quantize", "dequantize"):
        assert set(F.FORCED[op]) >= set(elementwise.VARIANTS)
    assert set(F.FORCED["add"]) >= set(elementwise.VARIANTS) - {"axis"} | {"table"}
    sides = set(fs.SIDES) | {8, 16, 17, 33}
    packed = {matmul.select_variant(m, 8, 8, 1, 90, packed=True) for m in sides}
    assert set(matmul.STREAM_M) <= packed, packed
    assert set(intmm.VARIANTS) <= {intmm.select_variant(m) for m in sides}


def test_the_fuzz_runs_one_process_per_test(collected):
    """gpu_session.sh gives each GPU fuzz test its own xdist worker and the whole time slice
    (FUZZ_TESTS): with more tests than workers one waits for a slot and the step runs past its
    cap (there were 9 tests for 8 workers)."""
    import re

    text = (ROOT / "tools" / "gpu_session.sh").read_text()
    declared = int(re.search(r"^FUZZ_TESTS=(\d+)$", text, re.M).group(1))
    fuzz = [t for t in collected["fuzz"][1] if t.startswith("tests/test_fuzz_kernels.py::")]
    assert len(fuzz) == declared, (declared, fuzz)


def test_the_torch_cuda_items_run_in_quick_and_correct(collected):
    """Issue 27's GPU items: a non-default torch stream without a synchronize, CUDA graph
    capture and replay, opcheck on CUDA tensors; the torch call overhead benchmark."""
    need = ["test_cuda_tensors_on_a_side_stream_without_synchronizing", "test_cuda_graph_capture_replays",
            "test_cuda_opcheck_and_compile"]
    for step in ("torch_cuda", "gpu_tests"):
        names = {t.split("::")[-1].split("[")[0] for t in collected[step][1] if t.startswith("tests/test_torch.py")}
        assert set(need) <= names, (step, names)
    for step in ("bench_key", "bench"):
        assert any("test_torch_call_overhead" in t for t in collected[step][1]), step
        assert any("mma-128x128" in t for t in collected[step][1]), step
        assert any("matmul_integer_to_float" in t and "dmlq:auto" in t for t in collected[step][1]), step
        # the decode step replayed from a CUDA graph: the kernels' time without the host's enqueue
        assert any("matmul_integer_to_float" in t and "M=1," in t and "dmlq:graph" in t for t in collected[step][1]), step
    # issue 25's narrow types on the GPU: a packed and a float8 type, both directions, torch's casts beside
    key = [t for t in collected["bench_key"][1] if "test_gpu_qtypes" in t]
    for want in ("quantize/float32->int4/", "dequantize/uint4->float32/", "quantize/float32->float8_e4m3fn/",
                 "dequantize/float8_e4m3fnuz->float32/", "peer:torch-float8", "quantize/float32->int4/64M-axis1",
                 "dequantize/int4->float32/64M-axis1"):
        assert any(want in t for t in key), (want, key)
    # the widening dequantize kernels (changed after the first run) and the add, beside their peers
    key = collected["bench_key"][1]
    for want in ("dequantize/uint8->float32/65536x4096|dmlq:contig", "dequantize/int8->float16/65536x4096|dmlq:auto",
                 "dequantize/uint8->float32/65536x4096|peer:torch.dequantize", "add/uint8+uint8->uint8/65536x4096|dmlq:auto"):
        assert any(want in t for t in key), (want, key)


# ------------------------------------------------- the device image

IMAGE = SCRIPT.parent / "device_image.txt"
# import name -> distribution name, where they differ
DIST = {"cupy": "cupy-cuda13x", "ml_dtypes": "ml-dtypes", "cupy_backends": "cupy-cuda13x", "yaml": "pyyaml",
        "pytest_benchmark": "pytest-benchmark", "xdist": "pytest-xdist", "_pytest": "pytest"}


def _guarded(node, parents) -> bool:
    """An import inside try/except ImportError (or a bare except): optional."""
    for p in parents:
        if isinstance(p, ast.Try) and any(
                h.type is None or "ImportError" in ast.unparse(h.type) or "Exception" in ast.unparse(h.type)
                for h in p.handlers):
            return True
    return False


def _top_imports(path: Path, root: Path) -> set:
    """Modules imported when ``path`` is imported: module level, outside try/except ImportError
    (function bodies run only when called; pytest.importorskip skips cleanly); relative
    imports resolved, ``from pkg import a`` also names ``pkg.a`` (a submodule or not)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(root).with_suffix("").parts
    package = rel[:-1] if rel[-1] != "__init__" else rel[:-1]
    found = set()

    def walk(node, parents):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not _guarded(child, parents):
                if isinstance(child, ast.Import):
                    found.update(a.name for a in child.names)
                else:
                    base = list(package[:len(package) - child.level + 1]) if child.level else []
                    mod = ".".join(base + (child.module.split(".") if child.module else []))
                    if mod:
                        found.add(mod)
                    found.update(f"{mod}.{a.name}" if mod else a.name for a in child.names)
            walk(child, parents + [child])

    walk(tree, [])
    return found


def _local(name: str, root: Path):
    """The repo file of a module name (tests/, tools/, bench/ or the dmlq package), or None."""
    parts = name.split(".")
    for base in (root, root / "tests", root / "tools", root / "bench"):
        for cand in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if cand.is_file():
                return cand
    return None


def test_session_commands_need_only_the_device_images_packages(collected):
    """Each module a session step imports on the way in (the collected test files, their
    conftest and helpers, bench/'s, tools/gpu_warm.py, ``python -m dmlq``: followed through
    the repo) comes from the standard library, the repo, or the device image's package list
    (tools/device_image.txt); and the script asks for nothing that needs the network."""
    import sys

    root = SCRIPT.parents[1]
    image = {w.lower() for line in IMAGE.read_text().splitlines() if not line.startswith("#") for w in line.split()}
    assert {"cupy-cuda13x", "torch", "pytest", "pytest-benchmark", "numpy", "ml-dtypes", "hypothesis"} <= image
    files = {root / "tests" / "conftest.py", root / "bench" / "conftest.py", root / "tools" / "gpu_warm.py",
             root / "tools" / "pytest_device.py", root / "dmlq" / "__main__.py"}
    for name, (cmd, ids) in collected.items():
        files |= {root / t.split("::")[0] for t in ids}
    seen, missing = set(), {}
    todo = list(files)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for mod in _top_imports(path, root):
            top = mod.split(".")[0]
            parts = mod.split(".")
            local = next((f for f in (_local(".".join(parts[:i]), root) for i in range(len(parts), 0, -1))
                          if f is not None), None)
            if local is not None:
                todo.append(local)
                todo.extend(f for f in (_local(".".join(parts[:i]), root) for i in range(1, len(parts)))
                            if f is not None)   # the packages on the way (their __init__ runs)
                continue
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if DIST.get(top, top).lower().replace("_", "-") not in image:
                missing.setdefault(top, set()).add(str(path.relative_to(root)))
    assert not missing, f"imported unguarded by a session step but not on the device image: {missing}"
    script = SCRIPT.read_text()
    for word in ("pip install", "apt-get", "curl ", "wget ", "git clone"):
        assert word not in script, word
    assert "-p no:xdist" in script   # one process per step, whether or not the image has xdist


def test_the_dry_run_plans_every_step_inside_the_budget(tmp_path):
    """DMLQ_SESSION_DRY=1 walks a stage as the device would, each step spending its whole
    cap: every step is either planned inside the stage's budget or says it is skipped."""
    for stage, budget in (("quick", 340), ("correct", 530), ("sanitize", 530), ("bench", 530), ("large", 530),
                          ("profile", 530), ("fuzz", 530)):
        r = subprocess.run(["bash", str(SCRIPT), stage], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "OUT": str(tmp_path / stage), "DMLQ_SESSION_DRY": "1"})
        assert r.returncode == 0, r.stderr
        lines = r.stdout.strip().splitlines()
        assert lines[-1].startswith(f"[{stage}] done in") and f"of {budget};" in lines[-1], lines[-1]
        caps = [int(line.split("at most ")[1].split(" s")[0]) for line in lines if "would run for at most" in line]
        assert caps and sum(caps) <= budget, (stage, caps)
        assert all("would run" in line or "skipped" in line for line in lines[:-1]), lines


# ------------------------------------------------- recording what came back

@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_record_writes_what_a_forced_stage_left(tmp_path):
    """tools/gpu_record.py on what a stage leaves in $OUT (here the large stage forced to run
    without a GPU, plus a fuzz count and a sanitizer report put into its logs archive as the
    device would): the archive unpacked under bench/results/gpu-DATE/, the step rows, the fuzz
    counts and the sanitizer's error count in hardening.md."""
    import json
    import tarfile

    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), "large"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OUT": str(out), "DMLQ_SESSION_FORCE": "1", "DMLQ_STAGE_SECONDS": "200",
                            "DMLQ_SESSION_LOGS": str(tmp_path / "logs")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("[large] done in")
    assert "steps with rc != 0: warm;" in r.stdout.splitlines()[-1]   # no device here: warm cannot compile
    rows = json.loads((out / "large.json").read_text())
    assert [row["step"] for row in rows] == ["warm", "large"]
    logs = tmp_path / "logs" / "large"
    (logs / "fuzz.jsonl").write_text(json.dumps({"test": "matmul", "device": "gpu", "examples": 7, "seconds": 1.0,
                                                 "chunks_passed": 1, "variants": {"mma-128x128": 7}}) + "\n")
    (logs / "sanitize_memcheck.report").write_text("========= ERROR SUMMARY: 0 errors\n")
    # racecheck's own summary line, as the first H100 session's report has it
    (logs / "sanitize_racecheck.report").write_text(
        "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    with tarfile.open(out / "large-logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname=".")
    root = tmp_path / "repo"
    r = subprocess.run([sys.executable, str(SCRIPT.parent / "gpu_record.py"), str(out), "--root", str(root),
                        "--date", "2026-12-01"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    day = root / "bench" / "results" / "gpu-2026-12-01"
    assert (day / "large.json").read_text() == (out / "large.json").read_text()
    assert (day / "large" / "large.log").is_file() and (day / "large-summary.txt").is_file()
    text = (root / "bench" / "results" / "hardening.md").read_text()
    assert "## 2026-12-01: `large` on GPU unknown" in text
    assert "| warm | 1 |" in text and "| large | 0 |" in text
    assert "| matmul | gpu | 7 | 1.0 | mma-128x128 7 |" in text
    assert "| memcheck | 0 |" in text and "| racecheck | 0 |" in text
    # a second session the same day: its records beside the first's, nothing overwritten
    (out / "GPU-key-2026-12-01.json").write_text('{"benchmarks": []}')
    r = subprocess.run([sys.executable, str(SCRIPT.parent / "gpu_record.py"), str(out), "--root", str(root),
                        "--date", "2026-12-01", "--run", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (root / "bench" / "results" / "gpu-2026-12-01-run2" / "large" / "large.log").is_file()
    assert (root / "bench" / "results" / "GPU-key-2026-12-01-run2.json").is_file()
    assert not (root / "bench" / "results" / "GPU-key-2026-12-01.json").exists()
    assert "## 2026-12-01, run 2: `large` on GPU unknown" in (root / "bench" / "results" / "hardening.md").read_text()


def test_the_device_plugin_stands_in_for_prebuild_start_with_its_signature(monkeypatch):
    """tools/pytest_device.py replaces tests/prebuild.py's start for the device's steps: the
    replacement takes whatever start takes (conftest calls it with start's arguments)."""
    import inspect

    import prebuild

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import pytest_device

    monkeypatch.setattr(prebuild, "start", prebuild.start)   # put back after the test
    params = inspect.signature(prebuild.start).parameters.values()
    args = [True for p in params if p.default is inspect.Parameter.empty]
    kwargs = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    pytest_device.pytest_collection_finish(None)
    before = len(pytest_device.SKIPPED_BUILDS)
    prebuild.start(*args, **kwargs)
    assert len(pytest_device.SKIPPED_BUILDS) == before + 1


def test_the_device_plugin_stops_at_a_sticky_cuda_error_and_resumes_after_it(tmp_path):
    """tools/pytest_device.py: a failure naming a context-ending CUDA error stops the step there
    and writes the test's node id (DMLQ_DEVICE_STICKY_FILE); DMLQ_DEVICE_AFTER runs only the
    tests after it. (The first H100 session: one test's __trap() failed the 258 after it.)"""
    (tmp_path / "test_three.py").write_text(
        "def test_a():\n    pass\n\n"
        "def test_b():\n    raise RuntimeError('cudaErrorLaunchFailure: unspecified launch failure')\n\n"
        "def test_c():\n    pass\n")
    sticky = tmp_path / "sticky.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), os.environ.get("PYTHONPATH", "")]),
           "DMLQ_DEVICE_STICKY_FILE": str(sticky)}
    base = [sys.executable, "-m", "pytest", "-p", "pytest_device", "-p", "no:cacheprovider", "-q", "-rA",
            str(tmp_path / "test_three.py"), "--rootdir", str(tmp_path), "-c", os.devnull]
    r = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert "1 failed, 1 passed" in r.stdout and "test_c" not in r.stdout, r.stdout
    assert "left a sticky CUDA error (cudaErrorLaunchFailure)" in r.stdout
    after = sticky.read_text().strip()
    assert after.endswith("test_three.py::test_b")
    r = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**env, "DMLQ_DEVICE_AFTER": after})
    assert "1 passed, 2 deselected" in r.stdout and "PASSED test_three.py::test_c" in r.stdout, r.stdout


def _tool(name: str):
    """tools/<name>.py, imported from the tools folder (which stays off sys.path)."""
    import importlib

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_the_profile_cases_launch_on_the_stand_in(gpu):
    """tools/gpu_profile.py (the profile stage's program under ncu) runs every case, small,
    through dmlq's GPU path on the cupy stand-in: the kernels it names are the ones launched."""
    import io

    import cupy_stand_in as S

    gpu_profile = _tool("gpu_profile")
    text = io.StringIO()
    S.launches.clear()
    names = gpu_profile.run_cases(S.module, small=True, out=text, host_time=True)
    assert len(names) == 17, names
    assert text.getvalue().count(" us per call (enqueue)") == 17
    launched = {launch[0].split("<")[0] for launch in S.launches}
    assert {"avgpool_tile", "avgpool_general", "matmul_dp4a", "quantize_contig", "matmul_stream_grouped",
            "matmul_stream_grouped_finish", "matmul_stream_packed", "qt_quantize",
            "qt_dequantize", "unpack_table", "matmul_mma"} <= launched, launched
    # MatMulNBits' prefill: the tensor cores' blocked-scales build, its bytes read K-major
    assert any(n.startswith("matmul_mma<uint8, kmajor_uint4, float16, 64, 128") and n.endswith(", true>")
               for n, *_ in S.launches), S.launches
    # the integer family at M = 1 and 16 with an 8-bit b: the weight-streaming kernels at these small
    # shapes (at N = K = 8192, M = 16 takes the tensor cores)
    assert text.getvalue().count("matmul_integer_to_float: stream-m") == 2, text.getvalue()


def test_the_call_overhead_step_profiles_each_small_matmul_on_the_stand_in(gpu):
    """gpu_profile.call_overhead (the profile stage's --host-time step): each small matmul of
    matmul_calls timed and cProfiled through dmlq's GPU path, here on the cupy stand-in with
    small shapes; its profile shows dmlq's own frames (the public function, the plan's launch)."""
    import io

    import cupy_stand_in as S

    gpu_profile = _tool("gpu_profile")
    text = io.StringIO()
    S.launches.clear()
    names = gpu_profile.call_overhead(S.module, small=True, out=text, n=3)
    assert len(names) == 6 and names[-1].startswith("quantized_matmul uint8 x packed int4"), names
    got = text.getvalue()
    assert got.count("== call overhead: ") == 6 and got.count(" us per call (enqueue)") == 6, got
    assert got.count("== cProfile, 3 calls, by tottime") == 6, got
    own = got.split("== the same, dmlq's own functions")
    assert len(own) == 7 and all("dmlq/gpu/plan.py" in part.split("== call overhead")[0] for part in own[1:]), got
    assert len(S.launches) >= 6 * 7, len(S.launches)  # every call launched: a warm-up, 3 timed, 3 profiled
    assert sum(n == "unpack_table<uint8>" for n, *_ in S.launches) == 7  # MatMulNBits' zero points: one a call


def test_the_torch_overhead_step_says_when_it_cannot_run():
    """gpu_profile.torch_overhead (the profile stage's --host-time step) needs torch CUDA
    tensors; without a CUDA device it writes one line saying so and returns False."""
    import io

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a CUDA device: the profile stage runs the step itself")
    gpu_profile = _tool("gpu_profile")
    text = io.StringIO()
    assert gpu_profile.torch_overhead(text) is False
    assert text.getvalue() == "== torch call overhead: skipped (no torch CUDA device)\n"


def test_ncu_sass_sums_the_h200_source_page_to_ncus_own_totals():
    """tools/ncu_sass.py on the source page the H200 session brought back (2026-11-27): each
    kernel's executions add up to the "Executed Instructions" of ncu's own details page, and the
    summary names the rolled mask loops (73.4 % at one count) that the page showed."""
    import re

    ncu_sass = _tool("ncu_sass")
    extra = SCRIPT.parents[1] / "bench" / "results" / "gpu-2026-11-27" / "extra"
    kernels = ncu_sass.parse(ncu_sass.read(extra / "ncu_sass.csv.gz"))
    details = (extra / "ncu_details.txt").read_text()
    totals = re.findall(r"^\s+Executed Instructions\s+inst\s+([\d,]+)", details, re.M)
    expect = [int(n.replace(",", "")) for n in totals]
    assert [k.name.split("<")[0].removeprefix("void ") for k in kernels] == \
        ["avgpool_tile", "avgpool_general", "avgpool_tile"]
    assert [k.total for k in kernels] == expect == [1_315_685_998, 1_074_262_750, 598_940_496]
    text = ncu_sass.summary(kernels[0], top=3)
    assert "1,032,192 x   935 =  73.4%" in text, text
    assert ncu_sass.opcode("@!UP0 BRA 0x10") == "BRA" and ncu_sass.opcode("ULOP3.LUT UR6, UR17") == "ULOP3.LUT"
