"""Issue 14: NumPy-grade errors and inputs, scale edge values, and the plan cache.

MISTAKES is the README's table of common mistakes: each row is the call, the
exception type and the message (a regular expression) it must get.
"""
import numpy as np
import pytest

import dmlq
from dmlq import calls as call_path, checks, reference

f32, f16, i8, u8 = np.float32, np.float16, np.int8, np.uint8
X = np.array([0.5, -1.25, 3.0], f32)
Q = np.array([1, 2, 3], u8)

def _float8(shape):
    import ml_dtypes
    return np.ones(shape, ml_dtypes.float8_e4m3fn)


def _bf16(shape):
    import ml_dtypes
    return np.ones(shape, ml_dtypes.bfloat16)


MISTAKES = [
    # (what the user wrote, call, exception, message)
    ("int64 zero point, no dtype", lambda: dmlq.quantize_linear(X, 0.1, np.array([5])), TypeError,
     r"quantize_linear: zero_point has dtype int64, but the output is a quantized type \(int8, uint8, int16, uint16, int4 \.\.\. float8\) and takes its dtype from "
     r"zero_point; pass zero_point=np.uint8\(...\) \(or .astype\(np.uint8\)\), or keep it and say which output "
     r"you want with dtype=np.uint8 or dtype=np.int8"),
    ("np.int32 zero point, no dtype", lambda: dmlq.quantize_linear(X, 0.1, np.int32(5)), TypeError,
     r"zero_point has dtype int32"),
    ("big-endian x", lambda: dmlq.quantize_linear(X.astype(">f4"), 0.1), TypeError,
     r"quantize_linear: x has the non-native byte order of dtype '>f4' \(float32\); dmlq reads arrays in the "
     r"machine's byte order: pass x.astype\('<f4'\)"),
    ("big-endian q, the types beyond int8", lambda: dmlq.dequantize_linear(np.zeros(3, ">i2"), 0.1, axis=0),
     TypeError, r"dequantize_linear: q has the non-native byte order of dtype '>i2'"),
    ("big-endian out", lambda: dmlq.quantize_linear(X, 0.1, dtype=np.int16, out=np.empty(3, ">i2")), TypeError,
     r"out has the non-native byte order of dtype '>i2' \(int16\); .* allocate out with dtype '<i2'"),
    ("scale=None", lambda: dmlq.quantize_linear(X, None), TypeError,
     r"quantize_linear: scale is required \(got None\); pass scale=0.1 or a float32 array"),
    ("x=None", lambda: dmlq.quantize_linear(None, 0.1), TypeError, r"quantize_linear: x is required \(got None\)"),
    ("float64 x", lambda: dmlq.quantize_linear(X.astype(np.float64), 0.1), TypeError,
     r"x must have dtype float32, float16 or int32 \(got float64\); dmlq computes in float32 and does not narrow "
     r"a float64 array silently: pass x.astype\(np.float32\)"),
    ("float64 scale array", lambda: dmlq.quantize_linear(X, np.full(3, 0.1)), TypeError,
     r"scale must have dtype float32 \(or float16 or bfloat16\) for a float32 x \(got float64\); dmlq computes in float32 .* "
     r"pass scale.astype\(np.float32\)"),
    ("string scale", lambda: dmlq.quantize_linear(X, "0.1"), TypeError,
     r"scale must be an array or a number \(got str\)"),
    ("zero point out of range", lambda: dmlq.quantize_linear(X, 0.1, 300), ValueError,
     r"zero_point = 300 is out of range for uint8 \[0, 255\]"),
    ("negative zero point, default uint8", lambda: dmlq.quantize_linear(X, 0.1, -1), ValueError,
     r"zero_point = -1 is out of range for uint8 \[0, 255\] .*dtype=np.int8"),
    ("float zero point", lambda: dmlq.quantize_linear(X, 0.1, 1.5), TypeError,
     r"zero_point must be an integer of dtype uint8 \(the output dtype\) \(got float 1.5\)"),
    ("bool zero point", lambda: dmlq.quantize_linear(X, 0.1, True), TypeError, r"zero_point must be an integer .* not a bool"),
    ("dtype contradicts zero point", lambda: dmlq.quantize_linear(X, 0.1, u8(1), dtype=i8), TypeError,
     r"dtype=int8 contradicts the dtype of zero_point \(uint8\)"),
    ("dtype not a quantized type", lambda: dmlq.quantize_linear(X, 0.1, dtype=np.float32), TypeError,
     r"quantize_linear: dtype must be a quantized type: one of int8, uint8, int16, .*float4_e2m1fn .*got "
     r"<class 'numpy.float32'>"),
    ("nonsense dtype", lambda: dmlq.quantize_linear(X, 0.1, dtype="int9"), TypeError,
     r"quantize_linear: dtype must be a quantized type: .*got 'int9'"),
    ("shapes that do not broadcast", lambda: dmlq.quantize_linear(X, np.ones(4, f32)), ValueError,
     r"shapes do not broadcast: x \(3,\), scale \(4,\)"),
    ("Python ints as quantized data", lambda: dmlq.dequantize_linear([1, 2, 3], 0.5), TypeError,
     r"q must have dtype int8, uint8, int16, uint16, int32 or uint32 \(got int64\) \(np.asarray makes int64 "
     r"from a list of Python ints\); pass np.asarray\(q, np.int32\) or np.asarray\(q, np.uint8\) if its values fit"),
    ("int64 quantized input", lambda: dmlq.quantized_add(Q.astype(np.int64), 0.1, 0, Q, 0.1, 0, 0.2), TypeError,
     r"quantized_add: a must have dtype int8 or uint8 \(got int64\)"),
    ("zero point outside a's range", lambda: dmlq.quantized_add(Q, 0.1, np.array(-1, i8), Q, 0.1, 0, 0.2),
     ValueError, r"a_zero_point holds values outside \[0, 255\], the range of uint8 \(a's dtype\)"),
    ("per-element add scale", lambda: dmlq.quantized_add(Q, np.ones(3, f32), 0, Q, 0.1, 0, 0.2), ValueError,
     r"a_scale must have exactly 1 element \(per tensor\), got shape \(3,\)"),
    ("matmul of a 0-d a", lambda: dmlq.quantized_matmul(np.uint8(3), 0.1, 0, Q, 0.1, 0, 0.2), ValueError,
     r"a and b must be matrices \(..., M, K\) and \(..., K, N\), or vectors as numpy.matmul takes them \(got "
     r"0-D and 2-D\)"),
    ("matmul K mismatch", lambda: dmlq.quantized_matmul(np.zeros((2, 3), u8), 1.0, None, np.zeros((4, 2), u8),
                                                          1.0, None, 1.0), ValueError,
     r"a has K = 3 columns but b has 4 rows"),
    ("per-row scale as a vector", lambda: dmlq.quantized_matmul(np.zeros((2, 3), u8), np.ones(2, f32), None,
                                                                  np.zeros((3, 4), u8), 1.0, None, 1.0),
     ValueError, r"a_scale must be a single value or shaped \(M, 1\) with M = 2 \(got \(2,\)\)"),
    ("pooling a 2-D image", lambda: dmlq.quantized_avg_pool(np.zeros((4, 4), u8), 1.0, None, 1.0, None, 2),
     ValueError, r"x must be 3-D \(N, C, L\), 4-D \(N, C, H, W\) or 5-D"),
    ("pooling a (C, H, W) image with a 2-D window", lambda: dmlq.quantized_avg_pool(
        np.zeros((3, 4, 4), u8), 1.0, None, 1.0, None, (2, 2)), ValueError,
     r"window_size must have 1 integer for a 3-D x \(N, C, L\)"),
    ("pooling window too large", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0,
                                                                   None, 5), ValueError,
     r"the dilated window \(5\) is larger than the padded input \(4\)"),
    ("pooling window None", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None, None),
     TypeError, r"window_size is required"),
    ("ceil_mode not a bool", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None, 2,
                                                               ceil_mode="yes"), TypeError,
     r"ceil_mode must be True or False"),
    ("out of the wrong dtype", lambda: dmlq.quantize_linear(X, 0.1, out=np.empty(3, f32)), TypeError,
     r"out must have dtype uint8 \(got float32\)"),
    ("out as a list", lambda: dmlq.quantize_linear(X, 0.1, out=[0, 0, 0]), TypeError,
     r"out must be a numpy.ndarray .*\(got list\)"),
    ("too many dimensions", lambda: dmlq.quantize_linear(np.zeros((1,) * 9, f32), 0.1), ValueError,
     r"the result would have 9 dimensions; at most 8 are supported"),
    # issue 28: escapes a new user found
    ("10**400 as a scale", lambda: dmlq.quantize_linear(X, 10**400), ValueError,
     r"quantize_linear: scale = 100\.\.\. \(an integer of 401 digits\) is beyond the range of float32 \(largest "
     r"magnitude 3.4028235e\+38\), the dtype dmlq computes it in; it would become inf\. Pass a value within that "
     r"range, or scale=np.inf if an infinite value is meant"),
    ("10**400 as x", lambda: dmlq.quantize_linear(10**400, 0.1), ValueError,
     r"quantize_linear: x = 100\.\.\. \(an integer of 401 digits\) is beyond the range of float32"),
    ("-10**400 as a dequantize scale", lambda: dmlq.dequantize_linear(Q, -10**400), ValueError,
     r"dequantize_linear: scale = -10\.\.\. \(an integer of 401 digits\) is beyond .* or scale=-np.inf"),
    ("Python 1e300 scale (np.array(1e300) is refused too)", lambda: dmlq.quantize_linear(X, 1e300), ValueError,
     r"quantize_linear: scale = 1e\+300 is beyond the range of float32 \(largest magnitude 3.4028235e\+38\)"),
    ("NumPy float64 scalar 1e300 scale", lambda: dmlq.quantized_matmul(np.zeros((2, 3), u8), 1.0, None,
                                                                      np.zeros((3, 4), u8), np.float64(1e300), None, 1.0),
     ValueError, r"quantized_matmul: b_scale = 1e\+300 is beyond the range of float32"),
    ("1e300 in a list of scales", lambda: dmlq.quantize_linear(X, [0.1, 1e300, 0.1]), ValueError,
     r"quantize_linear: scale holds 1e\+300, beyond the range of float32 .* Pass values within that range"),
    ("Python 1e5 scale for a float16 x", lambda: dmlq.quantize_linear(X.astype(f16), 1e5), ValueError,
     r"quantize_linear: scale = 100000.0 is beyond the range of float16 \(largest magnitude 65504\)"),
    ("10**400 as a zero point", lambda: dmlq.quantize_linear(X, 0.1, 10**400), ValueError,
     r"zero_point = 100\.\.\. \(an integer of 401 digits\) is out of range for uint8 \[0, 255\]"),
    ("start_padding=2**31", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None, 2,
                                                            start_padding=2**31), ValueError,
     r"quantized_avg_pool: start_padding values must be below 2\*\*31, the kernels' C ints \(got \(2147483648, "
     r"2147483648\)\); pass smaller ones"),
    ("paddings past 2**31 together", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None,
                                                                     2, start_padding=2**30, end_padding=(0, 2**30)),
     ValueError, r"start_padding \+ x's size \+ end_padding must stay below 2\*\*31, the kernels' C ints \(spatial "
                 r"dimension 1: 1073741824 \+ 4 \+ 1073741824 = 2147483652\); pass smaller paddings"),
    ("start_padding='same'", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None, 3,
                                                             start_padding="same"), TypeError,
     r"quantized_avg_pool: start_padding must be an int or a sequence of 2 ints \(got the string 'same'\); dmlq "
     r"takes explicit paddings: for 'same' with window k, stride 1 and dilation 1 pass start_padding=\(k - 1\) // 2 "
     r"and end_padding=k - 1 - \(k - 1\) // 2"),
    ("window_size as a string", lambda: dmlq.quantized_avg_pool(np.zeros((1, 1, 4, 4), u8), 1.0, None, 1.0, None,
                                                                "22"), TypeError,
     r"window_size must be an int or a sequence of 2 ints \(got the string '22'\)"),
    ("masked array as x", lambda: dmlq.quantize_linear(np.ma.masked_array(X, [0, 1, 0]), 0.1), TypeError,
     r"quantize_linear: x is a masked array \(numpy.ma\); dmlq computes every element and would drop the mask: "
     r"pass x.filled\(value\) to say what the masked elements hold, or x.data for the values underneath"),
    ("masked array as a scale", lambda: dmlq.dequantize_linear(Q, np.ma.masked_array(np.ones(3, f32), [0, 0, 1])),
     TypeError, r"dequantize_linear: scale is a masked array \(numpy.ma\)"),
    ("masked array as out", lambda: dmlq.quantize_linear(X, 0.1, out=np.ma.masked_array(np.zeros(3, u8))), TypeError,
     r"quantize_linear: out is a masked array \(numpy.ma\); dmlq writes every element and would leave its mask as "
     r"it was: pass out.data \(the array underneath\) or a plain numpy array"),
    # (the message said "pass a.astype(np.uint8) ... if its values fit", which converts values, not codes)
    ("float32 data of an integer operator", lambda: dmlq.quantized_add(X, 0.1, 0, Q, 0.1, 0, 0.1, 0), TypeError,
     r"quantized_add: a must have dtype int8 or uint8 \(got float32\): a holds integer codes, and a float a is not "
     r"converted to them$"),
    ("float8 a of quantized_matmul (QLinearMatMul, opset 21)",
     lambda: dmlq.quantized_matmul(_float8((2, 3)), 0.5, None,
                                   np.ones((3, 2), u8), 0.5, None, 0.25), TypeError,
     r"quantized_matmul: a must have dtype int8 or uint8 \(got float8_e4m3fn\): a holds integer codes, and a float a "
     r"is not converted to them; ONNX QLinearMatMul's float8 form \(opset 21\) is not taken: dmlq.dequantize_linear "
     r"each operand and multiply in float"),
    ("bfloat16 b of matmul_integer", lambda: dmlq.matmul_integer(np.ones((2, 3), u8), _bf16((3, 2))), TypeError,
     r"matmul_integer: b must have dtype int8, uint8, int4, uint4, int2 or uint2 \(got bfloat16\): b holds integer "
     r"codes"),
]


