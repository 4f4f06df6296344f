"""torch tensors in, torch tensors out; every operator as a torch custom op.

The public functions take torch tensors (dmlq.adapters sends such calls here):

- CPU tensors run the CPU path on NumPy views of the same memory
  (``Tensor.numpy()``); the result comes back as a tensor sharing the NumPy
  array's memory (``torch.from_numpy``), ``out=`` a tensor written in place.
- CUDA tensors run the CUDA kernels on **torch's current stream**: CuPy's
  current device and stream are set to the tensors' device and
  ``torch.cuda.current_stream()`` (``cupy.cuda.ExternalStream``) for the call,
  operands are CuPy views taken through the CUDA array interface (version 2,
  which carries no stream, so nothing synchronizes; DLPack would make CuPy
  hand over its stream and torch wait on it), and the output is allocated by
  torch's caching allocator on that stream (it shows in
  ``torch.cuda.memory_allocated()`` and is stream-safe), shape and dtype taken
  from the call's own checks first (``dmlq.api.output_meta``). No host
  synchronization, so the calls can be captured in a CUDA graph.
- The narrow types: bfloat16, the float8 types, int4/uint4/int2/uint2 and a
  float8_e8m0fnu scale (torch's dtypes of those names, one element per byte as
  ml_dtypes' in NumPy) are read and written through views of their bytes: on CPU as
  ml_dtypes arrays, on CUDA in dmlq.quant_gpu's GPU form (dmlq.torch_gpu: bfloat16 and
  the one-byte types as views of the tensor's memory; the 4-bit and 2-bit types packed
  into a buffer, and a result unpacked into the output tensor); the output tensor's
  type and shape come from the checks on NumPy stand-ins of the operands (the logical
  result). float4_e2m1fn has no such torch dtype and is refused.
- Every tensor of a call must be on one device (a CPU scale for a CUDA x is a
  ``ValueError``). NumPy arrays beside CPU tensors are taken (host memory, as
  before); beside CUDA tensors, and CuPy arrays or a non-tensor ``out=`` beside
  any tensor, they are a ``TypeError``. Fixes for a tensor operand are said in
  torch's words: ``x.to(torch.float32)``, not ``x.astype(np.float32)``.

Importing this module registers each operator as a custom op in the ``dmlq``
namespace (``torch.ops.dmlq.quantize_linear`` ...), as torch's own quantized
ops do it: a default overload whose scales are ``float`` and zero points
``int``, and a ``.tensor`` overload whose scales are tensors and zero points
``Tensor?`` (None = 0); ``ScalarType? dtype`` picks int8/uint8 output where no
zero point fixes it. The fake implementation beside each real one gives the
output's shape and dtype from the same checks (``torch.compile``,
``torch.export`` and ``torch.library.opcheck`` use it). Under dynamic shapes
(``torch.compile(dynamic=True)``, ``torch._dynamo.mark_dynamic``) the checks run on
the sizes' hints, adding no guard, and the output's shape is given in the inputs'
symbolic sizes, so nothing is specialized.
"""
import math
import numbers
import re

import ml_dtypes
import numpy as np

try:
    import torch
except ModuleNotFoundError as _e:  # (import dmlq.torch by hand; dmlq itself never imports it without torch)
    if _e.name != "torch":
        raise
    raise ImportError("dmlq.torch needs torch, which is not installed: pip install torch (dmlq's extra "
                      ".[torch])") from None

from . import adapters, layout
from .calls import output_meta
from .dtypes import torch_name
from .errors import DescError

_TO_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
             torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
             torch.int64: np.int64, torch.bool: np.bool_}
for _name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
    if hasattr(torch, _name):
        _TO_NUMPY[getattr(torch, _name)] = getattr(np, _name)
# The narrow types (docs/semantics.md "Quantized types beyond int8"): torch's dtype of the same
# name holds one element per byte (two for bfloat16), as ml_dtypes' does in NumPy, so a tensor is
# read and written through a view of its bytes (Tensor.numpy() refuses these dtypes). float4_e2m1fn
# has no such torch dtype (torch.float4_e2m1fn_x2 packs two per byte) and stays NumPy-only.
_NARROW = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "int4", "uint4",
           "int2", "uint2", "float8_e8m0fnu")
_VIEWED: dict = {}
for _name in _NARROW:
    if hasattr(torch, _name) and hasattr(ml_dtypes, _name):
        _TO_NUMPY[getattr(torch, _name)] = ml_dtypes.__dict__[_name]
        _VIEWED[getattr(torch, _name)] = (torch.int16, np.int16) if _name == "bfloat16" else (torch.uint8, np.uint8)
_TO_TORCH = {np.dtype(v): k for k, v in _TO_NUMPY.items()}


def numpy_dtype(dtype):
    """A torch dtype as NumPy's (anything else as it is)."""
    return np.dtype(_TO_NUMPY[dtype]) if isinstance(dtype, torch.dtype) and dtype in _TO_NUMPY else dtype


def torch_dtype(dtype) -> torch.dtype:
    """A NumPy dtype, its type or a quantized type's name ("int4") as torch's."""
    if isinstance(dtype, str):
        from .qtypes import QTYPES, qtype

        if dtype.strip().lower() in QTYPES:  # np.dtype("int4") would be int32
            dtype = qtype(dtype).dtype
    dt = np.dtype(dtype)
    if dt not in _TO_TORCH:
        raise TypeError(f"dtype: {dt} has no torch dtype that dmlq can give a tensor (float4_e2m1fn: torch's "
                        "float4_e2m1fn_x2 packs two elements per byte); run it on NumPy arrays (t.numpy()), or "
                        "quantize to another type")
    return _TO_TORCH[dt]


