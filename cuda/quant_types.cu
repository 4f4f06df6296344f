// Quantize / dequantize for the types beyond int8 (docs/semantics.md "Quantized types
// beyond int8"): int16, uint16, int4, uint4, int2, uint2, float8 (e4m3fn, e4m3fnuz, e5m2,
// e5m2fnuz) and float4_e2m1fn, plus int8/uint8 with blocked scales.
//
// Variants (dmlq/gpu/qkernels.py launches them):
//   qt_quantize<X, T>    x dense (float32, float16, bfloat16 or int32) -> the T codes, packed as
//                        ONNX packs them (first element in the low bits; 16-bit types as is).
//                        A bfloat16 x is read as the top half of its float32 (exact, NaN kept).
//   qt_dequantize<T, Y>  the packed T codes -> y dense (float32, float16 or bfloat16: rounded
//                        from the float32 product once, ties to even); T also int32 and
//                        uint32 (per axis / blocked: the per-tensor form is elementwise.cu's).
//   qt_scale_f32<K>      an int32 (K = 1: rounded to float32, ties to even, by cvt.rn) or
//                        float8_e8m0fnu scale (K = 2: 2**(e - 127) assembled from the bits, 0xFF
//                        NaN) -> float32, each parameter once, before the main kernel (which
//                        reads float32 scales: a conversion inlined in its unrolled loops
//                        spilled the 8-bit and sub-byte -> float16 dequantize kernels).
// One parametrization covers per-tensor, per-axis and blocked parameters: element i uses
// parameter ((i / (D * inner)) * S + (i / inner % D) / B) * inner + i % inner, where the
// parameter axis has D elements in blocks of B (S = ceil(D / B) entries) and `inner`
// elements after it (per axis: B = 1; per tensor: null pointers and the by-value scalars).
// Each thread owns 16-byte groups of the packed side (lane = group, warps grid-stride over 32
// groups at a time): one 16-byte load or store there; the dense side in 16-byte chunks when
// aligned, a rolled loop over the chunks (unrolled within one), quantize's loop compiled once
// per precision. Where a group's dense side is more than one chunk, it passes through shared
// memory, a warp moving its 32 groups' chunks contiguously (coalesced): a lane's own chunks
// are CH * 16 bytes apart from its neighbours', which the H200 (third run, before this) showed
// at 0.11-0.45 of the copy bandwidth, falling with CH (dequantize to float32: 0.45 at CH = 2,
// 0.30 at 4, 0.13 at 8, 0.11 at 16).
// The parameter index is advanced per element with carries and adds (no division or
// multiplication per element; a group's start divides, divmod: none per tensor, two for blocks
// along the last axis, one per axis along it, where it took three ~25-instruction divisions
// before session 25) and the scale / zero point are re-read only when it changes:
// once per block for blocks along the innermost axis. Where a whole group, else a 16-byte chunk,
// of the dense side shares one parameter (inner == 1, inside one block: per tensor, and blocks
// along the last axis at least that long), it reads the parameter once and steps the walker
// once (every type and precision), and Params::prepare decides once per parameter how such a
// chunk is coded (shared_codes): at float32 precision a scale with reciprocal_ok divides
// through its reciprocal (common.cuh reciprocal_div: the same codes as the division), and a
// float code whose scale is positive and finite (in the precision) takes the quotient's
// magnitude and x's sign bit, with no NaN-sign rule left to apply. The chunks' code words
// shift into the group's 128 bits by constant shifts (push_word / pop_word). The last,
// partial group goes byte by byte (never past the buffer). One element's code, the float
// formats and the quotient in each precision are qt_codes.cuh's (integer arithmetic on the
// float32 bits, no GPU float8 conversion instruction).
//
// Napkin math (HBM bound, H100 ~3.35 TB/s): quantize f32 -> int4: 4 + 0.5 B/elem ->
// ~745 G elem/s; dequantize int4 -> f16: 0.5 + 2 B/elem -> ~1.3 T elem/s. H100's ~30 T
// (H200's ~33 T) thread instructions/s then allow ~40 (~25) instructions an element before
// the instructions, not the bytes, set the time, so the instructions a thread executes per
// element count, and the branches of a precision not asked for are compiled out of the
// 16-byte loops (one loop per precision, chosen once per group). tools/path_counts.py counts
// the sm_90 SASS of the chunk loop on the path a group sharing one parameter takes at float32
// precision (bench/results/qt-paths.md), 2026-11-27 (session 23), none of it quarter-rate:
// quantize float32 -> int8 16.5 instructions an element (38 before this session's group path
// and shift-in words; the element-by-element walk with a division each was ~92), float16 ->
// int4 17.2 (29), float32 -> float8_e4m3fn 24 (67; 90 before encode's subnormal add), float32 ->
// float4_e2m1fn 27; dequantize int4 -> float32 7.0 (16-19), float8_e4m3fn -> float32 12.5 (38).
// bfloat16 (session 44): x read and y written in the kernels (they were a float32 copy before or
// after, 10 bytes an element more). Reading is a shift (quantize from bfloat16 takes float16's
// counts: 16.2 an element to int8); writing rounds the float32 product to nearest even in integer
// arithmetic (common.cuh bf16_top: no arch-gated cvt.rn.bf16.f32), a pair at a time since
// session 45 (ChunkOut: each rounded word's top half, the pair in one byte permute; before, each
// result was shifted down, then shifted and ORed into its word, the NaN test an integer compare):
// 10.9-11.9 an element from the integer types (13.0-14.1 before) and 13.8-17.8 from float8/float4
// (16.0-20.2), against float16's 5.8-12.8. Budget: dequantize int4 / float4 -> bfloat16 is 2.5
// bytes an element, ~25 instructions on the H100 (3.35 TB/s), ~17 on the H200 (4.8 TB/s), where
// float4's 16.0 sat within 6 %; float8 -> bfloat16 is 3 bytes, ~20 on the H200, where e5m2's 20.2
// sat past it.
// Where each element has its own parameter, a chunk whose elements take neighbouring ones
// (inner > 1: blocks along an axis before the last, as an ONNX (K, N) weight blocked along K)
// loads them side by side and steps the walker once (Walker::neighbours): static chunk paths of
// ~96-100 instructions an element for quantize (a division and two int-to-float conversions
// each) and 27-33 for dequantize, against 150-210 and 100-145 for the element-by-element walk.
// Per axis or blocks of 1 along the last axis (inner == 1, B == 1: an ONNX (K, N) weight with a
// scale per column) take the same path for a chunk inside one row of the parameter axis
// (session 25; the walk before), but float8 codes dequantized to float16, which spilled with it.
//
// Launch bounds: qt_quantize (256, 3) or (256, 2) (quantize_min_blocks: 80 registers where its
// state fits them, else 93-101); qt_dequantize (256, 4): 64. With the plain (256) ptxas kept
// dequantize at 48 registers and spilled once it held the neighbour path.
// Quantize's reads, 2026-11-27 (session 25): the H200 timed it at 0.45-0.57 of the copy
// bandwidth (2-bit 0.28) where dequantize, at similar instructions an element, reached
// 0.74-0.80. A round then loaded its chunks into registers, 4 a lane, stored them to shared
// memory, waited, read its parameter (a second dependent load: the scale line of a blocked
// layout is first touched there) and coded, with none of its own reads in flight while it
// coded: two memory latencies a round, three with 8 chunks a group (4-bit of float32), four
// and more for 2-bit. Now the warp's copies are cp.async into two buffers, one round ahead,
// and the next group's walker and first parameter are read ahead into registers, so a round
// waits for nothing that was not issued a round earlier. Napkin (H200, 132 SMs, ~4.2 TB/s,
// ~1 us loaded latency): ~4.2 MB must be in flight, ~32 KB an SM; one round ahead holds
// 2 KB a warp (32 groups x PART = 4 chunks), 48 KB an SM at 3 blocks, 32 KB at 2. Untimed on
// a GPU: the next device session's key benchmarks measure it.
//
// Code size: the group's loop was unrolled whole until 2026-11-26, with the precision
// branches in every element: 464k sm_90 instructions for the 71 kernels (a 2-bit quantize
// 19.8k, ~317 KB of code against an SM's instruction caches), 60 s to build (NVRTC and
// nvdisasm, one core); rolled, 230k instructions (at most 8.9k a kernel, 3.4k for float32
// -> int8), 26 s. Registers 39-52 then (were 38-57); 39-60 with the shared-memory staging
// (4 blocks of 256 an SM for most kernels; asking for 5 spilled 46 of them). The rolled form
// ran on the H100 (second device session): every GPU test of these types passed but the
// float16 NaN sweep (x_value below). The H200 (third session) timed it before the staging.
// With the shared-parameter group path, the float codes' own chunk coder, the neighbour path
// and the batched staging (2026-11-27): 338k instructions, at most 13.5k a kernel; registers
// 62-80 (quantize, 3 blocks an SM, float16 -> 16-bit 4) and 38-64 (dequantize, 4, 2 kernels 6),
// 0 spills. With quantize's cp.async read-ahead (session 25): quantize 72-80 registers at 3
// blocks an SM, 93-101 at 2 (quantize_min_blocks), dequantize 39-64, 0 spills (the static
// report, with the last axis's neighbour path); the chunk loops' counts moved by at most one
// instruction (qt-paths.md).
#include "common.cuh"
#include "cp_async.cuh"
#include "qt_codes.cuh"

