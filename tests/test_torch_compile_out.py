"""``out=`` inside torch.compile, and the errors a compiled call raises.

The traced form computes the result with the custom op and copies it into ``out``
(dmlq.torch_traced._into_out), under the eager call's rules: out's dtype picks the output
type where no zero point or dtype= does; a wrong dtype, shape or array type is
refused in the eager call's words, with fullgraph=True and without it (where a
call that raises falls back to Dynamo tracing the public function itself).
Expected values come from the NumPy path on the same data (itself checked against
dmlq.reference elsewhere).
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dmlq  # noqa: E402
import dmlq.torch  # noqa: E402,F401

_rng = np.random.default_rng(5)
X = _rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
Q = _rng.integers(-128, 128, (2, 3, 6, 6)).astype(np.int8)
A = _rng.integers(-128, 128, (5, 7)).astype(np.int8)
B = _rng.integers(-128, 128, (7, 4)).astype(np.int8)
T = {k: torch.from_numpy(v.copy()) for k, v in dict(x=X, q=Q, a=A, b=B).items()}

# name: (the call on any array library's operands, its out's shape and torch dtype)
CALLS = {
    "quantize_int16_by_out": (lambda o, x, q, a, b: dmlq.quantize_linear(x, 0.01, 3, out=o), (2, 3, 6, 6),
                              torch.int16),
    "quantize_float8_by_out": (lambda o, x, q, a, b: dmlq.quantize_linear(x, 0.01, out=o), (2, 3, 6, 6),
                               torch.float8_e4m3fn),
    "dequantize": (lambda o, x, q, a, b: dmlq.dequantize_linear(q, 0.5, 1, out=o), (2, 3, 6, 6), torch.float32),
    "add_uint8_by_out": (lambda o, x, q, a, b: dmlq.quantized_add(q, 0.5, 1, q, 0.25, 2, 0.3, 4, out=o),
                         (2, 3, 6, 6), torch.uint8),
    "matmul": (lambda o, x, q, a, b: dmlq.quantized_matmul(a, 0.5, 1, b, 0.25, 2, 30.0, 4, out=o), (5, 4),
               torch.int8),
    "avg_pool": (lambda o, x, q, a, b: dmlq.quantized_avg_pool(q, 0.5, 1, 0.5, 2, [3, 3], out=o), (2, 3, 4, 4),
                 torch.int8),
    "matmul_integer": (lambda o, x, q, a, b: dmlq.matmul_integer(a, b, 1, 2, out=o), (5, 4), torch.int32),
    "to_float16_by_out": (lambda o, x, q, a, b: dmlq.matmul_integer_to_float(a, 0.5, 1, b, 0.25, 2, out=o),
                          (5, 4), torch.float16),
}


def _numpy_dtype(t):
    return ml_dtypes.float8_e4m3fn if t == torch.float8_e4m3fn else torch.empty(0, dtype=t).numpy().dtype


def _bytes(t):
    return t.view(torch.uint8).numpy() if t.element_size() == 1 else t.numpy()


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_inside_compile(name, fullgraph):
    call, shape, dtype = CALLS[name]
    want = call(np.zeros(shape, _numpy_dtype(dtype)), X, Q, A, B)  # the NumPy path, out's dtype deciding
    torch._dynamo.reset()
    compiled = torch.compile(lambda o, x, q, a, b: call(o, x, q, a, b), backend="aot_eager", fullgraph=fullgraph)
    out = torch.zeros(shape, dtype=dtype)
    got = compiled(out, **T)
    assert got is out
    assert np.array_equal(_bytes(out), want.view(np.uint8) if want.itemsize == 1 else want)


def test_out_overlapping_an_input_inside_compile():
    """out= the operand itself: the functional result, then the copy (as eager's temporary)."""
    def f(q):
        return dmlq.quantized_add(q, 0.5, 1, q, 0.25, 2, 0.3, 4, out=q)

    want = dmlq.quantized_add(Q, 0.5, 1, Q, 0.25, 2, 0.3, 4, dtype=np.int8)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        q = torch.from_numpy(Q.copy())
        assert torch.compile(f, backend=backend, fullgraph=True)(q) is q
        assert np.array_equal(q.numpy(), want), backend


@pytest.mark.parametrize("call", [
    lambda o, a: dmlq.matmul_integer_to_float(a[:0], 0.5, None, B, 0.25, None, out=o),
    lambda o, a: dmlq.quantized_avg_pool(torch.zeros((0, 1, 2, 9), dtype=torch.int8), 0.1, None, 0.1, np.uint8(0),
                                         (1, 2), strides=(1, 2), end_padding=(2, 0), ceil_mode=True, out=o),
], ids=["matmul_integer_to_float", "avg_pool"])
def test_an_empty_out_with_zero_strides_inside_compile(call):
    """An out of no elements with zero strides (torch.from_numpy of an empty NumPy array: NumPy gives
    it strides of 0) has no elements to share memory: the eager call takes it, and the compiled one
    refused it as an expanded tensor (the cross-library probe, 2026-11-28)."""
    a = T["a"]
    want = call(None, a)
    out = torch.from_numpy(np.zeros(tuple(want.shape), _numpy_dtype(want.dtype)))
    assert 0 in out.stride() and call(out, a) is out  # eager
    torch._dynamo.reset()
    assert torch.compile(call, backend="aot_eager", fullgraph=True)(out, a) is out


def test_nested_list_scales_inside_compile():
    """A list scale's numbers are rounded to x's type and checked in plain Python (NumPy's asarray
    under Dynamo made them symbolic, skipping the checks; a nested list failed in float())."""
    x = T["x"][0, 0, :, :1].half()
    f = lambda t: dmlq.quantize_linear(t, [[0.1], [0.2], [0.3], [0.4], [0.5], [1 / 3]])  # noqa: E731
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), f(x))


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2"])
def test_a_narrow_out_inside_compile(dtype):
    """A 4-bit or 2-bit out made inside the compiled function is written by its bytes (torch has no
    copy kernel for Int4). Passed in, torch.compile's own write-back of the mutated input (a
    copy_ of Int4) fails in torch 2.13: the README says so."""
    t = getattr(torch, dtype, None)
    if t is None:
        pytest.skip(f"torch {torch.__version__} has no {dtype}")

    def call(x):
        o = torch.zeros(6, 6, dtype=t)
        r = dmlq.quantize_linear(x, 0.5, out=o)
        assert r is o
        return o.view(torch.uint8)

    want = dmlq.quantize_linear(X[0, 0], 0.5, dtype=dtype)
    torch._dynamo.reset()
    got = torch.compile(call, backend="aot_eager", fullgraph=True)(T["x"][0, 0])
    assert np.array_equal(got.numpy(), want.view(np.uint8))


