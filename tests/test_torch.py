"""torch tensors through the public functions and the torch.ops.dmlq custom ops.

Expected values come from dmlq.reference (NumPy), never from the torch path.
CPU tests run in CI; the CUDA ones (torch's stream, graph capture) carry `gpu`.
"""
from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dmlq  # noqa: E402
import dmlq.torch  # noqa: E402,F401  (registers torch.ops.dmlq)
from dmlq import reference as R  # noqa: E402

f32 = np.float32


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _ref(fn, shape, dtype, *args, params=()):
    out = np.empty(shape, dtype)
    return fn(*args, out, *params)


# ---- one seeded case per operator: (name, scalar-overload args, kwargs, expected) and the tensor form

def _cases(seed=7):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((5, 6)) * 4).astype(f32)
    x[0, :3] = [np.nan, np.inf, 2.5]
    q = rng.integers(0, 256, (5, 6), dtype=np.uint8)
    a = rng.integers(0, 256, (6, 9), dtype=np.uint8)
    b = rng.integers(-128, 128, (9, 5), dtype=np.int8)
    img = rng.integers(0, 256, (2, 3, 7, 6), dtype=np.uint8)
    s_col = rng.uniform(0.01, 0.1, (1, 6)).astype(f32)
    z_col = rng.integers(0, 256, (1, 6), dtype=np.uint8)
    s_row = rng.uniform(0.01, 0.1, (6, 1)).astype(f32)
    s_n = rng.uniform(0.001, 0.01, (5,)).astype(f32)
    s_c = rng.uniform(0.05, 0.2, (3,)).astype(f32)
    z_row = rng.integers(0, 256, (6, 1), dtype=np.uint8)
    z_n = rng.integers(-128, 128, (1, 5), dtype=np.int8)
    s_blocks = rng.uniform(0.001, 0.01, (3, 5)).astype(f32)  # K = 9 in blocks of 4: 4, 4, 1
    z_blocks = rng.integers(-128, 128, (3, 5), dtype=np.int8)
    bias = (rng.standard_normal(5) * 10).astype(f32)
    pool_kw = dict(strides=[2, 2], start_padding=[1, 0], end_padding=[1, 1], ceil_mode=True)
    pool_params = ((3, 2), (2, 2), (1, 0), (1, 1), (1, 1), False)
    u8, i8 = np.uint8, np.int8
    return [
        ("quantize_linear", (x, 0.05, 7), {}, _ref(R.quantize_linear, x.shape, u8, x, f32(0.05), u8(7)),
         (x, s_col, z_col), {}, _ref(R.quantize_linear, x.shape, u8, x, s_col, z_col)),
        ("dequantize_linear", (q, 0.1, 3), {}, _ref(R.dequantize_linear, q.shape, f32, q, f32(0.1), u8(3)),
         (q, s_col, z_col), {}, _ref(R.dequantize_linear, q.shape, f32, q, s_col, z_col)),
        ("quantized_add", (q, 0.1, 3, q.T.copy().T, 0.05, 128, 0.2, -4), {"dtype": torch.int8},
         _ref(R.quantized_add, q.shape, i8, q, f32(.1), u8(3), q, f32(.05), u8(128), f32(.2), i8(-4)),
         (q, np.array(0.1, f32), np.array(3, u8), q, np.array(.05, f32), None, np.array(.2, f32), None),
         {}, _ref(R.quantized_add, q.shape, u8, q, f32(.1), u8(3), q, f32(.05), None, f32(.2), None)),
        ("quantized_matmul", (a, 0.02, 128, b, 0.01, 0, 0.5, 5), {},
         _ref(R.quantized_matmul, (6, 5), u8, a, f32(.02), u8(128), b, f32(.01), None, f32(.5), u8(5)),
         (a, s_row, np.array(128, u8), b, s_n, None, np.array(0.5, f32), None), {"dtype": torch.int8},
         _ref(R.quantized_matmul, (6, 5), i8, a, s_row.ravel(), u8(128), b, s_n, None, f32(.5), None)),
        ("quantized_avg_pool", (img, 0.1, 3, 0.1, 3, [3, 2]), pool_kw,
         _ref(R.quantized_avg_pool, (2, 3, 4, 3), u8, img, f32(.1), u8(3), f32(.1), u8(3), params=pool_params),
         (img, s_c, None, np.array(0.1, f32), None, [3, 2]), pool_kw,
         _ref(R.quantized_avg_pool, (2, 3, 4, 3), u8, img, s_c, None, f32(.1), None, params=pool_params)),
        ("matmul_integer", (a, b, 3, -2), {}, _ref(R.matmul_integer, (6, 5), np.int32, a, u8(3), b, i8(-2)),
         (a, b, z_row, z_n), {}, _ref(R.matmul_integer, (6, 5), np.int32, a, z_row, b, z_n)),
        ("matmul_integer_to_float", (a, 0.02, 128, b, 0.01, 0), {},
         _ref(R.matmul_integer_to_float, (6, 5), f32, a, f32(.02), u8(128), b, f32(.01), i8(0), None),
         (a, s_row, z_row, b, s_blocks, z_blocks, bias), {"dtype": torch.float16, "block_size": 4},
         _ref(R.matmul_integer_to_float, (6, 5), np.float16, a, s_row, z_row, b, s_blocks, z_blocks, bias,
              params=(4,))),
    ]


CASES = {c[0]: c for c in _cases()}


def _tensors(args):
    return tuple(_t(v) if isinstance(v, np.ndarray) else v for v in args)


@pytest.mark.parametrize("name", list(CASES))
def test_public_function_takes_and_returns_cpu_tensors(name):
    _, args, kw, want, targs, tkw, twant = CASES[name]
    fn = getattr(dmlq, name)
    for a, k, w in ((args, kw, want), (targs, tkw, twant)):
        got = fn(*_tensors(a), **k)
        assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
        assert got.dtype == dmlq.torch.torch_dtype(w.dtype)
        np.testing.assert_array_equal(got.numpy(), w, strict=True)


@pytest.mark.parametrize("name", list(CASES))
def test_custom_op_both_overloads_equal_the_reference(name):
    _, args, kw, want, targs, tkw, twant = CASES[name]
    packet = getattr(torch.ops.dmlq, name)
    got = packet(*_tensors(args), **kw)  # resolves to .default: Python scalars
    np.testing.assert_array_equal(got.numpy(), want, strict=True)
    got = packet.tensor(*_tensors(targs), **tkw)
    np.testing.assert_array_equal(got.numpy(), twant, strict=True)


