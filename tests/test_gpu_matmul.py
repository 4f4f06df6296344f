"""QUANTIZED_LINEAR_MATRIX_MULTIPLY on the GPU, bit-exact against dmlq.reference.

Every test runs for every variant (dp4a tiles, the wide path and the mma
ones; a variant whose kernel source is absent from KERNELS is skipped).
Outputs are poisoned first, and bytes around a strided output are checked to
be untouched.
"""
from __future__ import annotations

import numpy as np
import pytest

from dmlq.gpu import matmul, qmm
from conftest import on_stand_in
from kernel_cases import matmul_worst_cases

pytestmark = pytest.mark.gpu

COMBOS = [(ta, tb, to) for ta in ("int8", "uint8") for tb in ("int8", "uint8") for to in ("int8", "uint8")]


def _variant(v):
    marks = [] if v in matmul.VARIANTS else [
        pytest.mark.skip(reason=f"{v}: its kernel source is absent, so it is not in KERNELS")]
    return pytest.param(v, marks=marks, id=v)


VARIANTS = [_variant(v) for v in matmul.QMM_VARIANTS]


@pytest.fixture
def cp(cupy_twin):
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def ref():
    from dmlq import reference

    return reference


def _dim(n: int, host_max: int = 160) -> int:
    """``n`` on a GPU; on the cupy stand-in, whose kernels run every thread on the
    CPU, an odd size of at most ``host_max`` (off every tile multiple)."""
    if n <= host_max or not on_stand_in():
        return n
    half = host_max // 2
    return (half + n % half) | 1


def _q(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def _params(rng, M, N, K, ta, tb, to, a_axis=False, b_axis=False, o_axis=False, zps=(True, True, True),
            spread=20.0):
    """Scales putting most results inside the output range, so the exact value decides each byte."""
    a_s = rng.uniform(0.5, 2, M if a_axis else 1).astype(np.float32)
    b_s = rng.uniform(0.5, 2, N if b_axis else 1).astype(np.float32)
    o_s = (rng.uniform(0.5, 2, M if o_axis else 1) * np.sqrt(max(K, 1)) * spread).astype(np.float32)
    a_zp = _q(rng, M if a_axis else 1, ta) if zps[0] else None
    b_zp = _q(rng, N if b_axis else 1, tb) if zps[1] else None
    o_zp = _q(rng, M if o_axis else 1, to) if zps[2] else None
    return a_s, a_zp, b_s, b_zp, o_s, o_zp


def run(cp, ref, variant, a, b, params, out_dtype, *, gpu_a=None, gpu_b=None, make_out=None):
    """Run on the GPU (a, b host arrays; gpu_a/gpu_b override the device operands)."""
    a_s, a_zp, b_s, b_zp, o_s, o_zp = params
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    expect = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty(shape, out_dtype))
    if make_out is None:
        buf = out = cp.empty(shape, out_dtype)
    else:
        buf, out = make_out(shape, out_dtype)
    buf.view(cp.uint8)[...] = 0xA5

    def dev(x):
        return None if x is None else cp.asarray(x)

    res = qmm.quantized_matmul(dev(a) if gpu_a is None else gpu_a, dev(a_s), dev(a_zp),
                                  dev(b) if gpu_b is None else gpu_b, dev(b_s), dev(b_zp),
                                  dev(o_s), dev(o_zp), out, variant=variant)
    assert res is out
    got = cp.asnumpy(out)
    np.testing.assert_array_equal(got, expect, err_msg=f"variant={variant}")
    out.view(cp.uint8)[...] = 0xA5
    assert bool((buf.view(cp.uint8) == 0xA5).all()), "wrote outside the output"
    return got


@pytest.mark.parametrize("variant", VARIANTS)
def test_signedness_and_layouts(cp, ref, rng, variant):
    M, K, N = 19, 45, 23
    layouts = [(False, False, False), (True, True, True), (True, False, False), (False, True, True)]
    zps = [(True, True, True), (False, False, False), (True, False, False), (False, True, True)]
    for ta, tb, to in COMBOS:
        for i, lay in enumerate(layouts):
            for z in (zps[i], zps[(i + 1) % 4]):
                a, b = _q(rng, (M, K), ta), _q(rng, (K, N), tb)
                run(cp, ref, variant, a, b, _params(rng, M, N, K, ta, tb, to, *lay, zps=z), to)