@pytest.mark.parametrize("what, call, exc, message", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_common_mistake_gets_a_numpy_message(what, call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call()
    text = str(info.value)
    # NumPy vocabulary: no DirectML descriptor words in a public function's message
    for word in ("Tensor", "feature level", "DataType", "FLOAT32", "UINT8", "Sizes"):
        assert word not in text, (what, text)


def _torch_mistakes():
    torch = pytest.importorskip("torch")
    t64 = torch.tensor([0.5, -1.25, 3.0], dtype=torch.float64)
    return [
        (lambda: dmlq.quantize_linear(t64, 0.1),
         r"x must have dtype float32, float16 or int32 \(got float64\); dmlq computes in float32 and does not "
         r"narrow a float64 array silently: pass x.to\(torch.float32\)"),
        (lambda: dmlq.quantize_linear(t64.float(), torch.tensor(0.1, dtype=torch.float64)),
         r"scale must have dtype float32 \(or float16 or bfloat16\) for a float32 x \(got float64\); .* pass scale.to\(torch.float32\)"),
        (lambda: dmlq.quantize_linear(torch.tensor([1, 2], dtype=torch.int16), 0.1),
         r"pass x.to\(torch.int32\) if its values fit, or x.to\(torch.float32\)"),
        (lambda: dmlq.dequantize_linear(torch.tensor([1, 2]), 0.5),
         r"q must have dtype int8, .* \(got int64\) \(torch.tensor makes int64 from Python ints\); pass "
         r"q.to\(torch.int32\) or q.to\(torch.uint8\) if its values fit"),
        (lambda: dmlq.quantize_linear(t64.float(), 0.1, torch.tensor(5)),
         r"zero_point has dtype int64, but the output is a quantized type .*; pass zero_point.to\(torch.uint8\), or "
         r"keep it"),
        (lambda: dmlq.quantized_add(Q, 0.1, 0, torch.tensor([1, 2, 3]), 0.1, 0, 0.2),
         r"b must have dtype int8 or uint8 \(got int64\) .*; pass b.to\(torch.uint8\) or b.to\(torch.int8\)"),
    ]


def test_dtype_spellings_numpy_takes_and_torch_dtypes_with_numpy_inputs():
    # a NumPy type code is a dtype's spelling too ("i1" was refused where "f2" was taken)
    assert dmlq.quantize_linear(X, 0.1, dtype="i1").dtype == np.int8
    assert dmlq.quantize_linear(X, 0.1, dtype="<u2").dtype == np.uint16
    assert dmlq.dequantize_linear(np.ones(3, u8), 0.1, dtype="f2").dtype == np.float16
    # a torch dtype beside NumPy arrays names the same type (it was "dtype must be np.int8 or np.uint8")
    torch = pytest.importorskip("torch")
    assert dmlq.quantize_linear(X, 0.1, dtype=torch.int8).dtype == np.int8
    assert dmlq.quantize_linear(X, 0.1, dtype=torch.int16).dtype == np.int16
    assert dmlq.quantize_linear(X, 0.1, dtype=torch.int4, precision=torch.float16).dtype.name == "int4"
    assert dmlq.quantized_add(Q, 0.1, 0, Q, 0.1, 0, 0.2, dtype=torch.int8).dtype == np.int8
    with pytest.raises(ValueError, match=r"quantized_matmul: shapes do not broadcast: a_batch \(2,\), b_batch "
                                         r"\(3,\); batch dimensions broadcast as in numpy.matmul"):
        dmlq.quantized_matmul(np.zeros((2, 5, 7), u8), 0.1, 0, np.zeros((3, 7, 4), np.int8), 0.1, 0, 1.0)


def test_torch_tensors_get_fixes_in_torch_words():
    # the README's row: a float64 torch tensor is told x.to(torch.float32), not .astype (tensors have none)
    for call, message in _torch_mistakes():
        with pytest.raises(TypeError, match=message) as info:
            call()
        assert ".astype(" not in str(info.value) and "np.asarray" not in str(info.value)
    # a NumPy operand beside a torch one keeps NumPy's words
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"pass scale.astype\(np.float32\)"):
        dmlq.quantize_linear(torch.tensor([1.0]), np.array([0.1]))


def test_memmap_as_out_is_written_and_returned(tmp_path):
    out = np.memmap(tmp_path / "q.bin", u8, "w+", shape=(3,))
    got = dmlq.quantize_linear(X, 0.1, out=out)
    assert got is out
    out.flush()
    assert np.array_equal(np.fromfile(tmp_path / "q.bin", u8), dmlq.quantize_linear(X, 0.1))
    # and as an input (ndarray subclasses are read as the arrays they are)
    x = np.memmap(tmp_path / "x.bin", f32, "w+", shape=(3,))
    x[...] = X
    assert np.array_equal(dmlq.quantize_linear(x, 0.1), dmlq.quantize_linear(X, 0.1))


def test_numbers_in_float32_range_and_infinities_are_still_taken():
    big = float(np.finfo(f32).max)
    assert dmlq.quantize_linear(X, big, np.int8(0)).tolist() == [0, 0, 0]
    assert dmlq.quantize_linear(X, -np.inf, np.int8(1)).tolist() == [1, 1, 1]  # x / -inf = -0 -> zp
    assert dmlq.quantize_linear(X, 2**100, np.int8(0)).tolist() == [0, 0, 0]  # an int within float32
    assert dmlq.quantize_linear(np.array([1.0], f16), 65504.0).tolist() == [0]
    assert dmlq.quantize_linear([1e38, -np.inf], 1.0).tolist() == [255, 0]


@pytest.mark.parametrize("bad", [None, "0.1", object(), [[1, 2], [3]], 1 + 2j])
@pytest.mark.parametrize("position", range(8))
def test_no_internal_exception_escapes_add(bad, position):
    args = [Q, 0.1, 0, Q, 0.1, 0, 0.2, 0]
    args[position] = bad
    if bad is None and position in (2, 5, 7):
        dmlq.quantized_add(*args)  # a zero point may be None
        return
    with pytest.raises((TypeError, ValueError)):
        dmlq.quantized_add(*args)


@pytest.mark.parametrize("bad", [None, "2", object(), 2.5, [1, "a"]])
def test_no_internal_exception_escapes_pool(bad):
    x = np.zeros((1, 1, 4, 4), u8)
    for kw in ("strides", "start_padding", "end_padding", "dilations"):
        if bad is None:
            continue
        with pytest.raises((TypeError, ValueError)):
            dmlq.quantized_avg_pool(x, 1.0, None, 1.0, None, 2, **{kw: bad})
    with pytest.raises((TypeError, ValueError)):
        dmlq.quantized_avg_pool(x, 1.0, None, 1.0, None, bad)


# ---- inputs a NumPy user passes -----------------------------------------------------------

def test_wider_integer_zero_point_with_dtype_is_accepted_when_it_fits():
    want = dmlq.quantize_linear(X, 0.1, u8(5))
    for zp in (np.array([5]), np.int32(5), np.int64(5), np.array(5, np.int16)):
        got = dmlq.quantize_linear(X, 0.1, zp, dtype=np.uint8)
        assert got.dtype == u8 and np.array_equal(got, want), zp
    with pytest.raises(ValueError, match=r"zero_point holds values outside \[0, 255\], the range of uint8"):
        dmlq.quantize_linear(X, 0.1, np.array([5, 300, 5]), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"zero_point = -3 is out of range for uint8"):
        dmlq.quantize_linear(X, 0.1, np.int64(-3), dtype=np.uint8)
    assert dmlq.quantize_linear(X, 0.1, np.int64(-3), dtype=np.int8).dtype == i8


def test_input_zero_points_of_another_integer_dtype_are_converted():
    a = np.array([[10, 20]], u8)
    want = dmlq.quantized_matmul(a, 1.0, u8(3), a.T.copy(), 1.0, u8(4), 1.0)
    got = dmlq.quantized_matmul(a, 1.0, np.int64(3), a.T.copy(), 1.0, np.array([4], np.int32), 1.0)
    assert np.array_equal(got, want)


def test_lists_tuples_and_numpy_scalars():
    assert np.array_equal(dmlq.quantize_linear([0.5, -1.25, 3.0], 0.1), dmlq.quantize_linear(X, 0.1))
    assert np.array_equal(dmlq.quantize_linear((0.5, -1.25, 3.0), [0.1]), dmlq.quantize_linear(X, f32(0.1)))
    assert dmlq.quantize_linear(2.5, 1.0)[()] == 2 and dmlq.quantize_linear(2.5, 1.0).shape == ()
    assert dmlq.quantize_linear(f32(2.5), 1.0).shape == ()
    assert dmlq.quantize_linear(np.float64(2.5).astype(f32), np.float64(1.0))[()] == 2  # float64 scalar scale ok
    assert dmlq.dequantize_linear(np.array([1, 2], u8), 0.5, [1, 1]).tolist() == [0.0, 0.5]
    # ints in a list are data without a dtype: quantize treats them as float32 like the contract's int32 path
    assert dmlq.quantize_linear([33161217], 262144.0).tolist() == [126]


def test_float64_python_data_becomes_float32_by_the_contract_cast():
    # float32(x) first, as docs/semantics.md writes the formula: 0.1 + 2**-30 rounds to float32(0.1)
    x = [0.1 + 2**-30]
    assert dmlq.quantize_linear(x, 0.1)[0] == dmlq.quantize_linear(np.array(x, f32), f32(0.1))[0]


class _CpuDLPack:
    """A CPU tensor that only speaks DLPack (what a torch CPU tensor looks like to dmlq)."""

    def __init__(self, array):
        self._a = array

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_cpu_dlpack_tensor_takes_the_numpy_path():
    got = dmlq.quantize_linear(_CpuDLPack(X), _CpuDLPack(np.array(0.1, f32)))
    assert isinstance(got, np.ndarray) and np.array_equal(got, dmlq.quantize_linear(X, f32(0.1)))


def test_torch_cpu_tensor():
    torch = pytest.importorskip("torch")
    t = torch.tensor([0.5, -1.25, 3.0], dtype=torch.float32)
    assert np.array_equal(dmlq.quantize_linear(t, 0.1), dmlq.quantize_linear(X, 0.1))
    q = torch.tensor([[1, 2, 3]], dtype=torch.uint8)
    assert dmlq.dequantize_linear(q, 0.5).tolist() == [[0.5, 1.0, 1.5]]
    with pytest.raises(TypeError, match="x must have dtype float32, float16 or int32 \\(got float64\\)"):
        dmlq.quantize_linear(t.double(), 0.1)


# ---- scales: zero, negative, NaN, infinite (IEEE arithmetic, docs/semantics.md) ---------------

def test_scale_edge_values_follow_ieee():
    x = np.array([2.0, -2.0, 0.0, np.nan], f32)
    # negative scale: x / -0.5 = -4, 4, -0, NaN -> zp
    assert dmlq.quantize_linear(x, -0.5, i8(1)).tolist() == [-3, 5, 1, 1]
    # zero scale: +-x / 0 = +-inf saturates, 0 / 0 = NaN -> zp
    assert dmlq.quantize_linear(x, 0.0, i8(1)).tolist() == [127, -128, 1, 1]
    # -0.0 flips the infinities
    assert dmlq.quantize_linear(x, -0.0, i8(1)).tolist() == [-128, 127, 1, 1]
    # NaN scale: everything NaN -> zp
    assert dmlq.quantize_linear(x, np.nan, u8(7)).tolist() == [7, 7, 7, 7]
    # infinite scale: x / inf = +-0 -> zp
    assert dmlq.quantize_linear(x, np.inf, u8(7)).tolist() == [7, 7, 7, 7]
    # dequantize: (q - zp) * scale in IEEE float32
    d = dmlq.dequantize_linear(np.array([3, 1, 0], u8), np.inf, 1)
    assert d[0] == np.inf and np.isnan(d[1]) and d[2] == -np.inf
    assert dmlq.dequantize_linear(np.array([3], u8), -0.5, 1).tolist() == [-1.0]


def test_matmul_and_pool_with_zero_and_negative_scales():
    a = np.array([[1, 2]], u8)
    b = np.array([[3], [4]], u8)  # acc = 11
    assert dmlq.quantized_matmul(a, 1.0, None, b, 1.0, None, -1.0, i8(0)).tolist() == [[-11]]
    assert dmlq.quantized_matmul(a, 1.0, None, b, 1.0, None, 0.0, i8(0)).tolist() == [[127]]  # 11 / 0 = inf
    img = np.array([[[[4, 4], [4, 4]]]], u8)
    assert dmlq.quantized_avg_pool(img, -1.0, None, 1.0, None, 2, dtype=i8).tolist() == [[[[-4]]]]
    assert dmlq.quantized_avg_pool(img, 1.0, None, np.nan, u8(9), 2).tolist() == [[[[9]]]]


# ---- the plan cache ---------------------------------------------------------------------------

@pytest.fixture
def counting(monkeypatch):
    """Counts plan builds (every full validation goes through compile_operator)."""
    calls = []
    real = checks.compile_operator

    def counted(desc, *a, **k):
        calls.append(desc)
        return real(desc, *a, **k)

    monkeypatch.setattr(checks, "compile_operator", counted)
    call_path.clear_plan_cache()
    return calls


def test_repeated_call_reuses_the_plan(counting):
    x = np.ones((4, 5), f32)
    for _ in range(5):
        dmlq.quantize_linear(x, 0.1, 3)
    assert len(counting) == 1
    for _ in range(3):
        dmlq.quantized_avg_pool(np.zeros((1, 2, 4, 4), u8), 1.0, None, 1.0, None, [2, 2], strides=[2, 2])
    assert len(counting) == 2  # lists as parameters are cached too


def test_plan_cache_is_never_stale(counting):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6)).astype(f32) * 10
    base = dmlq.quantize_linear(x, 0.5, 3)
    variants = [
        lambda: dmlq.quantize_linear(x[:3], 0.5, 3),                     # shape
        lambda: dmlq.quantize_linear(x.astype(f16), 0.5, 3),             # dtype
        lambda: dmlq.quantize_linear(x[:, ::2], 0.5, 3),                 # strides
        lambda: dmlq.quantize_linear(np.asfortranarray(x), 0.5, 3),      # layout
        lambda: dmlq.quantize_linear(x, 0.25, 3),                        # scalar value
        lambda: dmlq.quantize_linear(x, 0.5, 4),                         # zero point value
        lambda: dmlq.quantize_linear(x, 0.5, 3, dtype=np.int8),          # keyword
        lambda: dmlq.quantize_linear(x, f32(0.5), u8(3)),                # Python vs NumPy scalar
    ]
    for make in variants:
        before = len(counting)
        got = make()
        assert len(counting) == before + 1  # a new signature is planned and validated
        make()
        assert len(counting) == before + 1  # ... once
    # the results are those of a fresh, uncached call
    for make in variants:
        got = make()
        call_path.clear_plan_cache()
        assert np.array_equal(got, make())
    assert np.array_equal(dmlq.quantize_linear(x, 0.5, 3), base)


