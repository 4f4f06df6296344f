// The block geometry that the tensor-core kernels share (matmul_mma.cu's mma.sync tile and
// matmul_wgmma.cu's warpgroup tile): the launch check and a block's output tile and k range.
#pragma once

#include "common.cuh"

namespace dmlq_mma {

constexpr int kGroupM = 8;  // tile rows walked together for L2 reuse

// A block's output tile and k range. Grouped block order: consecutive blocks walk kGroupM
// tile rows down one tile column, so the blocks resident at once share A rows and B columns
// in L2. The grid may be 1-D (tiles_m * tiles_n) or 2-D (tiles_n, tiles_m): only the linear
// block id is used. Split-K: block `lin` computes k range split = lin / tiles of its tile
// (k_chunk a multiple of the k tile). False for a block past the last tile.
// A wrong block size or too little dynamic shared memory traps instead of computing garbage.
__device__ __forceinline__ void check_launch(unsigned threads, unsigned smem_bytes) {
  unsigned dyn;
  DMLQ_PTX("mov.u32 %0, %%dynamic_smem_size;", (DMLQ_OUT("r", dyn)), ());
  if (blockDim.x != threads || dyn < smem_bytes) __trap();
}

template <int BM, int BN>
__device__ __forceinline__ bool block_tile(int M, int N, int K, int splits, int k_chunk, int& split, int& k_begin,
                                           int& k_end, int& m0, int& n0) {
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const long long tiles = static_cast<long long>(tiles_m) * tiles_n;
  const long long lin = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  if (lin >= tiles * splits) return false;
  split = static_cast<int>(lin / tiles);
  const int pid = static_cast<int>(lin - split * tiles);
  k_begin = split * k_chunk;
  k_end = splits > 1 ? min(K, k_begin + k_chunk) : K;
  const int per_group = kGroupM * tiles_n;
  const int group = pid / per_group;
  const int first_m = group * kGroupM;
  const int gsize = min(tiles_m - first_m, kGroupM);
  const int in_group = pid - group * per_group;
  m0 = (first_m + in_group % gsize) * BM;
  n0 = (in_group / gsize) * BN;
  return true;
}

}  // namespace dmlq_mma
