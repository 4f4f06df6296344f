"""DML_FEATURE_LEVEL_6_3 Quantize / Dequantize descriptor operators on GPU arrays (dmlq.quantize63):
bit for bit what the same compiled operator gives on NumPy copies of the operands (the reference;
itself checked against ONNX's evaluator in test_desc_quantize63.py).

The GPU form: FLOAT32/FLOAT16 and INT8/UINT8 tensors as CuPy arrays, INT4/UINT4 tensors as a
dmlq.Packed of CuPy bytes (Sizes as its shape; a 1-D buffer where the desc has Strides). Every
quantized type, both float types, SCALE and SCALE_ZERO_POINT, per tensor / per axis / blocked on
each axis / blocked on two axes / several varying axes, out= given or not (poisoned), Strides on
the quantization tensors (a stride-0 broadcast) and on the input, odd element counts for 4-bit;
one plan per bound geometry; the refusals that remain.
"""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
from conftest import CurrentCupy, assert_same, poison
from dmlq import DequantizeDesc, QuantizeDesc, TensorDesc as T

md = pytest.importorskip("ml_dtypes")
pytestmark = pytest.mark.gpu
cp = CurrentCupy()

QTYPES = ("INT8", "UINT8", "INT4", "UINT4")
FLOATS = ("FLOAT32", "FLOAT16")


def np_dtype(dml):
    return dmlq.DataType.of(dml).numpy


def to_gpu(a):
    """A NumPy operand in its GPU form (a Packed of CuPy bytes for int4/uint4)."""
    if a is None:
        return None
    if a.dtype.name in ("int4", "uint4"):
        p = dmlq.pack(a)
        return dmlq.Packed(cp.asarray(p.data), p.shape, p.dtype)
    return cp.asarray(a)


def host_of(r):
    """A GPU result as the NumPy operator returns it (int4/uint4 unpacked to ml_dtypes)."""
    if isinstance(r, dmlq.Packed):
        return dmlq.unpack(dmlq.Packed(r.data.get(), r.shape, r.dtype))
    return r.get()


def ints(rng, dml, shape):
    dt = np_dtype(dml)
    info = md.iinfo(dt) if dt.name in ("int4", "uint4") else np.iinfo(dt)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dt)


def floats(rng, dml, shape, lo=None):
    if lo is not None:
        return rng.uniform(lo, 3.0, shape).astype(np_dtype(dml))
    x = (rng.standard_normal(shape) * 20).astype(np_dtype(dml))
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5, 1e30], np.float32)
    k = min(flat.size, specials.size)
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        flat[:k] = specials[:k]
    return x


def make(quantize, real, qt, xshape, pshape, zp=True, **kw):
    params = [T(real, pshape, kw.get("sstrides"))]
    if zp:
        params.append(T(qt, pshape, kw.get("zstrides")))
    kind = "SCALE_ZERO_POINT" if zp else "SCALE"
    if quantize:
        desc = QuantizeDesc(T(real, xshape, kw.get("xstrides")), kind, None, params,
                            T(qt, xshape, kw.get("ostrides")))
    else:
        desc = DequantizeDesc(T(qt, xshape, kw.get("xstrides")), kind, None, params,
                              T(real, xshape, kw.get("ostrides")))
    return dmlq.compile_operator(desc, feature_level="6.3")


def operands(rng, quantize, real, qt, xshape, pshape, zp=True, buffers=None):
    """NumPy operands; ``buffers``: {position: buffer length} for the inputs read through Strides."""
    buffers = buffers or {}
    shapes = [xshape, pshape] + ([pshape] if zp else [])
    out = []
    for i, shape in enumerate(shapes):
        shape = (buffers[i],) if i in buffers else shape
        if i == 0:
            out.append(floats(rng, real, shape) if quantize else ints(rng, qt, shape))
        elif i == 1:
            out.append(floats(rng, real, shape, lo=0.05))
        else:
            out.append(ints(rng, qt, shape))
    return out


def check(op, host_args, out_given=True):
    want = op(*host_args)
    got = op(*map(to_gpu, host_args))
    assert_same(host_of(got), want, "out=None")
    if isinstance(got, dmlq.Packed):  # ONNX's bytes, the last one's unused bits zero
        assert got.shape == want.shape and got.dtype == want.dtype.name
        assert_same(got.data.get(), dmlq.pack(want).data, "packed bytes")
    if out_given:
        out = to_gpu(np.zeros_like(want))
        poison(out.data if isinstance(out, dmlq.Packed) else out)
        r = op(*map(to_gpu, host_args), out=out)
        assert r is out
        assert_same(host_of(out), want, "out=")
        if isinstance(out, dmlq.Packed):
            assert_same(out.data.get(), dmlq.pack(want).data, "packed bytes of out=")
    return want


