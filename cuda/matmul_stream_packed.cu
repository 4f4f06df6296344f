// A packed 4-bit b at small M: the weight-streaming kernels. One pass over b's
// packed bytes, 16-byte loads; quantized_matmul's requantized output, and
// matmul_integer_to_float's blocked scales along K (docs/semantics.md).
//
// Kernels (TA int8 or uint8; TB packed_int4 or packed_uint4 (cuda/packed4.cuh);
// TO int8 or uint8, the requantized output; float or float16 for the grouped
// finish):
//   matmul_stream_packed<TA, TB, TO, MT>   MT in 1, 4, 16: M <= MT rows
//     stream-m1 / stream-m4 / stream-m16 (dmlq/gpu/matmul.py select_variant:
//     packed b, M <= 16, K <= 32768; dmlq/gpu/qmm_stream.py plans and binds,
//     and picks the split of K: split_k).
//   matmul_stream_packed_finish<TO>   split-K's second pass: adds the chunks'
//     int32 partial sums and requantizes (only with more than one chunk).
//   matmul_stream_grouped<TA, TB, MT>   stream-grouped-m1 / -m4 / -m16
//     (dmlq/gpu/qmm_stream.py plan_grouped: matmul_integer_to_float, packed b,
//     M <= 16, more than one group along K, the group a multiple of 32 rows,
//     the workspace below at most b's bytes: 8 M ceil(K / G) <= K):
//     the same main loop; each group's exact int32 sums (a's zero point taken
//     out, b's subtracted as it is unpacked, from the group's row of b_zp) go
//     to a workspace work[g][z][m][n]. A group ends at the end of a half stage
//     (32 rows), so each thread's k-words of one half belong to one group and
//     the k-split partials of at most two groups per stage meet in two slots
//     of red, summed by the owning threads after the next barrier. A chunk of
//     K (split-K, blockIdx.z) holds whole groups and whole stages (a multiple
//     of lcm(group, 64) rows), so every group sum is written once, a plain
//     store, and integer sums make the split invisible.
//   matmul_stream_grouped_finish<TO>   the float steps of the contract, groups
//     in ascending order: float32(acc_g) * (a_scale * b_scale[g, n]) added
//     one group at a time, then the bias, then one rounding to TO.
//   Napkin math of the grouped pair (beyond the kernel's below): the workspace
//   is groups x M x N int32, 8 M / G of b's bytes (M = 1: 25 % at G = 32, 6 %
//   at G = 128), written once and read once by the finish pass, mostly from L2
//   (N = K = 4096, G = 128, M = 1: 512 KB); the finish pass reads it and b's
//   scales (one float per group and column: 8 / G of b's bytes again) with one
//   thread per output: at M = 1 a few microseconds, launch included. The main
//   kernel's own extra work over the requantizing one is the group bookkeeping
//   per stage (uniform branches, one zero-point reload per group per thread,
//   the slot sums); ptxas (sm_90, bench/results/static.md): 56 / 80 / 102
//   registers for MT = 1 / 4 / 16, 0 spills, 10 / 22 / 39 KB static shared
//   memory: 9 / 6 / 4 blocks per SM. Against the dp4a-wide tiles it replaces
//   at M <= 16 (64 x 64 tiles: 63 of 64 rows computed for nothing at M = 1, no
//   split of K, N / 64 blocks), the stream kernel splits K to fill the SMs and
//   moves b once at 16 bytes a load: N = K = 4096, G = 128, M = 1 plans 16
//   chunks of 256 rows (1024 blocks for 132 SMs x 9) against 64 blocks of
//   dp4a-wide doing 128 tiles each. Not yet measured on a GPU.
//
// grid (ceil(N / 64), matrices, chunks of K), block 128. A block owns 64 columns
// of one matrix z (blockIdx.y) and all MT rows, and walks its chunk of K
// (blockIdx.z; all of K without a split) in stages of 64 rows:
//   load      each thread reads one 16-byte vector of b (32 columns of one row;
//             the next stage's vector is in flight while this one is used) and
//             stores it to shared memory as it came (raw, 64 rows x 32 bytes);
//   transpose each thread takes a 4-row x 8-column block of raw (4 words),
//             makes the 8 columns' dp4a words (4 consecutive k per word, k in
//             byte order) of b - b_zp[n] as int8 (|b - b_zp| <= 15) and stores
//             them to Bt[k / 4][n]; the stage's bytes of a (MT rows) go to
//             As[m][k / 4] (a's rows held in shared memory, zeros past K and M);
//   compute   thread (cg, rg, ks) does dp4a for columns 4cg..4cg+3, rows
//             rg*RM..+RM-1 and every KSPLIT-th k-word of the stage (int32).
// The zero point of b is subtracted as b is unpacked (int4: v + 8 is the code
// XOR 8; v - zp + 128 is code + off[n], off = 128 - zp (uint4) or 120 - zp
// (int4), in 113..143 per byte so no carry crosses bytes; XOR 0x80 gives v - zp
// as an int8 byte), so acc = sum (a - a_zp) (b - b_zp) = sum a (b - b_zp) -
// a_zp[m] * sum (b - b_zp), the column sums one dp4a against 0x01010101 per
// k-word (only with a zero point of a). int32 is exact: |a (b - b_zp)| <= 3825,
// K <= 32768 (selection sends longer K to dp4a-wide). After the chunk the KSPLIT
// partial sums meet in shared memory; with a split of K they go to an int32
// workspace for the finish pass (integers: the chunks' order does not change
// the sum); otherwise each output is requantized exactly as
// in the tiled kernels (requant below: mult =
// (a_scale[m] * b_scale[n]) / out_scale[m], round half even, saturate) with
// per-tensor or per-row a / out parameters, per-tensor or per-column b ones, and
// per-batch b tables (bp_bs elements apart per matrix).
// b's 16-byte path needs the rows' bytes 16-aligned: b's base, each matrix's
// offset and ldb (elements) a multiple of 32, the 32 columns inside N; other
// vectors (N % 32 != 0, odd N, a row start mid-byte, the last columns) read
// their 32 nibbles one at a time (correct, slower).
//
// Napkin math (H100 SXM: 3.35 TB/s HBM3, 132 SMs, 65536 registers and 2048
// threads per SM, 4 issue slots/SM/clk at ~1.75 GHz = 29.6e12
// thread-instructions/s, ~8.8 per byte of b at full bandwidth):
// - Bytes: b is N * K / 2 and dominates (a: M * K, out: M * N), so the limit is
//   N * K / 2 / 3.35e12 s: N = K = 4096 8.4 MB, 2.5 us; N = K = 8192 33.5 MB,
//   10 us; N = 14336, K = 4096 29.4 MB, 8.8 us (the published Marlin M = 1 run
//   moves ~1.25 TB/s of int4 bytes; the issue's target is >= 85% of copy bandwidth).
// - Little's law: 3.35 TB/s x ~0.7 us latency (0.6-0.8) = 2.35 MB in flight on
//   the chip (2.0-2.7 MB), ~17.8 KB per SM (15-20 KB).
// - In flight per block: 128 threads x one 16-byte vector of b (the next
//   stage's, loaded while this one is used) = 2 KB.
// - Blocks per SM (ptxas, sm_90, __launch_bounds__(128), bench/results/static.md):
//   72 / 64 / 80 registers for MT = 1 / 4 / 16, 0 spills, 8.3 / 14.6 / 23.6 KB
//   static shared memory: 7 / 8 / 6 blocks per SM (registers; shared memory
//   would allow 27 / 15 / 9), 924 / 1056 / 792 block slots on 132 SMs, and
//   14 / 16 / 12 KB in flight per SM when every slot is filled: 80% / 90% / 67%
//   of the 17.8 KB, so a full grid can near the bandwidth at MT <= 4 (a second
//   vector in flight per thread is the next step past that).
// - The grid without a split is ceil(N / 64) * matrices blocks: N = 4096, 8192,
//   11008, 14336 give 64, 128, 172, 224 blocks, under 2 per SM: 128-448 KB in
//   flight, 0.18-0.64 TB/s (5-19% of HBM) whatever K is. Hence split-K
//   (blockIdx.z = a chunk of K, dmlq/gpu/qmm_stream.py split_k): chunks =
//   min(slots / column blocks, stages / 4, 32, K / (16 M)) (at least 4 stages of
//   64 rows per chunk; the partial sums at most half of b's bytes), rounded to
//   whole stages; at M = 1 and K = 4096..14336: N = 4096 13-14 chunks (832-896
//   blocks), 8192 7 (896), 11008 5 (860), 14336 4 (896); M = 4: 16 / 8 / 6 / 4
//   chunks (1024 / 1024 / 1032 / 896 blocks); M = 16: 11-12 / 6 / 4 / 3 (672-768
//   blocks). One wave each (blocks <= slots), 1.7-2.1 MB in flight at M <= 4.
//   The partial sums (chunks x M x N int32: M = 1, N = 4096, 13 chunks: 213 KB;
//   M = 16, N = 4096, 11 chunks: 2.9 MB against 8.4 MB of b) are written once
//   and read back by the finish pass from L2 (50 MB).
// - Issue: per 16 bytes of b a thread issues 1 LDG.128, 1 STS.128, 4 LDS + ~36
//   ALU (transpose4 x2, masks, zero-point add/XOR), 2 STS.128, and MT * 8 dp4a
//   (+ 8 for a's zero point) with 4-16 LDS: about 4 instructions per byte at
//   M = 1 (issue is not the limit), ~6 at M = 4 and ~10-11 at M = 16, where dp4a
//   (64/SM/clk, half the issue rate) makes the kernel compute-bound near 40-50%
//   of the bandwidth limit (the tensor cores are the way past that). Those are
//   dynamic counts of the 16-byte path; the static report's main loop (784 /
//   850 / 1044 instructions per 64-row stage for MT = 1 / 4 / 16) also holds the
//   nibble path and a's staging loop. (A minimum block count in the launch
//   bounds made ptxas spill around the division's slow-path call.)
#include "matmul_dp4a.cu"

