"""The integer matmul family: public functions with an integer sum and no requantization.

``matmul_integer`` (ONNX MatMulInteger: exact sums as int32) and
``matmul_integer_to_float`` (DirectML MATRIX_MULTIPLY_INTEGER_TO_FLOAT,
onnxruntime com.microsoft.MatMulIntegerToFloat: scales, zero points and an
optional bias, float32, float16 or bfloat16 out; blocked B scales along K with
``block_size=``). Shapes as ``numpy.matmul``; B may be int4/uint4
(``ml_dtypes``) or a ``dmlq.Packed`` (dmlq.packed_b). The numeric contract is docs/semantics.md; NumPy arrays run on
dmlq.cpu.intmm (exact float32-sgemm sums, bit for bit dmlq.reference); on the GPU
dmlq.gpu.intmm (the tiled dp4a / tensor-core kernels; blocked scales whose group is not a
multiple of 32, the stream kernel).
"""
from __future__ import annotations

from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from . import vectors
from .calls import Spec, public, run
from .checks import F32, MATMUL_SCALES, QUANT, batch_rows, batch_rows_form, host_int
from .desc import MatrixMultiplyIntegerDesc, MatrixMultiplyIntegerToFloatDesc, TensorDesc
from .dtypes import DataType, plain_dtype
from .errors import DescError
from .packed_b import B_NARROW, FOUR_BIT, stand_in, take, zero_point as _zero_point
from .qtypes import BFLOAT16_DTYPE as BF16
from .typing import CudaArray, DType, HostArray, Index, Operand

_B_TYPES = QUANT + B_NARROW  # (a 2-bit b arrives widened to 4 bits: dmlq.packed_b)
_FLOATS = MATMUL_SCALES  # float32, float16, bfloat16 (scales, bias and the output)
_B_FIX = "b.astype(np.int8), or an ml_dtypes int4/uint4/int2/uint2 array, or a dmlq.Packed of one"


def _a_param(b, name, v, m, a_batch):
    """Per tensor -> shape (); per row ((M, 1), leading 1s allowed) -> (M, 1); per batch and
    row (a's batch shape + (M, 1), 1s broadcast: dmlq.checks.batch_rows) -> a's ndim."""
    if v is None:
        return None
    dims = tuple(v.shape)
    if v.size == 1:
        want = ()
    elif len(dims) >= 2 and dims[-2:] == (m, 1) and all(d == 1 for d in dims[:-2]):
        want = (m, 1)
    else:
        want = batch_rows(dims, m, a_batch)
        if want is None:
            raise DescError(f"{b.f}: {name} must be a single value (per tensor), shaped (M, 1) with M = {m} "
                            f"(per row of a){batch_rows_form(m, a_batch)} (got shape {dims})")
    if dims != want:
        b.reshape(name, want)
    return v.reshape(want)


def _b_param(b, name, v, bb, n, groups, what):
    """Per tensor -> (); per column ((N,), or (1, N) with leading 1s) -> (1, N); per
    batch and column (b's batch shape, then (1, N)) as it is; with ``groups`` > 1
    (blocked along K) also (groups, N), with leading 1s or b's batch shape. ``what`` names
    the parameters in the errors of a function with ``block_size=`` ("" for one without)."""
    if v is None:
        return None
    dims = tuple(v.shape)
    rows = {1, groups}
    if v.size == 1:
        want = ()
    elif dims == (n,):
        want = (1, n)
    elif len(dims) >= 2 and dims[-1] == n and dims[-2] in rows and all(d == 1 for d in dims[:-2]):
        want = dims[-2:]
    elif len(dims) == bb.ndim and dims[-1] == n and dims[-2] in rows and dims[:-2] == tuple(bb.shape[:-2]):
        want = dims
    else:
        batch = tuple(bb.shape[:-2])
        forms = f"(N,) or (1, N) per column, {batch + (1, n)} per batch and column" if batch else \
            "(N,) or (1, N) per column"
        if groups > 1:
            forms += f", or ({groups}, N){' or ' + str(batch + (groups, n)) if batch else ''} per group of " \
                     f"block_size rows of b ({what})"
        hint = ""
        if len(dims) >= 2 and dims[-1] == n and dims[-2] > 1 and groups == 1 and what:
            hint = f"; {what} blocked along K need block_size="  # (matmul_integer has none: what is "")
        elif len(dims) > 2 and dims[-2:] == (1, n) and not batch:
            hint = "; b has no batch dimensions, so there is no per-batch form (b's batch shape + (1, N))"
        raise DescError(f"{b.f}: {name} must be a single value (per tensor), {forms}, with N = {n} "
                        f"(got shape {dims}){hint}")
    if dims != want:
        b.reshape(name, want)
    return v.reshape(want)