# (x shape, parameter shape): per tensor, per axis (each), blocked on each axis, two blocked axes,
# blocked beside a broadcast axis, two varying axes, odd 4-bit element counts
LAYOUTS = [
    ((7,), (1,)),
    ((3, 5), (1, 1)),
    ((3, 5), (3, 1)),
    ((3, 5), (1, 5)),
    ((2, 3, 5), (1, 3, 1)),
    ((6, 5), (3, 5)),           # blocked on axis 0 (block 2)
    ((3, 8), (3, 2)),           # blocked on axis 1 (block 4)
    ((2, 9, 3), (2, 3, 3)),     # blocked on the middle axis (block 3)
    ((4, 6), (2, 3)),           # blocked on both axes (the outer repeated on the device)
    ((4, 6), (1, 2)),           # blocked, broadcast on the other axis
    ((4, 6, 3), (4, 1, 3)),     # two varying axes, none blocked
    ((5, 3), (5, 3)),           # one parameter per element, 15 elements
    ((4, 6, 4), (2, 3, 1)),     # two blocked axes beside a broadcast one
]


@pytest.mark.parametrize("xshape,pshape", LAYOUTS)
@pytest.mark.parametrize("qt", QTYPES)
@pytest.mark.parametrize("quantize", [True, False], ids=["quantize", "dequantize"])
def test_equals_the_numpy_operator(quantize, qt, xshape, pshape, rng):
    for real in FLOATS:
        for zp in (True, False):
            op = make(quantize, real, qt, xshape, pshape, zp)
            check(op, operands(rng, quantize, real, qt, xshape, pshape, zp), out_given=zp == quantize)


@pytest.mark.parametrize("qt", QTYPES)
def test_strides_on_the_quantization_tensors_and_the_input(qt, rng):
    """A stride-0 broadcast zero point, a scale buffer read per channel through strides (0, 1, 0),
    and a strided input buffer (every other element): as on NumPy. A 4-bit strided operand is a 1-D
    Packed buffer."""
    xshape = (2, 3, 4)
    kw = dict(sstrides=(0, 1, 0), zstrides=(0, 0, 0))
    for quantize in (True, False):
        op = make(quantize, "FLOAT32", qt, xshape, xshape, **kw)
        args = operands(rng, quantize, "FLOAT32", qt, xshape, xshape, buffers={1: 3, 2: 1})
        check(op, args)
        strided = make(quantize, "FLOAT16", qt, xshape, (1, 3, 2), xstrides=(24, 8, 2), sstrides=(0, 2, 1),
                       zstrides=(0, 0, 0))
        args = operands(rng, quantize, "FLOAT16", qt, xshape, (1, 3, 2), buffers={0: 47, 1: 6, 2: 1})
        check(strided, args)


@pytest.mark.parametrize("qt", QTYPES)
def test_a_strided_output_buffer(qt, rng):
    """An OutputTensor with Strides (every other element of a buffer) is written through them, out=
    a 1-D buffer or a new one (NumPy's view of a new buffer), as on NumPy; a 4-bit one is the
    refused case below, so a Dequantize here for those."""
    xshape, ostrides = (3, 4), (8, 2)
    for quantize in ((True, False) if qt in ("INT8", "UINT8") else (False,)):
        op = make(quantize, "FLOAT32", qt, xshape, (3, 2), ostrides=ostrides)
        args = operands(rng, quantize, "FLOAT32", qt, xshape, (3, 2))
        want = op(*args)
        assert_same(op(*map(to_gpu, args)).get(), want)
        buffer = np.zeros(23, want.dtype)
        op(*args, out=buffer)
        gbuffer = cp.zeros(23, want.dtype)
        r = op(*map(to_gpu, args), out=gbuffer)
        assert_same(r.get(), want)
        assert_same(gbuffer.get(), buffer)  # the elements between untouched


@pytest.mark.parametrize("qt", QTYPES)
def test_empty_tensors(qt, rng):
    for quantize in (True, False):
        op = make(quantize, "FLOAT16", qt, (0, 4), (0, 2))
        args = operands(rng, quantize, "FLOAT16", qt, (0, 4), (0, 2))
        want = op(*args)
        got = op(*map(to_gpu, args))
        assert_same(host_of(got), want)


@pytest.mark.parametrize("qt", ("INT4", "UINT4"))
def test_4bit_operands_of_one_dimension_bind_by_element_count(qt, rng):
    """A 1-D Packed of Sizes' element count binds, as a 1-D NumPy array does (reshaped)."""
    op = make(False, "FLOAT32", qt, (3, 5), (3, 1))
    q, s, z = operands(rng, False, "FLOAT32", qt, (3, 5), (3, 1))
    want = op(q.reshape(-1), s, z)
    flat = to_gpu(q.reshape(-1))
    assert flat.shape == (15,)
    assert_same(op(flat, cp.asarray(s), to_gpu(z)).get(), want)


