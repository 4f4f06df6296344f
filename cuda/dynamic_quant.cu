// dynamic_quantize_linear's range and parameters (ONNX DynamicQuantizeLinear, DirectML's
// DYNAMIC_QUANTIZE_LINEAR), bit-exact with docs/semantics.md:
//   hi = max(0, max of x), lo = min(0, min of x), NaN elements skipped (fmaxf / fminf);
//   scale = (hi == lo ? 1 : hi - lo) / (qmax - qmin), zp = round_clamp(qmin - lo / scale, qmin, qmax);
// then y = quantize_linear(x, scale, zp) by elementwise.cu's kernels (dmlq/gpu/dynquant.py).
//
//   dq_range<T>   T = float or float16: x as one dense buffer of n elements (any memory order:
//                 min and max do not depend on it). Each block folds a grid-stride share of x,
//                 16 bytes a load on the 16-byte aligned middle, single elements at the ends,
//                 into (lo, hi) starting from (0, 0), and writes its pair to part[2 * block].
//   dq_params<Q>  One block: the blocks' pairs folded, then thread 0 computes scale and zp and
//                 writes them (one float32, one Q) for the quantize launch that follows on the
//                 stream (a device scale and zero point: no host read, no synchronize).
// Napkin (H100, float32 x of 64M elements): the range pass reads 256 MB (76 us at 3.35 TB/s)
// and the quantize pass 256 + 64 MB, so the whole call is bound at 1.25x quantize_linear's
// time; 2 FMNMX a 4-byte element against the ~9 instructions a byte the issue rate leaves.
// The grid is at most 4 waves of blocks (dmlq/gpu/dynquant.py), the parameters' pass one block.
#include "common.cuh"

namespace dq_detail {

__device__ __forceinline__ void fold(float v, float& lo, float& hi) {
  lo = fminf(lo, v);  // a NaN v leaves lo and hi as they are
  hi = fmaxf(hi, v);
}

template <typename T> __device__ __forceinline__ void fold_vector(const uint4& v, float& lo, float& hi);
template <> __device__ __forceinline__ void fold_vector<float>(const uint4& v, float& lo, float& hi) {
  fold(__uint_as_float(v.x), lo, hi);
  fold(__uint_as_float(v.y), lo, hi);
  fold(__uint_as_float(v.z), lo, hi);
  fold(__uint_as_float(v.w), lo, hi);
}
template <> __device__ __forceinline__ void fold_vector<float16>(const uint4& v, float& lo, float& hi) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    fold(dmlq::to_f32(float16{static_cast<unsigned short>(w[k] & 0xFFFFu)}), lo, hi);
    fold(dmlq::to_f32(float16{static_cast<unsigned short>(w[k] >> 16)}), lo, hi);
  }
}

// (lo, hi) of the block's threads, valid in thread 0 (shared: 2 x 8 floats).
__device__ __forceinline__ void block_fold(float& lo, float& hi, float* lows, float* highs) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    lows[warp] = lo;
    highs[warp] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < warps; ++k) {
      lo = fminf(lo, lows[k]);
      hi = fmaxf(hi, highs[k]);
    }
  }
}

}  // namespace dq_detail

template <typename T>
__global__ void __launch_bounds__(256) dq_range(const T* __restrict__ x, long long n, float* __restrict__ part) {
  using namespace dq_detail;
  typedef unsigned long long u64;
  constexpr int PER = 16 / static_cast<int>(sizeof(T));  // elements a 16-byte load
  DMLQ_SHARED(16, float, lows, [8]);
  DMLQ_SHARED(16, float, highs, [8]);
  float lo = 0.0f, hi = 0.0f;
  const u64 b = reinterpret_cast<u64>(x), e = b + static_cast<u64>(n) * sizeof(T);
  const u64 a16 = min((b + 15) & ~15ull, e);  // [b, a16) and [z16, e): fewer than PER elements each
  const u64 z16 = max(e & ~15ull, a16);
  const long long head = static_cast<long long>((a16 - b) / sizeof(T));
  const long long edge = head + static_cast<long long>((e - z16) / sizeof(T));
  const long long tid = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long threads = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = tid; i < edge; i += threads) {
    const u64 at = i < head ? b + i * sizeof(T) : z16 + (i - head) * sizeof(T);
    fold(dmlq::to_f32(*reinterpret_cast<const T*>(at)), lo, hi);
  }
  const long long vectors = static_cast<long long>((z16 - a16) / 16);
  const uint4* xv = reinterpret_cast<const uint4*>(a16);
#pragma unroll 4
  for (long long i = tid; i < vectors; i += threads) fold_vector<T>(__ldg(xv + i), lo, hi);
  static_assert(PER == 4 || PER == 8, "float32 or float16");
  block_fold(lo, hi, lows, highs);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = lo;
    part[2 * blockIdx.x + 1] = hi;
  }
}

template <typename Q>
__global__ void __launch_bounds__(256) dq_params(const float* __restrict__ part, int blocks,
                                                 float* __restrict__ scale, Q* __restrict__ zp) {
  using namespace dq_detail;
  DMLQ_SHARED(16, float, lows, [8]);
  DMLQ_SHARED(16, float, highs, [8]);
  float lo = 0.0f, hi = 0.0f;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) {
    lo = fminf(lo, part[2 * i]);
    hi = fmaxf(hi, part[2 * i + 1]);
  }
  block_fold(lo, hi, lows, highs);
  if (threadIdx.x == 0) {
    constexpr int QMIN = dmlq::qlimits<Q>::min, QMAX = dmlq::qlimits<Q>::max;
    const float span = hi == lo ? 1.0f : dmlq::ieee_add(hi, -lo);
    const float s = dmlq::ieee_div(span, static_cast<float>(QMAX - QMIN));
    const float zf = dmlq::ieee_add(static_cast<float>(QMIN), -dmlq::ieee_div(lo, s));
    *scale = s;
    *zp = static_cast<Q>(dmlq::round_clamp(zf, QMIN, QMAX));
  }
}
