"""torch.func's transforms, constants traced by torch.compile, NumPy operands beside tensors
that take the custom op, and tensors dmlq cannot read as memory. Expected values: the same
call on plain tensors or NumPy arrays (themselves checked against dmlq.reference elsewhere)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dmlq  # noqa: E402
import dmlq.torch  # noqa: E402,F401

_rng = np.random.default_rng(11)
X = torch.from_numpy(_rng.standard_normal((4, 6)).astype(np.float32))
Q = torch.from_numpy(_rng.integers(0, 256, (4, 6)).astype(np.uint8))
B = torch.from_numpy(_rng.integers(-128, 128, (6, 3)).astype(np.int8))

CALLS = {
    "quantize": lambda x, q, b: dmlq.quantize_linear(x, 0.1, 128),
    "dequantize": lambda x, q, b: dmlq.dequantize_linear(q, 0.5, 3),
    "add": lambda x, q, b: dmlq.quantized_add(q, 0.1, 3, q, 0.2, 4, 0.15, 5),
    "matmul": lambda x, q, b: dmlq.quantized_matmul(q, 0.1, 3, b, 0.2, None, 0.5),
    "matmul_integer": lambda x, q, b: dmlq.matmul_integer(q, b, 3),
    "to_float": lambda x, q, b: dmlq.matmul_integer_to_float(q, 0.1, 3, b, 0.2, None),
    "avg_pool": lambda x, q, b: dmlq.quantized_avg_pool(q.reshape(1, 1, 4, 6), 0.1, 3, 0.1, 3, 2),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_functionalize_gives_the_eager_result(name):
    """A functional tensor's memory is not its values: it goes through the op (it read a stale
    buffer, the same garbage whatever x was, and make_fx stored it as a constant)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize

    f = CALLS[name]
    want = f(X, Q, B)
    assert torch.equal(functionalize(f)(X, Q, B), want)
    assert torch.equal(make_fx(functionalize(f))(X, Q, B)(X, Q, B), want)
    x2, q2 = X + 1, (Q.int() + 7).to(torch.uint8)
    assert torch.equal(functionalize(f)(x2, q2, B), f(x2, q2, B))  # no constant left behind


def test_vmap_runs_each_sample_through_the_op():
    got = torch.func.vmap(lambda r: dmlq.quantize_linear(r, 0.1, 3))(X)
    assert torch.equal(got, dmlq.quantize_linear(X, 0.1, 3))


@pytest.mark.parametrize("make", [
    lambda: dmlq.dequantize_linear(torch.tensor(5, dtype=torch.uint8), 0.1),
    lambda: dmlq.quantize_linear(torch.tensor(1.0), torch.tensor([0.1])),
    lambda: dmlq.quantized_add(torch.tensor([5], dtype=torch.uint8), 0.1, 3, torch.tensor([6], dtype=torch.uint8),
                               0.2, 4, 0.15, 5),
])
def test_constants_made_inside_a_compiled_function(make):
    """torch's fake mode runs the real implementation on constants of one element while
    compiling; it went back to the traced form and recursed without end."""
    torch._dynamo.reset()
    assert torch.equal(torch.compile(make, backend="eager", fullgraph=True)(), make())


