// Packed sub-byte parameters and weights of the integer matmuls, rewritten on the device in one
// launch each (dmlq/gpu/packed.py):
//
//   unpack_table<T>  a packed 4-bit or 2-bit parameter table (b_zero_point given as a dmlq.Packed, or
//                    as its .mT: MatMulNBits' (N, groups) zero points, each row padded to a byte) as
//                    the int8 / uint8 table the matmul kernels read. T = int8 (int4 / int2 codes,
//                    sign-extended: (code ^ half) - half) or uint8 (uint4 / uint2). out[i], i =
//                    (b * R + r) * C + c, C-order (..., R, C), is the code at element index
//                    e = b * sb + r * sr + c * sc of `data` (bits = 4: byte e >> 1, the low nibble
//                    where e is even; bits = 2: byte e >> 2, bits 2 * (e & 3) up): a Packed's C order
//                    (sr = C, sc = 1) or a TransposedPacked's columns (sr = 1, sc = its stored rows'
//                    length). A grid-stride loop over the elements, a thread each.
//   widen_codes2     a packed 2-bit b (int2 / uint2, four codes a byte) as the packed 4-bit b of the
//                    same values (int4 / uint4, two a byte, ONNX's order), so every kernel that reads
//                    a packed 4-bit b takes it: input byte j's codes are elements 4j..4j+3, output
//                    bytes 2j and 2j + 1; signed: a code with its bit 1 set gains bits 2 and 3
//                    (int2 -> int4, the same value); nibbles past the element count are 0. Element
//                    order is the bytes' own, so a TransposedPacked (MatMulNBits' rows) stays one.
//                    Two grid-stride loops: 16-byte chunks (one 16-byte load, two 16-byte stores,
//                    where the bytes lie on 16 and the chunk's 64 elements are below the count),
//                    then the remaining bytes one a thread (one 16-bit store where both output
//                    bytes exist). A byte a thread throughout would hold 1 byte in flight a thread:
//                    at 1,024 blocks of 256, 256 KiB, a sixteenth of the ~4 MiB the H200's
//                    bandwidth-latency product asks for; 16 bytes a thread, ~4 MiB.
// Why kernels: the array module's own operations took 6 (uint4) to 9 (int4) launches and as
// many temporaries a call to make a table (shifts, masks, a stack, a copy, the sign's XOR
// and subtraction, then a copy of the transposed view), each a few microseconds of host time
// on a call whose device time at M = 1 is tens of microseconds (the weight-streaming kernels).
// Napkin: a table is groups x N bytes (32 x 4096 = 128 KiB for K = N = 4096 in groups of 128):
// read half that, written once; below a microsecond of HBM time, so launch-bound. widen_codes2
// reads b's 2-bit bytes and writes twice as many (K = N = 8192: 16 + 32 MiB, ~12 us at the H200's
// ~4.2 TB/s), then the 4-bit kernel reads the 32 MiB: about 5x the bytes of a kernel reading the
// 2-bit bytes itself, which none does yet (Packed.astype makes the 4-bit bytes once instead). A
// chunk is ~150 SASS instructions for its 48 bytes (sm_90): the issue rate leaves ~2.5x the margin
// the bandwidth needs.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(256) unpack_table(const unsigned char* __restrict__ data, int64 sb, int64 sr,
                                                    int64 sc, int R, int C, int64 total, int bits,
                                                    T* __restrict__ out) {
  constexpr bool kSigned = static_cast<T>(-1) < static_cast<T>(0);
  const int per_log2 = bits == 2 ? 2 : 1;  // codes a byte: 4 or 2
  const unsigned mask = (1u << bits) - 1u, half = 1u << (bits - 1);
  const int64 rc = static_cast<int64>(R) * C;
  for (int64 i = static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64>(gridDim.x) * blockDim.x) {
    const int64 b = i / rc, in = i - b * rc;
    const int r = static_cast<int>(in / C), c = static_cast<int>(in - static_cast<int64>(r) * C);
    const int64 e = b * sb + r * sr + c * sc;
    const int slot = static_cast<int>(e & ((1 << per_log2) - 1));
    const unsigned code = (static_cast<unsigned>(data[e >> per_log2]) >> (bits * slot)) & mask;
    out[i] = kSigned ? static_cast<T>(static_cast<int>(code ^ half) - static_cast<int>(half)) : static_cast<T>(code);
  }
}

// The 2-bit codes of a 16-bit half-word h (eight, the first lowest) as the nibbles of a 32-bit word, the
// first lowest; signed (int2 -> int4): each code's bit 1 copied to bits 2 and 3 of its nibble.
__device__ __forceinline__ unsigned widen16(unsigned h, int is_signed) {
  unsigned t = (h | (h << 8)) & 0x00FF00FFu;  // its two bytes 16 bits apart
  t = (t | (t << 4)) & 0x0F0F0F0Fu;           // each byte's two code pairs 8 bits apart
  t = (t | (t << 2)) & 0x33333333u;           // each code in a nibble of its own
  if (is_signed) {
    const unsigned s = t & 0x22222222u;  // each code's sign bit
    t |= (s << 1) | (s << 2);
  }
  return t;
}

__global__ void __launch_bounds__(256) widen_codes2(const unsigned char* __restrict__ data, int64 count, int is_signed,
                                                    unsigned char* __restrict__ out) {
  const int64 in_bytes = (count + 3) >> 2, out_bytes = (count + 1) >> 1;
  const int64 first = static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64 step = static_cast<int64>(gridDim.x) * blockDim.x;
  // Where the bytes lie on 16: 16-byte chunks of 64 elements all below count, one 16-byte load and two
  // 16-byte stores a chunk (out is a new array: aligned); the rest a byte a thread below.
  const int64 chunks = (reinterpret_cast<unsigned long long>(data) & 15ull) == 0 ? count >> 6 : 0;
  for (int64 c = first; c < chunks; c += step) {
    const uint4 x = reinterpret_cast<const uint4*>(data)[c];
    reinterpret_cast<uint4*>(out)[2 * c] =
        make_uint4(widen16(x.x & 0xFFFFu, is_signed), widen16(x.x >> 16, is_signed),
                   widen16(x.y & 0xFFFFu, is_signed), widen16(x.y >> 16, is_signed));
    reinterpret_cast<uint4*>(out)[2 * c + 1] =
        make_uint4(widen16(x.z & 0xFFFFu, is_signed), widen16(x.z >> 16, is_signed),
                   widen16(x.w & 0xFFFFu, is_signed), widen16(x.w >> 16, is_signed));
  }
  for (int64 j = 16 * chunks + first; j < in_bytes; j += step) {
    unsigned y = widen16(data[j], is_signed);  // its 4 codes as the low 16 bits
    const int64 left = count - 4 * j;  // elements of this byte: 1 to 4
    if (left < 4) y &= (1u << (4 * static_cast<int>(left))) - 1u;
    if (2 * j + 1 < out_bytes) {
      reinterpret_cast<unsigned short*>(out)[j] = static_cast<unsigned short>(y);
    } else {
      out[2 * j] = static_cast<unsigned char>(y);
    }
  }
}