WRONG = {
    "dtype_no_zero_point": (lambda: dmlq.quantized_add(T["q"], 0.1, 3, T["q"], 0.2, 4, 0.15, 5,
                                                       out=torch.empty(2, 3, 6, 6)),
                            TypeError, r"quantized_add: out must have dtype uint8 \(got float32\)"),
    "expanded": (lambda: dmlq.quantize_linear(T["x"], 0.5, out=torch.empty(1, 3, 6, 6, dtype=torch.uint8).expand(
        2, 3, 6, 6)), ValueError, r"quantize_linear: out has elements that share memory \(an expanded tensor"),
    # strides that overlap without a 0 (torch's own check calls them too hard and takes them): refused
    # eager and compiled alike; they were written in no fixed order
    "overlapping_strides": (lambda: dmlq.quantize_linear(T["x"], 0.5, out=torch.empty(80, dtype=torch.uint8).as_strided(
        (2, 3, 6, 6), (1, 6, 6, 1))), ValueError, r"quantize_linear: out has elements that share memory"),
    "underflowing_list_scale": (lambda: dmlq.quantize_linear(T["x"][0, 0, 0].half(), [1.0, 1e-8, 1.0, 1.0, 1.0, 1.0]),
                                ValueError, r"quantize_linear: scale = .*1e-08.* is below the smallest magnitude of "
                                            r"float16"),
    "overflowing_nested_list_scale": (lambda: dmlq.quantize_linear(T["x"][0, 0, :, :1].half(), [[1.0]] * 5 + [[1e6]]),
                                      ValueError, r"quantize_linear: scale .*1000000\.0.* beyond the range of float16"),
    "underflowing_scale": (lambda: dmlq.quantize_linear(T["x"].half(), 1e-8), ValueError,
                           r"quantize_linear: scale = 1e-08 is below the smallest magnitude of float16"),
    "dtype": (lambda: dmlq.quantize_linear(T["x"], 0.01, torch.tensor(3, dtype=torch.int8),
                                           out=torch.empty(2, 3, 6, 6, dtype=torch.uint8)),
              TypeError, r"quantize_linear: out must have dtype int8 \(got uint8\)"),
    "dtype_numpy_zero_point": (lambda: dmlq.quantize_linear(T["x"], 0.01, np.int8(3),
                                                            out=torch.empty(2, 3, 6, 6, dtype=torch.uint8)),
                               TypeError, r"quantize_linear: out must have dtype int8 \(got uint8\)"),
    "dequantize_dtype": (lambda: dmlq.dequantize_linear(T["q"], 0.5, out=torch.empty(2, 3, 6, 6, dtype=torch.float16)),
                         TypeError, r"dequantize_linear: out must have dtype float32 \(got float16\)"),
    "shape": (lambda: dmlq.quantize_linear(T["x"], 0.01, 3, out=torch.empty(2, 3, 6, 5, dtype=torch.int8)),
              ValueError, r"quantize_linear: out must have shape \(2, 3, 6, 6\) \(got \(2, 3, 6, 5\)\)"),
    "numpy_out": (lambda: dmlq.quantize_linear(T["x"], 0.01, 3, out=np.empty((2, 3, 6, 6), np.int8)),
                  TypeError, r"quantize_linear: out is a numpy.ndarray but x is a torch tensor"),
    "huge_int_scale": (lambda: dmlq.quantize_linear(T["x"], 10**400), ValueError,
                       r"quantize_linear: scale = 100\.\.\. .* is beyond the range of float32"),
    "float_zero_point": (lambda: dmlq.quantize_linear(T["x"], 0.01, 0.5), TypeError,
                         r"quantize_linear: zero_point must be an integer"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_compiled_call_errors_in_the_eager_words(name):
    """Without fullgraph the call raises the eager call's own exception (no internal Dynamo
    error from tracing NumPy code with torch dtypes or float() of a huge int); with
    fullgraph=True torch's Unsupported error carries the same message."""
    call, kind, message = WRONG[name]
    with pytest.raises(kind, match=message):
        call()
    torch._dynamo.reset()
    with pytest.raises(kind, match=message):
        torch.compile(call, backend="eager", fullgraph=False)()
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(call, backend="eager", fullgraph=True)()
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any(re.search(message, s) for s in chain), chain


def test_a_failing_compiled_call_on_bfloat16_tensors_raises_the_eager_error():
    """Without fullgraph, after the traced form raised, Dynamo compiled each frame of the eager
    fallback (a resume function inside the ml_dtypes view) and failed in its own tracing."""
    x = T["x"][0, 0].bfloat16()
    torch._dynamo.reset()
    with pytest.raises(ValueError, match=r"quantize_linear: scale = 1e-50 is below the smallest magnitude of bfloat16"):
        torch.compile(lambda: dmlq.quantize_linear(x, 1e-50), backend="eager")()
    torch._dynamo.reset()
    with pytest.raises(TypeError, match=r"quantize_linear: zero_point must be an integer"):
        torch.compile(lambda: dmlq.quantize_linear(x, 0.5, 0.5), backend="eager")()


@pytest.mark.parametrize("fullgraph", [False, True])
def test_out_with_a_tensor_that_requires_grad_is_refused_inside_compile(fullgraph):
    """Eager dmlq refuses out= beside a tensor that requires grad (torch refuses it for its own
    ops, compiled too); the traced form wrote it. Under no_grad it is taken."""
    x, o = torch.randn(4, requires_grad=True), torch.empty(4, dtype=torch.uint8)
    torch._dynamo.reset()
    f = torch.compile(lambda x, o: dmlq.quantize_linear(x, 0.1, out=o), backend="aot_eager", fullgraph=fullgraph)
    with pytest.raises(Exception) as info:
        f(x, o)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("quantize_linear: out= is not taken with a tensor that requires grad" in s for s in chain), chain
    with torch.no_grad():
        assert f(x, o) is o and torch.equal(o, dmlq.quantize_linear(x.detach(), 0.1))


def test_int_zero_points_that_change_compile_once_more_not_per_value():
    """A Python int zero point that is an argument of the compiled function: the ops take it as a
    SymInt, so after the first value's graph one symbolic graph serves every later value (with an
    int schema each value compiled again, and fullgraph=True failed hard at torch's limit of 8);
    a value out of range raises the eager call's error when the graph runs."""
    from torch._dynamo.utils import counters

    b = torch.randint(-128, 128, (8, 5), dtype=torch.int8)
    x = torch.randn(2, 3, 6, 6)
    q = torch.randint(0, 256, (2, 3, 6, 6), dtype=torch.uint8)
    a = torch.randint(0, 256, (4, 8), dtype=torch.uint8)
    calls = [(lambda x, zp: dmlq.quantize_linear(x, 0.1, zp, dtype=torch.uint8), x),
             (lambda q, zp: dmlq.dequantize_linear(q, 0.1, zp), q),
             (lambda q, zp: dmlq.quantized_add(q, 0.1, zp, q, 0.2, zp + 1, 0.3, zp // 2), q),
             (lambda a, zp: dmlq.quantized_matmul(a, 0.1, zp, b, 0.05, 0, 0.4, zp // 3), a),
             (lambda q, zp: dmlq.quantized_avg_pool(q, 0.1, zp, 0.2, zp + 2, (2, 2)), q),
             (lambda a, zp: dmlq.matmul_integer(a, b, zp, 0), a),
             (lambda a, zp: dmlq.matmul_integer_to_float(a, 0.1, zp, b, 0.05, 0), a),
             (lambda x, zp: dmlq.quantize_linear(x, torch.tensor(0.1), zp, dtype=torch.uint8), x)]  # (.tensor)
    for fn, arg in calls:
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
        for zp in (0, 7, 1, 2, 3, 4, 5, 6, 9, 11, 13, 100):
            assert torch.equal(compiled(arg, zp), fn(arg, zp)), zp
        assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])  # (.tensor too: a symbolic 0-d tensor)
        if fn is calls[0][0]:  # the symbolic graph runs the eager call's check on each value
            with pytest.raises(ValueError, match=r"zero_point = 300 is out of range for uint8"):
                compiled(x, 300)


def test_a_zero_point_from_item_compiles(monkeypatch):
    """A zero point read from a tensor inside the compiled function (``.item()`` with
    capture_scalar_outputs: a SymInt without an example value) compiles and gives the eager
    result; an out-of-range one raises the eager call's error when the graph runs (the fake had
    checked torch's fallback hint, 8192, and refused the compile)."""
    import torch._dynamo.config as dynamo_config

    monkeypatch.setattr(dynamo_config, "capture_scalar_outputs", True)
    torch._dynamo.reset()
    x = torch.randn(8)
    q = torch.randint(0, 256, (8,), dtype=torch.uint8)
    calls = [lambda z: dmlq.quantize_linear(x, 0.1, z.item(), dtype=torch.uint8),
             lambda z: dmlq.dequantize_linear(q, 0.1, z.item()),
             lambda z: dmlq.quantized_add(q, 0.1, z.item(), q, 0.2, 1, 0.3, z.item())]
    for fn in calls:
        compiled = torch.compile(fn, backend="aot_eager")
        for z in (3, 0, 255):
            assert torch.equal(compiled(torch.tensor(z)), fn(torch.tensor(z))), z
    with pytest.raises(ValueError, match=r"zero_point = 300 is out of range for uint8"):
        torch.compile(calls[0], backend="aot_eager")(torch.tensor(300))
    torch._dynamo.reset()


_AXIS, _SIZES, _FLAG = np.int64(1), np.array([2, 2]), np.True_  # (a closure's NumPy values)
KEYWORDS = {  # name: (the call, the words of its refusal inside torch.compile(fullgraph=True))
    "numpy_axis": (lambda: dmlq.dequantize_linear(T["q"], torch.full((3,), 0.5), None, axis=_AXIS),
                   r"dequantize_linear: axis is a NumPy number that torch.compile makes a tensor, .* int\(v\)"),
    "numpy_block_size": (lambda: dmlq.quantize_linear(T["x"], torch.full((2, 3, 6, 3), 0.5), None, axis=3,
                                                      block_size=np.int32(1) + _AXIS),
                         r"quantize_linear: block_size is a NumPy number"),
    "numpy_window": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, _SIZES),
                     r"quantized_avg_pool: window_size is a NumPy array .* \[int\(e\) for e in v\]"),
    "numpy_strides": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, [2, 2], strides=_SIZES),
                      r"quantized_avg_pool: strides is a NumPy array"),
    "numpy_ceil_mode": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, [2, 2], ceil_mode=_FLAG),
                        r"quantized_avg_pool: ceil_mode is a NumPy number .* bool\(v\)"),
    "numpy_saturate": (lambda: dmlq.quantize_linear(T["x"], 0.01, dtype=torch.float8_e4m3fn, saturate=_FLAG),
                       r"quantize_linear: saturate is a NumPy number"),
    "bool_axis": (lambda: dmlq.dequantize_linear(T["q"], torch.full((3,), 0.5), None, axis=True),
                  r"dequantize_linear: axis must be an int \(got True\)"),
    "float_window": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, (2.0, 2)),
                     r"quantized_avg_pool: window_size must hold integers \(got \(2\.0, 2\)\)"),
    "int_ceil_mode": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, [2, 2], ceil_mode=1),
                      r"quantized_avg_pool: ceil_mode must be True or False \(got 1\)"),
    "tensor_window": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, torch.tensor([2, 2])),
                      r"quantized_avg_pool: window_size is or holds a tensor; inside torch.compile"),
    "tensors_in_strides": (lambda: dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, 2, strides=(torch.tensor(2),) * 2),
                           r"quantized_avg_pool: strides is or holds a tensor; inside torch.compile"),
}


