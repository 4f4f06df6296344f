"""``cupy.RawModule`` / ``cupy.RawKernel`` of the stand-in: kernels launched into
the g++ host harness (tests/cuda_host), with CuPy 14.2's argument packing.

Packing follows ``cupy/cuda/function.pyx`` (``_pointer``) and
``cupy/_core/_scalar.pyx`` (``CScalar``) of CuPy v14.2.0:

- ``None`` -> a null pointer; a ``cupy.ndarray`` or ``MemoryPointer`` -> its address;
- a ``numpy.ndarray`` of size 1 -> its element's bytes, by value (its dtype's width);
  a larger one -> ``TypeError``;
- Python ``bool`` -> 1 byte, ``int`` -> int64 (uint64 from 2**63; beyond -> OverflowError),
  ``float`` -> double, ``complex`` -> complex128; a NumPy scalar -> its dtype;
- anything else -> ``TypeError('Unsupported type ...')``.

CuPy passes those bytes whatever the kernel declares; on a GPU a width that
differs from the C parameter shifts every later argument. The stand-in checks
each packed width against the kernel's C signature (the harness reads it from
the compiled kernel) and refuses a mismatch, and checks every pointer: zero, or
inside a live allocation of the launching device. CUDA's launch limits for an
H100 (grid, block, dynamic shared memory above 48 KiB only after the opt-in)
raise ``CUDADriverError`` as the driver would.
"""
from __future__ import annotations

import hashlib
import itertools
import re
import threading
import weakref

import numpy as np

from . import _cuda
from ._cuda import CUDADriverError

_ptrs = itertools.count(0xF0000)
_functions_by_ptr: "weakref.WeakValueDictionary[int, Function]" = weakref.WeakValueDictionary()

_harness = {}  # "device": the shared HostDevice
_harness_lock = threading.RLock()


def harness_device():
    """The HostDevice every stand-in launch runs on (one for both devices: the CPU)."""
    dev = _harness.get("device")
    if dev is None:
        from cuda_host import harness

        if not harness.available():
            raise RuntimeError("cupy stand-in: no g++ for the host harness")
        dev = _harness["device"] = harness.HostDevice()
    return dev


class Refused(AssertionError):
    """What a GPU would run wrongly or fault on, refused by the stand-in."""


# ------------------------------------------------------------------ packing (CuPy 14.2's rules)

def pack(x):
    """(is_device_address, raw bytes) of one kernel argument, as CuPy packs it."""
    from . import _array

    if x is None:
        return True, bytes(8)
    if isinstance(x, _array.ndarray):
        return True, x.data.ptr.to_bytes(8, "little")
    if isinstance(x, _cuda.MemoryPointer):
        return True, x.ptr.to_bytes(8, "little")
    if isinstance(x, np.ndarray):
        if x.size == 1:
            return False, x.reshape(-1)[:1].tobytes()
        raise TypeError(f"You are trying to pass a numpy.ndarray of shape {x.shape} as a kernel parameter. "
                        "Only numpy.ndarrays of size one can be passed by value. If you meant to pass a "
                        "pointer to __global__ memory, you need to pass a cupy.ndarray instead.")
    return False, np.array(x, dtype=scalar_dtype(x)).tobytes()


def scalar_dtype(x) -> np.dtype:
    """CScalar's dtype for a Python or NumPy scalar (TypeError otherwise)."""
    t = type(x)
    if t is bool:
        return np.dtype(np.bool_)
    if t is float:
        return np.dtype(np.float64)
    if t is complex:
        return np.dtype(np.complex128)
    if t is int:
        if x >= 2**63:
            if x >= 2**64:
                raise OverflowError("Python int too large to convert to C unsigned long")
            return np.dtype(np.uint64)
        if x < -2**63:
            raise OverflowError("Python int too large to convert to C long")
        return np.dtype(np.int64)
    if isinstance(x, np.generic):
        return x.dtype
    raise TypeError(f"Unsupported type {t}")


_WIDTH = re.compile(r"[iufs](\d+)$")


def code_width(code: str) -> int:
    if code in ("C", "P"):
        return 8
    return int(_WIDTH.match(code).group(1))


# ------------------------------------------------------------------ modules and functions

