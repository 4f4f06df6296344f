"""Average-pooling kernels without a GPU:

- select_variant / applicable for every class of problem;
- the magic-number division the kernels use;
- every name in KERNELS compiles through NVRTC (sm_80, sm_90) with an empty log,
  IEEE (non-.ftz) float division/multiplication and no local-memory arrays;
- the kernels themselves, run on the host: cuda/avgpool.cu is compiled with g++
  against a small CUDA execution model (blocks in turn, threads as fibers so
  __syncthreads and warp shuffles work), driven through the real
  quantized_avg_pool launcher with a stand-in for CuPy that checks every launch
  argument's size against the kernel's C signature, and compared bit for bit with
  dmlq.reference. Inputs end (or start) at an inaccessible page, so a read past
  the tensor crashes. The GPU tests (test_gpu_avgpool.py) check the real thing.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from dmlq import reference
from dmlq.desc import pool_output_size
from dmlq.gpu import avgpool as ap

ARGS_2X2 = ((1, 64, 56, 56), (200704, 3136, 56, 1), (1, 64, 28, 28), (2, 2), (2, 2), (0, 0), (0, 0),
            (1, 1), False)


def c_strides(shape):
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def problem(x_shape, window, strides=None, start=None, end=None, dil=None, include=False, ceil=False,
            x_strides=None):
    """select_variant's arguments for a pooling problem (output sizes from pool_output_size)."""
    nd = len(x_shape) - 2
    strides = strides or (1,) * nd
    start = start or (0,) * nd
    end = end or (0,) * nd
    dil = dil or (1,) * nd
    out = tuple(x_shape[:2]) + tuple(
        pool_output_size(x_shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[1 if ceil else 0]
        for i in range(nd))
    return (tuple(x_shape), tuple(x_strides or c_strides(x_shape)), out, tuple(window), tuple(strides),
            tuple(start), tuple(end), tuple(dil), include)


def sel(*a, **k):
    return ap.select_variant(*problem(*a, **k))


# ------------------------------------------------------------------ selection

def test_classes():
    assert sel((1, 64, 56, 56), (2, 2), (2, 2)) == "tile_k2s2"
    assert sel((256, 256, 56, 56), (2, 2), (2, 2)) == "tile_k2s2"
    assert sel((64, 256, 56, 56), (3, 3), (1, 1), (1, 1), (1, 1)) == "tile_k3s1"
    assert sel((64, 64, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1)) == "tile_k3s2"
    assert sel((2, 3, 9, 9), (3, 3), (2, 2)) == "tile_k3s2"
    # global average: a warp per plane, a block per plane for few large planes
    assert sel((256, 2048, 7, 7), (7, 7)) == "global_warp"
    assert sel((1, 3, 224, 224), (224, 224)) == "global_block"
    assert sel((4096, 3, 224, 224), (224, 224)) == "global_warp"
    assert sel((2, 8, 4, 6, 5), (4, 6, 5)) == "global_warp"
    # 3-D
    assert sel((8, 64, 16, 56, 56), (2, 2, 2), (2, 2, 2)) == "tile_k2s2"
    assert sel((2, 4, 8, 9, 10), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)) == "tile_k3s1"
    # other W windows and strides, W dilation: general
    assert sel((1, 8, 20, 20), (5, 5)) == "general"
    assert sel((1, 8, 20, 20), (2, 2), (1, 1)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (3, 3)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), dil=(2, 2)) == "general"
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), (2, 2), (2, 2), dil=(1, 2)) == "general"
    # only the W window/stride/dilation are compile-time: H and D are free
    assert sel((1, 8, 20, 20), (3, 3), (1, 1), (2, 2), (2, 2), dil=(2, 1)) == "tile_k3s1"
    assert sel((1, 8, 20, 20), (5, 2), (3, 2)) == "tile_k2s2"
    assert sel((1, 8, 6, 20, 20), (1, 4, 3), (2, 1, 1), dil=(3, 2, 1)) == "tile_k3s1"


