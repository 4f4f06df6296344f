"""The quantized types beyond int8 through the torch adapter (CPU tensors).

torch 2.13 has a dtype of the same name for bfloat16, the four float8 types and
int4/uint4/int2/uint2 (one element per byte, as ml_dtypes in NumPy); float4_e2m1fn is
torch.float4_e2m1fn_x2, two elements of the last axis a byte (the first in the low nibble, as
torch's c10 header draws it), so its tensors are half as long on that axis as the values they
hold. Expected values come from dmlq.reference on NumPy arrays; tensors are compared through
views of their bytes (torch implements no comparison for its 4-bit and 2-bit dtypes).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

import dmlq  # noqa: E402
import dmlq.torch  # noqa: E402,F401  (registers torch.ops.dmlq)
from dmlq import reference as R  # noqa: E402

f32 = np.float32
TYPES = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "int4", "uint4", "int2", "uint2",
         "int16", "uint16"]
NARROW = [n for n in TYPES if n not in ("int16", "uint16")]


def _bytes(a):
    """The raw bytes of a tensor or NumPy array, as NumPy (for comparing any dtype)."""
    if isinstance(a, torch.Tensor):
        a = a.view(torch.uint8 if a.element_size() == 1 else torch.int16).numpy()
    return a.view(np.uint8 if a.itemsize == 1 else np.int16)


def _same(got, want):
    assert isinstance(got, torch.Tensor)
    assert got.dtype == dmlq.torch.torch_dtype(want.dtype), (got.dtype, want.dtype)
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(_bytes(got), _bytes(want))


def _ref_quantize(x, scale, axis, block, dtype, saturate=True, precision=None):
    out = np.empty(x.shape, dtype)
    return R.quantize_linear(x, R.expand_blocks(scale, x.shape, axis, block), None, out, saturate, precision)


def _ref_dequantize(q, scale, axis, block, dtype):
    out = np.empty(q.shape, dtype)
    return R.dequantize_linear(q, R.expand_blocks(scale, q.shape, axis, block), None, out)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(25)
    x = (rng.standard_normal((5, 7)) * 6).astype(f32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    scale = rng.uniform(0.05, 0.8, (5, 3)).astype(f32)  # blocks of 3 along axis 1: 3, 3, 1
    return x, scale


@pytest.mark.parametrize("name", TYPES)
def test_blocked_quantize_dequantize_round_trip_equals_the_reference(name, data):
    x, scale = data
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    tdt = getattr(torch, name)
    want = _ref_quantize(x, scale, 1, 3, dt)
    tx, ts = torch.from_numpy(x), torch.from_numpy(scale)
    for dtype in (tdt, name, dt):  # a torch dtype, a name, NumPy's dtype
        _same(dmlq.quantize_linear(tx, ts, dtype=dtype, block_size=3), want)
    _same(torch.ops.dmlq.quantize_linear.tensor(tx, ts, None, dtype=tdt, block_size=3, axis=1), want)
    q = dmlq.quantize_linear(tx, ts, dtype=tdt, block_size=3)
    bscale = ts.to(torch.bfloat16)  # dequantize in bfloat16's scale, out as float32 and as bfloat16
    ref_scale = bscale.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    for out_dt, np_dt in ((torch.float32, f32), (torch.bfloat16, np.dtype(ml_dtypes.bfloat16))):
        want_d = _ref_dequantize(want, ref_scale, 1, 3, np_dt)
        _same(dmlq.dequantize_linear(q, bscale, block_size=3, dtype=out_dt), want_d)
        _same(torch.ops.dmlq.dequantize_linear.tensor(q, bscale, None, block_size=3, dtype=out_dt), want_d)


def test_per_axis_saturate_precision_and_out(data):
    x, scale = data
    tx = torch.from_numpy(x)
    s_axis = torch.from_numpy(scale[:, 0].copy())
    want = _ref_quantize(x, scale[:, :1], 0, 1, np.dtype(ml_dtypes.float8_e5m2), saturate=False,
                         precision=np.dtype(ml_dtypes.bfloat16))
    got = dmlq.quantize_linear(tx, s_axis, axis=0, dtype=torch.float8_e5m2, saturate=False, precision=torch.bfloat16)
    _same(got, want)
    assert np.isinf(want.astype(f32)).any()  # saturate=False made infinities: the flag reached the reference
    _same(torch.ops.dmlq.quantize_linear.tensor(tx, s_axis, None, axis=0, dtype=torch.float8_e5m2, saturate=False,
                                                precision=torch.bfloat16), want)
    out = torch.empty(5, 7, dtype=torch.float8_e5m2)
    ptr = out.data_ptr()
    assert dmlq.quantize_linear(tx, s_axis, axis=0, saturate=False, precision=torch.bfloat16, out=out) is out
    assert out.data_ptr() == ptr
    _same(out, want)
    xb = tx.to(torch.bfloat16)  # a bfloat16 x, default overload (a float scale), int4 out
    xb_np = xb.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    want4 = np.empty(x.shape, ml_dtypes.int4)
    R.quantize_linear(xb_np, f32(0.5), None, want4)
    _same(torch.ops.dmlq.quantize_linear(xb, 0.5, 0, dtype=torch.int4), want4)


def test_opcheck_where_torch_can_compare_the_dtypes(data):
    x, scale = data
    tx, ts = torch.from_numpy(x[1:]), torch.from_numpy(scale[1:])  # opcheck's comparisons take NaN as a mismatch
    q_op, dq_op = torch.ops.dmlq.quantize_linear, torch.ops.dmlq.dequantize_linear
    for tdt in (torch.float8_e4m3fn, torch.float8_e5m2fnuz):
        torch.library.opcheck(q_op.tensor, (tx, ts, None), {"dtype": tdt, "block_size": 3})
        torch.library.opcheck(q_op.default, (tx.to(torch.bfloat16), 0.25), {"dtype": tdt, "saturate": False})
        q = q_op.tensor(tx, ts, None, dtype=tdt, block_size=3)
        # torch's mutation check compares inputs with allclose, which float8 lacks: the other three checks
        for check in ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"):
            torch.library.opcheck(dq_op.tensor, (q, ts.to(torch.bfloat16), None), {"block_size": 3},
                                  test_utils=check)
    # 4-bit outputs: torch copies and compares no Int4 tensor, so only these two run
    for check in ("test_schema", "test_faketensor"):
        torch.library.opcheck(q_op.tensor, (tx, ts, None), {"dtype": torch.int4, "block_size": 3}, test_utils=check)


def test_fake_implementation_gives_narrow_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(4, 10, dtype=torch.uint4)
        d = torch.ops.dmlq.dequantize_linear.tensor(q, torch.empty(4, 3), None, block_size=4,
                                                    dtype=torch.bfloat16)
        assert d.shape == (4, 10) and d.dtype == torch.bfloat16
        y = torch.ops.dmlq.quantize_linear.tensor(torch.empty(6, 2), torch.empty(6), None, axis=0,
                                                  dtype=torch.int2)
        assert y.shape == (6, 2) and y.dtype == torch.int2
        with pytest.raises(ValueError, match=r"block_size = 3 on axis 1 of size 10 makes ceil\(10 / 3\) = 4 blocks"):
            torch.ops.dmlq.dequantize_linear.tensor(q, torch.empty(4, 3), None, block_size=3, axis=1)


def _pairs(codes):
    """float4 codes (..., 2 n) as torch.float4_e2m1fn_x2's bytes (..., n): torch's header draws a
    byte as val1 : val0, the first value in bits 3..0."""
    codes = np.asarray(codes).view(np.uint8) & 0x0F
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def test_float4_as_torch_float4_e2m1fn_x2(data):
    """float4_e2m1fn results come back as torch.float4_e2m1fn_x2 tensors of the packed bytes (the
    last axis halved), and such tensors are taken as q, plain or strided; out= is written in
    place; C order whatever x's order; an odd last axis and a 0-d tensor refused, named."""
    x, scale = data
    x = np.concatenate([x, -x[:, :1]], 1)  # (5, 8): an even last axis, blocks of 3: 3, 3, 2
    f4, x2 = np.dtype(ml_dtypes.float4_e2m1fn), torch.float4_e2m1fn_x2
    want = _ref_quantize(x, scale, 1, 3, f4)
    tx, ts = torch.from_numpy(x), torch.from_numpy(scale)
    for dtype in ("float4_e2m1fn", x2, f4):
        got = dmlq.quantize_linear(tx, ts, dtype=dtype, block_size=3)
        assert got.dtype == x2 and got.shape == (5, 4)
        np.testing.assert_array_equal(got.view(torch.uint8).numpy(), _pairs(want))
    op = torch.ops.dmlq.quantize_linear.tensor(tx, ts, None, dtype=x2, block_size=3, axis=1)
    np.testing.assert_array_equal(op.view(torch.uint8).numpy(), _pairs(want))
    for dtype in ("float4_e2m1fn", x2, f4, ml_dtypes.float4_e2m1fn):  # x in F order: C order out
        fx = dmlq.quantize_linear(tx.T.contiguous().T, ts, dtype=dtype, block_size=3)
        assert fx.is_contiguous() and np.array_equal(fx.view(torch.uint8).numpy(), _pairs(want)), dtype
    for out_dt, np_dt in ((torch.float32, f32), (torch.bfloat16, np.dtype(ml_dtypes.bfloat16))):
        want_d = _ref_dequantize(want, scale, 1, 3, np_dt)
        _same(dmlq.dequantize_linear(got, ts, block_size=3, dtype=out_dt), want_d)
        _same(torch.ops.dmlq.dequantize_linear.tensor(got, ts, None, block_size=3, dtype=out_dt), want_d)
    wide = torch.cat([got.view(torch.uint8), torch.full((5, 3), 0x77, dtype=torch.uint8)], 1)
    strided = wide[:, :4].view(x2)  # q's bytes in rows of 7
    assert not strided.is_contiguous()
    _same(dmlq.dequantize_linear(strided, ts, block_size=3), _ref_dequantize(want, scale, 1, 3, f32))
    for t in (got, strided):  # dmlq.pack of such a tensor: the Packed of the values it holds
        p = dmlq.pack(t)
        assert p.shape == (5, 8) and p.dtype == "float4_e2m1fn"
        np.testing.assert_array_equal(p.data, _pairs(want).reshape(-1))
    with pytest.raises(TypeError, match=r"pack: x is a torch.float4_e2m1fn_x2 tensor, whose values are float4"):
        dmlq.pack(got, dtype="int4")
    for out in (torch.empty(5, 4, dtype=x2), torch.empty(5, 9, dtype=torch.uint8)[:, 2:6].view(x2)):
        out.view(torch.uint8).fill_(0xA5)
        ptr = out.data_ptr()
        assert dmlq.quantize_linear(tx, ts, dtype="float4_e2m1fn", block_size=3, out=out) is out
        assert out.data_ptr() == ptr and np.array_equal(out.view(torch.uint8).numpy(), _pairs(want))
    with pytest.raises(ValueError, match=r"^quantize_linear: a float4_e2m1fn result of shape \(5, 7\) has a last "
                                         r"axis of 7 elements; .* torch.float4_e2m1fn_x2, two elements of the last "
                                         r"axis a byte"):
        dmlq.quantize_linear(tx[:, :7], ts, dtype=x2, block_size=3)
    with pytest.raises(ValueError, match=r"^dequantize_linear: q is a 0-d torch.float4_e2m1fn_x2 tensor, whose byte "
                                         r"holds two float4 values of no shape; pass q.reshape\(1\)"):
        dmlq.dequantize_linear(got[0, 0], 0.5)
    with pytest.raises(ValueError, match=r"out must have shape \(5, 8\) \(got \(5, 6\)\)"):
        dmlq.quantize_linear(tx, ts, dtype="float4_e2m1fn", block_size=3, out=torch.empty(5, 3, dtype=x2))