@pytest.mark.parametrize("name", sorted(KEYWORDS))
def test_int_and_bool_keywords_inside_compile(name):
    """The op's schema takes Python ints and bools there. A NumPy value that Dynamo holds as a
    tensor reached it as a tensor or an unknown int (torch's "Expected a value of type
    'Optional[int]'", or a crash in the backend), and a bool or float where an int is meant (an
    int where a bool is) was converted by the schema (axis=True was axis 1, ceil_mode=1 True)
    where the eager call refuses it. Now each is refused naming the keyword, with the fix; without
    fullgraph the call falls back to the eager call, which takes NumPy values (and a tensor window)."""
    fn, message = KEYWORDS[name]
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):
        torch.compile(fn, backend="aot_eager", fullgraph=True)()
    if name.startswith(("numpy", "tensor")):  # (values the eager call takes)
        torch._dynamo.reset()
        assert np.array_equal(_bytes(torch.compile(fn, backend="aot_eager")()), _bytes(fn()))
    else:
        with pytest.raises(TypeError, match=message):
            fn()


def test_int_and_bool_keywords_through_the_op_in_eager_mode():
    """A call with a tensor that requires grad goes through the op in eager mode too: a tensor
    window (which the NumPy path takes) reached the schema (torch's "Expected a value of type
    'List[int]'"), and axis=True became axis 1 where the NumPy path refuses it."""
    s = torch.tensor(0.5, requires_grad=True)
    want = dmlq.quantized_avg_pool(T["q"], 0.5, 1, 0.5, 2, [2, 2])
    assert torch.equal(dmlq.quantized_avg_pool(T["q"], s, 1, 0.5, 2, torch.tensor([2, 2])), want)
    assert torch.equal(dmlq.quantized_avg_pool(T["q"], s, 1, 0.5, 2, np.array([2, 2]), ceil_mode=np.False_), want)
    with pytest.raises(TypeError, match=r"^dequantize_linear: axis must be an int \(got True\)$"):
        dmlq.dequantize_linear(T["q"], torch.full((3,), 0.5, requires_grad=True), None, axis=True)


