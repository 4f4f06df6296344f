// A packed 4-bit or an 8-bit b at small M: the weight-streaming kernels. One
// pass over b's bytes, 16-byte loads; quantized_matmul's requantized output, and
// the integer family's int32 sums and float outputs, blocked scales along K
// included (docs/semantics.md).
//
// Kernels (TA int8 or uint8; TB packed_int4 or packed_uint4 (cuda/packed4.cuh),
// or int8 or uint8 (an 8-bit b: see "8-bit b" below), or kmajor_int8 or
// kmajor_uint8 (an 8-bit b held K-major: "K-major 8-bit b"), or kmajor_int4 or
// kmajor_uint4 (a packed 4-bit b held K-major: "K-major 4-bit b"); TO int8 or uint8, the
// requantized output; int, float or float16 for the grouped finish):
//   matmul_stream_packed<TA, TB, TO, MT>   MT in 1, 4, 16: M <= MT rows
//     stream-m1 / stream-m4 / stream-m16 (dmlq/gpu/matmul.py select_variant:
//     M <= 16, K <= 32768, an 8-bit b where the tiles would not be the tensor
//     cores'; dmlq/gpu/qmm_stream.py plans and binds, and picks the split of K:
//     split_k).
//   matmul_stream_packed_finish<TO>   split-K's second pass: adds the chunks'
//     int32 partial sums and requantizes (only with more than one chunk).
//   matmul_stream_grouped<TA, TB, MT>   stream-grouped-m1 / -m4 / -m16
//     (dmlq/gpu/qmm_stream.py plan_grouped: matmul_integer_to_float, packed or
//     8-bit b, M <= 16, more than one group along K, the group a multiple of 32
//     rows, the workspace below at most b's bytes: 8 M ceil(K / G) <= K; a group
//     of any other length: one chunk of K per group, which then starts anywhere
//     in a stage (kb = z * G; rows past the chunk's end are zeros) and closes at
//     its end, the workspace at most 4x b's bytes; an 8-bit b's groups at most
//     32768 rows, so their int32 sums cannot wrap), and
//     stream-m1 / -m4 / -m16 of matmul_integer and matmul_integer_to_float with
//     one group of scales (plan_sums: where quantized_matmul's rule picks the
//     stream kernel), each chunk of K its own group:
//     the same main loop; each group's exact int32 sums (a's zero point taken
//     out, b's subtracted as it is unpacked, from the group's row of b_zp) go
//     to a workspace work[g][z][m][n]. A group ends at the end of a half stage
//     (32 rows), so each thread's k-words of one half belong to one group and
//     the k-split partials of at most two groups per stage meet in two slots
//     of red, summed by the owning threads after the next barrier. A chunk of
//     K (split-K, blockIdx.z) holds whole groups and whole stages (a multiple
//     of lcm(group, 64) rows), so every group sum is written once, a plain
//     store, and integer sums make the split invisible.
//   matmul_stream_grouped_finish<TO>   acc_g, each group's sum (one group:
//     its chunks' sums added as integers); TO int: acc_0; TO float, float16 or
//     bfloat16 (the one kernel of the family that writes bfloat16; the other
//     plans round a float32 temporary: dmlq/gpu/intmm.py): the float steps of
//     the contract, groups in ascending order:
//     float32(acc_g) * (a_scale * b_scale[g, n]) added one group at a time,
//     then the bias, then one rounding to TO.
//   Napkin math of the grouped pair (beyond the kernel's below): the workspace
//   is groups x M x N int32, 8 M / G of b's bytes (M = 1: 25 % at G = 32, 6 %
//   at G = 128), written once and read once by the finish pass, mostly from L2
//   (N = K = 4096, G = 128, M = 1: 512 KB); the finish pass reads it and b's
//   scales (one float per group and column: 8 / G of b's bytes again) with one
//   thread per output: at M = 1 a few microseconds, launch included, if its loads
//   are not waited for one at a time. They were: the H100's second run took
//   128 / 118 / 144 us at M = 1 / 4 / 16 with groups of 128 (N = K = 8192, 64
//   groups) where the same kernel with one group per chunk took 56 / 55 / 86, a
//   near-constant 58-72 us more, as a chain of 64 dependent steps per thread at
//   one L2 latency each (~1 us) would give. The finish pass now loads 8 groups'
//   sums and scales before their 8 steps (order unchanged): 8 waits instead of
//   64 (unmeasured). The main
//   kernel's own extra work over the requantizing one is the group bookkeeping
//   per stage (uniform branches, one zero-point reload per group per thread,
//   the slot sums); ptxas (sm_90, bench/results/static.md): 63 / 72 / 103
//   registers for MT = 1 / 4 / 16, 0 spills, 10 / 22 / 39 KB static shared
//   memory: 8 / 7 / 4 blocks per SM. Against the dp4a-wide tiles it replaces
//   at M <= 16 (64 x 64 tiles: 63 of 64 rows computed for nothing at M = 1, no
//   split of K, N / 64 blocks), the stream kernel splits K to fill the SMs and
//   moves b once at 16 bytes a load: N = K = 4096, G = 128, M = 1 plans 16
//   chunks of 256 rows (1024 blocks for 132 SMs x 9) against 64 blocks of
//   dp4a-wide doing 128 tiles each. Not yet measured on a GPU.
//   With one group of scales (plan_sums) the workspace is quantized_matmul's
//   split-K partial sums (chunks x M x N int32, at most half of b's bytes by
//   split_k's rule; one chunk without a split), and the tiles it replaces are
//   dp4a-32x32 (31 of 32 rows idle at M = 1, no split of K: N = K = 8192 gives
//   256 blocks of 64 threads, ~2 KB of b in flight per SM against Little's
//   17.8 KB below). Not yet measured on a GPU either.
//
// grid (ceil(N / 64), matrices, chunks of K), block 128. A block owns 64 columns
// of one matrix z (blockIdx.y) and all MT rows, and walks its chunk of K
// (blockIdx.z; all of K without a split) in stages of 64 rows:
//   load      each thread copies one 16-byte vector of b (32 columns of one row)
//             into shared memory as it came (raw, 64 rows x 32 bytes) with
//             cp.async, into a ring of RING stages (ring_stages: 4, the grouped
//             kernel 3): RING - 1 stages are in flight while one is used;
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
// 8-bit b: each thread loads two 16-byte vectors a stage (16 columns each, raw
// 64 rows x 64 bytes; 16-byte path: offsets and ldb multiples of 16, else byte
// by byte), the transpose takes its 4 x 8 block as two words a row (one 8-byte
// load) into two 4x4 byte transposes, and the dp4a words are b's own bytes
// (b - b_zp need not fit a byte). Its zero point leaves the sums afterwards:
// sum (a - a_zp)(b - b_zp) = [sum a b - a_zp sum b] - b_zp[n] sum a + rows a_zp b_zp,
// the bracket as for 4-bit (column sums of b), sum a from a's row sums (one
// dp4a against 0x01010101 per k-word and row, only with a zero point of b, kept
// per k-split in rsum by one thread per row), and rows the chunk's (group's)
// rows of K: all mod 2^32, exact while |sum| < 2^31, i.e. 255 * 255 * K, so K
// <= 33025 (selection: 32768). Rows past K are zeros in both operands, so the
// sums skip them; rows counts only real ones.
// K-major 8-bit b (TB kmajor_int8 / kmajor_uint8, session 36): b's (K, N) matrix
// held as N columns of K contiguous bytes, ldb elements apart (the transposed
// view of an (N, K) weight: torch's Linear layout, x @ w.T), which the row-major
// path copies to rows first (reading and writing b once more: three passes over
// the weight where the limit is one). Here each thread loads two 16-byte vectors
// a stage of one column (thread t: column t / 2, vectors t % 2 and t % 2 + 2 of
// its 64 bytes; a warp reads 16 columns x 32 bytes an instruction: one sector
// each), stored raw[column][vector ^ ((column / 2) % 4)] (the swizzle spreads a
// quarter warp's 16-byte reads below over all 32 banks); a vector past the
// chunk's end, or one on the byte path (16-byte path: b's start, each matrix's
// offset and ldb multiples of 16, which the planner requires of this layout, and
// the chunk's first row: one chunk per group of a length not a multiple of 16
// reads bytes), has zeros past it. The transpose is none: a column's k-words are
// its bytes as they came, so thread t moves k-words 8 (t / 64) .. + 7 of column
// t % 64 (two 16-byte shared reads, eight word stores down Bt's column,
// conflict-free) against the row-major transpose's eight words through two 4x4
// byte transposes. The rest (a's words, dp4a, the zero points, the sums and
// outputs) is the row-major kernel's. Not yet run on a GPU; the host harness
// checks every operator (tests/test_gpu_stream8_kmajor.py).
// K-major 4-bit b (TB kmajor_int4 / kmajor_uint4, session 38): the packed bytes of an (N, K)
// int4 / uint4 weight (dmlq.pack(w).mT: torch's and onnxruntime's MatMulNBits layout), b's
// column n the K elements from element n * ldb (ldb = K) on, which no kernel took before. A
// stage's 64 rows of a column are 32 bytes: thread t copies vector t % 2 of column t / 2 with
// one 16-byte cp.async (K, each matrix's offset and the bytes' start on 32 elements, and the
// chunk's first row; else nibble_run32: the bytes holding the run, shifted by a nibble where it
// starts mid-byte), raw[column][vector ^ ((column / 4) % 2)] (a quarter warp's 16-byte reads
// below then cover all 32 banks). Thread t then spreads the 64 nibbles of vector t / 64 of
// column t % 64 into its 16 k-words: each 16 bits to 4 bytes (PRMT of the 32-bit word and the
// word shifted right by 4, bytes (x0, t0, x1, t1) and (x2, t2, x3, t3), masked to nibbles), then
// b - b_zp exactly as the row-major path (XOR 8 for int4, + (120 or 128) - zp per byte, XOR
// 0x80) with this column's zero point in every byte; rows past the chunk zeroed; eight word
// stores down Bt's column (conflict-free). Per 16 bytes of b: 1 LDG.128, 1 LDS.128, ~8 PRMT,
// 4 SHF, ~16 LOP3/IADD, 8 STS against the row-major path's 4 LDS and two 4x4 byte transposes.
// ptxas (bench/results/static.md): 46 / 54 / 70 registers for MT = 1 / 4 / 16 (grouped: 56 /
// 64 / 93), 0 spills: 10 / 9 / 7 blocks an SM (the row-major packed b: 12 / 9 / 7), main loop
// 497 / 551 / 841 instructions per 64-row stage (row-major: 455 / 487 / 745). Its nibble path
// (nibble_run32) first read 32 nibbles one at a time, which gave the kernel 136 registers at
// MT = 1.
// Not yet run on a GPU; the host harness checks every operator (tests/test_gpu_stream4_kmajor.py).
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
// - In flight per block: RING - 1 stages of 2 KB (64 rows x 32 bytes): 6 KB
//   (the grouped kernel 4 KB). Until 2026-11-27 (session 26) one stage, a
//   vector a thread loaded into registers a stage ahead: 2 KB a block.
// - 8-bit b: twice the bytes per element (N = K = 8192: 67 MB, 20 us), two
//   vectors a thread and stage (4 KB a stage); the dp4a work per byte of b
//   halves against 4-bit at the same M (4 elements a word, not 8 per 4 bytes),
//   so at M = 16 it is M / 4 = 4 dp4a per byte: 13.4e12 dp4a/s at the
//   bandwidth against ~14.8e12 (64 / SM / clk), the kernel near its dp4a
//   bound; at M <= 4 issue is not the limit (about 1-2 instructions per byte).
//   ptxas (bench/results/static.md, with the ring): matmul_stream_packed
//   55 / 94 / 94 registers for MT = 1 / 4 / 16, 22 / 28 / 37 KB: 9 / 5 / 5
//   blocks per SM, 108 / 60 / 60 KB of b in flight per SM when every slot is
//   filled (one stage ahead before: 36 / 20 / 20; Little's 17.8 KB, ~26 on
//   the H200); matmul_stream_grouped (RING 3, and 2 at MT = 16) 80 / 80 / 114
//   registers, 20 / 33 / 46 KB: 6 / 6 / 4 blocks, 48 / 48 / 16 KB (before:
//   20 / 24 / 16). 0 spills. (ptxas picks the register counts, no minimum
//   block count: one made the grouped kernels spill 12-44 B.)
// - Blocks per SM (ptxas, sm_90, __launch_bounds__(128), bench/results/static.md,
//   with the ring and nibble_run32, session 38): 39 / 56 / 72 registers for MT =
//   1 / 4 / 16, 0 spills, 14 / 20 / 29 KB static shared memory: 12 / 9 / 7 blocks
//   per SM (registers), 1584 / 1188 / 924 block slots on 132 SMs, and 72 / 54 /
//   42 KB in flight per SM when every slot is filled: 4x / 3x / 2.4x Little's
//   17.8 KB (with the nibble path's 32 single-nibble loads: 64 / 56 / 107-112
//   registers, 8 / 9 / 4 blocks, 48 / 54 / 24 KB; one stage ahead, 64 / 64 / 80
//   registers and 8 / 8 / 6 blocks, gave 16 / 16 / 12 KB: 90% / 90% / 67% of it,
//   and the H200's ~26 KB is more). The grouped kernel: 48 / 72 / 96 registers,
//   10 / 7 / 5 blocks, 40 / 28 / 20 KB (with the single-nibble loads: 80 / 80 /
//   115 registers, 6 / 6 / 4 blocks, 24 / 24 / 16 KB; before the ring: 63 / 72
//   / 103, 8 / 7 / 4, 16 / 14 / 8). The time at M = 1 and 4 has been the host's
//   (50-65 us a call eager); the graph rows give the kernels' device time: the
//   next GPU session measures the ring there.
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
//   dynamic counts of the 16-byte path; the static report's main loop (455 /
//   487 / 745 instructions per 64-row stage for MT = 1 / 4 / 16, 764 / 866 / 1050
//   with the single-nibble loads; an 8-bit b 452 / 493 / 863) also holds the
//   nibble (byte) path and a's staging loop. (A minimum block count in the launch
//   bounds made ptxas spill around the division's slow-path call.)
#include "matmul_dp4a.cu"
#include "cp_async.cuh"

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

