"""``python -m dmlq bench``: a quick table of the quick groups against the
same-run limits, on a GPU (without one it says so and measures nothing). The
command (dmlq/__main__.py) parses the options and calls :func:`run` here, from
a checkout; an installed dmlq has no bench/ and says so.

The full suite is ``python -m pytest bench --benchmark-json=<file>.json``;
bench/report.py turns its JSON into the README's table.
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from bench.limits import gpu_status, machine_info, measure_limits
from bench.peers import Unavailable, free_memory, impl_names, prepare
from bench.timing import format_time, measure, result_info
from bench.workloads import quick_cases, unit_of


QUICK_HEADER = ["group", "implementation", "time", "achieved", "limit", "% of limit"]


def quick_table(entries):
    """One line per measured implementation, in the order measured (no cross-run summary:
    that is bench/report.py's job on a pytest-benchmark JSON)."""
    def num(v):
        return "-" if v is None else f"{v:,.1f}" if v >= 10 else f"{v:.3g}"

    cells = [QUICK_HEADER]
    for e in entries:
        info, group = e["extra_info"], e["group"]
        unit = unit_of(group)
        achieved = info.get("tops" if unit == "TOPS" else "gb_per_s")
        frac = info.get("fraction_of_limit")
        cells.append([group, info["impl"], format_time(e["stats"]["median"]), f"{num(achieved)} {unit}",
                      f"{num(info.get('limit'))} {unit}", "-" if frac is None else f"{100 * frac:.1f}%"])
    widths = [max(len(c[i]) for c in cells) for i in range(len(QUICK_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_quick(cases, *, variants=False, rounds=5, log=print):
    """Measure ``cases`` (dmlq:auto and the peers unless ``variants``); returns (limits, entries)."""
    limits = measure_limits(quick=True)
    entries = []
    for case in cases:
        for impl in impl_names(case, variants=variants):
            seed = np.random.SeedSequence().entropy % 2**32
            try:
                prep = prepare(case, impl, limits, seed)
            except Unavailable as e:
                log(f"  skip {case.group} {impl}: {e}")
                continue
            import cupy

            ctx = prep.stream if prep.stream is not None else cupy.cuda.get_current_stream()
            with ctx:
                times = measure(prep.fn, rounds=rounds if case.rounds <= 10 else 20, warmup=1,
                                round_s=min(case.round_s, 0.01))
            t = statistics.median(times)
            entries.append({"group": case.group, "stats": {"median": t, "min": min(times)},
                            "extra_info": result_info(impl, prep.bytes, prep.ops, t, prep.limit, case.unit)})
            del prep
            free_memory()
    return limits, entries


def run(only="", variants=False, json_path=None) -> int:
    """``python -m dmlq bench``: a quick table of the quick groups against the same-run limits."""
    ok, why = gpu_status()
    if not ok:
        print(f"dmlq bench: {why}; nothing to measure (the benchmarks need a CUDA GPU).")
        return 0
    cases = [c for c in quick_cases() if only in c.group]
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    limits, entries = run_quick(cases, variants=variants, log=log)
    info = machine_info(limits)
    lim = limits.as_dict()
    print(f"{info['gpu']} (sm_{info['compute_capability'].replace('.', '')}), driver {info['driver']}, "
          f"CUDA runtime {info['cuda_runtime']}, CuPy {info['cupy']}, torch {info['torch'] or 'absent'}; "
          f"{info['date']}")
    tc = lim["int8_tc_tops"]
    print(f"limits: copy {lim['copy_gb_per_s']:,.0f} GB/s; int8 tensor cores "
          f"{'unknown' if tc is None else f'{tc:,.0f} TOPS'} ({lim['int8_tc_source']}); "
          f"dp4a {'unknown' if lim['dp4a_tops'] is None else format(lim['dp4a_tops'], ',.0f') + ' TOPS'}")
    print()
    print(quick_table(entries))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine_info": info, "benchmarks": entries}, f, indent=2)
    return 0
