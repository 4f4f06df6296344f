"""The typed public API (issue 28): every public function and method annotated, mypy
clean on the package, and a caller's view of the types (tests/typing_usage.py)."""
import doctest
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import dmlq

ROOT = Path(__file__).resolve().parents[1]


def _public_callables():
    """(qualified name, function) for dmlq.__all__'s functions and its classes' own methods."""
    for name in dmlq.__all__:
        obj = getattr(dmlq, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member) and (not attr.startswith("_") or attr in ("__init__", "__call__")):
                    yield f"{name}.{attr}", member


def test_every_public_function_and_method_is_annotated():
    missing = []
    for qualname, fn in _public_callables():
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                missing.append(f"{qualname}: parameter {p.name}")
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{qualname}: return")
    assert not missing, "annotate these (the public API is typed, dmlq ships py.typed):\n" + "\n".join(missing)


def test_every_public_function_documents_parameters_returns_errors_and_an_example():
    for name in dmlq.__all__:
        fn = getattr(dmlq, name)
        if not inspect.isfunction(fn):
            continue
        doc = inspect.getdoc(fn) or ""
        for section in ("Parameters" if inspect.signature(fn).parameters else "Returns", "Returns", "Raises",
                        "Example"):
            assert section in doc, (name, section)


@pytest.mark.parametrize("name", [n for n in dmlq.__all__ if inspect.isfunction(getattr(dmlq, n))
                                  or inspect.isclass(getattr(dmlq, n))])
def test_docstring_examples_run(name):
    """Each example is a doctest: its output is what the call returns today."""
    fn = getattr(dmlq, name)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(fn, name, globs={}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, name


def test_quantize_linear_help_explains_out_and_the_uint8_clip():
    doc = inspect.getdoc(dmlq.quantize_linear)
    assert "out : " in doc and "returned" in doc
    assert "clips every negative" in doc and "dtype=np.int8" in doc


def test_mypy_passes_on_the_package_and_a_typed_caller(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it comes with the test extra: pip install -e \".[test]\")")
    # One run over the package (pyproject's [tool.mypy]) and a caller; no cache: the same answer
    # on every run, whatever ran before.
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-incremental",
                        "dmlq", "tests/typing_usage.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout
