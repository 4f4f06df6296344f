// QUANTIZED_LINEAR_AVERAGE_POOLING, 2-D and 3-D, bit-exact with docs/semantics.md:
//   S = sum of (x - x_zp[c]) over the taps inside the input (exact integer),
//   out = count == 0 ? out_zp[c]
//                    : requantize((float(S) * x_scale[c]) / float(count), out_scale[c], out_zp[c]).
// A 2-D problem runs as 3-D with D = OD = KD = 1. dmlq/gpu/avgpool.py picks the variant.
//
// Variants (measured on the H100, bench/results/gpu-2026-11-26: tile_k2s2 840 us against the
// general kernel's 1,344 at 256x256x56x56; tile_k3s1 2,053 against 1,345 at 64x256x56x56 pad 1
// and tile_k3s2 456 against 357 at 64x64x112x112 pad 1, so selection takes only tile_k2s2
// (dmlq/gpu/avgpool.py AUTO_TILES). Every kernel here was 10-60x short of its napkin limit
// below. ncu on the H200 (bench/results/gpu-2026-11-27/extra) found all three issue-bound
// (SM throughput 67-77 %, DRAM 1-6 %): tile_k3s1 executed 1.32G warp instructions, 73 % of
// them rolled loops that computed the dp4a masks at run time (tap_mask, now a closed form);
// general executes ~580 an output, 406 of them its once-a-thread set-up and epilogue.)
//   tile_k2s2 / tile_k3s1 / tile_k3s2   avgpool_tile<TX, TO, KW, SW, OPT>
//     Any shape whose W window/stride is 2/2, 3/1 or 3/2 with W dilation 1 and W stride of x 1
//     (all other strides, pads, D/H windows and dilations, ceil mode, IncludePadding free).
//     A thread makes OPT adjacent outputs of one output row: per window row it loads the
//     (OPT-1)*SW+KW bytes all OPT windows cover as aligned 32-bit words (overlap reused in
//     registers), aligns them with funnel shifts and sums each window with dp4a against a
//     compile-time byte mask. Block = 256 output rows of one group, rows counted over all planes
//     plane-minor (a warp: 32 planes at one oh, so its lanes share their edges), so no lanes idle
//     on small images; divisions by host-computed magic numbers, once per OPT outputs. With
//     per-tensor scales and zero points a shared-memory table (built once per persistent block)
//     maps S to the output for windows of full count: no divisions per output.
//     __launch_bounds__(256, 4): <= 64 registers (no spills at sm_80/sm_90), 1024 threads per SM.
//   strip_k3s1                          avgpool_strip<TX, TO, KH, KW, OPT> (3, 3, 16)
//     A 3x3 window at H and W stride 1, dilation 1, with W stride of x 1 (D window, stride and
//     dilation free, KD*9 <= 257 so a window sum fits a 16-bit lane; pads, ceil mode,
//     IncludePadding free). A thread makes OPT adjacent outputs of S consecutive output rows
//     (a strip) of one plane: each of the S + 2 input rows it reads is summed once (the
//     tile_k3s1 kernel sums each 3 times), its OPT window sums packed two to a word, the last
//     KH rows' words kept in registers; an output row is their sum, mapped by the window-sum
//     table (a group cut by the W edge: the table, then its cut windows exactly, stored over
//     their entries; rows with a window row outside the image and per-channel parameters: the
//     exact epilogue). Written 2026-11-27 without a GPU; selection takes it for its class. On
//     64x256x56x56 pad 1 the fix-ups (~45 instructions an edge group and row) and the exact
//     rows (2 of 56) add ~3 instructions an output to the common path's 9.8. Its warps read
//     32 planes' rows (32 cache lines a load instruction, as the tiles'): unmeasured whether
//     the L1 takes that at the rate the instruction count needs.
//     Napkin (H100, 64x256x56x56 pad 1: 205 MB + 205 MB, 123 us at the bandwidth, ~18 thread
//     instructions an output): the common path (full windows, the table, word stores; sm_90 SASS
//     with the other branches cut) is 471 instructions for 3 rows of 16 uint8 outputs, 9.8 an
//     output: per row 3 loads (a row span 3 bytes into a 16-byte chunk, pad 1 on aligned rows:
//     4 + 16 + 4 bytes), ~12 address, 5 funnel shifts, 24 dp4a and 8 PRMT (the sums, two to a
//     word), 8 adds (the ring), 16 PRMT + 16 adds + 16 LDS (lanes to table entries), 12 PRMT +
//     2 8-byte stores, ~6 moves (the prefetched words). Strip halo: (KH - 1) / S more rows read
//     (L2). Loads and stores are as wide as the alignment allows because each of a warp's lanes
//     reads another plane: a load instruction touches 32 lines (the L1's tag stage resolves 4 a
//     cycle), so 6 word loads a row would have cost the L1 ~48 cycles a warp and row.
//     __launch_bounds__(256, 3): 80 registers, 0 spills.
//   global_warp / global_block          avgpool_global<TX, TO, GROUP>
//     Window = the whole (contiguous) image, no start padding: a warp (block) per (n, c) plane,
//     16-byte loads, int64 shuffle reduction. global_block where planes are few and large.
//   channels_last_16 / channels_last_4  avgpool_cl<TX, TO, VEC>
//     x's channel stride 1 (NHWC / NDHWC, torch's channels_last), C a multiple of VEC, x's other
//     strides and address multiples of VEC; any window up to 257 taps wide in W, strides, pads,
//     dilations. A thread sums VEC adjacent channels of one output position with one VEC-byte
//     load a tap (a warp reads adjacent channels: contiguous), in 16-bit lanes (even and odd
//     bytes of each word apart), and stores VEC output bytes at once where out is channels_last
//     too. Not yet measured (written 2026-11-27 without a GPU; selection takes it for such
//     inputs, where general made one thread an output and read bytes C apart across a warp).
//     Napkin (H100, 3x3/1 pad 1 on 64x256x56x56 in NHWC: 205 MB + 205 MB, 123 us at the
//     bandwidth, ~18 thread instructions an output). sm_90 SASS of the common path (3-tap rows,
//     no drain, the table, 16-byte stores; compiled with the other branches cut): a 3-tap row is
//     73 instructions for 16 uint8 channels (int8 97), 13.7 (18.2) an output for 3x3's three rows,
//     plus the per-position code outside the rows, at most 357 static instructions (the padded
//     edges' branches counted) shared by 16 outputs, <= 22 an output: 24-36 an output in all,
//     0.5-0.75 of the bandwidth for uint8 if issue-bound, against general's ~580 (ncu, H200).
//     2x2/2 leaves ~44 an output: bandwidth-bound. The 4-tap loop of wider windows is 68
//     instructions for 16 uint8 channels (1.1 an output-tap; int8 97, 1.5: the bias xor).
//     A row of at most 4 taps loads them together (straight-line, predicated): a rolled loop's
//     add waited for each load before the next was issued. Sums past a drain (windows of more
//     than 257 taps) are parked in shared memory, not held in VEC registers across the taps.
//     __launch_bounds__(256, 3): 75-80 registers for 16 channels, 62 for 4 (4 blocks an SM), 0
//     spills; the exact epilogue is a call (cl_exact), outside the main path's registers.
//   channels_last_strip_16 / _4          avgpool_cl_strip<TX, TO, VEC, KH> (KH = 3)
//     channels_last inputs as channels_last_*, with an H window of 3 at H stride 1 (W and D free,
//     a window of at most 257 taps): avgpool_cl's threads walking down a strip of output rows of
//     one column, each input row's W (and D) taps summed once into the 16-bit lanes, a ring of
//     the last 3 rows' lanes in registers (as avgpool_strip's). Written 2026-11-27 without a
//     GPU; selection takes it where it applies. sm_90 SASS of the common path (3-tap rows, the
//     table, 16-byte stores; other branches cut): 402 instructions for 3 rows of 16 uint8
//     channels, 8.4 an output (int8 9.8), against avgpool_cl's 24-36 on the same path. VEC 16:
//     __launch_bounds__(256, 2), 126 registers (the ring is 24 of them); VEC 4: 3 blocks, 77.
//     The exact epilogue is a call (cl_exact, not inlined), shared with avgpool_cl.
//   general                             avgpool_general<TX, TO>
//     Everything else (W dilation, other W windows, any strides of x incl. 0 and negative):
//     one thread per output, 3-D block and grid over (ow, oh, planes), int64 sums and counts.
//
// Napkin math (H100 SXM: 3.35 TB/s HBM; 132 SMs x 4 issue slots x ~1.75 GHz = ~29.6 T thread
// instructions/s). Bytes = input + output.
//   2x2/2 on 256x256x56x56: 205 MB + 51 MB = 257 MB -> 77 us at peak; 51M outputs at that rate
//     leave ~44 instructions per output. The exact epilogue (two IEEE divisions, rint, clamp:
//     ~35 instructions, 2 MUFU) fits; the table makes it ~5.
//   3x3/1 pad 1 on the same: 205 MB + 205 MB -> 123 us; 205M outputs leave ~18 instructions per
//     output: compute-bound with the exact epilogue, hence the table (per-tensor). Input rows are
//     read by 3 output rows: L1 absorbs the reuse, DRAM sees each byte once.
//   Loads: 1.25 (2x2/2) or 0.4 (3x3/1, per window row) 32-bit loads per output instead of 4 or 3
//     byte loads, so the LSU/L1 stay well under their ~128 B/clk/SM.
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

// ---------------------------------------------------------------------------------------------
// general: one thread per output. Block (bx, by, bz) over (ow, oh, plane), grid-stride in all
// three; planes = N*C*OD; out (N, C, OD, OH, OW) is written through its element strides
// (so_n ... so_w: a channels_last out in place, no temporary). (mag_od, sh_od) and (mag_c, sh_c)
// divide plane indices below 2**31; larger ones use 64-bit division. Tap positions are ints (the
// launcher keeps (out-1)*stride + (window-1)*dilation + in + pads below 2**31); offsets, sums and
// counts are 64-bit.
template <typename TX, typename TO>
__global__ void __launch_bounds__(256, 2) avgpool_general(
    const TX* __restrict__ x, TO* __restrict__ out, long long planes, int C, int OD, int OH, int OW,
    int D, int H, int W, long long sxn, long long sxc, long long sxd, long long sxh, long long sxw,
    long long so_n, long long so_c, long long so_d, long long so_h, long long so_w,
    int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW,
    int PD, int PH, int PW, int ED, int EH, int EW, int include_padding,
    unsigned mag_od, int sh_od, unsigned mag_c, int sh_c,
    const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel) {
  using namespace avgpool_detail;
  typedef long long i64;
  // Plane p = (n * C + c) * OD + od. The first plane and the grid stride are
  // below 2**22, so both split by 32-bit magic division; later planes follow
  // by adding the stride's parts with carries (no 64-bit division, which is a
  // call that made this kernel spill).
  const unsigned p0 = blockIdx.z * blockDim.z + threadIdx.z;
  const unsigned stride = gridDim.z * blockDim.z;
  auto split = [&](unsigned v, unsigned& vn, int& vc, int& vod) {
    const unsigned unc = fast_div(v, mag_od, sh_od);
    const unsigned un = fast_div(unc, mag_c, sh_c);
    vod = static_cast<int>(v - unc * static_cast<unsigned>(OD));
    vc = static_cast<int>(unc - un * static_cast<unsigned>(C));
    vn = un;
  };
  unsigned n0, sn;
  int c, od, sc, sod;
  split(p0, n0, c, od);
  split(stride, sn, sc, sod);
  i64 n = n0;
  for (i64 p = p0; p < planes; p += stride) {
    const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);
    const TX* xp = x + (n * sxn + c * sxc);
    TO* op = out + (n * so_n + c * so_c + od * so_d);
    const i64 step_d = DD * sxd, step_h = DH * sxh, step_w = DW * sxw;

    const int d0 = od * SD - PD;
    int kd0, kd1, pd0, pd1;
    tap_range<int>(d0, KD, DD, 0, D, kd0, kd1);
    tap_range<int>(d0, KD, DD, -PD, D + ED, pd0, pd1);
    for (int oh = blockIdx.y * blockDim.y + threadIdx.y; oh < OH; oh += gridDim.y * blockDim.y) {
      const int h0 = oh * SH - PH;
      int kh0, kh1, ph0, ph1;
      tap_range<int>(h0, KH, DH, 0, H, kh0, kh1);
      tap_range<int>(h0, KH, DH, -PH, H + EH, ph0, ph1);
      const TX* xdh = xp + static_cast<i64>(d0 + kd0 * DD) * sxd + static_cast<i64>(h0 + kh0 * DH) * sxh;
      for (int ow = blockIdx.x * blockDim.x + threadIdx.x; ow < OW; ow += gridDim.x * blockDim.x) {
        const int w0 = ow * SW - PW;
        int kw0, kw1, pw0, pw1;
        tap_range<int>(w0, KW, DW, 0, W, kw0, kw1);
        tap_range<int>(w0, KW, DW, -PW, W + EW, pw0, pw1);
        i64 sum = 0;
        const TX* rd = xdh + static_cast<i64>(w0 + kw0 * DW) * sxw;
        for (int kd = kd0; kd < kd1; ++kd, rd += step_d) {
          const TX* rh = rd;
          for (int kh = kh0; kh < kh1; ++kh, rh += step_h) {
            const TX* rw = rh;
            for (int kw = kw0; kw < kw1; ++kw, rw += step_w) sum += static_cast<int>(__ldg(rw));
          }
        }
        const i64 count_in = static_cast<i64>(kd1 - kd0) * (kh1 - kh0) * (kw1 - kw0);
        const i64 count = include_padding ? static_cast<i64>(pd1 - pd0) * (ph1 - ph0) * (pw1 - pw0) : count_in;
        op[oh * so_h + ow * so_w] = pool_value<TO, i64>(sum - count_in * q.xzp, count, q);
      }
    }
    od += sod;  // advance (n, c, od) by the stride's parts, carrying
    int carry = od >= OD;
    if (carry) od -= OD;
    c += sc + carry;
    carry = c >= C;
    if (carry) c -= C;
    n += sn + carry;
  }
}

