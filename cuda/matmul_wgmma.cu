// Quantized int8 matmul on Hopper's warpgroup tensor cores: wgmma.mma_async
// m64n128k32 (sm_90a only: the launcher compiles this file with -arch=sm_90a and
// only for compute capability 9.0).
//
// Variants (one template): matmul_wgmma<TA, TB, TO, 128, 128, BK, STAGES>, 256
// threads (two warpgroups, each 64 rows x 128 columns of the block tile):
//   wgmma-128x128       BK 64, 4-stage cp.async pipeline, 64 KiB dynamic shared
//                       memory: 2 wgmma a warpgroup per k tile.
//   wgmma-128x128-k128  BK 128, 3 stages, 96 KiB: 4 wgmma a warpgroup per k tile
//                       for the same waits, barrier and loop (the issue cost per
//                       wgmma about halved; the next version to time, below).
//   Both keep 2 blocks an SM; the first copies two tiles ahead, the second one
//   (the same time ahead: its tiles take twice as long).
// Written without a GPU (2026-11-28): selection picks neither until a GPU run has
// checked and timed them (dmlq/gpu/matmul_configs.py, WGMMA_CONFIGS); the
// benchmarks force them.
//
// Why: mma.sync is not Hopper's full-rate path. The mma kernel (matmul_mma.cu)
// measured 0.34-0.35 of the int8 dense peak at 8192^3 on an H200, torch._int_mm
// 0.42; the issue's target is 0.50. wgmma issues a 64xNx32 product for a whole
// warpgroup from shared memory, at the tensor cores' full rate.
//
// Napkin math (H100 SXM, 1979 dense int8 TOPS = 132 SMs * 8192 ops/clk * 1.83 GHz):
//   ops = 2*M*N*K: 8192^3 is 1.10e12 ops, 556 us at the peak, 1,111 us at 0.50.
//   One m64n128k32 is 524,288 ops: one every 64 clocks per SM at the peak.
//   Shared-memory reads: A 2 KiB + B 4 KiB per m64n128k32, 96 B/clk at the peak
//   against 128 B/clk per SM. L2 -> SM: M*N*K*(1/BM + 1/BN) bytes, 8.6 GB at
//   8192^3: 7.7 TB/s at 0.50 of the peak (the grouped block order of the mma
//   kernel keeps DRAM near M*K + K*N + M*N).
//   Costs outside the main loop: a b that is not already N rows of K contiguous
//   bytes 16 bytes apart (8-bit wgmma reads both operands K-major) is staged
//   transposed, K padded to 16, 2*K*N bytes, 40 us at 8192^2 at 3.35 TB/s; the
//   transposed view of an (N, K) weight (x @ w.T) is read as it is; the epilogue runs in the kernel (per output: the
//   zero-point terms and the output type's step, about 40 instructions a warp
//   for 32 outputs), its stores two adjacent outputs a lane, rows apart across
//   the warp (L2 merges the sectors). About 0.65 of the peak with a 0.70 main loop.
//   Issue (static, sm_90a, 2 blocks = 16 warps an SM): the 64-byte tile costs a warp
//   about 100 instructions on the fast path for its warpgroup's 2 wgmma (128 clocks
//   of tensor-core work an SM): 16 * 100 / 4 schedulers = 400 issue clocks per 512
//   tensor clocks, 0.78. The 128-byte tile: about 118 for 4 wgmma, 0.46.
//
// Data path:
//   A tiles (BM rows x BK bytes of a, K contiguous) and B tiles (BN rows x BK
//   bytes of b transposed) are copied by 16-byte cp.async into the canonical
//   no-swizzle K-major layout of the PTX ISA's wgmma shared-memory matrices: core
//   matrices of 8 rows x 16 bytes (128 contiguous bytes, row r at 16 * r), the
//   BK / 16 core matrices of a row group's BK bytes of K 128 bytes apart (the
//   leading byte offset, LBO) and row groups 8 * BK bytes apart (the stride byte
//   offset, SBO). A warp's 32 copies of one 64-byte half fill 512 contiguous
//   bytes of one row group: no bank conflicts. Per k tile each warpgroup issues
//   BK / 32 wgmma (k 0-31, 32-63, ...: the descriptors' start address 256 bytes
//   on each), A and B both from shared memory.
//   Edges: rows past M (or N) are not copied (they feed only outputs that are
//   not stored); k past K is zero-filled (cp.async src-size), which adds 0.
//   Ordering: each thread's cp.async copies are waited for, then
//   fence.proxy.async makes them visible to the tensor cores' (async) proxy,
//   then the block barrier. wgmma.wait_group 1 before the barrier of tile kt
//   retires the group of tile kt - 2, whose stage the copies of tile
//   kt + STAGES - 2 then overwrite (4 stages: kt - 1 and kt in the tensor cores,
//   kt + 1 staged, kt + 2 copied; 3 stages: kt + 1 copied).
//   Output: thread (warp w of its warpgroup, lane 4g + t) holds, in register i
//   (j = i / 4, r = i % 4), the sum of row 16w + g + 8(r / 2), column
//   8j + 2t + r % 2 of its warpgroup's 64 x 128 tile; unsplit, each output is
//   finished in the kernel; split, the raw int32 sums go to partial[split][z][M][N]
//   and matmul_splitk_epilogue finishes them.

