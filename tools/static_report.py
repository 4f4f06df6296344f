#!/usr/bin/env python3
"""Static report of every dmlq kernel variant on sm_90 (H100), no GPU needed.

    python tools/static_report.py --out bench/results/static.md

For each source in ``dmlq.gpu.loader.registry()`` one NVRTC program is built
with all of the source's name expressions, for ``-arch=sm_90`` (a real
architecture, so NVRTC runs ptxas and emits a CUBIN) with the loader's
COMPILE_OPTIONS, the ``-ftz=true`` CuPy appends, and ``-Xptxas -v``. NVRTC is
called through ctypes on the nvidia-cuda-nvrtc wheel's library, not through
``cupy_backends.cuda.libs.nvrtc``: that binding's getCUBIN drops the last byte
of the image (it strips a "trailing NUL" as for PTX), which leaves an ELF that
nvdisasm rejects.

Per kernel (template instantiation) the report gives:

* registers, spill stores/loads, stack frame (= local memory per thread) and
  static shared memory. Spills exist only in ptxas' ``-v`` log; registers,
  stack frame and static shared memory are read both from that log and from
  the cubin's ELF (EIATTR_REGCOUNT and EIATTR_FRAME_SIZE in ``.nv.info``, the
  size of the ``.nv.shared.<kernel>`` section) and must agree, so a change in
  the log's wording fails loudly instead of reporting zeros.
* theoretical occupancy on H100, computed here (the CUDA occupancy calculator's
  rules) from registers, the block size and dynamic shared memory the launchers
  in dmlq/gpu/*.py use (``launch_geometry``), static shared memory, and the
  H100 limits in ``H100``. Block sizes are checked against ``__launch_bounds__``
  (EIATTR_MAX_THREADS) where the kernel has them.
* the main loop's instruction mix, from the nvdisasm (nvidia-cuda-nvdisasm
  wheel) SASS of the cubin.

Main-loop heuristic (``find_loops``/``main_loop``): every ``BRA`` whose target
label lies at or before the branch is a back edge; all back edges to one target
make one loop, the address interval [target, last back edge]. A loop is a
*compute loop* if its interval holds at least one MMA (``IMMA``/``IGMMA``) or
DP4A (``IDP``) instruction. The innermost compute loops are those whose interval
strictly contains no other compute loop's interval; the main loop is the
innermost compute loop with the most MMA + DP4A instructions (ties: the longer
one). Its body is every instruction in the interval (a non-compute loop nested
inside, e.g. a wait or a fallback load path, is counted once, as static code),
NOPs excluded. The report gives the body's instruction count, its MMA or DP4A
count and their ratio (MMA or DP4A per instruction), and, where the body holds
nested loops, the count and ratio without them (an iteration that skips them).
Kernels without a compute loop get resources only.
This is a static count of the code, not of issued instructions: it is exact for
a loop laid out as one straight block (what ptxas emits for unrolled k-steps),
and an upper bound on the instructions per iteration when the body has branches.

Compiled cubins, logs, SASS and PTX are cached on disk (``--cache-dir``, default
``$DMLQ_CACHE_DIR`` or ``$XDG_CACHE_HOME/dmlq/static``, ~/.cache/dmlq/static without
it) keyed by the source text, the name expressions, the options and the NVRTC/nvdisasm versions.
"""
from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import dataclasses
import glob
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dmlq.gpu.device import H100_LIMITS, occupancy  # noqa: E402  (after the path set-up)

ARCH = "sm_90"
CACHE_VERSION = "1"

# H100 (sm_90) limits and the occupancy calculator live with the device facts.
H100 = H100_LIMITS

# Targets from issue 13 ("What it must show"): MMA or DP4A per main-loop instruction.
LOOP_TARGETS = {"matmul_mma": ("MMA", 1 / 6), "matmul_dp4a": ("DP4A", 1 / 3),
                "matmul_dp4a_wide": ("DP4A", 1 / 3)}