namespace dmlq {
namespace qt {

constexpr int kThreads = 256;

// The parameter index of element i, ((o * S + blk) * inner + in), advanced one element at a
// time without division or multiplication: idx follows in, blk and o by adds (base = o * S * inner).
// q = a / m and a - q m for a >= 0, m >= 1, without the division where a divisor of 1 or a
// dividend below it answers at once (a start of the walker divides three times, ~25 sm_90
// instructions each on the 32-bit path: per tensor none is left, blocks along the last axis two,
// per axis along it one).
__device__ __forceinline__ int64 divmod(int64 a, int64 m, int64& rem) {
  if (m == 1) {
    rem = 0;
    return a;
  }
  if (a < m) {
    rem = a;
    return 0;
  }
  const int64 q = a / m;
  rem = a - q * m;
  return q;
}

struct Walker {
  int64 inner, D, S, B;
  int64 in, d, b, idx, base;
  __device__ __forceinline__ void start(int64 i) {
    const int64 r = divmod(i, inner, in);
    base = divmod(r, D, d) * S * inner;
    idx = base + divmod(d, B, b) * inner + in;
  }
  __device__ __forceinline__ int64 index() const { return idx; }
  __device__ __forceinline__ void next() {
    ++idx;
    if (++in == inner) carry();
  }
  __device__ __forceinline__ void carry() {  // the end of a row of `inner` elements
    in = 0;
    idx -= inner;  // the same block of the parameter axis ...
    if (++b == B) { b = 0; idx += inner; }  // ... or the next one
    if (++d == D) { d = 0; b = 0; base += S * inner; idx = base; }
  }
  // The next C elements take C neighbouring parameters, index() ... index() + C - 1: inner > 1
  // (blocks along an axis before the last), the C elements inside one row of `inner`; or per
  // axis / blocks of 1 along the last axis (inner == 1, B == 1), inside one row of the
  // parameter axis (LAST; float8 codes dequantized to float16 spilled 8 bytes with it at their
  // 64 registers and keep the walk there). `skip_row` then steps over them at once.
  template <bool LAST = true>
  __device__ __forceinline__ bool neighbours(int C) const {
    return inner > 1 ? in + C <= inner : LAST && B == 1 && d + C <= D;
  }
  template <bool LAST = true>
  __device__ __forceinline__ void skip_row(int C) {  // after neighbours<LAST>(C)
    idx += C;
    if (!LAST || inner > 1) {
      in += C;
      if (in == inner) carry();
    } else if ((d += C) == D) {  // B == 1: the row's end
      d = 0;
      base += S;
      idx = base;
    }
  }
  // The next C elements share one parameter (inner == 1, inside one block and one row of the
  // parameter axis): `skip` then steps over them at once.
  __device__ __forceinline__ bool uniform(int C) const { return inner == 1 && b + C <= B && d + C <= D; }
  __device__ __forceinline__ void skip(int C) {  // after uniform(C)
    b += C;
    d += C;
    if (b == B) { b = 0; ++idx; }
    if (d == D) { d = 0; b = 0; base += S; idx = base; }
  }
};

// float8_e8m0fnu code -> float32: 2**(e - 127) exactly (e = 0: the subnormal 2**-127), 0xFF NaN.
__device__ __forceinline__ float decode_e8m0(unsigned e) {
  return __uint_as_float(e == 0xFFu ? 0x7FC00000u : e == 0u ? 0x00400000u : e << 23);
}

// One stored scale as float32 (scale_kind: SCALE_F32, SCALE_I32 or SCALE_E8M0).
__device__ __forceinline__ float load_scale(const void* __restrict__ p, int64 i, int kind) {
  if (kind == SCALE_I32) return to_f32(__ldg(static_cast<const int*>(p) + i));  // cvt.rn: ties to even
  if (kind == SCALE_E8M0) return decode_e8m0(__ldg(static_cast<const unsigned char*>(p) + i));
  return __ldg(static_cast<const float*>(p) + i);
}

// How a chunk of elements sharing one parameter is coded: the division or the reciprocal, with
// code_of (CODE_DIV, CODE_RECIP) or, for a float code, the magnitude of the quotient and x's sign
// (CODE_FLOAT, CODE_FLOAT_RECIP).
enum : int { CODE_DIV, CODE_RECIP, CODE_FLOAT, CODE_FLOAT_RECIP };

// Scale and zero point of the current element, re-read only when the index changes.
struct Params {
  const float* __restrict__ scale_p;
  const int* __restrict__ zp_p;
  float scale_v;
  int zp_v;
  int64 last;
  float s;
  int z;
  int64 r_last;  // the parameter r and mode were made for (-1: none)
  Reciprocal r;
  int mode;  // how a chunk sharing this parameter is coded (shared_codes)
  __device__ __forceinline__ float scale_at(int64 i) const { return scale_p ? __ldg(scale_p + i) : scale_v; }
  __device__ __forceinline__ int zp_at(int64 i) const { return zp_p ? __ldg(zp_p + i) : zp_v; }
  // The parameter at index p, read ahead as (s_, z_).
  __device__ __forceinline__ void take(int64 p, float s_, int z_) {
    last = p;
    s = s_;
    z = z_;
  }
  __device__ __forceinline__ void at(int64 p) {
    if (p != last) {
      last = p;
      s = scale_at(p);
      z = zp_at(p);
    }
  }
  // mode and r for the current parameter, made once per parameter (after at()). At float32
  // precision a scale with reciprocal_ok(s) divides through r = reciprocal(s) (common.cuh
  // reciprocal_div: the same integer code as the division; for a float code the same where it
  // depends on the quotient's bits, |x / s| >= 2**-43, the remainder then a multiple of 2**-149
  // and exact, and the float formats' steps all far above that). A float code whose scale is
  // positive and finite in the precision (and no float4 zero point to add) takes x's sign for
  // the code's: its quotient is NaN only for a NaN x and otherwise has x's sign.
  template <int T, int PREC>
  __device__ __forceinline__ void prepare(int zp_given) {
    if (r_last != last) {
      r_last = last;
      const bool recip = PREC == 0 && reciprocal_ok(s);
      r = recip ? reciprocal(s) : Reciprocal{0.0f, 0.0f};
      if (traits<T>::is_float && !(T == E2M1 && zp_given) && positive_finite<PREC>(s))
        mode = recip ? CODE_FLOAT_RECIP : CODE_FLOAT;
      else
        mode = recip ? CODE_RECIP : CODE_DIV;
    }
  }
};

template <typename X> __device__ __forceinline__ X elem_of(const unsigned* w, int k);
template <> __device__ __forceinline__ float elem_of<float>(const unsigned* w, int k) { return __uint_as_float(w[k]); }
template <> __device__ __forceinline__ int elem_of<int>(const unsigned* w, int k) { return static_cast<int>(w[k]); }
template <> __device__ __forceinline__ float16 elem_of<float16>(const unsigned* w, int k) {
  return float16{static_cast<unsigned short>(w[k / 2] >> (16 * (k % 2)))};
}
template <> __device__ __forceinline__ bfloat16 elem_of<bfloat16>(const unsigned* w, int k) {
  return bfloat16{static_cast<unsigned short>(w[k / 2] >> (16 * (k % 2)))};
}

template <typename X> __device__ __forceinline__ X load1(const X* p) { return __ldg(p); }
template <> __device__ __forceinline__ float16 load1<float16>(const float16* p) {
  return float16{__ldg(reinterpret_cast<const unsigned short*>(p))};
}
template <> __device__ __forceinline__ bfloat16 load1<bfloat16>(const bfloat16* p) {
  return bfloat16{__ldg(reinterpret_cast<const unsigned short*>(p))};
}

template <typename Y> __device__ __forceinline__ void put_out(unsigned* w, int k, Y v);
template <> __device__ __forceinline__ void put_out<float>(unsigned* w, int k, float v) { w[k] = __float_as_uint(v); }
template <> __device__ __forceinline__ void put_out<float16>(unsigned* w, int k, float16 v) {
  w[k / 2] |= static_cast<unsigned>(v.bits) << (16 * (k % 2));
}

// A 16-byte chunk's C outputs: value(k) for k = 0 .. C - 1, called in that order, rounded to Y
// and packed into the chunk's words (zeroed before); bfloat16 a pair at a time (bf16_pair: the
// two rounded words' top halves in one byte permute, no shifts or ORs).
template <typename Y> struct ChunkOut {
  template <int C, typename F> __device__ __forceinline__ static void fill(unsigned* chunk, F&& value) {
#pragma unroll
    for (int k = 0; k < C; ++k) put_out<Y>(chunk, k, from_f32<Y>(value(k)));
  }
};
template <> struct ChunkOut<bfloat16> {
  template <int C, typename F> __device__ __forceinline__ static void fill(unsigned* chunk, F&& value) {
#pragma unroll
    for (int k = 0; k < C; k += 2) {
      const unsigned first = bf16_top(value(k));
      chunk[k / 2] = bf16_pair(first, bf16_top(value(k + 1)));
    }
  }
};

__device__ __forceinline__ int64 global_thread() {
  return static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64 thread_count() { return static_cast<int64>(gridDim.x) * blockDim.x; }

}  // namespace qt
}  // namespace dmlq

using namespace dmlq;
using namespace dmlq::qt;

// The bits of element j (of `bits` bits) in a 16-byte group held as two 64-bit halves.
__device__ __forceinline__ void put_bits(unsigned long long& lo, unsigned long long& hi, int pos, unsigned code) {
  if (pos < 64) lo |= static_cast<unsigned long long>(code) << pos;
  else hi |= static_cast<unsigned long long>(code) << (pos - 64);
}
__device__ __forceinline__ unsigned get_bits(unsigned long long lo, unsigned long long hi, int pos, int bits) {
  const unsigned long long v = pos < 64 ? lo >> pos : hi >> (pos - 64);
  return static_cast<unsigned>(v) & ((1u << (bits - 1) << 1) - 1u);
}

// The sizes of one 16-byte group of packed T codes against the dense type F.
template <int T, typename F> struct Group {
  static constexpr int bits = traits<T>::bits;
  static constexpr int G = 128 / bits;      // elements per 16-byte group
  static constexpr int C = 16 / sizeof(F);  // elements per 16-byte chunk of the dense side
  // Whole dense chunks per group: every type but 32-bit q with a float16 y (4 elements, 8
  // bytes: that pair always takes the element-by-element path).
  static constexpr bool whole = G % C == 0;
};

// A group's dense side of CH 16-byte chunks staged through shared memory (both kernels): the
// warp's 32 groups a round, `part` chunks of each (at most 36 KiB a block), so every lane codes
// its own group's part in every round. (With 16 chunks a group, 2-bit codes of float32, a round
// used to stage 16 whole groups: half the lanes idle while the other half coded, and the
// fourth run, H200, measured those kernels at half the 4-bit ones' speed.)
template <int CH, int MAXPART = 8> struct Staging {
  static constexpr bool on = CH > 1;                          // one chunk a lane is coalesced as it is
  static constexpr int part = CH <= MAXPART ? CH : MAXPART;  // chunks of each group a round
  static constexpr int parts = CH / part;         // rounds
  static_assert(parts * part == CH, "whole parts");
};

// Group g (16 packed bytes, G elements from e0 = g * G) is whole (inside both buffers) and the
// dense side aligned: the 16-byte path, staged where the dense side is more than one chunk.
template <int G>
__device__ __forceinline__ bool whole_group(int64 g, bool aligned, int64 n, int64 nbytes) {
  return aligned && 16 * g + 16 <= nbytes && g * G + G <= n;
}

// The warp-uniform grid-stride loop of both kernels: warp w of the grid takes groups [32 w, 32 w + 32),
// lane = group; body(wg, g, e0, fast, staged, more, walker, params) with the walker started at e0
// when g < groups; staged: the warp's ballot of fast (STAGE); more: the warp has a next set,
// wg + (grid warps). AHEAD (quantize): the next set's walker start and, for a whole group (fast),
// first parameter are read ahead before body codes this one (into params), so that the body
// waits for no parameter load issued in its own iteration (the scale line of a blocked layout
// is first touched there: a memory latency a set, after the chunks' own). Dequantize issues its
// group's load and parameter load together, one latency a set either way, and the ahead walker
// spilled 8-104 bytes in 17 of its kernels at their 64 registers: it starts the walker per set.
template <int G, bool STAGE, bool AHEAD, typename Body>
__device__ __forceinline__ void for_each_warp_groups(int64 n, int64 nbytes, bool aligned, int64 D, int64 inner,
                                                     int64 S, int64 B, const float* __restrict__ scale_p,
                                                     float scale_v, const int* __restrict__ zp_p, int zp_v,
                                                     Body body) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64 groups = (nbytes + 15) / 16;
  const int64 warps = thread_count() / 32;
  Walker w{inner, D, S, B, 0, 0, 0, 0, 0}, ahead = w;
  Params p{scale_p, zp_p, scale_v, zp_v, -1, 0.0f, 0, -1, {0.0f, 0.0f}, CODE_DIV};
  float s_ahead = scale_v;
  int z_ahead = zp_v;
  auto read_ahead = [&](int64 wg) {  // group 32 wg + lane's walker and (whole group) first parameter
    const int64 g = wg * 32 + lane;
    if (g < groups) {
      ahead.start(g * G);
      if (whole_group<G>(g, aligned, n, nbytes)) {
        s_ahead = p.scale_at(ahead.index());
        z_ahead = p.zp_at(ahead.index());
      }
    }
  };
  int64 wg = global_thread() / 32;
  if (AHEAD && wg * 32 < groups) read_ahead(wg);
  for (; wg * 32 < groups; wg += warps) {
    const int64 g = wg * 32 + lane;
    const bool fast = g < groups && whole_group<G>(g, aligned, n, nbytes);  // (the g < groups is implied, but
                                                                        // ptxas spilled 5 kernels without it)
    const bool more = (wg + warps) * 32 < groups;
    if constexpr (AHEAD) {
      w = ahead;  // started at g * G (g < groups)
      if (fast) p.take(w.index(), s_ahead, z_ahead);
      if (more) read_ahead(wg + warps);
    } else if (g < groups) {
      w.start(g * G);
    }
    const unsigned staged = STAGE ? __ballot_sync(0xFFFFFFFFu, fast) : 0u;
    body(wg, g, g * G, fast, staged, more, w, p);
  }
}

