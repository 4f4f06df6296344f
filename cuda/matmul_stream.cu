// matmul_integer_to_float (docs/semantics.md, "The integer matmul family") with
// blocked scales along K whose group length is not a multiple of the tiled
// kernels' 32-deep K tiles (any group length here; dmlq/gpu/intmm.py sends every
// other call of the family to the tiled kernels, which the H100 measured 20-85x
// faster at M <= 16: see there), where the grouped stream kernel of
// matmul_stream_packed.cu does not take them with one chunk of K per group (M > 16,
// or its workspace past 4x b's bytes: groups of a few rows): one thread per
// output column streams its column of B once, for up to MT rows of A at a time.
//
// Kernels (TA int8 or uint8; TB int8, uint8, packed_int4 or packed_uint4 (4-bit
// b read as packed bytes, ONNX's nibble order, unpacked in registers); TO float
// or float16):
//   matmul_stream<TA, TB, TO, MT>   MT in 1, 4, 16: M <= MT rows per launch
//     stream-m1 / stream-m4 / stream-m16 (dmlq/gpu/intmm.py select_variant);
//     stream-rows: MT = 16 for M > 16 in blocks of 16 rows (blockIdx.y = a matrix's
//     row block).
// Each thread owns output column n of one matrix z (blockIdx.y) and all M rows:
// per k it reads one byte of B (a warp reads 32 consecutive bytes of a row of
// B) and M bytes of A (the same address across the warp: one broadcast load),
// and adds (a - a_zp[m]) * (b - b_zp[g, n]) to an int32 per row. The float
// output is made group by group in ascending order (blocked scales along K,
// or one group of all K): acc_g rounded to float32 once, times
// (a_scale[m] * b_scale[g, n]), added to the running float32 sum, then the
// bias, then one rounding to float16; each step one non-ftz IEEE PTX op.
// Exactness: a group's int32 sum is exact while its length is <= 33025
// (255 * 255 per term); longer groups fold int32 partials of 32768 terms into
// an int64 before the one conversion to float32.
// Parameters arrive as per-matrix tables built on the host (dmlq/gpu/intmm.py):
// offsets[y] = {a, b, out, b_scale, b_zp, bias, r0, a's parameters} element offsets,
// per-row A vectors of M (per batch and row: (matrices, M) tables), B parameters as
// (groups, N) rows, the bias expanded to the output's shape. Nothing is padded; columns past N return at once.
//
// Napkin math (H100 SXM, 3.35 TB/s HBM): at M <= 16 the limit is the bytes of
// B (K * N); this first version issues per k one 1-byte load of B per thread
// plus M broadcast loads of A and M IMADs, so it is issue-bound well below
// the bandwidth limit for M = 16 (about 2 * M + 2 instructions per byte of B
// per thread). The H100 measured it (N = K = 8192, float16 out): 1,033 us at
// M = 1 and 3,948 us at M = 16, 2 % and 0.6 % of the limit, as predicted below,
// so the family's other calls left it for the tiled kernels. A packed 4-bit b halves the
// bytes of B (a warp's 32 columns read 16 consecutive bytes per k), but each
// thread still issues one byte load per k plus a shift and a mask for its
// nibble, so the packed variants are issue-bound the same way.
// Filling an H100 (the question cuda/matmul_stream_packed.cu answers with
// split-K): Little's law wants 3.35 TB/s x ~0.7 us = 2.35 MB of b in flight, ~17.8
// KB per SM. Here a thread has 1-4 bytes of b in flight (one byte per k, as far as
// ptxas runs loads ahead), a block 128-512 B, and the grid is ceil(N / 128) *
// matrices blocks: N = 4096, 8192, 11008, 14336 give 32, 64, 86, 112 blocks, so
// 4-57 KB in flight on the chip, 6-80 GB/s (0.2-2.4% of HBM) at any K. Even every
// block slot filled (8-10 blocks per SM at MT <= 4: ~1300 blocks, e.g. by a
// split of K) holds 0.17-0.68 MB (7-29%): a split alone does not reach the
// bandwidth; its remaining calls at M <= 16 (groups not a multiple of 32) went to
// the packed kernel's shape (16-byte loads of 32 columns per thread staged through
// shared memory, dp4a) with one chunk of K per group and per-group int32 sums, so
// the float adds keep their ascending order, wherever that workspace stays within
// 4x b's bytes (not measured on a GPU yet).
// ptxas (sm_90, bench/results/static.md): __launch_bounds__(128, 8) for MT <= 4
// (48-64 registers, 8+ blocks per SM) and (128, 3) for MT = 16 (168 registers:
// 16 int64 partials); no spills.
// Without a minimum block count ptxas chose 32 registers for some packed
// variants and spilled (matmul_stream<int8, packed_int4, float, 4>).
#include "packed4.cuh"

