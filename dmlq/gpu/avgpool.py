"""QUANTIZED_LINEAR_AVERAGE_POOLING on the GPU: kernel table, selection, launch.

Kernels: cuda/avgpool.cu (its header lists the variants and the napkin math) and, for
channels_last inputs, cuda/avgpool_cl.cu.
Selection (:func:`select_variant`, :func:`applicable`) is pure Python.

Launch conventions of quantized_avg_pool:
- 2-D runs as 3-D with D = OD = 1. x is never copied: strides are passed in
  elements (int64; 0 and negative work). ``tile_*`` needs a unit W stride,
  ``global_*`` a contiguous image (D, H, W), ``channels_last_*`` a unit channel
  stride (C, the other strides and x's address multiples of 16 or 4); ``general``
  takes anything.
- out is written in place when C-contiguous, or (general, channels_last_*)
  channels_last or any other dense order, else through a contiguous temporary
  copied into it (on the same stream).
- Scales and zero points are 1-element or per-channel (length C) device arrays
  passed by pointer with a per-channel bit mask (1 x_scale, 2 x_zp, 4 out_scale,
  8 out_zp); an omitted zero point is a null pointer. No host reads, no sync.
- With per-tensor scales and zero points the tile kernels build a
  window-sum -> output table in shared memory once per persistent block (one
  wave of blocks); per-channel ones run the exact epilogue per output.
- Sizes, window, strides, pads and dilations are C ints, and so are tap
  positions: (out-1)*stride + (window-1)*dilation + 1 + in + pads must stay
  below 2**31 per dimension (else UnsupportedError); element offsets, sums and
  counts are int64 where they can pass 2**31.
- Kernels run on CuPy's current stream; size-0 outputs return at once.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedError
from ..keys import key, param_key
from ..layout import dense_order
from . import device
from .device import NULL
from .plan import Launch, Memo, Plan, Runner, device_key, launcher

SOURCE = "avgpool.cu"
CL_SOURCE = "avgpool_cl.cu"  # the channels_last kernels
QTYPES = ("int8", "uint8")  # C typedefs in common.cuh

# tile variant -> (KW, SW, OPT): W window, W stride, outputs per thread
TILE_CONFIGS = {"tile_k2s2": (2, 2, 8), "tile_k3s1": (3, 1, 16), "tile_k3s2": (3, 2, 8)}
# strip variant -> (KH, KW, OPT): H and W window (strides and dilations 1), outputs per thread in W
STRIP_CONFIGS = {"strip_k3s1": (3, 3, 16)}
# global variant -> threads per plane
GLOBAL_GROUPS = {"global_warp": 32, "global_block": 256}
# channels_last variant -> channels per thread (bytes a tap's load reads)
CL_CONFIGS = {"channels_last_16": 16, "channels_last_4": 4}
# channels_last strip variant -> (channels per thread, H window): an H window at stride 1
CL_STRIP_CONFIGS = {"channels_last_strip_16": (16, 3), "channels_last_strip_4": (4, 3)}
# channels_last global variant -> channels per thread (a whole-image window, positions split)
CL_GLOBAL_CONFIGS = {"channels_last_global_16": 16, "channels_last_global_4": 4}
VARIANTS = ("general", *TILE_CONFIGS, *STRIP_CONFIGS, *GLOBAL_GROUPS, *CL_CONFIGS, *CL_STRIP_CONFIGS,
            *CL_GLOBAL_CONFIGS)
CL_VARIANTS = (*CL_CONFIGS, *CL_STRIP_CONFIGS, *CL_GLOBAL_CONFIGS)  # cuda/avgpool_cl.cu's

INT_MAX = 2**31 - 1
MAX_TILE_ROWS = 2**31 - 1024    # rows are C ints and loops step a block past them
MAX_TILE_SPAN = 2**30           # keeps o*stride - pad + k*dilation and pad sums in int
MAX_TILE_TAPS = (2**31 - 1) // 255  # int window sums
LUT_MAX_TAPS = 64               # table of taps*255 + 1 bytes (<= 16 KiB shared memory)
GLOBAL_BLOCK_MIN_VOLUME = 4096  # a block per image only pays for large images ...
GLOBAL_BLOCK_MAX_PLANES = 2048  # ... that are too few to fill the GPU a warp each
GENERAL_BLOCK = 256
GLOBAL_MAX_GRID = INT_MAX        # global_*: blocks beyond this walk further planes (grid-stride)
TILE_BLOCK = 256
CL_BLOCK = 256
CL_MAX_KW = 257                 # a window row's taps in one 16-bit lane: 257 * 255 = 65535
LANE_MAX_TAPS = 257             # strip_*: a whole window's sum in one 16-bit lane
STRIP_ROWS = 16                 # output rows a strip thread walks (halo: KH - 1 more input rows) ...
STRIP_MIN_ROWS = 4              # ... halved down to this while the grid has under STRIP_WAVES waves
STRIP_WAVES = 4
CL_GLOBAL_MAX_CHUNK = 2**23     # channels_last_global_*: a chunk's sums of 255s fit 32 bits (2**23 * 255)
CL_GLOBAL_MIN_TAPS = 8          # ... positions a thread sums at least where an image is split ...
CL_GLOBAL_WAVES = 2             # ... into chunks until the grid has this many waves of blocks
CL_GLOBAL_MAX_GRID = INT_MAX    # ... blocks in x (items): beyond it blocks walk further items (grid-stride)
CL_MAX_GRID_Y = 65535           # channels_last_*: blocks in y (channel blocks); beyond it grid-stride


def kernel_name(variant: str, tx: str, to: str) -> str:
    """The name expression ``variant`` launches for input type tx, output type to."""
    if variant in TILE_CONFIGS:
        kw, sw, opt = TILE_CONFIGS[variant]
        return f"avgpool_tile<{tx}, {to}, {kw}, {sw}, {opt}>"
    if variant in GLOBAL_GROUPS:
        return f"avgpool_global<{tx}, {to}, {GLOBAL_GROUPS[variant]}>"
    if variant in STRIP_CONFIGS:
        kh, kw, opt = STRIP_CONFIGS[variant]
        return f"avgpool_strip<{tx}, {to}, {kh}, {kw}, {opt}>"
    if variant in CL_CONFIGS:
        return f"avgpool_cl<{tx}, {to}, {CL_CONFIGS[variant]}>"
    if variant in CL_STRIP_CONFIGS:
        vec, kh = CL_STRIP_CONFIGS[variant]
        return f"avgpool_cl_strip<{tx}, {to}, {vec}, {kh}>"
    if variant in CL_GLOBAL_CONFIGS:
        return f"avgpool_cl_global<{tx}, {to}, {CL_GLOBAL_CONFIGS[variant]}>"
    if variant == "general":
        return f"avgpool_general<{tx}, {to}>"
    raise ValueError(f"unknown avgpool variant {variant!r} (one of {VARIANTS})")


def source_of(variant: str) -> str:
    """The cuda/ file holding ``variant``'s kernel."""
    return CL_SOURCE if variant in CL_VARIANTS else SOURCE


