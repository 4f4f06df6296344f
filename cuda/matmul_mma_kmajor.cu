// The tensor-core kernel of matmul_mma.cu for an 8-bit b held K-major (TB kmajor_int8 or
// kmajor_uint8, cuda/packed4.cuh): b's (K, N) matrix is N columns of K contiguous bytes, ldb
// bytes apart -- the transposed view of an (N, K) weight, which torch's Linear keeps and
// `x @ w.T` passes. matmul_integer (int32 out), matmul_integer_to_float (float32 / float16
// out) and quantized_matmul (int8 / uint8 out) take it wherever a row-major b would take
// mma-128x128 and b's start, columns and matrices lie on 16 bytes; the row-major kernel would
// need b copied to a row-major array first (a read and a write of b, then the kernel's read).
//
// Kernels (TA int8 or uint8; TO int8, uint8, int, float or float16; the matmul kernel ABI of
// matmul_mma.cu with ldb the bytes between b's columns):
//   matmul_mma<TA, TB, TO, 128, 128, 64, 4, 16>   mma-128x128, 128 threads, 4 stages of
//       8 KiB of A + 8 KiB of B: 64 KiB of dynamic shared memory. 16-byte copies only: the
//       launcher pads an a whose rows do not fit them (dmlq/gpu/matmul.py).
// The split-K epilogue is the row-major b's (matmul_splitk_epilogue<TA, int8 | uint8, TO>
// of matmul_mma.cu: it reads b's zero points and column sums, not b); b's column sums (a has
// a zero point) are the row sums of its (N, K) view (matmul_row_sums of matmul_dp4a.cu).
//
// One source apart from matmul_mma.cu so the two build in parallel (host harness and
// NVRTC); the code is matmul_mma.cu's, with b_value<TB>::kmajor selecting b's staging and
// fragments:
//   Global -> shared: b's tile is staged as A's is, BN rows of 64 k-bytes by 16-byte
//   cp.async into a_off's XOR-swizzled layout, each thread copying the same row and
//   chunk of both tiles (A: row a_row0; B: the column km_col(a_row0) in that row), the
//   same fast path (a tile inside K; columns past N skipped, their outputs never stored)
//   and rolled edge path (a ragged K zero-filled) as A. Within each 16 columns the
//   even ones occupy the first 8 rows, the odd ones the next 8 (km_col).
//   Shared -> registers: b's col fragments are 4 consecutive k of one column, which is
//   how a K-major column lies in shared memory, so ldmatrix.x4 without .trans gives them
//   as they are: per 16 columns one load, matrix 0/1 the even columns' k 0-15 / 16-31
//   (b0, b1 of n8 tile 2p), matrix 2/3 the odd ones' (tile 2p + 1); the row-major b's
//   trans load and 4 PRMT per 16 columns go away. The even/odd tiles are the row-major
//   kernel's column order (quad_col), so its epilogue is shared unchanged.
//
// Napkin math (H100 SXM; the row-major kernel's header has the tile's):
//   x @ w.T at M = 64, N = K = 4096: the GEMM moves w's 16 MiB once (5 us at 3.35 TB/s)
//   and does 2.1 Gop (1 us at the int8 tensor peak): bound by w's bytes. The row-major
//   kernel needs w copied first: 32 MiB more traffic, about 3x the bytes. At 4096^3 the
//   copy is 32 MiB against 137 Gop (69 us at peak): about 10 us, 5-15 % of the run.
//   Issue per warp and k32: 4 A + 4 B ldmatrix, 32 IMMA (row-major b: + 16 PRMT).
//   Main loop (sm_90 SASS, bench/results/static.md), per 64x128x128 k-tile with 64
//   IMMA.16832, one path for every tile (matmul_mma.cu's 16-byte staging): int8 / uint8 /
//   int32 / float16 out 164 (1 in 2.6), float32 166; the row-major b's kernel: 202, 205.
//   (Session 37-41, with a rolled edge loop nested in it: int8 out 226, 168 without it,
//   against the row-major b's 241 and 188.) ptxas: 228-254 registers, 0 spills, 2 blocks/SM.
#include "matmul_mma.cu"
