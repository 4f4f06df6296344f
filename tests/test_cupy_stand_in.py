"""The cupy stand-in (tests/cupy_stand_in) held to the installed CuPy.

- Every name the stand-in offers (module attributes, and the attributes of its
  classes) exists in the installed CuPy, and every ``cupy.*`` name that dmlq/,
  bench/, tools/ and tests/ use (aliases such as ``cp.`` and ``rt.`` included)
  resolves there.
- Each refusal the stand-in makes that CuPy makes without a device is checked
  against the installed CuPy itself: the same exception type (and message where
  CuPy's is fixed). CuPy's kernel-argument packing is reached without a device
  by calling a bare ``cupy.cuda.function.Function``: an argument CuPy refuses
  raises before the launch asks for a CUDA context, one it accepts gets as far
  as the context (a CUDA error on a machine without a GPU).
- What needs a device (occupancy, launch limits, the shared-memory opt-in) is
  checked on the stand-in against CUDA's documented H100 figures.
"""
from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import cupy_stand_in as S
from cupy_stand_in import _array, _cuda, _kernels  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def real():
    """The installed CuPy (imported without a device: its names and type checks)."""
    if "cupy" in sys.modules and getattr(sys.modules["cupy"], "__stand_in__", False):
        pytest.fail("the stand-in is still installed")
    import cupy
    import cupy.cuda.function  # noqa: F401
    import cupy.cuda.graph  # noqa: F401

    return cupy


# ------------------------------------------------------------------ names

def _public(obj):
    return [n for n in vars(obj) if not n.startswith("_") or n == "__version__"]


_DUNDERS = ("__cuda_array_interface__", "__array__", "__getitem__", "__setitem__", "__len__", "__iter__",
            "__bool__", "__int__", "__float__", "__index__", "__add__", "__mul__", "__eq__", "__neg__",
            "__matmul__", "__enter__", "__exit__", "__call__", "__array_ufunc__", "__array_priority__",
            "__reduce__")


def _real_class(real, cls):
    return {
        S.module.ndarray: real.ndarray, _cuda.Device: real.cuda.Device, _cuda.Stream: real.cuda.Stream,
        _cuda.ExternalStream: real.cuda.ExternalStream, _cuda.Event: real.cuda.Event,
        _cuda.Memory: real.cuda.Memory, _cuda.MemoryPointer: real.cuda.MemoryPointer,
        _cuda.MemoryPool: real.cuda.MemoryPool, _cuda.Graph: real.cuda.graph.Graph,
        _kernels.RawKernel: real.RawKernel, _kernels.RawModule: real.RawModule,
        _kernels.Function: real.cuda.function.Function, S._array.Generator: real.random.Generator,
        _cuda.CUDARuntimeError: real.cuda.runtime.CUDARuntimeError,
        _cuda.CUDADriverError: real.cuda.driver.CUDADriverError,
        _cuda.OutOfMemoryError: real.cuda.memory.OutOfMemoryError,
    }[cls]


def test_every_name_the_stand_in_offers_exists_in_cupy(real):
    missing, classes = [], set()
    for name, mod in S._MODULES.items():
        real_mod = real
        for part in name.split(".")[1:]:
            real_mod = getattr(real_mod, part)
        for attr in _public(mod):
            if not hasattr(real_mod, attr):
                missing.append(f"{name}.{attr}")
            value = getattr(mod, attr)
            if isinstance(value, type) and value.__module__.startswith("cupy_stand_in"):
                classes.add(value)
    classes |= {_cuda.Graph}
    for cls in classes:
        target = _real_class(real, cls)
        own = set(vars(cls))
        for attr in sorted(own):
            if (not attr.startswith("_") or attr in _DUNDERS) and not hasattr(target, attr):
                missing.append(f"{target.__module__}.{target.__name__}.{attr}")
    assert missing == []
    # the device-attribute enum's values are CUDA's
    for attr in _cuda.ATTR:
        assert getattr(S._MODULES["cupy.cuda.runtime"], attr) == getattr(real.cuda.runtime, attr), attr


_ALIAS_CALLS = {"importorskip", "import_module"}


