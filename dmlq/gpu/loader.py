"""Kernel sources, compile options and the per-device module cache.

Sources live in the top-level ``cuda/`` folder of a checkout and in
``dmlq/cuda/`` inside an installed wheel. ``#include "x.cuh"`` of a dmlq header is
inlined here (with ``#line`` markers) rather than left to the compiler, so CuPy's
on-disk cache, whose key is the source text, sees header changes too.
"""
from __future__ import annotations

import functools
import importlib
import importlib.resources
import re
import threading
from pathlib import Path

from ..keys import param_key

# CuPy appends -ftz=true and --device-as-default-execution-space to every RawModule
# compile through NVRTC and cannot be told not to; the static report, the NVRTC check and
# the stand-in compile with them too, so they build what CuPy builds (NVRTC 13.0 refuses a
# kernel's generic lambdas without the second: the H200 session of 2026-11-26 saw it).
# Kernels are immune to -ftz: every float operation that decides a result goes through
# the non-.ftz PTX helpers in common.cuh (tests/test_nvrtc.py checks the PTX).
# --fmad=false keeps any other float expression from being contracted.
COMPILE_OPTIONS = ("-std=c++17", "--fmad=false")
CUPY_ADDED_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")

# The oldest GPU each source compiles for: dp4a needs sm_61, mma.sync on int8
# with ldmatrix and cp.async sm_80. Older devices skip those sources entirely.
MIN_CC = {"matmul_dp4a.cu": 61, "matmul_dp4a_kmajor4.cu": 61, "matmul_dp4a_kmajor.cu": 61, "matmul_mma.cu": 80, "matmul_mma_packed.cu": 80, "matmul_mma_kmajor.cu": 80, "matmul_mma_kmajor4.cu": 80, "matmul_mma_grouped.cu": 80,
          "matmul_stream_packed.cu": 61, "matmul_wgmma.cu": 90}
# wgmma (matmul_wgmma.cu) exists on sm_90a alone: that source is built for it, and only on 9.0.
# CuPy appends its own -arch=sm_90 after these options; NVRTC (13.5, checked here) then keeps
# sm_90a, the same architecture (of two different ones it takes the last, with a warning).
MAX_CC = {"matmul_wgmma.cu": 90}
SOURCE_OPTIONS = {"matmul_wgmma.cu": ("-arch=sm_90a",)}

# Modules in dmlq.gpu that launch kernels; each has KERNELS = {source: names}.
KERNEL_MODULES = ("elementwise", "matmul", "avgpool", "intmm", "qkernels", "qmm_stream", "dynquant", "packed")

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([\w.]+)"\s*$', re.M)


def cuda_dir() -> Path:
    """The folder holding the .cu/.cuh files (wheel first, then the checkout)."""
    packaged = importlib.resources.files("dmlq").joinpath("cuda")
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "cuda"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("dmlq: kernel sources not found (no dmlq/cuda and no ../cuda)")


@functools.lru_cache(maxsize=None)
def source_text(name: str) -> str:
    """The source ``name`` with dmlq headers inlined once each, ready for NVRTC."""
    seen = set()

    def expand(file_name: str) -> str:
        seen.add(file_name)
        text = (cuda_dir() / file_name).read_text()
        out = [f'#line 1 "{file_name}"']
        for lineno, line in enumerate(text.splitlines(), 1):
            m = _INCLUDE.match(line)
            if m and (cuda_dir() / m.group(1)).is_file():
                if m.group(1) not in seen:
                    out.append(expand(m.group(1)))
                out.append(f'#line {lineno + 1} "{file_name}"')
            else:
                out.append(line)
        return "\n".join(out)

    return expand(name) + "\n"


def registry() -> dict:
    """{source file: tuple of kernel names (template instantiations included)}."""
    table: dict = {}
    for mod_name in KERNEL_MODULES:
        mod = importlib.import_module(f"dmlq.gpu.{mod_name}")
        for source, names in mod.KERNELS.items():
            table.setdefault(source, [])
            table[source].extend(n for n in names if n not in table[source])
    return {k: tuple(v) for k, v in table.items()}


_modules: dict = {}
# One module and one Function per key, whichever thread asks first: a kernel's
# dynamic shared memory opt-in (dmlq.gpu.device) is an attribute of its Function,
# so two Functions of one kernel made at once left the second without it.
_lock = threading.RLock()


def module(source: str):
    """The cupy.RawModule of ``source`` on the current device, compiled once."""
    import cupy

    key = param_key((cupy.cuda.runtime.getDevice(), source))
    mod = _modules.get(key)
    if mod is None:
        with _lock:
            mod = _modules.get(key)
            if mod is None:
                mod = _modules[key] = cupy.RawModule(code=source_text(source), options=options(source),
                                                     name_expressions=registry()[source])
    return mod


def options(source: str) -> tuple:
    """The NVRTC options dmlq gives ``source`` (CuPy adds CUPY_ADDED_OPTIONS and its -arch)."""
    return COMPILE_OPTIONS + SOURCE_OPTIONS.get(source, ())


_functions: dict = {}


def function(source: str, name: str):
    """The kernel ``name`` (as listed in KERNELS) on the current device."""
    import cupy

    key = param_key((cupy.cuda.runtime.getDevice(), source, name))
    fn = _functions.get(key)
    if fn is None:
        with _lock:
            fn = _functions.get(key)
            if fn is None:
                fn = _functions[key] = module(source).get_function(name)
    return fn


def sources_for(compute_capability: int) -> tuple:
    """The kernel sources a device of this compute capability (e.g. 75) can run."""
    return tuple(s for s in registry() if MIN_CC.get(s, 0) <= compute_capability <= MAX_CC.get(s, 10**6))
