"""Element-wise kernels without a GPU: layout canonicalization, variant selection,
the magic-number division, the launch-argument
ABI against the compiled PTX, and clean NVRTC builds of every instantiation."""
from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from dmlq.gpu import elementwise as ew

C = ew.c_strides


def sel(shape, big, small=(), axis_ok=True):
    return ew.select_variant(shape, big, small, axis_ok=axis_ok)


# ------------------------------------------------------------ canonicalize

def test_canonicalize_merges_dense_and_drops_size_one():
    lay = ew.canonicalize((2, 1, 3, 4), [(12, 12, 4, 1), (12, 99, 4, 1)])
    assert lay.shape == (24,)
    assert lay.strides == ((1,), (1,))
    assert lay.offsets == (0, 0)


def test_canonicalize_zero_d_and_all_ones():
    for shape in ((), (1,), (1, 1, 1)):
        lay = ew.canonicalize(shape, [(0,) * len(shape), (5,) * len(shape)])
        assert lay.shape == () and lay.size == 1
        assert lay.strides == ((), ())


def test_canonicalize_size_zero():
    lay = ew.canonicalize((3, 0, 2), [(0, 2, 1), (0, 2, 1)])
    assert lay.size == 0


def test_canonicalize_flips_reversed_output():
    # out = buf[::-1, ::-1] of a (3, 4) buffer; x plain C order
    lay = ew.canonicalize((3, 4), [(-4, -1), (4, 1)])
    assert lay.shape == (12,)
    assert lay.strides == ((1,), (-1,))
    assert lay.offsets == (-11, 11)


def test_canonicalize_sorts_by_output_strides():
    # both out and x Fortran-ordered: dense after sorting
    lay = ew.canonicalize((3, 4, 5), [(1, 3, 12), (1, 3, 12)])
    assert lay.shape == (60,) and lay.strides == ((1,), (1,))
    # out Fortran, x C: no merge, out order wins
    lay = ew.canonicalize((3, 4), [(1, 3), (4, 1)])
    assert lay.shape == (4, 3)
    assert lay.strides == ((3, 1), (1, 4))


def test_canonicalize_merges_across_broadcast_runs():
    # scale of shape (A, B) against out (N, A, B): (A, B) merges, N stays
    lay = ew.canonicalize((5, 3, 4), [C((5, 3, 4)), C((5, 3, 4)), (0, 4, 1)])
    assert lay.shape == (5, 12)
    assert lay.strides[2] == (0, 1)


# ------------------------------------------------------------ select_variant

@pytest.mark.parametrize("shape", [(7,), (2, 3), (2, 3, 4, 5), (1, 9, 1), (), (1,)])
def test_contiguous_per_tensor_is_contig(shape):
    cs = C(shape)
    zero = (0,) * len(shape)
    assert sel(shape, [cs, cs]) == "contig"
    assert sel(shape, [cs, cs], [zero, zero]) == "contig"
    assert sel(shape, [cs, cs, cs], axis_ok=False) == "contig"


def test_size_zero_is_contig_and_any_variant_is_allowed():
    lay = ew.canonicalize((0, 3), [(3, 1), (0, 0)])
    assert ew.select_layout(lay, 2) == "contig"
    for v in ew.VARIANTS:
        assert ew.layout_supports(v, lay, 2)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_axis(axis):
    shape = (3, 4, 5)
    cs = C(shape)
    st = [0, 0, 0]
    st[axis] = 1
    assert sel(shape, [cs, cs], [tuple(st)]) == "axis"
    assert sel(shape, [cs, cs], [tuple(st), tuple(st)]) == "axis"
    assert sel(shape, [cs, cs], [(0, 0, 0), tuple(st)]) == "axis"  # zp varies, scale per tensor
    lay = ew.canonicalize(shape, [cs, cs, tuple(st), (0, 0, 0)])
    outer, length, inner = ew.axis_dims(lay, 2)
    assert (outer, length, inner) == (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))


def test_per_axis_strided_scale_and_reversed_scale():
    shape = (6, 8)
    cs = C(shape)
    assert sel(shape, [cs, cs], [(2, 0)]) == "axis"  # scale = buf[::2]
    assert sel(shape, [cs, cs], [(0, -1)]) == "axis"  # scale = buf[::-1]