def test_ceil_mode_and_include_padding_keep_the_class():
    for window, strides, pad, want in (((2, 2), (2, 2), (0, 0), "tile_k2s2"),
                                       ((3, 3), (1, 1), (1, 1), "tile_k3s1"),
                                       ((3, 3), (2, 2), (1, 1), "tile_k3s2")):
        for include in (False, True):
            for ceil in (False, True):
                args = problem((2, 5, 13, 15), window, strides, pad, pad, include=include, ceil=ceil)
                assert ap.select_variant(*args) == want
    floor_args = problem((2, 5, 13, 15), (2, 2), (2, 2), ceil=False)
    ceil_args = problem((2, 5, 13, 15), (2, 2), (2, 2), ceil=True)
    assert ceil_args[2] == (2, 5, 7, 8) and floor_args[2] == (2, 5, 6, 7)


def test_non_contiguous_inputs():
    shape = (2, 6, 10, 12)
    nhwc = (10 * 12 * 6, 1, 12 * 6, 6)
    assert sel(shape, (2, 2), (2, 2), x_strides=nhwc) == "general"           # W stride C
    assert sel(shape, (2, 2), (2, 2), x_strides=(720, 120, 12, 2)) == "general"  # W stride 2
    assert sel(shape, (2, 2), (2, 2), x_strides=(1000, 150, 15, 1)) == "tile_k2s2"  # padded rows
    assert sel(shape, (2, 2), (2, 2), x_strides=(0, 120, 12, 1)) == "tile_k2s2"     # broadcast batch
    assert sel(shape, (2, 2), (2, 2), x_strides=(720, 120, -12, 1)) == "tile_k2s2"  # reversed rows
    assert sel(shape, (3, 3), (1, 1), x_strides=(720, 120, 12, -1)) == "general"    # reversed columns
    # global needs a contiguous image; a W stride of 1 with padded rows is not one
    assert sel(shape, (10, 12), x_strides=(1000, 150, 15, 1)) == "general"
    assert sel(shape, (10, 12), x_strides=nhwc) == "general"
    assert sel(shape, (10, 12), x_strides=(0, 120, 12, 1)) == "global_warp"
    # a size-1 W makes its stride irrelevant
    assert sel((2, 6, 10, 1), (10, 1), x_strides=(60, 10, 1, 7)) == "global_warp"


def test_global_conditions():
    shape = (2, 6, 10, 12)
    assert sel(shape, (10, 12)) == "global_warp"
    assert sel(shape, (10, 12), (3, 5), end=(2, 4)) == "global_warp"  # end padding cannot add taps
    assert sel(shape, (10, 12), end=(1, 0)) != "global_warp"          # two outputs along H
    assert sel(shape, (10, 12), start=(1, 0), end=(0, 0), strides=(2, 1)) != "global_warp"
    assert sel(shape, (5, 12), (10, 1), dil=(2, 1)) != "global_warp"  # dilated, not the whole image
    assert sel((2, 6, 1, 12), (1, 12), dil=(3, 1)) == "global_warp"   # dilation of a 1-tap window


def test_tile_limits():
    big_rows = (2**16, 2**15, 1, 8)  # N*C*OD*OH = 2**31 rows
    assert sel(big_rows, (1, 2), (1, 2)) == "general"
    ok_rows = (2**15, 2**15, 1, 8)
    assert sel(ok_rows, (1, 2), (1, 2)) == "tile_k2s2"


def test_selected_variant_is_applicable_and_general_always_is():
    rng = np.random.default_rng(0)
    for _ in range(500):
        nd = int(rng.integers(2, 4))
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 70))) + tuple(int(v) for v in rng.integers(1, 40, nd))
        window = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        start = tuple(int(v) for v in rng.integers(0, 3, nd))
        end = tuple(int(v) for v in rng.integers(0, 3, nd))
        dil = tuple(int(v) for v in rng.integers(1, 3, nd))
        if any(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[0] <= 0
               for i in range(nd)):
            continue
        args = problem(shape, window, strides, start, end, dil, bool(rng.integers(2)), bool(rng.integers(2)))
        v = ap.select_variant(*args)
        assert v in ap.VARIANTS
        assert ap.applicable(v, *args)
        assert ap.applicable("general", *args)


def test_unknown_variant():
    with pytest.raises(ValueError):
        ap.applicable("tile_k5s5", *ARGS_2X2)
    with pytest.raises(ValueError):
        ap.kernel_name("nope", "int8", "int8")


# ------------------------------------------------------------------ tables