@pytest.mark.parametrize("name", list(CASES))
def test_opcheck(name):
    _, args, kw, _, targs, tkw, _ = CASES[name]
    packet = getattr(torch.ops.dmlq, name)
    torch.library.opcheck(packet.default, _tensors(args), kw)
    torch.library.opcheck(packet.tensor, _tensors(targs), tkw)


def test_integer_matmul_family_takes_cpu_tensors():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (4, 9), dtype=np.uint8)
    b = rng.integers(-128, 128, (9, 3), dtype=np.int8)
    a_zp = rng.integers(0, 256, (4, 1), dtype=np.uint8)
    want = np.empty((4, 3), np.int32)
    R.matmul_integer(a, a_zp, b, None, want)
    got = dmlq.matmul_integer(_t(a), _t(b), _t(a_zp))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy(), want)
    f = dmlq.matmul_integer_to_float(_t(a), 0.5, _t(a_zp), _t(b), torch.full((3,), 0.25), None, dtype=torch.float16)
    assert f.dtype == torch.float16
    np.testing.assert_array_equal(f.numpy(), dmlq.matmul_integer_to_float(a, 0.5, a_zp, b, np.full(3, 0.25, f32), None,
                                                                           dtype=np.float16))
    # bfloat16 scales, bias and out (the W8A8 linear layer of a bfloat16 model): the NumPy call's bits
    bf = dict(a_scale=torch.full((4, 1), 0.5).bfloat16(), b_scale=torch.tensor([0.25, -3.0, 1e-3]).bfloat16(),
              bias=torch.tensor([1.5, -2.0, 0.1]).bfloat16())
    got = dmlq.matmul_integer_to_float(_t(a), bf["a_scale"], _t(a_zp), _t(b), bf["b_scale"], None, bf["bias"],
                                       dtype=torch.bfloat16)
    bf_np = {k: v.float().numpy().astype(ml_dtypes.bfloat16) for k, v in bf.items()}
    want = dmlq.matmul_integer_to_float(a, bf_np["a_scale"], a_zp, b, bf_np["b_scale"], None, bf_np["bias"],
                                        dtype=ml_dtypes.bfloat16)
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), want.view(np.int16))
    packet = torch.ops.dmlq.matmul_integer_to_float
    torch.library.opcheck(packet.tensor, (_t(a), bf["a_scale"], _t(a_zp), _t(b), bf["b_scale"], None, bf["bias"]),
                          {"dtype": torch.bfloat16})


def test_schemas_say_scalars_and_optional_zero_points_as_torch_does():
    assert str(torch.ops.dmlq.quantize_linear.default._schema) == (
        "dmlq::quantize_linear(Tensor x, float scale, SymInt zero_point=0, *, ScalarType? dtype=None, int? axis=None, "
        "int? block_size=None, bool saturate=True, ScalarType? precision=None) -> Tensor")
    assert str(torch.ops.dmlq.dequantize_linear.tensor._schema) == (
        "dmlq::dequantize_linear.tensor(Tensor q, Tensor scale, Tensor? zero_point=None, *, ScalarType? dtype=None, "
        "int? axis=None, int? block_size=None) -> Tensor")
    assert "int[] window_size, *, int[]? strides=None" in str(torch.ops.dmlq.quantized_avg_pool.default._schema)
    assert str(torch.ops.dmlq.matmul_integer.tensor._schema) == (
        "dmlq::matmul_integer.tensor(Tensor a, Tensor b, Tensor? a_zero_point=None, Tensor? b_zero_point=None) "
        "-> Tensor")
    assert str(torch.ops.dmlq.matmul_integer_to_float.default._schema).endswith(
        "SymInt b_zero_point, Tensor? bias=None, *, ScalarType? dtype=None, int? block_size=None) -> Tensor")


def test_out_is_written_in_place_and_views_need_no_copy():
    x = torch.randn(6, 8)[:, ::2]  # a strided view: read where it lies
    out = torch.empty(6, 4, dtype=torch.int8)
    ptr = out.data_ptr()
    got = dmlq.quantize_linear(x, 0.1, dtype=torch.int8, out=out)
    assert got is out and out.data_ptr() == ptr
    xn = x.numpy()
    np.testing.assert_array_equal(out.numpy(), _ref(R.quantize_linear, xn.shape, np.int8, xn, f32(.1), None))
    # out= overlapping an input (in place) is still exact: the tensor's own memory is written
    a = _t(np.arange(-8, 8, dtype=np.int8))
    want = _ref(R.quantized_add, (16,), np.int8, a.numpy().copy(), f32(.5), None, a.numpy().copy(), f32(.5),
                None, f32(.75), None)
    assert dmlq.quantized_add(a, 0.5, None, a, 0.5, None, 0.75, None, dtype=torch.int8, out=a) is a
    np.testing.assert_array_equal(a.numpy(), want)


