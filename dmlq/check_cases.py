"""The rows ``python -m dmlq check`` runs (dmlq.check runs and reports them): the numeric
contract's edge cases, whose expected values are worked out by hand from docs/semantics.md
(the arithmetic is in the comments), not produced by dmlq; and the random rows of every
operator, dtype and layout a GPU is held to (expected: the NumPy reference on the same inputs).

A row is (operator, description, function, args, kwargs, expected or None), args NumPy arrays
(or :class:`ChannelsLast` / :class:`KMajor`, laid out on each backend by :func:`laid_out`).
"""
from __future__ import annotations

import sys
from typing import NamedTuple

import ml_dtypes
import numpy as np

from . import api, intmm
from .dynquant import dynamic_quantize_linear
from .packed_b import I4, U4
from .packing import Packed, pack

f32, f16, i8, u8, i4, u4 = np.float32, np.float16, np.int8, np.uint8, I4.type, U4.type
NAN, INF = float("nan"), float("inf")

def _a(values, dtype):
    return np.array(values, dtype=dtype)


def _dynamic_bytes(x, dtype=None, per_row=False, out=None):
    """dynamic_quantize_linear's three results as one uint8 vector (y's bytes, then the
    scales' 4 bytes each and the zero points' 1): the one array, with ``out=``, that the rows
    compare."""
    y, s, z = dynamic_quantize_linear(x, dtype=dtype, per_row=per_row)
    xp = np if isinstance(y, np.ndarray) else sys.modules["cupy"]
    joined = xp.concatenate([v.reshape(-1).view(xp.uint8) for v in (y, s, z)])
    if out is None:
        return joined
    out[...] = joined
    return out


# A row's function that stands for a public one (its results joined into one array)
PUBLIC_OF = {_dynamic_bytes: dynamic_quantize_linear}


