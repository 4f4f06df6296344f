"""One element-wise call, every array library: the same bits, or the same refusal.

dmlq promises that quantize_linear, dequantize_linear, quantized_add and dynamic_quantize_linear
give the same result (bits, NaN matching NaN; dtype; shape) on NumPy arrays, torch CPU tensors
(eager and inside torch.compile), dask arrays of any chunking and CuPy arrays (here the cupy
stand-in), each in its own library, or that every library refuses the call with the same
exception class (README "API", "torch", "Dask"). A seeded, bounded sample of calls, valid and
near-valid, drawn over the input dtypes (bfloat16 and the ml_dtypes types included), the
parameter forms (numbers, NumPy scalars, 0-d, size-1, broadcasting, ONNX per-axis with negative
axes, blocked with ragged blocks, lists), the layouts (permuted, reversed, strided, stride 0)
and the edge values (NaN, inf, -0, subnormals, ties, zero points at the extremes), run on NumPy
(the expected answer) and compared on each other library. A larger run of the same generator
found the compiled-call defects pinned below it.
"""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from conftest import assert_same

import dmlq  # noqa: E402

SEED = 34
N_CALLS = 60
NARROW = ("int4", "uint4", "int2", "uint2")
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
         "int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}
EDGES = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-45, 3e38, 70000.0, 0.5, -2.5, 127.5],
                 np.float64)


def _dt(name):
    return np.dtype(getattr(ml_dtypes, name) if name in NARROW + FLOAT8 + ("bfloat16",) else name)


class Arr:
    """A C-order NumPy base and a layout (None, ("perm", axes), ("flip", axis), ("step", axis) or
    ("bcast", shape)) that each library applies with its own operations."""

    def __init__(self, base, how=None, packed=False):
        self.base, self.how, self.packed = np.ascontiguousarray(base), how, packed

    def on(self, lib, chunks_rng=None, cp=None):
        a, how = self.base, self.how
        if self.packed:  # a float8_e8m0fnu scale as dmlq.Packed of its codes (the GPU's form), in any call
            codes = a.view(np.uint8).reshape(-1)
            return dmlq.Packed(cp.asarray(codes) if lib == "cupy" else codes, a.shape, "float8_e8m0fnu")
        if lib == "torch":
            a = _tensor(a)
        elif lib == "dask":
            import dask.array as da

            a = da.from_array(a, chunks=tuple(_chunks(chunks_rng, d) for d in a.shape))
        elif lib == "cupy":
            if a.dtype.name in NARROW + FLOAT8:  # (CuPy has no such dtype: ONNX's bytes, as dmlq.Packed)
                p = dmlq.pack(self.on("numpy"))
                return dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)
            a = cp.asarray(a)
        if how is None:
            return a
        if how[0] == "perm":
            return a.permute(how[1]) if lib == "torch" else a.transpose(how[1])
        if how[0] == "bcast":
            if lib == "torch":
                return a.expand(how[1])
            if lib == "dask":
                import dask.array as da

                return da.broadcast_to(a, how[1])
            return (cp or np).broadcast_to(a, how[1])
        if how[0] == "flip" and lib == "torch":  # (torch has no negative strides: a reversed copy)
            return a.view(_bytes_dtype(a)).flip(how[1]).view(a.dtype)
        idx = [slice(None)] * a.ndim
        idx[how[1]] = slice(None, None, 2) if how[0] == "step" else slice(None, None, -1)
        return a[tuple(idx)]


def _chunks(rng, d):
    out = []
    while sum(out) < d:
        out.append(int(rng.integers(1, d - sum(out) + 1)))
    return tuple(out) or (0,)


def _bytes_dtype(t):
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]


def _tensor(a):
    import torch

    if a.dtype.name in NARROW + FLOAT8 + ("bfloat16",):
        b = torch.from_numpy(a.view(f"u{a.itemsize}").copy())
        return b.view(torch.uint8 if a.itemsize == 1 else torch.int16).view(getattr(torch, a.dtype.name))
    return torch.from_numpy(a.copy())


