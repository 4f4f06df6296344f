"""An optional package that is absent: a message saying what to install, naming dmlq's extra,
not a bare ModuleNotFoundError from inside dmlq. Each case runs in a fresh process whose
import system refuses the package (a meta path finder), whatever this machine has."""
import re
import subprocess
import sys
import textwrap

import pytest

_BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    class _Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] == {package!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, _Absent())
""")

_CUDA_ARRAY = textwrap.dedent("""
    import dmlq
    class Device:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}
    dmlq.quantize_linear(Device(), 0.1)
""")


@pytest.mark.parametrize("package,code,message", [
    ("torch", "import dmlq.torch", r"ImportError: dmlq.torch needs torch, which is not installed: pip install torch "
                                   r"\(dmlq's extra .\[torch\]\)"),
    ("dask", "import dmlq.dask", r"ImportError: dmlq.dask needs dask.array, which is not installed: pip install "
                                 r"\"dask\[array\]\""),
    ("cupy", _CUDA_ARRAY, r"ImportError: dmlq runs GPU arrays through CuPy, which is not installed: pip install "
                          r"cupy-cuda13x"),
])
def test_an_absent_package_is_named_with_its_install(package, code, message):
    r = subprocess.run([sys.executable, "-c", _BLOCK.format(package=package) + code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert re.search(message, r.stderr), r.stderr[-2000:]
    assert "ModuleNotFoundError" not in r.stderr.splitlines()[-1]


def test_without_them_dmlq_imports_and_runs_numpy():
    code = _BLOCK.format(package="torch") + _BLOCK.format(package="dask") + _BLOCK.format(package="cupy") + (
        "import numpy as np, dmlq, sys\n"
        "print(dmlq.quantize_linear(np.array([1.0, -2.0], np.float32), 0.5, dtype=np.int8).tolist())\n"
        "assert not {'torch', 'dask', 'cupy'} & set(sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2, -4]"