# --------------------------------------------------------------------------- tools

def _wheel_dirs():
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        return [Path(p) for p in nvidia.__path__]
    except ImportError:
        return []


def find_nvrtc() -> str:
    """Path of libnvrtc: $DMLQ_NVRTC, the nvidia-cuda-nvrtc wheel, the system."""
    env = os.environ.get("DMLQ_NVRTC")
    if env:
        return env
    found = []
    for d in _wheel_dirs():
        found += glob.glob(str(d / "**" / "libnvrtc.so.*"), recursive=True)
        found += glob.glob(str(d / "**" / "nvrtc64_*.dll"), recursive=True)
    found = [f for f in found if "builtins" not in os.path.basename(f)]
    if found:
        return sorted(found)[-1]
    cuda = os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME")
    if cuda:
        for f in sorted(glob.glob(os.path.join(cuda, "lib*", "libnvrtc.so*"))):
            return f
    lib = ctypes.util.find_library("nvrtc")
    if lib:
        return lib
    raise FileNotFoundError("libnvrtc not found: pip install nvidia-cuda-nvrtc (or set DMLQ_NVRTC)")


def find_nvdisasm() -> str:
    """Path of nvdisasm: $DMLQ_NVDISASM, the nvidia-cuda-nvdisasm wheel, PATH, CUDA_PATH."""
    env = os.environ.get("DMLQ_NVDISASM")
    if env:
        return env
    for d in _wheel_dirs():
        for f in sorted(glob.glob(str(d / "**" / "bin" / "nvdisasm*"), recursive=True)):
            if os.access(f, os.X_OK):
                return f
    f = shutil.which("nvdisasm")
    if f:
        return f
    cuda = os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME")
    if cuda and os.access(os.path.join(cuda, "bin", "nvdisasm"), os.X_OK):
        return os.path.join(cuda, "bin", "nvdisasm")
    raise FileNotFoundError("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or set DMLQ_NVDISASM)")


class Nvrtc:
    """The few NVRTC entry points used here, through ctypes."""

    def __init__(self, path: str | None = None):
        self.path = path or find_nvrtc()
        self.lib = ctypes.CDLL(self.path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = f"{major.value}.{minor.value}"

    def _check(self, status, what, prog=None):
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status).decode()
            log = f"\n{self._log(prog)}" if prog is not None else ""
            raise RuntimeError(f"{what}: {msg}{log}")

    def _log(self, prog) -> str:
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")

    def compile(self, text: str, name: str, names, options, ptx: bool = False):
        """(cubin bytes, log, {name expression: lowered name}), and the PTX text
        after them where ``ptx`` is true (one program gives both)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), name.encode(),
                                           0, None, None), "nvrtcCreateProgram")
        try:
            for n in names:
                self._check(lib.nvrtcAddNameExpression(prog, n.encode()), f"nvrtcAddNameExpression({n})")
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            self._check(lib.nvrtcCompileProgram(prog, len(options), opts),
                        f"nvrtcCompileProgram({name}, {' '.join(options)})", prog)
            log = self._log(prog)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            buf = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            cubin = buf.raw[:size.value]
            lowered = {}
            for n in names:
                out = ctypes.c_char_p()
                self._check(lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(out)),
                            f"nvrtcGetLoweredName({n})")
                lowered[n] = out.value.decode()
            if not ptx:
                return cubin, log, lowered
            self._check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            buf = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            return cubin, log, lowered, buf.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def nvdisasm_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\S+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "?"


def default_cache_dir() -> Path:
    env = os.environ.get("DMLQ_CACHE_DIR")
    if env:
        return Path(env) / "static"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dmlq" / "static"


def _write_atomic(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True):
    """Hold an exclusive lock on ``path`` (created if missing) against every
    other process and thread (flock locks an open file, so two opens of the
    same path exclude each other): yields True once held, or False at once where
    ``blocking`` is false and someone else holds it. Without fcntl (not POSIX)
    it yields True: builds are then merely duplicated."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def compile_options(source: str | None = None):
    """CuPy's options for ``source`` on an sm_90 device, in CuPy's order: dmlq's own (a
    source's, such as matmul_wgmma.cu's -arch=sm_90a, included), then CuPy's and its arch."""
    from dmlq.gpu.loader import COMPILE_OPTIONS, CUPY_ADDED_OPTIONS, options
    own = COMPILE_OPTIONS if source is None else options(source)
    return [*own, *CUPY_ADDED_OPTIONS, f"-arch={ARCH}", "-Xptxas", "-v"]