def _cupy_names(tree: ast.AST) -> set:
    """Dotted names rooted at the cupy module or an alias of it or of one of its
    submodules (``import cupy as cp``, ``from cupy.cuda import runtime as rt``,
    ``cp = pytest.importorskip("cupy")``, ``rt = cupy.cuda.runtime``; a function
    parameter or fixture called ``cp`` or ``cupy``)."""
    aliases = {"cupy": "cupy", "cp": "cupy"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "cupy":
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "cupy"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cupy":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def dotted(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return [node.id] + parts[::-1]
        return None

    changed = True
    while changed:  # rt = cupy.cuda.runtime, cp = pytest.importorskip("cupy")
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, v = node.targets[0].id, node.value
                path = None
                if isinstance(v, ast.Call) and isinstance(v.func, (ast.Attribute, ast.Name)) \
                        and (getattr(v.func, "attr", None) or getattr(v.func, "id", None)) in _ALIAS_CALLS \
                        and v.args and isinstance(v.args[0], ast.Constant) \
                        and str(v.args[0].value).split(".")[0] == "cupy":
                    path = v.args[0].value
                elif isinstance(v, ast.Attribute):
                    d = dotted(v)
                    if d and d[0] in aliases and aliases[d[0]]:
                        path = ".".join([aliases[d[0]], *d[1:]])
                if path and aliases.get(target) != path:
                    aliases[target] = path
                    changed = True
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None), ast.Attribute):
            d = dotted(node)
            if d and d[0] in aliases:
                names.add(".".join([aliases[d[0]], *d[1:]]))
    return names


def _mark_parents(tree):
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node
    return tree


def _sources():
    for top in ("dmlq", "bench", "tools", "tests"):
        for path in sorted((ROOT / top).rglob("*")):
            if "cupy_stand_in" in path.parts or "__pycache__" in path.parts:
                continue
            if path.suffix in (".py", ".sh"):
                yield path


def scan_cupy_names() -> dict:
    """{dotted name: [files using it]} over dmlq/, bench/, tools/ and tests/."""
    found: dict = {}
    for path in _sources():
        text = path.read_text()
        if path.suffix == ".sh":  # python -c snippets inside the runbook
            names = set(re.findall(r"\bcupy(?:\.[A-Za-z_]\w*)+", text))
        else:
            names = _cupy_names(_mark_parents(ast.parse(text)))
        for n in names:
            found.setdefault(n, []).append(str(path.relative_to(ROOT)))
    return found


def _resolves(real, dotted: str) -> bool:
    obj = real
    for part in dotted.split(".")[1:]:
        if not hasattr(obj, part):
            try:
                import importlib

                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except Exception:  # noqa: BLE001
                return False
        obj = getattr(obj, part)
    return True


def test_scan_finds_aliases():
    tree = _mark_parents(ast.parse(
        "import cupy as xq\nfrom cupy.cuda import runtime as rt\nimport pytest\n"
        "c2 = pytest.importorskip('cupy')\nd = xq.cuda.driver\n"
        "xq.empty(1); rt.getDevice(); c2.cuda.Stream.null; d.occupancyMaxActiveBlocksPerMultiprocessor\n"
        "rt.noSuchThing\n"))
    assert _cupy_names(tree) == {"cupy.empty", "cupy.cuda.runtime.getDevice", "cupy.cuda.Stream.null",
                                 "cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor",
                                 "cupy.cuda.runtime.noSuchThing", "cupy.cuda.driver"}


def test_every_cupy_name_in_the_sources_exists_in_cupy(real):
    found = scan_cupy_names()
    assert len(found) > 40  # the scan sees the sources
    assert "cupy.cuda.runtime.getDevice" in found and "cupy.RawModule" in found
    missing = {n: files for n, files in found.items() if not _resolves(real, n)}
    assert missing == {}


def test_pool_limit_as_cupy_sets_it(real, cupy_stand_in):
    """MemoryPool.set_limit refuses what CuPy's refuses (memory.pyx: its MemoryPool needs a device
    to be made, so the rules are read there), and a block past the limit raises
    cupy.cuda.memory.OutOfMemoryError, a MemoryError, once the pool's cached blocks are freed
    (CuPy's _try_malloc)."""
    cp = cupy_stand_in
    for kw in ({"size": 1, "fraction": 0.5}, {"fraction": 1.5}, {"size": -1}):
        with pytest.raises(ValueError):
            cp.cuda.MemoryPool().set_limit(**kw)
    assert issubclass(real.cuda.memory.OutOfMemoryError, MemoryError)
    assert issubclass(cp.cuda.memory.OutOfMemoryError, MemoryError)
    pool = cp.get_default_memory_pool()
    kept = cp.empty(1 << 20, np.uint8)
    cached = cp.empty(1 << 20, np.uint8)
    del cached  # back to the pool's cache: freed to make room before the limit refuses
    pool.set_limit(size=pool.used_bytes() + (1 << 20))
    try:
        again = cp.empty(1 << 20, np.uint8)
        with pytest.raises(cp.cuda.memory.OutOfMemoryError, match="limit set to"):
            cp.empty(1, np.uint8)
        assert pool.get_limit() == pool.used_bytes()
    finally:
        pool.set_limit()
    assert pool.get_limit() == 0 and cp.empty(1 << 20, np.uint8).size == 1 << 20
    del kept, again


