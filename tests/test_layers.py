"""The source tree shows the design (issue 14): an import graph without cycles,
layers that read one way, and module names that say what they hold."""
import ast
from pathlib import Path

import dmlq

PKG = Path(dmlq.__file__).resolve().parent
ROOT = PKG.parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_pkg: bool, level: int, module):
    base = current.split(".") if is_pkg else current.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph():
    """{module: set of dmlq modules it imports}, counting imports inside functions too
    (a lazy import is still a dependency; the old api <-> operator cycle was one)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = _resolve(name, is_pkg, node.level, node.module) if node.level else node.module
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in files:  # dmlq.gpu.loader.function -> dmlq.gpu.loader
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("dmlq"):
                    deps.add(t)
        graph[name] = deps
    return graph


def _cycles(graph):
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _package_parents(graph):
    """Importing dmlq.x.y runs dmlq/__init__ and dmlq/x/__init__ first: those edges are implied,
    not cycles, so a package's own __init__ is left out of its submodules' dependencies."""
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}


def test_import_graph_has_no_cycles():
    graph = _package_parents(import_graph())
    assert "dmlq.api" in graph and "dmlq.operator" in graph
    assert _cycles(graph) == []


def test_cycle_finder_finds_the_old_api_operator_cycle():
    assert _cycles({"dmlq.api": {"dmlq.operator"}, "dmlq.operator": {"dmlq.api"}}) == [["dmlq.api", "dmlq.operator"]]


def test_layers_read_one_way():
    g = import_graph()
    # the API layer: the functions (api), the call path (calls), the planners' checks (checks)
    assert {"dmlq.calls", "dmlq.checks"} <= g["dmlq.api"] and "dmlq.checks" in g["dmlq.calls"]
    assert "dmlq.operator" in g["dmlq.checks"]
    assert not g["dmlq.checks"] & {"dmlq.api", "dmlq.calls"} and "dmlq.api" not in g["dmlq.calls"]
    assert "dmlq.validation" in g["dmlq.operator"] and "dmlq.dispatch" in g["dmlq.operator"]
    upper = {"dmlq.api", "dmlq.calls", "dmlq.checks", "dmlq.operator"}
    assert not g["dmlq.operator"] & {"dmlq.api", "dmlq.calls", "dmlq.checks"}
    assert not g["dmlq.validation"] & (upper | {"dmlq.dispatch"})
    assert not g["dmlq.dispatch"] & (upper | {"dmlq.validation"})
    assert not g["dmlq.reference"] & (upper | {"dmlq.validation", "dmlq.dispatch"})


def test_module_names_say_what_they_hold():
    from dmlq import dispatch, validation

    assert (PKG / "validation.py").exists() and (PKG / "dispatch.py").exists()
    assert not (PKG / "arrays.py").exists() and not (PKG / "support.py").exists()
    assert callable(validation.validate)
    assert callable(dispatch.backend) and callable(dispatch.write)


def test_package_holds_no_benchmark_code():
    # workloads, peers, limits and timing live in bench/ (a checkout, not installed); the CLI's
    # bench command only finds and runs bench/quick.py
    assert not (PKG / "bench.py").exists()
    for name in ("workloads.py", "peers.py", "limits.py", "timing.py", "quick.py", "report.py"):
        assert (ROOT / "bench" / name).exists(), name
    assert not any(m.startswith("bench") for m in import_graph())
