"""The kernels the first H100 session measured far from their limits, one launch each, for
``ncu`` (tools/gpu_session.sh profile): ``ncu ... python3 tools/gpu_profile.py``.

bench/results/NVIDIA-H100-80GB-HBM3-key-2026-11-26.json (README, "GPU, measured"):
  - 3x3 stride-1 pooling at 64x256x56x56: tile_k3s1 2,063 us, general 1,351 us, for 103 MB
    (34 us at the copy bandwidth); 2x2 stride-2 at 256x256x56x56: tile_k2s2 846 us,
    general 1,346 us, for 257 MB (85 us);
  - matmul_integer_to_float uint8 x int8 -> float16 at N = K = 8192, M = 1 and 16 (then the
    stream kernel): 1,039 and 3,948 us for 64 MiB of b (22 us); selection has since sent these
    to matmul_stream_packed.cu's 8-bit weight-streaming kernels at M = 1 (new, unmeasured) and
    the tensor cores (mma-128x128 with split-K) at M = 16, whose figures at these shapes this
    profile is the first to take;
the grouped stream kernel for a packed uint4 b with groups of 128 at M = 1, quantized_matmul
with a packed int4 b at M = 1 (the second H100 run, bench/results/NVIDIA-H100-80GB-HBM3-key-
2026-11-26-run2.json: 90 / 173 us for the int8 b at M = 1 / 16, 128 us grouped, 58 us packed
int4, against 22 or 11 us of b at the copy bandwidth); and, as yardsticks, two that came
close: the contiguous quantize (0.90 of the copy bandwidth) and the 8192^3 tensor-core matmul
(0.34 of the int8 peak); and the narrow types' blocked quantize and dequantize to int4 and int2.

Each case runs once after its plan is printed (``dmlq.kernel_plan``), so the profile's kernels
can be told apart; ``--small`` shrinks every shape (the CPU test runs it on the cupy stand-in).
``--host-time`` (no ncu) then times 50 more calls of each: the host's microseconds per call
(enqueue only) and per call with the GPU's work (one synchronize after the 50); then where a
small matmul's host time goes (:func:`call_overhead`: cProfile of each of
:func:`matmul_calls`) and where a call on torch CUDA tensors spends it (:func:`torch_overhead`:
each step of dmlq.torch's CUDA path alone, and cProfile over whole calls). The small
matmuls took a flat 46-58 us of device time whatever their size (bench/results/gpu-2026-11-26/
bench/bench.log), which looks like the host's Python between the timer's events, not the kernels.
"""
from __future__ import annotations

import sys

import numpy as np


def cases(small: bool):
    """(name, shapes): the shapes of each case, full size or ``small``."""
    pool3 = (2, 8, 12, 12) if small else (64, 256, 56, 56)
    pool2 = (2, 8, 12, 12) if small else (256, 256, 56, 56)
    nk = 64 if small else 8192
    mm = 64 if small else 8192
    quant = (64, 64) if small else (16384, 4096)
    return pool3, pool2, nk, mm, quant


def device_ints(xp, rng):
    """``dev(shape, dtype)``: random integers of ``dtype``'s whole range on the device of ``xp``."""
    def dev(shape, dtype):
        info = np.iinfo(dtype)
        return xp.asarray(rng.integers(info.min, info.max + 1, shape).astype(dtype))
    return dev


def host_us(xp, call, n: int) -> tuple:
    """(enqueue, with the GPU's work): host microseconds per call of ``n`` calls after one
    warm-up, the second with one synchronize after the ``n``."""
    import time

    call()
    xp.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    t1 = time.perf_counter()
    xp.cuda.runtime.deviceSynchronize()
    t2 = time.perf_counter()
    return 1e6 * (t1 - t0) / n, 1e6 * (t2 - t0) / n


