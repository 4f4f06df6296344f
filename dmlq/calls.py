"""How a public call runs: its operands normalized, its call signature's key,
the plan cache, and the backend call.

A call first normalizes its operands (lists and tuples as ``np.asarray`` makes
them, CPU DLPack tensors such as torch CPU tensors as NumPy views, CUDA arrays as
CuPy views), then looks up a *plan* keyed by everything the checks depend on:
the backend, each operand's type, dtype, shape and strides, the value of every
scalar (bit for bit, so ``-0.0`` and ``0.0`` differ), and the keyword
parameters (:mod:`dmlq.keys`: the one rule every cache keys by). A new key runs the operator's planner (:mod:`dmlq.checks` holds the
checks it makes) and stores the plan; a known key goes straight to the launch.
What depends on an array's *values* (a zero point of a wider integer dtype that
must fit) is checked on every call.

A public function is a :class:`Spec` (its name, operand names and planner) and
a call of :func:`run`; dmlq.api holds the operators' planners and functions.
"""
from __future__ import annotations

import contextvars
import dataclasses
import numbers

from typing import TYPE_CHECKING, Any, Callable

import ml_dtypes
import numpy as np

from . import dispatch
from .checks import GPU, HOST, Builder, narrowed, underflow_message
from .gpu import capture
from .keys import key, param_key
from .packing import Packed

if TYPE_CHECKING:
    from .gpu.plan import Plan


# ------------------------------------------------------------------ operands

class Spec:
    """One public function: its name, operand names and which operands are float data."""

    def __init__(self, fname, names, float_roles, planner, backend_name, gpu_takes_host_scalars=False):
        self.fname = fname
        self.names = names
        self.float_roles = float_roles
        self.planner = planner
        self.backend_name = backend_name
        # The element-wise kernels take a per-tensor scale or zero point by value:
        # a scalar stays on the host (no copy to the device per call).
        self.gpu_takes_host_scalars = gpu_takes_host_scalars


def list_operand(f, name, v, float_role, dtype=np.float32):
    """A list or tuple of numbers as np.asarray makes it; in a float role (quantize's x, a
    scale) as ``dtype`` (float32; quantize's scale beside a float16 or bfloat16 x: x's type),
    a number beyond its range refused rather than made inf."""
    if dispatch.lazy_inside(v):  # np.asarray would compute them, behind the caller's back
        raise TypeError(f"{f}: {name} is a {type(v).__name__} holding dask arrays, which dmlq does not compute for "
                        f"you; pass one dask array (dask.array.stack({name}) keeps it lazy) or their computed values")
    try:
        arr = np.asarray(v)
    except Exception as e:  # ragged nesting, mixed GPU/host items...
        raise TypeError(f"{f}: {name} is a {type(v).__name__} that np.asarray cannot turn into one "
                        f"numeric array ({type(e).__name__}: {e}); pass a numpy array") from None
    if arr.dtype.kind == "O":  # Python ints beyond int64 (10**400) make an object array
        try:
            arr = np.asarray(v, dtype=np.float64)  # numbers all: their float64 values (checked below)
        except OverflowError:
            raise ValueError(f"{f}: {name} holds an integer beyond the range of float64, and of the float type "
                             "dmlq computes it in; pass values within that range (np.inf where an infinite "
                             "value is meant)") from None
        except (TypeError, ValueError):
            pass
    if float_role and arr.dtype.type.__module__ == "ml_dtypes":
        arr = arr.astype(np.float64)  # ml_dtypes numbers (bfloat16(0.5) ...): their values, exactly, as NumPy's
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{f}: {name} is a {type(v).__name__} that np.asarray turns into dtype "
                        f"{arr.dtype}, not numbers; pass a numeric numpy array")
    if float_role and arr.dtype.kind in "iuf":
        wide = arr
        arr = narrowed(arr.astype(np.float64), dtype)  # Python numbers carry no dtype: they become ``dtype``
        lost = (arr == 0) & (wide != 0)
        if lost.any() and name.endswith("scale"):
            raise ValueError(underflow_message(f, name, f"[... {float(wide[lost].flat[0])!r} ...]", dtype))
        beyond = np.isinf(arr) & np.isfinite(wide)
        if beyond.any():
            raise ValueError(f"{f}: {name} holds {float(wide[beyond].flat[0])!r}, beyond the range of "
                             f"{np.dtype(dtype).name} (largest magnitude {float(ml_dtypes.finfo(dtype).max):.8g}), "
                             "the dtype dmlq computes it in; it would become inf. Pass values within that range "
                             "(np.inf where an infinite value is meant)")
    return arr


