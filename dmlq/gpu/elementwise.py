"""Quantize, dequantize and quantized add on the GPU (cuda/elementwise.cu).

Layout handling is pure Python (no CuPy needed): every operand is described by
its element strides after broadcasting to ``out.shape``; ``canonicalize`` drops
size-1 dims, flips dims the output walks backwards, sorts dims by the output's
strides and merges dims that every operand lets merge. ``select_variant`` then
picks ``contig`` (tensors dense, scale/zero point per tensor), ``axis`` (tensors
dense, scale/zero point varying along one merged axis) or ``strided``.

Scales and zero points reach the kernels as (pointer, value) pairs: a CuPy array
is passed as a device pointer and read in the kernel (once per thread when per
tensor: an L1/constant-cache broadcast, and reading it on the host would
synchronize); a NumPy/Python scalar is passed by value with a null pointer; an
omitted zero point is a null pointer with value 0.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import numpy as np

from ..keys import key, value_key
from . import device
from .plan import Launch, Memo, Plan, Runner, device_key, launcher

VARIANTS = ("contig", "axis", "strided")
SOURCE = "elementwise.cu"
THREADS = 256  # matches kThreads in elementwise.cu
# Quantized add of at least this many dense elements goes through the 64 KiB
# table (add_table); below it the table's build and per-block copy cost more
# than the arithmetic saves. Provisional: to be measured on the device.
TABLE_MIN_ELEMENTS = 1 << 24
TABLE_BYTES = 65536
UNROLL = 8     # matches kUnroll (elements in flight per thread, axis)
STRIDED_UNROLL = 4  # matches kStridedUnroll
MAX_DIMS = 8
SLOTS = 4      # Geo operand slots: out, x|q|a, scale|b, zero point

CTYPE = {
    "float32": "float", "float16": "float16", "int32": "int", "uint32": "unsigned int",
    "int16": "short", "uint16": "unsigned short", "int8": "int8", "uint8": "uint8",
}
QUANT_OUT = ("int8", "uint8")
QUANT_IN = ("float32", "float16", "int32")
QUANT_SCALE = ("float32", "float16")  # a runtime flag in the kernel, not a template argument
DEQUANT_IN = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
DEQUANT_OUT = ("float32", "float16")  # = the scale's dtype


def kernel_name(op: str, variant: str, dtypes: Sequence[str], wide: bool = False) -> str:
    """The name expression of one instantiation, e.g. quantize_contig<float, int8>."""
    args = [CTYPE[d] for d in dtypes]
    if variant == "strided":
        args.append("true" if wide else "false")
    return f"{op}_{variant}<{', '.join(args)}>"


def _all_names():
    names = []
    for variant in VARIANTS:
        for wide in ((False, True) if variant == "strided" else (False,)):
            for x in QUANT_IN:
                for q in QUANT_OUT:
                    names.append(kernel_name("quantize", variant, (x, q), wide))
            for i in DEQUANT_IN:
                for o in DEQUANT_OUT:
                    names.append(kernel_name("dequantize", variant, (i, o), wide))
            if variant != "axis":
                for a in QUANT_OUT:
                    for b in QUANT_OUT:
                        for o in QUANT_OUT:
                            names.append(kernel_name("add", variant, (a, b, o), wide))
    for a in QUANT_OUT:
        for b in QUANT_OUT:
            for o in QUANT_OUT:
                names.append(kernel_name("add", "table_build", (a, b, o)))
                names.append(kernel_name("add", "table", (a, b, o)))
    return tuple(names)


def add_path(layout_variant: str, n: int, variant=None) -> str:
    """The quantized-add kernel: the 64 KiB table for a dense add of at least
    TABLE_MIN_ELEMENTS elements (or when asked for), else the layout's variant."""
    if variant == "table":
        return "table"
    if variant is None and layout_variant == "contig" and n >= TABLE_MIN_ELEMENTS:
        return "table"
    return layout_variant


KERNELS = {SOURCE: _all_names()}

