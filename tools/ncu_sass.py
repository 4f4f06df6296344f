#!/usr/bin/env python3
"""Where a kernel's executed instructions go, from Nsight Compute's source page (SASS).

    ncu ... -o REPORT --section SourceCounters PROGRAM          (on the device)
    ncu --import REPORT.ncu-rep --page source --print-source sass --csv > sass.csv
    python tools/ncu_sass.py sass.csv[.gz] [--top 10]

The page lists every SASS instruction of each profiled kernel with the warp-level executions
ncu counted ("Instructions Executed"). Per kernel this prints the total, the share of each
opcode, and the execution counts that hold most of the total: instructions sharing a count run
on the same path, so the counts are the kernel's trip counts, and a count k times the
once-a-warp count is a loop run k times per warp. That is how the H200 session of 2026-11-27
found avgpool_tile's dp4a masks computed by rolled loops (73 % of its instructions at 9 times
a warp's round: 3 window rows x 3 taps), which the static report had shown as "80 nested loops".
Runs anywhere (no GPU): the tools/gpu_session.sh profile stage writes the page, this reads it.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

EXECUTED = "Instructions Executed"


@dataclass
class Kernel:
    name: str
    rows: list = field(default_factory=list)  # (source text, executions)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.rows)


def opcode(source: str) -> str:
    """The opcode of one SASS line, its predicate guard (``@P0``, ``@!UP1``) skipped."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def parse(text: str) -> list:
    """[Kernel] of one source-page CSV: per kernel a ``"Kernel Name","..."`` line, a header row
    naming the columns, then one row per instruction."""
    kernels = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        first = next(csv.reader([lines[i]]))
        if first and first[0] == "Kernel Name":
            kernels.append(Kernel(first[1] if len(first) > 1 else "?"))
            i += 1
            header = next(csv.reader([lines[i]]))
            src, ex = header.index("Source"), header.index(EXECUTED)
        elif kernels:
            row = next(csv.reader(io.StringIO(lines[i])), [])
            if len(row) > max(src, ex) and row[ex].strip().isdigit():
                kernels[-1].rows.append((row[src].strip(), int(row[ex])))
        i += 1
    unique = []  # the page can list a kernel twice in a row (seen with ncu 2025.3): keep one
    for k in kernels:
        if not unique or (k.name, k.rows) != (unique[-1].name, unique[-1].rows):
            unique.append(k)
    return unique


def summary(k: Kernel, top: int = 10) -> str:
    total = k.total or 1
    ops = collections.Counter()
    counts = collections.Counter()  # executions -> instructions with that count
    for source, n in k.rows:
        ops[opcode(source)] += n
        if n:
            counts[n] += 1
    out = [f"== {k.name[:160]}", f"   executed warp instructions: {k.total:,} ({len(k.rows)} SASS instructions)",
           "   by opcode: " + ", ".join(f"{op} {n / total:.1%}" for op, n in ops.most_common(top))]
    out.append("   executions x instructions with that count = share:")
    for n, m in sorted(counts.items(), key=lambda t: -t[0] * t[1])[:top]:
        out.append(f"     {n:>14,} x {m:5d} = {n * m / total:6.1%}")
    return "\n".join(out)


def read(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return f.read()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="ncu's source page as CSV (.gz read as gzip)")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    kernels = parse(read(args.csv))
    if not kernels:
        print(f"ncu_sass: no kernel in {args.csv}", file=sys.stderr)
        return 1
    print("\n".join(summary(k, args.top) for k in kernels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
