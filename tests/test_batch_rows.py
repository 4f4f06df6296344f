"""a's scale and zero point per batch and row (a's batch shape + (M, 1), 1s broadcast: ONNX
MatMulInteger's [D1, D2, M, 1] a_zero_point, and what a per-row dynamic_quantize_linear of a
(B, T, K) activation returns), and quantized_matmul's output scale and zero point per batch and
row (the output's batch shape + (M, 1)): on NumPy bit for bit dmlq.reference, each batch the 2-D
call on that batch with its (M, 1) parameters, against onnx.reference and onnxruntime, through
dask (chunked as a) and torch (eager, torch.compile, the meta device), and the refusals. The GPU
kernels: tests/test_gpu_batch_rows.py."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import dmlq
from dmlq import reference as R

I8, U8, I32, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.float32, np.float16))


def q(rng, dt, shape):
    info = np.iinfo(dt)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dt)


def bits(x):
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype == F32 else np.uint16) if x.dtype.kind == "f" else x


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


def per_matrix(fn, out_batch, *args, a_batch, rows=(), out_rows=()):
    """fn on each matrix of the output batch with its own 2-D operands: ``args`` are broadcast to
    the output batch where their index is in ``rows`` (a's parameters; a itself is args[0]) or
    ``out_rows`` (the output's), else passed as they are (b and its parameters: here 2-D)."""
    res = []
    for idx in itertools.product(*(range(d) for d in out_batch)):
        call = []
        for i, v in enumerate(args):
            if i == 0 or i in rows or i in out_rows:
                v = np.broadcast_to(v, out_batch + v.shape[-2:]) if np.ndim(v) >= 2 else v
                v = v[idx] if np.ndim(v) > 2 else v
            call.append(v)
        res.append(fn(*call))
    return np.stack(res).reshape(out_batch + res[0].shape)


SHAPES = [  # a's shape, the parameters' shape (per batch and row)
    ((2, 3, 5, 7), (2, 3, 5, 1)),
    ((2, 3, 5, 7), (2, 1, 5, 1)),     # a batch dim broadcast
    ((2, 3, 5, 7), (3, 5, 1)),        # a leading one
    ((2, 3, 5, 7), (1, 1, 2, 3, 5, 1)),  # leading 1s past a's batch
    ((4, 1, 0), (4, 1, 1)),           # M = 1, K = 0
    ((3, 0, 6), (3, 0, 1)),           # M = 0
]


@pytest.mark.parametrize("a_shape,p_shape", SHAPES)
@pytest.mark.parametrize("ta,tb", [(U8, I8), (I8, U8)])
def test_numpy_is_the_reference_and_each_batch_the_2d_call(a_shape, p_shape, ta, tb):
    rng = np.random.default_rng(sum(a_shape) + len(p_shape))
    raw_len = len(p_shape)
    k, m = a_shape[-1], a_shape[-2]
    a, b = q(rng, ta, a_shape), q(rng, tb, (k, 4))
    out_batch = a_shape[:-2]
    p_shape = p_shape[len(p_shape) - len(a_shape):] if len(p_shape) > len(a_shape) else p_shape  # for R
    a_zp, a_s = q(rng, ta, p_shape), rng.uniform(-1, 1, p_shape).astype(F32)
    shape = out_batch + (m, 4)
    lead = (1,) * (raw_len - len(p_shape)) + p_shape  # leading 1s past a's batch: the API drops them
    z = np.broadcast_to(a_zp, out_batch + (m, 1))
    s = np.broadcast_to(a_s, out_batch + (m, 1))

    got = dmlq.matmul_integer(a, b, a_zp.reshape(lead), tb.type(3))
    same(got, R.matmul_integer(a, a_zp, b, tb.type(3), np.empty(shape, I32)))
    same(got, per_matrix(lambda x, zz: dmlq.matmul_integer(x, b, zz, tb.type(3)), out_batch, a, z,
                         a_batch=out_batch, rows=(1,)))
    for dt in (F32, F16):
        bias = rng.uniform(-3, 3, 4).astype(F32)
        got = dmlq.matmul_integer_to_float(a, a_s, a_zp, b, np.float32(0.3), None, bias, dtype=dt)
        same(got, R.matmul_integer_to_float(a, a_s, a_zp, b, np.float32(0.3), None, bias, np.empty(shape, dt)))
        same(got, per_matrix(lambda x, ss, zz: dmlq.matmul_integer_to_float(x, ss, zz, b, np.float32(0.3), None,
                                                                            bias, dtype=dt),
                             out_batch, a, s, z, a_batch=out_batch, rows=(1, 2)))
    o_s = rng.uniform(0.5, 4, p_shape).astype(F32)
    o_zp = q(rng, I8, p_shape)
    got = dmlq.quantized_matmul(a, a_s / 10, a_zp, b, np.float32(0.3), None, o_s, o_zp)
    want = np.empty(shape, I8)
    R.quantized_matmul(a, a_s / 10, a_zp, b, np.float32(0.3), None, o_s, o_zp, want)
    same(got, want)
    same(got, per_matrix(lambda x, ss, zz, os_, oz: dmlq.quantized_matmul(x, ss, zz, b, np.float32(0.3), None,
                                                                           os_, oz),
                         out_batch, a, s / 10, z, np.broadcast_to(o_s, out_batch + (m, 1)),
                         np.broadcast_to(o_zp, out_batch + (m, 1)), a_batch=out_batch, rows=(1, 2, 3, 4)))


def test_blocked_scales_per_batch_b_and_a_batch_broadcast_against_b():
    """Blocked b scales (groups along K) and b's parameters per batch beside a's per batch and
    row; a of batch (3,) broadcast against a b of batch (2, 1): a's parameters follow a's batch."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (3, 6, 40)), q(rng, I8, (2, 1, 40, 5))
    a_s, a_zp = rng.uniform(0, 1, (3, 6, 1)).astype(F32), q(rng, U8, (3, 6, 1))
    b_s, b_zp = rng.uniform(0, 1, (2, 1, 3, 5)).astype(F32), q(rng, I8, (2, 1, 3, 5))
    got = dmlq.matmul_integer_to_float(a, a_s, a_zp, b, b_s, b_zp, block_size=16)
    same(got, R.matmul_integer_to_float(a, a_s, a_zp, b, b_s, b_zp, None, np.empty((2, 3, 6, 5), F32), 16))
    for i, j in itertools.product(range(2), range(3)):
        same(got[i, j], dmlq.matmul_integer_to_float(a[j], a_s[j], a_zp[j], b[i, 0], b_s[i, 0], b_zp[i, 0],
                                                     block_size=16))
    o_s = rng.uniform(1, 2, (2, 3, 6, 1)).astype(F32)  # the output's batch shape
    got = dmlq.quantized_matmul(a, a_s / 50, a_zp, b, b_s[..., :1, :], b_zp[..., :1, :], o_s, None)
    for i, j in itertools.product(range(2), range(3)):
        same(got[i, j], dmlq.quantized_matmul(a[j], a_s[j] / 50, a_zp[j], b[i, 0], b_s[i, 0, :1], b_zp[i, 0, :1],
                                              o_s[i, j], None))


def test_refusals_name_the_form():
    a, b = np.zeros((2, 3, 5, 7), U8), np.zeros((7, 4), I8)
    with pytest.raises(dmlq.DescError, match=r"a_zero_point must be .* or \(2, 3, 5, 1\) per batch and row "
                                             r"\(a's batch shape \+ \(M, 1\); 1s broadcast\) \(got shape \(2, 2, 5, 1\)\)"):
        dmlq.matmul_integer(a, b, np.zeros((2, 2, 5, 1), U8))
    with pytest.raises(dmlq.DescError, match=r"a's batch shape is \(\), so there is no per-batch-and-row form"):
        dmlq.matmul_integer_to_float(a[0, 0], np.ones((3, 5, 1), F32), None, b, np.float32(1), None)
    with pytest.raises(dmlq.DescError, match=r"a_scale must .*\(got \(4, 2, 3, 5, 1\)\), or \(2, 3, 5, 1\) per"):
        dmlq.quantized_matmul(a, np.ones((4, 2, 3, 5, 1), F32), None, b, 0.1, None, 0.1)
    with pytest.raises(dmlq.DescError, match=r"out_scale must .*or \(2, 3, 5, 1\) per batch and row \(the output's"):
        dmlq.quantized_matmul(a, 0.1, None, b, 0.1, None, np.ones((2, 3, 5, 2), F32))
    # a 2-D a beside a batched b: a's parameters follow a, which has no batch
    with pytest.raises(dmlq.DescError, match=r"a's batch shape is \(\)"):
        dmlq.matmul_integer(a[0, 0], np.zeros((3, 7, 4), I8), np.zeros((3, 5, 1), U8))


def test_onnx_reference_and_onnxruntime():
    """ONNX MatMulInteger with an [D1, M, 1] and a [D1, D2, M, 1] a_zero_point: onnx's reference
    evaluator gives dmlq's sums; onnxruntime's CPU kernel (if it takes the shape) too."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(17)
    for a_shape in ((3, 5, 8), (2, 3, 5, 8)):
        a, b = q(rng, U8, a_shape), q(rng, U8, (8, 6))
        a_zp, b_zp = q(rng, U8, a_shape[:-1] + (1,)), q(rng, U8, (6,))
        node = helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])
        graph = helper.make_graph([node], "g", [
            helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape)),
            helper.make_tensor_value_info("b", TensorProto.UINT8, list(b.shape)),
            helper.make_tensor_value_info("a_zp", TensorProto.UINT8, list(a_zp.shape)),
            helper.make_tensor_value_info("b_zp", TensorProto.UINT8, list(b_zp.shape))],
            [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        model.ir_version = 10
        feeds = {"a": a, "b": b, "a_zp": a_zp, "b_zp": b_zp}
        got = dmlq.matmul_integer(a, b, a_zp, b_zp)
        same(got, ReferenceEvaluator(model).run(None, feeds)[0].astype(I32))
        ort = pytest.importorskip("onnxruntime")
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        # onnxruntime's CPU MatMulInteger (1.32) takes a scalar a_zero_point only (its per-row (M, 1) too:
        # docs/semantics.md's list of differences)
        with pytest.raises(Exception, match="zero point must be a scalar or 1D tensor of size 1"):
            sess.run(None, feeds)


def test_dask_chunked_as_a():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(23)
    a, b = q(rng, U8, (2, 3, 6, 12)), q(rng, I8, (3, 12, 5))
    a_s, a_zp = rng.uniform(0, 1, (2, 3, 6, 1)).astype(F32), q(rng, U8, (2, 1, 6, 1))
    o_s, o_zp = rng.uniform(1, 2, (2, 3, 6, 1)).astype(F32), q(rng, I8, (3, 6, 1))
    b_s = rng.uniform(0, 1, (3, 1, 5)).astype(F32)
    for chunks in ((1, 2, (2, 4), (5, 7)), (2, 3, 6, 12), (1, 1, (1, 5), (4, 4, 4))):
        la, lb = da.from_array(a, chunks=chunks), da.from_array(b, chunks=(1, 6, (2, 3)))
        for lazy, want in (
                (dmlq.matmul_integer(la, lb, a_zp, None), dmlq.matmul_integer(a, b, a_zp, None)),
                (dmlq.matmul_integer_to_float(la, a_s, a_zp, lb, b_s, None, dtype=np.float16),
                 dmlq.matmul_integer_to_float(a, a_s, a_zp, b, b_s, None, dtype=np.float16)),
                (dmlq.matmul_integer_to_float(la, a_s, None, lb, b_s, None, block_size=5),
                 dmlq.matmul_integer_to_float(a, a_s, None, b, b_s, None, block_size=5)),
                (dmlq.quantized_matmul(la, a_s / 20, a_zp, lb, b_s, None, o_s, o_zp),
                 dmlq.quantized_matmul(a, a_s / 20, a_zp, b, b_s, None, o_s, o_zp))):
            assert isinstance(lazy, da.Array)
            same(lazy.compute(), want)


def test_torch_eager_compiled_and_meta():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(29)
    x = (rng.standard_normal((2, 5, 16)) * 3).astype(F32)
    w = q(rng, I8, (16, 7))
    y, s, z = dmlq.dynamic_quantize_linear(torch.from_numpy(x), per_row=True)
    want = dmlq.matmul_integer_to_float(y.numpy(), s.numpy(), z.numpy(), w, np.float32(0.5), None)
    tw = torch.from_numpy(w)
    same(dmlq.matmul_integer_to_float(y, s, z, tw, 0.5, None).numpy(), want)

    def chain(v):
        q8, sc, zp = dmlq.dynamic_quantize_linear(v, per_row=True)
        return dmlq.matmul_integer_to_float(q8, sc, zp, tw, 0.5, None), dmlq.matmul_integer(q8, tw, zp)

    f, i = torch.compile(chain, fullgraph=True)(torch.from_numpy(x))
    same(f.numpy(), want)
    same(i.numpy(), dmlq.matmul_integer(y.numpy(), w, z.numpy()))
    meta = dict(device="meta")
    one = torch.empty((), **meta)
    got = torch.ops.dmlq.quantized_matmul(torch.empty(2, 5, 16, dtype=torch.uint8, **meta),
                                          torch.empty(2, 5, 1, **meta), torch.empty(2, 5, 1, dtype=torch.uint8, **meta),
                                          torch.empty(16, 7, dtype=torch.int8, **meta), one, None,
                                          torch.empty(2, 5, 1, **meta), None, dtype=torch.int8)
    assert got.shape == (2, 5, 7) and got.device.type == "meta"


def test_kernel_plan_names_the_table():
    """dmlq.kernel_plan on CPU arrays plans the GPU kernels: per batch and row a's parameters pass
    the checks there too (matmul_stream.cu's plan notes the table)."""
    a = np.zeros((2, 17, 40), U8)
    text = str(dmlq.kernel_plan(dmlq.matmul_integer_to_float, a, np.ones((2, 17, 1), F32), None,
                                np.zeros((40, 4), I8), np.ones((3, 4), F32), None, block_size=16))
    assert text.startswith("matmul_integer_to_float: stream-rows"), text
    assert "a's scale and zero point per batch and row" in text, text
    text = str(dmlq.kernel_plan(dmlq.quantized_matmul, a, np.ones((2, 17, 1), F32), None,
                                np.zeros((40, 4), I8), 0.1, None, np.ones((2, 17, 1), F32)))
    assert text.startswith("quantized_matmul: dp4a"), text