def test_compile_options_are_cupys(real):
    """What CuPy's RawModule adds to every NVRTC compile (cupy/cuda/compiler.py: each literal
    ``options += ('...',)``), less the ones it adds only on request (LTO, debug, jitify, the
    arch option, a precompiled header) or for HIP, is loader.CUPY_ADDED_OPTIONS: the static report, the
    NVRTC check and the stand-in compile the program a GPU user's CuPy compiles."""
    import inspect

    from dmlq.gpu import loader

    source = inspect.getsource(real.cuda.compiler)
    added = set(re.findall(r"options \+= \('([^']+)',\)", source))
    on_request = {"-dlto", "--device-debug", "--generate-line-info", "-DCUPY_USE_JITIFY", "--pch",
                  "-fcuda-flush-denormals-to-zero"}  # the last: hipcc's
    assert "-ftz=true" in added and "--device-as-default-execution-space" in added, sorted(added)
    assert added - on_request == set(loader.CUPY_ADDED_OPTIONS), sorted(added)


# ------------------------------------------------------------------ refusals CuPy makes without a device

def _real_pack(real, arg):
    """What CuPy 14 does with ``arg`` as a kernel argument: None when accepted
    (the launch then needs a CUDA context), else the exception it raises."""
    fn = real.cuda.function.Function.__new__(real.cuda.function.Function)
    try:
        fn((1,), (1,), (arg,), stream=types.SimpleNamespace(ptr=0))
    except (TypeError, OverflowError, ValueError) as e:
        return e
    except Exception as e:  # noqa: BLE001 - the CUDA error after packing
        if type(e).__name__ not in ("CUDARuntimeError", "CUDADriverError"):
            raise
        return None
    pytest.fail("a launch without a device did not fail")


class _IntLike(int):
    pass


ARGS = [5, -1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 1.5, True, 1 + 2j, np.float32(1.5), np.float16(2),
        np.int8(-3), np.uint8(3), np.int32(7), np.uint32(7), np.int64(-9), np.uint64(9), np.bool_(True),
        np.zeros(1, np.float32), np.zeros((1, 1), np.int16), np.zeros(1, np.uint64), np.zeros(3, np.float32),
        np.zeros(0, np.int32), np.zeros((2, 2), np.int8), np.array(4, np.int32), None, object(), "s", [1, 2],
        _IntLike(3)]


def _arg_id(a) -> str:
    """A test id that is the same in every process (pytest-xdist's workers must
    collect the same ids): a bare object() by its type, not its address."""
    if isinstance(a, np.ndarray):
        return f"{type(a).__name__}:{np.asarray(a).shape}"
    if type(a) is object:
        return type(a).__name__
    return f"{type(a).__name__}:{a!r}"[:40]


@pytest.mark.parametrize("arg", ARGS, ids=_arg_id)
def test_kernel_argument_packing_is_cupys(real, arg):
    want = _real_pack(real, arg)
    if want is not None:
        with pytest.raises(type(want)) as got:
            _kernels.pack(arg)
        if isinstance(want, TypeError):
            assert str(got.value) == str(want)
        return
    is_address, raw = _kernels.pack(arg)
    if arg is None:
        assert (is_address, raw) == (True, bytes(8))  # a null pointer
    elif isinstance(arg, np.ndarray):
        assert not is_address and raw == arg.tobytes()  # by value, its dtype's width
    else:
        from cupy._core._scalar import CScalar

        dt = CScalar(arg).dtype
        assert not is_address and raw == np.array(arg, dt).tobytes()
        assert len(raw) == dt.itemsize


def test_launch_needs_tuples_as_cupy_does(real, cupy_stand_in):
    fn = real.cuda.function.Function.__new__(real.cuda.function.Function)
    s = types.SimpleNamespace(ptr=0)
    for grid, block in (([1], (1,)), ((1,), [1])):
        with pytest.raises(TypeError) as want:
            fn(grid, block, (), stream=s)
        ker = _any_kernel(cupy_stand_in)
        with pytest.raises(TypeError) as got:
            ker(grid, block, ())
        assert str(got.value) == str(want.value)


