"""tools/gpu_session.sh, the device runbook, on a machine without a GPU: every
stage ends with one clear line and exit 0; a wrong stage is a usage error."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import gpu_available

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