@dataclasses.dataclass
class Build:
    source: str
    text_sha: str
    cubin: bytes
    log: str
    lowered: dict
    sass: str
    ptx: str | None  # the same program's PTX (tests/prebuild.py's compiled(): one compile)


class Toolchain:
    def __init__(self, cache_dir: Path | None = None, use_cache: bool = True):
        self.nvrtc = Nvrtc()
        self.nvdisasm = find_nvdisasm()
        self.nvdisasm_version = nvdisasm_version(self.nvdisasm)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.use_cache = use_cache

    def entry(self, source: str, names):
        """(the cache entry's path without suffix, the source text, its sha256, the options)."""
        from dmlq.gpu.loader import source_text

        text = source_text(source)
        options = compile_options(source)
        text_sha = hashlib.sha256(text.encode()).hexdigest()
        key = hashlib.sha256(json.dumps(
            [CACHE_VERSION, self.nvrtc.version, self.nvdisasm_version, options, source, list(names),
             text_sha]).encode()).hexdigest()[:32]
        return self.cache_dir / key, text, text_sha, options

    def build(self, source: str, names, wait: bool = True) -> Build | None:
        """Compile one source (all its names in one program) and disassemble it, cached.
        One build per cache entry across processes (a lock file beside it): a
        second caller waits for the first and reads its result, or, with
        ``wait`` false, returns None at once (tests/prebuild.py moves on)."""
        base, text, text_sha, options = self.entry(source, names)
        files = [base.with_suffix(s) for s in (".cubin", ".json", ".sass", ".ptx")]

        def cached():  # an entry written before the PTX was kept has none: Build.ptx None
            if self.use_cache and all(f.is_file() for f in files[:3]):
                meta = json.loads(files[1].read_text())
                ptx = files[3].read_text() if files[3].is_file() else None
                return Build(source, text_sha, files[0].read_bytes(), meta["log"], meta["lowered"],
                             files[2].read_text(), ptx)
            return None

        if not self.use_cache:
            return self._compile(source, names, text, text_sha, options, files)
        hit = cached()
        if hit is not None:
            return hit
        with file_lock(base.with_suffix(".lock"), wait) as held:
            if not held:
                return None
            return cached() or self._compile(source, names, text, text_sha, options, files)

    def _compile(self, source, names, text, text_sha, options, files) -> Build:
        cubin, log, lowered, ptx = self.nvrtc.compile(text, source, names, options, ptx=True)
        sass = self.disassemble(cubin)
        if self.use_cache:
            _write_atomic(files[0], cubin)
            _write_atomic(files[3], ptx.encode())
            _write_atomic(files[2], sass.encode())
            _write_atomic(files[1], json.dumps({"log": log, "lowered": lowered}).encode())
        return Build(source, text_sha, cubin, log, lowered, sass, ptx)

    def disassemble(self, cubin: bytes) -> str:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "k.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            r = subprocess.run([self.nvdisasm, "-c", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {r.stderr.strip()}")
        return r.stdout


# --------------------------------------------------------------------------- ptxas log

