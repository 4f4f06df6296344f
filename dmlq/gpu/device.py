"""The one place that talks to the CUDA device: array module, pointers, device
facts (compute capability, SM count, occupancy) and the kernel launch.

Every launcher in dmlq.gpu goes through :func:`current`, the device in use in
the calling context: :data:`default` (CuPy's devices) unless a ``with
using(dev):`` block in this thread or task says otherwise, so a test can run
the launchers on another device (tests/cuda_host runs them against the kernels
compiled for the CPU) while grid, block, shared-memory size and argument packing
stay exactly as on a GPU, and ``kernel_plan`` can plan on a nominal device
without changing the device of any other thread.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math
import threading
import weakref
from types import SimpleNamespace
from typing import NamedTuple, Optional

import numpy as np

from ..keys import param_key
from . import capture

# A null device pointer as a kernel argument. CuPy does not turn a Python None
# into a null pointer (it arrives as garbage), so launchers pass this instead;
# launch() refuses None outright.
NULL = np.uint64(0)


class DeviceInfo(NamedTuple):
    """What kernel selection and launch sizing need to know about a device (a
    tuple: it is part of every plan key, and hashes at C speed)."""

    name: str
    compute_capability: int   # 90 for sm_90
    sm_count: int
    max_smem_per_block: int   # bytes of dynamic shared memory a block may opt in to
    # CUDA's device number: two identical GPUs must not share keys, since what
    # is cached under them holds kernels loaded on one device.
    ordinal: int = 0

    @property
    def has_dp4a(self) -> bool:
        return self.compute_capability >= 61

    @property
    def has_mma(self) -> bool:
        return self.compute_capability >= 80


def cc_int(compute_capability) -> int:
    """80 from 80, "80", "8.0" or (8, 0)."""
    if isinstance(compute_capability, (tuple, list)):
        major, minor = compute_capability
        return int(major) * 10 + int(minor)
    text = str(compute_capability)
    if "." in text:
        major, minor = text.split(".")
        return int(major) * 10 + int(minor)
    return int(text)


class CupyBackend:
    """The real device, through CuPy (imported on first use)."""

    def __init__(self):
        # both keyed by dmlq.keys' rule (param_key of the device and the kernel's
        # facts): a value of another type never shares an entry
        self._opted_in: dict = {}   # -> the bytes of dynamic shared memory opted in to
        self._occupancy: dict = {}  # -> blocks per SM

    @staticmethod
    def xp():
        import cupy

        return cupy

    @staticmethod
    def ptr(a) -> int:
        return a.data.ptr

    def is_array(self, a) -> bool:
        return isinstance(a, self._cupy().ndarray)

    def current(self) -> int:
        return self._cupy().cuda.runtime.getDevice()

    def stream(self):
        """A key naming the stream CuPy launches on now: its handle, with the thread for the
        per-thread default stream (handle 2, cudaStreamPerThread: another stream in each
        thread, ``cupy.cuda.Stream.ptds`` or CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1)."""
        ptr = self._cupy().cuda.get_current_stream().ptr
        return (ptr, thread_serial()) if ptr == 2 else ptr

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _cupy():
        import cupy

        return cupy

    def info(self) -> DeviceInfo:
        return _info_for(self.current())

    def resident_blocks(self, source: str, name: str, threads: int, smem: int) -> int:
        """Blocks of kernel ``name`` one SM holds at once (CUDA's occupancy calculator)."""
        import cupy

        key = param_key((self.current(), source, name, threads, smem))
        n = self._occupancy.get(key)
        if n is None:
            # opted in first: above 48 KiB of dynamic shared memory CUDA counts
            # 0 resident blocks for a function that has not opted in
            fn = self._function(source, name, smem)
            try:
                n = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                    fn.kernel.ptr, threads, smem)
            except Exception:  # noqa: BLE001 - only sizes a grid; 4 blocks is a safe guess
                n = 4
            n = self._occupancy[key] = max(1, int(n))
        return n

    def _function(self, source: str, name: str, shared_mem: int):
        from . import loader

        fn = loader.function(source, name)
        if shared_mem > 48 * 1024:
            # the opt-in is the function's limit: a later, larger block raises it
            key = param_key((self.current(), source, name))
            if self._opted_in.get(key, 0) < shared_mem:
                with loader._lock:  # (a thread asking less at once must not record over a larger limit)
                    if self._opted_in.get(key, 0) < shared_mem:
                        fn.max_dynamic_shared_size_bytes = shared_mem
                        self._opted_in[key] = shared_mem
        return fn

    def launch(self, source: str, name: str, grid, block, args, shared_mem: int = 0):
        check_args(name, args)
        self._function(source, name, shared_mem)(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)

    def kernel(self, source: str, name: str, shared_mem: int = 0):
        """One kernel's cupy Function on the current device, the lookup and the
        shared-memory opt-in done now: ``k(grid, block, args, shared_mem=n)``,
        with grid and block tuples of ints (dmlq.gpu.plan.Launch makes them so)."""
        return self._function(source, name, shared_mem)


