"""The benchmark workloads: every group ``op/dtype/shape`` the pytest-benchmark
tests in bench/ time, and the quick groups ``python -m dmlq bench`` times (each
quick group is one of the full suite's, marked ``quick``).
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark group ``op/dtype/shape``; ``p`` holds the workload's parameters."""

    op: str
    dtype: str
    shape: str
    p: dict = dataclasses.field(compare=False, hash=False)
    quick: bool = False
    rounds: int = 10
    round_s: float = 0.02

    @property
    def group(self):
        return f"{self.op}/{self.dtype}/{self.shape}"

    @property
    def unit(self):
        return unit_of(self.group)


def unit_of(group):
    return "TOPS" if group.split("/", 1)[0] == "matmul" else "GB/s"


MiB = 1 << 20
COLS = 4096


def elementwise_case(op, dtype, in_dtype, nbytes, axis=None, quick=False, **p):
    """An element-wise group over a (rows, 4096) array of ``nbytes`` of (first) input."""
    rows = nbytes // np.dtype(in_dtype).itemsize // COLS
    shape = f"{rows}x{COLS}" + (":axis1" if axis else "")
    return Case(op, dtype, shape, dict(shape=(rows, COLS), axis=axis, **p), quick=quick)


OVERHEAD_N = 1024


def matmul_case(m, n, k, quick=False):
    """int8 x int8 -> int8, zero points omitted (what torch._int_mm supports)."""
    return Case("matmul", "int8", f"M={m},N={n},K={k}", dict(M=m, N=n, K=k), quick=quick)


def pool_out_size(n, w, s, sp, ep):
    return (n + sp + ep - w) // s + 1


def avgpool_case(label, shape, window, strides, pad, quick=False, channels_last=False):
    """A uint8 pooling group; ``pad`` is both the start and the end padding; ``channels_last``:
    input and output in (N, H, W, C) memory order (the NCHW shape a torch channels_last tensor has)."""
    out = tuple(pool_out_size(n, w, s, p, p) for n, w, s, p in zip(shape[2:], window, strides, pad))
    return Case("avgpool", "uint8", label, dict(shape=shape, window=window, strides=strides, pad=pad,
                                                  out=shape[:2] + out, channels_last=channels_last), quick=quick)


def overhead_case():
    return Case("overhead", "float32->uint8", str(OVERHEAD_N), dict(n=OVERHEAD_N), quick=True,
                rounds=200, round_s=0.002)


def quick_cases():
    """The groups ``python -m dmlq bench`` times: one or more per operator family.

    The full suite's workloads (bench/workloads.py, not installed) include these.
    """
    return [
        elementwise_case("quantize", "float32->uint8", "float32", 256 * MiB, quick=True, x="float32", q="uint8"),
        elementwise_case("dequantize", "uint8->float32", "uint8", 256 * MiB, quick=True, q="uint8", y="float32"),
        elementwise_case("add", "uint8+uint8->uint8", "uint8", 256 * MiB, quick=True, a="uint8", b="uint8",
                         q="uint8"),
        matmul_case(4096, 4096, 4096, quick=True),
        matmul_case(16, 4096, 14336, quick=True),
        matmul_case(2048, 14336, 4096, quick=True),
        avgpool_case("256x256x56x56:k2s2", (256, 256, 56, 56), (2, 2), (2, 2), (0, 0), quick=True),
        avgpool_case("8x64x16x56x56:k2s2", (8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2), (0, 0, 0), quick=True),
        overhead_case(),
    ]


_QUICK = {c.group for c in quick_cases()}


def _quick(case):
    """``case`` marked quick when ``python -m dmlq bench`` times it too."""
    return dataclasses.replace(case, quick=case.group in _QUICK)


