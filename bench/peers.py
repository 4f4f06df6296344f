"""The implementations every group is timed with: dmlq (``dmlq:auto`` through the
public functions, ``dmlq:<variant>`` forced through dmlq.gpu) and the peers
(CuPy expressions and ElementwiseKernels, torch), each prepared as a ready-to-time
call on fresh random data, rotated among several buffers when one set would sit
in L2; and the CUDA-graph sequence (quantize -> add -> dequantize).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import itertools
import math
import statistics
import sys

import numpy as np

from bench.timing import measure, random_array
from bench.workloads import OVERHEAD_N


# ----------------------------------------------------------------- implementations

GPU_MODULES = {"quantize": "elementwise", "dequantize": "elementwise", "add": "elementwise",
               "overhead": "elementwise", "matmul": "matmul", "avgpool": "avgpool", "dynquant": "dynquant"}

PEERS = {
    "quantize": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.quantize_per_tensor"),
    "dequantize": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.dequantize"),
    "add": ("peer:cupy-expr", "peer:cupy-elementwise", "peer:torch.dequantize+add+quantize"),
    "matmul": ("peer:torch._int_mm+requant", "peer:torch._int_mm", "peer:cupy-matmul-f16",
               "peer:cupy-matmul-f32"),
    "avgpool": ("peer:cupy-expr", "peer:torch.avg_pool-f16"),
    "dynquant": ("peer:cupy-expr", "peer:torch.aminmax+quantize_per_tensor"),
    "overhead": ("peer:cupy-elementwise", "peer:cupy-expr", "peer:torch.quantize_per_tensor"),
    "graph": ("peer:cupy-elementwise-eager", "peer:cupy-elementwise-graph"),
}


class Unavailable(Exception):
    """This implementation cannot run this case here; the message says why."""


def gpu_module(op):
    try:
        return importlib.import_module(f"dmlq.gpu.{GPU_MODULES[op]}")
    except Exception as e:  # noqa: BLE001 - a missing/broken module skips, with its reason
        raise Unavailable(f"dmlq.gpu.{GPU_MODULES[op]} not importable ({type(e).__name__}: {e})") from e


def dmlq_variants(op):
    """The kernel variants of ``op``'s GPU module (empty when it cannot be imported)."""
    if op not in GPU_MODULES:
        return ()
    try:
        return tuple(gpu_module(op).VARIANTS)
    except (Unavailable, AttributeError):
        return ()


def _applicable(case, names):
    """Drop pooling variants that cannot run the case (dmlq.gpu.avgpool.applicable, pure Python)."""
    if case.op != "avgpool":
        return names
    p = case.p
    shape = p["shape"]
    cstrides = _pool_strides(shape, p.get("channels_last", False))
    args = (shape, cstrides, p["out"], p["window"], p["strides"], p["pad"], p["pad"],
            (1,) * len(p["window"]), False)
    try:
        check = gpu_module(case.op).applicable
        return tuple(v for v in names if check(v, *args))
    except Exception:  # noqa: BLE001 - without the filter, prepare() skips what does not apply
        return names


def case_impls(cases, variants=True):
    """[(group, impl)] for every implementation of every case (pytest parameters)."""
    return [(c.group, impl) for c in cases for impl in impl_names(c, variants)]


def impl_names(case, variants=True):
    if case.op == "graph":
        dm = ["dmlq:eager", "dmlq:graph"]
    else:
        names = _applicable(case, dmlq_variants(case.op)) if variants else ()
        dm = ["dmlq:auto"] + (["dmlq:auto:w.T"] if case.op == "matmul" else []) + [f"dmlq:{v}" for v in names]
    peers = list(PEERS[case.op])
    if case.op == "quantize" and case.p.get("axis"):
        peers[-1] = "peer:torch.quantize_per_channel"
    return dm + peers


@dataclasses.dataclass
class Prepared:
    """A ready-to-time call: ``fn()`` enqueues one operation (no sync)."""

    fn: object
    bytes: int
    ops: int
    limit: float | None
    stream: object = None
    keep: object = None  # buffers a captured graph reads and writes


def _need_torch():
    if importlib.util.find_spec("torch") is None:
        raise Unavailable("torch is not installed")
    import cupy
    import torch

    if not torch.cuda.is_available():
        raise Unavailable("torch has no CUDA support here")
    if cupy.cuda.get_current_stream().ptr != 0:  # events are recorded on CuPy's stream
        raise Unavailable("torch peers run on the legacy default stream; CuPy's current stream is another")
    return torch


