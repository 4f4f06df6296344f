"""The memory layout of a new result: that of the operand it is shaped like.

NumPy's ufuncs (``order='K'``) and torch's element-wise ops (``preserve_format``)
give a result the memory order of an input of the result's shape when that input
is dense (its elements fill one block of memory, in some order of the axes): a
Fortran-order or transposed array gives a result in the same order, a
channels_last NCHW tensor a channels_last result. dmlq does the same for the
element-wise operators (quantize, dequantize, quantized add: the first operand
of the result's shape decides) and for average pooling (the input's axis order,
channels_last in, channels_last out). Anything else (a result given with out=, a
strided view that is not dense, a dmlq.Packed result, whose bytes ONNX keeps in C
order) is C order.

The element-wise operators run on the operands transposed into that order (so the
input is C-contiguous there, and the GPU takes its contiguous kernels) and the
result is transposed back: each element's value is the same function of the same
operand elements, so the result is bit for bit the C-order one.
"""
from __future__ import annotations

import contextvars
import numbers

# True while call_in_order runs its calls: their operands' order is already decided
C_ORDER = contextvars.ContextVar("dmlq_c_order", default=False)


def dense_order(shape, strides, itemsize=1, units_by_stride=False):
    """The axes from outermost to innermost of a dense array of ``shape`` whose
    ``strides`` (bytes, or elements with itemsize=1) are positive and fill one block
    of memory, when that order is not C order; None otherwise. Axes of length 1
    keep their place, or with ``units_by_stride`` (pooling, whose result may make
    them longer) go where their positive stride puts them: before the first longer
    axis of a smaller stride, as a channels_last copy (NumPy's or torch's) lays a
    length-1 H or W out."""
    nd = len(shape)
    if nd < 2 or 0 in shape:
        return None
    moving = [i for i in range(nd) if shape[i] != 1]
    order = sorted(moving, key=lambda i: -strides[i])
    if order == moving:
        return None
    step = itemsize
    for i in reversed(order):
        if strides[i] != step:
            return None
        step *= shape[i]
    it = iter(order)
    placed = [i if shape[i] == 1 else next(it) for i in range(nd)]
    if units_by_stride:
        for u in range(nd):
            if shape[u] == 1 and strides[u] > 0:
                placed.remove(u)
                placed.insert(next((j for j, i in enumerate(placed) if shape[i] != 1 and strides[i] < strides[u]),
                                   len(placed)), u)
    return tuple(placed)


def order_of(a, shape, size=int, units_by_stride=False):
    """:func:`dense_order` of array ``a`` (NumPy, CuPy or torch) when it has ``shape``
    (None: any); None for anything else. ``size``: a torch size's value (torch.compile's
    symbolic sizes: their hints, adding no guard)."""
    if a is None or isinstance(a, (numbers.Number, tuple, list)) or not hasattr(a, "shape"):
        return None
    if shape is not None and tuple(a.shape) != tuple(shape):
        return None
    if type(a).__module__.startswith("torch"):  # a torch tensor: strides in elements
        if a.ndim < 2 or size is int and a.is_contiguous():  # dense_order's None (C order), without the lists
            return None
        return dense_order([size(n) for n in a.shape], [size(n) for n in a.stride()], 1, units_by_stride)
    strides = getattr(a, "strides", None)
    if strides is None or getattr(a, "flags", None) is None or a.flags.c_contiguous:
        return None
    return dense_order(a.shape, strides, a.itemsize, units_by_stride)


# which operand's order a new result of each operator takes (pooling: x's, whatever the shapes)
_LEADS = {"quantize_linear": ("x",), "dequantize_linear": ("q",), "quantized_add": ("a", "b"),
          "quantized_avg_pool": ("x",)}
ELEMENTWISE = ("quantize_linear", "dequantize_linear", "quantized_add")


def leads_in_c_order(fname, names, values) -> bool:
    """Whether every operand whose order a new result of ``fname`` could take is in C order or no
    array (None, a number): the result is then C order whatever its shape (:func:`result_order`'s
    answer without the shapes; eager calls only: a torch size is asked for its value)."""
    for lead in _LEADS.get(fname, ()):
        v = values[names.index(lead)]
        if v is None or isinstance(v, numbers.Number):
            continue
        if type(v).__module__.startswith("torch"):
            if v.ndim < 2 or v.is_contiguous():
                continue
        elif getattr(getattr(v, "flags", None), "c_contiguous", False):
            continue
        return False
    return True


def result_order(fname, names, values, shape, size=int):
    """The axis order of ``fname``'s new result of ``shape`` from operands ``values`` (named
    ``names``): the dense order of the first lead operand of the result's shape (pooling:
    of x); None for C order."""
    if shape is None and fname != "quantized_avg_pool":
        return None
    for lead in _LEADS.get(fname, ()):
        v = values[list(names).index(lead)]
        if fname == "quantized_avg_pool" or tuple(size(n) for n in getattr(v, "shape", ())) == tuple(shape):
            pool = fname == "quantized_avg_pool"  # (its result's length-1 axes may be longer: placed by stride)
            return order_of(v, None, size, pool)  # the first of the result's shape decides (C order too)
    return None


def inverse(order):
    inv = [0] * len(order)
    for j, i in enumerate(order):
        inv[i] = j
    return tuple(inv)


def empty(xp_empty, shape, dtype, order):
    """An empty array of ``shape`` whose memory runs in ``order`` (a C-order
    block transposed)."""
    return xp_empty(tuple(shape[i] for i in order), dtype).transpose(inverse(order))


def _moved(v, nd, order):
    """An operand as the element-wise call on transposed operands takes it: arrays
    broadcast against the result (leading axes of length 1 added) and transposed;
    scalars and None as they are."""
    if v is None or not hasattr(v, "ndim") or v.ndim == 0 or v.ndim > nd:  # (more: a single value of add's)
        return v
    if v.ndim < nd:
        v = v.reshape((1,) * (nd - v.ndim) + tuple(v.shape))
    return v.permute(order) if type(v).__module__.startswith("torch") else v.transpose(order)


def call_in_order(fn, order, values, kwargs):
    """``fn(*values, **kwargs)``, an element-wise operator, run on the operands transposed
    into ``order`` and its result transposed back: the same elements, in that memory
    order. ONNX's per-axis form (``axis=`` with 1-D parameters) keeps its parameters and
    names the moved axis."""
    nd = len(order)
    axis = kwargs.get("axis")
    per_axis = axis is not None and kwargs.get("block_size") is None
    moved = [v if per_axis and getattr(v, "ndim", 0) == 1 else _moved(v, nd, order) for v in values]
    moved_kwargs = kwargs
    if isinstance(axis, numbers.Integral) and not isinstance(axis, bool) and -nd <= axis < nd:
        moved_kwargs = dict(kwargs, axis=order.index(int(axis) % nd))  # (an invalid axis: the call refuses it)
    token = C_ORDER.set(True)  # the calls below keep their operands' order (no order decided again)
    try:
        try:
            result = fn(*moved, **moved_kwargs)
        except (TypeError, ValueError):  # said in the transposed operands' shapes: the C-order call says it
            return fn(*values, **kwargs)  # in the caller's (and raises it; the same bits if it does not)
    finally:
        C_ORDER.reset(token)
    back = inverse(order)
    if not hasattr(result, "ndim") or result.ndim != nd:  # kernel_plan's Plan
        return result
    return result.permute(back) if type(result).__module__.startswith("torch") else result.transpose(back)