namespace dmlq {
namespace stream4 {

enum : int { kThreads = 128, kCols = 64, kRows = 64, kWords = kRows / 4 };

// Rows of a per thread in the compute phase, row groups and k-splits.
template <int MT> struct shape {
  static constexpr int RM = MT < 8 ? MT : 8;
  static constexpr int RG = MT / RM;
  static constexpr int KSPLIT = kThreads / (16 * RG);
  static_assert(KSPLIT * 16 * RG == kThreads && kWords % KSPLIT == 0, "thread split");
};

// quantized_matmul's output of an exact int32 sum (docs/semantics.md): the tiled
// kernels' requantization (cuda/matmul_epilogue.cuh).
template <typename TO>
__device__ __forceinline__ TO requant(int acc, float as, float bs, float os, int ozp) {
  return mm::requant<TO>(to_f32(acc), mm::requant_mult(as, bs, os), ozp);
}

// The 32 nibbles (one row of 32 columns, bytes of b from element e on), one at
// a time: zeros past N.
__device__ __forceinline__ uint4 nibbles32(const uint8* B, int64 e, int n, int N) {
  unsigned w[4];  // fully unrolled: registers (a partly unrolled loop put w on the stack)
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = 0u;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (n + 8 * i + j < N) w[i] |= static_cast<unsigned>(nibble(B, e + 8 * i + j)) << (4 * j);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace stream4
}  // namespace dmlq

// offsets: 3 int64 per matrix (blockIdx.y): a, b (elements: half bytes) and out
// element offsets. lda, ldb (elements), ldc; scales and zero points as in the
// matmul kernel ABI (matmul_dp4a.cu): per-row / per-column flags, b's (per-batch)
// parameters bp_bs elements apart per matrix.
// GRP (matmul_stream_grouped): blocked scales along K, groups of `group` rows
// (a multiple of 32: a group ends on a half stage); b_zp a (groups, N) table;
// each group's exact int32 sums go to work[g][z][m][n] (plain stores: a chunk
// of K holds whole groups) for matmul_stream_grouped_finish; no scale is read.
namespace dmlq {
namespace stream4 {
template <typename TA, typename TB, typename TO, int MT, bool GRP>
__device__ __forceinline__ void body(
    const TA* __restrict__ A, const uint8* __restrict__ B, TO* __restrict__ C,
    int M, int N, int K, const int64* __restrict__ offsets, int64 lda, int64 ldb, int64 ldc,
    const float* __restrict__ a_scale, const float* __restrict__ b_scale, const float* __restrict__ out_scale,
    const TA* __restrict__ a_zp, const typename dmlq::b_value<TB>::type* __restrict__ b_zp,
    const TO* __restrict__ out_zp, int a_per_row, int b_per_col, int out_per_row, int64 bp_bs,
    int k_chunk, int* __restrict__ partial, int group) {
  typedef shape<MT> S;
  constexpr bool INT4 = static_cast<typename b_value<TB>::type>(-1) < 0;
  DMLQ_SHARED(16, uint4, raw, [kRows][2]);               // b as loaded: 32 bytes per row
  DMLQ_SHARED(16, unsigned, Bt, [kWords][kCols]);        // dp4a words of b - b_zp
  DMLQ_SHARED(16, unsigned, As, [MT][kWords]);           // dp4a words of a
  // partial sums per k-split; GRP: two slots, for the groups ending in one stage (at most two)
  DMLQ_SHARED(16, unsigned, red, [GRP ? 2 : 1][S::KSPLIT][MT][kCols]);

  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kCols, z = blockIdx.y;
  const int64* off = offsets + 3 * static_cast<int64>(z);
  const TA* a = A + off[0];
  const int64 be = off[1];  // element offset of b[z][0, 0]
  b_scale = mm::batch_params(b_scale, bp_bs, z);
  b_zp = mm::batch_params(b_zp, bp_bs, z);
  // This block's rows of b (split-K: blockIdx.z's chunk, a multiple of kRows; k_chunk >= K without a split).
  const int kb = static_cast<int>(blockIdx.z) * k_chunk, Ke = min(K, kb + k_chunk);

  // load: row lr, columns n0 + 32 * lh .. + 31.
  const int lr = tid >> 1, lh = tid & 1;
  const int ln = n0 + 32 * lh;
  const bool vec = ((reinterpret_cast<unsigned long long>(B) & 15) | (be & 31) | (ldb & 31)) == 0 && ln + 32 <= N;
  auto load = [&](int k0) -> uint4 {
    const int k = k0 + lr;
    if (k >= Ke) return make_uint4(0u, 0u, 0u, 0u);
    const int64 e = be + static_cast<int64>(k) * ldb + ln;
    if (vec) return __ldg(reinterpret_cast<const uint4*>(B + (e >> 1)));
    return nibbles32(B, e, ln, N);
  };

  // transpose: k-word tq (rows 4tq..4tq+3), columns n0 + 8tw .. + 7.
  const int tq = tid >> 3, tw = tid & 7;
  unsigned off_e = 0u, off_o = 0u;  // code -> (v - zp + 128) per byte: even and odd columns
  // zp: b's zero points (per tensor or column; GRP: one group's row of the table)
  auto zp_offsets = [&](const typename b_value<TB>::type* zp) {
    off_e = off_o = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int ne = min(n0 + 8 * tw + 2 * j, N - 1), no = min(n0 + 8 * tw + 2 * j + 1, N - 1);
      const int ze = zp != nullptr ? static_cast<int>(zp[b_per_col ? ne : 0]) : 0;
      const int zo = zp != nullptr ? static_cast<int>(zp[b_per_col ? no : 0]) : 0;
      off_e |= static_cast<unsigned>((INT4 ? 120 : 128) - ze) << (8 * j);
      off_o |= static_cast<unsigned>((INT4 ? 120 : 128) - zo) << (8 * j);
    }
  };
  // GRP: the group of this thread's k-word (tg, ending at row tg_end), its zero points loaded.
  int tg = GRP ? kb / group : 0;
  int tg_end = GRP ? kb + group : 0;
  zp_offsets(b_zp != nullptr && GRP ? b_zp + static_cast<int64>(tg) * N : b_zp);

