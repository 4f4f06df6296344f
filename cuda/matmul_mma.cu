// Quantized int8 matmul on tensor cores: mma.sync m16n8k32 (sm_80+).
//
// Variant (one template, one production config):
//   matmul_mma<TA, TB, TO, 128, 128, 64, 4>: 128 threads (2x2 warps, 64x64 warp
//       tiles), 4-stage cp.async pipeline, 64 KiB dynamic shared memory.
//   TB packed_int4 / packed_uint4 (a packed 4-bit b, P4 below): instantiated by
//       matmul_mma_packed.cu, whose header describes its staging and fragments.
//   TB kmajor_int8 / kmajor_uint8 (an 8-bit b held K-major, KM below: x @ w.T of an
//       (N, K) weight): instantiated by matmul_mma_kmajor.cu, whose header describes it.
//   TB kmajor_int4 / kmajor_uint4 (both: a packed 4-bit b held K-major, KP below: the
//       bytes of an (N, K) int4 weight, MatMulNBits' layout): matmul_mma_kmajor4.cu.
//   GRP (matmul_mma<TA, TB, float | float16, 64, 128, 64, 4, 16, true>, every b above): blocked
//       scales along K, each group's exact sums closed into float32 sums in ascending order;
//       1x4 warps of 64x32 (the float sums need the registers): matmul_mma_grouped.cu.
//   The template also builds 128x256 / 256x128 (8 warps, 1 block/SM, use 3
//   stages); list them only if a benchmark shows they pay. dmlq/gpu/matmul.py
//   picks this kernel for K <= 32768 (int32 accumulation is exact) when M and N
//   fill 128x128 tiles; dp4a wins on tiny problems; K > 32768 goes to the int64
//   path of matmul_dp4a.cu.
//
// Shared-memory layouts and fragment unpacking of every b: cuda/matmul_mma_layout.cuh.
//
// Napkin math (H100 SXM):
//   ops = 2*M*N*K. Dense int8 tensor peak 1979 TOPS = 132 SMs * 8192 ops/clk
//   * 1.83 GHz: one m16n8k32 (8192 ops) per SM sub-partition every 4 clk.
//   mma.sync is not Hopper's full-rate path (wgmma is): expect well below peak.
//   Block tile 128x128x64: 2.1 Mops per 16 KiB staged = 128 ops/byte from L2.
//   L2->SM bytes = M*N*K*(1/BM + 1/BN): 8192^3 at 50% of peak needs ~7.8 TB/s,
//   near the L2 limit, hence the grouped block order (DRAM then sees about
//   M*K + K*N + M*N bytes) and the 128x256 option (25% fewer L2 bytes).
//   Shared-memory reads: a 64x64 warp tile reads 4 KiB per 32 mma = 64 ops/B,
//   which matches 128 B/clk/SM of ldmatrix bandwidth at peak; 64x32 warp tiles
//   would cap at 67% of peak, so warps own 64x64.
//   Shared memory: (BM + BN) * BK = 16 KiB per stage, 4 stages = 64 KiB, two
//   blocks per SM on A100 (164 KiB) and H100 (228 KiB).
//   Registers: 128 int32 accumulators + 32 fragment registers + addresses;
//   ptxas: 247 per thread, no spills, so 2 blocks * 128 threads fit 64 Ki.
//
// Data path:
//   A tiles (BM x 64 bytes, K contiguous) and B tiles (64 x BN bytes, N
//   contiguous) are copied as-is by 16-byte cp.async into XOR-swizzled shared
//   memory; B is never transposed in memory. A fragments come from ldmatrix.x4.
//   B needs mma "col" fragments (4 consecutive k of one n per register), but
//   ldmatrix.trans moves 16-bit pairs: lane (g, t) gets rows 2t, 2t+1 of an
//   8 x 16-byte matrix at byte columns 2g, 2g+1. Every lane supplies its own row
//   address, so matrix 0 reads k rows {0,1,4,5,8,9,12,13} and matrix 1 rows
//   {2,3,6,7,...}: lane (g, t) then holds k = 4t..4t+3 for n = 2g and n = 2g+1
//   across two registers, and two byte permutes (prmt) give the B fragments of
//   two n8 tiles, "even" (n = 2g) and "odd" (n = 2g+1). One ldmatrix.x4.trans +
//   4 prmt = k32 x n16. So lane (g, t) accumulates output columns 4t..4t+3.
//   Epilogue: each warp restages its int32 tile through shared memory (32 rows
//   a pass) and writes 16 outputs per lane with one 16-byte store.
//   Edges: k outside the matrix (the last tile of a K that is not a multiple
//   of 64) is zero-filled in both operands (cp.async src-size), which adds 0
//   to the dot products; rows of A past M and columns of B past N only feed
//   outputs that are never stored, so a tile inside K leaves their shared
//   memory as it is (no copy, no memory traffic); the zero-point terms use
//   the pre-pass row and column sums, so the result is exact. VEC (16 or 4) is the cp.async
//   width the launcher picks from the operands' bases and row strides: K or N
//   a multiple of 16 gives 16-byte copies, a multiple of 4 four 4-byte copies
//   per 16-byte chunk; only an operand that fits neither is first padded by
//   the launcher. The kernel traps on a misaligned operand.
//   Staging, 16-byte copies: every chunk of every tile is one LDGSTS with a
//   byte count and zero fill (A: its bytes left in the row, 16 inside K; B:
//   its N edge, or 0 for a row past K; K-major B: its bytes of the column, or
//   0 past N), so the tile loop has one path and no branch: ptxas turns the
//   count into a zero-fill predicate and a source offset (about 4 more
//   instructions a copy than a fixed-size copy). 4-byte copies: a tile inside
//   K whose B chunk is whole or wholly past N copies fixed sizes with no zero
//   fill (immediate offsets from a per-chunk pointer); the last tile of a
//   ragged K and threads whose B chunk N cuts inside a copy take a rolled
//   loop over the chunks with byte counts (the 498-instruction loop of a
//   count per 4-byte copy, 1 MMA in 7.8, was the first version).
//   The lane's ldmatrix offsets pass through DMLQ_OPAQUE: ptxas otherwise
//   recomputed them from the lane id every tile (~25 instructions).
//   Main loop (sm_90 SASS, bench/results/static.md), per 64x128x128 k-tile
//   with 64 IMMA.16832: 202 instructions with 16-byte copies (1 in 3.2; was
//   240 with a rolled edge loop of 54 that a tile inside K skipped, issuing
//   186), 302 with 4-byte copies (216 when the tile skips its edge loop).
//   A scheduler issues one instruction per cycle and needs one m16n8k32
//   every 4 cycles at the tensor-core peak, so issue does not bound either
//   loop (it did at 741 instructions, 1 MMA in 11.6, with a byte-gather path
//   inlined in it). Stage indices count instead of taking kt % STAGES.