#include "matmul_mma.cu"

namespace dmlq_wgmma {

// Byte offset of (row, 16-byte chunk kc) in a tile of BK-byte rows (see above): a
// row group of 8 rows is BK / 16 core matrices, 128 bytes apart (LBO), and row
// groups are 8 * BK bytes apart (SBO).
template <int BK>
__device__ __forceinline__ int tile_off(int row, int kc) { return (row >> 3) * (8 * BK) + kc * 128 + (row & 7) * 16; }
constexpr unsigned kLBO = 128;

// The shared-memory matrix descriptor of a K-major operand at shared address
// `addr` in tiles of BK-byte rows: start address, LBO and SBO in 16-byte units
// (bits 0-13, 16-29, 32-45), base offset 0, no swizzle (bits 62-63 zero).
template <int BK>
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
  constexpr unsigned long long sbo = 8 * BK;
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(kLBO >> 4) << 16) | ((sbo >> 4) << 32);
}

__device__ __forceinline__ void wg_fence() { DMLQ_PTX_MEM("wgmma.fence.sync.aligned;", (), ()); }
__device__ __forceinline__ void wg_commit() { DMLQ_PTX_MEM("wgmma.commit_group.sync.aligned;", (), ()); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  DMLQ_PTX_MEM("wgmma.wait_group.sync.aligned %0;", (), (DMLQ_IN("n", N)));
}
__device__ __forceinline__ void fence_proxy_async() { DMLQ_PTX_MEM("fence.proxy.async.shared::cta;", (), ()); }

#define DMLQ_WG_D4(i) DMLQ_INOUT("r", d[i]), DMLQ_INOUT("r", d[i + 1]), DMLQ_INOUT("r", d[i + 2]), DMLQ_INOUT("r", d[i + 3])
#define DMLQ_WG_D16(i) DMLQ_WG_D4(i), DMLQ_WG_D4(i + 4), DMLQ_WG_D4(i + 8), DMLQ_WG_D4(i + 12)
#define DMLQ_WGMMA_N128(ta, tb)                                                                  \
  DMLQ_PTX_MEM("wgmma.mma_async.sync.aligned.m64n128k32.s32." ta "." tb " {"                    \
               "%0, %1, %2, %3, %4, %5, %6, %7, "                                               \
               "%8, %9, %10, %11, %12, %13, %14, %15, "                                         \
               "%16, %17, %18, %19, %20, %21, %22, %23, "                                       \
               "%24, %25, %26, %27, %28, %29, %30, %31, "                                       \
               "%32, %33, %34, %35, %36, %37, %38, %39, "                                       \
               "%40, %41, %42, %43, %44, %45, %46, %47, "                                       \
               "%48, %49, %50, %51, %52, %53, %54, %55, "                                       \
               "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1;",                          \
               (DMLQ_WG_D16(0), DMLQ_WG_D16(16), DMLQ_WG_D16(32), DMLQ_WG_D16(48)),             \
               (DMLQ_IN("l", da), DMLQ_IN("l", db)))

// d (64 x 128 int32, the warpgroup's fragment) += A (64 x 32, K-major at da) *
// B (32 x 128, held K-major at db); signedness from TA/TB.
template <typename TA, typename TB>
__device__ __forceinline__ void wgmma_n128(int (&d)[64], unsigned long long da, unsigned long long db) {
  constexpr bool sa = static_cast<TA>(-1) < static_cast<TA>(0);
  constexpr bool sb = static_cast<TB>(-1) < static_cast<TB>(0);
  if constexpr (sa && sb) DMLQ_WGMMA_N128("s8", "s8");
  else if constexpr (sa) DMLQ_WGMMA_N128("s8", "u8");
  else if constexpr (sb) DMLQ_WGMMA_N128("u8", "s8");
  else DMLQ_WGMMA_N128("u8", "u8");
}
#undef DMLQ_WGMMA_N128
#undef DMLQ_WG_D16
#undef DMLQ_WG_D4

}  // namespace dmlq_wgmma