  // compute: columns 4cg..4cg+3, rows rg*RM.., k-words ks, ks + KSPLIT, ...
  const int cg = tid & 15, rg = (tid >> 4) % S::RG, ks = tid / (16 * S::RG);
  unsigned acc[S::RM][4];
  unsigned cs[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int r = 0; r < S::RM; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0u;
  const bool has_za = a_zp != nullptr;
  // GRP: a's zero points of this thread's rows; the group the compute phase is in (cur,
  // ending at row cur_end); the groups done in the last stage (fin, fin_n of them),
  // whose sums wait in red[g & 1] until the next barrier.
  unsigned zar[GRP ? S::RM : 1];
  if constexpr (GRP) {
#pragma unroll
    for (int r = 0; r < S::RM; ++r) {
      const int m = min(rg * S::RM + r, M - 1);
      zar[r] = has_za ? static_cast<unsigned>(static_cast<int>(a_zp[a_per_row ? m : 0])) : 0u;
    }
  }
  int cur = tg, cur_end = min(tg_end, Ke), fin = 0, fin_n = 0;
  // a group's partial sums of this thread into its slot, a's zero point taken out (linear)
  auto flush = [&](int g) {
#pragma unroll
    for (int r = 0; r < S::RM; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        red[g & 1][ks][rg * S::RM + r][4 * cg + c] = acc[r][c] - zar[GRP ? r : 0] * cs[c];
        acc[r][c] = 0u;
      }
#pragma unroll
    for (int c = 0; c < 4; ++c) cs[c] = 0u;
  };
  // This thread's outputs, column n0 + tid % 64 and rows tid / 64, + 2, ... inside M:
  // store(m, the k-splits' partial sums in red[slot], added) for each.
  auto each_sum = [&](int slot, auto&& store) {
#pragma unroll
    for (int j = 0; j < (MT * kCols + kThreads - 1) / kThreads; ++j) {
      const int m = tid / kCols + j * (kThreads / kCols);
      if (m >= M) break;
      unsigned sum = 0u;
#pragma unroll
      for (int s = 0; s < S::KSPLIT; ++s) sum += red[slot][s][m][tid % kCols];
      store(m, sum);
    }
  };
  // The finished groups' exact sums to work[g][z][m][n].
  auto finish_groups = [&]() {
    const int n = n0 + tid % kCols;
    for (int g = fin; g < fin + fin_n; ++g) {
      if (n >= N) break;
      int* const w = partial + (static_cast<int64>(g) * gridDim.y + z) * M * static_cast<int64>(N) + n;
      each_sum(g & 1, [&](int m, unsigned sum) { w[m * static_cast<int64>(N)] = static_cast<int>(sum); });
    }
    fin_n = 0;
  };

  uint4 next = load(kb);
  for (int k0 = kb; k0 < Ke; k0 += kRows) {
    raw[lr][lh] = next;
    if (k0 + kRows < Ke) next = load(k0 + kRows);
    __syncthreads();
    if constexpr (GRP) {
      finish_groups();  // the last stage's groups (their slots are written again only after the next barrier)
      const int kw = k0 + 4 * tq;
      if (kw < Ke && kw >= tg_end) {  // this k-word starts a later group: its zero points
        do {
          ++tg;
          tg_end += group;
        } while (kw >= tg_end);
        zp_offsets(b_zp != nullptr ? b_zp + static_cast<int64>(tg) * N : b_zp);
      }
    }
    {
      unsigned w[4], e[4], o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[i] = reinterpret_cast<const unsigned*>(&raw[4 * tq + i][0])[tw];
        if (INT4) w[i] ^= 0x88888888u;
        e[i] = ((w[i] & 0x0F0F0F0Fu) + off_e) ^ 0x80808080u;
        o[i] = (((w[i] >> 4) & 0x0F0F0F0Fu) + off_o) ^ 0x80808080u;
      }
      uint4 te, to;
      dp4a::transpose4(e, te);
      dp4a::transpose4(o, to);
      const int valid = Ke - (k0 + 4 * tq);  // rows of this k-word inside the chunk (zeros past it)
      if (valid < 4) {
        const unsigned mask = valid <= 0 ? 0u : (1u << (8 * valid)) - 1u;
        te.x &= mask, te.y &= mask, te.z &= mask, te.w &= mask;
        to.x &= mask, to.y &= mask, to.z &= mask, to.w &= mask;
      }
      *reinterpret_cast<uint4*>(&Bt[tq][8 * tw]) = make_uint4(te.x, to.x, te.y, to.y);
      *reinterpret_cast<uint4*>(&Bt[tq][8 * tw + 4]) = make_uint4(te.z, to.z, te.w, to.w);
      for (int i = tid; i < MT * kWords; i += kThreads) {  // a's bytes: As[m][q]
        const int m = i / kWords, q = i % kWords;
        unsigned word = 0u;
        if (m < M) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int k = k0 + 4 * q + j;
            if (k < Ke) word |= static_cast<unsigned>(static_cast<uint8>(__ldg(a + m * lda + k))) << (8 * j);
          }
        }
        As[m][q] = word;
      }
    }
    __syncthreads();
    // GRP: a group ends after the first half of the stage (rows k0 .. k0 + 31) and/or at
    // its end (or the chunk's); the same for every thread, so each flushes there.
    const bool half_end = GRP && cur_end == k0 + kRows / 2 && cur_end < Ke;
#pragma unroll
    for (int j = 0; j < kWords / S::KSPLIT; ++j) {
      const int q = ks + j * S::KSPLIT;
      const uint4 bq = *reinterpret_cast<const uint4*>(&Bt[q][4 * cg]);
      const unsigned bw[4] = {bq.x, bq.y, bq.z, bq.w};
#pragma unroll
      for (int r = 0; r < S::RM; ++r) {
        const unsigned aw = As[rg * S::RM + r][q];
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = dp4a::dot4<TA, int8>(aw, bw[c], acc[r][c]);
      }
      if (has_za) {
#pragma unroll
        for (int c = 0; c < 4; ++c) cs[c] = dp4a::dot4<int8, uint8>(bw[c], dp4a::kOnes, cs[c]);
      }
      if constexpr (GRP) {
        static_assert(kWords % (2 * S::KSPLIT) == 0, "a thread's k-words: half in each half of the stage");
        if (j == kWords / S::KSPLIT / 2 - 1 && half_end) flush(cur);  // its first-half words are done
      }
    }
    if constexpr (GRP) {
      fin = cur;
      if (half_end) {
        fin_n = 1;
        ++cur;
        cur_end = min(cur_end + group, Ke);
      }
      if (cur_end <= k0 + kRows) {  // the group in progress ends with the stage (or the chunk)
        flush(cur);
        ++fin_n;
        ++cur;
        cur_end = min(cur_end + group, Ke);
      }
    }
  }
  if constexpr (GRP) {
    __syncthreads();
    finish_groups();
  } else {
    // a's zero point (the correction is linear: each k-split corrects its own part).
#pragma unroll
    for (int r = 0; r < S::RM; ++r) {
      const int m = min(rg * S::RM + r, M - 1);
      const unsigned za = has_za ? static_cast<unsigned>(static_cast<int>(a_zp[a_per_row ? m : 0])) : 0u;
#pragma unroll
      for (int c = 0; c < 4; ++c) red[0][ks][rg * S::RM + r][4 * cg + c] = acc[r][c] - za * cs[c];
    }
    __syncthreads();
    // Output column n0 + tid % 64, rows tid / 64, + 2, ... (few values live across the
    // division's slow-path call, so nothing spills).
    const int n = n0 + tid % kCols;
    if (n >= N) return;
    // split-K: the exact int32 sums of this chunk go to partial[split][z][m][n] for
    // matmul_stream_packed_finish (the a_zp correction above is linear: per chunk).
    int* const part = partial == nullptr ? nullptr
        : partial + (static_cast<int64>(blockIdx.z) * gridDim.y + z) * M * static_cast<int64>(N) + n;
    const float bs = b_scale[b_per_col ? n : 0];
    TO* c = C + off[2] + n;
    each_sum(0, [&](int m, unsigned sum) {
      if (part != nullptr) {
        part[m * static_cast<int64>(N)] = static_cast<int>(sum);
        return;
      }
      const int ozp = out_zp != nullptr ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
      c[m * ldc] = requant<TO>(static_cast<int>(sum), a_scale[a_per_row ? m : 0], bs,
                               out_scale[out_per_row ? m : 0], ozp);
    });
  }
}
}  // namespace stream4
}  // namespace dmlq

