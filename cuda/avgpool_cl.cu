// QUANTIZED_LINEAR_AVERAGE_POOLING of channels_last inputs (NHWC / NDHWC memory, torch's
// channels_last), bit-exact with docs/semantics.md as cuda/avgpool.cu (whose header has the
// other variants and the napkin math; the shared pieces are in avgpool_common.cuh).
// dmlq/gpu/avgpool.py picks the variant.
//
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
//   channels_last_global_16 / _4         avgpool_cl_global<TX, TO, VEC>, avgpool_cl_global_finish
//     A window of the whole image (global average pooling, out N x C x 1 x 1) on a channels_last
//     x whose positions are evenly spaced (NHWC / NDHWC, a stride-0 batch; not padded rows or a
//     reversed W). avgpool_cl made one thread per (n, VEC channels), each summing the whole image
//     alone: N*C/16 threads (1,024 for 64x256x56x56, 8 a SM) with 3,136 dependent-address loads
//     each. Here a block is bx adjacent channel groups (a warp's loads contiguous) times by rows
//     of threads taking every by-th position of one chunk of one image; the rows' sums meet in
//     shared memory. Images are cut into chunks (dmlq/gpu/avgpool.py global_splits: until the
//     grid has 2 waves, each thread keeping >= 8 positions, every chunk <= 2**23 positions so
//     its sums fit 32 bits) whose sums a second kernel adds in int64 before the exact epilogue.
//     Napkin (H100, 64x256x56x56 uint8 NHWC: 51.4 MB read, 16 KB written, 15 us at 3.35 TB/s):
//     a position is one 16-byte load and 4 x (LOP3 + PRMT + 2 IADD) for 16 uint8 channels (int8:
//     one more LOP3 a word), ~1.1-1.4 instructions a byte, under the ~9 a byte that ~29.6 T
//     thread instructions/s leave at that bandwidth (avgpool.cu's napkin);
//     the rule's 2 waves give 9-13 chunks an image (2-3 resident blocks an SM), 576-832 blocks of
//     256 threads, 22-16 positions a thread, 4 loads in flight each (the tap loop unrolled 4, the
//     last 1-3 taps loaded together). 64x2048x7x7: 6.4 MB, 256 blocks, no split (launch-bound).
//     8x256x56x56: 24 chunks (8 positions a thread, the floor), 192 blocks. The rows' sums meet in
//     shared memory through rotated 16-byte chunks (slot()): no bank conflicts on the stores. Written 2026-11-27 without a GPU, selected on this count; the
//     bench rows `64x256x56x56:global:nhwc` and `64x2048x7x7:global:nhwc` time it beside
//     channels_last_16, general and torch's float16 pooling. VEC 16: 71-73 registers, 16 KiB of
//     shared memory (the rows' sums), 3 blocks an SM; VEC 4: 32-40; 0 spills.
#include "avgpool_common.cuh"

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

// channels_last: body(c0, p) for each of this thread's groups of VEC channels (c0 = VEC * g,
// g = blockIdx.y * blockDim.x + threadIdx.x < groups) and items p < count (blockIdx.x * blockDim.y
// + threadIdx.y), grid-stride in both: the launchers' (bx, by) blocks, a warp adjacent groups.
template <int VEC, typename F>
__device__ __forceinline__ void cl_for_each(int groups, int count, F&& body) {
  for (int gb = blockIdx.y; gb * static_cast<int>(blockDim.x) < groups; gb += gridDim.y) {
    const int g = gb * blockDim.x + threadIdx.x;
    if (g >= groups) continue;
    for (long long p = static_cast<long long>(blockIdx.x) * blockDim.y + threadIdx.y; p < count;
         p += static_cast<long long>(gridDim.x) * blockDim.y)
      body(g * VEC, static_cast<unsigned>(p));
  }
}

