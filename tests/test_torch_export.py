"""torch.export and inductor on the torch.ops.dmlq graphs: symbolic int zero points beside tensor
scales, 4-bit and 2-bit values in inductor's graphs, and dmlq.Packed operands (NumPy bytes) in
compiled and exported functions.

Expected values come from the eager call on the same tensors (itself checked against
dmlq.reference in tests/test_torch.py).
"""
from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dmlq  # noqa: E402
import dmlq.torch  # noqa: E402,F401

_rng = np.random.default_rng(11)
X = torch.from_numpy(_rng.standard_normal((4, 6)).astype(np.float32))
W = torch.from_numpy(_rng.standard_normal((6, 5)).astype(np.float32))
A = torch.from_numpy(_rng.integers(0, 256, (4, 6), dtype=np.uint8))
Q = torch.from_numpy(_rng.integers(0, 256, (4, 6), dtype=np.uint8))


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _same(got, want):
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(_bits(got), _bits(want))


class _Quantize(torch.nn.Module):
    def forward(self, x, s, z):
        return dmlq.quantize_linear(x, s, z)


class _QuantizeInt4(torch.nn.Module):
    def forward(self, x, s, z):
        return dmlq.quantize_linear(x, s, z, dtype=torch.int4)


class _Dequantize(torch.nn.Module):
    def forward(self, q, s, z):
        return dmlq.dequantize_linear(q, s, z)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("module, data", [(_Quantize, X), (_QuantizeInt4, X), (_Dequantize, Q)])
def test_export_keeps_a_dynamic_int_zero_point_beside_a_tensor_scale(module, data, strict):
    """An int zero point exported with Dim.DYNAMIC beside a tensor scale (the .tensor overload, the
    int made a 0-d tensor of the output's type): the traced form tested it against 0 (None stands
    for a zero point of 0), so non-strict export specialized it to its example value (a
    constraint violation) and strict export guarded on it, so the program refused a zero point of
    0 ("Guard failed: z != 0"). Now it stays symbolic: every value in range gives the eager bits,
    through torch.export.save and load too."""
    from torch.export import Dim

    m, s = module(), torch.tensor(0.1)
    ep = torch.export.export(m, (data, s, 3), dynamic_shapes=(None, None, Dim.DYNAMIC), strict=strict)
    for z in (3, 7, 0, 5):
        assert _same(ep.module()(data, s, z), m(data, s, z)), z
    if module is _QuantizeInt4:  # (torch.export.save has no int4 in its schema: torch 2.13's limit)
        return
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf).module()
    for z in (0, 9):
        assert _same(loaded(data, s, z), m(data, s, z)), z


def test_a_zero_point_of_0_after_a_symbolic_one_needs_no_graph_more():
    """Beside a tensor scale, a compiled function's int zero point that changes becomes symbolic; a
    later 0 took a third graph (the symbolic graph guarded on the value being nonzero)."""
    from torch._dynamo.utils import counters

    def fn(x, zp):
        return dmlq.quantize_linear(x, torch.tensor(0.1), zp, dtype=torch.uint8)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    for zp in (7, 1, 0, 2, 0, 255):
        assert torch.equal(compiled(X, zp), fn(X, zp)), zp
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    with pytest.raises(Exception, match=r"zero_point = 300 is out of range for uint8"):
        compiled(X, 300)