// The codes of one 16-byte chunk of x whose elements share q's parameter (q.prepare() made):
// put(k, code) for k < C.
template <typename X, int T, int PREC, typename Put>
__device__ __forceinline__ void shared_codes(const unsigned (&chunk)[4], const Params& q, int zp_given, int saturate,
                                             Put put) {
  constexpr int C = 16 / sizeof(X);
  auto codes = [&](auto quotient_of) {
#pragma unroll
    for (int k = 0; k < C; ++k) {
      const float xv = x_value<T>(elem_of<X>(chunk, k));
      put(k, code_of<T>(quotient_of(xv), xv, q.s, q.z, zp_given, saturate));
    }
  };
  auto by_division = [&](float xv) { return quotient<PREC>(xv, q.s, PREC); };
  auto by_reciprocal = [&](float xv) { return reciprocal_div(xv, q.r); };
  if constexpr (traits<T>::is_float) {
    using F = small_float<T>;
    auto float_codes = [&](auto quotient_of) {
      const unsigned cap = F::cap(saturate != 0);
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const X e = elem_of<X>(chunk, k);
        const unsigned mag = __float_as_uint(quotient_of(to_f32(e))) & 0x7FFFFFFFu;
        put(k, F::with_sign(F::magnitude(mag, cap), mag, sign_of(e) << (F::nbits - 1)));
      }
    };
    if (PREC == 0 && q.mode == CODE_FLOAT_RECIP) float_codes(by_reciprocal);
    else if (q.mode == CODE_FLOAT) float_codes(by_division);
    else codes(by_division);
  } else {
    if (PREC == 0 && q.mode == CODE_RECIP) codes(by_reciprocal);
    else codes(by_division);
  }
}