def _source_of(code: str, names):
    """The harness source for ``code``: dmlq's own file when the text is exactly
    what dmlq.gpu.loader makes of it (one build, shared with the host tests),
    else the text itself in a file of the harness cache."""
    from cuda_host import harness

    m = re.match(r'#line 1 "([\w.]+)"\n', code)
    if m:
        from dmlq.gpu import loader

        name = m.group(1)
        if (loader.cuda_dir() / name).is_file() and code == loader.source_text(name) \
                and tuple(names) == tuple(loader.registry().get(name, ())):
            return name
    digest = hashlib.sha256(code.encode() + repr(tuple(names)).encode()).hexdigest()[:16]
    key = f"standin-{digest}.cu"
    dev = harness_device()
    if key not in dev.sources:
        path = harness.cache_dir() / key
        if not path.exists():
            path.write_text(code)
        dev.sources[key] = (path, tuple(names))
    return key


class _Module:
    """A module loaded on one device."""

    def __init__(self, source: str, device_id: int):
        self.source, self.device_id = source, device_id
        with _harness_lock:
            self.kernels = harness_device().runner(source).kernels  # name -> (index, signature)


# ------------------------------------------------------------------ resources from the sm_90 cubin

_resources: dict = {}
_tools: dict = {}
_tools_lock = threading.Lock()


