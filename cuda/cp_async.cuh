// Asynchronous global -> shared copies (sm_80+ cp.async), shared by the kernels that stage
// through shared memory: the tensor-core matmul's tile pipeline and the narrow types'
// quantize. The host harness (tests/cuda_host) queues each copy and lands it only when a
// cp.async.wait_group lets it, so a wait one group too weak changes the host result too.
#pragma once

#include "ptx.cuh"

namespace dmlq {

// A shared-memory pointer as the 32-bit address cp.async and ldmatrix take.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; the bytes past src_bytes (0..16) are zero-filled.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, unsigned src_bytes) {
  DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16, %2;", (),
               (DMLQ_IN("r", dst), DMLQ_IN("l", __cvta_generic_to_global(src)), DMLQ_IN("r", src_bytes)));
}

// 16 whole bytes, no zero fill (one LDGSTS; .cg: cached in L2 only).
__device__ __forceinline__ void cp_async16_whole(unsigned dst, const void* src) {
  DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16;", (),
               (DMLQ_IN("r", dst), DMLQ_IN("l", __cvta_generic_to_global(src))));
}

__device__ __forceinline__ void cp_async_commit() {
  DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  DMLQ_PTX_MEM("cp.async.wait_group %0;", (), (DMLQ_IN("n", N)));
}

}  // namespace dmlq
