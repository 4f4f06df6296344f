// The dp4a tile kernels of matmul_dp4a.cu for an 8-bit b held K-major (TB kmajor_int8 or
// kmajor_uint8, cuda/packed4.cuh: the transposed view of an (N, K) int8 / uint8 weight, x @ w.T
// with torch's Linear layout, its columns contiguous along K, ldb elements apart): all three
// operators wherever selection takes a dp4a tile for such a b (small products past M = 16,
// K > 32768 and blocked scales on dp4a-wide). Before, such a b was first copied to rows (one
// more read and write of the weight a call).
//
// Kernels (TA int8 or uint8; TO int8, uint8, int, float or float16; the matmul kernel ABI of
// matmul_dp4a.cu, ldb the elements between b's columns, b's batch strides in elements):
//   matmul_dp4a<TA, TB, TO, BM, BN, BK, TM, TN>      dp4a-128x64, -64x64, -32x32
//   matmul_dp4a_wide<TA, TB, TO, 64, 64, 32, 8, 4>   dp4a-wide (K > 32768, blocked scales)
// b's column sums (a has a zero point, the non-wide tiles) are the sums of its (N, K) rows
// (matmul_row_sums<int8 | uint8> of matmul_dp4a.cu, ldb apart).
//
// The code is matmul_dp4a.cu's gemm with KM8 selecting b's staging: each of a thread's 4
// columns gives its 4 k as one 32-bit load where the column's bytes and ldb are on 4 bytes (the
// word path), else the 4-byte window A's rows take at K's edge (bytes past K are 0); the words
// are already the shared tile's (4 k of one column), so the row-major b's transpose (8 PRMT a
// block) is gone and shared memory and the main loop are unchanged.
//
// Napkin math: as the row-major b's tiles (compute-bound, 57-114 DP4A ops per staged byte);
// a warp's loads of one column slot touch 8-16 columns' 32-byte sectors for 4 bytes each where
// the row-major b's touch 1-2 sectors whole, but the tile's 32 bytes of a column come in over
// its 8 threads' loads (L1), so L2 sees about b's bytes once; the copy it replaces read and
// wrote all of b in a pass of its own.
#include "matmul_dp4a.cu"
