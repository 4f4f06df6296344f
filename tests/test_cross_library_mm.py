"""The matmul family and pooling give the same result on every array library: one seeded
call, made on NumPy arrays, on torch CPU tensors (eager, and a few under torch.compile), on
dask arrays of random chunks (K and the batch split too) and on the cupy stand-in's arrays
(the CUDA kernels on the host harness), must give the same bits (a NaN matches any NaN),
dtype, shape and result type, the same memory order where README's "Layout" promises one
(pooling: x's axis order), and ``out`` back where one is given; or every library refuses it
with the same exception class.

A cheap, bounded cut of the cross-library probe of 2026-11-28 (about 50,000 calls), which
found an a of M = 0 beside per-row parameters of no elements failing in dask's tasks, and an
empty ``out`` of zero strides refused under torch.compile; the cases here draw both.
Documented differences are left out: dask takes no ``out=`` (the call without it is
compared), a list scale is host memory beside GPU arrays, a 4-bit b is a dmlq.Packed on the
GPU, and inside torch.compile NumPy bools and ints and ml_dtypes scalars are passed as
Python values or tensors.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq

I8, U8, F32, F16, BF16 = np.int8, np.uint8, np.float32, np.float16, ml_dtypes.bfloat16
I4, U4 = ml_dtypes.int4, ml_dtypes.uint4
RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}
DATA = {"quantized_matmul": (0, 3), "matmul_integer": (0, 1), "matmul_integer_to_float": (0, 3, 6),
        "quantized_avg_pool": (0,)}
SEEDS = range(40)


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _ints(rng, dtype, shape):
    lo, hi = RANGE[np.dtype(dtype).name]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _layout(rng, v):
    """v's values as C order, Fortran order, a strided view or a reversed view."""
    kind = _pick(rng, ["c", "c", "f", "step", "neg"])
    if v.ndim == 0 or kind == "c":
        return v
    if kind == "f":
        return np.asfortranarray(v)
    if kind == "step":
        big = np.zeros(tuple(2 * n for n in v.shape), v.dtype)
        view = big[tuple(slice(None, None, 2) for _ in v.shape)]
        view[...] = v
        return view
    return np.ascontiguousarray(v[..., ::-1])[..., ::-1]


def _scale(rng, shape, dtypes):
    v = rng.uniform(0.005, 0.5, shape)
    if rng.random() < 0.1 and v.size:
        v.flat[0] = _pick(rng, [0.0, -0.0, np.inf, np.nan, -0.25])
    if shape == () and rng.random() < 0.4:
        return float(v)
    return _layout(rng, v.astype(_pick(rng, dtypes)))


def _zp(rng, dtype, shape):
    if rng.random() < 0.2:
        return None
    v = _ints(rng, dtype, shape)
    return v[()] if shape == () and rng.random() < 0.5 else v


