#!/usr/bin/env python3
"""Mutation testing of the CUDA kernels against the host-harness CI tests.

Issue 11 asks that a mutation of a kernel's source (a comparison flipped, an
index or stride off by one, a __syncthreads() dropped, a wait_group count
raised, a .trans dropped, a tile constant changed, ...) makes at least one CI
test fail for at least 9 in 10 such mutations in every .cu file.

    python tools/mutate.py                  # every mutation, every file
    python tools/mutate.py --file avgpool   # one .cu file (name or stem)
    python tools/mutate.py --only 3 --only 7  # mutations by number (see the table)
    python tools/mutate.py --list           # print the mutation list only
    python tools/mutate.py --rev 80ec01d    # mutate that commit's sources (default HEAD)
    python tools/mutate.py --table          # rewrite the table from the saved results

How a run works
- The repository (cuda/, dmlq/, tests/, pyproject.toml) at HEAD (or, with
  --worktree, as it is on disk) plus tests/test_host_mutants.py is copied once
  into a scratch directory (--scratch / $DMLQ_MUTATE_DIR, default
  /tmp/dmlq-mutate); the checkout itself is never touched. PYTHONPATH points at the copy (checked:
  dmlq.__file__ must lie in it, since the package may also be installed
  editable) and DMLQ_HOST_CACHE at a cache of its own.
- An unmutated baseline run per .cu file must pass first (it also fills the
  cache with the unmutated runners).
- Each mutation replaces one exact snippet of one .cu file in the copy (the
  snippet must occur exactly once, so a mutation never silently misses), runs
  `pytest -x -q -p no:cacheprovider` on that file's CI tests, and restores
  the file.
- A small pytest plugin (written into the scratch copy, loaded with -p) makes
  the host harness key its runner cache on the .cuh headers plus the runner's
  own .cu and any .cu it includes (instead of every .cu), and build with one
  g++ at a time; so a mutant rebuilds only its own runner. Test code and the
  harness's behaviour are otherwise unchanged.
- Result: killed (a test failed or errored), survived (all passed),
  no-compile (g++ rejected the mutant: "g++ failed"; not counted), timeout
  (> --timeout seconds; counted as killed, reported separately).
  Kill rate per file = (killed + timeout) / (killed + timeout + survived).

The table goes to bench/results/mutations.md; the per-mutation results of the
last runs are kept in the scratch directory's results.json, so --only reruns
update the table in place.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "bench" / "results" / "mutations.md"


@dataclass(frozen=True)
class Mutation:
    file: str
    original: str
    replacement: str
    description: str
    kind: str
    group: str = ""  # the kernel source whose tests and table row it counts under (default: file)

    @property
    def source(self) -> str:
        return self.group or self.file


M = Mutation


def P(file, original, replacement, description, kind):
    """A mutation of the packed 4-bit b dp4a path, counted under matmul_dp4a_packed.cu."""
    return Mutation(file, original, replacement, description, kind, "matmul_dp4a_packed.cu")

def G(file, original, replacement, description, kind):
    """A mutation of the blocked-scales tensor-core path (matmul_mma.cu's GRP code, the row sums' split in
    matmul_dp4a.cu: session 41), counted under matmul_mma_grouped.cu and run with its tests."""
    return Mutation(file, original, replacement, description, kind, "matmul_mma_grouped.cu")


def AP(file, original, replacement, description, kind):
    """A mutation of a piece split from avgpool.cu (avgpool_common.cuh, avgpool_cl.cu: session 31),
    counted under avgpool.cu and run with its tests."""
    return Mutation(file, original, replacement, description, kind, "avgpool.cu")


MUTATIONS: list[Mutation] = [
    # ------------------------------------------------------------ elementwise.cu
    M("elementwise.cu", "f(k < head ? k : tail + (k - head))", "f(k <= head ? k : tail + (k - head))",
      "scalar_rest: head/tail split `k < head` -> `k <= head`", "comparison"),
    M("elementwise.cu", "  if (j >= inner) {\n    j -= inner;", "  if (j > inner) {\n    j -= inner;",
      "axis_advance: carry `j >= inner` -> `j > inner`", "comparison"),
    M("elementwise.cu", "  if (c >= L) c -= L;", "  if (c > L) c -= L;",
      "axis_advance: wrap `c >= L` -> `c > L`", "comparison"),
    M("elementwise.cu", "const AxisStep s0 = axis_step(base, inner, L);",
      "const AxisStep s0 = axis_step(base + 1, inner, L);",
      "axis_loop: starting position of base off by one", "index"),
    M("elementwise.cu", "  const int64 tile = B * kUnroll;", "  const int64 tile = B * (kUnroll + 1);",
      "axis_loop: block tile kUnroll -> kUnroll + 1 elements per thread (gaps)", "tile constant"),
    M("elementwise.cu", "  const int64 tile = B * kStridedUnroll;", "  const int64 tile = B * (kStridedUnroll + 1);",
      "strided_loop: block tile kStridedUnroll -> kStridedUnroll + 1 (gaps)", "tile constant"),
    M("elementwise.cu", "  for (int d = 0; d < nd; ++d) {", "  for (int d = 0; d < nd - 1; ++d) {",
      "offsets: dim loop `d < nd` -> `d < nd - 1` (outermost dim dropped)", "comparison"),
    M("elementwise.cu", "return static_cast<int>((__umulhi(u, g.magic[d]) + u) >> g.shift[d]);",
      "return static_cast<int>((__umulhi(u, g.magic[d]) + u) >> (g.shift[d] + 1));",
      "div_dim (32-bit): magic-division shift off by one", "index"),
    M("elementwise.cu", "int64 div_dim(const Geo64& g, int d, int64 i) { return i / g.size[d]; }",
      "int64 div_dim(const Geo64& g, int d, int64 i) { return i / (g.size[d] + 1); }",
      "div_dim (WIDE, 64-bit): divisor size[d] -> size[d] + 1", "index"),
    M("elementwise.cu", "  w[(k * sizeof(T)) / 4] |= to_bits<T>(v)", "  w[(k * sizeof(T)) / 4] = to_bits<T>(v)",
      "put_elem: `|=` -> `=` (packing overwrites neighbours)", "operator"),
    M("elementwise.cu", "      if (base + k * B < n) y[yo[k]] = dequantize1<O>(qv[k], zv[k], sv[k]);",
      "      if (base + k * B <= n) y[yo[k]] = dequantize1<O>(qv[k], zv[k], sv[k]);",
      "dequantize_strided: store guard `< n` -> `<= n`", "comparison"),
    M("elementwise.cu", "  const float bv = ieee_mul(to_f32(b - p.bz), p.bs);",
      "  const float bv = ieee_mul(to_f32(b - p.az), p.bs);",
      "add1: b uses a's zero point", "operand"),
    M("elementwise.cu", "        zv[k] = static_cast<int>(zp_at(zp_p, c * zp_st, zp_v));",
      "        zv[k] = static_cast<int>(zp_at(zp_p, (c + 1) % L * zp_st, zp_v));",
      "quantize_axis: zero point of the next channel (index off by one)", "index"),

    # ------------------------------------------------------------ matmul_dp4a.cu
    M("dp4a_words.cuh", "__byte_perm(w[0], w[1], 0x5140)", "__byte_perm(w[0], w[1], 0x5410)",
      "transpose4: byte_perm selector 0x5140 -> 0x5410", "byte_perm", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "    store_tile(0);\n  }\n  __syncthreads();", "    store_tile(0);\n  }\n",
      "__syncthreads() after the prologue tile store dropped", "barrier"),
    M("matmul_dp4a.cu", "    if (t + 1 < ntiles) store_tile(buf ^ 1);\n    __syncthreads();",
      "    if (t + 1 < ntiles) store_tile(buf ^ 1);\n",
      "__syncthreads() at the end of the k loop (double buffer) dropped", "barrier"),
    M("matmul_dp4a.cu", "      *reinterpret_cast<unsigned*>(&Cs[r * CS + g * THR_N * 4 + tx * 4]) = word;\n    }\n  }\n  __syncthreads();",
      "      *reinterpret_cast<unsigned*>(&Cs[r * CS + g * THR_N * 4 + tx * 4]) = word;\n    }\n  }\n",
      "__syncthreads() between epilogue staging and the coalesced stores dropped", "barrier"),
    M("matmul_dp4a.cu", "if (r < 3 && k + r + 1 < K) q += ldb;", "if (r < 3 && k + r + 1 <= K) q += ldb;",
      "load_tile: B k-edge row clamp `k + r + 1 < K` -> `<= K` (row K read)", "comparison"),
    M("matmul_dp4a.cu", "    if (m >= M || n >= N) continue;", "    if (m > M || n >= N) continue;",
      "epilogue store: row guard `m >= M` -> `m > M`", "comparison"),
    M("matmul_dp4a.cu", "    if (c_al && n + 3 < N) {", "    if (c_al && n + 2 < N) {",
      "epilogue store: whole-word condition `n + 3 < N` -> `n + 2 < N`", "index"),
    M("dp4a_words.cuh", "  return (i >> 2) * (THR * 4) + t * 4 + (i & 3);",
      "  return (i >> 2) * (THR * 4) + t * 4 + (i & 1);",
      "frag_pos: `i & 3` -> `i & 1`", "index", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "const int chunk_k1 = (t == ntiles) ? K : t * BK;",
      "const int chunk_k1 = t * BK;",
      "wide: last chunk length rounded up to whole tiles (K*za*zb term)", "index"),
    M("dp4a_words.cuh", "enum : int { kChunkK = 32768 };", "enum : int { kChunkK = 65536 };",
      "wide: chunk constant kChunkK 32768 -> 65536 (int32 partials overflow)", "tile constant", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "  auto As = reinterpret_cast<unsigned (*)[KQ][BM + 4]>(smem);",
      "  auto As = reinterpret_cast<unsigned (*)[KQ][BM + 2]>(smem);",
      "A tile pad BM + 4 -> BM + 2 (vector fragment loads misaligned)", "tile constant"),
    M("matmul_dp4a.cu", "    __syncthreads();\n    if (ty == 0", "    if (ty == 0",
      "matmul_col_sums: __syncthreads() before the k-slice reduction dropped", "barrier"),
    M("matmul_dp4a.cu", "    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync",
      "    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync",
      "matmul_row_sums: shuffle reduction starts at 8 (half the warp)", "tile constant"),

    # ------------------------------------------------------------ matmul_mma.cu
    M("matmul_mma.cu", "    cp_async_wait<STAGES - 2>();", "    cp_async_wait<STAGES - 1>();",
      "cp.async wait_group STAGES - 2 -> STAGES - 1", "wait_group"),
    M("matmul_mma_ptx.cuh", '"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16', '"ldmatrix.sync.aligned.m8n8.x4.shared.b16',
      ".trans dropped from the B ldmatrix", "ptx", group="matmul_mma.cu"),
    M("matmul_mma.cu", "bf[2 * p][0] = __byte_perm(r[0], r[1], 0x6420);",
      "bf[2 * p][0] = __byte_perm(r[0], r[1], 0x6240);",
      "B fragment byte_perm selector 0x6420 -> 0x6240", "byte_perm"),
    M("matmul_mma.cu", "    __syncthreads();              // everyone's have",
      "                                  // everyone's have",
      "__syncthreads() after the pipeline wait dropped", "barrier"),
    M("matmul_mma.cu", "  __syncthreads();  // every warp is done with the pipeline buffers",
      "  // every warp is done with the pipeline buffers",
      "__syncthreads() before the epilogue reuses the pipeline buffers dropped", "barrier"),
    M("matmul_mma.cu", "    __syncwarp();  // the previous pass's reads are done",
      "    // the previous pass's reads are done",
      "__syncwarp() before an epilogue pass's staging writes dropped", "barrier"),
    M("matmul_mma.cu", "    }\n    __syncwarp();\n", "    }\n",
      "__syncwarp() between the epilogue staging writes and reads dropped", "barrier"),
    M("matmul_mma.cu", "    const int nk = kt + STAGES - 1;", "    const int nk = kt + STAGES;",
      "pipeline: next tile kt + STAGES - 1 -> kt + STAGES", "index"),
    M("matmul_mma_layout.cuh", "  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);",
      "  return row * 64 + ((chunk ^ ((row >> 1) & 7)) << 4);",
      "A swizzle mask & 3 -> & 7 (chunks leave the 64-byte row)", "index", group="matmul_mma.cu"),
    M("matmul_mma_layout.cuh", "int b_swz(int k) { return (k & 1) | ((k >> 1) & 6); }",
      "int b_swz(int k) { return (k & 1) | ((k >> 1) & 14); }",
      "B swizzle mask & 6 -> & 14 (chunks leave the row)", "index", group="matmul_mma.cu"),
    M("matmul_mma.cu", "const int lb_k = (q >> 1) * 16 + (q & 1) * 2 +", "const int lb_k = (q >> 1) * 16 + (q & 1) * 1 +",
      "ldmatrix.trans k-row offset of odd matrices 2 -> 1", "index"),
    M("matmul_mma.cu", "(i * kr_step < b_rows_left ? b_nbytes : 0u)",
      "(i * kr_step <= b_rows_left ? b_nbytes : 0u)",
      "B k-edge `i * kr_step < b_rows_left` -> `<=` (row K staged)", "comparison"),
    M("matmul_mma.cu", "ph * 32 + r;\n      if (m >= M) continue;", "ph * 32 + r;\n      if (m > M) continue;",
      "epilogue row guard `m >= M` -> `m > M`", "comparison"),

    # ------------------------------------------------------------ avgpool.cu
    AP("avgpool_common.cuh", "  k0 = start >= lo ? I(0) : ceil_div<I>(lo - start, dil);",
      "  k0 = start > lo ? I(0) : ceil_div<I>(lo - start, dil);",
      "tap_range: `start >= lo` -> `start > lo`", "comparison"),
    AP("avgpool_common.cuh", "  if (k1 < k0) k1 = k0;", "  if (k1 > k0) k1 = k0;",
      "tap_range: clamp `k1 < k0` -> `k1 > k0`", "comparison"),
    AP("avgpool_common.cuh", "v[k] = __funnelshift_r(w[k], w[k + 1], 8 * s);", "v[k] = __funnelshift_r(w[k], w[k + 1], 8 * s + 8);",
      "load_span: funnel shift one byte too far", "index"),
    M("avgpool.cu", "lut_n > 0 ? lut[acc[j] - kvol * QMIN]", "lut_n > 0 ? lut[acc[j] - kvol * QMIN + 1]",
      "tile: full-window table index off by one", "index"),
    AP("avgpool_common.cuh", "    lut[i] = pool_value<TO, int>(smin + i, kvol, q0);\n  __syncthreads();",
      "    lut[i] = pool_value<TO, int>(smin + i, kvol, q0);\n",
      "tile: __syncthreads() after building the shared table dropped", "barrier"),
    M("avgpool.cu", "      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;\n      __syncthreads();",
      "      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;\n",
      "global_block: __syncthreads() before the cross-warp sum dropped", "barrier"),
    M("avgpool.cu", "      __syncthreads();  // warp_sums is reused by the next plane",
      "      // warp_sums is reused by the next plane",
      "global_block: __syncthreads() before warp_sums is reused dropped", "barrier"),
    M("avgpool.cu", "    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync",
      "    for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync",
      "global: shuffle reduction starts at 8 (half the warp)", "tile constant"),
    M("avgpool.cu", "const u64 at = i < head ? b + i : z16 + (i - head);",
      "const u64 at = i <= head ? b + i : z16 + (i - head);",
      "global: head/tail split `i < head` -> `i <= head`", "comparison"),
    M("avgpool.cu", "  constexpr int L = (OPT - 1) * SW + KW;", "  constexpr int L = (OPT - 1) * SW + KW - 1;",
      "tile: span length L one byte short", "tile constant"),
    M("avgpool.cu", "\n          const int cwp = include_padding ? max(0, min(s + KW, W + EW) - max(s, -PW)) : cw;",
      "\n          const int cwp = include_padding ? max(0, min(s + KW, W + EW - 1) - max(s, -PW)) : cw;",
      "tile: padded W count end bound W + EW -> W + EW - 1", "index"),
    M("avgpool.cu", "      if (ow0 + OPT <= OW && (reinterpret_cast", "      if (ow0 + OPT - 1 <= OW && (reinterpret_cast",
      "tile: whole-word store condition `ow0 + OPT <= OW` -> `ow0 + OPT - 1 <= OW`", "comparison"),
    M("avgpool.cu", "      if (cd == KD && ch == KH && w0 >= 0 && w0 + L <= W) {",
      "      if (cd == KD && w0 >= 0 && w0 + L <= W) {",
      "tile: full-window test ignores the H count", "comparison"),
    # ------------------------------------------------------------ second batch (appended so
    # that the numbers above stay stable across runs)
    M("elementwise.cu", "  p.bs = scale_at(bs_p, 0, bs_v);", "  p.bs = scale_at(bs_p, 0, as_v);",
      "add: host-scalar b scale replaced by a's", "operand"),
    M("elementwise.cu", "  return f16 ? to_f32(static_cast<const float16*>(p)[off])",
      "  return !f16 ? to_f32(static_cast<const float16*>(p)[off])",
      "scale_any: FLOAT16 scale flag inverted", "comparison"),
    M("elementwise.cu", "    w[4 * j + 2] = u.z;", "    w[4 * j + 2] = u.y;",
      "load_words: word index 4j+2 reads u.y (off by one)", "index"),
    M("dp4a_words.cuh", "o.y = __byte_perm(t0, t2, 0x7632)", "o.y = __byte_perm(t0, t2, 0x7623)",
      "transpose4: byte_perm selector 0x7632 -> 0x7623", "byte_perm", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "min(m0 + a_m + s * A_ROW_STEP, M - 1)", "min(m0 + a_m + s * A_ROW_STEP, M)",
      "load_tile: A row edge clamp `M - 1` -> `M` (row M read)", "comparison"),
    M("matmul_dp4a.cu", "for (int w = lane; w < nw; w += 32) s = dmlq::dp4a::dot4<T, T>",
      "for (int w = lane; w < nw; w += 31) s = dmlq::dp4a::dot4<T, T>",
      "matmul_row_sums: word stride 32 -> 31", "stride"),
    M("matmul_mma.cu", "bf[2 * p + 1][1] = __byte_perm(r[2], r[3], 0x7531);",
      "bf[2 * p + 1][1] = __byte_perm(r[2], r[3], 0x7513);",
      "B fragment byte_perm selector 0x7531 -> 0x7513 (k+16 half, odd n)", "byte_perm"),
    M("matmul_mma.cu", "const int la_row = wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8;",
      "const int la_row = wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 4;",
      "A ldmatrix row offset for lanes 8-15 8 -> 4", "index"),
    M("matmul_mma.cu", "min(max(k_end - (k0 + a_kc * 16), 0), 16)",
      "min(max(k_end - (k0 + a_kc * 16) + 1, 0), 16)",
      "A k-edge byte count off by one", "index"),
    M("matmul_mma.cu", "  for (int s = 0; s < STAGES - 1; ++s) {", "  for (int s = 0; s < STAGES - 2; ++s) {",
      "prologue commits STAGES - 2 groups instead of STAGES - 1", "comparison"),
    M("matmul_mma.cu", "} else if (nc0 + 15 < N && (c_al & 3) == 0) {", "} else if (nc0 + 15 < N && (c_al & 1) == 0) {",
      "epilogue 4-byte store alignment mask & 3 -> & 1", "index"),
    M("matmul_mma.cu", "make_int4(acc[mi + 2][2 * p][2 * h], acc[mi + 2][2 * p + 1][2 * h],",
      "make_int4(acc[mi + 1][2 * p][2 * h], acc[mi + 2][2 * p + 1][2 * h],",
      "epilogue pass 1 stages acc[mi + 1] for one column (index off by one)", "index"),
    AP("avgpool_common.cuh", "    if (a + b >= lo && a + b < hi)", "    if (a + b >= lo && a + b <= hi)",
      "load_word_masked: `a + b < hi` -> `<= hi` (one byte past the row)", "comparison"),
    AP("avgpool_common.cuh", "  return b == 1 ? a : (a - 1) / b + 1;", "  return b == 1 ? a : a / b + 1;",
      "ceil_div: (a - 1) / b + 1 -> a / b + 1", "index"),
    M("avgpool.cu", "int t = sum_bytes<TX>(v.x, 0x01010101u, 0);", "int t = sum_bytes<TX>(v.x, 0x01010100u, 0);",
      "global: dp4a byte mask of the first word drops byte 0", "constant"),
    AP("avgpool_common.cuh", "enum { PC_XS = 1, PC_XZP = 2, PC_OS = 4, PC_OZP = 8 };",
      "enum { PC_XS = 1, PC_XZP = 2, PC_OS = 8, PC_OZP = 8 };",
      "per-channel flag PC_OS 4 -> 8", "constant"),
    M("avgpool.cu", "    tap_range<int>(d0, KD, DD, -PD, D + ED, pd0, pd1);",
      "    tap_range<int>(d0, KD, DD, -PD, D + ED - 1, pd0, pd1);",
      "general: padded D range end off by one", "index"),
    AP("avgpool_common.cuh", "(0x01010101u >> (8 * (4 - (hi - lo)))) << (8 * lo)", "(0x01010101u >> (8 * (4 - (hi - lo)))) << (8 * (lo & 1))",
      "tap_mask: first byte lane `lo` -> `lo & 1`", "index"),
    # ------------------------------------------------------------ third batch: code added
    # by 36a5d0e..80ec01d (add table, mma stage counters and pointer steps, general's carries)
    M("elementwise.cu", "  __syncthreads();\n  contig_binary(a, b, y, n, head, [&]",
      "  contig_binary(a, b, y, n, head, [&]",
      "add_table: __syncthreads() after filling the shared table dropped", "barrier"),
    M("elementwise.cu", "add1<O>(static_cast<A>(t >> 8), static_cast<B>(t & 255), p)",
      "add1<O>(static_cast<A>(t & 255), static_cast<B>(t >> 8), p)",
      "add_table_build: table index halves swapped", "index"),
    M("matmul_mma.cu", "    st = st == STAGES - 1 ? 0 : st + 1;", "    st = st == STAGES - 2 ? 0 : st + 1;",
      "read-stage counter wraps at STAGES - 2", "comparison"),
    M("matmul_mma.cu", "    b_src += b_tile_step;\n", "\n",
      "B source pointer not advanced per k tile (stride dropped)", "stride"),
    M("avgpool.cu", "    int carry = od >= OD;", "    int carry = od > OD;",
      "general: plane carry `od >= OD` -> `od > OD`", "comparison"),
    # ------------------------------------------------------------ fourth batch: the tile
    # staging fast paths (mma: whole copies inside K; dp4a: word loads inside K)
    M("matmul_mma.cu", "    } else if (k0 + BK <= k_end && b_whole) {", "    } else if (k0 < k_end && b_whole) {",
      "staging fast path (4-byte copies) also taken by the K tail tile (no zero fill, reads past K)", "comparison"),
    M("matmul_mma.cu", "const bool b_whole = b_nbytes == 16 || b_nbytes == 0;",
      "const bool b_whole = b_nbytes % 4 == 0;",
      "staging fast path for a B chunk that N cuts after a whole word (copies past N)", "comparison"),
    M("matmul_mma.cu", "      if (b_nbytes != 0) {", "      if (b_nbytes >= 0) {",
      "staging fast path (4-byte copies) copies B chunks wholly past N", "comparison"),
    M("matmul_mma.cu", "          bytes = ((a_rows >> c) & 1) ? a_left : 0u;", "          bytes = a_left;",
      "edge loop: A rows past M staged (row bit ignored)", "index"),
    M("matmul_mma.cu", "  const int64 a_chunk_step = static_cast<int64>(NT / 4) * lda;",
      "  const int64 a_chunk_step = static_cast<int64>(NT / 8) * lda;",
      "edge loop: A chunk-row stride halved", "stride"),
    M("matmul_mma_ptx.cuh", "__cvta_generic_to_global(src + j * VEC)),\n                    DMLQ_IN(\"n\", VEC)));\n  }\n}",
      "__cvta_generic_to_global(src + (j ^ 1) * VEC)),\n                    DMLQ_IN(\"n\", VEC)));\n  }\n}",
      "whole 4-byte copies: words of a pair swapped", "index", group="matmul_mma.cu"),
    M("matmul_dp4a.cu", "    if (full && (word_path & 1)) {", "    if (k0 < K && (word_path & 1)) {",
      "word path also taken by the K tail tile (A words past K)", "comparison"),
    M("matmul_dp4a.cu", "const int ks = max(min(kw, K - 4), 0);", "const int ks = min(kw, K - 4);",
      "edge window start not clamped at the row start (rows under 4 bytes)", "index"),
    M("dp4a_words.cuh", "b[i] = i < len ? static_cast<unsigned>(__ldg(p + i)) : 0u;",
      "b[i] = i <= len ? static_cast<unsigned>(__ldg(p + i)) : 0u;",
      "edge window: one byte past a row under 4 bytes", "comparison", group="matmul_dp4a.cu"),
    M("dp4a_words.cuh", "return 0x22225410u >> (4 * min(d, 4));", "return 0x22225410u >> (4 * min(d, 3));",
      "edge window: a word wholly past the row keeps its last byte", "index", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "            if (k + r >= K) rb[s][r] = 0u;", "            if (k + r > K) rb[s][r] = 0u;",
      "wide: B row K not zeroed (column sums see row K - 1 twice)", "comparison"),
    M("matmul_dp4a.cu", "const bool b_redirect = b_cols_left <= 0 && N >= 4;",
      "const bool b_redirect = b_cols_left <= 0 && N >= 0;",
      "word path redirects B columns past N when N < 4 (reads past the row)", "comparison"),
    M("matmul_mma.cu", "        if ((a_rows >> i) & 1)\n", "        if ((a_rows >> (i + 1)) & 1)\n",
      "staging fast path: A chunk skipped by the next chunk's row-in-M bit", "index"),
    # ------------------------------------------------------------ matmul_stream.cu
    M("matmul_stream.cu", "  if (n >= N) return;", "  if (n > N) return;",
      "column N computed and stored (one past the row)", "comparison"),
    M("matmul_stream.cu", "    if (m >= M) break;", "    if (m > M) break;",
      "row M stored (one past the matrix)", "comparison"),
    M("matmul_stream.cu", "    const int mm = min(m, M - 1);  // rows", "    const int mm = m;  // rows",
      "per-row A vectors read past M", "index"),
    M("matmul_stream.cu", "const int64* off = offsets + 8 * static_cast<int64>(blockIdx.y);",
      "const int64* off = offsets + 8 * static_cast<int64>(blockIdx.y / 2);",
      "matrix z reads the offsets of z / 2", "index"),
    M("matmul_stream.cu", "stream::bsrc<TB>::at(B, b0 + static_cast<int64>(k) * ldb) - zb;",
      "stream::bsrc<TB>::at(B, b0 + static_cast<int64>(k) * ldb) + zb;", "b's zero point added", "sign"),
    M("matmul_stream.cu", "const int k0 = g * group, k1 = min(k0 + group, K);",
      "const int k0 = g * group, k1 = k0 + group;", "the last group runs past K", "index"),
    M("matmul_stream.cu", "b_scale[off[3] + static_cast<int64>(g) * N + n]",
      "b_scale[off[3] + static_cast<int64>(g / 2) * N + n]", "groups read the wrong scale row", "index"),
    M("matmul_stream.cu", "static_cast<int64>(bz_groups > 1 ? g : 0) * N + n]",
      "static_cast<int64>(0) * N + n]", "blocked zero points: group 0's for every group", "index"),
    M("matmul_stream.cu", "      v[m] = g == 0 ? term : ieee_add(v[m], term);",
      "      v[m] = ieee_add(v[m], term);", "the sum starts from +0.0 (loses a -0.0 first term)", "order"),
    M("matmul_stream.cu", "wide[m] += static_cast<int64>(static_cast<int>(acc[m]));",
      "wide[m] += static_cast<int64>(acc[m]);", "int32 partial read as unsigned", "conversion"),
    M("matmul_stream.cu", "enum : int { kChunk = 32768 };", "enum : int { kChunk = 65536 };",
      "int32 partials over 65536 terms (overflow)", "tile constant"),
    M("matmul_stream.cu", "bias[off[5] + static_cast<int64>(m) * N + n]", "bias[off[5] + n]",
      "bias row 0 for every row", "index"),
    # issue 24, defect 10: survivors of every test before test_host_mutants.py's mma guard cases
    M("matmul_tile_grid.cuh", "  if (lin >= tiles * splits) return false;", "  if (lin > tiles * splits) return false;",
      "blocks past the last tile: `lin >= tiles * splits` -> `>` (a grid with more blocks than tiles)",
      "comparison", group="matmul_mma.cu"),
    M("matmul_mma.cu", "static_cast<unsigned long long>(ldb)) & (VEC - 1)) != 0)",
      "static_cast<unsigned long long>(ldb)) & (VEC - 2)) != 0)",
      "misalignment __trap mask `& (VEC - 1)` -> `& (VEC - 2)`", "index"),
    # issue 26: packed 4-bit b in matmul_stream.cu
    M("packed4.cuh", "(static_cast<int>(i & 1) << 2)) & 15;", "(static_cast<int>((i & 1) ^ 1) << 2)) & 15;",
      "packed b: the high nibble read first (the other nibble order)", "index", "matmul_stream.cu"),
    M("matmul_stream.cu", "return (nibble(b, i) ^ 8) - 8; }", "return nibble(b, i); }",
      "packed int4 read as uint4 (no sign extension)", "conversion"),
    M("packed4.cuh", "static_cast<int>(b[i >> 1])", "static_cast<int>(b[(i + 1) >> 1])",
      "packed b: element i read from byte (i + 1) / 2", "index", "matmul_stream.cu"),
    # ------------------------------------------------------------ quant_types.cu (issue 25)
    M("qt_codes.cuh", "((1u << (sh - 1)) - 1u) + ((mag >> sh) & 1u)) >> sh;", "(1u << (sh - 1))) >> sh;",
      "SmallFloat::magnitude (float8/float4/bfloat16 codes): ties away from zero instead of to even", "rounding", "quant_types.cu"),
    M("common.cuh", "ieee_add(c, 12582912.0f)) - 0x4B400000", "ieee_add(c, 8388608.0f)) - 0x4B000000",
      "round_clamp: rounding constant 2**23 instead of 1.5 * 2**23 (negatives and ties wrong)", "rounding",
      "quant_types.cu"),
    M("qt_codes.cuh", "round_clamp(t, tr::qmin - zp, tr::qmax - zp)", "round_clamp(t, tr::qmin - zp, tr::qmax - zp + 1)",
      "quant1 (integer types): upper clamp one past qmax (wraps to qmin)", "saturate", "quant_types.cu"),
    M("qt_codes.cuh", "return saturate || SPECIAL == NONE ? top : top + 1u; }", "return SPECIAL == NONE ? top : top + 1u; }",
      "SmallFloat::cap: saturate=True ignored (overflow -> inf or NaN)", "saturate", "quant_types.cu"),
    M("qt_codes.cuh", "    return code | sign_bit;\n", "    return mag > 0x7F800000u ? code : code | sign_bit;\n",
      "SmallFloat::with_sign (fn, ieee): a negative NaN loses its sign", "NaN", "quant_types.cu"),
    M("qt_codes.cuh", "if (t != t) return static_cast<unsigned>(zp) &", "if (t != t) return 0u &",
      "quant1 (integer types): NaN -> 0 instead of the zero point", "NaN", "quant_types.cu"),
    M("qt_codes.cuh", "if (SPECIAL == FNUZ) return code | (code != 0u ? sign_bit : 0u);",
      "if (SPECIAL == FNUZ) return code | sign_bit;",
      "SmallFloat::with_sign (fnuz): -0 becomes 0x80 (fnuz's NaN)", "NaN", "quant_types.cu"),
    M("quant_types.cu", "    if (++b == B) { b = 0; idx += inner; }", "    if (++b > B) { b = 0; idx += inner; }",
      "Walker.next: block carry `++b == B` -> `> B` (blocks one element too long)", "block index"),
    M("quant_types.cu", "    idx = base + divmod(d, B, b) * inner + in;", "    idx = base + divmod(d, B, b) * inner + in;\n    b = 0;",
      "Walker.start: position inside the block dropped (a group that starts mid-block)", "block index"),
    M("quant_types.cu", "{ d = 0; b = 0; base += S * inner; idx = base; }", "{ d = 0; base += S * inner; idx = base; }",
      "Walker.next: block position not reset at the axis wrap (a ragged last block runs into the next row)",
      "ragged block"),
    M("quant_types.cu", "    if (p != last) {", "    if (p > last) {",
      "Params: scale/zero point re-read only when the index grows (per axis 0 it goes back)", "block index"),
    M("quant_types.cu", "word |= static_cast<unsigned long long>(code) << (k * bits);",
      "word |= static_cast<unsigned long long>(code) << ((k ^ 1) * bits);",
      "quantize (16-byte path): neighbouring elements swapped in a chunk's word (nibble order)", "packing"),
    M("quant_types.cu", "dequant_value<T>(get_bits(lo, hi, j * bits, bits), p.z)",
      "dequant_value<T>(get_bits(lo, hi, (j ^ 1) * bits, bits), p.z)",
      "dequantize (element path): neighbouring codes swapped (nibble order)", "packing"),
    M("quant_types.cu", "      for (int j = 0; j < G && e0 + j < n; ++j) {\n        p.at(w.index());\n        put_bits",
      "      for (int j = 0; j < G && e0 + j <= n; ++j) {\n        p.at(w.index());\n        put_bits",
      "quantize (element path): one element past n packed into the padding bits (odd counts)", "ragged block"),
    M("quant_types.cu", "return zp_p ? __ldg(zp_p + i) : zp_v; }", "return zp_p ? __ldg(zp_p + i) : 0; }",
      "Params: a per-tensor zero point read as 0", "zero point"),
    M("qt_codes.cuh", "if (T == E2M1 && zp_given) t = ieee_add", "if (T == E2M1 && !zp_given) t = ieee_add",
      "quant1 (float4): zero point added only when none is given", "zero point", "quant_types.cu"),
    M("qt_codes.cuh", "if (precision == 1) return round_f16(ieee_div(round_f16(x), round_f16(s)));",
      "if (precision == 1) return ieee_div(round_f16(x), round_f16(s));",
      "quotient (precision float16): the quotient not rounded to float16", "precision", "quant_types.cu"),
    M("qt_codes.cuh", "if (precision == 2) return round_bf16(ieee_div(round_bf16(x), round_bf16(s)));",
      "if (precision == 2) return round_bf16(ieee_div(x, round_bf16(s)));",
      "quotient (precision bfloat16): x not rounded to bfloat16 first", "precision", "quant_types.cu"),
    M("qt_codes.cuh", "    if (tr::is_signed) q = static_cast<int>", "    if (false) q = static_cast<int>",
      "dequant_value: signed codes not sign-extended", "conversion", "quant_types.cu"),
    M("qt_codes.cuh", "__uint_as_float(static_cast<unsigned>(254 - BIAS) << 23));",
      "__uint_as_float(static_cast<unsigned>(253 - BIAS) << 23));",
      "SmallFloat::decode: the power of two one binade low", "conversion", "quant_types.cu"),
    M("quant_types.cu", "return float16{static_cast<unsigned short>(w[k / 2] >> (16 * (k % 2)))};",
      "return float16{static_cast<unsigned short>(w[k / 2] >> (16 * ((k + 1) % 2)))};",
      "elem_of<float16>: the two halves of a word swapped (16-byte path)", "index"),
    M("quant_types.cu", "  for (; wg * 32 < groups; wg += warps) {", "  for (; wg * 32 < groups; wg += warps + 1) {",
      "for_each_group: grid-stride step one group too long (groups skipped)", "index"),
    # issue 26: the int32 and float epilogues and per-batch B parameters (tests/test_gpu_intmm_tiled.py)
    M("matmul_dp4a.cu", "const bool grp_end = t - grp_t0 == grp_tiles || t == ntiles;",
      "const bool grp_end = t == ntiles;", "wide: blocked scales, every group closed with group 0's scale",
      "index"),
    M("matmul_dp4a.cu", "            load_bs(grp);\n            load_zb(grp);", "            load_bs(grp);",
      "wide: blocked zero points, group 0's for every group", "index"),
    M("matmul_dp4a.cu", "bias + static_cast<int64>(mc) * bias_ld + min(n + c, N - 1)",
      "bias + min(n + c, N - 1)", "float epilogue: bias row 0 for every row", "index"),
    M("matmul_dp4a.cu", "        if (m < M) mm::store4(Cb + static_cast<int64>(m) * ldc + n, v, N - n);",
      "        if (m <= M) mm::store4(Cb + static_cast<int64>(m) * ldc + n, v, N - n);",
      "int32/float store: row guard `m < M` -> `m <= M`", "comparison"),
    M("matmul_dp4a.cu", "  b_scale = mm::batch_params(b_scale, bp_bs, z);\n", "",
      "per-batch B scales: matrix 0's for every matrix", "index"),
    M("matmul_mma.cu", "v4, N - (nc0 + 4 * s4));", "v4, N - (nc0 + 4 * s4) + 1);",
      "int32/float store: one column past N", "comparison"),
    M("matmul_mma.cu", "brow != nullptr ? brow + n : nullptr", "brow != nullptr ? brow + nc0 : nullptr",
      "float epilogue: the lane's first bias column for all 16", "index"),
    M("matmul_mma.cu", "  C += bz0 * c_bs0 + bz1 * c_bs1;\n  b_scale = dmlq::mm::batch_params(b_scale, bp_bs, z);\n",
      "  C += bz0 * c_bs0 + bz1 * c_bs1;\n", "per-batch B scales: matrix 0's for every matrix", "index"),
    M("matmul_mma.cu", "bias + bias_bs * z + static_cast<int64>(m) * bias_ld + n", "bias + static_cast<int64>(m) * bias_ld + n",
      "split-K float epilogue: matrix 0's bias for every matrix", "index"),
    # issue 26: packed 4-bit b on the tensor cores (matmul_mma.cu's P4 code, built by matmul_mma_packed.cu)
    M("matmul_mma_layout.cuh", "  c0 = (p << 4) & 0xF0F0F0F0u;", "  c0 = (p << 3) & 0xF0F0F0F0u;",
      "packed b: the even column's code shifted 3 into the high nibble", "index", group="matmul_mma.cu"),
    M("matmul_mma_layout.cuh", "q = __byte_perm(r0, r1, 0x7531);", "q = __byte_perm(r0, r1, 0x7351);",
      "packed b: k rows 4t+1 and 4t+2 of columns 4g+2, 4g+3 swapped", "byte_perm", group="matmul_mma.cu"),
    M("matmul_mma.cu", "for (int e = 0; e < 4; ++e) acc[mi][ni][e] >>= 4;",
      "for (int e = 0; e < 4; ++e) acc[mi][ni][e] = static_cast<unsigned>(acc[mi][ni][e]) >> 4;",
      "packed b: sums shifted back logically (negative sums lose their sign)", "conversion"),
    M("matmul_mma_layout.cuh", "  return k * (BN / 2) + ((chunk ^ ((k >> 2) & 3)) << 4);",
      "  return k * (BN / 2) + ((chunk ^ ((k >> 2) & 7)) << 4);",
      "packed B swizzle mask & 3 -> & 7 (chunks leave the 64-byte row)", "index", group="matmul_mma.cu"),
    M("matmul_mma_layout.cuh", "P4 ? (qd >> 1) * 32 + 8 * t4 + 4 * (qd & 1)", "P4 ? (qd >> 1) * 32 + 8 * t4 + 2 * (qd & 1)",
      "packed b: epilogue columns of a lane's second quad 4 -> 2 past its first", "index", group="matmul_mma.cu"),
    M("matmul_mma.cu", "min(16, P4 ? (N - b_n + 1) >> 1 : N - b_n)", "min(16, P4 ? (N - b_n) >> 1 : N - b_n)",
      "packed b: an odd N's last byte not staged (column N - 1 read as 0)", "index"),
    M("matmul_mma.cu", "(P4 ? b_e0 >> 1 : b_e0);", "(P4 ? b_e0 : b_e0);",
      "packed b: matrix z's element offset taken as bytes", "stride"),
    # ------------------------------------------------------------ matmul_dp4a_packed.cu (issue 26: the
    # packed 4-bit b dp4a tiles: packed4.cuh's unpacking and matmul_dp4a.cu's packed staging paths)
    P("packed4.cuh", "  if (static_cast<V>(-1) < static_cast<V>(0)) return (w << 4) & 0xF0F0F0F0u;\n  return w & 0x0F0F0F0Fu;",
      "  return w & 0x0F0F0F0Fu;", "lo_nibbles: int4 read as uint4 (sign extension dropped)", "conversion"),
    P("packed4.cuh", "  return w & 0x0F0F0F0Fu;\n}", "  return (w >> 4) & 0x0F0F0F0Fu;\n}",
      "lo_nibbles (uint4): the high nibble (nibble order swapped)", "index"),
    P("packed4.cuh", "unsigned hi_nibbles(unsigned w) { return w & 0xF0F0F0F0u; }",
      "unsigned hi_nibbles(unsigned w) { return (w << 4) & 0xF0F0F0F0u; }",
      "hi_nibbles: the low nibble (nibble order swapped)", "index"),
    P("packed4.cuh", "  if (static_cast<V>(-1) < static_cast<V>(0)) return (w << 4) & 0xF0F0F0F0u;",
      "  if (static_cast<V>(-1) < static_cast<V>(0)) return (w << 8) & 0xF0F0F0F0u;",
      "lo_nibbles (int4): shift 4 -> 8 (a shift off by 4)", "index"),
    P("packed4.cuh", "  return odd || static_cast<V>(-1) < static_cast<V>(0);", "  return odd;",
      "scaled16: int4's even columns not shifted back (x16 sums)", "operator"),
    P("packed4.cuh", "  if (o + len > 4) v |=", "  if (o + len > 5) v |=",
      "nibbles4: third byte skipped (an odd start loses its 4th element)", "comparison"),
    P("packed4.cuh", "  return v >> (4 * o);", "  return v;",
      "nibbles4: an odd start not shifted down a nibble", "index"),
    P("packed4.cuh", "  const uint8* p = b + (e >> 1);", "  const uint8* p = b + ((e + 1) >> 1);",
      "nibbles4: element e read from byte (e + 1) / 2", "index"),
    P("packed4.cuh", "  return static_cast<V>(-1) < static_cast<V>(0) ? (c ^ 8) - 8 : c;", "  return c;",
      "nibble_value: no sign extension (matmul_col_sums of int4)", "conversion"),
    P("matmul_dp4a.cu", "acc[i][j] = static_cast<unsigned>(static_cast<int>(acc[i][j]) >> 4);",
      "acc[i][j] = static_cast<unsigned>(static_cast<int>(acc[i][j]) >> 3);",
      "unscale: sums shifted by 3, not 4", "index"),
    P("matmul_dp4a.cu", "        if constexpr (WIDE) cs[j] = static_cast<unsigned>(static_cast<int>(cs[j]) >> 4);\n", "",
      "unscale (wide): the column sums left at x16", "operator"),
    P("matmul_dp4a.cu", "const unsigned w01 = (kq & 1) ? bq[g].z : bq[g].x,", "const unsigned w01 = (kq & 1) ? bq[g].x : bq[g].z,",
      "main loop: the k-words of a pair swapped (columns 0/1)", "index"),
    P("matmul_dp4a.cu", "&Bq[buf][kq >> 1][b_n + 2 * (kq & 1)]) =\n            make_uint2(__byte_perm(t01",
      "&Bq[buf][kq >> 1][b_n + (kq & 1)]) =\n            make_uint2(__byte_perm(t01",
      "staging store: odd k-word one word off, not two", "index"),
    P("matmul_dp4a.cu", "const unsigned t01 = __byte_perm(rb[s][0], rb[s][1], 0x5140);",
      "const unsigned t01 = __byte_perm(rb[s][0], rb[s][1], 0x4051);",
      "staging: byte_perm selector 0x5140 -> 0x4051 (rows 0/1 swapped)", "byte_perm"),
    P("matmul_dp4a.cu", "const int64 ldb_bytes = P4 ? ldb >> 1 : ldb;", "const int64 ldb_bytes = P4 ? ldb >> 2 : ldb;",
      "word path: packed row stride ldb / 4 bytes, not ldb / 2 (the packed stride halved wrong)", "index"),
    P("matmul_dp4a.cu", "((reinterpret_cast<size_t>(Bb) & 1) | ((b_e0 | ldb) & 3)) == 0",
      "((reinterpret_cast<size_t>(Bb) & 1) | ((b_e0 | ldb) & 1)) == 0",
      "word path taken for rows at 2-element (one byte) boundaries", "comparison"),
    P("matmul_dp4a.cu", "unsigned h = nibbles4(Bb, e, b_len) >> b_nsh;", "unsigned h = nibbles4(Bb, e, b_len);",
      "edge path: a cut column block not moved into place", "index"),
    P("matmul_dp4a.cu", "const int b_nsh = 4 * min(n0 + b_n - b_ns, 4);", "const int b_nsh = 4 * min(n0 + b_n - b_ns, 3);",
      "edge path: nibble move clamped at 3 (columns wholly past N)", "index"),
    P("matmul_dp4a.cu", "            if (k + r >= K) h = 0u;", "            if (k + r > K) h = 0u;",
      "wide edge path: row K not zeroed for the column sums", "comparison"),
    P("matmul_dp4a.cu", "P4 ? Bb + ((b_e0 + b_word_e) >> 1)", "P4 ? Bb + (b_word_e >> 1)",
      "word path: the batch offset dropped (matrix 0 for every matrix)", "index"),
    P("matmul_dp4a.cu", "const int b_len = N - b_ns;", "const int b_len = N + 1 - b_ns;",
      "edge path: window one element longer (the odd-N pad nibble read)", "ragged block"),
    # ------------------------------------------------------------ matmul_stream_packed.cu
    M("matmul_stream_packed.cu", "  if (n >= N) return;", "  if (n > N) return;",
      "column N stored (one past the row)", "comparison"),
    M("matmul_stream_packed.cu", "\n      if (m >= M) break;", "\n      if (m > M) break;",
      "row M stored (one past the matrix)", "comparison"),
    M("matmul_stream_packed.cu", "        if (INT4) w[i] ^= 0x88888888u;\n", "",
      "int4 codes unpacked as uint4 (no sign)", "conversion"),
    M("matmul_stream_packed.cu", "off_e |= static_cast<unsigned>((INT4 ? 120 : 128) - ze)",
      "off_e |= static_cast<unsigned>((INT4 ? 120 : 128) + ze)", "b's zero point added (even columns)", "sign"),
    M("matmul_stream_packed.cu", "      if (valid < 4) {", "      if (valid < 0) {",
      "rows past K not zeroed (column sums for a's zero point see them)", "comparison"),
    M("matmul_stream_packed.cu", "    __syncthreads();\n    slot = slot + 1 == RING ? 0 : slot + 1;\n    // GRP: a group ends after",
      "    slot = slot + 1 == RING ? 0 : slot + 1;\n    // GRP: a group ends after", "no barrier between the transpose and the dp4a loop", "barrier"),
    M("matmul_stream_packed.cu", "if (aligned && ln + VCOLS <= N) cp_async16_whole", "if (aligned && ln < N) cp_async16_whole",
      "16-byte loads of a row's last columns past N (past the last row's end)", "comparison"),
    M("matmul_stream_packed.cu", "for (int s = 0; s < S::KSPLIT; ++s) sum += red[slot]",
      "for (int s = 0; s < S::KSPLIT - 1; ++s) sum += red[slot]", "the last k-split's partial sums dropped", "index"),
    M("matmul_stream_packed.cu", "acc[r][c] - za * cs[c];", "acc[r][c] + za * cs[c];",
      "a's zero point correction added", "sign"),
    M("matmul_stream_packed.cu", "const int m = min(rg * S::RM + r, M - 1);\n      const unsigned za",
      "const int m = rg * S::RM + r;\n      const unsigned za",
      "per-row a zero points read past M", "index"),
    M("matmul_stream_packed.cu", "b_scale = mm::batch_params(b_scale, bp_bs, z);",
      "b_scale = mm::batch_params(b_scale, bp_bs, 0);", "per-batch b scales: matrix 0's for every matrix",
      "index"),
    M("matmul_stream_packed.cu", "const int64* off = offsets + 3 * static_cast<int64>(z);",
      "const int64* off = offsets + 3 * static_cast<int64>(z / 2);", "matrix z reads the offsets of z / 2",
      "index"),
    # split-K of the stream kernel (blockIdx.z = a chunk of K) and its finish pass
    M("matmul_stream_packed.cu", "Ke = min(K, kb + k_chunk);", "Ke = min(K, kb + k_chunk + kRows);",
      "a chunk also sums the next chunk's first stage", "index"),
    M("matmul_stream_packed.cu", "for (int s = 0; s < splits; ++s) total",
      "for (int s = 1; s < splits; ++s) total", "the first chunk's partial sums dropped", "index"),
    M("matmul_stream_packed.cu", "partial + (static_cast<int64>(blockIdx.z) * gridDim.y + z) * M",
      "partial + (static_cast<int64>(blockIdx.z) * gridDim.y) * M", "every matrix's partials at matrix 0's place",
      "index"),
    M("matmul_stream_packed.cu", "const float* const bsz = mm::batch_params(b_scale, bp_bs, z);",
      "const float* const bsz = mm::batch_params(b_scale, bp_bs, 0);",
      "finish pass: matrix 0's per-batch b scales for every matrix", "index"),
    # the grouped kernel (blocked scales along K) and its finish pass
    M("matmul_stream_packed.cu", "        for (int j = 0; j < kAhead; ++j)\n          if (g0 + j < groups) v = step(",
      "        for (int j = kAhead - 1; j >= 0; --j)\n          if (g0 + j < groups) v = step(",
      "grouped finish: groups added in descending order", "order"),
    M("matmul_stream_packed.cu", "        zp_offsets(b_zp != nullptr ? b_zp + static_cast<int64>(tg) * zp_ld : b_zp);", "",
      "grouped: the first group's zero points for every group", "index"),
    M("matmul_stream_packed.cu", "        if (j == kWords / S::KSPLIT / 2 - 1 && half_end) flush(cur);", "",
      "grouped: a group ending mid-stage not closed (two groups summed as one)", "order"),
    M("matmul_stream_packed.cu", "cur_end == k0 + kRows / 2 && cur_end < Ke;", "cur_end == k0 + kRows / 2 && cur_end <= Ke;",
      "grouped: a chunk ending mid-stage flushed twice", "comparison"),
    # one group of scales on the grouped kernel (each chunk a group) and the finish pass's int32 output
    M("matmul_stream_packed.cu", "for (int s = 0; s < splits; ++s) sum +=", "for (int s = 0; s < 1; ++s) sum +=",
      "grouped finish: only a group's first chunk", "index"),
    M("matmul_stream_packed.cu", "    *c = groups > 0 ? acc(0) : 0;", "    *c = groups > 0 ? w[0] : 0;",
      "grouped finish, int32 out: the first workspace entry, not the group's sum", "index"),
    Mutation("matmul_epilogue.cuh", "  return b_per_col < 2 ? (b_per_col ? n : 0) : static_cast<int64>(n) * groups;",
             "  return b_per_col < 2 ? n : static_cast<int64>(n) * groups;",
             "grouped finish (mm::scales_at since session 43): a per-tensor b scale read per column", "index",
             "matmul_stream_packed.cu"),
    # an 8-bit b: its zero point taken out of the sums afterwards, the byte path, the transpose
    M("matmul_stream_packed.cu", "sum += (static_cast<unsigned>(rows) * za - row) * zb;", "sum -= row * zb;",
      "8-bit b: the rows * a_zp * b_zp term dropped", "arith"),
    M("matmul_stream_packed.cu", "          if (has_zb8) ra[r] = dp4a::dot4<TA, uint8>(aw, dp4a::kOnes, ra[r]);", "",
      "8-bit b: a's row sums never taken (b's zero point ignored)", "arith"),
    M("matmul_stream_packed.cu", "const int rows = min(g * group + group, K) - g * group;", "const int rows = group;",
      "8-bit b: a ragged last group counted whole", "index"),
    M("matmul_stream_packed.cu", "each_sum(0, b_zp, Ke - kb, [&]", "each_sum(0, b_zp, K, [&]",
      "8-bit b, split K: every chunk counts all of K's rows", "index"),
    M("matmul_stream_packed.cu", "      if (n + 4 * i + j < N) w[i] |= static_cast<unsigned>(__ldg(B + e + 4 * i + j))",
      "      if (n + 4 * i + j <= N) w[i] |= static_cast<unsigned>(__ldg(B + e + 4 * i + j))",
      "8-bit b, byte path: one column past N read", "comparison"),
    M("matmul_stream_packed.cu", "          w0[i] = w.x, w1[i] = w.y;", "          w0[i] = w.y, w1[i] = w.x;",
      "8-bit b: the two 4-column words of a row swapped", "index"),
    M("quant_types.cu", "    lo = (lo >> W) | (hi << (64 - W));\n    hi = (hi >> W) | (word << (64 - W));",
      "    lo = (lo >> W) | (hi << (64 - W));\n    hi = (hi >> W) | (word << (64 - W - 1));",
      "push_word (quantize, 16-byte path): a chunk's word placed one bit low in the packed group", "packing"),
    M("quant_types.cu", "    lo = (lo >> W) | (hi << (64 - W));\n    hi >>= W;", "    lo = (lo >> W) | (hi << (64 - W));",
      "pop_word (dequantize, 16-byte path): the high half not shifted (a chunk's codes read twice)", "packing"),
    M("quant_types.cu", "if (precision == 1) quantize_group<X, T, 1>", "if (precision == 1) quantize_group<X, T, 0>",
      "quantize (16-byte path): precision float16 ignored (the float32 loop)", "precision"),
    M("quant_types.cu", ": static_cast<unsigned>(word >> (k * bits % 64)) & kMask<bits>",
      ": static_cast<unsigned>(word >> (k * bits % 64)) & kMask<bits - 1>",
      "dequantize (16-byte path): each code's top bit dropped", "packing"),
    M("qt_codes.cuh", "  if (!traits<T>::is_float || r == r) return r;", "  return r;",
      "quantize: a float16 NaN's sign dropped (the GPU's cvt.f32.f16 gives +NaN)", "sign", "quant_types.cu"),
    M("matmul_stream_packed.cu", "          if (g0 + j < groups) v = step(", "          if (g0 + j <= groups) v = step(",
      "grouped finish, loads ahead: one step past the last group (the last repeated)", "comparison"),
    M("matmul_stream_packed.cu", "          const int64 g = min(g0 + j, groups - 1);",
      "          const int64 g = min(g0 + j + 1, groups - 1);",
      "grouped finish, loads ahead: each step reads the next group's sum and scale", "index"),
    # ------------------------------------------------------------ common.cuh (quantize_contig)
    M("common.cuh", "  return fabsf(q2) < __int_as_float(0x7F800000) ? q2 : q0;", "  return q2;",
      "reciprocal_div: no Inf guard (x = +-Inf quantizes as NaN)", "special values", "elementwise.cu"),
    M("common.cuh", "  const float q0 = ieee_mul(x, r.y);\n", "  const float q0 = ieee_mul(x, r.y);\n  return q0;\n",
      "reciprocal_div: no corrections (x * RN(1/s) is not the quotient; one correction is, as far as the "
      "tests see, but unproven, so the kernel makes two)", "rounding", "elementwise.cu"),
    M("common.cuh", "  return a >= __int_as_float(67 << 23) && a <= __int_as_float(187 << 23);",
      "  return a > 0.0f && a < __int_as_float(0x7F800000);",
      "reciprocal_ok: every finite nonzero scale (subnormal scales overflow 1/s)", "comparison", "elementwise.cu"),
    # ------------------------------------------------------------ quant_types.cu: parameters by chunk
    M("quant_types.cu", "return inner == 1 && b + C <= B && d + C <= D; }", "return inner == 1 && b + C <= B + 1 && d + C <= D; }",
      "Walker::uniform: a chunk straddling a block boundary takes one parameter", "comparison"),
    M("quant_types.cu", "    if (b == B) { b = 0; ++idx; }", "    if (b == B) { b = 0; }",
      "Walker::skip: the block carry does not advance the parameter index", "index"),
    M("quant_types.cu", "    idx -= inner;  // the same block", "    // the same block",
      "Walker::next: the index runs on past the row of parameters (no step back)", "index"),
    M("quant_types.cu", "    base = divmod(r, D, d) * S * inner;", "    base = divmod(r, D, d) * S;",
      "Walker::start: the row's first parameter ignores inner", "index"),
    M("quant_types.cu", "    if (PREC == 0 && q.mode == CODE_RECIP) codes(by_reciprocal);",
      "    if (PREC == 0) codes(by_reciprocal);",
      "shared_codes: the reciprocal path for every scale (a zero reciprocal for odd scales)", "special values"),
    # ------------------------------------------------------------ quant_types.cu: groups, float codes' own coder
    M("quant_types.cu", "      if (traits<T>::is_float && !(T == E2M1 && zp_given) && positive_finite<PREC>(s))",
      "      if (traits<T>::is_float && positive_finite<PREC>(s))",
      "Params::prepare: float4 with a zero point takes x's sign (a +0 zero point no longer clears -0)", "zero point"),
    M("qt_codes.cuh", "  const float r = PREC == 1 ? round_f16(s) : PREC == 2 ? round_bf16(s) : s;",
      "  const float r = s;",
      "positive_finite: the scale checked before its rounding to the precision (0 or inf there)", "special values", "quant_types.cu"),
    M("qt_codes.cuh", "  return __float_as_uint(r) - 1u < 0x7F7FFFFFu;", "  return __float_as_uint(r) - 1u < 0x7F800000u;",
      "positive_finite: an infinite scale counted as finite (inf / inf takes x's sign)", "comparison", "quant_types.cu"),
    M("quant_types.cu", "        mode = recip ? CODE_FLOAT_RECIP : CODE_FLOAT;", "        mode = CODE_FLOAT_RECIP;",
      "Params::prepare: float codes through the reciprocal for every scale (a zero reciprocal off its range)",
      "special values"),
    M("quant_types.cu", "      shared_codes<X, T, PREC>(chunk, p, zp_given, saturate, put);\n      if (!whole) w.skip(C);",
      "      shared_codes<X, T, PREC>(chunk, p, zp_given, saturate, put);",
      "quantize_group: a chunk sharing one parameter does not step the walker", "index"),
    M("quant_types.cu", "  const bool whole = w.uniform((c1 - c0) * C);  // one parameter for the chunks",
      "  const bool whole = w.uniform((c1 - c0) * C / 2);  // one parameter for the chunks",
      "quantize_group: half the chunks sharing a parameter taken for all of them", "comparison"),
    M("qt_codes.cuh", "    const unsigned code = min(mag < (static_cast<unsigned>(127 + emin) << 23) ? sub : normal, cap_code);",
      "    const unsigned code = min(mag < (static_cast<unsigned>(127 + emin - 1) << 23) ? sub : normal, cap_code);",
      "SmallFloat::magnitude: the largest subnormal binade through the normal formula", "comparison", "quant_types.cu"),
    M("qt_codes.cuh", "    if (SPECIAL == FN && mag == sbit - 1u) w = 0x7FC00000u;", "",
      "SmallFloat::decode (fn): the NaN code decoded as 480", "NaN", "quant_types.cu"),
    M("qt_codes.cuh", "static_cast<unsigned>(127 + emin - M + 23) << 23;", "static_cast<unsigned>(127 + emin - M + 22) << 23;",
      "encode: subnormal codes rounded to half the subnormal step", "rounding", "quant_types.cu"),
    # ------------------------------------------------------------ quant_types.cu: neighbour parameters, staging batches
    M("quant_types.cu", "    return inner > 1 ? in + C <= inner : LAST",
      "    return inner > 1 ? in + C <= inner + 1 : LAST",
      "Walker::neighbours: a chunk crossing the end of a row of inner takes neighbouring parameters", "comparison"),
    M("quant_types.cu", "      in += C;\n      if (in == inner) carry();\n", "      in += C;\n",
      "Walker::skip_row: no carry at the end of a row of inner", "index"),
    M("quant_types.cu", "p.scale_at(i0 + k), p.zp_at(i0 + k), zp_given,",
      "p.scale_at(i0), p.zp_at(i0 + k), zp_given,",
      "neighbour_codes (quantize): every element of the chunk takes the first one's scale", "index"),
    M("quant_types.cu", "dequant_value<T>(code_at(k), p.zp_at(i0 + k)), p.scale_at(i0 + k));",
      "dequant_value<T>(code_at(k), p.zp_at(i0)), p.scale_at(i0 + k));",
      "dequantize, neighbour path: every element of the chunk takes the first one's zero point", "zero point"),
    M("quant_types.cu", "        cp_async_wait<1>();\n        __syncwarp();\n      }\n      if (fast) {",
      "        cp_async_wait<2>();\n        __syncwarp();\n      }\n      if (fast) {",
      "qt_quantize staging: a round waits for all but its two newest copy groups (its own still in flight)",
      "wait_group"),
    M("avgpool.cu", "          if (ow0 + j >= OW) break;", "          if (ow0 + j >= OW - 1) break;",
      "tile edge epilogue: the row's last output skipped with those past its end", "boundary"),
    M("quant_types.cu", "  if (whole && c1 < G / C) w.skip((c1 - c0) * C);", "  if (whole && c1 < G / C) w.skip(C);",
      "quantize_group: a whole part steps the walker one chunk, not the part", "index"),
    M("quant_types.cu", "        if (whole && round + 1 < PARTS) w.skip(PART * C);",
      "        if (whole && round + 1 < PARTS) w.skip(C);",
      "qt_dequantize: a whole part steps the walker one chunk, not the part", "index"),
    M("quant_types.cu", "base + static_cast<int64>(j / PART) * G + j % PART * C",
      "base + static_cast<int64>(j / PART) * PART * C + j % PART * C",
      "qt_quantize staging: a part's rows read as if contiguous (group stride PART chunks, not G)", "stride"),
    M("quant_types.cu", "base + static_cast<int64>(row) * G + j % PART * C",
      "base + static_cast<int64>(row) * PART * C + j % PART * C",
      "qt_dequantize staging: a part's rows stored as if contiguous (group stride PART chunks, not G)", "stride"),
    M("avgpool.cu", "      const unsigned orow_i = plane * static_cast<unsigned>(OH) + ohu;",
      "      const unsigned orow_i = r;",
      "tile: the output row taken as the plane-minor row index (out is plane-major)", "index"),
    M("avgpool.cu", "      const unsigned plane = r - ohu * static_cast<unsigned>(planes);",
      "      const unsigned plane = r - ohu * static_cast<unsigned>(OH);",
      "tile: the row's plane split off with OH instead of the plane count", "index"),
    # ------------------------------------------------------------ quant_types.cu: quantize's cp.async pipeline
    M("quant_types.cu", "        cp_async_wait<1>();\n        __syncwarp();\n      }\n      if (fast) {",
      "        cp_async_wait<1>();\n      }\n      if (fast) {",
      "qt_quantize staging: a lane reads its row before the lanes that copied it have waited", "barrier"),
    M("quant_types.cu", "        if (round + 1 < PARTS) copy_round(wg, round + 1, buf ^ 1, staged);",
      "        if (round + 1 < PARTS) copy_round(wg, round + 1, buf ^ 1, 0xFFFFFFFFu);",
      "qt_quantize staging: a set's later rounds copy every row, its partial and absent groups too", "index"),
    # ------------------------------------------------------------ quant_types.cu: neighbours along the last axis
    M("quant_types.cu", "    return inner > 1 ? in + C <= inner : LAST && B == 1 && d + C <= D;",
      "    return inner > 1 ? in + C <= inner : LAST && B == 1 && d + C <= D + 1;",
      "Walker::neighbours (last axis): a chunk crossing the end of a row of the parameter axis takes neighbours",
      "comparison"),
    M("quant_types.cu", "      base += S;\n      idx = base;\n    }\n  }", "      base += S;\n    }\n  }",
      "Walker::skip_row (last axis): the row's end does not restart the index at the next row's parameters",
      "index"),
    M("quant_types.cu", "  if (a < m) {\n    rem = a;", "  if (a <= m) {\n    rem = a;",
      "divmod: a dividend equal to the divisor taken for a quotient of 0 (a walker start on a row's first element)",
      "comparison"),
    # ------------------------------------------------------------ matmul_stream_packed.cu: b's cp.async ring (session 26)
    M("matmul_stream_packed.cu", "    cp_async_wait<RING - 2>();", "    cp_async_wait<RING - 1>();",
      "stream ring: the wait one group too weak (a stage used before its copies landed)", "wait_group"),
    M("matmul_stream_packed.cu", "    fill(k0 + (RING - 1) * kRows, slot == 0 ? RING - 1 : slot - 1);",
      "    fill(k0 + (RING - 1) * kRows, slot == RING - 1 ? 0 : slot + 1);",
      "stream ring: the next stage copied into the slot of the stage after this one (still to be used)", "index"),
    M("matmul_stream_packed.cu", "    slot = slot + 1 == RING ? 0 : slot + 1;\n", "",
      "stream ring: the slot not advanced (every stage read from slot 0)", "index"),
    M("matmul_stream_packed.cu", "  for (int s = 0; s < RING - 1; ++s) fill(kb + s * kRows, s);",
      "  for (int s = 0; s < RING - 2; ++s) fill(kb + s * kRows, s);",
      "stream ring: one stage fewer issued before the loop (a slot never filled, the wait counts off by one)",
      "comparison"),
    M("matmul_stream_packed.cu", "        if (k >= Ke) *dst = make_uint4(0u, 0u, 0u, 0u);\n        else if",
      "        if (false) *dst = make_uint4(0u, 0u, 0u, 0u);\n        else if",
      "stream ring: rows past the chunk's end copied from b (the next chunk's rows, or past b's end)", "bounds"),
    # ------------------------------------------------------------ the general pooling kernel writes through
    # out's strides (a channels_last result in place)
    M("avgpool.cu", "        op[oh * so_h + ow * so_w] =", "        op[oh * so_w + ow * so_h] =",
      "general: out's H and W strides swapped", "stride"),
    M("avgpool.cu", "    TO* op = out + (n * so_n + c * so_c + od * so_d);", "    TO* op = out + (n * so_n + c * so_c);",
      "general: out's D stride dropped (every depth written over the first)", "stride"),
    # avgpool.cu's channels_last kernels (session 30)
    AP("avgpool_cl.cu", "  constexpr int LANE_TAPS = 257;  // 257", "  constexpr int LANE_TAPS = 258;  // 257",
      "channels_last: a 16-bit lane holds 258 taps (one past 65535)", "constant"),  # (avgpool_cl's, not _global's)
    AP("avgpool_cl.cu", "hi[k] += __byte_perm(w[k], 0u, 0x4341u)", "hi[k] += __byte_perm(w[k], 0u, 0x4342u)",
      "channels_last: odd bytes' lane takes byte 2 for byte 1", "index"),
    AP("avgpool_cl.cu", "(j % 4) % 2 ? hi[j / 4] : lo[j / 4]", "(j % 4) % 2 ? lo[j / 4] : hi[j / 4]",
      "channels_last: lanes of even and odd channels swapped", "index"),
    AP("avgpool_cl.cu", "\n      if (lut_n > 0 && count_in == kvol) {", "\n      if (lut_n > 0) {",
      "channels_last: the table for windows cut by the edge", "comparison"),
    AP("avgpool_cl.cu", "const int s = static_cast<int>(sums[j * stride]) - count_in *",
      "const int s = static_cast<int>(sums[j]) - count_in *",
      "channels_last: parked sums read at the wrong stride", "index"),
    AP("avgpool_cl.cu", "split_item(p, OW, mag_ow, sh_ow, OH, mag_oh, sh_oh,", "split_item(p, OW, mag_ow, sh_ow, OH, mag_ow, sh_ow,",
      "channels_last: oh split by OW's magic", "index"),
    AP("avgpool_cl.cu", "      reinterpret_cast<unsigned*>(op)[k] = word;", "      reinterpret_cast<unsigned*>(op)[0] = word;",
      "channels_last: exact epilogue's words all stored at the first", "index"),
    AP("avgpool_cl.cu", "          my_sums[j * CL_BLOCK_THREADS] = lane(j) + (drained ? my_sums[j * CL_BLOCK_THREADS] : 0u);",
      "          my_sums[j * CL_BLOCK_THREADS] = lane(j);",
      "channels_last: a drain overwrites the parked sums instead of adding", "operator"),
    AP("avgpool_cl.cu", "      if (!drained || held > 0) drain();", "      if (!drained) drain();",
      "channels_last: the exact epilogue skips the last drain after an earlier one", "comparison"),
    AP("avgpool_cl.cu", "    for (int t = 0; t < 4; ++t)\n      if (t < nw) load_words<NWD>(xr + t * step_w, w[t]);",
      "    for (int t = 0; t < 4; ++t)\n      if (t <= nw && t < 4) load_words<NWD>(xr + t * step_w, w[t]);",
      "channels_last: a short row loads one tap past its end", "bounds"),
    # avgpool.cu's strip kernel (session 31)
    M("avgpool.cu", "            for (int u = 1; u < KH; ++u) vs[k] += ring[u][k];",
      "            for (int u = 1; u < KH - 1; ++u) vs[k] += ring[u][k];",
      "strip: an output row sums one ring slot too few", "index"),
    M("avgpool.cu", "          const int biased = BIAS * KW * cd * ch;", "          const int biased = BIAS * KW * cd * KH;",
      "strip: int8 bias counted for window rows outside the image", "constant"),
    M("avgpool.cu", "        if (i < nin && kd < cd && h >= 0 && h < H)", "        if (i < nin && kd < cd && h >= 0 && h <= H)",
      "strip: the row past the image's last is read", "bounds"),
    M("avgpool.cu", "fetch(more ? i : i + 1, more ? kd + 1 : 0, nxt);", "fetch(more ? i : i + 1, 0, nxt);",
      "strip: every D tap of a row reads the first", "index"),
    M("avgpool.cu", "    lanes[k] = FIRST ? __byte_perm(lo, hi, 0x5410u) : lo + (hi << 16);",
      "    lanes[k] = FIRST ? __byte_perm(lo, hi, 0x5410u) : lo + hi;",
      "strip: a later D tap adds the odd window's sum to the even one's lane", "operator"),
    M("avgpool.cu", "    lanes[k] = FIRST ? __byte_perm(lo, hi, 0x5410u) : lo + (hi << 16);",
      "    lanes[k] = FIRST ? __byte_perm(hi, lo, 0x5410u) : lo + (hi << 16);",
      "strip: the first tap's even and odd window sums swapped", "index"),
    M("avgpool.cu", "            if (wfull) continue;", "            continue;",
      "strip: the table for windows cut by the W edge (no exact fix-up)", "comparison"),
    M("avgpool.cu", "          const int oh = oh_begin + i - (KH - 1);\n          unsigned vs[NP];",
      "          const int oh = oh_begin + i - KH + 2;\n          unsigned vs[NP];",
      "strip: output rows one down from their windows", "index"),
    M("avgpool.cu", "      const int nin = min(S, OH - oh_begin) + KH - 1;  // input rows the strip reads\n      const int hb = oh_begin - PH;                      // the input row of step 0\n      const int d0 = od * SD - PD;",
      "      const int nin = min(S, OH - oh_begin) + KH - 2;  // input rows the strip reads\n      const int hb = oh_begin - PH;                      // the input row of step 0\n      const int d0 = od * SD - PD;",
      "strip: a strip's last output row never made", "bounds"),
    M("avgpool.cu", "__byte_perm(vs[j / 2], 0u, j % 2 ? 0x4432u : 0x4410u)", "__byte_perm(vs[j / 2], 0u, j % 2 ? 0x4410u : 0x4432u)",
      "strip: table path's even and odd lanes swapped", "index"),
    M("avgpool.cu", "(my_lanes[(j / 2) * STRIP_THREADS] >> (16 * (j % 2)))", "(my_lanes[(j / 2) * STRIP_THREADS] >> (16 * (1 - j % 2)))",
      "strip: exact epilogue reads the other lane of its parked word", "index"),
    M("avgpool.cu", "          const bool words = ow0 + OPT <= OW &&", "          const bool words = ow0 + OPT <= OW + 1 &&",
      "strip: a row's last partial group stored as whole words", "bounds"),
    M("avgpool.cu", "  constexpr unsigned BIAS_WORD = BIAS ? 0x80808080u : 0u;", "  constexpr unsigned BIAS_WORD = BIAS ? 0x80808000u : 0u;",
      "strip: one byte of each int8 word not biased", "constant"),
    M("avgpool.cu", "      const unsigned plane = r - strip * static_cast<unsigned>(planes);",
      "      const unsigned plane = r - strip * static_cast<unsigned>(planes - 1);",
      "strip: plane index from the wrong plane count", "index"),
    AP("avgpool_common.cuh", "  auto touched = [&](int i) { return 4 * i < L || 4 * i < static_cast<int>(s) + L; };",
      "  auto touched = [&](int i) { return 4 * i < L || 4 * i <= static_cast<int>(s) + L; };",
      "fetch_span: a word past the span read", "bounds"),
    M("avgpool.cu", "            const int jl = min(je, max(0, -w0));", "            const int jl = min(je, max(0, -w0 - 1));",
      "strip: the first window cut by the left edge keeps its table entry", "bounds"),
    M("avgpool.cu", "for (int j = max(jl, W - KW - w0 + 1); j < je; ++j)", "for (int j = max(jl, W - KW - w0 + 2); j < je; ++j)",
      "strip: the first window cut by the right edge keeps its table entry", "bounds"),
    AP("avgpool_common.cuh", "      case 1: load_aligned_words<1, 0, NA>(p, w); break;", "      case 1: load_aligned_words<0, 0, NA>(p, w); break;",
      "fetch_span: a span 4 bytes past a 16-byte boundary loaded as if on it (misaligned vectors)", "index"),
    AP("avgpool_common.cuh", "    constexpr int OFF = (PH + I) % 4;", "    constexpr int OFF = (PH + I + 2) % 4;",
      "load_aligned_words: every word's place in its 16-byte chunk off by two", "index"),
    M("avgpool.cu", "const bool pairs = words && (reinterpret_cast<unsigned long long>(orow) & 7) == 0;",
      "const bool pairs = words && (reinterpret_cast<unsigned long long>(orow) & 3) == 0;",
      "strip: 8-byte stores at 4-byte aligned rows", "comparison"),
    # avgpool.cu's channels_last strip kernel (session 31)
    AP("avgpool_cl.cu", "            for (int u = 1; u < KH; ++u) {\n              lo[k] += ring_lo[u][k];",
      "            for (int u = 1; u < KH - 1; ++u) {\n              lo[k] += ring_lo[u][k];",
      "channels_last strip: an output row sums one ring slot too few", "index"),
    AP("avgpool_cl.cu", "          for (int k = 0; k < NWD; ++k) ring_lo[t][k] = ring_hi[t][k] = 0u;\n          const int h = hb + i;",
      "          const int h = hb + i;",
      "channels_last strip: a ring slot not emptied before its next row", "operator"),
    AP("avgpool_cl.cu", "          if (h >= 0 && h < H) {", "          if (h >= 0 && h <= H) {",
      "channels_last strip: the row past the image's last is read", "bounds"),
    AP("avgpool_cl.cu", "split_item(p, OW, mag_ow, sh_ow, NS, mag_ns, sh_ns,", "split_item(p, OW, mag_ow, sh_ow, OD, mag_ns, sh_ns,",
      "channels_last strip: strip index from the wrong count", "index"),
    AP("avgpool_cl.cu", "          const int oh = oh_begin + i - (KH - 1);\n          unsigned lo[NWD], hi[NWD];",
      "          const int oh = oh_begin + i - KH + 2;\n          unsigned lo[NWD], hi[NWD];",
      "channels_last strip: output rows one down from their windows", "index"),
    AP("avgpool_cl.cu", "            tap_range<int>(oh - PH, KH, 1, -PH, H + EH, a, b);\n            count = cdp * (b - a) * cwp;",
      "            tap_range<int>(oh - PH, KH, 1, -PH, H, a, b);\n            count = cdp * (b - a) * cwp;",
      "channels_last strip: IncludePadding's divisor leaves out the H end padding", "bounds"),
    AP("avgpool_cl.cu", "            hi[k] += ring_hi[u][k];", "            hi[k] += ring_lo[u][k];",
      "channels_last strip: odd channels' lanes summed from the even ones'", "index"),
    AP("avgpool_cl.cu", "            tap_range<int>(oh - PH, KH, 1, -PH, H + EH, a, b);\n            count = cdp * (b - a) * cwp;",
      "            tap_range<int>(oh - PH, KH, 1, -PH, H + EH + 1, a, b);\n            count = cdp * (b - a) * cwp;",
      "channels_last strip: IncludePadding's divisor counts a row past the H end padding", "bounds"),
    M("avgpool.cu", "            tap_range<int>(oh - PH, KH, 1, -PH, H + EH, a, b);\n            chp = b - a;",
      "            tap_range<int>(oh - PH, KH, 1, -PH, H + EH + 1, a, b);\n            chp = b - a;",
      "strip: IncludePadding's H divisor clipped one row past the end padding", "bounds"),
    # avgpool_cl.cu's channels_last global kernels (session 32)
    AP("avgpool_cl.cu", "        i64 left = begin + ty < end ? (end - begin - ty - 1) / by + 1 : 0;",
       "        i64 left = begin + ty < end ? (end - begin - ty) / by : 0;",
       "channels_last global: a thread's last position of a chunk left out where the chunk is not a multiple of the rows",
       "bounds"),
    AP("avgpool_cl.cu", "const i64 begin = static_cast<i64>(s) * chunk, end = begin + chunk < vol ? begin + chunk : vol;",
       "const i64 begin = static_cast<i64>(s) * chunk, end = begin + chunk;",
       "channels_last global: the last chunk reads past the image", "bounds"),
    AP("avgpool_cl.cu", "          const int taps = left < LANE_TAPS ? static_cast<int>(left) : LANE_TAPS;",
       "          const int taps = left < LANE_TAPS + 1 ? static_cast<int>(left) : LANE_TAPS + 1;",
       "channels_last global: 258 taps in a 16-bit lane (wraps at 255s)", "bounds"),
    AP("avgpool_cl.cu", "        for (int r = 0; r < by; ++r) sum += rows[slot(r * bx + col / VEC, col % VEC)];",
       "        for (int r = 1; r < by; ++r) sum += rows[slot(r * bx + col / VEC, col % VEC)];",
       "channels_last global: the first row of threads' sums left out", "index"),
    AP("avgpool_cl.cu", "      __syncthreads();  // rows is reused by the next item", "",
       "channels_last global: no barrier before the next item overwrites the rows' sums", "sync"),
    AP("avgpool_cl.cu", "          part[static_cast<i64>(item) * C + c] = sum;",
       "          part[static_cast<i64>(s) * C + c] = sum;",
       "channels_last global: chunk sums of every image written over the first image's", "index"),
    AP("avgpool_cl.cu", "              pool_value<TO, i64>(static_cast<i64>(sum) - vol * (BIAS + q.xzp), vol, q);",
       "              pool_value<TO, i64>(static_cast<i64>(sum) - vol * q.xzp, vol, q);",
       "channels_last global: int8's bias of 128 a tap not taken out (one chunk)", "operator"),
    AP("avgpool_cl.cu", "    for (int s = 0; s < splits; ++s) sum += __ldg(p + static_cast<i64>(s) * C);",
       "    for (int s = 1; s < splits; ++s) sum += __ldg(p + static_cast<i64>(s) * C);",
       "channels_last global finish: the first chunk's sums left out", "index"),
    AP("avgpool_cl.cu", "    const unsigned* p = part + n * splits * C + c;", "    const unsigned* p = part + n * C + c;",
       "channels_last global finish: image n's chunks read from the wrong place", "index"),
    AP("avgpool_cl.cu", "        const TX* xr = x + (static_cast<i64>(n) * sxn + static_cast<i64>(g) * VEC + (begin + ty) * sxp);",
       "        const TX* xr = x + (static_cast<i64>(n) * sxn + static_cast<i64>(g) * VEC + (begin + ty) * sxp + sxp);",
       "channels_last global: every position read one along (past the image at its end)", "index"),
    AP("avgpool_cl.cu", "        const int c = gb * bx * VEC + col;\n        if (c >= C) continue;",
       "        const int c = gb * bx * VEC + col;\n        if (c > C) continue;",
       "channels_last global: a channel past C written (idle lanes of the last channel block)", "bounds"),
    # dynamic_quant.cu (session 32)
    M("dynamic_quant.cu", "  lo = fminf(lo, v);  // a NaN v leaves lo and hi as they are", "  lo = fmaxf(lo, v);",
      "range: the minimum folded as a maximum", "operator"),
    M("dynamic_quant.cu", "    fold(dmlq::to_f32(float16{static_cast<unsigned short>(w[k] >> 16)}), lo, hi);",
      "    fold(dmlq::to_f32(float16{static_cast<unsigned short>(w[k] & 0xFFFFu)}), lo, hi);",
      "range, float16: each word's high half never read", "index"),
    M("dynamic_quant.cu", "  for (long long i = lane; i < edge; i += lanes) {", "  for (long long i = lane; i < edge - 1; i += lanes) {",
      "range: the last single element (past the 16-byte vectors) left out", "bounds"),
    M("dynamic_quant.cu", "    for (int k = 1; k < warps; ++k) {", "    for (int k = 2; k < warps; ++k) {",
      "range: the block's second warp left out", "index"),
    M("dynamic_quant.cu", "  for (int i = threadIdx.x; i < blocks; i += blockDim.x) {",
      "  for (int i = threadIdx.x; i < blocks - 1; i += blockDim.x) {",
      "parameters: the last block's pair left out", "bounds"),
    M("dynamic_quant.cu", "  const float span = hi == lo ? 1.0f : dmlq::ieee_add(hi, -lo);",
      "  const float span = dmlq::ieee_add(hi, -lo);",
      "parameters: an all-zero range gives scale 0, not 1 / (qmax - qmin)", "operator"),
    M("dynamic_quant.cu", "  const float zf = dmlq::ieee_add(static_cast<float>(QMIN), -dmlq::ieee_div(lo, s));",
      "  const float zf = dmlq::ieee_add(static_cast<float>(QMIN), dmlq::ieee_div(lo, s));",
      "parameters: the zero point's quotient added, not subtracted", "operator"),
    M("dynamic_quant.cu", "    part[2 * blockIdx.x + 1] = hi;", "    part[2 * blockIdx.x] = hi;",
      "range: a block's maximum written over its minimum", "index"),
    # (session 32 review: killed by hand on the host harness, by the grid-stride and largest-grid tests)
    AP("avgpool_cl.cu", "    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {",
       "    for (int item = blockIdx.x; item < items; item += gridDim.x) {",
       "channels_last global: item an int (the last block of a 2**31 - 1 block grid wraps to image -3)", "bounds"),
    AP("avgpool_cl.cu", "    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {",
       "    for (i64 item = blockIdx.x; item < items; item += 2 * gridDim.x) {",
       "channels_last global: the grid-stride over items skips every other step", "index"),
    AP("avgpool_cl.cu", "  for (int gb = blockIdx.y; gb * bx < groups; gb += gridDim.y) {\n    const int g = gb * bx + tx;",
       "  for (int gb = blockIdx.y; gb * bx < groups; gb += gridDim.y + 1) {\n    const int g = gb * bx + tx;",
       "channels_last global: the grid-stride over channel blocks skips one", "index"),
    AP("avgpool_cl.cu", "        for (int r = 0; r < by; ++r) sum += rows[slot(r * bx + col / VEC, col % VEC)];",
       "        for (int r = 0; r < by; ++r) sum += rows[(r * bx + col / VEC) * VEC + col % VEC];",
       "channels_last global: the rows' sums read without the chunk rotation they were stored with", "index"),
    AP("avgpool_cl.cu", "          cl_add_row<TX, NWD>(xr + body * step, taps & 3, step, lo, hi);",
       "          cl_add_row<TX, NWD>(xr + body * step, taps & 1, step, lo, hi);",
       "channels_last global: a thread's last 2 or 3 taps cut to 0 or 1", "bounds"),
    # dynamic_quant.cu per_row (session 33)
    M("dynamic_quant.cu", "    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "    fold_span<T>(x + r * cols + c0, max(min(chunk, cols - c0), 0ll),",
      "rows: row r taken at r * cols (rows at other strides, reversed or broadcast, read wrong)", "index"),
    M("dynamic_quant.cu", "    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0 - 1), 0ll),",
      "rows: each split's last element left out", "bounds"),
    M("dynamic_quant.cu", "    const long long r = i / splits, c0 = (i - r * splits) * chunk, outer = r / inner;",
      "    const long long r = i / splits, c0 = (i % 2) * chunk, outer = r / inner;",
      "rows: a split's start from the item's parity, not its place in the row", "index"),
    M("dynamic_quant.cu", "  const long long items = rows * splits;", "  const long long items = rows;",
      "rows: only the first rows' worth of items (split rows left partly unread)", "bounds"),
    M("dynamic_quant.cu", "       i += warps) {  // (i is the same in a warp's lanes)",
      "       i += 2 * warps) {  // (i is the same in a warp's lanes)",
      "rows: the warps' grid-stride skips every other step", "index"),
    M("dynamic_quant.cu", "        part[2 * i + 1] = hi;", "        part[2 * i] = hi;",
      "rows: a split's maximum written over its minimum", "index"),
    M("dynamic_quant.cu", "      if (splits == 1 && scale != nullptr) {", "      if (splits == 1) {",
      "rows: a dask chunk's pairs pass writes parameters through a null scale", "bounds"),
    M("dynamic_quant.cu", "    for (int k = lane; k < splits; k += 32) {", "    for (int k = lane + 1; k < splits; k += 32) {",
      "row parameters: each row's first split left out", "bounds"),
    M("dynamic_quant.cu", "      if (scale != nullptr) {\n        write_params(lo, hi, scale + r, zp + r);",
      "      if (scale != nullptr) {\n        write_params(lo, hi, scale + r, zp);",
      "row parameters: every row's zero point written to row 0", "index"),
    # a's (and quantized_matmul's output's) parameters per batch and row (session 33): flag 2, a
    # (matrices, M) table, matrix z's rows at z * M (tests/test_gpu_batch_rows.py)
    M("matmul_dp4a.cu", "  a_zp = mm::batch_rows(a_zp, a_per_row, M, z);\n", "",
      "batch rows: every matrix reads matrix 0's a zero points", "index"),
    M("matmul_dp4a.cu", "  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);\n", "",
      "batch rows: every matrix reads matrix 0's a scales", "index"),
    M("matmul_dp4a.cu", "  out_scale = mm::batch_rows(out_scale, out_per_row, M, z);\n", "",
      "batch rows: every matrix reads matrix 0's output scales", "index"),
    M("matmul_dp4a.cu", "  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);\n", "",
      "batch rows: every matrix reads matrix 0's output zero points", "index"),
    M("matmul_epilogue.cuh", "  return (p != nullptr && per_row == 2) ? p + static_cast<int64>(M) * z : p;",
      "  return (p != nullptr && per_row != 0) ? p + static_cast<int64>(M) * z : p;",
      "batch rows: per-row parameters offset by matrix too (past the vector's end)", "index", "matmul_dp4a.cu"),
    M("matmul_epilogue.cuh", "  return (p != nullptr && per_row == 2) ? p + static_cast<int64>(M) * z : p;",
      "  return (p != nullptr && per_row == 2) ? p + static_cast<int64>(M) * (z / 2) : p;",
      "batch rows: matrices paired on one table row block", "index", "matmul_mma.cu"),
    M("matmul_mma.cu", "  a_scale = dmlq::mm::batch_rows(a_scale, a_per_row, M, z);\n  a_zp = dmlq::mm::batch_rows(a_zp, "
      "a_per_row, M, z);\n  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);\n  out_zp = "
      "dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  if (bias",
      "  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);\n  out_scale = dmlq::mm::batch_rows(out_scale, "
      "out_per_row, M, z);\n  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  if (bias",
      "batch rows, matmul_mma: every matrix reads matrix 0's a scales", "index"),
    M("matmul_mma.cu", "  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);\n  out_scale = dmlq::mm::batch_rows(out_scale, "
      "out_per_row, M, z);\n  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  if (bias",
      "  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);\n  out_zp = "
      "dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  if (bias",
      "batch rows, matmul_mma: every matrix reads matrix 0's a zero points", "index"),
    M("matmul_mma.cu", "  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  if (bias",
      "  if (bias", "batch rows, matmul_mma: every matrix reads matrix 0's output zero points", "index"),
    M("matmul_mma.cu", "  a_scale = dmlq::mm::batch_rows(a_scale, a_per_row, M, z);\n  a_zp = dmlq::mm::batch_rows(a_zp, "
      "a_per_row, M, z);\n  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);\n  out_zp = "
      "dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  const int m",
      "  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);\n  out_scale = dmlq::mm::batch_rows(out_scale, "
      "out_per_row, M, z);\n  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  const int m",
      "batch rows, split-K epilogue: every matrix reads matrix 0's a scales", "index"),
    M("matmul_mma.cu", "  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);\n  out_zp = "
      "dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  const int m",
      "  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);\n  const int m",
      "batch rows, split-K epilogue: every matrix reads matrix 0's output scales", "index"),
    M("matmul_stream_packed.cu", "  a_zp = mm::batch_rows(a_zp, a_per_row, M, z);\n", "",
      "batch rows, stream body: every matrix's sums take matrix 0's a zero points", "index"),
    M("matmul_stream_packed.cu", "  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);\n  a_zp", "  a_zp",
      "batch rows, stream body: every matrix reads matrix 0's a scales", "index"),
    M("matmul_stream_packed.cu", "  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);\n  // This block's rows",
      "  // This block's rows", "batch rows, stream body: every matrix reads matrix 0's output zero points", "index"),
    M("matmul_stream_packed.cu", "    const float as = mm::batch_rows(a_scale, a_per_row, M, z)[a_per_row ? m : 0];",
      "    const float as = a_scale[a_per_row ? m : 0];",
      "batch rows, grouped finish: every matrix reads matrix 0's a scales", "index"),
    M("matmul_stream_packed.cu", "  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);\n  out_scale", "  out_scale",
      "batch rows, split-K finish: every matrix reads matrix 0's a scales", "index"),
    M("matmul_stream_packed.cu", "  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);\n  const int ozp",
      "  const int ozp", "batch rows, split-K finish: every matrix reads matrix 0's output zero points", "index"),
    M("matmul_stream.cu", "  a_scale += ar;", "  a_scale += off[6];",
      "batch rows: a's scales at the block's first row only, not its matrix's", "index"),
    M("matmul_stream.cu", "  if (a_zp != nullptr) a_zp += ar;", "",
      "batch rows: every block reads a's zero points from row 0", "index"),
    # dynamic_quant.cu (session 34): rows at two strides; a dask chunk's split rows' ranges folded
    M("dynamic_quant.cu", "    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "    fold_span<T>(x + outer * outer_stride + r * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "rows at two strides: the inner index taken as the row (a block of rows read past its block)", "index"),
    M("dynamic_quant.cu", "    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "    fold_span<T>(x + outer * inner_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),",
      "rows at two strides: the outer index stepped by the inner stride", "index"),
    M("dynamic_quant.cu", "        pairs[2 * r + 1] = hi;", "        pairs[2 * r] = hi;",
      "row ranges folded (dask chunk): a row's maximum written over its minimum", "index"),
    M("dynamic_quant.cu", "        pairs[2 * r] = lo;", "        pairs[r] = lo;",
      "row ranges folded (dask chunk): minima written at the row's index, not its pair's", "index"),
    # matmul_wgmma.cu (session 35): Hopper's wgmma from shared-memory descriptors, the 4-stage ring
    M("matmul_wgmma.cu", "(static_cast<unsigned long long>(kLBO >> 4) << 16) | ((sbo >> 4) << 32);",
      "(static_cast<unsigned long long>(sbo >> 4) << 16) | (static_cast<unsigned long long>(kLBO >> 4) << 32);",
      "descriptors: leading and stride byte offsets swapped", "layout"),
    M("matmul_wgmma.cu", "kc * 128 + (row & 7) * 16; }", "kc * 128 + (row & 7) * 8; }",
      "staging: rows of a core matrix 8 bytes apart, not 16", "layout"),
    M("matmul_wgmma.cu", "    wg_wait<1>();                      // this warpgroup's group of tile kt - 2",
      "    wg_wait<2>();                      // this warpgroup's group of tile kt - 2",
      "ring: wait_group 2 (the stage of tile kt - 2 refilled while its wgmma may still read it)", "sync"),
    M("matmul_wgmma.cu", "    dmlq::cp_async_wait<STAGES - 3>();", "    dmlq::cp_async_wait<STAGES - 2>();",
      "ring: cp.async wait one group too weak (tile kt read before it lands)", "sync"),
    M("matmul_wgmma.cu", "    __syncthreads();                   // everyone's: tile kt staged",
      "    // everyone's: tile kt staged", "ring: the block barrier before a tile's wgmma dropped", "sync"),
    M("matmul_wgmma.cu", "    if (kt + STAGES - 2 < ktiles) load_next();", "    if (kt + STAGES - 1 < ktiles) load_next();",
      "ring: the last tile never loaded", "index"),
    M("matmul_wgmma.cu", "min(max(k_end - (load_k + 64 * h + kc * 16), 0), 16)",
      "min(max(k_end - (load_k + 64 * h + kc * 16), 0), 15)",
      "K tail: a whole chunk copied as 15 bytes (its last byte zero-filled)", "boundary"),
    M("matmul_wgmma.cu", "    if (load_k + BK <= k_end) {", "    if (load_k <= k_end) {",
      "K tail: the last tile of a ragged K copied whole (k past K read, not zero-filled)", "comparison"),
    M("matmul_wgmma.cu", "    a_in[i] = m0 + row < M;", "    a_in[i] = m0 + row <= M;",
      "staging: a's row M copied (one row past a)", "comparison"),
    M("matmul_wgmma.cu", "smem_desc<BK>(sA + wg * 64 * BK)", "smem_desc<BK>(sA + wg * 32 * BK)",
      "the second warpgroup's a rows 32 rows off", "index"),
    M("matmul_wgmma.cu", "db + ks * (2 * kLBO >> 4)", "db + ks * (kLBO >> 4)",
      "b's second k32 step one core matrix along K, not two", "index"),
    M("matmul_wgmma.cu", "    const int m = m0 + wg * 64 + 16 * w + g + 8 * h;", "    const int m = m0 + wg * 64 + 16 * w + 2 * g + h;",
      "output fragment: row of register pair h taken as interleaved rows", "layout"),
    M("matmul_wgmma.cu", "      const int v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];",
      "      const int v0 = d[4 * j + h], v1 = d[4 * j + h + 2];",
      "output fragment: a row's two columns taken from the two row halves", "layout"),
    M("matmul_wgmma.cu", "    st = st == STAGES - 1 ? 0 : st + 1;", "    st = st == STAGES - 2 ? 0 : st + 1;",
      "ring: the tensor cores read 3 stages round while 4 are loaded", "index"),
    M("matmul_wgmma.cu", "          if (n + e < N)\n", "          if (n + e <= N)\n",
      "epilogue in the kernel: column N written (one past the row)", "comparison"),
    M("matmul_wgmma.cu", "static_cast<unsigned>(e ? v1 : v0)", "static_cast<unsigned>(e ? v0 : v1)",
      "epilogue in the kernel: a register pair's two columns swapped", "index"),
    M("matmul_wgmma.cu", "            dmlq_mma::finish_one<TA, TB, TO>(static_cast<unsigned>(e ? v1 : v0), m, n + e, z,",
      "            dmlq_mma::finish_one<TA, TB, TO>(static_cast<unsigned>(e ? v1 : v0), m, n + e, 0,",
      "epilogue in the kernel: every matrix's zero-point sums and bias taken from matrix 0", "index"),
    # matmul_wgmma.cu (session 36): 128-byte k tiles (wgmma-128x128-k128), two 64-byte halves a row
    M("matmul_wgmma.cu", "  constexpr unsigned long long sbo = 8 * BK;", "  constexpr unsigned long long sbo = 512;",
      "128-byte tiles: row groups taken 512 bytes apart (the 64-byte tile's stride byte offset)", "layout"),
    M("matmul_wgmma.cu", "  constexpr int HALVES = BK / 64;", "  constexpr int HALVES = 1;",
      "128-byte tiles: the second 64-byte half of each row never copied", "index"),
    M("matmul_wgmma.cu", "dmlq::cp_async16_whole(a_dst[i] + a_off + 512 * h, a_src[i] + 64 * h);",
      "dmlq::cp_async16_whole(a_dst[i] + a_off + 256 * h, a_src[i] + 64 * h);",
      "128-byte tiles: a's second half staged two core matrices along K, not four", "layout"),
    M("matmul_wgmma.cu", "dmlq::cp_async16_whole(b_dst[i] + b_off + 512 * h, b_src[i] + 64 * h);",
      "dmlq::cp_async16_whole(b_dst[i] + b_off + 512 * h, b_src[i] + 32 * h);",
      "128-byte tiles: b's second half read 32 bytes on, not 64", "index"),
    M("matmul_wgmma.cu", "bytes ? a_src[i] + 64 * h : reinterpret_cast", "bytes ? a_src[i] : reinterpret_cast",
      "K tail, 128-byte tiles: a's second half copied from its first", "index"),
    # matmul_stream_packed.cu (session 36): an 8-bit b held K-major, read as it is
    M("matmul_stream_packed.cu", "        uint4* const dst = &raw[slot][lr][q ^ swz(lr)];",
      "        uint4* const dst = &raw[slot][lr][q];",
      "K-major b: a column's vectors stored unswizzled, read swizzled", "layout"),
    M("matmul_stream_packed.cu", "const int c = tid & 63, h = tid >> 6, sw = swz(c);",
      "const int c = tid & 63, h = tid >> 6, sw = c & 3;",
      "K-major b: the read's swizzle of another column's", "layout"),
    M("matmul_stream_packed.cu", "        const int q = lh + 2 * v, k = k0 + static_cast<int>(ELEMS16) * q;",
      "        const int q = lh + 2 * v, k = k0 + 8 * q;",
      "K-major b: vector q read 8 q bytes into the column, not 16 q", "index"),
    M("matmul_stream_packed.cu", "else if (km16 && k + ELEMS16 <= Ke) cp_async16_whole(",
      "else if (km16 && k < Ke) cp_async16_whole(",
      "K-major b: the chunk's last vector copied whole (bytes past its end summed)", "comparison"),
    M("matmul_stream_packed.cu", "const unsigned w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};",
      "const unsigned w[8] = {v1.x, v1.y, v1.z, v1.w, v0.x, v0.y, v0.z, v0.w};",
      "K-major b: a column's two vectors stored to each other's k-words", "index"),
    M("matmul_stream_packed.cu", "        const int64 e = be + static_cast<int64>(n) * ldb + k;",
      "        const int64 e = be + static_cast<int64>(n) * ldb + k0;",
      "K-major b: every vector of a column read from the stage's first", "index"),
    M("matmul_stream_packed.cu", "  const bool km16 = KM && aligned && (kb & (ELEMS16 - 1)) == 0;", "  const bool km16 = KM && aligned;",
      "K-major b: a chunk starting off 16 bytes in its columns copied by 16-byte cp.async", "boundary"),
    # the tensor-core kernel's K-major 8-bit b (matmul_mma.cu's KM code, built by matmul_mma_kmajor.cu)
    M("matmul_mma_layout.cuh", "return (r & ~15) | ((r & 7) << 1) | ((r >> 3) & 1); }", "return (r & ~15) | ((r & 7) << 1); }",
      "K-major b: the odd columns' rows filled with the even columns", "index", group="matmul_mma.cu"),
    M("matmul_mma.cu", "          bf[2 * p][1] = r[1];\n          bf[2 * p + 1][0] = r[2];",
      "          bf[2 * p][1] = r[2];\n          bf[2 * p + 1][0] = r[1];",
      "K-major b: k 16-31 of the even columns and k 0-15 of the odd ones swapped", "index"),
    M("matmul_mma.cu", "a_off(wn * WN + (q >> 1) * 8 + r8, 2 * p + (q & 1))", "a_off(wn * WN + (q >> 1) * 8 + r8, p + (q & 1))",
      "K-major b: the second k32 step's fragments read at k chunk 1, not 2", "index"),
    M("matmul_mma.cu", "ldsm_x4(r, b_st + (ks ? lb_off[1] : lb_off[0]) + p * 16 * BK);", "ldsm_x4(r, b_st + (ks ? lb_off[1] : lb_off[0]) + p * 8 * BK);",
      "K-major b: the 16-column groups of a warp 8 rows apart, not 16", "stride"),
    M("matmul_mma.cu", "(((b_cols >> i) & 1) ? km_left : 0u)", "(((b_cols >> i) & 1) ? 16u : 0u)",
      "K-major b: the K tail tile's columns copied whole (bytes past K summed)", "boundary"),
    M("matmul_mma.cu", "static_cast<int64>(km_n) * ldb_b : 0) + (k_begin >> P4) + km_kc * 16",
      "static_cast<int64>(km_n) * ldb_b : 0) + km_kc * 16",
      "K-major b: every split of K reads b from k = 0", "index"),
    M("matmul_mma.cu", "static_cast<int64>(KM ? KM_STEP : kr_step) * ldb_b;", "static_cast<int64>(KM ? KM_STEP / 2 : kr_step) * ldb_b;",
      "K-major b: a thread's chunks 16 columns apart in b, 32 in shared memory", "stride"),
    M("matmul_mma.cu", "for (int i = 0; i < B_CH; ++i) b_cols |= (km_n + i * KM_STEP < N) << i;",
      "for (int i = 0; i < B_CH; ++i) b_cols |= (km_n < N) << i;",
      "K-major b: a thread's later chunks staged whenever its first column is inside N (reads past N)", "comparison"),
    # matmul_stream_packed.cu (session 38): a packed 4-bit b held K-major (dmlq.pack(w).mT), read as it is
    M("matmul_stream_packed.cu", "__byte_perm(x, t, 0x5140)", "__byte_perm(x, t, 0x4150)",
      "K-major 4-bit b: the two nibbles of each byte swapped in the first k-word", "index"),
    M("matmul_stream_packed.cu", "__byte_perm(x, t, 0x7362)", "__byte_perm(x, t, 0x5140)",
      "K-major 4-bit b: the second k-word of each 32 bits a copy of the first", "index"),
    M("matmul_stream_packed.cu", "        if (valid < 8) {", "        if (valid < 0) {",
      "K-major 4-bit b: rows past the chunk not zeroed (b - b_zp summed there)", "boundary"),
    M("matmul_stream_packed.cu", "w1 &= valid <= 4 ? 0u : (1u << (8 * (valid - 4))) - 1u;",
      "w1 &= valid <= 4 ? 0u : ~0u;",
      "K-major 4-bit b: the second k-word's rows past the chunk kept", "boundary"),
    M("matmul_stream_packed.cu", "const int valid = Ke - (k0 + 32 * h + 8 * j);",
      "const int valid = Ke - (k0 + 32 * h + 4 * j);",
      "K-major 4-bit b: the rows left counted from the wrong k-word", "index"),
    M("matmul_stream_packed.cu", "const int n = min(n0 + (tid & 63), N - 1);",
      "const int n = min(n0 + (tid >> 1), N - 1);",
      "K-major 4-bit b: a column's zero point another column's", "index"),
    M("matmul_stream_packed.cu", "const unsigned x = INT4 ? src[j] ^ 0x88888888u : src[j], t = x >> 4;",
      "const unsigned x = src[j], t = x >> 4;",
      "K-major 4-bit b: int4 codes taken as uint4 (no sign)", "type"),
    M("matmul_stream_packed.cu", "const int kw = k0 + (KM ? 32 * (tid >> 6) : 4 * tq);",
      "const int kw = k0 + (KM ? 0 : 4 * tq);",
      "K-major 4-bit b: the second half stage's group found from the first's rows (stale zero points)", "index"),
    M("matmul_stream_packed.cu", "        Bt[8 * h + 2 * j + 1][c] = w1;", "        Bt[8 * h + 2 * j + 1][c] = w0;",
      "K-major 4-bit b: the odd k-words stored from the even ones", "index"),
    M("matmul_stream_packed.cu", "const unsigned x = static_cast<unsigned>(v >> (4 * o));",
      "const unsigned x = static_cast<unsigned>(v);",
      "packed b, nibble path (both layouts): a run starting mid-byte not shifted by its nibble", "index"),
    M("matmul_stream_packed.cu", "nb = (o + len + 1) >> 1;  // bytes holding the elements",
      "nb = (len + 1) >> 1;  // bytes holding the elements",
      "packed b, nibble path (both layouts): a run starting mid-byte misses its last byte", "boundary"),
    # session 39: the tensor-core kernel's packed 4-bit b held K-major (matmul_mma.cu's AL64 code, built by
    # matmul_mma_kmajor4.cu) and its column sums (matmul_dp4a.cu's packed row sums, counted with it)
    M("matmul_mma_layout.cuh", "return __byte_perm(h, h << 4, 0x1504)", "return __byte_perm(h, h << 4, 0x1405)",
      "K-major packed b: k 4t and 4t+2 of each fragment register swapped", "index", group="matmul_mma.cu"),
    M("matmul_mma_layout.cuh", "return __byte_perm(h, h << 4, 0x1504)", "return __byte_perm(h, h << 3, 0x1504)",
      "K-major packed b: the even k's codes moved up 3 bits, not 4", "arith", group="matmul_mma.cu"),
    M("matmul_mma.cu", "bkp_off(wn * WN + (lane >> 2), p) + 2 * (lane & 3)", "bkp_off(wn * WN + (lane >> 2), p) + (lane & 3)",
      "K-major packed b: the fragments' 16-bit loads a byte apart per t, not two", "index"),
    M("matmul_mma.cu", "(pb + ni * 8 * KM_ROW + 8));", "(pb + ni * 8 * KM_ROW + 4));",
      "K-major packed b: b1 read at k 8+4t, not 16+4t", "index"),
    M("matmul_mma.cu", "bf[ni][0] = unpack_bk4(*reinterpret_cast<const unsigned short*>(pb + ni * 8 * KM_ROW));",
      "bf[ni][0] = unpack_bk4(*reinterpret_cast<const unsigned short*>(pb + ni * 4 * KM_ROW));",
      "K-major packed b: b0 of the n8 tiles read 4 rows apart, not 8", "stride"),
    M("matmul_mma.cu", "bkp_off(wn * WN + (lane >> 2), p) + 2", "bkp_off(wn * WN + (lane >> 2), 0) + 2",
      "K-major packed b: the second k32 step's fragments read from the first chunk", "index"),
    M("matmul_mma_layout.cuh", "{ return row * 32 + ((chunk ^ ((row >> 2) & 1)) << 4); }",
      "{ return row * 16 + ((chunk ^ ((row >> 2) & 1)) << 4); }",
      "K-major packed b: tile rows 16 bytes apart (a row's second chunk over the next row's first)", "stride", group="matmul_mma.cu"),
    M("matmul_mma.cu", "constexpr int KM_STEP = P4 ? NT / 2 : NT / 4,", "constexpr int KM_STEP = P4 ? NT / 4 : NT / 4,",
      "K-major packed b: a thread's second column 32 rows on, not 64 (a quarter of the tile never staged)", "stride"),
    M("matmul_mma.cu", "(k_begin >> P4) + km_kc * 16", "k_begin + km_kc * 16",
      "K-major packed b: a split of K starts at byte k_begin, not k_begin / 2", "index"),
    M("matmul_mma.cu", "km_kc = P4 ? tid & 1 : a_kc;", "km_kc = P4 ? 0 : a_kc;",
      "K-major packed b: both threads of a column copy its first 32 k", "index"),
    M("matmul_mma.cu", "P4 ? static_cast<unsigned>((min(max(k_end - (k0 + km_kc * 32), 0), 32) + 1) >> 1) : a_left;",
      "P4 ? 16u : a_left;",
      "K-major packed b: the K tail tile's chunks copied whole (bytes past K, past the buffer for the last column)",
      "boundary"),
    M("matmul_dp4a.cu", "          if (kSigned) s -= 64u;", "          if (kSigned) s -= 56u;",
      "packed K-major row sums: the int4 bias taken out for 7 of a word's 8 codes", "arith", group="matmul_mma.cu"),
    M("matmul_dp4a.cu", "          s = dmlq::dp4a::dot4<uint8, uint8>((x >> 4) & 0x0F0F0F0Fu, dmlq::dp4a::kOnes, s);\n",
      "", "packed K-major row sums: the high nibbles not summed", "index", group="matmul_mma.cu"),
    M("matmul_dp4a.cu", "        k = nw << 3;\n", "        k = nw << 2;\n",
      "packed K-major row sums: the tail loop restarts inside the words (codes summed twice)", "index",
      group="matmul_mma.cu"),
    # the dp4a tiles' packed 4-bit b held K-major (matmul_dp4a.cu's KM4 staging, built by matmul_dp4a_kmajor4.cu)
    M("dp4a_words.cuh", "const unsigned lo = __byte_perm(e, e >> 4, 0x5140) & 0x0F0F0F0Fu;",
      "const unsigned lo = __byte_perm(e, e >> 4, 0x4150) & 0x0F0F0F0Fu;",
      "K-major packed b: the even column's first two k swapped in its staged word", "index", group="matmul_dp4a.cu"),
    M("dp4a_words.cuh", "return lo | (__byte_perm(o << 4, o, 0x5140) & 0xF0F0F0F0u);",
      "return lo | (__byte_perm(o << 3, o, 0x5140) & 0xF0F0F0F0u);",
      "K-major packed b: the odd column's even k moved up 3 bits, not 4", "arith", group="matmul_dp4a.cu"),
    M("matmul_dp4a.cu", "& (valid >= 4 ? 0xFFFFu : (1u << (4 * valid)) - 1u);", ";",
      "K-major packed b, edge path: codes past K kept (the next column's, in dp4a-wide's column sums)",
      "boundary"),
    # (a thread's later blocks, s > 0, do not occur: B_PER is 1 in every dp4a config)
    M("matmul_dp4a.cu", "const unsigned char* q = KM4 ? b_p + 2 * s * B_KQ_STEP + r * ldb_bytes",
      "const unsigned char* q = KM4 ? b_p + 2 * s * B_KQ_STEP + (r ^ 1) * ldb_bytes",
      "K-major packed b, word path: a block's columns read in swapped pairs", "stride"),
    M("matmul_dp4a.cu", "const int64 b_tile_step = KM4 ? BK / 2 :", "const int64 b_tile_step = KM4 ? BK :",
      "K-major packed b: each tile advances a whole tile's elements in bytes (skips every other tile)", "stride"),
    M("matmul_dp4a.cu", "static_cast<int64>(b_redirect ? 0 : n0 + b_n) * ldb + 4 * b_kq",
      "static_cast<int64>(b_redirect ? 0 : n0 + b_n) * ldb + 2 * b_kq",
      "K-major packed b: a thread's k-word read 2 elements per word on, not 4", "index"),
    M("matmul_dp4a.cu", "          if (n0 + b_n + c + 1 < N) e += ldb;\n", "",
      "K-major packed b, edge path: the 4 columns of a block all read the first", "index"),
    # packed_table.cu (session 40): a packed zero-point table unpacked in one launch
    M("packed_table.cu", "    out[i] = kSigned ?", "    out[i] = false ?",
      "int4 table: codes not sign-extended (taken as uint4)", "type"),
    M("packed_table.cu", "const int slot = static_cast<int>(e & ((1 << per_log2) - 1));",
      "const int slot = static_cast<int>((e + 1) & ((1 << per_log2) - 1));",
      "a byte's two nibbles swapped", "index"),
    M("packed_table.cu", "    const int64 e = b * sb + r * sr + c * sc;", "    const int64 e = r * sr + c * sc;",
      "every matrix of a batch read from the first", "index"),
    M("packed_table.cu", "const int r = static_cast<int>(in / C), c", "const int r = static_cast<int>(in / R), c",
      "rows found from R, not C (a non-square table read out of place)", "index"),
    M("packed_table.cu", "i += static_cast<int64>(gridDim.x) * blockDim.x) {",
      "i += 2 * static_cast<int64>(gridDim.x) * blockDim.x) {", "grid-stride step doubled (every other pass skipped)",
      "index"),
    # matmul_dp4a.cu's KM8 staging (session 40: an 8-bit b held K-major on the dp4a tiles, matmul_dp4a_kmajor.cu)
    M("matmul_dp4a.cu", ": KM8 ? b_p + 4 * s * B_KQ_STEP + r * ldb_bytes", ": KM8 ? b_p + 4 * s * B_KQ_STEP + (r ^ 1) * ldb_bytes",
      "K-major 8-bit b, word path: a block's columns read in swapped pairs", "stride"),
    M("matmul_dp4a.cu", "        *reinterpret_cast<uint4*>(&Bs[buf][kq][b_n]) = make_uint4(rb[s][0], rb[s][1], rb[s][2], rb[s][3]);",
      "        uint4 t;\n        transpose4(rb[s], t);\n        *reinterpret_cast<uint4*>(&Bs[buf][kq][b_n]) = t;",
      "K-major 8-bit b: its column words transposed as the row-major b's rows are", "byte_perm"),
    M("matmul_dp4a.cu", "        const unsigned char* q = Bb + static_cast<int64>(min(n0 + b_n, N - 1)) * ldb + ks;",
      "        const unsigned char* q = Bb + static_cast<int64>(min(n0 + b_n, N - 1)) * ldb + k;",
      "K-major 8-bit b, edge path: the window starts at k, not inside K (bytes past K read, the shift doubled)",
      "boundary"),
    M("matmul_dp4a.cu", "          if (n0 + b_n + c + 1 < N) q += ldb;", "",
      "K-major 8-bit b, edge path: the 4 columns of a block all read the first", "index"),
    M("matmul_dp4a.cu", "KM8 ? BK : static_cast<int64>(BK) * ldb_bytes;", "KM8 ? BK / 2 : static_cast<int64>(BK) * ldb_bytes;",
      "K-major 8-bit b: each tile advances half a tile down the columns", "stride"),
    M("matmul_dp4a.cu", "const int64 b_word_e = KM4 || KM8 ?", "const int64 b_word_e = KM4 ?",
      "K-major 8-bit b, word path: its block addressed as a row-major b's (k rows ldb apart)", "index"),
    # session 41: blocked scales on the tensor cores (matmul_mma.cu's GRP code, built by matmul_mma_grouped.cu;
    # matmul_dp4a.cu's row sums split by groups), counted under matmul_mma_grouped.cu
    G("matmul_mma.cu", "if constexpr (GRP) vf[mi][ni][e] = -0.0f;", "if constexpr (GRP) vf[mi][ni][e] = 0.0f;",
      "grouped: the float sums start at +0.0 (a first term of -0.0 becomes +0.0)", "constant"),
    G("matmul_mma.cu", "      const int len = min(G, K - grp * G);", "      const int len = G;",
      "grouped: a ragged last group's length taken as G (its K * za * zb term)", "boundary"),
    G("matmul_mma.cu", "const int64 rows_at = (static_cast<int64>(grp) * gridDim.z + z) * M;",
      "const int64 rows_at = (static_cast<int64>(grp) + z) * M;",
      "grouped: a's row sums of group g read as if one matrix a group", "index"),
    G("matmul_mma.cu", " : 0u) -\n                      static_cast<unsigned>(len) * zb[ni][o];", " : 0u);",
      "grouped: the group's len * za * zb term dropped", "arith"),
    G("matmul_mma.cu", "const int c = PC ? (ni >> 2) * 32 + 8 * tl + 4 * o + (ni & 3)",
      "const int c = PC ? (ni >> 2) * 32 + 8 * tl + 2 * o + (ni & 3)",
      "grouped, packed b: a lane's second column of each pair 2 (not 4) past its first", "index"),
    G("matmul_mma.cu", ": (ni >> 1) * 16 + 4 * tl + 2 * o + (ni & 1);", ": (ni >> 1) * 16 + 4 * tl + o + 2 * (ni & 1);",
      "grouped: the even/odd n8 tiles' columns swapped with the element's", "index"),
    G("matmul_mma.cu", "const unsigned v = static_cast<unsigned>(P4 ? s >> 4 : s)",
      "const unsigned v = static_cast<unsigned>(s)",
      "grouped, packed b: the 16x sums not shifted back", "arith"),
    G("matmul_mma.cu", "if (grp < n_groups && group_end() <= kt * BK + (ks + 1) * 32) close_group();",
      "if (grp < n_groups && group_end() < kt * BK + (ks + 1) * 32) close_group();",
      "grouped: a group ending on a k step closed one step late (two groups summed as one)", "comparison"),
    G("matmul_mma.cu", "for (const int t_stop = (group_end() - 1) / BK; kt < t_stop; ++kt) {",
      "for (const int t_stop = group_end() / BK; kt < t_stop; ++kt) {",
      "grouped: a group ending on a tile's end runs that tile in the inner loop (its close one tile late)",
      "boundary"),
    G("matmul_mma.cu", "if (grp < n_groups && group_end()", "if (group_end()",
      "grouped: a close after the last group (an empty group's terms added)", "boundary"),
    G("matmul_mma.cu", "if (brow != nullptr) f = dmlq::ieee_add(f, brow[min(n + j, N - 1)]);",
      "if (brow != nullptr) f = dmlq::ieee_add(f, brow[min(n, N - 1)]);",
      "grouped: a quad's 4 outputs take its first column's bias", "index"),
    G("matmul_mma.cu", "          const float as = a_scale[a_per_row ? m : 0];", "          const float as = a_scale[0];",
      "grouped: a's per-row scale read per tensor", "index"),
    G("matmul_mma.cu", "const int64 gi = b_per_col ? static_cast<int64>(grp) * N + n : 0;",
      "const int64 gi = b_per_col ? n : 0;", "grouped: every group takes the first group's b zero point (its scale: row 440)",
      "index"),
    G("matmul_dp4a.cu", "  const int k0 = static_cast<int>(blockIdx.y) * k_chunk;  // this split's first k",
      "  const int k0 = 0;", "row sums: every split sums from k = 0", "index"),
    G("matmul_dp4a.cu", "  K = min(K - k0, k_chunk);", "  K = K - k0;",
      "row sums: a split sums to the end of K, not of its chunk", "boundary"),
    G("matmul_dp4a.cu", "  out += static_cast<int64>(blockIdx.y) * split_stride;\n", "",
      "row sums: every split writes the first split's table", "index"),
    # ------------------------------------------------------------ session 42: 16-byte staging, one path
    M("matmul_mma.cu", "reinterpret_cast<const unsigned char*>(a_src[i] + k0), a_left);",
      "reinterpret_cast<const unsigned char*>(a_src[i] + k0), 16u);",
      "16-byte staging: A's K tail chunks copied whole (bytes past K read)", "boundary"),
    M("matmul_mma.cu", "cp_async16(b_dst + i * B_CHUNK, b_src + i * b_chunk_step, b_bytes(i));",
      "cp_async16(b_dst + i * B_CHUNK, b_src + i * b_chunk_step, 16u);",
      "16-byte staging: every b chunk copied whole (rows past K, columns past N read)", "boundary"),
    # ------------------------------------------------------------ session 43: MatMulNBits' scales read in place
    # (group_scale serves the grouped finish, dp4a-wide and mma-grouped; run with test_gpu_intmm_grouped.py's
    # cases of all three)
    Mutation("matmul_epilogue.cuh", "  return b_per_col < 2 ? (b_per_col ? n : 0) : static_cast<int64>(n) * groups;",
             "  return b_per_col < 2 ? (b_per_col ? n : 0) : static_cast<int64>(n);",
             "scales_at: MatMulNBits' (N, groups) scales, column n's taken n elements on", "index",
             "matmul_stream_packed.cu"),
    Mutation("matmul_epilogue.cuh", "{ return b_per_col == 1 ? N : b_per_col > 1; }", "{ return b_per_col >= 1 ? N : 0; }",
             "scales_step: MatMulNBits' scales stepped N apart, as the table's rows", "index",
             "matmul_stream_packed.cu"),
    Mutation("matmul_epilogue.cuh", "  return b_per_col == 3 ? to_f32(reinterpret_cast<const float16*>(s)[i]) : s[i];",
             "  return s[i];", "scale_at (dp4a-wide, mma-grouped): MatMulNBits' float16 scales read as float32", "type",
             "matmul_stream_packed.cu"),
    Mutation("matmul_epilogue.cuh", "  if (b_per_col == 3) return {nullptr, reinterpret_cast<const float16*>(s) + at, 1};",
             "  if (b_per_col == 4) return {nullptr, reinterpret_cast<const float16*>(s) + at, 1};",
             "column_scales (grouped finish): MatMulNBits' float16 scales read as float32", "type",
             "matmul_stream_packed.cu"),
    Mutation("matmul_dp4a.cu",
             "      const int groups = k_group > 0 ? (K + k_group - 1) / k_group : 1;  // (b_per_col 2 / 3: the scales' rows)",
             "      const int groups = k_group > 0 ? K / k_group : 1;  // (b_per_col 2 / 3: the scales' rows)",
             "dp4a-wide: MatMulNBits' scale rows counted without a ragged last group", "boundary",
             "matmul_stream_packed.cu"),
    G("matmul_mma.cu", "dmlq::mm::group_scale(b_scale, b_per_col, grp, n, N, n_groups);",
      "dmlq::mm::group_scale(b_scale, b_per_col, 0, n, N, n_groups);",
      "grouped: every group takes the first group's b scale", "index"),
    # bfloat16 x and y on the kernels (session 44)
    M("common.cuh", "  return v != v ? (u | 0x00400000u) : u + 0x7FFFu + ((u >> 16) & 1u);",
      "  return v != v ? (u | 0x00400000u) : u;",
      "bf16_top: truncated instead of rounded to nearest even", "rounding", "quant_types.cu"),
    M("common.cuh", "  return v != v ? (u | 0x00400000u) : u + 0x7FFFu + ((u >> 16) & 1u);",
      "  return u + 0x7FFFu + ((u >> 16) & 1u);",
      "bf16_top: no NaN rule (the GPU's NaN 0x7FFFFFFF rounds to -0)", "NaN", "quant_types.cu"),
    M("quant_types.cu", "  return bfloat16{static_cast<unsigned short>(w[k / 2] >> (16 * (k % 2)))};",
      "  return bfloat16{static_cast<unsigned short>(w[k / 2] >> (16 * (1 - k % 2)))};",
      "elem_of<bfloat16>: a word's two elements swapped", "index"),
    M("common.cuh", "return __byte_perm(top0, top1, 0x7632); }", "return __byte_perm(top1, top0, 0x7632); }",
      "bf16_pair: a word's two outputs swapped", "index", "quant_types.cu"),
    M("qt_codes.cuh", "sign_of(bfloat16 v) { return static_cast<unsigned>(v.bits) >> 15; }",
      "sign_of(bfloat16 v) { return 0u; }", "sign_of(bfloat16): every x taken as positive (shared float codes)",
      "sign", "quant_types.cu"),
    M("dynamic_quant.cu", "    fold(__uint_as_float(w[k] & 0xFFFF0000u), lo, hi);", "    fold(__uint_as_float(w[k] << 16), lo, hi);",
      "range, bfloat16: each word's high half never read", "index"),
    # bfloat16 outputs a pair at a time (session 45)
    M("common.cuh", "  return v != v ? (u | 0x00400000u) : u + 0x7FFFu + ((u >> 16) & 1u);",
      "  return v != v ? (u | 0x00400000u) : u + 0x7FFFu;",
      "bf16_top: ties always down (to even dropped)", "rounding", "quant_types.cu"),
    M("common.cuh", "return __byte_perm(top0, top1, 0x7632); }", "return __byte_perm(top0, top1, 0x5410); }",
      "bf16_pair: the words' low halves (unrounded bits) packed", "index", "quant_types.cu"),
    M("quant_types.cu", "      chunk[k / 2] = bf16_pair(first, bf16_top(value(k + 1)));",
      "      chunk[k / 2] = bf16_pair(first, first);\n      (void)value(k + 1);",
      "ChunkOut<bfloat16>: a pair's second output the first's", "index"),
    # packed_table.cu (session 46): 2-bit zero-point tables, and a 2-bit b widened to packed 4-bit bytes
    M("packed_table.cu", "const int per_log2 = bits == 2 ? 2 : 1;", "const int per_log2 = 1;",
      "2-bit table: a byte read as two codes, not four", "index"),
    M("packed_table.cu", "    t |= (s << 1) | (s << 2);", "    t |= (s << 1);",
      "int2 -> int4: the sign bit copied to bit 2 only (a negative code's nibble 6 or 7)", "type"),
    M("packed_table.cu", "t = (t | (t << 2)) & 0x33333333u;", "t = (t | (t << 2)) & 0x33333333u & 0xFFFFFF0Fu;",
      "every half-word's second code dropped (nibble 1 zeroed)", "index"),
    M("packed_table.cu", "if (left < 4) y &= ", "if (left < 0) y &= ",
      "the nibbles past the element count keep the 2-bit byte's unused bits", "boundary"),
    M("packed_table.cu", "if (2 * j + 1 < out_bytes) {", "if (2 * j < out_bytes) {",
      "the last input byte of an odd count stored as 16 bits (a byte past the output)", "boundary"),
    M("packed_table.cu", "j < in_bytes; j += step) {", "j < in_bytes; j += 2 * step) {",
      "widen's byte loop: grid-stride step doubled", "index"),
    # widen_codes2's 16-byte chunks (session 46)
    M("packed_table.cu", "? count >> 6 : 0;", "? (count + 63) >> 6 : 0;",
      "a partial last chunk taken whole (bytes past the input read, nibbles past the count written)", "boundary"),
    M("packed_table.cu", "(reinterpret_cast<unsigned long long>(data) & 15ull) == 0 ?", "true ?",
      "16-byte loads of bytes off 16", "alignment"),
    M("packed_table.cu", "reinterpret_cast<uint4*>(out)[2 * c + 1] =", "reinterpret_cast<uint4*>(out)[2 * c] =",
      "a chunk's second 16 output bytes written over its first", "index"),
    M("packed_table.cu", "c < chunks; c += step) {", "c < chunks; c += 2 * step) {",
      "widen's chunk loop: grid-stride step doubled", "index"),
    M("packed_table.cu", "for (int64 j = 16 * chunks + first;", "for (int64 j = 16 * (chunks + 1) + first;",
      "the 16 bytes after the last chunk skipped", "boundary"),
    M("packed_table.cu", "widen16(x.y & 0xFFFFu, is_signed), widen16(x.y >> 16, is_signed));",
      "widen16(x.z & 0xFFFFu, is_signed), widen16(x.z >> 16, is_signed));",
      "a chunk's second input word read as its third", "index"),
    M("packed_table.cu", "unsigned t = (h | (h << 8)) & 0x00FF00FFu;", "unsigned t = h & 0x00FF00FFu;",
      "a half-word's second byte dropped (codes 4-7 of each 16 bits: the chunk path only)", "index"),
]

FILES = ("elementwise.cu", "matmul_dp4a.cu", "matmul_mma.cu", "avgpool.cu", "matmul_stream.cu", "quant_types.cu",
         "matmul_dp4a_packed.cu", "matmul_stream_packed.cu", "dynamic_quant.cu", "matmul_wgmma.cu", "packed_table.cu",
         "matmul_mma_grouped.cu")

# The CI tests that drive each source on the host harness (fast subset).
TESTS = {
    "elementwise.cu": (["tests/test_host_elementwise.py", "tests/test_host_mutants.py"],
                       "test_host_elementwise or mutant_elementwise"),
    # the intmm tiled tests first: with -x a killed epilogue mutant stops there (same tests, same verdicts)
    # (the K-major packed b's tests first: its mutants, which only they kill, stop there)
    "matmul_dp4a.cu": (["tests/test_gpu_dp4a_kmajor8.py", "tests/test_gpu_dp4a_kmajor4.py", "tests/test_gpu_batch_rows.py",
                        "tests/test_gpu_intmm_tiled.py",
                        "tests/test_select_matmul.py", "tests/test_host_mutants.py", "tests/test_host_matmul_staging.py"],
                       "emulated or mutant_dp4a or intmm_tiled or batch_rows or dp4a_kmajor4 or dp4a_kmajor8"),
    # (the K-major b's tests first, packed then 8-bit: its mutants, which only they kill, stop there)
    "matmul_mma.cu": (["tests/test_gpu_mma_kmajor4.py", "tests/test_gpu_mma_kmajor.py", "tests/test_gpu_batch_rows.py",
                      "tests/test_gpu_intmm_tiled.py",
                       "tests/test_gpu_intmm_mma_packed.py", "tests/test_select_matmul.py",
                       "tests/test_host_mutants.py", "tests/test_host_matmul_staging.py"],
                      "emulated or mutant_mma or intmm_tiled or mma_packed or mma_kmajor or batch_rows"),
    "avgpool.cu": (["tests/test_select_avgpool.py", "tests/test_select_avgpool_cl.py", "tests/test_host_mutants.py"],
                   "emulated or mutant_avgpool"),
    "matmul_stream.cu": (["tests/test_gpu_batch_rows.py", "tests/test_gpu_intmm.py"], "not selection"),
    # (the K-major packed b's tests first: its mutants, which only they kill, stop there)
    "matmul_stream_packed.cu": (["tests/test_gpu_stream4_kmajor.py", "tests/test_gpu_batch_rows.py",
                                "tests/test_gpu_qmm_stream.py", "tests/test_gpu_intmm_grouped.py",
                                "tests/test_gpu_stream8.py", "tests/test_gpu_stream8_kmajor.py"], "test_"),
    "quant_types.cu": (["tests/test_host_qtypes.py", "tests/test_host_mutants.py", "tests/test_gpu_quant_types.py"],
                       "(test_host_qtypes and not stand) or mutant_qtypes or bfloat16_x_and_y"),
    "matmul_dp4a_packed.cu": (["tests/test_gpu_batch_rows.py", "tests/test_gpu_intmm_packed.py"],
                              "not groups_not_a_multiple"),
    "dynamic_quant.cu": (["tests/test_dynamic_quant.py", "tests/test_dynamic_quant_rows.py"], "gpu_path or gpu_rows or gpu_dask"),
    "matmul_wgmma.cu": (["tests/test_host_matmul_wgmma.py"], "emulated"),
    "packed_table.cu": (["tests/test_gpu_packed_table.py", "tests/test_intmm_two_bit.py"], "test_"),
    "matmul_mma_grouped.cu": (["tests/test_gpu_mma_grouped.py"], "test_"),
}

# Loaded into the mutant's pytest with -p: key each runner on the headers and
# its own .cu (harness.build already hashes the .cu it builds), one g++ at a time.
PLUGIN = '''
import os
import sys
from pathlib import Path


def pytest_configure(config):
    tests = str(Path(__file__).resolve().parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from cuda_host import harness
    from dmlq.gpu import loader

    harness._sources_key = lambda: harness._digest(
        *(p.read_bytes() for p in sorted(loader.cuda_dir().glob("*.cuh"))))
    # A .cu that includes another .cu (matmul_mma_packed.cu, matmul_dp4a_packed.cu) is
    # keyed on that one's bytes too (a flag no code reads), so its mutants rebuild it.
    import re
    build = harness.build

    def keyed_build(source, extra_flags=(), path=None, names=None):
        own = Path(path) if path is not None else loader.cuda_dir() / source
        inc = re.findall(r'^#include "([\\w.]+[.]cu)"', own.read_text(), re.M)
        if inc:
            digest = harness._digest(*((loader.cuda_dir() / f).read_bytes() for f in inc))
            extra_flags = tuple(extra_flags) + ("-DDMLQ_MUTATE_INCLUDED=0x" + digest[:12],)
        return build(source, extra_flags, path, names)
    harness.build = keyed_build
    os.environ["DMLQ_BUILD_JOBS"] = "1"  # tests/prebuild.py's pool
'''


def numbered():
    return list(enumerate(MUTATIONS, 1))


def check_snippets(src_dir: Path, numbers=None, warn=False):
    """Each mutation's snippet occurs exactly once (``numbers``: only those);
    ``warn``: print the ones that do not (stale rows, --list / --table) instead of stopping."""
    for i, m in numbered():
        if numbers is not None and i not in numbers:
            continue
        text = (src_dir / m.file).read_text()
        n = text.count(m.original)
        problem = (f"mutation {i} ({m.file}: {m.description}): the snippet occurs {n} times" if n != 1 else
                   f"mutation {i}: replacement equals the original" if m.original == m.replacement else None)
        if problem and warn:
            print(f"warning: {problem} (stale: it cannot run on these sources)", file=sys.stderr)
        elif problem:
            raise SystemExit(problem)


SNAPSHOT = ("cuda", "dmlq", "tests", "tools", "pyproject.toml")  # tools: the stand-in reads static_report.py


def setup_scratch(scratch: Path, worktree: bool, rev: str = "HEAD") -> dict:
    copy = scratch / "repo"
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True)
    if worktree:  # the files as they are on disk, uncommitted edits included
        for name in SNAPSHOT:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / name, copy / name)
    else:  # the committed tree: a consistent state while others edit the checkout
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *SNAPSHOT],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(copy)], input=tar, check=True)
        extra = ROOT / "tests" / "test_host_mutants.py"  # the mutant tests, committed or not
        if extra.exists():
            shutil.copy2(extra, copy / "tests" / extra.name)
    (copy / "_mutate_plugin.py").write_text(PLUGIN)
    cache = scratch / "host-cache"
    cache.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(copy), "DMLQ_HOST_CACHE": str(cache),
           "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import dmlq; print(dmlq.__file__)"],
                           env=env, cwd=copy, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"dmlq resolves to {where}, not to the scratch copy {copy}")
    return {"copy": copy, "cache": cache, "env": env}


def run_tests(ctx, cu: str, timeout: float):
    files, kexpr = TESTS[cu]
    files = [f for f in files if (ctx["copy"] / f).exists()]
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "_mutate_plugin",
           "-k", kexpr, *files]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ctx["copy"], env=ctx["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # this run's own process group
        out, _ = proc.communicate()
        timed_out = True
    return proc.returncode, out, time.monotonic() - t0, timed_out


def first_failure(out: str) -> str:
    """The first failing test's node id, its parameters whole (an id may hold spaces: "[K ragged, a padded]")."""
    m = re.search(r"^(?:FAILED|ERROR) ([^\s\[]+(?:\[[^\]]*\])?)", out, re.M)
    return m.group(1) if m else ""