// Launch: block 256 threads; grid as matmul_mma's (ceil(N/BN), ceil(M/BM) *
// splits, batch0 * batch1); dynamic shared memory STAGES * (BM + BN) * BK bytes.
// The arguments are matmul_mma's, with B the transposed b: N rows of K bytes,
// ldb bytes apart (a multiple of 16), b_bs0/b_bs1 its matrices' strides; with
// splits > 1 the outputs go through matmul_splitk_epilogue (partial), else C. A wrong block size,
// too little dynamic shared memory or an operand not on 16 bytes traps.
template <typename TA, typename TB, typename TO, int BM, int BN, int BK, int STAGES>
__global__ void __launch_bounds__(256, 2)
matmul_wgmma(const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C,
             int M, int N, int K, int batch1,
             int64 a_bs0, int64 a_bs1, int64 b_bs0, int64 b_bs1, int64 c_bs0, int64 c_bs1,
             int64 lda, int64 ldb, int64 ldc,
             const float* a_scale, const float* b_scale, const float* out_scale,
             const TA* a_zp, const TB* b_zp, const TO* out_zp,
             int a_per_row, int b_per_col, int out_per_row,
             const int* row_sum_a, const int* col_sum_b,
             const float* bias, int64 bias_bs, int64 bias_ld, int64 bp_bs, int k_group,
             int splits, int k_chunk, int* __restrict__ partial) {
  using namespace dmlq_wgmma;
  static_assert(BM == 128 && BN == 128 && (BK == 64 || BK == 128), "two warpgroups of 64 x 128, 64- or 128-byte k tiles");
  static_assert(STAGES >= 3, "tile kt + STAGES - 2 is copied into the stage of tile kt - 2, which wait_group 1 retires");
  constexpr int NT = 256;
  constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;
  constexpr int HALVES = BK / 64;  // 64-byte halves of a tile row: a thread copies 2 rows x HALVES chunks an operand

  DMLQ_DYNAMIC_SHARED(128, unsigned char, smem);
  dmlq_mma::check_launch(NT, STAGES * (A_STAGE + B_STAGE));

  // The mma kernel's block order (grouped for L2 reuse) and split-K ranges.
  int split, k_begin, k_end, m0, n0;
  if (!dmlq_mma::block_tile<BM, BN>(M, N, K, splits, k_chunk, split, k_begin, k_end, m0, n0)) return;

  const int z = blockIdx.z;
  const int bz0 = z / batch1, bz1 = z - bz0 * batch1;
  A += bz0 * a_bs0 + bz1 * a_bs1;
  B += bz0 * b_bs0 + bz1 * b_bs1;
  if (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B) |
        static_cast<unsigned long long>(lda) | static_cast<unsigned long long>(ldb)) & 15) != 0)
    __trap();

  const int tid = threadIdx.x;
  const unsigned sA = dmlq::smem_u32(smem), sB = sA + STAGES * A_STAGE;

  // Copy assignment: a thread copies rows tid / 4 and tid / 4 + 64 of the tile, in
  // each 64-byte half h of a row its 16-byte chunk tid % 4 + 4 h (a warp's 32 copies
  // of one half fill one row group's 512 bytes: no bank conflicts); the same for A
  // and B. Rows past M (N) are not copied. The source pointers move on one k tile
  // per load (tiles are loaded in order), the stage counts round.
  const int kc = tid & 3;
  const unsigned char* a_src[2];
  const unsigned char* b_src[2];
  bool a_in[2], b_in[2];
  unsigned a_dst[2], b_dst[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = (tid >> 2) + 64 * i;
    a_in[i] = m0 + row < M;
    b_in[i] = n0 + row < N;
    a_src[i] = reinterpret_cast<const unsigned char*>(A + (a_in[i] ? static_cast<int64>(m0 + row) * lda : 0)) +
               k_begin + kc * 16;
    b_src[i] = reinterpret_cast<const unsigned char*>(B + (b_in[i] ? static_cast<int64>(n0 + row) * ldb : 0)) +
               k_begin + kc * 16;
    a_dst[i] = sA + tile_off<BK>(row, kc);
    b_dst[i] = sB + tile_off<BK>(row, kc);
  }
  int load_k = k_begin;   // the next tile to load: its first k and its stage
  int load_st = 0;
  // A tile inside K: whole 16-byte copies (one LDGSTS each, no byte counts). The last
  // tile of a K that is not a multiple of BK: byte counts and zero fill.
  auto load_next = [&]() {
    const unsigned a_off = load_st * A_STAGE, b_off = load_st * B_STAGE;
    if (load_k + BK <= k_end) {
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (a_in[i]) dmlq::cp_async16_whole(a_dst[i] + a_off + 512 * h, a_src[i] + 64 * h);
          if (b_in[i]) dmlq::cp_async16_whole(b_dst[i] + b_off + 512 * h, b_src[i] + 64 * h);
        }
    } else {
#pragma unroll
      for (int h = 0; h < HALVES; ++h) {
        const unsigned bytes = static_cast<unsigned>(min(max(k_end - (load_k + 64 * h + kc * 16), 0), 16));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          // a chunk past K (bytes 0) is still written: zeros, so the product adds nothing (its
          // source, never read, is the matrix's first byte)
          if (a_in[i])
            dmlq::cp_async16(a_dst[i] + a_off + 512 * h, bytes ? a_src[i] + 64 * h : reinterpret_cast<const unsigned char*>(A),
                             bytes);
          if (b_in[i])
            dmlq::cp_async16(b_dst[i] + b_off + 512 * h, bytes ? b_src[i] + 64 * h : reinterpret_cast<const unsigned char*>(B),
                             bytes);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      a_src[i] += BK;
      b_src[i] += BK;
    }
    load_k += BK;
    load_st = load_st == STAGES - 1 ? 0 : load_st + 1;
  };

  const int wg = tid >> 7;  // warpgroup: rows 64 wg .. 64 wg + 63 of the tile
  // Descriptors are linear in the address (the start field, in 16-byte units, does
  // not carry below 256 KiB): stage and k step are added to stage 0's.
  const unsigned long long da0 = smem_desc<BK>(sA + wg * 64 * BK), db0 = smem_desc<BK>(sB);
  int d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0;

  const int ktiles = (k_end - k_begin + BK - 1) / BK;
