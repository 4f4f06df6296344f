"""`python -m dmlq check`: the numeric contract's edge cases through every backend,
plus (on a GPU) every kernel against the reference on random data.

The rows are dmlq.check_cases' (the edge cases' expected values worked out by hand from
docs/semantics.md, not produced by dmlq); this module runs and reports them.
"""
from __future__ import annotations

import sys

import numpy as np

from . import api, intmm
from .check_cases import ChannelsLast, KMajor, _edge_cases, _random_cases, laid_out
from .dynquant import dynamic_quantize_linear
from .errors import UnsupportedError
from .packing import Packed, TransposedPacked


def _to_backend(value, xp):
    from .gpu.device import upload  # a 0-d scale of -0.0 keeps its sign

    if isinstance(value, Packed):
        return Packed(xp.asarray(value.data), value.shape, value.dtype)
    if isinstance(value, TransposedPacked):
        return TransposedPacked(_to_backend(value.packed, xp), value.k)
    if isinstance(value, (ChannelsLast, KMajor)):
        return laid_out(value, xp)
    return upload(xp, value) if isinstance(value, np.ndarray) else value


def _same(got, expected) -> bool:
    """Every byte equal; a NaN in a float output matches any NaN (docs/semantics.md leaves its
    sign and payload open: a GPU gives 0x7FFFFFFF)."""
    got = np.asarray(got)
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return False
    if expected.dtype.kind == "f":
        nan = np.isnan(expected)
        return bool((np.isnan(got) == nan).all()) and got[~nan].tobytes() == expected[~nan].tobytes()
    return got.tobytes() == expected.tobytes()


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def gpu_report():
    """(lines, gpus, why): the CUDA stack and GPUs as text, never raising.

    ``gpus`` is the number of usable GPUs (0 where there is no CuPy, driver or
    device) and ``why`` says in a few words why there is none ("" when there is one).
    """
    lines = []
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name != "cupy":  # installed, but a module it needs is missing: a broken install
            return ([f"CuPy: cannot be imported ({type(e).__name__}: {e})", "GPU: none"], 0,
                    "CuPy cannot be imported")
        return ["CuPy: not installed (pip install -e \".[cuda13]\" or \".[cuda12]\" from a checkout)",
                "CUDA driver: not checked (no CuPy)", "GPU: none (no CuPy)"], 0, "CuPy is not installed"
    except Exception as e:  # a broken install (CuPy raises ImportError for a missing CUDA library too)
        return [f"CuPy: cannot be imported ({type(e).__name__}: {e})", "GPU: none"], 0, "CuPy cannot be imported"
    lines.append(f"CuPy {cupy.__version__}")
    rt = cupy.cuda.runtime
    try:
        runtime = rt.runtimeGetVersion()
        lines.append(f"CUDA runtime {_cuda_version(runtime)} (CuPy's)")
    except Exception as e:
        runtime = None
        lines.append(f"CUDA runtime: unavailable ({type(e).__name__}: {str(e).splitlines()[0]})")
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
        lines.append(f"NVRTC {major}.{minor}")
    except Exception as e:
        lines.append(f"NVRTC: unavailable ({type(e).__name__}: {str(e).splitlines()[0]}); "
                     "kernels cannot be compiled")
    try:
        driver = rt.driverGetVersion()
    except Exception:
        driver = 0
    if not driver:
        lines.append("CUDA driver: none (no NVIDIA driver is loaded on this machine)")
        lines.append("GPU: none (no driver); dmlq runs NumPy arrays on its CPU backend")
        return lines, 0, "no NVIDIA driver on this machine"
    lines.append(f"CUDA driver {_cuda_version(driver)} (the newest CUDA version it supports)")
    # CUDA's minor-version compatibility: a driver runs any runtime of its own major version
    # (seen on an H100: driver 13.0, CuPy's runtime 13.2, every kernel ran); only an older major fails.
    if runtime is not None and driver // 1000 < runtime // 1000:
        lines.append(f"GPU: unusable: the driver supports CUDA up to {_cuda_version(driver)}, older than "
                     f"CuPy's runtime {_cuda_version(runtime)}; update the driver or install the CuPy "
                     "that matches it (\".[cuda12]\")")
        return lines, 0, "the NVIDIA driver is older than CuPy's CUDA runtime"
    if runtime is not None and driver < runtime:
        lines.append(f"CUDA runtime {_cuda_version(runtime)} on driver {_cuda_version(driver)}: one major "
                     "version, so it runs (CUDA's minor-version compatibility)")
    try:
        count = rt.getDeviceCount()
    except Exception as e:
        lines.append(f"GPU: none ({type(e).__name__}: {str(e).splitlines()[0]})")
        return lines, 0, f"no usable GPU ({type(e).__name__})"
    if count == 0:
        lines.append("GPU: none (the driver reports no CUDA device)")
        return lines, 0, "the driver reports no CUDA device"
    for i in range(count):
        props = rt.getDeviceProperties(i)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        lines.append(f"GPU {i}: {name}, compute capability {props['major']}.{props['minor']}, "
                     f"{props['multiProcessorCount']} SMs, {props['totalGlobalMem'] / 2**30:.0f} GiB")
    return lines, count, ""


