"""The tiled matmul kernels' configurations: one table of named configs per kernel
(dp4a tiles, the mma.sync tensor-core tile and its blocked-scales build, the Hopper
wgmma tile), the kernel name expressions each source compiles (KERNELS) and the
variants this install can run. dmlq.gpu.matmul's select_variant reads these tables;
adding or adjusting a variant is one line here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .loader import cuda_dir
from .packed import KMAJOR_TAGS as KMAJOR4_TAG

DP4A_SOURCE = "matmul_dp4a.cu"
MMA_SOURCE = "matmul_mma.cu"
PACKED_SOURCE = "matmul_dp4a_packed.cu"  # the dp4a kernels for a packed 4-bit b (dmlq.gpu.packed)
MMA_PACKED_SOURCE = "matmul_mma_packed.cu"  # the tensor-core kernel for a packed 4-bit b
MMA_KMAJOR_SOURCE = "matmul_mma_kmajor.cu"  # the tensor-core kernel for an 8-bit b held K-major
MMA_KMAJOR4_SOURCE = "matmul_mma_kmajor4.cu"  # the tensor-core kernel for a packed 4-bit b held K-major
MMA_GROUPED_SOURCE = "matmul_mma_grouped.cu"  # the tensor-core kernel for blocked scales along K, every b
DP4A_KMAJOR4_SOURCE = "matmul_dp4a_kmajor4.cu"  # the dp4a kernels for a packed 4-bit b held K-major
DP4A_KMAJOR8_SOURCE = "matmul_dp4a_kmajor.cu"  # the dp4a kernels for an 8-bit b held K-major
WGMMA_SOURCE = "matmul_wgmma.cu"  # Hopper's warpgroup tensor cores (sm_90a): forced only, until timed

WIDE_K = 32768              # int32 accumulators (and int32 row/col sums) are exact up to here
MAX_DIM = 2**31 - 1024      # M, N, K are C ints; tile loops add up to a tile past them
MAX_GRID_YZ = 65535         # CUDA's gridDim.y / gridDim.z limit
MMA_MIN_WORK = 1 << 22      # provisional dp4a -> mma crossover in M*N*K*batch: MUST be measured
QTYPES = ("int8", "uint8")  # C typedefs in common.cuh


@dataclass(frozen=True)
class Dp4aConfig:
    """matmul_dp4a<TA, TB, TO, BM, BN, BK, TM, TN> (or matmul_dp4a_wide<...>)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    wide: bool = False
    source = DP4A_SOURCE
    transposed_b = False

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def smem(self) -> int:
        return 0  # static shared memory only

    def name(self, ta: str, tb: str, to: str) -> str:
        kernel = "matmul_dp4a_wide" if self.wide else "matmul_dp4a"
        return f"{kernel}<{ta}, {tb}, {to}, {self.bm}, {self.bn}, {self.bk}, {self.tm}, {self.tn}>"


