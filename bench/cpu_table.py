"""The README's CPU table from a pytest-benchmark JSON of bench/test_bench_cpu.py.

    python bench/cpu_table.py bench/results/cpu-<date>.json [reasons.json]

One row per group: dmlq's CPU backend, onnxruntime's CPU provider and the
reference, median time (and the fastest round: on a shared machine the least
disturbed) and peak memory (RSS above the inputs, one call in a
fresh process), and dmlq over onnxruntime; for the element-wise groups also
dmlq's NumPy path (numba's kernels off: a lean install) over onnxruntime and both on one
thread (dmlq, one thread / onnxruntime, one thread). ``reasons.json`` maps a group to
the reason written next to a row over the 3x target.
"""
from __future__ import annotations

import json
import sys

IMPLS = ("dmlq:cpu", "peer:onnxruntime-cpu", "dmlq:reference", "dmlq:cpu-numpy", "dmlq:cpu-1thread",
         "peer:onnxruntime-cpu-1thread")


def _ms(t):
    return "-" if t is None else (f"{t * 1e3:.1f} ms" if t >= 1e-3 else f"{t * 1e6:.0f} us")


def _mb(b):
    return "-" if b is None else f"{b / 2**20:.0f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def table(data, reasons=None):
    reasons = reasons or {}
    rows = {}
    for bench in data["benchmarks"]:
        info = bench.get("extra_info", {})
        stats = bench["stats"]
        rows.setdefault(bench["group"], {})[info.get("impl")] = ((stats["median"], stats["min"]),
                                                                 info.get("peak_rss_bytes"))
    lines = ["| group | dmlq CPU | onnxruntime CPU | reference | dmlq / ORT | NumPy path / ORT "
             "| one thread: dmlq / ORT | peak memory dmlq / ORT / reference | note |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    none = ((None, None), None)
    for group, r in rows.items():
        (t_d, m_d), (t_o, m_o), (t_r, m_r), (t_n, _), (t_d1, _), (t_o1, _) = (r.get(i, none) for i in IMPLS)
        ratio = _ratio(t_d, t_o)
        note = reasons.get(group, "")
        if t_d[0] and t_o[0] and max(t_d[0] / t_o[0], t_d[1] / t_o[1]) > 3 and not note:
            note = "**over 3x: reason missing**"
        lines.append(f"| {group} | {_times(t_d)} | {_times(t_o)} | {_times(t_r)} | {ratio} | {_ratio(t_n, t_o)} | "
                     f"{_ratio(t_d1, t_o1)} | {_mb(m_d)} / {_mb(m_o)} / {_mb(m_r)} | {note} |")
    return "\n".join(lines)


def _times(t):
    """median (min)"""
    return "-" if t[0] is None else f"{_ms(t[0])} ({_ms(t[1])})"


def _ratio(t, peer):
    """median over median (min over min)"""
    if not t[0] or not peer[0]:
        return "-"
    return f"{t[0] / peer[0]:.2f}x ({t[1] / peer[1]:.2f}x)"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        data = json.load(f)
    reasons = {}
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            reasons = json.load(f)
    print(table(data, reasons))