@pytest.mark.parametrize("fullgraph", [True, False])
def test_numpy_scalars_and_arrays_inside_compile(fullgraph):
    """Under Dynamo a NumPy zero point or scale is an ndarray: taken as a tensor of its dtype."""
    calls = (lambda x: dmlq.quantize_linear(x, 0.1, np.uint8(3)),
             lambda x: dmlq.quantize_linear(x, 0.1, np.int8(-3)),
             lambda x: dmlq.quantize_linear(x, np.full(6, 0.1, np.float32), axis=1))
    for f in calls:
        torch._dynamo.reset()
        got, want = torch.compile(f, backend="eager", fullgraph=fullgraph)(X), f(X)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_numpy_operands_beside_a_tensor_that_requires_grad():
    """The README takes NumPy arrays beside CPU tensors; with a parameter in the call the op
    runs (to keep the graph), and the arrays go to it as tensors."""
    bias = torch.nn.Parameter(torch.zeros(3))
    b, s = B.numpy(), np.full(3, 0.2, np.float32)
    want = dmlq.matmul_integer_to_float(Q, 0.1, 3, b, s, 0, bias.detach())
    got = dmlq.matmul_integer_to_float(Q, 0.1, 3, b, s, 0, bias)
    assert got.requires_grad and torch.equal(got.detach(), torch.from_numpy(np.asarray(want)))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = dmlq.matmul_integer(torch.empty(4, 6, dtype=torch.uint8), b)
    assert fake.shape == (4, 3) and fake.dtype == torch.int32


def test_tensors_without_plain_memory_are_refused_by_name():
    nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    with pytest.raises(TypeError, match=r"quantize_linear: x is a nested tensor; .* x.unbind\(\)"):
        dmlq.quantize_linear(nested, 0.1)
    q = torch.quantize_per_tensor(torch.randn(3), 0.1, 3, torch.quint8)
    with pytest.raises(TypeError, match=r"dequantize_linear: q is a torch quantized tensor .* q.int_repr\(\)"):
        dmlq.dequantize_linear(q, 0.1)
    assert torch.equal(dmlq.dequantize_linear(q.int_repr(), q.q_scale(), q.q_zero_point()), q.dequantize())
    c = torch.randn(3, dtype=torch.complex64).conj()
    with pytest.raises(TypeError, match=r"x is a view whose conjugation is not applied .* x.resolve_conj\(\)"):
        dmlq.quantize_linear(c, 0.1)


def test_an_empty_result_has_the_fake_implementation_strides():
    """torch.library.opcheck's fake comparison and torch's own empty results: contiguous strides
    (a zero-size NumPy result came back with strides (0, 0))."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    for make in (lambda: dmlq.quantize_linear(torch.zeros(0, 3), 0.1),
                 lambda: dmlq.matmul_integer(torch.zeros(0, 3, dtype=torch.uint8), torch.zeros(3, 2, dtype=torch.int8))):
        eager = make()
        with FakeTensorMode():
            fake = make()
        assert eager.stride() == fake.stride() == torch.empty(eager.shape).stride()


def test_differentiating_transforms_raise_instead_of_zero_tangents():
    """jvp/jacfwd through an op without a forward rule gave zero tangents silently; grad/jacrev
    torch's own unrelated message. All say that dmlq has no derivative."""
    import torch.autograd.forward_ad as fwAD

    s = torch.tensor(0.5)
    deq = lambda s: dmlq.dequantize_linear(Q, s, 1)  # noqa: E731
    for run in (lambda: torch.func.jvp(deq, (s,), (torch.tensor(1.0),)), lambda: torch.func.jacfwd(deq)(s),
                lambda: torch.func.grad(lambda s: deq(s).sum())(s), lambda: torch.func.jacrev(deq)(s)):
        with pytest.raises(RuntimeError, match="dmlq registers no derivative"):
            run()
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="dmlq registers no derivative"):
            deq(fwAD.make_dual(s, torch.tensor(1.0)))
    assert torch.equal(deq(s), torch.from_numpy(np.asarray(dmlq.dequantize_linear(Q.numpy(), 0.5, 1))))