def test_plan_cache_distinguishes_signed_zero_and_checks_values_every_call():
    x = np.array([1.0, -1.0], f32)
    call_path.clear_plan_cache()
    assert dmlq.quantize_linear(x, 0.0, i8(0)).tolist() == [127, -128]
    assert dmlq.quantize_linear(x, -0.0, i8(0)).tolist() == [-128, 127]
    assert dmlq.quantize_linear(x, 0.0, i8(0)).tolist() == [127, -128]
    assert dmlq.quantize_linear(x, 1.0, 300 - 45).tolist() == [255, 254]
    with pytest.raises(ValueError, match="out of range"):
        dmlq.quantize_linear(x, 1.0, 300)  # same shapes, a value the cached plan never saw
    ok = np.array([5, 6])  # noqa: F841
    dmlq.quantize_linear(x, 1.0, ok, dtype=u8)
    with pytest.raises(ValueError, match="holds values outside"):
        dmlq.quantize_linear(x, 1.0, np.array([5, 600]), dtype=u8)  # same signature, values re-checked


def test_cached_out_checks_run_every_call():
    x = np.ones(3, f32)
    out = np.empty(3, u8)
    dmlq.quantize_linear(x, 0.5, out=out)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dmlq.quantize_linear(x, 0.5, out=out)
    buf = np.arange(3, dtype=u8)
    want = dmlq.quantized_add(buf, 1.0, 0, buf[::-1], 1.0, 0, 1.0)
    dmlq.quantized_add(buf, 1.0, 0, buf[::-1], 1.0, 0, 1.0, out=np.empty(3, u8))  # plan with a separate out
    assert np.array_equal(dmlq.quantized_add(buf, 1.0, 0, buf[::-1], 1.0, 0, 1.0, out=buf), want)  # overlap