// The codes of one 16-byte chunk of x whose elements take the neighbouring parameters
// p[i0 + k] (Walker::neighbours): put(k, code) for k < C, a division each.
template <typename X, int T, int PREC, typename Put>
__device__ __forceinline__ void neighbour_codes(const unsigned (&chunk)[4], const Params& p, int64 i0, int zp_given,
                                                int saturate, Put put) {
  constexpr int C = 16 / sizeof(X);
#pragma unroll
  for (int k = 0; k < C; ++k) {
    put(k, quant1<T, PREC>(x_value<T>(elem_of<X>(chunk, k)), p.scale_at(i0 + k), p.zp_at(i0 + k), zp_given,
                           saturate, PREC));
  }
}

// (hi:lo) shifted right by W bits with `word` (< 2**W) in its top W bits: after 128 / W pushes
// the first word pushed is the low W bits.
template <int W>
__device__ __forceinline__ void push_word(unsigned long long& lo, unsigned long long& hi, unsigned long long word) {
  if constexpr (W >= 64) {
    lo = hi;
    hi = word;
  } else {
    lo = (lo >> W) | (hi << (64 - W));
    hi = (hi >> W) | (word << (64 - W));
  }
}
// The low W bits of (hi:lo), which is then shifted right by W.
template <int W>
__device__ __forceinline__ unsigned long long pop_word(unsigned long long& lo, unsigned long long& hi) {
  if constexpr (W >= 64) {
    const unsigned long long v = lo;
    lo = hi;
    hi = 0;
    return v;
  } else {
    const unsigned long long v = lo & ((1ull << W) - 1ull);
    lo = (lo >> W) | (hi << (64 - W));
    hi >>= W;
    return v;
  }
}

