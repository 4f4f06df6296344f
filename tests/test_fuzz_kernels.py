"""Kernel fuzz harness: dmlq.gpu's launchers and kernels against dmlq.reference
on arguments drawn by tests/fuzz_strategies.py (shapes with 0, 1 and primes,
strided and broadcast views, every scale/zero-point layout, NaN/Inf, scales
from 1e-30 to 1e30, extreme zero points), with each selected variant.

Runs on the host harness in CI (DMLQ_FUZZ_EXAMPLES per operator, default 50)
and, where a GPU is present, the same draws on the GPU (tools/gpu_session.sh
runs it with DMLQ_FUZZ_EXAMPLES=10000).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given

import fuzz_strategies as fs
import dmlq
from dmlq import reference as R
from dmlq.errors import UnsupportedError
from dmlq.gpu import avgpool, device, elementwise, intmm, matmul, qmm

OPS = {
    "quantize": (fs.quantize_args, elementwise.quantize_linear, R.quantize_linear),
    "dequantize": (fs.dequantize_args, elementwise.dequantize_linear, R.dequantize_linear),
    "add": (fs.add_args, elementwise.quantized_add, R.quantized_add),
    "matmul": (fs.matmul_args, qmm.quantized_matmul, R.quantized_matmul),
    "avg_pool": (fs.avg_pool_args, avgpool.quantized_avg_pool, R.quantized_avg_pool),
}
# Besides the selected variant, each draw also runs these (where they apply:
# a variant that cannot take the layout raises ValueError and is skipped).
FORCED = {
    "quantize": ("contig", "axis", "strided"),
    "dequantize": ("contig", "axis", "strided"),
    "add": ("contig", "strided", "table"),
    "matmul": ("dp4a-32x32", "dp4a-wide", "mma-128x128"),
    "avg_pool": avgpool.VARIANTS,
}


def _same(got, want) -> np.ndarray:
    if got.dtype.kind == "f":  # any NaN matches any NaN (no payload is fixed)
        bits = np.uint16 if got.dtype == np.float16 else np.uint32
        return (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    return got == want


def _check_out(got, out, want, what):
    """got is out, equal to want bit for bit, and nothing written outside out."""
    assert got is out
    ok = _same(out, want)
    if not ok.all():
        idx = tuple(np.argwhere(~ok)[0])
        raise AssertionError(f"{what}: {(~ok).sum()} mismatches, first at {idx}: got {out[idx]!r}, "
                             f"want {want[idx]!r}")
    assert fs.untouched_outside(out), f"{what}: wrote outside out"


def _fuzz(op, dev_name, request):
    strategy, kernel, reference = OPS[op]
    dev = request.getfixturevalue("host_device" if dev_name == "host" else "gpu_mirror_device")

    @fs.fuzz_settings()
    @given(strategy())
    def run(args):
        # The backends take arrays (the public API converts scalars, as CuPy would).
        args = {k: np.asarray(v) if isinstance(v, np.generic) else v for k, v in args.items()}
        out = args["out"]
        want = reference(**{**args, "out": np.empty(out.shape, out.dtype)})
        before = out.copy()
        for variant in (None, *FORCED[op]):
            if variant is not None and op == "matmul" and variant not in matmul.VARIANTS:
                continue
            out[...] = before
            try:
                dev.forget()
                with device.using(dev):
                    got = kernel(**args, variant=variant)
            except ValueError as e:
                if variant is None or not any(w in str(e) for w in ("cannot", "does not apply", "exact only")):
                    raise
                continue
            finally:
                dev.forget()
            _check_out(got, out, want, f"{op} ({variant or 'selected'})")

    run()


@pytest.mark.parametrize("dev_name", ["host", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("op", sorted(OPS))
def test_fuzz_kernels(op, dev_name, request):
    _fuzz(op, dev_name, request)


# The integer matmul family: the stream kernels (M <= 16) and the tiled ones (M > 16),
# as selection picks them (no variant argument). A 4-bit b goes to the kernels as
# dmlq.pack's bytes with b_packed and its zero point widened to int8/uint8, as
# dmlq.packed_b hands them over; the reference gets the ml_dtypes array.
INTMM = {"matmul_integer": ("int", intmm.matmul_integer, R.matmul_integer),
         "matmul_integer_to_float": ("float", intmm.matmul_integer_to_float, R.matmul_integer_to_float)}


def _kernel_form(args):
    b, zp = args["b"], args["b_zero_point"]
    if b.dtype.name not in fs.FOUR_BIT:
        return args
    wide = np.int8 if b.dtype.name == "int4" else np.uint8
    zp = None if zp is None else np.asarray(zp).astype(wide)
    return {**args, "b": dmlq.pack(b).data, "b_zero_point": zp, "b_packed": (b.dtype.name, b.shape, True)}


@pytest.mark.parametrize("dev_name", ["host", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("op", sorted(INTMM))
def test_fuzz_intmm_kernels(op, dev_name, request):
    which, kernel, reference = INTMM[op]
    dev = request.getfixturevalue("host_device" if dev_name == "host" else "gpu_mirror_device")

    @fs.fuzz_settings()
    @given(fs.intmm_args(which))
    def run(args):
        out = args["out"]
        want = reference(**{**args, "out": np.empty(out.shape, out.dtype)})
        try:
            dev.forget()
            with device.using(dev):
                got = kernel(**_kernel_form(args))
        except UnsupportedError as e:  # the GPU's documented gaps (README), M > 16 only
            assert args["a"].shape[-2] > 16 and "no CUDA kernel" in str(e), e
            event(f"refused: {str(e).split(';')[0].split(': ', 1)[1][:40]}")
            return
        finally:
            dev.forget()
        event(f"ran: M {'<= 16 (stream)' if args['a'].shape[-2] <= 16 else '> 16 (tiled)'}")
        _check_out(got, out, want, op)

    run()
