"""Run dmlq's CUDA kernels on the CPU: build, launch, compare.

``HostDevice`` has the interface of ``dmlq.gpu.device.CupyBackend``; installed as
the device in use (``dmlq.gpu.device.using``) it makes the launchers in dmlq/gpu/ run unchanged
(same grid, block, shared memory and argument packing) on NumPy arrays, with
only the final launch swapped: each launch goes to a runner process built from
the kernel's own source with g++ (cuda_host.h, cuda_host.cpp), under
AddressSanitizer and UBSan.

Per launch the runner gets every array the launcher handed to the kernel as
its own exact-size allocation (so an overrun of any of them is an ASan report),
the arguments checked against the kernel's C parameter list (type and size),
and a shared-memory poison byte and a thread schedule (thread-major or
warp-major, forward or reverse) that change between launches. A fault, a
sanitizer report or a write into a buffer the kernel only
receives through const pointers raises ``KernelFault``.

Builds are cached on disk (``$DMLQ_HOST_CACHE`` or ~/.cache/dmlq-host) under a
hash of every source byte and flag, so each source compiles once (tests/prebuild.py
builds them on every core at the start of a session).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from dmlq.gpu import device as gpu_device
from dmlq.gpu import loader

HERE = Path(__file__).resolve().parent
RUNTIME = ("cuda_host.h", "cuda_host_ptx.h", "cuda_host_kernel_table.h", "cuda_host.cpp",
           "cuda_host_wgmma.h")
CXX = os.environ.get("CXX", "g++")
# -g1: line tables, all the sanitizers' stack traces use; full -g debug info
# (variables, types) cost about a quarter more compile time and nothing read it.
# -Og, not -O1: the nine runners' cold build took 118 s of CPU instead of 205 s
# (g++'s time goes to the RTL back end, not parsing), and the tests' runner CPU
# moved by noise (test_gpu_intmm_mma_packed + test_host_elementwise: 51.8 s vs
# 49.2 s); the scheduler and PTX interpreter keep RUNTIME_FLAGS' -O2.
FLAGS = ("-std=c++17", "-Og", "-g1", "-fno-omit-frame-pointer", "-ffp-contract=off",
         "-fno-strict-aliasing", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function", "-Wno-unused-variable")
# The runtime (scheduler, PTX interpreter) is trusted code: optimized, not
# instrumented, but still telling ASan about its fiber stacks.
RUNTIME_FLAGS = ("-std=c++17", "-O2", "-g1", "-fno-omit-frame-pointer", "-ffp-contract=off",
                 "-fno-strict-aliasing", "-DCUDA_HOST_ASAN=1", "-Wall", "-Wno-unknown-pragmas")
RUN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}

# What the host device reports: an H100-like sm_90 part. The SM count only
# sizes grid-stride grids; a small one keeps host runs short while still
# giving every block several iterations.
HOST_CC = 90
HOST_SMS = 4
HOST_RESIDENT = 2
HOST_MAX_SMEM = 227 * 1024


class KernelFault(AssertionError):
    """A kernel misbehaved on the host (fault, sanitizer report, bad arguments)."""


class IllegalAddress(KernelFault):
    """A global load or store outside every buffer of the launch: what
    compute-sanitizer's memcheck reports as an invalid __global__ read or write
    (and a GPU without it as cudaErrorIllegalAddress). The runner maps each
    buffer between guard pages, the bytes around it poisoned (cuda_host.cpp)."""


GUARD = 1 << 20  # cuda_host.cpp's kGuard: how far outside a buffer an access is still attributed to it
_ASAN_ERROR = re.compile(r"ERROR: AddressSanitizer: ([\w-]+) on (?:unknown )?address (0x[0-9a-f]+)")
_ASAN_ACCESS = re.compile(r"(READ|WRITE) of size (\d+) at 0x|caused by a (READ|WRITE) memory access")
_LAUNCH = re.compile(r"^cuda_host launch: (.*)$", re.M)
_BUFFER = re.compile(r"^cuda_host buffer (\d+): (0x[0-9a-f]+) (\d+) args((?: \d+)*)$", re.M)


def crash_fault(code, report: str) -> KernelFault:
    """The exception for a runner that died: IllegalAddress, in memcheck's
    terms, where ASan's report is an access outside the launch's buffers."""
    text = f"the kernel crashed the host runner (exit {code}):\n{report[-12000:]}"
    err, launch = _ASAN_ERROR.search(report), _LAUNCH.search(report)
    bufs = [(int(i), int(a, 16), int(n), a_.split()) for i, a, n, a_ in _BUFFER.findall(report)]
    if not (err and launch and bufs) or err.group(1) not in ("use-after-poison", "SEGV", "heap-buffer-overflow"):
        return KernelFault(text)
    addr = int(err.group(2), 16)
    acc = _ASAN_ACCESS.search(report)
    kind = (acc.group(1) or acc.group(3)).lower() if acc else "access"
    size = f" of size {acc.group(2)}" if acc and acc.group(2) else ""

    def distance(b):
        return b[1] - addr if addr < b[1] else addr - (b[1] + b[2])
    i, start, n, args = min(bufs, key=distance)
    if distance(bufs[i]) < 0 and acc and acc.group(2) and addr + int(acc.group(2)) > start + n:
        addr = start + n  # a wide access straddling the end (ASan names its first byte): the first past it
    if distance(bufs[i]) < 0:  # inside a buffer: not an out-of-bounds access
        return KernelFault(text)
    what = f"(argument {', '.join(args) or '?'}, {n} bytes at {start:#x})"
    if distance(bufs[i]) > GUARD:  # a null or wild pointer
        where = f"an address in no buffer of the launch (the nearest: {what[1:-1]})"
    else:
        where = (f"{start - addr} bytes before" if addr < start else
                 f"{addr - start - n} bytes after the end of") + f" the nearest buffer {what}"
    return IllegalAddress(f"cudaErrorIllegalAddress: {launch.group(1)}: invalid __global__ {kind}{size} at "
                          f"{addr:#x}, {where}\n{text}")


def available() -> bool:
    return shutil.which(CXX) is not None


def cache_dir() -> Path:
    d = Path(os.environ.get("DMLQ_HOST_CACHE", Path.home() / ".cache" / "dmlq-host"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _runtime_key() -> str:
    return _digest(CXX, FLAGS, RUNTIME_FLAGS, *((HERE / f).read_bytes() for f in RUNTIME))


def _sources_key() -> str:
    return _digest(*(p.read_bytes() for p in sorted(loader.cuda_dir().glob("*.cu*"))))


_build_lock = threading.Lock()


def _compile(args, what):
    r = subprocess.run([CXX, *args], capture_output=True, text=True)
    if r.returncode != 0 or r.stderr.strip():
        raise KernelFault(f"g++ failed on {what}:\n{r.stderr[-8000:]}")


def _file_lock(path: Path, blocking: bool = True):
    """One build of a cached file across processes (pytest-xdist's workers,
    several sessions sharing the cache): the static report's lock file."""
    from cupy_stand_in import _kernels

    return _kernels.static_report_module().file_lock(path.with_name(path.name + ".lock"), blocking)