def _matmul_case(rng):
    fname = _pick(rng, ["quantized_matmul", "matmul_integer", "matmul_integer_to_float"])
    adt, bdt = _pick(rng, [I8, U8]), _pick(rng, [I8, U8, I8, U4, I4])
    m, k, n = (int(_pick(rng, [0, 1, 2, 3, 5, 17])) for _ in range(3))
    k = int(_pick(rng, [k, 0, 1, 33]))
    ab, bb = _pick(rng, [((), ()), ((2,), (2,)), ((1,), (3,)), ((2, 1), (3,)), ((2,), ())])
    a, b = _layout(rng, _ints(rng, adt, ab + (m, k))), _ints(rng, bdt, bb + (k, n))
    if bdt in (I8, U8):
        b = _layout(rng, b)
    batch = np.broadcast_shapes(ab, bb)

    def rows(dtype=None, scales=(F32,), out=False):
        shape = _pick(rng, [(), (m, 1), (1, 1, m, 1), tuple(batch if out else ab) + (m, 1)])
        return _zp(rng, dtype, shape) if dtype else _scale(rng, shape, scales)

    def cols(dtype=None, scales=(F32,), groups=1):
        shape = _pick(rng, [(), (n,), (1, n), tuple(bb) + (1, n)] + ([(groups, n)] * 3 if groups > 1 else []))
        return _zp(rng, dtype, shape) if dtype else _scale(rng, shape, scales)

    kwargs = {}
    if fname == "matmul_integer":
        args, out_dtype = [a, b, rows(adt), cols(bdt)], np.int32
    elif fname == "quantized_matmul":
        out_dtype = _pick(rng, [I8, U8])
        s = (F32, F16, BF16)
        args = [a, rows(scales=s), rows(adt), b, cols(scales=s), cols(bdt), rows(scales=s, out=True),
                rows(out_dtype, out=True)]
        kwargs["dtype"] = out_dtype
    else:
        groups = 1
        if k and rng.random() < 0.4:
            kwargs["block_size"] = bs = int(_pick(rng, [1, 2, 4, 32]))
            groups = -(-k // bs)
        bias = _pick(rng, [None, (n,), batch + (m, n)])
        args = [a, rows(scales=(F32, F16)), rows(adt), b, cols(scales=(F32, F16), groups=groups),
                cols(bdt, groups=groups), None if bias is None else rng.uniform(-2, 2, bias).astype(F32)]
        out_dtype = kwargs["dtype"] = _pick(rng, [F32, F16])
    i = DATA[fname][1]  # b; its zero point is 2 further on
    if rng.random() < 0.4 and np.dtype(args[i].dtype).name in ("int4", "uint4"):  # a dmlq.Packed b (and zp)
        args[i] = dmlq.pack(args[i])
        if isinstance(args[i + 2], np.ndarray) and args[i + 2].ndim:
            args[i + 2] = dmlq.pack(args[i + 2])
    if rng.random() < 0.25:
        shape = batch + (m, n)
        kwargs["out"] = _layout(rng, np.zeros(shape, out_dtype))
    return fname, args, kwargs


def _pool_case(rng):
    nd = int(_pick(rng, [1, 2, 2, 3]))
    n, c = int(_pick(rng, [0, 1, 2])), int(_pick(rng, [1, 3, 4, 16]))
    spatial = tuple(int(_pick(rng, [1, 2, 3, 5, 7])) for _ in range(nd))
    x = _ints(rng, _pick(rng, [I8, U8]), (n, c) + spatial)
    if nd > 1 and rng.random() < 0.4:  # channels_last
        perm = (0,) + tuple(range(2, 2 + nd)) + (1,)
        x = np.ascontiguousarray(x.transpose(perm)).transpose(np.argsort(perm))
    else:
        x = _layout(rng, x)
    window = tuple(int(_pick(rng, [1, 2, 3])) for _ in range(nd))
    kw = dict(strides=tuple(int(_pick(rng, [1, 2])) for _ in range(nd)),
              start_padding=tuple(int(rng.integers(0, w)) for w in window),
              end_padding=tuple(int(rng.integers(0, w)) for w in window),
              dilations=tuple(int(_pick(rng, [1, 1, 2])) for _ in range(nd)),
              include_padding=bool(rng.random() < 0.5), ceil_mode=bool(rng.random() < 0.5),
              dtype=_pick(rng, [I8, U8]))

    def per(dtype=None):
        shape = _pick(rng, [(), (c,), (1, c) + (1,) * nd])
        return _zp(rng, dtype, shape) if dtype else _scale(rng, shape, (F32,))

    args = [x, per(), per(x.dtype), per(), per(kw["dtype"]), window]
    if rng.random() < 0.25:
        try:
            shape = dmlq.quantized_avg_pool(np.zeros(x.shape, x.dtype), *args[1:], **kw).shape
            kw["out"] = np.zeros(shape, kw["dtype"])
        except ValueError:
            pass
    return "quantized_avg_pool", args, kw


def case(seed):
    rng = np.random.default_rng([seed, 34])
    return _matmul_case(rng) if seed % 3 else _pool_case(rng)


# The edges the probe found, fixed here so that every run has them.
EDGES = {
    "M = 0, per batch and row": ("quantized_matmul", [
        np.zeros((2, 0, 5), U8), np.ones((2, 0, 1), F32), None, np.ones((5, 3), I8), 0.1, None,
        np.ones((2, 0, 1), F32), np.zeros((2, 0, 1), I8)], {}),
    "M = 0, per row with leading 1s": ("matmul_integer_to_float", [
        np.zeros((2, 0, 5), U8), np.ones((1, 1, 0, 1), F32), None, np.ones((5, 3), I8), 0.1, None, None], {}),
    "empty out of zero strides": ("matmul_integer_to_float", [
        np.zeros((0, 5), U8), 0.5, None, np.ones((5, 3), I8), 0.25, None], {"out": np.zeros((0, 3), F32)}),
}


def cases():
    return [(f"seed {s}", *case(s)) for s in SEEDS] + [(k, *v) for k, v in EDGES.items()]


# ------------------------------------------------------------------ running and comparing

def _attempt(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except (TypeError, ValueError, NotImplementedError) as e:
        return "err", e


def _as_numpy(r):
    """(type name, host copy, element strides or None) of a result of any library."""
    mod = type(r).__module__.partition(".")[0]
    if mod == "torch":
        return "torch", r.numpy(), tuple(r.stride())
    if mod == "dask":
        return "dask", r.compute(scheduler="sync"), None
    if mod in ("cupy", "cupy_stand_in"):
        h = r.get()
        return "cupy", h, tuple(s // h.itemsize for s in r.strides)
    return "numpy", r, tuple(s // r.itemsize for s in r.strides)


def _axis_order(strides, shape):
    return tuple(sorted((i for i, n in enumerate(shape) if n > 1), key=lambda i: -abs(strides[i])))


def check(what, fname, want, got, kind, out=None, layout=True):
    """got (a library's outcome) against want (NumPy's)."""
    if want[0] == "err" or got[0] == "err":
        assert (want[0], type(want[1])) == (got[0], type(got[1])), (what, kind, want[1], got[1])
        return
    if out is not None:
        assert got[1] is out, (what, kind, "out is not returned")
    tname, g, gs = _as_numpy(got[1])
    _, w, ws = _as_numpy(want[1])
    assert tname == kind, (what, tname, kind)
    assert (g.dtype, g.shape) == (w.dtype, w.shape), (what, kind, g.dtype, g.shape, w.dtype, w.shape)
    bits = np.dtype(f"u{w.itemsize}")
    bad = np.ascontiguousarray(g).view(bits) != np.ascontiguousarray(w).view(bits)
    if w.dtype.kind == "f":
        bad &= ~(np.isnan(g) & np.isnan(w))
    assert not bad.any(), (what, kind, f"{int(bad.sum())} of {bad.size} elements differ")
    if layout and fname == "quantized_avg_pool" and gs is not None and out is None:
        assert _axis_order(gs, w.shape) == _axis_order(ws, w.shape), (what, kind, gs, ws)
    if fname != "quantized_avg_pool" and gs is not None and out is None and g.size:  # the matmuls: C order
        c_order = tuple(int(np.prod(g.shape[i + 1:])) for i in range(g.ndim))
        assert all(n == 1 or st == c for n, st, c in zip(g.shape, gs, c_order)), (what, kind, gs)


def _reversed(args, kwargs):
    return any(isinstance(v, np.ndarray) and any(s < 0 for s in v.strides) for v in [*args, *kwargs.values()])


# ------------------------------------------------------------------ torch

def _tensor(torch, v):
    if not isinstance(v, np.ndarray):
        return v
    w = np.array(v, order="K") if any(s < 0 for s in v.strides) else v  # torch takes no negative strides
    name = v.dtype.name
    if name in ("int4", "uint4", "bfloat16"):
        base = {"int4": np.int8, "uint4": np.uint8, "bfloat16": np.uint16}[name]
        return torch.from_numpy(w.view(base)).view(getattr(torch, name))
    return torch.from_numpy(w)


def test_torch_eager_gives_numpy_bits():
    torch = pytest.importorskip("torch")
    for what, fname, args, kwargs in cases():
        want = _attempt(getattr(dmlq, fname), *args, **kwargs)
        tkw = {k: (_tensor(torch, v) if k == "out" else v) for k, v in kwargs.items()}
        got = _attempt(getattr(dmlq, fname), *(_tensor(torch, v) for v in args), **tkw)
        check(what, fname, want, got, "torch", tkw.get("out"), layout=not _reversed(args, kwargs))


def test_torch_compile_gives_eager_bits():
    torch = pytest.importorskip("torch")
    picked = [c for c in cases() if c[0] in ("seed 1", "seed 6", "seed 8", "empty out of zero strides")]
    for what, fname, args, kwargs in picked:
        want = _attempt(getattr(dmlq, fname), *args, **kwargs)
        tensors = [_tensor(torch, v) for v in args]
        out = None
        if "out" in kwargs:
            out = _tensor(torch, np.zeros(kwargs["out"].shape, kwargs["out"].dtype))
        kw = {k: v for k, v in kwargs.items() if k != "out"}
        torch._dynamo.reset()
        compiled = torch.compile(lambda o, *vs: getattr(dmlq, fname)(*vs, **kw, out=o), backend="aot_eager",
                                 fullgraph=True)
        got = _attempt(compiled, out, *tensors)
        check(what, fname, want, got, "torch", out, layout=not _reversed(args, kwargs))


# ------------------------------------------------------------------ dask

def _chunks(rng, shape):
    out = []
    for n in shape:
        cuts = sorted({int(c) for c in rng.integers(1, n, 2)}) if n > 1 else []
        pts = [0, *cuts, n]
        out.append(tuple(b - a for a, b in zip(pts, pts[1:])))
    return tuple(out)


def test_dask_any_chunking_gives_numpy_bits():
    """Data operands (a, b, x, the bias) as dask arrays cut at random, K and the batch too."""
    da = pytest.importorskip("dask.array")
    for i, (what, fname, args, kwargs) in enumerate(cases()):
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}  # dask takes no out= (README, "Dask")
        want = _attempt(getattr(dmlq, fname), *args, **kwargs)
        rng = np.random.default_rng([i, 35])
        dargs = [da.from_array(v, chunks=_chunks(rng, v.shape)) if j in DATA[fname] and isinstance(v, np.ndarray)
                 and v.ndim else v for j, v in enumerate(args)]
        got = _attempt(getattr(dmlq, fname), *dargs, **kwargs)
        try:  # (check computes the lazy result)
            check(what, fname, want, got, "dask")
        except (TypeError, ValueError) as e:  # a task failing at compute: report it as the difference
            raise AssertionError((what, "dask", f"failed at compute: {e}")) from None


# ------------------------------------------------------------------ the cupy stand-in (CUDA kernels)

def _device(S, v):
    cp = S.module
    if isinstance(v, dmlq.Packed):
        return dmlq.Packed(cp.asarray(v.data), v.shape, v.dtype)
    if not isinstance(v, np.ndarray):
        return v
    if v.dtype.name in ("int4", "uint4"):  # the GPU takes a 4-bit b as a dmlq.Packed (README)
        p = dmlq.pack(v)
        return dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)
    flips = tuple(slice(None, None, -1) if s < 0 else slice(None) for s in v.strides)
    w = v[flips]
    span = sum((n - 1) * s for n, s in zip(w.shape, w.strides)) + w.itemsize
    if w.size and span == w.size * w.itemsize:  # dense in some axis order: the same strides on the device
        flat = np.lib.stride_tricks.as_strided(w, (w.size,), (w.itemsize,)).copy()
        d = cp.lib.stride_tricks.as_strided(cp.asarray(flat), w.shape, w.strides)
    elif w.size:
        d = cp.zeros(tuple(2 * n for n in w.shape), w.dtype)[tuple(slice(None, None, 2) for _ in w.shape)]
        d[...] = cp.asarray(np.ascontiguousarray(w))
    else:
        d = cp.asarray(w)
    return d[flips]


def test_cupy_stand_in_gives_numpy_bits(cupy_stand_in):
    import cupy_stand_in as S

    for what, fname, args, kwargs in cases()[::2]:
        want = _attempt(getattr(dmlq, fname), *args, **kwargs)
        keep = (5,) if fname == "quantized_avg_pool" else ()
        dargs = [v if j in keep else _device(S, v) for j, v in enumerate(args)]
        dkw = {k: (_device(S, v) if k == "out" else v) for k, v in kwargs.items()}
        got = _attempt(getattr(dmlq, fname), *dargs, **dkw)
        check(what, fname, want, got, "cupy", dkw.get("out"))
