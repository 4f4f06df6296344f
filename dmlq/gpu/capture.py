"""Calls captured in a CUDA graph: memory that outlives the call.

A CUDA graph keeps the addresses its kernels were captured with. What a dmlq
call allocates -- its temporaries (split-K partial sums, row and column sums,
staged or packed copies of operands, the result made for an ``out`` that
overlaps an input, what CuPy allocates for the call) and a result it makes --
goes back to the allocator's pool when nothing holds it any more; after a
capture, CuPy's pool would hand those blocks to later arrays, and every launch
of the graph would write into them. So while the current stream captures, a
call allocates (through CuPy's thread-local allocator,
``cupy.cuda.using_allocator``) from:

- torch's caching allocator, for a call on CUDA tensors (dmlq.torch passes
  its allocator): torch serves a capture from the graph's private pool and
  keeps that pool for the graph's life, as it does for its own operators;
- the allocator in use, unchanged, where it is stream-ordered
  (``cupy.cuda.MemoryAsyncPool``, ``cupy.cuda.malloc_async``): an allocation
  made in a capture is then one of the graph's own memory nodes, and its free
  another (CUDA's rule);
- otherwise (CuPy's default pool or any other allocator) the allocator in use,
  each block then held (never handed back) until :func:`release_graph_memory`.

The scratch buffer one stream's calls share (dmlq.gpu.device.workspace) is not
used in a capture (a graph may be launched on any stream, at any time): each
call takes a buffer of its own, held until the call returns (:func:`kept`).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any, Callable, Optional, TypeVar, cast

import numpy as np

from .interop import cuda_array

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    keep: Optional[list] = None  # the capturing call's list of buffers held until it returns; None outside


_tls = _State()
_lock = threading.Lock()
_held: list = []          # blocks of calls captured on a pooling allocator (release_graph_memory)
_shared: dict = {}        # id -> a shared device constant a captured call read (hold)
_no_device: list = []     # the cupy modules whose capture query failed for want of a GPU (no capture can happen)


def kept():
    """The list that holds buffers until the capturing call returns, or None outside a capture."""
    return _tls.keep


def capturing(cupy) -> bool:
    """Whether CuPy's current stream is capturing a graph (False where CUDA cannot be queried:
    no GPU, so no capture)."""
    if any(m is cupy for m in _no_device):
        return False
    try:
        return bool(cupy.cuda.get_current_stream().is_capturing())
    except Exception as e:  # no driver or device; or the legacy stream beside a capture (the launch says so)
        if "NoDevice" in str(e) or "InsufficientDriver" in str(e) or "NoDriver" in str(e):
            _no_device.append(cupy)
        return False


def _stream_ordered(cupy, allocator) -> bool:
    owner = getattr(allocator, "__self__", None)
    pool = getattr(cupy.cuda, "MemoryAsyncPool", None)
    return (pool is not None and isinstance(owner, pool)) or (
        allocator is not None and allocator is getattr(cupy.cuda, "malloc_async", None))


@contextlib.contextmanager
def allocations(cupy, allocator=None):
    """The block of a call made while the current stream captures (see the module text):
    ``allocator``, CuPy's ``size -> MemoryPointer``, where the caller has one (torch's);
    otherwise the one in use, held until :func:`release_graph_memory` unless it is
    stream-ordered. Inside a call already so guarded, nothing changes."""
    if kept() is not None:
        yield
        return
    if allocator is None:
        base = cupy.cuda.get_allocator()
        if not _stream_ordered(cupy, base):
            def allocator(size, _base=base):
                mem = _base(size)
                with _lock:
                    _held.append(mem)
                return mem
    _tls.keep = []
    try:
        if allocator is None:
            yield
        else:
            with cupy.cuda.using_allocator(allocator):
                yield
    finally:
        _tls.keep = None


def hold(constant) -> None:
    """Hold ``constant`` (a device copy that calls of one signature share, made outside any
    capture) until :func:`release_graph_memory` where a capture reads it now: forgetting the
    signature (the plan cache is cleared when full) would otherwise free memory a graph reads."""
    if kept() is not None:
        with _lock:
            _shared[id(constant)] = constant


def _device_array(values) -> bool:
    """Whether any of ``values`` (a call's arguments) is a CUDA array (dmlq.gpu.interop: CuPy,
    Numba, a DLPack CUDA tensor ...) or a dmlq.Packed of one. A torch tensor is not asked:
    dmlq.torch runs a CUDA tensor's call in a scope of its own (dmlq.torch_stream), on torch's
    stream, which is what a capture there captures."""
    torch = sys.modules.get("torch")
    for v in values:
        if type(v) is np.ndarray or v is None or (torch is not None and isinstance(v, torch.Tensor)):
            continue
        if isinstance(v, tuple) and getattr(type(v), "_fields", None) == ("data", "shape", "dtype"):
            v = v[0]  # a dmlq.Packed: its bytes
        if cuda_array(v):
            return True
    return False


def _traced() -> bool:
    """Whether Dynamo (torch.compile, torch.export) is tracing the call: no kernel runs then
    (dmlq.torch's ops stand in the graph), and Dynamo cannot trace the attribute lookups
    :func:`_device_array` makes on a keyword such as ``dtype=np.dtype(np.int8)`` (with
    ``fullgraph=True`` that failed, wherever CuPy had been imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def guarded(function: F) -> F:
    """``function`` (a public function) with its allocations made as :func:`allocations` says
    while CuPy's current stream captures a graph. A call without a CUDA array among its
    arguments goes straight through, without asking CUDA anything (a NumPy call must not make
    a CUDA context), as does a call that torch.compile traces.

    Once dmlq.torch has installed the function's traced form (:func:`install_traced_form`), a
    frame of this wrapper that Dynamo compiles on its own (a frame that called it ran eagerly:
    a graph break, a frame that failed to compile, ``torch.compiler.disable(...,
    recursive=False)``) is that traced form alone, and a call run eagerly runs with Dynamo
    off (``torch.compiler.disable``: under a microsecond, 0.3-0.8 us measured), so that
    Dynamo compiles none of dmlq's host frames below it: tracing their ``sys.modules.get``
    made it build and guard the whole module table, which an import on another thread could
    change under it ("dictionary changed size during iteration", an InternalTorchDynamoError)."""
    form: list = [None]  # (traced form, is_dynamo_compiling, a runner with Dynamo off): dmlq.torch's

    def run(args, kwargs):
        cupy = sys.modules.get("cupy")
        if (cupy is None or (args and type(args[0]) is np.ndarray) or _tls.keep is not None or _traced()
                or not (_device_array(args) or _device_array(kwargs.values())) or not capturing(cupy)):
            return function(*args, **kwargs)
        with allocations(cupy):
            return function(*args, **kwargs)

    @functools.wraps(function)
    def call(*args, **kwargs):
        torch_form = form[0]
        if torch_form is None:
            return run(args, kwargs)
        if torch_form[1]():
            return torch_form[0](*args, **kwargs)
        return torch_form[2](run, args, kwargs)
    call._dmlq_traced_form = form  # type: ignore[attr-defined]
    return cast(F, call)


def install_traced_form(public, traced, dynamo_compiling, runner) -> None:
    """Make ``traced`` (dmlq.torch's traced form of the public function ``public``, a wrapper
    from :func:`guarded`) what a frame of ``public`` that Dynamo compiles on its own runs while
    ``dynamo_compiling()`` (torch.compiler.is_dynamo_compiling) is true, and
    ``runner(run, args, kwargs)`` (``run(args, kwargs)`` with Dynamo off) what an eager call
    runs."""
    public._dmlq_traced_form[0] = (traced, dynamo_compiling, runner)


def release_graph_memory() -> int:
    """Stop holding the memory kept for calls captured in CUDA graphs.

    While a CuPy stream captures a graph, a dmlq call's temporaries and results come from the
    allocator in use and are held, so that no later array is given memory that a launch of the
    graph writes (a stream-ordered allocator, ``cupy.cuda.MemoryAsyncPool``, needs no such hold:
    its allocations become the graph's own; calls on torch tensors take torch's graph pool).
    The device constants a captured call read (scales given as numbers, offset tables) are
    held on every path. Call this only once no graph captured with dmlq calls will be launched
    again; what nothing else references then goes back to CuPy's pool.

    Returns
    -------
    int
        The bytes dmlq held (results and constants still referenced elsewhere, such as a
        result you keep, stay allocated); 0 where nothing was captured since the last release.

    Raises
    ------
    RuntimeError
        CuPy's current stream is capturing a graph (the graph being captured would lose what
        it holds).

    Example
    -------
    >>> import dmlq
    >>> held = dmlq.release_graph_memory()  # what calls captured so far held
    >>> dmlq.release_graph_memory()  # nothing captured since
    0
    """
    cupy = sys.modules.get("cupy")
    if cupy is not None and capturing(cupy):
        raise RuntimeError("release_graph_memory: CuPy's current stream is capturing a graph, which would lose "
                           "the memory its calls hold; call it after end_capture, once no graph captured with "
                           "dmlq calls will be launched again")
    with _lock:
        blocks, _held[:] = list(_held), []
        shared = list(_shared.values())
        _shared.clear()
    return sum(int(m.mem.size) for m in blocks) + sum(int(a.nbytes) for a in shared)
