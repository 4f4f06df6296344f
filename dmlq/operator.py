"""compile_operator: a validated descriptor bound to arrays, DirectML style.

The operator-binding layer: below the public functions of :mod:`dmlq.api`
(which build their descriptors through :func:`compile_operator`), above
:mod:`dmlq.validation` (the DirectML rules) and :mod:`dmlq.dispatch` (the
backends). It imports neither ``dmlq.api`` nor anything above it;
:mod:`dmlq.quantize63`, beside it, runs the DML 6.3 Quantize / Dequantize on GPU arrays.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from . import dispatch as _dispatch
from . import quantize63 as _q63
from .desc import (DequantizeDesc, DequantizeLinearDesc, MatrixMultiplyIntegerDesc, MatrixMultiplyIntegerToFloatDesc,
                   OPERATOR_DESCS, OperatorDesc,
                   QuantizeDesc, QuantizedLinearAddDesc, QuantizedLinearAveragePoolingDesc,
                   QuantizedLinearMatrixMultiplyDesc, QuantizeLinearDesc, TensorDesc, block_sizes, dml_name)
from .gpu.capture import guarded
from .packing import Packed
from .validation import shared_elements, validate


def _typed(v):
    """A descriptor as a cache key that tells types apart: 2.0, 2 and True are equal (and hash
    alike) as Python values, but the rules refuse a float where a UINT goes and an int where a
    bool does, so a key by value alone handed a refused descriptor an equal valid one's verdict."""
    if isinstance(v, (tuple, list)):
        return type(v), tuple(_typed(x) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return type(v), tuple(_typed(getattr(v, f.name)) for f in dataclasses.fields(v))
    return type(v), v


_VALIDATED: dict = {}
_VALIDATED_SIZE = 1024


def _validate_cached(desc, feature_level):
    """validate(), remembered per descriptor (keyed by :func:`_typed`) and feature level."""
    key = (_typed(desc), _typed(feature_level))  # (6 == 6.0, but only the str "6.0" is a level)
    try:
        if key in _VALIDATED:
            return
    except TypeError:  # an unhashable field: validated every time (the rules name it)
        validate(desc, feature_level)
        return
    validate(desc, feature_level)
    if len(_VALIDATED) >= _VALIDATED_SIZE:
        _VALIDATED.clear()
    _VALIDATED[key] = True


def compile_operator(desc: OperatorDesc, feature_level: str = "6.2") -> Operator:
    """Validate an operator descriptor against DirectML's rules and make it callable.

    Parameters
    ----------
    desc : QuantizeLinearDesc, DequantizeLinearDesc, QuantizedLinearAddDesc,
           QuantizedLinearMatrixMultiplyDesc, QuantizedLinearAveragePoolingDesc,
           MatrixMultiplyIntegerDesc, MatrixMultiplyIntegerToFloatDesc, QuantizeDesc or DequantizeDesc
        The DML struct, field for field; each tensor a :class:`dmlq.TensorDesc`.
    feature_level : str
        The DirectML feature level whose rules apply, "1.0" to "6.4" (default "6.2"):
        every row of its "Tensor support" tables and every "Tensor constraints" bullet,
        plus the matmul and pooling shape rules. An operator asked for below the level
        that introduced it is refused.

    Returns
    -------
    Operator
        Call it with the input arrays in DML field order (``op(x, scale, zero_point)``):
        NumPy arrays or GPU arrays (every operator, the 6.3 Quantize/Dequantize included;
        on the GPU an INT4/UINT4 tensor is a :class:`dmlq.Packed` of CuPy bytes, see
        :class:`Operator`).

    Raises
    ------
    DescError
        A broken rule (a ValueError), naming the operator, the field and the rule;
        raised here, before anything runs.
    TypeError
        ``desc`` that is not an operator desc, or a field of the wrong type.

    Examples
    --------
    >>> from dmlq import TensorDesc, DequantizeLinearDesc, compile_operator
    >>> op = compile_operator(DequantizeLinearDesc(
    ...     TensorDesc("UINT8", (4,)), TensorDesc("FLOAT32", (4,)), None, TensorDesc("FLOAT32", (4,))))
    >>> import numpy as np
    >>> op(np.array([0, 1, 2, 3], np.uint8), np.full(4, 0.5, np.float32))
    array([0. , 0.5, 1. , 1.5], dtype=float32)
    """
    if not isinstance(desc, OPERATOR_DESCS):
        raise TypeError(f"compile_operator: desc must be an operator desc "
                        f"({', '.join(d.__name__ for d in OPERATOR_DESCS)}), got {type(desc).__name__}")
    _validate_cached(desc, feature_level)
    return Operator(desc, feature_level)


def _bind(array, tensor: TensorDesc, xp, op: str, name: str):
    """The operand as the desc describes it.

    Without Strides in the desc the array's shape must equal Sizes (any memory
    layout; a 1-D array of exactly the element count is reshaped). With Strides
    the array is a buffer: 1-D and contiguous, at least the addressed element
    count long, read through the desc's strides (in elements; 0 broadcasts).
    """
    if array.dtype != tensor.data_type.numpy:
        dt = array.dtype
        if not dt.isnative and dt.newbyteorder("=") == tensor.data_type.numpy:  # '>f4': named, with the fix
            native = dt.newbyteorder("=").str
            fix = f"allocate it with dtype {native!r}" if name == "OutputTensor" else f"pass it as .astype({native!r})"
            raise TypeError(f"{op}: {name} has the non-native byte order of dtype {dt.str!r} ({dt.name}); dmlq "
                            f"reads arrays in the machine's byte order: {fix}")
        raise TypeError(f"{op}: {name} must be {tensor.data_type.name} (got {array.dtype})")
    if tensor.strides is None:
        if name == "OutputTensor" and shared_elements(array.shape, array.strides, array.itemsize) is not None:
            raise ValueError(f"{op}: OutputTensor (out) has elements that share memory (shape {tuple(array.shape)}, "
                             f"strides {tuple(array.strides)}: a stride-0 axis or overlapping strides), so a result "
                             "element would overwrite another in no fixed order; pass an array of its own memory")
        if tuple(array.shape) == tensor.sizes:
            return array
        if array.ndim == 1 and array.size == tensor.element_count:
            return array.reshape(tensor.sizes)
        raise ValueError(f"{op}: {name} has shape {tuple(array.shape)}, the desc's Sizes are {tensor.sizes}")
    if array.ndim != 1 or not array.flags.c_contiguous:
        raise ValueError(f"{op}: {name} must be a contiguous 1-D buffer because its desc has Strides")
    if array.size < tensor.minimum_element_count:
        raise ValueError(f"{op}: {name} holds {array.size} elements; Sizes {tensor.sizes} with "
                         f"Strides {tensor.strides} address {tensor.minimum_element_count}")
    item = array.dtype.itemsize
    return xp.lib.stride_tricks.as_strided(array, tensor.sizes, tuple(s * item for s in tensor.strides))


class Operator:
    """A compiled operator: call it with the input arrays in DML field order.

    ``op(*inputs, out=None)`` takes one array per input tensor field that the
    desc sets (omitted optional tensors are skipped), NumPy arrays run on the
    reference and GPU arrays on the CUDA kernels, and returns the output.

    The DML 6.3 Quantize / Dequantize run on the GPU through :mod:`dmlq.quantize63`
    (the kernels of ``quantize_linear`` / ``dequantize_linear`` beyond int8, bit for
    bit the NumPy result): per-tensor and per-axis quantization tensors and one blocked
    dimension are read in place (as ``block_size=`` on that axis), several blocked
    dimensions are repeated on the device but the innermost. An INT4/UINT4 tensor is
    an ml_dtypes array (one element a byte) on NumPy and a :class:`dmlq.Packed` of
    CuPy bytes on the GPU, whose ``shape`` is the desc's Sizes (a 1-D buffer where the
    desc has Strides); an INT4/UINT4 Quantize returns one there, and refuses an
    OutputTensor with Strides (dmlq.UnsupportedError). A Packed anywhere else is a
    TypeError naming the field.
    """

    def __init__(self, desc: OperatorDesc, feature_level: str) -> None:
        self.desc = desc
        self.feature_level = feature_level
        inputs = [(n, t) for n, t in desc.tensor_fields() if t is not None and n != "output_tensor"]
        if isinstance(desc, (QuantizeDesc, DequantizeDesc)):  # InputTensor, then QuantizationTensors[i]
            inputs += [(f"quantization_tensors[{i}]", t) for i, t in enumerate(desc.quantization_tensors)]
        self._inputs = dict(inputs)
        self.input_fields = tuple(n for n, _ in inputs)
        # per bound geometry (shapes, strides, dtypes), what a repeated GPU call runs
        # (dmlq.gpu.ops.run): planned, its kernels found and its tables uploaded once, not per call
        # (an upload per call also made a call impossible to capture in a CUDA graph)
        self._runners: dict = {}

    def __repr__(self) -> str:
        return f"<dmlq.Operator {self.desc.OPERATOR} inputs={[dml_name(n) for n in self.input_fields]}>"

    @guarded  # (its allocations while a CUDA graph captures it: dmlq.gpu.capture)
    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """Run the operator on NumPy arrays (the reference) or GPU arrays (the kernels).

        ``inputs``: one array per input tensor the desc sets, in DML field order, each of
        its TensorDesc's dtype and sizes (or, for a TensorDesc with strides, a contiguous
        1-D buffer read through them); on the GPU an INT4/UINT4 tensor of a 6.3
        Quantize/Dequantize is a dmlq.Packed of CuPy bytes of those sizes (or a 1-D buffer).
        ``out``: an array (such a Packed) to write to, else a new one is made. Returns the
        output: ``out`` itself where its shape is the desc's sizes (or it is a Packed), else the
        view of it the desc describes (a 1-D out of the element count in the desc's sizes, a
        buffer read through its strides). Raises TypeError for a wrong count, dtype or form,
        ValueError for a wrong shape or an out whose elements share memory,
        dmlq.UnsupportedError for a strided INT4/UINT4 output on the GPU."""
        op = self.desc.OPERATOR
        if len(inputs) != len(self.input_fields):
            raise TypeError(f"{op}: expected {len(self.input_fields)} inputs "
                            f"({', '.join(dml_name(n) for n in self.input_fields)}), got {len(inputs)}")
        named = (*zip(map(dml_name, self.input_fields), inputs), ("OutputTensor", out))
        tensors = (*self._inputs.values(), self.desc.output_tensor)
        packed = False
        for (name, arr), tensor in zip(named, tensors):
            if isinstance(arr, Packed):  # (kind_of would call it an unsupported array type)
                _q63.check_packed(self.desc, op, name, arr, tensor)
                packed = True
        kind = _dispatch.kind_of(tuple(a.data if isinstance(a, Packed) else a for a in (*inputs, out)) if packed
                                 else (*inputs, out), op, [name for name, _ in named])
        q63 = kind == _dispatch.GPU and _q63.is_63(self.desc)
        if q63:
            for (name, arr), tensor in zip(named, tensors):
                _q63.check_plain(op, name, arr, tensor)
        xp = _dispatch.module(kind)
        for name, arr in (*zip(map(dml_name, self.input_fields), inputs), ("OutputTensor", out)):
            if isinstance(arr, np.ma.MaskedArray):  # its mask would be dropped (inputs) or left stale (out)
                raise TypeError(f"{op}: {name} is a masked array (numpy.ma), whose mask dmlq would "
                                f"{'leave as it was' if name == 'OutputTensor' else 'drop'}; pass its .data, or "
                                ".filled(value) for an input")
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError(f"{op}: OutputTensor (out) is read-only; pass a writeable array")
        views = {}
        for name, arr in zip(self.input_fields, inputs):
            if isinstance(arr, Packed):  # an INT4/UINT4 tensor on the GPU (dmlq.quantize63)
                views[name] = _q63.bind_packed(arr, self._inputs[name], op, dml_name(name))
                continue
            arr = xp.asarray(arr) if kind == _dispatch.HOST else _dispatch.to_gpu_array(arr, op, dml_name(name))
            views[name] = _bind(arr, self._inputs[name], xp, op, dml_name(name))
        out_desc = self.desc.output_tensor
        if isinstance(out, Packed):
            result = _q63.bind_packed(out, out_desc, op, "OutputTensor")
        elif out is not None:
            if kind == _dispatch.GPU:
                out = _dispatch.to_gpu_array(out, op, "OutputTensor")
            result = _bind(out, out_desc, xp, op, "OutputTensor")
        elif q63 and out_desc.data_type in _q63.FOUR_BIT:  # a new Packed of CuPy bytes
            result = _q63.new_output(out_desc, op)
        else:
            buffer = xp.empty(max(out_desc.minimum_element_count, 1) if out_desc.strides else out_desc.sizes,
                              out_desc.data_type.numpy)
            result = _bind(buffer, out_desc, xp, op, "OutputTensor")
        runners = None
        if kind == _dispatch.GPU:
            _dispatch.refuse_unaligned(op, [dml_name(n) for n in views] + ["OutputTensor"],
                                       [a.data if isinstance(a, Packed) else a for a in (*views.values(), result)])
            geometry = tuple(map(_q63.geometry, views.values()))
            runners = self._runners.get(geometry)
            if runners is None:
                if len(self._runners) >= 64:
                    self._runners.clear()
                runners = self._runners[geometry] = {}
        run(self.desc, views, result, kind, runners)
        return out if isinstance(out, Packed) else result  # (a Packed out: the caller's own object)


def run(desc, v: dict, out, kind, runners=None):
    """Call the backend with the bound operands (the shapes the descs describe); ``runners``:
    the dict a GPU call's runners are kept in for this geometry (dmlq.dispatch.write)."""
    def _write(fn, args, out, kind, params=()):
        return _dispatch.write(fn, args, out, kind, params, runners)

    be = _dispatch.backend(kind)
    g = v.get

    def flat(name):
        return None if g(name) is None else g(name).reshape(-1)

    args: tuple
    if isinstance(desc, QuantizeLinearDesc):
        args = (g("input_tensor"), g("scale_tensor"), g("zero_point_tensor"))
        return _write(be.quantize_linear, args, out, kind)
    if isinstance(desc, DequantizeLinearDesc):
        args = (g("input_tensor"), g("scale_tensor"), g("zero_point_tensor"))
        return _write(be.dequantize_linear, args, out, kind)
    if isinstance(desc, QuantizedLinearAddDesc):
        args = tuple(g(n) for n in ("a_tensor", "a_scale_tensor", "a_zero_point_tensor", "b_tensor",
                                    "b_scale_tensor", "b_zero_point_tensor", "output_scale_tensor",
                                    "output_zero_point_tensor"))
        return _write(be.quantized_add, args, out, kind)
    if isinstance(desc, QuantizedLinearMatrixMultiplyDesc):
        args = (g("a_tensor"), flat("a_scale_tensor"), flat("a_zero_point_tensor"), g("b_tensor"),
                flat("b_scale_tensor"), flat("b_zero_point_tensor"), flat("output_scale_tensor"),
                flat("output_zero_point_tensor"))
        return _write(be.quantized_matmul, args, out, kind)
    if isinstance(desc, QuantizedLinearAveragePoolingDesc):
        args = (g("input_tensor"), flat("input_scale_tensor"), flat("input_zero_point_tensor"),
                flat("output_scale_tensor"), flat("output_zero_point_tensor"))
        params = (desc.window_size, desc.strides, desc.start_padding, desc.end_padding,
                  desc.dilations, bool(desc.include_padding))
        return _write(be.quantized_avg_pool, args, out, kind, params)
    if isinstance(desc, (MatrixMultiplyIntegerToFloatDesc, MatrixMultiplyIntegerDesc)):
        def param(name, per_row):  # the reference's shapes: () per tensor, (M, 1) or (1, N)
            p = g(name)
            if p is None or p.size == 1:
                return None if p is None else p.reshape(())
            return p.reshape(-1, 1) if per_row else p.reshape(1, -1)

        if isinstance(desc, MatrixMultiplyIntegerDesc):
            args = (g("a_tensor"), param("a_zero_point_tensor", True), g("b_tensor"),
                    param("b_zero_point_tensor", False))
            return _write(be.matmul_integer, args, out, kind)
        args = (g("a_tensor"), param("a_scale_tensor", True), param("a_zero_point_tensor", True),
                g("b_tensor"), param("b_scale_tensor", False), param("b_zero_point_tensor", False),
                g("bias_tensor"))
        return _write(be.matmul_integer_to_float, args, out, kind)
    if isinstance(desc, (QuantizeDesc, DequantizeDesc)):
        if kind == _dispatch.GPU:  # the kernels' blocked layout, planned once per geometry (dmlq.quantize63)
            return _q63.run(desc, v, out, runners if runners is not None else {}, _dispatch.write)
        x: Any = g("input_tensor")
        qparams: list = [g(f"quantization_tensors[{i}]") for i in range(len(desc.quantization_tensors))]
        # each blocked dimension (n entries for D elements) repeated to D: entry i // (D / n)
        for axis, block in enumerate(block_sizes(desc.quantization_tensors[0].sizes, x.shape)):
            if 1 < block < x.shape[axis]:
                qparams = [be.expand_blocks(p, x.shape, axis, block) for p in qparams]
        scale, zp = qparams[0], (qparams[1] if len(qparams) > 1 else None)
        fn = be.quantize_linear if isinstance(desc, QuantizeDesc) else be.dequantize_linear
        return _write(fn, (x, scale, zp), out, kind)
    raise TypeError(f"not a dmlq operator desc: {type(desc).__name__}")
