"""CPU checks of the matmul kernels and launcher (no GPU needed).

- select_kernel over shapes, capabilities and the K thresholds;
- the KERNELS / config tables;
- every matmul_dp4a.cu instantiation compiles through NVRTC (sm_80, sm_90)
  with an empty log and no flush-to-zero float arithmetic;
- quantized_matmul's Python side (batch plans, strides, pointers, scalar C
  types, pre-pass choices, temporaries) run against a NumPy emulator of the
  matmul kernel ABI, compared with dmlq.reference.
"""
from __future__ import annotations

import ctypes
import functools
import re

import numpy as np
import pytest

from dmlq.gpu import loader, matmul
from dmlq.gpu.matmul import select_kernel

WIDE = matmul.WIDE_K


# ------------------------------------------------------------- selection

@pytest.mark.parametrize("cc", [61, 75, 80, 86, 89, 90, (9, 0), "90", "8.0"])
@pytest.mark.parametrize("have_mma", [False, True])
def test_wide_above_32768_only(cc, have_mma):
    for m, n in [(1, 1), (7, 300), (4096, 4096)]:
        assert select_kernel(m, n, WIDE + 1, 1, cc, have_mma=have_mma) == "dp4a-wide"
        assert select_kernel(m, n, 33025, 3, cc, have_mma=have_mma) == "dp4a-wide"
        assert select_kernel(m, n, 10**6, 1, cc, have_mma=have_mma) == "dp4a-wide"
        assert select_kernel(m, n, WIDE, 1, cc, have_mma=have_mma) != "dp4a-wide"
        assert select_kernel(m, n, 1, 1, cc, have_mma=have_mma) != "dp4a-wide"


def test_mma_needs_sm80_the_file_and_a_big_enough_product():
    big = (4096, 4096, 4096, 1)
    assert select_kernel(*big, 90, have_mma=True) == "mma-128x128"
    assert select_kernel(*big, (8, 0), have_mma=True) == "mma-128x128"
    assert select_kernel(*big, 75, have_mma=True).startswith("dp4a-")
    assert select_kernel(*big, 90, have_mma=False) == "dp4a-128x64"
    # LLM decode-ish shapes: M = 16 still goes to tensor cores.
    assert select_kernel(16, 4096, 4096, 1, 90, have_mma=True) == "mma-128x128"
    # GEMV, tiny and short-K products stay on dp4a.
    assert select_kernel(1, 4096, 4096, 1, 90, have_mma=True) == "dp4a-32x32"
    assert select_kernel(8, 8, 8, 1, 90, have_mma=True) == "dp4a-32x32"
    assert select_kernel(4096, 4096, 16, 1, 90, have_mma=True).startswith("dp4a-")
    # Never past the int32 limit.
    assert select_kernel(4096, 4096, WIDE + 1, 1, 90, have_mma=True) == "dp4a-wide"
    assert select_kernel(4096, 4096, WIDE, 1, 90, have_mma=True) == "mma-128x128"


def test_dp4a_tile_by_size():
    sel = functools.partial(select_kernel, compute_capability=75, have_mma=False)
    assert sel(4096, 4096, 4096, 1) == "dp4a-128x64"
    assert sel(2048, 2048, 512, 1) == "dp4a-128x64"
    assert sel(1024, 1024, 1024, 1) == "dp4a-64x64"      # 128 blocks of 128x64 < 132 SMs
    assert sel(1024, 1024, 1024, 1, sm_count=108) == "dp4a-128x64"
    assert sel(512, 512, 512, 1) == "dp4a-32x32"
    assert sel(512, 512, 512, 8) == "dp4a-128x64"        # the batch fills the GPU
    assert sel(100, 5000, 64, 1) == "dp4a-64x64"
    assert sel(40, 5000, 64, 1) == "dp4a-32x32"           # M below every bigger tile
    assert sel(1, 1, 1, 1) == "dp4a-32x32"
    assert sel(17, 3, 1000, 1) == "dp4a-32x32"


def test_selection_is_total_and_consistent():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        m, n = (int(v) for v in rng.integers(1, 20000, 2))
        k = int(rng.choice([1, 3, 64, 4096, WIDE, WIDE + 1, 100000]))
        batch = int(rng.integers(1, 64))
        cc = int(rng.choice([61, 70, 75, 80, 86, 89, 90]))
        have = bool(rng.integers(2))
        v = select_kernel(m, n, k, batch, cc, "int8", "uint8", have_mma=have)
        assert v in matmul.ALL_VARIANTS
        assert (v == "dp4a-wide") == (k > WIDE)
        if v in matmul.MMA_CONFIGS:
            assert have and cc >= 80 and k <= WIDE


def test_default_have_mma_follows_the_source_file():
    big = (4096, 4096, 4096, 1, 90)
    expect = "mma-128x128" if matmul.HAVE_MMA else "dp4a-128x64"
    assert select_kernel(*big) == expect


# ---------------------------------------------------------------- tables

def test_kernel_tables():
    dp4a = matmul.KERNELS[matmul.DP4A_SOURCE]
    assert len(dp4a) == len(set(dp4a)) == 8 * len(matmul.DP4A_CONFIGS) + 4
    for t in matmul.QTYPES:
        assert f"matmul_row_sums<{t}>" in dp4a and f"matmul_col_sums<{t}>" in dp4a
    assert "matmul_dp4a<int8, uint8, int8, 128, 64, 32, 8, 8>" in dp4a
    assert "matmul_dp4a_wide<uint8, uint8, uint8, 64, 64, 32, 8, 4>" in dp4a
    assert (matmul.MMA_SOURCE in matmul.KERNELS) == matmul.HAVE_MMA
    assert matmul.HAVE_MMA == (loader.cuda_dir() / matmul.MMA_SOURCE).is_file()
    if matmul.HAVE_MMA:
        assert "matmul_mma<uint8, int8, uint8, 128, 128, 64, 4>" in matmul.KERNELS[matmul.MMA_SOURCE]
        assert set(matmul.VARIANTS) == set(matmul.ALL_VARIANTS)
    else:
        assert set(matmul.VARIANTS) == set(matmul.DP4A_CONFIGS)
    for name, cfg in matmul.CONFIGS.items():
        for ta in matmul.QTYPES:
            for tb in matmul.QTYPES:
                for to in matmul.QTYPES:
                    if name in matmul.VARIANTS:
                        assert cfg.name(ta, tb, to) in matmul.KERNELS[cfg.source]


