// matmul_mma.cu's PTX wrappers: cp.async copies of a 16-byte chunk (whole, or with a byte count
// and zero fill), ldmatrix (plain and transposed) and the int8 mma.sync m16n8k32, apart so that
// matmul_mma.cu stays one kernel and its epilogues.
#pragma once

#include "cp_async.cuh"

namespace dmlq_mma {

using dmlq::cp_async16;
using dmlq::cp_async_commit;
using dmlq::cp_async_wait;
using dmlq::smem_u32;

// 16 bytes as 16/VEC copies of VEC bytes (cp.async.ca takes 4 and 8): the
// first `bytes` come from src, the rest are zero-filled. src is VEC-aligned.
template <int VEC>
__device__ __forceinline__ void cp_async_chunk(unsigned dst, const unsigned char* src, unsigned bytes) {
  if constexpr (VEC == 16) {
    cp_async16(dst, src, bytes);
  } else {
#pragma unroll
    for (int j = 0; j < 16 / VEC; ++j) {
      const int off = j * VEC;
      const unsigned b = static_cast<unsigned>(min(max(static_cast<int>(bytes) - off, 0), VEC));
      // A source past the data (b == 0) is never read; it stays inside the row.
      DMLQ_PTX_MEM("cp.async.ca.shared.global [%0], [%1], %2, %3;", (),
                   (DMLQ_IN("r", dst + off), DMLQ_IN("l", __cvta_generic_to_global(src + (b ? off : 0))),
                    DMLQ_IN("n", VEC), DMLQ_IN("r", b)));
    }
  }
}

// 16 whole bytes as 16/VEC copies of VEC bytes, no zero fill: the fast path of
// a tile that lies inside the matrix. Constant sizes and immediate offsets, so
// each copy is one LDGSTS.
template <int VEC>
__device__ __forceinline__ void cp_async_whole(unsigned dst, const unsigned char* src) {
  if constexpr (VEC == 16) {
    dmlq::cp_async16_whole(dst, src);
  } else {
#pragma unroll
    for (int j = 0; j < 16 / VEC; ++j)
      DMLQ_PTX_MEM("cp.async.ca.shared.global [%0], [%1], %2;", (),
                   (DMLQ_IN("r", dst + j * VEC), DMLQ_IN("l", __cvta_generic_to_global(src + j * VEC)),
                    DMLQ_IN("n", VEC)));
  }
}

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
  DMLQ_PTX_MEM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];",
               (DMLQ_OUT("r", r[0]), DMLQ_OUT("r", r[1]), DMLQ_OUT("r", r[2]), DMLQ_OUT("r", r[3])),
               (DMLQ_IN("r", addr)));
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
  DMLQ_PTX_MEM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];",
               (DMLQ_OUT("r", r[0]), DMLQ_OUT("r", r[1]), DMLQ_OUT("r", r[2]), DMLQ_OUT("r", r[3])),
               (DMLQ_IN("r", addr)));
}

#define DMLQ_MMA_K32(ta, tb)                                                          \
  DMLQ_PTX("mma.sync.aligned.m16n8k32.row.col.s32." ta "." tb ".s32 "                \
           "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};",          \
           (DMLQ_INOUT("r", c[0]), DMLQ_INOUT("r", c[1]), DMLQ_INOUT("r", c[2]),        \
            DMLQ_INOUT("r", c[3])),                                                     \
           (DMLQ_IN("r", a[0]), DMLQ_IN("r", a[1]), DMLQ_IN("r", a[2]), DMLQ_IN("r", a[3]), \
            DMLQ_IN("r", b0), DMLQ_IN("r", b1)))

// c (16x8 int32) += a (16x32, row) * b (32x8, col); signedness from TA/TB.
template <typename TA, typename TB>
__device__ __forceinline__ void mma_k32(int (&c)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1) {
  constexpr bool sa = static_cast<TA>(-1) < static_cast<TA>(0);
  constexpr bool sb = static_cast<TB>(-1) < static_cast<TB>(0);
  if constexpr (sa && sb) DMLQ_MMA_K32("s8", "s8");
  else if constexpr (sa) DMLQ_MMA_K32("s8", "u8");
  else if constexpr (sb) DMLQ_MMA_K32("u8", "s8");
  else DMLQ_MMA_K32("u8", "u8");
}
#undef DMLQ_MMA_K32

}  // namespace dmlq_mma