// Chunks c0 .. c1 - 1 of one whole group of x quantized at precision PREC into lo, hi (the
// walker at chunk c0's first element): load(c) gives its 16-byte chunk c; a loop over the
// chunks, each coding a word of C * bits <= 64 bits pushed into (hi:lo), or its codes in place
// where one chunk fills the group. Rolled, not unrolled over the group: code size (see the
// header). Chunks whose elements share one parameter read it and step the walker once; else
// each chunk that does, else each element.
template <typename X, int T, int PREC, typename Load>
__device__ __forceinline__ void quantize_group(Load load, int c0, int c1, Walker& w, Params& p, int zp_given,
                                               int saturate, unsigned long long& lo, unsigned long long& hi) {
  constexpr int bits = Group<T, X>::bits, G = Group<T, X>::G, C = Group<T, X>::C;
  const bool whole = w.uniform((c1 - c0) * C);  // one parameter for the chunks
  if (whole) {
    p.at(w.index());
    p.prepare<T, PREC>(zp_given);
  }
#pragma unroll 1
  for (int c = c0; c < c1; ++c) {
    const uint4 u = load(c);
    const unsigned chunk[4] = {u.x, u.y, u.z, u.w};
    unsigned long long word = 0;
    auto put = [&](int k, unsigned code) {
      if constexpr (G == C) {  // one chunk fills the group (16-bit codes of float16): in place
        put_bits(lo, hi, k * bits, code);
      } else {
        word |= static_cast<unsigned long long>(code) << (k * bits);
      }
    };
    if (whole || w.uniform(C)) {  // one parameter for the chunk
      if (!whole) {
        p.at(w.index());
        p.prepare<T, PREC>(zp_given);
      }
      shared_codes<X, T, PREC>(chunk, p, zp_given, saturate, put);
      if (!whole) w.skip(C);
    } else if (w.neighbours(C)) {  // one parameter an element, neighbours in memory
      neighbour_codes<X, T, PREC>(chunk, p, w.index(), zp_given, saturate, put);
      w.skip_row(C);
    } else {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        p.at(w.index());
        put(k, quant1<T, PREC>(x_value<T>(elem_of<X>(chunk, k)), p.s, p.z, zp_given, saturate, PREC));
        w.next();
      }
    }
    if constexpr (G != C) push_word<C * bits>(lo, hi, word);
  }
  if (whole && c1 < G / C) w.skip((c1 - c0) * C);  // the group's next part; after its last, the
}                                                   // walker is left: the next group starts it afresh