def _edge_cases():
    """(operator, description, function, args, kwargs, expected) rows."""
    rows = []
    q = api.quantize_linear
    # 1. exact ties, round half to even
    rows.append(("quantize", "ties", q, (_a([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 76.5], f32), f32(1)),
                 dict(dtype=i8), _a([0, 2, 2, 0, -2, -2, 76], i8)))
    # 2. x / s with correct division: 5 / 0.039215686 = 127.49999.. (x * (1/s) gives 127.5 -> 128);
    #    0.273939937 / 0.00214854861 = 127.4999953.. in exact arithmetic, 127.49999 in float32.
    rows.append(("quantize", "division near-ties", q,
                 (_a([5, -5, 0.273939937], f32), _a([0.039215686, 0.039215686, 0.00214854861], f32)),
                 dict(dtype=i8), _a([127, -127, 127], i8)))
    # 3. NaN -> zp, +-Inf and +-3e38 saturate, for int8 zp in {0, 127, -128} and uint8 zp in {0, 128, 255}
    special = _a([NAN, INF, 3e38, -INF, -3e38], f32)
    for zp in (0, 127, -128):
        rows.append(("quantize", f"NaN/Inf int8 zp={zp}", q, (special, f32(1), i8(zp)), {},
                     _a([zp, 127, 127, -128, -128], i8)))
    for zp in (0, 128, 255):
        rows.append(("quantize", f"NaN/Inf uint8 zp={zp}", q, (special, f32(1), u8(zp)), {},
                     _a([zp, 255, 255, 0, 0], u8)))
    # 4. float16 widened before dividing: 0.623046875 / float32(float16(0.03775024)) = 16.5047.. -> 17
    rows.append(("quantize", "float16 pair", q, (_a([0.623046875], f16), _a([0.03775024], f16)), {},
                 _a([17], u8)))
    # 5. INT32 above 2**24: float32(33161217) = 33161216 (ties to even), / 262144 = 126.5 -> 126
    rows.append(("quantize", "int32 > 2**24", q, (_a([33161217], np.int32), f32(262144)), {}, _a([126], u8)))
    d = api.dequantize_linear
    # (2**31 - 1) - (-1) = 2**31 exactly; (2**32 - 1) - 0 rounds to 2**32 in float32
    rows.append(("dequantize", "int32 extremes", d,
                 (_a([2**31 - 1, -2**31], np.int32), f32(1), np.int32(-1)), {},
                 _a([2.0**31, -(2.0**31) + 1], f32)))
    rows.append(("dequantize", "uint32 extremes", d, (_a([2**32 - 1, 0], np.uint32), f32(1), np.uint32(0)), {},
                 _a([2.0**32, 0.0], f32)))
    # 2**32 overflows float16 (max 65504) -> inf; -255 * 0.5 = -127.5 is exact in float16
    rows.append(("dequantize", "float16 out", d, (_a([2**32 - 1], np.uint32), f16(1)), {}, _a([INF], f16)))
    rows.append(("dequantize", "int8 zp", d, (_a([-128, 127], i8), f16(0.5), i8(127)), {}, _a([-127.5, 0], f16)))
    # a scale of -0.0 keeps its sign on the device, given as a host scalar (by value) or as a 0-d
    # array (copied): CuPy fills a 0-d copy of a value equal to 0 with zero bytes, and the first
    # H100 run got +0.0. x / -0 = -inf for x > 0, +inf for x < 0; 0 / -0 = NaN -> zp.
    for s in (f32(-0.0), _a(-0.0, f32)):
        form = "scalar" if isinstance(s, np.generic) else "0-d array"
        rows.append(("quantize", f"scale -0.0 ({form})", q, (_a([1, -1, 0], f32), s, u8(5)), {}, _a([0, 255, 5], u8)))
        rows.append(("dequantize", f"scale -0.0 ({form})", d, (_a([3, 0], u8), s, u8(0)), {}, _a([-0.0, -0.0], f32)))
    # add: 10*0.5 + (-3)*1 = 2; 1*0.5 + 0 = 0.5 -> 0; 3*0.5 = 1.5 -> 2 (ties to even)
    rows.append(("add", "mixed signedness + ties", api.quantized_add,
                 (_a([10, 1, 3], u8), f32(0.5), u8(0), _a([-3, 0, 0], i8), f32(1), i8(0), f32(1), i8(0)), {},
                 _a([2, 0, 2], i8)))
    # add broadcasting: (2, 1) + (3,) ; values (a - 1) * 1 + (b - 0) * 2
    rows.append(("add", "broadcast", api.quantized_add,
                 (_a([[1], [2]], u8), f32(1), u8(1), _a([0, 1, 2], u8), f32(2), None, f32(1)), {},
                 _a([[0, 2, 4], [1, 3, 5]], u8)))
    mm = api.quantized_matmul
    # per-row A zp [1, 2], per-column B zp [1, -1]: (A - zp) = [[0,1],[1,2]], (B - zp) = [[4,7],[6,9]],
    # acc = [[6, 9], [16, 25]], / out_scale 2 = [[3, 4.5], [8, 12.5]] -> [[3, 4], [8, 12]]
    rows.append(("matmul", "per-row/per-column zp", mm,
                 (_a([[1, 2], [3, 4]], u8), f32(1), _a([[1], [2]], u8), _a([[5, 6], [7, 8]], i8), f32(1),
                  _a([1, -1], i8), f32(2)), {}, _a([[3, 4], [8, 12]], u8)))
    # K = 33025 and 33026 of 255 * 255: acc = 2147450625 and 2147515650 (the latter wraps int32);
    # float32(acc) = 2147450624 and 2147515648; times 2**-24: 127.998.. and 128.0019.. -> 128 both.
    for k in (33025, 33026):
        rows.append(("matmul", f"K={k} worst case", mm,
                     (np.full((1, k), 255, u8), f32(1), None, np.full((k, 1), 255, u8), f32(1), None,
                      f32(2.0**24)), {}, _a([[128]], u8)))
    # float16 scales (ONNX QLinearMatMul, opset 21) widened to float32: 0.0999755859375 * 5 is
    # 0.4998779296875 there (float16 arithmetic would make it 0.5); K = 51 ones: 25.49 -> 25
    rows.append(("matmul", "float16 scales", mm,
                 (np.ones((1, 51), u8), f16(0.0999755859375), None, np.ones((51, 1), u8), f16(5), None, f16(1)), {},
                 _a([[25]], u8)))
    mi, mf = intmm.matmul_integer, intmm.matmul_integer_to_float
    # the same sums as the matmul row above, as int32
    rows.append(("mm_integer", "per-row/per-column zp", mi,
                 (_a([[1, 2], [3, 4]], u8), _a([[5, 6], [7, 8]], i8), _a([[1], [2]], u8), _a([1, -1], i8)), {},
                 _a([[6, 9], [16, 25]], np.int32)))
    # K = 33026 terms of (0 - 255) * (255 - 0): -2147515650 wraps to -2147515650 + 2**32 = 2147451646
    rows.append(("mm_integer", "K=33026 wraps", mi,
                 (np.zeros((1, 33026), u8), np.full((33026, 1), 255, u8), u8(255), u8(0)), {},
                 _a([[2147451646]], np.int32)))
    # int4 b [-8, 7] with zp -8: 1 * 0 + 2 * 15 = 30
    rows.append(("mm_integer", "int4 b", mi, (_a([[1, 2]], u8), _a([[-8], [7]], i4), None, i4(-8)), {},
                 _a([[30]], np.int32)))
    # the same, packed (two values a byte, ONNX's order), zero point packed too
    rows.append(("mm_integer", "packed int4 b", mi,
                 (_a([[1, 2]], u8), pack(_a([[-8], [7]], i4)), None, pack(_a([-8], i4))), {},
                 _a([[30]], np.int32)))
    # uint4 b = 15 against a = 255 - 0, K = 3 (odd: the last byte half used): 3 * 255 * 15 = 11475;
    # zp 15 -> 0
    rows.append(("mm_integer", "packed uint4 extremes", mi,
                 (np.full((1, 3), 255, u8), pack(np.full((3, 2), 15, u4)), None, None), {},
                 _a([[11475, 11475]], np.int32)))
    rows.append(("mm_integer", "packed uint4 zp = b", mi,
                 (np.full((1, 3), 255, u8), pack(np.full((3, 2), 15, u4)), None, 15), {},
                 _a([[0, 0]], np.int32)))
    # int4 b = -8, zp 7: terms 1 * -15; blocks of 2 over K = 3: acc_0 = -30, acc_1 = -15;
    # -30 * 0.5 + -15 * 0.25 = -18.75
    rows.append(("mm_float", "packed int4 blocked", mf,
                 (np.ones((1, 3), u8), f32(1), None, pack(np.full((3, 1), -8, i4)), _a([[0.5], [0.25]], f32), 7),
                 dict(block_size=2), _a([[-18.75]], f32)))
    # packed int2 b [-2, 1, -1] (K = 3: one byte, its last code unused), zp -2: 1 * 0 + 2 * 3 + 3 * 1 = 9
    rows.append(("mm_integer", "packed int2 b", mi,
                 (_a([[1, 2, 3]], u8), pack(_a([[-2], [1], [-1]], ml_dtypes.int2)), None,
                  pack(_a([-2], ml_dtypes.int2))), {}, _a([[9]], np.int32)))
    # MatMulNBits' bits=2: uint2 b = 3, zp 2 (its default); blocks of 4 over K = 5: acc_0 = 4, acc_1 = 1;
    # 4 * 0.5 + 1 * 0.25 = 2.25
    rows.append(("mm_float", "packed uint2 blocked", mf,
                 (np.ones((1, 5), u8), f32(1), None, pack(np.full((1, 5), 3, ml_dtypes.uint2)).mT,
                  _a([[0.5], [0.25]], f32), 2), dict(block_size=4), _a([[2.25]], f32)))
    # quantized_matmul, packed int4 b: acc = 30 as above, / out_scale 4 = 7.5 -> 8
    rows.append(("matmul", "packed int4 b", mm,
                 (_a([[1, 2]], u8), f32(1), None, pack(_a([[-8], [7]], i4)), f32(1), -8, f32(4)), {},
                 _a([[8]], u8)))
    # acc = 2 * 3 = 6; 6 * (0.5 * 0.25) + 1 = 1.75 (the bias is not scaled; ORT's per-row form gives 1.25)
    rows.append(("mm_float", "scales then bias", mf,
                 (_a([[2], [2]], i8), _a([[0.5], [0.5]], f32), None, _a([[3]], i8), f32(0.25), None,
                  _a([1], f32)), {}, _a([[1.75], [1.75]], f32)))
    # acc = 5 * 127 * 127 = 80645 > 65504: +-inf in float16
    rows.append(("mm_float", "float16 overflow", mf,
                 (np.full((2, 5), 127, i8), _a([[1], [-1]], f32), None, np.full((5, 1), 127, i8), f32(1), None),
                 dict(dtype=f16), _a([[INF], [-INF]], f16)))
    # acc = 8 * 255 + 9 = 2049: float16 ties to even -> 2048; + bias 1 in float32 first: 2050 (exact)
    b9 = _a([[255]] * 8 + [[9]], u8)
    rows.append(("mm_float", "float16 rounded once", mf, (np.ones((1, 9), u8), f32(1), None, b9, f32(1), None),
                 dict(dtype=f16), _a([[2048]], f16)))
    rows.append(("mm_float", "float16 after the bias", mf,
                 (np.ones((1, 9), u8), f32(1), None, b9, f32(1), None, _a([1], f32)), dict(dtype=f16),
                 _a([[2050]], f16)))
    # acc = 255 + 2 = 257: bfloat16 (8 significant bits) ties to even -> 256; the bias first: 258 (exact)
    bf16, b2 = ml_dtypes.bfloat16, _a([[255], [2]], u8)
    rows.append(("mm_float", "bfloat16 rounded once", mf, (np.ones((1, 2), u8), f32(1), None, b2, f32(1), None),
                 dict(dtype=bf16), _a([[256]], bf16)))
    rows.append(("mm_float", "bfloat16 after the bias", mf,
                 (np.ones((1, 2), u8), f32(1), None, b2, f32(1), None, _a([1], bf16)), dict(dtype=bf16),
                 _a([[258]], bf16)))
    # a bfloat16 scale widened exactly: bfloat16(0.1) = 0.10009765625; acc = 10 -> 1.0009765625 in float32
    rows.append(("mm_float", "bfloat16 scale", mf, (np.ones((1, 10), u8), f32(1), None, np.ones((10, 1), u8),
                                                     _a([0.1], bf16), None), {}, _a([[1.0009765625]], f32)))
    # groups added in ascending order: (1 + 2**-24) + 2**-24 = 1 (ties to even twice); another order 1 + 2**-23
    rows.append(("mm_float", "block order", mf,
                 (np.ones((1, 3), i8), f32(1), None, np.ones((3, 1), i8), _a([[1], [2.0**-24], [2.0**-24]], f32),
                  None), dict(block_size=1), _a([[1.0]], f32)))
    # a_scale -0.0 (a host scalar, read by the kernel from a device copy): 2 * (-0 * 1) = -0.0
    rows.append(("mm_float", "a_scale -0.0", mf, (_a([[1]], u8), f32(-0.0), None, _a([[2]], i8), f32(1), None), {},
                 _a([[-0.0]], f32)))
    # K = 0: acc = 0, 0 * (1 * -1) = -0.0; blocked: no groups, +0.0
    empty_a, empty_b = np.zeros((1, 0), u8), np.zeros((0, 1), u8)
    rows.append(("mm_float", "K=0", mf, (empty_a, f32(1), None, empty_b, f32(-1), None), {}, _a([[-0.0]], f32)))
    rows.append(("mm_float", "K=0 blocked", mf, (empty_a, f32(1), None, empty_b, np.ones((0, 1), f32), None),
                 dict(block_size=32), _a([[0.0]], f32)))
    p = api.quantized_avg_pool
    img = _a([[[[1, 2], [3, 4]]]], u8)
    # 2x2 window over [[1,2],[3,4]]: 10 / 4 = 2.5 -> 2
    rows.append(("avgpool", "tie", p, (img, f32(1), None, f32(1), None, 2), {}, _a([[[[2]]]], u8)))
    # pad 1, 2x2/2: each window holds one pixel; without IncludePadding count 1 -> the pixel itself
    rows.append(("avgpool", "padding excluded", p, (img, f32(1), None, f32(1), None, 2),
                 dict(strides=2, start_padding=1, end_padding=1), _a([[[[1, 2], [3, 4]]]], u8)))
    # with IncludePadding count 4: 0.25, 0.5, 0.75, 1 -> 0, 0, 1, 1
    rows.append(("avgpool", "padding included", p, (img, f32(1), None, f32(1), None, 2),
                 dict(strides=2, start_padding=1, end_padding=1, include_padding=True), _a([[[[0, 0], [1, 1]]]], u8)))
    # 1x1 image, end padding 3 along W, window 1, stride 2: the second window lies in padding -> zp 7;
    # the first: 5 / 1 -> 5, + zp 7 = 12
    rows.append(("avgpool", "window in padding", p, (_a([[[[5]]]], u8), f32(1), None, f32(1), u8(7), 1),
                 dict(strides=(1, 2), end_padding=(0, 3)), _a([[[[12, 7]]]], u8)))
    # ceil mode: 3 wide, window 2, stride 2 -> floor 1 output, ceil 2 (the second window starts at 2 < 3)
    # row [2, 4, 6]: windows {2, 4} -> 3, {6} -> 6 (count 1 without IncludePadding)
    rows.append(("avgpool", "ceil mode", p, (_a([[[[2, 4, 6]]]], u8), f32(1), None, f32(1), None, (1, 2)),
                 dict(strides=(1, 2), ceil_mode=True), _a([[[[3, 6]]]], u8)))
    # range [-3, 2]: scale 5 / 255 (float32 0x3CA0A0A1), zero point 0 - (-3 / scale) = 153;
    # 2 / scale = 102 -> 255, 1.02 / scale = 52.02 -> 205; NaN -> 153 (NaN left out of the range)
    scale = np.divide(f32(5), f32(255), dtype=f32)
    rows.append(("dyn_quantize", "range [-3, 2], NaN", _dynamic_bytes, (_a([0, 2, -3, 1.02, NAN], f32),), {},
                 np.concatenate([_a([153, 255, 0, 205, 153], u8), _a([scale], f32).view(u8), _a([153], u8)])))
    # per row: [0, 2, -3, 1.02] as above; [1, 4, NaN, 2]: range [0, 4], scale 4 / 255, zero point 0,
    # 1 / scale = 63.749996 -> 64, 2 / scale = 127.49999 (float32, not 127.5) -> 127, 4 -> 255, NaN -> 0
    scale4 = np.divide(f32(4), f32(255), dtype=f32)
    rows.append(("dyn_quantize", "per row", _dynamic_bytes, (_a([[0, 2, -3, 1.02], [1, 4, NAN, 2]], f32),),
                 dict(per_row=True),
                 np.concatenate([_a([153, 255, 0, 205, 64, 255, 0, 127], u8), _a([scale, scale4], f32).view(u8),
                                 _a([153, 0], u8)])))
    return rows