def test_raw_module_and_kernel_arguments_as_cupy_checks_them(real):
    for make in (lambda cp: cp.RawModule(), lambda cp: cp.RawModule(code="x", path="y"),
                 lambda cp: cp.RawModule(code="x", options=["-a"]), lambda cp: cp.RawKernel("x", "k", options=["-a"])):
        with pytest.raises(TypeError) as want:
            make(real)
        with pytest.raises(TypeError) as got:
            make(S.module)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("call", [
    lambda cp, h, d: cp.may_share_memory(h, d),
    lambda cp, h, d: cp.ascontiguousarray(h), lambda cp, h, d: cp.broadcast_to(h, (2, 3)),
    lambda cp, h, d: cp.matmul(h, d)], ids=["may_share_memory", "ascontiguousarray",
                                           "broadcast_to", "matmul"])
def test_numpy_arrays_refused_as_cupy_refuses_them(real, cupy_stand_in, call):
    host = np.zeros(3, np.float32)
    with pytest.raises(TypeError) as want:
        call(real, host, host)  # CuPy checks its argument types before it needs a device
    with pytest.raises(TypeError) as got:
        call(cupy_stand_in, host, cupy_stand_in.zeros(3, np.float32))
    assert str(got.value) == str(want.value)


def test_numpy_arrays_refused_by_ufuncs(cupy_stand_in):
    """CuPy's ufuncs take scalars through CScalar, which refuses a NumPy array
    (cupy/_core/_kernel.pyx, _preprocess_arg; the installed CuPy asks for a
    device first, so this one is the stand-in's alone)."""
    cp = cupy_stand_in
    for fn in (cp.multiply, cp.add, cp.maximum):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            fn(cp.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(cp.zeros(3))


# ------------------------------------------------------------------ what needs a device: CUDA's H100 figures

_KERNEL = r"""
extern "C" __global__ void k(const float* x, float* y, int n, double s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * (float)s;
}
"""


def _any_kernel(cp):
    return cp.RawKernel(_KERNEL, "k")


def test_a_kernel_runs_on_the_harness(cupy_stand_in):
    cp = cupy_stand_in
    ker = _any_kernel(cp)
    x = cp.asarray(np.arange(10, dtype=np.float32))
    y = cp.zeros(10, np.float32)
    ker((1,), (32,), (x, y, np.int32(10), 2.0))
    np.testing.assert_array_equal(y.get(), np.arange(10, dtype=np.float32) * 2)
    assert S.launches[-1][:4] == ("k", (1, 1, 1), (32, 1, 1), 0)


def test_a_kernel_past_the_size_asked_is_an_illegal_address(cupy_stand_in):
    """A pool block is the size asked, not CuPy's 512-byte rounding: one element
    past it, read or written, fails the launch (stricter than memcheck, which sees
    only the pool's cudaMalloc), naming the kernel and the argument; the arrays
    are left as they were."""
    from cuda_host import harness

    cp = cupy_stand_in
    ker = _any_kernel(cp)
    x10, y10 = cp.asarray(np.arange(10, dtype=np.float32)), cp.zeros(10, np.float32)
    x11, y11 = cp.asarray(np.arange(11, dtype=np.float32)), cp.zeros(11, np.float32)
    for x, y, arg, kind in ((x10, y11, 0, "read"), (x11, y10, 1, "write")):
        with pytest.raises(harness.IllegalAddress, match=rf"^cudaErrorIllegalAddress: k block \(0,0,0\) "
                           rf"thread \(10,0,0\): invalid __global__ {kind} of size 4 at 0x[0-9a-f]+, 0 bytes "
                           rf"after the end of the nearest buffer \(argument {arg}, 40 bytes"):
            ker((1,), (32,), (x, y, np.int32(11), 2.0))
    np.testing.assert_array_equal(y11.get(), np.zeros(11, np.float32))
    ker((1,), (32,), (x10, y11, np.int32(10), 2.0))
    np.testing.assert_array_equal(y11.get()[:10], np.arange(10, dtype=np.float32) * 2)


@pytest.mark.parametrize("args, match", [
    (lambda cp, x, y: (x, y, 10, 2.0), "CuPy packs 8 bytes for a 4-byte C parameter"),   # int -> int64
    (lambda cp, x, y: (x, y, np.int32(10), np.float32(2)), "4 bytes for a 8-byte"),       # float32 for double
    (lambda cp, x, y: (x, np.ones(1, np.float64), np.int32(10), 2.0), "in no live device allocation"),
    (lambda cp, x, y: (x, np.zeros(1, np.float32), np.int32(10), 2.0), "4 bytes for a 8-byte"),
    (lambda cp, x, y: (x, y, np.int32(10)), "3 arguments for 4 parameters"),
])
def test_widths_and_pointers_checked_against_the_signature(cupy_stand_in, args, match):
    cp = cupy_stand_in
    x, y = cp.zeros(10, np.float32), cp.zeros(10, np.float32)
    with pytest.raises(_kernels.Refused, match=match):
        _any_kernel(cp)((1,), (32,), args(cp, x, y))


def test_a_null_pointer_is_none_and_memory_of_another_device_refused(cupy_stand_in):
    cp = cupy_stand_in
    ker = _any_kernel(cp)
    ker((1,), (32,), (None, None, np.int32(0), 1.0))  # n = 0: nothing dereferenced
    with cp.cuda.Device(1):
        elsewhere = cp.zeros(10, np.float32)
    with pytest.raises(_kernels.Refused, match="memory of device 1 on a launch on device 0"):
        ker((1,), (32,), (elsewhere, elsewhere, np.int32(10), 1.0))
    on_zero = ker.kernel  # a RawKernel loads itself per device; a Function belongs to one
    with cp.cuda.Device(1), pytest.raises(_cuda.CUDADriverError, match="loaded on device 0"):
        on_zero((1,), (32,), (elsewhere, elsewhere, np.int32(10), 1.0))


def test_h100_launch_limits(cupy_stand_in):
    cp = cupy_stand_in
    ker = _any_kernel(cp)
    x = cp.zeros(1, np.float32)
    args = (x, x, np.int32(0), 1.0)
    for grid, block in (((1,), (1025,)), ((1,), (32, 32, 2)), ((1,), (1, 1, 65)), ((1, 65536), (1,)),
                        ((1, 1, 65536), (1,)), ((2**31,), (1,))):
        with pytest.raises(_cuda.CUDADriverError, match="CUDA_ERROR_INVALID_VALUE"):
            ker(grid, block, args)
    ker((0,), (0,), args)  # CuPy launches max(1, dim)
    assert S.launches[-1][1:3] == ((1, 1, 1), (1, 1, 1))


def test_dynamic_shared_memory_needs_the_opt_in(cupy_stand_in):
    cp = cupy_stand_in
    ker = _any_kernel(cp)
    x = cp.zeros(1, np.float32)
    args = (x, x, np.int32(0), 1.0)
    occupancy = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
    assert occupancy(ker.kernel.ptr, 256, 48 * 1024) == 4       # 228 KiB / (48 + 1) KiB
    assert occupancy(ker.kernel.ptr, 256, 64 * 1024) == 0       # above 48 KiB before the opt-in
    with pytest.raises(_cuda.CUDADriverError, match="set max_dynamic_shared_size_bytes first"):
        ker((1,), (32,), args, shared_mem=64 * 1024)
    ker.max_dynamic_shared_size_bytes = 64 * 1024
    assert occupancy(ker.kernel.ptr, 256, 64 * 1024) == 3
    ker((1,), (32,), args, shared_mem=64 * 1024)
    with cp.cuda.Device(1):  # the opt-in is per device (a function per context)
        assert occupancy(ker.kernel.ptr, 256, 64 * 1024) == 0
    with pytest.raises(_cuda.CUDADriverError):
        ker.max_dynamic_shared_size_bytes = 228 * 1024
    assert occupancy(ker.kernel.ptr, 1024, 0) == 2 and occupancy(ker.kernel.ptr, 64, 0) == 32


_BOUNDED = r"""
extern "C" __global__ void __launch_bounds__(128) bounded(float* y) { y[threadIdx.x] = 1.0f; }
"""


def test_launch_bounds_and_resources_from_the_cubin(cupy_stand_in):
    """A function's num_regs, shared/local sizes and max_threads_per_block (CuPy's
    RawKernel attributes) come from the sm_90 cubin NVRTC makes of its code; a
    launch past max_threads_per_block fails as the driver fails it, and occupancy
    is 0 there."""
    cp = cupy_stand_in
    ker = cp.RawKernel(_BOUNDED, "bounded")
    assert ker.max_threads_per_block == ker.attributes["max_threads_per_block"] == 128
    assert 0 < ker.num_regs == ker.attributes["num_regs"] <= 32
    assert ker.shared_size_bytes == 0 and ker.local_size_bytes == 0
    y = cp.zeros(256, np.float32)
    ker((1,), (128,), (y,))
    with pytest.raises(_cuda.CUDADriverError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        ker((1,), (256,), (y,))
    occupancy = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
    assert occupancy(ker.kernel.ptr, 256, 0) == 0 and occupancy(ker.kernel.ptr, 128, 0) == 16


def _static_rows(source_prefix):
    """{kernel: (threads, registers, dynamic smem, resident blocks, limiter)} from the
    committed static report (bench/results/static.md, kept current by tests/test_static_report.py)."""
    text = (Path(__file__).resolve().parents[1] / "bench" / "results" / "static.md").read_text()
    rows = {}
    for m in re.finditer(r"^\| `(\w+(?:<[^`]*>)?)` \| (\d+) \| (\d+) \| [^|]+\| \d+ \| \d+\+(\d+) \| "
                         r"\d+% \((\d+), (\w+)\)", text, re.M):
        if m.group(1).startswith(source_prefix):
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6))
    return rows