def _runtime_object() -> Path:
    obj = cache_dir() / f"cuda_host-{_runtime_key()}.o"
    with _build_lock:
        if not obj.exists():
            with _file_lock(obj):
                if not obj.exists():
                    tmp = obj.with_suffix(f".{os.getpid()}.tmp.o")
                    _compile([*RUNTIME_FLAGS, "-I", str(HERE), "-c", str(HERE / "cuda_host.cpp"), "-o",
                              str(tmp)], "cuda_host.cpp")
                    tmp.replace(obj)
    return obj


def translation_unit(path: Path, names) -> str:
    """The runner's kernel file: the .cu included unchanged, then a table of
    its kernels (the launchers' name expressions)."""
    lines = [f'#include "{path}"', '#include "cuda_host_kernel_table.h"',
             "const cuda_host_kernel cuda_host_kernels[] = {"]
    for n in names:
        lines.append(f'  {{"{n}", [] {{ return cuda_host_sig(&{n}); }}, '
                     f"[](void** a) {{ cuda_host_call(&{n}, a); }}}},")
    lines += ["};", f"const int cuda_host_kernel_count = {len(names)};", ""]
    return "\n".join(lines)


def runner_path(source: str, extra_flags=(), path: Path = None, names=None):
    """(the source's path, its kernel names, where its runner is cached)."""
    path = loader.cuda_dir() / source if path is None else Path(path)
    names = tuple(loader.registry()[source] if names is None else names)
    key = _digest(_runtime_key(), _sources_key(), path.read_bytes(), names, extra_flags)
    return path, names, cache_dir() / f"{path.stem}-{key}"


