"""The integer matmul family: matmul_integer and matmul_integer_to_float (int8 and packed
int4/uint4 b), each with its peer in the same run.

    DMLQ_CPU_BENCH=1 python -m pytest bench/test_bench_intmm.py -m cpu --benchmark-json=...   # NumPy
    python -m pytest bench/test_bench_intmm.py --benchmark-json=...                            # + GPU

NumPy (marked ``cpu``; runs when asked, DMLQ_CPU_BENCH=1, and once on small inputs under
--benchmark-disable): ``dmlq:cpu`` (the public function on NumPy arrays) against
``peer:onnxruntime-cpu`` (one node, every operand an input, ORT's default threads):
MatMulInteger, com.microsoft.MatMulIntegerToFloat, and for packed 4-bit b
com.microsoft.MatMulNBits (float A = the integer A, the same weights in its layout).
``limit`` is the peer's median seconds; ``fraction_of_limit`` the peer's time over dmlq's.

GPU (skips without one): the decode step, M = 1, 4 and 16 rows against N = K = 8192 weights,
int8 and packed uint4 b with per-column scales (uint4: blocked, G = 128, and per column:
``uint8xpacked-uint4-col``), float16 out; and quantized_matmul with packed int4 b, M = 1, 4, 16
against N = K = 4096 and 8192 (and M = 64 and 1024 against 4096: the tensor-core tile); quantized_matmul with an int8 b and no zero points at M = 1 and 4
against N = 14336, K = 4096, the tensor cores forced beside auto, eagerly and in a graph.
``dmlq:auto`` (the public function, selection's kernel: at these M cuda/matmul_stream_packed.cu's
weight-streaming kernels for the packed b and the int8 b at M = 1 and 4 (the integer family's
sums pass, the grouped kernel for the blocks of 128 where its workspace fits, quantized_matmul's
requantizing kernel), the tensor cores for the int8 b at M = 16; the first H100 run labelled
these rows ``dmlq:stream``, when the integer family's ran cuda/matmul_stream.cu, and measured the
tiles after it), ``dmlq:dp4a-wide`` and ``dmlq:tiled`` (the tiles that served these calls before
the stream kernels, forced or by their own rule) beside it, against
``peer:torch._int_mm+dequantize`` (torch._int_mm needs M > 16 and K, N multiples of 8: a
rowss padded to 17 outside the timing, int8 weights even for the 4-bit groups, the int32
result scaled to float16 by a second kernel: what a user of torch does today) and
``peer:torch-f16-matmul`` (float16 weights: the speed a user gives up for the bytes). The
blocked packed b also at M = 512 and 2048 against N = K = 4096 (a prefill: ``dmlq:auto`` is the
tensor cores' ``mma-grouped``, ``dmlq:dp4a-wide`` forced beside it).
``dmlq:graph``: auto's call (``out=`` given) captured once in a CUDA graph and replayed, so the
row is the kernels' device time without the host's enqueue (the second H100 run: 50-94 us of
host time per call at these sizes, as long as the kernels) -- what a serving stack that
captures its decode step gets, and the row the bandwidth target judges the kernels by.
``dmlq:auto:bfloat16``: auto's call with a bfloat16 out (the int8 b and blocked packed b groups):
written by the grouped stream kernel's finish pass at M <= 16 and (session 45) by the tensor-core
tile of the int8 b past it; the blocked packed b past M = 16 writes a float32 temporary rounded by
CuPy's cast, so the row beside ``dmlq:auto`` prices that pass.
``dmlq:auto:w.T`` / ``dmlq:graph:w.T``: the same calls with the packed b held K-major
(``dmlq.pack(w).mT``, torch's and MatMulNBits' layout; the scales as in the other rows, so the
rows differ in b's layout alone), which the stream kernels read as it is (``kmajor_uint4`` / ``kmajor_int4``), at the
blocked groups and quantized_matmul's M = 1, N = K = 8192, and past the decode step, where the
tensor-core tile reads it (quantized_matmul, M = 64 and 1024, N = K = 4096; before session 39 it
was repacked to rows on every call there).
Unit GB/s of every byte read and written; ``limit``: this GPU's copy bandwidth in the
same session (bench.timing.copy_bandwidth), so ``fraction_of_limit`` is the share of it
(the issue's target: >= 0.85 for int8 and packed int4 b on an H100).
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import dmlq
from bench import timing

u8, i8, f32, f16 = np.uint8, np.int8, np.float32, np.float16
U4 = np.dtype(ml_dtypes.uint4)

# ------------------------------------------------------------------ NumPy against onnxruntime

CPU_GROUPS = {
    "matmul_integer/uint8xint8->int32/M=16,K=4096,N=4096": ("integer", 16, 4096, 4096),
    "matmul_integer_to_float/uint8xint8->float32/M=16,K=4096,N=4096": ("to_float", 16, 4096, 4096),
    "matmul_integer_to_float/int8xpacked-uint4->float32/M=1,K=4096,N=4096,G=128": ("nbits", 1, 4096, 4096),
}
CPU_IMPLS = ("peer:onnxruntime-cpu", "dmlq:cpu")
G = 128


def _ort_session(op, feeds, out_dtype, domain="", **attrs):
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    names = list(feeds)
    node = helper.make_node(op, names, ["out"], domain=domain or None, **attrs)
    tp = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, tp(v.dtype), v.shape)
                                           for n, v in feeds.items()],
                              [helper.make_tensor_value_info("out", tp(np.dtype(out_dtype)), None)])
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


class CpuWorkload:
    def __init__(self, group, smoke):
        kind, m, k, n = CPU_GROUPS[group]
        if smoke:
            m, k, n = min(m, 3), 256, 40
        rng = np.random.default_rng(0)
        self.kind, self.m, self.k, self.n = kind, m, k, n
        self.b_scale = (rng.random(n) * 0.01 + 1e-3).astype(f32)
        if kind == "nbits":
            self.a = rng.integers(-127, 128, (m, k)).astype(i8)
            self.b = rng.integers(0, 16, (k, n)).astype(U4)
            self.packed = dmlq.pack(self.b)
            self.scales = (rng.random((-(-k // G), n)) * 0.01 + 1e-3).astype(f32)
            b_bytes = self.packed.data.nbytes
        else:
            self.a = rng.integers(0, 256, (m, k)).astype(u8)
            self.b = rng.integers(-64, 64, (k, n)).astype(i8)
            b_bytes = self.b.nbytes
        out_itemsize = 4
        self.bytes = self.a.nbytes + b_bytes + m * n * out_itemsize
        self.ops = 2 * m * n * k

    def dmlq(self):
        a, b = self.a, self.b
        if self.kind == "integer":
            return lambda: dmlq.matmul_integer(a, b, u8(128), None)
        if self.kind == "to_float":
            return lambda: dmlq.matmul_integer_to_float(a, f32(0.02), u8(128), b, self.b_scale, None)
        return lambda: dmlq.matmul_integer_to_float(a, f32(1), None, self.packed, self.scales, 8, block_size=G)

    def onnxruntime(self):
        a, b = self.a, self.b
        if self.kind == "integer":
            return _ort_session("MatMulInteger", {"a": a, "b": b, "az": np.array(128, u8)}, np.int32)
        if self.kind == "to_float":
            feeds = {"a": a, "b": b, "a_scale": np.array(0.02, f32), "b_scale": self.b_scale,
                     "a_zero_point": np.array(128, u8)}
            return _ort_session("MatMulIntegerToFloat", feeds, f32, domain="com.microsoft")
        # MatMulNBits: B as (N, ceil(K / G), G / 2) bytes, low nibble first; scales column by column
        k, n = self.k, self.n
        groups = -(-k // G)
        col = np.zeros((n, groups * G), u8)
        col[:, :k] = self.b.astype(u8).T
        pairs = col.reshape(n, groups, G // 2, 2)
        feeds = {"A": a.astype(f32), "B": (pairs[..., 0] | (pairs[..., 1] << 4)).astype(u8),
                 "scales": np.ascontiguousarray(self.scales.T).reshape(-1)}
        return _ort_session("MatMulNBits", feeds, f32, domain="com.microsoft", K=k, N=n, bits=4, block_size=G)


_PEER_MEDIAN: dict = {}
CPU_CASES = [(g, i) for g in CPU_GROUPS for i in CPU_IMPLS]


@pytest.mark.cpu
@pytest.mark.benchmark(disable_gc=True)
@pytest.mark.parametrize("group, impl", CPU_CASES, ids=[f"{g}|{i}" for g, i in CPU_CASES])
def test_intmm_cpu(benchmark, smoke, group, impl):
    w = CpuWorkload(group, smoke)
    fn = w.onnxruntime() if impl.startswith("peer:") else w.dmlq()
    benchmark.group = group
    benchmark.pedantic(fn, rounds=10, iterations=1, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable: ran once
        return
    t = benchmark.stats.stats.median
    if impl.startswith("peer:"):
        _PEER_MEDIAN[group] = t
    limit = _PEER_MEDIAN.get(group)
    benchmark.extra_info.update({"impl": impl, "bytes": int(w.bytes), "ops": int(w.ops),
                                 "gb_per_s": w.bytes / t / 1e9, "tops": w.ops / t / 1e12, "limit": limit,
                                 "fraction_of_limit": (limit / t) if limit else None,
                                 "limit_is": "peer:onnxruntime-cpu median seconds, same run",
                                 "loadavg_1_5_15": os.getloadavg()})  # the machine is shared: how busy it was


# ------------------------------------------------------------------ GPU: the decode step

GPU_GROUPS = {f"matmul_integer_to_float/{b}/M={m},N=8192,K=8192": (b, m, 8192)
              for b in ("uint8xint8->float16", "uint8xpacked-uint4->float16") for m in (1, 4, 16)}
# quantized_matmul with packed int4 b at the decode step: cuda/matmul_stream_packed.cu (stream-m1 / -m4 /
# -m16, split along K to fill the SMs; the limit is b's N * K / 2 bytes at the copy bandwidth)
GPU_GROUPS.update({f"quantized_matmul/uint8xpacked-int4->int8/M={m},N={nk},K={nk}": ("qmm-int4", m, nk)
                   for nk in (4096, 8192) for m in (1, 4, 16)})
# past the decode step (a batch of sequences, a short prefill): the tensor-core tile reads the packed b,
# bound by its bytes at M = 64 (8 MiB, 2.5 us at 3.35 TB/s, against 1 us of int8 tensor peak), by the
# tensor cores at M = 1024 (8.6 Gop: 4.3 us at peak)
GPU_GROUPS.update({f"quantized_matmul/uint8xpacked-int4->int8/M={m},N=4096,K=4096": ("qmm-int4", m, 4096)
                   for m in (64, 1024)})
GPU_IMPLS = ("dmlq:auto", "peer:torch._int_mm+dequantize", "peer:torch-f16-matmul")
# packed uint4 b, per-column scales at M <= 16: auto is the stream kernel's sums pass (stream-m*)
GPU_GROUPS.update({f"matmul_integer_to_float/uint8xpacked-uint4-col->float16/M={m},N=8192,K=8192":
                   ("uint8xpacked-uint4-col->float16", m, 8192) for m in (1, 4, 16)})
# groups of 48 rows (not a multiple of 32): the grouped stream kernel with one chunk of K per group
# (171 chunks), which took them from matmul_stream.cu (1,033 us for this call's int8 twin on the H100)
ODD_G = 48
GPU_GROUPS[f"matmul_integer_to_float/uint8xpacked-uint4-g{ODD_G}->float16/M=1,N=8192,K=8192"] = \
    (f"uint8xpacked-uint4-g{ODD_G}->float16", 1, 8192)
# the prefill of a weight-only int4 layer (blocked packed uint4 b, G = 128) at M = 512 and 2048 against
# N = K = 4096: auto is the tensor cores' mma-grouped (session 41; 2.1 / 8.6 Gop, compute-bound: at most
# ~40% of the int8 tensor peak by its napkin math, the groups' conversions the bound), dp4a-wide (which
# served these calls before) forced beside it; the K-major rows (w.T, MatMulNBits' own tables) too
GPU_GROUPS.update({f"matmul_integer_to_float/uint8xpacked-uint4->float16/M={m},N=4096,K=4096": (
    "uint8xpacked-uint4->float16", m, 4096) for m in (512, 2048)})
# blocked packed b at M <= 16: auto is the grouped stream kernel (stream-grouped-m*); dp4a-wide, which
# served these calls before it, forced beside it for the crossover; per-column packed b, and int8 b
# at M = 1 and 4: the tiled rule's kernel (dp4a-32x32 there), which served them before the stream
# kernel, beside it. An int8 b at M = 16 with a's zero point: auto is stream-m16 (the H200, third
# run: 77.7 us, where the tensor cores with split-K took 168 us of device time behind 64 blocks of
# column sums); the tensor cores forced beside it (MMA16), their column sums now split along K,
# for that crossover.
WIDE, TILED, MMA16 = "dmlq:dp4a-wide", "dmlq:tiled", "dmlq:mma-128x128"
# quantized_matmul with an int8 b and no zero points at N = 14336, K = 4096, M = 1 and 4: the H200's
# whole suite timed auto (the stream kernel) at 97 / 82 us and the tensor cores forced at 57 / 61,
# both eagerly. Auto and the tensor cores each eagerly and in a graph (MMA_GRAPH), for that question.
QMM_I8 = "qmm-int8"
MMA_GRAPH = "dmlq:mma-128x128-graph"
GPU_GROUPS.update({f"quantized_matmul/uint8xint8->int8/M={m},N=14336,K=4096": (QMM_I8, m, 14336, 4096)
                   for m in (1, 4)})
# every group: auto captured in a CUDA graph and replayed (the device time without the host)
GRAPH = "dmlq:graph"
# a packed b held K-major (dmlq.pack(w).mT of an (N, K) weight: torch's and MatMulNBits' layout), which
# the stream kernels (M <= 16) and the tensor-core tile (M = 64, 1024: matmul_mma_kmajor4.cu) read as it
# is (kmajor_uint4 / kmajor_int4): beside the row-major b's rows, eagerly and replayed, at the groups
# MatMulNBits serves
WT, WT_GRAPH = "dmlq:auto:w.T", "dmlq:graph:w.T"
# MatMulNBits' own bytes as they are at the blocked decode groups (b K-major, scales the .T of an (N, groups)
# table, zero points a Packed (N, groups)'s .mT, made into the kernels' table by packed_table.cu in one
# launch): eagerly, beside dmlq:auto:w.T (the same b with a zero point of 8): the host's share of a call
NBITS = "dmlq:auto:nbits"
# MatMulNBits with bits=2 (session 46): its 2-bit bytes and zero points as they are, which each call widens to
# packed 4-bit (cuda/packed_table.cu widen_codes2) before the kernels NBITS runs; and the same weight held as
# 4-bit once (Packed.astype, outside the timing). Bytes counted: the weight's as the call is given it (2-bit,
# then 4-bit), so NBITS2's time against NBITS2_HELD4's is the widening's cost.
NBITS2, NBITS2_HELD4 = "dmlq:auto:nbits2", "dmlq:auto:nbits2-held4"
# The same calls with a bfloat16 out (session 44): at M <= 16 the grouped stream kernel's finish pass writes
# it, past that the float32 kernels write a temporary that CuPy's cast rounds; beside dmlq:auto (float16)
BF16_OUT = "dmlq:auto:bfloat16"
WT_GROUPS = [g for g, (b, m, *rest) in GPU_GROUPS.items()
             if b == "uint8xpacked-uint4->float16" or (b == "qmm-int4" and (m, *rest) in ((1, 8192), (64, 4096),
                                                                                       (1024, 4096)))]
GPU_CASES = [(g, i) for g in GPU_GROUPS for i in GPU_IMPLS] + [(g, GRAPH) for g in GPU_GROUPS] + \
    [(g, WIDE) for g, (b, *_) in GPU_GROUPS.items() if b == "uint8xpacked-uint4->float16"] + \
    [(g, TILED) for g, (b, m, *_) in GPU_GROUPS.items()
     if b == "uint8xpacked-uint4-col->float16" or (b == "uint8xint8->float16" and m < 16)] + \
    [(g, MMA16) for g, (b, m, *_) in GPU_GROUPS.items() if b == "uint8xint8->float16" and m == 16] + \
    [(g, i) for g, (b, *_) in GPU_GROUPS.items() if b == QMM_I8 for i in (MMA16, MMA_GRAPH)] + \
    [(g, i) for g in WT_GROUPS for i in (WT, WT_GRAPH)] + \
    [(g, i) for g, (b, *_) in GPU_GROUPS.items() if b == "uint8xpacked-uint4->float16"
     for i in (NBITS, NBITS2, NBITS2_HELD4)] + \
    [(g, BF16_OUT) for g, (b, *_) in GPU_GROUPS.items() if b in ("uint8xint8->float16", "uint8xpacked-uint4->float16")]
_COPY_BW: dict = {}


def _packed_b(k, n, dtype, kmajor):
    """A packed (K, N) b of random bytes: row-major, or (``kmajor``) held K-major, dmlq.pack(w).mT of an
    (N, K) weight."""
    data = timing.random_array((k * n // (4 if dtype.endswith("2") else 2),), u8, 2)
    return dmlq.Packed(data, (n, k), dtype).mT if kmajor else dmlq.Packed(data, (k, n), dtype)


def _auto_call(b_kind, a, a_scale, m, n, k, out_bytes, kmajor=False, nbits=0, odt=f16, held4=False):
    """(call(out=None), bytes moved, out dtype): the public function as a user calls it;
    ``kmajor``: a packed b held K-major; ``nbits`` 4 or 2: blocked, with MatMulNBits' own tables (NBITS,
    NBITS2; ``held4``: its 2-bit weight held as 4-bit once, NBITS2_HELD4); ``odt``: matmul_integer_to_float's
    output type (float16, or bfloat16: BF16_OUT)."""
    import cupy

    if nbits:
        groups = -(-k // G)
        per = 8 // nbits  # values a byte
        name = f"uint{nbits}"
        b = _packed_b(k, n, name, True)
        b_s = cupy.full((n, groups), 1e-3, f32).T
        zrow = -(-groups // per) * per
        zp = dmlq.Packed(timing.random_array((n * zrow // per,), u8, 2), (n, zrow), name).mT[..., :groups, :]
        if held4:
            b, zp = b.astype("uint4"), zp.astype("uint4")
        return (lambda out=None: dmlq.matmul_integer_to_float(a, a_scale, u8(128), b, b_s, zp, dtype=odt,
                                                              block_size=G, out=out),
                a.nbytes + b.data.nbytes + b_s.nbytes + zp.data.nbytes + out_bytes, odt)

    packed = "uint4" in b_kind
    if b_kind == QMM_I8:  # no zero points: nothing for the tiles to sum first
        b = timing.random_array((k, n), i8, 2)
        b_s = cupy.full(n, 1e-3, f32)
        return (lambda out=None: dmlq.quantized_matmul(a, a_scale, None, b, b_s, None, f32(0.05), i8(0), out=out),
                a.nbytes + b.nbytes + b_s.nbytes + m * n, i8)
    if b_kind == "qmm-int4":
        b = _packed_b(k, n, "int4", kmajor)
        b_s = cupy.full(n, 1e-3, f32)
        return (lambda out=None: dmlq.quantized_matmul(a, a_scale, u8(128), b, b_s, 0, f32(0.05), i8(0), out=out),
                a.nbytes + b.data.nbytes + b_s.nbytes + m * n, i8)
    if packed and b_kind.endswith("-col->float16"):
        b = dmlq.Packed(timing.random_array((k * n // 2,), u8, 2), (k, n), "uint4")
        b_s = cupy.full(n, 1e-3, f32)
        return (lambda out=None: dmlq.matmul_integer_to_float(a, a_scale, u8(128), b, b_s, 8, dtype=odt, out=out),
                a.nbytes + b.data.nbytes + b_s.nbytes + out_bytes, odt)
    if packed:
        g = ODD_G if f"-g{ODD_G}->" in b_kind else G
        b = _packed_b(k, n, "uint4", kmajor)
        b_s = cupy.full((-(-k // g), n), 1e-3, f32)  # (K-major b too: the rows then differ in b alone)
        return (lambda out=None: dmlq.matmul_integer_to_float(a, a_scale, u8(128), b, b_s, 8, dtype=odt,
                                                              block_size=g, out=out),
                a.nbytes + b.data.nbytes + b_s.nbytes + out_bytes, odt)
    b = timing.random_array((k, n), i8, 2)
    b_s = cupy.full(n, 1e-3, f32)
    return (lambda out=None: dmlq.matmul_integer_to_float(a, a_scale, u8(128), b, b_s, None, dtype=odt, out=out),
            a.nbytes + b.nbytes + b_s.nbytes + out_bytes, odt)


def _replayed(call, out):
    """``call(out)`` captured once in a CUDA graph and replayed on the current stream: the
    kernels' device time without the host's enqueue (what a serving stack that captures its
    decode step gets). The capture runs on a side stream after one eager call there (plans,
    kernels, the pool's blocks and the workspace made before it); the replay's output is
    checked against the eager call's first."""
    import cupy

    side = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.get_current_stream().synchronize()
    with side:
        call(out)
        eager = out.copy()
        side.synchronize()
        side.begin_capture()
        try:
            call(out)
        finally:
            graph = side.end_capture()
    out.fill(0)
    graph.launch()
    if not bool(cupy.array_equal(out, eager)):
        raise AssertionError("the graph replay differs from the eager call")
    return graph.launch


def _gpu_call(group, impl):
    """(fn, bytes moved, ops) for one GPU result, inputs made on the device."""
    import cupy

    b_kind, m, n, *rest = GPU_GROUPS[group]
    k = rest[0] if rest else n
    packed = "uint4" in b_kind
    per_col = b_kind.endswith("-col->float16")
    a = timing.random_array((m, k), u8, 1)
    a_scale = cupy.full((m, 1), 0.02, f32)
    ops = 2 * m * n * k
    out_bytes = m * n * 2
    if impl in ("dmlq:auto", GRAPH, WT, WT_GRAPH, NBITS, NBITS2, NBITS2_HELD4, BF16_OUT):
        call, nbytes, out_dtype = _auto_call(b_kind, a, a_scale, m, n, k, out_bytes, kmajor=impl in (WT, WT_GRAPH),
                                             nbits={NBITS: 4, NBITS2: 2, NBITS2_HELD4: 2}.get(impl, 0),
                                             odt=np.dtype(ml_dtypes.bfloat16) if impl == BF16_OUT else f16,
                                             held4=impl == NBITS2_HELD4)
        if impl in (GRAPH, WT_GRAPH):
            return _replayed(call, cupy.empty((m, n), out_dtype)), nbytes, ops
        return call, nbytes, ops
    if b_kind == QMM_I8 and impl in (MMA16, MMA_GRAPH):  # the tensor cores forced through the backend
        from dmlq.gpu import qmm

        b = timing.random_array((k, n), i8, 2)
        a_s, b_s, o_s = (cupy.full((1,), v, f32) for v in (0.02, 1e-3, 0.05))
        out = cupy.empty((m, n), i8)

        def forced(dst=None):
            return qmm.quantized_matmul(a, a_s, None, b, b_s, None, o_s, None, out if dst is None else dst,
                                        variant="mma-128x128")
        nbytes = a.nbytes + b.nbytes + m * n
        return (_replayed(forced, out) if impl == MMA_GRAPH else forced), nbytes, ops
    if impl in (WIDE, TILED, MMA16):  # the tiled planner (dp4a-wide or the tensor cores forced, or its own
        from dmlq.gpu import intmm_tiled, matmul  # rule), bound as intmm_tiled binds its plans

        op = "matmul_integer_to_float"
        if packed:
            b = dmlq.Packed(timing.random_array((k * n // 2,), u8, 2), (k, n), "uint4")
            data, b_packed = b.data, ("uint4", (k, n), True)
        else:
            data, b_packed = timing.random_array((k, n), i8, 2), None
        rows = 1 if per_col or not packed else k // G
        b_s = cupy.full((rows, n), 1e-3, f32)
        a_zp = cupy.full((1,), 128, u8)
        b_zp = cupy.full((rows, n), 8, u8) if packed else None
        out = cupy.empty((m, n), f16)
        view = intmm_tiled._check(op, a, data, b_packed)
        forced = {WIDE: "dp4a-wide", MMA16: "mma-128x128"}.get(impl)
        plan = matmul.plan_tiled(op, a, True, view, b_zp is not None, out, variant=forced,
                                 k_group=G if rows > 1 else 0)
        run = intmm_tiled._bind(plan, a, data, out, b_packed, a_scale, a_zp, b_s, b_zp, None)
        fn = lambda: run(a, a_scale, a_zp, data, b_s, b_zp, None, out)  # noqa: E731
        return fn, a.nbytes + data.nbytes + b_s.nbytes + out_bytes, ops
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA support here")
    ta = torch.as_tensor(a, device="cuda")
    if impl == "peer:torch-f16-matmul":
        w = torch.randn(k, n, device="cuda", dtype=torch.float16)
        af = ta.to(torch.float16)
        return (lambda: af @ w), af.numel() * 2 + w.numel() * 2 + out_bytes, ops
    # torch._int_mm: M > 16 (a padded to 17 rows outside the timing where it has fewer), int8 a (a - 128
    # shifted once)
    rows = max(m, 17)
    a17 = torch.zeros(rows, k, dtype=torch.int8, device="cuda")
    a17[:m] = (ta.to(torch.int16) - 128).to(torch.int8)
    w8 = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda")
    scale = torch.full((1, n), 1e-3 * 0.02, device="cuda")

    def fn():
        acc = torch._int_mm(a17, w8)
        return (acc[:m].to(torch.float32) * scale).to(torch.float16)
    return fn, a17.numel() + w8.numel() + rows * n * 4 + out_bytes, ops


@pytest.mark.benchmark(timer=timing.gpu_timer, disable_gc=True)
@pytest.mark.parametrize("group, impl", GPU_CASES, ids=[f"{g}|{i}" for g, i in GPU_CASES])
def test_intmm_gpu(benchmark, group, impl):
    fn, nbytes, ops = _gpu_call(group, impl)
    if "bw" not in _COPY_BW:
        _COPY_BW["bw"] = timing.copy_bandwidth(1 << 30)
    benchmark.group = group
    iterations = timing.plan_iterations(fn, 0.02)
    benchmark.pedantic(fn, rounds=10, iterations=iterations, warmup_rounds=1)
    if benchmark.stats is not None:
        t = benchmark.stats.stats.median
        benchmark.extra_info.update(timing.result_info(impl, nbytes, ops, t, _COPY_BW["bw"], "GB/s"))
