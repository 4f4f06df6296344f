"""Which adapter takes a call with torch tensors or dask arrays.

A dask array anywhere among the operands or ``out`` makes it a dask call
(dmlq.dask: NumPy or CuPy chunks; a torch tensor beside one is refused there);
otherwise it is a torch call (dmlq.torch). Importing dmlq installs
:func:`call` as ``dispatch.foreign_call``; neither torch nor dask is imported
until such a call comes.
"""
from __future__ import annotations

import sys

import numpy as np

from . import dispatch
from .adapters import PARAMS
from .packing import Packed, pack_codes


def _is_dask(obj) -> bool:
    """A dask array, or a dmlq.Packed whose bytes are one (a lazy Packed)."""
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(getattr(obj, "data", obj) if isinstance(obj, Packed) else obj, mod.Array)


def call(fname, names, values, params, out):
    """The public function ``fname`` on operands ``values`` (as given, named
    ``names``), keyword ``params`` (in dmlq.adapters.PARAMS order) and ``out``."""
    if fname not in PARAMS:
        raise TypeError(f"{fname} does not take torch tensors or dask arrays yet; pass NumPy or CuPy arrays "
                        "(t.numpy(), cupy.asarray(t), x.compute())")
    kwargs = dict(zip(PARAMS[fname], params))
    if len(params) > len(PARAMS[fname]) and params[-1] is not None:  # the matmul family's packed b
        values = _unpacked_b(fname, names, values, params[-1])
    if sys.modules.get("dask.array") is not None and (any(_is_dask(v) for v in values) or _is_dask(out)):
        values = _unpacked_parameters(fname, names, values)
        from .calls import EXPLAINING

        if EXPLAINING.get() is True:  # dmlq.kernel_plan: a lazy array's work is planned per chunk
            raise TypeError(f"kernel_plan: {fname} on dask arrays runs per chunk, each chunk its own plan; "
                            "pass NumPy or CuPy arrays shaped like one chunk (for example "
                            "np.empty(x.chunksize, x.dtype)) for that chunk's plan")
        from . import dask as adapter
    else:
        from . import torch as adapter
    return adapter.call(fname, tuple(values), kwargs, out, names=tuple(names))


def _unpacked_b(fname, names, values, packed):
    """The operands with a packed b that the public function took apart (its bytes among
    ``values``, its (dtype, shape, ...) in ``packed``: beside dask arrays; beside torch tensors it
    is not taken apart, dmlq.packed_b.take) made that Packed (or TransposedPacked: the (..., N,
    row) bytes read K-major) again: dmlq.dask checks its bytes against the chunks' type (NumPy
    chunks unpack it, CuPy chunks hand it whole to each task). A zero point unpacked on the
    device is packed again for those calls."""
    from .gpu.packed import kmajor, stored_shape
    from .packing import TransposedPacked

    i = list(names).index("b")
    values = list(values)
    p = Packed(values[i], stored_shape(packed), packed[0])
    values[i] = TransposedPacked(p, packed[1][-2]) if kmajor(packed) else p
    j = list(names).index("b_zero_point")
    if packed[2] and values[j] is not None:
        values[j] = pack_codes(values[j].astype(np.uint8), packed[0])
    return tuple(values)


def _unpacked_parameters(fname, names, values):
    """A dask call's dmlq.Packed zero points of NumPy bytes as the ml_dtypes arrays they stand for
    (unpacked on the host: the dask adapter reads parameters as arrays); CuPy bytes are refused
    by name (the dask adapter has no packed GPU parameters yet)."""
    from .packing import TransposedPacked, unpack

    out = list(values)
    for i, (name, v) in enumerate(zip(names, values)):
        if not isinstance(v, Packed) or "zero_point" not in name or _is_dask(v):
            continue
        if name == "b_zero_point" and isinstance(values[names.index("b")], (Packed, TransposedPacked)):
            continue  # beside a packed b of GPU bytes (see _unpacked_b): taken as it is
        if not isinstance(v.data, np.ndarray):
            raise TypeError(f"{fname}: {name} is a dmlq.Packed of GPU bytes beside dask arrays, which dmlq does "
                            f"not take yet; pass a Python int (one zero point for the tensor) or call dmlq per "
                            "block (x.to_delayed())")
        out[i] = unpack(v)
    return tuple(out)


dispatch.foreign_call = call