def test_mma_config_launch_numbers():
    cfg = matmul.MMA_CONFIGS["mma-128x128"]
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.stages) == (128, 128, 64, 4)
    assert cfg.smem == 4 * (128 * 64 + 64 * 128)


@pytest.mark.parametrize("name", sorted(matmul.MMA_CONFIGS))
def test_mma_threads_match_the_kernel(name):
    # matmul_mma.cu traps unless blockDim.x == 32 * (BM / 64) * (BN / 64): one warp per 64x64 tile.
    cfg = matmul.MMA_CONFIGS[name]
    assert cfg.threads == 32 * (cfg.bm // 64) * (cfg.bn // 64)
    src = (loader.cuda_dir() / "matmul_mma.cu").read_text()
    assert "blockDim.x != NT" in src


@pytest.mark.parametrize("name", sorted(matmul.DP4A_CONFIGS))
def test_dp4a_configs_meet_the_kernel_static_asserts(name):
    c = matmul.DP4A_CONFIGS[name]
    thr_m, thr_n = c.bm // c.tm, c.bn // c.tn
    nt, kq = thr_m * thr_n, c.bk // 4
    assert c.threads == nt <= 1024 and nt % 32 == 0
    assert c.tm % 4 == 0 and c.tn % 4 == 0 and c.bk % 4 == 0 and c.bm % 32 == 0
    assert nt % kq == 0 and (c.bm * kq) % nt == 0
    assert nt % (c.bn // 4) == 0 and (kq * (c.bn // 4)) % nt == 0
    assert 32768 % c.bk == 0
    smem_words = 2 * kq * (c.bm + 4) + 2 * kq * c.bn
    assert c.bm * (c.bn + 4) <= 4 * smem_words <= 48 * 1024


# ------------------------------------------------------------- compiling

FTZ_ARITH = re.compile(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b")


@functools.lru_cache(maxsize=None)
def _compiled(arch):
    from dmlq.gpu import nvrtc

    return nvrtc.compile_source(matmul.DP4A_SOURCE, arch, matmul.KERNELS[matmul.DP4A_SOURCE])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dp4a_kernels_compile_clean(arch):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    result = _compiled(arch)
    assert result.log == "", result.log
    names = matmul.KERNELS[matmul.DP4A_SOURCE]
    assert set(result.lowered) == set(names)
    for name, lowered in result.lowered.items():
        assert f".entry {lowered}(" in result.ptx or f".entry {lowered} (" in result.ptx, name
    bad = sorted(set(FTZ_ARITH.findall(result.ptx)))
    assert not bad, f"flush-to-zero float arithmetic: {bad}"
    # The epilogue's divide and multiplies are the IEEE ones.
    assert "div.rn.f32" in result.ptx and "mul.rn.f32" in result.ptx
    for form in ("s32.s32", "s32.u32", "u32.s32", "u32.u32"):
        assert f"dp4a.{form}" in result.ptx


# ------------------------------------------- launcher against an emulator
# Emulator: a NumPy model of the kernel ABI (what each launch must compute).

def _addr_of(x) -> int:
    if x is None:
        return 0
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    assert type(x) is np.uint64, f"pointer passed as {type(x).__name__}"
    return int(x)


def _gather(addrs, dtype):
    """Values of `dtype` at the (aligned) host addresses `addrs`."""
    dtype = np.dtype(dtype)
    addrs = np.asarray(addrs, np.int64)
    lo, hi = int(addrs.min()), int(addrs.max()) + dtype.itemsize
    buf = (ctypes.c_char * (hi - lo)).from_address(lo)
    view = np.frombuffer(buf, dtype=np.uint8)
    idx = (addrs - lo)[..., None] + np.arange(dtype.itemsize)
    return view[idx].copy().view(dtype)[..., 0]


def _scatter(addrs, values):
    addrs = np.asarray(addrs, np.int64)
    lo, hi = int(addrs.min()), int(addrs.max()) + 1
    buf = (ctypes.c_char * (hi - lo)).from_address(lo)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[addrs - lo] = np.asarray(values).view(np.uint8)


def _template_args(name):
    head, args = name.split("<", 1)
    return head, [a.strip() for a in args.rstrip(">").split(",")]


class Emulator:
    """Runs launches the way the kernels would, from raw host pointers."""

    def __init__(self):
        self.calls = []

    def __call__(self, source, name, grid, block, args, shared_mem=0):
        assert name in matmul.KERNELS[source], name
        assert len(grid) in (1, 2, 3) and all(int(g) >= 1 for g in grid)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        assert grid[0] < 2**31 and grid[1] <= 65535 and grid[2] <= 65535
        self.calls.append((name, grid, block))
        head, targs = _template_args(name)
        if head == "matmul_row_sums":
            self.row_sums(targs[0], grid, block, *args)
        elif head == "matmul_col_sums":
            self.col_sums(targs[0], grid, block, *args)
        else:
            self.gemm(head, targs, grid, block, shared_mem, *args)

    @staticmethod
    def _types(values, types):
        for v, t in zip(values, types):
            assert type(v) is t, f"{type(v).__name__} where {t.__name__} belongs"

    def row_sums(self, t, grid, block, A, M, K, batch, batch1, bs0, bs1, lda, out):
        self._types((M, K, batch, batch1, bs0, bs1, lda), (np.int32,) * 4 + (np.int64,) * 3)
        assert block == (256,) and out.dtype == np.int32 and out.size >= batch * M
        z = np.arange(int(batch))
        addr = (_addr_of(A) + (z // batch1 * bs0 + z % batch1 * bs1)[:, None, None]
                + np.arange(M)[:, None] * int(lda) + np.arange(K))
        out[: batch * M] = _gather(addr, t).astype(np.int64).sum(-1).reshape(-1) if K else 0

    def col_sums(self, t, grid, block, B, N, K, batch, batch1, bs0, bs1, ldb, out):
        self._types((N, K, batch, batch1, bs0, bs1, ldb), (np.int32,) * 4 + (np.int64,) * 3)
        assert block == (256,) and grid[0] * 32 >= N and out.dtype == np.int32
        z = np.arange(int(batch))
        addr = (_addr_of(B) + (z // batch1 * bs0 + z % batch1 * bs1)[:, None, None]
                + np.arange(K)[:, None] * int(ldb) + np.arange(N))
        out[: batch * N] = _gather(addr, t).astype(np.int64).sum(-2).reshape(-1) if K else 0

    def gemm(self, head, targs, grid, block, shared_mem, A, B, C, M, N, K, batch1,
             a_bs0, a_bs1, b_bs0, b_bs1, c_bs0, c_bs1, lda, ldb, ldc,
             a_scale, b_scale, out_scale, a_zp, b_zp, out_zp,
             a_per_row, b_per_col, out_per_row, row_sum_a, col_sum_b):
        self._types((M, N, K, batch1), (np.int32,) * 4)
        self._types((a_bs0, a_bs1, b_bs0, b_bs1, c_bs0, c_bs1, lda, ldb, ldc), (np.int64,) * 9)
        self._types((a_per_row, b_per_col, out_per_row), (np.int32,) * 3)
        ta, tb, to = targs[:3]
        bm, bn = int(targs[3]), int(targs[4])
        wide = head == "matmul_dp4a_wide"
        if head == "matmul_mma":
            cfg = next(c for c in matmul.MMA_CONFIGS.values() if c.name(ta, tb, to) == "matmul_mma<"
                       + ", ".join(targs) + ">")
            assert block == (cfg.threads,) and shared_mem == cfg.smem
        else:
            cfg = next(c for c in matmul.DP4A_CONFIGS.values()
                       if c.name(ta, tb, to) == f"{head}<{', '.join(targs)}>")
            assert block == (cfg.threads,) and shared_mem == 0
        assert grid[0] * bn >= N > (grid[0] - 1) * bn and grid[1] * bm >= M > (grid[1] - 1) * bm
        M, N, K = int(M), int(N), int(K)
        if not wide and K:
            assert K <= 33025, "int32 accumulation is exact only up to K = 33025"
        for z in range(grid[2]):
            b0, b1 = divmod(z, int(batch1))
            a_base = _addr_of(A) + b0 * int(a_bs0) + b1 * int(a_bs1)
            b_base = _addr_of(B) + b0 * int(b_bs0) + b1 * int(b_bs1)
            c_base = _addr_of(C) + b0 * int(c_bs0) + b1 * int(c_bs1)
            rows, cols = np.arange(M)[:, None], np.arange(N)
            if K:
                a = _gather(a_base + rows * int(lda) + np.arange(K), ta).astype(np.int64)
                b = _gather(b_base + np.arange(K)[:, None] * int(ldb) + cols, tb).astype(np.int64)
                s = a @ b
            else:
                a = np.zeros((M, 0), np.int64)
                b = np.zeros((0, N), np.int64)
                s = np.zeros((M, N), np.int64)

            def vec(p, dtype, per, length):
                if p is None:
                    return np.zeros(length, np.int64)
                assert isinstance(p, np.ndarray) and p.dtype == np.dtype(dtype)
                assert p.flags.c_contiguous and p.size >= (length if per else 1)
                return np.resize(p[:length] if per else p[:1], length)

            za = vec(a_zp, ta, a_per_row, M).astype(np.int64)[:, None]
            zb = vec(b_zp, tb, b_per_col, N).astype(np.int64)[None, :]
            if wide:
                acc = s - za * b.sum(0)[None, :] - zb * a.sum(1)[:, None] + K * za * zb
            else:
                rs = np.zeros(M, np.int64) if b_zp is None else \
                    row_sum_a[z * M: (z + 1) * M].astype(np.int64)
                cs = np.zeros(N, np.int64) if a_zp is None else \
                    col_sum_b[z * N: (z + 1) * N].astype(np.int64)
                acc = s - za * cs[None, :] - zb * rs[:, None] + K * za * zb
                acc = ((acc + 2**31) % 2**32 - 2**31)  # the kernel's int32 arithmetic
            exact = (a - za) @ (b - zb) if K else np.zeros((M, N), np.int64)
            np.testing.assert_array_equal(acc, exact)
            as_ = vec(a_scale, np.float32, a_per_row, M)[:, None]
            bs_ = vec(b_scale, np.float32, b_per_col, N)[None, :]
            os_ = vec(out_scale, np.float32, out_per_row, M)[:, None]
            with np.errstate(all="ignore"):
                mult = np.divide(np.multiply(as_, bs_, dtype=np.float32), os_, dtype=np.float32)
                t = np.multiply(acc.astype(np.float32), mult, dtype=np.float32)
            ozp = vec(out_zp, to, out_per_row, M).astype(np.int64)[:, None]
            info = np.iinfo(np.dtype(to))
            with np.errstate(all="ignore"):
                r = np.clip(np.rint(t), info.min - ozp, info.max - ozp)
                r = np.where(np.isnan(t), 0, r)
            q = (r.astype(np.int64) + ozp).astype(to)
            _scatter(c_base + rows * int(ldc) + cols, q)


# --------------------------------- the real kernel source, run on the host
# matmul_dp4a.cu compiled by g++ with a small CUDA shim: every CUDA thread is
# a ucontext fiber, __syncthreads / warp shuffles switch fibers round-robin
# (alternately forward and reverse), shared memory is poisoned per block. It
# checks indexing, predicates, staging and barriers bit-exactly without a GPU
# (not timing, not the PTX-level float ops, which test_dp4a_kernels_compile_clean
# and the GPU tests cover).

HOST_PRELUDE = r"""
// Host execution of CUDA kernel source: each CUDA thread is a ucontext fiber;
// __syncthreads and warp shuffles switch fibers (deterministic round-robin).
#include <ucontext.h>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>
using std::max;
using std::min;

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct sim_dim3 { unsigned x, y, z; };

namespace sim {
enum State { RUN, AT_BLOCK, AT_WARP, DONE };
struct Fiber { ucontext_t ctx; State state; };
static std::vector<Fiber> fibers;
static std::vector<std::vector<char>> stacks;
static std::vector<unsigned> slots;
static ucontext_t sched;
static int current;
static long block_serial;
static std::function<void()> body;
static sim_dim3 block_idx, grid_dim, block_dim;

inline sim_dim3 thread_idx() { return {static_cast<unsigned>(current), 0u, 0u}; }
inline void wait(State s) {
  fibers[current].state = s;
  swapcontext(&fibers[current].ctx, &sched);
}
inline void sync_block() { wait(AT_BLOCK); }
inline unsigned shfl_xor(unsigned v, int off) {
  const int t = current;
  slots[t] = v;
  wait(AT_WARP);
  const unsigned r = slots[(t & ~31) | ((t & 31) ^ off)];
  wait(AT_WARP);
  return r;
}
template <typename T, size_t N>
void poison(T (&arr)[N], long& serial) {  // fresh garbage in shared memory per block
  if (serial != block_serial) {
    std::memset(arr, 0xA5, sizeof(arr));
    serial = block_serial;
  }
}
static void trampoline() {
  body();
  fibers[current].state = DONE;
}
// One block: returns 0, or 1 for a barrier deadlock / divergent barrier.
static int run_block(unsigned nthreads, int order) {
  ++block_serial;
  fibers.assign(nthreads, Fiber{});
  stacks.resize(nthreads);
  slots.assign(nthreads + 32, 0u);
  for (unsigned t = 0; t < nthreads; ++t) {
    stacks[t].resize(1 << 17);
    getcontext(&fibers[t].ctx);
    fibers[t].ctx.uc_stack.ss_sp = stacks[t].data();
    fibers[t].ctx.uc_stack.ss_size = stacks[t].size();
    fibers[t].ctx.uc_link = &sched;
    makecontext(&fibers[t].ctx, trampoline, 0);
    fibers[t].state = RUN;
  }
  for (;;) {
    for (unsigned i = 0; i < nthreads; ++i) {
      const int t = order ? static_cast<int>(nthreads - 1 - i) : static_cast<int>(i);
      if (fibers[t].state != RUN) continue;
      current = t;
      swapcontext(&sched, &fibers[t].ctx);
    }
    unsigned done = 0, at_block = 0;
    for (auto& f : fibers) {
      done += f.state == DONE;
      at_block += f.state == AT_BLOCK;
    }
    if (done == nthreads) return 0;
    if (at_block == nthreads) {
      for (auto& f : fibers) f.state = RUN;
      continue;
    }
    bool released = false;
    for (unsigned w = 0; w < nthreads; w += 32) {
      const unsigned end = std::min(nthreads, w + 32);
      bool all = true;
      for (unsigned t = w; t < end; ++t) all = all && fibers[t].state == AT_WARP;
      if (all) {
        for (unsigned t = w; t < end; ++t) fibers[t].state = RUN;
        released = true;
      }
    }
    if (!released) return 1;  // some threads wait at a barrier others never reach
  }
}
template <typename F>
int launch(const unsigned* g, const unsigned* b, int order, F f) {
  grid_dim = {g[0], g[1], g[2]};
  block_dim = {b[0], 1u, 1u};
  body = f;
  for (unsigned z = 0; z < g[2]; ++z)
    for (unsigned y = 0; y < g[1]; ++y)
      for (unsigned x = 0; x < g[0]; ++x) {
        block_idx = {x, y, z};
        if (run_block(b[0], order)) return 1;
      }
  return 0;
}
template <bool SA, bool SB>
inline unsigned dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) {
    const unsigned aa = (a >> (8 * i)) & 255u;
    const int x = SA ? static_cast<int>(static_cast<signed char>(aa)) : static_cast<int>(aa);
    const unsigned bb = (b >> (8 * i)) & 255u;
    const int y = SB ? static_cast<int>(static_cast<signed char>(bb)) : static_cast<int>(bb);
    c += static_cast<unsigned>(x * y);
  }
  return c;
}
}  // namespace sim

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define threadIdx (sim::thread_idx())
#define blockIdx (sim::block_idx)
#define gridDim (sim::grid_dim)
#define blockDim (sim::block_dim)
#define __syncthreads() sim::sync_block()
#define __shfl_xor_sync(mask, v, off) sim::shfl_xor((v), (off))
inline unsigned __ldg(const unsigned* p) { return *p; }
inline unsigned char __ldg(const unsigned char* p) { return *p; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7u))) & 255u) << (8 * i);
  return r;
}

// common.cuh, host edition: the same arithmetic in plain IEEE float.
typedef signed char int8;
typedef unsigned char uint8;
typedef long long int64;
namespace dmlq {
inline float ieee_div(float a, float b) { volatile float r = a / b; return r; }
inline float ieee_mul(float a, float b) { volatile float r = a * b; return r; }
inline float to_f32(int v) { return static_cast<float>(v); }
inline float to_f32(unsigned v) { return static_cast<float>(v); }
inline float to_f32(int64 v) { return static_cast<float>(v); }
template <typename Q> struct qlimits;
template <> struct qlimits<int8> { static constexpr int min = -128, max = 127; };
template <> struct qlimits<uint8> { static constexpr int min = 0, max = 255; };
template <typename Q>
inline Q round_saturate(float t, int zp) {
  if (t != t) return static_cast<Q>(zp);
  float r = std::rint(t);
  r = std::fmin(std::fmax(r, static_cast<float>(qlimits<Q>::min - zp)), static_cast<float>(qlimits<Q>::max - zp));
  return static_cast<Q>(static_cast<int>(r) + zp);
}
}  // namespace dmlq
"""

_DP4A_ASM = re.compile(r'asm\("dp4a\.([su])32\.([su])32 %0, %1, %2, %3;" : "=r"\(d\) : '
                       r'"r"\(a\), "r"\(b\), "r"\(c\)\);')
_SHARED = re.compile(r"__shared__ (__align__\(\d+\) )?(\w+) (\w+)((?:\[[^\]]+\])+);")
_MAIN_ARGS = ("*(const {TA}* const*)p[0], *(const {TB}* const*)p[1], *({TO}* const*)p[2], "
              + ", ".join(f"*(const int*)p[{i}]" for i in range(3, 7)) + ", "
              + ", ".join(f"*(const long long*)p[{i}]" for i in range(7, 16)) + ", "
              + ", ".join(f"*(const float* const*)p[{i}]" for i in range(16, 19)) + ", "
              "*(const {TA}* const*)p[19], *(const {TB}* const*)p[20], *(const {TO}* const*)p[21], "
              + ", ".join(f"*(const int*)p[{i}]" for i in range(22, 25)) + ", "
              "*(const int* const*)p[25], *(const int* const*)p[26]")
_PRE_ARGS = ("*(const {T}* const*)p[0], " + ", ".join(f"*(const int*)p[{i}]" for i in range(1, 5))
             + ", " + ", ".join(f"*(const long long*)p[{i}]" for i in range(5, 8)) + ", *(int* const*)p[8]")


def host_source(names) -> str:
    text = (loader.cuda_dir() / matmul.DP4A_SOURCE).read_text()
    assert text.count('#include "common.cuh"') == 1
    text = text.replace('#include "common.cuh"', "")
    text, n = _DP4A_ASM.subn(
        lambda m: f"d = sim::dp4a<{str(m[1] == 's').lower()}, {str(m[2] == 's').lower()}>(a, b, c);", text)
    assert n == 4, "the host shim expects the four dp4a asm forms"
    text, n = _SHARED.subn(lambda m: f"{m[1] or ''}static {m[2]} {m[3]}{m[4]}; static long {m[3]}_serial; "
                                     f"sim::poison({m[3]}, {m[3]}_serial);", text)
    assert n >= 2 and "asm(" not in text and "__shared__" not in text
    out = [HOST_PRELUDE, text]
    for i, name in enumerate(names):
        head, targs = _template_args(name)
        if head.startswith("matmul_dp4a"):
            args = _MAIN_ARGS.format(TA=targs[0], TB=targs[1], TO=targs[2])
        else:
            args = _PRE_ARGS.format(T=targs[0])
        out.append(f'extern "C" int k{i}(const unsigned* g, const unsigned* b, void** p, int order) '
                   f"{{ return sim::launch(g, b, order, [=] {{ {name}({args}); }}); }}")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="session")
def host_lib(tmp_path_factory):
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++ to run the kernel source on the host")
    names = matmul.KERNELS[matmul.DP4A_SOURCE]
    d = tmp_path_factory.mktemp("dp4a_host")
    (d / "k.cpp").write_text(host_source(names))
    r = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off",
                        "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas", "-o", str(d / "k.so"),
                        str(d / "k.cpp")], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr[-5000:]
    return ctypes.CDLL(str(d / "k.so")), {n: i for i, n in enumerate(names)}


def _holder(v):
    if v is None:
        return ctypes.c_void_p(0)
    if isinstance(v, np.ndarray):
        return ctypes.c_void_p(v.__array_interface__["data"][0])
    return {np.uint64: ctypes.c_uint64, np.int64: ctypes.c_int64, np.int32: ctypes.c_int32}[type(v)](int(v))


class HostRunner(Emulator):
    """Checks each launch like the emulator, then runs the real kernel on the host."""

    def __init__(self, lib, index):
        super().__init__()
        self.lib, self.index, self.order = lib, index, 0

    def __call__(self, source, name, grid, block, args, shared_mem=0):
        if source != matmul.DP4A_SOURCE:
            pytest.skip(f"{name}: only matmul_dp4a.cu runs on the host")
        assert name in matmul.KERNELS[source], name
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        assert grid[0] < 2**31 and grid[1] <= 65535 and grid[2] <= 65535 and min(grid) >= 1
        assert len(block) == 1 and 32 <= block[0] <= 1024
        self.calls.append((name, grid, block))
        expect_len = 27 if name.startswith("matmul_dp4a") else 9
        assert len(args) == expect_len
        holders = [_holder(a) for a in args]
        params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        fn = getattr(self.lib, f"k{self.index[name]}")
        self.order ^= 1
        rc = fn((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(block[0], 1, 1), params, self.order)
        assert rc == 0, f"{name}: threads wait at a barrier others never reach"


@pytest.fixture(params=["abi", "host"])
def emu(request, monkeypatch):
    if request.param == "abi":
        e = Emulator()
    else:
        e = HostRunner(*request.getfixturevalue("host_lib"))
    monkeypatch.setattr(matmul, "_xp", lambda: np)
    monkeypatch.setattr(matmul, "_ptr", lambda x: x.__array_interface__["data"][0])
    monkeypatch.setattr(matmul, "_device_info", lambda: (90, 132))
    monkeypatch.setattr(matmul, "_launch", e)
    return e


def _reference():
    return pytest.importorskip("dmlq.reference")


def _case(rng, a_shape, b_shape, ta, tb, to, a_layout="tensor", b_layout="tensor",
          o_layout="tensor", zps=(True, True, True)):
    M, K = a_shape[-2:]
    N = b_shape[-1]

    def q(shape, dt):
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max + 1, shape).astype(dt)

    a, b = q(a_shape, ta), q(b_shape, tb)
    n_a = M if a_layout == "axis" else 1
    n_b = N if b_layout == "axis" else 1
    n_o = M if o_layout == "axis" else 1
    scale = 1.0 / max(K, 1) / 64
    a_s = rng.uniform(0.5, 2, n_a).astype(np.float32)
    b_s = rng.uniform(0.5, 2, n_b).astype(np.float32)
    o_s = rng.uniform(0.5, 2, n_o).astype(np.float32) / np.float32(scale)
    a_zp = q(n_a, ta) if zps[0] else None
    b_zp = q(n_b, tb) if zps[1] else None
    o_zp = q(n_o, to) if zps[2] else None
    return a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp


def _check(rng, variant, a_shape, b_shape, ta="int8", tb="uint8", to="int8", out=None, **kw):
    ref = _reference()
    a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp = _case(rng, a_shape, b_shape, ta, tb, to, **kw)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if out is None:
        out = np.empty(shape, to)
    out.view(np.uint8)[...] = 0xA5
    expect = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty(shape, to))
    got = matmul.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant=variant)
    assert got is out
    np.testing.assert_array_equal(out, expect)
    return out


def _require(variant):
    if variant not in matmul.VARIANTS:
        pytest.skip(f"{variant}: its kernel source is absent (not in KERNELS)")


@pytest.mark.parametrize("variant", matmul.ALL_VARIANTS)
@pytest.mark.parametrize("types", [("int8", "int8", "int8"), ("uint8", "int8", "uint8"),
                                   ("int8", "uint8", "int8"), ("uint8", "uint8", "uint8")])
def test_emulated_layouts(emu, rng, variant, types):
    _require(variant)
    ta, tb, to = types
    for zps in [(True, True, True), (False, False, False), (True, False, True), (False, True, False)]:
        for layouts in [("tensor", "tensor", "tensor"), ("axis", "axis", "axis"),
                        ("axis", "tensor", "tensor"), ("tensor", "axis", "axis")]:
            _check(rng, variant, (3, 17), (17, 5), ta, tb, to, a_layout=layouts[0],
                   b_layout=layouts[1], o_layout=layouts[2], zps=zps)


@pytest.mark.parametrize("variant", sorted(matmul.DP4A_CONFIGS))
def test_emulated_tile_edges_and_alignment(emu, rng, variant):
    """Several tiles in M, N and K, partial tiles, word (aligned) and byte paths."""
    ref = _reference()
    combos = [("int8", "int8", "int8"), ("uint8", "int8", "uint8"), ("int8", "uint8", "uint8"),
              ("uint8", "uint8", "int8")]
    for i, (M, K, N) in enumerate([(130, 72, 67), (33, 129, 65), (128, 64, 64), (65, 100, 132), (1, 260, 3)]):
        ta, tb, to = combos[i % 4]
        for shift in (0, 1):  # shift 1: every operand starts off a 4-byte boundary
            a0, a_s, a_zp, b0, b_s, b_zp, o_s, o_zp = _case(
                rng, (M, K), (K, N), ta, tb, to, a_layout="axis", b_layout="axis", o_layout="axis")
            a = np.zeros((M, K + 4), ta)[:, shift:K + shift]
            b = np.zeros((K, N + 4), tb)[:, shift:N + shift]
            a[...], b[...] = a0, b0
            buf = np.full((M + 1, (N + 7) // 4 * 4), 0xA5, np.uint8)  # ldc % 4 == 0
            out = buf.view(to)[:M, shift:N + shift]
            expect = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty((M, N), to))
            matmul.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant=variant)
            np.testing.assert_array_equal(out, expect)
            outside = np.ones(buf.shape, bool)
            outside[:M, shift:N + shift] = False
            assert (buf[outside] == 0xA5).all(), "wrote outside the output"


def test_emulated_mixed_scale_and_zero_point_layouts(emu, rng):
    """A per-axis zero point beside a per-tensor scale (and the reverse)."""
    ref = _reference()
    M, K, N = 5, 11, 7
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    one = np.float32([0.05])
    rows = rng.uniform(0.02, 0.1, M).astype(np.float32)
    cols = rng.uniform(0.5, 2, N).astype(np.float32)
    for a_s, a_zp, b_s, b_zp, o_s, o_zp in [
            (one, rng.integers(0, 256, M).astype(np.uint8), np.float32([1]),
             rng.integers(-128, 128, N).astype(np.int8), np.float32([2]), rng.integers(0, 256, M).astype(np.uint8)),
            (rows, np.uint8([9]), cols, np.int8([-7]), rows * 9, np.uint8([100])),
            (rows[:, None], np.uint8([[3]]), cols[None, :], None, np.float32(3.0).reshape(1), None)]:
        for variant in ("dp4a-32x32", "dp4a-wide"):
            expect = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty((M, N), np.uint8))
            out = np.full((M, N), 0xA5, np.uint8)
            matmul.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant=variant)
            np.testing.assert_array_equal(out, expect)