def build(source: str, extra_flags=(), path: Path = None, names=None, wait: bool = True) -> Path | None:
    """The runner executable for ``source`` (cached): a file of cuda/ with the
    names its launcher registers, or any ``path`` with explicit ``names``. One
    build per runner across processes (a lock file beside it): a second caller
    waits for it, or, with ``wait`` false, gets None at once (tests/prebuild.py)."""
    path, names, exe = runner_path(source, extra_flags, path, names)
    if exe.exists():
        return exe
    # one build per runner in this process: a second caller (a test, while
    # tests/prebuild.py's pool builds it) waits for the first
    with _inflight_lock:
        pending = _inflight.get(exe)
        mine = pending is None
        if mine:
            pending = _inflight[exe] = Future()
    if not mine:
        if not wait:
            return None
        # None: a caller that would not wait found another process building it
        return pending.result() or build(source, extra_flags, path, names)
    try:
        with _file_lock(exe, wait) as held:
            if held and not exe.exists():
                _link(source, path, names, extra_flags, exe)
        if not held:
            pending.set_result(None)
            with _inflight_lock:
                del _inflight[exe]
            return None
    except BaseException as e:
        pending.set_exception(e)
        with _inflight_lock:
            del _inflight[exe]
        raise
    pending.set_result(exe)
    return exe


_inflight: dict = {}  # runner path -> Future of its build under way
_inflight_lock = threading.Lock()


def _link(source, path, names, extra_flags, exe):
    obj = _runtime_object()
    with tempfile.TemporaryDirectory() as d:
        tu = Path(d) / f"{path.stem}_host.cpp"
        tu.write_text(translation_unit(path, names))
        tmp = Path(d) / "runner"
        _compile([*FLAGS, *extra_flags, "-include", str(HERE / "cuda_host.h"), "-I", str(HERE),
                  "-I", str(loader.cuda_dir()), str(tu), str(obj), "-o", str(tmp)], source)
        shutil.move(str(tmp), exe)


# ---------------------------------------------------------------------- runner process

