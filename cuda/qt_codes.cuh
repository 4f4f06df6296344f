// The narrow types' element codes (quant_types.cu's kernels): the type codes and traits, the
// float8 / float4 / bfloat16 formats (SmallFloat, dmlq/floatconv.py), the quotient in each
// `precision`, and one element's code from x and back (docs/semantics.md "Quantized types
// beyond int8").
//
// Conversions are integer arithmetic on the float32 bit pattern (round to nearest even on the
// target's bits by one add and a shift, saturation by a min, NaN and inf by selects; no
// branch), exactly dmlq/floatconv.py, so no result depends on the GPU's float8 conversion
// instructions; the two float operations in them are exact by construction: a code below the
// smallest normal is one IEEE add, a decoded code one multiply by a power of two. Division and
// products go through common.cuh's ieee_* (no ftz, no FMA contraction).
#pragma once
#include "common.cuh"

namespace dmlq {
namespace qt {

// The type codes: dmlq/gpu/qkernels.py CODES, in this order.
enum : int { I8, U8, I16, U16, I4, U4, I2, U2, E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1, I32, U32 };
// How the scale is stored (dmlq/gpu/qkernels.py SCALE_KINDS).
enum : int { SCALE_F32, SCALE_I32, SCALE_E8M0 };
enum : int { IEEE, FN, FNUZ, NONE };

template <int T> struct traits;
#define DMLQ_INT_TYPE(T_, BITS, LO, HI) \
  template <> struct traits<T_> { \
    static constexpr int bits = BITS, qmin = LO, qmax = HI; \
    static constexpr bool is_float = false, is_signed = LO < 0; \
  };
DMLQ_INT_TYPE(I8, 8, -128, 127)
DMLQ_INT_TYPE(U8, 8, 0, 255)
DMLQ_INT_TYPE(I16, 16, -32768, 32767)
DMLQ_INT_TYPE(U16, 16, 0, 65535)
DMLQ_INT_TYPE(I4, 4, -8, 7)
DMLQ_INT_TYPE(U4, 4, 0, 15)
DMLQ_INT_TYPE(I2, 2, -2, 1)
DMLQ_INT_TYPE(U2, 2, 0, 3)
DMLQ_INT_TYPE(I32, 32, -2147483647 - 1, 2147483647)  // dequantize only
#undef DMLQ_INT_TYPE
template <> struct traits<U32> {  // dequantize only: q and zp (its bits in an int) as unsigned
  static constexpr int bits = 32;
  static constexpr bool is_float = false, is_signed = false;
};
#define DMLQ_FLOAT_TYPE(T_, E_, M_, BIAS_, SPECIAL_) \
  template <> struct traits<T_> { \
    static constexpr int bits = 1 + E_ + M_, exp_bits = E_, man_bits = M_, bias = BIAS_, special = SPECIAL_; \
    static constexpr bool is_float = true, is_signed = true; \
  };
DMLQ_FLOAT_TYPE(E4M3FN, 4, 3, 7, FN)
DMLQ_FLOAT_TYPE(E4M3FNUZ, 4, 3, 8, FNUZ)
DMLQ_FLOAT_TYPE(E5M2, 5, 2, 15, IEEE)
DMLQ_FLOAT_TYPE(E5M2FNUZ, 5, 2, 16, FNUZ)
DMLQ_FLOAT_TYPE(E2M1, 2, 1, 1, NONE)
#undef DMLQ_FLOAT_TYPE

// The low `bits` bits.
template <int bits> constexpr unsigned kMask = bits >= 32 ? ~0u : (1u << bits) - 1u;

// A small float format (dmlq/floatconv.py): its codes from float32 and back, branch-free.
template <int E, int M, int BIAS, int SPECIAL>
struct SmallFloat {
  static constexpr int nbits = 1 + E + M;
  static constexpr unsigned sbit = 1u << (nbits - 1);
  static constexpr int emin = 1 - BIAS;
  static constexpr unsigned top_all = (1u << (E + M)) - 1u;
  static constexpr unsigned top = SPECIAL == IEEE ? top_all - (1u << M) : SPECIAL == FN ? top_all - 1u : top_all;
  // NaN's code before the sign: IEEE the quiet NaN, FN all ones, FNUZ 0x80 (unsigned), NONE +max (ONNX).
  static constexpr unsigned nan_code = SPECIAL == FNUZ   ? sbit
                                       : SPECIAL == NONE ? top
                                       : SPECIAL == FN   ? top_all
                                                         : (((1u << E) - 1u) << M) | (1u << (M - 1));
  // The largest magnitude code a finite value or inf rounds to: `top` when saturating (and for
  // NONE, which has no inf or NaN), else the one past it, which is the overflow's code: IEEE
  // inf, FN NaN (all ones), FNUZ NaN (0x80, the sign bit alone).
  static __device__ __forceinline__ unsigned cap(bool saturate) { return saturate || SPECIAL == NONE ? top : top + 1u; }

