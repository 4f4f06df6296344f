"""``cupy.cuda`` of the stand-in: devices, memory, the pool, streams, events,
graph capture, and the runtime/driver/nvrtc calls dmlq makes.

Two identical devices, each an H100 (sm_90) as CUDA describes it, except for
the SM count (HOST_SMS: grids sized from it run on the CPU). Device memory is
host memory, handed out by CuPy's per-stream pool (see MemoryPool): each block
an exact-size buffer at a 256-byte aligned address, so an address handed to a
kernel is found again (and checked: live, on the current device) when it is
launched. Work on the legacy null stream runs at once; on a created stream it
waits until something orders it (see _submit); while a stream captures a graph
it is recorded and runs at each ``Graph.launch``. Synchronizing or a synchronous copy while a
capture is active is refused, as CUDA refuses it.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import itertools
import threading
import time
import weakref

import numpy as np

DEVICE_COUNT = 2
HOST_SMS = 4                      # the harness runs every thread on the CPU
CC = (9, 0)
NAME = b"NVIDIA H100 80GB HBM3 (cupy stand-in, host harness)"
TOTAL_MEMORY = 2 * 2**30          # host memory: tests that need more see too little free and skip
# H100 limits (CUDA's device attributes for sm_90)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
SMEM_PER_BLOCK = 48 * 1024        # without the opt-in
SMEM_PER_BLOCK_OPTIN = 227 * 1024
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32
L2_BYTES = 50 * 2**20
CLOCK_KHZ = 1980000
ALIGN = 256
POISON = 0xDB                     # fresh allocations hold this, as device memory holds leftovers

# CUDA's cudaDeviceAttr values (the enum is the runtime's; CuPy exposes it)
ATTR = dict(cudaDevAttrMaxThreadsPerBlock=1, cudaDevAttrMaxBlockDimX=2, cudaDevAttrMaxBlockDimY=3,
            cudaDevAttrMaxBlockDimZ=4, cudaDevAttrMaxGridDimX=5, cudaDevAttrMaxGridDimY=6,
            cudaDevAttrMaxGridDimZ=7, cudaDevAttrMaxSharedMemoryPerBlock=8, cudaDevAttrWarpSize=10,
            cudaDevAttrClockRate=13, cudaDevAttrMultiProcessorCount=16, cudaDevAttrMemoryClockRate=36,
            cudaDevAttrGlobalMemoryBusWidth=37, cudaDevAttrL2CacheSize=38,
            cudaDevAttrMaxThreadsPerMultiProcessor=39, cudaDevAttrMaxSharedMemoryPerMultiprocessor=81,
            cudaDevAttrMaxSharedMemoryPerBlockOptin=97)
_ATTR_VALUES = {1: MAX_THREADS_PER_BLOCK, 2: MAX_BLOCK[0], 3: MAX_BLOCK[1], 4: MAX_BLOCK[2], 5: MAX_GRID[0],
                6: MAX_GRID[1], 7: MAX_GRID[2], 8: SMEM_PER_BLOCK, 10: 32, 13: CLOCK_KHZ, 16: HOST_SMS,
                36: 2619000, 37: 5120, 38: L2_BYTES, 39: MAX_THREADS_PER_SM, 81: SMEM_PER_SM,
                97: SMEM_PER_BLOCK_OPTIN}


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, text: str):
        self.status = status
        super().__init__(text)


class OutOfMemoryError(MemoryError):
    pass


class CUDADriverError(RuntimeError):
    def __init__(self, status: int, text: str):
        self.status = status
        super().__init__(text)


# ------------------------------------------------------------------ per-thread state

class _State(threading.local):
    def __init__(self):
        self.device = 0
        self.streams = {}  # device -> current Stream
        self.allocator = None  # using_allocator's, this thread's; None: the process's (set_allocator)


_tls = _State()


def get_device_id() -> int:
    return _tls.device


def _check_device(dev) -> int:
    dev = int(dev)
    if not 0 <= dev < DEVICE_COUNT:
        raise CUDARuntimeError(101, "cudaErrorInvalidDevice: invalid device ordinal")
    return dev


# ------------------------------------------------------------------ devices

class Device:
    def __init__(self, device=None):
        self.id = _tls.device if device is None else _check_device(device)
        self._before = []

    def __enter__(self):
        self._before.append(_tls.device)
        _tls.device = self.id
        return self

    def __exit__(self, *exc):
        _tls.device = self._before.pop()

    def use(self):
        _tls.device = self.id

    def synchronize(self):
        _synchronize("cudaDeviceSynchronize")
        settle_device(self.id)

    @property
    def compute_capability(self) -> str:
        return f"{CC[0]}{CC[1]}"

    @property
    def attributes(self) -> dict:
        return {"MultiProcessorCount": HOST_SMS, "MaxThreadsPerBlock": MAX_THREADS_PER_BLOCK,
                "MaxSharedMemoryPerBlock": SMEM_PER_BLOCK, "MaxSharedMemoryPerBlockOptin": SMEM_PER_BLOCK_OPTIN,
                "MaxSharedMemoryPerMultiprocessor": SMEM_PER_SM, "L2CacheSize": L2_BYTES, "WarpSize": 32,
                "ClockRate": CLOCK_KHZ, "ComputeCapabilityMajor": CC[0], "ComputeCapabilityMinor": CC[1],
                "MaxGridDimX": MAX_GRID[0], "MaxGridDimY": MAX_GRID[1], "MaxGridDimZ": MAX_GRID[2],
                "MaxBlockDimX": MAX_BLOCK[0], "MaxBlockDimY": MAX_BLOCK[1], "MaxBlockDimZ": MAX_BLOCK[2],
                "MaxThreadsPerMultiProcessor": MAX_THREADS_PER_SM}

    @property
    def mem_info(self):
        return runtime_memGetInfo(self.id)

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __int__(self):
        return self.id

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


# ------------------------------------------------------------------ memory

_live: "weakref.WeakValueDictionary[int, Memory]" = weakref.WeakValueDictionary()
_used = [0] * DEVICE_COUNT


class Memory:
    """One device allocation (cudaMalloc): ``size`` bytes at ``ptr`` on ``device_id``;
    ``live=False`` for the pool's own allocations (a launch finds the blocks it
    hands out, not the allocation they are cut from)."""

    def __init__(self, size: int, device_id: int = None, live: bool = True):
        self.size = int(size)
        self.device_id = _tls.device if device_id is None else device_id
        if self.size == 0:
            self.ptr, self._raw, self.buf = 0, None, np.empty(0, np.uint8)
            return
        if _used[self.device_id] + self.size > TOTAL_MEMORY:
            raise OutOfMemoryError(f"Out of memory allocating {self.size:,} bytes (the stand-in's devices "
                                   f"have {TOTAL_MEMORY:,} bytes)")
        self._raw = np.empty(self.size + ALIGN, np.uint8)
        start = self._raw.ctypes.data
        self.ptr = start + (-start) % ALIGN
        # its own root array (no .base chain to the padded block), so the harness
        # sees exactly the allocation and its sanitizers catch an overrun past it
        self.buf = np.frombuffer((ctypes.c_uint8 * self.size).from_address(self.ptr), np.uint8)
        self.buf[...] = POISON
        if live:
            _live[self.ptr] = self
        _used[self.device_id] += self.size
        self._finalizer = weakref.finalize(self, _release, self.device_id, self.size)

    @property
    def device(self):
        return Device(self.device_id)


def _release(dev, size):
    _used[dev] -= size


def find_allocation(address: int):
    """The live allocation holding ``address``, else the one it lies one past the
    end of (pool blocks can be adjacent: the next block's start is the first
    choice), or None."""
    end_of = None
    while True:  # (another thread's allocation or collection may change the weak dict mid-copy)
        try:
            live = list(_live.items())
            break
        except RuntimeError:
            continue
    for ptr, mem in live:
        if ptr <= address < ptr + mem.size:
            return mem
        if address == ptr + mem.size:
            end_of = mem
    return end_of


class MemoryPointer:
    def __init__(self, mem: Memory, offset: int):
        self.mem = mem
        self.ptr = mem.ptr + offset if mem.ptr else 0
        self.device_id = mem.device_id

    @property
    def device(self):
        return Device(self.device_id)

    def __add__(self, offset):
        if not isinstance(offset, (int, np.integer)):
            return NotImplemented
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + int(offset))

    __radd__ = __add__

    def __sub__(self, offset):
        return self.__add__(-int(offset))

    def __int__(self):
        return self.ptr

    def copy_from_host(self, mem, size):
        _refuse_while_capturing("cudaMemcpy")
        ctypes.memmove(self.ptr, int(mem) if not isinstance(mem, ctypes.c_void_p) else mem.value, size)

    def copy_to_host(self, mem, size):
        _refuse_while_capturing("cudaMemcpy")
        ctypes.memmove(int(mem) if not isinstance(mem, ctypes.c_void_p) else mem.value, self.ptr, size)

    def memset(self, value, size):
        _submit(lambda: ctypes.memset(self.ptr, value, size))

    def memset_async(self, value, size, stream=None):
        _submit(lambda: ctypes.memset(self.ptr, value, size), stream)


# CuPy 14.2's memory pool (cupy/cuda/memory.pyx, SingleDeviceMemoryPool), per
# device: every request is rounded up to 512 bytes and served from the free
# blocks of the current stream's arena (the best fit: the smallest block that
# holds it, split, the rest staying free), else from a new allocation. A freed
# block goes back to the arena of the stream it was allocated on -- whatever
# stream's kernels used it -- free blocks beside it merge, and the next request
# on that stream may get it at once: CuPy waits for nothing. Safe for work on
# that stream (it runs in order); a kernel still pending on another stream
# reads what the new owner writes. Blocks keep what they held (leftovers, as
# device memory does); new allocations hold POISON. The blocks handed out are
# exact-size buffers for the harness (a kernel running past one is still an
# ASan report). free_all_blocks releases the allocations wholly free (after
# the device's pending work: cudaFree waits for it), as does an allocation
# that finds the device full before it tries again.
ALLOCATION_UNIT = 512
_pool_lock = threading.RLock()


class _Arena:
    """The free blocks of one stream: {(allocation, offset): bytes}."""

    def __init__(self):
        self.free = {}
        self.pending = []  # blocks freed by finalizers, merged on the next use (as CuPy's pending frees)

    def _commit(self):
        while self.pending:
            raw, off, n = self.pending.pop()
            after = self.free.pop((raw, off + n), None)
            if after is not None:
                n += after
            before = next(((r, o) for (r, o), m in self.free.items() if r is raw and o + m == off), None)
            if before is not None:
                off, n = before[1], self.free.pop(before) + n
            self.free[raw, off] = n

    def take(self, size: int):
        self._commit()
        fits = [(n, key) for key, n in self.free.items() if n >= size]
        if not fits:
            return None
        n, (raw, off) = min(fits, key=lambda f: f[0])
        del self.free[raw, off]
        if n > size:
            self.free[raw, off + size] = n - size
        return raw, off

    def release_whole(self) -> int:
        """Drop the allocations no part of which is in use; their bytes."""
        self._commit()
        whole = [(raw, off) for (raw, off), n in self.free.items() if off == 0 and n == raw.size]
        for key in whole:
            del self.free[key]
        return sum(raw.size for raw, _ in whole)


class PooledMemory:
    """A block of the pool: ``size`` bytes (as asked) at ``ptr``, inside one of
    the pool's allocations; back to its stream's arena when no array holds it."""

    def __init__(self, raw: Memory, offset: int, size: int, rounded: int, arena: _Arena):
        self.raw, self.size, self.device_id = raw, size, raw.device_id
        self.ptr = raw.ptr + offset
        self.buf = np.frombuffer((ctypes.c_uint8 * size).from_address(self.ptr), np.uint8)
        _live[self.ptr] = self
        weakref.finalize(self, arena.pending.append, (raw, offset, rounded))

    @property
    def device(self):
        return Device(self.device_id)


def _stream_ident(stream) -> int:
    """CuPy's arena key: the stream's handle; per thread for the per-thread default stream."""
    return -threading.get_ident() if stream.ptr == 2 else stream.ptr


class MemoryPool:
    def __init__(self):
        self._limit = 0
        self._arenas = {}  # (device, stream ident) -> _Arena
        self._in_use = collections.Counter()  # device -> bytes handed out (rounded)

    def malloc(self, size):
        from ._array import counts

        size = int(size)
        counts["allocations"] += 1
        if size == 0:
            return MemoryPointer(Memory(0), 0)
        rounded = -(-size // ALLOCATION_UNIT) * ALLOCATION_UNIT
        dev = _tls.device
        with _pool_lock:
            arena = self._arenas.setdefault((dev, _stream_ident(get_current_stream())), _Arena())
            got = arena.take(rounded)
        if got is None:
            self._within_limit(size, rounded)
            try:
                got = Memory(rounded, dev, live=False), 0
            except OutOfMemoryError:  # CuPy frees every cached block and tries again
                self.free_all_blocks()
                got = Memory(rounded, dev, live=False), 0
        block = PooledMemory(got[0], got[1], size, rounded, arena)
        self._in_use[dev] += rounded
        weakref.finalize(block, self._in_use.subtract, {dev: rounded})
        return MemoryPointer(block, 0)

    def _device_arenas(self, stream=None):
        dev = _tls.device
        with _pool_lock:
            return [a for (d, ident), a in self._arenas.items()
                    if d == dev and (stream is None or ident == _stream_ident(stream))]

    def used_bytes(self):
        return self._in_use[_tls.device]

    def total_bytes(self):
        return self.used_bytes() + self.free_bytes()

    def free_bytes(self):
        with _pool_lock:
            arenas = self._device_arenas()
            for a in arenas:
                a._commit()
            return sum(sum(a.free.values()) for a in arenas)

    def n_free_blocks(self):
        with _pool_lock:
            arenas = self._device_arenas()
            for a in arenas:
                a._commit()
            return sum(len(a.free) for a in arenas)

    def free_all_blocks(self, stream=None):
        settle_device(_tls.device)  # cudaFree waits for the device
        with _pool_lock:
            for a in self._device_arenas(stream):
                a.release_whole()

    def _release(self):
        """Forget every arena of every device (between tests: a fresh process's pool)."""
        with _pool_lock:
            self._arenas.clear()

    def _within_limit(self, size, rounded):
        """CuPy's pool limit (memory.pyx _try_malloc): a new block past the limit frees the
        cached blocks and tries again, then raises OutOfMemoryError."""
        if not self._limit or self.total_bytes() + rounded <= self._limit:
            return
        self.free_all_blocks()
        if self.total_bytes() + rounded > self._limit:
            raise OutOfMemoryError(f"Out of memory allocating {size:,} bytes (allocated so far: "
                                   f"{self.total_bytes():,} bytes, limit set to: {self._limit:,} bytes).")

    def set_limit(self, size=None, fraction=None):
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"memory limit fraction out of range: {fraction}")
            size = int(fraction * TOTAL_MEMORY)
        if size is not None and size < 0:
            raise ValueError(f"memory limit size out of range: {size}")
        self._limit = size or 0

    def get_limit(self):
        return self._limit


