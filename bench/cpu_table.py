"""The README's CPU table from a pytest-benchmark JSON of bench/test_bench_cpu.py.

    python bench/cpu_table.py bench/results/cpu-<date>.json [reasons.json]

One row per group: dmlq's CPU backend, onnxruntime's CPU provider and the
reference, median time and peak memory (RSS above the inputs, one call in a
fresh process), and dmlq over onnxruntime. ``reasons.json`` maps a group to
the reason written next to a row over the 3x target.
"""
from __future__ import annotations

import json
import sys

IMPLS = ("dmlq:cpu", "peer:onnxruntime-cpu", "dmlq:reference")


def _ms(t):
    return "-" if t is None else (f"{t * 1e3:.1f} ms" if t >= 1e-3 else f"{t * 1e6:.0f} us")


def _mb(b):
    return "-" if b is None else f"{b / 2**20:.0f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def table(data, reasons=None):
    reasons = reasons or {}
    rows = {}
    for bench in data["benchmarks"]:
        info = bench.get("extra_info", {})
        rows.setdefault(bench["group"], {})[info.get("impl")] = (bench["stats"]["median"],
                                                                 info.get("peak_rss_bytes"))
    lines = ["| group | dmlq CPU | onnxruntime CPU | reference | dmlq / ORT | peak memory dmlq / ORT / reference | note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for group, r in rows.items():
        (t_d, m_d), (t_o, m_o), (t_r, m_r) = (r.get(i, (None, None)) for i in IMPLS)
        ratio = t_d / t_o if t_d and t_o else None
        note = reasons.get(group, "")
        if ratio is not None and ratio > 3 and not note:
            note = "**over 3x: reason missing**"
        lines.append(f"| {group} | {_ms(t_d)} | {_ms(t_o)} | {_ms(t_r)} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | {_mb(m_d)} / {_mb(m_o)} / {_mb(m_r)} | {note} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        data = json.load(f)
    reasons = {}
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            reasons = json.load(f)
    print(table(data, reasons))