def test_prepass_only_for_the_other_operands_zero_point(emu, rng):
    for zps, rows, cols in [((True, True, False), True, True), ((False, True, False), True, False),
                            ((True, False, False), False, True), ((False, False, True), False, False)]:
        emu.calls.clear()
        _check(rng, "dp4a-32x32", (4, 9), (9, 6), zps=zps)
        names = [c[0] for c in emu.calls]
        assert any(n.startswith("matmul_row_sums") for n in names) == rows
        assert any(n.startswith("matmul_col_sums") for n in names) == cols
        emu.calls.clear()
        _check(rng, "dp4a-wide", (4, 9), (9, 6), zps=zps)
        assert [c[0].split("<")[0] for c in emu.calls] == ["matmul_dp4a_wide"]


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 5, 7), (2, 3, 7, 4)),
    ((5, 7), (6, 7, 4)),              # a broadcast over the batch (stride 0)
    ((6, 5, 7), (7, 4)),
    ((2, 1, 5, 7), (1, 3, 7, 4)),     # both broadcast, on different dims
    ((4, 1, 3, 1, 5, 7), (1, 2, 1, 2, 7, 4)),  # more than two levels after collapsing
    ((1, 1, 5, 7), (1, 7, 4)),
])
def test_emulated_batch_broadcasting(emu, rng, a_shape, b_shape):
    for variant in ("dp4a-32x32", "dp4a-wide"):
        _check(rng, variant, a_shape, b_shape, "uint8", "int8", "uint8",
               a_layout="axis", b_layout="axis", o_layout="axis")