def _to_torch(arr):
    import torch

    return torch.from_dlpack(arr)


def _rotating(call, sets):
    """A no-argument callable running ``call(*set)`` over ``sets`` in turn."""
    if len(sets) == 1:
        args = sets[0]
        return lambda: call(*args)
    cycle = itertools.cycle(sets)
    return lambda: call(*next(cycle))


def _n_sets(bytes_per_set, limits, cap=16):
    """Enough buffer sets that a round-robin over them streams from HBM, not L2."""
    need = 4 * limits.facts["l2_bytes"]
    return 1 if bytes_per_set >= need else min(cap, math.ceil(need / bytes_per_set))


def _api(name):
    import dmlq

    fn = getattr(dmlq, name, None)
    if fn is None:
        raise Unavailable(f"dmlq.{name} is not defined yet")
    return fn


# dmlq refusing a forced variant (UnsupportedError, DescError) skips; anything else fails.
_DMLQ_SKIPS = (NotImplementedError, ValueError)


def _check_runs(fn, impl):
    """Run once (compiles kernels, surfaces refusals) and wait for the GPU."""
    import cupy

    try:
        fn()
        cupy.cuda.get_current_stream().synchronize()
    except Unavailable:
        raise
    except _DMLQ_SKIPS as e:
        raise Unavailable(f"{impl} refused this case ({type(e).__name__}: {e})") from e
    except Exception as e:
        if impl.startswith("peer:"):  # a peer's limitation, not ours
            raise Unavailable(f"{impl} failed here ({type(e).__name__}: {e})") from e
        raise


def prepare(case, impl, limits, seed):
    """Buffers and a timed callable for ``impl`` on ``case``; raises Unavailable."""
    import cupy

    builder = BUILDERS.get(case.op)
    if builder is None:
        raise Unavailable(f"no builder for {case.op!r}")
    prep = builder(case, impl, limits, seed)
    if prep.stream is not None:
        with prep.stream:
            _check_runs(prep.fn, impl)
    else:
        _check_runs(prep.fn, impl)
    cupy.cuda.get_current_stream().synchronize()
    return prep


def _qrange(dtype):
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


# ---- element-wise ------------------------------------------------------------------

_KERNELS: dict = {}


def _cupy_kernel(name):
    """Fused CuPy ElementwiseKernels of the same formulas (the strongest CuPy peer)."""
    import cupy

    if name not in _KERNELS:
        src = {
            "quantize": ("X x, float32 s, int32 zp, float32 qmin, float32 qmax", "Q q",
                         "float r = rintf((float)x / s);"
                         "r = fminf(fmaxf(r, qmin - (float)zp), qmax - (float)zp);"
                         "q = (Q)((int)r + zp);"),
            "dequantize": ("T q, int32 zp, float32 s", "Y y", "y = (Y)((float)((int)q - zp) * s);"),
            "add": ("A a, B b, float32 sa, int32 za, float32 sb, int32 zb, float32 so, int32 zo,"
                    " float32 qmin, float32 qmax", "Q q",
                    "float v = (float)((int)a - za) * sa + (float)((int)b - zb) * sb;"
                    "float r = rintf(v / so);"
                    "r = fminf(fmaxf(r, qmin - (float)zo), qmax - (float)zo);"
                    "q = (Q)((int)r + zo);"),
        }[name]
        _KERNELS[name] = cupy.ElementwiseKernel(*src, f"dmlq_bench_peer_{name}")
    return _KERNELS[name]


def _scale_zp(case, seed, rows_cols, scale_dtype, zp_dtype, scale, zp):
    """Per-tensor (shape (1,)) or per-axis (shape (1, cols)) scale and zero point."""
    import cupy

    if case.p.get("axis"):
        shape = (1, rows_cols[1])
        s = random_array(shape, scale_dtype, seed + 101, 0.5 * scale, 1.5 * scale)
        lo, hi = _qrange(zp_dtype)
        z = random_array(shape, zp_dtype, seed + 202, lo + 32, hi - 31)
        return s, z
    return cupy.full((1,), scale, scale_dtype), cupy.full((1,), zp, zp_dtype)


def _peer_params(s, z):
    """Scalars for per-tensor, int32/float32 arrays for per-axis (set up outside timing)."""
    import cupy

    if s.size == 1:
        return float(s[0]), int(z[0])
    return s.astype(cupy.float32), z.astype(cupy.int32)