# dtype= given as a NumPy dtype, its type or a name, inside torch.compile: Dynamo cannot trace
# NumPy's dtype comparisons, but the answer is a constant of the call (the graph keeps it).
_torch_dtype_constant = (torch.compiler.assume_constant_result(torch_dtype)
                         if hasattr(torch.compiler, "assume_constant_result") else torch_dtype)


def _from_numpy(a):
    """A tensor sharing the NumPy array's memory (the narrow types through a view of its bytes)."""
    t = torch_dtype(a.dtype)
    if a.size == 0:  # (no memory to share: torch's contiguous strides, as the fake implementation gives)
        return torch.empty(a.shape, dtype=t)
    if t in _VIEWED:
        return torch.from_numpy(a.view(_VIEWED[t][1])).view(t)
    return torch.from_numpy(a)


# ------------------------------------------------------------------ errors in torch words

def _in_torch_words(e: Exception, names) -> Exception:
    """The same exception type, each fix for an operand in ``names`` (given as a torch
    tensor) said in torch's words (``x.to(torch.float32)``, as dmlq.checks says it for
    tensors it is given itself); other operands keep NumPy's words."""
    msg = str(e)
    for name in names:
        msg = re.sub(rf"\b{name}\.astype\((?:np|cupy)\.(\w+)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"np\.asarray\({name}, np\.(\w+)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"\b{name}=np\.(\w+)\(\.\.\.\) \(or \.astype\(np\.\w+\)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"\b{name}=np\.(\w+)\((\d+)\)", rf"{name}=torch.tensor(\2, dtype=torch.\1)", msg)
        msg = re.sub(rf"\bpass {name} as np\.(\w+)\b", rf"pass {name} as {name}.to(torch.\1)", msg)
    if "out" in names:
        msg = re.sub(r"np\.empty\((\([^()]*\)), np\.(\w+)\)", r"torch.empty(\1, dtype=torch.\2)", msg)
    msg = msg.replace("(np.asarray makes int64 from a list of Python ints)",
                      "(torch.tensor makes int64 from Python ints)")
    msg = re.sub(r"\bdtype=np\.(u?int8)\b", r"dtype=torch.\1", msg)
    try:
        return type(e)(msg)
    except Exception:
        return e


# ------------------------------------------------------------------ calls on tensors

def _is_array(v) -> bool:
    return hasattr(v, "shape") and not isinstance(v, np.generic) or isinstance(v, (list, tuple))


def _checked(fname, values, out, names):
    """The call's device (of its first tensor), after checking that every
    tensor is on it and that no other kind of array is mixed in."""
    first = device = None
    for name, v in zip(names + ("out",), tuple(values) + (out,)):
        if isinstance(v, torch.Tensor):
            if device is None:
                first, device = name, v.device
            elif v.device != device:
                raise ValueError(f"{fname}: {name} is on {v.device} but {first} is on {device}; every tensor of a "
                                 f"call must be on one device: pass {name}.to({first}.device)"
                                 + (" (or a Python number)" if name != "out" and v.ndim == 0 else ""))
    for name, v in zip(names + ("out",), tuple(values) + (out,)):
        if v is None or isinstance(v, torch.Tensor) or not _is_array(v):
            continue
        host = isinstance(v, (np.ndarray, list, tuple))
        if name == "out" or not host or device.type != "cpu":
            where = "" if device.type == "cpu" else f" on {device}"
            raise TypeError(f"{fname}: {name} is a {type(v).__module__.partition('.')[0]}.{type(v).__name__} but "
                            f"{first} is a torch tensor{where}; pass torch.as_tensor({name}, device={first}.device)"
                            + ("" if name != "out" else " or leave out=None"))
    return device


def _numpy(fname, name, t):
    if t.is_nested:
        raise TypeError(f"{fname}: {name} is a nested tensor; dmlq takes strided (dense) tensors: call it on each "
                        f"of {name}.unbind(), or on {name}.to_padded_tensor(0) where padding is harmless")
    if t.layout != torch.strided:  # sparse, mkldnn...: no memory NumPy can view
        raise TypeError(f"{fname}: {name} is a {str(t.layout).removeprefix('torch.')} tensor; dmlq takes strided "
                        f"(dense) tensors: pass {name}.to_dense()")
    if t.is_neg() or t.is_conj():  # a lazy negation or conjugation torch has not applied to the memory
        what, fix = ("conjugation", "resolve_conj") if t.is_conj() else ("negation", "resolve_neg")
        raise TypeError(f"{fname}: {name} is a view whose {what} is not applied to its memory yet; pass "
                        f"{name}.{fix}() (a copy with it applied)")
    if t.is_quantized:  # torch's own quantized tensor: its integers, scale and zero point apart
        raise TypeError(f"{fname}: {name} is a torch quantized tensor ({t.dtype}); pass {name}.int_repr() (its "
                        f"integers), with {name}.q_scale() and {name}.q_zero_point() (or q_per_channel_scales()) as "
                        "the scale and zero point")
    try:
        if t.dtype in _VIEWED:
            return t.detach().view(_VIEWED[t.dtype][0]).numpy().view(_TO_NUMPY[t.dtype])
        return t.detach().numpy()
    except (TypeError, RuntimeError):
        raise TypeError(f"{fname}: {name} has dtype {t.dtype}, which dmlq does not take; pass {name}.float() "
                        f"or {name}.to(torch.uint8) (whichever the operand is)") from None


def _kwargs(kwargs):
    for key in ("dtype", "precision"):
        if kwargs.get(key) is not None:
            kwargs = dict(kwargs, **{key: numpy_dtype(kwargs[key])})
    return kwargs


def call(fname, values, kwargs, out=None, names=None):
    """``fname(**dict(zip(names, values)), **kwargs, out=out)`` (a public function) on
    torch tensors; ``names``: the operands' names (default: the signature's order)."""
    names = adapters.operand_names(fname) if names is None else names
    if torch.compiler.is_compiling():  # traced by Dynamo before this module's substitution was registered
        return _polyfill(fname)(**dict(zip(names, values)), **kwargs, out=out)  # (the first call: it imported us)
    return _eager_call(fname, values, kwargs, out, names)


@torch.compiler.disable
def _eager_call(fname, values, kwargs, out, names):
    """:func:`call` run now (also the custom ops' real implementation: torch's fake mode runs it on
    small constants while compiling, where going back to the traced form would recurse). Never
    traced by Dynamo (``torch.compiler.disable``): where a compiled call falls back to running
    eagerly (a graph break after the traced form raised), Dynamo would otherwise compile each
    frame below it, NumPy and ml_dtypes views included, and fail inside its own tracing."""
    device = _checked(fname, values, out, names)
    tensors_given = [v for v in tuple(values) + (out,) if isinstance(v, torch.Tensor)]
    compiling = torch.compiler.is_compiling()  # (Dynamo tracing this after a traced call raised: no transforms)
    if not compiling and any(_differentiated(v) for v in tensors_given):
        raise RuntimeError(f"dmlq.{fname}: dmlq registers no derivative (its outputs are quantized or computed from "
                           "quantized values), forward mode (jvp, jacfwd, make_dual) or reverse (grad, jacrev) "
                           "alike; call it on tensors outside the transform, or keep it out of what you "
                           "differentiate")
    if (torch.is_grad_enabled() and any(v.requires_grad for v in tensors_given)) or device.type == "meta" \
            or any(_is_fake(v) or (not compiling and _is_wrapped(v)) for v in tensors_given):
        return _through_the_op(fname, names, values, kwargs, out)
    if device.type not in ("cpu", "cuda"):
        raise TypeError(f"{fname}: the tensors are on {device}; dmlq runs CPU and CUDA tensors (pass .cpu() or "
                        ".cuda() tensors)")
    if out is None and fname in layout.ELEMENTWISE and not layout.C_ORDER.get():
        order = layout.result_order(fname, names, values, _elementwise_shape(fname, names, values, kwargs))
        if order is not None:  # a new result in the input's memory order (dmlq.layout), as torch's ops give
            return layout.call_in_order(lambda *vs, **kw: _eager_call(fname, vs, kw, None, names), order, values,
                                        kwargs)
    if out is not None and torch._debug_has_internal_overlap(out) == 1:  # an expanded tensor: torch refuses it
        raise ValueError(f"{fname}: out has elements that share memory (an expanded tensor, stride 0), so a "
                         "result element would overwrite another; pass a tensor of its own memory "
                         "(out.contiguous() is a copy: write into a fresh torch.empty and copy back)")
    fn = adapters.function(fname)
    kwargs = _kwargs(kwargs)
    tensors = [n for n, v in zip(names + ("out",), tuple(values) + (out,)) if isinstance(v, torch.Tensor)]
    try:
        if device.type == "cuda":
            return _cuda_call(fn, names, values, kwargs, out, device)
        args = {n: _numpy(fname, n, v) if isinstance(v, torch.Tensor) else v for n, v in zip(names, values)}
        result = fn(**args, **kwargs, out=None if out is None else _numpy(fname, "out", out))
    except (TypeError, ValueError, NotImplementedError) as e:
        raise _in_torch_words(e, tensors) from None
    if out is not None:
        return out
    if not isinstance(result, np.ndarray):  # dmlq.kernel_plan or output_meta
        return result
    try:
        return _from_numpy(result)
    except TypeError as e:  # a result type torch has no dtype for (float4_e2m1fn)
        raise TypeError(f"{fname}: {e}") from None


def _elementwise_shape(fname, names, values, kwargs):
    """The shape of an element-wise operator's result: its operands broadcast (quantize's and
    dequantize's scale and zero point too, but in ONNX's per-axis and blocked forms); None beside
    a list (its shape is known in the call) and where the shapes do not broadcast (the call says
    so)."""
    if any(isinstance(v, (list, tuple)) for v in values):
        return None
    shaped = ("a", "b") if fname == "quantized_add" else ("x", "q") if kwargs.get("axis") is not None or \
        kwargs.get("block_size") is not None else ("x", "q", "scale", "zero_point")
    try:
        return tuple(torch.broadcast_shapes(*(tuple(getattr(v, "shape", ())) for n, v in zip(names, values)
                                              if n in shaped and v is not None)))
    except (RuntimeError, TypeError):
        return None


def _is_fake(t) -> bool:
    """A tensor with no data to read: a FakeTensor (non-strict torch.export, FakeTensorMode)."""
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # pragma: no cover - torch without it
        return False
    return is_fake(t)


def _differentiated(t) -> bool:
    """A tensor that torch.func.grad/jvp/jacfwd/jacrev wraps, or a forward-mode dual tensor: the op
    has no derivative, and torch would give a zero or missing tangent silently."""
    try:
        if torch._C._functorch.is_gradtrackingtensor(t):
            return True
        from torch.autograd import forward_ad

        return forward_ad._current_level >= 0 and forward_ad.unpack_dual(t).tangent is not None
    except AttributeError:  # pragma: no cover - a torch without them
        return False


def _is_wrapped(t) -> bool:
    """A tensor of torch.func's transforms (functionalize, vmap, jvp, grad): its memory is not its
    values (``.numpy()`` of a functional tensor reads a stale buffer), so the op takes it."""
    try:
        return torch._C._functorch.is_functorch_wrapped_tensor(t) or torch._is_functional_tensor(t)
    except AttributeError:  # pragma: no cover - a torch without them
        return False


def _through_the_op(fname, names, values, kwargs, out):
    """A call the NumPy path cannot make goes through the custom op (torch.ops.dmlq), as inside
    torch.compile: with a tensor that requires grad (its result is part of the autograd graph,
    and a backward through it raises: dmlq registers no derivative, where the NumPy path would
    drop the graph silently), and with meta or fake tensors (non-strict torch.export,
    FakeTensorMode: the fake implementation gives the output). ``out=`` is refused there, as
    torch refuses it for its own ops under autograd."""
    if out is not None:
        raise TypeError(f"{fname}: out= is not taken with a tensor that requires grad, with meta or fake "
                        "tensors, or inside torch.func's vmap or functionalize (torch's own ops refuse it under "
                        "autograd): leave out=None, or call with .detach() tensors or under torch.no_grad()")
    args = {n: v for n, v in zip(names, values)}
    return _polyfill(fname)(**args, **kwargs)


def _cuda_form(v, cupy, as_out=False):
    """A CUDA tensor as the CuPy array (or dmlq.Packed) dmlq's GPU path takes (dmlq.torch_gpu);
    with ``as_out``: (that array, the step that finishes the tensor after the call)."""
    from . import torch_gpu

    if not isinstance(v, torch.Tensor):
        return (v, lambda: None) if as_out else v
    if v.dtype not in _VIEWED:
        a = cupy.asarray(v.detach())
        return (a, lambda: None) if as_out else a
    form = torch_gpu.out_form if as_out else torch_gpu.to_form
    return form(v, _VIEWED[v.dtype][0], cupy, cupy.asarray, _TO_NUMPY.get(torch.bfloat16))


_QUANT_OPS = ("quantize_linear", "dequantize_linear")
_PLAIN = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float16,
                                         np.float32, np.float64))