#pragma unroll 1
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < ktiles) load_next();
    dmlq::cp_async_commit();
  }
  int st = 0;  // the stage of tile kt
#pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
    wg_wait<1>();                      // this warpgroup's group of tile kt - 2 is retired
    dmlq::cp_async_wait<STAGES - 3>();  // this thread's copies of tile kt have landed
    fence_proxy_async();               // ... and are visible to the tensor cores
    __syncthreads();                   // everyone's: tile kt staged, stage of kt - 2 free
    if (kt + STAGES - 2 < ktiles) load_next();  // into the stage of tile kt - 2
    dmlq::cp_async_commit();
    const unsigned long long da = da0 + (st * A_STAGE >> 4), db = db0 + (st * B_STAGE >> 4);
    st = st == STAGES - 1 ? 0 : st + 1;
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks) wgmma_n128<TA, TB>(d, da + ks * (2 * kLBO >> 4), db + ks * (2 * kLBO >> 4));
    wg_commit();
  }
  wg_wait<0>();
  dmlq::cp_async_wait<0>();

  // Unsplit: each output finished here (matmul_mma.cu's finish_one: zero-point terms, then the
  // output type's last step), two adjacent columns a register pair. Split: the raw sums to
  // partial[split][z][M][N], finished by matmul_splitk_epilogue.
  const int lane = tid & 31, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
  const bool direct = splits == 1;
  int* const P = direct ? nullptr : partial + (static_cast<int64>(split) * gridDim.z + z) * M * static_cast<int64>(N);
  b_scale = dmlq::mm::batch_params(b_scale, bp_bs, z);
  b_zp = dmlq::mm::batch_params(b_zp, bp_bs, z);
  a_scale = dmlq::mm::batch_rows(a_scale, a_per_row, M, z);
  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);
  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);
  TO* const Cz = C + bz0 * c_bs0 + bz1 * c_bs1;
  const bool pairs = (N & 1) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = m0 + wg * 64 + 16 * w + g + 8 * h;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int n = n0 + 8 * j + 2 * t;
      const int v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
      if (direct) {
        TO* const c = Cz + static_cast<int64>(m) * ldc + n;
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (n + e < N)
            dmlq_mma::finish_one<TA, TB, TO>(static_cast<unsigned>(e ? v1 : v0), m, n + e, z, M, N, K, c + e, a_scale,
                                             b_scale, out_scale, a_zp, b_zp, out_zp, a_per_row, b_per_col,
                                             out_per_row, row_sum_a, col_sum_b, bias, bias_bs, bias_ld);
      } else if (pairs && n + 1 < N) {
        *reinterpret_cast<int2*>(P + static_cast<int64>(m) * N + n) = make_int2(v0, v1);
      } else {
        if (n < N) P[static_cast<int64>(m) * N + n] = v0;
        if (n + 1 < N) P[static_cast<int64>(m) * N + n + 1] = v1;
      }
    }
  }
}