// channels_last: item p = ((n*OD + od)*MID + mid)*OW + ow split by magic divisions (MID: OH
// positions, or a strip kernel's strips).
struct Item {
  int ow, mid, od;
  unsigned n;
};
__device__ __forceinline__ Item split_item(unsigned p, int OW, unsigned mag_ow, int sh_ow, int MID, unsigned mag_mid,
                                           int sh_mid, int OD, unsigned mag_od, int sh_od) {
  const unsigned t1 = fast_div(p, mag_ow, sh_ow);
  const unsigned t2 = fast_div(t1, mag_mid, sh_mid);
  const unsigned n = fast_div(t2, mag_od, sh_od);
  return Item{static_cast<int>(p - t1 * static_cast<unsigned>(OW)),
              static_cast<int>(t1 - t2 * static_cast<unsigned>(MID)),
              static_cast<int>(t2 - n * static_cast<unsigned>(OD)), n};
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

  cl_for_each<VEC>(groups, positions, [&](int c0, unsigned p) {
      const Item it = split_item(p, OW, mag_ow, sh_ow, OH, mag_oh, sh_oh, OD, mag_od, sh_od);
      const int ow = it.ow, oh = it.mid, od = it.od;
      const unsigned n = it.n;
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
        return;
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
  });
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

  cl_for_each<VEC>(groups, columns, [&](int c0, unsigned p) {
      const Item it = split_item(p, OW, mag_ow, sh_ow, NS, mag_ns, sh_ns, OD, mag_od, sh_od);
      const int ow = it.ow, strip = it.mid, od = it.od;
      const unsigned n = it.n;
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
  });
}