class Runner:
    """One runner process; restarted after a crash (sanitizer report)."""

    def __init__(self, exe: Path):
        self.exe = exe
        self.proc = None
        self.err = None
        self.kernels = {}
        self._start()
        self._send(struct.pack("<I", 0xFFFFFFFF))
        status, msg = self._status()
        for line in msg.splitlines():
            name, sig = line.split("\t")
            self.kernels[name] = (len(self.kernels), sig.split())

    def _start(self):
        self.err = tempfile.TemporaryFile()
        env = {**os.environ, **RUN_ENV}
        self.proc = subprocess.Popen([str(self.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=env)

    def _send(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _read(self, n: int) -> bytes:
        data = self.proc.stdout.read(n)
        if len(data) != n:
            self.proc.wait()
            self.err.seek(0)
            report = self.err.read().decode(errors="replace")
            code = self.proc.returncode
            self._start()
            raise crash_fault(code, report)
        return data

    def _status(self):
        status, length = struct.unpack("<II", self._read(8))
        return status, self._read(length).decode(errors="replace")

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()

    def launch(self, index, grid, block, dyn, order, poison, buffers, args):
        out = [struct.pack("<I3I3IIIIII", index, *grid, *block, dyn, order, poison,
                           len(buffers), len(args))]
        for b, skew in buffers:
            out.append(struct.pack("<QQ", len(b), skew))
            out.append(b)
        for a in args:
            out.append(a)
        try:
            self._send(b"".join(out))
        except BrokenPipeError:
            self._read(1 << 30)  # reports the crash
        status, msg = self._status()
        results = []
        for _ in buffers:
            (n,) = struct.unpack("<Q", self._read(8))
            results.append(self._read(n))
        return status, msg, results


# ---------------------------------------------------------------------- the device

def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _extent(a: np.ndarray):
    lo = hi = a.__array_interface__["data"][0]
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return lo, lo
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + a.itemsize


_SCALAR_CODES = {np.dtype(np.int32): "i4", np.dtype(np.uint32): "u4", np.dtype(np.int64): "i8",
                 np.dtype(np.uint64): "u8", np.dtype(np.float32): "f4", np.dtype(np.float64): "f8",
                 np.dtype(np.int16): "i2", np.dtype(np.uint16): "u2", np.dtype(np.int8): "i1",
                 np.dtype(np.uint8): "u1"}


class HostDevice:
    """dmlq.gpu.device's backend interface, on the CPU."""

    def __init__(self, sm_count=HOST_SMS, resident=HOST_RESIDENT, cc=HOST_CC):
        self.sm_count, self.resident, self.cc = sm_count, resident, cc
        self.runners: dict = {}
        self.regions: list = []     # (lo, hi, root array), newest last
        self.calls: list = []       # (name, grid, block, shared_mem) per launch
        self.launch_count = 0
        self.poisons = (0xA5, 0x5A)
        self.schedules = None       # e.g. (0, 1, 2, 3): run every launch under each
        self.sources: dict = {}     # extra sources: name -> (path, kernel names)
        # kernel name -> [ldmatrix phases, the extra wavefronts of their bank conflicts], summed
        # over the launches (one schedule each) since the last forget(): the runner counts them
        self.ldmatrix: dict = {}

    # -- the backend interface
    @staticmethod
    def xp():
        return np

    def ptr(self, a) -> int:
        if not isinstance(a, np.ndarray):  # a NumPy scalar's buffer is a temporary
            raise KernelFault(f"the launcher took the address of a {type(a).__name__}, not an array")
        self.register(a)
        return a.__array_interface__["data"][0]

    @staticmethod
    def is_array(a) -> bool:
        return isinstance(a, np.ndarray)

    def info(self):
        return gpu_device.DeviceInfo("host harness (sm_90 model)", self.cc, self.sm_count,
                                     HOST_MAX_SMEM)

    def resident_blocks(self, source, name, threads, smem) -> int:
        """CUDA's count for an H100, by the cupy stand-in's rule (one piece of
        code): the block size, the dynamic shared memory (the kernel opted in),
        and the kernel's registers, static shared memory and launch bounds from
        its sm_90 cubin; capped at ``resident`` so host grids stay small. A
        block no SM can hold is an error, not 1."""
        if threads < 1:  # asked by a test for the sizing cap itself
            return self.resident
        from cupy_stand_in import _cuda, _kernels

        res = _kernels.kernel_resources(source, self.sources)[name]
        fits = _kernels.blocks_per_sm(res, threads, smem, _cuda.SMEM_PER_BLOCK_OPTIN)
        if fits == 0:
            raise KernelFault(f"{name}: a block of {threads} threads with {smem} bytes of dynamic shared "
                              f"memory and {res['regs']} registers per thread fits on no SM")
        return min(self.resident, fits)

    def register(self, a: np.ndarray):
        """Remember the allocation ``a`` lives in (kept alive, so never reused)."""
        root = _root(a)
        lo, hi = _extent(root)
        if not any(r[0] == lo and r[1] == hi for r in self.regions):
            self.regions.append((lo, hi, root))

    def forget(self):
        self.regions.clear()
        self.calls.clear()
        self.ldmatrix.clear()

    def close(self):
        for r in self.runners.values():
            r.close()
        self.runners.clear()

    def runner(self, source: str) -> Runner:
        r = self.runners.get(source)
        if r is None:
            path, names = self.sources.get(source, (None, None))
            r = self.runners[source] = Runner(build(source, path=path, names=names))
        return r

    def _region(self, p: int, what: str):
        best = None
        for i in range(len(self.regions) - 1, -1, -1):
            lo, hi, _ = self.regions[i]
            if lo <= p < hi:
                return i
            if p == hi and best is None:
                best = i  # one past the end: fine for an empty range
        if best is None:
            raise KernelFault(f"{what}: address {p:#x} lies in no array the launcher handed out "
                              "(a wild pointer on a GPU)")
        return best

    def _address(self, a):
        """The device address a pointer argument carries (an array or a uint64),
        or None for anything else."""
        if isinstance(a, np.ndarray) and a.dtype.names is None:
            self.register(a)
            return a.__array_interface__["data"][0]
        if isinstance(a, np.uint64):
            return int(a)
        return None

    def launch(self, source, name, grid, block, args, shared_mem=0):
        gpu_device.check_args(name, args)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        if not (1 <= grid[0] < 2**31 and 1 <= grid[1] <= 65535 and 1 <= grid[2] <= 65535):
            raise KernelFault(f"{name}: grid {grid} outside CUDA's limits")
        if not (1 <= block[0] * block[1] * block[2] <= 1024 and block[2] <= 64):
            raise KernelFault(f"{name}: block {block} outside CUDA's limits")
        if shared_mem > HOST_MAX_SMEM:
            raise KernelFault(f"{name}: {shared_mem} bytes of dynamic shared memory")
        r = self.runner(source)
        if name not in r.kernels:
            raise KernelFault(f"{name}: not in the kernel table of {source}")
        index, sig = r.kernels[name]
        if len(sig) != len(args):
            raise KernelFault(f"{name}: {len(args)} arguments for {len(sig)} parameters")
        used: dict = {}
        packed = []
        for i, (a, code) in enumerate(zip(args, sig)):
            what = f"{name} argument {i}"
            if code in ("C", "P"):
                p = self._address(a)
                if p is None:
                    raise KernelFault(f"{what}: a pointer parameter got {type(a).__name__}")
                if p == 0:
                    packed.append(struct.pack("<I", 1))
                    continue
                k = self._region(p, what)
                j = used.setdefault(k, len(used))
                packed.append(struct.pack("<IIq", 0, j, p - self.regions[k][0]))
            elif code.startswith("s"):
                if not (isinstance(a, np.ndarray) and a.dtype.names is not None and a.size == 1):
                    raise KernelFault(f"{what}: a struct parameter needs a size-1 structured array")
                raw = a.tobytes()
                if len(raw) != int(code[1:]):
                    raise KernelFault(f"{what}: struct of {len(raw)} bytes for a {code[1:]}-byte parameter")
                packed.append(struct.pack("<II", 2, len(raw)) + raw)
            else:
                dt = getattr(a, "dtype", None)
                if _SCALAR_CODES.get(dt) != code:
                    raise KernelFault(f"{what}: {type(a).__name__} for a C parameter {code} "
                                      "(pass the NumPy scalar of the exact C type)")
                raw = a.tobytes()
                packed.append(struct.pack("<II", 2, len(raw)) + raw)
        order = sorted(used, key=used.get)
        buffers = []
        for k in order:
            lo, hi, _ = self.regions[k]
            buffers.append((ctypes.string_at(lo, hi - lo), lo % 256))
        poison = self.poisons[(self.launch_count >> 2) & 1]
        # One schedule per launch, in turn; or every schedule in self.schedules,
        # each from the same inputs, where any difference between them is a race.
        schedules = self.schedules or (self.launch_count & 3,)
        self.launch_count += 1
        self.calls.append((name, grid, block, shared_mem))
        first = None
        for schedule in schedules:
            status, msg, results = r.launch(index, grid, block, int(shared_mem), schedule, poison,
                                            buffers, packed)
            if status != 0:
                raise KernelFault(f"{name} grid {grid} block {block}: {msg}")
            if first is None:
                first = (schedule, results)
                _, phases, extra = msg.split()  # "ldmatrix <phases> <extra wavefronts>"
                if int(phases):
                    tally = self.ldmatrix.setdefault(name, [0, 0])
                    tally[0] += int(phases)
                    tally[1] += int(extra)
            elif results != first[1]:
                raise KernelFault(f"{name} grid {grid} block {block}: results differ between thread "
                                  f"schedules {first[0]} and {schedule} (a race)")
        for k, data in zip(order, results):
            lo, hi, _ = self.regions[k]
            if data != buffers[order.index(k)][0]:
                ctypes.memmove(lo, data, hi - lo)


class GpuMirrorDevice(HostDevice):
    """The host harness's NumPy test cases on a real GPU: the launchers run
    unchanged, and each launch copies the arrays it touches to device buffers,
    runs the CUDA kernel through CuPy and copies them back. So the host and
    the GPU are held to one list of cases."""

    def __init__(self):
        super().__init__()
        self.real = gpu_device.CupyBackend()

    def info(self):
        return self.real.info()

    def resident_blocks(self, source, name, threads, smem) -> int:
        if not name:  # asked by a test for the launcher's own sizing
            return 1
        return self.real.resident_blocks(source, name, threads, smem)

    def launch(self, source, name, grid, block, args, shared_mem=0):
        import cupy

        gpu_device.check_args(name, args)
        used: dict = {}
        staged = []
        for a in args:
            p = self._address(a)
            if p is None:
                staged.append(a)
                continue
            if p == 0:
                staged.append(gpu_device.NULL)
                continue
            k = self._region(p, f"{name} argument {len(staged)}")
            used.setdefault(k, None)
            staged.append((k, p - self.regions[k][0]))
        bufs = {}
        for k in used:  # each region at its host address's offset mod 256 into a fresh (256-byte
            lo, hi, _ = self.regions[k]  # aligned) buffer: the alignment the launcher planned for
            skew = lo % 256
            buf = cupy.empty(max(hi - lo, 1) + skew, np.uint8)[skew:]
            if hi > lo:
                buf[: hi - lo] = cupy.asarray(np.frombuffer(ctypes.string_at(lo, hi - lo), np.uint8))
            bufs[k] = buf
        final = [np.uint64(bufs[s[0]].data.ptr + s[1]) if isinstance(s, tuple) else s for s in staged]
        assert all(int(f) % 16 == (self.regions[s[0]][0] + s[1]) % 16
                   for f, s in zip(final, staged) if isinstance(s, tuple)), "staging changed an alignment"
        self.calls.append((name, tuple(grid), tuple(block), shared_mem))
        self.real.launch(source, name, grid, block, final, shared_mem)
        for k, buf in bufs.items():
            lo, hi, _ = self.regions[k]
            if hi > lo:
                host = cupy.asnumpy(buf[: hi - lo])
                ctypes.memmove(lo, host.ctypes.data, hi - lo)