def _unary_sets(case, seed, limits, in_dt, out_dt, qdt, fdt):
    """Quantize/dequantize workload: rotating (input, output) sets of case's 2-D shape,
    with the scale (float type ``fdt``) and zero point (``qdt``) of case's layout."""
    import cupy

    shape = case.p["shape"]
    n = shape[0] * shape[1]
    s, z = _scale_zp(case, seed, shape, fdt, qdt, 0.02, 128 if qdt == np.uint8 else -3)
    per_set = n * (in_dt.itemsize + out_dt.itemsize) + s.nbytes + z.nbytes
    sets = [(random_array(shape, in_dt, seed + 1 + i), cupy.empty(shape, out_dt))
            for i in range(_n_sets(per_set, limits))]
    return n, s, z, per_set, sets


def _dmlq_unary(case, impl, name, s, z, sets, per_set, n, limit):
    """dmlq:auto through the public function, dmlq:<variant> through the GPU module."""
    if impl == "dmlq:auto":
        api = _api(name)
        return Prepared(_rotating(lambda x, o: api(x, s, z, out=o), sets), per_set, n, limit)
    fn, v = getattr(gpu_module(case.op), name), impl[5:]
    return Prepared(_rotating(lambda x, o: fn(x, s, z, o, variant=v), sets), per_set, n, limit)