#include "cp_async.cuh"
#include "matmul_epilogue.cuh"
#include "packed4.cuh"
#include "matmul_mma_layout.cuh"
#include "matmul_mma_ptx.cuh"
#include "matmul_tile_grid.cuh"

// Launch: block 32 * (BM/64) * (BN/64) threads (128 for 128x128; GRP: BN/32, 128 for 64x128); grid
// (ceil(N/BN), ceil(M/BM), batch0 * batch1) or (ceil(M/BM) * ceil(N/BN), 1, ...);
// dynamic shared memory STAGES * (BM + BN) * BK bytes (64 KiB: raise the
// function's max dynamic shared size). Blocks past the tile count exit. A wrong
// block size or too little dynamic shared memory traps instead of computing garbage.
template <typename TA, typename TB, typename TO, int BM, int BN, int BK, int STAGES, int VEC, bool GRP = false>
__global__ void __launch_bounds__(32 * (BM / 64) * (BN / (GRP ? 32 : 64)), (BM * BN <= 128 * 128) ? 2 : 1)
matmul_mma(const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C,
           int M, int N, int K, int batch1,
           int64 a_bs0, int64 a_bs1, int64 b_bs0, int64 b_bs1, int64 c_bs0, int64 c_bs1,
           int64 lda, int64 ldb, int64 ldc,
           const float* a_scale, const float* b_scale, const float* out_scale,
           const TA* a_zp, const typename dmlq::b_value<TB>::type* b_zp, const TO* out_zp,
           int a_per_row, int b_per_col, int out_per_row,
           const int* row_sum_a, const int* col_sum_b,
           const float* bias, int64 bias_bs, int64 bias_ld, int64 bp_bs, int k_group,
           int splits, int k_chunk, int* __restrict__ partial) {
  using namespace dmlq_mma;
  using dmlq::mm::kRequant;
  constexpr int KIND = dmlq::mm::kind_of<TO>::value;
  // A packed 4-bit b (TB packed_int4 / packed_uint4, matmul_mma_packed.cu): its
  // ldb and batch strides count elements (ldb even: rows start on bytes), the
  // tiles hold its bytes, and TV (int8 / uint8) is the type of its values.
  typedef typename dmlq::b_value<TB>::type TV;
  constexpr bool P4 = dmlq::b_value<TB>::packed;
  // A K-major b (TB kmajor_int8 / kmajor_uint8, matmul_mma_kmajor.cu): ldb counts the bytes
  // between its columns; its tiles are staged as A's are (BN rows of BK bytes, km_col).
  constexpr bool KM = dmlq::b_value<TB>::kmajor;
  // Both (KP: TB kmajor_int4 / kmajor_uint4, matmul_mma_kmajor4.cu): BN rows of BK / 2 packed
  // bytes, each col fragment register from 16 bits of them (unpack_bk4); the sums carry P4's
  // factor 16, the columns KM's order (PC: the row-major packed b's column order).
  constexpr bool KP = P4 && KM, PC = P4 && !KM;
  static_assert(!KM || VEC == 16, "a K-major b is read with 16-byte copies");
  static_assert(BK == 64, "the A swizzle assumes 64-byte rows");
  static_assert(BM % 64 == 0 && BN % 128 == 0, "64-row warp tiles; B swizzle needs >= 8 chunks");
  static_assert(STAGES >= 2, "pipeline needs two stages");
  static_assert(VEC == 16 || VEC == 8 || VEC == 4, "cp.async copies 4, 8 or 16 bytes");
  // Blocked scales along K (GRP, matmul_mma_grouped.cu): float outputs, warp tiles 64x32.
  static_assert(!GRP || KIND == dmlq::mm::kFloat, "blocked scales: float outputs");
  constexpr int WN = GRP ? 32 : 64;           // columns per warp tile
  constexpr int WARPS_N = BN / WN;
  constexpr int NT = 32 * (BM / 64) * WARPS_N;
  static_assert(NT >= 128 && NT <= 256, "4 or 8 warps");
  constexpr int MI = 4;                       // m16 tiles per warp (64 rows)
  constexpr int NP = WN / 16;                 // n16 pairs per warp (4: 64 cols = 8 n8 tiles)
  constexpr int B_ROW = P4 ? BN / 2 : BN;       // bytes of one k-row of a B tile
  constexpr int A_STAGE = BM * BK, B_STAGE = BK * B_ROW;  // (K-major: BN rows of BK >> P4 bytes, as many)
  constexpr int A_CH = A_STAGE / 16 / NT;     // 16-byte chunks per thread per stage
  constexpr int B_CH = B_STAGE / 16 / NT;
  static_assert(A_CH * 16 * NT == A_STAGE && B_CH * 16 * NT == B_STAGE, "chunk split");
  static_assert((NT / 32) * kEpiWarpBytes <= STAGES * (A_STAGE + B_STAGE), "epilogue staging fits");

  DMLQ_DYNAMIC_SHARED(128, unsigned char, smem);
  dmlq_mma::check_launch(NT, STAGES * (A_STAGE + B_STAGE));

  if (GRP && splits > 1) __trap();  // the groups' float adds are not split
  int split, k_begin, k_end, m0, n0;
  if (!dmlq_mma::block_tile<BM, BN>(M, N, K, splits, k_chunk, split, k_begin, k_end, m0, n0)) return;

  const int z = blockIdx.z;
  const int bz0 = z / batch1, bz1 = z - bz0 * batch1;
  A += bz0 * a_bs0 + bz1 * a_bs1;
  const int64 b_e0 = bz0 * b_bs0 + bz1 * b_bs1;  // matrix z's first element of b
  const unsigned char* const Bb = reinterpret_cast<const unsigned char*>(B) + (P4 ? b_e0 >> 1 : b_e0);
  const int64 ldb_b = P4 ? ldb >> 1 : ldb;       // bytes between B rows
  C += bz0 * c_bs0 + bz1 * c_bs1;
  b_scale = dmlq::mm::batch_params(b_scale, bp_bs, z);
  b_zp = dmlq::mm::batch_params(b_zp, bp_bs, z);
  a_scale = dmlq::mm::batch_rows(a_scale, a_per_row, M, z);
  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);
  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);
  if (bias != nullptr) bias += bias_bs * z;

  // cp.async needs VEC-aligned sources: the launcher picks VEC from the bases
  // and row strides (16, else 4) and pads an operand that fits neither.
  if (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(Bb) |
        static_cast<unsigned long long>(lda) | static_cast<unsigned long long>(ldb)) & (VEC - 1)) != 0)
    __trap();
  if (P4 && ((b_e0 | ldb) & (2 * VEC - 1)) != 0) __trap();  // packed rows on VEC-byte boundaries

  const int tid = threadIdx.x;
  const unsigned s_base = smem_u32(smem);
  const unsigned sA = s_base, sB = s_base + STAGES * A_STAGE;

  // Per-thread copy assignments, fixed across k tiles. Chunk i of a thread sits
  // NT/4 A rows (NT/(BN/16) B rows; NT/(BN/32) for a packed b) after chunk 0:
  // multiples of 8 and 16, so the swizzle terms are the same and only the row offset changes. Source
  // pointers advance by one k tile per load; the byte counts are fixed except
  // on the last tile of a K that is not a multiple of BK, where they are
  // clamped arithmetically (no second copy of the load code in the loop).
  static_assert(NT % BN == 0, "B chunk rows step by a multiple of 16");
  constexpr int B_CPR = B_ROW / 16;  // 16-byte chunks per B k-row: 16 columns, or 32 packed
  constexpr int kr_step = NT / B_CPR;
  const int a_row0 = tid >> 2, a_kc = tid & 3;
  const unsigned a_dst0 = sA + a_off(a_row0, a_kc);
  const TA* a_src[A_CH];  // row start + chunk; row 0 for rows >= M (its outputs not stored)
  int a_rows = 0;         // bit i: chunk i's row is inside M
