"""Kernel fuzz harness: dmlq.gpu's launchers and kernels against dmlq.reference
on arguments drawn by tests/fuzz_strategies.py (shapes with 0, 1 and primes,
strided and broadcast views, every scale/zero-point layout, NaN/Inf, scales
from 1e-30 to 1e30, extreme zero points), with each selected variant.

Runs on the host harness in CI (DMLQ_FUZZ_EXAMPLES per operator, default 50)
and, where a GPU is present, the same draws on the GPU (tools/gpu_session.sh
runs it with DMLQ_FUZZ_EXAMPLES=10000). Examples run in seeded chunks of at most
DMLQ_FUZZ_CHUNK (default 500), seeded 0, 1, ... (DMLQ_FUZZ_FIRST_CHUNK: the first seed, for a campaign
past the draws run before); DMLQ_FUZZ_SECONDS (per test) stops after the chunk that passes it, so a
device session gets whole, shrunk-on-failure runs inside its time. DMLQ_FUZZ_REPORT
names a file that gets one JSON line per test: examples run and, per kernel variant,
how many examples ran it (bench/results/hardening.md's counts).
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import event, given, seed

import fuzz_strategies as fs
import gpu_variants as V
from conftest import code_bytes
import dmlq
from dmlq import reference as R
from dmlq.errors import UnsupportedError
from dmlq.gpu import avgpool, device, elementwise, intmm, intmm_tiled, matmul, plan, qkernels, qmm
from dmlq.qtypes import QTYPES

CHUNK = int(os.environ.get("DMLQ_FUZZ_CHUNK", "500"))
FIRST_CHUNK = int(os.environ.get("DMLQ_FUZZ_FIRST_CHUNK", "0"))  # a campaign past the chunks run before
SECONDS = float(os.environ.get("DMLQ_FUZZ_SECONDS", "0") or 0)
REPORT = os.environ.get("DMLQ_FUZZ_REPORT")

OPS = {
    "quantize": (fs.quantize_args, elementwise.quantize_linear, R.quantize_linear),
    "dequantize": (fs.dequantize_args, elementwise.dequantize_linear, R.dequantize_linear),
    "add": (fs.add_args, elementwise.quantized_add, R.quantized_add),
    "matmul": (fs.matmul_args, qmm.quantized_matmul, R.quantized_matmul),
    "matmul_packed": (lambda: fs.matmul_args(packed=True), qmm.quantized_matmul, R.quantized_matmul),
    "avg_pool": (fs.avg_pool_args, avgpool.quantized_avg_pool, R.quantized_avg_pool),
}
# Besides the selected variant, each draw also runs these (where they apply:
# a variant that cannot take the layout raises ValueError and is skipped).
FORCED = {
    "quantize": ("contig", "axis", "strided"),
    "dequantize": ("contig", "axis", "strided"),
    "add": ("contig", "strided", "table"),
    "matmul": matmul.ALL_VARIANTS,
    "matmul_packed": matmul.ALL_VARIANTS,
    "avg_pool": avgpool.VARIANTS,
}
# The integer family's tiled kernels (M > 16), each forced through the tiled planner besides
# the selected kernel (at M <= 16 selection alone picks stream-m1 / -m4 / -m16 by M).
INTMM_FORCED = matmul.ALL_VARIANTS


def _budgeted(name, dev_name, strategy, body):
    """``body(args) -> the plan variants it ran`` on draws of ``strategy``, in seeded chunks
    until DMLQ_FUZZ_EXAMPLES examples or DMLQ_FUZZ_SECONDS; one JSON line to
    DMLQ_FUZZ_REPORT: examples, examples per variant."""
    counts: Counter = Counter()

    def make(examples):
        @fs.fuzz_settings(examples)
        @given(strategy)
        def run(args):
            counts.update(body(args))
            counts["examples"] += 1
        return run

    start, done, chunk = time.monotonic(), 0, FIRST_CHUNK
    try:
        while done < fs.EXAMPLES:
            n = min(CHUNK, fs.EXAMPLES - done)
            seed(chunk)(make(n))()
            done, chunk = done + n, chunk + 1
            if SECONDS and time.monotonic() - start > SECONDS:
                break
    finally:
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(json.dumps({"test": name, "device": dev_name, "examples": counts.pop("examples", 0),
                                    "chunks_passed": chunk - FIRST_CHUNK, "seconds": round(time.monotonic() - start, 1),
                                    "variants": dict(sorted(counts.items()))}) + "\n")


def _same(got, want) -> np.ndarray:
    if got.dtype.name == "bfloat16":  # (ml_dtypes' kind is "V"): widened exactly, bits and NaN kept
        got, want = got.astype(np.float32), want.astype(np.float32)
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


def _variants(plans) -> set:
    return {p.variant for p in plans}


def _fuzz(op, dev_name, request):
    strategy, kernel, reference = OPS[op]
    dev = request.getfixturevalue("host_device" if dev_name == "host" else "gpu_mirror_device")

    def body(args):
        # The backends take arrays (the public API converts scalars, as CuPy would).
        args = {k: np.asarray(v) if isinstance(v, np.generic) else v for k, v in args.items()}
        out = args["out"]
        want = reference(**{**args, "out": np.empty(out.shape, out.dtype)})
        if op == "matmul_packed":
            args = _kernel_form(args)
        before = out.copy()
        ran = set()
        for variant in (None, *FORCED[op]):
            if variant is not None and op.startswith("matmul") and variant not in matmul.VARIANTS:
                continue
            out[...] = before
            try:
                dev.forget()
                with device.using(dev), plan.recording() as plans:
                    got = kernel(**args, variant=variant)
            except ValueError as e:
                if variant is None or not any(w in str(e) for w in ("cannot", "does not apply", "exact only",
                                                                    "no tensor-core kernel")):
                    raise
                continue
            finally:
                dev.forget()
            _check_out(got, out, want, f"{op} ({variant or 'selected'})")
            ran |= _variants(plans)
        return ran

    _budgeted(op, dev_name, strategy(), body)


@pytest.mark.parametrize("dev_name", ["host", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("op", sorted(OPS))
def test_fuzz_kernels(op, dev_name, request):
    _fuzz(op, dev_name, request)


# The integer matmul family: the tiled kernels and, for blocked scales whose group is
# not a multiple of 32, the stream kernels, as selection picks them (no variant argument). A 4-bit b goes to the kernels as
# dmlq.pack's bytes (of its transpose, K-major, one b in three) with b_packed and its zero point
# widened to int8/uint8, as dmlq.packed_b hands them over; the reference gets the ml_dtypes array.
INTMM = {"matmul_integer": ("int", intmm.matmul_integer, R.matmul_integer),
         "matmul_integer_to_float": ("float", intmm.matmul_integer_to_float, R.matmul_integer_to_float)}


def _kernel_form(args):
    b, zp = args["b"], args["b_zero_point"]
    if b.dtype.name not in fs.FOUR_BIT:
        return args
    wide = np.int8 if b.dtype.name == "int4" else np.uint8
    zp = None if zp is None else np.asarray(zp).astype(wide)
    # one b in three (by its contents) held K-major: the bytes of its (..., N, K) transpose, as
    # dmlq.pack(w).mT hands them over (the stream kernels and the tiles read them so; stream-rows and the
    # tensor cores off 32 repack rows); half of those in stored rows longer than K (up to the next
    # multiple of 32 past K, gpu_variants' code 5 there), as dmlq.Packed(...).mT[..., :K, :] hands MatMulNBits' over
    pick = (b.size + int(b.view(np.uint8).sum())) % 6 if b.ndim >= 2 else 1
    data, b_packed, _ = V._packed_b(b, False if pick % 3 else True if pick == 0 else (b.shape[-2] // 32 + 1) * 32)
    return {**args, "b": data, "b_zero_point": zp, "b_packed": b_packed}


def _tiled(op, args, variant):
    """The integer family on the tiled planner with ``variant`` forced (any M)."""
    a, b, out, b_packed = args["a"], args["b"], args["out"], args.get("b_packed")
    view = intmm_tiled._check(op, a, b, b_packed)
    if op == "matmul_integer":
        p = matmul.plan_tiled(op, a, args["a_zero_point"] is not None, view, args["b_zero_point"] is not None, out,
                              variant=variant)
        zps = args["a_zero_point"], args["b_zero_point"]
        intmm_tiled._bind(p, a, b, out, b_packed, None, zps[0], None, zps[1], None)(a, zps[0], b, zps[1], out)
        return out
    k_group = intmm_tiled._k_group(op, a.shape[-1], args["block_size"])
    if k_group and variant not in ("dp4a-wide", *matmul.GROUPED_CONFIGS):
        raise ValueError("blocked scales: dp4a-wide and mma-grouped only (does not apply)")
    p = matmul.plan_tiled(op, a, args["a_zero_point"] is not None, view, args["b_zero_point"] is not None, out,
                          variant=variant, k_group=k_group)
    fargs = [args[k] for k in ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "bias")]
    intmm_tiled._bind(p, a, b, out, b_packed, *fargs[1:3], *fargs[4:])(*fargs, out)
    return out


@pytest.mark.parametrize("dev_name", ["host", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("op", sorted(INTMM))
def test_fuzz_intmm_kernels(op, dev_name, request):
    which, kernel, reference = INTMM[op]
    dev = request.getfixturevalue("host_device" if dev_name == "host" else "gpu_mirror_device")

    def body(args):
        out = args["out"]
        want = reference(**{**args, "out": np.empty(out.shape, out.dtype)})
        kargs = _kernel_form(args)
        before = out.copy()
        ran = set()
        for variant in (None, *INTMM_FORCED):
            if variant is not None and variant not in matmul.VARIANTS:
                continue
            out[...] = before
            try:
                dev.forget()
                with device.using(dev), plan.recording() as plans:
                    got = kernel(**kargs) if variant is None else _tiled(op, kargs, variant)
            except UnsupportedError as e:  # the GPU's documented gaps (README), forced variants only
                assert variant, e
                assert "no CUDA kernel" in str(e), e
                if variant is None:
                    event(f"refused: {str(e).split(';')[0].split(': ', 1)[1][:40]}")
                continue
            except ValueError as e:
                if variant is None or "does not apply" not in str(e):
                    raise
                continue
            finally:
                dev.forget()
            if variant is None:
                stream = any(v.startswith("stream") for v in _variants(plans))
                event(f"ran: M {'<= 16' if args['a'].shape[-2] <= 16 else '> 16'}, {'stream' if stream else 'tiled'}")
            _check_out(got, out, want, f"{op} ({variant or 'selected'})")
            ran |= _variants(plans)
        return ran

    _budgeted(op, dev_name, fs.intmm_args(which), body)


def _guarded(nbytes, offset=0, itemsize=1):
    """A poisoned buffer: (its whole bytes, a view of nbytes starting offset items in); the bytes
    around the view must stay poisoned."""
    whole = np.full(nbytes + (offset + 4) * itemsize, 0xA5, np.uint8)
    return whole, whole[offset * itemsize:offset * itemsize + nbytes]


# The narrow types' kernels (cuda/quant_types.cu) through their launchers: each draw quantizes x
# and dequantizes the reference's codes back, against dmlq.reference bit for bit (a NaN output
# any NaN), outputs poisoned and guarded on both sides.
@pytest.mark.parametrize("dev_name", ["host", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_fuzz_qtypes_kernels(dev_name, request):
    dev = request.getfixturevalue("host_device" if dev_name == "host" else "gpu_mirror_device")

    def body(a):
        qname, x = a["qname"], a["x"]
        q, n = QTYPES[qname], x.size
        lay = a["layout"]
        with np.errstate(all="ignore"):
            codes = R.quantize_linear(x, a["scale_ref"], a["zero_point_ref"], np.empty(x.shape, q.dtype),
                                      a["saturate"], a["precision"])
            want_y = R.dequantize_linear(codes, a["scale_ref"], a["zero_point_ref"], np.empty(x.shape, a["y_dtype"]))
        want = code_bytes(codes)
        nbytes = qkernels.packed_nbytes(n, qname)
        whole, out = _guarded(nbytes)
        ydt = np.dtype(a["y_dtype"])
        ywhole, ybytes = _guarded(n * ydt.itemsize, a["y_offset"], ydt.itemsize)
        y = ybytes.view(ydt).reshape(x.shape)
        packed = np.empty(max(nbytes, 1), np.uint8)[:nbytes]
        packed[...] = want
        try:
            dev.forget()
            with device.using(dev):
                qkernels.quantize(x, a["scale"], a["zero_point"], out, qname, lay, a["saturate"], a["precision"])
                qkernels.dequantize(packed, n, a["scale"], a["zero_point"], y, qname, lay)
        finally:
            dev.forget()
        what = (qname, x.dtype.name, x.shape, a["kind"], lay, a["precision"])
        bad = np.flatnonzero(out != want)
        assert bad.size == 0, f"quantize {what}: {bad.size} bytes differ, first {bad[0]}: {out[bad[0]]} != {want[bad[0]]}"
        assert (whole[nbytes:] == 0xA5).all(), f"quantize {what}: wrote past out"
        ok = _same(y, want_y)
        assert ok.all(), f"dequantize {what} -> {ydt.name}: {(~ok).sum()} differ, first at {np.argwhere(~ok)[0]}"
        guard = np.ones(ywhole.size, bool)
        start = a["y_offset"] * ydt.itemsize
        guard[start:start + ybytes.size] = False
        assert (ywhole[guard] == 0xA5).all(), f"dequantize {what}: wrote outside y"
        path = lambda dense: "vec16" if dense.ctypes.data % 16 == 0 else "bytewise"  # noqa: E731
        return {f"quantize {qname} {path(x)}", f"dequantize {qname} {path(y)}", f"layout {a['kind']}"}

    _budgeted("qtypes", dev_name, fs.qtypes_args(), body)
