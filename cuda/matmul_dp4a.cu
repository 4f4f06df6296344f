// QUANTIZED_LINEAR_MATRIX_MULTIPLY on dp4a (sm_61+): shared-memory tiled,
// register-blocked int8 matmul whose epilogue folds in the zero points and
// requantizes straight to int8/uint8; the int32 product never touches memory.
//
// Kernels (TA, TB, TO each int8 or uint8, all 8 combinations; the parameter
// list is the matmul kernel ABI shared with matmul_mma.cu):
//   matmul_dp4a<TA, TB, TO, BM, BN, BK, TM, TN>       int32 accumulators, K <= 32768
//     dp4a-128x64  128x64x32, 8x8 per thread, 128 threads: big M and N
//     dp4a-64x64    64x64x32, 8x4 per thread, 128 threads: mid sizes (2x the blocks)
//     dp4a-32x32    32x32x32, 4x4 per thread,  64 threads: small or skinny products
//   matmul_dp4a_wide<TA, TB, TO, 64, 64, 32, 8, 4>     K > 32768 (dp4a-wide, 128 threads)
//     int32 partial sums over K-chunks of 32768, each zero-point corrected
//     (exact in int32: |sum_k (a - za)(b - zb)| <= 255*255*32768 < 2**31)
//     and added into int64 accumulators. Row/column sums come from extra
//     dp4a against 0x01010101 inside the loop; row_sum_a/col_sum_b are unused.
//   matmul_row_sums<T> / matmul_col_sums<T>            pre-pass: int32 sums of
//     each A row (one warp per row) and each B column (128 columns x 8
//     k-slices per block, one 32-bit word of 4 columns per load where rows are
//     4-byte aligned; K split between blocks where N / 128 blocks would not
//     fill the SMs), launched only when the other operand has a zero point.
//   matmul_sums_combine<256>                           the column sums' k-splits added
// Selection: dmlq/gpu/matmul.py select_variant (pure Python); plan_quantized_matmul
// gives the launches (kernel_plan prints them).
//
// Epilogue (docs/semantics.md): acc = S - za*colsum(B) - zb*rowsum(A) + K*za*zb,
// computed modulo 2**32 (the true value fits in int32 for K <= 33025, so the
// wrapped result is exact); t = float32(acc) * ((a_scale*b_scale)/out_scale),
// each op one IEEE-rounded non-ftz PTX instruction; round half even, clamp,
// add out_zp. The bytes are staged through shared memory (reusing the tile
// buffers) and written with coalesced 4-byte stores where aligned.
//
// Napkin math (H100 SXM: 132 SMs at ~1.98 GHz boost):
//   ops = 2*M*N*K; bytes = M*K + K*N + M*N.
//   dp4a peak = 64 dp4a/SM/clk * 8 int ops = 512 ops/SM/clk ~= 134 TOPS.
//   4096^3: 137 Gop -> 1.03 ms at peak; 48 MiB -> 15 us at 3.35 TB/s, so the
//   product is compute-bound by ~70x (2730 ops/byte).
//   128x64 tile, BK=32: 6 KiB of global loads per 524 Kop (85 ops/byte), so
//   peak needs ~1.6 TB/s from L2 (far below L2 bandwidth). Per thread per
//   4-deep k step: 64 dp4a against 4 LDS.128 (64 B): 64 B/SM/clk of shared
//   loads at peak, half the 128 B/clk shared bandwidth; staging costs ~40
//   instructions per 512 dp4a. Register prefetch of the next tile into two
//   shared buffers, one __syncthreads per tile. Target >= 60% of dp4a peak.
//   ptxas (sm_90): 167 registers for 128x64 (3 blocks = 12 warps per SM, 64
//   independent accumulators per thread for ILP), 95 for 64x64, 72 for
//   32x32, 189 for wide (2 blocks); no spills.
//   Staging: a tile inside K is loaded as 32-bit words when the operand's rows
//   are 4-byte aligned (base and lda/ldb multiples of 4), one LDG per word
//   with no predicates: rows of A past M read row M - 1 and B columns wholly
//   past N read columns 0..3, since those only feed outputs that are never
//   stored. The last tile of a K that is not a multiple of BK, unaligned rows
//   and a B word cut by N take the edge path: each word is read as the 4-byte
//   window inside its row that ends at the row's end where the word runs past
//   it (4 byte loads, no predicates unless the row is shorter than 4 bytes)
//   and one byte_perm moves the wanted bytes down with zeros above, so A reads
//   0 past K (B rows past K read row K - 1; the wide kernel zeroes them for
//   its column sums). Nothing is padded or copied.
//   Main loop (sm_90 SASS, bench/results/static.md; both paths' code counted
//   once): 808 instructions per 512 DP4A for 128x64 (1 in 1.6; was 987), 501
//   per 256 for 64x64 (1 in 2.0; was 599), 357-360 per 128 for 32x32 (1 in
//   2.8; was 451, 1 in 3.5, with a predicated word-or-bytes load per word),
//   840 per 352 for wide (1 in 2.4; was 908). A tile on the word path skips
//   both edge paths (about 130 of the 32x32 loop's instructions, 220 of
//   128x64's) and issues about 1.8 (32x32) and 1.15 (128x64) instructions per
//   DP4A: at 64 dp4a/SM/clk a scheduler may issue 2 per DP4A, so issue does
//   not bound the loop there; the edge path alone costs about one more
//   instruction per DP4A.
// Indexing: every address is 64-bit (int64 strides); M, N, K are int.
#include "dp4a_words.cuh"
#include "matmul_epilogue.cuh"
#include "packed4.cuh"

