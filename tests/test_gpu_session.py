"""tools/gpu_session.sh, the device runbook, on a machine without a GPU: every
stage ends with one clear line and exit 0; a wrong stage is a usage error."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import dmlq
from conftest import gpu_available
from dmlq import check
from dmlq.gpu import ops

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "gpu_session.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("stage", ["correct", "sanitize", "bench", "large"])
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
    assert pytest_steps >= {"mma_first", "gpu_tests", "fuzz", "sanitize_memcheck", "bench", "large"}
    for name in pytest_steps:
        assert collected[name][1], f"{name} selects no test: {collected[name][0]}"


def test_gpu_tests_and_the_session_hold_the_gpu_to_one_list(collected):
    """The correct stage runs ``python -m dmlq check`` (dmlq.check.gpu_cases on
    the GPU) and every gpu test; among them tests/test_gpu_cases.py runs exactly
    the same cases, on the GPU and on the stand-in, and the test that runs
    ``dmlq check`` itself."""
    from test_gpu_cases import case_id

    assert collected["check"][0] == "python -m dmlq check"
    gpu_tests = collected["gpu_tests"][1]
    want = sorted(case_id(c) for c in check.gpu_cases())
    assert len(set(want)) == len(want), "two cases with one description"
    for twin in ("gpu", "stand-in"):
        prefix = f"tests/test_gpu_cases.py::test_public_call[{twin}-"
        got = sorted(t[len(prefix):-1] for t in gpu_tests if t.startswith(prefix))
        assert got == want, twin
        assert f"tests/test_gpu_cases.py::test_dmlq_check_runs_the_same_cases[{twin}]" in gpu_tests


# GPU backend functions reached through a public function of another name: the
# types beyond int8 go from quantize_linear/dequantize_linear to dmlq.quant_gpu.
VIA = {"quantize_types": "quantize_linear", "dequantize_types": "dequantize_linear"}


def test_the_cases_call_every_public_function_with_a_gpu_path(cupy_stand_in):
    """Each function of the GPU backend (dmlq.gpu.ops) is reached through its
    public namesake (or the one VIA names) by at least one case that runs it, and
    every case calls a public function."""
    from dmlq.gpu import plan

    cases = check.gpu_cases()
    for case in cases:
        assert getattr(dmlq, case[2].__name__) is case[2], case[:2]
    backend = {f.__name__ for f in ops._BINDERS}
    assert {VIA.get(n, n) for n in backend} == {c[2].__name__ for c in cases}
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
