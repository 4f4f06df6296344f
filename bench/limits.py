"""Same-run limits for the benchmark suite: measured once per pytest session.

The formulas and the copy measurement live in dmlq.bench (shared with
`python -m dmlq bench`); this module caches them for the session so every
result and the JSON's machine_info carry the same figures.

    python bench/limits.py     # print this device's limits as JSON
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

try:
    from dmlq import bench as B
except ImportError:  # run from a checkout without PYTHONPATH: the repo root is bench/..
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dmlq import bench as B

_limits = None


def get():
    """The session's Limits, measured on first use (copy bandwidth takes about a second)."""
    global _limits
    if _limits is None:
        _limits = B.measure_limits()
    return _limits


def current():
    """The Limits measured so far in this session, or None."""
    return _limits


def main() -> int:
    ok, why = B.gpu_status()
    if not ok:
        print(f"no limits to measure: {why}")
        return 0
    print(json.dumps({"machine_info": B.machine_info(get())}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
