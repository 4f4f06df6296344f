// The dp4a tile kernels of matmul_dp4a.cu for a packed 4-bit b (TB packed_int4
// or packed_uint4, cuda/packed4.cuh): matmul_integer, matmul_integer_to_float
// and quantized_matmul with M > 16 (and quantized_matmul at any M).
//
// Kernels (TA int8 or uint8; TB packed_int4 or packed_uint4; TO int8, uint8,
// int, float or float16; the matmul kernel ABI of matmul_dp4a.cu, with b's
// batch strides and ldb in elements and its zero points in int8 / uint8):
//   matmul_dp4a<TA, TB, TO, BM, BN, BK, TM, TN>      dp4a-128x64, -64x64, -32x32
//   matmul_dp4a_wide<TA, TB, TO, 64, 64, 32, 8, 4>   dp4a-wide (K > 32768, blocked scales)
//   matmul_col_sums<TB>                               b's column sums (a has a zero point)
// Selection: dmlq/gpu/matmul.py select_variant with packed=True (never the
// tensor-core kernel, which stages b with cp.async as int8 bytes).
//
// One source apart from matmul_dp4a.cu so the two build in parallel (the host
// harness and NVRTC); the code is matmul_dp4a.cu's gemm, with
// b_value<TB>::packed selecting b's staging and shared layout.
//
// Variant kept: b stays packed in shared memory and is unpacked in registers
// inside the main loop. The global read is the packed bytes; where a thread's
// 4 columns start at a multiple of 4 elements (b's base even, ldb and the
// batch offset multiples of 4) a row's 4 columns are one 16-bit load, else
// the edge path reads them as a nibble window (packed4.cuh nibbles4: 1-3 byte
// loads and a shift, the window ending inside the row). Staging per 4 rows x
// 4 columns: 4 loads, 4 PRMT (byte r of each word from row r) and one STS.64
// into Bq[buf][k-word pair][quad*4 + 2*(k-word & 1) + pair]: a word is 4
// packed bytes (k .. k+3), each holding two neighbouring columns. In the main
// loop one LDS.128 gives a thread its 4 columns for 8 k (two k-words); each
// word splits into the two columns' DP4A words (packed4.cuh): the high
// nibbles in place (w & 0xF0F0F0F0, 16 times the value, int8 or uint8), the
// low ones as codes (uint4: w & 0x0F0F0F0F) or moved up (int4: (w << 4) &
// 0xF0F0F0F0, the sign in bit 7, no sign-extension ops). Sums taken x16 are
// shifted right by 4 after the K loop (at each fold for dp4a-wide, with its
// in-loop column sums): exact, since |16 * sum| <= 16 * 255 * 15 * 32768 =
// 2,005,401,600 < 2**31 over the int32 tiles' K <= 32768 (and each wide chunk).
// Deleted variant: the nibbles spread to int8 / uint8 words before the
// shared-memory store (16-bit load, 5-6 ops of spread4 per row, a 4x4 byte
// transpose of 8 PRMT, STS.128), shared memory and main loop as for int8 b.
//
// Napkin math (per thread, per k-word of 4 k; TM x TN outputs):
//   shared bytes per tile (2 buffers, A + B): 32x32 4352 -> 3328 (B 2048 ->
//   1024), 64x64 8448 -> 6400, 128x64 12544 -> 10496, wide 8448 -> 6400.
//   main-loop math: int8 words: TM*TN DP4A + (TM + TN)/4 LDS.128; packed:
//   TM*TN DP4A + TM/4 + TN/8 LDS.128 + TN/2 words split at 2 ops (uint4) or
//   3 (int4). 4x4: 18 -> 21.5 / 23.5 instructions per 16 DP4A; 8x8: 68 ->
//   75 / 79 per 64; 8x4: 35 -> 38.5 / 40.5 per 32. Staging per 4x4 block of b:
//   about 37 -> 9 instructions (once per tile, not per k-word), and the edge
//   path 16 nibble loads -> 4 windows of 1-3 byte loads. Net, the static count
//   of the whole loop (both staging paths counted once, bench/results/static.md):
//   32x32 531-577 -> 416-455 per 128 DP4A (1 in 4.1-4.5 -> 1 in 3.2-3.6),
//   64x64 678-724 -> 551-587 per 256 (1 in 2.6-2.8 -> 2.2-2.3), 128x64
//   988-1029 -> 904-953 per 512 (1 in 1.9-2.0 -> 1.8-1.9), wide 783-832 ->
//   662-692 per 352 (1 in 2.2-2.4 -> 1.9-2.0); 0 spills either way. The
//   int8-b tiles, the reference: 357-414 per 128, 498-508 per 256, 808-817
//   per 512, 592-613 per 352. Registers: 32x32 80 -> 74-80, 64x64 100-104
//   -> 99-127 (4 blocks per SM either way), wide 168-255 -> 159-254, 128x64
//   167-168 -> 167-179: its int32-out variants (170, 179) fit 2 blocks per SM,
//   not 3; __launch_bounds__(128, 3) made ptxas spill 12 of its variants, so
//   they keep 2. Reading b's edge rows by a stepped element index instead of
//   one multiply per row moved the 32x32 loop by -14 to +23: not kept.
//   What limits it: the DP4A pipe (64 per SM per clock, one warp instruction
//   per 2 issue slots of a scheduler), so the word path, under 2 instructions
//   per DP4A in every tile, does not bound issue; shared loads are 1.5
//   wavefronts per 16 warp DP4A in the 4x4 tile (2 with int8 words); the
//   32x32 tile misses the 1-in-3 target on its static count because its
//   edge paths (A's byte windows, b's nibble windows, both inside the loop
//   body) are counted with only 128 DP4A. At large M the tiles stay
//   compute-bound (a 128x64 tile does 114 ops per staged byte with 4-bit b),
//   so 4-bit b's gain there is half of b's DRAM, L2 and shared bytes.
#include "matmul_dp4a.cu"