def test_kernel_table_covers_every_launch():
    names = ap.KERNELS[ap.SOURCE]
    assert len(names) == len(set(names)) == len(ap.VARIANTS) * 4
    for v in ap.VARIANTS:
        for tx in ("int8", "uint8"):
            for to in ("int8", "uint8"):
                assert ap.kernel_name(v, tx, to) in names
    assert set(ap.VARIANTS) == {"general", "tile_k2s2", "tile_k3s1", "tile_k3s2", "global_warp",
                                "global_block"}


def test_import_touches_no_cupy():
    code = "import sys, dmlq.gpu.avgpool as m; m.select_variant(*%r); assert 'cupy' not in sys.modules" % (
        ARGS_2X2,)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_magic_division():
    rng = np.random.default_rng(1)
    divisors = list(range(1, 3000)) + [int(v) for v in rng.integers(1, 2**31 - 1, 3000)] + [
        2**k + e for k in range(1, 31) for e in (-1, 0, 1)] + [2**31 - 1]
    for d in divisors:
        magic, shift = ap._magic(d)
        assert 0 < magic < 2**32 and 0 <= shift <= 31
        ns = np.concatenate([np.arange(0, 300), rng.integers(0, 2**31, 300),
                             np.array([2**31 - 1, 2**31 - 2, d - 1, d, d + 1, 2 * d - 1, 2 * d]) % 2**31,
                             (2**31 - 1) // d * d + np.arange(-2, 2)]).astype(np.uint64) % np.uint64(2**31)
        hi = (ns * np.uint64(magic)) >> np.uint64(32)
        t = (hi + ns) & np.uint64(0xFFFFFFFF)  # 32-bit add in the kernel: must not wrap
        assert (hi + ns < 2**32).all()
        assert ((t >> np.uint64(shift)) == ns // np.uint64(d)).all(), d


# ------------------------------------------------------------------ NVRTC

_compiled: dict = {}


def compiled(arch):
    nvrtc = pytest.importorskip("dmlq.gpu.nvrtc")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if arch not in _compiled:
        names = ap.KERNELS[ap.SOURCE]
        res = nvrtc.compile_source(ap.SOURCE, arch, names)
        _compiled[arch] = res
    return _compiled[arch]


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)


def _bodies(ptx):
    matches = list(_ENTRY.finditer(ptx))
    return {m.group(1): ptx[m.end(): nxt.start() if nxt else len(ptx)]
            for m, nxt in zip(matches, matches[1:] + [None])}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_compiles_clean(arch):
    res = compiled(arch)
    names = ap.KERNELS[ap.SOURCE]
    assert res.log == "", res.log
    assert set(res.lowered) == set(names)
    bodies = _bodies(res.ptx)
    for name in names:
        body = bodies[res.lowered[name]]
        assert "div.rn.f32" in body and "mul.rn.f32" in body, name
        assert not re.search(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b", body), name
        assert ".local" not in body, f"{name}: a register array went to local memory"
        if not name.startswith("avgpool_general"):
            assert "dp4a" in body, name


# ------------------------------------------------------------------ the kernels on the host

_PRELUDE = r"""
#include <ucontext.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>
typedef signed char int8;
typedef unsigned char uint8;
typedef long long int64;
namespace dmlq {  // cuda/common.cuh on x86 SSE: IEEE, no FTZ, no contraction
inline float ieee_div(float a, float b) { volatile float r = a / b; return r; }
inline float ieee_mul(float a, float b) { volatile float r = a * b; return r; }
inline float to_f32(int v) { return (float)v; }
inline float to_f32(long long v) { return (float)v; }
template <typename Q> struct qlimits;
template <> struct qlimits<int8> { static constexpr int min = -128, max = 127; };
template <> struct qlimits<uint8> { static constexpr int min = 0, max = 255; };
template <typename Q> inline Q round_saturate(float t, int zp) {
  if (t != t) return static_cast<Q>(zp);
  float r = rintf(t);
  r = fminf(fmaxf(r, static_cast<float>(qlimits<Q>::min - zp)), static_cast<float>(qlimits<Q>::max - zp));
  return static_cast<Q>(static_cast<int>(r) + zp);
}
template <typename Q> inline Q requantize(float v, float s, int zp) { return round_saturate<Q>(ieee_div(v, s), zp); }
}  // namespace dmlq

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct uint4 { unsigned x, y, z, w; };
namespace emu {
struct Fiber { ucontext_t ctx; dim3 tid; int linear = 0; bool done = false; std::vector<char> stack; };
dim3 block_dim, grid_dim, block_idx;
std::vector<Fiber> fibers;
Fiber* current = nullptr;
ucontext_t sched;
std::function<void()> body;
unsigned char dyn_smem[1 << 16];
long long block_gen = 0;
int block_arrived = 0;
std::vector<long long> warp_gen, xchg;
std::vector<int> warp_arrived;
void yield() { swapcontext(&current->ctx, &sched); }
int live(int lo, int hi) { int n = 0; for (int i = lo; i < hi; ++i) n += !fibers[i].done; return n; }
void syncthreads() {
  long long my = block_gen;
  if (++block_arrived == live(0, (int)fibers.size())) { block_arrived = 0; ++block_gen; }
  while (block_gen == my) yield();
}
void syncwarp() {
  int w = current->linear / 32, n = (int)fibers.size();
  long long my = warp_gen[w];
  if (++warp_arrived[w] == live(w * 32, w * 32 + 32 < n ? w * 32 + 32 : n)) { warp_arrived[w] = 0; ++warp_gen[w]; }
  while (warp_gen[w] == my) yield();
}
void fiber_main() {
  body();
  current->done = true;
  if (block_arrived > 0 && block_arrived == live(0, (int)fibers.size())) { block_arrived = 0; ++block_gen; }
  swapcontext(&current->ctx, &sched);
}
void run(dim3 grid, dim3 block) {
  grid_dim = grid; block_dim = block;
  int n = block.x * block.y * block.z;
  fibers.assign(n, Fiber());
  for (auto& f : fibers) f.stack.resize(1 << 16);
  warp_gen.assign((n + 31) / 32, 0); warp_arrived.assign((n + 31) / 32, 0); xchg.assign(n, 0);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block_idx = {bx, by, bz};
        block_gen = 0; block_arrived = 0;
        std::fill(warp_arrived.begin(), warp_arrived.end(), 0);
        std::memset(dyn_smem, 0xCD, sizeof dyn_smem);
        for (int i = 0; i < n; ++i) {
          Fiber& f = fibers[i];
          f.done = false; f.linear = i;
          f.tid = {unsigned(i % block.x), unsigned(i / block.x % block.y), unsigned(i / (block.x * block.y))};
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.data(); f.ctx.uc_stack.ss_size = f.stack.size(); f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, fiber_main, 0);
        }
        for (bool any = true; any;) {
          any = false;
          for (auto& f : fibers)
            if (!f.done) { current = &f; swapcontext(&sched, &f.ctx); any = any || !f.done; }
        }
      }
}
}  // namespace emu
#define threadIdx (emu::current->tid)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
template <typename T> inline T __ldg(const T* p) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T)) { fprintf(stderr, "misaligned load\n"); abort(); }
  return *p;
}
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 255u) * ((b >> (8 * i)) & 255u);
  return c;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  return unsigned(((uint64_t(hi) << 32) | lo) >> (sh & 31));
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
template <typename T> inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> inline T max(T a, T b) { return a > b ? a : b; }
inline void __syncthreads() { emu::syncthreads(); }
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  if (mask != 0xffffffffu) abort();
  int me = emu::current->linear, lane = me % 32;
  emu::syncwarp();
  emu::xchg[me] = (long long)v;
  emu::syncwarp();
  T r = (T)emu::xchg[me - lane + (lane ^ o)];
  emu::syncwarp();
  return r;
}
"""

_LAUNCH = r"""
// cuLaunchKernel's view: args[i] points at parameter i; sizes[i] is what the caller packed.
template <typename... A, size_t... I>
void call(void (*k)(A...), void** args, std::index_sequence<I...>) {
  k(*reinterpret_cast<std::remove_cv_t<A>*>(args[I])...);
}
template <typename... A>
int launch(void (*k)(A...), dim3 g, dim3 b, size_t smem, void** args, const long long* sizes, int nargs) {
  const size_t want[] = {sizeof(A)...};
  if (nargs != (int)sizeof...(A)) { fprintf(stderr, "%d arguments, kernel has %d\n", nargs, (int)sizeof...(A)); return 1; }
  for (int i = 0; i < nargs; ++i)
    if ((size_t)sizes[i] != want[i]) { fprintf(stderr, "argument %d: %lld bytes, kernel wants %zu\n", i, sizes[i], want[i]); return 2; }
  if (smem > sizeof emu::dyn_smem || b.x * b.y * b.z > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535) return 3;
  emu::body = [&] { call(k, args, std::index_sequence_for<A...>{}); };
  emu::run(g, b);
  return 0;
}
"""


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    if not sys.platform.startswith("linux") or shutil.which("g++") is None:
        pytest.skip("the host emulation needs Linux and g++")
    from dmlq.gpu.loader import cuda_dir

    src = (cuda_dir() / ap.SOURCE).read_text()
    src = src.replace('#include "common.cuh"', "")
    src = src.replace("extern __shared__ unsigned char smem_lut[];", "unsigned char* smem_lut = emu::dyn_smem;")
    assert "extern __shared__" not in src
    src = re.sub(r"\b__shared__\b", "static", src)  # blocks run one at a time
    names = ap.KERNELS[ap.SOURCE]
    table = [f"int L{i}(dim3 g, dim3 b, size_t s, void** a, const long long* z, int n) "
             f"{{ return launch(&{n}, g, b, s, a, z, n); }}" for i, n in enumerate(names)]
    entries = ", ".join(f'{{"{n}", L{i}}}' for i, n in enumerate(names))
    text = "\n".join([_PRELUDE, f'#line 1 "{ap.SOURCE}"', src, _LAUNCH, *table, r"""
struct Entry { const char* name; int (*fn)(dim3, dim3, size_t, void**, const long long*, int); };
const Entry table[] = {""" + entries + r"""};
extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned long long smem, void** args, const long long* sizes, int nargs) {
  for (const Entry& e : table) if (!strcmp(e.name, name)) return e.fn({gx, gy, gz}, {bx, by, bz}, smem, args, sizes, nargs);
  return 9;
}
"""])
    tmp = tmp_path_factory.mktemp("avgpool_emu")
    (tmp / "emu.cpp").write_text(text)
    subprocess.run(["g++", "-std=c++17", "-O1", "-fPIC", "-shared", "-ffp-contract=off", "-w",
                    str(tmp / "emu.cpp"), "-o", str(tmp / "emu.so")], check=True)
    return ctypes.CDLL(str(tmp / "emu.so"))


class _Kernel:
    SMS, RESIDENT = 3, 2

    def __init__(self, lib, name, launches):
        self.lib, self.name, self.launches = lib, name, launches
        self.kernel = types.SimpleNamespace(ptr=1)

    def __call__(self, grid, block, args, shared_mem=0):
        grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
        assert all(isinstance(v, int) and v >= 1 for v in grid + block), (grid, block)
        keep, ptrs, sizes = [], [], []
        for a in args:
            if isinstance(a, np.ndarray):  # what CuPy passes for a device array: its data pointer
                buf, size = ctypes.c_uint64(a.__array_interface__["data"][0]), 8
            else:
                assert isinstance(a, np.generic), f"argument {a!r}: CuPy would guess its C type"
                raw = a.tobytes()
                buf, size = ctypes.create_string_buffer(raw, len(raw)), len(raw)
            keep.append(buf)
            ptrs.append(ctypes.addressof(buf))
            sizes.append(size)
        self.launches.append((self.name, grid, block, shared_mem))
        rc = self.lib.emu_launch(self.name.encode(), *grid, *block, ctypes.c_ulonglong(shared_mem),
                                 (ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_longlong * len(sizes))(*sizes),
                                 len(ptrs))
        assert rc == 0, f"launch of {self.name} refused ({rc})"


@pytest.fixture
def fake_gpu(emulator, monkeypatch):
    """quantized_avg_pool on NumPy arrays, kernels on the emulator; yields the launch log."""
    from dmlq.gpu import loader

    launches = []
    cp = types.ModuleType("cupy")
    cp.ascontiguousarray = np.ascontiguousarray

    def empty(shape, dtype):
        a = np.empty(shape, dtype)
        a.reshape(-1).view(np.uint8)[...] = 0x5A
        return a

    cp.empty = empty
    cp.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: 0, cudaDevAttrMultiProcessorCount=16,
                                      deviceGetAttribute=lambda attr, dev: _Kernel.SMS),
        driver=types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=lambda f, t, s: _Kernel.RESIDENT))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(loader, "function", lambda source, name: _Kernel(emulator, name, launches))
    monkeypatch.setattr(ap, "_sm_counts", {})
    monkeypatch.setattr(ap, "_occupancy", {})
    yield launches