def test_a_float_scale_argument_that_changes_inside_compile():
    """A compiled function's float argument is symbolic once its value changes (with dynamic=True
    at once): the traced form's checks were math.isfinite/frexp, which Dynamo cannot trace on it."""
    xh = X.half()
    for dynamic in (None, True):
        torch._dynamo.reset()
        f = torch.compile(lambda x, s: dmlq.quantize_linear(x, s, 128), backend="eager", fullgraph=True,
                          dynamic=dynamic)
        for s in (0.05, 0.07, 0.011, -0.3):
            assert torch.equal(f(X, s), dmlq.quantize_linear(X, s, 128))
            assert torch.equal(f(xh, s), dmlq.quantize_linear(xh, s, 128))
        g = torch.compile(lambda x, s: dmlq.quantize_linear(x, s, 128), backend="eager", dynamic=dynamic)
        for s, message in ((1e6, "beyond the range of float16"), (1e-8, "below the smallest magnitude of float16")):
            with pytest.raises(ValueError, match=message):
                g(xh, s)


def test_eager_out_is_seen_by_autograd_and_inference_mode():
    """out= written through NumPy bumps the tensor's version (a backward that saved it raises, as
    for torch's own in-place ops, instead of using the new values silently), and an inference
    tensor is not written outside inference mode."""
    o = torch.randn(4, 6)
    w = torch.randn(4, 6, requires_grad=True)
    y = (w * o).sum()
    dmlq.dequantize_linear(Q, 0.05, 128, out=o)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with torch.inference_mode():
        frozen = torch.empty(4, 6)
    with pytest.raises(RuntimeError, match="out is an inference tensor"):
        dmlq.dequantize_linear(Q, 0.05, 128, out=frozen)
    with torch.inference_mode():
        assert dmlq.dequantize_linear(Q, 0.05, 128, out=frozen) is frozen


def test_plain_tensors_inside_a_transform_and_under_make_fx():
    """A captured plain tensor inside torch.func.grad has no storage NumPy can read (it was called a
    dtype problem); make_fx's real-tensor tracing computed the call into a constant."""
    from torch.fx.experimental.proxy_tensor import make_fx

    g = torch.func.grad(lambda w: (w * dmlq.dequantize_linear(Q, 0.05, 128)).sum())(torch.randn(4, 6))
    assert torch.equal(g, dmlq.dequantize_linear(Q, 0.05, 128))
    gm = make_fx(lambda x: dmlq.quantize_linear(x, 0.05, 128))(X)
    x2 = X + 1
    assert torch.equal(gm(x2), dmlq.quantize_linear(x2, 0.05, 128))


@pytest.mark.gpu
def test_cuda_out_version_compile_and_transforms():
    """Today's torch items on CUDA tensors (the runbook's torch_cuda step): the eager out= version
    bump, out= inside torch.compile, functionalize and vmap through the op."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    dev = torch.device("cuda", torch.cuda.current_device())
    x, q = X.to(dev), Q.to(dev)
    o = torch.empty(4, 6, device=dev)
    before = o._version
    assert dmlq.dequantize_linear(q, 0.05, 128, out=o) is o and o._version > before
    assert torch.equal(o.cpu(), dmlq.dequantize_linear(Q, 0.05, 128))
    torch._dynamo.reset()
    f = torch.compile(lambda x, o: dmlq.quantize_linear(x, 0.1, 3, out=o), backend="aot_eager", fullgraph=True)
    o16 = torch.empty(4, 6, dtype=torch.int16, device=dev)
    assert f(x, o16) is o16 and torch.equal(o16.cpu(), dmlq.quantize_linear(X, 0.1, 3, dtype=torch.int16))
    g = lambda t: dmlq.quantize_linear(t, 0.1, 128)  # noqa: E731
    assert torch.equal(torch.func.functionalize(g)(x).cpu(), g(X))
    assert torch.equal(torch.func.vmap(g)(x).cpu(), g(X))


def test_an_infinite_numpy_scale_beside_a_tensor_that_takes_the_op():
    """np.float32(inf) is a scale the eager call takes; the traced form's own range check refused
    it (a requires-grad x sends the call through the op)."""
    z = torch.tensor(3, dtype=torch.uint8)
    want = dmlq.quantize_linear(X, np.float32(np.inf), z)
    assert torch.equal(dmlq.quantize_linear(X.clone().requires_grad_(), np.float32(np.inf), z), want)