def _narrow(values, kwargs) -> bool:
    """Whether a quantize or dequantize call may involve a narrow type, whose GPU form is
    its bytes (so the result's shape and dtype come from NumPy stand-ins): a tensor of
    one, or a ``dtype=`` that is not one of NumPy's own (a name such as "int4" too).
    Otherwise the CuPy views give the logical result at once, one pass fewer."""
    if any(isinstance(v, torch.Tensor) and v.dtype in _VIEWED for v in values):
        return True
    d = kwargs.get("dtype")
    if d is None:
        return False
    try:
        return isinstance(d, str) or np.dtype(d) not in _PLAIN
    except TypeError:  # not a dtype: the full path gives the error
        return True


def _cuda_call(fn, names, values, kwargs, out, device):
    """The CUDA path: CuPy views on torch's current stream, output from torch's allocator."""
    import cupy

    from . import torch_gpu

    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index)
    with cupy.cuda.Device(index), cupy.cuda.ExternalStream(stream.cuda_stream, index):
        args = {n: _cuda_form(v, cupy) for n, v in zip(names, values)}
        if out is None:
            if fn.__name__ in _QUANT_OPS and _narrow(values, kwargs):  # the logical result: NumPy stand-ins
                meta = output_meta(fn, **{n: torch_gpu.stand_in(v, numpy_dtype(v.dtype)) if isinstance(v, torch.Tensor)
                                          else v for n, v in zip(names, values)}, **kwargs)
                if isinstance(meta, tuple) and len(meta) == 2:
                    output_meta(fn, **args, **kwargs)  # the GPU path's own checks, before allocating
            else:
                meta = output_meta(fn, **args, **kwargs)
            if not isinstance(meta, tuple) or len(meta) != 2:  # dmlq.kernel_plan
                return fn(**args, **kwargs)
            out = _empty(fn.__name__, names, values, meta[0], torch_dtype(meta[1]), torch.device("cuda", index))
        target, finish = _cuda_form(out, cupy, as_out=True)
        fn(**args, **kwargs, out=target)
        finish()
    return out