def test_emulated_batch_collapses_to_one_launch(emu, rng):
    _check(rng, "dp4a-32x32", (2, 3, 4, 5, 7), (2, 3, 4, 7, 6), zps=(False, False, False))
    assert len(emu.calls) == 1 and emu.calls[0][1][2] == 24


def test_emulated_grid_z_split(emu, rng, monkeypatch):
    monkeypatch.setattr(matmul, "MAX_GRID_YZ", 4)
    for a_shape, b_shape in [((11, 3, 5), (11, 5, 2)), ((3, 7, 3, 5), (3, 7, 5, 2)),
                             ((2, 9, 3, 5), (9, 5, 2))]:
        emu.calls.clear()
        _check(rng, "dp4a-32x32", a_shape, b_shape)
        assert all(c[1][2] <= 4 for c in emu.calls if c[0].startswith("matmul_dp4a"))


def test_emulated_strided_inputs_and_outputs(emu, rng):
    ref = _reference()
    a_full = rng.integers(-128, 128, (3, 9, 40)).astype(np.int8)
    b_full = rng.integers(0, 256, (40, 30)).astype(np.uint8)
    a = a_full[:, 1:8:2, 3:20]          # row stride 40, odd base offset
    b = b_full[2:19, ::3]               # last axis not unit stride -> copied
    M, N = a.shape[-2], b.shape[-1]
    a_s, a_zp = np.float32([0.5]), np.int8([-3])
    b_s, b_zp = np.float32([0.25]), np.uint8([200])
    o_s, o_zp = np.float32([3.0]), np.uint8([128])
    expect = ref.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, np.empty((3, M, N), np.uint8))
    for out in [np.empty((3, N, M), np.uint8).transpose(0, 2, 1),   # last axis strided -> temp
                np.empty((3, M, 2 * N), np.uint8)[:, :, ::2],
                np.empty((3, M, N + 5), np.uint8)[:, :, 2:N + 2],
                np.empty((M, 3, N), np.uint8).transpose(1, 0, 2),
                np.empty((3, M, N), np.uint8)[::-1, ::-1]]:
        out[...] = 0xA5
        matmul.quantized_matmul(a, a_s, a_zp, b, b_s, b_zp, o_s, o_zp, out, variant="dp4a-64x64")
        np.testing.assert_array_equal(out, expect)


