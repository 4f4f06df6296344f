// Shared by cuda/avgpool.cu and cuda/avgpool_cl.cu: the quantization parameters, the
// docs/semantics.md epilogue, the window-sum table, tap ranges and the row-span loads.
#pragma once
#include "common.cuh"

namespace avgpool_detail {

// Per-channel flags of the quantization parameters (bit set: indexed by channel, else [0]).
enum { PC_XS = 1, PC_XZP = 2, PC_OS = 4, PC_OZP = 8 };

struct Quant {
  float xs, os;
  int xzp, ozp;
};

template <typename TX, typename TO>
__device__ __forceinline__ Quant load_quant(int c, const float* xs, const TX* xzp, const float* os,
                                            const TO* ozp, int per_channel) {
  Quant q;
  q.xs = __ldg(xs + ((per_channel & PC_XS) ? c : 0));
  q.xzp = xzp ? static_cast<int>(__ldg(xzp + ((per_channel & PC_XZP) ? c : 0))) : 0;
  q.os = __ldg(os + ((per_channel & PC_OS) ? c : 0));
  q.ozp = ozp ? static_cast<int>(__ldg(ozp + ((per_channel & PC_OZP) ? c : 0))) : 0;
  return q;
}

// The docs/semantics.md result for a window sum S over `count` divisor taps.
template <typename TO, typename I>
__device__ __forceinline__ TO pool_value(I s, I count, const Quant& q) {
  if (count == 0) return static_cast<TO>(q.ozp);
  const float v = dmlq::ieee_div(dmlq::ieee_mul(dmlq::to_f32(s), q.xs), dmlq::to_f32(count));
  return dmlq::requantize<TO>(v, q.os, q.ozp);
}

// lut[i] = the output of a window sum smin + i over kvol taps (i < lut_n), built by the whole
// block, which waits for it. smin = kvol * (QMIN - x_zp): per-tensor quantization only.
template <typename TX, typename TO>
__device__ __forceinline__ void build_lut(TO* lut, int lut_n, int kvol, const float* xs, const TX* xzp,
                                          const float* os, const TO* ozp) {
  const Quant q0 = load_quant<TX, TO>(0, xs, xzp, os, ozp, 0);
  const int smin = kvol * (dmlq::qlimits<TX>::min - q0.xzp);
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  for (int i = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; i < lut_n; i += nthreads)
    lut[i] = pool_value<TO, int>(smin + i, kvol, q0);
  __syncthreads();
}

// n / d for n < 2**31, 1 <= d < 2**31; (magic, shift) from avgpool.py's _magic(d).
__device__ __forceinline__ unsigned fast_div(unsigned n, unsigned magic, int shift) {
  return (__umulhi(n, magic) + n) >> shift;
}

template <typename I>
__device__ __forceinline__ I ceil_div(I a, I b) {  // a > 0, b > 0; no overflow
  return b == 1 ? a : (a - 1) / b + 1;
}

// [k0, k1): the taps k < K of a window starting at `start` (step dil) with lo <= start + k*dil < hi.
template <typename I>
__device__ __forceinline__ void tap_range(I start, I K, I dil, I lo, I hi, I& k0, I& k1) {
  k0 = start >= lo ? I(0) : ceil_div<I>(lo - start, dil);
  k1 = start < hi ? min(K, ceil_div<I>(hi - start, dil)) : I(0);
  if (k1 < k0) k1 = k0;
}

// acc + the bytes of w selected by mask (0x01 per byte), as TX values.
template <typename TX> __device__ __forceinline__ int sum_bytes(unsigned w, unsigned mask, int acc);
template <> __device__ __forceinline__ int sum_bytes<int8>(unsigned w, unsigned mask, int acc) {
  return __dp4a(static_cast<int>(w), static_cast<int>(mask), acc);
}
template <> __device__ __forceinline__ int sum_bytes<uint8>(unsigned w, unsigned mask, int acc) {
  return static_cast<int>(__dp4a(w, mask, static_cast<unsigned>(acc)));
}

// dp4a mask selecting, within aligned word q, the bytes first .. first + kw - 1 of the span
// (0 <= first, 1 <= kw <= 4): a 0x01 in each byte of [lo, hi), the window's bytes inside the
// word. A closed form, no loop: the callers' (j, k) loops are unrolled, so it folds to a
// constant. The loop it replaces was left rolled by NVRTC in each of the OPT x NA unrolled
// copies, a uniform-datapath loop per mask and window row: 80 % of the instructions the
// H200's ncu counted in avgpool_tile<uint8, uint8, 3, 1, 16> (bench/results/gpu-2026-11-27).
__host__ __device__ constexpr unsigned tap_mask(int first, int kw, int q) {
  const int lo = (first > 4 * q ? first : 4 * q) - 4 * q;
  const int hi = (first + kw < 4 * q + 4 ? first + kw : 4 * q + 4) - 4 * q;
  return hi > lo ? (0x01010101u >> (8 * (4 - (hi - lo)))) << (8 * lo) : 0u;
}

// The 4 bytes at 4-aligned address a, those outside [lo, hi) read as 0.
__device__ __forceinline__ unsigned load_word_masked(unsigned long long a, unsigned long long lo,
                                                     unsigned long long hi) {
  if (a >= lo && a + 4 <= hi) return __ldg(reinterpret_cast<const unsigned*>(a));
  unsigned w = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    if (a + b >= lo && a + b < hi)
      w |= static_cast<unsigned>(__ldg(reinterpret_cast<const unsigned char*>(a + b))) << (8 * b);
  }
  return w;
}