template <typename TA, typename TB, typename TO, int MT>
__global__ void __launch_bounds__(128) matmul_stream_packed(
    const TA* __restrict__ A, const uint8* __restrict__ B, TO* __restrict__ C,
    int M, int N, int K, const int64* __restrict__ offsets, int64 lda, int64 ldb, int64 ldc,
    const float* __restrict__ a_scale, const float* __restrict__ b_scale, const float* __restrict__ out_scale,
    const TA* __restrict__ a_zp, const typename dmlq::b_value<TB>::type* __restrict__ b_zp,
    const TO* __restrict__ out_zp, int a_per_row, int b_per_col, int out_per_row, int64 bp_bs,
    int k_chunk, int* __restrict__ partial) {
  dmlq::stream4::body<TA, TB, TO, MT, false>(A, B, C, M, N, K, offsets, lda, ldb, ldc, a_scale, b_scale, out_scale,
                                             a_zp, b_zp, out_zp, a_per_row, b_per_col, out_per_row, bp_bs,
                                             k_chunk, partial, 0);
}

// matmul_integer_to_float's blocked scales (groups of `group` rows of b, a multiple of
// 32): each group's exact int32 sums to work[g][z][m][n] (g the group's index in all
// of K; a chunk, k_chunk rows from blockIdx.z * k_chunk, holds whole groups and whole
// stages), for matmul_stream_grouped_finish. b_zp: a (groups, N) table per matrix
// (bp_bs elements apart), or null; a_zp per tensor or row (a_per_row).
template <typename TA, typename TB, int MT>
__global__ void __launch_bounds__(128) matmul_stream_grouped(
    const TA* __restrict__ A, const uint8* __restrict__ B, int M, int N, int K,
    const int64* __restrict__ offsets, int64 lda, int64 ldb,
    const TA* __restrict__ a_zp, const typename dmlq::b_value<TB>::type* __restrict__ b_zp, int a_per_row,
    int64 bp_bs, int k_chunk, int group, int* __restrict__ work) {
  dmlq::stream4::body<TA, TB, int8, MT, true>(A, B, nullptr, M, N, K, offsets, lda, ldb, 0, nullptr, nullptr,
                                                    nullptr, a_zp, b_zp, nullptr, a_per_row, 1, 0, bp_bs, k_chunk,
                                                    work, group);
}