@pytest.mark.parametrize("variant", VARIANTS)
def test_mixed_per_axis_and_per_tensor_partners(cp, ref, rng, variant):
    M, K, N = 33, 70, 41
    a, b = _q(rng, (M, K), "uint8"), _q(rng, (K, N), "int8")
    rows = rng.uniform(0.5, 2, M).astype(np.float32)
    cols = rng.uniform(0.5, 2, N).astype(np.float32)
    for params in [(np.float32([0.7]), _q(rng, M, "uint8"), np.float32([1.1]), _q(rng, N, "int8"),
                    np.float32([300.0]), _q(rng, M, "int8")),
                   (rows, np.uint8([17]), cols, np.int8([-3]), rows * 400, np.int8([5]))]:
        run(cp, ref, variant, a, b, params, "int8")


SHAPES = [(1, 1, 1), (1, 1000, 1), (3, 17, 127), (17, 3, 1000), (127, 1000, 17), (1000, 127, 3),
          (127, 127, 127), (1000, 1, 1000), (64, 4096, 64), (128, 64, 128), (257, 129, 255),
          (1000, 1000, 1000), (2, 35, 300)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_shapes(cp, ref, rng, variant, M, K, N):
    ta, tb, to = COMBOS[(M + K + N) % 8]
    M, K, N = _dim(M), _dim(K, 600), _dim(N)
    a, b = _q(rng, (M, K), ta), _q(rng, (K, N), tb)
    run(cp, ref, variant, a, b, _params(rng, M, N, K, ta, tb, to, True, True, True), to)


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_broadcasting(cp, ref, rng, variant):
    cases = [((2, 3, 17, 40), (2, 3, 40, 9)), ((17, 40), (5, 40, 9)), ((5, 17, 40), (40, 9)),
             ((4, 1, 17, 40), (1, 3, 40, 9)), ((2, 1, 3, 1, 17, 40), (1, 2, 1, 2, 40, 9)),
             ((1, 1, 17, 40), (1, 40, 9))]
    for a_shape, b_shape in cases:
        a, b = _q(rng, a_shape, "int8"), _q(rng, b_shape, "uint8")
        run(cp, ref, variant, a, b, _params(rng, 17, 9, 40, "int8", "uint8", "uint8", True, True, True),
            "uint8")
    # Explicit stride-0 views (cupy.broadcast_to), the batch strides the kernel sees as 0.
    a, b = _q(rng, (17, 40), "uint8"), _q(rng, (3, 40, 9), "uint8")
    a_b = np.broadcast_to(a, (3, 17, 40))
    run(cp, ref, variant, a_b, b, _params(rng, 17, 9, 40, "uint8", "uint8", "int8"), "int8",
        gpu_a=cp.broadcast_to(cp.asarray(a), (3, 17, 40)))
    b2 = _q(rng, (40, 9), "int8")
    run(cp, ref, variant, np.broadcast_to(a, (2, 3, 17, 40)), np.broadcast_to(b2, (2, 3, 40, 9)),
        _params(rng, 17, 9, 40, "uint8", "int8", "int8"), "int8",
        gpu_a=cp.broadcast_to(cp.asarray(a), (2, 3, 17, 40)),
        gpu_b=cp.broadcast_to(cp.asarray(b2), (2, 3, 40, 9)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_strided_inputs(cp, ref, rng, variant):
    a_full = _q(rng, (3, 41, 90), "int8")
    b_full = _q(rng, (90, 70), "uint8")
    params = _params(rng, 20, 23, 43, "int8", "uint8", "uint8", True, False, True)
    views = [(lambda x: x[:, 1:41:2, 5:48], lambda x: x[3:46, 2:71:3]),    # odd offsets, B last stride 3
             (lambda x: x[:, ::-2, 1:44][:, :20], lambda x: x[::-1][:43, :23]),  # negative strides
             (lambda x: x[::-1, 1:21, 0:43], lambda x: x[4:47, 1:24])]
    for va, vb in views:
        a, b = va(a_full), vb(b_full)
        run(cp, ref, variant, a, b, params, "uint8", gpu_a=va(cp.asarray(a_full)), gpu_b=vb(cp.asarray(b_full)))
    # A with a non-unit last stride (copied by the launcher).
    at = _q(rng, (43, 20), "int8")
    b = _q(rng, (43, 23), "uint8")
    run(cp, ref, variant, at.T, b, params, "uint8", gpu_a=cp.asarray(at).T)


@pytest.mark.parametrize("variant", VARIANTS)
def test_noncontiguous_and_offset_outputs(cp, ref, rng, variant):
    M, K, N = 37, 61, 29
    a, b = _q(rng, (2, M, K), "uint8"), _q(rng, (K, N), "int8")
    params = _params(rng, M, N, K, "uint8", "int8", "int8", True, True, True)

    def transposed(shape, dt):
        buf = cp.empty((shape[0], shape[2], shape[1]), dt)
        return buf, buf.transpose(0, 2, 1)

    def every_other(shape, dt):
        buf = cp.empty(shape[:-1] + (2 * shape[-1] + 1,), dt)
        return buf, buf[..., 1::2]

    def offset(shape, dt):
        buf = cp.empty((shape[0] + 1, shape[1] + 2, shape[2] + 5), dt)
        return buf, buf[1:, 1:-1, 3:-2]

    def batch_minor(shape, dt):
        buf = cp.empty((shape[1], shape[0], shape[2]), dt)
        return buf, buf.transpose(1, 0, 2)

    def reversed_rows(shape, dt):
        buf = cp.empty(shape, dt)
        return buf, buf[:, ::-1]

    for make_out in (transposed, every_other, offset, batch_minor, reversed_rows):
        run(cp, ref, variant, a, b, params, "int8", make_out=make_out)


@pytest.mark.parametrize("variant", VARIANTS)
def test_saturation_and_special_scales(cp, ref, rng, variant):
    M, K, N = 40, 300, 36
    for ta, tb, to in COMBOS:
        a, b = _q(rng, (M, K), ta), _q(rng, (K, N), tb)
        a_s = rng.uniform(0.5, 2, M).astype(np.float32)
        a_s[:4] = [np.inf, np.nan, 0.0, 1e-45]          # Inf, NaN, zero and subnormal rows
        b_s = rng.uniform(0.5, 2, N).astype(np.float32)
        o_s = rng.uniform(0.5, 50, M).astype(np.float32)  # most results saturate
        o_s[4:6] = [0.0, np.inf]
        params = (a_s, _q(rng, M, ta), b_s, _q(rng, N, tb), o_s, _q(rng, M, to))
        got = run(cp, ref, variant, a, b, params, to)
        info = np.iinfo(to)
        assert (got == info.min).any() and (got == info.max).any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_k_zero(cp, ref, rng, variant):
    a = np.empty((5, 0), np.uint8)
    b = np.empty((0, 6), np.int8)
    params = (np.float32([1.0, np.inf, 0.0, np.nan, 2.0]), np.uint8([3]), np.float32([1.0]), np.int8([-2]),
              np.float32([1.0]), np.int8([1, 2, 3, 4, -128]))
    run(cp, ref, variant, a, b, params, "int8")


def test_size_zero_returns_at_once(cp):
    """Issue 24, defect 6: this test patched matmul.device.launch, which no longer
    exists (launches go through device.kernel), and its check could not fail.
    Every launch now passes dmlq.gpu.plan.execute, whose recording sees it."""
    from dmlq.gpu import plan as plan_module

    with plan_module.recording() as plans:
        for m, n, batch in [(0, 3, ()), (3, 0, ()), (2, 2, (0,))]:
            out = cp.empty(batch + (m, n), cp.int8)
            a = cp.zeros(batch + (m, 4), cp.int8)
            b = cp.zeros(batch + (4, n), cp.int8)
            one = cp.ones(1, cp.float32)
            assert qmm.quantized_matmul(a, one, None, b, one, None, one, None, out) is out
        assert [p for p in plans if p.launches] == []
        one = cp.ones(1, cp.float32)
        qmm.quantized_matmul(cp.zeros((1, 4), cp.int8), one, None, cp.zeros((4, 1), cp.int8), one, None, one,
                                None, cp.empty((1, 1), cp.int8))
        assert [p for p in plans if p.launches] != []  # the recording sees a launch


@pytest.mark.parametrize("variant", VARIANTS + [pytest.param(None, id="selected")])
@pytest.mark.parametrize("K", [32768, 33025, 33026])
def test_worst_case_k(cp, ref, rng, variant, K):
    cases = matmul_worst_cases(K, rng, both_zero_points=True)
    if on_stand_in():  # K-long tiles on the CPU: the selected variant, one uniform and one cancelling case
        if variant is not None:
            pytest.skip("every variant at these K: tests/test_select_matmul.py on the host harness")
        cases = [cases[0], cases[-1]]
    for args, to in cases:
        a, b, params = args[0], args[3], args[1:3] + args[4:]
        if K > matmul.WIDE_K and variant not in (None, "dp4a-wide"):
            with pytest.raises(ValueError):
                run(cp, ref, variant, a, b, params, to)
        else:
            run(cp, ref, variant, a, b, params, to)


@pytest.mark.parametrize("K", [32769, 65536, 65536 + 17, 100003])
def test_wide_random(cp, ref, rng, K):
    if on_stand_in() and K != 65536 + 17:
        pytest.skip("one K of several wide chunks on the stand-in (the host runs every thread)")
    M, N = _dim(70, 9), _dim(66, 9)
    for ta, tb, to in COMBOS[::3]:
        a, b = _q(rng, (M, K), ta), _q(rng, (K, N), tb)
        run(cp, ref, "dp4a-wide", a, b, _params(rng, M, N, K, ta, tb, to, True, True, True), to)
        run(cp, ref, None, a, b, _params(rng, M, N, K, ta, tb, to, zps=(True, False, True)), to)


@pytest.mark.parametrize("variant", VARIANTS)
def test_random_at_the_int32_limit(cp, ref, rng, variant):
    K, M, N = matmul.WIDE_K, _dim(130, 17), _dim(70, 9)
    a, b = _q(rng, (M, K), "uint8"), _q(rng, (K, N), "uint8")
    run(cp, ref, variant, a, b, _params(rng, M, N, K, "uint8", "uint8", "uint8", True, True, True),
        "uint8")


@pytest.mark.parametrize("variant", VARIANTS)
def test_non_default_stream_and_graph_capture(cp, ref, rng, variant):
    M, K, N = 150, 200, 70
    a, b = _q(rng, (2, M, K), "int8"), _q(rng, (K, N), "uint8")
    params = _params(rng, M, N, K, "int8", "uint8", "int8", True, True, True)
    expect = ref.quantized_matmul(a, *params[:2], b, *params[2:], np.empty((2, M, N), np.int8))
    dev = [None if x is None else cp.asarray(x) for x in (a, *params[:2], b, *params[2:])]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        out = cp.empty((2, M, N), cp.int8)
        out[...] = 0x55
        qmm.quantized_matmul(*dev, out, variant=variant)
        got = cp.asnumpy(out, stream=stream)
        stream.synchronize()
    np.testing.assert_array_equal(got, expect)
    # Capture: any launch on another stream or any synchronization inside the
    # call makes capture fail.
    with stream:
        out[...] = 0x55
        stream.synchronize()
        stream.begin_capture()
        try:
            qmm.quantized_matmul(*dev, out, variant=variant)
        finally:
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), expect)


@pytest.mark.parametrize("variant", VARIANTS)
def test_64bit_addressing(cp, ref, variant):
    """A holds more than 2**31 elements: rows past 2**31 / lda need 64-bit addresses."""
    M, K, N = 65600, matmul.WIDE_K, 8   # row 65536 starts at byte 2**31
    free, _ = cp.cuda.runtime.memGetInfo()
    if free < 4 * 2**30:
        pytest.skip("needs ~4 GiB of free GPU memory")
    a = cp.empty((M, K), cp.uint8)
    for i in range(0, M, 4096):
        a[i:i + 4096] = cp.random.randint(0, 256, (min(4096, M - i), K), dtype=cp.int32).astype(cp.uint8)
    rng = np.random.default_rng(7)
    b = _q(rng, (K, N), "int8")
    a_s = rng.uniform(0.5, 2, M).astype(np.float32)
    o_s = (rng.uniform(0.5, 2, M) * 4000).astype(np.float32)
    b_s, b_zp, a_zp = np.float32([1.0]), _q(rng, N, "int8"), np.uint8([128])
    out = cp.full((M, N), 0x55, cp.int8)
    qmm.quantized_matmul(a, cp.asarray(a_s), cp.asarray(a_zp), cp.asarray(b), cp.asarray(b_s),
                            cp.asarray(b_zp), cp.asarray(o_s), None, out, variant=variant)
    got = cp.asnumpy(out)
    for rows in (slice(0, 64), slice(65530, 65540), slice(M - 64, M)):
        a_host = cp.asnumpy(a[rows])
        expect = ref.quantized_matmul(a_host, a_s[rows], a_zp, b, b_s, b_zp, o_s[rows], None,
                                      np.empty((a_host.shape[0], N), np.int8))
        np.testing.assert_array_equal(got[rows], expect)


def test_out_of_memory_raises_cupys_error_and_leaves_out_untouched(cp, rng):
    """A call whose temporaries do not fit raises CuPy's OutOfMemoryError through the public
    API, and the user's ``out`` keeps every poisoned byte: the temporaries (the column sums and
    the tensor cores' split-K partial sums at this shape) are all allocated before the first
    launch. The limit is set on a fresh pool (``using_allocator``) to one byte less than the
    temporaries took there: a pool that a long process has used holds split blocks whose free
    parts serve a temporary without a new allocation, so a limit on it need not apply (the
    H200's run of 2026-11-27, reproduced here by splitting a block first). With the limit lifted,
    the same call gives the reference's answer."""
    import dmlq

    M, K, N = 40, 2048, 72  # one output tile: K split for the tensor cores (or the dp4a tiles)
    a, b = _q(rng, (M, K), "uint8"), _q(rng, (K, N), "int8")
    args = (0.02, np.uint8(3), cp.asarray(b), 0.01, np.int8(-7), 0.8, np.int8(2))
    da, out = cp.asarray(a), cp.empty((M, N), np.int8)
    expect = dmlq.quantized_matmul(a, *args[:2], b, *args[3:])
    plan = dmlq.kernel_plan(dmlq.quantized_matmul, da, *args)
    assert len(plan.launches) > 1, plan  # temporaries to allocate
    big = cp.empty(1 << 22, np.uint8)
    del big
    keep = cp.empty(16, np.uint8)  # its block is cut from big's: 4 MiB of free, unreleasable pool
    dmlq.quantized_matmul(da, *args, out=out)  # plans, device constants, the workspace: made now
    cp.cuda.get_current_stream().synchronize()
    fresh = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(fresh.malloc):
        dmlq.quantized_matmul(da, *args, out=out)  # the temporaries alone come from the fresh pool
        cp.cuda.get_current_stream().synchronize()
        need = fresh.total_bytes()
        assert need > 0, "the call allocated no temporary"
        fresh.free_all_blocks()
        assert fresh.total_bytes() == 0
        out.fill(0x5A)
        fresh.set_limit(size=need - 1)
        for _ in range(2):  # twice: a failed call keeps no temporary that would let the next one through
            with pytest.raises(cp.cuda.memory.OutOfMemoryError):
                dmlq.quantized_matmul(da, *args, out=out)
        cp.cuda.get_current_stream().synchronize()
        assert (cp.asnumpy(out).view(np.uint8) == 0x5A).all()
        fresh.set_limit(size=0)
        np.testing.assert_array_equal(cp.asnumpy(dmlq.quantized_matmul(da, *args, out=out)), expect)
    del keep


def test_two_threads_on_two_streams_match_sequential_calls(cp, rng):
    """Calls from two threads, each on its own non-blocking stream, through the
    public API: matmul's row and column sums live in a workspace per thread and
    stream, so concurrent calls of one signature never share them."""
    import threading

    import dmlq

    M, K, N, rounds = 96, 300, 80, 40 if not on_stand_in() else 3
    inputs = [(_q(rng, (M, K), "uint8"), _q(rng, (K, N), "int8")) for _ in range(2 * rounds)]
    expect = [dmlq.quantized_matmul(a, 0.02, np.uint8(3), b, 0.01, np.int8(-7), 0.8, np.int8(2))
              for a, b in inputs]
    got = [None] * len(inputs)
    errors = []

    def worker(first):
        try:
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                dev = [(cp.asarray(a), cp.asarray(b)) for a, b in inputs[first::2]]
                outs = [dmlq.quantized_matmul(a, 0.02, np.uint8(3), b, 0.01, np.int8(-7), 0.8, np.int8(2))
                        for a, b in dev]
                stream.synchronize()
            for j, out in enumerate(outs):
                got[first + 2 * j] = cp.asnumpy(out)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (g, e) in enumerate(zip(got, expect)):
        np.testing.assert_array_equal(g, e, err_msg=f"call {i}")
