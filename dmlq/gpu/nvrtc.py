"""Compile kernel sources through NVRTC without a GPU (CI and `dmlq check`).

Uses the same options CuPy would (ours plus the -ftz=true CuPy appends) and
the NVRTC library that CuPy loads (the nvidia-cuda-nvrtc wheel).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .loader import CUPY_ADDED_OPTIONS, registry, source_text
from .loader import options as loader_options

# sm_80, the oldest arch the tensor-core and cp.async kernels need, and sm_90, the static
# report's. sm_89 (Ada) is not compiled: the sources hold no __CUDA_ARCH__ branch and use
# nothing past sm_80 outside sm_90's own report, so its PTX differed from sm_80's only in
# its .target line, for 9 compiles (about 245 s of CPU) of a cold CI run. For the same
# reason the tests compile sm_80 through NVRTC's front end only (``front_end=True``, the
# -fdevice-syntax-only option: every template instantiated and its lowered name, every
# arch-gated declaration and attribute checked for sm_80, in about 1 % of a full compile)
# and check sm_80's code generation by what it depends on (tests/test_nvrtc.py): sm_90's
# full compile, no __CUDA_ARCH__ in the sources, every inline PTX instruction valid on
# sm_80. DMLQ_NVRTC_FULL=1 makes those tests compile sm_80 in full and compare its PTX
# with sm_90's.
ARCHS = ("sm_80", "sm_90")
FRONT_END_OPTION = "-fdevice-syntax-only"


@dataclass
class CompileResult:
    source: str
    arch: str
    ptx: str  # "" for a front-end-only compile
    log: str
    lowered: dict  # name expression -> mangled name


def compile_source(source: str, arch: str, names=None, front_end: bool = False) -> CompileResult:
    """Compile ``source`` for ``arch``; raises RuntimeError with the log on error.
    ``front_end``: NVRTC's front end only (FRONT_END_OPTION): the log and the lowered
    names, no PTX.

    Memoized per (source, arch, names, front_end): a test session compiles each once.
    """
    names = registry()[source] if names is None else tuple(names)
    return _compile(source, arch, names, bool(front_end))


def cache_dir() -> Path:
    """On-disk cache of NVRTC results: $DMLQ_NVRTC_CACHE, or dmlq/nvrtc under
    $XDG_CACHE_HOME (~/.cache without it), beside tools/static_report.py's cache."""
    env = os.environ.get("DMLQ_NVRTC_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dmlq" / "nvrtc"


@functools.lru_cache(maxsize=None)
def _compile(source: str, arch: str, names: tuple, front_end: bool = False) -> CompileResult:
    """Memoized in memory and on disk, keyed by the source text, the options,
    the name expressions and the NVRTC version."""
    from cupy_backends.cuda.libs import nvrtc

    options = [*loader_options(source), *CUPY_ADDED_OPTIONS, f"--gpu-architecture={arch}"]  # CuPy's order
    if front_end:
        options.append(FRONT_END_OPTION)
    text = source_text(source)
    key = hashlib.sha256(json.dumps([text, options, names, list(nvrtc.getVersion())]).encode()).hexdigest()
    path = cache_dir() / f"{Path(source).stem}-{arch}{'-front' if front_end else ''}-{key[:24]}.json"
    try:
        return CompileResult(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    result = _compile_now(nvrtc, source, arch, names, text, options)
    if front_end:
        result.ptx = ""  # NVRTC's placeholder: no code was generated
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(result)))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs the next run a compile
    return result


def _compile_now(nvrtc, source, arch, names, text, options) -> CompileResult:
    prog = nvrtc.createProgram(text, source, [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
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