// Stages of b in the block's cp.async ring (raw): 4, three in flight while one is used (the
// grouped kernel 3: with 4, ptxas gave its packed-b kernels 96-153 registers, 3-5 blocks an SM),
// where the block's static shared memory stays within 48 KiB; else 3; else 2, one in flight (the
// grouped kernel's 8-bit b at MT = 16, whose two slots of partial sums take 32 KiB).
template <int MT, bool P4, bool GRP> constexpr int ring_stages() {
  typedef shape<MT> S;
  constexpr int stage = kRows * (P4 ? 32 : 64);
  constexpr int rest = 4 * (kWords * kCols + MT * kWords + (GRP ? 2 : 1) * S::KSPLIT * (MT * kCols + (P4 ? 1 : MT)));
  constexpr int want = GRP ? 3 : 4;
  return rest + want * stage <= 48 * 1024 ? want : rest + 3 * stage <= 48 * 1024 ? 3 : 2;
}

// quantized_matmul's output of an exact int32 sum (docs/semantics.md): the tiled
// kernels' requantization (cuda/matmul_epilogue.cuh).
template <typename TO>
__device__ __forceinline__ TO requant(int acc, float as, float bs, float os, int ozp) {
  return mm::requant<TO>(to_f32(acc), mm::requant_mult(as, bs, os), ozp);
}