// x (n dense elements) -> out (nbytes packed bytes). Group g: out bytes [16 g, 16 g + 16).
// Warp w takes groups [32 w, 32 w + 32) (lane = group), grid-stride by warps, as qt_dequantize.
// A step is one round of the warp's 32 groups: the next PART 16-byte chunks of each
// (Staging<CH, 4>), which the warp copies with cp.async, a group's part contiguous, into shared
// memory (a lane's own 16-byte loads would touch 32 lines CH * 16 bytes apart); each lane then
// codes its group's part from there. The copies run one step ahead, two buffers a warp: while
// a step is coded, the next step's chunks are in flight, and so is the next group's first
// parameter (for_each_warp_groups' AHEAD; before, a round waited for its chunks and then for
// its parameter: two memory latencies, three with two batches of chunks, and nothing in flight
// while it coded). After a group's last part, the 16-byte stores of the packed side are
// consecutive across lanes already.
// Blocks an SM the quantize kernel is built for: 3 (80 registers) where that holds its
// state without spilling, else 2 (the kernels coding a group in two or more rounds, and
// float16 into integer codes, spilled 104-192 bytes at 80 registers with the read-ahead).
template <typename X, int T> constexpr int quantize_min_blocks() {
  constexpr int CH = Group<T, X>::G / Group<T, X>::C;
  return Staging<CH, 4>::parts > 1 || (sizeof(X) == 2 && !traits<T>::is_float && CH > 1) ? 2 : 3;
}

