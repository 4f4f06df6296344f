"""The command line: ``python -m dmlq {info, check, bench}`` (also installed as ``dmlq``)."""
from __future__ import annotations

import argparse
import platform
import sys

DESCRIPTION = "dmlq: DirectML's quantized operators, bit-exact, on NumPy and NVIDIA GPUs."

COMMANDS = {
    "info": "Print the versions of Python, NumPy and CuPy, the CUDA driver, runtime and NVRTC, "
            "and each GPU, or say plainly that there is no GPU or driver.",
    "check": "Run the numeric contract's hand-worked edge cases through every backend present "
             "(the NumPy reference; on a GPU also the CUDA kernels, plus every operator and dtype "
             "combination on random data); print what ran where and exit 1 on any mismatch.",
    "bench": "Time dmlq against same-run hardware limits and the peers present (CuPy, torch) "
             "on a GPU, as a quick table; without a GPU it says so and measures nothing.",
}


def info(args=None) -> int:
    import numpy as np

    import dmlq

    print(f"dmlq {dmlq.__version__}")
    print(f"Python {platform.python_version()} ({sys.executable})")
    print(f"NumPy {np.__version__}")
    from .check import gpu_report

    for line in gpu_report()[0]:
        print(line)
    return 0


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m dmlq", description=DESCRIPTION,
        epilog="Run `python -m dmlq <command> --help` for a command's options.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"dmlq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{info,check,bench}", title="commands")
    sub.required = True
    sub.add_parser("info", help=COMMANDS["info"], description=COMMANDS["info"])
    from . import bench, check

    check.add_arguments(sub.add_parser("check", help=COMMANDS["check"], description=COMMANDS["check"]))
    bench.add_arguments(sub.add_parser("bench", help=COMMANDS["bench"], description=COMMANDS["bench"] + (
        " The full suite is `python -m pytest bench --benchmark-json=<file>.json` from a checkout.")))
    return parser


def main(argv=None) -> int:
    ns = _parser().parse_args(argv)  # unknown options and commands exit 2, --help exits 0
    if ns.command == "info":
        return info(ns)
    if ns.command == "check":
        from .check import run

        return run(seed=ns.seed)
    from .bench import run as bench

    return bench(only=ns.only, variants=ns.variants, json_path=ns.json)


if __name__ == "__main__":
    sys.exit(main())
