// Element-wise quantized operators: quantize, dequantize, quantized add.
//
// Variants (dmlq/gpu/elementwise.py picks one from the canonical layout: size-1
// dims dropped, dims flipped/sorted by the output's strides, mergeable dims merged):
//   contig   every tensor operand dense in one common order, scale/zero point per
//            tensor. 16-byte vector loads/stores (uint4) of V elements per thread,
//            V = 16 / narrowest itemsize; a scalar head (`head` elements) makes all
//            pointers 16-byte aligned, head = n when no common head exists (all
//            scalar). Grid-stride loop, grid = SMs x resident blocks per SM.
//   axis     dense operands, scale/zero point varying along one (merged) axis:
//            the tensor is (outer, L, inner) and element i uses index
//            c = (i / inner) % L. Each thread walks elements blockDim apart
//            (coalesced, kUnroll loads in flight) and advances (i % inner, c) by
//            adding precomputed steps with carries: no division per element.
//            Parameter loads are L1 hits, coalesced (inner == 1) or broadcast.
//   table    quantized add with every operand dense (the contig case) and at
//            least TABLE_MIN_ELEMENTS (dmlq/gpu/elementwise.py) elements: the
//            add of two 8-bit inputs with per-tensor parameters is a function of
//            65,536 input pairs, so add_table_build evaluates add1 once per pair
//            (the same arithmetic, hence bit-exact) into a 64 KiB table, and
//            add_table copies it to shared memory per persistent block and does
//            one lookup per element: ~4 instructions instead of ~24, so the add
//            is bound by its 3 bytes per element of HBM traffic.
//   strided  anything else: up to 8 dims, any element strides per operand
//            (0 = broadcast, negative = reversed view), out included. Per element
//            the linear index is split into coordinates by magic-number division
//            (32-bit) or plain 64-bit division (WIDE: some tensor spans >= 2**31
//            elements); shape/strides travel by value in a Geo32/Geo64 struct.
//
// Launch conventions: 256 threads per block. Every scale / zero point arrives as
// (pointer, value): a non-null pointer is read in the kernel (per tensor: once per
// thread, an L1 broadcast; the host never reads device memory), a null pointer
// means the by-value argument (host scalars; 0 for an omitted zero point).
// Quantize's scale may be FLOAT32 or FLOAT16 (runtime flag scale_f16), so the
// instantiations are <input, output> only. n == 0 returns at once (and the
// Python side launches nothing).
//
// Napkin math (HBM bound; H100 SXM ~3.35 TB/s, H200 ~4.8 TB/s):
//   quantize  f32->i8: 4+1 = 5 B/elem -> ~670 G elem/s (H100); f16->i8: 3 B; i32->i8: 5 B.
//   dequant   i8->f32: 1+4 = 5 B; i8->f16: 3 B; i32->f32: 8 B; i16->f16: 4 B.
//   add       i8+i8->i8: 3 B/elem -> ~1.1 T elem/s (H100).
// Per element the ALU work is ~20 FP32 instructions (div.rn.f32 without ftz is
// a short Newton sequence plus a rarely taken slow path, then rint/min/max/cvt):
// H100 does ~30 T FP32 inst/s, so even add (3 B/elem) has ~1.4x headroom.
// But not every instruction issues at that rate: MUFU.RCP and FCHK (inside
// div.rn.f32), FRND and F2I run at 16 per clock per SM, a quarter of FP32. Four
// of them per element cap quantize at 4 elem/clk/SM = ~1.05 T elem/s on the H200
// (132 SMs, 1.98 GHz), and float16 -> int8 (3 B/elem) needs 1.41 T at 4.2 TB/s: the
// H200 measured 0.86 T elem/s (0.61 of the copy bandwidth; float32 -> uint8, 5 B/elem,
// 0.93). So quantize_contig divides by its per-tensor scale through a per-thread
// reciprocal and two FMA corrections (common.cuh reciprocal_div, the same
// correctly rounded quotient) and rounds with a float add (round_clamp): 15.6
// sm_90 instructions an element in float16 -> int8's 16-element loop (250), none
// at a quarter rate (int32 input converts with I2FP, full rate), a limit of ~8
// elem/clk/SM.
// All result-deciding float operations use common.cuh's ieee_* (no ftz, no FMA).
#include "common.cuh"