class _Thread(threading.local):
    serial: Optional[int] = None
    copies: "Optional[weakref.WeakKeyDictionary]" = None


_thread, _serials = _Thread(), itertools.count()


def thread_copies() -> "weakref.WeakKeyDictionary":
    """The calling thread's device copies of shared values (constants, offset tables) made on its
    per-thread default stream, {owner: {key: copy}}: they go with the thread (kept by owner,
    under the thread's serial, a thread per task would keep them all while the owner lives)."""
    copies = _thread.copies
    if copies is None:
        copies = _thread.copies = weakref.WeakKeyDictionary()
    return copies


def thread_serial() -> int:
    """A number of the calling thread's own, never given to another thread (a thread's ident
    is handed to a later thread once it ends, and so would its per-thread stream's copies)."""
    serial = _thread.serial
    if serial is None:
        serial = _thread.serial = next(_serials)
    return serial


@functools.lru_cache(maxsize=None)
def _info_for(device_id: int) -> DeviceInfo:
    import cupy

    dev = cupy.cuda.Device(device_id)
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    optin = int(props.get("sharedMemPerBlockOptin", 48 * 1024))
    return DeviceInfo(name, cc_int(dev.compute_capability),
                      int(dev.attributes["MultiProcessorCount"]), optin, device_id)


def check_args(name: str, args) -> None:
    """Refuse argument lists CuPy would pass wrongly (None is not a null pointer)."""
    for i, a in enumerate(args):
        if a is None:
            raise TypeError(f"{name}: kernel argument {i} is None; pass dmlq.gpu.device.NULL "
                            "for a null pointer")


# H100 (sm_90) per-SM and per-block limits, for theoretical occupancy.
H100_LIMITS = dict(
    regs_per_sm=65536,
    reg_sub_partitions=4,        # the register file is split between 4 schedulers
    reg_alloc_unit=256,          # registers are allocated per warp in units of 256
    max_regs_per_block=65536,
    max_threads_per_sm=2048,
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
    smem_per_sm=228 * 1024,      # largest carveout
    max_smem_per_block=227 * 1024,
    smem_reserved_per_block=1024,
    smem_alloc_unit=128,
)


@functools.lru_cache(maxsize=1024)
def _occupancy_h100(regs: int, threads: int, smem: int):
    return occupancy(regs, threads, smem)