def test_inductor_compiles_graphs_holding_4_bit_and_2_bit_values(monkeypatch, tmp_path):
    """torch 2.13's torch.fx names no int4/uint4/int2/uint2 (torch.utils._dtype_abbrs), and inductor
    writes out each graph it compiles anew (a cache miss): a graph holding such a value raised
    ``KeyError: torch.int4``, so dmlq's narrow types compiled only with backend="aot_eager"."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # (a miss: a cached graph is not written)

    def fn(x, w, q2):
        q = dmlq.quantize_linear(x, 0.1, dtype=torch.int4)
        w4 = dmlq.quantize_linear(w, torch.full((1, 5), 0.05), None, dtype=torch.uint4)
        y = dmlq.matmul_integer_to_float(dmlq.quantize_linear(x, 0.1, 3), 0.1, 3, w4, 0.05, 0)
        return q, dmlq.dequantize_linear(q, 0.1), y, dmlq.dequantize_linear(q2, 0.5)

    q2 = dmlq.quantize_linear(X.abs(), 0.5, dtype=torch.uint2)
    want = fn(X, W, q2)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True)(X, W, q2)  # (inductor: the default backend)
    assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    from torch.fx.experimental.proxy_tensor import make_fx

    assert "int4" in make_fx(fn)(X, W, q2).print_readable(print_output=False)  # (the cause, cache or not)


_B4 = dmlq.quantize_linear(W, 0.1, dtype=torch.int4)
_F8 = dmlq.quantize_linear(X, 0.5, dtype=torch.float8_e4m3fn)
_PACKED = {"b_int4": dmlq.pack(_B4), "b_uint4": dmlq.pack(dmlq.quantize_linear(W.abs(), 0.1, dtype=torch.uint4)),
           "zp_int4": dmlq.pack(dmlq.quantize_linear(W[0], 1.0, dtype=torch.int4)),
           "q_uint2": dmlq.pack(dmlq.quantize_linear(X.abs(), 0.5, dtype=torch.uint2)),
           "q_float8": dmlq.pack(_F8),
           "scale_e8m0": dmlq.Packed(np.array([126, 127, 128, 126], np.uint8), (4, 1), "float8_e8m0fnu"),
           "bt_int4": dmlq.pack(_B4.view(torch.uint8).mT.contiguous(), dtype="int4").mT,  # (K-major: its transpose's bytes)
           # (and in rows 3 elements longer than K, as MatMulNBits pads them: the first K of each)
           "bt_int4_rows": dmlq.pack(torch.cat([_B4.view(torch.uint8).mT, torch.full((_B4.shape[1], 3), 9, dtype=torch.uint8)],
                                               dim=1), dtype="int4").mT[..., :_B4.shape[0], :]}
PACKED_CALLS = {
    "quantized_matmul": lambda a: dmlq.quantized_matmul(a, 0.1, 3, _PACKED["b_int4"], 0.05, 0, 0.3, 2),
    "quantized_matmul_uint4_tensor_scale": lambda a: dmlq.quantized_matmul(
        a, 0.1, 3, _PACKED["b_uint4"], torch.full((5,), 0.05), None, 0.3, 2),
    "quantized_matmul_packed_zero_point": lambda a: dmlq.quantized_matmul(
        a, 0.1, 3, _PACKED["b_int4"], torch.full((5,), 0.05), _PACKED["zp_int4"], 0.3, 2),
    "matmul_integer": lambda a: dmlq.matmul_integer(a, _PACKED["b_int4"], 3, 0),
    "matmul_integer_transposed_packed": lambda a: dmlq.matmul_integer(a, _PACKED["bt_int4"], 3, 0),
    "matmul_integer_transposed_packed_rows": lambda a: dmlq.matmul_integer(a, _PACKED["bt_int4_rows"], 3, 0),
    "matmul_integer_to_float": lambda a: dmlq.matmul_integer_to_float(a, 0.1, 3, _PACKED["b_int4"], 0.05, 0),
    # a Packed b beside a torch.int4 zero point, and the other way round (the tensor taken by value too)
    "matmul_integer_to_float_int4_tensor_zero_point": lambda a: dmlq.matmul_integer_to_float(
        a, 0.1, 3, _PACKED["b_int4"], 0.05, dmlq.quantize_linear(W[0], 1.0, dtype=torch.int4)),
    "quantized_matmul_int4_tensor_b_packed_zero_point": lambda a: dmlq.quantized_matmul(
        a, 0.1, 3, _B4, torch.full((5,), 0.05), _PACKED["zp_int4"], 0.3, 2),
    "dequantize_uint2": lambda a: dmlq.dequantize_linear(_PACKED["q_uint2"], torch.tensor(0.5)),
    "dequantize_float8_e8m0_scale": lambda a: dmlq.dequantize_linear(_F8, _PACKED["scale_e8m0"], dtype=torch.float32),
}


@pytest.mark.parametrize("name", sorted(PACKED_CALLS))
def test_a_packed_operand_inside_compile(name):
    """A dmlq.Packed operand (NumPy bytes) that the eager call takes beside torch tensors: Dynamo
    gave the Packed itself to the op, and torch refused it ("Expected a value of type 'Tensor' for
    argument 'b'"), with fullgraph=True and without. The traced form unpacks it into a tensor of
    its torch type by tensor operations."""
    fn = PACKED_CALLS[name]
    want = fn(A)
    torch._dynamo.reset()
    assert _same(torch.compile(fn, backend="aot_eager", fullgraph=True)(A), want)


def test_inductor_compiles_a_packed_b(monkeypatch, tmp_path):
    """A dmlq.Packed b and zero point (NumPy bytes; MatMulNBits' K-major rows, and a row-major uint4
    b) under the default backend: the traced form hands the matmuls their values as int8 / uint8
    tensors, the results the eager call's. Session 43 unpacked them into a torch.int4 view, which
    torch 2.13's Inductor failed to lower ("torch.iinfo() requires an integer input type")."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # (a miss: the graph is lowered)

    def fn(a):
        return (dmlq.matmul_integer_to_float(a, 0.1, 3, _PACKED["bt_int4_rows"], torch.full((5,), 0.05),
                                             _PACKED["zp_int4"]),
                dmlq.quantized_matmul(a, 0.1, 3, _PACKED["b_uint4"], 0.05, 9, 0.3, 2))

    want = fn(A)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True)(A)
    assert all(_same(g, w) for g, w in zip(got, want))