def test_float4_x2_through_opcheck_and_inductor(data):
    x, _ = data
    tx = torch.from_numpy(x[1:, :6].copy())  # (4, 6): no NaN (opcheck's comparisons take NaN as a mismatch)
    q_op, dq_op = torch.ops.dmlq.quantize_linear, torch.ops.dmlq.dequantize_linear
    x2 = torch.float4_e2m1fn_x2
    torch.library.opcheck(q_op.default, (tx, 0.25), {"dtype": x2})
    q = q_op.default(tx, 0.25, dtype=x2)
    # torch's mutation check copies the inputs (no copy kernel for float4_e2m1fn_x2): the other three
    for check in ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"):
        torch.library.opcheck(dq_op.default, (q, 0.25), {"dtype": torch.bfloat16}, test_utils=check)
    got = torch.compile(lambda t: dmlq.quantize_linear(t, 0.25, dtype=x2))(tx)  # Inductor, the default
    assert got.dtype == x2 and got.shape == (4, 3) and torch.equal(got.view(torch.uint8), q.view(torch.uint8))
    # dynamic shapes: the halved last axis is specialized (as a floor division, Inductor once sized the
    # bfloat16 product below from the first call's width: 8 elements checked against 4); the rows stay dynamic
    chain = torch.compile(lambda t: dmlq.dequantize_linear(dmlq.quantize_linear(t, 0.25, dtype=x2), 0.25,
                                                           dtype=torch.bfloat16) * 2, dynamic=True)
    wide = np.concatenate([x, -x[:, :1]], 1)[1:]  # (4, 8)
    for rows, width in ((2, 4), (3, 4), (2, 8)):
        t = torch.from_numpy(wide[:rows, :width].copy())
        want = dmlq.dequantize_linear(dmlq.quantize_linear(t, 0.25, dtype=x2), 0.25, dtype=torch.bfloat16) * 2
        assert torch.equal(chain(t).view(torch.int16), want.view(torch.int16)), (rows, width)