def classify(rc, out, timed_out) -> str:
    if timed_out:
        return "timeout"
    if "g++ failed" in out:
        return "no-compile"
    if rc == 0:
        return "survived"
    if rc == 1:
        return "killed"
    return "error"  # pytest itself broke (usage error, collection crash)


def prune_cache(cache: Path, keep: set):
    for p in cache.iterdir():
        if p.name not in keep:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def write_table(results: dict, notes: dict, total_s: float | None, source: str = ""):
    lines = ["# Mutation testing of the CUDA kernels", "",
             "Generated by `tools/mutate.py` (issue 11: at least 9 in 10 mutations of every .cu file "
             "must make a CI test fail).", "",
             "Each mutation replaces one exact snippet (asserted to occur once) in a scratch copy of the "
             "repository, then runs that file's host-harness CI tests "
             "(`pytest -x -q -p no:cacheprovider`, see `TESTS` in the tool) against the copy. "
             "killed: a test failed; survived: all passed; no-compile: g++ rejected the mutant (not "
             "counted); timeout: counted as killed.", "",
             f"Kernel sources: {source}." if source else "",
             "",
             "Rerun: `python tools/mutate.py` (all), `python tools/mutate.py --file avgpool` (one file), "
             "`python tools/mutate.py --only 12 --only 40` (by number).", ""]
    lines += ["## Kill rate", "", "| file | killed | timeout | survived | no-compile | kill rate |",
              "|---|---|---|---|---|---|"]
    for cu in FILES:
        rs = [results[str(i)] for i, m in numbered() if m.source == cu and str(i) in results]
        k = sum(r["result"] == "killed" for r in rs)
        t = sum(r["result"] == "timeout" for r in rs)
        s = sum(r["result"] == "survived" for r in rs)
        nc = sum(r["result"] == "no-compile" for r in rs)
        rate = f"{(k + t) / (k + t + s):.0%}" if k + t + s else "-"
        lines.append(f"| {cu} | {k} | {t} | {s} | {nc} | {rate} |")
    lines += ["", "## Mutations", "",
              "| # | file | kind | mutation | result | seconds | first failing test |",
              "|---|---|---|---|---|---|---|"]
    for i, m in numbered():
        r = results.get(str(i))
        res, secs, first = (r["result"], f"{r['seconds']:.0f}", r["first"]) if r else ("not run", "", "")
        note = notes.get(str(i))
        if note:
            res = f"{res} ({note})"
        first = first.replace("|", "\\|")
        lines.append(f"| {i} | {m.file} | {m.kind} | {m.description.replace('|', '/')} | {res} | {secs} | "
                     f"`{first}` |" if first else
                     f"| {i} | {m.file} | {m.kind} | {m.description.replace('|', '/')} | {res} | {secs} | |")
    if notes.get("_footer"):
        lines += ["", notes["_footer"]]
    if total_s is not None:
        lines += ["", f"Last run: {total_s / 60:.1f} min wall time on the host harness "
                      "(one pytest at a time, one g++ at a time)."]
    RESULTS_MD.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_MD.write_text("\n".join(lines) + "\n")