// ---------------------------------------------------------------------------------------------
// tile: block (BX, BY) with BX*BY <= 256; thread (tx, ty) makes outputs [g*OPT, g*OPT + OPT) of
// output row r (all planes' rows counted together, plane-minor: r = oh*P + plane with
// plane = (n*C + c)*OD + od and P = N*C*OD planes), with g = gb*BX + tx, r = rb*BY + ty; grid
// (row blocks, W group blocks), both grid-stride. rows = P*OH < 2**31, planes = P,
// groups = ceil(OW/OPT).
// The W stride of x is 1. out is contiguous. The launcher's BX = 1 makes a warp 32 planes' rows
// at one oh and one group: a warp's lanes share their edges (a first or last window row cut by
// the image, a first or last group cut by it), so its lanes take one load path and one
// epilogue. (Rows plane-major, 8 rows x 4 groups a warp, put both edge groups in every warp and
// the top or bottom row in 2 of 7: every warp paid both load paths for each window row.)
// lut_n = 0, or KD*KH*KW*255 + 1 with that many bytes of dynamic shared memory (per-tensor
// quantization only): lut[S - KVOL*(qmin - x_zp)] is the output of a sum S over KVOL taps.
template <typename TX, typename TO, int KW, int SW, int OPT>
__global__ void __launch_bounds__(256, 4) avgpool_tile(
    const TX* __restrict__ x, TO* __restrict__ out, int rows, int groups, int planes,
    int C, int OD, int OH, int OW, int D, int H, int W,
    unsigned mag_p, int sh_p, unsigned mag_od, int sh_od, unsigned mag_c, int sh_c,
    long long sxn, long long sxc, long long sxd, long long sxh,
    int KD, int KH, int SD, int SH, int DD, int DH,
    int PD, int PH, int PW, int ED, int EH, int EW, int include_padding,
    const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel, int lut_n) {
  using namespace avgpool_detail;
  typedef long long i64;
  constexpr int L = (OPT - 1) * SW + KW;  // bytes of one window row the OPT outputs cover
  constexpr int NA = (L + 3) / 4;
  constexpr int QMIN = dmlq::qlimits<TX>::min;
  static_assert(OPT % 4 == 0, "outputs are stored as whole words");
  DMLQ_DYNAMIC_SHARED(16, unsigned char, smem_lut);
  TO* lut = reinterpret_cast<TO*>(smem_lut);

  const int kvol = KD * KH * KW;
  int smin = 0;
  if (lut_n > 0) {  // uniform: every thread builds and waits
    build_lut<TX, TO>(lut, lut_n, kvol, xs, xzp, os, ozp);
    smin = kvol * (QMIN - load_quant<TX, TO>(0, xs, xzp, os, ozp, 0).xzp);
  }

  for (int gb = blockIdx.y; gb * static_cast<int>(blockDim.x) < groups; gb += gridDim.y) {
    const int g = gb * blockDim.x + threadIdx.x;
    for (i64 rb = blockIdx.x; rb * blockDim.y < rows; rb += gridDim.x) {
      const i64 r64 = rb * blockDim.y + threadIdx.y;
      if (g >= groups || r64 >= rows) continue;
      const unsigned r = static_cast<unsigned>(r64);
      const unsigned ohu = fast_div(r, mag_p, sh_p);
      const unsigned plane = r - ohu * static_cast<unsigned>(planes);
      const unsigned orow_i = plane * static_cast<unsigned>(OH) + ohu;  // out's row (< rows)
      const unsigned nc = fast_div(plane, mag_od, sh_od);
      const unsigned n = fast_div(nc, mag_c, sh_c);
      const int oh = static_cast<int>(ohu);
      const int od = static_cast<int>(plane - nc * static_cast<unsigned>(OD));
      const int c = static_cast<int>(nc - n * static_cast<unsigned>(C));
      const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);

      const int d0 = od * SD - PD, h0 = oh * SH - PH;
      int kd0, kd1, kh0, kh1;
      tap_range<int>(d0, KD, DD, 0, D, kd0, kd1);
      tap_range<int>(h0, KH, DH, 0, H, kh0, kh1);
      const int ow0 = g * OPT;
      const int w0 = ow0 * SW - PW;

      int acc[OPT];
#pragma unroll
      for (int j = 0; j < OPT; ++j) acc[j] = 0;
      const TX* xp = x + (static_cast<i64>(n) * sxn + static_cast<i64>(c) * sxc);
      for (int kd = kd0; kd < kd1; ++kd) {
        const TX* xd = xp + static_cast<i64>(d0 + kd * DD) * sxd;
        for (int kh = kh0; kh < kh1; ++kh) {
          const TX* xr = xd + static_cast<i64>(h0 + kh * DH) * sxh;
          unsigned v[NA];
          load_span<L>(xr, w0, W, v);
#pragma unroll
          for (int j = 0; j < OPT; ++j) {
#pragma unroll
            for (int k = 0; k < NA; ++k) {
              const unsigned m = tap_mask(j * SW, KW, k);
              if (m != 0u) acc[j] = sum_bytes<TX>(v[k], m, acc[j]);
            }
          }
        }
      }

      unsigned packed[OPT / 4];
#pragma unroll
      for (int k = 0; k < OPT / 4; ++k) packed[k] = 0u;
      const int cd = kd1 - kd0, ch = kh1 - kh0;
      if (cd == KD && ch == KH && w0 >= 0 && w0 + L <= W) {
        // every window full: count = kvol, S = acc - kvol*x_zp, S - smin = acc - kvol*QMIN
#pragma unroll
        for (int j = 0; j < OPT; ++j) {
          const TO o = lut_n > 0 ? lut[acc[j] - kvol * QMIN]
                                 : pool_value<TO, int>(acc[j] - kvol * q.xzp, kvol, q);
          packed[j / 4] |= static_cast<unsigned>(static_cast<unsigned char>(o)) << (8 * (j % 4));
        }
      } else {
        int cdp = cd, chp = ch;
        if (include_padding) {
          int a, b;
          tap_range<int>(d0, KD, DD, -PD, D + ED, a, b);
          cdp = b - a;
          tap_range<int>(h0, KH, DH, -PH, H + EH, a, b);
          chp = b - a;
        }
#pragma unroll
        for (int j = 0; j < OPT; ++j) {
          if (ow0 + j >= OW) break;  // past the row's end: never stored (and no exact epilogue for it)
          const int s = w0 + j * SW;
          const int cw = max(0, min(s + KW, W) - max(s, 0));
          const int cwp = include_padding ? max(0, min(s + KW, W + EW) - max(s, -PW)) : cw;
          const int count_in = cd * ch * cw;
          const int count = cdp * chp * cwp;
          const int sum = acc[j] - count_in * q.xzp;
          const TO o = (lut_n > 0 && count == kvol) ? lut[sum - smin] : pool_value<TO, int>(sum, count, q);
          packed[j / 4] |= static_cast<unsigned>(static_cast<unsigned char>(o)) << (8 * (j % 4));
        }
      }

      TO* orow = out + (static_cast<i64>(orow_i) * OW + ow0);
      if (ow0 + OPT <= OW && (reinterpret_cast<unsigned long long>(orow) & 3) == 0) {
#pragma unroll
        for (int k = 0; k < OPT / 4; ++k) reinterpret_cast<unsigned*>(orow)[k] = packed[k];
      } else {
#pragma unroll
        for (int j = 0; j < OPT; ++j)
          if (ow0 + j < OW) orow[j] = static_cast<TO>(packed[j / 4] >> (8 * (j % 4)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
namespace avgpool_detail {

// strip: lanes[k] += (or, FIRST, =) the sums of the windows 2k (low 16 bits) and 2k + 1 (high) over
// the span v (byte j + i of window j's KW bytes), by dp4a against compile-time masks. Each sum
// is below 65536 (the launcher's rule: a whole window's sum fits a lane), so the low lane's
// dp4a adds into the word itself.
template <int KW, int OPT, bool FIRST>
__device__ __forceinline__ void add_row(const unsigned (&v)[(OPT - 1 + KW + 3) / 4], unsigned (&lanes)[OPT / 2]) {
  constexpr int NA = (OPT - 1 + KW + 3) / 4;
#pragma unroll
  for (int k = 0; k < OPT / 2; ++k) {
    unsigned lo = FIRST ? 0u : lanes[k], hi = 0u;
#pragma unroll
    for (int q = 0; q < NA; ++q) {
      const unsigned m0 = tap_mask(2 * k, KW, q), m1 = tap_mask(2 * k + 1, KW, q);
      if (m0 != 0u) lo = __dp4a(v[q], m0, lo);
      if (m1 != 0u) hi = __dp4a(v[q], m1, hi);
    }
    lanes[k] = FIRST ? __byte_perm(lo, hi, 0x5410u) : lo + (hi << 16);
  }
}
struct dmlq_true { static constexpr bool value = true; };
struct dmlq_false { static constexpr bool value = false; };

}  // namespace avgpool_detail

// strip: KH x KW windows at H and W stride 1, dilation 1 (D window, stride, dilation free; pads,
// ceil mode, IncludePadding free); x's W stride 1; KD*KH*KW <= 257 (a 16-bit lane holds a window
// sum). Block (1, 256), grid (row blocks, W group blocks), both grid-stride. Thread (0, ty) makes
// outputs [ow0, ow0 + OPT), ow0 = g*OPT, g = blockIdx.y (grid-stride), of output rows
// [oh0, oh0 + S) of one plane: r = rb*256 + ty over rows = strips*P, plane-minor (r = strip*P +
// plane, plane = (n*C + c)*OD + od, P = N*C*OD planes; a warp: 32 planes' strips at one oh0 and
// group, lanes sharing their edges as in avgpool_tile), oh0 = strip*S. Walking down the strip,
// the thread sums each of the S + KH - 1 input rows' OPT windows once (dp4a against compile-time
// masks, as avgpool_tile; the D taps of a row added together) into OPT/2 words of 16-bit lanes
// (int8 biased by 128: every byte a mask selects counts x + 128, the bytes outside the row 128;
// rows outside the image are 0), keeps the last KH rows' lanes in a register ring (slot = row
// index mod KH: the row loop is unrolled KH times, so the slots are fixed registers) and makes an
// output row from the ring's sum: an input row is loaded and summed once where avgpool_tile does
// it KH times. The next input row's words are loaded before the current row is summed. out is
// contiguous; lut_n as in avgpool_tile (a full window's lane sum is its table index, below).
template <typename TX, typename TO, int KH, int KW, int OPT>
__global__ void __launch_bounds__(256, 3) avgpool_strip(
    const TX* __restrict__ x, TO* __restrict__ out, int rows, int groups, int planes, int S,
    int C, int OD, int OH, int OW, int D, int H, int W,
    unsigned mag_p, int sh_p, unsigned mag_od, int sh_od, unsigned mag_c, int sh_c,
    long long sxn, long long sxc, long long sxd, long long sxh,
    int KD, int SD, int DD, int PD, int PH, int PW, int ED, int EH, int EW, int include_padding,
    const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel, int lut_n) {
  using namespace avgpool_detail;
  typedef long long i64;
  constexpr int L = OPT - 1 + KW;  // bytes of one input row the OPT windows cover
  constexpr int NA = (L + 3) / 4;
  constexpr int NP = OPT / 2;      // words of two 16-bit lanes
  constexpr int QMIN = dmlq::qlimits<TX>::min;
  constexpr int BIAS = -QMIN;      // 128 for int8: lanes hold x + 128 >= 0
  constexpr unsigned BIAS_WORD = BIAS ? 0x80808080u : 0u;
  static_assert(OPT % 8 == 0, "outputs are stored as 8-byte pairs of words");
  constexpr int STRIP_THREADS = 256;  // the launcher's block (1, 256)
  DMLQ_DYNAMIC_SHARED(16, unsigned char, smem_lut);
  DMLQ_SHARED(16, unsigned, parked, [NP * STRIP_THREADS]);  // lanes for the rolled exact epilogue
  TO* lut = reinterpret_cast<TO*>(smem_lut);
  unsigned* const my_lanes = parked + threadIdx.y;

  const int kvol = KD * KH * KW;
  int smin = 0;
  if (lut_n > 0) {  // uniform: every thread builds and waits
    build_lut<TX, TO>(lut, lut_n, kvol, xs, xzp, os, ozp);
    smin = kvol * (QMIN - load_quant<TX, TO>(0, xs, xzp, os, ozp, 0).xzp);
  }

  for (int gb = blockIdx.y; gb < groups; gb += gridDim.y) {
    const int g = gb;
    for (i64 rb = blockIdx.x; rb * blockDim.y < rows; rb += gridDim.x) {
      const i64 r64 = rb * blockDim.y + threadIdx.y;
      if (r64 >= rows) continue;
      const unsigned r = static_cast<unsigned>(r64);
      const unsigned strip = fast_div(r, mag_p, sh_p);
      const unsigned plane = r - strip * static_cast<unsigned>(planes);
      const unsigned nc = fast_div(plane, mag_od, sh_od);
      const unsigned n = fast_div(nc, mag_c, sh_c);
      const int od = static_cast<int>(plane - nc * static_cast<unsigned>(OD));
      const int c = static_cast<int>(nc - n * static_cast<unsigned>(C));
      const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);

      const int oh_begin = static_cast<int>(strip) * S;
      const int nin = min(S, OH - oh_begin) + KH - 1;  // input rows the strip reads
      const int hb = oh_begin - PH;                      // the input row of step 0
      const int d0 = od * SD - PD;
      int kd0, kd1;
      tap_range<int>(d0, KD, DD, 0, D, kd0, kd1);
      const int cd = kd1 - kd0;
      int cdp = cd;
      if (include_padding) {
        int a, b;
        tap_range<int>(d0, KD, DD, -PD, D + ED, a, b);
        cdp = b - a;
      }
      const int ow0 = g * OPT;
      const int w0 = ow0 - PW;
      const bool wfull = w0 >= 0 && w0 + L <= W;
      const TX* xd = x + (static_cast<i64>(n) * sxn + static_cast<i64>(c) * sxc +
                          static_cast<i64>(cd > 0 ? d0 + kd0 * DD : 0) * sxd);
      const i64 step_d = static_cast<i64>(DD) * sxd;
      // The words of step i's D tap kd (zero where the row is outside the image or past the strip).
      auto fetch = [&](int i, int kd, unsigned (&w)[NA + 1]) -> unsigned {
        const int h = hb + i;
        if (i < nin && kd < cd && h >= 0 && h < H)
          return fetch_span<L>(xd + (kd * step_d + static_cast<i64>(h) * sxh), w0, W, w, BIAS_WORD);
#pragma unroll
        for (int k = 0; k < NA + 1; ++k) w[k] = 0u;
        return 0u;
      };

      unsigned ring[KH][NP];
#pragma unroll
      for (int t = 0; t < KH; ++t)
#pragma unroll
        for (int k = 0; k < NP; ++k) ring[t][k] = 0u;
      unsigned cur[NA + 1];
      unsigned s_cur = fetch(0, 0, cur);
      TO* const oplane = out + static_cast<i64>(plane) * OH * OW + ow0;

      for (int base = 0; base < nin; base += KH) {
#pragma unroll
        for (int t = 0; t < KH; ++t) {
          const int i = base + t;
          if (i >= nin) break;
          // this row's D taps, each next span fetched before the current one is summed; the first
          // tap (a zero row where cd is 0) sets the ring slot, the others add to it
          auto tap = [&](int kd, auto first) {
            const bool more = kd + 1 < cd;
            unsigned nxt[NA + 1];
            const unsigned s_nxt = fetch(more ? i : i + 1, more ? kd + 1 : 0, nxt);
            unsigned v[NA];
            align_span<L>(cur, s_cur, v);
            add_row<KW, OPT, decltype(first)::value>(v, ring[t]);
#pragma unroll
            for (int k = 0; k < NA + 1; ++k) cur[k] = nxt[k];
            s_cur = s_nxt;
          };
          tap(0, dmlq_true{});
          for (int kd = 1; kd < cd; ++kd) tap(kd, dmlq_false{});
          if (i < KH - 1) continue;

          // output row oh: its window rows are the ring's KH slots
          const int oh = oh_begin + i - (KH - 1);
          unsigned vs[NP];
#pragma unroll
          for (int k = 0; k < NP; ++k) {
            vs[k] = ring[0][k];
#pragma unroll
            for (int u = 1; u < KH; ++u) vs[k] += ring[u][k];
          }
          auto lane = [&](int j) { return static_cast<int>(__byte_perm(vs[j / 2], 0u, j % 2 ? 0x4432u : 0x4410u)); };
          int kh0, kh1;
          tap_range<int>(oh - PH, KH, 1, 0, H, kh0, kh1);
          const int ch = kh1 - kh0;
          TO* const orow = oplane + static_cast<i64>(oh) * OW;
          const bool words = ow0 + OPT <= OW && (reinterpret_cast<unsigned long long>(orow) & 3) == 0;
          auto store = [&](int k, unsigned word) {  // outputs 4k .. 4k + 3
            if (words) {
              reinterpret_cast<unsigned*>(orow)[k] = word;
            } else {
#pragma unroll 1
              for (int u = 0; u < 4; ++u)
                if (ow0 + 4 * k + u < OW) orow[4 * k + u] = static_cast<TO>(word >> (8 * u));
            }
          };
          // The exact epilogue of output j (the table for a window of full count) from its lane
          // parked in shared memory (park() first): used in rolled loops, since unrolled over OPT
          // outputs its divisions' registers spilled.
          int chp = ch;
          if (include_padding) {
            int a, b;
            tap_range<int>(oh - PH, KH, 1, -PH, H + EH, a, b);
            chp = b - a;
          }
          const int biased = BIAS * KW * cd * ch;  // every selected byte of the cd*ch rows read
          auto park = [&]() {
#pragma unroll
            for (int k = 0; k < NP; ++k) my_lanes[k * STRIP_THREADS] = vs[k];
          };
          auto exact = [&](int j) -> unsigned {
            const int s = w0 + j;
            const int cw = max(0, min(s + KW, W) - max(s, 0));
            const int cwp = include_padding ? max(0, min(s + KW, W + EW) - max(s, -PW)) : cw;
            const int count_in = cd * ch * cw;
            const int count = cdp * chp * cwp;
            const int sum = static_cast<int>((my_lanes[(j / 2) * STRIP_THREADS] >> (16 * (j % 2))) & 0xFFFFu) -
                            biased - count_in * q.xzp;
            const TO o = (lut_n > 0 && count == kvol) ? lut[sum - smin] : pool_value<TO, int>(sum, count, q);
            return static_cast<unsigned char>(o);
          };
          if (lut_n > 0 && cd == KD && ch == KH) {
            // every window row inside: the table for all OPT outputs (a full window's lane = sum of
            // (x + BIAS) over kvol taps = S + kvol*x_zp + kvol*BIAS = S - smin, smin = kvol*(QMIN -
            // x_zp), QMIN = -BIAS: the table index itself) ...
            // two words at a time: 8-byte stores where out allows (fewer store instructions, each
            // a line per lane: see the loads), else words or bytes
            const bool pairs = words && (reinterpret_cast<unsigned long long>(orow) & 7) == 0;
#pragma unroll
            for (int k = 0; k < OPT / 4; k += 2) {
              unsigned w2[2] = {0u, 0u};
#pragma unroll
              for (int u = 0; u < 8; ++u)
                w2[u / 4] |= static_cast<unsigned>(static_cast<unsigned char>(lut[lane(4 * k + u)])) << (8 * (u % 4));
              if (pairs) {
                *reinterpret_cast<uint2*>(orow + 4 * k) = make_uint2(w2[0], w2[1]);
              } else {
                store(k, w2[0]);
                store(k + 1, w2[1]);
              }
            }
            if (wfull) continue;
            // ... then the windows the W edge cuts (the first -w0 outputs, those from W - KW - w0 + 1
            // on) again, exactly, each stored over its table entry: the group's other outputs keep
            // the table (all OPT outputs through the exact loop took twice the instructions)
            park();
            const int je = min(OPT, OW - ow0);
            const int jl = min(je, max(0, -w0));
#pragma unroll 1
            for (int j = 0; j < jl; ++j) orow[j] = static_cast<TO>(exact(j));
#pragma unroll 1
            for (int j = max(jl, W - KW - w0 + 1); j < je; ++j) orow[j] = static_cast<TO>(exact(j));
            continue;
          }
          // a window row outside the image, or no table: every output exactly, a word at a time
          park();
#pragma unroll 1
          for (int k = 0; k < OPT / 4; ++k) {
            unsigned word = 0u;
#pragma unroll 1
            for (int u = 0; u < 4; ++u) {
              if (ow0 + 4 * k + u >= OW) break;  // past the row's end: never stored (no exact epilogue for it)
              word |= exact(4 * k + u) << (8 * u);
            }
            store(k, word);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// global: GROUP threads (32: a warp, 256: the block) per (n, c) plane of `vol` contiguous bytes;
// blockDim.x = 256, grid-stride over planes = N*C. out is contiguous, out[p] for p = n*C + c.
template <typename TX, typename TO, int GROUP>
__global__ void __launch_bounds__(256) avgpool_global(
    const TX* __restrict__ x, TO* __restrict__ out, long long planes, int C, long long vol,
    long long sxn, long long sxc, const float* __restrict__ xs, const TX* __restrict__ xzp,
    const float* __restrict__ os, const TO* __restrict__ ozp, int per_channel) {
  using namespace avgpool_detail;
  typedef long long i64;
  typedef unsigned long long u64;
  static_assert(GROUP == 32 || GROUP == 256, "a warp or the whole block per plane");
  constexpr int PER_BLOCK = 256 / GROUP;
  const int lane = threadIdx.x % GROUP;
  DMLQ_SHARED(8, i64, warp_sums, [8]);

  for (i64 p0 = static_cast<i64>(blockIdx.x) * PER_BLOCK; p0 < planes;
       p0 += static_cast<i64>(gridDim.x) * PER_BLOCK) {
    const i64 p = p0 + threadIdx.x / GROUP;
    i64 sum = 0;
    int c = 0;
    if (p < planes) {
      const i64 n = p / C;
      c = static_cast<int>(p - n * C);
      const u64 b = reinterpret_cast<u64>(x + (n * sxn + c * sxc));
      const u64 e = b + static_cast<u64>(vol);
      const u64 a16 = min((b + 15) & ~15ull, e);  // [b, a16) and [z16, e) are < 16 bytes each
      const u64 z16 = max(e & ~15ull, a16);
      const int head = static_cast<int>(a16 - b), edge = head + static_cast<int>(e - z16);
      for (int i = lane; i < edge; i += GROUP) {
        const u64 at = i < head ? b + i : z16 + (i - head);
        sum += static_cast<int>(__ldg(reinterpret_cast<const TX*>(at)));
      }
#pragma unroll 4
      for (u64 at = a16 + 16ull * lane; at < z16; at += 16ull * GROUP) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(at));
        int t = sum_bytes<TX>(v.x, 0x01010101u, 0);
        t = sum_bytes<TX>(v.y, 0x01010101u, t);
        t = sum_bytes<TX>(v.z, 0x01010101u, t);
        t = sum_bytes<TX>(v.w, 0x01010101u, t);
        sum += t;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (GROUP == 256) {
      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
      __syncthreads();
      if (threadIdx.x == 0) {
        sum = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) sum += warp_sums[k];
      }
      __syncthreads();  // warp_sums is reused by the next plane
    }
    if (lane == 0 && p < planes) {
      const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);
      out[p] = pool_value<TO, i64>(sum - vol * q.xzp, vol, q);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// channels_last: x's channel stride is 1 (NHWC / NDHWC). Thread (tx, ty) sums VEC adjacent
// channels c0 = VEC * g, g = blockIdx.y * blockDim.x + tx < groups = C / VEC, at output positions
// p = blockIdx.x * blockDim.y + ty (grid-stride) of positions = N*OD*OH*OW < 2**31 (p = ((n*OD + od)
// * OH + oh) * OW + ow): one VEC-byte load a tap (a warp's lanes read adjacent channels, so a
// tap's load is contiguous across the warp), summed in SIMD-within-a-register form: the even and
// odd bytes of each word go to two words of 16-bit lanes (int8 biased by 128 first), emptied into
// 32-bit sums before a lane could pass 65535 (257 taps of 255; a window row has KW <= 257 taps).
// x is VEC-byte aligned and its other strides are multiples of VEC (the launcher's rule).
// out is written through its element strides; out_vec = 16 or 4: its channel stride is 1 and each
// thread's VEC bytes are out_vec-aligned (one 16-byte or VEC/4 word stores), else 1 (byte stores).
// lut_n as in avgpool_tile (per-tensor quantization, windows of full count); otherwise the exact
// epilogue, dividing by a per-tensor out_scale through its reciprocal (common.cuh reciprocal_div:
// the same codes as the division).
template <int NWD>
__device__ __forceinline__ void load_words(const void* p, unsigned (&w)[NWD]);
template <> __device__ __forceinline__ void load_words<1>(const void* p, unsigned (&w)[1]) {
  w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
}
template <> __device__ __forceinline__ void load_words<4>(const void* p, unsigned (&w)[4]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

namespace avgpool_detail {

// channels_last: lo/hi (16-bit lanes: lo = bytes 0 and 2 of each word, hi = bytes 1 and 3) += the
// nw taps of one window row at xr, step_w apart, each VEC bytes (int8 biased by 128). A row of at
// most 4 taps (2x2, 3x3 windows) issues its loads together, then sums (a rolled loop's add waited
// for each load before the next was issued).
template <typename TX, int NWD>
__device__ __forceinline__ void cl_add_row(const TX* xr, int nw, long long step_w, unsigned (&lo)[NWD],
                                           unsigned (&hi)[NWD]) {
  constexpr unsigned BIAS = dmlq::qlimits<TX>::min < 0 ? 128u : 0u;  // int8 summed as x + 128
  auto add = [&](const unsigned (&w)[NWD]) {
#pragma unroll
    for (int k = 0; k < NWD; ++k) {  // bytes 1 and 3 to lanes by one PRMT (not a shift and a mask)
      lo[k] += (w[k] & 0x00FF00FFu) ^ (BIAS * 0x00010001u);
      hi[k] += __byte_perm(w[k], 0u, 0x4341u) ^ (BIAS * 0x00010001u);
    }
  };
  if (nw <= 4) {
    unsigned w[4][NWD];
#pragma unroll
    for (int t = 0; t < 4; ++t)
      if (t < nw) load_words<NWD>(xr + t * step_w, w[t]);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      if (t < nw) add(w[t]);
  } else {
#pragma unroll 4
    for (int kw = 0; kw < nw; ++kw, xr += step_w) {
      unsigned w[NWD];
      load_words<NWD>(xr, w);
      add(w);
    }
  }
}

// channels_last: the 16-bit lane of channel j (lo/hi as cl_add_row's).
template <int NWD>
__device__ __forceinline__ unsigned cl_lane(const unsigned (&lo)[NWD], const unsigned (&hi)[NWD], int j) {
  return ((j % 4) % 2 ? hi[j / 4] : lo[j / 4]) >> (16 * ((j % 4) / 2)) & 0xFFFFu;
}

// channels_last: a thread's VEC output channels at op (4 per word in packed), as one 16-byte
// store, VEC/4 word stores or byte stores (out_vec 16, 4 or 1; byte stores so_c apart).
template <typename TO, int NWD>
__device__ __forceinline__ void cl_store(TO* op, const unsigned (&packed)[NWD], int out_vec, long long so_c) {
  if (NWD == 4 && out_vec == 16) {
    *reinterpret_cast<uint4*>(op) = make_uint4(packed[0], packed[NWD > 1 ? 1 : 0], packed[NWD > 2 ? 2 : 0],
                                               packed[NWD > 3 ? 3 : 0]);
  } else if (out_vec >= 4) {
#pragma unroll
    for (int k = 0; k < NWD; ++k) reinterpret_cast<unsigned*>(op)[k] = packed[k];
  } else {
#pragma unroll
    for (int j = 0; j < 4 * NWD; ++j) op[j * so_c] = static_cast<TO>(packed[j / 4] >> (8 * (j % 4)));
  }
}

// A per-tensor out_scale's reciprocal (on: reciprocal_ok, the same codes as the division).
struct OutRecip {
  bool on;
  dmlq::Reciprocal r;
};
__device__ __forceinline__ OutRecip out_reciprocal(const float* os, int per_channel) {
  const float os0 = __ldg(os);
  const bool on = !(per_channel & PC_OS) && dmlq::reciprocal_ok(os0);
  return OutRecip{on, on ? dmlq::reciprocal(os0) : dmlq::Reciprocal{0.0f, 0.0f}};
}

// channels_last: the exact epilogue of a thread's 4 * NWD channels c0.. at op (stored as
// cl_store's out_vec says), from their sums of (x + 128 for int8) over count_in taps, parked in
// shared memory `stride` words apart; count: the divisor. A word (4 channels) at a time in a rolled
// loop: unrolled over 16 channels its divisions' registers made the kernel take 167 registers (1
// block an SM). Not inlined: the kernels call it for per-channel parameters and windows cut by an
// edge only, and inlined its registers made their main loops spill.
template <typename TX, typename TO, int NWD>
__device__ __noinline__ void cl_exact(TO* op, const unsigned* sums, int stride, int c0, int count_in, int count,
                                      int out_vec, long long so_c, const float* xs, const TX* xzp,
                                      const float* os, const TO* ozp, int per_channel, OutRecip r_os) {
  constexpr int BIAS = -dmlq::qlimits<TX>::min;
  const float count_f = dmlq::to_f32(count);
#pragma unroll 1
  for (int k = 0; k < NWD; ++k) {
    unsigned word = 0u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * k + i;
      const Quant q = load_quant<TX, TO>(c0 + j, xs, xzp, os, ozp, per_channel);
      const int s = static_cast<int>(sums[j * stride]) - count_in * (BIAS + q.xzp);
      TO o = static_cast<TO>(q.ozp);
      if (count != 0) {
        const float v = dmlq::ieee_div(dmlq::ieee_mul(dmlq::to_f32(s), q.xs), count_f);
        o = dmlq::round_saturate<TO>(r_os.on ? dmlq::reciprocal_div(v, r_os.r) : dmlq::ieee_div(v, q.os), q.ozp);
      }
      word |= static_cast<unsigned>(static_cast<unsigned char>(o)) << (8 * i);
    }
    if (out_vec >= 4) {
      reinterpret_cast<unsigned*>(op)[k] = word;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) op[(4 * k + i) * so_c] = static_cast<TO>(word >> (8 * i));
    }
  }
}

}  // namespace avgpool_detail

template <typename TX, typename TO, int VEC>
__global__ void __launch_bounds__(256, 3) avgpool_cl(
    const TX* __restrict__ x, TO* __restrict__ out, int positions, int groups, int OD, int OH, int OW,
    int D, int H, int W, unsigned mag_ow, int sh_ow, unsigned mag_oh, int sh_oh, unsigned mag_od, int sh_od,
    long long sxn, long long sxd, long long sxh, long long sxw,
    long long so_n, long long so_c, long long so_d, long long so_h, long long so_w, int out_vec,
    int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW,
    int PD, int PH, int PW, int ED, int EH, int EW, int include_padding,
    const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel, int lut_n) {
  using namespace avgpool_detail;
  typedef long long i64;
  static_assert(VEC == 4 || VEC == 16, "one word or one 16-byte vector a tap");
  constexpr int NWD = VEC / 4;
  constexpr int LANE_TAPS = 257;  // 257 * 255 = 65535: the taps a 16-bit lane holds
  constexpr int CL_BLOCK_THREADS = 256;  // the launcher's block (blockDim.x * blockDim.y)
  DMLQ_DYNAMIC_SHARED(16, unsigned char, smem_lut);
  DMLQ_SHARED(16, unsigned, parked, [VEC * CL_BLOCK_THREADS]);  // sums for the exact epilogue
  TO* lut = reinterpret_cast<TO*>(smem_lut);
  const int kvol = KD * KH * KW;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  if (lut_n > 0) build_lut<TX, TO>(lut, lut_n, kvol, xs, xzp, os, ozp);  // uniform

  const OutRecip r_os = out_reciprocal(os, per_channel);
  const i64 step_w = static_cast<i64>(DW) * sxw;

  for (int gb = blockIdx.y; gb * static_cast<int>(blockDim.x) < groups; gb += gridDim.y) {
    const int g = gb * blockDim.x + threadIdx.x;
    if (g >= groups) continue;
    const int c0 = g * VEC;
    for (i64 p64 = static_cast<i64>(blockIdx.x) * blockDim.y + threadIdx.y; p64 < positions;
         p64 += static_cast<i64>(gridDim.x) * blockDim.y) {
      const unsigned p = static_cast<unsigned>(p64);
      const unsigned t1 = fast_div(p, mag_ow, sh_ow);
      const unsigned t2 = fast_div(t1, mag_oh, sh_oh);
      const unsigned n = fast_div(t2, mag_od, sh_od);
      const int ow = static_cast<int>(p - t1 * static_cast<unsigned>(OW));
      const int oh = static_cast<int>(t1 - t2 * static_cast<unsigned>(OH));
      const int od = static_cast<int>(t2 - n * static_cast<unsigned>(OD));
      const int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
      int kd0, kd1, kh0, kh1, kw0, kw1;
      tap_range<int>(d0, KD, DD, 0, D, kd0, kd1);
      tap_range<int>(h0, KH, DH, 0, H, kh0, kh1);
      tap_range<int>(w0, KW, DW, 0, W, kw0, kw1);
      const int nw = kw1 - kw0;

      unsigned lo[NWD], hi[NWD];  // 16-bit lanes: lo = bytes 0 and 2 of each word, hi = bytes 1 and 3
#pragma unroll
      for (int k = 0; k < NWD; ++k) lo[k] = hi[k] = 0u;
      // Channel j's sum: its lane, plus (after a drain: a window of more than 257 taps) its 32-bit
      // sum parked in shared memory (this thread's slot), not in VEC registers held across the taps.
      unsigned* my_sums = parked + tid;
      auto lane = [&](int j) { return cl_lane<NWD>(lo, hi, j); };
      bool drained = false;
      auto drain = [&]() {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          my_sums[j * CL_BLOCK_THREADS] = lane(j) + (drained ? my_sums[j * CL_BLOCK_THREADS] : 0u);
#pragma unroll
        for (int k = 0; k < NWD; ++k) lo[k] = hi[k] = 0u;
        drained = true;
      };
      int held = 0;  // taps in the lanes
      const TX* xp = x + (static_cast<i64>(n) * sxn + c0 + static_cast<i64>(w0 + kw0 * DW) * sxw);
      for (int kd = kd0; kd < kd1; ++kd) {
        const TX* xd = xp + static_cast<i64>(d0 + kd * DD) * sxd;
        for (int kh = kh0; kh < kh1; ++kh) {
          const TX* xr = xd + static_cast<i64>(h0 + kh * DH) * sxh;
          if (held + nw > LANE_TAPS) {
            drain();
            held = 0;
          }
          held += nw;
          cl_add_row<TX, NWD>(xr, nw, step_w, lo, hi);
        }
      }
      // sum(j): the sum of (x + 128 for int8) over the count_in taps of channel c0 + j
      auto sum = [&](int j) { return lane(j) + (drained ? my_sums[j * CL_BLOCK_THREADS] : 0u); };
      const int cd = kd1 - kd0, ch = kh1 - kh0;
      const int count_in = cd * ch * nw;
      TO* op = out + (static_cast<i64>(n) * so_n + static_cast<i64>(c0) * so_c + static_cast<i64>(od) * so_d +
                      static_cast<i64>(oh) * so_h + static_cast<i64>(ow) * so_w);
      if (lut_n > 0 && count_in == kvol) {
        // S - smin = sum - kvol*(128 + QMIN) = sum for int8 (avgpool_tile's table index)
        unsigned packed[NWD];
#pragma unroll
        for (int k = 0; k < NWD; ++k) packed[k] = 0u;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          packed[j / 4] |= static_cast<unsigned>(static_cast<unsigned char>(lut[sum(j)])) << (8 * (j % 4));
        cl_store<TO, NWD>(op, packed, out_vec, so_c);
        continue;
      }
      // The exact epilogue (cl_exact) over the sums parked in shared memory.
      int count = count_in;
      if (include_padding) {
        int a0, a1, b0, b1, e0, e1;
        tap_range<int>(d0, KD, DD, -PD, D + ED, a0, a1);
        tap_range<int>(h0, KH, DH, -PH, H + EH, b0, b1);
        tap_range<int>(w0, KW, DW, -PW, W + EW, e0, e1);
        count = (a1 - a0) * (b1 - b0) * (e1 - e0);
      }
      if (!drained || held > 0) drain();  // every sum parked for the rolled loop
      cl_exact<TX, TO, NWD>(op, my_sums, CL_BLOCK_THREADS, c0, count_in, count, out_vec, so_c, xs, xzp, os, ozp,
                            per_channel, r_os);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// channels_last strip: avgpool_cl's threads (VEC adjacent channels, c0 = VEC * g, one VEC-byte
// load a tap) for a KH-row window at H stride and dilation 1, walking down a strip of S output
// rows of one output column instead of making one position: each of the S + KH - 1 input rows a
// strip reads is summed once over its W (and D) taps into 16-bit lanes and kept in a register
// ring of the last KH rows (slot = row index mod KH, the row loop unrolled KH times); an output
// row is the ring's sum. Column p = ((n*OD + od)*NS + strip)*OW + ow < columns = N*OD*NS*OW
// (NS = ceil(OH / S) strips), grid-stride. KD*KH*KW <= 257 (a window sum fits a lane), so no
// drains. out and lut_n as in avgpool_cl; the exact epilogue a word at a time in a rolled loop
// over lanes parked in shared memory.
template <typename TX, typename TO, int VEC, int KH>
__global__ void __launch_bounds__(256, VEC == 16 ? 2 : 3) avgpool_cl_strip(
    const TX* __restrict__ x, TO* __restrict__ out, int columns, int groups, int S, int NS, int OD, int OH,
    int OW, int D, int H, int W, unsigned mag_ow, int sh_ow, unsigned mag_ns, int sh_ns, unsigned mag_od,
    int sh_od, long long sxn, long long sxd, long long sxh, long long sxw,
    long long so_n, long long so_c, long long so_d, long long so_h, long long so_w, int out_vec,
    int KD, int KW, int SD, int SW, int DD, int DW, int PD, int PH, int PW, int ED, int EH, int EW,
    int include_padding, const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel, int lut_n) {
  using namespace avgpool_detail;
  typedef long long i64;
  static_assert(VEC == 4 || VEC == 16, "one word or one 16-byte vector a tap");
  constexpr int NWD = VEC / 4;
  constexpr int CL_BLOCK_THREADS = 256;          // the launcher's block (blockDim.x * blockDim.y)
  DMLQ_DYNAMIC_SHARED(16, unsigned char, smem_lut);
  DMLQ_SHARED(16, unsigned, parked, [VEC * CL_BLOCK_THREADS]);  // lanes for the exact epilogue
  TO* lut = reinterpret_cast<TO*>(smem_lut);
  const int kvol = KD * KH * KW;
  unsigned* const my_sums = parked + (threadIdx.y * blockDim.x + threadIdx.x);
  if (lut_n > 0) build_lut<TX, TO>(lut, lut_n, kvol, xs, xzp, os, ozp);  // uniform

  const OutRecip r_os = out_reciprocal(os, per_channel);
  const i64 step_w = static_cast<i64>(DW) * sxw;

  for (int gb = blockIdx.y; gb * static_cast<int>(blockDim.x) < groups; gb += gridDim.y) {
    const int g = gb * blockDim.x + threadIdx.x;
    if (g >= groups) continue;
    const int c0 = g * VEC;
    for (i64 p64 = static_cast<i64>(blockIdx.x) * blockDim.y + threadIdx.y; p64 < columns;
         p64 += static_cast<i64>(gridDim.x) * blockDim.y) {
      const unsigned p = static_cast<unsigned>(p64);
      const unsigned t1 = fast_div(p, mag_ow, sh_ow);
      const unsigned t2 = fast_div(t1, mag_ns, sh_ns);
      const unsigned n = fast_div(t2, mag_od, sh_od);
      const int ow = static_cast<int>(p - t1 * static_cast<unsigned>(OW));
      const int strip = static_cast<int>(t1 - t2 * static_cast<unsigned>(NS));
      const int od = static_cast<int>(t2 - n * static_cast<unsigned>(OD));
      const int oh_begin = strip * S;
      const int nin = min(S, OH - oh_begin) + KH - 1;  // input rows the strip reads
      const int hb = oh_begin - PH;                      // the input row of step 0
      const int d0 = od * SD - PD, w0 = ow * SW - PW;
      int kd0, kd1, kw0, kw1;
      tap_range<int>(d0, KD, DD, 0, D, kd0, kd1);
      tap_range<int>(w0, KW, DW, 0, W, kw0, kw1);
      const int cd = kd1 - kd0, nw = kw1 - kw0;
      int cdp = cd, cwp = nw;
      if (include_padding) {
        int a, b;
        tap_range<int>(d0, KD, DD, -PD, D + ED, a, b);
        cdp = b - a;
        tap_range<int>(w0, KW, DW, -PW, W + EW, a, b);
        cwp = b - a;
      }
      const TX* xd = x + (static_cast<i64>(n) * sxn + c0 + static_cast<i64>(w0 + kw0 * DW) * sxw +
                          static_cast<i64>(cd > 0 ? d0 + kd0 * DD : 0) * sxd);
      const i64 step_d = static_cast<i64>(DD) * sxd;
      TO* const ocol = out + (static_cast<i64>(n) * so_n + static_cast<i64>(c0) * so_c +
                              static_cast<i64>(od) * so_d + static_cast<i64>(ow) * so_w);

      unsigned ring_lo[KH][NWD], ring_hi[KH][NWD];  // slot t: a row's lanes (cl_add_row's lo, hi)
#pragma unroll
      for (int t = 0; t < KH; ++t)
#pragma unroll
        for (int k = 0; k < NWD; ++k) ring_lo[t][k] = ring_hi[t][k] = 0u;
      for (int base = 0; base < nin; base += KH) {
#pragma unroll
        for (int t = 0; t < KH; ++t) {
          const int i = base + t;
          if (i >= nin) break;
#pragma unroll
          for (int k = 0; k < NWD; ++k) ring_lo[t][k] = ring_hi[t][k] = 0u;
          const int h = hb + i;
          if (h >= 0 && h < H) {
            const TX* xr = xd + static_cast<i64>(h) * sxh;
            for (int kd = 0; kd < cd; ++kd, xr += step_d) cl_add_row<TX, NWD>(xr, nw, step_w, ring_lo[t], ring_hi[t]);
          }
          if (i < KH - 1) continue;

          // output row oh: its window rows are the ring's KH slots
          const int oh = oh_begin + i - (KH - 1);
          unsigned lo[NWD], hi[NWD];
#pragma unroll
          for (int k = 0; k < NWD; ++k) {
            lo[k] = ring_lo[0][k];
            hi[k] = ring_hi[0][k];
#pragma unroll
            for (int u = 1; u < KH; ++u) {
              lo[k] += ring_lo[u][k];
              hi[k] += ring_hi[u][k];
            }
          }
          int kh0, kh1;
          tap_range<int>(oh - PH, KH, 1, 0, H, kh0, kh1);
          const int ch = kh1 - kh0;
          const int count_in = cd * ch * nw;
          TO* const op = ocol + static_cast<i64>(oh) * so_h;
          if (lut_n > 0 && count_in == kvol) {
            // S - smin = sum - kvol*(128 + QMIN) = sum for int8 (avgpool_cl's table index)
            unsigned packed[NWD];
#pragma unroll
            for (int k = 0; k < NWD; ++k) packed[k] = 0u;
#pragma unroll
            for (int j = 0; j < VEC; ++j)
              packed[j / 4] |= static_cast<unsigned>(static_cast<unsigned char>(lut[cl_lane<NWD>(lo, hi, j)]))
                               << (8 * (j % 4));
            cl_store<TO, NWD>(op, packed, out_vec, so_c);
            continue;
          }
          // The exact epilogue (cl_exact) over the lanes parked in shared memory.
          int count = count_in;
          if (include_padding) {
            int a, b;
            tap_range<int>(oh - PH, KH, 1, -PH, H + EH, a, b);
            count = cdp * (b - a) * cwp;
          }
#pragma unroll
          for (int j = 0; j < VEC; ++j) my_sums[j * CL_BLOCK_THREADS] = cl_lane<NWD>(lo, hi, j);
          cl_exact<TX, TO, NWD>(op, my_sums, CL_BLOCK_THREADS, c0, count_in, count, out_vec, so_c, xs, xzp, os, ozp,
                                per_channel, r_os);
        }
      }
    }
  }
}