def test_errors_speak_torch_and_name_the_argument():
    x = torch.randn(4)
    with pytest.raises(TypeError, match=r"got float64.*pass x\.to\(torch\.float32\)"):
        dmlq.quantize_linear(x.double(), 0.1)
    with pytest.raises(TypeError, match=r"pass scale\.to\(torch\.float16\)"):
        dmlq.quantize_linear(x.half(), torch.ones(4, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"torch\.tensor makes int64.*q\.to\(torch\.int32\) or q\.to\(torch\.uint8\)"):
        dmlq.dequantize_linear(torch.tensor([1, 2]), 0.5)  # int64
    with pytest.raises(TypeError, match=r"x must have dtype float32, float16 or int32 \(got float8_e8m0fnu\); pass x\.to\(torch\.float32\)"):
        dmlq.quantize_linear(x.to(torch.float8_e8m0fnu), 0.1)
    with pytest.raises(TypeError, match=r"torch\.empty\(\(4,\), dtype=torch\.uint8\)"):
        dmlq.quantize_linear(x, 0.1, out=torch.empty(4, dtype=torch.int32))
    # a NumPy operand beside a CPU tensor is taken, and keeps NumPy's words
    with pytest.raises(TypeError, match=r"pass scale\.astype\(np\.float32\)"):
        dmlq.quantize_linear(x, np.array([0.1]))
    got = dmlq.quantize_linear(x, np.full(4, 0.1, f32))
    assert isinstance(got, torch.Tensor) and torch.equal(got, dmlq.quantize_linear(x, 0.1))


def test_mixed_arrays_and_devices_are_refused_before_any_work():
    x = torch.randn(4)
    with pytest.raises(TypeError, match=r"out is a numpy\.ndarray but x is a torch tensor; pass torch\.as_tensor"):
        dmlq.quantize_linear(x, 0.1, out=np.empty(4, np.uint8))
    meta = torch.empty(4, device="meta")  # a tensor on another device than x
    with pytest.raises(ValueError, match=r"scale is on meta but x is on cpu.*scale\.to\(x\.device\)"):
        dmlq.quantize_linear(x, meta)
    with pytest.raises(ValueError, match=r"out is on cpu but x is on meta"):
        dmlq.quantize_linear(meta, 0.1, out=torch.empty(4, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"scale is a numpy\.ndarray but x is a torch tensor on meta"):
        dmlq.quantize_linear(meta, np.full(4, 0.1, f32))  # host arrays go only with CPU tensors
    with pytest.raises(ValueError, match=r"scale is on cpu but x is on meta.*\(or a Python number\)"):
        torch.ops.dmlq.quantize_linear.tensor(meta, torch.tensor(0.1))  # the fake implementation checks too
    # the public function on meta tensors goes through the op: its fake implementation's output
    got = dmlq.quantize_linear(meta, 0.1, dtype=torch.int8)
    assert got.device.type == "meta" and got.shape == (4,) and got.dtype == torch.int8
    # on the meta device the fake implementation gives the output (as torch's own ops do)
    assert torch.ops.dmlq.quantized_matmul(torch.empty(3, 4, dtype=torch.uint8, device="meta"), 0.1, 0,
                                           torch.empty(4, 2, dtype=torch.int8, device="meta"), 0.1, 0, 0.2,
                                           dtype=torch.int8).shape == (3, 2)


def test_fake_implementation_runs_the_real_checks():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5)
        y = torch.ops.dmlq.quantize_linear(x, 0.1, -3, dtype=torch.int8)
        assert y.shape == (3, 5) and y.dtype == torch.int8
        with pytest.raises(ValueError, match="shapes do not broadcast"):
            torch.ops.dmlq.quantize_linear.tensor(x, torch.ones(4))
        p = torch.ops.dmlq.quantized_avg_pool(torch.empty(1, 2, 7, 7, dtype=torch.uint8), 0.1, 0, 0.1, 0, [2, 2],
                                              strides=[2, 2], ceil_mode=True)
        assert p.shape == (1, 2, 4, 4) and p.dtype == torch.uint8


def test_compile_fullgraph_chain_equals_eager_bit_for_bit():
    rng = np.random.default_rng(11)
    x = _t((rng.standard_normal((16, 24)) * 3).astype(f32))
    w = _t(rng.integers(-128, 128, (24, 8), dtype=np.int8))
    ws = _t(rng.uniform(0.005, 0.02, (8,)).astype(f32))

    def chain(x, w, ws):  # the custom ops, and the public functions (traced as the custom ops)
        q = torch.ops.dmlq.quantize_linear(x, 0.05, 128)
        y = dmlq.quantized_matmul(q, 0.05, 128, w, ws, None, 0.25, None, dtype=torch.int8)
        y = torch.ops.dmlq.quantized_add.tensor(y, torch.tensor(0.25), None, y, torch.tensor(0.25), None,
                                                torch.tensor(0.5), None, dtype=torch.int8)
        return dmlq.dequantize_linear(y, 0.5, 0)

    start = time.perf_counter()
    compiled = torch.compile(chain, fullgraph=True)  # fullgraph: a graph break is an error
    got = compiled(x, w, ws)
    print(f"torch.compile + first call: {time.perf_counter() - start:.1f} s")
    eager = chain(x, w, ws)
    assert torch.equal(got, eager) and got.dtype == torch.float32
    xn = x.numpy()
    q = _ref(R.quantize_linear, xn.shape, np.uint8, xn, f32(.05), np.uint8(128))
    y = _ref(R.quantized_matmul, (16, 8), np.int8, q, f32(.05), np.uint8(128), w.numpy(), ws.numpy(), None,
             f32(.25), None)
    y = _ref(R.quantized_add, y.shape, np.int8, y, f32(.25), None, y, f32(.25), None, f32(.5), None)
    np.testing.assert_array_equal(got.numpy(), _ref(R.dequantize_linear, y.shape, f32, y, f32(.5), None))


def test_compile_with_dynamic_shapes_specializes_nothing_and_gives_eager_bits():
    """The fakes take symbolic sizes: one graph serves every shape (dynamic=True), and sizes
    marked dynamic stay so (a fake that made them concrete is a ConstraintViolationError).
    backend="aot_eager": AOTAutograd traces the fakes on SymInts without compiling C++ (cheap)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    rng = np.random.default_rng(13)

    def chain(x, w, ws, img):
        q = torch.ops.dmlq.quantize_linear(x, 0.05, 128)
        y = dmlq.quantized_matmul(q, 0.05, 128, w, ws, None, 0.25, None, dtype=torch.int8)
        f = torch.ops.dmlq.matmul_integer_to_float(q, 0.05, 128, w, 0.01, 0, dtype=torch.float16)
        p = dmlq.quantized_avg_pool(img, 0.1, 0, 0.1, 0, [3, 3], strides=[2, 2], ceil_mode=True)
        z = torch.ops.dmlq.quantized_add(y, 0.25, 0, y, 0.25, 0, 0.5, dtype=torch.int8)
        return dmlq.dequantize_linear(z, 0.5, 0), f, dmlq.matmul_integer(q, w, 128), p

    def args(m, k, n, h):
        return (_t((rng.standard_normal((m, k)) * 3).astype(f32)), _t(rng.integers(-128, 128, (k, n), dtype=np.int8)),
                _t(rng.uniform(0.005, 0.02, (n,)).astype(f32)), _t(rng.integers(0, 256, (1, 2, h, 12), dtype=np.uint8)))

    start = time.perf_counter()
    for dynamic, shapes in ((True, ((5, 7, 3, 9), (11, 16, 6, 14), (17, 7, 9, 20))),
                            (None, ((5, 7, 3, 9), (11, 7, 3, 14)))):
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(chain, backend=counter, dynamic=dynamic, fullgraph=True)
        for shape in shapes:
            inputs = args(*shape)
            if dynamic is None:  # only the sizes that change, marked
                torch._dynamo.mark_dynamic(inputs[0], 0)
                torch._dynamo.mark_dynamic(inputs[3], 2)
            got, want = compiled(*inputs), chain(*inputs)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and torch.equal(g, w)
        assert counter.frame_count == 1  # one graph for every shape
    xn = inputs[0].numpy()
    q = _ref(R.quantize_linear, xn.shape, np.uint8, xn, f32(.05), np.uint8(128))
    np.testing.assert_array_equal(got[2].numpy(), _ref(R.matmul_integer, (11, 3), np.int32, q, np.uint8(128),
                                                       inputs[1].numpy(), None))
    print(f"dynamic-shape compiles (aot_eager), 5 shapes: {time.perf_counter() - start:.1f} s")


def test_pack_takes_narrow_torch_tensors_and_uint8_codes():
    """dmlq.pack of a torch.int4 / float8 tensor gives ONNX's bytes, as of the ml_dtypes array
    (it refused them, naming int4 among the types it takes)."""
    import ml_dtypes

    x = np.array([[-8, 7, 1, -1], [0, 3, -2, 5]], f32)
    for name in ("int4", "uint4", "int2", "float4_e2m1fn", "float8_e4m3fn"):
        if not hasattr(torch, name):
            continue
        t = dmlq.quantize_linear(_t(np.abs(x) if name.startswith("u") else x), 1.0, dtype=getattr(torch, name))
        got, want = dmlq.pack(t), dmlq.pack(dmlq.quantize_linear(np.abs(x) if name.startswith("u") else x, 1.0,
                                                                 dtype=name))
        assert got.dtype == want.dtype == name and got.shape == want.shape == (2, 4)
        assert isinstance(got.data, np.ndarray) and np.array_equal(got.data, want.data), name
    codes = dmlq.pack(torch.tensor([1, 2, 3], dtype=torch.uint8), dtype="uint2")
    assert codes.data.tolist() == [0b111001]
    with pytest.raises(TypeError, match=r"pack: x must be a uint4 tensor or a uint8 tensor of uint4 codes"):
        dmlq.pack(torch.ones(3), dtype="uint4")
    assert ml_dtypes.int4  # the reference side's dtype


def test_a_tensor_that_requires_grad_keeps_the_graph_and_backward_refuses():
    """dmlq registers no derivative: a call with a tensor that requires grad goes through the
    custom op, so its float result is in the autograd graph and backward raises, as inside
    torch.compile (the eager call dropped the graph silently: a scale's gradient just vanished);
    out= is refused there as torch refuses it for its own ops."""
    q = torch.tensor([1, 2, 250], dtype=torch.uint8)
    s = torch.tensor(0.5, requires_grad=True)
    y = dmlq.dequantize_linear(q, s, 3)
    assert y.requires_grad and y.grad_fn is not None
    assert torch.equal(y.detach(), dmlq.dequantize_linear(q, s.detach(), 3))
    with pytest.raises(RuntimeError, match="dmlq.dequantize_linear: dmlq registers no derivative"):
        y.sum().backward()
    with pytest.raises(TypeError, match=r"dequantize_linear: out= is not taken with a tensor that requires grad"):
        dmlq.dequantize_linear(q, 0.5, out=torch.zeros(3, requires_grad=True))
    with torch.no_grad():
        assert not dmlq.dequantize_linear(q, s, 3).requires_grad
    x = torch.randn(5, requires_grad=True)  # an integer result carries no graph
    assert torch.equal(dmlq.quantize_linear(x, 0.1, 3), dmlq.quantize_linear(x.detach(), 0.1, 3))


def test_vector_operands_eager_and_compiled():
    """numpy.matmul's vectors on torch tensors: eager, and compiled with dynamic shapes (the fake's
    symbolic shape drops the vector's dimension too)."""
    rng = np.random.default_rng(8)
    a, A = _t(rng.integers(0, 256, (7,), dtype=np.uint8)), _t(rng.integers(0, 256, (5, 7), dtype=np.uint8))
    b, bv = _t(rng.integers(-128, 128, (7, 4), dtype=np.int8)), _t(rng.integers(-128, 128, (7,), dtype=np.int8))

    def f(x, y):
        return dmlq.matmul_integer_to_float(x, 0.5, 3, y, 0.25, 0)

    for x, y in ((a, b), (A, bv), (a, bv)):
        want = dmlq.matmul_integer_to_float(x.numpy(), 0.5, 3, y.numpy(), 0.25, 0)
        got = f(x, y)
        assert tuple(got.shape) == want.shape and np.array_equal(got.numpy(), want)
    for dynamic in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=dynamic)
        for x, y in ((a, b), (A, bv)):
            assert torch.equal(compiled(x, y), f(x, y))


def test_traced_calls_give_zero_points_their_type_and_dtype_any_spelling():
    """The traced form of the public functions (inside torch.compile, and eager with a tensor
    that requires grad) turned a Python int zero point beside a tensor scale into a tensor of the
    output's type: dequantize's int16 zero point -5 became uint8 251 (other values), quantize's
    -3 wrapped to 253 where eager refuses it. dtype= as NumPy's dtype or a name failed to trace;
    a float8_e5m2 tensor broke the fake implementation; non-strict torch.export read fake
    tensors' data."""
    rng = np.random.default_rng(21)
    q16 = _t(rng.integers(-1000, 1000, (4, 6)).astype(np.int16))
    s = torch.tensor(0.05)

    def dq(q, scale):
        return dmlq.dequantize_linear(q, scale, -5)

    def dq32(q, scale):
        return dmlq.dequantize_linear(q, scale, 3, dtype=torch.float32)

    for fn in (dq, dq32):
        torch._dynamo.reset()
        assert torch.equal(torch.compile(fn, backend="aot_eager", fullgraph=True)(q16, s), fn(q16, s))
        assert torch.equal(fn(q16, s.clone().requires_grad_()).detach(), fn(q16, s))
    with pytest.raises(dmlq.DescError, match="zero_point = -3 is out of range for uint8"):
        dmlq.quantize_linear(torch.randn(3), s.clone().requires_grad_(), -3)
    x = torch.randn(4, 6)
    for dtype in (np.int8, np.dtype("uint16"), "int4"):
        torch._dynamo.reset()
        f = torch.compile(lambda t: dmlq.quantize_linear(t, 0.05, dtype=dtype), backend="aot_eager", fullgraph=True)
        got, want = f(x), dmlq.quantize_linear(x, 0.05, dtype=dtype)
        assert got.dtype == want.dtype and torch.equal(got.view(torch.uint8) if got.element_size() == 1 else got,
                                                       want.view(torch.uint8) if want.element_size() == 1 else want)
    from dmlq.torch import _polyfill  # the traced form itself: a NumPy zero point of dequantize is q's type
    q8 = _t(rng.integers(0, 256, (5,), dtype=np.uint8))
    assert torch.equal(_polyfill("dequantize_linear")(q8, 0.5, np.uint8(3)), dmlq.dequantize_linear(q8, 0.5, np.uint8(3)))
    e5 = torch.empty(3, dtype=torch.float8_e5m2, device="meta")
    assert torch.ops.dmlq.dequantize_linear(e5, 0.5).shape == (3,)

    class Layer(torch.nn.Module):
        def forward(self, t):
            return dmlq.dequantize_linear(dmlq.quantize_linear(t, 0.05, 3), 0.05, 3)

    ep = torch.export.export(Layer(), (x,), strict=False)
    assert torch.equal(ep.module()(x), Layer()(x))


def test_torch_callers_get_torch_words_and_the_whole_list():
    x = torch.randn(4)
    with pytest.raises(TypeError, match=r"zero_point=torch.tensor\(0, dtype=torch.uint8\)"):
        dmlq.quantize_linear(x, 0.1, torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"quantize_linear: dtype must be a quantized type: one of int8, .* got "
                                        r"torch.complex64"):
        dmlq.quantize_linear(x, 0.1, dtype=torch.complex64)
    with pytest.raises(ValueError, match=r"^quantize_linear: a float4_e2m1fn result of shape \(5,\) has a last axis "
                                         r"of 5 elements; torch holds float4 values as torch.float4_e2m1fn_x2"):
        dmlq.quantize_linear(torch.randn(5), 0.1, dtype="float4_e2m1fn")
    with pytest.raises(TypeError, match=r"pack: x is a torch.uint8 tensor: say which type its codes are"):
        dmlq.pack(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"unpack: the packed data is a torch tensor"):
        dmlq.unpack(torch.zeros(3, dtype=torch.uint8), (6,), "int4")
    a, b = torch.zeros(2, 3, dtype=torch.uint8), torch.zeros(3, 4, dtype=torch.int8)
    with pytest.raises(TypeError, match=r"^matmul_integer_to_float: dtype must be torch\.float32, torch\.float16 or "
                                        r"torch\.bfloat16, the output types \(got float64\)$"):
        dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.2, None, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"out must have dtype bfloat16 \(got float32\); allocate it with "
                                        r"torch\.empty\(\(2, 4\), dtype=torch\.bfloat16\)"):
        dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.2, None, dtype=torch.bfloat16, out=torch.empty(2, 4))
    with pytest.raises(TypeError, match=r"^quantized_matmul: dtype must be torch\.int8 or torch\.uint8"):
        dmlq.quantized_matmul(a, 0.1, None, b, 0.2, None, 0.5, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"\(a torch dtype, a NumPy or ml_dtypes dtype, or its name\)"):
        dmlq.quantize_linear(x, 0.1, dtype=torch.float32)