#pragma unroll
  for (int i = 0; i < A_CH; ++i) {
    const int gm = m0 + a_row0 + i * (NT / 4);
    a_rows |= (gm < M) << i;
    a_src[i] = A + (gm < M ? static_cast<int64>(gm) * lda : 0) + a_kc * 16;
  }
  const int64 a_chunk_step = static_cast<int64>(NT / 4) * lda;  // chunk i's row: a_src[0] + i * this
  const int b_kr0 = tid / B_CPR, b_nc = tid % B_CPR;
  const int b_n = n0 + b_nc * (P4 ? 32 : 16);
  // N edge, same for every chunk; packed: the bytes holding columns b_n..N-1
  // (an odd N's last byte carries a padding nibble, which feeds column N only).
  // K-major: this thread fills A's row and chunk of B's tile (row a_row0 + i * NT/4,
  // column km_col of it, 16 k-bytes at a_kc); packed, row km_r0 + i * NT/2 and chunk
  // km_kc (32 k) of BK/2-byte rows. Bit i of b_cols: chunk i's column is inside N.
  const unsigned b_nbytes = KM || b_n >= N ? 0u : min(16, P4 ? (N - b_n + 1) >> 1 : N - b_n);
  constexpr int KM_STEP = P4 ? NT / 2 : NT / 4, KM_ROW = BK >> P4;  // chunk rows apart; bytes a row
  const int km_r0 = P4 ? tid >> 1 : a_row0, km_kc = P4 ? tid & 1 : a_kc;
  const int km_n = n0 + km_col(km_r0);
  int b_cols = 0;
  if constexpr (KM) {
#pragma unroll
    for (int i = 0; i < B_CH; ++i) b_cols |= (km_n + i * KM_STEP < N) << i;
  }
  const unsigned b_dst0 = sB + (KM ? (P4 ? bkp_off(km_r0, km_kc) : a_off(km_r0, km_kc))
                                   : P4 ? bp_off<BN>(b_kr0, b_nc) : b_off<BN>(b_kr0, b_nc));
  const unsigned char* b_src =
      KM ? Bb + (b_cols ? static_cast<int64>(km_n) * ldb_b : 0) + (k_begin >> P4) + km_kc * 16
         : Bb + static_cast<int64>(k_begin + b_kr0) * ldb_b + (b_nbytes > 0 ? b_n >> P4 : 0);
  const int64 b_chunk_step = static_cast<int64>(KM ? KM_STEP : kr_step) * ldb_b;
  const int64 b_tile_step = KM ? KM_ROW : static_cast<int64>(BK) * ldb_b;

  // Stage k-tile [k0, k0 + BK) into stage `stage`; b_src points at k0. Byte counts: this
  // thread's A chunk's bytes left in its row (16 on every tile inside K); a K-major b chunk's
  // bytes of its column (packed: 32 k, an odd count's last byte whole, its other nibble meeting
  // A's zero fill), 0 for a column past N; a row-major b chunk's N edge, 0 for a row past K.
  // 16-byte copies (VEC 16): every chunk is one copy with its count and zero fill, on every
  // tile (no branch, no second path). A copy of 0 bytes reads nothing (src-size 0: its source
  // address is only aligned), so a chunk past K or N needs no in-bounds pointer; A rows past M
  // copy row 0 (their outputs are not stored).
  // 4-byte copies: a tile wholly inside K whose B chunk holds whole copies takes whole copies
  // (fixed sizes, no zero fill, immediate offsets; A rows past M and B copies past N skipped);
  // otherwise (the last tile of a K that is not a multiple of BK, or a B chunk cut by N inside
  // a copy) a rolled loop stages every chunk with byte counts and zero fill.
  const bool b_whole = b_nbytes == 16 || b_nbytes == 0;  // (4-byte copies: never a K-major b)
  auto load_tile = [&](unsigned stage, int k0) {
    const unsigned a_dst = a_dst0 + stage * A_STAGE, b_dst = b_dst0 + stage * B_STAGE;
    const unsigned a_left = static_cast<unsigned>(min(max(k_end - (k0 + a_kc * 16), 0), 16));
    const unsigned km_left =
        P4 ? static_cast<unsigned>((min(max(k_end - (k0 + km_kc * 32), 0), 32) + 1) >> 1) : a_left;
    const int b_rows_left = k_end - (k0 + b_kr0);  // chunk i is inside K when i * kr_step < this
    auto b_bytes = [&](int i) {
      return KM ? (((b_cols >> i) & 1) ? km_left : 0u) : (i * kr_step < b_rows_left ? b_nbytes : 0u);
    };
    constexpr int B_CHUNK = KM ? KM_STEP * KM_ROW : kr_step * B_ROW;  // shared bytes between chunks
    if constexpr (VEC == 16) {
#pragma unroll
      for (int i = 0; i < A_CH; ++i)
        cp_async16(a_dst + i * (NT / 4) * BK, reinterpret_cast<const unsigned char*>(a_src[i] + k0), a_left);
#pragma unroll
      for (int i = 0; i < B_CH; ++i) cp_async16(b_dst + i * B_CHUNK, b_src + i * b_chunk_step, b_bytes(i));
    } else if (k0 + BK <= k_end && b_whole) {
#pragma unroll
      for (int i = 0; i < A_CH; ++i)
        if ((a_rows >> i) & 1)
          cp_async_whole<VEC>(a_dst + i * (NT / 4) * BK, reinterpret_cast<const unsigned char*>(a_src[i] + k0));
      if (b_nbytes != 0) {
#pragma unroll
        for (int i = 0; i < B_CH; ++i) cp_async_whole<VEC>(b_dst + i * B_CHUNK, b_src + i * b_chunk_step);
      }
    } else {
#pragma unroll 1
      for (int c = 0; c < A_CH + B_CH; ++c) {
        unsigned dst, bytes;
        const unsigned char* src;
        if (c < A_CH) {
          bytes = ((a_rows >> c) & 1) ? a_left : 0u;
          dst = a_dst + c * (NT / 4) * BK;
          src = reinterpret_cast<const unsigned char*>(bytes ? a_src[0] + c * a_chunk_step + k0 : A);
        } else {
          bytes = b_bytes(c - A_CH);
          dst = b_dst + (c - A_CH) * B_CHUNK;
          src = bytes ? b_src + (c - A_CH) * b_chunk_step : Bb;
        }
        cp_async_chunk<VEC>(dst, src, bytes);
      }
    }
    b_src += b_tile_step;
  };

  // Warp tile and ldmatrix addresses.
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  // A, ldmatrix.x4: lanes 0-7 / 8-15 / 16-23 / 24-31 address rows 0-7 / 8-15 / 0-7 / 8-15
  // at k bytes 0-15 / 0-15 / 16-31 / 16-31, giving the a0..a3 registers of m16n8k32.
  const int la_row = wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8;
  int la_off[2];
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) la_off[ks] = a_off(la_row, ks * 2 + (lane >> 4));
  // B, ldmatrix.x4.trans: matrix q = lane/8 covers k rows 16*(q/2) + {0,1,4,5,8,9,12,13}
  // (+2 when q is odd); see the header comment.
  const int r8 = lane & 7, q = lane >> 3;
  const int lb_k = (q >> 1) * 16 + (q & 1) * 2 + ((r8 >> 1) << 2) + (r8 & 1);
  // Packed: each 16-byte chunk is 32 columns, so a warp's 64 are chunks 2wn, 2wn+1.
  // K-major: ldmatrix.x4 (not trans) per 16 columns 16p..16p+15 of the warp: matrix q
  // reads the rows of the even (q < 2) or odd (q >= 2) columns (km_col) at k bytes
  // 16 * (q & 1) of the k32 step ks, so lane (g, t) gets k 4t..4t+3 of column 16p + 2g
  // (+ 1): the col fragments b0, b1 of n8 tiles 2p and 2p + 1 as they are; one offset
  // per ks, pair p 16 rows further.
  // Packed and K-major: lane (g, t)'s b0, b1 of n8 tile ni and k32 step p are k 4t..4t+3 and
  // 16+4t..16+4t+3 of its column g, rows 8 ni + g (km_col), bytes 2t and 8 + 2t of chunk p:
  // two 16-bit loads, tile ni 8 rows further.
  constexpr int LB = KM ? BK / 32 : P4 ? NP / 2 : NP;
  int lb_off[LB];