// w[i] = p[i] for I <= i < N, p 4-byte aligned and p + I at word (PH + I) % 4 of a 16-byte
// chunk: as 16- and 8-byte loads where the alignment allows, else 4-byte ones (a warp of lanes at
// different planes reads a line per lane and load instruction, so fewer, wider loads).
template <int PH, int I, int N, int M>
__device__ __forceinline__ void load_aligned_words(const unsigned* p, unsigned (&w)[M]) {
  if constexpr (I < N) {
    constexpr int OFF = (PH + I) % 4;
    if constexpr (OFF == 0 && I + 4 <= N) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p + I));
      w[I] = v.x;
      w[I + 1] = v.y;
      w[I + 2] = v.z;
      w[I + 3] = v.w;
      load_aligned_words<PH, I + 4, N>(p, w);
    } else if constexpr (OFF % 2 == 0 && I + 2 <= N) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p + I));
      w[I] = v.x;
      w[I + 1] = v.y;
      load_aligned_words<PH, I + 2, N>(p, w);
    } else {
      w[I] = __ldg(p + I);
      load_aligned_words<PH, I + 1, N>(p, w);
    }
  }
}

// The words an L-byte span starting at row[w0] (w0 may be negative) touches: w[i] = aligned word
// i from the span's first, bytes outside row[0 .. W) read as 0, words past the span 0; returns
// the span's byte offset in w[0]. Only whole aligned words inside the row are read as words.
// Each word is then xored with `bias` (avgpool_strip: int8 summed as x + 128).
template <int L>
__device__ __forceinline__ unsigned fetch_span(const void* row, int w0, int W, unsigned (&w)[(L + 3) / 4 + 1],
                                               unsigned bias = 0u) {
  constexpr int NA = (L + 3) / 4;  // aligned words of the span
  constexpr int NW = (L + 6) / 4;  // words it can touch when it starts at any byte
  const unsigned long long lo = reinterpret_cast<unsigned long long>(row);
  const unsigned long long hi = lo + static_cast<unsigned>(W);
  const unsigned long long a = lo + static_cast<unsigned long long>(static_cast<long long>(w0));
  const unsigned long long wa = a & ~3ull;
  const unsigned s = static_cast<unsigned>(a & 3);
  const unsigned long long end = (a + L + 3) & ~3ull;  // one past the last word touched
  // word i is touched iff 4i < s + L: always for 4i < L (a compile-time fold), else by s
  auto touched = [&](int i) { return 4 * i < L || 4 * i < static_cast<int>(s) + L; };
  if (wa >= lo && end <= hi) {
    // words 0 .. NA-1 are always touched: vector loads by wa's place in its 16-byte chunk
    const unsigned* p = reinterpret_cast<const unsigned*>(wa);
    switch (static_cast<unsigned>(wa >> 2) & 3u) {
      case 0: load_aligned_words<0, 0, NA>(p, w); break;
      case 1: load_aligned_words<1, 0, NA>(p, w); break;
      case 2: load_aligned_words<2, 0, NA>(p, w); break;
      default: load_aligned_words<3, 0, NA>(p, w); break;
    }
#pragma unroll
    for (int i = NA; i < NW; ++i) w[i] = touched(i) ? __ldg(p + i) : 0u;
  } else {
#pragma unroll
    for (int i = 0; i < NW; ++i) w[i] = touched(i) ? load_word_masked(wa + 4 * i, lo, hi) : 0u;
  }
#pragma unroll
  for (int i = NW; i < NA + 1; ++i) w[i] = 0u;
  if (bias != 0u) {
#pragma unroll
    for (int i = 0; i < NA + 1; ++i) w[i] ^= bias;
  }
  return s;
}

// v[k] byte m = byte 4k + m of the span fetch_span read into w (s: its return value).
template <int L>
__device__ __forceinline__ void align_span(const unsigned (&w)[(L + 3) / 4 + 1], unsigned s,
                                           unsigned (&v)[(L + 3) / 4]) {
#pragma unroll
  for (int k = 0; k < (L + 3) / 4; ++k) v[k] = __funnelshift_r(w[k], w[k + 1], 8 * s);
}

// v[k] byte m = byte 4k + m of the L-byte span starting at row[w0] (w0 may be negative); bytes
// outside row[0 .. W) are 0.
template <int L>
__device__ __forceinline__ void load_span(const void* row, int w0, int W, unsigned (&v)[(L + 3) / 4]) {
  unsigned w[(L + 3) / 4 + 1];
  const unsigned s = fetch_span<L>(row, w0, W, w);
  align_span<L>(w, s, v);
}

}  // namespace avgpool_detail
