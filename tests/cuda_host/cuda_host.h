// CUDA on the host: enough of the CUDA C++ device environment that dmlq's
// kernel sources (cuda/*.cu, cuda/common.cuh) compile unchanged with g++ and
// run on the CPU. Force-included (g++ -include cuda_host.h) before the source.
//
// Execution model
// - A block runs as one fiber per CUDA thread on a private stack; blocks run
//   one after another. A fiber runs until it reaches __syncthreads(), a warp
//   collective (shuffle, __syncwarp, ldmatrix, mma) or its end. Four schedules
//   take turns per launch: thread-major (each thread to its next stop, warps in
//   lock step) or warp-major (one warp runs to a block barrier before the next
//   starts), each in ascending or descending order; so a missing barrier shows
//   up as a read of data not yet written, or overwritten by a warp that ran ahead.
// - __syncthreads() releases only when every thread of the block waits at the
//   same call site; a thread that has exited, or one waiting at another site,
//   is reported as a divergent barrier (a deadlock on a GPU).
// - Warp collectives rendezvous the 32 lanes; the last lane to arrive computes
//   the result for all of them from their deposited operands. wgmma instructions
//   rendezvous a warpgroup (the 128 threads of 4 warps, the first a multiple of 4)
//   the same way.
// - Shared memory (DMLQ_SHARED arrays, registered when a block first reaches
//   their declaration, and the dynamic buffer) is filled with a poison byte at the start of every
//   block; the driver changes the byte between launches.
// - Inline PTX (cuda/ptx.cuh's DMLQ_PTX) goes to an interpreter of the PTX
//   text (cuda_host_ptx.h). cp.async copies are queued and land in shared
//   memory only when a cp.async.wait_group lets them.
// - Faults (misaligned or out-of-range shared access, __trap, divergent
//   barriers or collectives, unsupported PTX) stop the launch with a message.
//   Global-memory overruns are caught by AddressSanitizer (every buffer the
//   launcher passes is its own exact-size allocation); misaligned vector
//   loads by UBSan's alignment check (uint4 and friends carry their CUDA
//   alignment).
//
// What it cannot see: timing, memory ordering between blocks or against other
// kernels, and anything the real hardware gets wrong.
#pragma once