namespace dmlq {
namespace ew {

constexpr int kThreads = 256;  // every kernel here is launched with 256 threads
constexpr int kUnroll = 8;     // elements in flight per thread (axis)
constexpr int kStridedUnroll = 4;  // elements in flight per thread (strided)
constexpr int kMaxDims = 8;
constexpr int kOperands = 4;   // Geo operand slots: 0 out, 1 x|q|a, 2 scale|b, 3 zero point

// ---- raw 32-bit words <-> elements (register-only vector unpacking) ----

template <typename T> __device__ __forceinline__ T from_bits(unsigned b);
template <> __device__ __forceinline__ int8 from_bits<int8>(unsigned b) {
  return static_cast<int8>(b & 0xFFu);
}
template <> __device__ __forceinline__ uint8 from_bits<uint8>(unsigned b) {
  return static_cast<uint8>(b & 0xFFu);
}
template <> __device__ __forceinline__ short from_bits<short>(unsigned b) {
  return static_cast<short>(b & 0xFFFFu);
}
template <> __device__ __forceinline__ unsigned short from_bits<unsigned short>(unsigned b) {
  return static_cast<unsigned short>(b & 0xFFFFu);
}
template <> __device__ __forceinline__ float16 from_bits<float16>(unsigned b) {
  return float16{static_cast<unsigned short>(b & 0xFFFFu)};
}
template <> __device__ __forceinline__ int from_bits<int>(unsigned b) { return static_cast<int>(b); }
template <> __device__ __forceinline__ unsigned from_bits<unsigned>(unsigned b) { return b; }
template <> __device__ __forceinline__ float from_bits<float>(unsigned b) { return __uint_as_float(b); }

// The element's bits in the low sizeof(T) bytes, the rest zero.
template <typename T> __device__ __forceinline__ unsigned to_bits(T v);
template <> __device__ __forceinline__ unsigned to_bits<int8>(int8 v) { return static_cast<uint8>(v); }
template <> __device__ __forceinline__ unsigned to_bits<uint8>(uint8 v) { return v; }
template <> __device__ __forceinline__ unsigned to_bits<float16>(float16 v) { return v.bits; }
template <> __device__ __forceinline__ unsigned to_bits<float>(float v) { return __float_as_uint(v); }

template <typename T>
__device__ __forceinline__ T get_elem(const unsigned* w, int k) {
  return from_bits<T>(w[(k * sizeof(T)) / 4] >> (8 * ((k * sizeof(T)) % 4)));
}

template <typename T>
__device__ __forceinline__ void put_elem(unsigned* w, int k, T v) {
  w[(k * sizeof(T)) / 4] |= to_bits<T>(v) << (8 * ((k * sizeof(T)) % 4));
}

// W words (1, 2 or a multiple of 4) from/to an address aligned to their bytes (16 at most).
template <int W>
__device__ __forceinline__ void load_words(unsigned (&w)[W], const void* p) {
  static_assert(W == 1 || W == 2 || W % 4 == 0, "one word, a uint2 or whole uint4s");
  if constexpr (W == 1) {
    w[0] = __ldg(static_cast<const unsigned*>(p));
  } else if constexpr (W == 2) {
    const uint2 u = __ldg(static_cast<const uint2*>(p));
    w[0] = u.x;
    w[1] = u.y;
  } else {
    const uint4* s = static_cast<const uint4*>(p);
#pragma unroll
    for (int j = 0; j < W / 4; ++j) {
      const uint4 u = __ldg(s + j);
      w[4 * j] = u.x;
      w[4 * j + 1] = u.y;
      w[4 * j + 2] = u.z;
      w[4 * j + 3] = u.w;
    }
  }
}

template <int W>
__device__ __forceinline__ void store_words(void* p, const unsigned (&w)[W]) {
  static_assert(W == 1 || W == 2 || W % 4 == 0, "one word, a uint2 or whole uint4s");
  if constexpr (W == 1) {
    *static_cast<unsigned*>(p) = w[0];
  } else if constexpr (W == 2) {
    *static_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    uint4* d = static_cast<uint4*>(p);
#pragma unroll
    for (int j = 0; j < W / 4; ++j) d[j] = make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
  }
}

// Elements per vector of a contig kernel reading A and writing B. Narrowing (quantize):
// 16 bytes of the narrower type, so a thread stores one 16-byte vector and loads several
// (a warp's loads then stride by 32-64 bytes, which L1 serves whole: 0.90 of the copy
// bandwidth on the H100). Widening (dequantize): 16 bytes of the wider type, so a
// warp's stores are one contiguous 512-byte run; with 16 bytes of the narrower type a
// thread stored 64 (uint8 -> float32) or 32 (int8 -> float16) bytes, the warp's 16-byte
// stores 64 or 32 bytes apart, and the H100 measured 0.46 and 0.69 of the copy bandwidth.
template <typename A, typename B>
struct vec_width {
  static constexpr int value = sizeof(B) > sizeof(A) ? 16 / sizeof(B) : 16 / (sizeof(A) < sizeof(B) ? sizeof(A) : sizeof(B));
};

__device__ __forceinline__ int64 global_thread() {
  return static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64 thread_count() { return static_cast<int64>(gridDim.x) * blockDim.x; }

// ---- the per-element arithmetic (docs/semantics.md) ----

template <typename Q, typename X>
__device__ __forceinline__ Q quantize1(X x, float s, int zp) {
  return requantize<Q>(to_f32(x), s, zp);  // int32: __int2float_rn; half: exact
}

// float32(int64(q) - int64(zp)): 8/16-bit differences are exact in int32.
template <typename I>
__device__ __forceinline__ float diff_f32(I q, int64 zp) {
  if constexpr (sizeof(I) <= 2) {
    return to_f32(static_cast<int>(q) - static_cast<int>(zp));
  } else {
    return to_f32(static_cast<int64>(q) - zp);
  }
}

template <typename O, typename I>
__device__ __forceinline__ O dequantize1(I q, int64 zp, float s) {
  return from_f32<O>(ieee_mul(diff_f32(q, zp), s));
}

struct AddParams {
  float as, bs, os;
  int az, bz, oz;
};

template <typename O>
__device__ __forceinline__ O add1(int a, int b, const AddParams& p) {
  const float av = ieee_mul(to_f32(a - p.az), p.as);
  const float bv = ieee_mul(to_f32(b - p.bz), p.bs);
  return requantize<O>(ieee_add(av, bv), p.os, p.oz);
}

// A per-tensor parameter: the device value when p is set, else the host value.
template <typename T>
__device__ __forceinline__ float scale_at(const T* p, int64 off, float v) {
  return p ? to_f32(p[off]) : v;
}
// A quantize scale of either float type (FLOAT32 or FLOAT16, flag f16), so the
// input type alone picks the instantiation.
__device__ __forceinline__ float scale_any(const void* p, int f16, int64 off, float v) {
  if (!p) return v;
  return f16 ? to_f32(static_cast<const float16*>(p)[off]) : static_cast<const float*>(p)[off];
}
template <typename T>
__device__ __forceinline__ int64 zp_at(const T* p, int64 off, int64 v) {
  return p ? static_cast<int64>(p[off]) : v;
}

// ---- contig: vector body + scalar head/tail ----

// Elements [0, head) and [head + nvec*V, n) one at a time; f(i) does element i.
template <typename F>
__device__ __forceinline__ void scalar_rest(int64 n, int64 head, int64 tail, F f) {
  const int64 count = head + (n - tail);
  for (int64 k = global_thread(); k < count; k += thread_count()) f(k < head ? k : tail + (k - head));
}

template <typename X, typename Y, typename F>
__device__ __forceinline__ void contig_unary(const X* __restrict__ x, Y* __restrict__ y, int64 n,
                                             int64 head, F f) {
  constexpr int V = vec_width<X, Y>::value;
  constexpr int WX = V * sizeof(X) / 4, WY = V * sizeof(Y) / 4;
  const int64 nvec = (n - head) / V;
  for (int64 v = global_thread(); v < nvec; v += thread_count()) {
    const int64 i = head + v * V;
    unsigned wx[WX], wy[WY];
    load_words(wx, x + i);
#pragma unroll
    for (int k = 0; k < WY; ++k) wy[k] = 0u;
#pragma unroll
    for (int k = 0; k < V; ++k) put_elem<Y>(wy, k, f(get_elem<X>(wx, k)));
    store_words(y + i, wy);
  }
  scalar_rest(n, head, head + nvec * V, [&](int64 i) { y[i] = f(x[i]); });
}

template <typename A, typename B, typename Y, typename F>
__device__ __forceinline__ void contig_binary(const A* __restrict__ a, const B* __restrict__ b,
                                              Y* __restrict__ y, int64 n, int64 head, F f) {
  static_assert(sizeof(A) == 1 && sizeof(B) == 1 && sizeof(Y) == 1, "8-bit operands only");
  constexpr int V = 16, W = 4;
  const int64 nvec = (n - head) / V;
  for (int64 v = global_thread(); v < nvec; v += thread_count()) {
    const int64 i = head + v * V;
    unsigned wa[W], wb[W], wy[W];
    load_words(wa, a + i);
    load_words(wb, b + i);
#pragma unroll
    for (int k = 0; k < W; ++k) wy[k] = 0u;
#pragma unroll
    for (int k = 0; k < V; ++k) put_elem<Y>(wy, k, f(get_elem<A>(wa, k), get_elem<B>(wb, k)));
    store_words(y + i, wy);
  }
  scalar_rest(n, head, head + nvec * V, [&](int64 i) { y[i] = f(a[i], b[i]); });
}

// ---- axis: position (j = i % inner, c = (i / inner) % L) advanced by steps ----

struct AxisStep {
  unsigned dj, dc;  // step % inner, (step / inner) % L
};

__device__ __forceinline__ AxisStep axis_step(int64 step, unsigned inner, unsigned L) {
  const int64 q = step / inner;
  return {static_cast<unsigned>(step - q * inner), static_cast<unsigned>(q % L)};
}

// inner, L < 2**31, so j + dj < 2 * inner and c + 1 + dc < 2 * L fit in 32 bits.
__device__ __forceinline__ void axis_advance(unsigned& j, unsigned& c, AxisStep s, unsigned inner,
                                             unsigned L) {
  j += s.dj;
  if (j >= inner) {
    j -= inner;
    ++c;
  }
  c += s.dc;
  if (c >= L) c -= L;
}

// Calls f(i, c) for every element i with c its index along the axis.
template <typename F>
__device__ __forceinline__ void axis_loop(int64 n, unsigned inner, unsigned L, F f) {
  const int64 B = blockDim.x;
  const int64 tile = B * kUnroll;
  const int64 grid_step = static_cast<int64>(gridDim.x) * tile;
  int64 base = static_cast<int64>(blockIdx.x) * tile + threadIdx.x;
  if (base >= n) return;
  const AxisStep s0 = axis_step(base, inner, L);  // position of `base` = step from 0
  unsigned j = s0.dj, c = s0.dc;
  const AxisStep s1 = axis_step(B, inner, L), sg = axis_step(grid_step, inner, L);
  for (; base < n; base += grid_step) {
    f(base, j, c, s1);
    axis_advance(j, c, sg, inner, L);
  }
}

// ---- strided: coordinates by division, offsets per operand ----

struct Geo32 {  // mirrors GEO32 in dmlq/gpu/elementwise.py; dim 0 is the innermost
  int size[kMaxDims];
  unsigned magic[kMaxDims];
  unsigned shift[kMaxDims];
  int stride[kOperands][kMaxDims];
  int ndim;
};

struct Geo64 {  // mirrors GEO64
  int64 size[kMaxDims];
  int64 stride[kOperands][kMaxDims];
  int64 ndim;
};

// q = i / size[d] for 0 <= i < 2**31: t = umulhi(i, m); q = (t + i) >> s.
__device__ __forceinline__ int div_dim(const Geo32& g, int d, int i) {
  const unsigned u = static_cast<unsigned>(i);
  return static_cast<int>((__umulhi(u, g.magic[d]) + u) >> g.shift[d]);
}
__device__ __forceinline__ int64 div_dim(const Geo64& g, int d, int64 i) { return i / g.size[d]; }

// Element offsets of linear index i for the four operand slots. The dim loop
// stays rolled: g lives in the constant bank (uniform indexed loads), and
// unrolling 8 dims x kStridedUnroll elements x every dtype combination costs
// minutes of NVRTC time for no measurable gain.
template <typename G, typename I>
__device__ __forceinline__ void offsets(const G& g, I i, I (&off)[kOperands]) {
#pragma unroll
  for (int k = 0; k < kOperands; ++k) off[k] = 0;
  const int nd = static_cast<int>(g.ndim);
#pragma unroll 1
  for (int d = 0; d < nd; ++d) {
    I coord = i;
    if (d + 1 < nd) {
      const I q = div_dim(g, d, i);
      coord = i - q * static_cast<I>(g.size[d]);
      i = q;
    }
#pragma unroll
    for (int k = 0; k < kOperands; ++k) off[k] += coord * static_cast<I>(g.stride[k][d]);
  }
}

template <bool WIDE> struct GeoOf;
template <> struct GeoOf<false> { using type = Geo32; using index = int; };
template <> struct GeoOf<true> { using type = Geo64; using index = int64; };

// Calls f(base, blockDim) for each tile of kStridedUnroll elements blockDim apart
// owned by this thread; f does loads for all kStridedUnroll first, then stores.
template <typename F>
__device__ __forceinline__ void strided_loop(int64 n, F f) {
  const int64 B = blockDim.x;
  const int64 tile = B * kStridedUnroll;
  for (int64 base = static_cast<int64>(blockIdx.x) * tile + threadIdx.x; base < n;
       base += static_cast<int64>(gridDim.x) * tile) {
    f(base, B);
  }
}

}  // namespace ew
}  // namespace dmlq

using namespace dmlq;
using namespace dmlq::ew;

// =============================== quantize ===================================

template <typename X, typename Q>
__global__ void __launch_bounds__(kThreads)
quantize_contig(const X* __restrict__ x, Q* __restrict__ y, int64 n, int64 head,
                const void* __restrict__ scale_p, int scale_f16, float scale_v,
                const Q* __restrict__ zp_p, int zp_v) {
  if (n <= 0) return;
  const float s = scale_any(scale_p, scale_f16, 0, scale_v);
  const int zp = static_cast<int>(zp_at(zp_p, 0, zp_v));
  if (reciprocal_ok(s)) {  // the same for every thread: one path per launch
    const Reciprocal r = reciprocal(s);
    contig_unary(x, y, n, head, [=](X v) { return round_saturate<Q>(reciprocal_div(to_f32(v), r), zp); });
  } else {
    contig_unary(x, y, n, head, [=](X v) { return quantize1<Q>(v, s, zp); });
  }
}

template <typename X, typename Q>
__global__ void __launch_bounds__(kThreads)
quantize_axis(const X* __restrict__ x, Q* __restrict__ y, int64 n, unsigned inner, unsigned L,
              const void* __restrict__ scale_p, int scale_f16, int64 scale_st, float scale_v,
              const Q* __restrict__ zp_p, int64 zp_st, int zp_v) {
  if (n <= 0) return;
  axis_loop(n, inner, L, [&](int64 base, unsigned j, unsigned c, AxisStep s1) {
    X xv[kUnroll];
    float sv[kUnroll];
    int zv[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64 i = base + k * static_cast<int64>(blockDim.x);
      if (i < n) {
        xv[k] = x[i];
        sv[k] = scale_any(scale_p, scale_f16, c * scale_st, scale_v);
        zv[k] = static_cast<int>(zp_at(zp_p, c * zp_st, zp_v));
      }
      axis_advance(j, c, s1, inner, L);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64 i = base + k * static_cast<int64>(blockDim.x);
      if (i < n) y[i] = quantize1<Q>(xv[k], sv[k], zv[k]);
    }
  });
}

template <typename X, typename Q, bool WIDE>
__global__ void __launch_bounds__(kThreads)
quantize_strided(const X* __restrict__ x, Q* __restrict__ y, int64 n,
                 const typename GeoOf<WIDE>::type g,
                 const void* __restrict__ scale_p, int scale_f16, float scale_v,
                 const Q* __restrict__ zp_p, int zp_v) {
  using I = typename GeoOf<WIDE>::index;
  if (n <= 0) return;
  strided_loop(n, [&](int64 base, int64 B) {
    X xv[kStridedUnroll];
    float sv[kStridedUnroll];
    int zv[kStridedUnroll];
    I yo[kStridedUnroll];
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      const int64 i = base + k * B;
      if (i < n) {
        I off[kOperands];
        offsets(g, static_cast<I>(i), off);
        yo[k] = off[0];
        xv[k] = x[off[1]];
        sv[k] = scale_any(scale_p, scale_f16, off[2], scale_v);
        zv[k] = static_cast<int>(zp_at(zp_p, off[3], zp_v));
      }
    }
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      if (base + k * B < n) y[yo[k]] = quantize1<Q>(xv[k], sv[k], zv[k]);
    }
  });
}