_pool = MemoryPool()


def get_default_memory_pool():
    return _pool


def _malloc(size):
    """CuPy's raw allocator (memory._malloc: cudaMalloc, no pool), what ``None`` selects."""
    return MemoryPointer(Memory(int(size)), 0)


_allocator = [_pool.malloc]  # the process's allocator (set_allocator)


def set_allocator(allocator=None):
    _allocator[0] = _malloc if allocator is None else allocator


def get_allocator():
    return _tls.allocator or _allocator[0]


@contextlib.contextmanager
def using_allocator(allocator=None):
    """This thread's allocator inside the block, as CuPy's (``None``: the raw allocator)."""
    before = _tls.allocator
    _tls.allocator = _malloc if allocator is None else allocator
    try:
        yield
    finally:
        _tls.allocator = before


def alloc(size):
    return get_allocator()(size)


# ------------------------------------------------------------------ streams, capture

_handles = itertools.count(0x5EA0000)
_capturing_streams: "weakref.WeakSet" = weakref.WeakSet()


class Graph:
    def __init__(self, work):
        self._work = work

    def launch(self, stream=None):
        for fn in self._work:
            _submit(fn, stream)

    def upload(self, stream=None):
        return None


class Stream:
    null = None  # set below

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.ptr = 0 if null else (2 if ptds else next(_handles))
        self.device_id = -1 if null else _tls.device
        self.is_non_blocking = bool(non_blocking)
        self.priority = priority or 0
        self._capture = None
        self._before = []
        self._pending = collections.deque()  # work submitted and not yet run, in order
        self._submitted = self._ran = 0

    def __enter__(self):
        dev = _tls.device
        self._before.append((dev, _tls.streams.get(dev)))
        _tls.streams[dev] = self
        return self

    def __exit__(self, *exc):
        dev, prev = self._before.pop()
        if prev is None:
            _tls.streams.pop(dev, None)
        else:
            _tls.streams[dev] = prev

    def use(self):
        _tls.streams[_tls.device] = self
        return self

    def synchronize(self):
        _synchronize("cudaStreamSynchronize")
        settle(self)

    @property
    def done(self):
        return not self._pending

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        """Later work on this stream runs after the work ``event`` marks."""
        where = event._where
        if where is not None and where[0]._ran < where[1]:
            _submit(lambda: _run_until(*where), self)

    def begin_capture(self, mode=None):
        if self._capture is not None:
            raise CUDARuntimeError(900, "cudaErrorIllegalState: the stream is capturing already")
        if self.ptr == 0:
            raise CUDARuntimeError(900, "cudaErrorStreamCaptureUnsupported: the legacy null stream "
                                   "cannot capture")
        self._capture = []
        _capturing_streams.add(self)

    def is_capturing(self):
        return self._capture is not None

    def end_capture(self):
        if self._capture is None:
            raise CUDARuntimeError(900, "cudaErrorIllegalState: the stream is not capturing")
        work, self._capture = self._capture, None
        return Graph(work)

    def __repr__(self):
        return f"<Stream {self.ptr:#x} (device {self.device_id})>"