def test_an_expanded_out_is_refused():
    """An out= whose elements share memory (stride 0) was written silently, each result element
    over another; torch refuses such an output for its own ops."""
    x = torch.randn(4, 3)
    out = torch.empty(1, 3, dtype=torch.uint8).expand(4, 3)
    with pytest.raises(ValueError, match="quantize_linear: out has elements that share memory"):
        dmlq.quantize_linear(x, 0.1, out=out)
    strided = torch.empty(8, 3, dtype=torch.uint8)[::2]  # strided but every element its own: taken
    assert dmlq.quantize_linear(x, 0.1, out=strided) is strided
    assert torch.equal(strided, dmlq.quantize_linear(x, 0.1))


def test_compile_pooling_with_one_int_for_every_axis():
    """quantized_avg_pool takes one int for window_size, strides and the paddings, as the eager
    call does; the custom op's schema takes lists, so the traced call expands them (it failed
    with "Expected a value of type 'Optional[List[int]]' for argument 'strides'" before)."""
    img = _t(np.random.default_rng(3).integers(0, 256, (1, 2, 9, 9), dtype=np.uint8))

    def pool(x):
        return dmlq.quantized_avg_pool(x, 0.1, 3, 0.1, 3, 3, strides=2, start_padding=1, end_padding=1)

    torch._dynamo.reset()
    got = torch.compile(pool, backend="aot_eager", fullgraph=True)(img)
    want = pool(img)
    assert got.shape == (1, 2, 5, 5) and torch.equal(got, want)


