"""``cupy.ndarray`` and the array functions of the stand-in, on host memory.

An array is a NumPy view of one block of the stand-in's pool (``_cuda.PooledMemory``) plus
that allocation: ``.data.ptr`` is the element address, ``.data.device_id`` and
``.device`` the allocation's device. Like CuPy, an array never turns into a
NumPy array implicitly (``numpy.asarray(a)`` raises ``TypeError``; ``.get()``
and ``cupy.asnumpy`` copy), and CuPy functions refuse NumPy arrays where CuPy
refuses them. Work that writes device memory goes through the current stream
(recorded while it captures a graph); copies to the host are synchronous and
refused during a capture.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import _cuda


# host-to-device copies, device-to-host copies, host waits and the memory pool's allocations (tests count them)
counts = {"uploads": 0, "downloads": 0, "syncs": 0, "allocations": 0}


def _shape(shape) -> tuple:
    if isinstance(shape, (numbers.Integral, np.integer)):
        return (int(shape),)
    return tuple(int(n) for n in shape)


def _supported(dtype) -> np.dtype:
    """``dtype``, or CuPy 14.2's refusal of a dtype it cannot hold (strings, datetimes, objects,
    and ml_dtypes' narrow types: every one but bfloat16, which CuPy 14 takes)."""
    dtype = np.dtype(dtype)
    narrow = dtype.type.__module__.startswith("ml_dtypes") and dtype.name != "bfloat16"
    if dtype.kind in "USMmO" or narrow:
        raise ValueError(f"Unsupported dtype {dtype}")
    return dtype


def _dense_view(mem: _cuda.Memory, shape, dtype, like_strides=None, order="C"):
    """A NumPy array over ``mem``: C order, F order, or ``like_strides``' dense layout."""
    dtype = _supported(dtype)
    if like_strides is not None:
        return np.ndarray(shape, dtype, buffer=mem.buf, strides=like_strides) if mem.size else \
            np.empty(shape, dtype)
    if mem.size == 0:
        return np.empty(shape, dtype, order=order)
    return np.ndarray(shape, dtype, buffer=mem.buf, order=order)


def _wrap(h: np.ndarray, mem: _cuda.Memory) -> "ndarray":
    a = ndarray.__new__(ndarray)
    a._hh, a._mem = h, mem
    a._off = (h.__array_interface__["data"][0] - mem.ptr) if mem.ptr else 0
    return a


def _new(shape, dtype, order="C") -> "ndarray":
    shape, dtype = _shape(shape), np.dtype(dtype)
    mem = _cuda.alloc(math.prod(shape) * dtype.itemsize).mem
    return _wrap(_dense_view(mem, shape, dtype, order=order), mem)


def _from_host(values, dtype=None, order="K", blocking=False) -> "ndarray":
    """A device copy of host values (NumPy arrays, scalars, lists): cudaMemcpyAsync
    on the current stream (CuPy 14's default, ``blocking=False``), so work on
    another stream sees it only after waiting for this one; the host values are
    taken now (staged)."""
    _cuda._refuse_while_capturing("cudaMemcpy (host to device)")
    counts["uploads"] += 1
    h = np.array(values, dtype=dtype, copy=True)
    layout = np.empty_like(h, order=order)
    mem = _cuda.alloc(h.nbytes).mem
    out = _dense_view(mem, h.shape, h.dtype, like_strides=layout.strides)
    if h.ndim == 0:  # CuPy 14 (_array_default): a 0-d array is made with ndarray.fill, not copied
        _fill(out, h)
    else:
        _cuda._submit(lambda: out.__setitem__(Ellipsis, h))
    if blocking:
        _cuda.settle()
    return _wrap(out, mem)


def _fill(h: np.ndarray, value) -> None:
    """CuPy 14's ndarray.fill: a NumPy value becomes its Python scalar (``item()``); a
    value equal to 0 is written with a memset of zero bytes (so -0.0 becomes +0.0),
    any other through its fill kernel, converted to the array's dtype."""
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        value = value.item()
    if value == 0:
        _cuda._submit(lambda: h.reshape(-1).view(np.uint8).__setitem__(Ellipsis, 0) if h.size else None)
    else:
        _cuda._submit(lambda: h.__setitem__(Ellipsis, value))


def _result(h: np.ndarray) -> "ndarray":
    """A new device array holding the values of ``h`` (the output of a device computation)."""
    h = np.asarray(h)
    _supported(h.dtype)
    mem = _cuda.alloc(h.nbytes).mem
    out = _dense_view(mem, h.shape, h.dtype)
    out[...] = h
    return _wrap(out, mem)