def test_emulated_out_overlapping_an_input_goes_through_a_temporary(emu, rng):
    ref = _reference()
    buf = rng.integers(-128, 128, (6, 6)).astype(np.int8)
    a = buf[:, :4]
    b = buf[:4, :]
    args = (np.float32([0.1]), None, np.float32([0.1]), None, np.float32([1.0]), np.int8([1]))
    expect = ref.quantized_matmul(a, args[0], None, b, args[2], None, args[4], args[5],
                                  np.empty((6, 6), np.int8))
    matmul.quantized_matmul(a, args[0], None, b, args[2], None, args[4], args[5], buf,
                            variant="dp4a-32x32")
    np.testing.assert_array_equal(buf, expect)


def test_emulated_k_zero_and_size_zero(emu, rng):
    ref = _reference()
    a = np.empty((4, 0), np.uint8)
    b = np.empty((0, 3), np.int8)
    a_s = np.float32([1.0, 2.0, 0.0, np.inf])
    for variant in matmul.VARIANTS:
        out = np.full((4, 3), 0xA5, np.uint8)
        o_zp = np.uint8([7, 8, 9, 10])
        matmul.quantized_matmul(a, a_s, np.uint8([1]), b, np.float32([1.0]), np.int8([5]),
                                np.float32([1.0] * 4), o_zp, out, variant=variant)
        expect = ref.quantized_matmul(a, a_s, np.uint8([1]), b, np.float32([1.0]), np.int8([5]),
                                      np.float32([1.0] * 4), o_zp, np.empty((4, 3), np.uint8))
        np.testing.assert_array_equal(out, expect)
    emu.calls.clear()
    out = np.empty((0, 3), np.uint8)
    matmul.quantized_matmul(np.empty((0, 5), np.int8), np.float32([1]), None, np.empty((5, 3), np.int8),
                            np.float32([1]), None, np.float32([1]), None, out)
    assert emu.calls == []