def test_the_first_compiled_call_of_a_fresh_process_traces_the_custom_ops():
    """In a process where no dmlq call has imported dmlq.torch yet (it registers the functions'
    torch.compile substitutions), the first compiled call reaches it while Dynamo traces: it
    failed with fullgraph=True ("Attempted to call function marked as skipped") and broke the
    graph about 25 times without. It now goes through the custom ops from that first call."""
    import subprocess
    import sys

    script = (
        "import torch, dmlq, sys\n"
        "assert 'dmlq.torch' not in sys.modules\n"
        "a = torch.randint(0, 256, (4, 33), dtype=torch.uint8); b = torch.randint(-128, 128, (33, 7), dtype=torch.int8)\n"
        "x = torch.randn(1, 2, 6, 6)\n"
        "f = torch.compile(lambda a, b, x: (dmlq.matmul_integer(a, b, 3), dmlq.quantized_avg_pool(\n"
        "    dmlq.quantize_linear(x, 0.1, 3), 0.1, 3, 0.1, 3, window_size=2)), fullgraph=True, backend='aot_eager')\n"
        "got = f(a, b, x)\n"
        "want = (dmlq.matmul_integer(a, b, 3), dmlq.quantized_avg_pool(dmlq.quantize_linear(x, 0.1, 3), 0.1, 3, 0.1,\n"
        "    3, window_size=2))\n"
        "assert all(torch.equal(g, w) for g, w in zip(got, want))\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_a_python_scale_takes_a_bfloat16_x_type_and_range_in_the_traced_form():
    """The traced form (torch.compile, a tensor that requires grad) made a Python scale float32 beside
    a bfloat16 x (28 where eager gives 29) and took one beyond a float16 x's range as inf (a result
    of zeros); docs/semantics.md, "Scales": x's type, and a refusal."""
    xt = torch.tensor([5.40625], dtype=torch.bfloat16)
    z = torch.tensor(0, dtype=torch.int8)
    s = 0.18991707166436975  # 28.47 in float32, 28.5 -> 28 ... in bfloat16 29
    eager = dmlq.quantize_linear(xt, s, z)
    assert eager.item() == 29
    assert dmlq.quantize_linear(xt.clone().requires_grad_(), s, z).item() == 29
    torch._dynamo.reset()
    assert torch.compile(lambda t, zz: dmlq.quantize_linear(t, s, zz), backend="aot_eager")(xt, z).item() == 29
    xh = torch.tensor([1.0], dtype=torch.float16)
    for t in (xh, xh.clone().requires_grad_()):
        with pytest.raises(ValueError, match=r"scale = 65520\.0 is beyond the range of float16"):
            dmlq.quantize_linear(t, 65520.0, z)
        assert dmlq.quantize_linear(t, 65519.0, z).item() == 0


def test_the_traced_form_rounds_and_checks_numbers_as_eager():
    """The traced form (a tensor that requires grad; torch.compile) rounded a Python scale to float16
    through float32 (twice: 1 + 2**-11 + 2**-40 became 1.0, [2048, 1000, 300] where eager gives
    [2046, 999, 300]) and let 65520 - 2**-20 become inf; it took a float or bool zero point as its
    int, an int8 NumPy scalar against dtype=uint8, and raised OverflowError / RuntimeError for
    10**400 and 2**70. As eager now."""
    zp = torch.tensor(0, dtype=torch.int16)
    x = torch.tensor([2048.0, 1000.0, 300.0], dtype=torch.float16)
    v = 1 + 2**-11 + 2**-40
    want = dmlq.quantize_linear(x, v, zp)
    assert want.tolist() == [2046, 999, 300]
    assert torch.equal(dmlq.quantize_linear(x.clone().requires_grad_(), v, zp), want)
    x1 = torch.tensor([60000.0, -60000.0], dtype=torch.float16)
    assert dmlq.quantize_linear(x1.clone().requires_grad_(), 65520 - 2**-20, zp).tolist() == [1, -1]
    xb = torch.tensor([2048.0], dtype=torch.bfloat16)
    assert dmlq.quantize_linear(xb.clone().requires_grad_(), 1 + 2**-8 + 2**-30, zp).tolist() == [2032]
    xg = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for bad, exc, match in ((1.7, TypeError, "zero_point must be an integer"),
                            (True, TypeError, "zero_point must be an integer"),
                            (2**70, ValueError, "out of range")):
        with pytest.raises(exc, match=match):
            dmlq.quantize_linear(xg, torch.tensor(0.5), bad)
    with pytest.raises(TypeError, match="dtype=uint8 contradicts the dtype of zero_point"):
        dmlq.quantize_linear(xg, 0.5, np.int8(3), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"scale = 100\.\.\. \(an integer of 401 digits\) is beyond the range"):
        dmlq.quantize_linear(xg, 10**400, 3)


def test_the_traced_form_compares_only_the_output_zero_point_with_dtype_and_takes_lists():
    """A differential fuzz across the front ends: with a tensor that requires grad, an input's NumPy
    zero point (x's np.int8(1)) was compared with dtype=uint8, the output's type, and refused; a list
    scale raised float()'s TypeError. As eager now."""
    x = torch.randint(-5, 5, (2, 3, 3), dtype=torch.int8, generator=torch.Generator().manual_seed(3))
    xs = torch.full((3,), 0.1, requires_grad=True)
    want = dmlq.quantized_avg_pool(x, xs.detach(), np.int8(1), 0.05, 93, (2,), dtype=np.uint8)
    assert torch.equal(dmlq.quantized_avg_pool(x, xs, np.int8(1), 0.05, 93, (2,), dtype=np.uint8), want)
    xf = torch.tensor([0.3, 1.6, -2.0], requires_grad=True)
    assert torch.equal(dmlq.quantize_linear(xf, [0.5, 0.25, 1.0], 3), dmlq.quantize_linear(xf.detach(), [0.5, 0.25, 1.0], 3))


def test_the_traced_form_of_each_function_is_made_once():
    """dmlq.torch._polyfill is cached (a requires-grad or fake call made it afresh per call before
    the last audit of session 26; an edit of this session dropped the cache once)."""
    assert dmlq.torch._polyfill("quantize_linear") is dmlq.torch._polyfill("quantize_linear")


# ---- a packed 4-bit b beside tensors

def _packed_b_calls(rng, K=45, N=6, L=64, dtype="int4"):
    """(calls(a, b, arr, packed), the NumPy a, the packed b forms with NumPy bytes): row-major
    (dmlq.pack), K-major (dmlq.pack(w).mT) and MatMulNBits' padded rows (.mT[:K], other codes past
    K); the calls' zero points packed (the group ones as MatMulNBits' .mT), given through
    ``packed`` (their bytes moved as b's are), their scales through ``arr``. ``dtype``: int4, or
    int2 (MatMulNBits' bits=2: widened to int4 in each call)."""
    import ml_dtypes

    T = np.dtype(getattr(ml_dtypes, dtype))
    lo, hi = int(ml_dtypes.iinfo(T).min), int(ml_dtypes.iinfo(T).max) + 1
    a = rng.integers(0, 256, (3, K), dtype=np.uint8)
    w = rng.integers(lo, hi, (N, L)).astype(T)
    forms = {"rows": dmlq.pack(np.ascontiguousarray(w[:, :K].T)), "kmajor": dmlq.pack(np.ascontiguousarray(w[:, :K])).mT,
             "padded": dmlq.pack(w).mT[:K]}
    zp, gzp = dmlq.pack(rng.integers(lo, hi, (N,)).astype(T)), dmlq.pack(rng.integers(lo, hi, (N, 2)).astype(T)).mT
    b_s, g_s = rng.uniform(0.001, 0.01, (N,)).astype(np.float32), rng.uniform(0.001, 0.01, (2, N)).astype(np.float32)

    def calls(a, b, arr, packed=lambda p: p):
        return [dmlq.matmul_integer(a, b, np.uint8(3), packed(zp)),
                dmlq.matmul_integer_to_float(a, arr(np.float32(0.1)), None, b, arr(g_s), packed(gzp), None,
                                             block_size=32),
                dmlq.quantized_matmul(a, 0.1, 128, b, arr(b_s), packed(zp), 3.0, np.int8(-2))]
    return calls, a, forms


@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_packed_b_beside_cpu_tensors(rng, dtype):
    """A dmlq.Packed b of NumPy bytes (row-major, .mT, MatMulNBits' padded .mT[:K]) beside CPU tensors
    goes to the NumPy path as it is: each result is the same call's on NumPy arrays, and
    dmlq.kernel_plan plans the Packed (it planned the unpacked int4 array, which no kernel takes;
    a 2-bit b's plan starts with its widening, once)."""
    calls, a, forms = _packed_b_calls(rng, dtype=dtype)
    for name, b in forms.items():
        wants = calls(a, b, lambda v: v)
        for got, want in zip(calls(torch.from_numpy(a), b, torch.as_tensor), wants):
            assert isinstance(got, torch.Tensor), name
            np.testing.assert_array_equal(got.numpy(), want, strict=True)
        plan = dmlq.kernel_plan(dmlq.matmul_integer, torch.from_numpy(a), b, 3)
        assert str(plan) == str(dmlq.kernel_plan(dmlq.matmul_integer, a, b, 3)), name
        assert str(plan).count("widen_codes2") == (dtype == "int2"), (name, str(plan))


def test_packed_b_of_gpu_bytes_beside_cpu_tensors_is_refused(cupy_stand_in, rng):
    """GPU bytes beside CPU tensors: refused naming the line that makes the same Packed of NumPy
    bytes (a .mT kept a .mT, its slice kept)."""
    cp = cupy_stand_in
    _, a, forms = _packed_b_calls(rng)
    t = torch.from_numpy(a)
    on_gpu = dmlq.Packed(cp.asarray(forms["rows"].data), forms["rows"].shape, "int4")
    with pytest.raises(TypeError, match=r"b is a dmlq\.Packed of GPU bytes but a is a CPU tensor; pass NumPy bytes: "
                                        r"dmlq\.Packed\(cupy\.asnumpy\(b\.data\), b\.shape, b\.dtype\)"):
        dmlq.matmul_integer(t, on_gpu)
    p = forms["padded"]
    with pytest.raises(TypeError, match=r"dmlq\.Packed\(cupy\.asnumpy\(b\.data\), b\.packed\.shape, b\.dtype\)"
                                        r"\.mT\[\.\.\., :45, :\]"):
        dmlq.matmul_integer(t, dmlq.Packed(cp.asarray(p.data), p.packed.shape, "int4").mT[:45])


# ---- CUDA: for the next device session

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch.device("cuda", torch.cuda.current_device())  # tensors report their index: cuda:0, never cuda


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_tensors_on_a_side_stream_without_synchronizing(name):
    dev = _cuda()
    _, args, kw, want, targs, tkw, twant = CASES[name]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for a, k, w in ((args, kw, want), (targs, tkw, twant)):
            big = torch.empty(1 << 26, device=dev).fill_(1.0)  # queue work ahead on this stream
            ins = tuple(t.to(dev, non_blocking=True) if isinstance(t, torch.Tensor) else t for t in _tensors(a))
            before = torch.cuda.memory_allocated()
            got = getattr(dmlq, name)(*ins, **k)
            assert got.device == dev
            assert torch.cuda.memory_allocated() - before >= got.numel() * got.element_size()  # torch's allocator
            res = got.cpu()  # ordered after the kernels on the side stream, no synchronize in dmlq
            np.testing.assert_array_equal(res.numpy(), w, strict=True)
            # (freed here: a result still held when the next call assigns got is freed
            # during that measurement, and the first GPU run saw the two cancel)
            del big, got, res


@pytest.mark.gpu
def test_cuda_graph_capture_replays():
    dev = _cuda()
    x = torch.randn(64, 32, device=dev)
    w = torch.randint(-128, 128, (32, 16), dtype=torch.int8, device=dev)

    def step():
        q = dmlq.quantize_linear(x, 0.05, 128)
        return dmlq.quantized_matmul(q, 0.05, 128, w, 0.01, 0, 0.3, 2)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # plans, constants, kernels and the stream's matmul workspace made outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = step()
    x.copy_(torch.randn(64, 32, device=dev))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, step())