def test_cached_host_constants_are_read_only_and_shared_safely():
    x = np.ones(2, f32)
    seen = []
    from dmlq import dispatch
    R = dispatch.backend(dispatch.HOST)  # the host backend (dmlq.cpu)
    real = R.quantize_linear

    def spy(x_, s, z, out):
        seen.append(s)
        return real(x_, s, z, out)

    R.quantize_linear, saved = spy, R.quantize_linear
    try:
        dmlq.quantize_linear(x, 0.5)
        dmlq.quantize_linear(x, 0.5)
    finally:
        R.quantize_linear = saved
    assert seen[0] is seen[1] and not seen[0].flags.writeable


def test_the_types_beyond_int8_refuse_what_the_int8_path_refuses():
    """Masked arrays (input or out) and lists of numbers beyond float32 are refused whatever
    path a call takes (the types-beyond-int8 path, chosen by dtype=, axis=, precision=, took
    them: the mask dropped, 1e300 made inf)."""
    import ml_dtypes

    m = np.ma.masked_array(np.array([1.0, 2.0, 3.0], np.float32), mask=[0, 1, 0])
    for kw in (dict(dtype=np.int8), dict(dtype=np.int16), dict(dtype=np.int8, precision="float32")):
        with pytest.raises(TypeError, match="x is a masked array"):
            dmlq.quantize_linear(m, 0.1, **kw)
    with pytest.raises(TypeError, match="q is a masked array"):
        dmlq.dequantize_linear(np.ma.masked_array(np.array([1, 2], np.int8), [1, 0]), 0.1, dtype=np.float16)
    with pytest.raises(TypeError, match="out is a masked array .* pass out.data"):
        dmlq.quantize_linear(np.ones(3, np.float32), 0.1, dtype=np.int16,
                             out=np.ma.masked_array(np.zeros(3, np.int16)))
    with pytest.raises(TypeError, match="pack: x is a masked array"):
        dmlq.pack(np.ma.masked_array(np.zeros(3, ml_dtypes.int4), [1, 0, 0]))
    x = np.linspace(-2, 2, 4, dtype=np.float32)
    with pytest.raises(ValueError, match="scale holds 1e[+]300, beyond the range of float32"):
        dmlq.quantize_linear(x, [1e300], dtype=np.int16)
    with pytest.raises(ValueError, match="x holds 1e[+]300, beyond the range of float32"):
        dmlq.quantize_linear([1e300, 1.0], 1.0, axis=0)
    with pytest.raises(ValueError, match="scale holds 1e[+]300"):
        dmlq.dequantize_linear(np.ones(2, np.int8), [1e300], dtype=np.float32)
    np.testing.assert_array_equal(dmlq.quantize_linear([1.0, 2.0], [0.5], dtype=np.int16),
                                  np.array([2, 4], np.int16), strict=True)


