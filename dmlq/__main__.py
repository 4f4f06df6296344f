"""python -m dmlq {info, check, bench}"""
from __future__ import annotations

import argparse
import sys


def info() -> int:
    import numpy as np

    import dmlq

    print(f"dmlq {dmlq.__version__}")
    print(f"numpy {np.__version__}")
    try:
        import cupy
    except ImportError:
        print("cupy: not installed (pip install 'dmlq[cuda13]' or 'dmlq[cuda12]')")
        print("GPU: none (no CuPy)")
        return 0
    print(f"cupy {cupy.__version__}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        for i in range(count):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            print(f"GPU {i}: {name}, compute capability {props['major']}.{props['minor']}, "
                  f"{props['multiProcessorCount']} SMs")
        print(f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}")
        if count == 0:
            print("GPU: none")
    except Exception as e:
        print(f"GPU: none ({type(e).__name__}: {str(e).splitlines()[0]})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dmlq", description=__doc__)
    parser.add_argument("command", choices=("info", "check", "bench"))
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.command == "info":
        return info()
    if ns.command == "check":
        from .check import main as check

        return check(ns.rest)
    from .bench import main as bench

    return bench(ns.rest)


if __name__ == "__main__":
    sys.exit(main())