// ---------------------------------------------------------------------------------------------
// channels_last global pooling: the window is the whole image (out N x C x 1 x 1), whose vol
// positions are one stride sxp apart (D, H, W flattened; channel stride 1). A block (bx, by) is
// bx adjacent groups of VEC channels (c0 = VEC * g, g = blockIdx.y * bx + tx) of one image n and
// one chunk s of its positions, [s * chunk, min(vol, (s + 1) * chunk)), item = n * splits + s =
// blockIdx.x (grid-stride): its by rows of threads take every by-th position of the chunk, one
// VEC-byte load a position (a warp reads adjacent channels), summed in 16-bit lanes (cl_add_row,
// int8 biased by 128) emptied into 32-bit sums every 257 taps. The rows' sums are added in shared
// memory; then one split (splits == 1): the output, sum - vol * (128 for int8 + x_zp) over vol
// taps (the exact epilogue, load_quant and pool_value as avgpool_global's); several: each
// channel's chunk sum (unsigned, chunk * 255 < 2**32: chunk <= 2**23) to part[item * C + c], and
// avgpool_cl_global_finish adds an image's chunks in int64 and makes the output. out is written
// through (so_n, so_c): any strides.
template <typename TX, typename TO, int VEC>
__global__ void __launch_bounds__(256) avgpool_cl_global(
    const TX* __restrict__ x, TO* __restrict__ out, unsigned* __restrict__ part, int items, int splits,
    int groups, long long vol, long long chunk, long long sxn, long long sxp, long long so_n, long long so_c,
    const float* __restrict__ xs, const TX* __restrict__ xzp, const float* __restrict__ os,
    const TO* __restrict__ ozp, int per_channel) {
  using namespace avgpool_detail;
  typedef long long i64;
  static_assert(VEC == 4 || VEC == 16, "one word or one 16-byte vector a tap");
  constexpr int NWD = VEC / 4;
  constexpr int LANE_TAPS = 257;          // 257 * 255 = 65535: the taps a 16-bit lane holds
  constexpr int THREADS = 256;            // the launcher's block (blockDim.x * blockDim.y)
  constexpr int BIAS = -dmlq::qlimits<TX>::min;
  DMLQ_SHARED(16, unsigned, rows, [VEC * THREADS]);  // thread t's sums at slot(t, j)
  // Thread t's VEC sums at t * VEC, its 16-byte chunks rotated by (t >> 1) & 3 (VEC 16): a quarter
  // warp's 16-byte stores then reach all 8 groups of 4 banks (unrotated: 2, 4x the wavefronts).
  auto slot = [](int t, int j) { return t * VEC + (VEC == 16 ? (((j >> 2) ^ (t >> 1)) & 3) << 2 | (j & 3) : j); };
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * bx + tx;
  const int C = groups * VEC;

  for (int gb = blockIdx.y; gb * bx < groups; gb += gridDim.y) {
    const int g = gb * bx + tx;
    // item in 64 bits: items may pass 2**30 (a stride-0 batch of 2**31 - 1 images), and an int
    // item + gridDim.x past INT_MAX wraps negative, a negative image read and written
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
      const int n = static_cast<int>(item) / splits, s = static_cast<int>(item) - n * splits;
      const i64 begin = static_cast<i64>(s) * chunk, end = begin + chunk < vol ? begin + chunk : vol;
      unsigned acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0u;
      if (g < groups) {
        // this thread's positions: begin + ty, begin + ty + by, ... < end
        i64 left = begin + ty < end ? (end - begin - ty - 1) / by + 1 : 0;
        const i64 step = static_cast<i64>(by) * sxp;
        const TX* xr = x + (static_cast<i64>(n) * sxn + static_cast<i64>(g) * VEC + (begin + ty) * sxp);
        while (left > 0) {
          const int taps = left < LANE_TAPS ? static_cast<int>(left) : LANE_TAPS;
          unsigned lo[NWD], hi[NWD];
#pragma unroll
          for (int k = 0; k < NWD; ++k) lo[k] = hi[k] = 0u;
          // whole groups of 4 (the rolled loop, 4 loads in flight), then the last 1-3 loaded together
          const int body = taps & ~3;
          cl_add_row<TX, NWD>(xr, body, step, lo, hi);
          cl_add_row<TX, NWD>(xr + body * step, taps & 3, step, lo, hi);
#pragma unroll
          for (int j = 0; j < VEC; ++j) acc[j] += cl_lane<NWD>(lo, hi, j);
          xr += taps * step;
          left -= taps;
        }
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) rows[slot(tid, j)] = acc[j];
      __syncthreads();
      // column col = tx' * VEC + j of the block's bx * VEC channels: the sum of its by rows
      for (int col = tid; col < bx * VEC; col += THREADS) {
        const int c = gb * bx * VEC + col;
        if (c >= C) continue;
        unsigned sum = 0u;
        for (int r = 0; r < by; ++r) sum += rows[slot(r * bx + col / VEC, col % VEC)];
        if (splits > 1) {
          part[static_cast<i64>(item) * C + c] = sum;
        } else {
          const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);
          out[static_cast<i64>(n) * so_n + static_cast<i64>(c) * so_c] =
              pool_value<TO, i64>(static_cast<i64>(sum) - vol * (BIAS + q.xzp), vol, q);
        }
      }
      __syncthreads();  // rows is reused by the next item
    }
  }
}

// channels_last global pooling, several chunks an image: output (n, c) = i (grid-stride over
// N * C) from the sum of its splits chunk sums part[(n * splits + s) * C + c] (avgpool_cl_global).
template <typename TX, typename TO>
__global__ void __launch_bounds__(256) avgpool_cl_global_finish(
    const unsigned* __restrict__ part, TO* __restrict__ out, long long outputs, int C, int splits, long long vol,
    long long so_n, long long so_c, const float* __restrict__ xs, const TX* __restrict__ xzp,
    const float* __restrict__ os, const TO* __restrict__ ozp, int per_channel) {
  using namespace avgpool_detail;
  typedef long long i64;
  constexpr int BIAS = -dmlq::qlimits<TX>::min;
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 n = i / C;
    const int c = static_cast<int>(i - n * C);
    const unsigned* p = part + n * splits * C + c;
    i64 sum = 0;
    for (int s = 0; s < splits; ++s) sum += __ldg(p + static_cast<i64>(s) * C);
    const Quant q = load_quant<TX, TO>(c, xs, xzp, os, ozp, per_channel);
    out[n * so_n + c * so_c] = pool_value<TO, i64>(sum - vol * (BIAS + q.xzp), vol, q);
  }
}