// ============================== dequantize ==================================
// The scale has the output's dtype (FLOAT32 or FLOAT16).

template <typename I, typename O>
__global__ void __launch_bounds__(kThreads)
dequantize_contig(const I* __restrict__ q, O* __restrict__ y, int64 n, int64 head,
                  const O* __restrict__ scale_p, float scale_v, const I* __restrict__ zp_p, int64 zp_v) {
  if (n <= 0) return;
  const float s = scale_at(scale_p, 0, scale_v);
  const int64 zp = zp_at(zp_p, 0, zp_v);
  contig_unary(q, y, n, head, [=](I v) { return dequantize1<O>(v, zp, s); });
}

template <typename I, typename O>
__global__ void __launch_bounds__(kThreads)
dequantize_axis(const I* __restrict__ q, O* __restrict__ y, int64 n, unsigned inner, unsigned L,
                const O* __restrict__ scale_p, int64 scale_st, float scale_v,
                const I* __restrict__ zp_p, int64 zp_st, int64 zp_v) {
  if (n <= 0) return;
  axis_loop(n, inner, L, [&](int64 base, unsigned j, unsigned c, AxisStep s1) {
    I qv[kUnroll];
    float sv[kUnroll];
    int64 zv[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64 i = base + k * static_cast<int64>(blockDim.x);
      if (i < n) {
        qv[k] = q[i];
        sv[k] = scale_at(scale_p, c * scale_st, scale_v);
        zv[k] = zp_at(zp_p, c * zp_st, zp_v);
      }
      axis_advance(j, c, s1, inner, L);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64 i = base + k * static_cast<int64>(blockDim.x);
      if (i < n) y[i] = dequantize1<O>(qv[k], zv[k], sv[k]);
    }
  });
}

