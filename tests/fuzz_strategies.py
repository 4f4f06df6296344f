"""Hypothesis strategies for the fuzz harness: one per operator, each drawing a
dict of keyword arguments for the backend interface (``out`` included, poisoned,
sometimes a non-contiguous view), so CPU and GPU fuzz tests share them.

DMLQ_FUZZ_EXAMPLES sets max_examples per operator (default 50; the GPU run uses
more). Arrays are NumPy; a GPU test copies them to the device with their layout.
"""
from __future__ import annotations

import functools
import math
import os

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dmlq.desc import pool_output_accepted

EXAMPLES = int(os.environ.get("DMLQ_FUZZ_EXAMPLES", "50"))

I8, U8, F32, F16 = np.dtype("int8"), np.dtype("uint8"), np.dtype("float32"), np.dtype("float16")
BF16 = np.dtype(ml_dtypes.bfloat16)
QTYPES = (I8, U8)
DEQ_TYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32"))
SIDES = (0,) + (1, 2, 3, 5, 7) * 3      # sizes: 1 and small primes, 0 one time in 16
INF = float("inf")


def fuzz_settings(examples: int | None = None):
    """Hypothesis settings for a fuzz test: no deadline, no example database."""
    return settings(max_examples=examples or EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


# ---- elements -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def floats(lo, hi, dtype=F32, **kw):
    """st.floats of a width, with the bounds moved inwards to representable values.
    (Strategies are cached: building one costs Hypothesis more than drawing from it.)"""
    t = np.dtype(dtype).type
    flo, fhi = t(lo), t(hi)
    if float(flo) < lo:
        flo = np.nextafter(flo, t(np.inf))
    if float(fhi) > hi:
        fhi = np.nextafter(fhi, t(-np.inf))
    return st.floats(float(flo), float(fhi), width=8 * np.dtype(dtype).itemsize, **kw)


def _limits(dtype):
    dtype = np.dtype(dtype)
    if dtype == F16:
        return 2.0**-24, 2.0**-14, 65504.0
    if dtype == BF16:
        return 2.0**-133, 2.0**-126, float(ml_dtypes.finfo(BF16).max)
    return 2.0**-149, 2.0**-126, float(np.finfo(np.float32).max)


@functools.lru_cache(maxsize=None)
def scale_values(dtype=F32, special=True):
    """Scales: typical, 1e-30..1e30 (float16: its range), subnormal, powers of two,
    and (if special) 0, -0, negative, inf and NaN."""
    dtype = np.dtype(dtype)
    tiny, normal, big = _limits(dtype)
    lo, hi = (normal, big) if dtype == F16 else (1e-30, 1e30)
    parts = [
        floats(1e-3, 1.0, dtype),
        floats(lo, hi, dtype),
        floats(tiny, normal, dtype, exclude_max=True),
        st.integers(-20, 10).map(lambda e: 2.0**e),
    ]
    if special:
        parts.append(st.sampled_from([0.0, -0.0, INF, float("nan"), -1.0, -0.046875, tiny, big]))
    return st.one_of(*parts)


@functools.lru_cache(maxsize=None)
def int_values(dtype):
    """Integers of a dtype, with its extremes and 0 drawn often."""
    info = np.iinfo(dtype)
    edges = sorted({info.min, info.min + 1, info.max - 1, info.max, 0})
    return st.one_of(st.integers(int(info.min), int(info.max)), st.sampled_from(edges))


@functools.lru_cache(maxsize=None)
def float_values(dtype):
    """Any float of the dtype: NaN, +-inf, subnormals, huge, and small integers + ties."""
    w = 16 if np.dtype(dtype) == F16 else 32
    halves = st.integers(-600, 600).map(lambda k: k / 2)
    return st.one_of(st.floats(width=w), halves, floats(-300, 300, dtype))


# Arrays come from a NumPy generator seeded by Hypothesis, with the mixture of values
# also drawn: drawing every element through Hypothesis costs ~1 ms (float16 far more).

def _rng(draw):
    return np.random.default_rng(draw(st.integers(0, 2**64 - 1)))


def _mix(rng, draw, parts, n):
    """Elements from one part, or each element from a random part."""
    which = draw(st.integers(-1, len(parts) - 1))
    if which >= 0:
        return parts[which]
    pick = rng.integers(0, len(parts), n)
    return np.choose(pick, parts)


@st.composite
def int_arrays(draw, dtype, shape):
    """Uniform integers, the dtype's extremes and 0, or a mix."""
    dt, n = np.dtype(dtype), int(np.prod(shape))
    rng, info = _rng(draw), np.iinfo(dtype)
    edges = np.array(sorted({info.min, info.min + 1, info.max - 1, info.max, 0}), dt)
    parts = [rng.integers(info.min, info.max, n, endpoint=True, dtype=dt), rng.choice(edges, n)]
    return _mix(rng, draw, parts, n).astype(dt).reshape(shape)


def _special_floats(dtype):
    tiny, _, big = _limits(dtype)
    return np.array([0.0, -0.0, INF, -INF, float("nan"), tiny, -tiny, big, -big], dtype)


@st.composite
def float_arrays(draw, dtype, shape):
    """Random bit patterns (every exponent, subnormals, inf, NaN), multiples of 1/2
    (ties after x / 1), values in [-300, 300], specials, or a mix."""
    dt, n = np.dtype(dtype), int(np.prod(shape))
    rng = _rng(draw)
    bits = np.uint16 if dt.itemsize == 2 else np.uint32
    parts = [
        rng.integers(0, np.iinfo(bits).max, n, endpoint=True, dtype=bits).view(dt),
        (rng.integers(-600, 601, n) / 2).astype(dt),
        rng.uniform(-300, 300, n).astype(dt),
        rng.choice(_special_floats(dt), n),
    ]
    return _mix(rng, draw, parts, n).astype(dt).reshape(shape)


@st.composite
def scale_arrays(draw, dtype, shape, special=True):
    """Scales like scale_values, as arrays: typical, wide (1e-30..1e30; float16: its
    normal range), subnormal, powers of two, specials (if special), or a mix."""
    dt, n = np.dtype(dtype), int(np.prod(shape))
    rng = _rng(draw)
    tiny, normal, big = _limits(dt)
    bits, sub = (np.uint16, 0x3FF) if dt == F16 else (np.uint32, 0x7FFFFF)
    lo, hi = (np.log10(normal), np.log10(big)) if dt == F16 else (-30.0, 30.0)
    parts = [
        rng.uniform(1e-3, 1.0, n).astype(dt),
        (10.0 ** rng.uniform(lo, hi, n)).astype(dt),
        rng.integers(1, sub, n, endpoint=True, dtype=bits).view(dt),
        (2.0 ** rng.integers(-20, 11, n)).astype(dt),
    ]
    if special:
        parts.append(rng.choice(np.array([0.0, -0.0, INF, float("nan"), -1.0, -0.046875, tiny, big],
                                         dt), n))
    return _mix(rng, draw, parts, n).astype(dt).reshape(shape)


# ---- arrays and layouts ---------------------------------------------------------

@st.composite
def layout(draw, array):
    """The same values in another memory layout: as is, Fortran order, reversed along
    the first axis, or every other element of a larger buffer."""
    a = np.asarray(array)
    if a.ndim == 0 or a.size == 0:
        return a
    kind = draw(st.sampled_from(["c", "f", "reversed", "strided"]))
    if kind == "f":
        return np.asfortranarray(a)
    if kind == "reversed":
        return np.ascontiguousarray(a[::-1])[::-1]
    big = np.empty(tuple(2 * n for n in a.shape), a.dtype)
    view = big[tuple(slice(None, None, 2) for _ in a.shape)]
    view[...] = a
    return view


@st.composite
def b_layout(draw, b):
    """An 8-bit b (..., K, N) as :func:`layout` lays it out, or (one draw in three) held
    K-major: the transposed view of an (..., N, K) array whose rows are padded to 16 bytes
    and which starts on 16 bytes (x @ w.T of a torch Linear weight), which the stream and
    tensor-core kernels read as it is."""
    b = np.asarray(b)
    if b.ndim < 2 or b.size == 0 or draw(st.integers(0, 2)):
        return draw(layout(b))
    *batch, k, n = b.shape
    kp = -(-k // 16) * 16
    raw = np.empty(math.prod(batch) * n * kp * b.itemsize + 16, np.uint8)
    skip = -raw.ctypes.data % 16
    held = raw[skip:skip + raw.size - 16].view(b.dtype).reshape(*batch, n, kp)
    held[...] = 0
    view = held[..., :k].swapaxes(-1, -2)
    view[...] = b
    return view


@st.composite
def out_array(draw, shape, dtype):
    """A poisoned output (0xA5 bytes); sometimes a strided view into a larger poisoned
    buffer (its ``base``), whose other bytes must stay untouched."""
    shape = tuple(shape)
    strided = bool(shape) and draw(st.booleans())
    big = np.empty(tuple(2 * n + 1 for n in shape) if strided else shape, dtype)
    big.reshape(-1).view(np.uint8)[...] = 0xA5
    return big[tuple(slice(1, None, 2) for _ in shape)] if strided else big


def untouched_outside(out) -> bool:
    """For an output drawn by out_array: every byte of its base buffer outside the
    view still holds the poison."""
    if out.base is None:
        return True
    mask = np.ones(out.base.shape, bool)
    mask[tuple(slice(1, None, 2) for _ in out.shape)] = False
    return bool((out.base.view(np.uint8).reshape(out.base.shape + (-1,))[mask] == 0xA5).all())


def arranged(draw, strategy):
    """Draw an array and give it a random layout."""
    return draw(layout(draw(strategy)))


def _shapes(draw, num_shapes, max_side, max_dims=3):
    """(result shape, input shapes) of mutually broadcastable shapes; size-0
    dimensions one time in eight."""
    min_side = 0 if draw(st.integers(0, 7)) == 0 else 1
    r = draw(hnp.mutually_broadcastable_shapes(num_shapes=num_shapes, max_dims=max_dims,
                                               min_side=min_side, max_side=max_side))
    return r.result_shape, r.input_shapes


def _broadcast_view(draw, a, shape):
    """Sometimes hand a size-1-dim array over as a stride-0 view of the full shape."""
    if draw(st.booleans()):
        return a
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        return a


# ---- per operator ---------------------------------------------------------------

@st.composite
def quantize_args(draw):
    xdt = draw(st.sampled_from([F32, F16, np.dtype("int32")]))
    sdt = F32 if xdt.kind == "i" else draw(st.sampled_from([F32, F16]))
    odt = draw(st.sampled_from(QTYPES))
    with_zp = draw(st.booleans())
    out_shape, (xs, ss, zs) = _shapes(draw, 3, 5)
    s = arranged(draw, scale_arrays(sdt, ss))
    if xdt.kind == "i":
        x = arranged(draw, int_arrays(xdt, xs))
    elif draw(st.booleans()):
        x = arranged(draw, float_arrays(xdt, xs))
    else:
        # values near multiples of half a scale: ties and near ties after x / s
        t = draw(int_arrays(np.int16, xs)) % 1201 - 600 + 0.5 * draw(st.sampled_from([0, 1]))
        with np.errstate(all="ignore"):
            x = (t * np.float64(s.reshape(-1)[0] if s.size else 1.0)).astype(xdt)
    zp = arranged(draw, int_arrays(odt, zs)) if with_zp else None
    x = _broadcast_view(draw, x, out_shape)
    return dict(x=x, scale=s, zero_point=zp, out=draw(out_array(out_shape, odt)))


@st.composite
def dequantize_args(draw):
    qdt = draw(st.sampled_from(DEQ_TYPES))
    sdt = draw(st.sampled_from([F32, F16]))
    out_shape, (qs, ss, zs) = _shapes(draw, 3, 5)
    q = arranged(draw, int_arrays(qdt, qs))
    s = arranged(draw, scale_arrays(sdt, ss))
    zp = arranged(draw, int_arrays(qdt, zs)) if draw(st.booleans()) else None
    q = _broadcast_view(draw, q, out_shape)
    return dict(q=q, scale=s, zero_point=zp, out=draw(out_array(out_shape, sdt)))


def _size1(draw, dtype, elements):
    """A size-1 array of any shape ((), (1,), (1, 1))."""
    shape = draw(st.sampled_from([(1,), (), (1, 1)]))
    return np.full(shape, draw(elements), dtype)


@st.composite
def add_args(draw):
    adt, bdt, odt = (draw(st.sampled_from(QTYPES)) for _ in range(3))
    out_shape, (sa, sb) = _shapes(draw, 2, 7)
    a = _broadcast_view(draw, arranged(draw, int_arrays(adt, sa)), out_shape)
    b = _broadcast_view(draw, arranged(draw, int_arrays(bdt, sb)), out_shape)

    def zp(dt):
        return _size1(draw, dt, int_values(dt)) if draw(st.booleans()) else None

    return dict(a=a, a_scale=_size1(draw, F32, scale_values()), a_zero_point=zp(adt),
                b=b, b_scale=_size1(draw, F32, scale_values()), b_zero_point=zp(bdt),
                out_scale=_size1(draw, F32, scale_values()), out_zero_point=zp(odt),
                out=draw(out_array(out_shape, odt)))


@st.composite
def uniform_arrays(draw, dtype, shape, lo, hi):
    return _rng(draw).uniform(lo, hi, shape).astype(dtype)


def _per_axis(draw, n, make, allow_none):
    """None (zero points only), one element, or n elements; make(shape) -> strategy."""
    kind = draw(st.sampled_from(["none", "one", "axis"] if allow_none else ["one", "axis"]))
    if kind == "none":
        return None
    return draw(make(1 if kind == "one" else n))


@st.composite
def matmul_args(draw, max_work=4000, packed=False):
    """quantized_matmul's arguments; ``packed``: b int4/uint4 (ml_dtypes, C-contiguous), the
    form dmlq.Packed's bytes reach the kernels in."""
    adt, bdt, odt = (draw(st.sampled_from(QTYPES)) for _ in range(3))
    if packed:
        bdt = draw(st.sampled_from(FOUR_BIT))
    M, K, N = (draw(st.sampled_from(SIDES + (8, 16, 17, 33))) for _ in range(3))
    if M * N * max(K, 1) > max_work:
        K = max(1, max_work // max(M * N, 1))
    batch, (ba, bb) = _shapes(draw, 2, 3, max_dims=2)
    a = arranged(draw, int_arrays(adt, ba + (M, K)))
    b = draw(_b_ints(bdt, bb + (K, N))) if packed else draw(b_layout(draw(int_arrays(bdt, bb + (K, N)))))
    if draw(st.booleans()):
        # "matched" scales: out_scale near the spread of the products, so outputs are
        # spread over the range instead of saturated
        a_s = _per_axis(draw, M, lambda n: uniform_arrays(F32, n, 1e-3, 1.0), False)
        b_s = _per_axis(draw, N, lambda n: uniform_arrays(F32, n, 1e-3, 1.0), False)
        spread = float(np.max(a_s, initial=1e-3) * np.max(b_s, initial=1e-3)) * 128 * np.sqrt(max(K, 1))
        o_s = _per_axis(draw, M, lambda n: uniform_arrays(F32, n, spread / 8, spread * 2), False)
    else:
        a_s, b_s, o_s = (_per_axis(draw, n, lambda k: scale_arrays(F32, k), False)
                         for n in (M, N, M))
    a_zp, b_zp, o_zp = (_per_axis(draw, n, lambda k, t=t: _b_ints(t, (k,)) if isinstance(t, str) else
                                  int_arrays(t, k), True)
                        for n, t in ((M, adt), (N, bdt), (M, odt)))
    return dict(a=a, a_scale=a_s, a_zero_point=a_zp, b=b, b_scale=b_s, b_zero_point=b_zp,
                out_scale=o_s, out_zero_point=o_zp,
                out=draw(out_array(batch + (M, N), odt)))


@st.composite
def avg_pool_args(draw, max_work=6000):
    dt = draw(st.sampled_from(QTYPES))
    odt = dt if draw(st.booleans()) else draw(st.sampled_from(QTYPES))
    nd = draw(st.sampled_from([2, 3]))
    n, c = draw(st.sampled_from([0, 1, 2])), draw(st.sampled_from([0, 1, 2, 3]))
    n, c = (max(n, 1), max(c, 1)) if draw(st.integers(0, 9)) else (n, c)   # size 0 sometimes
    window, strides, dil, sp, ep, in_sp, out_sp = [], [], [], [], [], [], []
    ceil = draw(st.booleans())
    # One draw in 8: a global pool (the window is the image, no padding), which the small
    # windows below made 9 times in 10,000 draws, never over more than 27 elements (the
    # global kernels' loops past one warp's or one block's width never ran).
    global_pool = draw(st.integers(0, 7)) == 0
    for _ in range(nd):
        if global_pool:
            size = draw(st.integers(1, 20 if nd == 2 else 8))
            w, s, d, p0, p1 = size, draw(st.integers(1, 3)), 1, 0, 0
        else:
            w, s, d = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
            p0, p1 = draw(st.integers(0, 3)), draw(st.integers(0, 3))
            size = draw(st.sampled_from((0, 1, 2, 3, 5, 7) if nd == 2 else (0, 1, 2, 3, 5)))
        if size + p0 + p1 < (w - 1) * d + 1:    # the dilated window does not fit: grow the image
            size = (w - 1) * d + 1 - p0 - p1
        accepted = pool_output_accepted(size, w, s, p0, p1, d)    # floor, maybe floor + 1
        window.append(w), strides.append(s), dil.append(d), sp.append(p0), ep.append(p1)
        in_sp.append(size), out_sp.append(accepted[-1] if ceil else accepted[0])
    work = n * c * int(np.prod(out_sp)) * int(np.prod(window))
    if work > max_work:
        n, c = 1, 1
    x = arranged(draw, int_arrays(dt, (n, c) + tuple(in_sp)))
    per_channel = draw(st.booleans())
    cn = c if per_channel and c > 0 else 1

    def scales():
        if draw(st.booleans()):
            return draw(uniform_arrays(F32, cn, 1e-3, 1.0))
        return draw(scale_arrays(F32, cn))

    def zps(t):
        return draw(int_arrays(t, cn)) if draw(st.booleans()) else None

    return dict(x=x, x_scale=scales(), x_zero_point=zps(dt), out_scale=scales(),
                out_zero_point=zps(odt), out=draw(out_array((n, c) + tuple(out_sp), odt)),
                window_size=tuple(window), strides=tuple(strides), start_padding=tuple(sp),
                end_padding=tuple(ep), dilations=tuple(dil), include_padding=draw(st.booleans()))


# ---- the integer matmul family (backend form: a params () or (M, 1); b params (), (1, N),
# (G, N) with block_size, or b's batch shape + (1 or G, N); 4-bit b as ml_dtypes arrays)

FOUR_BIT = ("int4", "uint4")


def _four_bit(name):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


@st.composite
def _b_ints(draw, name, shape):
    """int8/uint8 values, or int4/uint4 (ml_dtypes) with their extremes and 0 often."""
    if name not in FOUR_BIT:
        return draw(int_arrays(np.dtype(name), shape))
    lo, hi = (-8, 7) if name == "int4" else (0, 15)
    rng, n = _rng(draw), int(np.prod(shape))
    parts = [rng.integers(lo, hi, n, endpoint=True), rng.choice(np.array(sorted({lo, lo + 1, hi - 1, hi, 0})), n)]
    return _mix(rng, draw, parts, n).reshape(shape).astype(_four_bit(name))


@st.composite
def intmm_args(draw, op, max_work=3000):
    """Arguments of matmul_integer (op "int") or matmul_integer_to_float (op "float"):
    per-tensor / per-row / per-column / per-batch zero points and scales (float32 or
    float16, specials included), bias (N,) / (M, N) / the output's shape, float16 out,
    block_size along K (not dividing K sometimes), 4-bit b."""
    adt = draw(st.sampled_from(QTYPES))
    # One draw in 8 of the float op: a weight-only layer's decode step, which the other
    # draws' sizes never make (10,000 of them ran stream-grouped-m1/-m4 25 times, -m16 never):
    # packed or 8-bit b, groups of 32-128 rows along K (a ragged last one sometimes), M <= 16;
    # groups of 40 and 100 (not a multiple of 32: one chunk of K per group).
    decode = op == "float" and draw(st.integers(0, 7)) == 0
    if decode:
        bname = draw(st.sampled_from(FOUR_BIT + ("int8", "uint8")))
        decode_block = draw(st.sampled_from((32, 64, 128, 40, 100)))
        M = draw(st.sampled_from((1, 2, 4, 5, 16)))
        K = decode_block * draw(st.integers(2, 3)) - draw(st.sampled_from((0, 0, 1, 7)))
        N = draw(st.sampled_from((1, 5, 8, 40)))
    else:
        bname = draw(st.sampled_from(("int8", "uint8") + FOUR_BIT))
        M, K, N = (draw(st.sampled_from(SIDES + (8, 16, 17, 33))) for _ in range(3))
        if M * N * max(K, 1) > max_work:
            K = max(1, max_work // max(M * N, 1))
    batch, (ba, bb) = _shapes(draw, 2, 3, max_dims=2)
    a = arranged(draw, int_arrays(adt, ba + (M, K)))
    b = draw(_b_ints(bname, bb + (K, N)))
    if bname not in FOUR_BIT:
        b = draw(b_layout(b))
    block = decode_block if decode else None
    if op == "float" and not decode and draw(st.booleans()):
        block = draw(st.sampled_from((1, 2, 3, 4, 32, 64)))
    rows = 1 if block is None else -(-K // block)
    per_batch = bool(bb) and any(d != 1 for d in bb)

    def b_param(make, allow_none, blocked):
        kind = draw(st.sampled_from((["none"] if allow_none else []) + ["one", "col"] + (["group"] if blocked else [])
                                    + (["batch"] if per_batch else [])))
        if kind == "none":
            return None
        r = rows if kind == "group" or (kind == "batch" and blocked and draw(st.booleans())) else 1
        shape = {"one": (), "col": (1, N), "group": (rows, N), "batch": bb + (r, N)}[kind]
        return make(shape)

    a_zp = draw(st.sampled_from([None, (), (M, 1)]))
    a_zp = None if a_zp is None else draw(int_arrays(adt, a_zp))
    b_zp = b_param(lambda s: draw(_b_ints(bname, s)), True, block is not None and rows > 0)
    if op == "int":
        return dict(a=a, a_zero_point=a_zp, b=b, b_zero_point=b_zp, out=draw(out_array(batch + (M, N), np.int32)))
    sdt = draw(st.sampled_from((F32, F32, F16)))
    scales = (lambda s: draw(uniform_arrays(sdt, s, 1e-3, 1.0))) if draw(st.booleans()) else \
        (lambda s: draw(scale_arrays(sdt, s)))
    a_s = scales(draw(st.sampled_from([(), (M, 1)])))
    b_s = b_param(scales, False, block is not None and rows > 0)
    bias = draw(st.sampled_from([None, (N,), (M, N), batch + (M, N)]))
    if bias is not None:
        bias = draw(float_arrays(draw(st.sampled_from((F32, F16))), bias))
    odt = draw(st.sampled_from((F32, F16)))
    return dict(a=a, a_scale=a_s, a_zero_point=a_zp, b=b, b_scale=b_s, b_zero_point=b_zp, bias=bias,
                out=draw(out_array(batch + (M, N), odt)), block_size=block)


# ---- the narrow types' kernels (cuda/quant_types.cu) -------------------------------

QT_SIDES = (1, 2, 3, 5, 7, 16, 17, 31, 33, 64, 67, 129)  # around the 8 ... 64-element groups
QT_BLOCKS = (1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 64, 100)


def _contiguous_at(a, offset):
    """A C-contiguous copy of a whose data starts `offset` elements into a fresh buffer (offset
    1: off 16-byte alignment, the kernels' element-by-element path)."""
    buf = np.empty(a.size + offset, a.dtype)
    view = buf[offset:].reshape(a.shape)
    view[...] = a
    return view


@st.composite
def qtypes_args(draw):
    """One call of cuda/quant_types.cu's quantize and of its dequantize back: a code type
    (every quantize code, ints 8...2 bits, float8, float4), x float32 / float16 / bfloat16 / int32 of 1-3
    dimensions around the 16-byte groups (at most 4096 elements), parameters per tensor (by value
    or a 1-element array), per axis (one vector, as dmlq hands it over, or of x's rank) or blocked
    along any axis (ragged last blocks), float32
    scales 1e-30 ... 1e30 with specials, zero points anywhere in the code's range or a given 0
    for float codes, saturate, the division's precision, x and y aligned or not. A dict with
    qname, x, y_dtype, y_offset, scale / zero point for the kernels and for the reference (which
    broadcasts them), the kernels' ParamLayout and its kind, saturate, precision."""
    from dmlq import reference as ref
    from dmlq.gpu import qkernels as qk
    from dmlq.qtypes import QTYPES

    # Uniform picks from a drawn seed (hypothesis' own draws lean to the first choice: side 1).
    pick = _rng(draw)
    qname = str(pick.choice(qk.QUANTIZE_CODES))
    q = QTYPES[qname]
    xdt = [F32, F16, BF16, np.dtype("int32")][pick.integers(4)]
    while True:
        shape = tuple(int(v) for v in pick.choice(QT_SIDES, pick.integers(1, 4)))
        if int(np.prod(shape)) <= 4096:
            break
    x = draw(int_arrays(xdt, shape)) if xdt.kind == "i" else draw(float_arrays(xdt, shape))
    x = _contiguous_at(x, int(pick.choice([0, 0, 1])))
    kind = str(pick.choice(["tensor", "tensor1", "axis", "vector", "blocked", "blocked"]))
    axis = block = None
    pshape = ()
    layout = qk.param_layout(shape)
    if kind == "tensor1":
        pshape = (1,)
    elif kind == "vector":  # per axis as dmlq.quant_gpu hands it over: one vector, every row sharing it (S = 0)
        axis = int(pick.integers(len(shape)))
        pshape = (shape[axis],)
        layout = qk.ParamLayout(int(np.prod(shape[axis:])), 1, 0, int(np.prod(shape[axis + 1:])))
    elif kind != "tensor":  # parameters of x's rank, blocks of 1 or more along `axis` (ONNX blocked)
        axis = int(pick.integers(len(shape)))
        block = 1 if kind == "axis" else int(pick.choice(QT_BLOCKS))
        pshape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
        layout = qk.param_layout(shape, axis, block)
    s = draw(scale_arrays(F32, pshape or (1,))).reshape(pshape)
    rng = _rng(draw)
    zr = None
    if q.is_float:
        if draw(st.booleans()):  # a given zero point is 0 (docs/semantics.md)
            zr = np.zeros(pshape, q.dtype)
    elif draw(st.integers(0, 2)):  # the range's ends, 0 and a random code, element by element
        lo, hi = int(q.qmin), int(q.qmax)
        picks = np.array([lo, hi, max(lo, 0), int(rng.integers(lo, hi, endpoint=True))], np.int64)
        zr = np.asarray(rng.choice(picks, pshape)).astype(q.dtype)
    if axis is None:
        se, ze = s.reshape(()), None if zr is None else zr.reshape(())
        ks = s.reshape(-1) if kind == "tensor1" else np.float32(s.reshape(-1)[0])
    elif kind == "vector":
        along = (-1,) + (1,) * (len(shape) - axis - 1)
        se, ze = s.reshape(along), None if zr is None else zr.reshape(along)
        ks = s
    else:
        se, ze = ref.expand_blocks(s, shape, axis, block), None if zr is None else ref.expand_blocks(zr, shape, axis, block)
        ks = s
    if zr is None:
        kz = None
    else:
        codes = zr.view(np.uint8).astype(np.int32) if q.is_float else zr.astype(np.int64).astype(np.int32)
        kz = codes.reshape(-1) if kind == "tensor1" else (int(codes.reshape(-1)[0]) if axis is None else codes)
    return dict(qname=qname, x=x, y_dtype=[F32, F16, BF16][pick.integers(3)], y_offset=int(pick.choice([0, 0, 1])),
                scale=ks, zero_point=kz, scale_ref=se, zero_point_ref=ze, layout=layout, kind=kind,
                saturate=bool(pick.integers(2)), precision=[None, None, "float16", "bfloat16"][pick.integers(4)])
