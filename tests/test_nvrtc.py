"""Every kernel and template instantiation compiles through NVRTC, no GPU needed.

Options are CuPy's (ours plus its -ftz=true); the log must be empty (no
warnings) and the PTX must show no flush-to-zero float arithmetic, which would
break bit-exactness on subnormals. sm_90's program is the static report's (one
compile per source gives the cubin, its ptxas -v log and this PTX:
prebuild.compiled), started ahead by the session's build pool (PREBUILT_PTX).

sm_80 (A100) goes through NVRTC's front end only (dmlq.gpu.nvrtc.FRONT_END_OPTION:
every instantiation, its lowered name, every arch-gated declaration and attribute
for sm_80, about 1 % of a full compile's CPU), and its code generation is checked by
what it rests on: the sources hold no __CUDA_ARCH__ (NVVM gets the same program for
either arch), every asm statement is a DMLQ_PTX one (cuda/ptx.cuh) whose instruction
the PTX ISA gives to sm_80 (PTX_MIN_SM below), and sm_90's full compile passes. A full
sm_80 compile (NVVM and ptxas, about 245 s of CPU for the nine sources) measured its PTX
identical to sm_90's but for the .target line; DMLQ_NVRTC_FULL=1 compiles it in full
again and compares.
"""
import os
import re

import pytest

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

import prebuild  # noqa: E402
from dmlq.gpu import loader, nvrtc  # noqa: E402