#pragma unroll
  for (int p = 0; p < LB; ++p)
    lb_off[p] = KP ? bkp_off(wn * WN + (lane >> 2), p) + 2 * (lane & 3)
                : KM ? a_off(wn * WN + (q >> 1) * 8 + r8, 2 * p + (q & 1))
                     : P4 ? bp_off<BN>(lb_k, wn * LB + p) : b_off<BN>(lb_k, wn * NP + p);
  // Held in registers: ptxas recomputed them from the lane id every k tile (about 25
  // instructions a tile in the 64x32-warp kernels, whose float sums take the registers).
#pragma unroll
  for (int p = 0; p < LB; ++p) DMLQ_OPAQUE(lb_off[p]);
  DMLQ_OPAQUE(la_off[0]);
  DMLQ_OPAQUE(la_off[1]);

  // GRP: vf, the running float32 sum of the groups closed (docs/semantics.md: in ascending
  // order, each product and add rounded), starts at -0.0: -0.0 + x is x for every x, so the
  // first close leaves the first group's term itself. A group is G = k_group consecutive k (0:
  // one group of all K, a multiple of 32 otherwise), the last one what is left of K.
  int acc[MI][2 * NP][4];
  float vf[GRP ? MI : 1][GRP ? 2 * NP : 1][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < 2 * NP; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[mi][ni][e] = 0;
        if constexpr (GRP) vf[mi][ni][e] = -0.0f;
      }
  const int G = k_group > 0 ? k_group : K;
  const int n_groups = k_group > 0 ? (K + G - 1) / G : 1;
  int grp = 0;
  auto group_end = [&]() { return min(K, (grp + 1) * G); };  // (grp + 1) * G < K + G: no overflow
  // GRP: close group grp: its exact sum (acc less the zero-point terms of the group's row and
  // column sums, the pre-passes' tables [group][matrix][row or column]; a packed b's sums
  // shifted back), then vf += float32(sum) * (a_scale * b_scale of the group). Lane (g, t)
  // holds rows g and g + 8 of each m16 tile and, per n8 tile, the columns of its elements 0 | 2
  // and 1 | 3 (quad_col's order).
  auto close_group = [&]() {
    if constexpr (GRP) {
      const int len = min(G, K - grp * G);
      const int gl = lane >> 2, tl = lane & 3;
      const int64 rows_at = (static_cast<int64>(grp) * gridDim.z + z) * M;
      const int64 cols_at = (static_cast<int64>(grp) * gridDim.z + z) * N;
      float bs[2 * NP][2];
      unsigned zb[2 * NP][2], cz[2 * NP][2];  // cz: column sum - len * zb (a's zero point's term)
#pragma unroll
      for (int ni = 0; ni < 2 * NP; ++ni)
#pragma unroll
        for (int o = 0; o < 2; ++o) {
          const int c = PC ? (ni >> 2) * 32 + 8 * tl + 4 * o + (ni & 3) : (ni >> 1) * 16 + 4 * tl + 2 * o + (ni & 1);
          const int n = min(n0 + wn * WN + c, N - 1);  // clamped reads; columns >= N are not stored
          const int64 gi = b_per_col ? static_cast<int64>(grp) * N + n : 0;
          bs[ni][o] = dmlq::mm::group_scale(b_scale, b_per_col, grp, n, N, n_groups);
          zb[ni][o] = b_zp ? static_cast<unsigned>(static_cast<int>(b_zp[gi])) : 0u;
          cz[ni][o] = (a_zp ? static_cast<unsigned>(col_sum_b[cols_at + n]) : 0u) -
                      static_cast<unsigned>(len) * zb[ni][o];
        }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = min(m0 + wm * 64 + mi * 16 + h * 8 + gl, M - 1);
          const float as = a_scale[a_per_row ? m : 0];
          const unsigned za = a_zp ? static_cast<unsigned>(static_cast<int>(a_zp[a_per_row ? m : 0])) : 0u;
          const unsigned rs = b_zp ? static_cast<unsigned>(row_sum_a[rows_at + m]) : 0u;
#pragma unroll
          for (int ni = 0; ni < 2 * NP; ++ni)
#pragma unroll
            for (int o = 0; o < 2; ++o) {
              int& s = acc[mi][ni][2 * h + o];
              // S - za * (colsum - len * zb) - zb * rowsum, mod 2**32: exact (|sum| < 2**31)
              const unsigned v = static_cast<unsigned>(P4 ? s >> 4 : s) - za * cz[ni][o] - zb[ni][o] * rs;
              float& f = vf[mi][ni][2 * h + o];
              f = dmlq::ieee_add(f, dmlq::ieee_mul(dmlq::to_f32(static_cast<int>(v)), dmlq::ieee_mul(as, bs[ni][o])));
              s = 0;
            }
        }
      ++grp;
    }
  };

  const int ktiles = (k_end - k_begin + BK - 1) / BK;
