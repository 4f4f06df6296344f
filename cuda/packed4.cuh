// 4-bit b of the integer matmuls (matmul_stream.cu, matmul_dp4a_packed.cu), packed
// as ONNX packs it: element i of the C-order (..., K, N) tensor in bits
// 4 * (i % 2) of byte i / 2. The tags packed_int4 / packed_uint4 name the packed
// types in kernel names; the kernels read the uint8 bytes and compute on the
// values in int8 (packed_int4: sign-extended) or uint8 (packed_uint4), which is
// also the type of their zero points (b_value<TB>::type).
#pragma once

#include "common.cuh"

struct packed_int4;
struct packed_uint4;
// An 8-bit b held K-major (its (K, N) matrix N runs of K contiguous bytes: the transposed view
// of an (N, K) weight), as the stream kernels of matmul_stream_packed.cu and the tensor-core
// kernel of matmul_mma_kmajor.cu read it.
struct kmajor_int8;
struct kmajor_uint8;
// A packed 4-bit b held K-major (its (K, N) matrix N runs of K packed elements: the bytes of an
// (N, K) int4 / uint4 weight, dmlq.TransposedPacked), as the stream kernels read it.
struct kmajor_int4;
struct kmajor_uint4;

namespace dmlq {

// b's value type (its zero points' type too), whether it is packed and whether it is held
// K-major (ldb then counts the elements between its columns).
template <typename V, bool PACKED, bool KMAJOR> struct b_traits {
  typedef V type;
  static constexpr bool packed = PACKED, kmajor = KMAJOR;
};
template <typename TB> struct b_value : b_traits<TB, false, false> {};
template <> struct b_value<packed_int4> : b_traits<int8, true, false> {};
template <> struct b_value<packed_uint4> : b_traits<uint8, true, false> {};
template <> struct b_value<kmajor_int8> : b_traits<int8, false, true> {};
template <> struct b_value<kmajor_uint8> : b_traits<uint8, false, true> {};
template <> struct b_value<kmajor_int4> : b_traits<int8, true, true> {};
template <> struct b_value<kmajor_uint4> : b_traits<uint8, true, true> {};

// The 4-bit code of element i.
__device__ __forceinline__ int nibble(const uint8* b, int64 i) {
  return (static_cast<int>(b[i >> 1]) >> (static_cast<int>(i & 1) << 2)) & 15;
}

// The value of element i in V (int8: sign-extended; uint8: the code).
template <typename V>
__device__ __forceinline__ int nibble_value(const uint8* b, int64 i) {
  const int c = nibble(b, i);
  return static_cast<V>(-1) < static_cast<V>(0) ? (c ^ 8) - 8 : c;
}

// The codes of elements e .. e + 3 (element e in bits 0-3; bits past those of
// the len >= 1 elements of the row inside the window are 0 or the next
// element's, never a byte outside it): 1 to 3 byte loads, one shift.
__device__ __forceinline__ unsigned nibbles4(const uint8* b, int64 e, int len) {
  const uint8* p = b + (e >> 1);
  const int o = static_cast<int>(e & 1);
  unsigned v = __ldg(p);
  if (o + len > 2) v |= static_cast<unsigned>(__ldg(p + 1)) << 8;
  if (o + len > 4) v |= static_cast<unsigned>(__ldg(p + 2)) << 16;
  return v >> (4 * o);
}

// The dp4a tiles keep b packed in shared memory: a word is 4 packed bytes, one
// per k, each holding two neighbouring columns (the even one in the low
// nibble), and splits in registers into two DP4A words, one per column, with
// one or two integer ops each. The high nibbles are taken in place (w &
// 0xF0F0F0F0: 16 times the value, an int8 with its sign in bit 7 for int4, a
// uint8 for uint4); the low nibbles are the codes for uint4 (w & 0x0F0F0F0F)
// and, for int4, moved up first ((w << 4) & 0xF0F0F0F0: 16 times the value).
// A column whose words carry 16 times the values gets 16 times the sums; the
// kernels shift the int32 sums right by 4 (exact: |16 * sum| < 2**31 for
// K <= 32768, see matmul_dp4a_packed.cu).
template <typename V>
__device__ __forceinline__ unsigned lo_nibbles(unsigned w) {
  if (static_cast<V>(-1) < static_cast<V>(0)) return (w << 4) & 0xF0F0F0F0u;
  return w & 0x0F0F0F0Fu;
}
__device__ __forceinline__ unsigned hi_nibbles(unsigned w) { return w & 0xF0F0F0F0u; }

// Whether the sums of a tile column taken from lo_nibbles (even) or
// hi_nibbles (odd) carry a factor 16.
template <typename V>
__device__ __forceinline__ constexpr bool scaled16(bool odd) {
  return odd || static_cast<V>(-1) < static_cast<V>(0);
}

}  // namespace dmlq