namespace dmlq {
namespace dp4a {

template <typename TA, typename TB, typename TO, int BM, int BN, int BK, int TM, int TN, bool WIDE>
__device__ __forceinline__ void gemm(
    const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C,
    int M, int N, int K, int batch1,
    int64 a_bs0, int64 a_bs1, int64 b_bs0, int64 b_bs1, int64 c_bs0, int64 c_bs1,
    int64 lda, int64 ldb, int64 ldc,
    const float* __restrict__ a_scale, const float* __restrict__ b_scale,
    const float* __restrict__ out_scale,
    const TA* __restrict__ a_zp, const typename b_value<TB>::type* __restrict__ b_zp,
    const TO* __restrict__ out_zp, int a_per_row, int b_per_col, int out_per_row,
    const int* __restrict__ row_sum_a, const int* __restrict__ col_sum_b,
    const float* __restrict__ bias, int64 bias_bs, int64 bias_ld, int64 bp_bs, int k_group) {
  // A packed 4-bit b (TB packed_int4 / packed_uint4): its strides and batch
  // offsets count elements (half bytes); staging moves the packed bytes to
  // shared memory as they are (4 k per word, two columns per byte) and the
  // main loop splits each word into two DP4A words of int8 / uint8 values (TV)
  // in registers (cuda/packed4.cuh lo_nibbles / hi_nibbles).
  // Held K-major (KM4: TB kmajor_int4 / kmajor_uint4, matmul_dp4a_kmajor4.cu): ldb counts the
  // elements between b's columns; a thread's 4 columns are read as 4 runs of 4 k (16 bits each)
  // and interleaved into the same shared words (nibbles_pair). An 8-bit b held K-major (KM8: TB
  // kmajor_int8 / kmajor_uint8, matmul_dp4a_kmajor.cu): each column's 4 k are one 32-bit load,
  // already the shared word (no transpose).
  typedef typename b_value<TB>::type TV;
  constexpr bool P4 = b_value<TB>::packed, KM4 = P4 && b_value<TB>::kmajor, KM8 = !P4 && b_value<TB>::kmajor;
  constexpr int KIND = mm::kind_of<TO>::value;
  constexpr bool FLT = KIND == mm::kFloat;
  constexpr int THR_M = BM / TM, THR_N = BN / TN, NT = THR_M * THR_N;
  constexpr int KQ = BK / 4;                  // packed k-words per row per tile
  constexpr int A_PER = BM * KQ / NT;         // A words each thread stages
  constexpr int B_PER = KQ * (BN / 4) / NT;   // 4x4-byte B blocks each thread stages
  constexpr int A_ROW_STEP = NT / KQ;         // rows between a thread's A words
  constexpr int B_KQ_STEP = NT / (BN / 4);    // k-words between a thread's B blocks
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "fragments are 4-wide");
  static_assert(BM % TM == 0 && BN % TN == 0 && BM % 32 == 0, "tile shape");
  static_assert(NT % KQ == 0 && (BM * KQ) % NT == 0 && A_PER >= 1, "A staging");
  static_assert(NT % (BN / 4) == 0 && (KQ * (BN / 4)) % NT == 0 && B_PER >= 1, "B staging");
  static_assert(kChunkK % BK == 0, "chunks are whole tiles");

  // As[buf][k-word][m] and Bs[buf][k-word][n] hold 4 consecutive k packed in
  // a word (the +4 pad makes the transposed A stores conflict-free). A packed
  // b takes Bq[buf][k-word pair][n] instead, half the bytes: per 4 columns
  // (a quad) 4 words, [columns 0|1, 2|3 of the even k-word, 0|1, 2|3 of the
  // odd one], each word 4 packed bytes (k, k+1, k+2, k+3), so one LDS.128
  // gives a thread 4 columns for 8 k. After the main loop the same memory
  // holds the quantized output tile Cs[m][n].
  constexpr int AS_WORDS = 2 * KQ * (BM + 4), BS_WORDS = (P4 ? 1 : 2) * KQ * BN;
  constexpr int CS = BN + 4;  // output tile row stride in bytes
  static_assert(BM * CS <= 4 * (AS_WORDS + BS_WORDS), "output tile fits the staging buffers");
  DMLQ_SHARED(16, unsigned, smem, [AS_WORDS + BS_WORDS]);
  auto As = reinterpret_cast<unsigned (*)[KQ][BM + 4]>(smem);
  auto Bs = reinterpret_cast<unsigned (*)[KQ][BN]>(smem + AS_WORDS);
  auto Bq = reinterpret_cast<unsigned (*)[KQ / 2][BN]>(smem + AS_WORDS);
  static_assert(KQ % 2 == 0, "packed b: k-word pairs");
  unsigned char* Cs = reinterpret_cast<unsigned char*>(smem);