def _backends():
    """([(name, array module)], device lines): NumPy always, CuPy where a GPU is usable."""
    lines, gpus, _ = gpu_report()
    names = [("numpy", np)]
    if gpus:
        import cupy

        names.append(("cuda", cupy))
    return names, lines


# Cases CuPy cannot hold (ml_dtypes' int4 has no CuPy dtype): NumPy only.
HOST_ONLY = (("mm_integer", "int4 b"),)


def run_case(case, xp):
    """One row of :func:`gpu_cases` (or of the edge cases) on the array module ``xp``:
    ``[(what, got, expected)]`` as NumPy arrays, for a fresh result and for a result
    written into a caller's ``out`` (filled with 0xA5 bytes first). The expected
    value is the row's own (worked out by hand) or, where it has none, the NumPy
    reference on the same inputs."""
    _, _, fn, args, kwargs, expected = case
    if expected is None:
        expected = np.asarray(fn(*map(laid_out, args), **kwargs))
    dev_args = [_to_backend(a, xp) for a in args]
    got = fn(*dev_args, **kwargs)
    got = got.get() if hasattr(got, "get") else np.asarray(got)
    poisoned = np.full(expected.nbytes, 0xA5, np.uint8).view(expected.dtype).reshape(expected.shape)
    out = xp.asarray(poisoned) if expected.ndim else None
    rows = [("fresh", got, expected)]
    if out is not None:
        res = fn(*dev_args, **kwargs, out=out)
        if res is not out:
            raise TypeError(f"{fn.__name__}(..., out=out) did not return out")
        rows.append(("out=", out.get() if hasattr(out, "get") else out, expected))
    return rows


def run_edge_cases():
    """The edge cases on NumPy: {(operator, "numpy"): [passed, failed, failures]}"""
    table = {}
    for case in _edge_cases():
        ok, detail = _judge(case, np)
        cell = table.setdefault((case[0], "numpy"), [0, 0, []])
        cell[0 if ok else 1] += 1
        if not ok:
            cell[2].append(f"{case[1]}: {detail}")
    return table


def _judge(case, xp):
    """(passed, what went wrong) for one case on ``xp``; a crash is a failed case."""
    try:
        for what, got, expected in run_case(case, xp):
            if not _same(got, expected):
                return False, f"{what}: got {np.asarray(got).tolist()}, expected {expected.tolist()}"
    except Exception as e:  # noqa: BLE001 - reported as a failure
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def gpu_cases(seed=0):
    """The public calls a GPU is held to: the contract's edge cases (less those CuPy
    cannot hold) and every operator and dtype combination on random data, as
    (operator, description, function, args, kwargs, expected or None) rows with
    NumPy arguments. ``python -m dmlq check`` runs them on a GPU
    (tools/gpu_session.sh's correct stage); tests/test_gpu_cases.py runs the same
    rows as gpu tests (on the GPU, and in CI on the cupy stand-in)."""
    edge = [c for c in _edge_cases() if (c[0], c[1]) not in HOST_ONLY]
    return edge + _random_cases(seed)