Stream.null = Stream(null=True)


class ExternalStream(Stream):
    def __init__(self, ptr, device_id=-1):
        super().__init__()
        self.ptr = int(ptr)
        self.device_id = device_id


def get_current_stream(device_id=-1):
    dev = _tls.device if device_id == -1 else device_id
    return _tls.streams.get(dev, Stream.null)


def _capturing():
    """Streams capturing now (all threads: capture is global mode)."""
    return [s for s in _capturing_streams if s._capture is not None]



def _synchronize(what: str):
    """The host waits for the device: refused during a capture, counted."""
    from ._array import counts

    _refuse_while_capturing(what)
    counts["syncs"] += 1


def _refuse_while_capturing(what: str):
    if _capturing():
        raise CUDARuntimeError(900, f"cudaErrorStreamCaptureUnsupported: {what} while a stream "
                               "captures a graph")


# Streams run their work in order, and no stream waits for another unless told:
# work on a created stream (or an external one) is deferred until something
# orders it -- the stream's synchronize, an event's synchronize, a wait_event of
# another stream that then runs, a device synchronize, or an operation on the
# stream itself (an array operation runs, as on a GPU, after the current stream's
# earlier work). So work on stream B reads what stream A left only if B waited
# for A: a missing wait shows as stale (poisoned) values, not as a lucky race.
# The legacy null stream runs at once, after every blocking stream's earlier work
# on its device (CUDA's implicit synchronization); non-blocking streams skip that.
_queue_lock = threading.RLock()
_with_work: set = set()