def test_occupancy_counts_registers(cupy_stand_in):
    """The tensor-core matmul kernels hold 2 blocks per SM by their registers
    (about 250 per thread), not 3 by their 64 KiB of shared memory: the stand-in
    answers what the static report computes from the same cubin, so dmlq sizes
    its grids on the stand-in as on an H100."""
    from dmlq.gpu import loader

    cp = cupy_stand_in
    occupancy = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
    rows = {n: r for n, r in _static_rows("matmul_mma<").items() if r[4] == "registers"}
    assert len(rows) >= 4
    for name, (threads, regs, dyn, blocks, _) in sorted(rows.items())[:4]:
        fn = loader.function(next(s for s, names in loader.registry().items() if name in names), name)
        assert fn.num_regs == regs, name
        fn.max_dynamic_shared_size_bytes = max(dyn, 48 * 1024)
        assert occupancy(fn.kernel.ptr, threads, dyn) == blocks, name
        smem_only = 228 * 1024 // (dyn + 1024)
        assert blocks < smem_only, "register-limited: the case registers decide"


def test_host_harness_occupancy_counts_registers(host_device):
    """The host harness's HostDevice.resident_blocks answers by the stand-in's
    rule, from each kernel's sm_90 cubin: with the cap on host grids lifted, it
    gives every kernel of cuda/ the resident blocks the committed static report
    gives it at the launcher's block size (registers, static and dynamic shared
    memory; the report's own occupancy code, dmlq.gpu.device.occupancy), and it
    refuses a block past a kernel's __launch_bounds__. Ignoring registers it
    answers 3 instead of 2 for the tensor-core kernels and 8 instead of 6 for
    quantize_contig<float, int8>, and 2 for a block no SM takes."""
    from cuda_host import harness
    from dmlq.gpu import loader

    uncapped = harness.HostDevice(resident=32)
    source_of = {n: s for s, names in loader.registry().items() for n in names}
    rows = _static_rows("")
    assert len(rows) == len(source_of) and {r[4] for r in rows.values()} >= {"registers", "smem", "threads"}
    for name, (threads, _regs, dyn, blocks, _) in rows.items():
        assert uncapped.resident_blocks(source_of[name], name, threads, dyn) == blocks, name
        assert host_device.resident_blocks(source_of[name], name, threads, dyn) == min(2, blocks), name
    mma = "matmul_mma<int8, int8, int8, 128, 128, 64, 4, 16>"
    assert rows[mma][3:] == (2, "registers")
    with pytest.raises(harness.KernelFault, match="fits on no SM"):
        host_device.resident_blocks("matmul_mma.cu", mma, 256, 0)  # __launch_bounds__(128)