def refuse_masked(f, name, v):
    """A TypeError for a masked array (numpy.ma), whose mask dmlq would drop."""
    if isinstance(v, np.ma.MaskedArray):
        if name == "out":
            raise TypeError(f"{f}: out is a masked array (numpy.ma); dmlq writes every element and would leave "
                            "its mask as it was: pass out.data (the array underneath) or a plain numpy array")
        raise TypeError(f"{f}: {name} is a masked array (numpy.ma); dmlq computes every element and would drop "
                        f"the mask: pass {name}.filled(value) to say what the masked elements hold, or "
                        f"{name}.data for the values underneath")


def _slow_operand(spec, name, v):
    """Anything that is not a NumPy array, None or a plain number: (value, side)."""
    f = spec.fname
    if dispatch.foreign(v):
        raise dispatch.Foreign  # a torch tensor or dask array: dmlq.frameworks takes the call
    if dispatch.is_gpu(v):
        return v, GPU  # made a CuPy view once every operand is known to be on the GPU
    if isinstance(v, Packed):  # a NamedTuple: not a list of numbers
        raise TypeError(f"{f}: {name} is a dmlq.Packed, which {f} does not take as {name}; pass "
                        f"dmlq.unpack({name}) (its elements, one a byte)")
    if isinstance(v, (list, tuple)):
        return list_operand(f, name, v, name in spec.float_roles), HOST
    if dispatch.cpu_dlpack(v):
        try:
            return np.from_dlpack(v), HOST
        except Exception as e:
            raise TypeError(f"{f}: {name} is a CPU {type(v).__name__} that NumPy cannot import through "
                            f"DLPack ({type(e).__name__}: {e}); pass {name}.detach().numpy() or a numpy "
                            f"array") from None
    if isinstance(v, (bool, numbers.Number, np.generic)):
        return v, None  # a scalar: typed by the planner
    refuse_masked(f, name, v)
    if hasattr(v, "__array__") or hasattr(v, "__array_interface__"):
        return np.asarray(v), HOST
    raise TypeError(f"{f}: {name} must be an array or a number (got {type(v).__name__}); pass a "
                    "numpy.ndarray, a cupy.ndarray or other CUDA array (torch, Numba), a list, or a "
                    "Python number")


def normalize(spec, values, out):
    """(kind, operands, out, device): every operand as a NumPy/CuPy array or
    scalar, the backend kind and, for the GPU, CuPy's current device. Keys are
    not made here: :func:`run` makes the call's one key from what this returns."""
    kind = current = None
    vals = values
    native, device_of = dispatch.NATIVE_GPU_TYPES, dispatch.device_id_of
    convert = []    # GPU operands to make CuPy views of (foreign, or on another device: refused)
    for i, v in enumerate(values):
        t = type(v)
        if t is np.ndarray:
            if kind != HOST:
                if kind is not None:
                    _mixed(spec, i, HOST)
                kind = HOST
        elif t in native:
            if kind != GPU:
                if kind is not None:
                    _mixed(spec, i, GPU)
                kind, current = GPU, dispatch.current_device()
            if device_of(v) != current:
                convert.append(i)
        elif v is None or t is float or t is int or isinstance(v, np.generic):
            continue  # a scalar: neutral, typed by the planner
        else:
            v, side = _slow_operand(spec, spec.names[i], v)
            if vals is values:
                vals = list(values)
            vals[i] = v
            if side == GPU:
                convert.append(i)
            if side is None or side == kind:
                continue
            if kind is not None:
                _mixed(spec, i, side)
            kind = side
    if kind is None:
        kind = HOST
    elif convert:
        if current is None:  # only foreign GPU arrays so far
            current = dispatch.current_device()
        if vals is values:
            vals = list(values)
        for i in convert:
            vals[i] = dispatch.to_gpu_array(vals[i], spec.fname, spec.names[i], current)
    if out is not None:
        if type(out) is np.ndarray:
            side = HOST
        elif dispatch.foreign(out):
            raise dispatch.Foreign
        elif dispatch.is_gpu(out):
            side = GPU
        else:
            raise TypeError(f"{spec.fname}: out must be a numpy.ndarray (or, for GPU inputs, a CuPy or "
                            f"other CUDA array), like the inputs (got {type(out).__name__}); leave out=None "
                            "to get a new array")
        if side != kind:
            raise TypeError(f"{spec.fname}: out is {'a GPU array' if side == GPU else 'a NumPy array'} but the "
                            f"inputs run on the {'GPU' if kind == GPU else 'host (NumPy)'}; NumPy and GPU "
                            "arrays are mixed")
        if side == GPU and not (type(out) in native and device_of(out) == current):
            out = dispatch.to_gpu_array(out, spec.fname, "out", current)
    return kind, vals, out, current


