// The shared-memory layouts and fragment unpacking of matmul_mma.cu's tensor-core kernel (its
// row-major, packed, K-major and packed K-major b; see the kernel sources' headers), apart so
// that matmul_mma.cu stays one kernel and its epilogue.
#pragma once

#include "common.cuh"

namespace dmlq_mma {

// Shared-memory layouts (byte offsets inside one stage), 16-byte chunks XOR-swizzled.
// A: BM rows of 64 bytes (4 chunks). An ldmatrix phase reads 8 consecutive rows at
// one chunk; rows 2i and 2i+1 share a 128-byte bank line, so chunk ^= (row/2)%4
// puts the 8 reads on 8 distinct 16-byte bank groups.
__device__ __forceinline__ int a_off(int row, int chunk) {
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}
// B: 64 k-rows of BN bytes. The trans loads read k rows {0,1,4,5,8,9,12,13} (+2,
// +16); bits 0, 2, 3 of k are distinct within such a set, so XOR them into the
// low 3 chunk bits.
__device__ __forceinline__ int b_swz(int k) { return (k & 1) | ((k >> 1) & 6); }
template <int BN>
__device__ __forceinline__ int b_off(int k, int chunk) {
  return k * BN + ((chunk ^ b_swz(k)) << 4);
}
// B held K-major (matmul_mma_kmajor.cu): BN rows of 64 k-bytes, laid out as A's
// tile (a_off); row r holds column km_col(r) of the block tile: within each 16
// columns the even ones first, then the odd ones, so that the 8 columns of one n8
// tile (the even or the odd columns of 16, see quad_col) are 8 consecutive rows,
// read by one ldmatrix phase without conflicts as A's rows are.
__device__ __forceinline__ int km_col(int r) { return (r & ~15) | ((r & 7) << 1) | ((r >> 3) & 1); }
// B packed (4-bit, matmul_mma_packed.cu): 64 k-rows of BN/2 bytes (4 chunks of
// 32 columns for BN = 128), two rows per 128-byte bank line. The same trans
// loads read rows {0,1,4,5,8,9,12,13}: bit 0 of k picks the half line, and bits
// 2-3 XORed into the 2 chunk bits put the 4 rows of each parity on distinct chunks.
template <int BN>
__device__ __forceinline__ int bp_off(int k, int chunk) {
  static_assert(BN == 128, "packed b: 4 chunks per k-row");
  return k * (BN / 2) + ((chunk ^ ((k >> 2) & 3)) << 4);
}
// B packed and K-major (matmul_mma_kmajor4.cu): BN rows of 32 bytes (64 packed k), row r
// holding column km_col(r). A fragment load reads one chunk of 8 consecutive rows, 4 to a
// 128-byte bank line: rows 4-7 of each 8 take the other chunk.
__device__ __forceinline__ int bkp_off(int row, int chunk) { return row * 32 + ((chunk ^ ((row >> 2) & 1)) << 4); }

// Packed b: a trans load gives lane (g, t) r0 = columns 4g..4g+3 (a 16-bit
// element: 4 nibbles, column 4g in bits 0-3) of k rows 4t (low half) and 4t+1
// (high half), r1 the same of rows 4t+2, 4t+3. byte_perm gathers the bytes of
// columns 4g, 4g+1 (0x6420) or 4g+2, 4g+3 (0x7531) of the 4 rows, k-minor; each
// byte holds two columns' codes. A column's code moved to the byte's high
// nibble, the low nibble cleared, is 16 * its value as an s8 byte for int4
// (the sign lands on bit 7) and as a u8 byte for uint4: one LOP for the odd
// column (already high), a shift and a LOP for the even one. Every product is
// then 16x exact and the epilogue shifts the sums back (see the kernel).
__device__ __forceinline__ void unpack_b4(unsigned r0, unsigned r1, unsigned& c0, unsigned& c1, unsigned& c2,
                                          unsigned& c3) {
  const unsigned p = __byte_perm(r0, r1, 0x6420), q = __byte_perm(r0, r1, 0x7531);
  c0 = (p << 4) & 0xF0F0F0F0u;
  c1 = p & 0xF0F0F0F0u;
  c2 = (q << 4) & 0xF0F0F0F0u;
  c3 = q & 0xF0F0F0F0u;
}
// Packed K-major b: a col fragment register (4 consecutive k of one column) from the 16 bits
// that hold them (byte j: k 2j in the low nibble, 2j + 1 in the high one), each code moved to
// its byte's high nibble as unpack_b4 does (16 times the value): byte j of h's 4-bit shift
// holds k 2j in its high nibble, so one PRMT of (h, h << 4) and a mask.
__device__ __forceinline__ unsigned unpack_bk4(unsigned h) {
  return __byte_perm(h, h << 4, 0x1504) & 0xF0F0F0F0u;
}

// Epilogue staging: 32 rows of 64 int32 (16 chunks of 16 bytes) per warp.
// Writers put rows 2i, 2i+1 into one phase, readers 8 consecutive rows at one
// chunk; chunk ^= ((row & 1) << 2) | ((row >> 1) & 3) keeps both conflict-free.
// A packed b's lanes hold 8 adjacent columns (two chunks, 2t and 2t+1, of 32):
// chunk ^= row & 7 keeps rows 2i, 2i+1 on chunks of opposite parity.
constexpr int kEpiWarpBytes = 32 * 256;
template <bool P4 = false>
__device__ __forceinline__ int epi_off(int row, int chunk) {
  if constexpr (P4) return row * 256 + ((chunk ^ (row & 7)) << 4);
  return row * 256 + ((chunk ^ (((row & 1) << 2) | ((row >> 1) & 3))) << 4);
}

// Lane (g, t)'s four sums of quad qd (0..3) in row half h of an m16 tile (its
// rows g, g+8), and their first column in the warp's 64: int8 b, acc[2p + o][e]
// holds column 16p + 4t + 2(e & 1) + o (the even/odd n8 tiles of pair p); packed
// b, acc[4c + j][e] holds column 32c + 8t + 4(e & 1) + j.
template <bool P4>
__device__ __forceinline__ int quad_col(int qd, int t4) {
  return P4 ? (qd >> 1) * 32 + 8 * t4 + 4 * (qd & 1) : qd * 16 + 4 * t4;
}
// Element j of that quad (the column quad_col + j), from any warp tile's n8 tiles a[NI].
template <bool P4, typename T, int NI>
__device__ __forceinline__ T quad_at(const T (&a)[NI][4], int qd, int h, int j) {
  if constexpr (P4) return a[4 * (qd >> 1) + j][2 * h + (qd & 1)];
  return a[2 * qd + (j & 1)][2 * h + (j >> 1)];
}
template <bool P4, int NI>
__device__ __forceinline__ int4 quad(const int (&a)[NI][4], int qd, int h) {
  return make_int4(quad_at<P4>(a, qd, h, 0), quad_at<P4>(a, qd, h, 1), quad_at<P4>(a, qd, h, 2),
                   quad_at<P4>(a, qd, h, 3));
}

}  // namespace dmlq_mma