def _layout(rng, a):
    if a.ndim == 0 or rng.random() < 0.5:
        return Arr(a)
    how = ["perm", "flip", "step", "bcast"][int(rng.integers(4))]
    ax = int(rng.integers(a.ndim))
    if how == "perm" and a.ndim > 1:
        axes = tuple(int(i) for i in rng.permutation(a.ndim))
        return Arr(a.transpose(np.argsort(axes)), ("perm", axes))
    if how == "flip":
        return Arr(np.flip(a, ax), ("flip", ax))
    if how == "step":
        return Arr(np.repeat(a, 2, axis=ax), ("step", ax))
    if how == "bcast" and a.shape[0] > 1:
        return Arr(a[:1], ("bcast", a.shape))
    return Arr(a)


def _shape(rng):
    return tuple(int(rng.choice([0, 1, 2, 3, 5, 8])) if rng.random() < 0.1 else int(rng.choice([1, 2, 3, 5, 8]))
                 for _ in range(int(rng.choice([0, 1, 2, 2, 3]))))


def _floats(rng, shape, dt):
    v = rng.standard_normal(shape) * 30
    if v.size and rng.random() < 0.6:
        v.reshape(-1)[rng.integers(0, v.size, 3)] = rng.choice(EDGES, 3)
    with np.errstate(all="ignore"):
        return v.astype(np.float32).astype(dt)