def test_pack_and_unpack_name_what_they_cannot_take():
    import ml_dtypes

    p = dmlq.pack(ml_dtypes.int4(-3))  # a NumPy scalar: a 0-d array (it went to CuPy)
    assert p.shape == () and p.data.tolist() == [0x0D]
    assert dmlq.pack(np.uint8(3), dtype="uint4").data.tolist() == [3]
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match=r"unpack: the packed data is a dask\.array\.core\.Array; .* \(\.compute\(\)\)"):
        dmlq.unpack(da.zeros(2, dtype=np.uint8, chunks=1), (4,), "int4")
    with pytest.raises(TypeError, match=r"unpack: the packed data must be a 1-D uint8 array \(got list"):
        dmlq.unpack(dmlq.Packed([1, 2], (4,), "int4"))
    with pytest.raises(TypeError, match=r"unpack: shape must be a tuple of ints \(got \(2\.7, 3\)\)"):
        dmlq.unpack(np.zeros(3, np.uint8), (2.7, 3), "int4")


def test_descriptor_fields_of_the_wrong_type_are_named_not_converted():
    """TensorDesc(None, ...) was FLOAT64 (numpy.dtype(None)), a float TotalTensorSizeInBytes was
    truncated and a string one raised int()'s bare ValueError; an Operator took masked arrays
    (the mask dropped) and a read-only out (NumPy's bare "assignment destination")."""
    from dmlq import TensorDesc

    with pytest.raises(TypeError, match=r"not a DirectML data type: None"):
        TensorDesc(None, (2, 3))
    for total in ("abc", [24], 25.9, True):
        with pytest.raises(TypeError, match=r"TotalTensorSizeInBytes must be an integer"):
            TensorDesc("UINT8", (2, 3), total_tensor_size_in_bytes=total)
    with pytest.raises(TypeError, match=r"TensorDesc: Sizes must hold integers \(got 2\.0\)"):
        TensorDesc("UINT8", (2.0, 3))
    assert TensorDesc("UINT8", (2, 3), total_tensor_size_in_bytes=np.int64(28)).total_tensor_size_in_bytes == 28
    op = dmlq.compile_operator(dmlq.QuantizeLinearDesc(TensorDesc("FLOAT32", (3,)), TensorDesc("FLOAT32", (3,)),
                                                       None, TensorDesc("UINT8", (3,))))
    x, s = np.ones(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"InputTensor is a masked array"):
        op(np.ma.masked_array(x, [0, 1, 0]), s)
    with pytest.raises(TypeError, match=r"OutputTensor is a masked array"):
        op(x, s, out=np.ma.masked_array(np.zeros(3, np.uint8)))
    frozen = np.zeros(3, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"OutputTensor \(out\) is read-only"):
        op(x, s, out=frozen)


