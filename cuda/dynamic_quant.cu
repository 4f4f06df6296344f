// dynamic_quantize_linear's range and parameters (ONNX DynamicQuantizeLinear, DirectML's
// DYNAMIC_QUANTIZE_LINEAR), bit-exact with docs/semantics.md:
//   hi = max(0, max of x), lo = min(0, min of x), NaN elements skipped (fmaxf / fminf);
//   scale = (hi == lo ? 1 : hi - lo) / (qmax - qmin), zp = round_clamp(qmin - lo / scale, qmin, qmax);
// then y = quantize_linear(x, scale, zp) by elementwise.cu's kernels (dmlq/gpu/dynquant.py).
//
//   dq_range<T>   T = float, float16 or bfloat16: x as one dense buffer of n elements (any memory order:
//                 min and max do not depend on it). Each block folds a grid-stride share of x,
//                 16 bytes a load on the 16-byte aligned middle, single elements at the ends,
//                 into (lo, hi) starting from (0, 0), and writes its pair to part[2 * block].
//   dq_params<Q>  One block: the blocks' pairs folded, then thread 0 computes scale and zp and
//                 writes them (one float32, one Q) for the quantize launch that follows on the
//                 stream (a device scale and zero point: no host read, no synchronize).
//   dq_rows<T, Q> per_row: one range per row of x (rows of `cols` dense elements, row r at
//                 x + (r / inner) * outer_stride + (r % inner) * inner_stride: x's leading axes
//                 as at most two strides, 0 for broadcast rows). A warp an item, an item a
//                 row or, with `splits` > 1 (few long rows), one of its splits of `chunk`
//                 elements. With one split lane 0 writes the row's scale and zero point; else
//                 (or with scale null: a dask chunk's rows, dmlq/dynquant.py) the item's
//                 (lo, hi) pair to part[2 * item], for:
//   dq_row_params<Q>  a warp a row: its splits' pairs folded, its scale and zero point (scale
//                 null: the folded pair to pairs[2 * row], a dask chunk's rows' ranges).
// Napkin (H100, float32 x of 64M elements): the range pass reads 256 MB (76 us at 3.35 TB/s)
// and the quantize pass 256 + 64 MB, so the whole call is bound at 1.25x quantize_linear's
// time; 2 FMNMX a 4-byte element against the ~9 instructions a byte the issue rate leaves.
// The grid is at most 4 waves of blocks (dmlq/gpu/dynquant.py), the parameters' pass one block.
// per_row (a (tokens, hidden) activation, the per-token scales of a W8A8 linear layer): the same
// bytes read once, then quantize's pass; a warp a row keeps 32 lanes x 16 bytes in flight a
// load, and rows fewer than a quarter of the warps the GPU holds are split (at least 8 KiB a
// split but a row's last; dmlq/gpu/dynquant.py).
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
template <> __device__ __forceinline__ void fold_vector<bfloat16>(const uint4& v, float& lo, float& hi) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // each half a float32's top: a shift or a mask, exact
    fold(__uint_as_float(w[k] << 16), lo, hi);
    fold(__uint_as_float(w[k] & 0xFFFF0000u), lo, hi);
  }
}

// Folds the n elements at x (one dense span) into (lo, hi), thread `lane` of `lanes` taking
// every lanes-th piece: 16 bytes a load on the 16-byte aligned middle, single elements at the
// ends (fewer than 16 / sizeof(T) each).
template <typename T>
__device__ __forceinline__ void fold_span(const T* x, long long n, long long lane, long long lanes, float& lo,
                                          float& hi) {
  typedef unsigned long long u64;
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "float32, float16 or bfloat16");
  const u64 b = reinterpret_cast<u64>(x), e = b + static_cast<u64>(n) * sizeof(T);
  const u64 a16 = min((b + 15) & ~15ull, e);  // [b, a16) and [z16, e): the ends
  const u64 z16 = max(e & ~15ull, a16);
  const long long head = static_cast<long long>((a16 - b) / sizeof(T));
  const long long edge = head + static_cast<long long>((e - z16) / sizeof(T));
  for (long long i = lane; i < edge; i += lanes) {
    const u64 at = i < head ? b + i * sizeof(T) : z16 + (i - head) * sizeof(T);
    fold(dmlq::to_f32(*reinterpret_cast<const T*>(at)), lo, hi);
  }
  const long long vectors = static_cast<long long>((z16 - a16) / 16);
  const uint4* xv = reinterpret_cast<const uint4*>(a16);