  const int tid = threadIdx.x;
  const int tx = tid % THR_N, ty = tid / THR_N;
  const int z = blockIdx.z;
  const int zb0 = z / batch1, zb1 = z - zb0 * batch1;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  b_scale = mm::batch_params(b_scale, bp_bs, z);
  b_zp = mm::batch_params(b_zp, bp_bs, z);
  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);
  a_zp = mm::batch_rows(a_zp, a_per_row, M, z);
  out_scale = mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);
  if (bias != nullptr) bias += bias_bs * z;
  const unsigned char* Ab = reinterpret_cast<const unsigned char*>(A) + zb0 * a_bs0 + zb1 * a_bs1;
  const int64 b_e0 = zb0 * b_bs0 + zb1 * b_bs1;  // matrix z's first element of b
  const unsigned char* Bb = reinterpret_cast<const unsigned char*>(B) + (P4 ? 0 : b_e0);
  const bool a_al = ((reinterpret_cast<size_t>(Ab) | static_cast<size_t>(lda)) & 3) == 0;
  // Packed: 4 columns at a multiple of 4 elements are one aligned half word (K-major: 4 k of a column).
  const bool b_al = P4 ? ((reinterpret_cast<size_t>(Bb) & 1) | ((b_e0 | ldb) & 3)) == 0
                       : ((reinterpret_cast<size_t>(Bb) | static_cast<size_t>(ldb)) & 3) == 0;
  const int64 ldb_bytes = P4 ? ldb >> 1 : ldb;  // the word path's row step (ldb even there)

  // Staging roles: A word (row a_m + s*A_ROW_STEP, k-word a_kq); B block
  // (k-words b_kq + s*B_KQ_STEP, columns b_n..b_n+3).
  const int a_kq = tid % KQ;
  const int a_m = tid / KQ;
  const int b_n = 4 * (tid % (BN / 4));
  const int b_kq = tid / (BN / 4);
  const int b_cols_left = N - (n0 + b_n);

  unsigned ra[A_PER];
  unsigned rb[B_PER][4];

  // Rows of A past M and columns of B past N only feed outputs that are not
  // stored, so they read any bytes inside the matrix instead of 0: A word s
  // reads row min(m0 + a_m + s*A_ROW_STEP, M - 1) (a_p[s]); B columns
  // wholly past N read columns 0..3 (when N >= 4). K is the one edge that must
  // read 0 (in A; and in B as well for the wide kernel's column sums).
  // Word path (per operand): a tile inside K with the operand's rows 4-byte
  // aligned (for B also this thread's 4 columns whole or redirected): one
  // 32-bit load per word, no predicates. Edge path (the last tile of a K that
  // is not a multiple of BK, unaligned rows, a column word cut by N): each word
  // is read as the 4-byte window inside the row that ends at the row's end
  // where the word runs past it, a byte at a time, and shifted into place.
  const unsigned char* a_p[A_PER];  // word s of tile 0