  // The code of |v| without its sign; mag = |v|'s float32 bits (NaN: above 0x7F800000).
  // Normal: the bits rebiased and rounded to nearest even by one add (half - 1, plus the kept
  // lsb) and a shift; a carry moves into the exponent, past `cap` it is clamped. Below the
  // smallest normal: a multiple of the subnormal step 2**(emin - M), ties to even, by one IEEE
  // add: |v| + 2**(emin - M + 23) lies in [2**(emin - M + 23), 1.5 * that), where the float32
  // ulp is the step, so the add rounds |v| to a whole number of steps and the sum's bits are
  // the magic's plus that number (1 << M, the smallest normal, where it rounds up to it). Both
  // are computed and one selected, as are the clamp and NaN.
  static __device__ __forceinline__ unsigned magnitude(unsigned mag, unsigned cap_code) {
    constexpr int sh = 23 - M;
    constexpr unsigned rebias = static_cast<unsigned>(127 - BIAS) << 23;
    constexpr unsigned magic = static_cast<unsigned>(127 + emin - M + 23) << 23;
    const unsigned normal = (mag - rebias + ((1u << (sh - 1)) - 1u) + ((mag >> sh) & 1u)) >> sh;
    const unsigned sub = __float_as_uint(ieee_add(__uint_as_float(mag), __uint_as_float(magic))) - magic;
    const unsigned code = min(mag < (static_cast<unsigned>(127 + emin) << 23) ? sub : normal, cap_code);
    return mag > 0x7F800000u ? nan_code : code;
  }
  // magnitude()'s code with the sign (sign_bit: sbit or 0): FNUZ has no -0 (and its NaN no
  // sign), NONE's NaN is +max.
  static __device__ __forceinline__ unsigned with_sign(unsigned code, unsigned mag, unsigned sign_bit) {
    if (SPECIAL == FNUZ) return code | (code != 0u ? sign_bit : 0u);
    if (SPECIAL == NONE) return code | (mag > 0x7F800000u ? 0u : sign_bit);
    return code | sign_bit;
  }
  // float32 -> code: round to nearest even on the target's bits, saturate or not, NaN as above.
  static __device__ __forceinline__ unsigned encode(float v, bool saturate) {
    const unsigned bits = __float_as_uint(v), mag = bits & 0x7FFFFFFFu;
    return with_sign(magnitude(mag, cap(saturate)), mag, (bits >> 31) << (nbits - 1));
  }
  // code -> float32, exactly: the code's exponent and mantissa fields placed in a float32's,
  // which reads them with bias 127 (exponent field 0: a float32 subnormal, as the code's), times
  // 2**(127 - BIAS) (IEEE, no ftz: exact). NaN codes: a NaN with the code's sign.
  static __device__ __forceinline__ float decode(unsigned c) {
    const unsigned sign = (c & sbit) << (32 - nbits), mag = c & (sbit - 1u);
    const float v = ieee_mul(__uint_as_float(mag << (23 - M)), __uint_as_float(static_cast<unsigned>(254 - BIAS) << 23));
    unsigned w = __float_as_uint(v);
    if (SPECIAL == FNUZ && c == sbit) w = 0x7FC00000u;
    if (SPECIAL == FN && mag == sbit - 1u) w = 0x7FC00000u;
    if (SPECIAL == IEEE && mag >= (((1u << E) - 1u) << M)) w = mag == (((1u << E) - 1u) << M) ? 0x7F800000u : 0x7FC00000u;
    return __uint_as_float(w | sign);
  }
};

template <int T>
using small_float = SmallFloat<traits<T>::exp_bits, traits<T>::man_bits, traits<T>::bias, traits<T>::special>;

template <int T>
__device__ __forceinline__ unsigned encode_t(float v, bool saturate) {
  return small_float<T>::encode(v, saturate);
}
template <int T>
__device__ __forceinline__ float decode_t(unsigned c) {
  return small_float<T>::decode(c);
}

// float32 rounded to bfloat16 (ties to even, overflow to inf) and back.
__device__ __forceinline__ float round_bf16(float v) {
  return __uint_as_float(SmallFloat<8, 7, 127, IEEE>::encode(v, false) << 16);
}
__device__ __forceinline__ float round_f16(float v) { return to_f32(from_f32<float16>(v)); }

// t = x / s in the `precision` asked for: 0 float32, 1 float16, 2 bfloat16 (both operands
// and the quotient rounded to that type). A NaN quotient gets the sign docs/semantics.md
// fixes (float8_e4m3fn and e5m2 keep it in their code): x's when x is NaN, else the
// scale's when it is NaN, else negative (0/0, inf/inf). The GPU's own arithmetic gives
// every NaN as +NaN 0x7FFFFFFF (the first H100 session: 0/0 coded 0x7F, the contract 0xFF):
// signed_nan below.
// PREC >= 0 fixes the precision at compile time (the 16-byte paths, one loop per value);
// PREC = -1 reads `precision` (the element-by-element path).
template <int PREC>
__device__ __forceinline__ float quotient(float x, float s, int precision) {
  if (PREC >= 0) precision = PREC;
  if (precision == 1) return round_f16(ieee_div(round_f16(x), round_f16(s)));
  if (precision == 2) return round_bf16(ieee_div(round_bf16(x), round_bf16(s)));
  return ieee_div(x, s);
}
// The quotient with a NaN's sign as fixed above (the float8 types only: an integer type
// maps any NaN to its zero point, float4 to +6).
__device__ __forceinline__ float signed_nan(float t, float x, float s) {
  if (t == t) return t;
  const unsigned from = x != x ? __float_as_uint(x) : s != s ? __float_as_uint(s) : 0x80000000u;
  return __uint_as_float(0x7FC00000u | (from & 0x80000000u));
}

// Whether s, rounded to the precision PREC, is positive and finite (a float32 subnormal
// included): bits 1 ... 0x7F7FFFFF.
template <int PREC>
__device__ __forceinline__ bool positive_finite(float s) {
  const float r = PREC == 1 ? round_f16(s) : PREC == 2 ? round_bf16(s) : s;
  return __float_as_uint(r) - 1u < 0x7F7FFFFFu;
}
// The sign bit of a dense element (0 or 1), a NaN's included.
__device__ __forceinline__ unsigned sign_of(float v) { return __float_as_uint(v) >> 31; }
__device__ __forceinline__ unsigned sign_of(float16 v) { return static_cast<unsigned>(v.bits) >> 15; }
__device__ __forceinline__ unsigned sign_of(bfloat16 v) { return static_cast<unsigned>(v.bits) >> 15; }
__device__ __forceinline__ unsigned sign_of(int v) { return static_cast<unsigned>(v) >> 31; }

// x as the float32 quant1 starts from. A float16 NaN keeps its sign where the code does (the
// float types): the GPU's cvt.f32.f16 gives every NaN as +NaN 0x7FFFFFFF (the second H100
// session coded float16 -NaN as float8_e4m3fn 0x7F, the contract 0xFF).
template <int T, typename X> __device__ __forceinline__ float x_value(X v) { return to_f32(v); }
template <int T> __device__ __forceinline__ float x_value(float16 v) {
  const float r = to_f32(v);
  if (!traits<T>::is_float || r == r) return r;
  return __uint_as_float(0x7FC00000u | (static_cast<unsigned>(v.bits) & 0x8000u) << 16);
}

// One element: the code (low `bits` bits) of x quantized with (s, zp), t = x / s given.
template <int T>
__device__ __forceinline__ unsigned code_of(float t, float x, float s, int zp, int zp_given, int saturate) {
  using tr = traits<T>;
  if constexpr (tr::is_float) {
    t = signed_nan(t, x, s);
    if (T == E2M1 && zp_given) t = ieee_add(t, decode_t<T>(static_cast<unsigned>(zp)));
    return encode_t<T>(t, saturate != 0);
  } else {
    if (t != t) return static_cast<unsigned>(zp) & kMask<tr::bits>;
    return static_cast<unsigned>(round_clamp(t, tr::qmin - zp, tr::qmax - zp) + zp) & kMask<tr::bits>;
  }
}
template <int T, int PREC = -1>
__device__ __forceinline__ unsigned quant1(float x, float s, int zp, int zp_given, int saturate, int precision) {
  return code_of<T>(quotient<PREC>(x, s, precision), x, s, zp, zp_given, saturate);
}

// The code (low `bits` bits) as the float32 the product starts from (q - zp, or the float code).
template <int T>
__device__ __forceinline__ float dequant_value(unsigned c, int zp) {
  using tr = traits<T>;
  if constexpr (tr::is_float) {
    return decode_t<T>(c);
  } else {
    if constexpr (tr::bits == 32) {  // |q - zp| < 2**32: the int64 difference rounded once (cvt.rn)
      const int64 qv = tr::is_signed ? static_cast<int64>(static_cast<int>(c)) : static_cast<int64>(c);
      const int64 zv = tr::is_signed ? static_cast<int64>(zp) : static_cast<int64>(static_cast<unsigned>(zp));
      return to_f32(qv - zv);
    } else {
      int q = static_cast<int>(c);
      if (tr::is_signed) q = static_cast<int>(c << (32 - tr::bits)) >> (32 - tr::bits);
      return to_f32(q - zp);  // exact: |q - zp| < 2**17
    }
  }
}

}  // namespace qt
}  // namespace dmlq