def static_report_module():
    """tools/static_report.py, imported once (its functions need no toolchain)."""
    import importlib.util
    import sys
    from pathlib import Path

    with _module_lock:
        mod = sys.modules.get("dmlq_static_report")
        if mod is None:
            path = Path(__file__).resolve().parents[2] / "tools" / "static_report.py"
            spec = importlib.util.spec_from_file_location("dmlq_static_report", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
        return mod


_module_lock = threading.Lock()


def _static_report():
    """tools/static_report.py (NVRTC through the nvidia-cuda-nvrtc wheel, its cubin
    parser) and one Toolchain, whose on-disk cache tests/test_static_report.py shares."""
    with _tools_lock:  # launches come from several threads (Dask's threaded scheduler)
        if not _tools:
            mod = static_report_module()
            _tools.update(sr=mod, toolchain=mod.Toolchain())
        return _tools["sr"], _tools["toolchain"]


def kernel_resources(source: str, sources: dict = None) -> dict:
    """{kernel: {"regs", "smem", "frame", ["max_threads"]}} of one harness source,
    read from the sm_90 cubin NVRTC makes of it (what a GPU's driver reports as
    num_regs, shared_size_bytes, local_size_bytes): dmlq's own sources through the
    static report's cached build, other code (a test's RawKernel, or one of the
    ``sources`` {name: (path, kernel names)} of a HostDevice) compiled here."""
    res = _resources.get(source)
    if res is None:
        import prebuild

        prebuild.wait("nvrtc", source)  # the session's pool may be building it: one build
        sr, toolchain = _static_report()
        from dmlq.gpu import loader

        registry = loader.registry()
        if source in registry:
            names = registry[source]
            build = toolchain.build(source, names)
            cubin, lowered = build.cubin, build.lowered
        else:
            from pathlib import Path

            path, names = (harness_device().sources if sources is None else sources)[source]
            cubin, _log, lowered = toolchain.nvrtc.compile(Path(path).read_text(), source, names,
                                                           sr.compile_options())
        elf = sr.parse_cubin(cubin)
        res = _resources[source] = {n: elf[lowered[n]] for n in names}
    return res


def blocks_per_sm(res: dict, threads: int, smem: int, max_dynamic_smem: int) -> int:
    """CUDA's resident blocks per SM of a function with resources ``res``
    (kernel_resources) for a block of ``threads`` with ``smem`` bytes of dynamic
    shared memory: the one rule behind the stand-in's occupancy query and the
    host harness's HostDevice.resident_blocks."""
    return _cuda.occupancy(threads, smem, max_dynamic_smem, res["regs"], res["smem"], max_threads(res))


def max_threads(res: dict) -> int:
    """CUDA's max_threads_per_block of a function: the device's 1024, its
    __launch_bounds__, and what its registers allow in one SM."""
    bounds = res.get("max_threads")
    limit = min(_cuda.MAX_THREADS_PER_BLOCK, _cuda.register_warps(res["regs"]) * 32)
    return min(limit, bounds[0] * bounds[1] * bounds[2]) if bounds else limit


class Function:
    """cupy.cuda.function.Function: one kernel in one device's context."""

    def __init__(self, module: _Module, name: str):
        if name not in module.kernels:
            raise CUDADriverError(500, f"CUDA_ERROR_NOT_FOUND: named symbol not found ({name})")
        self.module, self.name = module, name
        self.signature = module.kernels[name][1]
        self.ptr = next(_ptrs)
        self.max_dynamic_shared_size_bytes = _cuda.SMEM_PER_BLOCK
        res = self.resources = kernel_resources(module.source)[name]
        self.num_regs, self.shared_size_bytes, self.local_size_bytes = res["regs"], res["smem"], res["frame"]
        self.max_threads_per_block = max_threads(res)
        _functions_by_ptr[self.ptr] = self

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        if not isinstance(grid, tuple):
            raise TypeError(f"Argument 'grid' has incorrect type (expected tuple, got {type(grid).__name__})")
        if not isinstance(block, tuple):
            raise TypeError(f"Argument 'block' has incorrect type (expected tuple, got {type(block).__name__})")
        if shared_mem < 0:
            raise OverflowError("can't convert negative value to size_t")
        grid = tuple(max(1, int(g)) for g in (grid + (1, 1))[:3])
        block = tuple(max(1, int(b)) for b in (block + (1, 1))[:3])
        packed = [pack(a) for a in args]   # CuPy packs before it asks the driver anything
        stream = _cuda.get_current_stream() if stream is None else stream
        _launch(self, grid, block, packed, int(shared_mem), stream)


def _launch(fn: Function, grid, block, packed, shared_mem, stream):
    dev = _cuda.get_device_id()
    name = fn.name
    if fn.module.device_id != dev:
        raise CUDADriverError(400, f"CUDA_ERROR_INVALID_HANDLE: {name} was loaded on device "
                              f"{fn.module.device_id} and launched on device {dev}")
    if stream.device_id not in (-1, dev):
        raise CUDADriverError(400, f"CUDA_ERROR_INVALID_HANDLE: {name} launched on a stream of device "
                              f"{stream.device_id} while device {dev} is current")
    threads = block[0] * block[1] * block[2]
    if any(g > m for g, m in zip(grid, _cuda.MAX_GRID)) or any(b > m for b, m in zip(block, _cuda.MAX_BLOCK)) \
            or threads > _cuda.MAX_THREADS_PER_BLOCK:
        raise CUDADriverError(1, f"CUDA_ERROR_INVALID_VALUE: {name} grid {grid} block {block} outside "
                              "the H100's limits")
    if threads > fn.max_threads_per_block:
        raise CUDADriverError(701, f"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: {name} launched with {threads} "
                              f"threads; its {fn.num_regs} registers per thread (or its __launch_bounds__) "
                              f"allow {fn.max_threads_per_block}")
    if shared_mem + fn.shared_size_bytes > _cuda.SMEM_PER_BLOCK_OPTIN:
        raise CUDADriverError(1, f"CUDA_ERROR_INVALID_VALUE: {name} needs {fn.shared_size_bytes} bytes of "
                              f"static and {shared_mem} of dynamic shared memory per block")
    if shared_mem > fn.max_dynamic_shared_size_bytes:
        raise CUDADriverError(1, f"CUDA_ERROR_INVALID_VALUE: {name} asks {shared_mem} bytes of dynamic "
                              f"shared memory, the function allows {fn.max_dynamic_shared_size_bytes} "
                              "(set max_dynamic_shared_size_bytes first)")
    sig = fn.signature
    if len(sig) != len(packed):
        raise Refused(f"{name}: {len(packed)} arguments for {len(sig)} parameters")
    hd = harness_device()
    converted, holding = [], []
    for i, ((is_addr, raw), code) in enumerate(zip(packed, sig)):
        what = f"{name} argument {i} ({code})"
        if len(raw) != code_width(code):
            raise Refused(f"{what}: CuPy packs {len(raw)} bytes for a {code_width(code)}-byte C parameter")
        if code in ("C", "P"):
            address = int.from_bytes(raw, "little")
            if address:
                mem = _cuda.find_allocation(address)
                if mem is None:
                    raise Refused(f"{what}: address {address:#x} is in no live device allocation"
                                  + ("" if is_addr else " (a value packed by value, not a device array)"))
                if mem.device_id != dev:
                    raise Refused(f"{what}: memory of device {mem.device_id} on a launch on device {dev}")
                holding.append(mem.buf)  # the bytes, not the block: an array freed after the launch
                # returns its block to the pool at once, as in CuPy (the kernel may still be pending)
            converted.append(np.uint64(address))
        elif code.startswith("s"):
            converted.append(np.frombuffer(raw, dtype=[("v", f"V{len(raw)}")]).copy())
        else:
            converted.append(np.frombuffer(raw, dtype=code)[0])
    source = fn.module.source

    def run():
        with _harness_lock:  # one launch at a time through the runner pipes (threads share them)
            hd.regions.clear()
            for buf in holding:
                hd.register(buf)
            try:
                hd.launch(source, name, grid, block, converted, shared_mem)
            finally:
                hd.regions.clear()
            launches.append((name, grid, block, shared_mem, stream.ptr, dev))

    _cuda._submit(run if settings["run"] else (lambda: None), stream)


settings = {"run": True}  # False: launches are checked and packed, and then do nothing (overhead benchmarks)
launches: list = []  # (name, grid, block, shared_mem, stream handle, device) per launch run


def _check_options(options):
    """Cython's check of ``tuple options`` in RawKernel and RawModule."""
    if not isinstance(options, tuple):
        raise TypeError(f"Argument 'options' has incorrect type (expected tuple, got {type(options).__name__})")


class RawKernel:
    def __init__(self, code, name, options=(), backend="nvrtc", *, translate_cucomplex=False,
                 enable_cooperative_groups=False, jitify=None):
        if not isinstance(code, str) or not isinstance(name, str):
            raise TypeError("RawKernel: code and name must be str")
        _check_options(options)
        self.code, self.name, self.options, self.backend = code, name, options, backend
        self.enable_cooperative_groups = enable_cooperative_groups
        self.name_expressions = None
        self._source = None
        self._per_device = {}

    @property
    def kernel(self) -> Function:
        dev = _cuda.get_device_id()
        fn = self._per_device.get(dev)
        if fn is None:
            if self._source is None:
                names = self.name_expressions or (self.name,)
                self._source = _source_of(self.code, names)
            fn = self._per_device[dev] = Function(_Module(self._source, dev), self.name)
        return fn

    def __call__(self, grid, block, args, **kwargs):
        self.kernel(grid, block, args, enable_cooperative_groups=self.enable_cooperative_groups, **kwargs)

    @property
    def max_dynamic_shared_size_bytes(self):
        return self.kernel.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes):
        if not 0 <= nbytes <= _cuda.SMEM_PER_BLOCK_OPTIN:
            raise CUDADriverError(1, f"CUDA_ERROR_INVALID_VALUE: max_dynamic_shared_size_bytes {nbytes}")
        self.kernel.max_dynamic_shared_size_bytes = int(nbytes)

    @property
    def num_regs(self):
        return self.kernel.num_regs

    @property
    def shared_size_bytes(self):
        return self.kernel.shared_size_bytes

    @property
    def local_size_bytes(self):
        return self.kernel.local_size_bytes

    @property
    def max_threads_per_block(self):
        return self.kernel.max_threads_per_block

    @property
    def attributes(self):
        """CuPy's dictionary, with the attributes the cubin gives (-1: not known here)."""
        fn = self.kernel
        return {"max_threads_per_block": fn.max_threads_per_block, "shared_size_bytes": fn.shared_size_bytes,
                "const_size_bytes": -1, "local_size_bytes": fn.local_size_bytes, "num_regs": fn.num_regs,
                "ptx_version": -1, "binary_version": 90, "cache_mode_ca": -1,
                "max_dynamic_shared_size_bytes": fn.max_dynamic_shared_size_bytes,
                "preferred_shared_memory_carveout": -1}

    def compile(self, log_stream=None):
        self.kernel  # noqa: B018 - loads it on the current device