def run_cases(xp, small: bool = False, out=sys.stdout, host_time: bool = False) -> list:
    """Launch every case once on the device of ``xp`` (CuPy, or the stand-in); returns the
    case names in launch order. ``host_time``: then time 50 more calls of each."""
    import dmlq
    from dmlq.gpu import avgpool

    def timed(call):
        if not host_time:
            call()
            xp.cuda.runtime.deviceSynchronize()
            return
        enqueue, with_gpu = host_us(xp, call, 50)
        out.write(f"   host {enqueue:.1f} us per call (enqueue), {with_gpu:.1f} us with the GPU\n")

    pool3, pool2, nk, mm, quant = cases(small)
    rng = np.random.default_rng(0)
    f32 = np.float32
    done = []

    def say(name, plan):
        out.write(f"== {name}\n{plan}\n")
        out.flush()
        done.append(name)

    dev = device_ints(xp, rng)

    params = [xp.full((1,), v, dt) for v, dt in ((0.05, f32), (128, np.uint8), (0.04, f32), (120, np.uint8))]
    for shape, window, stride, pad in ((pool3, 3, 1, 1), (pool2, 2, 2, 0)):
        x = dev(shape, np.uint8)
        geometry = ((window,) * 2, (stride,) * 2, (pad,) * 2, (pad,) * 2, (1, 1), False)
        o = xp.empty(shape[:2] + tuple((s + 2 * pad - window) // stride + 1 for s in shape[2:]), np.uint8)
        for variant in (f"tile_k{window}s{stride}", "general"):
            say(f"avgpool {'x'.join(map(str, shape))} k{window}s{stride}p{pad} {variant}", variant)
            timed(lambda: avgpool.quantized_avg_pool(x, *params, o, *geometry, variant=variant))

    small_matmuls = matmul_calls(xp, dev, small)
    for name, call, plan in small_matmuls[:3]:
        say(name, plan())
        timed(call)

    x = xp.asarray(rng.standard_normal(quant).astype(f32))
    say(f"quantize float32 -> uint8 {quant[0]}x{quant[1]}", dmlq.kernel_plan(dmlq.quantize_linear, x, f32(0.02), np.uint8(128)))
    timed(lambda: dmlq.quantize_linear(x, f32(0.02), np.uint8(128)))
    # the narrow types in blocks of 32 along the last axis (the fourth run, H200: quantize 0.57 of
    # the copy bandwidth for int4, 0.28 for int2; dequantize 0.80 and 0.43)
    s32 = xp.asarray(rng.uniform(0.01, 0.1, (quant[0], quant[1] // 32)).astype(f32))
    for t in ("int4", "int2"):
        say(f"quantize float32 -> {t} {quant[0]}x{quant[1]}, blocks of 32",
            dmlq.kernel_plan(dmlq.quantize_linear, x, s32, dtype=t, block_size=32))
        timed(lambda t=t: dmlq.quantize_linear(x, s32, dtype=t, block_size=32))
        q = dmlq.quantize_linear(x, s32, dtype=t, block_size=32)
        say(f"dequantize {t} -> float32 {quant[0]}x{quant[1]}, blocks of 32",
            dmlq.kernel_plan(dmlq.dequantize_linear, q, s32, block_size=32))
        timed(lambda q=q: dmlq.dequantize_linear(q, s32, block_size=32))
    a, b = dev((mm, mm), np.int8), dev((mm, mm), np.int8)
    args = (a, f32(0.05), None, b, f32(0.01), None, f32(0.3), np.int8(2))
    say(f"quantized_matmul int8 {mm}^3", dmlq.kernel_plan(dmlq.quantized_matmul, *args))
    timed(lambda: dmlq.quantized_matmul(*args))
    # MatMulNBits' prefill on the tensor cores (mma-grouped, session 41: its napkin math says the
    # groups' int-to-float conversions bound it, ~40% of the tensor peak at G = 128): M = 2048,
    # N = K = 4096, groups of 128, its own bytes (b K-major, scales (N, groups).T, packed zero points)
    (pm, pk, pn), pg = ((64, 512, 128), 32) if small else ((2048, 4096, 4096), 128)
    pf = (dev((pm, pk), np.uint8), xp.full((pm, 1), 0.02, f32), np.uint8(128), *nbits_weights(xp, dev, pn, pk, pg))
    say(f"matmul_integer_to_float, MatMulNBits' bytes, groups of {pg}, M={pm} N={pn} K={pk}",
        dmlq.kernel_plan(dmlq.matmul_integer_to_float, *pf, dtype=np.float16, block_size=pg))
    timed(lambda: dmlq.matmul_integer_to_float(*pf, dtype=np.float16, block_size=pg))
    for name, call, plan in small_matmuls[3:]:
        say(name, plan())
        timed(call)
    return done


def nbits_weights(xp, dev, n: int, k: int, g: int) -> tuple:
    """MatMulNBits' uint4 weight as it hands it over, for matmul_integer_to_float(..., block_size=g):
    b K-major (the Packed (N, K) bytes' .mT), scales the .T of an (N, groups) table, zero points a
    Packed (N, groups)'s .mT (made into the kernels' table by packed_table.cu)."""
    import dmlq

    groups = k // g
    return (dmlq.Packed(dev((n * k // 2,), np.uint8), (n, k), "uint4").mT,
            xp.full((n, groups), 1e-3, np.float32).T,
            dmlq.Packed(dev((n * groups // 2,), np.uint8), (n, groups), "uint4").mT)


def matmul_calls(xp, dev, small: bool) -> list:
    """[(name, call, plan)] of the small-M matmuls whose time the host may set: the integer
    family's decode step (int8 b at M = 1 and 16, a packed uint4 b in groups of 128 at M = 1, and
    MatMulNBits' own bytes, zero points packed), then quantized_matmul at M = 16 (int8, N = K = 4096) and with a packed int4 b at M = 1.
    ``dev(shape, dtype)``: random integers on the device."""
    import dmlq

    f32, f16 = np.float32, np.float16
    nk = cases(small)[2]
    b = dev((nk, nk), np.int8)
    out = []
    for m in (1, 16):
        args = (dev((m, nk), np.uint8), f32(0.02), np.uint8(128), b, f32(0.01), None, None)
        out.append((f"matmul_integer_to_float uint8 x int8 -> float16, M={m} N=K={nk}",
                    lambda args=args: dmlq.matmul_integer_to_float(*args, dtype=f16),
                    lambda args=args: dmlq.kernel_plan(dmlq.matmul_integer_to_float, *args, dtype=f16)))
    # a weight-only int4 layer's decode step (groups of 128): the grouped stream kernel
    g = 32 if small else 128
    b4 = dmlq.Packed(dev((nk * nk // 2,), np.uint8), (nk, nk), "uint4")
    args = (dev((1, nk), np.uint8), f32(0.02), np.uint8(128), b4, xp.full((nk // g, nk), 1e-3, f32), 8)
    out.append((f"matmul_integer_to_float uint8 x packed uint4 -> float16, groups of {g}, M=1 N=K={nk}",
                lambda: dmlq.matmul_integer_to_float(*args, dtype=f16, block_size=g),
                lambda: dmlq.kernel_plan(dmlq.matmul_integer_to_float, *args, dtype=f16, block_size=g)))
    # the same with MatMulNBits' bytes as they are: b K-major, scales (N, groups).T, zero points a
    # Packed (N, groups).mT (made into the kernels' table by packed_table.cu, session 40)
    nargs = (dev((1, nk), np.uint8), f32(0.02), np.uint8(128), *nbits_weights(xp, dev, nk, nk, g))
    out.append((f"matmul_integer_to_float, MatMulNBits' bytes as they are (zero points packed), groups of {g}, "
                f"M=1 N=K={nk}",
                lambda: dmlq.matmul_integer_to_float(*nargs, dtype=f16, block_size=g),
                lambda: dmlq.kernel_plan(dmlq.matmul_integer_to_float, *nargs, dtype=f16, block_size=g)))
    k = 64 if small else 4096
    mm16 = (dev((16, k), np.int8), f32(0.05), None, dev((k, k), np.int8), f32(0.01), None, f32(0.3), np.int8(2))
    out.append((f"quantized_matmul int8 M=16 N=K={k} (46 us of device time in the first bench)",
                lambda: dmlq.quantized_matmul(*mm16), lambda: dmlq.kernel_plan(dmlq.quantized_matmul, *mm16)))
    p4 = dmlq.Packed(dev((nk * nk // 2,), np.uint8), (nk, nk), "int4")
    q4 = (dev((1, nk), np.uint8), f32(0.02), np.uint8(128), p4, xp.full(nk, 1e-3, f32), 0, f32(0.05), np.int8(0))
    out.append((f"quantized_matmul uint8 x packed int4 -> int8, M=1 N=K={nk}",
                lambda: dmlq.quantized_matmul(*q4), lambda: dmlq.kernel_plan(dmlq.quantized_matmul, *q4)))
    return out


def call_overhead(xp, small: bool = False, out=sys.stdout, n: int = 300) -> list:
    """Where a small matmul's host time goes (the second H100 run: 50-94 us of enqueue per
    call, as long as the decode step's kernels): for each of :func:`matmul_calls`, the
    enqueue microseconds per call, then a cProfile of ``n`` calls by own time, all functions
    and dmlq's alone (CuPy's launches are compiled code, so they count in their Python
    caller's own time).
    Returns the names profiled."""
    import cProfile
    import io
    import pstats

    names = []
    for name, call, _plan in matmul_calls(xp, device_ints(xp, np.random.default_rng(1)), small):
        enqueue, _ = host_us(xp, call, n)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            call()
        prof.disable()
        xp.cuda.runtime.deviceSynchronize()
        text, own = io.StringIO(), io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)
        pstats.Stats(prof, stream=own).sort_stats("tottime").print_stats(r"dmlq[/\\]", 20)
        out.write(f"== call overhead: {name}\n   host {enqueue:.1f} us per call (enqueue)\n"
                  f"== cProfile, {n} calls, by tottime\n{text.getvalue()}"
                  f"== the same, dmlq's own functions\n{own.getvalue()}")
        out.flush()
        names.append(name)
    return names


def torch_overhead(out=sys.stdout, n: int = 300) -> bool:
    """Where a torch call's host time goes (the bench measured 135 us a 1-element quantize on
    CUDA tensors against 19.6 us on CuPy arrays): each step of dmlq.torch's CUDA path timed
    alone, then cProfile over ``n`` whole calls (the 25 costliest functions, cumulative and
    own time). False, with a line saying so, where torch has no CUDA device."""
    import cProfile
    import io
    import pstats
    import time

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        out.write("== torch call overhead: skipped (no torch CUDA device)\n")
        return False
    import cupy

    import dmlq
    from dmlq import calls

    x = torch.ones(1, device="cuda")
    o = torch.empty(1, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()
    cx = cupy.asarray(x)

    def each(name, fn, reps=2000):
        try:
            fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
        except Exception as e:  # noqa: BLE001 - one step's failure leaves the others' figures
            out.write(f"   {name}: failed: {type(e).__name__}: {e}\n")
            return
        out.write(f"   {name}: {1e6 * (time.perf_counter() - t0) / reps:.2f} us\n")

    def external_stream():
        with cupy.cuda.ExternalStream(stream.cuda_stream, 0):
            pass

    def device_entered():
        with cupy.cuda.Device(0):
            pass

    out.write("== torch call overhead, 1-element quantize (host microseconds a step)\n")
    each("dmlq.quantize_linear(torch x, 0.5, 3)", lambda: dmlq.quantize_linear(x, 0.5, 3), 300)
    each("same with out=torch", lambda: dmlq.quantize_linear(x, 0.5, 3, out=o), 300)
    each("same on the CuPy view of x", lambda: dmlq.quantize_linear(cx, 0.5, 3), 300)
    import dmlq.torch  # noqa: F401  (registers torch.ops.dmlq)

    each("torch.ops.dmlq.quantize_linear(x, 0.5, 3)", lambda: torch.ops.dmlq.quantize_linear(x, 0.5, 3), 300)
    each("cupy.asarray(tensor)", lambda: cupy.asarray(x))
    each("torch.cuda.current_stream()", lambda: torch.cuda.current_stream(0))
    each("cupy.cuda.ExternalStream(...) made and entered", external_stream)
    each("cupy.cuda.Device(0) entered", device_entered)
    each("torch.empty(1, uint8, cuda)", lambda: torch.empty(1, dtype=torch.uint8, device="cuda"))
    each("calls.output_meta on the CuPy view", lambda: calls.output_meta(dmlq.quantize_linear, cx, 0.5, 3))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        dmlq.quantize_linear(x, 0.5, 3)
    prof.disable()
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats(key).print_stats(25)
        out.write(f"== cProfile, {n} calls, by {key}\n{text.getvalue()}")
    out.flush()
    return True


def main(argv=None) -> int:
    import cupy

    argv = sys.argv[1:] if argv is None else argv
    names = run_cases(cupy, small="--small" in argv, host_time="--host-time" in argv)
    print(f"gpu_profile: {len(names)} cases launched")
    if "--host-time" in argv:
        call_overhead(cupy, small="--small" in argv)
        torch_overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