# Kernel parameter structs, byte for byte as Geo32 / Geo64 in elementwise.cu
# (dim 0 innermost; strides in elements, per operand slot).
GEO32 = np.dtype([("size", "<i4", (MAX_DIMS,)), ("magic", "<u4", (MAX_DIMS,)),
                  ("shift", "<u4", (MAX_DIMS,)), ("stride", "<i4", (SLOTS, MAX_DIMS)),
                  ("ndim", "<i4")], align=True)
GEO64 = np.dtype([("size", "<i8", (MAX_DIMS,)), ("stride", "<i8", (SLOTS, MAX_DIMS)),
                  ("ndim", "<i8")], align=True)


# ----------------------------------------------------------------- layouts

class Layout(NamedTuple):
    shape: tuple    # outermost first; () for one element
    strides: tuple  # per operand: element strides, one per dim
    offsets: tuple  # per operand: element offset of the new origin (from flips)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def canonicalize(shape, strides) -> Layout:
    """The simplest equivalent iteration space for an element-wise operation.

    ``strides``: per operand (operand 0 is the output), element strides broadcast to
    ``shape``. Size-1 dims go; dims with a negative output stride are flipped for
    every operand (offsets record the moved origins); dims are sorted by the
    output's stride, largest first; neighbours merge where every operand has
    stride[outer] == stride[inner] * size[inner].
    """
    shape = tuple(int(s) for s in shape)
    nops = len(strides)
    for st in strides:
        if len(st) != len(shape):
            raise ValueError(f"strides {tuple(st)} do not match shape {shape}")
    if 0 in shape:
        return Layout((0,), tuple((0,) for _ in range(nops)), (0,) * nops)
    dims = [d for d, s in enumerate(shape) if s != 1]
    sizes = [shape[d] for d in dims]
    st = [[int(strides[k][d]) for d in dims] for k in range(nops)]
    offsets = [0] * nops
    for i, size in enumerate(sizes):
        if st[0][i] < 0:
            for k in range(nops):
                offsets[k] += (size - 1) * st[k][i]
                st[k][i] = -st[k][i]
    order = sorted(range(len(sizes)),
                   key=lambda i: tuple(-abs(st[k][i]) for k in range(nops)))
    out_sizes: list = []
    out_st: list = [[] for _ in range(nops)]
    for i in order:
        if out_sizes and all(out_st[k][-1] == st[k][i] * sizes[i] for k in range(nops)):
            out_sizes[-1] *= sizes[i]
            for k in range(nops):
                out_st[k][-1] = st[k][i]
        else:
            out_sizes.append(sizes[i])
            for k in range(nops):
                out_st[k].append(st[k][i])
    return Layout(tuple(out_sizes), tuple(tuple(s) for s in out_st), tuple(offsets))


def c_strides(shape) -> tuple:
    """Element strides of a C-contiguous array of ``shape``."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _classify(layout: Layout, nbig: int):
    """(dense, varying dims of the small operands) of a canonical layout."""
    cs = c_strides(layout.shape)
    dense = all(tuple(layout.strides[k]) == cs for k in range(nbig))
    vary = sorted({d for k in range(nbig, len(layout.strides))
                   for d, s in enumerate(layout.strides[k]) if s != 0})
    return dense, vary


def axis_dims(layout: Layout, nbig: int):
    """(outer, L, inner) of a dense layout whose small operands vary along at most
    one dim (L = 1 when none varies), or None when the axis kernel can't run it."""
    dense, vary = _classify(layout, nbig)
    if not dense or len(vary) > 1 or layout.size == 0:
        return None
    if not vary:
        outer, length, inner = 1, 1, layout.size
    else:
        d = vary[0]
        outer = math.prod(layout.shape[:d])
        length, inner = layout.shape[d], math.prod(layout.shape[d + 1:])
    if length >= 2**31 or inner >= 2**31:  # the kernel tracks (j, c) in 32 bits
        return None
    return outer, length, inner