def test_a_repeated_call_plans_once(monkeypatch, rng):
    """The runners are kept per bound geometry: the second call binds no kernel anew."""
    from dmlq.gpu import qkernels

    planned = []
    real = qkernels.plan_dequantize_types
    monkeypatch.setattr(qkernels, "plan_dequantize_types", lambda *a: planned.append(1) or real(*a))
    op = make(False, "FLOAT32", "INT4", (4, 6), (4, 2))
    args = [to_gpu(a) for a in operands(rng, False, "FLOAT32", "INT4", (4, 6), (4, 2))]
    first = op(*args)
    op(*args)
    op(*args, out=cp.empty((4, 6), np.float32))
    assert len(planned) == 1 and len(op._runners) == 1
    assert_same(op(*args).get(), first.get())


# ------------------------------------------------------------------ refusals

def _int4_ops():
    return (make(True, "FLOAT32", "INT4", (2, 4), (2, 1)), make(False, "FLOAT32", "INT4", (2, 4), (2, 1)))


def test_a_4bit_tensor_as_a_plain_gpu_array_is_refused_naming_it():
    quant, deq = _int4_ops()
    x, s = cp.zeros((2, 4), np.float32), cp.ones((2, 1), np.float32)
    z = to_gpu(np.zeros((2, 1), md.int4))
    with pytest.raises(TypeError, match=r"^Quantize: QuantizationTensors\[1\] is INT4, which CuPy cannot hold: on "
                                        r"the GPU pass QuantizationTensors\[1\] as a dmlq.Packed"):
        quant(x, s, cp.zeros((2, 1), np.int8))
    with pytest.raises(TypeError, match=r"^Quantize: OutputTensor is INT4, which CuPy cannot hold: .* pass out as a "
                                        r"dmlq.Packed .* or leave out=None"):
        quant(x, s, z, out=cp.zeros((2, 4), np.int8))
    with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is INT4, which CuPy cannot hold"):
        deq(cp.zeros((2, 4), np.uint8), s, z)


def test_a_packed_of_the_wrong_type_or_shape_is_refused_naming_it():
    quant, deq = _int4_ops()
    s = cp.ones((2, 1), np.float32)
    z = to_gpu(np.zeros((2, 1), md.int4))
    q = to_gpu(np.zeros((2, 4), md.uint4))
    with pytest.raises(TypeError, match=r"^Dequantize: InputTensor must be INT4 \(got a dmlq.Packed of uint4\)"):
        deq(q, s, z)
    with pytest.raises(ValueError, match=r"^Dequantize: InputTensor has shape \(4, 2\), the desc's Sizes are "
                                         r"\(2, 4\)"):
        deq(to_gpu(np.zeros((4, 2), md.int4)), s, z)
    bad = dmlq.Packed(cp.zeros(3, np.uint8), (2, 4), "int4")
    with pytest.raises(ValueError, match=r"^Dequantize: InputTensor is a dmlq.Packed of 8 int4 elements .* 4 "
                                         r"contiguous bytes \(got 3\)"):
        deq(bad, s, z)
    with pytest.raises(ValueError, match=r"^Dequantize: InputTensor .* 4 contiguous bytes \(got 4, not contiguous\)"):
        deq(dmlq.Packed(cp.zeros(8, np.uint8)[::2], (2, 4), "int4"), s, z)
    for data in (cp.zeros(4, np.int8), cp.zeros((2, 2), np.uint8)):
        with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is a dmlq.Packed whose data must be a 1-D "
                                            r"uint8 array"):
            deq(dmlq.Packed(data, (2, 4), "int4"), s, z)
    with pytest.raises(ValueError, match=r"^Quantize: OutputTensor has shape \(8, 1\)"):
        quant(cp.zeros((2, 4), np.float32), s, z, out=to_gpu(np.zeros((8, 1), md.int4)))


def test_a_packed_where_no_4bit_tensor_goes_is_refused_naming_it():
    """On the GPU only an INT4/UINT4 tensor binds a Packed; a Packed of host bytes is refused on
    every operator (NumPy binds one element per byte), with the fix."""
    op = make(False, "FLOAT32", "UINT8", (2, 4), (2, 1))
    s = cp.ones((2, 1), np.float32)
    gp = dmlq.Packed(cp.zeros(8, np.uint8), (2, 4), "uint4")
    with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is a dmlq.Packed; on the GPU only an INT4/UINT4 "
                                        r"tensor .* InputTensor is UINT8: pass a CuPy array of uint8"):
        op(gp, s, cp.zeros((2, 1), np.uint8))
    _, deq = _int4_ops()
    hp = dmlq.pack(np.zeros((2, 4), md.int4))
    with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is a dmlq.Packed of host bytes; on NumPy arrays "
                                        r"a descriptor binds one element per byte .* pass dmlq.unpack\(\) of it"):
        deq(hp, np.ones((2, 1), np.float32), np.zeros((2, 1), md.int4))
    with pytest.raises(TypeError, match=r"NumPy and GPU arrays are mixed"):
        deq(to_gpu(np.zeros((2, 4), md.int4)), np.ones((2, 1), np.float32), np.zeros((2, 1), md.int4))