@pytest.mark.parametrize("name,call", [
    ("a", lambda v: dmlq.quantized_add(v, 0.1, 0, Q, 0.1, 0, 0.2)),
    ("b", lambda v: dmlq.quantized_add(Q, 0.1, 0, tuple(v) if isinstance(v, list) else v, 0.1, 0, 0.2)),
    ("a", lambda v: dmlq.quantized_matmul([v], 0.1, 0, np.ones((3, 2), i8), 0.1, None, 1.0)),
    ("b", lambda v: dmlq.matmul_integer_to_float(np.ones((1, 3), u8), 0.1, 0, [v, v, v], 0.1, None)),
    ("a", lambda v: dmlq.matmul_integer([v], np.ones((3, 2), i8))),
    ("x", lambda v: dmlq.quantized_avg_pool([[[v, v]]], 0.1, 0, 0.1, 0, (1, 1))),
    ("q", lambda v: dmlq.dequantize_linear([v], 0.1, axis=1)),
])
@pytest.mark.parametrize("value", [[1, 2, 3], 3])
def test_a_list_or_number_of_python_ints_as_data_is_told_np_asarray(name, call, value):
    """Lists and Python numbers have no .astype: the fix for integer data given as one is
    np.asarray(v, np.uint8) (it was a.astype(np.uint8), which fails on a list)."""
    with pytest.raises(TypeError, match=rf"pass np\.asarray\({name}, np\.u?int(8|32)\)") as e:
        call(value)
    assert f"{name}.astype" not in str(e.value)