namespace dmlq {
namespace stream {

enum : int { kChunk = 32768 };  // int32 partial sums stay exact up to here

// How b is stored: bytes_t the array's element, zp_t its zero points', at(b, i)
// the value of logical element i (its element offset from B).
template <typename TB> struct bsrc {
  typedef TB bytes_t;
  typedef TB zp_t;
  static __device__ __forceinline__ int at(const TB* b, int64 i) { return static_cast<int>(b[i]); }
};
template <> struct bsrc<packed_int4> {  // zero points as their int8 values
  typedef uint8 bytes_t;
  typedef int8 zp_t;
  static __device__ __forceinline__ int at(const uint8* b, int64 i) { return (nibble(b, i) ^ 8) - 8; }
};
template <> struct bsrc<packed_uint4> {  // zero points as their uint8 values
  typedef uint8 bytes_t;
  typedef uint8 zp_t;
  static __device__ __forceinline__ int at(const uint8* b, int64 i) { return nibble(b, i); }
};

}  // namespace stream
}  // namespace dmlq

// offsets: 8 int64 per block row y (a, b, out, b_scale, b_zp, bias element
// offsets; r0, the block's first row, read only by MT = 16: the MT = 4 variants
// spill at their 64 registers otherwise; and the element offset of the block's
// first row of a_scale / a_zp: r0, plus z * M where they are per batch and row,
// (matrices, M) tables): one per matrix, or with M > MT
// (stream-rows: blocked scales the tiled kernels cannot close) one per MT rows
// of a matrix, the a, out and bias offsets advanced to row r0.
// b_scale / b_zp rows: `groups` (b_scale) and bz_groups (b_zp: 1 or groups) rows of N.
// group: the group length along K (K for one group); groups = number of groups.
template <typename TA, typename TB, typename TO, int MT>
__global__ void __launch_bounds__(128, MT == 16 ? 3 : 8) matmul_stream(
    const TA* __restrict__ A, const typename dmlq::stream::bsrc<TB>::bytes_t* __restrict__ B, TO* __restrict__ C,
    int M, int N, int K, int group, int groups, int bz_groups,
    const int64* __restrict__ offsets, int64 lda, int64 ldb, int64 ldc,
    const float* __restrict__ a_scale, const TA* __restrict__ a_zp,
    const float* __restrict__ b_scale, const typename dmlq::stream::bsrc<TB>::zp_t* __restrict__ b_zp,
    const float* __restrict__ bias) {
  using namespace dmlq;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64* off = offsets + 8 * static_cast<int64>(blockIdx.y);
  // The block's first row of a's parameters (r0, plus z * M per batch and row), read first:
  // read after M's update below, the MT = 4 float16 variants spilled (ptxas, sm_90).
  const int64 ar = off[7];
  // stream-rows: the block's rows from r0 on (0 for one block per matrix); at least MT rows
  // compute, the first min(M, MT) are stored
  if constexpr (MT == 16) M -= static_cast<int>(off[6]);
  a_scale += ar;
  if (a_zp != nullptr) a_zp += ar;
  const TA* a = A + off[0];
  const int64 b0 = off[1] + n;  // element offset of b[z][0, n]
  TO* c = C + off[2] + n;

  int za[MT];
  float as[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const int mm = min(m, M - 1);  // rows past M compute throwaway values
    za[m] = a_zp != nullptr ? static_cast<int>(a_zp[mm]) : 0;
    as[m] = a_scale[mm];
  }
  float v[MT];
  unsigned acc[MT];
  int64 wide[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    v[m] = 0.0f;
    acc[m] = 0u;
    wide[m] = 0;
  }
  for (int g = 0; g < groups; ++g) {
    const int k0 = g * group, k1 = min(k0 + group, K);
    const int zb = b_zp != nullptr ? static_cast<int>(b_zp[off[4] + static_cast<int64>(bz_groups > 1 ? g : 0) * N + n])
                                   : 0;
    for (int kc = k0; kc < k1; kc += stream::kChunk) {
      const int kend = min(kc + stream::kChunk, k1);
      for (int k = kc; k < kend; ++k) {
        const int db = stream::bsrc<TB>::at(B, b0 + static_cast<int64>(k) * ldb) - zb;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const int da = static_cast<int>(__ldg(a + static_cast<int64>(min(m, M - 1)) * lda + k)) - za[m];
          acc[m] += static_cast<unsigned>(da * db);  // |da * db| <= 65025; wraps mod 2**32
        }
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        wide[m] += static_cast<int64>(static_cast<int>(acc[m]));
        acc[m] = 0u;
      }
    }
    const float bs = b_scale[off[3] + static_cast<int64>(g) * N + n];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float term = ieee_mul(to_f32(wide[m]), ieee_mul(as[m], bs));
      v[m] = g == 0 ? term : ieee_add(v[m], term);
      wide[m] = 0;
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= M) break;
    float r = v[m];
    if (bias != nullptr) r = ieee_add(r, bias[off[5] + static_cast<int64>(m) * N + n]);
    c[static_cast<int64>(m) * ldc] = from_f32<TO>(r);
  }
}
