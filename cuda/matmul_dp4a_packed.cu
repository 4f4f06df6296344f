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
// harness and NVRTC); the code is matmul_dp4a.cu's, with b_value<TB>::packed
// selecting the staging of b: the global read is the packed bytes, half those
// of an int8 b. Where a thread's 4 columns start at a multiple of 4 elements
// (b's base even, ldb and the batch offset multiples of 4, N >= 4) each row's
// 4 columns are one 16-bit load, spread in registers to 4 bytes of values
// (cuda/packed4.cuh spread4: 5 integer ops, 6 for int4's sign) before the
// shared-memory store; other tiles take one nibble load per element. Shared
// memory, the main loop (DP4A on int8 / uint8 words) and the epilogues are
// unchanged, so the main loop's instruction mix is matmul_dp4a.cu's.
//
// Napkin math (H100 SXM): the tiles are compute-bound (matmul_dp4a.cu: a
// 128x64 tile does 85 ops per staged byte of int8; 4-bit b raises it to 114),
// so 4-bit b gains little at large M beyond halving b's DRAM and L2 bytes; its
// staging costs 6 more instructions per 4 columns of a row, about 0.1 per DP4A
// in the 128x64 tile.
#include "matmul_dp4a.cu"