def test_torch_allocator_gives_cupy_memory_that_holds_its_tensor():
    """What dmlq.torch hands CuPy as its allocator while torch's stream captures, built with the
    installed CuPy's own classes (no device needed to make them): the block is a uint8 tensor of
    the size asked, on the device asked, held by the memory CuPy gets."""
    cupy = pytest.importorskip("cupy")
    if getattr(cupy, "__stand_in__", False) or not hasattr(cupy.cuda, "UnownedMemory"):
        pytest.skip("needs the real CuPy's memory classes")
    from dmlq.torch_stream import torch_allocator

    ptr = torch_allocator(cupy, torch.device("cpu", 0))(100)
    owner = ptr.mem._owner
    assert isinstance(ptr, cupy.cuda.MemoryPointer) and isinstance(ptr.mem, cupy.cuda.UnownedMemory)
    assert (ptr.ptr, ptr.mem.size, ptr.device_id) == (owner.data_ptr(), 100, 0)
    assert owner.dtype == torch.uint8 and owner.numel() == 100


@pytest.mark.gpu
def test_cuda_graph_capture_of_calls_with_temporaries():
    """A captured call's temporaries (split-K partial sums, a packed int4 result's bytes) come
    from torch's graph pool (dmlq.gpu.capture): tensors and CuPy arrays allocated after the
    capture are not written by its replays."""
    import cupy

    dev = _cuda()
    g8 = torch.Generator().manual_seed(3)
    a = torch.randint(0, 256, (1, 4096), dtype=torch.uint8, generator=g8).to(dev)
    w = torch.randint(-128, 128, (4096, 256), dtype=torch.int8, generator=g8).to(dev)
    x = torch.randn(4, 33, generator=g8).to(dev)

    codes = torch.randint(-8, 8, (5, 7), dtype=torch.int8, generator=g8).to(dev).view(torch.int4)

    def step():
        return (dmlq.quantized_matmul(a, 0.5, 3, w, 0.25, 0, 40.0, 0),
                dmlq.quantize_linear(x, 0.05, dtype=torch.int4),
                torch.as_tensor(dmlq.pack(codes).data, device=dev))  # pack: on torch's stream too

    assert "split-K" in str(dmlq.kernel_plan(dmlq.quantized_matmul, cupy.asarray(a), 0.5, 3, cupy.asarray(w),
                                             0.25, 0, 40.0, 0))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        want = [t.cpu() for t in step()]
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        got = step()
    later_t = [torch.full((n,), 0xA5, dtype=torch.uint8, device=dev) for n in (512, 4096, 65536, 1 << 20)]
    later_c = [cupy.full((n,), 0xA5, cupy.uint8) for n in (512, 4096, 65536, 1 << 20)]
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        for t, u in zip(got, want):
            assert torch.equal(t.cpu().view(torch.uint8), u.view(torch.uint8))
        assert all(bool((t == 0xA5).all()) for t in later_t)
        assert all(bool((c == 0xA5).all()) for c in later_c)


