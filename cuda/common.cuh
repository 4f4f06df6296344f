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

// float32 -> output float type, rounded once.
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float16 from_f32<float16>(float v) {
  float16 h;
  DMLQ_PTX("cvt.rn.f16.f32 %0, %1;", (DMLQ_OUT("h", h.bits)), (DMLQ_IN("f", v)));  // no .ftz: subnormal inputs kept
  return h;
}

template <typename Q> struct qlimits;
template <> struct qlimits<int8> { static constexpr int min = -128, max = 127; };
template <> struct qlimits<uint8> { static constexpr int min = 0, max = 255; };

// Round half to even, clamp in float to [qmin - zp, qmax - zp] (so +-Inf
// saturate and no integer conversion overflows), add zp. NaN gives zp.
template <typename Q>
__device__ __forceinline__ Q round_saturate(float t, int zp) {
  if (t != t) return static_cast<Q>(zp);
  float r = rintf(t);
  r = fminf(fmaxf(r, static_cast<float>(qlimits<Q>::min - zp)),
            static_cast<float>(qlimits<Q>::max - zp));
  return static_cast<Q>(static_cast<int>(r) + zp);
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

}  // namespace dmlq