def worst_cases(K, rng):
    """(args without out, out dtype) whose int32 partial sums are at their limit.

    Uniform extremes put |acc| = K * 255 * 255 (wraps past 2**31 for K > 33025);
    out_scale maps it to ~100 so any wrap flips the sign. The "cancelling"
    cases keep sum(a*b) at its limit while the zero points cancel it down to a
    few hundred, and out_scale 4 makes every unit of the exact value count.
    """
    cases = []
    for ta, tb, av, bv, azp, bzp in [("uint8", "uint8", 255, 255, 0, 0),
                                     ("int8", "int8", -128, -128, 0, 0),
                                     ("uint8", "int8", 0, 127, 255, -128),
                                     ("int8", "uint8", -128, 255, 127, 0)]:
        a = np.full((2, K), av, ta)
        b = np.full((K, 3), bv, tb)
        exact = K * (av - azp) * (bv - bzp)
        cases.append(((a, np.float32([1.0]), np.array([azp], ta), b, np.float32([1.0]),
                       np.array([bzp], tb), np.float32([abs(exact) / 100.0]), np.int8([0])), np.int8))
    for ta, tb, hi in [("uint8", "uint8", 255), ("int8", "int8", -128)]:
        a = np.full((3, K), hi, ta)
        a[:, rng.integers(0, K, 50)] = hi - 1 if hi > 0 else hi + 1
        b = np.full((K, 4), hi, tb)
        for j in range(4):
            b[rng.integers(0, K, 20 + j), j] = rng.integers(0, 100) if hi > 0 else rng.integers(-100, 0)
        cases.append(((a, np.float32([1.0]), None, b, np.float32([1.0]), np.array([hi], tb),
                       np.float32([4.0]), np.uint8([128])), np.uint8))
        cases.append(((a, np.float32([0.5, 1.0, 2.0]), np.full(3, hi, ta), b, np.float32([1.0]),
                       None, np.float32([0.25]), np.int8([-5])), np.int8))
    return cases


