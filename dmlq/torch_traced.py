"""The public functions inside torch.compile: what Dynamo traces in place of each one
(``torch.compiler.substitute_in_graph``, registered by dmlq.torch): the custom op, with the
eager call's checks on Python numbers made in plain Python, and ``out=`` as the op's result
copied into it."""
import math
import numbers

import numpy as np
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import adapters
from .dtypes import torch_name
from .errors import DescError
from .packing import Packed, TransposedPacked
from .torch_dtypes import _TO_NUMPY, _VIEWED, _from_numpy, _is_fake, _torch_dtype_constant, numpy_dtype, torch_dtype

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
    checked as the eager call checks it (a torch.tensor would wrap -3 to 253 as uint8). A SymInt
    (non-strict torch.export's ``Dim.DYNAMIC`` int, make_fx) stays symbolic: its range checked by
    ``torch._check`` (an assert of the graph, not a specialization) and the tensor made by
    ``torch.scalar_tensor`` (int() of it would make it a constant). (Dynamo hands a symbolic int
    over as an int: its comparisons are guards there, and torch.tensor of it a scalar_tensor.)"""
    from .qtypes import QTYPES

    tname = torch_name(zdt)
    q = QTYPES.get(tname)
    symbolic = isinstance(v, torch.SymInt)
    if q is not None and not q.is_float:
        def message(value):
            return (f"{fname}: {name} = {value} is out of range for {tname} [{q.qmin}, {q.qmax}]; pass a value "
                    "in that range")
        if symbolic:
            torch._check(v >= q.qmin, lambda: message(v))
            torch._check(v <= q.qmax, lambda: message(v))
        elif not q.qmin <= int(v) <= q.qmax:
            raise DescError(message(int(v)))
    wide = zdt
    if q is not None and q.bits < 8:  # torch makes no 4-bit or 2-bit tensor from a number: its byte's view
        wide = torch.int8 if q.qmin < 0 else torch.uint8
    if symbolic:
        t = torch.scalar_tensor(v, dtype=wide, device=device)
    else:
        t = torch.tensor(int(v), dtype=wide, device=device)
    return t if wide == zdt else t.view(zdt)


def _known_zero(v) -> bool:
    """Whether an int zero point is 0 as a constant (None then stands for it, as for a zero point
    not given): a symbolic int (one that changes between compiled calls, an exported ``Dim.DYNAMIC``
    int) is not, even where its value is 0, so that no guard on its value makes a graph more, and
    no export makes it a constant."""
    if isinstance(v, np.generic):
        return int(v) == 0
    return statically_known_true(v == 0)


def _scale_number(fname, name, v, t):
    """A Python-number scale as the traced call takes it: its value rounded once to ``t``, to
    nearest even (a Python float that ``t`` holds exactly: torch's own double to float16 or
    bfloat16 goes through float32, two roundings), refused by :func:`_scale_range` where that is
    inf or 0 (as dmlq.checks.real_number refuses it on the NumPy path). Python arithmetic only:
    Dynamo traces it on constants."""
    if not isinstance(v, (numbers.Real, np.generic)):  # a symbolic float (torch.compile's dynamic floats)
        return v
    _scale_range(fname, name, v, t)
    value = float(v)
    if value == 0 or not math.isfinite(value):
        return value
    p, emin, _ = _FLOAT_FORMATS[t]
    ulp = 2.0 ** (max(math.frexp(value)[1] - 1, emin) - (p - 1))
    return round(value / ulp) * ulp


# significand bits, smallest and largest normal exponent
_FLOAT_FORMATS = {torch.float16: (11, -14, 15), torch.bfloat16: (8, -126, 127), torch.float32: (24, -126, 127)}


def _checked_zero_point(fname, name, v, dtype):
    """A zero point given as a number to the traced call, checked as the eager call checks it: an
    integer (a float or bool is a TypeError, a 0.0 taken for the float types' zero point), within
    int64, and an output zero point's NumPy type against ``dtype=`` (int8 against uint8 is a
    contradiction; None for an input's zero point)."""
    if v is None or isinstance(v, (torch.Tensor, torch.SymInt)):  # (a symbolic int: the op's SymInt takes it)
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


def _scale_range(fname, name, v, t):
    """A number scale past ``t``'s range or rounding to 0 in it refused, by comparisons only: a
    compiled function's float argument is symbolic once its value changes (with dynamic=True at
    once), and Dynamo traces comparisons on it (a guard) but not math.isfinite or frexp. The
    thresholds are where rounding once to nearest even gives inf (the largest finite value plus
    half its ulp) and 0 (half the smallest subnormal): the eager call's rule exactly."""
    p, emin, emax = _FLOAT_FORMATS[t]
    top = (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax
    tiny = 2.0 ** (emin - (p - 1))
    a = abs(v)
    if a != a or a == math.inf:
        return  # NaN and +-inf are taken
    if a >= top + 2.0 ** (emax - p):
        raise ValueError(f"{fname}: {name} = {v!r} is beyond the range of {torch_name(t)} (largest magnitude "
                         f"{top:.8g}), the dtype dmlq computes it in; it would become inf. Pass a value within that "
                         f"range, or {name}={'-' if v < 0 else ''}np.inf if an infinite value is meant")
    if a != 0 and a <= tiny / 2:
        raise ValueError(f"{fname}: {name} = {v!r} is below the smallest magnitude of {torch_name(t)} ({tiny:.3g}), "
                         "the dtype dmlq computes it in; it would become a zero scale (docs/semantics.md, \"Scales\"). "
                         f"Pass a larger value, or {name}=0.0 if a zero scale is meant")


def _finite_double(fname, name, v, t=torch.float32):
    """A scale given as a number (or a list of them): a ValueError where one lies beyond a double
    (10**400), as the eager call refuses it, not float()'s OverflowError; ``t``: the type it takes."""
    def beyond(e):  # an int by its bits (float() of a huge int is an OverflowError torch.compile cannot trace;
        # a float is within a double, and may be symbolic: a compiled function's float argument)
        return isinstance(e, numbers.Integral) and abs(int(e)).bit_length() > 128  # (past float32 anyway)

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


# The operands a public function takes as a dmlq.Packed (its bytes, NumPy's) beside torch tensors.
_PACKED_OPERANDS = {"quantize_linear": ("scale", "zero_point"), "dequantize_linear": ("q", "scale", "zero_point"),
                    "quantized_matmul": ("b", "b_zero_point"), "matmul_integer": ("b", "b_zero_point"),
                    "matmul_integer_to_float": ("b", "b_zero_point")}


# The matmul family takes a packed b (and its zero point) by value: in the graph its elements are
# int8 / uint8 tensors of the same values (the results are those of the same values in 8 bits:
# docs/semantics.md), since torch 2.13's Inductor fails to lower a view as torch.int4 ("torch.iinfo()
# requires an integer input type"; aot_eager took it).
_BY_VALUE = ("quantized_matmul", "matmul_integer", "matmul_integer_to_float")
_BY_VALUE_TYPES = ("int4", "uint4", "int2", "uint2")
_NARROW_INTS = {torch.int4: 15, torch.uint4: 15, torch.int2: 3, torch.uint2: 3}  # each code's mask


_SIGN = {"int4": 8, "int2": 2}  # a signed code's sign bit


def _narrow_values(codes, dtype_name):
    """int4 / uint4 / int2 / uint2 codes (a uint8 tensor, the code in the low bits) as int8 / uint8
    values: a signed code's sign bit extended, (c ^ 8) - 8 (int4), (c ^ 2) - 2 (int2)."""
    half = _SIGN.get(dtype_name)
    return (codes ^ half).to(torch.int8) - half if half else codes


def _packed_tensor(fname, name, p, as_tensor):
    """A dmlq.Packed operand as the tensor of its torch dtype (torch.int4 ..., one element a byte, the
    code in the low bits), unpacked by tensor operations that torch.compile and torch.export trace (the
    eager call unpacks it on the host; Dynamo gave the op the Packed itself, and torch refused it in
    its own words); for the matmul family (_BY_VALUE) its values as int8 / uint8. ``as_tensor``: the
    bytes (a NumPy array) as a uint8 tensor."""
    from .packing import packed_nbytes
    from .qtypes import QTYPES

    if isinstance(p.dtype, str) and p.dtype.lower() in QTYPES:  # its type's name in any case ("INT4"); a dtype
        p = p._replace(dtype=p.dtype.lower())  # object, or qtype()'s table of them, is beyond Dynamo's tracing
    if name not in _PACKED_OPERANDS.get(fname, ()):
        raise TypeError(f"{fname}: {name} is a dmlq.Packed, which {fname} does not take as {name}; pass "
                        f"dmlq.unpack({name}) (its elements, one a byte), or a tensor of its torch dtype")
    if name.startswith("b") and fname in _DATA and "b" in _DATA[fname] and p.dtype not in _BY_VALUE_TYPES:
        raise TypeError(f"{fname}: a packed {name} must be int4, uint4, int2 or uint2 (got a dmlq.Packed of "
                        f"{p.dtype})")
    t = getattr(torch, p.dtype, None) if isinstance(p.dtype, str) else None
    if t is None or t not in _TO_NUMPY:
        raise TypeError(f"{fname}: {name} is a dmlq.Packed of {p.dtype}, which torch holds in no dtype of one "
                        "element a byte; pass float4 values as a torch.float4_e2m1fn_x2 tensor (two of the last "
                        "axis a byte), or call dmlq on NumPy arrays, outside torch.compile")
    if not isinstance(p.data, np.ndarray):
        raise TypeError(f"{fname}: {name} is a dmlq.Packed whose data is not a NumPy array; beside torch tensors "
                        f"pass a Packed of NumPy bytes (dmlq.pack of a NumPy array or a CPU tensor), or {name} as "
                        f"a {t} tensor")
    shape = tuple(int(s) for s in p.shape)
    size = math.prod(shape)
    bits = QTYPES[p.dtype].bits if p.dtype in QTYPES else 8
    data = as_tensor(p.data)
    need = packed_nbytes(size, p.dtype) if p.dtype in QTYPES else size
    if data.dtype != torch.uint8 or data.dim() != 1 or data.numel() != need:
        raise ValueError(f"{fname}: {name} is a dmlq.Packed that does not hold its elements: {p.dtype} {shape} "
                         f"takes {need} bytes as a 1-D uint8 array (got {data.dtype} {tuple(data.shape)})")
    if bits < 8:  # element i in bits (i % k) * bits and up of byte i // k: the first in the low bits
        mask = (1 << bits) - 1
        data = torch.stack([(data >> s) & mask for s in range(0, 8, bits)], dim=-1).reshape(-1)[:size]
    if fname in _BY_VALUE and p.dtype in _BY_VALUE_TYPES:  # (b is checked above; its zero point has its type)
        return _narrow_values(data, p.dtype).reshape(shape)
    return data.reshape(shape).view(t)


_INTS = ("axis", "block_size")
_INT_LISTS = ("window_size", "strides", "start_padding", "end_padding", "dilations")
_FLAGS = ("include_padding", "ceil_mode", "saturate")


def _python(fname, key, v):
    """NumPy numbers and arrays of them in the int and bool keywords as Python's (elements of a list
    or tuple too), as the eager call takes them. Inside torch.compile a NumPy value that Dynamo
    holds as a tensor (an argument or a closure's, a bool, an array) is refused, with the fix: its
    int() is a symbolic or unknown int there, which no ``int``/``int[]``/``bool`` of the op's schema
    takes (torch's own error, or a crash in the backend); a NumPy constant (``np.int64(2)`` written
    in the function) is a number Dynamo knows, taken."""
    if isinstance(v, (list, tuple)):
        return [_python(fname, key, e) for e in v]
    if isinstance(v, torch.Tensor):  # (the eager call takes integer tensors there, as operator.index does)
        if _dynamo_compiling():  # (no repr of it in a message: Dynamo would break the graph there)
            raise TypeError(f"{fname}: {key} is or holds a tensor; inside torch.compile and torch.export pass "
                            f"Python ints (or bools) there: {key}=t.tolist() outside the function")
        return v.tolist()
    if isinstance(v, np.generic) or isinstance(v, np.ndarray) and not _dynamo_compiling():
        return v.tolist()
    if not isinstance(v, np.ndarray):
        return v
    fix = "a Python bool: bool(v)" if key in _FLAGS else "a Python int: int(v)" if key in _INTS or not v.ndim \
        else "Python ints: [int(e) for e in v]"
    raise TypeError(f"{fname}: {key} is a NumPy {'array' if v.ndim else 'number'} that torch.compile makes a "
                    f"tensor, which it does not take there; pass {fix} (outside the compiled function)")


def _keywords(fname, kw):
    """The int and bool keywords as the op's schema takes them (``int``, ``int[]``, ``bool``), checked
    as the eager call checks them: NumPy ints and bools taken (the schema refused them, torch's
    error), bools and floats refused where an int is meant and ints where a bool is (the schema
    converted them: ``axis=True`` was axis 1, ``ceil_mode=1`` True)."""
    kw = dict(kw)
    for key in _INTS + _INT_LISTS + _FLAGS:
        v = kw.get(key)
        if v is None:
            continue
        v = kw[key] = _python(fname, key, v)
        if key in _INTS and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{fname}: {key} must be an int (got {v!r})")
        if key in _INT_LISTS and isinstance(v, list) and any(isinstance(e, bool) or not isinstance(e, int)
                                                             for e in v):
            raise TypeError(f"{fname}: {key} must hold integers (got {tuple(v)!r})")
        if key in _INT_LISTS and isinstance(v, bool):
            raise TypeError(f"{fname}: {key} must hold integers (got {v!r})")
        if key in _FLAGS and not isinstance(v, bool) and not (key == "saturate" and isinstance(v, int)
                                                             and v in (0, 1)):
            raise TypeError(f"{fname}: {key} must be True or False (got {v!r})")
        if key == "saturate":
            kw[key] = bool(v)
    return kw


# Dynamo tracing (torch.compiler.is_compiling() is true in non-strict torch.export too, which runs
# the Python code on fake tensors rather than tracing it)
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
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


def _dtype_constant(fname, d):
    """A NumPy dtype (its type, a name) as torch's, a constant of the graph; one torch has no
    tensor of (float4_e2m1fn) refused as the eager call refuses it."""
    t = _torch_dtype_constant(d)
    if isinstance(t, str):
        raise TypeError(f"{fname}: {t}")
    return t


_ELEMENTWISE = ("quantize_linear", "dequantize_linear", "quantized_add")


def _data_operand(fname, name, v, device):
    """A data operand given as a Python number, a list or tuple of them, or None, beside tensors
    inside torch.compile: as the eager call takes it (the op's schema would refuse it in torch's
    words). Quantize's ``x`` and matmul_integer_to_float's ``bias`` become float32 (README
    "Inputs": numbers and lists of numbers given as x become float32; a list of bools is bool,
    refused), values past float32's range refused; integer data (dequantize's q, add's, the
    matmuls' and pooling's operands) has no dtype of its own (np.asarray makes int64 or float64
    of it) and is refused, naming the fix."""
    if v is None or not isinstance(v, (numbers.Real, list, tuple)):
        raise TypeError(f"{fname}: {name} must be an array (a tensor here), got {type(v).__name__}; pass "
                        f"torch.as_tensor({name})")
    try:
        shape, flat = _nested(v)
    except ValueError as err:
        raise TypeError(f"{fname}: {name} is a list that np.asarray cannot turn into one numeric array ({err}); "
                        "pass a rectangular list of numbers, or a tensor") from None
    if any(isinstance(e, (torch.Tensor, np.generic, np.ndarray)) for e in flat):  # (Dynamo: NumPy scalars as arrays)
        raise TypeError(f"{fname}: {name} is a list holding tensors or NumPy scalars (torch.compile traces a NumPy "
                        "scalar as an array), whose values the compiled call cannot check; pass a tensor "
                        f"(torch.tensor({name}, dtype=torch.{'float32' if fname == 'quantize_linear' else 'uint8'}))"
                        + (" or a list of Python numbers" if fname == "quantize_linear" else ""))
    if not all(isinstance(e, numbers.Real) for e in flat):
        raise TypeError(f"{fname}: {name} is a list holding something other than numbers; pass a tensor")
    floating = fname == "quantize_linear" or name == "bias"  # (float data: the rest are quantized types)
    if not floating:
        made = "float64" if any(isinstance(e, float) for e in flat) else "int64"
        raise TypeError(f"{fname}: {name} is a Python {type(v).__name__}, which says no quantized type (np.asarray "
                        f"makes {made} of it); pass a tensor of its type, e.g. torch.tensor({name}, "
                        "dtype=torch.uint8)")
    if flat and all(isinstance(e, (bool, np.bool_)) for e in flat):
        raise TypeError(f"{fname}: {name} must have dtype float32, float16{' or int32' if name == 'x' else ''} "
                        f"(got bool); pass torch.tensor({name}, dtype=torch.float32)")
    _finite_double(fname, name, v)
    p, _, emax = _FLOAT_FORMATS[torch.float32]
    top = (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax + 2.0 ** (emax - p)  # (rounds to inf in float32)
    for e in flat:
        if e == e and abs(e) != math.inf and abs(e) >= top:
            where = f"holds {e!r}," if isinstance(v, (list, tuple)) else f"= {e!r} is"
            raise ValueError(f"{fname}: {name} {where} beyond the range of float32 (largest magnitude 3.4028235e+38), "
                             "the dtype dmlq computes it in; it would become inf. Pass values within that range "
                             "(np.inf where an infinite value is meant)")
    if all(isinstance(e, numbers.Integral) and -2**63 <= e < 2**63 for e in flat) and flat:
        t = torch.tensor([int(e) for e in flat], dtype=torch.int64, device=device)  # (int64 to float32:
    else:  # one rounding, as NumPy's; the floats are doubles first, as np.asarray makes them)
        t = torch.tensor([float(e) for e in flat], dtype=torch.float64, device=device)
    return t.to(torch.float32).reshape(shape)


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
        def as_tensor(v):  # NumPy operands (and, inside torch.compile, NumPy scalars) as tensors
            if _dynamo_compiling():
                return torch.as_tensor(v)
            if torch.compiler.is_compiling():  # (non-strict torch.export: a constant of the program; an
                t = torch_dtype(v.dtype)  # ml_dtypes array, a packed b unpacked, through its bytes)
                return torch.as_tensor(v.view(_VIEWED[t][1])).view(t) if t in _VIEWED else torch.as_tensor(v)
            if any(_is_fake(t) for t in values.values() if isinstance(t, torch.Tensor)):
                # (FakeTensorMode: a tensor of its shape and dtype, made fake by the mode)
                return torch.empty(v.shape, dtype=torch_dtype(v.dtype))
            return _from_numpy(np.array(v))

        by_value = fname in _BY_VALUE and any(isinstance(values.get(n), (Packed, TransposedPacked))
                                              for n in ("b", "b_zero_point"))
        for n, v in values.items():
            if isinstance(v, TransposedPacked):  # (p.mT: the transposed view of p's tensor)
                values[n] = _packed_tensor(fname, n, v.packed, as_tensor).mT[..., :v.k, :]
            elif isinstance(v, Packed):
                values[n] = _packed_tensor(fname, n, v, as_tensor)
            elif isinstance(v, np.ndarray):
                values[n] = as_tensor(v)
        if by_value:
            for n in ("b", "b_zero_point"):  # a 4-bit or 2-bit tensor beside a Packed one (by value): by value too
                v = values[n]
                if isinstance(v, torch.Tensor) and v.dtype in _NARROW_INTS:  # (one element a byte, the code low)
                    name = str(v.dtype).rpartition(".")[2]
                    values[n] = _narrow_values(v.view(torch.uint8) & _NARROW_INTS[v.dtype], name)
        # data given as numbers or lists (beside tensors: it is traced) as the eager call takes it:
        # quantize's x and matmul_integer_to_float's bias become float32, integer data is refused
        # (a TypeError here: Dynamo then runs the call eagerly, whose error it is; fullgraph=True
        # reports it inside torch's Unsupported)
        device = next((t.device for t in values.values() if isinstance(t, torch.Tensor)), None)
        for n in data:
            if not isinstance(values[n], torch.Tensor) and (values[n] is not None or n != "bias"):
                values[n] = _data_operand(fname, n, values[n], device)
        kw = {k: kwargs[k] for k in keywords if k in kwargs}
        if len(args) > len(names):  # quantized_avg_pool's window_size, given by position
            kw["window_size"] = args[len(names)]
        kw = _keywords(fname, kw)
        for key in ("dtype", "precision"):
            if kw.get(key) is not None and not isinstance(kw[key], torch.dtype):
                kw[key] = _dtype_constant(fname, kw[key])
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
                            kw["dtype"] = dtype = _dtype_constant(fname, v.dtype)
                        v = int(v)
                    values[n] = 0 if v is None else v
                else:  # (its range checked now, as the eager call's exception: the op would raise it
                    _scale_range(fname, n, v, _scale_type(fname, lead))  # inside torch's own)
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
                    zdt = kw["dtype"] = dtype = _dtype_constant(fname, v.dtype)
                values[n] = None if _known_zero(v) else _zp_tensor(fname, n, v, zdt, lead.device)
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


def out_refused(fname) -> TypeError:
    """``out=`` with a tensor that requires grad (and where the call goes through the op in eager
    mode): torch refuses it for its own ops, eager and compiled alike."""
    return TypeError(f"{fname}: out= is not taken with a tensor that requires grad, with meta or fake tensors, or "
                     "inside torch.func's vmap or functionalize (torch's own ops refuse it under autograd): leave "
                     "out=None, or call with .detach() tensors or under torch.no_grad()")


def _strides_clear(shape, strides) -> bool:
    """The quick test of :func:`dmlq.validation.shared_elements` in plain Python (which Dynamo
    traces): with the dimensions sorted by stride, each stride clears the extent of the ones
    before, so no two elements share memory. False also for the rare layouts that interleave
    without aliasing (the eager call enumerates those and takes them)."""
    if any(n == 0 for n in shape):  # no elements, none shared (NumPy gives an empty array zero strides)
        return True
    dims: list = []  # (stride, size) in ascending stride, by insertion (Dynamo sorts no symbolic keys)
    for st, n in zip(strides, shape):  # (a tensor's strides are never negative)
        if n > 1:
            i = len(dims)
            while i > 0 and st < dims[i - 1][0]:
                i -= 1
            dims.insert(i, (st, n))
    extent = 1
    for st, n in dims:
        if st < extent:
            return False
        extent = extent + st * (n - 1)
    return True


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
    if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad
                                       for v in (*args, *kwargs.values(), out)):
        raise out_refused(fname)
    if all(n != 0 for n in out.shape) and any(st == 0 and n > 1 for st, n in zip(out.stride(), out.shape)):
        # an expanded tensor, as eager says (an empty one, which NumPy gives zero strides, shares nothing)
        raise ValueError(f"{fname}: out has elements that share memory (an expanded tensor, stride 0), so a "
                         "result element would overwrite another; pass a tensor of its own memory")
    shape, strides = tuple(out.shape), tuple(out.stride())
    if not _strides_clear(shape, strides):  # overlapping strides (as_strided), as the eager call refuses them
        raise ValueError(f"{fname}: out has elements that share memory, or may (shape {shape}, strides {strides}: "
                         "with the dimensions sorted by stride, a stride does not clear the extent of the ones "
                         "before), so a result element would overwrite another in no fixed order; pass a tensor "
                         "of its own memory")
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
