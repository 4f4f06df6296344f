"""How the CPU backend splits a call into cache-sized pieces and runs them.

Every operator works on pieces of at most ``CHUNK`` output elements, each with
its own small scratch buffers, so a call never allocates more than the output
(when dmlq makes it) plus a few chunk-sized temporaries per worker thread,
whatever the size of its operands. NumPy's ufuncs release the GIL, so pieces
run on ``THREADS`` threads at once (default: the CPUs this process may use;
``DMLQ_CPU_THREADS`` overrides it, 1 runs everything on the calling thread).
The pieces of one call write disjoint parts of the output, and each element's
arithmetic is the same whichever thread runs it, so the result never depends
on the thread count.
"""
from __future__ import annotations

import math
import os
import threading
import warnings
# imported now, not on first use (concurrent.futures imports its thread module lazily): a fork during
# that import would leave the child holding its lock
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Elements per piece: 128 Ki float32 = 512 KiB of scratch, which stays in a 1 MiB L2;
# smaller pieces spend more of their time in Python between the ufunc calls.
CHUNK = 1 << 17


def _thread_count() -> int:
    env = os.environ.get("DMLQ_CPU_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:  # import dmlq must not fail on it: said, then the machine's count
            warnings.warn(f"DMLQ_CPU_THREADS={env!r} is not an integer; dmlq uses the processors it may run on "
                          "(set it to a thread count such as 1, or unset it)", RuntimeWarning, stacklevel=2)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


THREADS = _thread_count()
_POOL = None
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child():
    # A forked child has none of the parent's threads: a pool inherited from it would
    # take work and never run it. The child makes its own on first use.
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool():
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(THREADS - 1, thread_name_prefix="dmlq-cpu")
    return _POOL


def _ignoring_fp(work, group):
    # NumPy's floating-point error state is per thread. Overflow to inf, 0 / 0 and
    # NaN are defined results here (docs/semantics.md), never warnings.
    with np.errstate(all="ignore"):
        work(group)


class _Shared:
    """The pieces of one call, handed out one at a time to whichever thread asks."""

    def __init__(self, pieces):
        self._it, self._lock = iter(pieces), threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            return next(self._it)


def run_pieces(work, pieces, threaded=True) -> None:
    """Call ``work(group)`` once on each of ``THREADS`` threads (the calling thread
    one of them; only it when not ``threaded``), every group iterating over one
    shared iterator of ``pieces``: a thread takes the next piece when it has done
    one, so a thread the OS delays (a busy machine) holds up the call by one piece,
    not by its whole share. ``work`` allocates its scratch once per group. The
    first exception raised is re-raised here."""
    n = len(pieces)
    groups = min(THREADS if threaded else 1, n)
    if groups <= 1:
        if n:
            _ignoring_fp(work, pieces)
        return
    shared = _Shared(pieces)
    futures = [_pool().submit(_ignoring_fp, work, shared) for _ in range(groups - 1)]
    try:
        _ignoring_fp(work, shared)
    finally:
        for f in futures:
            f.result()


def coalesce(shape, *arrays):
    """``(shape, views)``: the operands (each already of ``shape``) as views of
    the fewest dimensions that keep every operand's element order. Length-1
    axes go; two neighbouring axes merge when every operand steps over the
    outer one exactly as far as over the whole inner one (a contiguous array
    becomes 1-D; a broadcast scalar, stride 0 everywhere, merges with anything)."""
    if 0 in shape:
        return tuple(shape), arrays
    merged = []
    for i, n in enumerate(shape):
        if n == 1:
            continue
        st = [a.strides[i] for a in arrays]
        if merged and all(ps == s * n for ps, s in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    new_shape = tuple(n for n, _ in merged)
    views = tuple(np.lib.stride_tricks.as_strided(a, new_shape, tuple(st[k] for _, st in merged))
                  for k, a in enumerate(arrays))
    return new_shape, views


def blocks(shape, chunk=CHUNK):
    """Index tuples that cover an array of ``shape`` in pieces of at most
    ``chunk`` elements (at least one element along the last axis), in C order."""
    shape = tuple(shape)
    if not shape:
        return [(Ellipsis,)]  # a 0-d view (``a[()]`` would be a scalar)
    if 0 in shape:
        return []
    inner = 1
    axis = len(shape)
    while axis > 0 and inner * shape[axis - 1] <= chunk:
        axis -= 1
        inner *= shape[axis]
    if axis == 0:
        return [(slice(None),) * len(shape)]
    step = max(1, chunk // inner)
    rest = (slice(None),) * (len(shape) - axis)
    out = []
    for prefix in np.ndindex(*shape[:axis - 1]):
        for s in range(0, shape[axis - 1], step):
            out.append(prefix + (slice(s, min(s + step, shape[axis - 1])),) + rest)
    return out


def block_shape(shape, index):
    """The shape of ``array[index]`` for an index tuple from :func:`blocks`."""
    dims = []
    for n, ix in zip(shape, index):
        if isinstance(ix, slice):
            dims.append(len(range(*ix.indices(n))))
    return tuple(dims)


def scratch(dtype, count=CHUNK):
    """A flat scratch buffer for one group of pieces."""
    return np.empty(count, dtype)


def shaped(buffer, shape):
    """The first ``prod(shape)`` elements of a scratch buffer, as ``shape``."""
    return buffer[:math.prod(shape)].reshape(shape)