@dataclass(frozen=True)
class MmaConfig:
    """matmul_mma<TA, TB, TO, BM, BN, BK, STAGES, VEC>: cp.async pipeline, dynamic smem."""

    bm: int
    bn: int
    bk: int
    stages: int
    threads: int
    source = MMA_SOURCE
    grouped = False
    transposed_b = False  # b staged as N rows of K bytes (wgmma's K-major b)

    @property
    def smem(self) -> int:
        return self.stages * (self.bm * self.bk + self.bk * self.bn)

    @property
    def packed_smem(self) -> int:
        """With a packed 4-bit b, whose tiles hold half the bytes."""
        return self.stages * (self.bm * self.bk + self.bk * self.bn // 2)

    def name(self, ta: str, tb: str, to: str, vec: int = 16) -> str:
        grp = ", true" if self.grouped else ""
        return f"matmul_mma<{ta}, {tb}, {to}, {self.bm}, {self.bn}, {self.bk}, {self.stages}, {vec}{grp}>"


@dataclass(frozen=True)
class GroupedMmaConfig(MmaConfig):
    """matmul_mma<TA, TB, TO, BM, BN, BK, STAGES, 16, true> (GRP, cuda/matmul_mma_grouped.cu): blocked
    scales along K, float outputs only, warp tiles 64x32 (threads 32 * BM / 64 * BN / 32)."""

    source = MMA_GROUPED_SOURCE
    grouped = True
    out_types = ("float", "float16")


@dataclass(frozen=True)
class WgmmaConfig(MmaConfig):
    """matmul_wgmma<TA, TB, TO, BM, BN, BK, STAGES> (cuda/matmul_wgmma.cu, compute capability 9.0
    only): b staged transposed (N rows of K bytes). ``auto``: whether select_variant may pick it
    (not until a GPU has checked and timed it)."""

    source = WGMMA_SOURCE
    transposed_b = True
    auto = False

    def name(self, ta: str, tb: str, to: str, vec: int = 16) -> str:  # (one copy width: 16 bytes)
        return f"matmul_wgmma<{ta}, {tb}, {to}, {self.bm}, {self.bn}, {self.bk}, {self.stages}>"


# Variant name -> tile config. Adding or adjusting a variant is one line here.
DP4A_CONFIGS = {
    "dp4a-128x64": Dp4aConfig(bm=128, bn=64, bk=32, tm=8, tn=8),
    "dp4a-64x64": Dp4aConfig(bm=64, bn=64, bk=32, tm=8, tn=4),
    "dp4a-32x32": Dp4aConfig(bm=32, bn=32, bk=32, tm=4, tn=4),
    "dp4a-wide": Dp4aConfig(bm=64, bn=64, bk=32, tm=8, tn=4, wide=True),
}
MMA_CONFIGS = {
    "mma-128x128": MmaConfig(bm=128, bn=128, bk=64, stages=4, threads=128),  # 2x2 warps of 64x64
}
# Blocked scales along K (matmul_integer_to_float with block_size): 1x4 warps of 64x32, the
# float sums beside the int32 ones; no split-K (the groups' float adds stay in order).
GROUPED_CONFIGS = {
    "mma-grouped": GroupedMmaConfig(bm=64, bn=128, bk=64, stages=4, threads=128),
}
WGMMA_CONFIGS = {
    "wgmma-128x128": WgmmaConfig(bm=128, bn=128, bk=64, stages=4, threads=256),  # 2 warpgroups of 64x128
    "wgmma-128x128-k128": WgmmaConfig(bm=128, bn=128, bk=128, stages=3, threads=256),  # 4 wgmma per k tile
}
CONFIGS: dict[str, Any] = {**DP4A_CONFIGS, **MMA_CONFIGS, **GROUPED_CONFIGS, **WGMMA_CONFIGS}
# quantized_matmul with a packed 4-bit b at small M: cuda/matmul_stream_packed.cu
# (dmlq.gpu.qmm_stream), variant name -> the kernel's rows per launch.
STREAM_M = {"stream-m1": 1, "stream-m4": 4, "stream-m16": 16}
ALL_VARIANTS = tuple(CONFIGS)
QMM_VARIANTS = tuple(v for v in CONFIGS if v not in GROUPED_CONFIGS)  # those with int outputs too

COMBINE = "matmul_sums_combine<256>"  # the column sums' k-splits added (matmul_dp4a.cu's, for every b)
PREPASS_KERNELS = tuple(f"matmul_row_sums<{t}>" for t in QTYPES) + \
    tuple(f"matmul_col_sums<{t}>" for t in QTYPES) + (COMBINE,)


def _have_mma(source=MMA_SOURCE) -> bool:
    try:
        return (cuda_dir() / source).is_file()
    except FileNotFoundError:
        return False


HAVE_MMA = _have_mma()
HAVE_MMA_PACKED = HAVE_MMA and _have_mma(MMA_PACKED_SOURCE)
HAVE_MMA_KMAJOR = HAVE_MMA and _have_mma(MMA_KMAJOR_SOURCE)
HAVE_MMA_KMAJOR4 = HAVE_MMA and _have_mma(MMA_KMAJOR4_SOURCE)
HAVE_MMA_GROUPED = HAVE_MMA and _have_mma(MMA_GROUPED_SOURCE)
HAVE_WGMMA = HAVE_MMA and _have_mma(WGMMA_SOURCE)


MMA_VECS = (16, 4)  # cp.async widths the tensor-core kernel is built for


# Output types: the requantized bytes of quantized_matmul, then the int32 sums
# of matmul_integer and the float outputs of matmul_integer_to_float (the same
# main loops; cuda/matmul_epilogue.cuh picks the last step from the type).
OUT_TYPES = QTYPES + ("int", "float", "float16")


def _instantiations(configs, b_types=QTYPES) -> tuple:
    return tuple(c.name(ta, tb, to, *((vec,) if isinstance(c, MmaConfig) else ()))
                 for c in configs for vec in (MMA_VECS if isinstance(c, MmaConfig) else (None,))
                 for ta in QTYPES for tb in b_types for to in OUT_TYPES)


SPLITK_EPILOGUES = tuple(f"matmul_splitk_epilogue<{ta}, {tb}, {to}>"
                         for ta in QTYPES for tb in QTYPES for to in OUT_TYPES)

PACKED_TAGS = ("packed_int4", "packed_uint4")
# An 8-bit b held K-major on 16 bytes (x @ w.T of an (N, K) weight), read as it is: its tag.
KMAJOR_TAGS = {"int8": "kmajor_int8", "uint8": "kmajor_uint8"}
# A packed 4-bit b held K-major (the bytes of an (N, K) weight, dmlq.TransposedPacked) on 16 bytes.
KMAJOR4_TAGS = tuple(KMAJOR4_TAG.values())
KERNELS = {DP4A_SOURCE: _instantiations(DP4A_CONFIGS.values()) + PREPASS_KERNELS,
           PACKED_SOURCE: _instantiations(DP4A_CONFIGS.values(), PACKED_TAGS) +
           tuple(f"matmul_col_sums<{t}>" for t in PACKED_TAGS) +
           tuple(f"matmul_row_sums<{t}>" for t in KMAJOR4_TAGS),  # a K-major packed b's column sums
           DP4A_KMAJOR4_SOURCE: _instantiations(DP4A_CONFIGS.values(), KMAJOR4_TAGS),
           DP4A_KMAJOR8_SOURCE: _instantiations(DP4A_CONFIGS.values(), tuple(KMAJOR_TAGS.values()))}
# bfloat16 outputs (matmul_integer_to_float) in the tensor-core tile of an 8-bit b, row-major and
# K-major, with 16-byte copies (K a multiple of 16, as a model's hidden sizes are), and its split-K
# epilogue, where a bfloat16 model's W8A8 prefill runs; any other plan writes float32 that one
# cast rounds (dmlq.gpu.intmm). Each added output type costs a fifth of a source's cold build
# (tests/prebuild.py's COST), so the other sources and the 4-byte copies have none.
BF16_OUT = "bfloat16"
BF16_MMA = tuple(c.name(ta, tb, BF16_OUT, 16) for c in MMA_CONFIGS.values()
                 for ta in QTYPES for tb in QTYPES) + \
    tuple(f"matmul_splitk_epilogue<{ta}, {tb}, {BF16_OUT}>" for ta in QTYPES for tb in QTYPES)
if HAVE_MMA:
    KERNELS[MMA_SOURCE] = _instantiations(MMA_CONFIGS.values()) + SPLITK_EPILOGUES + BF16_MMA
if HAVE_MMA_PACKED:
    KERNELS[MMA_PACKED_SOURCE] = _instantiations(MMA_CONFIGS.values(), PACKED_TAGS) + tuple(
        f"matmul_splitk_epilogue<{ta}, {tb}, {to}>" for ta in QTYPES for tb in PACKED_TAGS for to in OUT_TYPES)
if HAVE_MMA_KMAJOR:  # 16-byte copies only; the split-K epilogue is the row-major b's
    KERNELS[MMA_KMAJOR_SOURCE] = tuple(c.name(ta, tb, to, 16) for c in MMA_CONFIGS.values() for ta in QTYPES
                                       for tb in KMAJOR_TAGS.values() for to in OUT_TYPES + (BF16_OUT,))
if HAVE_MMA_KMAJOR4:  # as the 8-bit one: 16-byte copies, matmul_mma.cu's split-K epilogue
    KERNELS[MMA_KMAJOR4_SOURCE] = tuple(c.name(ta, tb, to, 16) for c in MMA_CONFIGS.values() for ta in QTYPES
                                        for tb in KMAJOR4_TAGS for to in OUT_TYPES)
if HAVE_MMA_GROUPED:  # float outputs, 16-byte copies, every b (its tags as the other sources name them)
    KERNELS[MMA_GROUPED_SOURCE] = tuple(c.name(ta, tb, to, 16) for c in GROUPED_CONFIGS.values() for ta in QTYPES
                                        for tb in QTYPES + PACKED_TAGS + tuple(KMAJOR_TAGS.values()) + KMAJOR4_TAGS
                                        for to in c.out_types)

if HAVE_WGMMA:
    KERNELS[WGMMA_SOURCE] = tuple(c.name(ta, tb, to) for c in WGMMA_CONFIGS.values() for ta in QTYPES
                                  for tb in QTYPES for to in OUT_TYPES)

# The variants this install can run (the mma ones only with matmul_mma.cu present).
VARIANTS = tuple(DP4A_CONFIGS) + (tuple(MMA_CONFIGS) if HAVE_MMA else ()) + \
    (tuple(GROUPED_CONFIGS) if HAVE_MMA_GROUPED else ()) + \
    (tuple(WGMMA_CONFIGS) if HAVE_WGMMA else ())
TENSOR_CONFIGS = {**MMA_CONFIGS, **WGMMA_CONFIGS}  # the split-K (tensor-core) variants
