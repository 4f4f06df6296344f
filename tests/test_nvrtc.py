"""Every kernel and template instantiation compiles through NVRTC, no GPU needed.

Options are CuPy's (ours plus its -ftz=true); the log must be empty (no
warnings) and the PTX must show no flush-to-zero float arithmetic, which would
break bit-exactness on subnormals. sm_90's program is the static report's (one
compile per source gives the cubin, its ptxas -v log and this PTX:
prebuild.compiled); the session's build pool starts the others ahead (PREBUILT_PTX).
"""
import re

import pytest

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

import prebuild  # noqa: E402
from dmlq.gpu import loader, nvrtc  # noqa: E402

SOURCES = sorted(loader.registry())
PREBUILT_PTX = [(s, a) for s in SOURCES for a in nvrtc.ARCHS]
FTZ_ARITH = re.compile(r"\b(?:div|mul|add|sub|fma|rcp)(?:\.\w+)*\.ftz(?:\.\w+)*\.f32\b")


def test_every_source_file_is_registered():
    on_disk = {p.name for p in loader.cuda_dir().glob("*.cu")}
    assert on_disk == set(SOURCES), "a .cu file is not listed in any KERNELS table (or vice versa)"


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("source", SOURCES)
def test_compiles_clean(source, arch):
    names = loader.registry()[source]
    assert names, f"{source} lists no kernels"
    result = prebuild.compiled(source, arch)
    assert result.log == "", result.log
    assert set(result.lowered) == set(names)
    for name, lowered in result.lowered.items():
        assert f".entry {lowered}(" in result.ptx or f".entry {lowered} (" in result.ptx, name
    bad = sorted(set(FTZ_ARITH.findall(result.ptx)))
    assert not bad, f"flush-to-zero float arithmetic in {source}: {bad}"


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