_libc = ctypes.CDLL(None)
_maps = []


def guarded(nbytes, dtype, at_end):
    """nbytes of fresh memory that end (or start) at an inaccessible page."""
    page = mmap.PAGESIZE
    pages = -(-nbytes // page) + 2
    mm = mmap.mmap(-1, pages * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    _maps.append(mm)
    for p in (base, base + (pages - 1) * page):
        assert _libc.mprotect(ctypes.c_void_p(p), page, 0) == 0
    off = (pages - 1) * page - nbytes if at_end else page
    return np.frombuffer(mm, np.uint8, nbytes, off).view(dtype)


def make_input(rng, shape, dtype, layout, at_end, alloc=guarded):
    info = np.iinfo(dtype)
    vals = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    if layout == "bcast":  # stride-0 batch
        one = alloc(math.prod(shape[1:]), dtype, at_end).reshape((1,) + shape[1:])
        one[...] = vals[:1]
        return np.broadcast_to(one, shape)
    if layout == "wstride":
        x = alloc(2 * vals.size, dtype, at_end).reshape(shape[:-1] + (2 * shape[-1],))[..., ::2]
    elif layout == "rows":  # padded rows and a start one byte in
        sp = shape[:-1] + (shape[-1] + 3,)
        x = alloc(math.prod(sp) + 1, dtype, at_end)[1:].reshape(sp)[..., :shape[-1]]
    elif layout == "nhwc":
        perm = (0, *range(2, len(shape)), 1)
        x = alloc(vals.size, dtype, at_end).reshape(tuple(shape[i] for i in perm)).transpose(np.argsort(perm))
    elif layout == "flipped":
        x = alloc(vals.size, dtype, at_end).reshape(shape)[..., ::-1, :]
    else:
        x = alloc(vals.size, dtype, at_end).reshape(shape)
    x[...] = vals
    return x


SPECIAL_SCALES = np.array([0.0, -0.0, 1e-45, 1e-39, 1e-10, 0.0039215686, 0.5, 3.0, 1e10, 3e38, np.inf, -np.inf,
                           np.nan, -0.25], np.float32)


def run_case(rng, x_shape, window, strides, start, end, dil, include, ceil, xdt, odt, *, pc=(False,) * 4,
             omit=(False, False), layout="contig", out_strided=False, variant=None, special=False, at_end=True):
    nd = len(x_shape) - 2
    sizes = [pool_output_size(x_shape[2 + i], window[i], strides[i], start[i], end[i], dil[i]) for i in range(nd)]
    out_shape = tuple(x_shape[:2]) + tuple(s[1] if ceil else s[0] for s in sizes)
    xdt, odt = np.dtype(xdt), np.dtype(odt)
    x = make_input(rng, tuple(x_shape), xdt, layout, at_end)
    c = x_shape[1]

    def vec(per_channel, kind):
        n = c if per_channel else 1
        if kind == "scale":
            return (rng.choice(SPECIAL_SCALES, n) if special else rng.uniform(0.002, 0.2, n)).astype(np.float32)
        info = np.iinfo(kind)
        return rng.integers(info.min, info.max + 1, n).astype(kind)

    xs, os_ = vec(pc[0], "scale"), vec(pc[2], "scale")
    xzp = None if omit[0] else vec(pc[1], xdt)
    ozp = None if omit[1] else vec(pc[3], odt)
    want = np.empty(out_shape, odt)
    reference.quantized_avg_pool(np.ascontiguousarray(x), xs, xzp, os_, ozp, want, window, strides, start, end,
                                 dil, include)
    if out_strided:
        big = np.full(out_shape[:-1] + (2 * out_shape[-1] + 1,), 0xA5, np.uint8).view(odt)
        out = big[..., 1::2]
    else:
        big = out = np.full(out_shape, 0xA5, np.uint8).view(odt)
    got = ap.quantized_avg_pool(x, xs, xzp, os_, ozp, out, window, strides, start, end, dil, include,
                                variant=variant)
    assert got is out
    if not np.array_equal(out, want):
        bad = np.argwhere(out != want)[:5]
        raise AssertionError(f"{variant} {x_shape} w{window} s{strides} p{start}/{end} d{dil} inc={include} "
                             f"ceil={ceil} {xdt}->{odt} pc={pc} omit={omit} {layout}: "
                             + ", ".join(f"{tuple(b)} got {out[tuple(b)]} want {want[tuple(b)]}" for b in bad))
    if out_strided:
        assert (big[..., 0::2].view(np.uint8) == 0xA5).all(), "wrote outside the output view"


def random_problem(rng, variant):
    """Random parameters that ``variant`` (None: any) runs; returns run_case's arguments."""
    for _ in range(1000):
        nd = 3 if rng.random() < 0.3 else 2
        hi = 14 if nd == 3 else 45
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 9))) + tuple(int(v) for v in rng.integers(1, hi, nd))
        window = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        start = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        end = tuple(int(v) for v in rng.integers(0, 3, nd)) if rng.random() < 0.7 else (0,) * nd
        dil = tuple(int(v) for v in rng.integers(1, 3, nd)) if rng.random() < 0.3 else (1,) * nd
        layout = str(rng.choice(["contig", "contig", "wstride", "rows", "nhwc", "flipped", "bcast"]))
        if variant in ap.TILE_CONFIGS:
            kw, sw, _ = ap.TILE_CONFIGS[variant]
            window, strides, dil = window[:-1] + (kw,), strides[:-1] + (sw,), dil[:-1] + (1,)
            layout = str(rng.choice(["contig", "rows", "flipped", "bcast"]))
        elif variant in ap.GLOBAL_GROUPS or (variant is None and rng.random() < 0.1):
            window, dil, start = shape[2:], (1,) * nd, (0,) * nd
            strides = tuple(max(w, e + 1) for w, e in zip(window, end))
            layout = str(rng.choice(["contig", "bcast"]))
            if variant in ap.GLOBAL_GROUPS:
                shape = shape[:2] + tuple(int(v) for v in rng.integers(1, 70 if nd == 2 else 20, nd))
                window = shape[2:]
                strides = tuple(max(w, e + 1) for w, e in zip(window, end))
        ceil = bool(rng.random() < 0.5) and variant not in ap.GLOBAL_GROUPS
        if any(pool_output_size(shape[2 + i], window[i], strides[i], start[i], end[i], dil[i])[0] <= 0
               for i in range(nd)):
            continue
        include = bool(rng.random() < 0.5)
        xs_probe = make_strides(shape, layout)
        args = problem(shape, window, strides, start, end, dil, include, ceil, xs_probe)
        if variant is not None and not ap.applicable(variant, *args):
            continue
        return dict(x_shape=shape, window=window, strides=strides, start=start, end=end, dil=dil, include=include,
                    ceil=ceil, xdt=str(rng.choice(["int8", "uint8"])), odt=str(rng.choice(["int8", "uint8"])),
                    pc=tuple(bool(v) for v in rng.random(4) < 0.5) if rng.random() < 0.5 else (False,) * 4,
                    omit=tuple(bool(v) for v in rng.random(2) < 0.25), layout=layout,
                    out_strided=bool(rng.random() < 0.3), variant=variant, at_end=bool(rng.random() < 0.5))
    raise AssertionError(f"no problem found for {variant}")