def test_pool_hands_a_freed_block_to_its_own_stream_at_once(cupy_stand_in):
    """CuPy 14.2's pool (cupy/cuda/memory.pyx): a freed block goes back to the
    arena of the stream it was allocated on; that stream's next request gets it
    at once, whatever kernel on another stream has yet to read it, and another
    stream's requests never get it. So an array freed under a kernel pending on
    another stream shows as a wrong result on the stand-in, as it may on a GPU."""
    import dmlq

    cp = cupy_stand_in
    pool = cp.get_default_memory_pool()
    q = cp.asarray(np.arange(-128, 128, dtype=np.int8))  # the null stream: copied now
    freed = q.data.ptr
    other = cp.cuda.Stream(non_blocking=True)
    with other:
        out = dmlq.dequantize_linear(q, 0.5, np.int8(0))  # pending on `other`
    assert pool.used_bytes() >= 3 * 512 and pool.n_free_blocks() == 0
    del q
    assert pool.n_free_blocks() == 1
    with other:
        assert cp.empty(256, cp.int8).data.ptr != freed  # another stream's request: a new block
    mine = cp.full(256, 7, cp.int8)  # the null stream's next request: the freed block, written now
    assert mine.data.ptr == freed and pool.n_free_blocks() == 1  # (the other stream's block is free again)
    other.synchronize()
    np.testing.assert_array_equal(out.get(), np.full(256, 3.5, np.float32))  # read the new owner's bytes
    pool.free_all_blocks()
    assert pool.n_free_blocks() == 0 and pool.free_bytes() == 0
    whole = cp.empty(1024, cp.uint8)
    start = whole.data.ptr
    del whole
    first, second = cp.empty(512, cp.uint8), cp.empty(512, cp.uint8)  # the freed block, split in two
    assert (first.data.ptr, second.data.ptr) == (start, start + 512)
    assert _cuda.find_allocation(second.data.ptr) is second.data.mem  # not one past the end of `first`


