"""torch.library.opcheck of the torch.ops.dmlq overloads at their edges: zero-size tensors,
non-contiguous and channels_last inputs, per-axis and blocked parameters, float8 outputs and
inputs, 4-bit outputs (tests/test_torch.py checks one seeded case per overload).

opcheck runs the real implementation beside the fake one (shape, dtype and strides compared),
under autograd, make_fx and AOTAutograd with static and dynamic shapes. Where torch itself has
no kernel for a dtype the subset it can run is named: it copies no Int4 tensor (so a 4-bit input
is not opcheck's at all, and a 4-bit output not its AOT tests: their comparison reads each
value), and multiplies no float8 tensor (test_schema's mutation check of a float8 input).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dmlq  # noqa: E402,F401
import dmlq.torch  # noqa: E402,F401

ops = torch.ops.dmlq
u8, i8 = torch.uint8, torch.int8
ALL = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
       "test_aot_dispatch_dynamic")


def _q(*shape, dtype=u8, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo, hi = (0, 256) if dtype == u8 else (-128, 128)
    return torch.randint(lo, hi, shape, dtype=dtype, generator=g)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _cl(t):
    return t.to(memory_format=torch.channels_last if t.ndim == 4 else torch.channels_last_3d)


def _cases():
    q, d = ops.quantize_linear, ops.dequantize_linear
    add, mm, pool = ops.quantized_add, ops.quantized_matmul, ops.quantized_avg_pool
    mi, mf = ops.matmul_integer, ops.matmul_integer_to_float
    f8 = q.default(_x(4, 6), 0.1, 0, dtype=torch.float8_e4m3fn)
    return {
        # zero-size
        "quantize_empty": (q.default, (_x(0, 6), 0.1, 3), {}, ALL),
        "quantize_tensor_empty": (q.tensor, (_x(0, 6), torch.tensor(0.1), torch.tensor(3, dtype=u8)), {}, ALL),
        "dequantize_empty": (d.default, (_q(0, 6), 0.1, 3), {}, ALL),
        "add_empty": (add.default, (_q(0, 6), 0.1, 3, _q(0, 6), 0.1, 3, 0.2, 1), {}, ALL),
        "matmul_empty_m": (mm.default, (_q(0, 6), 0.1, 3, _q(6, 5), 0.1, 3, 0.2, 1), {}, ALL),
        "matmul_empty_k": (mm.default, (_q(4, 0), 0.1, 3, _q(0, 5), 0.1, 3, 0.2, 1), {}, ALL),
        "matmul_integer_empty_k": (mi.default, (_q(4, 0), _q(0, 5), 3, 1), {}, ALL),
        "to_float_empty_k": (mf.default, (_q(4, 0), 0.1, 3, _q(0, 5), 0.1, 3), {}, ALL),
        "pool_empty_batch": (pool.default, (_q(0, 3, 5, 5), 0.1, 3, 0.1, 3, [2, 2]), {}, ALL),
        # strides and memory formats
        "quantize_transposed": (q.default, (_x(6, 4).t(), 0.1, 3), {}, ALL),
        "quantize_sliced": (q.default, (_x(4, 12)[:, ::2], 0.1, 3), {}, ALL),
        "quantize_channels_last_per_channel": (q.tensor, (_cl(_x(2, 3, 7, 6)), torch.rand(3) + 0.1, None),
                                               {"axis": 1}, ALL),
        "dequantize_channels_last": (d.default, (_cl(_q(2, 3, 7, 6)), 0.1, 3), {}, ALL),
        "add_channels_last_and_broadcast": (add.default, (_cl(_q(2, 3, 7, 6)), 0.1, 3, _q(1, 3, 1, 1), 0.1, 3,
                                                          0.2, 1), {}, ALL),
        "matmul_transposed": (mm.default, (_q(6, 4).t(), 0.1, 3, _q(5, 6, dtype=i8).t(), 0.1, 3, 0.2, 1), {}, ALL),
        "matmul_float16_and_bfloat16_scales": (mm.tensor, (
            _q(2, 4, 6), (torch.rand(4, 1) * 0.1 + 0.01).half(), None, _q(2, 6, 5, dtype=i8),
            (torch.rand(2, 1, 5) * 0.1 + 0.01).bfloat16(), None, torch.tensor(0.5, dtype=torch.float16),
            torch.tensor(1, dtype=i8)), {}, ALL),
        "matmul_integer_transposed": (mi.default, (_q(6, 4).t(), _q(5, 6, dtype=i8).t(), 3, -1), {}, ALL),
        "pool_channels_last": (pool.default, (_cl(_q(2, 3, 7, 6)), 0.1, 3, 0.1, 3, [2, 2]),
                               {"strides": [2, 1], "ceil_mode": True}, ALL),
        "pool_3d_channels_last": (pool.default, (_cl(_q(2, 3, 4, 5, 6)), 0.1, 3, 0.1, 3, [2, 2, 2]), {}, ALL),
        # per-axis and blocked parameters
        "quantize_per_axis_0": (q.tensor, (_x(4, 6), torch.rand(4) + 0.1, _q(4, dtype=i8)), {"axis": 0}, ALL),
        "quantize_blocked": (q.tensor, (_x(4, 6), torch.rand(4, 3) + 0.1, None), {"axis": 1, "block_size": 2},
                             ALL),
        "dequantize_blocked": (d.tensor, (_q(4, 6), torch.rand(4, 3) + 0.1, _q(4, 3)),
                               {"axis": 1, "block_size": 2}, ALL),
        "dequantize_per_axis_negative": (d.tensor, (_q(4, 6), torch.rand(6) + 0.1, None), {"axis": -1}, ALL),
        "to_float_blocked": (mf.tensor, (_q(4, 9), torch.rand(4, 1) + 0.1, None, _q(9, 5, dtype=i8),
                                         torch.rand(3, 5) + 0.01, _q(3, 5, dtype=i8)),
                             {"block_size": 4, "dtype": torch.float16}, ALL),
        # float8 and 4-bit
        "quantize_float8": (q.default, (_x(4, 6), 0.1, 0), {"dtype": torch.float8_e4m3fn}, ALL),
        "quantize_float8_e5m2_channels_last": (q.default, (_cl(_x(2, 3, 4, 5)), 0.1), {"dtype": torch.float8_e5m2},
                                               ALL),
        "dequantize_float8": (d.default, (f8, 0.1, 0), {}, ALL[1:]),
        "quantize_int4": (q.default, (_x(4, 6), 0.1, 0), {"dtype": torch.int4}, ALL[:3]),
        "quantize_uint4_blocked": (q.tensor, (_x(4, 6), torch.rand(4, 3) + 0.1, None),
                                   {"dtype": torch.uint4, "axis": 1, "block_size": 2}, ALL[:3]),
        "quantize_int2_channels_last": (q.default, (_cl(_x(2, 3, 4, 5)), 0.5, -1), {"dtype": torch.int2},
                                        ALL[:3]),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_opcheck_at_the_edges(name):
    op, args, kwargs, utils = CASES[name]
    torch.library.opcheck(op, args, kwargs, test_utils=utils)