def _cache_entries():
    eval_frame = pytest.importorskip("torch._dynamo.eval_frame")
    entries_of = getattr(eval_frame, "_debug_get_cache_entry_list", None)
    if entries_of is None:
        pytest.skip("this torch has no torch._dynamo.eval_frame._debug_get_cache_entry_list")
    return entries_of


def test_an_eager_fallback_compiles_no_frame_below_the_public_function():
    """A compiled call refused in its traced form (fullgraph=False) falls back to running the frame
    eagerly; the public function then runs with Dynamo off, so Dynamo compiles none of dmlq's
    host frames below it (it compiled 15 of them, capture._device_array among them, whose
    sys.modules.get an import on another thread broke mid-build: seen under pytest-xdist)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    x = torch.linspace(-1, 1, 6)
    compiled = torch.compile(lambda t: dmlq.quantize_linear(t, 0.5, dtype="complex128"), backend="eager")
    with pytest.raises(TypeError, match="quantize_linear: dtype"):  # (no torch dtype: the traced form refuses it)
        compiled(x)
    # the lambda's frame and the public function's own (its traced form); it was 17 frames, 15
    # of them dmlq's host code (dispatch, checks, dmlq.frameworks, dmlq.torch.call ...)
    assert counters["frames"]["total"] == 2, dict(counters["frames"])


def test_a_public_function_frame_compiled_on_its_own_reads_no_module_table():
    """Where Dynamo compiles a dmlq function's own frame (the frame that called it ran eagerly: a
    graph break, a frame that failed to compile, here torch.compiler.disable(recursive=False)),
    the frame is dmlq's traced form: its guards read no ``sys.modules``. Tracing the wrapper's
    ``sys.modules.get`` made Dynamo build and guard the whole module table, and an import on
    another thread during the build failed the call ("dictionary changed size during
    iteration", an InternalTorchDynamoError, seen under pytest-xdist)."""
    entries_of = _cache_entries()
    torch._dynamo.reset()
    x = torch.linspace(-1, 1, 6)

    def f(t):
        return dmlq.quantize_linear(t, 0.5)

    eager = torch.compiler.disable(f, recursive=False)
    compiled = torch.compile(lambda t: eager(t) + 0, backend="eager")
    assert torch.equal(compiled(x), dmlq.quantize_linear(x, 0.5))
    entries = entries_of(dmlq.quantize_linear.__code__)
    assert entries, "Dynamo compiled no frame of the public function on its own"
    parts = [p for e in entries for p in e.guard_manager.code_parts]
    assert parts and not any("modules" in p for p in parts), [p for p in parts if "modules" in p]


def test_a_list_of_numpy_scalars_as_x_with_fullgraph_names_them():
    """Dynamo traces a NumPy scalar as a 0-d tensor, so a list of them as quantize's x reached the
    compiled call as a list of tensors, refused as "holding something other than numbers" (untrue:
    the eager call takes it, as does fullgraph=False by falling back); the refusal names them."""
    s = torch.tensor(0.01)
    x = [np.float32(1.5), np.float32(2.0)]
    want = dmlq.quantize_linear(x, s)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(lambda s: dmlq.quantize_linear(x, s), backend="eager")(s), want)
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(lambda s: dmlq.quantize_linear(x, s), backend="eager", fullgraph=True)(s)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("quantize_linear: x is a list holding tensors or NumPy scalars" in c for c in chain), chain