def test_a_strided_4bit_output_is_refused_on_the_gpu():
    """Two int4 elements share a byte: a strided 4-bit output is NumPy's (named, with the form)."""
    desc = QuantizeDesc(T("FLOAT32", (2, 3)), "SCALE", None, [T("FLOAT32", (1, 1))],
                        T("UINT4", (2, 3), strides=(4, 1)))
    op = dmlq.compile_operator(desc, "6.3")
    x, s = np.ones((2, 3), np.float32), np.full((1, 1), 0.5, np.float32)
    assert op(x, s).shape == (2, 3)  # NumPy: a view of the buffer
    with pytest.raises(dmlq.UnsupportedError, match=r"^Quantize: OutputTensor is UINT4 with Strides \(4, 1\); on "
                                                    r"the GPU a 4-bit output is written packed and dense"):
        op(cp.asarray(x), cp.asarray(s))
    with pytest.raises(dmlq.UnsupportedError, match=r"^Quantize: OutputTensor is UINT4 with Strides"):
        op(cp.asarray(x), cp.asarray(s), out=dmlq.Packed(cp.zeros(4, np.uint8), (7,), "uint4"))


def test_readme_example_runs():
    """README's 6.3 GPU block, as written, against the same operator on NumPy."""
    import re
    import textwrap
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]
    (block,) = [b for b in blocks if b.startswith("# A 6.3 descriptor on the GPU (CuPy)")]
    ns: dict = {}
    exec(compile(block, "README.md 6.3 GPU example", "exec"), ns)
    codes = dmlq.unpack(dmlq.pack(np.arange(40, dtype=np.uint8).reshape(4, 10) % 16, dtype="int4"))
    want = ns["op"](codes, np.full((4, 2), 0.5, np.float32), np.full((4, 2), -1, md.int4))
    assert_same(ns["yg"].get(), want)
    assert want[0, 9] == (-7 + 1) * 0.5  # code 9 is -7


def test_a_packed_shape_of_any_integer_sequence_binds_and_others_are_refused(rng):
    """A Packed's shape as dmlq.unpack takes it (a list, a NumPy array of ints) binds; floats and
    bools are a TypeError naming the tensor (a list shape crashed in the runners' key, floats were
    truncated silently); a Packed out is returned as given."""
    quant, deq = _int4_ops()
    x = rng.uniform(-3, 3, (2, 4)).astype(np.float32)
    s = rng.uniform(0.05, 1, (2, 1)).astype(np.float32)
    z = rng.integers(-8, 8, (2, 1)).astype(md.int4)
    codes = rng.integers(-8, 8, (2, 4)).astype(md.int4)
    want = deq(codes, s, z)
    pq, pz = to_gpu(codes), to_gpu(z)
    for shape_of in (list, np.array):
        got = deq(dmlq.Packed(pq.data, shape_of(pq.shape), "int4"), cp.asarray(s),
                  dmlq.Packed(pz.data, shape_of(pz.shape), "int4"))
        np.testing.assert_array_equal(got.get().view(np.uint32), want.view(np.uint32))
        out = dmlq.Packed(cp.zeros(4, np.uint8), shape_of((2, 4)), "int4")
        assert quant(cp.asarray(x), cp.asarray(s), pz, out=out) is out
        np.testing.assert_array_equal(dmlq.unpack(dmlq.Packed(out.data.get(), (2, 4), "int4")), quant(x, s, z))
    for bad in ((2.0, 4.0), (2.7, 4), (True, 8), "24"):
        with pytest.raises(TypeError, match=r"^Dequantize: InputTensor is a dmlq.Packed whose shape must be a tuple "
                                            r"of ints"):
            deq(dmlq.Packed(pq.data, bad, "int4"), cp.asarray(s), pz)
        with pytest.raises(TypeError, match=r"^Dequantize: QuantizationTensors\[1\] is a dmlq.Packed whose shape"):
            deq(pq, cp.asarray(s), dmlq.Packed(pz.data, bad, "int4"))
        with pytest.raises(TypeError, match=r"^Quantize: OutputTensor is a dmlq.Packed whose shape"):
            quant(cp.asarray(x), cp.asarray(s), pz, out=dmlq.Packed(cp.zeros(4, np.uint8), bad, "int4"))