#pragma unroll
  for (int s = 0; s < A_PER; ++s)
    a_p[s] = Ab + static_cast<int64>(min(m0 + a_m + s * A_ROW_STEP, M - 1)) * lda + 4 * a_kq;
  const bool b_redirect = b_cols_left <= 0 && N >= 4;
  const bool b_words = b_al && (b_cols_left >= 4 || b_redirect);
  const int64 b_word_e = KM4 || KM8 ? static_cast<int64>(b_redirect ? 0 : n0 + b_n) * ldb + 4 * b_kq
                             : (b_redirect ? 0 : n0 + b_n) + static_cast<int64>(4 * b_kq) * ldb;
  const unsigned char* b_p = P4 ? Bb + ((b_e0 + b_word_e) >> 1) : Bb + b_word_e;
  const int64 b_tile_step = KM4 ? BK / 2 : KM8 ? BK : static_cast<int64>(BK) * ldb_bytes;
  // Edge path, B: the column window [b_ns, b_ns + 4) and the selector that
  // brings columns n0 + b_n.. to byte 0 (wholly past N: 0).
  const int b_ns = max(min(n0 + b_n, N - 4), 0);
  const unsigned b_sel = shift_sel(n0 + b_n - b_ns);
  const unsigned char* b_edge = Bb + b_ns;
  const int b_len = N - b_ns;  // elements in the window (4 unless N < 4)
  const int b_nsh = 4 * min(n0 + b_n - b_ns, 4);  // packed: the nibble shift of that move
  // Which operands may take the word path (an int, tested per tile, so that
  // the compiler keeps it instead of recomputing the alignment tests).
  const int word_path = (a_al ? 1 : 0) | (b_words ? 2 : 0);

  auto load_tile = [&](int kt) {
    const int k0 = kt * BK;
    const bool full = k0 + BK <= K;
    if (full && (word_path & 1)) {
#pragma unroll
      for (int s = 0; s < A_PER; ++s) ra[s] = __ldg(reinterpret_cast<const unsigned*>(a_p[s] + k0));
    } else {
      const int kw = k0 + 4 * a_kq;               // the word's first k
      const int ks = max(min(kw, K - 4), 0);      // the window's
      const unsigned sel = shift_sel(kw - ks);
#pragma unroll
      for (int s = 0; s < A_PER; ++s) ra[s] = window_word(a_p[s] + (ks - 4 * a_kq), K - ks, sel);
    }
    if (full && (word_path & 2)) {
#pragma unroll
      for (int s = 0; s < B_PER; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const unsigned char* q = KM4 ? b_p + 2 * s * B_KQ_STEP + r * ldb_bytes  // (K-major: r a column)
                                   : KM8 ? b_p + 4 * s * B_KQ_STEP + r * ldb_bytes  // (its 4 k one word)
                                         : b_p + static_cast<int64>(4 * s * B_KQ_STEP + r) * ldb_bytes;
          if constexpr (P4) {
            rb[s][r] = __ldg(reinterpret_cast<const unsigned short*>(q));  // the 4 columns' 2 bytes
          } else {
            rb[s][r] = __ldg(reinterpret_cast<const unsigned*>(q));
          }
        }
    } else if constexpr (KM4) {
      // Edge path, K-major: column c's 4 codes from k (1 to 3 byte loads; codes past K are 0;
      // columns past N read column N - 1 and feed no stored output).
#pragma unroll
      for (int s = 0; s < B_PER; ++s) {
        const int k = k0 + 4 * (b_kq + s * B_KQ_STEP), valid = K - k;
        int64 e = b_e0 + static_cast<int64>(min(n0 + b_n, N - 1)) * ldb + k;  // column c's k (stepped)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          rb[s][c] = valid <= 0 ? 0u
                                : nibbles4(Bb, e, min(valid, 4)) & (valid >= 4 ? 0xFFFFu : (1u << (4 * valid)) - 1u);
          if (n0 + b_n + c + 1 < N) e += ldb;
        }
      }
    } else if constexpr (KM8) {
      // Edge path, K-major 8-bit: column c's 4 k read as A's rows are (window_word: bytes past K
      // are 0; columns past N read column N - 1 and feed no stored output).
#pragma unroll
      for (int s = 0; s < B_PER; ++s) {
        const int k = k0 + 4 * (b_kq + s * B_KQ_STEP), ks = max(min(k, K - 4), 0);
        const unsigned sel = shift_sel(k - ks);
        const unsigned char* q = Bb + static_cast<int64>(min(n0 + b_n, N - 1)) * ldb + ks;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          rb[s][c] = window_word(q, K - ks, sel);
          if (n0 + b_n + c + 1 < N) q += ldb;
        }
      }
    } else if constexpr (P4) {
      // Edge path, packed: each row's 4 codes read as the window of elements
      // [b_ns, b_ns + 4) (1 to 3 byte loads) shifted into place (rows past K
      // read row K - 1, columns past N what the window holds; they feed no
      // stored output).
#pragma unroll
      for (int s = 0; s < B_PER; ++s) {
        const int k = k0 + 4 * (b_kq + s * B_KQ_STEP);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int64 e = b_e0 + static_cast<int64>(min(k + r, K - 1)) * ldb + b_ns;
          unsigned h = nibbles4(Bb, e, b_len) >> b_nsh;
          if constexpr (WIDE) {
            if (k + r >= K) h = 0u;  // the column sums see B alone
          }
          rb[s][r] = h;
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < B_PER; ++s) {
        // Rows past K read row K - 1 (A is 0 there; the wide kernel zeroes them).
        const int k = k0 + 4 * (b_kq + s * B_KQ_STEP);
        const unsigned char* q = b_edge + static_cast<int64>(static_cast<unsigned>(min(k, K - 1))) * ldb;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          rb[s][r] = window_word(q, b_len, b_sel);
          if constexpr (WIDE) {
            if (k + r >= K) rb[s][r] = 0u;  // the column sums see B alone
          }
          if (r < 3 && k + r + 1 < K) q += ldb;
        }
      }
    }
    b_p += b_tile_step;
  };

  auto store_tile = [&](int buf) {
#pragma unroll
    for (int s = 0; s < A_PER; ++s) As[buf][a_kq][a_m + s * A_ROW_STEP] = ra[s];
#pragma unroll
    for (int s = 0; s < B_PER; ++s) {
      const int kq = b_kq + s * B_KQ_STEP;
      if constexpr (KM4) {
        // columns c = 0..3 (4 k each) -> the words of columns 0|1 and 2|3, byte r from k r.
        *reinterpret_cast<uint2*>(&Bq[buf][kq >> 1][b_n + 2 * (kq & 1)]) =
            make_uint2(nibbles_pair(rb[s][0], rb[s][1]), nibbles_pair(rb[s][2], rb[s][3]));
      } else if constexpr (KM8) {  // each column's 4 k already one word
        *reinterpret_cast<uint4*>(&Bs[buf][kq][b_n]) = make_uint4(rb[s][0], rb[s][1], rb[s][2], rb[s][3]);
      } else if constexpr (P4) {
        // rows r = 0..3 of the 4 columns (2 bytes each) -> the words of
        // columns 0|1 and 2|3, byte r from row r.
        const unsigned t01 = __byte_perm(rb[s][0], rb[s][1], 0x5140);
        const unsigned t23 = __byte_perm(rb[s][2], rb[s][3], 0x5140);
        *reinterpret_cast<uint2*>(&Bq[buf][kq >> 1][b_n + 2 * (kq & 1)]) =
            make_uint2(__byte_perm(t01, t23, 0x5410), __byte_perm(t01, t23, 0x7632));
      } else {
        uint4 packed;
        transpose4(rb[s], packed);
        *reinterpret_cast<uint4*>(&Bs[buf][kq][b_n]) = packed;
      }
    }
  };


  // Per-row / per-column zero points (0 when omitted or out of range).
  unsigned za[TM], zb[TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + frag_pos<THR_M>(i, ty);
    za[i] = (a_zp != nullptr && m < M) ? static_cast<unsigned>(static_cast<int>(a_zp[a_per_row ? m : 0])) : 0u;
  }
  // B parameters of group g (blocked scales: g * N + n; otherwise g = 0).
  auto load_zb = [&](int g) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + frag_pos<THR_N>(j, tx);
      zb[j] = (b_zp != nullptr && n < N)
                  ? static_cast<unsigned>(static_cast<int>(b_zp[b_per_col ? static_cast<int64>(g) * N + n : 0])) : 0u;
    }
  };
  load_zb(0);

  unsigned acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0u;

  // Wide path only: per-chunk row/column sums and the int64 total.
  unsigned rs[WIDE ? TM : 1], cs[WIDE ? TN : 1];
  int64 acc64[WIDE ? TM : 1][WIDE ? TN : 1];
  // Wide float output: the running float32 sum of the groups done, and the
  // current group's row and column scales (docs/semantics.md: groups in
  // ascending order, each product and add rounded).
  constexpr bool WF = WIDE && FLT;
  float vf[WF ? TM : 1][WF ? TN : 1], as_r[WF ? TM : 1], bs_g[WF ? TN : 1];
  auto load_bs = [&](int g) {
    if constexpr (WF) {
      const int groups = k_group > 0 ? (K + k_group - 1) / k_group : 1;  // (b_per_col 2 / 3: the scales' rows)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        bs_g[j] = mm::group_scale(b_scale, b_per_col, g, min(n0 + frag_pos<THR_N>(j, tx), N - 1), N, groups);
    }
  };
  if constexpr (WF) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      as_r[i] = a_scale[a_per_row ? min(m0 + frag_pos<THR_M>(i, ty), M - 1) : 0];