def _run_until(stream, n):
    """Run ``stream``'s deferred work, in order, up to its ``n``-th submission."""
    with _queue_lock:
        while stream._ran < n and stream._pending:
            fn = stream._pending.popleft()
            stream._ran += 1
            if not stream._pending:
                _with_work.discard(stream)
            fn()


def _settle_null(dev):
    """The legacy null stream's implicit wait: every blocking stream's work on ``dev``."""
    for s in [s for s in _with_work if s.device_id in (dev, -1) and not s.is_non_blocking]:
        _run_until(s, s._submitted)


def settle(stream=None):
    """Run the work submitted so far on ``stream`` (the current one) and on what
    it waits for: before an operation on that stream touches memory now."""
    stream = get_current_stream() if stream is None else stream
    if stream._capture is not None:
        return
    if stream.ptr == 0:
        if _with_work:
            _settle_null(_tls.device)
    elif stream._pending:
        _run_until(stream, stream._submitted)


def settle_device(dev):
    """Every stream's work on device ``dev`` (cudaDeviceSynchronize)."""
    for s in [s for s in _with_work if s.device_id in (dev, -1)]:
        _run_until(s, s._submitted)


def discard_work():
    """Drop work never ordered (between tests: a GPU would run it, nobody reads it)."""
    with _queue_lock:
        for s in list(_with_work):
            s._ran += len(s._pending)
            s._pending.clear()
        _with_work.clear()


