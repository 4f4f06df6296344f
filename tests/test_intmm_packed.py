"""4-bit b as a dmlq.Packed (ONNX's nibble order) in matmul_integer, matmul_integer_to_float and
quantized_matmul on NumPy: equal to the same values given as int8/uint8 (the established path),
packed zero points, refusals by message; and onnxruntime's com.microsoft.MatMulNBits (CPU) where
its arithmetic is exact (docs/semantics.md says where it differs)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from test_api_gpu_path import gpu  # noqa: F401  (the cupy stand-in fixture)

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
I2, U2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)
WIDE = {I4: I8, U4: U8, I2: I8, U2: U8}


def qrand(rng, dtype, shape):
    info = ml_dtypes.iinfo(dtype) if dtype in WIDE else np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def bits(x):
    return np.asarray(x).view(np.uint8)


@pytest.mark.parametrize("bdt", [I4, U4, I2, U2], ids=["int4", "uint4", "int2", "uint2"])
@pytest.mark.parametrize("shape_a,shape_b", [((3, 7), (7, 5)), ((1, 1), (1, 1)), ((2, 0), (0, 3)),
                                             ((2, 1, 4, 33), (3, 33, 9)), ((5, 64), (64, 1))])
def test_packed_b_equals_the_wide_values(bdt, shape_a, shape_b):
    """A 4-bit or 2-bit b as an ml_dtypes array, a Packed and the .mT of the (N, K) Packed, with zero
    points none / packed / a Python int / an array, give the bytes of the same values as int8/uint8
    in all three operators; matmul_integer's int32 are NumPy's int64 sums. (The 2-bit b runs as the
    4-bit b of its values: tests/test_intmm_two_bit.py.)"""
    rng = np.random.default_rng(sum(shape_a) * 31 + sum(shape_b))
    a, b = qrand(rng, U8, shape_a), qrand(rng, bdt, shape_b)
    n, k = shape_b[-1], shape_b[-2]
    wide = b.astype(WIDE[bdt])
    p = dmlq.pack(b)
    assert p.data.size == -(-b.size * (4 if bdt in (I4, U4) else 2) // 8)
    forms = (b, p, dmlq.pack(np.ascontiguousarray(np.swapaxes(b, -1, -2))).mT)
    zp = qrand(rng, bdt, (n,))
    a_s = rng.uniform(0, 1, (shape_a[-2], 1)).astype(F32)
    b_s = rng.uniform(-1, 1, (n,)).astype(F32)
    for form in forms:
        for bzp_p, bzp_w in ((None, None), (dmlq.pack(zp), zp.astype(WIDE[bdt])), (int(zp[0]), int(zp[0])),
                             (zp, zp.astype(WIDE[bdt]))):
            got = dmlq.matmul_integer(a, form, np.uint8(3), bzp_p)
            np.testing.assert_array_equal(got, dmlq.matmul_integer(a, wide, np.uint8(3), bzp_w))
            sums = (a.astype(np.int64) - 3) @ (wide.astype(np.int64) - (0 if bzp_w is None else
                                                                      np.asarray(bzp_w, np.int64)))
            assert got.dtype == np.int32 and np.array_equal(got, sums)
            want = dmlq.quantized_matmul(a, np.float32(0.02), None, wide, np.float32(0.5), bzp_w, np.float32(0.7),
                                         np.int8(-5))
            got = dmlq.quantized_matmul(a, np.float32(0.02), None, form, np.float32(0.5), bzp_p, np.float32(0.7),
                                        np.int8(-5))
            np.testing.assert_array_equal(bits(got), bits(want))
        for dt in (F32, F16):
            want = dmlq.matmul_integer_to_float(a, a_s, None, wide, b_s, zp.astype(WIDE[bdt]), dtype=dt)
            got = dmlq.matmul_integer_to_float(a, a_s, None, form, b_s, dmlq.pack(zp), dtype=dt)
            assert got.dtype == dt
            np.testing.assert_array_equal(bits(got), bits(want))
        if k:
            block = 4
            g = -(-k // block)
            bs, bz = rng.uniform(-1, 1, (g, n)).astype(F32), qrand(rng, bdt, (g, n))
            want = dmlq.matmul_integer_to_float(a, a_s, None, wide, bs, bz.astype(WIDE[bdt]), block_size=block)
            got = dmlq.matmul_integer_to_float(a, a_s, None, form, bs, dmlq.pack(bz), block_size=block)
            np.testing.assert_array_equal(bits(got), bits(want))


def test_packed_b_extremes_and_odd_sizes():
    """a = 255 against b = -8 with b_zp = 7: every term 255 * -15; K odd so rows straddle bytes."""
    k, n = 33, 3
    a = np.full((2, k), 255, U8)
    b = np.full((k, n), -8, I4)
    p = dmlq.pack(b)
    got = dmlq.matmul_integer(a, p, None, 7)
    assert (got == 255 * -15 * k).all()
    u = dmlq.pack(np.full((k, n), 15, U4))
    assert (dmlq.matmul_integer(a, u, np.uint8(0), 0) == 255 * 15 * k).all()
    f = dmlq.matmul_integer_to_float(a, np.float32(1), None, p, np.float32(2.0**-10), 7, dtype=np.float16)
    assert (f == np.float16(255 * -15 * k * 2.0**-10)).all()


def test_packed_refusals():
    a = np.zeros((2, 4), U8)
    p = dmlq.pack(np.zeros((4, 3), I4))
    with pytest.raises(ValueError, match=r"b is a dmlq.Packed that does not hold its elements: int4 \(4, 3\) takes 6 bytes"):
        dmlq.matmul_integer(a, dmlq.Packed(p.data[:5], p.shape, p.dtype))
    with pytest.raises(TypeError, match="a packed b must be int4, uint4, int2 or uint2 .got a dmlq.Packed of "
                                        "float4_e2m1fn"):  # (int2 / uint2: tests/test_intmm_two_bit.py)
        dmlq.matmul_integer(a, dmlq.pack(np.zeros((4, 3), ml_dtypes.float4_e2m1fn)))
    with pytest.raises(TypeError, match="b_zero_point is a dmlq.Packed of uint4; it must have b's dtype"):
        dmlq.matmul_integer(a, p, None, dmlq.pack(np.zeros(3, U4)))
    with pytest.raises(dmlq.DescError, match="b_zero_point = 8 is out of range for int4"):
        dmlq.matmul_integer(a, p, None, 8)
    with pytest.raises(TypeError, match="b_zero_point must be a Python int, an array of dtype int4"):
        dmlq.matmul_integer(a, p, None, np.zeros(3, I8))
    with pytest.raises(ValueError, match="a has K = 4 columns but b has 5 rows"):
        dmlq.matmul_integer(a, dmlq.pack(np.zeros((5, 3), I4)))
    with pytest.raises(dmlq.DescError, match="a and b must be matrices or vectors"):
        dmlq.matmul_integer(a, dmlq.Packed(np.zeros(1, np.uint8), (), "int4"))
    with pytest.raises(dmlq.UnsupportedError, match="a 4-bit b runs on the GPU as a dmlq.Packed"):
        dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, None, np.zeros((4, 3), I4), 0.1, None, 0.1)
    plan = str(dmlq.kernel_plan(dmlq.quantized_matmul, a, 0.1, None, p, 0.1, None, 0.1))
    assert "quantized_matmul: stream-m4 (b: packed int4" in plan
    assert "matmul_stream_packed<uint8, packed_int4, uint8, 4>  grid 1x1  block 128" in plan


def test_kernel_plan_shows_the_packed_kernel():
    a = np.zeros((3, 64), U8)
    p = dmlq.pack(np.zeros((64, 300), U4))
    text = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, 0.1, 8, block_size=32))
    assert "matmul_stream_grouped<uint8, packed_uint4, 4>  grid 5x1  block 128" in text  # M <= 16
    assert "matmul_stream_grouped_finish<float>  grid 4x1  block 256  (groups in ascending order)" in text
    text = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, np.zeros((20, 64), U8), 0.1, None, p, 0.1, 8,
                                block_size=32))
    assert "matmul_dp4a_wide<uint8, packed_uint4, float, 64, 64, 32, 8, 4>  grid 5x1x1  block 128" in text
    assert "b: packed uint4, packed in shared memory, unpacked in registers" in text
    text = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, 0.1, 8, block_size=48))
    assert "matmul_stream_grouped<uint8, packed_uint4, 4>  grid 5x1x2  block 128" in text  # a group a chunk
    text = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, 0.1, None, p, 0.1, 8, block_size=2))
    assert "matmul_stream<uint8, packed_uint4, float, 4>  grid 3x1  block 128" in text  # workspace 16x b's
    assert "b: packed uint4, unpacked in registers" in text


# ------------------------------------------------------------------ onnxruntime MatMulNBits

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _nbits_feeds(b_u4, scales, zp_u4, block):
    """MatMulNBits' B, scales and zero_points for the (K, N) uint4 values b_u4, (G, N) scales and
    zero points (or None), in its layout (from its operator documentation)."""
    k, n = b_u4.shape
    g = -(-k // block)
    blob = block // 2
    # B: (N, G, block / 2) bytes, column n's k-th value in group k // block, low nibble first.
    col = np.zeros((n, g * block), np.uint8)
    col[:, :k] = b_u4.astype(np.uint8).T
    pairs = col.reshape(n, g, blob, 2)
    b_bytes = (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)
    feeds = {"B": b_bytes, "scales": np.ascontiguousarray(scales.T).reshape(-1)}
    if zp_u4 is not None:
        z = np.zeros((n, g + (g % 2)), np.uint8)
        z[:, :g] = zp_u4.astype(np.uint8).T
        feeds["zero_points"] = (z[:, 0::2] | (z[:, 1::2] << 4)).reshape(-1).astype(np.uint8)
    return feeds


def _matmul_nbits(a_f, b_u4, scales, zp_u4, block, bias=None):
    """com.microsoft.MatMulNBits (bits=4) on the CPU provider: a_f float32 (M, K), b_u4 (K, N) uint4
    values, scales (G, N) float32, zp_u4 (G, N) uint4 or None (its default: 8)."""
    from onnx import helper
    k, n = b_u4.shape
    inputs = {"A": a_f, **_nbits_feeds(b_u4, scales, zp_u4, block)}
    names = ["A", "B", "scales"] + (["zero_points"] if zp_u4 is not None else [])
    if bias is not None:
        names += [""] * (5 - len(names))
        inputs["bias"] = bias
        names.append("bias")
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    tp = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info(nm, tp(v.dtype), v.shape)
                                                for nm, v in inputs.items()],
                              [helper.make_tensor_value_info("Y", tp(np.dtype(F32)), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]


@pytest.mark.parametrize("m,k,n,block", [(1, 64, 8, 32), (4, 256, 33, 64), (16, 96, 5, 32), (3, 128, 16, 128)])
@pytest.mark.parametrize("with_zp", [False, True])
def test_matmul_nbits_equals_onnxruntime_where_exact(m, k, n, block, with_zp):
    """Integer-valued float A (a_scale 1) and power-of-two group scales: every product and partial sum
    of MatMulNBits' float arithmetic is exact, so its order does not matter and the bits must agree."""
    rng = np.random.default_rng(m * 7 + k + n)
    g = -(-k // block)
    a = qrand(rng, I8, (m, k))
    b = qrand(rng, U4, (k, n))
    scales = (2.0 ** rng.integers(-6, 3, (g, n))).astype(F32) * rng.choice([-1, 1], (g, n)).astype(F32)
    zp = qrand(rng, U4, (g, n)) if with_zp else None
    bias = rng.integers(-100, 100, n).astype(F32)
    want = _matmul_nbits(a.astype(F32), b, scales, zp, block, bias)
    got = dmlq.matmul_integer_to_float(a, np.float32(1), None, dmlq.pack(b), scales,
                                       dmlq.pack(zp) if with_zp else 8, bias, block_size=block)
    np.testing.assert_array_equal(got, want)


def _nbits_operands(feeds, k, n, block):
    """MatMulNBits' own B, scales and zero_points bytes as dmlq takes them, untouched: b the first K
    of each row of the Packed (N, G * block) they are (``.mT[..., :k, :]``: MatMulNBits pads each
    row to whole blocks), scales the .T of their (N, G) table, zero points the first G of each row
    of a Packed (N, G rounded up to even) (MatMulNBits pads each row of them to a byte)."""
    g = -(-k // block)
    return (dmlq.Packed(feeds["B"].reshape(-1), (n, g * block), "uint4").mT[..., :k, :],
            feeds["scales"].reshape(n, g).T, dmlq.Packed(feeds["zero_points"], (n, g + g % 2), "uint4").mT[..., :g, :])


@pytest.mark.parametrize("m,k,n,block", [(1, 256, 33, 64), (4, 128, 16, 32), (2, 512, 8, 128), (3, 100, 9, 32),
                                         (2, 80, 16, 32), (5, 200, 7, 64), (1, 17, 4, 16)])
def test_matmul_nbits_bytes_as_they_are(m, k, n, block):
    """MatMulNBits' inputs handed to dmlq as they are (b = Packed(B, (N, G * block)).mT[..., :K, :],
    its scales' and zero points' (N, G) tables transposed, the zero points' rows padded to a byte
    where G is odd) give onnxruntime's bits where its arithmetic is exact; K on and off the block
    size, G even and odd."""
    rng = np.random.default_rng(m + k + n)
    g = -(-k // block)
    a, b = qrand(rng, I8, (m, k)), qrand(rng, U4, (k, n))
    scales = (2.0 ** rng.integers(-6, 3, (g, n))).astype(F32) * rng.choice([-1, 1], (g, n)).astype(F32)
    zp = qrand(rng, U4, (g, n))
    bias = rng.integers(-100, 100, n).astype(F32)
    want = _matmul_nbits(a.astype(F32), b, scales, zp, block, bias)
    bt, st, zt = _nbits_operands(_nbits_feeds(b, scales, zp, block), k, n, block)
    np.testing.assert_array_equal(dmlq.matmul_integer_to_float(a, np.float32(1), None, bt, st, zt, bias,
                                                               block_size=block), want)


def test_matmul_nbits_bytes_on_the_gpu_path(gpu):
    """The same on the GPU path (the cupy stand-in: MatMulNBits' bytes read K-major by the grouped
    stream kernel at M = 1, 2 and 4, by dp4a-wide at M = 20 and by the tensor cores' mma-grouped at
    M = 130; K on and off the block size, an odd group count), equal to onnxruntime."""
    import cupy_stand_in as S

    rng = np.random.default_rng(11)
    for m, k, n, block in ((1, 256, 40, 64), (4, 256, 40, 64), (20, 256, 40, 64), (1, 200, 40, 64),
                           (20, 200, 40, 64), (2, 80, 24, 32), (130, 256, 160, 64), (130, 200, 208, 64)):
        g = -(-k // block)
        a, b = qrand(rng, I8, (m, k)), qrand(rng, U4, (k, n))
        scales = (2.0 ** rng.integers(-6, 3, (g, n))).astype(F32)
        zp = qrand(rng, U4, (g, n))
        want = _matmul_nbits(a.astype(F32), b, scales, zp, block)
        bt, st, zt = _nbits_operands(_nbits_feeds(b, scales, zp, block), k, n, block)
        dev = [dmlq.Packed(S.module.asarray(v.data), v.packed.shape, v.dtype).mT[..., :v.k, :] for v in (bt, zt)]
        S.launches.clear()
        got = dmlq.matmul_integer_to_float(S.module.asarray(a), np.float32(1), None, dev[0], S.module.asarray(st),
                                           dev[1], block_size=block)
        np.testing.assert_array_equal(got.get(), want)
        mains = [name for name, *_ in S.launches
                 if name.startswith(("matmul_stream_grouped<", "matmul_dp4a_wide<", "matmul_mma<"))]
        assert mains and all("kmajor_uint4" in name for name in mains), S.launches
        assert (m == 130) == any(name.endswith(", true>") for name in mains), S.launches


def test_matmul_nbits_rounds_in_another_order():
    """With general scales MatMulNBits multiplies before it sums (float dequantized weights), dmlq sums
    each group exactly first: the last bits differ somewhere (docs/semantics.md)."""
    rng = np.random.default_rng(5)
    m, k, n, block = 8, 512, 64, 32
    a, b = qrand(rng, I8, (m, k)), qrand(rng, U4, (k, n))
    scales = rng.uniform(0.001, 0.1, (k // block, n)).astype(F32)
    a_scale = np.float32(0.037)
    want = _matmul_nbits(a.astype(F32) * a_scale, b, scales, None, block)
    got = dmlq.matmul_integer_to_float(a, a_scale, None, dmlq.pack(b), scales, 8, block_size=block)
    assert np.count_nonzero(got != want) > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spelling", [I4, ml_dtypes.int4, "INT4", " int4"], ids=repr)
def test_a_packed_b_of_any_spelling_of_its_type(spelling):
    """A Packed whose dtype is the type's dtype, type object or another spelling of its name, as
    dmlq.unpack and dequantize_linear read it: the matmuls took only "int4" / "uint4" and refused
    the rest as "a packed b must be int4 or uint4 (got a dmlq.Packed of int4)" (the message then)."""
    rng = np.random.default_rng(41)
    a, w, zp = qrand(rng, U8, (3, 8)), qrand(rng, I4, (8, 5)), qrand(rng, I4, (5,))
    p, z = dmlq.pack(w), dmlq.pack(zp)
    other, other_zp = dmlq.Packed(p.data, p.shape, spelling), dmlq.Packed(z.data, z.shape, spelling)
    assert dmlq.unpack(other).dtype == I4
    np.testing.assert_array_equal(dmlq.matmul_integer(a, other, 2, other_zp), dmlq.matmul_integer(a, p, 2, z))
    np.testing.assert_array_equal(bits(dmlq.matmul_integer_to_float(a, 0.1, None, other, 0.2, other_zp)),
                                  bits(dmlq.matmul_integer_to_float(a, 0.1, None, p, 0.2, z)))
    np.testing.assert_array_equal(dmlq.quantized_matmul(a, 0.1, None, other, 0.2, other_zp, 0.3),
                                  dmlq.quantized_matmul(a, 0.1, None, p, 0.2, z, 0.3))
    with pytest.raises(TypeError, match=r"a packed b must be int4, uint4, int2 or uint2 \(got a dmlq\.Packed of "
                                        r"float4_e2m1fn\)"):
        dmlq.matmul_integer(a, dmlq.Packed(p.data[:4], p.shape, "float4_e2m1fn"))


def test_a_packed_b_named_in_another_spelling_under_torch_compile():
    """The same inside torch.compile, where the Packed is unpacked by tensor operations: "INT4" was
    refused there (a dtype object stays beyond Dynamo's tracing: it cannot compare NumPy dtypes)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("dmlq.torch")
    rng = np.random.default_rng(42)
    a, w = qrand(rng, U8, (3, 8)), qrand(rng, I4, (8, 5))
    p = dmlq.pack(w)
    other = dmlq.Packed(p.data, p.shape, "INT4")
    fn = torch.compile(lambda x: dmlq.matmul_integer(x, other, 2, 1), fullgraph=True, backend="aot_eager")
    np.testing.assert_array_equal(fn(torch.from_numpy(a)).numpy(), dmlq.matmul_integer(a, p, 2, 1))


def test_a_packed_zero_point_beside_a_torch_four_bit_b():
    """A torch.int4 / uint4 b with its zero point as a dmlq.Packed (of NumPy bytes), as the same
    zero point as an ml_dtypes array was taken: it was refused as "b_zero_point is a dmlq.Packed of
    int4; it must have b's dtype (torch.int4)"."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("dmlq.torch")
    rng = np.random.default_rng(43)
    for dt, tdt in ((I4, torch.int4), (U4, torch.uint4)):
        a, zp = qrand(rng, U8, (3, 8)), qrand(rng, dt, (5,))
        w = dmlq.quantize_linear(torch.randn(8, 5) * 4, 1.0, dtype=tdt)
        want = dmlq.matmul_integer(torch.from_numpy(a), w, 1, zp)
        got = dmlq.matmul_integer(torch.from_numpy(a), w, 1, dmlq.pack(zp))
        assert torch.equal(got, want)
        other = I4 if dt == U4 else U4
        with pytest.raises(TypeError, match=rf"b_zero_point is a dmlq\.Packed of {other.name}; it must have b's "
                                            rf"dtype \(torch\.{dt.name}\)"):
            dmlq.matmul_integer(torch.from_numpy(a), w, 1, dmlq.pack(qrand(rng, other, (5,))))


def _matmul_nbits8(a_f, b_rows, scales, zp, k, block):
    """com.microsoft.MatMulNBits with bits=8 on the CPU provider: B its (N, G, block) bytes ``b_rows``
    (each row of N padded to whole blocks), scales and zero points (N, G) tables (zp None: its
    default 128)."""
    from onnx_cases import run_onnx

    n, g = scales.shape
    return run_onnx("MatMulNBits", [a_f, b_rows.reshape(n, g, block), scales.reshape(-1),
                                    None if zp is None else zp.reshape(-1)], F32, domain="com.microsoft", opset=21,
                    K=k, N=n, bits=8, block_size=block)


@pytest.mark.parametrize("m,k,n,block,with_zp", [(3, 64, 8, 16, True), (2, 100, 9, 32, True), (1, 256, 33, 64, False),
                                                 (20, 96, 40, 32, True)])
def test_matmul_nbits8_bytes_as_they_are(gpu, m, k, n, block, with_zp):
    """MatMulNBits with bits=8 needs no packing: its B is the uint8 (N, G * block) rows, so b is the
    view ``B.reshape(N, -1)[:, :K].T`` (K-major, rows padded to whole blocks), its scales and zero
    points the .T of their (N, G) tables (or its default 128); onnxruntime's bits where its float
    arithmetic is exact, on NumPy and on the GPU path (the stand-in: the K-major 8-bit kernels)."""
    import cupy_stand_in as S

    rng = np.random.default_rng(m + k + n)
    g = -(-k // block)
    a = qrand(rng, I8, (m, k))
    rows = rng.integers(0, 256, (n, g * block), dtype=np.uint8)
    scales = (2.0 ** rng.integers(-8, 0, (n, g))).astype(F32)
    zp = rng.integers(0, 256, (n, g), dtype=np.uint8) if with_zp else None
    want = _matmul_nbits8(a.astype(F32), rows, scales, zp, k, block)
    got = dmlq.matmul_integer_to_float(a, np.float32(1), None, rows[:, :k].T, scales.T,
                                       zp.T if with_zp else 128, block_size=block)
    np.testing.assert_array_equal(got, want)
    dev_rows = S.module.asarray(rows)
    got = dmlq.matmul_integer_to_float(S.module.asarray(a), np.float32(1), None, dev_rows[:, :k].T,
                                       S.module.asarray(scales).T, S.module.asarray(zp).T if with_zp else 128,
                                       block_size=block)
    np.testing.assert_array_equal(got.get(), want)