#pragma unroll 1
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_tile(s, k_begin + s * BK);
    cp_async_commit();  // empty groups keep the wait count uniform
  }

  unsigned st = 0, load_st = STAGES - 1;  // stages of tile kt and of tile kt + STAGES - 1
  unsigned a_st, b_st;                    // tile kt's stage
  // Tile kt: its copies waited for, tile kt + STAGES - 1's issued, its stage in a_st / b_st.
  auto next_tile = [&](int kt) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
    __syncthreads();              // everyone's have, and stage (kt-1) is no longer read
    const int nk = kt + STAGES - 1;
    if (nk < ktiles) load_tile(load_st, k_begin + nk * BK);
    cp_async_commit();
    load_st = load_st == STAGES - 1 ? 0 : load_st + 1;

    a_st = sA + st * A_STAGE, b_st = sB + st * B_STAGE;
    st = st == STAGES - 1 ? 0 : st + 1;
  };
  // k32 step ks of that tile: the fragments and the MMAs (the per-step offsets picked, not
  // indexed, so that a rolled loop keeps them in registers).
  auto step = [&](int ks) {
      const int la = ks ? la_off[1] : la_off[0];
      unsigned af[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldsm_x4(af[mi], a_st + la + mi * 16 * BK);
      unsigned bf[2 * NP][2];
      if constexpr (KP) {
        const unsigned char* pb = smem + (b_st - s_base) + (ks ? lb_off[1] : lb_off[0]);
#pragma unroll
        for (int ni = 0; ni < 2 * NP; ++ni) {
          bf[ni][0] = unpack_bk4(*reinterpret_cast<const unsigned short*>(pb + ni * 8 * KM_ROW));
          bf[ni][1] = unpack_bk4(*reinterpret_cast<const unsigned short*>(pb + ni * 8 * KM_ROW + 8));
        }
      } else if constexpr (P4) {
        // 32 columns x k32 per trans load: n8 tile 4c + j holds columns 4g + j
        // of chunk c (mma column g), 16 times their values (unpack_b4).
#pragma unroll
        for (int c = 0; c < LB; ++c) {
          unsigned r[4];
          ldsm_x4_trans(r, b_st + lb_off[c] + ks * 32 * B_ROW);
#pragma unroll
          for (int h = 0; h < 2; ++h)
            unpack_b4(r[2 * h], r[2 * h + 1], bf[4 * c][h], bf[4 * c + 1][h], bf[4 * c + 2][h], bf[4 * c + 3][h]);
        }
      } else if constexpr (KM) {
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          unsigned r[4];
          ldsm_x4(r, b_st + (ks ? lb_off[1] : lb_off[0]) + p * 16 * BK);
          bf[2 * p][0] = r[0];
          bf[2 * p][1] = r[1];
          bf[2 * p + 1][0] = r[2];
          bf[2 * p + 1][1] = r[3];
        }
      } else {
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        unsigned r[4];
        ldsm_x4_trans(r, b_st + lb_off[p] + ks * 32 * BN);
        // r[0]/r[1] hold k 4t,4t+1 / 4t+2,4t+3 at n 2g,2g+1 (bytes n-minor);
        // r[2]/r[3] the same for k + 16. Gather the n = 2g and n = 2g+1 bytes.
        bf[2 * p][0] = __byte_perm(r[0], r[1], 0x6420);
        bf[2 * p + 1][0] = __byte_perm(r[0], r[1], 0x7531);
        bf[2 * p][1] = __byte_perm(r[2], r[3], 0x6420);
        bf[2 * p + 1][1] = __byte_perm(r[2], r[3], 0x7531);
      }
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2 * NP; ++ni) mma_k32<TA, TV>(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
  };
  if constexpr (!GRP) {
    for (int kt = 0; kt < ktiles; ++kt) {
      next_tile(kt);
#pragma unroll
      for (int ks = 0; ks < BK / 32; ++ks) step(ks);
    }
  } else {
    // The tiles before the one that holds the current group's last k close nothing (the
    // innermost loop is the other kernels'); that tile closes the group after the k32 step
    // that ends it (a step past K, zero filled, closes nothing), then the next if it ends there.
    int kt = 0;
    while (kt < ktiles) {
      for (const int t_stop = (group_end() - 1) / BK; kt < t_stop; ++kt) {
        next_tile(kt);
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) step(ks);
      }
      next_tile(kt);
#pragma unroll 1
      for (int ks = 0; ks < BK / 32; ++ks) {
        step(ks);
        if (grp < n_groups && group_end() <= kt * BK + (ks + 1) * 32) close_group();
      }
      ++kt;
    }
  }

  // Epilogue. Each warp restages its int32 tile through shared memory, 32 rows
  // per pass (8 KiB per warp), so that a rolled loop handles 16 adjacent outputs
  // per lane (one 16-byte store) and the float math is not unrolled 128 times.
  cp_async_wait<0>();
  if constexpr (GRP) {
    // The groups' float sum plus the bias, rounded once to TO; 4 adjacent columns a store.
    const int gl = lane >> 2, tl = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * 64 + mi * 16 + h * 8 + gl;
        if (m >= M) continue;
        const float* brow = bias != nullptr ? bias + static_cast<int64>(m) * bias_ld : nullptr;
#pragma unroll
        for (int qd = 0; qd < NP; ++qd) {
          const int n = n0 + wn * WN + quad_col<PC>(qd, tl);
          if (n >= N) continue;
          __align__(16) TO v4[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float f = quad_at<PC>(vf[mi], qd, h, j);
            if (brow != nullptr) f = dmlq::ieee_add(f, brow[min(n + j, N - 1)]);
            v4[j] = dmlq::from_f32<TO>(f);
          }
          dmlq::mm::store4(C + static_cast<int64>(m) * ldc + n, v4, N - n);
        }
      }
    return;
  }
  if constexpr (P4) {
    // Every product was 16 times its value, and so is every sum: exact, since
    // |sum| <= 16 * 255 * 15 * 32768 < 2**31 for K <= 32768 (the mma path's
    // limit), so the arithmetic shift gives the sum itself.
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2 * NP; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] >>= 4;
  }
  const int g = lane >> 2, t4 = lane & 3;
  if (splits > 1) {
    // Raw int32 sums of this k range to partial[split][z][M][N]; the
    // zero-point terms and requantization run in matmul_splitk_epilogue.
    // Lane (g, t) holds 4 adjacent columns of rows g / g+8 per quad (quad_col).
    int* P = partial + (static_cast<int64>(split) * gridDim.z + z) * M * static_cast<int64>(N);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * 64 + mi * 16 + h * 8 + g;
        if (m >= M) continue;
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          const int n = n0 + wn * 64 + quad_col<PC>(p, t4);
          const int4 q4 = quad<PC>(acc[mi], p, h);
          const int v[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (n + j < N) P[static_cast<int64>(m) * N + n + j] = v[j];
        }
      }
    return;
  }
  __syncthreads();  // every warp is done with the pipeline buffers
  unsigned char* const ep = smem + warp * kEpiWarpBytes;
  const bool row_dep = a_per_row || out_per_row;
  // matmul_integer has no scales, matmul_integer_to_float no output ones.
  const float as0 = KIND != dmlq::mm::kInt ? a_scale[0] : 0.0f;
  const float bs0 = KIND != dmlq::mm::kInt ? b_scale[0] : 0.0f;
  const float os0 = KIND == kRequant ? out_scale[0] : 1.0f;
  const unsigned long long c_al = reinterpret_cast<unsigned long long>(C) | static_cast<unsigned long long>(ldc);
  const int64 zM = static_cast<int64>(z) * M, zN = static_cast<int64>(z) * N;
  const unsigned Ku = static_cast<unsigned>(K);

  // This lane's 16 output columns, fixed for the whole epilogue.
  const int cg = lane >> 3;
  const int nc0 = n0 + wn * 64 + cg * 16;
  // cm is b_scale[n] when the multiplier also varies by row, else the whole
  // multiplier (a_scale[0] * b_scale[n]) / out_scale[0]. None of these are kept
  // for the int32 and float outputs (48 registers fewer: their epilogue spilled).
  float cm[16];
  int cbz[16], ccs[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int n = min(nc0 + j, N - 1);  // clamped reads; columns >= N are not stored
    if constexpr (KIND == kRequant) {
      const float bs = b_per_col ? b_scale[n] : bs0;
      cm[j] = row_dep ? bs : dmlq::ieee_div(dmlq::ieee_mul(as0, bs), os0);
      cbz[j] = b_zp ? static_cast<int>(b_zp[b_per_col ? n : 0]) : 0;
      ccs[j] = a_zp ? col_sum_b[zN + n] : 0;
    }
  }