namespace dmlq {
namespace stream4 {
// The second passes' thread: output (m, col) of matrix z = blockIdx.y, its index i in the
// matrix's M x N (mn) outputs; false past the last one. grid (ceil(M * N / 256), matrices).
struct Out {
  int64 mn, i;
  int z, m, col;
};
__device__ __forceinline__ bool finish_output(int M, int N, Out& o) {
  o.mn = static_cast<int64>(M) * N;
  o.i = static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o.i >= o.mn) return false;
  o.z = blockIdx.y;
  o.m = static_cast<int>(o.i / N);
  o.col = static_cast<int>(o.i - static_cast<int64>(o.m) * N);
  return true;
}
}  // namespace stream4
}  // namespace dmlq

// The grouped kernel's second pass (docs/semantics.md, blocked scales along K): output
// (m, n) of matrix blockIdx.y is float32(acc_0) * (a_scale[m] * b_scale[0, n]), then
// + float32(acc_g) * (a_scale[m] * b_scale[g, n]) for g = 1, 2, ... in ascending order,
// each product and add one IEEE-rounded op, then + bias[m, n] where given and one
// rounding to TO. b_scale: (groups, N) per matrix, bp_bs elements apart; bias as in the
// tiled kernels' ABI (cuda/matmul_epilogue.cuh). grid (ceil(M * N / 256), matrices), block 256.
template <typename TO>
__global__ void __launch_bounds__(256) matmul_stream_grouped_finish(
    const int* __restrict__ work, int groups, TO* __restrict__ C, int M, int N,
    const int64* __restrict__ offsets, int64 ldc, const float* __restrict__ a_scale, int a_per_row,
    const float* __restrict__ b_scale, int64 bp_bs, const float* __restrict__ bias, int64 bias_bs,
    int64 bias_ld) {
  using namespace dmlq;
  stream4::Out o;
  if (!stream4::finish_output(M, N, o)) return;
  const int64 mn = o.mn, i = o.i;
  const int z = o.z, m = o.m, col = o.col;
  const float as = a_scale[a_per_row ? m : 0];
  const float* const bs = b_scale + bp_bs * z + col;
  const int* const w = work + static_cast<int64>(z) * mn + i;
  const int64 group_stride = static_cast<int64>(gridDim.y) * mn;
  float v = 0.0f;  // no groups (K = 0): +0.0
  for (int g = 0; g < groups; ++g) {
    const float term = ieee_mul(to_f32(w[g * group_stride]), ieee_mul(as, bs[static_cast<int64>(g) * N]));
    v = g == 0 ? term : ieee_add(v, term);
  }
  if (bias != nullptr) v = ieee_add(v, bias[bias_bs * z + m * bias_ld + col]);
  C[offsets[3 * static_cast<int64>(z) + 2] + m * ldc + col] = from_f32<TO>(v);
}