def test_cuda_narrow_tensors_are_refused_clearly():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match=r"zero_point must be zero \(or None\) for float8_e4m3fn"):
        dmlq.quantize_linear(x, 0.5, torch.ones((), dtype=torch.float8_e4m3fn), precision=torch.float32)
    with pytest.raises(TypeError, match=r"precision must be float32, float16 or bfloat16"):
        dmlq.quantize_linear(x, 0.5, dtype=torch.int4, precision=torch.int8)
    meta = torch.empty(4, dtype=torch.float8_e4m3fn, device="meta")
    got = dmlq.dequantize_linear(meta, 0.5)  # through the op's fake implementation: no data read
    assert got.device.type == "meta" and got.shape == (4,) and got.dtype == torch.float32


def test_a_narrow_view_of_int8_bytes_and_a_packed_cpu_tensor():
    """torch's int8.view(torch.int4) keeps each byte (-3 is 0xFD): the element is the low 4
    bits (the kernel once read 237). A dmlq.Packed whose data is a CPU tensor is refused with
    the NumPy fix (the message once said cupy.asarray for any tensor)."""
    for tdt, vals in ((torch.int4, [-8, -3, -1, 0, 1, 7]), (torch.int2, [-2, -1, 0, 1])):
        q = torch.tensor(vals, dtype=torch.int8).view(tdt)
        got = dmlq.dequantize_linear(q, torch.tensor(0.5))
        assert got.dtype == torch.float32 and got.tolist() == [v * 0.5 for v in vals]
    data = torch.tensor([0xE1, 0x03], dtype=torch.uint8)
    with pytest.raises(TypeError, match=r"q is a dmlq.Packed whose data is a torch tensor; .* pass "
                                        r"dmlq.Packed\(q.data.numpy\(\), q.shape, q.dtype\)"):
        dmlq.dequantize_linear(dmlq.Packed(data, (3,), "int4"), 0.5)
    assert np.array_equal(dmlq.dequantize_linear(dmlq.Packed(data.numpy(), (3,), "int4"), f32(0.5)), [0.5, -1, 1.5])