// The codes of a run of elements e .. e + 31 of a packed b (32 columns of a row, or a K-major
// column's 32 rows; element e in bits 0-3 of the first word), zeros from element e + len on
// (len <= 32; none for len <= 0): the bytes that hold the len elements (5 a word, the fifth
// shared with the next word), shifted by a nibble where e is odd. (Its predecessor loaded the
// 32 nibbles one at a time, a byte each: ptxas then gave the K-major kernel 136 registers at
// MT = 1, the row-major ones 64 / 56 / 112 for MT = 1 / 4 / 16, now 39 / 56 / 72.)
__device__ __forceinline__ uint4 nibble_run32(const uint8* B, int64 e, int len) {
  const uint8* p = B + (e >> 1);
  const int o = static_cast<int>(e & 1), nb = (o + len + 1) >> 1;  // bytes holding the elements
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned long long v = 0ull;
#pragma unroll
    for (int j = 0; j < 5; ++j)
      if (4 * i + j < nb) v |= static_cast<unsigned long long>(__ldg(p + 4 * i + j)) << (8 * j);
    const unsigned x = static_cast<unsigned>(v >> (4 * o));
    const int left = len - 8 * i;  // elements of this word inside the run
    w[i] = left >= 8 ? x : left <= 0 ? 0u : x & ((1u << (4 * left)) - 1u);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The 16 bytes of an 8-bit b's row from element e on (16 columns), one at a time: zeros past N.
__device__ __forceinline__ uint4 bytes16(const uint8* B, int64 e, int n, int N) {
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (n + 4 * i + j < N) w[i] |= static_cast<unsigned>(__ldg(B + e + 4 * i + j)) << (8 * j);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The type of b's dp4a words: a packed 4-bit b's are b - b_zp as int8 bytes; an 8-bit b's
// are its own bytes (its zero point taken out of the sums afterwards).
template <typename TB> struct bword { typedef TB type; };
template <> struct bword<packed_int4> { typedef int8 type; };
template <> struct bword<packed_uint4> { typedef int8 type; };
template <> struct bword<kmajor_int8> { typedef int8 type; };
template <> struct bword<kmajor_uint8> { typedef uint8 type; };
template <> struct bword<kmajor_int4> { typedef int8 type; };
template <> struct bword<kmajor_uint4> { typedef int8 type; };

}  // namespace stream4
}  // namespace dmlq