# Notes shown next to a result in the table (why a mutant survived, what was done).
_LOCKSTEP = ("survived while the harness ran threads only in lock step (thread-major); killed since "
             "it also runs warp-major schedules, one warp ahead of the others")
NOTES: dict = {
    "3": "survived before tests/test_host_mutants.py (axis cases were all < one 2048-element tile)",
    "5": "survived before tests/test_host_mutants.py (same gap)",
    "31": _LOCKSTEP,
    "46": _LOCKSTEP + ", by a test whose blocks pool several planes under all four schedules",
    "61": "survived before tests/test_host_mutants.py (no in-place mma case with K % 64 in 16..48)",
    "75": "survived before tests/test_host_mutants.py (no case with more planes than the grid's z extent)",
    "_footer": ("Survivors marked above were killed by tests/test_host_mutants.py or by the harness's "
                "warp-major schedules (31, 46). The first run, at 80ec01d, before those: elementwise.cu "
                "16/18 (89%), matmul_mma.cu 19/21 (90%), avgpool.cu 18/20 (90%), matmul_dp4a.cu 16/16. "
                "Wall time at 4a1ae93: 33.5 min for all 75 mutants (baselines included) on 2 shared "
                "cores; one pytest and one g++ at a time. At the commit named above (issue 13: the "
                "matmul staging paths, mutations 76-88 added, 18 and 57 moved to the new load code) only "
                "matmul_dp4a.cu and matmul_mma.cu were rerun; the elementwise.cu and avgpool.cu rows are "
                "the 4a1ae93 results, carried over (those sources are unchanged since).")
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", action="append", help="only mutations of this .cu (name or stem)")
    ap.add_argument("--only", action="append", type=int, help="only mutation number N (repeatable)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant (default 300)")
    ap.add_argument("--scratch", default=os.environ.get("DMLQ_MUTATE_DIR", "/tmp/dmlq-mutate"))
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    ap.add_argument("--rev", default="HEAD", help="the commit whose sources are mutated (default HEAD)")
    ap.add_argument("--worktree", action="store_true",
                    help="copy the checkout as it is on disk instead of the committed HEAD")
    ap.add_argument("--no-table", action="store_true", help="do not rewrite bench/results/mutations.md")
    ap.add_argument("--table", action="store_true", help="only rewrite the table from the saved results")
    args = ap.parse_args(argv)

    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = setup_scratch(scratch, args.worktree, args.rev)
    copy = ctx["copy"]
    if args.table or args.list:
        check_snippets(copy / "cuda", warn=True)
    if args.table:
        results = json.loads((scratch / "results.json").read_text())
        write_table(results, NOTES, None, results.get("_source", ""))
        return 0
    if args.list:
        for i, m in numbered():
            print(f"{i:3d} {m.file:15s} {m.kind:14s} {m.description}")
        return 0

    files = set(FILES)
    if args.file:
        files = {f if f.endswith(".cu") else f + ".cu" for f in args.file}
        bad = files - set(FILES)
        if bad:
            raise SystemExit(f"unknown file(s): {sorted(bad)}")
    todo = [(i, m) for i, m in numbered() if m.source in files and (not args.only or i in args.only)]
    check_snippets(copy / "cuda", {i for i, _ in todo})  # the mutations to run (--list, --table: all, above)

    results_path = scratch / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    source = "the working tree" if args.worktree else "commit " + subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], capture_output=True, text=True).stdout.strip()
    if results.get("_source") != source:  # results of another tree are not merged
        results = {"_source": source}
    t_start = time.monotonic()

    baseline_keep = None
    for cu in FILES:
        if not any(m.source == cu for _, m in todo):
            continue
        rc, out, secs, to = run_tests(ctx, cu, args.timeout * 3)
        print(f"baseline {cu}: rc={rc} {secs:.0f}s", flush=True)
        if rc != 0:
            print(out[-6000:])
            raise SystemExit(f"the unmutated tests for {cu} fail in the scratch copy; fix that first")
    baseline_keep = {p.name for p in ctx["cache"].iterdir()}

    for i, m in todo:
        path = copy / "cuda" / m.file
        original = path.read_text()
        assert original.count(m.original) == 1
        path.write_text(original.replace(m.original, m.replacement))
        try:
            rc, out, secs, to = run_tests(ctx, m.source, args.timeout)
        finally:
            path.write_text(original)
        res = classify(rc, out, to)
        first = first_failure(out) if res in ("killed", "timeout", "error") else ""
        results[str(i)] = {"file": m.file, "description": m.description, "result": res,
                           "seconds": round(secs, 1), "first": first}
        if res == "error":
            (scratch / f"mutant-{i}.log").write_text(out)
        print(f"[{i:3d}] {m.file:15s} {res:10s} {secs:5.0f}s  {m.description}  {first}", flush=True)
        results_path.write_text(json.dumps(results, indent=1))
        prune_cache(ctx["cache"], baseline_keep)

    total = time.monotonic() - t_start
    print(f"total {total / 60:.1f} min")
    if not args.no_table:
        write_table(results, NOTES, total, source)
        print(f"wrote {RESULTS_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
