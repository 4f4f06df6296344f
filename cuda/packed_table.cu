// A packed 4-bit parameter table (the integer matmuls' b_zero_point given as a dmlq.Packed, or as
// its .mT: MatMulNBits' (N, groups) zero points, each row padded to a byte) as the int8 / uint8
// table the matmul kernels read, in one launch (dmlq/gpu/packed.py unpack_table).
//
//   unpack_table<T>  T = int8 (int4 codes, sign-extended: (code ^ 8) - 8) or uint8 (uint4).
//                    out[i], i = (b * R + r) * C + c, C-order (..., R, C), is the nibble at
//                    element index e = b * sb + r * sr + c * sc of `data` (byte e >> 1, the
//                    low nibble where e is even): a Packed's C order (sr = C, sc = 1) or a
//                    TransposedPacked's columns (sr = 1, sc = its stored rows' length).
//                    A grid-stride loop over the elements, a thread each.
// Why a kernel: the array module's own operations took 6 (uint4) to 9 (int4) launches and as
// many temporaries a call to make this table (shifts, masks, a stack, a copy, the sign's XOR
// and subtraction, then a copy of the transposed view), each a few microseconds of host time
// on a call whose device time at M = 1 is tens of microseconds (the weight-streaming kernels).
// Napkin: a table is groups x N bytes (32 x 4096 = 128 KiB for K = N = 4096 in groups of 128):
// read half that, written once; below a microsecond of HBM time, so launch-bound. No variants.
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(256) unpack_table(const unsigned char* __restrict__ data, int64 sb, int64 sr,
                                                    int64 sc, int R, int C, int64 total, T* __restrict__ out) {
  constexpr bool kSigned = static_cast<T>(-1) < static_cast<T>(0);
  const int64 rc = static_cast<int64>(R) * C;
  for (int64 i = static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64>(gridDim.x) * blockDim.x) {
    const int64 b = i / rc, in = i - b * rc;
    const int r = static_cast<int>(in / C), c = static_cast<int>(in - static_cast<int64>(r) * C);
    const int64 e = b * sb + r * sr + c * sc;
    const unsigned code = (static_cast<unsigned>(data[e >> 1]) >> (4 * static_cast<int>(e & 1))) & 15u;
    out[i] = kSigned ? static_cast<T>(static_cast<int>(code ^ 8u) - 8) : static_cast<T>(code);
  }
}
