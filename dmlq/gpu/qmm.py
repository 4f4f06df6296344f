"""quantized_matmul on the GPU: the plan, the runner and the memoized backend
call. The tiled kernels' planning and binding live in dmlq.gpu.matmul; small M
(a packed 4-bit or an 8-bit b) goes to the weight-streaming kernel of
dmlq.gpu.qmm_stream where selection says so. This module sits above both, so
neither imports it."""
from __future__ import annotations

import numpy as np

from ..keys import key
from . import device, packed, qmm_stream
from .device import NULL
from .matmul import (STREAM_M, _check_options, _direct_out, _quant_args, _row_prep, _vector_prep, bind_tiled,
                     offset, per_batch_table, plan_tiled)
from .plan import Memo, Plan, Runner, device_key


def plan_quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                          out_scale, out_zero_point, out, b_packed=None, *, variant=None, splits=None) -> Plan:
    """The plan of :func:`quantized_matmul` (nothing launched)."""
    if variant is None and out.size:
        stream = qmm_stream.plan(a, packed.view(b, b_packed), out, a_zp=a_zero_point is not None)
        if stream is not None:
            return stream
    return plan_tiled("quantized_matmul", a, a_zero_point is not None, packed.view(b, b_packed),
                      b_zero_point is not None, out, variant=variant, splits=splits)


def bind_quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                          out_scale, out_zero_point, out, b_packed=None, *, variant=None, splits=None) -> Runner:
    """The runner of these arguments' plan (their geometry, on the device in
    use): ``runner(a, ..., out_zero_point, out)`` stages, allocates temporaries,
    builds the argument lists and launches."""
    plan = plan_quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale,
                                 out_zero_point, out, b_packed, variant=variant, splits=splits)
    if not plan.launches:
        return Runner(plan, lambda *args: None)
    bv = packed.view(b, b_packed)
    stream = plan.variant in STREAM_M
    launch = None if stream else bind_tiled(plan, a, bv, out)
    b_zp_dtype = bv.zp_dtype if b_packed is not None else b.dtype
    xp = device.xp()
    i32, i64 = np.int32, np.int64
    M, K = a.shape[-2:]
    N = bv.shape[-1]
    if K == 0:  # as planned: the sums are all zero, so a's and b's zero points drop out
        a_zero_point = b_zero_point = None
    batch_shape = tuple(out.shape[:-2])
    # B parameters per batch and column ((..., 1, N), as ONNX QLinearMatMul allows):
    # one (matrices, N) table for both, matrix z's row bp_bs = N elements after z - 1's.
    per_batch = any(v is not None and v.ndim > 2 for v in (b_scale, b_zero_point))
    # a's and the output's per batch and row (flag 2): (matrices, M) tables, matrix z's rows z * M on.
    a_per_row, prep_a = _row_prep(xp, M, batch_shape, a_scale, a_zero_point, a.dtype)
    if per_batch:
        b_per_col, bp_bs = 1, N

        def prep_b(s, z):
            return (per_batch_table(s, batch_shape, N, np.float32),
                    None if z is None else per_batch_table(z, batch_shape, N, b_zp_dtype))
    else:
        (b_per_col, prep_b), bp_bs = _vector_prep(xp, N, b_scale, b_zero_point, b_zp_dtype), 0
    o_per_row, prep_o = _row_prep(xp, M, batch_shape, out_scale, out_zero_point, out.dtype)
    a_bs, o_bs = (M if flag == 2 else 0 for flag in (a_per_row, o_per_row))
    flags = (i32(a_per_row), i32(b_per_col), i32(o_per_row))
    scales_and_zero_points = _quant_args((prep_a, prep_b, prep_o), tuple(
        z is not None for z in (a_zero_point, b_zero_point, out_zero_point)))
    if stream:
        return qmm_stream.bind(plan, a, bv, out, flags, scales_and_zero_points, bp_bs)
    tail = (NULL, i64(0), i64(0), i64(bp_bs), i32(0))
    d = plan.detail

    def call(a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point, out):
        dst = out if d.direct_out else xp.empty(out.shape, out.dtype)
        a_s, b_s, o_s, a_z, b_z, o_z = scales_and_zero_points(a_scale, a_zero_point, b_scale, b_zero_point,
                                                               out_scale, out_zero_point)
        if bp_bs or a_bs or o_bs:
            def params(i, first):
                return ((offset(a_s, first * a_bs), offset(b_s, first * bp_bs), offset(o_s, first * o_bs),
                         offset(a_z, first * a_bs), offset(b_z, first * bp_bs), offset(o_z, first * o_bs), *flags),
                        tail)
        else:
            head = (a_s, b_s, o_s, a_z, b_z, o_z, *flags)

            def params(i, first):
                return head, tail
        launch(a, b, dst, params)
        if dst is not out:
            out[...] = dst

    return Runner(plan, call)


_memo = Memo()


def _geometry(x):
    return None if x is None else (key(x), device.ptr(x) % 16)


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                     out_scale, out_zero_point, out, b_packed=None, *, variant=None, splits=None):
    """Backend interface (see dmlq.reference.quantized_matmul); returns out."""
    _check_options(variant, splits)  # before the memo key asks the device anything
    a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point = map(
        device.on_device, (a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point))
    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point)
    memo_key = (*device_key(), variant, splits, b_packed, _geometry(a), _geometry(b), key(out), _direct_out(out, a, b),
                *map(key, (a_scale, a_zero_point, b_scale, b_zero_point, out_scale, out_zero_point)))
    runner = _memo.get(memo_key, lambda: bind_quantized_matmul(*args, out, b_packed, variant=variant, splits=splits))
    runner(*args, out)
    return out