#define DMLQ_HOST_HARNESS 1

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(CUDA_HOST_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#ifndef CUDA_HOST_ASAN
#define CUDA_HOST_ASAN 1
#endif
#endif

// ------------------------------------------------------------------ types

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3() = default;
  constexpr dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

#define CUDA_HOST_VEC4(name, T, align)                         \
  struct alignas(align) name {                                 \
    T x, y, z, w;                                              \
  };                                                           \
  inline name make_##name(T x, T y, T z, T w) { return {x, y, z, w}; }
#define CUDA_HOST_VEC2(name, T, align)                         \
  struct alignas(align) name {                                 \
    T x, y;                                                    \
  };                                                           \
  inline name make_##name(T x, T y) { return {x, y}; }
CUDA_HOST_VEC4(uint4, unsigned, 16)
CUDA_HOST_VEC4(int4, int, 16)
CUDA_HOST_VEC4(float4, float, 16)
CUDA_HOST_VEC2(uint2, unsigned, 8)
CUDA_HOST_VEC2(int2, int, 8)
CUDA_HOST_VEC2(float2, float, 8)
CUDA_HOST_VEC4(char4, signed char, 4)
CUDA_HOST_VEC4(uchar4, unsigned char, 4)
#undef CUDA_HOST_VEC4
#undef CUDA_HOST_VEC2

// ------------------------------------------------------------------ the simulated machine

namespace cuda_host {

[[noreturn]] void fault(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

enum class State { run, barrier, warp, done };

struct LaneCall;  // a lane's part of a warp collective (see cuda_host_ptx.h)

struct Thread {
  void* sp = nullptr;          // saved stack pointer while switched out
  char* stack = nullptr;
  size_t stack_size = 0;
  State state = State::run;
  const char* site_file = nullptr;  // barrier / collective call site
  int site_line = 0;
  dim3 idx;
  LaneCall* call = nullptr;    // pending warp collective
  void* async = nullptr;       // cp.async queues (cuda_host_ptx.h)
};

struct Machine {
  dim3 grid, block, block_idx;
  unsigned nthreads = 0;
  unsigned dynamic_smem = 0;
  unsigned char* dyn = nullptr;  // dynamic shared memory
  size_t dyn_capacity = 0;
  unsigned char poison = 0xA5;
  unsigned order = 0;  // bit 0: reverse thread/warp order; bit 1: warp-major
  std::vector<Thread> threads;
  int current = -1;
  void* sched_sp = nullptr;
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  long block_serial = 0;  // changes with every block: shared arrays re-poison
  std::string error;  // first fault of the launch
  bool failed = false;
  // ldmatrix phases (8 rows of 16 bytes each) of the launch, and the extra shared-memory
  // wavefronts their bank conflicts cost (0 for a conflict-free layout): reported per launch.
  unsigned long long ldsm_phases = 0, ldsm_extra = 0;
};

Machine& machine();
inline Thread& self() { return machine().threads[machine().current]; }

// Suspend the current thread in `s` (at a call site) and run others.
void yield(State s, const char* file, int line);

// Shared memory: addresses that kernels compute with __cvta_generic_to_shared
// are offsets in a window where the dynamic buffer starts at kDynBase and each
// static array (registered by DMLQ_SHARED) at kStaticBase + kStaticSkew + its slot
// (aligned as the array is, up to 1024 bytes). The skew keeps static addresses apart
// from dynamic ones in the 18 address bits a wgmma matrix descriptor holds, as long as
// the dynamic buffer is under 192 KiB.
constexpr unsigned kDynBase = 0x00000000u;
constexpr unsigned kStaticBase = 0x40000000u;
constexpr unsigned kStaticSkew = 0x00030000u;
void shared_array(void* p, size_t bytes);
unsigned to_shared(const void* p);
unsigned char* from_shared(unsigned addr, unsigned bytes, const char* what);

void syncthreads(const char* file, int line);
void syncwarp(unsigned mask, const char* file, int line);
unsigned long long shfl(unsigned mask, unsigned long long v, int kind, int arg, int width,
                        const char* file, int line);
unsigned vote(unsigned mask, int pred, int kind, const char* file, int line);
[[noreturn]] void trap(const char* file, int line);

}  // namespace cuda_host

// ------------------------------------------------------------------ CUDA C++ spellings

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Shared arrays are declared through cuda/ptx.cuh's DMLQ_SHARED, which the
// harness turns into a static array registered (and poisoned) per block.
#define __shared__ static_assert(false, "declare shared memory with DMLQ_SHARED (cuda/ptx.cuh)");
#define DMLQ_SHARED(align, type, name, dims)                \
  static type name dims __attribute__((aligned(align)));   \
  ::cuda_host::shared_array(name, sizeof(name))
#define __constant__ static
#define DMLQ_DYNAMIC_SHARED(align, type, name) \
  type* const name = reinterpret_cast<type*>(::cuda_host::machine().dyn)

#define threadIdx (::cuda_host::self().idx)
#define blockIdx (::cuda_host::machine().block_idx)
#define blockDim (::cuda_host::machine().block)
#define gridDim (::cuda_host::machine().grid)
#define warpSize 32

#define __syncthreads() ::cuda_host::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::cuda_host::syncwarp(cuda_host_mask_or_all(__VA_ARGS__), __FILE__, __LINE__)
#define __trap() ::cuda_host::trap(__FILE__, __LINE__)
#define __shfl_sync(m, v, ...) ::cuda_host::shfl_t((m), (v), 0, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(m, v, ...) ::cuda_host::shfl_t((m), (v), 1, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(m, v, ...) ::cuda_host::shfl_t((m), (v), 2, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(m, v, ...) ::cuda_host::shfl_t((m), (v), 3, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(m, p) ::cuda_host::vote((m), (p), 0, __FILE__, __LINE__)
#define __any_sync(m, p) (::cuda_host::vote((m), (p), 1, __FILE__, __LINE__) != 0)
#define __all_sync(m, p) (::cuda_host::vote((m), (p), 2, __FILE__, __LINE__) != 0)

inline unsigned cuda_host_mask_or_all() { return 0xffffffffu; }
inline unsigned cuda_host_mask_or_all(unsigned m) { return m; }

namespace cuda_host {
template <typename T>
T shfl_t(unsigned mask, T v, int kind, const char* file, int line, int arg, int width = 32) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 64 bits");
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = shfl(mask, bits, kind, arg, width, file, line);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
}  // namespace cuda_host

// Address spaces.
inline size_t __cvta_generic_to_shared(const void* p) { return cuda_host::to_shared(p); }
inline size_t __cvta_generic_to_global(const void* p) { return reinterpret_cast<size_t>(p); }

// Read-only loads.
template <typename T>
inline T __ldg(const T* p) { return *p; }

// Integer intrinsics.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<signed char>(a >> (8 * i))) *
         static_cast<int>(static_cast<signed char>(b >> (8 * i)));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 255u) * ((b >> (8 * i)) & 255u);
  return c;
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7u))) & 255u) << (8 * i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32) | lo) >> (s & 31u));
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s & 31u)) >> 32);
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32) | lo) >> (s < 32u ? s : 32u));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s < 32u ? s : 32u)) >> 32);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v ? __builtin_clz(static_cast<unsigned>(v)) : 32; }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// Bit casts and conversions (x86-64 SSE arithmetic is IEEE round-to-nearest-even).
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int2float_rn(int v) { return static_cast<float>(v); }
inline float __uint2float_rn(unsigned v) { return static_cast<float>(v); }
inline float __ll2float_rn(long long v) { return static_cast<float>(v); }
inline float __ull2float_rn(unsigned long long v) { return static_cast<float>(v); }
inline int __float2int_rn(float f) { return static_cast<int>(std::nearbyint(f)); }

// CUDA's overloaded min/max for the integer and float types.
#define CUDA_HOST_MINMAX(T)                            \
  inline T min(T a, T b) { return b < a ? b : a; }     \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDA_HOST_MINMAX(int)
CUDA_HOST_MINMAX(unsigned)
CUDA_HOST_MINMAX(long)
CUDA_HOST_MINMAX(unsigned long)
CUDA_HOST_MINMAX(long long)
CUDA_HOST_MINMAX(unsigned long long)
#undef CUDA_HOST_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

#include "cuda_host_ptx.h"