def test_a_packed_operand_that_the_call_does_not_take_inside_compile():
    """Refused in the eager call's words, naming the operand."""
    bad = dmlq.Packed(np.zeros(14, np.uint8), (6, 5), "int4")  # 15 bytes hold 30 int4 elements
    calls = [(lambda a: dmlq.quantized_matmul(a, 0.1, 3, bad, 0.05, 0, 0.3, 2),
              r"quantized_matmul: b is a dmlq.Packed that does not hold its elements"),
             (lambda a: dmlq.quantized_add(_PACKED["b_int4"], 0.1, 0, a, 0.1, 0, 0.1, 0),
              r"quantized_add: a is a dmlq.Packed, which quantized_add does not take as a"),
             (lambda a: dmlq.quantized_matmul(a, 0.1, 3, _PACKED["q_float8"], 0.05, 0, 0.3, 2),
              r"quantized_matmul: a packed b must be int4, uint4, int2 or uint2 \(got a dmlq.Packed of float8_e4m3fn\)")]
    for fn, message in calls:
        with pytest.raises(Exception, match=message):  # eager: the same words
            fn(A)
        torch._dynamo.reset()
        with pytest.raises(Exception, match=message):  # (fullgraph: inside torch's Unsupported)
            torch.compile(fn, backend="aot_eager", fullgraph=True)(A)


def test_non_strict_export_of_a_packed_b():
    """Non-strict torch.export (the default) of a function with a packed b: the eager call unpacks
    it into an ml_dtypes int4 array, which torch.as_tensor could not convert ("can't convert
    np.ndarray of type ml_dtypes.int4"); it is a constant of the program now, through its bytes."""
    class M(torch.nn.Module):
        def forward(self, a):
            return dmlq.quantized_matmul(a, 0.1, 3, _PACKED["b_int4"], torch.full((5,), 0.05), None, 0.3, 2)

    m = M()
    ep = torch.export.export(m, (A,))
    assert _same(ep.module()(A), m(A))
    assert _same(ep.module()(Q), m(Q))


def test_pack_and_unpack_inside_compile_are_refused_by_name():
    """dmlq.pack / dmlq.unpack give or read NumPy bytes, which a graph cannot hold: with
    fullgraph=True Dynamo failed inside them ("Unsupported ndarray attribute access", "Unsupported
    method call"); now the refusal names the function and the fix. Without fullgraph, pack runs
    eagerly at a graph break."""
    packed = _PACKED["b_int4"]
    for fn, name in ((lambda x: dmlq.pack(dmlq.quantize_linear(x, 0.1, dtype=torch.int4)), "pack"),
                     (lambda x: dmlq.unpack(packed), "unpack")):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=rf"{name}: torch.compile does not trace dmlq.{name} .* call it outside"):
            torch.compile(fn, backend="aot_eager", fullgraph=True)(X)
    torch._dynamo.reset()
    got = torch.compile(lambda x: dmlq.pack(dmlq.quantize_linear(x, 0.1, dtype=torch.int4)), backend="aot_eager")(X)
    assert got.dtype == "int4" and np.array_equal(got.data, dmlq.pack(dmlq.quantize_linear(X, 0.1, dtype=torch.int4)).data)