# ------------------------------------------------------------------ matmul_integer

def _plan_matmul_integer(b, packed):
    if packed is not None:
        stand_in(b, packed)
    a, bb, m, k, n, batch = b.matmul_operands(_B_TYPES, _B_FIX)
    azp = _a_param(b, "a_zero_point", b.zero_point("a_zero_point", a.dtype, "(a's dtype)"), m, a.shape[:-2])
    bzp = _b_param(b, "b_zero_point", _zero_point(b, "b_zero_point", bb.dtype, "(b's dtype)", packed), bb, n, 1, "")
    shape = batch + (m, n)
    b.check_out(shape, np.dtype(np.int32))
    # DirectML's operator on one {1, 1, M, K} x {1, 1, K, N} product (a 4-bit b's desc takes a's type;
    # per-batch b zero points, checked above, get their per-column form).
    bdt = a.dtype if bb.dtype in FOUR_BIT else bb.dtype
    b.validate(MatrixMultiplyIntegerDesc(
        TensorDesc(DataType.of(a.dtype), (1, 1, m, k)),
        None if azp is None else TensorDesc(DataType.of(a.dtype), (1, 1, m, 1) if azp.size > 1 else (1, 1, 1, 1)),
        TensorDesc(DataType.of(bdt), (1, 1, k, n)),
        None if bzp is None else TensorDesc(DataType.of(bdt), (1, 1, 1, n) if bzp.size > 1 else (1, 1, 1, 1)),
        TensorDesc(DataType.INT32, (1, 1, m, n))))
    return b.plan(shape, np.dtype(np.int32), () if packed is None else (packed,))


_MATMUL_INTEGER = Spec("matmul_integer", ("a", "a_zero_point", "b", "b_zero_point"), set(),
                       _plan_matmul_integer, "matmul_integer")


@overload
def matmul_integer(a: CudaArray, b: Operand, a_zero_point: Operand | None = None,
                   b_zero_point: Operand | None = None, *, out: Any = None) -> Any: ...