// offsets: 3 int64 per matrix (blockIdx.y): a, b (elements: half bytes) and out
// element offsets. lda, ldb (elements), ldc; scales and zero points as in the
// matmul kernel ABI (matmul_dp4a.cu): per-row / per-column flags, b's (per-batch)
// parameters bp_bs elements apart per matrix.
// GRP (matmul_stream_grouped): blocked scales along K, groups of `group` rows
// (a multiple of 32: a group ends on a half stage; or a chunk each); b_zp a (groups, N) table;
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
    int k_chunk, int* __restrict__ partial, int group, int64 zp_ld) {
  typedef shape<MT> S;
  constexpr bool P4 = b_value<TB>::packed;  // else an 8-bit b
  constexpr bool KM = b_value<TB>::kmajor;  // b held K-major: ldb elements between columns
  constexpr bool INT4 = P4 && static_cast<typename b_value<TB>::type>(-1) < 0;
  typedef typename bword<TB>::type BW;
  constexpr int VECS = P4 ? 1 : 2;       // 16-byte vectors of b per thread and stage
  constexpr int VCOLS = P4 ? 32 : 16;    // columns per vector
  constexpr int SLOTS = GRP ? 2 : 1;
  constexpr int RING = ring_stages<MT, P4, GRP>();
  DMLQ_SHARED(16, uint4, raw, [RING][kRows][2 * VECS]);  // b as loaded: 32 (4-bit) or 64 bytes per row
  DMLQ_SHARED(16, unsigned, Bt, [kWords][kCols]);        // dp4a words of b - b_zp (4-bit) or b
  DMLQ_SHARED(16, unsigned, As, [MT][kWords]);           // dp4a words of a
  // partial sums per k-split; GRP: two slots, for the groups ending in one stage (at most two)
  DMLQ_SHARED(16, unsigned, red, [SLOTS][S::KSPLIT][MT][kCols]);
  // 8-bit b with a zero point: a's row sums per k-split (the sums' b_zp term), per slot
  DMLQ_SHARED(16, unsigned, rsum, [SLOTS][S::KSPLIT][P4 ? 1 : MT]);

  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kCols, z = blockIdx.y;
  const int64* off = offsets + 3 * static_cast<int64>(z);
  const TA* a = A + off[0];
  const int64 be = off[1];  // element offset of b[z][0, 0]
  b_scale = mm::batch_params(b_scale, bp_bs, z);
  b_zp = mm::batch_params(b_zp, bp_bs, z);
  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);
  a_zp = mm::batch_rows(a_zp, a_per_row, M, z);
  out_scale = mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);
  // This block's rows of b (split-K: blockIdx.z's chunk, a multiple of kRows; k_chunk >= K without a split).
  const int kb = static_cast<int>(blockIdx.z) * k_chunk, Ke = min(K, kb + k_chunk);

  // load: row lr, vector v (raw[lr][lh + 2 v]): columns n0 + VCOLS * (lh + 2 v) .. + VCOLS - 1.
  const int lr = tid >> 1, lh = tid & 1;
  constexpr int64 ELEMS16 = P4 ? 32 : 16;  // elements in 16 bytes
  const bool aligned = ((reinterpret_cast<unsigned long long>(B) & 15) | (be & (ELEMS16 - 1)) | (ldb & (ELEMS16 - 1))) == 0;
  // K-major: a column's vectors also start where the chunk does, so the chunk on 16 bytes too
  // (one chunk per group of a length not a multiple of 16 (4-bit: 32) takes the byte (nibble) path)
  const bool km16 = KM && aligned && (kb & (ELEMS16 - 1)) == 0;
  // K-major: raw[column][vector ^ swz(column)] spreads a quarter warp's 16-byte reads of one
  // vector index over all 32 banks (8 columns of 64 bytes, 8-bit; of 32 bytes, 4-bit)
  auto swz = [](int col) { return P4 ? (col >> 2) & 1 : (col >> 1) & 3; };
  // The stage of rows k0 .. k0 + 63 into ring slot `slot`, this thread's vectors: a cp.async of
  // each whole aligned one, the others (columns past N, unaligned rows: the bytes that hold them,
  // nibble_run32 / bytes16; rows past the chunk: zeros) stored at once; one cp.async group either way (empty
  // past the chunk's last stage), so the wait below counts stages.
  auto fill = [&](int k0, int slot) {
    if (KM && k0 < Ke) {  // column n0 + lr, its vectors q = lh (, lh + 2): rows k0 + ELEMS16 q .., swizzled
      const int n = n0 + lr;
#pragma unroll
      for (int v = 0; v < VECS; ++v) {
        const int q = lh + 2 * v, k = k0 + static_cast<int>(ELEMS16) * q;
        uint4* const dst = &raw[slot][lr][q ^ swz(lr)];
        const int64 e = be + static_cast<int64>(n) * ldb + k;
        if (n >= N || k >= Ke) *dst = make_uint4(0u, 0u, 0u, 0u);
        else if (km16 && k + ELEMS16 <= Ke) cp_async16_whole(smem_u32(dst), B + (P4 ? e >> 1 : e));
        else if constexpr (P4) *dst = nibble_run32(B, e, min(32, Ke - k));  // zeros past the chunk
        else *dst = bytes16(B, e, k, Ke);  // the chunk's last bytes, zeros past it
      }
    } else if (k0 < Ke) {
      const int k = k0 + lr;
#pragma unroll
      for (int v = 0; v < VECS; ++v) {
        uint4* const dst = &raw[slot][lr][lh + 2 * v];
        const int ln = n0 + VCOLS * (lh + 2 * v);
        const int64 e = be + static_cast<int64>(k) * ldb + ln;
        if (k >= Ke) *dst = make_uint4(0u, 0u, 0u, 0u);
        else if (aligned && ln + VCOLS <= N) cp_async16_whole(smem_u32(dst), B + (P4 ? e >> 1 : e));
        else if constexpr (P4) *dst = nibble_run32(B, e, min(32, N - ln));
        else *dst = bytes16(B, e, ln, N);
      }
    }
    cp_async_commit();
  };

  // transpose: k-word tq (rows 4tq..4tq+3), columns n0 + 8tw .. + 7.
  const int tq = tid >> 3, tw = tid & 7;
  unsigned off_e = 0u, off_o = 0u;  // code -> (v - zp + 128) per byte: even and odd columns
  // zp: b's zero points (per tensor or column; GRP: one group's row of the table)
  auto zp_offsets = [&](const typename b_value<TB>::type* zp) {
    off_e = off_o = 0u;
    if constexpr (KM) {  // 4-bit K-major: this thread's one column (transpose below), in every byte
      const int n = min(n0 + (tid & 63), N - 1);
      const int z0 = zp != nullptr ? static_cast<int>(zp[b_per_col ? n : 0]) : 0;
      off_e = static_cast<unsigned>((INT4 ? 120 : 128) - z0) * 0x01010101u;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int ne = min(n0 + 8 * tw + 2 * j, N - 1), no = min(n0 + 8 * tw + 2 * j + 1, N - 1);
        const int ze = zp != nullptr ? static_cast<int>(zp[b_per_col ? ne : 0]) : 0;
        const int zo = zp != nullptr ? static_cast<int>(zp[b_per_col ? no : 0]) : 0;
        off_e |= static_cast<unsigned>((INT4 ? 120 : 128) - ze) << (8 * j);
        off_o |= static_cast<unsigned>((INT4 ? 120 : 128) - zo) << (8 * j);
      }
    }
  };
  // GRP: the group of this thread's k-word (tg, ending at row tg_end), its zero points loaded.
  int tg = GRP ? kb / group : 0;
  int tg_end = GRP ? kb + group : 0;
  if constexpr (P4) zp_offsets(b_zp != nullptr && GRP ? b_zp + static_cast<int64>(tg) * zp_ld : b_zp);

  // compute: columns 4cg..4cg+3, rows rg*RM.., k-words ks, ks + KSPLIT, ...
  const int cg = tid & 15, rg = (tid >> 4) % S::RG, ks = tid / (16 * S::RG);
  unsigned acc[S::RM][4];
  unsigned cs[4] = {0u, 0u, 0u, 0u};
  unsigned ra[P4 ? 1 : S::RM];  // 8-bit b: a's row sums over this thread's k-words (only with b_zp)
