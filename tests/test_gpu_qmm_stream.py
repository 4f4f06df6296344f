"""quantized_matmul with a packed 4-bit b at M <= 16: the weight-streaming kernel
(cuda/matmul_stream_packed.cu, stream-m1 / -m4 / -m16), run by the host harness through
dmlq.quantized_matmul on arrays of the cupy stand-in, into poisoned outputs, byte for byte
against the NumPy reference; each call asserts that the stream kernel ran."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlq
from test_api_gpu_path import gpu  # noqa: F401  (the stand-in fixture)
from test_gpu_intmm import q
from test_gpu_intmm_tiled import same

I8, U8, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.float32, np.float16))
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)


def kern(mt=""):
    return f"matmul_stream_packed<" if not mt else None


@pytest.mark.parametrize("m,k,n", [(1, 37, 5), (16, 64, 8)])
def test_smoke(gpu, m, k, n):
    rng = np.random.default_rng(1)
    a, b = q(rng, U8, (m, k)), dmlq.pack(q(rng, I4, (k, n)))
    with np.errstate(all="ignore"):
        same(dmlq.quantized_matmul, a, rng.uniform(0, 0.1, (m, 1)).astype(F32), q(rng, U8, (m, 1)), b,
             rng.uniform(-0.1, 0.1, n).astype(F32), dmlq.pack(q(rng, I4, (n,))), np.float32(0.5), np.int8(-3),
             kernel="matmul_stream_packed<")