def layout_supports(variant: str, layout: Layout, nbig: int, axis_ok: bool = True) -> bool:
    """Whether ``variant`` can run a canonical layout (nbig leading operands are
    tensors, the rest scales/zero points)."""
    if variant == "strided" or (variant in VARIANTS and layout.size == 0):
        return True  # (nothing is launched for size 0)
    if variant == "contig":
        dense, vary = _classify(layout, nbig)
        return dense and not vary
    if variant == "axis":
        return axis_ok and axis_dims(layout, nbig) is not None
    raise ValueError(f"unknown element-wise variant {variant!r} (expected one of {VARIANTS})")


def select_layout(layout: Layout, nbig: int, axis_ok: bool = True) -> str:
    """The first of contig, axis, strided that can run ``layout``."""
    for variant in ("contig", "axis"):
        if layout_supports(variant, layout, nbig, axis_ok):
            return variant
    return "strided"


def select_variant(shape, big_strides, small_strides=(), *, axis_ok: bool = True) -> str:
    """The variant for one call. Strides are in elements, broadcast to ``shape``
    (out's shape): ``big_strides`` for the tensors (out first, then x / q / a, b),
    ``small_strides`` for scales and zero points held in device arrays (leave out
    omitted ones and host scalars). ``axis_ok`` is False for quantized add."""
    big, small = list(big_strides), list(small_strides)
    return select_layout(canonicalize(shape, big + small), len(big), axis_ok)


def needs_wide(layout: Layout) -> bool:
    """64-bit index math: n >= 2**31 or some operand spans >= 2**31 elements."""
    if layout.size >= 2**31:
        return True
    for st in layout.strides:
        if sum(abs(s) * (n - 1) for s, n in zip(st, layout.shape)) >= 2**31:
            return True
    return False


def magic_u32(d: int):
    """(m, s) with floor(i / d) == (umulhi(i, m) + i) >> s for 0 <= i < 2**31."""
    if not 1 <= d < 2**31:
        raise ValueError(f"divisor {d} out of range")
    s = (d - 1).bit_length()
    m = ((1 << 32) * ((1 << s) - d)) // d + 1
    assert 0 < m < 2**32
    return m, s


def magic_div(i, m: int, s: int):
    """Python model of the kernel's division (works on ints and uint64 arrays)."""
    return (((i * m) >> 32) + i) >> s


@functools.lru_cache(maxsize=256)
def pack_geo(layout: Layout, wide: bool):
    """The Geo32/Geo64 kernel argument (a size-1 structured NumPy array, which
    CuPy passes by value) of a canonical layout with SLOTS operands."""
    nd = len(layout.shape)
    if nd > MAX_DIMS:
        raise ValueError(f"{nd} dims after merging; the strided kernel takes at most {MAX_DIMS}")
    if len(layout.strides) != SLOTS:
        raise ValueError(f"expected {SLOTS} operand slots, got {len(layout.strides)}")
    geo = np.zeros(1, GEO64 if wide else GEO32)
    sizes = list(reversed(layout.shape))  # dim 0 innermost
    geo["ndim"] = nd
    geo["size"][0, :nd] = sizes
    for k in range(SLOTS):
        geo["stride"][0, k, :nd] = list(reversed(layout.strides[k]))
    if not wide:
        for d, size in enumerate(sizes):
            geo["magic"][0, d], geo["shift"][0, d] = magic_u32(size)
    return geo


def vector_head(addresses, itemsizes, n: int, vec: int) -> int:
    """Elements to do one at a time so that after them every address is aligned to its
    vector's access width (vec elements' bytes, 16 at most: cuda/elementwise.cu's
    load_words / store_words); n (all scalar) when no such head exists."""
    aligns = [min(16, vec * s) for s in itemsizes]
    for h in range(vec):
        if all((a + h * s) % al == 0 for a, s, al in zip(addresses, itemsizes, aligns)):
            return min(h, n)
    return n


def vec_width(itemsizes) -> int:
    """Elements per vector of a contig kernel, ``itemsizes`` = (out, inputs...):
    cuda/elementwise.cu's vec_width (16 bytes of the output when it is the widest, as in
    dequantize, else 16 bytes of the narrowest type)."""
    out, widest_in = itemsizes[0], max(itemsizes[1:])
    return 16 // out if out > widest_in else 16 // min(itemsizes)