class RawModule:
    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=None):
        if (code is None) == (path is None):
            raise TypeError("Exactly one of `code` and `path` keyword arguments must be given.")
        if path is not None:
            raise NotImplementedError("cupy stand-in: RawModule(path=...) (dmlq compiles from code)")
        _check_options(options)
        self.code, self.file_path, self.options, self.backend = code, None, options, backend
        self.enable_cooperative_groups = enable_cooperative_groups
        self.name_expressions = None if name_expressions is None else tuple(name_expressions)

    def get_function(self, name):
        if not isinstance(name, str):
            raise TypeError(f"Argument 'name' has incorrect type (expected str, got {type(name).__name__})")
        ker = RawKernel(self.code, name, self.options, self.backend,
                        enable_cooperative_groups=self.enable_cooperative_groups)
        ker.name_expressions = self.name_expressions
        ker.kernel  # noqa: B018 - CuPy loads it now, on the current device
        return ker

    def compile(self, log_stream=None):
        return None


def occupancy_max_active_blocks_per_multiprocessor(func, block_size, dynamic_smem_size):
    fn = _functions_by_ptr.get(int(func))
    if fn is None:
        raise CUDADriverError(400, "CUDA_ERROR_INVALID_HANDLE: no such function")
    return blocks_per_sm(fn.resources, int(block_size), int(dynamic_smem_size), fn.max_dynamic_shared_size_bytes)