_LOG_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_LOG_PROPS = re.compile(r"Function properties for (\S+)")
_LOG_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_LOG_USED = re.compile(r"Used (\d+) registers")
_LOG_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict:
    """{function: {regs, smem, stack, spill_stores, spill_loads, entry}} from ptxas -v output.

    Functions that are not entries (non-inlined device functions) get only the
    stack/spill line; entries get registers and shared memory from their "Used" line.
    """
    funcs: dict = {}
    entry = props = None
    for line in log.splitlines():
        m = _LOG_ENTRY.search(line)
        if m:
            entry = m.group(1)
            funcs.setdefault(entry, {})["entry"] = True
            continue
        m = _LOG_PROPS.search(line)
        if m:
            props = m.group(1)
            funcs.setdefault(props, {}).setdefault("entry", False)
            continue
        m = _LOG_STACK.search(line)
        if m and props is not None:
            funcs[props].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
            continue
        m = _LOG_USED.search(line)
        if m and entry is not None:
            sm = _LOG_SMEM.search(line)
            funcs[entry].update(regs=int(m.group(1)), smem=int(sm.group(1)) if sm else 0)
    return funcs


# --------------------------------------------------------------------------- cubin ELF

EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04
SMEM_RESERVED_IN_SECTION = 1024  # .nv.shared.<kernel> = reserved + static (sm_80+)