template <typename X, int T>
__global__ void __launch_bounds__(kThreads, quantize_min_blocks<X, T>())
qt_quantize(const X* __restrict__ x, unsigned char* __restrict__ out, int64 n, int64 nbytes, int x_aligned,
            int64 D, int64 inner, int64 S, int64 B, const float* __restrict__ scale_p, float scale_v,
            const int* __restrict__ zp_p, int zp_v, int zp_given, int saturate, int precision) {
  constexpr int bits = Group<T, X>::bits, G = Group<T, X>::G, C = Group<T, X>::C;
  static_assert(Group<T, X>::whole && bits < 32, "quantize: whole chunks per group, no 32-bit output");
  constexpr int CH = G / C;  // 16-byte chunks of x per group
  using Stage = Staging<CH, 4>;
  constexpr bool kStage = Stage::on;
  constexpr int PART = Stage::part, PARTS = Stage::parts;
  DMLQ_SHARED(16, uint4, stage, [kStage ? 2 : 1][kStage ? kThreads / 32 : 1][kStage ? 32 : 1][kStage ? PART + 1 : 1]);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64 groups = (nbytes + 15) / 16;
  const int64 warps = thread_count() / 32;
  const bool aligned = x_aligned != 0;
  // Round `round` of the warp's groups [32 wg, 32 wg + 32) into buffer buf, the rows whose bit
  // is set in `rows` (row = lane of the group), PART chunks a lane; one cp.async group.
  auto copy_round = [&](int64 wg, int round, int buf, unsigned rows) {
    const X* const base = x + wg * 32 * G + round * PART * C;
#pragma unroll
    for (int i = 0; i < PART; ++i) {
      const int j = lane + 32 * i;  // row j / PART, chunk j % PART
      if ((rows >> (j / PART)) & 1u)
        cp_async16_whole(smem_u32(&stage[buf][warp][j / PART][j % PART]),
                         base + static_cast<int64>(j / PART) * G + j % PART * C);
    }
    cp_async_commit();
  };
  // The staged rows of set wg (its whole groups).
  auto rows_of = [&](int64 wg) {
    const int64 g = wg * 32 + lane;
    return __ballot_sync(0xFFFFFFFFu, g < groups && whole_group<G>(g, aligned, n, nbytes));
  };
  int buf = 0;
  if constexpr (kStage) {
    const int64 wg = global_thread() / 32;
    if (wg * 32 < groups) copy_round(wg, 0, buf, rows_of(wg));  // the first set's first round
  }
  for_each_warp_groups<G, kStage, true>(n, nbytes, aligned, D, inner, S, B, scale_p, scale_v, zp_p, zp_v,
                                  [&](int64 wg, int64 g, int64 e0, bool fast, unsigned staged, bool more,
                                      Walker& w, Params& p) {
    unsigned long long lo = 0, hi = 0;
#pragma unroll 1
    for (int round = 0; round < PARTS; ++round) {
      const int c0 = round * PART;  // the round's chunks of each group: c0 .. c0 + PART - 1
      if constexpr (kStage) {
        // The next step's copies (this set's next round, or the next set's first), then this one's wait.
        if (round + 1 < PARTS) copy_round(wg, round + 1, buf ^ 1, staged);
        else if (more) copy_round(wg + warps, 0, buf ^ 1, rows_of(wg + warps));
        else cp_async_commit();  // an empty group: the wait below counts the same
        cp_async_wait<1>();
        __syncwarp();
      }
      if (fast) {  // a whole group: this round's chunks of it
        auto load = [&](int c) {
          if constexpr (kStage) return stage[buf][warp][lane][c - c0];
          else return __ldg(reinterpret_cast<const uint4*>(x + e0 + c * C));
        };
        if (precision == 1) quantize_group<X, T, 1>(load, c0, c0 + PART, w, p, zp_given, saturate, lo, hi);
        else if (precision == 2) quantize_group<X, T, 2>(load, c0, c0 + PART, w, p, zp_given, saturate, lo, hi);
        else quantize_group<X, T, 0>(load, c0, c0 + PART, w, p, zp_given, saturate, lo, hi);
      }
      if constexpr (kStage) {
        __syncwarp();  // the buffer is read before the next step's copies overwrite it
        buf ^= 1;
      }
    }
    if (fast)  // the group's codes, one 16-byte store
      *reinterpret_cast<uint4*>(out + 16 * g) =
          make_uint4(static_cast<unsigned>(lo), static_cast<unsigned>(lo >> 32), static_cast<unsigned>(hi),
                     static_cast<unsigned>(hi >> 32));
    if (!fast && g < groups) {  // misaligned x or the last group: element by element, only the bytes inside the buffer
      unsigned long long lo = 0, hi = 0;
#pragma unroll 1
      for (int j = 0; j < G && e0 + j < n; ++j) {
        p.at(w.index());
        put_bits(lo, hi, j * bits, quant1<T>(x_value<T>(load1<X>(x + e0 + j)), p.s, p.z, zp_given, saturate, precision));
        w.next();
      }
#pragma unroll 1
      for (int k = 0; k < 16 && 16 * g + k < nbytes; ++k)
        out[16 * g + k] = static_cast<unsigned char>(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
    }
  });
}

// q (nbytes packed bytes, n elements) -> y (n dense elements). Group g: q bytes [16 g, 16 g + 16).
// Warp w of the grid takes groups [32 w, 32 w + 32) (lane = group), grid-stride by warps. A
// whole group's y is CH 16-byte chunks; written by its own lane, a warp's store would touch 32
// lines CH * 16 bytes apart (the H200's third run: 0.11-0.45 of the copy bandwidth, falling as
// CH grows), so the chunks go to shared memory first, PART chunks of every lane's group a round,
// and the warp stores the round's y, a group's part contiguous, one 16-byte chunk a lane per
// pass. Only lanes whose group is whole and aligned stage (the others, the buffer's last group
// or a misaligned y, take the element-by-element path); a chunk is stored only for a row whose
// lane staged it.
template <int T, typename Y>
__global__ void __launch_bounds__(kThreads, 4)
qt_dequantize(const unsigned char* __restrict__ q, Y* __restrict__ y, int64 n, int64 nbytes, int y_aligned,
              int64 D, int64 inner, int64 S, int64 B, const float* __restrict__ scale_p, float scale_v,
              const int* __restrict__ zp_p, int zp_v) {
  constexpr int bits = Group<T, Y>::bits, G = Group<T, Y>::G, C = Group<T, Y>::C;
  constexpr bool kWhole = Group<T, Y>::whole;
  constexpr bool kLastNeighbours = !(traits<T>::is_float && bits == 8 && sizeof(Y) == 2);  // Walker::neighbours
  constexpr int CH = kWhole ? G / C : 1;  // 16-byte chunks of y per group
  constexpr bool kStage = Staging<CH>::on;
  constexpr int PART = Staging<CH>::part, PARTS = Staging<CH>::parts;
  DMLQ_SHARED(16, uint4, stage, [kStage ? kThreads / 32 : 1][kStage ? 32 : 1][kStage ? PART + 1 : 1]);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64 groups = (nbytes + 15) / 16;
  for_each_warp_groups<G, kStage, false>(n, nbytes, kWhole && y_aligned, D, inner, S, B, scale_p, scale_v, zp_p, zp_v,
                                  [&](int64 wg, int64 g, int64 e0, bool fast, unsigned staged, bool, Walker& w, Params& p) {
    unsigned long long lo = 0, hi = 0;
    if (fast) {  // the group's 16-byte load
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(q + 16 * g));
      lo = u.x | static_cast<unsigned long long>(u.y) << 32;
      hi = u.z | static_cast<unsigned long long>(u.w) << 32;
    }
#pragma unroll 1
    for (int round = 0; round < PARTS; ++round) {
      const int c0 = round * PART;  // the round's chunks of each group: c0 .. c0 + PART - 1
      if (fast) {
        const bool whole = w.uniform(PART * C);  // one parameter for the round's chunks
        if (whole) p.at(w.index());
#pragma unroll 1
        for (int c = c0; c < c0 + PART; ++c) {  // the 16-byte chunks of y (one pass when G == C)
          constexpr int W = C * bits;   // bits of a chunk's codes: popped from (hi:lo) unless 128
          const unsigned long long word = W > 64 ? 0ull : pop_word<W>(lo, hi);
          unsigned chunk[4] = {0u, 0u, 0u, 0u};
          auto code_at = [&](int k) {
            return W > 64 ? get_bits(lo, hi, k * bits, bits) : static_cast<unsigned>(word >> (k * bits % 64)) & kMask<bits>;
          };
          if (whole || w.uniform(C)) {  // one parameter for the chunk
            if (!whole) p.at(w.index());
            const float s = p.s;
            const int z = p.z;
            ChunkOut<Y>::template fill<C>(chunk, [&](int k) { return ieee_mul(dequant_value<T>(code_at(k), z), s); });
            if (!whole) w.skip(C);
          } else if (w.template neighbours<kLastNeighbours>(C)) {  // one parameter an element, neighbours in memory
            const int64 i0 = w.index();
            ChunkOut<Y>::template fill<C>(chunk, [&](int k) {
              return ieee_mul(dequant_value<T>(code_at(k), p.zp_at(i0 + k)), p.scale_at(i0 + k));
            });
            w.template skip_row<kLastNeighbours>(C);
          } else {
            ChunkOut<Y>::template fill<C>(chunk, [&](int k) {
              p.at(w.index());
              const float v = ieee_mul(dequant_value<T>(code_at(k), p.z), p.s);
              w.next();
              return v;
            });
          }
          const uint4 v = make_uint4(chunk[0], chunk[1], chunk[2], chunk[3]);
          if constexpr (kStage) stage[warp][lane][c - c0] = v;
          else *reinterpret_cast<uint4*>(y + e0 + c * C) = v;
        }
        if (whole && round + 1 < PARTS) w.skip(PART * C);  // the group's next part
      }
      if constexpr (kStage) {
        __syncwarp();
        Y* const base = y + wg * 32 * G + c0 * C;  // the round's part of the warp's first group
#pragma unroll 1
        for (int j = lane; j < 32 * PART; j += 32) {
          const int row = j / PART;
          if ((staged >> row) & 1u)
            *reinterpret_cast<uint4*>(base + static_cast<int64>(row) * G + j % PART * C) = stage[warp][row][j % PART];
        }
        __syncwarp();
      }
    }
    if (!fast && g < groups) {  // misaligned y or the last group: element by element, inside the buffer
#pragma unroll 1
      for (int k = 0; k < 16 && 16 * g + k < nbytes; ++k) {
        const unsigned long long b = __ldg(q + 16 * g + k);
        if (k < 8) lo |= b << (8 * k);
        else hi |= b << (8 * (k - 8));
      }
#pragma unroll 1
      for (int j = 0; j < G && e0 + j < n; ++j) {
        p.at(w.index());
        y[e0 + j] = from_f32<Y>(ieee_mul(dequant_value<T>(get_bits(lo, hi, j * bits, bits), p.z), p.s));
        w.next();
      }
    }
  });
}

// n stored scales (int32 or e8m0 bytes, KIND) -> float32, each once.
template <int KIND>
__global__ void __launch_bounds__(kThreads)
qt_scale_f32(const void* __restrict__ in, float* __restrict__ out, int64 n) {
  for (int64 i = global_thread(); i < n; i += thread_count()) out[i] = load_scale(in, i, KIND);
}
