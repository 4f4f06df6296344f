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
  result). float4_e2m1fn is torch's float4_e2m1fn_x2, two values of the last axis a byte
  (ONNX's order): unpacked on CPU, its bytes as they are on CUDA, a result packed (C order;
  an odd last axis refused).
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
import re

import numpy as np

try:
    import torch
except ModuleNotFoundError as _e:  # (import dmlq.torch by hand; dmlq itself never imports it without torch)
    if _e.name != "torch":
        raise
    raise ImportError("dmlq.torch needs torch, which is not installed: pip install torch (dmlq's extra "
                      ".[torch])") from None

from . import adapters, dispatch, layout
from .calls import output_meta
from .gpu import capture
from .packing import Packed, TransposedPacked, remade
from .torch_dtypes import (_TO_NUMPY, _VIEWED, _from_numpy, _is_fake, logical_shape, numpy_dtype, pair_shape, pairs,
                           torch_dtype, unpack_pairs)
from .torch_stream import cuda_scope
from .torch_traced import _polyfill, out_refused

try:  # (asked on every eager call: imported once)
    from torch.autograd import forward_ad as _forward_ad
    from torch.utils._python_dispatch import _get_current_dispatch_mode as _dispatch_mode
except ImportError:  # pragma: no cover - a torch without them: nothing is differentiated or recorded
    _forward_ad = _dispatch_mode = None

# ------------------------------------------------------------------ errors in torch words