def _random_cases(seed=0):
    """(operator, description, function, args, kwargs, None) rows: every operator and
    dtype combination on seeded random data (expected: the NumPy reference)."""
    rows = []
    rng = np.random.default_rng(seed)
    shape = (3, 37, 129)
    for xdt in (f32, f16, np.int32):
        for qdt in (i8, u8):
            x = (rng.standard_normal(shape) * 200).astype(xdt)
            scale = (rng.random((1, 37, 1)) + 0.1).astype(f16 if xdt == f16 else f32)
            zp = rng.integers(np.iinfo(qdt).min, np.iinfo(qdt).max, (1, 37, 1)).astype(qdt)
            rows.append(("quantize", f"{xdt.__name__}->{qdt.__name__}", api.quantize_linear, (x, scale, zp), {}))
    for idt in (i8, u8, np.int16, np.uint16, np.int32, np.uint32):
        for sdt in (f32, f16):
            info = np.iinfo(idt)
            qv = rng.integers(info.min, info.max, shape, dtype=idt, endpoint=True)
            zp = idt(rng.integers(info.min, info.max, endpoint=True))
            rows.append(("dequantize", f"{idt.__name__}->{sdt.__name__}", api.dequantize_linear,
                         (qv, sdt(0.0125), zp), {}))
    combos = [(a, b, o) for a in (i8, u8) for b in (i8, u8) for o in (i8, u8)]
    for adt, bdt, odt in combos:
        types = f"{adt.__name__},{bdt.__name__}->{odt.__name__}"
        a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max, shape, dtype=adt, endpoint=True)
        b = rng.integers(np.iinfo(bdt).min, np.iinfo(bdt).max, shape[1:], dtype=bdt, endpoint=True)
        rows.append(("add", types, api.quantized_add, (a, f32(0.05), adt(3), b, f32(0.07), bdt(5), f32(0.09), odt(7)),
                     {}))
        m, k, n = 67, 301, 45
        a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max, (2, m, k), dtype=adt, endpoint=True)
        b = rng.integers(np.iinfo(bdt).min, np.iinfo(bdt).max, (k, n), dtype=bdt, endpoint=True)
        rows.append(("matmul", types, api.quantized_matmul,
                     (a, (rng.random((m, 1)) + 0.5).astype(f32), adt(1), b, (rng.random(n) + 0.5).astype(f32),
                      rng.integers(0, 100, n).astype(bdt), f32(400.0), odt(9)), {}))
    # float16 and bfloat16 scales, widened exactly (a 0-d array one goes to the device: widened there)
    a = rng.integers(0, 255, shape, dtype=u8, endpoint=True)
    b = rng.integers(-128, 127, shape[1:], dtype=i8, endpoint=True)
    rows.append(("add", "bfloat16 and float16 scales", api.quantized_add,
                 (a, ml_dtypes.bfloat16(0.05), u8(3), b, f16(0.07), i8(5), np.array(0.09, ml_dtypes.bfloat16), u8(7)),
                 {}))
    rows.extend(_random_intmm(rng))
    rows.extend(_random_kmajor(np.random.default_rng(seed + 37)))
    rows.extend(_random_packed_tiled(np.random.default_rng(seed + 26)))
    rows.extend(_random_grouped(np.random.default_rng(seed + 41)))
    for xdt, qdt in ((f32, u8), (f16, i8), (ml_dtypes.bfloat16, u8)):
        x = (rng.standard_normal((5, 333)) * 7 + 2).astype(xdt)
        rows.append(("dyn_quantize", f"{xdt.__name__}->{qdt.__name__}", _dynamic_bytes, (x,), dict(dtype=qdt)))
        rows.append(("dyn_quantize", f"{xdt.__name__}->{qdt.__name__} per row", _dynamic_bytes, (x[:, 1:],),
                     dict(dtype=qdt, per_row=True)))
    # the types beyond int8 (dmlq.quant_gpu, cuda/quant_types.cu): a native output, packed inputs
    x = (rng.standard_normal((3, 37, 129)) * 4).astype(f32)
    rows.append(("quantize", "float32->int16 per axis", api.quantize_linear,
                 (x, (rng.random((1, 37, 1)) + 0.1).astype(f32), None), dict(dtype=np.int16)))
    rows.append(("quantize", "float16->uint16 blocked", api.quantize_linear,
                 (x.astype(f16), (rng.random((3, 2, 129)) + 0.1).astype(f16), None),
                 dict(dtype=np.uint16, axis=1, block_size=32)))
    rows.append(("dequantize", "packed float8_e5m2->float16", api.dequantize_linear,
                 (pack(x.astype(ml_dtypes.float8_e5m2)), f16(2)), {}))
    # bfloat16 read and written by the kernels (qt_quantize<bfloat16, T>, qt_dequantize<T, bfloat16>)
    rows.append(("quantize", "bfloat16->int8 blocked", api.quantize_linear,
                 (x.astype(ml_dtypes.bfloat16), (rng.random((3, 37, 5)) + 0.1).astype(f32), None),
                 dict(dtype=np.int8, axis=2, block_size=32)))
    rows.append(("dequantize", "packed float8_e4m3fn->bfloat16", api.dequantize_linear,
                 (pack(x.astype(ml_dtypes.float8_e4m3fn)), f32(0.75)), dict(dtype="bfloat16")))
    rows.append(("dequantize", "packed int4 blocked", api.dequantize_linear,
                 (pack(rng.integers(-8, 8, (3, 37, 129)).astype(i4)), (rng.random((3, 37, 5)) + 0.1).astype(f32)),
                 dict(axis=2, block_size=32)))
    # int32 / float8_e8m0fnu scales (an e8m0 scale as its codes in a Packed: CuPy has no e8m0 dtype)
    # and int32 / uint32 q per axis and blocked: read by the kernel as stored
    e8m0 = Packed(rng.integers(118, 134, 37 * 5).astype(u8), (1, 37, 5), "float8_e8m0fnu")
    rows.append(("quantize", "float32->int16 blocked, int32 scale", api.quantize_linear,
                 (x, rng.integers(1, 9, (3, 37, 5)).astype(np.int32), None), dict(dtype=np.int16, block_size=32)))
    rows.append(("quantize", "float32->int8 blocked, e8m0 scale", api.quantize_linear,
                 (x[:1], e8m0, None), dict(dtype=i8, axis=2, block_size=32)))
    for idt in (np.int32, np.uint32):
        info = np.iinfo(idt)
        qv = rng.integers(info.min, info.max, (3, 37, 129), dtype=idt, endpoint=True)
        rows.append(("dequantize", f"{idt.__name__} per axis", api.dequantize_linear,
                     (qv, (rng.random(37) + 0.1).astype(f32), rng.integers(info.min, info.max, 37, dtype=idt)),
                     dict(axis=1)))
        rows.append(("dequantize", f"{idt.__name__} blocked, e8m0 scale", api.dequantize_linear,
                     (qv[:1], e8m0, None), dict(axis=2, block_size=32, dtype=f16)))
    for xdt in (i8, u8):
        for odt in (i8, u8):
            x = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max, (2, 5, 33, 31), dtype=xdt, endpoint=True)
            args = (x, (rng.random(5) + 0.1).astype(f32), rng.integers(0, 50, 5).astype(xdt), f32(0.3), odt(2), 3)
            for name, kw in (("3x3", {}),
                             ("3x3/2 pad 1 incl", dict(strides=2, start_padding=1, end_padding=1,
                                                       include_padding=True)),
                             ("3x3/2 dil 2 pad 2 ceil", dict(dilations=2, start_padding=2, ceil_mode=True,
                                                             strides=2))):
                rows.append(("avgpool", f"{xdt.__name__}->{odt.__name__} {name}", api.quantized_avg_pool, args, kw))
            # 3x3 at stride 1 with per-tensor parameters (the strip kernel's window-sum table; its
            # exact epilogue at the padded edges)
            rows.append(("avgpool", f"{xdt.__name__}->{odt.__name__} 3x3 pad 1 per tensor", api.quantized_avg_pool,
                         (x, f32(0.05), xdt(7), f32(0.3), odt(2), 3), dict(start_padding=1, end_padding=1)))
            rows.append(("avgpool", f"{xdt.__name__}->{odt.__name__} 2x2/2 bfloat16 and float16 scales",
                         api.quantized_avg_pool, (x, (rng.random(5) + 0.1).astype(ml_dtypes.bfloat16), xdt(7),
                                                  f16(0.3), odt(2), 2), dict(strides=2)))
            # channels_last x (the channels_last_16 kernel; 4 where x starts 4 bytes in): per channel, and per
            # tensor (its window-sum table)
            x = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max, (2, 32, 17, 15), dtype=xdt, endpoint=True)
            for name, skip, prm in (("per channel", 0, ((rng.random(32) + 0.1).astype(f32),
                                                        rng.integers(0, 50, 32).astype(xdt))),
                                    ("per tensor, 4 bytes in", 4, (f32(0.2), xdt(3)))):
                rows.append(("avgpool", f"{xdt.__name__}->{odt.__name__} channels_last 3x3 pad 1 {name}",
                             api.quantized_avg_pool, (ChannelsLast(x, skip), *prm, f32(0.3), odt(2), 3),
                             dict(start_padding=1, end_padding=1)))
    return [(*row, None) for row in rows]


