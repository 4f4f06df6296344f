// The tensor-core kernel of matmul_mma.cu for a packed 4-bit b held K-major (TB kmajor_int4 or
// kmajor_uint4, cuda/packed4.cuh): b's (K, N) matrix is N runs of K packed elements, the bytes
// of an (N, K) int4 / uint4 weight as torch's Linear and onnxruntime's MatMulNBits keep it
// (dmlq.Packed(w).mT). matmul_integer (int32 out), matmul_integer_to_float (float32 / float16
// out, one group of scales) and quantized_matmul (int8 / uint8 out) take it wherever a row-major
// packed b would take mma-128x128 and b's start, columns and matrices lie on 16 bytes (K a
// multiple of 32); before, such a b was repacked to rows first (dmlq.gpu.packed.to_rows).
//
// Kernels (TA int8 or uint8; TO int8, uint8, int, float or float16; the matmul kernel ABI of
// matmul_mma.cu with ldb and b's batch strides in elements, ldb the elements between b's
// columns, its zero points int8 / uint8):
//   matmul_mma<TA, TB, TO, 128, 128, 64, 4, 16>   mma-128x128, 128 threads, 4 stages of
//       8 KiB of A + 4 KiB of packed B: 48 KiB of dynamic shared memory. 16-byte copies only:
//       the launcher pads an a whose rows do not fit them (dmlq/gpu/matmul.py).
// The split-K epilogue is the 8-bit b's (matmul_splitk_epilogue<TA, int8 | uint8, TO> of
// matmul_mma.cu: the partial sums are shifted back before they are written); b's column sums
// (a has a zero point) are the sums of its (N, K) rows (matmul_row_sums<kmajor_int4 |
// kmajor_uint4> of matmul_dp4a_packed.cu).
//
// One source apart from matmul_mma.cu so the builds run in parallel (host harness and
// NVRTC); the code is matmul_mma.cu's, with b_value<TB>::packed and ::kmajor both set (KP):
//   Global -> shared: b's tile is BN rows of 32 bytes (64 k), row r holding column km_col(r)
//   as for the 8-bit K-major b, two threads a row, one 16-byte cp.async each (bkp_off); the
//   same fast path and rolled edge path as A (a ragged K: the chunk's bytes, the rest zero).
//   Shared -> registers: A's fragments by ldmatrix as for every b; b's col fragment registers
//   (4 consecutive k of one column) are 16 bits of a column's row, so lane (g, t) takes b0, b1
//   of each n8 tile by two 16-bit loads (bytes 2t and 8 + 2t of the k32 chunk: k 4t..4t+3 and
//   16+4t..16+4t+3 of column g) and unpack_bk4 spreads each (a shift, a PRMT, a LOP: every
//   code in its byte's high nibble, 16 times its value as packed b's tiles have it, the sums
//   shifted back after the loop). An ldmatrix of b would give a lane 8 consecutive k (k 8t..
//   8t+7), the wrong k slots for A's ldmatrix; a first version took them and read A by 8-byte
//   loads in that k order instead: 403 main-loop instructions (1 IMMA in 6.3), 109 of them
//   moves that put the loads' register pairs into the mma's operand order.
//
// Napkin math (H100 SXM):
//   x @ w.T at M = 64, N = K = 4096, w packed int4: the product reads w's 8 MiB once (2.5 us
//   at 3.35 TB/s) and does 2.1 Gop (1 us at the int8 tensor peak): bound by w's bytes. The
//   repack it replaces ran in the array module's own operations (to_rows: the codes spread
//   to bytes, transposed, packed again; about 80 MiB read and 64 MiB written in 7 launches,
//   ~45 us) before the row-major kernel's read: ~18x the product's own bytes at this size.
//   At 4096^3 (69 us at peak, more on mma.sync) it added a quarter or more.
//   Issue per warp and k32: 4 ldmatrix.x4 (A), 16 16-bit loads (B), 48 unpack ops, 32 IMMA;
//   the row-major packed b's kernel: 4 + 2 ldmatrix, 32 unpack ops. At peak a sub-partition
//   takes one m16n8k32 per 4 clk and issues one instruction per clk. Shared-memory wavefronts
//   per warp and k32: 16 (A) + 16 (B, each load one: 8 rows of a chunk on distinct banks),
//   128 an SM for 128 IMMA, which take 128 clk at peak: at the limit, where the row-major
//   packed b's 24 are not. Both are far from it in the sizes this kernel is for (bound by b's
//   bytes). Main loop (sm_90 SASS, bench/results/static.md), per 64x128x128 k-tile with 64
//   IMMA, one path for every tile: 275 instructions (1 in 4.3) for int8 / uint8 / int32 /
//   float16 out, 280 float32 (348 with the rolled edge loop nested in it before session 42).
#include "matmul_mma.cu"