# ----------------------------------------------------------------- launching

class _Param:
    """A scale or zero point: a device array (ptr, itemsize, strides over out's
    shape) or a host value (ptr 0). Absent: ptr 0, value 0."""

    __slots__ = ("array", "ptr", "itemsize", "strides", "value", "dtype")

    def __init__(self, array=None, strides=None, value=0, dtype=None):
        self.array = array
        self.ptr = 0 if array is None else device.ptr(array)
        self.itemsize = 0 if array is None else array.itemsize
        self.strides = strides
        self.value = value
        self.dtype = dtype if array is None else device.dtype_name(array.dtype)


def _elem_strides(a, shape):
    """Element strides of CuPy array ``a`` broadcast to ``shape`` (NumPy rules)."""
    size = a.itemsize
    if device.ptr(a) % size:
        raise ValueError("dmlq: array data is not aligned to its itemsize")
    lead = len(shape) - a.ndim
    if lead < 0:
        raise ValueError(f"dmlq: shape {a.shape} does not broadcast to {tuple(shape)}")
    st = [0] * lead
    for n, s, want in zip(a.shape, a.strides, shape[lead:]):
        if n != want and n != 1:
            raise ValueError(f"dmlq: shape {a.shape} does not broadcast to {tuple(shape)}")
        if s % size:
            raise ValueError(f"dmlq: stride {s} bytes is not a multiple of the itemsize {size}")
        st.append(0 if n != want else s // size)
    return tuple(st)


def _param(v, shape, per_tensor=False):
    if v is None:
        return _Param()
    if not device.current().is_array(v):
        host = v if isinstance(v, (np.ndarray, np.generic)) else np.asarray(v)
        if host.size != 1:  # a per-axis host array: it has to live on the device
            v = device.xp().asarray(host)
        else:
            return _Param(value=host.item(), dtype=device.dtype_name(host.dtype))
    if v.size == 1 or per_tensor:
        _elem_strides(v, v.shape)  # alignment check
        return _Param(v, (0,) * len(shape))
    return _Param(v, _elem_strides(v, shape))


def _u64(p: int):
    return np.uint64(p)


# Launch arguments, built by pure functions so tests can check them against the
# kernels' PTX parameter lists without a GPU. ``ptrs``: device addresses of the
# four operand slots (out, x|a, scale|b, zero point) with layout offsets applied
# (0 = none); scalar kernel arguments are NumPy scalars of the exact C type.

def unary_arg_maker(op: str, variant: str, layout: Layout, ptrs, itemsizes, wide: bool = False,
                    scale_f16: bool = False):
    """(make, work items) of quantize_* / dequantize_* (op "quantize" or "dequantize"):
    ``make(ptrs, *unary_values(op, scale_value, zp_value))`` builds the argument
    tuple; everything else is fixed here (``ptrs`` only decide the vector head, by
    their alignment). itemsizes: of out and x; scale_f16: quantize's device scale
    is float16."""
    n = layout.size
    u64, i64 = np.uint64, np.int64
    f16 = (np.int32(bool(scale_f16)),) if op == "quantize" else ()
    count = i64(n)
    if variant == "contig":
        vec = vec_width(itemsizes)
        head = vector_head(ptrs[:2], itemsizes, n, vec)
        nvec = (n - head) // vec
        h = i64(head)

        def make(p, sv, zv):
            return (u64(p[1]), u64(p[0]), count, h, u64(p[2]), *f16, sv, u64(p[3]), zv)
        return make, max(nvec, n - nvec * vec)
    if variant == "axis":
        _, length, inner = axis_dims(layout, 2)
        d = _vary_dim(layout, 2)
        fixed = (np.uint32(inner), np.uint32(length))
        sst = i64(layout.strides[2][d] if d is not None else 0)
        zst = i64(layout.strides[3][d] if d is not None else 0)

        def make(p, sv, zv):
            return (u64(p[1]), u64(p[0]), count, *fixed, u64(p[2]), *f16, sst, sv, u64(p[3]), zst, zv)
        return make, -(-n // UNROLL)
    geo = pack_geo(layout, wide)

    def make_strided(p, sv, zv):
        return (u64(p[1]), u64(p[0]), count, geo, u64(p[2]), *f16, sv, u64(p[3]), zv)
    return make_strided, -(-n // STRIDED_UNROLL)


def unary_values(op: str, scale_value, zp_value) -> tuple:
    """The by-value scale and zero point of quantize_* / dequantize_*, as their C types."""
    return np.float32(scale_value), (np.int32 if op == "quantize" else np.int64)(int(zp_value))


def unary_args(op: str, variant: str, layout: Layout, ptrs, itemsizes, scale_value,
               zp_value, wide: bool = False, scale_f16: bool = False):
    """(args, work items) of quantize_* / dequantize_* (see :func:`unary_arg_maker`)."""
    make, work = unary_arg_maker(op, variant, layout, ptrs, itemsizes, wide, scale_f16)
    return make(ptrs, *unary_values(op, scale_value, zp_value)), work


def add_arg_maker(variant: str, layout: Layout, ptrs, wide: bool = False):
    """(make, work items) of add_*: ``make(ptrs, add_values(params))`` builds the
    argument tuple from the three tensor addresses and six (pointer, value) pairs:
    a, b, out scales then a, b, out zero points."""
    n = layout.size
    u64 = np.uint64
    count = np.int64(n)
    if variant == "contig":
        head = vector_head(ptrs[:3], (1, 1, 1), n, 16)
        nvec = (n - head) // 16
        fixed = (count, np.int64(head))
        work = max(nvec, n - nvec * 16)
    elif variant == "strided":
        fixed = (count, pack_geo(layout, wide))
        work = -(-n // STRIDED_UNROLL)
    else:
        raise ValueError(f"quantized add has no {variant!r} kernel")

    def make(p, values):
        return (u64(p[1]), u64(p[2]), u64(p[0]), *fixed, *values)
    return make, work


def add_values(params) -> tuple:
    """add_*'s twelve parameter arguments, as their C types, from the six (pointer,
    value) pairs."""
    u64, f32, i32 = np.uint64, np.float32, np.int32
    (s0, v0), (s1, v1), (s2, v2), (z0, w0), (z1, w1), (z2, w2) = params
    return (u64(s0), f32(v0), u64(s1), f32(v1), u64(s2), f32(v2), u64(z0), i32(int(w0)), u64(z1),
            i32(int(w1)), u64(z2), i32(int(w2)))


def add_args(variant: str, layout: Layout, ptrs, params, wide: bool = False):
    """(args, work items) of add_* (see :func:`add_arg_maker`)."""
    make, work = add_arg_maker(variant, layout, ptrs, wide)
    return make(ptrs, add_values(params)), work


def add_table_args(contig_args, table):
    """(add_table_build args, add_table args) from add_contig's argument list
    (a, b, y, n, head, six parameter pairs) and the table (array or address)."""
    return (table, *contig_args[5:]), (*contig_args[:5], table)


def _vary_dim(layout: Layout, nbig: int):
    _, vary = _classify(layout, nbig)
    return vary[0] if vary else None


def _choose(variant, layout: Layout, nbig: int, axis_ok: bool) -> str:
    if variant is None:
        return select_layout(layout, nbig, axis_ok)
    if not layout_supports(variant, layout, nbig, axis_ok):
        raise ValueError(f"the {variant!r} element-wise kernel cannot run this layout "
                         f"(shape {layout.shape}, strides {layout.strides})")
    return variant


def _layout_plan(shape, slots, nbig: int, axis_ok: bool, variant):
    """(canonical layout, variant, wide) of one call's geometry. Not memoized on
    its own: it runs when a runner is bound, and runners are kept under the call's
    key (dmlq.keys) already."""
    layout = canonicalize(shape, slots)
    v = _choose(variant, layout, nbig, axis_ok)
    return layout, v, v == "strided" and needs_wide(layout)


def _check_variant(variant, add=False):
    if add and variant == "table":
        return
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"unknown element-wise variant {variant!r} (expected one of {VARIANTS})")


def _check_dtype(p: _Param, want: str, what: str):
    if p.ptr and p.dtype != want:
        raise TypeError(f"dmlq: {what} must have dtype {want} (got {p.dtype})")


def _launch(name: str, work: int, shared_mem: int = 0, role: str = "main") -> Launch:
    """A grid-stride launch: enough blocks for the work, at most what the device
    keeps resident at once."""
    per_sm = device.resident_blocks(SOURCE, name, THREADS, shared_mem)
    blocks = max(1, min(-(-work // THREADS), device.info().sm_count * per_sm))
    return Launch(SOURCE, name, (blocks,), (THREADS,), shared_mem, role)


def _overlapping(out, *inputs) -> bool:
    """Whether ``out`` may share memory with an input array (NumPy's bounds
    test): the kernels read and write in no fixed order, so such an out must
    be computed through a temporary."""
    if type(out) is device.Fresh:
        return False
    is_array = device.current().is_array
    return any(a is not None and is_array(a) and device.overlaps(a, out) for a in inputs)


_THROUGH_TEMPORARY = "out overlaps an input: computed into a temporary, then copied"


# Runners of repeated calls: geometry (shapes, strides, dtypes, addresses modulo 16,
# the values of host scalars) -> Runner. Addresses are read anew on every call.
_memo = Memo()


def clear_plan_cache() -> None:
    """Forget memoized plans (tests that patch selection call this)."""
    Memo.clear_all()


def _memo_key(plan_fn, args, out, variant):
    """The geometry a plan depends on (dmlq.keys' keys plus address alignment), or
    None when a call is not memoized."""
    is_array, ptr = device.current().is_array, device.ptr
    if not is_array(out):
        return None
    memo_key = [plan_fn, variant, *device_key(), key(out), ptr(out) % 16]
    for a in args:
        if a is None:
            memo_key.append(None)
        elif is_array(a):
            memo_key += (key(a), ptr(a) % 16)
        elif isinstance(a, (np.generic, np.ndarray)) and a.size == 1:
            memo_key.append(value_key(a))  # baked into the runner's arguments
        else:
            return None
    return tuple(memo_key)


def bind(plan_fn, args, out, variant=None) -> Runner:
    """The runner of ``plan_fn``'s plan for these arguments' geometry, for an out
    that overlaps no input; ``runner(*args, out)`` launches."""
    plan = plan_fn(*args, out, variant=variant)
    if not plan.launches:
        return Runner(plan, lambda *a: None)
    build, go = plan.detail, launcher(plan)
    if plan.variant == "table":  # the 64 KiB table of all input pairs, built by the first launch
        xp = device.xp()

        def call(*a):
            go(add_table_args(build(*a), xp.empty(TABLE_BYTES, a[-1].dtype)))
    else:
        def call(*a):
            go((build(*a),))
    return Runner(plan, call)


def _run(plan_fn, args, out, variant):
    """Bind the call (memoized by geometry) and run it; through a temporary when
    out overlaps an input."""
    if _overlapping(out, *args):
        tmp = device.xp().empty(out.shape, out.dtype)
        _run(plan_fn, args, tmp, variant)
        out[...] = tmp
        return out
    memo_key = _memo_key(plan_fn, args, out, variant)
    if memo_key is None:  # Python numbers, or per-axis host arrays (which must live on the device)
        args = tuple(_device_or_scalar(a) for a in args)
        runner = bind(plan_fn, args, out, variant)
    else:
        runner = _memo.get(memo_key, lambda: bind(plan_fn, args, out, variant))
    runner(*args, out)
    return out


def _device_or_scalar(v):
    if v is None or device.current().is_array(v) or np.ndim(v) == 0 or np.size(v) == 1:
        return v
    return device.xp().asarray(v)


def _unary_plan(opname, op, types, x, scale: _Param, zp: _Param, out, variant, notes):
    shape = out.shape
    zeros = (0,) * len(shape)
    slots = (_elem_strides(out, shape), _elem_strides(x, shape),
             scale.strides or zeros, zp.strides or zeros)
    layout, v, wide = _layout_plan(shape, slots, 2, True, variant)
    sizes = (out.itemsize, x.itemsize, scale.itemsize, zp.itemsize)
    f16 = scale.dtype == "float16"
    bases = (device.ptr(out), device.ptr(x), scale.ptr, zp.ptr)
    ptrs = [b + o * s if b else 0 for b, o, s in zip(bases, layout.offsets, sizes)]
    make, work = unary_arg_maker(op, v, layout, ptrs, sizes[:2], wide, f16)
    (o_out, o_x, o_s, o_z), (e_out, e_x, e_s, e_z) = layout.offsets, sizes
    ptr = device.current().ptr  # at call time: never a Fresh stand-in
    d_out, d_x = o_out * e_out, o_x * e_x
    # Which of scale and zero point is a device array is fixed for the plan (every
    # runner key holds it), and so are host values: a call reads addresses only.
    values = unary_values(op, scale.value, zp.value)  # 0 for device arrays and omitted ones
    d_s, d_z = o_s * e_s, o_z * e_z
    if scale.array is None and zp.array is None:
        def build(x, scale, zero_point, out):
            return make((ptr(out) + d_out, ptr(x) + d_x, 0, 0), *values)
    elif zp.array is None:
        def build(x, scale, zero_point, out):
            return make((ptr(out) + d_out, ptr(x) + d_x, ptr(scale) + d_s, 0), *values)
    elif scale.array is None:
        def build(x, scale, zero_point, out):
            return make((ptr(out) + d_out, ptr(x) + d_x, 0, ptr(zero_point) + d_z), *values)
    else:
        def build(x, scale, zero_point, out):
            return make((ptr(out) + d_out, ptr(x) + d_x, ptr(scale) + d_s, ptr(zero_point) + d_z), *values)

    return Plan(opname, v, (_launch(kernel_name(op, v, types, wide), work),), notes, build)


def _target(out, *inputs):
    """(array the kernel writes, notes): a stand-in for the temporary when out overlaps an input."""
    if _overlapping(out, *inputs):
        return device.Fresh(out.shape, out.dtype), (_THROUGH_TEMPORARY,)
    return out, ()


# ----------------------------------------------------------------- plans

def plan_quantize_linear(x, scale, zero_point, out, *, variant=None) -> Plan:
    """The plan of :func:`quantize_linear` (nothing launched)."""
    _check_variant(variant)
    if out.size == 0:
        return Plan("quantize_linear", "empty")
    target, notes = _target(out, x, scale, zero_point)
    q, xt = device.dtype_name(out.dtype), device.dtype_name(x.dtype)
    sc = _param(scale, out.shape)
    zp = _param(zero_point, out.shape)
    if xt not in QUANT_IN or q not in QUANT_OUT or (sc.ptr and sc.dtype not in QUANT_SCALE):
        raise TypeError(f"dmlq: quantize of {xt} with a {sc.dtype} scale to {q} is not supported")
    _check_dtype(zp, q, "zero_point")
    return _unary_plan("quantize_linear", "quantize", (xt, q), x, sc, zp, target, variant, notes)


def plan_dequantize_linear(q, scale, zero_point, out, *, variant=None) -> Plan:
    """The plan of :func:`dequantize_linear` (nothing launched)."""
    _check_variant(variant)
    if out.size == 0:
        return Plan("dequantize_linear", "empty")
    target, notes = _target(out, q, scale, zero_point)
    it, ot = device.dtype_name(q.dtype), device.dtype_name(out.dtype)
    if it not in DEQUANT_IN or ot not in DEQUANT_OUT:
        raise TypeError(f"dmlq: dequantize of {it} to {ot} is not supported")
    sc = _param(scale, out.shape)
    zp = _param(zero_point, out.shape)
    _check_dtype(sc, ot, "scale")
    _check_dtype(zp, it, "zero_point")
    return _unary_plan("dequantize_linear", "dequantize", (it, ot), q, sc, zp, target, variant, notes)


def plan_quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                       out_scale, out_zero_point, out, *, variant=None) -> Plan:
    """The plan of :func:`quantized_add` (nothing launched)."""
    _check_variant(variant, add=True)
    if out.size == 0:
        return Plan("quantized_add", "empty")
    out, notes = _target(out, a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                         out_zero_point)
    shape = out.shape
    types = (device.dtype_name(a.dtype), device.dtype_name(b.dtype), device.dtype_name(out.dtype))
    if any(t not in QUANT_OUT for t in types):
        raise TypeError(f"dmlq: quantized add of {types[0]} and {types[1]} to {types[2]} "
                        "is not supported")
    # Scales and zero points in add_values' order.
    params = []
    for p, want, what in ((a_scale, "float32", "a_scale"), (b_scale, "float32", "b_scale"),
                          (out_scale, "float32", "out_scale"),
                          (a_zero_point, types[0], "a_zero_point"),
                          (b_zero_point, types[1], "b_zero_point"),
                          (out_zero_point, types[2], "out_zero_point")):
        params.append(_param(p, shape, per_tensor=True))
        _check_dtype(params[-1], want, what)
    slots = (_elem_strides(out, shape), _elem_strides(a, shape), _elem_strides(b, shape),
             (0,) * len(shape))
    layout, v, wide = _layout_plan(shape, slots, 3, False, "contig" if variant == "table" else variant)
    offsets = layout.offsets
    bases = (device.ptr(out), device.ptr(a), device.ptr(b), 0)
    make, work = add_arg_maker(v, layout, [bp + o if bp else 0 for bp, o in zip(bases, offsets)], wide)
    o_out, o_a, o_b = offsets[:3]
    ptr = device.current().ptr  # at call time: never a Fresh stand-in

    # Which scales and zero points are device arrays is fixed for the plan (every
    # runner key holds it), and so are host values: a call packs only the arrays'
    # addresses (add_values' slot 2i holds pair i's address).
    on_device = tuple(i for i, p in enumerate(params) if p.array is not None)
    fixed = add_values([(0, p.value) for p in params])  # value 0 for device arrays and omitted ones
    if not on_device:
        def build(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out):
            return make((ptr(out) + o_out, ptr(a) + o_a, ptr(b) + o_b), fixed)  # itemsize 1
    else:
        u64 = np.uint64

        def build(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out):
            values = list(fixed)
            given = (a_scale, b_scale, out_scale, a_zero_point, b_zero_point, out_zero_point)
            for i in on_device:
                values[2 * i] = u64(ptr(given[i]))
            return make((ptr(out) + o_out, ptr(a) + o_a, ptr(b) + o_b), values)

    if add_path(v, layout.size, variant) == "table":
        launches = (Launch(SOURCE, kernel_name("add", "table_build", types), (TABLE_BYTES // THREADS,),
                           (THREADS,), 0, "table build"),
                    _launch(kernel_name("add", "table", types), work, TABLE_BYTES))
        return Plan("quantized_add", "table", launches, notes, build)
    return Plan("quantized_add", v, (_launch(kernel_name("add", v, types, wide), work),), notes, build)


# ----------------------------------------------------------------- operators

def quantize_linear(x, scale, zero_point, out, *, variant=None):
    """out = requantize(float32(x), float32(scale), zero_point) (docs/semantics.md)."""
    _check_variant(variant)
    return _run(plan_quantize_linear, (x, scale, zero_point), out, variant)


def dequantize_linear(q, scale, zero_point, out, *, variant=None):
    """out = float32(int64(q) - int64(zero_point)) * float32(scale), in out's dtype."""
    _check_variant(variant)
    return _run(plan_dequantize_linear, (q, scale, zero_point), out, variant)


def quantized_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                  out_scale, out_zero_point, out, *, variant=None):
    """out = requantize(float32(a - a_zp) * a_scale + float32(b - b_zp) * b_scale,
    out_scale, out_zp); scales and zero points are one element each."""
    _check_variant(variant, add=True)
    return _run(plan_quantized_add, (a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                     out_scale, out_zero_point), out, variant)