template <typename I, typename O, bool WIDE>
__global__ void __launch_bounds__(kThreads)
dequantize_strided(const I* __restrict__ q, O* __restrict__ y, int64 n,
                   const typename GeoOf<WIDE>::type g,
                   const O* __restrict__ scale_p, float scale_v,
                   const I* __restrict__ zp_p, int64 zp_v) {
  using J = typename GeoOf<WIDE>::index;
  if (n <= 0) return;
  strided_loop(n, [&](int64 base, int64 B) {
    I qv[kStridedUnroll];
    float sv[kStridedUnroll];
    int64 zv[kStridedUnroll];
    J yo[kStridedUnroll];
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      const int64 i = base + k * B;
      if (i < n) {
        J off[kOperands];
        offsets(g, static_cast<J>(i), off);
        yo[k] = off[0];
        qv[k] = q[off[1]];
        sv[k] = scale_at(scale_p, off[2], scale_v);
        zv[k] = zp_at(zp_p, off[3], zp_v);
      }
    }
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      if (base + k * B < n) y[yo[k]] = dequantize1<O>(qv[k], zv[k], sv[k]);
    }
  });
}

// ============================ quantized add =================================
// Scales and zero points are one element each (DirectML): loaded once per thread.

#define DMLQ_ADD_PARAMS                                                                     \
  const float *__restrict__ as_p, float as_v, const float *__restrict__ bs_p, float bs_v,  \
      const float *__restrict__ os_p, float os_v, const A *__restrict__ az_p, int az_v,    \
      const B *__restrict__ bz_p, int bz_v, const O *__restrict__ oz_p, int oz_v