def _hint(size) -> int:
    """A size's example value: a symbolic size (torch.compile's dynamic shapes) gives its
    hint without adding a guard, so the checks below specialize nothing."""
    if isinstance(size, torch.SymInt):
        try:
            from torch.fx.experimental.symbolic_shapes import optimization_hint
        except ImportError:  # older torch: the value itself (a guard, so a specialization)
            return int(size)
        return int(optimization_hint(size))
    return int(size)


def _stand_in(t):
    """A NumPy array with ``t``'s shape (sizes' hints) and dtype that holds one element (zero strides)."""
    shape = tuple(_hint(s) for s in t.shape)
    # broadcast_to, not as_strided: NumPy cannot read float8_e5m2's array-interface typestr '<f1'
    return np.broadcast_to(np.zeros((), numpy_dtype(t.dtype)), shape)


def _ints(v, nd, default):
    if v is None:
        return (default,) * nd
    return (v,) * nd if isinstance(v, (int, torch.SymInt)) else tuple(v)


def _pool_size(size, window, stride, start, end, dilation, ceil):
    """desc.pool_output_size's size in arithmetic only (no branch, so no guard on a
    symbolic size): floor, plus one in ceil mode where the division is inexact and
    that last window starts inside the input and its start padding."""
    rest = size + start + end - ((window - 1) * dilation + 1)
    floor_size = rest // stride + 1
    if not ceil:
        return floor_size
    inexact = -(-rest // stride) - rest // stride
    starts_inside = torch.sym_min(torch.sym_max(size + start - floor_size * stride, 0), 1)
    return floor_size + inexact * starts_inside


def _symbolic_shape(fname, values, kwargs):
    """The output's shape in the operands' own sizes (symbolic ones stay symbolic)."""
    v = dict(zip(adapters.operand_names(fname), values))
    shape = (lambda n: tuple(v[n].shape) if isinstance(v.get(n), torch.Tensor) else tuple(np.shape(v.get(n))))
    if fname in ("quantize_linear", "dequantize_linear"):
        lead = values[0]
        if kwargs.get("axis") is not None or kwargs.get("block_size") is not None:
            return tuple(lead.shape)
        return tuple(torch.broadcast_shapes(*(shape(n) for n in v)))
    if fname == "quantized_add":
        return tuple(torch.broadcast_shapes(*(shape(n) for n in v)))
    if fname == "quantized_avg_pool":
        x = v["x"]
        nd = x.ndim - 2
        geometry = [_ints(kwargs.get("window_size"), nd, 1), _ints(kwargs.get("strides"), nd, 1),
                    _ints(kwargs.get("start_padding"), nd, 0), _ints(kwargs.get("end_padding"), nd, 0),
                    _ints(kwargs.get("dilations"), nd, 1)]
        return tuple(x.shape[:2]) + tuple(_pool_size(x.shape[2 + i], *(g[i] for g in geometry),
                                                     bool(kwargs.get("ceil_mode"))) for i in range(nd))
    a, b = shape("a"), shape("b")  # the matmul family; a vector a or b as numpy.matmul takes it
    batch = tuple(torch.broadcast_shapes(a[:-2], b[:-2]))
    return batch + (() if len(a) == 1 else (a[-2],)) + (() if len(b) == 1 else (b[-1],))


def fake(fname, values, kwargs):
    """The output of ``fname`` as an empty tensor: the real call's checks, nothing computed."""
    names = adapters.operand_names(fname)
    device = _checked(fname, values, None, names)
    args = []
    for name, v in zip(names, values):
        if isinstance(v, torch.Tensor):
            if v.dtype not in _TO_NUMPY:
                raise TypeError(f"{fname}: {name} has dtype {v.dtype}, which dmlq does not take")
            v = _stand_in(v)
        args.append(v)
    try:
        shape, dtype = output_meta(adapters.function(fname), *args, **_kwargs(kwargs))
    except (TypeError, ValueError, NotImplementedError) as e:
        raise _in_torch_words(e, [n for n, v in zip(names, values) if isinstance(v, torch.Tensor)]) from None
    if any(isinstance(s, torch.SymInt) for v in values if isinstance(v, torch.Tensor) for s in v.shape):
        symbolic = _symbolic_shape(fname, values, kwargs)
        if tuple(_hint(s) for s in symbolic) == tuple(shape):  # the checks' shape, in symbolic sizes
            shape = symbolic
    return _empty(fname, names, values, shape, torch_dtype(dtype), device, _hint)


def _empty(fname, names, values, shape, dtype, device, size=int):
    """A new result tensor in the memory order dmlq.layout gives it (pooling: x's axis order;
    the element-wise operators reach here in C order, their operands transposed by call)."""
    order = layout.result_order(fname, names, values, tuple(size(s) for s in shape), size)
    if order is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_permuted(shape, order, dtype=dtype, device=device)


# ------------------------------------------------------------------ custom ops: one registration point

_ZP = "int"  # a per-tensor zero point in the default overloads (as torch.quantize_per_tensor)
_SCHEMAS = {
    "quantize_linear": "Tensor x, {s} scale, {z} zero_point={zd}, *, ScalarType? dtype=None, int? axis=None, "
                       "int? block_size=None, bool saturate=True, ScalarType? precision=None",
    "dequantize_linear": "Tensor q, {s} scale, {z} zero_point={zd}, *, ScalarType? dtype=None, int? axis=None, "
                         "int? block_size=None",
    "quantized_add": "Tensor a, {s} a_scale, {z} a_zero_point, Tensor b, {s} b_scale, {z} b_zero_point, "
                     "{s} out_scale, {z} out_zero_point={zd}, *, ScalarType? dtype=None",
    "quantized_avg_pool": "Tensor x, {s} x_scale, {z} x_zero_point, {s} out_scale, {z} out_zero_point, "
                          "int[] window_size, *, int[]? strides=None, int[]? start_padding=None, "
                          "int[]? end_padding=None, int[]? dilations=None, bool include_padding=False, "
                          "bool ceil_mode=False, ScalarType? dtype=None",
}
_SCHEMAS["quantized_matmul"] = _SCHEMAS["quantized_add"]
_SCHEMAS["matmul_integer"] = "Tensor a, Tensor b, {z} a_zero_point={zd}, {z} b_zero_point={zd}"
_SCHEMAS["matmul_integer_to_float"] = ("Tensor a, {s} a_scale, {z} a_zero_point, Tensor b, {s} b_scale, "
                                       "{z} b_zero_point, Tensor? bias=None, *, ScalarType? dtype=None, "
                                       "int? block_size=None")

OPS: dict = {}


def _register(fname, overload):
    """``dmlq::<fname>[.tensor]``: the real implementation (:func:`call`) and the
    fake one (:func:`fake`) registered together."""
    template = _SCHEMAS[fname]
    if overload == "tensor":
        schema = template.format(s="Tensor", z="Tensor?", zd="None")
    else:
        schema = template.format(s="float", z=_ZP, zd="0")
    names = adapters.operand_names(fname)
    keywords = adapters.PARAMS[fname]

    def split(args, kwargs):
        values = list(args[:len(names)]) + [kwargs.pop(n) for n in names[len(args):] if n in kwargs]
        values += [None] * (len(names) - len(values))
        if fname == "quantized_avg_pool" and len(args) > len(names):
            kwargs["window_size"] = args[len(names)]
        kw = {k: kwargs[k] for k in keywords if k in kwargs}
        return values, kw

    def real(*args, **kwargs):
        values, kw = split(args, dict(kwargs))
        return _eager_call(fname, values, kw, None, names)

    def fake_impl(*args, **kwargs):
        values, kw = split(args, dict(kwargs))
        return fake(fname, values, kw)

    qualname = f"dmlq::{fname}" + (".tensor" if overload == "tensor" else "")
    op = torch.library.custom_op(qualname, real, mutates_args=(), schema=f"({schema}) -> Tensor")
    op.register_fake(fake_impl)

    def no_derivative(ctx, grad):
        raise RuntimeError(f"dmlq.{fname}: dmlq registers no derivative (its outputs are quantized or computed "
                           "from quantized values); call it with .detach() tensors or under torch.no_grad(), "
                           "or keep it out of the part of the graph you differentiate")

    # A backward that says why it raises (torch's own message named no cause). Eager, the forward
    # runs and the backward raises; under torch.compile AOTAutograd traces the backward with the
    # forward when an input requires grad, so the compile raises it.
    op.register_autograd(no_derivative, setup_context=lambda ctx, *args, **kwargs: None)
    OPS[qualname] = op
    return op


for _fname in _SCHEMAS:
    for _overload in ("default", "tensor"):
        _register(_fname, _overload)


# ------------------------------------------------------------------ the public functions inside torch.compile

# Which operands are data (the rest are scales and zero points), and each zero point's dtype
# source when a Python int must become a tensor: an input's dtype, or the output's ("out").
_DATA = {"quantize_linear": ("x",), "dequantize_linear": ("q",), "quantized_add": ("a", "b"),
         "quantized_matmul": ("a", "b"), "quantized_avg_pool": ("x",), "matmul_integer": ("a", "b"),
         "matmul_integer_to_float": ("a", "b", "bias")}
_ZP_OF = {"zero_point": "out", "a_zero_point": "a", "b_zero_point": "b", "out_zero_point": "out",
          "x_zero_point": "x"}
_ZP_OF_FN = {"dequantize_linear": {"zero_point": "q"}}  # dequantize's zero point has q's type


def _zp_tensor(fname, name, v, zdt, device):
    """A Python int zero point as a 0-d tensor of ``zdt`` (the type the call gives it), its value
    checked as the eager call checks it (a torch.tensor would wrap -3 to 253 as uint8)."""
    from .qtypes import QTYPES

    tname = torch_name(zdt)
    q = QTYPES.get(tname)
    if q is not None and not q.is_float and not q.qmin <= int(v) <= q.qmax:
        raise DescError(f"{fname}: {name} = {int(v)} is out of range for {tname} [{q.qmin}, {q.qmax}]; pass a "
                        "value in that range")
    if q is not None and q.bits < 8:  # torch makes no 4-bit or 2-bit tensor from a number: its byte's view
        wide = torch.int8 if q.qmin < 0 else torch.uint8
        return torch.tensor(int(v), dtype=wide, device=device).view(zdt)
    return torch.tensor(int(v), dtype=zdt, device=device)


def _scale_number(fname, name, v, t):
    """A Python-number scale as the traced call takes it: its value rounded once to ``t``, to
    nearest even (a Python float that ``t`` holds exactly: torch's own double to float16 or
    bfloat16 goes through float32, two roundings), refused where that is inf (as
    dmlq.checks.real_number refuses it on the NumPy path). Python arithmetic only: Dynamo traces
    it on constants."""
    p, emin, emax = _FLOAT_FORMATS[t]
    if not isinstance(v, (numbers.Real, np.generic)):  # a symbolic float (torch.compile's dynamic floats)
        return v
    try:
        value = float(v)
    except OverflowError:  # an int beyond float64
        value = math.inf if v > 0 else -math.inf
    rounded = value
    if value != 0 and math.isfinite(value):
        ulp = 2.0 ** (max(math.frexp(value)[1] - 1, emin) - (p - 1))
        rounded = round(value / ulp) * ulp
        if abs(rounded) > (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax:
            rounded = math.copysign(math.inf, value)
    if rounded == 0 and value != 0:
        tiny = 2.0 ** (emin - (p - 1))
        raise ValueError(f"{fname}: {name} = {v!r} is below the smallest magnitude of {torch_name(t)} ({tiny:.3g}), "
                         "the dtype dmlq computes it in; it would become a zero scale (docs/semantics.md, \"Scales\"). "
                         f"Pass a larger value, or {name}=0.0 if a zero scale is meant")
    if math.isinf(rounded) and not (isinstance(v, float) and math.isinf(v)):
        top = (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax
        raise ValueError(f"{fname}: {name} = {v!r} is beyond the range of {torch_name(t)} (largest magnitude "
                         f"{top:.8g}), the dtype dmlq computes it in; it would become inf. Pass a value within that "
                         f"range, or {name}={'-' if value < 0 else ''}np.inf if an infinite value is meant")
    return rounded


# significand bits, smallest and largest normal exponent
_FLOAT_FORMATS = {torch.float16: (11, -14, 15), torch.bfloat16: (8, -126, 127), torch.float32: (24, -126, 127)}


def _checked_zero_point(fname, name, v, dtype):
    """A zero point given as a number to the traced call, checked as the eager call checks it: an
    integer (a float or bool is a TypeError, a 0.0 taken for the float types' zero point), within
    int64, and an output zero point's NumPy type against ``dtype=`` (int8 against uint8 is a
    contradiction; None for an input's zero point)."""
    if v is None or isinstance(v, torch.Tensor):
        return
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, float, np.generic)) or \
            isinstance(v, (float, np.floating)) and float(v) != 0:
        raise TypeError(f"{fname}: {name} must be an integer (a Python int, an integer NumPy scalar or a tensor; "
                        f"got {type(v).__name__} {v!r})")
    if isinstance(v, numbers.Integral) and not -2**63 <= int(v) < 2**63:
        raise ValueError(f"{fname}: {name} = {int(v)} is out of range (beyond int64)")
    if isinstance(v, np.generic) and dtype is not None and v.dtype.kind in "iu":
        from .qtypes import is_qtype, qtype
        from .quant import refuse_contradiction

        named = torch_name(dtype)
        if is_qtype(v.dtype) and is_qtype(named):
            refuse_contradiction(fname, qtype(named), qtype(v.dtype))


def _finite_double(fname, name, v, t=torch.float32):
    """A scale given as a number (or a list of them): a ValueError where one lies beyond a double
    (10**400), as the eager call refuses it, not float()'s OverflowError; ``t``: the type it takes."""
    def beyond(e):  # an int by its bits (float() of a huge int is an OverflowError torch.compile cannot trace)
        if isinstance(e, numbers.Integral):
            return abs(int(e)).bit_length() > 128  # (past float32 anyway)
        try:
            float(e)
        except OverflowError:
            return True
        return False

    if any(beyond(e) for e in _nested(v)[1]):
        from .checks import short

        if isinstance(v, (list, tuple)):  # (the eager call's words for a list)
            raise ValueError(f"{fname}: {name} holds an integer beyond the range of float64, and of the float type "
                             "dmlq computes it in; pass values within that range (np.inf where an infinite value "
                             "is meant)")
        p, _, emax = _FLOAT_FORMATS[t]
        raise ValueError(f"{fname}: {name} = {short(v)} is beyond the range of {torch_name(t)} (largest magnitude "
                         f"{(2.0 - 2.0 ** (1 - p)) * 2.0 ** emax:.8g}), the dtype dmlq computes it in; it would "
                         "become inf")


_TRACED: dict = {}


def _polyfill(fname):
    """The traced form of ``fname`` (made once; a dict, not functools.lru_cache, whose wrapper
    torch.compile warns about where it traces the call below)."""
    traced = _TRACED.get(fname)
    if traced is None:
        traced = _TRACED[fname] = _traced_form(fname)
    return traced


def _nested(v):
    """(shape, the elements in C order) of a nested list of numbers, in plain Python (a ragged
    list: a ValueError, as NumPy's)."""
    if not isinstance(v, (list, tuple)):
        return (), [v]
    parts = [_nested(e) for e in v]
    if any(p[0] != parts[0][0] for p in parts):
        raise ValueError(f"a list of numbers must be rectangular (got {v!r})")
    return (len(v),) + (parts[0][0] if parts else ()), [e for p in parts for e in p[1]]


def _scale_type(fname, lead):
    """The type a number scale takes (semantics.md "Scales"): a float16/bfloat16 x's for quantize."""
    if fname == "quantize_linear" and isinstance(lead, torch.Tensor) and lead.dtype in (torch.float16, torch.bfloat16):
        return lead.dtype
    return torch.float32


def _traced_form(fname):
    """What torch.compile traces in place of the public function ``fname``: the
    custom op (the default overload when every scale and zero point is a number,
    else ``.tensor`` with the numbers made tensors of the dtypes the call gives them)."""
    names = adapters.operand_names(fname)
    keywords = adapters.PARAMS[fname]
    default, tensor = getattr(torch.ops.dmlq, fname).default, getattr(torch.ops.dmlq, fname).tensor
    data = _DATA[fname]

    def traced(*args, out=None, **kwargs):
        if out is None:
            return functional(*args, **kwargs)
        return _into_out(fname, out, functional, args, kwargs)

    def functional(*args, **kwargs):
        values = dict(zip(names, args))
        values.update({n: kwargs.get(n) for n in names[len(args):]})
        for n, v in values.items():  # NumPy operands (and, inside torch.compile, NumPy scalars) as tensors
            if isinstance(v, np.ndarray):
                if torch.compiler.is_compiling():
                    values[n] = torch.as_tensor(v)
                elif any(_is_fake(t) for t in values.values() if isinstance(t, torch.Tensor)):
                    # (FakeTensorMode: a tensor of its shape and dtype, made fake by the mode)
                    values[n] = torch.empty(v.shape, dtype=torch_dtype(v.dtype))
                else:
                    values[n] = _from_numpy(np.array(v))
        kw = {k: kwargs[k] for k in keywords if k in kwargs}
        if len(args) > len(names):  # quantized_avg_pool's window_size, given by position
            kw["window_size"] = args[len(names)]
        for key in ("dtype", "precision"):
            if kw.get(key) is not None and not isinstance(kw[key], torch.dtype):
                kw[key] = _torch_dtype_constant(kw[key])
        dtype = kw.get("dtype")
        lead = values[data[0]]
        if fname == "quantized_avg_pool":  # one int for every spatial axis, as the eager call takes it
            nd = max(lead.ndim - 2, 1) if isinstance(lead, torch.Tensor) else 1
            for key in ("window_size", "strides", "start_padding", "end_padding", "dilations"):
                v = kw.get(key)
                if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
                    kw[key] = [int(v)] * nd
        params = [n for n in names if n not in data]
        for n in params:  # the checks the eager call makes on numbers (the op's schema would convert them)
            if n in _ZP_OF:  # (dtype= names the output's type: only the output's zero point is compared)
                out_zp = _ZP_OF_FN.get(fname, {}).get(n, _ZP_OF[n]) == "out"
                _checked_zero_point(fname, n, values[n], dtype if out_zp else None)
            elif values[n] is not None and not isinstance(values[n], torch.Tensor):
                _finite_double(fname, n, values[n], _scale_type(fname, lead))
        if not any(isinstance(values[n], (torch.Tensor, list, tuple)) for n in params):  # numbers all
            for n in params:
                v = values[n]
                if n in _ZP_OF:
                    if isinstance(v, np.generic):
                        if _ZP_OF_FN.get(fname, {}).get(n, _ZP_OF[n]) == "out" and dtype is None:
                            kw["dtype"] = dtype = _torch_dtype_constant(v.dtype)
                        v = int(v)
                    values[n] = 0 if v is None else v
                else:  # (its rounding and range checked now, as the eager call's exception: the op
                    _scale_number(fname, n, v, _scale_type(fname, lead))  # would raise it inside torch's own)
                    values[n] = float(v)
            return default(*(values[n] for n in names), **kw)
        for n in params:
            v = values[n]
            if isinstance(v, torch.Tensor) or v is None:
                continue
            if n in _ZP_OF:
                source = _ZP_OF_FN.get(fname, {}).get(n, _ZP_OF[n])
                zdt = (dtype or torch.uint8) if source == "out" else values[source].dtype
                if isinstance(v, np.generic) and source == "out" and dtype is None:
                    zdt = kw["dtype"] = dtype = _torch_dtype_constant(v.dtype)
                values[n] = None if int(v) == 0 else _zp_tensor(fname, n, v, zdt, lead.device)
            else:
                sdt = _scale_type(fname, lead)
                if isinstance(v, (list, tuple)):  # each number (in Python: NumPy's asarray, traced by Dynamo,
                    shape, flat = _nested(v)  # made them symbolic, and the checks were skipped)
                    number = [_scale_number(fname, n, e, sdt) for e in flat]
                    values[n] = torch.tensor(number, dtype=sdt, device=lead.device).reshape(shape)
                else:
                    values[n] = torch.tensor(_scale_number(fname, n, v, sdt), dtype=sdt, device=lead.device)
        return tensor(*(values[n] for n in names), **kw)

    return traced


# The zero point whose type decides the output's type (None: dtype= alone), for the operators where
# out='s dtype decides it otherwise (semantics.md "Zero points"); dequantize's and matmul_integer's do not.
_OUT_DECIDES = {"quantize_linear": "zero_point", "quantized_add": "out_zero_point",
                "quantized_matmul": "out_zero_point", "quantized_avg_pool": "out_zero_point",
                "matmul_integer_to_float": None}


def _out_may_decide(fname, dt) -> bool:
    """Whether out's dtype ``dt`` is one the operator's output can have (else it does not pick the
    type, and the result's own dtype is compared with it: the eager call's "out must have dtype")."""
    if fname == "matmul_integer_to_float":
        return dt in (torch.float32, torch.float16)
    if fname != "quantize_linear":
        return dt in (torch.int8, torch.uint8)
    return dt in _QUANTIZED_TORCH


def _quantized_torch():
    from .qtypes import is_qtype

    return tuple(t for t in _TO_NUMPY if is_qtype(numpy_dtype(t)))  # (a tuple: Dynamo compares torch dtypes)


_QUANTIZED_TORCH = _quantized_torch()  # the torch dtypes of quantize's output types


def _into_out(fname, out, functional, args, kwargs):
    """``out=`` inside torch.compile: the functional op, its result copied into ``out`` (torch.compile
    turns the copy into a write of the graph's input), with the eager call's rules: out's dtype picks
    the output type where no zero point or dtype= does, and a wrong dtype, shape or device is refused
    in the eager call's words."""
    names = adapters.operand_names(fname)
    lead = args[0] if args else kwargs.get(names[0])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{fname}: out is a {type(out).__module__}.{type(out).__name__} but {names[0]} is a torch "
                        f"tensor; pass torch.as_tensor(out, device={names[0]}.device) or leave out=None")
    if isinstance(lead, torch.Tensor) and out.device != lead.device:
        raise ValueError(f"{fname}: out is on {out.device} but {names[0]} is on {lead.device}; every tensor of a "
                         f"call must be on one device: pass out.to({names[0]}.device)")
    if any(st == 0 and n > 1 for st, n in zip(out.stride(), out.shape)):  # an expanded tensor, as eager says
        raise ValueError(f"{fname}: out has elements that share memory (an expanded tensor, stride 0), so a "
                         "result element would overwrite another; pass a tensor of its own memory")
    if fname in _OUT_DECIDES and kwargs.get("dtype") is None and _out_may_decide(fname, out.dtype):
        zp = _OUT_DECIDES[fname]
        i = names.index(zp) if zp else None
        v = None if zp is None else args[i] if len(args) > i else kwargs.get(zp)
        if not isinstance(v, (torch.Tensor, np.generic, np.ndarray)):  # a Python int zero point has no type of
            # its own (a NumPy one, under Dynamo an ndarray, has)
            kwargs = dict(kwargs, dtype=out.dtype)
    result = functional(*args, **kwargs)
    shape = tuple(result.shape)
    if out.dtype != result.dtype:
        raise TypeError(f"{fname}: out must have dtype {str(result.dtype).replace('torch.', '')} (got "
                        f"{str(out.dtype).replace('torch.', '')}); allocate it with torch.empty({shape}, "
                        f"dtype={result.dtype})")
    if tuple(out.shape) != shape:
        raise ValueError(f"{fname}: out must have shape {shape} (got {tuple(out.shape)})")
    if out.dtype in _VIEWED:  # the one-byte types by their bytes (torch has no copy kernel for int4 ...)
        out.view(_VIEWED[out.dtype][0]).copy_(result.view(_VIEWED[out.dtype][0]))
    else:
        out.copy_(result)
    return out


if hasattr(torch.compiler, "substitute_in_graph"):  # torch >= 2.5
    for _fname in _SCHEMAS:
        torch.compiler.substitute_in_graph(adapters.function(_fname), skip_signature_check=True)(_polyfill(_fname))
