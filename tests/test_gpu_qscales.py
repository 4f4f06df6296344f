"""int32 and float8_e8m0fnu scales, and int32/uint32 q per axis and blocked, on GPU arrays through
the public API (dmlq.quant_gpu -> cuda/quant_types.cu), bit for bit against the NumPy path (itself
checked against ONNX's reference evaluator in test_quant_scales.py). The GPU forms: an int32 scale a
CuPy int32 array; an e8m0 scale its codes as dmlq.Packed(uint8 CuPy data, shape, "float8_e8m0fnu")
(CuPy has no e8m0 dtype); a host scalar of either type by value. Outputs poisoned; edge scales (0,
the int32 extremes, 2**24 + 1; e8m0 codes 0, 254 and 255 = NaN) and edge inputs."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from conftest import NATIVE_CODES as NATIVE, CurrentCupy, assert_same, code_bytes, poison

md = pytest.importorskip("ml_dtypes")
pytestmark = pytest.mark.gpu
cp = CurrentCupy()
E8M0 = np.dtype(md.float8_e8m0fnu)
TYPES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn", "float8_e4m3fnuz",
         "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
# (x shape, scale shape or None for a host scalar, keyword arguments)
LAYOUTS = {
    "value": ((5, 13), None, {}),
    "tensor-device": ((5, 13), (1,), {}),
    "axis1": ((4, 9), (9,), {"axis": 1}),
    "blocked": ((3, 37), (3, 10), {"block_size": 4}),
    "blocked-first": ((11, 6), (3, 6), {"block_size": 5, "axis": 0}),
}


def _scale(rng, kind, shape):
    if kind == "int32":
        s = rng.integers(-40, 41, shape or ()).astype(np.int32)
        s.reshape(-1)[:4] = np.array([0, 2**24 + 1, -2**31, 2**31 - 1], np.int32)[:s.size]
        if shape is None:
            return np.int32(s[()] or 7), np.int32(s[()] or 7)
        return s, cp.asarray(s)
    codes = rng.integers(118, 136, shape or ()).astype(np.uint8)
    codes.reshape(-1)[:4] = np.array([0, 254, 255, 127], np.uint8)[:codes.size]
    host = codes.view(E8M0)
    if shape is None:
        return host[()], host[()]
    return host, dmlq.Packed(cp.asarray(codes.reshape(-1)), shape, "float8_e8m0fnu")


def _x(rng, shape):
    x = (rng.standard_normal(shape) * 60).astype(np.float32)
    x.reshape(-1)[:9] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, 1e-42, 3e38, -2**31]
    return x


def _gpu_bytes(v):
    return v.data.get() if isinstance(v, dmlq.Packed) else np.ascontiguousarray(v.get()).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("kind", ["int32", "e8m0"])
def test_quantize_int32_and_e8m0_scales(rng, kind):
    for layout, (shape, sshape, kw) in LAYOUTS.items():
        x = _x(rng, shape)
        for name in TYPES:
            s_host, s_gpu = _scale(rng, kind, sshape)
            what = f"{name} {layout} {kind}"
            want = dmlq.quantize_linear(x, s_host, dtype=name, **kw)
            got = dmlq.quantize_linear(cp.asarray(x), s_gpu, dtype=name, **kw)
            assert np.array_equal(_gpu_bytes(got), code_bytes(want)), what
            if name in NATIVE:
                out = poison(cp.empty(want.shape, want.dtype))
            else:
                p = dmlq.pack(want)
                out = dmlq.Packed(poison(cp.asarray(p.data)), p.shape, p.dtype)
            res = dmlq.quantize_linear(cp.asarray(x), s_gpu, dtype=name, out=out, **kw)
            assert res is out and np.array_equal(_gpu_bytes(out), code_bytes(want)), what + " (out=)"


@pytest.mark.parametrize("odt", ["float32", "float16", "bfloat16"])
def test_dequantize_e8m0_scale(rng, odt):
    for layout, (shape, sshape, kw) in LAYOUTS.items():
        for name in ("int8", "uint16", "int4", "float8_e4m3fn", "float4_e2m1fn", "int32", "uint32"):
            s_host, s_gpu = _scale(rng, "e8m0", sshape)
            if name in ("int32", "uint32"):
                q = rng.integers(-2**31 if name == "int32" else 0, 2**31, shape, dtype=np.int64).astype(name)
                q_gpu = cp.asarray(q)
            else:
                if name == "uint16":
                    q = rng.integers(0, 2**16, shape).astype(np.uint16)
                elif name in ("int4", "float4_e2m1fn"):
                    q = dmlq.unpack(dmlq.pack(rng.integers(0, 16, shape).astype(np.uint8), dtype=name))
                else:
                    q = rng.integers(0, 256, shape).astype(np.uint8).view(np.dtype(getattr(md, name, name)))
                p = dmlq.pack(q) if name not in NATIVE else None
                q_gpu = cp.asarray(q) if p is None else dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)
            want = dmlq.dequantize_linear(q, s_host, dtype=odt, **kw)
            got = dmlq.dequantize_linear(q_gpu, s_gpu, dtype=odt, **kw)
            assert_same(got.get(), want, f"{name} {layout} {odt}")


@pytest.mark.parametrize("qname", ["int32", "uint32"])
def test_dequantize_int32_q_per_axis_and_blocked(rng, qname):
    info = np.iinfo(qname)
    for layout, (shape, sshape, kw) in LAYOUTS.items():
        if sshape is None or not kw:
            continue  # per tensor int32 q: the element-wise path (test_gpu_elementwise)
        q = rng.integers(info.min, info.max, shape, dtype=np.int64, endpoint=True).astype(qname)
        q.reshape(-1)[:3] = [info.min, info.max, 2**24 + 1]
        s = rng.uniform(0.01, 3, sshape).astype(np.float32)
        s.reshape(-1)[:2] = [np.inf, 0.0]
        zp = rng.integers(info.min, info.max, sshape, dtype=np.int64, endpoint=True).astype(qname)
        zp.reshape(-1)[:2] = [info.max, info.min]
        for odt in ("float32", "float16"):
            want = dmlq.dequantize_linear(q, s, zp, dtype=odt, **kw)
            out = poison(cp.empty(shape, odt))
            res = dmlq.dequantize_linear(cp.asarray(q), cp.asarray(s), cp.asarray(zp), dtype=odt, out=out, **kw)
            assert res is out
            assert_same(out.get(), want, f"{qname} {layout} {odt}")
            # a strided (transposed) q goes through a contiguous copy
            qt = np.ascontiguousarray(q.T).T
            got = dmlq.dequantize_linear(cp.asarray(np.ascontiguousarray(q.T)).T, cp.asarray(s), cp.asarray(zp),
                                         dtype=odt, **kw)
            assert_same(got.get(), dmlq.dequantize_linear(qt, s, zp, dtype=odt, **kw), f"{qname} {layout} strided")


def test_refusals_name_the_argument(rng):
    x = cp.asarray(_x(rng, (4, 6)))
    with pytest.raises(TypeError, match="scale must have dtype .* \\(got int32\\): ONNX's DequantizeLinear"):
        dmlq.dequantize_linear(cp.zeros(6, np.int8), cp.ones(6, np.int32), axis=0)
    with pytest.raises(TypeError, match="dtype= is required with a float8_e8m0fnu scale"):
        dmlq.dequantize_linear(cp.zeros(6, np.int8), dmlq.Packed(cp.full(6, 127, np.uint8), (6,), "float8_e8m0fnu"),
                               axis=0)
    with pytest.raises(ValueError, match="its data must be a 1-D uint8 array of 6 bytes"):
        dmlq.quantize_linear(x, dmlq.Packed(cp.full(5, 127, np.uint8), (6,), "float8_e8m0fnu"), dtype="int4", axis=1)
    with pytest.raises(TypeError, match="not a dmlq.Packed of int4"):
        dmlq.quantize_linear(x, dmlq.Packed(cp.zeros(3, np.uint8), (6,), "int4"), dtype="int4", axis=1)