def _build_quantize(case, impl, limits, seed):
    import cupy

    xdt, qdt = np.dtype(case.p["x"]), np.dtype(case.p["q"])
    n, s, z, per_set, sets = _unary_sets(case, seed, limits, xdt, qdt, qdt, xdt)
    qmin, qmax = _qrange(qdt)
    limit = limits.copy_gb_per_s
    if impl.startswith("dmlq:"):
        return _dmlq_unary(case, impl, "quantize_linear", s, z, sets, per_set, n, limit)
    if impl == "peer:cupy-expr":
        zf = z.astype(cupy.float32)

        def expr(x, o):
            r = cupy.rint(x.astype(cupy.float32) / s.astype(cupy.float32))
            return (cupy.clip(r, qmin - zf, qmax - zf) + zf).astype(qdt)
        return Prepared(_rotating(expr, sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern, (ps, pz) = _cupy_kernel("quantize"), _peer_params(s, z)
        return Prepared(_rotating(lambda x, o: kern(x, ps, pz, qmin, qmax, o), sets), per_set, n, limit)
    torch = _need_torch()
    if xdt != np.float32:
        raise Unavailable(f"{impl} takes float32 input only")
    tq = torch.quint8 if qdt == np.uint8 else torch.qint8
    tsets = [(_to_torch(x),) for x, _ in sets]
    if impl == "peer:torch.quantize_per_tensor":
        fs, fz = float(s[0]), int(z[0])
        return Prepared(_rotating(lambda x: torch.quantize_per_tensor(x, fs, fz, tq), tsets),
                        per_set, n, limit)
    if impl == "peer:torch.quantize_per_channel":
        ts = _to_torch(s.reshape(-1).astype(cupy.float64))
        tz = _to_torch(z.reshape(-1).astype(cupy.int64))
        return Prepared(_rotating(lambda x: torch.quantize_per_channel(x, ts, tz, 1, tq), tsets),
                        per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


def _build_dequantize(case, impl, limits, seed):
    import cupy

    qdt, ydt = np.dtype(case.p["q"]), np.dtype(case.p["y"])
    n, s, z, per_set, sets = _unary_sets(case, seed, limits, qdt, ydt, qdt, ydt)
    limit = limits.copy_gb_per_s
    if impl.startswith("dmlq:"):
        return _dmlq_unary(case, impl, "dequantize_linear", s, z, sets, per_set, n, limit)
    if impl == "peer:cupy-expr":
        zi, sf = z.astype(cupy.int32), s.astype(cupy.float32)
        return Prepared(_rotating(lambda q, o: ((q.astype(cupy.int32) - zi).astype(cupy.float32) * sf)
                                  .astype(ydt), sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern, (ps, pz) = _cupy_kernel("dequantize"), _peer_params(s, z)
        return Prepared(_rotating(lambda q, o: kern(q, pz, ps, o), sets), per_set, n, limit)
    if impl == "peer:torch.dequantize":
        torch = _need_torch()
        if ydt != np.float32:
            raise Unavailable("torch dequantize produces float32 only")
        if case.p.get("axis"):
            ts = _to_torch(s.reshape(-1).astype(cupy.float64))
            tz = _to_torch(z.reshape(-1).astype(cupy.int64))
            make = lambda q: torch._make_per_channel_quantized_tensor(_to_torch(q), ts, tz, 1)  # noqa: E731
        else:
            fs, fz = float(s[0]), int(z[0])
            make = lambda q: torch._make_per_tensor_quantized_tensor(_to_torch(q), fs, fz)  # noqa: E731
        try:
            tsets = [(make(q),) for q, _ in sets]
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"{impl}: cannot wrap {qdt} as a torch quantized tensor ({e})") from e
        return Prepared(_rotating(lambda qt: qt.dequantize(), tsets), per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


def _build_add(case, impl, limits, seed):
    import cupy

    p = case.p
    shape = p["shape"]
    adt, bdt, qdt = np.dtype(p["a"]), np.dtype(p["b"]), np.dtype(p["q"])
    n = shape[0] * shape[1]
    zp = lambda dt, v: cupy.full((1,), v if dt == np.uint8 else v - 128, dt)  # noqa: E731
    sa, sb, so = (cupy.full((1,), v, np.float32) for v in (0.02, 0.03, 0.04))
    za, zb, zo = zp(adt, 120), zp(bdt, 131), zp(qdt, 127)
    per_set = 3 * n
    sets = [(random_array(shape, adt, seed + 1 + 2 * i), random_array(shape, bdt, seed + 2 + 2 * i),
             cupy.empty(shape, qdt)) for i in range(_n_sets(per_set, limits))]
    qmin, qmax = _qrange(qdt)
    limit = limits.copy_gb_per_s
    if impl == "dmlq:auto":
        api = _api("quantized_add")
        return Prepared(_rotating(lambda a, b, o: api(a, sa, za, b, sb, zb, so, zo, out=o), sets),
                        per_set, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda a, b, o: mod.quantized_add(a, sa, za, b, sb, zb, so, zo, o,
                                                                   variant=v), sets), per_set, n, limit)
    fa, fb, fo = (float(v[0]) for v in (sa, sb, so))
    ia, ib, io = (int(v[0]) for v in (za, zb, zo))
    if impl == "peer:cupy-expr":
        def expr(a, b, o):
            av = (a.astype(cupy.int32) - ia).astype(cupy.float32) * np.float32(fa)
            bv = (b.astype(cupy.int32) - ib).astype(cupy.float32) * np.float32(fb)
            r = cupy.rint((av + bv) / np.float32(fo))
            return (cupy.clip(r, qmin - io, qmax - io) + io).astype(qdt)
        return Prepared(_rotating(expr, sets), per_set, n, limit)
    if impl == "peer:cupy-elementwise":
        kern = _cupy_kernel("add")
        return Prepared(_rotating(lambda a, b, o: kern(a, b, fa, ia, fb, ib, fo, io, qmin, qmax, o), sets),
                        per_set, n, limit)
    if impl == "peer:torch.dequantize+add+quantize":
        torch = _need_torch()
        tq = torch.quint8 if qdt == np.uint8 else torch.qint8
        try:
            tsets = [(torch._make_per_tensor_quantized_tensor(_to_torch(a), fa, ia),
                      torch._make_per_tensor_quantized_tensor(_to_torch(b), fb, ib)) for a, b, _ in sets]
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"{impl}: cannot wrap the inputs as torch quantized tensors ({e})") from e
        return Prepared(_rotating(lambda a, b: torch.quantize_per_tensor(a.dequantize() + b.dequantize(),
                                                                          fo, io, tq), tsets),
                        per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


# ---- matmul ------------------------------------------------------------------------

def _roofline(peak, ops, nbytes, limits):
    """Attainable TOPS: the lower of the compute peak and what copy bandwidth feeds."""
    memory = ops / (nbytes / (limits.copy_gb_per_s * 1e9)) / 1e12
    return memory if peak is None else min(peak, memory)


def _build_matmul(case, impl, limits, seed):
    import cupy

    m, n, k = case.p["M"], case.p["N"], case.p["K"]
    ops = 2 * m * n * k
    i8 = np.dtype(np.int8)
    sa, sb = 0.02, 0.01
    so = sa * sb * math.sqrt(k) * 74 * 74 / 32  # outputs spread over about +-100
    a_s, b_s, o_s = (cupy.full((1,), v, np.float32) for v in (sa, sb, so))
    logical = m * k + k * n + m * n
    peak = limits.int8_tc_tops
    if impl.startswith("dmlq:") and impl[5:].startswith("dp4a"):
        peak = limits.dp4a_tops

    def int8_sets(b_transposed=False):
        count = _n_sets(logical, limits)
        return [(random_array((m, k), i8, seed + 2 * i), random_array((n, k) if b_transposed else (k, n),
                                                                       i8, seed + 2 * i + 1),
                 cupy.empty((m, n), i8)) for i in range(count)]

    def weight_t_sets():  # b the transposed view of an (N, K) weight (x @ w.T)
        return [(a, bt.T, o) for a, bt, o in int8_sets(b_transposed=True)]

    if impl in ("dmlq:auto", "dmlq:auto:w.T"):
        api = _api("quantized_matmul")
        sets = weight_t_sets() if impl.endswith("w.T") else int8_sets()
        return Prepared(_rotating(lambda a, b, o: api(a, a_s, None, b, b_s, None, o_s, None, out=o), sets),
                        logical, ops, _roofline(peak, ops, logical, limits))
    if impl.startswith("dmlq:"):  # the variants live in dmlq.gpu.matmul, the entry point in qmm
        mod, v = importlib.import_module("dmlq.gpu.qmm"), impl[5:]
        # wgmma reads b K-major: it gets the (N, K) weight's transposed view, read as it is (as
        # torch._int_mm gets its preferred layout below); the other kernels read b (K, N) row-major
        sets = weight_t_sets() if v.startswith("wgmma") else int8_sets()
        return Prepared(_rotating(lambda a, b, o: mod.quantized_matmul(a, a_s, None, b, b_s, None, o_s, None,
                                                                      o, variant=v), sets),
                        logical, ops, _roofline(peak, ops, logical, limits))
    if impl.startswith("peer:cupy-matmul-"):
        fdt = np.dtype(np.float16 if impl.endswith("f16") else np.float32)
        nbytes = logical * fdt.itemsize
        sets = []
        for i in range(_n_sets(nbytes, limits)):
            a = random_array((m, k), i8, seed + 2 * i).astype(fdt) * fdt.type(sa)
            b = random_array((k, n), i8, seed + 2 * i + 1).astype(fdt) * fdt.type(sb)
            sets.append((a, b, cupy.empty((m, n), fdt)))
        return Prepared(_rotating(lambda a, b, o: cupy.matmul(a, b, out=o), sets), nbytes, ops,
                        _roofline(peak, ops, nbytes, limits))
    torch = _need_torch()
    if not hasattr(torch, "_int_mm"):
        raise Unavailable("this torch has no torch._int_mm")
    if m <= 16 or k % 8 or n % 8:  # its own refusal, which the first H100 run's M = 16 rows hit as errors
        raise Unavailable(f"torch._int_mm needs M > 16 and K, N multiples of 8 (M={m}, N={n}, K={k})")
    # torch gets its preferred layout: B column-major (an (N, K) weight, transposed).
    tsets = [(_to_torch(a), _to_torch(bt).t()) for a, bt, _ in int8_sets(b_transposed=True)]
    mult = sa * sb / so
    if impl == "peer:torch._int_mm":
        nbytes = m * k + k * n + 4 * m * n
        return Prepared(_rotating(torch._int_mm, tsets), nbytes, ops, _roofline(peak, ops, nbytes, limits))
    if impl == "peer:torch._int_mm+requant":
        def int_mm_requant(a, b):
            c = torch._int_mm(a, b)
            return c.to(torch.float32).mul_(mult).round_().clamp_(-128, 127).to(torch.int8)
        return Prepared(_rotating(int_mm_requant, tsets), logical, ops, _roofline(peak, ops, logical, limits))
    raise Unavailable(f"unknown implementation {impl}")


# ---- average pooling --------------------------------------------------------------

def _pool_count(in_spatial, window, strides, pad, out_spatial):
    """Taps inside the input per output position (IncludePadding false), float32."""
    import cupy

    ones = cupy.pad(cupy.ones(in_spatial, cupy.float32), [(q, q) for q in pad])
    count = cupy.zeros(out_spatial, cupy.float32)
    for taps in itertools.product(*(range(w) for w in window)):
        count += ones[tuple(slice(t, t + (o - 1) * s + 1, s) for t, o, s in zip(taps, out_spatial, strides))]
    return count


def _pool_strides(shape, channels_last):
    """Element strides of a C-order or channels_last (N, C, *spatial) array."""
    order = (0, *range(2, len(shape)), 1) if channels_last else tuple(range(len(shape)))
    strides, step = [0] * len(shape), 1
    for axis in reversed(order):
        strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


def _pool_array(cupy, shape, dtype, channels_last):
    """An empty (N, C, *spatial) CuPy array, C-order or channels_last."""
    if not channels_last:
        return cupy.empty(shape, dtype)
    perm = (0, *range(2, len(shape)), 1)
    return cupy.empty(tuple(shape[i] for i in perm), dtype).transpose(tuple(np.argsort(perm)))


def _build_avgpool(case, impl, limits, seed):
    import cupy

    p = case.p
    shape, out_shape, window, strides, pad = p["shape"], p["out"], p["window"], p["strides"], p["pad"]
    u8 = np.dtype(np.uint8)
    n_in, n_out = math.prod(shape), math.prod(out_shape)
    ops = n_out * math.prod(window)
    xs, xz, os_, oz = (cupy.full((1,), v, dt) for v, dt in
                       ((0.05, np.float32), (128, u8), (0.05, np.float32), (128, u8)))
    per_set = n_in + n_out
    limit = limits.copy_gb_per_s
    dil = (1,) * len(window)
    cl = p.get("channels_last", False)

    def sets(dtype=u8, itemsize=1):
        count = _n_sets(per_set * itemsize, limits)
        out = []
        for i in range(count):
            x = random_array(shape, u8, seed + i)
            if dtype != u8:
                x = ((x.astype(cupy.int32) - 128).astype(cupy.float32) * np.float32(0.05)).astype(dtype)
            if cl:  # the same values in channels_last memory order
                y = _pool_array(cupy, shape, dtype, True)
                y[...] = x
                x = y
            out.append((x, _pool_array(cupy, out_shape, dtype, cl)))
        return out

    if impl == "dmlq:auto":
        api = _api("quantized_avg_pool")
        return Prepared(_rotating(lambda x, o: api(x, xs, xz, os_, oz, window, strides=strides,
                                                   start_padding=pad, end_padding=pad, dilations=dil,
                                                   include_padding=False, out=o), sets()),
                        per_set, ops, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module(case.op), impl[5:]
        return Prepared(_rotating(lambda x, o: mod.quantized_avg_pool(x, xs, xz, os_, oz, o, window, strides,
                                                                     pad, pad, dil, False, variant=v),
                                  sets()), per_set, ops, limit)
    if impl == "peer:cupy-expr":
        whole = tuple(window) == tuple(shape[2:]) and not any(pad)  # global pooling: a sum, as a user writes it
        count = (cupy.full(out_shape[2:], math.prod(window), cupy.float32) if whole
                 else _pool_count(shape[2:], window, strides, pad, out_shape[2:]))
        widths = [(0, 0), (0, 0)] + [(q, q) for q in pad]

        def expr(x, o):
            if whole:
                v = (x.astype(cupy.int32) - 128).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
                v = v.astype(cupy.float32) * np.float32(0.05) / count
                return (cupy.clip(cupy.rint(v / np.float32(0.05)), -128, 127) + 128).astype(u8)
            xp = cupy.pad(x.astype(cupy.int32) - 128, widths)
            acc = None
            for taps in itertools.product(*(range(w) for w in window)):
                tap = xp[(slice(None), slice(None)) + tuple(
                    slice(t, t + (q - 1) * s + 1, s) for t, q, s in zip(taps, out_shape[2:], strides))]
                acc = tap.copy() if acc is None else acc.__iadd__(tap)
            v = acc.astype(cupy.float32) * np.float32(0.05) / count
            return (cupy.clip(cupy.rint(v / np.float32(0.05)), -128, 127) + 128).astype(u8)
        return Prepared(_rotating(expr, sets()), per_set, ops, limit)
    if impl == "peer:torch.avg_pool-f16":
        torch = _need_torch()
        pool = torch.nn.functional.avg_pool2d if len(window) == 2 else torch.nn.functional.avg_pool3d
        tsets = [(_to_torch(x),) for x, _ in sets(np.dtype(np.float16), 2)]  # (channels_last kept: torch's
        # pooling of a channels_last tensor runs its channels_last kernel and returns one)
        return Prepared(_rotating(lambda x: pool(x, window, strides, pad, count_include_pad=False), tsets),
                        2 * per_set, ops, limit)
    raise Unavailable(f"unknown implementation {impl}")


# ---- Python overhead on a tiny array ------------------------------------------------

def overhead_reference(limits, seed=7):
    """GB/s of CuPy's own ElementwiseKernel call on the tiny overhead input (cached)."""
    if limits.overhead_reference_gb_per_s is None:
        import cupy

        n = OVERHEAD_N
        x = random_array((n,), np.float32, seed)
        out = cupy.empty((n,), np.uint8)
        kern = _cupy_kernel("quantize")
        times = measure(lambda: kern(x, 0.02, 128, 0, 255, out), rounds=50, round_s=0.002, warmup=100)
        limits.overhead_reference_gb_per_s = 5 * n / statistics.median(times) / 1e9
    return limits.overhead_reference_gb_per_s


def _build_overhead(case, impl, limits, seed):
    import cupy

    n = case.p["n"]
    x = random_array((n,), np.float32, seed)
    out = cupy.empty((n,), np.uint8)
    s, z = cupy.full((1,), 0.02, np.float32), cupy.full((1,), 128, np.uint8)
    limit = overhead_reference(limits)
    nbytes = 5 * n
    if impl == "dmlq:auto":
        api = _api("quantize_linear")
        return Prepared(lambda: api(x, s, z, out=out), nbytes, n, limit)
    if impl.startswith("dmlq:"):
        mod, v = gpu_module("overhead"), impl[5:]
        return Prepared(lambda: mod.quantize_linear(x, s, z, out, variant=v), nbytes, n, limit)
    if impl == "peer:cupy-elementwise":
        kern = _cupy_kernel("quantize")
        return Prepared(lambda: kern(x, 0.02, 128, 0, 255, out), nbytes, n, limit)
    if impl == "peer:cupy-expr":
        return Prepared(lambda: (cupy.clip(cupy.rint(x / s), -128, 127) + 128).astype(np.uint8), nbytes, n, limit)
    if impl == "peer:torch.quantize_per_tensor":
        torch = _need_torch()
        tx = _to_torch(x)
        return Prepared(lambda: torch.quantize_per_tensor(tx, 0.02, 128, torch.quint8), nbytes, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


def _build_dynquant(case, impl, limits, seed):
    """x read twice (its range, then the values) and y written once: the bytes counted; one
    pass cannot hold 256 MiB on chip, so 2 reads are the floor."""
    import cupy

    xdt, qdt = np.dtype(case.p["x"]), np.dtype(case.p["q"])
    shape, rows = case.p["shape"], case.p.get("per_row", False)
    n = shape[0] * shape[1]
    per_set = n * (2 * xdt.itemsize + qdt.itemsize)  # (per row: + 5 bytes a row, left out)
    sets = [(random_array(shape, xdt, seed + 1 + i),) for i in range(_n_sets(per_set, limits))]
    limit = limits.copy_gb_per_s
    if impl == "dmlq:auto":
        api = _api("dynamic_quantize_linear")
        return Prepared(_rotating(lambda x: api(x, dtype=qdt, per_row=rows), sets), per_set, n, limit)
    qmin, qmax = _qrange(qdt)
    axis = -1 if rows else None
    if impl == "peer:cupy-expr":  # what a CuPy user writes (NaN-free data: nanmin is not needed)
        def expr(x):
            lo = cupy.minimum(x.min(axis=axis, keepdims=rows).astype(cupy.float32), 0)
            hi = cupy.maximum(x.max(axis=axis, keepdims=rows).astype(cupy.float32), 0)
            s = cupy.where(hi == lo, cupy.float32(1), hi - lo) / cupy.float32(qmax - qmin)
            z = cupy.rint(cupy.clip(qmin - lo / s, qmin, qmax))
            return cupy.clip(cupy.rint(x.astype(cupy.float32) / s) + z, qmin, qmax).astype(qdt), s, z.astype(qdt)
        return Prepared(_rotating(expr, sets), per_set, n, limit)
    if impl == "peer:torch.aminmax+quantize_per_tensor":
        torch = _need_torch()
        if xdt != np.float32:
            raise Unavailable(f"{impl} takes float32 input only")
        if rows and len(shape) != 2:
            raise Unavailable(f"{impl}: per row on 2-D x only (quantize_per_channel along axis 0)")
        tq = torch.quint8 if qdt == np.uint8 else torch.qint8
        tsets = [(_to_torch(x),) for x, in sets]

        def tfn(x):
            lo, hi = torch.aminmax(x, dim=-1, keepdim=True) if rows else torch.aminmax(x)
            lo, hi = lo.clamp(max=0), hi.clamp(min=0)
            s = torch.where(hi == lo, torch.ones_like(hi), hi - lo) / (qmax - qmin)
            z = torch.round((qmin - lo / s).clamp(qmin, qmax)).to(torch.int64)
            if rows:  # (per token: torch's per-channel quantize along axis 0, float64 scales)
                return torch.quantize_per_channel(x, s.reshape(-1).double(), z.reshape(-1), 0, tq)
            return torch.quantize_per_tensor(x, s, z, tq)  # (tensor qparams: torch reads them with .item(), a sync)
        return Prepared(_rotating(tfn, tsets), per_set, n, limit)
    raise Unavailable(f"unknown implementation {impl}")


# op -> builder(case, impl, limits, seed) -> Prepared. bench/workloads.py adds the
# builders of the full suite's extra families (the CUDA graph sequence).
BUILDERS = {"quantize": _build_quantize, "dequantize": _build_dequantize, "add": _build_add,
            "matmul": _build_matmul, "avgpool": _build_avgpool, "overhead": _build_overhead,
            "dynquant": _build_dynquant}


def free_memory():
    """Hand cached blocks back between benchmarks (CuPy's pool and torch's)."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# ---- CUDA graph of a sequence of calls ---------------------------------------------

def _graph_sequence(impl, shape, repeat, seed):
    """(enqueue-the-sequence callable, final output): quantize -> add -> dequantize, ``repeat`` times."""
    import cupy

    x = random_array(shape, np.float32, seed)
    q, r, y = cupy.empty(shape, np.uint8), cupy.empty(shape, np.uint8), cupy.empty(shape, np.float32)
    s, z = cupy.full((1,), 0.02, np.float32), cupy.full((1,), 128, np.uint8)
    so = cupy.full((1,), 0.04, np.float32)
    if impl.startswith("dmlq:"):
        import dmlq

        if all(hasattr(dmlq, f) for f in ("quantize_linear", "quantized_add", "dequantize_linear")):
            step = (lambda: dmlq.quantize_linear(x, s, z, out=q),
                    lambda: dmlq.quantized_add(q, s, z, q, s, z, so, z, out=r),
                    lambda: dmlq.dequantize_linear(r, so, z, out=y))
        else:
            mod = gpu_module("quantize")
            step = (lambda: mod.quantize_linear(x, s, z, q),
                    lambda: mod.quantized_add(q, s, z, q, s, z, so, z, r),
                    lambda: mod.dequantize_linear(r, so, z, y))
    else:
        kq, ka, kd = _cupy_kernel("quantize"), _cupy_kernel("add"), _cupy_kernel("dequantize")
        step = (lambda: kq(x, 0.02, 128, 0, 255, q),
                lambda: ka(q, q, 0.02, 128, 0.02, 128, 0.04, 128, 0, 255, r),
                lambda: kd(r, 128, 0.04, y))

    def run():
        for _ in range(repeat):
            for f in step:
                f()
    return run, y, 5 * x.size * repeat * 3  # about 5 bytes per element per op


def _build_graph(case, impl, limits, seed):
    import cupy

    shape, repeat = case.p["shape"], case.p["repeat"]
    stream = cupy.cuda.Stream(non_blocking=True)
    n_ops = math.prod(shape) * 3 * repeat
    with stream:
        run, y, nbytes = _graph_sequence(impl, shape, repeat, seed)
        _check_runs(run, impl)  # compiles and allocates everything before capture
        if not impl.endswith("graph"):
            return Prepared(run, nbytes, n_ops, limits.copy_gb_per_s, stream)
        eager = y.copy()
        stream.synchronize()
        stream.begin_capture()
        try:
            run()
        finally:
            graph = stream.end_capture()
        y.fill(0)
        graph.launch(stream)
        stream.synchronize()
        if not bool(cupy.array_equal(y, eager)):
            raise AssertionError(f"{impl}: the graph replay differs from the eager sequence")
    return Prepared(lambda: graph.launch(stream), nbytes, n_ops, limits.copy_gb_per_s, stream,
                    keep=(run, y, graph))


BUILDERS["graph"] = _build_graph