SOURCES = sorted(loader.registry())
STATIC_ARCH = "sm_90"  # the static report's full compile
PREBUILT_PTX = [(s, STATIC_ARCH) for s in SOURCES]
FTZ_ARITH = re.compile(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b")
FULL = os.environ.get("DMLQ_NVRTC_FULL") == "1"

# Every inline PTX instruction the sources may use (the host harness's PTX interpreter
# takes these and nothing else: tests/cuda_host/cuda_host_ptx.h), with the oldest target
# the PTX ISA (9.x, each instruction's "Target ISA notes") gives it.
PTX_MIN_SM = {
    r"(?:add|sub|mul|div)\.rn\.f32": 20,
    r"fma\.rn\.f32": 20,
    r"cvt\.f32\.f16": 20,
    r"cvt\.rn\.f16\.f32": 20,
    r"mov\.u32": 10,
    r"dp4a\.[su]32\.[su]32": 61,
    r"ldmatrix\.sync\.aligned\.m8n8\.x[124](?:\.trans)?\.shared(?:::cta)?\.b16": 75,
    r"cp\.async\.c[ag]\.shared(?:::cta)?\.global": 80,
    r"cp\.async\.(?:commit_group|wait_group|wait_all)": 80,
    r"mma\.sync\.aligned\.m16n8k(?:16|32)\.row\.col\.s32\.[su]8\.[su]8\.s32": 80,
    # sm_90a only (matmul_wgmma.cu: loader.MIN_CC 90, built with -arch=sm_90a)
    r"wgmma\.(?:fence|commit_group|wait_group)\.sync\.aligned": 90,
    r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.s32\.[su]8\.[su]8": 90,
    r"fence\.proxy\.async\.shared::cta": 90,
}
SPECIAL_REGISTER_MIN_SM = {"dynamic_smem_size": 20, "laneid": 10, "warpid": 10}  # read by mov.u32


def test_every_source_file_is_registered():
    on_disk = {p.name for p in loader.cuda_dir().glob("*.cu")}
    assert on_disk == set(SOURCES), "a .cu file is not listed in any KERNELS table (or vice versa)"


@pytest.mark.parametrize("source", SOURCES)
def test_compiles_clean(source):
    names = loader.registry()[source]
    assert names, f"{source} lists no kernels"
    result = prebuild.compiled(source, STATIC_ARCH)
    assert result.log == "", result.log
    assert set(result.lowered) == set(names)
    for name, lowered in result.lowered.items():
        assert f".entry {lowered}(" in result.ptx or f".entry {lowered} (" in result.ptx, name
    bad = sorted(set(FTZ_ARITH.findall(result.ptx)))
    assert not bad, f"flush-to-zero float arithmetic in {source}: {bad}"


def _code(ptx: str):
    """PTX without its header lines and comments (the .target line names the arch), the
    names NVRTC gives internal-linkage symbols (a hash of each compile's own) made one."""
    internal = re.compile(r"_ZN\d+_INTERNAL_\w*?_cu_[0-9a-f]{8}_\d+")
    return [internal.sub("_ZN_INTERNAL_", line) for line in ptx.splitlines()
            if not line.startswith((".target", ".version", "//"))]


@pytest.mark.parametrize("arch", [a for a in nvrtc.ARCHS if a != STATIC_ARCH])
@pytest.mark.parametrize("source", SOURCES)
def test_compiles_clean_for_older_arch(source, arch):
    if int(arch[3:]) < loader.MIN_CC.get(source, 0):
        pytest.skip(f"{source} is built for compute capability {loader.MIN_CC[source]} and up only")
    names = loader.registry()[source]
    result = nvrtc.compile_source(source, arch, front_end=not FULL)
    full = prebuild.compiled(source, STATIC_ARCH)
    assert result.log == "", result.log
    assert set(result.lowered) == set(names)
    assert result.lowered == full.lowered
    if FULL:
        assert _code(result.ptx) == _code(full.ptx), \
            f"{source}: {arch}'s PTX differs from {STATIC_ARCH}'s (the front-end-only check no longer suffices)"


def _asm_statements():
    """(source file, instruction text) of every asm statement under cuda/; a macro's
    parameter pasted into the text (matmul_mma.cu's DMLQ_MMA_K32(ta, tb): "s8" or "u8")
    comes out as each of those operand types."""
    found = []
    for path in sorted(loader.cuda_dir().glob("*.cu*")):
        text = path.read_text()
        if path.name == "ptx.cuh":  # the macros' definitions
            continue
        assert not re.search(r"\basm\b", text), f"{path.name}: asm outside DMLQ_PTX (cuda/ptx.cuh)"
        for m in re.finditer(r'DMLQ_PTX(?:_MEM)?\(\s*((?:"[^"]*"|[A-Za-z_]\w*|\s|\\)+),', text):
            pieces = re.findall(r'"([^"]*)"|([A-Za-z_]\w*)', m.group(1))
            forms = [""]
            for literal, param in pieces:
                forms = [f + (literal if not param else t) for f in forms for t in ((None,) if not param else ("s8", "u8"))]
            found += [(path.name, f.strip()) for f in forms]
    return found


def test_sources_leave_nothing_to_the_arch():
    for path in sorted(loader.cuda_dir().glob("*.cu*")):
        assert "__CUDA_ARCH__" not in path.read_text(), f"{path.name} branches on the arch"
    statements = _asm_statements()
    assert len(statements) >= 15, statements  # the scan finds them (17 at the time of writing)
    oldest = min(int(a[3:]) for a in nvrtc.ARCHS)
    for source, text in statements:
        instr = text.split()[0].rstrip(";")
        needs = [sm for pat, sm in PTX_MIN_SM.items() if re.fullmatch(pat, instr)]
        assert needs, f"{source}: {instr!r} is not in PTX_MIN_SM (look up its target in the PTX ISA)"
        floor = max(oldest, loader.MIN_CC.get(source, 0))  # a source built for newer devices only
        assert max(needs) <= floor, f"{source}: {instr} needs sm_{max(needs)}, past sm_{floor}"
        for reg in re.findall(r"%%(\w+)", text):
            assert SPECIAL_REGISTER_MIN_SM.get(reg, 10**9) <= floor, f"{source}: %{reg} (look it up in the PTX ISA)"


def test_an_arch_gated_declaration_fails_the_front_end():
    """The front-end-only compile does refuse what sm_80 lacks (here a cluster attribute
    and a cluster barrier, sm_90's), so it is a check and not a formality."""
    from cupy_backends.cuda.libs import nvrtc as lib

    bad = 'template <class T> __global__ void __cluster_dims__(2, 1, 1) k(T* p) { __cluster_barrier_arrive(); }\n'
    options = [*loader.COMPILE_OPTIONS, *loader.CUPY_ADDED_OPTIONS, nvrtc.FRONT_END_OPTION]
    for arch, ok in (("sm_80", False), ("sm_90", True)):
        prog = lib.createProgram(bad, "t.cu", [], [])
        try:
            lib.addNameExpression(prog, "k<int>")
            try:
                lib.compileProgram(prog, [*options, f"--gpu-architecture={arch}"])
                passed = True
            except lib.NVRTCError:
                passed = False
            assert passed is ok, (arch, lib.getProgramLog(prog))
        finally:
            lib.destroyProgram(prog)


def test_line_markers_point_at_real_files():
    for source in SOURCES:
        text = loader.source_text(source)
        assert text.startswith(f'#line 1 "{source}"')
        assert '#include "common.cuh"' not in text  # inlined by the loader


def test_results_are_cached_on_disk_by_source_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLQ_NVRTC_CACHE", str(tmp_path))
    nvrtc._compile.cache_clear()
    names = ("matmul_row_sums<int8>",)
    first = nvrtc.compile_source("matmul_dp4a.cu", "sm_80", names)
    assert len(list(tmp_path.glob("matmul_dp4a-sm_80-*.json"))) == 1
    nvrtc._compile.cache_clear()
    monkeypatch.setattr(nvrtc, "_compile_now", lambda *a: pytest.fail("recompiled despite the cache"))
    assert nvrtc.compile_source("matmul_dp4a.cu", "sm_80", names) == first
    nvrtc._compile.cache_clear()
    with pytest.raises(pytest.fail.Exception):  # another arch is another key: it compiles
        nvrtc.compile_source("matmul_dp4a.cu", "sm_90", names)
    nvrtc._compile.cache_clear()