def make_strides(shape, layout):
    """The element strides make_input's layout gives (for selection)."""
    probe = make_input(np.random.default_rng(0), shape, np.dtype(np.uint8), layout, True,
                       alloc=lambda n, dtype, at_end: np.empty(n, dtype))
    return tuple(probe.strides)


@pytest.mark.parametrize("variant", [None, *ap.VARIANTS])
def test_emulated_random(fake_gpu, variant):
    rng = np.random.default_rng([None, *ap.VARIANTS].index(variant))
    for _ in range(40):
        p = random_problem(rng, variant)
        run_case(rng, **p)
        if variant is not None:
            assert fake_gpu[-1][0] == ap.kernel_name(variant, p["xdt"], p["odt"])


@pytest.mark.parametrize("variant", ["general", "tile_k2s2", "tile_k3s1", "tile_k3s2"])
def test_emulated_edges(fake_gpu, variant):
    rng = np.random.default_rng(7)
    kw, sw = ap.TILE_CONFIGS.get(variant, (2, 2, 0))[:2]
    for xdt in ("int8", "uint8"):
        for odt in ("int8", "uint8"):
            for include in (False, True):
                common = dict(xdt=xdt, odt=odt, include=include, variant=variant)
                # windows entirely inside the padding (start and end), with end padding
                run_case(rng, (2, 3, 2, 2), (3, kw), (1, sw), (3, 3), (3, 3), (1, 1), ceil=True, **common)
                run_case(rng, (1, 2, 1, 1), (2, kw), (1, sw), (2, kw), (2, kw), (1, 1), ceil=False, **common)
                # dilation (H) with padding, ceil mode
                run_case(rng, (2, 5, 11, 13), (3, kw), (2, sw), (2, 1), (2, 2), (3, 1), ceil=True, **common)
                # window = whole image
                run_case(rng, (2, 4, 6, kw), (6, kw), (1, sw), (0, 0), (0, 0), (1, 1), ceil=False, **common)
                # per-channel everything, omitted zero points, extreme scales
                run_case(rng, (3, 7, 9, 17), (2, kw), (1, sw), (1, 1), (0, 1), (1, 1), ceil=True,
                         pc=(True,) * 4, **common)
                run_case(rng, (1, 3, 5, 31), (3, kw), (2, sw), (1, 0), (1, 2), (1, 1), ceil=False,
                         omit=(True, True), **common)
                run_case(rng, (2, 5, 6, 29), (2, kw), (1, sw), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         pc=(True, False, True, False), **common)
                run_case(rng, (2, 1, 6, 29), (2, kw), (1, sw), (1, 1), (1, 1), (1, 1), ceil=True, special=True,
                         **common)
                # 3-D
                run_case(rng, (2, 3, 5, 6, 21), (2, 3, kw), (1, 2, sw), (1, 1, 1), (0, 1, 1), (2, 1, 1),
                         ceil=True, **common)


