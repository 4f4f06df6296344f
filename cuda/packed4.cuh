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

namespace dmlq {

// b's value type (its zero points' type too) and whether it is packed.
template <typename TB> struct b_value {
  typedef TB type;
  static constexpr bool packed = false;
};
template <> struct b_value<packed_int4> {
  typedef int8 type;
  static constexpr bool packed = true;
};
template <> struct b_value<packed_uint4> {
  typedef uint8 type;
  static constexpr bool packed = true;
};

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

// Four elements' codes (a 16-bit half word, element 0 in bits 0-3) spread to the
// four bytes of a word, each byte the element's value in V (int8 bytes
// sign-extended: bit 3 set -> 0xF0 ORed in; 0x08 * 0x1E = 0xF0 stays in its byte).
template <typename V>
__device__ __forceinline__ unsigned spread4(unsigned h) {
  const unsigned t = (h | (h << 8)) & 0x00FF00FFu;    // bytes 0 and 2: codes 0|1 and 2|3
  unsigned w = (t | (t << 4)) & 0x0F0F0F0Fu;          // one code per byte
  if (static_cast<V>(-1) < static_cast<V>(0)) w |= (w & 0x08080808u) * 0x1Eu;
  return w;
}

}  // namespace dmlq
