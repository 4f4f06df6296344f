"""An 8-bit b held K-major at M <= 16: the transposed view of an (N, K) weight (torch's Linear
keeps its weight so, and ``x @ w.T`` passes it), read as it is by the weight-streaming kernels
of cuda/matmul_stream_packed.cu (b's tag ``kmajor_int8`` / ``kmajor_uint8``: each column's 64
bytes of a stage copied as they are, its k-words its own bytes), where the row-major path
would copy b to a row-major array first (two more passes over the weight). Run by the host
harness through the public functions on arrays of the cupy stand-in, into poisoned outputs,
byte for byte against the same call on NumPy arrays (tied to dmlq.reference by
tests/test_gpu_stream8.py's row-major cases); each call asserts the kernel and that b was not
copied. Columns 16 bytes apart with K cut inside a 16-byte vector, inside a stage and past
several stages, N cut inside the last 64-column block, split K, batches with per-batch b
parameters and a b broadcast over a's batch, every operator and zero-point form; a K-major b
whose columns are not 16 bytes apart is still copied."""
from __future__ import annotations

import numpy as np
import pytest

import dmlq
import cupy_stand_in as S
from conftest import assert_same, poison
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import dev, q
from test_gpu_intmm_tiled import kernels, launched

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
PAIRS = ((U8, I8), (I8, U8), (U8, U8), (I8, I8))


def mt(m):
    return next(r for r in (1, 4, 16) if m <= r)


def km(dt):
    return f"kmajor_{dt.name}"


def kmajor(rng, dt, shape, pad=16):
    """b of ``shape`` (..., K, N) held K-major, columns ``pad``-rounded bytes apart: (the NumPy
    view, the same view of a device copy)."""
    *batch, k, n = shape
    held = q(rng, dt, (*batch, n, -(-max(k, 1) // pad) * pad))
    return held[..., :k].swapaxes(-1, -2), S.module.asarray(held)[..., :k].swapaxes(-1, -2)


def same(fn, a, b, rest, kernel, *, prefix=False, plan_ok=None, **kwargs):
    """fn(a, b-pair, ...) on the stand-in, into a poisoned out and a fresh array, equals fn on
    NumPy arrays byte for byte; ``kernel`` ran (its full name, or with ``prefix`` a prefix of
    it); the plan passes ``plan_ok(text)`` (default: b read K-major, not copied). A pair in
    ``rest`` is (host value, device value); any other value is moved to the device."""
    b_host, b_dev = b
    pos = {"quantized_matmul": 3, "matmul_integer": 1, "matmul_integer_to_float": 3}[fn.__name__]
    host = [a, *rest]
    host.insert(pos, b_host)
    on_dev = [b_dev if i == pos else v[1] if isinstance(v, tuple) else dev(v) for i, v in enumerate(host)]
    host = [v[0] if isinstance(v, tuple) else v for v in host]
    with np.errstate(all="ignore"):
        want = fn(*host, **kwargs)
        out = S.module.asarray(poison(np.empty(want.shape, want.dtype)))
        S.launches.clear()
        got = fn(*on_dev, **kwargs, out=out)
    assert got is out
    assert_same(got.get(), want)
    assert any(n.startswith(kernel) for n, *_ in S.launches) if prefix else launched(kernel), kernels()
    text = str(dmlq.kernel_plan(fn, *on_dev, **kwargs))
    assert (plan_ok or (lambda t: "K-major" in t and "b copied" not in t))(text), text
    assert_same(fn(*on_dev, **kwargs).get(), want)


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (2, 37, 5), (3, 200, 64), (4, 16, 96), (5, 3, 33), (7, 130, 160),
                                   (11, 65, 7), (16, 129, 128), (1, 700, 48)])
def test_quantized_matmul(gpu, m, k, n):
    """Every (a, b) type pair and both outputs; per-row a and out parameters, per-column b ones,
    single values, no zero points."""
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    for i, (ta, tb) in enumerate(PAIRS):
        to = (I8, U8)[i % 2]
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        quantized_forms(same, rng, m, ta, tb, to, a, b, q(rng, tb, (n,)), tb.type(q(rng, tb, ())))


def quantized_forms(same, rng, m, ta, tb, to, a, b, b_zp_cols, b_zp_one, kernel=None):
    """quantized_matmul of ``a`` and ``b`` through ``same`` in three forms: per-row a and out
    parameters with per-column b ones (zero point ``b_zp_cols``), single values (``b_zp_one``),
    no zero points (uint8 out); ``kernel(out dtype)`` names the kernel (default: the stream
    kernel's, from b's K-major tag)."""
    n = b[0].shape[-1]
    kernel = kernel or (lambda t: f"matmul_stream_packed<{ta.name}, {km(tb)}, {t.name}, {mt(m)}>")
    same(dmlq.quantized_matmul, a, b, (rng.uniform(1e-3, 0.05, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                       rng.uniform(-0.05, 0.05, n).astype(F32), b_zp_cols,
                                       rng.uniform(0.05, 1, (m, 1)).astype(F32), q(rng, to, (m, 1))), kernel(to))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), None, np.float32(1e-3), b_zp_one,
                                       np.float32(0.25), to.type(3)), kernel(to))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), ta.type(q(rng, ta, ())), np.float32(1e-3), None,
                                       np.float32(0.5), None), kernel(U8))