#define DMLQ_ADD_LOAD_PARAMS                                                                \
  AddParams p;                                                                              \
  p.as = scale_at(as_p, 0, as_v);                                                           \
  p.bs = scale_at(bs_p, 0, bs_v);                                                           \
  p.os = scale_at(os_p, 0, os_v);                                                           \
  p.az = static_cast<int>(zp_at(az_p, 0, az_v));                                            \
  p.bz = static_cast<int>(zp_at(bz_p, 0, bz_v));                                            \
  p.oz = static_cast<int>(zp_at(oz_p, 0, oz_v))

template <typename A, typename B, typename O>
__global__ void __launch_bounds__(kThreads)
add_contig(const A* __restrict__ a, const B* __restrict__ b, O* __restrict__ y, int64 n, int64 head,
           DMLQ_ADD_PARAMS) {
  if (n <= 0) return;
  DMLQ_ADD_LOAD_PARAMS;
  contig_binary(a, b, y, n, head, [=](A av, B bv) { return add1<O>(av, bv, p); });
}

template <typename A, typename B, typename O, bool WIDE>
__global__ void __launch_bounds__(kThreads)
add_strided(const A* __restrict__ a, const B* __restrict__ b, O* __restrict__ y, int64 n,
            const typename GeoOf<WIDE>::type g, DMLQ_ADD_PARAMS) {
  using I = typename GeoOf<WIDE>::index;
  if (n <= 0) return;
  DMLQ_ADD_LOAD_PARAMS;
  strided_loop(n, [&](int64 base, int64 Bk) {
    int av[kStridedUnroll], bv[kStridedUnroll];
    I yo[kStridedUnroll];
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      const int64 i = base + k * Bk;
      if (i < n) {
        I off[kOperands];
        offsets(g, static_cast<I>(i), off);
        yo[k] = off[0];
        av[k] = a[off[1]];
        bv[k] = b[off[2]];
      }
    }
#pragma unroll
    for (int k = 0; k < kStridedUnroll; ++k) {
      if (base + k * Bk < n) y[yo[k]] = add1<O>(av[k], bv[k], p);
    }
  });
}