def finish_name(tx: str, to: str) -> str:
    """The second kernel of channels_last_global_* where an image is split into chunks."""
    return f"avgpool_cl_global_finish<{tx}, {to}>"


KERNELS = {src: tuple(kernel_name(v, tx, to) for v in VARIANTS if source_of(v) == src for tx in QTYPES
                      for to in QTYPES) for src in (SOURCE, CL_SOURCE)}
KERNELS[CL_SOURCE] += tuple(finish_name(tx, to) for tx in QTYPES for to in QTYPES)


# ----------------------------------------------------------------------------------------------
# selection (pure Python)

def _spatial3(values, fill):
    """(D, H, W) from 2 or 3 per-dimension values; a 2-D problem gets D = fill."""
    values = tuple(int(v) for v in values)
    return values if len(values) == 3 else (fill,) + values


def _image_contiguous(shape, strides) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def positions_stride(in_sp, strides):
    """The one stride (elements) between an image's consecutive positions (D, H, W flattened,
    size-1 dimensions free), or None where the positions are not evenly spaced."""
    step = next((st for size, st in zip(reversed(in_sp), reversed(strides)) if size != 1), 0)
    expected = step
    for size, st in zip(reversed(in_sp), reversed(strides)):
        if size != 1 and st != expected:
            return None
        expected *= size
    return step


def _whole_image(in_sp, out_sp, window_size, start_padding, dilations) -> bool:
    """A window of the whole image from its first position: one output position."""
    return (all(o == 1 for o in out_sp) and all(p == 0 for p in start_padding)
            and tuple(window_size) == tuple(in_sp)
            and all(d == 1 or k == 1 for d, k in zip(dilations, window_size)) and math.prod(in_sp) > 0)


def _spans_fit(in_sp, out_sp, window_size, strides, start_padding, end_padding, dilations) -> bool:
    """Whether every tap position and padded extent fits a C int (the tile and channels_last
    kernels' arithmetic)."""
    return all((o - 1) * s + (k - 1) * d + 1 + i + p + e < MAX_TILE_SPAN
               for i, o, k, s, d, p, e in zip(in_sp, out_sp, window_size, strides, dilations, start_padding,
                                              end_padding))