def _submit(fn, stream=None):
    """Put ``fn`` on ``stream`` (the current one): deferred, see above; run now on
    the legacy null stream; recorded at each launch of a graph the stream captures."""
    stream = get_current_stream() if stream is None else stream
    if stream._capture is not None:
        stream._capture.append(fn)
        return
    if stream.ptr == 0:
        if _capturing():
            raise CUDARuntimeError(906, "cudaErrorStreamCaptureImplicit: work on the legacy null stream "
                                   "while another stream captures a graph")
        settle(stream)
        fn()
        return
    with _queue_lock:
        stream._pending.append(fn)
        stream._submitted += 1
        _with_work.add(stream)


class Event:
    """An event's time is the host clock when the stream's work reaches it (when
    it is recorded on the null stream; during a capture, when the graph reaches it)."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.ptr = next(_handles)
        self._time = None
        self._where = None  # (stream, its submission count) when recorded on a deferred stream

    def record(self, stream=None):
        stream = get_current_stream() if stream is None else stream

        def stamp():
            self._time = time.perf_counter()
        self._time = None
        _submit(stamp, stream)
        self._where = (stream, stream._submitted) if stream._pending and stream._capture is None else None

    def synchronize(self):
        _synchronize("cudaEventSynchronize")
        if self._where is not None:
            _run_until(*self._where)

    @property
    def done(self):
        return self._where is None or self._where[0]._ran >= self._where[1]


def get_elapsed_time(start_event, end_event):
    if start_event._time is None or end_event._time is None:
        raise CUDARuntimeError(600, "cudaErrorNotReady: an event was not recorded")
    return (end_event._time - start_event._time) * 1e3  # milliseconds


# ------------------------------------------------------------------ runtime, driver, nvrtc

def runtime_memGetInfo(dev=None):
    dev = _tls.device if dev is None else dev
    return TOTAL_MEMORY - _used[dev], TOTAL_MEMORY


def _props(dev):
    dev = _check_device(dev)
    return {"name": NAME, "major": CC[0], "minor": CC[1], "multiProcessorCount": HOST_SMS,
            "totalGlobalMem": TOTAL_MEMORY, "sharedMemPerBlock": SMEM_PER_BLOCK,
            "sharedMemPerBlockOptin": SMEM_PER_BLOCK_OPTIN, "sharedMemPerMultiprocessor": SMEM_PER_SM,
            "maxThreadsPerBlock": MAX_THREADS_PER_BLOCK, "maxThreadsDim": MAX_BLOCK, "maxGridSize": MAX_GRID,
            "warpSize": 32, "clockRate": CLOCK_KHZ, "l2CacheSize": L2_BYTES,
            "maxThreadsPerMultiProcessor": MAX_THREADS_PER_SM, "maxBlocksPerMultiProcessor": MAX_BLOCKS_PER_SM,
            "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "pciBusID": 0x18 + dev}


def _device_get_attribute(attrib, device):
    value = _ATTR_VALUES.get(int(attrib))
    _check_device(device)
    if value is None:
        raise CUDARuntimeError(1, f"cudaErrorInvalidValue: the stand-in knows no device attribute {attrib}")
    return value


def _set_device(dev):
    _tls.device = _check_device(dev)


def _device_synchronize():
    _synchronize("cudaDeviceSynchronize")
    settle_device(_tls.device)


runtime_names = dict(
    getDevice=get_device_id, setDevice=_set_device, getDeviceCount=lambda: DEVICE_COUNT,
    getDeviceProperties=_props, deviceGetAttribute=_device_get_attribute,
    runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000, memGetInfo=lambda: runtime_memGetInfo(),
    deviceSynchronize=_device_synchronize, CUDARuntimeError=CUDARuntimeError, **ATTR)


REGS_PER_SM = 65536
REG_SUB_PARTITIONS = 4              # the register file is split between 4 warp schedulers
REG_ALLOC_UNIT = 256                # registers are allocated per warp, in units of 256


def register_warps(regs: int) -> int:
    """Warps an SM holds by the register file alone for ``regs`` registers per
    thread (CUDA's occupancy rules: per warp, rounded up to 256, in each of the
    4 sub-partitions); 64 (every warp) when ``regs`` is 0."""
    if regs <= 0:
        return MAX_THREADS_PER_SM // 32
    per_warp = -(-regs * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    return (REGS_PER_SM // REG_SUB_PARTITIONS // per_warp) * REG_SUB_PARTITIONS


def occupancy(threads: int, smem: int, max_dynamic_smem: int, regs: int = 0, static_smem: int = 0,
              max_threads: int = MAX_THREADS_PER_BLOCK) -> int:
    """Blocks per SM by CUDA's occupancy rules on sm_90, from the block size,
    dynamic shared memory, and the function's registers per thread and static
    shared memory (from its sm_90 cubin). 0 when the block cannot launch: more
    dynamic shared memory than the function's opt-in allows, or more threads
    than the function takes (its __launch_bounds__ or its registers)."""
    if smem > max_dynamic_smem or threads > max_threads or threads < 1:
        return 0
    warps = -(-threads // 32)
    per_block = -(-(smem + static_smem + SMEM_RESERVED_PER_BLOCK) // 128) * 128
    return min(MAX_BLOCKS_PER_SM, (MAX_THREADS_PER_SM // 32) // warps, SMEM_PER_SM // per_block,
               register_warps(regs) // warps)
