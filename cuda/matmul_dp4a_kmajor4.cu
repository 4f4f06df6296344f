// The dp4a tile kernels of matmul_dp4a.cu for a packed 4-bit b held K-major (TB kmajor_int4 or
// kmajor_uint4, cuda/packed4.cuh: the bytes of an (N, K) int4 / uint4 weight, dmlq.pack(w).mT,
// MatMulNBits' and torch's layout): matmul_integer, matmul_integer_to_float (blocked scales
// along K included: dp4a-wide) and quantized_matmul wherever selection takes a dp4a tile for a
// packed b (M > 16, the tensor cores not picked; blocked scales at any M past the stream
// kernels'). Before, such a b was repacked to rows first (dmlq.gpu.packed.to_rows: 7 device
// passes of the array module's operations over the weight).
//
// Kernels (TA int8 or uint8; TO int8, uint8, int, float or float16; the matmul kernel ABI of
// matmul_dp4a.cu, ldb the elements between b's columns, b's batch strides in elements, its zero
// points int8 / uint8):
//   matmul_dp4a<TA, TB, TO, BM, BN, BK, TM, TN>      dp4a-128x64, -64x64, -32x32
//   matmul_dp4a_wide<TA, TB, TO, 64, 64, 32, 8, 4>   dp4a-wide (K > 32768, blocked scales)
// b's column sums (a has a zero point, the non-wide tiles) are the sums of its (N, K) rows
// (matmul_row_sums<kmajor_int4 | kmajor_uint4> of matmul_dp4a_packed.cu).
//
// One source apart from matmul_dp4a_packed.cu so the builds run in parallel; the code is
// matmul_dp4a.cu's gemm with KM4 selecting b's staging: a thread's 4 columns x 4 k block is 4
// runs of 4 k, one 16-bit load each where the run starts on a 4-element boundary (b's base
// even, ldb and the batch offset multiples of 4; else 1 to 3 byte loads and a shift, codes past
// K masked to 0), and nibbles_pair interleaves two columns' runs into the packed bytes the
// row-major b's staging stores (a shift, a PRMT and a LOP per column: 12 instructions per
// block against the row-major b's 4 PRMT), so shared memory and the main loop are the packed
// row-major b's, unchanged.
//
// Napkin math: staging is once per tile and thread (a 4x4 block per 4 k-words of the 32-row
// tile for the 4x4 fragments), against TM x TN DP4A per k-word in the main loop: 8 instructions
// more per block are a few % of the loop's. A warp's 16-bit loads of one column slot touch 16
// columns' 32-byte sectors for 4 bytes each, where the row-major b's touch 2 sectors whole: the
// tile's 16 bytes of a column come in over its 8 threads' loads and the next tile's from the
// same sectors (L1), so L2 sees about b's bytes once or twice; the tiles do 57-114 DP4A ops
// per staged byte (compute-bound), so b's path is not their limit.
#include "matmul_dp4a.cu"
