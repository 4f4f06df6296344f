"""`python -m dmlq`: help texts, exit codes, and honest info/check output (issue 14)."""
import os
import subprocess
import sys
import types

import pytest

import dmlq
from dmlq import __main__ as cli
from dmlq import check

from conftest import gpu_available


def _run(*args):
    return subprocess.run([sys.executable, "-m", "dmlq", *args], capture_output=True, text=True, timeout=300)


def test_top_level_help_explains_each_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for name, sentence in cli.COMMANDS.items():
        assert name in out
        assert " ".join(sentence.split())[:60] in out, name


@pytest.mark.parametrize("command", ["info", "check", "bench"])
def test_subcommand_help_prints_help_and_runs_nothing(capsys, command):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m dmlq {command}")
    assert "passed" not in out and "failed" not in out  # the check did not run


@pytest.mark.parametrize("argv", [["check", "--bogus"], ["info", "--verbose"], ["bench", "--nope"], ["frobnicate"],
                                  [], ["check", "extra"]])
def test_unknown_options_and_commands_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_an_unknown_option_without_a_command_is_named(capsys):
    """``python -m dmlq --bogus`` named no option before ("the following arguments are required"):
    the unknown option is named, and the missing command with it."""
    with pytest.raises(SystemExit) as e:
        cli.main(["--bogus", "-x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("usage: python -m dmlq [-h]")
    assert "error: unrecognized arguments: --bogus -x (and no command: pass info, check or bench)" in err


def test_unknown_option_exit_code_from_the_shell():
    r = _run("check", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr


def test_check_says_what_it_checked_where_and_which_kernels(capsys):
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "edge cases of the numeric contract" in out and "docs/semantics.md" in out
    assert "device:" in out and "backends checked: numpy" in out
    assert " 0 failed" in out
    if not gpu_available():
        assert "kernel variants exercised: none -- no GPU, so no CUDA kernel was compiled or run" in out
        assert "compiled" not in out.replace("was compiled", "")  # no claim that kernels were compiled
        # the edge cases ran through the public functions on NumPy arrays: dmlq.cpu, not the reference alone
        assert "only NumPy arrays (the CPU backend) were checked" in out and "NumPy reference was checked" not in out
    else:
        assert "kernel variants exercised (" in out


def test_check_from_the_shell():
    r = _run("check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout and "device:" in r.stdout


def test_info_names_every_version(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for word in ("dmlq ", "Python ", "NumPy ", "GPU"):
        assert word in out
    if not gpu_available():
        assert "cudaErrorInsufficientDriver" not in out
        assert "GPU: none" in out


def _fake_cupy(monkeypatch, *, driver, runtime=13020, count=1, count_error=None):
    props = {"name": b"Fake H100", "major": 9, "minor": 0, "multiProcessorCount": 132, "totalGlobalMem": 80 << 30}

    def device_count():
        if count_error:
            raise count_error
        return count

    runtime_mod = types.SimpleNamespace(runtimeGetVersion=lambda: runtime, driverGetVersion=lambda: driver,
                                        getDeviceCount=device_count, getDeviceProperties=lambda i: props)
    fake = types.SimpleNamespace(__version__="99.0", cuda=types.SimpleNamespace(
        runtime=runtime_mod, nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0))))
    monkeypatch.setitem(sys.modules, "cupy", fake)


def test_gpu_report_without_a_driver_says_so_plainly(monkeypatch):
    _fake_cupy(monkeypatch, driver=0, count_error=RuntimeError("cudaErrorInsufficientDriver: misleading"))
    lines, gpus, why = check.gpu_report()
    text = "\n".join(lines)
    assert gpus == 0 and why == "no NVIDIA driver on this machine"
    assert "CUDA driver: none" in text and "GPU: none (no driver)" in text
    assert "InsufficientDriver" not in text
    assert "CuPy 99.0" in text and "CUDA runtime 13.2" in text and "NVRTC 13.0" in text


def test_gpu_report_with_an_old_driver_names_both_versions(monkeypatch):
    _fake_cupy(monkeypatch, driver=12040, runtime=13000)
    lines, gpus, why = check.gpu_report()
    assert gpus == 0 and "older" in why
    assert any("supports CUDA up to 12.4, older than CuPy's runtime 13.0" in line for line in lines)


def test_gpu_report_takes_a_newer_runtime_of_the_drivers_major_version(monkeypatch):
    # the first H100 session: driver 13.0, CuPy's runtime 13.2; every kernel ran, while this
    # report called the GPU unusable (so `dmlq check` and the benchmarks skipped the device)
    _fake_cupy(monkeypatch, driver=13000, runtime=13020, count=1)
    lines, gpus, why = check.gpu_report()
    assert gpus == 1 and why == ""
    assert any("minor-version compatibility" in line for line in lines)
    assert not any("unusable" in line for line in lines)


def test_gpu_report_lists_gpus(monkeypatch):
    _fake_cupy(monkeypatch, driver=13020, count=1)
    lines, gpus, why = check.gpu_report()
    assert gpus == 1 and why == ""
    assert "GPU 0: Fake H100, compute capability 9.0, 132 SMs, 80 GiB" in lines
    assert "CUDA driver 13.2 (the newest CUDA version it supports)" in lines


def test_gpu_report_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    lines, gpus, why = check.gpu_report()
    assert gpus == 0 and why == "CuPy is not installed" and "GPU: none (no CuPy)" in lines


def test_gpu_report_with_a_broken_cupy_says_it_cannot_be_imported(monkeypatch, tmp_path):
    """CuPy installed but failing to import (a missing CUDA library, two cupy-cuda wheels) is
    not "not installed": the report names the error."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('CuPy failed to load libnvrtc.so.12')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    lines, gpus, why = check.gpu_report()
    assert gpus == 0 and why == "CuPy cannot be imported", (lines, why)
    assert "CuPy: cannot be imported (ImportError: CuPy failed to load libnvrtc.so.12)" in lines
    (tmp_path / "cupy" / "__init__.py").write_text("import cupy_backends_missing_piece\n")
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    lines, gpus, why = check.gpu_report()
    assert why == "CuPy cannot be imported" and "cupy_backends_missing_piece" in lines[0]


def test_plan_lines_count_calls_per_distinct_plan():
    from dmlq.gpu.plan import Launch, Plan

    small = Plan("quantize_linear", "contig", (Launch("elementwise.cu", "quantize_contig<float, int8>", (4,), (256,)),))
    mm = Plan("quantized_matmul", "mma-128x128",
              (Launch("matmul_mma.cu", "matmul_mma<int8, int8, int8, 128, 128, 64, 4, 16>", (1, 1, 1), (128,), 65536),),
              ("split-K: 2 splits of 64",))
    lines = check._plan_lines([small, mm, small])
    assert lines[0].startswith("kernel plans run: 3 calls, 2 distinct plans, 2 operator variants")
    assert "quantize_linear:contig" in lines[0] and "quantized_matmul:mma-128x128" in lines[0]
    assert "  quantize_linear: contig  [2 calls]" in lines
    assert "  quantized_matmul: mma-128x128 (split-K: 2 splits of 64)  [1 call]" in lines
    assert any("dynamic smem 65536 B" in line for line in lines)
    assert check._plan_lines([]) == ["kernel plans run: none"]


def test_check_without_a_gpu_prints_the_plans_a_gpu_would_run(capsys):
    if gpu_available():
        pytest.skip("with a GPU, check prints the plans it ran")
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "nominal H100" in out and "planning failed" not in out
    for variant in ("quantize_linear: contig", "quantize_linear: axis", "dequantize_linear: strided",
                    "quantized_add: table", "quantized_matmul: mma-128x128 (split-K",
                    "quantized_matmul: stream-m1 (b: 16-byte loads of its rows",
                    "quantized_matmul: dp4a-wide", "quantized_avg_pool: tile_k2s2", "quantized_avg_pool: global_warp",
                    "quantized_avg_pool: general"):
        assert variant in out, variant
    # M = 16 with a's zero point: the stream kernel (the tiles would first sum b's columns)
    assert "matmul_integer_to_float: stream-m16" in out
    assert "quantized_matmul: stream-m16" in out and "matmul_sums_combine<256>" in out  # M = 64: split column sums


# ---- issue 28: the next things a new user tries --------------------------------------------------

@pytest.mark.parametrize("argv, usage", [(["check", "--bogus"], "usage: python -m dmlq check "),
                                         (["bench", "--nope"], "usage: python -m dmlq bench "),
                                         (["info", "extra"], "usage: python -m dmlq info"),
                                         (["--bogus", "check"], "usage: python -m dmlq [-h]")])
def test_unknown_option_prints_the_usage_of_its_command(capsys, argv, usage):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert f"unrecognized arguments: {argv[1] if argv[0] != '--bogus' else '--bogus'}" in err


@pytest.mark.parametrize("unbuffered", ["", "1"])
@pytest.mark.parametrize("args", [("info",), ("check",), ("--help",)])
def test_a_reader_that_stops_early_gets_no_traceback(args, unbuffered):
    # `python -m dmlq info | head -2`: the pipe's read end is closed before the command writes,
    # so every write fails (deterministically, whatever the buffering).
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run([sys.executable, "-m", "dmlq", *args], stdout=write, stderr=subprocess.PIPE,
                           text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": unbuffered})
    finally:
        os.close(write)
    # (argparse drops a failed write of --help itself and exits 0 when stdout is unbuffered)
    assert r.returncode in ((0, cli.EXIT_BROKEN_PIPE) if args == ("--help",) else (cli.EXIT_BROKEN_PIPE,)), r.stderr
    assert r.stderr == ""


def test_compile_all_without_a_gpu_is_a_dmlq_error(monkeypatch):
    _fake_cupy(monkeypatch, driver=0, count_error=RuntimeError("cudaErrorInsufficientDriver: misleading"))
    with pytest.raises(dmlq.UnsupportedError, match=r"compile_all: no GPU to compile the CUDA kernels for "
                                                     r"\(no NVIDIA driver on this machine\); .*NumPy arrays need "
                                                     r"no kernels") as e:
        dmlq.compile_all()
    assert "insufficient" not in str(e.value).lower()
    monkeypatch.setitem(sys.modules, "cupy", None)  # no CuPy at all (the lean install)
    with pytest.raises(dmlq.UnsupportedError, match=r"\(CuPy is not installed\).*pip install -e"):
        dmlq.compile_all()


def test_compile_all_without_a_gpu_from_a_fresh_process():
    if gpu_available():
        pytest.skip("a GPU is present: compile_all compiles")
    r = subprocess.run([sys.executable, "-c", "import dmlq; dmlq.compile_all()"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1
    assert "dmlq.errors.UnsupportedError: compile_all: no GPU" in r.stderr
    assert "insufficient" not in r.stderr.lower()


@pytest.mark.parametrize("argv0,prog", [("/usr/local/bin/dmlq", "dmlq"),
                                        ("/x/site-packages/dmlq/__main__.py", "python -m dmlq")])
def test_usage_names_the_command_as_it_was_run(monkeypatch, capsys, argv0, prog):
    """The console script says `dmlq`, `python -m dmlq` says that (both in --help and errors)."""
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} [-h]")
    with pytest.raises(SystemExit):
        cli.main(["check", "--bogus"])
    assert f"usage: {prog} check" in capsys.readouterr().err