def _mixed(spec, i, side):
    raise TypeError(f"{spec.fname}: NumPy and GPU arrays are mixed ({spec.names[i]} is "
                    f"{'a GPU array' if side == GPU else 'on the host'}, an earlier operand is not); "
                    "put every operand on one side (cupy.asarray(...) or .get())")


def signature(spec, kind, vals, out, params):
    """The call signature's key, made once per call by :mod:`dmlq.keys`' rules from the
    normalized operands, out and the keyword parameters: equal keys mean equal checks
    and an equal plan. Raises TypeError where a parameter has no key (not cached)."""
    # (a planner may refuse under dmlq.kernel_plan what a NumPy call runs: its own signature)
    return (spec.fname, kind, EXPLAINING.get() is True, param_key(params), None if out is None else key(out),
            *map(key, vals))


# ------------------------------------------------------------------ the plan cache

PLAN_CACHE_SIZE = 4096
_PLANS: dict = {}


def clear_plan_cache() -> None:
    """Forget every cached plan (the next call of each signature re-validates)."""
    _PLANS.clear()


def plan_cache_size() -> int:
    return len(_PLANS)


def run(spec, values, params, out):
    """Call ``spec``'s operator on ``values`` (its operands, in order) with keyword
    parameters ``params`` (passed to the planner after the builder) and ``out``."""
    if out is not None and type(out) is not np.ndarray and isinstance(out, np.ndarray) and not dispatch.is_gpu(out):
        return _into_subclass(spec, values, params, out)
    try:
        kind, vals, out, current = normalize(spec, values, out)
    except dispatch.Foreign:  # torch tensors or dask arrays: dmlq.frameworks takes the call, outside this
        kind = None  # handler (an error it raises would carry the internal Foreign as its context)
    if kind is None:
        return dispatch.to_adapter(spec.fname, spec.names, values, params, out)
    if kind == GPU:
        dispatch.refuse_unaligned(spec.fname, spec.names + ("out",), (*vals, out))
    try:
        sig = signature(spec, kind, vals, out, params)
        plan = _PLANS.get(sig)
    except TypeError:  # a parameter with no key (an array), or an unhashable one: planned afresh
        sig, plan = None, None
    if plan is None:
        plan = spec.planner(Builder(spec, kind, vals, out, values), *params)
        plan.fn = getattr(dispatch.backend(kind), spec.backend_name)
        plan.empty = dispatch.module(kind).empty
        plan.runners = None if kind == HOST else {}
        if 0 not in plan.out_shape:
            plan.fresh = dispatch.fresh_writer(plan.fn, kind, plan.runners)
        if sig is not None:
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                _PLANS.clear()
            _PLANS[sig] = plan
    explaining = EXPLAINING.get()
    if explaining is _META:
        if kind == HOST:  # host values are checked now (dask's graph, built on them, runs later)
            plan.check_values(vals)
        return plan.out_shape, plan.out_dtype
    if out is None:
        args = plan.arguments(vals, current)
        out = plan.empty(plan.out_shape, plan.out_dtype)
        if explaining:
            return dispatch.kernel_plan(spec.backend_name, args, out, kind, plan.params)
        if plan.fresh is not None:  # None for an empty out: nothing to compute
            plan.fresh(args, out, plan.params)
        return out
    args = plan.arguments(vals, current)
    if explaining:  # an out made by dmlq.api (a result in the input's memory order): its plan
        return dispatch.kernel_plan(spec.backend_name, args, out, kind, plan.params)
    if kind == HOST and not out.flags.writeable:
        raise ValueError(f"{spec.fname}: out is read-only; pass a writeable array")
    return dispatch.write(plan.fn, args, out, kind, plan.params, plan.runners)