@pytest.mark.parametrize("K", [32768, 33025, 33026, 70001])
def test_emulated_worst_case_k(emu, rng, K):
    ref = _reference()
    host = isinstance(emu, HostRunner)
    if host and K == 33025:
        pytest.skip("33026 covers the wide path on the host; 33025 runs in the GPU tests")
    for args, odt in worst_cases(K, rng):
        M, N = args[0].shape[0], args[3].shape[1]
        expect = ref.quantized_matmul(*args, np.empty((M, N), odt))
        variants = ["dp4a-wide", None] + (["dp4a-32x32"] if K <= 32768 else [])
        if host:  # ~1 s per call on the host: selection (32x32 or wide) plus wide at 32768
            variants = [None] + (["dp4a-wide"] if K <= 32768 else [])
        for variant in variants:
            out = np.full((M, N), 0x5A, odt)
            matmul.quantized_matmul(*args, out, variant=variant)
            np.testing.assert_array_equal(out, expect)
        if K > 32768:
            with pytest.raises(ValueError):
                matmul.quantized_matmul(*args, np.empty((M, N), odt), variant="dp4a-128x64")


def test_unknown_variant(emu):
    with pytest.raises(ValueError):
        matmul.quantized_matmul(np.zeros((1, 1), np.int8), np.float32([1]), None, np.zeros((1, 1), np.int8),
                                np.float32([1]), None, np.float32([1]), None, np.zeros((1, 1), np.int8),
                                variant="dp4a-1x1")