def run_gpu_cases(cupy, seed=0):
    """Every row of :func:`gpu_cases` on the GPU: ({(operator, "cuda"): [passed,
    failed, failures]}, the number of kernels compiled)."""
    from .gpu.device import compile_all

    table = {}
    compiled = compile_all()
    for case in gpu_cases(seed):
        ok, detail = _judge(case, cupy)
        cell = table.setdefault((case[0], "cuda"), [0, 0, []])
        cell[0 if ok else 1] += 1
        if not ok:
            cell[2].append(f"{case[1]}: {detail}")
    return table, compiled


def _plan_lines(plans):
    """The distinct plans a check ran, each with how many calls ran it."""
    if not plans:
        return ["kernel plans run: none"]
    counts = {}
    for p in plans:
        text = str(p)
        counts[text] = counts.get(text, 0) + 1
    variants = sorted({(p.op, p.variant) for p in plans})
    lines = [f"kernel plans run: {len(plans)} calls, {len(counts)} distinct plans, "
             f"{len(variants)} operator variants ({', '.join(f'{op}:{v}' for op, v in variants)}):"]
    for text, n in counts.items():
        head, *rest = text.splitlines()
        lines.append(f"  {head}  [{n} call{'s' if n > 1 else ''}]")
        lines.extend(f"  {r}" for r in rest)
    return lines