def float_forms(same, rng, ta, a, b, b_zp_row, kernel):
    """matmul_integer_to_float of ``a`` and ``b`` through ``same`` in two forms: float32 out with
    per-row a and per-column b parameters (zero point ``b_zp_row``, (1, N)) and an (M, N) bias;
    float16 out with single values and a per-column bias; ``kernel(out type name)`` names the
    kernel."""
    m, n = a.shape[-2], b[0].shape[-1]
    with np.errstate(all="ignore"):
        same(dmlq.matmul_integer_to_float, a, b, (rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                                  rng.uniform(-1, 1, n).astype(F16), b_zp_row,
                                                  rng.uniform(-50, 50, (m, n)).astype(F32)), kernel("float"))
        same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.01), None, np.float32(-3e-3), 5,
                                                  rng.uniform(-1, 1, n).astype(F16)), kernel("float16"), dtype=F16)


@pytest.mark.parametrize("m,k,n", [(1, 256, 64), (3, 200, 33), (4, 1000, 130), (16, 129, 9), (2, 33, 5)])
def test_integer_family(gpu, m, k, n):
    """matmul_integer (every zero-point form) and matmul_integer_to_float (one group of scales,
    float32 and float16 out, a bias) on the sums pass."""
    rng = np.random.default_rng(m * 7919 + k * 13 + n)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        name = f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>"
        for a_zp, b_zp in ((None, None), (q(rng, ta, (m, 1)), q(rng, tb, (n,))), (ta.type(7), tb.type(q(rng, tb, ())))):
            same(dmlq.matmul_integer, a, b, (a_zp, b_zp), name)
        float_forms(same, rng, ta, a, b, q(rng, tb, (1, n)), lambda _: name)


@pytest.mark.parametrize("m,k,n,block", [(1, 256, 64, 32), (3, 200, 33, 64), (4, 1000, 130, 96), (3, 300, 40, 48),
                                         (2, 300, 70, 40)])