# ------------------------------------------------------------- batch plan

def _offsets(plan):
    """Every (a, b, c) element offset a plan's launches touch, in launch order."""
    seen = []
    for u in plan:
        a0, a1, b0, b1, c0, c1 = u.strides
        for i in range(u.batch0):
            for j in range(u.batch1):
                seen.append((u.offsets[0] + i * a0 + j * a1, u.offsets[1] + i * b0 + j * b1,
                             u.offsets[2] + i * c0 + j * c1))
    return seen


@pytest.mark.parametrize("max_z", [65535, 5, 1])
def test_plan_batches_matches_numpy_broadcasting(rng, max_z):
    for _ in range(200):
        nd = int(rng.integers(0, 5))
        shape = tuple(int(v) for v in rng.integers(1, 5, nd))
        a_shape = tuple(s if rng.random() < 0.7 else 1 for s in shape)[int(rng.integers(0, nd + 1)):]
        b_shape = tuple(s if rng.random() < 0.7 else 1 for s in shape)[int(rng.integers(0, nd + 1)):]
        a = np.empty(a_shape + (2, 3), np.int8)
        b = np.empty(b_shape + (3, 2), np.int8)
        c = np.empty(shape + (2, 2), np.int8)
        if nd and rng.random() < 0.5:
            c = np.empty(shape[::-1] + (2, 2), np.int8).transpose(tuple(range(nd))[::-1] + (nd, nd + 1))
        plan = matmul.plan_batches(
            shape, matmul.batch_strides(a.shape, a.strides, 1, shape),
            matmul.batch_strides(b.shape, b.strides, 1, shape),
            matmul.batch_strides(c.shape, c.strides, 1, shape), max_z=max_z)
        assert all(u.batch0 * u.batch1 <= max_z for u in plan)
        expect = []
        for idx in np.ndindex(*shape):
            ia = tuple(i if s > 1 else 0 for i, s in zip(idx[nd - len(a_shape):], a_shape))
            ib = tuple(i if s > 1 else 0 for i, s in zip(idx[nd - len(b_shape):], b_shape))
            expect.append((sum(i * s for i, s in zip(ia, a.strides)),
                           sum(i * s for i, s in zip(ib, b.strides)),
                           sum(i * s for i, s in zip(idx, c.strides))))
        got = _offsets(plan)
        assert sorted(got) == sorted(expect)
        assert len({g[2] for g in got}) == len(got)  # every output matrix written once