def showcase_calls():
    """(label, function, args, kwargs): typical calls whose kernel plans ``check`` prints
    without a GPU (NumPy stand-ins: nothing is computed, nothing large is touched)."""
    f32, u8, i8 = np.float32, np.uint8, np.int8
    x = np.empty((4096, 4096), f32)
    q = np.empty((4096, 4096), u8)
    rows = []
    rows.append(("quantize 4096x4096 float32, per tensor", api.quantize_linear, (x, 0.02, 128), {}))
    rows.append(("quantize, per-column scale", api.quantize_linear,
                 (x, np.full((1, 4096), 0.02, f32), np.zeros((1, 4096), u8)), {}))
    rows.append(("dequantize a strided view", api.dequantize_linear, (q.T[:, ::2], 0.02, u8(128)), {}))
    rows.append(("add 4096x4096 (table of all input pairs)", api.quantized_add,
                 (q, 0.02, 128, q, 0.03, 0, 0.05, i8(0)), {}))
    rows.append(("add with broadcasting", api.quantized_add,
                 (q[:64], 0.02, 128, q[0], 0.03, 0, 0.05, i8(0)), {}))
    rows.append(("dynamic quantize 4096x4096 float32 (its range, then quantize)", dynamic_quantize_linear, (x,), {}))
    rows.append(("dynamic quantize per row, 16 rows of 8192 float32", dynamic_quantize_linear,
                 (np.empty((16, 8192), f32),), dict(per_row=True)))
    for m, k, n in ((4096, 4096, 4096), (64, 4096, 4096), (16, 4096, 4096), (1, 4096, 4096), (1000, 1000, 1000),
                    (512, 4095, 50257), (8, 40000, 64)):
        a = np.empty((m, k), u8)
        w = np.empty((k, n), i8)
        rows.append((f"matmul M={m} K={k} N={n}, per-row A scale, zero points 128 and 0",
                     api.quantized_matmul, (a, np.full((m, 1), 0.01, f32), 128, w, 0.002, 0, 0.05, i8(0)), {}))
    w4 = Packed(np.empty(8192 * 8192 // 2, u8), (8192, 8192), "int4")
    rows.append(("matmul M=1 K=N=8192, packed int4 B (the weight-streaming kernel), per-column B scale",
                 api.quantized_matmul, (np.empty((1, 8192), u8), 0.01, 128, w4, np.full(8192, 2e-3, f32), 0,
                                        0.05, i8(0)), {}))
    a, w = np.empty((16, 4096), u8), np.empty((4096, 4096), i8)
    rows.append(("matmul_integer_to_float M=16 K=N=4096, per-row A scale, per-column B scale",
                 intmm.matmul_integer_to_float, (a, np.full((16, 1), 0.01, f32), 128, w, np.full(4096, 2e-3, f32),
                                                 None), {}))
    img = np.empty((8, 64, 56, 56), u8)
    rows.append(("avgpool 3x3/1 pad 1", api.quantized_avg_pool, (img, 0.1, 3, 0.1, 3, (3, 3)),
                 dict(start_padding=1, end_padding=1)))
    rows.append(("avgpool 2x2/2", api.quantized_avg_pool, (img, 0.1, 3, 0.1, 3, (2, 2)), dict(strides=2)))
    rows.append(("avgpool global", api.quantized_avg_pool, (img, 0.1, 3, 0.1, 3, (56, 56)), {}))
    nhwc = np.empty((8, 56, 56, 64), u8).transpose(0, 3, 1, 2)  # (a fresh array: 16-byte aligned or more)
    rows.append(("avgpool 3x3/1 pad 1, channels_last x", api.quantized_avg_pool, (nhwc, 0.1, 3, 0.1, 3, (3, 3)),
                 dict(start_padding=1, end_padding=1)))
    rows.append(("avgpool 3x3/2 dilation 2, ceil mode", api.quantized_avg_pool, (img, 0.1, 3, 0.1, 3, (3, 3)),
                 dict(strides=2, dilations=2, ceil_mode=True)))
    return rows


def showcase_lines():
    lines = ["kernel plans a GPU would run for typical calls (selection only, on a nominal H100 with "
             "occupancy from threads and shared memory; nothing was compiled or run):"]
    for label, fn, args, kwargs in showcase_calls():
        try:
            plan_text = str(api.kernel_plan(fn, *args, **kwargs))
        except UnsupportedError as e:  # an operator without a kernel yet: nothing to select
            plan_text = f"no kernel: {e}"
        except Exception as e:  # noqa: BLE001 - a planning failure is reported, not fatal here
            plan_text = f"planning failed: {type(e).__name__}: {e}"
        lines.append(f"  {label}:")
        lines.extend(f"    {line}" for line in plan_text.splitlines())
    return lines


def run(seed=0) -> int:
    """``python -m dmlq check``: returns the exit status (0 all passed, 1 any mismatch)."""
    cases = _edge_cases()
    ops = sorted({row[0] for row in cases})
    backends, device_lines = _backends()
    print(f"dmlq check: {len(cases)} edge cases of the numeric contract (docs/semantics.md, expected values "
          f"worked out by hand) over {len(ops)} operators ({', '.join(ops)})")
    print("device:")
    for line in device_lines:
        print(f"  {line}")
    print(f"backends checked: {', '.join(b for b, _ in backends)}")
    from .gpu.plan import recording

    with recording() as plans:
        table = run_edge_cases()
        if len(backends) > 1:
            print(f"on the GPU: the same edge cases, and every operator and dtype combination on random data "
                  f"(seed {seed}) against the NumPy reference; fresh results and results into a poisoned out=")
            gpu_table, compiled = run_gpu_cases(backends[1][1], seed=seed)
            print(f"compiled {compiled} kernels")
            table.update(gpu_table)
    if len(backends) > 1:
        for line in _plan_lines(plans):
            print(line)
    else:
        print("kernel variants exercised: none -- no GPU, so no CUDA kernel was compiled or run; only "
              "NumPy arrays (the CPU backend) were checked")
        for line in showcase_lines():
            print(line)
    print()
    print(f"{'operator':<12} {'backend':<12} {'passed':>6} {'failed':>6}")
    failed = 0
    for (op, be), (ok, bad, notes) in sorted(table.items()):
        print(f"{op:<12} {be:<12} {ok:>6} {bad:>6}")
        for note in notes:
            print(f"    FAIL {note}")
        failed += bad
    total = sum(c[0] + c[1] for c in table.values())
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


def add_arguments(parser) -> None:
    """The options of ``python -m dmlq check`` (shared with the CLI's subcommand)."""
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random data compared on a GPU (default 0)")


def main(argv=()) -> int:
    """``python -m dmlq check [options]`` from Python (the options as a list)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dmlq check")
    add_arguments(parser)
    return run(seed=parser.parse_args(list(argv)).seed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