def test_per_axis_merged_axis():
    # scale (A, B) over out (N, A, B): one merged axis of length A*B, inner 1
    shape = (5, 3, 4)
    cs = C(shape)
    assert sel(shape, [cs, cs], [(0, 4, 1)]) == "axis"
    lay = ew.canonicalize(shape, [cs, cs, (0, 4, 1), (0, 0, 0)])
    assert ew.axis_dims(lay, 2) == (5, 12, 1)


def test_two_varying_axes_is_strided():
    shape = (3, 4, 5)
    cs = C(shape)
    assert sel(shape, [cs, cs], [(1, 0, 0), (0, 0, 1)]) == "strided"
    assert sel(shape, [cs, cs], [(5, 0, 1)]) == "strided"  # scale (3, 1, 5)


def test_axis_needs_32_bit_positions():
    big = (2, 2**31)
    assert sel(big, [C(big), C(big)], [(0, 1)]) == "strided"  # L = 2**31
    assert sel(big, [C(big), C(big)], [(1, 0)]) == "strided"  # inner = 2**31
    ok = (2, 2**31 - 1)
    assert sel(ok, [C(ok), C(ok)], [(1, 0)]) == "axis"
    assert sel(big, [C(big), C(big)]) == "contig"  # contig indexes in 64 bits


def test_broadcast_input_is_strided():
    shape = (4, 5)
    cs = C(shape)
    assert sel(shape, [cs, (0, 1)]) == "strided"
    assert sel(shape, [cs, (1, 0)]) == "strided"
    assert sel(shape, [cs, cs, (0, 1)], axis_ok=False) == "strided"


def test_transposed_and_non_contiguous_are_strided():
    shape = (4, 5)
    cs = C(shape)
    assert sel(shape, [cs, (1, 4)]) == "strided"  # x transposed
    assert sel(shape, [(10, 2), cs]) == "strided"  # out = buf[:, ::2]
    assert sel(shape, [cs, (10, 1)]) == "strided"  # x = buf[:, :5] of width 10
    # the same transpose on every tensor is dense
    assert sel(shape, [(1, 4), (1, 4)]) == "contig"
    assert sel(shape, [(1, 4), (1, 4)], [(1, 0)]) == "axis"


def test_negative_strides():
    shape = (4, 5)
    cs = C(shape)
    rev = (-5, -1)
    assert sel(shape, [rev, rev]) == "contig"  # both reversed: dense after flipping
    assert sel(shape, [cs, rev]) == "strided"
    assert sel(shape, [rev, cs]) == "strided"
    assert sel(shape, [rev, rev], [(-1, 0)]) == "axis"


def test_add_never_selects_axis():
    shape = (4, 5)
    cs = C(shape)
    lay = ew.canonicalize(shape, [cs, cs, cs, (0, 0)])
    assert ew.select_layout(lay, 3, axis_ok=False) == "contig"
    assert not ew.layout_supports("axis", lay, 3, axis_ok=False)


def test_forced_variants():
    shape = (4, 5)
    cs = C(shape)
    dense = ew.canonicalize(shape, [cs, cs, (0, 0), (0, 0)])
    per_axis = ew.canonicalize(shape, [cs, cs, (1, 0), (0, 0)])
    strided = ew.canonicalize(shape, [cs, (1, 4), (0, 0), (0, 0)])
    assert all(ew.layout_supports(v, dense, 2) for v in ew.VARIANTS)
    assert ew.axis_dims(dense, 2) == (1, 1, 20)
    assert [ew.layout_supports(v, per_axis, 2) for v in ew.VARIANTS] == [False, True, True]
    assert [ew.layout_supports(v, strided, 2) for v in ew.VARIANTS] == [False, False, True]
    with pytest.raises(ValueError):
        ew._choose("contig", strided, 2, True)
    with pytest.raises(ValueError):
        ew._choose("axis", strided, 2, True)
    with pytest.raises(ValueError):
        ew._choose("bogus", dense, 2, True)
    assert ew._choose("strided", dense, 2, True) == "strided"