#pragma unroll
      for (int j = 0; j < TN; ++j) vf[i][j] = 0.0f;  // K = 0 with blocks (no groups): +0.0
    }
    if (K > 0 || k_group == 0) load_bs(0);
    if (K == 0 && k_group == 0) {  // one group of all K, an empty one: 0 * mult (-0.0 for mult < 0)
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) vf[i][j] = ieee_mul(0.0f, ieee_mul(as_r[i], bs_g[j]));
    }
  }
  if constexpr (WIDE) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      rs[i] = 0u;
#pragma unroll
      for (int j = 0; j < TN; ++j) acc64[i][j] = 0;
    }
#pragma unroll
    for (int j = 0; j < TN; ++j) cs[j] = 0u;
  }

  // Packed b: the sums of the columns whose words carry 16 times the values
  // (scaled16) shifted back, exactly (cuda/packed4.cuh).
  auto unscale = [&]() {
    if constexpr (P4) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        if (!scaled16<TV>(j & 1)) continue;
#pragma unroll
        for (int i = 0; i < TM; ++i) acc[i][j] = static_cast<unsigned>(static_cast<int>(acc[i][j]) >> 4);
        if constexpr (WIDE) cs[j] = static_cast<unsigned>(static_cast<int>(cs[j]) >> 4);
      }
    }
  };

  const int ntiles = K > 0 ? (K - 1) / BK + 1 : 0;
  if (ntiles > 0) {
    load_tile(0);
    store_tile(0);
  }
  __syncthreads();

  int chunk_k0 = 0;
  // Wide: the group in progress (blocked scales along K: `group` a multiple of
  // BK; 0 = one group of all K) and its first tile. A group ends a chunk.
  int grp = 0, grp_t0 = 0;
  const int grp_tiles = k_group > 0 ? k_group / BK : ntiles;
  // The K loop runs in stretches that end where the wide kernel folds its sums
  // (the end of a chunk of kChunkK, of a group, or of K), so the fold code lies
  // outside the innermost loop; the other kernels run one stretch.
  constexpr int kChunkTiles = kChunkK / BK;
  int t0 = 0;  // the stretch's first tile
  while (t0 < ntiles) {
  const int t_end = WIDE ? min(min(grp_t0 + grp_tiles, ntiles), t0 + kChunkTiles - (t0 - grp_t0) % kChunkTiles)
                         : ntiles;
  for (int t = t0; t < t_end; ++t) {
    const int buf = t & 1;
    if (t + 1 < ntiles) load_tile(t + 1);  // in flight during the math below

    uint4 bq[P4 ? TN / 4 : 1];  // packed b: the quads of the current k-word pair
#pragma unroll
    for (int kq = 0; kq < KQ; ++kq) {
      unsigned a[TM], b[TN];
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const uint4 v = *reinterpret_cast<const uint4*>(&As[buf][kq][g * THR_M * 4 + ty * 4]);
        a[4 * g] = v.x; a[4 * g + 1] = v.y; a[4 * g + 2] = v.z; a[4 * g + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        if constexpr (P4) {
          // one LDS.128 per quad serves the k-word pair; its even half here, the odd one next
          if ((kq & 1) == 0) bq[g] = *reinterpret_cast<const uint4*>(&Bq[buf][kq >> 1][g * THR_N * 4 + tx * 4]);
          const unsigned w01 = (kq & 1) ? bq[g].z : bq[g].x, w23 = (kq & 1) ? bq[g].w : bq[g].y;
          b[4 * g] = lo_nibbles<TV>(w01); b[4 * g + 1] = hi_nibbles(w01);
          b[4 * g + 2] = lo_nibbles<TV>(w23); b[4 * g + 3] = hi_nibbles(w23);
        } else {
          const uint4 v = *reinterpret_cast<const uint4*>(&Bs[buf][kq][g * THR_N * 4 + tx * 4]);
          b[4 * g] = v.x; b[4 * g + 1] = v.y; b[4 * g + 2] = v.z; b[4 * g + 3] = v.w;
        }
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = dot4<TA, TV>(a[i], b[j], acc[i][j]);
      if constexpr (WIDE) {
#pragma unroll
        for (int i = 0; i < TM; ++i) rs[i] = dot4<TA, TA>(a[i], kOnes, rs[i]);
#pragma unroll
        for (int j = 0; j < TN; ++j) cs[j] = dot4<TV, TV>(kOnes, b[j], cs[j]);
      }
    }

    if (t + 1 < ntiles) store_tile(buf ^ 1);
    __syncthreads();
  }
  t0 = t_end;
    if constexpr (WIDE) {
      const int t = t_end;  // the first tile after the stretch
      // Fold the stretch (a chunk of kChunkK, or the last, shorter one) into int64.
      const bool grp_end = t - grp_t0 == grp_tiles || t == ntiles;
      {  // every stretch ends a chunk
        unscale();
        const int chunk_k1 = (t == ntiles) ? K : t * BK;
        const unsigned kc = static_cast<unsigned>(chunk_k1 - chunk_k0);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            const unsigned v = acc[i][j] - za[i] * cs[j] - zb[j] * rs[i] + kc * za[i] * zb[j];
            acc64[i][j] += static_cast<int64>(static_cast<int>(v));
            acc[i][j] = 0u;
          }
#pragma unroll
        for (int i = 0; i < TM; ++i) rs[i] = 0u;
#pragma unroll
        for (int j = 0; j < TN; ++j) cs[j] = 0u;
        chunk_k0 = chunk_k1;
      }
      if constexpr (WF) {
        if (grp_end) {
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) {
              const float term = ieee_mul(to_f32(acc64[i][j]), ieee_mul(as_r[i], bs_g[j]));
              vf[i][j] = grp == 0 ? term : ieee_add(vf[i][j], term);
              acc64[i][j] = 0;
            }
          ++grp;
          grp_t0 = t;
          if (t < ntiles) {
            load_bs(grp);
            load_zb(grp);
          }
        }
      }
    }
  }

  if constexpr (!WIDE) unscale();
  const unsigned kk = static_cast<unsigned>(K);
  if constexpr (KIND != mm::kRequant) {
    // int32 or float outputs: 4 consecutive columns per fragment group go
    // straight from registers to memory (16 bytes, or 8 for float16, where
    // whole and aligned; the staging buffers are too small for 4-byte outputs).
    float bsc[FLT && !WIDE ? TN : 1];
    unsigned cb[WIDE ? 1 : TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = min(n0 + frag_pos<THR_N>(j, tx), N - 1);
      if constexpr (FLT && !WIDE) bsc[j] = b_scale[b_per_col ? n : 0];
      if constexpr (!WIDE) cb[j] = a_zp != nullptr ? static_cast<unsigned>(col_sum_b[static_cast<int64>(z) * N + n]) : 0u;
    }
    TO* Cb = C + zb0 * c_bs0 + zb1 * c_bs1;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + frag_pos<THR_M>(i, ty);
      const int mc = min(m, M - 1);
      const float as = (FLT && !WIDE) ? a_scale[a_per_row ? mc : 0] : 0.0f;
      const unsigned ra_m = (!WIDE && b_zp != nullptr)
                                ? static_cast<unsigned>(row_sum_a[static_cast<int64>(z) * M + mc]) : 0u;
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const int n = n0 + g * THR_N * 4 + tx * 4;
        __align__(16) TO v[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int j = 4 * g + c;
          const float* bp = bias != nullptr ? bias + static_cast<int64>(mc) * bias_ld + min(n + c, N - 1) : nullptr;
          if constexpr (WIDE) {
            if constexpr (FLT) {
              float f = vf[i][j];
              if (bp != nullptr) f = ieee_add(f, *bp);
              v[c] = from_f32<TO>(f);
            } else {
              v[c] = static_cast<int>(static_cast<unsigned>(acc64[i][j]));  // modulo 2**32
            }
          } else {
            const unsigned u = acc[i][j] - za[i] * cb[j] - zb[j] * ra_m + kk * za[i] * zb[j];
            if constexpr (FLT) v[c] = mm::float_out<TO>(to_f32(static_cast<int>(u)), as, bsc[j], bp);
            else v[c] = static_cast<int>(u);
          }
        }
        if (m < M) mm::store4(Cb + static_cast<int64>(m) * ldc + n, v, N - n);
      }
    }
    return;
  } else {
  // Epilogue: zero-point correction and requantization in registers, the
  // bytes staged in shared memory, then coalesced predicated stores. Rows and
  // columns past the edge compute throwaway values from clamped indices.
  // The wide sums are rounded to float32 first (as the epilogue would), so 32
  // rather than 64 registers stay live across the division slow-path calls.
  float accf[WIDE ? TM : 1][WIDE ? TN : 1];
  if constexpr (WIDE) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) accf[i][j] = to_f32(acc64[i][j]);
  }
  float bsc[TN];
  unsigned cb[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = min(n0 + frag_pos<THR_N>(j, tx), N - 1);
    bsc[j] = b_scale[b_per_col ? n : 0];
    cb[j] = (!WIDE && a_zp != nullptr) ? static_cast<unsigned>(col_sum_b[static_cast<int64>(z) * N + n]) : 0u;
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = frag_pos<THR_M>(i, ty);
    const int m = min(m0 + r, M - 1);
    const float as = a_scale[a_per_row ? m : 0];
    const float os = out_scale[out_per_row ? m : 0];
    const int ozp = out_zp != nullptr ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
    const unsigned ra_m = (!WIDE && b_zp != nullptr)
                              ? static_cast<unsigned>(row_sum_a[static_cast<int64>(z) * M + m]) : 0u;
#pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
      unsigned word = 0u;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = 4 * g + c;
        float f;
        if constexpr (WIDE) {
          f = accf[i][j];
        } else {
          const unsigned v = acc[i][j] - za[i] * cb[j] - zb[j] * ra_m + kk * za[i] * zb[j];
          f = to_f32(static_cast<int>(v));
        }
        const TO q = mm::requant<TO>(f, mm::requant_mult(as, bsc[j], os), ozp);
        word |= static_cast<unsigned>(static_cast<unsigned char>(q)) << (8 * c);
      }
      *reinterpret_cast<unsigned*>(&Cs[r * CS + g * THR_N * 4 + tx * 4]) = word;
    }
  }
  __syncthreads();

  TO* Cb = C + zb0 * c_bs0 + zb1 * c_bs1;
  const bool c_al = ((reinterpret_cast<size_t>(Cb) | static_cast<size_t>(ldc)) & 3) == 0;
  constexpr int ROW_WORDS = BN / 4;
  for (int w = tid; w < BM * ROW_WORDS; w += NT) {
    const int r = w / ROW_WORDS, c = 4 * (w % ROW_WORDS);
    const int m = m0 + r, n = n0 + c;
    if (m >= M || n >= N) continue;
    const unsigned word = *reinterpret_cast<const unsigned*>(&Cs[r * CS + c]);
    unsigned char* dst = reinterpret_cast<unsigned char*>(Cb + static_cast<int64>(m) * ldc + n);
    if (c_al && n + 3 < N) {
      *reinterpret_cast<unsigned*>(dst) = word;
    } else {
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (n + b < N) dst[b] = static_cast<unsigned char>(word >> (8 * b));
    }
  }
  }
}

}  // namespace dp4a
}  // namespace dmlq