// split-K's second pass: output (m, n) of matrix blockIdx.y is the sum of the
// splits' exact int32 partial sums (partial[split][z][m][n], a's zero point
// already taken out; integers, so their order does not matter), requantized
// once as in matmul_stream_packed. grid (ceil(M * N / 256), matrices), block 256.
template <typename TO>
__global__ void __launch_bounds__(256) matmul_stream_packed_finish(
    const int* __restrict__ partial, int splits, TO* __restrict__ C, int M, int N,
    const int64* __restrict__ offsets, int64 ldc,
    const float* __restrict__ a_scale, const float* __restrict__ b_scale, const float* __restrict__ out_scale,
    const TO* __restrict__ out_zp, int a_per_row, int b_per_col, int out_per_row, int64 bp_bs) {
  using namespace dmlq;
  stream4::Out o;
  if (!stream4::finish_output(M, N, o)) return;
  const int64 mn = o.mn, i = o.i;
  const int z = o.z, m = o.m, col = o.col;
  unsigned total = 0u;
  for (int s = 0; s < splits; ++s) total += static_cast<unsigned>(partial[(static_cast<int64>(s) * gridDim.y + z) * mn + i]);
  const float* const bsz = mm::batch_params(b_scale, bp_bs, z);
  const int ozp = out_zp != nullptr ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
  C[offsets[3 * static_cast<int64>(z) + 2] + m * ldc + col] = stream4::requant<TO>(
      static_cast<int>(total), a_scale[a_per_row ? m : 0], bsz[b_per_col ? col : 0],
      out_scale[out_per_row ? m : 0], ozp);
}