#pragma unroll 4
  for (long long i = lane; i < vectors; i += lanes) fold_vector<T>(__ldg(xv + i), lo, hi);
}

// (lo, hi) of a warp's lanes, in every lane.
__device__ __forceinline__ void warp_fold(float& lo, float& hi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
}

// The scale and zero point of the range [lo, hi] (0 in it, no NaN), written to *scale, *zp.
template <typename Q>
__device__ __forceinline__ void write_params(float lo, float hi, float* scale, Q* zp) {
  constexpr int QMIN = dmlq::qlimits<Q>::min, QMAX = dmlq::qlimits<Q>::max;
  const float span = hi == lo ? 1.0f : dmlq::ieee_add(hi, -lo);
  const float s = dmlq::ieee_div(span, static_cast<float>(QMAX - QMIN));
  const float zf = dmlq::ieee_add(static_cast<float>(QMIN), -dmlq::ieee_div(lo, s));
  *scale = s;
  *zp = static_cast<Q>(dmlq::round_clamp(zf, QMIN, QMAX));
}

// (lo, hi) of the block's threads, valid in thread 0 (shared: 2 x 8 floats).
__device__ __forceinline__ void block_fold(float& lo, float& hi, float* lows, float* highs) {
  warp_fold(lo, hi);
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
  DMLQ_SHARED(16, float, lows, [8]);
  DMLQ_SHARED(16, float, highs, [8]);
  float lo = 0.0f, hi = 0.0f;
  const long long tid = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  fold_span<T>(x, n, tid, static_cast<long long>(gridDim.x) * blockDim.x, lo, hi);
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
  if (threadIdx.x == 0) write_params(lo, hi, scale, zp);
}

// (256, 5): 48 registers and 5 blocks an SM, 0 spills (the two strides' 64-bit address math
// took the float kernels to 60 registers and 4 blocks without the bound).
template <typename T, typename Q>
__global__ void __launch_bounds__(256, 5) dq_rows(const T* __restrict__ x, long long rows, long long cols,
                                               long long inner, long long outer_stride,
                                               long long inner_stride, long long chunk, int splits,
                                               float* __restrict__ part, float* __restrict__ scale,
                                               Q* __restrict__ zp) {
  using namespace dq_detail;
  const int lane = threadIdx.x & 31;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const long long items = rows * splits;
  for (long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < items;
       i += warps) {  // (i is the same in a warp's lanes)
    const long long r = i / splits, c0 = (i - r * splits) * chunk, outer = r / inner;
    float lo = 0.0f, hi = 0.0f;
    fold_span<T>(x + outer * outer_stride + (r - outer * inner) * inner_stride + c0, max(min(chunk, cols - c0), 0ll),
                 lane, 32, lo, hi);
    warp_fold(lo, hi);
    if (lane == 0) {
      if (splits == 1 && scale != nullptr) {
        write_params(lo, hi, scale + r, zp + r);
      } else {
        part[2 * i] = lo;
        part[2 * i + 1] = hi;
      }
    }
  }
}

template <typename Q>
__global__ void __launch_bounds__(256) dq_row_params(const float* __restrict__ part, long long rows, int splits,
                                                     float* __restrict__ scale, Q* __restrict__ zp,
                                                     float* __restrict__ pairs) {
  using namespace dq_detail;
  const int lane = threadIdx.x & 31;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
    float lo = 0.0f, hi = 0.0f;
    const float* row = part + 2 * r * splits;
    for (int k = lane; k < splits; k += 32) {
      lo = fminf(lo, row[2 * k]);
      hi = fmaxf(hi, row[2 * k + 1]);
    }
    warp_fold(lo, hi);
    if (lane == 0) {
      if (scale != nullptr) {
        write_params(lo, hi, scale + r, zp + r);
      } else {
        pairs[2 * r] = lo;
        pairs[2 * r + 1] = hi;
      }
    }
  }
}