def parse_cubin(cubin: bytes) -> dict:
    """{function: {regs, frame, smem, max_threads}} from the cubin's ELF sections."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link, info, _al, _ent = struct.unpack_from(
            "<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        secs.append(dict(name=name, type=typ, off=off, size=size, link=link, info=info))
    if shoff + shnum * shentsize > len(cubin):
        raise ValueError("truncated cubin")

    def cstr(table_off, o):
        end = cubin.index(b"\0", table_off + o)
        return cubin[table_off + o:end].decode()

    stroff = secs[shstrndx]["off"]
    for s in secs:
        s["name"] = cstr(stroff, s["name"])
    symtab = next(s for s in secs if s["name"] == ".symtab")
    strtab_off = secs[symtab["link"]]["off"]
    symbols = []
    for o in range(symtab["off"], symtab["off"] + symtab["size"], 24):
        st_name, = struct.unpack_from("<I", cubin, o)
        symbols.append(cstr(strtab_off, st_name))

    funcs: dict = {}
    for s in secs:
        if s["name"].startswith(".text."):
            funcs.setdefault(s["name"][6:], {}).update(text_size=s["size"])
    for s in secs:
        n = s["name"]
        if n.startswith(".nv.shared.") and n[11:] in funcs:
            # On sm_80+ the section also holds the 1 KiB the system reserves per block.
            funcs[n[11:]]["smem"] = max(0, s["size"] - SMEM_RESERVED_IN_SECTION)

    def attributes(sec):
        p, end = sec["off"], sec["off"] + sec["size"]
        while p + 4 <= end:
            fmt, attr = cubin[p], cubin[p + 1]
            if fmt == _EIFMT_SVAL:
                size, = struct.unpack_from("<H", cubin, p + 2)
                yield attr, cubin[p + 4:p + 4 + size]
                p += 4 + size
            else:
                yield attr, cubin[p + 2:p + 4]
                p += 4

    for s in secs:
        n = s["name"]
        if n == ".nv.info":
            for attr, val in attributes(s):
                if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(val) == 8:
                    sym, value = struct.unpack("<II", val)
                    key = "regs" if attr == EIATTR_REGCOUNT else "frame"
                    if symbols[sym] in funcs:
                        funcs[symbols[sym]][key] = value
        elif n.startswith(".nv.info.") and n[9:] in funcs:
            for attr, val in attributes(s):
                if attr == EIATTR_MAX_THREADS and len(val) == 12:
                    funcs[n[9:]]["max_threads"] = struct.unpack("<III", val)
    for f in funcs.values():
        f.setdefault("smem", 0)
    return funcs


# --------------------------------------------------------------------------- SASS

@dataclasses.dataclass
class Instr:
    addr: int
    opcode: str          # full mnemonic with modifiers, e.g. IMMA.16832.S8.S8
    target: str | None   # branch target label, if any

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]


@dataclasses.dataclass
class Function:
    name: str
    instrs: list
    labels: dict         # label -> address of the instruction that follows it


_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_LABEL = re.compile(r"^([.$\w]+):\s*$")
_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;")
_PRED = re.compile(r"^@!?U?P(?:T|\d+)\s+")
_TARGET = re.compile(r"`\(([^)]+)\)")

MMA_OPS = ("IMMA", "IGMMA")
DP4A_OPS = ("IDP",)


def parse_sass(text: str) -> dict:
    """{function: Function} from nvdisasm output (one ``.section .text.<name>`` per function)."""
    funcs: dict = {}
    cur = None
    pending = []
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), Function(m.group(1), [], {}))
            pending = []
            continue
        if cur is None:
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            body = _PRED.sub("", m.group(2).strip())
            opcode = body.split(None, 1)[0] if body else ""
            t = _TARGET.search(body)
            cur.instrs.append(Instr(addr, opcode, t.group(1) if t else None))
            for lab in pending:
                cur.labels[lab] = addr
            pending = []
            continue
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
    return funcs


@dataclasses.dataclass
class Loop:
    start: int
    end: int
    instructions: int
    mma: int
    dp4a: int
    nested_loops: int = 0         # loops strictly inside this one (outermost of them)
    nested_instructions: int = 0  # instructions inside those

    @property
    def outside_nested(self) -> int:
        """Instructions of the body outside nested loops (an iteration that skips them)."""
        return self.instructions - self.nested_instructions

    @property
    def compute(self) -> int:
        return self.mma + self.dp4a

    def contains(self, other) -> bool:
        return self.start <= other.start and other.end <= self.end and \
            (self.start, self.end) != (other.start, other.end)


def find_loops(fn: Function) -> list:
    """All loops of ``fn``: one per back-edge target, [target, last back edge].
    Counts come from prefix sums over the instructions (in address order), so a
    function with many loops costs one pass, not one per loop."""
    ends: dict = {}
    for ins in fn.instrs:
        if ins.base == "BRA" and ins.target in fn.labels:
            t = fn.labels[ins.target]
            if t <= ins.addr:
                ends[t] = max(ends.get(t, t), ins.addr)
    addrs = [i.addr for i in fn.instrs]
    counts = {"all": [0], "mma": [0], "dp4a": [0]}  # non-NOP, MMA, DP4A instructions before index j
    for ins in fn.instrs:
        b = ins.base
        counts["all"].append(counts["all"][-1] + (b != "NOP"))
        counts["mma"].append(counts["mma"][-1] + (b in MMA_OPS))
        counts["dp4a"].append(counts["dp4a"][-1] + (b in DP4A_OPS))

    def between(kind, start, end):  # instructions of ``kind`` at addresses in [start, end]
        c = counts[kind]
        return c[bisect.bisect_right(addrs, end)] - c[bisect.bisect_left(addrs, start)]

    loops = [Loop(start, end, between("all", start, end), between("mma", start, end), between("dp4a", start, end))
             for start, end in sorted(ends.items())]
    for lp in loops:
        inner = [o for o in loops if lp.contains(o)]
        top = [o for o in inner if not any(p.contains(o) for p in inner)]
        lp.nested_loops = len(top)
        covered, reach = 0, None  # the union of the top loops' ranges, merged in start order
        for o in sorted(top, key=lambda o: o.start):
            lo = o.start if reach is None or o.start > reach else reach + 1
            if o.end >= lo:
                covered += between("all", lo, o.end)
            reach = o.end if reach is None else max(reach, o.end)
        lp.nested_instructions = covered
    return loops


def innermost_compute_loops(fn: Function) -> list:
    compute = [lp for lp in find_loops(fn) if lp.compute]
    return [lp for lp in compute if not any(lp.contains(o) for o in compute)]


def main_loop(fn: Function):
    """The innermost compute loop with the most MMA + DP4A (None if there is none)."""
    inner = innermost_compute_loops(fn)
    if not inner:
        return None
    return max(inner, key=lambda lp: (lp.compute, lp.instructions))


# --------------------------------------------------------------------------- launch + occupancy

def _template(expr: str):
    base = expr.split("<", 1)[0].strip()
    args = [a.strip() for a in expr[len(base) + 1:-1].split(",")] if "<" in expr else []
    return base, args


def launch_geometry(expr: str):
    """(threads per block, max dynamic shared memory bytes, note) the launchers use, or None."""
    from dmlq.gpu import avgpool, elementwise, matmul, qkernels

    base, args = _template(expr)
    if base in ("matmul_mma", "matmul_dp4a", "matmul_dp4a_wide"):
        for cfg in matmul.CONFIGS.values():
            if (base == "matmul_mma") != isinstance(cfg, matmul.MmaConfig):
                continue
            extra = (int(args[7]),) if base == "matmul_mma" and len(args) > 7 else ()
            if len(args) >= 3 and cfg.name(*args[:3], *extra) == expr:
                packed = base == "matmul_mma" and args[1].startswith("packed_")
                return cfg.threads, cfg.packed_smem if packed else cfg.smem, ""
        return None
    if base in ("matmul_row_sums", "matmul_col_sums"):
        return 256, 0, ""                       # fixed (256,) blocks in matmul.py
    if base == "add_table":                      # the 64 KiB table in shared memory
        return elementwise.THREADS, elementwise.TABLE_BYTES, ""
    if base.startswith(("quantize_", "dequantize_", "add_")):
        return elementwise.THREADS, 0, ""
    if base == "avgpool_general":
        return avgpool.GENERAL_BLOCK, 0, ""
    if base == "avgpool_tile":                   # output table only for per-tensor parameters
        return avgpool.TILE_BLOCK, avgpool.LUT_MAX_TAPS * 255 + 1, "with the largest table"
    if base == "avgpool_global":
        return 256, 0, ""
    if base == "avgpool_cl":                     # output table only for per-tensor parameters
        return avgpool.CL_BLOCK, avgpool.LUT_MAX_TAPS * 255 + 1, "with the largest table"
    if base in ("qt_quantize", "qt_dequantize"):
        return qkernels.THREADS, 0, ""
    return None


# --------------------------------------------------------------------------- report

@dataclasses.dataclass
class KernelRow:
    source: str
    name: str
    lowered: str
    regs: int
    spill_stores: int
    spill_loads: int
    stack: int
    smem_static: int
    smem_dynamic: int | None
    threads: int | None
    blocks: int | None
    occupancy: float | None
    limiter: str
    note: str
    loop: Loop | None
    loops: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def template(self) -> str:
        return _template(self.name)[0]


def analyze(build: Build, names) -> list:
    """KernelRows of one compiled source; raises if the log and the ELF disagree."""
    log = parse_ptxas_log(build.log)
    elf = parse_cubin(build.cubin)
    sass = parse_sass(build.sass)
    rows = []
    for expr in names:
        low = build.lowered[expr]
        lg, ef = log.get(low), elf.get(low)
        if lg is None or ef is None or "regs" not in lg or "stack" not in lg:
            raise RuntimeError(f"{build.source}: no ptxas resource usage for {expr} ({low})")
        for what, a, b in (("registers", lg["regs"], ef.get("regs")),
                           ("stack frame", lg["stack"], ef.get("frame")),
                           ("static shared memory", lg["smem"], ef.get("smem"))):
            if a != b:
                raise RuntimeError(f"{expr}: {what} {a} in the ptxas log but {b} in the cubin")
        geo = launch_geometry(expr)
        note = ""
        if geo is None and ef.get("max_threads"):
            x, y, z = ef["max_threads"]
            geo = (x * y * z, 0, "block size from __launch_bounds__")
        threads = dyn = blocks = occ = None
        limiter = "?"
        if geo is not None:
            threads, dyn, note = geo
            if ef.get("max_threads") and threads > math.prod(ef["max_threads"]):
                note = (note + "; " if note else "") + \
                    f"launched with {threads} threads > __launch_bounds__ {math.prod(ef['max_threads'])}"
            blocks, occ, limiter = occupancy(lg["regs"], threads, lg["smem"] + dyn)
        fn = sass.get(low)
        if fn is None:
            raise RuntimeError(f"{expr}: {low} not in the disassembly")
        loop = main_loop(fn)
        rows.append(KernelRow(build.source, expr, low, lg["regs"], lg["spill_stores"],
                              lg["spill_loads"], lg["stack"], lg["smem"], dyn, threads, blocks, occ,
                              limiter, note, loop, len(innermost_compute_loops(fn))))
    # Non-inlined device functions: their spills belong to whoever calls them.
    for fname, f in log.items():
        if not f.get("entry") and f.get("spill_stores", 0) + f.get("spill_loads", 0):
            raise RuntimeError(f"{build.source}: device function {fname} spills "
                               f"({f['spill_stores']} B stores, {f['spill_loads']} B loads)")
    return rows


def collect(sources=None, cache_dir=None, use_cache=True, jobs=None, toolchain=None):
    """(rows, meta) for the given sources (default: all of loader.registry())."""
    from dmlq.gpu.loader import registry

    reg = registry()
    sources = list(reg) if sources is None else list(sources)
    tc = toolchain or Toolchain(cache_dir, use_cache)
    jobs = jobs or min(len(sources), os.cpu_count() or 1) or 1
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:  # NVRTC releases the GIL
        builds = list(ex.map(lambda s: tc.build(s, reg[s]), sources))
    rows = []
    for b in builds:
        rows += analyze(b, reg[b.source])
    meta = dict(nvrtc=tc.nvrtc.version, nvdisasm=tc.nvdisasm_version, options=compile_options(),
                sources={b.source: b.text_sha[:16] for b in builds})
    return rows, meta


def _ratio(loop: Loop):
    n = loop.mma or loop.dp4a
    kind = "MMA" if loop.mma else "DP4A"
    if loop.mma and loop.dp4a:
        kind = "MMA+DP4A"
        n = loop.compute
    return kind, n, n / loop.instructions


META_TAG = "static-report-meta:"


def read_meta(text: str):
    """The machine-readable header of a rendered report (None if there is none)."""
    m = re.search(re.escape(META_TAG) + r"\s*(\{.*?\})\s*-->", text)
    return json.loads(m.group(1)) if m else None


def render(rows, meta) -> str:
    header = {k: meta[k] for k in ("nvrtc", "nvdisasm", "sources")}
    out = ["# Static report: every kernel variant on sm_90 (H100)", "",
           f"<!-- {META_TAG} {json.dumps(header, sort_keys=True)} -->", "",
           "Generated by `python tools/static_report.py --out bench/results/static.md`; do not edit.",
           "No GPU involved: NVRTC " + meta["nvrtc"] + " compiles each source to an sm_90 cubin "
           "(`" + " ".join(meta["options"]) + "`), ptxas' resource usage and the cubin's ELF give "
           "registers, spills, stack and static shared memory, nvdisasm " + meta["nvdisasm"] +
           " gives the SASS. See the tool's docstring for the main-loop heuristic.", "",
           "Sources: " + ", ".join(f"`{s}` {h}" for s, h in sorted(meta["sources"].items())) + "", "",
           "Occupancy: theoretical, H100 (65536 registers, 2048 threads, 32 blocks, 228 KiB shared "
           "memory per SM, 1 KiB reserved per block), with the block size and dynamic shared memory "
           "the launcher uses; resident blocks per SM and the limiting resource in brackets.", "",
           "Main loop: the innermost loop holding MMA (IMMA) or DP4A (IDP.4A) instructions; "
           "instructions in its body (static count, nested loops' code included once; in brackets "
           "the count without nested loops), the MMA/DP4A among them, and MMA or DP4A per "
           "instruction of the whole body.", ""]
    spills = [r for r in rows if r.spill_bytes]
    out.append("## Summary")
    out.append("")
    out.append(f"- {len(rows)} kernels in {len(meta['sources'])} sources; "
               f"{len(spills)} spill" + (": " + ", ".join(f"`{r.name}` ({r.spill_stores} B stores, "
                                                         f"{r.spill_loads} B loads)" for r in spills)
                                         if spills else "."))
    seen = {}
    for r in rows:
        if r.loop is not None:
            kind, n, ratio = _ratio(r.loop)
            key = (r.template, r.loop.instructions, n, kind)
            seen.setdefault(key, []).append(r)
    for (tmpl, insts, n, kind), rs in seen.items():
        target = LOOP_TARGETS.get(tmpl)
        verdict = ""
        if target:
            tk, tv = target
            ok = kind == tk and n / insts >= tv
            verdict = f"; target >= 1 {tk} in {round(1 / tv)}: " + ("met" if ok else "**not met**")
        lp = rs[0].loop
        nested = ""
        if lp.nested_loops:
            nested = (f"; {lp.outside_nested} outside its {lp.nested_loops} nested loop(s): "
                      f"{n / lp.outside_nested:.3f} (1 in {lp.outside_nested / n:.1f})")
        out.append(f"- `{tmpl}` main loop, {len(rs)} variant(s) such as `{rs[0].name}`: {insts} "
                   f"instructions, {n} {kind}, {n / insts:.3f} per instruction "
                   f"(1 in {insts / n:.1f}){nested}{verdict}")
    out.append("")
    by_source: dict = {}
    for r in rows:
        by_source.setdefault(r.source, []).append(r)
    for source, rs in by_source.items():
        out += [f"## {source}", "",
                "| kernel | threads | regs | spill st/ld B | stack B | smem static+dyn B "
                "| occupancy | loop insts | MMA/DP4A | per inst |",
                "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
        for r in rs:
            dyn = "?" if r.smem_dynamic is None else str(r.smem_dynamic)
            occ = "?" if r.occupancy is None else f"{r.occupancy:.0%} ({r.blocks}, {r.limiter})"
            if r.note:
                occ += f" [{r.note}]"
            spill = f"{r.spill_stores}/{r.spill_loads}"
            if r.spill_bytes:
                spill = f"**{spill}**"
            if r.loop is None:
                loop = "| - | - | - |"
            else:
                kind, n, ratio = _ratio(r.loop)
                more = f" (+{r.loops - 1} loops)" if r.loops > 1 else ""
                if r.loop.nested_loops:
                    more += f" ({r.loop.outside_nested} w/o {r.loop.nested_loops} nested)"
                loop = f"| {r.loop.instructions}{more} | {n} {kind} | {ratio:.3f} |"
            out.append(f"| `{r.name}` | {r.threads or '?'} | {r.regs} | {spill} | {r.stack} "
                       f"| {r.smem_static}+{dyn} | {occ} {loop}")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the markdown report here (default: stdout)")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--sources", nargs="*", help="only these sources (default: all)")
    args = ap.parse_args(argv)
    rows, meta = collect(args.sources, args.cache_dir, not args.no_cache, args.jobs)
    text = render(rows, meta) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    spills = [r.name for r in rows if r.spill_bytes]
    if spills:
        print(f"spills in {len(spills)} kernel(s): {', '.join(spills)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