def test_streams_devices_and_capture(cupy_stand_in):
    cp = cupy_stand_in
    assert cp.cuda.runtime.getDeviceCount() == 2 and cp.cuda.get_current_stream() is cp.cuda.Stream.null
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        assert cp.cuda.get_current_stream() is s
        with cp.cuda.Device(1):
            assert cp.cuda.get_current_stream().ptr == 0 and cp.zeros(1).device.id == 1
    ext = cp.cuda.ExternalStream(s.ptr)
    assert ext.ptr == s.ptr
    x = cp.zeros(4, np.float32)
    with s:
        s.begin_capture()
        x[...] = 3
        with pytest.raises(_cuda.CUDARuntimeError, match="Capture"):
            s.synchronize()
        with pytest.raises(_cuda.CUDARuntimeError, match="Capture"):
            cp.asarray(np.zeros(3))
        graph = s.end_capture()
    np.testing.assert_array_equal(x.get(), 0)  # recorded, not run
    graph.launch(s)
    np.testing.assert_array_equal(x.get(stream=s), 3)  # a copy on s comes after s's work


def test_computations_are_recorded_in_a_capture(cupy_stand_in):
    """An array computation made while a stream captures runs at each launch of the graph, on
    what the memory holds then (CuPy records its kernel), not once at capture time."""
    cp = cupy_stand_in
    x = cp.asarray(np.arange(6, dtype=np.uint8))
    out = cp.zeros(6, np.float32)
    s, idx = cp.cuda.Stream(non_blocking=True), cp.asarray(np.array([0, 2, 4]))
    with s:
        s.begin_capture()
        results = [(x << 1) | x, -x, cp.ascontiguousarray(x[::2]), x.astype(np.int32) + 1,
                   cp.where(x > 2, x, 0), x.reshape(2, 3).T.reshape(-1), cp.concatenate([x, x]), x.sum(),
                   x[idx]]
        zeros = cp.zeros(6, np.float32)
        cp.add(zeros, x, out=zeros)  # a memset recorded: each launch starts from 0
        cp.multiply(x, 0.5, out=out)
        graph = s.end_capture()
    for values in (np.array([9, 1, 250, 3, 7, 4], np.uint8), np.array([0, 2, 4, 6, 8, 10], np.uint8)):
        x[...] = cp.asarray(values)
        graph.launch(s)
        s.synchronize()
        v = values
        for got, want in zip(results, [(v << 1) | v, -v, v[::2], v.astype(np.int32) + 1, np.where(v > 2, v, 0),
                                       v.reshape(2, 3).T.reshape(-1), np.concatenate([v, v]), v.sum(),
                                       v[[0, 2, 4]]]):
            np.testing.assert_array_equal(got.get(), want, strict=True)
        np.testing.assert_array_equal(out.get(), v * np.float32(0.5))
        np.testing.assert_array_equal(zeros.get(), v.astype(np.float32))


def test_streams_are_ordered_only_by_waits(cupy_stand_in):
    """Work on a created stream runs only when something orders it: a copy on
    another stream (or on the legacy null stream, for a non-blocking one) does
    not wait for it, a wait_event does, and so do synchronizations."""
    cp = cupy_stand_in
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.zeros(4, np.float32)
    with a:
        x.fill(1)
        done_a = a.record()
        assert not a.done and not done_a.done
    with b:
        np.testing.assert_array_equal(x.get(), 0)  # b never waited for a
        b.wait_event(done_a)
        np.testing.assert_array_equal(x.get(), 1)  # now it has
    assert a.done and done_a.done
    with a:
        x.fill(2)
    np.testing.assert_array_equal(x.get(), 1)      # the null stream does not wait for a non-blocking one
    a.synchronize()
    np.testing.assert_array_equal(x.get(), 2)
    blocking = cp.cuda.Stream()
    with blocking:
        x.fill(3)
    np.testing.assert_array_equal(x.get(), 3)      # ... but for a blocking one it does (legacy semantics)
    with a:
        x.fill(4)
        done_a = a.record()
    done_a.synchronize()
    np.testing.assert_array_equal(x.get(), 4)
    with a:
        x.fill(5)
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(x.get(), 5)
    y = cp.zeros(4, np.float32)  # (zeros is a memset on the current stream: on a, unordered with the null one)
    with a:  # a kernel launch is stream work like any other
        ker = _any_kernel(cp)
        ker((1,), (4,), (x, y, np.int32(4), 2.0))
    np.testing.assert_array_equal(y.get(), 0)
    np.testing.assert_array_equal(y.get(stream=a), 10)