@overload
def matmul_integer(a: HostArray, b: HostArray, a_zero_point: HostArray | None = None,
                   b_zero_point: HostArray | None = None, *, out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def matmul_integer(a: Operand, b: Operand, a_zero_point: Operand | None = None, b_zero_point: Operand | None = None,
                   *, out: Any = None) -> Any:
    """ONNX MatMulInteger: ``(a - a_zero_point) @ (b - b_zero_point)`` as int32.

    Parameters
    ----------
    a : int8 or uint8 array, (..., M, K)
    b : int8 or uint8 array, or ml_dtypes int4/uint4/int2/uint2, or a dmlq.Packed of one, (..., K, N)
        (a 2-bit b runs as the 4-bit b of its values: on the GPU one pass widens its bytes first).
        Batch dimensions broadcast as in numpy.matmul; a 1-D a or b is a vector, as there
        (a (K,) is (1, K), b (K,) is (K, 1), and that dimension leaves the result).
    a_zero_point : a's dtype, optional
        Per tensor, per row (M, 1), or per batch and row (a's batch shape + (M, 1), batch
        dims of 1 broadcast); None means 0.
    b_zero_point : b's dtype (a Python int or a dmlq.Packed for a packed b), optional
        Per tensor, per column ((N,) or (1, N)) or per batch and column (b's batch
        shape + (1, N)); None means 0.
    out : int32 array, optional
        Where to write the result; returned.

    Returns
    -------
    ndarray
        int32, (..., M, N), NumPy or CuPy as the inputs. The sum is exact and wraps to int32 only past K = 33025 at
        extreme values.

    Raises
    ------
    TypeError
        A wrong type or dtype, named with the fix.
    ValueError
        A 0-d a or b, mismatched K, zero points of the wrong shape or out of range
        (``dmlq.DescError``).
    UnsupportedError
        GPU calls past the kernels' limits (a dimension above 2**31 - 1024, too many
        matrices for one launch grid); dmlq.kernel_plan shows the kernels a call runs.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> a = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    >>> w = np.array([[1, -1], [2, 0], [3, 1]], np.int8)
    >>> dmlq.matmul_integer(a, w, 1)               # (a - 1) @ w
    array([[ 8,  2],
           [26,  2]], dtype=int32)
    """
    a, b, view, vec = vectors.promote(a, b, out, "matmul_integer")
    b, b_zero_point, packed = take("matmul_integer", b, b_zero_point, (a, a_zero_point, out))
    return vectors.call(lambda: run(_MATMUL_INTEGER, (a, a_zero_point, b, b_zero_point), (packed,), view), vec, out)


# ------------------------------------------------------------------ matmul_integer_to_float

def _out_float_dtype(b, dtype):
    """dtype=, else out's dtype where it is float32, float16 or bfloat16, else float32."""
    dtype = b.dtype_param(dtype, _FLOATS)
    if dtype is not None:
        return dtype
    out_dt = getattr(b.out, "dtype", None)
    return np.dtype(out_dt) if out_dt in _FLOATS else F32


def _float_param(b, name):
    """A scale or the bias: float32 or float16 as given; bfloat16 widened to float32 (exact) for
    the backends, whose float steps are float32 anyway (docs/semantics.md)."""
    v = b.float_operand(name, _FLOATS, F32)
    if v.dtype == BF16:
        b.widen(name, F32)
    return v


def _block_groups(f, block_size, k):
    if block_size is None:
        return 1
    if (size := host_int(block_size)) is None:
        raise TypeError(f"{f}: block_size must be an int (got {type(block_size).__name__} {block_size!r})")
    if size < 1:
        raise DescError(f"{f}: block_size must be >= 1 (got {size})")
    return -(-k // size)


def _plan_matmul_integer_to_float(b, dtype, block_size, packed):
    f = b.f
    if packed is not None:
        stand_in(b, packed)
    a, bb, m, k, n, batch = b.matmul_operands(_B_TYPES, _B_FIX)
    odt = _out_float_dtype(b, dtype)
    groups = _block_groups(f, block_size, k)
    a_scale = _a_param(b, "a_scale", _float_param(b, "a_scale"), m, a.shape[:-2])
    azp = _a_param(b, "a_zero_point", b.zero_point("a_zero_point", a.dtype, "(a's dtype)"), m, a.shape[:-2])
    b_scale = _b_param(b, "b_scale", _float_param(b, "b_scale"), bb, n, groups, "scales")
    bzp = _b_param(b, "b_zero_point", _zero_point(b, "b_zero_point", bb.dtype, "(b's dtype)", packed), bb, n,
                   groups, "zero points")
    if k == 0 and block_size is not None:
        for name, v in (("b_scale", b_scale), ("b_zero_point", bzp)):
            if v is not None and v.ndim >= 2 and v.shape[-2] not in (0, 1):
                raise DescError(f"{f}: {name} must have 0 rows of groups for K = 0 (got {v.shape})")
    shape = batch + (m, n)
    bias = b.v["bias"]
    if bias is not None:
        bias = _float_param(b, "bias")
        try:
            fits = np.broadcast_shapes(bias.shape, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{f}: bias of shape {tuple(bias.shape)} must broadcast to the output's {shape} "
                             f"without growing it: (N,) per column, (M, N), or the whole output shape")
    b.check_out(shape, odt)

    def desc(sizes, dt):  # (DirectML has no bfloat16: the float32 desc stands for it)
        return TensorDesc(DataType.of(F32 if dt == BF16 else dt), sizes)

    # DirectML's operator on one {1, 1, M, K} x {1, 1, K, N} product: its dtype and per-row / per-column
    # rules. dmlq extensions, checked above instead: a and b of different integer types (b's desc takes
    # a's type), 4-bit b, scales and bias of another float type than the output, per-batch and blocked
    # B parameters (the desc gets their per-column form).
    qdt = a.dtype
    rows = (1, 1, m, 1)
    cols = (1, 1, 1, n)
    one = (1, 1, 1, 1)
    b.validate(MatrixMultiplyIntegerToFloatDesc(
        desc((1, 1, m, k), qdt), desc(rows if a_scale.size > 1 else one, odt),
        None if azp is None else desc(rows if azp.size > 1 else one, qdt),
        desc((1, 1, k, n), qdt), desc(cols if b_scale.size > 1 else one, odt),
        None if bzp is None else desc(cols if bzp.size > 1 else one, qdt),
        None if bias is None else desc((1, 1, m, n), odt), desc((1, 1, m, n), odt)))
    b.widen_pair(("a_scale", "a_zero_point"), (a_scale, azp))
    b.widen_pair(("b_scale", "b_zero_point"), (b_scale, bzp))
    return b.plan(shape, odt, (None if block_size is None else int(block_size),) + (() if packed is None else (packed,)))


_MATMUL_INTEGER_TO_FLOAT = Spec(
    "matmul_integer_to_float", ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "bias"),
    {"a_scale", "b_scale", "bias"}, _plan_matmul_integer_to_float, "matmul_integer_to_float")


@overload
def matmul_integer_to_float(a: CudaArray, a_scale: Operand, a_zero_point: Operand | None, b: Operand,
                            b_scale: Operand, b_zero_point: Operand | None, bias: Operand | None = None, *,
                            dtype: DType | None = None, block_size: Index | None = None,
                            out: Any = None) -> Any: ...
@overload
def matmul_integer_to_float(a: HostArray, a_scale: HostArray, a_zero_point: HostArray | None, b: HostArray,
                            b_scale: HostArray, b_zero_point: HostArray | None, bias: HostArray | None = None, *,
                            dtype: DType | None = None, block_size: Index | None = None,
                            out: NDArray[Any] | None = None) -> NDArray[Any]: ...


@public
def matmul_integer_to_float(a: Operand, a_scale: Operand, a_zero_point: Operand | None, b: Operand,
                            b_scale: Operand, b_zero_point: Operand | None, bias: Operand | None = None, *,
                            dtype: DType | None = None, block_size: Index | None = None,
                            out: Any = None) -> Any:
    """DirectML MATRIX_MULTIPLY_INTEGER_TO_FLOAT (onnxruntime com.microsoft.MatMulIntegerToFloat).

    ``float32(acc) * (a_scale * b_scale) + bias`` with ``acc`` the exact sum of
    ``(a - a_zero_point) * (b - b_zero_point)``, in float32, rounded once to a
    float16 or bfloat16 output (docs/semantics.md gives the order).

    Parameters
    ----------
    a : int8 or uint8 array, (..., M, K)
    a_scale, a_zero_point : per tensor, per row (M, 1), or per batch and row
        Per batch and row: a's batch shape + (M, 1) (batch dims of 1 broadcast; a per-row
        dynamic_quantize_linear of a batched a gives it). Scale float32, float16 or bfloat16; zero
        point in a's dtype or None (0).
    b : int8 or uint8 array, or ml_dtypes int4/uint4/int2/uint2, or a dmlq.Packed of one, (..., K, N)
        (a 2-bit b runs as the 4-bit b of its values: on the GPU one pass widens its bytes first).
        A 1-D a or b is a vector, as in numpy.matmul (the added dimension leaves the result).
    b_scale, b_zero_point : per tensor, per column ((N,) or (1, N)) or per batch and column
        With ``block_size=G``: one row per G rows of b, ``(ceil(K / G), N)``; the groups'
        float products are added in ascending order.
    bias : float32, float16 or bfloat16, optional
        Broadcasting to the output ((N,), (M, N) or the whole shape).
    dtype : np.float32 (default), np.float16 or ml_dtypes.bfloat16 (torch.bfloat16 for tensors)
        The output type; without it ``out``'s dtype, else float32. On the GPU a bfloat16
        output is written by the weight-streaming kernels' finish pass (M <= 16 where selection
        takes them), elsewhere the float32 kernels' result rounded by CuPy's cast (a temporary).
    block_size : int, optional
        The K group size of blocked b scales (and zero points).
    out : array, optional
        Where to write the result; returned.

    Returns
    -------
    ndarray
        float32, float16 or bfloat16, (..., M, N), NumPy or CuPy as the inputs.

    Raises
    ------
    TypeError
        A wrong type or dtype, named with the fix.
    ValueError
        Wrong shapes of operands, scales, zero points or bias; a block_size below 1
        (``dmlq.DescError``).
    UnsupportedError
        GPU calls past the kernels' limits (a dimension above 2**31 - 1024, too many
        matrices for one launch grid); dmlq.kernel_plan shows the kernels a call runs.

    Examples
    --------
    >>> import numpy as np, dmlq
    >>> a = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    >>> w = np.array([[1, -1], [2, 0], [3, 1]], np.int8)
    >>> dmlq.matmul_integer_to_float(a, 0.5, None, w, 0.25, None, np.array([0.5, -0.5], np.float32))
    array([[ 2.25, -0.25],
           [ 4.5 , -0.25]], dtype=float32)
    """
    a, b, view, vec = vectors.promote(a, b, out, "matmul_integer_to_float")
    b, b_zero_point, packed = take("matmul_integer_to_float", b, b_zero_point,
                                   (a, a_scale, a_zero_point, b_scale, bias, out))
    bias = vectors.bias_of("matmul_integer_to_float", bias, a, b, vec)
    return vectors.call(lambda: run(_MATMUL_INTEGER_TO_FLOAT, (a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                                               bias), (plain_dtype(dtype), block_size, packed), view),
                        vec, out)
