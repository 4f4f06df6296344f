// The tensor-core kernel of matmul_mma.cu for a packed 4-bit b (TB packed_int4
// or packed_uint4, cuda/packed4.cuh): matmul_integer (int32 out),
// matmul_integer_to_float (float32 / float16 out) and quantized_matmul (int8 /
// uint8 out) wherever an int8 b would take the tensor cores.
//
// Kernels (TA int8 or uint8; TO int8, uint8, int, float or float16; VEC 16 or
// 4; the matmul kernel ABI of matmul_mma.cu, with b's batch strides and ldb in
// elements, ldb a multiple of 2 * VEC, and its zero points int8 / uint8):
//   matmul_mma<TA, TB, TO, 128, 128, 64, 4, VEC>   mma-128x128, 128 threads,
//       4 stages of 8 KiB of A + 4 KiB of packed B: 48 KiB of dynamic shared memory
//   matmul_splitk_epilogue<TA, TB, TO>              split-K sums and epilogue
// b's column sums (a has a zero point) come from matmul_col_sums<TB> of
// matmul_dp4a_packed.cu, a's row sums from matmul_dp4a.cu.
// Selection: dmlq/gpu/matmul.py select_variant (packed=True: the int8 rule and
// thresholds; K > 32768 and blocked scales along K stay on dp4a-wide).
//
// One source apart from matmul_mma.cu so the two build in parallel (host
// harness and NVRTC); the code is matmul_mma.cu's, with b_value<TB>::packed
// selecting b's staging, fragments and epilogue column order:
//   Global -> shared: the packed bytes as they are (ONNX order, column 2i in the
//   low nibble of byte i of a row), 16-byte cp.async (4-byte where rows are 4-
//   but not 16-byte aligned), 64 k-rows of 64 bytes per tile, the same fast
//   path / rolled edge path as int8 (a ragged K zero-filled; an odd N's last
//   byte carries one padding nibble, which only feeds column N, never stored).
//   Rows that do not start on a VEC-aligned byte (odd N, N % 8 != 0, an odd
//   offset) are first copied into rows of 32-element multiples by the launcher
//   (dmlq/gpu/packed.py pad_rows: one pass over the packed bytes).
//   Shared -> registers: the int8 kernel's ldmatrix.x4.trans, now over 32
//   columns x k32 per load (a 16-bit element is 4 nibbles of one k row), then
//   unpack_b4 (2 PRMT + 2 SHL + 4 LOP per 4 fragment registers): lane (g, t)
//   gets k 4t..4t+3 of columns 4g + j for n8 tiles j = 0..3, each column's code
//   in the high nibble of its byte, the low nibble zero: 16 * value as an s8
//   byte (int4: the sign is bit 7) or a u8 byte (uint4). Every product is 16x
//   exact, so every int32 sum is 16x the true sum, exact while |16 * sum| <
//   2**31: 16 * 255 * 15 * 32768 < 2**31 at the mma path's K <= 32768. The
//   sums are shifted back (>> 4, exact) once after the main loop, before the
//   split-K partials and the epilogue, which are int8's: zero points through
//   the row and column sums, the float epilogue's order, requantization.
//   Sign extension proper (the low nibble) would cost 3 more LOP/IMAD per
//   register; the 16x form costs 2 ops per fragment register, 1 per IMMA.
//   Epilogue: lane t holds columns 8t..8t+7 of each 32 (not 4t..4t+3 of each
//   16), so the shared-memory restaging swizzle is chunk ^ (row & 7).
//
// Napkin math (H100 SXM, 4096^3, mma-128x128):
//   ops = 2 * 4096^3 = 137 Gop: 69 us at the dense int8 tensor peak (1979 TOPS).
//   DRAM: A 16 MiB + packed B 8 MiB (int8: 16 MiB) + out (int8 16 MiB, float16
//   32 MiB, int32 / float32 64 MiB) = 40-88 MiB: 13-28 us at 3.35 TB/s, so the
//   product is compute-bound (packed B saves 8 MiB, 2.5 us of DRAM time).
//   L2 -> SM: a 128x128x64 tile stages 8 KiB of A + 4 KiB of B per 2.1 Mop
//   (171 ops/byte; int8 b: 128); 4096^3 moves M*N*K*(1/BN + 1/(2 BM)) = 0.8 GB,
//   5.8 TB/s at 50% of peak (int8 b: 1.1 GB, 7.8 TB/s).
//   Shared -> registers per warp and k32: A 2 KiB + B 1 KiB per 32 IMMA (int8
//   b: 2 + 2 KiB), 85 ops/byte against 64.
//   Issue: per warp and k32, 4 A + 2 B ldmatrix, 32 unpack ops, 32 IMMA (int8 b:
//   4 + 4 ldmatrix, 16 PRMT). At peak a sub-partition takes one m16n8k32 per 4
//   clk and issues one instruction per clk: up to 4 instructions per IMMA fit.
//   Main loop (sm_90 SASS, bench/results/static.md; target at most 6
//   instructions per IMMA), per 64x128x128 k-tile with 64 IMMA.16832: 16-byte
//   copies 211 (1 in 3.3) for int8 / uint8 / int32 / float16 out, 215 float32
//   (one path for every tile; 261-312 before session 42 with a rolled edge loop
//   nested in it, 211-246 without it); 4-byte copies, the rolled edge loop
//   counted once (in brackets: without it, what a tile inside K issues): 313-343
//   (1 in 4.9-5.4) [230-244, 3.6-3.8]. int8 b: 202-320.
//   The unpack is 64 of those instructions (16 PRMT, 16 shifts, 32 LOP3); B's
//   cp.async count halves. ptxas: 224-248 registers, 0 spills (2 blocks/SM).
#include "matmul_mma.cu"
