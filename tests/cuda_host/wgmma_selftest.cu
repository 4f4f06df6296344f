// Probes of the host harness's wgmma emulation (tests/test_host_wgmma.py): one
// wgmma.mma_async.m64nNk32.s32 of each tested shape and signedness, both operands in shared
// memory through matrix descriptors, checked against NumPy; and the same kernel breaking a
// wgmma rule on request (`mode`).
#include "common.cuh"

// The accumulators d[0 .. N/2 - 1] as "+r" operands, and their names in the PTX text.
#define WGD4(i) DMLQ_INOUT("r", d[i]), DMLQ_INOUT("r", d[i + 1]), DMLQ_INOUT("r", d[i + 2]), DMLQ_INOUT("r", d[i + 3])
#define WGD16(i) WGD4(i), WGD4(i + 4), WGD4(i + 8), WGD4(i + 12)
#define WGD64(i) WGD16(i), WGD16(i + 16), WGD16(i + 32), WGD16(i + 48)
#define WGMMA_OUTS_8 WGD4(0)
#define WGMMA_OUTS_64 WGD16(0), WGD16(16)
#define WGMMA_OUTS_128 WGD64(0)
#define WGMMA_OUTS_256 WGD64(0), WGD64(64)
#define WGMMA_REGS_8 \
  "%0, %1, %2, %3"
#define WGMMA_TAIL_8 "}, %4, %5, %6;"
#define WGMMA_REGS_64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_TAIL_64 "}, %32, %33, %34;"
#define WGMMA_REGS_128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_TAIL_128 "}, %64, %65, %66;"
#define WGMMA_REGS_256 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WGMMA_TAIL_256 "}, %128, %129, %130;"