@pytest.mark.gpu
def test_cuda_tensor_with_cpu_scale_is_refused():
    dev = _cuda()
    with pytest.raises(ValueError, match=r"scale is on cpu but x is on cuda:0; .*scale\.to\(x\.device\)"):
        dmlq.quantize_linear(torch.randn(4, device=dev), torch.full((4,), 0.1))
    with pytest.raises(ValueError, match="scale is on cpu"):
        torch.ops.dmlq.quantize_linear.tensor(torch.randn(4, device=dev), torch.tensor(0.1))


@pytest.mark.gpu
def test_cuda_opcheck_and_compile():
    dev = _cuda()
    for name, (_, args, kw, _, targs, tkw, _) in CASES.items():
        packet = getattr(torch.ops.dmlq, name)
        torch.library.opcheck(packet.default, tuple(v.to(dev) if isinstance(v, torch.Tensor) else v
                                                    for v in _tensors(args)), kw)
        torch.library.opcheck(packet.tensor, tuple(v.to(dev) if isinstance(v, torch.Tensor) else v
                                                   for v in _tensors(targs)), tkw)


@pytest.mark.gpu
def test_bfloat16_linear_layer_on_cuda_tensors():
    """The W8A8 layer of a bfloat16 model on CUDA tensors (per-token dynamic quantize of a bfloat16
    x, then matmul_integer_to_float with bfloat16 weight scales, bias and out, at a decode M, where
    the finish pass writes bfloat16, and past M = 16, where a float32 temporary is rounded): each
    result the same call's on CPU tensors, bit for bit. Written without a GPU (session 44)."""
    dev = _cuda()
    rng = np.random.default_rng(44)
    w = torch.from_numpy(rng.integers(-128, 128, (96, 40)).astype(np.int8))
    w_s = torch.from_numpy(rng.uniform(0.01, 0.05, 40).astype(np.float32)).bfloat16()
    bias = torch.from_numpy(rng.uniform(-2, 2, 40).astype(np.float32)).bfloat16()
    for m in (3, 40):
        x = (torch.from_numpy(rng.standard_normal((m, 96)).astype(np.float32)) * 3).bfloat16()

        def layer(x, w, w_s, bias):
            y, s, z = dmlq.dynamic_quantize_linear(x, per_row=True)
            return dmlq.matmul_integer_to_float(y, s, z, w, w_s, None, bias, dtype=torch.bfloat16)
        want = layer(x, w, w_s, bias)
        got = layer(*(t.to(dev) for t in (x, w, w_s, bias)))
        assert got.device == dev and got.dtype == torch.bfloat16
        assert torch.equal(got.cpu().view(torch.int16), want.view(torch.int16)), m