#define DMLQ_MATMUL_PARAMS                                                              \
  const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C,               \
      int M, int N, int K, int batch1,                                                  \
      int64 a_bs0, int64 a_bs1, int64 b_bs0, int64 b_bs1, int64 c_bs0, int64 c_bs1,     \
      int64 lda, int64 ldb, int64 ldc,                                                  \
      const float* __restrict__ a_scale, const float* __restrict__ b_scale,             \
      const float* __restrict__ out_scale,                                              \
      const TA* __restrict__ a_zp, const typename dmlq::b_value<TB>::type* __restrict__ b_zp, \
      const TO* __restrict__ out_zp,                                                    \
      int a_per_row, int b_per_col, int out_per_row,                                    \
      const int* __restrict__ row_sum_a, const int* __restrict__ col_sum_b,            \
      const float* __restrict__ bias, int64 bias_bs, int64 bias_ld, int64 bp_bs, int k_group
#define DMLQ_MATMUL_ARGS                                                               \
  A, B, C, M, N, K, batch1, a_bs0, a_bs1, b_bs0, b_bs1, c_bs0, c_bs1, lda, ldb, ldc,   \
      a_scale, b_scale, out_scale, a_zp, b_zp, out_zp, a_per_row, b_per_col, out_per_row, \
      row_sum_a, col_sum_b, bias, bias_bs, bias_ld, bp_bs, k_group