def test_needs_wide():
    assert not ew.needs_wide(ew.canonicalize((2**31 - 1,), [(1,), (1,)]))
    assert ew.needs_wide(ew.canonicalize((2**31,), [(1,), (1,)]))
    # few elements, but an input spans >= 2**31 elements (also backwards)
    assert ew.needs_wide(ew.canonicalize((3,), [(1,), (2**30,)]))
    assert ew.needs_wide(ew.canonicalize((3,), [(1,), (-(2**30),)]))
    assert not ew.needs_wide(ew.canonicalize((3,), [(1,), (2**30 - 1,)]))


# ------------------------------------------------------------ kernel index models

def _divisors():
    ds = set(range(1, 600))
    for e in range(1, 31):
        ds.update({2**e - 1, 2**e, 2**e + 1})
    ds.update({3 * 2**28, 2**31 - 1, 1000003, 65537 * 3})
    rng = np.random.default_rng(5)
    ds.update(int(v) for v in rng.integers(1, 2**31, 300))
    return sorted(d for d in ds if d < 2**31)


def test_magic_division_matches_floor_division():
    rng = np.random.default_rng(7)
    for d in _divisors():
        m, s = ew.magic_u32(d)
        assert 0 < m < 2**32 and 0 <= s <= 31
        i = np.concatenate([
            np.array([0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 2**31 - 1, 2**31 - 2], dtype=np.int64),
            (np.arange(-3, 4) + (2**31 - 1) // d * d).clip(0, 2**31 - 1),
            rng.integers(0, 2**31, 2000)]).astype(np.uint64)
        i = i[i < 2**31]
        got = ew.magic_div(i, np.uint64(m), np.uint64(s))
        np.testing.assert_array_equal(got, i // np.uint64(d), err_msg=f"d={d}")
        # the kernel adds t + i in 32 bits: must not wrap
        assert int((((i * np.uint64(m)) >> np.uint64(32)) + i).max()) < 2**32


def test_pack_geo_layout():
    lay = ew.canonicalize((3, 4), [(1, 3), (4, 1), (0, 1), (1, 0)])
    g = ew.pack_geo(lay, False)[0]
    assert g["ndim"] == 2
    assert list(g["size"][:2]) == [3, 4]  # innermost first: out's stride-1 dim
    assert list(g["stride"][0][:2]) == [1, 3]
    assert list(g["stride"][1][:2]) == [4, 1]
    assert ew.GEO32.itemsize == 4 * (8 * 3 + 32 + 1)
    assert ew.GEO64.itemsize == 8 * (8 + 32 + 1)
    with pytest.raises(ValueError):
        ew.pack_geo(ew.Layout((2,) * 9, ((1,) * 9,) * 4, (0,) * 4), False)


def test_vector_width_follows_the_stores():
    """(out, input) itemsizes: a widening kernel (dequantize) moves 16 bytes of its output
    per vector, so a warp's stores are contiguous; a narrowing one (quantize) 16 bytes of its
    output too (the narrower type), its loads several 16-byte vectors."""
    assert ew.vec_width((4, 1)) == 4 and ew.vec_width((2, 1)) == 8 and ew.vec_width((4, 2)) == 4
    assert ew.vec_width((1, 4)) == 16 and ew.vec_width((1, 2)) == 16 and ew.vec_width((4, 4)) == 4
    assert ew.vec_width((1, 1, 1)) == 16


@pytest.mark.parametrize("itemsizes", [(1, 4), (1, 2), (4, 4), (2, 4), (4, 1), (2, 1), (1, 1, 1)])
def test_vector_head(itemsizes):
    vec = ew.vec_width(itemsizes)
    assert ew.vector_head([256 * k for k in range(len(itemsizes))], itemsizes, 100, vec) == 0
    for offs in itertools.product(range(4), repeat=len(itemsizes)):
        addrs = [4096 * (k + 1) + o * s for k, (o, s) in enumerate(zip(offs, itemsizes))]
        for n in (0, 1, 5, 40, 1000):
            h = ew.vector_head(addrs, itemsizes, n, vec)
            # each operand aligned to its vector's bytes (16 at most) after the head
            ok = [hh for hh in range(vec)
                  if all((a + hh * s) % min(16, vec * s) == 0 for a, s in zip(addrs, itemsizes))]
            assert h == (min(ok[0], n) if ok else n)
            # contig coverage: vectors after the head, then the scalar rest
            nvec = (n - h) // vec
            covered = list(range(h, h + nvec * vec)) + list(range(h)) + list(range(h + nvec * vec, n))
            assert sorted(covered) == list(range(n))


# ------------------------------------------------------------ launch arguments vs PTX

ARCHS = ("sm_90",)  # the static report's compile; sm_80: tests/test_nvrtc.py
PREBUILT_PTX = [("elementwise.cu", a) for a in ARCHS]  # tests/prebuild.py starts them


_compiled: dict = {}


def compiled(arch):
    """CompileResult of elementwise.cu for every name in KERNELS (cached)."""
    pytest.importorskip("dmlq.gpu.nvrtc")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if arch not in _compiled:
        import prebuild

        names = ew.KERNELS["elementwise.cu"]
        res = prebuild.compiled("elementwise.cu", arch, names)
        _compiled[arch] = res
    return _compiled[arch]


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)


def _entries(ptx):
    """{mangled name: (param list text, body text)}."""
    out = {}
    matches = list(_ENTRY.finditer(ptx))
    for m, nxt in zip(matches, matches[1:] + [None]):
        out[m.group(1)] = (m.group(2), ptx[m.end(): nxt.start() if nxt else len(ptx)])
    return out


def _ptx_params(text):
    """Kernel parameters as ('u64'|'u32'|'f32'|('b8', size, align))."""
    out = []
    for p in text.split(","):
        p = p.strip()
        m = re.match(r"\.param \.align (\d+) \.b8 \w+\[(\d+)\]", p)
        if m:
            out.append(("b8", int(m.group(2)), int(m.group(1))))
            continue
        m = re.match(r"\.param \.(\w+) \w+", p)
        out.append(m.group(1))
    return out


def _arg_kind(a):
    if isinstance(a, np.ndarray):
        return ("b8", a.dtype.itemsize, a.dtype.alignment)
    a = np.asarray(a)
    if a.dtype == np.float32:
        return "f32"
    return {8: "u64", 4: "u32"}[a.dtype.itemsize]


def _launch_cases():
    """(name, args) for every kernel in KERNELS with dummy pointers."""
    cases = []
    ptrs = (0x10000, 0x20000, 0x30000, 0x40000)
    lay = ew.canonicalize((3, 4), [(4, 1), (4, 1), (0, 1), (0, 1)])
    for name in ew.KERNELS["elementwise.cu"]:
        op, rest = name.split("_", 1)
        variant = rest.split("<")[0]
        wide = name.endswith("true>")
        if op == "add":
            params = [(0x50000, 1.0)] * 3 + [(0, 0)] * 3
            dense = ew.canonicalize((3, 4), [(4, 1)] * 3 + [(0, 0)])
            if variant.startswith("table"):
                args, _ = ew.add_args("contig", dense, ptrs, params, wide)
                build, table = ew.add_table_args(args, np.uint64(0x60000))
                args = build if variant == "table_build" else table
            else:
                args, _ = ew.add_args(variant, dense, ptrs, params, wide)
        else:
            args, _ = ew.unary_args(op, variant, lay if variant != "contig" else
                                    ew.canonicalize((12,), [(1,)] * 2 + [(0,)] * 2),
                                    ptrs, (1, 4), 1.0, 0, wide)
        cases.append((name, args))
    return cases


@pytest.mark.parametrize("arch", ARCHS)
def test_compiles_clean_for_every_instantiation(arch):
    res = compiled(arch)
    names = ew.KERNELS["elementwise.cu"]
    assert res.log == "", res.log
    assert set(res.lowered) == set(names)
    entries = _entries(res.ptx)
    for name in names:
        assert res.lowered[name] in entries, name


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_keeps_ieee_float_arithmetic(arch):
    ptx = compiled(arch).ptx
    bad = re.findall(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b", ptx)
    assert not bad, sorted(set(bad))
    assert not re.findall(r"\bcvt(?:\.\w+)*\.ftz(?:\.\w+)*\.f16\b|\bcvt(?:\.\w+)*\.f16(?:\.\w+)*\.ftz\b",
                          ptx)
    # No FMA contraction: the only fma is common.cuh's reciprocal_div (inline PTX,
    # fma.rn.f32 without .ftz), in quantize_contig alone.
    outside = re.sub(r"// begin inline asm.*?// end inline asm", "", ptx, flags=re.S)
    assert not re.findall(r"\bfma\.", outside), "no FMA contraction"
    fmas = {e: len(re.findall(r"\bfma\.", body)) for e, (_, body) in _entries(ptx).items()}
    assert {e for e, k in fmas.items() if k} == {e for e in fmas if e.startswith("_Z15quantize_contig")}
    assert set(re.findall(r"\bfma(?:\.\w+)+", ptx)) == {"fma.rn.f32"}
    assert "div.rn.f32" in ptx and "div.full" not in ptx and "div.approx" not in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_register_only_and_vectorized(arch):
    res = compiled(arch)
    entries = _entries(res.ptx)
    assert ".local" not in res.ptx, "a kernel spills or keeps an array in local memory"
    sizes = {"int8": 1, "uint8": 1, "short": 2, "unsigned short": 2, "float16": 2, "int": 4, "unsigned int": 4,
             "float": 4}
    width = {4: r"(?:u|b|s)32", 8: r"v2\.\w+", 16: r"v4\.\w+"}  # bytes per access -> PTX
    for name, lowered in res.lowered.items():
        body = entries[lowered][1]
        if "_contig<" not in name:
            continue
        types = [t.strip() for t in name[name.index("<") + 1:-1].split(",")]
        if name.startswith("add_"):
            loads, stores = 16, 16
        else:  # (out, input) itemsizes: dequantize's vectors are 16 bytes of its wider output
            vec = ew.vec_width((sizes[types[1]], sizes[types[0]]))
            loads, stores = min(16, vec * sizes[types[0]]), min(16, vec * sizes[types[1]])
        assert re.search(rf"ld\.global\.nc\.{width[loads]}", body), (name, loads)
        assert re.search(rf"st\.global\.{width[stores]}", body), (name, stores)
        assert stores == 16, name  # every contig kernel stores whole 16-byte vectors


@pytest.mark.parametrize("arch", ARCHS)
def test_launch_arguments_match_kernel_parameters(arch):
    res = compiled(arch)
    entries = _entries(res.ptx)
    for name, args in _launch_cases():
        params = _ptx_params(entries[res.lowered[name]][0])
        kinds = [_arg_kind(a) for a in args]
        assert kinds == params, name


def test_constants_match_kernel_source():
    from dmlq.gpu import loader

    src = (loader.cuda_dir() / "elementwise.cu").read_text()

    def const(name):
        return int(re.search(rf"constexpr int {name} = (\d+);", src).group(1))

    assert const("kThreads") == ew.THREADS
    assert const("kUnroll") == ew.UNROLL
    assert const("kStridedUnroll") == ew.STRIDED_UNROLL
    assert const("kMaxDims") == ew.MAX_DIMS
    assert const("kOperands") == ew.SLOTS


def test_kernel_table_covers_every_dtype_combination():
    names = set(ew.KERNELS["elementwise.cu"])
    assert len(names) == len(ew.KERNELS["elementwise.cu"])
    for v in ew.VARIANTS:
        for wide in ((False, True) if v == "strided" else (False,)):
            for x, q in itertools.product(ew.QUANT_IN, ew.QUANT_OUT):
                assert ew.kernel_name("quantize", v, (x, q), wide) in names
            for i, o in itertools.product(ew.DEQUANT_IN, ew.DEQUANT_OUT):
                assert ew.kernel_name("dequantize", v, (i, o), wide) in names
            for t in itertools.product(ew.QUANT_OUT, repeat=3):
                assert (ew.kernel_name("add", v, t, wide) in names) == (v != "axis")


def test_import_does_not_touch_cupy():
    code = "import sys, dmlq.gpu.elementwise; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