def elementwise_cases():
    """Quantize / dequantize / add with 256 MiB and 1 GiB of (first) input."""
    ew = elementwise_case
    cases = []
    for nbytes in (256 * MiB, 1024 * MiB):
        cases += [
            ew("quantize", "float32->uint8", "float32", nbytes, x="float32", q="uint8"),
            ew("quantize", "float16->int8", "float16", nbytes, x="float16", q="int8"),
            ew("dequantize", "uint8->float32", "uint8", nbytes, q="uint8", y="float32"),
            ew("dequantize", "int8->float16", "int8", nbytes, q="int8", y="float16"),
            ew("add", "uint8+uint8->uint8", "uint8", nbytes, a="uint8", b="uint8", q="uint8"),
            ew("add", "int8+uint8->int8", "uint8", nbytes, a="int8", b="uint8", q="int8"),
        ]
    cases += [  # per-axis scale and zero point (a (1, 4096) row vector)
        ew("quantize", "float32->uint8", "float32", 256 * MiB, axis=1, x="float32", q="uint8"),
        ew("dequantize", "uint8->float32", "uint8", 256 * MiB, axis=1, q="uint8", y="float32"),
    ]
    return [_quick(c) for c in cases]


def dynquant_cases():
    """dynamic_quantize_linear on 256 MiB of float32 (ONNX's uint8) and of float16 (int8); per
    row (per token) on the same and on a decode step's 16 rows (latency, not bandwidth)."""
    return [Case("dynquant", "float32->uint8", "16384x4096", dict(shape=(16384, COLS), x="float32", q="uint8")),
            Case("dynquant", "float16->int8", "32768x4096", dict(shape=(32768, COLS), x="float16", q="int8")),
            Case("dynquant", "float32->uint8:rows", "16384x4096",
                 dict(shape=(16384, COLS), x="float32", q="uint8", per_row=True)),
            Case("dynquant", "float16->int8:rows", "32768x4096",
                 dict(shape=(32768, COLS), x="float16", q="int8", per_row=True)),
            Case("dynquant", "float16->int8:rows", "16x4096", dict(shape=(16, COLS), x="float16", q="int8", per_row=True))]


LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336))


def matmul_cases():
    """int8 x int8 -> int8, zero points omitted (what torch._int_mm supports)."""
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    shapes += [(m, n, k) for m in (1, 4, 16, 128, 2048) for n, k in LLM_NK]  # M = 1, 4: the small-M crossovers
    return [_quick(matmul_case(m, n, k)) for m, n, k in shapes]


POOLS = (  # label, input shape, window, strides, padding (start = end)
    ("64x64x112x112:k3s2p1", (64, 64, 112, 112), (3, 3), (2, 2), (1, 1)),
    ("256x256x56x56:k2s2", (256, 256, 56, 56), (2, 2), (2, 2), (0, 0)),
    ("64x256x56x56:k3s1p1", (64, 256, 56, 56), (3, 3), (1, 1), (1, 1)),
    ("8x64x16x56x56:k2s2", (8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2), (0, 0, 0)),
    ("256x256x56x56:k2s2:nhwc", (256, 256, 56, 56), (2, 2), (2, 2), (0, 0), False, True),
    ("64x256x56x56:k3s1p1:nhwc", (64, 256, 56, 56), (3, 3), (1, 1), (1, 1), False, True),
    # global average pooling (a window of the whole image) of channels_last tensors
    ("64x256x56x56:global:nhwc", (64, 256, 56, 56), (56, 56), (1, 1), (0, 0), False, True),
    ("64x2048x7x7:global:nhwc", (64, 2048, 7, 7), (7, 7), (1, 1), (0, 0), False, True),
)


def avgpool_cases():
    return [_quick(avgpool_case(*p)) for p in POOLS]


def overhead_cases():
    return [overhead_case()]


GRAPH_SHAPE = (256, 1024)
GRAPH_REPEAT = 4


def graph_cases():
    r, c = GRAPH_SHAPE
    return [Case("graph", "float32->uint8->float32", f"{r}x{c}:x{GRAPH_REPEAT}",
                   dict(shape=GRAPH_SHAPE, repeat=GRAPH_REPEAT), rounds=50, round_s=0.005)]


def all_cases():
    return (elementwise_cases() + dynquant_cases() + matmul_cases() + avgpool_cases() + overhead_cases()
            + graph_cases())


def find_case(group):
    for case in all_cases():
        if case.group == group:
            return case
    raise KeyError(group)
