"""The README's examples run as written (issue 28): every ```python block that starts with an
import is executed; the API example also on CuPy where a GPU is present."""
import re
from pathlib import Path

import numpy as np
import pytest

import dmlq
from dmlq import reference

ROOT = Path(__file__).resolve().parents[1]
NUMPY_LINE = "xp = np                       # on a GPU: import cupy as xp"


def _examples():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [b for b in blocks if b.startswith(("import ", "from "))]


def _api_example():
    (block,) = [b for b in _examples() if NUMPY_LINE in b]
    return block


def test_readme_has_the_examples_this_test_runs():
    examples = _examples()
    assert len(examples) >= 2, examples  # the API example and the descriptor example
    assert any("compile_operator" in b for b in examples)
    assert "cupy" not in _api_example().replace("import cupy as xp", "")  # NumPy as written


def _imports(block):
    """The top-level packages an example imports."""
    return {m.split(".")[0] for m in re.findall(r"^(?:import|from) ([\w.]+)", block, re.M)}


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_example_runs_as_written(index):
    block = _examples()[index]
    for package in sorted(_imports(block) - {"numpy", "dmlq"}):
        pytest.importorskip(package)  # torch, dask: the test extra has them; a lean install does not
    namespace: dict = {}
    exec(compile(block, f"README.md example {index}", "exec"), namespace)


def test_readme_numpy_examples_need_only_numpy():
    # the API and descriptor examples run on a lean install (pip install -e .)
    numpy_only = [b for b in _examples() if _imports(b) <= {"numpy", "dmlq"}]
    assert _api_example() in numpy_only and any("compile_operator" in b for b in numpy_only)


def _check_api_results(ns, to_host):
    """What the example's comments promise, and the numbers against the reference."""
    x, q = to_host(ns["x"]), to_host(ns["q"])
    assert q.dtype == np.uint8 and to_host(ns["q8"]).dtype == np.int8 and to_host(ns["xf"]).dtype == np.float32
    want = reference.quantize_linear(x, np.float32(0.02), np.uint8(128), np.empty(x.shape, np.uint8))
    assert np.array_equal(q, want)
    want0 = reference.quantize_linear(x, np.float32(0.02), None, np.empty(x.shape, np.uint8))
    assert np.array_equal(to_host(ns["q_cols"]), want0)  # the same scale per column, zero points 0
    assert to_host(ns["c"]).dtype == np.int8 and to_host(ns["c"]).shape == x.shape
    assert to_host(ns["y"]).shape == (64, 512) and to_host(ns["y"]).dtype == np.int8
    assert to_host(ns["p"]).shape == (2, 16, 15, 15) and to_host(ns["p"]).dtype == np.uint8


def test_readme_api_example_on_numpy():
    ns: dict = {}
    exec(_api_example(), ns)
    assert isinstance(ns["y"], np.ndarray)
    _check_api_results(ns, np.asarray)


def test_readme_descriptor_example_result():
    (block,) = [b for b in _examples() if "compile_operator" in b]
    ns: dict = {}
    exec(block, ns)
    x, y = ns["x"], ns["y"]
    assert y.dtype == np.uint8 and y.shape == (2, 3, 4)
    # per channel (axis 1) scales 0.01, 0.02, 0.04 and zero point 128, as the public function computes it
    assert np.array_equal(y, dmlq.quantize_linear(x, ns["scales"].reshape(1, 3, 1), np.uint8(128)))


@pytest.mark.gpu
def test_readme_api_example_on_cupy():
    import cupy

    ns: dict = {}
    exec(_api_example().replace(NUMPY_LINE, "import cupy as xp  #"), ns)
    assert isinstance(ns["y"], cupy.ndarray)
    _check_api_results(ns, cupy.asnumpy)
    # bit for bit the NumPy run on the same data
    assert np.array_equal(cupy.asnumpy(ns["y"]), dmlq.quantized_matmul(
        cupy.asnumpy(ns["a"]), cupy.asnumpy(ns["a_scale"]), 128, cupy.asnumpy(ns["w"]),
        cupy.asnumpy(ns["w_scale"]), None, 0.05, np.int8(0)))
