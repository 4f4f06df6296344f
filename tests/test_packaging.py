"""The wheel carries every kernel source, and the loader finds them inside it."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src")
    # Build from a copy so no build/ or egg-info lands in the checkout.
    for item in ("pyproject.toml", "README.md", "LICENSE", "dmlq", "cuda"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, src / item)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True)
    (path,) = out.glob("dmlq-*.whl")
    return path


def test_wheel_has_every_kernel_source(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = sorted(p.name for p in (ROOT / "cuda").iterdir() if p.suffix in (".cu", ".cuh"))
    assert sources
    for s in sources:
        assert f"dmlq/cuda/{s}" in names, s
    assert "dmlq/gpu/loader.py" in names


def test_wheel_is_typed_and_licensed(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "dmlq/py.typed" in names  # PEP 561: type checkers read the annotations
    assert "dmlq/typing.py" in names
    (license_file,) = [n for n in names if ".dist-info/" in n and n.endswith("LICENSE")]
    text = zipfile.ZipFile(wheel).read(license_file).decode()
    assert text.startswith("MIT License") and "the dmlq authors" in text
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "MIT" in metadata


def test_loader_reads_sources_from_installed_wheel(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path)
    code = ("import dmlq.gpu.loader as l; d = l.cuda_dir(); "
            "assert str(d).startswith(%r), d; print(len(l.source_text('common.cuh')))" % str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 100
