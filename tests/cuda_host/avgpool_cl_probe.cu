// cuda/avgpool_cl.cu's kernels run as one block of a grid too large for the host harness to
// walk (tests/test_select_avgpool_cl.py): the probe renames the block it runs and widens the
// grid it reports, then calls the kernel unchanged.
#include "avgpool_cl.cu"

// avgpool_cl_global as block (block_x, blockIdx.y) of a grid of grid_x blocks in x runs it. x and
// out are image n0 = block_x / splits of tensors of `items / splits` images (x's batch stride may
// be 0); the kernel gets them moved back n0 images, so image n0 lands on the buffers passed and
// any other image outside them. splits == 1: no chunk sums.
template <typename TX, typename TO, int VEC>
__global__ void avgpool_cl_global_at(const TX* x, TO* out, int items, int splits, int groups, long long vol,
                                     long long chunk, long long sxn, long long sxp, long long so_n, long long so_c,
                                     const float* xs, const TX* xzp, const float* os, const TO* ozp, int per_channel,
                                     int grid_x, int block_x) {
  ::cuda_host::machine().grid.x = static_cast<unsigned>(grid_x);
  ::cuda_host::machine().block_idx.x = static_cast<unsigned>(block_x);
  const long long n0 = block_x / splits;
  const unsigned long long back_x = static_cast<unsigned long long>(n0 * sxn);
  const unsigned long long back_out = static_cast<unsigned long long>(n0 * so_n);
  // (addresses moved as integers: the kernel forms the pointers it dereferences)
  const TX* x0 = reinterpret_cast<const TX*>(reinterpret_cast<unsigned long long>(x) - back_x);
  TO* out0 = reinterpret_cast<TO*>(reinterpret_cast<unsigned long long>(out) - back_out);
  avgpool_cl_global<TX, TO, VEC>(x0, out0, nullptr, items, splits, groups, vol, chunk, sxn, sxp, so_n, so_c, xs,
                                 xzp, os, ozp, per_channel);
}