// One thread per input pair t = (a bits) << 8 | (b bits): table[t] = add1(a, b).
// Launch: 256 blocks of 256 threads.
template <typename A, typename B, typename O>
__global__ void __launch_bounds__(kThreads)
add_table_build(O* __restrict__ table, DMLQ_ADD_PARAMS) {
  DMLQ_ADD_LOAD_PARAMS;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < 65536) table[t] = add1<O>(static_cast<A>(t >> 8), static_cast<B>(t & 255), p);
}

// The contig add through the table: 64 KiB of dynamic shared memory, filled
// once per block (launch a persistent grid), then one lookup per element.
template <typename A, typename B, typename O>
__global__ void __launch_bounds__(kThreads)
add_table(const A* __restrict__ a, const B* __restrict__ b, O* __restrict__ y, int64 n, int64 head,
          const O* __restrict__ table) {
  DMLQ_DYNAMIC_SHARED(16, unsigned char, lut);
  if (n <= 0) return;
  const uint4* src = reinterpret_cast<const uint4*>(table);
  for (int i = threadIdx.x; i < 65536 / 16; i += blockDim.x) reinterpret_cast<uint4*>(lut)[i] = __ldg(src + i);
  __syncthreads();
  contig_binary(a, b, y, n, head, [&](A av, B bv) {
    return static_cast<O>(lut[(static_cast<unsigned>(static_cast<uint8>(av)) << 8) | static_cast<uint8>(bv)]);
  });
}