#pragma unroll
  for (int r = 0; r < S::RM; ++r) {
    if constexpr (!P4) ra[r] = 0u;
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0u;
  }
  const bool has_za = a_zp != nullptr;
  const bool has_zb8 = !P4 && b_zp != nullptr;
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
  // this thread's a row sums into slot g (8-bit b with a zero point: one thread per row and k-split)
  auto keep_row_sums = [&](int g) {
    if constexpr (!P4) {
      if (has_zb8 && cg == 0) {
#pragma unroll
        for (int r = 0; r < S::RM; ++r) rsum[g & 1][ks][rg * S::RM + r] = ra[r];
      }
#pragma unroll
      for (int r = 0; r < S::RM; ++r) ra[r] = 0u;
    }
  };
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
    keep_row_sums(g);
  };
  // This thread's outputs, column n0 + tid % 64 (inside N) and rows tid / 64, + 2, ... inside
  // M: store(m, the k-splits' partial sums in red[slot], added) for each. 8-bit b: the sums of
  // `rows` rows whose zero points of b are zb_row (a (groups, N) row or a single value) taken
  // out: - zb[n] * sum(a[m]) + rows * a_zp[m] * zb[n] (mod 2^32, as every sum here).
  auto each_sum = [&](int slot, const typename b_value<TB>::type* zb_row, int rows, auto&& store) {
    unsigned zb = 0u;
    if constexpr (!P4) {
      if (has_zb8) zb = static_cast<unsigned>(static_cast<int>(zb_row[b_per_col ? n0 + tid % kCols : 0]));
    }
#pragma unroll
    for (int j = 0; j < (MT * kCols + kThreads - 1) / kThreads; ++j) {
      const int m = tid / kCols + j * (kThreads / kCols);
      if (m >= M) break;
      unsigned sum = 0u;
#pragma unroll
      for (int s = 0; s < S::KSPLIT; ++s) sum += red[slot][s][m][tid % kCols];
      if (!P4 && has_zb8) {
        unsigned row = 0u;
#pragma unroll
        for (int s = 0; s < S::KSPLIT; ++s) row += rsum[slot][s][m];
        const unsigned za = has_za ? static_cast<unsigned>(static_cast<int>(a_zp[a_per_row ? m : 0])) : 0u;
        sum += (static_cast<unsigned>(rows) * za - row) * zb;
      }
      store(m, sum);
    }
  };
  // The finished groups' exact sums to work[g][z][m][n].
  auto finish_groups = [&]() {
    const int n = n0 + tid % kCols;
    for (int g = fin; g < fin + fin_n; ++g) {
      if (n >= N) break;
      int* const w = partial + (static_cast<int64>(g) * gridDim.y + z) * M * static_cast<int64>(N) + n;
      const int rows = min(g * group + group, K) - g * group;  // a chunk holds whole groups
      each_sum(g & 1, b_zp + (has_zb8 ? g * zp_ld : 0), rows,
               [&](int m, unsigned sum) { w[m * static_cast<int64>(N)] = static_cast<int>(sum); });
    }
    fin_n = 0;
  };

  // The ring: stages 0 .. RING - 2 in flight before the loop; stage i is used from slot i % RING
  // while stage i + RING - 1 lands in the slot stage i - 1 used (free: read before the last
  // barrier of stage i - 1).