#pragma unroll 1
  for (int ph = 0; ph < 2; ++ph) {
    __syncwarp();  // the previous pass's reads are done
    // Lane (g, t) of pair p holds columns 4t..4t+3 of rows g / g+8 as
    // acc[.][2p][0|2], acc[.][2p+1][0|2], acc[.][2p][1|3], acc[.][2p+1][1|3].
    // Packed b: quad qd of rows g / g+8 is columns quad_col(qd, t) .. + 3.
    if constexpr (PC) {
      // Two straight-line copies (ph is not unrolled): acc stays in registers.
      auto stage = [&](const int (&a0)[2 * NP][4], const int (&a1)[2 * NP][4]) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int qd = 0; qd < NP; ++qd) {
            const int col = quad_col<true>(qd, t4) >> 2;
            *reinterpret_cast<int4*>(ep + epi_off<true>(h * 8 + g, col)) = quad<true>(a0, qd, h);
            *reinterpret_cast<int4*>(ep + epi_off<true>(16 + h * 8 + g, col)) = quad<true>(a1, qd, h);
          }
      };
      if (ph == 0) stage(acc[0], acc[1]);
      else stage(acc[2], acc[3]);
    } else if (ph == 0) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int p = 0; p < NP; ++p)
            *reinterpret_cast<int4*>(ep + epi_off(mi * 16 + h * 8 + g, p * 4 + t4)) =
                make_int4(acc[mi][2 * p][2 * h], acc[mi][2 * p + 1][2 * h],
                          acc[mi][2 * p][2 * h + 1], acc[mi][2 * p + 1][2 * h + 1]);
    } else {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int p = 0; p < NP; ++p)
            *reinterpret_cast<int4*>(ep + epi_off(mi * 16 + h * 8 + g, p * 4 + t4)) =
                make_int4(acc[mi + 2][2 * p][2 * h], acc[mi + 2][2 * p + 1][2 * h],
                          acc[mi + 2][2 * p][2 * h + 1], acc[mi + 2][2 * p + 1][2 * h + 1]);
    }
    __syncwarp();