// grid (ceil(N/BN), ceil(M/BM), batch0*batch1), block ((BM/TM)*(BN/TN)).
template <typename TA, typename TB, typename TO, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) matmul_dp4a(DMLQ_MATMUL_PARAMS) {
  dmlq::dp4a::gemm<TA, TB, TO, BM, BN, BK, TM, TN, false>(DMLQ_MATMUL_ARGS);
}

// Same ABI and launch; row_sum_a/col_sum_b are ignored (sums are per chunk).
template <typename TA, typename TB, typename TO, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) matmul_dp4a_wide(DMLQ_MATMUL_PARAMS) {
  dmlq::dp4a::gemm<TA, TB, TO, BM, BN, BK, TM, TN, true>(DMLQ_MATMUL_ARGS);
}

#undef DMLQ_MATMUL_PARAMS
#undef DMLQ_MATMUL_ARGS

// out[z*M + m] = sum_k A[z][m][k] (int32; exact for K <= 2**31 / 255).
// block 256 = 8 warps, one warp per row, grid-stride over batch*M rows. Split s = blockIdx.y
// (grid y: splits) sums k in [s * k_chunk, min(K, (s + 1) * k_chunk)) into out + s *
// split_stride: with k_chunk a group's length, the per-group sums of the grouped tensor-core
// kernel (matmul_mma_grouped.cu); one split (k_chunk >= K) sums whole rows. Launch bounds of 8
// blocks: 32 registers, every thread slot of an SM (the split's offsets took it to 40 and 75%).
// T a packed K-major tag (kmajor_int4 / kmajor_uint4: the column sums of such a b are the sums
// of its (N, K) rows): strides in elements; a row starting on a 4-byte word takes 8 codes a
// word (int4 codes biased by 8: c ^ 8 = value + 8, the bias taken out after), else one a load.
template <typename T>
__global__ void __launch_bounds__(256, 8) matmul_row_sums(
    const T* __restrict__ A, int M, int K, int batch, int batch1,
    int64 a_bs0, int64 a_bs1, int64 lda, int k_chunk, int64 split_stride, int* __restrict__ out) {
  typedef typename dmlq::b_value<T>::type V;
  constexpr bool P4 = dmlq::b_value<T>::packed, kSigned = static_cast<V>(-1) < static_cast<V>(0);
  const int lane = threadIdx.x & 31;
  const int k0 = static_cast<int>(blockIdx.y) * k_chunk;  // this split's first k
  K = min(K - k0, k_chunk);
  out += static_cast<int64>(blockIdx.y) * split_stride;
  const int64 rows = static_cast<int64>(batch) * M;
  for (int64 r = static_cast<int64>(blockIdx.x) * 8 + (threadIdx.x >> 5); r < rows;
       r += static_cast<int64>(gridDim.x) * 8) {
    const int z = static_cast<int>(r / M);
    const int m = static_cast<int>(r - static_cast<int64>(z) * M);
    const int zb0 = z / batch1, zb1 = z - zb0 * batch1;
    unsigned s = 0u;
    int k = 0;
    if constexpr (P4) {
      const uint8* bytes = reinterpret_cast<const uint8*>(A);
      const int64 e = zb0 * a_bs0 + zb1 * a_bs1 + m * lda + k0;  // the split's first element
      if (((reinterpret_cast<size_t>(bytes) + (e >> 1)) & 3) == 0 && (e & 1) == 0) {
        const unsigned* pw = reinterpret_cast<const unsigned*>(bytes + (e >> 1));
        const int nw = K >> 3;
        for (int w = lane; w < nw; w += 32) {
          const unsigned x = __ldg(pw + w) ^ (kSigned ? 0x88888888u : 0u);
          s = dmlq::dp4a::dot4<uint8, uint8>(x & 0x0F0F0F0Fu, dmlq::dp4a::kOnes, s);
          s = dmlq::dp4a::dot4<uint8, uint8>((x >> 4) & 0x0F0F0F0Fu, dmlq::dp4a::kOnes, s);
          if (kSigned) s -= 64u;
        }
        k = nw << 3;
      }
      for (k += lane; k < K; k += 32) s += static_cast<unsigned>(dmlq::nibble_value<V>(bytes, e + k));
    } else {
      const T* p = A + zb0 * a_bs0 + zb1 * a_bs1 + m * lda + k0;
      if ((reinterpret_cast<size_t>(p) & 3) == 0) {
        const unsigned* pw = reinterpret_cast<const unsigned*>(p);
        const int nw = K >> 2;
        for (int w = lane; w < nw; w += 32) s = dmlq::dp4a::dot4<T, T>(__ldg(pw + w), dmlq::dp4a::kOnes, s);
        k = nw << 2;
      }
      for (k += lane; k < K; k += 32) s += static_cast<unsigned>(static_cast<int>(p[k]));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) out[r] = static_cast<int>(s);
  }
}

