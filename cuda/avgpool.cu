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
//   channels_last_16 / _4, channels_last_strip_16 / _4, channels_last_global_16 / _4: cuda/avgpool_cl.cu
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
#include "avgpool_common.cuh"

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