def test_blocked_scales(gpu, m, k, n, block):
    """matmul_integer_to_float with blocked scales along K: groups of 32, 64, 96 (straddling
    stages), 48 and 40 (one chunk of K per group; 40: a chunk starting off 16 bytes in its
    columns, so its vectors take the byte path), each group's zero points from its row of the
    table."""
    rng = np.random.default_rng(m * 31 + k + n + block)
    groups = -(-k // block)
    for ta, tb in PAIRS[:2]:
        a, b = q(rng, ta, (m, k)), kmajor(rng, tb, (k, n))
        same(dmlq.matmul_integer_to_float, a, b, (rng.uniform(1e-3, 1, (m, 1)).astype(F32), q(rng, ta, (m, 1)),
                                                  rng.uniform(-1, 1, (groups, n)).astype(F32),
                                                  q(rng, tb, (groups, n)), rng.uniform(-9, 9, n).astype(F32)),
             f"matmul_stream_grouped<{ta.name}, {km(tb)}, {mt(m)}>", block_size=block)


def test_batches_broadcast_and_split_k(gpu):
    """A batch of K-major matrices with per-batch b scales and zero points beside a broadcast a; one
    K-major b beside a batch of a (batch stride 0); a long K over few columns (split K, the finish
    pass adds the chunks)."""
    rng = np.random.default_rng(5)
    a, b = q(rng, U8, (2, 1, 3, 300)), kmajor(rng, I8, (4, 300, 40))
    b_s, b_zp = rng.uniform(0, 0.1, (4, 1, 40)).astype(F32), q(rng, I8, (4, 1, 40))
    same(dmlq.quantized_matmul, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp, np.float32(0.5), I8.type(-3)),
         "matmul_stream_packed<uint8, kmajor_int8, int8, 4>")
    same(dmlq.matmul_integer_to_float, a, b, (np.float32(0.02), U8.type(100), b_s, b_zp),
         "matmul_stream_grouped<uint8, kmajor_int8, 4>")
    same(dmlq.matmul_integer, q(rng, I8, (3, 2, 70)), kmajor(rng, U8, (70, 24)), (I8.type(-4), U8.type(9)),
         "matmul_stream_grouped<int8, kmajor_uint8, 4>")
    a, b = q(rng, U8, (1, 6000)), kmajor(rng, U8, (6000, 16))
    text = str(dmlq.kernel_plan(dmlq.quantized_matmul, dev(a), np.float32(1), None, b[1], np.float32(1), None,
                                np.float32(4e4), None))
    assert "split-K" in text, text
    same(dmlq.quantized_matmul, a, b, (np.float32(1e-2), U8.type(128), np.float32(1e-2), U8.type(77),
                                       np.float32(40.0), U8.type(128)),
         "matmul_stream_packed<uint8, kmajor_uint8, uint8, 1>")
    assert launched("matmul_stream_packed_finish<uint8>"), kernels()


@pytest.mark.parametrize("ta,tb", PAIRS)
def test_extreme_sums(gpu, ta, tb):
    """|a - a_zp| = 255 times |b - b_zp| = 255 at every k, K = 4096 (split over chunks), both signs,
    exact as int32."""
    k, n = 4096, 3
    lo_a, hi_a = (0, 255) if ta == U8 else (-128, 127)
    lo_b, hi_b = (0, 255) if tb == U8 else (-128, 127)
    for av, za, bv, zb in ((hi_a, lo_a, hi_b, lo_b), (hi_a, lo_a, lo_b, hi_b)):
        held = np.full((n, k), bv, tb)
        b = held.T, S.module.asarray(held).T
        same(dmlq.matmul_integer, np.full((2, k), av, ta), b, (ta.type(za), tb.type(zb)),
             f"matmul_stream_grouped<{ta.name}, {km(tb)}, 4>")


def test_columns_off_16_bytes_are_copied(gpu):
    """A K-major b whose columns are 37 bytes apart, or whose start is 8 bytes off 16, is copied to
    rows first (the row-major kernel), not read K-major; the results are the same."""
    rng = np.random.default_rng(8)
    cases = [(q(rng, U8, (2, 37)), S.module.asarray(q(rng, I8, (9, 37))).T),
             (q(rng, U8, (3, 2, 37)), S.module.asarray(q(rng, I8, (3, 9, 48)))[:, :, 8:45].swapaxes(-1, -2))]
    for a, b in cases:
        text = str(dmlq.kernel_plan(dmlq.matmul_integer, dev(a), b))
        assert "b copied to a contiguous array" in text and "K-major" not in text, text
        want = dmlq.matmul_integer(a, S.module.asnumpy(b))
        assert_same(dmlq.matmul_integer(dev(a), b).get(), want)