def _params(rng, shape, sdt, qname, gpu):
    """(scale, zero point, keywords) in one of the parameter forms."""
    forms = ["number", "npscalar", "0d", "bcast", "axis", "block"] + ([] if gpu else ["list"])
    form = forms[int(rng.integers(len(forms)))] if shape else "number"
    kw = {}
    ax = int(rng.integers(len(shape))) if shape else 0
    pshape = {"0d": (), "bcast": tuple(d if rng.random() < 0.5 else 1 for d in shape), "axis": shape[ax:ax + 1],
              "list": shape[-1:]}.get(form)
    if form in ("axis", "block"):
        kw["axis"] = ax - len(shape) if rng.random() < 0.5 else ax
    if form == "block":
        kw["block_size"] = bs = int(rng.choice([1, 2, 3]))
        pshape = shape[:ax] + (-(-shape[ax] // bs),) + shape[ax + 1:]
    s = (np.abs(rng.standard_normal(pshape or ())) * 0.05 + 0.002).astype(np.float32).astype(sdt)
    scale = float(s) if form == "number" else s.astype(np.float32)[()] if form == "npscalar" else \
        s.astype(np.float32).tolist() if form == "list" else s
    if form not in ("number", "npscalar", "list") and rng.random() < 0.15:  # float8_e8m0fnu codes, packed
        codes = rng.integers(118, 136, np.shape(s), endpoint=True).astype(np.uint8)
        if s.size:
            codes.reshape(-1)[0] = rng.choice([0, 255, 127])  # 2**-127 (a float32 subnormal), NaN, 1
        scale = Arr(codes.view(ml_dtypes.float8_e8m0fnu), packed=True)
    lo, hi = RANGE.get(qname, (0, 0))
    if rng.random() < 0.3 or qname in FLOAT8 or (gpu and qname in NARROW) or isinstance(scale, Arr):
        zp = None
    elif form in ("number", "npscalar", "list"):
        zp = int(rng.choice([lo, hi, (lo + hi) // 2]))
    else:
        zp = rng.integers(lo, hi, np.shape(s), endpoint=True).astype(_dt(qname))
        if zp.size and rng.random() < 0.5:
            zp.reshape(-1)[0] = hi
    return scale, zp, kw


def draw(rng, gpu=False):
    """One call: (function name, operands, keywords)."""
    f = ["quantize_linear", "dequantize_linear", "quantized_add", "dynamic_quantize_linear"][
        int(rng.choice(4, p=[.35, .35, .15, .15]))]
    shape = _shape(rng)
    if f == "quantize_linear":
        xdt = _dt(str(rng.choice(["float32", "float16", "bfloat16", "float64"], p=[.5, .2, .2, .1] if not gpu else
                                 [.5, .25, .25, 0])))
        q = str(rng.choice(["int8", "uint8", "int16", "int4", "uint2", "float8_e4m3fn", "float8_e5m2fnuz"]))
        scale, zp, kw = _params(rng, shape, xdt if rng.random() < 0.5 and xdt.name != "float64" else np.float32,
                                q, gpu)
        if zp is None or isinstance(zp, int):
            kw["dtype"] = _dt(q) if rng.random() < 0.7 else q
        if q in FLOAT8 and rng.random() < 0.5:
            kw["saturate"] = False
        return f, [_layout(rng, _floats(rng, shape, xdt)), _op(rng, scale), _op(rng, zp)], kw
    if f == "dequantize_linear":
        q = str(rng.choice(["int8", "uint8", "uint16", "int32", "int4", "uint2", "float8_e4m3fn"]))
        if q in FLOAT8:
            data = _floats(rng, shape, _dt(q))
        else:
            lo, hi = RANGE.get(q, (-2**31, 2**31 - 1))
            data = rng.integers(lo, hi, shape, endpoint=True).astype(_dt(q))
        scale, zp, kw = _params(rng, shape, _dt(str(rng.choice(["float32", "float16", "bfloat16"]))), q, gpu)
        if rng.random() < 0.2 or isinstance(scale, Arr):
            kw["dtype"] = _dt(str(rng.choice(["float32", "float16", "bfloat16"])))
        return f, [_layout(rng, data), _op(rng, scale), _op(rng, zp)], kw
    if f == "quantized_add":
        bshape = tuple(d if rng.random() < 0.7 else 1 for d in shape[int(rng.integers(len(shape) + 1)):])
        ops = []
        for sh in (shape, bshape):
            t = str(rng.choice(["int8", "uint8"]))
            lo, hi = RANGE[t]
            ops.append([_layout(rng, rng.integers(lo, hi, sh, endpoint=True).astype(t)),
                        float(np.float32(rng.random() * 0.1 + 0.001)), int(rng.choice([lo, hi, 0]))])
        out_zp = np.int8(int(rng.choice([-128, 127, 0])))
        return f, ops[0] + ops[1] + [_op(rng, np.float32(0.05)), out_zp], {}
    kw = {"per_row": bool(rng.random() < 0.5) and bool(shape)}
    if rng.random() < 0.7:
        kw["dtype"] = np.dtype(str(rng.choice(["int8", "uint8"])))
    return f, [_layout(rng, _floats(rng, shape, _dt(str(rng.choice(["float32", "float16"])))))], kw


def _op(rng, v):
    if isinstance(v, Arr):
        return v
    return Arr(v) if isinstance(v, np.ndarray) and (v.ndim == 0 or rng.random() < 0.7) else \
        _layout(rng, v) if isinstance(v, np.ndarray) else v


def run(lib, f, operands, kw, chunks_rng=None, cp=None):
    """('ok', result as NumPy) or ('raised', exception class), after checking the result's library."""
    args = [v.on(lib, chunks_rng, cp) if isinstance(v, Arr) else v for v in operands]
    try:
        got = getattr(dmlq, f)(*args, **kw)
    except (TypeError, ValueError, NotImplementedError) as e:
        return "raised", type(e)
    return "ok", tuple(_host(r, lib) for r in (got if type(got) is tuple else (got,)))


def _host(r, lib):
    if lib == "torch":
        import torch

        assert isinstance(r, torch.Tensor), type(r)
        name = str(r.dtype).replace("torch.", "")
        u = r.view(_bytes_dtype(r)).contiguous().numpy()
        if name in NARROW:
            bits = int(name[-1])
            u = (u & (1 << bits) - 1).astype(np.int16)
            u = np.where(u >= 1 << bits - 1, u - (1 << bits), u) if name[0] == "i" else u
            return u.astype(_dt(name))
        return u.view(_dt(name) if name in FLOAT8 + ("bfloat16",) else r.numpy().dtype)
    if lib == "dask":
        import dask.array as da

        assert isinstance(r, da.Array), type(r)
        return r.compute(scheduler="sync")
    if lib == "cupy":
        if isinstance(r, dmlq.Packed):
            return dmlq.unpack(dmlq.Packed(r.data.get(), r.shape, r.dtype))
        assert type(r).__module__.startswith("cupy"), type(r)
        return r.get()
    assert isinstance(r, np.ndarray), type(r)
    return r


def _calls(seed, n, gpu=False):
    rng = np.random.default_rng(seed)
    return [draw(rng, gpu) for _ in range(n)]


def _compare(lib, calls, seed, run_on=run):
    bad = []
    rng = np.random.default_rng(seed)
    for i, (f, operands, kw) in enumerate(calls):
        want = run("numpy", f, operands, kw)
        got = run_on(lib, f, operands, kw, rng)
        if want[0] != got[0] or (want[0] == "raised" and want[1] is not got[1]):
            bad.append(f"call {i} {f} {kw}: numpy {want} | {lib} {got}")
            continue
        if want[0] == "ok":
            for w, g in zip(want[1], got[1]):
                try:
                    assert_same(g, w, f"call {i} {f} {kw} on {lib}")
                except AssertionError as e:
                    bad.append(str(e)[:300])
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("lib", ["torch", "dask"])
def test_numpy_torch_dask_agree(lib):
    pytest.importorskip("dask.array" if lib == "dask" else lib)
    _compare(lib, _calls(SEED, N_CALLS), SEED)


def test_stand_in_agrees(cupy_stand_in):
    """The GPU path (the CUDA kernels on the host harness) on calls it takes: no list
    parameters, no float8 or NumPy-typed narrow zero points (README: a GPU zero point must
    have the output's type already, a float8 one is None or 0)."""
    _compare("cupy", _calls(SEED + 1, 12, gpu=True), SEED,
             run_on=lambda *a: run(*a, cp=cupy_stand_in))


# ------------------------------------------------------------------ inside torch.compile

def _compiled(lib, f, operands, kw, rng):
    import torch

    tensors = [v.on("torch") if isinstance(v, Arr) else v for v in operands]
    where = [i for i, v in enumerate(tensors) if isinstance(v, torch.Tensor)]

    def fn(*ts):
        args = list(tensors)
        for i, t in zip(where, ts):
            args[i] = t
        return getattr(dmlq, f)(*args, **kw)
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, backend="aot_eager", fullgraph=True)(*[tensors[i] for i in where])
    except (TypeError, ValueError, NotImplementedError) as e:
        return "raised", type(e)
    except Exception as e:  # a refusal made while tracing comes inside torch's own error (README "torch")
        cls = _named(str(e)) if type(e).__name__ in ("Unsupported", "TorchRuntimeError") else None
        if cls is None:  # (not an InternalTorchDynamoError: that is torch's "report a bug")
            raise
        return "raised", cls
    return "ok", tuple(_host(r, "torch") for r in (got if type(got) is tuple else (got,)))


def _named(message):
    for cls in (dmlq.DescError, dmlq.UnsupportedError, TypeError, ValueError):
        if f"{cls.__name__}(" in message:
            return cls
    return None


def test_compiled_calls_agree():
    """A few drawn calls compiled (fullgraph=True) while a cupy module is imported, as on any
    machine that ran a CuPy call (dmlq's CUDA-graph guard then looks at each argument)."""
    pytest.importorskip("torch")
    import cupy_stand_in

    calls = [c for c in _calls(SEED + 2, 40) if any(isinstance(v, Arr) for v in c[1])][:6]
    with cupy_stand_in.installed(run_kernels=False):
        _compare("torch", calls, SEED, run_on=_compiled)


@pytest.mark.parametrize("call", [
    # dtype= a NumPy dtype object (hasattr on it broke Dynamo's trace: fullgraph=True failed, with CuPy imported)
    ("dynamic_quantize_linear", [Arr(np.linspace(-2, 3, 12, dtype=np.float32).reshape(3, 4))],
     {"dtype": np.dtype(np.int8), "per_row": True}),
    ("quantize_linear", [Arr(np.linspace(-2, 3, 12, dtype=np.float32)), 0.02], {"dtype": np.dtype("int4")}),
    # data given as lists or numbers beside a tensor scale (they reached the op's schema: torch's RuntimeError)
    ("quantize_linear", [[1.0, -2.5, 3e38, -0.0, float("nan")], Arr(np.array(0.5, np.float32))],
     {"dtype": np.int8}),
    ("quantize_linear", [1.25, Arr(np.array(0.5, np.float32))], {"dtype": np.int8}),
    ("quantize_linear", [[[1], [2]], Arr(np.array([[0.5], [0.25]], np.float32))], {}),
    ("quantize_linear", [[1e300], Arr(np.array(0.5, np.float32))], {}),
    ("quantize_linear", [[True], Arr(np.array(0.5, np.float32))], {}),
    ("dequantize_linear", [[1, 2], Arr(np.array(0.5, np.float32))], {}),
    ("quantized_add", [Arr(np.array([1, 2], np.int8)), 0.5, 0, [1, 2], Arr(np.array(0.5, np.float32)), 0, 0.5],
     {}),
], ids=["dynamic-np-dtype", "quantize-np-dtype-int4", "quantize-list-x", "quantize-number-x", "quantize-int-list-x",
        "quantize-list-x-past-float32", "quantize-bool-list-x", "dequantize-list-q", "add-list-b"])
def test_compiled_call_as_eager(call):
    pytest.importorskip("torch")
    import cupy_stand_in

    with cupy_stand_in.installed(run_kernels=False):
        _compare("torch", [call], SEED, run_on=_compiled)
        _compare("torch", [call], SEED)  # (eager torch against NumPy too)


@pytest.mark.parametrize("dtype", ["complex128", "nonsense"])
@pytest.mark.parametrize("fullgraph", [True, False])
def test_compiled_dtype_refusal_as_eager(dtype, fullgraph):
    """A dtype= torch holds no tensor of (complex128: NumPy's, no quantized type) or no dtype at all: the
    eager call's TypeError (inside torch's Unsupported with fullgraph=True), not Dynamo's
    InternalTorchDynamoError (the refusal was raised inside assume_constant_result)."""
    torch = pytest.importorskip("torch")
    x = torch.linspace(-1, 1, 6)
    with pytest.raises(TypeError, match="quantize_linear: dtype"):
        dmlq.quantize_linear(x, 0.5, dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: dmlq.quantize_linear(t, 0.5, dtype=dtype), backend="aot_eager",
                             fullgraph=fullgraph)
    with pytest.raises(Exception) as info:
        compiled(x)
    if fullgraph:
        assert type(info.value).__name__ == "Unsupported"
        assert re.search(r"TypeError\(['\"]quantize_linear: dtype", str(info.value))
    else:
        assert type(info.value) is TypeError and str(info.value).startswith("quantize_linear: dtype")


# ------------------------------------------------------------------ dask: a Packed e8m0 scale

_E8M0_CODES = np.array([[0], [1], [126], [127], [254], [255]], np.uint8)  # 2**-127 (subnormal) ... NaN


@pytest.mark.parametrize("f", ["quantize_linear", "dequantize_linear"])
def test_dask_takes_a_packed_e8m0_scale(f):
    """A float8_e8m0fnu scale as a dmlq.Packed of its codes (the GPU's form; NumPy takes it too)
    beside a dask array of NumPy chunks: the one-array result. It reached dask's blocks as a
    tuple (NumPy's "inhomogeneous shape" ValueError)."""
    da = pytest.importorskip("dask.array")
    data = (np.linspace(-3, 3, 30, dtype=np.float32).reshape(6, 5) if f == "quantize_linear" else
            np.arange(-15, 15, dtype=np.int8).reshape(6, 5))
    scale = dmlq.Packed(_E8M0_CODES.reshape(-1), (6, 1), "float8_e8m0fnu")
    kw = {"dtype": np.int8} if f == "quantize_linear" else {"dtype": np.float32}
    want = getattr(dmlq, f)(data, scale, **kw)
    assert_same(want, getattr(dmlq, f)(data, _E8M0_CODES.view(ml_dtypes.float8_e8m0fnu), **kw))
    got = getattr(dmlq, f)(da.from_array(data, chunks=((1, 3, 2), (2, 3))), scale, **kw)
    assert_same(got.compute(scheduler="sync"), want)
    if f == "dequantize_linear":  # the one-array call's refusal, made when the graph is built
        with pytest.raises(TypeError, match="dtype= is required with a float8_e8m0fnu scale"):
            dmlq.dequantize_linear(da.from_array(data, chunks=2), scale)


@pytest.mark.parametrize("f", ["quantize_linear", "dequantize_linear"])
def test_dask_cupy_chunks_take_a_packed_e8m0_scale(f, cupy_stand_in):
    """The same beside dask arrays of CuPy chunks (the stand-in), the scale's codes in CuPy: it
    was CuPy's "Implicit conversion to a NumPy array" TypeError, naming nothing."""
    da = pytest.importorskip("dask.array")
    cp = cupy_stand_in
    data = (np.linspace(-3, 3, 30, dtype=np.float32).reshape(6, 5) if f == "quantize_linear" else
            np.arange(-15, 15, dtype=np.int8).reshape(6, 5))
    kw = {"dtype": np.int8} if f == "quantize_linear" else {"dtype": np.float32}
    want = getattr(dmlq, f)(data, _E8M0_CODES.view(ml_dtypes.float8_e8m0fnu), **kw)
    scale = dmlq.Packed(cp.asarray(_E8M0_CODES.reshape(-1)), (6, 1), "float8_e8m0fnu")
    assert_same(getattr(dmlq, f)(cp.asarray(data), scale, **kw).get(), want)
    lazy = getattr(dmlq, f)(da.from_array(cp.asarray(data), chunks=((1, 3, 2), (2, 3)), asarray=False), scale, **kw)
    got = lazy.compute(scheduler="sync")
    assert type(got).__module__.startswith("cupy")
    assert_same(got.get(), want)
    if f == "dequantize_linear":  # q a Packed of lazy int4 bytes (dmlq.packed_dask) beside the scale
        q4 = (np.arange(30) % 16 - 8).astype(ml_dtypes.int4).reshape(6, 5)
        p = dmlq.pack(q4)
        lazy_q = dmlq.Packed(da.from_array(cp.asarray(p.data), chunks=4, asarray=False), p.shape, p.dtype)
        got = dmlq.dequantize_linear(lazy_q, scale, dtype=np.float32).compute(scheduler="sync")
        assert_same(got.get(), dmlq.dequantize_linear(q4, _E8M0_CODES.view(ml_dtypes.float8_e8m0fnu),
                                                      dtype=np.float32))
        with pytest.raises(TypeError, match="dtype= is required with a float8_e8m0fnu scale"):
            dmlq.dequantize_linear(lazy_q, scale)


@pytest.mark.parametrize("qshape,sshape", [((2,), (1, 2)), ((4,), (3, 1)), ((), (3,)), ((2, 3), (5, 1, 3))])
def test_dask_cupy_packed_q_widened_by_its_scale(qshape, sshape, cupy_stand_in):
    """A lazy Packed q (dask bytes of CuPy chunks) whose scale has more dimensions, or broadcasts
    it wider: the broadcast result, as NumPy, CuPy and dask of NumPy chunks give it. dmlq.packed_dask
    cut the operands to q's own shape (dask's "Chunks and shape must be of the same length")."""
    da = pytest.importorskip("dask.array")
    cp = cupy_stand_in
    q = (np.arange(max(1, math.prod(qshape))) % 3).astype(ml_dtypes.int4).reshape(qshape)
    scale = np.linspace(0.5, 2, math.prod(sshape), dtype=np.float32).reshape(sshape)
    want = dmlq.dequantize_linear(q, scale)
    assert_same(dmlq.dequantize_linear(da.from_array(q, chunks=1), scale).compute(scheduler="sync"), want)
    p = dmlq.pack(q)
    lazy = dmlq.Packed(da.from_array(cp.asarray(p.data), chunks=1, asarray=False), p.shape, p.dtype)
    got = dmlq.dequantize_linear(lazy, cp.asarray(scale))
    assert got.shape == want.shape
    assert_same(got.compute(scheduler="sync").get(), want)