def test_compile_operator_names_a_desc_that_is_not_an_operator_desc():
    """compile_operator(TensorDesc(...)) said only "not a dmlq operator desc: TensorDesc", naming
    neither the function nor the argument."""
    for desc in (None, "QuantizeLinear", dmlq.TensorDesc("UINT8", (3,))):
        with pytest.raises(TypeError, match=r"^compile_operator: desc must be an operator desc \(QuantizeLinearDesc, "
                                            r".*DequantizeDesc\), got " + type(desc).__name__ + "$"):
            dmlq.compile_operator(desc)


def test_descriptor_operators_name_an_operand_of_an_unsupported_type():
    """A compiled operator called with a list, a dask array or a string said "unsupported array
    type list" without naming the field; an array of the other byte order, "must be FLOAT32"."""
    da = pytest.importorskip("dask.array")
    op = dmlq.compile_operator(dmlq.QuantizeLinearDesc(
        dmlq.TensorDesc("FLOAT32", (2, 3)), dmlq.TensorDesc("FLOAT32", (2, 3)), None, dmlq.TensorDesc("UINT8", (2, 3))))
    x = np.ones((2, 3), np.float32)
    for args, kw, message in (
            (([[1.0] * 3] * 2, x), {}, r"InputTensor is an unsupported array type builtins\.list .*; pass a numpy "
                                       r"array"),
            ((x, "a"), {}, r"ScaleTensor is an unsupported array type builtins\.str"),
            ((da.from_array(x), x), {}, r"InputTensor is an unsupported array type dask\.array\.core\.Array .*"
                                        r"compute it first"),
            ((x, x), {"out": [0] * 6}, r"OutputTensor is an unsupported array type builtins\.list")):
        with pytest.raises(TypeError, match=r"QuantizeLinear: " + message):
            op(*args, **kw)
    # another byte order: named as such, with the fix (it said "must be FLOAT32 (got >f4)")
    with pytest.raises(TypeError, match=r"InputTensor has the non-native byte order of dtype '>f4' \(float32\); .*"
                                        r"pass it as \.astype\('<f4'\)"):
        op(x.astype(">f4"), x)
    dop = dmlq.compile_operator(dmlq.DequantizeLinearDesc(
        dmlq.TensorDesc("UINT8", (2, 3)), dmlq.TensorDesc("FLOAT32", (2, 3)), None, dmlq.TensorDesc("FLOAT32", (2, 3))))
    with pytest.raises(TypeError, match=r"OutputTensor has the non-native byte order .* allocate it with dtype '<f4'"):
        dop(np.ones((2, 3), np.uint8), x, out=np.empty((2, 3), ">f4"))


