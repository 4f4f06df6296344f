// The tensor-core kernel of matmul_mma.cu for blocked scales along K (GRP): the prefill half of
// the weight-only-int4 linear layer (DirectML's INT4 "dequantize + GEMM", onnxruntime's
// MatMulNBits), matmul_integer_to_float with block_size=G, G a multiple of 32 and more than one
// group. Before it, every such call above M = 16 ran on the dp4a-wide kernel (int64 and float
// accumulators on dp4a, about a tenth of the tensor cores' rate).
//
// Kernels (TA int8 or uint8; TO float or float16; every b matmul_mma.cu takes, 16-byte copies
// only: TB int8 / uint8, packed_int4 / packed_uint4, kmajor_int8 / kmajor_uint8, kmajor_int4 /
// kmajor_uint4; the matmul kernel ABI, k_group = G or 0 for one group of all K):
//   matmul_mma<TA, TB, TO, 64, 128, 64, 4, 16, true>   mma-grouped, 128 threads (1x4 warps of
//       64x32), 4 stages of 4 KiB of A + 8 KiB of B (packed: 4 KiB): 48 or 32 KiB of dynamic
//       shared memory, 2 blocks an SM (launch bounds: at most 255 registers).
// The zero points' terms of each group come from the pre-passes' per-group sums: a's row sums
// (b has a zero point: matmul_row_sums<TA> with k_chunk G) and b's column sums (a has one:
// matmul_col_sums<TB> with G-row splits, or matmul_row_sums of a K-major b), tables
// [group][matrix][row or column] (dmlq/gpu/matmul.py plans them; no split-K, no combine).
//
// The group loop (docs/semantics.md: acc_g exact, v = v + float32(acc_g) * (a_scale * b_scale_g)
// in ascending g, each op one IEEE-rounded non-ftz instruction): the k32 steps run as for every
// mma tile; after the step that ends a group (or K), each lane corrects its 64 int32 sums with
// the group's zero-point terms (2 IMAD), converts them (I2F), multiplies by a_scale * b_scale
// and adds them into 64 float32 sums (3 FP ops), then zeroes them. 64 + 64 accumulators do not
// fit beside mma-128x128's 64x64 warp tiles (128 int32 sums a lane), hence 64x32.
//
// Napkin math (H100 SXM, M = N = K = 4096, G = 128: 32 groups):
//   ops = 2 * 4096^3 = 137 Gop: 69 us at the dense int8 tensor peak (1979 TOPS); dp4a's peak
//   (~134 TOPS) is 1.03 ms. Bytes: A 16 MiB + packed B 8 MiB + scales 2 MiB + out 64 MiB
//   (float32) = 90 MiB: 28 us at 3.35 TB/s. Compute-bound.
//   Per warp and group: 4 x 4 x (G / 32) = 64 m16n8k32, 256 clk of a sub-partition at peak
//   (one per 4 clk). The close: 64 conversions a lane (I2FP.F32.S32 in the sm_90 SASS), 2048 a
//   warp; at the 16 conversions an SM a clk that the CUDA guide lists for int-to-float (4 a
//   sub-partition) that is 512 clk, twice the IMMA time (I2FP may issue faster on sm_90: the
//   profile stage will say), beside ~450 other issue slots (2 IMAD, 3 FP ops, a zeroing move a
//   value; 48 L1 loads) and the main loop's two 64-deep tiles (128-181 instructions each with
//   their 32 IMMA, bench/results/static.md: 256-362). With two warps a sub-partition (2 blocks
//   an SM) that is ~1450-1650 issue clk per 512 clk of IMMA: at most ~30-35% of the tensor
//   peak at G = 128 (~5x dp4a's peak), ~10% at G = 32 (still above dp4a's 7%).
//   An integer-to-float trick in FP32 ops (exact halves added) costs 8 issue slots a value,
//   more than the conversion it saves.
//   Shared memory: a 64x32 warp tile reads 3 KiB (packed b: 2.5 KiB) per 16 IMMA: 43 (52) ops
//   a byte, ~67% (82%) of the tensor peak at 128 B/clk of ldmatrix bandwidth, not the bound.
//   To be measured: dmlq/gpu/matmul_configs.py MMA_MIN_WORK
//   sets the dp4a-wide -> mma-grouped crossover too.
//
// One source apart from matmul_mma.cu so the builds run in parallel (host harness and NVRTC).
#include "matmul_mma.cu"
