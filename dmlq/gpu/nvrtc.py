"""Compile kernel sources through NVRTC without a GPU (CI and `dmlq check`).

Uses the same options CuPy would (ours plus the -ftz=true CuPy appends) and
the NVRTC library that CuPy loads (the nvidia-cuda-nvrtc wheel).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .loader import COMPILE_OPTIONS, CUPY_ADDED_OPTIONS, registry, source_text

ARCHS = ("sm_80", "sm_89", "sm_90")


@dataclass
class CompileResult:
    source: str
    arch: str
    ptx: str
    log: str
    lowered: dict  # name expression -> mangled name


def compile_source(source: str, arch: str, names=None) -> CompileResult:
    """Compile ``source`` for ``arch``; raises RuntimeError with the log on error.

    Memoized per (source, arch, names): a test session compiles each once.
    """
    names = registry()[source] if names is None else tuple(names)
    return _compile(source, arch, names)


@functools.lru_cache(maxsize=None)
def _compile(source: str, arch: str, names: tuple) -> CompileResult:
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(source_text(source), source, [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        options = [*COMPILE_OPTIONS, *CUPY_ADDED_OPTIONS, f"--gpu-architecture={arch}"]
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"{source} ({arch}): {e}\n{nvrtc.getProgramLog(prog)}") from None
        log = nvrtc.getProgramLog(prog)
        if isinstance(log, bytes):
            log = log.decode()
        ptx = nvrtc.getPTX(prog)
        if isinstance(ptx, bytes):
            ptx = ptx.decode()
        lowered = {n: nvrtc.getLoweredName(prog, n) for n in names}
        return CompileResult(source, arch, ptx, log.strip("\x00").strip(), lowered)
    finally:
        nvrtc.destroyProgram(prog)