def _chain(e):
    out = []
    while e is not None:
        out.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return out


def test_matmuls_and_pooling_take_lists_as_the_eager_call_does():
    """Data given as Python lists or numbers to the matmul family and pooling inside
    torch.compile: a list of ints as a, b or x is the eager call's TypeError (fullgraph=False runs
    the call eagerly; fullgraph=True reports the same TypeError inside torch's error), and
    matmul_integer_to_float's bias as a list or a number is float32 as in the eager call (and
    beyond float32's range the eager ValueError). They all failed in torch's fake tensors
    (TorchRuntimeError) before."""
    a = torch.tensor([[1, 2]], dtype=torch.uint8)
    b = torch.tensor([[1, -2], [3, 4]], dtype=torch.int8)
    refused = {
        "quantized_matmul a": lambda: dmlq.quantized_matmul([[1, 2]], 0.1, 0, b, 0.1, 0, 0.1, 0),
        "matmul_integer b": lambda: dmlq.matmul_integer(a, [[1, 2], [3, 4]]),
        "matmul_integer_to_float a": lambda: dmlq.matmul_integer_to_float(1, 0.1, None, b, 0.1, None),
        "quantized_avg_pool x": lambda: dmlq.quantized_avg_pool([[[[1, 2], [3, 4]]]], 0.1, 0, 0.1, 0,
                                                                 window_size=(2, 2)),
        "bias beyond float32": lambda: dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.1, None, bias=[1e39, 0.0]),
    }
    for what, f in refused.items():
        with pytest.raises((TypeError, ValueError)) as eager:
            f()
        for fullgraph in (False, True):
            torch._dynamo.reset()
            with pytest.raises(Exception) as info:
                torch.compile(f, backend="eager", fullgraph=fullgraph)()
            chain = _chain(info.value)
            if not fullgraph:
                assert type(info.value) is type(eager.value) and str(info.value) == str(eager.value), (what, chain)
            else:
                assert any(type(eager.value).__name__ in c and f"{f.__code__.co_names[-1]}:" in c for c in chain), \
                    (what, chain)
    for bias in ([1.0, 2.5], 3.0, [1, 2]):
        f = lambda bias=bias: dmlq.matmul_integer_to_float(a, 0.1, None, b, 0.1, None, bias=bias)  # noqa: E731
        want = f()
        for fullgraph in (False, True):
            torch._dynamo.reset()
            got = torch.compile(f, backend="eager", fullgraph=fullgraph)()
            assert got.dtype == want.dtype == torch.float32 and torch.equal(got, want), (bias, got, want)
