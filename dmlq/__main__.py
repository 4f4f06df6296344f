"""The command line: ``python -m dmlq {info, check, bench}`` (also installed as ``dmlq``)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path
from typing import Optional, Sequence

DESCRIPTION = "dmlq: DirectML's quantized operators, bit-exact, on NumPy and NVIDIA GPUs."

COMMANDS = {
    "info": "Print the versions of Python, NumPy and CuPy, the CUDA driver, runtime and NVRTC, "
            "and each GPU, or say plainly that there is no GPU or driver.",
    "check": "Run the numeric contract's hand-worked edge cases through every backend present "
             "(NumPy arrays on the CPU backend; on a GPU also the CUDA kernels, plus every operator and dtype "
             "combination on random data); print what ran where and exit 1 on any mismatch.",
    "bench": "Time dmlq against same-run hardware limits and the peers present (CuPy, torch) "
             "on a GPU, as a quick table, from a dmlq checkout; without a GPU it says so and measures "
             "nothing.",
}


def info(args: Optional[argparse.Namespace] = None) -> int:
    import numpy as np

    import dmlq

    print(f"dmlq {dmlq.__version__}")
    print(f"Python {platform.python_version()} ({sys.executable})")
    print(f"NumPy {np.__version__}")
    from .check import gpu_report

    for line in gpu_report()[0]:
        print(line)
    return 0


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each command's own parser."""
    prog = "dmlq" if Path(sys.argv[0]).name == "dmlq" else "python -m dmlq"  # the console script, or -m
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, epilog=f"Run `{prog} <command> --help` for a command's options.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"dmlq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{info,check,bench}", title="commands")
    sub.required = True
    commands = {"info": sub.add_parser("info", help=COMMANDS["info"], description=COMMANDS["info"])}
    from . import check

    commands["check"] = sub.add_parser("check", help=COMMANDS["check"], description=COMMANDS["check"])
    check.add_arguments(commands["check"])
    commands["bench"] = sub.add_parser("bench", help=COMMANDS["bench"], description=COMMANDS["bench"] + (
        " It runs bench/quick.py of the checkout this dmlq is installed from (pip install -e .); the "
        "full suite is `python -m pytest bench --benchmark-json=<file>.json` there. Without a GPU it "
        "says so and writes no JSON."))
    _bench_arguments(commands["bench"])
    return parser, commands


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Unknown options and commands exit 2 with the usage of the parser they belong to (an
    option after a command is that command's: ``check --bogus`` prints check's usage);
    --help exits 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _parser()
    if args and all(a.startswith("-") and a not in ("-h", "--help", "--version") for a in args):  # options alone
        parser.error(f"unrecognized arguments: {' '.join(args)} (and no command: pass info, check or bench)")
    ns, extra = parser.parse_known_args(args)
    if extra:
        command = commands[ns.command]
        if args.index(extra[0]) < args.index(ns.command):
            command = parser  # an unknown option before the command is the top level's
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    return ns


# What `python -m dmlq ...` exits with when its reader goes away early (`... | head -2`):
# 128 + SIGPIPE, what a shell reports for a command the closed pipe stopped.
EXIT_BROKEN_PIPE = 141


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``python -m dmlq`` with ``argv`` (default: the command line); returns the exit status."""
    try:
        try:
            status = _command(_parse(argv))
        finally:
            sys.stdout.flush()  # a closed pipe shows here (also after --help), not at interpreter exit
    except BrokenPipeError:
        # The reader stopped (`| head`): no traceback. Point stdout at /dev/null so that the
        # interpreter's own flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return status


def _command(ns: argparse.Namespace) -> int:
    if ns.command == "info":
        return info(ns)
    if ns.command == "check":
        from .check import run

        return run(seed=ns.seed)
    return _bench(ns)


def _bench_arguments(parser) -> None:
    parser.add_argument("--only", default="", help="run only groups whose name contains this text")
    parser.add_argument("--variants", action="store_true", help="also time every forced kernel variant")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def bench_suite():
    """The checkout's bench/ (where this dmlq runs from one) as its ``quick`` module, or None:
    the benchmark code (workloads, peers, limits, timing) is not part of the installed package."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "bench" / "quick.py").is_file() or not (root / "pyproject.toml").is_file():
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench import quick

    return quick


def _bench(ns) -> int:
    quick = bench_suite()
    if quick is None:
        print(f"dmlq bench: the benchmark suite lives in bench/ of a dmlq checkout, and this dmlq "
              f"({Path(__file__).resolve().parent}) is installed without one; run `python -m dmlq bench` "
              "from a checkout (with dmlq installed from it, pip install -e .)", file=sys.stderr)
        return 1
    return quick.run(only=ns.only, variants=ns.variants, json_path=ns.json)


if __name__ == "__main__":
    sys.exit(main())