#pragma unroll 1
    for (int it = 0; it < 4; ++it) {
      const int r = (lane & 7) + 8 * it;  // row within the pass
      const int m = m0 + wm * 64 + ph * 32 + r;
      if (m >= M) continue;
      int x[16];
#pragma unroll
      for (int s4 = 0; s4 < 4; ++s4) {
        const int4 v = *reinterpret_cast<const int4*>(ep + epi_off<PC>(r, cg * 4 + s4));
        x[4 * s4] = v.x; x[4 * s4 + 1] = v.y; x[4 * s4 + 2] = v.z; x[4 * s4 + 3] = v.w;
      }
      const float as = (KIND != dmlq::mm::kInt && a_per_row) ? a_scale[m] : as0;
      const float os = (KIND == kRequant && out_per_row) ? out_scale[m] : os0;
      const int azp = a_zp ? static_cast<int>(a_zp[a_per_row ? m : 0]) : 0;
      const int rsum = b_zp ? row_sum_a[zM + m] : 0;
      // acc - a_zp*colsum - b_zp*rowsum + K*a_zp*b_zp, mod 2^32: the true value
      // fits int32 for K <= 33025, so the wrapped result is exact.
      // The int32 and float outputs read a column's terms as they go (L1 hits), not from registers.
      auto sum = [&](int j) {
        int bz, cs;
        if constexpr (KIND == kRequant) {
          bz = cbz[j];
          cs = ccs[j];
        } else {
          const int n = min(nc0 + j, N - 1);
          bz = b_zp ? static_cast<int>(b_zp[b_per_col ? n : 0]) : 0;
          cs = a_zp ? col_sum_b[zN + n] : 0;
        }
        unsigned v = static_cast<unsigned>(x[j]);
        v -= static_cast<unsigned>(azp) * static_cast<unsigned>(cs);
        v -= static_cast<unsigned>(bz) * static_cast<unsigned>(rsum);
        v += Ku * static_cast<unsigned>(azp) * static_cast<unsigned>(bz);
        return v;
      };
      if constexpr (KIND != kRequant) {
        // int32 or float outputs: 16 per lane, made and stored 4 at a time (few registers live).
        const float* brow = bias != nullptr ? bias + static_cast<int64>(m) * bias_ld : nullptr;
        TO* crow = C + static_cast<int64>(m) * ldc + nc0;
#pragma unroll
        for (int s4 = 0; s4 < 4; ++s4) {
          __align__(16) TO v4[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int j = 4 * s4 + c;
            if constexpr (KIND == dmlq::mm::kInt) {
              v4[c] = static_cast<int>(sum(j));
            } else {
              const int n = min(nc0 + j, N - 1);
              v4[c] = dmlq::mm::float_out<TO>(dmlq::to_f32(static_cast<int>(sum(j))), as, b_scale[b_per_col ? n : 0],
                                               brow != nullptr ? brow + n : nullptr);
            }
          }
          dmlq::mm::store4(crow + 4 * s4, v4, N - (nc0 + 4 * s4));
        }
      } else {  // requantized bytes
      const int ozp = out_zp ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
      const float rm = (row_dep && !b_per_col) ? dmlq::mm::requant_mult(as, bs0, os) : 0.0f;
      unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const unsigned v = sum(j);
        const float mult = !row_dep ? cm[j]
                           : !b_per_col ? rm
                                        : dmlq::mm::requant_mult(as, cm[j], os);
        const TO q8 = dmlq::mm::requant<TO>(dmlq::to_f32(static_cast<int>(v)), mult, ozp);
        w[j >> 2] |= static_cast<unsigned>(static_cast<unsigned char>(q8)) << (8 * (j & 3));
      }
      unsigned char* cp = reinterpret_cast<unsigned char*>(C + static_cast<int64>(m) * ldc + nc0);
      if (nc0 + 15 < N && (c_al & 15) == 0) {
        *reinterpret_cast<uint4*>(cp) = make_uint4(w[0], w[1], w[2], w[3]);
      } else if (nc0 + 15 < N && (c_al & 3) == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) reinterpret_cast<unsigned*>(cp)[i] = w[i];
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j)
          if (nc0 + j < N) cp[j] = static_cast<unsigned char>(w[j >> 2] >> (8 * (j & 3)));
      }
      }
    }
  }
}