def test_arrays_views_and_interface(cupy_stand_in):
    cp = cupy_stand_in
    h = np.arange(24, dtype=np.int16).reshape(4, 6)
    a = cp.asarray(h)
    v = a[1:, ::-2]
    assert v.data.ptr == a.data.ptr + 1 * 12 + 5 * 2 and v.strides == (12, -4)
    np.testing.assert_array_equal(v.get(), h[1:, ::-2])
    cai = v.__cuda_array_interface__
    assert cai["data"][0] == v.data.ptr and cai["strides"] == (12, -4) and cai["typestr"] == "<i2"
    w = cp.ndarray(v.shape, v.dtype, memptr=a.data + 12 + 10, strides=v.strides)
    np.testing.assert_array_equal(w.get(), h[1:, ::-2])
    assert a.data.device_id == 0 and a.device.id == 0
    assert cp.asarray(v) is v and cp.may_share_memory(a, v) and not cp.may_share_memory(a, cp.zeros(3))
    assert cp.empty(0).data.ptr == 0


def test_pickling_an_array_copies_it_to_the_host_as_cupy_does(real, cupy_stand_in):
    """CuPy pickles an array as ``array, (a.get(),)`` (a synchronous copy to the host: what
    dask's tokenize of a CuPy array costs), and its ``get`` of an empty array copies nothing."""
    import pickle

    from cupy_stand_in import counts

    cp = cupy_stand_in
    assert real.ndarray.__reduce__ is not object.__reduce__  # CuPy's own
    a = cp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2])
    counts["downloads"] = 0
    back = pickle.loads(pickle.dumps(a))
    assert counts["downloads"] == 1 and isinstance(back, cp.ndarray) and back.data.ptr != a.data.ptr
    np.testing.assert_array_equal(back.get(), [[0, 2], [3, 5]])
    counts["downloads"] = 0
    assert cp.empty((0, 4), np.int8).get().shape == (0, 4) and counts["downloads"] == 0


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2fnuz", "int4", "uint2", "float4_e2m1fn",
                                  "bfloat16"])
def test_ml_dtypes_refused_as_cupy_refuses_them(real, cupy_stand_in, name):
    """CuPy 14.2 holds no float8/int4/int2/float4 array (ValueError before any device call) but
    does take bfloat16; the stand-in refuses and takes the same (dmlq's GPU form rests on it)."""
    md = pytest.importorskip("ml_dtypes")
    dt = np.dtype(getattr(md, name))
    try:
        real.ndarray((0,), dtype=dt)
    except ValueError as e:
        want = str(e)
    except Exception:  # past the dtype check: the allocation needs a device
        want = None
    if want is None:
        assert cupy_stand_in.ndarray((0,), dtype=dt).dtype == dt
        assert cupy_stand_in.zeros(2, np.uint16).view(dt).dtype == dt
        return
    for make in (lambda: cupy_stand_in.ndarray((0,), dtype=dt), lambda: cupy_stand_in.empty(3, dt),
                 lambda: cupy_stand_in.zeros(3, np.uint8).view(dt), lambda: cupy_stand_in.zeros(3).astype(dt),
                 lambda: cupy_stand_in.asarray(np.zeros(3, dt))):
        with pytest.raises(ValueError) as got:
            make()
        assert str(got.value) == want


def test_setitem_of_a_host_array_copies_it_now(cupy_stand_in):
    """``y[...] = numpy_array`` is a host-to-device copy made at the assignment (so refused in a
    capture), not a read of the host array when the stream gets to it."""
    cp = cupy_stand_in
    s = cp.cuda.Stream(non_blocking=True)
    y, h = cp.zeros(4, np.float32), np.arange(4, dtype=np.float32)
    with s:
        y[...] = h
        h[:] = -1
        np.testing.assert_array_equal(y.get(stream=s), np.arange(4, dtype=np.float32))
        s.begin_capture()
        try:
            with pytest.raises(_cuda.CUDARuntimeError, match="Capture"):
                y[...] = h
            y[...] = 2.0  # a scalar is a fill, recorded
        finally:
            graph = s.end_capture()
        graph.launch(s)
        np.testing.assert_array_equal(y.get(stream=s), 2)