def occupancy(regs: int, threads: int, smem: int, lim=H100_LIMITS):
    """(blocks per SM, fraction of max warps, limiting factor) by the CUDA occupancy
    calculator's rules; ``regs`` per thread (0 when unknown: no register limit),
    ``smem`` static plus dynamic shared memory per block."""
    warps = math.ceil(threads / 32)
    regs_per_warp = math.ceil(regs * 32 / lim["reg_alloc_unit"]) * lim["reg_alloc_unit"]
    smem_block = smem + lim["smem_reserved_per_block"]
    smem_block = math.ceil(smem_block / lim["smem_alloc_unit"]) * lim["smem_alloc_unit"]
    if regs_per_warp * warps > lim["max_regs_per_block"] or smem > lim["max_smem_per_block"]:
        return 0, 0.0, "does not fit"
    per_part = lim["regs_per_sm"] // lim["reg_sub_partitions"]
    limits = {  # ties name the first: a hardware maximum before a kernel resource
        "threads": lim["max_warps_per_sm"] // warps,
        "blocks": lim["max_blocks_per_sm"],
        "registers": (per_part // regs_per_warp * lim["reg_sub_partitions"]) // warps
        if regs_per_warp else lim["max_blocks_per_sm"],
        "smem": lim["smem_per_sm"] // smem_block,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    return blocks, blocks * warps / lim["max_warps_per_sm"], limiter


class NominalDevice:
    """A device that is only described: planning (dmlq.gpu.plan) without a GPU or
    CuPy, on NumPy arrays standing in for device arrays. Launching refuses.

    Occupancy comes from the H100 limits with threads and dynamic shared memory
    alone (registers and static shared memory need the compiled kernel): it can be
    higher than a real device's."""

    def __init__(self, info: Optional[DeviceInfo] = None):
        self._info = info or DeviceInfo("NVIDIA H100 (nominal: no GPU, occupancy from threads and "
                                        "shared memory only)", 90, 132, 227 * 1024)

    @staticmethod
    def xp():
        return np

    @staticmethod
    def ptr(a) -> int:
        return a.__array_interface__["data"][0]

    @staticmethod
    def is_array(a) -> bool:
        return isinstance(a, np.ndarray)

    def info(self) -> DeviceInfo:
        return self._info

    def resident_blocks(self, source: str, name: str, threads: int, smem: int) -> int:
        del source, name
        return max(1, _occupancy_h100(0, threads, smem)[0])

    def launch(self, source, name, grid, block, args, shared_mem=0):
        raise RuntimeError(f"{name}: a nominal device only plans; it cannot launch kernels")


# The device where no ``using`` block is active. dmlq never reassigns it: the
# device a call uses is chosen per context (a ContextVar), never by swapping a
# process-wide global that every thread reads.
default = CupyBackend()
_in_use = contextvars.ContextVar("dmlq_device_in_use", default=None)


def current():
    """The device every launcher and planner talks to in the calling context."""
    dev = _in_use.get()
    return default if dev is None else dev


@contextlib.contextmanager
def using(dev):
    """Make ``dev`` the device of the calling context (this thread or task only)
    inside the block; other threads keep theirs."""
    token = _in_use.set(dev)
    try:
        yield dev
    finally:
        _in_use.reset(token)


class Fresh:
    """Stands, in a plan, for an array the launcher will allocate: C-contiguous
    unless ``strides`` (bytes) say otherwise, at an address as aligned as any
    allocation's. Never launched with."""

    ADDRESS = 1 << 40

    def __init__(self, shape, dtype, strides=None):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(n) for n in shape)
        self.ndim = len(self.shape)
        self.itemsize = self.dtype.itemsize
        c_strides, step = [], self.itemsize
        for n in reversed(self.shape):
            c_strides.append(step)
            step *= max(n, 1)
        c_order = tuple(reversed(c_strides))
        self.strides = c_order if strides is None else tuple(strides)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        # (an ndarray's flag, for the planners that read it of an out)
        self.flags = SimpleNamespace(c_contiguous=self.size <= 1 or self.strides == c_order)


_NAMES: dict = {}


def dtype_name(dt) -> str:
    """``dt.name``, memoized (NumPy computes it anew on every access)."""
    name = _NAMES.get(dt)
    if name is None:
        name = _NAMES[dt] = np.dtype(dt).name
    return name


def is_vector(v, dtype, length=None) -> bool:
    """Whether a scale or zero point already is the vector a kernel reads through
    a pointer: ``dtype``, ``length`` elements when given, contiguous in C order
    (any shape: a 0-d scalar, a ``(1, N)`` row, an ``(M, 1)`` column); None is."""
    return v is None or (v.dtype == dtype and (length is None or v.size == length)
                         and (v.size <= 1 or v.flags.c_contiguous))


def table(v, shape, dtype):
    """``v`` broadcast to ``shape`` as a C-contiguous array of ``dtype``: the layout a kernel
    reads through a pointer. ``v`` itself where it already is that; else one copy in which the
    cast, the broadcast and the layout happen together (a cast and then a contiguous copy were
    two device passes for a float16 or strided parameter, such as MatMulNBits' float16 scales
    handed over as the .T of their (N, groups) table)."""
    shape = tuple(shape)
    if v.shape == shape and v.dtype == dtype and v.flags.c_contiguous:
        return v
    t = xp().empty(shape, dtype)
    t[...] = v
    return t


def extent(a):
    """[lo, hi) device byte range an array's elements occupy."""
    lo = hi = ptr(a)
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + a.itemsize


def overlaps(x, y) -> bool:
    """Whether two arrays' byte ranges intersect (NumPy's may_share_memory bounds test)."""
    if x.size == 0 or y.size == 0:
        return False
    (lx, hx), (ly, hy) = extent(x), extent(y)
    return lx < hy and ly < hx


def xp():
    return current().xp()


def on_device(v):
    """A scale or zero point a kernel reads through a pointer, on the device in
    use: a host (NumPy) array or scalar is copied there (:func:`upload`). Passed as
    it is, CuPy would send a 1-element NumPy array by value where the kernel takes
    a pointer, and refuse a larger one."""
    dev = current()
    if v is None or dev.is_array(v):
        return v
    return upload(dev.xp(), v)


_HOST_VALUES = (np.ndarray, np.generic, int, float, bool, complex, list, tuple)


def stream_key():
    """The key of the stream the device in use launches on now (:meth:`CupyBackend.stream`);
    0 for a device without streams."""
    stream = getattr(current(), "stream", None)
    return stream() if stream is not None else 0


def stream_copy(owner, shared: dict, make, where: tuple = ()):
    """The device copy of a value ``owner``'s calls share (a scale constant, an offset table) for
    the stream in use, ``make()`` uploading it there on first use: a copy is made on the stream
    that reads it, so another stream never reads one still in flight. Kept in ``shared`` under
    (``where``, the stream), or with the thread on the per-thread default stream (a tuple key:
    :func:`thread_copies`); held while a capture reads it (dmlq.gpu.capture.hold)."""
    stream = stream_key()
    copies = shared if type(stream) is not tuple else thread_copies().setdefault(owner, {})
    key = (*where, stream)
    copy = copies.get(key)
    if copy is None:
        copy = copies.setdefault(key, make())
    capture.hold(copy)
    return copy


def upload(xp, v, dtype=None):
    """``xp.asarray(v, dtype)`` keeping every bit of a host value. CuPy makes a 0-d
    array from a host scalar with ``ndarray.fill``, which writes a value equal to 0
    with a memset, so a scale of -0.0 arrives as +0.0 (the first H100 session:
    quantize and dequantize by -0.0 flipped every sign); an array of one or more
    elements is copied byte for byte, so a 0-d value travels as one element."""
    if xp is np or not isinstance(v, _HOST_VALUES):
        return xp.asarray(v) if dtype is None else xp.asarray(v, dtype=dtype)
    host = np.asarray(v) if dtype is None else np.asarray(v, dtype=dtype)
    if host.ndim:
        return xp.asarray(host)
    return xp.asarray(host.reshape(1)).reshape(())


def ptr(a) -> int:
    return Fresh.ADDRESS if type(a) is Fresh else current().ptr(a)


def info() -> DeviceInfo:
    return current().info()


def resident_blocks(source: str, name: str, threads: int, smem: int = 0) -> int:
    return current().resident_blocks(source, name, threads, smem)


def kernel(source: str, name: str, shared_mem: int = 0):
    """One kernel's launch function on the device in use: ``k(grid, block, args,
    shared_mem=n)`` (CuPy's calling convention). A device without its own
    ``kernel`` gets ``launch`` bound to the name."""
    dev = current()
    bound = getattr(dev, "kernel", None)
    if bound is not None:
        return bound(source, name, shared_mem)
    launch_on = dev.launch

    def k(grid, block, args, shared_mem=0):
        launch_on(source, name, grid, block, args, shared_mem)
    return k


# Scratch memory for small temporaries (matmul's row and column sums): one
# buffer per device, thread and stream, reused by every call there, since
# launches on one stream from one thread run in the order they were made: a
# call's first kernel starts after the previous call's last one has finished
# reading. A buffer grows by reallocation; CuPy's pool hands freed memory only
# to later work on the same stream. Larger temporaries are allocated per call,
# and so is every buffer of a call captured in a CUDA graph (dmlq.gpu.capture).
# Each thread keeps its own table (freed with the thread) of the
# WORKSPACE_STREAMS streams it used last: a program that makes a stream per task
# does not keep a buffer per stream it ever used (dropping one is safe for the
# same reason growing is: the pool gives it to later work on its stream only).
WORKSPACE_MAX = 1 << 20  # bytes
WORKSPACE_STREAMS = 8


class _Table(dict):
    """One thread's workspaces, {(backend, device, stream): buffer}, the last used last
    (an object by identity: the weak set of live tables holds it)."""

    __hash__ = object.__hash__  # type: ignore[assignment]
    __eq__ = object.__eq__  # type: ignore[assignment]


_tables = threading.local()
_all_tables: "weakref.WeakSet[_Table]" = weakref.WeakSet()


def _table() -> _Table:
    table = getattr(_tables, "table", None)
    if table is None:
        table = _tables.table = _Table()
        _all_tables.add(table)
    return table


def workspace():
    """``take(nbytes) -> address`` of at least ``nbytes`` (<= WORKSPACE_MAX,
    16-byte aligned) of scratch memory on the device in use, private to the
    calling thread's current stream until its next ``take``. Bound to the
    device now (runners are made per device)."""
    be = current()
    ordinal, xp_, ptr_ = be.info().ordinal, be.xp(), be.ptr
    stream = getattr(be, "stream", None) or (lambda: 0)

    def take(nbytes: int) -> int:
        keep = capture.kept()
        if keep is not None:  # a call captured in a graph: a buffer of its own (dmlq.gpu.capture)
            keep.append(xp_.empty(max(nbytes, 16), np.uint8))
            return ptr_(keep[-1])
        table, key = _table(), (be, ordinal, stream())
        buf = table.pop(key, None)
        if buf is None or buf.nbytes < nbytes:
            buf = xp_.empty(max(nbytes, 4096), np.uint8)
        table[key] = buf
        if len(table) > WORKSPACE_STREAMS:
            del table[next(iter(table))]
        return ptr_(buf)
    return take


def workspace_count() -> int:
    """How many workspaces the live threads hold."""
    return sum(len(t) for t in list(_all_tables))


def release_workspaces() -> None:
    """Free every scratch buffer (the next call allocates again)."""
    for table in list(_all_tables):
        table.clear()


def compile_all() -> int:
    """Compile and load every kernel the current device supports; returns the count."""
    from . import loader

    count = 0
    for source in loader.sources_for(info().compute_capability):
        for name in loader.registry()[source]:
            loader.function(source, name)
            count += 1
    return count