def _computed(compute) -> "ndarray":
    """The result of a device computation, ``compute()`` (NumPy over the operands' host views):
    run now; while the current stream captures a graph, also recorded, so that each launch of
    the graph computes it again from what the memory then holds (CuPy records the kernel, which
    runs only then: a result computed once at capture time would hold stale values)."""
    if _cuda.get_current_stream()._capture is None:
        return _result(compute())
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):  # (the memory's values before any launch)
        warnings.simplefilter("ignore")
        out = _result(compute())
    dst = out._hh
    _cuda._submit(lambda: dst.__setitem__(Ellipsis, compute()))
    return out


def _written(out, compute):
    """``out[...] = compute()`` on the current stream (a ufunc's ``out=``)."""
    dst = _typed(out, "out")
    _cuda._submit(lambda: dst.__setitem__(Ellipsis, compute()))
    return out


def _host_of(x, fname: str, argname: str = "x"):
    """The NumPy view behind a device operand; Python and NumPy scalars pass; a
    NumPy array is refused, as CuPy's ufuncs refuse it."""
    if isinstance(x, ndarray):
        return x._h
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, (list, tuple)):
        raise TypeError(f"Unsupported type {type(x)}")
    return x


def _type_name(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _typed(x, argname: str):
    """Cython's typed-argument check CuPy functions such as may_share_memory make."""
    if not isinstance(x, ndarray):
        raise TypeError(f"Argument '{argname}' has incorrect type (expected cupy._core.core._ndarray_base, "
                        f"got {_type_name(x)})")
    return x._h


class _Flags:
    def __init__(self, h):
        self.c_contiguous = h.flags.c_contiguous
        self.f_contiguous = h.flags.f_contiguous
        self.owndata = False

    def __getitem__(self, name):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[name]


class ndarray:
    """cupy.ndarray on stand-in device memory."""

    __slots__ = ("_hh", "_mem", "_off", "__weakref__")

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        shape, dtype = _shape(shape), _supported(dtype)
        if memptr is None:
            mem = _cuda.alloc(math.prod(shape) * dtype.itemsize).mem
            h = _dense_view(mem, shape, dtype, order=order) if strides is None else \
                np.ndarray(shape, dtype, buffer=mem.buf, strides=strides)
        else:
            mem = memptr.mem
            if mem.size == 0 or math.prod(shape) == 0:
                h = np.empty(shape, dtype) if strides is None else \
                    np.ndarray(shape, dtype, buffer=np.empty(0, np.uint8), strides=strides)
            else:
                h = np.ndarray(shape, dtype, buffer=mem.buf, offset=memptr.ptr - mem.ptr,
                               strides=strides, order=order)
        self._hh, self._mem = h, mem
        self._off = (h.__array_interface__["data"][0] - mem.ptr) if mem.ptr else 0

    @property
    def _h(self):
        """The host memory behind the array, once the current stream's earlier
        work has run (work on other streams has not, unless waited for): what an
        operation on the current stream sees now."""
        _cuda.settle()
        return self._hh

    # -- attributes
    shape = property(lambda self: self._hh.shape)
    dtype = property(lambda self: self._hh.dtype)
    strides = property(lambda self: self._hh.strides)
    ndim = property(lambda self: self._hh.ndim)
    size = property(lambda self: self._hh.size)
    itemsize = property(lambda self: self._hh.itemsize)
    nbytes = property(lambda self: self._hh.nbytes)
    flags = property(lambda self: _Flags(self._h))

    @property
    def data(self):
        return _cuda.MemoryPointer(self._mem, self._off)

    @property
    def device(self):
        return _cuda.Device(self._mem.device_id)

    @property
    def base(self):
        return None

    @property
    def T(self):
        return _wrap(self._h.T, self._mem)

    @property
    def __cuda_array_interface__(self):
        stream = _cuda.get_current_stream()
        h = self._h
        return {"shape": h.shape, "typestr": h.dtype.str, "descr": h.dtype.descr,
                "data": (self.data.ptr, False), "version": 3,
                "strides": None if h.flags.c_contiguous else h.strides,
                "stream": stream.ptr or 1}

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
                        "construct a NumPy array explicitly.")

    __array_ufunc__ = None   # NumPy's operators on a stand-in array return NotImplemented
    __array_priority__ = 100

    def __array_function__(self, func, types, args, kwargs):
        """NumPy's functions on stand-in arrays go to the stand-in's function of the same module
        path and name, as CuPy's ndarray.__array_function__ does (np.broadcast_to in a dask
        task runs cupy.broadcast_to); a function the stand-in lacks is NotImplemented (NumPy then
        raises TypeError, as for a function CuPy lacks)."""
        import sys

        module = sys.modules.get("cupy")
        if not getattr(module, "__stand_in__", False):
            return NotImplemented
        try:
            for part in func.__module__.split(".")[1:]:
                module = getattr(module, part)
            impl = getattr(module, func.__name__)
        except AttributeError:
            return NotImplemented
        return impl(*args, **kwargs)

    def __repr__(self):
        return f"stand-in {self._h!r}"

    def __len__(self):
        return len(self._h)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __reduce__(self):
        # CuPy 14's ndarray.__reduce__ (cupy/_core/core.pyx): the array rebuilt from a host copy, so
        # pickling one (dask's tokenize of an object it has no rule for) downloads it
        return array, (self.get(order="A"),)

    # -- copies to the host (synchronous)
    def get(self, stream=None, order="C", out=None, blocking=True):
        """A copy on ``stream`` (the current one), after its earlier work; as CuPy 14, an empty
        array without ``out`` is a new NumPy array at once (no copy, no wait)."""
        if out is None and self.size == 0:
            return np.ndarray(self.shape, dtype=self.dtype)
        _cuda._refuse_while_capturing("cudaMemcpy (device to host)")
        counts["downloads"] += 1
        _cuda.settle(stream)
        h = self._hh
        if out is not None:
            out[...] = h
            return out
        return np.array(h, order="K" if (h.flags.c_contiguous or h.flags.f_contiguous) else order)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray (got {type(arr)})")
        _cuda._refuse_while_capturing("cudaMemcpy (host to device)")
        self._h[...] = arr

    def item(self):
        return self.get().item()

    def tolist(self):
        return self.get().tolist()

    def __bool__(self):
        return bool(self.get())

    def __int__(self):
        return int(self.get())

    def __float__(self):
        return float(self.get())

    # -- views
    def view(self, dtype=None):
        return _wrap(self._h.view(self.dtype if dtype is None else _supported(dtype)), self._mem)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)):
            shape = tuple(shape[0])
        r = self._h.reshape(shape, order=order)
        h = self._h
        return _wrap(r, self._mem) if np.shares_memory(r, h) or r.size == 0 else _computed(
            lambda: h.reshape(shape, order=order))

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    def transpose(self, *axes):
        return _wrap(self._h.transpose(*axes), self._mem)

    def swapaxes(self, a, b):
        return _wrap(self._h.swapaxes(a, b), self._mem)

    def squeeze(self, axis=None):
        return _wrap(self._h.squeeze(axis), self._mem)

    def __getitem__(self, key):
        key = _key(key)
        r = self._h[key]
        if isinstance(r, np.ndarray) and r.size and np.may_share_memory(r, self._mem.buf):
            return _wrap(r, self._mem)
        if isinstance(r, np.ndarray) and r.size == 0 and not isinstance(key, ndarray):
            return _wrap(r, self._mem)
        h = self._h
        return _computed(lambda: np.asarray(h[key]))  # a gather (fancy index) or a scalar

    def __setitem__(self, key, value):
        key = _key(key)
        if isinstance(value, ndarray):
            v = value._h
        elif isinstance(value, np.ndarray) and value.ndim:  # CuPy copies it to the device first, now
            _cuda._refuse_while_capturing("cudaMemcpy (host to device)")
            v = value.copy()
        else:
            v = np.asarray(value)
        h = self._h
        _cuda._submit(lambda: h.__setitem__(key, v))

    def fill(self, value):
        if not self._h.flags.c_contiguous:  # CuPy memsets only a C-contiguous array
            h = self._h
            _cuda._submit(lambda: h.fill(value.item() if isinstance(value, np.ndarray) else value))
            return
        _fill(self._h, value)

    # -- copies on the device
    def copy(self, order="C"):
        mem = _cuda.alloc(self._h.nbytes).mem
        out = _dense_view(mem, self.shape, self.dtype, order="F" if order == "F" else "C")
        src = self._h
        _cuda._submit(lambda: out.__setitem__(Ellipsis, src))
        return _wrap(out, mem)

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        dtype = _supported(dtype)
        if not copy and dtype == self.dtype:
            return self
        h = self._h
        return _computed(lambda: h.astype(dtype))

    # -- computations (run at once on the host)
    def _reduce(self, name, *args, **kwargs):
        h = self._h
        return _computed(lambda: getattr(h, name)(*args, **kwargs))

    def all(self, axis=None, out=None, keepdims=False):
        return self._reduce("all", axis=axis, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        return self._reduce("any", axis=axis, keepdims=keepdims)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return self._reduce("sum", axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis=None, out=None, keepdims=False):
        return self._reduce("max", axis=axis, keepdims=keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        return self._reduce("min", axis=axis, keepdims=keepdims)

    def nonzero(self):
        return tuple(_result(i) for i in self._h.nonzero())


def _key(key):
    if isinstance(key, ndarray):
        return key._h
    if isinstance(key, tuple):
        return tuple(k._h if isinstance(k, ndarray) else k for k in key)
    return key


def _binary(np_fn):
    def op(self, other):
        if isinstance(other, np.ndarray):
            raise TypeError(f"Unsupported type {type(other)}")
        o = other._h if isinstance(other, ndarray) else other
        h = self._h
        return _computed(lambda: np_fn(h, o))

    def rop(self, other):
        if isinstance(other, np.ndarray):
            raise TypeError(f"Unsupported type {type(other)}")
        h = self._h
        return _computed(lambda: np_fn(other, h))
    return op, rop


for _name, _fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                   ("floordiv", np.floor_divide), ("mod", np.mod), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                   ("rshift", np.right_shift), ("pow", np.power), ("matmul", np.matmul)):
    _op, _rop = _binary(_fn)
    setattr(ndarray, f"__{_name}__", _op)
    setattr(ndarray, f"__r{_name}__", _rop)
for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    setattr(ndarray, f"__{_name}__", _binary(_fn)[0])
ndarray.__neg__ = lambda self: _unary(self, np.negative)
ndarray.__abs__ = lambda self: _unary(self, np.abs)
ndarray.__invert__ = lambda self: _unary(self, np.invert)
ndarray.__hash__ = None


def _unary(a, np_fn):
    h = a._h
    return _computed(lambda: np_fn(h))


# ------------------------------------------------------------------ module functions

def empty(shape, dtype=float, order="C"):
    return _new(shape, dtype, order)


def zeros(shape, dtype=float, order="C"):
    a = _new(shape, dtype, order)
    _fill(a._hh, 0)  # CuPy's zeros: a memset on the current stream (recorded in a capture)
    return a


def ones(shape, dtype=float, order="C"):
    a = _new(shape, dtype, order)
    a.fill(1)
    return a


def full(shape, fill_value, dtype=None, order="C"):
    if isinstance(fill_value, np.ndarray):
        raise TypeError(f"Unsupported type {type(fill_value)}")
    dtype = np.asarray(fill_value).dtype if dtype is None else dtype
    a = _new(shape, dtype, order)
    a.fill(fill_value)  # CuPy 14's full: empty, then fill (-0.0 written as +0.0)
    return a


def _like(a, dtype, shape):
    _typed(a, "a")
    return _new(a.shape if shape is None else shape, a.dtype if dtype is None else dtype)


def empty_like(a, dtype=None, order="K", subok=None, shape=None):
    return _like(a, dtype, shape)


def zeros_like(a, dtype=None, order="K", subok=None, shape=None):
    r = _like(a, dtype, shape)
    _fill(r._hh, 0)
    return r


def full_like(a, fill_value, dtype=None, order="K", subok=None, shape=None):
    r = _like(a, dtype, shape)
    r.fill(fill_value)
    return r


def arange(start, stop=None, step=1, dtype=None):
    return _result(np.arange(start, stop, step, dtype=dtype) if stop is not None else
                   np.arange(start, dtype=dtype))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    if isinstance(obj, ndarray):
        r = obj.astype(obj.dtype if dtype is None else dtype) if copy or dtype is not None else obj
        return r
    return _from_host(obj, dtype, "C" if order in ("C", None) else order, blocking)


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(cai, dtype)
    return _from_host(a, dtype, "K" if order is None else order, blocking)


def _from_interface(cai, dtype):
    address = cai["data"][0]
    mem = _cuda.find_allocation(address)
    if mem is None:
        raise ValueError(f"cupy stand-in: __cuda_array_interface__ address {address:#x} is no stand-in "
                         "device memory")
    a = ndarray(cai["shape"], np.dtype(cai["typestr"]), _cuda.MemoryPointer(mem, address - mem.ptr),
                cai.get("strides"))
    return a if dtype is None else a.astype(dtype)


def from_dlpack(array_like, *, device=None, copy=None):
    if isinstance(array_like, ndarray):
        return array_like
    cai = getattr(array_like, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(cai, None)
    raise TypeError(f"cupy stand-in: from_dlpack of {type(array_like).__name__}")


def ascontiguousarray(a, dtype=None):
    _typed(a, "a")
    if a._h.flags.c_contiguous and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    h = a._h
    return _computed(lambda: np.ascontiguousarray(h, dtype))


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    h = np.asarray(a, order=order)
    if out is not None:
        out[...] = h
        return out
    return h


def as_strided(x, shape=None, strides=None):
    """cupy.lib.stride_tricks.as_strided: a view of x's memory (CuPy builds the same ndarray on
    x's memory pointer, checking nothing)."""
    h = _typed(x, "x")
    return ndarray(h.shape if shape is None else shape, h.dtype, memptr=x.data,
                   strides=h.strides if strides is None else tuple(strides))


def broadcast_to(array, shape):
    return _wrap(np.broadcast_to(_typed(array, "array"), _shape(shape)), array._mem)


def may_share_memory(a, b, max_work=None):
    return bool(np.may_share_memory(_typed(a, "a"), _typed(b, "b")))


def shares_memory(a, b, max_work=None):
    return bool(np.shares_memory(_typed(a, "a"), _typed(b, "b")))


def _ufunc(np_fn, nin):
    def fn(*args, out=None, dtype=None, **kwargs):
        hs = [_host_of(x, np_fn.__name__) for x in args[:nin]]
        typed = {"dtype": dtype} if dtype is not None else {}

        def compute():
            return np_fn(*hs, *args[nin:], **typed, **kwargs)
        return _computed(compute) if out is None else _written(out, compute)
    fn.__name__ = np_fn.__name__
    return fn


rint = _ufunc(np.rint, 1)
multiply = _ufunc(np.multiply, 2)
add = _ufunc(np.add, 2)
subtract = _ufunc(np.subtract, 2)
minimum = _ufunc(np.minimum, 2)
maximum = _ufunc(np.maximum, 2)
divide = _ufunc(np.divide, 2)
isnan = _ufunc(np.isnan, 1)


def matmul(a, b, out=None, **kwargs):
    ha, hb = _typed(a, "a"), _typed(b, "b")
    return _computed(lambda: np.matmul(ha, hb))


def clip(a, a_min, a_max, out=None):
    h, lo, hi = _typed(a, "a"), _host_of(a_min, "clip"), _host_of(a_max, "clip")
    return _computed(lambda: np.clip(h, lo, hi)) if out is None else _written(out, lambda: np.clip(h, lo, hi))


def where(condition, x, y):
    c, hx, hy = _host_of(condition, "where"), _host_of(x, "where"), _host_of(y, "where")
    return _computed(lambda: np.where(c, hx, hy))


def array_equal(a1, a2, equal_nan=False):
    h1, h2 = _host_of(a1, "array_equal"), _host_of(a2, "array_equal")
    return _computed(lambda: np.array_equal(h1, h2, equal_nan=equal_nan))


def pad(array, pad_width, mode="constant", **kwargs):
    h = _typed(array, "array")
    return _computed(lambda: np.pad(h, pad_width, mode=mode, **kwargs))


def tile(A, reps):
    h = _typed(A, "A")
    return _computed(lambda: np.tile(h, reps))


def concatenate(tup, axis=0, out=None, *, dtype=None, casting="same_kind"):
    hs = [_typed(t, "tup") for t in tup]
    return _computed(lambda: np.concatenate(hs, axis=axis, dtype=dtype))


def stack(tup, axis=0, out=None, *, dtype=None, casting="same_kind"):
    hs = [_typed(t, "tup") for t in tup]
    return _computed(lambda: np.stack(hs, axis=axis, dtype=dtype))


class Generator:
    """cupy.random.Generator: NumPy's generator, its draws made device arrays."""

    def __init__(self, seed=None):
        self._rng = np.random.default_rng(seed)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        return _result(self._rng.integers(low, high, size, dtype=dtype, endpoint=endpoint))

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        return _result(self._rng.standard_normal(size, dtype=dtype))

    def random(self, size=None, dtype=np.float64, out=None):
        return _result(self._rng.random(size, dtype=dtype))

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        return _result(self._rng.uniform(low, high, size).astype(dtype))


class _Random:
    """cupy.random: a seeded host generator (the stand-in's draws are not CuPy's)."""

    def __init__(self):
        self._rng = np.random.default_rng(0)

    def randint(self, low, high=None, size=None, dtype=int):
        return _result(self._rng.integers(low, high, size, dtype=dtype))

    def seed(self, seed=None):
        self._rng = np.random.default_rng(seed)