// One wgmma.mma_async of shape m64nNk32, types TA x TB, scale-d S (0: D = A*B, 1: D = A*B + D).
#define WGMMA_ASYNC(N, TA, TB)                                                                 \
  DMLQ_PTX_MEM("wgmma.mma_async.sync.aligned.m64n" #N "k32.s32." TA "." TB " {" WGMMA_REGS_##N \
               WGMMA_TAIL_##N,                                                                 \
               (WGMMA_OUTS_##N), (DMLQ_IN("l", da), DMLQ_IN("l", db), DMLQ_IN("n", S)))
#define WGMMA_DEFINE(N)                                                                        \
  template <bool SA, bool SB, int S>                                                           \
  __device__ void wgmma_m64n##N(int* d, unsigned long long da, unsigned long long db) {        \
    if (SA && SB) WGMMA_ASYNC(N, "s8", "s8");                                                  \
    else if (SA) WGMMA_ASYNC(N, "s8", "u8");                                                   \
    else if (SB) WGMMA_ASYNC(N, "u8", "s8");                                                   \
    else WGMMA_ASYNC(N, "u8", "u8");                                                           \
  }
WGMMA_DEFINE(8)
WGMMA_DEFINE(64)
WGMMA_DEFINE(128)
WGMMA_DEFINE(256)

template <int N, bool SA, bool SB, int S>
__device__ void wgmma_issue(int* d, unsigned long long da, unsigned long long db) {
  if constexpr (N == 8) wgmma_m64n8<SA, SB, S>(d, da, db);
  else if constexpr (N == 64) wgmma_m64n64<SA, SB, S>(d, da, db);
  else if constexpr (N == 128) wgmma_m64n128<SA, SB, S>(d, da, db);
  else wgmma_m64n256<SA, SB, S>(d, da, db);
}

__device__ __forceinline__ void wgmma_fence() { DMLQ_PTX_MEM("wgmma.fence.sync.aligned;", (), ()); }
__device__ __forceinline__ void wgmma_commit() { DMLQ_PTX_MEM("wgmma.commit_group.sync.aligned;", (), ()); }
__device__ __forceinline__ void wgmma_wait0() { DMLQ_PTX_MEM("wgmma.wait_group.sync.aligned 0;", (), ()); }

constexpr int kWgmmaTile = 48 * 1024;  // the operands' shared-memory image, at most

// `image` (image_bytes, a multiple of 16) is copied into shared memory (static when STATIC,
// else dynamic); desc_a / desc_b hold start addresses relative to its first byte. Each of the
// 128 threads per block loads its N/2 accumulators from c, runs D = A*B (into d0) and then
// D = A*B + C (into d1), thread t's register i at [t * N/2 + i].
// mode: 0 as described; 1 thread 77 passes another A descriptor; 2 warp 3 skips the wgmma
// (a partial warpgroup); 3 thread 0 writes shared byte `poke` after the first wgmma is
// committed, before wait_group; 4 the block exits without waiting for the first wgmma;
// 5 thread 0 writes byte `poke` after the wait_group (allowed); 6 a second wgmma in a second
// group, then wait_group 1 and thread 0 writes byte `poke` (the second group still reads it);
// 7 thread 0 issues a cp.async into the 16 bytes at `poke` before wait_group.
template <int N, bool SA, bool SB, bool STATIC>
__global__ void wgmma_probe(const uint4* image, int image_bytes, unsigned long long desc_a,
                            unsigned long long desc_b, const int* c, int* d0, int* d1, int mode,
                            int poke) {
  DMLQ_SHARED(1024, uint4, tile_static, [STATIC ? kWgmmaTile / 16 : 1]);
  DMLQ_DYNAMIC_SHARED(1024, uint4, tile_dynamic);
  uint4* const tile = STATIC ? tile_static : tile_dynamic;
  const int t = threadIdx.x;
  for (int i = t; i < image_bytes / 16; i += blockDim.x) tile[i] = image[i];
  __syncthreads();
  DMLQ_PTX_MEM("fence.proxy.async.shared::cta;", (), ());
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  const unsigned long long start = (base & 0x3FFFFu) >> 4;  // the descriptors' start field
  const unsigned long long da = desc_a + start + (mode == 1 && t == 77 ? 2 : 0), db = desc_b + start;
  if (mode == 2 && t >= 96) return;
  int d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = c[t * (N / 2) + i];
  wgmma_fence();
  wgmma_issue<N, SA, SB, 0>(d, da, db);
  wgmma_commit();
  unsigned char* const bytes = reinterpret_cast<unsigned char*>(tile);
  if (mode == 3 && t == 0) bytes[poke] ^= 1;
  if (mode == 7 && t == 0) {  // a cp.async into the operand's 16 bytes at `poke`, before wait_group
    DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16;", (),
                 (DMLQ_IN("r", base + (poke & ~15)), DMLQ_IN("l", __cvta_generic_to_global(image))));
    DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
    DMLQ_PTX_MEM("cp.async.wait_group 0;", (), ());
  }
  if (mode == 6) {  // a second group; wait_group 1 retires only the first
    wgmma_issue<N, SA, SB, 0>(d, da, db);
    wgmma_commit();
    DMLQ_PTX_MEM("wgmma.wait_group.sync.aligned 1;", (), ());
    if (t == 0) bytes[poke] ^= 1;
  }
  if (mode == 4) return;
  wgmma_wait0();
  if (mode == 5 && t == 0) bytes[poke] ^= 1;
  for (int i = 0; i < N / 2; ++i) {
    d0[t * (N / 2) + i] = d[i];
    d[i] = c[t * (N / 2) + i];
  }
  if (mode == 5) {
    __syncthreads();
    if (t == 0) bytes[poke] ^= 1;  // restored for the second wgmma
    __syncthreads();
    DMLQ_PTX_MEM("fence.proxy.async;", (), ());
  }
  wgmma_fence();
  wgmma_issue<N, SA, SB, 1>(d, da, db);
  wgmma_commit();
  wgmma_wait0();
  for (int i = 0; i < N / 2; ++i) d1[t * (N / 2) + i] = d[i];
}

// D = A*B + C under .satfinite (m64n8k32, s8 x s8, scale-d written as the immediate 1):
// thread t's 4 accumulators from c[4t ..], back to d[4t ..]. Operands as wgmma_probe's.
__global__ void wgmma_satfinite_probe(const uint4* image, int image_bytes, unsigned long long desc_a,
                                      unsigned long long desc_b, const int* c, int* out) {
  DMLQ_DYNAMIC_SHARED(1024, uint4, tile);
  const int t = threadIdx.x;
  for (int i = t; i < image_bytes / 16; i += blockDim.x) tile[i] = image[i];
  __syncthreads();
  DMLQ_PTX_MEM("fence.proxy.async;", (), ());
  const unsigned long long start = (static_cast<unsigned>(__cvta_generic_to_shared(tile)) & 0x3FFFFu) >> 4;
  const unsigned long long da = desc_a + start, db = desc_b + start;
  int d[4] = {c[4 * t], c[4 * t + 1], c[4 * t + 2], c[4 * t + 3]};
  wgmma_fence();
  DMLQ_PTX_MEM("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite {%0, %1, %2, %3}, %4, %5, 1;",
               (WGMMA_OUTS_8), (DMLQ_IN("l", da), DMLQ_IN("l", db)));
  wgmma_commit();
  wgmma_wait0();
  for (int i = 0; i < 4; ++i) out[4 * t + i] = d[i];
}