def test_a_vector_matmul_names_an_out_that_is_not_an_array():
    """A 1-D a or b with out= a NumPy scalar (or a 0-d dask array), or a 1-D a with a 0-d out where
    K does not fit, raised IndexError ("invalid index to scalar variable", "too many indices")
    while the out was viewed for the matrices' call."""
    da = pytest.importorskip("dask.array")
    a, b = np.ones(3, np.uint8), np.ones((3, 2), np.int8)
    for call in (lambda out: dmlq.matmul_integer(a, b, out=out),
                 lambda out: dmlq.matmul_integer_to_float(a, 0.5, 0, b, 0.5, 0, out=out),
                 lambda out: dmlq.quantized_matmul(a, 0.5, 0, b, 0.5, 0, 0.5, out=out)):
        with pytest.raises(TypeError, match=r"out must be a numpy\.ndarray .* \(got int32\)"):
            call(np.int32(0))
        with pytest.raises(TypeError, match=r"out= is not taken with dask arrays"):
            call(da.zeros((), dtype=np.int32))
    with pytest.raises(ValueError, match=r"a has K = 2 columns but b has 3 rows"):  # a 0-d out beside them
        dmlq.quantized_matmul(a[:2], 0.5, 0, b, 0.5, 0, 0.5, out=np.zeros((), np.uint8))


def test_nan_payloads_lists_of_huge_ints_and_dask_lists():
    """A Python NaN's payload is part of the plan key (one NaN's plan served another: the NaN bits of
    dequantize followed the history); a list holding 10**400 is a ValueError (an object array's
    TypeError before); a list scale beside a dask x is float32, as for one array (refused, float64)."""
    import struct

    q = np.array([1, 2], np.uint8)
    other = struct.unpack("<d", struct.pack("<Q", 0x7FF82468A0000001))[0]
    call_path.clear_plan_cache()
    first = dmlq.dequantize_linear(q, other).view(np.uint32)[0]
    assert dmlq.dequantize_linear(q, float("nan")).view(np.uint32)[0] != first
    with pytest.raises(ValueError, match=r"scale holds an integer beyond the range of float64"):
        dmlq.quantize_linear(np.ones(2, np.float32), [10**400, 1])
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.ones((2, 2), np.float32), chunks=1)
    np.testing.assert_array_equal(dmlq.quantize_linear(x, [0.5, 0.25]).compute(),
                                  dmlq.quantize_linear(np.ones((2, 2), np.float32), [0.5, 0.25]), strict=True)


@pytest.mark.parametrize("call,message", [
    (lambda: dmlq.quantize_linear(np.ones(3, np.float32), 1e-46), r"scale = 1e-46 is below the smallest magnitude of "
                                                                  r"float32 \(1\.4e-45\)"),
    (lambda: dmlq.quantize_linear(np.ones(3, np.float16), 1e-8), r"scale = 1e-08 is below the smallest magnitude of "
                                                                 r"float16 \(5\.96e-08\)"),
    (lambda: dmlq.quantize_linear(np.ones(3, np.float16), [1.0, 1e-8, 1.0]), r"scale = \[\.\.\. 1e-08 \.\.\.\] is below"),
    (lambda: dmlq.quantized_add(np.ones(2, np.uint8), 1e-46, 0, np.ones(2, np.uint8), 0.1, 0, 1.0),
     r"quantized_add: a_scale = 1e-46 is below"),
])
def test_a_number_scale_that_would_become_zero_is_refused(call, message):
    """A nonzero Python number that rounds to 0 in the type dmlq computes it in would make a zero
    scale, saturating every output: refused as a number beyond the range is (0.0 is taken)."""
    with pytest.raises(ValueError, match=message):
        call()


def test_the_smallest_subnormal_and_zero_are_taken():
    x = np.array([1.0, -1.0, 0.0], np.float32)
    assert dmlq.quantize_linear(x, 1.4e-45, dtype=np.int8).tolist() == [127, -128, 0]
    assert dmlq.quantize_linear(x, 0.0, dtype=np.int8).tolist() == [127, -128, 0]
    assert dmlq.quantize_linear(x.astype(np.float16), 6e-8, dtype=np.int8).tolist() == [127, -128, 0]


def test_tiny_data_and_bias_numbers_round_to_zero_without_complaint():
    """The zero check is for scales only: an x or bias number below the smallest subnormal is an
    ordinary rounding to 0."""
    u8 = np.uint8(0)
    assert dmlq.quantize_linear([1e-50, 1.0], 0.1, u8).tolist() == [0, 10]
    a, b = np.ones((2, 3), np.uint8), np.ones((3, 2), np.uint8)
    assert dmlq.matmul_integer_to_float(a, 0.5, u8, b, 0.5, u8, [1e-50, 1.0]).tolist() == [[0.75, 1.75]] * 2


@pytest.mark.parametrize("v", [2**1024 - 1, -(2**1024 - 1), 2**1024 - 2**970, 10**400])
def test_an_int_scale_past_float64_is_a_value_error(v):
    """float() of an int within 2**970 of 2**1024 overflows although its bit length is 1024."""
    with pytest.raises(ValueError, match=r"scale = -?1\d+\.\.\. \(an integer of \d+ digits\) is beyond the range"):
        dmlq.quantize_linear(np.ones(3, np.float32), v)
