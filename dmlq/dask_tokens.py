"""Names for device arrays in the graphs dmlq.dask builds, without copying them to the host.

dask names a task by hashing its inputs (``dask.base.tokenize``), and it has no rule for a
CuPy array: it pickles it, and CuPy pickles an array by copying it to the host (its
``__reduce__`` is ``array, (self.get(),)``), two or three times over (dask checks that the
pickle is deterministic). A CuPy scale, zero point, bias or b beside dask arrays would be
downloaded, synchronously, each time a graph names it.

While dmlq.dask builds a graph (:func:`naming`), a device array's token is a random one, the
same for the same array object throughout that build (so a weight used twice is one key);
an empty one, or a meta (:func:`named_meta`), is named by its type, shape and dtype, so a
graph of dask operands and numbers keeps the same names from call to call. Outside it the type's previous rule runs (dask's own, or one the user registered): dmlq
changes no name the user's own code gets. A random token costs nothing but the keys' reuse
across graphs, which dask does not need for correctness.
"""
from __future__ import annotations

import contextlib
import contextvars
import uuid

from dask.base import normalize_token

from .packing import Packed, TransposedPacked

_BUILDING: contextvars.ContextVar = contextvars.ContextVar("dmlq_dask_tokens", default=None)
_RULES: set = set()  # the rules registered here (one per device array type)


def _is_device_array(v) -> bool:
    """A CuPy array (or any array in device memory: a CPU torch tensor refuses the interface)."""
    return not hasattr(v, "__dask_graph__") and hasattr(v, "__cuda_array_interface__")


def _register(cls) -> None:
    previous = normalize_token.dispatch(cls)
    if previous in _RULES:  # ours, still registered
        return

    def token(v):
        tokens = _BUILDING.get()
        if tokens is None:
            return previous(v)
        held = tokens.get(id(v))
        if held is None:  # the array kept with its token: its id is not reused during the build
            name = _shape_only(v) if v.size == 0 else "dmlq-device-array-" + uuid.uuid4().hex
            held = tokens[id(v)] = (v, name)
        return held[1]

    _RULES.add(token)
    normalize_token.register(cls, token)


def _shape_only(v) -> tuple:
    """The token of an array whose values nothing reads (empty, or a meta): its type, shape and dtype."""
    return ("dmlq-device-array-meta", type(v).__module__, type(v).__qualname__, tuple(v.shape), v.dtype.str)


def named_meta(v):
    """``v``, a meta array (a dask array's ``_meta``: its values never read), named by its type,
    shape and dtype alone while a graph is built (a 0-d meta holds one element)."""
    tokens = _BUILDING.get()
    if tokens is not None and _is_device_array(v):
        tokens[id(v)] = (v, _shape_only(v))
    return v


def _device_types(values, seen) -> set:
    types = set()
    for v in values:
        if id(v) in seen:
            continue
        seen.add(id(v))
        if _is_device_array(v):
            types.add(type(v))
        elif hasattr(v, "__dask_graph__") and _is_device_array(getattr(v, "_meta", None)):
            types.add(type(v._meta))  # its chunks' type: the meta dask hashes into the names
        elif isinstance(v, (tuple, list)):
            types |= _device_types(v, seen)
        elif isinstance(v, dict):
            types |= _device_types(v.values(), seen)
        elif isinstance(v, (Packed, TransposedPacked)):
            types |= _device_types((v.data,), seen)
    return types


@contextlib.contextmanager
def naming(*values):
    """Within: the device arrays among ``values`` (nested in tuples, lists, dicts and
    dmlq.Packed), and any other array of their types, get random tokens, one per object."""
    for cls in _device_types(values, set()):
        _register(cls)
    if _BUILDING.get() is not None:  # a build inside a build (dmlq.dask calling itself): one table
        yield
        return
    reset = _BUILDING.set({})
    try:
        yield
    finally:
        _BUILDING.reset(reset)