def result_meta(spec, values, params):
    """(shape, dtype) of what :func:`run` returns for these operands: every check made,
    nothing computed (as :func:`output_meta`, for a planner's own spec)."""
    token = EXPLAINING.set(_META)
    try:
        return run(spec, values, params, None)
    finally:
        EXPLAINING.reset(token)


def _into_subclass(spec, values, params, out):
    """``out`` of an ndarray subclass (np.memmap): written through a plain view of its memory
    and returned itself, as NumPy's ufuncs do. A masked array is refused: its mask would
    be left as it was, describing values that are no longer there."""
    refuse_masked(spec.fname, "out", out)
    run(spec, values, params, out.view(np.ndarray))
    return out


EXPLAINING = contextvars.ContextVar("dmlq_explaining", default=False)
_META = META = "meta"  # EXPLAINING's value inside output_meta
# Inside kernel_plan: launches an operator function runs before the call it plans (a 2-bit b widened
# to 4 bits, dmlq.packed_b), which kernel_plan puts first in the plan it returns.
PRELUDE: contextvars.ContextVar = contextvars.ContextVar("dmlq_prelude", default=None)


def output_meta(function, *args, **kwargs):
    """(shape, dtype) of what ``function(*args, **kwargs)`` returns, with every
    check of a real call made and nothing computed. Arrays only lend their shape
    and dtype (zero-stride stand-ins serve); used by dmlq.torch's fake tensors and
    dmlq.dask's meta."""
    token = EXPLAINING.set(_META)
    try:
        return function(*args, **kwargs)
    finally:
        EXPLAINING.reset(token)

# The public operator functions kernel_plan takes (each module of them registers its own).
FUNCTIONS: list = []


def public(function):
    """A public operator function (one that calls :func:`run`), registered for kernel_plan,
    its allocations kept for as long as a CUDA graph that captures it may run
    (:func:`dmlq.gpu.capture.guarded`)."""
    function = capture.guarded(function)
    FUNCTIONS.append(function)
    return function


def kernel_plan(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Plan:
    """What the GPU runs for ``function(*args, **kwargs)``, without running it.

    Parameters
    ----------
    function : one of dmlq's operator functions
        ``dmlq.quantize_linear`` ... ``dmlq.quantized_avg_pool`` (those registered with
        :func:`public`).
    *args, **kwargs
        Its usual arguments, checked as in a real call; ``out=`` is not taken. With CuPy
        arrays the plan is for CuPy's current device; with NumPy arrays it is for a
        nominal H100 (no GPU needed: selection is pure Python; occupancy then comes from
        threads and shared memory only).

    Returns
    -------
    dmlq.gpu.plan.Plan
        The kernel variant, each launch's kernel, grid, block and dynamic shared memory,
        and notes on copies and temporaries; ``print`` it.

    Raises
    ------
    TypeError
        ``function`` is not an operator function, ``out=`` was given, a dask array was
        given (each chunk has its own plan: pass an array shaped like one), or the
        arguments are wrong as for the real call (which also raises ValueError).
    dmlq.UnsupportedError
        quantize / dequantize of the types beyond int8, or with per-axis or blocked
        parameters, on NumPy arrays: their plan is shown for GPU operands only.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> print(dmlq.kernel_plan(dmlq.quantize_linear, np.empty((1024, 1024), np.float32), 0.02, 128))
    quantize_linear: contig
      quantize_contig<float, uint8>  grid 256  block 256
    """
    if function not in FUNCTIONS:
        raise TypeError(f"kernel_plan: function must be one of {', '.join(f.__name__ for f in FUNCTIONS)} "
                        f"(got {function!r})")
    if kwargs.get("out") is not None:
        raise TypeError("kernel_plan: out= is not taken (the plan is made for a new output array)")
    token, prelude = EXPLAINING.set(True), PRELUDE.set([])
    try:
        plan = function(*args, **kwargs)
        first = tuple(PRELUDE.get())
        return dataclasses.replace(plan, launches=first + plan.launches) if first else plan
    finally:
        PRELUDE.reset(prelude)
        EXPLAINING.reset(token)