namespace dmlq_mma {

// One output of the split-K epilogue (and of matmul_wgmma.cu's): v, the raw sum of output (m, n)
// of matrix z modulo 2**32, less its zero-point terms (exact: the true value fits int32 for
// K <= 33025), then the output type's last step (matmul_epilogue.cuh) written to *c. The
// parameter pointers are matrix z's already (batch_params / batch_rows).
template <typename TA, typename TB, typename TO>
__device__ __forceinline__ void finish_one(unsigned v, int m, int n, int z, int M, int N, int K, TO* c,
                                           const float* a_scale, const float* b_scale, const float* out_scale,
                                           const TA* a_zp, const typename dmlq::b_value<TB>::type* b_zp,
                                           const TO* out_zp, int a_per_row, int b_per_col, int out_per_row,
                                           const int* row_sum_a, const int* col_sum_b,
                                           const float* bias, int64 bias_bs, int64 bias_ld) {
  constexpr int KIND = dmlq::mm::kind_of<TO>::value;
  const int azp = a_zp ? static_cast<int>(a_zp[a_per_row ? m : 0]) : 0;
  const int bzp = b_zp ? static_cast<int>(b_zp[b_per_col ? n : 0]) : 0;
  if (azp) v -= static_cast<unsigned>(azp) * static_cast<unsigned>(col_sum_b[static_cast<int64>(z) * N + n]);
  if (bzp) v -= static_cast<unsigned>(bzp) * static_cast<unsigned>(row_sum_a[static_cast<int64>(z) * M + m]);
  v += static_cast<unsigned>(K) * static_cast<unsigned>(azp) * static_cast<unsigned>(bzp);
  if constexpr (KIND == dmlq::mm::kInt) {
    *c = static_cast<int>(v);
  } else if constexpr (KIND == dmlq::mm::kFloat) {
    *c = dmlq::mm::float_out<TO>(dmlq::to_f32(static_cast<int>(v)), a_scale[a_per_row ? m : 0],
                                 b_scale[b_per_col ? n : 0],
                                 bias != nullptr ? bias + bias_bs * z + static_cast<int64>(m) * bias_ld + n : nullptr);
  } else {
    const int ozp = out_zp ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
    const float mult = dmlq::mm::requant_mult(a_scale[a_per_row ? m : 0], b_scale[b_per_col ? n : 0],
                                              out_scale[out_per_row ? m : 0]);
    *c = dmlq::mm::requant<TO>(dmlq::to_f32(static_cast<int>(v)), mult, ozp);
  }
}

}  // namespace dmlq_mma

// Split-K epilogue: one thread per output of batch entry z = blockIdx.z, grid
// (ceil(M * N / 256), 1, batch0 * batch1), block 256. Sums the splits' int32
// partials (mod 2**32: exact, as the single-pass epilogue), then the same
// zero-point correction and requantization as matmul_mma's epilogue.
template <typename TA, typename TB, typename TO>
__global__ void __launch_bounds__(256)
matmul_splitk_epilogue(const int* __restrict__ partial, int splits, TO* __restrict__ C,
                       int M, int N, int K, int batch1, int64 c_bs0, int64 c_bs1, int64 ldc,
                       const float* a_scale, const float* b_scale, const float* out_scale,
                       const TA* a_zp, const typename dmlq::b_value<TB>::type* b_zp, const TO* out_zp,
                       int a_per_row, int b_per_col, int out_per_row,
                       const int* row_sum_a, const int* col_sum_b,
                       const float* bias, int64 bias_bs, int64 bias_ld, int64 bp_bs, int k_group) {
  const int64 mn = static_cast<int64>(M) * N;
  const int64 i = static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= mn) return;
  const int z = blockIdx.z;
  b_scale = dmlq::mm::batch_params(b_scale, bp_bs, z);
  b_zp = dmlq::mm::batch_params(b_zp, bp_bs, z);
  a_scale = dmlq::mm::batch_rows(a_scale, a_per_row, M, z);
  a_zp = dmlq::mm::batch_rows(a_zp, a_per_row, M, z);
  out_scale = dmlq::mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = dmlq::mm::batch_rows(out_zp, out_per_row, M, z);
  const int m = static_cast<int>(i / N), n = static_cast<int>(i - static_cast<int64>(m) * N);
  unsigned v = 0;
  for (int s = 0; s < splits; ++s) v += static_cast<unsigned>(partial[(static_cast<int64>(s) * gridDim.z + z) * mn + i]);
  const int bz0 = z / batch1, bz1 = z - bz0 * batch1;
  dmlq_mma::finish_one<TA, TB, TO>(v, m, n, z, M, N, K, C + bz0 * c_bs0 + bz1 * c_bs1 + static_cast<int64>(m) * ldc + n,
                                   a_scale, b_scale, out_scale, a_zp, b_zp, out_zp, a_per_row, b_per_col, out_per_row,
                                   row_sum_a, col_sum_b, bias, bias_bs, bias_ld);
}