def applicable(variant, x_shape, x_strides, out_shape, window_size, strides, start_padding,
               end_padding, dilations, include_padding, *, x_address=0) -> bool:
    """Whether ``variant`` computes this problem (x_strides in elements; x_address: x's
    address, whose alignment the channels_last variants read)."""
    del include_padding  # every variant handles both
    if variant == "general":
        return True
    in_sp, out_sp = tuple(x_shape[2:]), tuple(out_shape[2:])
    if variant in CL_STRIP_CONFIGS:
        vec, kh = CL_STRIP_CONFIGS[variant]
        return (window_size[-2] == kh and strides[-2] == 1 and dilations[-2] == 1
                and math.prod(window_size) <= LANE_MAX_TAPS
                and applicable(f"channels_last_{vec}", x_shape, x_strides, out_shape, window_size, strides,
                               start_padding, end_padding, dilations, False, x_address=x_address))
    if variant in CL_GLOBAL_CONFIGS:
        step = positions_stride(in_sp, tuple(x_strides[2:]))
        return (step is not None and _whole_image(in_sp, out_sp, window_size, start_padding, dilations)
                and _vectors(CL_GLOBAL_CONFIGS[variant], x_shape, x_strides, x_address)
                and x_shape[0] * -(-math.prod(in_sp) // CL_GLOBAL_MAX_CHUNK) <= INT_MAX)
    if variant in CL_CONFIGS:
        return (_vectors(CL_CONFIGS[variant], x_shape, x_strides, x_address)
                and window_size[-1] <= CL_MAX_KW and math.prod(window_size) <= MAX_TILE_TAPS
                and x_shape[0] * math.prod(out_sp) < MAX_TILE_ROWS
                and _spans_fit(in_sp, out_sp, window_size, strides, start_padding, end_padding, dilations))
    if variant in GLOBAL_GROUPS:
        return (_whole_image(in_sp, out_sp, window_size, start_padding, dilations)
                and _image_contiguous(in_sp, tuple(x_strides[2:])))
    if variant in STRIP_CONFIGS:
        kh, kw, _ = STRIP_CONFIGS[variant]
        return (tuple(window_size[-2:]) == (kh, kw) and tuple(strides[-2:]) == (1, 1)
                and tuple(dilations[-2:]) == (1, 1) and (x_strides[-1] == 1 or x_shape[-1] == 1)
                and math.prod(window_size) <= LANE_MAX_TAPS and math.prod(out_shape[:-1]) < MAX_TILE_ROWS
                and _spans_fit(in_sp, out_sp, window_size, strides, start_padding, end_padding, dilations))
    if variant in TILE_CONFIGS:
        kw, sw, _ = TILE_CONFIGS[variant]
        if (window_size[-1], strides[-1], dilations[-1]) != (kw, sw, 1):
            return False
        if x_strides[-1] != 1 and x_shape[-1] != 1:
            return False
        rows = math.prod(out_shape[:-1])
        if rows >= MAX_TILE_ROWS or math.prod(window_size) > MAX_TILE_TAPS:
            return False
        return _spans_fit(in_sp, out_sp, window_size, strides, start_padding, end_padding, dilations)
    raise ValueError(f"unknown avgpool variant {variant!r} (one of {VARIANTS})")


def _vectors(vec, x_shape, x_strides, x_address) -> bool:
    """The channels_last kernels' rule: channel stride 1, C a multiple of ``vec``, x's address and
    other strides multiples of it (each thread's vec channels one aligned load)."""
    c = x_shape[1]
    return (c % vec == 0 and c > 0 and x_strides[1] == 1 and x_address % vec == 0
            and all(size == 1 or st % vec == 0 for i, (size, st) in enumerate(zip(x_shape, x_strides)) if i != 1))


def select_variant(x_shape, x_strides, out_shape, window_size, strides, start_padding,
                   end_padding, dilations, include_padding, *, x_address=0) -> str:
    """The variant dmlq runs for this problem; x_strides in elements, x_address x's address.

    The rule: a whole-image window on a contiguous image -> global_block for few large
    images, else global_warp; on a channels_last image with evenly spaced positions ->
    channels_last_global_16 where 16-channel vectors apply, else _4; channels stride 1
    (channels_last) -> channels_last_strip_16 /
    _4 for an H window of 3 at H stride 1, else channels_last_16 where 16-channel vectors
    apply, else channels_last_4; a 3x3 window at H and W stride 1 on rows
    of unit W stride -> strip_k3s1; a W window/stride of 2/2 -> tile_k2s2; anything else ->
    general."""
    args = (x_shape, x_strides, out_shape, window_size, strides, start_padding, end_padding,
            dilations, include_padding)
    if applicable("global_warp", *args):
        planes = x_shape[0] * x_shape[1]
        volume = math.prod(x_shape[2:])
        if volume >= GLOBAL_BLOCK_MIN_VOLUME and planes <= GLOBAL_BLOCK_MAX_PLANES:
            return "global_block"
        return "global_warp"
    for cl in (*CL_GLOBAL_CONFIGS, *CL_STRIP_CONFIGS, *CL_CONFIGS):  # (channels_last in, unmeasured: ~10x fewer instructions
        if applicable(cl, *args, x_address=x_address):  # an output than general's, avgpool_cl.cu)
            return cl
    for strip in STRIP_CONFIGS:  # (unmeasured: each input row summed once, ~9 instructions an
        if applicable(strip, *args):  # output against the 3x3 tile's ~35, avgpool.cu)
            return strip
    tile = tile_class(*args)
    return tile if tile in AUTO_TILES else "general"


# The tiles selection picks on its own: the ones that beat the general kernel on the H100
# (bench/results/gpu-2026-11-26/bench/bench.log, medians). tile_k2s2 840 us against 1,344
# at 256x256x56x56 and even (111 / 112 us) on the 3-D 8x64x16x56x56; tile_k3s1 2,053 us
# against general 1,345 at 64x256x56x56 pad 1, tile_k3s2 456 against 357 at
# 64x64x112x112 pad 1: both lose, for reasons a profile has to show (tools/gpu_session.sh
# profile), so they run only when forced (variant=).
AUTO_TILES = ("tile_k2s2",)


def tile_class(*args):
    """The tile variant whose window/stride class the problem falls in (the first that
    applies), or None; ``args`` as :func:`select_variant`'s."""
    return next((v for v in TILE_CONFIGS if applicable(v, *args)), None)


def strip_rows(out_rows: int, columns: int, wave_threads: int) -> int:
    """The output rows each strip_* thread walks down: STRIP_ROWS, halved (down to
    STRIP_MIN_ROWS) while the ``columns`` (planes x W groups) threads a strip length gives are
    fewer than STRIP_WAVES waves of ``wave_threads``; never more than the image's rows. A
    strip reads KH - 1 input rows more than it makes, so longer strips read less."""
    s = STRIP_ROWS
    while s > STRIP_MIN_ROWS and columns * -(-out_rows // s) < STRIP_WAVES * wave_threads:
        s //= 2
    return max(1, min(s, out_rows))


def global_splits(blocks: int, vol: int, rows: int, wave: int) -> int:
    """The chunks channels_last_global_* cuts each image's ``vol`` positions into: enough that
    ``blocks`` (images x channel blocks) times it fill CL_GLOBAL_WAVES waves of ``wave`` blocks,
    while each of a block's ``rows`` threads still sums CL_GLOBAL_MIN_TAPS positions of a chunk;
    at least enough that no chunk passes CL_GLOBAL_MAX_CHUNK positions (32-bit sums)."""
    need = -(-vol // CL_GLOBAL_MAX_CHUNK)
    want = -(-CL_GLOBAL_WAVES * wave // blocks)
    most = max(1, vol // (rows * CL_GLOBAL_MIN_TAPS))
    return max(need, min(want, most))


def _magic(d: int):
    """(magic, shift) with n // d == (((n * magic) >> 32) + n) >> shift for 0 <= n < 2**31."""
    if not 1 <= d <= INT_MAX:
        raise ValueError(f"divisor {d} out of range")
    shift = (d - 1).bit_length()
    magic = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return magic, shift


# ----------------------------------------------------------------------------------------------
# launch

def _check_int(**values):
    for name, v in values.items():
        if not 0 <= v <= INT_MAX:
            raise UnsupportedError(f"QuantizedLinearAveragePooling: {name} = {v} does not fit a C int "
                                   "in the CUDA kernels")


def _param_vector(xp, v, dtype):
    """A contiguous 1-D device vector (no copy when it already is one)."""
    v = v.reshape(-1)
    if v.dtype != dtype:
        raise TypeError(f"avgpool parameter has dtype {v.dtype}, expected {np.dtype(dtype)}")
    return xp.ascontiguousarray(v)


def _table_bytes(per_channel: int, kvol: int) -> int:
    """Bytes of the window-sum table (0: none): per-tensor parameters, at most LUT_MAX_TAPS taps."""
    return kvol * 255 + 1 if per_channel == 0 and kvol <= LUT_MAX_TAPS else 0


def _wave(name: str, threads: int, lut_n: int) -> int:
    """Blocks of ``threads`` of kernel ``name`` resident on the whole device at once."""
    source = CL_SOURCE if name.startswith("avgpool_cl") else SOURCE
    return device.info().sm_count * device.resident_blocks(source, name, threads, lut_n)


def _table_grid(gx: int, gy: int, lut_n: int, wave: int, notes: tuple):
    """(gx, notes): with a table, one wave of persistent blocks, each building it once."""
    if not lut_n:
        return gx, notes
    return max(1, min(gx, wave // gy)), notes + (f"window-sum table of {lut_n} B per block",)


_STORES = {16: "16-byte stores", 4: "4-byte stores", 1: "byte stores"}


def _cl_block(channels: int, vec: int):
    """(groups of vec channels, block x, block y, grid y) of the channels_last kernels: a warp is
    adjacent channel groups of 32 // bx positions (or columns)."""
    groups = channels // vec
    bx = min(32, 1 << (groups - 1).bit_length())
    return groups, bx, CL_BLOCK // bx, min(-(-groups // bx), CL_MAX_GRID_Y)


def plan_quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size,
                            strides, start_padding, end_padding, dilations, include_padding, *,
                            variant=None) -> Plan:
    """The plan of :func:`quantized_avg_pool` (nothing launched). Its detail holds
    the scalar kernel arguments around the pointers (x, out, parameters)."""
    op = "quantized_avg_pool"
    if out.size == 0:
        return Plan(op, "empty")
    x_strides = tuple(s // x.itemsize for s in x.strides)
    args = (x.shape, x_strides, out.shape, tuple(window_size), tuple(strides), tuple(start_padding),
            tuple(end_padding), tuple(dilations), bool(include_padding))
    x_address = device.ptr(x)
    if variant is None:
        variant = select_variant(*args, x_address=x_address)
    elif not applicable(variant, *args, x_address=x_address):
        raise ValueError(f"avgpool variant {variant!r} does not apply to this problem")

    n_, c_ = int(x.shape[0]), int(x.shape[1])
    D, H, W = _spatial3(x.shape[2:], 1)
    OD, OH, OW = _spatial3(out.shape[2:], 1)
    KD, KH, KW = _spatial3(window_size, 1)
    SD, SH, SW = _spatial3(strides, 1)
    DD, DH, DW = _spatial3(dilations, 1)
    PD, PH, PW = _spatial3(start_padding, 0)
    ED, EH, EW = _spatial3(end_padding, 0)
    sxn, sxc = x_strides[:2]
    sxd, sxh, sxw = _spatial3(x_strides[2:], 0)
    _check_int(C=c_, D=D, H=H, W=W, OD=OD, OH=OH, OW=OW, KD=KD, KH=KH, KW=KW, SD=SD, SH=SH, SW=SW,
               DD=DD, DH=DH, DW=DW, PD=PD, PH=PH, PW=PW, ED=ED, EH=EH, EW=EW)
    for name, o, s, k, d, i, p, e in (("D", OD, SD, KD, DD, D, PD, ED), ("H", OH, SH, KH, DH, H, PH, EH),
                                      ("W", OW, SW, KW, DW, W, PW, EW)):
        _check_int(**{f"{name} span": (o - 1) * s + (k - 1) * d + 1 + i + p + e})
    per_channel = sum(bit for bit, v in ((1, x_scale), (2, x_zero_point), (4, out_scale), (8, out_zero_point))
                      if v is not None and v.size > 1)
    direct = _direct(out, variant)
    notes: tuple[str, ...] = () if direct else ("out written through a contiguous temporary",)
    o_strides = (tuple(st // out.itemsize for st in out.strides) if direct
                 else tuple(int(np.prod(out.shape[i + 1:], dtype=np.int64)) for i in range(out.ndim)))
    son, soc = o_strides[:2]
    sod, soh, sow = _spatial3(o_strides[2:], 0)
    scalars: tuple  # (kernel arguments, arguments after the pointers)
    name = kernel_name(variant, str(x.dtype), str(out.dtype))
    i32, i64 = np.int32, np.int64

    if variant in CL_GLOBAL_CONFIGS:
        vol = D * H * W
        groups, bx, by, gy = _cl_block(c_, CL_GLOBAL_CONFIGS[variant])
        splits = global_splits(n_ * gy, vol, by, _wave(name, bx * by, 0))
        chunk = -(-vol // splits)
        splits = -(-vol // chunk)
        items = n_ * splits
        launches: tuple[Launch, ...] = (Launch(source_of(variant), name, (min(items, CL_GLOBAL_MAX_GRID), gy),
                                                (bx, by)),)
        if splits > 1:
            launches += (Launch(CL_SOURCE, finish_name(str(x.dtype), str(out.dtype)),
                                (min(-(-n_ * c_ // 256), INT_MAX),), (256,), 0, "the chunks' sums added, the output"),)
            notes += (f"{splits} chunks of {chunk} positions an image, their 32-bit sums in a temporary",)
        sxp = positions_stride(x.shape[2:], x_strides[2:])
        scalars = ((i32(items), i32(splits), i32(groups), i64(vol), i64(chunk), i64(sxn), i64(sxp), i64(son),
                    i64(soc)), ())
        return Plan(op, variant, launches, notes, (scalars, per_channel))
    if variant in GLOBAL_GROUPS:
        planes = n_ * c_
        per_block = 256 // GLOBAL_GROUPS[variant]
        launch = Launch(source_of(variant), name, (min(-(-planes // per_block), GLOBAL_MAX_GRID),), (256,))
        scalars = ((i64(planes), i32(c_), i64(D * H * W), i64(sxn), i64(sxc)), ())
    elif variant in TILE_CONFIGS:
        _, _, opt = TILE_CONFIGS[variant]
        planes = n_ * c_ * OD
        rows = planes * OH  # ordered oh * planes + plane
        groups = -(-OW // opt)
        bx, by = 1, TILE_BLOCK  # a warp: 32 planes' rows at one oh, one group (avgpool.cu's tile comment)
        lut_n = _table_bytes(per_channel, KD * KH * KW)
        gy = min(-(-groups // bx), 65535)
        gx, notes = _table_grid(min(-(-rows // by), INT_MAX), gy, lut_n, _wave(name, bx * by, lut_n), notes)
        m_p, s_p = _magic(planes)
        m_od, s_od = _magic(OD)
        m_c, s_c = _magic(c_)
        launch = Launch(source_of(variant), name, (gx, gy), (bx, by), lut_n)
        scalars = ((i32(rows), i32(groups), i32(planes), i32(c_), i32(OD), i32(OH), i32(OW), i32(D),
                    i32(H), i32(W), np.uint32(m_p), i32(s_p), np.uint32(m_od), i32(s_od), np.uint32(m_c), i32(s_c),
                    i64(sxn), i64(sxc), i64(sxd), i64(sxh), i32(KD), i32(KH), i32(SD), i32(SH), i32(DD),
                    i32(DH), i32(PD), i32(PH), i32(PW), i32(ED), i32(EH), i32(EW),
                    i32(bool(include_padding))), (i32(lut_n),))
    elif variant in STRIP_CONFIGS:
        _, _, opt = STRIP_CONFIGS[variant]
        planes = n_ * c_ * OD
        groups = -(-OW // opt)
        lut_n = _table_bytes(per_channel, KD * KH * KW)
        wave = _wave(name, TILE_BLOCK, lut_n)
        s_rows = strip_rows(OH, planes * groups, wave * TILE_BLOCK)
        rows = -(-OH // s_rows) * planes  # ordered strip * planes + plane
        gy = min(groups, 65535)
        gx, notes = _table_grid(min(-(-rows // TILE_BLOCK), INT_MAX), gy, lut_n, wave,
                                notes + (f"strips of {s_rows} output rows",))
        m_p, s_p = _magic(planes)
        m_od, s_od = _magic(OD)
        m_c, s_c = _magic(c_)
        launch = Launch(source_of(variant), name, (gx, gy), (1, TILE_BLOCK), lut_n)
        scalars = ((i32(rows), i32(groups), i32(planes), i32(s_rows), i32(c_), i32(OD), i32(OH), i32(OW), i32(D),
                    i32(H), i32(W), np.uint32(m_p), i32(s_p), np.uint32(m_od), i32(s_od), np.uint32(m_c), i32(s_c),
                    i64(sxn), i64(sxc), i64(sxd), i64(sxh), i32(KD), i32(SD), i32(DD), i32(PD), i32(PH), i32(PW),
                    i32(ED), i32(EH), i32(EW), i32(bool(include_padding))), (i32(lut_n),))
    elif variant in CL_STRIP_CONFIGS:
        vec, _ = CL_STRIP_CONFIGS[variant]
        groups, bx, by, gy = _cl_block(c_, vec)
        lut_n = _table_bytes(per_channel, KD * KH * KW)
        wave = _wave(name, bx * by, lut_n)
        s_rows = strip_rows(OH, n_ * OD * OW * groups, wave * bx * by)
        ns = -(-OH // s_rows)
        columns = n_ * OD * ns * OW
        gx, notes = _table_grid(min(-(-columns // by), INT_MAX), gy, lut_n, wave,
                                notes + (f"strips of {s_rows} output rows",))
        out_vec = _out_vector(out, o_strides, vec) if direct else 1
        notes += (_STORES[out_vec],)
        m_ow, s_ow = _magic(OW)
        m_ns, s_ns = _magic(ns)
        m_od, s_od = _magic(OD)
        launch = Launch(source_of(variant), name, (gx, gy), (bx, by), lut_n)
        scalars = ((i32(columns), i32(groups), i32(s_rows), i32(ns), i32(OD), i32(OH), i32(OW), i32(D), i32(H),
                    i32(W), np.uint32(m_ow), i32(s_ow), np.uint32(m_ns), i32(s_ns), np.uint32(m_od), i32(s_od),
                    i64(sxn), i64(sxd), i64(sxh), i64(sxw), i64(son), i64(soc), i64(sod), i64(soh), i64(sow),
                    i32(out_vec), i32(KD), i32(KW), i32(SD), i32(SW), i32(DD), i32(DW), i32(PD), i32(PH), i32(PW),
                    i32(ED), i32(EH), i32(EW), i32(bool(include_padding))), (i32(lut_n),))
    elif variant in CL_CONFIGS:
        vec = CL_CONFIGS[variant]
        positions = n_ * OD * OH * OW
        groups, bx, by, gy = _cl_block(c_, vec)
        lut_n = _table_bytes(per_channel, KD * KH * KW)
        gx, notes = _table_grid(min(-(-positions // by), INT_MAX), gy, lut_n, _wave(name, bx * by, lut_n), notes)
        out_vec = _out_vector(out, o_strides, vec) if direct else 1
        notes += (_STORES[out_vec],)
        m_ow, s_ow = _magic(OW)
        m_oh, s_oh = _magic(OH)
        m_od, s_od = _magic(OD)
        launch = Launch(source_of(variant), name, (gx, gy), (bx, by), lut_n)
        scalars = ((i32(positions), i32(groups), i32(OD), i32(OH), i32(OW), i32(D), i32(H), i32(W),
                    np.uint32(m_ow), i32(s_ow), np.uint32(m_oh), i32(s_oh), np.uint32(m_od), i32(s_od),
                    i64(sxn), i64(sxd), i64(sxh), i64(sxw), i64(son), i64(soc), i64(sod), i64(soh), i64(sow),
                    i32(out_vec), i32(KD), i32(KH), i32(KW), i32(SD), i32(SH), i32(SW), i32(DD), i32(DH),
                    i32(DW), i32(PD), i32(PH), i32(PW), i32(ED), i32(EH), i32(EW),
                    i32(bool(include_padding))), (i32(lut_n),))
    else:
        planes = n_ * c_ * OD
        bx = min(32, 1 << (OW - 1).bit_length())
        by = min(GENERAL_BLOCK // bx, 1 << (OH - 1).bit_length())
        bz = min(64, GENERAL_BLOCK // (bx * by))
        grid = (min(-(-OW // bx), INT_MAX), min(-(-OH // by), 65535), min(-(-planes // bz), 65535))
        m_od, s_od = _magic(OD)
        m_c, s_c = _magic(c_)
        launch = Launch(source_of(variant), name, grid, (bx, by, bz))
        scalars = ((i64(planes), i32(c_), i32(OD), i32(OH), i32(OW), i32(D), i32(H), i32(W),
                    i64(sxn), i64(sxc), i64(sxd), i64(sxh), i64(sxw), i64(son), i64(soc), i64(sod), i64(soh),
                    i64(sow), i32(KD), i32(KH), i32(KW),
                    i32(SD), i32(SH), i32(SW), i32(DD), i32(DH), i32(DW), i32(PD), i32(PH), i32(PW),
                    i32(ED), i32(EH), i32(EW), i32(bool(include_padding)), np.uint32(m_od), i32(s_od),
                    np.uint32(m_c), i32(s_c)), ())
    return Plan(op, variant, (launch,), notes, (scalars, per_channel))


def _c_contiguous(a) -> bool:
    return bool(a.flags.c_contiguous)


def _direct(out, variant) -> bool:
    """Whether the kernel writes ``out`` itself: C-contiguous, or for the general and
    channels_last kernels (which write through out's strides) any out whose elements fill one
    block of memory in some order (channels_last); else through a contiguous temporary."""
    if _c_contiguous(out):
        return True
    if variant in CL_GLOBAL_CONFIGS:  # one position: any strides (so_n, so_c)
        return True
    return ((variant == "general" or variant in CL_CONFIGS or variant in CL_STRIP_CONFIGS)
            and dense_order(out.shape, out.strides, out.itemsize) is not None)


def _out_vector(out, o_strides, vec) -> int:
    """The widest store (16 or 4 bytes, else 1) a channels_last thread's ``vec`` output
    channels take: out's channel stride 1, its address and other strides multiples of it."""
    if o_strides[1] != 1:
        return 1
    for width in (16, 4):
        if width <= vec and device.ptr(out) % width == 0 and all(
                size == 1 or st % width == 0 for i, (size, st) in enumerate(zip(out.shape, o_strides)) if i != 1):
            return width
    return 1


def bind_quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size,
                            strides, start_padding, end_padding, dilations, include_padding, *,
                            variant=None) -> Runner:
    """The runner of these arguments' plan (their geometry, on the device in use):
    ``runner(x, x_scale, x_zero_point, out_scale, out_zero_point, out)``."""
    plan = plan_quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size,
                                   strides, start_padding, end_padding, dilations, include_padding,
                                   variant=variant)
    if not plan.launches:
        return Runner(plan, lambda *args: None)
    xp, go = device.xp(), launcher(plan)
    (before, after), per_channel = plan.detail
    after = (np.int32(per_channel), *after)
    direct = _direct(out, plan.variant)
    x_dt, out_dt = x.dtype, out.dtype

    if all(device.is_vector(v, dt) for v, dt in ((x_scale, np.float32), (x_zero_point, x_dt),
                                                 (out_scale, np.float32), (out_zero_point, out_dt))):
        def params(xs, xz, os_, oz):
            return xs, NULL if xz is None else xz, os_, NULL if oz is None else oz
    else:
        def params(xs, xz, os_, oz):
            return (_param_vector(xp, xs, np.float32), NULL if xz is None else _param_vector(xp, xz, x_dt),
                    _param_vector(xp, os_, np.float32), NULL if oz is None else _param_vector(xp, oz, out_dt))

    if plan.variant in CL_GLOBAL_CONFIGS:
        return Runner(plan, _global_call(plan, go, xp, x.shape[:2], params, before, after))

    def call(x, x_scale, x_zero_point, out_scale, out_zero_point, out):
        dst = out if direct else xp.empty(out.shape, out_dt)
        go(((x, dst, *before, *params(x_scale, x_zero_point, out_scale, out_zero_point), *after),))
        if dst is not out:
            out[...] = dst

    return Runner(plan, call)


def _global_call(plan, go, xp, nc, params, before, after):
    """channels_last_global_*'s call: its chunk sums (splits > 1) in the stream's workspace or
    a temporary, then the finish kernel."""
    n_, c_ = (int(v) for v in nc)
    _, splits, _, vol, _, _, _, son, soc = before
    nbytes = int(splits) * n_ * c_ * 4 if int(splits) > 1 else 0
    take = device.workspace() if 0 < nbytes <= device.WORKSPACE_MAX else None

    def call(x, x_scale, x_zero_point, out_scale, out_zero_point, out):
        p = params(x_scale, x_zero_point, out_scale, out_zero_point)
        if not nbytes:
            go(((x, out, NULL, *before, *p, *after),))
            return
        part = np.uint64(take(nbytes)) if take is not None else xp.empty(nbytes // 4, np.uint32)
        go(((x, out, part, *before, *p, *after),
            (part, out, np.int64(n_ * c_), np.int32(c_), splits, vol, son, soc, *p, *after)))

    return call


_memo = Memo()


def quantized_avg_pool(x, x_scale, x_zero_point, out_scale, out_zero_point, out, window_size,
                       strides, start_padding, end_padding, dilations, include_padding, *,
                       variant=None):
    params = (window_size, strides, start_padding, end_padding, dilations, include_padding)
    x_scale, x_zero_point, out_scale, out_zero_point = map(device.on_device, (x_scale, x_zero_point, out_scale,
                                                                              out_zero_point))
    memo_key = (*device_key(), variant, key(x), key(out), device.ptr(x) % 16, device.ptr(out) % 16,
                param_key(params), *map(key, (x_scale, x_zero_point, out_scale, out_zero_point)))
    runner = _memo.get(memo_key, lambda: bind_quantized_avg_pool(
        x, x_scale, x_zero_point, out_scale, out_zero_point, out, *params, variant=variant))
    runner(x, x_scale, x_zero_point, out_scale, out_zero_point, out)
    return out
