// The output stage of the tiled matmul kernels (matmul_dp4a.cu, matmul_mma.cu),
// chosen by the output type TO (docs/semantics.md):
//   int8 / uint8   quantized_matmul: requant(acc, (a_scale*b_scale)/out_scale)
//   int            matmul_integer: the corrected sum modulo 2**32, as int32
//   float, float16 matmul_integer_to_float: float32(acc) * (a_scale*b_scale),
//   (bfloat16: the grouped stream kernel's finish pass, matmul_stream_packed.cu, and the
//   tensor-core tile of an 8-bit b with its split-K epilogue, matmul_configs.BF16_MMA)
//                  + bias[m, n] when given, one rounding to TO
// The main loops are shared; only this last step differs. The float steps are
// one IEEE-rounded non-ftz PTX op each, in the contract's order.
//
// Extra ABI arguments of every tiled matmul kernel (after col_sum_b):
//   bias, bias_bs, bias_ld   float32 bias at bias[z * bias_bs + m * bias_ld + n]
//                            (strides 0 where it broadcasts; nullptr: none)
//   bp_bs                    elements between matrix z's B parameters
//                            (b_scale/b_zp; 0 when every matrix shares them)
//   a_per_row, out_per_row   0 per tensor, 1 per row, 2 per batch and row:
//                            (matrices, M) tables, matrix z's rows at z * M
//                            (batch_rows below)
//   k_group                  matmul_dp4a_wide and matmul_mma's GRP build only: the
//                            length along K of a block of B scales (a multiple
//                            of 32), 0 for one group of all K.
//   b_per_col                0 per tensor, 1 per column (and with blocks the
//                            (groups, N) float32 table); with blocks also 2 / 3:
//                            MatMulNBits' own (N, groups) float32 / float16
//                            scales read in place (group_scale below; b_zp
//                            stays the (groups, N) table)
#pragma once

#include "common.cuh"

namespace dmlq {
namespace mm {

enum Kind : int { kRequant = 0, kInt = 1, kFloat = 2 };

template <typename TO> struct kind_of { static constexpr int value = kRequant; };
template <> struct kind_of<int> { static constexpr int value = kInt; };
template <> struct kind_of<float> { static constexpr int value = kFloat; };
template <> struct kind_of<float16> { static constexpr int value = kFloat; };
template <> struct kind_of<bfloat16> { static constexpr int value = kFloat; };

// The float output of a sum already rounded to float32 (f), with the scales of
// its row (as) and column (bs) and its bias element (b; read only with a bias).
template <typename TO>
__device__ __forceinline__ TO float_out(float f, float as, float bs, const float* b) {
  float v = ieee_mul(f, ieee_mul(as, bs));
  if (b != nullptr) v = ieee_add(v, *b);
  return from_f32<TO>(v);
}

// quantized_matmul's requantization of an exact sum already rounded to float32
// (f): f * mult with mult = (a_scale * b_scale) / out_scale (requant_mult; a
// kernel may hoist it where the scales repeat), rounded half to even and
// saturated around out_zp. Every matmul kernel's int8/uint8 output goes here.
__device__ __forceinline__ float requant_mult(float as, float bs, float os) {
  return ieee_div(ieee_mul(as, bs), os);
}
template <typename TO>
__device__ __forceinline__ TO requant(float f, float mult, int ozp) {
  return round_saturate<TO>(ieee_mul(f, mult), ozp);
}

// B's scale for group g (0 without blocks) and column n, by b_per_col: 0 one scale;
// 1 the (groups, N) float32 table, group g's row g * N elements on; 2 / 3 MatMulNBits'
// (N, groups) table of float32 / float16 (column n's groups together, n * groups on),
// read in place, a float16 widened exactly. Column n's scales start scales_at elements
// on, one group scales_step elements from the next; scale_at reads element i.
__device__ __forceinline__ int64 scales_at(int b_per_col, int n, int groups) {
  return b_per_col < 2 ? (b_per_col ? n : 0) : static_cast<int64>(n) * groups;
}
__device__ __forceinline__ int64 scales_step(int b_per_col, int N) { return b_per_col == 1 ? N : b_per_col > 1; }
__device__ __forceinline__ float scale_at(const float* s, int b_per_col, int64 i) {
  return b_per_col == 3 ? to_f32(reinterpret_cast<const float16*>(s)[i]) : s[i];
}
__device__ __forceinline__ float group_scale(const float* s, int b_per_col, int g, int n, int N, int groups) {
  return scale_at(s, b_per_col, scales_at(b_per_col, n, groups) + g * scales_step(b_per_col, N));
}
// The same for one column read group after group (the grouped finish pass), its start and
// the type's choice made once: [g] is group g's scale (the flag and index form kept a
// thread's output pointer on the stack there).
struct ColumnScales {
  const float* f;  // float32 scales; nullptr: float16 ones at h
  const float16* h;
  int64 step;
  __device__ __forceinline__ float operator[](int64 g) const { return f != nullptr ? f[g * step] : to_f32(h[g * step]); }
};
__device__ __forceinline__ ColumnScales column_scales(const float* s, int b_per_col, int n, int N, int groups) {
  const int64 at = scales_at(b_per_col, n, groups);
  if (b_per_col == 3) return {nullptr, reinterpret_cast<const float16*>(s) + at, 1};
  return {s + at, nullptr, scales_step(b_per_col, N)};
}

// Matrix z's B parameters (pointer arithmetic only on a real pointer).
template <typename T>
__device__ __forceinline__ const T* batch_params(const T* p, int64 bp_bs, int z) {
  return p != nullptr ? p + bp_bs * z : p;
}

// Matrix z's rows of a per-batch-and-row A (or output) parameter: per_row 2 means a
// (matrices, M) table, matrix z's rows M * z elements on, then read per row as with
// per_row 1 (the kernels test the flag for nonzero); 0 (per tensor) and 1 (per row): p.
template <typename T>
__device__ __forceinline__ const T* batch_rows(const T* p, int per_row, int M, int z) {
  return (p != nullptr && per_row == 2) ? p + static_cast<int64>(M) * z : p;
}

// Stores 4 outputs v[0..3] at dst[0..count-1] (count may be anything): one
// vector store (16 bytes, 8 for float16) where all 4 fit and dst is aligned
// to it, else one at a time.
template <typename TO>
__device__ __forceinline__ void store4(TO* dst, const TO (&v)[4], int count) {
  static_assert(sizeof(TO) == 4 || sizeof(TO) == 2, "int32, float32 or float16 outputs");
  if (count >= 4 && (reinterpret_cast<unsigned long long>(dst) & (4 * sizeof(TO) - 1)) == 0) {
    if constexpr (sizeof(TO) == 4) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    } else {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(v);
    }
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (c < count) dst[c] = v[c];
  }
}

}  // namespace mm
}  // namespace dmlq