#pragma unroll 1
  for (int s = 0; s < RING - 1; ++s) fill(kb + s * kRows, s);
  int slot = 0;
  for (int k0 = kb; k0 < Ke; k0 += kRows) {
    cp_async_wait<RING - 2>();  // this thread's copies of stage i landed (RING - 2 later groups may not have)
    __syncthreads();            // everyone's
    fill(k0 + (RING - 1) * kRows, slot == 0 ? RING - 1 : slot - 1);
    if constexpr (GRP) {
      finish_groups();  // the last stage's groups (their slots are written again only after the next barrier)
      const int kw = k0 + (KM ? 32 * (tid >> 6) : 4 * tq);  // (K-major: the first of its 8 k-words)
      if (P4 && kw < Ke && kw >= tg_end) {  // this k-word starts a later group: its zero points
        do {
          ++tg;
          tg_end += group;
        } while (kw >= tg_end);
        zp_offsets(b_zp != nullptr ? b_zp + static_cast<int64>(tg) * zp_ld : b_zp);
      }
    }
    if constexpr (KM && P4) {
      // column c's k-words 8h .. 8h + 7 are the 64 nibbles of its vector h (one 16-byte read):
      // each 16 bits spread to 4 bytes (two PRMT of the word and its 4-bit shift, a mask), then
      // b - b_zp as the row-major path makes it; rows past the chunk are zeros
      const int c = tid & 63, h = tid >> 6;
      const uint4 v = raw[slot][c][h ^ swz(c)];
      const unsigned src[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned x = INT4 ? src[j] ^ 0x88888888u : src[j], t = x >> 4;
        // k-word 2j: nibbles 0-3 of x (bytes x0, t0, x1, t1 masked), k-word 2j + 1: nibbles 4-7
        unsigned w0 = ((__byte_perm(x, t, 0x5140) & 0x0F0F0F0Fu) + off_e) ^ 0x80808080u;
        unsigned w1 = ((__byte_perm(x, t, 0x7362) & 0x0F0F0F0Fu) + off_e) ^ 0x80808080u;
        const int valid = Ke - (k0 + 32 * h + 8 * j);  // rows of k-word 2j inside the chunk
        if (valid < 8) {
          w0 &= valid <= 0 ? 0u : valid >= 4 ? ~0u : (1u << (8 * valid)) - 1u;
          w1 &= valid <= 4 ? 0u : (1u << (8 * (valid - 4))) - 1u;
        }
        Bt[8 * h + 2 * j][c] = w0;
        Bt[8 * h + 2 * j + 1][c] = w1;
      }
    } else if constexpr (KM) {
      // column c's k-words 8h .. 8h + 7 are its bytes as they came: two 16-byte reads (the
      // swizzle spreads a quarter warp's over the banks), eight word stores down Bt's column
      const int c = tid & 63, h = tid >> 6, sw = swz(c);
      const uint4 v0 = raw[slot][c][(2 * h) ^ sw], v1 = raw[slot][c][(2 * h + 1) ^ sw];
      const unsigned w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) Bt[8 * h + i][c] = w[i];
    } else {
      // this thread's 4 rows x 8 columns of b as dp4a words: lo (columns 0-3), hi (4-7)
      uint4 lo, hi;
      if constexpr (P4) {
        unsigned w[4], e[4], o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          w[i] = reinterpret_cast<const unsigned*>(&raw[slot][4 * tq + i][0])[tw];
          if (INT4) w[i] ^= 0x88888888u;
          e[i] = ((w[i] & 0x0F0F0F0Fu) + off_e) ^ 0x80808080u;
          o[i] = (((w[i] >> 4) & 0x0F0F0F0Fu) + off_o) ^ 0x80808080u;
        }
        uint4 te, to;
        dp4a::transpose4(e, te);
        dp4a::transpose4(o, to);
        lo = make_uint4(te.x, to.x, te.y, to.y);
        hi = make_uint4(te.z, to.z, te.w, to.w);
      } else {
        unsigned w0[4], w1[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint2 w = reinterpret_cast<const uint2*>(&raw[slot][4 * tq + i][0])[tw];
          w0[i] = w.x, w1[i] = w.y;
        }
        dp4a::transpose4(w0, lo);
        dp4a::transpose4(w1, hi);
      }
      const int valid = Ke - (k0 + 4 * tq);  // rows of this k-word inside the chunk (zeros past it)
      if (valid < 4) {
        const unsigned mask = valid <= 0 ? 0u : (1u << (8 * valid)) - 1u;
        lo.x &= mask, lo.y &= mask, lo.z &= mask, lo.w &= mask;
        hi.x &= mask, hi.y &= mask, hi.z &= mask, hi.w &= mask;
      }
      *reinterpret_cast<uint4*>(&Bt[tq][8 * tw]) = lo;
      *reinterpret_cast<uint4*>(&Bt[tq][8 * tw + 4]) = hi;
    }
    {
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
    slot = slot + 1 == RING ? 0 : slot + 1;
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
        for (int c = 0; c < 4; ++c) acc[r][c] = dp4a::dot4<TA, BW>(aw, bw[c], acc[r][c]);
        if constexpr (!P4) {
          if (has_zb8) ra[r] = dp4a::dot4<TA, uint8>(aw, dp4a::kOnes, ra[r]);
        }
      }
      if (has_za) {
#pragma unroll
        for (int c = 0; c < 4; ++c) cs[c] = dp4a::dot4<BW, uint8>(bw[c], dp4a::kOnes, cs[c]);
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
    keep_row_sums(0);
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
    each_sum(0, b_zp, Ke - kb, [&](int m, unsigned sum) {
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
                                             k_chunk, partial, 0, 0);
}

// Groups of `group` rows of b (a multiple of 32, or the chunk itself: each chunk one
// group): each group's exact int32 sums to work[g][z][m][n] (g the group's index in all
// of K; a chunk, k_chunk rows from blockIdx.z * k_chunk, holds whole groups and whole
// stages), for matmul_stream_grouped_finish. b_zp: per tensor or column (b_per_col),
// group g's row zp_ld elements after group 0's (blocked: N; one row for all: 0), per
// matrix bp_bs elements apart, or null; a_zp per tensor or row (a_per_row).
template <typename TA, typename TB, int MT>
__global__ void __launch_bounds__(128) matmul_stream_grouped(
    const TA* __restrict__ A, const uint8* __restrict__ B, int M, int N, int K,
    const int64* __restrict__ offsets, int64 lda, int64 ldb,
    const TA* __restrict__ a_zp, const typename dmlq::b_value<TB>::type* __restrict__ b_zp, int a_per_row,
    int b_per_col, int64 zp_ld, int64 bp_bs, int k_chunk, int group, int* __restrict__ work) {
  dmlq::stream4::body<TA, TB, int8, MT, true>(A, B, nullptr, M, N, K, offsets, lda, ldb, 0, nullptr, nullptr,
                                                    nullptr, a_zp, b_zp, nullptr, a_per_row, b_per_col, 0, bp_bs,
                                                    k_chunk, work, group, zp_ld);
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

// The grouped kernel's second pass (docs/semantics.md): output (m, n) of matrix
// blockIdx.y from acc_g, the exact int32 sum of group g: its `splits` entries
// work[g * splits + s][z][m][n] added as integers (one group of all K split in chunks:
// groups = 1; blocked scales: splits = 1). TO int (matmul_integer): acc_0. TO float, float16
// or bfloat16 (matmul_integer_to_float): float32(acc_0) * (a_scale[m] * b_scale[0, n]),
// then + float32(acc_g) * (a_scale[m] * b_scale[g, n]) for g = 1, 2, ... in ascending
// order, each product and add one IEEE-rounded op, then + bias[m, n] where given and one
// rounding to TO. b_scale: per tensor or column (b_per_col), group g's row g * N
// elements on, per matrix bp_bs elements apart, or MatMulNBits' (N, groups) scales
// (b_per_col 2 / 3: mm::column_scales); bias as in the tiled kernels' ABI
// (cuda/matmul_epilogue.cuh). grid (ceil(M * N / 256), matrices), block 256.
template <typename TO>
__global__ void __launch_bounds__(256) matmul_stream_grouped_finish(
    const int* __restrict__ work, int groups, int splits, TO* __restrict__ C, int M, int N,
    const int64* __restrict__ offsets, int64 ldc, const float* __restrict__ a_scale, int a_per_row,
    const float* __restrict__ b_scale, int b_per_col, int64 bp_bs, const float* __restrict__ bias,
    int64 bias_bs, int64 bias_ld) {
  using namespace dmlq;
  stream4::Out o;
  if (!stream4::finish_output(M, N, o)) return;
  const int64 mn = o.mn, i = o.i;
  const int z = o.z, m = o.m, col = o.col;
  const int* const w = work + static_cast<int64>(z) * mn + i;
  const int64 entry_stride = static_cast<int64>(gridDim.y) * mn;
  auto acc = [&](int g) {
    unsigned sum = 0u;  // mod 2^32: the chunks' order does not change it
    for (int s = 0; s < splits; ++s) sum += static_cast<unsigned>(w[(static_cast<int64>(g) * splits + s) * entry_stride]);
    return static_cast<int>(sum);
  };
  TO* const c = C + offsets[3 * static_cast<int64>(z) + 2] + m * ldc + col;
  if constexpr (mm::kind_of<TO>::value == mm::kInt) {  // matmul_integer: the sum itself
    *c = groups > 0 ? acc(0) : 0;
  } else {
    const float as = mm::batch_rows(a_scale, a_per_row, M, z)[a_per_row ? m : 0];
    const mm::ColumnScales bs = mm::column_scales(b_scale + bp_bs * z, b_per_col, col, N, groups);
    auto step = [&](float v, int g, int sum, float b) {  // group g's float step, in ascending order
      const float term = ieee_mul(to_f32(sum), ieee_mul(as, b));
      return g == 0 ? term : ieee_add(v, term);
    };
    float v = 0.0f;  // no groups (K = 0): +0.0
    if (splits == 1) {
      // Blocked scales (one entry per group): the sums and scales of kAhead groups are loaded
      // before their steps, so a thread waits one load latency per kAhead groups, not per group
      // (its steps are a dependent chain; M = 1 gives only N threads). Past the last group the
      // loads repeat it and the steps are skipped.
      constexpr int kAhead = 8;
      for (int g0 = 0; g0 < groups; g0 += kAhead) {
        int sum[kAhead];
        float b[kAhead];
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          const int64 g = min(g0 + j, groups - 1);
          sum[j] = w[g * entry_stride];
          b[j] = bs[g];
        }
#pragma unroll
        for (int j = 0; j < kAhead; ++j)
          if (g0 + j < groups) v = step(v, g0 + j, sum[j], b[j]);
      }
    } else {
      for (int g = 0; g < groups; ++g) v = step(v, g, acc(g), bs[g]);
    }
    if (bias != nullptr) v = ieee_add(v, bias[bias_bs * z + m * bias_ld + col]);
    *c = from_f32<TO>(v);
  }
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
  a_scale = mm::batch_rows(a_scale, a_per_row, M, z);
  out_scale = mm::batch_rows(out_scale, out_per_row, M, z);
  out_zp = mm::batch_rows(out_zp, out_per_row, M, z);
  const int ozp = out_zp != nullptr ? static_cast<int>(out_zp[out_per_row ? m : 0]) : 0;
  C[offsets[3 * static_cast<int64>(z) + 2] + m * ldc + col] = stream4::requant<TO>(
      static_cast<int>(total), a_scale[a_per_row ? m : 0], bsz[b_per_col ? col : 0],
      out_scale[out_per_row ? m : 0], ozp);
}