def _in_torch_words(e: Exception, names) -> Exception:
    """The same exception type, each fix for an operand in ``names`` (given as a torch
    tensor) said in torch's words (``x.to(torch.float32)``, as dmlq.checks says it for
    tensors it is given itself); other operands keep NumPy's words. The types ``dtype=``
    takes are named as torch's."""
    msg = str(e)
    if ": dtype must be " in msg:
        msg = re.sub(r"\b(?:np|ml_dtypes)\.(u?int8|float16|float32|bfloat16)\b", r"torch.\1", msg)
        msg = re.sub(r"; got dtype\('(\w+)'\)$", r"; got torch.\1", msg)
        msg = msg.replace("(a NumPy or ml_dtypes dtype, or its name)",
                          "(a torch dtype, a NumPy or ml_dtypes dtype, or its name)")
    for name in names:
        msg = re.sub(rf"\b{name}\.astype\((?:np|cupy)\.(\w+)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"np\.asarray\({name}, np\.(\w+)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"\b{name}=np\.(\w+)\(\.\.\.\) \(or \.astype\(np\.\w+\)\)", rf"{name}.to(torch.\1)", msg)
        msg = re.sub(rf"\b{name}=np\.(\w+)\((\d+)\)", rf"{name}=torch.tensor(\2, dtype=torch.\1)", msg)
        msg = re.sub(rf"\bpass {name} as np\.(\w+)\b", rf"pass {name} as {name}.to(torch.\1)", msg)
    if "out" in names:
        msg = re.sub(r"np\.empty\((\([^()]*\)), (?:np|ml_dtypes)\.(\w+)\)", r"torch.empty(\1, dtype=torch.\2)", msg)
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
    """(The call's device (of its first tensor), its tensors), after checking that every
    tensor is on that device and that no other kind of array is mixed in."""
    first = device = None
    tensors, others = [], False
    for name, v in zip(names + ("out",), (*values, out)):
        if isinstance(v, torch.Tensor):
            if v.ndim == 0 and pairs(v.dtype):
                raise ValueError(f"{fname}: {name} is a 0-d torch.float4_e2m1fn_x2 tensor, whose byte holds two "
                                 f"float4 values of no shape; pass {name}.reshape(1) (two values)")
            tensors.append(v)
            if device is None:
                first, device = name, v.device
            elif v.device != device:
                raise ValueError(f"{fname}: {name} is on {v.device} but {first} is on {device}; every tensor of a "
                                 f"call must be on one device: pass {name}.to({first}.device)"
                                 + (" (or a Python number)" if name != "out" and v.ndim == 0 else ""))
        elif not (v is None or type(v) is float or type(v) is int):
            others = True
    if not others:  # tensors and numbers only: nothing mixed in
        return device, tensors
    for name, v in zip(names + ("out",), (*values, out)):
        if isinstance(v, (Packed, TransposedPacked)):  # a packed b or b_zero_point (dmlq.packed_b.take)
            _packed_beside(fname, name, v, first, device)
            continue
        if v is None or isinstance(v, torch.Tensor) or not _is_array(v):
            continue
        host = isinstance(v, (np.ndarray, list, tuple))
        if name == "out" or not host or device.type != "cpu":
            where = "" if device.type == "cpu" else f" on {device}"
            raise TypeError(f"{fname}: {name} is a {type(v).__module__.partition('.')[0]}.{type(v).__name__} but "
                            f"{first} is a torch tensor{where}; pass torch.as_tensor({name}, device={first}.device)"
                            + ("" if name != "out" else " or leave out=None"))
    return device, tensors


def _packed_beside(fname, name, p, first, device):
    """A dmlq.Packed (or its .mT) beside tensors holds its bytes where they are: NumPy bytes beside
    CPU tensors, GPU bytes beside CUDA tensors (where the public function takes it as it is). Bytes
    of another kind (a torch tensor, a dask array) are refused by the public function, named."""
    host, gpu = isinstance(p.data, np.ndarray), dispatch.is_gpu(p.data)
    if device.type == "cuda" and host:
        raise TypeError(f"{fname}: {name} is a dmlq.Packed of NumPy bytes but {first} is a torch tensor on {device}; "
                        f"pass its bytes on that device: {remade(name, p, f'cupy.asarray({name}.data)')} (or "
                        "dmlq.pack of a CUDA tensor)")
    if device.type == "cpu" and gpu and not isinstance(p.data, torch.Tensor):
        raise TypeError(f"{fname}: {name} is a dmlq.Packed of GPU bytes but {first} is a CPU tensor; pass NumPy "
                        f"bytes: {remade(name, p, f'cupy.asnumpy({name}.data)')} (or the tensors .cuda())")


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
        if pairs(t.dtype):  # float4 values two a byte: unpacked, one a byte as ml_dtypes holds them
            return unpack_pairs(t.detach().view(torch.uint8).numpy())
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
def _eager_call(fname, values, kwargs, out, names, direct=False):
    """:func:`call` run now (also the custom ops' real implementation, ``direct``: torch's fake mode
    runs it on small constants while compiling, where going back to the traced form would recurse).
    Never traced by Dynamo (``torch.compiler.disable``): where a compiled call falls back to running
    eagerly (a graph break after the traced form raised), Dynamo would otherwise compile each
    frame below it, NumPy and ml_dtypes views included, and fail inside its own tracing."""
    device, tensors_given = _checked(fname, values, out, names)
    if not direct:
        if any(_differentiated(v) for v in tensors_given):
            raise RuntimeError(f"dmlq.{fname}: dmlq registers no derivative (its outputs are quantized or computed "
                               "from quantized values), forward mode (jvp, jacfwd, make_dual) or reverse (grad, "
                               "jacrev) alike; call it on tensors outside the transform, or keep it out of what you "
                               "differentiate")
        if (torch.is_grad_enabled() and any(v.requires_grad for v in tensors_given)) or device.type == "meta" \
                or any(_is_fake(v) or _is_wrapped(v) for v in tensors_given) or _recorded():
            return _through_the_op(fname, names, values, kwargs, out)
    if out is not None and out.is_inference() and not torch.is_inference_mode_enabled():
        raise RuntimeError(f"{fname}: out is an inference tensor, which torch does not let an in-place write "
                           "change outside torch.inference_mode(); call it inside that mode, or pass a tensor made "
                           "outside it")
    if device.type not in ("cpu", "cuda"):
        raise TypeError(f"{fname}: the tensors are on {device}; dmlq runs CPU and CUDA tensors (pass .cpu() or "
                        ".cuda() tensors)")
    if out is None and fname in layout.ELEMENTWISE and not layout.C_ORDER.get() \
            and not layout.leads_in_c_order(fname, names, values) and not _packs_pairs(values, kwargs):
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
    try:
        if device.type == "cuda":
            result = _cuda_call(fn, names, values, kwargs, out, device)
            if out is not None:
                torch.autograd.graph.increment_version(out)
            return result
        args = {n: _numpy(fname, n, v) if isinstance(v, torch.Tensor) else v for n, v in zip(names, values)}
        target = None if out is None else _numpy(fname, "out", out)  # (float4_e2m1fn_x2: a copy, packed after)
        # NumPy arrays only: the public function itself, without the wrapper that keeps a CUDA graph's
        # allocations and turns Dynamo off (dmlq.gpu.capture.guarded; Dynamo is off here already)
        result = fn.__wrapped__(**args, **kwargs, out=target)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise _in_torch_words(e, [n for n, v in zip(names + ("out",), (*values, out))
                                  if isinstance(v, torch.Tensor)]) from None
    if out is not None:
        if pairs(out.dtype):
            out.view(torch.uint8).copy_(_from_numpy(target).view(torch.uint8))
        torch.autograd.graph.increment_version(out)  # (written through NumPy: autograd sees the write)
        return out
    if not isinstance(result, np.ndarray):  # dmlq.kernel_plan or output_meta
        return result
    try:
        return _from_numpy(result)
    except (TypeError, ValueError) as e:  # a result type torch has no dtype for; float4 on an odd last axis
        raise type(e)(f"{fname}: {e}") from None


def _packs_pairs(values, kwargs) -> bool:
    """Whether a float4_e2m1fn_x2 tensor is an operand or ``dtype=`` names float4_e2m1fn: a
    result in C order then (two values a byte along the last axis: no axis order to give it)."""
    d = kwargs.get("dtype")
    if d is not None:
        try:
            name = d.strip().lower() if isinstance(d, str) else np.dtype(numpy_dtype(d)).name
        except TypeError:  # not a dtype: the call says so
            name = ""
        if name == "float4_e2m1fn":
            return True
    return any(isinstance(v, torch.Tensor) and pairs(v.dtype) for v in values)


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
        shapes = [tuple(getattr(v, "shape", ())) for n, v in zip(names, values) if n in shaped and v is not None]
        sized = [s for s in shapes if s]
        if all(s == sized[0] for s in sized[1:]):  # one shape beside 0-d ones (a tensor and scalars): that
            return sized[0] if sized else ()      # shape (torch.broadcast_shapes' answer, without its Python)
        return tuple(torch.broadcast_shapes(*shapes))
    except (RuntimeError, TypeError):
        return None


def _differentiated(t) -> bool:
    """A tensor that torch.func.grad/jvp/jacfwd/jacrev wraps, or a forward-mode dual tensor: the op
    has no derivative, and torch would give a zero or missing tangent silently."""
    try:
        if torch._C._functorch.is_gradtrackingtensor(t):
            return True
        return _forward_ad._current_level >= 0 and _forward_ad.unpack_dual(t).tangent is not None
    except AttributeError:  # pragma: no cover - a torch without them
        return False


def _recorded() -> bool:
    """A torch.func transform running (grad, vmap ...: a plain tensor captured inside has no storage
    NumPy can read) or a dispatch mode recording the calls (make_fx, FakeTensorMode, a user's
    mode): the call goes through the op, so that it is seen, not computed into a constant."""
    try:
        return torch._C._functorch.peek_interpreter_stack() is not None or _dispatch_mode() is not None
    except (AttributeError, TypeError):  # pragma: no cover - a torch without them
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
        raise out_refused(fname)
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
    with cuda_scope(cupy, index):
        args = {n: _cuda_form(v, cupy) for n, v in zip(names, values)}
        if out is None:
            if fn.__name__ in _QUANT_OPS and _narrow(values, kwargs):  # the logical result: NumPy stand-ins
                meta = output_meta(fn, **{n: torch_gpu.stand_in(v, numpy_dtype(v.dtype))
                                          if isinstance(v, torch.Tensor)
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
    shape = logical_shape(t, _hint)
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
    shape = (lambda n: logical_shape(v[n], lambda s: s) if isinstance(v.get(n), torch.Tensor)
             else tuple(np.shape(v.get(n))))
    if fname in ("quantize_linear", "dequantize_linear"):
        if kwargs.get("axis") is not None or kwargs.get("block_size") is not None:
            return shape(adapters.operand_names(fname)[0])
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
    device, _ = _checked(fname, values, None, names)
    args = []
    for name, v in zip(names, values):
        if isinstance(v, torch.Tensor):
            if v.dtype not in _TO_NUMPY:
                raise TypeError(f"{fname}: {name} has dtype {v.dtype}, which dmlq does not take")
            v = _stand_in(v)
        elif isinstance(v, torch.SymInt):  # a zero point that changes between compiled calls: its example
            # value for the checks (no guard; the real call checks each value it gets), or 0 for one
            # without an example (unbacked: a tensor's .item(), whose fallback hint 8192 is no value)
            v = _hint(v) if v.node.has_hint() else 0
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
    if pairs(dtype):  # float4 values, two a byte along the last axis: C order
        try:
            pair_shape(tuple(size(s) for s in shape))
        except ValueError as e:  # an odd last axis
            raise ValueError(f"{fname}: {e}") from None
        # int(): a symbolic last axis is specialized (a guard on its value), since its half, a floor
        # division left symbolic, made Inductor size a later op's result from the first call's sizes
        return torch.empty(tuple(shape[:-1]) + (int(shape[-1]) // 2,), dtype=dtype, device=device)
    order = layout.result_order(fname, names, values, tuple(size(s) for s in shape), size)
    if order is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_permuted(shape, order, dtype=dtype, device=device)


# ------------------------------------------------------------------ custom ops: one registration point

_ZP = "SymInt"  # a per-tensor zero point in the default overloads (torch.quantize_per_tensor's int, symbolic)
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
        return _eager_call(fname, values, kw, None, names, direct=True)

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


def _not_traced(fname):
    def refuse(*args, **kwargs):
        raise TypeError(f"{fname}: torch.compile does not trace dmlq.{fname} (its result holds NumPy bytes); call it "
                        "outside the compiled function and pass the dmlq.Packed in (or, for a result, return the "
                        "torch.int4 ... tensor and pack it after)")
    return refuse


@torch.compiler.disable
def _without_dynamo(run, args, kwargs):
    """A public function's eager call, Dynamo off for every frame below it (dmlq.gpu.capture.guarded)."""
    return run(args, kwargs)


if hasattr(torch.compiler, "substitute_in_graph"):  # torch >= 2.5
    for _fname in _SCHEMAS:
        torch.compiler.substitute_in_graph(adapters.function(_fname), skip_signature_check=True)(_polyfill(_fname))
        if hasattr(torch.compiler, "is_dynamo_compiling"):  # (not is_compiling: non-strict export runs eagerly)
            capture.install_traced_form(adapters.function(_fname), _polyfill(_fname),
                                        torch.compiler.is_dynamo_compiling, _without_dynamo)
    from . import packing as _packing

    for _fname in ("pack", "unpack"):  # (Dynamo failed inside them: "Unsupported ndarray attribute access")
        torch.compiler.substitute_in_graph(getattr(_packing, _fname), skip_signature_check=True)(_not_traced(_fname))