@pytest.mark.parametrize("variant", ["global_warp", "global_block", "general"])
def test_emulated_global(fake_gpu, variant):
    rng = np.random.default_rng(11)
    for shape in ((1, 1, 1, 1), (2, 3, 1, 15), (2, 5, 4, 4), (1, 3, 17, 33), (3, 7, 41, 43), (2, 3, 2, 9, 37),
                  (1, 2, 64, 64)):
        nd = len(shape) - 2
        for xdt, odt in (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")):
            for layout in ("contig", "bcast", "rows") if variant == "general" else ("contig", "bcast"):
                run_case(rng, shape, shape[2:], shape[2:], (0,) * nd, (0,) * nd, (1,) * nd, bool(rng.integers(2)),
                         False, xdt, odt, pc=(True, True, False, True), layout=layout, variant=variant,
                         at_end=bool(rng.integers(2)), omit=(bool(rng.integers(2)), False))


def test_emulated_lut_and_grid(fake_gpu):
    """Per-tensor tile launches carry the table and one wave of persistent blocks."""
    rng = np.random.default_rng(3)
    run_case(rng, (2, 3, 20, 40), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False, False, "uint8", "int8")
    name, grid, block, smem = fake_gpu[-1]
    assert name == "avgpool_tile<uint8, int8, 3, 1, 16>" and smem == 9 * 255 + 1
    assert grid[0] * grid[1] <= _Kernel.SMS * _Kernel.RESIDENT and block[0] * block[1] <= 256
    run_case(rng, (2, 3, 20, 40), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False, False, "uint8", "int8",
             pc=(True, False, False, False))
    assert fake_gpu[-1][3] == 0
    run_case(rng, (2, 3, 40, 40), (33, 2), (1, 2), (1, 1), (1, 1), (1, 1), False, False, "int8", "int8",
             variant="tile_k2s2")  # 66 taps: past the table size
    assert fake_gpu[-1][3] == 0


def test_emulated_size_zero(fake_gpu):
    x = np.zeros((0, 3, 4, 4), np.int8)
    out = np.zeros((0, 3, 2, 2), np.int8)
    one = np.ones(1, np.float32)
    assert ap.quantized_avg_pool(x, one, None, one, None, out, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1),
                                 False) is out
    assert fake_gpu == []