@pytest.mark.gpu
def test_two_bit_b_on_cuda_tensors_and_in_a_captured_graph():
    """A torch.int2 / uint2 CUDA b (packed, then widened to 4-bit in the call: session 46) gives the CPU
    tensors' results in all three operators; the call with a 2-bit Packed of CuPy bytes captured in a
    CUDA graph (its widened bytes a temporary from torch's graph pool) replays to the eager bits."""
    import cupy

    dev = _cuda()
    g8 = torch.Generator().manual_seed(8)
    a = torch.randint(0, 256, (3, 96), dtype=torch.uint8, generator=g8)
    for tdt, lo, hi in ((torch.int2, -2, 2), (torch.uint2, 0, 4)):
        w = torch.randint(lo, hi, (96, 40), dtype=torch.int8, generator=g8).view(torch.uint8) & 3
        w = w.view(tdt)
        calls = [lambda a, w: dmlq.matmul_integer(a, w, 3, lo),
                 lambda a, w: dmlq.matmul_integer_to_float(a, 0.1, None, w, 0.25, lo),
                 lambda a, w: dmlq.quantized_matmul(a, 0.1, 128, w, 0.25, lo, 3.0, 0)]
        for call in calls:
            want, got = call(a, w), call(a.to(dev), w.to(dev))
            assert got.device == dev and torch.equal(got.cpu(), want), tdt
    p = dmlq.pack(cupy.asarray(torch.randint(0, 4, (40, 96), dtype=torch.uint8, generator=g8).numpy()),
                  dtype="uint2").mT
    a_dev = a.to(dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        want = dmlq.matmul_integer(a_dev, p, 3, 2).cpu()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        got = dmlq.matmul_integer(a_dev, p, 3, 2)
    later = [cupy.full((n,), 0xA5, cupy.uint8) for n in (512, 1920, 65536)]
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(got.cpu(), want) and all(bool((c == 0xA5).all()) for c in later)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_packed_b_of_gpu_bytes_beside_cuda_tensors(dtype):
    """A dmlq.Packed b of CuPy bytes (dmlq.pack of a CUDA tensor, or its .mT; MatMulNBits' padded
    rows) beside CUDA tensors: the GPU kernels read it as it is (a 2-bit b widened first), on torch's
    current stream, each result the same call's on CPU tensors with NumPy bytes. NumPy bytes beside
    CUDA tensors are refused with the line that moves them."""
    import cupy

    dev = _cuda()
    calls, a, forms = _packed_b_calls(np.random.default_rng(5), dtype=dtype)

    def on_gpu(p):
        if isinstance(p, dmlq.Packed):
            return dmlq.Packed(cupy.asarray(p.data), p.shape, p.dtype)
        return dmlq.Packed(cupy.asarray(p.data), p.packed.shape, p.dtype).mT[:p.shape[0]]

    for name, b in forms.items():
        wants = calls(torch.from_numpy(a), b, torch.as_tensor)
        gots = calls(torch.from_numpy(a).to(dev), on_gpu(b), lambda v: torch.as_tensor(v, device=dev), on_gpu)
        for got, want in zip(gots, wants):
            assert got.device == dev, name
            assert torch.equal(got.cpu(), want), name
    with pytest.raises(TypeError, match=r"b is a dmlq\.Packed of NumPy bytes but a is a torch tensor on cuda:0; "
                                        r"pass its bytes on that device: dmlq\.Packed\(cupy\.asarray\(b\.data\)"):
        dmlq.matmul_integer(torch.from_numpy(a).to(dev), forms["rows"])