class ChannelsLast(NamedTuple):
    """A row's operand held in channels_last memory order (NHWC), ``skip`` bytes into its buffer,
    on the host and on the device alike (:func:`laid_out`)."""
    array: np.ndarray
    skip: int = 0


class KMajor(NamedTuple):
    """A row's (..., K, N) matrix held K-major: the transposed view of a C-contiguous (..., N, K)
    array, on the host and on the device alike (:func:`laid_out`)."""
    array: np.ndarray


def laid_out(value, xp=np):
    """A row's operand as the call takes it on the module ``xp``: a :class:`ChannelsLast` or
    :class:`KMajor` made there in that order, anything else as it is."""
    if isinstance(value, KMajor):
        return xp.asarray(np.ascontiguousarray(value.array.swapaxes(-1, -2))).swapaxes(-1, -2)
    if not isinstance(value, ChannelsLast):
        return value
    x, skip = value
    perm = (0, *range(2, x.ndim), 1)
    buf = xp.empty(x.size + skip, x.dtype)[skip:].reshape(tuple(x.shape[i] for i in perm))
    buf[...] = xp.asarray(x.transpose(perm))
    return buf.transpose(tuple(int(i) for i in np.argsort(perm)))


def _random_intmm(rng):
    """matmul_integer and matmul_integer_to_float: every a/b type (b int8, uint8 and packed
    int4/uint4), zero points per row/column (packed for 4-bit b), float32/float16 out with a
    bias (a packed b at these M: the stream kernel's sums pass), blocked b scales in groups of
    64 (the tiled dp4a-wide kernel; for a packed b at these M the grouped stream kernel) and
    48 (matmul_stream.cu, the family's only calls there); M = 1, 5 and 16: rows as :func:`_random_cases`
    makes them (operator, description, function, args, kwargs)."""
    rows = []
    def q(dt, shape):
        info = np.iinfo(dt) if dt in (i8, u8) else ml_dtypes.iinfo(dt)
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dt)

    k, n = 301, 45
    for adt in (i8, u8):
        for bdt in (i8, u8, i4, u4):
            packed = bdt in (i4, u4)
            for m in (1, 5, 16):
                a, b = q(adt, (2, m, k)), q(bdt, (k, n))
                azp, bzp = q(adt, (m, 1)), q(bdt, (n,))
                bb, bz = (pack(b), pack(bzp)) if packed else (b, bzp)
                what = f"{adt.__name__},{'packed ' if packed else ''}{np.dtype(bdt).name} M={m}"
                rows.append(("mm_integer", what, intmm.matmul_integer, (a, bb, azp, bz), {}))
                a_s = (rng.random((m, 1)) + 0.5).astype(f32)
                bias = rng.standard_normal(n).astype(f32)
                for odt in (f32, f16):
                    args = (a, a_s, azp, bb, (rng.random(n) * 0.01).astype(f32), bz, bias)
                    rows.append(("mm_float", f"{what} ->{np.dtype(odt).name}", intmm.matmul_integer_to_float,
                                 args, dict(dtype=odt)))
                for g in (64, 48):
                    bs = (rng.random((-(-k // g), n)) * 0.01).astype(f32)
                    gz = q(bdt, bs.shape)
                    args = (a, a_s, None, bb, bs, pack(gz) if packed else gz)
                    rows.append(("mm_float", f"{what} blocked {g}", intmm.matmul_integer_to_float, args,
                                 dict(block_size=g)))
    return rows


def _random_kmajor(rng):
    """b held K-major (:class:`KMajor`: ``x @ w.T`` of an (N, K) weight, its columns 16 bytes
    apart), which the GPU reads as it is: the weight-streaming kernels at M = 5, the dp4a tiles at
    M = 40 and the tensor-core tile at M = 130 (``kmajor_int8`` / ``kmajor_uint8``), in all three operators;
    and a packed 4-bit one (``dmlq.pack(w).mT``); rows as :func:`_random_cases` makes them."""
    rows = []
    k, n = 256, 136
    for adt, bdt in ((u8, i8), (i8, u8)):
        w = rng.integers(np.iinfo(bdt).min, np.iinfo(bdt).max, (k, n), dtype=bdt, endpoint=True)
        bzp = rng.integers(0, 50, n).astype(bdt)
        for m in (5, 40, 130):
            a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max, (2, m, k), dtype=adt, endpoint=True)
            azp, a_s = adt(rng.integers(0, 50)), (rng.random((m, 1)) + 0.5).astype(f32)
            what = f"{adt.__name__},K-major {bdt.__name__} M={m}"
            rows.append(("matmul", f"{what}->int8", api.quantized_matmul,
                         (a, a_s, azp, KMajor(w), (rng.random(n) * 0.01).astype(f32), bzp, f32(60.0), i8(3)), {}))
            rows.append(("mm_integer", what, intmm.matmul_integer, (a, KMajor(w), azp, bzp), {}))
            rows.append(("mm_float", f"{what} ->float16", intmm.matmul_integer_to_float,
                         (a, a_s, azp, KMajor(w), (rng.random(n) * 0.01).astype(f32), bzp,
                          rng.standard_normal(n).astype(f32)), dict(dtype=f16)))
    # a packed 4-bit b held K-major (dmlq.pack(w).mT of an (N, K) weight: MatMulNBits' layout), read as
    # it is (kmajor_int4 / kmajor_uint4) by the stream kernels at M = 1 and 5, the dp4a tiles at M = 40
    # (dp4a-wide for blocked scales past M = 16) and the tensor-core tile at M = 130; MatMulNBits' own
    # call: scales (N, groups).T and zero points pack((N, groups)).mT
    g = 64  # (M = 5: groups of 64 keep the grouped kernel's workspace within its rule)
    for adt, bdt in ((u8, I4), (i8, U4)):
        info = ml_dtypes.iinfo(bdt)
        w = rng.integers(int(info.min), int(info.max), (n, k), endpoint=True).astype(bdt)
        zp_cols = pack(rng.integers(int(info.min), int(info.max), n, endpoint=True).astype(bdt))
        zp_groups = pack(rng.integers(int(info.min), int(info.max), (n, k // g), endpoint=True).astype(bdt)).mT
        scales = (rng.random((n, k // g)) * 0.01).astype(f32).T
        b = pack(w).mT
        for m in (1, 5, 40, 130):
            a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max, (m, k), dtype=adt, endpoint=True)
            azp, a_s = adt(rng.integers(0, 50)), (rng.random((m, 1)) + 0.5).astype(f32)
            what = f"{adt.__name__},K-major packed {bdt.name} M={m}"
            rows.append(("matmul", f"{what}->int8", api.quantized_matmul,
                         (a, a_s, azp, b, (rng.random(n) * 0.01).astype(f32), zp_cols, f32(20.0), i8(3)), {}))
            rows.append(("mm_integer", what, intmm.matmul_integer, (a, b, azp, zp_cols), {}))
            rows.append(("mm_float", f"{what} blocked {g} ->float16", intmm.matmul_integer_to_float,
                         (a, a_s, None, b, scales, zp_groups, rng.standard_normal(n).astype(f32)),
                         dict(dtype=f16, block_size=g)))
    # MatMulNBits' bytes where K (160) is not a multiple of its block size (64): each row of b padded to
    # 3 whole blocks (192 elements, random codes past K here) and each row of its 3 zero points to a
    # byte, given as Packed(...).mT[..., :K, :] and [..., :3, :]; the tensor-core tile reads such a b
    # as it is too (its columns 192 elements apart), K off 32 or not
    k2, groups, n = 160, 3, 208  # (N = 208: M = 130 past the tensor cores' minimum work)
    for adt, bdt in ((u8, U4), (i8, I4)):
        info = ml_dtypes.iinfo(bdt)
        b = pack(rng.integers(int(info.min), int(info.max), (n, groups * g), endpoint=True).astype(bdt)).mT[..., :k2, :]
        zp = pack(rng.integers(int(info.min), int(info.max), (n, groups + 1), endpoint=True).astype(bdt)).mT[..., :groups, :]
        scales = (rng.random((n, groups)) * 0.01).astype(f32).T
        for m in (1, 5, 40, 130):
            a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max, (m, k2), dtype=adt, endpoint=True)
            what = f"{adt.__name__},K-major packed {bdt.name} in rows of {groups * g} M={m}"
            rows.append(("mm_integer", what, intmm.matmul_integer, (a, b, adt(rng.integers(0, 50)), 3), {}))
            rows.append(("mm_float", f"{what} blocked {g} (MatMulNBits' bytes)", intmm.matmul_integer_to_float,
                         ((a, (rng.random((m, 1)) + 0.5).astype(f32), None, b, scales, zp,
                           rng.standard_normal(n).astype(f32))), {"block_size": g}))
    return rows


def _random_packed_tiled(rng):
    """Packed 4-bit b past M = 16 (cuda/matmul_dp4a_packed.cu: the dp4a tiles, column
    sums, dp4a-wide for blocked scales), quantized_matmul with packed b at M = 1, 3 and 11
    (cuda/matmul_stream_packed.cu: stream-m1, -m4, -m16) and 40, and blocked scales of 48 (stream-rows): rows as :func:`_random_cases` makes them."""
    rows = []

    def q(dt, shape):
        info = np.iinfo(dt) if dt in (i8, u8) else ml_dtypes.iinfo(dt)
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dt)

    k, n = 203, 68
    for adt, bdt in ((u8, i4), (i8, u4)):
        name = np.dtype(bdt).name
        a, b = q(adt, (2, 40, k)), pack(q(bdt, (k, n)))
        azp, bzp = q(adt, (40, 1)), pack(q(bdt, (n,)))
        what = f"{adt.__name__},packed {name} M=40"
        rows.append(("mm_integer", what, intmm.matmul_integer, (a, b, azp, bzp), {}))
        a_s, bias = (rng.random((40, 1)) + 0.5).astype(f32), rng.standard_normal(n).astype(f32)
        rows.append(("mm_float", f"{what} ->float16", intmm.matmul_integer_to_float,
                     (a, a_s, azp, b, (rng.random(n) * 0.01).astype(f32), bzp, bias), dict(dtype=f16)))
        for g in (64, 48):
            bs = (rng.random((-(-k // g), n)) * 0.01).astype(f32)
            rows.append(("mm_float", f"{what} blocked {g}", intmm.matmul_integer_to_float,
                         (a, a_s, None, b, bs, pack(q(bdt, bs.shape))), dict(block_size=g)))
        for m in (1, 3, 11, 40):
            rows.append(("matmul", f"{adt.__name__},packed {name}->int8 M={m}", api.quantized_matmul,
                         (q(adt, (m, k)), (rng.random((m, 1)) + 0.5).astype(f32), adt(1), b,
                          (rng.random(n) + 0.5).astype(f32), int(q(bdt, ())), f32(100.0), i8(-9)), {}))
    return rows


def _random_grouped(rng):
    """Blocked b scales on the tensor cores (``mma-grouped``) with zero points on both sides: int8,
    K-major uint8 and packed int4 / uint4 b at M = 130, groups of 32 and 96 (K = 288, the last one
    ragged against the tile); rows as :func:`_random_cases` makes them."""
    rows = []
    k, n, m = 288, 136, 130

    def q(dt, shape):
        info = np.iinfo(dt) if dt in (i8, u8) else ml_dtypes.iinfo(dt)
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dt)

    for adt, bdt, layout in ((u8, i8, "rows"), (i8, u8, "K-major"), (u8, i4, "packed"), (i8, u4, "packed")):
        for g in (32, 96):
            b = q(bdt, (k, n))
            zp = q(bdt, (-(-k // g), n))
            bb, bz = (pack(b), pack(zp)) if layout == "packed" else (KMajor(b) if layout == "K-major" else b, zp)
            args = (q(adt, (m, k)), (rng.random((m, 1)) + 0.5).astype(f32), q(adt, (m, 1)), bb,
                    (rng.random(zp.shape) * 0.01).astype(f32), bz, rng.standard_normal(n).astype(f32))
            rows.append(("mm_float", f"{adt.__name__},{layout} {np.dtype(bdt).name} M={m} blocked {g} (tensor cores)",
                         intmm.matmul_integer_to_float, args, dict(block_size=g, dtype=(f32, f16)[g == 96])))
    return rows
