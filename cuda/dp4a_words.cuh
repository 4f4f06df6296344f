// The dp4a tiles' word helpers (matmul_dp4a.cu, and through it matmul_dp4a_packed.cu,
// matmul_dp4a_kmajor.cu, matmul_dp4a_kmajor4.cu): the DP4A of each (a, b) type pair, the edge
// path's 4-byte windows, the 4x4 byte transpose of a row-major b's staging, the interleave of a
// K-major packed b's two columns, and the fragments' positions in the tile.
#pragma once
#include "common.cuh"

namespace dmlq {
namespace dp4a {

// c + dot(bytes of a, bytes of b), each byte sign- or zero-extended by type;
// modulo 2**32, so unsigned.
template <typename TA, typename TB>
__device__ __forceinline__ unsigned dot4(unsigned a, unsigned b, unsigned c);

template <>
__device__ __forceinline__ unsigned dot4<int8, int8>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  DMLQ_PTX("dp4a.s32.s32 %0, %1, %2, %3;", (DMLQ_OUT("r", d)), (DMLQ_IN("r", a), DMLQ_IN("r", b), DMLQ_IN("r", c)));
  return d;
}
template <>
__device__ __forceinline__ unsigned dot4<int8, uint8>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  DMLQ_PTX("dp4a.s32.u32 %0, %1, %2, %3;", (DMLQ_OUT("r", d)), (DMLQ_IN("r", a), DMLQ_IN("r", b), DMLQ_IN("r", c)));
  return d;
}
template <>
__device__ __forceinline__ unsigned dot4<uint8, int8>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  DMLQ_PTX("dp4a.u32.s32 %0, %1, %2, %3;", (DMLQ_OUT("r", d)), (DMLQ_IN("r", a), DMLQ_IN("r", b), DMLQ_IN("r", c)));
  return d;
}
template <>
__device__ __forceinline__ unsigned dot4<uint8, uint8>(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  DMLQ_PTX("dp4a.u32.u32 %0, %1, %2, %3;", (DMLQ_OUT("r", d)), (DMLQ_IN("r", a), DMLQ_IN("r", b), DMLQ_IN("r", c)));
  return d;
}

enum : unsigned { kOnes = 0x01010101u };
enum : int { kChunkK = 32768 };  // int32 partials stay exact up to here

// The edge path reads a word as the 4-byte window inside the row that ends at
// the row's end where the word runs past it, a byte at a time, then moves the
// wanted bytes, d bytes into the window, down to byte 0 (zeros above).
// shift_sel(d) is the byte_perm selector of that move on the two halves
// [w0, w1, 0, 0] and [w2, w3, 0, 0] (byte indices 0, 1, 4, 5; 2 is a 0).
__device__ __forceinline__ unsigned shift_sel(int d) {
  return 0x22225410u >> (4 * min(d, 4));
}

// Window bytes p[0..3] (those at i >= len, len >= 1, read as 0 and never
// dereferenced: len < 4 only for rows shorter than 4 bytes), moved by `sel`.
__device__ __forceinline__ unsigned window_word(const unsigned char* p, int len, unsigned sel) {
  unsigned b[4];
  b[0] = __ldg(p);
#pragma unroll
  for (int i = 1; i < 4; ++i) b[i] = i < len ? static_cast<unsigned>(__ldg(p + i)) : 0u;
  // b[i] < 256, so byte 1 of each is 0.
  return __byte_perm(__byte_perm(b[0], b[1], 0x1140), __byte_perm(b[2], b[3], 0x1140), sel);
}

// 4x4 byte transpose: word r holds row r's bytes for columns 0..3; word c of
// the result holds column c's bytes for rows 0..3 (dp4a packing along k).
__device__ __forceinline__ void transpose4(const unsigned (&w)[4], uint4& o) {
  const unsigned t0 = __byte_perm(w[0], w[1], 0x5140);
  const unsigned t1 = __byte_perm(w[0], w[1], 0x7362);
  const unsigned t2 = __byte_perm(w[2], w[3], 0x5140);
  const unsigned t3 = __byte_perm(w[2], w[3], 0x7362);
  o.x = __byte_perm(t0, t2, 0x5410);
  o.y = __byte_perm(t0, t2, 0x7632);
  o.z = __byte_perm(t1, t3, 0x5410);
  o.w = __byte_perm(t1, t3, 0x7632);
}

// A K-major packed b's two columns (the 4 codes of k..k+3 of each, code j in bits 4j of e and of
// o) as one shared word of packed bytes: byte j = o's code j << 4 | e's code j (ONNX's order,
// the even column low), as the row-major b's staging stores them.
__device__ __forceinline__ unsigned nibbles_pair(unsigned e, unsigned o) {
  const unsigned lo = __byte_perm(e, e >> 4, 0x5140) & 0x0F0F0F0Fu;
  return lo | (__byte_perm(o << 4, o, 0x5140) & 0xF0F0F0F0u);
}

// Thread fragments are groups of 4 consecutive rows (columns), the groups
// THR*4 apart, so fragment reads are conflict-free LDS.128.
template <int THR>
__device__ __forceinline__ int frag_pos(int i, int t) {
  return (i >> 2) * (THR * 4) + t * 4 + (i & 3);
}

}  // namespace dp4a
}  // namespace dmlq