// out[z*N + n] = sum_k B[z][k][n] (int32; T a packed tag: the 4-bit values,
// one nibble per load, strides in elements). block 256 = 32 column words (128
// columns, 4 per thread) x 8 k-slices; grid (ceil(N/128), min(batch, 65535),
// splits), grid-stride over the batch. Split z = blockIdx.z sums rows
// [z * k_chunk, min(K, (z + 1) * k_chunk)) into out + z * split_stride; with
// more than one split, matmul_sums_combine adds them. N / 128 blocks alone
// leave most SMs idle: at N = K = 8192, 64 blocks with ~16 KiB of loads in
// flight each read b's 64 MiB at a few hundred GB/s (napkin: ~100+ us; the
// H200 timed the whole M = 16 call at 168 us, stream-m16 at 78). Split: about
// 4 blocks an SM, each thread 4 words in flight, near the copy bandwidth.
// Where a thread's 4 columns are a whole aligned word (rows 4-byte aligned:
// base and ldb multiples of 4) it loads one 32-bit word per row and adds its
// bytes as two pairs of 16-bit lanes (signed bytes biased by 128), flushed to
// 32 bits every 256 rows: ~4 instructions per 4 bytes instead of 4 byte loads
// and 4 adds. Other threads load bytes.
template <typename T>
__global__ void __launch_bounds__(256) matmul_col_sums(
    const T* __restrict__ B, int N, int K, int batch, int batch1,
    int64 b_bs0, int64 b_bs1, int64 ldb, int k_chunk, int64 split_stride, int* __restrict__ out) {
  DMLQ_SHARED(16, int, part, [8][128]);
  typedef typename dmlq::b_value<T>::type V;
  constexpr bool P4 = dmlq::b_value<T>::packed;
  constexpr bool kSigned = static_cast<V>(-1) < static_cast<V>(0);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int n = blockIdx.x * 128 + tx * 4;
  const int kb = static_cast<int>(blockIdx.z) * k_chunk, ke = min(K, kb + k_chunk);  // this split's rows
  out += static_cast<int64>(blockIdx.z) * split_stride;
  for (int z = blockIdx.y; z < batch; z += gridDim.y) {
    const int zb0 = z / batch1, zb1 = z - zb0 * batch1;
    const int64 e = zb0 * b_bs0 + zb1 * b_bs1 + n;  // element (k = 0, n)
    const uint8* bytes = reinterpret_cast<const uint8*>(B);
    const V* p = reinterpret_cast<const V*>(B) + (P4 ? 0 : e);
    int s[4] = {0, 0, 0, 0};
    const bool words = !P4 && n + 3 < N &&
        ((reinterpret_cast<unsigned long long>(p) | static_cast<unsigned long long>(ldb)) & 3) == 0;
    if (words) {
      const unsigned bias = kSigned ? 0x80808080u : 0u;
      for (int k0 = kb + ty; k0 < ke; k0 += 8 * 256) {  // <= 256 rows per flush: 16-bit lanes hold 255 * 256
        unsigned even = 0u, odd = 0u;
        const int k1 = min(ke, k0 + 8 * 256);
#pragma unroll 4
        for (int k = k0; k < k1; k += 8) {
          const unsigned w = __ldg(reinterpret_cast<const unsigned*>(p + static_cast<int64>(k) * ldb)) ^ bias;
          even += w & 0x00FF00FFu;
          odd += (w >> 8) & 0x00FF00FFu;
        }
        s[0] += static_cast<int>(even & 0xFFFFu);
        s[1] += static_cast<int>(odd & 0xFFFFu);
        s[2] += static_cast<int>(even >> 16);
        s[3] += static_cast<int>(odd >> 16);
      }
      if (kSigned) {
        const int rows = ke > kb + ty ? (ke - kb - ty + 7) / 8 : 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) s[j] -= 128 * rows;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (n + j < N)
          for (int k = kb + ty; k < ke; k += 8) {
            const int64 i = static_cast<int64>(k) * ldb + j;
            s[j] += P4 ? dmlq::nibble_value<V>(bytes, e + i) : static_cast<int>(p[i]);
          }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) part[ty][tx * 4 + j] = s[j];
    __syncthreads();
    if (ty == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (n + j >= N) break;
        unsigned t = static_cast<unsigned>(s[j]);
#pragma unroll
        for (int i = 1; i < 8; ++i) t += static_cast<unsigned>(part[i][tx * 4 + j]);
        out[static_cast<int64>(z) * N + n + j] = static_cast<int>(t);
      }
    }
    __syncthreads();
  }
}

// out[i] = sum_s part[s * split_stride + i] for i < count (int32, mod 2**32: the
// column sums' k-splits of matmul_col_sums added; exact as the one-pass sum is).
// block kThreads (256), grid-stride.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) matmul_sums_combine(
    const int* __restrict__ part, int64 count, int splits, int64 split_stride, int* __restrict__ out) {
  for (int64 i = static_cast<int64>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += static_cast<int64>(gridDim.x) * kThreads) {
    unsigned t = 0u;
    for (int s = 0; s < splits; ++s) t += static_cast<unsigned>(__ldg(part + s * split_stride + i));
    out[i] = static_cast<int>(t);
  }
}
