// dmlq shared device code: the docs/semantics.md arithmetic in one place.
//
// Every float operation that decides a result bit goes through the ieee_*
// helpers below. They are inline PTX without the .ftz modifier, so results are
// IEEE-exact (subnormals kept) even though CuPy always compiles with -ftz=true,
// and the compiler cannot contract them into an FMA whatever --fmad says.
#pragma once

#include "ptx.cuh"

typedef signed char int8;
typedef unsigned char uint8;
typedef long long int64;

// IEEE binary16 storage. Not cuda_fp16.h's __half: that header is not shipped
// with the NVRTC wheel, and two PTX conversions are all dmlq needs.
struct __align__(2) float16 {
  unsigned short bits;
};
// bfloat16 storage: the top half of a float32 (converted by integer arithmetic below).
struct __align__(2) bfloat16 {
  unsigned short bits;
};

namespace dmlq {

__device__ __forceinline__ float ieee_div(float a, float b) {
  float r;
  DMLQ_PTX("div.rn.f32 %0, %1, %2;", (DMLQ_OUT("f", r)), (DMLQ_IN("f", a), DMLQ_IN("f", b)));
  return r;
}

__device__ __forceinline__ float ieee_mul(float a, float b) {
  float r;
  DMLQ_PTX("mul.rn.f32 %0, %1, %2;", (DMLQ_OUT("f", r)), (DMLQ_IN("f", a), DMLQ_IN("f", b)));
  return r;
}

__device__ __forceinline__ float ieee_fma(float a, float b, float c) {  // a * b + c, rounded once
  float r;
  DMLQ_PTX("fma.rn.f32 %0, %1, %2, %3;", (DMLQ_OUT("f", r)),
           (DMLQ_IN("f", a), DMLQ_IN("f", b), DMLQ_IN("f", c)));
  return r;
}

__device__ __forceinline__ float ieee_add(float a, float b) {
  float r;
  DMLQ_PTX("add.rn.f32 %0, %1, %2;", (DMLQ_OUT("f", r)), (DMLQ_IN("f", a), DMLQ_IN("f", b)));
  return r;
}

// Integer -> float32, round to nearest even (exact below 2**24).
__device__ __forceinline__ float to_f32(int v) { return __int2float_rn(v); }
__device__ __forceinline__ float to_f32(unsigned v) { return __uint2float_rn(v); }
__device__ __forceinline__ float to_f32(int64 v) { return __ll2float_rn(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(float16 v) {  // exact
  float r;
  DMLQ_PTX("cvt.f32.f16 %0, %1;", (DMLQ_OUT("f", r)), (DMLQ_IN("h", v.bits)));
  return r;
}

__device__ __forceinline__ float to_f32(bfloat16 v) {  // exact, a NaN's sign and payload kept
  return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
}

// float32 -> output float type, rounded once.
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float16 from_f32<float16>(float v) {
  float16 h;
  DMLQ_PTX("cvt.rn.f16.f32 %0, %1;", (DMLQ_OUT("h", h.bits)), (DMLQ_IN("f", v)));  // no .ftz: subnormal inputs kept
  return h;
}

// float32 -> bfloat16 in the top half of a word (its low half is left over): ties to even on
// the low 16 bits (a carry into the exponent rounds up to the next binade, or from the largest
// finite value to inf); a NaN stays a NaN of its sign (made quiet, so that the truncation cannot
// leave an infinity's code). Integer arithmetic, no cvt.rn.bf16.f32 (sm_80 on, and the sources
// do not branch on the arch): a float compare, a select, a shift, a mask and a three-way add.
__device__ __forceinline__ unsigned bf16_top(float v) {
  const unsigned u = __float_as_uint(v);
  return v != v ? (u | 0x00400000u) : u + 0x7FFFu + ((u >> 16) & 1u);
}

// Two bfloat16 of bf16_top in one word, the first in the low half: one byte permute.
__device__ __forceinline__ unsigned bf16_pair(unsigned top0, unsigned top1) { return __byte_perm(top0, top1, 0x7632); }

template <> __device__ __forceinline__ bfloat16 from_f32<bfloat16>(float v) {
  return bfloat16{static_cast<unsigned short>(bf16_top(v) >> 16)};
}

template <typename Q> struct qlimits;
template <> struct qlimits<int8> { static constexpr int min = -128, max = 127; };
template <> struct qlimits<uint8> { static constexpr int min = 0, max = 255; };

// t rounded half to even and clamped to [lo, hi], integers with |lo|, |hi| <= 2**22;
// a NaN t gives lo. The bounds are integers, so clamping before the rounding equals
// clamping after it. The rounding is one float add: for |c| <= 2**22 the sum
// c + 1.5 * 2**23 lies in [2**23, 2**24), where the ulp is 1, so the add rounds c to
// an integer with ties to even (the constant is even), and the sum's bits are
// 0x4B400000 plus that integer. Full-rate FP32/integer instructions, not FRND + F2I,
// which issue at a quarter of the FP32 rate on sm_80/sm_90 and bound quantize's
// element rate.
__device__ __forceinline__ int round_clamp(float t, int lo, int hi) {
  const float c = fminf(fmaxf(t, static_cast<float>(lo)), static_cast<float>(hi));
  return __float_as_int(ieee_add(c, 12582912.0f)) - 0x4B400000;
}

// Round half to even, clamp to [qmin - zp, qmax - zp] (so +-Inf saturate and no
// integer conversion overflows), add zp. NaN gives zp.
template <typename Q>
__device__ __forceinline__ Q round_saturate(float t, int zp) {
  const int r = round_clamp(t, qlimits<Q>::min - zp, qlimits<Q>::max - zp);
  return static_cast<Q>(t != t ? zp : r + zp);
}

// docs/semantics.md, "Requantizing a value": requantize(v, s, zp).
template <typename Q>
__device__ __forceinline__ Q requantize(float v, float s, int zp) {
  return round_saturate<Q>(ieee_div(v, s), zp);
}

// float32(int64(q) - int64(zp)) * scale: the difference is exact, rounded once.
template <typename I>
__device__ __forceinline__ float dequantize(I q, I zp, float scale) {
  return ieee_mul(to_f32(static_cast<int64>(q) - static_cast<int64>(zp)), scale);
}

// x / s for many x and one per-tensor s without a division per element. With
// y = RN(1 / s) (one ieee_div per thread), q0 = RN(x * y) has a small relative error,
// q1 = RN(q0 + RN(x - q0 s) * y) is then a faithful rounding of x / s, and one more
// step q2 = RN(q1 + (x - q1 s) * y) is RN(x / s) exactly: Markstein's theorem (a
// faithful quotient and a reciprocal within 2**-24 relative error; the remainder
// x - q1 s is exact) when nothing leaves the normal range. That holds wherever the
// quantized result depends on the quotient's last bit, so
//     round_saturate(reciprocal_div(x, reciprocal(s)), zp) == round_saturate(ieee_div(x, s), zp)
// for every float32 x and every s with 2**-60 <= |s| <= 2**60 (reciprocal_ok):
//   - |x / s| in [2**-2, 2**100]: x, s, y, q normal, and the remainder a multiple
//     of 2**-109 at least, so it is exact: q2 = RN(x / s);
//   - |x / s| < 2**-2: every step is within a few ulps of x / s, so |q2| < 0.5 and
//     both sides give zp;
//   - |x / s| > 2**100 (or x * y overflows): q0 is huge or +-Inf with x / s's sign,
//     and so are q1, q2 unless an Inf step made q2 NaN, where q0 is taken: both
//     sides saturate the same way;
//   - x NaN gives NaN, x = +-Inf gives q0 = +-Inf = x / s.
// Five full-rate FP32 instructions and a select, where div.rn.f32 is a MUFU.RCP,
// an FCHK and a branch to a slow path (the MUFU and FCHK at a quarter of the rate).
// tests/test_host_elementwise.py checks the identity on every float16 x and on
// float32 quotients next to rounding boundaries.
__device__ __forceinline__ bool reciprocal_ok(float s) {
  const float a = fabsf(s);
  return a >= __int_as_float(67 << 23) && a <= __int_as_float(187 << 23);  // 2**-60, 2**60; NaN: false
}
struct Reciprocal {
  float neg_s, y;  // -s (so no negation per element) and RN(1 / s)
};
__device__ __forceinline__ Reciprocal reciprocal(float s) { return {-s, ieee_div(1.0f, s)}; }
__device__ __forceinline__ float reciprocal_div(float x, Reciprocal r) {
  const float q0 = ieee_mul(x, r.y);
  const float q1 = ieee_fma(ieee_fma(q0, r.neg_s, x), r.y, q0);
  const float q2 = ieee_fma(ieee_fma(q1, r.neg_s, x), r.y, q1);
  return fabsf(q2) < __int_as_float(0x7F800000) ? q2 : q0;
}

}  // namespace dmlq
